//! `shaper check`: the statistics of a plan, or of a trace of what a run sent, against the
//! profile's targets, one PASS/FAIL line each.
//!
//! Owns: the choice of estimators and tolerances for a report, and the trace CSV format
//! (`time_s` plus a `source` and/or a `pool` column, one row per request sent). Pure: the
//! binary reads the files and prints the [`Report`].
//!
//! Targets and tolerances (the numbers a single run can be held to, not asymptotic truths):
//! - achieved rho: the model's rho +- `max(0.01, 4 se)` for a plan, `se` being the standard error
//!   of the mean of the independent sources' ON fractions (a short plan of heavy-tailed sources
//!   honestly wanders); +- 0.05 for a trace, where ON/OFF periods are inferred from gaps longer
//!   than `idle`, which a slow online client also makes;
//! - tail index: for a plan, the truncation-aware MLE +- 0.1 and Hill +- 0.2 over the periods
//!   longer than 10 x the scale (far below the bound when it is >= 1000 x the scale, so
//!   truncation bends Hill little); for an exponential law these lines are informative only;
//! - Hurst: `(3 - min(alpha_on, alpha_off)) / 2` (0.5 for the exponential law) +- 0.1, by
//!   aggregated variance (around the known mean for a plan, see `stats`) and R/S, over blocks no
//!   longer than the larger truncation bound (beyond it the dependence fades by construction);
//! - pool shares: `weight / sum(weights)` +- `max(0.01, 4 sd)` with `sd` the binomial standard
//!   deviation of the share over the sessions counted.

use std::collections::BTreeMap;
use std::fmt;

use rand::Rng;

use crate::onoff::{PeriodLaw, Plan};
use crate::profile::{PeriodKind, Profile};
use crate::stats;
use crate::trace;
use crate::users::UserTable;

/// The verdict of one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within tolerance of the target.
    Pass,
    /// Outside it.
    Fail,
    /// No target (reported for information).
    Info,
}

/// One statistic.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// What is measured.
    pub name: String,
    /// The measured value (NaN when it could not be computed).
    pub value: f64,
    /// `(target, tolerance)`, if there is a target.
    pub target: Option<(f64, f64)>,
    /// PASS, FAIL or INFO.
    pub verdict: Verdict,
}

impl Line {
    fn new(name: impl Into<String>, value: f64, target: Option<(f64, f64)>) -> Line {
        let verdict = match target {
            None => Verdict::Info,
            Some((t, tol)) if (value - t).abs() <= tol => Verdict::Pass,
            Some(_) => Verdict::Fail,
        };
        Line {
            name: name.into(),
            value,
            target,
            verdict,
        }
    }
}

/// A list of statistics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// The lines, in order.
    pub lines: Vec<Line>,
    /// Free-text notes printed under the table (sizes, choices made).
    pub notes: Vec<String>,
}

impl Report {
    /// Whether no line failed.
    pub fn passed(&self) -> bool {
        self.lines.iter().all(|l| l.verdict != Verdict::Fail)
    }

    /// The line with this name.
    pub fn line(&self, name: &str) -> Option<&Line> {
        self.lines.iter().find(|l| l.name == name)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.lines.iter().map(|l| l.name.len()).max().unwrap_or(0);
        for l in &self.lines {
            let target = match l.target {
                Some((t, tol)) => format!("{t:.4} +- {tol:.4}"),
                None => "-".into(),
            };
            let v = match l.verdict {
                Verdict::Pass => "PASS",
                Verdict::Fail => "FAIL",
                Verdict::Info => "INFO",
            };
            writeln!(f, "{:<w$}  {:>10.4}  {:<18}  {v}", l.name, l.value, target)?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}

/// Settings of a check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CheckOptions {
    /// Width of the bins of the count series, seconds.
    pub bin: f64,
    /// Sessions drawn to measure the pool shares of a user table.
    pub pool_draws: usize,
    /// A gap longer than this (seconds) ends an inferred ON period in a trace.
    pub idle: f64,
}

impl CheckOptions {
    /// Defaults for a profile: bins of `4 x beta_on`, 100,000 draws, idle `2 x beta_on`.
    pub fn for_profile(p: &Profile) -> CheckOptions {
        CheckOptions {
            bin: 4.0 * p.onoff.beta_on_s,
            pool_draws: 100_000,
            idle: 2.0 * p.onoff.beta_on_s,
        }
    }
}

fn hurst_target(p: &Profile) -> f64 {
    match p.onoff.law {
        PeriodKind::Pareto => (3.0 - p.onoff.alpha_on.min(p.onoff.alpha_off)) / 2.0,
        PeriodKind::Exponential => 0.5,
    }
}

/// The largest block (in bins) worth fitting: at scales beyond the truncation bound the
/// periods stop being heavy-tailed and the aggregate loses its long-range dependence, so the
/// fit is limited to blocks of at most the larger bound (and to at least 16 blocks for the
/// aggregated variance, 4 for R/S).
fn max_block(p: Option<&Profile>, bin: f64) -> usize {
    p.map_or(usize::MAX, |p| {
        (p.onoff.max_on_s.max(p.onoff.max_off_s) / bin)
            .floor()
            .max(64.0) as usize
    })
}

fn hurst_lines(
    r: &mut Report,
    series: &[f64],
    known_mean: Option<f64>,
    target: Option<f64>,
    cap: usize,
) {
    let n = series.len();
    let t = target.map(|h| (h, 0.1));
    let (av_max, rs_max) = ((n / 16).min(cap), (n / 4).min(cap));
    let av = stats::hurst_aggregated_variance(series, &stats::log_sizes(4, av_max, 12), known_mean);
    let rs = stats::hurst_rescaled_range(series, &stats::log_sizes(16, rs_max, 12));
    r.notes.push(format!(
        "Hurst fits over blocks of 4..{av_max} bins (AV) and 16..{rs_max} bins (R/S)"
    ));
    r.lines.push(Line::new(
        "Hurst (aggregated variance)",
        av.map_or(f64::NAN, |f| f.h),
        t,
    ));
    r.lines
        .push(Line::new("Hurst (R/S)", rs.map_or(f64::NAN, |f| f.h), t));
    if n < 1024 {
        r.notes.push(format!(
            "only {n} bins: the Hurst estimates are rough (want >= 1024)"
        ));
    }
}

/// The number of values above `10 x scale`, as Hill's `k` (at least 10 when there are more
/// than 10 values, and below their count).
fn hill_k(values: &[f64], scale: f64) -> usize {
    let above = values.iter().filter(|&&x| x > 10.0 * scale).count();
    above.max(10).min(values.len().saturating_sub(1))
}

fn share_lines(r: &mut Report, names: &[String], targets: &[f64], counts: &[u64]) {
    let total: u64 = counts.iter().sum();
    for ((name, &t), &c) in names.iter().zip(targets).zip(counts) {
        let share = if total == 0 {
            f64::NAN
        } else {
            c as f64 / total as f64
        };
        let sd = (t * (1.0 - t) / total.max(1) as f64).sqrt();
        r.lines.push(Line::new(
            format!("pool share {name}"),
            share,
            Some((t, (4.0 * sd).max(0.01))),
        ));
    }
}

/// `max(0.01, 4 se)` with `se` the standard error of the mean of the per-source ON fractions:
/// the sources are independent, so their spread measures how far a plan of this length can
/// honestly be from rho (heavy tails make short plans wander far).
fn rho_tolerance(plan: &Plan) -> f64 {
    let n = plan.sources();
    let f: Vec<f64> = (0..n)
        .map(|s| {
            plan.periods(s)
                .filter(|p| p.on)
                .map(|p| p.end - p.start)
                .sum::<f64>()
                / plan.duration()
        })
        .collect();
    let m = stats::mean(&f);
    let var = if n > 1 {
        f.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1) as f64
    } else {
        0.25
    };
    (4.0 * (var / n as f64).sqrt()).max(0.01)
}

/// Checks a plan (and the user table, if any) against the profile.
pub fn check_plan<R: Rng + ?Sized>(
    profile: &Profile,
    plan: &Plan,
    users: Option<&UserTable>,
    opts: &CheckOptions,
    rng: &mut R,
) -> Report {
    let mut r = Report::default();
    let o = &profile.onoff;
    let model = profile.onoff_model().ok();
    let rho = model.map_or(o.rho, |m| m.rho());
    r.lines.push(Line::new(
        "achieved rho",
        plan.on_fraction(),
        Some((rho, rho_tolerance(plan))),
    ));

    let (on, off) = plan.complete_periods();
    let pareto = o.law == PeriodKind::Pareto;
    for (label, periods, law, alpha) in [
        ("ON", &on, model.map(|m| m.on), o.alpha_on),
        ("OFF", &off, model.map(|m| m.off), o.alpha_off),
    ] {
        let target = |tol| pareto.then_some((alpha, tol));
        if let Some(PeriodLaw::Pareto(t)) = law {
            let mle = stats::pareto_mle(periods, t.beta(), t.upper(), t.mode()).unwrap_or(f64::NAN);
            r.lines.push(Line::new(
                format!("tail index {label} (MLE)"),
                mle,
                target(0.1),
            ));
            let k = hill_k(periods, t.beta());
            let hill = stats::hill(periods, k).unwrap_or(f64::NAN);
            r.lines.push(Line::new(
                format!("tail index {label} (Hill, k={k})"),
                hill,
                target(0.2),
            ));
        } else {
            // Not a Pareto law: Hill over the top 1% is shown for comparison only.
            let k = (periods.len() / 100)
                .max(10)
                .min(periods.len().saturating_sub(1));
            let hill = stats::hill(periods, k).unwrap_or(f64::NAN);
            r.lines.push(Line::new(
                format!("tail index {label} (Hill, k={k})"),
                hill,
                None,
            ));
        }
    }
    let series = plan.on_count_series(opts.bin);
    let cap = max_block(Some(profile), opts.bin);
    hurst_lines(
        &mut r,
        &series,
        Some(plan.sources() as f64 * rho),
        Some(hurst_target(profile)),
        cap,
    );
    r.notes.push(format!(
        "{} sources x {} s, {} complete ON and {} OFF periods, {} bins of {} s",
        plan.sources(),
        plan.duration(),
        on.len(),
        off.len(),
        series.len(),
        opts.bin
    ));

    if let Some(u) = users {
        let mut counts = vec![0u64; u.pool_names().len()];
        for _ in 0..opts.pool_draws {
            counts[u.user(u.choose(rng)).pool] += 1;
        }
        share_lines(&mut r, u.pool_names(), &u.pool_shares(), &counts);
    }
    r
}

/// A trace of requests sent: one row per request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    /// Send times, seconds, in file order.
    pub times: Vec<f64>,
    /// The source of each request, when the trace has a `source` column.
    pub sources: Option<Vec<u32>>,
    /// The pool of each request, when the trace has a `pool` column.
    pub pools: Option<Vec<String>>,
    /// `(time_s, answer seconds)` of each row with an `answer_s` value (a copier's answer time
    /// per request unit, or an interval's mean); empty without the column.
    pub answers: Vec<(f64, f64)>,
}

/// Errors reading a trace.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TraceError {
    /// The header is missing or has no `time_s` column.
    #[error(
        "trace CSV: the first line must be a header with time_s and source and/or pool, got {0:?}"
    )]
    Header(String),
    /// A row could not be read.
    #[error("trace CSV line {line}: {msg}")]
    Row {
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        msg: String,
    },
}

impl Trace {
    /// Reads `time_s[,source][,pool][,count][,answer_s]` rows (the header names the columns, in
    /// any order; others are ignored). A `count` column makes a row stand for that many
    /// requests at its time (a copier's per-interval `--trace`); `answer_s` is an answer time
    /// in seconds, `-` for none.
    pub fn from_csv(text: &str) -> Result<Trace, TraceError> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'));
        let (_, header) = lines
            .next()
            .ok_or_else(|| TraceError::Header(String::new()))?;
        let cols: Vec<&str> = header.split(',').map(str::trim).collect();
        let pos = |name| cols.iter().position(|c| *c == name);
        let t_col = pos(trace::TIME_S).ok_or_else(|| TraceError::Header(header.into()))?;
        let (s_col, p_col, n_col, a_col) = (
            pos(trace::SOURCE),
            pos(trace::POOL),
            pos(trace::COUNT),
            pos(trace::ANSWER_S),
        );
        if s_col.is_none() && p_col.is_none() {
            return Err(TraceError::Header(header.into()));
        }
        let mut tr = Trace {
            times: Vec::new(),
            sources: s_col.map(|_| Vec::new()),
            pools: p_col.map(|_| Vec::new()),
            answers: Vec::new(),
        };
        for (idx, raw) in lines {
            let line = idx + 1;
            let f: Vec<&str> = raw.split(',').map(str::trim).collect();
            if f.len() != cols.len() {
                return Err(TraceError::Row {
                    line,
                    msg: format!("expected {} fields, got {}", cols.len(), f.len()),
                });
            }
            let t: f64 = f[t_col].parse().map_err(|e| TraceError::Row {
                line,
                msg: format!("time_s: {e}"),
            })?;
            let n: usize = match n_col {
                None => 1,
                Some(c) => f[c].parse().map_err(|e| TraceError::Row {
                    line,
                    msg: format!("count: {e}"),
                })?,
            };
            tr.times.extend(std::iter::repeat_n(t, n));
            if let (Some(c), Some(v)) = (s_col, tr.sources.as_mut()) {
                let src: u32 = f[c].parse().map_err(|e| TraceError::Row {
                    line,
                    msg: format!("source: {e}"),
                })?;
                v.extend(std::iter::repeat_n(src, n));
            }
            if let (Some(c), Some(v)) = (p_col, tr.pools.as_mut()) {
                v.extend(std::iter::repeat_n(f[c].to_string(), n));
            }
            if let Some(c) = a_col.filter(|&c| f[c] != "-") {
                let a: f64 = f[c].parse().map_err(|e| TraceError::Row {
                    line,
                    msg: format!("answer_s: {e} (seconds, or - for none)"),
                })?;
                tr.answers.push((t, a));
            }
        }
        if tr.times.is_empty() {
            return Err(TraceError::Row {
                line: 0,
                msg: "no request".into(),
            });
        }
        Ok(tr)
    }
}

/// Checks a trace, against the profile's targets when one is given.
pub fn check_trace(profile: Option<&Profile>, trace: &Trace, opts: &CheckOptions) -> Report {
    let mut r = Report::default();
    let start = trace.times.iter().copied().fold(f64::INFINITY, f64::min);
    let end = trace
        .times
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    let rel: Vec<f64> = trace.times.iter().map(|t| t - start).collect();
    let series = stats::count_per_bin(&rel, opts.bin, (end - start).max(opts.bin));
    r.lines
        .push(Line::new("requests", trace.times.len() as f64, None));
    r.lines.push(Line::new(
        "mean requests per bin",
        stats::mean(&series),
        None,
    ));
    if !trace.answers.is_empty() {
        let mut a: Vec<f64> = trace.answers.iter().map(|&(_, a)| a).collect();
        a.sort_by(f64::total_cmp);
        for (name, q) in [("answer time p50 (s)", 0.5), ("answer time p99 (s)", 0.99)] {
            let i = ((q * a.len() as f64).ceil() as usize).clamp(1, a.len()) - 1;
            r.lines.push(Line::new(name, a[i], None));
        }
        r.notes.push(format!(
            "answer times of {} rows for {} requests (units sent ahead of an answer or not answered have none)",
            a.len(),
            trace.times.len()
        ));
    }

    if let Some(sources) = &trace.sources {
        let mut by_source: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for (&t, &s) in trace.times.iter().zip(sources) {
            by_source.entry(s).or_default().push(t);
        }
        let (mut on, mut off, mut on_time, mut span) = (Vec::new(), Vec::new(), 0.0, 0.0);
        for times in by_source.values_mut() {
            times.sort_by(f64::total_cmp);
            let inf = stats::infer_on_off(times, opts.idle, 0.0);
            on.extend(inf.on);
            off.extend(inf.off);
            on_time += inf.on_time;
            span += inf.span;
        }
        let target_rho = profile.map(|p| (p.onoff_model().map_or(p.onoff.rho, |m| m.rho()), 0.05));
        r.lines.push(Line::new(
            "achieved rho (inferred)",
            on_time / span,
            target_rho,
        ));
        let pareto = profile.is_some_and(|p| p.onoff.law == PeriodKind::Pareto);
        for (label, periods, alpha) in [
            ("ON", &on, profile.map(|p| p.onoff.alpha_on)),
            ("OFF", &off, profile.map(|p| p.onoff.alpha_off)),
        ] {
            let scale = periods
                .iter()
                .copied()
                .filter(|x| *x > 0.0)
                .fold(f64::INFINITY, f64::min);
            let k = hill_k(periods, scale);
            let hill = stats::hill(periods, k).unwrap_or(f64::NAN);
            let target = alpha.filter(|_| pareto).map(|a| (a, 0.2));
            r.lines.push(Line::new(
                format!("tail index {label} (Hill, k={k})"),
                hill,
                target,
            ));
        }
        r.notes.push(format!(
            "{} sources; ON/OFF inferred with idle gap {} s: {} complete ON, {} OFF periods",
            by_source.len(),
            opts.idle,
            on.len(),
            off.len()
        ));
    }
    // A Hurst target only where the run was gated by ON/OFF sources (otherwise the trace has
    // the online traffic's own dependence).
    hurst_lines(
        &mut r,
        &series,
        None,
        profile.filter(|p| p.onoff.enabled).map(hurst_target),
        max_block(profile, opts.bin),
    );
    if let Some(load) = profile
        .and_then(|p| p.schedule().ok())
        .map(|s| s.load().clone())
    {
        follow::rate_lines(&mut r, &load, &trace.times);
    }

    if let Some(pools) = &trace.pools {
        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        for p in pools {
            *counts.entry(p.as_str()).or_default() += 1;
        }
        match profile.filter(|p| !p.pools.is_empty()) {
            Some(p) => {
                let total: f64 = p.pools.iter().map(|x| x.weight).sum();
                let names: Vec<String> = p.pools.iter().map(|x| x.name.clone()).collect();
                let targets: Vec<f64> = p.pools.iter().map(|x| x.weight / total).collect();
                let c: Vec<u64> = names
                    .iter()
                    .map(|n| counts.get(n.as_str()).copied().unwrap_or(0))
                    .collect();
                share_lines(&mut r, &names, &targets, &c);
                let unknown: u64 = counts
                    .iter()
                    .filter(|(n, _)| !names.iter().any(|x| x == *n))
                    .map(|(_, c)| c)
                    .sum();
                if unknown > 0 {
                    r.lines.push(Line::new(
                        "requests from unknown pools",
                        unknown as f64,
                        Some((0.0, 0.0)),
                    ));
                }
            }
            None => {
                let total: u64 = counts.values().sum();
                for (n, c) in counts {
                    r.lines.push(Line::new(
                        format!("pool share {n}"),
                        c as f64 / total as f64,
                        None,
                    ));
                }
            }
        }
    }
    r.notes
        .push(format!("{} bins of {} s", series.len(), opts.bin));
    r
}

mod follow;

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn a_plan_from_its_own_profile_passes() {
        let p = Profile::from_toml_str(
            "[onoff]\nenabled = true\nsources = 32\n[[pools]]\nname = \"a\"\nweight = 2\ncidr = \"198.19.0.0/24\"\nusers = 10\n\
             [[pools]]\nname = \"b\"\ncidr = \"198.19.1.0/24\"\nusers = 10\n",
        )
        .unwrap();
        let mut rng = StdRng::seed_from_u64(60);
        let plan = Plan::generate(&p.onoff_model().unwrap(), 32, 100_000.0, &mut rng).unwrap();
        let users = UserTable::generate(&p.pool_specs().unwrap(), &mut rng).unwrap();
        let opts = CheckOptions {
            pool_draws: 20_000,
            ..CheckOptions::for_profile(&p)
        };
        let r = check_plan(&p, &plan, Some(&users), &opts, &mut rng);
        assert!(r.passed(), "{r}");
        assert_eq!(
            r.lines
                .iter()
                .filter(|l| l.verdict == Verdict::Pass)
                .count(),
            9,
            "{r}"
        );
        assert!((r.line("pool share a").unwrap().value - 2.0 / 3.0).abs() < 0.01);
        // The same plan fails against a profile that wants another shape and rho.
        let mut other = p.clone();
        other.onoff.alpha_on = 1.9;
        other.onoff.alpha_off = 1.9;
        other.onoff.rho = 0.2;
        let r = check_plan(&other, &plan, None, &opts, &mut rng);
        assert!(!r.passed());
        assert_eq!(r.line("achieved rho").unwrap().verdict, Verdict::Fail);
        assert_eq!(
            r.line("tail index ON (MLE)").unwrap().verdict,
            Verdict::Fail
        );
    }

    #[test]
    fn a_trace_of_a_gated_source_shows_its_plan() {
        // Two sources sending one request every 0.1 s while ON, per a known plan.
        let plan = Plan::from_csv(
            "0,0,10,on\n0,10,30,off\n0,30,35,on\n0,35,60,off\n0,60,100,on\n\
             1,0,20,off\n1,20,40,on\n1,40,70,off\n1,70,80,on\n1,80,100,off\n",
        )
        .unwrap();
        let mut csv = String::from("time_s,source,pool\n");
        for s in 0..2 {
            for k in 0..1000 {
                let t = f64::from(k) * 0.1;
                if plan.is_on(s, t) {
                    csv.push_str(&format!("{t},{s},{}\n", if k % 4 == 0 { "b" } else { "a" }));
                }
            }
        }
        let tr = Trace::from_csv(&csv).unwrap();
        let opts = CheckOptions {
            bin: 1.0,
            pool_draws: 0,
            idle: 1.0,
        };
        let r = check_trace(None, &tr, &opts);
        // ON time measured first to last request: 9.9 + 4.9 + 39.9 (first to last) and
        // 19.9 + 9.9 over spans 99.9 and 59.9.
        let rho = r.line("achieved rho (inferred)").unwrap().value;
        assert!((rho - (54.7 + 29.8) / (99.9 + 59.9)).abs() < 1e-9, "{rho}");
        assert!((r.line("pool share a").unwrap().value - 0.75).abs() < 0.01);
        assert_eq!(r.line("requests").unwrap().value, tr.times.len() as f64);
        assert!(Trace::from_csv("t,x\n1,2\n").is_err());
        assert!(Trace::from_csv("time_s,source\n1\n").is_err());
    }
}
