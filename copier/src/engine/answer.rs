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
//! `answer_quiet` (a smaller answer), or sent some and closed (FIN or RST acking the unit).
//! An answer that never comes is the caller's business (`answer_timeout`).
//!
//! Invariant: everything counted belongs to the unit and connection the watch is aimed at;
//! aiming it elsewhere forgets it.

use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::seq::SeqNum;
use common::wire::TcpFlags;

use super::pkt::RecordInfo;

#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// The connection and unit end aimed at.
    aim: Option<(FourTuple, SeqNum)>,
    /// Test server sequence number of the first answer byte seen.
    first: Option<SeqNum>,
    /// End of the furthest answer byte seen.
    last: SeqNum,
    /// When new answer bytes last arrived.
    at: Option<Instant>,
    /// A FIN or RST acking the unit came after the answer.
    closed: bool,
}

impl Watch {
    /// Aim at the unit ending at `end` on `tuple`; what was counted for anything else is
    /// forgotten.
    pub(crate) fn aim(&mut self, tuple: FourTuple, end: SeqNum) {
        if self.aim != Some((tuple, end)) {
            *self = Watch { aim: Some((tuple, end)), ..Watch::default() };
        }
    }

    /// Whether the watch is aimed at this unit of this connection.
    pub(crate) fn aimed_at(&self, tuple: FourTuple, end: SeqNum) -> bool {
        self.aim == Some((tuple, end))
    }

    /// A record of the connection aimed at. `rcv_nxt`: what the connection had received of
    /// the test server before it (a FIN or RST beyond it means bytes whose records were lost).
    pub(crate) fn on_record(&mut self, now: Instant, r: &RecordInfo, rcv_nxt: SeqNum) {
        let Some((_, end)) = self.aim else { return };
        let h = &r.hdr;
        if !h.has(TcpFlags::ACK) || h.ack.lt(end) {
            return;
        }
        if r.data_len > 0 {
            let (s, e) = (h.seq, h.seq.add(r.data_len));
            match self.first {
                None => {
                    self.first = Some(s);
                    self.last = e;
                    self.at = Some(now);
                }
                Some(f) => {
                    self.first = Some(f.min(s));
                    if e.gt(self.last) {
                        self.last = e;
                        self.at = Some(now);
                    }
                }
            }
        }
        if h.has(TcpFlags::FIN) || h.has(TcpFlags::RST) {
            // Only a FIN says the bytes before it were an answer: a RST beyond `rcv_nxt` may
            // follow the lost end (and FIN) of an earlier answer, the server having closed
            // before it had the unit (so the unit is carried again on a new connection).
            if self.first.is_none() && h.has(TcpFlags::FIN) && h.seq.gt(rcv_nxt) && h.seq.diff(rcv_nxt) < (1 << 30) {
                self.first = Some(rcv_nxt);
                self.last = h.seq;
                self.at = Some(now);
            }
            self.closed = true;
        }
    }

    /// Answer bytes counted.
    pub(crate) fn bytes(&self) -> u32 {
        self.first.map_or(0, |f| self.last.diff(f).max(0) as u32)
    }

    /// Whether the unit is answered. `need`: what the online server answered (`None`: the size
    /// rule does not apply, only quiet or a close do).
    pub(crate) fn answered(&self, now: Instant, need: Option<u32>, quiet: Duration) -> bool {
        let b = self.bytes();
        b > 0 && (self.closed || need.is_some_and(|n| b >= n.max(1)) || self.at.is_some_and(|t| t + quiet <= now))
    }

    /// When the quiet rule would call the unit answered, if some answer came.
    pub(crate) fn quiet_at(&self, quiet: Duration) -> Option<Instant> {
        if self.bytes() == 0 {
            return None;
        }
        self.at.map(|t| t + quiet)
    }
}
