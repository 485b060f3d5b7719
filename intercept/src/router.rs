//! The intercept's decision logic, sans-IO: for each response packet of the test service, decide
//! whether it goes to a copier (as a [`Record`]), passes (allow list), waits for a registration
//! (hold buffer) or is dropped.
//!
//! Driven by the I/O layer:
//! - [`Router::handle_packet`] for every packet read from NFQUEUE; the packet's kernel verdict is
//!   ACCEPT only for [`Decision::Accept`], DROP for everything else;
//! - [`Router::handle_register`] / [`Router::handle_unregister`] / [`Router::handle_copier_gone`]
//!   for what the control connections say;
//! - [`Router::poll_timeout`] and [`Router::handle_timeout`] to expire held records.
//!
//! Invariants:
//! - routing is by the exact [`FourTuple`] as the test server sees it (client = the response's
//!   destination); no hashing shortcut can hand one copier another's records;
//! - fail closed: a packet that is neither registered nor to an allowed address is never
//!   accepted; its record is held at most `hold_time` and then dropped (counted as
//!   `unregistered`);
//! - a registered session wins over the allow list: nothing of a copied session passes;
//! - the hold buffer is bounded (`hold_capacity`), the oldest record is evicted first (counted as
//!   `hold_overflow`);
//! - a tuple belongs to one copier at a time; a later registration of the same tuple by another
//!   copier takes it over (a reconnecting copier wins over its dead previous connection) and is
//!   counted as a conflict.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::proto::{parse_response_headers, Record};

use crate::allow::AllowList;
use crate::hold::HoldBuffer;

/// Identifies one control connection (one copier connection) for the lifetime of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CopierId(pub u64);

impl fmt::Display for CopierId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "copier#{}", self.0)
    }
}

/// Why a packet (or its record) was dropped without reaching a copier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Not an IPv4/IPv6 TCP packet with whole headers.
    Malformed,
    /// Held, but no copier registered its session in time.
    Unregistered,
    /// Evicted from a full hold buffer.
    HoldOverflow,
    /// The copier's outgoing queue was full (decided by the I/O layer).
    CopierSlow,
    /// The copier went away between the decision and the delivery (decided by the I/O layer).
    CopierGone,
}

impl DropReason {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::Unregistered => "unregistered",
            DropReason::HoldOverflow => "hold_overflow",
            DropReason::CopierSlow => "copier_slow",
            DropReason::CopierGone => "copier_gone",
        }
    }
}

/// What to do with one packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Verdict ACCEPT: the packet goes to an allowed address.
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

/// Settings of a [`Router`].
#[derive(Debug, Clone)]
pub struct RouterConfig {
    /// Client addresses whose responses pass.
    pub allow: AllowList,
    /// How long a record waits for its registration.
    pub hold_time: Duration,
    /// How many records may wait at once.
    pub hold_capacity: usize,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            allow: AllowList::default(),
            hold_time: Duration::from_secs(2),
            hold_capacity: 4096,
        }
    }
}

/// Counters, all monotonic except the two gauges at the end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets handled.
    pub packets: u64,
    /// Packets accepted (allow list).
    pub accepted: u64,
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
    /// Registrations of a tuple already registered by another copier.
    pub register_conflicts: u64,
    /// Gauge: registered tuples now.
    pub registrations: u64,
    /// Gauge: records held now.
    pub holding: u64,
}

/// The routing table and hold buffer; see the module doc.
#[derive(Debug)]
pub struct Router {
    allow: AllowList,
    routes: HashMap<FourTuple, CopierId>,
    hold: HoldBuffer,
    stats: Stats,
}

impl Router {
    /// An empty router.
    pub fn new(config: RouterConfig) -> Router {
        Router {
            allow: config.allow,
            routes: HashMap::new(),
            hold: HoldBuffer::new(config.hold_capacity, config.hold_time),
            stats: Stats::default(),
        }
    }

    /// Decide about one server -> client IP packet, which may be cut short after its TCP header
    /// (NFQUEUE copy range). `payload_bytes` is how much TCP payload a record keeps.
    pub fn handle_packet(
        &mut self,
        now: Instant,
        ip_packet: &[u8],
        payload_bytes: usize,
    ) -> Decision {
        self.stats.packets += 1;
        self.expire(now);
        let Ok(h) = parse_response_headers(ip_packet) else {
            self.stats.dropped_malformed += 1;
            return Decision::Drop(DropReason::Malformed);
        };
        if let Some(&copier) = self.routes.get(&h.tuple) {
            self.stats.delivered += 1;
            return Decision::Deliver {
                copier,
                record: Record::from_parsed(ip_packet, &h, payload_bytes),
            };
        }
        if self.allow.contains(h.tuple.client.ip()) {
            self.stats.accepted += 1;
            return Decision::Accept;
        }
        let record = Record::from_parsed(ip_packet, &h, payload_bytes);
        self.stats.held += 1;
        self.stats.dropped_hold_overflow += self.hold.push(now, h.tuple, record) as u64;
        self.stats.holding = self.hold.len() as u64;
        Decision::Held
    }

    /// `copier` registers these sessions; returns the held records now due to it, in arrival
    /// order per tuple.
    pub fn handle_register(
        &mut self,
        now: Instant,
        copier: CopierId,
        tuples: &[FourTuple],
    ) -> Vec<(CopierId, Record)> {
        self.expire(now);
        let mut out = Vec::new();
        for t in tuples {
            if let Some(old) = self.routes.insert(*t, copier) {
                if old != copier {
                    self.stats.register_conflicts += 1;
                }
            }
            for r in self.hold.take(t) {
                out.push((copier, r));
            }
        }
        self.stats.released += out.len() as u64;
        self.stats.registrations = self.routes.len() as u64;
        self.stats.holding = self.hold.len() as u64;
        out
    }

    /// `copier` is done with these sessions; tuples it does not own are left alone. Returns how
    /// many registrations were removed.
    pub fn handle_unregister(&mut self, copier: CopierId, tuples: &[FourTuple]) -> usize {
        let mut n = 0;
        for t in tuples {
            if self.routes.get(t) == Some(&copier) {
                self.routes.remove(t);
                n += 1;
            }
        }
        self.stats.registrations = self.routes.len() as u64;
        n
    }

    /// `copier`'s connection ended: forget its registrations (their later responses are held,
    /// so a copier that reconnects and registers again within the hold time gets them). Returns
    /// how many registrations were removed.
    pub fn handle_copier_gone(&mut self, copier: CopierId) -> usize {
        let before = self.routes.len();
        self.routes.retain(|_, c| *c != copier);
        self.stats.registrations = self.routes.len() as u64;
        before - self.routes.len()
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.hold.next_expiry()
    }

    /// Expire held records whose time is over; returns how many were dropped.
    pub fn handle_timeout(&mut self, now: Instant) -> usize {
        self.expire(now)
    }

    fn expire(&mut self, now: Instant) -> usize {
        let n = self.hold.expire(now);
        if n > 0 {
            self.stats.dropped_unregistered += n as u64;
            self.stats.holding = self.hold.len() as u64;
        }
        n
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Which copier a tuple is registered to.
    pub fn route(&self, tuple: &FourTuple) -> Option<CopierId> {
        self.routes.get(tuple).copied()
    }
}

#[cfg(test)]
mod tests;
