//! The engine's hashing helpers: [`FastHash`], the keyed hasher of its tables, and [`mix`],
//! the bit mixer that derives per-engine seeds. (The hashes that must agree across engines and
//! runs, sampling and the client pool's pick, are the shaper's: see [`shaper::FlagPlan`].)

use std::hash::{BuildHasher, Hasher};

/// A seeded FxHash-style hasher: fast on small keys such as [`FourTuple`], deterministic for a
/// given engine seed (so runs repeat), and keyed so that outsiders cannot aim collisions at it
/// without knowing the seed.
#[derive(Debug, Clone, Copy)]
pub struct FastHash {
    seed: u64,
}

impl FastHash {
    /// The hasher of an engine with this seed.
    pub fn new(seed: u64) -> FastHash {
        FastHash {
            seed: mix(seed ^ 0x5eed),
        }
    }
}

impl BuildHasher for FastHash {
    type Hasher = FxHasher;
    fn build_hasher(&self) -> FxHasher {
        FxHasher { h: self.seed }
    }
}

#[derive(Debug)]
pub struct FxHasher {
    h: u64,
}

const FX_K: u64 = 0x517c_c1b7_2722_0a95;

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.h = (self.h.rotate_left(5) ^ w).wrapping_mul(FX_K);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
            ]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        // Spread the high bits down too: hashbrown takes its tag from the top seven.
        self.h ^ (self.h >> 29)
    }
}

/// One SplitMix64 step: a cheap, well-spread 64-bit hash of the seeds.
pub(crate) use common::hash::splitmix64 as mix;
