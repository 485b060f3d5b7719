//! pcapng blocks: sections (either byte order), interfaces with their timestamp resolution and
//! offset, the enhanced, simple and obsolete packet blocks, and how a resynchronisation
//! recognises a plausible block (known type, sane length, matching trailer).

use std::io::{self, Read};
use std::time::Duration;

use super::{u16_at, u32_at, Format, Reader, Skip, SkipKind, Step, MAX_RECORD};
use crate::pcap::link::LinkType;

/// Section header block type.
pub(crate) const PCAPNG_SHB: u32 = 0x0a0d_0d0a;
/// The byte-order magic of a section header.
pub(crate) const PCAPNG_BOM: u32 = 0x1a2b_3c4d;
/// Interface description block type.
pub(crate) const PCAPNG_IDB: u32 = 1;
const PCAPNG_PB: u32 = 2;
const PCAPNG_SPB: u32 = 3;
/// Enhanced packet block type.
pub(crate) const PCAPNG_EPB: u32 = 6;
/// Block types a resynchronisation may land on.
const PCAPNG_KNOWN: [u32; 8] = [PCAPNG_SHB, 1, 2, 3, 4, 5, 6, 10];

/// Timestamp units of a pcapng interface (`if_tsresol`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TsRes {
    /// 10^-n seconds.
    Dec(u32),
    /// 2^-n seconds.
    Bin(u32),
}

impl TsRes {
    fn of_option(v: u8) -> Option<TsRes> {
        let n = u32::from(v & 0x7f);
        match v & 0x80 {
            0 if n <= 19 => Some(TsRes::Dec(n)),
            0 => None,
            _ if n <= 63 => Some(TsRes::Bin(n)),
            _ => None,
        }
    }

    fn to_duration(self, ticks: u64) -> Duration {
        let per_sec: u128 = match self {
            TsRes::Dec(n) => 10u128.pow(n),
            TsRes::Bin(n) => 1u128 << n,
        };
        let t = u128::from(ticks);
        let secs = u64::try_from(t / per_sec).unwrap_or(u64::MAX);
        let nanos = ((t % per_sec) * 1_000_000_000 / per_sec) as u32;
        Duration::new(secs, nanos)
    }
}

/// A pcapng interface (IDB).
#[derive(Clone, Copy, Debug)]
pub(super) struct Iface {
    /// The `LINKTYPE_*` number.
    number: u32,
    link: Option<LinkType>,
    snaplen: u32,
    res: TsRes,
    /// `if_tsoffset`: seconds added to every timestamp.
    offset: i64,
}

impl<R: Read> Reader<R> {
    pub(super) fn step_pcapng(&mut self) -> io::Result<Step> {
        let Format::Pcapng { be, .. } = self.fmt else {
            return Ok(Step::End);
        };
        let (index, offset) = match self.start_record(12)? {
            Ok(at) => at,
            Err(step) => return Ok(step),
        };
        let b = self.w.bytes();
        let ty = u32_at(b, 0, be).unwrap_or(0);
        let mut be = be;
        if ty == PCAPNG_SHB {
            match section_order(b) {
                Some(order) => be = order,
                None => {
                    return self.resync(
                        index,
                        offset,
                        "section header with an unknown byte-order magic".into(),
                    )
                }
            }
        }
        let len = u32_at(b, 4, be).unwrap_or(0) as usize;
        let min = match ty {
            PCAPNG_SHB => 28,
            PCAPNG_IDB => 20,
            PCAPNG_SPB => 16,
            PCAPNG_EPB | PCAPNG_PB => 32,
            _ => 12,
        };
        if len < min || len & 3 != 0 || len > MAX_RECORD {
            return self.resync(
                index,
                offset,
                format!("block length {len} is impossible for a block of type {ty:#x}"),
            );
        }
        let have = self.w.fill(len)?;
        if have < len {
            return self.past_end(index, offset, len, have);
        }
        let b = &self.w.bytes()[..len];
        let trailer = u32_at(b, len - 4, be).unwrap_or(0) as usize;
        if trailer != len {
            return self.resync(
                index,
                offset,
                format!("block length {len} does not match its trailing copy {trailer}"),
            );
        }
        let start = self.w.pos;
        self.w.consume(len);
        let body = &self.w.buf[start + 8..start + len - 4];
        let Format::Pcapng {
            be: section_be,
            ifaces,
        } = &mut self.fmt
        else {
            return Ok(Step::End);
        };
        let skip = |why: String| {
            Step::Skip(Skip {
                unit: "block",
                index,
                offset,
                kind: SkipKind::Malformed(why),
            })
        };
        match ty {
            PCAPNG_SHB => {
                *section_be = be;
                ifaces.clear();
                let major = u16_at(body, 4, be).unwrap_or(0);
                if major != 1 {
                    return Ok(skip(format!(
                        "section of pcapng version {major}.x; read as 1.x"
                    )));
                }
                Ok(Step::Nothing)
            }
            PCAPNG_IDB => {
                let number = u32::from(u16_at(body, 0, be).unwrap_or(0));
                let mut iface = Iface {
                    number,
                    link: LinkType::from_number(number),
                    snaplen: u32_at(body, 4, be).unwrap_or(0),
                    res: TsRes::Dec(6),
                    offset: 0,
                };
                let bad = parse_idb_options(body.get(8..).unwrap_or(&[]), be, &mut iface);
                ifaces.push(iface);
                match bad {
                    Some(why) => Ok(skip(format!("interface {}: {why}", ifaces.len() - 1))),
                    None => Ok(Step::Nothing),
                }
            }
            PCAPNG_EPB | PCAPNG_PB => {
                let (id, hi, lo, caplen, wire_len) = if ty == PCAPNG_EPB {
                    (
                        u32_at(body, 0, be),
                        u32_at(body, 4, be),
                        u32_at(body, 8, be),
                        u32_at(body, 12, be),
                        u32_at(body, 16, be),
                    )
                } else {
                    (
                        u16_at(body, 0, be).map(u32::from),
                        u32_at(body, 4, be),
                        u32_at(body, 8, be),
                        u32_at(body, 12, be),
                        u32_at(body, 16, be),
                    )
                };
                let (id, hi, lo, caplen, wire_len) = (
                    id.unwrap_or(0),
                    hi.unwrap_or(0),
                    lo.unwrap_or(0),
                    caplen.unwrap_or(0),
                    wire_len.unwrap_or(0),
                );
                let Some(iface) = ifaces.get(id as usize).copied() else {
                    return Ok(skip(format!(
                        "packet of interface {id}, but the section describes {}",
                        ifaces.len()
                    )));
                };
                if caplen as usize > body.len() - 20 {
                    return Ok(skip(format!(
                        "captured length {caplen} is longer than the block's {} bytes of data",
                        body.len() - 20
                    )));
                }
                let ticks = (u64::from(hi) << 32) | u64::from(lo);
                let ts = apply_offset(iface.res.to_duration(ticks), iface.offset);
                self.last_ts = Some(ts);
                Ok(Step::Frame {
                    start: start + 28,
                    len: caplen as usize,
                    ts,
                    link: iface.link.ok_or(iface.number),
                    wire_len: u64::from(wire_len),
                    index,
                    offset,
                })
            }
            PCAPNG_SPB => {
                let Some(iface) = ifaces.first().copied() else {
                    return Ok(skip(
                        "simple packet block, but the section describes no interface".into(),
                    ));
                };
                let wire_len = u32_at(body, 0, be).unwrap_or(0);
                let mut caplen = (body.len() - 4).min(wire_len as usize);
                if iface.snaplen > 0 {
                    caplen = caplen.min(iface.snaplen as usize);
                }
                Ok(Step::Frame {
                    start: start + 12,
                    len: caplen,
                    // No timestamp of its own: it follows the previous packet at once.
                    ts: self.last_ts.unwrap_or_default(),
                    link: iface.link.ok_or(iface.number),
                    wire_len: u64::from(wire_len),
                    index,
                    offset,
                })
            }
            _ => Ok(Step::Nothing),
        }
    }

    /// Is there a plausible pcapng block `at` bytes ahead (known type, sane length, matching
    /// trailer; the trailer is evidence enough, so there is no `strict`)? `None` when the input
    /// ends before a block header fits.
    pub(super) fn pcapng_candidate(&mut self, at: usize, be: bool) -> io::Result<Option<bool>> {
        if self.w.fill(at + 12)? < at + 12 {
            return Ok(None);
        }
        let b = &self.w.bytes()[at..];
        let mut be = be;
        let ty = u32_at(b, 0, be).unwrap_or(0);
        if ty == PCAPNG_SHB {
            match section_order(b) {
                Some(order) => be = order,
                None => return Ok(Some(false)),
            }
        }
        let len = u32_at(b, 4, be).unwrap_or(0) as usize;
        if !PCAPNG_KNOWN.contains(&ty) || len < 12 || len & 3 != 0 || len > MAX_RECORD {
            return Ok(Some(false));
        }
        if self.w.fill(at + len)? < at + len {
            return Ok(Some(false));
        }
        let b = &self.w.bytes()[at..at + len];
        Ok(Some(u32_at(b, len - 4, be) == Some(len as u32)))
    }
}

/// Byte order of a section header block (from its byte-order magic).
fn section_order(b: &[u8]) -> Option<bool> {
    match u32_at(b, 8, false)? {
        PCAPNG_BOM => Some(false),
        m if m.swap_bytes() == PCAPNG_BOM => Some(true),
        _ => None,
    }
}

/// Read `if_tsresol` and `if_tsoffset`; returns what was wrong, if anything (the options read
/// before it are kept).
fn parse_idb_options(mut opts: &[u8], be: bool, iface: &mut Iface) -> Option<String> {
    while opts.len() >= 4 {
        let code = u16_at(opts, 0, be).unwrap_or(0);
        let len = usize::from(u16_at(opts, 2, be).unwrap_or(0));
        if code == 0 {
            return None;
        }
        let padded = (len + 3) & !3;
        let Some(value) = opts.get(4..4 + len) else {
            return Some(format!("option {code} of {len} bytes runs past the block"));
        };
        match (code, len) {
            (9, 1) => match TsRes::of_option(value[0]) {
                Some(r) => iface.res = r,
                None => {
                    return Some(format!(
                        "timestamp resolution {:#x} is out of range",
                        value[0]
                    ))
                }
            },
            (14, 8) => {
                let mut a = [0u8; 8];
                a.copy_from_slice(value);
                iface.offset = if be {
                    i64::from_be_bytes(a)
                } else {
                    i64::from_le_bytes(a)
                };
            }
            (9 | 14, _) => return Some(format!("option {code} has a length of {len}")),
            _ => {}
        }
        opts = opts.get(4 + padded..).unwrap_or(&[]);
    }
    None
}

fn apply_offset(ts: Duration, secs: i64) -> Duration {
    if secs >= 0 {
        ts.saturating_add(Duration::from_secs(secs.unsigned_abs()))
    } else {
        ts.saturating_sub(Duration::from_secs(secs.unsigned_abs()))
    }
}
