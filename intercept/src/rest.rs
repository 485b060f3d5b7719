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
//! one) keeps every record at the kernel's pace. It also says how long the records that open
//! or end a connection may wait (`Message::OpenWait`, with `FEATURE_OPEN_WAIT`): its
//! `--open-wait` (3 ms by default) while its record wait is above zero. With one request per
//! connection, those records are most of them (a SYN-ACK, a FIN, the ACK of ours); sent at once,
//! they woke the worker for nearly every packet and made a write to the copier per packet or
//! two (issue 32: resting through them cut the intercept's CPU per request in think-close by
//! 3 to 42 % in alternating runs, more on a busier machine, and its writes to the copier from
//! 0.53 to 0.13 a request; BENCHMARKS.md).
//!
//! Invariants:
//! - a worker rests only after a batch that gave records to copiers and accepted nothing (an
//!   allow-listed client's answer that comes during a rest waits for its end, at most the
//!   copiers' wait, and the next batch, having accepted it, is followed by no rest, so such
//!   traffic flows at the kernel's pace), none of whose records is urgent for the answer's
//!   flow (more than 4 KiB of data or data without PSH: the rest of an answer may wait for the
//!   copier's ACK; `Record::urgent_for_flow`), and whose receive was not full (then more is
//!   queued already);
//! - it rests at most the smallest record wait of the connected copiers, capped at
//!   `--max-rest` ([`MAX_REST`] by default and at most; zero: never), and not at all while any
//!   copier says zero; after a batch with a record that opens or ends a connection (SYN, FIN,
//!   RST: `Record::opens_or_ends`; a handshake or a close waits on it), at most the smallest
//!   open wait of the connected copiers (zero, not at all, unless every copier said one); and
//!   within [`AFTER_REGISTER`] of a registration (the connection's SYN-ACK is on its way) at
//!   most [`REGISTER_REST`] or the smallest open wait, whichever is longer;
//! - a copier that turns to zero wakes resting workers at once (`Thread::unpark`), and a
//!   registration wakes them unless their rest ends within what a registration allows (the
//!   longer of [`REGISTER_REST`] and the smallest open wait): nothing waits for the end of a
//!   rest that is no longer allowed;
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
    /// One of them was urgent for the answer's flow (`Record::urgent_for_flow`: part of a
    /// large or unfinished answer).
    pub urgent: bool,
    /// One of them opened, closed or reset a connection, or did not parse
    /// (`Record::opens_or_ends`): the rest is at most the copiers' open wait.
    pub opening: bool,
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

/// What one copier said: how long its records may wait ([`Message::RecordWait`]) and those
/// that open or end a connection ([`Message::OpenWait`]), in microseconds; both 0 until it
/// says.
///
/// [`Message::RecordWait`]: common::proto::Message::RecordWait
/// [`Message::OpenWait`]: common::proto::Message::OpenWait
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Waits {
    record: u32,
    open: u32,
}

/// How long the workers may rest, as the copiers say; shared by the control tasks and the
/// workers.
#[derive(Debug)]
pub struct Rest {
    /// Each connected copier's waits, in microseconds.
    waits: Mutex<HashMap<CopierId, Waits>>,
    /// The smallest record wait (0 with no copier): what the workers read.
    least: AtomicU32,
    /// The smallest open wait (0 with no copier).
    least_open: AtomicU32,
    /// The end of the longest rest a worker began, in [`Rest::micros`] (stale once past; a
    /// worker woken early leaves it, which costs at most an unneeded wake-up).
    resting_until: AtomicU64,
    /// The longest rest this intercept allows (`--max-rest`), in microseconds.
    max: AtomicU32,
    epoch: Instant,
    /// The last registration, in [`Rest::micros`] (0: none yet).
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
            least_open: AtomicU32::new(0),
            resting_until: AtomicU64::new(0),
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
            w.insert(copier, Waits::default());
        });
    }

    /// A copier said how long its records may wait (`Message::RecordWait`).
    pub fn set_wait(&self, copier: CopierId, micros: u32) {
        self.update(|w| {
            if let Some(v) = w.get_mut(&copier) {
                v.record = micros;
            }
        });
    }

    /// A copier said how long its records that open or end a connection may wait
    /// (`Message::OpenWait`).
    pub fn set_open_wait(&self, copier: CopierId, micros: u32) {
        self.update(|w| {
            if let Some(v) = w.get_mut(&copier) {
                v.open = micros;
            }
        });
    }

    /// A copier's connection ended.
    pub fn leave(&self, copier: CopierId) {
        self.update(|w| {
            w.remove(&copier);
        });
    }

    /// A registration came: short rests for [`AFTER_REGISTER`], from now, and resting workers
    /// woken unless their rest ends within [`Rest::register_cap`].
    pub fn registered(&self, now: Instant) {
        let now = self.micros(now);
        self.last_register.fetch_max(now, Ordering::SeqCst);
        let until = self.resting_until.load(Ordering::SeqCst);
        if until > now.saturating_add(us(self.register_cap())) {
            self.wake_workers();
        }
    }

    /// The longest a worker may rest within [`AFTER_REGISTER`] of a registration: the
    /// longer of [`REGISTER_REST`] and the copiers' smallest open wait.
    fn register_cap(&self) -> Duration {
        REGISTER_REST.max(Duration::from_micros(u64::from(
            self.least_open.load(Ordering::Relaxed),
        )))
    }

    /// How long a worker may rest at `now` after a cycle that [`rests_after`] allows (zero:
    /// not at all); `opening`: the cycle had a record that opens or ends a connection
    /// ([`CycleSeen::opening`]).
    #[must_use]
    pub fn length(&self, now: Instant, opening: bool) -> Duration {
        let mut least = self
            .least
            .load(Ordering::Relaxed)
            .min(self.max.load(Ordering::Relaxed));
        if opening {
            least = least.min(self.least_open.load(Ordering::Relaxed));
        }
        let rest = Duration::from_micros(u64::from(least));
        let last = self.last_register.load(Ordering::SeqCst);
        if last > 0 && self.micros(now).saturating_sub(last) < us(AFTER_REGISTER) {
            return rest.min(self.register_cap());
        }
        rest
    }

    /// Rest the calling worker after a cycle that saw `seen` ([`rests_after`] allowed it):
    /// park it for [`Rest::length`], cut short by a registration or a copier turning to zero.
    /// Returns whether it rested.
    pub fn rest(&self, seen: CycleSeen) -> bool {
        let now = Instant::now();
        let first = self.length(now, seen.opening);
        if first.is_zero() {
            return false;
        }
        let until = self.micros(now).saturating_add(us(first));
        self.resting_until.fetch_max(until, Ordering::SeqCst);
        // Again after announcing the rest: a registration that came between the two either
        // sees the announcement (and wakes us) or is seen here (and shortens the rest).
        let rest = first.min(self.length(now, seen.opening));
        if rest.is_zero() {
            return false;
        }
        std::thread::park_timeout(rest);
        true
    }

    /// Microseconds from `epoch` to `now`, plus one (so 0 means never).
    fn micros(&self, now: Instant) -> u64 {
        us(now.saturating_duration_since(self.epoch)).saturating_add(1)
    }

    fn update(&self, f: impl FnOnce(&mut HashMap<CopierId, Waits>)) {
        let mut w = self.waits.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut w);
        let least = w.values().map(|v| v.record).min().unwrap_or(0);
        let least_open = w.values().map(|v| v.open).min().unwrap_or(0);
        let before = self.least.swap(least, Ordering::Relaxed);
        let before_open = self.least_open.swap(least_open, Ordering::Relaxed);
        drop(w);
        if least < before || least_open < before_open {
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

/// `d` in whole microseconds (saturating).
fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
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
            "part of a large or unfinished answer goes at once"
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
        assert_eq!(r.length(t0, false), Duration::ZERO, "no copier");
        r.join(CopierId(1));
        assert_eq!(
            r.length(t0, false),
            Duration::ZERO,
            "a copier that said nothing: its records go at once"
        );
        r.set_wait(CopierId(1), 2000);
        assert_eq!(r.length(t0, false), Duration::from_millis(2));
        r.join(CopierId(2));
        assert_eq!(
            r.length(t0, false),
            Duration::ZERO,
            "the second has not said anything"
        );
        r.set_wait(CopierId(2), 5000);
        assert_eq!(
            r.length(t0, false),
            Duration::from_millis(2),
            "the least of both"
        );
        r.set_wait(CopierId(1), 0);
        assert_eq!(r.length(t0, false), Duration::ZERO, "one is eager");
        r.leave(CopierId(1));
        assert_eq!(r.length(t0, false), Duration::from_millis(5));
        r.set_wait(CopierId(2), 1_000_000);
        assert_eq!(r.length(t0, false), MAX_REST, "capped");
        r.set_wait(CopierId(9), 1);
        assert_eq!(
            r.length(t0, false),
            MAX_REST,
            "a copier not connected says nothing"
        );
        r.registered(t0);
        assert_eq!(
            r.length(t0 + Duration::from_millis(50), false),
            REGISTER_REST,
            "a registration: its SYN-ACK is coming"
        );
        assert_eq!(
            r.length(t0 + AFTER_REGISTER + Duration::from_millis(2), false),
            MAX_REST
        );
        r.set_wait(CopierId(2), 300);
        assert_eq!(
            r.length(t0 + Duration::from_millis(50), false),
            Duration::from_micros(300),
            "never more than the copiers allow"
        );
        r.set_max(Duration::from_micros(100));
        assert_eq!(
            r.length(t0 + AFTER_REGISTER * 2, false),
            Duration::from_micros(100),
            "--max-rest"
        );
        r.set_max(Duration::ZERO);
        assert_eq!(
            r.length(t0 + AFTER_REGISTER * 2, false),
            Duration::ZERO,
            "--max-rest 0: never"
        );
    }

    #[test]
    fn records_that_open_or_end_a_connection_wait_only_as_long_as_every_copier_allows() {
        let r = Rest::new();
        let t0 = Instant::now() + Duration::from_secs(1);
        r.join(CopierId(1));
        r.set_wait(CopierId(1), 20_000);
        assert_eq!(r.length(t0, false), Duration::from_millis(20));
        assert_eq!(
            r.length(t0, true),
            Duration::ZERO,
            "a copier that said no open wait: its SYN-ACKs and FINs go at once"
        );
        r.set_open_wait(CopierId(1), 3000);
        assert_eq!(r.length(t0, true), Duration::from_millis(3));
        assert_eq!(
            r.length(t0, false),
            Duration::from_millis(20),
            "the rest as before"
        );
        r.registered(t0);
        let soon = t0 + Duration::from_millis(10);
        assert_eq!(
            r.length(soon, false),
            Duration::from_millis(3),
            "a registration's SYN-ACK may wait the open wait, above REGISTER_REST"
        );
        r.set_open_wait(CopierId(1), 100);
        assert_eq!(
            r.length(soon, false),
            REGISTER_REST,
            "and REGISTER_REST when the open wait is shorter"
        );
        assert_eq!(r.length(soon, true), Duration::from_micros(100));
        r.set_open_wait(CopierId(1), 3000);
        r.join(CopierId(2));
        r.set_wait(CopierId(2), 20_000);
        assert_eq!(
            r.length(t0 + AFTER_REGISTER * 2, true),
            Duration::ZERO,
            "the second copier said none"
        );
        r.set_open_wait(CopierId(2), 5000);
        assert_eq!(
            r.length(t0 + AFTER_REGISTER * 2, true),
            Duration::from_millis(3),
            "the least of both"
        );
        r.set_wait(CopierId(2), 1000);
        assert_eq!(
            r.length(t0 + AFTER_REGISTER * 2, true),
            Duration::from_millis(1),
            "never more than the record wait"
        );
    }

    /// A worker resting (with [`Rest::rest`]) for the 20 ms record wait of a copier whose open
    /// wait is `open_micros`, and how long it rested once a registration came.
    fn rest_cut_by_a_registration(open_micros: u32) -> Duration {
        let r = std::sync::Arc::new(Rest::new());
        r.join(CopierId(1));
        r.set_wait(CopierId(1), 20_000);
        r.set_open_wait(CopierId(1), open_micros);
        let (tx, rx) = std::sync::mpsc::channel();
        let worker = {
            let r = r.clone();
            std::thread::spawn(move || {
                r.enlist_current_worker();
                tx.send(()).unwrap();
                let start = Instant::now();
                let calm = CycleSeen {
                    records: 1,
                    ..CycleSeen::default()
                };
                assert!(r.rest(calm), "a 20 ms rest");
                start.elapsed()
            })
        };
        rx.recv().unwrap();
        // Let it park, then register.
        std::thread::sleep(Duration::from_millis(2));
        r.registered(Instant::now());
        worker.join().unwrap()
    }

    #[test]
    fn a_registration_wakes_a_resting_worker_unless_its_rest_ends_within_the_open_wait() {
        let cut = rest_cut_by_a_registration(0);
        assert!(
            cut < Duration::from_millis(15),
            "no open wait: the registration cut the 20 ms rest short, rested {cut:?}"
        );
        let long = rest_cut_by_a_registration(19_000);
        assert!(
            long >= Duration::from_millis(19),
            "the rest ends within the 19 ms open wait: left alone, rested {long:?}"
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
                while r.length(Instant::now(), false) > Duration::ZERO
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
