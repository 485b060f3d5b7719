//! bench_copier: how faithfully the copier copies live HTTP traffic to the test server as the
//! request rate rises, and what it costs in CPU and memory.
//!
//! It builds a lab, starts the copying setup the end-to-end tests use (nginx on `online` and
//! `test`, the intercept on `test` with its NFQUEUE rules, the copier on `online` with
//! `--metrics`; segmentation offloads on), then drives the online nginx from `client` with a
//! rate-controlled HTTP load generator of its own (tokio, on a thread inside the `client`
//! namespace):
//! - keep-alive: `--conns` persistent connections to http://198.18.1.1/index.html, each sending
//!   on its own open-loop schedule (request j of connection i is due at
//!   `start + (i / conns + j) x conns / rate`; never more than one request outstanding on a
//!   connection: a late answer delays that connection's next request, which then goes at once).
//!   `max` drops the schedule: each connection sends its next request as soon as the answer is in;
//! - short connections: one request per connection (`Connection: close`, the server closes first),
//!   connections opened on one open-loop schedule at the aggregate rate, at most
//!   [`SHORT_IN_FLIGHT`] at a time (a due connection beyond that is counted as skipped).
//!
//! Every request has its own URI (`?s=<step>&c=<conn>&n=<seq>`), so the two access logs can be
//! matched request by request. Each step offers one rate for `--step` seconds, then waits until the
//! test server has as many requests as online served (at most [`DRAIN_WAIT`]) and is quiet for
//! [`QUIET`]; it reads:
//! - requests served online and requests the test server received, matched by fingerprint
//!   (method, URI, request length): fidelity % = matched / online ("test requests" in the
//!   tables is the matched count), and any extra copies;
//! - the copier's CPU (per thread from `/proc/PID/task/*/schedstat`, user/system from
//!   `/proc/PID/stat`), its RSS (`VmRSS`, `VmHWM`), its capture drops (`copier_kernel_drops_total`
//!   from its metrics), the sessions left in its table once the step settled
//!   (`copier_sessions_active`), the intercept's CPU, and the test host's NFQUEUE drops
//!   (`/proc/net/netfilter/nfnetlink_queue`);
//! - leaks: the setup's leak counter (`lab::leak`: mangle POSTROUTING rules on `test`) counts
//!   packets from port 80 (and 6379 with the redis scenario) to the client ranges, IPv4 and IPv6,
//!   that got past the intercept's NFQUEUE rules in OUTPUT; it must stay 0.
//!
//! - real time: the share of the step's online requests whose copy the test server had logged
//!   when the load generator stopped sending (the last request written, from the bench's wall
//!   clock), 1 s later, and in all; and the copy lag, test minus online `$msec` of the same request
//!   (matched by fingerprint; nginx logs a request when its answer is out, at 1 ms resolution).
//!
//! Then the issue-10 scenarios (`--scenarios`, default all; `bench_copier --help` lists them):
//! fixed-rate CPU scenarios (16 connections with a 4 ms think time after each answer: keep-alive,
//! `Connection: close`, 100 KB answers; copier and intercept CPU s per 1,000 copied requests, the
//! intercept's records and NFQUEUE packets per request from its metrics), redis GET from
//! `redis-benchmark -c 16` (redis-server on `online` and `test`, the copier mapping 6379, the
//! intercept guarding it; counted with `INFO commandstats` at the end of the load, 1 s later, and
//! once stable), and HTTP keep-alive at full speed on 16 and on 1 connection. Each scenario waits
//! for its copies until the test server has them all, none came for 3 s, or `--final-wait` passed.
//! A last table prints the figures against the issue's targets, PASS/FAIL (informative only).
//!
//! CPU % is CPU time over the step's sending time, the drain after it included (the copier works
//! until the test server has everything); CPU s per 1000 copied requests divides the same CPU time
//! by the requests the test server received. The fidelity of every step is computed again from
//! the final logs at the end (so a copy that arrived late still counts for its step).
//!
//! ```text
//! cargo build --release -p lab -p copier -p intercept --bins
//! target/release/bench_copier [--rates 1000,2000,4300,8000,16000,max] [--short-rates 500,1000,2000,4300]
//!                             [--step 4] [--conns 64] [--perf] [--perf-short] [--perf-rate 4300]
//!                             [--keep-dir] [--pcap] [--kernel-ports] [--copier-args 'ARGS']
//!                             [--scenarios all|none|LIST] [--scenario-secs 8] [--redis-requests 200000]
//!                             [--final-wait 60]
//! ```
//! Options: `--rates` (keep-alive requests/s, `max` = as fast as answers come), `--short-rates`
//! (`none` skips the short connections), `--step` (seconds per rate), `--conns` (keep-alive
//! connections), `--perf` / `--perf-short` (a last step at `--perf-rate` under `perf stat` and
//! `perf record -g`, keep-alive or short connections), `--keep-dir` (keep the lab's work
//! directory: logs, perf data), `--pcap` (also keep a headers-only pcap of the test host's link),
//! `--kernel-ports` (let the kernel pick the short connections' client ports: it reuses them within
//! seconds, see below), `--copier-args 'ARGS'` (extra copier flags, e.g. ring sizes). The same
//! from `BENCH_RATES`, `BENCH_SHORT_RATES`, `BENCH_STEP`, `BENCH_CONNS`, `BENCH_PERF=1`,
//! `BENCH_PERF_SHORT=1`, `BENCH_PERF_RATE`, `BENCH_KEEP_DIR=1`, `BENCH_PCAP=1`,
//! `BENCH_KERNEL_PORTS=1`, `BENCH_COPIER_ARGS`; flags win.
//!
//! Client ports: the short connections walk through ports 1024..=59999 in order (the kernel picks
//! the keep-alive ones from 60000..=65535), so no client port comes back within a run of up to
//! 58,976 short connections. The test server keeps every copied connection in TIME_WAIT for 60 s,
//! and a new copied SYN on such a port is refused by it; `--kernel-ports` shows what that does.
//!
//! It exits non-zero if a response leaked, if a process died, or if the test server received a
//! request nobody sent online; it removes the lab in every case (the work directory too, unless
//! `--keep-dir`).

use anyhow::{bail, Context, Result};
use lab::bench::{fetch_metrics, parse_rate, perf, rate_label, realtime, wall_ms, Cpu, RealTime, RedisConn, TICK_NS};
use lab::http::Head;
use lab::procstat::memory_kib;
use lab::setup::{metric_sum, tail, CopyOptions, Copying};
use lab::{addr, Host, Lab, LabOptions, LogEntry, NginxOptions};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Where the copier serves its metrics (inside `online`).
const COPIER_METRICS: &str = "127.0.0.1:9465";
/// Where the intercept serves its metrics (inside `test`).
const INTERCEPT_METRICS: &str = "127.0.0.1:9466";
/// Most short connections open at once.
const SHORT_IN_FLIGHT: usize = 1000;
/// After a step, the longest wait for the test server to reach the online count.
const DRAIN_WAIT: Duration = Duration::from_secs(5);
/// ... and then the quiet time that ends the step.
const QUIET: Duration = Duration::from_millis(700);
/// Added to [`QUIET`] so that a metrics export follows the step's last copy.
const EXPORT_LAG: Duration = Duration::from_millis(400);
/// Fidelity that counts as "copied" for the summary line.
const GOOD_FIDELITY: f64 = 99.9;

fn main() {
    match run() {
        Ok(()) => {}
        Err(e) => {
            eprintln!("bench_copier failed: {e:#}");
            std::process::exit(1);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Settings.

#[derive(Debug, Clone)]
struct Args {
    /// Keep-alive request rates; `None` is "each connection as fast as it gets answers".
    rates: Vec<Option<u64>>,
    /// Short-connection rates (requests = connections per second).
    short_rates: Vec<u64>,
    step: Duration,
    conns: usize,
    perf: bool,
    /// Profile a short-connection step instead of a keep-alive one.
    perf_short: bool,
    perf_rate: u64,
    keep_dir: bool,
    /// Keep a pcap (headers) of the test host's link (`test-link.pcap` in the work directory).
    pcap: bool,
    /// Let the kernel choose the short connections' client ports (it reuses ports within
    /// seconds) instead of walking through the port range.
    kernel_ports: bool,
    /// Extra arguments for the copier.
    copier_args: Vec<String>,
    /// The issue-10 scenarios to run, in order.
    scenarios: Vec<Scenario>,
    /// Load time of each HTTP scenario.
    scenario_step: Duration,
    /// Requests of the redis scenario (`redis-benchmark -n`).
    redis_requests: u64,
    /// Longest wait for a scenario's copies after its load.
    final_wait: Duration,
}

fn parse_args() -> Result<Args> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let mut rates = env("BENCH_RATES").unwrap_or_else(|| "1000,2000,4300,8000,16000,max".into());
    let mut short = env("BENCH_SHORT_RATES").unwrap_or_else(|| "500,1000,2000,4300".into());
    let mut step = env("BENCH_STEP").unwrap_or_else(|| "4".into());
    let mut conns = env("BENCH_CONNS").unwrap_or_else(|| "64".into());
    let mut perf = env("BENCH_PERF").is_some();
    let mut perf_short = env("BENCH_PERF_SHORT").is_some();
    let mut perf_rate = env("BENCH_PERF_RATE").unwrap_or_else(|| "4300".into());
    let mut keep_dir = env("BENCH_KEEP_DIR").is_some();
    let mut pcap = env("BENCH_PCAP").is_some();
    let mut kernel_ports = env("BENCH_KERNEL_PORTS").is_some();
    let mut copier_args = env("BENCH_COPIER_ARGS").unwrap_or_default();
    let mut scenarios = env("BENCH_SCENARIOS").unwrap_or_else(|| "all".into());
    let mut scenario_step = env("BENCH_SCENARIO_SECS").unwrap_or_else(|| "8".into());
    let mut redis_requests = env("BENCH_REDIS_REQUESTS").unwrap_or_else(|| "200000".into());
    let mut final_wait = env("BENCH_FINAL_WAIT").unwrap_or_else(|| "60".into());
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match a.as_str() {
            "--rates" => rates = val("--rates")?,
            "--short-rates" => short = val("--short-rates")?,
            "--step" => step = val("--step")?,
            "--conns" => conns = val("--conns")?,
            "--perf" => perf = true,
            "--perf-short" => perf_short = true,
            "--perf-rate" => perf_rate = val("--perf-rate")?,
            "--keep-dir" => keep_dir = true,
            "--pcap" => pcap = true,
            "--kernel-ports" => kernel_ports = true,
            "--copier-args" => copier_args = val("--copier-args")?,
            "--scenarios" => scenarios = val("--scenarios")?,
            "--scenario-secs" => scenario_step = val("--scenario-secs")?,
            "--redis-requests" => redis_requests = val("--redis-requests")?,
            "--final-wait" => final_wait = val("--final-wait")?,
            "-h" | "--help" => {
                println!(
                    "bench_copier [--rates 1000,2000,4300,8000,16000,max] [--short-rates 500,1000,2000,4300|none] \
                     [--step SECS] [--conns N] [--perf] [--perf-short] [--perf-rate REQS] [--keep-dir] \
                     [--pcap] \
                     [--kernel-ports] [--copier-args 'ARGS'] [--scenarios all|none|LIST] [--scenario-secs 8] \
                     [--redis-requests 200000] [--final-wait 60]\n\
                     (or BENCH_RATES, BENCH_SHORT_RATES, BENCH_STEP, BENCH_CONNS, BENCH_PERF=1, BENCH_PERF_SHORT=1, BENCH_PERF_RATE, \
                     BENCH_KEEP_DIR=1, BENCH_PCAP=1, BENCH_KERNEL_PORTS=1, BENCH_COPIER_ARGS, BENCH_SCENARIOS, BENCH_SCENARIO_SECS, \
                     BENCH_REDIS_REQUESTS, BENCH_FINAL_WAIT)\n\n\
                     Every step also prints how close to real time the copy was: the share of its online requests the test \
                     server had logged when the load generator stopped sending, 1 s later, and in all, and the copy lag \
                     (test minus online log time of each request, p50/p99/max ms).\n\n\
                     After the rate steps come the issue-10 scenarios (default all; --scenarios none skips them, \
                     --rates none --short-rates none runs only them; a scenario waits for its copies until the test \
                     server has them all, none came for 3 s, or --final-wait seconds passed: \"final\" is by then):\n{}\n\
                     and at the end a PASS/FAIL summary against the issue's targets (informative: the exit status is 0 \
                     unless a response leaked, a process died or the test server got a request nobody sent).",
                    Scenario::ALL
                        .iter()
                        .map(|s| format!("  {:<12} {}", s.name(), s.what()))
                        .collect::<Vec<_>>()
                        .join("\n")
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    let step: f64 = step.parse().context("--step is seconds, e.g. 4 or 1.5")?;
    if !(0.5..=60.0).contains(&step) {
        bail!("--step must be between 0.5 and 60 seconds");
    }
    let list = |s: &str| -> Vec<String> {
        if s.trim() == "none" {
            Vec::new()
        } else {
            s.split(',')
                .filter(|p| !p.trim().is_empty())
                .map(str::to_owned)
                .collect()
        }
    };
    let short_rates = list(&short)
        .iter()
        .map(|r| parse_rate(r)?.context("short connections need a fixed rate, not max"))
        .collect::<Result<Vec<u64>>>()?;
    let scenarios: Vec<Scenario> = match scenarios.trim() {
        "all" => Scenario::ALL.to_vec(),
        "none" => Vec::new(),
        l => l.split(',').filter(|p| !p.trim().is_empty()).map(Scenario::parse).collect::<Result<_>>()?,
    };
    let scenario_step: f64 = scenario_step.parse().context("--scenario-secs is seconds, e.g. 8")?;
    if !(0.5..=15.0).contains(&scenario_step) {
        bail!("--scenario-secs must be between 0.5 and 15 seconds (think-close walks one client port range)");
    }
    let args = Args {
        rates: list(&rates)
            .iter()
            .map(|r| parse_rate(r))
            .collect::<Result<_>>()?,
        short_rates,
        step: Duration::from_secs_f64(step),
        conns: conns.parse().context("--conns")?,
        perf: perf || perf_short,
        perf_short,
        perf_rate: parse_rate(&perf_rate)?.unwrap_or(4300),
        keep_dir: keep_dir || pcap,
        pcap,
        kernel_ports,
        copier_args: copier_args.split_whitespace().map(str::to_owned).collect(),
        scenarios,
        scenario_step: Duration::from_secs_f64(scenario_step),
        redis_requests: redis_requests.parse().context("--redis-requests")?,
        final_wait: Duration::from_secs_f64(final_wait.parse().context("--final-wait is seconds, e.g. 60")?),
    };
    if args.conns == 0 || args.conns > 4000 {
        bail!("--conns must be 1..=4000");
    }
    Ok(args)
}

// ---------------------------------------------------------------------------------------------
// The load generator (runs on a thread inside `client`; its sockets belong to that namespace).

/// What one step of load did, seen from the clients.
#[derive(Debug, Default)]
struct Load {
    /// Requests written.
    sent: u64,
    /// Answers read with status 200.
    ok: u64,
    /// Short connections not opened because [`SHORT_IN_FLIGHT`] were open.
    skipped: u64,
    /// Errors by kind.
    errors: BTreeMap<String, u64>,
    /// Latency of each answered request (µs, from the moment it was due).
    lat_us: Vec<u32>,
    /// Time from the first due request to the last answer.
    secs: f64,
    /// When the last request was written (wall clock, ms since the epoch; 0: none was): "the
    /// end of the load" of the real-time figures.
    last_send_ms: u64,
}

impl Load {
    fn merge(&mut self, o: Load) {
        self.sent += o.sent;
        self.ok += o.ok;
        self.skipped += o.skipped;
        for (k, v) in o.errors {
            *self.errors.entry(k).or_default() += v;
        }
        self.lat_us.extend(o.lat_us);
        self.last_send_ms = self.last_send_ms.max(o.last_send_ms);
    }

    fn error(&mut self, what: impl std::fmt::Display) {
        *self.errors.entry(what.to_string()).or_default() += 1;
    }

    fn percentile_ms(&mut self, p: f64) -> f64 {
        self.lat_us.sort_unstable();
        lab::bench::quantile(&self.lat_us, p).map_or(0.0, |us| us as f64 / 1000.0)
    }
}

#[derive(Debug)]
struct Generator {
    rt: tokio::runtime::Runtime,
    conns: Vec<Option<tokio::net::TcpStream>>,
    /// The next client port of a short connection (`None`: the kernel chooses).
    next_port: Option<u16>,
}

/// Client ports the short connections walk through; the kernel chooses the keep-alive ones from
/// [`KERNEL_PORTS`], which does not overlap.
const SHORT_PORTS: std::ops::RangeInclusive<u16> = 1024..=59999;
/// `net.ipv4.ip_local_port_range` in `client` (with `--kernel-ports`: 1024 65535).
const KERNEL_PORTS: &str = "60000 65535";

fn online() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80))
}

/// Reads one HTTP/1.1 response with a Content-Length (nginx's static files) into `buf`; returns
/// its status.
async fn read_response(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Result<u16> {
    buf.clear();
    let mut tmp = [0u8; 16384];
    let head = loop {
        if let Some(h) = Head::parse(buf) {
            h.content_length.context("response without Content-Length")?;
            break h;
        }
        let n = s.read(&mut tmp).await?;
        if n == 0 {
            bail!("closed by the server");
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let need = head.total();
    while buf.len() < need {
        let n = s.read(&mut tmp).await?;
        if n == 0 {
            bail!("closed by the server mid-body");
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    if buf.len() > need {
        bail!("more bytes than one response (nothing was pipelined)");
    }
    status_of(&head, buf)
}

/// The status of a response whose head is `head`, or an error quoting its first line.
fn status_of(head: &Head, buf: &[u8]) -> Result<u16> {
    head.status.with_context(|| {
        let line = buf[..head.end].split(|&b| b == b'\r').next().unwrap_or(&[]);
        format!("bad status line {:?}", String::from_utf8_lossy(line))
    })
}

async fn connect() -> Result<tokio::net::TcpStream> {
    let s = tokio::time::timeout(
        Duration::from_secs(3),
        tokio::net::TcpStream::connect(online()),
    )
    .await
    .context("connect timed out")??;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Connects from a given client address and port.
async fn connect_from(from: SocketAddrV4) -> Result<tokio::net::TcpStream> {
    let sock = tokio::net::TcpSocket::new_v4()?;
    sock.bind(SocketAddr::V4(from))
        .with_context(|| format!("bind {from}"))?;
    let s = tokio::time::timeout(Duration::from_secs(3), sock.connect(online()))
        .await
        .context("connect timed out")??;
    s.set_nodelay(true)?;
    Ok(s)
}

/// When a keep-alive connection sends its next request.
#[derive(Debug, Clone, Copy)]
enum Pace {
    /// Open loop: request j is due at `start + phase + j x interval` (or as soon as the previous
    /// answer is in, when that is later).
    Schedule { phase: Duration, interval: Duration },
    /// As soon as the previous answer is in (like `wrk`).
    Full,
    /// `think` after the previous answer is in.
    Think(Duration),
}

/// One keep-alive connection's part of a step: requests for `path` (tagged with the step and the
/// connection) until `end`.
async fn keepalive_conn(
    i: usize,
    stream: Option<tokio::net::TcpStream>,
    tag: String,
    path: &'static str,
    start: tokio::time::Instant,
    end: tokio::time::Instant,
    pace: Pace,
) -> (Option<tokio::net::TcpStream>, Load) {
    let mut load = Load::default();
    let mut s = match stream {
        Some(s) => s,
        None => match connect().await {
            Ok(s) => s,
            Err(e) => {
                load.error(format!("connect: {e:#}"));
                return (None, load);
            }
        },
    };
    let mut buf = Vec::with_capacity(1024);
    let mut j: u64 = 0;
    loop {
        let due = match pace {
            Pace::Schedule { phase, interval } => {
                let due = start + phase + interval * (j as u32);
                if due >= end {
                    break;
                }
                tokio::time::sleep_until(due).await;
                due
            }
            Pace::Full | Pace::Think(_) => {
                let now = tokio::time::Instant::now();
                if now >= end {
                    break;
                }
                now
            }
        };
        let req = format!(
            "GET {path}?s={tag}&c={i}&n={j} HTTP/1.1\r\nHost: {}\r\nUser-Agent: bench_copier\r\nAccept: */*\r\n\r\n",
            addr::ONLINE
        );
        j += 1;
        if let Err(e) = s.write_all(req.as_bytes()).await {
            load.error(format!("write: {e}"));
            return (None, load);
        }
        load.sent += 1;
        load.last_send_ms = wall_ms();
        match tokio::time::timeout(Duration::from_secs(5), read_response(&mut s, &mut buf)).await {
            Ok(Ok(200)) => {
                load.ok += 1;
                load.lat_us
                    .push(due.elapsed().as_micros().min(u32::MAX as u128) as u32);
            }
            Ok(Ok(st)) => load.error(format!("status {st}")),
            Ok(Err(e)) => {
                load.error(format!("read: {e:#}"));
                return (None, load);
            }
            Err(_) => {
                load.error("no answer within 5 s");
                return (None, load);
            }
        }
        if let Pace::Think(t) = pace {
            tokio::time::sleep(t).await;
        }
    }
    (Some(s), load)
}

/// One short connection: connect, one request, read until the server closes.
async fn short_conn(tag: String, n: u64, due: tokio::time::Instant, from: Option<SocketAddrV4>) -> Load {
    let mut load = Load::default();
    let mut sent_ms = 0;
    let r: Result<u16> = async {
        let mut s = match from {
            Some(a) => connect_from(a).await?,
            None => connect().await?,
        };
        let req = format!(
            "GET /index.html?s={tag}&n={n} HTTP/1.1\r\nHost: {}\r\nUser-Agent: bench_copier\r\nConnection: close\r\n\r\n",
            addr::ONLINE
        );
        s.write_all(req.as_bytes()).await.context("write")?;
        sent_ms = wall_ms();
        let mut all = Vec::with_capacity(1024);
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut all))
            .await
            .context("no answer within 5 s")?
            .context("read")?;
        let h = Head::parse(&all).context("truncated response")?;
        status_of(&h, &all)
    }
    .await;
    load.sent = 1;
    load.last_send_ms = sent_ms;
    match r {
        Ok(200) => {
            load.ok = 1;
            load.lat_us
                .push(due.elapsed().as_micros().min(u32::MAX as u128) as u32);
        }
        Ok(st) => load.error(format!("status {st}")),
        Err(e) => load.error(format!("{e:#}")),
    }
    load
}

impl Generator {
    fn new() -> Result<Generator> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Generator {
            rt,
            conns: Vec::new(),
            next_port: None,
        })
    }

    /// Opens `n` keep-alive connections (call inside `client`).
    fn open(&mut self, n: usize) -> Result<()> {
        let conns = self.rt.block_on(async {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(Some(connect().await?));
            }
            Ok::<_, anyhow::Error>(v)
        })?;
        self.conns = conns;
        Ok(())
    }

    /// A keep-alive step: `rate` requests/s over all connections for `dur` (call inside
    /// `client`; a connection that broke is opened again).
    fn keepalive(&mut self, tag: &str, rate: Option<u64>, dur: Duration) -> Load {
        let k = self.conns.len();
        let conns = std::mem::take(&mut self.conns);
        let pace = |i: usize| match rate {
            Some(r) => {
                let interval = Duration::from_secs_f64(k as f64 / r as f64);
                Pace::Schedule { phase: interval.mul_f64(i as f64 / k as f64), interval }
            }
            None => Pace::Full,
        };
        let (conns, total) = self.keepalive_set(conns, tag, "/index.html", pace, dur);
        self.conns = conns;
        total
    }

    /// Runs keep-alive connections `conns` for `dur`, each asking for `path` at its own pace
    /// (call inside `client`); returns them (`None` for one that broke) and what they did.
    fn keepalive_set(
        &mut self,
        conns: Vec<Option<tokio::net::TcpStream>>,
        tag: &str,
        path: &'static str,
        pace: impl Fn(usize) -> Pace,
        dur: Duration,
    ) -> (Vec<Option<tokio::net::TcpStream>>, Load) {
        let k = conns.len();
        let (conns, mut total) = self.rt.block_on(async {
            let start = tokio::time::Instant::now() + Duration::from_millis(5);
            let end = start + dur;
            let handles: Vec<_> = conns
                .into_iter()
                .enumerate()
                .map(|(i, s)| tokio::spawn(keepalive_conn(i, s, tag.to_owned(), path, start, end, pace(i))))
                .collect();
            let mut conns = Vec::with_capacity(k);
            let mut total = Load::default();
            for h in handles {
                match h.await {
                    Ok((s, l)) => {
                        conns.push(s);
                        total.merge(l);
                    }
                    Err(e) => {
                        conns.push(None);
                        total.error(format!("task: {e}"));
                    }
                }
            }
            total.secs = start.elapsed().as_secs_f64();
            (conns, total)
        });
        // a connection that broke is opened again for the next step (a new session to copy)
        let broken = conns.iter().filter(|c| c.is_none()).count();
        if broken > 0 {
            total.error(format!("{broken} connection(s) broke"));
        }
        (conns, total)
    }

    /// Closes connections of a scenario (inside the runtime that owns them).
    fn close_set(&mut self, conns: Vec<Option<tokio::net::TcpStream>>) {
        let _rt = self.rt.enter();
        drop(conns);
    }

    /// Opens `n` keep-alive connections for one scenario (call inside `client`).
    fn open_set(&mut self, n: usize) -> Result<Vec<Option<tokio::net::TcpStream>>> {
        self.rt.block_on(async {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(Some(connect().await?));
            }
            Ok(v)
        })
    }

    /// `loops` clients, each opening a connection from `src`, sending one request
    /// (`Connection: close`), reading the answer until the server closes, waiting `think`, and
    /// again, for `dur` (call inside `client`). Client ports walk through [`SHORT_PORTS`] from
    /// `*next`, which is advanced.
    fn close_loops(&mut self, tag: &str, loops: usize, src: Ipv4Addr, next: &mut u64, think: Duration, dur: Duration) -> Load {
        let seq = Arc::new(AtomicU64::new(*next));
        let total = self.rt.block_on(async {
            let start = tokio::time::Instant::now();
            let end = start + dur;
            let handles: Vec<_> = (0..loops)
                .map(|_| {
                    let (seq, tag) = (seq.clone(), tag.to_owned());
                    tokio::spawn(async move {
                        let mut load = Load::default();
                        let span = u64::from(*SHORT_PORTS.end() - *SHORT_PORTS.start()) + 1;
                        while tokio::time::Instant::now() < end {
                            let n = seq.fetch_add(1, Ordering::Relaxed);
                            let port = *SHORT_PORTS.start() + (n % span) as u16;
                            let due = tokio::time::Instant::now();
                            load.merge(short_conn(tag.clone(), n, due, Some(SocketAddrV4::new(src, port))).await);
                            tokio::time::sleep(think).await;
                        }
                        load
                    })
                })
                .collect();
            let mut total = Load::default();
            for h in handles {
                match h.await {
                    Ok(l) => total.merge(l),
                    Err(e) => total.error(format!("task: {e}")),
                }
            }
            total.secs = start.elapsed().as_secs_f64();
            total
        });
        *next = seq.load(Ordering::Relaxed);
        total
    }

    /// A short-connection step: `rate` connections/s, one request each, for `dur`.
    fn short(&mut self, tag: &str, rate: u64, dur: Duration) -> Load {
        self.rt.block_on(async {
            let start = tokio::time::Instant::now() + Duration::from_millis(5);
            let end = start + dur;
            let interval = Duration::from_secs_f64(1.0 / rate as f64);
            let mut set = tokio::task::JoinSet::new();
            let mut total = Load::default();
            let mut n: u64 = 0;
            loop {
                let due = start + interval.mul_f64(n as f64);
                if due >= end {
                    break;
                }
                tokio::time::sleep_until(due).await;
                while let Some(r) = set.try_join_next() {
                    match r {
                        Ok(l) => total.merge(l),
                        Err(e) => total.error(format!("task: {e}")),
                    }
                }
                if set.len() >= SHORT_IN_FLIGHT {
                    total.skipped += 1;
                } else {
                    let port = self.next_port;
                    if let Some(p) = &mut self.next_port {
                        *p = if *p == *SHORT_PORTS.end() {
                            *SHORT_PORTS.start()
                        } else {
                            *p + 1
                        };
                    }
                    let from = port.map(|p| SocketAddrV4::new(addr::CLIENT, p));
                    set.spawn(short_conn(tag.to_owned(), n, due, from));
                }
                n += 1;
            }
            while let Some(r) = set.join_next().await {
                match r {
                    Ok(l) => total.merge(l),
                    Err(e) => total.error(format!("task: {e}")),
                }
            }
            total.secs = start.elapsed().as_secs_f64();
            total
        })
    }
}

// ---------------------------------------------------------------------------------------------
// What we read about the processes.

/// The copier's metrics (fetched from inside `online`), summed over label sets by name.
fn copier_metrics(lab: &Lab) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for (key, v) in copier_metric_lines(lab) {
        let name = key.split('{').next().unwrap_or(&key).to_owned();
        *m.entry(name).or_default() += v;
    }
    m
}

/// The intercept's counters that the steps read: (records sent to copiers, packets queued).
fn intercept_counters(lab: &Lab) -> (f64, f64) {
    let text = fetch_metrics(lab, Host::Test, INTERCEPT_METRICS);
    (metric_sum(&text, "intercept_records_sent_total", &[]), metric_sum(&text, "intercept_packets_queued_total", &[]))
}

/// The copier's metrics as `(name{labels}, value)` lines.
fn copier_metric_lines(lab: &Lab) -> Vec<(String, f64)> {
    let text = fetch_metrics(lab, Host::Online, COPIER_METRICS);
    text.lines()
        .filter(|l| l.starts_with("copier_"))
        .filter_map(|l| {
            let (key, val) = l.rsplit_once(' ')?;
            Some((key.to_owned(), val.parse::<f64>().ok()?))
        })
        .collect()
}

fn metric(m: &BTreeMap<String, f64>, name: &str) -> u64 {
    // Summed over label sets: with `--workers N` every series carries a `worker` label.
    let labelled = format!("{name}{{");
    m.iter()
        .filter(|(k, _)| k.as_str() == name || k.starts_with(&labelled))
        .map(|(_, v)| *v)
        .sum::<f64>() as u64
}

/// Packets the test host's NFQUEUE queue 0 dropped so far (queue full + socket full), from
/// `/proc/net/netfilter/nfnetlink_queue` inside `test`.
fn nfqueue_drops(lab: &Lab) -> Result<u64> {
    let text = lab.exec_ok(Host::Test, &["cat", "/proc/net/netfilter/nfnetlink_queue"])?;
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() >= 8 && f[0] == "0" {
            return Ok(f[5].parse::<u64>().unwrap_or(0) + f[6].parse::<u64>().unwrap_or(0));
        }
    }
    bail!("queue 0 is not bound in the test namespace:\n{text}")
}

// ---------------------------------------------------------------------------------------------
// Steps.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Idle,
    KeepAlive,
    Short,
    /// One of the issue-10 scenarios.
    Scenario(Scenario),
}

/// One step's figures.
#[derive(Debug)]
struct Row {
    kind: Kind,
    label: String,
    tag: String,
    secs: f64,
    load: Load,
    /// Online log delta, and the test log's.
    online: u64,
    test: u64,
    /// From matching the final logs by fingerprint (filled in at the end).
    matched: u64,
    extra: u64,
    copier: Cpu,
    intercept: Cpu,
    rss_kib: u64,
    hwm_kib: u64,
    kernel_drops: u64,
    /// The test host's NFQUEUE drops (queue full or socket full) during the step.
    nfq_drops: u64,
    /// Sessions in the copier's table once the step settled.
    sessions_open: u64,
    leaks: u64,
    /// Time from the end of the load to the settled test server.
    drain_secs: f64,
    /// When the load ended: the last request written (wall clock, ms since the epoch).
    end_ms: u64,
    /// How close to real time the copy was (from the final logs; for redis from its counters).
    rt: RealTime,
    /// Records the intercept sent to copiers, and packets it read from NFQUEUE, in the step.
    records: u64,
    queued: u64,
    /// Client connections (scenarios; 0 for the rate steps).
    conns: usize,
    /// The time the CPU was measured over: the load and the drain after it.
    window_secs: f64,
    /// Scenarios: when the wait for the copies ended (wall clock ms); copies after it do not
    /// count for the step. `None`: every copy in the final logs counts.
    final_ms: Option<u64>,
    /// Scenarios: the wait ended at its cap, with copies still arriving.
    capped: bool,
    /// Copied sessions that failed during the step (`copier_sessions_failed_total`).
    failed: u64,
    /// What the load generator said (redis-benchmark's summary).
    note: String,
}

/// What a step reads before its load, to subtract.
#[derive(Debug)]
struct Before {
    online: u64,
    test: u64,
    leaks: u64,
    copier_m: BTreeMap<String, f64>,
    nfq: u64,
    copier: Cpu,
    intercept: Cpu,
    /// The intercept's (records sent, packets queued).
    icpt: (f64, f64),
    at: Instant,
}

impl Before {
    fn take(ctx: Ctx<'_>) -> Result<Before> {
        let Ctx { lab, c, pids } = ctx;
        Ok(Before {
            online: c.online.request_count() as u64,
            test: c.test().request_count() as u64,
            leaks: c.leaks.count(lab)?,
            copier_m: copier_metrics(lab),
            nfq: nfqueue_drops(lab)?,
            icpt: intercept_counters(lab),
            copier: Cpu::read(pids.copier, None)?,
            intercept: Cpu::read(pids.intercept, None)?,
            at: Instant::now(),
        })
    }

    /// The step's row, once its load ended (`load_end`) and the test server settled: reads the
    /// CPU now, then (after [`EXPORT_LAG`]) the counters.
    #[allow(clippy::too_many_arguments)]
    fn finish(&self, ctx: Ctx<'_>, kind: Kind, label: String, tag: String, secs: f64, load: Load, online: u64, load_end: Instant) -> Result<Row> {
        let Ctx { lab, c, pids } = ctx;
        let drain_secs = load_end.elapsed().as_secs_f64();
        let window_secs = self.at.elapsed().as_secs_f64();
        let t1 = c.test().request_count() as u64;
        let (cc1, ic1) = (Cpu::read(pids.copier, None)?, Cpu::read(pids.intercept, None)?);
        let (rss_kib, hwm_kib) = memory_kib(pids.copier);
        // the daemons export their counters about once a second: with the quiet time, more than
        // a second has passed since the last copy, so an export came after it
        std::thread::sleep(EXPORT_LAG);
        let (l1, m1, q1, i1) = (c.leaks.count(lab)?, copier_metrics(lab), nfqueue_drops(lab)?, intercept_counters(lab));
        let drops = |m: &BTreeMap<String, f64>| metric(m, "copier_kernel_drops_total");
        c.check_alive()?;
        let end_ms = if load.last_send_ms > 0 { load.last_send_ms } else { wall_ms() };
        Ok(Row {
            kind,
            label,
            tag,
            secs,
            load,
            online,
            test: t1.saturating_sub(self.test),
            matched: 0,
            extra: 0,
            copier: cc1.minus(&self.copier),
            intercept: ic1.minus(&self.intercept),
            rss_kib,
            hwm_kib,
            kernel_drops: drops(&m1).saturating_sub(drops(&self.copier_m)),
            nfq_drops: q1.saturating_sub(self.nfq),
            sessions_open: metric(&m1, "copier_sessions_active"),
            leaks: l1 - self.leaks,
            drain_secs,
            end_ms,
            rt: RealTime::default(),
            records: (i1.0 - self.icpt.0).max(0.0) as u64,
            queued: (i1.1 - self.icpt.1).max(0.0) as u64,
            conns: 0,
            window_secs,
            final_ms: None,
            capped: false,
            failed: metric(&m1, "copier_sessions_failed_total").saturating_sub(metric(&self.copier_m, "copier_sessions_failed_total")),
            note: String::new(),
        })
    }
}

#[derive(Debug)]
struct Pids {
    copier: u32,
    intercept: u32,
}

/// What every step works on.
#[derive(Debug, Clone, Copy)]
struct Ctx<'a> {
    lab: &'a Lab,
    c: &'a Copying,
    pids: &'a Pids,
}

fn run_step(
    ctx: Ctx<'_>,
    gen: &mut Generator,
    kind: Kind,
    label: String,
    tag: String,
    rate: Option<u64>,
    dur: Duration,
) -> Result<Row> {
    let Ctx { lab, c, .. } = ctx;
    let test = c.test();
    let before = Before::take(ctx)?;
    let (o0, t0) = (before.online, before.test);
    let load = match kind {
        Kind::Idle | Kind::Scenario(_) => {
            std::thread::sleep(dur);
            Load {
                secs: dur.as_secs_f64(),
                ..Load::default()
            }
        }
        Kind::KeepAlive => {
            let t = tag.clone();
            lab.in_ns(Host::Client, || gen.keepalive(&t, rate, dur))?
        }
        Kind::Short => {
            let t = tag.clone();
            let r = rate.context("short connections need a rate")?;
            lab.in_ns(Host::Client, || gen.short(&t, r, dur))?
        }
    };
    let load_end = Instant::now();
    // nginx logs a request once its answer is out: the client may have it a moment before
    std::thread::sleep(Duration::from_millis(100));
    let o1 = c.online.request_count() as u64;
    let want = (t0 + (o1 - o0)) as usize;
    test.wait_requests(want, DRAIN_WAIT);
    test.wait_settled(QUIET, Duration::from_secs(5));
    before.finish(ctx, kind, label, tag, dur.as_secs_f64(), load, o1 - o0, load_end)
}

/// The step tag of a logged URI (`...?s=TAG&...`).
fn tag_of(uri: &str) -> Option<&str> {
    let q = uri.split_once('?')?.1;
    q.split('&').find_map(|kv| kv.strip_prefix("s="))
}

/// Fills in `matched`, `extra` and the real-time figures of every row from the final logs;
/// returns the test requests that carry no step tag of ours (must be 0).
fn match_logs(rows: &mut [Row], online: &[LogEntry], test: &[LogEntry]) -> u64 {
    // per step tag: (online, test) request fingerprints with their counts
    type Multiset = BTreeMap<String, u64>;
    let mut by_tag: BTreeMap<String, (Multiset, Multiset)> = BTreeMap::new();
    type Entries<'a> = (Vec<&'a LogEntry>, Vec<&'a LogEntry>);
    let mut entries: BTreeMap<&str, Entries> = BTreeMap::new();
    for e in online {
        if let Some(t) = tag_of(&e.uri) {
            entries.entry(t).or_default().0.push(e);
            *by_tag
                .entry(t.to_owned())
                .or_default()
                .0
                .entry(e.fingerprint())
                .or_default() += 1;
        }
    }
    let mut foreign = 0;
    for e in test {
        match tag_of(&e.uri) {
            Some(t) => {
                entries.entry(t).or_default().1.push(e);
                *by_tag
                    .entry(t.to_owned())
                    .or_default()
                    .1
                    .entry(e.fingerprint())
                    .or_default() += 1
            }
            None => foreign += 1,
        }
    }
    for r in rows.iter_mut() {
        let Some((on, te)) = by_tag.get(&r.tag) else {
            continue;
        };
        let matched: u64 = on
            .iter()
            .map(|(k, &n)| n.min(te.get(k).copied().unwrap_or(0)))
            .sum();
        let test_total: u64 = te.values().sum();
        r.matched = matched;
        r.extra = test_total - matched;
        r.online = on.values().sum();
        if let Some((on, te)) = entries.get(r.tag.as_str()) {
            r.rt = realtime(on, te, r.end_ms, r.final_ms.unwrap_or(u64::MAX));
        }
    }
    foreign
}

fn fidelity(r: &Row) -> f64 {
    if r.online == 0 {
        100.0
    } else {
        100.0 * r.matched as f64 / r.online as f64
    }
}

fn print_table(rows: &mut [Row]) {
    println!(
        "| step | offered req/s | online req/s | online requests | test requests | fidelity % | loss % | extra | \
         copier CPU s/1000 req | copier CPU % | user % | sys % | engine thr(s) % | copier RSS MiB (peak) | \
         intercept CPU % | capture drops | NFQUEUE drops | sessions open after | leaks | client p50/p99 ms | drain s | \
         copied by load end / +1 s / final % | copy lag p50/p99/max ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows.iter_mut() {
        let pct = |ns: f64| 100.0 * ns / (r.secs * 1e9);
        let cpu_ns = r.copier.total() as f64;
        let per_k = if r.matched == 0 {
            "-".to_string()
        } else {
            format!("{:.3}", cpu_ns / 1e9 / (r.matched as f64 / 1000.0))
        };
        let fid = fidelity(r);
        let (p50, p99) = (r.load.percentile_ms(0.5), r.load.percentile_ms(0.99));
        let offered = if r.kind == Kind::Idle {
            0.0
        } else {
            r.load.sent as f64 / r.secs
        };
        println!(
            "| {} | {:.0} | {:.0} | {} | {} | {:.3} | {:.4} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} ({:.1}) | {:.1} | {} | {} | {} | {} | {:.2}/{:.2} | {:.1} | {} | {} |",
            r.label,
            offered,
            r.online as f64 / r.secs,
            r.online,
            r.matched,
            fid,
            100.0 - fid,
            r.extra,
            per_k,
            pct(cpu_ns),
            pct(r.copier.user_ticks as f64 * TICK_NS),
            pct(r.copier.sys_ticks as f64 * TICK_NS),
            pct(r.copier.threads("engine") as f64),
            r.rss_kib as f64 / 1024.0,
            r.hwm_kib as f64 / 1024.0,
            pct(r.intercept.total() as f64),
            r.kernel_drops,
            r.nfq_drops,
            r.sessions_open,
            r.leaks,
            p50,
            p99,
            r.drain_secs,
            r.rt.shares_cell(),
            r.rt.lag_cell(),
        );
    }
}

fn best_rate(rows: &[Row], kind: Kind) -> String {
    let ok: Vec<&Row> = rows
        .iter()
        .filter(|r| r.kind == kind && r.online > 0)
        .collect();
    match ok
        .iter()
        .filter(|r| fidelity(r) >= GOOD_FIDELITY)
        .max_by(|a, b| (a.online as f64 / a.secs).total_cmp(&(b.online as f64 / b.secs)))
    {
        Some(r) => format!(
            "{:.0} requests/s served online (step {}), fidelity {:.3} %",
            r.online as f64 / r.secs,
            r.label,
            fidelity(r)
        ),
        None => format!("none of the {} steps reached {GOOD_FIDELITY} %", ok.len()),
    }
}

// ---------------------------------------------------------------------------------------------
// Issue 10: real time at full speed, and CPU per copied request at the C tool's comparison points.

/// Think time of the fixed-rate CPU scenarios: 16 connections, each waiting this long after
/// every answer (about 3,500 requests/s when answers are quick).
const THINK: Duration = Duration::from_millis(4);
/// The 100 KB answer of `think-100k`, in both document roots.
const BIG_PATH: &str = "/big.bin";
const BIG_SIZE: usize = 100 * 1024;
/// A second client address for `think-close`: its client ports walk on their own, so no copy
/// meets a TIME_WAIT left at the test server by the short-connection steps.
const CLIENT_B: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 3);
const REDIS_PORT: u16 = 6379;
/// The time without a new copy that ends the wait for a scenario's copies before its cap
/// (`--final-wait`).
const STALL: Duration = Duration::from_secs(3);

/// The C tool's CPU seconds per 1,000 copied requests (copier, intercept) in the issue's
/// comparison: keep-alive, `Connection: close`, 100 KB answers. The target is a third of each.
const C_TOOL_CPU: [(Scenario, f64, f64); 3] = [
    (Scenario::ThinkKeepAlive, 0.025, 0.016),
    (Scenario::ThinkClose, 0.071, 0.054),
    (Scenario::Think100k, 0.150, 0.584),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Full16,
    Full1,
    Redis,
    ThinkKeepAlive,
    ThinkClose,
    Think100k,
}

impl Scenario {
    /// The default order: the fixed-rate CPU scenarios first, the full-speed ones last (their
    /// lock-step copies may still arrive after the wait for them ends, and would otherwise
    /// load the next scenario), the one connection at the very end.
    const ALL: [Scenario; 6] = [
        Scenario::ThinkKeepAlive,
        Scenario::ThinkClose,
        Scenario::Think100k,
        Scenario::Redis,
        Scenario::Full16,
        Scenario::Full1,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::Full16 => "full16",
            Scenario::Full1 => "full1",
            Scenario::Redis => "redis",
            Scenario::ThinkKeepAlive => "think-ka",
            Scenario::ThinkClose => "think-close",
            Scenario::Think100k => "think-100k",
        }
    }

    /// The step tag in the URIs.
    fn tag(self) -> &'static str {
        match self {
            Scenario::Full16 => "f16",
            Scenario::Full1 => "f1",
            Scenario::Redis => "rd",
            Scenario::ThinkKeepAlive => "tk",
            Scenario::ThinkClose => "tc",
            Scenario::Think100k => "tb",
        }
    }

    fn conns(self) -> usize {
        match self {
            Scenario::Full1 => 1,
            _ => 16,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Scenario::Full16 => "HTTP keep-alive, 16 connections at full speed (next request as soon as the answer is in, like wrk -c 16), for --scenario-secs",
            Scenario::Full1 => "HTTP keep-alive, 1 connection at full speed, for --scenario-secs",
            Scenario::Redis => "redis GET: redis-benchmark -h 198.18.1.1 -c 16 -n REQUESTS -t get (no pipelining; --redis-requests, default 200000); counted with INFO commandstats, no lag (no access log)",
            Scenario::ThinkKeepAlive => "HTTP keep-alive, 16 connections, 4 ms think time after each answer (CPU per request)",
            Scenario::ThinkClose => "HTTP Connection: close, 16 clients each opening one connection per request, 4 ms think time",
            Scenario::Think100k => "HTTP keep-alive, 100 KB answers, 16 connections, 4 ms think time (CPU, records per answer)",
        }
    }

    fn parse(s: &str) -> Result<Scenario> {
        let s = s.trim();
        Scenario::ALL.into_iter().find(|c| c.name() == s).with_context(|| {
            let names: Vec<&str> = Scenario::ALL.iter().map(|c| c.name()).collect();
            format!("unknown scenario {s:?} (all, none, or a list of {})", names.join(", "))
        })
    }
}

/// The redis servers of the `redis` scenario and a connection to each that reads its counters.
#[derive(Debug)]
struct Redis {
    procs: Vec<lab::Proc>,
    online: RedisConn,
    test: RedisConn,
}

impl Redis {
    fn start(lab: &mut Lab) -> Result<Redis> {
        let mut procs = Vec::new();
        for h in [Host::Online, Host::Test] {
            let dir = lab.dir().join(format!("redis-{}", h.name()));
            std::fs::create_dir_all(&dir)?;
            let d = dir.to_string_lossy().into_owned();
            let port = REDIS_PORT.to_string();
            let argv = [
                "redis-server", "--port", &port, "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "",
                "--appendonly", "no", "--dir", &d,
            ];
            procs.push(lab.spawn(h, &format!("redis-{}", h.name()), &argv)?);
        }
        let at = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, REDIS_PORT));
        let wait = Duration::from_secs(10);
        let online = lab.in_ns(Host::Online, || RedisConn::connect(at, wait))?.context("redis on online")?;
        let test = lab.in_ns(Host::Test, || RedisConn::connect(at, wait))?.context("redis on test")?;
        Ok(Redis { procs, online, test })
    }

    fn check_alive(&self) -> Result<()> {
        for p in &self.procs {
            if let Some(st) = p.exited() {
                bail!("{} exited ({st}):\n{}", p.name(), tail(&p.log(), 20));
            }
        }
        Ok(())
    }
}

/// Waits until `count()` reaches `want` or stops growing for [`STALL`], at most `cap`; returns
/// the last count and whether the cap ended the wait.
fn wait_final(mut count: impl FnMut() -> u64, want: u64, cap: Duration) -> (u64, bool) {
    let deadline = Instant::now() + cap;
    let mut last = count();
    let mut since = Instant::now();
    loop {
        if last >= want || since.elapsed() >= STALL {
            return (last, false);
        }
        if Instant::now() >= deadline {
            return (last, true);
        }
        std::thread::sleep(Duration::from_millis(50));
        let c = count();
        if c != last {
            last = c;
            since = Instant::now();
        }
    }
}

/// What the scenarios keep between them.
#[derive(Debug)]
struct ScenarioState {
    redis: Option<Redis>,
    redis_requests: u64,
    /// Longest wait for a scenario's copies after its load (`--final-wait`).
    final_wait: Duration,
    /// The next port sequence number of `think-close` (from [`CLIENT_B`]).
    close_next: u64,
}

fn run_scenario(ctx: Ctx<'_>, gen: &mut Generator, sc: Scenario, dur: Duration, st: &mut ScenarioState) -> Result<Row> {
    if sc == Scenario::Redis {
        let (n, wait) = (st.redis_requests, st.final_wait);
        let r = st.redis.as_mut().context("redis is not running")?;
        let row = run_redis(ctx, r, n, wait)?;
        r.check_alive()?;
        return Ok(row);
    }
    let Ctx { lab, c, .. } = ctx;
    let test = c.test();
    let kind = Kind::Scenario(sc);
    // fresh keep-alive connections, each copied and registered before the load
    let mut set = None;
    if sc != Scenario::ThinkClose {
        let conns = lab.in_ns(Host::Client, || gen.open_set(sc.conns()))??;
        let (o0, t0) = (c.online.request_count(), test.request_count());
        let warm = |_| Pace::Think(Duration::from_millis(20));
        let (conns, _) = lab.in_ns(Host::Client, || gen.keepalive_set(conns, "warm", "/index.html", warm, Duration::from_millis(200)))?;
        std::thread::sleep(Duration::from_millis(100));
        test.wait_requests(t0 + (c.online.request_count() - o0), DRAIN_WAIT);
        test.wait_settled(Duration::from_millis(300), Duration::from_secs(3));
        set = Some(conns);
    }
    let before = Before::take(ctx)?;
    let tag = sc.tag();
    let load = match set.take() {
        None => {
            let mut next = st.close_next;
            let l = lab.in_ns(Host::Client, || gen.close_loops(tag, sc.conns(), CLIENT_B, &mut next, THINK, dur))?;
            st.close_next = next;
            l
        }
        Some(conns) => {
            let pace = match sc {
                Scenario::Full16 | Scenario::Full1 => Pace::Full,
                _ => Pace::Think(THINK),
            };
            let path = if sc == Scenario::Think100k { BIG_PATH } else { "/index.html" };
            let (conns, l) = lab.in_ns(Host::Client, || gen.keepalive_set(conns, tag, path, |_| pace, dur))?;
            set = Some(conns);
            l
        }
    };
    let load_end = Instant::now();
    // nginx logs a request once its answer is out: the client may have it a moment before
    std::thread::sleep(Duration::from_millis(100));
    let online = c.online.request_count() as u64 - before.online;
    let (_, capped) = wait_final(|| test.request_count() as u64, before.test + online, st.final_wait);
    if !capped {
        test.wait_settled(QUIET, Duration::from_secs(5));
    }
    let final_ms = wall_ms();
    let mut row = before.finish(ctx, kind, sc.name().into(), tag.into(), dur.as_secs_f64(), load, online, load_end)?;
    row.conns = sc.conns();
    row.final_ms = Some(final_ms);
    row.capped = capped;
    if let Some(conns) = set {
        gen.close_set(conns);
    }
    Ok(row)
}

/// The redis scenario: redis-benchmark from `client` against the online redis, the copier
/// mapping 6379 to the test redis; `cmdstat_get` calls at both servers when redis-benchmark
/// ended (it sends its last request just before it exits), 1 s later, and once they stop
/// growing. redis has no access log, so there is no per-request lag.
fn run_redis(ctx: Ctx<'_>, r: &mut Redis, n: u64, final_wait: Duration) -> Result<Row> {
    let Ctx { lab, .. } = ctx;
    let (on0, te0) = (r.online.calls("get")?, r.test.calls("get")?);
    let before = Before::take(ctx)?;
    let (host, port, n_s) = (addr::ONLINE.to_string(), REDIS_PORT.to_string(), n.to_string());
    let out = lab.exec(
        Host::Client,
        &["redis-benchmark", "-h", &host, "-p", &port, "-c", "16", "-n", &n_s, "-t", "get", "-q"],
    )?;
    let end_ms = wall_ms();
    let load_end = Instant::now();
    let te_end = r.test.calls("get")?;
    let on1 = r.online.calls("get")?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!("redis-benchmark failed ({}): {} {}", out.status, stdout.trim(), String::from_utf8_lossy(&out.stderr).trim());
    }
    let online = on1 - on0;
    std::thread::sleep((load_end + Duration::from_secs(1)).saturating_duration_since(Instant::now()));
    let te_1s = r.test.calls("get")?;
    let test_conn = &mut r.test;
    let (mut last, capped) = wait_final(|| test_conn.calls("get").unwrap_or(0), te0 + online, final_wait);
    // then quiet, to see any extra copy
    let quiet_until = Instant::now() + if capped { Duration::ZERO } else { QUIET };
    while Instant::now() < quiet_until {
        std::thread::sleep(Duration::from_millis(100));
        last = last.max(r.test.calls("get")?);
    }
    let copied = (last - te0).min(online);
    let secs = load_end.duration_since(before.at).as_secs_f64();
    let load = Load { sent: online, ok: online, secs, last_send_ms: end_ms, ..Load::default() };
    let mut row = before.finish(ctx, Kind::Scenario(Scenario::Redis), "redis".into(), "rd".into(), secs, load, online, load_end)?;
    row.rt = RealTime {
        online,
        at_end: (te_end - te0).min(online),
        within_1s: (te_1s - te0).min(online),
        copied,
        lags_ms: Vec::new(),
    };
    row.matched = copied;
    row.test = last - te0;
    row.capped = capped;
    row.extra = (last - te0).saturating_sub(online);
    row.conns = 16;
    row.note = stdout.rsplit(['\r', '\n']).find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_owned();
    Ok(row)
}

fn per_thousand(cpu: &Cpu, copied: u64) -> Option<f64> {
    (copied > 0).then(|| cpu.secs() / (copied as f64 / 1000.0))
}

fn print_scenarios(rows: &[Row]) {
    println!(
        "| scenario | conns | online req/s | online requests | copied by load end % | within 1 s % | final % | \
         copy lag p50/p99/max ms | copier CPU s/1000 req | intercept CPU s/1000 req | copier CPU % | intercept CPU % | \
         records/req | NFQUEUE packets/req | capture drops | NFQUEUE drops | failed sessions | extra | leaks | client p50/p99 ms | drain s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let opt = |v: Option<f64>| v.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into());
    for r in rows {
        let rt = &r.rt;
        let copied = rt.copied.max(1) as f64;
        let mut load = Load { lat_us: r.load.lat_us.clone(), ..Load::default() };
        let client = if load.lat_us.is_empty() {
            "-".to_string()
        } else {
            format!("{:.2}/{:.2}", load.percentile_ms(0.5), load.percentile_ms(0.99))
        };
        let pct = |cpu: &Cpu| 100.0 * cpu.secs() / r.window_secs.max(1e-9);
        println!(
            "| {} | {} | {:.0} | {} | {:.1} | {:.1} | {:.2} | {} | {} | {} | {:.1} | {:.1} | {:.2} | {:.2} | {} | {} | {} | {} | {} | {} | {:.1} |",
            r.label,
            r.conns,
            r.online as f64 / r.secs,
            r.online,
            rt.pct(rt.at_end),
            rt.pct(rt.within_1s),
            rt.pct(rt.copied),
            rt.lag_cell(),
            opt(per_thousand(&r.copier, rt.copied)),
            opt(per_thousand(&r.intercept, rt.copied)),
            pct(&r.copier),
            pct(&r.intercept),
            r.records as f64 / copied,
            r.queued as f64 / copied,
            r.kernel_drops,
            r.nfq_drops,
            r.failed,
            r.extra,
            r.leaks,
            client,
            r.drain_secs,
        );
    }
    println!();
    println!("(\"copied by load end\": the share of the online requests the test server had logged when the load generator");
    println!("stopped sending; nginx logs a request when its answer is out, at both servers, and the lag is test minus online");
    println!("log time; CPU % is over the load and the drain after it; records and packets are the intercept's");
    println!("intercept_records_sent_total and intercept_packets_queued_total per copied request; failed sessions: the");
    println!("copier's copier_sessions_failed_total in the step, by reason in its counters at the end.)");
    for r in rows.iter().filter(|r| !r.note.is_empty()) {
        println!("{}: {}", r.label, r.note);
    }
    for r in rows.iter().filter(|r| r.capped) {
        println!(
            "{}: copies were still arriving when the wait for them ended ({:.0} s after the load): \"final\" and the lag \
             count the copies up to then",
            r.label, r.drain_secs
        );
    }
}

/// The issue's targets against what the scenarios measured.
fn print_targets(rows: &[Row]) {
    let find = |sc: Scenario| rows.iter().find(|r| r.kind == Kind::Scenario(sc));
    // (what, measured, goal, at least?, goal text)
    let mut t: Vec<(String, Option<f64>, f64, bool, String)> = Vec::new();
    for (sc, what) in [(Scenario::Full16, "HTTP keep-alive full speed (16 conns)"), (Scenario::Redis, "redis GET full speed (16 conns)")] {
        let r = find(sc);
        t.push((format!("{what}: copied within 1 s of the load's end"), r.map(|r| r.rt.pct(r.rt.within_1s)), 95.0, true, ">= 95 %".into()));
        t.push((format!("{what}: copied in all"), r.map(|r| r.rt.pct(r.rt.copied)), 99.9, true, ">= 99.9 %".into()));
    }
    let r = find(Scenario::Full1);
    t.push((
        "HTTP keep-alive full speed (1 conn): copied within 1 s of the load's end".into(),
        r.map(|r| r.rt.pct(r.rt.within_1s)),
        90.0,
        true,
        ">= 90 %".into(),
    ));
    for (sc, c_copier, c_icpt) in C_TOOL_CPU {
        let r = find(sc);
        let what = match sc {
            Scenario::ThinkKeepAlive => "keep-alive",
            Scenario::ThinkClose => "Connection: close",
            _ => "100 KB answers",
        };
        for (who, c_tool, cpu) in [("copier", c_copier, r.map(|r| &r.copier)), ("intercept", c_icpt, r.map(|r| &r.intercept))] {
            let measured = r.zip(cpu).and_then(|(r, cpu)| per_thousand(cpu, r.rt.copied));
            t.push((
                format!("{who} CPU s per 1000 copied requests, {what} (4 ms think)"),
                measured,
                c_tool / 3.0,
                false,
                format!("<= {:.4} (C tool {c_tool} / 3)", c_tool / 3.0),
            ));
        }
    }
    let r = find(Scenario::Think100k);
    t.push((
        "intercept records per 100 KB answer".into(),
        r.filter(|r| r.rt.copied > 0).map(|r| r.records as f64 / r.rt.copied as f64),
        4.0,
        false,
        "<= 4".into(),
    ));
    println!("| target | measured | goal | result |");
    println!("|---|---:|---|---|");
    let (mut pass, mut fail) = (0, 0);
    for (what, m, goal, at_least, goal_text) in t {
        let (shown, verdict) = match m {
            None => ("-".to_string(), "not run"),
            Some(v) => {
                let ok = if at_least { v >= goal } else { v <= goal };
                if ok {
                    pass += 1;
                } else {
                    fail += 1;
                }
                let shown = if goal_text.contains('%') { format!("{v:.2} %") } else { format!("{v:.4}") };
                (shown, if ok { "PASS" } else { "FAIL" })
            }
        };
        println!("| {what} | {shown} | {goal_text} | {verdict} |");
    }
    println!();
    println!("issue 10 targets: {pass} PASS, {fail} FAIL (informative: the exit status does not depend on them)");
}

// ---------------------------------------------------------------------------------------------
// perf (optional): where the copier's time goes at one rate.

fn perf_step(
    ctx: Ctx<'_>,
    gen: &mut Generator,
    short: bool,
    rate: u64,
    dur: Duration,
) -> Result<()> {
    let Ctx { lab, c, pids } = ctx;
    let secs = format!("{:.2}", dur.as_secs_f64());
    let events = "task-clock,context-switches,raw_syscalls:sys_enter,syscalls:sys_enter_ppoll,\
                  syscalls:sys_enter_sendmmsg,syscalls:sys_enter_sendmsg,syscalls:sys_enter_sendto,\
                  syscalls:sys_enter_recvfrom,syscalls:sys_enter_read,syscalls:sys_enter_write,\
                  syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_getsockopt";
    let mut session = perf::Session::start(lab.dir(), "perf-copier", pids.copier, events, dur)?;
    let t0 = c.test().request_count();
    let load_dur = dur.saturating_sub(Duration::from_millis(300));
    let load = if short {
        lab.in_ns(Host::Client, || gen.short("perf", rate, load_dur))?
    } else {
        lab.in_ns(Host::Client, || gen.keepalive("perf", Some(rate), load_dur))?
    };
    let what = if short {
        "short connections".to_string()
    } else {
        format!("{} keep-alive connections", gen.conns.len())
    };
    session.wait();
    c.test().wait_settled(QUIET, Duration::from_secs(5));
    let copied = (c.test().request_count() - t0).max(1) as f64;
    println!();
    println!(
        "## where the copier's time goes: {rate} requests/s on {what} for {secs} s under perf \
         ({} sent online, {copied:.0} copied)",
        load.sent
    );
    println!();
    // perf stat, per thread, per copied request
    let by = perf::stat_per_thread(&std::fs::read_to_string(session.stat_path()).unwrap_or_default());
    if by.is_empty() {
        println!("(perf stat gave nothing; its stderr: {})", session.stderr_of("stat"));
    } else {
        println!("perf stat per thread, per copied request (task-clock in µs, the rest in counts):");
        println!();
        perf::print_stat_table(&by, copied);
    }
    let data = session.data_path();
    if !data.exists() {
        println!("(perf record gave nothing; its stderr: {})", session.stderr_of("record"));
        return Ok(());
    }
    perf::print_reports(
        &data,
        &[
            ("by thread and binary (self)", "--no-children", "comm,dso"),
            ("top symbols (self)", "--no-children", "comm,dso,sym"),
            ("top symbols (inclusive)", "--children", "comm,sym"),
        ],
        40,
    )?;
    println!("(perf data: {})", data.display());
    Ok(())
}

// ---------------------------------------------------------------------------------------------

fn proc_comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn run() -> Result<()> {
    let args = parse_args()?;
    lab::available().map_err(|e| anyhow::anyhow!("{e}"))?;
    let redis = args.scenarios.contains(&Scenario::Redis);
    if redis {
        for tool in ["redis-server", "redis-benchmark"] {
            if lab::which(tool).is_none() {
                bail!("the redis scenario needs `{tool}` (scripts/install-deps.sh installs it), or leave it out of --scenarios");
            }
        }
    }
    let started = Instant::now();
    let mut lab = Lab::with(LabOptions {
        offloads: true,
        capture_test_link: args.pcap,
    })?;
    if args.keep_dir {
        lab.keep_dir();
    }
    // Short connections: the server closes first, so the client keeps no TIME_WAIT, but the test
    // server does (60 s) for the copies. The generator walks through the client ports so that none
    // comes back within a run (up to 58,976 short connections), unless --kernel-ports.
    let range = if args.kernel_ports {
        "1024 65535"
    } else {
        KERNEL_PORTS
    };
    lab.sh(
        Host::Client,
        &format!("sysctl -qw net.ipv4.ip_local_port_range='{range}'"),
    )?;
    // both nginx serve the 100 KB file of think-100k; the intercept exports its counters; with
    // the redis scenario the copier also maps 6379 and the intercept guards it
    let nginx = NginxOptions { files: vec![(BIG_PATH.into(), BIG_SIZE)], ..NginxOptions::default() };
    let redis_map = format!("{REDIS_PORT}={}:{REDIS_PORT}", addr::TEST);
    let mut copier_args: Vec<String> = ["--metrics", COPIER_METRICS, "--seed", "7"].iter().map(|a| a.to_string()).collect();
    let intercept_args: Vec<String> = vec!["--metrics".into(), INTERCEPT_METRICS.into()];
    if redis {
        copier_args.extend(["--map".into(), redis_map]);
    }
    copier_args.extend(args.copier_args.iter().cloned());
    let opts = CopyOptions {
        online: nginx.clone(),
        test: Some(nginx),
        copier_args,
        intercept_args,
        extra_ports: if redis { vec![REDIS_PORT] } else { Vec::new() },
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).context("start the copying setup")?;
    let pids = Pids {
        copier: c
            .copier
            .as_ref()
            .context("the copier was not started")?
            .pid(),
        intercept: c.intercept.pid(),
    };
    for (pid, want) in [(pids.copier, "copier"), (pids.intercept, "intercept")] {
        let comm = proc_comm(pid);
        if comm != want {
            bail!("pid {pid} is {comm:?}, not the {want} (ip netns exec and env should exec)");
        }
    }
    let mut scen = ScenarioState {
        redis: if redis { Some(Redis::start(&mut lab).context("start redis on online and test")?) } else { None },
        redis_requests: args.redis_requests,
        final_wait: args.final_wait,
        close_next: 0,
    };
    if args.scenarios.contains(&Scenario::ThinkClose) {
        lab.exec_ok(Host::Client, &["ip", "addr", "add", &format!("{CLIENT_B}/24"), "dev", lab::ifname::CLIENT_TO_ONLINE])?;
    }

    let mut gen = Generator::new()?;
    if !args.kernel_ports {
        gen.next_port = Some(*SHORT_PORTS.start());
    }
    let conns = args.conns;
    lab.in_ns(Host::Client, || gen.open(conns))?
        .context("open the keep-alive connections")?;
    // warm-up: every connection's session copied and registered, caches warm
    let warm = lab.in_ns(Host::Client, || {
        gen.keepalive("warm", Some(500), Duration::from_secs(1))
    })?;
    c.test().wait_requests(warm.ok as usize, DRAIN_WAIT);
    c.test()
        .wait_settled(Duration::from_millis(300), Duration::from_secs(3));
    println!(
        "lab {} up in {:.1} s; copier pid {}, intercept pid {}; offloads on; {} keep-alive connections; \
         {:.1} s per step; machine: {} CPUs, load average {}",
        lab.prefix(),
        started.elapsed().as_secs_f64(),
        pids.copier,
        pids.intercept,
        args.conns,
        args.step.as_secs_f64(),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    );

    let ctx = Ctx {
        lab: &lab,
        c: &c,
        pids: &pids,
    };
    let mut rows = vec![run_step(
        ctx,
        &mut gen,
        Kind::Idle,
        "idle".into(),
        "idle".into(),
        Some(0),
        Duration::from_secs(1),
    )?];
    for (i, &rate) in args.rates.iter().enumerate() {
        eprintln!("keep-alive: step {} ...", rate_label("/s", rate));
        let tag = format!("k{i}");
        rows.push(run_step(
            ctx,
            &mut gen,
            Kind::KeepAlive,
            rate_label("/s", rate),
            tag,
            rate,
            args.step,
        )?);
    }
    for (i, &rate) in args.short_rates.iter().enumerate() {
        eprintln!("short connections: step {rate}/s ...");
        let tag = format!("x{i}");
        rows.push(run_step(
            ctx,
            &mut gen,
            Kind::Short,
            format!("{rate}/s"),
            tag,
            Some(rate),
            args.step,
        )?);
    }
    for &sc in &args.scenarios {
        eprintln!("scenario {} ...", sc.name());
        rows.push(run_scenario(ctx, &mut gen, sc, args.scenario_step, &mut scen)?);
    }
    // Every step's fidelity from the final logs.
    c.test()
        .wait_settled(Duration::from_millis(500), Duration::from_secs(3));
    let (online_log, test_log) = (c.online.requests()?, c.test().requests()?);
    let foreign = match_logs(&mut rows, &online_log, &test_log);

    println!();
    println!("## keep-alive: {} connections, one request outstanding each, open-loop pacing per connection", args.conns);
    println!();
    let (scenarios, rows): (Vec<Row>, Vec<Row>) = rows.into_iter().partition(|r| matches!(r.kind, Kind::Scenario(_)));
    let (ka, short): (Vec<Row>, Vec<Row>) = rows.into_iter().partition(|r| r.kind != Kind::Short);
    let mut ka = ka;
    let mut short = short;
    print_table(&mut ka);
    if !short.is_empty() {
        println!();
        println!("## short connections: one request per connection (Connection: close), connections opened at the rate");
        println!();
        print_table(&mut short);
    }
    println!();
    println!("highest rate with fidelity >= {GOOD_FIDELITY} %:");
    println!("  keep-alive:        {}", best_rate(&ka, Kind::KeepAlive));
    if !short.is_empty() {
        println!("  short connections: {}", best_rate(&short, Kind::Short));
    }
    if !scenarios.is_empty() {
        println!();
        println!("## issue 10 scenarios ({:.1} s of load each; redis: {} requests)", args.scenario_step.as_secs_f64(), args.redis_requests);
        println!();
        for r in &scenarios {
            if let Kind::Scenario(sc) = r.kind {
                println!("- {}: {}", sc.name(), sc.what());
            }
        }
        println!();
        print_scenarios(&scenarios);
    }
    let all: Vec<&Row> = ka.iter().chain(short.iter()).chain(scenarios.iter()).collect();
    for r in &all {
        if !r.load.errors.is_empty() || r.load.skipped > 0 {
            println!(
                "  client errors in step {} ({:?}): {:?}; skipped {}",
                r.label, r.kind, r.load.errors, r.load.skipped
            );
        }
        if r.test < r.matched + r.extra && !matches!(r.kind, Kind::Scenario(_)) {
            println!(
                "  step {}: {} copies reached the test server after the step had settled (counted for it)",
                r.label,
                r.matched + r.extra - r.test
            );
        }
        if r.load.ok != r.online && r.kind != Kind::Idle {
            println!(
                "  step {}: the clients got {} answers, the online log has {}",
                r.label, r.load.ok, r.online
            );
        }
    }

    if args.perf {
        if perf::works() {
            let dur = args.step.max(Duration::from_secs(3));
            perf_step(ctx, &mut gen, args.perf_short, args.perf_rate, dur)?;
        } else {
            println!("\n(perf is not usable here: no profile)");
        }
    }

    let lines = copier_metric_lines(&lab);
    let mut m: BTreeMap<String, f64> = BTreeMap::new();
    for (key, v) in &lines {
        *m.entry(key.split('{').next().unwrap_or(key).to_owned())
            .or_default() += v;
    }
    println!();
    println!("copier counters at the end:");
    for k in [
        "copier_packets_captured_total",
        "copier_kernel_packets_total",
        "copier_kernel_drops_total",
        "copier_sessions_started_total",
        "copier_sessions_midstream_total",
        "copier_sessions_completed_total",
        "copier_sessions_failed_total",
        "copier_segments_sent_total",
        "copier_retransmissions_total",
        "copier_records_received_total",
        "copier_answer_timeouts_total",
        "copier_packets_dropped_total",
        "copier_send_errors_total",
        "copier_send_dropped_total",
    ] {
        println!("  {k} {}", metric(&m, k));
    }
    for (key, v) in lines.iter().filter(|(k, v)| k.contains('{') && *v > 0.0) {
        if ["dropped_total", "failed_total", "errors_total"]
            .iter()
            .any(|n| key.contains(n))
        {
            println!("  {key} {v}");
        }
    }
    // The test server's view: SYNs its TIME_WAIT sockets refused (PAWS), connections killed
    // in TIME_WAIT by a RST, listen queue drops. Non-zero PAWSTimewait means copies arrived on
    // tuples the test server still remembered.
    let counters: Vec<String> = [
        "TcpExtPAWSTimewait",
        "TcpExtTWKilled",
        "TcpExtTWRecycled",
        "TcpExtListenDrops",
    ]
    .iter()
    .map(|k| {
        format!(
            "{} {}",
            k.trim_start_matches("TcpExt"),
            lab.netstat_counter(Host::Test, k).unwrap_or(0)
        )
    })
    .collect();
    println!("test host TCP counters: {}", counters.join(", "));
    let log = c.copier.as_ref().map(|p| p.log()).unwrap_or_default();
    let warns = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .count();
    println!(
        "copier log: {} lines, {warns} warnings or errors",
        log.lines().count()
    );
    if warns > 0 {
        println!(
            "{}",
            tail(
                &log.lines()
                    .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                    .collect::<Vec<_>>()
                    .join("\n"),
                10
            )
        );
    }
    if !scenarios.is_empty() {
        println!();
        println!("## issue 10: the targets");
        println!();
        print_targets(&scenarios);
    }
    let leaks: u64 = all.iter().map(|r| r.leaks).sum();
    let extra: u64 = all.iter().map(|r| r.extra).sum();
    println!(
        "\nleaked responses: {leaks}; copies nobody sent online: {foreign} untagged, {extra} extra; total time {:.1} s",
        started.elapsed().as_secs_f64()
    );
    c.check_alive()?;
    if leaks > 0 || foreign > 0 {
        bail!("{leaks} responses leaked, {foreign} requests at the test server were never sent online");
    }
    Ok(())
}
