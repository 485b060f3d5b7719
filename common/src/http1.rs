//! HTTP/1.x message framing: the one place that says how long a request or an answer is.
//!
//! Owns: [`body`] (the framing decision from a parsed head: `Content-Length` with its checks,
//! `Transfer-Encoding: chunked`, answers without a body, answers that run until the connection
//! closes), [`Chunks`] (an incremental walker over a chunked body: fed bytes in any pieces, it
//! hands out each chunk's data and says where the body ends, that it needs more, or that it is
//! malformed), and [`message_len`] (where the message at the start of a buffer ends, interim
//! `1xx` answers included). Heads are read by `httparse`; nothing here panics on any input
//! (fuzzed: `fuzz_targets/http1_framing`).
//!
//! Two readers use it, and they differ on malformed input only, so each names its [`Mode`]:
//! the copier's request editor relays requests to a test server, which must agree with it on
//! where each request ends ([`Mode::Relay`]: RFC 9112 section 6.3 read strictly, lines at most
//! [`MAX_LINE`] bytes); the comparison reads captured answers as far as they go
//! ([`Mode::Capture`]: a chunked coding anywhere in the list counts, a `Content-Length` may be a
//! list of equal values, the CRLF after each chunk's data is checked).

/// The longest chunk-size or trailer line in [`Mode::Relay`].
pub const MAX_LINE: usize = 4096;
/// Heads with more headers than this are malformed for [`message_len`].
const MAX_HEADERS: usize = 96;

/// How strictly a head's framing headers and a chunked body are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The copier's editor, relaying to a server: every `Transfer-Encoding` header must end in
    /// `chunked`; a `Content-Length` is one decimal number up to 2^63-1; chunk-size and trailer
    /// lines end at their first LF and hold at most [`MAX_LINE`] bytes; the two bytes after a
    /// chunk's data are skipped unread.
    Relay,
    /// The comparison, reading what was captured: `chunked` anywhere in a `Transfer-Encoding`
    /// counts (other codings are ignored); a `Content-Length` may repeat one value (`5, 5`);
    /// chunk-size lines end at CRLF (httparse's rule), trailer lines too; the CRLF after a
    /// chunk's data is checked once both bytes are there.
    Capture,
}

/// Which message a head starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// A request (no length: no body).
    Request,
    /// An answer with this status; `to_head`: the request was `HEAD`.
    Answer {
        /// Status code.
        status: u16,
        /// The request was `HEAD` (the answer has no body).
        to_head: bool,
    },
}

/// How a message's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// No body: a request without a length; an answer to `HEAD`, a `1xx`, `204` or `304`.
    None,
    /// `Content-Length` bytes (possibly 0).
    Length(u64),
    /// Chunked coding (walk it with [`Chunks`]).
    Chunked,
    /// An answer without a length: the body runs until the connection closes.
    UntilClose,
}

/// Why a message's length cannot be known (malformed for the reader, never a crash).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// httparse refused the head.
    #[error("bad head: {0}")]
    Head(String),
    /// A `Content-Length` that is not a number (relaying: or above 2^63-1, or a list).
    #[error("bad Content-Length")]
    ContentLength,
    /// Two `Content-Length` values that disagree.
    #[error("conflicting Content-Length values")]
    ContentLengths,
    /// Relaying: a `Transfer-Encoding` whose last coding is not `chunked` (no end to find).
    #[error("transfer coding other than chunked")]
    TransferCoding,
    /// A bad chunk-size line (not hexadecimal, too long) or no CRLF after a chunk's data, at
    /// this offset of the body.
    #[error("bad chunk at body offset {0}")]
    Chunk(u64),
}

/// Whether an answer with this status is interim (`100 Continue`, `103 Early Hints`): the
/// final answer follows it. `101 Switching Protocols` is final.
pub fn interim(status: u16) -> bool {
    (100..200).contains(&status) && status != 101
}

/// The body's framing from a head's headers (`(name, value)` in order, names in any case).
pub fn body<N, V>(
    headers: impl IntoIterator<Item = (N, V)>,
    msg: Message,
    mode: Mode,
) -> Result<Body, FramingError>
where
    N: AsRef<str>,
    V: AsRef<[u8]>,
{
    if let Message::Answer { status, to_head } = msg {
        if to_head || (100..200).contains(&status) || status == 204 || status == 304 {
            return Ok(Body::None);
        }
    }
    let mut chunked = false;
    let mut len: Option<u64> = None;
    // Capture: the first bad length, which a chunked coding makes moot.
    let mut bad_len = None;
    for (n, v) in headers {
        let (n, v) = (n.as_ref(), v.as_ref());
        if n.eq_ignore_ascii_case("transfer-encoding") {
            match mode {
                Mode::Relay => {
                    let last = v.rsplit(|&c| c == b',').next().unwrap_or_default();
                    if !last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                        return Err(FramingError::TransferCoding);
                    }
                    chunked = true;
                }
                Mode::Capture => {
                    chunked |= String::from_utf8_lossy(v)
                        .to_ascii_lowercase()
                        .split(',')
                        .any(|p| p.trim() == "chunked");
                }
            }
        } else if n.eq_ignore_ascii_case("content-length") && bad_len.is_none() {
            match content_length(v, mode, &mut len) {
                // Relaying, a bad length is malformed even beside a chunked coding.
                Err(e) if mode == Mode::Relay => return Err(e),
                Err(e) => bad_len = Some(e),
                Ok(()) => {}
            }
        }
    }
    match (chunked, bad_len) {
        (true, _) => Ok(Body::Chunked),
        (false, Some(e)) => Err(e),
        (false, None) => Ok(match (len, msg) {
            (Some(l), _) => Body::Length(l),
            (None, Message::Request) => Body::None,
            (None, Message::Answer { .. }) => Body::UntilClose,
        }),
    }
}

/// One `Content-Length` value, checked against the ones before (`len`).
fn content_length(v: &[u8], mode: Mode, len: &mut Option<u64>) -> Result<(), FramingError> {
    let mut one = |l: u64| match *len {
        Some(c) if c != l => Err(FramingError::ContentLengths),
        _ => {
            *len = Some(l);
            Ok(())
        }
    };
    match mode {
        Mode::Relay => {
            // Above 2^63-1 is malformed (RFC 9110 servers refuse it too); `u64::MAX` would
            // also read as "the rest of the stream" to a byte counter.
            let l = std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .filter(|&l| l <= i64::MAX as u64)
                .ok_or(FramingError::ContentLength)?;
            one(l)
        }
        Mode::Capture => {
            let s = String::from_utf8_lossy(v);
            for part in s.trim().split(',') {
                let l: usize = part
                    .trim()
                    .parse()
                    .map_err(|_| FramingError::ContentLength)?;
                one(l as u64)?;
            }
            Ok(())
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// A chunk-size line (held in `line`).
    Size,
    /// This many bytes of chunk data left.
    Data(u64),
    /// The CRLF after a chunk's data; the first byte, once seen.
    Crlf(Option<u8>),
    /// A trailer line (the last chunk came): its length so far and whether its last byte was
    /// CR.
    Trailer { len: usize, cr: bool },
    /// The empty line after the trailers came: the body ended.
    Done,
}

/// What one [`Chunks::feed`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fed {
    /// Bytes of the input read (the rest, after the end of the body, is not).
    pub used: usize,
    /// The body ended (its trailers included) within them.
    pub done: bool,
}

/// A malformed chunked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("bad chunk at body offset {at}")]
pub struct ChunkError {
    /// The offset in the body of the bad line (or of the missing CRLF).
    pub at: u64,
    /// Bytes of this input read before the walker knew (the bad byte included).
    pub read: usize,
}

impl From<ChunkError> for FramingError {
    fn from(e: ChunkError) -> Self {
        FramingError::Chunk(e.at)
    }
}

/// An incremental walker over a chunked body: feed it the body's bytes in any pieces; it hands
/// out each chunk's data, and says where the body ends (after its trailers), that it needs
/// more, or that it is malformed. Cutting the input differently gives the same result (a
/// property test and the fuzz target `http1_framing` check it).
#[derive(Debug, Clone)]
pub struct Chunks {
    mode: Mode,
    st: St,
    /// The chunk-size line being read.
    line: Vec<u8>,
    /// Body offset of the next byte fed.
    pos: u64,
    /// Body offset where the current line (or CRLF) started.
    mark: u64,
    /// The last chunk's size line was read.
    last: bool,
}

impl Chunks {
    /// A walker at the start of a chunked body.
    pub fn new(mode: Mode) -> Chunks {
        Chunks {
            mode,
            st: St::Size,
            line: Vec::new(),
            pos: 0,
            mark: 0,
            last: false,
        }
    }

    /// Whether the last (zero-size) chunk came: the data is whole, trailers may follow.
    pub fn last_chunk(&self) -> bool {
        self.last
    }

    /// Whether the body ended (trailers included).
    pub fn done(&self) -> bool {
        self.st == St::Done
    }

    /// Bytes of the body read so far.
    pub fn offset(&self) -> u64 {
        self.pos
    }

    /// Bytes held (a chunk-size line not yet whole).
    pub fn held(&self) -> usize {
        self.line.capacity()
    }

    /// Reads `b`, the body's next bytes. `data` gets each piece of chunk data as it comes (a
    /// slice of `b`) and answers whether to go on: `false` stops the walk right after that
    /// piece (`used` ends there). Stops at the end of the body.
    pub fn feed(
        &mut self,
        b: &[u8],
        mut data: impl FnMut(&[u8]) -> bool,
    ) -> Result<Fed, ChunkError> {
        let mut i = 0;
        while i < b.len() && self.st != St::Done {
            match self.st {
                St::Data(left) => {
                    let take = (b.len() - i).min(usize::try_from(left).unwrap_or(usize::MAX));
                    let go_on = data(&b[i..i + take]);
                    self.step(take);
                    i += take;
                    let left = left - take as u64;
                    self.st = if left == 0 {
                        self.mark = self.pos;
                        St::Crlf(None)
                    } else {
                        St::Data(left)
                    };
                    if !go_on {
                        break;
                    }
                }
                St::Crlf(first) => {
                    let c = b[i];
                    i += 1;
                    self.step(1);
                    match first {
                        None => self.st = St::Crlf(Some(c)),
                        Some(f) => {
                            if self.mode == Mode::Capture && [f, c] != *b"\r\n" {
                                return Err(self.fault(i));
                            }
                            self.mark = self.pos;
                            self.st = St::Size;
                        }
                    }
                }
                St::Size => {
                    let c = b[i];
                    i += 1;
                    self.step(1);
                    self.line.push(c);
                    if self.mode == Mode::Relay && self.line.len() > MAX_LINE {
                        return Err(self.fault(i));
                    }
                    if c == b'\n' {
                        self.size_line(i)?;
                    }
                }
                St::Trailer { len, cr } => {
                    let c = b[i];
                    i += 1;
                    self.step(1);
                    let len = len + 1;
                    if self.mode == Mode::Relay && len > MAX_LINE {
                        return Err(self.fault(i));
                    }
                    let end = match self.mode {
                        Mode::Relay => c == b'\n',
                        Mode::Capture => c == b'\n' && cr,
                    };
                    self.st = if !end {
                        St::Trailer {
                            len,
                            cr: c == b'\r',
                        }
                    } else if len == 1 || (len == 2 && cr) {
                        St::Done // the empty line
                    } else {
                        self.mark = self.pos;
                        St::Trailer { len: 0, cr: false }
                    };
                }
                St::Done => break,
            }
        }
        if self.mode == Mode::Capture && self.st == St::Size && !self.line.is_empty() {
            // A size line cut by the input: httparse may already refuse what there is.
            if httparse::parse_chunk_size(&self.line).is_err() {
                return Err(self.fault(i));
            }
        }
        Ok(Fed {
            used: i,
            done: self.st == St::Done,
        })
    }

    fn step(&mut self, n: usize) {
        self.pos += n as u64;
    }

    fn fault(&mut self, read: usize) -> ChunkError {
        self.line.clear();
        ChunkError {
            at: self.mark,
            read,
        }
    }

    /// A chunk-size line ended with LF (`line` holds it).
    fn size_line(&mut self, read: usize) -> Result<(), ChunkError> {
        match httparse::parse_chunk_size(&self.line) {
            Ok(httparse::Status::Complete((_, size))) => {
                self.line.clear();
                self.mark = self.pos;
                if size == 0 {
                    self.last = true;
                    self.st = St::Trailer { len: 0, cr: false };
                } else {
                    self.st = St::Data(size);
                }
                Ok(())
            }
            // An LF inside a chunk extension: httparse reads on to the CRLF.
            Ok(httparse::Status::Partial) if self.mode == Mode::Capture => Ok(()),
            _ => Err(self.fault(read)),
        }
    }
}

/// Where a message ends, as far as its bytes so far tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// More bytes are needed to know.
    Incomplete,
    /// The message is this many bytes long.
    Complete(usize),
    /// The message is `head` bytes of head and `body` bytes of body (`Content-Length`), of which
    /// not all came yet: a caller that will not keep them all can skip the rest by count.
    Sized {
        /// Head length.
        head: usize,
        /// Body length.
        body: usize,
    },
    /// The body runs until the connection closes.
    UntilClose,
}

/// Where the request or answer at the start of `bytes` ends. `head_request`: an answer to a
/// `HEAD` (no body). Interim `1xx` answers count as part of the answer that follows them.
pub fn message_len(
    bytes: &[u8],
    is_request: bool,
    head_request: bool,
    mode: Mode,
) -> Result<Framing, FramingError> {
    let mut off = 0;
    loop {
        let rest = &bytes[off..];
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let (head_len, msg, hs) = if is_request {
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(rest) {
                Ok(httparse::Status::Complete(n)) => (n, Message::Request, req.headers),
                Ok(httparse::Status::Partial) => return Ok(Framing::Incomplete),
                Err(e) => return Err(FramingError::Head(e.to_string())),
            }
        } else {
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(rest) {
                Ok(httparse::Status::Complete(n)) => {
                    let status = resp.code.unwrap_or(0);
                    let msg = Message::Answer {
                        status,
                        to_head: head_request,
                    };
                    (n, msg, resp.headers)
                }
                Ok(httparse::Status::Partial) => return Ok(Framing::Incomplete),
                Err(e) => return Err(FramingError::Head(e.to_string())),
            }
        };
        if let Message::Answer { status, .. } = msg {
            if interim(status) {
                off += head_len;
                continue;
            }
        }
        let head = off + head_len;
        let have = rest.len() - head_len;
        return Ok(
            match body(hs.iter().map(|h| (h.name, h.value)), msg, mode)? {
                Body::None => Framing::Complete(head),
                Body::Chunked => match chunked_len(&rest[head_len..], mode)? {
                    Some(n) => Framing::Complete(head + n),
                    None => Framing::Incomplete,
                },
                Body::Length(n) => match usize::try_from(n) {
                    Ok(n) if have >= n => Framing::Complete(head + n),
                    Ok(n) => Framing::Sized { head, body: n },
                    Err(_) => return Err(FramingError::ContentLength),
                },
                Body::UntilClose => Framing::UntilClose,
            },
        );
    }
}

/// The length of a whole chunked body (trailers included), or None when it has not ended.
pub fn chunked_len(body: &[u8], mode: Mode) -> Result<Option<usize>, ChunkError> {
    let fed = Chunks::new(mode).feed(body, |_| true)?;
    Ok(fed.done.then_some(fed.used))
}

/// De-chunks a whole (or cut) chunked body: the data (at most `max` bytes) and whether the
/// last chunk came before the bytes, or `max`, ran out. Trailers are not read.
pub fn dechunk(body: &[u8], max: usize, mode: Mode) -> Result<(Vec<u8>, bool), ChunkError> {
    let mut out = Vec::new();
    let mut w = Chunks::new(mode);
    let mut stopped = false;
    w.feed(body, |data| {
        let room = max.saturating_sub(out.len());
        out.extend_from_slice(&data[..data.len().min(room)]);
        stopped = out.len() >= max;
        !stopped
    })?;
    Ok((out, w.last_chunk() && !stopped))
}

#[cfg(test)]
mod tests;
