//! Endpoints: requests grouped by method and path template, with a cap on how many are tracked.
//!
//! Owns: [`template`] (`GET /items/123?x=1` -> `GET /items/{n}`; numbers, UUIDs, long hex and
//! long mixed letter-digit tokens collapse; the query is dropped) and [`Endpoints`] (interns
//! templates up to a cap; past it every new template is [`OTHER`]).

use std::collections::HashMap;

/// The endpoint of every template past the cap.
pub const OTHER: &str = "(other)";

/// The template of a request: method, a space, the path with ids collapsed.
pub fn template(method: &str, target: &str) -> String {
    let path = target.split(['?', '#']).next().unwrap_or("");
    // absolute-form targets (proxies): keep the path only
    let path = match path.find("://") {
        Some(i) => path[i + 3..].find('/').map_or("/", |j| &path[i + 3 + j..]),
        None => path,
    };
    let mut out = String::with_capacity(method.len() + path.len() + 1);
    out.push_str(method);
    out.push(' ');
    for (i, seg) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        out.push_str(collapse(seg));
        if out.len() > 200 {
            out.push_str("...");
            break;
        }
    }
    out
}

fn collapse(seg: &str) -> &str {
    if seg.is_empty() {
        return seg;
    }
    if seg.bytes().all(|b| b.is_ascii_digit()) {
        return "{n}";
    }
    let hexish = seg.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    let digits = seg.bytes().filter(u8::is_ascii_digit).count();
    if hexish && seg.len() >= 8 && digits > 0 {
        return "{id}";
    }
    let token = seg
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if token && seg.len() >= 16 && digits >= 2 {
        return "{id}";
    }
    seg
}

/// The endpoints tracked, at most `cap` (then [`OTHER`]).
#[derive(Debug, Clone)]
pub struct Endpoints {
    cap: usize,
    ids: HashMap<String, usize>,
    names: Vec<String>,
}

impl Endpoints {
    /// A table of at most `cap` endpoints (plus [`OTHER`]).
    pub fn new(cap: usize) -> Endpoints {
        Endpoints {
            cap,
            ids: HashMap::new(),
            names: Vec::new(),
        }
    }

    /// The index of `name`, added when there is room, else the index of [`OTHER`].
    pub fn intern(&mut self, name: &str) -> usize {
        if let Some(&i) = self.ids.get(name) {
            return i;
        }
        let name = if self.names.len() >= self.cap {
            OTHER
        } else {
            name
        };
        if let Some(&i) = self.ids.get(name) {
            return i;
        }
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), self.names.len() - 1);
        self.names.len() - 1
    }

    /// The name of endpoint `i`.
    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// How many endpoints are tracked (with [`OTHER`] when used).
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether none is tracked yet.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        assert_eq!(template("GET", "/items/123?x=1"), "GET /items/{n}");
        assert_eq!(
            template("GET", "/u/550e8400-e29b-41d4-a716-446655440000/p"),
            "GET /u/{id}/p"
        );
        assert_eq!(
            template("PUT", "/o/deadbeef12/x/AbC123dEf456GhI7"),
            "PUT /o/{id}/x/{id}"
        );
        assert_eq!(template("GET", "/static/app.js"), "GET /static/app.js");
        assert_eq!(template("GET", "/cafe"), "GET /cafe");
        assert_eq!(template("GET", "http://h:8/a/7"), "GET /a/{n}");
        assert_eq!(template("GET", "/"), "GET /");
        assert!(template("GET", &"/abc".repeat(200)).len() < 220);
    }

    #[test]
    fn cap() {
        let mut e = Endpoints::new(2);
        let a = e.intern("GET /a");
        assert_eq!(e.intern("GET /a"), a);
        let b = e.intern("GET /b");
        let c = e.intern("GET /c");
        assert_eq!(e.intern("GET /d"), c);
        assert_eq!(e.name(c), OTHER);
        assert_ne!(a, b);
        assert_eq!(e.len(), 3);
    }
}
