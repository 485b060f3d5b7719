//! `bench_copier --report` (issue 32): the "At a glance" table of BENCHMARKS.md from one run.
//! It runs the four scenarios (keep-alive with 4 ms think time, one request per
//! connection with 4 ms think time, keep-alive at full speed, 100 KB answers at full speed), each
//! with the copier's floor beside the copier, and with `--peer DIR` the same four again with the
//! C tool in place of the copier and the intercept (`lab::bench::peer`), then prints one markdown
//! table with the machine and the date above it.

use super::*;

/// The four scenarios, in the table's order.
pub(super) const SCENARIOS: [Scenario; 4] = [
    Scenario::ThinkKeepAlive,
    Scenario::ThinkClose,
    Scenario::Full16,
    Scenario::Full100k,
];
/// Load time of each scenario with `--report` (unless `--scenario-secs`).
pub(super) const SECS: f64 = 5.0;
/// Longest wait for a scenario's copies with `--report` (unless `--final-wait`).
pub(super) const FINAL_WAIT: f64 = 20.0;

pub(super) fn what(sc: Scenario) -> &'static str {
    match sc {
        Scenario::ThinkKeepAlive => "keep-alive, 4 ms think",
        Scenario::ThinkClose => "one request per connection, 4 ms think",
        Scenario::Full16 => "keep-alive, full speed",
        Scenario::Full100k => "100 KB answers, full speed",
        _ => sc.name(),
    }
}

/// "nproc N, kernel K, CPU MODEL; DATE UTC, load average A B C".
pub(super) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_owned())
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    format!(
        "nproc {}, kernel {}, {cpu}; {date} UTC, load average {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        kernel.trim(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    )
}

/// The cells of one tool's run of a scenario: CPU per 1,000 (copier / intercept), fidelity,
/// share by the load's end, the floor's CPU and the copier's over it.
fn cells(r: Option<&Row>) -> [String; 5] {
    let Some(r) = r else {
        return std::array::from_fn(|_| "-".into());
    };
    let f = |v: Option<f64>| v.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into());
    let online = r.rt.online.max(1) as f64;
    [
        format!(
            "{} / {}",
            f(per_thousand(&r.copier, r.rt.copied)),
            f(per_thousand(&r.intercept, r.rt.copied))
        ),
        format!("{:.3}", r.rt.copied as f64 / online),
        format!("{:.2}", r.rt.at_end as f64 / online),
        f(r.floor.as_ref().and_then(|c| per_thousand(c, r.rt.copied))),
        floor_ratio(r)
            .map(|v| format!("{v:.2}"))
            .unwrap_or_else(|| "-".into()),
    ]
}

/// Prints the glance table of `ours` (and `peer`'s rows, if any).
pub(super) fn print(
    machine: &str,
    cmd: &str,
    secs: f64,
    ours: &[Row],
    peer: &[Row],
    icpt: &[IcptFloor],
) {
    fn find(rows: &[Row], sc: Scenario) -> Option<&Row> {
        rows.iter().find(|r| r.kind == Kind::Scenario(sc))
    }
    // The bench's own profile: `cargo build --release -p lab -p copier -p intercept --bins`
    // builds the three in one. (Its path said nothing once the binaries were copied elsewhere.)
    let build = if cfg!(debug_assertions) {
        "debug build"
    } else {
        "release build"
    };
    println!();
    println!("## At a glance (`{cmd}`)");
    println!();
    println!("{machine}; {build}; {secs:.0} s of load per scenario, 16 connections.");
    println!();
    let mut head = String::from(
        "| scenario | copier / intercept CPU s per 1,000 req | fidelity | copied by the load's end | floor CPU s per 1,000 req | copier / floor |",
    );
    let mut rule = String::from("|---|---|---:|---:|---:|---:|");
    if !peer.is_empty() {
        head.push_str(" C tool: tcpcopy / intercept | fidelity | by the load's end | floor | tcpcopy / floor | ours / C tool (copier / intercept) |");
        rule.push_str("---|---:|---:|---:|---:|---|");
    }
    println!("{head}");
    println!("{rule}");
    for sc in SCENARIOS {
        let (o, p) = (find(ours, sc), find(peer, sc));
        if o.is_none() && p.is_none() {
            continue;
        }
        let mut line = format!("| {} | {} |", what(sc), cells(o).join(" | "));
        if !peer.is_empty() {
            let ratio = |a: Option<&Row>, b: Option<&Row>, cpu: fn(&Row) -> &Cpu| {
                let (a, b) = (a?, b?);
                let x = per_thousand(cpu(a), a.rt.copied)?;
                let y = per_thousand(cpu(b), b.rt.copied)?;
                (y > 0.0).then(|| x / y)
            };
            let rc = ratio(o, p, |r| &r.copier);
            let ri = ratio(o, p, |r| &r.intercept);
            let f = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
            line.push_str(&format!(
                " {} | {} / {} |",
                cells(p).join(" | "),
                f(rc),
                f(ri)
            ));
        }
        println!("{line}");
    }
    println!();
    println!("(CPU: all threads of the process over the load and the wait for its copies, from /proc/PID/task/*/schedstat,");
    println!("per 1,000 requests the test server received; fidelity: requests at the test server / requests served online,");
    println!("once the copies stopped coming; copied by the load's end: the share the test server had logged when the load");
    println!("generator stopped; floor: copier-floor beside the copier on the same load (floor.rs), its CPU over the same");
    println!("window per the same copied requests. The floor shares the 2 cores with the copier, so at full speed it");
    println!("takes CPU the copier would have had.)");
    if !icpt.is_empty() {
        println!();
        println!("The intercept against its floor, the bare NFQUEUE reader (recv + DROP verdict per packet, nothing else).");
        println!("NFQUEUE gives each packet to one reader, so the reader cannot run beside the intercept: `{ICPT_CMD} RATES`");
        println!("runs right after the scenarios, RATES the NFQUEUE packet rates the intercept had in them, and gives the");
        println!("reader's CPU per packet at each. The intercept's figure is its own CPU in the scenario (all threads, over the");
        println!("same window as the table above) per NFQUEUE packet it handled there; both are µs per packet, so the ratio");
        println!("is the intercept's cost over the floor's on the same packets per request. The last column is the intercept");
        println!("under bench_intercept's synthetic load (raw segments at an even rate to a fake copier that never lets it");
        println!(
            "rest, so its records go out as they come), for reference, not the scenario's cost):"
        );
        println!();
        println!("| scenario | NFQUEUE packets/s | NFQUEUE packets/req | bare reader µs/packet | intercept µs/packet in the scenario | intercept / bare reader | bench_intercept's intercept µs/record |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        for f in icpt {
            let cell = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
            let ratio = match (f.scenario_us, f.bare_us) {
                (Some(o), Some(b)) if b > 0.0 => Some(o / b),
                _ => None,
            };
            println!(
                "| {} | {} | {} | {} | {} | {} | {} |",
                what(f.scenario),
                f.rate,
                cell(f.per_req),
                cell(f.bare_us),
                cell(f.scenario_us),
                cell(ratio),
                cell(f.synthetic_us)
            );
        }
    }
    if !peer.is_empty() {
        println!();
        println!("(C tool: the --peer directory's tcpcopy and intercept in the same lab on the same load after ours stopped;");
        println!("its intercept captures with pcap and drops nothing: the test server's answers reach online, which drops");
        println!("them, so they are not counted as leaks.)");
    }
}

/// The trimmed cells of one markdown table row (`| a | b |` gives `["a", "b"]`).
pub(super) fn cells_of(line: &str) -> Vec<&str> {
    line.trim()
        .trim_matches('|')
        .split('|')
        .map(str::trim)
        .collect()
}

/// `bench_intercept`'s command for the intercept's floor (its `--rates` follow).
const ICPT_CMD: &str = "bench_intercept --step 3 --no-perf --rates";

/// The intercept against its floor in one scenario.
#[derive(Debug, Clone, Copy)]
pub(super) struct IcptFloor {
    scenario: Scenario,
    /// NFQUEUE packets per second the intercept had in the scenario.
    rate: u64,
    /// NFQUEUE packets per copied request there.
    per_req: Option<f64>,
    /// The intercept's CPU in the scenario per NFQUEUE packet, µs.
    scenario_us: Option<f64>,
    /// The bare reader's CPU per packet at `rate`, µs (from `bench_intercept`, if it ran).
    bare_us: Option<f64>,
    /// `bench_intercept`'s own intercept at `rate`, µs per record (synthetic load).
    synthetic_us: Option<f64>,
}

/// Runs `bench_intercept` (next to this binary) at the NFQUEUE packet rates our intercept had in
/// `ours`' scenarios, and reads its bare reader's CPU per packet at each (and its synthetic
/// intercept's per record), beside the intercept's own CPU per packet in each scenario.
pub(super) fn intercept_floor(ours: &[Row]) -> Vec<IcptFloor> {
    let mut out: Vec<IcptFloor> = SCENARIOS
        .iter()
        .filter_map(|&sc| ours.iter().find(|r| r.kind == Kind::Scenario(sc)))
        .filter_map(|r| match r.kind {
            Kind::Scenario(sc) => Some(IcptFloor {
                scenario: sc,
                rate: (r.queued as f64 / r.window_secs.max(1e-9)).round() as u64,
                per_req: (r.rt.copied > 0).then(|| r.queued as f64 / r.rt.copied as f64),
                // seconds per 1,000 packets, times 1,000: µs per packet.
                scenario_us: per_thousand(&r.intercept, r.queued).map(|v| v * 1000.0),
                bare_us: None,
                synthetic_us: None,
            }),
            _ => None,
        })
        .filter(|f| f.rate > 0)
        .collect();
    if out.is_empty() {
        return out;
    }
    let mut rates: Vec<u64> = out.iter().map(|f| f.rate).collect();
    rates.sort_unstable();
    rates.dedup();
    let list = rates
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let bin = match std::env::current_exe() {
        Ok(p) => p.with_file_name("bench_intercept"),
        Err(e) => {
            eprintln!("bench_copier: no path of its own ({e}): no intercept floor");
            return out;
        }
    };
    eprintln!(
        "the intercept's floor: {} --step 3 --no-perf --rates {list} ...",
        bin.display()
    );
    let run = std::process::Command::new(&bin)
        .args(["--step", "3", "--no-perf", "--rates", &list])
        .stdin(std::process::Stdio::null())
        .output();
    let text = match run {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => {
            eprintln!(
                "bench_intercept failed ({}): {}",
                o.status,
                tail(&String::from_utf8_lossy(&o.stderr), 10)
            );
            return out;
        }
        Err(e) => {
            eprintln!("cannot run {}: {e}", bin.display());
            return out;
        }
    };
    let bare = table_column(&text, "## the floor: a bare NFQUEUE reader", 1);
    let icpt = table_column(&text, "## the intercept:", 2);
    for f in &mut out {
        let label = format!("{} pps", f.rate);
        f.bare_us = bare.get(&label).copied();
        f.synthetic_us = icpt.get(&label).copied();
    }
    out
}

/// In the markdown table after the heading that starts with `heading`, each row's label and
/// its `from_end`-th cell from the end (1: the last) as a number.
fn table_column(text: &str, heading: &str, from_end: usize) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    let Some(at) = text.find(heading) else {
        return m;
    };
    let rows = text[at..]
        .lines()
        .skip(1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'));
    for l in rows {
        let cells = cells_of(l);
        if cells.len() < from_end + 1 {
            continue;
        }
        if let Ok(v) = cells[cells.len() - from_end].parse::<f64>() {
            m.insert(cells[0].to_owned(), v);
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bench_intercepts_tables() {
        let text = "## the floor: a bare NFQUEUE reader (recv + DROP verdict) on queue 1\n\n\
                    | step | offered pps | CPU µs/packet |\n|---|---:|---:|\n\
                    | idle | 0 | - |\n| 1536 pps | 1536 | 8.18 |\n\n\
                    ## the intercept: NFQUEUE read -> record\n\n\
                    | step | offered pps | CPU µs/record | leaks |\n|---|---:|---:|---:|\n\
                    | 1536 pps | 1536 | 26.30 | 0 |\n";
        let bare = table_column(text, "## the floor: a bare NFQUEUE reader", 1);
        assert_eq!(bare.get("1536 pps"), Some(&8.18));
        assert_eq!(bare.len(), 1);
        let icpt = table_column(text, "## the intercept:", 2);
        assert_eq!(icpt.get("1536 pps"), Some(&26.30));
    }
}
