//! Shedding and making room: the sessions left out while the copier is behind (`shed_keys`),
//! and the sessions shed when `max_memory` or `max_sessions` is reached, in the order of
//! "Unproven sessions" in the module documentation.

use std::time::Instant;

use common::flow::FourTuple;

use super::session::{Phase, Session};
use super::stamp::Stamp;
use super::stats::{FailReason, OverloadReason};
use super::{Engine, SESSION_COST};

/// Why a session of `Session::shed_rank` `rank` is shed: `unproven_shed` for the unproven,
/// `idle_shed` for the idle proven, `busy` for the busy proven.
fn shed_reason(rank: u8, busy: FailReason) -> FailReason {
    match rank {
        0 | 1 | 3 => FailReason::UnprovenShed,
        2 => FailReason::IdleShed,
        _ => busy,
    }
}

impl Engine {
    /// The I/O layer's view of whether the copier keeps up: `Some(why)` while it is behind
    /// (captured packets wait long for the engine, or the kernel dropped some), `None` once it
    /// caught up. While behind, no new session starts: a captured session whose handshake
    /// completes (or that is caught mid-stream) meanwhile is not copied at all, and its later
    /// packets are dropped too (`EngineStats::sessions_shed_overload`, `drops.overload`);
    /// sessions already being copied go on, so the capacity left goes to them.
    pub fn set_overload(&mut self, now: Instant, why: Option<OverloadReason>) {
        self.overload = why;
        self.shed_keys.expire(now);
        self.closed_keys.expire(now);
    }

    /// The copier is far behind: give up every session none of whose bytes has left yet
    /// (newly started ones, whose data still waits in the capture behind the others'), failed
    /// as `overload` and counted in `sessions_shed_overload` too, so that the engine gets
    /// through the backlog sooner (their later packets are dropped as `after_close`) and the
    /// sessions it is copying keep their bytes. Nothing of a session given up reached the test
    /// server. Returns how many were given up.
    pub fn give_up_unsent(&mut self, now: Instant, why: OverloadReason) -> usize {
        let idle: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&i| {
                self.slots[i as usize]
                    .s
                    .as_ref()
                    .is_some_and(Session::sent_nothing)
            })
            .collect();
        let mut keys = Vec::with_capacity(idle.len());
        for &i in &idle {
            if let Some(s) = self.slots[i as usize].s.as_ref() {
                keys.push(s.key);
            }
            self.with_session(i, |s, sh| s.finish(sh, now, Some(FailReason::Overload)));
        }
        // Their later packets are dropped as the left-out sessions' are: a session given up
        // and gone from the table must not start again mid-stream, nor be counted twice.
        keys.sort_unstable();
        keys.dedup();
        for k in keys {
            self.sh.stats.sessions_shed_overload.add(why, 1);
            self.remember_shed(now, k);
        }
        idle.len()
    }

    /// The capture lost packets about `now` (the kernel dropped some: the ring overflowed).
    /// A session being copied whose stream meets a hole that began up to
    /// [`LOSS_BEFORE_HOLE`](super::LOSS_BEFORE_HOLE) after this (or any time before it) is
    /// given up at the hole once it is `GAP_WAIT` old
    /// instead of resuming past it: its test connection is reset before any byte after the hole
    /// is sent, so the test server's application never takes a cut request, and the captured
    /// session is counted in `sessions_shed_overload` (`hole`, once however many copies it
    /// had) and left out from then on, as a session shed at its start is.
    pub fn note_capture_loss(&mut self, now: Instant) {
        self.sh.capture_loss_at = Some(now);
    }

    /// Whether the copier is behind (`set_overload`).
    pub fn overloaded(&self) -> Option<OverloadReason> {
        self.overload
    }

    pub(super) fn shed_for_overload(&mut self, now: Instant, key: FourTuple, why: OverloadReason) {
        self.sh.stats.drops.overload += 1;
        self.sh.stats.sessions_shed_overload.add(why, 1);
        self.remember_shed(now, key);
    }

    /// Remember `key` as left out (see `shed_keys`).
    pub(super) fn remember_shed(&mut self, now: Instant, key: FourTuple) {
        self.shed_keys.insert(now, key);
    }

    /// What shedding can free: [`Engine::memory_used`] but for the sessions that are done
    /// and only linger (they leave by themselves within `close_linger`).
    fn sheddable_memory(&self) -> usize {
        self.memory_used()
            .saturating_sub(self.closing * SESSION_COST)
    }

    /// Over `max_memory` (what shedding can free: see `sheddable_memory`), shed until 90% of
    /// it: first the oldest pending SYNs (a flood of SYNs that never complete goes before any
    /// session), then the idle sessions (`Session::idle`: `idle_shed`), then the others
    /// (`memory`), each quiet longest first, empty ones included. A copy shed frees only
    /// the bytes no other copy holds: the copies of one session go one by one, oldest first,
    /// until their bytes are freed.
    pub(super) fn check_memory(&mut self, now: Instant) {
        if self.sheddable_memory() <= self.sh.p.max_memory {
            return;
        }
        // Shed down to 90% so that a busy engine does not scan on every packet.
        let target = self.sh.p.max_memory - self.sh.p.max_memory / 10;
        while self.sheddable_memory() > target && !self.pending.is_empty() {
            if !self.shed_oldest_syn() {
                break;
            }
        }
        while self.sheddable_memory() > target && !self.resumes.is_empty() {
            if !self.forget_oldest_resume() {
                break;
            }
        }
        if self.sheddable_memory() <= target {
            return;
        }
        // By `Session::shed_rank` (the unproven, then the idle, then the others), each quiet
        // longest first.
        let mut cands: Vec<(u8, Stamp, u32)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, x)| {
                x.s.as_ref()
                    .filter(|s| s.phase != Phase::Done)
                    .map(|s| (s.shed_rank(), s.last_activity, i as u32))
            })
            .collect();
        cands.sort_unstable();
        for (rank, _, idx) in cands {
            if self.sheddable_memory() <= target {
                break;
            }
            self.shed(now, idx, shed_reason(rank, FailReason::Memory));
        }
    }

    /// Sessions in the table but those done and only lingering (they leave by themselves
    /// within `close_linger`): what `max_sessions` bounds.
    pub(super) fn live_sessions(&self) -> usize {
        self.session_count().saturating_sub(self.closing)
    }

    /// Make room for a new session by shedding `n` sessions (fewer if fewer may go; with a
    /// large table, a few more, so that a full table is not scanned for every new one), by
    /// `Session::shed_rank`, each quiet longest first: mid-stream candidates, then idle
    /// unproven, idle proven, busy unproven sessions (`unproven_shed`, `idle_shed`). For a
    /// new mid-stream candidate (`candidate_only`) only other candidates go: a flood of
    /// spoofed segments churns among its own candidates and sheds nothing that started. A busy
    /// proven session never goes.
    pub(super) fn make_room(&mut self, now: Instant, n: usize, candidate_only: bool) {
        let n = n + self.sh.p.max_sessions / 256;
        let worst = if candidate_only { 0 } else { 3 };
        let mut cands: Vec<(u8, Stamp, u32)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, x)| {
                x.s.as_ref()
                    .filter(|s| s.phase != Phase::Done)
                    .map(|s| (s.shed_rank(), s.last_activity, i as u32))
            })
            .filter(|c| c.0 <= worst)
            .collect();
        if cands.len() > n {
            cands.select_nth_unstable(n);
            cands.truncate(n);
        }
        for (rank, _, idx) in cands {
            self.shed(now, idx, shed_reason(rank, FailReason::IdleShed));
        }
    }

    /// End the session of slot `idx` to make room (`sessions_shed`, and failed by `why`).
    fn shed(&mut self, now: Instant, idx: u32, why: FailReason) {
        self.sh.stats.sessions_shed += 1;
        self.with_session(idx, |s, sh| s.finish(sh, now, Some(why)));
    }
}
