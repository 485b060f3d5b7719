//! Reading pcap and pcapng capture files record by record.
//!
//! Owns: the file formats (classic pcap in both byte orders with micro- or nanosecond
//! timestamps; pcapng sections of either byte order with their interfaces, timestamp
//! resolutions and offsets, and the enhanced, simple and obsolete packet blocks), a read window
//! over any [`Read`], and the recovery from bad input. [`Reader::next_event`] yields each IP packet
//! with its capture timestamp, or a [`Skip`] that names the record (its index and file offset)
//! and says why it was not delivered.
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

use super::link::{ip_payload, LinkError, LinkType, SUPPORTED};
use crate::wire::declared_ip_len;

/// Largest record (pcap caplen, pcapng block) accepted: larger ones are taken as garbage.
pub const MAX_RECORD: usize = 16 << 20;
/// Smallest caplen bound of a pcap file, whatever snap length its header claims (files with a
/// snap length of 0 or 65535 exist that hold larger offloaded packets).
const MIN_PCAP_LIMIT: u32 = 262_144;
/// How much the window reads at a time.
const READ_CHUNK: usize = 256 << 10;
/// While resynchronising a pcap file, a candidate record and the one after it must be this
/// close in time.
const RESYNC_WINDOW: Duration = Duration::from_secs(7 * 86400);

const PCAPNG_SHB: u32 = 0x0a0d_0d0a;
const PCAPNG_BOM: u32 = 0x1a2b_3c4d;
const PCAPNG_IDB: u32 = 1;
const PCAPNG_PB: u32 = 2;
const PCAPNG_SPB: u32 = 3;
const PCAPNG_EPB: u32 = 6;
/// Block types a resynchronisation may land on.
const PCAPNG_KNOWN: [u32; 8] = [PCAPNG_SHB, 1, 2, 3, 4, 5, 6, 10];

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
    Link(LinkError),
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
struct Iface {
    /// The `LINKTYPE_*` number.
    number: u32,
    link: Option<LinkType>,
    snaplen: u32,
    res: TsRes,
    /// `if_tsoffset`: seconds added to every timestamp.
    offset: i64,
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
            SkipKind::Link(LinkError::NotIp(_)) => st.not_ip += 1,
            SkipKind::Snapped { .. } => st.snapped += 1,
            SkipKind::Malformed(_) | SkipKind::Link(_) | SkipKind::UnsupportedLink(_) => {
                st.malformed += 1
            }
        }
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

    fn step_pcap(&mut self) -> io::Result<Step> {
        let Format::Pcap {
            be,
            nanos,
            link,
            limit,
        } = self.fmt
        else {
            return Ok(Step::End);
        };
        let offset = self.w.offset();
        let have = self.w.fill(16)?;
        if have == 0 {
            return Ok(Step::End);
        }
        self.index += 1;
        let index = self.index;
        if have < 16 {
            return Ok(self.truncated(index, offset, 16, have));
        }
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

    fn step_pcapng(&mut self) -> io::Result<Step> {
        let Format::Pcapng { be, .. } = self.fmt else {
            return Ok(Step::End);
        };
        let offset = self.w.offset();
        let have = self.w.fill(12)?;
        if have == 0 {
            return Ok(Step::End);
        }
        self.index += 1;
        let index = self.index;
        if have < 12 {
            return Ok(self.truncated(index, offset, 12, have));
        }
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

    /// The record at `offset` has impossible framing: scan forward for the next plausible one.
    fn resync(&mut self, index: u64, offset: u64, why: String) -> io::Result<Step> {
        let (skip, resumed) = match self.scan(false)? {
            Some(skip) => (skip, true),
            None => {
                self.done = true;
                (self.w.avail(), false)
            }
        };
        self.w.consume(skip);
        Ok(Step::Skip(Skip {
            unit: self.unit(),
            index,
            offset,
            kind: SkipKind::Garbage {
                why,
                skipped: skip as u64,
                resumed,
            },
        }))
    }

    /// The record at the current position says it is `need` bytes long but the file ends after
    /// `have`: either the file was cut inside it, or its length is damaged and more records
    /// follow. A plausible record further on tells the second case.
    fn past_end(&mut self, index: u64, offset: u64, need: usize, have: usize) -> io::Result<Step> {
        match self.scan(true)? {
            Some(skip) => {
                self.w.consume(skip);
                let why = format!("its length ({need} bytes) runs past the end of the file");
                Ok(Step::Skip(Skip {
                    unit: self.unit(),
                    index,
                    offset,
                    kind: SkipKind::Garbage {
                        why,
                        skipped: skip as u64,
                        resumed: true,
                    },
                }))
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

    /// Is there a plausible pcap record `at` bytes ahead, followed by another one close to it in
    /// time (or, unless `strict`, by the end of the file)? `None` when the input ends before a
    /// header fits.
    fn pcap_candidate(
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
            Err(LinkError::BadVersion(_) | LinkError::Short { .. })
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

    /// Is there a plausible pcapng block `at` bytes ahead (known type, sane length, matching
    /// trailer; the trailer is evidence enough, so there is no `strict`)? `None` when the input
    /// ends before a block header fits.
    fn pcapng_candidate(&mut self, at: usize, be: bool) -> io::Result<Option<bool>> {
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

#[derive(Clone, Copy)]
struct PcapFormat {
    be: bool,
    nanos: bool,
    link: LinkType,
    limit: u32,
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
