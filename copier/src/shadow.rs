//! Shadow testing (`--compare`): the comparison thread, next to the copy and never in its way.
//!
//! Owns: [`ShadowConfig`] (from the `--compare*` flags), [`Tap`] (what the engine threads hand
//! over: copies of the intercepts' records, in batches, through a bounded channel; when it is
//! full the batch is dropped and counted, so the copy never waits) and the thread ([`start`]):
//! it opens its own capture ring of both directions of the mapped ports
//! ([`crate::bpf::build_answer_filter`], `Capture::open_both_directions`: the requests and the
//! online service's answers), feeds `compare::flows::Flows` with the client, online and test
//! streams of each connection (keyed by the client's address and port, which the copy keeps on
//! its test tuple: with `--copies N`, copy 0's records only), compares every exchange it
//! completes (`compare::Comparator`), exports the per-endpoint metrics, writes the JSON Lines file (`compare::jsonl`) and, when stopped, a
//! last tick and the summary ([`ShadowReport`]).
//!
//! With `--offline` ([`ShadowConfig::offline`]) no capture is opened: the replay hands the
//! thread both directions of the mapped ports as it reads them from the file
//! ([`Tap::packets`]), before the engine's filter keeps only the client's packets, each at its
//! place on the replay clock (`crate::offline::Replay::take_tapped`).
//!
//! Times: every packet and record is timed by when it was seen, not when this thread got it.
//! The copy's data segments of the compared connections are marked as the engine thread hands
//! them to the sender ([`Tap::sent`]: our clock), which times a test answer whose server
//! acknowledged the request only on the answer (`compare::flows`, delayed ACK).
//! A captured packet by the kernel's stamp in the ring (`tp_sec`/`tp_nsec`, `CLOCK_REALTIME`);
//! a record by the intercept's stamp ([`Record::stamp`], taken when it read the packet from
//! NFQUEUE, translated to our wall clock by the control link, `crate::clock`), or, from an
//! intercept without `FEATURE_STAMPS` (or before the link's first Pong), by the time its
//! engine thread handed it over. Wall-clock stamps become `Instant`s through a
//! [`crate::clock::Anchor`] read at every turn of the loop.
//!
//! Test answers come from the records' payload: the intercept must run with `--payload-bytes`
//! large enough for a whole segment (a record cut short stops its stream, counted). Only the
//! sampled sessions ask for it (`crate::control::PayloadAsk`, by [`sampled_client`], the rule
//! the tap samples records by).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ::metrics::{counter, gauge};
use common::proto::Record;
use common::wire::{parse_tcp_headers, parse_tcp_packet, TcpFlags, TcpPacketRef};
use compare::flows::{sampled, FlowConfig, Flows, Seg, Side};
use compare::jsonl::{JsonlWriter, Line};
use compare::{Comparator, CompareConfig, Exchange, Outcome};

use crate::bpf::build_answer_filter;
use crate::capture::{Capture, CaptureConfig};
use crate::clock::Anchor;
use crate::metrics_table::compare as names;

common::reasons! {
    /// Why requests or connections were not compared: the `reason` label of
    /// `copier_compare_not_compared_total`.
    enum NotCompared;
    /// Exchanges that timed out without an online or candidate answer.
    Expired => expired,
    /// Exchanges shed to stay within the bounds.
    Shed => shed,
    /// Connections whose client bytes were not HTTP/1.x.
    NotHttp => not_http,
    /// Streams stopped: bytes lost (cut record, hole) or a message too long to find its end.
    Unsynced => unsynced,
    /// Records (and, offline, file packets) dropped because the thread was behind.
    QueueFull => queue_full,
    /// Packets the kernel dropped from the comparison's ring.
    CaptureDrops => capture_drops,
    /// Connections forgotten to stay within the connection bound.
    ConnsShed => conns_shed,
    /// Connections forgotten to stay within the memory bound.
    MemoryShed => memory_shed,
    /// Inputs whose handling panicked.
    Panic => panic,
    /// HTTP/2 connections whose HPACK state was lost.
    H2Broken => h2_broken,
}

/// Record batches waiting for the comparison thread before batches are dropped.
const TAP_BATCHES: usize = 256;
/// How often idle connections and unpaired exchanges are expired and metrics exported.
const HOUSEKEEPING: Duration = Duration::from_secs(1);

/// One compared service: requests to `port` (on `online` if given) are copied to `candidate`
/// (and to `baseline`, when there is one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowMap {
    /// The online address, or any.
    pub online: Option<IpAddr>,
    /// The online port.
    pub port: u16,
    /// The `--map` target.
    pub candidate: SocketAddr,
    /// The `--baseline-map` target.
    pub baseline: Option<SocketAddr>,
}

/// The JSON Lines file.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// Its path (`--compare-log`).
    pub path: PathBuf,
    /// Bytes per file before rotating (`--compare-log-size`).
    pub max_bytes: u64,
    /// Older files kept (`--compare-log-keep`).
    pub keep: usize,
    /// Fraction of differing exchanges written (`--compare-log-sample`).
    pub sample: f64,
}

/// Everything the comparison thread runs with.
#[derive(Debug, Clone)]
pub struct ShadowConfig {
    /// The compared services.
    pub maps: Vec<ShadowMap>,
    /// Streams, pairing and sampling.
    pub flows: FlowConfig,
    /// Noise and limits of the comparison.
    pub compare: CompareConfig,
    /// The file, if any.
    pub log: Option<LogConfig>,
    /// The capture ring (interface, sizes).
    pub capture: CaptureConfig,
    /// How often a tick line (cumulative counts) is written.
    pub tick: Duration,
    /// `--offline`: the requests and the online answers come from the file through
    /// [`Tap::packets`]; no capture ring is opened.
    pub offline: bool,
}

/// What the engine threads hand to the comparison thread.
#[derive(Debug)]
enum Input {
    /// Records of the intercepts, with the time the engine thread got them (used when a
    /// record has no stamp of its own).
    Records(Vec<(Instant, Record)>),
    /// Packets of an `--offline` file (both directions), at their replay time.
    Packets(Vec<(Instant, Vec<u8>)>),
    /// Data segments of copies that stand for their captured client, as they were sent.
    Sent(Vec<Sent>),
}

/// A copy's data segment handed to the sender ([`Tap::sent`]).
#[derive(Debug, Clone, Copy)]
struct Sent {
    at: Instant,
    /// The captured client the copy stands for (the connection's key).
    client: SocketAddr,
    /// The test server.
    server: SocketAddr,
    /// The client sequence number after the segment's last byte.
    end: u32,
}

/// Sent marks an engine thread gathers before it hands them over ([`Tap::flush_sent`]).
const SENT_BATCH: usize = 1024;

/// Files the record of a copy that stands for the captured `client` under it: when the copy's
/// test tuple has another client port (the client's was taken by another live copy, a TIME_WAIT
/// moved it, or the copy reconnected after the test server closed), the record's destination
/// port becomes the client's, so that the comparison, which keys connections by the captured
/// client, gets the copy's answers (a reconnection's SYN-ACK starts its stream again:
/// `compare::flows`). Such a copy keeps the client's address (`Engine::record_copy`); a record
/// that does not parse, or to another address, is left alone.
pub fn file_under(record: &mut Record, client: SocketAddr) {
    let Ok(h) = parse_tcp_headers(&record.headers) else {
        return;
    };
    if h.packet.dst != client.ip() || h.packet.tcp.dst_port() == client.port() {
        return;
    }
    let tcp = h.packet.ip_header_len;
    common::wire::set_destination_port(&mut record.headers, tcp, client.port());
}

/// The engine threads' side of the channel.
#[derive(Debug, Clone)]
pub struct Tap {
    tx: SyncSender<Input>,
    sample: f64,
    dropped: Arc<AtomicU64>,
    /// This engine thread's marks not handed over yet.
    sent: Vec<Sent>,
}

impl Tap {
    /// Hands over the records of connections being compared (never blocks); the engine is
    /// done with the batch, so the records are moved, not copied. `keep[i]` says whether record
    /// `i` is of a copy that stands for the captured client (with `--copies N`, copy 0 and its
    /// baseline copy: `Engine::record_copy`; filed under the client by [`file_under`]); a
    /// missing entry counts as kept.
    pub fn records(&self, now: Instant, batch: Vec<Record>, keep: &[bool]) {
        let out: Vec<(Instant, Record)> = batch
            .into_iter()
            .enumerate()
            .filter(|(i, r)| {
                keep.get(*i).copied().unwrap_or(true)
                    && parse_tcp_headers(&r.headers).is_ok_and(|h| {
                        sampled_client(h.packet.dst, h.packet.tcp.dst_port(), self.sample)
                    })
            })
            .map(|(_, r)| (now, r))
            .collect();
        if out.is_empty() {
            return;
        }
        self.send(out.len(), Input::Records(out));
    }

    /// A copy's segment `pkt` (an IP packet) leaves now: a segment with data of a sampled copy
    /// that stands for its captured client (copy 0 wherever its port went, or a copy on the
    /// client's own address and port, as the baseline's) is marked. Call
    /// [`Tap::flush_sent`] once a turn.
    pub fn sent(&mut self, t: &crate::engine::Transmit, pkt: &[u8]) {
        let Some((copy, client)) = t.copy else { return };
        if copy != 0 && t.tuple.client.socket() != client {
            return;
        }
        let Ok(h) = parse_tcp_headers(pkt) else {
            return;
        };
        let data = pkt.len().saturating_sub(h.packet.headers_len());
        if data == 0 || !sampled_client(client.ip(), client.port(), self.sample) {
            return;
        }
        let end = h.packet.tcp.seq().0.wrapping_add(data as u32);
        self.sent.push(Sent {
            at: Instant::now(),
            client,
            server: t.tuple.server.socket(),
            end,
        });
        if self.sent.len() >= SENT_BATCH {
            self.flush_sent();
        }
    }

    /// Hands over the marks gathered by [`Tap::sent`] (never blocks; a full channel drops them:
    /// their answers are then timed from the ACK on the answer).
    pub fn flush_sent(&mut self) {
        if !self.sent.is_empty() {
            let batch = std::mem::take(&mut self.sent);
            let _ = self.tx.try_send(Input::Sent(batch));
        }
    }

    /// Hands over packets of the `--offline` file (requests and online answers, with their
    /// replay times; never blocks). A batch dropped because the thread is behind is counted
    /// with the dropped records (its connections lose sync and are counted again there).
    pub fn packets(&self, batch: Vec<(Instant, Vec<u8>)>) {
        if !batch.is_empty() {
            self.send(batch.len(), Input::Packets(batch));
        }
    }

    fn send(&self, n: usize, input: Input) {
        match self.tx.try_send(input) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }
}

/// Whether the session of the test client `ip`:`port` is compared under `--compare-sample`
/// (`sample` from 0 to 1): the one rule the tap, the comparison's streams and the payload
/// requests to the intercepts (`crate::control::PayloadAsk`) share.
#[must_use]
pub fn sampled_client(ip: IpAddr, port: u16, sample: f64) -> bool {
    sampled(&(ip, port), sample)
}

/// What the comparison did, printed at exit.
#[derive(Debug)]
pub struct ShadowReport {
    /// The comparator's summary.
    pub summary: compare::stats::Summary,
    /// Records (and, offline, file packets) dropped because the thread was behind.
    pub dropped: u64,
    /// Streams and pairing counters.
    pub flows: compare::flows::FlowCounts,
    /// Expired and shed exchanges.
    pub pending: compare::pending::PendingCounts,
    /// Packets the kernel dropped from the comparison's ring (their connections stall).
    pub capture_drops: u64,
}

impl std::fmt::Display for ShadowReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.summary)?;
        let (c, p) = (&self.flows, &self.pending);
        write!(
            f,
            "\ncompare: not compared: {} unanswered (expired), {} shed, {} records dropped (thread behind), \
{} packets dropped by the kernel (ring full), {} streams lost sync, {} connections not HTTP, \
{} HTTP/2 connections stopped (h2_broken) of {}",
            p.expired, p.shed, self.dropped, self.capture_drops, c.unsynced, c.not_http, c.h2_broken, c.h2
        )
    }
}

/// The running thread.
#[derive(Debug)]
pub struct Shadow {
    /// Cloned into each engine thread.
    pub tap: Tap,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<ShadowReport>,
}

impl Shadow {
    /// Stops the thread (after it compared what is complete) and returns its report.
    pub fn stop(self) -> Option<ShadowReport> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().ok()
    }
}

/// Opens the capture (not with `--offline`) and starts the thread. The capture is opened here,
/// so that a missing permission or interface is an error at start.
pub fn start(cfg: ShadowConfig) -> anyhow::Result<Shadow> {
    use anyhow::Context;
    let capture = if cfg.offline {
        None
    } else {
        let ports: Vec<u16> = cfg.maps.iter().map(|m| m.port).collect();
        let filter = build_answer_filter(&ports).context("--compare: the capture filter")?;
        Some(
            Capture::open_both_directions(&cfg.capture, &filter)
                .context("--compare: opening its capture ring")?,
        )
    };
    let log = match &cfg.log {
        Some(l) => Some(
            JsonlWriter::create(&l.path, l.max_bytes, l.keep, l.sample)
                .with_context(|| format!("--compare-log {}", l.path.display()))?,
        ),
        None => None,
    };
    let (tx, rx) = sync_channel(TAP_BATCHES);
    let dropped = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tap = Tap {
        tx,
        sample: cfg.flows.sample,
        dropped: dropped.clone(),
        sent: Vec::new(),
    };
    let st = stop.clone();
    let handle = std::thread::Builder::new()
        .name("compare".into())
        .spawn(move || Thread::new(cfg, log, dropped).run(capture, rx, &st))
        .context("spawning the comparison thread")?;
    Ok(Shadow { tap, stop, handle })
}

/// A segment for `compare::flows` from a parsed packet (or record) and the payload it carries.
fn seg_of<'a>(p: &TcpPacketRef<'_>, payload: &'a [u8], cut: bool) -> Seg<'a> {
    let f = p.tcp.flags();
    Seg {
        seq: p.tcp.seq().0,
        ack: f.contains(TcpFlags::ACK).then(|| p.tcp.ack().0),
        syn: f.contains(TcpFlags::SYN),
        fin: f.contains(TcpFlags::FIN),
        rst: f.contains(TcpFlags::RST),
        payload,
        cut,
    }
}

struct Thread {
    cfg: ShadowConfig,
    flows: Flows<(IpAddr, u16)>,
    cmp: Comparator,
    log: Option<JsonlWriter>,
    dropped: Arc<AtomicU64>,
    /// The health of `log` when its disk fills (`crate::outage`).
    log_health: crate::outage::Outage,
    /// Packets the kernel dropped because the comparison's ring was full.
    capture_drops: u64,
    /// Our wall clock as `Instant`s, for the stamps; read at every turn of the loop.
    anchor: Anchor,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Thread {
    fn new(cfg: ShadowConfig, log: Option<JsonlWriter>, dropped: Arc<AtomicU64>) -> Thread {
        Thread {
            flows: Flows::new(cfg.flows.clone()),
            cmp: Comparator::new(cfg.compare.clone()),
            log,
            dropped,
            log_health: crate::outage::Outage::new(
                "compare_log",
                format!(
                    "--compare-log {}",
                    cfg.log
                        .as_ref()
                        .map(|l| l.path.display().to_string())
                        .unwrap_or_default()
                ),
            ),
            capture_drops: 0,
            anchor: Anchor::now(),
            cfg,
        }
    }

    fn run(
        mut self,
        mut capture: Option<Capture>,
        rx: Receiver<Input>,
        stop: &AtomicBool,
    ) -> ShadowReport {
        let mut next_house = Instant::now() + HOUSEKEEPING;
        let mut next_tick = Instant::now() + self.cfg.tick;
        loop {
            let stopping = stop.load(Ordering::SeqCst);
            let now = Instant::now();
            self.anchor = Anchor::now();
            let mut work = capture.as_mut().map_or(0, |c| {
                c.drain_stamped(8, |pkt, stamp| {
                    self.guarded(|t| {
                        let at = t.anchor.instant(stamp).unwrap_or(now);
                        t.packet(at, pkt);
                    });
                })
            });
            while let Ok(input) = rx.try_recv() {
                work += 1;
                self.guarded(|t| t.input(input));
            }
            let now = Instant::now();
            if now >= next_house || stopping {
                self.guarded(|t| {
                    for ex in t.flows.expire(now) {
                        t.compare(&ex);
                    }
                });
                if let Some(c) = capture.as_mut() {
                    let _ = c.refresh_kernel_stats();
                    self.capture_drops = c.stats().kernel_drops;
                }
                self.export();
                next_house = now + HOUSEKEEPING;
            }
            if now >= next_tick || stopping {
                self.tick();
                next_tick = now + self.cfg.tick;
            }
            if stopping {
                break;
            }
            if work == 0 {
                match &capture {
                    Some(c) => {
                        let _ = crate::sys::poll_readable(&[c.fd()], Duration::from_millis(20));
                    }
                    None => {
                        if let Ok(input) = rx.recv_timeout(Duration::from_millis(20)) {
                            self.guarded(|t| t.input(input));
                        }
                    }
                }
            }
        }
        if let Some(l) = self.log.as_mut() {
            let r = l.flush();
            self.log_health.note(r);
        }
        ShadowReport {
            summary: self.cmp.summary(),
            dropped: self.dropped.load(Ordering::Relaxed),
            flows: self.flows.counts(),
            pending: self.flows.pending_counts(),
            capture_drops: self.capture_drops,
        }
    }

    /// Runs `f` on the thread's state; a panic (a bug met by some input) does not end the
    /// comparison: the streams and waiting exchanges, which may be half updated, are forgotten
    /// (`Flows::reset`, counted `copier_compare_not_compared_total{reason="panic"}`), the
    /// comparator's counts and learned noise stay, and the copy never notices.
    fn guarded(&mut self, f: impl FnOnce(&mut Thread)) {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self))).is_err() {
            self.flows.reset();
            let n = self.flows.counts().panics;
            if n.is_power_of_two() {
                tracing::error!("compare: the comparison panicked (panic #{n}); its connections in flight are forgotten");
            }
        }
    }

    fn input(&mut self, input: Input) {
        match input {
            Input::Records(batch) => {
                for (t, r) in batch {
                    self.record(t, &r);
                }
            }
            Input::Packets(batch) => {
                for (t, p) in batch {
                    self.packet(t, &p);
                }
            }
            Input::Sent(batch) => {
                for s in batch {
                    let side = if self.cfg.maps.iter().any(|m| m.candidate == s.server) {
                        Side::Candidate
                    } else if self.cfg.maps.iter().any(|m| m.baseline == Some(s.server)) {
                        Side::Baseline
                    } else {
                        continue;
                    };
                    self.flows
                        .handle_sent(s.at, &(s.client.ip(), s.client.port()), side, s.end);
                }
            }
        }
    }

    /// A captured (or, offline, read) packet: a request or an online answer.
    fn packet(&mut self, now: Instant, pkt: &[u8]) {
        let Ok(p) = parse_tcp_packet(pkt) else { return };
        let (sp, dp) = (p.tcp.src_port(), p.tcp.dst_port());
        let m = |ip: IpAddr, port: u16| {
            self.cfg
                .maps
                .iter()
                .any(|m| m.port == port && m.online.is_none_or(|a| a == ip))
        };
        let (side, key, port) = if m(p.dst, dp) {
            (Side::Client, (p.src, sp), dp)
        } else if m(p.src, sp) {
            (Side::Online, (p.dst, dp), sp)
        } else {
            return;
        };
        let seg = seg_of(&p, p.payload(), false);
        for ex in self.flows.handle_on(now, &key, port, side, seg) {
            self.compare(&ex);
        }
    }

    /// A record of a test server's answer, got at `now` (its time if it has no stamp).
    fn record(&mut self, now: Instant, r: &Record) {
        let now = self.anchor.instant(r.stamp).unwrap_or(now);
        let Ok(h) = parse_tcp_headers(&r.headers) else {
            return;
        };
        let p = h.packet;
        let from = SocketAddr::new(p.src, p.tcp.src_port());
        let (side, port) = if let Some(m) = self.cfg.maps.iter().find(|m| m.candidate == from) {
            (Side::Candidate, m.port)
        } else if let Some(m) = self.cfg.maps.iter().find(|m| m.baseline == Some(from)) {
            (Side::Baseline, m.port)
        } else {
            return;
        };
        let headers_len = p.ip_header_len + p.tcp.header_len();
        let total = if h.declared_len > headers_len {
            h.declared_len
        } else {
            r.orig_len as usize
        };
        let payload_len = total.saturating_sub(headers_len);
        let seg = seg_of(&p, &r.payload, r.payload.len() < payload_len);
        let key = (p.dst, p.tcp.dst_port());
        for ex in self.flows.handle_on(now, &key, port, side, seg) {
            self.compare(&ex);
        }
    }

    fn compare(&mut self, ex: &Exchange) {
        let v = self.cmp.compare(ex);
        if tracing::enabled!(tracing::Level::DEBUG) {
            let redact = &self.cfg.compare.redact;
            let first = |b: &[u8]| {
                let b = redact.head(&b[..b.len().min(8192)]);
                String::from_utf8_lossy(&b[..b.len().min(120)]).replace("\r\n", "|")
            };
            tracing::debug!(
                "compare: {:?} {} | online {} | candidate {} | baseline {}",
                v.outcome,
                first(&ex.request),
                first(&ex.online.bytes),
                first(&ex.candidate.bytes),
                ex.baseline
                    .as_ref()
                    .map(|b| first(&b.bytes))
                    .unwrap_or_default()
            );
        }
        let ep = v.endpoint.clone();
        let result = match v.outcome {
            Outcome::Equal => "equal",
            Outcome::Differ => "differ",
            Outcome::Malformed(_) => "malformed",
        };
        counter!(names::EXCHANGES_TOTAL, "endpoint" => ep.clone(), "result" => result).increment(1);
        let mut kinds: Vec<&str> = v.diffs.iter().map(|d| d.kind.as_str()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        for k in kinds {
            counter!(names::DIFFERENCES_TOTAL, "endpoint" => ep.clone(), "kind" => k).increment(1);
        }
        for f in &v.learned {
            counter!(names::NOISE_LEARNED_TOTAL, "endpoint" => ep.clone()).increment(1);
            tracing::info!("compare: {ep}: {f} learned as noise");
        }
        if let Some(l) = self.log.as_mut() {
            let r = l.write_verdict(&v, unix_ms());
            self.log_health.note(r);
        }
    }

    fn tick(&mut self) {
        let Some(l) = self.log.as_mut() else { return };
        let r = l
            .write(&Line::tick(unix_ms(), &self.cmp))
            .and_then(|w| Ok(w | l.flush()?));
        self.log_health.note(r);
    }

    fn export(&self) {
        for (n, s) in self.cmp.endpoints() {
            for (q, name) in [(0.5, "0.5"), (0.99, "0.99")] {
                if let Some(r) = s.time_ratio(q) {
                    gauge!(names::TIME_RATIO, "endpoint" => n.to_string(), "quantile" => name)
                        .set(r);
                }
            }
        }
        let c = self.flows.counts();
        let p = self.flows.pending_counts();
        for (reason, v) in [
            (NotCompared::Expired, p.expired),
            (NotCompared::Shed, p.shed),
            (NotCompared::NotHttp, c.not_http),
            (NotCompared::Unsynced, c.unsynced),
            (NotCompared::QueueFull, self.dropped.load(Ordering::Relaxed)),
            (NotCompared::CaptureDrops, self.capture_drops),
            (NotCompared::ConnsShed, c.conns_shed),
            (NotCompared::MemoryShed, c.memory_shed),
            (NotCompared::Panic, c.panics),
            (NotCompared::H2Broken, c.h2_broken),
        ] {
            counter!(names::NOT_COMPARED_TOTAL, "reason" => reason.label()).absolute(v);
        }
        counter!(names::MALFORMED_TOTAL).absolute(self.cmp.totals().malformed);
        for (status, n) in &self.cmp.totals().grpc_status {
            counter!(names::GRPC_STATUS_TOTAL, "status" => status.clone()).absolute(*n);
        }
        counter!(names::H2_CONNECTIONS_TOTAL).absolute(c.h2);
        let (conns, pending) = self.flows.sizes();
        gauge!(names::CONNECTIONS).set(conns as f64);
        gauge!(names::PENDING).set(pending as f64);
        gauge!(names::BYTES).set(self.flows.bytes() as f64);
    }
}
