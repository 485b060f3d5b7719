//! `perf` around one step of a lab benchmark: `perf stat --per-thread` and `perf record -g` on
//! one process for a fixed time ([`Session`]), and the tables the benchmarks print from them
//! (counters per thread and per unit of work, `perf report` excerpts).
//!
//! perf is a diagnostic: when it is missing or fails, the benchmark says so and goes on.

use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Whether `perf stat` runs here at all.
pub fn works() -> bool {
    Command::new("perf")
        .args(["stat", "-e", "task-clock", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `perf stat` and `perf record` attached to one process for a fixed time; their output files
/// are named `{prefix}-stat.txt`, `{prefix}.data` (and `.err` files for their stderr) in a
/// folder.
#[derive(Debug)]
pub struct Session {
    stat: Child,
    record: Child,
    dir: PathBuf,
    prefix: String,
}

impl Session {
    /// Starts both on `pid` for `dur`, counting `events` (comma-separated), and waits a moment
    /// for them to attach.
    pub fn start(
        dir: &Path,
        prefix: &str,
        pid: u32,
        events: &str,
        dur: Duration,
    ) -> Result<Session> {
        let secs = format!("{:.2}", dur.as_secs_f64());
        let pid_s = pid.to_string();
        // `perf WHAT ARGS -o OUT -p PID -- sleep SECS`, its stderr to `{prefix}-WHAT.err`
        let perf = |what: &str, args: &[&str], out: PathBuf| -> Result<Child> {
            Command::new("perf")
                .arg(what)
                .args(args)
                .arg("-o")
                .arg(out)
                .args(["-p", &pid_s, "--", "sleep", &secs])
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(
                    dir.join(format!("{prefix}-{what}.err")),
                )?)
                .spawn()
                .with_context(|| format!("perf {what}"))
        };
        let stat = perf(
            "stat",
            &["--per-thread", "-x", ",", "-e", events],
            dir.join(format!("{prefix}-stat.txt")),
        )?;
        let record = perf(
            "record",
            &["-g", "-F", "1999"],
            dir.join(format!("{prefix}.data")),
        )?;
        std::thread::sleep(Duration::from_millis(150)); // let both attach
        Ok(Session {
            stat,
            record,
            dir: dir.to_owned(),
            prefix: prefix.to_owned(),
        })
    }

    /// Waits for both to end.
    pub fn wait(&mut self) {
        let _ = self.stat.wait();
        let _ = self.record.wait();
    }

    /// `perf stat`'s output.
    pub fn stat_path(&self) -> PathBuf {
        self.dir.join(format!("{}-stat.txt", self.prefix))
    }

    /// `perf record`'s data (absent when it failed).
    pub fn data_path(&self) -> PathBuf {
        self.dir.join(format!("{}.data", self.prefix))
    }

    /// What `perf stat` (`"stat"`) or `perf record` (`"record"`) wrote to stderr.
    pub fn stderr_of(&self, which: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{}-{which}.err", self.prefix)))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }
}

/// Counters of `perf stat --per-thread -x ,` output (`comm-tid,value,unit,event,...` lines),
/// summed per thread name (the `-tid` cut off) and per event (the `syscalls:sys_enter_` and
/// `raw_syscalls:` prefixes cut off).
pub fn stat_per_thread(text: &str) -> BTreeMap<String, BTreeMap<String, f64>> {
    let mut by: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let f: Vec<&str> = l.split(',').collect();
        if f.len() < 4 {
            continue;
        }
        let thread = f[0]
            .trim()
            .rsplit_once('-')
            .map(|(c, _)| c)
            .unwrap_or(f[0].trim())
            .to_owned();
        let Ok(v) = f[1].parse::<f64>() else { continue };
        let ev = f[3]
            .trim()
            .trim_start_matches("syscalls:sys_enter_")
            .trim_start_matches("raw_syscalls:")
            .to_owned();
        *by.entry(thread).or_default().entry(ev).or_default() += v;
    }
    by
}

/// Prints [`stat_per_thread`]'s counters as a markdown table, each divided by `per` (the units
/// of work done in the window); task-clock (ms) is shown in µs.
pub fn print_stat_table(by: &BTreeMap<String, BTreeMap<String, f64>>, per: f64) {
    let mut events: Vec<String> = by.values().flat_map(|m| m.keys().cloned()).collect();
    events.sort();
    events.dedup();
    println!("| thread | {} |", events.join(" | "));
    println!("|---|{}", "---:|".repeat(events.len()));
    for (t, m) in by {
        let cells: Vec<String> = events
            .iter()
            .map(|e| {
                let v = m.get(e).copied().unwrap_or(0.0);
                let v = if e == "task-clock" { v * 1e3 } else { v }; // ms -> µs
                format!("{:.3}", v / per)
            })
            .collect();
        println!("| {t} | {} |", cells.join(" | "));
    }
}

/// `perf report --stdio -g none` of `data`, sorted by `sort`, with `--children` or
/// `--no-children`, only the entries of at least `min_percent`: its lines without comments.
pub fn report(data: &Path, children: &str, sort: &str, min_percent: &str) -> Result<Vec<String>> {
    let out = Command::new("perf")
        .args([
            "report",
            "--stdio",
            children,
            "-g",
            "none",
            "--percent-limit",
            min_percent,
            "--sort",
            sort,
            "-i",
        ])
        .arg(data)
        .output()
        .context("perf report")?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(str::to_owned)
        .collect())
}

/// Prints one `perf report` excerpt per `(title, children, sort)` (entries of at least 1.5 %,
/// the first `take` lines of each) in code blocks.
pub fn print_reports(data: &Path, views: &[(&str, &str, &str)], take: usize) -> Result<()> {
    for (title, children, sort) in views {
        let lines = report(data, children, sort, "1.5")?;
        println!();
        println!("perf record, {title} (samples of on-CPU time, >= 1.5 %):");
        println!("```");
        for l in lines.iter().take(take) {
            println!("{l}");
        }
        println!("```");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_sum_per_thread_name_and_event() {
        let text = "# started on ...\n\
                    \n\
                    engine-0-1234,12.5,msec,task-clock,12500000,100.00,0.5,CPUs utilized\n\
                    engine-0-1235,2.5,msec,task-clock,2500000,100.00,,\n\
                    engine-0-1234,40,,syscalls:sys_enter_sendmmsg,100,100.00,,\n\
                    tokio-9,7,,raw_syscalls:sys_enter,100,100.00,,\n\
                    tokio-9,<not counted>,,context-switches,0,100.00,,\n\
                    short,line\n";
        let by = stat_per_thread(text);
        assert_eq!(by.len(), 2, "{by:?}");
        assert_eq!(by["engine-0"]["task-clock"], 15.0);
        assert_eq!(by["engine-0"]["sendmmsg"], 40.0);
        assert_eq!(by["tokio"]["sys_enter"], 7.0);
        assert!(!by["tokio"].contains_key("context-switches"));
    }
}
