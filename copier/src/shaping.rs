//! The shaper's own metrics on the copier's endpoint: the factor in force, copies in force,
//! virtual users active, ON/OFF sources ON, requests held by the gates, and the gate delay.
//!
//! Owns: the names ([`names`]), their descriptions ([`describe`]) and [`export`], called by each
//! engine thread once a second with the engine's [`crate::engine::ShaperStats`] (with several
//! workers each series carries the `worker` label: sum over it; the factor is the same in all).

use std::time::Instant;

use metrics::{counter, describe_counter, describe_gauge, gauge};

use crate::engine::Engine;

/// Metric names.
pub mod names {
    /// The multiplication factor in force.
    pub const FACTOR: &str = "copier_shaper_factor";
    /// Copies the planner holds.
    pub const COPIES_LIVE: &str = "copier_shaper_copies_live";
    /// Virtual users in use.
    pub const USERS_ACTIVE: &str = "copier_shaper_users_active";
    /// ON/OFF sources ON now.
    pub const SOURCES_ON: &str = "copier_shaper_sources_on";
    /// Request units held by a gate now.
    pub const HELD_UNITS: &str = "copier_shaper_held_units";
    /// Request units the gates decided on.
    pub const GATED_UNITS_TOTAL: &str = "copier_shaper_gated_units_total";
    /// The sum of their holds, in milliseconds (counters are integers here).
    pub const GATE_DELAY_MS_TOTAL: &str = "copier_shaper_gate_delay_milliseconds_total";
}

/// Describe the metrics (once, at start).
pub fn describe() {
    describe_gauge!(
        names::FACTOR,
        "The multiplication factor in force (profile factor x load x share)"
    );
    describe_gauge!(
        names::COPIES_LIVE,
        "Copies the shaper holds (live copy sessions)"
    );
    describe_gauge!(
        names::USERS_ACTIVE,
        "Virtual users in use (live client-to-user mappings), with pools"
    );
    describe_gauge!(
        names::SOURCES_ON,
        "ON/OFF sources in an ON period now, with gating"
    );
    describe_gauge!(
        names::HELD_UNITS,
        "Request units held by the shaper's gates now (think time, OFF periods)"
    );
    describe_counter!(
        names::GATED_UNITS_TOTAL,
        "Request units the shaper's gates decided on"
    );
    describe_counter!(
        names::GATE_DELAY_MS_TOTAL,
        "Sum of the gates' holds in ms (release minus online arrival); its rate over the gated units' rate: the mean gate delay"
    );
}

/// Publish the shaper's state at `now`.
pub fn export(engine: &Engine, now: Instant) {
    let s = engine.shaper_stats(now);
    gauge!(names::FACTOR).set(s.factor);
    gauge!(names::COPIES_LIVE).set(s.copies_live as f64);
    if let Some(u) = s.users_active {
        gauge!(names::USERS_ACTIVE).set(u as f64);
    }
    if let Some(on) = s.sources_on {
        gauge!(names::SOURCES_ON).set(on as f64);
    }
    gauge!(names::HELD_UNITS).set(s.held as f64);
    counter!(names::GATED_UNITS_TOTAL).absolute(s.gated_units);
    counter!(names::GATE_DELAY_MS_TOTAL)
        .absolute(u64::try_from(s.gate_delay.as_millis()).unwrap_or(u64::MAX));
}
