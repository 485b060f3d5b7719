//! Capture holes (see "Capture holes" in the session's documentation): how long a hole has
//! been waited for, and the skip past a damaged unit onto a new connection.

use std::time::Instant;

use common::seq::SeqNum;

use super::super::answer::Watch;
use super::super::event::Event;
use super::super::shared::Shared;
use super::super::stats::FailReason;
use super::{Gap, Session, GAP_WAIT, HOLE_RECHECK};

impl Session {
    /// The hole's state, allocated when first needed.
    pub(super) fn gap_mut(&mut self) -> &mut Gap {
        self.gap.get_or_insert_with(|| {
            Box::new(Gap {
                since: None,
                next: SeqNum(0),
                due: None,
            })
        })
    }

    /// Set when the hole began (`None`: no hole); the box goes once nothing is left in it.
    pub(super) fn set_gap_since(&mut self, since: Option<Instant>) {
        if let Some(g) = self.gap.as_mut() {
            g.since = since;
            if g.since.is_none() && g.due.is_none() {
                self.gap = None;
            }
        }
    }

    /// Give up the request unit a capture hole damaged, if it is time (see the module
    /// documentation): the stream skips to the next request, and the current connection is
    /// reset so that `reconcile` carries the rest on a new one.
    ///
    /// The bytes in order before the hole (`[cur_start, next)`) are the start of the damaged
    /// unit when the first segment after the hole carries the same ACK (the unit goes on
    /// after the hole); otherwise they may be a whole request, so its answer is awaited first
    /// (quiet, or `answer_timeout` from the hole). Either way the test server must have
    /// acknowledged them, so that resetting the connection loses nothing carried whole.
    pub(super) fn skip_gap(&mut self, sh: &mut Shared, now: Instant) {
        let Some(g) = self.gap.as_mut() else { return };
        g.due = None;
        let Some(t) = g.since else {
            self.gap = None;
            return;
        };
        if !self.stream.has_held() {
            self.gap = None;
            return;
        }
        if now < t + GAP_WAIT {
            g.due = Some(t + GAP_WAIT);
            return;
        }
        if sh
            .capture_loss_at
            .is_some_and(|l| l + super::super::LOSS_BEFORE_HOLE >= t)
        {
            // The capture lost the hole's bytes (the kernel dropped packets about then): they
            // never come. Give the whole session up rather than skip the damaged request: the
            // RST goes before any byte after the hole, and the engine counts and keeps the
            // session out (`Engine::note_capture_loss`).
            self.gap = None;
            sh.stats.drops.capture_gap += u64::from(self.lead);
            sh.events.push(Event::ShedAtHole {
                at: now,
                key: self.key,
            });
            self.finish(sh, now, Some(FailReason::Overload));
            return;
        }
        // After the client's RST no later request comes: everything from the hole on goes.
        let to_end = self.client_reset.is_some() && self.stream.gap_resume().is_none();
        if !self.stream.bounds.is_empty() || !(to_end || self.stream.gap_resume().is_some()) {
            // Later events (answers, captured segments) call again; and a look every
            // `HOLE_RECHECK` in case a capture loss is noticed after the client went quiet.
            self.gap_mut().due = Some(now + HOLE_RECHECK);
            return;
        }
        let s = &self.stream;
        if let Some(c) = &self.cur {
            if s.next.gt(s.cur_start) {
                if !c.acked().ge(s.next) {
                    return; // a record or the RTO calls again
                }
                let answered = self.watch.aimed_at(c.tuple, s.next)
                    && self.watch.answered(now, None, sh.p.answer_quiet);
                if !s.gap_mid_unit() && !answered && now < t + sh.p.answer_timeout {
                    let due = match self.watch.quiet_at(sh.p.answer_quiet) {
                        Some(q) if q > now => q.min(t + sh.p.answer_timeout),
                        _ => t + sh.p.answer_timeout,
                    };
                    self.gap_mut().due = Some(due);
                    return;
                }
            }
        }
        if to_end {
            self.stream.skip_gap_to_end();
            sh.stats.drops.capture_gap += u64::from(self.lead);
            self.set_gap_since(None);
            return; // `reconcile` ends the session as the client did
        }
        if !self.stream.skip_gap(now) {
            return;
        }
        sh.stats.drops.capture_gap += u64::from(self.lead);
        if self.stream.has_held() {
            let at = self.stream.hole_at();
            let g = self.gap_mut();
            g.since = Some(now);
            g.next = at;
        } else {
            self.set_gap_since(None);
        }
        self.unit_acked_at = None;
        self.watch = Watch::default();
        if let Some(mut c) = self.cur.take() {
            let drop_now = c.abandon(now, &sh.p);
            self.retire(c);
            if drop_now {
                self.sweep(sh);
            }
        }
    }
}
