//! [`Shaper`]: the sans-IO facade the copier drives, one call per new session and one per request.
//!
//! Owns: the per-run state built from a profile and a seed (the ON/OFF [`Plan`], the
//! [`UserTable`], the [`NatTable`], the [`Schedule`], a seeded `StdRng`) and the per-copy state
//! of live sessions (gating source, think weight, last release).
//!
//! How to drive it (every `now` is the time since the run's start, from the caller's clock):
//! 1. `on_session(now, client)` when a real client's session starts (its SYN): returns one
//!    [`CopyPlan`] per copy (none when the factor samples the session out), each with its own
//!    virtual `(address, port)`. Calling it again for a live session returns the same plans.
//! 2. `release_at(now, session, i)` when request `i` (0, 1, ..) of a copy is ready, `now` being
//!    when the online request arrived: returns when the copy's request may leave. Requests are
//!    held while the copy's source is OFF, never dropped, and the answer for one request index
//!    is stable (asking again returns it).
//! 3. `end_session(session)` when the copy is over (FIN/RST), freeing its virtual port.
//! 4. `handle_timeout(now)` at or after `poll_timeout()`, which expires idle translations.
//!
//! The copier's plain flags (`--copies`, `--sample`, `--client-ip`) are the trivial profile
//! [`FlagPlan`] ([`Shaper::from_flags`]): a fixed number of copies of each sampled session, on
//! the client's own address or a pool address ([`ClientIpPool::pick`]) and the client's own
//! port, never gated (`gates()` is false: requests go as the copier's pacing lets them). Its
//! sampling is a keyed hash of the seed and the client's address and port that does not change
//! in time, so [`Shaper::samples_out`] answers it for every packet, without a table.
//!
//! Invariants: releases of one copy never go backwards and never precede the online arrival;
//! two live copies never share a virtual `(address, port)`; the same profile, seed and call
//! sequence give the same answers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::hash;
use crate::onoff::{OnOffError, Plan};
use crate::pool::ClientIpPool;
use crate::profile::Profile;
use crate::schedule::{copies, Schedule, ScheduleError};
use crate::users::{NatConfig, NatTable, UserId, UserTable, UsersError};

/// Errors of the shaper.
#[derive(Debug, thiserror::Error)]
pub enum ShaperError {
    /// The ON/OFF model or plan could not be built.
    #[error("onoff: {0}")]
    OnOff(#[from] OnOffError),
    /// The user pools or the translation table failed.
    #[error("users: {0}")]
    Users(#[from] UsersError),
    /// The schedule could not be built.
    #[error("schedule: {0}")]
    Schedule(#[from] ScheduleError),
    /// The plan given does not have the profile's number of sources.
    #[error("plan has {got} sources, the profile says {want}")]
    PlanMismatch {
        /// Sources in the plan.
        got: usize,
        /// `onoff.sources`.
        want: usize,
    },
    /// No live copy has this id.
    #[error("unknown session {0:?}")]
    UnknownSession(SessionId),
    /// A request index below one already released.
    #[error("session {session:?}: request {index} comes after request {last}")]
    OutOfOrder {
        /// The copy.
        session: SessionId,
        /// The index asked for.
        index: u32,
        /// The last index released.
        last: u32,
    },
}

/// Identifies one live copy of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u64);

/// What the copier must do with one copy of a session.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CopyPlan {
    /// The copy's id, for `release_at` and `end_session`.
    pub session: SessionId,
    /// Which copy of the real session (0, 1, ..).
    pub copy: u32,
    /// The virtual user, when the profile has pools.
    pub user: Option<UserId>,
    /// The client end the test server must see: virtual address (or the real one without
    /// pools) and a port no other live copy uses on it.
    pub client: SocketAddr,
    /// The ON/OFF source that gates it, when gating is on.
    pub source: Option<u32>,
    /// The think-time multiplier of its gaps (user weight W times the global factor).
    pub think: f64,
}

#[derive(Debug, Clone)]
struct CopyState {
    plan: CopyPlan,
    real: SocketAddr,
    last: Option<(u32, Duration, Duration)>, // (index, online arrival, release)
}

/// The trivial profile of the copier's flags: `copies` copies of every session the sample keeps
/// (`sample_percent` of them, by a keyed hash of the client), copy `k` on the `k`-th address of
/// `client_ip` after the client's own pick (or on the client's own address), all on the
/// client's port.
#[derive(Debug, Clone, PartialEq)]
pub struct FlagPlan {
    /// Copies of each kept session (at least 1).
    pub copies: u16,
    /// Percentage of the sessions kept, in (0, 100].
    pub sample_percent: f64,
    /// The client address pool, if any.
    pub client_ip: Option<ClientIpPool>,
}

impl Default for FlagPlan {
    fn default() -> Self {
        FlagPlan {
            copies: 1,
            sample_percent: 100.0,
            client_ip: None,
        }
    }
}

impl FlagPlan {
    /// The fraction of sessions kept, in [0, 1] (NaN and out-of-range values clamped: 100 %).
    fn keep(&self) -> f64 {
        if self.sample_percent >= 100.0 || self.sample_percent.is_nan() {
            1.0
        } else {
            self.sample_percent.max(0.0) / 100.0
        }
    }
}

/// Hash tag of the source choice.
const TAG_SOURCE: u8 = 0x50;

/// The shaping core (see the module doc for the call order).
#[derive(Debug)]
pub struct Shaper {
    seed: u64,
    schedule: Schedule,
    plan: Option<Plan>,
    users: Option<UserTable>,
    nat: NatTable,
    think: crate::profile::ThinkProfile,
    rng: StdRng,
    copies: HashMap<SessionId, CopyState>,
    by_client: HashMap<SocketAddr, Vec<SessionId>>,
    next_id: u64,
    pool_sessions: Vec<u64>,
    /// Set when built from the copier's flags (see the module documentation).
    flags: Option<FlagPlan>,
    /// Run-time multiplier of the schedule's factor (a closed loop's correction; 1 by default).
    scale: f64,
}

impl Shaper {
    /// Builds the run's state: draws the plan (over `onoff.horizon_s`, when gating is on) and
    /// the users from `seed`. The profile should have passed `validate()`.
    pub fn new(profile: &Profile, seed: u64) -> Result<Shaper, ShaperError> {
        let mut rng = StdRng::seed_from_u64(seed);
        let plan = if profile.onoff.enabled {
            let model = profile.onoff_model()?;
            Some(Plan::generate(
                &model,
                profile.onoff.sources as usize,
                profile.onoff.horizon_s,
                &mut rng,
            )?)
        } else {
            None
        };
        let users = if profile.pools.is_empty() {
            None
        } else {
            Some(UserTable::generate(&profile.pool_specs()?, &mut rng)?)
        };
        Self::with_tables(profile, plan, users, seed)
    }

    /// Builds the state from tables read from `shaper plan`'s CSVs (so that several copiers
    /// share one plan and one user table). `plan` is used only when gating is on.
    pub fn with_tables(
        profile: &Profile,
        plan: Option<Plan>,
        users: Option<UserTable>,
        seed: u64,
    ) -> Result<Shaper, ShaperError> {
        let plan = if profile.onoff.enabled { plan } else { None };
        if let Some(p) = &plan {
            if p.sources() != profile.onoff.sources as usize {
                return Err(ShaperError::PlanMismatch {
                    got: p.sources(),
                    want: profile.onoff.sources as usize,
                });
            }
        }
        let lifetime = Duration::from_secs_f64(profile.nat.lifetime_s);
        let nat = NatTable::new(NatConfig {
            lifetime,
            port_min: profile.nat.port_min,
            port_max: profile.nat.port_max,
            seed,
        });
        let pools = users.as_ref().map_or(0, |u| u.pool_names().len());
        Ok(Shaper {
            seed,
            schedule: profile.schedule()?,
            plan,
            users,
            nat,
            think: profile.think.clone(),
            // A stream of its own, apart from the one that drew the tables.
            rng: StdRng::seed_from_u64(hash::mix(seed ^ 0x5348_4150_4552)),
            copies: HashMap::new(),
            by_client: HashMap::new(),
            next_id: 0,
            pool_sessions: vec![0; pools],
            flags: None,
            scale: 1.0,
        })
    }

    /// The trivial profile of the copier's flags (see [`FlagPlan`]) under `seed`.
    pub fn from_flags(flags: FlagPlan, seed: u64) -> Shaper {
        let profile = Profile::default();
        let mut s =
            Shaper::with_tables(&profile, None, None, seed).expect("the default profile builds");
        s.flags = Some(FlagPlan {
            copies: flags.copies.max(1),
            ..flags
        });
        s
    }

    /// Whether the shaper holds requests back (`release_at`): true for a profile (think time
    /// and ON/OFF gating count from each answer), false for the flags' plan.
    pub fn gates(&self) -> bool {
        self.flags.is_none()
    }

    /// Whether a packet of the session of `client` is left out by a sample that does not change
    /// in time (the flags' plan): the same answer for every packet, every call and every
    /// shaper of the same seed. A profile decides in `on_session` (its factor changes in time):
    /// always false here.
    pub fn samples_out(&self, client: SocketAddr) -> bool {
        match &self.flags {
            Some(f) => f.keep() < 1.0 && copies(self.seed, client, f.keep()) == 0,
            None => false,
        }
    }

    /// The flags' plans for a session of `client` toward a target of the IPv6 family when `v6`.
    fn flag_plans(&mut self, f: &FlagPlan, client: SocketAddr, v6: bool) -> Vec<CopyPlan> {
        if copies(self.seed, client, f.keep()) == 0 {
            return Vec::new();
        }
        (0..f.copies)
            .map(|k| {
                let ip = f
                    .client_ip
                    .as_ref()
                    .and_then(|p| p.pick(client.ip(), self.seed, k, v6));
                let plan = CopyPlan {
                    session: SessionId(self.next_id),
                    copy: u32::from(k),
                    user: None,
                    client: SocketAddr::new(ip.unwrap_or(client.ip()), client.port()),
                    source: None,
                    think: 1.0,
                };
                self.next_id += 1;
                plan
            })
            .collect()
    }

    /// The multiplication factor at `now` (the schedule's, times the run-time scale).
    pub fn factor_at(&self, now: Duration) -> f64 {
        self.schedule.factor_at(now.as_secs_f64()) * self.scale
    }

    /// Multiply the schedule's factor by `scale` from now on (a closed loop holding a rate;
    /// finite and >= 0, else ignored). New sessions get their copies under it; live copies
    /// keep theirs. The flags' plan ignores it.
    pub fn set_scale(&mut self, scale: f64) {
        if scale.is_finite() && scale >= 0.0 {
            self.scale = scale;
        }
    }

    /// The run-time scale of the factor.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// The schedule's load at `now` times this copier's share (`weight / total_weight`): what
    /// a global target rate is multiplied by for this copier.
    pub fn load_share_at(&self, now: Duration) -> f64 {
        self.schedule.load().factor_at(now.as_secs_f64()) * self.schedule.share()
    }

    /// The profile's base multiplication factor.
    pub fn base_factor(&self) -> f64 {
        self.schedule.base()
    }

    /// A real client's session starts: the copies to make (see [`CopyPlan`]); the flags'
    /// pool picks in the client's own family (see [`Shaper::on_session_to`]).
    pub fn on_session(
        &mut self,
        now: Duration,
        client: SocketAddr,
    ) -> Result<Vec<CopyPlan>, ShaperError> {
        self.on_session_to(now, client, client.is_ipv6())
    }

    /// [`Shaper::on_session`] toward a target of the IPv6 family when `v6`: a profile's
    /// virtual addresses are what its pools say (the caller checks their family); the flags'
    /// pool picks in the target's family.
    pub fn on_session_to(
        &mut self,
        now: Duration,
        client: SocketAddr,
        v6: bool,
    ) -> Result<Vec<CopyPlan>, ShaperError> {
        if let Some(f) = self.flags.take() {
            let plans = self.flag_plans(&f, client, v6);
            self.flags = Some(f);
            return Ok(plans);
        }
        self.handle_timeout(now);
        if let Some(ids) = self.by_client.get(&client) {
            let plans: Vec<CopyPlan> = ids
                .iter()
                .filter_map(|id| self.copies.get(id))
                .map(|c| c.plan)
                .collect();
            for p in &plans {
                let _ = self.nat.lookup(now, (client, p.copy));
            }
            return Ok(plans);
        }
        let n = copies(self.seed, client, self.factor_at(now));
        let mut plans: Vec<CopyPlan> = Vec::with_capacity(n as usize);
        for copy in 0..n {
            let (user, vaddr, w) = match &self.users {
                Some(table) => {
                    let rng = &mut self.rng;
                    let id = self
                        .nat
                        .user_for(now, client.ip(), copy, || table.choose(rng));
                    let u = table.user(id);
                    (
                        Some(id),
                        u.addr,
                        if self.think.per_user { u.think } else { 1.0 },
                    )
                }
                None => (None, client.ip(), 1.0),
            };
            let virt = match self.nat.open(now, (client, copy), vaddr) {
                Ok(v) => v,
                Err(e) => {
                    // Undo the copies opened so far: all or nothing.
                    for p in &plans {
                        self.nat.close((client, p.copy));
                    }
                    return Err(e.into());
                }
            };
            let source = self.plan.as_ref().map(|p| {
                (hash::hash_session(self.seed, client, copy, TAG_SOURCE) % p.sources() as u64)
                    as u32
            });
            let plan = CopyPlan {
                session: SessionId(self.next_id),
                copy,
                user,
                client: virt,
                source,
                think: w * self.think.factor,
            };
            self.next_id += 1;
            plans.push(plan);
        }
        for p in &plans {
            if let (Some(u), Some(table)) = (p.user, &self.users) {
                self.pool_sessions[table.user(u).pool] += 1;
            }
            self.copies.insert(
                p.session,
                CopyState {
                    plan: *p,
                    real: client,
                    last: None,
                },
            );
        }
        if !plans.is_empty() {
            self.by_client
                .insert(client, plans.iter().map(|p| p.session).collect());
        }
        Ok(plans)
    }

    fn drop_copy(&mut self, p: &CopyPlan) {
        if let Some(state) = self.copies.remove(&p.session) {
            self.nat.close((state.real, p.copy));
            if let Some(ids) = self.by_client.get_mut(&state.real) {
                ids.retain(|id| *id != p.session);
                if ids.is_empty() {
                    self.by_client.remove(&state.real);
                }
            }
        }
    }

    /// When request `index` of copy `session`, which arrived online at `now`, may leave.
    ///
    /// The earliest instant is `max(now, previous release + online gap * think)`: the gap since
    /// the previous request is scaled by the copy's think multiplier, and a copy never leaves
    /// before its online request exists (so a multiplier below 1 only lets a held copy catch
    /// up). With gating on, that instant is then moved to the next ON instant of the copy's
    /// source; a plan shorter than the run wraps around.
    pub fn release_at(
        &mut self,
        now: Duration,
        session: SessionId,
        index: u32,
    ) -> Result<Duration, ShaperError> {
        self.handle_timeout(now);
        let state = self
            .copies
            .get(&session)
            .ok_or(ShaperError::UnknownSession(session))?;
        // Renew the translation: the copy is in use.
        let _ = self.nat.lookup(now, (state.real, state.plan.copy));
        let earliest = match state.last {
            Some((last, _, release)) if last == index => return Ok(release),
            Some((last, _, _)) if index < last => {
                return Err(ShaperError::OutOfOrder {
                    session,
                    index,
                    last,
                })
            }
            Some((_, online, release)) => {
                let gap = now.saturating_sub(online).as_secs_f64() * state.plan.think;
                now.max(release + Duration::from_secs_f64(gap))
            }
            None => now,
        };
        let release = match (&self.plan, state.plan.source) {
            (Some(plan), Some(source)) => next_on_wrapped(plan, source as usize, earliest),
            _ => earliest,
        };
        if let Some(c) = self.copies.get_mut(&session) {
            c.last = Some((index, now, release));
        }
        Ok(release)
    }

    /// The copy is over: its state goes and its virtual port is free again.
    pub fn end_session(&mut self, session: SessionId) {
        if let Some(plan) = self.copies.get(&session).map(|c| c.plan) {
            self.drop_copy(&plan);
        }
    }

    /// Expires translations idle for the NAT lifetime, and forgets their copies (a later
    /// `release_at` on one is `UnknownSession`). Cheap when nothing is due: `on_session` and
    /// `release_at` call it too.
    pub fn handle_timeout(&mut self, now: Duration) {
        self.nat.expire(now);
        let gone: Vec<(SocketAddr, u32)> = self.nat.drain_expired().collect();
        for (real, copy) in gone {
            let id = self.by_client.get(&real).and_then(|ids| {
                ids.iter()
                    .copied()
                    .find(|id| self.copies.get(id).is_some_and(|c| c.plan.copy == copy))
            });
            if let Some(plan) = id.and_then(|id| self.copies.get(&id)).map(|c| c.plan) {
                self.drop_copy(&plan);
            }
        }
    }

    /// The next instant at which `handle_timeout` has work (an upper bound: a renewed
    /// translation moves its own expiry later).
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.nat.next_expiry()
    }

    /// The ON/OFF plan, when gating is on.
    pub fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref()
    }

    /// The user table, when the profile has pools.
    pub fn users(&self) -> Option<&UserTable> {
        self.users.as_ref()
    }

    /// Live copies.
    pub fn live_copies(&self) -> usize {
        self.copies.len()
    }

    /// Virtual users in use: live mappings of a real client (and copy) to a virtual user.
    pub fn users_active(&self) -> usize {
        self.nat.user_mappings()
    }

    /// How many ON/OFF sources are ON at `now` (the plan read as periodic), when gating is on.
    pub fn sources_on(&self, now: Duration) -> Option<usize> {
        let plan = self.plan.as_ref()?;
        let horizon = plan.duration();
        let t = if horizon > 0.0 {
            now.as_secs_f64() % horizon
        } else {
            0.0
        };
        Some((0..plan.sources()).filter(|&s| plan.is_on(s, t)).count())
    }

    /// Copies started so far in each pool (by pool index).
    pub fn pool_sessions(&self) -> &[u64] {
        &self.pool_sessions
    }
}

/// The first ON instant of `source` at or after `t`, reading the plan as periodic. If the
/// source has no ON instant in a whole lap (possible only for a plan shorter than its OFF
/// periods), `t` itself: holding a request forever would cut its session.
fn next_on_wrapped(plan: &Plan, source: usize, t: Duration) -> Duration {
    let horizon = plan.duration();
    let secs = t.as_secs_f64();
    let lap = (secs / horizon).floor();
    let offset = secs - lap * horizon;
    let found = plan
        .next_on(source, offset)
        .map(|x| lap * horizon + x)
        .or_else(|| plan.next_on(source, 0.0).map(|x| (lap + 1.0) * horizon + x));
    match found {
        // Rounded up to the next nanosecond, plus one, so the instant read back as seconds is
        // inside the ON period and not a rounding error before its start.
        Some(x) if x > secs => Duration::from_nanos((x * 1e9).ceil() as u64 + 1),
        _ => t,
    }
}

#[cfg(test)]
mod tests;
