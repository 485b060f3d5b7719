//! The comparison of one exchange: the online answer (expected), the candidate's, and, when
//! there is a baseline, the baseline's.
//!
//! Owns: [`Comparator`], a plain state machine: [`Comparator::compare`] takes an [`Exchange`]
//! and returns its [`Verdict`], updating the per-endpoint [`EndpointStats`] and the noise it
//! learned. Rules (three-way): a field where the baseline differs from online is noise, learned
//! for the endpoint; a field where the candidate differs and that is neither ignored nor noise
//! is a difference. Without a baseline, noise is the ignore list plus what [`Repeats`] learns
//! (fields that change between answers of one side to identical requests). HTTP/1.x answers are
//! compared field by field; anything else as bytes (first differing offset). An answer that is
//! not valid HTTP while the other one is, is counted malformed and not compared.

use std::time::Duration;

use crate::endpoint::{template, Endpoints};
use crate::fields::{diff, fnv, FieldDiff, Fields, Kind};
use crate::http::{looks_like_answer, parse_answer, parse_request_head, Limits};
use crate::noise::{Ignore, Learned, Repeats};
use crate::stats::{EndpointStats, Summary, Totals, MAX_FIELDS, MAX_GRPC_STATUSES};

/// Headers never compared by default: they differ between any two answers or only describe the
/// framing and the transfer coding (the body is compared decoded: a gzip answer and a plain one
/// with the same text are equal; nginx, for one, does not gzip error answers).
pub const DEFAULT_IGNORED_HEADERS: &[&str] = &[
    "date",
    "content-length",
    "transfer-encoding",
    "content-encoding",
    "connection",
    "keep-alive",
];

/// What the comparator is told.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    /// Ignore patterns (fields `$.a[*].b`, `header:name`, prefixes `$.meta.*`).
    pub ignore: Vec<String>,
    /// Headers left out entirely (lowercase).
    pub ignored_headers: Vec<String>,
    /// Endpoints tracked at most.
    pub max_endpoints: usize,
    /// Parser limits.
    pub limits: Limits,
    /// Differences kept per verdict (the rest are counted).
    pub max_diffs: usize,
    /// Requests remembered to learn noise from repeated disagreement (0: off).
    pub repeat_table: usize,
    /// Headers whose values never leave the comparator: compared, but a difference reads
    /// `[redacted]` / `[redacted, differs]` in its [`Verdict`].
    pub redact: crate::redact::Redact,
}

impl Default for CompareConfig {
    fn default() -> Self {
        CompareConfig {
            ignore: Vec::new(),
            ignored_headers: DEFAULT_IGNORED_HEADERS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            max_endpoints: 500,
            limits: Limits::default(),
            max_diffs: 32,
            repeat_table: 1024,
            redact: crate::redact::Redact::default(),
        }
    }
}

/// One answer as captured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    /// Its bytes from the start (maybe only the first ones).
    pub bytes: Vec<u8>,
    /// Whether `bytes` is all of it (false: cut by a limit).
    pub complete: bool,
    /// From the request's first byte to the answer's first byte, when known.
    pub time: Option<Duration>,
}

/// A request and its answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exchange {
    /// The server port (names non-HTTP endpoints).
    pub port: u16,
    /// The request's bytes (its head at least).
    pub request: Vec<u8>,
    /// The online service's answer.
    pub online: Reply,
    /// The candidate's answer.
    pub candidate: Reply,
    /// The baseline's answer, when there is a baseline and it answered.
    pub baseline: Option<Reply>,
    /// Whether a baseline answer was expected (and is missing when `baseline` is None).
    pub baseline_expected: bool,
}

/// What became of an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No difference left after noise.
    Equal,
    /// At least one difference.
    Differ,
    /// An answer was not HTTP while the online one was (which one: "online", "candidate").
    Malformed(&'static str),
}

/// The result of one comparison.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The endpoint (template or `(other)`, `tcp/PORT` for non-HTTP).
    pub endpoint: String,
    /// The request line (method and target), or empty for non-HTTP.
    pub request: String,
    /// Outcome.
    pub outcome: Outcome,
    /// The differences (at most `max_diffs`), online vs candidate (redacted headers' values
    /// replaced by markers: `CompareConfig::redact`).
    pub diffs: Vec<FieldDiff>,
    /// Differences found in all (`diffs` may be fewer).
    pub diff_count: usize,
    /// Fields learned as noise by this exchange (generalized).
    pub learned: Vec<String>,
    /// Online and candidate answer times.
    pub online_time: Option<Duration>,
    /// ...
    pub test_time: Option<Duration>,
}

/// The comparison state (see the module doc).
#[derive(Debug)]
pub struct Comparator {
    cfg: CompareConfig,
    ignore: Ignore,
    endpoints: Endpoints,
    stats: Vec<EndpointStats>,
    learned: Learned,
    repeats: Repeats,
    totals: Totals,
}

impl Comparator {
    /// A comparator with nothing learned.
    pub fn new(cfg: CompareConfig) -> Comparator {
        Comparator {
            ignore: Ignore::new(&cfg.ignore),
            endpoints: Endpoints::new(cfg.max_endpoints),
            stats: Vec::new(),
            learned: Learned::default(),
            repeats: Repeats::new(cfg.repeat_table),
            totals: Totals::default(),
            cfg,
        }
    }

    /// Compares one exchange.
    pub fn compare(&mut self, ex: &Exchange) -> Verdict {
        let http = looks_like_answer(&ex.online.bytes);
        let head = if http {
            parse_request_head(&ex.request).ok()
        } else {
            None
        };
        let (name, request) = match &head {
            Some(h) => (
                template(&h.method, &h.target),
                format!("{} {}", h.method, h.target),
            ),
            None if http => ("(unparsed request)".to_string(), String::new()),
            None => (format!("tcp/{}", ex.port), String::new()),
        };
        let ep = self.endpoints.intern(&name);
        if self.stats.len() <= ep {
            self.stats.resize_with(ep + 1, EndpointStats::default);
        }
        let mut v = Verdict {
            endpoint: self.endpoints.name(ep).to_string(),
            request,
            outcome: Outcome::Equal,
            diffs: Vec::new(),
            diff_count: 0,
            learned: Vec::new(),
            online_time: ex.online.time,
            test_time: ex.candidate.time,
        };
        let is_head = head.as_ref().is_some_and(|h| h.method == "HEAD");
        let fields = |r: &Reply, this: &Self| -> Option<Fields> {
            if !http {
                return Some(Fields::of_bytes(&r.bytes, r.complete));
            }
            let mut a = parse_answer(&r.bytes, is_head, this.cfg.limits).ok()?;
            a.complete &= r.complete
                || a.header("content-length").is_some()
                || a.header("transfer-encoding").is_some();
            Some(Fields::of_answer(&a, &this.cfg.ignored_headers))
        };
        let Some(online) = fields(&ex.online, self) else {
            return self.malformed(ep, v, "online");
        };
        let Some(cand) = fields(&ex.candidate, self) else {
            return self.malformed(ep, v, "candidate");
        };
        if let Some(g) = cand.map.get("header:grpc-status") {
            let m = &mut self.totals.grpc_status;
            let k = if m.len() < MAX_GRPC_STATUSES || m.contains_key(g) {
                g.clone()
            } else {
                "other".to_string()
            };
            *m.entry(k).or_default() += 1;
        }
        let base = ex.baseline.as_ref().and_then(|b| fields(b, self));
        if ex.baseline_expected && base.is_none() {
            self.totals.baseline_missing += 1;
        }
        // noise: from the baseline, and from repeated disagreement
        let mut noise_now: Vec<String> = Vec::new();
        if let Some(b) = &base {
            noise_now.extend(diff(&online, b).into_iter().map(|d| d.field));
        }
        // only whole answers: a cut one would look like a changed value
        if let (Some(h), true) = (&head, online.complete && cand.complete) {
            let body = h
                .head_len
                .map_or(&[][..], |n| &ex.request[n.min(ex.request.len())..]);
            let key = fnv(format!("{}\0{}\0{:016x}", h.method, h.target, fnv(body)).as_bytes());
            noise_now.extend(self.repeats.observe(key, &online, &cand));
        }
        for f in &noise_now {
            if !self.ignore.matches(f) && self.learned.learn(ep, f) {
                v.learned.push(crate::fields::generalize(f));
            }
        }
        let all = diff(&online, &cand);
        let mut kept: Vec<FieldDiff> = all
            .into_iter()
            .filter(|d| {
                !self.ignore.matches(&d.field)
                    && !self.learned.contains(ep, &d.field)
                    && !noise_now.contains(&d.field)
            })
            .collect();
        v.diff_count = kept.len();
        kept.truncate(self.cfg.max_diffs);
        for d in &mut kept {
            self.cfg.redact.diff(d);
        }
        v.diffs = kept;
        v.outcome = if v.diff_count == 0 {
            Outcome::Equal
        } else {
            Outcome::Differ
        };
        self.count(ep, &v);
        v
    }

    fn malformed(&mut self, ep: usize, mut v: Verdict, side: &'static str) -> Verdict {
        v.outcome = Outcome::Malformed(side);
        self.totals.malformed += 1;
        self.stats[ep].malformed += 1;
        v
    }

    fn count(&mut self, ep: usize, v: &Verdict) {
        let s = &mut self.stats[ep];
        s.compared += 1;
        self.totals.compared += 1;
        s.noise_learned += v.learned.len() as u64;
        if let Some(t) = v.online_time {
            s.online_time.add(t);
        }
        if let Some(t) = v.test_time {
            s.test_time.add(t);
        }
        if v.diff_count == 0 {
            s.equal += 1;
            self.totals.equal += 1;
            return;
        }
        s.differing += 1;
        self.totals.differing += 1;
        let mut kinds: Vec<Kind> = v.diffs.iter().map(|d| d.kind).collect();
        kinds.sort();
        kinds.dedup();
        for k in kinds {
            *s.by_kind.entry(k).or_default() += 1;
        }
        let mut names: Vec<String> = v
            .diffs
            .iter()
            .map(|d| crate::fields::generalize(&d.field))
            .collect();
        names.sort();
        names.dedup();
        for n in names {
            if s.fields.len() < MAX_FIELDS || s.fields.contains_key(&n) {
                *s.fields.entry(n).or_default() += 1;
            }
        }
    }

    /// Stats of every endpoint: (name, stats).
    pub fn endpoints(&self) -> impl Iterator<Item = (&str, &EndpointStats)> {
        self.stats
            .iter()
            .enumerate()
            .map(|(i, s)| (self.endpoints.name(i), s))
    }

    /// Noise learned for the endpoint named `name` (generalized fields, sorted).
    pub fn noise_of(&self, name: &str) -> Vec<String> {
        (0..self.endpoints.len())
            .find(|&i| self.endpoints.name(i) == name)
            .map(|i| self.learned.of(i))
            .unwrap_or_default()
    }

    /// Totals.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    /// The summary (endpoints by difference rate, worst first). Fields learned as noise after
    /// they were first counted as differences are left out of the endpoint's fields.
    pub fn summary(&self) -> Summary {
        let mut endpoints: Vec<(String, EndpointStats, Vec<String>)> = self
            .stats
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut s = s.clone();
                s.fields.retain(|f, _| !self.learned.contains(i, f));
                (self.endpoints.name(i).to_string(), s, self.learned.of(i))
            })
            .collect();
        endpoints.sort_by(|a, b| {
            b.1.diff_rate()
                .total_cmp(&a.1.diff_rate())
                .then(a.0.cmp(&b.0))
        });
        Summary {
            totals: self.totals.clone(),
            endpoints,
        }
    }
}

#[cfg(test)]
mod tests;
