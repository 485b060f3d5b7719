//! What the engine thread says about the test servers of spread maps (`--map 80=T1:80@3,T2:80@1`):
//! the log lines of their health changes and their metrics.
//!
//! Owns: [`log_events`] (WARN when a server is taken out, INFO when it is back, ERROR when every
//! server of a map is out) and [`export`] (`copier_target_sessions_total{target}`,
//! `copier_target_probes_total{target}`, `copier_target_downs_total{target}`,
//! `copier_target_up{target}`, `copier_target_weight{target}`, `copier_maps_all_targets_down`).

use metrics::{counter, describe_counter, describe_gauge, gauge};

use crate::engine::{Engine, TargetEvent};

/// Metric names.
pub mod names {
    /// Copies started per test server (probes included).
    pub const TARGET_SESSIONS_TOTAL: &str = "copier_target_sessions_total";
    /// Probe copies sent to a server while it was out.
    pub const TARGET_PROBES_TOTAL: &str = "copier_target_probes_total";
    /// Times a server was taken out.
    pub const TARGET_DOWNS_TOTAL: &str = "copier_target_downs_total";
    /// 1 while a server takes sessions, 0 while it is out.
    pub const TARGET_UP: &str = "copier_target_up";
    /// A server's weight.
    pub const TARGET_WEIGHT: &str = "copier_target_weight";
    /// Maps whose every server is out (the alert).
    pub const MAPS_ALL_TARGETS_DOWN: &str = "copier_maps_all_targets_down";
}

/// Describe the metrics (once, at start).
pub fn describe() {
    describe_counter!(names::TARGET_SESSIONS_TOTAL, "Copies started per test server (probes included)");
    describe_counter!(names::TARGET_PROBES_TOTAL, "Probe copies sent to a test server while it was taken out");
    describe_counter!(names::TARGET_DOWNS_TOTAL, "Times a test server was taken out (no answer for --target-down-after)");
    describe_gauge!(names::TARGET_UP, "1 while a test server takes new sessions, 0 while it is taken out");
    describe_gauge!(names::TARGET_WEIGHT, "A test server's weight in its map");
    describe_gauge!(names::MAPS_ALL_TARGETS_DOWN, "Maps whose every test server is taken out (alert)");
}

/// Log the health changes the engine reports.
pub fn log_events(engine: &mut Engine) {
    while let Some(ev) = engine.poll_target_event() {
        match ev {
            TargetEvent::Down { addr, silent } => tracing::warn!(
                "test server {addr} taken out: no answer for {silent:?} to copies started on it; its new sessions go to \
                 the map's other servers (one probe every --target-retry)"
            ),
            TargetEvent::Up(addr) => tracing::info!("test server {addr} answers again: back in"),
            TargetEvent::AllDown(m) => tracing::error!(
                "--map {}: every test server is taken out (none answers); copies go on by weight as probes \
                 (copier_maps_all_targets_down)",
                crate::cli::show_map(&m)
            ),
            TargetEvent::SomeUp(m) => {
                tracing::info!("--map {}: a test server answers again", crate::cli::show_map(&m));
            }
        }
    }
}

/// Publish the servers' counters and state.
pub fn export(engine: &Engine) {
    for t in engine.target_stats() {
        let name = t.addr.to_string();
        counter!(names::TARGET_SESSIONS_TOTAL, "target" => name.clone()).absolute(t.sessions);
        counter!(names::TARGET_PROBES_TOTAL, "target" => name.clone()).absolute(t.probes);
        counter!(names::TARGET_DOWNS_TOTAL, "target" => name.clone()).absolute(t.downs);
        gauge!(names::TARGET_UP, "target" => name.clone()).set(f64::from(u8::from(t.up)));
        gauge!(names::TARGET_WEIGHT, "target" => name).set(f64::from(t.weight));
    }
    gauge!(names::MAPS_ALL_TARGETS_DOWN).set(engine.maps_all_down() as f64);
}
