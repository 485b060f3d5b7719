//! Virtual users: pools, weighted choice, and the NAT-like translation table.
//!
//! Owns: address ranges ([`Cidr`]), the truncated normal and empirical laws of activity and
//! think-time weights, Vose alias tables for O(1) weighted choice, the [`UserTable`] built from
//! pools (a pool is chosen by its weight, then a user of that pool in proportion to activity),
//! its CSV form, and the [`NatTable`] that maps a real client to a virtual user (sticky) and each
//! copied session to a virtual `(address, port)`.
//!
//! Invariants: every user's address lies in its pool's range and no two users of one table share
//! an address unless their pools' ranges overlap; in a [`NatTable`] no two live sessions hold the
//! same virtual `(address, port)` (so the 4-tuple at the test server is unique, the server end
//! being fixed); entries live for `lifetime` after their last use, on the caller's clock, which
//! must not go backwards (an earlier `now` is treated as the latest one seen).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use rand::Rng;
use rand_distr::{Distribution, Normal};

use crate::hash;

/// Errors of this module.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UsersError {
    /// An address range could not be parsed.
    #[error("bad address range {0:?}: expected ADDR/PREFIX, e.g. 198.18.0.0/16")]
    BadCidr(String),
    /// A pool asks for more users than its range has addresses.
    #[error("pool {pool:?}: {users} users do not fit in {cidr} ({usable} usable addresses)")]
    RangeTooSmall {
        /// The pool's name.
        pool: String,
        /// Users asked for.
        users: u64,
        /// The range.
        cidr: String,
        /// Addresses available.
        usable: u128,
    },
    /// A weight list is empty, or has a negative, non-finite or all-zero weight.
    #[error("weights must be finite, >= 0 and not all 0")]
    BadWeights,
    /// A truncated normal is out of range.
    #[error("truncated normal: {0}")]
    BadNormal(String),
    /// No free port is left on a virtual address.
    #[error("no free port on {0} in the configured range")]
    PortsExhausted(IpAddr),
    /// A users CSV line could not be read.
    #[error("users CSV line {line}: {msg}")]
    Csv {
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        msg: String,
    },
}

/// An address range `ADDR/PREFIX`, IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    base: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The range's first address (host bits cleared).
    pub fn base(&self) -> IpAddr {
        self.base
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    fn bits(&self) -> u8 {
        if self.base.is_ipv4() {
            32
        } else {
            128
        }
    }

    /// The number of addresses in the range.
    pub fn size(&self) -> u128 {
        let host = u32::from(self.bits() - self.prefix);
        if host >= 128 {
            u128::MAX
        } else {
            1u128 << host
        }
    }

    /// Addresses handed to users: IPv4 ranges of 4 or more skip the network and broadcast
    /// addresses, IPv6 ranges of 2 or more skip the first (subnet-router anycast) address.
    pub fn usable(&self) -> u128 {
        let size = self.size();
        match (self.base.is_ipv4(), size) {
            (true, s) if s >= 4 => s - 2,
            (false, s) if s >= 2 => s - 1,
            (_, s) => s,
        }
    }

    /// The `i`-th usable address, `None` past the end.
    pub fn nth_usable(&self, i: u128) -> Option<IpAddr> {
        if i >= self.usable() {
            return None;
        }
        let skip = u128::from(self.usable() != self.size());
        let off = i + skip;
        Some(match self.base {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a).wrapping_add(off as u32))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a).wrapping_add(off))),
        })
    }

    /// Whether `addr` lies in the range.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let host = u32::from(self.bits() - self.prefix);
        match (self.base, addr) {
            (IpAddr::V4(b), IpAddr::V4(a)) => {
                host >= 32 || (u32::from(a) >> host) == (u32::from(b) >> host)
            }
            (IpAddr::V6(b), IpAddr::V6(a)) => {
                host >= 128 || (u128::from(a) >> host) == (u128::from(b) >> host)
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = UsersError;
    fn from_str(s: &str) -> Result<Cidr, UsersError> {
        let bad = || UsersError::BadCidr(s.to_string());
        let (a, p) = s.trim().split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let prefix: u8 = p.parse().map_err(|_| bad())?;
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > bits {
            return Err(bad());
        }
        let host = u32::from(bits - prefix);
        let base = match addr {
            IpAddr::V4(a) => {
                let mask = if host >= 32 { 0 } else { u32::MAX << host };
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) => {
                let mask = if host >= 128 { 0 } else { u128::MAX << host };
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
        };
        Ok(Cidr { base, prefix })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

/// The standard normal cdf, via the complementary error function (Numerical Recipes' erfc
/// Chebyshev fit, relative error below 1.2e-7 everywhere).
pub fn normal_cdf(z: f64) -> f64 {
    let x = -z / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * x.abs());
    let poly = -x * x - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc_abs = t * poly.exp();
    let erfc = if x >= 0.0 { erfc_abs } else { 2.0 - erfc_abs };
    0.5 * erfc
}

/// A normal law `N(mean, variance)` restricted to `[min, max]` (the parameters are those of the
/// normal before truncation, as in the published measurements: mean 1, variance 12.5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TruncatedNormal {
    mean: f64,
    sd: f64,
    min: f64,
    max: f64,
    normal: Normal<f64>,
}

impl TruncatedNormal {
    /// The smallest probability mass `[min, max]` may hold: below it, rejection sampling would
    /// spin for too long, and the law is almost surely not what was meant.
    pub const MIN_MASS: f64 = 1e-3;

    /// `N(mean, variance)` truncated to `[min, max]`, with `variance >= 0` and `min < max`
    /// (`variance = 0` is a constant, which must lie in the range).
    pub fn new(
        mean: f64,
        variance: f64,
        min: f64,
        max: f64,
    ) -> Result<TruncatedNormal, UsersError> {
        let bad = |m: String| Err(UsersError::BadNormal(m));
        if !(mean.is_finite() && variance.is_finite() && variance >= 0.0) {
            return bad(format!(
                "mean {mean} and variance {variance} must be finite, variance >= 0"
            ));
        }
        if !(min < max) {
            return bad(format!("min {min} must be < max {max}"));
        }
        let sd = variance.sqrt();
        let mass = if sd == 0.0 {
            f64::from(u8::from((min..=max).contains(&mean)))
        } else {
            normal_cdf((max - mean) / sd) - normal_cdf((min - mean) / sd)
        };
        if mass < Self::MIN_MASS {
            return bad(format!(
                "[{min}, {max}] holds {mass:.2e} of N({mean}, {variance}): below {}",
                Self::MIN_MASS
            ));
        }
        let normal = Normal::new(mean, sd).map_err(|e| UsersError::BadNormal(e.to_string()))?;
        Ok(TruncatedNormal {
            mean,
            sd,
            min,
            max,
            normal,
        })
    }

    /// The bounds.
    pub fn bounds(&self) -> (f64, f64) {
        (self.min, self.max)
    }

    /// One draw, by rejection (the mass of the range is at least [`Self::MIN_MASS`]).
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        if self.sd == 0.0 {
            return self.mean;
        }
        loop {
            let x = self.normal.sample(rng);
            if (self.min..=self.max).contains(&x) {
                return x;
            }
        }
    }
}

/// How a pool's users' activity weights are drawn.
#[derive(Debug, Clone, PartialEq)]
pub enum Activity {
    /// A truncated normal.
    Normal(TruncatedNormal),
    /// A discrete law: `(activity value, probability weight)` rows, as measured from a capture.
    Table(Vec<(f64, f64)>),
}

impl Activity {
    /// Draws the activity weights of `n` users.
    pub fn draw<R: Rng + ?Sized>(&self, n: usize, rng: &mut R) -> Result<Vec<f64>, UsersError> {
        match self {
            Activity::Normal(t) => Ok((0..n).map(|_| t.sample(rng)).collect()),
            Activity::Table(rows) => {
                let alias = AliasTable::new(&rows.iter().map(|r| r.1).collect::<Vec<_>>())?;
                Ok((0..n).map(|_| rows[alias.sample(rng)].0).collect())
            }
        }
    }
}

/// Vose's alias table: O(n) to build, O(1) per weighted draw (one integer and one float).
#[derive(Debug, Clone, PartialEq)]
pub struct AliasTable {
    prob: Vec<f64>,
    alias: Vec<u32>,
}

impl AliasTable {
    /// A table over `weights` (finite, >= 0, not all zero).
    pub fn new(weights: &[f64]) -> Result<AliasTable, UsersError> {
        let n = weights.len();
        let total: f64 = weights.iter().sum();
        if n == 0
            || n > u32::MAX as usize
            || !total.is_finite()
            || total <= 0.0
            || weights.iter().any(|w| !(*w >= 0.0))
        {
            return Err(UsersError::BadWeights);
        }
        let mut scaled: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let mut prob = vec![1.0; n];
        let mut alias: Vec<u32> = (0..n as u32).collect();
        let (mut small, mut large): (Vec<usize>, Vec<usize>) =
            (0..n).partition(|&i| scaled[i] < 1.0);
        while let (Some(s), Some(&l)) = (small.pop(), large.last()) {
            prob[s] = scaled[s];
            alias[s] = l as u32;
            scaled[l] -= 1.0 - scaled[s];
            if scaled[l] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // Leftovers (rounding) keep probability 1 and alias themselves.
        Ok(AliasTable { prob, alias })
    }

    /// The number of outcomes.
    pub fn len(&self) -> usize {
        self.prob.len()
    }

    /// Whether there is no outcome (never true for a built table).
    pub fn is_empty(&self) -> bool {
        self.prob.is_empty()
    }

    /// One weighted draw: an index into the weights.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        let i = rng.random_range(0..self.prob.len());
        if rng.random::<f64>() < self.prob[i] {
            i
        } else {
            self.alias[i] as usize
        }
    }
}

/// A pool as the user table needs it (the profile's `[[pools]]` converts to this).
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSpec {
    /// A name, for reports and the CSV.
    pub name: String,
    /// Share of sessions given to this pool, relative to the other pools.
    pub weight: f64,
    /// Where its users' addresses come from.
    pub cidr: Cidr,
    /// How many virtual users it has.
    pub users: u32,
    /// The law of its users' activity weights.
    pub activity: Activity,
    /// The law of its users' think-time weights `W`.
    pub think: TruncatedNormal,
}

/// Index of a virtual user in a [`UserTable`].
pub type UserId = u32;

/// One virtual user.
#[derive(Debug, Clone, PartialEq)]
pub struct VirtualUser {
    /// Its index in the table.
    pub id: UserId,
    /// Its pool's index.
    pub pool: usize,
    /// The address its sessions come from.
    pub addr: IpAddr,
    /// Its activity weight: its share of its pool's sessions is `activity / sum(activity)`.
    pub activity: f64,
    /// Its think-time weight `W` (1 = the population average).
    pub think: f64,
}

/// Every virtual user, with the alias tables that choose them.
#[derive(Debug, Clone, PartialEq)]
pub struct UserTable {
    pool_names: Vec<String>,
    pool_weights: Vec<f64>,
    users: Vec<VirtualUser>,
    /// Ids of each pool's users.
    members: Vec<Vec<UserId>>,
    pool_alias: AliasTable,
    user_alias: Vec<AliasTable>,
}

impl UserTable {
    /// Draws every pool's users (activity and think weight) and gives them consecutive usable
    /// addresses of the pool's range.
    pub fn generate<R: Rng + ?Sized>(
        pools: &[PoolSpec],
        rng: &mut R,
    ) -> Result<UserTable, UsersError> {
        let mut users = Vec::new();
        for (p, spec) in pools.iter().enumerate() {
            if u128::from(spec.users) > spec.cidr.usable() || spec.users == 0 {
                return Err(UsersError::RangeTooSmall {
                    pool: spec.name.clone(),
                    users: u64::from(spec.users),
                    cidr: spec.cidr.to_string(),
                    usable: spec.cidr.usable(),
                });
            }
            let activity = spec.activity.draw(spec.users as usize, rng)?;
            for (j, a) in activity.into_iter().enumerate() {
                let addr = spec
                    .cidr
                    .nth_usable(j as u128)
                    .ok_or(UsersError::BadWeights)?;
                users.push(VirtualUser {
                    id: users.len() as UserId,
                    pool: p,
                    addr,
                    activity: a,
                    think: spec.think.sample(rng),
                });
            }
        }
        Self::from_users(
            pools.iter().map(|p| p.name.clone()).collect(),
            pools.iter().map(|p| p.weight).collect(),
            users,
        )
    }

    fn from_users(
        pool_names: Vec<String>,
        pool_weights: Vec<f64>,
        users: Vec<VirtualUser>,
    ) -> Result<UserTable, UsersError> {
        let mut members = vec![Vec::new(); pool_names.len()];
        for u in &users {
            members[u.pool].push(u.id);
        }
        let pool_alias = AliasTable::new(&pool_weights)?;
        let user_alias = members
            .iter()
            .map(|ids| {
                AliasTable::new(
                    &ids.iter()
                        .map(|&i| users[i as usize].activity)
                        .collect::<Vec<_>>(),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(UserTable {
            pool_names,
            pool_weights,
            users,
            members,
            pool_alias,
            user_alias,
        })
    }

    /// Chooses a user: a pool by weight, then one of its users by activity.
    pub fn choose<R: Rng + ?Sized>(&self, rng: &mut R) -> UserId {
        let p = self.pool_alias.sample(rng);
        self.members[p][self.user_alias[p].sample(rng)]
    }

    /// The user with this id.
    pub fn user(&self, id: UserId) -> &VirtualUser {
        &self.users[id as usize]
    }

    /// Every user.
    pub fn users(&self) -> &[VirtualUser] {
        &self.users
    }

    /// The pools' names, by index.
    pub fn pool_names(&self) -> &[String] {
        &self.pool_names
    }

    /// Each pool's share of sessions, `weight / sum(weights)`.
    pub fn pool_shares(&self) -> Vec<f64> {
        let total: f64 = self.pool_weights.iter().sum();
        self.pool_weights.iter().map(|w| w / total).collect()
    }

    /// Each user's expected share of all sessions: pool share times its share of the pool.
    pub fn user_shares(&self) -> Vec<f64> {
        let pools = self.pool_shares();
        let sums: Vec<f64> = self
            .members
            .iter()
            .map(|ids| ids.iter().map(|&i| self.users[i as usize].activity).sum())
            .collect();
        self.users
            .iter()
            .map(|u| pools[u.pool] * u.activity / sums[u.pool])
            .collect()
    }

    /// The CSV form: `user,pool,pool_weight,addr,activity,think_weight`.
    pub fn to_csv(&self) -> String {
        let mut out = String::from("user,pool,pool_weight,addr,activity,think_weight\n");
        for u in &self.users {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{}",
                u.id,
                self.pool_names[u.pool],
                self.pool_weights[u.pool],
                u.addr,
                u.activity,
                u.think
            );
        }
        out
    }

    /// Reads the form written by [`UserTable::to_csv`] (users in id order; pools in order of
    /// first appearance, each with one weight).
    pub fn from_csv(text: &str) -> Result<UserTable, UsersError> {
        let err = |line: usize, msg: String| UsersError::Csv { line, msg };
        let (mut names, mut weights, mut users) = (Vec::<String>::new(), Vec::new(), Vec::new());
        for (idx, raw) in text.lines().enumerate() {
            let line = idx + 1;
            let raw = raw.trim();
            if raw.is_empty() || raw.starts_with('#') || (idx == 0 && raw.starts_with("user")) {
                continue;
            }
            let f: Vec<&str> = raw.split(',').map(str::trim).collect();
            if f.len() != 6 {
                return Err(err(line, format!("expected 6 fields, got {}", f.len())));
            }
            let id: UserId = f[0].parse().map_err(|e| err(line, format!("user: {e}")))?;
            if id as usize != users.len() {
                return Err(err(
                    line,
                    format!("user {id} out of order (expected {})", users.len()),
                ));
            }
            let w: f64 = f[2]
                .parse()
                .map_err(|e| err(line, format!("pool_weight: {e}")))?;
            let pool = match names.iter().position(|n| n == f[1]) {
                Some(p) if weights[p] == w => p,
                Some(_) => return Err(err(line, format!("pool {} has two weights", f[1]))),
                None => {
                    names.push(f[1].to_string());
                    weights.push(w);
                    names.len() - 1
                }
            };
            let addr: IpAddr = f[3].parse().map_err(|e| err(line, format!("addr: {e}")))?;
            let activity: f64 = f[4]
                .parse()
                .map_err(|e| err(line, format!("activity: {e}")))?;
            let think: f64 = f[5]
                .parse()
                .map_err(|e| err(line, format!("think_weight: {e}")))?;
            users.push(VirtualUser {
                id,
                pool,
                addr,
                activity,
                think,
            });
        }
        if users.is_empty() {
            return Err(err(0, "no user".into()));
        }
        Self::from_users(names, weights, users)
    }
}

/// Settings of a [`NatTable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NatConfig {
    /// How long an entry lives after its last use.
    pub lifetime: Duration,
    /// Lowest virtual port handed out.
    pub port_min: u16,
    /// Highest virtual port handed out.
    pub port_max: u16,
    /// Seed of the port search's starting point (stable hash).
    pub seed: u64,
}

/// A real client's session, and which copy of it: the key of a translation.
pub type SessionKey = (SocketAddr, u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    User(IpAddr, u32),
    Session(SessionKey),
}

#[derive(Debug, Clone, Copy)]
struct Slot<T> {
    value: T,
    expires: Duration,
}

/// The NAT-like translation table (see the module doc for its invariants).
///
/// Two levels: a real client *address* (and copy index) maps, sticky, to a virtual user; a real
/// client *session* `(address, port)` (and copy index) maps to a virtual `(address, port)`. A
/// session keeps its real port when that is free on the virtual address, otherwise it gets the
/// first free one after a start that a stable hash of the session picks.
#[derive(Debug, Clone)]
pub struct NatTable {
    cfg: NatConfig,
    users: HashMap<(IpAddr, u32), Slot<UserId>>,
    sessions: HashMap<SessionKey, Slot<SocketAddr>>,
    taken: HashMap<SocketAddr, SessionKey>,
    deadlines: BinaryHeap<Reverse<(Duration, Key)>>,
    latest: Duration,
    expired: Vec<SessionKey>,
}

impl NatTable {
    /// An empty table.
    pub fn new(cfg: NatConfig) -> NatTable {
        NatTable {
            cfg,
            users: HashMap::new(),
            sessions: HashMap::new(),
            taken: HashMap::new(),
            deadlines: BinaryHeap::new(),
            latest: Duration::ZERO,
            expired: Vec::new(),
        }
    }

    fn clock(&mut self, now: Duration) -> Duration {
        self.latest = self.latest.max(now);
        self.latest
    }

    /// The virtual user of a real client address (copy `copy`): the live one if any (its
    /// lifetime is renewed), else `choose()`'s answer, remembered.
    pub fn user_for(
        &mut self,
        now: Duration,
        client: IpAddr,
        copy: u32,
        choose: impl FnOnce() -> UserId,
    ) -> UserId {
        let now = self.clock(now);
        self.expire(now);
        let expires = now + self.cfg.lifetime;
        if let Some(slot) = self.users.get_mut(&(client, copy)) {
            slot.expires = expires;
            return slot.value;
        }
        let user = choose();
        self.users.insert(
            (client, copy),
            Slot {
                value: user,
                expires,
            },
        );
        self.deadlines
            .push(Reverse((expires, Key::User(client, copy))));
        user
    }

    /// Opens (or renews) the translation of a session to a port on `vaddr`, and returns the
    /// virtual `(address, port)`. A live session keeps its translation even if `vaddr` differs.
    pub fn open(
        &mut self,
        now: Duration,
        session: SessionKey,
        vaddr: IpAddr,
    ) -> Result<SocketAddr, UsersError> {
        let now = self.clock(now);
        self.expire(now);
        let expires = now + self.cfg.lifetime;
        if let Some(slot) = self.sessions.get_mut(&session) {
            slot.expires = expires;
            return Ok(slot.value);
        }
        let port = self.free_port(session, vaddr)?;
        let virt = SocketAddr::new(vaddr, port);
        self.taken.insert(virt, session);
        self.sessions.insert(
            session,
            Slot {
                value: virt,
                expires,
            },
        );
        self.deadlines
            .push(Reverse((expires, Key::Session(session))));
        Ok(virt)
    }

    fn free_port(&self, session: SessionKey, vaddr: IpAddr) -> Result<u16, UsersError> {
        let (lo, hi) = (u32::from(self.cfg.port_min), u32::from(self.cfg.port_max));
        let free = |p: u32| !self.taken.contains_key(&SocketAddr::new(vaddr, p as u16));
        let real = u32::from(session.0.port());
        if (lo..=hi).contains(&real) && free(real) {
            return Ok(real as u16);
        }
        // Taken (or out of range): probe linearly from a hashed start, which keeps the search
        // short when many real clients share a port number (no clustering around it).
        let span = hi - lo + 1;
        let start = (hash::hash_session(self.cfg.seed, session.0, session.1, 0x9a)
            % u64::from(span)) as u32;
        (0..span)
            .map(|i| lo + (start + i) % span)
            .find(|&p| free(p))
            .map(|p| p as u16)
            .ok_or(UsersError::PortsExhausted(vaddr))
    }

    /// The live translation of a session, renewing it.
    pub fn lookup(&mut self, now: Duration, session: SessionKey) -> Option<SocketAddr> {
        let now = self.clock(now);
        self.expire(now);
        let expires = now + self.cfg.lifetime;
        self.sessions.get_mut(&session).map(|slot| {
            slot.expires = expires;
            slot.value
        })
    }

    /// Ends a session now (its virtual port becomes free); returns its translation if it had one.
    pub fn close(&mut self, session: SessionKey) -> Option<SocketAddr> {
        let slot = self.sessions.remove(&session)?;
        self.taken.remove(&slot.value);
        Some(slot.value)
    }

    /// Removes every entry whose lifetime ended at or before `now`; returns how many went.
    pub fn expire(&mut self, now: Duration) -> usize {
        let now = self.clock(now);
        let mut gone = 0;
        while let Some(Reverse((at, key))) = self.deadlines.peek().copied() {
            if at > now {
                break;
            }
            self.deadlines.pop();
            // The slot may have been renewed (push its new deadline) or removed already.
            let current = match key {
                Key::User(a, c) => self.users.get(&(a, c)).map(|s| s.expires),
                Key::Session(k) => self.sessions.get(&k).map(|s| s.expires),
            };
            match current {
                Some(exp) if exp > now => self.deadlines.push(Reverse((exp, key))),
                Some(_) => {
                    gone += 1;
                    match key {
                        Key::User(a, c) => {
                            self.users.remove(&(a, c));
                        }
                        Key::Session(k) => {
                            self.close(k);
                            self.expired.push(k);
                        }
                    }
                }
                None => {}
            }
        }
        gone
    }

    /// The sessions removed by expiry (by any call) since the last drain, so that the owner of
    /// per-session state can drop it too.
    pub fn drain_expired(&mut self) -> std::vec::Drain<'_, SessionKey> {
        self.expired.drain(..)
    }

    /// The earliest instant at which an entry may expire (a wake-up time for the caller).
    pub fn next_expiry(&self) -> Option<Duration> {
        self.deadlines.peek().map(|r| r.0 .0)
    }

    /// Live sessions.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Live client-to-user mappings.
    pub fn user_mappings(&self) -> usize {
        self.users.len()
    }
}

#[cfg(test)]
mod tests;
