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
//! once stable), HTTP/2 multiplexed at full speed (`h2load -n 40000 -c 8 -m 10` against a second
//! nginx pair with `listen 8080 http2`, the copier mapping 8080; counted from that pair's access
//! logs), HTTP keep-alive at full speed on 16 and on 1 connection, and with 100 KB answers on 16
//! (`full100k`, issue 32 item 2: its share at the test server by the load's end). Each scenario waits
//! for its copies until the test server has them all, none came for 3 s, or `--final-wait` passed.
//! In the CPU scenarios (think-ka, think-close, think-100k, full16, full100k) the copier's floor runs
//! beside the copier on the same load (`floor.rs`, issue 32; `--no-floor` leaves it out): a table
//! gives both CPUs per 1,000 copied requests and their ratio.
//! A last table prints the figures against the issue's targets, PASS/FAIL (informative only).
//! `--report` runs only issue 32's four scenarios and ends with the glance table of
//! BENCHMARKS.md (`report.rs`); `--peer DIR` runs the same scenarios again with the C tool's
//! `tcpcopy` and `intercept` from DIR in place of ours (`lab::bench::peer`); `--report --repeat N`
//! runs it N times, each a process with a lab of its own, and ends with the medians and ranges of
//! the N glance tables (`repeat.rs`).
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
//!                             [--nginx-extra 'DIRECTIVES']
//!                             [--scenarios all|none|LIST] [--scenario-secs 8] [--redis-requests 200000]
//!                             [--final-wait 60] [--no-floor] [--floor-drop] [--floor-data-only]
//! target/release/bench_copier --report [--peer DIR] [--threaded-link] [--lab-cc host]   # the glance table (report.rs)
//! target/release/bench_copier --report --repeat 3   # three runs and their medians (repeat.rs)
//! target/release/bench_copier --bulk [--copier-args '--gso off']   # only the bulk steps (bulk.rs)
//! ```
//! Options: `--rates` (keep-alive requests/s, `max` = as fast as answers come), `--short-rates`
//! (`none` skips the short connections), `--step` (seconds per rate), `--conns` (keep-alive
//! connections), `--perf` / `--perf-short` (a last step at `--perf-rate` under `perf stat` and
//! `perf record -g`, keep-alive or short connections), `--keep-dir` (keep the lab's work
//! directory: logs, perf data), `--pcap` (also keep a headers-only pcap of the test host's link),
//! `--kernel-ports` (let the kernel pick the short connections' client ports: it reuses them within
//! seconds, see below), `--copier-args 'ARGS'` (extra copier flags, e.g. ring sizes), `--nginx-extra 'DIRECTIVES'`
//! (added to the server block of both nginx, e.g. `tcp_nopush on;`, which makes a small file's
//! answer one segment instead of a head and a body). The same
//! from `BENCH_RATES`, `BENCH_SHORT_RATES`, `BENCH_STEP`, `BENCH_CONNS`, `BENCH_PERF=1`,
//! `BENCH_PERF_SHORT=1`, `BENCH_PERF_RATE`, `BENCH_KEEP_DIR=1`, `BENCH_PCAP=1`,
//! `BENCH_KERNEL_PORTS=1`, `BENCH_COPIER_ARGS`, `BENCH_NGINX_EXTRA`; flags win. `--threaded-link`
//! (`BENCH_THREADED_LINK=1`): both ends of the online-test link receive in a kernel thread of
//! their own (`Lab::thread_link`), so neither sender is charged the other host's receive path.
//! `--lab-cc NAME` (`BENCH_LAB_CC`, default reno; `host` keeps the machine's): every lab host's
//! TCP congestion control (`Lab::set_congestion`), set before any server starts: a pacing one
//! without fq charges the test server's paced sends to whatever process its timer interrupts.
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
use lab::bench::{
    fetch_metrics, parse_rate, perf, rate_label, realtime, wall_ms, Cpu, RealTime, RedisConn,
    TICK_NS,
};
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

mod bulk;
mod floor;
mod load;
mod repeat;
mod report;
mod scenarios;
mod steps;

/// The lab hosts' congestion control unless `--lab-cc` says otherwise: one that does not pace,
/// and that a network namespace may take on any Linux (`--help`, "--lab-cc").
const DEFAULT_LAB_CC: &str = "reno";

use floor::*;
use load::*;
use scenarios::*;
use steps::*;

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

/// Set once by `--mirror`: the copier then runs on `test2`, fed by a VXLAN mirror of `online`.
static MIRROR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Where the copier runs (and serves its metrics).
fn copier_host() -> Host {
    if MIRROR.load(std::sync::atomic::Ordering::Relaxed) {
        Host::Test2
    } else {
        Host::Online
    }
}

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
    /// Extra directives for the server block of both nginx.
    nginx_extra: String,
    /// The issue-10 scenarios to run, in order.
    scenarios: Vec<Scenario>,
    /// Load time of each HTTP scenario.
    scenario_step: Duration,
    /// Requests of the redis scenario (`redis-benchmark -n`).
    redis_requests: u64,
    /// Longest wait for a scenario's copies after its load.
    final_wait: Duration,
    /// Copy from a VXLAN mirror of `online`'s client link on `test2` (`lab::mirror`) instead
    /// of capturing on `online`.
    mirror: bool,
    /// Run the bulk steps (`bulk.rs`) instead of the rate steps and scenarios.
    bulk: bool,
    /// Do not run the copier's floor (`floor.rs`) in the CPU scenarios.
    no_floor: bool,
    /// Drop the floor's copies at the test host's first hook (raw PREROUTING) instead of letting
    /// its TCP answer them with resets.
    floor_drop: bool,
    /// The floor sends only segments with data or SYN/FIN/RST (`copier-floor --data-only`).
    floor_data_only: bool,
    /// Only issue 32's four scenarios, then the glance table (`report.rs`).
    report: bool,
    /// The C tool's binaries (`tcpcopy`, `intercept`): its run of the same scenarios after ours.
    peer: Option<std::path::PathBuf>,
    /// Both ends of the `online`-`test` link receive in a kernel thread of their own
    /// (`Lab::thread_link`), as two hosts would.
    threaded_link: bool,
    /// With `--report`: this many runs, each a child process with a lab of its own, then the
    /// median table (`repeat.rs`).
    repeat: usize,
    /// The TCP congestion control of every lab host (`Lab::set_congestion`); `None` keeps the
    /// machine's default.
    lab_cc: Option<String>,
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
    let mut nginx_extra = env("BENCH_NGINX_EXTRA").unwrap_or_default();
    let mut scenarios = env("BENCH_SCENARIOS").unwrap_or_else(|| "all".into());
    let mut scenario_step = env("BENCH_SCENARIO_SECS").unwrap_or_else(|| "8".into());
    let mut redis_requests = env("BENCH_REDIS_REQUESTS").unwrap_or_else(|| "200000".into());
    let mut final_wait = env("BENCH_FINAL_WAIT").unwrap_or_else(|| "60".into());
    let mut mirror = env("BENCH_MIRROR").is_some();
    let mut bulk = env("BENCH_BULK").is_some();
    let mut no_floor = env("BENCH_NO_FLOOR").is_some();
    let mut floor_drop = env("BENCH_FLOOR_DROP").is_some();
    let mut floor_data_only = env("BENCH_FLOOR_DATA_ONLY").is_some();
    let mut report = env("BENCH_REPORT").is_some();
    let mut peer = env("BENCH_PEER");
    let mut threaded_link = env("BENCH_THREADED_LINK").is_some();
    let mut repeat = env("BENCH_REPEAT").unwrap_or_else(|| "1".into());
    let mut lab_cc = env("BENCH_LAB_CC").unwrap_or_else(|| DEFAULT_LAB_CC.into());
    let (mut secs_given, mut wait_given) = (
        env("BENCH_SCENARIO_SECS").is_some(),
        env("BENCH_FINAL_WAIT").is_some(),
    );
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
            "--nginx-extra" => nginx_extra = val("--nginx-extra")?,
            "--scenarios" => scenarios = val("--scenarios")?,
            "--scenario-secs" => {
                scenario_step = val("--scenario-secs")?;
                secs_given = true;
            }
            "--redis-requests" => redis_requests = val("--redis-requests")?,
            "--final-wait" => {
                final_wait = val("--final-wait")?;
                wait_given = true;
            }
            "--mirror" => mirror = true,
            "--bulk" => bulk = true,
            "--no-floor" => no_floor = true,
            "--floor-drop" => floor_drop = true,
            "--floor-data-only" => floor_data_only = true,
            "--report" => report = true,
            "--peer" => peer = Some(val("--peer")?),
            "--threaded-link" => threaded_link = true,
            "--repeat" => repeat = val("--repeat")?,
            "--lab-cc" => lab_cc = val("--lab-cc")?,
            "-h" | "--help" => {
                println!(
                    "bench_copier [--rates 1000,2000,4300,8000,16000,max] [--short-rates 500,1000,2000,4300|none] \
                     [--step SECS] [--conns N] [--perf] [--perf-short] [--perf-rate REQS] [--keep-dir] \
                     [--pcap] \
                     [--kernel-ports] [--copier-args 'ARGS'] [--nginx-extra 'DIRECTIVES'] [--scenarios all|none|LIST] [--scenario-secs 8] \
                     [--redis-requests 200000] [--final-wait 60] [--mirror] [--bulk] [--no-floor] [--floor-drop] [--floor-data-only] [--report [--repeat N]] [--peer DIR] [--threaded-link] [--lab-cc reno|host|NAME]\n\
                     (or BENCH_RATES, BENCH_SHORT_RATES, BENCH_STEP, BENCH_CONNS, BENCH_PERF=1, BENCH_PERF_SHORT=1, BENCH_PERF_RATE, \
                     BENCH_KEEP_DIR=1, BENCH_PCAP=1, BENCH_KERNEL_PORTS=1, BENCH_COPIER_ARGS, BENCH_NGINX_EXTRA, BENCH_SCENARIOS, BENCH_SCENARIO_SECS, \
                     BENCH_REDIS_REQUESTS, BENCH_FINAL_WAIT, BENCH_MIRROR=1, BENCH_BULK=1, BENCH_NO_FLOOR=1, BENCH_FLOOR_DROP=1, BENCH_FLOOR_DATA_ONLY=1, BENCH_REPORT=1, BENCH_REPEAT, BENCH_PEER, BENCH_THREADED_LINK=1, BENCH_LAB_CC)\n\n\
                     --report: the \"At a glance\" table of BENCHMARKS.md in one run (issue 32): only the scenarios \
                     think-ka, think-close, full16 and full100k (5 s of load each unless --scenario-secs, copies awaited \
                     at most 20 s unless --final-wait; about 70 s in all, 140 s with --peer), each with the copier's floor, \
                     then one markdown table: copier / intercept CPU per 1,000 requests, fidelity, share at the test \
                     server by the load's end, the floor and the copier's ratio to it, with the machine and the date; \
                     then bench_intercept (next to this binary, about 30 s of it) at the NFQUEUE packet rates of those \
                     scenarios gives the intercept's CPU per packet against its floor, the bare NFQUEUE reader.\n\n\
                     --repeat N (with --report): N such runs, one after the other, each a process of its own with a lab \
                     of its own, each one's output passed through; then one table: per scenario the median of the copier's \
                     ratio to its floor and of the intercept's to the bare reader, with their ranges, in how many runs each \
                     met its target (1.25x, 1.5x), the median CPU per 1,000 requests and the lowest fidelity and share by \
                     the load's end. Exit status non-zero when a run failed.\n\n\
                     --peer DIR: DIR holds the C tool's tcpcopy and intercept as its public sources build them (not \
                     downloaded by this project). After our run of the scenarios, the copier and the intercept stop, and \
                     `DIR/intercept -i to-online -F 'tcp and src port 80'` on test and `DIR/tcpcopy -x 80-198.18.2.2:80 \
                     -s 198.18.2.2` on online copy the same scenarios again in the same lab; their columns join the tables \
                     (with --report: the glance table's C tool columns).\n\n\
                     --bulk: only the bulk steps (issue 34): 4 parallel 20 MB uploads at 5, 10, 25 MB/s each and \
                     unlimited, 4 x 50 MB, then 4 and 8 parallel GETs of a 10 MB file; per step the online and test \
                     throughput, whole copies (length and SHA-256), kernel drops, sessions shed and copier CPU per MB \
                     (--copier-args '--gso off' for the old send path).\n\n\
                     --no-floor: do not run the copier's floor (issue 32). By default copier-floor, a measuring tool (the \
                     copier's capture ring, filter and sender with a stateless destination rewrite in between, its copies to \
                     the test host's port 9 where nothing listens), runs beside the copier on the same load in think-ka, \
                     think-close, think-100k, full16 and full100k, and a table gives the copier's CPU over the floor's (target 1.25x; \
                     not with --mirror). --floor-drop: the test host drops the floor's copies in raw PREROUTING \
                     instead of answering each with a reset (the floor without the test host's TCP). --floor-data-only: \
                     the floor leaves out the clients' bare ACKs (copier-floor --data-only), as the copier does not copy them.\n\n\
                     --threaded-link: both ends of the online-test link (the copies, the records) receive in a kernel \
                     thread of their own (GRO on, threaded NAPI, TSO off: the senders segment in software), as on two hosts. Without it veth runs the test host's \
                     IP and TCP for each copy inside the copier's (or the floor's) send call and charges it to the sender; \
                     a copy that opens a real connection costs the test host more than the floor's, which meets a closed \
                     port.\n\n\
                     --lab-cc NAME (default reno): the TCP congestion control of every lab host (the servers', the \
                     clients', ours; a network namespace may take only those of \
                     /proc/sys/net/ipv4/tcp_allowed_congestion_control); host: the machine's default. A pacing one \
                     (BBR) without an fq qdisc paces each connection with a timer of its own, and the kernel (without \
                     IRQ time accounting) charges the work of that timer's interrupt, the test server sending the next \
                     part of an answer, to whatever process runs when it fires, most often the copier or the intercept.\n\n\
                     --mirror: the copier runs on test2 with --mirror vxlan, fed by a tc mirred VXLAN mirror of online's \
                     client link (both directions), instead of capturing on online.\n\n\
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
    let repeat: usize = repeat
        .parse()
        .ok()
        .filter(|&n| (1..=100).contains(&n))
        .context("--repeat is a number of runs, 1 to 100")?;
    if repeat > 1 && !report {
        bail!("--repeat goes with --report");
    }
    if report {
        rates = "none".into();
        short = "none".into();
        scenarios = report::SCENARIOS
            .iter()
            .map(|s| s.name())
            .collect::<Vec<_>>()
            .join(",");
        if !secs_given {
            scenario_step = report::SECS.to_string();
        }
        if !wait_given {
            final_wait = report::FINAL_WAIT.to_string();
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
        l => l
            .split(',')
            .filter(|p| !p.trim().is_empty())
            .map(Scenario::parse)
            .collect::<Result<_>>()?,
    };
    let scenario_step: f64 = scenario_step
        .parse()
        .context("--scenario-secs is seconds, e.g. 8")?;
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
        nginx_extra,
        scenarios,
        scenario_step: Duration::from_secs_f64(scenario_step),
        redis_requests: redis_requests.parse().context("--redis-requests")?,
        final_wait: Duration::from_secs_f64(
            final_wait
                .parse()
                .context("--final-wait is seconds, e.g. 60")?,
        ),
        mirror,
        bulk,
        no_floor,
        floor_drop,
        floor_data_only,
        report,
        peer: peer.map(std::path::PathBuf::from),
        threaded_link,
        repeat,
        lab_cc: (lab_cc != "host").then_some(lab_cc),
    };
    if let Some(dir) = &args.peer {
        lab::bench::peer::Peer::check_dir(dir)?;
        if args.mirror {
            bail!("--peer does not go with --mirror");
        }
        for sc in &args.scenarios {
            if !matches!(
                sc,
                Scenario::ThinkKeepAlive
                    | Scenario::ThinkClose
                    | Scenario::Think100k
                    | Scenario::Full16
                    | Scenario::Full100k
                    | Scenario::Full1
            ) {
                bail!("--peer runs only the HTTP port-80 scenarios, not {} (leave it out of --scenarios)", sc.name());
            }
        }
    }
    if args.conns == 0 || args.conns > 4000 {
        bail!("--conns must be 1..=4000");
    }
    Ok(args)
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
    let by =
        perf::stat_per_thread(&std::fs::read_to_string(session.stat_path()).unwrap_or_default());
    if by.is_empty() {
        println!(
            "(perf stat gave nothing; its stderr: {})",
            session.stderr_of("stat")
        );
    } else {
        println!(
            "perf stat per thread, per copied request (task-clock in µs, the rest in counts):"
        );
        println!();
        perf::print_stat_table(&by, copied);
    }
    let data = session.data_path();
    if !data.exists() {
        println!(
            "(perf record gave nothing; its stderr: {})",
            session.stderr_of("record")
        );
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
    if args.repeat > 1 {
        // the same command line, less --repeat N, for each run
        let mut child_args = Vec::new();
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            if a == "--repeat" {
                it.next();
            } else {
                child_args.push(a);
            }
        }
        let order: Vec<&str> = report::SCENARIOS.iter().map(|&s| report::what(s)).collect();
        return repeat::run(args.repeat, &child_args, &order);
    }
    if args.bulk {
        return bulk::run_bulk(&args);
    }
    let redis = args.scenarios.contains(&Scenario::Redis);
    if redis {
        for tool in ["redis-server", "redis-benchmark"] {
            if lab::which(tool).is_none() {
                bail!("the redis scenario needs `{tool}` (scripts/install-deps.sh installs it), or leave it out of --scenarios");
            }
        }
    }
    let h2 = args.scenarios.contains(&Scenario::H2);
    if h2 && lab::which("h2load").is_none() {
        bail!("the h2 scenario needs `h2load` (package nghttp2-client; scripts/install-deps.sh installs it), or leave it out of --scenarios");
    }
    let started = Instant::now();
    let machine = format!(
        "{}; online-test link: {}; the hosts' TCP congestion control: {}",
        report::machine(),
        if args.threaded_link {
            "each end receives in a thread of its own (--threaded-link)"
        } else {
            "veth, the receiver's TCP run in the sender's call"
        },
        args.lab_cc
            .clone()
            .unwrap_or_else(|| format!("{} (the machine's)", lab::default_congestion())),
    );
    let mut lab = Lab::with(LabOptions {
        offloads: true,
        capture_test_link: args.pcap,
    })?;
    if args.keep_dir {
        lab.keep_dir();
    }
    if let Some(cc) = &args.lab_cc {
        lab.set_congestion(cc)?;
    }
    if args.threaded_link {
        lab.thread_link(
            Host::Online,
            lab::ifname::ONLINE_TO_TEST,
            Host::Test,
            lab::ifname::TEST_TO_ONLINE,
        )?;
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
    let nginx = NginxOptions {
        files: vec![(BIG_PATH.into(), BIG_SIZE)],
        server_extra: args.nginx_extra.clone(),
        ..NginxOptions::default()
    };
    let redis_map = format!("{REDIS_PORT}={}:{REDIS_PORT}", addr::TEST);
    let mut copier_args: Vec<String> = ["--metrics", COPIER_METRICS, "--seed", "7"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    let intercept_args: Vec<String> = vec!["--metrics".into(), INTERCEPT_METRICS.into()];
    if redis {
        copier_args.extend(["--map".into(), redis_map]);
    }
    if h2 {
        copier_args.extend([
            "--map".into(),
            format!("{H2_PORT}={}:{H2_PORT}", addr::TEST),
        ]);
    }
    copier_args.extend(args.copier_args.iter().cloned());
    let mirror_args = copier_args.clone();
    let opts = CopyOptions {
        online: nginx.clone(),
        test: Some(nginx),
        copier_args,
        intercept_args,
        extra_ports: [(redis, REDIS_PORT), (h2, H2_PORT)]
            .into_iter()
            .filter_map(|(on, p)| on.then_some(p))
            .collect(),
        ..CopyOptions::default()
    };
    MIRROR.store(args.mirror, std::sync::atomic::Ordering::Relaxed);
    let opts = if args.mirror {
        CopyOptions {
            start_copier: false,
            ipv6: false,
            ..opts
        }
    } else {
        opts
    };
    let mut c = Copying::start(&mut lab, opts).context("start the copying setup")?;
    if args.mirror {
        lab::mirror::build(&lab, true).context("build the VXLAN mirror toward test2")?;
        let map = format!("80={}:80", addr::TEST);
        let mut a: Vec<String> = vec!["--mirror".into(), "vxlan".into(), "--map".into(), map];
        a.extend(mirror_args);
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        c.copier = Some(
            c.spawn_copier_in(&mut lab, Host::Test2, "copier", &refs)
                .context("start the mirror copier")?,
        );
    }
    let mut c = c;
    if args.floor_drop {
        let port = FLOOR_PORT.to_string();
        lab.exec_ok(
            Host::Test,
            &[
                "iptables",
                "-t",
                "raw",
                "-I",
                "PREROUTING",
                "-p",
                "tcp",
                "--dport",
                &port,
                "-j",
                "DROP",
            ],
        )
        .context("drop the floor's copies on test")?;
    }
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
        redis: if redis {
            Some(Redis::start(&mut lab).context("start redis on online and test")?)
        } else {
            None
        },
        redis_requests: args.redis_requests,
        final_wait: args.final_wait,
        close_next: 0,
        h2: None,
        floor: !args.no_floor && !args.mirror,
        floor_args: if args.floor_data_only {
            vec!["--data-only".into()]
        } else {
            Vec::new()
        },
        tag_prefix: String::new(),
    };
    if h2 {
        let o = NginxOptions {
            port: H2_PORT,
            http2: true,
            workers: 2,
            ..NginxOptions::default()
        };
        let on = lab
            .nginx(Host::Online, o.clone())
            .context("start the HTTP/2 nginx on online")?;
        let te = lab
            .nginx(Host::Test, o)
            .context("start the HTTP/2 nginx on test")?;
        scen.h2 = Some((on, te));
    }
    if args.scenarios.contains(&Scenario::ThinkClose) {
        lab.exec_ok(
            Host::Client,
            &[
                "ip",
                "addr",
                "add",
                &format!("{CLIENT_B}/24"),
                "dev",
                lab::ifname::CLIENT_TO_ONLINE,
            ],
        )?;
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
        rows.push(run_scenario(
            ctx,
            &mut gen,
            sc,
            args.scenario_step,
            &mut scen,
        )?);
    }
    // The C tool's run of the same scenarios (`--peer`), once ours stopped.
    let mut peer = None;
    if let Some(dir) = &args.peer {
        c.stop_ours(&lab)
            .context("stop the copier and the intercept for the peer")?;
        let p = lab::bench::peer::Peer::start(&mut lab, dir, Duration::from_secs(1))
            .context("start the C tool (--peer)")?;
        let ppids = Pids {
            copier: p.tcpcopy.pid(),
            intercept: p.intercept.pid(),
        };
        println!(
            "peer: the C tool from {}: tcpcopy pid {}, intercept pid {}",
            dir.display(),
            ppids.copier,
            ppids.intercept
        );
        let pctx = Ctx {
            lab: &lab,
            c: &c,
            pids: &ppids,
        };
        scen.tag_prefix = "p".into();
        for &sc in &args.scenarios {
            eprintln!("scenario {} with the C tool ...", sc.name());
            let mut row = run_scenario(pctx, &mut gen, sc, args.scenario_step, &mut scen)?;
            p.check_alive()?;
            row.peer = true;
            rows.push(row);
        }
        peer = Some(p);
    }
    let ctx = Ctx {
        lab: &lab,
        c: &c,
        pids: &pids,
    };
    // Every step's fidelity from the final logs.
    c.test()
        .wait_settled(Duration::from_millis(500), Duration::from_secs(3));
    let (online_log, test_log) = (c.online.requests()?, c.test().requests()?);
    let foreign = match_logs(&mut rows, &online_log, &test_log);
    let (peer_rows, rows): (Vec<Row>, Vec<Row>) = rows.into_iter().partition(|r| r.peer);

    println!();
    println!("## keep-alive: {} connections, one request outstanding each, open-loop pacing per connection", args.conns);
    println!();
    let (scenarios, rows): (Vec<Row>, Vec<Row>) = rows
        .into_iter()
        .partition(|r| matches!(r.kind, Kind::Scenario(_)));
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
        println!(
            "## issue 10 scenarios ({:.1} s of load each; redis: {} requests)",
            args.scenario_step.as_secs_f64(),
            args.redis_requests
        );
        println!();
        for r in &scenarios {
            if let Kind::Scenario(sc) = r.kind {
                println!("- {}: {}", sc.name(), sc.what());
            }
        }
        println!();
        print_scenarios(&scenarios);
        if scenarios.iter().any(|r| r.floor.is_some()) {
            println!();
            println!("## the copier's floor (issue 32): copier-floor beside the copier, same load, same window");
            println!();
            print_floor(&scenarios, args.floor_drop, args.floor_data_only);
        }
    }
    if !peer_rows.is_empty() {
        println!();
        println!(
            "## the C tool (--peer {}): the same scenarios, its tcpcopy and intercept in place of ours",
            args.peer.as_deref().unwrap_or(std::path::Path::new("")).display()
        );
        println!();
        print_scenarios(&peer_rows);
        if peer_rows.iter().any(|r| r.floor.is_some()) {
            println!();
            print_floor(&peer_rows, args.floor_drop, args.floor_data_only);
        }
    }
    let all: Vec<&Row> = ka
        .iter()
        .chain(short.iter())
        .chain(scenarios.iter())
        .collect();
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

    if args.perf && peer.is_some() {
        println!("\n(no perf step with --peer: the copier was stopped for the C tool)");
    } else if args.perf {
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
    // tuples the test server still remembered. Loss probes and retransmitted segments are
    // the test server resending what a copy acknowledged late (or never).
    let counters: Vec<String> = [
        "TcpExtPAWSTimewait",
        "TcpExtTWKilled",
        "TcpExtTWRecycled",
        "TcpExtListenDrops",
        "TcpExtTCPLossProbes",
        "TcpRetransSegs",
    ]
    .iter()
    .map(|k| {
        format!(
            "{} {}",
            k.trim_start_matches("TcpExt").trim_start_matches("Tcp"),
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
    if args.report {
        let cmd = std::env::args()
            .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
            .collect::<Vec<_>>()
            .join(" ");
        let icpt = report::intercept_floor(&scenarios);
        report::print(
            &machine,
            &cmd,
            args.scenario_step.as_secs_f64(),
            &scenarios,
            &peer_rows,
            &icpt,
        );
    }
    if let Some(p) = &peer {
        p.stop();
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
