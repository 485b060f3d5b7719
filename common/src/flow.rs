//! The session key shared by the copier and the intercept.
//!
//! A [`FourTuple`] names one TCP connection as the *test server* sees it: the (possibly
//! rewritten) client end and the test server end. It is direction-free: a request
//! (client -> server) and its response (server -> client) map to the same tuple, through
//! [`FourTuple::of_request`] and [`FourTuple::of_response`] respectively.

use std::fmt;
use std::net::SocketAddr;

use crate::wire::TcpPacketRef;

/// One TCP connection: its client end and its server end.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct FourTuple {
    /// The client's address and port (after any rewriting by the copier).
    pub client: SocketAddr,
    /// The test server's address and port.
    pub server: SocketAddr,
}

impl FourTuple {
    /// A tuple from its two ends.
    #[must_use]
    pub const fn new(client: SocketAddr, server: SocketAddr) -> FourTuple {
        FourTuple { client, server }
    }

    /// The connection of a client -> server packet: source is the client.
    #[must_use]
    pub fn of_request(pkt: &TcpPacketRef<'_>) -> FourTuple {
        FourTuple {
            client: pkt.src_socket(),
            server: pkt.dst_socket(),
        }
    }

    /// The connection of a server -> client packet: source is the server.
    #[must_use]
    pub fn of_response(pkt: &TcpPacketRef<'_>) -> FourTuple {
        FourTuple {
            client: pkt.dst_socket(),
            server: pkt.src_socket(),
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
        assert_eq!(a.client, "198.18.0.10:40000".parse().unwrap());
        assert_eq!(a.server, "198.19.0.1:80".parse().unwrap());
        assert_eq!(a.to_string(), "198.18.0.10:40000 -> 198.19.0.1:80");
        assert!(!a.is_ipv6());
        // the request seen as a response is the other connection
        assert_ne!(FourTuple::of_response(&parse_tcp_packet(&req).unwrap()), a);
    }

    #[test]
    fn ipv6_display() {
        let req = packet("[2001:db8::a]:5555", "[2001:db8::1]:443");
        let t = FourTuple::of_request(&parse_tcp_packet(&req).unwrap());
        assert!(t.is_ipv6());
        assert_eq!(t.to_string(), "[2001:db8::a]:5555 -> [2001:db8::1]:443");
    }
}
