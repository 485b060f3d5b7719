//! Building whole IP + TCP packets.
//!
//! [`TcpBuilder::emit`] writes an IPv4 header (IHL 5, DF set, no fragment, `ident` and `ttl`
//! from the builder, fresh header checksum) or an IPv6 header (traffic class 0, flow label 0,
//! hop limit = `ttl`), then the TCP header with the options padded to 4 bytes, then the
//! payload, with a fresh TCP checksum. [`TcpBuilder::try_emit`] says why a packet cannot be
//! built; `emit` keeps the contract's infallible signature and leaves `out` empty on such a
//! programming error (and panics in debug builds).

use std::net::{IpAddr, SocketAddr};

use super::ipv4::{self, Ipv4Packet};
use super::ipv6::{self, Ipv6Packet};
use super::options::{write_tcp_options, TcpOption};
use super::tcp::{self, TcpFlags, TcpSegment};
use super::IPPROTO_TCP;
use crate::seq::SeqNum;

/// Why [`TcpBuilder::try_emit`] could not build a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// Source and destination are not the same IP family.
    #[error("source and destination are of different IP families")]
    FamilyMismatch,
    /// The options need more than 40 bytes once padded.
    #[error("TCP options take {0} bytes, more than 40")]
    OptionsTooLong(usize),
    /// The packet would exceed the 16-bit length field of its IP header.
    #[error("packet would be {0} bytes, too long for the IP length field")]
    TooLong(usize),
}

/// Everything needed to build one IP + TCP packet.
#[derive(Debug, Clone, Copy)]
pub struct TcpBuilder<'a> {
    /// Source address and port.
    pub src: SocketAddr,
    /// Destination address and port (same family as `src`).
    pub dst: SocketAddr,
    /// Sequence number.
    pub seq: SeqNum,
    /// Acknowledgement number (written as given, whether ACK is set or not).
    pub ack: SeqNum,
    /// Flags.
    pub flags: TcpFlags,
    /// Window field.
    pub window: u16,
    /// Options, written in order and padded to a multiple of 4 bytes.
    pub options: &'a [TcpOption<'a>],
    /// Payload.
    pub payload: &'a [u8],
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// IPv4 identification (unused for IPv6).
    pub ident: u16,
}

impl TcpBuilder<'_> {
    /// Build the packet into `out` (cleared first). On a [`BuildError`] `out` is left empty;
    /// debug builds panic on it, since it is a bug in the caller.
    pub fn emit(&self, out: &mut Vec<u8>) {
        if let Err(e) = self.try_emit(out) {
            debug_assert!(false, "TcpBuilder::emit: {e}");
        }
    }

    /// Build the packet into `out` (cleared first) and return its length, or say why it
    /// cannot be built (then `out` is empty).
    pub fn try_emit(&self, out: &mut Vec<u8>) -> Result<usize, BuildError> {
        out.clear();
        let ip_len = match (self.src.ip(), self.dst.ip()) {
            (IpAddr::V4(_), IpAddr::V4(_)) => ipv4::MIN_HEADER_LEN,
            (IpAddr::V6(_), IpAddr::V6(_)) => ipv6::HEADER_LEN,
            _ => return Err(BuildError::FamilyMismatch),
        };
        out.resize(ip_len + tcp::MIN_HEADER_LEN, 0);
        write_tcp_options(self.options, out);
        let tcp_hdr_len = out.len() - ip_len;
        if tcp_hdr_len > tcp::MAX_HEADER_LEN {
            let n = tcp_hdr_len - tcp::MIN_HEADER_LEN;
            out.clear();
            return Err(BuildError::OptionsTooLong(n));
        }
        let total = out.len() + self.payload.len();
        let length_field = match self.src.ip() {
            IpAddr::V4(_) => total,
            IpAddr::V6(_) => total - ip_len,
        };
        let Ok(length_field) = u16::try_from(length_field) else {
            out.clear();
            return Err(BuildError::TooLong(total));
        };
        out.extend_from_slice(self.payload);

        let (ip_buf, tcp_buf) = out.split_at_mut(ip_len);
        let mut seg = TcpSegment::new_unchecked(tcp_buf);
        seg.set_src_port(self.src.port());
        seg.set_dst_port(self.dst.port());
        seg.set_seq(self.seq);
        seg.set_ack(self.ack);
        seg.set_header_len(tcp_hdr_len);
        seg.set_flags(self.flags);
        seg.set_window(self.window);
        seg.set_urgent(0);
        seg.fill_checksum(self.src.ip(), self.dst.ip());

        match (self.src.ip(), self.dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut ip = Ipv4Packet::new_unchecked(ip_buf);
                ip.set_version_and_header_len(ipv4::MIN_HEADER_LEN);
                ip.set_dscp_ecn(0);
                ip.set_total_len(length_field);
                ip.set_ident(self.ident);
                ip.set_frag(true, false, 0);
                ip.set_ttl(self.ttl);
                ip.set_protocol(IPPROTO_TCP);
                ip.set_src_addr(s);
                ip.set_dst_addr(d);
                ip.fill_checksum();
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let mut ip = Ipv6Packet::new_unchecked(ip_buf);
                ip.set_version_tc_flow(0, 0);
                ip.set_payload_len(length_field);
                ip.set_next_header(IPPROTO_TCP);
                ip.set_hop_limit(self.ttl);
                ip.set_src_addr(s);
                ip.set_dst_addr(d);
            }
            _ => unreachable!("families checked above"),
        }
        Ok(out.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::parse_tcp_packet;

    fn v4() -> TcpBuilder<'static> {
        TcpBuilder {
            src: "198.18.0.1:40000".parse().unwrap(),
            dst: "198.19.0.2:80".parse().unwrap(),
            seq: SeqNum(0xffff_fff0),
            ack: SeqNum(7),
            flags: TcpFlags::PSH | TcpFlags::ACK,
            window: 512,
            options: &[TcpOption::Timestamps { tsval: 5, tsecr: 6 }],
            payload: b"GET / HTTP/1.1\r\n\r\n",
            ttl: 63,
            ident: 0xabcd,
        }
    }

    #[test]
    fn ipv4_exact_bytes_of_header() {
        let mut out = vec![1, 2, 3];
        let n = v4().try_emit(&mut out).unwrap();
        assert_eq!(n, out.len());
        assert_eq!(n, 20 + 32 + 18);
        assert_eq!(&out[..4], &[0x45, 0, 0, 70]);
        assert_eq!(&out[4..10], &[0xab, 0xcd, 0x40, 0x00, 63, 6]);
        assert_eq!(out[20 + 12], 0x80, "data offset 8");
        assert_eq!(&out[40..52], &[8, 10, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0]);
        let p = parse_tcp_packet(&out).unwrap();
        assert!(p.tcp_checksum_ok());
        assert!(Ipv4Packet::new_checked(&out[..]).unwrap().verify_checksum());
    }

    #[test]
    fn ipv6_header() {
        let mut b = v4();
        b.src = "[2001:db8::1]:40000".parse().unwrap();
        b.dst = "[2001:db8::2]:80".parse().unwrap();
        let mut out = Vec::new();
        b.emit(&mut out);
        assert_eq!(out.len(), 40 + 32 + 18);
        assert_eq!(&out[..8], &[0x60, 0, 0, 0, 0, 50, 6, 63]);
        let p = parse_tcp_packet(&out).unwrap();
        assert!(p.tcp_checksum_ok());
        assert_eq!(p.ttl, 63);
    }

    #[test]
    fn errors_leave_out_empty() {
        let mut out = vec![9; 10];
        let mut b = v4();
        b.dst = "[2001:db8::2]:80".parse().unwrap();
        assert_eq!(b.try_emit(&mut out), Err(BuildError::FamilyMismatch));
        assert!(out.is_empty());

        let opts = [TcpOption::Unknown {
            kind: 99,
            data: &[0; 39],
        }];
        let mut b = v4();
        b.options = &opts;
        out.push(1);
        assert_eq!(b.try_emit(&mut out), Err(BuildError::OptionsTooLong(44)));
        assert!(out.is_empty());

        let big = vec![0u8; 65535];
        let mut b = v4();
        b.payload = &big;
        assert!(matches!(b.try_emit(&mut out), Err(BuildError::TooLong(_))));
        assert!(out.is_empty());
        // IPv6 counts the payload length without the fixed header: 65535 - 32 fits
        b.src = "[2001:db8::1]:1".parse().unwrap();
        b.dst = "[2001:db8::2]:2".parse().unwrap();
        b.payload = &big[..65535 - 32];
        assert_eq!(b.try_emit(&mut out), Ok(40 + 65535));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "different IP families")]
    fn emit_panics_in_debug_on_mixed_families() {
        let mut b = v4();
        b.dst = "[2001:db8::2]:80".parse().unwrap();
        b.emit(&mut Vec::new());
    }
}
