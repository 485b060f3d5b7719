//! Copy groups: the copies of one captured session, found by its key in `by_key` (the group's
//! lead slot) and chained by `Slot::next` in copy order; a captured packet goes to each. And
//! where a captured session whose last copy ended idle stood (`resumes`, "Idle sessions").

use std::hash::BuildHasher;
use std::time::Instant;

use common::flow::FourTuple;

use super::chunk::Payload;
use super::pkt::Captured;
use super::{key_hash, Engine, Resume, NO_SLOT};

impl Engine {
    /// Remember where the client stream of `key`, whose last copy ended idle, stood.
    pub(super) fn remember_resume(&mut self, key: FourTuple, r: Resume) {
        let next = r.next;
        self.resumes.insert(key, r);
        self.resume_fifo.push_back((key, next));
        while self.resumes.len() > self.sh.p.max_sessions {
            if !self.forget_oldest_resume() {
                break;
            }
        }
        if self.resume_fifo.len() > 2 * self.resumes.len() + 64 {
            let resumes = &self.resumes;
            self.resume_fifo
                .retain(|(k, n)| resumes.get(k).is_some_and(|r| r.next == *n));
        }
    }

    /// Forget the oldest place remembered for a session that ended idle. `false` if none is.
    pub(super) fn forget_oldest_resume(&mut self) -> bool {
        while let Some((k, n)) = self.resume_fifo.pop_front() {
            if self.resumes.get(&k).is_some_and(|r| r.next == n) {
                self.resumes.remove(&k);
                return true;
            }
        }
        false
    }

    /// Hand a captured packet of a known session to each of its copies.
    pub(super) fn dispatch(&mut self, now: Instant, c: &Captured<'_>) {
        if let Some(lead) = self.group_of(&c.key) {
            self.dispatch_to(now, c, lead);
        }
    }

    /// [`Engine::dispatch`] to the group led by slot `lead`.
    pub(super) fn dispatch_to(&mut self, now: Instant, c: &Captured<'_>, lead: u32) {
        let was_started = self.slots[lead as usize]
            .s
            .as_ref()
            .is_some_and(|s| s.group_started);
        let mut members = std::mem::take(&mut self.members);
        self.group_members(lead, &mut members);
        let started = self.sh.stats.sessions_started;
        let meter = self
            .payload_meter
            .take()
            .unwrap_or_else(|| self.sh.meter.clone());
        let mut payload = Payload::new(c.payload, &meter);
        let last = members.len().saturating_sub(1);
        for (i, &idx) in members.iter().enumerate() {
            payload.set_last(i == last);
            self.with_session(idx, |s, sh| s.on_captured(sh, now, c, &mut payload, i == 0));
        }
        drop(payload);
        self.payload_meter = Some(meter);
        self.members = members;
        if self.sh.stats.sessions_started > started && !was_started {
            self.sh.stats.captured_sessions_started += 1;
            self.set_group_started(&c.key, true);
        }
    }

    /// The lead slot of the group of captured sessions `key`, if it has one.
    pub(super) fn group_of(&self, key: &FourTuple) -> Option<u32> {
        let slots = &self.slots;
        let eq = |&i: &u32| slots[i as usize].s.as_ref().is_some_and(|s| s.key == *key);
        self.by_key.find(self.key_hash.hash_one(key), eq).copied()
    }

    /// The slots of the group led by `lead`, in copy order, into `out` (cleared first).
    pub(super) fn group_members(&self, lead: u32, out: &mut Vec<u32>) {
        out.clear();
        let mut i = lead;
        while let Some(x) = self
            .slots
            .get(i as usize)
            .filter(|_| out.len() < self.slots.len())
        {
            out.push(i);
            i = x.next;
        }
    }

    /// Mark the group of `key` started or not (its lead keeps the flag).
    pub(super) fn set_group_started(&mut self, key: &FourTuple, started: bool) {
        if let Some(lead) = self.group_of(key) {
            if let Some(s) = self.slots[lead as usize].s.as_mut() {
                s.group_started = started;
            }
        }
    }

    /// Add the session in slot `idx` (its `key`'s, `next` clear) last to the group of `key`,
    /// or make it a group of its own.
    pub(super) fn group_join(&mut self, key: &FourTuple, idx: u32) {
        match self.group_of(key) {
            Some(lead) => {
                // (Bounded, as every walk of a group: no broken link can make it spin.)
                let mut i = lead;
                for _ in 0..self.slots.len() {
                    match self.slots.get(i as usize).map(|x| x.next) {
                        Some(NO_SLOT) | None => break,
                        Some(n) => i = n,
                    }
                }
                if let Some(x) = self.slots.get_mut(i as usize) {
                    x.next = idx;
                }
            }
            None => {
                let (slots, h) = (&self.slots, self.key_hash);
                self.by_key
                    .insert_unique(h.hash_one(key), idx, |&i| key_hash(slots, h, i));
            }
        }
    }

    /// The group of `key` is no more: its sessions go on outside any group.
    pub(super) fn group_detach(&mut self, key: &FourTuple) {
        let slots = &self.slots;
        let eq = |&i: &u32| slots[i as usize].s.as_ref().is_some_and(|s| s.key == *key);
        let Ok(e) = self.by_key.find_entry(self.key_hash.hash_one(key), eq) else {
            return;
        };
        let (mut i, _) = e.remove();
        for _ in 0..self.slots.len() {
            match self.slots.get_mut(i as usize) {
                Some(x) => i = std::mem::replace(&mut x.next, NO_SLOT),
                None => break,
            }
        }
    }

    /// The session of slot `idx` (of captured session `key`, its group's flag `started` if it
    /// leads it; taken out of its slot already) leaves its group, if it is in one.
    pub(super) fn group_leave(&mut self, key: &FourTuple, idx: u32, started: bool) {
        let next = std::mem::replace(&mut self.slots[idx as usize].next, NO_SLOT);
        let slots = &self.slots;
        // The entry led by `idx` is `key`'s (a slot leads one group at most).
        let eq = |&i: &u32| i == idx || slots[i as usize].s.as_ref().is_some_and(|s| s.key == *key);
        let Ok(mut e) = self.by_key.find_entry(self.key_hash.hash_one(key), eq) else {
            return;
        };
        let lead = *e.get();
        if lead == idx {
            if next == NO_SLOT {
                e.remove();
            } else {
                *e.get_mut() = next;
                // The group's flag goes to its new lead.
                if let Some(s) = self.slots[next as usize].s.as_mut() {
                    s.group_started = started;
                }
            }
            return;
        }
        let mut i = lead;
        for _ in 0..self.slots.len() {
            let Some(x) = self.slots.get_mut(i as usize) else {
                return;
            };
            if x.next == idx {
                x.next = next;
                return;
            }
            i = x.next;
        }
    }
}
