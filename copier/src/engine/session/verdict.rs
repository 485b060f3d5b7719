//! The session's side of the registrations: the intercepts' verdicts on its test tuples, and
//! its connections held back while no acceptance is in force.

use std::time::Instant;

use common::flow::FourTuple;

use super::super::shared::Shared;
use super::super::stats::FailReason;
use super::Session;

impl Session {
    /// The intercepts of `bits` no longer guard what they accepted (`forget`: their link ended,
    /// the acceptance is void; otherwise their rules went missing, `sh.unguarded`): a
    /// connection in force through none of the others is held back (nothing sent) until an
    /// acceptance is in force again. Returns how many connections were held back.
    pub(crate) fn withdraw(&mut self, sh: &Shared, bits: u64, forget: bool) -> u64 {
        let mut n = 0;
        for c in self.cur.iter_mut().chain(self.old.iter_mut()) {
            if c.accepted_by & bits == 0 {
                continue;
            }
            if forget {
                c.accepted_by &= !bits;
            }
            if !c.reg_pending && !c.dead && c.accepted_by & !sh.unguarded == 0 {
                c.reg_pending = true;
                n += 1;
            }
        }
        n
    }

    /// Connections held back only because their intercepts' rules were missing, in force again
    /// now that some are back. Returns whether any was.
    pub(crate) fn reinstate(&mut self, sh: &Shared) -> bool {
        let mut any = false;
        for c in self.cur.iter_mut().chain(self.old.iter_mut()) {
            if c.reg_pending && !c.dead && c.accepted_by & !sh.unguarded != 0 {
                c.reg_pending = false;
                any = true;
            }
        }
        any
    }

    /// An intercept's verdict on one of this session's tuples (see
    /// `Engine::handle_registered`): accepted, the connection's packets may go; refused by
    /// `need` different intercepts before any accepted it, the connection is dropped unsent
    /// and, if it is the current one, the session fails (`registration_refused`). Returns
    /// whether this verdict was such a refusal. A tuple held by another copier
    /// (`HeldByOther`, from any intercept) is no refusal of the session: the connection is
    /// dropped unsent and, if it is the current one, opened again on another tuple of the
    /// share (`tuple_moves`).
    pub(crate) fn on_verdict(
        &mut self,
        sh: &mut Shared,
        now: Instant,
        tuple: FourTuple,
        from: u16,
        verdict: common::proto::RegVerdict,
        need: usize,
    ) -> bool {
        let is_cur = self.cur.as_ref().is_some_and(|c| c.tuple == tuple);
        let Some(c) = self
            .cur
            .iter_mut()
            .chain(self.old.iter_mut())
            .find(|c| c.tuple == tuple)
        else {
            return false;
        };
        if verdict.accepted() {
            c.accepted_by |= 1u64 << (from % 64);
            // In force unless every intercept that accepted it lost its rules.
            if c.accepted_by & !sh.unguarded != 0 {
                c.reg_pending = false;
            }
            return false;
        }
        if !c.reg_pending {
            return false; // in force already
        }
        if verdict == common::proto::RegVerdict::ServerNotLocal {
            // That intercept does not guard this server: wait for the one that does.
            sh.stats.registrations_not_local += 1;
            return false;
        }
        if verdict == common::proto::RegVerdict::HeldByOther && c.sent_nothing() {
            // Another copier holds this tuple on the test host: leave it (nothing was sent on
            // it) and carry the copy on another port of the share.
            c.dead = true;
            if is_cur {
                let start = c.acked().add(1); // nothing sent: the ISN + 1
                self.sweep(sh);
                sh.stats.tuple_moves += 1;
                match sh
                    .tuples
                    .free_tuple(self.client_ip, self.target.into(), None)
                {
                    Some(t) => self.open_conn(sh, now, t, start),
                    None => self.finish(sh, now, Some(FailReason::NoTuple)),
                }
            } else {
                self.sweep(sh);
            }
            return false;
        }
        c.refused_by |= 1u64 << (from % 64);
        if (c.refused_by.count_ones() as usize) < need.min(64) {
            return false;
        }
        if is_cur {
            self.finish(sh, now, Some(FailReason::RegistrationRefused));
        } else {
            c.dead = true; // never sent anything
            self.sweep(sh);
        }
        true
    }
}
