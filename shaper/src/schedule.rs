//! Load over time, and how many copies of a session that load asks for.
//!
//! Owns: the load shape ([`Load`]: constant, phases with linear ramps, or a curve of
//! `(time_s, rate)` buckets), the multiplication factor at an instant ([`Schedule::factor_at`]:
//! base factor x load x this copier's share `weight / total_weight`), and the number of copies
//! of a session for a fractional factor ([`copies`]).
//!
//! Invariants: every factor is finite and `>= 0`; phases are contiguous from `t = 0` and after the
//! last one its end value holds; curve buckets have strictly increasing start times, the first
//! value holds before the first start and the last after the last. [`copies`] is a pure function
//! of `(seed, session, factor)` and is monotone in the factor: raising it never removes a copy
//! that a lower factor gave, which keeps ramps consistent.

use std::net::SocketAddr;

use crate::hash;

/// Errors of this module.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    /// A factor, duration or rate is negative or not finite.
    #[error("{what} = {value}: must be finite and >= 0")]
    Negative {
        /// Which quantity.
        what: &'static str,
        /// The value given.
        value: f64,
    },
    /// A curve CSV line could not be read.
    #[error("curve CSV line {line}: {msg}")]
    Csv {
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        msg: String,
    },
}

/// One phase: its factor moves linearly from `from` to `to` over `duration` seconds (a steady
/// phase has `from == to`).
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// A name for reports (`ramp-up`, `steady`, ...).
    pub name: String,
    /// Length, seconds (> 0).
    pub duration: f64,
    /// Factor at the phase's start.
    pub from: f64,
    /// Factor at the phase's end.
    pub to: f64,
}

/// A rate curve in buckets, turned into a factor relative to a reference rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    starts: Vec<f64>,
    rates: Vec<f64>,
    reference: f64,
}

impl Curve {
    /// Reads `time_s,rate` rows (a header line is allowed): each row's rate holds from its time
    /// to the next row's. The factor is `rate / reference`; without a reference, the mean rate
    /// of the buckets is used, so the curve's average factor is 1.
    pub fn from_csv(text: &str, reference: Option<f64>) -> Result<Curve, ScheduleError> {
        let err = |line: usize, msg: String| ScheduleError::Csv { line, msg };
        let (mut starts, mut rates) = (Vec::new(), Vec::new());
        for (idx, raw) in text.lines().enumerate() {
            let line = idx + 1;
            let raw = raw.trim();
            if raw.is_empty() || raw.starts_with('#') {
                continue;
            }
            let f: Vec<&str> = raw.split(',').map(str::trim).collect();
            if f.len() != 2 {
                return Err(err(
                    line,
                    format!("expected 2 fields (time_s,rate), got {}", f.len()),
                ));
            }
            let (Ok(t), Ok(r)) = (f[0].parse::<f64>(), f[1].parse::<f64>()) else {
                if starts.is_empty() && idx == 0 {
                    continue; // header
                }
                return Err(err(line, format!("not numbers: {raw:?}")));
            };
            if !(t.is_finite() && r.is_finite() && r >= 0.0) {
                return Err(err(
                    line,
                    format!("time {t} and rate {r} must be finite, rate >= 0"),
                ));
            }
            if starts.last().is_some_and(|&last| t <= last) {
                return Err(err(line, format!("time {t} does not increase")));
            }
            starts.push(t);
            rates.push(r);
        }
        if starts.is_empty() {
            return Err(err(0, "no bucket".into()));
        }
        let reference = reference.unwrap_or_else(|| rates.iter().sum::<f64>() / rates.len() as f64);
        if !(reference.is_finite() && reference > 0.0) {
            return Err(err(0, format!("reference rate {reference} must be > 0")));
        }
        Ok(Curve {
            starts,
            rates,
            reference,
        })
    }

    /// The factor at `t` seconds.
    pub fn factor_at(&self, t: f64) -> f64 {
        let i = self.starts.partition_point(|&s| s <= t).saturating_sub(1);
        self.rates[i] / self.reference
    }
}

/// The shape of the load over the run.
#[derive(Debug, Clone, PartialEq)]
pub enum Load {
    /// The same all along.
    Constant(f64),
    /// Phases one after the other from `t = 0`.
    Phases(Vec<Phase>),
    /// A curve of rate buckets.
    Curve(Curve),
}

impl Load {
    /// The load factor at `t` seconds since the run's start.
    pub fn factor_at(&self, t: f64) -> f64 {
        match self {
            Load::Constant(f) => *f,
            Load::Curve(c) => c.factor_at(t),
            Load::Phases(phases) => {
                let mut start = 0.0;
                for p in phases {
                    if t < start + p.duration {
                        let x = ((t - start) / p.duration).clamp(0.0, 1.0);
                        return p.from + (p.to - p.from) * x;
                    }
                    start += p.duration;
                }
                phases.last().map_or(1.0, |p| p.to)
            }
        }
    }

    /// The instant the shape ends (the last phase's end, the last bucket's start), if any.
    pub fn end(&self) -> Option<f64> {
        match self {
            Load::Constant(_) => None,
            Load::Phases(p) => Some(p.iter().map(|p| p.duration).sum()),
            Load::Curve(c) => c.starts.last().copied(),
        }
    }
}

/// The multiplication factor over time for this copier.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    base: f64,
    load: Load,
    share: f64,
}

impl Schedule {
    /// `base` (the profile's multiplication factor) times `load`, times this copier's share
    /// `weight / total_weight` of the global target.
    pub fn new(
        base: f64,
        load: Load,
        weight: f64,
        total_weight: f64,
    ) -> Result<Schedule, ScheduleError> {
        for (what, value) in [
            ("factor", base),
            ("weight", weight),
            ("total_weight", total_weight),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(ScheduleError::Negative { what, value });
            }
        }
        if let Load::Phases(phases) = &load {
            for p in phases {
                for (what, value) in [("duration", p.duration), ("from", p.from), ("to", p.to)] {
                    if !(value.is_finite() && value >= 0.0) {
                        return Err(ScheduleError::Negative { what, value });
                    }
                }
            }
        }
        let share = if total_weight > 0.0 {
            weight / total_weight
        } else {
            0.0
        };
        Ok(Schedule { base, load, share })
    }

    /// The multiplication factor at `t` seconds: `base * load(t) * weight / total_weight`.
    pub fn factor_at(&self, t: f64) -> f64 {
        (self.base * self.load.factor_at(t) * self.share).max(0.0)
    }

    /// The base factor (the profile's `multiplication.factor`).
    pub fn base(&self) -> f64 {
        self.base
    }

    /// This copier's share of the global target.
    pub fn share(&self) -> f64 {
        self.share
    }

    /// The load shape.
    pub fn load(&self) -> &Load {
        &self.load
    }
}

/// Hash tag of the copy-count decision (so it is independent of the other per-session hashes).
const TAG_COPIES: u8 = 0xc0;

/// The number of copies a session gets under `factor`: `floor(factor)`, plus one with
/// probability `factor - floor(factor)`, decided by a stable hash of `(seed, client)`; so 2.5
/// copies every session twice and half of them a third time, and 0.3 keeps a consistent 30%
/// sample. The same session always gets the same answer for the same factor.
pub fn copies(seed: u64, client: SocketAddr, factor: f64) -> u32 {
    if !(factor > 0.0) {
        return 0;
    }
    let whole = factor.floor();
    let u = hash::unit(hash::hash_session(seed, client, 0, TAG_COPIES));
    let extra = u < factor - whole;
    (whole.min(f64::from(u32::MAX - 1)) as u32) + u32::from(extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phases() -> Load {
        Load::Phases(vec![
            Phase {
                name: "ramp-up".into(),
                duration: 10.0,
                from: 0.0,
                to: 2.0,
            },
            Phase {
                name: "steady".into(),
                duration: 20.0,
                from: 2.0,
                to: 2.0,
            },
            Phase {
                name: "ramp-down".into(),
                duration: 10.0,
                from: 2.0,
                to: 0.5,
            },
        ])
    }

    #[test]
    fn phases_ramp_linearly_and_hold_at_the_end() {
        let l = phases();
        assert_eq!(l.factor_at(0.0), 0.0);
        assert_eq!(l.factor_at(5.0), 1.0);
        assert_eq!(l.factor_at(10.0), 2.0);
        assert_eq!(l.factor_at(29.9), 2.0);
        assert!((l.factor_at(35.0) - 1.25).abs() < 1e-12);
        assert_eq!(l.factor_at(40.0), 0.5);
        assert_eq!(l.factor_at(1e6), 0.5);
        assert_eq!(l.end(), Some(40.0));
    }

    #[test]
    fn curve_buckets_are_steps_around_the_mean() {
        let c = Curve::from_csv("time_s,rate\n0,100\n15,300\n30,200\n", None).unwrap();
        // Mean rate 200.
        assert_eq!(c.factor_at(-1.0), 0.5);
        assert_eq!(c.factor_at(0.0), 0.5);
        assert_eq!(c.factor_at(14.99), 0.5);
        assert_eq!(c.factor_at(15.0), 1.5);
        assert_eq!(c.factor_at(100.0), 1.0);
        let c = Curve::from_csv("0,100\n15,300\n", Some(50.0)).unwrap();
        assert_eq!(c.factor_at(20.0), 6.0);
        assert!(matches!(
            Curve::from_csv("0,1\n0,2\n", None),
            Err(ScheduleError::Csv { line: 2, .. })
        ));
        assert!(Curve::from_csv("0,-1\n", None).is_err());
        assert!(Curve::from_csv("time_s,rate\n", None).is_err());
    }

    #[test]
    fn factor_combines_base_load_and_share() {
        let s = Schedule::new(3.0, phases(), 1.0, 4.0).unwrap();
        assert_eq!(s.factor_at(15.0), 3.0 * 2.0 / 4.0);
        assert!(Schedule::new(-1.0, Load::Constant(1.0), 1.0, 1.0).is_err());
        assert!(Schedule::new(1.0, Load::Constant(1.0), 1.0, f64::NAN).is_err());
    }

    /// Over 100,000 sessions, factor 2.5 gives 2.5 copies per session on average (the standard
    /// error of the mean is 0.5/sqrt(1e5) = 0.0016), every session gets 2 or 3, and each session
    /// keeps its answer.
    #[test]
    fn fractional_factor_copies_on_average_and_consistently() {
        let clients: Vec<SocketAddr> = (0..100_000u32)
            .map(|i| {
                SocketAddr::from((
                    [10, (i >> 16) as u8, (i >> 8) as u8, i as u8],
                    40000 + (i % 7) as u16,
                ))
            })
            .collect();
        let total: u64 = clients.iter().map(|&c| u64::from(copies(5, c, 2.5))).sum();
        let mean = total as f64 / clients.len() as f64;
        assert!((mean - 2.5).abs() < 0.008, "{mean}");
        for &c in &clients[..1000] {
            let n = copies(5, c, 2.5);
            assert!(n == 2 || n == 3);
            assert_eq!(n, copies(5, c, 2.5));
            // Monotone in the factor.
            assert!(copies(5, c, 2.2) <= n && n <= copies(5, c, 2.8));
        }
        let kept = clients.iter().filter(|&&c| copies(5, c, 0.3) == 1).count() as f64 / 1e5;
        assert!((kept - 0.3).abs() < 0.006, "{kept}");
        assert_eq!(copies(5, clients[0], 0.0), 0);
        assert_eq!(copies(5, clients[0], 4.0), 4);
    }
}
