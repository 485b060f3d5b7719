//! Resting NFQUEUE workers: after a receive batch whose records nothing waits on, a worker may
//! wait a little before it reads the queue again, so that the next packets come in one read,
//! one verdict message and one write to the copier instead of one each (at 4 ms think time the
//! intercept read about two packets per wake-up; resting 2 ms cut its CPU per copied request
//! by about half, 20 ms, the copier's default since, by about two thirds: see docs/perf-notes.md).
//!
//! Each copier says how long its records may wait (`Message::RecordWait`, with
//! `FEATURE_RECORD_WAIT`): its `--record-wait` while its engine does not wait on records, zero
//! while it does (lock-step sessions, whose next request waits for this answer) or with
//! `--compare`. A connection starts at zero, so a copier that never says anything (an older
//! one) keeps every record at the kernel's pace.
//!
//! Invariants:
//! - a worker rests only after a batch that gave records to copiers and accepted nothing (an
//!   allow-listed client's answer that comes during a rest waits for its end, at most the
//!   copiers' wait, and the next batch, having accepted it, is followed by no rest, so such
//!   traffic flows at the kernel's pace), none of whose records is urgent (SYN, FIN or RST: a
//!   handshake or a close waits on it; more than 4 KiB of data or data without PSH: the rest of
//!   an answer may wait for the copier's ACK; `Record::urgent`), and whose receive was not full
//!   (then more is queued already);
//! - it rests at most the smallest wait of the connected copiers, capped at `--max-rest`
//!   ([`MAX_REST`] by default and at most; zero: never), and
//!   at [`REGISTER_REST`] within [`AFTER_REGISTER`] of a registration (the connection's
//!   SYN-ACK is on its way: it waits at most that), and not at all while any copier says zero;
//! - a copier that turns to zero, and every registration, wake resting workers at once
//!   (`Thread::unpark`): nothing waits for the end of a rest that is no longer allowed;
//! - the kernel keeps the packets meanwhile (the queue holds 16,384 and the socket buffer
//!   16 MiB; a rest is at most 20 ms).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread::Thread;
use std::time::{Duration, Instant};

use crate::router::CopierId;

/// The longest rest, whatever a copier says.
pub const MAX_REST: Duration = Duration::from_millis(20);

/// Rests are short for this long after a registration.
pub const AFTER_REGISTER: Duration = Duration::from_millis(100);

/// The longest rest within [`AFTER_REGISTER`] of a registration.
pub const REGISTER_REST: Duration = Duration::from_micros(500);

/// What one worker cycle (a receive, the extra looks before its write) saw, for [`rests_after`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleSeen {
    /// Records handed to copiers.
    pub records: usize,
    /// One of them was urgent (`Record::urgent`: SYN, FIN or RST, part of a large or
    /// unfinished answer, or did not parse).
    pub urgent: bool,
    /// A packet got an ACCEPT verdict.
    pub accepted: bool,
    /// A receive took as many datagrams as it could.
    pub full: bool,
}

/// Whether a worker may rest after a cycle (see the module doc).
#[must_use]
pub fn rests_after(seen: CycleSeen) -> bool {
    seen.records > 0 && !seen.urgent && !seen.accepted && !seen.full
}

/// How long the workers may rest, as the copiers say; shared by the control tasks and the
/// workers.
#[derive(Debug)]
pub struct Rest {
    /// Each connected copier's wait, in microseconds.
    waits: Mutex<HashMap<CopierId, u32>>,
    /// The smallest of them (0 with no copier): what the workers read.
    least: AtomicU32,
    /// The longest rest this intercept allows (`--max-rest`), in microseconds.
    max: AtomicU32,
    epoch: Instant,
    /// The last registration, in milliseconds since `epoch`, plus one (0: none yet).
    last_register: AtomicU64,
    workers: Mutex<Vec<Thread>>,
}

impl Default for Rest {
    fn default() -> Self {
        Rest::new()
    }
}

impl Rest {
    /// No copier, no rest.
    pub fn new() -> Rest {
        Rest {
            waits: Mutex::new(HashMap::new()),
            least: AtomicU32::new(0),
            max: AtomicU32::new(MAX_REST.as_micros() as u32),
            epoch: Instant::now(),
            last_register: AtomicU64::new(0),
            workers: Mutex::new(Vec::new()),
        }
    }

    /// The longest rest this intercept allows (`--max-rest`; zero: never rest), at most
    /// [`MAX_REST`].
    pub fn set_max(&self, max: Duration) {
        let us = u32::try_from(max.min(MAX_REST).as_micros()).unwrap_or(0);
        self.max.store(us, Ordering::Relaxed);
    }

    /// The calling thread is a worker that rests with [`std::thread::park_timeout`]: wake it
    /// when a rest is cut short.
    pub fn enlist_current_worker(&self) {
        self.workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(std::thread::current());
    }

    /// A copier connected: its records wait for nothing until it says otherwise.
    pub fn join(&self, copier: CopierId) {
        self.update(|w| {
            w.insert(copier, 0);
        });
    }

    /// A copier said how long its records may wait (`Message::RecordWait`).
    pub fn set_wait(&self, copier: CopierId, micros: u32) {
        self.update(|w| {
            if let Some(v) = w.get_mut(&copier) {
                *v = micros;
            }
        });
    }

    /// A copier's connection ended.
    pub fn leave(&self, copier: CopierId) {
        self.update(|w| {
            w.remove(&copier);
        });
    }

    /// A registration came: short rests for [`AFTER_REGISTER`], from now.
    pub fn registered(&self, now: Instant) {
        self.last_register
            .fetch_max(self.millis(now), Ordering::Relaxed);
        self.wake_workers();
    }

    /// How long a worker may rest at `now` after a cycle that [`rests_after`] allows (zero:
    /// not at all).
    #[must_use]
    pub fn length(&self, now: Instant) -> Duration {
        let least = self
            .least
            .load(Ordering::Relaxed)
            .min(self.max.load(Ordering::Relaxed));
        let rest = Duration::from_micros(u64::from(least));
        let last = self.last_register.load(Ordering::Relaxed);
        if last > 0 && self.millis(now).saturating_sub(last) < AFTER_REGISTER.as_millis() as u64 {
            return rest.min(REGISTER_REST);
        }
        rest
    }

    /// Milliseconds from `epoch` to `now`, plus one (so 0 means never).
    fn millis(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX - 1)
            + 1
    }

    fn update(&self, f: impl FnOnce(&mut HashMap<CopierId, u32>)) {
        let mut w = self.waits.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut w);
        let least = w.values().copied().min().unwrap_or(0);
        let before = self.least.swap(least, Ordering::Relaxed);
        drop(w);
        if least < before {
            self.wake_workers();
        }
    }

    fn wake_workers(&self) {
        for t in self
            .workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            t.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_rests_only_after_records_nothing_waits_on() {
        let calm = CycleSeen {
            records: 3,
            ..CycleSeen::default()
        };
        assert!(rests_after(calm));
        assert!(
            !rests_after(CycleSeen { records: 0, ..calm }),
            "nothing for a copier: no reason to"
        );
        assert!(
            !rests_after(CycleSeen {
                urgent: true,
                ..calm
            }),
            "a SYN-ACK, FIN, RST or a large answer goes at once"
        );
        assert!(
            !rests_after(CycleSeen {
                accepted: true,
                ..calm
            }),
            "allow-listed answers keep their pace"
        );
        assert!(
            !rests_after(CycleSeen { full: true, ..calm }),
            "more is queued already"
        );
    }

    #[test]
    fn the_rest_is_the_least_any_copier_allows() {
        let r = Rest::new();
        let t0 = Instant::now() + Duration::from_secs(1);
        assert_eq!(r.length(t0), Duration::ZERO, "no copier");
        r.join(CopierId(1));
        assert_eq!(
            r.length(t0),
            Duration::ZERO,
            "a copier that said nothing: its records go at once"
        );
        r.set_wait(CopierId(1), 2000);
        assert_eq!(r.length(t0), Duration::from_millis(2));
        r.join(CopierId(2));
        assert_eq!(
            r.length(t0),
            Duration::ZERO,
            "the second has not said anything"
        );
        r.set_wait(CopierId(2), 5000);
        assert_eq!(r.length(t0), Duration::from_millis(2), "the least of both");
        r.set_wait(CopierId(1), 0);
        assert_eq!(r.length(t0), Duration::ZERO, "one is eager");
        r.leave(CopierId(1));
        assert_eq!(r.length(t0), Duration::from_millis(5));
        r.set_wait(CopierId(2), 1_000_000);
        assert_eq!(r.length(t0), MAX_REST, "capped");
        r.set_wait(CopierId(9), 1);
        assert_eq!(
            r.length(t0),
            MAX_REST,
            "a copier not connected says nothing"
        );
        r.registered(t0);
        assert_eq!(
            r.length(t0 + Duration::from_millis(50)),
            REGISTER_REST,
            "a registration: its SYN-ACK is coming"
        );
        assert_eq!(
            r.length(t0 + AFTER_REGISTER + Duration::from_millis(2)),
            MAX_REST
        );
        r.set_wait(CopierId(2), 300);
        assert_eq!(
            r.length(t0 + Duration::from_millis(50)),
            Duration::from_micros(300),
            "never more than the copiers allow"
        );
        r.set_max(Duration::from_micros(100));
        assert_eq!(
            r.length(t0 + AFTER_REGISTER * 2),
            Duration::from_micros(100),
            "--max-rest"
        );
        r.set_max(Duration::ZERO);
        assert_eq!(
            r.length(t0 + AFTER_REGISTER * 2),
            Duration::ZERO,
            "--max-rest 0: never"
        );
    }

    #[test]
    fn a_rest_that_is_no_longer_allowed_is_cut_short() {
        let r = std::sync::Arc::new(Rest::new());
        r.join(CopierId(1));
        r.set_wait(CopierId(1), 20_000);
        let (tx, rx) = std::sync::mpsc::channel();
        let worker = {
            let r = r.clone();
            std::thread::spawn(move || {
                r.enlist_current_worker();
                tx.send(()).unwrap();
                let start = Instant::now();
                // Parks until unparked (a spurious wake-up loops), at most 10 s.
                while r.length(Instant::now()) > Duration::ZERO
                    && start.elapsed() < Duration::from_secs(10)
                {
                    std::thread::park_timeout(Duration::from_secs(10));
                }
                start.elapsed()
            })
        };
        rx.recv().unwrap();
        r.set_wait(CopierId(1), 0);
        let rested = worker.join().unwrap();
        assert!(
            rested < Duration::from_secs(10),
            "woken by the copier turning eager, not by the timeout: {rested:?}"
        );
    }
}
