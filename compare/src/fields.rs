//! An answer as a flat set of named fields, the unit that is compared, learned as noise and
//! reported.
//!
//! Owns: [`Fields`] (an ordered map field name -> value), built from an HTTP [`Answer`] by
//! [`Fields::of_answer`] (`status`, `header:NAME`, and either the leaves of a JSON body as paths
//! `$.items[3].price` or one `body` field), or from bytes by [`Fields::of_bytes`]; [`diff`]
//! (the fields that differ, with their kind); [`generalize`] (`$.items[3].ts` ->
//! `$.items[*].ts`, the key under which noise is learned and ignore patterns match).
//! Invariant: at most [`MAX_LEAVES`] JSON leaves per answer; a body with more is compared whole
//! as one `body` field beyond that.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::http::Answer;

/// JSON leaves kept per answer; the rest of a bigger document is compared as one hash.
pub const MAX_LEAVES: usize = 20_000;
/// Longest value kept in a field (longer ones are kept as a prefix, a length and a hash).
const MAX_VALUE: usize = 200;

/// What kind of field differs (the `kind` label of the metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The status code.
    Status,
    /// A header.
    Header,
    /// A field of a JSON body.
    BodyField,
    /// A body compared as bytes (not JSON, or not parseable as JSON).
    Body,
}

impl Kind {
    /// The label used in metrics and files.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Status => "status",
            Kind::Header => "header",
            Kind::BodyField => "body_field",
            Kind::Body => "body",
        }
    }

    fn of(name: &str) -> Kind {
        if name == "status" {
            Kind::Status
        } else if name.starts_with("header:") {
            Kind::Header
        } else if name.starts_with('$') {
            Kind::BodyField
        } else {
            Kind::Body
        }
    }
}

/// The fields of one answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields {
    /// name -> value (JSON leaves as their JSON text; a missing field is absent).
    pub map: BTreeMap<String, String>,
    /// The raw body when it was compared as bytes (for the first differing offset).
    pub body: Option<Vec<u8>>,
    /// Whether the answer's body was whole (a cut body is compared on the common prefix only).
    pub complete: bool,
}

impl Fields {
    /// Fields of an HTTP answer; headers named in `ignore_headers` (lowercase) are left out.
    pub fn of_answer(a: &Answer, ignore_headers: &[String]) -> Fields {
        let mut map = BTreeMap::new();
        map.insert("status".to_string(), a.status.to_string());
        for (n, _) in &a.headers {
            if ignore_headers.iter().any(|i| i == n) {
                continue;
            }
            let key = format!("header:{n}");
            map.entry(key)
                .or_insert_with(|| short(&a.header(n).unwrap_or_default()));
        }
        let mut f = Fields {
            map,
            body: None,
            complete: a.complete,
        };
        let json = if a.complete && (a.is_json() || looks_json(&a.body)) {
            serde_json::from_slice::<Value>(&a.body).ok()
        } else {
            None
        };
        match json {
            Some(v) => {
                let mut path = String::from("$");
                let mut budget = MAX_LEAVES;
                flatten(&v, &mut path, &mut f.map, &mut budget);
                if budget == 0 {
                    f.map.insert("body".into(), digest(&a.body));
                }
            }
            None => {
                f.map.insert("body".into(), digest(&a.body));
                f.body = Some(a.body.clone());
            }
        }
        f
    }

    /// Fields of a non-HTTP answer: its bytes.
    pub fn of_bytes(bytes: &[u8], complete: bool) -> Fields {
        let mut map = BTreeMap::new();
        map.insert("body".into(), digest(bytes));
        Fields {
            map,
            body: Some(bytes.to_vec()),
            complete,
        }
    }
}

fn looks_json(body: &[u8]) -> bool {
    matches!(
        body.iter().find(|b| !b.is_ascii_whitespace()),
        Some(b'{' | b'[')
    )
}

fn flatten(v: &Value, path: &mut String, out: &mut BTreeMap<String, String>, budget: &mut usize) {
    if *budget == 0 {
        return;
    }
    let len = path.len();
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                if k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !k.is_empty() {
                    let _ = write!(path, ".{k}");
                } else {
                    let _ = write!(path, "[{}]", Value::String(k.clone()));
                }
                flatten(x, path, out, budget);
                path.truncate(len);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, x) in a.iter().enumerate() {
                let _ = write!(path, "[{i}]");
                flatten(x, path, out, budget);
                path.truncate(len);
            }
        }
        leaf => {
            *budget -= 1;
            out.insert(path.clone(), short(&leaf.to_string()));
        }
    }
}

/// A value cut to `MAX_VALUE` characters, with the length and a hash when cut.
fn short(s: &str) -> String {
    if s.len() <= MAX_VALUE {
        return s.to_string();
    }
    let mut end = MAX_VALUE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}...({} bytes, {:016x})",
        &s[..end],
        s.len(),
        fnv(s.as_bytes())
    )
}

fn digest(b: &[u8]) -> String {
    format!("{} bytes {:016x}", b.len(), fnv(b))
}

/// FNV-1a, 64 bits: stable across runs and platforms (fingerprints, sampling).
pub use common::hash::fnv1a as fnv;

/// One field that differs between two answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldDiff {
    /// The field (`status`, `header:x-a`, `$.items[3].price`, `body`).
    pub field: String,
    /// Its kind.
    pub kind: Kind,
    /// The value in the expected (online) answer, absent when the field is missing there.
    pub online: Option<String>,
    /// The value in the other answer.
    pub test: Option<String>,
    /// For a byte body: the first offset where the bytes differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<usize>,
}

/// The fields that differ between `a` (online) and `b` (test). When either body is cut, bodies
/// are compared on their common prefix only (a cut is not a difference).
pub fn diff(a: &Fields, b: &Fields) -> Vec<FieldDiff> {
    let mut out = Vec::new();
    let whole = a.complete && b.complete;
    let mut keys: Vec<&String> = a.map.keys().chain(b.map.keys()).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        let (x, y) = (a.map.get(k), b.map.get(k));
        if x == y {
            continue;
        }
        let mut offset = None;
        if k == "body" {
            if let (Some(ba), Some(bb)) = (&a.body, &b.body) {
                let common = ba.len().min(bb.len());
                let first = ba.iter().zip(bb.iter()).position(|(p, q)| p != q);
                match first {
                    Some(i) => offset = Some(i),
                    None if ba.len() != bb.len() && whole => offset = Some(common),
                    None => continue, // one is a prefix of the other and a body was cut
                }
            } else if !whole {
                continue;
            }
        } else if !whole && Kind::of(k) == Kind::BodyField {
            continue;
        }
        out.push(FieldDiff {
            field: k.clone(),
            kind: Kind::of(k),
            online: x.cloned(),
            test: y.cloned(),
            offset,
        });
    }
    out
}

/// The field name with array indexes replaced by `[*]`: the key of noise and ignore patterns.
pub fn generalize(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(i) = rest.find('[') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        match after.find(']') {
            Some(j) if j > 0 && after[..j].bytes().all(|c| c.is_ascii_digit()) => {
                out.push_str("[*]");
                rest = &after[j + 1..];
            }
            _ => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{parse_answer, Limits};

    fn fields(raw: &str) -> Fields {
        Fields::of_answer(
            &parse_answer(raw.as_bytes(), false, Limits::default()).unwrap(),
            &["date".into()],
        )
    }

    fn json(body: &str) -> String {
        format!(
            "HTTP/1.1 200 OK\r\nDate: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    #[test]
    fn json_leaves_and_paths() {
        let f = fields(&json(
            r#"{"items":[{"price":3},{"price":4.5}],"a b":null,"e":[],"s":"x"}"#,
        ));
        let keys: Vec<&str> = f.map.keys().map(|s| s.as_str()).collect();
        assert_eq!(
            keys,
            [
                "$.e",
                "$.items[0].price",
                "$.items[1].price",
                "$.s",
                "$[\"a b\"]",
                "header:content-length",
                "header:content-type",
                "status"
            ]
        );
        assert_eq!(f.map["$.s"], "\"x\"");
    }

    #[test]
    fn one_field_changed() {
        let a = fields(&json(r#"{"items":[{"price":3},{"price":4}],"n":1}"#));
        let b = fields(&json(r#"{"items":[{"price":3},{"price":5}],"n":1}"#));
        let d = diff(&a, &b);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].field, "$.items[1].price");
        assert_eq!(d[0].kind, Kind::BodyField);
        assert_eq!(
            (d[0].online.as_deref(), d[0].test.as_deref()),
            (Some("4"), Some("5"))
        );
        assert_eq!(generalize(&d[0].field), "$.items[*].price");
        // same value, key order changed: equal
        let c = fields(&json(r#"{"n":1,"items":[{"price":3},{"price":4}]}"#));
        assert!(diff(&a, &c).is_empty());
    }

    #[test]
    fn missing_field_status_and_bytes() {
        let a = fields(&json(r#"{"a":1,"b":2}"#));
        let b = fields("HTTP/1.1 500 Oops\r\nContent-Length: 5\r\n\r\nerror");
        let kinds: Vec<(String, Kind)> = diff(&a, &b)
            .into_iter()
            .map(|d| (d.field, d.kind))
            .collect();
        assert!(kinds.contains(&("status".into(), Kind::Status)));
        assert!(kinds.contains(&("$.a".into(), Kind::BodyField)));
        assert!(kinds.contains(&("body".into(), Kind::Body)));
        assert!(kinds.contains(&("header:content-type".into(), Kind::Header)));
        let x = Fields::of_bytes(b"+OK hello", true);
        let y = Fields::of_bytes(b"+OK help", true);
        let d = diff(&x, &y);
        assert_eq!((d.len(), d[0].offset), (1, Some(7)));
        // a prefix of a cut body is no difference; of a whole one it is, at the shorter length
        assert!(diff(&x, &Fields::of_bytes(b"+OK he", false)).is_empty());
        assert_eq!(
            diff(&x, &Fields::of_bytes(b"+OK he", true))[0].offset,
            Some(6)
        );
    }

    #[test]
    fn long_values_and_huge_documents_stay_bounded() {
        let long = "x".repeat(5000);
        let f = fields(&json(&format!(r#"{{"s":"{long}"}}"#)));
        assert!(f.map["$.s"].len() < 300);
        let big: Vec<String> = (0..MAX_LEAVES + 10).map(|i| i.to_string()).collect();
        let f = fields(&json(&format!("[{}]", big.join(","))));
        assert!(f.map.len() <= MAX_LEAVES + 4);
        assert!(f.map.contains_key("body"));
    }

    #[test]
    fn generalize_paths() {
        assert_eq!(generalize("$.a[12].b[0][3]"), "$.a[*].b[*][*]");
        assert_eq!(generalize("$[\"x[1]\"]"), "$[\"x[*]\"]");
        assert_eq!(generalize("header:x"), "header:x");
        assert_eq!(generalize("$.a[]"), "$.a[]");
    }
}
