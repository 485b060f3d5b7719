//! Pacing, the rules of [`Session`] that decide how far the current connection may send: the
//! next request unit goes once the test server acknowledged the current one and answered it, by the rule of [`Watch`](super::super::answer::Watch) (as many bytes as the online answer, or some and then
//! quiet, or some and a close), or `answer_timeout` after it acknowledged it. With a window
//! (`pace_window` > 1) a connection may have up to `win` whole units in flight, all within
//! `replay_keep` of the first unanswered byte (so they can go again on a new connection):
//! `win` starts at 1 and opens by one with each unit answered; answers are matched to units
//! in order by the online sizes (`Watch::carry`). An answer that timed out, or whose size
//! differed from the online one, is a strike: the window closes to one and opens again by one
//! with each unit answered; from `STRIKES_LOCKSTEP` strikes the session is lock-step (window 1),
//! and each answer that matches the online size forgives one, so a session whose test answers
//! keep differing stays lock-step while one hit by a pause of the test server (a unit released
//! by the quiet rule in the middle of its answer, whose tail then counts for the next unit:
//! two strikes) opens its window again. Lock-step for the rest of the session once the test
//! server closed a connection with requests left; always for server-speaks-first sessions and
//! shaped ones.
//!

use crate::engine::stamp::Stamp;
use std::time::Instant;

use common::flow::FourTuple;
use common::seq::SeqNum;

use super::super::config::Params;
use super::super::shared::Shared;
use super::super::stream::Stream;
use super::{Session, STRIKES_FOR_GOOD, STRIKES_LOCKSTEP};

/// Answer bytes an HTTP/2 copy may run ahead of the test server beyond what the online server
/// had sent (`Session::h2_gate`): a few dozen small answers (about 50 of 80 bytes: with the
/// online client's own streams, under nginx's 128 concurrent streams), less than one large one.
pub(super) const H2_SLACK: u32 = 4 << 10;

impl Session {
    /// When the quiet rule will call the unit pacing waits on answered.
    pub(super) fn quiet_deadline(&self, p: &Params) -> Option<Instant> {
        let c = self.cur.as_ref()?;
        let end = self.stream.waiting_end()?;
        if !self.watched(p) || !self.watch.aimed_at(c.tuple, end) {
            return None;
        }
        self.watch.quiet_at(self.answer_quiet(p))
    }

    /// How long the test server must be quiet for the unit pacing waits on to count as
    /// answered: `answer_quiet`, except for the FIN of an HTTP/2 connection opened with the
    /// preface, which waits for the online total (`Session::h2_done`) or `answer_timeout`
    /// (unless the rules dropped streams of it: that total is then never reached). Its
    /// streams are answered in any order and a server may work on them quietly for longer
    /// than `answer_quiet` (a gRPC server cancels every call still in progress when the
    /// connection closes).
    fn answer_quiet(&self, p: &Params) -> std::time::Duration {
        if self.stream.in_h2()
            && self.stream.before_fin()
            && self.stream.h2_online_total().is_some()
            && !self.stream.h2_filtered()
        {
            p.answer_timeout
        } else {
            p.answer_quiet
        }
    }

    /// Whether the first unanswered unit is released by the [`Watch`] rule: always with
    /// pacing; without, only the last unit of a session closing by reset, and an HTTP/2
    /// session's last unit before the client's FIN (the FIN waits for the test server to
    /// finish answering, or for its answers to reach the online size: `Session::h2_done`).
    pub(super) fn watched(&self, p: &Params) -> bool {
        self.paced(p)
            || (self.client_reset.is_some() && self.stream.bounds.is_empty())
            || (self.stream.in_h2() && self.stream.before_fin())
    }

    /// Whether the first unanswered unit was acknowledged and waits for its answer (the
    /// `answer_timeout` clock runs). The last, open unit waits only when the client reset.
    pub(super) fn waiting(&self, acked: SeqNum) -> bool {
        match self.stream.waiting_end() {
            Some(end) => {
                acked.ge(end) && (!self.stream.bounds.is_empty() || self.client_reset.is_some())
            }
            None => false,
        }
    }

    pub(super) fn send_limit(&self, p: &Params) -> SeqNum {
        if let Some((at, _)) = self.h2_gate() {
            return at;
        }
        send_limit(&self.stream, p.replay_keep, self.paced(p), self.window(p))
    }

    /// Whether this session is paced: `--pacing` is on and the client does not speak HTTP/2
    /// or WebSocket. An HTTP/2 session's units go as captured (its streams answer in any
    /// order, and the records carry no payload to tell which stream an answer byte belongs
    /// to), bounded by the test server's TCP window and `per_session_cap`; so do a WebSocket
    /// session's messages after its opening request (`Stream::in_ws`).
    pub(crate) fn paced(&self, p: &Params) -> bool {
        p.pace && !self.stream.in_h2() && !self.stream.in_ws()
    }

    /// Request units the current connection may have in flight: 1 (lock-step) without a
    /// window, for server-speaks-first protocols (their exchanges are usually lock-step), for
    /// shaped sessions (think time and ON/OFF gating count from each answer), and once
    /// [`STRIKES_LOCKSTEP`] strikes (see [`Session::strike`]); otherwise the adaptive window,
    /// at most `pace_window`.
    pub(super) fn window(&self, p: &Params) -> u32 {
        if !self.paced(p)
            || self.gate.is_some()
            || self.stream.server_first
            || self.strikes >= STRIKES_LOCKSTEP
        {
            1
        } else {
            self.win.clamp(1, p.pace_window)
        }
    }

    /// Ask the planner about the current unit, or lift its hold (see [`Gate::update`]).
    pub(super) fn gate(&mut self, sh: &mut Shared, now: Instant) {
        if let Some(g) = self.gate.as_mut() {
            g.update(&self.stream, &mut sh.plan, now);
        }
    }

    /// Whether the planner holds the current unit back.
    pub(super) fn held(&self) -> bool {
        self.gate
            .as_ref()
            .is_some_and(|g| g.held(self.stream.cur_start))
    }

    /// Move past the units the current connection got answered, and run the answer clock.
    pub(super) fn release(&mut self, sh: &mut Shared, now: Instant) {
        let p = &sh.p;
        let Some(c) = &self.cur else { return };
        let (acked, answered, tuple) = (c.acked(), c.answered, c.tuple);
        let before = self.stream.cur_start;
        let timed_out = self
            .unit_acked_at
            .is_some_and(|t| t.at() + p.answer_timeout <= now);
        let (mut n, mut by_timeout) = (0, false);
        self.h2_unstall(now, p);
        if !self.paced(p) {
            (n, by_timeout) = self
                .stream
                .release(acked, answered, timed_out, self.stream.in_h2());
        }
        if n == 0 && self.h2_done(now, p) {
            self.stream.release_one();
            n = 1;
        }
        if n == 0 && self.watched(p) {
            (n, by_timeout) = self.release_watched(now, p, acked, tuple, timed_out);
        }
        if n > 0 {
            self.unit_acked_at = None;
        }
        if self.stream.cur_start != before && !by_timeout {
            self.reconnects = 0;
        }
        if self.unit_acked_at.is_none() && self.waiting(acked) {
            self.unit_acked_at = Some(Stamp::of(now));
        }
        self.stream.trim(acked, p.replay_keep);
        if n > 0 {
            self.note_answer(&mut sh.events, now, false); // released with no answer byte
            if by_timeout {
                sh.stats.answer_timeouts += 1;
            }
        }
    }

    /// The HTTP/2 gate: the first unit the test server is not ready for, and the answer bytes
    /// it needs (`None` when nothing is held). The streams of a connection answer in any
    /// order, but the bytes of all answers together grow as online: a unit goes once the test
    /// server sent (on the whole connection) as many answer bytes as the online server had
    /// when the client sent that unit, less [`H2_SLACK`]. So the test server never has many
    /// more streams open than the online one had (nginx refuses streams beyond
    /// `http2_max_concurrent_streams`, 128), and a test server as fast as the online one gets
    /// every unit as captured. Known only for a connection opened with the preface.
    pub(super) fn h2_gate(&self) -> Option<(SeqNum, u32)> {
        if !self.stream.in_h2() {
            return None;
        }
        let c = self.cur.as_ref()?;
        let h = self.stream.h2_ref()?;
        let got = c
            .received()
            .saturating_add(h.credit)
            .saturating_add(H2_SLACK);
        let cur = std::iter::once((self.stream.cur_start, self.stream.cur_ack()));
        for (at, ack) in cur.chain(self.stream.bounds.iter().map(|b| (b.at, b.ack))) {
            if at.lt(c.snd_max) {
                continue; // gone already
            }
            if !at.lt(self.stream.next) {
                return None;
            }
            let need = ack.and_then(|a| self.stream.h2_online_at(a))?;
            if need > got {
                return Some((at, need));
            }
        }
        None
    }

    /// The HTTP/2 gate holds a unit, everything sent was acknowledged and the test server has
    /// been quiet for `answer_quiet`: it answered less than online (smaller answers, refused or
    /// reset streams). Count the difference as sent so that the held unit goes.
    fn h2_unstall(&mut self, now: Instant, p: &Params) {
        let Some((at, need)) = self.h2_gate() else {
            return;
        };
        let Some(c) = self.cur.as_ref() else { return };
        if !c.acked().ge(at) {
            return;
        }
        let got = c.received();
        if self.h2_quiet_at(p) > now {
            return;
        }
        if let Some(h) = self.stream.h2_mut() {
            h.credit = need.saturating_sub(got.saturating_add(H2_SLACK));
        }
    }

    /// When the HTTP/2 gate gives up waiting for answer bytes (see `h2_unstall`), or the
    /// client's FIN goes after the online total (see `h2_done`).
    pub(super) fn h2_deadline(&self, p: &Params) -> Option<Instant> {
        if let Some(t) = self.h2_done_at(p) {
            return Some(t);
        }
        let (at, _) = self.h2_gate()?;
        if !self.cur.as_ref()?.acked().ge(at) {
            return None;
        }
        Some(self.h2_quiet_at(p))
    }

    /// When the test server will have been quiet for `answer_quiet` on this HTTP/2
    /// connection: from the last record that brought more answer bytes (`h2_note_rx`).
    fn h2_quiet_at(&self, p: &Params) -> Instant {
        let last = self
            .stream
            .h2_ref()
            .and_then(|h| h.rx_at)
            .unwrap_or(self.last_activity);
        last.at() + p.answer_quiet
    }

    /// A record on the current connection: note when the test server last sent more.
    pub(super) fn h2_note_rx(&mut self, now: Instant) {
        let Some(got) = self.cur.as_ref().map(|c| c.received()) else {
            return;
        };
        if let Some(h) = self.stream.h2_mut() {
            if got > h.rx {
                h.rx = got;
                h.rx_at = Some(Stamp::of(now));
            }
        }
    }

    /// An HTTP/2 session's last unit before the client's FIN is answered by size: the test
    /// server took every byte, sent at least as many as the online server did on the whole
    /// connection (known when the preface opened it), and then was quiet for `answer_quiet`.
    /// The total alone is not enough: the two servers' own frames (a gRPC server's PINGs and
    /// WINDOW_UPDATEs, sent as its timers and flow control decide) differ in number, so a test
    /// server can reach the online total while it still answers the last calls, which the FIN
    /// would cancel.
    fn h2_done(&self, now: Instant, p: &Params) -> bool {
        self.h2_done_at(p).is_some_and(|t| t <= now)
    }

    /// When `h2_done` will hold (the quiet after the total), once the total was reached.
    fn h2_done_at(&self, p: &Params) -> Option<Instant> {
        let c = self.cur.as_ref()?;
        let total = self.stream.h2_online_total()?;
        (self.stream.in_h2()
            && self.stream.before_fin()
            && c.acked().ge(self.stream.next)
            && c.received() >= total)
            .then(|| self.h2_quiet_at(p))
    }

    /// Release the unanswered units the [`Watch`] rule says are answered, or the first by
    /// `timed_out`. Returns `(released, by_timeout)`.
    ///
    /// With several units in flight the test server answers them in order: a unit answered
    /// by size passes the bytes beyond its online size on to the next one (`Watch::carry`),
    /// which may then be answered at once. A unit answered by quiet (a shorter answer) also
    /// releases the later units the test server had received before its last answer bytes and
    /// then went quiet on: it answered them too. Each unit answered opens the window by one;
    /// a timeout or a size that differs from the online one closes it to one (a strike), an
    /// answer of the online size forgives a strike.
    pub(super) fn release_watched(
        &mut self,
        now: Instant,
        p: &Params,
        acked: SeqNum,
        tuple: FourTuple,
        timed_out: bool,
    ) -> (usize, bool) {
        let mut n = 0;
        loop {
            let Some(end) = self.stream.waiting_end() else {
                return (n, false);
            };
            self.watch.aim(tuple, end);
            if !(acked.ge(end) || self.watch.bytes() > 0) {
                return (n, false);
            }
            let open = self.stream.bounds.is_empty();
            let closing = if open {
                self.client_reset.is_some()
            } else {
                self.stream.before_fin()
            };
            // The online size is exact only between two units; the close waits for quiet.
            let need = if open || closing {
                None
            } else {
                self.stream.online_len()
            };
            if let Some(used) = need.filter(|_| self.watch.by_size(need)) {
                self.stream.release_one();
                n += 1;
                self.open_window(p);
                // An online size of 0 (a greeting gate again on a new connection) says
                // nothing of where the test answer ends: all of it was this unit's.
                let used = if used == 0 { self.watch.bytes() } else { used };
                match self.stream.waiting_end() {
                    Some(next) => {
                        if self.watch.carry(tuple, next, used) {
                            self.strike(); // longer than online
                        } else {
                            self.forgive();
                        }
                    }
                    None => return (n, false),
                }
                continue;
            }
            if self.watch.answered(now, need, self.answer_quiet(p)) {
                self.stream.release_one();
                n += 1;
                if need.is_some() && !self.watch.closed() {
                    self.strike(); // shorter than online, or a pause in the middle
                }
                if !self.watch.closed() {
                    let upto = self.watch.max_ack().map_or(acked, |a| a.min(acked));
                    while let Some(b) = self.stream.bounds.front() {
                        if !b.at.le(upto) || self.stream.before_fin() {
                            break;
                        }
                        self.stream.release_one();
                        n += 1;
                    }
                }
                return (n, false);
            }
            if timed_out && n == 0 && (!open || closing) {
                self.stream.release_one();
                self.strike();
                return (1, true);
            }
            return (n, false);
        }
    }

    /// The rest of the session goes lock-step: the test server closed a connection with
    /// requests left (one that ends connections may reset one with unread requests in it).
    pub(super) fn lock_step(&mut self) {
        self.win = 1;
        self.strikes = STRIKES_FOR_GOOD;
    }

    /// An answer timed out, or its size differed from the online one (with several units in
    /// flight the online sizes would then no longer tell where one test answer ends and the
    /// next begins): the window closes to one, and from [`STRIKES_LOCKSTEP`] strikes the
    /// session is lock-step until answers that match forgive them. Strikes count up to twice
    /// that, so a session whose answers kept differing needs a few matching ones in a row.
    pub(super) fn strike(&mut self) {
        self.win = 1;
        if self.strikes != STRIKES_FOR_GOOD {
            self.strikes = (self.strikes + 1).min(2 * STRIKES_LOCKSTEP);
        }
    }

    /// An answer matched the online size: one strike fewer (none for a session lock-step for
    /// good).
    fn forgive(&mut self) {
        if self.strikes != STRIKES_FOR_GOOD {
            self.strikes = self.strikes.saturating_sub(1);
        }
    }

    /// A unit was answered: one more may be in flight (up to `pace_window`).
    pub(super) fn open_window(&mut self, p: &Params) {
        self.win = (self.win + 1).min(p.pace_window);
    }
}

/// How far the current connection may send. Pacing stops at the end of the `win`-th
/// unanswered unit (the first boundary in lock-step), taking a later unit only whole and only
/// while everything in flight stays within `replay_keep` of the first unanswered byte (so it
/// can all be carried again on a new connection); without pacing only a greeting gate stops it.
fn send_limit(s: &Stream, replay_keep: u32, pace: bool, win: u32) -> SeqNum {
    match s.bounds.front() {
        Some(b) if pace || (s.server_first && b.at == s.cur_start) => {
            let mut limit = b.at.min(s.next);
            if !pace || win <= 1 {
                return limit;
            }
            let cap = s.cur_start.add(replay_keep);
            let more = s.bounds.iter().skip(1).take(win as usize - 1);
            let mut taken = 1;
            for x in more {
                if x.at.gt(cap) {
                    return limit;
                }
                limit = x.at.min(s.next);
                taken += 1;
            }
            // Fewer boundaries than the window: the last, open unit goes as captured.
            if taken < win && !s.next.gt(cap) {
                limit = s.next;
            }
            limit
        }
        _ => s.next,
    }
}
