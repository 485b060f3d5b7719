//! The client's byte stream of one session: reassembly of captured segments, cut into request
//! units.
//!
//! Two byte spaces. Reassembly (`cnext`, held segments, capture holes) is in the client's
//! sequence numbers; everything after it (`buf`, `base`, `next`, `cur_start`, `bounds`, `fin`)
//! is in the test side's, which every test connection and its acknowledgements use (each
//! connection's ISN is its first byte - 1). Without request rules the two are one: the engine
//! sends byte `s` of the client as byte `s`. With `--rules` each copy's [`Editor`] turns the
//! in-order client bytes into the test side's (requests dropped, heads edited), so the offset
//! between the spaces changes at request boundaries only; a boundary (an ACK that grew) at
//! client byte `c` is placed at the test side's `next` when `c` arrives, which is where the
//! request starting at `c` will be written (or, dropped, where the next one will). A boundary
//! found at a position a boundary is already at (the requests between were dropped) keeps the
//! first one's ACK as the end of the unit before ([`Bound::end`]) and takes the later one as the
//! start of the next unit's answer, so the online answers of dropped requests are skipped.
//! After a capture hole is given up the client space resumes at the resume point and the test
//! side's goes on past everything it numbered (on a new connection).
//!
//! With `--copies N` every copy of a session has its own `Stream` (its own units, pacing and
//! trimming), fed the same captured segments; the bytes themselves are stored once and shared
//! (`chunk`), so copies cost memory only for what one of them still needs.
//!
//! Invariants:
//! - `buf` holds exactly the test side's bytes `[base, next)`; `base <= cur_start <= next`
//!   unless the replay window was given up (`base > cur_start`, see [`Stream::trim`]).
//! - `held` holds segments starting after `cnext`, sorted by distance from `cnext`, never more
//!   than the per-session out-of-order cap in total.
//! - without an editor, `cnext == next` until a capture hole is given up, and after it too.
//! - `bounds` holds the starts of request units after the current one, strictly increasing,
//!   each `> cur_start` (or `== cur_start` once, for a server-speaks-first greeting gate).
//! - `fin`, once set, is `next`: nothing is accepted after the client's FIN.
//!
//! Capture holes: a hole the client never fills (the capture lost bytes the online server got)
//! is given up by [`Stream::skip_gap`]: the damaged unit is dropped and the stream jumps to the
//! next unit after the hole. Sequence numbers then skip, so the session carries the rest on a
//! new test connection (see `session`).
//!
//! Sizes of the online answers: each unit starts with the client's ACK number on its first
//! byte (the online server's sequence space), so the online answer to a unit is the ACK at the
//! start of the next unit minus the ACK at its own start (`cur_ack`, then each [`Bound::ack`]).
//! The first unit's base is the client's handshake ACK (a mid-stream session's: the ACK it
//! synchronised on, raised to the first request's own); a unit closed by the client's FIN, or
//! still open, is measured up to the highest ACK the client sent (`max_ack`).

use crate::engine::stamp::Stamp;
use std::collections::VecDeque;
use std::time::Instant;

use common::h2::Preface;
use common::seq::SeqNum;

use super::chunk::{ByteQueue, Chunk, Payload};
use super::edit::Editor;

mod proto;
use proto::SNIFF_UNITS;
pub(crate) use proto::{is_ws_upgrade, H2};

/// Beyond this distance ahead of `next`, a segment is not held but dropped.
const MAX_AHEAD: u32 = 1 << 24;

/// A segment waiting for the bytes before it.
#[derive(Debug)]
struct Held {
    seq: SeqNum,
    ack: Option<SeqNum>,
    data: Option<Chunk>,
    fin: bool,
}

/// The segments a stream holds for the bytes before them, and their bytes (boxed in the
/// stream: most never hold one).
#[derive(Debug, Default)]
struct Holding {
    segs: Vec<Held>,
    bytes: usize,
}

/// The start of a request unit, with the client's ACK number on its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bound {
    /// Client sequence number of the unit's first byte.
    pub at: SeqNum,
    /// The client's ACK number there (the online answers it had received), if it sent one:
    /// where the online answer to this unit starts.
    pub ack: Option<SeqNum>,
    /// Where the online answer to the unit before ends: `ack`, unless requests between were
    /// dropped (then the ACK where the first of them started).
    pub end: Option<SeqNum>,
    /// When its first byte was captured (the stream's `now` then), for the replay lag.
    pub t: Option<Stamp>,
}

/// The starts of the request units after the current one, first first (boxed: a session
/// whose client waits for each answer before its next request never has one, and pays a
/// pointer). Reads go through `Deref`; the room goes once the last one is released.
// The box is the point: 8 bytes in every slot rather than the collection's header.
#[allow(clippy::box_collection)]
#[derive(Debug, Default)]
pub(crate) struct Bounds(Option<Box<VecDeque<Bound>>>);

static NO_BOUNDS: VecDeque<Bound> = VecDeque::new();

impl Bounds {
    fn room(&mut self) -> &mut VecDeque<Bound> {
        self.0.get_or_insert_with(Box::default)
    }

    pub(crate) fn push_back(&mut self, b: Bound) {
        self.room().push_back(b);
    }

    pub(crate) fn push_front(&mut self, b: Bound) {
        self.room().push_front(b);
    }

    pub(crate) fn pop_front(&mut self) -> Option<Bound> {
        self.0.as_mut().and_then(|q| q.pop_front())
    }

    pub(crate) fn back_mut(&mut self) -> Option<&mut Bound> {
        self.0.as_mut().and_then(|q| q.back_mut())
    }

    pub(crate) fn clear(&mut self) {
        if let Some(q) = self.0.as_mut() {
            q.clear();
        }
    }
}

impl std::ops::Deref for Bounds {
    type Target = VecDeque<Bound>;
    fn deref(&self) -> &VecDeque<Bound> {
        self.0.as_deref().unwrap_or(&NO_BOUNDS)
    }
}

/// What [`Stream::push`] did with a segment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pushed {
    /// In-order bytes appended (held segments that became in order included).
    pub appended: usize,
    /// Nothing new: a client retransmission.
    pub duplicate: bool,
    /// The segment started before `next`; that much was cut off.
    pub trimmed: usize,
    /// Held for later (out of order).
    pub held: bool,
    /// Dropped: too far ahead or over the out-of-order cap.
    pub overflow: bool,
}

#[derive(Debug)]
pub(crate) struct Stream {
    buf: ByteQueue,
    /// Test-side number of `buf[0]`.
    pub base: SeqNum,
    /// Test-side number of the next byte written (the end of `buf`).
    pub next: SeqNum,
    /// Next in-order client byte expected (client sequence number).
    cnext: SeqNum,
    /// The request editor (`--rules`), if any (boxed: a session without rules pays a pointer).
    edit: Option<Box<Editor>>,
    /// Segments held for the bytes before them (`None` when there is none).
    held: Option<Box<Holding>>,
    /// Position of the client's FIN, once it is in order.
    pub fin: Option<SeqNum>,
    /// The client's ACK number on its latest in-order data (the online server's sequence space).
    last_ack: Option<SeqNum>,
    /// The highest ACK number the client sent (data, pure ACKs, FIN).
    max_ack: Option<SeqNum>,
    /// The client's first ACK number before any data (the handshake's: the online server's
    /// first byte), for a stream that began with its handshake.
    first_ack: Option<SeqNum>,
    /// Starts of the request units after the current one.
    pub bounds: Bounds,
    /// Start of the first request unit not yet answered.
    pub cur_start: SeqNum,
    /// The client's ACK number at `cur_start`: where the online answer to that unit began.
    cur_ack: Option<SeqNum>,
    seen_data: bool,
    /// Whether data acking more than the handshake may set a greeting gate (not mid-stream:
    /// there the first ACK seen is not the handshake's).
    gate_ok: bool,
    /// A greeting gate was set (the server spoke first).
    pub server_first: bool,
    /// When the current unit's first byte was captured.
    pub cur_t: Option<Stamp>,
    /// Matching the HTTP/2 preface at the start of a unit (see [`H2`]).
    sniff: Preface,
    /// Unit starts at which the preface is still looked for.
    sniffs_left: u8,
    /// The HTTP/2 state, once the preface was seen (boxed: most sessions are not HTTP/2).
    h2: Option<Box<H2>>,
    /// Where a WebSocket session begins: the end of the segment that carried a whole
    /// `GET` request with `Upgrade: websocket` (see [`Stream::in_ws`]).
    ws_from: Option<SeqNum>,
}

impl Stream {
    /// A stream whose first byte is `isn + 1`.
    pub(crate) fn new(isn: SeqNum) -> Stream {
        let start = isn.add(1);
        Stream {
            buf: ByteQueue::default(),
            base: start,
            next: start,
            cnext: start,
            edit: None,
            held: None,
            fin: None,
            last_ack: None,
            max_ack: None,
            first_ack: None,
            bounds: Bounds::default(),
            cur_start: start,
            cur_ack: None,
            seen_data: false,
            gate_ok: true,
            server_first: false,
            cur_t: None,
            sniff: Preface::Start,
            sniffs_left: SNIFF_UNITS,
            h2: None,
            ws_from: None,
        }
    }

    /// A stream of a session caught mid-stream, synchronised on a client packet acking `ack`:
    /// the first unit's online answer is counted from there.
    pub(crate) fn midstream(isn: SeqNum, ack: SeqNum) -> Stream {
        Stream {
            last_ack: Some(ack),
            max_ack: Some(ack),
            cur_ack: Some(ack),
            gate_ok: false,
            sniffs_left: 0,
            sniff: Preface::No,
            ..Stream::new(isn)
        }
    }

    /// The same stream with a request editor.
    pub(crate) fn with_editor(mut self, e: Option<Editor>) -> Stream {
        self.edit = e.map(Box::new);
        self
    }

    /// The editor, if any (its counts, whether it failed).
    pub(crate) fn editor(&mut self) -> Option<&mut Editor> {
        self.edit.as_deref_mut()
    }

    /// Bytes this stream holds (in order and out of order).
    pub(crate) fn mem(&self) -> usize {
        self.buf.len() + self.held_bytes() + self.edit.as_ref().map_or(0, |e| e.held())
    }

    /// Bytes of the segments held.
    fn held_bytes(&self) -> usize {
        self.held.as_ref().map_or(0, |h| h.bytes)
    }

    /// The segments held, by distance from `cnext`.
    fn held_segs(&self) -> &[Held] {
        self.held.as_ref().map_or(&[], |h| &h.segs)
    }

    /// The client sequence number where reassembly waits (a hole when segments are held).
    pub(crate) fn hole_at(&self) -> SeqNum {
        self.cnext
    }

    /// The in-order bytes `[base, next)`.
    pub(crate) fn data(&self) -> &ByteQueue {
        &self.buf
    }

    /// The client's next sequence number: where its next captured byte goes.
    pub(crate) fn client_next(&self) -> SeqNum {
        self.cnext
    }

    /// Free every buffer (the session ended).
    pub(crate) fn free(&mut self) {
        self.buf.free();
        self.held = None;
        self.base = self.next;
        if let Some(e) = self.edit.as_mut() {
            e.reset();
        }
    }

    /// A pure ACK of the client. The first one before any data is the handshake ACK: its ACK
    /// number is the online server's ISN + 1, so later data acking more means the server spoke
    /// first. Every one tells how much of the online answers the client had received.
    pub(crate) fn note_pure_ack(&mut self, ack: SeqNum) {
        self.note_ack(ack);
        if !self.seen_data && self.last_ack.is_none() {
            self.last_ack = Some(ack);
            self.cur_ack = Some(ack);
            self.first_ack = Some(ack);
        }
    }

    fn note_ack(&mut self, ack: SeqNum) {
        if self.max_ack.is_none_or(|m| ack.gt(m)) {
            self.max_ack = Some(ack);
        }
    }

    /// Add a client segment. `ack` is its ACK number when the ACK flag is set. The bytes kept
    /// are shared with the other copies of the session that keep them (see `chunk`).
    pub(crate) fn push(
        &mut self,
        seq: SeqNum,
        ack: Option<SeqNum>,
        payload: &mut Payload<'_>,
        fin: bool,
        max_held: usize,
        now: Instant,
    ) -> Pushed {
        let mut r = Pushed::default();
        if self.fin.is_some() {
            r.duplicate = true;
            return r;
        }
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let end = seq.add(len);
        if end.lt(self.cnext) || (end == self.cnext && !fin) {
            r.duplicate = true;
            return r;
        }
        if seq.gt(self.cnext) {
            let ahead = seq.diff(self.cnext) as u32;
            if ahead > MAX_AHEAD || self.held_bytes() + payload.len() > max_held {
                r.overflow = true;
                return r;
            }
            let cnext = self.cnext;
            let hold = self.held.get_or_insert_with(Box::default);
            let pos = hold
                .segs
                .partition_point(|h| h.seq.diff(cnext) as u32 <= ahead);
            hold.segs.insert(
                pos,
                Held {
                    seq,
                    ack,
                    data: payload.keep(0),
                    fin,
                },
            );
            hold.bytes += payload.len();
            r.held = true;
            return r;
        }
        let skip = self.cnext.diff(seq) as usize;
        r.trimmed = skip;
        r.appended += self.append(ack, payload.keep(skip), fin, now);
        r.appended += self.drain_held(now);
        r
    }

    /// Append the held segments that became in order. Returns the bytes appended.
    fn drain_held(&mut self, now: Instant) -> usize {
        let mut appended = 0;
        while self.fin.is_none() {
            let Some(hold) = self.held.as_mut() else {
                break;
            };
            let Some(h) = hold.segs.first() else { break };
            if h.seq.gt(self.cnext) {
                break;
            }
            let h = hold.segs.remove(0);
            let len = h.data.as_ref().map_or(0, Chunk::len);
            hold.bytes -= len;
            let end = h.seq.add(len as u32);
            if end.lt(self.cnext) || (end == self.cnext && !h.fin) {
                continue;
            }
            let skip = self.cnext.diff(h.seq) as usize;
            appended += self.append(h.ack, h.data.and_then(|d| d.tail(skip)), h.fin, now);
        }
        if self.fin.is_some() || self.held.as_ref().is_some_and(|h| h.segs.is_empty()) {
            // Nothing is accepted after the FIN; or a hole filled: its segments' room goes back.
            self.held = None;
        }
        appended
    }

    /// Whether segments wait for bytes before them (a hole at `next`).
    pub(crate) fn has_held(&self) -> bool {
        !self.held_segs().is_empty()
    }

    /// The client's ACK number on its latest in-order data, once it sent data: a later data
    /// segment that acks more starts a new request unit.
    pub(crate) fn last_data_ack(&self) -> Option<SeqNum> {
        self.last_ack.filter(|_| self.seen_data)
    }

    /// Where the stream can resume past the hole at `next`: the first held segment that
    /// directly follows another held segment (no hole between them) and acks more than it and
    /// than the client's latest in-order data. The online server answered in between, so it
    /// had the bytes of the hole (the capture lost them and the client will never send them
    /// again), and a request unit starts exactly there. (The first held segment itself is
    /// never taken: acking more than the bytes before the hole, it may still be the tail of a
    /// unit whose head the hole swallowed.)
    pub(crate) fn gap_resume(&self) -> Option<SeqNum> {
        let last = self.last_ack?;
        let mut prev: Option<(SeqNum, Option<SeqNum>)> = None; // (end, ack) of the run so far
        for h in self.held_segs() {
            if h.fin && h.data.is_none() {
                return Some(h.seq); // the client's FIN: nothing partial can follow
            }
            let end = h.seq.add(h.data.as_ref().map_or(0, Chunk::len) as u32);
            match prev {
                Some((pend, pack)) if h.seq == pend => {
                    let more = |a: SeqNum| pack.is_some_and(|p| a.gt(p)) && a.gt(last);
                    if h.ack.is_some_and(more) {
                        return Some(h.seq);
                    }
                    prev = Some((end, h.ack.or(pack)));
                }
                Some((pend, pack)) if h.seq.lt(pend) => {
                    // Overlap (a retransmission): the run goes on.
                    prev = Some((if end.gt(pend) { end } else { pend }, pack));
                }
                _ => prev = Some((end, h.ack)),
            }
        }
        None
    }

    /// Give up everything from the hole on (the client reset its connection: no later request
    /// will come to resume at): the bytes before the hole count as carried, the held ones are
    /// dropped.
    pub(crate) fn skip_gap_to_end(&mut self) {
        self.held = None;
        self.bounds.clear();
        self.buf.consume(self.buf.len());
        self.base = self.next;
        self.cur_start = self.next;
        if let Some(e) = self.edit.as_mut() {
            e.reset();
        }
    }

    /// Whether the hole at `next` is inside a unit: the first segment after it carries the
    /// same ACK number as the bytes before it.
    pub(crate) fn gap_mid_unit(&self) -> bool {
        match (self.held_segs().first(), self.last_ack) {
            (Some(h), Some(l)) => h.ack.is_none_or(|a| !a.gt(l)),
            _ => false,
        }
    }

    /// Give up the unit the hole at `next` damaged: only when it is the first unanswered one
    /// (no boundary after `cur_start`) and [`Stream::gap_resume`] found where the next unit
    /// starts. Drops the unit's bytes (in order and held) and restarts the stream there, as a
    /// mid-stream session would: `cnext ==` the resume point, `cur_start == base == next ==`
    /// the larger of it and the old `next` (the test side's numbers keep growing), then
    /// appends what was held after it. Returns whether it did.
    pub(crate) fn skip_gap(&mut self, now: Instant) -> bool {
        if !self.bounds.is_empty() || self.fin.is_some() {
            return false;
        }
        let Some(at) = self.gap_resume() else {
            return false;
        };
        if let Some(hold) = self.held.as_mut() {
            let i = hold.segs.iter().position(|h| h.seq == at).unwrap_or(0);
            for h in hold.segs.drain(..i) {
                hold.bytes -= h.data.as_ref().map_or(0, Chunk::len);
            }
        }
        let ack = self.held_segs().first().and_then(|h| h.ack);
        self.buf.consume(self.buf.len());
        // The test side goes on a new connection: any number does, and one past everything
        // numbered so far keeps that space growing (without an editor it is `at`).
        let t = self.next.max(at);
        self.base = t;
        self.next = t;
        self.cnext = at;
        self.cur_start = t;
        if let Some(e) = self.edit.as_mut() {
            e.reset();
        }
        self.cur_ack = ack;
        self.last_ack = ack;
        self.seen_data = true;
        self.gate_ok = false;
        self.drain_held(now);
        true
    }

    fn append(
        &mut self,
        ack: Option<SeqNum>,
        data: Option<Chunk>,
        fin: bool,
        now: Instant,
    ) -> usize {
        if let Some(a) = ack {
            self.note_ack(a);
        }
        let n = data.as_ref().map_or(0, Chunk::len);
        if let Some(data) = data {
            if let Some(a) = ack {
                match self.last_ack {
                    Some(last) if a.gt(last) => {
                        // Inside a frame of what the test side gets (the editor's output on
                        // HTTP/2 with rules, else the client's own frames).
                        let inside = match self.edit.as_ref().and_then(|e| e.h2_at_frame_start()) {
                            Some(at_start) => !at_start,
                            None => self.h2.as_ref().is_some_and(|h| !h.framer.at_start()),
                        };
                        if let Some(h) = self.h2.as_mut().filter(|_| inside) {
                            // Inside a frame: the unit starts at the next frame.
                            h.pending = Some((a, Stamp::of(now)));
                        } else if self.seen_data || self.gate_ok {
                            if let Some(e) = self.edit.as_mut() {
                                let n = e.unit_start(&mut self.buf);
                                self.advance(n, now);
                            }
                            self.push_bound(self.next, Some(a), now);
                            self.sniff_unit();
                        } else {
                            // Mid-stream: the client was still acking the answer before this
                            // request; this request's answer starts where it acks now.
                            self.cur_ack = Some(a);
                        }
                        self.last_ack = Some(a);
                    }
                    Some(_) => {}
                    None => {
                        self.last_ack = Some(a);
                        self.cur_ack.get_or_insert(a);
                        if !self.seen_data {
                            self.first_ack.get_or_insert(a);
                        }
                    }
                }
            }
            if !self.seen_data && self.sniffs_left > 0 {
                self.sniff = Preface::Start; // the stream's first byte starts a unit
            }
            let at = self.next;
            let ws = self.ws_from.is_none() && self.h2.is_none() && is_ws_upgrade(data.as_slice());
            self.read_frames(data.as_slice(), at);
            let written = match self.edit.as_mut() {
                None => {
                    self.buf.push(data);
                    n
                }
                Some(e) => e.feed(data, &mut self.buf),
            };
            self.advance(written, now);
            self.h2_edited_bound();
            if ws {
                self.ws_from = Some(self.next);
            }
            self.cnext = self.cnext.add(n as u32);
            self.seen_data = true;
        }
        if fin {
            if let Some(e) = self.edit.as_mut() {
                let n = e.flush(&mut self.buf);
                self.advance(n, now);
            }
            self.fin = Some(self.next);
            // A FIN before any data waits only for a greeting the client got online.
            let greeted = self.gate_ok && self.last_ack.zip(ack).is_some_and(|(l, a)| a.gt(l));
            if self.h2.is_some()
                && self.seen_data
                && self.bounds.is_empty()
                && self.next == self.cur_start
            {
                // HTTP/2: every stream was sent and released already, but the test server may
                // still be answering them (a gRPC server cancels the calls in progress when the
                // connection closes): the FIN waits as the last unit's would (`Session::h2_done`).
                let ack = ack.or(self.max_ack);
                self.bounds.push_back(Bound {
                    at: self.next,
                    ack,
                    end: ack,
                    t: Some(Stamp::of(now)),
                });
            } else if self.seen_data || greeted {
                self.push_bound(self.next, ack.or(self.max_ack), now);
            }
        }
        n
    }

    /// The client's ACK number at the start of the first unanswered unit.
    pub(crate) fn cur_ack(&self) -> Option<SeqNum> {
        self.cur_ack
    }

    /// `n` bytes were written to `buf`.
    fn advance(&mut self, n: usize, now: Instant) {
        if self.next == self.cur_start && n > 0 {
            self.cur_t = Some(Stamp::of(now));
        }
        self.next = self.next.add(n as u32);
    }

    fn push_bound(&mut self, at: SeqNum, ack: Option<SeqNum>, now: Instant) {
        if let Some(x) = self.bounds.back_mut().filter(|x| at.le(x.at)) {
            if at == x.at && ack.is_some() && self.edit.is_some() {
                // The requests since `x` were all dropped: the next unit's answer starts here.
                x.ack = ack;
            }
            return;
        }
        let t = Some(Stamp::of(now));
        if at.gt(self.cur_start) {
            self.bounds.push_back(Bound {
                at,
                ack,
                end: ack,
                t,
            });
        } else if at == self.cur_start {
            if self.seen_data {
                // Everything before was answered already: a new unit starts here.
                if ack.is_some() {
                    self.cur_ack = ack;
                }
            } else {
                // The client acked server bytes before sending anything: a greeting.
                self.bounds.push_back(Bound {
                    at,
                    ack,
                    end: ack,
                    t,
                });
                self.server_first = true;
            }
        }
    }

    /// Where a greeting's answer counts when the test server speaks before the client has sent
    /// anything: the start, while no client byte was captured (the greeting's unit, pushed
    /// when the client's first bytes show that it read one online, ends there).
    pub(crate) fn greeting_end(&self) -> Option<SeqNum> {
        (!self.seen_data && self.bounds.is_empty() && self.next == self.cur_start)
            .then_some(self.cur_start)
    }

    /// The end of the first unanswered unit: the first boundary, or `next` for the last,
    /// open unit. `None` when everything is answered.
    pub(crate) fn waiting_end(&self) -> Option<SeqNum> {
        match self.bounds.front() {
            Some(b) => Some(b.at),
            None => self.next.gt(self.cur_start).then_some(self.next),
        }
    }

    /// Whether the first unanswered unit is the last one before the client's FIN.
    pub(crate) fn before_fin(&self) -> bool {
        self.bounds.len() == 1 && self.fin == self.bounds.front().map(|b| b.at)
    }

    /// Bytes the online server answered to the first unanswered unit, as the client's ACK
    /// numbers tell (`None` when they do not). A unit closed by the FIN, or still open, counts
    /// up to the highest ACK the client sent, which may still grow.
    pub(crate) fn online_len(&self) -> Option<u32> {
        let base = self.cur_ack?;
        let end = match self.bounds.front() {
            Some(b) if !self.before_fin() => b.end?,
            Some(b) => match (b.end, self.max_ack) {
                (Some(a), Some(m)) => a.max(m),
                (a, m) => a.or(m)?,
            },
            None => self.max_ack?,
        };
        Some(end.diff(base).max(0) as u32)
    }

    /// The first unanswered unit is answered (or given up on): move past it.
    pub(crate) fn release_one(&mut self) {
        match self.bounds.pop_front() {
            Some(b) => {
                self.cur_start = b.at;
                self.cur_t = b.t;
                if b.ack.is_some() {
                    self.cur_ack = b.ack;
                }
            }
            None => self.cur_start = self.next,
        }
        if self.bounds.is_empty() {
            // No allocation held between requests (the next boundary allocates it again).
            self.bounds = Bounds::default();
        }
    }

    /// Release units without pacing: the first boundary goes when the test connection acked
    /// up to it and either answered after it (a data record acking at least that far) or
    /// `timed_out` says the wait is over. The last, open unit counts as answered once acked
    /// and answered entirely. `keep_last`: the last unit before the client's FIN is left to
    /// the session's close rule (HTTP/2: a server still answering earlier streams would lose
    /// them to an early FIN). Returns how many units were released and whether one of them by
    /// timeout. (With pacing, the session releases one unit at a time by the size of the
    /// answers: [`Stream::release_one`].)
    pub(crate) fn release(
        &mut self,
        acked: SeqNum,
        answered: Option<SeqNum>,
        timed_out: bool,
        keep_last: bool,
    ) -> (usize, bool) {
        let mut n = 0;
        let mut by_timeout = false;
        let ans = |b: SeqNum| answered.is_some_and(|a| a.ge(b));
        while let Some(&Bound { at: b, .. }) = self.bounds.front() {
            if !acked.ge(b) || (keep_last && self.before_fin()) {
                return (n, by_timeout);
            }
            if !ans(b) {
                if timed_out && n == 0 {
                    by_timeout = true;
                } else {
                    return (n, by_timeout);
                }
            }
            self.release_one();
            n += 1;
        }
        if self.next.gt(self.cur_start) && acked.ge(self.next) && ans(self.next) {
            self.cur_start = self.next;
        }
        (n, by_timeout)
    }

    /// Whether some request is not answered yet.
    pub(crate) fn unanswered(&self) -> bool {
        self.next.gt(self.cur_start)
    }

    /// Drop bytes no connection can need: those acked by the current connection, except the
    /// acked part of the current unit when it is at most `keep` bytes (kept to replay it).
    pub(crate) fn trim(&mut self, acked: SeqNum, keep: u32) {
        let acked = acked.min(self.next);
        let mut to = acked;
        if self.cur_start.le(acked) && (acked.diff(self.cur_start) as u32) <= keep {
            to = self.cur_start;
        }
        if to.gt(self.base) {
            self.buf.consume(to.diff(self.base) as usize);
            self.base = to;
        }
    }

    /// Where a new connection starts: the first unanswered unit if its bytes are all still
    /// here, else the next unit boundary still held, else `next`. Moves `cur_start` there and
    /// drops what lies before. Returns the start and whether a request had to be skipped.
    pub(crate) fn restart(&mut self) -> (SeqNum, bool) {
        let mut skipped = false;
        if self.cur_start.lt(self.base) {
            skipped = true;
            let mut to = self.next;
            let mut ack = self.last_ack;
            let mut t = None;
            while let Some(b) = self.bounds.pop_front() {
                if b.at.ge(self.base) {
                    to = b.at;
                    ack = b.ack;
                    t = b.t;
                    break;
                }
            }
            self.cur_start = to;
            self.cur_t = t;
            if ack.is_some() {
                self.cur_ack = ack;
            }
        }
        let start = self.cur_start;
        if start.gt(self.base) {
            self.buf.consume(start.diff(self.base) as usize);
            self.base = start;
        }
        if self.server_first && self.bounds.front().map(|b| b.at) != Some(start) {
            // The new connection's greeting comes first (any of it will do).
            self.bounds.push_front(Bound {
                at: start,
                ack: self.cur_ack,
                end: self.cur_ack,
                t: self.cur_t,
            });
        }
        (start, skipped)
    }
}
