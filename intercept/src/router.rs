//! The intercept's decision logic, sans-IO: for each response packet of the test service, decide
//! whether it goes to a copier (as a [`Record`]), passes (allow list), waits for a registration
//! (hold buffer) or is dropped.
//!
//! Driven by the I/O layer:
//! - [`Router::handle_packet`] for every packet read from NFQUEUE; the packet's kernel verdict is
//!   ACCEPT only for [`Decision::Accept`], DROP for everything else;
//! - [`Router::handle_register`] (or [`Router::handle_register_payload`], which also says how
//!   much answer payload each tuple's records keep) / [`Router::handle_unregister`] /
//!   [`Router::handle_copier_gone`] for what the control connections say;
//! - [`Router::poll_timeout`] and [`Router::handle_timeout`] to expire held records and
//!   tombstones;
//! - [`Router::set_local_addrs`] with this host's interface addresses (refreshed periodically).
//!
//! Invariants:
//! - routing is by the exact [`FourTuple`] as the test server sees it (client = the response's
//!   destination); no hashing shortcut can hand one copier another's records;
//! - fail closed: a packet that is neither registered nor to an allowed address is never
//!   accepted; its record is held at most `hold_time` and then dropped (counted as
//!   `unregistered`);
//! - a registered session wins over the allow list: nothing of a copied session passes;
//! - the hold buffer is bounded by records (`hold_capacity`) and by bytes (`hold_bytes`); the
//!   oldest record is evicted first (counted as `hold_overflow` or `hold_bytes`, by the bound
//!   that made room);
//! - a record keeps the TCP payload its registration asked for (0 for a plain Register), never
//!   more than the `payload_bytes` the I/O layer passes (`--payload-bytes`, the NFQUEUE copy
//!   range); held records are cut to that when a registration releases them;
//! - a tuple belongs to one copier at a time. A later registration of the same tuple by another
//!   connection of the same copier instance ([`Router::set_instance`], the Hello's `instance`)
//!   takes it over (a reconnecting copier wins over its dead previous connection) and is counted
//!   as a conflict; one by a connection of another instance is refused
//!   ([`RegVerdict::HeldByOther`], two copiers of a fleet picked the same test tuple: the test
//!   server would see one connection where there are two), and the copier moves its copy. A
//!   connection that announced no instance (an older copier) takes over as before;
//! - only enforceable registrations are taken: a tuple whose server port is not guarded (no
//!   NFQUEUE rule for it), whose IP family has no rule (`--ipv4-only`), or that would take a
//!   copier past `max_registrations` is refused ([`RegVerdict`]) and not inserted, because the
//!   intercept could not keep its responses off the network;
//! - a tuple that was unregistered (or whose copier's connection ended) stays a *tombstone*
//!   for `linger`: its packets (the test server's retransmissions) are dropped and counted as
//!   `recently_unregistered`, never accepted, not even for an allowed or local address; a new
//!   registration of the tuple clears it. Tombstones are bounded (`tombstone_capacity`, the
//!   oldest go first) and expire through [`Router::handle_timeout`];
//! - answers to this host's own addresses (loopback and the interfaces' addresses) cannot
//!   leave the host and are accepted (unless `accept_local` is off), after the registered and
//!   tombstoned checks and before the allow list;
//! - a restarted intercept ([`Router::start_grace`]) knows none of the registrations its
//!   predecessor held, so for its grace it accepts nothing, not even for an allowed or local
//!   address: what is not registered is held (and released to a copier that registers it, or
//!   dropped at `hold_time`). The grace ends at its deadline, or earlier once at least
//!   [`GRACE_SETTLE`] has passed, at least one copier said its re-registration is complete
//!   ([`Router::handle_synced`]) and every copier connected since the start that announced an
//!   instance ([`Router::grace_join`]) has said so;
//! - with `local_servers_only`, a registration whose server address is not an address of this
//!   host is refused ([`RegVerdict::ServerNotLocal`]): another intercept guards that server;
//! - the router is *quiet* ([`Router::quiet`]) when nothing is registered, held or
//!   tombstoned: only then may the NFQUEUE rules go away at exit.
//!
//! The router's clock is the latest `now` it was given: [`Router::handle_unregister`] and
//! [`Router::handle_copier_gone`] take no time and start a tombstone's linger at that clock (in
//! the daemon at most one timer tick old, which only shortens a linger by that tick).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::proto::{parse_response_headers, Record, RegVerdict};

use crate::allow::AllowList;
use crate::hold::HoldBuffer;
use crate::tombstone::Tombstones;

/// Identifies one control connection (one copier connection) for the lifetime of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CopierId(pub u64);

impl fmt::Display for CopierId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "copier#{}", self.0)
    }
}

common::reasons! {
    /// Why a packet (or its record) was dropped without reaching a copier; [`DropReason::label`]
    /// is its `reason` label.
    #[derive(Hash)]
    enum DropReason;
    /// Not an IPv4/IPv6 TCP packet with whole headers.
    Malformed => malformed,
    /// Held, but no copier registered its session in time.
    Unregistered => unregistered,
    /// Evicted from a full hold buffer (`--hold-capacity` records).
    HoldOverflow => hold_overflow,
    /// Evicted from a hold buffer that held `--hold-bytes` bytes.
    HoldBytes => hold_bytes,
    /// Its tuple was unregistered within the linger time (a tombstone).
    RecentlyUnregistered => recently_unregistered,
    /// The copier's outgoing queue was full (`--copier-queue` records; decided by the I/O
    /// layer).
    CopierSlow => copier_slow,
    /// The copier's outgoing queue held `--copier-queue-bytes` bytes (decided by the I/O
    /// layer).
    QueueBytes => queue_bytes,
    /// The copier went away between the decision and the delivery (decided by the I/O layer).
    CopierGone => copier_gone,
}

/// What to do with one packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Verdict ACCEPT: the packet goes to an allowed address or to this host itself.
    Accept,
    /// Verdict DROP, nothing else to do.
    Drop(DropReason),
    /// Verdict DROP; send `record` to `copier`.
    Deliver {
        /// The copier that registered the session.
        copier: CopierId,
        /// The packet's record.
        record: Record,
    },
    /// Verdict DROP; the record waits in the hold buffer for a registration.
    Held,
}

impl Decision {
    /// Whether the kernel verdict is ACCEPT.
    pub fn accepts(&self) -> bool {
        matches!(self, Decision::Accept)
    }
}

/// What the NFQUEUE rules guard: the server ports and IP families whose responses reach the
/// intercept. A registration outside them could not be enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    /// The guarded server ports (`--port`); `None` means every port (simulations and tests
    /// that have no rules).
    pub ports: Option<Vec<u16>>,
    /// An iptables rule exists.
    pub ipv4: bool,
    /// An ip6tables rule exists (not with `--ipv4-only`).
    pub ipv6: bool,
}

impl Guard {
    /// Every port, both families.
    pub fn everything() -> Guard {
        Guard {
            ports: None,
            ipv4: true,
            ipv6: true,
        }
    }

    /// The verdict on registering `t` as far as the rules go (not the limit).
    pub fn verdict(&self, t: &FourTuple) -> RegVerdict {
        if let Some(ports) = &self.ports {
            if !ports.contains(&t.server.port()) {
                return RegVerdict::PortNotGuarded;
            }
        }
        let family_ok = if t.server.is_ipv4() {
            self.ipv4
        } else {
            self.ipv6
        };
        if !family_ok {
            return RegVerdict::FamilyNotGuarded;
        }
        RegVerdict::Accepted
    }
}

impl fmt::Display for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.ports {
            None => write!(f, "every port")?,
            Some(p) => write!(
                f,
                "port(s) {}",
                p.iter().map(u16::to_string).collect::<Vec<_>>().join(",")
            )?,
        }
        match (self.ipv4, self.ipv6) {
            (true, true) => write!(f, ", IPv4 and IPv6"),
            (true, false) => write!(f, ", IPv4 only"),
            (false, true) => write!(f, ", IPv6 only"),
            (false, false) => write!(f, ", no IP family"),
        }
    }
}

/// Settings of a [`Router`].
#[derive(Debug, Clone)]
pub struct RouterConfig {
    /// Client addresses whose responses pass.
    pub allow: AllowList,
    /// How long a record waits for its registration.
    pub hold_time: Duration,
    /// How many records may wait at once.
    pub hold_capacity: usize,
    /// How many bytes of records ([`crate::hold::record_size`]) may wait at once.
    pub hold_bytes: usize,
    /// What the NFQUEUE rules guard; registrations outside it are refused.
    pub guard: Guard,
    /// Registrations one copier connection may hold at once.
    pub max_registrations: usize,
    /// How long an unregistered tuple stays a tombstone.
    pub linger: Duration,
    /// How many tombstones at most (the oldest go first).
    pub tombstone_capacity: usize,
    /// Accept answers to this host's own addresses (loopback and [`Router::set_local_addrs`]).
    pub accept_local: bool,
    /// Refuse registrations whose server address is not one of this host's
    /// ([`RegVerdict::ServerNotLocal`]); off in tests and simulations that set no addresses.
    pub local_servers_only: bool,
}

/// The least a restart grace lasts when its copiers are quick ([`Router::handle_synced`]): a
/// copier holding sessions retries its link at least every second, so every copier of the
/// previous intercept is back within it.
pub const GRACE_SETTLE: Duration = Duration::from_secs(2);

/// A restarted intercept's grace (see the module doc).
#[derive(Debug)]
struct Grace {
    until: Instant,
    settle: Instant,
    /// Copiers connected during the grace that have not said they are synced.
    waiting: HashSet<CopierId>,
    /// Copiers that said so.
    synced: usize,
}

/// Default of [`RouterConfig::hold_bytes`] (and `--hold-bytes`): 32 MiB, about 500 whole
/// packets of `--payload-bytes 65495` (the 4096 records of `--hold-capacity` would be 256 MiB).
pub const DEFAULT_HOLD_BYTES: usize = 32 << 20;

/// Default of [`RouterConfig::max_registrations`] (and `--max-registrations`).
pub const DEFAULT_MAX_REGISTRATIONS: usize = 1_000_000;
/// Default of [`RouterConfig::linger`] (and `--linger`): the test server retries a SYN-ACK for
/// about 63 s with `tcp_synack_retries=5`.
pub const DEFAULT_LINGER: Duration = Duration::from_secs(120);
/// Default of [`RouterConfig::tombstone_capacity`] (and `--tombstone-capacity`): about 100 MB
/// when full.
pub const DEFAULT_TOMBSTONE_CAPACITY: usize = 1 << 20;

impl Default for RouterConfig {
    /// Guards every port and both families (for tests and simulations; the daemon passes what
    /// its rules guard).
    fn default() -> Self {
        RouterConfig {
            allow: AllowList::default(),
            hold_time: Duration::from_secs(2),
            hold_capacity: 4096,
            hold_bytes: DEFAULT_HOLD_BYTES,
            guard: Guard::everything(),
            max_registrations: DEFAULT_MAX_REGISTRATIONS,
            linger: DEFAULT_LINGER,
            tombstone_capacity: DEFAULT_TOMBSTONE_CAPACITY,
            accept_local: true,
            local_servers_only: false,
        }
    }
}

/// Counters, all monotonic except the gauges at the end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets handled.
    pub packets: u64,
    /// Packets accepted (allow list).
    pub accepted: u64,
    /// Packets accepted because they go to this host itself.
    pub accepted_local: u64,
    /// Records handed to copiers straight away.
    pub delivered: u64,
    /// Records put in the hold buffer.
    pub held: u64,
    /// Held records delivered when their registration came.
    pub released: u64,
    /// Packets dropped as malformed.
    pub dropped_malformed: u64,
    /// Held records dropped because no registration came in time.
    pub dropped_unregistered: u64,
    /// Held records evicted from a full hold buffer.
    pub dropped_hold_overflow: u64,
    /// Held records evicted because the hold buffer held `hold_bytes` bytes.
    pub dropped_hold_bytes: u64,
    /// Packets of tombstoned tuples dropped.
    pub dropped_recently_unregistered: u64,
    /// Registrations of a tuple already registered by another copier.
    pub register_conflicts: u64,
    /// Registrations refused: server port not guarded.
    pub refused_port: u64,
    /// Registrations refused: IP family not guarded.
    pub refused_family: u64,
    /// Registrations refused: the copier's limit was reached.
    pub refused_limit: u64,
    /// Registrations refused: another live copier instance holds the tuple.
    pub refused_held: u64,
    /// Registrations refused: the server address is not one of this host's.
    pub refused_not_local: u64,
    /// Packets held during a restart grace that would otherwise have been accepted (allow
    /// list or this host's own address).
    pub grace_held: u64,
    /// Gauge: 1 during a restart grace.
    pub grace: u64,
    /// Tombstones evicted from a full set before their linger was over.
    pub tombstones_evicted: u64,
    /// Gauge: registered tuples now.
    pub registrations: u64,
    /// Gauge: records held now.
    pub holding: u64,
    /// Gauge: bytes of the records held now.
    pub holding_bytes: u64,
    /// Gauge: tombstones now.
    pub tombstones: u64,
}

/// What a registration did: a verdict per tuple (in the order given) and the held records
/// now due to the copier. Iterating it yields the released records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registration {
    /// One verdict per registered tuple, in the order of the request.
    pub verdicts: Vec<RegVerdict>,
    /// Held records released by the accepted tuples, in arrival order per tuple.
    pub released: Vec<(CopierId, Record)>,
}

impl Registration {
    /// Whether every tuple was accepted.
    pub fn all_accepted(&self) -> bool {
        self.verdicts.iter().all(|v| v.accepted())
    }
}

impl IntoIterator for Registration {
    type Item = (CopierId, Record);
    type IntoIter = std::vec::IntoIter<(CopierId, Record)>;

    fn into_iter(self) -> Self::IntoIter {
        self.released.into_iter()
    }
}

/// What keeps the router from being quiet (see [`Router::quiet`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Activity {
    /// Registered tuples.
    pub registered: usize,
    /// Held records.
    pub held: usize,
    /// Tombstones.
    pub tombstoned: usize,
}

impl Activity {
    /// Nothing registered, held or tombstoned.
    pub fn is_quiet(&self) -> bool {
        self.registered == 0 && self.held == 0 && self.tombstoned == 0
    }
}

impl fmt::Display for Activity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} registered, {} held, {} recently unregistered",
            self.registered, self.held, self.tombstoned
        )
    }
}

/// Where a registered tuple's records go, and how much of their payload they keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Route {
    copier: CopierId,
    payload: u32,
}

/// The routing table, hold buffer and tombstones; see the module doc.
#[derive(Debug)]
pub struct Router {
    allow: AllowList,
    guard: Guard,
    max_registrations: usize,
    accept_local: bool,
    local_servers_only: bool,
    grace: Option<Grace>,
    local: HashSet<IpAddr>,
    routes: HashMap<FourTuple, Route>,
    per_copier: HashMap<CopierId, usize>,
    /// The copier instance of each connection that announced one (see the module doc).
    instances: HashMap<CopierId, u64>,
    hold: HoldBuffer,
    tombstones: Tombstones,
    clock: Option<Instant>,
    stats: Stats,
}

/// Whether `ip` is a loopback address (127.0.0.0/8, ::1, or ::ffff:127.x.y.z).
fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_loopback(),
        IpAddr::V6(a) => a.is_loopback() || a.to_ipv4_mapped().is_some_and(|m| m.is_loopback()),
    }
}

impl Router {
    /// An empty router.
    pub fn new(config: RouterConfig) -> Router {
        Router {
            allow: config.allow,
            guard: config.guard,
            max_registrations: config.max_registrations,
            accept_local: config.accept_local,
            local_servers_only: config.local_servers_only,
            grace: None,
            local: HashSet::new(),
            routes: HashMap::new(),
            per_copier: HashMap::new(),
            instances: HashMap::new(),
            hold: HoldBuffer::new(config.hold_capacity, config.hold_bytes, config.hold_time),
            tombstones: Tombstones::new(config.tombstone_capacity, config.linger),
            clock: None,
            stats: Stats::default(),
        }
    }

    fn tick(&mut self, now: Instant) {
        self.clock = Some(self.clock.map_or(now, |c| c.max(now)));
    }

    /// Decide about one server -> client IP packet, which may be cut short after its TCP header
    /// (NFQUEUE copy range). `payload_bytes` is the most TCP payload a record keeps; the
    /// tuple's registration may ask for less (none with a plain Register).
    pub fn handle_packet(
        &mut self,
        now: Instant,
        ip_packet: &[u8],
        payload_bytes: usize,
    ) -> Decision {
        self.handle_packet_len(now, ip_packet, ip_packet.len(), payload_bytes)
    }

    /// [`Router::handle_packet`] for a packet of `wire_len` bytes of which `ip_packet` holds
    /// the first ones (NFQUEUE's `NFQA_CAP_LEN`). The record's length comes from the IP header;
    /// `wire_len` fills it in only where the header has none (an IPv4 length field of 0, a
    /// GSO super-segment larger than 64 KB).
    pub fn handle_packet_len(
        &mut self,
        now: Instant,
        ip_packet: &[u8],
        wire_len: usize,
        payload_bytes: usize,
    ) -> Decision {
        self.stats.packets += 1;
        self.expire(now);
        let Ok(mut h) = parse_response_headers(ip_packet) else {
            self.stats.dropped_malformed += 1;
            return Decision::Drop(DropReason::Malformed);
        };
        if h.orig_len == ip_packet.len() && wire_len > ip_packet.len() {
            h.orig_len = wire_len;
        }
        if let Some(&Route { copier, payload }) = self.routes.get(&h.tuple) {
            self.stats.delivered += 1;
            return Decision::Deliver {
                copier,
                record: Record::from_parsed(ip_packet, &h, payload_bytes.min(payload as usize)),
            };
        }
        if self.tombstones.contains(&h.tuple) {
            self.stats.dropped_recently_unregistered += 1;
            return Decision::Drop(DropReason::RecentlyUnregistered);
        }
        let client = h.tuple.client.ip();
        let local = self.accept_local && (is_loopback(client) || self.local.contains(&client));
        if (local || self.allow.contains(client)) && self.in_grace(now) {
            // It may be a copy whose copier has not registered it again yet.
            self.stats.grace_held += 1;
        } else if local {
            self.stats.accepted_local += 1;
            return Decision::Accept;
        } else if self.allow.contains(client) {
            self.stats.accepted += 1;
            return Decision::Accept;
        }
        let record = Record::from_parsed(ip_packet, &h, payload_bytes);
        self.stats.held += 1;
        let evicted = self.hold.push(now, h.tuple, record);
        self.stats.dropped_hold_overflow += evicted.count as u64;
        self.stats.dropped_hold_bytes += evicted.bytes as u64;
        self.stats.holding = self.hold.len() as u64;
        self.stats.holding_bytes = self.hold.bytes() as u64;
        Decision::Held
    }

    /// `copier` registers these sessions, with records of headers only. Each tuple gets a
    /// verdict (see the module doc); accepted ones are routed to `copier` from now on, clear
    /// their tombstone and release their held records; refused ones are left alone.
    pub fn handle_register(
        &mut self,
        now: Instant,
        copier: CopierId,
        tuples: &[FourTuple],
    ) -> Registration {
        self.register_all(now, copier, tuples.iter().map(|t| (*t, 0)))
    }

    /// [`handle_register`](Self::handle_register) where each tuple's records keep up to the
    /// given bytes of TCP payload (within the `payload_bytes` of each packet call). A tuple
    /// registered again by the same copier takes the new amount.
    pub fn handle_register_payload(
        &mut self,
        now: Instant,
        copier: CopierId,
        tuples: &[(FourTuple, u32)],
    ) -> Registration {
        self.register_all(now, copier, tuples.iter().copied())
    }

    fn register_all(
        &mut self,
        now: Instant,
        copier: CopierId,
        tuples: impl ExactSizeIterator<Item = (FourTuple, u32)>,
    ) -> Registration {
        self.tick(now);
        self.expire(now);
        let mut out = Registration {
            verdicts: Vec::with_capacity(tuples.len()),
            released: Vec::new(),
        };
        for (t, payload) in tuples {
            let t = &t;
            let verdict = self.register_one(Route { copier, payload }, t);
            match verdict {
                RegVerdict::Accepted => {
                    self.tombstones.clear(t);
                    for mut r in self.hold.take(t) {
                        r.payload.truncate(payload as usize);
                        out.released.push((copier, r));
                    }
                }
                RegVerdict::PortNotGuarded => self.stats.refused_port += 1,
                RegVerdict::FamilyNotGuarded => self.stats.refused_family += 1,
                RegVerdict::HeldByOther => self.stats.refused_held += 1,
                RegVerdict::ServerNotLocal => self.stats.refused_not_local += 1,
                RegVerdict::LimitReached | RegVerdict::Other(_) => self.stats.refused_limit += 1,
            }
            out.verdicts.push(verdict);
        }
        self.stats.released += out.released.len() as u64;
        self.update_gauges();
        out
    }

    fn register_one(&mut self, route: Route, t: &FourTuple) -> RegVerdict {
        let v = self.guard.verdict(t);
        if !v.accepted() {
            return v;
        }
        if self.local_servers_only && !self.is_local(t.server.ip()) {
            return RegVerdict::ServerNotLocal;
        }
        let copier = route.copier;
        let old = self.routes.get(t).map(|r| r.copier);
        if old == Some(copier) {
            self.routes.insert(*t, route);
            return RegVerdict::Accepted;
        }
        let mine = self.per_copier.get(&copier).copied().unwrap_or(0);
        if mine >= self.max_registrations {
            return RegVerdict::LimitReached;
        }
        if let Some(old) = old {
            let (a, b) = (self.instance_of(old), self.instance_of(copier));
            if a != 0 && b != 0 && a != b {
                return RegVerdict::HeldByOther;
            }
            self.stats.register_conflicts += 1;
            self.uncount(old);
        }
        self.routes.insert(*t, route);
        *self.per_copier.entry(copier).or_insert(0) += 1;
        RegVerdict::Accepted
    }

    /// The copier instance `copier`'s connection announced in its Hello (0: none, an older
    /// copier; it then takes over tuples as before instances existed). Call it before the
    /// connection registers anything; [`Router::handle_copier_gone`] forgets it.
    pub fn set_instance(&mut self, copier: CopierId, instance: u64) {
        if instance == 0 {
            self.instances.remove(&copier);
        } else {
            self.instances.insert(copier, instance);
        }
    }

    fn instance_of(&self, copier: CopierId) -> u64 {
        self.instances.get(&copier).copied().unwrap_or(0)
    }

    fn uncount(&mut self, copier: CopierId) {
        if let Some(n) = self.per_copier.get_mut(&copier) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_copier.remove(&copier);
            }
        }
    }

    fn lay_tombstone(&mut self, t: FourTuple) {
        if let Some(now) = self.clock {
            self.stats.tombstones_evicted += self.tombstones.lay(now, t) as u64;
        }
    }

    /// `copier` is done with these sessions; tuples it does not own are left alone. Each
    /// removed registration becomes a tombstone. Returns how many registrations were removed.
    pub fn handle_unregister(&mut self, copier: CopierId, tuples: &[FourTuple]) -> usize {
        let mut n = 0;
        for t in tuples {
            if self.routes.get(t).is_some_and(|r| r.copier == copier) {
                self.routes.remove(t);
                self.uncount(copier);
                self.lay_tombstone(*t);
                n += 1;
            }
        }
        self.update_gauges();
        n
    }

    /// `copier`'s connection ended: its registrations become tombstones, so the responses
    /// that still come for them are dropped (never held for someone else or accepted); a
    /// copier that reconnects and registers them again takes them back (the test server
    /// retransmits what was dropped meanwhile). Returns how many registrations were removed.
    pub fn handle_copier_gone(&mut self, copier: CopierId) -> usize {
        let gone: Vec<FourTuple> = self
            .routes
            .iter()
            .filter(|(_, r)| r.copier == copier)
            .map(|(t, _)| *t)
            .collect();
        for t in &gone {
            self.routes.remove(t);
            self.lay_tombstone(*t);
        }
        self.per_copier.remove(&copier);
        self.instances.remove(&copier);
        if let Some(g) = &mut self.grace {
            g.waiting.remove(&copier);
        }
        self.update_gauges();
        gone.len()
    }

    fn is_local(&self, ip: IpAddr) -> bool {
        is_loopback(ip) || self.local.contains(&ip)
    }

    /// This intercept is a restart (it found the rules of an earlier one in place): for `len`
    /// from `now` it accepts nothing it cannot prove is no copy (see the module doc).
    pub fn start_grace(&mut self, now: Instant, len: Duration) {
        self.tick(now);
        self.grace = (!len.is_zero()).then(|| Grace {
            until: now + len,
            settle: now + len.min(GRACE_SETTLE),
            waiting: HashSet::new(),
            synced: 0,
        });
        self.stats.grace = u64::from(self.grace.is_some());
    }

    /// `copier` connected during the grace and will say when it is synced (a copier that
    /// announced an instance): the grace does not end early before it did.
    pub fn grace_join(&mut self, copier: CopierId) {
        if let Some(g) = &mut self.grace {
            g.waiting.insert(copier);
        }
    }

    /// `copier` registered every session it held when it connected (`Message::Synced`).
    pub fn handle_synced(&mut self, now: Instant, copier: CopierId) {
        if let Some(g) = &mut self.grace {
            if g.waiting.remove(&copier) {
                g.synced += 1;
            }
        }
        self.in_grace(now);
    }

    /// Whether the restart grace holds at `now` (ending it when it is over).
    pub fn in_grace(&mut self, now: Instant) -> bool {
        let Some(g) = &self.grace else { return false };
        let over = now >= g.until || (now >= g.settle && g.synced > 0 && g.waiting.is_empty());
        if over {
            self.grace = None;
            self.stats.grace = 0;
        }
        !over
    }

    /// This host's own addresses (its interfaces'; loopback is always local). Replaces the
    /// previous set.
    pub fn set_local_addrs(&mut self, addrs: impl IntoIterator<Item = IpAddr>) {
        self.local = addrs.into_iter().collect();
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.hold.next_expiry(), self.tombstones.next_expiry()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Expire held records and tombstones whose time is over; returns how many held records
    /// were dropped.
    pub fn handle_timeout(&mut self, now: Instant) -> usize {
        self.tick(now);
        self.expire(now)
    }

    fn expire(&mut self, now: Instant) -> usize {
        self.tick(now);
        let n = self.hold.expire(now);
        if n > 0 {
            self.stats.dropped_unregistered += n as u64;
        }
        self.tombstones.expire(now);
        self.in_grace(now);
        self.update_gauges();
        n
    }

    fn update_gauges(&mut self) {
        self.stats.registrations = self.routes.len() as u64;
        self.stats.holding = self.hold.len() as u64;
        self.stats.holding_bytes = self.hold.bytes() as u64;
        self.stats.tombstones = self.tombstones.len() as u64;
    }

    /// What is registered, held or tombstoned now (call [`handle_timeout`](Self::handle_timeout)
    /// first to expire what is over). The router is quiet when all three are zero: no response
    /// of a copied or unknown session can still come, so the NFQUEUE rules may go.
    pub fn quiet(&self) -> Activity {
        Activity {
            registered: self.routes.len(),
            held: self.hold.len(),
            tombstoned: self.tombstones.len(),
        }
    }

    /// What the rules guard.
    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Which copier a tuple is registered to.
    pub fn route(&self, tuple: &FourTuple) -> Option<CopierId> {
        self.routes.get(tuple).map(|r| r.copier)
    }

    /// The payload bytes a registered tuple's records keep (before the `payload_bytes` cap).
    pub fn payload_of(&self, tuple: &FourTuple) -> Option<u32> {
        self.routes.get(tuple).map(|r| r.payload)
    }

    /// Whether a tuple is a tombstone now.
    pub fn is_tombstoned(&self, tuple: &FourTuple) -> bool {
        self.tombstones.contains(tuple)
    }

    /// How many registrations `copier` holds.
    pub fn registrations_of(&self, copier: CopierId) -> usize {
        self.per_copier.get(&copier).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
