//! The mirror's encapsulations, VXLAN (RFC 7348) and GENEVE (RFC 8926): from one received UDP
//! payload to the inner IP packet it carries. Plain code over byte slices: no socket, no clock.
//!
//! Owns: the header layouts, [`Encap`] (which one, and its default port), [`decap`] and the
//! reasons a datagram is refused ([`DecapError`], each with its metric label).
//!
//! Invariants: [`decap`] never panics; the slice it returns starts with an IPv4 or IPv6 header
//! and holds exactly the bytes its IP length declares (link padding cut). An inner packet with
//! fewer bytes than its IP length declares (a mirror that cuts packets to a length, as AWS lets
//! a session do) is [`DecapError::Truncated`], never returned: a copy with missing bytes would
//! send wrong bytes to the test server.

use common::pcap::{ip_payload, LinkLayerError, LinkType};
use common::wire::declared_ip_len;

/// VXLAN header bytes.
pub const VXLAN_LEN: usize = 8;
/// GENEVE fixed header bytes (options follow).
pub const GENEVE_LEN: usize = 8;
/// VXLAN flags: the I flag (a valid VNI) must be set.
const VXLAN_I: u8 = 0x08;
/// GENEVE: the O bit (a control packet, not data).
const GENEVE_O: u8 = 0x80;
/// GENEVE protocol type of an inner Ethernet frame ("transparent Ethernet bridging").
pub const PROTO_ETHERNET: u16 = 0x6558;
const PROTO_IPV4: u16 = 0x0800;
const PROTO_IPV6: u16 = 0x86DD;

/// Which encapsulation the mirror uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encap {
    /// VXLAN: 8-byte header, inner Ethernet.
    Vxlan,
    /// GENEVE: 8-byte header plus options, inner Ethernet or IP.
    Geneve,
}

impl Encap {
    /// The IANA port of the encapsulation.
    #[must_use]
    pub fn default_port(self) -> u16 {
        match self {
            Encap::Vxlan => 4789,
            Encap::Geneve => 6081,
        }
    }

    /// Its name in `--mirror`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Encap::Vxlan => "vxlan",
            Encap::Geneve => "geneve",
        }
    }
}

/// One decapsulated datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inner<'a> {
    /// The mirror session's virtual network identifier (24 bits).
    pub vni: u32,
    /// The inner IP packet, exactly as long as its IP header says.
    pub ip: &'a [u8],
}

/// Why a datagram carries no usable inner packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecapError {
    /// The datagram is shorter than the encapsulation's header (with its options).
    #[error("datagram of {have} bytes is shorter than its {need}-byte header")]
    Short {
        /// Bytes the header needs.
        need: usize,
        /// Bytes there are.
        have: usize,
    },
    /// VXLAN without the I flag, or GENEVE of another version than 0.
    #[error("bad encapsulation header (flags {0:#04x})")]
    BadHeader(u8),
    /// A GENEVE control packet (O bit): no inner traffic.
    #[error("GENEVE control packet")]
    Control,
    /// The inner frame is not IPv4 or IPv6 (ARP, LLDP, an unknown GENEVE protocol type...).
    #[error("inner frame is not IP (type {0:#06x})")]
    NotIp(u32),
    /// The inner frame says IP but its bytes are not an IPv4 or IPv6 header.
    #[error("inner packet has IP version {0}")]
    BadVersion(u8),
    /// The inner packet has fewer bytes than its IP header declares (the mirror cut it).
    #[error("inner packet truncated: {have} of {need} bytes")]
    Truncated {
        /// Bytes the IP header declares.
        need: usize,
        /// Bytes the datagram holds.
        have: usize,
    },
}

impl DecapError {
    /// The metric label of the reason.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            DecapError::Short { .. } => "short",
            DecapError::BadHeader(_) => "bad_header",
            DecapError::Control => "control",
            DecapError::NotIp(_) => "not_ip",
            DecapError::BadVersion(_) => "bad_version",
            DecapError::Truncated { .. } => "truncated",
        }
    }
}

fn vni_at(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[4], b[5], b[6]])
}

/// The inner IP packet of a VXLAN or GENEVE datagram (`payload`: the UDP payload).
pub fn decap(encap: Encap, payload: &[u8]) -> Result<Inner<'_>, DecapError> {
    let short = |need: usize| DecapError::Short {
        need,
        have: payload.len(),
    };
    let (vni, frame, link) = match encap {
        Encap::Vxlan => {
            let h = payload.get(..VXLAN_LEN).ok_or(short(VXLAN_LEN))?;
            if h[0] & VXLAN_I == 0 {
                return Err(DecapError::BadHeader(h[0]));
            }
            (vni_at(h), &payload[VXLAN_LEN..], LinkType::Ethernet)
        }
        Encap::Geneve => {
            let h = payload.get(..GENEVE_LEN).ok_or(short(GENEVE_LEN))?;
            if h[0] >> 6 != 0 {
                return Err(DecapError::BadHeader(h[0]));
            }
            if h[1] & GENEVE_O != 0 {
                return Err(DecapError::Control);
            }
            let start = GENEVE_LEN + usize::from(h[0] & 0x3f) * 4;
            let frame = payload.get(start..).ok_or(short(start))?;
            let link = match u16::from_be_bytes([h[2], h[3]]) {
                PROTO_ETHERNET => LinkType::Ethernet,
                PROTO_IPV4 => LinkType::Ipv4,
                PROTO_IPV6 => LinkType::Ipv6,
                other => return Err(DecapError::NotIp(u32::from(other))),
            };
            (vni_at(h), frame, link)
        }
    };
    let ip = ip_payload(link, frame).map_err(|e| match e {
        LinkLayerError::NotIp(t) => DecapError::NotIp(t),
        LinkLayerError::BadVersion(v) => DecapError::BadVersion(v),
        // An Ethernet header or IP version byte cut off: the mirror cut the packet.
        LinkLayerError::Short { need, have } => DecapError::Truncated { need, have },
    })?;
    match declared_ip_len(ip) {
        Some(need) if need > ip.len() => Err(DecapError::Truncated {
            need,
            have: ip.len(),
        }),
        // An IP header shorter than its fixed part: cut as well.
        None if ip.len() < if ip[0] >> 4 == 4 { 20 } else { 40 } => Err(DecapError::Truncated {
            need: if ip[0] >> 4 == 4 { 20 } else { 40 },
            have: ip.len(),
        }),
        _ => Ok(Inner { vni, ip }),
    }
}

/// Wrap `ip` (an IP packet) as a mirror would: VXLAN with an Ethernet header, or GENEVE with
/// `options` bytes of options (a multiple of 4, at most 252) and protocol type Ethernet. For
/// tests, the fuzz target and the lab's injector.
#[must_use]
pub fn encap(encap: Encap, vni: u32, options: usize, ip: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(GENEVE_LEN + options + 14 + ip.len());
    let v = vni.to_be_bytes();
    match encap {
        Encap::Vxlan => out.extend_from_slice(&[VXLAN_I, 0, 0, 0, v[1], v[2], v[3], 0]),
        Encap::Geneve => {
            let words = (options / 4).min(63);
            let p = PROTO_ETHERNET.to_be_bytes();
            out.extend_from_slice(&[words as u8, 0, p[0], p[1], v[1], v[2], v[3], 0]);
            out.resize(out.len() + words * 4, 0);
        }
    }
    // Ethernet: locally administered addresses, the IP type.
    out.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1]);
    let ty = if ip.first().is_some_and(|b| b >> 4 == 6) {
        PROTO_IPV6
    } else {
        PROTO_IPV4
    };
    out.extend_from_slice(&ty.to_be_bytes());
    out.extend_from_slice(ip);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IPv4 + TCP, 40 bytes, total length 40: 198.18.0.1:40000 -> 198.18.1.1:80, SYN.
    const IP4: [u8; 40] = [
        0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0, 198, 18, 0, 1, 198, 18, 1, 1, //
        0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0,
    ];

    #[test]
    fn vxlan_gives_the_inner_packet_and_vni() {
        let mut d = vec![0x08, 0, 0, 0, 0x00, 0x01, 0x2c, 0];
        d.extend_from_slice(&[0xaa; 12]);
        d.extend_from_slice(&[0x08, 0x00]);
        d.extend_from_slice(&IP4);
        let inner = decap(Encap::Vxlan, &d).unwrap();
        assert_eq!(inner.vni, 300);
        assert_eq!(inner.ip, &IP4[..]);
        assert_eq!(
            d,
            encap(Encap::Vxlan, 300, 0, &IP4)[..8]
                .iter()
                .chain(&[0xaa; 12])
                .chain(&[8, 0])
                .chain(&IP4)
                .copied()
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn vxlan_with_vlan_tags_and_padding() {
        let mut d = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
        d.extend_from_slice(&[0xaa; 12]);
        d.extend_from_slice(&[0x81, 0x00, 0, 5, 0x08, 0x00]);
        d.extend_from_slice(&IP4);
        d.extend_from_slice(&[0; 6]); // Ethernet padding
        let inner = decap(Encap::Vxlan, &d).unwrap();
        assert_eq!((inner.vni, inner.ip), (42, &IP4[..]));
    }

    #[test]
    fn vxlan_without_the_i_flag_is_refused() {
        let mut d = encap(Encap::Vxlan, 1, 0, &IP4);
        d[0] = 0;
        assert_eq!(decap(Encap::Vxlan, &d), Err(DecapError::BadHeader(0)));
    }

    #[test]
    fn short_headers_are_refused() {
        assert_eq!(
            decap(Encap::Vxlan, &[0x08, 0, 0]),
            Err(DecapError::Short { need: 8, have: 3 })
        );
        assert_eq!(
            decap(Encap::Geneve, &[]),
            Err(DecapError::Short { need: 8, have: 0 })
        );
        // GENEVE saying 8 bytes of options, holding 4.
        let d = [2, 0, 0x65, 0x58, 0, 0, 1, 0, 1, 2, 3, 4];
        assert_eq!(
            decap(Encap::Geneve, &d),
            Err(DecapError::Short { need: 16, have: 12 })
        );
    }

    #[test]
    fn truncated_inner_packets_are_refused() {
        let d = encap(Encap::Vxlan, 7, 0, &IP4);
        // Cut in the TCP header, in the IP header, in the Ethernet header.
        for cut in [d.len() - 1, 8 + 14 + 10, 8 + 14 + 1, 8 + 5] {
            let e = decap(Encap::Vxlan, &d[..cut]).unwrap_err();
            assert_eq!(e.label(), "truncated", "cut at {cut}: {e:?}");
        }
        // A 1400-byte packet cut to 128 bytes, as a mirror session's packet length does.
        let mut big = IP4.to_vec();
        big.resize(1400, 0x61);
        big[2..4].copy_from_slice(&1400u16.to_be_bytes());
        let d = encap(Encap::Geneve, 7, 8, &big);
        assert_eq!(
            decap(Encap::Geneve, &d[..128]),
            Err(DecapError::Truncated {
                need: 1400,
                have: 128 - 8 - 8 - 14
            })
        );
    }

    #[test]
    fn geneve_skips_its_options() {
        let d = encap(Encap::Geneve, 0xabcdef, 12, &IP4);
        assert_eq!(d[0], 3);
        let inner = decap(Encap::Geneve, &d).unwrap();
        assert_eq!((inner.vni, inner.ip), (0xabcdef, &IP4[..]));
    }

    #[test]
    fn geneve_may_carry_ip_directly() {
        let mut d = vec![0, 0, 0x08, 0x00, 0, 0, 9, 0];
        d.extend_from_slice(&IP4);
        assert_eq!(decap(Encap::Geneve, &d).unwrap().ip, &IP4[..]);
        // ...but an IPv6 type over an IPv4 packet is refused.
        d[2..4].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(decap(Encap::Geneve, &d), Err(DecapError::BadVersion(4)));
    }

    #[test]
    fn geneve_control_other_versions_and_types_are_refused() {
        let mut d = encap(Encap::Geneve, 1, 0, &IP4);
        d[1] = 0x80;
        assert_eq!(decap(Encap::Geneve, &d), Err(DecapError::Control));
        d[1] = 0;
        d[0] = 0x40;
        assert_eq!(decap(Encap::Geneve, &d), Err(DecapError::BadHeader(0x40)));
        d[0] = 0;
        d[2..4].copy_from_slice(&[0x88, 0x47]);
        assert_eq!(decap(Encap::Geneve, &d), Err(DecapError::NotIp(0x8847)));
    }

    #[test]
    fn inner_arp_is_not_ip() {
        let mut d = vec![0x08, 0, 0, 0, 0, 0, 1, 0];
        d.extend_from_slice(&[0xff; 12]);
        d.extend_from_slice(&[0x08, 0x06]);
        d.extend_from_slice(&[0; 28]);
        assert_eq!(decap(Encap::Vxlan, &d), Err(DecapError::NotIp(0x0806)));
    }

    #[test]
    fn never_panics_on_any_prefix() {
        for e in [Encap::Vxlan, Encap::Geneve] {
            let d = encap(e, 5, 16, &IP4);
            for cut in 0..=d.len() {
                let _ = decap(e, &d[..cut]);
            }
            assert!(decap(e, &d).is_ok());
        }
    }
}
