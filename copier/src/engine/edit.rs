//! The request editor of one copy's stream (`--rules`): reads the client's in-order bytes as
//! requests, and writes what the test server gets: every request the filters keep, edited (dye
//! header, header edits, request-line rewrites), and nothing of the requests they drop.
//!
//! HTTP/1.x is recognised by the session's first bytes (an upper-case method and a space); its
//! requests are read with `httparse` (request line and headers), and framed by
//! `common::http1` in its relay mode (`Content-Length` or chunked coding, its chunked-body
//! walker fed the bytes as they come, trailers up to the empty line), so pipelined requests are
//! told apart wherever the segments cut them. A
//! head is held until it is whole (at most [`MAX_HEAD`] bytes), then written edited, or as
//! captured (the same shared chunks, no copy) when nothing changes, or not at all; body bytes
//! pass through as they come (or are dropped with their request). Other protocols, when a
//! filter has a byte prefix, are cut by the stream's request units: a unit's first bytes (up
//! to the longest prefix) are held until the filters decide, then the whole unit goes or is
//! dropped. Without such a filter other protocols pass untouched. HTTP/2 (the session starts
//! with the connection preface, or it follows a copied `Upgrade: h2c` request) goes to the
//! HTTP/2 editor (`h2edit`), frame by frame; malformed HTTP/2 gives the copy up.
//!
//! Sequence numbers: the editor's output is the stream's test-side byte space. It differs from
//! the client's by an offset that changes only at request boundaries (an edited head of length
//! h' for h shifts every later byte by h'-h; a dropped request by minus its length); the stream
//! keeps both (see `stream`), so connections and their ACKs live in the test space alone.
//!
//! Malformed HTTP (a head httparse refuses or longer than [`MAX_HEAD`], a bad or conflicting
//! length, a `Content-Length` above 2^63-1, a transfer coding other than chunked, a bad chunk
//! line): counted, and with `unparsable = "pass"` the rest of the session passes as captured,
//! from the first byte of the bad request on (the test server gets what the online server
//! got); with `unparsable = "drop"` the copy is given up there ([`Editor::unparsable`]), as
//! it is when a session caught mid-stream ([`Editor::midstream`]) does not start with a
//! request while HTTP filters exist. Only inside the body of a dropped request is that impossible
//! (its head is gone), and in allow-only mode (nothing after it is known to be allowed): the
//! copy is then given up ([`Editor::failed`]); what it sent before stays whole. What follows
//! an `Upgrade` or `CONNECT` request belongs to it: it passes untouched (not counted) when the
//! request is copied, and is dropped with it when not.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Arc;

use common::h2::PREFACE;
use common::http1::{self, Body, Chunks, Message, Mode as Framing};

use super::chunk::{ByteQueue, Chunk, Meter, Payload};
use super::h2edit::{Ctx, H2Edit, Malformed};
use super::rules::{HeaderEdit, Req, Rules, Unparsable, Verdict};
pub use super::stats::RequestCounts;

/// The longest request head held before it is called malformed.
pub(crate) const MAX_HEAD: usize = 64 << 10;
/// Headers per request.
const MAX_HEADERS: usize = 128;

impl RequestCounts {
    /// Add `o` to these counts.
    pub fn merge(&mut self, o: &RequestCounts) {
        self.http_requests += o.http_requests;
        self.byte_units += o.byte_units;
        self.dropped += o.dropped;
        self.edited += o.edited;
        self.malformed += o.malformed;
        if self.names.is_empty() {
            self.names.clone_from(&o.names);
        }
        if self.rules.len() < o.rules.len() {
            self.rules.resize(o.rules.len(), 0);
        }
        for (a, b) in self.rules.iter_mut().zip(&o.rules) {
            *a += b;
        }
    }

    /// Add these counts to `into` and zero them (keeping their buffers).
    pub(crate) fn drain_into(&mut self, into: &mut RequestCounts) {
        into.merge(self);
        let rules = std::mem::take(&mut self.rules);
        *self = RequestCounts {
            rules,
            ..RequestCounts::default()
        };
        self.rules.iter_mut().for_each(|r| *r = 0);
    }

    /// Count a verdict (`filters`: how many filters the rules have); whether the request is
    /// copied.
    pub(crate) fn count(&mut self, v: Verdict, filters: usize) -> bool {
        match v {
            Verdict::Copy(rule) => {
                if let Some(i) = rule {
                    self.bump_rule(i);
                }
                true
            }
            Verdict::Drop(rule) => {
                self.dropped += 1;
                self.bump_rule(rule.unwrap_or(filters));
                false
            }
        }
    }

    pub(crate) fn bump_rule(&mut self, i: usize) {
        if self.rules.len() <= i {
            self.rules.resize(i + 1, 0);
        }
        self.rules[i] += 1;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The first bytes will tell.
    Unknown,
    Http,
    /// Another protocol, filtered by byte prefix per unit.
    Bytes,
    /// Everything passes as captured.
    Pass,
    /// Nothing more passes (after a dropped upgrade request: the rest belongs to it).
    Drop,
    /// HTTP/2 (the preface was seen): frames and header blocks (`h2edit`).
    H2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At or inside a head (HTTP) or a unit's undecided prefix (bytes): `pend` holds it.
    Start,
    /// `left` bytes of body (HTTP) or the rest of the unit (bytes, `left == u64::MAX`).
    Body { left: u64, keep: bool },
    /// A chunked body (read by `Editor::chunks`).
    Chunked { keep: bool },
}

/// One copy's editor (see the module documentation).
#[derive(Debug)]
pub(crate) struct Editor {
    rules: Arc<Rules>,
    client: IpAddr,
    meter: Meter,
    /// This copy's dye header value.
    dye: Option<Vec<u8>>,
    mode: Mode,
    state: State,
    /// Held bytes: a head not yet whole, or a unit's prefix not yet decided.
    pend: Vec<Chunk>,
    pend_len: usize,
    /// The held bytes gathered for parsing.
    flat: Vec<u8>,
    /// The chunked body being read.
    chunks: Chunks,
    /// After this request the rest passes, or with the request dropped goes too (an upgrade
    /// or CONNECT): whether it is copied.
    pass_after: Option<bool>,
    /// The copy cannot go on (malformed inside a dropped request).
    pub failed: bool,
    /// ... and only because the rules say `unparsable = "drop"`.
    pub unparsable: bool,
    /// The session was caught mid-stream: its first bytes are where a request should start.
    midstream: bool,
    /// The request before was a copied `Upgrade: h2c`: the next bytes may be the preface.
    h2c: bool,
    /// The HTTP/2 editor, in [`Mode::H2`].
    h2: Option<Box<H2Edit>>,
    pub counts: RequestCounts,
}

impl Editor {
    pub(crate) fn new(rules: Arc<Rules>, copy: u16, client: IpAddr, meter: Meter) -> Editor {
        Editor {
            dye: rules.dye.as_ref().map(|d| d.value(copy).into_bytes()),
            rules,
            client,
            meter,
            mode: Mode::Unknown,
            state: State::Start,
            pend: Vec::new(),
            pend_len: 0,
            flat: Vec::new(),
            chunks: Chunks::new(Framing::Relay),
            pass_after: None,
            failed: false,
            unparsable: false,
            midstream: false,
            h2c: false,
            h2: None,
            counts: RequestCounts::default(),
        }
    }

    /// For a session caught mid-stream (see `unparsable` in the rules).
    pub(crate) fn midstream(mut self) -> Editor {
        self.midstream = true;
        self
    }

    /// The rules drop what cannot be parsed: give the copy up (`unparsable`).
    fn fail_closed(&mut self, work: &mut VecDeque<Chunk>) -> bool {
        if self.rules.unparsable != Unparsable::Drop {
            return false;
        }
        self.give_up(work);
        self.unparsable = true;
        true
    }

    /// Bytes held (not yet written), with the editor itself.
    pub(crate) fn held(&self) -> usize {
        std::mem::size_of::<Editor>()
            + self.pend_len
            + self.flat.capacity()
            + self.chunks.held()
            + self.h2.as_ref().map_or(0, |h| h.held())
    }

    /// On HTTP/2: whether what was written ends at a frame boundary (`None` on other
    /// protocols).
    pub(crate) fn h2_at_frame_start(&self) -> Option<bool> {
        self.h2.as_ref().map(|h| h.at_frame_start())
    }

    /// On HTTP/2: streams this editor dropped.
    pub(crate) fn h2_streams_dropped(&self) -> u64 {
        self.h2.as_ref().map_or(0, |h| h.streams_dropped)
    }

    /// The stream skipped a capture hole: what is held goes, and the next bytes start a
    /// request.
    pub(crate) fn reset(&mut self) {
        if self.mode == Mode::H2 {
            // The HPACK state of a connection cannot be carried over a hole (and HTTP/2 is
            // never carried on a new connection): nothing more goes.
            self.mode = Mode::Drop;
            self.h2 = None;
        }
        self.pend.clear();
        self.pend_len = 0;
        self.flat.clear();
        self.chunks = Chunks::new(Framing::Relay);
        self.state = State::Start;
    }

    /// The client's FIN: what is held goes as captured (an unfinished request), or, for a
    /// unit of another protocol, as the filters decide on what there is.
    pub(crate) fn flush(&mut self, q: &mut ByteQueue) -> usize {
        match self.mode {
            Mode::Bytes => self.unit_start(q),
            // An unfinished frame or header block: nothing of it can go.
            Mode::H2 => 0,
            _ => self.emit_pend(q, true),
        }
    }

    /// A request unit starts (the client's ACK grew): for another protocol, the unit before
    /// is decided with what it has.
    pub(crate) fn unit_start(&mut self, q: &mut ByteQueue) -> usize {
        if self.mode != Mode::Bytes {
            return 0;
        }
        let n = if self.state == State::Start && self.pend_len > 0 {
            self.decide_unit(q)
        } else {
            0
        };
        self.state = State::Start;
        n
    }

    /// Client bytes in order; writes the test side's into `q`. Returns the bytes written.
    pub(crate) fn feed(&mut self, data: Chunk, q: &mut ByteQueue) -> usize {
        if self.failed {
            return 0;
        }
        let mut work = VecDeque::from([data]);
        let mut n = 0;
        while let Some(d) = work.pop_front() {
            n += self.step(d, q, &mut work);
        }
        n
    }

    fn push(&self, q: &mut ByteQueue, c: Chunk) -> usize {
        let n = c.len();
        q.push(c);
        n
    }

    /// The held bytes out as they are (`keep`) or dropped.
    fn emit_pend(&mut self, q: &mut ByteQueue, keep: bool) -> usize {
        let mut n = 0;
        for c in std::mem::take(&mut self.pend) {
            if keep {
                n += self.push(q, c);
            }
        }
        self.pend_len = 0;
        self.flat.clear();
        n
    }

    /// Malformed HTTP: the rest passes as captured (the held bytes first); in allow-only mode
    /// nothing more is known to be allowed, so the copy is given up.
    fn malformed(&mut self, q: &mut ByteQueue, work: &mut VecDeque<Chunk>) -> usize {
        self.counts.malformed += 1;
        self.mode = Mode::Pass;
        self.state = State::Start;
        if self.rules.allow_only {
            self.give_up(work);
            return 0;
        }
        if self.fail_closed(work) {
            return 0;
        }
        self.emit_pend(q, true)
    }

    /// The copy cannot go on: nothing more is written.
    fn give_up(&mut self, work: &mut VecDeque<Chunk>) {
        self.failed = true;
        work.clear();
        self.pend.clear();
        self.pend_len = 0;
        self.flat.clear();
    }

    fn step(&mut self, d: Chunk, q: &mut ByteQueue, work: &mut VecDeque<Chunk>) -> usize {
        match (self.mode, self.state) {
            (Mode::Pass, _) => self.push(q, d),
            (Mode::Drop, _) => 0,
            (Mode::H2, _) => self.h2_step(d, q, work),
            (Mode::Unknown | Mode::Http, State::Start) => self.head(d, q, work),
            (Mode::Bytes, State::Start) => {
                self.hold(d);
                if self.pend_len >= self.rules.max_prefix() {
                    self.decide_unit(q)
                } else {
                    0
                }
            }
            (_, State::Body { left, keep }) => {
                let take = (d.len() as u64).min(left) as usize;
                let mut n = 0;
                if keep {
                    if let Some(c) = d.slice(0, take) {
                        n += self.push(q, c);
                    }
                }
                if left != u64::MAX {
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        self.next_message()
                    } else {
                        State::Body { left, keep }
                    };
                }
                if let Some(rest) = d.tail(take) {
                    work.push_front(rest);
                }
                n
            }
            (_, State::Chunked { keep }) => self.chunked(d, keep, q, work),
        }
    }

    /// HTTP/2 bytes. Malformed input gives the copy up whatever `unparsable` says: the test
    /// server's HPACK decoder follows this copy's encoder, not the client's (see `h2edit`).
    fn h2_step(&mut self, d: Chunk, q: &mut ByteQueue, work: &mut VecDeque<Chunk>) -> usize {
        let Some(h) = self.h2.as_mut() else { return 0 };
        let mut cx = Ctx {
            rules: &self.rules,
            client: self.client,
            dye: self.dye.as_deref(),
            meter: &self.meter,
            counts: &mut self.counts,
        };
        match h.feed(&d, q, &mut cx) {
            Ok(n) => n,
            Err(Malformed(n)) => {
                self.counts.malformed += 1;
                self.h2 = None;
                self.mode = Mode::Drop;
                if !self.fail_closed(work) {
                    self.give_up(work);
                }
                n
            }
        }
    }

    /// The held bytes start with the HTTP/2 preface: `Some(true)` (the editor is in
    /// [`Mode::H2`] and the held bytes were handed back to `work`), `None` while too few bytes
    /// tell, `Some(false)` when they are not the preface.
    fn sniff_h2(&mut self, work: &mut VecDeque<Chunk>) -> Option<bool> {
        let n = self.flat.len().min(PREFACE.len());
        if self.flat[..n] != PREFACE[..n] {
            return Some(false);
        }
        if n < PREFACE.len() {
            return None;
        }
        self.mode = Mode::H2;
        self.h2 = Some(Box::new(H2Edit::new()));
        let held = std::mem::take(&mut self.pend);
        self.pend_len = 0;
        self.flat.clear();
        for c in held.into_iter().rev() {
            work.push_front(c);
        }
        Some(true)
    }

    fn hold(&mut self, d: Chunk) {
        self.pend_len += d.len();
        self.flat.extend_from_slice(d.as_slice());
        self.pend.push(d);
    }

    /// After a message: the next request, or everything passes (upgrade).
    fn next_message(&mut self) -> State {
        if std::mem::take(&mut self.h2c) {
            // A copied `Upgrade: h2c`: the preface follows the `101`, or (refused) the next
            // HTTP/1.1 request does.
            self.pass_after = None;
            self.mode = Mode::Unknown;
            self.midstream = false;
            self.h2c = true;
            return State::Start;
        }
        if let Some(keep) = self.pass_after {
            self.mode = if keep { Mode::Pass } else { Mode::Drop };
        }
        State::Start
    }

    /// A unit of another protocol: the filters decide on its first bytes (held).
    fn decide_unit(&mut self, q: &mut ByteQueue) -> usize {
        let v = self.rules.verdict(self.client, &Req::Bytes(&self.flat));
        self.counts.byte_units += 1;
        let keep = self.count(v);
        self.state = State::Body {
            left: u64::MAX,
            keep,
        };
        self.emit_pend(q, keep)
    }

    /// Count a verdict; whether the request is copied.
    fn count(&mut self, v: Verdict) -> bool {
        self.counts.count(v, self.rules.filters.len())
    }

    fn head(&mut self, d: Chunk, q: &mut ByteQueue, work: &mut VecDeque<Chunk>) -> usize {
        self.hold(d);
        if self.mode == Mode::Unknown && (!self.midstream || self.h2c) {
            match self.sniff_h2(work) {
                None => return 0,
                Some(true) => {
                    self.h2c = false;
                    return 0;
                }
                Some(false) => self.h2c = false,
            }
        }
        if self.mode == Mode::Unknown {
            match looks_http(&self.flat) {
                None => return 0,
                Some(true) => self.mode = Mode::Http,
                Some(false)
                    if self.midstream && self.rules.http_filters() && self.fail_closed(work) =>
                {
                    // Caught mid-stream where no request starts (inside a body, say): with
                    // HTTP filters nothing after it can be checked.
                    self.counts.malformed += 1;
                    return 0;
                }
                Some(false) => {
                    // Another protocol: cut by units when a filter may match one, or when
                    // allow-only mode must drop what no filter allows.
                    let units = self.rules.byte_filters() || self.rules.allow_only;
                    self.mode = if units { Mode::Bytes } else { Mode::Pass };
                    let held = std::mem::take(&mut self.pend);
                    self.pend_len = 0;
                    self.flat.clear();
                    work.extend(held);
                    return 0;
                }
            }
        }
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        let len = match req.parse(&self.flat) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if self.pend_len <= MAX_HEAD => return 0,
            _ => return self.malformed(q, work),
        };
        let (Some(method), Some(target)) = (req.method, req.path) else {
            return self.malformed(q, work);
        };
        let hs: Vec<(&str, &[u8])> = req.headers.iter().map(|h| (h.name, h.value)).collect();
        // The body's extent (`common::http1`); what follows an upgrade belongs to it.
        let body = match http1::body(hs.iter().copied(), Message::Request, Framing::Relay) {
            Ok(b) => b,
            Err(_) => return self.malformed(q, work),
        };
        let mut upgrade = method.eq_ignore_ascii_case("CONNECT") || method == "PRI";
        let mut h2c = false;
        for (n, v) in &hs {
            if n.eq_ignore_ascii_case("upgrade") {
                upgrade = true;
                h2c |= v
                    .split(|&c| c == b',')
                    .any(|p| p.trim_ascii().eq_ignore_ascii_case(b"h2c"));
            }
        }
        let verdict = self.rules.verdict(
            self.client,
            &Req::Http {
                method: method.as_bytes(),
                target: target.as_bytes(),
                headers: &hs,
            },
        );
        let edited = match verdict {
            Verdict::Copy(_) if self.rules.edits() => edit_head(
                &self.rules,
                self.dye.as_deref(),
                &self.flat[..len],
                &mut self.counts,
            ),
            _ => None,
        };
        drop(hs);
        self.counts.http_requests += 1;
        let keep = self.count(verdict);
        self.pass_after = upgrade.then_some(keep);
        self.h2c = h2c && keep;
        // The held bytes: the head, then what follows it (body, next requests).
        let mut rest: Vec<Chunk> = Vec::new();
        let mut head: Vec<Chunk> = Vec::new();
        let mut at = 0;
        for c in std::mem::take(&mut self.pend) {
            let l = c.len();
            if at + l <= len {
                head.push(c);
            } else if at >= len {
                rest.push(c);
            } else {
                head.extend(c.slice(0, len - at));
                rest.extend(c.tail(len - at));
            }
            at += l;
        }
        self.pend_len = 0;
        let mut n = 0;
        match (keep, edited) {
            (false, _) => {}
            (true, Some(v)) => {
                self.counts.edited += 1;
                let mut p = Payload::new(&v, &self.meter);
                p.set_last(true);
                n += p.keep(0).map_or(0, |c| self.push(q, c));
            }
            (true, None) => {
                for c in head {
                    n += self.push(q, c);
                }
            }
        }
        self.flat.clear();
        if self.flat.capacity() > 8192 {
            self.flat = Vec::new(); // a long head: do not keep its buffer for every session
        }
        self.state = match body {
            Body::Chunked => {
                self.chunks = Chunks::new(Framing::Relay);
                State::Chunked { keep }
            }
            Body::Length(l) if l > 0 => State::Body { left: l, keep },
            // A request has no body without a length (`UntilClose` is for answers).
            Body::Length(_) | Body::None | Body::UntilClose => self.next_message(),
        };
        for c in rest.into_iter().rev() {
            work.push_front(c);
        }
        n
    }

    /// Chunked body bytes: passed (or dropped) as they come, read only to find the end.
    fn chunked(
        &mut self,
        d: Chunk,
        keep: bool,
        q: &mut ByteQueue,
        work: &mut VecDeque<Chunk>,
    ) -> usize {
        let fed = match self.chunks.feed(d.as_slice(), |_| true) {
            Ok(f) => f,
            Err(e) => return self.bad_body(keep, d, e.read, q, work),
        };
        let i = fed.used;
        let mut n = 0;
        if keep {
            n += d.slice(0, i).map_or(0, |c| self.push(q, c));
        }
        if fed.done {
            self.state = self.next_message();
            if let Some(rest) = d.tail(i) {
                work.push_front(rest);
            }
        } else {
            self.state = State::Chunked { keep };
        }
        n
    }

    /// A bad chunked body: a kept request passes on as captured; a dropped one cannot (its
    /// head is gone), nor can anything in allow-only mode, so the copy is given up.
    fn bad_body(
        &mut self,
        keep: bool,
        d: Chunk,
        read: usize,
        q: &mut ByteQueue,
        work: &mut VecDeque<Chunk>,
    ) -> usize {
        self.counts.malformed += 1;
        self.mode = Mode::Pass;
        self.state = State::Start;
        self.chunks = Chunks::new(Framing::Relay);
        if !keep || self.rules.allow_only {
            self.give_up(work);
            return 0;
        }
        if self.fail_closed(work) {
            return 0;
        }
        if let Some(rest) = d.tail(read) {
            work.push_front(rest);
        }
        d.slice(0, read).map_or(0, |c| self.push(q, c))
    }
}

/// Whether the first bytes of a session are an HTTP request: an upper-case token of 1 to 16
/// letters (a method) then a space. `None` while too few bytes tell (leading empty lines are
/// skipped, as httparse does).
fn looks_http(b: &[u8]) -> Option<bool> {
    let b = {
        let mut s = b;
        while let Some(r) = s.strip_prefix(b"\r\n").or_else(|| s.strip_prefix(b"\n")) {
            s = r;
        }
        s
    };
    if b == b"\r" {
        return None;
    }
    for (i, &c) in b.iter().enumerate() {
        if c == b' ' {
            return Some(i > 0);
        }
        if !(c.is_ascii_uppercase() || c == b'-' || c == b'_') || i >= 16 {
            return Some(false);
        }
    }
    None
}

/// A copied request's head, edited: rewrites of the request line, the dye header, the header
/// edits. `None` when nothing changed.
fn edit_head<'a>(
    rules: &'a Rules,
    dye: Option<&[u8]>,
    head: &'a [u8],
    counts: &mut RequestCounts,
) -> Option<Vec<u8>> {
    let mut lines: Vec<&[u8]> = head.split_inclusive(|&c| c == b'\n').collect();
    // Leading empty lines stay as they are; the request line is the first other one.
    let first = lines.iter().position(|l| *l != b"\r\n" && *l != b"\n")?;
    let term = lines.pop()?; // the empty line that ends the head
    let crlf: &[u8] = if term == b"\n" { b"\n" } else { b"\r\n" };
    let mut changed = false;
    // The request line.
    let rl = lines[first];
    let body = rl
        .strip_suffix(b"\n")
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .unwrap_or(rl);
    let mut new_rl = Cow::Borrowed(body);
    let base = rules.filters.len() + 1;
    for (i, (_, re, rep)) in rules.rewrites.iter().enumerate() {
        if re.is_match(&new_rl) {
            new_rl = Cow::Owned(re.replace_all(&new_rl, rep.as_slice()).into_owned());
            counts.bump_rule(base + i);
        }
    }
    let mut out: Vec<u8> = Vec::with_capacity(head.len() + 128);
    for l in &lines[..first] {
        out.extend_from_slice(l);
    }
    if *new_rl != *body {
        changed = true;
        out.extend_from_slice(&new_rl);
        out.extend_from_slice(crlf);
    } else {
        out.extend_from_slice(rl);
    }
    // Header lines: (name, whole line).
    let name_of = |l: &'a [u8]| -> &'a [u8] {
        l.split(|&c| c == b':')
            .next()
            .unwrap_or_default()
            .trim_ascii()
    };
    let mut hs: Vec<(&[u8], Cow<'_, [u8]>)> = lines[first + 1..]
        .iter()
        .map(|l| (name_of(l), Cow::Borrowed(*l)))
        .collect();
    let line = |n: &'a str, v: &[u8]| -> (&'a [u8], Cow<'a, [u8]>) {
        let mut l = Vec::with_capacity(n.len() + v.len() + 4);
        l.extend_from_slice(n.as_bytes());
        l.extend_from_slice(b": ");
        l.extend_from_slice(v);
        l.extend_from_slice(crlf);
        (n.as_bytes(), Cow::Owned(l))
    };
    // Every line named `n` goes; with `add` (or when one went) `n: v` comes last. Whether the
    // head changed (a line that stays as it was, last, is no change).
    let set = |hs: &mut Vec<(&'a [u8], Cow<'a, [u8]>)>,
               n: &'a str,
               v: Option<&[u8]>,
               add: bool|
     -> bool {
        let named = |x: &[u8]| x.eq_ignore_ascii_case(n.as_bytes());
        let count = hs.iter().filter(|(x, _)| named(x)).count();
        let new = v.filter(|_| add || count > 0).map(|v| line(n, v));
        if count == 0 && new.is_none() {
            return false;
        }
        if let (Some(new), Some(last)) = (&new, hs.last()) {
            if count == 1 && named(last.0) && last.1 == new.1 {
                return false;
            }
        }
        hs.retain(|(x, _)| !named(x));
        hs.extend(new);
        true
    };
    if let (Some(d), Some(v)) = (&rules.dye, dye) {
        changed |= set(&mut hs, &d.name, Some(v), true);
    }
    for e in &rules.headers {
        changed |= match e {
            HeaderEdit::Set(n, v) => set(&mut hs, n, Some(&v.get()), true),
            HeaderEdit::Replace(n, v) => set(&mut hs, n, Some(&v.get()), false),
            HeaderEdit::Delete(n) => set(&mut hs, n, None, false),
        };
    }
    if !changed {
        return None;
    }
    for (_, l) in &hs {
        out.extend_from_slice(l);
    }
    out.extend_from_slice(term);
    Some(out)
}

/// One copy's editor over `input` (client bytes of a connection) cut every `cut` bytes, for
/// the fuzz target `h2_headers`: what the test side gets, and whether the copy was given up.
#[doc(hidden)]
pub fn h2_edit_for_fuzz(
    rules: &std::sync::Arc<Rules>,
    input: &[u8],
    cut: usize,
) -> (Vec<u8>, bool) {
    let meter = Meter::default();
    let mut e = Editor::new(
        rules.clone(),
        0,
        IpAddr::from([198, 18, 0, 9]),
        meter.clone(),
    );
    let mut q = ByteQueue::new();
    for part in input.chunks(cut.max(1)) {
        if let Some(c) = Payload::new(part, &meter).keep(0) {
            e.feed(c, &mut q);
        }
    }
    e.flush(&mut q);
    (q.to_vec(), e.failed)
}

#[cfg(test)]
mod tests;
