//! This host's own addresses, for the router's "answers to this host" rule: the addresses of
//! every interface (`getifaddrs`), read at start and refreshed periodically by the daemon
//! ([`REFRESH`]). Loopback needs no listing: the router always treats it as local.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, Result};

/// How often the daemon reads the interface addresses again.
pub const REFRESH: Duration = Duration::from_secs(2);

/// The IPv4 and IPv6 addresses of this host's interfaces (in the current network namespace).
pub fn interface_addrs() -> Result<Vec<IpAddr>> {
    let mut out = Vec::new();
    for ifa in nix::ifaddrs::getifaddrs().context("list the interface addresses (getifaddrs)")? {
        let Some(a) = ifa.address else { continue };
        if let Some(v4) = a.as_sockaddr_in() {
            out.push(IpAddr::V4(v4.ip()));
        } else if let Some(v6) = a.as_sockaddr_in6() {
            out.push(IpAddr::V6(v6.ip()));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_loopback() {
        let a = interface_addrs().unwrap();
        assert!(
            a.contains(&"127.0.0.1".parse().unwrap()),
            "lo's address is missing: {a:?}"
        );
    }
}
