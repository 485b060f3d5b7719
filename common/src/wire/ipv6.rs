//! IPv6 fixed-header view.
//!
//! Invariant of a view made by [`Ipv6Packet::new_checked`]: the buffer holds the 40-byte fixed
//! header, version is 6, and `40 + payload_len` fits in the buffer. Bytes after that (padding)
//! are ignored. A payload length of 0 with bytes after the header is rejected (a jumbogram,
//! RFC 2675, or garbage); a bare 40-byte header with payload length 0 is accepted. Extension
//! headers are not walked: the payload starts right after the fixed header and `next_header`
//! says what it is.

use std::net::Ipv6Addr;

use super::WireError;

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = 40;

/// A view of an IPv6 packet over a byte buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wrap a buffer without checking it. Getters panic if it is shorter than 40 bytes.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wrap an untrusted buffer, validating it (see the module doc).
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Validate the buffer: what [`new_checked`](Self::new_checked) runs.
    pub fn check_len(&self) -> Result<(), WireError> {
        self.check_header()?;
        let len = self.buffer.as_ref().len();
        let pl = usize::from(self.payload_len());
        if HEADER_LEN + pl > len {
            return Err(WireError::Truncated {
                what: "IPv6 packet",
                need: HEADER_LEN + pl,
                have: len,
            });
        }
        Ok(())
    }

    /// Validate the fixed header alone, accepting a buffer that ends before the payload length
    /// says (a packet cut short after its headers): every check of
    /// [`check_len`](Self::check_len) but that one.
    pub fn check_header(&self) -> Result<(), WireError> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(WireError::Truncated {
                what: "IPv6 header",
                need: HEADER_LEN,
                have: len,
            });
        }
        if self.version() != 6 {
            return Err(WireError::BadVersion(self.version()));
        }
        let pl = usize::from(self.payload_len());
        if pl == 0 && len > HEADER_LEN {
            return Err(WireError::BadHeaderLen {
                what: "IPv6 payload length (jumbogram?)",
                len: 0,
            });
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole buffer, padding included.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    fn u32_at(&self, i: usize) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
    }

    fn addr_at(&self, i: usize) -> Ipv6Addr {
        let mut o = [0u8; 16];
        o.copy_from_slice(&self.buffer.as_ref()[i..i + 16]);
        Ipv6Addr::from(o)
    }

    /// Version nibble (6 on a checked view).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        (self.u32_at(0) >> 20) as u8
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.u32_at(0) & 0x000f_ffff
    }

    /// Payload length field.
    pub fn payload_len(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[4], b[5]])
    }

    /// Next header (protocol of the payload, or the first extension header).
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[6]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[7]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        self.addr_at(8)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        self.addr_at(24)
    }

    /// Length of the packet, header included, padding excluded (clamped to the buffer).
    pub fn packet_len(&self) -> usize {
        (HEADER_LEN + usize::from(self.payload_len())).min(self.buffer.as_ref().len())
    }

    fn payload_range(&self) -> std::ops::Range<usize> {
        let end = self.packet_len();
        HEADER_LEN.min(end)..end
    }

    /// The payload (after the fixed header, up to `40 + payload_len`).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_range()]
    }
}

impl<'a> Ipv6Packet<&'a [u8]> {
    /// The payload with the buffer's lifetime.
    pub fn into_payload(self) -> &'a [u8] {
        let r = self.payload_range();
        &self.buffer[r]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    fn set_u32_at(&mut self, i: usize, v: u32) {
        self.buffer.as_mut()[i..i + 4].copy_from_slice(&v.to_be_bytes());
    }

    /// Set version 6, traffic class and flow label at once.
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        self.set_u32_at(
            0,
            (6 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff),
        );
    }

    /// Set the payload length field.
    pub fn set_payload_len(&mut self, v: u16) {
        self.buffer.as_mut()[4..6].copy_from_slice(&v.to_be_bytes());
    }

    /// Set the next header field.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[6] = v;
    }

    /// Set the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[7] = v;
    }

    /// Set the source address (no checksum here; the transport checksum covers it).
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[8..24].copy_from_slice(&a.octets());
    }

    /// Set the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[24..40].copy_from_slice(&a.octets());
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let r = self.payload_range();
        &mut self.buffer.as_mut()[r]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tc 0xb8, flow label 0x12345, payload 4, next header 6, hop limit 63,
    /// 2001:db8::1 -> 2001:db8::2, 4 payload bytes, 3 padding bytes.
    const PKT: [u8; 47] = [
        0x6b, 0x81, 0x23, 0x45, 0x00, 0x04, 0x06, 0x3f, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, //
        1, 2, 3, 4, 0xee, 0xee, 0xee,
    ];

    #[test]
    fn parse_fields() {
        let p = Ipv6Packet::new_checked(&PKT[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xb8);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 4);
        assert_eq!(p.next_header(), 6);
        assert_eq!(p.hop_limit(), 63);
        assert_eq!(p.src_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &[1, 2, 3, 4]);
        assert_eq!(p.packet_len(), 44);
    }

    #[test]
    fn setters_round_trip() {
        let mut b = [0u8; 44];
        let mut p = Ipv6Packet::new_unchecked(&mut b[..]);
        p.set_version_tc_flow(0xb8, 0x12345);
        p.set_payload_len(4);
        p.set_next_header(6);
        p.set_hop_limit(63);
        p.set_src_addr("2001:db8::1".parse().unwrap());
        p.set_dst_addr("2001:db8::2".parse().unwrap());
        p.payload_mut().copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(&b[..], &PKT[..44]);
    }

    #[test]
    fn truncated_at_every_length() {
        for n in 0..44 {
            let e = Ipv6Packet::new_checked(&PKT[..n]).unwrap_err();
            assert!(matches!(e, WireError::Truncated { .. }), "len {n}: {e:?}");
        }
    }

    #[test]
    fn impossible() {
        let mut b = PKT;
        b[0] = 0x4b;
        assert_eq!(
            Ipv6Packet::new_checked(&b[..]),
            Err(WireError::BadVersion(4))
        );
        let mut b = PKT;
        b[4..6].copy_from_slice(&[0, 0]);
        assert!(matches!(
            Ipv6Packet::new_checked(&b[..]),
            Err(WireError::BadHeaderLen { .. })
        ));
        // a bare header with nothing after it is fine
        let p = Ipv6Packet::new_checked(&b[..40]).unwrap();
        assert!(p.payload().is_empty());
        let mut b = PKT;
        b[4..6].copy_from_slice(&8u16.to_be_bytes());
        assert!(matches!(
            Ipv6Packet::new_checked(&b[..]),
            Err(WireError::Truncated {
                need: 48,
                have: 47,
                ..
            })
        ));
    }
}
