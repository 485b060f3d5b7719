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
//! rest after a read, see `link_rest`), until the engine's next timer, the sender's back-off,
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

mod drain;
mod overload;
mod summary;
mod tap;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::capture::CaptureStats;
use crate::control::{RegEvent, Registry};
use crate::engine::{Engine, EngineConfig, EngineStats, LinkEvent};
use crate::feed::Feed;
use crate::link::{EngineLink, LinkDesk};
use crate::metrics as m;
use crate::offline::Replay;
use crate::send::RawSender;
use crate::sys;
use crate::workers::{Eagerness, Inbound, Routes, TurnSeen, Wake};

use drain::{close_all, drain_outputs, export, offline_done};
use overload::{log_shedding, overload_turn};

pub use overload::overload_of;
pub use summary::{RunSummary, Summary};
pub use tap::{CompareTap, Tap, Taps};

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
    /// The optional features that tap the loop (the run trace `--trace`, the closed loop on
    /// the rate `--target-rate`, the archive `--record`, the comparison `--compare`: see
    /// [`Tap`]).
    pub taps: Taps,
    /// With one worker: where the control clients hand over their links' read sides, which
    /// this loop then reads itself (`crate::link`); `None`: records come through `records`.
    pub desk: Option<Arc<LinkDesk>>,
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
    io.taps.end(&mut engine);
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
    let releases_before = engine.stats().window_releases;

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
            Ok(inbound) => take_inbound(engine, &mut io.taps, &mut seen, now, inbound),
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
            io.taps.replayed(replay);
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
    seen.window_releases = engine.stats().window_releases - releases_before;
    let eager = st.eagerness.turn(now, seen);
    if eager != st.eager {
        st.eager = eager;
        io.wake.set_eager(eager);
        io.hold.engine_eager(eager);
    }
    if !st.links.is_empty() {
        let opening = seen.opens_or_ends
            || st
                .last_register
                .is_some_and(|t| now < t + crate::workers::EAGER_HOLD);
        let rest = if opening {
            io.wake.open_delay()
        } else {
            io.wake.delay()
        };
        let waits = eager || seen.pressing || io.taps.time_answers();
        st.link_rest = link_rest(rest, waits, linked, st.link_rest, now);
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
        io.taps.tick(engine, now);
        export(engine, io, st);
        log_shedding(engine, st, now);
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
    taps: &mut Taps,
    seen: &mut TurnSeen,
    now: Instant,
    inbound: Inbound,
) {
    match inbound {
        Inbound::Records { at, records: batch } => {
            batch.iter().for_each(|r| seen.note(r));
            // --compare asks the engine about each record before it takes it (which may end
            // its session)
            taps.records(engine, at, batch);
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
    io: &mut LoopIo,
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
        let (link, buf, taps) = (&mut st.links[i], &mut st.link_buf, &mut io.taps);
        let take = |inbound| {
            got = true;
            take_inbound(engine, taps, seen, now, inbound);
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
/// polled, and a record wakes the engine at once). Links rest for `rest` after a turn that read
/// something from them, unless something `waits` on the records (the engine is eager, a record
/// is part of a large or unfinished answer (`Record::urgent` for what it carries), or
/// `--compare` times the answers), so that records that come in a stream are taken a batch per
/// wake-up, or by a wake-up that came anyway (a captured block, a timer), instead of one
/// wake-up per frame. `rest` is `--record-wait`, or the shorter `--open-wait` while a
/// connection opens or ends (a Register was given lately, a record was a SYN, FIN or RST): a
/// verdict, a SYN-ACK or a FIN that waits delays only the start or the end of its own copied
/// connection, never another's requests, and with many short connections the round trips of
/// each (verdict, handshake, answer, close) otherwise wake the engine one by one. A rest that
/// read nothing ends at its deadline, or sooner when `rest` became shorter (at once when
/// `waits`). No record waits longer than `rest` after its arrival.
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
    until.filter(|&t| now < t).map(|t| t.min(now + rest))
}

/// Request units sent so far that had waited over [`crate::workers::HELD`] since their capture.
fn held_units(e: &EngineStats) -> u64 {
    let first =
        crate::engine::LAG_BOUNDS.partition_point(|&b| b < crate::workers::HELD.as_secs_f64()) + 1;
    e.replay_lag.counts[first..].iter().sum()
}

#[cfg(test)]
mod tests;
