//! `bench_copier --report --repeat N`: the glance table of N runs, each in a lab of its own.
//!
//! On a machine shared with other work one 5-s run of a scenario moves by a fifth and more
//! (BENCHMARKS.md, "At a glance"), so one run says little about a ratio near its target. This
//! runs the same command N times as child processes (each builds and removes its lab, so no run
//! inherits another's sockets, TIME_WAITs or caches), passes each one's output through, reads
//! the two glance tables each printed (`report.rs`) and ends with one table: per scenario the
//! median of each ratio with its range, and in how many runs it met its target.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::floor::FLOOR_TARGET;

/// The intercept's target over the bare reader (issue 32); the copier's over its floor is
/// [`FLOOR_TARGET`].
pub(super) const INTERCEPT_TARGET: f64 = 1.5;

/// One scenario's figures in one run, as the glance tables printed them.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Glance {
    pub copier_cpu: Option<f64>,
    pub intercept_cpu: Option<f64>,
    pub fidelity: Option<f64>,
    pub at_end: Option<f64>,
    pub copier_ratio: Option<f64>,
    pub intercept_ratio: Option<f64>,
}

fn num(cell: &str) -> Option<f64> {
    cell.trim().trim_matches('*').parse().ok()
}

/// The scenarios' rows of a `--report` output, by the scenario's words in the first column.
/// The copier's table has "copier / intercept" CPU in its second cell; the intercept's table has
/// seven cells, its ratio in the sixth.
pub(super) fn parse(text: &str) -> BTreeMap<String, Glance> {
    let mut out: BTreeMap<String, Glance> = BTreeMap::new();
    let mut in_glance = false;
    for line in text.lines() {
        if line.starts_with("## ") {
            in_glance = line.starts_with("## At a glance (");
            continue;
        }
        if !in_glance || !line.starts_with("| ") || line.starts_with("| scenario ") {
            continue;
        }
        let cells = super::report::cells_of(line);
        if cells.len() < 6 {
            continue;
        }
        let g = out.entry(cells[0].to_owned()).or_default();
        if let Some((c, i)) = cells[1].split_once(" / ") {
            g.copier_cpu = num(c);
            g.intercept_cpu = num(i);
            g.fidelity = num(cells[2]);
            g.at_end = num(cells[3]);
            g.copier_ratio = num(cells[5]);
        } else if cells.len() == 7 {
            g.intercept_ratio = num(cells[5]);
        }
    }
    out
}

/// "median (lowest to highest)" (the median by nearest rank) of the values `pick` finds in `runs`.
fn spread(runs: &[&Glance], pick: fn(&Glance) -> Option<f64>, digits: usize) -> String {
    let mut v: Vec<f64> = runs.iter().filter_map(|g| pick(g)).collect();
    v.sort_by(f64::total_cmp);
    let Some(m) = lab::bench::quantile(&v, 0.5) else {
        return "-".into();
    };
    let (lo, hi) = (v[0], v[v.len() - 1]);
    if v.len() == 1 {
        format!("{m:.digits$}")
    } else {
        format!("{m:.digits$} ({lo:.digits$} to {hi:.digits$})")
    }
}

/// "k of n" runs whose value `pick` is at most `target`.
fn within(runs: &[&Glance], pick: fn(&Glance) -> Option<f64>, target: f64) -> String {
    let v: Vec<f64> = runs.iter().filter_map(|g| pick(g)).collect();
    if v.is_empty() {
        return "-".into();
    }
    let k = v.iter().filter(|&&x| x <= target).count();
    format!("{k} of {}", v.len())
}

/// The summary table of `runs` (each run's `parse`), scenarios in the order they first appear.
pub(super) fn summary(runs: &[BTreeMap<String, Glance>], order: &[&str]) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "| scenario | copier / floor | within {FLOOR_TARGET}x | intercept / bare reader | within {INTERCEPT_TARGET}x | copier CPU s per 1,000 req | intercept CPU s per 1,000 req | fidelity (lowest) | copied by the load's end (lowest) |\n"
    ));
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for what in order {
        let rs: Vec<&Glance> = runs.iter().filter_map(|r| r.get(*what)).collect();
        if rs.is_empty() {
            continue;
        }
        let lowest = |pick: fn(&Glance) -> Option<f64>, digits: usize| {
            rs.iter()
                .filter_map(|g| pick(g))
                .min_by(f64::total_cmp)
                .map(|v| format!("{v:.digits$}"))
                .unwrap_or_else(|| "-".into())
        };
        s.push_str(&format!(
            "| {what} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            spread(&rs, |g| g.copier_ratio, 2),
            within(&rs, |g| g.copier_ratio, FLOOR_TARGET),
            spread(&rs, |g| g.intercept_ratio, 2),
            within(&rs, |g| g.intercept_ratio, INTERCEPT_TARGET),
            spread(&rs, |g| g.copier_cpu, 4),
            spread(&rs, |g| g.intercept_cpu, 4),
            lowest(|g| g.fidelity, 3),
            lowest(|g| g.at_end, 2),
        ));
    }
    s
}

/// Runs this binary `n` times with `args` (the command line without `--repeat N`), passing each
/// run's output through, then prints the summary. Fails when a run failed (a leak, a process
/// that died), after the others ran.
pub(super) fn run(n: usize, args: &[String], order: &[&str]) -> Result<()> {
    let exe = std::env::current_exe().context("this binary's path")?;
    let mut runs = Vec::new();
    let mut failed = Vec::new();
    let first = super::report::machine();
    for i in 1..=n {
        println!("# run {i} of {n}: {} {}", exe.display(), args.join(" "));
        let mut child = Command::new(&exe)
            .args(args)
            .env_remove("BENCH_REPEAT")
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("start run {i} of {n}"))?;
        let mut text = String::new();
        let out = child.stdout.take().expect("piped");
        for line in BufReader::new(out).lines() {
            let line = line.context("read a run's output")?;
            println!("{line}");
            text.push_str(&line);
            text.push('\n');
        }
        let status = child.wait().context("wait for a run")?;
        if !status.success() {
            failed.push(format!("run {i}: {status}"));
        }
        runs.push(parse(&text));
    }
    let cmd = std::env::args().collect::<Vec<_>>().join(" ");
    println!();
    println!("## At a glance, {n} runs (`{cmd}`)");
    println!();
    println!(
        "{first} at the first run's start; each figure is the median of the runs, then its range; \
         \"within\": the runs that met issue 32's target."
    );
    println!();
    print!("{}", summary(&runs, order));
    if !failed.is_empty() {
        bail!("{} of {n} runs failed: {}", failed.len(), failed.join("; "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "\
| think-close | 16 | 2456 | 12281 | 99.8 |
## At a glance (`bench_copier --report`)

| scenario | copier / intercept CPU s per 1,000 req | fidelity | copied by the load's end | floor CPU s per 1,000 req | copier / floor |
|---|---|---:|---:|---:|---:|
| keep-alive, 4 ms think | 0.0188 / 0.0052 | 1.000 | 1.00 | 0.0209 | 0.90 |
| one request per connection, 4 ms think | 0.0689 / 0.0432 | 1.000 | 0.99 | 0.0539 | 1.28 |

| scenario | NFQUEUE packets/s | NFQUEUE packets/req | bare reader µs/packet | intercept µs/packet in the scenario | intercept / bare reader | bench_intercept's intercept µs/record |
|---|---:|---:|---:|---:|---:|---:|
| keep-alive, 4 ms think | 2241 | 0.96 | 11.69 | 5.37 | 0.46 | 46.82 |
| one request per connection, 4 ms think | 10513 | 5.00 | 7.22 | 8.63 | 1.20 | 17.91 |
";

    #[test]
    fn reads_both_glance_tables_and_nothing_before_them() {
        let g = parse(RUN);
        assert_eq!(g.len(), 2, "{g:?}");
        let tc = &g["one request per connection, 4 ms think"];
        assert_eq!(tc.copier_cpu, Some(0.0689));
        assert_eq!(tc.intercept_cpu, Some(0.0432));
        assert_eq!(tc.fidelity, Some(1.0));
        assert_eq!(tc.at_end, Some(0.99));
        assert_eq!(tc.copier_ratio, Some(1.28));
        assert_eq!(tc.intercept_ratio, Some(1.20));
        assert_eq!(g["keep-alive, 4 ms think"].intercept_ratio, Some(0.46));
    }

    #[test]
    fn medians_ranges_and_runs_within_target() {
        let runs: Vec<_> = ["1.28", "1.23", "1.32"]
            .iter()
            .map(|r| parse(&RUN.replace("0.0539 | 1.28", &format!("0.0539 | {r}"))))
            .collect();
        let s = summary(
            &runs,
            &["one request per connection, 4 ms think", "not run"],
        );
        let row = s
            .lines()
            .find(|l| l.starts_with("| one request"))
            .expect("the scenario's row");
        assert!(row.contains("| 1.28 (1.23 to 1.32) | 1 of 3 |"), "{row}");
        assert!(row.contains("| 1.20 (1.20 to 1.20) | 3 of 3 |"), "{row}");
        assert!(row.ends_with("| 1.000 | 0.99 |"), "{row}");
        assert!(!s.contains("not run"), "a scenario no run had has no row");
    }
}
