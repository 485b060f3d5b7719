//! Captured session keys remembered for a while: those left out while the copier was behind
//! (`Engine::shed_keys`), and those whose session ended after the client's FIN
//! (`Engine::closed_keys`). A later non-SYN segment of a remembered key is dropped instead of
//! starting a mid-stream session; a SYN on it forgets it (a new connection).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use common::flow::FourTuple;

use super::FastHash;

/// Keys with the instant each was remembered, at most `cap` of them (the oldest forgotten
/// first), each forgotten `ttl` after it was remembered.
#[derive(Debug)]
pub(crate) struct KeyMemo {
    keys: HashMap<FourTuple, Instant, FastHash>,
    /// `(remembered at, key)` in order: the expiry queue (entries of keys forgotten or
    /// remembered again since are skipped).
    fifo: VecDeque<(Instant, FourTuple)>,
    cap: usize,
    ttl: Duration,
}

impl KeyMemo {
    pub(crate) fn new(hash: FastHash, cap: usize, ttl: Duration) -> KeyMemo {
        KeyMemo {
            keys: HashMap::with_hasher(hash),
            fifo: VecDeque::new(),
            cap,
            ttl,
        }
    }

    /// Remember `key` from `now` (again, if it was).
    pub(crate) fn insert(&mut self, now: Instant, key: FourTuple) {
        self.expire(now);
        while !self.keys.contains_key(&key) && self.keys.len() >= self.cap {
            let Some((at, k)) = self.fifo.pop_front() else {
                break;
            };
            if self.keys.get(&k) == Some(&at) {
                self.keys.remove(&k);
            }
        }
        self.keys.insert(key, now);
        self.fifo.push_back((now, key));
    }

    /// Whether `key` is remembered at `now` (not yet expired).
    pub(crate) fn holds(&self, now: Instant, key: &FourTuple) -> bool {
        self.keys
            .get(key)
            .is_some_and(|&at| now.saturating_duration_since(at) < self.ttl)
    }

    /// Whether a captured segment of `key` is kept out at `now`: `key` is remembered and the
    /// segment is no SYN. A SYN (a new connection on the port) forgets it.
    pub(crate) fn keeps_out(&mut self, now: Instant, key: &FourTuple, syn: bool) -> bool {
        if !self.holds(now, key) {
            return false;
        }
        if syn {
            self.keys.remove(key);
        }
        !syn
    }

    /// Forget `key`; whether it was remembered.
    #[cfg(test)]
    pub(crate) fn remove(&mut self, key: &FourTuple) -> bool {
        self.keys.remove(key).is_some()
    }

    /// Forget the keys remembered `ttl` or longer before `now`.
    pub(crate) fn expire(&mut self, now: Instant) {
        while let Some(&(at, k)) = self.fifo.front() {
            if now.saturating_duration_since(at) < self.ttl {
                break;
            }
            self.fifo.pop_front();
            if self.keys.get(&k) == Some(&at) {
                self.keys.remove(&k);
            }
        }
        if self.keys.is_empty() && self.fifo.capacity() > 1024 {
            self.fifo = VecDeque::new();
            self.keys.shrink_to_fit();
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(port: u16) -> FourTuple {
        FourTuple {
            client: format!("198.18.0.1:{port}").parse().unwrap(),
            server: "198.18.1.1:80".parse().unwrap(),
        }
    }

    #[test]
    fn keys_expire_after_the_ttl_and_the_oldest_goes_past_the_cap() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut m = KeyMemo::new(FastHash::new(7), 2, 5 * s);
        m.insert(t0, key(1));
        m.insert(t0 + s, key(2));
        assert!(m.holds(t0 + 4 * s, &key(1)));
        assert!(
            !m.holds(t0 + 5 * s, &key(1)),
            "expired by its age, before any sweep"
        );
        // Past the cap: the oldest goes.
        m.insert(t0 + 2 * s, key(3));
        assert_eq!(m.len(), 2);
        assert!(!m.holds(t0 + 2 * s, &key(1)));
        assert!(m.holds(t0 + 2 * s, &key(2)) && m.holds(t0 + 2 * s, &key(3)));
        // Remembered again: its new instant counts, and the stale queue entry forgets nothing.
        m.insert(t0 + 3 * s, key(2));
        m.expire(t0 + 7 * s + Duration::from_millis(1));
        assert_eq!(m.len(), 1);
        assert!(m.holds(t0 + 7 * s, &key(2)));
        assert!(!m.holds(t0 + 7 * s, &key(3)));
        assert!(m.keeps_out(t0 + 7 * s, &key(2), false));
        assert!(!m.keeps_out(t0 + 7 * s, &key(2), true), "a SYN forgets it");
        assert!(!m.keeps_out(t0 + 7 * s, &key(2), false));
        assert!(!m.remove(&key(2)));
        assert_eq!(m.len(), 0);
    }
}
