//! The state shared by the NFQUEUE workers (threads) and the control tasks (tokio): the router,
//! and per connected copier one [`Outlet`]: a bounded queue of records and the connection's
//! write side (its frame key and counter, and a duplicate of its socket).
//!
//! Invariants:
//! - the [`Core`] mutex is held only for a router call and a map lookup, never across I/O or
//!   an `await`;
//! - an outlet holds at most `capacity` records and at most `max_bytes` bytes
//!   ([`record_size`]); pushing into a full outlet drops its oldest records until the new one
//!   fits and counts them (`intercept_records_dropped_total{reason="copier_slow"}` for the
//!   record bound, `{reason="queue_bytes"}` for the byte bound), so a slow copier costs
//!   bounded memory, whatever `--payload-bytes` lets a record carry, and never delays a
//!   verdict;
//! - after [`Outlet::close`], pushes are refused (counted as `copier_gone`);
//! - a receive batch's records for one copier are written by the NFQUEUE worker itself
//!   ([`Outlet::deliver`]), sealed as one write (one Records frame unless they exceed
//!   `MAX_FRAME`) with a non-blocking `send`, when the connection is idle: its write state is
//!   free (`try_lock`), the control writer is not writing, nothing waits in the queue and no
//!   bytes of an earlier write are left over. Otherwise they are queued and the control
//!   writer (`crate::control`) takes them, as before. What a partial or refused (`EAGAIN`)
//!   send leaves of the sealed bytes is kept (`Wire::pending`) and is the first thing the
//!   control writer writes: a frame is never torn, and nothing queued later overtakes it;
//! - every frame of a connection is sealed under its [`Wire`] lock with the one frame counter,
//!   by whichever side writes it, in the order it goes on the wire;
//! - the workers write to a duplicate of the socket's descriptor, owned by the [`Wire`] and
//!   dropped when the connection ends ([`Outlet::finish`], or [`Outlet::detach`] when its task
//!   is dropped), so a worker can never write to a descriptor number that has been closed and
//!   reused, and the socket is not kept open after its connection.

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Instant;

use common::proto::auth::FrameKey;
use common::proto::codec::{encode_records, encode_stamped_records, seal_frames};
use common::proto::{Message, Record, MAX_FRAME};
use metrics::{counter, Counter};
use tokio::sync::Notify;

use crate::hold::record_size;
use crate::metrics::{PACKETS_DROPPED, RECORDS_DROPPED, RECORDS_SENT, RECORD_WRITES};
use crate::refusal::RefusalLog;
use crate::router::{CopierId, Decision, DropReason, Router};

/// What the core mutex protects.
#[derive(Debug)]
pub struct Core {
    /// The decision logic.
    pub router: Router,
    /// Outgoing queues of the connected copiers.
    pub outlets: HashMap<CopierId, Arc<Outlet>>,
    /// Rate limiter of the warnings about refused registrations.
    pub refusals: RefusalLog,
    /// Who each connected copier said it is (its Hello: instance and `--fleet`), for
    /// `Message::Fleet`.
    pub fleet: HashMap<CopierId, common::proto::FleetMember>,
}

/// The router and outlets, shared by all threads and tasks.
#[derive(Debug)]
pub struct Shared {
    core: Mutex<Core>,
    /// Most TCP payload bytes kept per record (`--payload-bytes`); each registration says how
    /// many of them its records keep (see `crate::router`).
    pub payload_bytes: usize,
    /// How long the NFQUEUE workers may rest between batches, as the copiers say.
    pub rest: crate::rest::Rest,
    /// Whether the firewall rules are in force (the rule check sets it; each copier's
    /// connection tells its copier of a change, `Message::Rules`).
    pub rules_ok: tokio::sync::watch::Sender<bool>,
}

impl Shared {
    /// Shared state around a router.
    pub fn new(router: Router, payload_bytes: usize) -> Arc<Shared> {
        Arc::new(Shared {
            core: Mutex::new(Core {
                router,
                outlets: HashMap::new(),
                fleet: HashMap::new(),
                refusals: RefusalLog::new(),
            }),
            payload_bytes,
            rest: crate::rest::Rest::new(),
            rules_ok: tokio::sync::watch::Sender::new(true),
        })
    }

    /// Decide about one packet read from NFQUEUE. Returns whether its verdict is ACCEPT and,
    /// when it belongs to a connected copier, the record with that copier's outlet; the caller
    /// gives the verdict first and then [`Delivery::push`]es, so no lock is held meanwhile.
    pub fn route(&self, now: Instant, packet: &[u8]) -> (bool, Option<Delivery>) {
        let mut out = (false, None);
        self.route_batch(now, [(packet, packet.len())], |_, accept, d| {
            out = (accept, d)
        });
        out
    }

    /// Decide about the packets of one NFQUEUE receive batch under one lock: `packets` are
    /// (bytes copied, whole length) pairs, and `decided(i, accept, delivery)` is called for
    /// each, in order, with the lock held (it must only store the outcome; the caller gives
    /// the verdicts and then [`push_all`]s the deliveries, with no lock held). The records
    /// delivered are stamped with this host's clock now ([`wall_ns`]): the batch was just read,
    /// and NFQUEUE hands a packet over as the test server sends it, so that is when the answer
    /// left, within the batch's read (the time `copier --compare` times test answers by).
    /// Records held for a registration keep no stamp (the copier times them by their arrival).
    pub fn route_batch<'p>(
        &self,
        now: Instant,
        packets: impl IntoIterator<Item = (&'p [u8], usize)>,
        mut decided: impl FnMut(usize, bool, Option<Delivery>),
    ) {
        let stamp = wall_ns();
        let mut core = self.lock();
        for (i, (bytes, len)) in packets.into_iter().enumerate() {
            let (accept, d) =
                match core
                    .router
                    .handle_packet_len(now, bytes, len, self.payload_bytes)
                {
                    Decision::Accept => (true, None),
                    Decision::Deliver { copier, record } => (
                        false,
                        Some(Delivery {
                            copier,
                            outlet: core.outlets.get(&copier).cloned(),
                            record: Record { stamp, ..record },
                        }),
                    ),
                    Decision::Drop(_) | Decision::Held => (false, None),
                };
            decided(i, accept, d);
        }
    }

    /// Lock the core. A poisoned lock (a panic while holding it) is taken over: the router's
    /// state stays consistent between calls, and refusing would stop every verdict.
    pub fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A record on its way to a copier's outlet.
#[derive(Debug)]
pub struct Delivery {
    /// The copier that registered the session.
    pub copier: CopierId,
    /// Its outlet, `None` if it has just disconnected.
    pub outlet: Option<Arc<Outlet>>,
    /// The record.
    pub record: Record,
}

impl Delivery {
    /// Write the record to the copier's connection if it is idle, else queue it (or count it
    /// as `copier_gone`): [`Outlet::deliver`].
    pub fn push(self) {
        match self.outlet {
            Some(o) => {
                o.deliver(vec![self.record]);
            }
            None => {
                counter!(PACKETS_DROPPED, "reason" => DropReason::CopierGone.label()).increment(1);
                tracing::debug!(copier = %self.copier, "record for a copier that just left: dropped");
            }
        }
    }
}

/// This host's clock (`CLOCK_REALTIME`) in nanoseconds since the Unix epoch, 0 if it is set
/// before 1970: what records are stamped with ([`Record::stamp`]) and Pongs carry.
pub fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Deliver the records of one receive batch: one [`Outlet::deliver`] per copier (one write
/// when its connection is idle, else one push and at most one wake-up of its writer), each
/// copier's records in the order they came. Empties `deliveries`.
pub fn push_all(deliveries: &mut Vec<Delivery>) {
    if deliveries.len() == 1 {
        if let Some(d) = deliveries.pop() {
            d.push();
        }
        return;
    }
    // Stable: a copier's records keep their order.
    deliveries.sort_by_key(|d| d.copier);
    let mut it = deliveries.drain(..).peekable();
    while let Some(first) = it.next() {
        let copier = first.copier;
        let outlet = first.outlet;
        let mut records = vec![first.record];
        while let Some(d) = it.next_if(|d| d.copier == copier) {
            records.push(d.record);
        }
        match outlet {
            Some(o) => {
                o.deliver(records);
            }
            None => {
                counter!(PACKETS_DROPPED, "reason" => DropReason::CopierGone.label())
                    .increment(records.len() as u64);
                tracing::debug!(%copier, n = records.len(), "records for a copier that just left: dropped");
            }
        }
    }
}

/// The write side of a copier's connection, shared by its control writer and the NFQUEUE
/// workers (see the module doc).
#[derive(Debug)]
pub struct Wire {
    /// A duplicate of the connection's socket, for the workers' non-blocking writes; `None`
    /// when the stream is not a socket (tests), before [`Outlet::attach`] and after
    /// [`Outlet::finish`]: then only the control writer writes.
    fd: Option<OwnedFd>,
    /// The session key and the number of the next frame; `None` without a secret.
    sealer: Option<(FrameKey, u64)>,
    /// The control writer is writing bytes it took ([`Outlet::begin_write`] to
    /// [`Outlet::end_write`]): nobody else writes.
    busy: bool,
    /// Sealed bytes a worker's send left over (partial or refused): written by the control
    /// writer before anything else.
    pending: Vec<u8>,
    /// Scratch: frames before sealing.
    plain: Vec<u8>,
    /// Scratch: the worker's sealed bytes.
    sealed: Vec<u8>,
    /// Worker sends the socket took only in part (or not at all), finished by the writer.
    leftovers: u64,
    /// `intercept_records_sent_total{copier}`.
    sent: Counter,
    /// `intercept_record_writes_total{by="nfqueue"}` and `{by="writer"}`.
    by_worker: Counter,
    by_writer: Counter,
}

impl Wire {
    /// Encode `f`'s frames into `out` (appended), sealed if there is a key.
    fn seal(&mut self, out: &mut Vec<u8>, f: impl FnOnce(&mut Vec<u8>)) {
        match &mut self.sealer {
            None => f(out),
            Some((key, counter)) => {
                self.plain.clear();
                f(&mut self.plain);
                seal_frames(key, counter, &self.plain, out);
                if self.plain.capacity() > 4 * MAX_FRAME {
                    self.plain = Vec::new();
                }
            }
        }
    }
}

/// A copier's bounded queue of records waiting to be written to its connection, and the
/// connection's write side ([`Wire`]).
#[derive(Debug)]
pub struct Outlet {
    queue: Mutex<Queue>,
    /// Lock order: `wire` before `queue`.
    wire: Mutex<Wire>,
    capacity: usize,
    max_bytes: usize,
    notify: Notify,
    closed: AtomicBool,
    /// The copier announced `FEATURE_STAMPS`: its records go with their stamps
    /// (StampedRecords) and its Pongs with this host's clock.
    stamps: AtomicBool,
}

/// The records waiting for the control writer and their bytes ([`record_size`]).
#[derive(Debug, Default)]
struct Queue {
    records: VecDeque<Record>,
    bytes: usize,
}

impl Queue {
    fn len(&self) -> usize {
        self.records.len()
    }

    fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    fn pop_front(&mut self) -> bool {
        match self.records.pop_front() {
            Some(r) => {
                self.bytes -= record_size(&r);
                true
            }
            None => false,
        }
    }

    /// Move the `n` oldest records into `out`.
    fn drain_into(&mut self, out: &mut Vec<Record>, n: usize) {
        let n = n.min(self.records.len());
        for r in self.records.drain(..n) {
            self.bytes -= record_size(&r);
            out.push(r);
        }
    }

    fn clear(&mut self) {
        self.records.clear();
        self.bytes = 0;
    }
}

/// Default of `--copier-queue-bytes`: 16 MiB per connected copier (see DESIGN.md for what the
/// intercept's defaults add up to).
pub const DEFAULT_QUEUE_BYTES: usize = 16 << 20;

impl Outlet {
    /// An empty queue of at most `capacity` records (at least 1) and
    /// [`DEFAULT_QUEUE_BYTES`] bytes, with no socket and no key until
    /// [`attach`](Self::attach).
    pub fn new(capacity: usize) -> Outlet {
        Outlet::bounded(capacity, DEFAULT_QUEUE_BYTES)
    }

    /// An empty queue of at most `capacity` records (at least 1) and `max_bytes` bytes of
    /// records ([`record_size`]; a record larger than that on its own is dropped, counted as
    /// `queue_bytes`).
    pub fn bounded(capacity: usize, max_bytes: usize) -> Outlet {
        Outlet {
            queue: Mutex::new(Queue::default()),
            wire: Mutex::new(Wire {
                fd: None,
                sealer: None,
                busy: false,
                pending: Vec::new(),
                plain: Vec::new(),
                sealed: Vec::new(),
                leftovers: 0,
                sent: Counter::noop(),
                by_worker: Counter::noop(),
                by_writer: Counter::noop(),
            }),
            capacity: capacity.max(1),
            max_bytes,
            notify: Notify::new(),
            closed: AtomicBool::new(false),
            stamps: AtomicBool::new(false),
        }
    }

    /// The copier announced `FEATURE_STAMPS` (see [`Outlet::stamps`]); set before its first
    /// registration.
    pub fn set_stamps(&self, on: bool) {
        self.stamps.store(on, Ordering::Relaxed);
    }

    /// Whether the copier takes StampedRecords and Pongs with a clock.
    pub fn stamps(&self) -> bool {
        self.stamps.load(Ordering::Relaxed)
    }

    /// Records as frames for this copier: with their stamps when it takes them.
    fn encode(&self, records: &[Record], out: &mut Vec<u8>) {
        if self.stamps() {
            encode_stamped_records(records, out);
        } else {
            encode_records(records, out);
        }
    }

    /// Give the outlet its connection's write side: `fd`, a duplicate of the socket for the
    /// workers' writes (`None`: only the control writer writes), and the frame key with the
    /// number of the next frame (`None` without a secret). `label` names the copier in
    /// `intercept_records_sent_total`.
    pub fn attach(&self, fd: Option<OwnedFd>, sealer: Option<(FrameKey, u64)>, label: &str) {
        let mut w = self.lock_wire();
        w.fd = fd;
        w.sealer = sealer;
        w.sent = counter!(RECORDS_SENT, "copier" => label.to_string());
        w.by_worker = counter!(RECORD_WRITES, "by" => "nfqueue");
        w.by_writer = counter!(RECORD_WRITES, "by" => "writer");
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_wire(&self) -> MutexGuard<'_, Wire> {
        self.wire.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hand records to the copier (from an NFQUEUE worker): written at once by this thread
    /// when the connection is idle (see the module doc), else queued for the control writer
    /// ([`push`](Self::push)). Never blocks on the socket; waits for no lock held by a writer.
    pub fn deliver(&self, records: Vec<Record>) {
        if records.is_empty() {
            return;
        }
        if self.closed.load(Ordering::Acquire) {
            self.push(records);
            return;
        }
        let mut w = match self.wire.try_lock() {
            Ok(w) => w,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.push(records);
                return;
            }
        };
        if w.fd.is_none() || w.busy || !w.pending.is_empty() || !self.lock().is_empty() {
            drop(w);
            self.push(records);
            return;
        }
        let w = &mut *w;
        let mut sealed = std::mem::take(&mut w.sealed);
        sealed.clear();
        w.seal(&mut sealed, |out| self.encode(&records, out));
        let n = records.len() as u64;
        drop(records);
        let fd = w.fd.as_ref().expect("checked above");
        let done = crate::sys::send_now(fd, &sealed).unwrap_or_else(|e| {
            // The control side finds the error on its own read or write and ends the
            // connection; the bytes wait for it as if the socket were full.
            tracing::debug!("record write by the NFQUEUE worker failed: {e}");
            0
        });
        w.sent.increment(n);
        w.by_worker.increment(1);
        if done < sealed.len() {
            // Kept whole for the control writer, which writes them before anything else.
            w.pending.extend_from_slice(&sealed[done..]);
            w.leftovers += 1;
            self.notify.notify_one();
        }
        if sealed.capacity() > 4 * MAX_FRAME {
            sealed = Vec::new();
        }
        w.sealed = sealed;
    }

    /// For the control writer: take the bytes a worker left over, then up to `max` queued
    /// records and `replies` (after the records), sealed, into `out` (appended). Returns the
    /// number of records taken. If `out` is not empty afterwards the writer owns the socket
    /// until [`end_write`](Self::end_write): workers queue meanwhile.
    pub fn begin_write(&self, out: &mut Vec<u8>, max: usize, replies: &[Message]) -> usize {
        let mut w = self.lock_wire();
        out.append(&mut w.pending);
        if w.pending.capacity() > 4 * MAX_FRAME {
            w.pending = Vec::new();
        }
        let mut batch = Vec::new();
        self.lock().drain_into(&mut batch, max);
        if !batch.is_empty() {
            w.seal(out, |o| self.encode(&batch, o));
            w.sent.increment(batch.len() as u64);
            w.by_writer.increment(1);
        }
        if !replies.is_empty() {
            w.seal(out, |o| {
                for m in replies {
                    m.encode(o);
                }
            });
        }
        w.busy = !out.is_empty();
        batch.len()
    }

    /// The control writer's write of [`begin_write`](Self::begin_write)'s bytes is done.
    pub fn end_write(&self) {
        self.lock_wire().busy = false;
    }

    /// The connection ends: no worker writes any more. Seals `last` (if any) after the bytes a
    /// worker left over, into `out`, for the control side's last write.
    pub fn finish(&self, last: Option<&Message>, out: &mut Vec<u8>) {
        let mut w = self.lock_wire();
        w.fd = None;
        w.busy = true;
        out.append(&mut w.pending);
        if let Some(m) = last {
            w.seal(out, |o| m.encode(o));
        }
    }

    /// How many of the workers' sends the socket took only in part or not at all.
    pub fn leftovers(&self) -> u64 {
        self.lock_wire().leftovers
    }

    /// No worker writes any more, and the socket's duplicate is closed (what
    /// [`finish`](Self::finish) also does): for a connection's task that ends without
    /// finishing (aborted, or panicked), so that the socket is not kept open.
    pub fn detach(&self) {
        let mut w = self.lock_wire();
        w.fd = None;
        w.busy = true;
    }

    /// Whether nothing waits for the control writer: no queued record, no left-over bytes.
    pub fn is_idle(&self) -> bool {
        self.is_empty() && self.lock_wire().pending.is_empty()
    }

    /// Queue records for the writer; returns how many records were dropped for room (older
    /// ones, or a new one larger than the byte bound on its own).
    pub fn push(&self, records: impl IntoIterator<Item = Record>) -> usize {
        if self.closed.load(Ordering::Acquire) {
            let n = records.into_iter().count();
            counter!(PACKETS_DROPPED, "reason" => DropReason::CopierGone.label())
                .increment(n as u64);
            return 0;
        }
        let (mut by_count, mut by_bytes) = (0, 0);
        let was_empty;
        {
            let mut q = self.lock();
            was_empty = q.is_empty();
            for r in records {
                let size = record_size(&r);
                if size > self.max_bytes {
                    by_bytes += 1;
                    continue;
                }
                if q.len() >= self.capacity && q.pop_front() {
                    by_count += 1;
                }
                while q.bytes + size > self.max_bytes && q.pop_front() {
                    by_bytes += 1;
                }
                q.bytes += size;
                q.records.push_back(r);
            }
        }
        if by_count > 0 {
            counter!(RECORDS_DROPPED, "reason" => DropReason::CopierSlow.label())
                .increment(by_count as u64);
        }
        if by_bytes > 0 {
            counter!(RECORDS_DROPPED, "reason" => DropReason::QueueBytes.label())
                .increment(by_bytes as u64);
        }
        let dropped = by_count + by_bytes;
        // Only the push that makes the queue non-empty wakes the writer: while records wait,
        // the writer has a wake-up pending or is busy writing, and it drains the queue until
        // it finds it empty before it waits again, so later pushes need no wake-up of their own.
        if was_empty {
            self.notify.notify_one();
        }
        dropped
    }

    /// Move up to `max` queued records into `out`, oldest first.
    pub fn drain_into(&self, out: &mut Vec<Record>, max: usize) {
        self.lock().drain_into(out, max);
    }

    /// Bytes of the records waiting ([`record_size`]).
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Records waiting.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wait until the queue may have gone from empty to non-empty since the last wait (a push
    /// before the wait started is not lost: `Notify` keeps one permit). The waiter must drain
    /// the queue until it is empty before it waits again: pushes into a non-empty queue do not
    /// wake it.
    pub async fn ready(&self) {
        self.notify.notified().await;
    }

    /// Refuse further pushes; returns the records still queued (dropped by the caller).
    pub fn close(&self) -> usize {
        self.closed.store(true, Ordering::Release);
        let mut q = self.lock();
        let n = q.len();
        q.clear();
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(n: u32) -> Record {
        Record {
            orig_len: n,
            headers: vec![],
            payload: vec![],
            stamp: 0,
        }
    }

    #[test]
    fn full_outlet_drops_the_oldest() {
        let o = Outlet::new(3);
        assert_eq!(o.push((1..=3).map(rec)), 0);
        assert_eq!(o.push([rec(4), rec(5)]), 2);
        let mut out = Vec::new();
        o.drain_into(&mut out, 2);
        assert_eq!(out, vec![rec(3), rec(4)]);
        o.drain_into(&mut out, 100);
        assert_eq!(out.len(), 3);
        assert!(o.is_empty());
    }

    #[test]
    fn large_records_stay_under_the_byte_bound_and_the_oldest_go() {
        use crate::hold::tests::big;
        let max = 1 << 20;
        let o = Outlet::bounded(65536, max);
        let mut dropped = 0;
        for n in 0..100 {
            dropped += o.push([big(n)]);
            assert!(o.bytes() <= max, "{} bytes queued against {max}", o.bytes());
        }
        let fit = max / record_size(&big(0));
        assert_eq!(o.len(), fit);
        assert_eq!(dropped, 100 - fit);
        let mut out = Vec::new();
        o.drain_into(&mut out, 1);
        assert_eq!(out, vec![big(100 - fit as u32)], "the oldest went first");
        assert_eq!(o.bytes(), (fit - 1) * record_size(&big(0)));
        o.drain_into(&mut out, usize::MAX);
        assert_eq!(o.bytes(), 0);
        // Small records are still bounded by count, and a record larger than the whole bound
        // is dropped on its own without taking the others with it.
        let o = Outlet::bounded(2, 1000);
        assert_eq!(o.push([rec(1), rec(2), rec(3)]), 1);
        assert_eq!(o.push([big(4)]), 1);
        out.clear();
        o.drain_into(&mut out, 10);
        assert_eq!(out, vec![rec(2), rec(3)]);
    }

    #[test]
    fn a_batch_goes_to_each_outlet_in_one_push_and_in_order() {
        let a = Arc::new(Outlet::new(100));
        let b = Arc::new(Outlet::new(100));
        let d = |c: u64, o: &Arc<Outlet>, n: u32| Delivery {
            copier: CopierId(c),
            outlet: Some(o.clone()),
            record: rec(n),
        };
        let gone = Delivery {
            copier: CopierId(3),
            outlet: None,
            record: rec(99),
        };
        let mut batch = vec![
            d(2, &b, 1),
            d(1, &a, 2),
            d(2, &b, 3),
            gone,
            d(1, &a, 4),
            d(2, &b, 5),
        ];
        push_all(&mut batch);
        assert!(batch.is_empty());
        let mut out = Vec::new();
        a.drain_into(&mut out, 100);
        assert_eq!(out, vec![rec(2), rec(4)]);
        out.clear();
        b.drain_into(&mut out, 100);
        assert_eq!(out, vec![rec(1), rec(3), rec(5)]);
    }

    #[test]
    fn closed_outlet_refuses() {
        let o = Outlet::new(3);
        o.push([rec(1)]);
        assert_eq!(o.close(), 1);
        o.push([rec(2)]);
        assert!(o.is_empty());
    }

    #[tokio::test]
    async fn only_the_push_into_an_empty_queue_wakes_the_writer() {
        let o = Outlet::new(10);
        o.push([rec(1)]);
        o.push([rec(2)]);
        o.push([rec(3), rec(4)]);
        // One permit for the first push; the later ones found the queue non-empty.
        tokio::time::timeout(std::time::Duration::from_secs(1), o.ready())
            .await
            .unwrap();
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), o.ready())
                .await
                .is_err(),
            "pushes into a non-empty queue woke the writer again"
        );
        let mut out = Vec::new();
        o.drain_into(&mut out, 100);
        assert_eq!(out.len(), 4);
        // Empty again: the next push wakes it.
        o.push([rec(5)]);
        tokio::time::timeout(std::time::Duration::from_secs(1), o.ready())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn push_before_wait_is_not_lost() {
        let o = Arc::new(Outlet::new(3));
        o.push([rec(1)]);
        tokio::time::timeout(std::time::Duration::from_secs(1), o.ready())
            .await
            .unwrap();
        o.drain_into(&mut Vec::new(), 10);
        let o2 = o.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            o2.push([rec(2)]);
        });
        tokio::time::timeout(std::time::Duration::from_secs(1), o.ready())
            .await
            .unwrap();
        t.join().unwrap();
    }

    /// The records' `orig_len`s of every Records frame readable now on `sock`.
    fn read_now(sock: &mut std::os::unix::net::UnixStream) -> Vec<Vec<u32>> {
        use std::io::Read;
        sock.set_nonblocking(true).unwrap();
        let mut dec = common::proto::codec::FrameDecoder::new();
        let mut buf = [0u8; 65536];
        loop {
            match sock.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => dec.push(&buf[..n]),
                Err(_) => break,
            }
        }
        let mut frames = Vec::new();
        while let Some(m) = dec.next().unwrap() {
            match m {
                Message::Records { records } => {
                    frames.push(records.iter().map(|r| r.orig_len).collect())
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        frames
    }

    #[test]
    fn deliver_writes_when_the_connection_is_idle_and_queues_otherwise() {
        use std::os::fd::AsFd;
        let (near, mut far) = std::os::unix::net::UnixStream::pair().unwrap();
        // No socket yet: queued, and the writer is woken.
        let o = Outlet::new(100);
        o.deliver(vec![rec(1)]);
        assert_eq!(o.len(), 1);
        o.drain_into(&mut Vec::new(), 10);
        o.attach(
            Some(near.as_fd().try_clone_to_owned().unwrap()),
            None,
            "test",
        );
        // Idle: one batch, one frame, written by the caller; nothing queued.
        o.deliver(vec![rec(2), rec(3)]);
        assert!(o.is_idle());
        assert_eq!(read_now(&mut far), vec![vec![2, 3]]);
        // While the control writer writes, records are queued (and they come after what it
        // took).
        o.deliver(vec![rec(4)]);
        assert_eq!(read_now(&mut far), vec![vec![4]]);
        o.push([rec(5)]);
        let mut out = Vec::new();
        assert_eq!(o.begin_write(&mut out, 10, &[]), 1);
        o.deliver(vec![rec(6)]);
        assert_eq!(o.len(), 1, "queued while the writer is busy");
        o.end_write();
        // Something queued: the next batch queues behind it, whatever the writer does.
        o.deliver(vec![rec(7)]);
        assert_eq!(o.len(), 2);
        let mut out2 = Vec::new();
        assert_eq!(o.begin_write(&mut out2, 10, &[]), 2);
        o.end_write();
        use std::io::Write;
        far.set_nonblocking(false).unwrap();
        let mut near2 = near.try_clone().unwrap();
        near2.write_all(&out).unwrap();
        near2.write_all(&out2).unwrap();
        assert_eq!(read_now(&mut far), vec![vec![5], vec![6, 7]]);
        // The connection ends: nothing is written by a worker any more.
        let mut last = Vec::new();
        o.finish(None, &mut last);
        assert!(last.is_empty());
        o.deliver(vec![rec(8)]);
        assert_eq!(o.len(), 1);
        assert!(read_now(&mut far).is_empty());
    }
}
