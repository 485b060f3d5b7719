//! The test server's side: a record of its segment, as the intercept reports it, goes to the
//! connection of its tuple; a SYN answered from a TIME_WAIT socket moves the copy to another
//! port.

use std::time::Instant;

use super::super::conn::State;
use super::super::pkt::RecordInfo;
use super::super::shared::Shared;
use super::super::stamp::Stamp;
use super::super::stats::FailReason;
use super::Session;

impl Session {
    /// A record of one of this session's connections.
    pub(crate) fn on_record(&mut self, sh: &mut Shared, now: Instant, r: &RecordInfo) {
        self.last_activity = Stamp::of(now);
        let mut answer = false; // answer bytes for the unit pacing waits on
        if let Some(c) = self.cur.as_mut().filter(|c| c.tuple == r.tuple) {
            if c.state != State::SynSent {
                // A greeting can come before the client's first bytes are captured: it counts
                // for the greeting's unit once those bytes show there was one.
                if let Some(end) = self
                    .stream
                    .waiting_end()
                    .or_else(|| self.stream.greeting_end())
                {
                    self.watch.aim(c.tuple, end);
                    self.watch.on_record(now, r, c.rcv_nxt);
                    answer = self.watch.bytes() > 0;
                }
            }
            let tw = c.tw_acks;
            c.on_record(now, r, &sh.p);
            if c.window_released() {
                sh.stats.window_releases += 1;
            }
            if c.tw_acks > tw {
                if c.port_busy {
                    self.move_port(sh, now);
                } else {
                    sh.stats.syn_time_wait_resets += 1;
                }
            }
            self.h2_note_rx(now);
        } else if let Some(c) = self.old.iter_mut().find(|c| c.tuple == r.tuple) {
            c.on_record(now, r, &sh.p);
        }
        if answer {
            self.note_answer(&mut sh.events, now, true);
        }
        self.reconcile(sh, now);
        self.sweep(sh);
    }

    /// The test server answered our SYN twice with the ACK of a TIME_WAIT socket: leave that
    /// tuple (its RST is still sent) and open the connection again from another port of the
    /// share, carrying the same bytes.
    fn move_port(&mut self, sh: &mut Shared, now: Instant) {
        let Some(mut c) = self.cur.take() else { return };
        let start = c.acked().add(1); // in SYN_SENT, `acked()` is the ISN
        c.abandon(now, &sh.p);
        self.retire(c);
        match sh
            .tuples
            .free_tuple(self.client_ip, self.target.into(), None)
        {
            Some(t) => {
                sh.stats.syn_port_moves += 1;
                self.open_conn(sh, now, t, start);
            }
            None => self.finish(sh, now, Some(FailReason::NoTuple)),
        }
    }
}
