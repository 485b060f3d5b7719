//! What the sessions of one engine share, split by what each call needs: the parameters and
//! counters every call reads or bumps ([`Shared`]), the test-side tuple index and port choice
//! ([`Tuples`]: opening, moving and dropping connections), and the copy planner with its clock
//! ([`Planner`]: starting sessions and gating their requests).
//!
//! Invariants: [`Tuples::by_test`] maps every registered test tuple to the session that owns
//! it, and [`Tuples`]' per-(client address, target) counts are the number of its tuples with
//! that client address and target; a tuple enters and leaves `by_test` only through
//! [`Shared::register`] and [`Shared::unindex`] (each entering tuple queues an
//! `Event::Registered`, each leaving one an `Event::Unregistered`, by the caller for `unindex`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use common::flow::FourTuple;
use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::chunk::Meter;
use super::config::{Params, PortShare};
use super::event::{Event, Events};
use super::hash::{mix, FastHash};
pub(crate) use super::slot::SlotRef;
use super::stats::EngineStats;

/// What every session call may read or bump.
#[derive(Debug)]
pub(crate) struct Shared {
    pub p: Params,
    pub stats: EngineStats,
    /// What the sessions tell the engine, in order (`super::event`; drained by
    /// `Engine::drain_events`).
    pub events: Events,
    pub tuples: Tuples,
    pub plan: Planner,
    pub intercept_up: bool,
    /// Intercepts (bit `from % 64`) whose firewall rules are missing (`LinkEvent::Rules`):
    /// their acceptances do not count until the rules are back.
    pub unguarded: u64,
    /// Counts the captured bytes the sessions hold.
    pub meter: Meter,
    /// Kept between polls so that gathering a segment does not allocate each time.
    pub scratch: Vec<u8>,
    /// When the capture last lost packets (the kernel dropped some: `Engine::note_capture_loss`).
    pub capture_loss_at: Option<Instant>,
}

impl Shared {
    pub(crate) fn new(
        p: Params,
        stats: EngineStats,
        tuples: Tuples,
        plan: Planner,
        meter: Meter,
        trace: bool,
    ) -> Shared {
        Shared {
            p,
            stats,
            events: Events::new(trace),
            tuples,
            plan,
            intercept_up: true,
            unguarded: 0,
            meter,
            scratch: Vec::new(),
            capture_loss_at: None,
        }
    }

    /// `tuple` is `slot`'s now: indexed, and registered with the intercepts.
    pub(crate) fn register(&mut self, tuple: FourTuple, slot: SlotRef) {
        self.tuples.insert(tuple, slot);
        self.events.push(Event::Registered(tuple));
        self.stats.connections_opened += 1;
    }

    /// `tuple` is dropped: out of the index, and unregistered.
    pub(crate) fn unregister(&mut self, tuple: FourTuple) {
        self.unindex(tuple);
        self.events.push(Event::Unregistered(tuple));
    }

    /// Take `tuple` out of the index (the caller tells the intercepts).
    pub(crate) fn unindex(&mut self, tuple: FourTuple) {
        self.tuples.remove(tuple);
    }
}

/// The test tuples of the engine's sessions, and the choice of a free one.
#[derive(Debug)]
pub(crate) struct Tuples {
    pub by_test: HashMap<FourTuple, SlotRef, FastHash>,
    /// Test tuples in `by_test` per (client address, test server), keyed by the tuple with
    /// client port 0: how full that port space is.
    ports_used: HashMap<FourTuple, u32, FastHash>,
    rng: SmallRng,
    share: PortShare,
}

impl Tuples {
    /// An empty index for the engine of `share` under `seed`: one engine per worker, the same
    /// seed, different random port choices.
    pub(crate) fn new(hash: FastHash, seed: u64, share: PortShare) -> Tuples {
        let rng = SmallRng::seed_from_u64(match share.index {
            0 => seed,
            i => mix(seed.wrapping_add(u64::from(i))),
        });
        Tuples {
            by_test: HashMap::with_hasher(hash),
            ports_used: HashMap::with_hasher(hash),
            rng,
            share,
        }
    }

    /// Give back the room of the tuples that are gone.
    pub(crate) fn shrink_to_fit(&mut self) {
        self.by_test.shrink_to_fit();
        self.ports_used.shrink_to_fit();
    }

    /// The session that owns `tuple`.
    pub(crate) fn get(&self, tuple: &FourTuple) -> Option<SlotRef> {
        self.by_test.get(tuple).copied()
    }

    fn insert(&mut self, tuple: FourTuple, slot: SlotRef) {
        if self.by_test.insert(tuple, slot).is_none() {
            *self.ports_used.entry(port_space(tuple)).or_insert(0) += 1;
        }
    }

    fn remove(&mut self, tuple: FourTuple) {
        if self.by_test.remove(&tuple).is_some() {
            let k = port_space(tuple);
            if let Some(n) = self.ports_used.get_mut(&k) {
                *n -= 1;
                if *n == 0 {
                    self.ports_used.remove(&k);
                }
            }
        }
    }

    /// A test tuple from `ip` to `target` that no live connection uses, with a port of this
    /// engine's share: `want` if it qualifies, else a random one, else the first free one
    /// from a random place. `None` when every port of the share is taken.
    pub(crate) fn free_tuple(
        &mut self,
        ip: IpAddr,
        target: SocketAddr,
        want: Option<u16>,
    ) -> Option<FourTuple> {
        let share = self.share;
        let mut t = FourTuple::new(SocketAddr::new(ip, want.unwrap_or(0)), target);
        if want.is_some_and(|p| share.contains(p)) && !self.by_test.contains_key(&t) {
            return Some(t);
        }
        let used = self.ports_used.get(&port_space(t)).copied().unwrap_or(0);
        if used >= share.size() {
            return None;
        }
        for _ in 0..32 {
            t.client.set_port(share.random(&mut self.rng));
            if !self.by_test.contains_key(&t) {
                return Some(t);
            }
        }
        // Crowded: walk the share from a random port (a free one is near unless the space is
        // almost full; a full one was refused above).
        let start = share.random(&mut self.rng);
        for port in share.walk(start) {
            t.client.set_port(port);
            if !self.by_test.contains_key(&t) {
                return Some(t);
            }
        }
        None
    }
}

/// The key of `tuple`'s port space in [`Tuples`]' counts: the tuple with client port 0.
fn port_space(mut tuple: FourTuple) -> FourTuple {
    tuple.client.set_port(0);
    tuple
}

/// The copy planner (a [`shaper::Shaper`]: the profile's, or the trivial one of the flags) and
/// its clock, the time since the first `now` the engine saw.
#[derive(Debug)]
pub(crate) struct Planner {
    pub shaper: shaper::Shaper,
    /// Whether the planner holds requests back (`Shaper::gates`): its sessions go lock-step
    /// and ask it when each request unit may go.
    pub gates: bool,
    run_start: Option<Instant>,
    /// Request units the gates asked about, and the sum of their holds (release minus online
    /// arrival): the shaper's gate delay.
    pub gated_units: u64,
    pub gate_delay: Duration,
}

impl Planner {
    pub(crate) fn new(shaper: shaper::Shaper) -> Planner {
        Planner {
            gates: shaper.gates(),
            shaper,
            run_start: None,
            gated_units: 0,
            gate_delay: Duration::ZERO,
        }
    }

    /// The planner's clock at `now`: the time since the first `now` the engine saw.
    pub(crate) fn clock(&mut self, now: Instant) -> Duration {
        now.saturating_duration_since(*self.run_start.get_or_insert(now))
    }

    /// The engine's instant of the planner's time `t`.
    pub(crate) fn instant(&self, t: Duration) -> Option<Instant> {
        self.run_start.map(|r| r + t)
    }
}
