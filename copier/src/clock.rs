//! Times of packets seen elsewhere, on the copier's clock: what `--compare` times answers by.
//!
//! Owns:
//! - [`wall_ns`]: the copier's wall clock (`CLOCK_REALTIME`, nanoseconds since the Unix epoch),
//!   the clock that the kernel stamps captured packets with (`tpacket3_hdr.tp_sec/tp_nsec`) and
//!   that the stamps of the intercepts' records are translated to;
//! - [`OffsetFilter`]: the offset between an intercept's clock and ours, NTP-style, from Pings
//!   whose token is our clock at sending (t1) and Pongs that carry the intercept's clock when it
//!   read the Ping (t2), read at t4: `offset = t2 - (t1 + t4) / 2`, wrong by at most half the
//!   round trip (the whole asymmetry of the two directions). Of the last [`SAMPLES`] samples the
//!   one with the smallest round trip is used (the one least delayed by queued records or a
//!   busy thread), so the estimate follows a drifting clock within `SAMPLES` pings;
//! - [`ClockSync`]: one filter per control link, shared by the link's writer and reader, and the
//!   translation of a batch of records ([`ClockSync::translate`]);
//! - [`Anchor`]: our wall clock as `Instant`s, for the comparison, whose streams run on
//!   `Instant` (the pair is read together and refreshed, so a stepped wall clock is followed).
//!
//! No socket here; only [`wall_ns`], [`ClockSync::on_pong_now`] and [`Anchor::now`] read a clock.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::proto::Record;

/// Round-trip samples kept per link; the smallest round trip among them gives the offset.
pub const SAMPLES: usize = 16;

/// The copier's wall clock in nanoseconds since the Unix epoch (0 before 1970).
#[must_use]
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// One round trip: `rtt` and `offset` (the intercept's clock minus ours) in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Our clock from sending the Ping to reading its Pong.
    pub rtt: u64,
    /// The intercept's clock minus ours.
    pub offset: i64,
}

/// The minimum-round-trip filter over the last [`SAMPLES`] Ping/Pong exchanges.
#[derive(Debug, Clone, Default)]
pub struct OffsetFilter {
    samples: Vec<Sample>,
    next: usize,
}

impl OffsetFilter {
    /// A Pong for the Ping sent at our `t1`, carrying the intercept's `t2`, read at our `t4`.
    /// A Pong read "before" its Ping (our clock stepped back) is ignored.
    pub fn handle_pong(&mut self, t1: u64, t2: u64, t4: u64) {
        if t1 == 0 || t2 == 0 || t4 < t1 {
            return;
        }
        let rtt = t4 - t1;
        let mid = i128::from(t1) + i128::from(rtt / 2);
        let offset = i64::try_from(i128::from(t2) - mid).unwrap_or(0);
        let s = Sample { rtt, offset };
        if self.samples.len() < SAMPLES {
            self.samples.push(s);
        } else {
            self.samples[self.next] = s;
        }
        self.next = (self.next + 1) % SAMPLES;
    }

    /// The sample in use (smallest round trip kept), if any Pong came.
    #[must_use]
    pub fn best(&self) -> Option<Sample> {
        self.samples.iter().copied().min_by_key(|s| s.rtt)
    }

    /// `stamp` (the intercept's clock) on our clock; 0 when it is 0 or no Pong came yet.
    #[must_use]
    pub fn to_local(&self, stamp: u64) -> u64 {
        match self.best() {
            Some(s) if stamp != 0 => {
                u64::try_from(i128::from(stamp) - i128::from(s.offset)).unwrap_or(0)
            }
            _ => 0,
        }
    }
}

/// One control link's clock offset, written by its Pong reader and read by its record reader.
#[derive(Debug, Default)]
pub struct ClockSync {
    filter: Mutex<OffsetFilter>,
}

impl ClockSync {
    /// A Pong read now: `token` is our clock when its Ping was sent, `clock` the intercept's
    /// (0 from an intercept without `FEATURE_STAMPS`: nothing to learn).
    pub fn on_pong_now(&self, token: u64, clock: u64) {
        if clock != 0 {
            let t4 = wall_ns();
            let mut f = self.filter.lock().unwrap_or_else(|p| p.into_inner());
            f.handle_pong(token, clock, t4);
            if let Some(s) = f.best() {
                tracing::debug!(
                    rtt_us = s.rtt / 1000,
                    offset_us = s.offset / 1000,
                    "control link clock offset"
                );
            }
        }
    }

    /// Translate the stamps of `records` (the intercept's clock) to ours, in place; a stamp
    /// stays 0 (unknown: the comparison then uses the time the record was read) while no Pong
    /// has given the offset yet.
    pub fn translate(&self, records: &mut [Record]) {
        if records.iter().all(|r| r.stamp == 0) {
            return;
        }
        let f = self.filter.lock().unwrap_or_else(|p| p.into_inner());
        for r in records {
            r.stamp = f.to_local(r.stamp);
        }
    }

    /// The sample in use, if any.
    pub fn best(&self) -> Option<Sample> {
        self.filter.lock().unwrap_or_else(|p| p.into_inner()).best()
    }
}

/// Stamps further than this from our clock's now are not believed (a stepped clock, a broken
/// peer): the caller's own time is used instead.
const BELIEVABLE: Duration = Duration::from_secs(60);

/// Our wall clock read together with the monotonic clock: wall-clock stamps as `Instant`s.
#[derive(Debug, Clone, Copy)]
pub struct Anchor {
    at: Instant,
    wall: u64,
}

impl Anchor {
    /// The pair `(at, wall)`, read together.
    #[must_use]
    pub fn new(at: Instant, wall: u64) -> Anchor {
        Anchor { at, wall }
    }

    /// Both clocks now.
    #[must_use]
    pub fn now() -> Anchor {
        Anchor::new(Instant::now(), wall_ns())
    }

    /// The `Instant` of wall-clock `stamp` (nanoseconds since the Unix epoch); `None` for 0 or
    /// a stamp more than a minute from the anchor.
    #[must_use]
    pub fn instant(&self, stamp: u64) -> Option<Instant> {
        if stamp == 0 {
            return None;
        }
        if stamp >= self.wall {
            let d = Duration::from_nanos(stamp - self.wall);
            (d <= BELIEVABLE).then(|| self.at + d)
        } else {
            let d = Duration::from_nanos(self.wall - stamp);
            if d <= BELIEVABLE {
                self.at.checked_sub(d)
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_764_000_000_000_000_000;
    const MS: u64 = 1_000_000;

    #[test]
    fn symmetric_round_trip_gives_the_exact_offset() {
        let mut f = OffsetFilter::default();
        // The intercept's clock is 250 ms ahead; 2 ms each way.
        f.handle_pong(S, S + 250 * MS + 2 * MS, S + 4 * MS);
        assert_eq!(
            f.best(),
            Some(Sample {
                rtt: 4 * MS,
                offset: (250 * MS) as i64
            })
        );
        assert_eq!(f.to_local(S + 300 * MS), S + 50 * MS);
    }

    #[test]
    fn smallest_round_trip_wins_and_old_samples_leave() {
        let mut f = OffsetFilter::default();
        let ahead = 7 * MS;
        // A Pong that waited 30 ms behind queued records at the intercept: offset off by 15 ms.
        f.handle_pong(S, S + ahead + MS, S + 32 * MS);
        assert_eq!(f.best().unwrap().offset, (ahead as i64) - (15 * MS) as i64);
        f.handle_pong(S + 1000 * MS, S + 1000 * MS + ahead + MS, S + 1002 * MS);
        assert_eq!(f.best().unwrap().offset, ahead as i64);
        // The clock drifts by 1 ms: after SAMPLES pings the old best is gone.
        for i in 0..SAMPLES as u64 {
            let t1 = S + (2000 + i * 1000) * MS;
            f.handle_pong(t1, t1 + ahead + MS + 2 * MS, t1 + 4 * MS);
        }
        assert_eq!(f.best().unwrap().offset, (ahead + MS) as i64);
    }

    #[test]
    fn behind_clocks_and_nonsense() {
        let mut f = OffsetFilter::default();
        assert_eq!(f.to_local(S), 0, "no Pong yet: unknown");
        f.handle_pong(S, 0, S + MS);
        f.handle_pong(S + MS, S, S);
        assert_eq!(
            f.best(),
            None,
            "a Pong without a clock, or read before its Ping, teaches nothing"
        );
        f.handle_pong(S, S - 5000 * MS, S + 2 * MS);
        assert_eq!(f.best().unwrap().offset, -(5001 * MS as i64));
        assert_eq!(f.to_local(0), 0);
        assert_eq!(f.to_local(S - 4000 * MS), S + 1001 * MS);
    }

    #[test]
    fn translate_leaves_unstamped_records_alone() {
        let sync = ClockSync::default();
        let rec = |stamp| Record {
            orig_len: 40,
            headers: vec![],
            payload: vec![],
            stamp,
        };
        let mut rs = vec![rec(S), rec(0)];
        sync.translate(&mut rs);
        assert_eq!((rs[0].stamp, rs[1].stamp), (0, 0), "no offset yet: unknown");
        sync.filter.lock().unwrap().handle_pong(S, S + 10 * MS, S);
        let mut rs = vec![rec(S + 20 * MS), rec(0)];
        sync.translate(&mut rs);
        assert_eq!((rs[0].stamp, rs[1].stamp), (S + 10 * MS, 0));
    }

    #[test]
    fn anchor_maps_both_ways_and_refuses_the_absurd() {
        let at = Instant::now() + Duration::from_secs(100);
        let a = Anchor::new(at, S);
        assert_eq!(a.instant(S + 20 * MS), Some(at + Duration::from_millis(20)));
        assert_eq!(a.instant(S - 20 * MS), Some(at - Duration::from_millis(20)));
        assert_eq!(a.instant(0), None);
        assert_eq!(a.instant(S + 3600 * 1000 * MS), None);
        assert_eq!(a.instant(S - 3600 * 1000 * MS), None);
    }
}
