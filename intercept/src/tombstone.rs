//! Tombstones: 4-tuples whose registration ended recently. The test server may still
//! retransmit to such a tuple (a SYN-ACK is retried for about a minute when the copier went
//! away in the middle of a handshake); the router drops those packets instead of treating them
//! like any other response, which an allow list or a local address could let through.
//!
//! Invariants:
//! - at most `capacity` tombstones live; adding one to a full set removes the oldest first;
//! - a tombstone lives `linger` from when it was laid; [`Tombstones::expire`] at or after that
//!   time removes it;
//! - laying a tombstone again restarts its linger; [`Tombstones::clear`] removes it at once;
//! - the arrival queue holds live entries plus stale ones (cleared or re-laid tuples); it is
//!   compacted when it grows past twice the live count (plus a small floor), so memory stays
//!   proportional to `capacity`.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use common::flow::FourTuple;

/// The set of recently unregistered tuples; see the module doc.
#[derive(Debug)]
pub struct Tombstones {
    /// Tuple -> when its tombstone was laid.
    live: HashMap<FourTuple, Instant>,
    /// (laid at, tuple) in laying order; an entry is stale when `live` has another time for
    /// the tuple (or none).
    order: VecDeque<(Instant, FourTuple)>,
    linger: Duration,
    capacity: usize,
}

impl Tombstones {
    /// An empty set. A `capacity` of 0 keeps nothing; a `linger` of 0 expires at once.
    pub fn new(capacity: usize, linger: Duration) -> Tombstones {
        Tombstones {
            live: HashMap::new(),
            order: VecDeque::new(),
            linger,
            capacity,
        }
    }

    /// Tombstones now.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Whether `t` is a tombstone.
    pub fn contains(&self, t: &FourTuple) -> bool {
        self.live.contains_key(t)
    }

    /// Lay a tombstone for `t` at `now`; returns how many older ones were evicted for room
    /// (0 or 1).
    pub fn lay(&mut self, now: Instant, t: FourTuple) -> usize {
        if self.capacity == 0 || self.linger.is_zero() {
            return 0;
        }
        let mut evicted = 0;
        if !self.live.contains_key(&t) && self.live.len() >= self.capacity {
            while let Some((at, old)) = self.order.pop_front() {
                if self.live.get(&old) == Some(&at) {
                    self.live.remove(&old);
                    evicted = 1;
                    break;
                }
            }
        }
        self.live.insert(t, now);
        self.order.push_back((now, t));
        if self.order.len() > 2 * self.live.len() + 64 {
            let live = &self.live;
            self.order.retain(|(at, t)| live.get(t) == Some(at));
        }
        evicted
    }

    /// Remove `t`'s tombstone (a new registration); true if there was one.
    pub fn clear(&mut self, t: &FourTuple) -> bool {
        self.live.remove(t).is_some()
    }

    /// Remove the tombstones whose linger is over; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let mut n = 0;
        while let Some(&(at, t)) = self.order.front() {
            if self.live.get(&t) != Some(&at) {
                self.order.pop_front();
                continue;
            }
            if now.saturating_duration_since(at) < self.linger {
                break;
            }
            self.order.pop_front();
            self.live.remove(&t);
            n += 1;
        }
        n
    }

    /// When the oldest live tombstone expires.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.order
            .iter()
            .find(|(at, t)| self.live.get(t) == Some(at))
            .map(|(at, _)| *at + self.linger)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(port: u16) -> FourTuple {
        FourTuple::new(
            format!("198.19.0.1:{port}").parse().unwrap(),
            "198.18.2.2:80".parse().unwrap(),
        )
    }

    const LINGER: Duration = Duration::from_secs(120);

    #[test]
    fn lay_expire_clear() {
        let t0 = Instant::now();
        let mut s = Tombstones::new(10, LINGER);
        s.lay(t0, t(1));
        s.lay(t0 + Duration::from_secs(1), t(2));
        assert!(s.contains(&t(1)) && s.contains(&t(2)));
        assert_eq!(s.next_expiry(), Some(t0 + LINGER));
        assert_eq!(s.expire(t0 + LINGER - Duration::from_millis(1)), 0);
        assert_eq!(s.expire(t0 + LINGER), 1);
        assert!(!s.contains(&t(1)));
        assert!(s.clear(&t(2)));
        assert!(s.is_empty());
        assert_eq!(s.next_expiry(), None);
        assert_eq!(s.expire(t0 + 10 * LINGER), 0);
        assert!(s.order.is_empty());
    }

    #[test]
    fn relaying_restarts_the_linger() {
        let t0 = Instant::now();
        let mut s = Tombstones::new(10, LINGER);
        s.lay(t0, t(1));
        s.lay(t0 + Duration::from_secs(60), t(1));
        assert_eq!(s.len(), 1);
        assert_eq!(s.expire(t0 + LINGER), 0, "the first laying is stale");
        assert!(s.contains(&t(1)));
        assert_eq!(s.next_expiry(), Some(t0 + Duration::from_secs(60) + LINGER));
        assert_eq!(s.expire(t0 + Duration::from_secs(60) + LINGER), 1);
    }

    #[test]
    fn bounded_oldest_first_and_compacted() {
        let t0 = Instant::now();
        let mut s = Tombstones::new(3, LINGER);
        for p in 1..=3 {
            assert_eq!(s.lay(t0, t(p)), 0);
        }
        assert_eq!(s.lay(t0, t(4)), 1);
        assert!(!s.contains(&t(1)));
        assert!(s.contains(&t(4)));
        // churn on one tuple keeps the queue bounded
        for i in 0..10_000u64 {
            s.lay(t0 + Duration::from_millis(i), t(4));
            s.clear(&t(4));
        }
        assert!(s.order.len() <= 2 * s.len() + 65, "{}", s.order.len());
    }

    #[test]
    fn zero_capacity_or_linger_keeps_nothing() {
        let mut s = Tombstones::new(0, LINGER);
        s.lay(Instant::now(), t(1));
        assert!(s.is_empty());
        let mut s = Tombstones::new(5, Duration::ZERO);
        s.lay(Instant::now(), t(1));
        assert!(s.is_empty());
    }
}
