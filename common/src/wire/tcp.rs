//! TCP header view and flags.
//!
//! Invariant of a view made by [`TcpSegment::new_checked`]: the buffer holds at least 20
//! bytes, the data offset is >= 5, and the header (options included) fits in the buffer. The
//! buffer is the whole segment: the payload runs to its end.

use std::fmt;
use std::net::IpAddr;
use std::ops::{BitAnd, BitOr, BitOrAssign};

use super::options::{tcp_options, TcpOptionIter};
use super::{WireError, IPPROTO_TCP};
use crate::checksum;
use crate::seq::SeqNum;

/// Length of a TCP header without options.
pub const MIN_HEADER_LEN: usize = 20;
/// Largest TCP header (data offset 15).
pub const MAX_HEADER_LEN: usize = 60;

/// The eight TCP flag bits of header byte 13.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// No flags.
    pub const NONE: TcpFlags = TcpFlags(0);
    /// No more data from sender.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// Synchronize sequence numbers.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// Reset the connection.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// Push.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// Acknowledgment field significant.
    pub const ACK: TcpFlags = TcpFlags(0x10);
    /// Urgent pointer significant.
    pub const URG: TcpFlags = TcpFlags(0x20);
    /// ECN echo.
    pub const ECE: TcpFlags = TcpFlags(0x40);
    /// Congestion window reduced.
    pub const CWR: TcpFlags = TcpFlags(0x80);

    /// Whether every flag of `other` is set in `self`.
    #[must_use]
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any flag of `other` is set in `self`.
    #[must_use]
    pub const fn intersects(self, other: TcpFlags) -> bool {
        self.0 & other.0 != 0
    }

    /// `self` without the flags of `other`.
    #[must_use]
    pub const fn without(self, other: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 & !other.0)
    }

    /// The raw bits.
    #[must_use]
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether no flag is set.
    #[must_use]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

impl BitOrAssign for TcpFlags {
    fn bitor_assign(&mut self, rhs: TcpFlags) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for TcpFlags {
    type Output = TcpFlags;
    fn bitand(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 & rhs.0)
    }
}

const FLAG_NAMES: [(TcpFlags, &str); 8] = [
    (TcpFlags::FIN, "FIN"),
    (TcpFlags::SYN, "SYN"),
    (TcpFlags::RST, "RST"),
    (TcpFlags::PSH, "PSH"),
    (TcpFlags::ACK, "ACK"),
    (TcpFlags::URG, "URG"),
    (TcpFlags::ECE, "ECE"),
    (TcpFlags::CWR, "CWR"),
];

/// `SYN|ACK`; `-` when empty.
impl fmt::Display for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("-");
        }
        let mut first = true;
        for (flag, name) in FLAG_NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TcpFlags({self})")
    }
}

/// A view of a TCP segment (header + payload) over a byte buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSegment<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpSegment<T> {
    /// Wrap a buffer without checking it. Fixed-field getters panic under 20 bytes.
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpSegment { buffer }
    }

    /// Wrap an untrusted buffer, validating it (see the module doc).
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let s = Self::new_unchecked(buffer);
        s.check_len()?;
        Ok(s)
    }

    /// Validate the buffer: what [`new_checked`](Self::new_checked) runs.
    pub fn check_len(&self) -> Result<(), WireError> {
        let len = self.buffer.as_ref().len();
        if len < MIN_HEADER_LEN {
            return Err(WireError::Truncated {
                what: "TCP header",
                need: MIN_HEADER_LEN,
                have: len,
            });
        }
        let hl = self.header_len();
        if hl < MIN_HEADER_LEN {
            return Err(WireError::BadHeaderLen {
                what: "TCP data offset",
                len: hl,
            });
        }
        if hl > len {
            return Err(WireError::Truncated {
                what: "TCP header with options",
                need: hl,
                have: len,
            });
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole segment.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    fn u16_at(&self, i: usize) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[i], b[i + 1]])
    }

    fn u32_at(&self, i: usize) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        self.u16_at(0)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        self.u16_at(2)
    }

    /// Sequence number.
    pub fn seq(&self) -> SeqNum {
        SeqNum(self.u32_at(4))
    }

    /// Acknowledgement number (meaningful when ACK is set).
    pub fn ack(&self) -> SeqNum {
        SeqNum(self.u32_at(8))
    }

    /// Header length in bytes (data offset * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[12] >> 4) * 4
    }

    /// The flags of byte 13 (the NS bit of byte 12 is not included).
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.buffer.as_ref()[13])
    }

    /// Window field (unscaled).
    pub fn window(&self) -> u16 {
        self.u16_at(14)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        self.u16_at(16)
    }

    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        self.u16_at(18)
    }

    fn header_end(&self) -> usize {
        let len = self.buffer.as_ref().len();
        self.header_len().clamp(MIN_HEADER_LEN.min(len), len)
    }

    /// Options bytes (between the fixed header and the payload; clamped to the buffer).
    pub fn options(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[MIN_HEADER_LEN.min(b.len())..self.header_end()]
    }

    /// The options, parsed.
    pub fn options_iter(&self) -> TcpOptionIter<'_> {
        tcp_options(self.options())
    }

    /// The payload (after the header, to the end of the buffer).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_end()..]
    }

    /// Sequence space the segment occupies: payload length, plus one each for SYN and FIN.
    pub fn seq_len(&self) -> u32 {
        let f = self.flags();
        let n = u32::try_from(self.payload().len()).unwrap_or(u32::MAX);
        n.saturating_add(u32::from(f.contains(TcpFlags::SYN)))
            .saturating_add(u32::from(f.contains(TcpFlags::FIN)))
    }

    /// Whether the checksum is right for this segment between `src` and `dst`.
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        checksum::verify_transport(src, dst, IPPROTO_TCP, self.buffer.as_ref())
    }
}

impl<'a> TcpSegment<&'a [u8]> {
    /// The payload with the buffer's lifetime.
    pub fn into_payload(self) -> &'a [u8] {
        let e = self.header_end();
        &self.buffer[e..]
    }

    /// The options bytes with the buffer's lifetime.
    pub fn into_options(self) -> &'a [u8] {
        let e = self.header_end();
        &self.buffer[MIN_HEADER_LEN.min(e)..e]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpSegment<T> {
    fn set_u16_at(&mut self, i: usize, v: u16) {
        self.buffer.as_mut()[i..i + 2].copy_from_slice(&v.to_be_bytes());
    }

    fn set_u32_at(&mut self, i: usize, v: u32) {
        self.buffer.as_mut()[i..i + 4].copy_from_slice(&v.to_be_bytes());
    }

    /// Set the source port (checksum not updated).
    pub fn set_src_port(&mut self, v: u16) {
        self.set_u16_at(0, v);
    }

    /// Set the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        self.set_u16_at(2, v);
    }

    /// Set the sequence number.
    pub fn set_seq(&mut self, v: SeqNum) {
        self.set_u32_at(4, v.0);
    }

    /// Set the acknowledgement number.
    pub fn set_ack(&mut self, v: SeqNum) {
        self.set_u32_at(8, v.0);
    }

    /// Set the header length in bytes (a multiple of 4, 20..=60); clears the NS bit and the
    /// reserved bits.
    pub fn set_header_len(&mut self, len: usize) {
        debug_assert!(len & 3 == 0 && (MIN_HEADER_LEN..=MAX_HEADER_LEN).contains(&len));
        self.buffer.as_mut()[12] = ((len / 4) as u8 & 0x0f) << 4;
    }

    /// Set the flags.
    pub fn set_flags(&mut self, f: TcpFlags) {
        self.buffer.as_mut()[13] = f.0;
    }

    /// Set the window field.
    pub fn set_window(&mut self, v: u16) {
        self.set_u16_at(14, v);
    }

    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set_u16_at(16, v);
    }

    /// Set the urgent pointer.
    pub fn set_urgent(&mut self, v: u16) {
        self.set_u16_at(18, v);
    }

    /// Options bytes, mutable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let e = self.header_end();
        let s = MIN_HEADER_LEN.min(e);
        &mut self.buffer.as_mut()[s..e]
    }

    /// Payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let e = self.header_end();
        &mut self.buffer.as_mut()[e..]
    }

    /// Compute and store the checksum over the whole buffer with the pseudo-header of
    /// `src` -> `dst`.
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) {
        self.set_checksum(0);
        let c = checksum::transport(src, dst, IPPROTO_TCP, self.buffer.as_ref());
        self.set_checksum(c);
    }
}

/// Rewrite the TCP source port of `pkt` (a packet whose TCP header is at `tcp_offset`) and
/// patch its checksum incrementally. Does nothing when the header is not all there.
#[inline]
pub fn set_source_port(pkt: &mut [u8], tcp_offset: usize, port: u16) {
    set_port(pkt, tcp_offset, port, true);
}

/// [`set_source_port`] for the destination port.
#[inline]
pub fn set_destination_port(pkt: &mut [u8], tcp_offset: usize, port: u16) {
    set_port(pkt, tcp_offset, port, false);
}

#[inline]
fn set_port(pkt: &mut [u8], tcp_offset: usize, port: u16, source: bool) {
    let Some(tcp) = pkt.get_mut(tcp_offset..).filter(|t| t.len() >= 18) else {
        return;
    };
    let mut tcp = TcpSegment::new_unchecked(tcp);
    let old = if source {
        tcp.src_port()
    } else {
        tcp.dst_port()
    };
    let csum = checksum::update_u16(tcp.checksum(), old, port);
    if source {
        tcp.set_src_port(port);
    } else {
        tcp.set_dst_port(port);
    }
    tcp.set_checksum(csum);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::TcpOption;
    use std::net::Ipv4Addr;

    /// 40000 -> 80, seq 0xfffffff0, ack 0x01020304, offset 6 (MSS 1460), SYN|ACK,
    /// window 0xffff, checksum 0, urgent 0, payload "hi".
    const SEG: [u8; 26] = [
        0x9c, 0x40, 0x00, 0x50, 0xff, 0xff, 0xff, 0xf0, 0x01, 0x02, 0x03, 0x04, 0x60, 0x12, 0xff,
        0xff, 0x00, 0x00, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, b'h', b'i',
    ];

    #[test]
    fn port_rewrites_patch_the_checksum_as_a_recomputation_would() {
        let (src, dst) = (
            IpAddr::from(Ipv4Addr::new(198, 18, 0, 1)),
            IpAddr::from(Ipv4Addr::new(198, 18, 1, 2)),
        );
        let mut pkt = [&[0xaa; 14][..], &SEG[..]].concat();
        let c = checksum::transport(src, dst, IPPROTO_TCP, &pkt[14..]);
        TcpSegment::new_unchecked(&mut pkt[14..]).set_checksum(c);
        set_source_port(&mut pkt, 14, 51234);
        set_destination_port(&mut pkt, 14, 8080);
        let s = TcpSegment::new_checked(&pkt[14..]).unwrap();
        assert_eq!((s.src_port(), s.dst_port()), (51234, 8080));
        assert!(checksum::verify_transport(
            src,
            dst,
            IPPROTO_TCP,
            &pkt[14..]
        ));
        assert_eq!(&pkt[..14], &[0xaa; 14]);
        // A header cut short before the checksum: nothing is written.
        let mut short = SEG[..17].to_vec();
        set_source_port(&mut short, 0, 1);
        assert_eq!(short, &SEG[..17]);
    }

    #[test]
    fn parse_fields() {
        let s = TcpSegment::new_checked(&SEG[..]).unwrap();
        assert_eq!(s.src_port(), 40000);
        assert_eq!(s.dst_port(), 80);
        assert_eq!(s.seq(), SeqNum(0xffff_fff0));
        assert_eq!(s.ack(), SeqNum(0x0102_0304));
        assert_eq!(s.header_len(), 24);
        assert_eq!(s.flags(), TcpFlags::SYN | TcpFlags::ACK);
        assert!(s.flags().contains(TcpFlags::SYN));
        assert!(!s.flags().contains(TcpFlags::FIN | TcpFlags::SYN));
        assert_eq!(s.window(), 0xffff);
        assert_eq!(s.urgent(), 0);
        assert_eq!(s.options(), &[2, 4, 5, 0xb4]);
        assert_eq!(s.payload(), b"hi");
        assert_eq!(s.seq_len(), 3);
        let opts: Vec<_> = s.options_iter().collect();
        assert_eq!(opts, vec![Ok(TcpOption::Mss(1460))]);
    }

    #[test]
    fn setters_and_checksum() {
        let mut b = SEG;
        let mut s = TcpSegment::new_checked(&mut b[..]).unwrap();
        let src: IpAddr = Ipv4Addr::new(198, 18, 0, 1).into();
        let dst: IpAddr = Ipv4Addr::new(198, 19, 0, 2).into();
        s.fill_checksum(src, dst);
        assert!(s.verify_checksum(src, dst));
        assert!(!s.verify_checksum(dst, Ipv4Addr::new(198, 19, 0, 3).into()));
        s.set_src_port(1);
        s.set_dst_port(2);
        s.set_seq(SeqNum(3));
        s.set_ack(SeqNum(4));
        s.set_flags(TcpFlags::FIN | TcpFlags::ACK);
        s.set_window(5);
        s.set_urgent(6);
        assert!(!s.verify_checksum(src, dst));
        s.fill_checksum(src, dst);
        assert!(s.verify_checksum(src, dst));
        assert_eq!(
            (
                s.src_port(),
                s.dst_port(),
                s.seq(),
                s.ack(),
                s.window(),
                s.urgent()
            ),
            (1, 2, SeqNum(3), SeqNum(4), 5, 6)
        );
        assert_eq!(s.seq_len(), 3);
        s.payload_mut()[0] = b'H';
        s.options_mut()[3] = 0xb5;
        assert_eq!(&b[22..], &[0x05, 0xb5, b'H', b'i']);
    }

    #[test]
    fn truncated_and_impossible() {
        for n in 0..24 {
            let e = TcpSegment::new_checked(&SEG[..n]).unwrap_err();
            assert!(matches!(e, WireError::Truncated { .. }), "len {n}: {e:?}");
        }
        assert!(TcpSegment::new_checked(&SEG[..24])
            .unwrap()
            .payload()
            .is_empty());
        let mut b = SEG;
        b[12] = 0x40; // data offset 4
        assert!(matches!(
            TcpSegment::new_checked(&b[..]),
            Err(WireError::BadHeaderLen { len: 16, .. })
        ));
        b[12] = 0xf0; // 60 bytes > 26
        assert!(matches!(
            TcpSegment::new_checked(&b[..]),
            Err(WireError::Truncated {
                need: 60,
                have: 26,
                ..
            })
        ));
        // an unchecked view of that still never panics in variable-length getters
        let s = TcpSegment::new_unchecked(&b[..]);
        assert_eq!(s.options().len(), 6);
        assert!(s.payload().is_empty());
    }

    #[test]
    fn flags_display() {
        assert_eq!((TcpFlags::SYN | TcpFlags::ACK).to_string(), "SYN|ACK");
        assert_eq!(TcpFlags::NONE.to_string(), "-");
        assert_eq!(format!("{:?}", TcpFlags::RST), "TcpFlags(RST)");
        assert_eq!((TcpFlags(0xff).without(TcpFlags::ACK)).bits(), 0xef);
        assert!(TcpFlags::FIN.intersects(TcpFlags::FIN | TcpFlags::RST));
    }
}
