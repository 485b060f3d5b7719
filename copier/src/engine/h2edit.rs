//! The request editor of one copy's HTTP/2 connection (`--rules` on HTTP/2, called by `edit`
//! once the client's bytes start with the connection preface, or after an `Upgrade: h2c`
//! request that is copied).
//!
//! It reads the client's frames (`common::h2`) and decodes every header block in connection
//! order with one HPACK decoder per copy (`common::hpack`), the blocks of the streams it drops
//! included, so that its table follows the client's encoder. A request (a HEADERS frame that
//! opens a stream: an id above every one opened before) goes to the filters with `:method`,
//! `:path`, its fields and `:authority` as `host` (when no `host` field came); a dropped
//! stream leaves nothing for the test server: its HEADERS, CONTINUATION, DATA, trailers,
//! RST_STREAM, PRIORITY, WINDOW_UPDATE (and frames of unknown types on it) are not written
//! (stream ids then skip, which HTTP/2 allows). Every header block that does go, request or
//! trailers, is written again by this copy's own encoder ([`hpack::Encoder`]: a table size
//! update to 0 at the start, no dynamic table after), with the edits of a copied request: the
//! dye field, `[[header]]` set/replace/delete (names lower-cased, as HTTP/2 wants; `Host`
//! edits the `:authority` a request carries) and `[[rewrite]]` regexes applied to the line
//! `METHOD PATH HTTP/2.0` (what they match on HTTP/1.1 too), whose method and path become
//! `:method` and `:path`. So the test server's decoder only ever sees this encoder's blocks,
//! and never a table entry it was not given. The block goes as a HEADERS frame and as many
//! CONTINUATIONs as it needs of at most 16384 bytes (the smallest `SETTINGS_MAX_FRAME_SIZE`),
//! padding left out, priority kept. Every other frame (the preface, SETTINGS, PING, GOAWAY,
//! connection WINDOW_UPDATE, DATA of copied streams...) goes as captured, from the same shared
//! chunks.
//!
//! Malformed input (HPACK that does not decode, a CONTINUATION out of place, a PUSH_PROMISE
//! (never a client's), a HEADERS on a
//! stream id not above every one opened before that is not trailers (pseudo-headers), a HEADERS
//! payload whose padding or priority does not fit, a block above [`MAX_BLOCK`]) is an error
//! for the editor (`edit` counts it and gives the copy up): from there on the test server's
//! decoder could not be kept consistent with anything, so the rest of the connection cannot
//! pass as captured whatever `unparsable` says.
//!
//! Invariants: `have < 9` header bytes are held only between frames; `block` is set only
//! between a HEADERS frame without END_HEADERS and the CONTINUATION that ends it; `out_at_start`
//! is true when everything written so far ends at a frame boundary (the stream's unit
//! boundaries are put only there).

use std::collections::{HashSet, VecDeque};
use std::net::IpAddr;

use common::h2::{self, FrameHeader, Kind, END_HEADERS, HEADER_LEN, MIN_MAX_FRAME, PREFACE};
use common::hpack;

use super::chunk::{ByteQueue, Chunk, Meter, Payload};
use super::rules::{HeaderEdit, Req, Rules};
use super::stats::RequestCounts;

/// The largest header block (HEADERS and its CONTINUATIONs) read: beyond it the input is
/// malformed (a server's `SETTINGS_MAX_HEADER_LIST_SIZE` is usually far smaller).
pub(crate) const MAX_BLOCK: usize = 256 << 10;
/// Dropped stream ids remembered per connection (their late WINDOW_UPDATEs and RST_STREAMs are
/// dropped too); beyond it the oldest are forgotten, and a frame on one then goes, as one on
/// a closed stream that a server ignores.
const MAX_DROPPED: usize = 1 << 16;

/// Where the editor is in the frame stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Between frames (`have` bytes of the next header held).
    Head,
    /// Payload bytes of a frame that goes as captured.
    Pass(u32),
    /// Payload bytes of a frame that is dropped.
    Drop(u32),
    /// Payload bytes of a HEADERS or CONTINUATION frame, gathered.
    Collect(FrameHeader, u32),
}

/// A header block being gathered.
#[derive(Debug)]
struct Block {
    stream: u32,
    flags: u8,
    prio: Option<[u8; 5]>,
    buf: Vec<u8>,
}

/// What the editor needs of its copy's `Editor`.
pub(crate) struct Ctx<'a> {
    pub rules: &'a Rules,
    pub client: IpAddr,
    pub dye: Option<&'a [u8]>,
    pub meter: &'a Meter,
    pub counts: &'a mut RequestCounts,
}

/// Malformed HTTP/2 input; the bytes written before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed(pub usize);

/// One copy's HTTP/2 editor (see the module documentation).
#[derive(Debug)]
pub(crate) struct H2Edit {
    /// Preface bytes passed.
    preface: usize,
    head: [u8; HEADER_LEN],
    have: usize,
    at: At,
    /// The current HEADERS or CONTINUATION frame's payload.
    frag: Vec<u8>,
    block: Option<Block>,
    dec: hpack::Decoder,
    enc: hpack::Encoder,
    dropped: HashSet<u32>,
    dropped_order: VecDeque<u32>,
    /// The highest stream id a HEADERS frame opened.
    last_opened: u32,
    out_at_start: bool,
    /// Streams dropped on this connection.
    pub streams_dropped: u64,
    /// Blocks written again.
    pub blocks: u64,
}

impl H2Edit {
    /// An editor whose next byte is the preface's first.
    pub(crate) fn new() -> H2Edit {
        H2Edit {
            preface: 0,
            head: [0; HEADER_LEN],
            have: 0,
            at: At::Head,
            frag: Vec::new(),
            block: None,
            dec: hpack::Decoder::new(),
            enc: hpack::Encoder::new(),
            dropped: HashSet::new(),
            dropped_order: VecDeque::new(),
            last_opened: 0,
            out_at_start: true,
            streams_dropped: 0,
            blocks: 0,
        }
    }

    /// Whether what was written ends at a frame boundary.
    pub(crate) fn at_frame_start(&self) -> bool {
        self.out_at_start
    }

    /// Bytes held.
    pub(crate) fn held(&self) -> usize {
        std::mem::size_of::<H2Edit>()
            + self.frag.capacity()
            + self.block.as_ref().map_or(0, |b| b.buf.capacity())
            + self.dropped.capacity() * 8
            + self.dropped_order.capacity() * 4
    }

    fn emit(q: &mut ByteQueue, c: Option<Chunk>) -> usize {
        c.map_or(0, |c| {
            let n = c.len();
            q.push(c);
            n
        })
    }

    /// The client's next in-order bytes; the test side's go to `q`. Returns the bytes written.
    pub(crate) fn feed(
        &mut self,
        d: &Chunk,
        q: &mut ByteQueue,
        cx: &mut Ctx<'_>,
    ) -> Result<usize, Malformed> {
        let b = d.as_slice();
        let mut i = 0;
        let mut n = 0;
        while i < b.len() {
            let rem = b.len() - i;
            if self.preface < PREFACE.len() {
                let k = (PREFACE.len() - self.preface).min(rem);
                n += Self::emit(q, d.slice(i, i + k));
                self.preface += k;
                i += k;
                self.out_at_start = self.preface == PREFACE.len();
                continue;
            }
            match self.at {
                At::Head => {
                    let whole = self.have == 0 && rem >= HEADER_LEN;
                    let k = (HEADER_LEN - self.have).min(rem);
                    self.head[self.have..self.have + k].copy_from_slice(&b[i..i + k]);
                    self.have += k;
                    i += k;
                    if self.have < HEADER_LEN {
                        continue;
                    }
                    self.have = 0;
                    let h = FrameHeader::parse(&self.head).ok_or(Malformed(n))?;
                    if self.block.is_some() && h.kind != Kind::Continuation {
                        return Err(Malformed(n)); // a header block is not interleaved
                    }
                    match h.kind {
                        Kind::Headers | Kind::Continuation => {
                            let have = self.block.as_ref().map_or(0, |b| b.buf.len());
                            let bad_cont = h.kind == Kind::Continuation
                                && self.block.as_ref().is_none_or(|b| b.stream != h.stream);
                            if bad_cont || h.stream == 0 || have + h.len as usize > MAX_BLOCK {
                                return Err(Malformed(n));
                            }
                            self.frag.clear();
                            self.at = At::Collect(h, h.len);
                        }
                        // A client never sends one (RFC 9113 section 8.4), and its block would
                        // refer to the client's table, not this encoder's.
                        Kind::PushPromise => return Err(Malformed(n)),
                        _ if h.stream != 0 && self.dropped.contains(&h.stream) => {
                            self.at = At::Drop(h.len)
                        }
                        _ => {
                            let c = if whole {
                                d.slice(i - HEADER_LEN, i)
                            } else {
                                let mut p = Payload::new(&self.head, cx.meter);
                                p.set_last(true);
                                p.keep(0)
                            };
                            n += Self::emit(q, c);
                            self.at = At::Pass(h.len);
                            self.out_at_start = false;
                        }
                    }
                }
                At::Pass(left) | At::Drop(left) => {
                    let k = rem.min(left as usize);
                    if matches!(self.at, At::Pass(_)) {
                        n += Self::emit(q, d.slice(i, i + k));
                        self.at = At::Pass(left - k as u32);
                    } else {
                        self.at = At::Drop(left - k as u32);
                    }
                    i += k;
                }
                At::Collect(h, left) => {
                    let k = rem.min(left as usize);
                    self.frag.extend_from_slice(&b[i..i + k]);
                    i += k;
                    self.at = At::Collect(h, left - k as u32);
                }
            }
            // A frame whose payload is all read (at once for an empty one).
            match self.at {
                At::Pass(0) => {
                    self.at = At::Head;
                    self.out_at_start = true;
                }
                At::Drop(0) => self.at = At::Head,
                At::Collect(h, 0) => {
                    self.at = At::Head;
                    n += self.frame_done(h, q, cx).map_err(|()| Malformed(n))?;
                }
                _ => {}
            }
        }
        Ok(n)
    }

    /// A HEADERS or CONTINUATION frame was read whole.
    fn frame_done(
        &mut self,
        h: FrameHeader,
        q: &mut ByteQueue,
        cx: &mut Ctx<'_>,
    ) -> Result<usize, ()> {
        if h.kind == Kind::Headers {
            let (prio, frag) = h2::headers_fragment(h.flags, &self.frag).ok_or(())?;
            self.block = Some(Block {
                stream: h.stream,
                flags: h.flags,
                prio,
                buf: frag.to_vec(),
            });
        } else if let Some(b) = self.block.as_mut() {
            b.buf.extend_from_slice(&self.frag);
        }
        if self.frag.capacity() > 64 << 10 {
            self.frag = Vec::new();
        }
        if h.flags & END_HEADERS == 0 {
            return Ok(0);
        }
        let b = self.block.take().ok_or(())?;
        let mut fields = Vec::new();
        self.dec.decode(&b.buf, &mut fields).map_err(|_| ())?;
        if self.dropped.contains(&b.stream) {
            return Ok(0); // trailers of a dropped stream
        }
        if b.stream > self.last_opened {
            // A request.
            self.last_opened = b.stream;
            cx.counts.http_requests += 1;
            let verdict = {
                let (method, path, headers) = request_view(&fields);
                cx.rules.verdict(
                    cx.client,
                    &Req::Http {
                        method,
                        target: path,
                        headers: &headers,
                    },
                )
            };
            if !cx.counts.count(verdict, cx.rules.filters.len()) {
                self.drop_stream(b.stream);
                return Ok(0);
            }
            if cx.rules.edits() && edit_fields(cx.rules, cx.dye, &mut fields, cx.counts) {
                cx.counts.edited += 1;
            }
        } else if fields.iter().any(|(n, _)| n.starts_with(b":")) {
            // Trailers carry no pseudo-header (RFC 9113 section 8.1): a request on a stream id
            // not above the last one would pass unfiltered.
            return Err(());
        }
        let mut block = Vec::with_capacity(b.buf.len() + 64);
        self.enc
            .encode(fields.iter().map(|(n, v)| (&n[..], &v[..])), &mut block);
        let mut out = Vec::with_capacity(block.len() + 2 * HEADER_LEN + 5);
        h2::write_header_block(&mut out, b.stream, b.flags, b.prio, &block, MIN_MAX_FRAME);
        self.blocks += 1;
        let mut p = Payload::new(&out, cx.meter);
        p.set_last(true);
        Ok(Self::emit(q, p.keep(0)))
    }

    fn drop_stream(&mut self, id: u32) {
        self.streams_dropped += 1;
        if self.dropped_order.len() >= MAX_DROPPED {
            if let Some(old) = self.dropped_order.pop_front() {
                self.dropped.remove(&old);
            }
        }
        self.dropped.insert(id);
        self.dropped_order.push_back(id);
    }
}

/// What the filters see of a decoded request: `:method`, `:path` (empty without one, as for
/// `CONNECT`), and the regular fields, with `:authority` as `host` when no `host` field came.
fn request_view(fields: &[(Vec<u8>, Vec<u8>)]) -> (&[u8], &[u8], Vec<(&str, &[u8])>) {
    let pseudo = |name: &[u8]| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map_or(&[][..], |(_, v)| &v[..])
    };
    let mut headers: Vec<(&str, &[u8])> = fields
        .iter()
        .filter(|(n, _)| !n.starts_with(b":"))
        .filter_map(|(n, v)| Some((std::str::from_utf8(n).ok()?, &v[..])))
        .collect();
    let authority = pseudo(b":authority");
    if !authority.is_empty() && !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        headers.push(("host", authority));
    }
    (pseudo(b":method"), pseudo(b":path"), headers)
}

/// A copied request's fields, edited as the rules say (see the module documentation).
/// Returns whether anything changed.
pub(crate) fn edit_fields(
    rules: &Rules,
    dye: Option<&[u8]>,
    fields: &mut Vec<(Vec<u8>, Vec<u8>)>,
    counts: &mut RequestCounts,
) -> bool {
    let before = fields.clone();
    if !rules.rewrites.is_empty() {
        let get = |fields: &[(Vec<u8>, Vec<u8>)], n: &[u8]| {
            fields
                .iter()
                .find(|(x, _)| x == n)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let (method, path) = (get(fields, b":method"), get(fields, b":path"));
        let line = [&method[..], b" ", &path[..], b" HTTP/2.0"].concat();
        let mut new = line.clone();
        let base = rules.filters.len() + 1;
        for (i, (_, re, rep)) in rules.rewrites.iter().enumerate() {
            if re.is_match(&new) {
                new = re.replace_all(&new, rep.as_slice()).into_owned();
                counts.bump_rule(base + i);
            }
        }
        if new != line {
            // METHOD SP PATH SP VERSION: the method up to the first space, the path up to the
            // last (a rewrite that leaves no two spaces sets the method only).
            let first = new.iter().position(|&c| c == b' ').unwrap_or(new.len());
            let last = new.iter().rposition(|&c| c == b' ').filter(|&l| l > first);
            let set = |fields: &mut Vec<(Vec<u8>, Vec<u8>)>, n: &[u8], v: &[u8]| match fields
                .iter_mut()
                .find(|(x, _)| x == n)
            {
                Some(f) => f.1 = v.to_vec(),
                None => fields.insert(0, (n.to_vec(), v.to_vec())),
            };
            set(fields, b":method", &new[..first]);
            if let Some(last) = last {
                set(fields, b":path", &new[first + 1..last]);
            }
        }
    }
    // Every field named `n` goes; with `add` (or when one went) `n: v` comes last. `host` on
    // a request with `:authority` edits that instead.
    let apply = |fields: &mut Vec<(Vec<u8>, Vec<u8>)>, n: &str, v: Option<&[u8]>, add: bool| {
        let n = n.to_ascii_lowercase().into_bytes();
        if n == b"host" && v.is_some() {
            if let Some(a) = fields.iter_mut().find(|(x, _)| x == b":authority") {
                a.1 = v.unwrap_or_default().to_vec();
                fields.retain(|(x, _)| x != b"host");
                return;
            }
        }
        let count = fields.iter().filter(|(x, _)| *x == n).count();
        fields.retain(|(x, _)| *x != n);
        if let Some(v) = v.filter(|_| add || count > 0) {
            fields.push((n, v.to_vec()));
        }
    };
    if let (Some(d), Some(v)) = (&rules.dye, dye) {
        apply(fields, &d.name, Some(v), true);
    }
    for e in &rules.headers {
        match e {
            HeaderEdit::Set(n, v) => apply(fields, n, Some(&v.get()), true),
            HeaderEdit::Replace(n, v) => apply(fields, n, Some(&v.get()), false),
            HeaderEdit::Delete(n) => apply(fields, n, None, false),
        }
    }
    *fields != before
}

#[cfg(test)]
mod tests;
