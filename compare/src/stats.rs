//! What the comparison counted, per endpoint and in all.
//!
//! Owns: [`EndpointStats`] (compared, equal, differing by kind, malformed, noise learned, the
//! differing fields, answer times online and on test as [`LogHist`]s), [`Totals`] and the
//! [`Summary`] printed at exit. Bounded: at most [`MAX_FIELDS`] differing fields per endpoint.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::fields::Kind;

/// The smallest answer time a ratio uses (see [`EndpointStats::time_ratio`]).
pub const TIME_FLOOR: Duration = Duration::from_millis(1);

/// Differing fields remembered per endpoint (later ones still count in their kind).
pub const MAX_FIELDS: usize = 64;

/// A histogram of durations in buckets a quarter of a power of two wide (1 us .. ~70 min).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogHist {
    buckets: Vec<u64>,
    count: u64,
}

const BUCKETS: usize = 128;

impl Default for LogHist {
    fn default() -> Self {
        LogHist {
            buckets: vec![0; BUCKETS],
            count: 0,
        }
    }
}

impl LogHist {
    /// Adds one duration.
    pub fn add(&mut self, d: Duration) {
        let us = d.as_micros().max(1) as f64;
        let i = ((us.log2() * 4.0) as usize).min(BUCKETS - 1);
        self.buckets[i] += 1;
        self.count += 1;
    }

    /// How many were added.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The `q` quantile (0..=1), as the upper edge of its bucket; None when empty.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(Duration::from_micros(2f64.powf((i + 1) as f64 / 4.0) as u64));
            }
        }
        None
    }
}

/// Counts of one endpoint.
#[derive(Debug, Clone, Default)]
pub struct EndpointStats {
    /// Exchanges compared (malformed ones not included).
    pub compared: u64,
    /// Exchanges with no difference left after noise.
    pub equal: u64,
    /// Exchanges with at least one difference.
    pub differing: u64,
    /// Exchanges with at least one difference of each kind.
    pub by_kind: BTreeMap<Kind, u64>,
    /// Exchanges where an answer was not parseable HTTP.
    pub malformed: u64,
    /// Noise fields learned.
    pub noise_learned: u64,
    /// Differing fields (generalized) -> exchanges.
    pub fields: BTreeMap<String, u64>,
    /// Online answer times.
    pub online_time: LogHist,
    /// Test (candidate) answer times.
    pub test_time: LogHist,
}

impl EndpointStats {
    /// Test p-quantile answer time over the online one (None until both have one). Both are
    /// taken as at least [`TIME_FLOOR`]: below it the times are those of the hosts (a capture
    /// or NFQUEUE read, a send mark, the path to the test server, the clock offset's error)
    /// more than the servers', and a ratio of two of them says nothing.
    pub fn time_ratio(&self, q: f64) -> Option<f64> {
        let on = self.online_time.quantile(q)?.max(TIME_FLOOR).as_secs_f64();
        let t = self.test_time.quantile(q)?.max(TIME_FLOOR).as_secs_f64();
        Some(t / on)
    }

    /// Differing exchanges over compared ones.
    pub fn diff_rate(&self) -> f64 {
        if self.compared == 0 {
            0.0
        } else {
            self.differing as f64 / self.compared as f64
        }
    }
}

/// Counts over every endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    /// Exchanges compared.
    pub compared: u64,
    /// ... of which equal.
    pub equal: u64,
    /// ... of which differing.
    pub differing: u64,
    /// Exchanges with a malformed answer (not compared).
    pub malformed: u64,
    /// Exchanges whose baseline answer never came (compared two-way).
    pub baseline_missing: u64,
    /// The candidate's answers compared, by their `grpc-status` (a gRPC answer's trailer, or its
    /// header in a trailers-only answer); at most [`MAX_GRPC_STATUSES`] values, the others
    /// under `other`.
    pub grpc_status: BTreeMap<String, u64>,
}

/// Distinct `grpc-status` values counted (gRPC defines 17, 0 to 16).
pub const MAX_GRPC_STATUSES: usize = 20;

/// The text printed at exit: totals and the endpoints that differ, worst first.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Totals.
    pub totals: Totals,
    /// (endpoint, stats, noise fields) of every endpoint, by difference rate, worst first.
    pub endpoints: Vec<(String, EndpointStats, Vec<String>)>,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.totals;
        write!(
            f,
            "compare: {} exchanges compared, {} equal, {} differing, {} malformed",
            t.compared, t.equal, t.differing, t.malformed
        )?;
        if t.baseline_missing > 0 {
            write!(f, ", {} without a baseline answer", t.baseline_missing)?;
        }
        if !t.grpc_status.is_empty() {
            let s: Vec<String> = t
                .grpc_status
                .iter()
                .map(|(k, n)| format!("{k} x{n}"))
                .collect();
            write!(f, "; test grpc-status: {}", s.join(", "))?;
        }
        for (name, s, noise) in &self.endpoints {
            if s.differing == 0 && s.malformed == 0 {
                continue;
            }
            write!(
                f,
                "\n  {name}: {}/{} differ ({:.1}%)",
                s.differing,
                s.compared,
                100.0 * s.diff_rate()
            )?;
            let fields: Vec<String> = s.fields.iter().map(|(k, n)| format!("{k} x{n}")).collect();
            if !fields.is_empty() {
                write!(f, "; fields: {}", fields.join(", "))?;
            }
            if !noise.is_empty() {
                write!(f, "; noise: {}", noise.join(", "))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loghist_quantiles() {
        let mut h = LogHist::default();
        assert_eq!(h.quantile(0.5), None);
        for ms in 1..=100u64 {
            h.add(Duration::from_millis(ms));
        }
        let p50 = h.quantile(0.5).unwrap().as_secs_f64();
        let p99 = h.quantile(0.99).unwrap().as_secs_f64();
        // within one bucket (19%) above the true value
        assert!((0.050..0.060).contains(&p50), "{p50}");
        assert!((0.099..0.119).contains(&p99), "{p99}");
        h.add(Duration::from_secs(1_000_000));
        assert!(h.quantile(1.0).is_some());
    }

    #[test]
    fn ratio() {
        let mut s = EndpointStats::default();
        assert_eq!(s.time_ratio(0.5), None);
        s.online_time.add(Duration::from_micros(1));
        s.test_time.add(Duration::from_micros(500));
        assert_eq!(s.time_ratio(0.5), Some(1.0), "both under the floor");
        let mut s = EndpointStats::default();
        for _ in 0..10 {
            s.online_time.add(Duration::from_millis(10));
            s.test_time.add(Duration::from_millis(40));
        }
        let r = s.time_ratio(0.5).unwrap();
        assert!((3.0..5.5).contains(&r), "{r}");
    }
}
