//! Pairing: the parts of an exchange arrive at different times (the request and the online
//! answer from the capture, each test answer from its intercept, seconds later or never); they
//! wait here until all are in.
//!
//! Owns: [`Pending`], keyed by the caller's key (session and request unit), bounded by entries
//! and by bytes (the oldest entries are shed to make room, counted) and by time (an entry older
//! than the timeout expires: compared two-way when only the baseline's answer is missing,
//! otherwise counted as expired). No clock: `now` is passed in. The byte bound holds when an
//! entry is made; the later parts of that entry may pass it by their own size (the caller
//! bounds each part: an answer is cut to its `--compare-bytes`).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

use crate::comparator::{Exchange, Reply};

/// One part of an exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// The request's bytes and the server port.
    Request(u16, Vec<u8>),
    /// The online answer.
    Online(Reply),
    /// The candidate's answer.
    Candidate(Reply),
    /// The baseline's answer.
    Baseline(Reply),
}

const REQ: u8 = 1;
const ONLINE: u8 = 2;
const CAND: u8 = 4;
const BASE: u8 = 8;

impl Part {
    fn bit(&self) -> u8 {
        match self {
            Part::Request(..) => REQ,
            Part::Online(_) => ONLINE,
            Part::Candidate(_) => CAND,
            Part::Baseline(_) => BASE,
        }
    }

    fn len(&self) -> usize {
        match self {
            Part::Request(_, b) => b.len(),
            Part::Online(r) | Part::Candidate(r) | Part::Baseline(r) => r.bytes.len(),
        }
    }
}

#[derive(Debug)]
struct Entry {
    born: Instant,
    have: u8,
    bytes: usize,
    ex: Exchange,
}

/// What was dropped unpaired, for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PendingCounts {
    /// Entries that timed out without an online or candidate answer.
    pub expired: u64,
    /// Entries shed to stay within the bounds.
    pub shed: u64,
}

/// The table (see the module doc).
#[derive(Debug)]
pub struct Pending<K> {
    timeout: Duration,
    max_entries: usize,
    max_bytes: usize,
    want_baseline: bool,
    map: HashMap<K, Entry>,
    order: VecDeque<(Instant, K)>,
    bytes: usize,
    counts: PendingCounts,
}

impl<K: Hash + Eq + Clone> Pending<K> {
    /// A table whose entries wait at most `timeout`, at most `max_entries` of them holding at
    /// most `max_bytes`; `want_baseline`: an exchange is whole only with a baseline answer.
    pub fn new(
        timeout: Duration,
        max_entries: usize,
        max_bytes: usize,
        want_baseline: bool,
    ) -> Self {
        Pending {
            timeout,
            max_entries: max_entries.max(1),
            max_bytes,
            want_baseline,
            map: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            counts: PendingCounts::default(),
        }
    }

    fn need(&self) -> u8 {
        REQ | ONLINE | CAND | if self.want_baseline { BASE } else { 0 }
    }

    /// Adds a part; returns the exchange when it is whole. A part given twice replaces the first.
    pub fn add(&mut self, now: Instant, key: K, part: Part) -> Option<Exchange> {
        let len = part.len();
        while !self.map.contains_key(&key)
            && (self.map.len() >= self.max_entries || self.bytes + len > self.max_bytes)
            && self.shed_oldest()
        {}
        if !self.map.contains_key(&key) {
            if self.bytes + len > self.max_bytes {
                self.counts.shed += 1;
                return None;
            }
            self.order.push_back((now, key.clone()));
            let ex = Exchange {
                baseline_expected: self.want_baseline,
                ..Exchange::default()
            };
            self.map.insert(
                key.clone(),
                Entry {
                    born: now,
                    have: 0,
                    bytes: 0,
                    ex,
                },
            );
        }
        let e = self.map.get_mut(&key)?;
        let bit = part.bit();
        match part {
            Part::Request(port, b) => {
                e.ex.port = port;
                e.ex.request = b;
            }
            Part::Online(r) => e.ex.online = r,
            Part::Candidate(r) => e.ex.candidate = r,
            Part::Baseline(r) => e.ex.baseline = Some(r),
        }
        e.have |= bit;
        self.bytes += len;
        e.bytes += len;
        if e.have & self.need() == self.need() {
            return self.take(&key);
        }
        None
    }

    fn take(&mut self, key: &K) -> Option<Exchange> {
        let e = self.map.remove(key)?;
        self.bytes -= e.bytes;
        Some(e.ex)
    }

    fn shed_oldest(&mut self) -> bool {
        while let Some((born, k)) = self.order.pop_front() {
            if self.map.get(&k).is_some_and(|e| e.born == born) {
                self.take(&k);
                self.counts.shed += 1;
                return true;
            }
        }
        false
    }

    /// Expires entries older than the timeout; returns those that can still be compared
    /// two-way (everything but the baseline's answer came).
    pub fn expire(&mut self, now: Instant) -> Vec<Exchange> {
        let mut out = Vec::new();
        while let Some((born, k)) = self.order.front().cloned() {
            if now.saturating_duration_since(born) < self.timeout {
                break;
            }
            self.order.pop_front();
            if self.map.get(&k).is_none_or(|e| e.born != born) {
                continue;
            }
            let have = self.map[&k].have;
            let ex = self.take(&k);
            match ex {
                Some(ex) if have & (REQ | ONLINE | CAND) == REQ | ONLINE | CAND => out.push(ex),
                _ => self.counts.expired += 1,
            }
        }
        out
    }

    /// Forgets the entries whose key `gone` picks, uncounted (the caller counts why: an HTTP/2
    /// connection that cannot be compared on); how many went.
    pub fn forget(&mut self, gone: impl Fn(&K) -> bool) -> usize {
        let keys: Vec<K> = self.map.keys().filter(|k| gone(k)).cloned().collect();
        for k in &keys {
            self.take(k);
        }
        keys.len()
    }

    /// Forgets every entry (counted as shed); the counts stay.
    pub fn clear(&mut self) {
        self.counts.shed += self.map.len() as u64;
        self.map.clear();
        self.order.clear();
        self.bytes = 0;
    }

    /// When the oldest entry expires.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.order.front().map(|(t, _)| *t + self.timeout)
    }

    /// Entries waiting.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Expired and shed so far.
    pub fn counts(&self) -> PendingCounts {
        self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(b: &[u8]) -> Reply {
        Reply {
            bytes: b.to_vec(),
            complete: true,
            time: None,
        }
    }

    #[test]
    fn pairs_in_any_order() {
        let t0 = Instant::now();
        let mut p: Pending<(u64, u32)> = Pending::new(Duration::from_secs(10), 100, 1 << 20, false);
        assert!(p.add(t0, (1, 0), Part::Candidate(r(b"c"))).is_none());
        assert!(p.add(t0, (1, 0), Part::Online(r(b"o"))).is_none());
        let ex = p
            .add(
                t0 + Duration::from_secs(3),
                (1, 0),
                Part::Request(80, b"q".to_vec()),
            )
            .unwrap();
        assert_eq!(
            (
                ex.request.as_slice(),
                ex.online.bytes.as_slice(),
                ex.candidate.bytes.as_slice()
            ),
            (&b"q"[..], &b"o"[..], &b"c"[..])
        );
        assert!(p.is_empty());
        assert_eq!(p.bytes(), 0);
    }

    #[test]
    fn expiry_compares_without_the_baseline_and_counts_the_rest() {
        let t0 = Instant::now();
        let mut p: Pending<u32> = Pending::new(Duration::from_secs(10), 100, 1 << 20, true);
        p.add(t0, 1, Part::Request(80, b"q".to_vec()));
        p.add(t0, 1, Part::Online(r(b"o")));
        p.add(t0, 1, Part::Candidate(r(b"c")));
        p.add(
            t0 + Duration::from_secs(1),
            2,
            Part::Request(80, b"q".to_vec()),
        );
        p.add(t0 + Duration::from_secs(1), 2, Part::Online(r(b"o")));
        assert_eq!(p.next_deadline(), Some(t0 + Duration::from_secs(10)));
        assert!(p.expire(t0 + Duration::from_secs(9)).is_empty());
        let out = p.expire(t0 + Duration::from_millis(10_500));
        assert_eq!(out.len(), 1);
        assert!(out[0].baseline_expected && out[0].baseline.is_none());
        assert_eq!(p.counts().expired, 0);
        assert!(p.expire(t0 + Duration::from_secs(12)).is_empty());
        assert_eq!(
            p.counts(),
            PendingCounts {
                expired: 1,
                shed: 0
            }
        );
        assert!(p.is_empty());
    }

    #[test]
    fn bounded_by_entries_and_bytes() {
        let t0 = Instant::now();
        let mut p: Pending<u32> = Pending::new(Duration::from_secs(10), 3, 1000, false);
        for k in 0..10 {
            p.add(t0, k, Part::Online(r(&[0; 100])));
        }
        assert_eq!(p.len(), 3);
        assert_eq!(p.counts().shed, 7);
        // a huge part sheds the others, and one larger than the bound is refused
        p.add(t0, 100, Part::Online(r(&[0; 900])));
        assert_eq!((p.len(), p.bytes()), (2, 1000));
        p.add(t0, 101, Part::Online(r(&[0; 2000])));
        assert_eq!((p.len(), p.bytes()), (0, 0));
        assert_eq!(p.counts().shed, 7 + 2 + 2 + 1);
    }
}
