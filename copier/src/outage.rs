//! The health of a file output (`--record`, `--compare-log`) when its disk fills or fails: the
//! copy goes on, the first error of an outage is logged once (not per packet), every failed
//! write is counted (`copier_output_errors_total{output,reason}`), what could not be written is
//! dropped and counted (`copier_output_dropped_total{output}`), and the first write that works
//! again logs once that the output resumed (`copier_output_down{output}` is 1 in between).
//!
//! Owns: [`Outage`] and the `reason` of an error ([`reason`]).

use std::io;
use std::time::Instant;

use metrics::{counter, gauge};

use crate::metrics_table::output as names;

common::reasons! {
    /// Why a write of a file output failed: the `reason` label of `copier_output_errors_total`.
    enum WriteError;
    /// ENOSPC.
    NoSpace => no_space,
    /// EDQUOT.
    Quota => quota,
    /// EROFS.
    ReadOnly => read_only,
    /// EACCES, EPERM.
    Permission => permission,
    /// Any other error.
    Other => other,
}

impl WriteError {
    /// The reason of `e`.
    pub fn of(e: &io::Error) -> WriteError {
        match e.raw_os_error() {
            Some(libc::ENOSPC) => WriteError::NoSpace,
            Some(libc::EDQUOT) => WriteError::Quota,
            Some(libc::EROFS) => WriteError::ReadOnly,
            Some(libc::EACCES | libc::EPERM) => WriteError::Permission,
            _ => WriteError::Other,
        }
    }
}

/// The `reason` label of a write error: `no_space` (ENOSPC), `quota` (EDQUOT), `read_only`
/// (EROFS), `permission` (EACCES, EPERM) or `other` ([`WriteError`]).
pub fn reason(e: &io::Error) -> &'static str {
    WriteError::of(e).label()
}

/// One output's state (see the module documentation).
#[derive(Debug)]
pub struct Outage {
    output: &'static str,
    what: String,
    down_since: Option<Instant>,
    dropped: u64,
}

impl Outage {
    /// The state of `output` (the metric label: `record`, `compare_log`), named `what` in the
    /// log (the flag and its path).
    pub fn new(output: &'static str, what: String) -> Outage {
        Outage {
            output,
            what,
            down_since: None,
            dropped: 0,
        }
    }

    /// A write failed, and `lost` items (packets, lines) with it.
    pub fn failed(&mut self, e: &io::Error, lost: u64) {
        counter!(names::OUTPUT_ERRORS_TOTAL, "output" => self.output, "reason" => reason(e))
            .increment(1);
        let first = self.down_since.is_none();
        if first {
            self.down_since = Some(Instant::now());
            self.dropped = 0;
        }
        self.dropped(lost);
        if first {
            gauge!(names::OUTPUT_DOWN, "output" => self.output).set(1.0);
            tracing::error!(
                "{}: {e}: what cannot be written is dropped (copying goes on); writing resumes by itself when it can",
                self.what
            );
        }
    }

    /// `n` items not written (lost with a write, or not tried while the output is down).
    pub fn dropped(&mut self, n: u64) {
        if n > 0 {
            counter!(names::OUTPUT_DROPPED_TOTAL, "output" => self.output).increment(n);
            self.dropped += n;
        }
    }

    /// A write went to disk: ends an outage (logged once).
    pub fn wrote(&mut self) {
        if let Some(t) = self.down_since.take() {
            gauge!(names::OUTPUT_DOWN, "output" => self.output).set(0.0);
            tracing::info!(
                "{}: writing resumed after {:.1} s; {} item(s) dropped meanwhile",
                self.what,
                t.elapsed().as_secs_f64(),
                self.dropped
            );
        }
    }

    /// Counts what a write of whole units gave (`common::sink`): `Ok(true)` wrote, `Ok(false)`
    /// only buffered, an error lost units.
    pub fn note(&mut self, r: Result<bool, common::sink::Lost>) {
        match r {
            Ok(true) => self.wrote(),
            Ok(false) => {}
            Err(l) => self.failed(&l.error, l.units),
        }
    }

    /// Whether the output is in an outage.
    pub fn is_down(&self) -> bool {
        self.down_since.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons() {
        assert_eq!(
            reason(&io::Error::from_raw_os_error(libc::ENOSPC)),
            "no_space"
        );
        assert_eq!(reason(&io::Error::from_raw_os_error(libc::EDQUOT)), "quota");
        assert_eq!(reason(&io::Error::other("x")), "other");
    }
}
