//! The layout of `copier -h` and `--help`: every flag of [`super::CopierArgs`] under one
//! heading, and a short help line (the first sentence) in `-h`, the whole text in `--help`.
//!
//! Applied to the derived command by `#[command(mut_args = help::arrange)]` on the struct, so
//! a new flag needs only its line in [`HEADINGS`] (a test fails while one has none).

use clap::Arg;

/// The headings, in the order `--help` shows them, with the ids (field names) of their flags.
pub const HEADINGS: &[(&str, &[&str])] = &[
    (
        "Capture",
        &[
            "interface",
            "offline",
            "mirror",
            "vni",
            "speed",
            "loops",
            "max_gap",
            "from",
            "until",
            "ring_block_size",
            "ring_blocks",
            "ring_start_blocks",
            "workers",
        ],
    ),
    (
        "Targets",
        &[
            "maps",
            "intercepts",
            "secret_file",
            "no_secret",
            "intercept_for",
            "fleet",
            "mtu",
            "gso",
            "target_down_after",
            "target_retry",
            "target_max_live",
            "target_slow_after",
            "target_fail_rate",
        ],
    ),
    (
        "Copies and shaping",
        &[
            "client_ip",
            "copies",
            "sample",
            "profile",
            "target_rate",
            "max_factor",
            "seed",
        ],
    ),
    (
        "Pacing",
        &[
            "pacing",
            "no_pacing",
            "pace_window",
            "ack_delay",
            "record_wait",
            "open_wait",
        ],
    ),
    (
        "Rules and archive",
        &[
            "rules",
            "record",
            "record_size",
            "record_files",
            "record_max_age",
        ],
    ),
    (
        "Comparison",
        &[
            "compare",
            "compare_sample",
            "compare_ignore",
            "baseline_maps",
            "compare_redact",
            "compare_log",
            "compare_log_size",
            "compare_log_keep",
            "compare_log_sample",
            "compare_bytes",
            "compare_timeout",
            "compare_memory",
        ],
    ),
    (
        "Limits",
        &[
            "max_memory",
            "session_buffer",
            "max_sessions",
            "max_pending_syns",
            "syn_timeout",
            "session_timeout",
            "idle_timeout",
            "unproven_timeout",
        ],
    ),
    (
        "Metrics and logs",
        &["metrics", "verbose", "trace", "trace_every"],
    ),
];

/// The heading of a flag (by its id), if it has one.
#[must_use]
pub fn heading_of(id: &str) -> Option<&'static str> {
    HEADINGS
        .iter()
        .find(|(_, ids)| ids.contains(&id))
        .map(|(h, _)| *h)
}

/// Puts a flag under its heading and keeps its `-h` line to the first sentence (the whole
/// text stays for `--help`).
pub fn arrange(a: Arg) -> Arg {
    let a = match (a.get_help_heading(), heading_of(a.get_id().as_str())) {
        (None, Some(h)) => a.help_heading(h),
        _ => a,
    };
    if a.get_long_help().is_some() {
        return a;
    }
    let Some(help) = a.get_help().map(ToString::to_string) else {
        return a;
    };
    match first_sentence(&help) {
        Some(short) => a.help(short).long_help(help),
        None => a,
    }
}

/// The first sentence of a text when more follows (`e.g.` and `i.e.` do not end one).
fn first_sentence(text: &str) -> Option<String> {
    let mut from = 0;
    while let Some(i) = text[from..].find(". ") {
        let end = from + i;
        let before = &text[..end];
        if !(before.ends_with("e.g")
            || before.ends_with("i.e")
            || before.ends_with("etc")
            || before.ends_with('.'))
        {
            return Some(text[..=end].to_string());
        }
        from = end + 2;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sentences() {
        assert_eq!(first_sentence("One. Two."), Some("One.".into()));
        assert_eq!(
            first_sentence("Serve on this (e.g. 1.2.3.4). More."),
            Some("Serve on this (e.g. 1.2.3.4).".into())
        );
        assert_eq!(first_sentence("Only one."), None);
        assert_eq!(first_sentence("With --offline: ... and before."), None);
    }
}
