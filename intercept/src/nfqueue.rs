//! NFQUEUE workers: one blocking thread per queue reads the test service's responses, asks the
//! router what to do, gives every packet a verdict and hands records to the copiers' outlets.
//! The netlink messages are ours ([`crate::netlink`], over the socket of [`crate::sys`]).
//!
//! Invariants:
//! - every packet read gets a verdict; it is ACCEPT only when the router says
//!   `Decision::Accept`, DROP otherwise (also when the copier's queue is full or the copier is
//!   gone: the record is lost and counted, the packet still never leaves). A receive batch's
//!   ACCEPTs go first, one message each, then one `NFQNL_MSG_VERDICT_BATCH` DROPs every other
//!   packet of the queue up to the batch's last dropped id, all in one `send`. Packets come
//!   in id order, so that batch covers only packets already read; one the worker could not
//!   parse (or whose verdict was lost) is dropped by the next batch: fail closed;
//! - one `recvmmsg` takes every datagram already waiting (up to [`RECV_BATCH`]) and sleeps
//!   only when none is, so a busy queue costs two system calls per batch, not per packet;
//! - the queue is bound with fail-open off, so when the intercept is slow the kernel drops
//!   rather than accepts; ENOBUFS (the kernel could not deliver to us) is counted as an overrun;
//! - the copy range is headers only (128 bytes, enough for 60-byte IP and TCP headers) plus the
//!   payload asked for, and GSO delivery is on (`NFQA_CFG_F_GSO`): a super-segment of up to
//!   64 KB is one packet, one verdict and one record, whose length is the IP header's (an
//!   accepted one is segmented by the kernel after the verdict; its checksums are partial,
//!   and nothing here reads them);
//! - the router lock is held only for the decisions of one batch, never during the verdict
//!   or a write; a batch's records go to each copier in one [`crate::outlet::Outlet::deliver`]:
//!   written by this thread in one non-blocking send when the copier's connection is idle,
//!   else queued for its control writer;
//! - before it writes, the worker looks once more without waiting (`MSG_DONTWAIT`, at most
//!   `MAX_RELOOKS` times) for packets queued while it decided, and handles them (verdicts
//!   included) first, so that an answer's head and body a few µs apart share one write. No
//!   timer: when nothing more is there, the records go at once;
//! - after a cycle whose records nothing waits on, the worker may rest before its next receive,
//!   as long as the copiers allow (see [`crate::rest`]), so that the packets queued meanwhile
//!   share one receive, one verdict message and one write;
//! - a worker that ends (an error or a panic) is reported loudly by [`run_supervised`]: an
//!   error log line, `intercept_nfqueue_workers_died_total{queue}`, and the reason returned to
//!   the daemon, which then stops with a non-zero exit status.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use metrics::counter;

use crate::metrics::{
    NFQUEUE_OVERRUNS, NFQUEUE_RESTS, PACKETS_QUEUED, VERDICT_ERRORS, WORKERS_DIED,
};
use crate::netlink::{self, Builder, Msg, Packet, Verdict, CFG_F_FAIL_OPEN, CFG_F_GSO};
use crate::outlet::{push_all, Shared};
use crate::rest::{rests_after, CycleSeen};
use crate::sys::{NetlinkSocket, RecvBatch};

/// Bytes copied per packet when no payload is asked for: IPv4 (≤ 60) + TCP (≤ 60) headers.
pub const HEADER_COPY: usize = 128;

/// Receive buffer asked for the netlink socket: at 20k packets/s the kernel's 208 KiB default
/// holds about 13 ms of responses, too little when the host is busy for a moment.
pub const RCVBUF: usize = 16 << 20;

/// Packets the kernel may keep waiting for a verdict on one queue (its default is 1024).
pub const QUEUE_MAX_LEN: u32 = 16384;

/// Most datagrams (queued packets) one receive takes.
pub const RECV_BATCH: usize = 64;

/// Room for a packet message's netlink headers and attributes beyond the bytes copied.
const MSG_OVERHEAD: usize = 4096;

/// Consecutive receive errors (other than ENOBUFS) after which a worker gives up.
const MAX_CONSECUTIVE_ERRORS: u32 = 100;

/// A queue opened and bound, ready to be served by [`run`] on its own thread.
#[derive(Debug)]
pub struct BoundQueue {
    sock: NetlinkSocket,
    num: u16,
    /// Bytes per receive buffer: the copy range plus the message's headers.
    msg_size: usize,
    /// The last packet read while binding (before the router could be asked): [`run`] drops
    /// it and everything before it first.
    stale: Option<u32>,
}

impl BoundQueue {
    /// The queue number.
    pub fn num(&self) -> u16 {
        self.num
    }
}

/// Run a worker's body (normally [`run`]) and report its end, whether it returned or
/// panicked: an error log line and `intercept_nfqueue_workers_died_total{queue}`. Returns the
/// reason, for the daemon to stop on.
pub fn run_supervised(queue: u16, body: impl FnOnce() -> Result<()>) -> String {
    let why = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => "stopped".to_string(),
        Ok(Err(e)) => format!("{e:#}"),
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_string());
            format!("panicked: {msg}")
        }
    };
    counter!(WORKERS_DIED, "queue" => queue.to_string()).increment(1);
    tracing::error!(
        queue,
        "NFQUEUE worker of queue {queue} died: {why}; the packets of this queue get no verdict any more \
         (the kernel drops them); the intercept stops with an error"
    );
    format!("queue {queue}: {why}")
}

/// The copy range for `payload_bytes` of payload.
pub fn copy_range(payload_bytes: usize) -> u16 {
    u16::try_from(HEADER_COPY + payload_bytes).unwrap_or(u16::MAX)
}

/// Whether packet id `a` comes after `b` (ids wrap around).
fn id_after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

fn latest(cur: Option<u32>, id: u32) -> Option<u32> {
    match cur {
        Some(c) if !id_after(id, c) => Some(c),
        _ => Some(id),
    }
}

/// Open a netlink socket and bind queue `num`: fail-open off, GSO delivery on, the copy range
/// for `payload_bytes`, [`QUEUE_MAX_LEN`], a [`RCVBUF`] receive buffer and ENOBUFS reports.
pub fn bind(num: u16, payload_bytes: usize) -> Result<BoundQueue> {
    let sock = NetlinkSocket::open_netfilter()
        .context("open the NFQUEUE netlink socket (needs CAP_NET_ADMIN)")?;
    match sock.force_rcvbuf(RCVBUF) {
        Ok(n) => tracing::debug!("NFQUEUE socket receive buffer: {n} bytes"),
        Err(e) => tracing::warn!("could not enlarge the NFQUEUE socket's receive buffer: {e}"),
    }
    sock.report_enobufs(true)
        .context("enable ENOBUFS reports on the NFQUEUE socket")?;
    let range = copy_range(payload_bytes);
    let steps = [
        format!("bind NFQUEUE queue {num} (is another intercept bound to it?)"),
        format!("set the copy range of queue {num}"),
        format!("turn fail-open off and GSO delivery on for queue {num}"),
        format!("set the kernel queue length of queue {num}"),
    ];
    let mut b = Builder::new();
    b.bind(1, num);
    b.copy_range(2, num, u32::from(range));
    b.flags(3, num, CFG_F_GSO, CFG_F_GSO | CFG_F_FAIL_OPEN);
    b.queue_max_len(4, num, QUEUE_MAX_LEN);
    sock.send(b.bytes())
        .with_context(|| format!("configure NFQUEUE queue {num}"))?;
    let msg_size = usize::from(range) + MSG_OVERHEAD;
    let mut buf = vec![0u8; msg_size];
    let mut acked = [false; 4];
    let mut failed: Option<(usize, i32)> = None;
    let mut stale = None;
    while !acked.iter().all(|&a| a) {
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => continue,
            Err(e) => return Err(e).with_context(|| format!("configure NFQUEUE queue {num}")),
        };
        for m in netlink::messages(&buf[..n]) {
            match m {
                Msg::Ack { seq, errno } if (1..=4).contains(&seq) => {
                    let i = seq as usize - 1;
                    acked[i] = true;
                    if errno != 0 && !matches!(failed, Some((j, _)) if j < i) {
                        failed = Some((i, errno));
                    }
                }
                // Packets queued while we configure: dropped by `run` before anything else.
                Msg::Packet(Packet { id, .. }) | Msg::Malformed(Some(id)) => {
                    stale = latest(stale, id)
                }
                _ => {}
            }
        }
    }
    if let Some((i, errno)) = failed {
        return Err(io::Error::from_raw_os_error(errno)).context(steps[i].clone());
    }
    Ok(BoundQueue {
        sock,
        num,
        msg_size,
        stale,
    })
}

/// The verdict messages of one receive batch: an ACCEPT for each accepted packet, then one
/// batch DROP up to the last other packet (or unparsed one, `unparsed_max`). Pure, for the tests: `accepted(i)` is the router's decision on packet `i`.
pub(crate) fn verdicts<'a>(
    queue: u16,
    packets: &[Packet<'a>],
    unparsed_max: Option<u32>,
    accepted: impl Fn(usize) -> bool,
    out: &mut Builder,
) {
    let mut drop_upto = unparsed_max;
    for (i, p) in packets.iter().enumerate() {
        if accepted(i) {
            out.verdict(queue, p.id, Verdict::Accept);
        } else {
            drop_upto = latest(drop_upto, p.id);
        }
    }
    if let Some(id) = drop_upto {
        out.verdict_batch(queue, id, Verdict::Drop);
    }
}

/// Serve a bound queue until an unrecoverable error. Meant for a dedicated thread; it never
/// returns `Ok`.
pub fn run(bound: BoundQueue, shared: Arc<Shared>) -> Result<()> {
    let BoundQueue {
        sock,
        num,
        msg_size,
        stale,
    } = bound;
    let label = num.to_string();
    let queued = counter!(PACKETS_QUEUED, "queue" => label.clone());
    let overruns = counter!(NFQUEUE_OVERRUNS, "queue" => label.clone());
    let rests = counter!(NFQUEUE_RESTS, "queue" => label);
    shared.rest.enlist_current_worker();
    let verdict_errors = counter!(VERDICT_ERRORS);
    let count = (4 << 20) / msg_size;
    let mut batch = RecvBatch::new(count.clamp(8, RECV_BATCH), msg_size);
    let mut out = Builder::new();
    let mut accepted: Vec<bool> = Vec::with_capacity(batch.capacity());
    let mut deliveries = Vec::with_capacity(batch.capacity());
    if let Some(id) = stale {
        out.verdict_batch(num, id, Verdict::Drop);
        if let Err(e) = sock.send(out.bytes()) {
            verdict_errors.increment(1);
            tracing::error!(queue = num, "NFQUEUE verdict failed: {e}");
        }
    }
    let mut errors = 0u32;
    let mut ctx = Ctx {
        seen: CycleSeen::default(),
        sock: &sock,
        num,
        shared: &shared,
        queued,
        verdict_errors,
        out: &mut out,
        accepted: &mut accepted,
        deliveries: &mut deliveries,
    };
    loop {
        let n = match ctx.sock.recv_batch(&mut batch) {
            Ok(n) => {
                errors = 0;
                n
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                overruns.increment(1);
                tracing::warn!(
                    queue = num,
                    "NFQUEUE overrun: the kernel dropped packets it could not deliver to us"
                );
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                errors += 1;
                tracing::error!(queue = num, "NFQUEUE receive failed: {e}");
                if errors >= MAX_CONSECUTIVE_ERRORS {
                    bail!("NFQUEUE queue {num}: {errors} receive errors in a row, last: {e}");
                }
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        ctx.seen = CycleSeen {
            full: n >= batch.capacity(),
            ..CycleSeen::default()
        };
        ctx.handle(&batch, n);
        // Before writing, look once more (without waiting) for packets queued while we
        // decided: an answer's head and body come a few µs apart, and taken now the body's
        // record goes in the head's write (one frame, one wake-up of the copier) instead of
        // a write of its own. A lone record is not held: when nothing is there, it goes now.
        let mut looks = 0;
        while RELOOK && !ctx.deliveries.is_empty() && looks < MAX_RELOOKS {
            looks += 1;
            match ctx.sock.recv_batch_now(&mut batch) {
                Ok(n) if n > 0 => {
                    ctx.seen.full |= n >= batch.capacity();
                    ctx.handle(&batch, n);
                }
                Ok(_) => break,
                Err(e) => {
                    if e.raw_os_error() == Some(libc::ENOBUFS) {
                        overruns.increment(1);
                    }
                    break;
                }
            }
        }
        ctx.seen.records = ctx.deliveries.len();
        ctx.seen.urgent = ctx.deliveries.iter().any(|d| d.record.urgent_for_flow());
        ctx.seen.opening = ctx.deliveries.iter().any(|d| d.record.opens_or_ends());
        push_all(ctx.deliveries);
        if rests_after(ctx.seen) && shared.rest.rest(ctx.seen) {
            rests.increment(1);
        }
    }
}

/// Whether the worker looks once more for queued packets before it writes (see [`run`]).
const RELOOK: bool = true;
/// Most extra non-blocking receives before a write.
const MAX_RELOOKS: usize = 4;

/// What a worker needs to handle one receive batch.
struct Ctx<'a> {
    /// What this cycle saw, for the rest after it.
    seen: CycleSeen,
    sock: &'a NetlinkSocket,
    num: u16,
    shared: &'a Shared,
    queued: metrics::Counter,
    verdict_errors: metrics::Counter,
    out: &'a mut Builder,
    accepted: &'a mut Vec<bool>,
    deliveries: &'a mut Vec<crate::outlet::Delivery>,
}

impl Ctx<'_> {
    /// Parse the `n` datagrams received in `batch`, decide about their packets under one
    /// lock, give their verdicts in one `send` and keep their records in `deliveries`.
    fn handle(&mut self, batch: &RecvBatch, n: usize) {
        let num = self.num;
        let mut packets: Vec<Packet<'_>> = Vec::with_capacity(n);
        let mut unparsed = None;
        for i in 0..n {
            for m in netlink::messages(batch.get(i)) {
                match m {
                    Msg::Packet(p) => packets.push(p),
                    Msg::Malformed(id) => {
                        tracing::warn!(
                            queue = num,
                            "unreadable NFQUEUE message (packet id {id:?}): dropped"
                        );
                        if let Some(id) = id {
                            unparsed = latest(unparsed, id);
                        }
                    }
                    Msg::Ack { errno, .. } if errno != 0 => {
                        self.verdict_errors.increment(1);
                        tracing::error!(
                            queue = num,
                            "NFQUEUE verdict failed: {}",
                            io::Error::from_raw_os_error(errno)
                        );
                    }
                    _ => {}
                }
            }
        }
        if packets.is_empty() && unparsed.is_none() {
            return;
        }
        self.queued.increment(packets.len() as u64);
        self.accepted.clear();
        let (accepted, deliveries) = (&mut *self.accepted, &mut *self.deliveries);
        self.shared.route_batch(
            Instant::now(),
            packets.iter().map(|p| (p.payload, p.orig_len)),
            |_, accept, d| {
                accepted.push(accept);
                deliveries.extend(d);
            },
        );
        self.seen.accepted |= self.accepted.iter().any(|&a| a);
        self.out.clear();
        verdicts(num, &packets, unparsed, |i| self.accepted[i], self.out);
        if let Err(e) = self.sock.send(self.out.bytes()) {
            self.verdict_errors.increment(1);
            tracing::error!(queue = num, "NFQUEUE verdict failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(id: u32) -> Packet<'static> {
        Packet {
            queue: 0,
            id,
            payload: &[],
            orig_len: 0,
            gso: false,
        }
    }

    /// (type, verdict, id) of each verdict message built.
    fn parsed(b: &Builder) -> Vec<(u16, u32, u32)> {
        let mut out = Vec::new();
        let mut rest = b.bytes();
        while rest.len() >= 32 {
            let len = u32::from_ne_bytes(rest[..4].try_into().unwrap()) as usize;
            let ty = u16::from_ne_bytes(rest[4..6].try_into().unwrap());
            let v = u32::from_be_bytes(rest[24..28].try_into().unwrap());
            let id = u32::from_be_bytes(rest[28..32].try_into().unwrap());
            out.push((ty, v, id));
            rest = &rest[len..];
        }
        out
    }

    const VERDICT: u16 = 0x0301;
    const BATCH: u16 = 0x0303;

    #[test]
    fn accepts_go_one_by_one_before_one_batch_drop_of_the_rest() {
        let packets: Vec<_> = [10, 11, 12, 13, 14].into_iter().map(pkt).collect();
        let mut b = Builder::new();
        verdicts(2, &packets, None, |i| i == 1 || i == 4, &mut b);
        // ACCEPT 11 and 14 first (so the batch cannot take them), then DROP up to 13
        assert_eq!(
            parsed(&b),
            vec![(VERDICT, 1, 11), (VERDICT, 1, 14), (BATCH, 0, 13)]
        );
        // nothing accepted: one message for the whole batch
        b.clear();
        verdicts(2, &packets, None, |_| false, &mut b);
        assert_eq!(parsed(&b), vec![(BATCH, 0, 14)]);
        // everything accepted: no DROP at all
        b.clear();
        verdicts(2, &packets, None, |_| true, &mut b);
        assert_eq!(parsed(&b).len(), 5);
        assert!(parsed(&b).iter().all(|&(t, v, _)| t == VERDICT && v == 1));
        // an unreadable message's id is dropped too, even when it is the latest
        b.clear();
        verdicts(2, &packets[..2], Some(20), |i| i == 0, &mut b);
        assert_eq!(parsed(&b), vec![(VERDICT, 1, 10), (BATCH, 0, 20)]);
    }

    #[test]
    fn the_batch_drop_reaches_the_latest_id_across_a_wrap() {
        let packets: Vec<_> = [u32::MAX - 1, u32::MAX, 0, 1]
            .into_iter()
            .map(pkt)
            .collect();
        let mut b = Builder::new();
        verdicts(0, &packets, None, |_| false, &mut b);
        assert_eq!(parsed(&b), vec![(BATCH, 0, 1)]);
        assert!(id_after(0, u32::MAX) && !id_after(u32::MAX, 0));
        assert_eq!(latest(Some(5), 3), Some(5));
        assert_eq!(latest(Some(5), 6), Some(6));
        assert_eq!(latest(None, 6), Some(6));
    }

    /// Binds a real queue in this (root) namespace: every configuration step is acknowledged.
    /// No rule sends packets to it. Skips without CAP_NET_ADMIN.
    #[test]
    fn a_queue_binds_and_a_second_bind_of_it_is_refused_by_name() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIP: binding an NFQUEUE queue needs root");
            return;
        }
        let q = bind(65_031, 0).expect("bind a free queue");
        assert_eq!(q.num(), 65_031);
        assert_eq!(q.msg_size, HEADER_COPY + MSG_OVERHEAD);
        assert_eq!(q.stale, None);
        let e = bind(65_031, 0).expect_err("a queue bound by another socket");
        let text = format!("{e:#}");
        assert!(text.contains("bind NFQUEUE queue 65031"), "{text}");
        drop(q);
        // closing the socket releases the queue
        bind(65_031, 0).expect("bind again after the first socket closed");
    }

    #[test]
    fn a_dying_worker_is_reported_with_its_reason() {
        let why = run_supervised(3, || bail!("receive failed"));
        assert_eq!(why, "queue 3: receive failed");
        let why = run_supervised(4, || panic!("index out of bounds"));
        assert!(
            why.starts_with("queue 4: panicked: index out of bounds"),
            "{why}"
        );
        let n = 5;
        let why = run_supervised(5, move || panic!("boom {n}"));
        assert!(why.contains("panicked: boom 5"), "{why}");
    }
}
