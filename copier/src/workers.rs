//! Several engine threads (`--workers N`): which worker owns which test connection, and how the
//! intercepts' records reach it.
//!
//! With N workers the capture is one `PACKET_FANOUT` group of N rings (see
//! [`crate::capture::Capture::open_fanout`]): the kernel hands every packet of one client
//! connection to the same ring (ring `(client port >> 1) % N`), so each worker owns whole
//! sessions, with its own engine and raw sender. The engines' test-side ports are disjoint
//! ([`crate::engine::PortShare`], the same split as the rings', so a copy keeps its client's
//! port), so no two workers ever register the same test 4-tuple.
//!
//! Why by port and not by the kernel's flow hash (`PACKET_FANOUT_HASH`): with a hash, a worker
//! gets connections from any port and must move those outside its port share to a random port
//! of it; measured (bench_copier, 2000 short connections/s from one client, 2 workers) that
//! cost 1.3 % of the copies, whose random ports met the test server's TIME_WAIT connections,
//! where one worker, keeping the clients' ports, copied 100 %.
//!
//! Records and registration verdicts (`Message::Registered`) come back from the intercepts on
//! the control links, which know nothing of workers.
//! Owns:
//! - [`Routes`]: the table test 4-tuple -> worker, filled by each worker from its engine's
//!   Register/Unregister events (a Register is applied before the connection's first packet
//!   leaves, so no record can precede its route). Sharded behind plain mutexes: a lookup is one
//!   short lock of one shard out of [`SHARDS`].
//! - [`RecordRouter`]: what the control clients hand records to. With one worker it passes each
//!   batch on whole (no parsing: the engine judges every record); with several it parses each
//!   record's test-side tuple, looks up its owner and sends per-worker batches. A record that
//!   does not parse, or whose tuple no worker owns (the session has just ended), is counted
//!   (`copier_records_unroutable_total{reason}`) and dropped. Verdicts go the same way
//!   ([`RecordRouter::deliver_verdicts`], by their tuple's owner; one not owned is dropped, its
//!   session having ended), in the same channel, so a worker sees them in arrival order.
//!
//! - [`Wake`]: how a worker's engine thread learns that its inbox has something, without a
//!   wake-up per record. Most records only move a test connection's acknowledgement and window
//!   state, or answer a request whose next one has not been captured yet: nothing waits on them,
//!   and the engine takes them at its next turn anyway (the next captured batch, timer, ...).
//!   So a delivery pokes the worker's eventfd at once only when it cannot wait ([`wake_now`]):
//!   it holds a verdict or an urgent record ([`Record::urgent`]: SYN, FIN or RST, part of a
//!   large answer or of one the test server is still writing, or one that does not parse), the
//!   inbox holds [`PENDING_WAKE`] records or more since the engine last took it or is over a
//!   quarter full, or the engine
//!   said it is *eager* (records lately released request units that pacing held back: a session
//!   waits on the test server, see `crate::run`). Otherwise the first such delivery arms the
//!   worker's one-shot timerfd for `--record-wait` ([`RECORD_DELAY`] by default, at most
//!   [`MAX_RECORD_WAIT`]; zero: every delivery pokes the eventfd), so no record waits longer.
//!   Every record carries the instant its link read it ([`Inbound::Records`]`::at`), and the
//!   engine takes that as the record's time (answer times, the quiet rule, `--compare`), not
//!   the time it handled it.
//!
//! - [`InterceptHold`]: what the copier lets its intercepts do with the same records before
//!   they leave the test host: hold them up to `--record-wait` (an intercept whose Hello has
//!   `FEATURE_RECORD_WAIT` then rests its NFQUEUE reads, and its writes, between batches), and
//!   those of a connection opening or ending (SYN, FIN, RST) up to `--open-wait` (an
//!   intercept whose Hello has `FEATURE_OPEN_WAIT`), or none at all while any engine is eager
//!   or with `--compare` (records are timed at their read). Each engine says when its
//!   eagerness changes; each control client tells its intercept every change
//!   (`Message::RecordWait`, `Message::OpenWait`).
//!
//! Invariants: a route names the worker whose engine registered the tuple; a worker only
//! removes its own routes. Every inbox is bounded (the control client waits on a full one,
//! which pushes back over TCP to the intercept) and every send to an inbox is followed by
//! either a poke of that worker's eventfd or its timer being armed (or already armed and not
//! yet taken back by the engine, which disarms it only before it empties the inbox): a record
//! waits at most `--record-wait` for its engine.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::proto::{Record, RegVerdict};
use tokio::sync::{mpsc, watch};

use crate::engine::RegEvent;
use crate::sys::{EventFd, TimerFd};

/// Number of shards of [`Routes`] (a power of two).
pub const SHARDS: usize = 16;

/// Most workers the copier runs.
pub const MAX_WORKERS: usize = 64;

/// The owner of every registered test tuple (see the module doc).
#[derive(Debug)]
pub struct Routes {
    hasher: RandomState,
    shards: Box<[Mutex<HashMap<FourTuple, u16>>]>,
}

impl Default for Routes {
    fn default() -> Self {
        Routes::new()
    }
}

impl Routes {
    /// An empty table.
    pub fn new() -> Routes {
        Routes {
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    fn shard(&self, t: &FourTuple) -> MutexGuard<'_, HashMap<FourTuple, u16>> {
        let i = self.hasher.hash_one(t) as usize & (SHARDS - 1);
        // A panic while holding a shard leaves it consistent (single insert/remove).
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Apply `worker`'s registration changes in order. An Unregister removes the route only if
    /// it is `worker`'s.
    pub fn apply(&self, worker: u16, events: &[RegEvent]) {
        for ev in events {
            match *ev {
                RegEvent::Register(t) => {
                    self.shard(&t).insert(t, worker);
                }
                RegEvent::Unregister(t) => {
                    let mut s = self.shard(&t);
                    if s.get(&t) == Some(&worker) {
                        s.remove(&t);
                    }
                }
            }
        }
    }

    /// The worker owning `t`, if any.
    pub fn owner(&self, t: &FourTuple) -> Option<u16> {
        self.shard(t).get(t).copied()
    }

    /// Remove every route of `worker` (its engine was rebuilt) and return their tuples.
    pub fn remove_worker(&self, worker: u16) -> Vec<FourTuple> {
        let mut gone = Vec::new();
        for s in self.shards.iter() {
            let mut s = s.lock().unwrap_or_else(|p| p.into_inner());
            s.retain(|t, w| {
                let mine = *w == worker;
                if mine {
                    gone.push(*t);
                }
                !mine
            });
        }
        gone
    }

    /// Routes in the table.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Records dropped by [`route_records`] because they could not be routed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unroutable {
    /// The record's headers do not parse.
    pub malformed: u64,
    /// No worker owns the record's tuple.
    pub unknown: u64,
}

common::reasons! {
    /// Why a record reached no worker: the `reason` label of `copier_records_unroutable_total`.
    enum UnroutableReason;
    /// Its headers do not parse.
    Malformed => malformed,
    /// No worker owns the record's tuple.
    UnknownTuple => unknown_tuple,
}

/// Sort `records` into `out[worker]` by the owner of their test-side tuple; count the rest.
pub fn route_records(routes: &Routes, records: Vec<Record>, out: &mut [Vec<Record>]) -> Unroutable {
    let mut lost = Unroutable::default();
    for r in records {
        let Ok(t) = r.tuple() else {
            lost.malformed += 1;
            continue;
        };
        match routes.owner(&t).map(usize::from) {
            Some(w) if w < out.len() => out[w].push(r),
            _ => lost.unknown += 1,
        }
    }
    lost
}

/// What a control link hands an engine thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inbound {
    /// Records of the test server's answers.
    Records {
        /// When the control link read them: the records' time for the engine.
        at: Instant,
        /// The records, in the order the intercept sent them.
        records: Vec<Record>,
    },
    /// Intercept `from`'s link of generation `gen` came up, ended, or says whether its rules
    /// are in force (`crate::engine::Engine::intercept_link`); to every worker, in order with
    /// the link's verdicts.
    Link {
        /// Which intercept (its `--intercept` index).
        from: u16,
        /// The link's generation (`crate::control::LinkGens`).
        gen: u32,
        /// What happened.
        event: crate::engine::LinkEvent,
    },
    /// Intercept `from`'s verdicts on registered tuples (`Message::Registered`).
    Verdicts {
        /// Which intercept (its `--intercept` index).
        from: u16,
        /// The verdicts.
        results: Vec<(FourTuple, RegVerdict)>,
    },
}

/// Where one worker's records go.
#[derive(Clone, Debug)]
pub struct Inbox {
    /// The worker's bounded channel of records and verdicts.
    pub records: mpsc::Sender<Inbound>,
    /// How the worker is woken.
    pub wake: Arc<Wake>,
}

/// The longest a record waits for its engine thread when it was not worth a wake-up of its
/// own (see the module doc), and the default `--record-wait`. An engine that is busy takes it
/// much sooner, at its next turn. Short against the times a record's handling can change:
/// `--ack-delay` (40 ms, counted from the record's reading), the answer quiet rule (50 ms),
/// retransmission timers (>= 200 ms); and records keep the time they were read. What can
/// wait is only the end of a small answer, or an ACK ([`common::proto::Record::urgent`]).
/// 20 ms against 2 ms: with keep-alive clients thinking 4 ms, the intercept's CPU per request
/// fell by 60 % and the copier's by a third, the copy lag unchanged (BENCHMARKS.md).
pub const RECORD_DELAY: Duration = Duration::from_millis(20);

/// Largest `--record-wait` used: well under a test server's shortest retransmission timeout
/// (200 ms) and the copy lag an operator sees.
pub const MAX_RECORD_WAIT: Duration = Duration::from_millis(20);

/// Records queued since the engine last took its inbox at which a delivery wakes it at once
/// (well under a full inbox, so a burst never waits for [`RECORD_DELAY`] behind a full channel).
pub const PENDING_WAKE: usize = 128;

/// Whether a delivery wakes the engine thread at once (`true`) or may wait for its next turn,
/// at most [`RECORD_DELAY`] (`false`): see the module doc. `pending` counts the records queued
/// since the engine last took its inbox, this delivery's included.
#[must_use]
pub fn wake_now(eager: bool, urgent: bool, pending: usize) -> bool {
    eager || urgent || pending >= PENDING_WAKE
}

/// Whether an inbox is over a quarter full (counted in batches).
fn filling(tx: &mpsc::Sender<Inbound>) -> bool {
    tx.capacity() * 4 < tx.max_capacity() * 3
}

/// How the control links wake one worker's engine thread (see the module doc): its eventfd for
/// what cannot wait, its one-shot timer for records that can wait up to [`RECORD_DELAY`], and
/// what the engine publishes about itself.
#[derive(Debug)]
pub struct Wake {
    event: EventFd,
    /// Set after each write of `event`: the engine reads it (a system call) only then, not at
    /// every turn (with one worker, nothing writes it for most of them).
    poked: AtomicBool,
    timer: TimerFd,
    /// Set by the engine: every record is worth a wake-up now.
    eager: AtomicBool,
    /// The timer is armed for records the engine has not taken yet.
    armed: AtomicBool,
    /// Records queued since the engine last took its inbox.
    pending: AtomicUsize,
    /// How long a record nothing waits on may wait for the engine (`--record-wait`); zero: every
    /// delivery wakes the engine at once.
    delay: Duration,
    /// With one worker: how long the records and verdicts of a connection opening or ending may
    /// wait for the engine (`--open-wait`, at most `delay`; see `run::link_rest`).
    open_delay: Duration,
}

impl Wake {
    /// A worker's wake-up, not eager, with the default [`RECORD_DELAY`].
    pub fn new() -> std::io::Result<Wake> {
        Wake::with_delay(RECORD_DELAY)
    }

    /// A worker's wake-up whose records nothing waits on may wait up to `delay` (zero: none
    /// waits; every delivery wakes the engine).
    pub fn with_delay(delay: Duration) -> std::io::Result<Wake> {
        Wake::with_delays(delay, Duration::ZERO)
    }

    /// [`Wake::with_delay`], and with one worker the records and verdicts of a connection
    /// opening or ending may wait up to `open_delay` (at most `delay`; zero: none waits).
    pub fn with_delays(delay: Duration, open_delay: Duration) -> std::io::Result<Wake> {
        Ok(Wake {
            event: EventFd::new()?,
            poked: AtomicBool::new(false),
            timer: TimerFd::new()?,
            eager: AtomicBool::new(false),
            armed: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            delay,
            open_delay: open_delay.min(delay),
        })
    }

    /// Wake the engine thread now (a verdict, a link change, a stop).
    pub fn notify(&self) {
        // The write first, then the flag: an engine that finds the flag set reads the write;
        // one that looks between the two finds the eventfd readable and looks again.
        self.event.notify();
        self.poked.store(true, Ordering::SeqCst);
    }

    /// Control side, after `n` records were put in the inbox (`urgent`: one of them cannot
    /// wait, [`Record::urgent`]; `filling`: the inbox is over a quarter full, so a burst of
    /// small batches does not wait behind a full channel): wake the engine now, or make sure
    /// the timer runs.
    pub fn queued(&self, n: usize, urgent: bool, filling: bool) {
        let pending = self.pending.fetch_add(n, Ordering::Relaxed) + n;
        if self.delay.is_zero()
            || filling
            || wake_now(self.eager.load(Ordering::Relaxed), urgent, pending)
        {
            self.notify();
        } else if !self.armed.swap(true, Ordering::SeqCst) {
            self.timer.set(self.delay);
        }
    }

    /// Engine side, at the start of a turn, before it empties its inbox: forget the pokes and
    /// the timer (what they were for is about to be taken).
    pub fn taking(&self) {
        self.pending.store(0, Ordering::Relaxed);
        if self.armed.swap(false, Ordering::SeqCst) {
            // Disarms, and forgets an expiry not read. A delivery that armed it again since the
            // swap put its records in the inbox before, so the engine takes them now.
            self.timer.set(Duration::ZERO);
        }
        if self.poked.swap(false, Ordering::SeqCst) {
            self.event.drain();
        }
    }

    /// Engine side, after `poll` said the timer is readable: make it not readable, without
    /// disturbing a delivery that armed it again meanwhile.
    pub fn timer_fired(&self) {
        self.timer.clear();
    }

    /// Engine side: whether every record is worth a wake-up now.
    pub fn set_eager(&self, eager: bool) {
        self.eager.store(eager, Ordering::Relaxed);
    }

    /// How long a record nothing waits on may wait for the engine (`--record-wait`).
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// How long the records and verdicts of a connection opening or ending may wait for the
    /// engine, with one worker (`--open-wait`, at most [`Wake::delay`]).
    pub fn open_delay(&self) -> Duration {
        self.open_delay
    }

    /// Whether the engine said it is eager.
    pub fn eager(&self) -> bool {
        self.eager.load(Ordering::Relaxed)
    }

    /// The eventfd and the timer, for `poll`.
    pub fn fds(&self) -> [std::os::fd::BorrowedFd<'_>; 2] {
        [self.event.fd(), self.timer.fd()]
    }
}

/// How long an intercept may hold this copier's records, in microseconds: those that nothing
/// waits on (`Message::RecordWait`) and those that open or end a connection
/// (`Message::OpenWait`, to an intercept with `FEATURE_OPEN_WAIT`). Zero: not at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hold {
    /// Records that nothing waits on (`--record-wait`).
    pub record: u32,
    /// Records of a connection opening or ending, SYN, FIN or RST (`--open-wait`, at most
    /// `record`).
    pub open: u32,
}

/// What the copier tells its intercepts about holding records (see the module doc): `calm`
/// while no engine is eager, zero (send every record at once) while one is.
#[derive(Debug)]
pub struct InterceptHold {
    calm: Hold,
    eager: AtomicUsize,
    tx: watch::Sender<Hold>,
}

impl InterceptHold {
    /// Records may wait up to `calm` (capped at [`MAX_RECORD_WAIT`]; zero: never) while no
    /// engine is eager.
    /// The records of a connection opening or ending may wait up to `open` (at most `calm`).
    pub fn new(calm: Duration, open: Duration) -> InterceptHold {
        let calm = calm.min(MAX_RECORD_WAIT);
        let micros = |d: Duration| u32::try_from(d.as_micros()).unwrap_or(0);
        let calm = Hold {
            record: micros(calm),
            open: micros(open.min(calm)),
        };
        InterceptHold {
            calm,
            eager: AtomicUsize::new(0),
            tx: watch::Sender::new(calm),
        }
    }

    /// An engine became eager (`true`) or stopped being eager: call on every change, and
    /// only then.
    pub fn engine_eager(&self, eager: bool) {
        if eager {
            self.eager.fetch_add(1, Ordering::SeqCst);
        } else {
            self.eager.fetch_sub(1, Ordering::SeqCst);
        }
        // Under the channel's lock, so the last change of several engines' wins.
        self.tx.send_if_modified(|v| {
            let want = if self.eager.load(Ordering::SeqCst) > 0 {
                Hold::default()
            } else {
                self.calm
            };
            std::mem::replace(v, want) != want
        });
    }

    /// How long the intercepts may hold records now, and every change of it.
    pub fn watch(&self) -> watch::Receiver<Hold> {
        self.tx.subscribe()
    }
}

/// How long the engine stays eager ([`Wake::set_eager`]) after records last released request
/// units by themselves.
pub const EAGER_HOLD: Duration = Duration::from_millis(100);

/// How long a request unit waited between its capture and its first send for [`Eagerness`] to
/// call it held back (a unit sent in the turn that captured it waits far less).
pub const HELD: Duration = Duration::from_millis(1);

/// The engine's side of the wake decision: whether records lately released request units that
/// pacing held back (so a session waits on the test server's answers and every record is worth
/// a wake-up). Told after each turn what the turn did; the evidence is a turn that handled
/// records, none of them opening, closing or resetting a connection
/// ([`Record::opens_or_ends`]: a SYN-ACK releases the requests that waited for the handshake,
/// and such records wake the engine anyway), and sent request units that had waited over
/// [`HELD`] since their capture, or records that opened the test server's window for bytes
/// that waited for room in it (a large upload whose copy runs behind: at a rest per window it
/// crawled); it holds for [`EAGER_HOLD`]. Records that are urgent for
/// their size (part of a large answer, [`Record::urgent`]) do not stop it: a copy of 100 KB
/// answers running behind is released by such records, and without eagerness the tails of
/// its answers waited for the intercept's and the links' rests (issue 32 item 2). Liberal on purpose: a timer or
/// a captured packet in the same turn may have been what released them, but a false eager
/// only costs the wake-ups this saves, while a missed one delays paced copies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Eagerness {
    until: Option<Instant>,
}

/// What one turn of the engine did, for [`Eagerness::turn`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TurnSeen {
    /// Records handled.
    pub records: usize,
    /// One of them was urgent ([`Record::urgent`]).
    pub urgent: bool,
    /// One of them opened, closed or reset a connection ([`Record::opens_or_ends`]).
    pub opens_or_ends: bool,
    /// One of them was urgent for what it carries, not for opening or ending a connection:
    /// part of a large answer or of one the test server is still writing.
    pub pressing: bool,
    /// Request units sent for the first time that had waited over [`HELD`] since their
    /// capture.
    pub held_units: u64,
    /// Records that opened the test server's window for bytes that waited for room in it
    /// (`EngineStats::window_releases`): a copy that outruns that window (a large upload
    /// running behind) sends its next bytes as each such record comes.
    pub window_releases: u64,
}

impl TurnSeen {
    /// Note one record handled (its count and what it is).
    pub fn note(&mut self, r: &Record) {
        let opens_or_ends = r.opens_or_ends();
        let for_flow = r.urgent_for_flow();
        self.records += 1;
        self.urgent |= opens_or_ends || for_flow;
        self.opens_or_ends |= opens_or_ends;
        self.pressing |= for_flow && !opens_or_ends;
    }
}

impl Eagerness {
    /// Note a turn at `now`; returns whether the engine is eager now.
    pub fn turn(&mut self, now: Instant, seen: TurnSeen) -> bool {
        if seen.window_releases > 0
            || (seen.records > 0 && !seen.opens_or_ends && seen.held_units > 0)
        {
            self.until = Some(now + EAGER_HOLD);
        }
        self.eager(now)
    }

    /// Whether the engine is eager at `now`.
    pub fn eager(&self, now: Instant) -> bool {
        self.until.is_some_and(|t| now < t)
    }
}

/// The engine thread is gone (shutting down).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the engine thread is gone")]
pub struct InboxClosed;

/// What the control clients deliver records through (see the module doc).
#[derive(Clone, Debug)]
pub struct RecordRouter {
    inboxes: Arc<[Inbox]>,
    routes: Arc<Routes>,
}

impl RecordRouter {
    /// A router over one inbox per worker, `routes` telling who owns what.
    ///
    /// # Panics
    /// If `inboxes` is empty.
    pub fn new(inboxes: Vec<Inbox>, routes: Arc<Routes>) -> RecordRouter {
        assert!(!inboxes.is_empty(), "a router needs a worker");
        RecordRouter {
            inboxes: inboxes.into(),
            routes,
        }
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.inboxes.len()
    }

    /// Wake every worker (a link came up or went down).
    pub fn wake_all(&self) {
        for i in self.inboxes.iter() {
            i.wake.notify();
        }
    }

    /// Deliver one batch of records, read at `at`, to the workers that own them, waiting while
    /// an inbox is full; wake each now or arm its timer ([`Wake::queued`]).
    pub async fn deliver(&self, at: Instant, records: Vec<Record>) -> Result<(), InboxClosed> {
        if let [only] = &*self.inboxes {
            let (n, urgent) = (records.len(), records.iter().any(Record::urgent));
            only.records
                .send(Inbound::Records { at, records })
                .await
                .map_err(|_| InboxClosed)?;
            only.wake.queued(n, urgent, filling(&only.records));
            return Ok(());
        }
        let mut out: Vec<Vec<Record>> = vec![Vec::new(); self.inboxes.len()];
        let lost = route_records(&self.routes, records, &mut out);
        for (reason, n) in [
            (UnroutableReason::Malformed, lost.malformed),
            (UnroutableReason::UnknownTuple, lost.unknown),
        ] {
            if n > 0 {
                ::metrics::counter!(crate::metrics::names::RECORDS_UNROUTABLE_TOTAL, "reason" => reason.label())
                    .increment(n);
            }
        }
        for (inbox, batch) in self.inboxes.iter().zip(out) {
            if batch.is_empty() {
                continue;
            }
            let (n, urgent) = (batch.len(), batch.iter().any(Record::urgent));
            inbox
                .records
                .send(Inbound::Records { at, records: batch })
                .await
                .map_err(|_| InboxClosed)?;
            inbox.wake.queued(n, urgent, filling(&inbox.records));
        }
        Ok(())
    }

    /// Tell every worker what became of intercept `from`'s link `gen` (after everything the
    /// link delivered before), waiting while an inbox is full.
    pub async fn deliver_link(
        &self,
        from: u16,
        gen: u32,
        event: crate::engine::LinkEvent,
    ) -> Result<(), InboxClosed> {
        for inbox in self.inboxes.iter() {
            inbox
                .records
                .send(Inbound::Link { from, gen, event })
                .await
                .map_err(|_| InboxClosed)?;
            inbox.wake.notify();
        }
        Ok(())
    }

    /// Deliver intercept `from`'s registration verdicts to the workers that own their tuples
    /// (all to the one worker when there is one), waiting while an inbox is full. A verdict on
    /// a tuple no worker owns (its session ended) is dropped.
    pub async fn deliver_verdicts(
        &self,
        from: u16,
        results: Vec<(FourTuple, RegVerdict)>,
    ) -> Result<(), InboxClosed> {
        if let [only] = &*self.inboxes {
            only.records
                .send(Inbound::Verdicts { from, results })
                .await
                .map_err(|_| InboxClosed)?;
            only.wake.notify();
            return Ok(());
        }
        let mut out: Vec<Vec<(FourTuple, RegVerdict)>> = vec![Vec::new(); self.inboxes.len()];
        for (t, v) in results {
            if let Some(w) = self
                .routes
                .owner(&t)
                .map(usize::from)
                .filter(|&w| w < out.len())
            {
                out[w].push((t, v));
            }
        }
        for (inbox, results) in self.inboxes.iter().zip(out) {
            if results.is_empty() {
                continue;
            }
            inbox
                .records
                .send(Inbound::Verdicts { from, results })
                .await
                .map_err(|_| InboxClosed)?;
            inbox.wake.notify();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
