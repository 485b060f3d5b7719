//! bench_intercept: how many response packets per second the intercept turns into records on this
//! machine (NFQUEUE read -> record -> TCP write to the copier), at what CPU cost, and where the
//! time goes.
//!
//! It builds a lab, starts the real intercept on `test` (rules installed, metrics on), connects a
//! fake copier from `online` that registers `--tuples` sessions, then, from inside `test`, sends
//! response-like TCP segments (source port 80, to the registered sessions) with a raw
//! `IPPROTO_RAW` socket. Raw sends traverse the OUTPUT hook, so the intercept's NFQUEUE rule
//! catches them exactly as it catches a test server's responses. Each step offers one rate for
//! `--step` seconds and reports what the copier received, the intercept's CPU (per thread from
//! `/proc/PID/task/*/schedstat`, user/system from `/proc/PID/stat`), the kernel's NFQUEUE drops
//! (`/proc/net/netfilter/nfnetlink_queue` in the test namespace) and any leak (packets to the
//! fake clients that passed the OUTPUT chain, counted by a mangle POSTROUTING rule).
//!
//! Where the time goes:
//! - first, the same rates go to a bare NFQUEUE reader of this process (queue 1, same settings,
//!   recv + DROP verdict and nothing else): the floor that any NFQUEUE reader pays here;
//! - the intercept's CPU is split by thread (the NFQUEUE worker vs the control connection);
//! - a last step runs under `perf stat` (per-thread task-clock, context switches, syscalls per
//!   record) and `perf record` (on-CPU samples by thread, binary and symbol) when `perf` works.
//!
//! ```text
//! cargo build --release -p lab -p intercept --bins
//! target/release/bench_intercept [--rates 5000,20000,50000,max] [--step 3] [--tuples 10000]
//!                                [--payload 1448] [--perf-rate 20000] [--no-perf] [--no-baseline]
//! ```
//! The same settings can come from `BENCH_RATES`, `BENCH_STEP`, `BENCH_TUPLES`, `BENCH_PAYLOAD`,
//! `BENCH_PERF_RATE`, `BENCH_NO_PERF=1` and `BENCH_NO_BASELINE=1`; flags win. It exits non-zero
//! if a packet leaked or a record reached the wrong copier, and removes the lab in every case.

use anyhow::{bail, Context, Result};
use common::flow::FourTuple;
use common::proto::io::client_handshake;
use common::proto::Message;
use common::seq::SeqNum;
use common::wire::{TcpBuilder, TcpFlags, TcpOption};
use lab::bench::{fetch_metrics, parse_rate, perf, rate_label, Cpu, TICK_NS};
use lab::setup::{CopyOptions, Copying, CONTROL_PORT};
use lab::{addr, Host, Lab, LabOptions};
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::{BTreeMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const SECRET: &[u8] = b"lab-shared-secret";
const METRICS: &str = "127.0.0.1:9464";
const SERVER: SocketAddrV4 = SocketAddrV4::new(addr::TEST, 80);

fn main() {
    match run() {
        Ok(()) => {}
        Err(e) => {
            eprintln!("bench_intercept failed: {e:#}");
            std::process::exit(1);
        }
    }
}

/// Settings.
#[derive(Debug, Clone)]
struct Args {
    /// Offered packet rates; `None` is "as fast as the sender goes".
    rates: Vec<Option<u64>>,
    step: Duration,
    tuples: usize,
    payload: usize,
    perf_rate: u64,
    perf: bool,
    baseline: bool,
}

fn parse_args() -> Result<Args> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let mut rates = env("BENCH_RATES").unwrap_or_else(|| "5000,20000,50000,max".into());
    let mut step = env("BENCH_STEP").unwrap_or_else(|| "3".into());
    let mut tuples = env("BENCH_TUPLES").unwrap_or_else(|| "10000".into());
    let mut payload = env("BENCH_PAYLOAD").unwrap_or_else(|| "1448".into());
    let mut perf_rate = env("BENCH_PERF_RATE").unwrap_or_else(|| "20000".into());
    let mut perf = env("BENCH_NO_PERF").is_none();
    let mut baseline = env("BENCH_NO_BASELINE").is_none();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match a.as_str() {
            "--rates" => rates = val("--rates")?,
            "--step" => step = val("--step")?,
            "--tuples" => tuples = val("--tuples")?,
            "--payload" => payload = val("--payload")?,
            "--perf-rate" => perf_rate = val("--perf-rate")?,
            "--no-perf" => perf = false,
            "--no-baseline" => baseline = false,
            "-h" | "--help" => {
                println!(
                    "bench_intercept [--rates 5000,20000,50000,max] [--step SECS] [--tuples N] \
                     [--payload BYTES] [--perf-rate PPS] [--no-perf] [--no-baseline]\n\
                     (or BENCH_RATES, BENCH_STEP, BENCH_TUPLES, BENCH_PAYLOAD, BENCH_PERF_RATE, BENCH_NO_PERF=1, \
                     BENCH_NO_BASELINE=1)"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    let step: f64 = step.parse().context("--step is seconds, e.g. 3 or 1.5")?;
    if !(0.2..=60.0).contains(&step) {
        bail!("--step must be between 0.2 and 60 seconds");
    }
    let args = Args {
        rates: rates.split(',').map(parse_rate).collect::<Result<_>>()?,
        step: Duration::from_secs_f64(step),
        tuples: tuples.parse().context("--tuples")?,
        payload: payload.parse().context("--payload")?,
        perf_rate: parse_rate(&perf_rate)?.unwrap_or(20_000),
        perf,
        baseline,
    };
    if args.tuples == 0 || args.tuples > 60_000 {
        bail!("--tuples must be 1..=60000");
    }
    if args.payload > 1448 {
        bail!("--payload must be at most 1448 (one MTU-sized segment)");
    }
    Ok(args)
}

/// The i-th fake client: addresses in 198.19.0.0/16 (routed back toward `online` by the lab).
fn tuple(i: usize) -> FourTuple {
    let a = Ipv4Addr::new(198, 19, 10 + (i / 250) as u8, (i % 250 + 1) as u8);
    FourTuple::new(
        SocketAddr::V4(SocketAddrV4::new(a, 20_000 + (i % 40_000) as u16)),
        SocketAddr::V4(SERVER),
    )
}

// ---------------------------------------------------------------------------------------------
// The fake copier (on `online`): registers the tuples, counts the records it receives.

#[derive(Debug, Default)]
struct CopierState {
    received: AtomicU64,
    /// Records for a session the copier did not register (must stay 0).
    foreign: AtomicU64,
    ready: AtomicBool,
    stop: AtomicBool,
    error: Mutex<Option<String>>,
}

fn copier(state: &CopierState, tuples: &[FourTuple]) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let control = SocketAddr::V4(SocketAddrV4::new(addr::TEST, CONTROL_PORT));
        let stream = tokio::net::TcpStream::connect(control)
            .await
            .with_context(|| format!("connect {control}"))?;
        let mut est = client_handshake(stream, Some(SECRET), "bench_intercept")
            .await
            .context("handshake")?;
        let mine: HashSet<FourTuple> = tuples.iter().copied().collect();
        est.writer
            .write_message(&Message::Register {
                tuples: tuples.to_vec(),
            })
            .await?;
        // The intercept handles a connection's messages in order: the Pong means the
        // registrations are in the router.
        est.writer
            .write_message(&Message::Ping { token: 7 })
            .await?;
        // Ping like the copier does (every 5 s): the intercept closes a copier silent for 30 s.
        let mut last_ping = std::time::Instant::now();
        while !state.stop.load(Ordering::Relaxed) {
            if last_ping.elapsed() >= Duration::from_secs(5) {
                est.writer
                    .write_message(&Message::Ping { token: 8 })
                    .await?;
                last_ping = std::time::Instant::now();
            }
            match tokio::time::timeout(Duration::from_millis(50), est.reader.read_message()).await {
                Err(_) => {}
                Ok(Ok(Some(Message::Records { records }))) => {
                    let foreign = records
                        .iter()
                        .filter(|r| !r.tuple().is_ok_and(|t| mine.contains(&t)))
                        .count();
                    state.foreign.fetch_add(foreign as u64, Ordering::Relaxed);
                    state
                        .received
                        .fetch_add(records.len() as u64, Ordering::Relaxed);
                }
                Ok(Ok(Some(Message::Pong { token: 7, .. }))) => {
                    state.ready.store(true, Ordering::Release)
                }
                Ok(Ok(Some(Message::Pong { .. }))) => {}
                // The intercept's verdict on each registered tuple (acknowledged registration).
                Ok(Ok(Some(Message::Registered { results }))) => {
                    if let Some((t, v)) = results.iter().find(|(_, v)| !v.accepted()) {
                        bail!("the intercept refused the registration of {t}: {v:?}");
                    }
                }
                Ok(Ok(Some(other))) => {
                    bail!("unexpected {} message from the intercept", other.name())
                }
                Ok(Ok(None)) => bail!("the intercept closed the control connection"),
                Ok(Err(e)) => bail!("control connection: {e}"),
            }
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// The sender (a raw socket made inside `test`): response-like segments to the tuples.

struct Sender {
    sock: Socket,
    buf: Vec<u8>,
    payload: Vec<u8>,
    tuples: Vec<FourTuple>,
    next: usize,
    seq: u32,
    errors: BTreeMap<String, u64>,
}

impl Sender {
    fn new(tuples: Vec<FourTuple>, payload: usize) -> Result<Sender> {
        let sock = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(255)))
            .context("raw IPPROTO_RAW socket")?;
        sock.set_header_included_v4(true).context("IP_HDRINCL")?;
        // Room for bursts: the kernel queues to NFQUEUE, the socket buffer only limits sends.
        let _ = sock.set_send_buffer_size(4 << 20);
        Ok(Sender {
            sock,
            buf: Vec::with_capacity(2048),
            payload: vec![0x5a; payload],
            tuples,
            next: 0,
            seq: 1,
            errors: BTreeMap::new(),
        })
    }

    fn send_one(&mut self) -> bool {
        let t = self.tuples[self.next];
        self.next = (self.next + 1) % self.tuples.len();
        self.seq = self.seq.wrapping_add(self.payload.len() as u32);
        TcpBuilder {
            src: t.server.into(),
            dst: t.client.into(),
            seq: SeqNum(self.seq),
            ack: SeqNum(1001),
            flags: TcpFlags::ACK | TcpFlags::PSH,
            window: 502,
            options: &[TcpOption::Timestamps {
                tsval: self.seq,
                tsecr: 1,
            }],
            payload: &self.payload,
            ttl: 64,
            ident: self.seq as u16,
        }
        .emit(&mut self.buf);
        let SocketAddr::V4(dst) = t.client.socket() else {
            return false;
        };
        match self
            .sock
            .send_to(&self.buf, &SocketAddrV4::new(*dst.ip(), 0).into())
        {
            Ok(_) => true,
            Err(e) => {
                *self.errors.entry(e.to_string()).or_default() += 1;
                false
            }
        }
    }

    /// Offers `rate` packets per second (`None`: as fast as possible) for `dur`. Returns the
    /// packets handed to the kernel without error.
    fn blast(&mut self, rate: Option<u64>, dur: Duration) -> u64 {
        let start = Instant::now();
        let (mut tried, mut ok) = (0u64, 0u64);
        loop {
            let el = start.elapsed();
            if el >= dur {
                break;
            }
            let target = match rate {
                Some(r) => (r as f64 * el.as_secs_f64()) as u64,
                None => tried + 64,
            };
            while tried < target {
                tried += 1;
                ok += u64::from(self.send_one());
            }
            if rate.is_some() {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        ok
    }
}

// ---------------------------------------------------------------------------------------------
// What we read about the intercept and the kernel.

/// A queue's line of `/proc/net/netfilter/nfnetlink_queue` in the test namespace.
#[derive(Debug, Clone, Copy, Default)]
struct KernelQueue {
    queue_dropped: u64,
    user_dropped: u64,
    id_sequence: u64,
}

fn kernel_queue(lab: &Lab, queue: u16) -> Result<KernelQueue> {
    let text = lab.exec_ok(Host::Test, &["cat", "/proc/net/netfilter/nfnetlink_queue"])?;
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() >= 8 && f[0] == queue.to_string() {
            return Ok(KernelQueue {
                queue_dropped: f[5].parse().unwrap_or(0),
                user_dropped: f[6].parse().unwrap_or(0),
                id_sequence: f[7].parse().unwrap_or(0),
            });
        }
    }
    bail!("queue {queue} is not bound in the test namespace:\n{text}")
}

const LEAK_RULE: &[&str] = &[
    "POSTROUTING",
    "-p",
    "tcp",
    "--sport",
    "80",
    "-d",
    addr::FAKE_CLIENT_NET,
];

/// Packets to the fake clients that got past the OUTPUT chain (the intercept accepted them).
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
    let line = out
        .lines()
        .find(|l| l.contains("198.19.0.0/16"))
        .context("the leak-counting rule is gone")?;
    line.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .context("leak counter")
}

/// One step's figures.
#[derive(Debug, Clone)]
struct Row {
    label: String,
    secs: f64,
    sent: u64,
    records: u64,
    queued: u64,
    kernel_drops: u64,
    cpu: Cpu,
    leaks: u64,
}

/// What a step measures: the reader of an NFQUEUE queue, its CPU and its output count.
struct Target<'a> {
    queue: u16,
    cpu: &'a dyn Fn() -> Result<Cpu>,
    /// Records received by the copier, or packets handled by the bare reader.
    done: &'a AtomicU64,
}

fn step(
    lab: &Lab,
    target: &Target<'_>,
    sender: &mut Sender,
    label: &str,
    rate: Option<u64>,
    dur: Duration,
) -> Result<Row> {
    let done = target.done;
    let (k0, l0, c0, r0) = (
        kernel_queue(lab, target.queue)?,
        leaked(lab)?,
        (target.cpu)()?,
        done.load(Ordering::Relaxed),
    );
    let sent = if rate == Some(0) {
        std::thread::sleep(dur);
        0
    } else {
        sender.blast(rate, dur)
    };
    // Let the last records arrive: until nothing new for 300 ms (at most 3 s).
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut last = done.load(Ordering::Relaxed);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = done.load(Ordering::Relaxed);
        if now == last || Instant::now() > deadline {
            break;
        }
        last = now;
    }
    let (k1, l1, c1) = (
        kernel_queue(lab, target.queue)?,
        leaked(lab)?,
        (target.cpu)()?,
    );
    Ok(Row {
        label: label.to_owned(),
        secs: dur.as_secs_f64(),
        sent,
        records: done.load(Ordering::Relaxed) - r0,
        queued: k1.id_sequence - k0.id_sequence,
        kernel_drops: (k1.queue_dropped + k1.user_dropped) - (k0.queue_dropped + k0.user_dropped),
        cpu: c1.minus(&c0),
        leaks: l1 - l0,
    })
}

impl Row {
    /// Percent of one core over the step.
    fn pct(&self, ns: f64) -> f64 {
        100.0 * ns / (self.secs * 1e9)
    }

    /// The cells both tables share: offered pps, queued pps, records (verdicts) per second,
    /// loss %, kernel drops, CPU %, user %, sys %.
    fn shared_cells(&self) -> String {
        let loss = if self.sent == 0 {
            0.0
        } else {
            100.0 * (1.0 - self.records as f64 / self.sent as f64)
        };
        format!(
            "{:.0} | {:.0} | {:.0} | {:.1} | {} | {:.2} | {:.1} | {:.1}",
            self.sent as f64 / self.secs,
            self.queued as f64 / self.secs,
            self.records as f64 / self.secs,
            loss.max(0.0),
            self.kernel_drops,
            self.pct(self.cpu.total() as f64),
            self.pct(self.cpu.user_ticks as f64 * TICK_NS),
            self.pct(self.cpu.sys_ticks as f64 * TICK_NS),
        )
    }

    /// CPU µs per record, or `-` without records.
    fn per_record(&self) -> String {
        if self.records == 0 {
            "-".to_string()
        } else {
            format!("{:.2}", self.cpu.total() as f64 / 1e3 / self.records as f64)
        }
    }
}

fn print_table(rows: &[Row]) {
    println!(
        "| step | offered pps | queued pps | records/s | loss % | kernel drops | CPU % | user % | sys % | nfqueue thr % | control thr % | CPU µs/record | leaks |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let nfq = r.cpu.by_thread.get("nfqueue").copied().unwrap_or(0) as f64;
        let ctl = r.cpu.threads("intercept-ctl") as f64;
        println!(
            "| {} | {} | {:.2} | {:.2} | {} | {} |",
            r.label,
            r.shared_cells(),
            r.pct(nfq),
            r.pct(ctl),
            r.per_record(),
            r.leaks,
        );
    }
}

// ---------------------------------------------------------------------------------------------

fn perf_step(
    lab: &Lab,
    pid: u32,
    sender: &mut Sender,
    copier: &CopierState,
    rate: u64,
    dur: Duration,
) -> Result<()> {
    let secs = format!("{:.2}", dur.as_secs_f64());
    let events = "task-clock,context-switches,raw_syscalls:sys_enter,syscalls:sys_enter_recvfrom,\
                  syscalls:sys_enter_sendto,syscalls:sys_enter_write,syscalls:sys_enter_writev,\
                  syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait";
    let mut session = perf::Session::start(lab.dir(), "perf", pid, events, dur)?;
    let (r0, c0) = (
        copier.received.load(Ordering::Relaxed),
        Cpu::read(pid, None)?,
    );
    let sent = sender.blast(Some(rate), dur.saturating_sub(Duration::from_millis(300)));
    let c1 = Cpu::read(pid, None)?;
    session.wait();
    std::thread::sleep(Duration::from_millis(300));
    let records = copier.received.load(Ordering::Relaxed) - r0;
    let cpu = c1.minus(&c0);
    println!();
    println!("## where the time goes: {rate} pps offered for {secs} s under perf ({sent} sent, {records} records)");
    println!();
    // perf is a diagnostic: when it fails, say why and go on.
    let stat_out = session.stat_path();
    if let Err(e) = print_perf_stat(&stat_out, records.max(1)) {
        println!(
            "(perf stat gave nothing: {e:#}; its stderr: {})",
            session.stderr_of("stat")
        );
    }
    let data = session.data_path();
    if !data.exists() {
        println!(
            "(perf record gave nothing; its stderr: {})",
            session.stderr_of("record")
        );
        return Ok(());
    }
    print_paths(&data, &cpu, records.max(1))?;
    perf::print_reports(
        &data,
        &[
            ("by thread and binary", "--no-children", "comm,dso"),
            ("top symbols (self)", "--no-children", "comm,dso,sym"),
        ],
        30,
    )
}

/// Kernel entry points whose inclusive share of the samples says where a thread's time goes.
const PATHS: &[(&str, &str)] = &[
    ("entry_SYSCALL_64_after_hwframe", "all system calls"),
    ("__x64_sys_recvfrom", "recv: read a queued packet"),
    (
        "__x64_sys_sendto",
        "sendto: verdict (nfqueue) / records to the copier (control)",
    ),
    ("__x64_sys_write", "write"),
    ("__x64_sys_epoll_wait", "epoll_wait (tokio idle)"),
    ("__x64_sys_futex", "futex (wake-ups between threads)"),
    (
        "schedule",
        "schedule: sleeping and switching (inside the calls above)",
    ),
];

/// Prints, per thread, the inclusive share of the samples of a few kernel paths, and what that
/// is in CPU µs per record (the share times the CPU time the threads used in the window).
fn print_paths(data: &Path, cpu: &Cpu, records: u64) -> Result<()> {
    let lines = perf::report(data, "--children", "comm,sym", "0")?;
    let total_us = cpu.total() as f64 / 1e3;
    println!();
    println!(
        "perf record -g, inclusive share of the intercept's samples by kernel path (the intercept used {:.0} µs \
         of CPU per record in this window, perf included):",
        total_us / records as f64
    );
    println!();
    println!("| thread | path | % of samples | µs/record |");
    println!("|---|---|---:|---:|");
    let mut rows = Vec::new();
    for l in &lines {
        // "    45.00%     0.50%  nfqueue        [k] __x64_sys_recvfrom"
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 5 {
            continue;
        }
        let Ok(children) = f[0].trim_end_matches('%').parse::<f64>() else {
            continue;
        };
        let (comm, sym) = (f[2], f[4]);
        if let Some((_, label)) = PATHS.iter().find(|(s, _)| *s == sym) {
            let order = PATHS.iter().position(|(s, _)| *s == sym).unwrap_or(0);
            rows.push((comm.to_owned(), order, *label, children));
        }
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    for (comm, _, label, pct) in rows {
        println!(
            "| {comm} | {label} | {pct:.1} | {:.2} |",
            pct / 100.0 * total_us / records as f64
        );
    }
    Ok(())
}

/// Prints perf stat's per-thread counters, per record.
fn print_perf_stat(path: &Path, records: u64) -> Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let by = perf::stat_per_thread(&text);
    if by.is_empty() {
        println!("(perf stat gave nothing:\n{text})");
        return Ok(());
    }
    println!("perf stat per thread, per record ({records} records; task-clock in µs, the rest in counts):");
    println!();
    perf::print_stat_table(&by, records as f64);
    Ok(())
}

fn intercept_metrics(lab: &Lab) -> String {
    let text = fetch_metrics(lab, Host::Test, METRICS);
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            [
                "queued_total",
                "dropped_total",
                "records_sent",
                "overruns",
                "kernel_dropped",
                "held_total",
                "verdict_errors",
            ]
            .iter()
            .any(|k| l.contains(k))
        })
        .map(|l| format!("  {l}\n"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The floor: a bare NFQUEUE reader.

/// Queue of the bare reader (the intercept reads queue 0).
const BARE_QUEUE: u16 = 1;
const BARE_RULE: &[&str] = &[
    "OUTPUT",
    "-p",
    "tcp",
    "--sport",
    "80",
    "-j",
    "NFQUEUE",
    "--queue-num",
    "1",
];

#[derive(Debug, Default)]
struct BareState {
    handled: AtomicU64,
    tid: AtomicU64,
    ready: AtomicBool,
    stop: AtomicBool,
}

/// Reads queue 1 with the intercept's settings (fail-open off, GSO off, 128-byte copy range)
/// and gives every packet a DROP verdict, doing nothing else: what any NFQUEUE reader costs.
fn bare_reader(st: &BareState) -> Result<()> {
    let mut q = nfq::Queue::open().context("open an NFQUEUE socket")?;
    q.bind(BARE_QUEUE).context("bind queue 1")?;
    q.set_fail_open(BARE_QUEUE, false)?;
    q.set_recv_gso(BARE_QUEUE, false)?;
    q.set_copy_range(BARE_QUEUE, 128)?;
    q.set_recv_enobufs(true)?;
    st.tid
        .store(nix::unistd::gettid().as_raw() as u64, Ordering::Relaxed);
    st.ready.store(true, Ordering::Release);
    loop {
        let mut msg = match q.recv() {
            Ok(m) => m,
            Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENOBUFS as i32) => continue,
            Err(e) => bail!("bare reader: recv: {e}"),
        };
        msg.set_verdict(nfq::Verdict::Drop);
        q.verdict(msg).context("bare reader: verdict")?;
        st.handled.fetch_add(1, Ordering::Relaxed);
        if st.stop.load(Ordering::Relaxed) {
            return Ok(());
        }
    }
}

fn print_baseline(rows: &[Row]) {
    println!("| step | offered pps | queued pps | verdicts/s | loss % | kernel drops | CPU % | user % | sys % | CPU µs/packet |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {} | {} |",
            r.label,
            r.shared_cells(),
            r.per_record()
        );
    }
}

fn run() -> Result<()> {
    let args = parse_args()?;
    lab::available().map_err(|e| anyhow::anyhow!("{e}"))?;
    let started = Instant::now();
    let mut lab = Lab::with(LabOptions {
        offloads: true,
        capture_test_link: false,
    })?;
    let opts = CopyOptions {
        start_copier: false,
        test: None,
        intercept_args: vec!["--metrics".into(), METRICS.into()],
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).context("start the intercept")?;
    let pid = c.intercept.pid();
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if comm.trim() != "intercept" {
        bail!(
            "pid {pid} is {:?}, not the intercept (ip netns exec and env should exec)",
            comm.trim()
        );
    }
    let mut leak_rule = vec!["iptables", "-t", "mangle", "-A"];
    leak_rule.extend_from_slice(LEAK_RULE);
    lab.exec_ok(Host::Test, &leak_rule)
        .context("add the leak-counting rule")?;

    let tuples: Vec<FourTuple> = (0..args.tuples).map(tuple).collect();
    let state = CopierState::default();
    let bare = BareState::default();
    let mut sender = {
        let t = tuples.clone();
        let payload = args.payload;
        lab.in_ns(Host::Test, move || Sender::new(t, payload))??
    };

    let (baseline, rows) = std::thread::scope(|s| -> Result<(Vec<Row>, Vec<Row>)> {
        let lab_ref = &lab;
        let (st, tp) = (&state, &tuples);
        s.spawn(move || {
            let r = lab_ref
                .in_ns(Host::Online, || copier(st, tp))
                .and_then(|r| r);
            if let Err(e) = r {
                *st.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("{e:#}"));
            }
            st.stop.store(true, Ordering::Relaxed);
        });
        let copier_error = || {
            state
                .error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        };
        let result = (|| -> Result<(Vec<Row>, Vec<Row>)> {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !state.ready.load(Ordering::Acquire) {
                if let Some(e) = copier_error() {
                    bail!("fake copier: {e}");
                }
                if Instant::now() > deadline {
                    bail!("the fake copier's registrations were not confirmed within 10 s");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            // Warm-up: one record per tuple, so every later step finds warm caches.
            sender.blast(
                Some(20_000),
                Duration::from_millis(args.tuples as u64 * 1000 / 20_000 + 100),
            );
            std::thread::sleep(Duration::from_millis(500));
            println!(
                "lab {} up in {:.1} s; intercept pid {pid}; {} sessions registered by a fake copier on online; \
                 segments of {} payload bytes (headers-only copy range); {:.1} s per step",
                lab.prefix(),
                started.elapsed().as_secs_f64(),
                args.tuples,
                args.payload,
                args.step.as_secs_f64(),
            );

            // The floor first: the same packets to a bare reader of queue 1 (its rule goes on
            // top of the intercept's, and away again before the intercept's steps).
            let mut baseline = Vec::new();
            if args.baseline {
                let mut add = vec!["iptables", "-I"];
                add.extend_from_slice(BARE_RULE);
                let mut del = vec!["iptables", "-D"];
                del.extend_from_slice(BARE_RULE);
                let bare_ref = &bare;
                let reader = s.spawn(move || {
                    lab_ref
                        .in_ns(Host::Test, || bare_reader(bare_ref))
                        .and_then(|r| r)
                });
                let deadline = Instant::now() + Duration::from_secs(5);
                while !bare.ready.load(Ordering::Acquire) {
                    if reader.is_finished() || Instant::now() > deadline {
                        bail!("the bare NFQUEUE reader did not start");
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                lab.exec_ok(Host::Test, &add)
                    .context("add the bare reader's rule")?;
                let me = std::process::id();
                let tid = bare.tid.load(Ordering::Relaxed) as u32;
                let cpu = move || Cpu::read(me, Some(tid));
                let target = Target {
                    queue: BARE_QUEUE,
                    cpu: &cpu,
                    done: &bare.handled,
                };
                let mut out = Ok(());
                for &rate in &args.rates {
                    eprintln!("bare reader: step {} ...", rate_label(" pps", rate));
                    match step(
                        &lab,
                        &target,
                        &mut sender,
                        &rate_label(" pps", rate),
                        rate,
                        args.step,
                    ) {
                        Ok(r) => baseline.push(r),
                        Err(e) => {
                            out = Err(e);
                            break;
                        }
                    }
                }
                // Stop the reader: one more packet wakes it up.
                bare.stop.store(true, Ordering::Relaxed);
                let t = Instant::now();
                while !reader.is_finished() && t.elapsed() < Duration::from_secs(3) {
                    sender.send_one();
                    std::thread::sleep(Duration::from_millis(20));
                }
                lab.exec_ok(Host::Test, &del)
                    .context("remove the bare reader's rule")?;
                match reader.join() {
                    Ok(r) => r.context("bare reader")?,
                    Err(_) => bail!("the bare reader panicked"),
                }
                out?;
                std::thread::sleep(Duration::from_millis(300));
            }

            let cpu = move || Cpu::read(pid, None);
            let target = Target {
                queue: 0,
                cpu: &cpu,
                done: &state.received,
            };
            let mut rows = vec![step(
                &lab,
                &target,
                &mut sender,
                "idle",
                Some(0),
                Duration::from_secs(1),
            )?];
            for &rate in &args.rates {
                eprintln!("intercept: step {} ...", rate_label(" pps", rate));
                rows.push(step(
                    &lab,
                    &target,
                    &mut sender,
                    &rate_label(" pps", rate),
                    rate,
                    args.step,
                )?);
                if let Some(e) = copier_error() {
                    bail!("fake copier: {e}");
                }
            }
            if !baseline.is_empty() {
                println!();
                println!("## the floor: a bare NFQUEUE reader (recv + DROP verdict, nothing else) on queue 1");
                println!();
                print_baseline(&baseline);
            }
            println!();
            println!("## the intercept: NFQUEUE read -> record -> TCP write to the copier");
            println!();
            print_table(&rows);
            if args.perf {
                if perf::works() {
                    perf_step(
                        &lab,
                        pid,
                        &mut sender,
                        &state,
                        args.perf_rate,
                        args.step.max(Duration::from_secs(2)),
                    )?;
                } else {
                    println!(
                        "\n(perf is not usable here: no profile; see the thread columns above)"
                    );
                }
            }
            Ok((baseline, rows))
        })();
        state.stop.store(true, Ordering::Relaxed);
        bare.stop.store(true, Ordering::Relaxed);
        result
    })?;
    let _ = baseline;

    let foreign = state.foreign.load(Ordering::Relaxed);
    println!();
    println!("intercept metrics at the end:");
    print!("{}", intercept_metrics(&lab));
    if !sender.errors.is_empty() {
        println!(
            "send errors (the raw socket refused these packets): {:?}",
            sender.errors
        );
    }
    let leaks: u64 = rows.iter().map(|r| r.leaks).sum();
    println!(
        "\nrecords for unregistered sessions: {foreign}; packets that left the OUTPUT chain toward the fake clients: {leaks}; \
         total time {:.1} s",
        started.elapsed().as_secs_f64()
    );
    c.check_alive()?;
    if foreign > 0 || leaks > 0 {
        bail!("the intercept leaked ({leaks}) or misrouted ({foreign}) packets");
    }
    Ok(())
}
