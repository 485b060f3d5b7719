//! The session key shared by the copier and the intercept.
//!
//! A [`FourTuple`] names one TCP connection as the *test server* sees it: the (possibly
//! rewritten) client end and the test server end. It is direction-free: a request
//! (client -> server) and its response (server -> client) map to the same tuple, through
//! [`FourTuple::of_request`] and [`FourTuple::of_response`] respectively.
//!
//! Its ends are [`Endpoint`]s, not `SocketAddr`s: an address and a port with nothing else (no
//! IPv6 flow label or scope, which no packet on the wire names), 20 bytes against 32, so a tuple
//! is 40 bytes against 64. The tuple is the key of the copier's session tables and of the
//! intercepts' registrations, several entries a session; at 10,000 live sessions the 24 bytes
//! were about 1.6 MiB of the copier's RSS (see BENCHMARKS.md, "End to end: RSS at 10,000 live
//! sessions"). An endpoint orders, prints and converts like the `SocketAddr` it stands for.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::wire::TcpPacketRef;

/// One end of a connection: an IPv4 or IPv6 address and a port, in 20 bytes.
///
/// Invariant: for an IPv4 address, only the first four bytes of `ip` are used and the other
/// twelve are zero (so the derived equality is the addresses' and ports').
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    ip: [u8; 16],
    port: u16,
    v6: bool,
}

impl Endpoint {
    /// The endpoint of `ip` and `port`.
    #[must_use]
    pub fn new(ip: IpAddr, port: u16) -> Endpoint {
        match ip {
            IpAddr::V4(a) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&a.octets());
                Endpoint {
                    ip: b,
                    port,
                    v6: false,
                }
            }
            IpAddr::V6(a) => Endpoint {
                ip: a.octets(),
                port,
                v6: true,
            },
        }
    }

    /// Its address.
    #[must_use]
    pub fn ip(&self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(self.ip))
        } else {
            IpAddr::V4(Ipv4Addr::new(
                self.ip[0], self.ip[1], self.ip[2], self.ip[3],
            ))
        }
    }

    /// Its port.
    #[must_use]
    pub const fn port(&self) -> u16 {
        self.port
    }

    /// Change its port.
    pub fn set_port(&mut self, port: u16) {
        self.port = port;
    }

    /// Change its address.
    pub fn set_ip(&mut self, ip: IpAddr) {
        *self = Endpoint::new(ip, self.port);
    }

    /// Whether the address is IPv4.
    #[must_use]
    pub const fn is_ipv4(&self) -> bool {
        !self.v6
    }

    /// Whether the address is IPv6.
    #[must_use]
    pub const fn is_ipv6(&self) -> bool {
        self.v6
    }

    /// The `SocketAddr` it stands for (an IPv6 one with flow label and scope 0).
    #[must_use]
    pub fn socket(&self) -> SocketAddr {
        SocketAddr::new(self.ip(), self.port)
    }
}

impl From<SocketAddr> for Endpoint {
    fn from(a: SocketAddr) -> Endpoint {
        Endpoint::new(a.ip(), a.port())
    }
}

impl From<Endpoint> for SocketAddr {
    fn from(e: Endpoint) -> SocketAddr {
        e.socket()
    }
}

impl std::str::FromStr for Endpoint {
    type Err = std::net::AddrParseError;
    /// As a `SocketAddr`: `198.18.0.10:40000`, `[2001:db8::a]:5555`.
    fn from_str(s: &str) -> Result<Endpoint, Self::Err> {
        s.parse::<SocketAddr>().map(Endpoint::from)
    }
}

impl PartialEq<SocketAddr> for Endpoint {
    fn eq(&self, other: &SocketAddr) -> bool {
        self.port == other.port() && self.ip() == other.ip()
    }
}

impl Hash for Endpoint {
    fn hash<H: Hasher>(&self, h: &mut H) {
        // One word for an IPv4 end (the tables' common case), three for an IPv6 one.
        let w = |i: usize| u64::from_le_bytes(self.ip[i..i + 8].try_into().unwrap_or([0; 8]));
        if self.v6 {
            h.write_u64(w(0));
            h.write_u64(w(8));
            h.write_u64(u64::from(self.port) | 1 << 32);
        } else {
            let a = u32::from_le_bytes([self.ip[0], self.ip[1], self.ip[2], self.ip[3]]);
            h.write_u64(u64::from(a) << 16 | u64::from(self.port));
        }
    }
}

impl Ord for Endpoint {
    /// As the `SocketAddr`s: IPv4 before IPv6, then address, then port.
    fn cmp(&self, other: &Endpoint) -> Ordering {
        (self.v6, self.ip, self.port).cmp(&(other.v6, other.ip, other.port))
    }
}

impl PartialOrd for Endpoint {
    fn partial_cmp(&self, other: &Endpoint) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.socket(), f)
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.socket(), f)
    }
}

/// One TCP connection: its client end and its server end.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct FourTuple {
    /// The client's address and port (after any rewriting by the copier).
    pub client: Endpoint,
    /// The test server's address and port.
    pub server: Endpoint,
}

impl FourTuple {
    /// A tuple from its two ends.
    #[must_use]
    pub fn new(client: SocketAddr, server: SocketAddr) -> FourTuple {
        FourTuple {
            client: client.into(),
            server: server.into(),
        }
    }

    /// The connection of a client -> server packet: source is the client.
    #[must_use]
    pub fn of_request(pkt: &TcpPacketRef<'_>) -> FourTuple {
        FourTuple {
            client: Endpoint::new(pkt.src, pkt.tcp.src_port()),
            server: Endpoint::new(pkt.dst, pkt.tcp.dst_port()),
        }
    }

    /// The connection of a server -> client packet: source is the server.
    #[must_use]
    pub fn of_response(pkt: &TcpPacketRef<'_>) -> FourTuple {
        FourTuple {
            client: Endpoint::new(pkt.dst, pkt.tcp.dst_port()),
            server: Endpoint::new(pkt.src, pkt.tcp.src_port()),
        }
    }

    /// Whether the tuple is IPv6 (judged by the client end).
    #[must_use]
    pub const fn is_ipv6(&self) -> bool {
        self.client.is_ipv6()
    }
}

impl fmt::Display for FourTuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.client, self.server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seq::SeqNum;
    use crate::wire::{parse_tcp_packet, TcpBuilder, TcpFlags};

    fn packet(src: &str, dst: &str) -> Vec<u8> {
        let mut out = Vec::new();
        TcpBuilder {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            seq: SeqNum(1),
            ack: SeqNum(2),
            flags: TcpFlags::ACK,
            window: 1000,
            options: &[],
            payload: b"x",
            ttl: 64,
            ident: 0,
        }
        .emit(&mut out);
        out
    }

    #[test]
    fn request_and_response_give_the_same_tuple() {
        let req = packet("198.18.0.10:40000", "198.19.0.1:80");
        let resp = packet("198.19.0.1:80", "198.18.0.10:40000");
        let a = FourTuple::of_request(&parse_tcp_packet(&req).unwrap());
        let b = FourTuple::of_response(&parse_tcp_packet(&resp).unwrap());
        assert_eq!(a, b);
        assert_eq!(a.client, "198.18.0.10:40000".parse::<SocketAddr>().unwrap());
        assert_eq!(a.server, "198.19.0.1:80".parse::<SocketAddr>().unwrap());
        assert_eq!(a.to_string(), "198.18.0.10:40000 -> 198.19.0.1:80");
        assert!(!a.is_ipv6());
        // the request seen as a response is the other connection
        assert_ne!(FourTuple::of_response(&parse_tcp_packet(&req).unwrap()), a);
    }

    #[test]
    fn endpoints_are_compact_and_act_as_socket_addresses() {
        assert_eq!(std::mem::size_of::<Endpoint>(), 20);
        assert_eq!(std::mem::size_of::<FourTuple>(), 40);
        let all: Vec<SocketAddr> = [
            "198.18.0.10:40000",
            "198.18.0.10:39999",
            "10.0.0.1:80",
            "[2001:db8::a]:5555",
            "[::1]:1",
            "[2001:db8::a]:80",
        ]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
        for a in &all {
            let e = Endpoint::from(*a);
            assert_eq!(SocketAddr::from(e), *a);
            assert_eq!(e, *a);
            assert_eq!(e.to_string(), a.to_string());
            assert_eq!(format!("{e:?}"), format!("{a:?}"));
            assert_eq!(
                (e.ip(), e.port(), e.is_ipv6()),
                (a.ip(), a.port(), a.is_ipv6())
            );
            for b in &all {
                let f = Endpoint::from(*b);
                assert_eq!(e.cmp(&f), a.cmp(b), "{a} vs {b}");
                assert_eq!(e == f, a == b);
            }
        }
        // An IPv4 address and the IPv6 one with the same first bytes are different ends.
        let v4 = Endpoint::new("1.2.3.4".parse().unwrap(), 80);
        let v6 = Endpoint::new("102:304::".parse().unwrap(), 80);
        assert_ne!(v4, v6);
        let mut e = v4;
        e.set_port(81);
        e.set_ip("2001:db8::1".parse().unwrap());
        assert_eq!(e.to_string(), "[2001:db8::1]:81");
    }

    #[test]
    fn ipv6_display() {
        let req = packet("[2001:db8::a]:5555", "[2001:db8::1]:443");
        let t = FourTuple::of_request(&parse_tcp_packet(&req).unwrap());
        assert!(t.is_ipv6());
        assert_eq!(t.to_string(), "[2001:db8::a]:5555 -> [2001:db8::1]:443");
    }
}
