//! The parts of a frame's body: a frame's start and length, lists split over frames of at most
//! `MAX_FRAME` bytes, strings, addresses, 4-tuples and records, written and read back
//! ([`Reader`] never reads past its frame).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::flow::{Endpoint, FourTuple};

use super::super::{ProtoError, MAX_FRAME};
use super::record::Record;

// ---- encoding helpers ----

pub(super) fn begin_frame(out: &mut Vec<u8>, ty: u8) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0, 0, 0, 0, ty]);
    start
}

pub(super) fn end_frame(out: &mut [u8], start: usize) {
    let len = (out.len() - start - 4) as u32;
    debug_assert!(len as usize <= MAX_FRAME);
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

pub(super) fn encode_list<T>(
    out: &mut Vec<u8>,
    ty: u8,
    items: &[T],
    item_len: fn(&T) -> usize,
    put: fn(&mut Vec<u8>, &T),
) {
    let mut i = 0;
    loop {
        let start = begin_frame(out, ty);
        let count_at = out.len();
        out.extend_from_slice(&[0; 4]);
        let mut size = 1 + 4;
        let mut count: u32 = 0;
        while let Some(item) = items.get(i) {
            let n = item_len(item);
            if count > 0 && size + n > MAX_FRAME {
                break;
            }
            put(out, item);
            size += n;
            count += 1;
            i += 1;
        }
        out[count_at..count_at + 4].copy_from_slice(&count.to_be_bytes());
        end_frame(out, start);
        if i >= items.len() {
            break;
        }
    }
}

pub(super) fn put_str(out: &mut Vec<u8>, s: &str) {
    let mut end = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&(end as u16).to_be_bytes());
    out.extend_from_slice(&s.as_bytes()[..end]);
}

pub(super) fn addr_len(a: &Endpoint) -> usize {
    if a.is_ipv6() {
        1 + 16 + 2
    } else {
        1 + 4 + 2
    }
}

pub(super) fn tuple_len(t: &FourTuple) -> usize {
    addr_len(&t.client) + addr_len(&t.server)
}

pub(super) fn put_addr(out: &mut Vec<u8>, a: &Endpoint) {
    match a.ip() {
        IpAddr::V4(ip) => {
            out.push(4);
            out.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            out.push(6);
            out.extend_from_slice(&ip.octets());
        }
    }
    out.extend_from_slice(&a.port().to_be_bytes());
}

pub(super) fn put_tuple(out: &mut Vec<u8>, t: &FourTuple) {
    put_addr(out, &t.client);
    put_addr(out, &t.server);
}

pub(super) fn put_record(out: &mut Vec<u8>, r: &Record) {
    put_record_clipped(out, r, false);
}

pub(super) fn put_record_clipped(out: &mut Vec<u8>, r: &Record, stamped: bool) {
    let (h, p) = r.clipped(stamped);
    out.extend_from_slice(&r.orig_len.to_be_bytes());
    out.extend_from_slice(&(h.len() as u16).to_be_bytes());
    out.extend_from_slice(h);
    out.extend_from_slice(&(p.len() as u32).to_be_bytes());
    out.extend_from_slice(p);
}

// ---- decoding helpers ----

/// A cursor over one frame; every read is bounds-checked.
pub(super) struct Reader<'a> {
    pub(super) buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ProtoError> {
        if self.buf.len() < n {
            return Err(ProtoError::Truncated {
                what,
                need: n,
                have: self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(super) fn array<const N: usize>(
        &mut self,
        what: &'static str,
    ) -> Result<[u8; N], ProtoError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    pub(super) fn u8(&mut self, what: &'static str) -> Result<u8, ProtoError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(super) fn u16(&mut self, what: &'static str) -> Result<u16, ProtoError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }

    pub(super) fn u32(&mut self, what: &'static str) -> Result<u32, ProtoError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    pub(super) fn u64(&mut self, what: &'static str) -> Result<u64, ProtoError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    pub(super) fn string(&mut self, what: &'static str) -> Result<String, ProtoError> {
        let n = self.u16(what)? as usize;
        let bytes = self.take(n, what)?;
        std::str::from_utf8(bytes)
            .map(str::to_string)
            .map_err(|_| ProtoError::BadUtf8)
    }

    /// A `u32 count | items` list; the count is checked against the remaining bytes (each item
    /// at least `min_item` bytes) before anything is allocated.
    pub(super) fn list<T>(
        &mut self,
        what: &'static str,
        min_item: usize,
        get: fn(&mut Reader<'a>) -> Result<T, ProtoError>,
    ) -> Result<Vec<T>, ProtoError> {
        let count = self.u32(what)?;
        let remaining = self.buf.len();
        if (count as usize).saturating_mul(min_item) > remaining {
            return Err(ProtoError::CountTooLarge {
                what,
                count,
                remaining,
            });
        }
        let mut v = Vec::with_capacity(count as usize);
        for _ in 0..count {
            v.push(get(self)?);
        }
        Ok(v)
    }
}

pub(super) fn get_addr(r: &mut Reader<'_>) -> Result<SocketAddr, ProtoError> {
    let ip = match r.u8("address family")? {
        4 => IpAddr::V4(Ipv4Addr::from(r.array::<4>("IPv4 address")?)),
        6 => IpAddr::V6(Ipv6Addr::from(r.array::<16>("IPv6 address")?)),
        other => return Err(ProtoError::BadFamily(other)),
    };
    let port = r.u16("port")?;
    Ok(SocketAddr::new(ip, port))
}

pub(super) fn get_tuple(r: &mut Reader<'_>) -> Result<FourTuple, ProtoError> {
    let client = get_addr(r)?;
    let server = get_addr(r)?;
    if client.is_ipv4() != server.is_ipv4() {
        return Err(ProtoError::MixedFamilies);
    }
    Ok(FourTuple::new(client, server))
}

pub(super) fn get_record(r: &mut Reader<'_>) -> Result<Record, ProtoError> {
    let orig_len = r.u32("record orig_len")?;
    let hlen = r.u16("record headers length")? as usize;
    let headers = r.take(hlen, "record headers")?.to_vec();
    let plen = r.u32("record payload length")? as usize;
    let payload = r.take(plen, "record payload")?.to_vec();
    Ok(Record {
        orig_len,
        headers,
        payload,
        stamp: 0,
    })
}
