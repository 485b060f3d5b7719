//! Sample packets and capture files for the tests and benchmarks of every crate: one template of
//! a TCP segment ([`SEGMENT`], overridden field by field with `..SEGMENT`), the link-layer
//! framings a capture holds ([`eth`]), and a classic pcap file of frames written by the one
//! writer ([`pcap_file`], through [`PcapWriter`]).
//!
//! Nothing here is used by the daemons; it lives in the library so that the tests of `common`,
//! `copier` and `shaper` build their packets and files one way.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use crate::pcap::{LinkType, PcapWriter};
use crate::seq::SeqNum;
use crate::wire::{TcpBuilder, TcpFlags};

/// The template segment: a client at 198.18.1.2:40000 sends an empty ACK|PSH segment (seq 1000,
/// ack 2000, window 1000, TTL 64, IP ident 7) to 198.18.1.1:80. Override what a test is about:
/// `TcpBuilder { payload: b"GET /", ..SEGMENT }`.
pub const SEGMENT: TcpBuilder<'static> = TcpBuilder {
    src: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 1, 2)), 40000),
    dst: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 1, 1)), 80),
    seq: SeqNum(1000),
    ack: SeqNum(2000),
    flags: TcpFlags(TcpFlags::ACK.0 | TcpFlags::PSH.0),
    window: 1000,
    options: &[],
    payload: &[],
    ttl: 64,
    ident: 7,
};

/// The template's client and server over IPv6: `[fd00::2]:40000` -> `[fd00::1]:80`.
pub const CLIENT6: SocketAddr = SocketAddr::new(
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
    40000,
);
/// See [`CLIENT6`].
pub const SERVER6: SocketAddr =
    SocketAddr::new(IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)), 80);

/// The whole IP packet of `b`.
pub fn emit(b: &TcpBuilder<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    b.emit(&mut out);
    out
}

/// The template segment from `src` to `dst` (`"IP:PORT"`, `"[IPv6]:PORT"`) carrying `payload`.
pub fn tcp(src: &str, dst: &str, payload: &[u8]) -> Vec<u8> {
    emit(&TcpBuilder {
        src: src.parse().expect("src IP:PORT"),
        dst: dst.parse().expect("dst IP:PORT"),
        payload,
        ..SEGMENT
    })
}

/// The template segment over IPv4 with `payload`.
pub fn v4(payload: &[u8]) -> Vec<u8> {
    emit(&TcpBuilder { payload, ..SEGMENT })
}

/// The template segment over IPv6 ([`CLIENT6`] -> [`SERVER6`]) with `payload`.
pub fn v6(payload: &[u8]) -> Vec<u8> {
    emit(&TcpBuilder {
        src: CLIENT6,
        dst: SERVER6,
        payload,
        ..SEGMENT
    })
}

/// An Ethernet frame (fixed MAC addresses) of `ethertype` around `ip`.
pub fn eth(ethertype: u16, ip: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(ip);
    f
}

/// A classic pcap file (microsecond timestamps) of `link` holding `frames` at their times.
pub fn pcap_file(link: LinkType, frames: &[(Duration, Vec<u8>)]) -> Vec<u8> {
    let mut w = PcapWriter::new(Vec::new(), link, false).expect("write to a Vec");
    for (ts, d) in frames {
        w.write(*ts, d).expect("write to a Vec");
    }
    w.into_inner().expect("write to a Vec")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::parse_tcp_packet;

    #[test]
    fn the_template_parses_back() {
        let p = v4(b"hi");
        let t = parse_tcp_packet(&p).unwrap();
        assert_eq!((t.src, t.dst), (SEGMENT.src.ip(), SEGMENT.dst.ip()));
        assert_eq!((t.tcp.src_port(), t.tcp.dst_port()), (40000, 80));
        assert_eq!((t.tcp.seq(), t.tcp.ack()), (SeqNum(1000), SeqNum(2000)));
        assert_eq!(t.tcp.flags(), TcpFlags::ACK | TcpFlags::PSH);
        assert_eq!(
            (t.tcp.window(), t.ttl, t.tcp.payload()),
            (1000, 64, &b"hi"[..])
        );
        let t6 = v6(b"");
        let t6 = parse_tcp_packet(&t6).unwrap();
        assert_eq!((t6.src, t6.dst), (CLIENT6.ip(), SERVER6.ip()));
        assert_eq!(tcp("198.18.1.2:40000", "198.18.1.1:80", b"hi"), p);
        assert_eq!(tcp("[fd00::2]:40000", "[fd00::1]:80", b""), v6(b""));
    }
}
