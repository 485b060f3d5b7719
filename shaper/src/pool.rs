//! The client address pool (the copier's `--client-ip`): CIDR ranges, IPv4 and IPv6, into which
//! a plan built from the copier's flags ([`crate::FlagPlan`]) rewrites client addresses.
//!
//! Owns [`ClientIpPool`] (a list of [`IpRange`]s) and the choice of a pool address for a real
//! client and a copy ([`ClientIpPool::pick`]): a keyed hash of the real address picks a place
//! among the usable addresses of the ranges of the target's family, all ranges taken as one
//! sequence (so each usable address is equally likely), and copy `k` takes the `k`-th address
//! after it. So a real client always gets the same address (sticky, no table, flat memory
//! however many clients), and the copies of one session get distinct addresses as long as the
//! pool has at least as many as there are copies. Different real clients may share an
//! address; the engine keeps their tuples apart by port.
//!
//! Invariants: a pool has at least one range; its ranges never overlap; a range's host bits
//! are zero.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use crate::hash::mix;

/// Hash key of the pool pick (apart from the shaper's other keyed decisions).
const TAG_POOL: u64 = 0x706f_6f6c;

/// One CIDR range of a [`ClientIpPool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    base: IpAddr,
    prefix: u8,
}

/// Why a pool was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolParseError {
    /// No `/`.
    #[error("expected ADDRESS/PREFIX, got {0:?}")]
    NoPrefix(String),
    /// The address part does not parse.
    #[error("bad address {0:?}")]
    BadAddr(String),
    /// The prefix is not a number or too long for the family.
    #[error("bad prefix length {0:?}")]
    BadPrefix(String),
    /// No range at all.
    #[error("no address range")]
    Empty,
    /// Two ranges share addresses.
    #[error("ranges {0} and {1} overlap")]
    Overlap(IpRange, IpRange),
}

impl IpRange {
    /// A range from its network address and prefix length (host bits are cleared).
    pub fn new(addr: IpAddr, prefix: u8) -> Result<IpRange, PoolParseError> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(PoolParseError::BadPrefix(prefix.to_string()));
        }
        let base = match addr {
            IpAddr::V4(a) => {
                let mask = if prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - prefix)
                };
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) => {
                let mask = if prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - prefix)
                };
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
        };
        Ok(IpRange { base, prefix })
    }

    /// Whether the range holds IPv6 addresses.
    #[must_use]
    pub fn is_ipv6(&self) -> bool {
        self.base.is_ipv6()
    }

    /// The range's first address and its prefix length.
    #[must_use]
    pub fn net(&self) -> (IpAddr, u8) {
        (self.base, self.prefix)
    }

    /// Whether `ip` lies in the range.
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        IpRange::new(ip, self.prefix).is_ok_and(|r| r.base == self.base)
    }

    fn host_bits(&self) -> u32 {
        let bits: u32 = if self.is_ipv6() { 128 } else { 32 };
        bits.saturating_sub(u32::from(self.prefix))
    }

    /// Addresses a pick may give: all but the network address and (IPv4) the broadcast
    /// address when the range is larger than two addresses (IPv6: all but the all-zeros
    /// anycast one). Saturates for a whole IPv6 space.
    fn usable(&self) -> u128 {
        match (self.is_ipv6(), self.host_bits()) {
            (_, 0) => 1,
            (false, 1) => 2,
            (false, n) => (1u128 << n) - 2,
            (true, 128) => u128::MAX,
            (true, n) => (1u128 << n) - 1,
        }
    }

    /// The `i`-th usable address (`i < usable()`).
    fn nth(&self, i: u128) -> IpAddr {
        let skip = u128::from(if self.is_ipv6() {
            self.host_bits() > 0
        } else {
            self.host_bits() >= 2
        });
        match self.base {
            IpAddr::V4(b) => IpAddr::V4(Ipv4Addr::from(u32::from(b) | (i + skip) as u32)),
            IpAddr::V6(b) => IpAddr::V6(Ipv6Addr::from(u128::from(b) | i.saturating_add(skip))),
        }
    }

    fn overlaps(&self, o: &IpRange) -> bool {
        self.contains(o.base) || o.contains(self.base)
    }
}

impl FromStr for IpRange {
    type Err = PoolParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, p) = s
            .split_once('/')
            .ok_or_else(|| PoolParseError::NoPrefix(s.to_string()))?;
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| PoolParseError::BadAddr(a.to_string()))?;
        let prefix: u8 = p
            .trim()
            .parse()
            .map_err(|_| PoolParseError::BadPrefix(p.to_string()))?;
        IpRange::new(addr, prefix)
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

/// Client address ranges (v4 and/or v6 CIDRs) into which real client addresses are rewritten;
/// see the module documentation for how an address is picked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIpPool {
    ranges: Vec<IpRange>,
}

impl ClientIpPool {
    /// A pool of one range, from its network address and prefix length (host bits cleared).
    pub fn new(addr: IpAddr, prefix: u8) -> Result<ClientIpPool, PoolParseError> {
        Ok(ClientIpPool {
            ranges: vec![IpRange::new(addr, prefix)?],
        })
    }

    /// A pool of these ranges: at least one, none overlapping another.
    pub fn from_ranges(ranges: Vec<IpRange>) -> Result<ClientIpPool, PoolParseError> {
        if ranges.is_empty() {
            return Err(PoolParseError::Empty);
        }
        for (i, a) in ranges.iter().enumerate() {
            if let Some(b) = ranges[i + 1..].iter().find(|b| a.overlaps(b)) {
                return Err(PoolParseError::Overlap(*a, *b));
            }
        }
        Ok(ClientIpPool { ranges })
    }

    /// One pool of the ranges of several (repeated `--client-ip` flags).
    pub fn join(
        pools: impl IntoIterator<Item = ClientIpPool>,
    ) -> Result<ClientIpPool, PoolParseError> {
        ClientIpPool::from_ranges(pools.into_iter().flat_map(|p| p.ranges).collect())
    }

    /// The ranges, in the order given.
    #[must_use]
    pub fn ranges(&self) -> &[IpRange] {
        &self.ranges
    }

    /// Whether the pool has a range of this family (IPv6 when `v6`).
    #[must_use]
    pub fn serves(&self, v6: bool) -> bool {
        self.ranges.iter().any(|r| r.is_ipv6() == v6)
    }

    /// Whether `ip` lies in the pool.
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.ranges.iter().any(|r| r.contains(ip))
    }

    /// The pool address of copy `copy` of a session of the real client `real`, in the ranges
    /// of the IPv6 family when `v6` (`None` if the pool has no such range). Copy 0 of every
    /// session of a real client gets the same address; copy `k` the `k`-th usable address
    /// after it (wrapping), so copies differ while the pool has enough addresses.
    #[must_use]
    pub fn pick(&self, real: IpAddr, seed: u64, copy: u16, v6: bool) -> Option<IpAddr> {
        let seed = mix(seed ^ TAG_POOL);
        let h = match real {
            IpAddr::V4(a) => mix(seed ^ u64::from(u32::from(a))),
            IpAddr::V6(a) => {
                let v = u128::from(a);
                mix(mix(seed ^ (v as u64)) ^ ((v >> 64) as u64))
            }
        };
        let h128 = (u128::from(mix(h)) << 64) | u128::from(h);
        let fam = || self.ranges.iter().filter(|r| r.is_ipv6() == v6);
        let total = fam().fold(0u128, |t, r| t.saturating_add(r.usable()));
        if total == 0 {
            return None;
        }
        let mut i = (h128 % total).wrapping_add(u128::from(copy)) % total;
        for r in fam() {
            if i < r.usable() {
                return Some(r.nth(i));
            }
            i -= r.usable();
        }
        None
    }
}

impl FromStr for ClientIpPool {
    type Err = PoolParseError;
    /// A comma-separated list of CIDR ranges: `198.19.0.0/24,198.19.1.0/24,fd00:198:19::/48`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ranges = s
            .split(',')
            .filter(|x| !x.trim().is_empty())
            .map(str::parse)
            .collect::<Result<Vec<IpRange>, _>>()?;
        ClientIpPool::from_ranges(ranges)
    }
}

impl fmt::Display for ClientIpPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn lists_of_ranges_parse_and_print() {
        let p: ClientIpPool = "198.19.0.7/24, 198.19.1.0/24,fd00:198:19::/48"
            .parse()
            .unwrap();
        assert_eq!(
            p.to_string(),
            "198.19.0.0/24,198.19.1.0/24,fd00:198:19::/48"
        );
        assert_eq!(p.ranges().len(), 3);
        assert!(p.serves(false) && p.serves(true));
        assert!(p.contains(ip("198.19.1.255")) && p.contains(ip("fd00:198:19::9")));
        assert!(!p.contains(ip("198.19.2.1")));
        for (bad, want) in [
            ("", PoolParseError::Empty),
            (
                "198.19.0.0/16,198.19.1.0/24",
                PoolParseError::Overlap(
                    "198.19.0.0/16".parse().unwrap(),
                    "198.19.1.0/24".parse().unwrap(),
                ),
            ),
            ("198.19.0.0", PoolParseError::NoPrefix("198.19.0.0".into())),
            ("198.19.0.0/24,x/8", PoolParseError::BadAddr("x".into())),
        ] {
            assert_eq!(bad.parse::<ClientIpPool>(), Err(want), "{bad:?}");
        }
        let j = ClientIpPool::join([
            "198.19.0.0/24".parse().unwrap(),
            "198.19.1.0/24".parse().unwrap(),
        ])
        .unwrap();
        assert_eq!(j.to_string(), "198.19.0.0/24,198.19.1.0/24");
        assert!(ClientIpPool::join([
            "10.0.0.0/8".parse().unwrap(),
            "10.1.0.0/16".parse().unwrap()
        ])
        .is_err());
    }

    #[test]
    fn picks_cover_every_range_of_the_family_evenly_and_stay_sticky() {
        let p: ClientIpPool = "198.19.0.0/24,198.19.1.0/24,fd00:198:19::/64"
            .parse()
            .unwrap();
        let mut per_range = BTreeMap::new();
        for i in 0..20_000u32 {
            let real = IpAddr::from((0x0a00_0000 + i).to_be_bytes());
            let a = p.pick(real, 5, 0, false).unwrap();
            assert!(a.is_ipv4() && p.contains(a), "{a}");
            let IpAddr::V4(v4) = a else { unreachable!() };
            assert!(
                v4.octets()[3] != 0 && v4.octets()[3] != 255,
                "network or broadcast: {a}"
            );
            *per_range.entry(v4.octets()[2]).or_insert(0u32) += 1;
            assert_eq!(p.pick(real, 5, 0, false), Some(a), "sticky");
            let six = p.pick(real, 5, 0, true).unwrap();
            assert!(six.is_ipv6() && p.contains(six));
        }
        assert_eq!(per_range.len(), 2);
        for n in per_range.values() {
            assert!((9_000..11_000).contains(n), "{per_range:?}");
        }
        let v4only: ClientIpPool = "198.19.0.0/24".parse().unwrap();
        assert_eq!(v4only.pick(ip("10.0.0.1"), 1, 0, true), None);
    }

    #[test]
    fn copies_of_a_session_get_distinct_addresses_while_the_pool_has_enough() {
        let p: ClientIpPool = "198.19.0.0/24,198.19.1.0/24".parse().unwrap();
        let real = ip("203.0.113.9");
        let all: BTreeSet<IpAddr> = (0..508u16)
            .map(|k| p.pick(real, 3, k, false).unwrap())
            .collect();
        assert_eq!(all.len(), 508, "every usable address once (2 x 254)");
        assert_eq!(
            p.pick(real, 3, 508, false),
            p.pick(real, 3, 0, false),
            "then they wrap"
        );
        // Tiny ranges: /32 and /31 and /30.
        let one: ClientIpPool = "10.0.0.5/32".parse().unwrap();
        assert_eq!(one.pick(ip("1.2.3.4"), 9, 0, false), Some(ip("10.0.0.5")));
        assert_eq!(one.pick(ip("1.2.3.4"), 9, 7, false), Some(ip("10.0.0.5")));
        let two: ClientIpPool = "10.0.0.4/31".parse().unwrap();
        let got: BTreeSet<IpAddr> = (0..2)
            .map(|k| two.pick(ip("1.2.3.4"), 9, k, false).unwrap())
            .collect();
        assert_eq!(got, [ip("10.0.0.4"), ip("10.0.0.5")].into());
        let p30: ClientIpPool = "10.0.0.0/30".parse().unwrap();
        for i in 0..50u8 {
            let a = p30
                .pick(IpAddr::from([1, 1, 1, i]), 3, u16::from(i), false)
                .unwrap();
            assert!(a == ip("10.0.0.1") || a == ip("10.0.0.2"), "{a}");
        }
        // IPv6: never the all-zeros address; a /128 is its one address.
        let q: ClientIpPool = "2001:db8::/126".parse().unwrap();
        let got: BTreeSet<IpAddr> = (0..3)
            .map(|k| q.pick(ip("1.2.3.4"), 9, k, true).unwrap())
            .collect();
        assert_eq!(
            got,
            [ip("2001:db8::1"), ip("2001:db8::2"), ip("2001:db8::3")].into()
        );
        let host: ClientIpPool = "2001:db8::7/128".parse().unwrap();
        assert_eq!(
            host.pick(ip("1.2.3.4"), 9, 4, true),
            Some(ip("2001:db8::7"))
        );
        let all6: ClientIpPool = "::/0".parse().unwrap();
        assert_ne!(all6.pick(ip("1.2.3.4"), 9, 0, true), Some(ip("::")));
    }
}
