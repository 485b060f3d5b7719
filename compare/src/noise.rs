//! Noise: the fields whose differences say nothing about the version under test.
//!
//! Owns: [`Ignore`] (the configured patterns: a generalized field name such as
//! `header:x-request-id` or `$.items[*].ts`, or a prefix ending in `*` such as `$.meta.*`),
//! [`Learned`] (noise learned per endpoint, keyed by generalized field name, at most
//! [`MAX_NOISE_PER_ENDPOINT`] each) and [`Repeats`] (noise learned from repeated disagreement: a
//! bounded table of the last answers to identical requests, by fingerprint; a field whose value
//! changes between two answers of the same side to the same request is not deterministic, so it
//! is noise). Bound: [`Repeats`] holds at most `cap` requests x [`FINGERPRINT_FIELDS`] x 2 sides
//! x 16 bytes (1,024 requests: 4 MiB).

use std::collections::{HashMap, HashSet, VecDeque};

use crate::fields::{fnv, generalize, Fields};

/// Noise fields learned per endpoint at most (later ones are still filtered by the baseline of
/// their own exchange, but not remembered).
pub const MAX_NOISE_PER_ENDPOINT: usize = 256;
/// Fields of an answer kept in a fingerprint.
pub const FINGERPRINT_FIELDS: usize = 128;

/// The configured ignore list.
#[derive(Debug, Clone, Default)]
pub struct Ignore {
    exact: HashSet<String>,
    prefixes: Vec<String>,
}

impl Ignore {
    /// Patterns as given by the user (see the module doc).
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Ignore {
        let mut ig = Ignore::default();
        for p in patterns {
            let p = p.as_ref().trim();
            let p = match p.strip_prefix("header:") {
                Some(h) => format!("header:{}", h.to_ascii_lowercase()),
                None => p.to_string(),
            };
            match p.strip_suffix('*') {
                Some(pre) if !pre.ends_with('[') => ig.prefixes.push(generalize(pre)),
                _ => {
                    ig.exact.insert(generalize(&p));
                }
            }
        }
        ig
    }

    /// Whether `field` (concrete or generalized) is ignored.
    pub fn matches(&self, field: &str) -> bool {
        let g = generalize(field);
        self.exact.contains(&g) || self.prefixes.iter().any(|p| g.starts_with(p.as_str()))
    }
}

/// Noise learned per endpoint (by endpoint index).
#[derive(Debug, Clone, Default)]
pub struct Learned {
    by_endpoint: HashMap<usize, HashSet<String>>,
}

impl Learned {
    /// Learns `field` as noise of endpoint `ep`; true when it is new.
    pub fn learn(&mut self, ep: usize, field: &str) -> bool {
        let set = self.by_endpoint.entry(ep).or_default();
        if set.len() >= MAX_NOISE_PER_ENDPOINT {
            return false;
        }
        set.insert(generalize(field))
    }

    /// Whether `field` is learned noise of `ep`.
    pub fn contains(&self, ep: usize, field: &str) -> bool {
        self.by_endpoint
            .get(&ep)
            .is_some_and(|s| s.contains(&generalize(field)))
    }

    /// The noise fields of `ep`, sorted.
    pub fn of(&self, ep: usize) -> Vec<String> {
        let mut v: Vec<String> = self
            .by_endpoint
            .get(&ep)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        v.sort();
        v
    }
}

type Fingerprint = Vec<(u64, u64)>;

fn fingerprint(f: &Fields) -> Fingerprint {
    let mut v: Fingerprint = f
        .map
        .iter()
        .take(FINGERPRINT_FIELDS)
        .map(|(k, x)| (fnv(k.as_bytes()), fnv(x.as_bytes())))
        .collect();
    v.sort_unstable();
    v
}

/// The fields of `now` whose value differs from the one in `before` (fields absent from either
/// are not judged: a missing field is not noise).
fn changed(before: &Fingerprint, now: &Fields) -> Vec<String> {
    let mut out = Vec::new();
    for (k, x) in now.map.iter().take(FINGERPRINT_FIELDS) {
        let kh = fnv(k.as_bytes());
        if let Ok(i) = before.binary_search_by_key(&kh, |e| e.0) {
            if before[i].1 != fnv(x.as_bytes()) {
                out.push(k.clone());
            }
        }
    }
    out
}

/// The last answers to identical requests (see the module doc).
#[derive(Debug, Clone)]
pub struct Repeats {
    cap: usize,
    table: HashMap<u64, [Fingerprint; 2]>,
    order: VecDeque<u64>,
}

impl Repeats {
    /// A table of at most `cap` requests (oldest forgotten first).
    pub fn new(cap: usize) -> Repeats {
        Repeats {
            cap,
            table: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Records the online and test answers to the request `key` (a hash of method, target and
    /// body) and returns the fields that changed since the last answers to the same request.
    pub fn observe(&mut self, key: u64, online: &Fields, test: &Fields) -> Vec<String> {
        let now = [fingerprint(online), fingerprint(test)];
        let mut out = Vec::new();
        if let Some(before) = self.table.get(&key) {
            out.extend(changed(&before[0], online));
            out.extend(changed(&before[1], test));
            out.sort();
            out.dedup();
        } else {
            if self.cap == 0 {
                return out;
            }
            if self.table.len() >= self.cap {
                if let Some(old) = self.order.pop_front() {
                    self.table.remove(&old);
                }
            }
            self.order.push_back(key);
        }
        self.table.insert(key, now);
        out
    }

    /// Requests remembered.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(pairs: &[(&str, &str)]) -> Fields {
        let mut x = Fields {
            complete: true,
            ..Fields::default()
        };
        for (k, v) in pairs {
            x.map.insert(k.to_string(), v.to_string());
        }
        x
    }

    #[test]
    fn ignore_patterns() {
        let ig = Ignore::new(&[
            "header:X-Request-Id",
            "$.items[*].ts",
            "$.meta.*",
            "$.list[0].id",
        ]);
        assert!(ig.matches("header:x-request-id"));
        assert!(ig.matches("$.items[7].ts"));
        assert!(ig.matches("$.meta.host"));
        assert!(ig.matches("$.list[3].id"));
        assert!(!ig.matches("$.items[7].price"));
        assert!(!ig.matches("header:x-other"));
    }

    #[test]
    fn learned_per_endpoint() {
        let mut l = Learned::default();
        assert!(l.learn(1, "$.a[3].ts"));
        assert!(!l.learn(1, "$.a[4].ts"));
        assert!(l.contains(1, "$.a[0].ts"));
        assert!(!l.contains(2, "$.a[0].ts"));
        assert_eq!(l.of(1), ["$.a[*].ts"]);
        for i in 0..MAX_NOISE_PER_ENDPOINT + 5 {
            l.learn(3, &format!("$.f{i}"));
        }
        assert_eq!(l.of(3).len(), MAX_NOISE_PER_ENDPOINT);
    }

    #[test]
    fn repeats_find_fields_that_change_for_the_same_request() {
        let mut r = Repeats::new(2);
        let on = f(&[("status", "200"), ("$.price", "3")]);
        let t1 = f(&[("status", "200"), ("$.price", "4"), ("$.ts", "1")]);
        let t2 = f(&[("status", "200"), ("$.price", "4"), ("$.ts", "2")]);
        assert!(r.observe(7, &on, &t1).is_empty());
        // the changed price is deterministic (same both times): only the time stamp is noise
        assert_eq!(r.observe(7, &on, &t2), ["$.ts"]);
        // bounded: the oldest request is forgotten
        r.observe(8, &on, &t1);
        r.observe(9, &on, &t1);
        assert_eq!(r.len(), 2);
        assert!(r.observe(7, &on, &t2).is_empty());
    }
}
