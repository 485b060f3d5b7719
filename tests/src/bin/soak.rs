//! Soak benchmark: copies steady traffic for a long time (30 minutes by default) and watches the
//! copier's and the intercept's resident memory and open file descriptors, to show that neither
//! grows with time.
//!
//! Traffic: from `client`, keep-alive connections (wrk with a fixed delay between requests, so a
//! steady rate rather than full speed) and a loop of short `Connection: close` requests (curl),
//! both to the online nginx, copied to the test nginx with the usual lab setup.
//!
//! Every `--every` seconds (default 30) it prints one line: elapsed time, requests served online
//! and seen by the test server, RSS (KiB) and fd count of both daemons. At the end it compares
//! the averages of the window after warm-up (minutes 5 to 10 of a 30-minute run, i.e. the second
//! sixth) with the last window of the same length, and prints PASS when each daemon's RSS and
//! fd count in the last window are within 5 % (fds: or within 2) of the first, FAIL otherwise
//! (exit status 1). It also fails if anything leaked or the test server missed requests.
//!
//! Usage (root): `cargo build --release -p copier -p intercept -p lab --bins &&
//! target/release/soak [--minutes 30] [--every 30]`

use anyhow::{bail, Context, Result};
use lab::procstat::{memory_kib, open_fds};
use lab::setup::{CopyOptions, Copying};
use lab::{addr, Host, Lab};
use std::time::{Duration, Instant};

struct Sample {
    secs: u64,
    online: usize,
    test: usize,
    copier_rss: u64,
    copier_fds: usize,
    intercept_rss: u64,
    intercept_fds: usize,
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("soak: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let minutes = arg("--minutes", 30);
    let every = Duration::from_secs(arg("--every", 30));
    lab::available().map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut lab = Lab::new()?;
    let c = Copying::start(&mut lab, CopyOptions::default())?;
    let copier = c.copier.as_ref().context("copier")?.pid();
    let intercept = c.intercept.pid();

    // Steady keep-alive load: 8 connections, 5 ms between requests each (~1,600 req/s).
    let script = lab.dir().join("delay.lua");
    std::fs::write(&script, "function delay()\n  return 5\nend\n")?;
    let total = format!("{}s", minutes * 60);
    let url = format!("http://{}/index.html", addr::ONLINE);
    let wrk = lab.spawn(
        Host::Client,
        "wrk",
        &[
            "wrk",
            "-t1",
            "-c8",
            &format!("-d{total}"),
            "-s",
            script.to_str().unwrap(),
            &url,
        ],
    )?;
    // Short connections: one curl every 20 ms or so, for the same time.
    let loop_script = format!(
        "end=$(( $(date +%s) + {} )); while [ $(date +%s) -lt $end ]; do curl -sS -o /dev/null -H 'Connection: close' '{url}?short' || true; sleep 0.02; done",
        minutes * 60
    );
    let shorts = lab.spawn(Host::Client, "shorts", &["sh", "-c", &loop_script])?;

    let start = Instant::now();
    let end = start + Duration::from_secs(minutes * 60);
    let mut samples = Vec::new();
    println!(
        "{:>6} {:>10} {:>10} {:>12} {:>6} {:>14} {:>6}",
        "secs", "online", "test", "copier KiB", "fds", "intercept KiB", "fds"
    );
    while Instant::now() < end {
        std::thread::sleep(
            every
                .min(end.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(10)),
        );
        c.check_alive()?;
        let s = Sample {
            secs: start.elapsed().as_secs(),
            online: c.online.request_count(),
            test: c.test().request_count(),
            copier_rss: memory_kib(copier).0,
            copier_fds: open_fds(copier),
            intercept_rss: memory_kib(intercept).0,
            intercept_fds: open_fds(intercept),
        };
        println!(
            "{:>6} {:>10} {:>10} {:>12} {:>6} {:>14} {:>6}",
            s.secs, s.online, s.test, s.copier_rss, s.copier_fds, s.intercept_rss, s.intercept_fds
        );
        samples.push(s);
    }
    let _ = wrk.wait_timeout(Duration::from_secs(30));
    let _ = shorts.wait_timeout(Duration::from_secs(30));
    let served = c.online.request_count();
    c.test().wait_requests(served, Duration::from_secs(60));
    c.settle(Duration::from_secs(2), Duration::from_secs(60));
    let copied = c.test().request_count();
    let leaked = c.leaked(&lab);
    println!("served online {served}, at the test server {copied}, leaked {leaked}");

    // Compare the window after warm-up with the last one.
    let n = samples.len();
    if n < 6 {
        bail!("too few samples ({n}) to judge: run longer or sample more often");
    }
    let w = n / 6;
    let (first, last) = (&samples[w..2 * w], &samples[n - w..]);
    let avg =
        |v: &[Sample], f: &dyn Fn(&Sample) -> f64| v.iter().map(f).sum::<f64>() / v.len() as f64;
    let mut ok = true;
    // (what, its value in a sample, the growth allowed)
    type Check<'a> = (&'a str, &'a dyn Fn(&Sample) -> f64, f64);
    let checks: [Check<'_>; 4] = [
        ("copier RSS KiB", &|s| s.copier_rss as f64, 0.0),
        ("copier fds", &|s| s.copier_fds as f64, 2.0),
        ("intercept RSS KiB", &|s| s.intercept_rss as f64, 0.0),
        ("intercept fds", &|s| s.intercept_fds as f64, 2.0),
    ];
    for (what, f, slack) in checks {
        let (a, b) = (avg(first, f), avg(last, f));
        let fine = b <= a * 1.05 + slack && b >= a * 0.95 - slack;
        ok &= fine;
        println!(
            "{what:<18} {a:>12.0} (samples {}..{}) -> {b:>12.0} (last {w}): {:+.1} % {}",
            w,
            2 * w,
            (b / a.max(1.0) - 1.0) * 100.0,
            if fine { "PASS" } else { "FAIL" }
        );
    }
    if leaked > 0 {
        bail!("{leaked} response packets leaked");
    }
    if copied < served {
        bail!("the test server saw {copied} of {served} requests");
    }
    if !ok {
        bail!("memory or descriptors grew over the run");
    }
    println!("PASS");
    Ok(())
}
