//! Classic pcap records: the file header, the 16-byte record header (micro- or nanosecond
//! timestamps, either byte order), and how a resynchronisation recognises a plausible record
//! (sane lengths, an IP frame, a next record close in time).

use std::io::{self, Read};
use std::time::Duration;

use super::{u16_at, u32_at, Format, ReadError, Reader, Step, MAX_RECORD};
use crate::pcap::link::{ip_payload, LinkLayerError, LinkType};

/// Smallest caplen bound of a pcap file, whatever snap length its header claims (files with a
/// snap length of 0 or 65535 exist that hold larger offloaded packets).
const MIN_PCAP_LIMIT: u32 = 262_144;
/// While resynchronising a pcap file, a candidate record and the one after it must be this
/// close in time.
const RESYNC_WINDOW: Duration = Duration::from_secs(7 * 86400);

/// Checks the 24-byte pcap file header (its magic already read: byte order `be`) and returns
/// the link type and the largest record length this file can hold.
pub(super) fn file_header(
    head: &[u8],
    have: usize,
    be: bool,
) -> Result<(LinkType, u32), ReadError> {
    if have < 24 {
        return Err(ReadError::BadHeader(format!(
            "pcap file header cut short: {have} of its 24 bytes"
        )));
    }
    let major = u16_at(head, 4, be).unwrap_or(0);
    if major != 2 {
        return Err(ReadError::BadHeader(format!(
            "pcap version {major} (only 2.x exists)"
        )));
    }
    let snaplen = u32_at(head, 16, be).unwrap_or(0);
    // The low 16 bits are the link type; the high ones may carry FCS information.
    let number = u32_at(head, 20, be).unwrap_or(0) & 0xffff;
    let link = LinkType::from_number(number).ok_or(ReadError::UnsupportedLink(number))?;
    let limit = snaplen.max(MIN_PCAP_LIMIT).min(MAX_RECORD as u32);
    Ok((link, limit))
}

impl<R: Read> Reader<R> {
    pub(super) fn step_pcap(&mut self) -> io::Result<Step> {
        let Format::Pcap {
            be,
            nanos,
            link,
            limit,
        } = self.fmt
        else {
            return Ok(Step::End);
        };
        let (index, offset) = match self.start_record(16)? {
            Ok(at) => at,
            Err(step) => return Ok(step),
        };
        let h = pcap_header(&self.w.bytes()[..16], be, nanos);
        if let Some(why) = h.implausible(limit) {
            return self.resync(index, offset, why);
        }
        let need = 16 + h.caplen as usize;
        let have = self.w.fill(need)?;
        if have < need {
            return self.past_end(index, offset, need, have);
        }
        let start = self.w.pos + 16;
        self.w.consume(need);
        self.last_ts = Some(h.ts);
        Ok(Step::Frame {
            start,
            len: h.caplen as usize,
            ts: h.ts,
            link: Ok(link),
            wire_len: u64::from(h.wire_len),
            index,
            offset,
        })
    }

    /// Is there a plausible pcap record `at` bytes ahead, followed by another one close to it in
    /// time (or, unless `strict`, by the end of the file)? `None` when the input ends before a
    /// header fits.
    pub(super) fn pcap_candidate(
        &mut self,
        at: usize,
        strict: bool,
        fmt: PcapFormat,
    ) -> io::Result<Option<bool>> {
        let PcapFormat {
            be,
            nanos,
            link,
            limit,
        } = fmt;
        if self.w.fill(at + 16)? < at + 16 {
            return Ok(None);
        }
        let h = pcap_header(&self.w.bytes()[at..at + 16], be, nanos);
        // Every frame worth replaying holds at least an IP header.
        if h.implausible(limit).is_some() || h.caplen < 20 {
            return Ok(Some(false));
        }
        let end = at + 16 + h.caplen as usize;
        let have = self.w.fill(end + 16)?;
        // Its frame must make sense for the link type: IP where the link says IP.
        let frame = &self.w.bytes()[at + 16..end.min(have)];
        if matches!(
            ip_payload(link, frame),
            Err(LinkLayerError::BadVersion(_) | LinkLayerError::Short { .. })
        ) {
            return Ok(Some(false));
        }
        if have < end + 16 {
            // The candidate ends the file (or is cut by its end).
            return Ok(Some(!strict && have >= end));
        }
        let next = pcap_header(&self.w.bytes()[end..end + 16], be, nanos);
        let close = next.ts.max(h.ts) - next.ts.min(h.ts) <= RESYNC_WINDOW;
        Ok(Some(close && next.implausible(limit).is_none()))
    }
}

#[derive(Clone, Copy)]
pub(super) struct PcapFormat {
    pub(super) be: bool,
    pub(super) nanos: bool,
    pub(super) link: LinkType,
    pub(super) limit: u32,
}

struct PcapHeader {
    ts: Duration,
    frac: u32,
    frac_ok: bool,
    caplen: u32,
    wire_len: u32,
}

impl PcapHeader {
    /// Why no writer would produce this record header (`None`: it is plausible).
    fn implausible(&self, limit: u32) -> Option<String> {
        if self.caplen > limit {
            Some(format!(
                "record length {} is larger than any packet of this file (at most {limit})",
                self.caplen
            ))
        } else if self.wire_len == 0 || self.wire_len as usize > MAX_RECORD {
            Some(format!("original length {} is impossible", self.wire_len))
        } else if self.caplen > self.wire_len {
            Some(format!(
                "record length {} is larger than the packet's original length {}",
                self.caplen, self.wire_len
            ))
        } else if !self.frac_ok {
            Some(format!("timestamp fraction {} is out of range", self.frac))
        } else {
            None
        }
    }
}

fn pcap_header(h: &[u8], be: bool, nanos: bool) -> PcapHeader {
    let secs = u32_at(h, 0, be).unwrap_or(0);
    let frac = u32_at(h, 4, be).unwrap_or(0);
    let (frac_ok, nsec) = if nanos {
        (frac < 1_000_000_000, frac)
    } else {
        (frac < 1_000_000, frac.saturating_mul(1000))
    };
    PcapHeader {
        ts: Duration::new(u64::from(secs), nsec.min(999_999_999)),
        frac,
        frac_ok,
        caplen: u32_at(h, 8, be).unwrap_or(0),
        wire_len: u32_at(h, 12, be).unwrap_or(0),
    }
}
