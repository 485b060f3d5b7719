//! Writing classic pcap files: for tests that need a capture with known content, and for tools
//! that save packets.
//!
//! Owns: the little-endian pcap file header and record framing, with microsecond or nanosecond
//! timestamps. Invariant: every record written is whole (header and data in one `write_all`), and
//! a frame longer than the snap length is refused rather than written cut, so whatever
//! [`PcapWriter`] produced, [`super::Reader`] reads back the same frames and timestamps (to the
//! timestamp resolution).

use std::io::{self, Write};
use std::time::Duration;

use super::link::LinkType;

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
