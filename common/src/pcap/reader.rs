//! Reading pcap and pcapng capture files record by record.
//!
//! Owns: the file formats (classic pcap in both byte orders with micro- or nanosecond
//! timestamps; pcapng sections of either byte order with their interfaces, timestamp
//! resolutions and offsets, and the enhanced, simple and obsolete packet blocks), a read window
//! over any [`Read`], and the recovery from bad input. [`Reader::next_event`] yields each IP packet
//! with its capture timestamp, or a [`Skip`] that names the record (its index and file offset)
//! and says why it was not delivered.
//!
//! Split by format: `reader/pcap.rs` reads classic pcap headers and records, `reader/pcapng.rs`
//! pcapng blocks; each says how a resynchronisation recognises its records. This file keeps what
//! both share: the window, the events and counters, the recovery (scan, garbage, truncation) and
//! the judgement of a frame's IP packet.
//!
//! Invariants:
//! - Nothing here panics on any input; bad input becomes a [`Skip`] and the reading goes on.
//! - A record whose own content is bad (a short link header, a packet cut by the snap length,
//!   an unknown interface) is skipped by its framing: the next record is read where it should
//!   start. A record whose *framing* is impossible (a length no writer produces, a pcapng
//!   trailer that does not match) means the file is garbled there: the reader scans forward for
//!   the next place where two plausible records follow each other (or one ends the file) and
//!   reports how many bytes it skipped.
//! - A file that ends inside a record (a capture cut mid-write, as a killed tcpdump leaves it)
//!   yields every whole record, then one [`SkipKind::Truncated`] for the partial one, then the
//!   end.
//! - The window never holds more than about two records beyond the read size, so memory stays
//!   bounded whatever the file's size; no record longer than [`MAX_RECORD`] is accepted.

use std::io::{self, Read};
use std::time::Duration;

use super::link::{ip_payload, LinkLayerError, LinkType, SUPPORTED};
use crate::wire::declared_ip_len;

mod pcap;
pub(super) mod pcapng;

use pcap::PcapFormat;
use pcapng::Iface;

/// Largest record (pcap caplen, pcapng block) accepted: larger ones are taken as garbage.
pub const MAX_RECORD: usize = 16 << 20;
/// How much the window reads at a time.
const READ_CHUNK: usize = 256 << 10;
/// Why a file cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Reading the file failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The file holds no byte.
    #[error("the file is empty")]
    Empty,
    /// The first bytes are no pcap or pcapng magic number.
    #[error("not a pcap or pcapng file (it starts with {0})")]
    NotCapture(String),
    /// A pcap or pcapng file header that cannot be used.
    #[error("{0}")]
    BadHeader(String),
    /// A pcap file of a link type the reader does not know.
    #[error("link type {0} is not supported (supported: {SUPPORTED})")]
    UnsupportedLink(u32),
}

/// One IP packet of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Capture time (since the Unix epoch, as the file says).
    pub ts: Duration,
    /// The IP packet (link header stripped, link padding cut).
    pub data: &'a [u8],
    /// Position of its record (see [`Skip::index`]).
    pub index: u64,
    /// File offset of its record.
    pub offset: u64,
}

/// A record that yields no packet, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    /// "record" (pcap) or "block" (pcapng).
    pub unit: &'static str,
    /// 1-based position of the record in the file (pcap: records, the same numbers as
    /// Wireshark's frames; pcapng: blocks of every type).
    pub index: u64,
    /// File offset of the record's first byte.
    pub offset: u64,
    /// What was wrong.
    pub kind: SkipKind,
}

/// What was wrong with a skipped record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipKind {
    /// The file ends inside this record: `have` of its `need` bytes are there.
    Truncated {
        /// Bytes the record needs (its header and data).
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// The record's framing is impossible (`why`); `skipped` bytes were passed over, up to the
    /// next plausible record or to the end of the file (`resumed` false).
    Garbage {
        /// What was impossible.
        why: String,
        /// Bytes skipped from `offset`.
        skipped: u64,
        /// Whether a plausible record was found after them.
        resumed: bool,
    },
    /// The record is framed correctly but its content is inconsistent.
    Malformed(String),
    /// The frame carries no IP packet, or its link header is bad.
    Link(LinkLayerError),
    /// The capture kept only `have` bytes of an IP packet of `ip_len` (snap length too short).
    Snapped {
        /// The IP packet's length by its header.
        ip_len: usize,
        /// Bytes captured.
        have: usize,
    },
    /// A pcapng interface of a link type the reader does not know.
    UnsupportedLink(u32),
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} at offset {}: ",
            self.unit, self.index, self.offset
        )?;
        match &self.kind {
            SkipKind::Truncated { need, have } => write!(
                f,
                "the file ends inside it ({have} of its {need} bytes present; a capture cut while being written?)"
            ),
            SkipKind::Garbage { why, skipped, resumed: true } => {
                write!(f, "{why}; skipped {skipped} bytes of garbage to the next plausible {}", self.unit)
            }
            SkipKind::Garbage { why, skipped, resumed: false } => {
                write!(f, "{why}; no plausible {} in the remaining {skipped} bytes", self.unit)
            }
            SkipKind::Malformed(why) => write!(f, "malformed: {why}"),
            SkipKind::Link(e) => write!(f, "{e}"),
            SkipKind::Snapped { ip_len, have } => write!(
                f,
                "only {have} bytes of a {ip_len}-byte IP packet were captured (snap length too short; capture with -s 0)"
            ),
            SkipKind::UnsupportedLink(n) => write!(f, "link type {n} is not supported (supported: {SUPPORTED})"),
        }
    }
}

/// What [`Reader::next_event`] yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// An IP packet.
    Packet(Packet<'a>),
    /// A record that yields none.
    Skip(Skip),
}

/// Counters of one pass over a file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Packet records seen (pcap records; pcapng enhanced, simple and obsolete packet blocks).
    pub records: u64,
    /// IP packets delivered.
    pub packets: u64,
    /// Records carrying something else than IP (ARP, ...).
    pub not_ip: u64,
    /// Records cut short by the capture's snap length.
    pub snapped: u64,
    /// Records (or blocks) framed correctly whose content is bad.
    pub malformed: u64,
    /// Partial records at the end of the file (0 or 1).
    pub truncated: u64,
    /// Places where the framing was lost.
    pub garbled: u64,
    /// Bytes skipped there.
    pub garbage_bytes: u64,
}

/// A read window over a byte source: holds the bytes from the current position on.
#[derive(Debug)]
struct Window<R> {
    src: R,
    buf: Vec<u8>,
    pos: usize,
    /// File offset of `buf[0]`.
    base: u64,
    eof: bool,
}

impl<R: Read> Window<R> {
    fn avail(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Try to make `n` bytes available; fewer only at the end of the input. Returns how many are.
    fn fill(&mut self, n: usize) -> io::Result<usize> {
        if self.avail() >= n || self.eof {
            return Ok(self.avail());
        }
        // Move the partial record to the front, once per read.
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.base += self.pos as u64;
            self.pos = 0;
        }
        while self.avail() < n && !self.eof {
            let old = self.buf.len();
            let want = (n - self.avail()).max(READ_CHUNK);
            self.buf.resize(old + want, 0);
            match self.src.read(&mut self.buf[old..]) {
                Ok(0) => {
                    self.buf.truncate(old);
                    self.eof = true;
                }
                Ok(k) => self.buf.truncate(old + k),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => self.buf.truncate(old),
                Err(e) => {
                    self.buf.truncate(old);
                    return Err(e);
                }
            }
        }
        Ok(self.avail())
    }

    fn consume(&mut self, n: usize) {
        self.pos += n.min(self.avail());
    }
}

fn u16_at(b: &[u8], off: usize, be: bool) -> Option<u16> {
    let s = b.get(off..off + 2)?;
    let a = [s[0], s[1]];
    Some(if be {
        u16::from_be_bytes(a)
    } else {
        u16::from_le_bytes(a)
    })
}

fn u32_at(b: &[u8], off: usize, be: bool) -> Option<u32> {
    let s = b.get(off..off + 4)?;
    let a = [s[0], s[1], s[2], s[3]];
    Some(if be {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    })
}

#[derive(Debug)]
enum Format {
    Pcap {
        be: bool,
        nanos: bool,
        link: LinkType,
        limit: u32,
    },
    Pcapng {
        be: bool,
        ifaces: Vec<Iface>,
    },
}

/// What one step of the reader found.
enum Step {
    End,
    Nothing,
    Skip(Skip),
    Frame {
        start: usize,
        len: usize,
        ts: Duration,
        link: Result<LinkType, u32>,
        wire_len: u64,
        index: u64,
        offset: u64,
    },
}

/// Reads a pcap or pcapng stream; see the module documentation.
#[derive(Debug)]
pub struct Reader<R> {
    w: Window<R>,
    fmt: Format,
    /// Records (or blocks) started.
    index: u64,
    /// Timestamp of the last packet record (pcapng simple packet blocks have none of their own).
    last_ts: Option<Duration>,
    stats: ReadStats,
    done: bool,
}

impl<R: Read> Reader<R> {
    /// Read the file header and get ready for the records.
    pub fn new(src: R) -> Result<Reader<R>, ReadError> {
        let mut w = Window {
            src,
            buf: Vec::new(),
            pos: 0,
            base: 0,
            eof: false,
        };
        let have = w.fill(24)?;
        if have == 0 {
            return Err(ReadError::Empty);
        }
        let head = w.bytes();
        let magic: [u8; 4] = match head.get(..4) {
            Some(m) => [m[0], m[1], m[2], m[3]],
            None => return Err(ReadError::NotCapture(hex(head))),
        };
        let (be, nanos) = match magic {
            [0xd4, 0xc3, 0xb2, 0xa1] => (false, false),
            [0xa1, 0xb2, 0xc3, 0xd4] => (true, false),
            [0x4d, 0x3c, 0xb2, 0xa1] => (false, true),
            [0xa1, 0xb2, 0x3c, 0x4d] => (true, true),
            [0x0a, 0x0d, 0x0d, 0x0a] => {
                let be = match head.get(8..12) {
                    Some([0x1a, 0x2b, 0x3c, 0x4d]) => true,
                    Some([0x4d, 0x3c, 0x2b, 0x1a]) => false,
                    Some(_) => {
                        return Err(ReadError::BadHeader(
                            "pcapng section header with an unknown byte-order magic".into(),
                        ))
                    }
                    None => {
                        return Err(ReadError::BadHeader(format!(
                            "pcapng section header cut short ({have} bytes)"
                        )))
                    }
                };
                // The section header is read as the first block.
                return Ok(Reader::with(
                    w,
                    Format::Pcapng {
                        be,
                        ifaces: Vec::new(),
                    },
                ));
            }
            [0x34, 0xcd, 0xb2, 0xa1] | [0xa1, 0xb2, 0xcd, 0x34] => {
                return Err(ReadError::BadHeader(
                    "this is the \"modified\" (Kuznetsov) pcap format, which is not supported; \
                     convert it with `editcap -F pcap`"
                        .into(),
                ))
            }
            _ => return Err(ReadError::NotCapture(hex(&head[..head.len().min(8)]))),
        };
        let (link, limit) = pcap::file_header(head, have, be)?;
        w.consume(24);
        Ok(Reader::with(
            w,
            Format::Pcap {
                be,
                nanos,
                link,
                limit,
            },
        ))
    }

    fn with(w: Window<R>, fmt: Format) -> Reader<R> {
        Reader {
            w,
            fmt,
            index: 0,
            last_ts: None,
            stats: ReadStats::default(),
            done: false,
        }
    }

    /// "pcap" or "pcapng".
    #[must_use]
    pub fn format_name(&self) -> &'static str {
        match self.fmt {
            Format::Pcap { .. } => "pcap",
            Format::Pcapng { .. } => "pcapng",
        }
    }

    /// File offset of the next record.
    #[must_use]
    pub fn offset(&self) -> u64 {
        self.w.offset()
    }

    /// The counters so far.
    #[must_use]
    pub fn stats(&self) -> &ReadStats {
        &self.stats
    }

    fn unit(&self) -> &'static str {
        match self.fmt {
            Format::Pcap { .. } => "record",
            Format::Pcapng { .. } => "block",
        }
    }

    /// The next packet or skipped record; `Ok(None)` at the end of the file. An `Err` is an I/O
    /// error of the source; bad content never is.
    pub fn next_event(&mut self) -> io::Result<Option<Event<'_>>> {
        loop {
            if self.done {
                return Ok(None);
            }
            let step = match self.fmt {
                Format::Pcap { .. } => self.step_pcap()?,
                Format::Pcapng { .. } => self.step_pcapng()?,
            };
            match step {
                Step::End => {
                    self.done = true;
                    return Ok(None);
                }
                Step::Nothing => {}
                Step::Skip(s) => {
                    self.count(&s.kind);
                    return Ok(Some(Event::Skip(s)));
                }
                Step::Frame {
                    start,
                    len,
                    ts,
                    link,
                    wire_len,
                    index,
                    offset,
                } => {
                    self.stats.records += 1;
                    let frame = &self.w.buf[start..start + len];
                    let judged = match link {
                        Err(n) => Err(SkipKind::UnsupportedLink(n)),
                        Ok(link) => judge(link, frame, wire_len),
                    };
                    match judged {
                        Ok(range) => {
                            self.stats.packets += 1;
                            let data = &self.w.buf[start + range.start..start + range.end];
                            return Ok(Some(Event::Packet(Packet {
                                ts,
                                data,
                                index,
                                offset,
                            })));
                        }
                        Err(kind) => {
                            let s = Skip {
                                unit: self.unit(),
                                index,
                                offset,
                                kind,
                            };
                            self.count(&s.kind);
                            return Ok(Some(Event::Skip(s)));
                        }
                    }
                }
            }
        }
    }

    fn count(&mut self, kind: &SkipKind) {
        let st = &mut self.stats;
        match kind {
            SkipKind::Truncated { .. } => st.truncated += 1,
            SkipKind::Garbage { skipped, .. } => {
                st.garbled += 1;
                st.garbage_bytes += skipped;
            }
            SkipKind::Link(LinkLayerError::NotIp(_)) => st.not_ip += 1,
            SkipKind::Snapped { .. } => st.snapped += 1,
            SkipKind::Malformed(_) | SkipKind::Link(_) | SkipKind::UnsupportedLink(_) => {
                st.malformed += 1
            }
        }
    }

    /// Starts the next record, whose fixed header is `header` bytes long: its index and file
    /// offset, or the step to return instead (the end of the file, or a truncated header).
    fn start_record(&mut self, header: usize) -> io::Result<Result<(u64, u64), Step>> {
        let offset = self.w.offset();
        let have = self.w.fill(header)?;
        if have == 0 {
            return Ok(Err(Step::End));
        }
        self.index += 1;
        let index = self.index;
        if have < header {
            return Ok(Err(self.truncated(index, offset, header, have)));
        }
        Ok(Ok((index, offset)))
    }

    /// The file ends inside the record at the current position.
    fn truncated(&mut self, index: u64, offset: u64, need: usize, have: usize) -> Step {
        self.w.consume(have);
        self.done = true;
        Step::Skip(Skip {
            unit: self.unit(),
            index,
            offset,
            kind: SkipKind::Truncated {
                need: need as u64,
                have: have as u64,
            },
        })
    }

    /// The record at `offset` has impossible framing: scan forward for the next plausible one.
    fn resync(&mut self, index: u64, offset: u64, why: String) -> io::Result<Step> {
        let (skip, resumed) = match self.scan(false)? {
            Some(skip) => (skip, true),
            None => {
                self.done = true;
                (self.w.avail(), false)
            }
        };
        Ok(self.garbage(index, offset, why, skip, resumed))
    }

    /// Skips `skip` bytes of garbage found at the record `index` (at `offset`).
    fn garbage(
        &mut self,
        index: u64,
        offset: u64,
        why: String,
        skip: usize,
        resumed: bool,
    ) -> Step {
        self.w.consume(skip);
        Step::Skip(Skip {
            unit: self.unit(),
            index,
            offset,
            kind: SkipKind::Garbage {
                why,
                skipped: skip as u64,
                resumed,
            },
        })
    }

    /// The record at the current position says it is `need` bytes long but the file ends after
    /// `have`: either the file was cut inside it, or its length is damaged and more records
    /// follow. A plausible record further on tells the second case.
    fn past_end(&mut self, index: u64, offset: u64, need: usize, have: usize) -> io::Result<Step> {
        match self.scan(true)? {
            Some(skip) => {
                let why = format!("its length ({need} bytes) runs past the end of the file");
                Ok(self.garbage(index, offset, why, skip, true))
            }
            None => Ok(self.truncated(index, offset, need, have)),
        }
    }

    /// How far ahead of the current position the next plausible record starts (`None`: nowhere
    /// before the end of the file). `strict`: a pcap record must be followed by another (not
    /// just by the end of the file). Consumes nothing.
    fn scan(&mut self, strict: bool) -> io::Result<Option<usize>> {
        let mut skip = 1usize;
        loop {
            let found = match self.fmt {
                Format::Pcap {
                    be,
                    nanos,
                    link,
                    limit,
                } => self.pcap_candidate(
                    skip,
                    strict,
                    PcapFormat {
                        be,
                        nanos,
                        link,
                        limit,
                    },
                )?,
                Format::Pcapng { be, .. } => self.pcapng_candidate(skip, be)?,
            };
            match found {
                Some(true) => return Ok(Some(skip)),
                Some(false) => skip += 1,
                None => return Ok(None),
            }
        }
    }
}

/// Where the IP packet lies in `frame` (a range of it), or why the frame yields none.
fn judge(link: LinkType, frame: &[u8], wire_len: u64) -> Result<std::ops::Range<usize>, SkipKind> {
    let ip = ip_payload(link, frame).map_err(SkipKind::Link)?;
    if let Some(ip_len) = declared_ip_len(ip) {
        if ip_len > ip.len() {
            return Err(if (frame.len() as u64) < wire_len {
                SkipKind::Snapped {
                    ip_len,
                    have: ip.len(),
                }
            } else {
                SkipKind::Malformed(format!(
                    "its IP header says {ip_len} bytes but the record holds {}",
                    ip.len()
                ))
            });
        }
    }
    // `ip` is a sub-slice of `frame`: its position is the distance between their starts.
    let at = ip.as_ptr() as usize - frame.as_ptr() as usize;
    Ok(at..at + ip.len())
}

fn hex(b: &[u8]) -> String {
    if b.is_empty() {
        return "nothing".into();
    }
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}
