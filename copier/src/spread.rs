//! What the engine thread says about the test servers of spread maps (`--map 80=T1:80@3,T2:80@1`):
//! the log lines of their health changes and their metrics.
//!
//! Owns: [`log_events`] (WARN when a server is taken out or overloaded, INFO when it is back,
//! ERROR when every server of a map is out) and [`export`] (`copier_target_sessions_total{target}`,
//! `copier_target_probes_total{target}`, `copier_target_downs_total{target}`,
//! `copier_target_up{target}`, `copier_target_weight{target}`, `copier_maps_all_targets_down`,
//! and the load: `copier_target_live_sessions`, `copier_target_overloaded`,
//! `copier_target_overload_refused_total`, `copier_maps_all_targets_overloaded`), and the
//! answer times: `copier_target_answers_total`, `copier_target_answer_seconds_total` (their
//! sum: the mean is the ratio of the two rates), `copier_target_answer_smoothed_seconds`, and
//! the slow state (`--target-slow-after`): `copier_target_slow`, `copier_target_slow_total`, and
//! failures (`--target-fail-rate`): `copier_target_failures_total`, `copier_target_failing`.

use metrics::{counter, gauge};

use crate::metrics_table::spread as names;

use crate::engine::{Engine, TargetEvent};

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
                m
            ),
            TargetEvent::SomeUp(m) => {
                tracing::info!("--map {}: a test server answers again", m);
            }
            TargetEvent::Overloaded(addr) => tracing::warn!(
                "test server {addr} overloaded (--target-max-live copies live on it): its new sessions go to the \
                 map's other servers"
            ),
            TargetEvent::Relieved(addr) => tracing::info!("test server {addr} relieved: it takes sessions again"),
            TargetEvent::Slow { addr, answer } => tracing::warn!(
                "test server {addr} slow: smoothed answer time {answer:?} passed --target-slow-after; its new sessions go \
                 to the map's other servers (one probe every --target-retry)"
            ),
            TargetEvent::Fast(addr) => tracing::info!("test server {addr} answers fast again: it takes sessions again"),
            TargetEvent::Failing { addr, percent } => tracing::warn!(
                "test server {addr} failing: {percent}% of its recent copies failed by its doing (refused, unanswered \
                 retransmissions, closed without answers), above --target-fail-rate; its new sessions go to the map's \
                 other servers (one probe every --target-retry)"
            ),
            TargetEvent::Sound(addr) => tracing::info!("test server {addr} no longer failing: it takes sessions again"),
            TargetEvent::AllOverloaded(m) => tracing::warn!(
                "--map {}: every test server is overloaded or slow; new sessions are not copied until one is relieved \
                 (copier_target_overload_refused_total, copier_maps_all_targets_overloaded)",
                m
            ),
            TargetEvent::SomeRelieved(m) => {
                tracing::info!("--map {}: a test server takes sessions again", m);
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
        gauge!(names::TARGET_LIVE, "target" => name.clone()).set(t.live as f64);
        gauge!(names::TARGET_OVERLOADED, "target" => name.clone())
            .set(f64::from(u8::from(t.overloaded)));
        counter!(names::OVERLOAD_REFUSED_TOTAL, "target" => name.clone()).absolute(t.refused);
        counter!(names::TARGET_ANSWERS_TOTAL, "target" => name.clone()).absolute(t.answers);
        gauge!(names::TARGET_ANSWER_SECONDS_TOTAL, "target" => name.clone())
            .set(t.answer_sum.as_secs_f64());
        let smoothed = t.answer_smoothed.map_or(0.0, |d| d.as_secs_f64());
        gauge!(names::TARGET_ANSWER_SMOOTHED, "target" => name.clone()).set(smoothed);
        gauge!(names::TARGET_SLOW, "target" => name.clone()).set(f64::from(u8::from(t.slow)));
        counter!(names::TARGET_SLOW_TOTAL, "target" => name.clone()).absolute(t.slow_turns);
        counter!(names::TARGET_FAILURES_TOTAL, "target" => name.clone()).absolute(t.failures);
        gauge!(names::TARGET_FAILING, "target" => name.clone()).set(f64::from(u8::from(t.failing)));
        gauge!(names::TARGET_WEIGHT, "target" => name).set(f64::from(t.weight));
    }
    gauge!(names::MAPS_ALL_TARGETS_DOWN).set(engine.maps_all_down() as f64);
    gauge!(names::MAPS_ALL_TARGETS_OVERLOADED).set(engine.maps_all_overloaded() as f64);
}
