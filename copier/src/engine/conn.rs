//! One TCP connection toward the test server, seen from our end: the sender half of a small TCP
//! (handshake, window, retransmission with backoff, FIN, RST) whose receiver half is a stub that
//! acknowledges whatever the test server sent, as learnt from the intercept's records.
//!
//! Sequence numbers are the client's (see `stream`): the connection's ISN is `start - 1`, where
//! `start` is the first client byte it carries. Its peer's numbers (`irs`, `rcv_nxt`) come from
//! records.
//!
//! Invariants:
//! - `snd_una <= snd_nxt <= snd_max` and nothing at or beyond `snd_una + snd_wnd` is sent as
//!   new data (a zero-window probe carries no data);
//! - `rto_at` is set whenever something is outstanding (SYN, data, FIN) or a zero window
//!   blocks pending data; a connection in `Linger` has none and waits for `linger_until`;
//! - once `reset` (we sent RST) the connection only answers challenge ACKs with RST again;
//! - `dead` connections are unregistered and dropped by the session at the next sweep.

use crate::engine::stamp::Stamp;
use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::seq::SeqNum;
use common::wire::TcpFlags;

use super::chunk::ByteQueue;
use super::config::Params;
use super::pkt::RecordInfo;

mod tx;

/// Options bytes of timestamps on every segment once negotiated.
const TS_LEN: u32 = 12;
/// MSS assumed when the SYN-ACK has none (RFC 9293).
const DEFAULT_MSS: u32 = 536;
/// Times our RST is sent again (with backoff, while lingering) in case it was lost.
const RST_REPEATS: u8 = 4;
/// RSTs sent in answer to challenge ACKs before giving up on them.
const MAX_RST: u8 = 4;

/// `Conn::srtt` before the first RTT sample.
const NO_SRTT: u64 = u64::MAX;

/// A duration in nanoseconds (saturating below [`NO_SRTT`]: 584 years).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos())
        .unwrap_or(NO_SRTT - 1)
        .min(NO_SRTT - 1)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    SynSent,
    Established,
    /// Closed (gracefully, or reset by us): kept registered for a while to answer the test
    /// server's retransmitted FIN or challenge ACK.
    Linger,
}

/// What the session lets the connection send.
#[derive(Debug)]
pub(crate) struct TxCtx<'a> {
    /// Client bytes from `base` on.
    pub data: &'a ByteQueue,
    pub base: SeqNum,
    /// No byte at or beyond this may be sent (pacing, or the end of what was captured).
    pub limit: SeqNum,
    /// Our FIN may go at this sequence number.
    pub fin: Option<SeqNum>,
    /// The client's latest TSval, if it uses timestamps.
    pub tsval: Option<u32>,
    /// Where a segment's payload is gathered when it spans several captured chunks.
    pub scratch: Vec<u8>,
}

static NO_DATA: ByteQueue = ByteQueue::new();

impl TxCtx<'_> {
    pub(crate) fn nothing(tsval: Option<u32>) -> TxCtx<'static> {
        TxCtx {
            data: &NO_DATA,
            base: SeqNum(0),
            limit: SeqNum(0),
            fin: None,
            tsval,
            scratch: Vec::new(),
        }
    }
}

/// One segment emitted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sent {
    pub payload: usize,
    pub retransmit: bool,
    /// A super-segment (payload over one MSS, `Params::gso`): the MSS its pieces carry; 0 for a
    /// plain segment.
    pub gso_size: u16,
    /// A zero-window probe (the test server's window is shut and data waits).
    pub probe: bool,
}

/// What a timer expiry did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    Nothing,
    Retransmit,
    GaveUp,
}

/// The RSTs a connection owes and has sent (see [`Conn::rst`]).
#[derive(Debug, Default)]
struct Resets {
    due: Option<SeqNum>,
    count: u8,
    /// Our RST is sent again this many more times, with backoff, while lingering: a lost RST
    /// would leave the test server with a half-open connection, and nothing else tells.
    again: u8,
    last: SeqNum,
    /// A second RST at `snd_una`, for when the test server did not get our last bytes: its
    /// next expected byte is somewhere in `[snd_una, snd_max]`, and only an exact match resets
    /// it (RFC 5961) without a round trip.
    low: Option<SeqNum>,
    low_due: bool,
    /// A RST for a stale connection of the test server on our tuple.
    stale: Option<SeqNum>,
}

#[derive(Debug)]
pub(crate) struct Conn {
    pub tuple: FourTuple,
    pub state: State,
    pub iss: SeqNum,
    pub snd_una: SeqNum,
    pub snd_nxt: SeqNum,
    pub snd_max: SeqNum,
    snd_wnd: u32,
    /// The last send attempt had bytes to send and no room in the test server's window (or
    /// the recovery window) for them: a record that opens it releases bytes that waited
    /// ([`Conn::window_released`]).
    win_full: bool,
    wl1: SeqNum,
    wl2: SeqNum,
    peer_wscale: u8,
    we_scale: bool,
    mss: u32,
    irs: SeqNum,
    pub rcv_nxt: SeqNum,
    acked_rcv: SeqNum,
    ack_due: bool,
    /// A test server segment waits for its ACK until then (see `EngineConfig::ack_delay`).
    ack_at: Option<Stamp>,
    /// The delayed ACK ran out once: acknowledge at once from now on.
    quick_ack: bool,
    ts_offered: bool,
    ts_ok: bool,
    ts_recent: Option<u32>,
    /// Highest ACK number carried by a test server segment with data: it answered up to there.
    pub answered: Option<SeqNum>,
    fin_sent: Option<SeqNum>,
    pub fin_acked: bool,
    pub peer_fin: bool,
    /// The test server refused our SYN with RST.
    pub refused: bool,
    /// We reset the connection.
    pub reset: bool,
    /// The RSTs it owes (boxed: made the first time one is, which most connections never
    /// need; 8 bytes in every slot rather than 32).
    rst: Option<Box<Resets>>,
    /// Bare ACKs (no SYN) the test server answered our SYN with: its socket on this tuple is
    /// still in TIME_WAIT (the client reused a port). The first is reset and the SYN sent again
    /// at once; from the second on, `port_busy` asks the session to move to another port.
    pub tw_acks: u8,
    /// See `tw_acks`.
    pub port_busy: bool,
    syn_due: bool,
    probe_due: bool,
    /// FINs of the test server seen again while lingering.
    fin_repeats: u8,
    /// Our FIN first left after the test server's: it carried the ACK of theirs (a passive
    /// close), so once it is acknowledged nothing of the test server's can come that needs an
    /// answer of ours, and the connection ends without lingering.
    fin_acks_peer: bool,
    /// Duplicate ACKs in a row (same ACK number and window, nothing new).
    dupacks: u8,
    /// Three duplicate ACKs: resend the first unacknowledged segment now.
    fast_rexmit: bool,
    /// After a timeout, how far beyond `snd_una` the go-back-N resend may run (slow start),
    /// so that a receiver that kept the later bytes is not sent them all again at once.
    recovery_wnd: u32,
    /// The retransmission timeout and the RTT estimates (RFC 6298), in nanoseconds (8 bytes
    /// each rather than a `Duration`'s 16; `srtt` is [`NO_SRTT`] before the first sample).
    rto: u64,
    srtt: u64,
    rttvar: u64,
    pub retries: u32,
    pub rto_at: Option<Stamp>,
    rtt_probe: Option<(SeqNum, Stamp)>,
    pub linger_until: Option<Stamp>,
    /// No intercept has accepted its registration yet (`Engine::handle_registered`): send
    /// nothing.
    pub reg_pending: bool,
    /// Intercepts (bit `from % 64`) that refused its registration.
    pub refused_by: u64,
    /// Intercepts (bit `from % 64`) whose acceptance of its registration is in force on their
    /// current link (see `Engine::intercept_link`).
    pub accepted_by: u64,
    pub dead: bool,
    /// The handshake completed once.
    synced: bool,
    ident: u16,
}

impl Conn {
    /// Bytes of the test server received in order on this connection (0 before its SYN).
    pub(crate) fn received(&self) -> u32 {
        if self.rcv_nxt == self.irs {
            return 0;
        }
        self.rcv_nxt.diff(self.irs.add(1)).max(0) as u32
    }

    pub(crate) fn new(tuple: FourTuple, start: SeqNum, p: &Params) -> Conn {
        let iss = start.sub(1);
        let mss = u32::from(if tuple.server.is_ipv6() {
            p.mss_v6
        } else {
            p.mss_v4
        });
        Conn {
            tuple,
            state: State::SynSent,
            iss,
            snd_una: iss,
            snd_nxt: iss,
            snd_max: iss,
            snd_wnd: 0,
            win_full: false,
            wl1: SeqNum(0),
            wl2: SeqNum(0),
            peer_wscale: 0,
            we_scale: false,
            mss,
            irs: SeqNum(0),
            rcv_nxt: SeqNum(0),
            acked_rcv: SeqNum(0),
            ack_due: false,
            ack_at: None,
            quick_ack: false,
            ts_offered: false,
            ts_ok: false,
            ts_recent: None,
            answered: None,
            fin_sent: None,
            fin_acked: false,
            peer_fin: false,
            refused: false,
            reset: false,
            rst: None,
            tw_acks: 0,
            port_busy: false,
            syn_due: true,
            probe_due: false,
            fin_repeats: 0,
            fin_acks_peer: false,
            dupacks: 0,
            fast_rexmit: false,
            recovery_wnd: 0,
            rto: nanos(p.initial_rto),
            srtt: NO_SRTT,
            rttvar: 0,
            retries: 0,
            rto_at: None,
            rtt_probe: None,
            linger_until: None,
            reg_pending: true,
            refused_by: 0,
            accepted_by: 0,
            dead: false,
            synced: false,
            ident: (start.0 >> 16) as u16 ^ start.0 as u16,
        }
    }

    /// Client bytes the test server has acknowledged on this connection: below the return
    /// value. Before the handshake, `start - 1` (nothing).
    /// Whether nothing was ever sent on it (not even the SYN).
    /// Whether bytes waited for room in the test server's window at the last send attempt and
    /// there is room now (a record opened it); forgets the wait, so each opening counts once.
    pub(crate) fn window_released(&mut self) -> bool {
        let released = self.win_full && self.window_room() > 0;
        self.win_full &= !released;
        released
    }

    /// Bytes the window lets us send beyond `snd_nxt` now (0 when it is full or shut).
    fn window_room(&self) -> i32 {
        let mut wnd = self.snd_wnd;
        if self.snd_nxt.lt(self.snd_max) {
            wnd = wnd.min(self.recovery_wnd.max(self.mss));
        }
        self.snd_una.add(wnd).diff(self.snd_nxt)
    }

    pub(crate) fn sent_nothing(&self) -> bool {
        self.snd_max == self.iss
    }

    pub(crate) fn acked(&self) -> SeqNum {
        self.snd_una
    }

    /// Whether our FIN went out (the client's FIN is being carried).
    pub(crate) fn fin_sent(&self) -> bool {
        self.fin_sent.is_some()
    }

    /// Whether nothing of ours is outstanding on it: established, all we sent acknowledged,
    /// no FIN or RST of ours, in force at the intercepts (an idle session's connection).
    pub(crate) fn quiet(&self) -> bool {
        self.state == State::Established
            && self.snd_una == self.snd_max
            && self.fin_sent.is_none()
            && !self.reset
            && !self.reg_pending
            && !self.dead
    }

    /// Whether it is closed on our side: reset, never sent, or closed gracefully (lingering
    /// only to answer the test server's last segments).
    pub(crate) fn closed(&self) -> bool {
        self.dead || self.reset || self.state == State::Linger
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        [self.rto_at, self.linger_until, self.ack_at]
            .into_iter()
            .flatten()
            .min()
            .map(Stamp::at)
    }

    fn cur_rto(&self, p: &Params) -> Duration {
        let shift = self.retries.min(16);
        Duration::from_nanos(self.rto)
            .saturating_mul(1 << shift)
            .min(p.max_rto)
    }

    fn sample_rtt(&mut self, r: Duration, p: &Params) {
        let (mut srtt, mut rttvar) = (
            (self.srtt != NO_SRTT).then(|| Duration::from_nanos(self.srtt)),
            Duration::from_nanos(self.rttvar),
        );
        match srtt {
            None => {
                srtt = Some(r);
                rttvar = r / 2;
            }
            Some(s) => {
                let d = s.abs_diff(r);
                rttvar = (rttvar * 3 + d) / 4;
                srtt = Some((s * 7 + r) / 8);
            }
        }
        let s = srtt.unwrap_or(r);
        let rto = (s + (rttvar * 4).max(Duration::from_millis(1))).clamp(p.min_rto, p.max_rto);
        (self.srtt, self.rttvar, self.rto) =
            (srtt.map_or(NO_SRTT, nanos), nanos(rttvar), nanos(rto));
    }

    /// Stop: send RST (unless nothing was ever sent) and linger for challenge ACKs. Returns
    /// whether the connection can be dropped at once.
    pub(crate) fn abandon(&mut self, now: Instant, p: &Params) -> bool {
        if self.dead || self.reset {
            return self.dead;
        }
        if self.state == State::Linger {
            return false; // closed gracefully already
        }
        if self.snd_max == self.iss {
            self.dead = true; // the SYN never left
            return true;
        }
        self.reset = true;
        let (synced, port_busy, snd_una, snd_max) =
            (self.synced, self.port_busy, self.snd_una, self.snd_max);
        let r = self.rst_mut();
        if synced || !port_busy {
            r.due = Some(snd_max);
        }
        if synced && snd_una != snd_max {
            r.low = Some(snd_una);
            r.low_due = true;
        }
        r.count = 1;
        r.again = RST_REPEATS;
        self.enter_linger(now, p);
        self.rto_at = Some(Stamp::of(now + self.cur_rto(p)));
        false
    }

    /// The copier stops: a RST is due now whatever the state (the one of [`Conn::abandon`], the
    /// last one sent again, or one after a graceful close in case the test server still holds
    /// the connection), unless the connection never sent anything. Poll it out, then drop the
    /// connection.
    pub(crate) fn shutdown(&mut self, now: Instant, p: &Params) {
        if self.dead || self.reg_pending || self.snd_max == self.iss {
            self.dead = true;
            return;
        }
        if !self.reset {
            if self.state == State::Linger {
                // Closed gracefully: its last ACK of ours may be lost.
                self.reset = true;
                let snd_nxt = self.snd_nxt;
                self.rst_mut().due = Some(snd_nxt);
            } else {
                self.abandon(now, p);
            }
        } else {
            let r = self.rst_mut();
            if r.due.is_none() {
                r.due = Some(r.last);
                r.low_due = r.low.is_some();
            }
        }
    }

    /// The RSTs it owes, made at the first.
    fn rst_mut(&mut self) -> &mut Resets {
        self.rst.get_or_insert_with(Box::default)
    }

    fn enter_linger(&mut self, now: Instant, p: &Params) {
        self.state = State::Linger;
        self.rto_at = None;
        self.probe_due = false;
        self.syn_due = false;
        self.linger_until = Some(Stamp::of(now + p.linger));
    }

    /// A segment of the test server on this connection.
    pub(crate) fn on_record(&mut self, now: Instant, r: &RecordInfo, p: &Params) {
        let h = &r.hdr;
        if self.dead {
            return;
        }
        if let Some((v, _)) = h.opts.ts {
            if self.ts_recent.is_none_or(|old| SeqNum(v).ge(SeqNum(old))) {
                self.ts_recent = Some(v);
            }
        }
        if self.state == State::SynSent {
            self.on_record_syn_sent(now, r, p);
            return;
        }
        if h.has(TcpFlags::RST) {
            if !self.reset {
                self.dead = true;
            }
            return;
        }
        if self.reset {
            // A challenge ACK (RFC 5961): its ACK number is exactly what the RST needs.
            let r = self.rst_mut();
            if h.has(TcpFlags::ACK) && r.count < MAX_RST {
                r.due = Some(h.ack);
                r.low = None; // the exact number is known now
                r.count += 1;
            }
            return;
        }
        if h.has(TcpFlags::SYN) {
            // Our handshake ACK was lost: the SYN-ACK came again.
            self.ack_due = true;
            return;
        }
        let fin = h.has(TcpFlags::FIN);
        if fin && self.state == State::Linger {
            // Its FIN again: our last ACK was lost. Its next retransmission comes after twice
            // the gap: stay long enough to ack that one too.
            self.fin_repeats = self.fin_repeats.saturating_add(1);
            self.linger_until = Some(Stamp::of(now + p.linger * (1 << self.fin_repeats.min(4))));
        }
        if r.data_len > 0 || fin {
            let end = h.seq.add(r.seq_len());
            let gap = h.seq.gt(self.rcv_nxt);
            let advanced = end.gt(self.rcv_nxt) && end.diff(self.rcv_nxt) < (1 << 30);
            if advanced {
                self.rcv_nxt = end;
            }
            // One segment at most (the intercept may hand over a super-segment of several).
            let one = r.data_len <= self.mss + TS_LEN;
            self.ack_or_defer(now, p, advanced && one && !gap && !fin);
            if h.has(TcpFlags::ACK) && (r.data_len > 0 || (fin && gap)) {
                // A FIN after bytes whose records we have not seen: they answered too.
                self.answered = Some(self.answered.map_or(h.ack, |a| a.max(h.ack)));
            }
            if fin {
                self.peer_fin = true;
            }
        }
        if h.has(TcpFlags::ACK) {
            self.on_ack(now, r, p);
        }
        if self.state == State::Established && self.peer_fin && self.fin_acked {
            self.enter_linger(now, p);
            if self.fin_acks_peer {
                // A passive close (the test server closed first, and our FIN acknowledged its
                // FIN): the test server keeps the TIME_WAIT, and having had its FIN
                // acknowledged it sends nothing more that needs an answer, as TCP's LAST_ACK
                // goes to CLOSED on this ACK. So no `--close-linger` wait: the connection is
                // done, and its tuple is unregistered and free now.
                self.linger_until = None;
                self.dead = true;
            }
        }
    }

    fn on_record_syn_sent(&mut self, now: Instant, r: &RecordInfo, p: &Params) {
        let h = &r.hdr;
        let acks_syn = h.has(TcpFlags::ACK) && h.ack == self.iss.add(1);
        if h.has(TcpFlags::RST) {
            if acks_syn {
                self.refused = true;
                self.dead = true;
            }
            return;
        }
        if h.has(TcpFlags::ACK) && !h.has(TcpFlags::SYN) {
            if !acks_syn {
                // A challenge ACK of a TIME_WAIT socket on our tuple (RFC 793 reset generation:
                // seq = its ACK number; Linux with tcp_rfc1337=0 then drops the TIME_WAIT
                // socket), then our SYN again at once rather than after the RTO.
                self.rst_mut().stale = Some(h.ack);
                self.tw_acks = self.tw_acks.saturating_add(1);
                if self.tw_acks >= 2 {
                    self.port_busy = true;
                } else {
                    self.syn_due = true;
                }
            }
            return;
        }
        if !(h.has(TcpFlags::SYN) && h.has(TcpFlags::ACK)) {
            return;
        }
        if !acks_syn {
            // The test server holds an older connection on this tuple: reset it, as a stack would.
            self.rst_mut().stale = Some(h.ack);
            return;
        }
        self.irs = h.seq;
        self.rcv_nxt = h.seq.add(1);
        self.acked_rcv = h.seq;
        self.ack_due = true;
        self.synced = true;
        self.we_scale = h.opts.wscale.is_some();
        self.peer_wscale = h.opts.wscale.unwrap_or(0).min(14);
        self.snd_wnd = u32::from(h.window);
        self.wl1 = h.seq;
        self.wl2 = h.ack;
        self.ts_ok = self.ts_offered && h.opts.ts.is_some();
        let peer_mss = h.opts.mss.map_or(DEFAULT_MSS, u32::from);
        let opt = if self.ts_ok { TS_LEN } else { 0 };
        self.mss = (self.mss.min(peer_mss).saturating_sub(opt)).max(8);
        self.snd_una = self.iss.add(1);
        if self.snd_nxt.lt(self.snd_una) {
            self.snd_nxt = self.snd_una;
        }
        if let Some((_, t)) = self.rtt_probe.take() {
            self.sample_rtt(now.saturating_duration_since(t.at()), p);
        }
        self.retries = 0;
        self.rto_at = None;
        self.syn_due = false;
        self.state = State::Established;
    }

    fn on_ack(&mut self, now: Instant, r: &RecordInfo, p: &Params) {
        let h = &r.hdr;
        if h.ack.gt(self.snd_una) && h.ack.le(self.snd_max) {
            if self.snd_nxt.lt(self.snd_max) {
                // Recovering from a timeout: slow start.
                self.recovery_wnd = self
                    .recovery_wnd
                    .saturating_add(h.ack.diff(self.snd_una) as u32);
            }
            self.snd_una = h.ack;
            self.retries = 0;
            self.dupacks = 0;
            if self.snd_nxt.lt(self.snd_una) {
                self.snd_nxt = self.snd_una;
            }
            if let Some((end, t)) = self.rtt_probe {
                if h.ack.ge(end) {
                    self.rtt_probe = None;
                    self.sample_rtt(now.saturating_duration_since(t.at()), p);
                }
            }
            if self.fin_sent.is_some_and(|f| h.ack == f.add(1)) {
                self.fin_acked = true;
            }
            self.rto_at = (self.snd_una != self.snd_max).then(|| Stamp::of(now + self.cur_rto(p)));
        } else if h.ack == self.snd_una
            && r.data_len == 0
            && !h.has(TcpFlags::FIN)
            && self.snd_max.gt(self.snd_una)
            && u32::from(h.window) << self.peer_wscale == self.snd_wnd
        {
            self.dupacks = self.dupacks.saturating_add(1);
            if self.dupacks == 3 {
                self.fast_rexmit = true;
                self.rtt_probe = None;
            }
        }
        if h.seq.gt(self.wl1) || (h.seq == self.wl1 && h.ack.ge(self.wl2)) {
            self.snd_wnd = u32::from(h.window) << self.peer_wscale;
            self.wl1 = h.seq;
            self.wl2 = h.ack;
        }
        if self.snd_una == self.snd_max && self.snd_wnd > 0 {
            // Nothing outstanding and the window open: a persist timer has nothing to do.
            if self.probe_due || self.retries > 0 {
                self.retries = 0;
                self.rto_at = None;
            }
            self.probe_due = false;
        }
    }

    /// New bytes of the test server: acknowledge them at once, or let the ACK wait up to
    /// `ack_delay` for a segment of ours to carry it. It waits only for the first in-order
    /// segment since our last ACK on an established connection whose FIN we have not sent and
    /// whose delay never ran out (`deferrable`: in order, new, no FIN); anything else is
    /// acknowledged at once (see `EngineConfig::ack_delay`).
    fn ack_or_defer(&mut self, now: Instant, p: &Params, deferrable: bool) {
        // Every path that moves `rcv_nxt` sets `ack_due` or `ack_at`: neither set means this
        // segment is all that is unacknowledged.
        let first = self.ack_at.is_none() && !self.ack_due;
        if deferrable
            && first
            && !self.quick_ack
            && !p.ack_delay.is_zero()
            && self.state == State::Established
            && self.fin_sent.is_none()
        {
            self.ack_at = Some(Stamp::of(now + p.ack_delay));
        } else {
            self.ack_due = true;
        }
    }

    /// Arm the persist timer when a zero window blocks data that is ready.
    pub(crate) fn arm_persist(&mut self, now: Instant, p: &Params, pending: bool) {
        if self.state == State::Established
            && pending
            && self.snd_wnd == 0
            && self.snd_una == self.snd_max
            && self.rto_at.is_none()
        {
            self.rto_at = Some(Stamp::of(now + self.cur_rto(p)));
        }
    }

    /// The timer fired (the caller checked the deadline). `pending`: data waits to be sent.
    pub(crate) fn on_timeout(&mut self, now: Instant, p: &Params, pending: bool) -> Expiry {
        if self.ack_at.is_some_and(|t| t.at() <= now) {
            // Nothing of ours came to carry it: acknowledge now, and at once from now on (this
            // connection's client does not answer quickly, or the server waits for the ACK).
            self.ack_at = None;
            self.ack_due = true;
            self.quick_ack = true;
        }
        if self.state == State::Linger {
            if self.linger_until.is_some_and(|t| t.at() <= now) {
                self.dead = true;
            } else if self.rto_at.is_some_and(|t| t.at() <= now) {
                self.rto_at = None;
                let again = match self.rst.as_deref_mut() {
                    Some(r) if self.reset && r.again > 0 => {
                        r.again -= 1;
                        r.due = Some(r.last);
                        r.low_due = r.low.is_some();
                        Some(r.again)
                    }
                    _ => None,
                };
                if let Some(again) = again {
                    let k = u32::from(RST_REPEATS - again);
                    self.rto_at = Some(Stamp::of(
                        now + self.cur_rto(p).saturating_mul(1 << k).min(p.max_rto),
                    ));
                }
            }
            return Expiry::Nothing;
        }
        if self.rto_at.is_none_or(|t| t.at() > now) {
            return Expiry::Nothing;
        }
        self.rto_at = None;
        let outstanding = self.state == State::SynSent || self.snd_max.gt(self.snd_una);
        if !(outstanding || (pending && self.snd_wnd == 0)) {
            return Expiry::Nothing;
        }
        self.retries += 1;
        if self.retries > p.max_retries {
            return Expiry::GaveUp;
        }
        self.rtt_probe = None;
        if self.state == State::SynSent {
            self.syn_due = true;
        } else if outstanding {
            self.snd_nxt = self.snd_una; // go back N, slowly
            self.recovery_wnd = 2 * self.mss;
            self.dupacks = 0;
        } else {
            self.probe_due = true;
        }
        self.rto_at = Some(Stamp::of(now + self.cur_rto(p)));
        Expiry::Retransmit
    }
}
