//! A minimal HTTP/1.1 client side for lab tests: requests written by hand, responses read by
//! their Content-Length, so a test controls exactly what goes on one connection (pipelining,
//! keep-alive, one request at a time).

use std::io::{Read, Write};

/// A `GET path` request as the lab tests send it.
pub fn get_request(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: lab\r\nUser-Agent: lab-test\r\n\r\n")
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
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse().expect("Content-Length"))
                    .unwrap_or(0);
                let total = end + 4 + len;
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
    s.write_all(get_request(path).as_bytes()).expect("write request");
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
}
