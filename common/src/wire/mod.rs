//! Views over packet bytes: IPv4, IPv6 and TCP headers, TCP options, and a builder for whole
//! IP + TCP packets.
//!
//! The views follow smoltcp: `Xxx::new_checked(buf)` validates the lengths of untrusted input
//! once, after which no getter can panic; `new_unchecked` skips that for buffers the caller
//! built. Setters live in an `impl` for `T: AsMut<[u8]>` and never re-validate: a setter that
//! changes a length field may make a later `payload()` shorter (variable-length accessors clamp
//! to the buffer), but never makes it panic.
//!
//! [`parse_tcp_headers`] reads the headers of a packet cut short after them (NFQUEUE's copy
//! range, the intercept's records), and [`declared_ip_len`] the length an IP header declares.
//!
//! [`parse_tcp_packet`] is the entry point for bytes from outside (capture, NFQUEUE): it
//! accepts IPv4 or IPv6 carrying TCP, and fails with a [`WireError`] on anything truncated,
//! impossible, fragmented or not TCP. Trailing bytes after the IP total length (Ethernet
//! padding) are ignored. Checksums are *not* verified there: captured segments on veth or with
//! offloads carry unfinished checksums (see `shared/LAB.md`).
//!
//! Offloaded super-segments: with TSO/GRO a captured IPv4 packet may be larger than 65535 bytes
//! and carry a total length field of 0. An IPv4 total length of 0 is therefore read as "the
//! whole buffer" when the buffer holds more than the IP header ([`Ipv4Packet::packet_len`]).
//! IPv6 jumbograms (payload length 0 with a hop-by-hop jumbo option) are rejected.

mod builder;
mod ipv4;
mod ipv6;
mod options;
mod tcp;

use std::net::{IpAddr, SocketAddr};

pub use builder::{BuildError, TcpBuilder};
pub use ipv4::Ipv4Packet;
pub use ipv6::Ipv6Packet;
pub use options::{tcp_options, write_tcp_options, TcpOption, TcpOptionIter};
pub use tcp::{set_destination_port, set_source_port, TcpFlags, TcpSegment};

/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;

/// Why bytes could not be read as the packet they were supposed to be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer ends before the structure does.
    #[error("{what} truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Which structure was cut.
        what: &'static str,
        /// How many bytes it needs.
        need: usize,
        /// How many there are.
        have: usize,
    },
    /// The IP version nibble is neither 4 nor 6 (or not the one the view expects).
    #[error("bad IP version {0}")]
    BadVersion(u8),
    /// A length field holds an impossible value (IHL < 5, total length < header length,
    /// TCP data offset < 5, IPv6 jumbogram).
    #[error("bad {what}: {len}")]
    BadHeaderLen {
        /// Which length field.
        what: &'static str,
        /// Its value, in bytes.
        len: usize,
    },
    /// The IP packet does not carry TCP directly (protocol / next header given).
    #[error("not TCP: protocol {0}")]
    NotTcp(u8),
    /// The IPv4 packet is a fragment (MF set or non-zero offset).
    #[error("IP fragment")]
    Fragment,
    /// A TCP option is malformed.
    #[error("bad TCP option kind {kind} at offset {offset}: {reason}")]
    BadOption {
        /// The option kind byte.
        kind: u8,
        /// Offset of the option in the options area.
        offset: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// An IPv4 or IPv6 packet carrying TCP, as returned by [`parse_tcp_packet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpPacketRef<'a> {
    /// IP source address.
    pub src: IpAddr,
    /// IP destination address.
    pub dst: IpAddr,
    /// Length of the IP header (IPv4 with options, or 40 for IPv6).
    pub ip_header_len: usize,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// The TCP segment, exactly the IP payload (padding excluded).
    pub tcp: TcpSegment<&'a [u8]>,
    /// Length of the IP packet, header included (padding excluded; see the module doc for TSO).
    pub ip_total_len: usize,
}

impl<'a> TcpPacketRef<'a> {
    /// The TCP payload.
    #[must_use]
    pub fn payload(&self) -> &'a [u8] {
        self.tcp.into_payload()
    }

    /// The TCP options bytes.
    #[must_use]
    pub fn options(&self) -> &'a [u8] {
        self.tcp.into_options()
    }

    /// Source address and port.
    #[must_use]
    pub fn src_socket(&self) -> SocketAddr {
        SocketAddr::new(self.src, self.tcp.src_port())
    }

    /// Destination address and port.
    #[must_use]
    pub fn dst_socket(&self) -> SocketAddr {
        SocketAddr::new(self.dst, self.tcp.dst_port())
    }

    /// IP header plus full TCP header (options included): the prefix of the packet that
    /// holds every header byte.
    #[must_use]
    pub fn headers_len(&self) -> usize {
        self.ip_header_len + self.tcp.header_len()
    }

    /// Whether the TCP checksum is right. Captured packets often carry unfinished checksums,
    /// so this is for tests and diagnostics, not for filtering.
    #[must_use]
    pub fn tcp_checksum_ok(&self) -> bool {
        self.tcp.verify_checksum(self.src, self.dst)
    }
}

/// Parse an IPv4 or IPv6 packet carrying TCP. Fails (never panics) on truncated or impossible
/// input, on IPv4 fragments, on IPv6 extension headers and on non-TCP.
pub fn parse_tcp_packet(buf: &[u8]) -> Result<TcpPacketRef<'_>, WireError> {
    parse(buf, true)
}

/// A TCP packet whose bytes may stop anywhere after its TCP header, as returned by
/// [`parse_tcp_headers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpHeadersRef<'a> {
    /// The packet as far as the buffer holds it: every header whole, the payload (and
    /// `ip_total_len`) cut where the buffer ends.
    pub packet: TcpPacketRef<'a>,
    /// The length of the whole packet by its IP header (an IPv4 total length of 0, an
    /// offloaded super-segment, reads as the buffer's length).
    pub declared_len: usize,
}

/// Parse the IP and TCP headers of a packet that may be cut short after its TCP header (as
/// NFQUEUE's copy range and the intercept's records cut packets). Everything that
/// [`parse_tcp_packet`] refuses in the header part (bad version, impossible lengths, fragments,
/// non-TCP, a TCP header cut short) is refused here too; only "the IP length says more bytes
/// follow than the buffer holds" is accepted.
pub fn parse_tcp_headers(buf: &[u8]) -> Result<TcpHeadersRef<'_>, WireError> {
    let packet = parse(buf, false)?;
    let declared_len = declared_ip_len(buf).unwrap_or(buf.len());
    Ok(TcpHeadersRef {
        packet,
        declared_len,
    })
}

/// The IP packet's length by its header, when the header says: an IPv4 total length of at
/// least 20 bytes, or 40 plus a non-zero IPv6 payload length (an IPv4 total length of 0, as
/// offloaded segments carry, and an IPv6 payload length of 0 say nothing). Reads only the
/// length field: the rest of the header is not checked.
#[must_use]
pub fn declared_ip_len(ip: &[u8]) -> Option<usize> {
    match ip.first()? >> 4 {
        4 if ip.len() >= 4 => {
            let n = usize::from(Ipv4Packet::new_unchecked(ip).total_len());
            (n >= ipv4::MIN_HEADER_LEN).then_some(n)
        }
        6 if ip.len() >= 6 => {
            let n = usize::from(Ipv6Packet::new_unchecked(ip).payload_len());
            (n > 0).then_some(ipv6::HEADER_LEN + n)
        }
        _ => None,
    }
}

/// The TCP flags of an IPv4 or IPv6 packet and the length of its IP and TCP headers, read
/// from as few bytes as hold them: the IP header's version and length (the next header for
/// IPv6, which must be TCP), then the TCP data offset and flags bytes. For the intercept's
/// records, whose headers may be cut inside the TCP header, where [`parse_tcp_headers`] would
/// refuse them. `None` when those bytes are not there or the IP header is not one.
#[must_use]
pub fn tcp_flags_of(ip: &[u8]) -> Option<(usize, TcpFlags)> {
    let tcp = match ip.first()? >> 4 {
        4 => match Ipv4Packet::new_unchecked(ip).header_len() {
            n if n >= ipv4::MIN_HEADER_LEN => n,
            _ => return None,
        },
        6 if ip.len() >= ipv6::HEADER_LEN
            && Ipv6Packet::new_unchecked(ip).next_header() == IPPROTO_TCP =>
        {
            ipv6::HEADER_LEN
        }
        _ => return None,
    };
    let (offset, flags) = (*ip.get(tcp + 12)?, *ip.get(tcp + 13)?);
    Some((tcp + usize::from(offset >> 4) * 4, TcpFlags(flags)))
}

/// [`parse_tcp_packet`] (`whole`) or [`parse_tcp_headers`].
fn parse(buf: &[u8], whole: bool) -> Result<TcpPacketRef<'_>, WireError> {
    let Some(&first) = buf.first() else {
        return Err(WireError::Truncated {
            what: "IP packet",
            need: 1,
            have: 0,
        });
    };
    match first >> 4 {
        4 => {
            let ip = Ipv4Packet::new_unchecked(buf);
            if whole {
                ip.check_len()?;
            } else {
                ip.check_header()?;
            }
            if ip.protocol() != IPPROTO_TCP {
                return Err(WireError::NotTcp(ip.protocol()));
            }
            if ip.more_frags() || ip.frag_offset() != 0 {
                return Err(WireError::Fragment);
            }
            let tcp = TcpSegment::new_checked(ip.into_payload())?;
            Ok(TcpPacketRef {
                src: ip.src_addr().into(),
                dst: ip.dst_addr().into(),
                ip_header_len: ip.header_len(),
                ttl: ip.ttl(),
                tcp,
                ip_total_len: ip.packet_len(),
            })
        }
        6 => {
            let ip = Ipv6Packet::new_unchecked(buf);
            if whole {
                ip.check_len()?;
            } else {
                ip.check_header()?;
            }
            if ip.next_header() != IPPROTO_TCP {
                return Err(WireError::NotTcp(ip.next_header()));
            }
            let tcp = TcpSegment::new_checked(ip.into_payload())?;
            Ok(TcpPacketRef {
                src: ip.src_addr().into(),
                dst: ip.dst_addr().into(),
                ip_header_len: ipv6::HEADER_LEN,
                ttl: ip.hop_limit(),
                tcp,
                ip_total_len: ip.packet_len(),
            })
        }
        v => Err(WireError::BadVersion(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seq::SeqNum;
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// 198.18.0.10:40000 -> 198.19.0.1:80, ident 0x1234, DF, TTL 64, seq 1000, ack 2000,
    /// PSH|ACK, window 65535, payload "hello". Checksums (IP 0x9c66, TCP 0x377c) were computed
    /// outside this crate.
    const V4: [u8; 45] = [
        0x45, 0x00, 0x00, 0x2d, 0x12, 0x34, 0x40, 0x00, 0x40, 0x06, 0x9c, 0x66, 0xc6, 0x12, 0x00,
        0x0a, 0xc6, 0x13, 0x00, 0x01, 0x9c, 0x40, 0x00, 0x50, 0x00, 0x00, 0x03, 0xe8, 0x00, 0x00,
        0x07, 0xd0, 0x50, 0x18, 0xff, 0xff, 0x37, 0x7c, 0x00, 0x00, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
    ];

    /// [2001:db8::a]:5555 -> [2001:db8::1]:443, hop limit 64, seq 0xfffffff0, ack 0x10,
    /// SYN|ACK, window 1000, MSS 1440, TCP checksum 0x2157 computed outside this crate.
    const V6: [u8; 64] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x18, 0x06, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x15, 0xb3, 0x01, 0xbb, 0xff,
        0xff, 0xff, 0xf0, 0x00, 0x00, 0x00, 0x10, 0x60, 0x12, 0x03, 0xe8, 0x21, 0x57, 0x00, 0x00,
        0x02, 0x04, 0x05, 0xa0,
    ];

    /// RFC 1071 the slow obvious way, complemented: an independent check of `checksum`.
    fn naive_csum(parts: &[&[u8]]) -> u16 {
        let bytes: Vec<u8> = parts.concat();
        let mut s: u64 = 0;
        for (i, b) in bytes.iter().enumerate() {
            s += if i % 2 == 0 {
                u64::from(*b) << 8
            } else {
                u64::from(*b)
            };
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    #[test]
    fn literal_ipv4_packet() {
        let p = parse_tcp_packet(&V4).unwrap();
        assert_eq!(p.src, IpAddr::V4(Ipv4Addr::new(198, 18, 0, 10)));
        assert_eq!(p.dst, IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1)));
        assert_eq!(p.ip_header_len, 20);
        assert_eq!(p.ttl, 64);
        assert_eq!(p.ip_total_len, 45);
        assert_eq!(p.tcp.src_port(), 40000);
        assert_eq!(p.tcp.dst_port(), 80);
        assert_eq!(p.tcp.seq(), SeqNum(1000));
        assert_eq!(p.tcp.ack(), SeqNum(2000));
        assert_eq!(p.tcp.flags(), TcpFlags::PSH | TcpFlags::ACK);
        assert_eq!(p.tcp.window(), 65535);
        assert_eq!(p.tcp.checksum(), 0x377c);
        assert_eq!(p.payload(), b"hello");
        assert!(p.options().is_empty());
        assert_eq!(p.headers_len(), 40);
        assert_eq!(p.src_socket(), "198.18.0.10:40000".parse().unwrap());
        assert!(p.tcp_checksum_ok());

        // the literal checksums agree with a naive computation and with the library's
        let mut ip_hdr = V4[..20].to_vec();
        ip_hdr[10..12].fill(0);
        assert_eq!(naive_csum(&[&ip_hdr]), 0x9c66);
        assert_eq!(crate::checksum::ipv4_header(&ip_hdr), 0x9c66);
        let mut seg = V4[20..].to_vec();
        seg[16..18].fill(0);
        let pseudo = [&V4[12..20], &[0, 6, 0, 25][..]].concat();
        assert_eq!(naive_csum(&[&pseudo, &seg]), 0x377c);
        assert_eq!(crate::checksum::transport(p.src, p.dst, 6, &seg), 0x377c);
    }

    #[test]
    fn literal_ipv6_packet() {
        let p = parse_tcp_packet(&V6).unwrap();
        assert_eq!(
            p.src,
            IpAddr::V6("2001:db8::a".parse::<Ipv6Addr>().unwrap())
        );
        assert_eq!(
            p.dst,
            IpAddr::V6("2001:db8::1".parse::<Ipv6Addr>().unwrap())
        );
        assert_eq!((p.ip_header_len, p.ip_total_len, p.ttl), (40, 64, 64));
        assert_eq!(p.tcp.seq(), SeqNum(0xffff_fff0));
        assert_eq!(p.tcp.ack(), SeqNum(0x10));
        assert_eq!(p.tcp.flags(), TcpFlags::SYN | TcpFlags::ACK);
        assert_eq!(
            p.tcp.options_iter().collect::<Vec<_>>(),
            vec![Ok(TcpOption::Mss(1440))]
        );
        assert!(p.payload().is_empty());
        assert!(p.tcp_checksum_ok());
        let mut seg = V6[40..].to_vec();
        seg[16..18].fill(0);
        let pseudo = [&V6[8..40], &[0, 0, 0, 24, 0, 0, 0, 6][..]].concat();
        assert_eq!(naive_csum(&[&pseudo, &seg]), 0x2157);
        assert_eq!(crate::checksum::transport(p.src, p.dst, 6, &seg), 0x2157);
        // one flipped bit anywhere in the covered bytes breaks it
        let mut bad = V6;
        bad[30] ^= 0x04;
        assert!(!parse_tcp_packet(&bad).unwrap().tcp_checksum_ok());
    }

    #[test]
    fn truncated_at_every_length_never_panics() {
        for pkt in [&V4[..], &V6[..]] {
            for n in 0..pkt.len() {
                let r = parse_tcp_packet(&pkt[..n]);
                assert!(
                    matches!(r, Err(WireError::Truncated { .. })),
                    "len {n} of {}: {r:?}",
                    pkt.len()
                );
            }
            assert!(parse_tcp_packet(pkt).is_ok());
        }
    }

    #[test]
    fn padding_is_ignored() {
        let mut padded = V4.to_vec();
        padded.extend_from_slice(&[0; 15]); // Ethernet minimum-frame padding
        let p = parse_tcp_packet(&padded).unwrap();
        assert_eq!(p.ip_total_len, 45);
        assert_eq!(p.payload(), b"hello");
        assert!(p.tcp_checksum_ok());
        let mut padded = V6.to_vec();
        padded.push(0xee);
        let p = parse_tcp_packet(&padded).unwrap();
        assert_eq!(p.ip_total_len, 64);
        assert!(p.tcp_checksum_ok());
    }

    #[test]
    fn tso_zero_total_length_takes_the_buffer() {
        let mut b = V4;
        b[2..4].fill(0);
        let p = parse_tcp_packet(&b).unwrap();
        assert_eq!(p.ip_total_len, 45);
        assert_eq!(p.payload(), b"hello");
    }

    #[test]
    fn the_headers_view_takes_a_packet_cut_after_its_headers() {
        // IPv4: 45 bytes declared, 42 held (the TCP header whole, 2 payload bytes).
        let h = parse_tcp_headers(&V4[..42]).unwrap();
        assert_eq!(
            (h.declared_len, h.packet.headers_len(), h.packet.payload()),
            (45, 40, &b"he"[..])
        );
        assert_eq!(h.packet.dst_socket(), "198.19.0.1:80".parse().unwrap());
        assert!(
            parse_tcp_packet(&V4[..42]).is_err(),
            "the whole-packet parser refuses it"
        );
        // The TCP header cut: refused by both.
        assert!(matches!(
            parse_tcp_headers(&V4[..30]),
            Err(WireError::Truncated { .. })
        ));
        // IPv6: 64 bytes declared, all headers (its TCP header has an option); cut inside it.
        let h = parse_tcp_headers(&V6).unwrap();
        assert_eq!((h.declared_len, h.packet.headers_len()), (64, 64));
        assert!(matches!(
            parse_tcp_headers(&V6[..60]),
            Err(WireError::Truncated { .. })
        ));
        // An offloaded super-segment (IPv4 total length 0): the buffer is the packet.
        let mut b = V4;
        b[2..4].fill(0);
        assert_eq!(parse_tcp_headers(&b).unwrap().declared_len, 45);
        // What the lengths declare, and when they say nothing.
        assert_eq!(
            (declared_ip_len(&V4), declared_ip_len(&V6[..6])),
            (Some(45), Some(64))
        );
        assert_eq!(
            (declared_ip_len(&b), declared_ip_len(&[0x45, 0, 0])),
            (None, None)
        );
        let mut bad = V4;
        bad[1] = 0;
        bad[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert_eq!(declared_ip_len(&bad), None, "shorter than any IPv4 header");
    }

    #[test]
    fn rejects_what_it_must() {
        let mut b = V4;
        b[9] = 17;
        assert_eq!(parse_tcp_packet(&b).unwrap_err(), WireError::NotTcp(17));
        let mut b = V4;
        b[6] = 0x20; // MF
        assert_eq!(parse_tcp_packet(&b).unwrap_err(), WireError::Fragment);
        let mut b = V4;
        b[6..8].copy_from_slice(&[0x40, 0x01]); // DF with offset 8: still a fragment
        assert_eq!(parse_tcp_packet(&b).unwrap_err(), WireError::Fragment);
        let mut b = V4;
        b[0] = 0x55;
        assert_eq!(parse_tcp_packet(&b).unwrap_err(), WireError::BadVersion(5));
        let mut b = V4;
        b[32] = 0x40; // TCP data offset 4
        assert!(matches!(
            parse_tcp_packet(&b),
            Err(WireError::BadHeaderLen { len: 16, .. })
        ));
        let mut b = V4;
        b[32] = 0x70; // TCP header 28 bytes > 25-byte segment
        assert!(matches!(
            parse_tcp_packet(&b),
            Err(WireError::Truncated {
                need: 28,
                have: 25,
                ..
            })
        ));
        let mut b = V4;
        b[2..4].copy_from_slice(&39u16.to_be_bytes()); // IP says the TCP header is cut
        assert!(matches!(
            parse_tcp_packet(&b),
            Err(WireError::Truncated {
                need: 20,
                have: 19,
                ..
            })
        ));
        let mut b = V6;
        b[6] = 0; // hop-by-hop extension header
        assert_eq!(parse_tcp_packet(&b).unwrap_err(), WireError::NotTcp(0));
        let mut b = V6;
        b[4..6].fill(0); // jumbogram
        assert!(matches!(
            parse_tcp_packet(&b),
            Err(WireError::BadHeaderLen { .. })
        ));
        assert!(matches!(
            parse_tcp_packet(&[]),
            Err(WireError::Truncated { .. })
        ));
    }

    #[test]
    fn emit_then_parse_round_trip() {
        let opts = [
            TcpOption::Mss(1400),
            TcpOption::SackPermitted,
            TcpOption::WindowScale(9),
        ];
        for (src, dst) in [
            ("198.18.0.10:1234", "198.19.0.1:8080"),
            ("[fd00::10]:1234", "[fd00::1]:8080"),
        ] {
            let b = TcpBuilder {
                src: src.parse().unwrap(),
                dst: dst.parse().unwrap(),
                seq: SeqNum(0xdead_beef),
                ack: SeqNum(0),
                flags: TcpFlags::SYN,
                window: 29200,
                options: &opts,
                payload: b"",
                ttl: 3,
                ident: 99,
            };
            let mut out = Vec::new();
            b.emit(&mut out);
            let p = parse_tcp_packet(&out).unwrap();
            assert_eq!(p.src_socket(), b.src);
            assert_eq!(p.dst_socket(), b.dst);
            assert_eq!(p.tcp.seq(), b.seq);
            assert_eq!(p.tcp.flags(), TcpFlags::SYN);
            assert_eq!(p.tcp.window(), 29200);
            assert_eq!(p.ttl, 3);
            assert_eq!(p.tcp.header_len(), 32);
            let parsed: Vec<_> = p.tcp.options_iter().map(Result::unwrap).collect();
            assert_eq!(parsed, opts);
            assert!(p.tcp_checksum_ok());
            assert_eq!(p.ip_total_len, out.len());
        }
    }

    #[test]
    fn emit_matches_the_literal() {
        let mut out = Vec::new();
        TcpBuilder {
            src: "198.18.0.10:40000".parse().unwrap(),
            dst: "198.19.0.1:80".parse().unwrap(),
            seq: SeqNum(1000),
            ack: SeqNum(2000),
            flags: TcpFlags::PSH | TcpFlags::ACK,
            window: 65535,
            options: &[],
            payload: b"hello",
            ttl: 64,
            ident: 0x1234,
        }
        .emit(&mut out);
        assert_eq!(out, V4);
    }
}
