//! Request rules (`--rules FILE`): which requests reach the test server (filters), how copied
//! HTTP requests are marked (the dye header) and what is changed in them (header edits, a regex
//! replace in the request line). Owns the TOML format, its validation (every error names the
//! rule) and the compiled matchers the editor (`edit`) applies to each request.
//!
//! The file:
//! ```toml
//! [[filter]]                 # tried in order; the first matching one decides
//! name = "no-payments"       # required, unique: the metric label
//! action = "deny"            # "deny" (default): not copied; "allow": copied (allow-only mode:
//!                            # once any filter allows, a request no filter matches is not copied)
//! methods = ["POST", "PUT"]  # HTTP: any of these methods
//! path = "/pay/**"           # HTTP: a glob on the path without the query (`*` within a
//!                            # segment, `**` across, `?` one character), or
//! path_regex = "^/pay/"      # a regex on the whole request target
//! header = "X-Real"          # HTTP: the header is present ...
//! header_regex = "^yes$"     # ... and its value matches
//! client = "198.18.0.0/16"   # the captured client's address is in this range
//! prefix = "DEL "            # other protocols: the request unit starts with these bytes
//!                            # (`\xNN` escapes); such a rule never matches HTTP
//!
//! [dye]                      # a header added to every copied HTTP request
//! header = "X-Traffic-Copy"
//! value = "copy={copy};by={id}"  # `{copy}`: the copy index, `{id}`: `id` below
//! id = "copier-1"
//!
//! [[header]]                 # edits, in order, after the dye
//! name = "Host"
//! set = "test.example"       # replace it, or add it when missing; or
//! replace = "..."            # replace it only when present; or
//! file = "/etc/tc/token"     # set from a file (trailing newline cut), re-read on SIGHUP; or
//! delete = true
//!
//! [[rewrite]]                # a regex replace in the request line (without its CRLF)
//! name = "v1-to-v2"
//! regex = "^(\\w+) /v1/"
//! replace = "$1 /v2/"
//! ```
//! Header names compare without case. Values may not hold CR or LF.
//!
//! On HTTP/2 (`h2edit`) the same rules apply to each stream's decoded header block: `methods`
//! to `:method`, `path`/`path_regex` to `:path`, `header` to the fields (and `:authority` as
//! `host`), the dye and `[[header]]` names lower-cased (`Host` edits `:authority`), and the
//! `[[rewrite]]` regexes to the line `METHOD PATH HTTP/2.0`.
//!
//! Top-level settings (before the first table):
//! ```toml
//! path_case = "insensitive"  # default; "sensitive": globs compare the path's case too
//! unparsable = "drop"        # default with any [[filter]]; "pass" (default without one)
//! ```
//!
//! Paths are matched normalised ([`normalize_target`]), as a server resolves them, so that a
//! client cannot walk around a filter by spelling the path otherwise: `//pay/1`, `/%70ay/1`,
//! `/x/../pay/1` and (case-insensitive by default) `/PAY/1` all match `path = "/pay/*"`. A
//! `path_regex` matches if it matches the raw request target or the normalised one (the
//! normalised path and the raw query).
//!
//! `unparsable`: what becomes of the rest of a session the editor cannot read as HTTP
//! requests: a malformed request (a head httparse refuses, a bad or conflicting
//! `Content-Length`, one above 2^63-1, a bad chunk line, an unknown transfer coding), or a
//! session caught mid-stream whose first bytes are not a request while HTTP filters exist.
//! `"drop"` (fail closed): the rest of that session's copy is not sent and the copy ends
//! (`copier_sessions_failed_total{reason="unparsable"}`); what it sent before stays whole.
//! `"pass"`: the rest passes as captured, unfiltered and undyed (counted in
//! `copier_requests_malformed_total`).

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use regex::bytes::Regex;
use serde::Deserialize;
use shaper::users::Cidr;

/// A rules file that cannot be used, naming the rule and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RulesError(String);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    path_case: Option<String>,
    unparsable: Option<String>,
    #[serde(default)]
    filter: Vec<FilterSpec>,
    dye: Option<DyeSpec>,
    #[serde(default)]
    header: Vec<HeaderSpec>,
    #[serde(default)]
    rewrite: Vec<RewriteSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilterSpec {
    name: String,
    action: Option<String>,
    methods: Option<Vec<String>>,
    path: Option<String>,
    path_regex: Option<String>,
    header: Option<String>,
    header_regex: Option<String>,
    client: Option<String>,
    prefix: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DyeSpec {
    header: Option<String>,
    value: Option<String>,
    id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderSpec {
    name: String,
    set: Option<String>,
    replace: Option<String>,
    file: Option<PathBuf>,
    #[serde(default)]
    delete: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RewriteSpec {
    name: String,
    regex: String,
    replace: String,
}

/// What a matching filter does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The request is not copied.
    Deny,
    /// The request is copied (allow-only mode).
    Allow,
}

/// One compiled filter.
#[derive(Debug)]
pub struct Filter {
    /// The rule's name (the metric label).
    pub name: String,
    /// What it does when it matches.
    pub action: Action,
    methods: Vec<Vec<u8>>,
    path: Option<PathMatch>,
    header: Option<(String, Option<Regex>)>,
    client: Option<Cidr>,
    prefix: Option<Vec<u8>>,
}

/// How a filter matches the path.
#[derive(Debug)]
enum PathMatch {
    /// A glob, on the normalised path.
    Glob(Regex),
    /// A regex, on the raw request target or the normalised one.
    Regex(Regex),
}

/// What the rules file says of what cannot be read as requests (see the module
/// documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unparsable {
    /// The rest of the session passes as captured.
    Pass,
    /// The rest of the session's copy is dropped (fail closed).
    Drop,
}

/// The path of a request target as a server resolves it, for matching: the path alone
/// (an absolute-form target's scheme and authority, the query and any fragment cut), every
/// `%XX` decoded once (`%2F` included: a server that decodes it sees a `/`; an escape that is
/// not one stays as it is), empty and `.` segments dropped (so `//` is one `/`), `..` taking
/// the segment before it away (never above the root). A trailing `/` stays. Case is left as
/// it is: globs compare without case unless `path_case = "sensitive"`.
#[must_use]
pub fn normalize_target(target: &[u8]) -> Vec<u8> {
    let mut t = target;
    if let Some(i) = t.windows(3).position(|w| w == b"://") {
        if i > 0
            && t[..i]
                .iter()
                .all(|c| c.is_ascii_alphanumeric() || b"+-.".contains(c))
        {
            let rest = &t[i + 3..];
            t = &rest[rest.iter().position(|&c| c == b'/').unwrap_or(rest.len())..];
        }
    }
    let end = t
        .iter()
        .position(|&c| c == b'?' || c == b'#')
        .unwrap_or(t.len());
    let path = &t[..end];
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut dec = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        if path[i] == b'%' && i + 2 < path.len() {
            if let (Some(h), Some(l)) = (hex(path[i + 1]), hex(path[i + 2])) {
                dec.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        dec.push(path[i]);
        i += 1;
    }
    let mut segs: Vec<&[u8]> = Vec::new();
    let mut trailing = false;
    for seg in dec.split(|&c| c == b'/') {
        trailing = false;
        match seg {
            b"" | b"." => trailing = true,
            b".." => {
                segs.pop();
                trailing = true;
            }
            s => segs.push(s),
        }
    }
    let mut out = Vec::with_capacity(dec.len() + 1);
    for s in &segs {
        out.push(b'/');
        out.extend_from_slice(s);
    }
    if out.is_empty() || trailing {
        out.push(b'/');
    }
    out
}

/// What the editor knows of a request when it asks the filters.
#[derive(Debug)]
pub(crate) enum Req<'a> {
    /// An HTTP request: method, target, headers (name, value).
    Http {
        method: &'a [u8],
        target: &'a [u8],
        headers: &'a [(&'a str, &'a [u8])],
    },
    /// The first bytes of a unit of another protocol.
    Bytes(&'a [u8]),
}

impl Filter {
    fn http_only(&self) -> bool {
        !self.methods.is_empty() || self.path.is_some() || self.header.is_some()
    }

    /// `norm`: the request's normalised path and its raw query (`?...`), if it has one.
    fn matches(&self, client: IpAddr, req: &Req<'_>, norm: &(Vec<u8>, &[u8])) -> bool {
        if self.client.as_ref().is_some_and(|c| !c.contains(client)) {
            return false;
        }
        match req {
            Req::Bytes(b) => {
                !self.http_only() && self.prefix.as_ref().is_none_or(|p| b.starts_with(p))
            }
            Req::Http {
                method,
                target,
                headers,
            } => {
                if self.prefix.is_some() {
                    return false;
                }
                if !self.methods.is_empty()
                    && !self.methods.iter().any(|m| m.eq_ignore_ascii_case(method))
                {
                    return false;
                }
                let path_ok = match &self.path {
                    None => true,
                    Some(PathMatch::Glob(r)) => r.is_match(&norm.0),
                    Some(PathMatch::Regex(r)) => {
                        r.is_match(target) || r.is_match(&[&norm.0[..], norm.1].concat())
                    }
                };
                if !path_ok {
                    return false;
                }
                match &self.header {
                    None => true,
                    Some((name, re)) => headers.iter().any(|(n, v)| {
                        n.eq_ignore_ascii_case(name) && re.as_ref().is_none_or(|r| r.is_match(v))
                    }),
                }
            }
        }
    }
}

/// A header value: fixed, or read from a file (re-read by [`Rules::reload`]).
#[derive(Debug)]
pub(crate) enum Value {
    Fixed(Vec<u8>),
    File {
        path: PathBuf,
        cur: Mutex<Arc<[u8]>>,
    },
}

impl Value {
    pub(crate) fn get(&self) -> Arc<[u8]> {
        match self {
            Value::Fixed(v) => v.as_slice().into(),
            Value::File { cur, .. } => cur
                .lock()
                .map(|g| g.clone())
                .unwrap_or_else(|e| e.into_inner().clone()),
        }
    }
}

/// One header edit.
#[derive(Debug)]
pub(crate) enum HeaderEdit {
    /// Replace every occurrence, or add it when missing.
    Set(String, Value),
    /// Replace every occurrence; nothing when missing.
    Replace(String, Value),
    /// Remove every occurrence.
    Delete(String),
}

/// The dye header: name and value template.
#[derive(Debug)]
pub(crate) struct Dye {
    pub name: String,
    value: String,
    id: String,
}

impl Dye {
    /// The value for copy `copy`.
    pub(crate) fn value(&self, copy: u16) -> String {
        self.value
            .replace("{copy}", &copy.to_string())
            .replace("{id}", &self.id)
    }
}

/// Every rule of a rules file, compiled.
#[derive(Debug)]
pub struct Rules {
    /// The filters, in order.
    pub filters: Vec<Filter>,
    /// Some filter allows: a request no filter matches is not copied.
    pub allow_only: bool,
    pub(crate) dye: Option<Dye>,
    pub(crate) headers: Vec<HeaderEdit>,
    pub(crate) rewrites: Vec<(String, Regex, Vec<u8>)>,
    /// What becomes of what cannot be read as requests.
    pub unparsable: Unparsable,
}

/// What the filters say of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Copied; the index of the filter that allowed it, if one did.
    Copy(Option<usize>),
    /// Not copied: by this filter, or (`None`) by allow-only mode.
    Drop(Option<usize>),
}

fn bad(rule: &str, what: impl fmt::Display) -> RulesError {
    RulesError(format!("rule {rule:?}: {what}"))
}

/// A glob on a path as a regex anchored at both ends: `**` any characters, `*` any but `/`,
/// `?` one but `/`; the rest literal; without case unless `case` (`(?i)`).
fn glob_regex(glob: &str, case: bool) -> String {
    // Bytes, not characters (`-u`): a decoded path need not be UTF-8, and `[^/]` must take
    // any byte but `/`.
    let mut re = String::from(if case { "(?-u)^" } else { "(?i-u)^" });
    let mut chars = glob.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                re.push_str(".*");
            }
            '*' => re.push_str("[^/]*"),
            '?' => re.push_str("[^/]"),
            c if c.is_ascii() => re.push_str(&regex::escape(c.encode_utf8(&mut [0; 4]))),
            c => {
                for b in c.encode_utf8(&mut [0; 4]).bytes() {
                    re.push_str(&format!("\\x{b:02X}"));
                }
            }
        }
    }
    // The query, if any, is not part of the path.
    re.push_str(r"(\?.*)?$");
    re
}

/// `\xNN` escapes (and `\\`) in a byte prefix.
fn unescape(rule: &str, s: &str) -> Result<Vec<u8>, RulesError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            match b.get(i + 1) {
                Some(b'\\') => {
                    out.push(b'\\');
                    i += 2;
                }
                Some(b'x') => {
                    let hex = s.get(i + 2..i + 4).ok_or_else(|| {
                        bad(rule, format!("prefix {s:?}: \\x needs two hex digits"))
                    })?;
                    let v = u8::from_str_radix(hex, 16)
                        .map_err(|_| bad(rule, format!("prefix {s:?}: bad escape \\x{hex}")))?;
                    out.push(v);
                    i += 4;
                }
                _ => {
                    return Err(bad(
                        rule,
                        format!("prefix {s:?}: only \\xNN and \\\\ escapes are known"),
                    ))
                }
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

fn header_name(rule: &str, n: &str) -> Result<String, RulesError> {
    let token = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c);
    if n.is_empty() || !n.bytes().all(token) {
        return Err(bad(rule, format!("{n:?} is not a header name")));
    }
    Ok(n.to_string())
}

fn header_value(rule: &str, v: &[u8]) -> Result<Vec<u8>, RulesError> {
    if v.iter().any(|&c| c == b'\r' || c == b'\n' || c == 0) {
        return Err(bad(rule, "a header value may not hold CR, LF or NUL"));
    }
    Ok(v.to_vec())
}

fn read_value(rule: &str, path: &Path) -> Result<Vec<u8>, RulesError> {
    let mut v =
        std::fs::read(path).map_err(|e| bad(rule, format!("read {}: {e}", path.display())))?;
    while v.last().is_some_and(|&c| c == b'\n' || c == b'\r') {
        v.pop();
    }
    header_value(rule, &v).map_err(|e| bad(rule, format!("{}: {e}", path.display())))
}

fn regex(rule: &str, what: &str, re: &str) -> Result<Regex, RulesError> {
    Regex::new(re).map_err(|e| bad(rule, format!("{what} {re:?}: {e}")))
}

impl Rules {
    /// Read and validate a rules file.
    pub fn load(path: &Path) -> Result<Rules, RulesError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| RulesError(format!("read {}: {e}", path.display())))?;
        Rules::from_toml_str(&text).map_err(|e| RulesError(format!("{}: {e}", path.display())))
    }

    /// Parse and validate rules (see the module documentation for the format).
    pub fn from_toml_str(text: &str) -> Result<Rules, RulesError> {
        let spec: FileSpec = toml::from_str(text).map_err(|e| RulesError(e.to_string()))?;
        let case = match spec.path_case.as_deref() {
            None | Some("insensitive") => false,
            Some("sensitive") => true,
            Some(o) => {
                return Err(RulesError(format!(
                    "path_case {o:?}: \"insensitive\" (the default) or \"sensitive\""
                )))
            }
        };
        let unparsable = match spec.unparsable.as_deref() {
            None if spec.filter.is_empty() => Unparsable::Pass,
            None | Some("drop") => Unparsable::Drop,
            Some("pass") => Unparsable::Pass,
            Some(o) => {
                return Err(RulesError(format!(
                    "unparsable {o:?}: \"drop\" or \"pass\""
                )))
            }
        };
        let mut filters = Vec::new();
        for f in spec.filter {
            let n = f.name.as_str();
            if n.is_empty() {
                return Err(RulesError("a [[filter]] needs a name".into()));
            }
            if filters.iter().any(|x: &Filter| x.name == n) || n == "allow_only" {
                return Err(bad(
                    n,
                    "the name is taken (names must be unique; \"allow_only\" is reserved)",
                ));
            }
            let action = match f.action.as_deref() {
                None | Some("deny") => Action::Deny,
                Some("allow") => Action::Allow,
                Some(a) => return Err(bad(n, format!("action {a:?}: \"deny\" or \"allow\""))),
            };
            let path = match (&f.path, &f.path_regex) {
                (Some(_), Some(_)) => return Err(bad(n, "path and path_regex: give one")),
                (Some(g), None) => {
                    if !g.starts_with('/') && g != "*" {
                        return Err(bad(n, format!("path {g:?} must start with /")));
                    }
                    Some(PathMatch::Glob(regex(n, "path", &glob_regex(g, case))?))
                }
                (None, Some(r)) => Some(PathMatch::Regex(regex(n, "path_regex", r)?)),
                (None, None) => None,
            };
            let header = match (&f.header, &f.header_regex) {
                (None, Some(_)) => return Err(bad(n, "header_regex needs header")),
                (Some(h), r) => Some((
                    header_name(n, h)?,
                    r.as_deref()
                        .map(|r| regex(n, "header_regex", r))
                        .transpose()?,
                )),
                (None, None) => None,
            };
            let methods = f.methods.unwrap_or_default();
            if methods
                .iter()
                .any(|m| m.is_empty() || !m.bytes().all(|c| c.is_ascii_alphabetic()))
            {
                return Err(bad(n, format!("methods {methods:?}: letters only")));
            }
            let client = f
                .client
                .as_deref()
                .map(|c| {
                    c.parse::<Cidr>()
                        .map_err(|e| bad(n, format!("client {c:?}: {e}")))
                })
                .transpose()?;
            let prefix = f.prefix.as_deref().map(|p| unescape(n, p)).transpose()?;
            if prefix.as_ref().is_some_and(Vec::is_empty) {
                return Err(bad(n, "an empty prefix matches everything: leave it out"));
            }
            let filter = Filter {
                name: f.name.clone(),
                action,
                methods: methods.into_iter().map(String::into_bytes).collect(),
                path,
                header,
                client,
                prefix,
            };
            if filter.prefix.is_some() && filter.http_only() {
                return Err(bad(
                    n,
                    "prefix is for other protocols than HTTP: not with methods, path or header",
                ));
            }
            filters.push(filter);
        }
        let dye = match spec.dye {
            None => None,
            Some(d) => {
                let name = header_name("dye", d.header.as_deref().unwrap_or("X-Traffic-Copy"))?;
                let value = d.value.unwrap_or_else(|| "1".into());
                let id = d.id.unwrap_or_default();
                header_value(
                    "dye",
                    value.replace("{copy}", "0").replace("{id}", &id).as_bytes(),
                )?;
                Some(Dye { name, value, id })
            }
        };
        let mut headers = Vec::new();
        for h in spec.header {
            let rule = format!("header {}", h.name);
            let name = header_name(&rule, &h.name)?;
            let given = usize::from(h.set.is_some())
                + usize::from(h.replace.is_some())
                + usize::from(h.file.is_some())
                + usize::from(h.delete);
            if given != 1 {
                return Err(bad(
                    &rule,
                    "give exactly one of set, replace, file, delete = true",
                ));
            }
            headers.push(match (h.set, h.replace, h.file) {
                (Some(v), _, _) => {
                    HeaderEdit::Set(name, Value::Fixed(header_value(&rule, v.as_bytes())?))
                }
                (_, Some(v), _) => {
                    HeaderEdit::Replace(name, Value::Fixed(header_value(&rule, v.as_bytes())?))
                }
                (_, _, Some(path)) => {
                    let v = read_value(&rule, &path)?;
                    HeaderEdit::Set(
                        name,
                        Value::File {
                            path,
                            cur: Mutex::new(v.into()),
                        },
                    )
                }
                _ => HeaderEdit::Delete(name),
            });
        }
        let mut rewrites = Vec::new();
        for r in spec.rewrite {
            let n = r.name.as_str();
            if n.is_empty() {
                return Err(RulesError("a [[rewrite]] needs a name".into()));
            }
            header_value(n, r.replace.as_bytes())?;
            rewrites.push((
                r.name.clone(),
                regex(n, "regex", &r.regex)?,
                r.replace.into_bytes(),
            ));
        }
        let allow_only = filters.iter().any(|f| f.action == Action::Allow);
        Ok(Rules {
            filters,
            allow_only,
            dye,
            headers,
            rewrites,
            unparsable,
        })
    }

    /// Re-read every header value taken from a file. A file that cannot be read or holds a bad
    /// value keeps the old value; the errors are returned, naming the file.
    pub fn reload(&self) -> Vec<RulesError> {
        let mut errs = Vec::new();
        for h in &self.headers {
            if let HeaderEdit::Set(name, Value::File { path, cur }) = h {
                match read_value(&format!("header {name}"), path) {
                    Ok(v) => {
                        *cur.lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = v.into()
                    }
                    Err(e) => errs.push(e),
                }
            }
        }
        errs
    }

    /// Whether HTTP requests are edited (dye, header edits or rewrites), not only filtered.
    pub(crate) fn edits(&self) -> bool {
        self.dye.is_some() || !self.headers.is_empty() || !self.rewrites.is_empty()
    }

    /// The names of the per-rule counters, in counter order: every filter, then
    /// `allow_only` (requests no allow filter matched), then every rewrite.
    pub fn counter_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.filters.iter().map(|f| f.name.clone()).collect();
        v.push("allow_only".into());
        v.extend(self.rewrites.iter().map(|r| r.0.clone()));
        v
    }

    /// The longest byte prefix a filter looks for (what a unit of another protocol is held
    /// for before it is decided).
    pub(crate) fn max_prefix(&self) -> usize {
        self.filters
            .iter()
            .filter_map(|f| f.prefix.as_ref().map(Vec::len))
            .max()
            .unwrap_or(0)
    }

    /// Whether a filter may match a unit of another protocol than HTTP.
    pub(crate) fn byte_filters(&self) -> bool {
        self.filters.iter().any(|f| !f.http_only())
    }

    /// Whether a filter looks at HTTP requests only (methods, path, header).
    pub(crate) fn http_filters(&self) -> bool {
        self.filters.iter().any(Filter::http_only)
    }

    /// The filters' verdict on a request of `client`.
    pub(crate) fn verdict(&self, client: IpAddr, req: &Req<'_>) -> Verdict {
        let norm = match req {
            Req::Http { target, .. } if self.filters.iter().any(|f| f.path.is_some()) => {
                let q = target
                    .iter()
                    .position(|&c| c == b'?')
                    .map_or(&[][..], |i| &target[i..]);
                (normalize_target(target), q)
            }
            _ => (Vec::new(), &[][..]),
        };
        for (i, f) in self.filters.iter().enumerate() {
            if f.matches(client, req, &norm) {
                return match f.action {
                    Action::Deny => Verdict::Drop(Some(i)),
                    Action::Allow => Verdict::Copy(Some(i)),
                };
            }
        }
        if self.allow_only {
            Verdict::Drop(None)
        } else {
            Verdict::Copy(None)
        }
    }
}

#[cfg(test)]
mod tests;
