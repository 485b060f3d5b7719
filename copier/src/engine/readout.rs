//! What the engine tells the I/O layer besides packets and registrations: the target and
//! trace events, the shaper's and the test servers' state, the counters and the memory.

use std::time::{Duration, Instant};

use common::flow::FourTuple;

use super::stats::EngineStats;
use super::targets::{TargetEvent, TargetStats};
use super::trace::UnitSent;
use super::{
    answer, conn, stream, Engine, ShaperStats, Slot, PENDING_SYN_COST, RESUME_COST, SESSION_COST,
};

impl Engine {
    /// The next change of a test server's health (taken out, back in, every server of a map
    /// down), to log; see [`Targets`](super::Targets).
    pub fn poll_target_event(&mut self) -> Option<TargetEvent> {
        self.targets.poll_event()
    }

    /// The next request unit sent for the first time, with who sent it (only with
    /// `EngineConfig::trace`; call it until `None` after every `poll_transmit` round).
    pub fn poll_unit(&mut self) -> Option<UnitSent> {
        self.drain_events();
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
}
