//! HTTP/1.x answers and request heads, parsed for comparison.
//!
//! Owns: [`parse_answer`] (status line and headers by `httparse`; the body framed as
//! `common::http1` says in its capture mode (`Content-Length`, `Transfer-Encoding: chunked` or
//! the end of the bytes; de-chunked by its walker); `Content-Encoding: gzip` decoded by
//! `flate2`) and [`parse_request_head`] (method and target). [`message_len`] is
//! `common::http1::message_len` in capture mode, with this module's errors. The bytes given may
//! be cut (the first K bytes of an answer): a cut body is parsed as far as it goes and marked
//! [`Answer::complete`]` == false`, never an error. A decoded body never grows past
//! [`Limits::max_body`]. Nothing here panics on any input (fuzzed: `fuzz_targets/compare_parse`).

use std::io::Read;

pub use common::http1::Framing;
use common::http1::{self, Body, FramingError, Message, Mode};

/// Heads with more headers than this are malformed for us.
const MAX_HEADERS: usize = 96;

/// What the parser may spend on one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest decoded body kept (bytes); the rest is cut and the answer marked incomplete.
    pub max_body: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_body: 4 << 20 }
    }
}

/// Why bytes are not an HTTP/1.x answer or request (counted as malformed, never a crash).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// The head does not end within the bytes given.
    #[error("head cut before its end ({0} bytes)")]
    PartialHead(usize),
    /// httparse refused the head.
    #[error("bad head: {0}")]
    Head(String),
    /// A `Content-Length` that is not a number, or two that disagree.
    #[error("bad Content-Length")]
    ContentLength,
    /// A chunk size line that is not hexadecimal.
    #[error("bad chunk size at body offset {0}")]
    Chunk(usize),
}

impl From<FramingError> for HttpError {
    fn from(e: FramingError) -> Self {
        match e {
            FramingError::Head(h) => HttpError::Head(h),
            FramingError::Chunk(at) => HttpError::Chunk(usize::try_from(at).unwrap_or(usize::MAX)),
            // capture mode never refuses a transfer coding; a length is all that is left
            FramingError::ContentLength
            | FramingError::ContentLengths
            | FramingError::TransferCoding => HttpError::ContentLength,
        }
    }
}

impl From<http1::ChunkError> for HttpError {
    fn from(e: http1::ChunkError) -> Self {
        FramingError::from(e).into()
    }
}

/// One parsed answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Status code (the final one when `100 Continue` answers came first).
    pub status: u16,
    /// Header names lowercased, in order; repeated names stay repeated.
    pub headers: Vec<(String, String)>,
    /// The body after de-chunking and gzip decoding (at most `Limits::max_body`).
    pub body: Vec<u8>,
    /// Whether the whole body was there (false: cut by the capture, the record, or the limit).
    pub complete: bool,
    /// Whether the body was gzip-encoded (and decoded here).
    pub gzip: bool,
}

impl Answer {
    /// The value of header `name` (lowercase), repeated ones joined by ", ".
    pub fn header(&self, name: &str) -> Option<String> {
        let mut vals = self
            .headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str());
        let first = vals.next()?;
        Some(vals.fold(first.to_string(), |acc, v| acc + ", " + v))
    }

    /// Whether the body is declared JSON (`application/json`, `+json`).
    pub fn is_json(&self) -> bool {
        self.header("content-type").is_some_and(|ct| {
            let ct = ct.to_ascii_lowercase();
            let mime = ct.split(';').next().unwrap_or("").trim().to_string();
            mime == "application/json" || mime.ends_with("+json")
        })
    }
}

/// Whether bytes look like the start of an HTTP/1.x answer.
pub fn looks_like_answer(bytes: &[u8]) -> bool {
    bytes.starts_with(b"HTTP/1.")
}

/// A request's method and target (the first line), and where its head ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The request target as sent (path and query).
    pub target: String,
    /// Length of the head (the body starts there), when it ended within the bytes given.
    pub head_len: Option<usize>,
}

/// Reads the request line (and, when present, the end of the head) of an HTTP/1.x request.
/// A head cut after its first line still gives the method and target.
pub fn parse_request_head(bytes: &[u8]) -> Result<RequestHead, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(bytes) {
        Ok(status) => {
            let (Some(m), Some(t)) = (req.method, req.path) else {
                return Err(HttpError::PartialHead(bytes.len()));
            };
            Ok(RequestHead {
                method: m.to_string(),
                target: t.to_string(),
                head_len: status.is_complete().then(|| status.unwrap()),
            })
        }
        Err(e) => Err(HttpError::Head(e.to_string())),
    }
}

/// Parses an answer from `bytes` (possibly cut). `head_request`: the request was `HEAD` (no body).
pub fn parse_answer(bytes: &[u8], head_request: bool, limits: Limits) -> Result<Answer, HttpError> {
    let mut rest = bytes;
    loop {
        let (status, headers, head_len) = parse_head(rest)?;
        let body_bytes = &rest[head_len..];
        // interim answers (100 Continue, 103 Early Hints) precede the final one
        if http1::interim(status) {
            rest = body_bytes;
            continue;
        }
        let mut ans = Answer {
            status,
            headers,
            body: Vec::new(),
            complete: true,
            gzip: false,
        };
        let no_body = head_request || status == 204 || status == 304 || status == 101;
        if !no_body {
            read_body(&mut ans, body_bytes, limits)?;
        }
        return Ok(ans);
    }
}

/// An answer's head: its status, its header lines and its length in bytes.
type Head = (u16, Vec<(String, String)>, usize);

fn parse_head(bytes: &[u8]) -> Result<Head, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(bytes) {
        Ok(httparse::Status::Complete(n)) => {
            let status = resp.code.unwrap_or(0);
            Ok((status, lower(resp.headers), n))
        }
        Ok(httparse::Status::Partial) => Err(HttpError::PartialHead(bytes.len())),
        Err(e) => Err(HttpError::Head(e.to_string())),
    }
}

fn read_body(ans: &mut Answer, body: &[u8], limits: Limits) -> Result<(), HttpError> {
    let msg = Message::Answer {
        status: ans.status,
        to_head: false,
    };
    let framing = http1::body(
        ans.headers.iter().map(|(n, v)| (n, v.as_bytes())),
        msg,
        Mode::Capture,
    )?;
    let raw: Vec<u8>;
    let mut complete;
    match framing {
        Body::Chunked => {
            // trailers are not compared
            (raw, complete) = http1::dechunk(body, limits.max_body, Mode::Capture)?;
        }
        Body::Length(cl) => {
            let cl = usize::try_from(cl).unwrap_or(usize::MAX);
            let have = body.len().min(cl).min(limits.max_body);
            raw = body[..have].to_vec();
            complete = have == cl;
        }
        Body::UntilClose | Body::None => {
            let have = body.len().min(limits.max_body);
            raw = body[..have].to_vec();
            complete = have == body.len();
        }
    }
    let gzip = ans.header("content-encoding").is_some_and(|ce| {
        ce.to_ascii_lowercase()
            .split(',')
            .any(|p| p.trim() == "gzip")
    });
    if gzip {
        let (plain, whole) = gunzip(&raw, limits.max_body);
        ans.body = plain;
        ans.gzip = true;
        complete &= whole;
    } else {
        ans.body = raw;
    }
    ans.complete = complete;
    Ok(())
}

/// Decodes a gzip stream as far as it goes (at most `max` bytes out); whether it ended cleanly.
fn gunzip(data: &[u8], max: usize) -> (Vec<u8>, bool) {
    let mut dec = flate2::read::MultiGzDecoder::new(data).take(max as u64 + 1);
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match dec.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (cut(out, max), false),
        }
    }
    let whole = out.len() <= max;
    (cut(out, max), whole)
}

fn cut(mut v: Vec<u8>, max: usize) -> Vec<u8> {
    v.truncate(max);
    v
}

/// Where the request or answer at the start of `bytes` ends. `head_request`: an answer to a
/// `HEAD` (no body). Interim `1xx` answers count as part of the answer that follows them.
pub fn message_len(
    bytes: &[u8],
    is_request: bool,
    head_request: bool,
) -> Result<Framing, HttpError> {
    Ok(http1::message_len(
        bytes,
        is_request,
        head_request,
        Mode::Capture,
    )?)
}

fn lower(hs: &[httparse::Header<'_>]) -> Vec<(String, String)> {
    hs.iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value).trim().to_string(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn content_length_body() {
        let a = parse_answer(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2\r\n\r\nhelloEXTRA",
            false,
            Limits::default(),
        )
        .unwrap();
        assert_eq!(a.status, 200);
        assert_eq!(a.body, b"hello");
        assert!(a.complete);
        assert_eq!(a.header("x-a").as_deref(), Some("1, 2"));
    }

    #[test]
    fn cut_body_is_incomplete_not_an_error() {
        let a = parse_answer(
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel",
            false,
            Limits::default(),
        )
        .unwrap();
        assert_eq!(a.body, b"hel");
        assert!(!a.complete);
    }

    #[test]
    fn chunked_body() {
        let a = parse_answer(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n",
            false,
            Limits::default(),
        )
        .unwrap();
        assert_eq!(a.body, b"hello world");
        assert!(a.complete);
        let cut = parse_answer(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n wo",
            false,
            Limits::default(),
        )
        .unwrap();
        assert_eq!(cut.body, b"hello wo");
        assert!(!cut.complete);
        assert_eq!(
            parse_answer(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                false,
                Limits::default()
            ),
            Err(HttpError::Chunk(0))
        );
        assert_eq!(
            parse_answer(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nabc",
                false,
                Limits::default()
            ),
            Err(HttpError::Chunk(4))
        );
    }

    #[test]
    fn gzip_chunked_and_cut() {
        let plain: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let z = gz(&plain);
        let mut bytes = format!(
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
            z.len()
        )
        .into_bytes();
        bytes.extend_from_slice(&z);
        bytes.extend_from_slice(b"\r\n0\r\n\r\n");
        let a = parse_answer(&bytes, false, Limits::default()).unwrap();
        assert!(a.gzip && a.complete);
        assert_eq!(a.body, plain);
        // cut in the middle: a prefix of the plain text, incomplete
        let a = parse_answer(&bytes[..bytes.len() / 2], false, Limits::default()).unwrap();
        assert!(!a.complete);
        assert!(!a.body.is_empty() && plain.starts_with(&a.body));
        // the limit bounds what is decoded (a gzip bomb stays small)
        let a = parse_answer(&bytes, false, Limits { max_body: 1000 }).unwrap();
        assert_eq!(a.body.len(), 1000);
        assert!(!a.complete);
    }

    #[test]
    fn interim_and_bodiless() {
        let a = parse_answer(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n",
            false,
            Limits::default(),
        )
        .unwrap();
        assert_eq!(a.status, 204);
        assert!(a.body.is_empty() && a.complete);
        let a = parse_answer(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n",
            true,
            Limits::default(),
        )
        .unwrap();
        assert!(a.body.is_empty() && a.complete);
    }

    #[test]
    fn malformed() {
        assert!(matches!(
            parse_answer(b"HTTP/1.1 200 OK\r\nX", false, Limits::default()),
            Err(HttpError::PartialHead(_))
        ));
        assert!(matches!(
            parse_answer(b"SSH-2.0-x\r\n\r\n", false, Limits::default()),
            Err(HttpError::Head(_))
        ));
        assert_eq!(
            parse_answer(
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                false,
                Limits::default()
            ),
            Err(HttpError::ContentLength)
        );
        assert!(!looks_like_answer(b"+OK\r\n"));
    }

    #[test]
    fn framing() {
        let f = |b: &[u8], req| message_len(b, req, false).unwrap();
        assert_eq!(
            f(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /2", true),
            Framing::Complete(27)
        );
        assert_eq!(
            f(b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET", true),
            Framing::Complete(41)
        );
        assert_eq!(
            f(b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\na", true),
            Framing::Sized { head: 38, body: 3 }
        );
        assert_eq!(f(b"GET / HTTP/1.1\r\nHost", true), Framing::Incomplete);
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\nHTTP";
        assert_eq!(f(chunked, false), Framing::Complete(chunked.len() - 4));
        assert_eq!(f(&chunked[..chunked.len() - 8], false), Framing::Incomplete);
        assert_eq!(f(b"HTTP/1.1 200 OK\r\n\r\nabc", false), Framing::UntilClose);
        assert_eq!(
            f(
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No\r\n\r\nx",
                false
            ),
            Framing::Complete(44)
        );
        assert_eq!(
            message_len(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", false, true).unwrap(),
            Framing::Complete(38)
        );
        assert!(message_len(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY",
            false,
            false
        )
        .is_err());
        assert!(message_len(b"\x00\x01", true, false).is_err());
    }

    #[test]
    fn request_heads() {
        let r = parse_request_head(b"GET /items/12?x=1 HTTP/1.1\r\nHost: a\r\n\r\nbody").unwrap();
        assert_eq!(
            (r.method.as_str(), r.target.as_str(), r.head_len),
            ("GET", "/items/12?x=1", Some(39))
        );
        let r = parse_request_head(b"POST /a HTTP/1.1\r\nHost: a").unwrap();
        assert_eq!((r.method.as_str(), r.head_len), ("POST", None));
        assert!(parse_request_head(b"\x16\x03\x01garbage").is_err());
        assert!(parse_request_head(b"GE").is_err());
    }
}
