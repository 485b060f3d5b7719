//! The project's stable 64-bit hashes, written once: FNV-1a over bytes ([`fnv1a`], [`fnv1a_from`])
//! and SplitMix64 ([`mix`], its finaliser; [`splitmix64`], one whole step of the generator).
//!
//! Every user needs a hash that is the same on every call, every run, every Rust release and
//! every host (`std`'s `DefaultHasher` promises none of that): the shaper's seeded decisions, the
//! engine's table hasher and seeds, the fleet share of a host name, the mirror input's
//! duplicate filter, the comparison's sampling and fingerprints. Their values are pinned by the
//! tests below: changing one changes every decision made with it.

/// FNV-1a's offset basis (64 bits): the hash of no bytes.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a's prime (64 bits).
pub const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
/// SplitMix64's increment (the golden ratio's odd 64-bit gamma).
pub const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// FNV-1a (64 bits) of `bytes`.
#[inline]
#[must_use]
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_from(FNV_OFFSET, bytes)
}

/// FNV-1a (64 bits) of `bytes`, continued from the state `h` ([`FNV_OFFSET`] to start, or the
/// result of an earlier call to hash more bytes after those, or a seeded start).
#[inline]
#[must_use]
pub fn fnv1a_from(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
    }
    h
}

/// SplitMix64's finaliser: a bijection of `u64` with good avalanche (`mix(0) == 0`).
#[inline]
#[must_use]
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One step of SplitMix64 from the state `z`: [`mix`] of `z` plus [`GOLDEN_GAMMA`] (a cheap,
/// well-spread hash of a `u64` that maps 0 elsewhere).
#[inline]
#[must_use]
pub fn splitmix64(z: u64) -> u64 {
    mix(z.wrapping_add(GOLDEN_GAMMA))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_is_the_published_one() {
        assert_eq!(fnv1a(b""), FNV_OFFSET);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a_from(fnv1a(b"foo"), b"bar"), fnv1a(b"foobar"));
    }

    #[test]
    fn splitmix64_is_the_published_one() {
        // The first outputs of SplitMix64 seeded with 0 (the state advances by the gamma).
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix64(GOLDEN_GAMMA), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(mix(0), 0);
        assert_eq!(mix(1), 0x5692_161d_100b_05e5);
    }
}
