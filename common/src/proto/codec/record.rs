//! A response packet as the intercept sends it to the copier ([`Record`]), and the headers
//! the intercept reads from a packet NFQUEUE may have cut short ([`parse_response_headers`]).

use crate::flow::FourTuple;
use crate::wire::{parse_tcp_headers, tcp_flags_of, TcpFlags, WireError};

use super::super::MAX_FRAME;
use super::MIN_RECORD;

/// Bytes of TCP payload above which a record is part of a large answer and never waits
/// ([`Record::urgent`]): three full segments, as a GSO super-segment delivers them.
pub const BULK_BYTES: usize = 4096;

/// One response packet of the test server, as the intercept sends it to the copier.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// Length of the whole original IP packet.
    pub orig_len: u32,
    /// The IP header and the full TCP header, options included.
    pub headers: Vec<u8>,
    /// The first bytes of the TCP payload (empty unless the intercept was asked for payload).
    pub payload: Vec<u8>,
    /// When the packet was seen, in nanoseconds since the Unix epoch, 0 if unknown. The
    /// intercept stamps it with its own clock when it reads the packet from NFQUEUE; it
    /// travels only in StampedRecords (peers with [`FEATURE_STAMPS`]), and the copier's control
    /// link translates it to the copier's clock (`copier::clock`) as it reads it.
    ///
    /// [`FEATURE_STAMPS`]: super::FEATURE_STAMPS
    pub stamp: u64,
}

/// What the intercept needs from a response packet whose bytes may stop anywhere after its TCP
/// header: NFQUEUE's copy range cuts packets short, and a [`Record`] keeps only the headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHeaders {
    /// The session, as the test server sees it ([`FourTuple::of_response`]).
    pub tuple: FourTuple,
    /// The IP header's length.
    pub ip_header_len: usize,
    /// IP header plus full TCP header.
    pub headers_len: usize,
    /// Length of the whole original packet, from the IP length field.
    pub orig_len: usize,
}

/// Parse the IP and TCP headers of a server -> client packet that may be truncated after its
/// TCP header (the wire view [`parse_tcp_headers`]: everything [`crate::wire::parse_tcp_packet`] refuses in
/// the header part is refused here too; only "the IP length says more bytes follow than the
/// buffer holds" is accepted).
pub fn parse_response_headers(buf: &[u8]) -> Result<ResponseHeaders, WireError> {
    let h = parse_tcp_headers(buf)?;
    Ok(ResponseHeaders {
        tuple: FourTuple::of_response(&h.packet),
        ip_header_len: h.packet.ip_header_len,
        headers_len: h.packet.headers_len(),
        orig_len: h.declared_len,
    })
}

impl Record {
    /// Whether its packet opens, closes or resets a connection (SYN, FIN or RST), or its
    /// headers do not parse as IPv4 or IPv6 TCP: the records that are urgent
    /// ([`Record::urgent`]) whatever they carry.
    #[must_use]
    pub fn opens_or_ends(&self) -> bool {
        tcp_flags_of(&self.headers)
            .is_none_or(|(_, f)| f.intersects(TcpFlags::SYN | TcpFlags::FIN | TcpFlags::RST))
    }

    /// Whether the record cannot wait: its packet opens, closes or resets a connection (SYN,
    /// FIN, RST); it carries data without PSH (the test server is in the middle of a write,
    /// and the rest of it may wait for the ACK of this part: a window or congestion window
    /// that is full, Nagle; Linux, like the other stacks, sets PSH on the last segment of each
    /// write, so the end of a small answer can wait); it carries more than [`BULK_BYTES`] (a
    /// large answer, whose next ones the test server sends as our ACKs open its congestion
    /// window; a handful of such records is all it costs); or its headers do not parse as IPv4
    /// or IPv6 TCP (the copier counts it; there is nothing to save by holding it).
    #[must_use]
    pub fn urgent(&self) -> bool {
        self.opens_or_ends() || self.urgent_for_flow()
    }

    /// The part of [`Record::urgent`] that is about the answer's flow, whatever the flags
    /// that open or end a connection say: it carries data without PSH, or more than
    /// [`BULK_BYTES`]. False when its headers do not parse ([`Record::opens_or_ends`] is true
    /// then). The test server's sending waits on such records; a connection's start or end
    /// waits on the others ([`Message::OpenWait`](super::Message::OpenWait) lets them wait).
    #[must_use]
    pub fn urgent_for_flow(&self) -> bool {
        let Some((headers, flags)) = tcp_flags_of(&self.headers) else {
            return false;
        };
        let data = (self.orig_len as usize).saturating_sub(headers);
        (data > 0 && !flags.contains(TcpFlags::PSH)) || data > BULK_BYTES
    }

    /// Build a record from a server -> client IP packet (possibly cut short after its headers,
    /// as NFQUEUE's copy range does), keeping at most `payload_bytes` bytes of TCP payload.
    /// Returns the session too, so the caller parses once.
    pub fn from_packet(
        packet: &[u8],
        payload_bytes: usize,
    ) -> Result<(FourTuple, Record), WireError> {
        let h = parse_response_headers(packet)?;
        Ok((h.tuple, Record::from_parsed(packet, &h, payload_bytes)))
    }

    /// Build a record from a packet already parsed by [`parse_response_headers`].
    pub fn from_parsed(packet: &[u8], h: &ResponseHeaders, payload_bytes: usize) -> Record {
        let hl = h.headers_len.min(packet.len());
        // The payload ends at the IP length (Ethernet padding excluded) or where the copy stops.
        let end = h.orig_len.min(packet.len()).max(hl);
        let keep = (end - hl).min(payload_bytes);
        Record {
            orig_len: u32::try_from(h.orig_len).unwrap_or(u32::MAX),
            headers: packet[..hl].to_vec(),
            payload: packet[hl..hl + keep].to_vec(),
            stamp: 0,
        }
    }

    /// The session this record belongs to, as the test server sees it (parsed from `headers`).
    pub fn tuple(&self) -> Result<FourTuple, WireError> {
        parse_response_headers(&self.headers).map(|h| h.tuple)
    }

    /// Bytes this record takes in a Records frame (after clipping, see [`Message::encode`]).
    ///
    /// [`Message::encode`]: super::Message::encode
    pub fn encoded_len(&self) -> usize {
        let (h, p) = self.clipped(false);
        MIN_RECORD + h.len() + p.len()
    }

    /// Bytes this record takes in a StampedRecords frame.
    pub(super) fn stamped_len(&self) -> usize {
        let (h, p) = self.clipped(true);
        8 + MIN_RECORD + h.len() + p.len()
    }

    /// Headers and payload as they are encoded: headers at most 65535 bytes, payload cut so that
    /// one record always fits in one frame.
    /// `stamped`: in a StampedRecords frame, whose items are 8 bytes longer.
    pub(super) fn clipped(&self, stamped: bool) -> (&[u8], &[u8]) {
        let h = &self.headers[..self.headers.len().min(u16::MAX as usize)];
        let room = MAX_FRAME - 1 - 4 - 8 - MIN_RECORD - h.len() + if stamped { 0 } else { 8 };
        let p = &self.payload[..self.payload.len().min(room)];
        (h, p)
    }
}
