//! The summary printed when the copier stops: one worker's counters ([`Summary`]) and the run's
//! over every worker ([`RunSummary`]), as one line and its details.

use std::fmt;
use std::time::Duration;

use crate::capture::CaptureStats;
use crate::engine::EngineStats;
use crate::offline::ReplayStats;
use crate::send::SendStats;

/// The counters of a run, printed when the copier stops.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// The engine's counters (of the last engine, if it was rebuilt).
    pub engine: EngineStats,
    /// The capture's.
    pub capture: CaptureStats,
    /// The sender's.
    pub send: SendStats,
    /// Engine panics survived.
    pub panics: u64,
    /// How long the loop ran.
    pub elapsed: Duration,
    /// The replay's counters (`--offline`).
    pub offline: Option<ReplayStats>,
}

/// The figures of the summary line, summed over workers.
#[derive(Default)]
struct Line {
    packets: u64,
    kernel_drops: u64,
    started: u64,
    completed: u64,
    failed: u64,
    open_at_end: u64,
    /// `failed` by reason.
    fails: crate::engine::FailCounts,
    not_copied: u64,
    sent: u64,
    sent_bytes: u64,
    gso_whole: u64,
    gso_wire: u64,
    gso_cut: u64,
    shed_overload: crate::engine::ShedCounts,
    /// Unproven sessions and mid-stream candidates ended, by why.
    unproven: crate::engine::UnprovenCounts,
    retransmissions: u64,
    send_errors: u64,
    records: u64,
    panics: u64,
    tuple_moves: u64,
    units: u64,
    ahead: u64,
    lag: crate::engine::LagHistogram,
    requests: crate::engine::RequestCounts,
}

impl Line {
    fn of(parts: &[Summary]) -> Line {
        let mut l = Line::default();
        for p in parts {
            let (e, s) = (&p.engine, &p.send);
            l.packets += p.capture.packets;
            l.kernel_drops += p.capture.kernel_drops;
            l.started += e.sessions_started;
            l.completed += e.sessions_completed;
            l.failed += e.sessions_failed.total();
            l.open_at_end += e.sessions_open_at_end;
            for (r, n) in crate::engine::FailReason::ALL
                .iter()
                .map(|&r| (r, e.sessions_failed.get(r)))
            {
                l.fails.add(r, n);
            }
            l.not_copied += e.sessions_not_copied;
            l.sent += s.packets;
            l.sent_bytes += s.bytes;
            l.gso_whole += s.gso_whole;
            l.gso_wire += s.gso_wire_segments;
            l.gso_cut += s.gso_cut;
            l.shed_overload.merge(&e.sessions_shed_overload);
            for &r in crate::engine::UnprovenEnd::ALL {
                l.unproven.add(r, e.unproven_ended.get(r));
            }
            l.retransmissions += e.retransmissions;
            l.send_errors += s.err_msgsize + s.err_nobufs + s.err_again + s.err_perm + s.err_other;
            l.records += e.records_received;
            l.panics += p.panics;
            l.tuple_moves += e.tuple_moves;
            l.units += e.units_sent;
            l.ahead += e.units_ahead;
            l.lag.merge(&e.replay_lag);
            l.requests.merge(&e.requests);
        }
        l
    }

    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why: Vec<String> = self
            .fails
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        let mut why = if why.is_empty() {
            String::new()
        } else {
            format!(" ({})", why.join(", "))
        };
        if self.open_at_end > 0 {
            why.push_str(&format!(", {} open at the capture's end", self.open_at_end));
        }
        write!(
            f,
            "captured {} packets ({} dropped by the kernel); sessions {} started, {} completed, \
             {} failed{why}, {} not copied (no intercept); sent {} segments ({} bytes, {} retransmissions, {} send errors); \
             {} records received",
            self.packets,
            self.kernel_drops,
            self.started,
            self.completed,
            self.failed,
            self.not_copied,
            self.sent,
            self.sent_bytes,
            self.retransmissions,
            self.send_errors,
            self.records,
        )?;
        if self.shed_overload.total() > 0 {
            write!(
                f,
                "; {} session(s) not copied because the copier was behind ({} for a capture backlog, {} after kernel drops, \
                 {} given up at a hole the capture lost)",
                self.shed_overload.total(),
                self.shed_overload.capture_backlog,
                self.shed_overload.kernel_drops,
                self.shed_overload.hole
            )?;
        }
        let (shed, timeout) = (self.unproven.unproven_shed, self.unproven.unproven_timeout);
        if shed + timeout > 0 {
            write!(
                f,
                "; {} unproven session(s) or mid-stream candidate(s) ended ({shed} unproven_shed, {timeout} unproven_timeout)",
                shed + timeout
            )?;
        }
        if self.gso_whole + self.gso_cut > 0 {
            write!(
                f,
                "; super-segments: {} sent whole ({} segments on the wire), {} cut by the copier",
                self.gso_whole, self.gso_wire, self.gso_cut
            )?;
        }
        if self.units > 0 {
            let ms = |q: f64| match self.lag.quantile_bound(q) {
                Some(b) if b.is_finite() => format!("<= {} ms", (b * 1e6).round() / 1e3),
                _ => format!(
                    "> {} s",
                    crate::engine::LAG_BOUNDS[crate::engine::LAG_BOUNDS.len() - 1]
                ),
            };
            write!(
                f,
                "; {} requests sent ({} ahead of an answer), replay lag p50 {}, p99 {}",
                self.units,
                self.ahead,
                ms(0.5),
                ms(0.99)
            )?;
        }
        let r = &self.requests;
        if !r.names.is_empty() {
            write!(
                f,
                "; rules: {} HTTP requests and {} other units read, {} dropped, {} edited, {} malformed",
                r.http_requests, r.byte_units, r.dropped, r.edited, r.malformed
            )?;
            let matched: Vec<String> = r
                .names
                .iter()
                .zip(&r.rules)
                .map(|(n, c)| format!("{n} {c}"))
                .collect();
            write!(f, " (matched: {})", matched.join(", "))?;
        }
        if self.tuple_moves > 0 {
            write!(
                f,
                "; {} copies moved to another test tuple (held by another copier)",
                self.tuple_moves
            )?;
        }
        if self.panics > 0 {
            write!(f, "; the engine was rebuilt after {} panic(s)", self.panics)?;
        }
        Ok(())
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "copier ran {:.1}s: ", self.elapsed.as_secs_f64())?;
        Line::of(std::slice::from_ref(self)).write(f)?;
        if let Some(o) = &self.offline {
            write!(f, "; offline: {o}")?;
        }
        Ok(())
    }
}

/// The summaries of every worker's loop, printed when the copier stops: one line, with totals
/// and, for several workers, the share of each.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// One per worker, in worker order.
    pub workers: Vec<Summary>,
    /// The mirror input's counters (`--mirror`).
    pub mirror: Option<crate::mirror::MirrorStats>,
}

impl fmt::Display for RunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_workers(f)?;
        if let Some(m) = &self.mirror {
            write!(f, "; {m}")?;
        }
        Ok(())
    }
}

impl RunSummary {
    fn fmt_workers(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let [one] = &self.workers[..] {
            return fmt::Display::fmt(one, f);
        }
        let elapsed = self
            .workers
            .iter()
            .map(|w| w.elapsed)
            .max()
            .unwrap_or_default();
        write!(
            f,
            "copier ran {:.1}s with {} workers: ",
            elapsed.as_secs_f64(),
            self.workers.len()
        )?;
        Line::of(&self.workers).write(f)?;
        let each = |g: fn(&Summary) -> u64| {
            self.workers
                .iter()
                .map(|w| g(w).to_string())
                .collect::<Vec<_>>()
                .join("/")
        };
        write!(
            f,
            "; per worker: captured {}, kernel drops {}, sessions started {}, segments sent {}",
            each(|w| w.capture.packets),
            each(|w| w.capture.kernel_drops),
            each(|w| w.engine.sessions_started),
            each(|w| w.send.packets),
        )
    }
}
