//! ON/OFF sources and their precomputed schedule ([`Plan`]).
//!
//! Owns: the period laws of a source ([`PeriodLaw`]: truncated Pareto, or exponential with the
//! same means for the short-range-dependent comparison), the generation of `N` independent
//! alternating ON/OFF timelines over `[0, duration)`, the queries the gate needs (`is_on`,
//! `next_on`, by binary search), the aggregate series the statistics need, and the CSV form
//! (`source,start_s,end_s,state`) that lets copiers share one plan.
//!
//! Invariants of a [`Plan`]: every source covers `[0, duration)` exactly, with periods that are
//! contiguous, non-empty and alternate in state; `toggles` of a source are strictly increasing
//! and lie in `(0, duration)`.
//!
//! Stationary start: a source does not start at the beginning of a period (that would make the
//! first minutes unlike the rest, and heavy tails make that transient long). The instant 0 is
//! taken as a random instant of the stationary alternating renewal process: it falls in an ON
//! period with probability `E[ON] / (E[ON] + E[OFF])`, the period that covers it follows the
//! length-biased law `x f(x) / E[X]`, and 0 is uniform inside it. The period at 0 (and the last
//! one) are therefore cut by the plan's ends; the CSV keeps them cut.

use std::fmt::Write as _;

use rand::Rng;
use rand_distr::{Distribution, Exp};

use crate::pareto::{ParetoError, TruncatedPareto};

/// Errors from building a model or reading a plan.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OnOffError {
    /// A Pareto parameter is out of range.
    #[error(transparent)]
    Pareto(#[from] ParetoError),
    /// An exponential mean must be positive and finite.
    #[error("exponential mean {0}: must be > 0")]
    BadMean(f64),
    /// The plan needs at least one source and a positive duration.
    #[error("a plan needs sources >= 1 and duration > 0 (got {sources} sources, {duration} s)")]
    Empty {
        /// Number of sources asked for.
        sources: usize,
        /// Duration asked for, seconds.
        duration: f64,
    },
    /// A CSV line could not be parsed.
    #[error("plan CSV line {line}: {msg}")]
    Csv {
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        msg: String,
    },
}

/// The law of the ON or the OFF periods of a source.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PeriodLaw {
    /// Heavy-tailed: a truncated Pareto.
    Pareto(TruncatedPareto),
    /// Light-tailed (memoryless): exponential with this mean, seconds.
    Exponential {
        /// The mean period, seconds.
        mean: f64,
    },
}

impl PeriodLaw {
    /// An exponential law with the given mean.
    pub fn exponential(mean: f64) -> Result<PeriodLaw, OnOffError> {
        if mean.is_finite() && mean > 0.0 {
            Ok(PeriodLaw::Exponential { mean })
        } else {
            Err(OnOffError::BadMean(mean))
        }
    }

    /// The mean period, seconds.
    pub fn mean(&self) -> f64 {
        match self {
            PeriodLaw::Pareto(p) => p.mean(),
            PeriodLaw::Exponential { mean } => *mean,
        }
    }

    /// One period.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        match self {
            PeriodLaw::Pareto(p) => p.sample(rng),
            PeriodLaw::Exponential { mean } => exp(*mean).sample(rng),
        }
    }

    /// The remaining part of the period that covers a random instant (stationary residual).
    fn sample_residual<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        match self {
            PeriodLaw::Pareto(p) => p.sample_length_biased(rng) * (1.0 - rng.random::<f64>()),
            // Memoryless: the residual is exponential again.
            PeriodLaw::Exponential { mean } => exp(*mean).sample(rng),
        }
    }
}

fn exp(mean: f64) -> Exp<f64> {
    // The constructors checked mean > 0, so the rate is finite and positive.
    Exp::new(1.0 / mean).unwrap_or_else(|_| Exp::new(1.0).unwrap())
}

/// The ON and OFF laws shared by every source.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OnOffModel {
    /// Law of the ON periods.
    pub on: PeriodLaw,
    /// Law of the OFF periods.
    pub off: PeriodLaw,
}

impl OnOffModel {
    /// The long-run ON fraction `E[ON] / (E[ON] + E[OFF])`.
    pub fn rho(&self) -> f64 {
        let (on, off) = (self.on.mean(), self.off.mean());
        on / (on + off)
    }

    /// The same means with exponential periods (the Poisson-like comparison, H = 0.5).
    pub fn exponential_twin(&self) -> OnOffModel {
        OnOffModel {
            on: PeriodLaw::Exponential {
                mean: self.on.mean(),
            },
            off: PeriodLaw::Exponential {
                mean: self.off.mean(),
            },
        }
    }
}

/// One period of one source, as in the CSV.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Period {
    /// The source's index.
    pub source: usize,
    /// Start, seconds since the plan's start.
    pub start: f64,
    /// End (exclusive), seconds.
    pub end: f64,
    /// Whether the source is ON.
    pub on: bool,
}

/// One source's timeline: its state at 0 and the instants where it flips.
#[derive(Debug, Clone, PartialEq)]
struct Timeline {
    initial_on: bool,
    toggles: Vec<f64>,
}

impl Timeline {
    fn is_on(&self, t: f64) -> bool {
        let flips = self.toggles.partition_point(|&x| x <= t);
        self.initial_on ^ (flips % 2 == 1)
    }
}

/// The precomputed ON/OFF schedule of every source over `[0, duration)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    duration: f64,
    sources: Vec<Timeline>,
}

impl Plan {
    /// Draws `sources` independent stationary timelines over `[0, duration)` seconds.
    pub fn generate<R: Rng + ?Sized>(
        model: &OnOffModel,
        sources: usize,
        duration: f64,
        rng: &mut R,
    ) -> Result<Plan, OnOffError> {
        if sources == 0 || !(duration > 0.0 && duration.is_finite()) {
            return Err(OnOffError::Empty { sources, duration });
        }
        let rho = model.rho();
        let timelines = (0..sources)
            .map(|_| {
                let initial_on = rng.random::<f64>() < rho;
                let mut on = initial_on;
                let mut toggles = Vec::with_capacity(
                    (2.0 * duration / (model.on.mean() + model.off.mean())) as usize + 4,
                );
                let law = |on: bool| if on { &model.on } else { &model.off };
                let mut t = law(on).sample_residual(rng);
                while t < duration {
                    // Guard against a zero-length period (a residual of exactly 0).
                    if toggles.last().is_none_or(|&last| t > last) && t > 0.0 {
                        toggles.push(t);
                        on = !on;
                    }
                    t += law(on).sample(rng);
                }
                Timeline {
                    initial_on,
                    toggles,
                }
            })
            .collect();
        Ok(Plan {
            duration,
            sources: timelines,
        })
    }

    /// The plan's length, seconds.
    pub fn duration(&self) -> f64 {
        self.duration
    }

    /// The number of sources.
    pub fn sources(&self) -> usize {
        self.sources.len()
    }

    /// Whether `source` is ON at `t` seconds (periods are `[start, end)`). Outside
    /// `[0, duration)` the state at the nearest end holds. Panics if `source` is out of range.
    pub fn is_on(&self, source: usize, t: f64) -> bool {
        self.sources[source].is_on(t)
    }

    /// The first instant `>= t` at which `source` is ON, or `None` if it stays OFF until the
    /// end of the plan.
    pub fn next_on(&self, source: usize, t: f64) -> Option<f64> {
        let tl = &self.sources[source];
        let flips = tl.toggles.partition_point(|&x| x <= t);
        if tl.initial_on ^ (flips % 2 == 1) {
            return Some(t);
        }
        tl.toggles.get(flips).copied()
    }

    /// Every period of `source`, in order, cut to `[0, duration)`.
    pub fn periods(&self, source: usize) -> impl Iterator<Item = Period> + '_ {
        let tl = &self.sources[source];
        let n = tl.toggles.len();
        (0..=n).map(move |i| Period {
            source,
            start: if i == 0 { 0.0 } else { tl.toggles[i - 1] },
            end: if i == n { self.duration } else { tl.toggles[i] },
            on: tl.initial_on ^ (i % 2 == 1),
        })
    }

    /// Every period of every source, source by source.
    pub fn all_periods(&self) -> impl Iterator<Item = Period> + '_ {
        (0..self.sources.len()).flat_map(move |s| self.periods(s))
    }

    /// The lengths of the complete ON and OFF periods (those cut by either end of the plan are
    /// left out, since their lengths are censored), as `(on, off)`.
    pub fn complete_periods(&self) -> (Vec<f64>, Vec<f64>) {
        let (mut on, mut off) = (Vec::new(), Vec::new());
        for tl in &self.sources {
            for (i, w) in tl.toggles.windows(2).enumerate() {
                // Period i+1 spans toggles[i]..toggles[i+1].
                let is_on = tl.initial_on ^ ((i + 1) % 2 == 1);
                if is_on { &mut on } else { &mut off }.push(w[1] - w[0]);
            }
        }
        (on, off)
    }

    /// The fraction of source-time spent ON over the whole plan.
    pub fn on_fraction(&self) -> f64 {
        let total: f64 = self
            .all_periods()
            .filter(|p| p.on)
            .map(|p| p.end - p.start)
            .sum();
        total / (self.duration * self.sources.len() as f64)
    }

    /// The mean number of ON sources in each bin of `bin` seconds (the last, partial bin is
    /// dropped): the aggregate load series whose self-similarity the statistics measure.
    pub fn on_count_series(&self, bin: f64) -> Vec<f64> {
        let nbins = (self.duration / bin).floor() as usize;
        // acc[i] += partial coverage; full[i..j] handled by a difference array.
        let mut acc = vec![0.0; nbins];
        let mut diff = vec![0.0; nbins + 1];
        for p in self.all_periods().filter(|p| p.on) {
            let (s, e) = (p.start / bin, (p.end / bin).min(nbins as f64));
            if s >= e {
                continue;
            }
            let (i, j) = (s.floor() as usize, e.floor() as usize);
            if i == j {
                acc[i] += e - s;
                continue;
            }
            acc[i] += (i + 1) as f64 - s;
            diff[i + 1] += 1.0;
            diff[j] -= 1.0;
            if j < nbins {
                acc[j] += e - j as f64;
            }
        }
        let mut run = 0.0;
        for (a, d) in acc.iter_mut().zip(&diff) {
            run += d;
            *a += run;
        }
        acc
    }

    /// The CSV form: a header `source,start_s,end_s,state`, then one line per period with
    /// `state` = `on` | `off`. Floats are written in Rust's shortest round-trip form, so
    /// [`Plan::from_csv`] gives back an equal plan.
    pub fn to_csv(&self) -> String {
        let mut out = String::from("source,start_s,end_s,state\n");
        for p in self.all_periods() {
            let state = if p.on { "on" } else { "off" };
            let _ = writeln!(out, "{},{},{},{}", p.source, p.start, p.end, state);
        }
        out
    }

    /// Reads the form written by [`Plan::to_csv`]. Sources must appear in order 0, 1, .., each
    /// starting at 0 with contiguous, alternating periods, and all ending at the same instant.
    pub fn from_csv(text: &str) -> Result<Plan, OnOffError> {
        let err = |line: usize, msg: String| OnOffError::Csv { line, msg };
        let mut sources: Vec<Timeline> = Vec::new();
        let mut ends: Vec<f64> = Vec::new();
        let mut last_state = false;
        for (idx, raw) in text.lines().enumerate() {
            let line = idx + 1;
            let raw = raw.trim();
            if raw.is_empty() || raw.starts_with('#') || (idx == 0 && raw.starts_with("source")) {
                continue;
            }
            let f: Vec<&str> = raw.split(',').map(str::trim).collect();
            if f.len() != 4 {
                return Err(err(line, format!("expected 4 fields, got {}", f.len())));
            }
            let source: usize = f[0]
                .parse()
                .map_err(|e| err(line, format!("source: {e}")))?;
            let start: f64 = f[1]
                .parse()
                .map_err(|e| err(line, format!("start_s: {e}")))?;
            let end: f64 = f[2].parse().map_err(|e| err(line, format!("end_s: {e}")))?;
            let on = match f[3] {
                "on" | "ON" | "1" => true,
                "off" | "OFF" | "0" => false,
                other => return Err(err(line, format!("state {other:?}: must be on or off"))),
            };
            if !(end > start) {
                return Err(err(line, format!("end_s {end} must be > start_s {start}")));
            }
            if source == sources.len() {
                if start != 0.0 {
                    return Err(err(
                        line,
                        format!("source {source} must start at 0, not {start}"),
                    ));
                }
                sources.push(Timeline {
                    initial_on: on,
                    toggles: Vec::new(),
                });
                ends.push(end);
            } else if source + 1 == sources.len() {
                let prev_end = ends[source];
                if start != prev_end {
                    return Err(err(
                        line,
                        format!("start_s {start} != previous end_s {prev_end}"),
                    ));
                }
                if on == last_state {
                    return Err(err(line, "two periods in a row with the same state".into()));
                }
                sources[source].toggles.push(start);
                ends[source] = end;
            } else {
                return Err(err(line, format!("source {source} out of order")));
            }
            last_state = on;
        }
        let Some(&duration) = ends.first() else {
            return Err(err(0, "no period".into()));
        };
        if let Some((s, &e)) = ends.iter().enumerate().find(|(_, &e)| e != duration) {
            return Err(err(
                0,
                format!("source {s} ends at {e}, source 0 at {duration}"),
            ));
        }
        Ok(Plan { duration, sources })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pareto::{beta_off_truncated, Truncation};
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn pareto_model(alpha: f64, rho: f64, upper: f64, mode: Truncation) -> OnOffModel {
        let on = TruncatedPareto::new(alpha, 1.0, upper, mode).unwrap();
        let beta_off = beta_off_truncated(rho, &on, alpha, upper).unwrap();
        let off = TruncatedPareto::new(alpha, beta_off, upper, mode).unwrap();
        OnOffModel {
            on: PeriodLaw::Pareto(on),
            off: PeriodLaw::Pareto(off),
        }
    }

    #[test]
    fn periods_are_contiguous_and_alternate() {
        let mut rng = StdRng::seed_from_u64(7);
        let plan = Plan::generate(
            &pareto_model(1.4, 0.3, 100.0, Truncation::Clip),
            5,
            500.0,
            &mut rng,
        )
        .unwrap();
        for s in 0..5 {
            let ps: Vec<Period> = plan.periods(s).collect();
            assert_eq!(ps[0].start, 0.0);
            assert_eq!(ps.last().unwrap().end, 500.0);
            for w in ps.windows(2) {
                assert_eq!(w[0].end, w[1].start);
                assert_ne!(w[0].on, w[1].on);
                assert!(w[0].end > w[0].start);
            }
            for p in &ps {
                let mid = 0.5 * (p.start + p.end);
                assert_eq!(plan.is_on(s, mid), p.on);
                assert_eq!(plan.is_on(s, p.start), p.on, "periods are [start, end)");
            }
        }
    }

    #[test]
    fn next_on_waits_for_the_next_on_period() {
        let csv = "source,start_s,end_s,state\n0,0,2,off\n0,2,5,on\n0,5,9,off\n";
        let plan = Plan::from_csv(csv).unwrap();
        assert_eq!(plan.next_on(0, 0.5), Some(2.0));
        assert_eq!(plan.next_on(0, 2.0), Some(2.0));
        assert_eq!(plan.next_on(0, 4.99), Some(4.99));
        assert_eq!(plan.next_on(0, 5.0), None);
        assert!(!plan.is_on(0, 1.999));
        assert!(plan.is_on(0, 2.0));
        assert!(!plan.is_on(0, 5.0));
    }

    #[test]
    fn csv_round_trips_exactly() {
        let mut rng = StdRng::seed_from_u64(8);
        let plan = Plan::generate(
            &pareto_model(1.3, 0.5, 50.0, Truncation::Redraw),
            3,
            200.0,
            &mut rng,
        )
        .unwrap();
        let back = Plan::from_csv(&plan.to_csv()).unwrap();
        assert_eq!(plan, back);
    }

    #[test]
    fn csv_rejects_gaps_and_repeats() {
        let gap = "source,start_s,end_s,state\n0,0,2,off\n0,3,5,on\n";
        assert!(matches!(
            Plan::from_csv(gap),
            Err(OnOffError::Csv { line: 3, .. })
        ));
        let same = "0,0,2,off\n0,2,5,off\n";
        assert!(matches!(
            Plan::from_csv(same),
            Err(OnOffError::Csv { line: 2, .. })
        ));
        let short = "0,0,2,off\n1,0,3,on\n";
        assert!(Plan::from_csv(short).is_err());
        assert!(Plan::from_csv("0,0,2,maybe\n").is_err());
    }

    #[test]
    fn same_seed_same_plan() {
        let m = pareto_model(1.4, 0.5, 100.0, Truncation::Redraw);
        let a = Plan::generate(&m, 4, 300.0, &mut StdRng::seed_from_u64(9)).unwrap();
        let b = Plan::generate(&m, 4, 300.0, &mut StdRng::seed_from_u64(9)).unwrap();
        let c = Plan::generate(&m, 4, 300.0, &mut StdRng::seed_from_u64(10)).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn count_series_integrates_the_on_time() {
        let mut rng = StdRng::seed_from_u64(11);
        let plan = Plan::generate(
            &pareto_model(1.4, 0.4, 100.0, Truncation::Clip),
            8,
            1000.0,
            &mut rng,
        )
        .unwrap();
        let series = plan.on_count_series(1.0);
        assert_eq!(series.len(), 1000);
        let area: f64 = series.iter().sum();
        let expect = plan.on_fraction() * 8.0 * 1000.0;
        assert!((area - expect).abs() < 1e-6, "{area} vs {expect}");
        assert!(series.iter().all(|&c| (-1e-9..=8.0 + 1e-9).contains(&c)));
        // Spot-check one bin against is_on sampled finely.
        let fine: f64 = (0..1000)
            .map(|k| {
                (0..8)
                    .filter(|&s| plan.is_on(s, 123.0 + (k as f64 + 0.5) / 1000.0))
                    .count() as f64
            })
            .sum::<f64>()
            / 1000.0;
        assert!(
            (fine - series[123]).abs() < 0.02,
            "{fine} vs {}",
            series[123]
        );
    }

    /// rho = 0.3, 64 sources, 20,000 s (about 1.2 million periods), both truncation modes and the
    /// exponential twin: the ON fraction is within 1% (relative) of rho.
    #[test]
    fn achieved_on_fraction_is_rho_within_one_percent() {
        for (i, mode) in [Truncation::Clip, Truncation::Redraw]
            .into_iter()
            .enumerate()
        {
            let m = pareto_model(1.4, 0.3, 1000.0, mode);
            assert!((m.rho() - 0.3).abs() < 1e-9);
            let mut rng = StdRng::seed_from_u64(20 + i as u64);
            let plan = Plan::generate(&m, 64, 20_000.0, &mut rng).unwrap();
            let got = plan.on_fraction();
            assert!((got / 0.3 - 1.0).abs() < 0.01, "{mode:?}: {got}");
            let plan = Plan::generate(&m.exponential_twin(), 64, 20_000.0, &mut rng).unwrap();
            let got = plan.on_fraction();
            assert!((got / 0.3 - 1.0).abs() < 0.01, "exponential: {got}");
        }
    }
}
