//! The mirror input (`--mirror vxlan[:PORT]` or `geneve[:PORT]`): the copier on a host of its
//! own, fed by a traffic mirror (AWS VPC Traffic Mirroring, Azure vTAP, a switch, `tc mirred` to
//! a VXLAN device) instead of a capture on the online host.
//!
//! Owns: the UDP socket the mirror sends to, read [`RECV_BATCH`] datagrams per `recvmmsg`,
//! gathered for [`GATHER`] after a poll said it is readable unless a first read [`PROBE`]
//! after the wake-up fills the batch (so a datagram does not cost a wake-up of this thread and
//! the engine's each, and a burst is not held back); the decapsulation ([`wire`]); the selection
//! the capture's kernel filter makes for a live capture (`--vni`, then
//! `crate::offline::PortFilter`: the client's packets to a mapped service, and with `--compare`
//! the service's answers), made first in the kernel by a classic BPF program on the socket
//! (`crate::bpf::build_mirror_filter`: VNIs and ports) and again, exactly, here; the drop of
//! duplicated packets (a mirror with two sessions over one interface, or a path that
//! duplicates); and the mirror's counters ([`MirrorStats`], exported as `copier_mirror_*`).
//!
//! [`MirrorInput`] is a [`crate::feed::Ring`]: the capture thread of [`crate::feed`] reads it
//! exactly as it reads a capture ring, so the engine, its overload handling and every feature
//! after it see no difference. The client's packets go to the engine; both directions go to the
//! comparison thread (`--compare`: the online answers come from the mirror, nothing is captured
//! on the online host). Only the client's packets can ever cause a send.
//!
//! Invariants: a datagram cut by the socket buffer (`MSG_TRUNC`) or an inner packet shorter than
//! its IP length is counted and dropped, never delivered (the session's hole handling takes
//! over: `capture_gap`); every datagram read is counted once, as delivered or under one reason;
//! the kernel filter's drops are never read and are counted apart ([`MirrorStats::filtered`],
//! from the socket's drop counter less the namespace's UDP receive-buffer errors).
//! Loss and reordering on the mirror path look to the engine exactly like loss and reordering
//! in a capture: its out-of-order buffer and hole handling deal with them (`capture_gap`,
//! `out_of_order_overflow`).

pub mod wire;

use std::collections::BTreeSet;
use std::io;
use std::net::{Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ::metrics::{counter, gauge};

use crate::metrics_table::mirror as names;
use nix::sys::socket::{recvmmsg, MsgFlags, MultiHeaders};
use socket2::{Domain, Protocol, Socket, Type};

use crate::capture::CaptureStats;
use crate::engine::PortMap;
use crate::offline::PortFilter;
use crate::shadow::{sampled_client, Tap};
pub use wire::{decap, DecapError, Encap, Inner};

/// Datagrams read per `recvmmsg`.
pub const RECV_BATCH: usize = 64;
/// Bytes per datagram buffer: a datagram larger than this is cut by the socket and dropped.
pub const DATAGRAM_MAX: usize = 65536;
/// Receive buffer asked for (root may exceed `rmem_max`).
const RCVBUF: usize = 32 << 20;
/// Sets of the duplicate filter (recent packets' header hashes).
const DEDUP_SLOTS: usize = 4096;
/// How often the counters are exported.
const EXPORT_EVERY: Duration = Duration::from_secs(1);
/// How long datagrams gather after the socket became readable before they are handed over
/// (at most [`RECV_BATCH`] at a time; a full read is followed by the next at once). The
/// capture ring does the same with its 10 ms block timeout (a block full before it leaves at
/// once); this adds at most as much to the copy lag.
pub const GATHER: Duration = Duration::from_millis(10);
/// When the first read of a gathering happens: a full batch by then is a burst, handed over at
/// once (10 ms of a mirror at 10 Gbit/s would be 12 MB held back, and the engine would find
/// itself behind); otherwise the rest of [`GATHER`] passes and a second read adds to it.
pub const PROBE: Duration = Duration::from_millis(1);
/// How often the kernel's counters are read (`/proc/net/udp{,6}` walks every UDP socket of the
/// namespace): as often as they are exported.
const KERNEL_STATS_EVERY: Duration = EXPORT_EVERY;

/// What `--mirror` and `--vni` say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorConfig {
    /// The encapsulation.
    pub encap: Encap,
    /// The UDP port it arrives on.
    pub port: u16,
    /// The mirror sessions taken (`--vni`); empty: all.
    pub vnis: Vec<u32>,
}

impl std::str::FromStr for MirrorConfig {
    type Err = String;

    /// `vxlan`, `vxlan:PORT`, `geneve`, `geneve:PORT`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, port) = match s.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (s, None),
        };
        let encap = match name.to_ascii_lowercase().as_str() {
            "vxlan" => Encap::Vxlan,
            "geneve" => Encap::Geneve,
            other => {
                return Err(format!(
                    "unknown encapsulation {other:?} (expected vxlan or geneve, optionally :PORT)"
                ))
            }
        };
        let port = match port {
            None => encap.default_port(),
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => n,
                _ => return Err(format!("bad UDP port {p:?} (1-65535)")),
            },
        };
        Ok(MirrorConfig {
            encap,
            port,
            vnis: Vec::new(),
        })
    }
}

/// `--vni`'s value: the VNIs, sorted, each once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VniList(pub Vec<u32>);

impl std::str::FromStr for VniList {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        parse_vnis(s).map(VniList)
    }
}

/// Parse `--vni`: a comma-separated list of VNIs (0 to 16777215) and ranges `A-B`.
pub fn parse_vnis(s: &str) -> Result<Vec<u32>, String> {
    let one = |t: &str| -> Result<u32, String> {
        match t.trim().parse::<u32>() {
            Ok(v) if v < 1 << 24 => Ok(v),
            _ => Err(format!("bad VNI {t:?} (0 to 16777215)")),
        }
    };
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (one(a)?, one(b)?);
                if b < a || b - a >= 4096 {
                    return Err(format!(
                        "bad VNI range {part:?} (low-high, at most 4096 VNIs)"
                    ));
                }
                out.extend(a..=b);
            }
            None => out.push(one(part)?),
        }
    }
    if out.is_empty() {
        return Err("empty VNI list".into());
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

common::reasons! {
    /// Why the mirror input did not deliver a datagram or an inner packet: the `reason` label of
    /// `copier_mirror_dropped_total`.
    enum MirrorDrop;
    /// Datagrams or inner packets the mirror input did not deliver, by reason.
    #[derive(Copy)]
    struct MirrorDrops;
    /// Shorter than the encapsulation header.
    Short => short,
    /// VXLAN without the I flag, GENEVE of another version.
    BadHeader => bad_header,
    /// GENEVE control packets.
    Control => control,
    /// Inner frames that are not IP.
    NotIp => not_ip,
    /// Inner packets with a bad IP version.
    BadVersion => bad_version,
    /// Inner packets shorter than their IP length (the mirror cut them), or datagrams larger
    /// than the socket buffer: never delivered as whole.
    Truncated => truncated,
    /// Mirror sessions not selected by `--vni`.
    Vni => vni,
    /// Inner packets to or from no mapped service (or not TCP).
    Unselected => unselected,
    /// Inner packets seen a moment before (a duplicating mirror): delivered once.
    Duplicate => duplicate,
}

impl MirrorDrops {
    /// Count one more under the reason labelled `label` (none: nothing).
    fn count(&mut self, label: &str) {
        if let Some(&r) = MirrorDrop::ALL.iter().find(|r| r.label() == label) {
            self.add(r, 1);
        }
    }
}

/// The mirror's counters, cumulative.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MirrorStats {
    /// Datagrams read.
    pub datagrams: u64,
    /// Their bytes.
    pub bytes: u64,
    /// `recvmmsg` calls that returned datagrams.
    pub reads: u64,
    /// Client packets delivered to the engine.
    pub client_packets: u64,
    /// Service answers seen (handed to `--compare` when it runs).
    pub server_packets: u64,
    /// What was not delivered, by reason.
    pub drops: MirrorDrops,
    /// The VNIs seen (the first 64).
    pub vnis: BTreeSet<u32>,
    /// The socket's own drops (receive buffer full): its drop counter in `/proc/net/udp{,6}`,
    /// at most the network namespace's UDP `RcvbufErrors` since the socket was opened.
    pub socket_drops: u64,
    /// Datagrams the socket's kernel filter dropped (other VNIs, other ports, the answers
    /// without `--compare`): never read, so in none of the other counters. The rest of the
    /// socket's drop counter.
    pub filtered: u64,
}

impl MirrorStats {
    /// Copy into `dst` (the copy the summary reads, refreshed after every drain) without an
    /// allocation per drain: the VNI set only grows, so it is copied only when its size changed.
    fn copy_into(&self, dst: &mut MirrorStats) {
        let mut vnis = std::mem::take(&mut dst.vnis);
        if vnis.len() != self.vnis.len() {
            vnis.clone_from(&self.vnis);
        }
        *dst = MirrorStats { vnis, ..*self };
    }
}

impl std::fmt::Display for MirrorStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "mirror: {} datagrams, {} client packets, {} answers; dropped:",
            self.datagrams, self.client_packets, self.server_packets
        )?;
        let mut any = false;
        for (why, n) in self.drops.iter().filter(|&(_, n)| n > 0) {
            write!(f, " {why} {n}")?;
            any = true;
        }
        if self.socket_drops > 0 {
            write!(f, " socket_buffer {}", self.socket_drops)?;
            any = true;
        }
        if self.filtered > 0 {
            write!(f, " kernel_filter {}", self.filtered)?;
            any = true;
        }
        if !any {
            write!(f, " none")?;
        }
        Ok(())
    }
}

/// What the mirror thread and the rest of the copier share: the counters.
#[derive(Debug, Default)]
pub struct MirrorShared {
    stats: Mutex<MirrorStats>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl MirrorShared {
    /// The counters as last published (after every read).
    pub fn stats(&self) -> MirrorStats {
        lock(&self.stats).clone()
    }
}

/// Drops packets whose headers were seen a moment ago: a table of header hashes, 4 ways per
/// set, most recent first (the IP and TCP headers hold the IP ID, sequence and acknowledgment
/// numbers, so a client's retransmission differs from the original; an identical copy is the
/// mirror's). Four ways, because a mirror that duplicates an offloaded super-segment sends its
/// segments, then their copies: up to ~45 packets between a packet and its copy, which a
/// direct-mapped table of 4096 slots evicted about once in a hundred (measured in the lab).
#[derive(Debug)]
pub struct Dedup {
    sets: Vec<[u64; DEDUP_WAYS]>,
}

/// Ways per set of [`Dedup`].
const DEDUP_WAYS: usize = 4;

impl Default for Dedup {
    fn default() -> Self {
        Dedup {
            sets: vec![[0; DEDUP_WAYS]; DEDUP_SLOTS],
        }
    }
}

impl Dedup {
    /// Whether `ip` (whose headers are `headers` bytes long) repeats a recent packet; notes it.
    pub fn seen(&mut self, ip: &[u8], headers: usize) -> bool {
        // FNV-1a over the headers and the length, never 0 (0 marks an empty way).
        let h = common::hash::fnv1a(&ip[..headers.min(ip.len())]);
        let h = common::hash::fnv1a_from(h, &(ip.len() as u32).to_be_bytes()) | 1;
        let set = &mut self.sets[(h >> 32) as usize % DEDUP_SLOTS];
        if set.contains(&h) {
            return true;
        }
        set.rotate_right(1);
        set[0] = h;
        false
    }
}

/// Which way an inner packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Client to a mapped service: copied.
    Client,
    /// A mapped service's answer: compared only.
    Server,
}

/// The pure part of the input: one datagram's payload in, a verdict out (no socket, no clock).
#[derive(Debug)]
pub struct Selector {
    encap: Encap,
    vnis: Vec<u32>,
    filter: PortFilter,
    dedup: Dedup,
}

impl Selector {
    /// A selector for `cfg` and the services of `maps`.
    #[must_use]
    pub fn new(cfg: &MirrorConfig, maps: &[PortMap]) -> Selector {
        Selector {
            encap: cfg.encap,
            vnis: cfg.vnis.clone(),
            filter: PortFilter::new(maps),
            dedup: Dedup::default(),
        }
    }

    /// Judge one UDP payload: the inner packet and its direction, or why it is dropped (counted
    /// in `stats`, as are the VNIs seen and the packets of each direction).
    pub fn judge<'a>(
        &mut self,
        payload: &'a [u8],
        stats: &mut MirrorStats,
    ) -> Option<(Direction, &'a [u8], SocketAddr)> {
        stats.datagrams += 1;
        stats.bytes += payload.len() as u64;
        let inner = match decap(self.encap, payload) {
            Ok(i) => i,
            Err(e) => {
                stats.drops.count(e.label());
                return None;
            }
        };
        if stats.vnis.len() < 64 {
            stats.vnis.insert(inner.vni);
        }
        if !self.vnis.is_empty() && self.vnis.binary_search(&inner.vni).is_err() {
            stats.drops.vni += 1;
            return None;
        }
        let (dir, acc) = match self.filter.accept(inner.ip) {
            Some(a) => (Direction::Client, a),
            None => match self.filter.accept_answer(inner.ip) {
                Some(a) => (Direction::Server, a),
                None => {
                    stats.drops.unselected += 1;
                    return None;
                }
            },
        };
        let headers = common::wire::parse_tcp_headers(inner.ip)
            .map_or(acc.tcp_offset + 20, |h| h.packet.headers_len());
        if self.dedup.seen(inner.ip, headers) {
            stats.drops.duplicate += 1;
            return None;
        }
        match dir {
            Direction::Client => stats.client_packets += 1,
            Direction::Server => stats.server_packets += 1,
        }
        Some((dir, inner.ip, acc.client))
    }
}

thread_local! {
    /// The `recvmmsg` headers of the thread that reads the mirror, reused by every read (they
    /// hold raw pointers, so they cannot live in [`MirrorInput`], which moves to that thread).
    static HEADERS: std::cell::RefCell<MultiHeaders<()>> = std::cell::RefCell::new(MultiHeaders::preallocate(RECV_BATCH, None));
}

/// The mirror's UDP socket and what reads it; a [`crate::feed::Ring`].
pub struct MirrorInput {
    sock: Socket,
    cfg: MirrorConfig,
    selector: Selector,
    /// `RECV_BATCH` buffers of `DATAGRAM_MAX` bytes, back to back.
    bufs: Vec<u8>,
    /// Datagrams read and not yet handed over: (length, cut by the socket).
    pending: Vec<(usize, bool)>,
    stats: MirrorStats,
    capture: CaptureStats,
    shared: Arc<MirrorShared>,
    /// `--compare`: where both directions go, and its sample.
    tap: Option<(Tap, f64)>,
    tapped: Vec<(Instant, Vec<u8>)>,
    exported: Option<Instant>,
    /// The last read took fewer than [`RECV_BATCH`]: the socket is empty until a poll says
    /// otherwise ([`crate::feed::Ring::readable`]), so no read is spent to learn it again.
    empty: bool,
    /// The namespace's UDP `RcvbufErrors` when the socket was opened.
    rcvbuf_errors_at_open: u64,
    /// When the kernel's counters were last read.
    kernel_read: Option<Instant>,
}

impl std::fmt::Debug for MirrorInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorInput")
            .field("cfg", &self.cfg)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Bind the mirror's UDP port on every address (IPv4 and IPv6), as the input does.
pub fn bind(port: u16) -> io::Result<Socket> {
    let sock = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))
        .and_then(|s| {
            s.set_only_v6(false)?;
            s.bind(&SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)).into())?;
            Ok(s)
        })
        .or_else(|_| {
            // No IPv6 on this host: IPv4 only.
            let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
            s.bind(&SocketAddr::from(([0, 0, 0, 0], port)).into())?;
            Ok::<_, io::Error>(s)
        })?;
    sock.set_nonblocking(true)?;
    Ok(sock)
}

impl MirrorInput {
    /// Bind the port and get ready to select the packets of `maps`; with `tap`, both directions
    /// go to the comparison (`sample`: `--compare-sample`).
    pub fn open(
        cfg: MirrorConfig,
        maps: &[PortMap],
        tap: Option<(Tap, f64)>,
    ) -> io::Result<MirrorInput> {
        let sock = bind(cfg.port)
            .map_err(|e| io::Error::new(e.kind(), format!("binding UDP port {}: {e}", cfg.port)))?;
        if nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::RcvBufForce, &RCVBUF)
            .is_err()
        {
            let _ = sock.set_recv_buffer_size(RCVBUF);
        }
        let ports: Vec<u16> = maps.iter().map(|m| m.online_port).collect();
        match crate::bpf::build_mirror_filter(cfg.encap == Encap::Geneve, &cfg.vnis, &ports, tap.is_some()) {
            Some(prog) => {
                if let Err(e) = crate::sys::attach_filter(sock.as_fd(), &prog) {
                    tracing::warn!("mirror socket: no kernel filter ({e}): every datagram is read and selected here");
                }
            }
            None => tracing::info!("mirror socket: too many ports for a kernel filter: every datagram is read and selected here"),
        }
        Ok(MirrorInput {
            sock,
            selector: Selector::new(&cfg, maps),
            cfg,
            bufs: vec![0; RECV_BATCH * DATAGRAM_MAX],
            pending: Vec::with_capacity(RECV_BATCH),
            stats: MirrorStats::default(),
            capture: CaptureStats::default(),
            shared: Arc::new(MirrorShared::default()),
            tap,
            tapped: Vec::new(),
            exported: None,
            empty: false,
            rcvbuf_errors_at_open: udp_rcvbuf_errors().unwrap_or(0),
            kernel_read: None,
        })
    }

    /// The counters, shared with whoever wants them after the input moved into its thread.
    #[must_use]
    pub fn shared(&self) -> Arc<MirrorShared> {
        self.shared.clone()
    }

    /// The UDP port bound.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.cfg.port
    }

    /// One `recvmmsg` without waiting, into the buffers `pending` does not hold yet; returns
    /// the datagrams held.
    fn read(&mut self) -> io::Result<usize> {
        let held = self.pending.len();
        if held == RECV_BATCH {
            return Ok(held);
        }
        let (fd, pending, bufs) = (
            self.sock.as_raw_fd(),
            &mut self.pending,
            &mut self.bufs[held * DATAGRAM_MAX..],
        );
        let got = HEADERS.with_borrow_mut(|headers| {
            // No allocation: the slices live on the stack, as long as the headers' borrow.
            let mut chunks = bufs.chunks_mut(DATAGRAM_MAX);
            let mut iovs: [[io::IoSliceMut<'_>; 1]; RECV_BATCH] =
                std::array::from_fn(|_| [io::IoSliceMut::new(chunks.next().unwrap_or_default())]);
            let res = recvmmsg(
                fd,
                headers,
                iovs.iter_mut().take(RECV_BATCH - held),
                MsgFlags::MSG_DONTWAIT,
                None,
            )?;
            for r in res {
                pending.push((r.bytes, r.flags.contains(MsgFlags::MSG_TRUNC)));
            }
            Ok(())
        });
        match got {
            Ok(()) => {}
            Err(nix::errno::Errno::EAGAIN) => {}
            Err(e) => {
                self.empty = true;
                return Err(e.into());
            }
        }
        // A short read emptied the socket; a datagram arriving since makes the next poll
        // return at once (it is level-triggered), so none waits.
        self.empty = self.pending.len() < RECV_BATCH;
        if self.pending.len() > held {
            self.stats.reads += 1;
        }
        Ok(self.pending.len())
    }

    fn publish(&mut self, now: Instant) {
        self.capture.packets = self.stats.client_packets;
        self.capture.truncated = self.stats.drops.truncated;
        self.capture.kernel_drops = self.stats.socket_drops;
        self.stats.copy_into(&mut lock(&self.shared.stats));
        if self.exported.is_none_or(|t| now >= t + EXPORT_EVERY) {
            self.exported = Some(now);
            export(&self.stats);
        }
    }
}

impl crate::feed::Ring for MirrorInput {
    fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    fn ready(&mut self) -> bool {
        if self.pending.is_empty() && !self.empty {
            if let Err(e) = self.read() {
                tracing::debug!("mirror socket: {e}");
            }
        }
        !self.pending.is_empty()
    }

    fn drain(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> usize {
        let now = Instant::now();
        let mut reads = 0;
        while reads < max && self.ready() {
            reads += 1;
            // --compare times the datagrams of each read by its own time (they are read as
            // they arrive; two in one recvmmsg batch share it)
            let now = Instant::now();
            for (i, &(len, cut)) in self.pending.iter().enumerate() {
                if cut || len > DATAGRAM_MAX {
                    self.stats.datagrams += 1;
                    self.stats.drops.truncated += 1;
                    continue;
                }
                let payload = &self.bufs[i * DATAGRAM_MAX..i * DATAGRAM_MAX + len];
                let Some((dir, ip, client)) = self.selector.judge(payload, &mut self.stats) else {
                    continue;
                };
                if dir == Direction::Client {
                    self.capture.bytes += ip.len() as u64;
                    f(ip);
                }
                if let Some((_, sample)) = &self.tap {
                    if sampled_client(client.ip(), client.port(), *sample) {
                        self.tapped.push((now, ip.to_vec()));
                    }
                }
            }
            self.pending.clear();
        }
        if let Some((tap, _)) = &self.tap {
            tap.packets(std::mem::take(&mut self.tapped));
        }
        self.publish(now);
        reads
    }

    fn stats(&self) -> CaptureStats {
        self.capture
    }

    fn readable(&mut self) {
        for wait in [PROBE, GATHER - PROBE] {
            std::thread::sleep(wait);
            self.empty = false;
            if let Err(e) = self.read() {
                tracing::debug!("mirror socket: {e}");
            }
            if self.pending.len() == RECV_BATCH {
                break; // a burst: hand it over now
            }
        }
    }

    fn refresh_kernel_stats(&mut self) -> io::Result<()> {
        let now = Instant::now();
        if self
            .kernel_read
            .is_some_and(|t| now < t + KERNEL_STATS_EVERY)
        {
            return Ok(());
        }
        self.kernel_read = Some(now);
        if let Some(d) = socket_drops(self.cfg.port) {
            // The socket's counter holds its filter's drops too; the namespace's receive-buffer
            // errors tell the two apart (other UDP sockets of a mirror host rarely overflow).
            let full = udp_rcvbuf_errors()
                .map_or(d, |e| e.saturating_sub(self.rcvbuf_errors_at_open).min(d));
            self.stats.socket_drops = full;
            self.stats.filtered = d - full;
        }
        self.publish(now);
        Ok(())
    }

    fn final_kernel_stats(&mut self) -> io::Result<()> {
        self.kernel_read = None;
        crate::feed::Ring::refresh_kernel_stats(self)
    }

    fn take_error(&self) -> Option<io::Error> {
        self.sock.take_error().ok().flatten()
    }
}

/// The drops of the UDP sockets bound to `port`, from `/proc/net/udp` and `/proc/net/udp6`
/// (the last column; the local address's port is the hex after the colon).
pub fn socket_drops(port: u16) -> Option<u64> {
    let want = format!(":{port:04X}");
    let mut total = None;
    for f in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.get(1).is_some_and(|l| l.ends_with(&want)) {
                if let Some(d) = cols.last().and_then(|d| d.parse::<u64>().ok()) {
                    *total.get_or_insert(0) += d;
                }
            }
        }
    }
    total
}

/// The network namespace's UDP receive-buffer errors (`RcvbufErrors` of `Udp:` in
/// `/proc/net/snmp` and `Udp6RcvbufErrors` in `/proc/net/snmp6`): a datagram its socket's full
/// buffer dropped, which a socket filter's drop is not.
pub fn udp_rcvbuf_errors() -> Option<u64> {
    let snmp = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut rows = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (names, values) = (rows.next()?, rows.next()?);
    let col = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    let mut total: u64 = values.split_whitespace().nth(col)?.parse().ok()?;
    if let Ok(snmp6) = std::fs::read_to_string("/proc/net/snmp6") {
        for l in snmp6.lines() {
            let mut it = l.split_whitespace();
            if it.next() == Some("Udp6RcvbufErrors") {
                total += it.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            }
        }
    }
    Some(total)
}

fn export(s: &MirrorStats) {
    counter!(names::DATAGRAMS).absolute(s.datagrams);
    counter!(names::PACKETS, "direction" => "client").absolute(s.client_packets);
    counter!(names::PACKETS, "direction" => "server").absolute(s.server_packets);
    for (why, n) in s.drops.iter() {
        counter!(names::DROPPED, "reason" => why).absolute(n);
    }
    counter!(names::DROPPED, "reason" => "socket_buffer").absolute(s.socket_drops);
    counter!(names::DROPPED, "reason" => "kernel_filter").absolute(s.filtered);
    gauge!(names::VNIS).set(s.vnis.len() as f64);
}

#[cfg(test)]
mod tests;
