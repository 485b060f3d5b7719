//! Capture of client -> online segments from an `AF_PACKET` TPACKET_V3 ring.
//!
//! Owns: reading the ring in block order (through [`crate::sys::RxRing`]), checking every block
//! and frame header against the block's bounds before using it ([`walk_block`], plain safe code
//! tested without a kernel), trimming link-layer padding so each delivered slice is exactly one IP
//! packet, and the capture counters, including the kernel's drop counters which `PACKET_STATISTICS`
//! resets on every read and which are accumulated here.
//!
//! Several workers ([`Capture::open_fanout`]): one ring per worker, all joined to one
//! `PACKET_FANOUT` group whose program ([`crate::bpf::fanout_program`]) picks the ring from the
//! client port, so each TCP connection is read by one worker only, worker
//! `(client port >> 1) % N`.
//!
//! A ring sized to the traffic (one worker): the ring starts with
//! [`CaptureConfig::initial_blocks`] and grows [`GROWTH_FACTOR`] times larger, up to
//! `block_count`, when a drain finds a quarter of it handed over and unread, or a block marked
//! `TP_STATUS_LOSING` (the kernel dropped packets). The ring sits alone in a `PACKET_FANOUT_CBPF`
//! group of its own, whose program picks member 0. To grow, a new socket with the larger ring
//! joins the group taking nothing, gets the real filter, and the group's program is switched to
//! pick it: from that instant every packet goes to the new ring and none to the old one (the
//! kernel lets the packets in delivery under the old program finish first). The old ring is read
//! to its end ([`RETIRE_TICKS`] block timeouts, so its last partly filled block is handed over),
//! then closed, and only then is the new ring read: every packet comes once and in order, with no
//! overlap to sort out. It never shrinks: the size reached is what the host's peaks needed.
//!
//! Invariants: a frame whose header points outside its block ends the walk of that block (the
//! block is still given back); a frame that the kernel cut short (`snaplen < len`) is counted
//! and not delivered, because a copy with missing bytes would corrupt the session. The members of
//! a fanout group accept no packet until every member has joined (they start with a filter that
//! drops everything and get the real one last), so no connection is split between workers by a
//! group that was still growing.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use crate::bpf::Insn;
use crate::sys::{self, KernelStats, RingParams, RxRing};

/// Offsets in `struct tpacket_block_desc` (version 1 header); checked against libc in the tests.
mod block {
    pub const NUM_PKTS: usize = 12;
    pub const OFFSET_TO_FIRST_PKT: usize = 16;
    pub const BLK_LEN: usize = 20;
    pub const SIZE: usize = 48;
}

/// Offsets in `struct tpacket3_hdr`; checked against libc in the tests.
mod frame {
    pub const NEXT_OFFSET: usize = 0;
    pub const SEC: usize = 4;
    pub const NSEC: usize = 8;
    pub const SNAPLEN: usize = 12;
    pub const LEN: usize = 16;
    pub const STATUS: usize = 20;
    pub const MAC: usize = 24;
    pub const SIZE: usize = 48;
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4)
        .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    b.get(off..off + 2)
        .map(|s| u16::from_ne_bytes([s[0], s[1]]))
}

/// One frame of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameRef<'a> {
    /// The captured bytes, starting at the network header.
    pub data: &'a [u8],
    /// The packet's length on the wire (network header on); more than `data.len()` if cut.
    pub wire_len: u32,
    /// `tp_status` of the frame (`TP_STATUS_CSUMNOTREADY`, ...).
    pub status: u32,
    /// When the kernel took the packet (`tp_sec`, `tp_nsec`: `CLOCK_REALTIME`, the software
    /// stamp of the packet or the time the ring took it), in nanoseconds since the Unix epoch.
    pub stamp: u64,
}

/// A block or frame header that does not fit its block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RingFormatError {
    /// The block is shorter than its header or says it holds more than it does.
    #[error("block header out of bounds (block {block_len} bytes, blk_len {blk_len})")]
    BadBlock {
        /// Bytes in the mapped block.
        block_len: usize,
        /// `blk_len` of the header.
        blk_len: u32,
    },
    /// Frame `index` lies (partly) outside the block.
    #[error("frame {index} at offset {offset} is out of bounds")]
    BadFrame {
        /// Position of the frame in the block.
        index: u32,
        /// Its offset from the block start.
        offset: usize,
    },
}

/// Walk the frames of one TPACKET_V3 block (`block` = the whole mapped block), calling `f` for
/// each. Returns the number of frames visited, or the first inconsistency found (frames before
/// it were delivered).
pub fn walk_block<'a>(
    block: &'a [u8],
    mut f: impl FnMut(FrameRef<'a>),
) -> Result<u32, RingFormatError> {
    let bad_block = |blk_len| RingFormatError::BadBlock {
        block_len: block.len(),
        blk_len,
    };
    let num = u32_at(block, block::NUM_PKTS).ok_or(bad_block(0))?;
    let first = u32_at(block, block::OFFSET_TO_FIRST_PKT).ok_or(bad_block(0))? as usize;
    let blk_len = u32_at(block, block::BLK_LEN).ok_or(bad_block(0))?;
    if (blk_len as usize) > block.len() || (blk_len as usize) < block::SIZE {
        return Err(bad_block(blk_len));
    }
    let used = &block[..blk_len as usize];
    let mut off = first;
    for index in 0..num {
        let bad = RingFormatError::BadFrame { index, offset: off };
        if off < block::SIZE {
            return Err(bad);
        }
        let hdr = used.get(off..off + frame::SIZE).ok_or(bad)?;
        let snaplen = u32_at(hdr, frame::SNAPLEN).ok_or(bad)? as usize;
        let wire_len = u32_at(hdr, frame::LEN).ok_or(bad)?;
        let status = u32_at(hdr, frame::STATUS).ok_or(bad)?;
        let mac = u16_at(hdr, frame::MAC).ok_or(bad)? as usize;
        let next = u32_at(hdr, frame::NEXT_OFFSET).ok_or(bad)? as usize;
        let sec = u64::from(u32_at(hdr, frame::SEC).ok_or(bad)?);
        let nsec = u64::from(u32_at(hdr, frame::NSEC).ok_or(bad)?);
        let start = off.checked_add(mac).ok_or(bad)?;
        let data = used
            .get(start..start.checked_add(snaplen).ok_or(bad)?)
            .ok_or(bad)?;
        f(FrameRef {
            data,
            wire_len,
            status,
            stamp: sec * 1_000_000_000 + nsec,
        });
        if index + 1 < num {
            if next == 0 {
                return Err(RingFormatError::BadFrame {
                    index: index + 1,
                    offset: off,
                });
            }
            off = off.checked_add(next).ok_or(bad)?;
        }
    }
    Ok(num)
}

/// Cut link-layer padding so that the slice is exactly the IP packet its header describes (the
/// one implementation lives with the capture-file reader).
pub use common::pcap::trim_to_ip_len;

/// How to capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureConfig {
    /// Interface to capture on; `None` for all.
    pub interface: Option<String>,
    /// Bytes per ring block (a multiple of the page size; a whole block is the largest packet).
    pub block_size: u32,
    /// Number of ring blocks: what the ring grows to.
    pub block_count: u32,
    /// Blocks the ring starts with (at most `block_count`; equal: a fixed ring). Rings of a
    /// fanout group (several workers) have `block_count` from the start.
    pub initial_blocks: u32,
    /// After this long a partly filled block is handed over anyway: the capture latency bound
    /// at low packet rates.
    pub retire: Duration,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            interface: None,
            block_size: 4 << 20,
            block_count: 8,
            initial_blocks: 8,
            retire: Duration::from_millis(10),
        }
    }
}

/// Counters of the capture, cumulative since it opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureStats {
    /// IP packets delivered to the caller.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Frames cut short by the kernel (larger than a block) and not delivered.
    pub truncated: u64,
    /// Blocks whose headers did not fit (walk stopped early).
    pub bad_blocks: u64,
    /// Blocks processed.
    pub blocks: u64,
    /// Kernel: packets that passed the filter (`tp_packets`, drops included).
    pub kernel_packets: u64,
    /// Kernel: packets lost because the ring was full (`tp_drops`).
    pub kernel_drops: u64,
    /// Kernel: times the queue froze on a full ring (`tp_freeze_q_cnt`).
    pub kernel_freezes: u64,
    /// Bytes of the ring(s) mapped now (a gauge; two rings while a replaced one is read).
    pub ring_bytes: u64,
    /// Times the ring grew.
    pub ring_grows: u64,
}

/// Why the capture could not start.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// `--interface` names no interface.
    #[error("interface {name:?} not found: {source}")]
    NoInterface {
        /// The name given.
        name: String,
        /// From `if_nametoindex`.
        source: io::Error,
    },
    /// Socket, filter, ring or bind failed (often: not root / no CAP_NET_RAW).
    #[error("cannot open the AF_PACKET capture ring ({blocks} x {block_size} bytes) on {iface}: {source}")]
    Open {
        /// The interface, or "all interfaces".
        iface: String,
        /// Block size asked for.
        block_size: u32,
        /// Block count asked for.
        blocks: u32,
        /// The system error.
        source: io::Error,
    },
    /// Joining ring `member` to the fanout group, or giving it its filter, failed.
    #[error("cannot join capture ring {member} to a PACKET_FANOUT group: {source}")]
    Fanout {
        /// Which ring (worker) of the group.
        member: usize,
        /// The system error.
        source: io::Error,
    },
}

/// A classic BPF program that accepts nothing (`ret #0`).
const DROP_ALL: [Insn; 1] = [Insn {
    code: 0x06,
    jt: 0,
    jf: 0,
    k: 0,
}];

/// Block timeouts during which, after a growth, the replaced ring is still read alone: the
/// kernel hands its last, partly filled block over within one or two of them.
pub const RETIRE_TICKS: u32 = 3;

/// How much a growing ring multiplies its block count by (capped at `block_count`).
pub const GROWTH_FACTOR: u32 = 4;

/// The fanout program of a growing ring's group while it has one member (or is about to get
/// its second): every packet to member 0.
const TO_FIRST: [Insn; 1] = [Insn {
    code: 0x06,
    jt: 0,
    jf: 0,
    k: 0,
}];

/// The program that switches a growing ring's group to its newest member (index 1 while the
/// old ring is still in the group; once the old ring leaves, `1 % 1` is the new ring again).
const TO_SECOND: [Insn; 1] = [Insn {
    code: 0x06,
    jt: 0,
    jf: 0,
    k: 1,
}];

/// A ring being replaced by a larger one. It gets no packet any more (the group's program
/// sends them to the new ring); it is read alone until the kernel has handed over its last
/// block (`until`, and no block ready), then closed.
#[derive(Debug)]
struct Retiring {
    ring: RxRing,
    next: usize,
    until: Instant,
}

/// What a ring that can grow keeps to grow: its group and the filter to give the new ring.
#[derive(Debug)]
struct Growth {
    /// The fanout group (id, outgoing ignored) that the ring and its successors share.
    group: (u16, bool),
    filter: Vec<Insn>,
    /// Blocks the ring may grow to.
    max_blocks: u32,
    /// A larger ring being opened and switched to on a thread of its own (opening a ring
    /// takes the kernel 5 to 20 ms, during which the engine goes on reading the current one).
    opening: Option<Opening>,
    /// A replaced ring still being read.
    old: Option<Retiring>,
    /// Growing failed once (memory): not tried again.
    stuck: bool,
}

/// A growth under way: the thread's answer, and what it was asked for.
#[derive(Debug)]
struct Opening {
    done: std::sync::mpsc::Receiver<Result<RxRing, String>>,
    /// Set by the thread once it has sent its answer.
    answered: std::sync::Arc<std::sync::atomic::AtomicBool>,
    blocks: u32,
    why: &'static str,
}

/// An open capture ring.
#[derive(Debug)]
pub struct Capture {
    ring: RxRing,
    next: usize,
    stats: CaptureStats,
    fanout: Option<u16>,
    cfg: CaptureConfig,
    growth: Option<Growth>,
}

impl Capture {
    /// Open the ring with `filter` attached; needs CAP_NET_RAW. With
    /// `cfg.initial_blocks < cfg.block_count` the ring starts small and grows (see the module
    /// doc); the socket then sits alone in a `PACKET_FANOUT` group of its own.
    pub fn open(cfg: &CaptureConfig, filter: &[Insn]) -> Result<Capture, CaptureError> {
        let start = cfg.initial_blocks.clamp(1, cfg.block_count.max(1));
        if start >= cfg.block_count {
            return Capture::open_ring(cfg, filter);
        }
        let mut c = Capture::open_ring(
            &CaptureConfig {
                block_count: start,
                ..cfg.clone()
            },
            &DROP_ALL,
        )?;
        let fan = |source| CaptureError::Fanout { member: 0, source };
        let group = sys::join_fanout(c.ring.fd(), None).map_err(fan)?;
        sys::set_fanout_program(c.ring.fd(), &TO_FIRST).map_err(fan)?;
        sys::attach_filter(c.ring.fd(), filter).map_err(fan)?;
        c.growth = Some(Growth {
            group,
            filter: filter.to_vec(),
            max_blocks: cfg.block_count,
            opening: None,
            old: None,
            stuck: false,
        });
        Ok(c)
    }

    /// Open `members` rings (each as `cfg` says: the memory is `members` times one ring's) joined
    /// to one new `PACKET_FANOUT` group with defragmentation, whose program
    /// ([`crate::bpf::fanout_program`]) sends each packet to ring `(client port >> 1) % members`:
    /// every packet of a TCP connection lands in the same ring, and ring `i` holds exactly the
    /// connections whose ports are in [`crate::engine::PortShare`] `{ index: i, count: members }`.
    /// The group's id is chosen by the kernel, unique in this network namespace. The rings accept
    /// nothing until all have joined and the group has its program (then each gets `filter`),
    /// so no flow moves from one ring to another while the group forms. With `members == 1`
    /// this is [`Capture::open`] (no group, or a group of its own for a ring that grows); with
    /// more, every ring has `cfg.block_count` blocks from the start and does not grow.
    pub fn open_fanout(
        cfg: &CaptureConfig,
        filter: &[Insn],
        members: usize,
    ) -> Result<Vec<Capture>, CaptureError> {
        if members <= 1 {
            return Ok(vec![Capture::open(cfg, filter)?]);
        }
        let mut caps: Vec<Capture> = Vec::with_capacity(members);
        let mut group = None;
        for member in 0..members {
            let mut c = Capture::open_ring(cfg, &DROP_ALL)?;
            let joined = sys::join_fanout(c.ring.fd(), group)
                .map_err(|source| CaptureError::Fanout { member, source })?;
            group = Some(joined);
            c.fanout = Some(joined.0);
            caps.push(c);
        }
        sys::set_fanout_program(caps[0].ring.fd(), &crate::bpf::fanout_program())
            .map_err(|source| CaptureError::Fanout { member: 0, source })?;
        for (member, c) in caps.iter().enumerate() {
            sys::attach_filter(c.ring.fd(), filter)
                .map_err(|source| CaptureError::Fanout { member, source })?;
        }
        Ok(caps)
    }

    /// The id of the fanout group this ring belongs to, if any (the workers' group; a growing
    /// ring's group of its own is not reported).
    pub fn fanout_group(&self) -> Option<u16> {
        self.fanout
    }

    /// A fixed ring (`cfg.block_count` blocks) that also sees the frames this host sends: the
    /// comparison's capture of both directions (`crate::bpf::build_answer_filter`).
    pub fn open_both_directions(
        cfg: &CaptureConfig,
        filter: &[Insn],
    ) -> Result<Capture, CaptureError> {
        Capture::open_ring_with(cfg, filter, true)
    }

    fn open_ring(cfg: &CaptureConfig, filter: &[Insn]) -> Result<Capture, CaptureError> {
        Capture::open_ring_with(cfg, filter, false)
    }

    fn open_ring_with(
        cfg: &CaptureConfig,
        filter: &[Insn],
        outgoing: bool,
    ) -> Result<Capture, CaptureError> {
        let ifindex = match &cfg.interface {
            None => 0,
            Some(name) => {
                sys::interface_index(name).map_err(|source| CaptureError::NoInterface {
                    name: name.clone(),
                    source,
                })?
            }
        };
        let params = RingParams {
            ifindex,
            block_size: cfg.block_size,
            block_count: cfg.block_count,
            frame_size: 2048,
            retire_ms: u32::try_from(cfg.retire.as_millis())
                .unwrap_or(u32::MAX)
                .max(1),
            outgoing,
        };
        let ring = RxRing::open(&params, filter).map_err(|source| CaptureError::Open {
            iface: cfg
                .interface
                .clone()
                .unwrap_or_else(|| "all interfaces".into()),
            block_size: cfg.block_size,
            blocks: cfg.block_count,
            source,
        })?;
        let stats = CaptureStats {
            ring_bytes: ring.bytes() as u64,
            ..CaptureStats::default()
        };
        Ok(Capture {
            ring,
            next: 0,
            stats,
            fanout: None,
            cfg: cfg.clone(),
            growth: None,
        })
    }

    /// The socket, for `poll`. While a replaced ring is still read, the new ring's socket (the
    /// caller also waits no longer than [`Capture::growing_until`]).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.ring.fd()
    }

    /// Number of blocks in the ring.
    pub fn block_count(&self) -> usize {
        self.ring.block_count()
    }

    /// Is there something to drain: the next block in ring order ready (of the replaced ring
    /// while one is read), or a replaced ring due to be closed?
    pub fn has_ready(&self) -> bool {
        match self.retiring() {
            Some(o) => o.ring.block_ready(o.next) || Instant::now() >= o.until,
            None => self.ring.block_ready(self.next) || self.switch_due(),
        }
    }

    /// Has the growth thread switched the traffic to a new ring that the engine has not taken
    /// yet? (The current ring gets nothing more, so its socket will not wake the caller.)
    fn switch_due(&self) -> bool {
        let opening = self.growth.as_ref().and_then(|g| g.opening.as_ref());
        opening.is_some_and(|op| op.answered.load(std::sync::atomic::Ordering::Acquire))
    }

    fn retiring(&self) -> Option<&Retiring> {
        self.growth.as_ref().and_then(|g| g.old.as_ref())
    }

    /// While the ring grows (a new ring being opened, or the replaced one read to its end):
    /// when the caller should look again at the latest, since the socket it polls may get no
    /// packet until then.
    pub fn growing_until(&self) -> Option<Instant> {
        let g = self.growth.as_ref()?;
        match (&g.opening, &g.old) {
            (_, Some(o)) => Some(o.until),
            (Some(_), None) => Some(Instant::now()),
            (None, None) => None,
        }
    }

    /// Blocks in a row, from the next one, that the kernel handed over and nobody read yet.
    pub fn ready_run(&self) -> usize {
        let n = self.ring.block_count();
        (0..n)
            .take_while(|i| self.ring.block_ready((self.next + i) % n))
            .count()
    }

    /// Should the ring grow now: a quarter of it is handed over and unread, or the next block
    /// says the kernel dropped packets?
    fn wants_growth(&self) -> bool {
        let Some(g) = &self.growth else { return false };
        if g.stuck
            || g.old.is_some()
            || g.opening.is_some()
            || self.ring.block_count() >= g.max_blocks as usize
        {
            return false;
        }
        self.ring.block_losing(self.next) || self.ready_run() * 4 >= self.ring.block_count().max(4)
    }

    /// Start switching the capture to a new ring [`GROWTH_FACTOR`] times as large, on a thread
    /// of its own (it inherits this thread's network namespace): the group's program is set to
    /// pick member 0 (the current ring: the only member now), the new socket opens and joins the
    /// group taking nothing, gets the real filter, and then the group's program picks it: from
    /// that instant every packet goes to the new ring and none to the current one. The current
    /// ring is read meanwhile; once the thread is done ([`Capture::take_opened`]) it is read to
    /// its end before the new one, so every packet comes once and in order.
    fn start_growth(&mut self, why: &'static str) {
        let Some(g) = self.growth.as_mut() else {
            return;
        };
        let blocks = (self.ring.block_count() as u32)
            .saturating_mul(GROWTH_FACTOR)
            .min(g.max_blocks);
        let cfg = CaptureConfig {
            block_count: blocks,
            ..self.cfg.clone()
        };
        let (group, filter) = (g.group, g.filter.clone());
        let first = self.ring.fd().try_clone_to_owned();
        let (tx, rx) = std::sync::mpsc::channel();
        let answered = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = answered.clone();
        let spawned = std::thread::Builder::new()
            .name("capture-grow".into())
            .spawn(move || {
                let opened = first
                    .and_then(|fd| {
                        sys::set_fanout_program(std::os::fd::AsFd::as_fd(&fd), &TO_FIRST)
                    })
                    .map_err(|e| e.to_string())
                    .and_then(|()| Capture::open_ring(&cfg, &DROP_ALL).map_err(|e| e.to_string()))
                    .and_then(|new| {
                        sys::join_fanout(new.ring.fd(), Some(group))
                            .and_then(|_| sys::attach_filter(new.ring.fd(), &filter))
                            .and_then(|()| sys::set_fanout_program(new.ring.fd(), &TO_SECOND))
                            .map(|()| new.ring)
                            .map_err(|e| e.to_string())
                    });
                // A ring that failed after joining is closed here and leaves the group, which then
                // has the current ring alone again.
                let _ = tx.send(opened);
                flag.store(true, std::sync::atomic::Ordering::Release);
            });
        match spawned {
            Ok(_) => {
                g.opening = Some(Opening {
                    done: rx,
                    answered,
                    blocks,
                    why,
                })
            }
            Err(e) => {
                g.stuck = true;
                tracing::warn!("capture ring: could not grow ({why}): no thread: {e}");
            }
        }
    }

    /// If the growth thread is done, make its ring the current one (the current one retires)
    /// or, on failure, say so and stop growing. True when a ring was switched.
    fn take_opened(&mut self, now: Instant) -> bool {
        let Some(g) = self.growth.as_mut() else {
            return false;
        };
        let Some(op) = &g.opening else { return false };
        let res = match op.done.try_recv() {
            Ok(r) => r,
            Err(std::sync::mpsc::TryRecvError::Empty) => return false,
            Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                Err("the growth thread ended".into())
            }
        };
        let Some(op) = g.opening.take() else {
            return false;
        };
        match res {
            Ok(new) => {
                let old = std::mem::replace(&mut self.ring, new);
                let next = std::mem::replace(&mut self.next, 0);
                g.old = Some(Retiring {
                    ring: old,
                    next,
                    until: now + self.cfg.retire * RETIRE_TICKS,
                });
                self.stats.ring_grows += 1;
                self.stats.ring_bytes += self.ring.bytes() as u64;
                tracing::info!(
                    "capture ring grown to {} x {} KiB ({} MiB): {}",
                    op.blocks,
                    self.cfg.block_size >> 10,
                    self.ring.bytes() >> 20,
                    op.why
                );
                true
            }
            Err(e) => {
                g.stuck = true;
                tracing::warn!(
                    "capture ring: could not grow to {} blocks ({}): {e}; it stays at {}",
                    op.blocks,
                    op.why,
                    self.ring.block_count()
                );
                false
            }
        }
    }

    /// Hand the IP packets of up to `max_blocks` ready blocks, in capture order, to `f`.
    /// Returns the number of blocks processed. A ring that can grow grows here (see the module
    /// doc): a replaced ring is read to its end before the ring that replaced it.
    pub fn drain(&mut self, max_blocks: usize, mut f: impl FnMut(&[u8])) -> usize {
        self.drain_stamped(max_blocks, |pkt, _| f(pkt))
    }

    /// [`Capture::drain`], with each packet's kernel time stamp ([`FrameRef::stamp`]).
    pub fn drain_stamped(&mut self, max_blocks: usize, mut f: impl FnMut(&[u8], u64)) -> usize {
        let mut done = 0;
        while done < max_blocks {
            let now = Instant::now();
            self.take_opened(now);
            self.finish_retiring(now);
            if self.wants_growth() {
                let why = if self.ring.block_losing(self.next) {
                    "the kernel dropped packets"
                } else {
                    "a quarter of it was waiting to be read"
                };
                self.start_growth(why);
            }
            if self.ring.block_losing(self.next) {
                // The kernel lost packets before this block: count them now (the engine gives
                // up the sessions that meet a hole about now), which also clears the flag for
                // the blocks it closes from now on.
                let _ = self.refresh_kernel_stats();
            }
            let n = match self.growth.as_mut().and_then(|g| g.old.as_mut()) {
                Some(old) => drain_ring(&mut old.ring, &mut old.next, &mut self.stats, 1, &mut f),
                None => drain_ring(&mut self.ring, &mut self.next, &mut self.stats, 1, &mut f),
            };
            if n == 0 {
                break;
            }
            done += n;
        }
        done
    }

    /// Close the replaced ring once its last block has been handed over and read.
    fn finish_retiring(&mut self, now: Instant) {
        let Some(g) = self.growth.as_mut() else {
            return;
        };
        if g.old
            .as_ref()
            .is_some_and(|o| now >= o.until && !o.ring.block_ready(o.next))
        {
            if let Some(old) = g.old.take() {
                self.retire(old.ring);
            }
        }
    }

    /// Close a replaced ring, keeping its kernel counters.
    fn retire(&mut self, ring: RxRing) {
        if let Ok(k) = ring.statistics() {
            self.add_kernel_stats(k);
        }
        self.stats.ring_bytes -= ring.bytes() as u64;
    }

    /// Read and clear the socket's pending error (e.g. `ENETDOWN` when the interface went down;
    /// the ring resumes by itself when it comes back up). Call it when `poll` says the socket is
    /// ready but no block is, or the error keeps `poll` returning at once.
    pub fn take_error(&self) -> Option<io::Error> {
        sys::take_socket_error(self.ring.fd()).unwrap_or_else(Some)
    }

    /// Add the kernel's counters since the last call to [`Capture::stats`] (of a replaced ring
    /// still read too).
    pub fn refresh_kernel_stats(&mut self) -> io::Result<()> {
        if let Some(k) = self.retiring().map(|o| o.ring.statistics()).transpose()? {
            self.add_kernel_stats(k);
        }
        let k = self.ring.statistics()?;
        self.add_kernel_stats(k);
        Ok(())
    }

    fn add_kernel_stats(&mut self, k: KernelStats) {
        self.stats.kernel_packets += u64::from(k.packets);
        self.stats.kernel_drops += u64::from(k.drops);
        self.stats.kernel_freezes += u64::from(k.freeze_q_cnt);
    }

    /// Counters since the capture opened.
    pub fn stats(&self) -> CaptureStats {
        self.stats
    }
}

/// Hand the IP packets of up to `max_blocks` ready blocks of `ring`, from `next` on, to `f`.
fn drain_ring(
    ring: &mut RxRing,
    next: &mut usize,
    stats: &mut CaptureStats,
    max_blocks: usize,
    f: &mut impl FnMut(&[u8], u64),
) -> usize {
    let mut done = 0;
    while done < max_blocks {
        let walked = ring.with_block(*next, |bytes| {
            walk_block(bytes, |fr| {
                if (fr.data.len() as u64) < u64::from(fr.wire_len) {
                    stats.truncated += 1;
                    return;
                }
                let pkt = trim_to_ip_len(fr.data);
                stats.packets += 1;
                stats.bytes += pkt.len() as u64;
                f(pkt, fr.stamp);
            })
        });
        match walked {
            None => break,
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                stats.bad_blocks += 1;
                tracing::warn!(
                    block = *next,
                    "capture ring: {e}; rest of the block skipped"
                );
            }
        }
        stats.blocks += 1;
        done += 1;
        *next = (*next + 1) % ring.block_count();
    }
    done
}

#[cfg(test)]
mod tests;
