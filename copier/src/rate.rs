//! The closed loop on the rate (`--target-rate`): hold the request units the copier sends to
//! the test side at a target by adjusting the multiplication factor while running.
//!
//! Owns: [`RateLoop`], a sans-IO controller fed once a second with the units sent so far (a
//! counter) and the schedule's shape at that instant, and answering the factor scale to use.
//!
//! The target for this engine at time `t` is `rate x load(t) x weight / total_weight / workers`:
//! the global rate, shaped by the profile's phases or curve, this copier's share of it (the
//! profile's `[distribution]`, so several copiers with the same `--target-rate` hold their
//! weighted shares and together the global target, with no coordinator), split evenly over the
//! engine threads (the capture's fanout spreads sessions evenly).
//!
//! Control law: an integral controller on the logarithm of the rate. Each tick with traffic,
//! `scale *= (target / measured)^gain`, the step bounded to [1/2, 2] and the scale to
//! `[0, max_factor / base factor]`. The plant (units sent = online units x factor) answers a
//! new factor within the tick that measures it when sessions are short (the sessions started
//! after a tick get the new factor and send their units before the next): the log error then
//! shrinks by `1 - gain` a tick, monotonically (0.6 with the default gain 0.4: a 3x gap within
//! 5 % in about 7 ticks). When the answer takes a whole tick (longer sessions) the loop
//! `e(n+1) = e(n) - gain x e(n-1)` still converges (poles of modulus `sqrt(gain)` = 0.63) with a
//! small overshoot. No traffic (nothing sent) leaves the scale as it is. Back-pressure: while
//! the test side is saturated (every server of a map overloaded, slow or down, so copies are
//! refused or cannot leave), the loop lowers the factor by at least [`SATURATED_STEP`] a tick
//! and never raises it (no wind-up, no burst when the servers recover), and says so. Copies are decided per
//! session: long keep-alive sessions keep their copies, so the loop then reacts only as fast
//! as sessions turn over.

use crate::metrics_table::rate as names;

/// The most the scale may be multiplied by in a tick while the test side is saturated: it
/// comes down by 10 % a second (however far below its target the rate is), so the load
/// resumes from lower when the servers recover.
pub const SATURATED_STEP: f64 = 0.9;

/// The controller's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateConfig {
    /// The global target, request units per second at the test side, at load 1.
    pub rate: f64,
    /// This engine's part of this copier's share (1 / workers).
    pub part: f64,
    /// Largest factor the loop may set (scale x base factor).
    pub max_factor: f64,
    /// Integral gain on the log error per tick.
    pub gain: f64,
}

/// Default [`RateConfig::gain`] (see the module doc).
pub const DEFAULT_GAIN: f64 = 0.4;

/// What one tick decided, for the metrics and the log.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateTick {
    /// This engine's target now, units per second.
    pub target: f64,
    /// Units per second sent since the last tick.
    pub measured: f64,
    /// `(measured - target) / target` (0 without a target).
    pub error: f64,
    /// The factor scale in force from now on.
    pub scale: f64,
    /// The scale hit a bound (the target cannot be reached: no copies left to remove, or
    /// `max_factor`).
    pub bounded: bool,
    /// The test side was saturated: the scale was lowered by at least `SATURATED_STEP`, not raised.
    pub held: bool,
}

/// The controller (see the module doc).
#[derive(Debug, Clone)]
pub struct RateLoop {
    cfg: RateConfig,
    scale: f64,
    last: Option<(f64, u64)>,
}

impl RateLoop {
    /// A loop starting at scale 1 (the profile's own factor).
    #[must_use]
    pub fn new(cfg: RateConfig) -> RateLoop {
        RateLoop {
            cfg,
            scale: 1.0,
            last: None,
        }
    }

    /// One tick at `t` seconds with `sent` units sent so far, the schedule's `load_share` at
    /// `t` (load x weight / total_weight), the profile's `base` factor, and whether the test
    /// side is `saturated` (the scale then comes down by at least `SATURATED_STEP`). `None` on the first tick (nothing to
    /// measure yet).
    pub fn tick(
        &mut self,
        t: f64,
        sent: u64,
        load_share: f64,
        base: f64,
        saturated: bool,
    ) -> Option<RateTick> {
        let prev = self.last.replace((t, sent));
        let (t0, s0) = prev?;
        let dt = t - t0;
        if dt <= 0.0 {
            return None;
        }
        let measured = sent.saturating_sub(s0) as f64 / dt;
        let target = (self.cfg.rate * load_share * self.cfg.part).max(0.0);
        let max_scale = if base > 0.0 {
            self.cfg.max_factor / base
        } else {
            self.cfg.max_factor
        };
        let mut bounded = false;
        let mut held = false;
        if target <= 0.0 {
            self.scale = 0.0;
        } else if measured > 0.0 {
            let mut step = (target / measured).powf(self.cfg.gain).clamp(0.5, 2.0);
            if saturated && step > SATURATED_STEP {
                step = SATURATED_STEP;
                held = true;
            }
            let want = self.scale * step;
            self.scale = want.clamp(0.0, max_scale);
            bounded = self.scale < want;
        } else if saturated {
            self.scale *= SATURATED_STEP;
            held = true;
        } else if self.scale == 0.0 {
            // Nothing goes out because the loop stopped it: start again from a little.
            self.scale = (1.0 / base.max(1e-9)).min(max_scale).min(0.1);
        }
        let error = if target > 0.0 {
            (measured - target) / target
        } else {
            0.0
        };
        Some(RateTick {
            target,
            measured,
            error,
            scale: self.scale,
            bounded,
            held,
        })
    }

    /// The factor scale in force.
    #[must_use]
    pub fn scale(&self) -> f64 {
        self.scale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated plant: `online(n)` units a second captured in tick `n`, each copied
    /// `factor` times on average under the scale in force `lag` ticks before (0: short sessions,
    /// sent in the tick that measures them), with a deterministic jitter of +-2 %.
    fn run_lagged(
        online: impl Fn(usize) -> f64,
        ticks: usize,
        rate: f64,
        lag: usize,
    ) -> Vec<RateTick> {
        let mut l = RateLoop::new(RateConfig {
            rate,
            part: 1.0,
            max_factor: 100.0,
            gain: DEFAULT_GAIN,
        });
        let (mut sent, mut out) = (0.0f64, Vec::new());
        let mut scales = vec![1.0; lag + 1];
        l.tick(0.0, 0, 1.0, 1.0, false);
        for n in 1..=ticks {
            let jitter = 1.0 + 0.02 * ((n * 7919 % 13) as f64 / 6.0 - 1.0);
            sent += online(n) * scales[0] * jitter;
            if let Some(t) = l.tick(n as f64, sent as u64, 1.0, 1.0, false) {
                out.push(t);
            }
            scales.remove(0);
            scales.push(l.scale());
        }
        out
    }

    fn run(online: impl Fn(usize) -> f64, ticks: usize, rate: f64) -> Vec<RateTick> {
        run_lagged(online, ticks, rate, 0)
    }

    #[test]
    fn a_one_tick_lag_still_converges_with_a_small_overshoot() {
        let ticks = run_lagged(|_| 100.0, 40, 300.0, 1);
        assert!(
            ticks.iter().all(|t| t.error <= 0.25),
            "overshoot: {ticks:?}"
        );
        let settled = ticks.iter().position(|t| t.error.abs() <= 0.05).unwrap();
        assert!(settled <= 15, "{settled}: {ticks:?}");
        assert!(
            ticks[20..].iter().all(|t| t.error.abs() <= 0.05),
            "{ticks:?}"
        );
    }

    #[test]
    fn three_times_the_online_rate_within_ten_ticks_without_overshoot() {
        let ticks = run(|_| 100.0, 40, 300.0);
        let settled = ticks.iter().position(|t| t.error.abs() <= 0.05).unwrap();
        assert!(settled <= 10, "{settled} ticks: {ticks:?}");
        assert!(
            ticks[settled..].iter().all(|t| t.error.abs() <= 0.05),
            "{ticks:?}"
        );
        assert!(
            ticks.iter().all(|t| t.error <= 0.05),
            "overshoot: {ticks:?}"
        );
        assert!((ticks.last().unwrap().scale - 3.0).abs() < 0.1);
    }

    #[test]
    fn follows_the_online_rate_doubling() {
        let ticks = run(|n| if n < 20 { 100.0 } else { 200.0 }, 45, 300.0);
        // The doubling shows one tick later as a 2x error, then closes again within 10 ticks.
        let after = &ticks[20..];
        let back = after.iter().position(|t| t.error.abs() <= 0.05).unwrap();
        assert!(back <= 10, "{back}: {after:?}");
        assert!(
            after[back..].iter().all(|t| t.error.abs() <= 0.05),
            "{after:?}"
        );
        assert!((ticks.last().unwrap().scale - 1.5).abs() < 0.05);
    }

    #[test]
    fn bounded_by_max_factor_and_quiet_without_traffic() {
        let mut l = RateLoop::new(RateConfig {
            rate: 1000.0,
            part: 1.0,
            max_factor: 4.0,
            gain: DEFAULT_GAIN,
        });
        l.tick(0.0, 0, 1.0, 2.0, false);
        let mut sent = 0;
        let mut last = None;
        for n in 1..60u64 {
            sent += (10.0 * l.scale() * 2.0) as u64;
            last = l.tick(n as f64, sent, 1.0, 2.0, false);
        }
        let t = last.unwrap();
        assert!((t.scale - 2.0).abs() < 1e-9 && t.bounded, "{t:?}");
        // No traffic: the scale stays.
        let s = l.scale();
        assert_eq!(l.tick(61.0, sent, 1.0, 2.0, false).unwrap().scale, s);
        // Several copiers: a share of 1/4 of the load holds a quarter of the rate.
        let mut q = RateLoop::new(RateConfig {
            rate: 400.0,
            part: 1.0,
            max_factor: 100.0,
            gain: DEFAULT_GAIN,
        });
        q.tick(0.0, 0, 0.25, 1.0, false);
        assert_eq!(q.tick(1.0, 50, 0.25, 1.0, false).unwrap().target, 100.0);
    }

    #[test]
    fn a_saturated_test_side_holds_the_factor_instead_of_winding_up() {
        let mut l = RateLoop::new(RateConfig {
            rate: 300.0,
            part: 1.0,
            max_factor: 100.0,
            gain: DEFAULT_GAIN,
        });
        l.tick(0.0, 0, 1.0, 1.0, false);
        // The servers take only 100 units/s: saturated, the scale comes down 10 % a tick.
        let mut sent = 0;
        for n in 1..20u64 {
            sent += 100;
            let t = l.tick(n as f64, sent, 1.0, 1.0, true).unwrap();
            assert!(
                t.held && (t.scale - SATURATED_STEP.powi(n as i32)).abs() < 1e-9,
                "{t:?}"
            );
        }
        // Nothing leaves at all: still down.
        let t = l.tick(20.0, sent, 1.0, 1.0, true).unwrap();
        assert!(
            t.held && (t.scale - SATURATED_STEP.powi(20)).abs() < 1e-9,
            "{t:?}"
        );
        // Recovered: it climbs again; too much sent while saturated: it comes down faster.
        let low = t.scale;
        sent += 100;
        assert!(l.tick(21.0, sent, 1.0, 1.0, false).unwrap().scale > low);
        sent += 1000;
        let t = l.tick(22.0, sent, 1.0, 1.0, true).unwrap();
        assert!(t.scale < low * 2.0 * SATURATED_STEP && !t.held, "{t:?}");
    }
}

/// One engine thread's loop: tick once a second with the engine's counters, set the factor,
/// publish, and say when the target goes out of reach or back.
#[derive(Debug)]
pub struct RateDriver {
    ctl: RateLoop,
    bounded: bool,
    held: bool,
}

impl RateDriver {
    /// A driver for `cfg`.
    #[must_use]
    pub fn new(cfg: RateConfig) -> RateDriver {
        RateDriver {
            ctl: RateLoop::new(cfg),
            bounded: false,
            held: false,
        }
    }

    /// One tick at `now`.
    pub fn tick(&mut self, engine: &mut crate::engine::Engine, now: std::time::Instant) {
        let Some((t, load_share, base)) = engine.rate_inputs(now) else {
            return;
        };
        let saturated = engine.maps_all_overloaded() + engine.maps_all_down() > 0;
        let Some(r) = self
            .ctl
            .tick(t, engine.stats().units_sent, load_share, base, saturated)
        else {
            return;
        };
        engine.set_factor_scale(r.scale);
        metrics::gauge!(names::TARGET).set(r.target);
        metrics::gauge!(names::MEASURED).set(r.measured);
        metrics::gauge!(names::ERROR).set(r.error);
        metrics::gauge!(names::SCALE).set(r.scale);
        metrics::gauge!(names::BOUNDED).set(f64::from(u8::from(r.bounded)));
        metrics::gauge!(names::HELD).set(f64::from(u8::from(r.held)));
        if r.held != self.held {
            self.held = r.held;
            if r.held {
                tracing::warn!(
                    "--target-rate: the test servers are saturated (all overloaded, slow or down): the loop lowers the \
                     factor (scale {:.2}, 10 % a second) until they recover; {:.1} units/s sent of {:.1} asked",
                    r.scale,
                    r.measured,
                    r.target
                );
            } else {
                tracing::info!("--target-rate: the test servers recovered; the loop resumes");
            }
        }
        if r.bounded != self.bounded {
            self.bounded = r.bounded;
            if r.bounded {
                tracing::warn!(
                    "--target-rate: {:.1} units/s asked, {:.1} sent at the largest factor allowed (--max-factor): \
                     the online traffic is too thin for the target",
                    r.target,
                    r.measured
                );
            } else {
                tracing::info!("--target-rate: the target is within reach again");
            }
        }
    }
}
