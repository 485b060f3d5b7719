//! Cutting an IP + TCP packet into smaller ones: to a path's MTU ([`split_tcp_packet`]) or
//! as TSO would cut a super-segment ([`cut_like_tso`]).

use std::net::IpAddr;

use common::wire::{
    parse_tcp_packet, tcp_options, Ipv4Packet, TcpBuilder, TcpFlags, TcpOption, WireError,
};

/// Why a segment could not be split.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SplitError {
    /// The packet is not IP + TCP.
    #[error("not a TCP packet: {0}")]
    Parse(#[from] WireError),
    /// SYN or RST segments are not split.
    #[error("segment with flags {0} is not split")]
    Flags(TcpFlags),
    /// Headers alone nearly fill the limit.
    #[error("limit of {limit} bytes leaves no room for payload after {headers} bytes of headers")]
    TooSmall {
        /// The limit asked for.
        limit: usize,
        /// IP + TCP header bytes.
        headers: usize,
    },
}

/// Split an IP + TCP packet into packets of at most `limit` bytes, appending them to `out`.
/// Sequence numbers advance by the payload offset, FIN and PSH stay on the last piece only, TCP
/// options (timestamps...) are copied to every piece, and every checksum is fresh. IPv4 options,
/// if any, are not carried over. A packet that already fits is copied as one piece.
pub fn split_tcp_packet(
    packet: &[u8],
    limit: usize,
    out: &mut Vec<Vec<u8>>,
) -> Result<usize, SplitError> {
    let p = parse_tcp_packet(packet)?;
    let bytes = &packet[..p.ip_total_len.min(packet.len())];
    if bytes.len() <= limit {
        out.push(bytes.to_vec());
        return Ok(1);
    }
    cut_tcp_packet(packet, out, |payload, headers| {
        let room = limit.saturating_sub(headers);
        if room < 8 {
            return Err(SplitError::TooSmall { limit, headers });
        }
        // Even pieces: one 2000-byte payload at room 1400 gives 1000 + 1000, not 1400 + 600.
        Ok(payload.div_ceil(payload.div_ceil(room)))
    })
}

/// Cut an IP + TCP packet into pieces of `piece(payload_len, header_len)` payload bytes each
/// (the last one shorter), appending them to `out`: the same TCP header on each with the
/// sequence number advanced, FIN and PSH on the last piece only, options copied, the IPv4
/// identification counting up, fresh checksums. SYN and RST segments are never cut. Returns
/// the number of pieces. The one cutter of [`split_tcp_packet`] (to a path MTU) and
/// [`cut_like_tso`] (to a GSO size).
pub(crate) fn cut_tcp_packet(
    packet: &[u8],
    out: &mut Vec<Vec<u8>>,
    piece: impl FnOnce(usize, usize) -> Result<usize, SplitError>,
) -> Result<usize, SplitError> {
    let p = parse_tcp_packet(packet)?;
    let flags = p.tcp.flags();
    if flags.intersects(TcpFlags::SYN | TcpFlags::RST) {
        return Err(SplitError::Flags(flags));
    }
    let opts: Vec<TcpOption<'_>> = tcp_options(p.options()).filter_map(Result::ok).collect();
    let ident = match p.src {
        IpAddr::V4(_) => Ipv4Packet::new_unchecked(packet).ident(),
        IpAddr::V6(_) => 0,
    };
    let mut b = TcpBuilder {
        src: p.src_socket(),
        dst: p.dst_socket(),
        seq: p.tcp.seq(),
        ack: p.tcp.ack(),
        flags,
        window: p.tcp.window(),
        options: &opts,
        payload: &[],
        ttl: p.ttl,
        ident,
    };
    let mut probe = Vec::new();
    let headers = b.try_emit(&mut probe).map_err(|_| SplitError::TooSmall {
        limit: packet.len(),
        headers: 0,
    })?;
    let payload = p.payload();
    let each = piece(payload.len(), headers)?.max(1);
    let mut n = 0;
    for (i, chunk) in payload.chunks(each).enumerate() {
        let last = (i + 1) * each >= payload.len();
        b.seq = p.tcp.seq().add((i * each) as u32);
        b.flags = if last {
            flags
        } else {
            flags.without(TcpFlags::FIN | TcpFlags::PSH)
        };
        b.payload = chunk;
        b.ident = ident.wrapping_add(i as u16);
        let mut buf = Vec::with_capacity(headers + chunk.len());
        b.try_emit(&mut buf).map_err(|_| SplitError::TooSmall {
            limit: headers + chunk.len(),
            headers,
        })?;
        out.push(buf);
        n += 1;
    }
    Ok(n)
}

/// Cut an IP + TCP super-segment into pieces of `gso_size` payload bytes (the last one shorter)
/// as TSO would, appending them to `out`: the same TCP header on each with the sequence number
/// advanced, FIN and PSH on the last piece only, options copied, the IPv4 identification
/// counting up, fresh checksums. Returns the number of pieces.
pub fn cut_like_tso(
    packet: &[u8],
    gso_size: u16,
    out: &mut Vec<Vec<u8>>,
) -> Result<usize, SplitError> {
    cut_tcp_packet(packet, out, |_, headers| {
        if gso_size < 8 {
            return Err(SplitError::TooSmall {
                limit: headers + usize::from(gso_size),
                headers,
            });
        }
        Ok(usize::from(gso_size))
    })
}
