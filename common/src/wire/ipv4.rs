//! IPv4 header view.
//!
//! Invariant of a view made by [`Ipv4Packet::new_checked`]: the buffer holds at least 20 bytes,
//! version is 4, IHL >= 5, and the header and `packet_len()` both fit in the buffer. Bytes
//! after `packet_len()` (Ethernet padding) are ignored.

use std::net::Ipv4Addr;

use super::WireError;
use crate::checksum;

/// Length of an IPv4 header without options.
pub const MIN_HEADER_LEN: usize = 20;

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const FRAG_MASK: u16 = 0x1fff;

/// A view of an IPv4 packet over a byte buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wrap a buffer without checking it. Getters of fixed fields panic if it is shorter than
    /// 20 bytes; use only on buffers you built.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
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
        let buf = self.buffer.as_ref();
        let tl = usize::from(self.total_len());
        if tl > buf.len() {
            return Err(WireError::Truncated {
                what: "IPv4 packet",
                need: tl,
                have: buf.len(),
            });
        }
        Ok(())
    }

    /// Validate the header alone, accepting a buffer that ends before the total length says
    /// (a packet cut short after its headers): every check of [`check_len`](Self::check_len)
    /// but that one. The getters stay panic-free; the payload is what the buffer holds.
    pub fn check_header(&self) -> Result<(), WireError> {
        let buf = self.buffer.as_ref();
        if buf.len() < MIN_HEADER_LEN {
            return Err(WireError::Truncated {
                what: "IPv4 header",
                need: MIN_HEADER_LEN,
                have: buf.len(),
            });
        }
        if self.version() != 4 {
            return Err(WireError::BadVersion(self.version()));
        }
        let hl = self.header_len();
        if hl < MIN_HEADER_LEN {
            return Err(WireError::BadHeaderLen {
                what: "IPv4 header length",
                len: hl,
            });
        }
        if hl > buf.len() {
            return Err(WireError::Truncated {
                what: "IPv4 header",
                need: hl,
                have: buf.len(),
            });
        }
        let tl = usize::from(self.total_len());
        if tl == 0 && buf.len() > hl {
            return Ok(()); // offloaded super-segment: the buffer is the packet
        }
        if tl < hl {
            return Err(WireError::BadHeaderLen {
                what: "IPv4 total length",
                len: tl,
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

    fn u16_at(&self, i: usize) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[i], b[i + 1]])
    }

    /// Version nibble (4 on a checked view).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Header length in bytes (IHL * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[0] & 0x0f) * 4
    }

    /// DSCP and ECN byte (formerly TOS).
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// The total length field as written (may be 0 on offloaded super-segments).
    pub fn total_len(&self) -> u16 {
        self.u16_at(2)
    }

    /// The packet's length in bytes: the total length field, or the buffer length when that
    /// field is 0 and the buffer holds more than the header (TSO/GRO). Never more than the
    /// buffer.
    pub fn packet_len(&self) -> usize {
        let len = self.buffer.as_ref().len();
        match usize::from(self.total_len()) {
            0 if len > self.header_len() => len,
            tl => tl.min(len),
        }
    }

    /// Identification field.
    pub fn ident(&self) -> u16 {
        self.u16_at(4)
    }

    /// Don't Fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.u16_at(6) & FLAG_DF != 0
    }

    /// More Fragments flag.
    pub fn more_frags(&self) -> bool {
        self.u16_at(6) & FLAG_MF != 0
    }

    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (self.u16_at(6) & FRAG_MASK) << 3
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[8]
    }

    /// Protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[9]
    }

    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        self.u16_at(10)
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[12], b[13], b[14], b[15])
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[16], b[17], b[18], b[19])
    }

    /// Header bytes, options included (clamped to the buffer).
    pub fn header(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[..self.header_len().min(b.len())]
    }

    /// IP options bytes (empty when IHL is 5).
    pub fn options(&self) -> &[u8] {
        let h = self.header();
        &h[MIN_HEADER_LEN.min(h.len())..]
    }

    fn payload_range(&self) -> std::ops::Range<usize> {
        let end = self.packet_len();
        self.header_len().min(end)..end
    }

    /// The payload: from the end of the header to `packet_len()`.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_range()]
    }

    /// Whether the header checksum is right.
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::sum(self.header(), 0)) == 0xffff
    }
}

impl<'a> Ipv4Packet<&'a [u8]> {
    /// The payload with the buffer's lifetime.
    pub fn into_payload(self) -> &'a [u8] {
        let r = self.payload_range();
        &self.buffer[r]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn set_u16_at(&mut self, i: usize, v: u16) {
        self.buffer.as_mut()[i..i + 2].copy_from_slice(&v.to_be_bytes());
    }

    /// Set version 4 and the header length (`len` a multiple of 4, 20..=60).
    pub fn set_version_and_header_len(&mut self, len: usize) {
        debug_assert!(len & 3 == 0 && (MIN_HEADER_LEN..=60).contains(&len));
        self.buffer.as_mut()[0] = 0x40 | ((len / 4) as u8 & 0x0f);
    }

    /// Set the DSCP/ECN byte.
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[1] = v;
    }

    /// Set the total length field.
    pub fn set_total_len(&mut self, v: u16) {
        self.set_u16_at(2, v);
    }

    /// Set the identification field.
    pub fn set_ident(&mut self, v: u16) {
        self.set_u16_at(4, v);
    }

    /// Set the flags and fragment offset (`offset` in bytes, a multiple of 8).
    pub fn set_frag(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let mut v = (offset >> 3) & FRAG_MASK;
        if dont_frag {
            v |= FLAG_DF;
        }
        if more_frags {
            v |= FLAG_MF;
        }
        self.set_u16_at(6, v);
    }

    /// Set the time to live.
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[8] = v;
    }

    /// Set the protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[9] = v;
    }

    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set_u16_at(10, v);
    }

    /// Set the source address (checksum not updated).
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[12..16].copy_from_slice(&a.octets());
    }

    /// Set the destination address (checksum not updated).
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[16..20].copy_from_slice(&a.octets());
    }

    /// Compute and store the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::ipv4_header(self.header());
        self.set_checksum(c);
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

    /// 20-byte header, total length 24, ident 0x1234, DF, TTL 64, protocol 6,
    /// 198.18.0.1 -> 198.19.0.2, plus 4 payload bytes and 2 bytes of padding.
    const PKT: [u8; 26] = [
        0x45, 0x00, 0x00, 0x18, 0x12, 0x34, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 198, 18, 0, 1, 198,
        19, 0, 2, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x00,
    ];

    #[test]
    fn parse_fields() {
        let p = Ipv4Packet::new_checked(&PKT[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 24);
        assert_eq!(p.packet_len(), 24);
        assert_eq!(p.ident(), 0x1234);
        assert!(p.dont_frag());
        assert!(!p.more_frags());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), 6);
        assert_eq!(p.src_addr(), Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(198, 19, 0, 2));
        assert_eq!(
            p.payload(),
            &[0xde, 0xad, 0xbe, 0xef],
            "padding must be cut"
        );
        assert!(p.options().is_empty());
        assert!(!p.verify_checksum());
    }

    #[test]
    fn fill_checksum_and_setters() {
        let mut b = PKT;
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        assert!(p.verify_checksum());
        let c = p.checksum();
        // 0x4500+0x0018+0x1234+0x4000+0x4006+0xc612+0x0001+0xc613+0x0002 = 0x2637a,
        // folded 0x637c, inverted 0x9c83
        assert_eq!(c, 0x9c83);
        p.set_ttl(1);
        p.set_src_addr(Ipv4Addr::new(10, 0, 0, 1));
        p.set_frag(false, true, 1480);
        p.set_ident(7);
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!(p.ttl(), 1);
        assert!(p.more_frags() && !p.dont_frag());
        assert_eq!(p.frag_offset(), 1480);
        assert_eq!(p.ident(), 7);
        assert_eq!(p.src_addr(), Ipv4Addr::new(10, 0, 0, 1));
        p.payload_mut()[0] = 1;
        assert_eq!(b[20], 1);
    }

    #[test]
    fn truncated_at_every_length() {
        for n in 0..24 {
            let e = Ipv4Packet::new_checked(&PKT[..n]).unwrap_err();
            assert!(matches!(e, WireError::Truncated { .. }), "len {n}: {e:?}");
        }
        assert!(Ipv4Packet::new_checked(&PKT[..24]).is_ok());
    }

    #[test]
    fn impossible_lengths() {
        let mut b = PKT;
        b[0] = 0x44; // IHL 4
        assert!(matches!(
            Ipv4Packet::new_checked(&b[..]),
            Err(WireError::BadHeaderLen { len: 16, .. })
        ));
        let mut b = PKT;
        b[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]),
            Err(WireError::BadVersion(6))
        );
        let mut b = PKT;
        b[2..4].copy_from_slice(&19u16.to_be_bytes()); // total < header
        assert!(matches!(
            Ipv4Packet::new_checked(&b[..]),
            Err(WireError::BadHeaderLen { len: 19, .. })
        ));
        let mut b = PKT;
        b[0] = 0x4f; // IHL 15 = 60 bytes > buffer
        assert!(matches!(
            Ipv4Packet::new_checked(&b[..]),
            Err(WireError::Truncated { need: 60, .. })
        ));
        let mut b = PKT;
        b[2..4].copy_from_slice(&27u16.to_be_bytes()); // total > buffer
        assert!(matches!(
            Ipv4Packet::new_checked(&b[..]),
            Err(WireError::Truncated {
                need: 27,
                have: 26,
                ..
            })
        ));
    }

    #[test]
    fn zero_total_len_means_whole_buffer() {
        let mut b = PKT;
        b[2..4].copy_from_slice(&[0, 0]);
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.packet_len(), 26);
        assert_eq!(p.payload().len(), 6);
        // ... but not when nothing follows the header
        assert!(Ipv4Packet::new_checked(&b[..20]).is_err());
    }

    #[test]
    fn setters_never_make_getters_panic() {
        let mut b = PKT;
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_total_len(60000);
        assert_eq!(p.packet_len(), 26);
        assert_eq!(p.payload().len(), 6);
        p.set_version_and_header_len(60);
        assert_eq!(p.header().len(), 26);
        assert!(p.payload().is_empty());
        assert!(p.payload_mut().is_empty());
    }
}
