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
//! - leaks: a mangle POSTROUTING rule on `test` counts packets from port 80 to the client ranges
//!   that got past the intercept's NFQUEUE rule in OUTPUT; it must stay 0.
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
use lab::procstat::memory_kib;
use lab::setup::{tail, CopyOptions, Copying};
use lab::{addr, Host, Lab, LabOptions, LogEntry};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV4};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Where the copier serves its metrics (inside `online`).
const COPIER_METRICS: &str = "127.0.0.1:9465";
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
/// USER_HZ: the unit of utime/stime in /proc/PID/stat.
const TICK_NS: f64 = 1e9 / 100.0;

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
}

fn parse_rate(s: &str) -> Result<Option<u64>> {
    let s = s.trim();
    if s == "max" {
        return Ok(None);
    }
    let (n, mult) = match s.strip_suffix('k') {
        Some(n) => (n, 1000.0),
        None => (s, 1.0),
    };
    let v: f64 = n
        .parse()
        .with_context(|| format!("rate {s:?} is not a number, NNk or max"))?;
    if v.is_nan() || v < 1.0 {
        bail!("rate {s:?} must be at least 1");
    }
    Ok(Some((v * mult) as u64))
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
            "-h" | "--help" => {
                println!(
                    "bench_copier [--rates 1000,2000,4300,8000,16000,max] [--short-rates 500,1000,2000,4300|none] \
                     [--step SECS] [--conns N] [--perf] [--perf-short] [--perf-rate REQS] [--keep-dir] \
                     [--pcap] \
                     [--kernel-ports] [--copier-args 'ARGS']\n\
                     (or BENCH_RATES, BENCH_SHORT_RATES, BENCH_STEP, BENCH_CONNS, BENCH_PERF=1, BENCH_PERF_SHORT=1, BENCH_PERF_RATE, \
                     BENCH_KEEP_DIR=1, BENCH_PCAP=1, BENCH_KERNEL_PORTS=1, BENCH_COPIER_ARGS)"
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
    }

    fn error(&mut self, what: impl std::fmt::Display) {
        *self.errors.entry(what.to_string()).or_default() += 1;
    }

    fn percentile_ms(&mut self, p: f64) -> f64 {
        if self.lat_us.is_empty() {
            return 0.0;
        }
        self.lat_us.sort_unstable();
        let i = ((self.lat_us.len() - 1) as f64 * p).round() as usize;
        self.lat_us[i] as f64 / 1000.0
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

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads one HTTP/1.1 response with a Content-Length (nginx's static files) into `buf`; returns
/// its status.
async fn read_response(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Result<u16> {
    buf.clear();
    let mut tmp = [0u8; 4096];
    let (head_end, need) = loop {
        if let Some(h) = find(buf, b"\r\n\r\n") {
            let head = std::str::from_utf8(&buf[..h]).context("response head is not UTF-8")?;
            let cl = head
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse::<usize>().ok())
                .context("response without Content-Length")?;
            break (h, h + 4 + cl);
        }
        let n = s.read(&mut tmp).await?;
        if n == 0 {
            bail!("closed by the server");
        }
        buf.extend_from_slice(&tmp[..n]);
    };
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
    status_of(&buf[..head_end])
}

fn status_of(head: &[u8]) -> Result<u16> {
    let line = head.split(|&b| b == b'\r').next().unwrap_or(&[]);
    let line = std::str::from_utf8(line).context("status line")?;
    line.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("bad status line {line:?}"))
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

/// Connects from a given client port.
async fn connect_from(port: u16) -> Result<tokio::net::TcpStream> {
    let sock = tokio::net::TcpSocket::new_v4()?;
    sock.bind(SocketAddr::V4(SocketAddrV4::new(addr::CLIENT, port)))
        .with_context(|| format!("bind port {port}"))?;
    let s = tokio::time::timeout(Duration::from_secs(3), sock.connect(online()))
        .await
        .context("connect timed out")??;
    s.set_nodelay(true)?;
    Ok(s)
}

/// One keep-alive connection's part of a step.
async fn keepalive_conn(
    i: usize,
    stream: Option<tokio::net::TcpStream>,
    tag: String,
    start: tokio::time::Instant,
    end: tokio::time::Instant,
    pace: Option<(Duration, Duration)>,
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
            Some((phase, interval)) => {
                let due = start + phase + interval * (j as u32);
                if due >= end {
                    break;
                }
                tokio::time::sleep_until(due).await;
                due
            }
            None => {
                let now = tokio::time::Instant::now();
                if now >= end {
                    break;
                }
                now
            }
        };
        let req = format!(
            "GET /index.html?s={tag}&c={i}&n={j} HTTP/1.1\r\nHost: {}\r\nUser-Agent: bench_copier\r\nAccept: */*\r\n\r\n",
            addr::ONLINE
        );
        j += 1;
        if let Err(e) = s.write_all(req.as_bytes()).await {
            load.error(format!("write: {e}"));
            return (None, load);
        }
        load.sent += 1;
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
    }
    (Some(s), load)
}

/// One short connection: connect, one request, read until the server closes.
async fn short_conn(tag: String, n: u64, due: tokio::time::Instant, port: Option<u16>) -> Load {
    let mut load = Load::default();
    let r: Result<u16> = async {
        let mut s = match port {
            Some(p) => connect_from(p).await?,
            None => connect().await?,
        };
        let req = format!(
            "GET /index.html?s={tag}&n={n} HTTP/1.1\r\nHost: {}\r\nUser-Agent: bench_copier\r\nConnection: close\r\n\r\n",
            addr::ONLINE
        );
        s.write_all(req.as_bytes()).await.context("write")?;
        let mut all = Vec::with_capacity(1024);
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut all))
            .await
            .context("no answer within 5 s")?
            .context("read")?;
        let h = find(&all, b"\r\n\r\n").context("truncated response")?;
        status_of(&all[..h])
    }
    .await;
    load.sent = 1;
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
        let (conns, mut total) = self.rt.block_on(async {
            let start = tokio::time::Instant::now() + Duration::from_millis(5);
            let end = start + dur;
            let handles: Vec<_> = conns
                .into_iter()
                .enumerate()
                .map(|(i, s)| {
                    let pace = rate.map(|r| {
                        let interval = Duration::from_secs_f64(k as f64 / r as f64);
                        (interval.mul_f64(i as f64 / k as f64), interval)
                    });
                    tokio::spawn(keepalive_conn(i, s, tag.to_owned(), start, end, pace))
                })
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
        self.conns = conns;
        // a connection that broke is opened again for the next step (a new session to copy)
        let broken = self.conns.iter().filter(|c| c.is_none()).count();
        if broken > 0 {
            total.error(format!("{broken} connection(s) broke"));
        }
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
                    set.spawn(short_conn(tag.to_owned(), n, due, port));
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

/// CPU time of a process: per-thread ns on CPU (schedstat) by thread name, and user/system ticks.
#[derive(Debug, Clone, Default)]
struct Cpu {
    by_thread: BTreeMap<String, u64>,
    user_ticks: u64,
    sys_ticks: u64,
}

impl Cpu {
    fn read(pid: u32) -> Result<Cpu> {
        let mut cpu = Cpu::default();
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).context("/proc/PID/task")?;
        for dir in tasks.filter_map(|e| e.ok().map(|e| e.path())) {
            let (Ok(comm), Ok(ss)) = (
                std::fs::read_to_string(dir.join("comm")),
                std::fs::read_to_string(dir.join("schedstat")),
            ) else {
                continue; // the thread ended meanwhile
            };
            let ns: u64 = ss
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            *cpu.by_thread.entry(comm.trim().to_owned()).or_default() += ns;
        }
        let stat =
            std::fs::read_to_string(format!("/proc/{pid}/stat")).context("read /proc/PID/stat")?;
        // fields after "(comm)": utime is field 14, stime 15
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        cpu.user_ticks = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
        cpu.sys_ticks = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
        Ok(cpu)
    }

    fn total(&self) -> u64 {
        self.by_thread.values().sum()
    }

    /// CPU of the threads whose name starts with `prefix` (`engine`, `engine-0`, ...).
    fn threads(&self, prefix: &str) -> u64 {
        self.by_thread
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v)
            .sum()
    }

    fn minus(&self, before: &Cpu) -> Cpu {
        let mut by_thread = self.by_thread.clone();
        for (k, v) in by_thread.iter_mut() {
            *v = v.saturating_sub(before.by_thread.get(k).copied().unwrap_or(0));
        }
        Cpu {
            by_thread,
            user_ticks: self.user_ticks.saturating_sub(before.user_ticks),
            sys_ticks: self.sys_ticks.saturating_sub(before.sys_ticks),
        }
    }
}


/// The copier's metrics (fetched from inside `online`), summed over label sets by name.
fn copier_metrics(lab: &Lab) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for (key, v) in copier_metric_lines(lab) {
        let name = key.split('{').next().unwrap_or(&key).to_owned();
        *m.entry(name).or_default() += v;
    }
    m
}

/// The copier's metrics as `(name{labels}, value)` lines.
fn copier_metric_lines(lab: &Lab) -> Vec<(String, f64)> {
    let text = lab
        .in_ns(Host::Online, || -> Result<String> {
            let mut s = std::net::TcpStream::connect_timeout(
                &COPIER_METRICS.parse()?,
                Duration::from_secs(2),
            )?;
            s.set_read_timeout(Some(Duration::from_secs(3)))?;
            s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
            let mut out = String::new();
            s.read_to_string(&mut out)?;
            Ok(out)
        })
        .and_then(|r| r)
        .unwrap_or_default();
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

/// Counting rules on `test`: packets from port 80 to the client ranges that got past the OUTPUT
/// chain (where the intercept's NFQUEUE rule is). Any is a response that left the test host.
const LEAK_NETS: [&str; 2] = [addr::CLIENT_NET, addr::FAKE_CLIENT_NET];

fn add_leak_rules(lab: &Lab) -> Result<()> {
    for net in LEAK_NETS {
        lab.exec_ok(
            Host::Test,
            &[
                "iptables",
                "-t",
                "mangle",
                "-A",
                "POSTROUTING",
                "-p",
                "tcp",
                "--sport",
                "80",
                "-d",
                net,
            ],
        )
        .context("add a leak-counting rule")?;
    }
    Ok(())
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

fn leaked(lab: &Lab) -> Result<u64> {
    let out = lab.exec_ok(
        Host::Test,
        &[
            "iptables",
            "-t",
            "mangle",
            "-L",
            "POSTROUTING",
            "-v",
            "-x",
            "-n",
        ],
    )?;
    let mut total = 0;
    let mut found = 0;
    for l in out
        .lines()
        .filter(|l| LEAK_NETS.iter().any(|n| l.contains(n)))
    {
        found += 1;
        total += l
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .context("leak counter")?;
    }
    if found != LEAK_NETS.len() {
        bail!("the leak-counting rules are gone:\n{out}");
    }
    Ok(total)
}

// ---------------------------------------------------------------------------------------------
// Steps.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Idle,
    KeepAlive,
    Short,
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
    let Ctx { lab, c, pids } = ctx;
    let test = c.test();
    let (o0, t0) = (c.online.request_count() as u64, test.request_count() as u64);
    let (l0, m0, q0) = (leaked(lab)?, copier_metrics(lab), nfqueue_drops(lab)?);
    let (cc0, ic0) = (Cpu::read(pids.copier)?, Cpu::read(pids.intercept)?);
    let load = match kind {
        Kind::Idle => {
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
    let t1 = test.wait_settled(QUIET, Duration::from_secs(5)) as u64;
    let drain_secs = load_end.elapsed().as_secs_f64();
    let (cc1, ic1) = (Cpu::read(pids.copier)?, Cpu::read(pids.intercept)?);
    let (rss_kib, hwm_kib) = memory_kib(pids.copier);
    // the copier exports its counters about once a second: with the quiet time, more than a
    // second has passed since the last copy, so an export came after it
    std::thread::sleep(EXPORT_LAG);
    let (l1, m1, q1) = (leaked(lab)?, copier_metrics(lab), nfqueue_drops(lab)?);
    let drops = |m: &BTreeMap<String, f64>| metric(m, "copier_kernel_drops_total");
    c.check_alive()?;
    Ok(Row {
        kind,
        label,
        tag,
        secs: dur.as_secs_f64(),
        load,
        online: o1 - o0,
        test: t1.saturating_sub(t0),
        matched: 0,
        extra: 0,
        copier: cc1.minus(&cc0),
        intercept: ic1.minus(&ic0),
        rss_kib,
        hwm_kib,
        kernel_drops: drops(&m1).saturating_sub(drops(&m0)),
        nfq_drops: q1.saturating_sub(q0),
        sessions_open: metric(&m1, "copier_sessions_active"),
        leaks: l1 - l0,
        drain_secs,
    })
}

/// The step tag of a logged URI (`...?s=TAG&...`).
fn tag_of(uri: &str) -> Option<&str> {
    let q = uri.split_once('?')?.1;
    q.split('&').find_map(|kv| kv.strip_prefix("s="))
}

/// Fills in `matched` and `extra` of every row from the final logs; returns the test requests
/// that carry no step tag of ours (must be 0).
fn match_logs(rows: &mut [Row], online: &[LogEntry], test: &[LogEntry]) -> u64 {
    // per step tag: (online, test) request fingerprints with their counts
    type Multiset = BTreeMap<String, u64>;
    let mut by_tag: BTreeMap<String, (Multiset, Multiset)> = BTreeMap::new();
    for e in online {
        if let Some(t) = tag_of(&e.uri) {
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
         intercept CPU % | capture drops | NFQUEUE drops | sessions open after | leaks | client p50/p99 ms | drain s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
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
            "| {} | {:.0} | {:.0} | {} | {} | {:.3} | {:.4} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} ({:.1}) | {:.1} | {} | {} | {} | {} | {:.2}/{:.2} | {:.1} |",
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
// perf (optional): where the copier's time goes at one rate.

fn perf_works() -> bool {
    Command::new("perf")
        .args(["stat", "-e", "task-clock", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn perf_step(
    ctx: Ctx<'_>,
    gen: &mut Generator,
    short: bool,
    rate: u64,
    dur: Duration,
) -> Result<()> {
    let Ctx { lab, c, pids } = ctx;
    let dir = lab.dir();
    let data = dir.join("perf-copier.data");
    let stat_out = dir.join("perf-copier-stat.txt");
    let secs = format!("{:.2}", dur.as_secs_f64());
    let pid_s = pids.copier.to_string();
    let events = "task-clock,context-switches,raw_syscalls:sys_enter,syscalls:sys_enter_ppoll,\
                  syscalls:sys_enter_sendmmsg,syscalls:sys_enter_sendmsg,syscalls:sys_enter_sendto,\
                  syscalls:sys_enter_recvfrom,syscalls:sys_enter_read,syscalls:sys_enter_write,\
                  syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_getsockopt";
    let mut stat = Command::new("perf")
        .args(["stat", "--per-thread", "-x", ",", "-e", events, "-o"])
        .arg(&stat_out)
        .args(["-p", &pid_s, "--", "sleep", &secs])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("perf-copier-stat.err"))?)
        .spawn()
        .context("perf stat")?;
    let mut rec = Command::new("perf")
        .args(["record", "-g", "-F", "1999", "-o"])
        .arg(&data)
        .args(["-p", &pid_s, "--", "sleep", &secs])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("perf-copier-record.err"))?)
        .spawn()
        .context("perf record")?;
    std::thread::sleep(Duration::from_millis(150)); // let both attach
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
    let _ = stat.wait();
    let _ = rec.wait();
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
    let text = std::fs::read_to_string(&stat_out).unwrap_or_default();
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
    if by.is_empty() {
        println!(
            "(perf stat gave nothing; its stderr: {})",
            std::fs::read_to_string(dir.join("perf-copier-stat.err"))
                .unwrap_or_default()
                .trim()
        );
    } else {
        let mut events: Vec<String> = by.values().flat_map(|m| m.keys().cloned()).collect();
        events.sort();
        events.dedup();
        println!(
            "perf stat per thread, per copied request (task-clock in µs, the rest in counts):"
        );
        println!();
        println!("| thread | {} |", events.join(" | "));
        println!("|---|{}", "---:|".repeat(events.len()));
        for (t, m) in &by {
            let cells: Vec<String> = events
                .iter()
                .map(|e| {
                    let v = m.get(e).copied().unwrap_or(0.0);
                    let v = if e == "task-clock" { v * 1e3 } else { v };
                    format!("{:.3}", v / copied)
                })
                .collect();
            println!("| {t} | {} |", cells.join(" | "));
        }
    }
    if !data.exists() {
        println!(
            "(perf record gave nothing; its stderr: {})",
            std::fs::read_to_string(dir.join("perf-copier-record.err"))
                .unwrap_or_default()
                .trim()
        );
        return Ok(());
    }
    for (title, children, sort) in [
        ("by thread and binary (self)", "--no-children", "comm,dso"),
        ("top symbols (self)", "--no-children", "comm,dso,sym"),
        ("top symbols (inclusive)", "--children", "comm,sym"),
    ] {
        let out = Command::new("perf")
            .args([
                "report",
                "--stdio",
                children,
                "-g",
                "none",
                "--percent-limit",
                "1.5",
                "--sort",
                sort,
                "-i",
            ])
            .arg(&data)
            .output()
            .context("perf report")?;
        println!();
        println!("perf record, {title} (samples of on-CPU time, >= 1.5 %):");
        println!("```");
        for l in String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .take(40)
        {
            println!("{l}");
        }
        println!("```");
    }
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

fn rate_label(rate: Option<u64>) -> String {
    rate.map(|r| format!("{r}/s"))
        .unwrap_or_else(|| "max".into())
}

fn run() -> Result<()> {
    let args = parse_args()?;
    lab::available().map_err(|e| anyhow::anyhow!("{e}"))?;
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
    let opts = CopyOptions {
        copier_args: ["--metrics", COPIER_METRICS, "--seed", "7"]
            .iter()
            .map(|a| a.to_string())
            .chain(args.copier_args.iter().cloned())
            .collect(),
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
    add_leak_rules(&lab)?;

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
        eprintln!("keep-alive: step {} ...", rate_label(rate));
        let tag = format!("k{i}");
        rows.push(run_step(
            ctx,
            &mut gen,
            Kind::KeepAlive,
            rate_label(rate),
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
    // Every step's fidelity from the final logs.
    c.test()
        .wait_settled(Duration::from_millis(500), Duration::from_secs(3));
    let (online_log, test_log) = (c.online.requests()?, c.test().requests()?);
    let foreign = match_logs(&mut rows, &online_log, &test_log);

    println!();
    println!("## keep-alive: {} connections, one request outstanding each, open-loop pacing per connection", args.conns);
    println!();
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
    let all: Vec<&Row> = ka.iter().chain(short.iter()).collect();
    for r in &all {
        if !r.load.errors.is_empty() || r.load.skipped > 0 {
            println!(
                "  client errors in step {} ({:?}): {:?}; skipped {}",
                r.label, r.kind, r.load.errors, r.load.skipped
            );
        }
        if r.test < r.matched + r.extra {
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
        if perf_works() {
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
