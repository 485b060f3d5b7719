//! The engine thread: one OS thread owns the [`Engine`], the packet source (the capture ring, or
//! a file with `--offline`) and the raw sender, and drives them with the clock.
//!
//! Each turn of the loop: note how many intercepts are connected, feed the records (each at the
//! instant its control link read it) and registration verdicts that the control clients queued
//! (several workers) or that it reads itself from the links' sockets (one worker, `io.desk`,
//! see [`crate::link`]), feed every ready ring block (or the file's packets that are due), fire
//! the engine's timer, then drain the engine's outputs (registrations first, so they leave before
//! the SYN they belong to; then packets to the sender, flushed in batches), tell the control
//! clients whether it is eager for records ([`crate::workers::Eagerness`]), and about once a
//! second export the counters. Then it sleeps in `ppoll` on the ring socket (if live), the
//! eventfd that the control clients poke for what cannot wait and the timerfd they arm for
//! records that can wait a little ([`crate::workers::Wake`]), and the links it reads (unless they
//! rest after a read, see [`link_rest`]), until the engine's next timer, the sender's back-off,
//! the file's next packet, the links' rest or at most [`MAX_WAIT`].
//!
//! Offline, the file's clock starts once an intercept is connected, and the loop ends by itself
//! once the file is done and the engine holds no session and the sender no packet (or
//! `session_timeout` after the file ended, whichever comes first).
//!
//! When the loop ends (stop, end of the replay, or a fatal error), every session is closed
//! ([`Engine::close_all`]): each test connection gets a RST, the sender is flushed (for at most
//! [`SHUTDOWN_FLUSH`]), and only then are the connections unregistered.
//!
//! With several workers (`--workers N`) there is one such loop per worker, each with its own
//! ring (one member of a fanout group), engine and sender; `LoopIo::routes` then records which
//! worker owns each registered tuple, so records reach the right loop (see [`crate::workers`]).
//!
//! Invariants: nothing in the loop blocks except that `ppoll`; every queue it feeds is bounded
//! (the sender's queue has a high-water mark above which the engine is not asked for more packets,
//! the record channel is bounded by its creator). A panic inside the engine does not end the
//! copier: it is logged and counted, the session table is rebuilt empty and every registration is
//! withdrawn (the sessions in flight are lost, later ones are copied).

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::proto::RegVerdict;
use tokio::sync::mpsc;

use crate::capture::CaptureStats;
use crate::control::{RegEvent, Registry};
use crate::engine::{Engine, EngineConfig, EngineStats, LinkEvent, OverloadReason};
use crate::feed::Feed;
use crate::link::{EngineLink, LinkDesk};
use crate::metrics::{self as m, Snapshot};
use crate::offline::{Replay, ReplayStats};
use crate::send::{RawSender, SendStats};
use crate::sys;
use crate::workers::{Eagerness, Inbound, Routes, TurnSeen, Wake};

/// Longest sleep of the loop, whatever else it waits for. Every input wakes the loop by itself
/// (the ring socket when the kernel retires a block, the eventfd and the record timerfd for records and link changes,
/// the deadline for the engine's timers and the sender's back-off), so this is only a safety net.
/// Measured on a debug build, idle: 10 ms costs 0.9% of a core (100 wake-ups/s), 100 ms 0.1%.
pub const MAX_WAIT: Duration = Duration::from_millis(100);
/// How often counters are exported and the kernel's drop counters read.
const REPORT_EVERY: Duration = Duration::from_secs(1);
/// Batches of captured packets (a batch: at most two ring blocks) handed to the engine per turn.
pub const BATCHES_PER_TURN: usize = 4;

/// Record batches taken per turn, so a flood of records cannot starve the capture.
const RECORD_BATCHES_PER_TURN: usize = 64;
/// Packets taken from the engine per turn.
const TRANSMITS_PER_TURN: usize = 8192;
/// Above this many queued packets the engine is not asked for more.
const SEND_HIGH_WATER: usize = 4096;
/// File packets handed to the engine per turn (offline).
const OFFLINE_PER_TURN: usize = 1024;
/// Shortest interval between two warnings about shedding (sessions or pending SYNs).
const SHED_LOG_EVERY: Duration = Duration::from_secs(10);
/// After the kernel dropped captured packets, the copier counts as behind this long (no new
/// session starts), so the capacity goes to the sessions it copies.
pub const OVERLOAD_AFTER_DROPS: Duration = Duration::from_secs(2);

/// Longest time spent sending the RSTs of [`Engine::close_all`] when the loop ends.
pub const SHUTDOWN_FLUSH: Duration = Duration::from_secs(1);
/// How long the Unregisters of ended sessions may wait to be applied to the registry (and so
/// sent to the intercepts) when no Register comes to take them along: nothing waits on them
/// (the intercept drops the answers of a tuple either way), while every publication of the
/// registry wakes the control clients. With one request per connection a Register comes at
/// nearly every turn, and the Unregisters ride with it.
pub const UNREGISTER_WAIT: Duration = Duration::from_millis(50);
/// Unregisters waiting that are applied at once whatever their age.
const UNREGISTER_BATCH: usize = 4096;

/// Where client packets come from.
#[derive(Debug)]
pub enum Source {
    /// The live capture ring, read by its own thread.
    Live(Feed),
    /// A capture file (`--offline`).
    Offline(Box<Replay>),
}

impl Source {
    /// The capture counters (offline: the packets and bytes handed to the engine).
    #[must_use]
    pub fn stats(&self) -> CaptureStats {
        match self {
            Source::Live(c) => c.stats(),
            Source::Offline(r) => {
                let s = r.stats();
                CaptureStats {
                    packets: s.fed,
                    bytes: s.fed_bytes,
                    truncated: s.read.truncated + s.read.snapped,
                    ..CaptureStats::default()
                }
            }
        }
    }
}

/// What the loop is made of.
#[derive(Debug)]
pub struct LoopIo {
    /// Where client packets come from.
    pub source: Source,
    /// The raw sockets.
    pub sender: RawSender,
    /// Records and registration verdicts from the control clients.
    pub records: mpsc::Receiver<Inbound>,
    /// Where registrations go.
    pub registry: Arc<Registry>,
    /// Intercept links that are up.
    pub connected: Arc<AtomicUsize>,
    /// How the control clients wake this loop (its eventfd and record timer, see
    /// [`crate::workers::Wake`]); the loop tells it whether it is eager.
    pub wake: Arc<Wake>,
    /// What the intercepts are told about holding records; the loop says when it turns eager
    /// and back.
    pub hold: Arc<crate::workers::InterceptHold>,
    /// Set to end the loop (poke `wake` after setting it).
    pub stop: Arc<AtomicBool>,
    /// This loop's worker index (0 with one worker).
    pub worker: u16,
    /// With several workers: who owns which registered tuple (this loop adds and removes its
    /// own). `None` with one worker.
    pub routes: Option<Arc<Routes>>,
    /// The run trace (`--trace`), shared by the workers.
    pub trace: Option<crate::trace::TraceSink>,
    /// The closed loop on the rate (`--target-rate`).
    pub rate: Option<crate::rate::RateDriver>,
    /// The archive (`--record`), if any.
    pub recorder: Option<crate::record::Recorder>,
    /// With `--compare`: where copies of the records go (`crate::shadow`).
    pub shadow: Option<crate::shadow::Tap>,
    /// With one worker: where the control clients hand over their links' read sides, which
    /// this loop then reads itself (`crate::link`); `None`: records come through `records`.
    pub desk: Option<Arc<LinkDesk>>,
}

/// Hand a packet about to be sent to the archive (`--record`); a write that fails (a full disk)
/// is logged once and counted by the archive, which tries again (copying goes on).
fn record(io: &mut LoopIo, t: &crate::engine::Transmit, pkt: &[u8]) {
    if let Some(r) = io.recorder.as_mut() {
        r.record(t.tuple, t.copy.map(|c| c.0), t.copy.map(|c| c.1), pkt);
    }
    // --compare: when the copy's request bytes leave (a test answer time's start)
    if let Some(tap) = io.shadow.as_mut() {
        tap.sent(t, pkt);
    }
}

/// The counters of a run, printed when the copier stops.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// The engine's counters (of the last engine, if it was rebuilt).
    pub engine: EngineStats,
    /// The capture's.
    pub capture: CaptureStats,
    /// The sender's.
    pub send: SendStats,
    /// Engine panics survived.
    pub panics: u64,
    /// How long the loop ran.
    pub elapsed: Duration,
    /// The replay's counters (`--offline`).
    pub offline: Option<ReplayStats>,
}

/// The figures of the summary line, summed over workers.
#[derive(Default)]
struct Line {
    packets: u64,
    kernel_drops: u64,
    started: u64,
    completed: u64,
    failed: u64,
    open_at_end: u64,
    /// `failed` by reason.
    fails: crate::engine::FailCounts,
    not_copied: u64,
    sent: u64,
    sent_bytes: u64,
    gso_whole: u64,
    gso_wire: u64,
    gso_cut: u64,
    shed_overload: crate::engine::ShedCounts,
    /// Unproven sessions and mid-stream candidates ended, by why.
    unproven: crate::engine::UnprovenCounts,
    retransmissions: u64,
    send_errors: u64,
    records: u64,
    panics: u64,
    tuple_moves: u64,
    units: u64,
    ahead: u64,
    lag: crate::engine::LagHistogram,
    requests: crate::engine::RequestCounts,
}

impl Line {
    fn of(parts: &[Summary]) -> Line {
        let mut l = Line::default();
        for p in parts {
            let (e, s) = (&p.engine, &p.send);
            l.packets += p.capture.packets;
            l.kernel_drops += p.capture.kernel_drops;
            l.started += e.sessions_started;
            l.completed += e.sessions_completed;
            l.failed += e.sessions_failed.total();
            l.open_at_end += e.sessions_open_at_end;
            for (r, n) in crate::engine::FailReason::ALL
                .iter()
                .map(|&r| (r, e.sessions_failed.get(r)))
            {
                l.fails.add(r, n);
            }
            l.not_copied += e.sessions_not_copied;
            l.sent += s.packets;
            l.sent_bytes += s.bytes;
            l.gso_whole += s.gso_whole;
            l.gso_wire += s.gso_wire_segments;
            l.gso_cut += s.gso_cut;
            l.shed_overload.merge(&e.sessions_shed_overload);
            for &r in crate::engine::UnprovenEnd::ALL {
                l.unproven.add(r, e.unproven_ended.get(r));
            }
            l.retransmissions += e.retransmissions;
            l.send_errors += s.err_msgsize + s.err_nobufs + s.err_again + s.err_perm + s.err_other;
            l.records += e.records_received;
            l.panics += p.panics;
            l.tuple_moves += e.tuple_moves;
            l.units += e.units_sent;
            l.ahead += e.units_ahead;
            l.lag.merge(&e.replay_lag);
            l.requests.merge(&e.requests);
        }
        l
    }

    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why: Vec<String> = self
            .fails
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        let mut why = if why.is_empty() {
            String::new()
        } else {
            format!(" ({})", why.join(", "))
        };
        if self.open_at_end > 0 {
            why.push_str(&format!(", {} open at the capture's end", self.open_at_end));
        }
        write!(
            f,
            "captured {} packets ({} dropped by the kernel); sessions {} started, {} completed, \
             {} failed{why}, {} not copied (no intercept); sent {} segments ({} bytes, {} retransmissions, {} send errors); \
             {} records received",
            self.packets,
            self.kernel_drops,
            self.started,
            self.completed,
            self.failed,
            self.not_copied,
            self.sent,
            self.sent_bytes,
            self.retransmissions,
            self.send_errors,
            self.records,
        )?;
        if self.shed_overload.total() > 0 {
            write!(
                f,
                "; {} session(s) not copied because the copier was behind ({} for a capture backlog, {} after kernel drops, \
                 {} given up at a hole the capture lost)",
                self.shed_overload.total(),
                self.shed_overload.capture_backlog,
                self.shed_overload.kernel_drops,
                self.shed_overload.hole
            )?;
        }
        let (shed, timeout) = (self.unproven.unproven_shed, self.unproven.unproven_timeout);
        if shed + timeout > 0 {
            write!(
                f,
                "; {} unproven session(s) or mid-stream candidate(s) ended ({shed} unproven_shed, {timeout} unproven_timeout)",
                shed + timeout
            )?;
        }
        if self.gso_whole + self.gso_cut > 0 {
            write!(
                f,
                "; super-segments: {} sent whole ({} segments on the wire), {} cut by the copier",
                self.gso_whole, self.gso_wire, self.gso_cut
            )?;
        }
        if self.units > 0 {
            let ms = |q: f64| match self.lag.quantile_bound(q) {
                Some(b) if b.is_finite() => format!("<= {} ms", (b * 1e6).round() / 1e3),
                _ => format!(
                    "> {} s",
                    crate::engine::LAG_BOUNDS[crate::engine::LAG_BOUNDS.len() - 1]
                ),
            };
            write!(
                f,
                "; {} requests sent ({} ahead of an answer), replay lag p50 {}, p99 {}",
                self.units,
                self.ahead,
                ms(0.5),
                ms(0.99)
            )?;
        }
        let r = &self.requests;
        if !r.names.is_empty() {
            write!(
                f,
                "; rules: {} HTTP requests and {} other units read, {} dropped, {} edited, {} malformed",
                r.http_requests, r.byte_units, r.dropped, r.edited, r.malformed
            )?;
            let matched: Vec<String> = r
                .names
                .iter()
                .zip(&r.rules)
                .map(|(n, c)| format!("{n} {c}"))
                .collect();
            write!(f, " (matched: {})", matched.join(", "))?;
        }
        if self.tuple_moves > 0 {
            write!(
                f,
                "; {} copies moved to another test tuple (held by another copier)",
                self.tuple_moves
            )?;
        }
        if self.panics > 0 {
            write!(f, "; the engine was rebuilt after {} panic(s)", self.panics)?;
        }
        Ok(())
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "copier ran {:.1}s: ", self.elapsed.as_secs_f64())?;
        Line::of(std::slice::from_ref(self)).write(f)?;
        if let Some(o) = &self.offline {
            write!(f, "; offline: {o}")?;
        }
        Ok(())
    }
}

/// The summaries of every worker's loop, printed when the copier stops: one line, with totals
/// and, for several workers, the share of each.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// One per worker, in worker order.
    pub workers: Vec<Summary>,
    /// The mirror input's counters (`--mirror`).
    pub mirror: Option<crate::mirror::MirrorStats>,
}

impl fmt::Display for RunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_workers(f)?;
        if let Some(m) = &self.mirror {
            write!(f, "; {m}")?;
        }
        Ok(())
    }
}

impl RunSummary {
    fn fmt_workers(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let [one] = &self.workers[..] {
            return fmt::Display::fmt(one, f);
        }
        let elapsed = self
            .workers
            .iter()
            .map(|w| w.elapsed)
            .max()
            .unwrap_or_default();
        write!(
            f,
            "copier ran {:.1}s with {} workers: ",
            elapsed.as_secs_f64(),
            self.workers.len()
        )?;
        Line::of(&self.workers).write(f)?;
        let each = |g: fn(&Summary) -> u64| {
            self.workers
                .iter()
                .map(|w| g(w).to_string())
                .collect::<Vec<_>>()
                .join("/")
        };
        write!(
            f,
            "; per worker: captured {}, kernel drops {}, sessions started {}, segments sent {}",
            each(|w| w.capture.packets),
            each(|w| w.capture.kernel_drops),
            each(|w| w.engine.sessions_started),
            each(|w| w.send.packets),
        )
    }
}

/// Why the loop gave up.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    /// `ppoll` on the ring failed repeatedly.
    #[error("waiting on the capture socket failed: {0}")]
    Poll(std::io::Error),
    /// Reading the `--offline` file failed (what was read before was replayed).
    #[error("{0}")]
    Offline(String),
}

struct State {
    /// Intercepts connected, as last told to the engine.
    up: Option<usize>,
    /// Sessions and pending SYNs shed, as last logged, and when (logged at most every
    /// [`SHED_LOG_EVERY`]).
    shed_logged: (u64, u64, u64),
    shed_log_at: Option<Instant>,
    /// Whether an idle session ended by `--idle-timeout` was logged (once).
    idle_timeout_logged: bool,
    next_report: Instant,
    panics: u64,
    poll_errors: u32,
    last_kernel_drops: u64,
    /// Registration changes taken from the engine and not yet applied: Unregisters wait here
    /// (see [`UNREGISTER_WAIT`]) for the next Register, a full batch or their deadline.
    events: Vec<RegEvent>,
    /// When the oldest Unregister in `events` came.
    unregister_since: Option<Instant>,
    /// Offline: how long to wait for the sessions once the file is done.
    session_timeout: Duration,
    /// Offline: when the file was done.
    offline_done: Option<Instant>,
    /// `--compare`: which records of a batch go to the comparison (reused).
    compared: Vec<bool>,
    /// Whether records lately released request units by themselves (see
    /// [`crate::workers::Eagerness`]), and what `io.wake` was last told.
    eagerness: Eagerness,
    eager: bool,
    /// The intercept links this loop reads itself (`io.desk`), and its read buffer.
    links: Vec<EngineLink>,
    link_buf: Vec<u8>,
    /// Until when the links rest: their sockets are left out of `ppoll`, and every turn reads
    /// them, whatever woke it (see [`link_rest`]).
    link_rest: Option<Instant>,
    /// When the engine last gave a Register (its verdict and then its handshake come on the
    /// links, and the connection's first segment waits for them).
    last_register: Option<Instant>,
    /// Kernel drops as last seen by [`overload_turn`], and when they last grew.
    overload_drops: u64,
    drops_grew_at: Option<Instant>,
    /// When the copier last said it was behind (logged at most every [`SHED_LOG_EVERY`]).
    overload_log_at: Option<Instant>,
}

/// Run the loop until `io.stop` is set. `config` and `seed` build the engine (again after a
/// panic).
pub fn run_engine_loop(
    config: EngineConfig,
    seed: u64,
    mut io: LoopIo,
) -> (Summary, Option<LoopError>) {
    let started = Instant::now();
    if io.routes.is_some() {
        m::label_this_thread(Some(io.worker));
    }
    let mut engine = Engine::new(config.clone(), seed);
    let mut st = State {
        up: None,
        shed_logged: (0, 0, 0),
        shed_log_at: None,
        idle_timeout_logged: false,
        next_report: started,
        panics: 0,
        poll_errors: 0,
        last_kernel_drops: 0,
        events: Vec::new(),
        unregister_since: None,
        session_timeout: config.session_timeout,
        offline_done: None,
        compared: Vec::new(),
        eagerness: Eagerness::default(),
        eager: false,
        links: Vec::new(),
        link_buf: if io.desk.is_some() {
            vec![0; crate::link::READ_CHUNK]
        } else {
            Vec::new()
        },
        link_rest: None,
        last_register: None,
        overload_drops: 0,
        drops_grew_at: None,
        overload_log_at: None,
    };
    let mut fatal = None;
    loop {
        let turn = catch_unwind(AssertUnwindSafe(|| turn(&mut engine, &mut io, &mut st)));
        match turn {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => break,
            Ok(Err(e)) => {
                fatal = Some(e);
                break;
            }
            Err(payload) => {
                st.panics += 1;
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                tracing::error!(
                    "engine panicked ({what}); rebuilding the session table: sessions in flight are lost (panic #{})",
                    st.panics
                );
                engine = Engine::new(config.clone(), seed.wrapping_add(st.panics));
                match &io.routes {
                    // Only this worker's sessions are gone.
                    Some(routes) => {
                        let mine: Vec<RegEvent> = routes
                            .remove_worker(io.worker)
                            .into_iter()
                            .map(RegEvent::Unregister)
                            .collect();
                        io.registry.apply(&mine);
                    }
                    None => io.registry.clear(),
                }
                st.up = None;
                // Unregisters of the old engine's sessions: the registry was cleared above.
                st.events.clear();
                st.unregister_since = None;
                if st.panics > 1000 {
                    // Something panics on every turn: do not spin at full speed.
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| {
        close_all(&mut engine, &mut io, &mut st)
    })) {
        st.panics += 1;
        tracing::error!("engine panicked while closing its sessions: {payload:?}");
    }
    let offline = match &mut io.source {
        Source::Live(capture) => {
            let _ = capture.refresh_kernel_stats();
            None
        }
        Source::Offline(replay) => Some(replay.stats()),
    };
    if fatal.is_none() {
        if let Some(e) = offline.as_ref().and_then(|o| o.error.clone()) {
            fatal = Some(LoopError::Offline(e));
        }
    }
    let summary = Summary {
        engine: engine.stats().clone(),
        capture: io.source.stats(),
        send: *io.sender.stats(),
        panics: st.panics,
        elapsed: started.elapsed(),
        offline,
    };
    export(&engine, &io, &st);
    if let Some(t) = io.trace.as_mut() {
        t.drain(&mut engine);
        t.flush(true);
    }
    (summary, fatal)
}

/// One turn; `Ok(false)` when asked to stop.
fn turn(engine: &mut Engine, io: &mut LoopIo, st: &mut State) -> Result<bool, LoopError> {
    if io.stop.load(Ordering::SeqCst) {
        return Ok(false);
    }
    io.wake.taking();
    let now = Instant::now();
    let mut seen = TurnSeen::default();

    let n = io.connected.load(Ordering::SeqCst);
    let up = n > 0;
    if st.up != Some(n) {
        engine.set_intercept_count(now, n);
        st.up = Some(n);
    }

    for _ in 0..RECORD_BATCHES_PER_TURN {
        match io.records.try_recv() {
            // Each record at the time its link read it: it may have waited for this turn (up to
            // --record-wait), and answer times are measured from it.
            Ok(inbound) => take_inbound(
                engine,
                io.shadow.as_ref(),
                &mut st.compared,
                &mut seen,
                now,
                inbound,
            ),
            Err(_) => break,
        }
    }
    // With one worker: the links' records and verdicts, read now (each record at its read);
    // resting links whatever woke this turn.
    if st.link_rest.is_some() {
        st.links.iter_mut().for_each(|l| l.ready = true);
    }
    let linked = read_links(engine, io, st, &mut seen, now);

    // Before taking captured packets, so that a backlog found now already keeps the sessions
    // in it from starting.
    overload_turn(engine, io, st, now);
    let fed = match &mut io.source {
        Source::Live(capture) => {
            // A few batches per turn, so a flood cannot starve records, timers and sending.
            capture.drain(BATCHES_PER_TURN, |pkt| engine.handle_captured(now, pkt))
        }
        Source::Offline(replay) => {
            if up && !replay.started() {
                tracing::info!(
                    "offline: an intercept is connected; replaying {}",
                    replay.config().path.display()
                );
                replay.start(now);
            }
            let fed = if io.sender.pending() < SEND_HIGH_WATER {
                replay.feed(now, OFFLINE_PER_TURN, |pkt| {
                    engine.handle_captured(now, pkt)
                })
            } else {
                0
            };
            // --compare: both directions of the file, as read
            if let Some(tap) = &io.shadow {
                tap.packets(replay.take_tapped());
            }
            fed
        }
    };
    let now = if fed > 0 { Instant::now() } else { now };
    overload_turn(engine, io, st, now);

    if engine.poll_timeout().is_some_and(|t| t <= now) {
        engine.handle_timeout(now);
    }
    let held_before = held_units(engine.stats());
    drain_outputs(engine, io, st, now);
    seen.held_units = held_units(engine.stats()) - held_before;
    let eager = st.eagerness.turn(now, seen);
    if eager != st.eager {
        st.eager = eager;
        io.wake.set_eager(eager);
        io.hold.engine_eager(eager);
    }
    if !st.links.is_empty() {
        let waits = eager
            || seen.urgent
            || io.shadow.is_some()
            || st
                .last_register
                .is_some_and(|t| now < t + crate::workers::EAGER_HOLD);
        st.link_rest = link_rest(io.wake.delay(), waits, linked, st.link_rest, now);
    } else {
        st.link_rest = None;
    }

    if now >= st.next_report {
        st.next_report = now + REPORT_EVERY;
        if let Source::Live(capture) = &mut io.source {
            if let Err(e) = capture.refresh_kernel_stats() {
                tracing::debug!("PACKET_STATISTICS: {e}");
            }
            let drops = capture.stats().kernel_drops;
            if drops > st.last_kernel_drops {
                tracing::warn!(
                    "capture ring overflowed: the kernel dropped {} packet(s) in the last second; \
                     the engine is too slow or the ring too small (--ring-blocks, --ring-block-size)",
                    drops - st.last_kernel_drops
                );
                st.last_kernel_drops = drops;
            }
        }
        if let Some(r) = io.rate.as_mut() {
            r.tick(engine, now);
        }
        export(engine, io, st);
        log_shedding(engine, st, now);
        if let Some(t) = &io.trace {
            t.flush(false);
        }
    }

    if let Source::Offline(replay) = &io.source {
        if replay.finished() && offline_done(engine, io, st, now) {
            return Ok(false);
        }
    }

    let source_ready = match &io.source {
        Source::Live(capture) => capture.has_ready(),
        Source::Offline(replay) => io.sender.pending() < SEND_HIGH_WATER && replay.ready(now),
    };
    if source_ready || !io.records.is_empty() || st.links.iter().any(|l| l.ready) {
        // No poll this turn: the next one reads the links (they may have data meanwhile).
        st.links.iter_mut().for_each(|l| l.ready = true);
        return Ok(true);
    }
    let now = Instant::now();
    let mut deadline = now + MAX_WAIT;
    let file_due = match &io.source {
        Source::Offline(replay) => replay.next_due(),
        Source::Live(_) => None,
    };
    for t in [
        engine.poll_timeout(),
        io.sender.wakeup(),
        Some(st.next_report),
        st.unregister_since.map(|t| t + UNREGISTER_WAIT),
        file_due,
        st.link_rest,
    ]
    .into_iter()
    .flatten()
    {
        deadline = deadline.min(t);
    }
    let timeout = deadline.saturating_duration_since(now);
    if timeout.is_zero() {
        st.links.iter_mut().for_each(|l| l.ready = true);
    } else {
        let [event, timer] = io.wake.fds();
        // Bits: 0 the ring, 1 the eventfd, 2 the timer, 3.. the links (at most
        // crate::link::MAX_DIRECT_LINKS).
        // On the stack: this runs before every sleep.
        let mut fds = [event; 3 + crate::link::MAX_DIRECT_LINKS];
        let mut n = 0;
        if let Source::Live(capture) = &io.source {
            fds[n] = capture.fd();
            n += 1;
        }
        // Resting links are not polled: the next turn reads them, at the latest at the end
        // of their rest.
        let polled_links = if st.link_rest.is_some() {
            0
        } else {
            crate::link::MAX_DIRECT_LINKS
        };
        let links = st.links.iter().take(polled_links).map(EngineLink::fd);
        for fd in [event, timer].into_iter().chain(links) {
            fds[n] = fd;
            n += 1;
        }
        let polled = match &io.source {
            Source::Live(_) => sys::poll_readable(&fds[..n], timeout),
            Source::Offline(_) => sys::poll_readable(&fds[..n], timeout).map(|r| r << 1),
        };
        match polled {
            Ok(ready) => {
                st.poll_errors = 0;
                if st.link_rest.is_none() {
                    for (i, l) in st.links.iter_mut().enumerate() {
                        l.ready = ready & (1 << (3 + i)) != 0;
                    }
                }
                if ready & 4 != 0 {
                    // Records waited --record-wait: the next turn takes them.
                    io.wake.timer_fired();
                }
                if let Source::Live(capture) = &io.source {
                    if ready & 1 != 0 {
                        // Batches came: the next turn takes them.
                        capture.woken();
                    }
                }
            }
            Err(e) => {
                st.links.iter_mut().for_each(|l| l.ready = true);
                st.poll_errors += 1;
                tracing::warn!("ppoll: {e}");
                if st.poll_errors > 100 {
                    return Err(LoopError::Poll(e));
                }
                std::thread::sleep(MAX_WAIT);
            }
        }
    }
    Ok(true)
}

/// Hand the engine one batch of records or verdicts (from the inbox or a link this loop reads).
fn take_inbound(
    engine: &mut Engine,
    shadow: Option<&crate::shadow::Tap>,
    compared: &mut Vec<bool>,
    seen: &mut TurnSeen,
    now: Instant,
    inbound: Inbound,
) {
    match inbound {
        Inbound::Records {
            at,
            records: mut batch,
        } => {
            seen.records += batch.len();
            seen.urgent |= batch.iter().any(common::proto::Record::urgent);
            seen.opens_or_ends |= batch.iter().any(common::proto::Record::opens_or_ends);
            match shadow {
                Some(tap) => {
                    // --compare: the records of the copies that stand for the captured client
                    // (copy 0 and its baseline copy), filed under its address and port; asked
                    // before the engine takes the record, which may end its session
                    compared.clear();
                    for r in &mut batch {
                        let copy = engine.record_copy(r);
                        engine.handle_record(at, r);
                        compared.push(match copy {
                            None => true,
                            Some((_, None)) => false,
                            Some((_, Some(client))) => {
                                crate::shadow::file_under(r, client);
                                true
                            }
                        });
                    }
                    tap.records(at, batch, compared);
                }
                None => {
                    for r in &batch {
                        engine.handle_record(at, r);
                    }
                }
            }
        }
        Inbound::Verdicts { from, results } => {
            for (t, v) in results {
                engine.handle_registered(now, from, t, v);
            }
        }
        Inbound::Link { from, gen, event } => {
            engine.intercept_link(now, from, gen, event);
        }
    }
}

/// Take the links the control clients handed over, drop those their clients ended, and read
/// the readable ones (`crate::link`): their records and verdicts go to the engine now, each
/// record at the instant of its read. A link that fails is ended (its client logs why and
/// reconnects).
///
/// Returns whether it took a record or verdict.
fn read_links(
    engine: &mut Engine,
    io: &LoopIo,
    st: &mut State,
    seen: &mut TurnSeen,
    now: Instant,
) -> bool {
    let Some(desk) = &io.desk else { return false };
    let mut got = false;
    // The links that ended first (their acceptances are void), then the new ones (each the
    // current link of its intercept from now on), then what they read.
    let mut i = 0;
    while i < st.links.len() {
        if st.links[i].is_dead() {
            let (from, gen) = st.links.swap_remove(i).link();
            engine.intercept_link(now, from, gen, LinkEvent::Down);
            got = true;
        } else {
            i += 1;
        }
    }
    let known = st.links.len();
    desk.take(&mut st.links);
    for l in &st.links[known..] {
        let (from, gen) = l.link();
        engine.intercept_link(now, from, gen, LinkEvent::Up);
        got = true;
    }
    let mut i = 0;
    while i < st.links.len() {
        if st.links[i].is_dead() {
            let (from, gen) = st.links.swap_remove(i).link();
            engine.intercept_link(now, from, gen, LinkEvent::Down);
            continue;
        }
        if !st.links[i].ready {
            i += 1;
            continue;
        }
        let (link, buf, compared) = (&mut st.links[i], &mut st.link_buf, &mut st.compared);
        let shadow = io.shadow.as_ref();
        let take = |inbound| {
            got = true;
            take_inbound(engine, shadow, compared, seen, now, inbound);
        };
        match link.pump(buf, take) {
            Ok(more) => {
                link.ready = more;
                i += 1;
            }
            Err(e) => {
                let link = st.links.swap_remove(i);
                let (from, gen) = link.link();
                link.fail(e);
                engine.intercept_link(now, from, gen, LinkEvent::Down);
            }
        }
    }
    got
}

/// Until when the links the engine reads itself rest after a turn at `now` (`None`: they are
/// polled, and a record wakes the engine at once). Links rest for `rest` (`--record-wait`)
/// after a turn that read something from them, unless something `waits` on the records (the
/// engine is eager, a record was urgent (it opened or closed a connection, or is part of a
/// large or unfinished answer: `Record::urgent`), a Register was given lately, or
/// `--compare` times the answers), so that records that come in a stream are taken a batch per
/// wake-up, or by a wake-up that came anyway (a captured block, a timer), instead of one
/// wake-up per frame. A rest that read nothing ends at its deadline (or at once when `waits`).
/// No record waits longer than `rest` after its arrival.
fn link_rest(
    rest: Duration,
    waits: bool,
    got: bool,
    until: Option<Instant>,
    now: Instant,
) -> Option<Instant> {
    if waits || rest.is_zero() {
        return None;
    }
    if got {
        return Some(now + rest);
    }
    until.filter(|&t| now < t)
}

/// Whether the copier is behind, from what the capture holds for the engine (`backlog` of at
/// most `max` bytes) and when the kernel last dropped captured packets: behind after drops for
/// [`OVERLOAD_AFTER_DROPS`], or while over a quarter of the capture's room waits; once behind,
/// until under a sixteenth waits (so that it does not flap at the edge).
pub fn overload_of(
    backlog: usize,
    max: usize,
    drops_at: Option<Instant>,
    was: Option<OverloadReason>,
    now: Instant,
) -> Option<OverloadReason> {
    if drops_at.is_some_and(|t| now < t + OVERLOAD_AFTER_DROPS) {
        return Some(OverloadReason::KernelDrops);
    }
    if backlog.saturating_mul(4) > max {
        return Some(OverloadReason::CaptureBacklog);
    }
    if was.is_some() && backlog.saturating_mul(16) > max {
        return Some(OverloadReason::CaptureBacklog);
    }
    None
}

/// Tell the engine whether the copier keeps up (live capture only): while it is behind, no
/// new session starts, so that the sessions it copies keep the capacity and are copied whole
/// (see [`Engine::set_overload`]). Says so in the log when it starts (at most every
/// [`SHED_LOG_EVERY`]) and ends.
fn overload_turn(engine: &mut Engine, io: &LoopIo, st: &mut State, now: Instant) {
    let Source::Live(feed) = &io.source else {
        return;
    };
    // (The capture reads the ring's drop counter at once when a block says the kernel lost
    // packets: `Capture::drain`.)
    let drops = feed.stats().kernel_drops;
    if drops > st.overload_drops {
        st.overload_drops = drops;
        st.drops_grew_at = Some(now);
        // Sessions that meet a hole about now are given up there, not cut (`Engine::note_capture_loss`).
        engine.note_capture_loss(now);
    }
    let was = engine.overloaded();
    let backlog = feed.queued_bytes();
    let why = overload_of(backlog, feed.max_bytes(), st.drops_grew_at, was, now);
    if let Some(why) = why {
        // Far behind (half the capture's room waits, or packets were lost): the sessions that
        // have sent nothing yet go too, before the kernel drops packets of the others.
        if backlog.saturating_mul(2) > feed.max_bytes() || why == OverloadReason::KernelDrops {
            let n = engine.give_up_unsent(now, why);
            if n > 0 {
                tracing::debug!(
                    "far behind ({} KiB wait): gave up {n} session(s) that had sent nothing yet",
                    backlog >> 10
                );
            }
        }
    }
    if why == was {
        return;
    }
    engine.set_overload(now, why);
    let shed = engine.stats().sessions_shed_overload.clone();
    match why {
        Some(why) if was.is_none() && st.overload_log_at.is_none_or(|t| now >= t + SHED_LOG_EVERY) => {
            st.overload_log_at = Some(now);
            let what = match why {
                OverloadReason::KernelDrops | OverloadReason::Hole => "the kernel dropped captured packets".to_string(),
                OverloadReason::CaptureBacklog => {
                    format!("{} KiB of captured packets wait for the engine", feed.queued_bytes() >> 10)
                }
            };
            tracing::warn!(
                "the copier is behind ({what}): new sessions are not copied until it catches up, so the ones it copies                  stay whole (copier_sessions_shed_overload_total; {} left out so far)",
                shed.total()
            );
        }
        None => tracing::info!(
            "the copier caught up: new sessions are copied again ({} left out so far: {} for a capture backlog, {} after kernel drops, \
             {} given up at a hole the capture lost)",
            shed.total(),
            shed.capture_backlog,
            shed.kernel_drops,
            shed.hole
        ),
        _ => {}
    }
}

/// Request units sent so far that had waited over [`crate::workers::HELD`] since their capture.
fn held_units(e: &EngineStats) -> u64 {
    let first =
        crate::engine::LAG_BOUNDS.partition_point(|&b| b < crate::workers::HELD.as_secs_f64()) + 1;
    e.replay_lag.counts[first..].iter().sum()
}

/// The loop ends: reset every test connection, send the RSTs (at most [`SHUTDOWN_FLUSH`]), then
/// unregister the connections (the engine releases the Unregisters once its RSTs were taken).
fn close_all(engine: &mut Engine, io: &mut LoopIo, st: &mut State) {
    let now = Instant::now();
    let sessions = engine.session_count();
    let sent_before = engine.stats().segments_sent;
    if st.offline_done.is_some() {
        engine.close_at_capture_end(now);
    } else {
        engine.close_all(now);
    }
    let deadline = now + SHUTDOWN_FLUSH;
    let mut engine_empty = false;
    loop {
        let now = Instant::now();
        while !engine_empty && io.sender.pending() < SEND_HIGH_WATER {
            let mut buf = io.sender.buffer();
            match engine.poll_transmit(now, &mut buf) {
                Some(t) => {
                    buf.truncate(t.len);
                    record(io, &t, &buf);
                    io.sender
                        .enqueue_segment(t.tuple, t.dst, buf, t.gso_size, now);
                }
                None => {
                    io.sender.recycle(buf);
                    engine_empty = true;
                }
            }
        }
        io.sender.flush(now);
        if let Some(tap) = io.shadow.as_mut() {
            tap.flush_sent();
        }
        if (engine_empty && io.sender.pending() == 0) || now >= deadline {
            break;
        }
        // The kernel pushes back: wait for the sender's back-off.
        let wait = io.sender.wakeup().map_or(Duration::from_millis(1), |t| {
            t.saturating_duration_since(now)
        });
        std::thread::sleep(wait.clamp(Duration::from_micros(100), Duration::from_millis(20)));
    }
    drain_control(engine, io, st, Instant::now(), true);
    if sessions > 0 {
        tracing::info!(
            "closed {sessions} session(s): {} reset(s) sent, {} left unsent",
            engine.stats().segments_sent - sent_before,
            io.sender.pending()
        );
    }
}

/// Offline, the file is done: whether the loop may end (no session left that could still go
/// on, [`Engine::unfinished_sessions`], and nothing to send; or `session_timeout` since the
/// file ended). Sessions idle then end as open at the capture's end ([`close_all`]).
fn offline_done(engine: &Engine, io: &LoopIo, st: &mut State, now: Instant) -> bool {
    let done_at = *st.offline_done.get_or_insert_with(|| {
        tracing::info!(
            "offline: the file is done; waiting for {} session(s) to finish (at most {:?})",
            engine.session_count(),
            st.session_timeout
        );
        now
    });
    if engine.unfinished_sessions() == 0 && io.sender.pending() == 0 {
        let open = engine.session_count();
        if open == 0 {
            tracing::info!("offline: every session finished");
        } else {
            tracing::info!(
                "offline: every session finished or waits for what the capture does not hold \
                 ({open} open at the capture's end: every byte sent and answered)"
            );
        }
        return true;
    }
    if now >= done_at + st.session_timeout {
        tracing::warn!(
            "offline: {} session(s) still open {:?} after the file ended (--session-timeout); stopping",
            engine.session_count(),
            st.session_timeout
        );
        return true;
    }
    false
}

/// Whether the registration changes waiting go to the registry now: Registers at once (a
/// connection's first segment waits for its verdict), with every Unregister before them, in
/// order; Unregisters alone once the oldest waited [`UNREGISTER_WAIT`] or [`UNREGISTER_BATCH`]
/// of them wait.
fn publish_now(
    register: bool,
    unregister_since: Option<Instant>,
    now: Instant,
    waiting: usize,
) -> bool {
    register
        || waiting >= UNREGISTER_BATCH
        || unregister_since.is_some_and(|t| now >= t + UNREGISTER_WAIT)
}

fn drain_control(engine: &mut Engine, io: &LoopIo, st: &mut State, now: Instant, flush: bool) {
    let mut register = false;
    while let Some(ev) = engine.poll_control() {
        register |= matches!(ev, RegEvent::Register(_));
        if !register && st.unregister_since.is_none() {
            st.unregister_since = Some(now);
        }
        st.events.push(ev);
    }
    if register {
        st.last_register = Some(now);
    }
    if st.events.is_empty() {
        return;
    }
    if !(flush || publish_now(register, st.unregister_since, now, st.events.len())) {
        return;
    }
    // Routes first: a record may follow the registration as soon as the intercept has it.
    if let Some(routes) = &io.routes {
        routes.apply(io.worker, &st.events);
    }
    io.registry.apply(&st.events);
    st.events.clear();
    st.unregister_since = None;
}

/// Log the intercepts' refusals the engine reports (once per map and verdict).
fn log_refusals(engine: &mut Engine) {
    while let Some(r) = engine.poll_refusal() {
        let why = match r.verdict {
            RegVerdict::PortNotGuarded => format!(
                "its port {} is not guarded there (intercept --port)",
                r.tuple.server.port()
            ),
            RegVerdict::FamilyNotGuarded => "its IP family is not guarded there".to_string(),
            RegVerdict::LimitReached => {
                "the intercept's registration limit for this copier is reached".to_string()
            }
            v => format!("verdict {}", v.code()),
        };
        tracing::error!(
            "--map {}: the intercept refused to guard the test connections to {} (test port {}): {why} ({}); \
             these sessions are not copied (nothing is sent to the test server for them); further refusals are \
             only counted in copier_sessions_failed_total{{reason=\"registration_refused\"}}",
            r.map,
            r.tuple.server,
            r.tuple.server.port(),
            r.verdict.as_str()
        );
    }
}

/// Warn when sessions or pending SYNs were shed to stay under `--max-memory`, at most every
/// [`SHED_LOG_EVERY`].
fn log_shedding(engine: &Engine, st: &mut State, now: Instant) {
    let e = engine.stats();
    if e.sessions_failed.idle_timeout > 0 && !st.idle_timeout_logged {
        st.idle_timeout_logged = true;
        tracing::info!(
            "idle sessions end after --idle-timeout (copier_sessions_failed_total{{reason=\"idle_timeout\"}}): a \
             client that sends again starts a new session at its next request, on a new test connection; logged once"
        );
    }
    let (sessions, syns, idle) = (
        e.sessions_shed,
        e.syns_incomplete.shed,
        e.sessions_failed.idle_shed,
    );
    if (sessions, syns, idle) == st.shed_logged
        || st.shed_log_at.is_some_and(|t| now < t + SHED_LOG_EVERY)
    {
        return;
    }
    tracing::warn!(
        "over --max-memory / --max-pending-syns / --max-sessions: shed {} session(s) ({} of them idle; idle ones \
         first, then quiet longest first) and {} captured SYN(s) waiting for their handshake (oldest first) since \
         the last warning; {} byte(s) held now (copier_sessions_shed_total, copier_sessions_failed_total\
         {{reason=\"idle_shed\"|\"memory\"}}, copier_syns_incomplete_total{{reason=\"shed\"}}); a shed idle \
         session's client that sends again starts a new session at its next request",
        sessions.saturating_sub(st.shed_logged.0),
        idle.saturating_sub(st.shed_logged.2),
        syns.saturating_sub(st.shed_logged.1),
        engine.memory_used()
    );
    st.shed_logged = (sessions, syns, idle);
    st.shed_log_at = Some(now);
}

fn drain_outputs(engine: &mut Engine, io: &mut LoopIo, st: &mut State, now: Instant) {
    log_refusals(engine);
    crate::spread::log_events(engine);
    drain_control(engine, io, st, now, false);
    for _ in 0..TRANSMITS_PER_TURN {
        if io.sender.pending() >= SEND_HIGH_WATER {
            io.sender.flush(now);
            if io.sender.pending() >= SEND_HIGH_WATER {
                break; // the kernel pushes back: leave the rest in the engine
            }
        }
        let mut buf = io.sender.buffer();
        match engine.poll_transmit(now, &mut buf) {
            Some(t) => {
                buf.truncate(t.len);
                record(io, &t, &buf);
                io.sender
                    .enqueue_segment(t.tuple, t.dst, buf, t.gso_size, now);
                if io.sender.pending() >= sys::MAX_BATCH {
                    io.sender.flush(now);
                }
            }
            None => {
                io.sender.recycle(buf);
                break;
            }
        }
    }
    // Sending may have produced no new registrations, but a timer or record may have.
    drain_control(engine, io, st, now, false);
    if let Some(t) = io.trace.as_mut() {
        t.drain(engine);
    }
    io.sender.flush(now);
    if let Some(tap) = io.shadow.as_mut() {
        tap.flush_sent();
    }
}

fn export(engine: &Engine, io: &LoopIo, st: &State) {
    sys::trim_after_peak(engine.session_count());
    crate::spread::export(engine);
    crate::shaping::export(engine, Instant::now());
    m::export(&Snapshot {
        engine: engine.stats(),
        memory: engine.memory_used(),
        capture: io.source.stats(),
        send: io.sender.stats(),
        send_queue: io.sender.pending(),
        intercepts: io.connected.load(Ordering::SeqCst),
        registered: io.registry.len(),
        panics: st.panics,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(lags_ms: &[f64], ahead: u64) -> Summary {
        let mut engine = EngineStats {
            units_sent: lags_ms.len() as u64,
            units_ahead: ahead,
            ..EngineStats::default()
        };
        for &ms in lags_ms {
            engine.replay_lag.record(Duration::from_secs_f64(ms / 1e3));
        }
        Summary {
            engine,
            capture: CaptureStats::default(),
            send: SendStats::default(),
            panics: 0,
            elapsed: Duration::from_secs(2),
            offline: None,
        }
    }

    #[test]
    fn behind_on_a_backlog_or_after_drops_with_hysteresis() {
        let t0 = Instant::now();
        let max = 1600;
        let backlog = Some(OverloadReason::CaptureBacklog);
        assert_eq!(overload_of(0, max, None, None, t0), None);
        assert_eq!(
            overload_of(400, max, None, None, t0),
            None,
            "a quarter is still fine"
        );
        assert_eq!(overload_of(401, max, None, None, t0), backlog);
        // Once behind, until under a sixteenth.
        assert_eq!(overload_of(101, max, None, backlog, t0), backlog);
        assert_eq!(overload_of(100, max, None, backlog, t0), None);
        // Kernel drops: behind for OVERLOAD_AFTER_DROPS whatever the backlog.
        let drops = Some(OverloadReason::KernelDrops);
        assert_eq!(
            overload_of(0, max, Some(t0), None, t0 + Duration::from_millis(1999)),
            drops
        );
        assert_eq!(
            overload_of(0, max, Some(t0), drops, t0 + OVERLOAD_AFTER_DROPS),
            None
        );
    }

    #[test]
    fn unregisters_wait_for_a_register_or_their_deadline() {
        let t0 = Instant::now();
        // A Register goes at once, with whatever waits before it.
        assert!(publish_now(true, None, t0, 1));
        assert!(publish_now(true, Some(t0), t0, 10));
        // Unregisters alone wait...
        assert!(!publish_now(false, Some(t0), t0, 1));
        assert!(!publish_now(
            false,
            Some(t0),
            t0 + UNREGISTER_WAIT - Duration::from_millis(1),
            10
        ));
        // ... until the oldest is UNREGISTER_WAIT old, or a batch is full.
        assert!(publish_now(false, Some(t0), t0 + UNREGISTER_WAIT, 1));
        assert!(publish_now(false, Some(t0), t0, UNREGISTER_BATCH));
    }

    #[test]
    fn links_rest_after_a_read_unless_something_waits_on_the_records() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let rest = ms(2);
        // A read that took records starts (or renews) a rest of --record-wait.
        assert_eq!(link_rest(rest, false, true, None, t0), Some(t0 + rest));
        assert_eq!(
            link_rest(rest, false, true, Some(t0 + ms(1)), t0 + ms(1)),
            Some(t0 + ms(3))
        );
        // A turn that read nothing keeps the rest until its deadline, then polls again.
        assert_eq!(
            link_rest(rest, false, false, Some(t0 + rest), t0 + ms(1)),
            Some(t0 + rest)
        );
        assert_eq!(
            link_rest(rest, false, false, Some(t0 + rest), t0 + rest),
            None
        );
        assert_eq!(link_rest(rest, false, false, None, t0), None);
        // Something waits on the records, or --record-wait 0: no rest, even one under way.
        assert_eq!(link_rest(rest, true, true, Some(t0 + rest), t0), None);
        assert_eq!(link_rest(Duration::ZERO, false, true, None, t0), None);
    }

    #[test]
    fn the_summary_line_says_how_far_behind_the_copies_ran() {
        let mut lags = vec![0.3; 98];
        lags.extend([15.0, 15.0]);
        let line = summary(&lags, 40).to_string();
        assert!(
            line.contains(
                "100 requests sent (40 ahead of an answer), replay lag p50 <= 0.5 ms, p99 <= 20 ms"
            ),
            "{line}"
        );
        let two = RunSummary {
            workers: vec![summary(&[0.3], 0), summary(&[70_000.0], 1)],
            mirror: None,
        }
        .to_string();
        assert!(
            two.contains(
                "2 requests sent (1 ahead of an answer), replay lag p50 <= 0.5 ms, p99 > 60 s"
            ),
            "{two}"
        );
        assert!(
            !summary(&[], 0).to_string().contains("replay lag"),
            "no figure without requests"
        );
    }
}
