//! How closely a trace of a run followed its profile's load schedule: the request rate of
//! every phase (or every bucket of a curve) against what the schedule asks for.
//!
//! The schedule gives the factor over time, not a rate: the rate also depends on the online
//! traffic. A run's trace is held to the schedule's *shape*: the reference rate `R` (requests
//! per second at load 1) is fitted by least squares over the run's 1 s bins (`R = sum(c g) /
//! sum(g^2)`, `c` the count and `g` the load of each bin), and each segment's rate must be `R`
//! times its mean load, within `max(5 %, 3 sigma)` (`sigma` the Poisson deviation of its count).
//! This assumes a steady online rate over the run. Times are the trace's own (seconds since the
//! schedule's start: a copier's `--trace` writes them so).

use super::{Line, Report};
use crate::schedule::Load;

/// One stretch of the schedule.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Segment {
    pub name: String,
    pub start: f64,
    pub end: f64,
}

/// The phases of `load`, or its curve's buckets, up to `until`; `[]` for a constant load.
pub(crate) fn segments(load: &Load, until: f64) -> Vec<Segment> {
    let mut out = Vec::new();
    match load {
        Load::Constant(_) => {}
        Load::Phases(phases) => {
            let mut t = 0.0;
            for p in phases {
                out.push(Segment {
                    name: format!("phase {}", p.name),
                    start: t,
                    end: t + p.duration,
                });
                t += p.duration;
            }
        }
        Load::Curve(_) => {
            // The curve's buckets, found where its factor changes (whole seconds); the last
            // one is taken as long as the first.
            let last = load.end().unwrap_or(0.0);
            let mut start = 0.0;
            let mut width = None;
            let mut t = 1.0;
            while t <= last + width.unwrap_or(1.0) {
                let past = t >= last + width.unwrap_or(1.0);
                if past || (load.factor_at(t) - load.factor_at(start)).abs() > 1e-12 {
                    width.get_or_insert(t - start);
                    out.push(Segment {
                        name: format!("bucket {}-{} s", start, t),
                        start,
                        end: t,
                    });
                    start = t;
                }
                t += 1.0;
            }
        }
    }
    out.retain(|s| s.start < until);
    for s in &mut out {
        s.end = s.end.min(until);
    }
    out.retain(|s| s.end - s.start >= 1.0);
    out
}

/// Add a rate line per segment of `load` for the request `times` (seconds since the
/// schedule's start); nothing for a constant load.
pub(crate) fn rate_lines(r: &mut Report, load: &Load, times: &[f64]) {
    let end = times.iter().copied().fold(0.0, f64::max).ceil();
    let segs = segments(load, end);
    if segs.is_empty() || times.is_empty() {
        return;
    }
    let bins = end as usize;
    let mut counts = vec![0.0; bins.max(1)];
    for &t in times {
        if t >= 0.0 {
            counts[(t as usize).min(bins.saturating_sub(1))] += 1.0;
        }
    }
    // The load of bin i: its mean over the bin (ramps are linear, so the midpoint).
    let g: Vec<f64> = (0..counts.len())
        .map(|i| load.factor_at(i as f64 + 0.5))
        .collect();
    let (cg, gg) = counts
        .iter()
        .zip(&g)
        .fold((0.0, 0.0), |(a, b), (c, g)| (a + c * g, b + g * g));
    if gg <= 0.0 {
        return;
    }
    let reference = cg / gg;
    r.notes.push(format!(
        "rate per segment: reference {reference:.3} requests/s at load 1, fitted over {} 1 s bins (assumes a steady online rate)",
        counts.len()
    ));
    for s in segs {
        let (a, b) = (s.start as usize, (s.end as usize).min(counts.len()));
        if b <= a {
            continue;
        }
        let dur = (b - a) as f64;
        let got: f64 = counts[a..b].iter().sum();
        let want: f64 = reference * g[a..b].iter().sum::<f64>();
        let tol = (0.05 * want).max(3.0 * want.max(1.0).sqrt());
        r.lines.push(Line::new(
            format!("rate {} (requests/s)", s.name),
            got / dur,
            Some((want / dur, tol / dur)),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Verdict;
    use crate::schedule::Phase;

    fn phases() -> Load {
        Load::Phases(vec![
            Phase {
                name: "up".into(),
                duration: 20.0,
                from: 0.2,
                to: 1.0,
            },
            Phase {
                name: "steady".into(),
                duration: 20.0,
                from: 1.0,
                to: 1.0,
            },
            Phase {
                name: "down".into(),
                duration: 20.0,
                from: 1.0,
                to: 0.2,
            },
        ])
    }

    /// Requests at `rate x load(t)`, evenly spread in each bin.
    fn trace(load: &Load, rate: f64, secs: usize) -> Vec<f64> {
        let mut out = Vec::new();
        for i in 0..secs {
            let n = (rate * load.factor_at(i as f64 + 0.5)).round() as usize;
            out.extend((0..n).map(|k| i as f64 + (k as f64 + 0.5) / n as f64));
        }
        out
    }

    #[test]
    fn a_trace_that_follows_the_phases_passes_and_a_flat_one_fails() {
        let load = phases();
        let mut r = Report::default();
        rate_lines(&mut r, &load, &trace(&load, 50.0, 60));
        assert_eq!(r.lines.len(), 3, "{r:?}");
        assert!(r.lines.iter().all(|l| l.verdict == Verdict::Pass), "{r:?}");
        assert!((r.lines[1].value - 50.0).abs() < 0.5);
        let mut flat = Report::default();
        rate_lines(&mut flat, &load, &trace(&Load::Constant(0.6), 50.0, 60));
        assert!(
            flat.lines.iter().any(|l| l.verdict == Verdict::Fail),
            "{flat:?}"
        );
    }

    #[test]
    fn curve_buckets_are_segments() {
        let curve =
            crate::schedule::Curve::from_csv("time_s,rate\n0,10\n15,20\n30,10\n", None).unwrap();
        let load = Load::Curve(curve);
        let s = segments(&load, 45.0);
        let bounds: Vec<(f64, f64)> = s.iter().map(|s| (s.start, s.end)).collect();
        assert_eq!(bounds, vec![(0.0, 15.0), (15.0, 30.0), (30.0, 45.0)]);
        let mut r = Report::default();
        rate_lines(&mut r, &load, &trace(&load, 30.0, 45));
        assert_eq!(r.lines.len(), 3, "{r:?}");
        assert!(r.lines.iter().all(|l| l.verdict == Verdict::Pass), "{r:?}");
    }
}

#[cfg(test)]
mod count_column {
    use crate::check::Trace;

    #[test]
    fn a_count_column_stands_for_that_many_requests() {
        let tr = Trace::from_csv(
            "time_s,pool,count,target\n0.5,home,3,198.18.2.2:80\n1.5,office,0,x\n2.5,home,2,x\n",
        )
        .unwrap();
        assert_eq!(tr.times, vec![0.5, 0.5, 0.5, 2.5, 2.5]);
        assert_eq!(tr.pools.unwrap().len(), 5);
        assert!(Trace::from_csv("time_s,pool,count\n0.5,home,-1\n")
            .unwrap_err()
            .to_string()
            .contains("count"));
    }
}

#[cfg(test)]
mod answer_column {
    use crate::check::{check_trace, CheckOptions, Trace};

    #[test]
    fn answer_times_are_read_and_reported() {
        let csv = "time_s,copy,user,pool,target,answer_s\n0.1,0,-,-,t,0.200\n0.2,0,-,-,t,-\n0.3,1,-,-,t,0.400\n";
        let tr = Trace::from_csv(csv).unwrap();
        assert_eq!(tr.answers, vec![(0.1, 0.2), (0.3, 0.4)]);
        let r = check_trace(
            None,
            &tr,
            &CheckOptions {
                bin: 1.0,
                pool_draws: 0,
                idle: 1.0,
            },
        );
        let line = |n: &str| r.lines.iter().find(|l| l.name == n).map(|l| l.value);
        assert_eq!(line("answer time p50 (s)"), Some(0.2));
        assert_eq!(line("answer time p99 (s)"), Some(0.4));
        let bad = Trace::from_csv("time_s,pool,answer_s\n0.5,home,slow\n")
            .unwrap_err()
            .to_string();
        assert!(bad.contains("line 2") && bad.contains("answer_s"), "{bad}");
    }
}
