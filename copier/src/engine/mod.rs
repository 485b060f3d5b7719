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
//! Each copy is a [`session`] of its own with its own test 4-tuple, connections, pacing and
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

mod answer;
mod chunk;
mod config;
mod conn;
mod edit;
mod gate;
mod h2edit;
mod hash;
mod map;
mod pkt;
pub mod rules;
mod session;
mod shared;
mod stamp;
mod stats;
mod stream;
mod targets;
mod trace;

#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::BuildHasher;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::proto::{Record, RegVerdict};
use common::seq::SeqNum;
use common::wire::TcpFlags;

pub use config::{
    ConfigError, EngineConfig, FleetShare, PortShare, DEFAULT_MAX_SESSIONS, DEFAULT_PACE_WINDOW,
    FEW_SHARE_PORTS, GSO_MAX_PAYLOAD, MAX_PACE_WINDOW, MIN_SHARE_PORTS,
};
pub use edit::RequestCounts;
pub use h2edit::edit_for_fuzz as h2_edit_for_fuzz;
pub use map::PortMap;
pub use rules::{Rules, RulesError};
pub use shaper::{ClientIpPool, IpRange, PoolParseError};
pub use stats::{
    DropCounts, DropReason, EngineStats, FailCounts, FailReason, LagHistogram, OverloadReason,
    ShedCounts, SynCounts, SynEnd, UnprovenCounts, UnprovenEnd, LAG_BOUNDS,
};

use chunk::{Meter, Payload};
use config::Params;
use gate::Gate;
use hash::FastHash;
use pkt::{parse_captured, parse_record, Captured};
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
    /// (oldest first; with the FIFO of when each was left out).
    shed_keys: HashMap<FourTuple, Instant, FastHash>,
    shed_fifo: VecDeque<(Instant, FourTuple)>,
    /// Where the client stream of each captured session that ended idle stood (its next
    /// sequence number), so that its next request starts a session at once (see "Idle
    /// sessions"); at most `max_sessions`, the oldest forgotten first (`resume_fifo`, stale
    /// entries skipped).
    resumes: HashMap<FourTuple, Resume, FastHash>,
    resume_fifo: VecDeque<(FourTuple, SeqNum)>,
    /// `(last SYN seen, key)` in arrival order: the expiry queue of `pending` (stale entries,
    /// refreshed or gone, are skipped; compacted when it outgrows `pending`).
    pending_fifo: VecDeque<(Instant, FourTuple)>,
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
        let mut sh = Shared::new(
            p,
            stats,
            Tuples::new(hash, seed ^ config.port_salt, config.port_share.clamped()),
            plan,
            meter.clone(),
        );
        sh.trace_units = config.trace.then(Vec::new);
        Engine {
            sh,
            slots: Vec::new(),
            free: Vec::new(),
            by_key: hashbrown::HashTable::new(),
            key_hash: hash,
            timers: BinaryHeap::new(),
            ready: VecDeque::new(),
            due: Vec::new(),
            members: Vec::new(),
            payload_meter: Some(meter),
            shutdown_tx: VecDeque::new(),
            shutdown_unreg: Vec::new(),
            pending: HashMap::with_hasher(hash),
            overload: None,
            shed_keys: HashMap::with_hasher(hash),
            shed_fifo: VecDeque::new(),
            pending_fifo: VecDeque::new(),
            resumes: HashMap::with_hasher(hash),
            resume_fifo: VecDeque::new(),
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

    /// One captured IP packet (v4 or v6, starting at the IP header), client -> online service.
    /// Packets not matching any map, or of a session the sample leaves out, are counted and
    /// ignored. Never panics on any input.
    pub fn handle_captured(&mut self, now: Instant, packet: &[u8]) {
        self.captured(now, packet);
        self.maybe_compact();
    }

    fn captured(&mut self, now: Instant, packet: &[u8]) {
        self.sh.stats.packets_captured += 1;
        self.sh.plan.clock(now);
        let Ok(c) = parse_captured(packet) else {
            self.sh.stats.drops.malformed += 1;
            return;
        };
        let Some(map) = self.sh.p.map_for(c.key.server.into()).copied() else {
            self.sh.stats.drops.no_map += 1;
            return;
        };
        let syn = c.hdr.has(TcpFlags::SYN) && !c.hdr.has(TcpFlags::ACK);
        if self.sh.plan.shaper.samples_out(c.key.client.into()) {
            self.sh.stats.drops.not_sampled += 1;
            if syn {
                self.sh.stats.sessions_sampled_out += 1;
            }
            return;
        }
        if let Some(lead) = self.group_of(&c.key) {
            let replace = syn && {
                let mut members = std::mem::take(&mut self.members);
                self.group_members(lead, &mut members);
                self.members = members;
                // A SYN starts a new session unless it repeats the one a copy is carrying.
                !self.members.iter().any(|&i| {
                    self.slots[i as usize]
                        .s
                        .as_ref()
                        .is_some_and(|s| s.phase == Phase::Active && s.isn == c.hdr.seq)
                })
            };
            if !replace {
                self.dispatch_to(now, &c, lead);
                self.check_memory(now);
                return;
            }
            for i in 0..self.members.len() {
                let idx = self.members[i];
                let closed = self.slots[idx as usize]
                    .s
                    .as_ref()
                    .is_some_and(|s| s.phase == Phase::Active && s.client_closed());
                // The old copy's plan goes: the new session gets copies of its own.
                if let Some(id) = self.slots[idx as usize]
                    .s
                    .as_mut()
                    .and_then(|s| s.plan_id.take())
                {
                    self.sh.plan.shaper.end_session(id);
                }
                if !closed {
                    // A new connection from the same client port while the old one was live:
                    // the old copy ends (its closing connections linger on, detached from the
                    // key).
                    self.with_session(idx, now, |s, sh| {
                        s.finish(sh, now, Some(FailReason::Superseded))
                    });
                }
                // Else the client had closed (FIN or RST) and reuses its port: the old copy
                // goes on carrying what it captured, detached from the key.
            }
            self.group_detach(&c.key);
        }
        if self.shed_keys.contains_key(&c.key) {
            if syn {
                // The client starts over on this port: a new session, copied if the copier
                // keeps up by the end of its handshake.
                self.shed_keys.remove(&c.key);
            } else {
                self.sh.stats.drops.overload += 1;
                return;
            }
        }
        if syn {
            self.hold_syn(now, &c);
            self.check_memory(now);
            return;
        }
        if let Some(why) = self.overload {
            // Behind: no session starts (whole or not at all); a pending SYN goes with it.
            if self.pending.remove(&c.key).is_some() {
                self.sh.stats.syns_pending = self.pending.len() as u64;
            }
            self.shed_for_overload(now, c.key, why);
            return;
        }
        if let Some(p) = self.pending.get(&c.key).copied() {
            let h = &c.hdr;
            if h.has(TcpFlags::RST) {
                self.pending.remove(&c.key);
                self.sh.stats.syns_incomplete.reset += 1;
                self.sh.stats.drops.no_session += 1;
            } else if h.has(TcpFlags::ACK) && h.seq == p.isn.add(1) {
                // The handshake completed (its ACK, or first data if the ACK was not seen).
                self.pending.remove(&c.key);
                let baseline = self.sh.p.baseline_for(&map);
                self.new_session(
                    now,
                    &c,
                    map,
                    baseline,
                    Start::Syn {
                        isn: p.isn,
                        tsval: p.tsval,
                    },
                );
                self.dispatch(now, &c);
            } else {
                // Not of this handshake (a stray segment): no session to carry it.
                self.sh.stats.drops.no_session += 1;
            }
            self.sh.stats.syns_pending = self.pending.len() as u64;
            self.check_memory(now);
            return;
        }
        let baseline = self.sh.p.baseline_for(&map);
        if let Some(&r) = self.resumes.get(&c.key) {
            let h = &c.hdr;
            let plain = h.has(TcpFlags::ACK) && !h.has(TcpFlags::FIN) && !h.has(TcpFlags::RST);
            if plain && c.payload.is_empty() {
                // A keep-alive probe or a window update: the session starts at the next data.
                self.sh.stats.drops.no_session += 1;
                return;
            }
            self.resumes.remove(&c.key);
            if plain && h.seq == r.next && r.after_ack.is_none_or(|a| h.ack.gt(a)) {
                self.new_session(now, &c, map, baseline, Start::Resume);
                self.dispatch(now, &c);
                self.check_memory(now);
                return;
            }
        }
        self.new_session(now, &c, map, baseline, Start::Midstream);
        self.check_memory(now);
    }

    /// The I/O layer's view of whether the copier keeps up: `Some(why)` while it is behind
    /// (captured packets wait long for the engine, or the kernel dropped some), `None` once it
    /// caught up. While behind, no new session starts: a captured session whose handshake
    /// completes (or that is caught mid-stream) meanwhile is not copied at all, and its later
    /// packets are dropped too (`EngineStats::sessions_shed_overload`, `drops.overload`);
    /// sessions already being copied go on, so the capacity left goes to them.
    pub fn set_overload(&mut self, now: Instant, why: Option<OverloadReason>) {
        self.overload = why;
        self.expire_shed(now);
    }

    /// The copier is far behind: give up every session none of whose bytes has left yet
    /// (newly started ones, whose data still waits in the capture behind the others'), failed
    /// as `overload` and counted in `sessions_shed_overload` too, so that the engine gets
    /// through the backlog sooner (their later packets are dropped as `after_close`) and the
    /// sessions it is copying keep their bytes. Nothing of a session given up reached the test
    /// server. Returns how many were given up.
    pub fn give_up_unsent(&mut self, now: Instant, why: OverloadReason) -> usize {
        let idle: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&i| {
                self.slots[i as usize]
                    .s
                    .as_ref()
                    .is_some_and(Session::sent_nothing)
            })
            .collect();
        let mut keys = Vec::with_capacity(idle.len());
        for &i in &idle {
            if let Some(s) = self.slots[i as usize].s.as_ref() {
                keys.push(s.key);
            }
            self.with_session(i, now, |s, sh| {
                s.finish(sh, now, Some(FailReason::Overload))
            });
        }
        // Their later packets are dropped as the left-out sessions' are: a session given up
        // and gone from the table must not start again mid-stream, nor be counted twice.
        keys.sort_unstable();
        keys.dedup();
        for k in keys {
            self.sh.stats.sessions_shed_overload.add(why, 1);
            self.remember_shed(now, k);
        }
        idle.len()
    }

    /// The capture lost packets about `now` (the kernel dropped some: the ring overflowed).
    /// A session being copied whose stream meets a hole that began up to [`LOSS_BEFORE_HOLE`]
    /// after this (or any time before it) is given up at the hole once it is `GAP_WAIT` old
    /// instead of resuming past it: its test connection is reset before any byte after the hole
    /// is sent, so the test server's application never takes a cut request, and the captured
    /// session is counted in `sessions_shed_overload` (`hole`, once however many copies it
    /// had) and left out from then on, as a session shed at its start is.
    pub fn note_capture_loss(&mut self, now: Instant) {
        self.sh.capture_loss_at = Some(now);
    }

    /// Whether the copier is behind (`set_overload`).
    pub fn overloaded(&self) -> Option<OverloadReason> {
        self.overload
    }

    fn shed_for_overload(&mut self, now: Instant, key: FourTuple, why: OverloadReason) {
        self.sh.stats.drops.overload += 1;
        self.sh.stats.sessions_shed_overload.add(why, 1);
        self.remember_shed(now, key);
    }

    /// Remember `key` as left out (see `shed_keys`).
    fn remember_shed(&mut self, now: Instant, key: FourTuple) {
        self.expire_shed(now);
        while self.shed_keys.len() >= MAX_SHED_KEYS {
            let Some((_, k)) = self.shed_fifo.pop_front() else {
                break;
            };
            self.shed_keys.remove(&k);
        }
        self.shed_keys.insert(key, now);
        self.shed_fifo.push_back((now, key));
    }

    /// Forget the sessions left out longer than `session_timeout` ago (entries of keys
    /// forgotten or left out again since are skipped).
    fn expire_shed(&mut self, now: Instant) {
        let timeout = self.sh.p.session_timeout;
        while let Some(&(at, k)) = self.shed_fifo.front() {
            if now.saturating_duration_since(at) < timeout {
                break;
            }
            self.shed_fifo.pop_front();
            if self.shed_keys.get(&k) == Some(&at) {
                self.shed_keys.remove(&k);
            }
        }
        if self.shed_keys.is_empty() && self.shed_fifo.capacity() > 1024 {
            self.shed_fifo = VecDeque::new();
            self.shed_keys.shrink_to_fit();
        }
    }

    /// Keep a captured SYN until its handshake completes (a retransmission refreshes it, a
    /// new ISN replaces it); the oldest goes when `max_pending_syns` are waiting.
    fn hold_syn(&mut self, now: Instant, c: &Captured<'_>) {
        let h = &c.hdr;
        let entry = PendingSyn {
            isn: h.seq,
            tsval: h.opts.ts.map(|t| t.0),
            at: now,
        };
        match self.pending.insert(c.key, entry) {
            Some(old) if old.isn != h.seq => self.sh.stats.syns_incomplete.replaced += 1,
            Some(_) => {}
            None => {
                while self.pending.len() > self.sh.p.max_pending_syns {
                    if !self.shed_oldest_syn() {
                        break;
                    }
                }
            }
        }
        self.pending_fifo.push_back((now, c.key));
        if self.pending_fifo.len() > 2 * self.pending.len() + 64 {
            let pending = &self.pending;
            self.pending_fifo
                .retain(|(at, k)| pending.get(k).is_some_and(|p| p.at == *at));
        }
        self.sh.stats.syns_pending = self.pending.len() as u64;
    }

    /// Remember where the client stream of `key`, whose last copy ended idle, stood.
    fn remember_resume(&mut self, key: FourTuple, r: Resume) {
        let next = r.next;
        self.resumes.insert(key, r);
        self.resume_fifo.push_back((key, next));
        while self.resumes.len() > self.sh.p.max_sessions {
            if !self.forget_oldest_resume() {
                break;
            }
        }
        if self.resume_fifo.len() > 2 * self.resumes.len() + 64 {
            let resumes = &self.resumes;
            self.resume_fifo
                .retain(|(k, n)| resumes.get(k).is_some_and(|r| r.next == *n));
        }
    }

    /// Forget the oldest place remembered for a session that ended idle. `false` if none is.
    fn forget_oldest_resume(&mut self) -> bool {
        while let Some((k, n)) = self.resume_fifo.pop_front() {
            if self.resumes.get(&k).is_some_and(|r| r.next == n) {
                self.resumes.remove(&k);
                return true;
            }
        }
        false
    }

    /// Forget the oldest pending SYN (counted as shed). `false` if none is left.
    fn shed_oldest_syn(&mut self) -> bool {
        while let Some((at, k)) = self.pending_fifo.pop_front() {
            if self.pending.get(&k).is_some_and(|p| p.at == at) {
                self.pending.remove(&k);
                self.sh.stats.syns_incomplete.shed += 1;
                self.sh.stats.syns_pending = self.pending.len() as u64;
                return true;
            }
        }
        false
    }

    /// Forget the pending SYNs whose handshake did not come within `syn_timeout`.
    fn expire_syns(&mut self, now: Instant) {
        let ttl = self.sh.p.syn_timeout;
        while let Some(&(at, k)) = self.pending_fifo.front() {
            if at + ttl > now {
                break;
            }
            self.pending_fifo.pop_front();
            if self.pending.get(&k).is_some_and(|p| p.at == at) {
                self.pending.remove(&k);
                self.sh.stats.syns_incomplete.expired += 1;
            }
        }
        self.sh.stats.syns_pending = self.pending.len() as u64;
    }

    /// Hand a captured packet of a known session to each of its copies.
    fn dispatch(&mut self, now: Instant, c: &Captured<'_>) {
        if let Some(lead) = self.group_of(&c.key) {
            self.dispatch_to(now, c, lead);
        }
    }

    /// [`Engine::dispatch`] to the group led by slot `lead`.
    fn dispatch_to(&mut self, now: Instant, c: &Captured<'_>, lead: u32) {
        let was_started = self.slots[lead as usize]
            .s
            .as_ref()
            .is_some_and(|s| s.group_started);
        let mut members = std::mem::take(&mut self.members);
        self.group_members(lead, &mut members);
        let started = self.sh.stats.sessions_started;
        let meter = self
            .payload_meter
            .take()
            .unwrap_or_else(|| self.sh.meter.clone());
        let mut payload = Payload::new(c.payload, &meter);
        let last = members.len().saturating_sub(1);
        for (i, &idx) in members.iter().enumerate() {
            payload.set_last(i == last);
            self.with_session(idx, now, |s, sh| {
                s.on_captured(sh, now, c, &mut payload, i == 0)
            });
        }
        drop(payload);
        self.payload_meter = Some(meter);
        self.members = members;
        if self.sh.stats.sessions_started > started && !was_started {
            self.sh.stats.captured_sessions_started += 1;
            self.set_group_started(&c.key, true);
        }
    }

    fn new_session(
        &mut self,
        now: Instant,
        c: &Captured<'_>,
        map: PortMap,
        baseline: Option<SocketAddr>,
        how: Start,
    ) {
        // Every server of a map has the family of `map.target` (`targets::parse_targets`).
        let target = map.target;
        let h = &c.hdr;
        let st = &mut self.sh.stats;
        let syn = matches!(how, Start::Syn { .. });
        if !syn
            && (h.has(TcpFlags::RST)
                || h.has(TcpFlags::FIN)
                || h.has(TcpFlags::SYN)
                || !h.has(TcpFlags::ACK))
        {
            st.drops.no_session += 1;
            return;
        }
        if !self.sh.intercept_up {
            st.drops.no_intercept += 1;
            if syn {
                st.sessions_not_copied += 1;
            }
            return;
        }
        // The planner says how many copies and on which clients (see "Copies and sampling").
        let t = self.sh.plan.clock(now);
        let v6 = target.is_ipv6();
        let plans = match self
            .sh
            .plan
            .shaper
            .on_session_to(t, c.key.client.into(), v6)
        {
            Ok(p) if p.is_empty() => {
                self.sh.stats.drops.not_sampled += 1;
                if syn {
                    self.sh.stats.sessions_sampled_out += 1;
                }
                return;
            }
            Ok(p) => p,
            Err(_) => {
                // No virtual port left for this client: not copied.
                self.sh.stats.sessions_no_tuple += 1;
                return;
            }
        };
        if self.live_sessions() + plans.len() > self.sh.p.max_sessions {
            // Room from the unproven first, then the idle (see `make_room`).
            let want = self.live_sessions() + plans.len() - self.sh.p.max_sessions;
            self.make_room(now, want, matches!(how, Start::Midstream));
        }
        if self.live_sessions() + plans.len() > self.sh.p.max_sessions {
            self.sh.stats.drops.table_full += 1;
            self.end_plans(&plans);
            return;
        }
        if plans[0].client.is_ipv6() != v6 {
            self.end_plans(&plans);
            self.sh.stats.drops.family_mismatch += 1;
            return;
        }
        let started = self.sh.stats.sessions_started;
        // Whether a copy of this call formed the group (once it is gone, later copies are
        // made outside any group).
        let mut grouped = false;
        // the baseline's copy: the first copy's client, toward the baseline (no plan of its own)
        let extra = baseline
            .filter(|b| b.is_ipv6() == v6)
            .map(|b| (b, plans[0].client));
        let copies = plans
            .iter()
            .map(|p| (target, p.client, Some(p)))
            .chain(extra.map(|(b, cl)| (b, cl, None)));
        let copies: Vec<_> = copies.collect();
        for (k, (target, client, plan)) in copies.into_iter().enumerate() {
            if client.is_ipv6() != v6 {
                let Some(plan) = plan else { continue };
                // A virtual address of the other family than the target's: that copy only.
                self.sh.stats.drops.family_mismatch += 1;
                self.sh.plan.shaper.end_session(plan.session);
                continue;
            }
            let idx = match self.free.pop() {
                Some(i) => i,
                None => {
                    self.slots.push(Slot {
                        gen: self.gen_floor,
                        next: NO_SLOT,
                        s: None,
                    });
                    // The table grew: compact once it is down to a quarter again.
                    self.compact_below = self.slots.len() / 4;
                    (self.slots.len() - 1) as u32
                }
            };
            let slot = SlotRef {
                idx,
                gen: self.slots[idx as usize].gen,
            };
            // Each copy takes its server by weight, health and load, and keeps it; the
            // baseline's copy (no plan of its own) goes to the baseline.
            let target = match plan {
                None => target,
                Some(plan) => match self.targets.pick(now, &map) {
                    Some(t) => t,
                    None => {
                        // Every server is overloaded: this copy is not made.
                        self.sh.plan.shaper.end_session(plan.session);
                        self.free.push(idx);
                        continue;
                    }
                },
            };
            if let Some(plan) = plan {
                self.targets.on_started(now, target, idx);
                if let Some(tags) = self.trace.as_mut() {
                    let pool = plan
                        .user
                        .and_then(|u| self.sh.plan.shaper.users().map(|t| t.user(u).pool as u16));
                    tags.set(slot, plan, pool, target);
                }
            }
            let mut s = Session::new(c.key, slot, target, client.ip(), now);
            s.copy = k as u16;
            s.want_port = client.port();
            s.plan_id = session::PlanId::of(plan.map(|p| p.session));
            s.gate = plan
                .filter(|_| self.sh.plan.gates)
                .map(|p| Box::new(Gate::new(p.session)));
            match how {
                Start::Syn { isn, tsval } => s.start_syn(&mut self.sh, now, isn, tsval),
                Start::Midstream => s.start_syncing(&mut self.sh, c, k == 0),
                Start::Resume => s.start_resumed(&mut self.sh, now, c),
            }
            self.slots[idx as usize].s = Some(s);
            self.slots[idx as usize].next = NO_SLOT;
            self.sh.stats.sessions_unproven += 1;
            if !grouped || self.group_of(&c.key).is_some() {
                self.group_join(&c.key, idx);
                grouped = true;
            }
            self.after_op(idx, now);
        }
        if self.sh.stats.sessions_started > started {
            self.sh.stats.captured_sessions_started += 1;
        }
        let now_started = self.sh.stats.sessions_started > started;
        self.set_group_started(&c.key, now_started);
    }

    /// One response header record returned by the intercept.
    pub fn handle_record(&mut self, now: Instant, record: &Record) {
        self.record(now, record);
        self.maybe_compact();
    }

    fn record(&mut self, now: Instant, record: &Record) {
        self.sh.stats.records_received += 1;
        let Ok(r) = parse_record(record) else {
            self.sh.stats.drops.record_malformed += 1;
            return;
        };
        match self.sh.tuples.get(&r.tuple) {
            Some(slot) if self.live(slot) => {
                self.targets
                    .on_answer(now, r.tuple.server.into(), r.hdr.has(TcpFlags::RST));
                self.with_session(slot.idx, now, |s, sh| s.on_record(sh, now, &r));
                if let Some((addr, took)) = self.sh.answered.take() {
                    self.targets.on_answer_time(now, addr, took);
                }
            }
            _ => self.sh.stats.drops.record_unknown += 1,
        }
    }

    /// For `--compare`: the copy index of the session a record belongs to, and the captured
    /// client that copy stands for, if it stands for one: it is on the captured client's address
    /// and port (with `--copies N`, copy 0 and its baseline copy; the comparison matches test
    /// answers to online connections by them), or it is copy 0, planned there, and had to take
    /// another port (the client's was taken by another live copy, a TIME_WAIT moved it, or the
    /// test server closed and the copy reconnected); the caller files such a record under the
    /// client ([`crate::shadow::file_under`]). `None` for a record of no live session.
    /// Call it before [`Engine::handle_record`] (a record may end its session).
    #[must_use]
    pub fn record_copy(&self, record: &Record) -> Option<(u16, Option<SocketAddr>)> {
        let r = parse_record(record).ok()?;
        let slot = self
            .sh
            .tuples
            .get(&r.tuple)
            .filter(|&slot| self.live(slot))?;
        let s = self.slots.get(slot.idx as usize)?.s.as_ref()?;
        let client = s.key.client.socket();
        // On the client's own tuple (copy 0, the baseline's copy), or copy 0 planned there
        // and moved (the flags' plan: the client's address and port).
        let stands = r.tuple.client == s.key.client
            || (s.copy == 0 && s.client_ip == client.ip() && s.want_port == client.port());
        Some((s.copy, stands.then_some(client)))
    }

    /// Tell the engine whether at least one intercept is connected (while none is, new sessions
    /// are not started: counted as not copied). Same as [`Engine::set_intercept_count`] with
    /// 0 or 1.
    pub fn set_intercept_connected(&mut self, now: Instant, connected: bool) {
        self.set_intercept_count(now, usize::from(connected));
    }

    /// Tell the engine how many intercepts are connected: none stops new sessions (see
    /// [`Engine::set_intercept_connected`]); with several, a registration fails only once
    /// that many of them refused it ([`Engine::handle_registered`]).
    pub fn set_intercept_count(&mut self, _now: Instant, n: usize) {
        self.sh.intercept_up = n > 0;
        self.intercepts = n;
    }

    /// What became of intercept `from`'s control link of generation `gen` (see [`LinkEvent`]).
    /// A registration is in force only through an acceptance on the intercept's current link
    /// while its rules are in force: when the link ends (or a newer one comes up) or the rules
    /// go missing, every connection in force through that intercept alone is held back, sends
    /// nothing (`registrations_withdrawn`) and goes on once an acceptance is in force again
    /// (the copier registers every live session again on the new link; the rules come back).
    /// Returns whether the event was of the current link (an event of an older one is ignored).
    pub fn intercept_link(&mut self, now: Instant, from: u16, gen: u32, event: LinkEvent) -> bool {
        let bit = 1u64 << (from % 64);
        let at = self.link_gens.iter().position(|(f, _)| *f == from);
        let current = at.is_some_and(|i| self.link_gens[i].1 == gen);
        match event {
            LinkEvent::Up => {
                if current {
                    return true;
                }
                match at {
                    Some(i) => self.link_gens[i].1 = gen,
                    None => self.link_gens.push((from, gen)),
                }
                self.sh.unguarded &= !bit;
                self.withdraw_all(bit, true);
            }
            LinkEvent::Down if current => {
                self.sh.unguarded &= !bit;
                self.withdraw_all(bit, true);
            }
            LinkEvent::Rules(false) if current => {
                if self.sh.unguarded & bit == 0 {
                    self.sh.unguarded |= bit;
                    self.sh.stats.rules_lost += 1;
                    self.withdraw_all(bit, false);
                }
            }
            LinkEvent::Rules(true) if current => {
                if self.sh.unguarded & bit != 0 {
                    self.sh.unguarded &= !bit;
                    for idx in 0..self.slots.len() as u32 {
                        let Some(s) = self.slots[idx as usize].s.as_mut() else {
                            continue;
                        };
                        if s.reinstate(&self.sh) {
                            self.after_op(idx, now);
                        }
                    }
                }
            }
            _ => return false,
        }
        true
    }

    fn withdraw_all(&mut self, bits: u64, forget: bool) {
        let mut n = 0;
        for slot in &mut self.slots {
            if let Some(s) = slot.s.as_mut() {
                n += s.withdraw(&self.sh, bits, forget);
            }
        }
        self.sh.stats.registrations_withdrawn += n;
    }

    /// Next packet to send: writes a complete IP packet (fresh checksums) into `out` (cleared).
    pub fn poll_transmit(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<Transmit> {
        out.clear();
        if let Some((tuple, pkt)) = self.shutdown_tx.pop_front() {
            out.extend_from_slice(&pkt);
            if self.shutdown_tx.is_empty() {
                self.release_shutdown_unreg();
            }
            let st = &mut self.sh.stats;
            st.segments_sent += 1;
            st.bytes_sent += out.len() as u64;
            return Some(Transmit {
                tuple,
                dst: tuple.server.ip(),
                len: out.len(),
                gso_size: 0,
                copy: None,
            });
        }
        while let Some(slot) = self.ready.pop_front() {
            let Some(s) = self
                .slots
                .get_mut(slot.idx as usize)
                .and_then(|x| x.s.as_mut())
                .filter(|s| s.slot == slot)
            else {
                continue;
            };
            s.in_ready = false;
            let sent = s.poll_transmit(&mut self.sh, now, out);
            self.arm(slot.idx);
            if let Some((tuple, sent)) = sent {
                let mut copy = None;
                if let Some(s) = self.slots[slot.idx as usize].s.as_mut() {
                    s.in_ready = true;
                    copy = Some((s.copy, s.key.client.socket()));
                }
                self.ready.push_back(slot);
                let st = &mut self.sh.stats;
                st.segments_sent += 1;
                st.bytes_sent += out.len() as u64;
                st.payload_bytes_sent += sent.payload as u64;
                if sent.retransmit {
                    st.retransmissions += 1;
                }
                if sent.probe {
                    st.window_probes += 1;
                }
                return Some(Transmit {
                    tuple,
                    dst: tuple.server.ip(),
                    len: out.len(),
                    gso_size: sent.gso_size,
                    copy,
                });
            }
        }
        None
    }

    /// Next change of the registered tuples, for the intercepts.
    pub fn poll_control(&mut self) -> Option<RegEvent> {
        self.sh.control.pop_front()
    }

    /// An intercept's verdict on a registered test tuple (`Message::Registered`); `from`
    /// names the intercept (any number stable for the link's life, e.g. its `--intercept`
    /// index). A tuple is in force once any intercept accepted it: only then do its packets
    /// leave. A refusal counts only while no intercept accepted it; once as many different
    /// intercepts refused it as are connected (at least one), the session it belongs to fails
    /// (`registration_refused`) having sent nothing on it, and the refusal is reported
    /// ([`Engine::poll_refusal`]). Verdicts on tuples no session holds (ended meanwhile) and
    /// repeated ones (after a reconnection) are ignored.
    pub fn handle_registered(
        &mut self,
        now: Instant,
        from: u16,
        tuple: FourTuple,
        verdict: RegVerdict,
    ) {
        let Some(slot) = self.sh.tuples.get(&tuple).filter(|s| self.live(*s)) else {
            return;
        };
        let guarding = self
            .intercepts_for
            .iter()
            .find(|(ip, _)| *ip == tuple.server.ip())
            .map(|&(_, n)| n);
        let need = guarding
            .map_or(self.intercepts, |n| n.min(self.intercepts))
            .max(1);
        let Some(key) = self.slots[slot.idx as usize].s.as_ref().map(|s| s.key) else {
            return;
        };
        let mut refused = false;
        self.with_session(slot.idx, now, |s, sh| {
            refused = s.on_verdict(sh, now, tuple, from, verdict, need)
        });
        if refused {
            self.sh.stats.drops.registration_refused += 1;
            let Some(map) = self.sh.p.map_for(key.server.into()).copied() else {
                return;
            };
            if !self.refusals_seen.contains(&(map, verdict)) && self.refusals_seen.len() < 256 {
                self.refusals_seen.push((map, verdict));
                self.refusals.push_back(Refusal {
                    map,
                    tuple,
                    verdict,
                });
            }
        }
    }

    /// The next refusal to report (the first of each map and verdict; see
    /// [`Engine::handle_registered`]).
    pub fn poll_refusal(&mut self) -> Option<Refusal> {
        self.refusals.pop_front()
    }

    /// The next change of a test server's health (taken out, back in, every server of a map
    /// down), to log; see [`Targets`].
    pub fn poll_target_event(&mut self) -> Option<TargetEvent> {
        self.targets.poll_event()
    }

    /// The next request unit sent for the first time, with who sent it (only with
    /// `EngineConfig::trace`; call it until `None` after every `poll_transmit` round).
    pub fn poll_unit(&mut self) -> Option<UnitSent> {
        self.take_trace_notes();
        self.trace.as_mut()?.pop()
    }

    /// The profile's pool names (what [`UnitSent::pool`] indexes); empty without pools.
    #[must_use]
    pub fn pool_names(&self) -> Vec<String> {
        self.sh
            .plan
            .shaper
            .users()
            .map(|u| u.pool_names().to_vec())
            .unwrap_or_default()
    }

    fn take_trace_notes(&mut self) {
        if let (Some(tags), Some(notes)) = (self.trace.as_mut(), self.sh.trace_units.as_mut()) {
            if !notes.is_empty() {
                tags.take(notes, &mut self.sh.plan);
            }
        }
    }

    /// The shaper's state at `now`: factor in force, live copies, users active, ON sources,
    /// request units held by the gates, and the gates' delay so far.
    #[must_use]
    pub fn shaper_stats(&self, now: Instant) -> ShaperStats {
        let plan = &self.sh.plan;
        let t = plan
            .instant(Duration::ZERO)
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s));
        let held = self
            .slots
            .iter()
            .filter_map(|x| x.s.as_ref())
            .filter(|s| {
                s.gate
                    .as_ref()
                    .and_then(|g| g.until())
                    .is_some_and(|u| u > now)
            })
            .count();
        ShaperStats {
            factor: plan.shaper.factor_at(t),
            copies_live: plan.shaper.live_copies(),
            users_active: plan.shaper.users().map(|_| plan.shaper.users_active()),
            sources_on: plan.shaper.sources_on(t),
            held,
            gated_units: plan.gated_units,
            gate_delay: plan.gate_delay,
        }
    }

    /// For a closed loop on the rate: the planner's time at `now` (seconds; `None` before the
    /// first packet), the schedule's load x this copier's share there, and the base factor.
    #[must_use]
    pub fn rate_inputs(&self, now: Instant) -> Option<(f64, f64, f64)> {
        let start = self.sh.plan.instant(Duration::ZERO)?;
        let t = now.saturating_duration_since(start);
        let s = &self.sh.plan.shaper;
        Some((t.as_secs_f64(), s.load_share_at(t), s.base_factor()))
    }

    /// Multiply the planner's factor by `scale` for the sessions that start from now on (see
    /// `shaper::Shaper::set_scale`).
    pub fn set_factor_scale(&mut self, scale: f64) {
        self.sh.plan.shaper.set_scale(scale);
    }

    /// Every test server's counters and state (sessions by server, probes, up or down).
    pub fn target_stats(&self) -> impl Iterator<Item = &TargetStats> {
        self.targets.stats()
    }

    /// How many maps have every test server down now.
    #[must_use]
    pub fn maps_all_down(&self) -> usize {
        self.targets.all_down().count()
    }

    /// How many maps have every test server that is up overloaded.
    #[must_use]
    pub fn maps_all_overloaded(&self) -> usize {
        self.targets.all_overloaded().count()
    }

    /// When [`Engine::handle_timeout`] should be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let syn = self
            .pending_fifo
            .front()
            .map(|(at, _)| *at + self.sh.p.syn_timeout);
        let t = self.timers.peek().map(|Reverse((t, _, _))| t.at());
        match (t, syn) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Run every timer due at `now` (retransmissions, pacing, session timeouts, lingering).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.expire_syns(now);
        self.targets.check(now);
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        let now_s = Stamp::of(now);
        while let Some(&Reverse(e)) = self.timers.peek() {
            if e.0 > now_s {
                break;
            }
            self.timers.pop();
            due.push(e);
        }
        for &(t, idx, gen) in &due {
            let slot = SlotRef { idx, gen };
            if !self.live(slot) {
                continue;
            }
            let Some(s) = self.slots[idx as usize].s.as_mut() else {
                continue;
            };
            if s.armed == Some(t) {
                s.armed = None;
            }
            if s.next_deadline(&self.sh.p).is_some_and(|d| d <= now) {
                self.with_session(idx, now, |s, sh| s.on_timeout(sh, now));
            } else {
                self.arm(idx);
            }
        }
        self.due = due;
        self.maybe_compact();
    }

    /// Stop copying: every session ends (those being copied count as failed, `shutdown`),
    /// every test connection that sent anything gets a RST now (also those already closed or
    /// reset, in case their last segment was lost), and every test tuple is unregistered. The
    /// RSTs come out of [`Engine::poll_transmit`] first; the `Unregister`s come out of
    /// [`Engine::poll_control`] once the last RST was taken (see "Stopping" in the module
    /// documentation). The engine is empty afterwards: captured packets would start new
    /// sessions, so stop feeding it first.
    pub fn close_all(&mut self, now: Instant) {
        self.close_sessions(now, false);
    }

    /// [`Engine::close_all`] at the end of a capture file (`--offline`): the idle sessions
    /// (every byte sent and answered, the client's connection left open in the capture) are
    /// counted as open at the capture's end (`sessions_open_at_end`), the others as failed
    /// (`shutdown`).
    pub fn close_at_capture_end(&mut self, now: Instant) {
        self.close_sessions(now, true);
    }

    /// Sessions that still wait for something that may come once the capture file ended: a
    /// request not answered, a segment not acknowledged, a close to carry. The others cannot
    /// go on (an idle one waits for a request, a syncing one for a client ACK, that will not
    /// come; a done one whose connections are closed only lingers).
    #[must_use]
    pub fn unfinished_sessions(&self) -> usize {
        self.slots
            .iter()
            .filter_map(|s| s.s.as_ref())
            .filter(|s| !s.settled_at_capture_end())
            .count()
    }

    fn close_sessions(&mut self, now: Instant, at_capture_end: bool) {
        let mut out = Vec::new();
        let mut unreg = Vec::new();
        for idx in 0..self.slots.len() {
            let Some(s) = self.slots[idx].s.as_mut() else {
                continue;
            };
            s.shutdown(&mut self.sh, now, at_capture_end, &mut out, &mut unreg);
            self.remove(idx as u32);
        }
        self.timers.clear();
        self.ready.clear();
        self.pending.clear();
        self.resumes.clear();
        self.resume_fifo.clear();
        self.pending_fifo.clear();
        self.sh.stats.syns_pending = 0;
        self.closing = 0;
        self.shutdown_tx.extend(out);
        self.shutdown_unreg.extend(unreg);
        if self.shutdown_tx.is_empty() {
            self.release_shutdown_unreg();
        }
    }

    fn release_shutdown_unreg(&mut self) {
        for t in self.shutdown_unreg.drain(..) {
            self.sh.control.push_back(RegEvent::Unregister(t));
        }
    }

    /// The counters.
    #[must_use]
    pub fn stats(&self) -> &EngineStats {
        &self.sh.stats
    }

    /// The inline sizes of a session's parts, in bytes, for the memory bench: its slot in the
    /// table (the `Session` with its `Stream` and current `Conn`), those parts alone, its entry
    /// in `by_key`, and [`SESSION_COST`].
    #[doc(hidden)]
    #[must_use]
    pub fn layout() -> [(&'static str, usize); 6] {
        use std::mem::size_of;
        [
            ("slot", size_of::<Slot>()),
            ("stream", size_of::<stream::Stream>()),
            ("conn", size_of::<conn::Conn>()),
            ("watch", size_of::<answer::Watch>()),
            ("key entry", size_of::<u32>()),
            ("SESSION_COST", SESSION_COST),
        ]
    }

    /// What `max_memory` bounds: the captured client bytes the sessions hold, with their
    /// bookkeeping (shared bytes counted once: see "Copies"), plus [`SESSION_COST`] per session
    /// in the table and [`PENDING_SYN_COST`] per captured SYN waiting for its handshake. Sessions
    /// that are done and only linger (for `close_linger`, answering the test server's last
    /// segments) count here but are not shed: over `max_memory`, shedding stops once the rest
    /// is under it, so the true total may exceed it by their cost for up to `close_linger`.
    #[must_use]
    pub fn memory_used(&self) -> usize {
        self.sh.meter.bytes()
            + self.session_count() * SESSION_COST
            + self.pending.len() * PENDING_SYN_COST
            + self.resumes.len() * RESUME_COST
    }

    /// Captured client bytes the sessions hold, with their bookkeeping: the part of
    /// [`Engine::memory_used`] that is not a fixed cost.
    #[must_use]
    pub fn buffered_bytes(&self) -> usize {
        self.sh.meter.bytes()
    }

    /// Captured SYNs waiting for their handshake.
    #[must_use]
    pub fn pending_syns(&self) -> usize {
        self.pending.len()
    }

    /// Every test tuple registered now (to re-register after an intercept reconnects).
    pub fn registered(&self) -> impl Iterator<Item = FourTuple> + '_ {
        self.sh.tuples.by_test.keys().copied()
    }

    /// Sessions in the table (started, waiting to synchronise, or closing).
    #[must_use]
    pub fn session_count(&self) -> usize {
        self.slots.len() - self.free.len()
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
        let live: Vec<Reverse<(Stamp, u32, u32)>> = std::mem::take(&mut self.timers)
            .into_iter()
            .filter(|Reverse((_, idx, gen))| {
                self.slots
                    .get(*idx as usize)
                    .is_some_and(|x| x.gen == *gen && x.s.is_some())
            })
            .collect();
        self.timers = BinaryHeap::from(live);
        self.timers.shrink_to_fit();
        self.ready.shrink_to_fit();
        self.due = Vec::new();
        self.members = Vec::new();
        self.sh.control.shrink_to_fit();
        self.compact_below = self.session_count() / 2;
    }

    fn live(&self, slot: SlotRef) -> bool {
        self.slots
            .get(slot.idx as usize)
            .is_some_and(|x| x.gen == slot.gen && x.s.is_some())
    }

    fn with_session(&mut self, idx: u32, now: Instant, f: impl FnOnce(&mut Session, &mut Shared)) {
        let Some(s) = self.slots.get_mut(idx as usize).and_then(|x| x.s.as_mut()) else {
            return;
        };
        f(s, &mut self.sh);
        self.after_op(idx, now);
    }

    /// After any change to a session: drop it when finished, else re-arm and mark it ready.
    fn after_op(&mut self, idx: u32, now: Instant) {
        while let Some(k) = self.sh.shed_at_hole.pop() {
            if !self.shed_keys.contains_key(&k) {
                self.sh
                    .stats
                    .sessions_shed_overload
                    .add(OverloadReason::Hole, 1);
            }
            self.remember_shed(now, k);
        }
        let Some(s) = self.slots[idx as usize].s.as_mut() else {
            return;
        };
        if let Some(failed) = s.outcome.take() {
            // Before `on_ended` forgets which server the copy was on.
            self.targets.on_outcome(now, idx, failed);
        }
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
            self.targets.on_ended(idx);
        }
        if !s.in_ready {
            s.in_ready = true;
            self.ready.push_back(s.slot);
        }
        self.arm(idx);
    }

    fn arm(&mut self, idx: u32) {
        let Some(s) = self.slots[idx as usize].s.as_mut() else {
            return;
        };
        if let Some(d) = s.next_deadline(&self.sh.p) {
            let d = Stamp::of(d);
            if s.armed.is_none_or(|a| d < a) {
                s.armed = Some(d);
                self.timers.push(Reverse((d, idx, s.slot.gen)));
            }
        }
    }

    /// Ends the planner's copies of a session the engine does not start.
    fn end_plans(&mut self, plans: &[shaper::CopyPlan]) {
        for p in plans {
            self.sh.plan.shaper.end_session(p.session);
        }
    }

    fn remove(&mut self, idx: u32) {
        // The rows of this slot's copy are taken before the slot can be reused.
        self.take_trace_notes();
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
        self.targets.on_ended(idx);
        for c in s.cur.iter().chain(s.old.iter()) {
            self.sh.unindex(c.tuple);
            self.sh.control.push_back(RegEvent::Unregister(c.tuple));
        }
        self.group_leave(&s.key, idx, s.group_started);
    }

    /// The lead slot of the group of captured sessions `key`, if it has one.
    fn group_of(&self, key: &FourTuple) -> Option<u32> {
        let slots = &self.slots;
        let eq = |&i: &u32| slots[i as usize].s.as_ref().is_some_and(|s| s.key == *key);
        self.by_key.find(self.key_hash.hash_one(key), eq).copied()
    }

    /// The slots of the group led by `lead`, in copy order, into `out` (cleared first).
    fn group_members(&self, lead: u32, out: &mut Vec<u32>) {
        out.clear();
        let mut i = lead;
        while let Some(x) = self
            .slots
            .get(i as usize)
            .filter(|_| out.len() < self.slots.len())
        {
            out.push(i);
            i = x.next;
        }
    }

    /// Mark the group of `key` started or not (its lead keeps the flag).
    fn set_group_started(&mut self, key: &FourTuple, started: bool) {
        if let Some(lead) = self.group_of(key) {
            if let Some(s) = self.slots[lead as usize].s.as_mut() {
                s.group_started = started;
            }
        }
    }

    /// Add the session in slot `idx` (its `key`'s, `next` clear) last to the group of `key`,
    /// or make it a group of its own.
    fn group_join(&mut self, key: &FourTuple, idx: u32) {
        match self.group_of(key) {
            Some(lead) => {
                // (Bounded, as every walk of a group: no broken link can make it spin.)
                let mut i = lead;
                for _ in 0..self.slots.len() {
                    match self.slots.get(i as usize).map(|x| x.next) {
                        Some(NO_SLOT) | None => break,
                        Some(n) => i = n,
                    }
                }
                if let Some(x) = self.slots.get_mut(i as usize) {
                    x.next = idx;
                }
            }
            None => {
                let (slots, h) = (&self.slots, self.key_hash);
                self.by_key
                    .insert_unique(h.hash_one(key), idx, |&i| key_hash(slots, h, i));
            }
        }
    }

    /// The group of `key` is no more: its sessions go on outside any group.
    fn group_detach(&mut self, key: &FourTuple) {
        let slots = &self.slots;
        let eq = |&i: &u32| slots[i as usize].s.as_ref().is_some_and(|s| s.key == *key);
        let Ok(e) = self.by_key.find_entry(self.key_hash.hash_one(key), eq) else {
            return;
        };
        let (mut i, _) = e.remove();
        for _ in 0..self.slots.len() {
            match self.slots.get_mut(i as usize) {
                Some(x) => i = std::mem::replace(&mut x.next, NO_SLOT),
                None => break,
            }
        }
    }

    /// The session of slot `idx` (of captured session `key`, its group's flag `started` if it
    /// leads it; taken out of its slot already) leaves its group, if it is in one.
    fn group_leave(&mut self, key: &FourTuple, idx: u32, started: bool) {
        let next = std::mem::replace(&mut self.slots[idx as usize].next, NO_SLOT);
        let slots = &self.slots;
        // The entry led by `idx` is `key`'s (a slot leads one group at most).
        let eq = |&i: &u32| i == idx || slots[i as usize].s.as_ref().is_some_and(|s| s.key == *key);
        let Ok(mut e) = self.by_key.find_entry(self.key_hash.hash_one(key), eq) else {
            return;
        };
        let lead = *e.get();
        if lead == idx {
            if next == NO_SLOT {
                e.remove();
            } else {
                *e.get_mut() = next;
                // The group's flag goes to its new lead.
                if let Some(s) = self.slots[next as usize].s.as_mut() {
                    s.group_started = started;
                }
            }
            return;
        }
        let mut i = lead;
        for _ in 0..self.slots.len() {
            let Some(x) = self.slots.get_mut(i as usize) else {
                return;
            };
            if x.next == idx {
                x.next = next;
                return;
            }
            i = x.next;
        }
    }

    /// What shedding can free: [`Engine::memory_used`] but for the sessions that are done
    /// and only linger (they leave by themselves within `close_linger`).
    fn sheddable_memory(&self) -> usize {
        self.memory_used()
            .saturating_sub(self.closing * SESSION_COST)
    }

    /// Over `max_memory` (what shedding can free: see `sheddable_memory`), shed until 90% of
    /// it: first the oldest pending SYNs (a flood of SYNs that never complete goes before any
    /// session), then the idle sessions (`Session::idle`: `idle_shed`), then the others
    /// (`memory`), each quiet longest first, empty ones included. A copy shed frees only
    /// the bytes no other copy holds: the copies of one session go one by one, oldest first,
    /// until their bytes are freed.
    fn check_memory(&mut self, now: Instant) {
        if self.sheddable_memory() <= self.sh.p.max_memory {
            return;
        }
        // Shed down to 90% so that a busy engine does not scan on every packet.
        let target = self.sh.p.max_memory - self.sh.p.max_memory / 10;
        while self.sheddable_memory() > target && !self.pending.is_empty() {
            if !self.shed_oldest_syn() {
                break;
            }
        }
        while self.sheddable_memory() > target && !self.resumes.is_empty() {
            if !self.forget_oldest_resume() {
                break;
            }
        }
        if self.sheddable_memory() <= target {
            return;
        }
        // By `Session::shed_rank` (the unproven, then the idle, then the others), each quiet
        // longest first.
        let mut cands: Vec<(u8, Stamp, u32)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, x)| {
                x.s.as_ref()
                    .filter(|s| s.phase != Phase::Done)
                    .map(|s| (s.shed_rank(), s.last_activity, i as u32))
            })
            .collect();
        cands.sort_unstable();
        for (rank, _, idx) in cands {
            if self.sheddable_memory() <= target {
                break;
            }
            self.shed(now, idx, shed_reason(rank, FailReason::Memory));
        }
    }

    /// Sessions in the table but those done and only lingering (they leave by themselves
    /// within `close_linger`): what `max_sessions` bounds.
    fn live_sessions(&self) -> usize {
        self.session_count().saturating_sub(self.closing)
    }

    /// Make room for a new session by shedding `n` sessions (fewer if fewer may go; with a
    /// large table, a few more, so that a full table is not scanned for every new one), by
    /// `Session::shed_rank`, each quiet longest first: mid-stream candidates, then idle
    /// unproven, idle proven, busy unproven sessions (`unproven_shed`, `idle_shed`). For a
    /// new mid-stream candidate (`candidate_only`) only other candidates go: a flood of
    /// spoofed segments churns among its own candidates and sheds nothing that started. A busy
    /// proven session never goes.
    fn make_room(&mut self, now: Instant, n: usize, candidate_only: bool) {
        let n = n + self.sh.p.max_sessions / 256;
        let worst = if candidate_only { 0 } else { 3 };
        let mut cands: Vec<(u8, Stamp, u32)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, x)| {
                x.s.as_ref()
                    .filter(|s| s.phase != Phase::Done)
                    .map(|s| (s.shed_rank(), s.last_activity, i as u32))
            })
            .filter(|c| c.0 <= worst)
            .collect();
        if cands.len() > n {
            cands.select_nth_unstable(n);
            cands.truncate(n);
        }
        for (rank, _, idx) in cands {
            self.shed(now, idx, shed_reason(rank, FailReason::IdleShed));
        }
    }

    /// End the session of slot `idx` to make room (`sessions_shed`, and failed by `why`).
    fn shed(&mut self, now: Instant, idx: u32, why: FailReason) {
        self.sh.stats.sessions_shed += 1;
        self.with_session(idx, now, |s, sh| s.finish(sh, now, Some(why)));
    }
}

/// Why a session of `Session::shed_rank` `rank` is shed: `unproven_shed` for the unproven,
/// `idle_shed` for the idle proven, `busy` for the busy proven.
fn shed_reason(rank: u8, busy: FailReason) -> FailReason {
    match rank {
        0 | 1 | 3 => FailReason::UnprovenShed,
        2 => FailReason::IdleShed,
        _ => busy,
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
