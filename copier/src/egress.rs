//! Super-segments that leave whole (`--gso`): where they leave, and how they are described to
//! the kernel.
//!
//! Owns: the path toward a test server as an `AF_PACKET` socket needs it ([`Egress`]: the
//! route's interface, its Ethernet address and the next hop's, read from `ip route get`,
//! `/sys/class/net` and `ip neigh`), the `virtio_net_hdr` of a TCP super-segment
//! ([`prepare_gso`], which also puts the pseudo-header sum in the TCP checksum field, as the
//! kernel's own TSO packets carry it), and the user-space cut that stands in for the kernel's
//! where the path cannot take a super-segment ([`crate::send::cut_like_tso`]).
//!
//! Invariants: a super-segment described by [`prepare_gso`] and cut by the kernel, and the same
//! super-segment cut by [`crate::send::cut_like_tso`], give the test server the same segments: pieces of
//! exactly `gso_size` payload bytes (the last one shorter), the super-segment's TCP header on
//! each (sequence number advanced, options copied), FIN and PSH on the last piece only, the IPv4
//! identification counting up, fresh checksums.
#![deny(unsafe_code)]

use std::net::IpAddr;

use common::checksum;
use common::wire::{parse_tcp_packet, TcpSegment};

use crate::sys::VNET_HDR_LEN;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum at `csum_start + csum_offset` is to be finished.
const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_TCPV4`.
const GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_TCPV6`.
const GSO_TCPV6: u8 = 4;
/// EtherTypes.
pub const ETH_P_IP: u16 = 0x0800;
/// IPv6's.
pub const ETH_P_IPV6: u16 = 0x86dd;
const ETH_HLEN: usize = 14;

/// The way out toward one test server for whole super-segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egress {
    /// The route's interface.
    pub dev: String,
    /// Its index.
    pub ifindex: u32,
    /// The next hop (the route's gateway, or the test server itself on-link).
    pub next_hop: IpAddr,
    /// Destination (the next hop's) and source (the interface's) Ethernet addresses; the
    /// EtherType is filled per packet.
    pub macs: [u8; 12],
    /// The path MTU (the route's, else the interface's): no piece may be larger.
    pub mtu: u32,
}

impl Egress {
    /// The Ethernet header of a packet of this family.
    pub fn eth_header(&self, v6: bool) -> [u8; ETH_HLEN] {
        let mut h = [0u8; ETH_HLEN];
        h[..12].copy_from_slice(&self.macs);
        h[12..].copy_from_slice(&(if v6 { ETH_P_IPV6 } else { ETH_P_IP }).to_be_bytes());
        h
    }
}

/// Find the way out toward `dst`, or say why super-segments cannot leave whole toward it (the
/// sender then cuts them itself). Runs `ip route get` and `ip neigh show`: a few milliseconds,
/// so callers look up a destination once and again only after a while.
pub fn lookup(dst: IpAddr) -> Result<Egress, String> {
    let route = common::doctor::route_get(dst)?;
    if route.local || route.dev == "lo" {
        return Err(format!("{dst} is an address of this host"));
    }
    let dev = route.dev;
    let sys = |f: &str| {
        std::fs::read_to_string(format!("/sys/class/net/{dev}/{f}"))
            .map(|s| s.trim().to_string())
            .map_err(|e| format!("cannot read /sys/class/net/{dev}/{f}: {e}"))
    };
    // ARPHRD_ETHER (veth, a NIC, a bridge): frames start with an Ethernet header.
    if sys("type")? != "1" {
        return Err(format!("{dev} is not an Ethernet interface"));
    }
    let src_mac =
        parse_mac(&sys("address")?).ok_or_else(|| format!("{dev} has no Ethernet address"))?;
    let dev_mtu: u32 = sys("mtu")?
        .parse()
        .map_err(|_| format!("cannot read the MTU of {dev}"))?;
    let ifindex = crate::sys::interface_index(&dev).map_err(|e| format!("interface {dev}: {e}"))?;
    let next_hop = route.gateway.unwrap_or(dst);
    let out = std::process::Command::new("ip")
        .args(["neigh", "show", "to", &next_hop.to_string(), "dev", &dev])
        .output()
        .map_err(|e| format!("cannot run `ip neigh` (install iproute2): {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let dst_mac = parse_neigh(&text).ok_or_else(|| {
        format!("the next hop {next_hop} on {dev} has no Ethernet address known yet")
    })?;
    let mut macs = [0u8; 12];
    macs[..6].copy_from_slice(&dst_mac);
    macs[6..].copy_from_slice(&src_mac);
    Ok(Egress {
        dev,
        ifindex,
        next_hop,
        macs,
        mtu: route.mtu.unwrap_or(dev_mtu).min(dev_mtu),
    })
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.trim().split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// The Ethernet address of the first usable entry of `ip neigh show to X dev D` (`X lladdr M
/// STATE`; `FAILED` and `INCOMPLETE` entries have none to use).
pub fn parse_neigh(text: &str) -> Option<[u8; 6]> {
    text.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.iter().any(|s| *s == "FAILED" || *s == "INCOMPLETE") {
            return None;
        }
        let i = w.iter().position(|s| *s == "lladdr")?;
        parse_mac(w.get(i + 1)?)
    })
}

/// Make the IP + TCP super-segment `packet` ready for the kernel's GSO: its TCP checksum field
/// gets the pseudo-header sum (what `CHECKSUM_PARTIAL` expects; the kernel finishes every
/// piece's), and the returned `virtio_net_hdr` asks for pieces of `gso_size` payload bytes,
/// offsets counted from the Ethernet header that goes before the packet. `None` if `packet` is
/// not an unfragmented IP + TCP packet.
pub fn prepare_gso(packet: &mut [u8], gso_size: u16) -> Option<[u8; VNET_HDR_LEN]> {
    let (ip_len, tcp_len, src, dst, v6) = {
        let p = parse_tcp_packet(packet).ok()?;
        (
            p.ip_header_len,
            p.tcp.header_len(),
            p.src,
            p.dst,
            p.src.is_ipv6(),
        )
    };
    let total = packet.len();
    let seg_len = u32::try_from(total - ip_len).ok()?;
    let pseudo = checksum::fold(checksum::pseudo_header(src, dst, 6, seg_len));
    TcpSegment::new_unchecked(&mut packet[ip_len..]).set_checksum(pseudo);
    let csum_start = u16::try_from(ETH_HLEN + ip_len).ok()?;
    let hdr_len = u16::try_from(ETH_HLEN + ip_len + tcp_len).ok()?;
    let mut h = [0u8; VNET_HDR_LEN];
    h[0] = F_NEEDS_CSUM;
    h[1] = if v6 { GSO_TCPV6 } else { GSO_TCPV4 };
    h[2..4].copy_from_slice(&hdr_len.to_le_bytes());
    h[4..6].copy_from_slice(&gso_size.to_le_bytes());
    h[6..8].copy_from_slice(&csum_start.to_le_bytes());
    h[8..10].copy_from_slice(&16u16.to_le_bytes()); // offsetof(struct tcphdr, check)
    Some(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::{cut_like_tso, SplitError};
    use common::seq::SeqNum;
    use common::wire::{tcp_options, Ipv4Packet, TcpBuilder, TcpFlags, TcpOption};

    fn packet(src: &str, dst: &str, flags: TcpFlags, payload: &[u8]) -> Vec<u8> {
        let ts = [TcpOption::Timestamps { tsval: 5, tsecr: 6 }];
        let mut out = Vec::new();
        TcpBuilder {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            seq: SeqNum(4_294_960_000),
            ack: SeqNum(77),
            flags,
            window: 500,
            options: &ts,
            payload,
            ttl: 64,
            ident: 65_530,
        }
        .emit(&mut out);
        out
    }

    #[test]
    fn macs_and_neighbours() {
        assert_eq!(parse_mac("02:00:0a:ff:00:01"), Some([2, 0, 10, 255, 0, 1]));
        assert_eq!(parse_mac("02:00:0a:ff:00"), None);
        assert_eq!(parse_mac("02:00:0a:ff:00:01:02"), None);
        assert_eq!(parse_mac("zz:00:0a:ff:00:01"), None);
        assert_eq!(
            parse_neigh("198.18.0.1 lladdr 02:00:0a:ff:00:01 REACHABLE\n"),
            Some([2, 0, 10, 255, 0, 1])
        );
        assert_eq!(
            parse_neigh("198.18.0.1 lladdr 02:00:0a:ff:00:01 STALE\n"),
            Some([2, 0, 10, 255, 0, 1])
        );
        assert_eq!(parse_neigh("198.18.0.1  FAILED\n"), None);
        assert_eq!(
            parse_neigh("198.18.0.1 lladdr 02:00:0a:ff:00:01 INCOMPLETE\n"),
            None
        );
        assert_eq!(parse_neigh(""), None);
    }

    #[test]
    fn vnet_header_of_ipv4_and_ipv6() {
        let data = vec![7u8; 5000];
        let mut p4 = packet(
            "198.18.0.1:40000",
            "198.18.1.2:80",
            TcpFlags::ACK | TcpFlags::PSH,
            &data,
        );
        let h = prepare_gso(&mut p4, 1448).unwrap();
        // flags, gso_type, hdr_len = 14 + 20 + 32, gso_size, csum_start = 14 + 20, csum_offset 16
        assert_eq!(h, [1, 1, 66, 0, 0xa8, 0x05, 34, 0, 16, 0]);
        // The checksum field holds the pseudo-header sum over the whole TCP length.
        let seg = TcpSegment::new_checked(&p4[20..]).unwrap();
        let want = checksum::fold(checksum::pseudo_header(
            "198.18.0.1".parse().unwrap(),
            "198.18.1.2".parse().unwrap(),
            6,
            (p4.len() - 20) as u32,
        ));
        assert_eq!(seg.checksum(), want);
        let mut p6 = packet(
            "[2001:db8::1]:40000",
            "[2001:db8::2]:80",
            TcpFlags::ACK,
            &data,
        );
        let h = prepare_gso(&mut p6, 1428).unwrap();
        assert_eq!(h, [1, 4, 86, 0, 0x94, 0x05, 54, 0, 16, 0]);
        assert_eq!(prepare_gso(&mut p6[..30], 1428), None);
    }

    #[test]
    fn the_cut_is_the_one_tso_makes() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
        let pkt = packet(
            "198.18.0.1:40000",
            "198.18.1.2:80",
            TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN,
            &data,
        );
        let mut out = Vec::new();
        assert_eq!(cut_like_tso(&pkt, 1448, &mut out).unwrap(), 7);
        let mut joined = Vec::new();
        for (i, piece) in out.iter().enumerate() {
            let p = parse_tcp_packet(piece).unwrap();
            assert!(p.tcp_checksum_ok());
            assert!(Ipv4Packet::new_checked(&piece[..])
                .unwrap()
                .verify_checksum());
            let last = i == 6;
            assert_eq!(
                p.payload().len(),
                if last { 10_000 - 6 * 1448 } else { 1448 },
                "whole MSS, the tail last"
            );
            assert_eq!(p.tcp.seq(), SeqNum(4_294_960_000).add(i as u32 * 1448));
            assert_eq!(p.tcp.ack(), SeqNum(77));
            assert_eq!(p.tcp.flags().contains(TcpFlags::FIN), last);
            assert_eq!(p.tcp.flags().contains(TcpFlags::PSH), last);
            assert_eq!(
                Ipv4Packet::new_checked(&piece[..]).unwrap().ident(),
                65_530u16.wrapping_add(i as u16)
            );
            let opts: Vec<_> = tcp_options(p.options()).map(Result::unwrap).collect();
            assert_eq!(opts, vec![TcpOption::Timestamps { tsval: 5, tsecr: 6 }]);
            joined.extend_from_slice(p.payload());
        }
        assert_eq!(joined, data);
        let syn = packet("198.18.0.1:1", "198.18.1.2:80", TcpFlags::SYN, &data);
        assert!(matches!(
            cut_like_tso(&syn, 1448, &mut out),
            Err(SplitError::Flags(_))
        ));
        assert!(matches!(
            cut_like_tso(&pkt, 4, &mut out),
            Err(SplitError::TooSmall { .. })
        ));
    }
}
