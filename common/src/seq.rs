//! TCP sequence numbers with wrap-around arithmetic.
//!
//! [`SeqNum`] is the only type in the workspace that should hold a sequence or acknowledgement
//! number that gets compared. Comparisons follow serial number arithmetic (RFC 1982, as in
//! RFC 793's "modulo 2^32"): `a` is before `b` when the signed 32-bit difference `a - b` is
//! negative. Two numbers exactly 2^31 apart are *unordered* (RFC 1982 leaves the case
//! undefined): every comparison between them returns `false` and `partial_cmp` returns `None`.
//! That is why `Ord` is not implemented: the relation is not transitive over the whole ring, so
//! a `SeqNum` must never be a key of a sorted collection.

use std::cmp::Ordering;
use std::fmt;
use std::ops::{Add, AddAssign};

/// A 32-bit TCP sequence (or acknowledgement) number that compares with wrap-around.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct SeqNum(pub u32);

impl SeqNum {
    /// `self + n`, wrapping at 2^32.
    #[allow(clippy::should_implement_trait)] // the name is the contract; `Add<u32>` exists too
    #[must_use]
    pub const fn add(self, n: u32) -> SeqNum {
        SeqNum(self.0.wrapping_add(n))
    }

    /// `self - n`, wrapping at 2^32.
    #[allow(clippy::should_implement_trait)]
    #[must_use]
    pub const fn sub(self, n: u32) -> SeqNum {
        SeqNum(self.0.wrapping_sub(n))
    }

    /// `self - other` as a signed distance: positive when `self` is after `other`.
    /// Exactly 2^31 apart gives `i32::MIN` (see the module doc).
    #[must_use]
    pub const fn diff(self, other: SeqNum) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// How far `self` lies after `base` going forward, modulo 2^32: the offset of byte `self`
    /// in a stream whose byte 0 is `base` (unsigned, unlike [`SeqNum::diff`]).
    #[must_use]
    pub const fn offset_from(self, base: SeqNum) -> u32 {
        self.0.wrapping_sub(base.0)
    }

    /// Whether the two numbers are exactly 2^31 apart, where no order is defined.
    const fn unordered(d: i32) -> bool {
        d == i32::MIN
    }

    /// `self` strictly before `other` (wrap-aware).
    #[must_use]
    pub const fn lt(self, other: SeqNum) -> bool {
        let d = self.diff(other);
        d < 0 && !Self::unordered(d)
    }

    /// `self` before or equal to `other` (wrap-aware).
    #[must_use]
    pub const fn le(self, other: SeqNum) -> bool {
        let d = self.diff(other);
        d <= 0 && !Self::unordered(d)
    }

    /// `self` strictly after `other` (wrap-aware).
    #[must_use]
    pub const fn gt(self, other: SeqNum) -> bool {
        self.diff(other) > 0
    }

    /// `self` after or equal to `other` (wrap-aware).
    #[must_use]
    pub const fn ge(self, other: SeqNum) -> bool {
        self.diff(other) >= 0
    }

    /// The later of the two (wrap-aware); `self` when they are equal or unordered.
    #[must_use]
    pub const fn max(self, other: SeqNum) -> SeqNum {
        if other.gt(self) {
            other
        } else {
            self
        }
    }

    /// The earlier of the two (wrap-aware); `self` when they are equal or unordered.
    #[must_use]
    pub const fn min(self, other: SeqNum) -> SeqNum {
        if other.lt(self) {
            other
        } else {
            self
        }
    }

    /// Whether `self` lies in the half-open window `[start, start + len)`, wrap-aware.
    #[must_use]
    pub const fn in_window(self, start: SeqNum, len: u32) -> bool {
        self.0.wrapping_sub(start.0) < len
    }
}

impl PartialOrd for SeqNum {
    fn partial_cmp(&self, other: &SeqNum) -> Option<Ordering> {
        let d = self.diff(*other);
        if Self::unordered(d) {
            None
        } else {
            Some(d.cmp(&0))
        }
    }
}

impl Add<u32> for SeqNum {
    type Output = SeqNum;
    fn add(self, n: u32) -> SeqNum {
        SeqNum::add(self, n)
    }
}

impl AddAssign<u32> for SeqNum {
    fn add_assign(&mut self, n: u32) {
        *self = SeqNum::add(*self, n);
    }
}

impl From<u32> for SeqNum {
    fn from(v: u32) -> SeqNum {
        SeqNum(v)
    }
}

impl From<SeqNum> for u32 {
    fn from(s: SeqNum) -> u32 {
        s.0
    }
}

impl fmt::Display for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_around_the_top() {
        let a = SeqNum(0xffff_fff0);
        let b = SeqNum(0x10);
        assert!(a.lt(b));
        assert!(a.le(b));
        assert!(b.gt(a));
        assert!(b.ge(a));
        assert!(!b.lt(a));
        assert!(!a.gt(b));
        assert!(a < b, "PartialOrd must agree");
        assert!(b > a);
        assert_eq!(b.diff(a), 0x20);
        assert_eq!(a.diff(b), -0x20);
        assert_eq!(a.max(b), b);
        assert_eq!(b.max(a), b);
        assert_eq!(a.min(b), a);
        assert_eq!(a.add(0x20), b);
        assert_eq!(a + 0x20, b);
        assert_eq!(b.sub(0x20), a);
        let mut c = a;
        c += 0x10;
        assert_eq!(c, SeqNum(0));
    }

    #[test]
    fn plain_order_and_equality() {
        let a = SeqNum(100);
        let b = SeqNum(200);
        assert!(a.lt(b) && a.le(b) && !a.gt(b) && !a.ge(b));
        assert!(a.le(a) && a.ge(a) && !a.lt(a) && !a.gt(a));
        assert_eq!(a.partial_cmp(&a), Some(Ordering::Equal));
        assert_eq!(a.diff(a), 0);
        assert_eq!(a.max(a), a);
    }

    #[test]
    fn half_way_is_unordered() {
        let a = SeqNum(0);
        let b = SeqNum(0x8000_0000);
        for (x, y) in [(a, b), (b, a)] {
            assert!(!x.lt(y) && !x.le(y) && !x.gt(y) && !x.ge(y));
            assert_eq!(x.partial_cmp(&y), None);
            assert_eq!(x.max(y), x);
        }
        // one short of half way is still ordered
        let c = SeqNum(0x7fff_ffff);
        assert!(a.lt(c));
        assert!(c.gt(a));
        assert_eq!(c.diff(a), i32::MAX);
    }

    #[test]
    fn windows_wrap() {
        let start = SeqNum(0xffff_ff00);
        assert!(SeqNum(0xffff_ff00).in_window(start, 0x200));
        assert!(SeqNum(0x50).in_window(start, 0x200));
        assert!(!SeqNum(0x100).in_window(start, 0x200));
        assert!(!SeqNum(0xffff_fe00).in_window(start, 0x200));
        assert!(!start.in_window(start, 0));
    }

    #[test]
    fn display_is_the_number() {
        assert_eq!(SeqNum(4_000_000_000).to_string(), "4000000000");
    }
}
