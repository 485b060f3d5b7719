//! How a session ends: its outcome counted once, its connections closed or reset, and what
//! the copier's stop sends.

use std::time::Instant;

use common::flow::FourTuple;

use super::super::conn::{Conn, TxCtx};
use super::super::event::Event;
use super::super::shared::Shared;
use super::super::stats::{FailReason, UnprovenEnd};
use super::{End, Phase, Session};

impl Session {
    /// End the session: `None` = as the client ended it (FIN carried, or its RST), otherwise
    /// failed. Every connection not closed yet is reset.
    pub(crate) fn finish(&mut self, sh: &mut Shared, now: Instant, why: Option<FailReason>) {
        self.end(sh, now, why.map_or(End::Completed, End::Failed));
    }

    /// [`Session::finish`], with the ends that are neither completed nor failed.
    fn end(&mut self, sh: &mut Shared, now: Instant, how: End) {
        let why = match how {
            End::Failed(r) => Some(r),
            End::Completed | End::LeftOpen => None,
        };
        let was_idle = self.idle();
        self.client_reset = None;
        if !self.proven && self.phase != Phase::Done {
            match why {
                Some(FailReason::UnprovenShed) => sh.stats.unproven_ended.add(UnprovenEnd::Shed, 1),
                Some(FailReason::UnprovenTimeout) => {
                    sh.stats.unproven_ended.add(UnprovenEnd::Timeout, 1)
                }
                _ => {}
            }
        }
        match self.phase {
            Phase::Done => return,
            Phase::Syncing { .. } => {
                self.phase = Phase::Done;
                return;
            }
            Phase::Active => {}
        }
        self.phase = Phase::Done;
        // Ended idle: the client's next request may resume (an unproven session ends idle
        // by its timeout; shed unproven, it may have been busy).
        self.detach = matches!(
            why,
            Some(FailReason::IdleTimeout | FailReason::IdleShed | FailReason::UnprovenTimeout)
        ) || (why == Some(FailReason::UnprovenShed) && was_idle);
        // The test side failed (the test server down or restarting, refusing or not answering)
        // while the client's connection goes on: its next request resumes the copy on a new test
        // connection, as after an idle end, rather than the rest of the connection being
        // dropped while this session lingers. Not for HTTP/2 or WebSocket (a new connection
        // cannot take frames without the old one's preface, HPACK and upgrade).
        if matches!(
            why,
            Some(FailReason::Refused | FailReason::RetransmitLimit | FailReason::ReconnectLimit)
        ) && !self.client_closed()
            && !self.stream.is_h2()
            && !self.stream.in_ws()
            && self.proven
        {
            if let Some(ack) = self.stream.last_data_ack() {
                self.detach = true;
                self.resume_after = Some(ack);
            }
        }
        self.note_answer(&mut sh.events, now, false);
        sh.stats.sessions_active = sh.stats.sessions_active.saturating_sub(1);
        match how {
            End::Completed => sh.stats.sessions_completed += 1,
            End::Failed(r) => sh.stats.sessions_failed.bump(r),
            End::LeftOpen => sh.stats.sessions_open_at_end += 1,
        }
        // For its test server's failure share (`Targets::on_outcome`): failed by the server's
        // doing, or completed; neither otherwise.
        let failed = match why {
            None if how == End::LeftOpen => None,
            None => Some(false),
            Some(
                FailReason::Refused | FailReason::RetransmitLimit | FailReason::ReconnectLimit,
            ) => Some(true),
            Some(_) => None,
        };
        if let Some(failed) = failed {
            sh.events.push(Event::Ended {
                at: now,
                slot: self.slot,
                failed,
            });
        }
        if why.is_none() && self.stream.has_held() {
            // The client ended with a hole not given up yet: what followed it dies here.
            sh.stats.drops.capture_gap += u64::from(self.lead);
        }
        if let Some(c) = self.cur.take() {
            self.retire(c);
        }
        for c in self.old.iter_mut() {
            c.abandon(now, &sh.p);
        }
        self.stream.free();
        self.unit_acked_at = None;
        self.sweep(sh);
    }

    /// Whether none of the client's bytes has left toward the test server yet (a connection
    /// at most sent its SYN): failed now, the session leaves nothing there (a server logs no
    /// request for a connection that carried none).
    pub(crate) fn sent_nothing(&self) -> bool {
        self.phase == Phase::Active
            && self.old.iter().all(|c| c.snd_max.diff(c.iss) <= 1)
            && self.cur.as_ref().is_none_or(|c| c.snd_max.diff(c.iss) <= 1)
    }

    /// `c` closes beside the current connection (or after the session).
    pub(super) fn retire(&mut self, c: Conn) {
        self.old.push(c);
    }

    /// The copier stops: end the session (failed, `shutdown`, if it was being copied) and make
    /// every test connection it still has send a RST now (again, if it sent one already),
    /// appending the packets to `out`. The connections are dropped and their tuples appended
    /// to `unreg`, for the caller to unregister once the RSTs are on their way (connections
    /// that never sent anything are unregistered at once, as `Event::Unregistered`).
    /// `at_capture_end`: the capture file is done, so an idle session (every byte sent and
    /// answered) ends as open at the capture's end, not as failed.
    pub(crate) fn shutdown(
        &mut self,
        sh: &mut Shared,
        now: Instant,
        at_capture_end: bool,
        out: &mut Vec<(FourTuple, Vec<u8>)>,
        unreg: &mut Vec<FourTuple>,
    ) {
        let how = if at_capture_end && self.idle() {
            End::LeftOpen
        } else {
            End::Failed(FailReason::Shutdown)
        };
        self.end(sh, now, how);
        if let Some(c) = self.cur.take() {
            self.retire(c);
        }
        for mut c in self.old.take() {
            c.shutdown(now, &sh.p);
            let mut buf = Vec::new();
            while c
                .poll(now, &sh.p, &mut TxCtx::nothing(self.tsval), &mut buf)
                .is_some()
            {
                out.push((c.tuple, std::mem::take(&mut buf)));
            }
            sh.unindex(c.tuple);
            unreg.push(c.tuple);
        }
    }
}
