//! Redaction of the headers that carry credentials, in everything the comparison writes or
//! prints: the JSON Lines file, the HTML report, the debug log.
//!
//! Owns: [`DEFAULT_REDACTED`] (`authorization`, `cookie`, `set-cookie`, `proxy-authorization`),
//! [`Redact`] (a list of lowercase header names: [`Redact::diff`] replaces the values of a
//! differing `header:NAME` field by markers, [`Redact::head`] the values of those headers in the
//! head of a request or an answer). Comparisons run on the real values, so a redacted header
//! that differs is still reported as differing: the online value reads [`MARK`] and the test
//! value [`MARK_DIFFERS`] (a side where the header is absent stays absent). No hash of the value
//! is kept: a short secret could be found again from its hash.

use crate::fields::FieldDiff;

/// Headers redacted unless told otherwise.
pub const DEFAULT_REDACTED: &[&str] = &[
    "authorization",
    "cookie",
    "set-cookie",
    "proxy-authorization",
];
/// What a redacted value reads.
pub const MARK: &str = "[redacted]";
/// What the other side's redacted value reads when the two differ.
pub const MARK_DIFFERS: &str = "[redacted, differs]";

/// The headers redacted (lowercase names; empty: nothing is redacted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redact(Vec<String>);

impl Default for Redact {
    fn default() -> Self {
        Redact::new(DEFAULT_REDACTED.iter().copied())
    }
}

impl Redact {
    /// Redacts these headers (any case).
    pub fn new<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Redact {
        let mut v: Vec<String> = names
            .into_iter()
            .map(|n| n.as_ref().trim().to_ascii_lowercase())
            .filter(|n| !n.is_empty())
            .collect();
        v.sort();
        v.dedup();
        Redact(v)
    }

    /// The list of a command line (`--compare-redact`, `compare-report --redact`): these
    /// names, or nothing when one of them is `none`.
    pub fn from_list<S: AsRef<str>>(names: &[S]) -> Redact {
        if names
            .iter()
            .any(|n| n.as_ref().trim().eq_ignore_ascii_case("none"))
        {
            Redact::none()
        } else {
            Redact::new(names)
        }
    }

    /// Redacts nothing.
    pub fn none() -> Redact {
        Redact(Vec::new())
    }

    /// The names.
    pub fn names(&self) -> &[String] {
        &self.0
    }

    /// Whether header `name` (any case) is redacted.
    pub fn covers(&self, name: &str) -> bool {
        self.0.iter().any(|n| n.eq_ignore_ascii_case(name.trim()))
    }

    /// Replaces the values of a differing field when it is a redacted header.
    pub fn diff(&self, d: &mut FieldDiff) {
        let Some(name) = d.field.strip_prefix("header:") else {
            return;
        };
        if !self.covers(name) {
            return;
        }
        if let Some(v) = d.online.as_mut() {
            *v = MARK.to_string();
        }
        if let Some(v) = d.test.as_mut() {
            *v = MARK_DIFFERS.to_string();
        }
    }

    /// The bytes of a message with the values of redacted headers in its head replaced by
    /// [`MARK`] (the request or status line, the other headers and the body unchanged).
    pub fn head(&self, msg: &[u8]) -> Vec<u8> {
        if self.0.is_empty() {
            return msg.to_vec();
        }
        let end = msg
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(msg.len(), |i| i + 2);
        let mut out = Vec::with_capacity(msg.len());
        let mut first = true;
        for line in msg[..end].split_inclusive(|&b| b == b'\n') {
            let colon = line.iter().position(|&b| b == b':');
            let name = colon.and_then(|c| std::str::from_utf8(&line[..c]).ok());
            match (first, colon, name) {
                (false, Some(c), Some(n)) if self.covers(n) => {
                    out.extend_from_slice(&line[..=c]);
                    out.push(b' ');
                    out.extend_from_slice(MARK.as_bytes());
                    if line.ends_with(b"\r\n") {
                        out.extend_from_slice(b"\r\n");
                    } else if line.ends_with(b"\n") {
                        out.push(b'\n');
                    }
                }
                _ => out.extend_from_slice(line),
            }
            first = false;
        }
        out.extend_from_slice(&msg[end..]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::Kind;

    fn fd(field: &str, online: Option<&str>, test: Option<&str>) -> FieldDiff {
        FieldDiff {
            field: field.into(),
            kind: Kind::Header,
            online: online.map(Into::into),
            test: test.map(Into::into),
            offset: None,
        }
    }

    #[test]
    fn credential_headers_keep_only_that_they_differ() {
        let r = Redact::default();
        let mut d = fd(
            "header:set-cookie",
            Some("sid=online-secret"),
            Some("sid=test-secret"),
        );
        r.diff(&mut d);
        assert_eq!(
            (d.online.as_deref(), d.test.as_deref()),
            (Some(MARK), Some(MARK_DIFFERS))
        );
        let mut d = fd("header:authorization", None, Some("Bearer abc"));
        r.diff(&mut d);
        assert_eq!(
            (d.online.as_deref(), d.test.as_deref()),
            (None, Some(MARK_DIFFERS)),
            "absence is kept"
        );
        let mut d = fd("header:x-a", Some("1"), Some("2"));
        r.diff(&mut d);
        assert_eq!(d.test.as_deref(), Some("2"), "other headers are left");
        let mut d = fd("header:set-cookie", Some("a"), Some("b"));
        Redact::none().diff(&mut d);
        assert_eq!(d.online.as_deref(), Some("a"), "redaction off");
        let r = Redact::new(["X-Api-Key "]);
        assert!(r.covers("x-api-key") && !r.covers("cookie"));
    }

    #[test]
    fn heads_lose_credential_values_only() {
        let r = Redact::default();
        let req = b"GET /a?cookie:1 HTTP/1.1\r\nHost: h\r\nCookie: sid=s3cr3t\r\nAUTHORIZATION:Basic eHg=\r\n\r\nbody Cookie: x";
        let out = String::from_utf8(r.head(req)).unwrap();
        assert_eq!(
            out,
            "GET /a?cookie:1 HTTP/1.1\r\nHost: h\r\nCookie: [redacted]\r\nAUTHORIZATION: [redacted]\r\n\r\nbody Cookie: x"
        );
        let cut = b"HTTP/1.1 200 OK\r\nSet-Cookie: sid=abc";
        assert_eq!(
            String::from_utf8(r.head(cut)).unwrap(),
            "HTTP/1.1 200 OK\r\nSet-Cookie: [redacted]"
        );
        assert_eq!(Redact::none().head(req), req.to_vec());
    }
}
