//! From TCP segments to exchanges: the three byte streams of a copied connection (what the
//! client sent, what the online server answered, what each test server answered) are put back
//! in order and cut into HTTP/1.x messages; the n-th request of a connection is paired with the
//! n-th answer of each server (HTTP/1.x answers come in request order).
//!
//! Owns: [`Flows`], keyed by the caller's connection key (the client's address and port: the
//! test tuple of a copy keeps them); [`Flows::handle`] takes one segment of one [`Side`] and
//! returns the exchanges it completed (through [`Pending`]). Each stream keeps at most
//! `max_message` bytes of the message being read (a longer one is compared on its first
//! `max_message` bytes: its end is found by `Content-Length` and the rest skipped; a longer
//! chunked or close-delimited one ends the comparison of its connection) and at most
//! `max_held` bytes out of order; connections are at most `max_conns` (the idlest forgotten) and
//! forgotten after `idle` without a segment. The whole is bounded in bytes: what the streams
//! hold plus the pairing table stays within `max_bytes` (plus the one segment being added):
//! when a segment would pass it, the idlest other connections are forgotten (down to 7/8 of
//! the bound, so that shedding comes in batches; counted `memory_shed`), and when the
//! connection itself is all there is, its stream stops (counted unsynced). The bytes of the
//! streams are kept as a running total (each segment adds what its connection's streams grew
//! or shrank by), so the check costs nothing per segment. A stream that lost bytes (a cut record, a capture
//! hole past the out-of-order bound) stops: counted, no crash. A connection whose client bytes
//! are not HTTP/1.x is compared whole, as bytes (the first `max_message` of each side, the first
//! differing offset), once every server closed its side. The table and the reassembly of
//! segments are here; cutting the streams into messages (HTTP/1.x, HTTP/2, whole) is in
//! `flows/cut.rs`, the tests in `flows/tests.rs` and `flows/tests_h2.rs`.
//!
//! HTTP/2 (the client's bytes start with the preface: cleartext HTTP/2 with prior knowledge,
//! gRPC): each stream of the connection is read by a [`crate::h2::Reader`] of its own (one
//! HPACK table per direction) and its messages are paired by stream id, not by order (the copy
//! sends the client's bytes as they are, so stream N of a test connection carries the request
//! of stream N online); each message is handed on as HTTP/1.1 ([`crate::h2::request_as_http1`],
//! [`crate::h2::answer_as_http1`]: trailers such as `grpc-status` as headers). A stream of such a
//! connection that loses bytes, or a direction that does not read as HTTP/2, ends the
//! comparison of the whole connection (`h2_broken`): its tables are lost from there, and what
//! it still had waiting is dropped rather than compared with wrongly decoded headers.
//!
//! Answer times: online, from the capture of a request's last byte to that of its answer's first
//! byte; on test, from the test server's acknowledgement of the request's last byte (the copy
//! sends client byte `s` as byte `s` on its test connection, so the test server's ACK numbers are
//! the client's sequence numbers) to its answer's first byte. Both are what the server took
//! once it had the request, measured from the same vantage point as its answer. Only a pure
//! ACK (no payload) starts a test answer time: a server in delayed-ACK mode (a keep-alive
//! connection after its first exchanges) acknowledges the request on its answer's first
//! segment, which says nothing of when it had the request. Such an answer is timed from when
//! the copy's last byte of the request was sent ([`Flows::handle_sent`]: the caller's marks of
//! the copy's data segments as they leave; longer than the server's own time by the path to
//! the test server, and on two hosts' clocks, see `copier::clock`), and only without such a
//! mark from the ACK on the answer (0). An answer is timed from the end of the answer before
//! it when that came later (a pipelined request, which the server takes up only then: the
//! copy sends what the client sent as fast as the test server takes it, so it pipelines
//! when it is behind). Times are what the caller passes as `now`: the copier
//! passes the capture's and the intercept's stamps of each packet and its own send time.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use common::seq::SeqNum;

use crate::comparator::Exchange;
use crate::h2::Reader;
use crate::pending::Pending;

mod cut;

use cut::{cut_messages, emitted_h2_break, whole_connection};

/// Which stream a segment belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Client to online server (requests).
    Client,
    /// Online server to client.
    Online,
    /// The candidate test server to the copy.
    Candidate,
    /// The baseline test server to the copy.
    Baseline,
}

/// One TCP segment (or a record of one) as seen on a side.
#[derive(Debug, Clone, Copy)]
pub struct Seg<'a> {
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number, when ACK is set.
    pub ack: Option<u32>,
    /// SYN flag.
    pub syn: bool,
    /// FIN flag.
    pub fin: bool,
    /// RST flag.
    pub rst: bool,
    /// The payload bytes carried.
    pub payload: &'a [u8],
    /// The segment's payload is longer than `payload` (a record cut by the intercept).
    pub cut: bool,
}

/// Limits and choices.
#[derive(Debug, Clone)]
pub struct FlowConfig {
    /// Bytes kept of one message.
    pub max_message: usize,
    /// Bytes held out of order per stream.
    pub max_held: usize,
    /// Connections tracked at most.
    pub max_conns: usize,
    /// A connection without a segment for this long is forgotten.
    pub idle: Duration,
    /// How long the parts of an exchange wait for each other.
    pub pair_timeout: Duration,
    /// Bytes the pairing table holds at most.
    pub max_pending_bytes: usize,
    /// Bytes the streams and the pairing table hold at most together (see the module doc).
    pub max_bytes: usize,
    /// Whether a baseline answers too.
    pub baseline: bool,
    /// The fraction of connections compared (0..=1), chosen by a hash of the key.
    pub sample: f64,
    /// The service's port when the caller does not give one ([`Flows::handle_on`]).
    pub port: u16,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            max_message: 4 << 20,
            max_held: 1 << 20,
            max_conns: 50_000,
            idle: Duration::from_secs(120),
            pair_timeout: Duration::from_secs(30),
            max_pending_bytes: 256 << 20,
            max_bytes: 256 << 20,
            baseline: false,
            sample: 1.0,
            port: 0,
        }
    }
}

/// Counters of what could not be compared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowCounts {
    /// Connections whose client bytes were not HTTP/1.x (compared whole, as bytes, when every
    /// server closed its side).
    pub not_http: u64,
    /// Streams stopped: bytes lost (cut record, hole) or a message too long to find its end.
    pub unsynced: u64,
    /// Connections not compared because of the sampling.
    pub sampled_out: u64,
    /// Connections forgotten to stay within `max_conns`.
    pub conns_shed: u64,
    /// Connections forgotten to stay within `max_bytes`.
    pub memory_shed: u64,
    /// Inputs whose handling panicked (the caller counts them: [`Flows::reset`]).
    pub panics: u64,
    /// Connections read as HTTP/2 (the client's first bytes were the HTTP/2 preface).
    pub h2: u64,
    /// HTTP/2 connections whose comparison stopped: a stream lost bytes (a cut record, a hole,
    /// the memory bound) or did not read as HTTP/2 (a header block that does not decode, a
    /// frame out of the rules, past a bound of `h2`). The HPACK table of that direction is lost
    /// from there, so the connection's later exchanges and those still waiting for a part are
    /// dropped (not counted expired) rather than compared with wrongly decoded headers.
    pub h2_broken: u64,
    /// Connections whose first segment seen was a test server's (its records came before the
    /// capture showed the client's SYN; they are kept, not lost).
    pub orphan_segments: u64,
}

#[derive(Debug, Default)]
struct Stream {
    /// Sequence number of stream byte 0.
    base: Option<SeqNum>,
    /// Stream offset of `buf[0]`.
    start: u64,
    buf: Vec<u8>,
    held: BTreeMap<u64, Vec<u8>>,
    held_bytes: usize,
    /// Messages emitted.
    n: u64,
    /// Bytes of the current message still to skip (it was longer than `max_message`).
    skip: u64,
    fin: bool,
    dead: bool,
    /// Set by `put` when a hole outgrew `max_held` (counted as unsynced by the caller).
    overflowed: bool,
    /// When the current message's first byte came.
    first_t: Option<Instant>,
    /// When the last message ended (the segment that completed it came).
    last_end_t: Option<Instant>,
    /// When the last bytes in order came.
    last_t: Option<Instant>,
}

#[derive(Debug)]
struct Conn {
    gen: u64,
    last: Instant,
    sampled: bool,
    http: Option<bool>,
    streams: [Stream; 4],
    /// Per request index: is HEAD, stream offset of its end, when its last byte was captured.
    reqs: VecDeque<(u64, bool, u64, Instant)>,
    /// Per request index, per test side: when the test server acknowledged the whole request.
    acked: [HashMap<u64, Instant>; 2],
    /// Per test side, the last [`SENT_MARKS`] data segments the copy sent: the client sequence
    /// number after their last byte, and when.
    sent: [VecDeque<(u32, Instant)>; 2],
    /// Not HTTP, and compared whole once: nothing more to do.
    bytes_done: bool,
    /// The online service's port.
    port: u16,
    /// Read as HTTP/2: the state of its four directions.
    h2: Option<Box<H2Conn>>,
}

/// An HTTP/2 connection's readers, one per stream of [`Conn::streams`] (the client's and each
/// server's direction have their own HPACK table).
#[derive(Debug)]
struct H2Conn {
    readers: [Reader; 4],
    /// The client's preface was taken off its stream.
    preface: bool,
    /// Not compared on (counted `h2_broken` once).
    broken: bool,
}

impl H2Conn {
    fn new(max_message: usize) -> H2Conn {
        H2Conn {
            readers: std::array::from_fn(|_| Reader::new(max_message)),
            preface: false,
            broken: false,
        }
    }
}

impl Conn {
    /// Bytes its streams hold (with what its HTTP/2 readers hold).
    fn bytes(&self) -> usize {
        self.streams
            .iter()
            .map(|s| s.buf.len() + s.held_bytes)
            .sum::<usize>()
            + self
                .h2
                .as_ref()
                .map_or(0, |h| h.readers.iter().map(Reader::bytes).sum())
    }

    fn h2_broken(&self) -> bool {
        self.h2.as_ref().is_some_and(|h| h.broken)
    }
}

fn idx(s: Side) -> usize {
    match s {
        Side::Client => 0,
        Side::Online => 1,
        Side::Candidate => 2,
        Side::Baseline => 3,
    }
}

/// The table of connections (see the module doc).
#[derive(Debug)]
pub struct Flows<K> {
    cfg: FlowConfig,
    conns: HashMap<K, Conn>,
    gen: u64,
    pending: Pending<(K, u64, u64)>,
    counts: FlowCounts,
    /// What the streams of every connection hold (the running total of [`Conn::bytes`]).
    stream_bytes: usize,
}

/// FNV-1a as a `Hasher`: the same key picks the same sample in every run and in every thread.
#[derive(Debug)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        // spread the low bits (FNV's last multiply leaves the top ones weak for short keys)
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^ (x >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0 = common::hash::fnv1a_from(self.0, bytes);
    }
}

/// Whether connection `key` is among the fraction `sample` compared (stable across runs, so the
/// copier's record tap and the comparison agree).
pub fn sampled<K: Hash>(key: &K, sample: f64) -> bool {
    if sample >= 1.0 {
        return true;
    }
    let mut h = Fnv(common::hash::FNV_OFFSET);
    key.hash(&mut h);
    (h.finish() as f64 / u64::MAX as f64) < sample
}

impl<K: Hash + Eq + Clone> Flows<K> {
    /// An empty table.
    pub fn new(cfg: FlowConfig) -> Flows<K> {
        Flows {
            pending: Pending::new(
                cfg.pair_timeout,
                cfg.max_conns.max(1) * 4,
                cfg.max_pending_bytes,
                cfg.baseline,
            ),
            conns: HashMap::new(),
            gen: 0,
            counts: FlowCounts::default(),
            stream_bytes: 0,
            cfg,
        }
    }

    fn remove_conn(&mut self, key: &K) -> bool {
        match self.conns.remove(key) {
            Some(c) => {
                self.stream_bytes -= c.bytes();
                true
            }
            None => false,
        }
    }

    /// Forgets every connection and waiting exchange (after a panic in the caller's handling:
    /// the state may be half updated); the counts stay, and `panics` goes up.
    pub fn reset(&mut self) {
        self.conns.clear();
        self.stream_bytes = 0;
        self.pending.clear();
        self.counts.panics += 1;
    }

    /// Makes room for `need` more bytes within `max_bytes`: the idlest connections other than
    /// `key` go, down to 7/8 of the bound. Whether there is room.
    fn make_room(&mut self, key: &K, need: usize) -> bool {
        let max = self.cfg.max_bytes;
        let used = |f: &Self| f.stream_bytes + f.pending.bytes();
        if used(self).saturating_add(need) <= max {
            return true;
        }
        let goal = max - max / 8;
        let mut idle: Vec<(Instant, K)> = self
            .conns
            .iter()
            .filter(|(k, c)| *k != key && c.bytes() > 0)
            .map(|(k, c)| (c.last, k.clone()))
            .collect();
        idle.sort_unstable_by_key(|(t, _)| *t);
        for (_, k) in idle {
            if used(self).saturating_add(need) <= goal {
                break;
            }
            self.remove_conn(&k);
            self.counts.memory_shed += 1;
        }
        used(self).saturating_add(need) <= max
    }

    fn new_conn(&mut self, now: Instant, key: &K) {
        if !self.conns.contains_key(key) && self.conns.len() >= self.cfg.max_conns {
            if let Some(k) = self
                .conns
                .iter()
                .min_by_key(|(_, c)| c.last)
                .map(|(k, _)| k.clone())
            {
                self.remove_conn(&k);
                self.counts.conns_shed += 1;
            }
        }
        self.remove_conn(key);
        self.gen += 1;
        let sampled = sampled(key, self.cfg.sample);
        if !sampled {
            self.counts.sampled_out += 1;
        }
        self.conns.insert(
            key.clone(),
            Conn {
                gen: self.gen,
                last: now,
                sampled,
                http: None,
                streams: Default::default(),
                reqs: VecDeque::new(),
                acked: Default::default(),
                sent: Default::default(),
                bytes_done: false,
                port: self.cfg.port,
                h2: None,
            },
        );
    }

    /// One segment of `side` for connection `key`; returns the exchanges now complete. The
    /// service's port is `FlowConfig::port` (see [`Flows::handle_on`]).
    pub fn handle(&mut self, now: Instant, key: &K, side: Side, seg: Seg<'_>) -> Vec<Exchange> {
        self.handle_on(now, key, self.cfg.port, side, seg)
    }

    /// The copy of connection `key` to test server `side` sent client bytes up to sequence
    /// number `end` (exclusive) at `now`: the start of that server's answer time when it
    /// acknowledges the request only on its answer (see the module doc). Marks of a connection
    /// not followed (yet) are dropped; a connection keeps its last [`SENT_MARKS`].
    pub fn handle_sent(&mut self, now: Instant, key: &K, side: Side, end: u32) {
        let (Some(c), Some(ti)) = (self.conns.get_mut(key), test_index(side)) else {
            return;
        };
        let marks = &mut c.sent[ti];
        if marks.len() >= SENT_MARKS {
            marks.pop_front();
        }
        marks.push_back((end, now));
    }

    /// [`Flows::handle`] for a connection to the online service's port `port` (it names the
    /// endpoint of a connection that is not HTTP).
    pub fn handle_on(
        &mut self,
        now: Instant,
        key: &K,
        port: u16,
        side: Side,
        seg: Seg<'_>,
    ) -> Vec<Exchange> {
        let out = Vec::new();
        // The capture and the records come by different paths: a test server's first segments
        // may be here before the client's SYN. A client SYN starts a new connection only when
        // the key already had one with another ISN (a reused port), not when it repeats the
        // SYN or when the other sides came first.
        match self.conns.get(key) {
            None => {
                if matches!(side, Side::Candidate | Side::Baseline) {
                    self.counts.orphan_segments += 1;
                }
                self.new_conn(now, key);
            }
            Some(c) if side == Side::Client && seg.syn => {
                if c.streams[0]
                    .base
                    .is_some_and(|b| b != SeqNum(seg.seq).add(1))
                {
                    self.new_conn(now, key);
                }
            }
            Some(_) => {}
        }
        let room = seg.payload.is_empty() || self.make_room(key, seg.payload.len());
        let Some(c) = self.conns.get_mut(key) else {
            return out;
        };
        let before = c.bytes();
        if !room {
            // this connection alone fills the bound: the stream stops here
            let st = &mut c.streams[idx(side)];
            if !st.dead {
                st.dead = true;
                self.counts.unsynced += 1;
            }
        }
        let out = self.feed(now, key, port, side, seg, out);
        if let Some(c) = self.conns.get(key) {
            self.stream_bytes = self.stream_bytes - before + c.bytes();
        }
        out
    }

    /// [`Flows::handle_on`] once the connection exists (its bytes accounted by the caller).
    fn feed(
        &mut self,
        now: Instant,
        key: &K,
        port: u16,
        side: Side,
        seg: Seg<'_>,
        mut out: Vec<Exchange>,
    ) -> Vec<Exchange> {
        let Some(c) = self.conns.get_mut(key) else {
            return out;
        };
        c.last = now;
        c.port = port;
        if !c.sampled || c.bytes_done || c.h2_broken() {
            return out;
        }
        let t = idx(side);
        // a SYN with another ISN: a new connection on that side (a test server's reconnection);
        // the same ISN again is a retransmission
        if seg.syn
            && c.streams[t]
                .base
                .is_some_and(|b| b != SeqNum(seg.seq).add(1))
        {
            c.streams[t] = Stream::default();
        }
        // (HTTP/2 test answers are timed from the copy's sends only: one ACK covers the
        // requests of many streams, sent at different times)
        if let (Some(ack), Some(ti), true, None) =
            (seg.ack, test_index(side), seg.payload.is_empty(), &c.h2)
        {
            note_ack(c, ti, ack, now);
        }
        let h2 = c.h2.is_some();
        let st = &mut c.streams[t];
        if st.dead && !h2 {
            return out;
        }
        if st.dead {
            // a stream of an HTTP/2 connection stopped (by the memory bound): its table is lost
            emitted_h2_break(c, &mut self.counts);
            self.pending.forget(|k| k.0 == *key && k.1 == c.gen);
            return out;
        }
        if st.base.is_none() {
            if seg.syn {
                st.base = Some(SeqNum(seg.seq).add(1));
            } else if !seg.payload.is_empty() {
                st.base = Some(SeqNum(seg.seq));
            } else {
                return out;
            }
        }
        let base = st.base.unwrap_or_default();
        let data_seq = if seg.syn {
            SeqNum(seg.seq).add(1)
        } else {
            SeqNum(seg.seq)
        };
        let off = u64::from(data_seq.offset_from(base));
        if off > (1 << 31) {
            return out; // before the start: an old retransmission
        }
        if seg.cut {
            // bytes after this record's payload are lost for good
            put(st, off, seg.payload, self.cfg.max_held, now);
            st.dead = true;
            self.counts.unsynced += 1;
        } else {
            put(st, off, seg.payload, self.cfg.max_held, now);
        }
        if std::mem::take(&mut st.overflowed) {
            self.counts.unsynced += 1;
        }
        if c.http != Some(true) && st.buf.len() > self.cfg.max_message {
            // not (yet) HTTP: nothing drains the stream; keep its first bytes only
            st.buf.truncate(self.cfg.max_message);
            st.dead = true;
        }
        if seg.fin || seg.rst {
            st.fin = true;
        }
        let gen = c.gen;
        let was_http = c.http;
        let mut emitted = Vec::new();
        if c.http == Some(false) {
            emitted.extend(whole_connection(c, &self.cfg));
        } else {
            emitted.extend(cut_messages(c, t, &self.cfg, &mut self.counts, now));
            // the answers that came before the client's first bytes told what the protocol is,
            // or before the capture showed their request whole
            if t == 0 && c.http == Some(true) {
                let from = if was_http.is_none() { 1 } else { 2 };
                for side in from..4 {
                    emitted.extend(cut_messages(c, side, &self.cfg, &mut self.counts, now));
                }
            }
            if c.http == Some(false) {
                emitted.extend(whole_connection(c, &self.cfg));
            }
        }
        let broke = c.h2_broken();
        for (n, part) in emitted {
            if let Some(ex) = self.pending.add(now, (key.clone(), gen, n), part) {
                out.push(ex);
            }
        }
        if broke {
            // what waits for a part of this connection will not get it
            self.pending.forget(|k| k.0 == *key && k.1 == gen);
        }
        out
    }

    /// Forgets idle connections and expires unpaired exchanges; returns those that can still
    /// be compared (only the baseline's answer missing).
    pub fn expire(&mut self, now: Instant) -> Vec<Exchange> {
        let idle = self.cfg.idle;
        let counts = &mut self.counts;
        let stream_bytes = &mut self.stream_bytes;
        self.conns.retain(|_, c| {
            let keep = now.saturating_duration_since(c.last) < idle;
            // a stream still waiting for the bytes of a hole: what came after it was never compared
            if !keep && c.streams.iter().any(|s| !s.held.is_empty() && !s.dead) {
                counts.unsynced += 1;
            }
            if !keep {
                *stream_bytes -= c.bytes();
            }
            keep
        });
        self.pending.expire(now)
    }

    /// Counters.
    pub fn counts(&self) -> FlowCounts {
        self.counts
    }

    /// The pairing table's counters (expired, shed).
    pub fn pending_counts(&self) -> crate::pending::PendingCounts {
        self.pending.counts()
    }

    /// Connections tracked and exchanges waiting for a part.
    pub fn sizes(&self) -> (usize, usize) {
        (self.conns.len(), self.pending.len())
    }

    /// Bytes held: streams (in order and out of order) and the pairing table (the running
    /// total: see [`Flows::recount`]).
    pub fn bytes(&self) -> usize {
        self.stream_bytes + self.pending.bytes()
    }

    /// [`Flows::bytes`] counted afresh over every connection (for tests and the fuzz target:
    /// it must equal the running total).
    pub fn recount(&self) -> usize {
        self.conns.values().map(Conn::bytes).sum::<usize>() + self.pending.bytes()
    }
}

fn test_index(side: Side) -> Option<usize> {
    match side {
        Side::Candidate => Some(0),
        Side::Baseline => Some(1),
        _ => None,
    }
}

/// Data segments of a copy remembered per connection and test server ([`Flows::handle_sent`]):
/// more than the requests a keep-alive connection has in flight.
pub const SENT_MARKS: usize = 32;

/// A test server's ACK: the requests it now has whole.
fn note_ack(c: &mut Conn, ti: usize, ack: u32, now: Instant) {
    let Some(base) = c.streams[0].base else {
        return;
    };
    let acked = u64::from(SeqNum(ack).offset_from(base));
    let answered = c.streams[2 + ti].n;
    for &(n, _, end, _) in &c.reqs {
        if n >= answered && end <= acked && acked < (1 << 31) {
            c.acked[ti].entry(n).or_insert(now);
        }
    }
}

/// Adds bytes at stream offset `off`.
fn put(st: &mut Stream, off: u64, data: &[u8], max_held: usize, now: Instant) {
    let next = st.start + st.buf.len() as u64;
    if data.is_empty() {
        return;
    }
    let dend = off + data.len() as u64;
    if dend <= next {
        return;
    }
    if off > next {
        if st.held_bytes + data.len() <= max_held {
            st.held_bytes += data.len();
            if let Some(old) = st.held.insert(off, data.to_vec()) {
                st.held_bytes -= old.len();
            }
        } else {
            // a hole that is not filled within the bound: the stream cannot go on
            st.dead = true;
            st.overflowed = true;
        }
        return;
    }
    if st.buf.is_empty() && st.first_t.is_none() {
        st.first_t = Some(now);
    }
    st.last_t = Some(now);
    st.buf.extend_from_slice(&data[(next - off) as usize..]);
    // held segments that are now in order
    while let Some((&o, _)) = st.held.iter().next() {
        let next = st.start + st.buf.len() as u64;
        if o > next {
            break;
        }
        let d = st.held.remove(&o).unwrap_or_default();
        st.held_bytes -= d.len();
        let e = o + d.len() as u64;
        if e > next {
            st.buf.extend_from_slice(&d[(next - o) as usize..]);
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tests_h2;
