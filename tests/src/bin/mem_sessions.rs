//! Memory at many live sessions, end to end: `--conns` keep-alive connections (10,000 by
//! default) from `client` to the online nginx, each asking one request and then held open and
//! idle, copied to the test nginx with the usual lab setup. Once the test server saw every
//! request, it prints the copier's and the intercept's VmRSS, the copier's capture ring
//! (`copier_capture_ring_bytes`) and the copier's RSS beyond it, and the sessions the copier
//! holds; before the load it prints the same for the idle daemons.
//!
//! Usage (root): `cargo build --release -p copier -p intercept -p lab --bins &&
//! target/release/mem_sessions [--conns 10000] [--ring-start-blocks 16] [--smaps]`
//! (`--ring-start-blocks` is passed to the copier when given; `--smaps` adds where the copier's
//! RSS lies, from `/proc/PID/smaps`: by kind of mapping, and its file pages by file). After the connections close it waits (up to 60 s) for the
//! copier's sessions to end and leave its table (`copier_memory_bytes` 0) and prints the same
//! figures again: what stays once they are gone. `--session-timeout D --idle-for S` (issue
//! 33): the copier runs with that session timeout, the connections stay idle for S seconds
//! after the first requests (longer than D), the figures are printed again (the sessions are
//! kept), and each connection asks once more: every second request must reach the test server.

use anyhow::{bail, Context, Result};
use lab::bench::fetch_metrics;
use lab::procstat::{memory_kib, smaps_kib};
use lab::setup::{metric_sample, CopyOptions, Copying};
use lab::{addr, Host, Lab, NginxOptions};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Where the copier serves its metrics (inside `online`).
const COPIER_METRICS: &str = "127.0.0.1:9467";
/// Connections opened at once.
const OPENING: usize = 500;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn arg_flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("mem_sessions: {e:#}");
        std::process::exit(1);
    }
}

/// One keep-alive connection that asked for `/index.html` and read the whole answer.
async fn open_one() -> Result<tokio::net::TcpStream> {
    ask(tokio::net::TcpStream::connect((addr::ONLINE, 80)).await?).await
}

/// Ask for `/index.html` on `s` and read the whole answer.
async fn ask(mut s: tokio::net::TcpStream) -> Result<tokio::net::TcpStream> {
    s.write_all(b"GET /index.html HTTP/1.1\r\nHost: online\r\n\r\n")
        .await?;
    let mut buf = Vec::with_capacity(2048);
    loop {
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            bail!("the online server closed");
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(head) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let text = String::from_utf8_lossy(&buf[..head]).to_ascii_lowercase();
            let len: usize = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .context("no content-length")?;
            if buf.len() >= head + 4 + len {
                return Ok(s);
            }
        }
    }
}

fn sample(what: &str, lab: &Lab, c: &Copying) -> Result<()> {
    let copier = c.copier.as_ref().context("copier")?.pid();
    let (crss, _) = memory_kib(copier);
    let (irss, _) = memory_kib(c.intercept.pid());
    let m = fetch_metrics(lab, Host::Online, COPIER_METRICS);
    let ring = metric_sample(&m, "copier_capture_ring_bytes") / 1024.0;
    let sessions = metric_sample(&m, "copier_sessions_active");
    println!(
        "{what}: copier VmRSS {:.1} MiB, capture ring {:.1} MiB, beyond the ring {:.1} MiB ({:.1} MB); intercept VmRSS {:.1} MiB ({:.1} MB); copier sessions active {sessions}",
        crss as f64 / 1024.0,
        ring / 1024.0,
        (crss as f64 - ring) / 1024.0,
        (crss as f64 - ring) * 1.024 / 1000.0,
        irss as f64 / 1024.0,
        irss as f64 * 1.024 / 1000.0,
    );
    if arg_flag("--smaps") {
        let parts: Vec<String> = smaps_kib(copier, 6)
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        println!("  copier Rss by mapping (KiB): {}", parts.join(", "));
        println!("  copier file pages (KiB): {}", file_rss(copier).join(", "));
    }
    Ok(())
}

/// The copier's file-backed Rss by file and permissions (`copier r-xp 4100`), largest first:
/// which of the binary's and the libraries' pages are resident.
fn file_rss(pid: u32) -> Vec<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut rows: Vec<(String, u64)> = Vec::new();
    let mut name = None;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let first = it.next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            let perms = it.next().unwrap_or("");
            name = it
                .nth(3)
                .filter(|n| n.starts_with('/'))
                .map(|n| format!("{} {perms}", n.rsplit('/').next().unwrap_or(n)));
        } else if first == "Rss:" {
            if let Some(n) = &name {
                let kib: u64 = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
                match rows.iter_mut().find(|(m, _)| m == n) {
                    Some((_, k)) => *k += kib,
                    None => rows.push((n.clone(), kib)),
                }
            }
        }
    }
    rows.sort_unstable_by_key(|r| std::cmp::Reverse(r.1));
    rows.into_iter()
        .filter(|(_, k)| *k > 0)
        .map(|(n, k)| format!("{n} {k}"))
        .collect()
}

fn run() -> Result<()> {
    let conns: usize = arg("--conns")
        .map_or(Ok(10_000), |v| v.parse())
        .context("--conns")?;
    lab::available().map_err(|e| anyhow::anyhow!("{e}"))?;
    // Every process started from here (nginx, the client's sockets) inherits this limit.
    let nofile = std::fs::read_to_string("/proc/self/limits")?
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| {
            l.split_whitespace()
                .nth(3)
                .and_then(|v| v.parse::<usize>().ok())
        })
        .unwrap_or(0);
    if nofile < conns + 1000 {
        bail!("the open-file limit ({nofile}) is too low for {conns} connections: raise it (ulimit -n)");
    }
    let mut lab = Lab::new()?;
    let mut copier_args = vec!["--metrics".to_owned(), COPIER_METRICS.to_owned()];
    if let Some(b) = arg("--ring-start-blocks") {
        copier_args.extend(["--ring-start-blocks".to_owned(), b]);
    }
    let idle_for: Option<u64> = arg("--idle-for")
        .map(|v| v.parse())
        .transpose()
        .context("--idle-for")?;
    if let Some(t) = arg("--session-timeout") {
        copier_args.extend(["--session-timeout".to_owned(), t]);
    }
    // Two workers of 8,192 connections each on both servers.
    let nginx = NginxOptions {
        workers: 2,
        ..NginxOptions::default()
    };
    let c = Copying::start(
        &mut lab,
        CopyOptions {
            online: nginx.clone(),
            test: Some(nginx),
            copier_args,
            ..CopyOptions::default()
        },
    )?;
    std::thread::sleep(Duration::from_secs(2));
    sample("idle", &lab, &c)?;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let held = lab.in_ns(Host::Client, || {
        rt.block_on(async {
            let mut held = Vec::with_capacity(conns);
            while held.len() < conns {
                let n = OPENING.min(conns - held.len());
                let batch: Vec<_> = (0..n).map(|_| tokio::spawn(open_one())).collect();
                for h in batch {
                    held.push(h.await??);
                }
            }
            Ok::<_, anyhow::Error>(held)
        })
    })??;
    let online = c.online.request_count();
    let copied = c.test().wait_requests(online, Duration::from_secs(120));
    std::thread::sleep(Duration::from_secs(3));
    c.check_alive()?;
    println!(
        "{} connections held open: {online} requests online, {copied} at the test server",
        held.len()
    );
    sample(&format!("{} live sessions", held.len()), &lab, &c)?;
    let mut held = held;
    if let Some(secs) = idle_for {
        // Idle past the session timeout: the sessions are kept, and a second request on every
        // connection is copied on.
        std::thread::sleep(Duration::from_secs(secs));
        c.check_alive()?;
        sample(
            &format!("{} sessions after {secs} s idle", held.len()),
            &lab,
            &c,
        )?;
        held = lab.in_ns(Host::Client, || {
            rt.block_on(async {
                let mut again = Vec::with_capacity(held.len());
                for s in held {
                    again.push(tokio::spawn(ask(s)));
                }
                let mut out = Vec::with_capacity(again.len());
                for h in again {
                    out.push(h.await??);
                }
                Ok::<_, anyhow::Error>(out)
            })
        })??;
        let online = c.online.request_count();
        let copied = c.test().wait_requests(online, Duration::from_secs(120));
        std::thread::sleep(Duration::from_secs(2));
        println!("after the idle spell, a request more on each: {online} requests online, {copied} at the test server");
        if copied < online {
            bail!("the test server saw {copied} of {online} requests after the idle spell");
        }
    }
    {
        let _rt = rt.enter();
        drop(held);
    }
    if copied < online {
        bail!("the test server saw {copied} of {online} requests");
    }
    // The clients closed: once the copier's sessions are gone, how much of the memory stayed.
    let m = lab::setup::metric_sample;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    // Gone from the table (they linger a while after they end): its memory is 0.
    while std::time::Instant::now() < deadline
        && m(
            &fetch_metrics(&lab, Host::Online, COPIER_METRICS),
            "copier_memory_bytes",
        ) > 0.0
    {
        std::thread::sleep(Duration::from_millis(500));
    }
    // The engine loop gives the free pages back within a second.
    std::thread::sleep(Duration::from_secs(2));
    sample("after the sessions ended", &lab, &c)?;
    Ok(())
}
