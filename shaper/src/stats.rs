//! Statistics that tell whether a plan or a trace has the wanted shape.
//!
//! Owns: the Hurst estimators (aggregated variance, rescaled range R/S) over a series of counts
//! per interval, the Hill tail-index estimator and a truncation-aware maximum-likelihood estimate
//! of a Pareto shape, the Kolmogorov-Smirnov distance to a cdf, the ON/OFF periods inferred
//! from the request times of one source, and quantiles. Pure functions over slices: no I/O, no randomness.
//!
//! Choices, so that the numbers can be trusted:
//! - Aggregated variance regresses `log Var(X^(m))` on `log m` over block sizes `m` spaced
//!   evenly in log scale; `H = 1 + slope / 2`. Under long-range dependence the sample mean of a
//!   finite series is itself far from the true mean, and subtracting it removes part of the very
//!   variance being measured at large `m`, which biases H down. When the true mean is known (a
//!   plan's is `sources * rho`), pass it: the variance is then taken around it, which removes that
//!   bias. Keep at least ~10 blocks at the largest `m` and start above the smallest period.
//! - R/S averages `R/S` over the non-overlapping blocks of each size and regresses `log(R/S)` on
//!   `log n`; it is known to over-estimate H at small block sizes (Anis-Lloyd), so its range
//!   should start at tens of samples.
//! - Hill uses the `k` largest values: `alpha = k / sum_{i<k} ln(X_(i) / X_(k))`. It assumes an
//!   untruncated tail; on truncated data pick `k` so the top values stay well below the bound,
//!   or use [`pareto_mle`], which knows the bound.

use crate::pareto::{Pareto, Truncation};

/// A fitted Hurst parameter with the points of its log-log regression.
#[derive(Debug, Clone, PartialEq)]
pub struct HurstFit {
    /// The estimate.
    pub h: f64,
    /// `(log10 scale, log10 statistic)` for each block size used.
    pub points: Vec<(f64, f64)>,
}

/// About `count` block sizes spaced evenly in log scale from `min` to `max` (deduplicated).
pub fn log_sizes(min: usize, max: usize, count: usize) -> Vec<usize> {
    let (min, max) = (min.max(1), max.max(min.max(1)));
    let count = count.max(2);
    let (a, b) = ((min as f64).ln(), (max as f64).ln());
    let mut out: Vec<usize> = (0..count)
        .map(|i| (a + (b - a) * i as f64 / (count - 1) as f64).exp().round() as usize)
        .collect();
    out.dedup();
    out
}

/// Least-squares slope of `y` on `x`.
pub fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    sxy / sxx
}

/// The arithmetic mean (NaN for an empty slice).
pub fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// The variance of the means of the non-overlapping blocks of `m` samples, around `known_mean`
/// or the sample mean of the block means; `None` with fewer than 2 blocks or a zero variance.
fn block_variance(series: &[f64], m: usize, known_mean: Option<f64>) -> Option<f64> {
    let k = series.len() / m.max(1);
    if m == 0 || k < 2 {
        return None;
    }
    let means: Vec<f64> = series
        .chunks_exact(m)
        .map(|c| c.iter().sum::<f64>() / m as f64)
        .collect();
    let var = match known_mean {
        Some(mu) => means.iter().map(|b| (b - mu) * (b - mu)).sum::<f64>() / k as f64,
        None => {
            let mu = mean(&means);
            means.iter().map(|b| (b - mu) * (b - mu)).sum::<f64>() / (k - 1) as f64
        }
    };
    (var > 0.0).then_some(var)
}

/// Aggregated-variance estimate of H over the given block sizes. With `known_mean`, block means
/// are compared with it instead of the sample mean (see the module doc). Sizes that leave fewer
/// than 2 blocks, and blocks whose variance is 0, are skipped; `None` if fewer than 2 remain.
pub fn hurst_aggregated_variance(
    series: &[f64],
    sizes: &[usize],
    known_mean: Option<f64>,
) -> Option<HurstFit> {
    let points: Vec<(f64, f64)> = sizes
        .iter()
        .filter_map(|&m| {
            block_variance(series, m, known_mean).map(|v| ((m as f64).log10(), v.log10()))
        })
        .collect();
    (points.len() >= 2).then(|| HurstFit {
        h: 1.0 + slope(&points) / 2.0,
        points,
    })
}

/// Aggregated variance pooled over independent replications of the same process: at each block
/// size the variances of the replications are averaged before the log-log fit. This keeps the
/// estimator's low bias while cutting the path-to-path spread that heavy tails give a single
/// series (one rare, very long period can tilt a single path's curve).
pub fn hurst_aggregated_variance_pooled(
    replications: &[Vec<f64>],
    sizes: &[usize],
    known_mean: Option<f64>,
) -> Option<HurstFit> {
    let mut points = Vec::new();
    for &m in sizes {
        let vars: Vec<f64> = replications
            .iter()
            .filter_map(|s| block_variance(s, m, known_mean))
            .collect();
        if !vars.is_empty() {
            points.push(((m as f64).log10(), mean(&vars).log10()));
        }
    }
    (points.len() >= 2).then(|| HurstFit {
        h: 1.0 + slope(&points) / 2.0,
        points,
    })
}

/// Rescaled-range (R/S) estimate of H over the given block sizes (see the module doc).
pub fn hurst_rescaled_range(series: &[f64], sizes: &[usize]) -> Option<HurstFit> {
    let mut points = Vec::new();
    for &n in sizes {
        if n < 2 || series.len() / n < 1 {
            continue;
        }
        let mut sum = 0.0;
        let mut used = 0usize;
        for block in series.chunks_exact(n) {
            let mu = mean(block);
            let (mut z, mut lo, mut hi, mut ss) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
            for &x in block {
                z += x - mu;
                lo = lo.min(z);
                hi = hi.max(z);
                ss += (x - mu) * (x - mu);
            }
            let s = (ss / n as f64).sqrt();
            if s > 0.0 {
                sum += (hi - lo) / s;
                used += 1;
            }
        }
        if used > 0 {
            points.push(((n as f64).log10(), (sum / used as f64).log10()));
        }
    }
    (points.len() >= 2).then(|| HurstFit {
        h: slope(&points),
        points,
    })
}

/// Hill's estimate of the tail index from the `k` largest values (`1 <= k < len`); `None` if
/// there are too few positive values.
pub fn hill(data: &[f64], k: usize) -> Option<f64> {
    let mut xs: Vec<f64> = data
        .iter()
        .copied()
        .filter(|x| *x > 0.0 && x.is_finite())
        .collect();
    if k == 0 || xs.len() <= k {
        return None;
    }
    xs.sort_by(|a, b| b.total_cmp(a));
    let threshold = xs[k].ln();
    let s: f64 = xs[..k].iter().map(|x| x.ln() - threshold).sum();
    (s > 0.0).then(|| k as f64 / s)
}

/// Maximum-likelihood Pareto shape for data known to be `Pareto(alpha, beta)` truncated at
/// `upper` (`f64::INFINITY` for none) with the given treatment. Clip: values at the bound are
/// right-censored, and the estimate is closed-form `n_below / (sum ln(x/beta) + n_at ln(H/beta))`.
/// Redraw: the log-likelihood is concave in alpha (a truncated exponential family in `ln x`),
/// and its derivative is solved by bisection on `(1e-6, 100)`.
pub fn pareto_mle(data: &[f64], beta: f64, upper: f64, mode: Truncation) -> Option<f64> {
    let xs: Vec<f64> = data
        .iter()
        .copied()
        .filter(|&x| x >= beta && x.is_finite())
        .collect();
    if xs.is_empty() {
        return None;
    }
    let n = xs.len() as f64;
    if upper.is_infinite() || mode == Truncation::Clip {
        let at = |x: f64| upper.is_finite() && x >= upper * (1.0 - 1e-12);
        let below = xs.iter().filter(|&&x| !at(x)).count() as f64;
        let s: f64 = xs.iter().map(|&x| (x.min(upper) / beta).ln()).sum();
        return (s > 0.0 && below > 0.0).then(|| below / s);
    }
    let l = xs.iter().map(|&x| (x / beta).ln()).sum::<f64>() / n;
    let ln_r = (beta / upper).ln(); // < 0
    let dl = |a: f64| {
        let ra = (a * ln_r).exp();
        1.0 / a - l + ra * ln_r / (1.0 - ra)
    };
    let (mut lo, mut hi) = (1e-6, 100.0);
    if dl(hi) > 0.0 {
        return Some(hi);
    }
    if dl(lo) < 0.0 {
        return Some(lo);
    }
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if dl(mid) > 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(0.5 * (lo + hi))
}

/// The Kolmogorov-Smirnov distance `sup |F_n(x) - F(x)|` of a sample to a continuous cdf.
pub fn ks_distance(sample: &[f64], cdf: impl Fn(f64) -> f64) -> f64 {
    let mut xs = sample.to_vec();
    xs.sort_by(f64::total_cmp);
    let n = xs.len() as f64;
    xs.iter()
        .enumerate()
        .map(|(i, &x)| {
            let f = cdf(x);
            (f - i as f64 / n).abs().max((i as f64 + 1.0) / n - f)
        })
        .fold(0.0, f64::max)
}

/// The KS distance to a Pareto law.
pub fn ks_pareto(sample: &[f64], law: &Pareto) -> f64 {
    ks_distance(sample, |x| law.cdf(x))
}

/// The 1% critical value of the one-sample KS statistic, `1.628 / sqrt(n)` (large n).
pub fn ks_critical_1pct(n: usize) -> f64 {
    1.628 / (n as f64).sqrt()
}

/// The fraction of time ON, from period lengths.
pub fn on_fraction(on: &[f64], off: &[f64]) -> f64 {
    let (a, b) = (on.iter().sum::<f64>(), off.iter().sum::<f64>());
    a / (a + b)
}

/// ON/OFF periods inferred from the sorted request times of one source.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inferred {
    /// Lengths of the complete ON periods (bursts with at least one gap on each side).
    pub on: Vec<f64>,
    /// Lengths of the complete OFF periods (gaps longer than the idle threshold).
    pub off: Vec<f64>,
    /// Total ON time, the first and last burst included.
    pub on_time: f64,
    /// Time from the first to the last request.
    pub span: f64,
}

/// Splits sorted request times into bursts: a gap longer than `idle` is an OFF period, a run of
/// requests with shorter gaps is an ON period, measured from its first request to its last plus
/// `unit` (the time one request takes), so a lone request is ON for `unit`.
pub fn infer_on_off(times: &[f64], idle: f64, unit: f64) -> Inferred {
    let mut out = Inferred::default();
    let (Some(&first), Some(&last)) = (times.first(), times.last()) else {
        return out;
    };
    out.span = last + unit - first;
    let bursts = bursts(times, idle, unit);
    out.on_time = bursts.iter().map(|(s, e)| e - s).sum();
    for w in bursts.windows(2) {
        out.off.push(w[1].0 - w[0].1);
    }
    if bursts.len() > 2 {
        out.on
            .extend(bursts[1..bursts.len() - 1].iter().map(|(s, e)| e - s));
    }
    out
}

/// The ON periods of [`infer_on_off`] as `(start, end)` intervals: runs of sorted request times
/// whose gaps are at most `idle`, each from its first request to its last plus `unit`.
pub fn bursts(times: &[f64], idle: f64, unit: f64) -> Vec<(f64, f64)> {
    let Some(&first) = times.first() else {
        return Vec::new();
    };
    let mut burst_start = first;
    let mut prev = first;
    let mut out = Vec::new();
    for &t in &times[1..] {
        if t - prev > idle {
            out.push((burst_start, prev + unit));
            burst_start = t;
        }
        prev = t;
    }
    out.push((burst_start, prev + unit));
    out
}

/// The `q` quantile (0..=1) of `xs` by the nearest rank on a sorted copy; NaN when empty.
pub fn quantile(xs: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let i = (q.clamp(0.0, 1.0) * (v.len() - 1) as f64).round() as usize;
    v[i]
}

/// Counts events per bin of `bin` seconds over `[0, span)`.
pub fn count_per_bin(times: &[f64], bin: f64, span: f64) -> Vec<f64> {
    let n = (span / bin).ceil().max(1.0) as usize;
    let mut out = vec![0.0; n];
    for &t in times {
        if t >= 0.0 {
            let i = (t / bin) as usize;
            if i < n {
                out[i] += 1.0;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pareto::TruncatedPareto;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn white_noise_has_h_one_half() {
        let mut rng = StdRng::seed_from_u64(30);
        let xs: Vec<f64> = (0..1 << 16).map(|_| rng.random::<f64>()).collect();
        let sizes = log_sizes(10, 2000, 12);
        let av = hurst_aggregated_variance(&xs, &sizes, None).unwrap();
        assert!((av.h - 0.5).abs() < 0.05, "AV {}", av.h);
        let av = hurst_aggregated_variance(&xs, &sizes, Some(0.5)).unwrap();
        assert!((av.h - 0.5).abs() < 0.05, "AV known mean {}", av.h);
        let rs = hurst_rescaled_range(&xs, &log_sizes(32, 8192, 10)).unwrap();
        // R/S is biased up at these sizes (expected ~0.55 for white noise).
        assert!((rs.h - 0.5).abs() < 0.1, "RS {}", rs.h);
    }

    #[test]
    fn a_random_walk_is_detected_as_persistent() {
        // Cumulative sums of white noise: extremely persistent, H close to 1.
        let mut rng = StdRng::seed_from_u64(31);
        let mut z = 0.0;
        let xs: Vec<f64> = (0..1 << 15)
            .map(|_| {
                z += rng.random::<f64>() - 0.5;
                z
            })
            .collect();
        let av = hurst_aggregated_variance(&xs, &log_sizes(10, 1000, 10), None).unwrap();
        assert!(av.h > 0.9, "AV {}", av.h);
        let rs = hurst_rescaled_range(&xs, &log_sizes(32, 4096, 8)).unwrap();
        assert!(rs.h > 0.9, "RS {}", rs.h);
    }

    #[test]
    fn hill_recovers_the_pareto_shape() {
        let mut rng = StdRng::seed_from_u64(32);
        let p = Pareto::new(1.4, 1.0).unwrap();
        let xs: Vec<f64> = (0..50_000).map(|_| p.sample(&mut rng)).collect();
        let a = hill(&xs, 2_000).unwrap();
        assert!((a - 1.4).abs() < 0.1, "hill {a}");
        assert_eq!(hill(&xs[..10], 10), None);
    }

    #[test]
    fn mle_knows_the_truncation() {
        let mut rng = StdRng::seed_from_u64(33);
        for mode in [Truncation::Clip, Truncation::Redraw] {
            let t = TruncatedPareto::new(1.4, 1.0, 30.0, mode).unwrap();
            let xs: Vec<f64> = (0..50_000).map(|_| t.sample(&mut rng)).collect();
            let a = pareto_mle(&xs, 1.0, 30.0, mode).unwrap();
            assert!((a - 1.4).abs() < 0.03, "{mode:?} mle {a}");
            // Ignoring the bound over-estimates the shape (little for Clip, whose atom holds
            // 30^-1.4 = 0.9% of the draws; much more for Redraw, whose whole tail is bent).
            let naive = pareto_mle(&xs, 1.0, f64::INFINITY, mode).unwrap();
            let gap = if mode == Truncation::Clip {
                0.005
            } else {
                0.03
            };
            assert!(naive > a + gap, "{mode:?} naive {naive} vs {a}");
        }
    }

    #[test]
    fn ks_distance_matches_a_hand_computation() {
        // Uniform cdf, sample {0.1, 0.2, 0.9}: steps 1/3, 2/3, 1.
        let d = ks_distance(&[0.9, 0.1, 0.2], |x| x);
        // max(|0.1-0|, |1/3-0.1|, |0.2-1/3|, |2/3-0.2|, |0.9-2/3|, |1-0.9|) = 2/3 - 0.2
        assert!((d - (2.0 / 3.0 - 0.2)).abs() < 1e-12, "{d}");
    }

    #[test]
    fn bursts_are_split_on_idle_gaps() {
        let times = [0.0, 0.5, 1.0, 5.0, 5.2, 9.0, 9.1, 9.3];
        let inf = infer_on_off(&times, 1.0, 0.1);
        // Bursts: [0, 1.1), [5, 5.3), [9, 9.4).
        assert_eq!(inf.on.len(), 1);
        assert!((inf.on[0] - 0.3).abs() < 1e-12);
        assert_eq!(inf.off.len(), 2);
        assert!((inf.off[0] - 3.9).abs() < 1e-12 && (inf.off[1] - 3.7).abs() < 1e-12);
        assert!((inf.on_time - (1.1 + 0.3 + 0.4)).abs() < 1e-12);
        assert!((inf.span - 9.4).abs() < 1e-12);
        assert_eq!(
            bursts(&times, 1.0, 0.0),
            vec![(0.0, 1.0), (5.0, 5.2), (9.0, 9.3)]
        );
        assert!(bursts(&[], 1.0, 0.0).is_empty());
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let xs = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(quantile(&xs, 0.0), 1.0);
        assert_eq!(quantile(&xs, 0.5), 3.0);
        assert_eq!(quantile(&xs, 1.0), 5.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn counts_per_bin() {
        assert_eq!(
            count_per_bin(&[0.1, 0.2, 1.5, 2.99, 3.0], 1.0, 3.0),
            vec![2.0, 1.0, 1.0]
        );
        assert_eq!(log_sizes(1, 1000, 4), vec![1, 10, 100, 1000]);
    }
}
