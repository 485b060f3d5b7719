//! What the engine reads from the bytes it is given: captured client packets and the
//! intercept's records, turned into plain header values with `common::wire`.
//!
//! Nothing here panics on any input: every failure is a `WireError` for the caller to count.

use common::flow::FourTuple;
use common::proto::Record;
use common::seq::SeqNum;
use common::wire::{
    parse_tcp_headers, parse_tcp_packet, tcp_options, TcpFlags, TcpOption, TcpSegment, WireError,
};

/// The TCP options the engine cares about.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Opts {
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    /// `(tsval, tsecr)`.
    pub ts: Option<(u32, u32)>,
}

/// Read MSS, window scale and timestamps; stop quietly at a malformed option.
pub(crate) fn read_options(bytes: &[u8]) -> Opts {
    let mut o = Opts::default();
    if bytes.is_empty() {
        return o;
    }
    for opt in tcp_options(bytes) {
        match opt {
            Ok(TcpOption::Mss(m)) => o.mss = Some(m),
            Ok(TcpOption::WindowScale(w)) => o.wscale = Some(w),
            Ok(TcpOption::Timestamps { tsval, tsecr }) => o.ts = Some((tsval, tsecr)),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    o
}

/// The header fields of one TCP segment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    pub seq: SeqNum,
    pub ack: SeqNum,
    pub flags: TcpFlags,
    pub window: u16,
    pub opts: Opts,
}

impl Header {
    fn of(tcp: &TcpSegment<&[u8]>) -> Header {
        Header {
            seq: tcp.seq(),
            ack: tcp.ack(),
            flags: tcp.flags(),
            window: tcp.window(),
            opts: read_options(tcp.options()),
        }
    }

    pub(crate) fn has(&self, f: TcpFlags) -> bool {
        self.flags.contains(f)
    }
}

/// A captured client -> online packet.
#[derive(Debug)]
pub(crate) struct Captured<'a> {
    /// Client end -> online end, as captured.
    pub key: FourTuple,
    pub hdr: Header,
    pub payload: &'a [u8],
}

pub(crate) fn parse_captured(buf: &[u8]) -> Result<Captured<'_>, WireError> {
    let p = parse_tcp_packet(buf)?;
    Ok(Captured {
        key: FourTuple::of_request(&p),
        hdr: Header::of(&p.tcp),
        payload: p.payload(),
    })
}

/// A record: one segment the test server sent, headers only.
#[derive(Debug)]
pub(crate) struct RecordInfo {
    /// The test-side connection (client end as we sent it).
    pub tuple: FourTuple,
    pub hdr: Header,
    /// Payload bytes the segment carried (not the bytes the record kept).
    pub data_len: u32,
}

impl RecordInfo {
    /// Sequence space of the segment: data, plus SYN and FIN.
    pub(crate) fn seq_len(&self) -> u32 {
        self.data_len
            + u32::from(self.hdr.has(TcpFlags::SYN))
            + u32::from(self.hdr.has(TcpFlags::FIN))
    }
}

pub(crate) fn parse_record(rec: &Record) -> Result<RecordInfo, WireError> {
    let h = parse_tcp_headers(&rec.headers)?;
    let headers_len = h.packet.headers_len();
    // The IP length field, unless it was 0 (offloaded): then the intercept's orig_len.
    let total = if h.declared_len > headers_len {
        h.declared_len
    } else {
        rec.orig_len as usize
    };
    let data_len = u32::try_from(total.saturating_sub(headers_len)).unwrap_or(u32::MAX);
    Ok(RecordInfo {
        tuple: FourTuple::of_response(&h.packet),
        hdr: Header::of(&h.packet.tcp),
        data_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::wire::TcpBuilder;

    /// A GSO super-segment as the intercept records it with GSO delivery on: only the headers
    /// are copied, the IP header says how long the whole packet was.
    fn super_segment_record(data: usize, zero_ip_len: bool) -> Record {
        let payload = vec![b'x'; data];
        let mut pkt = Vec::new();
        TcpBuilder {
            src: "198.18.2.2:80".parse().unwrap(),
            dst: "198.19.0.5:40000".parse().unwrap(),
            seq: SeqNum(1000),
            ack: SeqNum(1),
            flags: TcpFlags::ACK,
            window: 100,
            options: &[],
            payload: &payload,
            ttl: 64,
            ident: 0,
        }
        .emit(&mut pkt);
        let orig_len = pkt.len() as u32;
        let (_, mut rec) = Record::from_packet(&pkt[..128], 0).unwrap();
        if zero_ip_len {
            // over 64 KB (BIG TCP) the IP length field is 0: the intercept's orig_len counts
            rec.headers[2..4].copy_from_slice(&[0, 0]);
        }
        assert_eq!(rec.orig_len, orig_len);
        assert_eq!(rec.headers.len(), 40);
        rec
    }

    #[test]
    fn a_super_segments_length_comes_from_its_ip_header_not_the_copied_bytes() {
        let r = parse_record(&super_segment_record(65_000, false)).unwrap();
        assert_eq!(r.data_len, 65_000);
        assert_eq!(r.seq_len(), 65_000);
        assert_eq!(r.hdr.seq, SeqNum(1000));
        let r = parse_record(&super_segment_record(30_000, true)).unwrap();
        assert_eq!(r.data_len, 30_000, "IP length 0: the record's orig_len");
    }
}
