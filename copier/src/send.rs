//! Sending the engine's packets to the test server through raw `IP_HDRINCL` sockets, and its
//! super-segments (`--gso`) whole through an `AF_PACKET` socket.
//!
//! Owns: one `AF_INET`/`IPPROTO_RAW` socket (and one `AF_INET6` if the host has IPv6), with
//! `--gso` one `AF_PACKET` socket ([`crate::sys::PacketTx`]) and the way out toward each test
//! server ([`crate::egress::Egress`], looked up at its first super-segment, again every
//! [`PATH_REFRESH`], and after a failure every [`PATH_RETRY`]), a bounded queue of packets
//! waiting to go out, batching with `sendmmsg`, and what happens on a send error.
//!
//! A super-segment (a TCP packet of several MSS, `gso_size` each) leaves whole, with a
//! `virtio_net_hdr` that has the kernel (or the NIC) cut it as TSO cuts a client's, when the
//! route toward its test server is an Ethernet interface whose next hop's address is known and
//! whose MTU takes a piece; otherwise, or when the `AF_PACKET` send fails with anything but
//! back-pressure, the sender cuts it itself the same way ([`cut_like_tso`]) and
//! sends the pieces through the raw socket (counted, logged once per destination and reason).
//!
//! A send error never ends the process:
//! - `EAGAIN`/`ENOBUFS` (socket buffer or qdisc full): the packet stays queued, sending backs off
//!   (1 ms doubling to 50 ms, reset by the next success), counted;
//! - `EPERM`/`EACCES` (a firewall rule said no): the packet is dropped, short back-off, counted;
//! - `EMSGSIZE` (the route's MTU is below `--mtu`): the TCP segment is split to the route's MTU
//!   (asked from the kernel through a connected UDP probe socket; halving if that fails, never
//!   below 576/1280 bytes), and later packets of that family are split before sending; logged
//!   once, counted;
//! - anything else: dropped and logged with the session (at most one line a second), counted.
//!
//! Invariants: the queue holds at most `queue_cap` packets, a super-segment weighing as many as
//! the MTU-sized packets it holds (more are dropped and counted, the engine retransmits);
//! packets leave in the order they were queued, through either socket; buffers are recycled.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::wire::parse_tcp_packet;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::egress::{self, Egress};
use crate::sys;

mod split;

pub use split::{cut_like_tso, split_tcp_packet, SplitError};

/// How long a way out toward a test server is used before it is looked up again (the next
/// hop's Ethernet address may change).
pub const PATH_REFRESH: Duration = Duration::from_secs(30);
/// How long after a failed lookup (or a failed send) super-segments toward that destination
/// are cut in user space before the path is looked up again.
pub const PATH_RETRY: Duration = Duration::from_secs(2);
/// Bytes that weigh one packet in the queue (see [`RawSender::pending`]).
const WEIGHT_BYTES: usize = 1536;

/// Smallest packet the splitter produces, per family (the minimum MTUs IP guarantees).
const MIN_SPLIT_V4: usize = 576;
const MIN_SPLIT_V6: usize = 1280;
const BACKOFF_MIN: Duration = Duration::from_millis(1);
const BACKOFF_MAX: Duration = Duration::from_millis(50);

/// How to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendConfig {
    /// Send buffer size asked for each socket.
    pub sndbuf: usize,
    /// Most packets waiting in the queue.
    pub queue_cap: usize,
    /// The `--mtu` the engine cuts to (for messages only).
    pub mtu: u16,
    /// Send super-segments whole where the path takes them (`--gso auto`).
    pub gso: bool,
}

impl Default for SendConfig {
    fn default() -> Self {
        SendConfig {
            sndbuf: 4 << 20,
            queue_cap: 8192,
            mtu: 1500,
            gso: false,
        }
    }
}

/// Counters of the sender, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendStats {
    /// Packets the kernel took.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// `sendmmsg` calls.
    pub syscalls: u64,
    /// `EMSGSIZE` answers.
    pub err_msgsize: u64,
    /// `ENOBUFS` answers.
    pub err_nobufs: u64,
    /// `EAGAIN` answers.
    pub err_again: u64,
    /// `EPERM`/`EACCES` answers (packet dropped).
    pub err_perm: u64,
    /// Other errors (packet dropped).
    pub err_other: u64,
    /// Packets dropped because the queue was full.
    pub dropped_queue_full: u64,
    /// Packets dropped because their family has no socket (IPv6 unavailable).
    pub dropped_no_socket: u64,
    /// Packets dropped because they were too big and could not be split.
    pub dropped_unsplittable: u64,
    /// Extra packets created by splitting (super-segments cut in user space included).
    pub split_extra: u64,
    /// Super-segments the kernel took whole through the `AF_PACKET` socket.
    pub gso_whole: u64,
    /// The segments those stand for on the wire.
    pub gso_wire_segments: u64,
    /// Super-segments cut in user space (no way out for them, or their send failed).
    pub gso_cut: u64,
    /// `AF_PACKET` sends that failed with anything but back-pressure (the super-segment was
    /// then cut and sent through the raw socket).
    pub gso_errors: u64,
}

/// What kind of send error this is, for counting and for the reaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendErrorKind {
    /// `EMSGSIZE`.
    MsgSize,
    /// `ENOBUFS`.
    NoBufs,
    /// `EAGAIN`/`EWOULDBLOCK`.
    Again,
    /// `EPERM`/`EACCES`.
    Perm,
    /// `EINTR`: just try again.
    Interrupted,
    /// Anything else.
    Other,
}

impl SendErrorKind {
    /// Classify an error of `sendmmsg`.
    pub fn of(e: &io::Error) -> SendErrorKind {
        match e.raw_os_error() {
            Some(libc::EMSGSIZE) => SendErrorKind::MsgSize,
            Some(libc::ENOBUFS) => SendErrorKind::NoBufs,
            Some(libc::EAGAIN) => SendErrorKind::Again,
            Some(libc::EPERM) | Some(libc::EACCES) => SendErrorKind::Perm,
            Some(libc::EINTR) => SendErrorKind::Interrupted,
            _ => SendErrorKind::Other,
        }
    }

    /// Label value for metrics.
    pub fn label(self) -> &'static str {
        match self {
            SendErrorKind::MsgSize => "emsgsize",
            SendErrorKind::NoBufs => "enobufs",
            SendErrorKind::Again => "eagain",
            SendErrorKind::Perm => "eperm",
            SendErrorKind::Interrupted => "eintr",
            SendErrorKind::Other => "other",
        }
    }
}

/// Allows one log line per interval and counts what it held back.
#[derive(Debug, Default)]
struct LogLimit {
    next: Option<Instant>,
    suppressed: u64,
}

impl LogLimit {
    /// `Some(suppressed since the last line)` if a line may be logged now.
    fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.next {
            Some(t) if now < t => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.next = Some(now + Duration::from_secs(1));
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

/// Packet buffers kept for reuse (2 KiB each, more for large segments). A burst queues up to
/// the engine loop's high-water mark (4,096 packets); keeping a buffer for each of them held
/// 2 MiB for good after the burst (see "End to end: RSS at 10,000 live sessions" in
/// BENCHMARKS.md), so past this many a buffer goes back to the allocator.
const POOL_BUFFERS: usize = 128;
/// Places the send queue keeps once a burst is over.
const QUEUE_KEPT: usize = 1024;

#[derive(Debug)]
struct Pending {
    tuple: FourTuple,
    dst: SockAddr,
    v6: bool,
    buf: Vec<u8>,
    /// A super-segment to send whole: its `virtio_net_hdr` (its checksum field already holds
    /// the pseudo-header sum) and `gso_size`.
    gso: Option<([u8; sys::VNET_HDR_LEN], u16)>,
}

impl Pending {
    fn weight(&self) -> usize {
        1 + self.buf.len() / WEIGHT_BYTES
    }
}

/// The way out toward one destination for super-segments.
#[derive(Debug)]
enum Path {
    /// Found; looked up again after `until`.
    Ready { egress: Egress, until: Instant },
    /// None (why); looked up again after `until`.
    Missing { why: String, until: Instant },
}

/// The raw sockets and the send queue.
#[derive(Debug)]
pub struct RawSender {
    v4: Socket,
    v6: Option<Socket>,
    /// UDP sockets (made with the raw ones, so in the same network namespace) connected to a
    /// destination to ask the kernel for the route's MTU after EMSGSIZE.
    probes: [Option<Socket>; 2],
    cfg: SendConfig,
    /// The `AF_PACKET` socket for super-segments (`--gso`), if it could be opened.
    packet: Option<sys::PacketTx>,
    /// The way out toward each destination of super-segments.
    paths: HashMap<IpAddr, Path>,
    queue: VecDeque<Pending>,
    /// The queue's weight ([`Pending::weight`] summed).
    weight: usize,
    pool: Vec<Vec<u8>>,
    backoff: Duration,
    resume_at: Option<Instant>,
    /// Packets larger than this are split before sending ([v4, v6]); learned from EMSGSIZE.
    split_above: [Option<usize>; 2],
    stats: SendStats,
    other_log: LogLimit,
    perm_log: LogLimit,
    msgsize_logged: bool,
    gso_log: LogLimit,
}

fn raw_socket(domain: Domain, cfg: &SendConfig) -> io::Result<Socket> {
    let s = Socket::new(domain, Type::RAW, Some(Protocol::from(libc::IPPROTO_RAW)))?;
    if domain == Domain::IPV4 {
        s.set_header_included_v4(true)?;
    } else {
        // Implied by IPPROTO_RAW on AF_INET6; set it anyway where the kernel accepts it.
        let _ = s.set_header_included_v6(true);
    }
    s.set_nonblocking(true)?;
    if sys::force_send_buffer(s.as_fd(), cfg.sndbuf).is_err() {
        s.set_send_buffer_size(cfg.sndbuf)?;
    }
    Ok(s)
}

impl RawSender {
    /// Open the IPv4 socket (required) and the IPv6 one (optional: a warning if unavailable).
    /// Needs CAP_NET_RAW.
    pub fn open(cfg: SendConfig) -> io::Result<RawSender> {
        let v4 = raw_socket(Domain::IPV4, &cfg)?;
        let v6 = match raw_socket(Domain::IPV6, &cfg) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("no IPv6 raw socket ({e}); IPv6 copies will be dropped and counted");
                None
            }
        };
        let probe = |d: Domain| Socket::new(d, Type::DGRAM, None).ok();
        let packet = if cfg.gso {
            match sys::PacketTx::open(cfg.sndbuf) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!("--gso: no AF_PACKET socket with PACKET_VNET_HDR ({e}); super-segments are cut in user space");
                    None
                }
            }
        } else {
            None
        };
        Ok(RawSender {
            v4,
            v6,
            probes: [probe(Domain::IPV4), probe(Domain::IPV6)],
            cfg,
            packet,
            paths: HashMap::new(),
            queue: VecDeque::with_capacity(cfg.queue_cap.min(1024)),
            weight: 0,
            pool: Vec::new(),
            backoff: Duration::ZERO,
            resume_at: None,
            split_above: [None, None],
            stats: SendStats::default(),
            other_log: LogLimit::default(),
            perm_log: LogLimit::default(),
            msgsize_logged: false,
            gso_log: LogLimit::default(),
        })
    }

    /// Whether super-segments can leave whole at all (`--gso` and the `AF_PACKET` socket).
    pub fn gso_capable(&self) -> bool {
        self.packet.is_some()
    }

    /// Queue a packet of the engine: a plain one as [`RawSender::enqueue`]; a super-segment
    /// (`gso_size` > 0) whole when the way out toward `dst` takes it, else cut in user space
    /// into pieces of `gso_size` payload bytes as TSO would.
    pub fn enqueue_segment(
        &mut self,
        tuple: FourTuple,
        dst: IpAddr,
        mut buf: Vec<u8>,
        gso_size: u16,
        now: Instant,
    ) {
        if gso_size == 0 {
            self.enqueue(tuple, dst, buf);
            return;
        }
        let v6 = dst.is_ipv6();
        if v6 && self.v6.is_none() {
            self.stats.dropped_no_socket += 1;
            self.recycle(buf);
            return;
        }
        let headers = parse_tcp_packet(&buf)
            .map(|p| p.ip_header_len + p.tcp.header_len())
            .unwrap_or(usize::MAX);
        let fits = self
            .path(dst, now)
            .is_some_and(|e| headers.saturating_add(usize::from(gso_size)) <= e.mtu as usize);
        if fits {
            if let Some(vnet) = egress::prepare_gso(&mut buf, gso_size) {
                self.push_back(Pending {
                    tuple,
                    dst: SockAddr::from(SocketAddr::new(dst, 0)),
                    v6,
                    buf,
                    gso: Some((vnet, gso_size)),
                });
                return;
            }
        }
        self.cut_and_queue(tuple, dst, buf, gso_size, false);
    }

    /// The way out toward `dst` for super-segments, looked up when unknown or stale.
    fn path(&mut self, dst: IpAddr, now: Instant) -> Option<&Egress> {
        self.packet.as_ref()?;
        let stale = match self.paths.get(&dst) {
            None => true,
            Some(Path::Ready { until, .. } | Path::Missing { until, .. }) => now >= *until,
        };
        if stale {
            let path = match egress::lookup(dst) {
                Ok(egress) => {
                    if !matches!(self.paths.get(&dst), Some(Path::Ready { egress: e, .. }) if *e == egress)
                    {
                        tracing::info!(
                            "--gso: super-segments toward {dst} leave whole through {} (AF_PACKET, next hop {}, mtu {})",
                            egress.dev,
                            egress.next_hop,
                            egress.mtu
                        );
                    }
                    Path::Ready {
                        egress,
                        until: now + PATH_REFRESH,
                    }
                }
                Err(why) => {
                    if !matches!(self.paths.get(&dst), Some(Path::Missing { why: w, .. }) if *w == why)
                    {
                        tracing::info!(
                            "--gso: super-segments toward {dst} are cut in user space for now: {why} (looked up again every {:?})",
                            PATH_RETRY
                        );
                    }
                    Path::Missing {
                        why,
                        until: now + PATH_RETRY,
                    }
                }
            };
            self.paths.insert(dst, path);
        }
        match self.paths.get(&dst) {
            Some(Path::Ready { egress, .. }) => Some(egress),
            _ => None,
        }
    }

    /// Cut a super-segment in user space and queue the pieces, at the front (a failed send)
    /// or at the back.
    fn cut_and_queue(
        &mut self,
        tuple: FourTuple,
        dst: IpAddr,
        buf: Vec<u8>,
        gso_size: u16,
        front: bool,
    ) {
        let mut pieces = Vec::new();
        match cut_like_tso(&buf, gso_size, &mut pieces) {
            Ok(n) => {
                self.stats.gso_cut += 1;
                self.stats.split_extra += n.saturating_sub(1) as u64;
                if front {
                    let addr = SockAddr::from(SocketAddr::new(dst, 0));
                    for b in pieces.into_iter().rev() {
                        let p = Pending {
                            tuple,
                            dst: addr.clone(),
                            v6: dst.is_ipv6(),
                            buf: b,
                            gso: None,
                        };
                        self.weight += p.weight();
                        self.queue.push_front(p);
                    }
                } else {
                    for b in pieces {
                        self.enqueue(tuple, dst, b);
                    }
                }
            }
            Err(e) => {
                self.stats.dropped_unsplittable += 1;
                tracing::debug!(session = %tuple, "dropping a {}-byte super-segment that cannot be cut: {e}", buf.len());
            }
        }
        self.recycle(buf);
    }

    /// An empty buffer to fill with a packet (recycled when possible).
    pub fn buffer(&mut self) -> Vec<u8> {
        let mut b = self.pool.pop().unwrap_or_else(|| Vec::with_capacity(2048));
        b.clear();
        b
    }

    /// Give back a buffer that was not queued.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < POOL_BUFFERS && buf.capacity() <= 128 * 1024 {
            self.pool.push(buf);
        }
    }

    /// Queue `buf` (a whole IP packet) for `dst`. Dropped and counted if the queue is full.
    pub fn enqueue(&mut self, tuple: FourTuple, dst: IpAddr, buf: Vec<u8>) {
        let v6 = dst.is_ipv6();
        if v6 && self.v6.is_none() {
            self.stats.dropped_no_socket += 1;
            self.recycle(buf);
            return;
        }
        if let Some(limit) = self.split_above[usize::from(v6)] {
            if buf.len() > limit {
                self.split_and_queue(tuple, dst, buf, limit, false);
                return;
            }
        }
        self.push_back(Pending {
            tuple,
            dst: SockAddr::from(SocketAddr::new(dst, 0)),
            v6,
            buf,
            gso: None,
        });
    }

    fn push_back(&mut self, p: Pending) {
        if self.weight + p.weight() > self.cfg.queue_cap {
            self.stats.dropped_queue_full += 1;
            self.recycle(p.buf);
        } else {
            self.weight += p.weight();
            self.queue.push_back(p);
        }
    }

    fn pop_front(&mut self) -> Option<Pending> {
        let p = self.queue.pop_front()?;
        self.weight -= p.weight();
        Some(p)
    }

    /// Split `buf` to `limit` and queue the pieces, at the front (a retry) or at the back.
    fn split_and_queue(
        &mut self,
        tuple: FourTuple,
        dst: IpAddr,
        buf: Vec<u8>,
        limit: usize,
        front: bool,
    ) {
        let mut pieces = Vec::new();
        match split_tcp_packet(&buf, limit, &mut pieces) {
            Ok(n) => {
                self.stats.split_extra += n.saturating_sub(1) as u64;
                let v6 = dst.is_ipv6();
                let addr = SockAddr::from(SocketAddr::new(dst, 0));
                let items = pieces.into_iter().map(|b| Pending {
                    tuple,
                    dst: addr.clone(),
                    v6,
                    buf: b,
                    gso: None,
                });
                if front {
                    for p in items.rev() {
                        self.weight += p.weight();
                        self.queue.push_front(p);
                    }
                } else {
                    for p in items {
                        self.push_back(p);
                    }
                }
            }
            Err(e) => {
                self.stats.dropped_unsplittable += 1;
                tracing::debug!(session = %tuple, "dropping a {}-byte packet that does not fit: {e}", buf.len());
            }
        }
        self.recycle(buf);
    }

    /// The kernel's MTU for the route to `dst`, if it can tell.
    fn route_mtu(&self, dst: IpAddr) -> Option<usize> {
        let probe = self.probes[usize::from(dst.is_ipv6())].as_ref()?;
        probe
            .connect(&SockAddr::from(SocketAddr::new(dst, 9)))
            .ok()?;
        sys::connected_mtu(probe.as_fd(), dst.is_ipv6())
            .ok()
            .map(|m| m as usize)
    }

    /// Packets waiting, a super-segment weighing one packet per 1,536 bytes it holds (so the
    /// engine loop's high-water mark bounds bytes as it did with MTU-sized packets).
    pub fn pending(&self) -> usize {
        self.weight
    }

    /// When [`RawSender::flush`] should run again if packets wait out a back-off.
    pub fn wakeup(&self) -> Option<Instant> {
        if self.queue.is_empty() {
            None
        } else {
            self.resume_at
        }
    }

    /// Counters.
    pub fn stats(&self) -> &SendStats {
        &self.stats
    }

    fn back_off(&mut self, now: Instant) {
        self.backoff = (self.backoff * 2).clamp(BACKOFF_MIN, BACKOFF_MAX);
        self.resume_at = Some(now + self.backoff);
    }

    /// Send what is queued, in batches, until the queue is empty or the kernel pushes back.
    pub fn flush(&mut self, now: Instant) {
        if let Some(t) = self.resume_at {
            if now < t {
                return;
            }
            self.resume_at = None;
        }
        if self.queue.is_empty() && self.queue.capacity() > QUEUE_KEPT {
            // The last burst is over: its queue's room goes back.
            self.queue.shrink_to(QUEUE_KEPT);
        }
        while let Some(front) = self.queue.front() {
            if front.gso.is_some() {
                if !self.send_whole(now) {
                    return;
                }
                continue;
            }
            let v6 = front.v6;
            let result = {
                let batch: Vec<(&[u8], &SockAddr)> = self
                    .queue
                    .iter()
                    .take_while(|p| p.v6 == v6 && p.gso.is_none())
                    .take(sys::MAX_BATCH)
                    .map(|p| (p.buf.as_slice(), &p.dst))
                    .collect();
                let sock = if v6 { self.v6.as_ref() } else { Some(&self.v4) };
                // Queued v6 packets imply a v6 socket (checked in enqueue).
                let sock = sock.expect("v6 packet queued without a v6 socket");
                self.stats.syscalls += 1;
                sys::send_batch(sock.as_fd(), &batch)
            };
            match result {
                Ok(n) => {
                    for _ in 0..n {
                        if let Some(p) = self.pop_front() {
                            self.stats.packets += 1;
                            self.stats.bytes += p.buf.len() as u64;
                            self.recycle(p.buf);
                        }
                    }
                    self.backoff = Duration::ZERO;
                }
                Err(e) => {
                    let kind = SendErrorKind::of(&e);
                    if !self.on_error(now, kind, &e) {
                        return;
                    }
                }
            }
        }
    }

    /// Send the super-segment at the front whole through the `AF_PACKET` socket; `false` to
    /// stop flushing for now (back-pressure). A way out gone meanwhile, or a send that fails
    /// otherwise, has it cut and its pieces put at the front.
    fn send_whole(&mut self, now: Instant) -> bool {
        let Some(p) = self.pop_front() else {
            return true;
        };
        let Some((vnet, gso_size)) = p.gso else {
            self.push_front(p);
            return true;
        };
        let Some(dst) = p.dst.as_socket().map(|s| s.ip()) else {
            self.recycle(p.buf);
            return true;
        };
        let egress = match self.paths.get(&dst) {
            Some(Path::Ready { egress, .. }) => Some(egress),
            _ => None,
        };
        let result = match (self.packet.as_ref(), egress) {
            (Some(sock), Some(e)) => {
                self.stats.syscalls += 1;
                let ethertype = if p.v6 {
                    egress::ETH_P_IPV6
                } else {
                    egress::ETH_P_IP
                };
                sock.send(e.ifindex, ethertype, &vnet, &e.eth_header(p.v6), &p.buf)
            }
            _ => {
                self.cut_and_queue(p.tuple, dst, p.buf, gso_size, true);
                return true;
            }
        };
        match result {
            Ok(_) => {
                let payload = parse_tcp_packet(&p.buf)
                    .map(|t| t.payload().len())
                    .unwrap_or(0);
                self.stats.packets += 1;
                self.stats.bytes += p.buf.len() as u64;
                self.stats.gso_whole += 1;
                self.stats.gso_wire_segments +=
                    payload.div_ceil(usize::from(gso_size).max(1)) as u64;
                self.backoff = Duration::ZERO;
                self.recycle(p.buf);
                true
            }
            Err(e) => match SendErrorKind::of(&e) {
                SendErrorKind::Interrupted => {
                    self.push_front(p);
                    true
                }
                kind @ (SendErrorKind::Again | SendErrorKind::NoBufs) => {
                    if kind == SendErrorKind::Again {
                        self.stats.err_again += 1;
                    } else {
                        self.stats.err_nobufs += 1;
                    }
                    self.push_front(p);
                    self.back_off(now);
                    false
                }
                _ => {
                    self.stats.gso_errors += 1;
                    if let Some(held) = self.gso_log.allow(now) {
                        tracing::warn!(
                            session = %p.tuple,
                            "--gso: sending a super-segment whole toward {dst} failed ({e}); cutting super-segments                              toward it in user space for {PATH_RETRY:?} ({held} similar failures not logged)"
                        );
                    }
                    self.paths.insert(
                        dst,
                        Path::Missing {
                            why: e.to_string(),
                            until: now + PATH_RETRY,
                        },
                    );
                    self.cut_and_queue(p.tuple, dst, p.buf, gso_size, true);
                    true
                }
            },
        }
    }

    fn push_front(&mut self, p: Pending) {
        self.weight += p.weight();
        self.queue.push_front(p);
    }

    /// React to an error of the front packet; `false` to stop flushing for now.
    fn on_error(&mut self, now: Instant, kind: SendErrorKind, e: &io::Error) -> bool {
        match kind {
            SendErrorKind::Interrupted => true,
            SendErrorKind::Again | SendErrorKind::NoBufs => {
                if kind == SendErrorKind::Again {
                    self.stats.err_again += 1;
                } else {
                    self.stats.err_nobufs += 1;
                }
                self.back_off(now);
                false
            }
            SendErrorKind::Perm => {
                self.stats.err_perm += 1;
                if let Some(p) = self.pop_front() {
                    if let Some(held) = self.perm_log.allow(now) {
                        tracing::warn!(
                            session = %p.tuple,
                            "send refused ({e}): a firewall rule on this host drops the copies? ({held} more refusals not logged)"
                        );
                    }
                    self.recycle(p.buf);
                }
                self.back_off(now);
                false
            }
            SendErrorKind::MsgSize => {
                self.stats.err_msgsize += 1;
                let Some(p) = self.pop_front() else {
                    return true;
                };
                let min = if p.v6 { MIN_SPLIT_V6 } else { MIN_SPLIT_V4 };
                let len = p.buf.len();
                let dst = p.dst.as_socket().map(|s| s.ip());
                if len <= min || dst.is_none() {
                    self.stats.dropped_unsplittable += 1;
                    tracing::debug!(session = %p.tuple, "EMSGSIZE for a {len}-byte packet: dropped");
                    self.recycle(p.buf);
                    return true;
                }
                let limit = match dst.and_then(|d| self.route_mtu(d)) {
                    Some(mtu) if mtu < len => mtu.max(min),
                    _ => (len / 2 + 60).min(len - 1).max(min),
                };
                let slot = &mut self.split_above[usize::from(p.v6)];
                *slot = Some(slot.map_or(limit, |l| l.min(limit)));
                if !self.msgsize_logged {
                    self.msgsize_logged = true;
                    tracing::warn!(
                        session = %p.tuple,
                        "a {len}-byte copy is larger than the route's MTU (EMSGSIZE; --mtu is {}): splitting such \
                         segments to {limit} bytes from now on; set --mtu to the path MTU toward the test server",
                        self.cfg.mtu
                    );
                }
                if let Some(dst) = dst {
                    self.split_and_queue(p.tuple, dst, p.buf, limit, true);
                }
                true
            }
            SendErrorKind::Other => {
                self.stats.err_other += 1;
                if let Some(p) = self.pop_front() {
                    if let Some(held) = self.other_log.allow(now) {
                        tracing::warn!(session = %p.tuple, "send of a {}-byte copy failed: {e} ({held} similar errors not logged)", p.buf.len());
                    }
                    self.recycle(p.buf);
                }
                true
            }
        }
    }
}

#[cfg(test)]
mod tests;
