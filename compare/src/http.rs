//! HTTP/1.x answers and request heads, parsed for comparison.
//!
//! Owns: [`parse_answer`] (status line and headers by `httparse`; the body framed by
//! `Content-Length`, `Transfer-Encoding: chunked` or the end of the bytes; `Content-Encoding:
//! gzip` decoded by `flate2`) and [`parse_request_head`] (method and target). The bytes given may
//! be cut (the first K bytes of an answer): a cut body is parsed as far as it goes and marked
//! [`Answer::complete`]` == false`, never an error. A decoded body never grows past
//! [`Limits::max_body`]. Nothing here panics on any input (fuzzed: `fuzz_targets/compare_parse`).

use std::io::Read;

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
        if (100..200).contains(&status) && status != 101 {
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

fn parse_head(bytes: &[u8]) -> Result<(u16, Vec<(String, String)>, usize), HttpError> {
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
    let chunked = ans.header("transfer-encoding").is_some_and(|te| {
        te.to_ascii_lowercase()
            .split(',')
            .any(|p| p.trim() == "chunked")
    });
    let raw: Vec<u8>;
    let mut complete;
    if chunked {
        (raw, complete) = dechunk(body, limits.max_body)?;
    } else if let Some(cl) = content_length(ans)? {
        let have = body.len().min(cl).min(limits.max_body);
        raw = body[..have].to_vec();
        complete = have == cl;
    } else {
        let have = body.len().min(limits.max_body);
        raw = body[..have].to_vec();
        complete = have == body.len();
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

fn content_length(ans: &Answer) -> Result<Option<usize>, HttpError> {
    let mut found: Option<usize> = None;
    for (n, v) in &ans.headers {
        if n != "content-length" {
            continue;
        }
        for part in v.split(',') {
            let len: usize = part.trim().parse().map_err(|_| HttpError::ContentLength)?;
            if found.is_some_and(|f| f != len) {
                return Err(HttpError::ContentLength);
            }
            found = Some(len);
        }
    }
    Ok(found)
}

/// De-chunks a chunked body; returns the data (at most `max`) and whether the last chunk came.
fn dechunk(body: &[u8], max: usize) -> Result<(Vec<u8>, bool), HttpError> {
    let mut out = Vec::new();
    let last = walk_chunks(body, |data| {
        let room = max.saturating_sub(out.len());
        out.extend_from_slice(&data[..data.len().min(room)]);
        out.len() < max
    })?;
    // trailers are not compared
    Ok((out, last.is_some()))
}

/// Walks a chunked body, handing `data` each chunk's bytes (the last of them cut short when the
/// body is) until it answers false. `Some(at)`: the last chunk's size line ends at `at` (the
/// trailers follow); `None`: the body, or `data`, stopped first. An error names the offset.
fn walk_chunks(
    body: &[u8],
    mut data: impl FnMut(&[u8]) -> bool,
) -> Result<Option<usize>, HttpError> {
    let mut at = 0;
    loop {
        let (skip, size) = match httparse::parse_chunk_size(&body[at..]) {
            Ok(httparse::Status::Complete(v)) => v,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(HttpError::Chunk(at)),
        };
        at += skip;
        if size == 0 {
            return Ok(Some(at));
        }
        let end = usize::try_from(size)
            .ok()
            .and_then(|n| at.checked_add(n))
            .ok_or(HttpError::Chunk(at))?;
        let take = end.min(body.len());
        if !data(&body[at..take]) || take < end {
            return Ok(None);
        }
        // CRLF after the chunk's data
        match body.get(end..end + 2) {
            None => return Ok(None),
            Some(b"\r\n") => at = end + 2,
            Some(_) => return Err(HttpError::Chunk(end)),
        }
    }
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
) -> Result<Framing, HttpError> {
    let mut off = 0;
    loop {
        let rest = &bytes[off..];
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let (head_len, status, hs): (usize, u16, Vec<(String, String)>) = if is_request {
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(rest) {
                Ok(httparse::Status::Complete(n)) => (n, 0, lower(req.headers)),
                Ok(httparse::Status::Partial) => return Ok(Framing::Incomplete),
                Err(e) => return Err(HttpError::Head(e.to_string())),
            }
        } else {
            match parse_head(rest) {
                Ok((status, hs, n)) => (n, status, hs),
                Err(HttpError::PartialHead(_)) => return Ok(Framing::Incomplete),
                Err(e) => return Err(e),
            }
        };
        if !is_request && (100..200).contains(&status) && status != 101 {
            off += head_len;
            continue;
        }
        let ans = Answer {
            status,
            headers: hs,
            body: Vec::new(),
            complete: true,
            gzip: false,
        };
        if !is_request && (head_request || status == 204 || status == 304 || status == 101) {
            return Ok(Framing::Complete(off + head_len));
        }
        let chunked = ans.header("transfer-encoding").is_some_and(|te| {
            te.to_ascii_lowercase()
                .split(',')
                .any(|p| p.trim() == "chunked")
        });
        if chunked {
            return Ok(match chunked_len(&rest[head_len..])? {
                Some(n) => Framing::Complete(off + head_len + n),
                None => Framing::Incomplete,
            });
        }
        return Ok(match content_length(&ans)? {
            Some(n) if rest.len() - head_len >= n => Framing::Complete(off + head_len + n),
            Some(n) => Framing::Sized {
                head: off + head_len,
                body: n,
            },
            None if is_request => Framing::Complete(off + head_len),
            None => Framing::UntilClose,
        });
    }
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

/// The length of a whole chunked body (trailers included), or None when it has not ended.
fn chunked_len(body: &[u8]) -> Result<Option<usize>, HttpError> {
    let Some(mut at) = walk_chunks(body, |_| true)? else {
        return Ok(None);
    };
    // trailers: lines until an empty one
    loop {
        let Some(i) = body[at..].windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        at += i + 2;
        if i == 0 {
            return Ok(Some(at));
        }
    }
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
