//! The engine's configuration ([`EngineConfig`], its [`PortMap`]s, [`PortShare`]), the copy plan it
//! stands for ([`EngineConfig::planner`]: a [`shaper::Shaper`] from the profile, or from the
//! flags `copies`, `sample_percent` and `client_ip` as the trivial profile [`FlagPlan`]), and the
//! derived, clamped parameters ([`Params`]) the rest of the engine reads.
//!
//! Invariant: [`Params`] holds only values the engine can work with (MSS >= 64, RTO bounds
//! ordered, caps >= 1), whatever the configuration said; [`EngineConfig::validate`] reports what
//! a caller should refuse before starting.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use shaper::{ClientIpPool, FlagPlan, Shaper};

use super::map::PortMap;

/// What the engine does and how much it may hold.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Services to copy; captured packets matching none are counted and ignored.
    pub maps: Vec<PortMap>,
    /// Baselines (`--baseline-map`, shadow testing): every session of a map with the same
    /// online port and address is also copied, identically, to the baseline's target (one more
    /// copy with the client's address and port, on its own test tuple).
    pub baselines: Vec<PortMap>,
    /// Path MTU toward the test server; segments are cut to fit it.
    pub mtu: u16,
    /// Emit data as super-segments of up to [`GSO_MAX_PAYLOAD`] bytes, each to be cut into
    /// segments of the connection's MSS by the kernel or the NIC (or by the sender when the
    /// path cannot): every `Transmit` then says its `gso_size` (`--gso`). Off: segments of one
    /// MSS, as a client without TSO sends.
    pub gso: bool,
    /// Rewrite client addresses into these ranges (the ranges of each target's family),
    /// sticky per real client and copy.
    pub client_ip: Option<ClientIpPool>,
    /// Copies of every captured session sent to the test server, each on a test 4-tuple of its
    /// own (1: plain copying). Copy 0 keeps the client's address (or its pool address) and,
    /// when free, its port; copy `k` takes the `k`-th pool address after it, or with no pool
    /// the client's address and another port.
    pub copies: u16,
    /// Percentage of the captured sessions that are copied (0 < p <= 100), chosen per session
    /// by a keyed hash of the seed and the client's address and port (see [`FlagPlan`]).
    pub sample_percent: f64,
    /// A session waiting for something outstanding (a request not answered yet, a segment not
    /// acknowledged, the test handshake, the rest of a capture hole, a close to carry) with no
    /// captured packet and no record for this long is abandoned (`timeout`). An *idle* session
    /// (everything captured was sent and answered, nothing outstanding, the client has not
    /// closed: a keep-alive connection between requests) is not: it keeps its slot, and
    /// `max_memory` / `max_sessions` decide which idle sessions go (`idle_shed`), not time.
    pub session_timeout: Duration,
    /// An idle session (see `session_timeout`) with no captured packet and no record for this
    /// long ends (`idle_timeout`); `None`: idle sessions end only when shed or closed.
    pub idle_timeout: Option<Duration>,
    /// How long a session may stay *unproven* (see "Unproven sessions" in the engine's
    /// documentation: no request of the client's seen answered online yet) while it waits to
    /// start mid-stream or sits idle: after that it ends (`unproven_timeout`), so that a flood
    /// of spoofed segments holds no slot for long.
    pub unproven_timeout: Duration,
    /// Global cap on what the engine holds: buffered bytes, plus a fixed cost per session
    /// ([`crate::engine::SESSION_COST`], empty sessions included) and per pending SYN
    /// ([`crate::engine::PENDING_SYN_COST`]); above it the oldest pending SYNs, then the
    /// sessions idle longest, are shed.
    pub max_memory: usize,
    /// Per-session cap on buffered bytes; a session above it fails (`buffer_cap`).
    pub per_session_cap: usize,
    /// Send a request only after the test server answered the previous one (with
    /// `pace_window` > 1: only while at most that many are unanswered).
    pub pace_requests: bool,
    /// With pacing, how many request units a test connection may have sent and not yet seen
    /// answered: 1 is strict lock-step; above 1 the window adapts (it starts at 1, grows by one
    /// with each unit answered, and falls back to 1 when the test server closes with units in
    /// flight or an answer times out; three timeouts keep the session lock-step). Sessions of
    /// server-speaks-first protocols and shaped sessions (`--profile`) are always lock-step.
    pub pace_window: u32,
    /// How long pacing waits for an answer before releasing the next request anyway.
    pub answer_timeout: Duration,
    /// With pacing, a request whose answer from the test server is shorter than the online one
    /// counts as answered once the test server sent some of it and then nothing for this long.
    /// The last request before the client's FIN (or RST) always waits for this quiet, so that
    /// the close does not cut a longer answer short.
    pub answer_quiet: Duration,
    /// How long the acknowledgement of a test server segment may wait for a segment of ours to
    /// ride on (the next request, usually), like a client's delayed ACK. Only one segment is
    /// ever left unacknowledged (a second, a FIN, a hole or a repeat is acknowledged at once:
    /// with two segments out, a Linux server's tail-loss probe would fire after about two round
    /// trips); a connection whose delay ran out once acknowledges at once from then on. Zero:
    /// every segment is acknowledged at once.
    pub ack_delay: Duration,
    /// Retransmission timeout before any RTT sample.
    pub initial_rto: Duration,
    /// Lower bound of the computed retransmission timeout.
    pub min_rto: Duration,
    /// Upper bound of the retransmission timeout (the cap of the exponential backoff).
    pub max_rto: Duration,
    /// Retransmissions of the same data (or SYN) before the session fails (`retransmit_limit`).
    pub max_retries: u32,
    /// How long a test connection we reset, or closed first, stays registered, to answer the
    /// test server's retransmitted FIN or challenge ACK (one the test server closed first ends
    /// when our FIN is acknowledged: nothing of the test server's needs an answer after that).
    pub close_linger: Duration,
    /// Most sessions in the table (including ones waiting to synchronise; not those done and
    /// only lingering); when full, room for a new one is made in this order: unproven
    /// candidates waiting to start mid-stream, then (for a session that starts with a
    /// handshake or resumes) idle unproven, idle proven, busy unproven ones (`unproven_shed`,
    /// `idle_shed`), each quiet longest first; a busy proven session is
    /// never shed for a new one, which is dropped instead (`table_full`). A new mid-stream
    /// candidate takes only another candidate's room.
    pub max_sessions: usize,
    /// How long a captured SYN waits for the client's handshake ACK (or first data) before it
    /// is forgotten; a retransmission of the SYN starts the wait again. No test session starts
    /// before the handshake completes.
    pub syn_timeout: Duration,
    /// Most captured SYNs waiting for their handshake at once; the oldest goes when full.
    pub max_pending_syns: usize,
    /// Per-session cap on client bytes held out of order.
    pub max_out_of_order: usize,
    /// Bytes of an acknowledged but unanswered request kept to replay it on a new connection
    /// when the test server closes.
    pub replay_keep: usize,
    /// Receive window advertised to the test server, in bytes (we acknowledge at once).
    pub recv_window: u32,
    /// New connections opened for one session without an answer in between, before it fails
    /// (`reconnect_limit`).
    pub max_reconnects: u32,
    /// TTL / hop limit of what the engine sends.
    pub ttl: u8,
    /// The share of test-side client ports this engine may use (several engines at once, one
    /// per `--workers` thread); the whole range by default.
    pub port_share: PortShare,
    /// Salts the random choice of test ports (not the sampling, not the pool address): the
    /// copier's instance, random per process, so that copiers started with one `--seed` do
    /// not draw the same ports in the same order. 0 (the default): the seed alone.
    pub port_salt: u64,
    /// A shaping profile (`--profile`): when set, the copies of each captured session (their
    /// number, virtual client addresses and ports, and when their requests may go) come from
    /// a [`shaper::Shaper`] built from it and the engine seed, and `copies`, `sample_percent`
    /// and `client_ip` must stay at their defaults.
    pub profile: Option<std::sync::Arc<shaper::Profile>>,
    /// Maps with several weighted test servers (`--map 80=T1:80@3,T2:80@1`); a map not named
    /// here has its one `target`. See [`MapTargets`](super::MapTargets).
    pub spread: Vec<super::targets::MapTargets>,
    /// When a test server counts as down and how often a down one is probed.
    pub health: super::targets::HealthConfig,
    /// How many intercepts guard each test server address when registrations are routed by
    /// server (`crate::routing`); empty: every intercept guards every server. A registration
    /// fails once that many (at most as many as are connected) refused it.
    pub intercepts_for: Vec<(IpAddr, usize)>,
    /// Keep a row per request unit sent for a run trace (`Engine::poll_unit`).
    pub trace: bool,
    /// Request rules (`--rules`): filters, the dye header, header edits and request-line
    /// rewrites, applied to every copy's requests (see `engine::edit`).
    pub rules: Option<std::sync::Arc<super::rules::Rules>>,
}

/// A share of the test-side client port space: the ports `p` with `(p >> 1) % count == index`
/// (pairs of neighbouring ports, taken in turn), within the copier's fleet range (`fleet`).
///
/// With several engines copying at once (one per worker thread), each gets its own share, so
/// two engines can never pick the same test 4-tuple, whatever the client pool maps together.
/// The capture's fanout group hands worker `i` exactly the connections whose client port is in
/// share `i` (see [`crate::bpf::fanout_program`]), so an engine keeps the client's own port as
/// with one engine; it picks a port of its share when the client's is taken (or for a copy or
/// a new connection). Pairs rather than `p % count`: Linux clients favour ports of one parity,
/// which would put them all in one share of two. With `count == 1` (one engine) and no fleet
/// every port is in the share and the engine behaves exactly as without shares.
///
/// Several copiers of one fleet (`--fleet I/N`) split the range first: copier `I` keeps the
/// `I`-th of `N` contiguous runs of port pairs ([`FleetShare`]), and its workers' shares are
/// taken within that run, so no two engines of the whole fleet share a test port, whatever
/// each copier's `--workers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortShare {
    /// This engine's share, `0..count`.
    pub index: u16,
    /// Number of shares (engines).
    pub count: u16,
    /// The run of ports of this engine's copier in its fleet (the whole range by default).
    pub fleet: FleetShare,
}

/// A copier's part of the test-side client ports in a fleet of copiers (`--fleet I/N`): the
/// `index`-th of `size` contiguous runs of port pairs of 1024..=65535 (pairs `512..=32767`,
/// split as evenly as they go). Copiers of one fleet see the same clients (one configuration,
/// one seed, clients behind one address) and would otherwise pick the same test 4-tuple for
/// the same client address and port; with disjoint runs they never do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetShare {
    /// This copier, `0..size`.
    pub index: u16,
    /// Copiers in the fleet (1: no fleet, the whole range).
    pub size: u16,
}

impl Default for FleetShare {
    fn default() -> Self {
        FleetShare { index: 0, size: 1 }
    }
}

impl FleetShare {
    /// Whether this is a real split (more than one copier).
    #[must_use]
    pub fn is_split(self) -> bool {
        self.size > 1
    }

    /// The port pairs of this copier: `lo..=hi` (`lo > hi`: none, a fleet larger than the
    /// pairs).
    #[must_use]
    pub fn pairs(self) -> (u32, u32) {
        common::proto::fleet_pairs(self.index, self.size)
    }

    /// The ports of this copier: `first..=last` (empty when `first > last`).
    #[must_use]
    pub fn ports(self) -> (u32, u32) {
        let (lo, hi) = self.pairs();
        (2 * lo, 2 * hi + 1)
    }

    /// Whether two copiers' runs share a port.
    #[must_use]
    pub fn overlaps(self, other: FleetShare) -> bool {
        let (a, b) = (self.pairs(), other.pairs());
        a.0 <= a.1 && b.0 <= b.1 && a.0 <= b.1 && b.0 <= a.1
    }
}

impl std::fmt::Display for FleetShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.size)
    }
}

impl PortShare {
    /// Share `index` of `count` engines of a copier outside any fleet.
    #[must_use]
    pub fn new(index: u16, count: u16) -> PortShare {
        PortShare {
            index,
            count,
            fleet: FleetShare::default(),
        }
    }

    /// The share clamped to one that exists (at least one share; the index wrapped into them).
    #[must_use]
    pub(crate) fn clamped(self) -> PortShare {
        let count = self.count.max(1);
        let size = self.fleet.size.max(1);
        PortShare {
            index: self.index % count,
            count,
            fleet: FleetShare {
                index: self.fleet.index % size,
                size,
            },
        }
    }
}

impl Default for PortShare {
    fn default() -> Self {
        PortShare::new(0, 1)
    }
}

impl PortShare {
    /// Whether `port` is in this share.
    #[must_use]
    pub fn contains(self, port: u16) -> bool {
        let pair = u32::from(port >> 1);
        if self.fleet.is_split() {
            let (lo, hi) = self.fleet.pairs();
            if pair < lo || pair > hi {
                return false;
            }
        }
        self.count <= 1 || pair % u32::from(self.count) == u32::from(self.index)
    }

    /// The first port pair (`port >> 1`) of the share in its fleet run of 1024..=65535, and
    /// how many pairs it holds there (every `count`-th pair from the first; 0 when none).
    fn span(self) -> (u32, u32) {
        let c = u32::from(self.count.max(1));
        let (lo, hi) = self.fleet.pairs();
        let first = lo + (u32::from(self.index) % c + c - lo % c) % c;
        if first > hi {
            return (first, 0);
        }
        (first, (hi - first) / c + 1)
    }

    /// The `j`-th port of the share in 1024..=65535 (`j < size()`).
    fn nth(self, j: u32) -> u16 {
        let (first, _) = self.span();
        let c = u32::from(self.count.max(1));
        (2 * (first + c * (j / 2)) + j % 2) as u16
    }

    /// How many ports of 1024..=65535 the share holds.
    pub fn size(self) -> u32 {
        2 * self.span().1
    }

    /// A random port of this share in 1024..=65535 (a share with no port: 1024; see
    /// [`EngineConfig::validate`]).
    pub(crate) fn random(self, rng: &mut impl rand::Rng) -> u16 {
        if self.count <= 1 && !self.fleet.is_split() {
            return rng.random_range(1024..=65535);
        }
        match self.size() {
            0 => 1024,
            n => self.nth(rng.random_range(0..n)),
        }
    }

    /// Every port of the share in 1024..=65535 once, from `start` (a port of the share) on,
    /// wrapping around.
    pub(crate) fn walk(self, start: u16) -> impl Iterator<Item = u16> {
        let (first, _) = self.span();
        let c = u32::from(self.count.max(1));
        let size = self.size();
        let at = match size {
            0 => 0,
            _ => {
                (u32::from(start >> 1).saturating_sub(first) / c * 2 + u32::from(start & 1)) % size
            }
        };
        (0..size).map(move |i| self.nth((at + i) % size))
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            maps: Vec::new(),
            baselines: Vec::new(),
            mtu: 1500,
            gso: false,
            client_ip: None,
            copies: 1,
            sample_percent: 100.0,
            session_timeout: Duration::from_secs(120),
            idle_timeout: None,
            unproven_timeout: DEFAULT_UNPROVEN_TIMEOUT,
            max_memory: 512 << 20,
            per_session_cap: 16 << 20,
            pace_requests: true,
            pace_window: DEFAULT_PACE_WINDOW,
            answer_timeout: Duration::from_secs(3),
            answer_quiet: Duration::from_millis(50),
            ack_delay: DEFAULT_ACK_DELAY,
            initial_rto: Duration::from_millis(300),
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(10),
            max_retries: 8,
            close_linger: Duration::from_secs(5),
            max_sessions: DEFAULT_MAX_SESSIONS,
            syn_timeout: Duration::from_secs(5),
            max_pending_syns: 1 << 16,
            max_out_of_order: 256 << 10,
            replay_keep: 64 << 10,
            recv_window: 4 << 20,
            max_reconnects: 4,
            ttl: 64,
            port_share: PortShare::default(),
            port_salt: 0,
            profile: None,
            spread: Vec::new(),
            health: super::targets::HealthConfig::default(),
            intercepts_for: Vec::new(),
            trace: false,
            rules: None,
        }
    }
}

/// Default of [`EngineConfig::unproven_timeout`].
pub const DEFAULT_UNPROVEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Default of [`EngineConfig::max_sessions`]: within what the default `max_memory` (512 MiB)
/// holds of empty sessions at [`crate::engine::SESSION_COST`] each (about 1.5 KB on x86_64:
/// some 350,000).
pub const DEFAULT_MAX_SESSIONS: usize = 200_000;

/// Default of [`EngineConfig::ack_delay`]: Linux's shortest delayed ACK.
pub const DEFAULT_ACK_DELAY: Duration = Duration::from_millis(40);
/// Largest [`EngineConfig::ack_delay`] used: a Linux server probes a single unacknowledged
/// segment after its minimum RTO (200 ms) plus two smoothed round trips.
pub const MAX_ACK_DELAY: Duration = Duration::from_millis(100);

/// Default of [`EngineConfig::pace_window`]: enough units in flight for one connection at
/// tens of thousands of requests a second over a pacing round trip of a millisecond or two.
pub const DEFAULT_PACE_WINDOW: u32 = 64;

/// Fewest test ports an engine's share may hold (per client address and test server): below,
/// [`EngineConfig::validate`] refuses the fleet and worker split.
pub const MIN_SHARE_PORTS: u32 = 64;

/// Below this many test ports per engine (per client address and test server), a fleet split
/// deserves a warning at start: a client address with that many connections at once (clients
/// behind one NAT or load balancer) finds no free test tuple (`no_tuple`).
pub const FEW_SHARE_PORTS: u32 = 4096;

/// Largest [`EngineConfig::pace_window`] accepted.
pub const MAX_PACE_WINDOW: u32 = 1024;

/// A configuration the engine would have to bend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// No `--map` given.
    #[error("no port map: nothing to copy")]
    NoMaps,
    /// The MTU leaves no room for a useful segment.
    #[error("MTU {0} is too small (at least 576 for IPv4, 1280 for IPv6)")]
    MtuTooSmall(u16),
    /// A map's target has a family the client address pool has no range of.
    #[error("client pool {pool} has no range of the IP family of target {target}")]
    FamilyMismatch {
        /// The map's target.
        target: SocketAddr,
        /// The pool.
        pool: ClientIpPool,
    },
    /// A cap is zero.
    #[error("{0} must be above zero")]
    Zero(&'static str),
    /// The pacing window is above [`MAX_PACE_WINDOW`].
    #[error("pace window {0} is above the largest accepted, {MAX_PACE_WINDOW}")]
    PaceWindow(u32),
    /// The sample percentage is not in (0, 100].
    #[error("sample percentage {0} is not above 0 and at most 100")]
    Sample(String),
    /// The fleet share is not one of its fleet (`--fleet I/N` with `I >= N`).
    #[error("--fleet {index}/{size}: copier {index} does not exist in a fleet of {size} (0 to {last})", last = size.saturating_sub(1))]
    Fleet {
        /// The copier asked for.
        index: u16,
        /// Copiers in the fleet.
        size: u16,
    },
    /// The fleet and the workers leave an engine too few test ports.
    #[error("--fleet {fleet} with --workers {workers} leaves each engine {ports} test ports per client address and test server: too few; use a smaller fleet or fewer workers")]
    FleetTooLarge {
        /// The fleet share.
        fleet: FleetShare,
        /// Engines of this copier.
        workers: u16,
        /// Ports per engine.
        ports: u32,
    },
    /// The port share is not one of its count.
    #[error("port share {index} of {count} does not exist")]
    PortShare {
        /// The share asked for.
        index: u16,
        /// Number of shares.
        count: u16,
    },
}

impl EngineConfig {
    /// What a caller should refuse before starting. The engine itself clamps instead.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.maps.is_empty() {
            return Err(ConfigError::NoMaps);
        }
        let v6 = self.maps.iter().any(|m| m.target.is_ipv6());
        if self.mtu < 576 || (v6 && self.mtu < 1280) {
            return Err(ConfigError::MtuTooSmall(self.mtu));
        }
        if let Some(pool) = &self.client_ip {
            for m in &self.maps {
                if !pool.serves(m.target.is_ipv6()) {
                    return Err(ConfigError::FamilyMismatch {
                        target: m.target,
                        pool: pool.clone(),
                    });
                }
            }
        }
        for (name, v) in [
            ("max_memory", self.max_memory),
            ("per_session_cap", self.per_session_cap),
            ("max_sessions", self.max_sessions),
            ("max_pending_syns", self.max_pending_syns),
            ("copies", usize::from(self.copies)),
            ("pace_window", self.pace_window as usize),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        if self.pace_window > MAX_PACE_WINDOW {
            return Err(ConfigError::PaceWindow(self.pace_window));
        }
        if !(self.sample_percent > 0.0 && self.sample_percent <= 100.0) {
            return Err(ConfigError::Sample(self.sample_percent.to_string()));
        }
        let PortShare {
            index,
            count,
            fleet,
        } = self.port_share;
        if count == 0 || index >= count {
            return Err(ConfigError::PortShare { index, count });
        }
        if fleet.size == 0 || fleet.index >= fleet.size {
            return Err(ConfigError::Fleet {
                index: fleet.index,
                size: fleet.size,
            });
        }
        let ports = self.port_share.size();
        if ports < MIN_SHARE_PORTS {
            return Err(ConfigError::FleetTooLarge {
                fleet,
                workers: count,
                ports,
            });
        }
        Ok(())
    }
}

impl EngineConfig {
    /// The copy planner of this configuration under `seed`: the profile's shaper, or the
    /// trivial profile of the flags (`copies`, `sample_percent`, `client_ip`). Every engine of
    /// a run builds it from the same seed, so all plan alike. A profile that does not build
    /// (refused by the caller's validation) plans as the flags say.
    #[must_use]
    pub fn planner(&self, seed: u64) -> Shaper {
        let flags = || {
            let plan = FlagPlan {
                copies: self.copies.max(1),
                sample_percent: self.sample_percent,
                client_ip: self.client_ip.clone(),
            };
            Shaper::from_flags(plan, seed)
        };
        match self.profile.as_deref() {
            Some(p) => Shaper::new(p, seed).unwrap_or_else(|_| flags()),
            None => flags(),
        }
    }
}

/// Most payload bytes of one super-segment (`EngineConfig::gso`): whole segments of the MSS
/// that fit in it, so that the IP packet (at most 120 bytes of IPv6/IPv4 and TCP headers with
/// options) stays under the 64 KiB an IP length field and the kernel's GSO take.
pub const GSO_MAX_PAYLOAD: u32 = 65_535 - 120;

/// Clamped parameters, derived once from [`EngineConfig`].
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub maps: Vec<PortMap>,
    pub baselines: Vec<PortMap>,
    /// MSS we announce: MTU minus IPv4 and TCP headers.
    pub mss_v4: u16,
    /// MSS we announce over IPv6.
    pub mss_v6: u16,
    /// Super-segments on (`EngineConfig::gso`).
    pub gso: bool,
    pub session_timeout: Duration,
    pub idle_timeout: Option<Duration>,
    pub unproven_timeout: Duration,
    pub max_memory: usize,
    pub per_session_cap: usize,
    pub pace: bool,
    /// Most request units in flight per test connection with pacing (at least 1).
    pub pace_window: u32,
    pub answer_timeout: Duration,
    pub answer_quiet: Duration,
    pub ack_delay: Duration,
    pub initial_rto: Duration,
    pub min_rto: Duration,
    pub max_rto: Duration,
    pub max_retries: u32,
    pub linger: Duration,
    pub max_sessions: usize,
    pub syn_timeout: Duration,
    pub max_pending_syns: usize,
    pub max_ooo: usize,
    pub replay_keep: u32,
    /// Window scale we announce.
    pub wscale: u8,
    /// Window field of every non-SYN segment (already shifted by `wscale`).
    pub window: u16,
    pub max_reconnects: u32,
    pub ttl: u8,
    pub rules: Option<std::sync::Arc<super::rules::Rules>>,
}

impl Params {
    pub(crate) fn new(c: &EngineConfig) -> Params {
        let mtu = c.mtu.max(128);
        let min_rto = c.min_rto.max(Duration::from_millis(1));
        let max_rto = c.max_rto.max(min_rto);
        let wscale = 7u8;
        let window = (c.recv_window >> wscale).clamp(1, 65535) as u16;
        Params {
            maps: c.maps.clone(),
            baselines: c.baselines.clone(),
            mss_v4: (mtu - 40).max(64),
            mss_v6: mtu.saturating_sub(60).max(64),
            gso: c.gso,
            session_timeout: c.session_timeout.max(Duration::from_millis(1)),
            idle_timeout: c.idle_timeout.map(|t| t.max(Duration::from_millis(1))),
            unproven_timeout: c.unproven_timeout.max(Duration::from_millis(1)),
            max_memory: c.max_memory.max(1),
            per_session_cap: c.per_session_cap.max(1),
            pace: c.pace_requests,
            pace_window: c.pace_window.clamp(1, MAX_PACE_WINDOW),
            answer_timeout: c.answer_timeout,
            answer_quiet: c.answer_quiet.min(c.answer_timeout),
            // Below the 200 ms a Linux server waits before probing one unacknowledged segment.
            ack_delay: c.ack_delay.min(MAX_ACK_DELAY),
            initial_rto: c.initial_rto.clamp(min_rto, max_rto),
            min_rto,
            max_rto,
            max_retries: c.max_retries,
            linger: c.close_linger,
            max_sessions: c.max_sessions.max(1),
            syn_timeout: c.syn_timeout.max(Duration::from_millis(1)),
            max_pending_syns: c.max_pending_syns.max(1),
            max_ooo: c.max_out_of_order,
            replay_keep: u32::try_from(c.replay_keep).unwrap_or(u32::MAX),
            wscale,
            window,
            max_reconnects: c.max_reconnects,
            ttl: c.ttl.max(1),
            rules: c.rules.clone(),
        }
    }

    /// The baseline target of `map` (`--baseline-map` of the same online port and address).
    pub(crate) fn baseline_for(&self, map: &PortMap) -> Option<SocketAddr> {
        self.baselines
            .iter()
            .find(|b| b.online_port == map.online_port && b.online_ip == map.online_ip)
            .map(|b| b.target)
    }

    /// The map a captured packet toward `dst` falls under: of the maps matching its port and
    /// address, the first whose target has `dst`'s family (`--map 80=T4 --map 80=T6`), else the
    /// first (a family change, possible only through a client pool).
    pub(crate) fn map_for(&self, dst: SocketAddr) -> Option<&PortMap> {
        let mut fits = self
            .maps
            .iter()
            .filter(|m| m.online_port == dst.port() && m.online_ip.is_none_or(|ip| ip == dst.ip()));
        let first = fits.next()?;
        if first.target.is_ipv6() == dst.is_ipv6() {
            return Some(first);
        }
        fits.find(|m| m.target.is_ipv6() == dst.is_ipv6())
            .or(Some(first))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(port: u16, target: &str) -> PortMap {
        PortMap {
            online_ip: None,
            online_port: port,
            target: target.parse().unwrap(),
        }
    }

    #[test]
    fn map_for_prefers_the_clients_family() {
        let (t4, t6) = ("198.18.2.2:80", "[fd00:198:18:2::2]:80");
        for maps in [
            vec![map(80, t4), map(80, t6)],
            vec![map(80, t6), map(80, t4)],
        ] {
            let p = Params::new(&EngineConfig {
                maps,
                ..EngineConfig::default()
            });
            let to4: SocketAddr = "198.18.1.1:80".parse().unwrap();
            let to6: SocketAddr = "[fd00:198:18:1::1]:80".parse().unwrap();
            assert_eq!(p.map_for(to4).unwrap().target, t4.parse().unwrap());
            assert_eq!(p.map_for(to6).unwrap().target, t6.parse().unwrap());
            assert!(p.map_for("198.18.1.1:81".parse().unwrap()).is_none());
        }
        // One map only: both families fall under it (the engine then needs a client pool of
        // the target's family, or counts a family mismatch).
        let p = Params::new(&EngineConfig {
            maps: vec![map(80, t4)],
            ..EngineConfig::default()
        });
        assert_eq!(
            p.map_for("[fd00:198:18:1::1]:80".parse().unwrap())
                .unwrap()
                .target,
            t4.parse().unwrap()
        );
    }

    #[test]
    fn port_shares_split_the_range() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        for count in [1u16, 2, 3, 7, 64] {
            for index in 0..count {
                let share = PortShare::new(index, count);
                let mut lo = u16::MAX;
                let mut hi = 0;
                for _ in 0..5000 {
                    let p = share.random(&mut rng);
                    assert!(p >= 1024 && share.contains(p), "{p} not in {share:?}");
                    for other in (0..count).filter(|&o| o != index) {
                        assert!(!PortShare::new(other, count).contains(p));
                    }
                    lo = lo.min(p);
                    hi = hi.max(p);
                }
                // The whole range is used, not only its start.
                assert!(
                    lo < 1024 + 64 * count && hi > 65535 - 64 * count,
                    "{share:?}: {lo}..{hi}"
                );
            }
        }
        // size and walk cover exactly the share, walk from its start, once each.
        for count in [1u16, 2, 3, 7] {
            for index in 0..count {
                let share = PortShare::new(index, count);
                let all: Vec<u16> = (1024..=65535).filter(|&p| share.contains(p)).collect();
                assert_eq!(share.size() as usize, all.len(), "{share:?}");
                let start = all[all.len() / 3 + 1];
                let walked: Vec<u16> = share.walk(start).collect();
                assert_eq!(walked[0], start);
                let mut sorted = walked.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, all, "{share:?}");
            }
        }
        // Even ports only (as Linux clients pick them) still spread over two shares.
        let even_in_0 = (40000..40400)
            .step_by(2)
            .filter(|&p| PortShare::new(0, 2).contains(p))
            .count();
        assert_eq!(even_in_0, 100);
        let bad = EngineConfig {
            maps: vec![map(80, "198.18.2.2:80")],
            port_share: PortShare::new(2, 2),
            ..EngineConfig::default()
        };
        assert!(matches!(bad.validate(), Err(ConfigError::PortShare { .. })));
    }

    proptest::proptest! {
        /// The engines of a fleet (N copiers, each with its own --workers) split the test ports
        /// 1024..=65535: every port is in exactly one engine's share, every share draws and
        /// walks only its own ports, and the shares' sizes add up to the whole range.
        #[test]
        fn fleet_shares_never_overlap(
            workers in proptest::collection::vec(1u16..=8, 1..=40),
            ports in proptest::collection::vec(1024u16..=65535, 64),
            seed in proptest::prelude::any::<u64>(),
        ) {
            use rand::SeedableRng;
            let size = workers.len() as u16;
            let engines: Vec<PortShare> = workers
                .iter()
                .enumerate()
                .flat_map(|(f, &w)| (0..w).map(move |i| PortShare { index: i, count: w, fleet: FleetShare { index: f as u16, size } }))
                .collect();
            for &p in &ports {
                let n = engines.iter().filter(|e| e.contains(p)).count();
                proptest::prop_assert_eq!(n, 1, "port {} in {} shares", p, n);
            }
            let total: u32 = engines.iter().map(|e| e.size()).sum();
            proptest::prop_assert_eq!(total, 64512);
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
            for e in &engines {
                for _ in 0..8 {
                    let p = e.random(&mut rng);
                    proptest::prop_assert!(e.contains(p), "{} drawn outside {:?}", p, e);
                    for o in engines.iter().filter(|o| *o != e) {
                        proptest::prop_assert!(!o.contains(p), "{} of {:?} also in {:?}", p, e, o);
                    }
                }
                let first = e.walk(e.random(&mut rng)).take(3).collect::<Vec<_>>();
                proptest::prop_assert!(first.iter().all(|&p| e.contains(p)));
            }
            // Copiers' runs overlap only with themselves.
            for a in 0..size {
                for b in 0..size {
                    let (x, y) = (FleetShare { index: a, size }, FleetShare { index: b, size });
                    proptest::prop_assert_eq!(x.overlaps(y), a == b);
                }
            }
        }
    }

    #[test]
    fn a_fleet_too_large_for_its_workers_is_refused_naming_the_flags() {
        let c = |index, size, workers| EngineConfig {
            maps: vec![map(80, "198.18.2.2:80")],
            port_share: PortShare {
                index: 0,
                count: workers,
                fleet: FleetShare { index, size },
            },
            ..EngineConfig::default()
        };
        assert!(c(3, 4, 2).validate().is_ok());
        assert!(matches!(
            c(4, 4, 1).validate(),
            Err(ConfigError::Fleet { index: 4, size: 4 })
        ));
        let e = c(0, 1000, 64).validate().unwrap_err();
        assert!(matches!(e, ConfigError::FleetTooLarge { .. }), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains("--fleet 0/1000") && text.contains("--workers 64"),
            "{text}"
        );
        // The runs: copier 1 of 4 has the second quarter of the ports.
        assert_eq!(FleetShare { index: 1, size: 4 }.ports(), (17152, 33279));
        assert_eq!(FleetShare::default().ports(), (1024, 65535));
    }
}
