//! HTTP/2 for the comparison: one direction of a connection, read frame by frame into the
//! messages of its streams, and those messages written as HTTP/1.1 for the comparator.
//!
//! Owns: [`Reader`], the state of one direction (client -> server or server -> client) of one
//! connection: its HPACK decoder (`common::hpack`, over `fluke-hpack`; the dynamic table is per direction and needs
//! every header block of the direction, whole and in order), the header block being read
//! (HEADERS or PUSH_PROMISE and its CONTINUATIONs) and the streams open in that direction.
//! [`Reader::read`] takes the bytes of the direction from the first frame on (the caller strips
//! the client's preface) and reads the whole frames at their start; [`Reader::take_done`] hands
//! the messages that ended (END_STREAM, or RST_STREAM on a stream open in this direction). A
//! message is its first final header block (`:status` 1xx interim blocks are replaced), the
//! header blocks after it (trailers: gRPC's `grpc-status` and `grpc-message`), and its DATA
//! (the first `max_body` bytes kept, the total counted). PUSH_PROMISE blocks are decoded (they
//! change the table) and their streams ignored.
//!
//! An error ([`H2Error`]) means the direction cannot be read on: a header block that does not
//! decode, a frame that breaks the framing rules this reader depends on (a CONTINUATION out of
//! place, padding longer than its frame), or past a bound (streams open, a header block's size,
//! the HPACK table's size). The caller stops comparing the connection (its later answers would
//! be decoded with a wrong table: false differences).
//!
//! [`request_as_http1`] and [`answer_as_http1`] write a message as an HTTP/1.1 message with a
//! `Content-Length` (pseudo-headers become the request line or the status line, trailers are
//! appended to the headers, hop-by-hop and framing headers are dropped), so that the
//! comparator, the noise, the endpoints and the reports take HTTP/2 as they take HTTP/1.x.
//! Bounds: at most [`MAX_STREAMS`] streams open, header blocks of at most [`MAX_BLOCK`] bytes,
//! an HPACK table of at most [`MAX_TABLE`] bytes; [`Reader::bytes`] is what the reader holds.
//! Nothing here panics on any input (fuzzed: `fuzz_targets/compare_h2`).

use std::collections::HashMap;
use std::time::Instant;

use common::h2::{FrameHeader, Kind as FrameKind, END_HEADERS, END_STREAM, HEADER_LEN};

/// Flag PADDED (DATA, HEADERS, PUSH_PROMISE).
const PADDED: u8 = 0x8;
/// Flag PRIORITY (HEADERS).
const PRIORITY: u8 = 0x20;

/// Streams open at once in one direction (peers allow 100 to a few hundred).
pub const MAX_STREAMS: usize = 1024;
/// Bytes of one header block (with its CONTINUATIONs).
pub const MAX_BLOCK: usize = 256 << 10;
/// The HPACK dynamic table's size at most (a size update past it is an error; peers use 4 KiB).
pub const MAX_TABLE: usize = common::hpack::MAX_DECODER_TABLE;

/// Why a direction cannot be read on (counted: the connection is not compared from there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum H2Error {
    /// A header block that HPACK does not decode (or a table size update past [`MAX_TABLE`]).
    #[error("header block does not decode")]
    Hpack,
    /// Padding longer than its frame, a CONTINUATION without a block before it, a block cut by
    /// another frame, a stream frame on stream 0.
    #[error("frame out of the rules")]
    Frame,
    /// More than [`MAX_STREAMS`] open streams or a header block over [`MAX_BLOCK`].
    #[error("past a bound")]
    Bound,
}

/// A header list as decoded: names and values as bytes.
pub type HeaderList = Vec<(Vec<u8>, Vec<u8>)>;

/// One message of a stream (a request or an answer).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Message {
    /// The final header block (pseudo-headers first, as sent).
    pub headers: HeaderList,
    /// Header blocks after the first final one (trailers).
    pub trailers: HeaderList,
    /// The first `max_body` bytes of DATA.
    pub body: Vec<u8>,
    /// All DATA bytes, kept or not.
    pub body_len: u64,
    /// The stream was reset (RST_STREAM error code) before it ended.
    pub reset: Option<u32>,
    /// When the stream's first frame in this direction was read.
    pub first: Option<Instant>,
}

impl Message {
    /// The value of `name` in the headers, then the trailers.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .chain(&self.trailers)
            .find(|(n, _)| n == name.as_bytes())
            .map(|(_, v)| v.as_slice())
    }

    fn size(&self) -> usize {
        self.body.len()
            + self
                .headers
                .iter()
                .chain(&self.trailers)
                .map(|(n, v)| n.len() + v.len() + 32)
                .sum::<usize>()
    }
}

/// A header block being read.
#[derive(Debug)]
struct Block {
    stream: u32,
    /// HEADERS with END_STREAM.
    end_stream: bool,
    /// A PUSH_PROMISE block (decoded, then dropped).
    promise: bool,
    bytes: Vec<u8>,
}

/// One direction of one connection (see the module doc).
pub struct Reader {
    hpack: common::hpack::Decoder,
    block: Option<Block>,
    streams: HashMap<u32, Message>,
    done: Vec<(u32, Message)>,
    max_body: usize,
    held: usize,
    /// Frames read.
    pub frames: u64,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("streams", &self.streams.len())
            .field("held", &self.held)
            .finish()
    }
}

impl Reader {
    /// A reader that keeps at most `max_body` bytes of each message's DATA.
    pub fn new(max_body: usize) -> Reader {
        Reader {
            hpack: common::hpack::Decoder::new(),
            block: None,
            streams: HashMap::new(),
            done: Vec::new(),
            max_body,
            held: 0,
            frames: 0,
        }
    }

    /// Bytes held: the open streams' headers and bodies, the block being read, the ended
    /// messages not taken yet (the HPACK table, at most [`MAX_TABLE`], is not counted).
    pub fn bytes(&self) -> usize {
        self.held + self.block.as_ref().map_or(0, |b| b.bytes.len())
    }

    /// Streams open in this direction.
    pub fn open(&self) -> usize {
        self.streams.len()
    }

    /// Reads the first frame of `bytes` when it is whole: the bytes it took, or 0 when the
    /// frame is not whole yet (the caller gives those bytes again with more).
    pub fn read(&mut self, bytes: &[u8], now: Instant) -> Result<usize, H2Error> {
        let Some(h) = FrameHeader::parse(bytes) else {
            return Ok(0);
        };
        let total = HEADER_LEN + h.len as usize;
        if bytes.len() < total {
            return Ok(0);
        }
        self.frames += 1;
        self.frame(h, &bytes[HEADER_LEN..total], now)?;
        Ok(total)
    }

    /// The messages that ended since the last call: (stream id, message).
    pub fn take_done(&mut self) -> Vec<(u32, Message)> {
        let done = std::mem::take(&mut self.done);
        self.held -= done.iter().map(|(_, m)| m.size()).sum::<usize>();
        done
    }

    fn frame(&mut self, h: FrameHeader, p: &[u8], now: Instant) -> Result<(), H2Error> {
        if let Some(b) = &mut self.block {
            // RFC 9113 6.10: nothing but the block's CONTINUATIONs until END_HEADERS
            if h.kind != FrameKind::Continuation || h.stream != b.stream {
                return Err(H2Error::Frame);
            }
            if b.bytes.len() + p.len() > MAX_BLOCK {
                return Err(H2Error::Bound);
            }
            b.bytes.extend_from_slice(p);
            if h.flags & END_HEADERS != 0 {
                let b = self.block.take().ok_or(H2Error::Frame)?;
                self.end_block(b, now)?;
            }
            return Ok(());
        }
        match h.kind {
            FrameKind::Headers | FrameKind::PushPromise => {
                if h.stream == 0 {
                    return Err(H2Error::Frame);
                }
                let mut p = unpad(h.flags, p)?;
                let promise = h.kind == FrameKind::PushPromise;
                let skip = if promise {
                    4
                } else if h.flags & PRIORITY != 0 {
                    5
                } else {
                    0
                };
                p = p.get(skip..).ok_or(H2Error::Frame)?;
                if p.len() > MAX_BLOCK {
                    return Err(H2Error::Bound);
                }
                let b = Block {
                    stream: h.stream,
                    end_stream: !promise && h.flags & END_STREAM != 0,
                    promise,
                    bytes: p.to_vec(),
                };
                if h.flags & END_HEADERS != 0 {
                    self.end_block(b, now)?;
                } else {
                    self.block = Some(b);
                }
            }
            FrameKind::Continuation => return Err(H2Error::Frame),
            FrameKind::Data => {
                if h.stream == 0 {
                    return Err(H2Error::Frame);
                }
                let p = unpad(h.flags, p)?;
                let max_body = self.max_body;
                let m = self.stream(h.stream, now)?;
                let keep = max_body.saturating_sub(m.body.len()).min(p.len());
                m.body.extend_from_slice(&p[..keep]);
                m.body_len += p.len() as u64;
                self.held += keep;
                if h.flags & END_STREAM != 0 {
                    self.end(h.stream);
                }
            }
            FrameKind::RstStream => {
                // a stream open in this direction ends here; others (ended, never opened) are
                // not messages of this direction
                if let (Some(m), Some(code)) = (self.streams.get_mut(&h.stream), p.get(..4)) {
                    m.reset = Some(u32::from_be_bytes([code[0], code[1], code[2], code[3]]));
                    self.end(h.stream);
                }
            }
            _ => {} // SETTINGS, PING, GOAWAY, WINDOW_UPDATE, PRIORITY, extensions
        }
        Ok(())
    }

    fn stream(&mut self, id: u32, now: Instant) -> Result<&mut Message, H2Error> {
        if !self.streams.contains_key(&id) && self.streams.len() >= MAX_STREAMS {
            return Err(H2Error::Bound);
        }
        let m = self.streams.entry(id).or_default();
        m.first.get_or_insert(now);
        Ok(m)
    }

    fn end(&mut self, id: u32) {
        if let Some(m) = self.streams.remove(&id) {
            self.done.push((id, m));
        }
    }

    fn end_block(&mut self, b: Block, now: Instant) -> Result<(), H2Error> {
        // common::hpack checks the block's shape first (fluke-hpack panics on some malformed
        // size updates) and refuses every block after a bad one (the table is unknown then).
        let mut list = HeaderList::new();
        self.hpack
            .decode(&b.bytes, &mut list)
            .map_err(|_| H2Error::Hpack)?;
        if b.promise {
            return Ok(());
        }
        let size: usize = list.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
        let m = self.stream(b.stream, now)?;
        let interim = |l: &HeaderList| {
            l.iter()
                .any(|(n, v)| n == b":status" && v.first() == Some(&b'1') && v.as_slice() != b"101")
        };
        let old = if m.headers.is_empty() || interim(&m.headers) {
            let old: usize = m.headers.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
            m.headers = list;
            old
        } else {
            m.trailers.extend(list);
            0
        };
        self.held = self.held + size - old;
        if b.end_stream {
            self.end(b.stream);
        }
        Ok(())
    }
}

/// The payload without its padding (flag PADDED: a length byte first, that many bytes last).
fn unpad(flags: u8, p: &[u8]) -> Result<&[u8], H2Error> {
    if flags & PADDED == 0 {
        return Ok(p);
    }
    let (&pad, rest) = p.split_first().ok_or(H2Error::Frame)?;
    rest.len()
        .checked_sub(usize::from(pad))
        .map(|n| &rest[..n])
        .ok_or(H2Error::Frame)
}

/// Headers that describe the framing or the connection, not the message (RFC 9113 8.2.2), left
/// out of the HTTP/1.1 form; `Content-Length` is written afresh.
const DROPPED: &[&[u8]] = &[
    b"content-length",
    b"transfer-encoding",
    b"connection",
    b"keep-alive",
    b"upgrade",
    b"proxy-connection",
    b"te",
];

/// A header name as an HTTP/1.1 token (lowercase; other bytes become `_`).
fn token(n: &[u8]) -> String {
    n.iter()
        .map(|&c| match c {
            b'a'..=b'z'
            | b'0'..=b'9'
            | b'-'
            | b'_'
            | b'.'
            | b'!'
            | b'#'
            | b'$'
            | b'%'
            | b'&'
            | b'\''
            | b'*'
            | b'+'
            | b'^'
            | b'`'
            | b'|'
            | b'~' => c as char,
            b'A'..=b'Z' => c.to_ascii_lowercase() as char,
            _ => '_',
        })
        .collect()
}

/// A header value on one line (control bytes become spaces; bytes past ASCII as `\xNN`).
fn value(v: &[u8]) -> String {
    let mut s = String::with_capacity(v.len());
    for &c in v {
        match c {
            b'\t' | b' '..=b'~' => s.push(c as char),
            0..=0x1f | 0x7f => s.push(' '),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s.trim().to_string()
}

fn pseudo<'a>(l: &'a HeaderList, name: &str) -> Option<&'a [u8]> {
    l.iter()
        .find(|(n, _)| n == name.as_bytes())
        .map(|(_, v)| v.as_slice())
}

fn write_fields(out: &mut Vec<u8>, m: &Message) {
    for (n, v) in m.headers.iter().chain(&m.trailers) {
        if n.first() == Some(&b':')
            || n.is_empty()
            || DROPPED.contains(&n.to_ascii_lowercase().as_slice())
        {
            continue;
        }
        out.extend_from_slice(format!("{}: {}\r\n", token(n), value(v)).as_bytes());
    }
    out.extend_from_slice(format!("content-length: {}\r\n\r\n", m.body_len).as_bytes());
    out.extend_from_slice(&m.body);
}

/// A request as HTTP/1.1: `:method` and `:path` as the request line, `:authority` as `host`,
/// the other headers and the trailers, `Content-Length` of all its DATA, the body kept.
pub fn request_as_http1(m: &Message) -> Vec<u8> {
    let method = pseudo(&m.headers, ":method")
        .map(token)
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| "GET".into())
        .to_ascii_uppercase();
    let path = pseudo(&m.headers, ":path")
        .map(value)
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or_else(|| "/".into());
    let mut out = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    if let Some(a) = pseudo(&m.headers, ":authority") {
        out.extend_from_slice(format!("host: {}\r\n", value(a)).as_bytes());
    }
    write_fields(&mut out, m);
    out
}

/// An answer as HTTP/1.1: `:status` as the status line (`000` when the stream was reset before
/// its headers, or ended with an interim 1xx status, or with no valid status), the headers and then the trailers as headers (`grpc-status` is a header field
/// whether it came in the trailers or in a trailers-only answer), an `x-h2-reset` header with
/// the error code of a reset stream, `Content-Length` of all its DATA, the body kept.
pub fn answer_as_http1(m: &Message) -> Vec<u8> {
    let status = pseudo(&m.headers, ":status")
        .filter(|s| {
            s.len() == 3 && s.iter().all(u8::is_ascii_digit) && (s[0] != b'1' || s == b"101")
        })
        .map_or("000".to_string(), |s| {
            String::from_utf8_lossy(s).into_owned()
        });
    let mut out = format!("HTTP/1.1 {status} \r\n").into_bytes();
    if let Some(code) = m.reset {
        out.extend_from_slice(format!("x-h2-reset: {code}\r\n").as_bytes());
    }
    write_fields(&mut out, m);
    out
}

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod shape_tests {
    use super::*;

    /// The fuzz find (a size update whose integer does not end, which fluke-hpack unwraps) is
    /// an HPACK error of the connection, not a panic; the shape check itself is
    /// `common::hpack`'s and tested there.
    #[test]
    fn a_malformed_block_is_an_error() {
        let mut r = Reader::new(8);
        let f = tests::frame(1, END_HEADERS | END_STREAM, 1, &[0x3f, 0xff, 0xff]);
        assert_eq!(r.read(&f, Instant::now()), Err(H2Error::Hpack));
    }
}
