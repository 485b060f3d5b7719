//! Benchmark of shadow testing (`copier --compare`): what the comparison costs.
//!
//! For each configuration (copy only; `--compare` at 100 %; `--compare --compare-sample 10`) it
//! builds a fresh lab (nginx version 1 online, version 2 on test: one JSON field differs on every
//! answer, so every compared exchange is written to `--compare-log`), runs wrk from `client` on
//! keep-alive connections for `--seconds` (default 10), waits for the comparison to settle, and
//! prints one line: requests served online, exchanges compared, the copier's CPU per request and
//! per compared request (whole process, and its `compare` thread alone), the intercept's CPU per
//! request, and the bytes the copier received on its control connection per request (records,
//! with the answers' payload of the sessions the copier compares, which alone ask for it: the
//! intercept runs with `--payload-bytes 65495` with `--compare`, 0 without).
//!
//! Usage (root): `cargo build --release -p copier -p intercept -p lab --bins &&
//! target/release/bench_compare [--seconds 10] [--connections 64]`

use anyhow::{Context, Result};
use lab::bench::Cpu;
use lab::setup::{control_bytes_received as control_bytes, metric_sum, CopyOptions, Copying};
use lab::{addr, Host, Lab, NginxOptions};
use std::time::{Duration, Instant};

const METRICS: &str = "127.0.0.1:9481";

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn service(version: u8) -> String {
    let price = if version == 2 { "$1.50" } else { "$1.00" };
    format!(
        r#"location ~ ^/items/(\d+)$ {{ default_type application/json; return 200 '{{"id":$1,"price":"{price}","name":"item $1","tags":["a","b","c"]}}'; }}"#
    )
}

fn main() {
    if let Err(e) = run() {
        eprintln!("bench_compare: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let seconds = arg("--seconds", 10);
    let conns = arg("--connections", 64);
    lab::available().map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "{:<26} {:>9} {:>9} {:>13} {:>15} {:>14} {:>13} {:>15}",
        "configuration",
        "requests",
        "compared",
        "copier us/req",
        "us/compared",
        "compare us/cmp",
        "intcpt us/req",
        "control B/req"
    );
    for (name, compare, sample) in [
        ("copy only", false, 100),
        ("--compare", true, 100),
        ("--compare-sample 10", true, 10),
    ] {
        let mut lab = Lab::new()?;
        let log = lab.dir().join("diff.jsonl").to_string_lossy().into_owned();
        let mut copier_args = vec!["--metrics".to_string(), METRICS.into()];
        let mut intercept_args = Vec::new();
        if compare {
            copier_args.extend(
                [
                    "--compare",
                    "--compare-sample",
                    &sample.to_string(),
                    "--compare-log",
                    &log,
                ]
                .map(String::from),
            );
            intercept_args.extend(["--payload-bytes".to_string(), "65495".to_string()]);
        }
        let opts = CopyOptions {
            online: NginxOptions {
                server_extra: service(1),
                ..NginxOptions::default()
            },
            test: Some(NginxOptions {
                server_extra: service(2),
                ..NginxOptions::default()
            }),
            ipv6: false,
            copier_args,
            intercept_args,
            ..CopyOptions::default()
        };
        let c = Copying::start(&mut lab, opts)?;
        let copier = c.copier.as_ref().context("copier")?.pid();
        let intercept = c.intercept.pid();
        let (c0, i0, b0) = (
            Cpu::read(copier, None)?,
            Cpu::read(intercept, None)?,
            control_bytes(&lab),
        );
        let url = format!("http://{}/items/7", addr::ONLINE);
        let out = lab.exec_ok(
            Host::Client,
            &[
                "wrk",
                "-t1",
                &format!("-c{conns}"),
                &format!("-d{seconds}s"),
                &url,
            ],
        )?;
        let requests: u64 = out
            .lines()
            .find(|l| l.contains("requests in"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .context("wrk printed no request count")?;
        // the copies and the comparison catch up
        let deadline = Instant::now() + Duration::from_secs(90);
        let online_n = c.online.request_count();
        let test_n = c.test().wait_requests(online_n, Duration::from_secs(60));
        let mut compared = 0.0;
        while compare && Instant::now() < deadline {
            let m = lab::bench::fetch_metrics(&lab, Host::Online, METRICS);
            let now = metric_sum(&m, "copier_compare_exchanges_total", &[]);
            if now > 0.0 && now == compared {
                break;
            }
            compared = now;
            std::thread::sleep(Duration::from_secs(3));
        }
        let (c1, i1, b1) = (
            Cpu::read(copier, None)?,
            Cpu::read(intercept, None)?,
            control_bytes(&lab),
        );
        let m = if compare {
            lab::bench::fetch_metrics(&lab, Host::Online, METRICS)
        } else {
            String::new()
        };
        let lost: Vec<String> = [
            "expired",
            "shed",
            "queue_full",
            "capture_drops",
            "unsynced",
            "conns_shed",
        ]
        .iter()
        .map(|r| {
            format!(
                "{r} {}",
                metric_sum(
                    &m,
                    "copier_compare_not_compared_total",
                    &[&format!("reason=\"{r}\"")]
                )
            )
        })
        .collect();
        let (cc, ic) = (c1.minus(&c0), i1.minus(&i0));
        let us = |ns: u64, n: f64| {
            if n > 0.0 {
                format!("{:.1}", ns as f64 / 1e3 / n)
            } else {
                "-".into()
            }
        };
        let n = requests as f64;
        let not_compared = if compare {
            format!("; not compared: {}", lost.join(", "))
        } else {
            String::new()
        };
        println!(
            "{:<26} {:>9} {:>9} {:>13} {:>15} {:>14} {:>13} {:>15.0}   test server got {test_n} of {online_n}{not_compared}",
            name,
            requests,
            compared as u64,
            us(cc.total(), n),
            us(cc.total(), compared),
            us(cc.threads("compare"), compared),
            us(ic.total(), n),
            (b1.saturating_sub(b0)) as f64 / n,
        );
        drop(c);
        drop(lab);
    }
    Ok(())
}
