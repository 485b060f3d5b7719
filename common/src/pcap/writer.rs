//! Writing capture files: classic pcap ([`PcapWriter`]) for tests that need a capture with known
//! content and for tools that save packets, and pcapng ([`pcapng_header`], [`pcapng_packet`])
//! for the copier's `--record` archive.
//!
//! Owns: the little-endian pcap file header and record framing, with microsecond or nanosecond
//! timestamps; the little-endian pcapng section header, one interface description and enhanced
//! packet blocks (microsecond timestamps). Invariant: every record written is whole (header and
//! data in one `write_all`), and a frame longer than the snap length is refused rather than
//! written cut, so whatever [`PcapWriter`] produced, [`super::Reader`] reads back the same frames
//! and timestamps (to the timestamp resolution); the same holds of a pcapng header followed by
//! packets.

use std::io::{self, Write};
use std::time::Duration;

use super::link::LinkType;
use super::reader::pcapng::{PCAPNG_BOM, PCAPNG_EPB, PCAPNG_IDB, PCAPNG_SHB};

/// The snap length written in the file header: larger than any frame we write.
pub const SNAPLEN: u32 = 262_144;

/// Writes a classic (little-endian) pcap stream.
#[derive(Debug)]
pub struct PcapWriter<W> {
    out: W,
    nanos: bool,
}

impl<W: Write> PcapWriter<W> {
    /// Write the file header for frames of `link`, timestamps in microseconds or (`nanos`)
    /// nanoseconds.
    pub fn new(mut out: W, link: LinkType, nanos: bool) -> io::Result<PcapWriter<W>> {
        let magic: u32 = if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&magic.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes()); // thiszone
        h.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
        h.extend_from_slice(&SNAPLEN.to_le_bytes());
        h.extend_from_slice(&link.number().to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out, nanos })
    }

    /// Write one whole frame captured at `ts` (since the Unix epoch; the seconds must fit 32
    /// bits). Fails with `InvalidInput` for a frame longer than [`SNAPLEN`] or a time past 2106.
    pub fn write(&mut self, ts: Duration, frame: &[u8]) -> io::Result<()> {
        let invalid = |m: &str| io::Error::new(io::ErrorKind::InvalidInput, m.to_string());
        let len = u32::try_from(frame.len())
            .ok()
            .filter(|&n| n <= SNAPLEN)
            .ok_or_else(|| invalid("frame longer than the snap length"))?;
        let secs = u32::try_from(ts.as_secs()).map_err(|_| invalid("timestamp past 2106"))?;
        let frac = if self.nanos {
            ts.subsec_nanos()
        } else {
            ts.subsec_micros()
        };
        let mut rec = Vec::with_capacity(16 + frame.len());
        rec.extend_from_slice(&secs.to_le_bytes());
        rec.extend_from_slice(&frac.to_le_bytes());
        rec.extend_from_slice(&len.to_le_bytes());
        rec.extend_from_slice(&len.to_le_bytes());
        rec.extend_from_slice(frame);
        self.out.write_all(&rec)
    }

    /// Flush and give back the underlying writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// One pcapng block of type `kind` around `body` (padded to 32 bits), in one `write_all`.
fn block(out: &mut impl Write, kind: u32, body: &[u8]) -> io::Result<u64> {
    let pad = (4 - body.len() % 4) % 4;
    let total = (12 + body.len() + pad) as u32;
    let mut b = Vec::with_capacity(total as usize);
    b.extend_from_slice(&kind.to_le_bytes());
    b.extend_from_slice(&total.to_le_bytes());
    b.extend_from_slice(body);
    b.extend_from_slice(&[0u8; 3][..pad]);
    b.extend_from_slice(&total.to_le_bytes());
    out.write_all(&b)?;
    Ok(u64::from(total))
}

/// The start of a little-endian pcapng file: a section header (version 1.0, section length
/// unknown) and one interface description for frames of `link` (no snap length limit, the default
/// microsecond timestamps), which the blocks of [`pcapng_packet`] refer to. Returns the bytes
/// written.
pub fn pcapng_header(out: &mut impl Write, link: LinkType) -> io::Result<u64> {
    let link = u16::try_from(link.number())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "link type past 65535"))?;
    let mut shb = Vec::with_capacity(16);
    shb.extend_from_slice(&PCAPNG_BOM.to_le_bytes());
    shb.extend_from_slice(&1u16.to_le_bytes());
    shb.extend_from_slice(&0u16.to_le_bytes());
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    let mut n = block(out, PCAPNG_SHB, &shb)?;
    let mut idb = Vec::with_capacity(8);
    idb.extend_from_slice(&link.to_le_bytes());
    idb.extend_from_slice(&0u16.to_le_bytes());
    idb.extend_from_slice(&0u32.to_le_bytes());
    n += block(out, PCAPNG_IDB, &idb)?;
    Ok(n)
}

/// One enhanced packet block of the interface of [`pcapng_header`]: `frame` whole, captured at
/// `ts` since the Unix epoch (to the microsecond). Returns the bytes written.
pub fn pcapng_packet(out: &mut impl Write, ts: Duration, frame: &[u8]) -> io::Result<u64> {
    let us = ts.as_micros() as u64;
    let len = u32::try_from(frame.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame longer than 4 GiB"))?;
    let mut epb = Vec::with_capacity(20 + frame.len());
    epb.extend_from_slice(&0u32.to_le_bytes());
    epb.extend_from_slice(&((us >> 32) as u32).to_le_bytes());
    epb.extend_from_slice(&(us as u32).to_le_bytes());
    epb.extend_from_slice(&len.to_le_bytes());
    epb.extend_from_slice(&len.to_le_bytes());
    epb.extend_from_slice(frame);
    block(out, PCAPNG_EPB, &epb)
}
