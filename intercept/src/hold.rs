//! The hold buffer: records of responses that no copier has (yet) registered, kept for a short
//! time in case the registration is still on its way (a SYN-ACK can beat the Register message).
//!
//! Invariants:
//! - at most `capacity` records and at most `max_bytes` bytes ([`record_size`]) are held;
//!   pushing into a full buffer evicts the oldest until the new record fits (a record larger
//!   than `max_bytes` on its own is not held at all);
//! - records of one 4-tuple come back out in arrival order;
//! - a record never stays longer than `hold_time` once [`HoldBuffer::expire`] has run at or after
//!   its deadline;
//! - memory is bounded by `max_bytes` of live records, plus the entries taken out within the
//!   last `hold_time` (a taken entry leaves a hole of a few dozen bytes, no record, in the
//!   arrival queue until it reaches the front).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::proto::Record;

/// Bytes a record costs while it waits (in the hold buffer or a copier's queue): its headers
/// and payload plus the record's own bookkeeping. Held records of a daemon with
/// `--payload-bytes` carry up to that many payload bytes each, so the byte bounds
/// (`--hold-bytes`, `--copier-queue-bytes`), not the record counts, bound the memory.
pub fn record_size(r: &Record) -> usize {
    r.headers.len() + r.payload.len() + RECORD_OVERHEAD
}

/// What a [`Record`] costs beyond its bytes: the struct and its two allocations' headers.
pub const RECORD_OVERHEAD: usize = std::mem::size_of::<Record>() + 32;

/// Records evicted by one [`HoldBuffer::push`], by which bound made room.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Evicted {
    /// Evicted because `capacity` records were held (`hold_overflow`).
    pub count: usize,
    /// Evicted because the bytes held would have passed `max_bytes` (`hold_bytes`), the new
    /// record itself included when it alone is larger.
    pub bytes: usize,
}

#[derive(Debug)]
struct Entry {
    at: Instant,
    tuple: FourTuple,
    record: Option<Record>,
}

/// Records waiting for a registration, in arrival order, indexed by 4-tuple.
#[derive(Debug)]
pub struct HoldBuffer {
    queue: VecDeque<Entry>,
    /// Sequence number of `queue[0]`.
    base: u64,
    /// Sequence numbers of the live entries of each tuple, ascending.
    by_tuple: HashMap<FourTuple, VecDeque<u64>>,
    live: usize,
    /// Bytes of the live records ([`record_size`]).
    bytes: usize,
    capacity: usize,
    max_bytes: usize,
    hold_time: Duration,
}

impl HoldBuffer {
    /// An empty buffer of at most `capacity` records and `max_bytes` bytes. A `capacity` of 0
    /// holds nothing (every push is evicted at once).
    pub fn new(capacity: usize, max_bytes: usize, hold_time: Duration) -> HoldBuffer {
        HoldBuffer {
            queue: VecDeque::new(),
            base: 0,
            by_tuple: HashMap::new(),
            live: 0,
            bytes: 0,
            capacity,
            max_bytes,
            hold_time,
        }
    }

    /// Bytes held now ([`record_size`] of each record).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Records held now.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Hold a record; returns how many records were evicted to make room, oldest first (the
    /// new record itself when it cannot be held at all).
    pub fn push(&mut self, now: Instant, tuple: FourTuple, record: Record) -> Evicted {
        let size = record_size(&record);
        if self.capacity == 0 {
            return Evicted { count: 1, bytes: 0 };
        }
        if size > self.max_bytes {
            return Evicted { count: 0, bytes: 1 };
        }
        let mut evicted = Evicted::default();
        if self.live >= self.capacity {
            evicted.count = usize::from(self.pop_oldest_live());
        }
        while self.bytes + size > self.max_bytes && self.pop_oldest_live() {
            evicted.bytes += 1;
        }
        let seq = self.base + self.queue.len() as u64;
        self.queue.push_back(Entry {
            at: now,
            tuple,
            record: Some(record),
        });
        self.by_tuple.entry(tuple).or_default().push_back(seq);
        self.live += 1;
        self.bytes += size;
        evicted
    }

    /// Take out every record held for `tuple`, oldest first.
    pub fn take(&mut self, tuple: &FourTuple) -> Vec<Record> {
        let Some(seqs) = self.by_tuple.remove(tuple) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(seqs.len());
        for seq in seqs {
            let idx = (seq - self.base) as usize;
            if let Some(r) = self.queue.get_mut(idx).and_then(|e| e.record.take()) {
                self.bytes -= record_size(&r);
                out.push(r);
                self.live -= 1;
            }
        }
        self.trim_front();
        out
    }

    /// Drop the records whose hold time is over; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let mut n = 0;
        while let Some(front) = self.queue.front() {
            if now.saturating_duration_since(front.at) < self.hold_time {
                break;
            }
            n += usize::from(self.pop_front());
        }
        self.trim_front();
        n
    }

    /// When the oldest held record expires.
    pub fn next_expiry(&self) -> Option<Instant> {
        // trim_front keeps a live entry (or nothing) at the front.
        self.queue.front().map(|e| e.at + self.hold_time)
    }

    /// Pop the front entry; true if it held a record (which is dropped).
    fn pop_front(&mut self) -> bool {
        let Some(e) = self.queue.pop_front() else {
            return false;
        };
        self.base += 1;
        let Some(r) = e.record else {
            return false;
        };
        self.bytes -= record_size(&r);
        self.live -= 1;
        if let Some(seqs) = self.by_tuple.get_mut(&e.tuple) {
            seqs.pop_front();
            if seqs.is_empty() {
                self.by_tuple.remove(&e.tuple);
            }
        }
        true
    }

    fn pop_oldest_live(&mut self) -> bool {
        while !self.queue.is_empty() {
            if self.pop_front() {
                self.trim_front();
                return true;
            }
        }
        false
    }

    /// Remove holes (taken entries) from the front.
    fn trim_front(&mut self) {
        while self.queue.front().is_some_and(|e| e.record.is_none()) {
            self.queue.pop_front();
            self.base += 1;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn tuple(port: u16) -> FourTuple {
        FourTuple::new(
            format!("198.18.9.1:{port}").parse().unwrap(),
            "198.18.2.2:80".parse().unwrap(),
        )
    }

    fn rec(n: u32) -> Record {
        Record {
            orig_len: n,
            headers: vec![],
            payload: vec![],
            stamp: 0,
        }
    }

    const HOLD: Duration = Duration::from_secs(2);
    const NONE: Evicted = Evicted { count: 0, bytes: 0 };
    const BY_COUNT: Evicted = Evicted { count: 1, bytes: 0 };

    /// A record as a daemon with `--payload-bytes 65495` keeps of a full-sized packet
    /// (numbered `n`); for the byte-bound tests here and in `crate::outlet`.
    pub(crate) fn big(n: u32) -> Record {
        Record {
            orig_len: n,
            headers: vec![0; 52],
            payload: vec![n as u8; 65495],
            stamp: 0,
        }
    }

    #[test]
    fn large_records_stay_under_the_byte_bound_and_the_oldest_go() {
        let t0 = Instant::now();
        let max = 1 << 20;
        let mut h = HoldBuffer::new(4096, max, HOLD);
        let mut by_bytes = 0;
        for n in 0..100 {
            let e = h.push(t0, tuple(n as u16 + 1), big(n));
            assert_eq!(e.count, 0);
            by_bytes += e.bytes;
            assert!(h.bytes() <= max, "{} bytes held against {max}", h.bytes());
        }
        let fit = max / record_size(&big(0));
        assert_eq!(h.len(), fit, "as many whole records as fit");
        assert_eq!(by_bytes, 100 - fit);
        // The oldest went: the first still held is number 100 - fit.
        assert!(h.take(&tuple(100 - fit as u16)).is_empty());
        assert_eq!(
            h.take(&tuple(100 - fit as u16 + 1)),
            vec![big(100 - fit as u32)]
        );
        assert_eq!(h.bytes(), (fit - 1) * record_size(&big(0)));
        assert_eq!(h.expire(t0 + HOLD), fit - 1);
        assert_eq!(h.bytes(), 0);
    }

    #[test]
    fn a_record_larger_than_the_byte_bound_is_not_held() {
        let t0 = Instant::now();
        let mut h = HoldBuffer::new(10, 1000, HOLD);
        assert_eq!(h.push(t0, tuple(1), rec(1)), NONE);
        assert_eq!(h.push(t0, tuple(2), big(2)), Evicted { count: 0, bytes: 1 });
        assert_eq!(h.len(), 1, "the small one stays");
        assert_eq!(h.bytes(), record_size(&rec(1)));
    }

    #[test]
    fn take_returns_records_of_one_tuple_in_order() {
        let t0 = Instant::now();
        let mut h = HoldBuffer::new(10, usize::MAX, HOLD);
        h.push(t0, tuple(1), rec(1));
        h.push(t0, tuple(2), rec(2));
        h.push(t0, tuple(1), rec(3));
        assert_eq!(h.len(), 3);
        assert_eq!(h.take(&tuple(1)), vec![rec(1), rec(3)]);
        assert_eq!(h.len(), 1);
        assert!(h.take(&tuple(1)).is_empty());
        assert_eq!(h.take(&tuple(2)), vec![rec(2)]);
        assert!(h.is_empty());
        assert_eq!(h.next_expiry(), None);
        assert!(h.queue.is_empty(), "holes are trimmed");
    }

    #[test]
    fn expiry_drops_only_old_records() {
        let t0 = Instant::now();
        let mut h = HoldBuffer::new(10, usize::MAX, HOLD);
        h.push(t0, tuple(1), rec(1));
        h.push(t0 + Duration::from_secs(1), tuple(1), rec(2));
        assert_eq!(h.next_expiry(), Some(t0 + HOLD));
        assert_eq!(h.expire(t0 + Duration::from_millis(1999)), 0);
        assert_eq!(h.expire(t0 + HOLD), 1);
        assert_eq!(h.next_expiry(), Some(t0 + Duration::from_secs(3)));
        assert_eq!(h.take(&tuple(1)), vec![rec(2)]);
        assert_eq!(h.expire(t0 + Duration::from_secs(10)), 0);
    }

    #[test]
    fn full_buffer_evicts_the_oldest() {
        let t0 = Instant::now();
        let mut h = HoldBuffer::new(2, usize::MAX, HOLD);
        assert_eq!(h.push(t0, tuple(1), rec(1)), NONE);
        assert_eq!(h.push(t0, tuple(2), rec(2)), NONE);
        assert_eq!(h.push(t0, tuple(3), rec(3)), BY_COUNT);
        assert_eq!(h.len(), 2);
        assert!(h.take(&tuple(1)).is_empty());
        assert_eq!(h.take(&tuple(3)), vec![rec(3)]);
        // A hole at the back does not count as live.
        assert_eq!(h.push(t0, tuple(4), rec(4)), NONE);
        assert_eq!(h.push(t0, tuple(5), rec(5)), BY_COUNT);
        assert!(h.take(&tuple(2)).is_empty());
        assert_eq!(h.take(&tuple(4)), vec![rec(4)]);
        assert_eq!(h.take(&tuple(5)), vec![rec(5)]);
    }

    #[test]
    fn zero_capacity_holds_nothing() {
        let mut h = HoldBuffer::new(0, usize::MAX, HOLD);
        assert_eq!(h.push(Instant::now(), tuple(1), rec(1)), BY_COUNT);
        assert!(h.is_empty());
    }

    #[test]
    fn holes_in_the_middle_are_skipped_by_expiry() {
        let t0 = Instant::now();
        let mut h = HoldBuffer::new(10, usize::MAX, HOLD);
        h.push(t0, tuple(1), rec(1));
        h.push(t0, tuple(2), rec(2));
        h.push(t0, tuple(1), rec(3));
        assert_eq!(h.take(&tuple(2)), vec![rec(2)]);
        assert_eq!(h.expire(t0 + HOLD), 2);
        assert!(h.is_empty());
        assert!(h.by_tuple.is_empty());
    }
}
