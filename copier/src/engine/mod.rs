//! The copier's session engine: a sans-IO table of client sessions that turns captured client
//! packets into TCP sessions toward the test server, kept consistent with the test server's own
//! answers as the intercept reports them (records).
//!
//! # Driving it
//! [`Engine`] owns no socket, no clock and no global RNG. The I/O layer calls, in a loop:
//! 1. [`Engine::handle_captured`] for every captured client packet, [`Engine::handle_record`]
//!    for every record from an intercept, [`Engine::handle_registered`] for every verdict of an
//!    intercept on a registered tuple (`Message::Registered`), [`Engine::set_intercept_count`]
//!    (or [`Engine::set_intercept_connected`]) when a control connection comes or goes, and
//!    [`Engine::handle_timeout`] once [`Engine::poll_timeout`] has passed;
//! 2. then [`Engine::poll_control`] until `None`, sending each event to the intercepts,
//!    [`Engine::poll_refusal`] until `None`, logging each, and only then
//!    [`Engine::poll_transmit`] until `None`, sending each packet. A connection's packets are
//!    held back until an intercept accepted its `Register` (`handle_registered`), so no
//!    packet of a tuple leaves before the intercept guards it; a tuple every connected
//!    intercept refused fails its session (`registration_refused`) with nothing sent; a tuple
//!    an intercept says another copier holds (`RegVerdict::HeldByOther`) is dropped unsent and
//!    the copy opened again on another tuple of the share (`tuple_moves`).
//!
//! # Handshakes first
//! A captured SYN starts no session: it waits in a small pending table (its ISN and timestamp,
//! [`PENDING_SYN_COST`] each, at most `max_pending_syns`, oldest shed when full, forgotten
//! `syn_timeout` after its last retransmission) until the client's handshake ACK (ACK without
//! SYN, seq = ISN + 1) or first data is captured; only then does the test session start. A
//! spoofed SYN flood never reaches the test server (`EngineStats::syns_incomplete`). Sessions
//! caught mid-stream start at their first request boundary; see "Unproven sessions" for what
//! either costs before it proves itself.
//!
//! # Unproven sessions
//! A session is *proven* once the client's own packets show a request of its answered online:
//! a segment with data, then a later segment whose ACK number is past the one that data
//! carried (the online server sent bytes after it). Until then it is *unproven*
//! (`EngineStats::sessions_unproven`), whether it began with a handshake (whose ACK a blind
//! spoofer can forge: the copier does not see the online server's ISN) or mid-stream. A
//! session caught mid-stream is a *candidate* while it waits for its request boundary. Any
//! ACK or data segment of an unknown tuple makes one, so a flood of spoofed segments from
//! random ports makes one per packet; they cost little for long:
//! - a candidate, or an unproven session that is idle, ends `unproven_timeout` after it began
//!   (`unproven_timeout`; an idle one may resume at the client's next request, as after
//!   `idle_timeout`); an unproven session with a request under way waits for it first;
//! - when `max_sessions` is full, room goes in this order (`make_room`): candidates, idle
//!   unproven, idle proven, then busy unproven sessions (`unproven_shed`, `idle_shed`), each
//!   quiet longest first; a new candidate takes only another candidate's room, and a busy proven
//!   session is never shed for a new one (the new one is dropped: `table_full`). So a flood of
//!   lone spoofed segments churns among its own candidates and a real handshake always finds
//!   room while any unproven session holds one. `max_memory` sheds in the same order.
//!
//! What the proof does not prove: the copier captures only the client's direction, so it
//! cannot check an ACK number against what the online server really sent. A spoofer who sends
//! a consistent data segment and a later larger ACK on each tuple passes; a blind flood of lone
//! segments (one or a few per tuple, random numbers) does not, and an ACK number that only
//! goes back or stays never proves anything. Every unproven session and candidate that ends so
//! is counted in `EngineStats::unproven_ended`.
//!
//! After reconnecting to an intercept, re-send a `Register` for every tuple of
//! [`Engine::registered`].
//!
//! # Stopping
//! When the copier stops, call [`Engine::close_all`], then [`Engine::poll_transmit`] until
//! `None`, sending every packet (the RSTs that leave the test server no half-open connection),
//! then [`Engine::poll_control`] until `None`, sending every event: the `Unregister`s of the
//! reset connections come out only once their RSTs were taken from `poll_transmit`, so the
//! intercept keeps dropping the test server's last answers until the RSTs have gone.
//!
//! # How a session is carried
//! The engine originates its own segments rather than patching captured ones. Toward the test
//! server it uses the client's own sequence numbers (the client's ISN, or for a session caught
//! mid-stream the byte before its first request boundary), and acknowledges what the test
//! server sent as records arrive. Client bytes are reassembled, cut into request units at each
//! change of the client's ACK number, and released unit by unit (pacing) as the test server
//! acknowledges and answers them, an answer being as long as the online one was (the client's
//! ACK numbers tell) or ending in a pause. See `session`, `answer`, `stream` and `conn` for
//! the rules.
//!
//! # Copies and sampling
//! One planner decides the copies of every captured session: a [`shaper::Shaper`], built from
//! the profile (`EngineConfig::profile`, `--profile`) or, without one, from the flags
//! `copies`, `sample_percent` and `client_ip` as the trivial profile [`shaper::FlagPlan`]
//! ([`EngineConfig::planner`]; same seed in every worker, so every worker plans alike). At a
//! session's first packet `Shaper::on_session_to` (clock: `now` minus the first `now` the
//! engine saw) gives its copies, none when the sample leaves it out; copy `k` goes from the
//! plan's client address, and from its port when free in `by_test` and the port share (else a
//! random port of the share, else the first free one): no two live test tuples ever collide,
//! whatever N, and with port shares none of another worker's either (nor, with `--fleet`,
//! another copier's of the fleet: the share lies within the copier's run, `FleetShare`). A copy that finds no free
//! tuple does not start (`sessions_no_tuple`). The flags' plan keeps the client's address (or
//! the `k`-th pool address after its pick, `ClientIpPool::pick`) and port; its sample, a keyed
//! hash of the seed and the client's address and port that does not change in time, is asked
//! for every packet (`Shaper::samples_out`: every packet of a kept session and none of the
//! others); a profile's factor changes in time, so its sample is decided once, in
//! `on_session_to`. A copy's planner state ends when the engine removes the copy.
//!
//! Each copy is a `session` of its own with its own test 4-tuple, connections, pacing and
//! failures, fed the same captured packets; the copies share the captured bytes (`chunk`: a
//! 10 MB upload copied 100 times is held once, plus what the slowest copy still needs), so
//! `max_memory` bounds what is really held while `per_session_cap` bounds each copy's backlog.
//! A planner that gates requests (`Shaper::gates`: a profile's think time and ON/OFF periods)
//! gives each copy a `gate`, and its sessions go lock-step; the flags' plan gates nothing, and
//! its sessions pace with the adaptive window.
//!
//! # Idle sessions
//! A session whose captured bytes were all sent and answered, with nothing outstanding and the
//! client's connection open (a keep-alive connection between requests: `Session::idle`) has no
//! timer: `session_timeout` bounds only the wait for something outstanding, and an idle session
//! ends by `idle_timeout` if one is set, when the client or the test server closes, or when room
//! is needed: over `max_memory`, and when a new session finds `max_sessions` taken, the idle
//! sessions go first, quiet longest first (`idle_shed`). A session ended idle leaves its
//! captured session's group at once, and once its group's last copy is gone the engine keeps
//! where its client stream stood (the client's next sequence number, [`RESUME_COST`] against
//! `max_memory`, at most `max_sessions` of them, the oldest forgotten first, and first when
//! shedding): the client's next data at exactly that number starts a new session there, as at a
//! request boundary (`Start::Resume`; its old test connection is reset and lingers on its own
//! tuple, the new one takes another port); a pure ACK (a keep-alive probe) does not use it up;
//! any other packet forgets it and starts a session caught mid-stream as usual. A proven
//! session whose test side failed (`refused`, `retransmit_limit`, `reconnect_limit`: the test
//! server down or restarting) while the client's connection stays open is kept the same way
//! (not HTTP/2 or WebSocket), with one more condition: the resuming data must ack more than the
//! last unit captured (`Resume::after_ack`), so that it starts a new request, never the rest of
//! the one that failed.
//!
//! Invariants kept here: `by_key` maps each captured 4-tuple to the group of live copy
//! sessions for it (the copies not yet removed); `Tuples::by_test` maps every registered test
//! tuple to the session that owns it and counts them per client address and target (`shared`); the meter counts the captured bytes any session still holds, and
//! `memory_used` adds [`SESSION_COST`] per session and [`PENDING_SYN_COST`] per pending SYN;
//! every `pending` entry has an entry with its `at` in `pending_fifo`; `closing` counts the
//! sessions in the table that are done and linger;
//! every live session with a deadline has a timer entry at or before it (`Session::armed`).
//!
//! # Where the engine's code lives
//! `impl Engine` is split by concern: this file holds the table (slots, `new`, removal,
//! compaction, `with_session` and `after_op`) and passes the sessions' events on
//! (`drain_events`; the events in `event`); `input` the captured packets and records (and
//! new sessions), `syn` the SYN table, `groups` the copy groups and the resume points,
//! `register` the intercepts' links and verdicts, `shed` the overload and the room-making,
//! `timers` the timer heap, `transmit` the transmit poll and stopping, and `readout` the
//! other polls and getters.

mod answer;
mod chunk;
mod config;
mod conn;
mod edit;
mod event;
mod gate;
mod groups;
mod h2edit;
mod hash;
mod input;
mod keymemo;
mod map;
mod pkt;
mod readout;
mod register;
pub mod rules;
mod session;
mod shared;
mod shed;
mod slot;
mod stamp;
mod stats;
mod stream;
mod syn;
mod targets;
mod timers;
mod trace;
mod transmit;

#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::time::Instant;

use common::flow::FourTuple;
use common::proto::RegVerdict;
use common::seq::SeqNum;

pub use config::{
    ConfigError, EngineConfig, FleetShare, PortShare, DEFAULT_MAX_SESSIONS, DEFAULT_PACE_WINDOW,
    FEW_SHARE_PORTS, GSO_MAX_PAYLOAD, MAX_PACE_WINDOW, MIN_SHARE_PORTS,
};
pub use edit::h2_edit_for_fuzz;
pub use map::PortMap;
pub use rules::{Rules, RulesError};
pub use shaper::{ClientIpPool, IpRange, PoolParseError};
pub use stats::RequestCounts;
pub use stats::{
    DropCounts, DropReason, EngineStats, FailCounts, FailReason, LagHistogram, OverloadReason,
    ShedCounts, SynCounts, SynEnd, UnprovenCounts, UnprovenEnd, LAG_BOUNDS,
};

use chunk::Meter;
use config::Params;
use event::Event;
pub use hash::FastHash;
use keymemo::KeyMemo;
use session::{Phase, Session};
use shared::{Planner, Shared, SlotRef, Tuples};
use stamp::Stamp;
pub use targets::{
    parse_targets, HealthConfig, MapTargets, TargetEvent, TargetStats, Targets, WeightedTarget,
    MAX_WEIGHT,
};
pub use trace::UnitSent;

/// A change of the set of test tuples the intercepts must answer for: what the engine emits
/// ([`Engine::poll_control`]) and what the copier's registry applies and its control clients
/// send (`crate::control::Registry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegEvent {
    /// Send `Register { tuples: [t] }` (before any packet of `t` goes out).
    Register(FourTuple),
    /// Send `Unregister { tuples: [t] }`.
    Unregister(FourTuple),
}

/// What became of an intercept's control link ([`Engine::intercept_link`]). Each link that
/// comes up has a generation, one more than its intercept's last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkEvent {
    /// The link is up and its snapshot of registrations sent: the verdicts that follow are
    /// this link's; every acceptance of an earlier link of the intercept is void.
    Up,
    /// The link ended: its acceptances are void.
    Down,
    /// The intercept says whether its firewall rules are in force (`Message::Rules`): while
    /// they are not, its acceptances do not count.
    Rules(bool),
}

/// An intercept refused to guard a test tuple, and with it the session it belonged to (see
/// [`Engine::handle_registered`]); reported once per map and verdict by
/// [`Engine::poll_refusal`] (later ones are only counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The map of the session.
    pub map: PortMap,
    /// The refused test tuple.
    pub tuple: FourTuple,
    /// The intercept's verdict.
    pub verdict: RegVerdict,
}

/// What one session costs against `max_memory` besides the bytes it buffers: its slot, one
/// test connection, its entries in the engine's tables (`by_key`, `by_test`, `ports_used`,
/// the timer heap) and in the I/O layer's (the registry, each control client's set of sent
/// tuples, the worker routes), hash tables counted at twice their entry size (their load
/// factor and growth by doubling).
pub const SESSION_COST: usize = std::mem::size_of::<Slot>()
    + std::mem::size_of::<conn::Conn>()
    + 2 * (std::mem::size_of::<u32>()
        + std::mem::size_of::<u32>()
        + std::mem::size_of::<(FourTuple, SlotRef)>()
        + std::mem::size_of::<((IpAddr, std::net::SocketAddr), u32)>()
        + 4 * std::mem::size_of::<FourTuple>()
        + std::mem::size_of::<(FourTuple, u16)>())
    + std::mem::size_of::<Reverse<(Stamp, u32, u32)>>();

/// Most captured sessions remembered as left out for overload (`Engine::set_overload`); past
/// it the oldest is forgotten, and its later packets could start a mid-stream session (which
/// copies only whole requests after a request boundary).
pub const MAX_SHED_KEYS: usize = 65_536;

/// Most sessions remembered as ended after the client's FIN (`Engine::closed_keys`); past it
/// the oldest is forgotten, and a late segment of its client could start a mid-stream session.
pub const MAX_CLOSED_KEYS: usize = 65_536;

/// How long before a hole showed in a session's stream a capture loss may have been noticed
/// for the hole to count as lost by the capture (`Engine::note_capture_loss`): the loss is
/// noticed when the capture reads the block after it, and the engine meets the hole when it
/// gets to that block, up to the capture queue's backlog later.
pub const LOSS_BEFORE_HOLE: std::time::Duration = std::time::Duration::from_secs(10);

/// What one captured SYN waiting for its handshake costs against `max_memory`: its table
/// entry (twice, as above) and two places in the expiry queue.
pub const PENDING_SYN_COST: usize = 2 * std::mem::size_of::<(FourTuple, PendingSyn)>()
    + 2 * std::mem::size_of::<(Instant, FourTuple)>();

/// What remembering where a session that ended idle stood costs against `max_memory`: its
/// entry (twice, as above) and its place in the queue of them.
pub const RESUME_COST: usize = 3 * std::mem::size_of::<(FourTuple, Resume)>();

/// Where a captured session that ended while its client's connection stayed open can resume
/// (see "Idle sessions").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    /// The client's next sequence number: the resuming data starts exactly there.
    pub next: SeqNum,
    /// After a test-side failure: the resuming data must ack more than this (a new request
    /// unit); `None` after an idle end (every unit was answered).
    pub after_ack: Option<SeqNum>,
}

/// A captured SYN waiting for the client's handshake ACK (or first data) before its test
/// session starts: what the test SYN needs of it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingSyn {
    isn: SeqNum,
    tsval: Option<u32>,
    /// When its SYN was last seen (a retransmission refreshes it).
    at: Instant,
}

/// How a new session starts.
#[derive(Debug, Clone, Copy)]
enum Start {
    /// From the client's SYN (its ISN and timestamp), the handshake having completed.
    Syn { isn: SeqNum, tsval: Option<u32> },
    /// From a packet caught mid-stream.
    Midstream,
    /// From the first data of a captured session that ended idle, at the point its client
    /// stream stood (see "Idle sessions").
    Resume,
}

/// The shaper's state, for the metrics ([`Engine::shaper_stats`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShaperStats {
    /// The multiplication factor in force (profile factor x load x share; the flags' copies).
    pub factor: f64,
    /// Copies the planner holds (live copy sessions).
    pub copies_live: usize,
    /// Virtual users in use, when the profile has pools.
    pub users_active: Option<usize>,
    /// ON/OFF sources ON now, when the profile gates.
    pub sources_on: Option<usize>,
    /// Request units held by a gate now (think time or an OFF period).
    pub held: usize,
    /// Request units the gates decided on so far.
    pub gated_units: u64,
    /// The sum of their holds (release minus online arrival).
    pub gate_delay: std::time::Duration,
}

/// One packet to send, written into the caller's buffer by [`Engine::poll_transmit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// The test-side connection it belongs to.
    pub tuple: FourTuple,
    /// IP destination (the test server).
    pub dst: IpAddr,
    /// Length of the IP packet in the buffer.
    pub len: usize,
    /// A super-segment (`EngineConfig::gso`): the payload of each segment it stands for (the
    /// connection's MSS), to be cut by the kernel, the NIC or the sender; 0 for a plain packet.
    pub gso_size: u16,
    /// The copy index of its session and the captured client (`None` for the RSTs of
    /// [`Engine::close_all`]): what `--record` keeps and indexes.
    pub copy: Option<(u16, std::net::SocketAddr)>,
}

/// The session engine. See the module documentation for the calling order.
#[derive(Debug)]
pub struct Engine {
    sh: Shared,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// The captured sessions: each entry the slot of a group's lead copy, found by that
    /// copy's `key` (see [`Slot::next`]). 4 bytes an entry: the key is the session's own.
    by_key: hashbrown::HashTable<u32>,
    /// The hasher of `by_key`.
    key_hash: FastHash,
    timers: BinaryHeap<Reverse<(Stamp, u32, u32)>>,
    /// `timers` is purged of entries nothing needs when it grows past this (see
    /// `Engine::purge_timers`).
    purge_timers_at: usize,
    ready: VecDeque<SlotRef>,
    due: Vec<(Stamp, u32, u32)>,
    /// The members of a group while a captured packet goes to each.
    members: Vec<u32>,
    /// A handle on `sh.meter` for the payload being dispatched (taken and put back, so that a
    /// packet costs no reference count change).
    payload_meter: Option<Meter>,
    /// RSTs of [`Engine::close_all`] not yet taken by `poll_transmit`.
    shutdown_tx: VecDeque<(FourTuple, Vec<u8>)>,
    /// Tuples to unregister once `shutdown_tx` is empty.
    shutdown_unreg: Vec<FourTuple>,
    /// Captured SYNs waiting for their handshake (see "Handshakes first").
    pending: HashMap<FourTuple, PendingSyn, FastHash>,
    /// Why the copier is behind, while it is (`set_overload`): no session starts meanwhile.
    overload: Option<OverloadReason>,
    /// Captured sessions left out because the copier was behind when they started: their later
    /// packets are dropped too (`drops.overload`), so a session is copied whole or not at all.
    /// Forgotten at a new SYN on the tuple, after `session_timeout`, or past [`MAX_SHED_KEYS`]
    /// (oldest first).
    shed_keys: KeyMemo,
    /// Captured sessions that ended after the client's FIN, for `close_linger`: a segment of
    /// the client's after the copy ended (its ACK of the online server's FIN, a FIN sent
    /// again) is dropped as `after_close` instead of starting a mid-stream session, which would
    /// wait to synchronise and count as live on its test server until it timed out. Forgotten
    /// at a new SYN on the tuple, or past [`MAX_CLOSED_KEYS`] (oldest first).
    closed_keys: KeyMemo,
    /// Where the client stream of each captured session that ended idle stood (its next
    /// sequence number), so that its next request starts a session at once (see "Idle
    /// sessions"); at most `max_sessions`, the oldest forgotten first (`resume_fifo`, stale
    /// entries skipped).
    resumes: HashMap<FourTuple, Resume, FastHash>,
    resume_fifo: VecDeque<(FourTuple, SeqNum)>,
    /// `(last SYN seen, key)` in arrival order: the expiry queue of `pending` (stale entries,
    /// refreshed or gone, are skipped; compacted when it outgrows `pending`).
    pending_fifo: VecDeque<(Instant, FourTuple)>,
    /// Registration changes for the intercepts, in order (`poll_control`; from the sessions'
    /// `Event::Registered` and `Event::Unregistered`).
    control: VecDeque<RegEvent>,
    /// Intercepts connected now (how many refusals fail a registration).
    intercepts: usize,
    /// Refusals to report, and the (map, verdict) pairs reported already.
    refusals: VecDeque<Refusal>,
    refusals_seen: Vec<(PortMap, RegVerdict)>,
    /// Sessions in the table that are done and only linger (`Session::closing_counted`).
    closing: usize,
    /// The test servers of each map, their weights and health (`targets`).
    targets: Targets,
    /// Intercepts guarding each test server address (`EngineConfig::intercepts_for`).
    intercepts_for: Vec<(IpAddr, usize)>,
    /// The current link generation of each intercept (`intercept_link`).
    link_gens: Vec<(u16, u32)>,
    /// With a run trace: the copies' identities and the rows to take (`trace`).
    trace: Option<trace::Tags>,
    /// Below this many sessions the tables are compacted (see [`Engine::compact`]).
    compact_below: usize,
    /// The generation new slots start at: above that of every slot the table dropped.
    gen_floor: u32,
}

#[derive(Debug)]
struct Slot {
    gen: u32,
    /// The next copy of the same captured session in its group ([`NO_SLOT`] for the last, and
    /// for a session in no group): a group is its lead's `by_key` entry and this list, in copy
    /// order (in the slot's padding: no byte more a session).
    next: u32,
    s: Option<Session>,
}

/// No slot: the end of a group's list.
const NO_SLOT: u32 = u32::MAX;

impl Engine {
    /// An engine with no session. `seed` drives every random choice (ports of new
    /// connections, the client address hash), so the same inputs give the same outputs.
    #[must_use]
    pub fn new(config: EngineConfig, seed: u64) -> Engine {
        let hash = FastHash::new(seed);
        let p = Params::new(&config);
        let meter = Meter::default();
        let mut stats = EngineStats {
            copies_requested: u64::from(config.copies.max(1)),
            ..EngineStats::default()
        };
        if let Some(r) = &config.rules {
            stats.requests.names = r.counter_names();
            stats.requests.rules = vec![0; stats.requests.names.len()];
        }
        // The same seed in every worker: the same sessions get the same copies.
        let plan = Planner::new(config.planner(seed));
        let sh = Shared::new(
            p,
            stats,
            Tuples::new(hash, seed ^ config.port_salt, config.port_share.clamped()),
            plan,
            meter.clone(),
            config.trace,
        );
        Engine {
            sh,
            slots: Vec::new(),
            free: Vec::new(),
            by_key: hashbrown::HashTable::new(),
            key_hash: hash,
            timers: BinaryHeap::new(),
            purge_timers_at: timers::PURGE_MIN,
            ready: VecDeque::new(),
            due: Vec::new(),
            members: Vec::new(),
            payload_meter: Some(meter),
            shutdown_tx: VecDeque::new(),
            shutdown_unreg: Vec::new(),
            pending: HashMap::with_hasher(hash),
            overload: None,
            shed_keys: KeyMemo::new(hash, MAX_SHED_KEYS, config.session_timeout),
            closed_keys: KeyMemo::new(hash, MAX_CLOSED_KEYS, config.close_linger),
            pending_fifo: VecDeque::new(),
            resumes: HashMap::with_hasher(hash),
            resume_fifo: VecDeque::new(),
            control: VecDeque::new(),
            intercepts: 1,
            refusals: VecDeque::new(),
            refusals_seen: Vec::new(),
            closing: 0,
            targets: Targets::new(&config.maps, &config.spread, config.health),
            intercepts_for: config.intercepts_for.clone(),
            link_gens: Vec::new(),
            trace: config.trace.then(trace::Tags::default),
            compact_below: 0,
            gen_floor: 0,
        }
    }

    /// Compact the tables once the sessions fell to a quarter of the slab (checked at the end
    /// of each input and timer run, where no slot index is held).
    #[inline]
    fn maybe_compact(&mut self) {
        if self.session_count() < self.compact_below {
            self.compact();
        }
    }

    /// Give back the room of sessions that are gone, so that the memory comes down after a
    /// peak (see "Engine memory per live session" in BENCHMARKS.md): the slab loses its free
    /// tail (and reuses its lowest free slots first from now on, so the tail empties), the hash
    /// tables, the timer heap and the queues shrink to what they hold. Runs when the sessions
    /// fell below a quarter of the slab, then again only when they halved once more (or the
    /// slab grew and fell again): amortised O(1) per session.
    fn compact(&mut self) {
        let keep = self
            .slots
            .iter()
            .rposition(|x| x.s.is_some())
            .map_or(0, |i| i + 1);
        for x in &self.slots[keep..] {
            // A dropped slot's generation is already past every reference to it.
            self.gen_floor = self.gen_floor.max(x.gen);
        }
        self.slots.truncate(keep);
        self.slots.shrink_to_fit();
        self.free.retain(|&i| (i as usize) < keep);
        // Highest first: `pop` reuses the lowest free slot, so the slab's tail empties.
        self.free.sort_unstable_by(|a, b| b.cmp(a));
        self.free.shrink_to_fit();
        let (slots, h) = (&self.slots, self.key_hash);
        self.by_key.shrink_to_fit(|&i| key_hash(slots, h, i));
        self.sh.tuples.shrink_to_fit();
        self.pending.shrink_to_fit();
        self.resumes.shrink_to_fit();
        self.resume_fifo.shrink_to_fit();
        self.pending_fifo.shrink_to_fit();
        self.purge_timers();
        self.timers.shrink_to_fit();
        self.ready.shrink_to_fit();
        self.due = Vec::new();
        self.members = Vec::new();
        self.control.shrink_to_fit();
        self.sh.events.shrink_to_fit();
        self.compact_below = self.session_count() / 2;
    }

    fn live(&self, slot: SlotRef) -> bool {
        self.slots
            .get(slot.idx as usize)
            .is_some_and(|x| x.gen == slot.gen && x.s.is_some())
    }

    fn with_session(&mut self, idx: u32, f: impl FnOnce(&mut Session, &mut Shared)) {
        let Some(s) = self.slots.get_mut(idx as usize).and_then(|x| x.s.as_mut()) else {
            return;
        };
        f(s, &mut self.sh);
        self.after_op(idx);
    }

    /// Pass the sessions' events on, in order (see `event`): registrations to the control
    /// output, answer times to the test servers' figures, units sent to the trace's rows,
    /// sessions given up at a lost hole to the overload counters and the shed keys.
    fn drain_events(&mut self) {
        if self.sh.events.is_empty() {
            return;
        }
        let mut q = self.sh.events.take();
        for e in q.drain(..) {
            match e {
                Event::Registered(t) => self.control.push_back(RegEvent::Register(t)),
                Event::Unregistered(t) => self.control.push_back(RegEvent::Unregister(t)),
                Event::Started { at, slot, server } => {
                    self.targets.on_started(at, server, slot);
                }
                Event::Ended { at, slot, failed } => {
                    self.targets.on_outcome(at, slot, failed);
                }
                Event::Answered { at, server, took } => {
                    self.targets.on_answer_time(at, server, took);
                }
                Event::UnitSent { at, slot, answer } => {
                    if let Some(tags) = self.trace.as_mut() {
                        tags.note(at, slot, answer, &mut self.sh.plan);
                    }
                }
                Event::ShedAtHole { at, key } => {
                    if !self.shed_keys.holds(at, &key) {
                        self.sh
                            .stats
                            .sessions_shed_overload
                            .add(OverloadReason::Hole, 1);
                    }
                    self.remember_shed(at, key);
                }
            }
        }
        self.sh.events.restore(q);
    }

    /// After any change to a session: pass its events on (an outcome before `on_ended`
    /// forgets which server the copy was on), then drop it when finished, else re-arm and
    /// mark it ready.
    fn after_op(&mut self, idx: u32) {
        self.drain_events();
        let Some(s) = self.slots[idx as usize].s.as_mut() else {
            return;
        };
        if std::mem::take(&mut s.detach) {
            // Ended idle: the client's next packet starts a new session (see `Session::detach`).
            let (key, started) = (s.key, std::mem::take(&mut s.group_started));
            let r = Resume {
                next: s.client_next(),
                after_ack: s.resume_after.take(),
            };
            self.group_leave(&key, idx, started);
            if self.group_of(&key).is_none() {
                self.remember_resume(key, r);
            }
        }
        let Some(s) = self.slots[idx as usize].s.as_mut() else {
            return;
        };
        if s.removable() {
            self.remove(idx);
            return;
        }
        if s.phase == Phase::Done && !s.closing_counted {
            s.closing_counted = true;
            self.closing += 1;
            // Done: no longer a load on its test server (it only lingers).
            let slot = s.slot;
            self.targets.on_ended(slot);
        }
        if !s.in_ready {
            s.in_ready = true;
            self.ready.push_back(s.slot);
        }
        self.arm(idx);
    }

    /// Ends the planner's copies of a session the engine does not start.
    fn end_plans(&mut self, plans: &[shaper::CopyPlan]) {
        for p in plans {
            self.sh.plan.shaper.end_session(p.session);
        }
    }

    fn remove(&mut self, idx: u32) {
        // The rows of this slot's copy are taken before the slot can be reused.
        self.drain_events();
        let slot = &mut self.slots[idx as usize];
        let Some(s) = slot.s.take() else { return };
        if !s.proven {
            self.sh.stats.sessions_unproven = self.sh.stats.sessions_unproven.saturating_sub(1);
        }
        if s.closing_counted {
            self.closing = self.closing.saturating_sub(1);
        }
        if let Some(id) = s.plan_id.get() {
            self.sh.plan.shaper.end_session(id);
        }
        slot.gen = slot.gen.wrapping_add(1);
        self.free.push(idx);
        self.targets.on_ended(s.slot);
        for c in s.cur.iter().chain(s.old.iter()) {
            self.sh.unindex(c.tuple);
            self.sh.events.push(Event::Unregistered(c.tuple));
        }
        self.group_leave(&s.key, idx, s.group_started);
        if s.client_closed() && self.group_of(&s.key).is_none() {
            // The last copy of a session the client closed: its late segments start nothing
            // (for `close_linger` after the session's last segment).
            self.closed_keys.insert(s.last_activity.at(), s.key);
        }
    }
}

/// The `by_key` hash of the entry led by slot `i` (its session's key; never asked of an empty
/// slot, which no entry names).
fn key_hash(slots: &[Slot], h: FastHash, i: u32) -> u64 {
    slots[i as usize]
        .s
        .as_ref()
        .map_or(0, |s| h.hash_one(s.key))
}
