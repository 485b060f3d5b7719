//! The SYN table (see "Handshakes first" in the module documentation): captured SYNs wait in
//! `pending` until their handshake completes; `pending_fifo` is their expiry queue (stale
//! entries skipped), the oldest shed first when `max_pending_syns` are waiting.

use std::time::Instant;

use super::pkt::Captured;
use super::{Engine, PendingSyn};

impl Engine {
    /// Keep a captured SYN until its handshake completes (a retransmission refreshes it, a
    /// new ISN replaces it); the oldest goes when `max_pending_syns` are waiting.
    pub(super) fn hold_syn(&mut self, now: Instant, c: &Captured<'_>) {
        let h = &c.hdr;
        let entry = PendingSyn {
            isn: h.seq,
            tsval: h.opts.ts.map(|t| t.0),
            at: now,
        };
        match self.pending.insert(c.key, entry) {
            Some(old) if old.isn != h.seq => self.sh.stats.syns_incomplete.replaced += 1,
            Some(_) => {}
            None => {
                while self.pending.len() > self.sh.p.max_pending_syns {
                    if !self.shed_oldest_syn() {
                        break;
                    }
                }
            }
        }
        self.pending_fifo.push_back((now, c.key));
        if self.pending_fifo.len() > 2 * self.pending.len() + 64 {
            let pending = &self.pending;
            self.pending_fifo
                .retain(|(at, k)| pending.get(k).is_some_and(|p| p.at == *at));
        }
        self.sh.stats.syns_pending = self.pending.len() as u64;
    }

    /// Forget the oldest pending SYN (counted as shed). `false` if none is left.
    pub(super) fn shed_oldest_syn(&mut self) -> bool {
        while let Some((at, k)) = self.pending_fifo.pop_front() {
            if self.pending.get(&k).is_some_and(|p| p.at == at) {
                self.pending.remove(&k);
                self.sh.stats.syns_incomplete.shed += 1;
                self.sh.stats.syns_pending = self.pending.len() as u64;
                return true;
            }
        }
        false
    }

    /// Forget the pending SYNs whose handshake did not come within `syn_timeout`.
    pub(super) fn expire_syns(&mut self, now: Instant) {
        let ttl = self.sh.p.syn_timeout;
        while let Some(&(at, k)) = self.pending_fifo.front() {
            if at + ttl > now {
                break;
            }
            self.pending_fifo.pop_front();
            if self.pending.get(&k).is_some_and(|p| p.at == at) {
                self.pending.remove(&k);
                self.sh.stats.syns_incomplete.expired += 1;
            }
        }
        self.sh.stats.syns_pending = self.pending.len() as u64;
    }
}
