//! The demo: brings up a throwaway lab, copies live traffic from `online` to `test`, drives real
//! clients for a few seconds, prints what happened, and removes the lab.

use anyhow::{Context, Result};
use lab::setup::{CopyOptions, Copying};
use lab::{addr, Host, Lab};
use std::time::Duration;

fn main() {
    if let Err(e) = run() {
        eprintln!("demo failed: {e:#}");
        std::process::exit(1);
    }
}

/// Copies of every session the demo asks for.
const COPIES: usize = 2;

fn run() -> Result<()> {
    let seconds: u64 = std::env::var("DEMO_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    lab::available().map_err(|e| anyhow::anyhow!("{e}"))?;

    println!("building the lab: client -> online -> test (namespaces, 198.18.0.0/15)");
    let mut lab = Lab::new()?;
    // two copies of every session, each on its own 4-tuple
    let opts = CopyOptions {
        copier_args: vec!["--copies".into(), COPIES.to_string()],
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts)?;
    println!("copier on online (--copies {COPIES}), intercept on test: running");

    println!("driving traffic from client for {seconds} s (wrk, 8 connections, keep-alive) ...");
    let url = format!("http://{}/index.html", addr::ONLINE);
    let dur = format!("{seconds}s");
    let out = lab
        .exec_ok(
            Host::Client,
            &["wrk", "-t1", "-c8", &format!("-d{dur}"), &url],
        )
        .context("wrk")?;
    let rate = out
        .lines()
        .find(|l| l.starts_with("Requests/sec"))
        .unwrap_or("")
        .to_owned();
    let served = c.online.request_count();
    // every copy, then quiet (to catch any extra one)
    c.test()
        .wait_requests(COPIES * served, Duration::from_secs(60));
    c.settle(Duration::from_secs(1), Duration::from_secs(30));
    let copied = c.test().request_count();
    let leaked = c.leaked(&lab);
    c.check_alive()?;

    let per_request = if served > 0 {
        copied as f64 / served as f64
    } else {
        0.0
    };
    println!();
    println!("  {:<44} {:>12}", "requests served online", served);
    println!(
        "  {:<44} {:>12}",
        "requests seen by the test server", copied
    );
    println!(
        "  {:<44} {:>12}",
        "copies per request",
        if served > 0 {
            format!("{per_request:.3}")
        } else {
            "-".into()
        }
    );
    println!(
        "  {:<44} {:>12}",
        "responses that leaked out of the test host", leaked
    );
    println!("  ({})", rate.trim());
    if leaked > 0 {
        anyhow::bail!("{leaked} response packets left the test host toward clients");
    }
    if served == 0 {
        anyhow::bail!("no request was served online: the traffic did not run");
    }
    // Exact copying: COPIES per request, none more; 0.1 % short is tolerated for a packet the
    // kernel's capture ring could not keep.
    let want = COPIES * served;
    if copied > want || (copied as f64) < 0.999 * want as f64 {
        anyhow::bail!("the test server saw {copied} requests, want {COPIES} x {served} = {want} ({per_request:.4} per request)");
    }
    println!("\ncleaning up the lab");
    Ok(())
}
