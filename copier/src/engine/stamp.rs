//! [`Stamp`]: an instant in 8 bytes (and `Option<Stamp>` in 8), for the times a session keeps.
//!
//! A `std::time::Instant` is 16 bytes and an `Option<Instant>` too; a session and its
//! connection keep about a dozen of them, which at 10,000 live sessions was about 1 MiB (see
//! "Engine memory per live session" in BENCHMARKS.md). A stamp is the nanoseconds since a
//! process-wide epoch set about 34 years before the first stamp was made (so every instant the
//! engine sees comes after it), plus one (so that zero is free for `None`). It converts to and
//! from the `Instant` exactly, and orders as it does.

use std::num::NonZeroU64;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How far before the first stamp the epoch lies: far more than any run, far less than the
/// 584 years a `u64` of nanoseconds holds.
const BEFORE: Duration = Duration::from_secs(1 << 30);

static EPOCH: OnceLock<Instant> = OnceLock::new();

fn epoch() -> Instant {
    *EPOCH.get_or_init(|| {
        let now = Instant::now();
        now.checked_sub(BEFORE).unwrap_or(now)
    })
}

/// An instant, as nanoseconds since the process's epoch, plus one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Stamp(NonZeroU64);

impl Stamp {
    /// The stamp of `t` (an instant before the epoch, which the engine never sees, saturates
    /// to the epoch).
    #[inline]
    pub(crate) fn of(t: Instant) -> Stamp {
        // Seconds and nanoseconds apart: no 128-bit arithmetic on the engine's paths.
        let d = t.saturating_duration_since(epoch());
        let ns = d
            .as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(d.subsec_nanos()));
        Stamp(NonZeroU64::MIN.saturating_add(ns))
    }

    /// The instant it stands for.
    #[inline]
    pub(crate) fn at(self) -> Instant {
        epoch() + Duration::from_nanos(self.0.get() - 1)
    }
}

impl From<Instant> for Stamp {
    fn from(t: Instant) -> Stamp {
        Stamp::of(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_exact_ordered_and_small() {
        assert_eq!(std::mem::size_of::<Option<Stamp>>(), 8);
        let t0 = Instant::now();
        let times = [
            t0,
            t0 + Duration::from_nanos(1),
            t0 + Duration::from_millis(3),
            t0 + Duration::from_secs(86_400 * 400),
        ];
        for a in times {
            assert_eq!(Stamp::of(a).at(), a);
            for b in times {
                assert_eq!(Stamp::of(a).cmp(&Stamp::of(b)), a.cmp(&b));
            }
        }
    }
}
