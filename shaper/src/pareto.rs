//! Pareto laws, plain and truncated, and the OFF scale that gives a wanted load ratio.
//!
//! Owns: inverse-transform sampling of `Pareto(alpha, beta)` (`X = beta / U^(1/alpha)` with
//! `U ~ Uniform(0, 1]`), truncation at an upper bound `H` (a long draw is either clipped to `H`
//! or drawn again, see [`Truncation`]), the closed-form moments of both truncated variants, and
//! the choice of `beta_off` from the load ratio `rho = E[ON] / (E[ON] + E[OFF])`.
//!
//! Invariants: every constructed law has `alpha > 0`, `beta > 0` and, when truncated,
//! `upper > beta`; every draw lies in `[beta, upper]` (or `[beta, inf)` untruncated); sampling
//! takes exactly one uniform per draw in both truncation modes, so a seeded RNG gives the same
//! sequence whatever the mode's rejection rate would have been.
//!
//! `Redraw` is sampled exactly, not by a loop: "draw again until `X <= H`" yields the law of `X`
//! conditioned on `X <= H`, whose cdf is `F(x) / F(H)`, and that cdf is inverted directly.
//!
//! About [`beta_off_for`]: the formula of BACKGROUND.md uses the *untruncated* Pareto mean
//! `alpha * beta / (alpha - 1)`, so it is exact only without truncation. With a bound `H` the
//! means shrink (more for heavier tails and for `H` close to `beta`) and the achieved ON fraction
//! drifts from `rho`. [`beta_off_truncated`] solves `E_H[OFF](beta_off) = E_H[ON] * (1/rho - 1)`
//! numerically with the truncated means (bisection on a function that is increasing in
//! `beta_off`), which makes the achieved `rho` right for truncated laws; the tests check both.

use rand::Rng;
use serde::{Deserialize, Serialize};

/// What happens to a draw above the truncation bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Truncation {
    /// The draw is replaced by the bound: the law gets an atom of mass `(beta/H)^alpha` at `H`.
    Clip,
    /// The draw is made again: the law is the Pareto conditioned on `X <= H`.
    #[default]
    Redraw,
}

/// Errors from building a Pareto law or solving for `beta_off`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParetoError {
    /// The shape must be a finite number above zero.
    #[error("alpha = {0}: must be > 0")]
    BadAlpha(f64),
    /// The scale (minimum) must be a finite number above zero.
    #[error("beta = {0}: must be > 0")]
    BadBeta(f64),
    /// The truncation bound must be above the scale.
    #[error("upper bound {upper} must be > beta = {beta}")]
    BadUpper {
        /// The bound that was given.
        upper: f64,
        /// The scale it must exceed.
        beta: f64,
    },
    /// The load ratio must be strictly between 0 and 1.
    #[error("rho = {0}: must be in (0, 1)")]
    BadRho(f64),
    /// The untruncated mean is infinite for `alpha <= 1`.
    #[error("alpha = {0}: the untruncated mean needs alpha > 1")]
    InfiniteMean(f64),
    /// No `beta_off` below the OFF bound reaches the wanted mean OFF period.
    #[error("mean OFF period {wanted} is not reachable below the OFF bound {upper}")]
    Unreachable {
        /// The mean OFF period that the load ratio asks for.
        wanted: f64,
        /// The OFF truncation bound (every truncated mean is below it).
        upper: f64,
    },
}

/// `Pareto(alpha, beta)`: `P(X > x) = (beta / x)^alpha` for `x >= beta`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pareto {
    alpha: f64,
    beta: f64,
}

impl Pareto {
    /// A Pareto law of shape `alpha > 0` and scale (minimum) `beta > 0`.
    pub fn new(alpha: f64, beta: f64) -> Result<Pareto, ParetoError> {
        if !(alpha.is_finite() && alpha > 0.0) {
            return Err(ParetoError::BadAlpha(alpha));
        }
        if !(beta.is_finite() && beta > 0.0) {
            return Err(ParetoError::BadBeta(beta));
        }
        Ok(Pareto { alpha, beta })
    }

    /// The shape (tail index).
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// The scale, which is also the smallest value.
    pub fn beta(&self) -> f64 {
        self.beta
    }

    /// `P(X <= x)`.
    pub fn cdf(&self, x: f64) -> f64 {
        if x <= self.beta {
            0.0
        } else {
            1.0 - (self.beta / x).powf(self.alpha)
        }
    }

    /// `P(X > x)`.
    pub fn survival(&self, x: f64) -> f64 {
        1.0 - self.cdf(x)
    }

    /// The value whose survival probability is `s` in `(0, 1]`: `beta / s^(1/alpha)`.
    pub fn quantile_survival(&self, s: f64) -> f64 {
        self.beta / s.powf(1.0 / self.alpha)
    }

    /// One draw by inverse transform.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        self.quantile_survival(open_unit(rng))
    }

    /// The mean `alpha * beta / (alpha - 1)`, infinite for `alpha <= 1`.
    pub fn mean(&self) -> f64 {
        if self.alpha <= 1.0 {
            f64::INFINITY
        } else {
            self.alpha * self.beta / (self.alpha - 1.0)
        }
    }

    /// This law truncated at `upper` with the given treatment of long draws.
    pub fn truncated(self, upper: f64, mode: Truncation) -> Result<TruncatedPareto, ParetoError> {
        TruncatedPareto::new(self.alpha, self.beta, upper, mode)
    }
}

/// A uniform in `(0, 1]`, so that `1/U^(1/alpha)` is finite.
fn open_unit<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    1.0 - rng.random::<f64>()
}

/// `int_{beta}^{upper} x^(p-1) dx / beta^p`-style helper: returns `(upper^e - beta^e) / e`
/// scaled by `beta^-e`, i.e. `((upper/beta)^e - 1) / e`, with its limit `ln(upper/beta)` at
/// `e = 0`.
fn pow_integral(ratio: f64, e: f64) -> f64 {
    if e.abs() < 1e-9 {
        ratio.ln()
    } else {
        (ratio.powf(e) - 1.0) / e
    }
}

/// A Pareto law truncated at `upper` (clipped or redrawn).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TruncatedPareto {
    base: Pareto,
    upper: f64,
    mode: Truncation,
    /// `F(upper)` of the base law, the mass kept by `Redraw`.
    kept: f64,
}

impl TruncatedPareto {
    /// `Pareto(alpha, beta)` truncated at `upper > beta`.
    pub fn new(
        alpha: f64,
        beta: f64,
        upper: f64,
        mode: Truncation,
    ) -> Result<TruncatedPareto, ParetoError> {
        let base = Pareto::new(alpha, beta)?;
        if !(upper > beta) || upper.is_nan() {
            return Err(ParetoError::BadUpper { upper, beta });
        }
        Ok(TruncatedPareto {
            base,
            upper,
            mode,
            kept: base.cdf(upper),
        })
    }

    /// The untruncated law.
    pub fn base(&self) -> Pareto {
        self.base
    }

    /// The shape.
    pub fn alpha(&self) -> f64 {
        self.base.alpha
    }

    /// The scale (smallest value).
    pub fn beta(&self) -> f64 {
        self.base.beta
    }

    /// The truncation bound (largest value; `f64::INFINITY` means none).
    pub fn upper(&self) -> f64 {
        self.upper
    }

    /// How long draws are treated.
    pub fn mode(&self) -> Truncation {
        self.mode
    }

    /// One draw; always in `[beta, upper]`, one uniform consumed.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        let u = open_unit(rng);
        self.from_uniform(u)
    }

    /// The draw that the uniform `u` in `(0, 1]` maps to (the inverse cdf, read as survival).
    pub fn from_uniform(&self, u: f64) -> f64 {
        let x = match self.mode {
            Truncation::Clip => self.base.quantile_survival(u),
            // Survival of the conditioned law is (S(x) - S(H)) / F(H); solve for S(x).
            Truncation::Redraw => self.base.quantile_survival(1.0 - self.kept * (1.0 - u)),
        };
        x.clamp(self.base.beta, self.upper)
    }

    /// `P(X <= x)` under the truncated law (with the atom at `upper` for `Clip`).
    pub fn cdf(&self, x: f64) -> f64 {
        if x >= self.upper {
            return 1.0;
        }
        match self.mode {
            Truncation::Clip => self.base.cdf(x),
            Truncation::Redraw => self.base.cdf(x) / self.kept,
        }
    }

    /// `E[X]` in closed form.
    ///
    /// Clip: `E[min(X, H)] = beta + beta * ((H/beta)^(1-alpha) - 1) / (1 - alpha)`.
    /// Redraw: `E[X | X <= H] = alpha * beta * ((H/beta)^(1-alpha) - 1) / (1 - alpha) / F(H)`.
    /// Both tend to `alpha * beta / (alpha - 1)` as `H -> inf` for `alpha > 1`.
    pub fn mean(&self) -> f64 {
        self.moment(1)
    }

    /// `E[X^2]` in closed form (finite for every `alpha` thanks to the bound).
    pub fn second_moment(&self) -> f64 {
        self.moment(2)
    }

    /// The variance `E[X^2] - E[X]^2`.
    pub fn variance(&self) -> f64 {
        let m = self.mean();
        (self.second_moment() - m * m).max(0.0)
    }

    /// `E[X^k]` for k = 1, 2.
    fn moment(&self, k: i32) -> f64 {
        let (a, b, h) = (self.base.alpha, self.base.beta, self.upper);
        let kf = f64::from(k);
        if h.is_infinite() {
            return if a > kf {
                a * b.powi(k) / (a - kf)
            } else {
                f64::INFINITY
            };
        }
        let ratio = h / b;
        // int_b^H x^k f(x) dx = a b^k ((H/b)^(k-a) - 1) / (k - a)
        let body = a * b.powi(k) * pow_integral(ratio, kf - a);
        match self.mode {
            Truncation::Redraw => body / self.kept,
            // E[min(X,H)^k] = body + H^k P(X > H)
            Truncation::Clip => body + h.powi(k) * (1.0 - self.kept),
        }
    }

    /// The length-biased law's draw, used to start a renewal process in its stationary regime:
    /// a period that covers a random instant has density `x f(x) / E[X]`. Returns that period's
    /// length; the caller puts the instant uniformly inside it.
    pub fn sample_length_biased<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        let (a, b, h) = (self.base.alpha, self.base.beta, self.upper);
        // x f(x) on [b, H) is proportional to a Pareto of shape a - 1 (any a > 0 after the
        // shift is fine: the bound keeps it proper). Clip adds an atom at H of weight
        // H * P(X > H) / E[X].
        let body_mass = a * b * pow_integral(h / b, 1.0 - a); // int_b^H x f(x) dx
        let total = match self.mode {
            Truncation::Redraw => body_mass,
            Truncation::Clip => body_mass + h * (1.0 - self.kept),
        };
        if self.mode == Truncation::Clip && rng.random::<f64>() * total >= body_mass {
            return h;
        }
        // Inverse cdf of the density prop. to x^-a on [b, H).
        let u = rng.random::<f64>();
        let e = 1.0 - a;
        let x = if e.abs() < 1e-9 {
            b * (h / b).powf(u)
        } else {
            b * (1.0 + u * ((h / b).powf(e) - 1.0)).powf(1.0 / e)
        };
        x.clamp(b, h)
    }
}

/// `beta_off` for the load ratio `rho`, from the *untruncated* means (BACKGROUND.md §2):
/// `beta_off = T_off * (beta_on / T_on) * (1/rho - 1)` with `T = (alpha - 1) / alpha`.
///
/// Exact only without truncation; see [`beta_off_truncated`] for the truncated case.
pub fn beta_off_for(
    rho: f64,
    alpha_on: f64,
    alpha_off: f64,
    beta_on: f64,
) -> Result<f64, ParetoError> {
    check_rho(rho)?;
    for a in [alpha_on, alpha_off] {
        if !(a > 1.0) {
            return Err(ParetoError::InfiniteMean(a));
        }
    }
    if !(beta_on > 0.0) {
        return Err(ParetoError::BadBeta(beta_on));
    }
    let t_on = (alpha_on - 1.0) / alpha_on;
    let t_off = (alpha_off - 1.0) / alpha_off;
    Ok(t_off * (beta_on / t_on) * (1.0 / rho - 1.0))
}

fn check_rho(rho: f64) -> Result<(), ParetoError> {
    if rho > 0.0 && rho < 1.0 {
        Ok(())
    } else {
        Err(ParetoError::BadRho(rho))
    }
}

/// `beta_off` such that the *truncated* OFF law (shape `alpha_off`, bound `upper_off`, same
/// truncation mode as `on`) has mean `E[ON] * (1/rho - 1)`, so that
/// `E[ON] / (E[ON] + E[OFF]) = rho` holds exactly for the truncated laws.
///
/// The truncated mean is continuous and strictly increasing in `beta_off` on `(0, upper_off)`,
/// from 0 to `upper_off`, so bisection finds the root to machine precision.
pub fn beta_off_truncated(
    rho: f64,
    on: &TruncatedPareto,
    alpha_off: f64,
    upper_off: f64,
) -> Result<f64, ParetoError> {
    check_rho(rho)?;
    Pareto::new(alpha_off, 1.0)?;
    let wanted = on.mean() * (1.0 / rho - 1.0);
    if !(wanted < upper_off) {
        return Err(ParetoError::Unreachable {
            wanted,
            upper: upper_off,
        });
    }
    let mean_at = |beta: f64| -> f64 {
        TruncatedPareto::new(alpha_off, beta, upper_off, on.mode()).map_or(upper_off, |t| t.mean())
    };
    let (mut lo, mut hi) = (0.0_f64, upper_off);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if mean_at(mid) < wanted {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let beta = 0.5 * (lo + hi);
    if beta > 0.0 {
        Ok(beta)
    } else {
        Err(ParetoError::Unreachable {
            wanted,
            upper: upper_off,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    /// The Kolmogorov-Smirnov distance of a sample to a continuous cdf.
    fn ks(mut xs: Vec<f64>, cdf: impl Fn(f64) -> f64) -> f64 {
        xs.sort_by(f64::total_cmp);
        let n = xs.len() as f64;
        xs.iter()
            .enumerate()
            .map(|(i, &x)| {
                let f = cdf(x);
                (f - i as f64 / n).abs().max((f - (i + 1) as f64 / n).abs())
            })
            .fold(0.0, f64::max)
    }

    const N: usize = 10_000;
    /// The 1% critical value of the one-sample KS statistic for large n.
    fn ks_critical(n: usize) -> f64 {
        1.628 / (n as f64).sqrt()
    }

    #[test]
    fn untruncated_draws_pass_ks_at_one_percent() {
        let mut rng = StdRng::seed_from_u64(1);
        let p = Pareto::new(1.4, 2.0).unwrap();
        let xs: Vec<f64> = (0..N).map(|_| p.sample(&mut rng)).collect();
        assert!(xs.iter().all(|&x| x >= 2.0));
        let d = ks(xs, |x| p.cdf(x));
        assert!(d < ks_critical(N), "KS distance {d}");
        // And the test can fail: the same draws against a different shape are rejected.
        let xs: Vec<f64> = (0..N).map(|_| p.sample(&mut rng)).collect();
        let wrong = Pareto::new(1.6, 2.0).unwrap();
        assert!(ks(xs, |x| wrong.cdf(x)) > ks_critical(N));
    }

    #[test]
    fn redraw_draws_pass_ks_against_the_conditioned_law() {
        let mut rng = StdRng::seed_from_u64(2);
        let t = TruncatedPareto::new(1.2, 1.0, 20.0, Truncation::Redraw).unwrap();
        let xs: Vec<f64> = (0..N).map(|_| t.sample(&mut rng)).collect();
        assert!(xs.iter().all(|&x| (1.0..=20.0).contains(&x)));
        let d = ks(xs, |x| t.cdf(x));
        assert!(d < ks_critical(N), "KS distance {d}");
    }

    #[test]
    fn clip_respects_the_bound_and_puts_the_tail_mass_on_it() {
        let mut rng = StdRng::seed_from_u64(3);
        let t = TruncatedPareto::new(1.2, 1.0, 20.0, Truncation::Clip).unwrap();
        let xs: Vec<f64> = (0..N).map(|_| t.sample(&mut rng)).collect();
        assert!(xs.iter().all(|&x| (1.0..=20.0).contains(&x)));
        let at_bound = xs.iter().filter(|&&x| x == 20.0).count() as f64 / N as f64;
        let p = (1.0f64 / 20.0).powf(1.2); // 0.0274
        let sd = (p * (1.0 - p) / N as f64).sqrt();
        assert!((at_bound - p).abs() < 4.0 * sd, "atom {at_bound} vs {p}");
        // Below the bound the law is the untruncated one: KS over the continuous part.
        let below: Vec<f64> = xs.into_iter().filter(|&x| x < 20.0).collect();
        let n = below.len();
        let d = ks(below, |x| t.base().cdf(x) / (1.0 - p));
        assert!(d < ks_critical(n), "KS distance {d}");
    }

    /// The sample mean of n draws is within 5 standard errors (sqrt(Var/n), Var from the
    /// closed-form second moment) of the closed-form mean: a false alarm has probability below
    /// 1e-6 under the CLT, which holds since the truncated law has a finite variance.
    #[test]
    fn truncated_means_match_the_sample_means() {
        let mut rng = StdRng::seed_from_u64(4);
        for mode in [Truncation::Clip, Truncation::Redraw] {
            for (a, b, h) in [
                (1.4, 1.0, 1000.0),
                (1.1, 0.5, 50.0),
                (1.9, 2.0, 30.0),
                (1.0, 1.0, 100.0),
            ] {
                let t = TruncatedPareto::new(a, b, h, mode).unwrap();
                let n = 200_000;
                let mean = (0..n).map(|_| t.sample(&mut rng)).sum::<f64>() / n as f64;
                let se = (t.variance() / n as f64).sqrt();
                assert!(
                    (mean - t.mean()).abs() < 5.0 * se,
                    "{mode:?} a={a} b={b} h={h}: sample {mean} vs {} (se {se})",
                    t.mean()
                );
            }
        }
    }

    #[test]
    fn truncated_means_tend_to_the_pareto_mean() {
        let p = Pareto::new(1.5, 1.0).unwrap();
        for mode in [Truncation::Clip, Truncation::Redraw] {
            let t = p.truncated(1e12, mode).unwrap();
            assert!((t.mean() - 3.0).abs() < 1e-5, "{mode:?}: {}", t.mean());
            let inf = p.truncated(f64::INFINITY, mode).unwrap();
            assert_eq!(inf.mean(), 3.0);
        }
        // Clip keeps more mass high than Redraw, so its mean is larger.
        let c = p.truncated(10.0, Truncation::Clip).unwrap().mean();
        let r = p.truncated(10.0, Truncation::Redraw).unwrap().mean();
        assert!(c > r && r > 1.0, "clip {c} redraw {r}");
    }

    #[test]
    fn beta_off_follows_the_background_formula() {
        // Symmetric shapes: beta_off = beta_on * (1/rho - 1).
        let b = beta_off_for(0.5, 1.4, 1.4, 2.0).unwrap();
        assert!((b - 2.0).abs() < 1e-12);
        let b = beta_off_for(0.25, 1.5, 1.2, 1.0).unwrap();
        // E[ON] = 3, E[OFF] must be 9 = 6 * beta_off.
        assert!((b - 1.5).abs() < 1e-12, "{b}");
        assert!(beta_off_for(1.0, 1.4, 1.4, 1.0).is_err());
        assert!(beta_off_for(0.5, 0.9, 1.4, 1.0).is_err());
    }

    #[test]
    fn truncated_beta_off_gives_the_exact_ratio() {
        for mode in [Truncation::Clip, Truncation::Redraw] {
            let on = TruncatedPareto::new(1.4, 1.0, 100.0, mode).unwrap();
            for rho in [0.1, 0.5, 0.8] {
                let b = beta_off_truncated(rho, &on, 1.2, 100.0).unwrap();
                let off = TruncatedPareto::new(1.2, b, 100.0, mode).unwrap();
                let achieved = on.mean() / (on.mean() + off.mean());
                assert!(
                    (achieved - rho).abs() < 1e-9,
                    "{mode:?} rho {rho}: {achieved}"
                );
                // The untruncated formula misses it when the shapes differ.
                let naive = beta_off_for(rho, 1.4, 1.2, 1.0).unwrap();
                let off = TruncatedPareto::new(1.2, naive, 100.0, mode).unwrap();
                let drift = on.mean() / (on.mean() + off.mean()) - rho;
                assert!(
                    drift.abs() > 0.005,
                    "{mode:?} rho {rho}: naive drift {drift}"
                );
            }
        }
        let on = TruncatedPareto::new(1.4, 1.0, 10.0, Truncation::Redraw).unwrap();
        assert!(matches!(
            beta_off_truncated(0.01, &on, 1.4, 10.0),
            Err(ParetoError::Unreachable { .. })
        ));
    }

    #[test]
    fn length_biased_draws_have_the_length_biased_mean() {
        // E under the length-biased law = E[X^2] / E[X].
        let mut rng = StdRng::seed_from_u64(5);
        for mode in [Truncation::Clip, Truncation::Redraw] {
            let t = TruncatedPareto::new(1.4, 1.0, 50.0, mode).unwrap();
            let n = 200_000;
            let xs: Vec<f64> = (0..n).map(|_| t.sample_length_biased(&mut rng)).collect();
            assert!(xs.iter().all(|&x| (1.0..=50.0).contains(&x)));
            let m = xs.iter().sum::<f64>() / n as f64;
            let want = t.second_moment() / t.mean();
            assert!((m / want - 1.0).abs() < 0.02, "{mode:?}: {m} vs {want}");
        }
    }

    #[test]
    fn constructors_reject_bad_parameters() {
        assert_eq!(Pareto::new(0.0, 1.0), Err(ParetoError::BadAlpha(0.0)));
        assert_eq!(Pareto::new(1.5, -1.0), Err(ParetoError::BadBeta(-1.0)));
        assert!(matches!(
            TruncatedPareto::new(1.5, 2.0, 2.0, Truncation::Clip),
            Err(ParetoError::BadUpper { .. })
        ));
    }
}
