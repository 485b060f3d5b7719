//! The demo: brings up a throwaway lab, copies live traffic from `online` to `test`, drives real
//! clients for a few seconds, prints what happened, and removes the lab.

use anyhow::{Context, Result};
use lab::setup::{leak_filter, CopyOptions, Copying};
use lab::{addr, workspace_bin, Host, Lab, NginxOptions};
use std::time::Duration;

fn main() {
    if let Err(e) = run() {
        eprintln!("demo failed: {e:#}");
        std::process::exit(1);
    }
}

/// Whether a workspace binary is the real program yet (its `--help` names the given flag).
fn built(bin: &std::path::Path, flag: &str) -> bool {
    std::process::Command::new(bin)
        .arg("--help")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains(flag))
        .unwrap_or(false)
}

fn run() -> Result<()> {
    let seconds: u64 = std::env::var("DEMO_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    lab::available().map_err(|e| anyhow::anyhow!("{e}"))?;
    let copier = workspace_bin("copier")?;
    let intercept = workspace_bin("intercept")?;
    let copying = built(&copier, "--map") && built(&intercept, "--install-rules");

    println!("building the lab: client -> online -> test (namespaces, 198.18.0.0/15)");
    let mut lab = Lab::new()?;
    let (online, test, _copying) = if copying {
        // two copies of every session, each on its own 4-tuple
        let opts = CopyOptions { copier_args: vec!["--copies".into(), "2".into()], ..CopyOptions::default() };
        let c = Copying::start(&mut lab, opts)?;
        println!("copier on online (--copies 2), intercept on test: running");
        (c.online.clone(), c.test().clone(), Some(c))
    } else {
        println!("NOTE: copying is not built yet (the copier and intercept binaries are placeholders);");
        println!("      the demo shows the lab and online traffic only.");
        let online = lab.nginx(Host::Online, NginxOptions::default())?;
        let test = lab.nginx(Host::Test, NginxOptions::default())?;
        (online, test, None)
    };

    println!("driving traffic from client for {seconds} s (wrk, 8 connections, keep-alive) ...");
    let url = format!("http://{}/index.html", addr::ONLINE);
    let dur = format!("{seconds}s");
    let out = lab
        .exec_ok(Host::Client, &["wrk", "-t1", "-c8", &format!("-d{dur}"), &url])
        .context("wrk")?;
    let rate = out.lines().find(|l| l.starts_with("Requests/sec")).unwrap_or("").to_owned();
    test.wait_settled(Duration::from_secs(1), Duration::from_secs(10));
    let served = online.request_count();
    let copied = test.request_count();
    let pcap = lab.stop_link_capture().context("no link capture")?;
    let leaked = Lab::count_packets(&pcap, &leak_filter())?;

    println!();
    println!("  {:<44} {:>12}", "requests served online", served);
    println!("  {:<44} {:>12}", "requests seen by the test server", copied);
    println!(
        "  {:<44} {:>12}",
        "copies per request",
        if served > 0 { format!("{:.3}", copied as f64 / served as f64) } else { "-".into() }
    );
    println!("  {:<44} {:>12}", "responses that leaked out of the test host", leaked);
    println!("  ({})", rate.trim());
    if !copying {
        println!("\ncopying is not built yet: the test server saw no copies, as expected.");
    }
    if leaked > 0 {
        anyhow::bail!("{leaked} response packets left the test host toward clients");
    }
    println!("\ncleaning up the lab");
    Ok(())
}
