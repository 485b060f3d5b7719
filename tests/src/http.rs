//! A minimal HTTP/1.1 client side for lab tests and benchmarks: requests written by hand,
//! responses read by their Content-Length ([`Head`] finds where one ends, for the blocking
//! [`HttpReader`] here and the benchmarks' async clients alike), so a test controls exactly what
//! goes on one connection (pipelining, keep-alive, one request at a time).

use std::io::{Read, Write};

/// A `GET path` request as the lab tests send it.
pub fn get_request(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: lab\r\nUser-Agent: lab-test\r\n\r\n")
}

/// The head of a response at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Where the head ends (the blank line's `\r\n\r\n` starts here).
    pub end: usize,
    /// The status code of the status line, if it has one.
    pub status: Option<u16>,
    /// The Content-Length header, if any.
    pub content_length: Option<usize>,
}

impl Head {
    /// The head at the start of `buf`; `None` until its blank line arrived.
    pub fn parse(buf: &[u8]) -> Option<Head> {
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&buf[..end]);
        let status = head
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok());
        let content_length = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok());
        Some(Head {
            end,
            status,
            content_length,
        })
    }

    /// The length of the whole response (head, blank line, body of Content-Length bytes, or
    /// none without one).
    pub fn total(&self) -> usize {
        self.end + 4 + self.content_length.unwrap_or(0)
    }
}

/// Reads HTTP/1.1 responses that carry a Content-Length; bytes past one response stay buffered
/// for the next.
#[derive(Debug, Default)]
pub struct HttpReader {
    buf: Vec<u8>,
}

impl HttpReader {
    /// Reads one whole response. Panics when the connection closes first.
    pub fn read_response(&mut self, s: &mut impl Read) {
        loop {
            if let Some(head) = Head::parse(&self.buf) {
                let total = head.total();
                while self.buf.len() < total {
                    self.fill(s);
                }
                self.buf.drain(..total);
                return;
            }
            self.fill(s);
        }
    }

    /// Bytes received past the responses read so far.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    fn fill(&mut self, s: &mut impl Read) {
        let mut tmp = [0u8; 65536];
        let n = s.read(&mut tmp).expect("read response");
        assert!(n > 0, "connection closed early");
        self.buf.extend_from_slice(&tmp[..n]);
    }
}

/// Sends `GET path` on `s` and reads its whole answer; panics if more than one answer came.
pub fn get<S: Read + Write>(s: &mut S, path: &str) {
    s.write_all(get_request(path).as_bytes())
        .expect("write request");
    let mut r = HttpReader::default();
    r.read_response(s);
    assert_eq!(r.buffered(), 0, "one answer at a time");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_responses_by_content_length_across_reads() {
        let two = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 204 No Content\r\n\r\n";
        // a reader that hands out 5 bytes at a time
        struct Slow<'a>(&'a [u8]);
        impl Read for Slow<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.len().min(5).min(out.len());
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut s = Slow(two);
        let mut r = HttpReader::default();
        r.read_response(&mut s);
        r.read_response(&mut s);
        assert_eq!(r.buffered(), 0);
    }

    #[test]
    #[should_panic(expected = "connection closed early")]
    fn a_short_response_panics() {
        let mut s: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab";
        HttpReader::default().read_response(&mut s);
    }

    #[test]
    fn heads_say_status_and_length() {
        assert_eq!(Head::parse(b"HTTP/1.1 200 OK\r\nContent-Le"), None);
        let h = Head::parse(b"HTTP/1.1 404 Not Found\r\ncontent-length: 12\r\nX: y\r\n\r\nbody")
            .unwrap();
        assert_eq!(
            (h.end, h.status, h.content_length, h.total()),
            (48, Some(404), Some(12), 64)
        );
        let h = Head::parse(b"garbage\r\n\r\n").unwrap();
        assert_eq!((h.status, h.content_length, h.total()), (None, None, 11));
    }
}
