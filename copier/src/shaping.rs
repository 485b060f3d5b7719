//! The shaper's own metrics on the copier's endpoint: the factor in force, copies in force,
//! virtual users active, ON/OFF sources ON, requests held by the gates, and the gate delay.
//!
//! Owns: [`export`] (names and help texts: `crate::metrics_table::shaping`), called by each
//! engine thread once a second with the engine's [`crate::engine::ShaperStats`] (with several
//! workers each series carries the `worker` label: sum over it; the factor is the same in all).

use std::time::Instant;

use metrics::{counter, gauge};

use crate::metrics_table::shaping as names;

use crate::engine::Engine;

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
