//! Timers: when the engine must be called next and what runs then. Every live session with a
//! deadline has an entry at or before it in `timers` (`Session::armed`); stale entries are
//! skipped.

use std::cmp::Reverse;
use std::time::Instant;

use super::shared::SlotRef;
use super::stamp::Stamp;
use super::Engine;

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
            }
        }
    }
}
