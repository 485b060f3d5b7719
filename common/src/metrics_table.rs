//! The shape of a daemon's metrics table: every metric it exports declared once, with its kind,
//! unit, labels and help text, by [`metrics_table!`](crate::metrics_table!).
//!
//! Owns: [`MetricDef`] and the macro that turns one declaration per metric into a name constant
//! (whose doc comment is the help text) and an entry of the daemon's table. The daemon's
//! `describe()` walks the table ([`describe`], feature `metrics`); the tests that keep the docs and
//! the Grafana dashboard true read it too. A name is in exactly one table entry.

/// What a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up (or is set to an absolute value that only goes up).
    Counter,
    /// A value now.
    Gauge,
    /// A distribution of samples in buckets.
    Histogram,
}

/// The unit a metric is described with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricUnit {
    /// Bytes.
    Bytes,
    /// Seconds.
    Seconds,
}

/// One metric of a daemon: everything said about it, said once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDef {
    /// The exported name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// The unit it is described with, if any.
    pub unit: Option<MetricUnit>,
    /// The labels the daemon records it with (besides a `worker` label that a recorder may add).
    pub labels: &'static [&'static str],
    /// The help text (`# HELP`).
    pub help: &'static str,
}

/// The first unit of `units` (the macro's optional unit), if any.
#[doc(hidden)]
#[must_use]
pub const fn first_unit(units: &[MetricUnit]) -> Option<MetricUnit> {
    match units {
        [u, ..] => Some(*u),
        [] => None,
    }
}

/// Declare a daemon's metrics once: the table constant first, then sections, each of which becomes
/// a module of name constants (each with its help text as doc comment); every entry joins the
/// table.
///
/// ```
/// common::metrics_table! {
///     /// Every metric.
///     pub const TABLE;
///     /// The sender's metrics.
///     pub mod send {
///         PACKETS: Counter "x_packets_total" [] = "Packets sent";
///         BYTES: Counter(Bytes) "x_bytes_total" [] = "Bytes sent";
///         ERRORS: Counter "x_errors_total" ["kind"] = "Send errors, by kind";
///     }
/// }
/// assert_eq!(send::BYTES, "x_bytes_total");
/// assert_eq!(TABLE.len(), 3);
/// assert_eq!(TABLE[2].labels, &["kind"]);
/// ```
#[macro_export]
macro_rules! metrics_table {
    (
        $(#[$tm:meta])* pub const $table:ident;
        $(
            $(#[$mm:meta])* pub mod $m:ident {
                $( $c:ident : $kind:ident $(($unit:ident))? $name:literal [$($label:literal),* $(,)?] = $help:literal; )*
            }
        )*
    ) => {
        $(
            $(#[$mm])*
            pub mod $m {
                $( #[doc = $help] pub const $c: &str = $name; )*
            }
        )*
        $(#[$tm])*
        pub const $table: &[$crate::metrics_table::MetricDef] = &[
            $($(
                $crate::metrics_table::MetricDef {
                    name: $name,
                    kind: $crate::metrics_table::MetricKind::$kind,
                    unit: $crate::metrics_table::first_unit(&[$($crate::metrics_table::MetricUnit::$unit)?]),
                    labels: &[$($label),*],
                    help: $help,
                },
            )*)*
        ];
    };
}

/// Register the help text (and unit) of every metric of `table` with the installed recorder
/// (none installed: nothing happens).
#[cfg(feature = "metrics")]
pub fn describe(table: &[MetricDef]) {
    use metrics::{KeyName, SharedString, Unit};
    for d in table {
        let unit = d.unit.map(|u| match u {
            MetricUnit::Bytes => Unit::Bytes,
            MetricUnit::Seconds => Unit::Seconds,
        });
        let (name, help) = (
            KeyName::from_const_str(d.name),
            SharedString::const_str(d.help),
        );
        metrics::with_recorder(|r| match d.kind {
            MetricKind::Counter => r.describe_counter(name, unit, help),
            MetricKind::Gauge => r.describe_gauge(name, unit, help),
            MetricKind::Histogram => r.describe_histogram(name, unit, help),
        });
    }
}

/// The table as Markdown: one row per metric (name, kind, labels, help), for the docs.
#[must_use]
pub fn markdown(table: &[MetricDef]) -> String {
    let mut out = String::from("| metric | kind | labels | help |\n|---|---|---|---|\n");
    for d in table {
        let kind = match d.kind {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        };
        let unit = match d.unit {
            Some(MetricUnit::Bytes) => " (bytes)",
            Some(MetricUnit::Seconds) => " (seconds)",
            None => "",
        };
        let labels: Vec<String> = d.labels.iter().map(|l| format!("`{l}`")).collect();
        out.push_str(&format!(
            "| `{}` | {kind}{unit} | {} | {} |\n",
            d.name,
            labels.join(", "),
            d.help.replace('|', "\\|")
        ));
    }
    out
}

/// `text` with what lies between the lines `begin` and `end` replaced by `body` (`None`: the
/// markers are missing).
#[must_use]
pub fn replace_section(text: &str, begin: &str, end: &str, body: &str) -> Option<String> {
    let b = text.find(begin)? + begin.len();
    let b = b + text[b..].find('\n')? + 1;
    let e = b + text[b..].find(end)?;
    Some(format!("{}{body}{}", &text[..b], &text[e..]))
}

/// The names with `prefix` that the files mention (each `(path, text)`) and that are neither in
/// `table` nor in `not_metrics` (words with the prefix that are no metric: a nonce, a label value,
/// a fuzz target), as `path: name` lines.
#[must_use]
pub fn unknown_names(
    table: &[MetricDef],
    prefix: &str,
    not_metrics: &[&str],
    files: &[(String, String)],
) -> Vec<String> {
    let histograms: Vec<&str> = table
        .iter()
        .filter(|d| d.kind == MetricKind::Histogram)
        .map(|d| d.name)
        .collect();
    let mut out = Vec::new();
    for (path, text) in files {
        for n in names_in(text, prefix, &histograms) {
            let known = table.iter().any(|d| d.name == n) || not_metrics.contains(&n);
            let line = format!("{path}: {n}");
            if !known && !out.contains(&line) {
                out.push(line);
            }
        }
    }
    out
}

/// The files of the repository at `repo` that may name metrics, each as `(path, text)`:
/// README.md, BENCHMARKS.md, every `docs/*.md` and the Grafana dashboard (what
/// [`unknown_names`] reads in each daemon's tests).
///
/// # Errors
/// A file or the `docs` folder cannot be read.
pub fn repo_docs(repo: &std::path::Path) -> Result<Vec<(String, String)>, String> {
    let mut paths = vec![
        repo.join("README.md"),
        repo.join("BENCHMARKS.md"),
        repo.join("deploy/grafana/trafficcopy.json"),
    ];
    let docs = repo.join("docs");
    let dir = std::fs::read_dir(&docs).map_err(|e| format!("{}: {e}", docs.display()))?;
    for e in dir {
        let p = e.map_err(|e| format!("{}: {e}", docs.display()))?.path();
        if p.extension().is_some_and(|x| x == "md") {
            paths.push(p);
        }
    }
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            Ok((p.display().to_string(), text))
        })
        .collect()
}

/// What is wrong with a daemon's `table` itself: a name without `prefix`, an empty help text,
/// a name declared twice (one line each; empty when nothing is).
#[must_use]
pub fn table_problems(table: &[MetricDef], prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, d) in table.iter().enumerate() {
        if !d.name.starts_with(prefix) {
            out.push(format!("{}: not {prefix}*", d.name));
        }
        if d.help.is_empty() {
            out.push(format!("{}: no help text", d.name));
        }
        if table[i + 1..].iter().any(|o| o.name == d.name) {
            out.push(format!("{} twice", d.name));
        }
    }
    out
}

/// Check that the Markdown file at `path` holds `table` (as [`markdown`]) between the lines
/// `<!-- metrics table: DAEMON -->` and `<!-- end of the metrics table: DAEMON -->`. With
/// `TRAFFICCOPY_WRITE_METRICS_DOC=1` in the environment a stale list is rewritten instead.
///
/// # Errors
/// The file cannot be read or written, has no markers, or holds another list.
pub fn check_doc_section(
    path: &std::path::Path,
    daemon: &str,
    table: &[MetricDef],
) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let begin = format!("<!-- metrics table: {daemon} -->");
    let end = format!("<!-- end of the metrics table: {daemon} -->");
    let want = replace_section(&text, &begin, &end, &markdown(table))
        .ok_or_else(|| format!("{}: no lines {begin} and {end}", path.display()))?;
    if want == text {
        return Ok(());
    }
    if std::env::var_os("TRAFFICCOPY_WRITE_METRICS_DOC").is_some() {
        return std::fs::write(path, want).map_err(|e| format!("{}: {e}", path.display()));
    }
    Err(format!(
        "{} does not list the {daemon}'s metrics table as it is: run the test again with \
         TRAFFICCOPY_WRITE_METRICS_DOC=1 to rewrite it",
        path.display()
    ))
}

/// The metric names that `text` (a doc or a dashboard) mentions with `prefix` (such as
/// `copier_`): words of lower-case letters, digits and `_`, with a Prometheus histogram's
/// `_bucket`, `_sum` and `_count` series cut back to the histogram's name when `histograms`
/// names it. A word followed by `*` (a family: `copier_target_*`) is left out.
#[must_use]
pub fn names_in<'a>(text: &'a str, prefix: &str, histograms: &[&str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let word = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_';
    let mut i = 0;
    while let Some(at) = text[i..].find(prefix) {
        let start = i + at;
        let mut end = start;
        while end < bytes.len() && word(bytes[end]) {
            end += 1;
        }
        let glued = start > 0 && (word(bytes[start - 1]) || bytes[start - 1].is_ascii_uppercase());
        let family = bytes.get(end) == Some(&b'*');
        if !glued && !family {
            let mut name = &text[start..end];
            for suffix in ["_bucket", "_sum", "_count"] {
                if let Some(h) = name.strip_suffix(suffix) {
                    if histograms.contains(&h) {
                        name = h;
                    }
                }
            }
            out.push(name);
        }
        i = end.max(start + 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::metrics_table! {
        /// All of them.
        pub const TABLE;
        /// Two metrics.
        pub mod a {
            ONE: Counter "t_one_total" ["reason"] = "One, by reason";
            TWO: Histogram(Seconds) "t_two_seconds" [] = "Two";
        }
        /// One more.
        pub mod b {
            ONE: Gauge "t_three" [] = "Three";
        }
    }

    #[test]
    fn a_table_holds_every_section_in_order() {
        assert_eq!(
            (a::ONE, a::TWO, b::ONE),
            ("t_one_total", "t_two_seconds", "t_three")
        );
        let names: Vec<_> = TABLE.iter().map(|d| d.name).collect();
        assert_eq!(names, ["t_one_total", "t_two_seconds", "t_three"]);
        assert_eq!(TABLE[0].labels, &["reason"]);
        assert_eq!(TABLE[1].unit, Some(MetricUnit::Seconds));
        assert_eq!(TABLE[1].kind, MetricKind::Histogram);
        assert_eq!(TABLE[2].unit, None);
    }

    #[test]
    fn the_markdown_rows_follow_the_table() {
        let md = markdown(TABLE);
        assert!(
            md.contains("| `t_one_total` | counter | `reason` | One, by reason |\n"),
            "{md}"
        );
        assert!(
            md.contains("| `t_two_seconds` | histogram (seconds) |  | Two |\n"),
            "{md}"
        );
        let doc = "intro\n<!-- begin x -->\nold\nrows\n<!-- end x -->\nafter\n";
        assert_eq!(
            replace_section(doc, "<!-- begin x -->", "<!-- end x -->", "new\n").unwrap(),
            "intro\n<!-- begin x -->\nnew\n<!-- end x -->\nafter\n"
        );
        assert_eq!(
            replace_section("none", "<!-- begin x -->", "<!-- end x -->", ""),
            None
        );
    }

    #[test]
    fn names_are_found_in_prose() {
        let text = "`t_one_total{reason}` and t_two_seconds_bucket, t_two_seconds_sum; \
                    the t_fam_* family; not my_t_one nor T_one; t_x_count.";
        assert_eq!(
            names_in(text, "t_", &["t_two_seconds"]),
            ["t_one_total", "t_two_seconds", "t_two_seconds", "t_x_count"]
        );
    }
}
