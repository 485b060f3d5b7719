//! Timers: when the engine must be called next and what runs then. Every live session with a
//! deadline has an entry at or before it in `timers` (`Session::armed`); stale entries are
//! skipped when they come due, and purged when they pile up.
//!
//! Stale entries pile up because a heap cannot remove what it holds: a session whose deadline
//! came earlier (an answer awaited, a retransmission) leaves its later entry (often its idle
//! expiry, a minute ahead) behind, and a session that ends before that entry is due leaves it
//! for good. With one request per connection, sessions come and go at a steady count and the
//! heap kept growing: one connection per millisecond for 20 s left 25,500 entries for 5,000
//! sessions (the engine test `timer_heap_stays_near_the_sessions_while_they_come_and_go`), and
//! `bench_copier`'s think-close (2,600 connections/s, most sessions lingering after their close)
//! 21,800 for 13,000; every push and pop walks the heap's depth. So when the heap grows past
//! twice what it held after the last purge (and at least [`PURGE_MIN`]), it keeps only the
//! entries that are some live session's `armed` one: O(n) a purge, amortised O(1) a push, and
//! the heap stays within about twice the sessions that have a deadline.

use std::cmp::Reverse;
use std::time::Instant;

use super::shared::SlotRef;
use super::stamp::Stamp;
use super::Engine;

/// The least size at which the timer heap is purged of entries nothing needs.
pub(super) const PURGE_MIN: usize = 1024;

impl Engine {
    /// When [`Engine::handle_timeout`] should be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let syn = self
            .pending_fifo
            .front()
            .map(|(at, _)| *at + self.sh.p.syn_timeout);
        let t = self.timers.peek().map(|Reverse((t, _, _))| t.at());
        match (t, syn) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Run every timer due at `now` (retransmissions, pacing, session timeouts, lingering).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.expire_syns(now);
        self.targets.check(now);
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        let now_s = Stamp::of(now);
        while let Some(&Reverse(e)) = self.timers.peek() {
            if e.0 > now_s {
                break;
            }
            self.timers.pop();
            due.push(e);
        }
        for &(t, idx, gen) in &due {
            let slot = SlotRef { idx, gen };
            if !self.live(slot) {
                continue;
            }
            let Some(s) = self.slots[idx as usize].s.as_mut() else {
                continue;
            };
            if s.armed == Some(t) {
                s.armed = None;
            }
            if s.next_deadline(&self.sh.p).is_some_and(|d| d <= now) {
                self.with_session(idx, |s, sh| s.on_timeout(sh, now));
            } else {
                self.arm(idx);
            }
        }
        self.due = due;
        self.maybe_compact();
    }

    pub(super) fn arm(&mut self, idx: u32) {
        let Some(s) = self.slots[idx as usize].s.as_mut() else {
            return;
        };
        if let Some(d) = s.next_deadline(&self.sh.p) {
            let d = Stamp::of(d);
            if s.armed.is_none_or(|a| d < a) {
                s.armed = Some(d);
                self.timers.push(Reverse((d, idx, s.slot.gen)));
                if self.timers.len() > self.purge_timers_at {
                    self.purge_timers();
                }
            }
        }
    }

    /// Drops every timer entry that is not a live session's `armed` one: the others would only
    /// be skipped when due (a session gone, or an earlier entry of the same session armed
    /// since, which re-arms it when it fires).
    pub(super) fn purge_timers(&mut self) {
        let slots = &self.slots;
        self.timers.retain(|Reverse((t, idx, gen))| {
            slots
                .get(*idx as usize)
                .is_some_and(|x| x.gen == *gen && x.s.as_ref().is_some_and(|s| s.armed == Some(*t)))
        });
        self.purge_timers_at = (2 * self.timers.len()).max(PURGE_MIN);
    }
}
