//! The allow list: client addresses (single addresses or CIDR prefixes) whose responses the
//! intercept lets through, so operators and health checks keep reaching the test service.
//!
//! Invariant: a prefix is stored with its host bits cleared, so matching is a mask and compare.
//! IPv4 and IPv6 are separate: `198.18.0.0/15` does not match `::ffff:198.18.0.1`.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An address prefix: `198.18.0.0/15`, `2001:db8::/32`, or a single address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

/// Why a string is not an address or prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not an IP address or CIDR prefix ({reason})")]
pub struct IpNetParseError {
    /// What was given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl IpNet {
    /// A prefix; host bits of `addr` are cleared. Fails if `prefix` is longer than the address.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<IpNet> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        (prefix <= max).then(|| IpNet {
            addr: mask(addr, prefix),
            prefix,
        })
    }

    /// Whether `ip` lies in this prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.prefix) == self.addr
    }
}

fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

impl FromStr for IpNet {
    type Err = IpNetParseError;

    fn from_str(s: &str) -> Result<IpNet, IpNetParseError> {
        let err = |reason| IpNetParseError {
            input: s.to_string(),
            reason,
        };
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().map_err(|_| err("bad address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p
                .trim()
                .parse::<u8>()
                .map_err(|_| err("bad prefix length"))?,
            None => max,
        };
        IpNet::new(addr, prefix).ok_or_else(|| err("prefix length too long"))
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// A list of prefixes; short in practice, so matching is a linear scan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    nets: Vec<IpNet>,
}

impl AllowList {
    /// A list of these prefixes.
    pub fn new(nets: Vec<IpNet>) -> AllowList {
        AllowList { nets }
    }

    /// Whether `ip` is in any prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.nets.iter().any(|n| n.contains(ip))
    }

    /// The prefixes.
    pub fn nets(&self) -> &[IpNet] {
        &self.nets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parse_and_match() {
        let n: IpNet = "198.18.0.0/15".parse().unwrap();
        assert!(n.contains(ip("198.18.0.1")));
        assert!(n.contains(ip("198.19.255.255")));
        assert!(!n.contains(ip("198.20.0.0")));
        assert!(!n.contains(ip("::ffff:198.18.0.1")));
        let host: IpNet = "198.18.2.1".parse().unwrap();
        assert_eq!(host.to_string(), "198.18.2.1/32");
        assert!(host.contains(ip("198.18.2.1")));
        assert!(!host.contains(ip("198.18.2.2")));
        let v6: IpNet = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:1::5")));
        assert!(!v6.contains(ip("2001:db9::")));
        assert!(!v6.contains(ip("198.18.0.1")));
        let all: IpNet = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("1.2.3.4")));
        assert!(!all.contains(ip("::1")));
        let all6: IpNet = "::/0".parse().unwrap();
        assert!(all6.contains(ip("::1")));
    }

    #[test]
    fn host_bits_are_cleared() {
        let n: IpNet = "198.18.2.77/24".parse().unwrap();
        assert_eq!(n.to_string(), "198.18.2.0/24");
        assert!(n.contains(ip("198.18.2.1")));
    }

    #[test]
    fn bad_input() {
        for s in [
            "",
            "1.2.3",
            "1.2.3.4/33",
            "::/129",
            "1.2.3.4/x",
            "host.example",
        ] {
            let e = s.parse::<IpNet>().unwrap_err();
            assert!(e.to_string().contains(&format!("{s:?}")), "{e}");
        }
    }

    #[test]
    fn list() {
        let l = AllowList::new(vec![
            "198.18.2.1".parse().unwrap(),
            "10.0.0.0/8".parse().unwrap(),
        ]);
        assert!(l.contains(ip("10.9.8.7")));
        assert!(l.contains(ip("198.18.2.1")));
        assert!(!l.contains(ip("198.18.2.2")));
        assert!(!AllowList::default().contains(ip("198.18.2.1")));
    }
}
