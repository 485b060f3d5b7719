//! How much the test server has answered the request unit a session waits on, from the
//! intercept's records, and whether that counts as "answered" for pacing.
//!
//! A [`Watch`] is aimed at one unit (its end, in client sequence numbers) on one test
//! connection. It counts only what the test server sent after it had the whole unit: segments
//! whose ACK number reaches the unit's end. Their extent in the test server's sequence space
//! (first byte seen to furthest byte seen) is the size of the answer so far, so duplicated or
//! reordered records are not counted twice and a lost record in the middle costs nothing.
//!
//! The rule ([`Watch::answered`]): the unit is answered once the test server sent at least as
//! many bytes as the online server did (`need`), or sent some and then went quiet for
//! `answer_quiet` (a smaller answer), or sent some and closed (FIN or RST acking the unit),
//! unless all it sent may be the end of the answer before (carried, see below): then the close
//! proves nothing and the unit goes again on the next connection.
//! An answer that never comes is the caller's business (`answer_timeout`).
//!
//! Several units in flight (windowed pacing): the test server answers them in order, one answer
//! after the other in its sequence space. Once the aimed unit is answered by size,
//! [`Watch::carry`] moves the watch to the next unit and keeps the bytes beyond the first
//! answer as the start of the next one (when the server had that unit before it sent them).
//!
//! Invariant: everything counted belongs to the unit and connection the watch is aimed at (or,
//! after a carry, to the units after the ones released); aiming it elsewhere forgets it.

use crate::engine::stamp::Stamp;
use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::seq::SeqNum;
use common::wire::TcpFlags;

use super::pkt::RecordInfo;

#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// The connection (its client port: a session's test connections differ in nothing else)
    /// and unit end aimed at.
    aim: Option<(u16, SeqNum)>,
    /// Test server sequence number of the first answer byte seen.
    first: Option<SeqNum>,
    /// End of the furthest answer byte seen.
    last: SeqNum,
    /// When new answer bytes last arrived.
    at: Option<Stamp>,
    /// A FIN or RST acking the unit came after the answer.
    closed: bool,
    /// The highest ACK number of a record counted: the test server had the client's bytes up
    /// to there when it sent the last answer bytes seen.
    max_ack: Option<SeqNum>,
    /// After a carry: answer bytes before this belong to units already released.
    floor: Option<SeqNum>,
    /// The answer counted started with bytes carried from the unit before: they may as well
    /// be the end of a longer answer to it, so a close does not prove this unit answered.
    carried: bool,
}

impl Watch {
    /// Aim at the unit ending at `end` on `tuple`; what was counted for anything else is
    /// forgotten.
    pub(crate) fn aim(&mut self, tuple: FourTuple, end: SeqNum) {
        let aim = Some((tuple.client.port(), end));
        if self.aim != aim {
            *self = Watch {
                aim,
                ..Watch::default()
            };
        }
    }

    /// Whether the watch is aimed at this unit of this connection.
    pub(crate) fn aimed_at(&self, tuple: FourTuple, end: SeqNum) -> bool {
        self.aim == Some((tuple.client.port(), end))
    }

    /// A record of the connection aimed at. `rcv_nxt`: what the connection had received of
    /// the test server before it (a FIN or RST beyond it means bytes whose records were lost).
    pub(crate) fn on_record(&mut self, now: Instant, r: &RecordInfo, rcv_nxt: SeqNum) {
        let Some((_, end)) = self.aim else { return };
        let h = &r.hdr;
        if !h.has(TcpFlags::ACK) || h.ack.lt(end) {
            return;
        }
        if self.max_ack.is_none_or(|m| h.ack.gt(m)) {
            self.max_ack = Some(h.ack);
        }
        if r.data_len > 0 {
            let (mut s, e) = (h.seq, h.seq.add(r.data_len));
            if let Some(fl) = self.floor {
                if !e.gt(fl) {
                    return self.on_close(now, h, rcv_nxt);
                }
                s = s.max(fl);
            }
            match self.first {
                None => {
                    self.first = Some(s);
                    self.last = e;
                    self.at = Some(Stamp::of(now));
                }
                Some(f) => {
                    self.first = Some(f.min(s));
                    if e.gt(self.last) {
                        self.last = e;
                        self.at = Some(Stamp::of(now));
                    }
                }
            }
        }
        self.on_close(now, h, rcv_nxt);
    }

    fn on_close(&mut self, now: Instant, h: &super::pkt::Header, rcv_nxt: SeqNum) {
        if h.has(TcpFlags::FIN) || h.has(TcpFlags::RST) {
            // Only a FIN says the bytes before it were an answer: a RST beyond `rcv_nxt` may
            // follow the lost end (and FIN) of an earlier answer, the server having closed
            // before it had the unit (so the unit is carried again on a new connection).
            let from = self.floor.map_or(rcv_nxt, |f| f.max(rcv_nxt));
            if self.first.is_none()
                && h.has(TcpFlags::FIN)
                && h.seq.gt(from)
                && h.seq.diff(from) < (1 << 30)
            {
                self.first = Some(from);
                self.last = h.seq;
                self.at = Some(Stamp::of(now));
            }
            self.closed = true;
        }
    }

    /// The aimed unit was answered by size: `used` answer bytes were its answer. Aim at the
    /// next unit (ending at `end`); the bytes counted beyond `used` start its answer when the
    /// test server sent them after it had that unit (the furthest record counted acked
    /// `end`), otherwise they were the end of a longer answer and are not carried.
    ///
    /// Returns whether bytes beyond `used` were counted and not carried: the test server's
    /// answer was longer than the online one.
    pub(crate) fn carry(&mut self, tuple: FourTuple, end: SeqNum, used: u32) -> bool {
        let Some(f) = self.first else {
            self.aim(tuple, end);
            return false;
        };
        let at = f.add(used.min(self.bytes()));
        let keep = self.max_ack.is_some_and(|a| a.ge(end));
        let (last, t, closed, max_ack) = (self.last, self.at, self.closed, self.max_ack);
        *self = Watch {
            aim: Some((tuple.client.port(), end)),
            floor: Some(if keep { at } else { last }),
            max_ack,
            closed,
            ..Watch::default()
        };
        if keep && last.gt(at) {
            self.first = Some(at);
            self.last = last;
            self.at = t;
            self.carried = true;
        }
        !keep && last.gt(at)
    }

    /// The highest ACK number among the records counted.
    pub(crate) fn max_ack(&self) -> Option<SeqNum> {
        self.max_ack
    }

    /// Answer bytes counted.
    pub(crate) fn bytes(&self) -> u32 {
        self.first.map_or(0, |f| self.last.diff(f).max(0) as u32)
    }

    /// Whether the unit is answered. `need`: what the online server answered (`None`: the size
    /// rule does not apply, only quiet or a close do).
    pub(crate) fn answered(&self, now: Instant, need: Option<u32>, quiet: Duration) -> bool {
        let b = self.bytes();
        b > 0
            && ((self.closed && !self.carried)
                || need.is_some_and(|n| b >= n.max(1))
                || self.at.is_some_and(|t| t.at() + quiet <= now))
    }

    /// Whether the answer counted is at least `need` bytes (the online answer's size; `None`:
    /// the size rule does not apply).
    pub(crate) fn by_size(&self, need: Option<u32>) -> bool {
        let b = self.bytes();
        b > 0 && need.is_some_and(|n| b >= n.max(1))
    }

    /// Whether a FIN or RST acking the unit came.
    pub(crate) fn closed(&self) -> bool {
        self.closed
    }

    /// When the quiet rule would call the unit answered, if some answer came.
    pub(crate) fn quiet_at(&self, quiet: Duration) -> Option<Instant> {
        if self.bytes() == 0 {
            return None;
        }
        self.at.map(|t| t.at() + quiet)
    }
}
