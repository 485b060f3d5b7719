//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624): the only checksum code
//! in the workspace.
//!
//! Vocabulary: a *sum* (`u32`) is a running ones'-complement accumulator that can be fed back in
//! as `initial`; [`fold`] reduces it to 16 bits; [`finish`] complements that into the value that
//! goes into a header. A header whose checksum is right sums (checksum field included) to
//! `0xffff` after folding.
//!
//! Invariants: [`sum`] treats its input as a sequence of big-endian 16-bit words, padding an odd
//! last byte with zero. Only the *last* piece of a multi-piece sum may have an odd length.
//! All functions are pure and never panic.

use std::net::IpAddr;

/// Ones'-complement sum of `data` (big-endian 16-bit words, odd tail padded with a zero byte),
/// added to `initial`. The result is congruent to the true sum modulo 0xffff and can be passed
/// as `initial` to a further call, or to [`fold`] / [`finish`].
///
/// Runs 8 bytes at a time into 64-bit accumulators: two 32-bit big-endian words are added per
/// step, which is the same sum modulo 0xffff because 2^16 = 1 (mod 0xffff).
#[must_use]
pub fn sum(data: &[u8], initial: u32) -> u32 {
    // Two accumulators for instruction-level parallelism. Each step adds < 2^33, so neither can
    // overflow before 2^31 steps (16 GiB of input), far beyond any packet.
    let mut a: u64 = u64::from(initial);
    let mut b: u64 = 0;
    let mut chunks = data.chunks_exact(16);
    for c in &mut chunks {
        let x = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        let y = u64::from_be_bytes([c[8], c[9], c[10], c[11], c[12], c[13], c[14], c[15]]);
        a += (x >> 32) + (x & 0xffff_ffff);
        b += (y >> 32) + (y & 0xffff_ffff);
    }
    let mut rest = chunks.remainder();
    if rest.len() >= 8 {
        let x = u64::from_be_bytes([
            rest[0], rest[1], rest[2], rest[3], rest[4], rest[5], rest[6], rest[7],
        ]);
        a += (x >> 32) + (x & 0xffff_ffff);
        rest = &rest[8..];
    }
    if rest.len() >= 4 {
        b += u64::from(u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]));
        rest = &rest[4..];
    }
    if rest.len() >= 2 {
        a += u64::from(u16::from_be_bytes([rest[0], rest[1]]));
        rest = &rest[2..];
    }
    if let Some(&last) = rest.first() {
        b += u64::from(last) << 8;
    }
    fold64(a + b)
}

/// Reduce a 64-bit accumulator to 32 bits with end-around carries.
fn fold64(mut s: u64) -> u32 {
    while s >> 32 != 0 {
        s = (s & 0xffff_ffff) + (s >> 32);
    }
    s as u32
}

/// Fold the carries of a sum into 16 bits. Not complemented.
#[must_use]
pub fn fold(sum: u32) -> u16 {
    let s = (sum & 0xffff) + (sum >> 16);
    let s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// The checksum field value for a sum: `!fold(sum)`.
#[must_use]
pub fn finish(sum: u32) -> u16 {
    !fold(sum)
}

/// Sum of the TCP/UDP pseudo-header: source and destination address, protocol, and the
/// upper-layer length `len` (16 bits in IPv4, 32 bits in IPv6; the same sum either way for a
/// length below 65536). Both addresses should be of the same family; mixed families are summed
/// as given.
#[must_use]
pub fn pseudo_header(src: IpAddr, dst: IpAddr, proto: u8, len: u32) -> u32 {
    let mut s: u64 = u64::from(proto) + u64::from(len >> 16) + u64::from(len & 0xffff);
    for addr in [src, dst] {
        s += match addr {
            IpAddr::V4(a) => u64::from(sum(&a.octets(), 0)),
            IpAddr::V6(a) => u64::from(sum(&a.octets(), 0)),
        };
    }
    fold64(s)
}

/// Checksum of an IPv4 header whose checksum field is zero.
#[must_use]
pub fn ipv4_header(hdr: &[u8]) -> u16 {
    finish(sum(hdr, 0))
}

/// Checksum of a transport segment (`segment` = header + payload, its checksum field zero) under
/// the pseudo-header of `src`, `dst`, `proto`. For UDP (17) a result of 0 is returned as 0xffff,
/// since 0 there means "no checksum".
#[must_use]
pub fn transport(src: IpAddr, dst: IpAddr, proto: u8, segment: &[u8]) -> u16 {
    let len = u32::try_from(segment.len()).unwrap_or(u32::MAX);
    let c = finish(sum(segment, pseudo_header(src, dst, proto, len)));
    if proto == 17 && c == 0 {
        0xffff
    } else {
        c
    }
}

/// Whether a transport segment's checksum (field included in `segment`) is right.
#[must_use]
pub fn verify_transport(src: IpAddr, dst: IpAddr, proto: u8, segment: &[u8]) -> bool {
    let len = u32::try_from(segment.len()).unwrap_or(u32::MAX);
    fold(sum(segment, pseudo_header(src, dst, proto, len))) == 0xffff
}

/// New checksum after one 16-bit word of the covered data changed from `old` to `new`
/// (RFC 1624 eq. 3: `HC' = ~(~HC + ~m + m')`).
#[must_use]
pub fn update_u16(csum: u16, old: u16, new: u16) -> u16 {
    let s = u32::from(!csum) + u32::from(!old) + u32::from(new);
    !fold(s)
}

/// New checksum after a 32-bit value at an even offset (a sequence number, an IPv4 address)
/// changed from `old` to `new`.
#[must_use]
pub fn update_u32(csum: u16, old: u32, new: u32) -> u16 {
    let s = u32::from(!csum)
        + u32::from(!(old >> 16) as u16)
        + u32::from(!(old as u16))
        + (new >> 16)
        + (new & 0xffff);
    !fold(s)
}

/// New checksum after the bytes `old` at an even offset were replaced by `new` (an address,
/// a port pair). Both must have the same length; an unequal length is a bug (debug-asserted) and
/// yields a checksum computed as if the shorter one were zero-padded.
#[must_use]
pub fn update_bytes(csum: u16, old: &[u8], new: &[u8]) -> u16 {
    debug_assert_eq!(old.len(), new.len(), "update_bytes needs equal lengths");
    // ~m summed word by word equals the complement of the folded sum of m.
    let s = u32::from(!csum) + u32::from(!fold(sum(old, 0))) + u32::from(fold(sum(new, 0)));
    !fold(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// RFC 1071 the obvious way: 16 bits at a time into a u32, carries folded at the end.
    fn naive(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        let mut i = 0;
        while i + 1 < data.len() {
            s += u32::from(data[i]) << 8 | u32::from(data[i + 1]);
            i += 2;
        }
        if i < data.len() {
            s += u32::from(data[i]) << 8;
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: 00 01 f2 03 f4 f5 f6 f7 sums to 0xddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&d, 0)), 0xddf2);
        assert_eq!(finish(sum(&d, 0)), !0xddf2);
    }

    #[test]
    fn fast_equals_naive_on_all_short_lengths() {
        let data: Vec<u8> = (0..200u32).map(|i| (i * 37 + 11) as u8 ^ 0xa5).collect();
        for len in 0..data.len() {
            for start in 0..3 {
                if start > len {
                    continue;
                }
                let d = &data[start..len];
                assert_eq!(fold(sum(d, 0)), naive(d), "start {start} len {len}");
            }
        }
        let ones = vec![0xffu8; 4097];
        assert_eq!(fold(sum(&ones, 0)), naive(&ones));
    }

    #[test]
    fn initial_chains() {
        let a = [1u8, 2, 3, 4, 5, 6];
        let b = [7u8, 8, 9];
        let whole = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        assert_eq!(fold(sum(&b, sum(&a, 0))), fold(sum(&whole, 0)));
        assert_eq!(fold(sum(&[], 0xffff_ffff)), fold(0xffff_ffff));
    }

    #[test]
    fn known_ipv4_header() {
        // A classic example header (checksum 0xb861 once filled in).
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(ipv4_header(&h), 0xb861);
        h[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(fold(sum(&h, 0)), 0xffff);
    }

    #[test]
    fn pseudo_header_matches_bytes() {
        let s = Ipv4Addr::new(198, 18, 0, 1);
        let d = Ipv4Addr::new(198, 19, 7, 200);
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&s.octets());
        bytes.extend_from_slice(&d.octets());
        bytes.extend_from_slice(&[0, 6, 0x05, 0xdc]);
        assert_eq!(
            fold(pseudo_header(s.into(), d.into(), 6, 1500)),
            naive(&bytes)
        );

        let s6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d6: Ipv6Addr = "fd00:1:2::ffff".parse().unwrap();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&s6.octets());
        bytes.extend_from_slice(&d6.octets());
        bytes.extend_from_slice(&70000u32.to_be_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 6]);
        assert_eq!(
            fold(pseudo_header(s6.into(), d6.into(), 6, 70000)),
            naive(&bytes)
        );
    }

    #[test]
    fn incremental_u16_u32_bytes() {
        let mut data: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(29) ^ 0x3c).collect();
        let c0 = finish(sum(&data, 0));
        // u16 at offset 10
        let old16 = u16::from_be_bytes([data[10], data[11]]);
        data[10..12].copy_from_slice(&0xbeefu16.to_be_bytes());
        let c1 = update_u16(c0, old16, 0xbeef);
        assert_eq!(c1, finish(sum(&data, 0)));
        // u32 at offset 20
        let old32 = u32::from_be_bytes([data[20], data[21], data[22], data[23]]);
        data[20..24].copy_from_slice(&0xdead_0001u32.to_be_bytes());
        let c2 = update_u32(c1, old32, 0xdead_0001);
        assert_eq!(c2, finish(sum(&data, 0)));
        // 16 bytes at offset 32
        let old: Vec<u8> = data[32..48].to_vec();
        let new = [0x11u8; 16];
        data[32..48].copy_from_slice(&new);
        let c3 = update_bytes(c2, &old, &new);
        assert_eq!(c3, finish(sum(&data, 0)));
        // and a no-op change keeps it
        assert_eq!(update_u16(c3, 7, 7), c3);
    }

    #[test]
    fn udp_zero_becomes_ffff() {
        // Find a one-word UDP payload whose checksum would be 0.
        let s: IpAddr = Ipv4Addr::new(10, 0, 0, 1).into();
        let d: IpAddr = Ipv4Addr::new(10, 0, 0, 2).into();
        let base = finish(pseudo_header(s, d, 17, 2));
        // payload word w makes sum = base' + w; we want fold == 0xffff, i.e. w = !fold(pseudo)
        let w = base; // !fold(pseudo)
        let seg = w.to_be_bytes();
        assert_eq!(transport(s, d, 17, &seg), 0xffff);
        // the same construction for TCP keeps the 0
        let w6 = finish(pseudo_header(s, d, 6, 2));
        assert_eq!(transport(s, d, 6, &w6.to_be_bytes()), 0);
    }
}
