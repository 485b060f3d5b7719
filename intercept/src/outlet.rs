//! The state shared by the NFQUEUE workers (threads) and the control tasks (tokio): the router,
//! and one bounded outgoing record queue ([`Outlet`]) per connected copier.
//!
//! Invariants:
//! - the [`Core`] mutex is held only for a router call and a map lookup, never across I/O or
//!   an `await`;
//! - an outlet holds at most `capacity` records; pushing into a full outlet drops its oldest
//!   record and counts it (`intercept_records_dropped_total{reason="copier_slow"}`), so a slow
//!   copier costs bounded memory and never delays a verdict;
//! - after [`Outlet::close`], pushes are refused (counted as `copier_gone`).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use common::proto::Record;
use metrics::counter;
use tokio::sync::Notify;

use crate::metrics::{PACKETS_DROPPED, RECORDS_DROPPED};
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
}

/// The router and outlets, shared by all threads and tasks.
#[derive(Debug)]
pub struct Shared {
    core: Mutex<Core>,
    /// Most TCP payload bytes kept per record (`--payload-bytes`); each registration says how
    /// many of them its records keep (see `crate::router`).
    pub payload_bytes: usize,
}

impl Shared {
    /// Shared state around a router.
    pub fn new(router: Router, payload_bytes: usize) -> Arc<Shared> {
        Arc::new(Shared {
            core: Mutex::new(Core {
                router,
                outlets: HashMap::new(),
                refusals: RefusalLog::new(),
            }),
            payload_bytes,
        })
    }

    /// Decide about one packet read from NFQUEUE. Returns whether its verdict is ACCEPT and,
    /// when it belongs to a connected copier, the record with that copier's outlet; the caller
    /// gives the verdict first and then [`Delivery::push`]es, so no lock is held meanwhile.
    pub fn route(&self, now: Instant, packet: &[u8]) -> (bool, Option<Delivery>) {
        let mut out = (false, None);
        self.route_batch(now, [(packet, packet.len())], |_, accept, d| out = (accept, d));
        out
    }

    /// Decide about the packets of one NFQUEUE receive batch under one lock: `packets` are
    /// (bytes copied, whole length) pairs, and `decided(i, accept, delivery)` is called for
    /// each, in order, with the lock held (it must only store the outcome; the caller gives
    /// the verdicts and then [`push_all`]s the deliveries, with no lock held).
    pub fn route_batch<'p>(
        &self,
        now: Instant,
        packets: impl IntoIterator<Item = (&'p [u8], usize)>,
        mut decided: impl FnMut(usize, bool, Option<Delivery>),
    ) {
        let mut core = self.lock();
        for (i, (bytes, len)) in packets.into_iter().enumerate() {
            let (accept, d) = match core.router.handle_packet_len(now, bytes, len, self.payload_bytes) {
                Decision::Accept => (true, None),
                Decision::Deliver { copier, record } => (
                    false,
                    Some(Delivery {
                        copier,
                        outlet: core.outlets.get(&copier).cloned(),
                        record,
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
    /// Queue the record (or count it as `copier_gone`).
    pub fn push(self) {
        match self.outlet {
            Some(o) => {
                o.push([self.record]);
            }
            None => {
                counter!(PACKETS_DROPPED, "reason" => DropReason::CopierGone.as_str()).increment(1);
                tracing::debug!(copier = %self.copier, "record for a copier that just left: dropped");
            }
        }
    }
}

/// Queue the records of one receive batch: one push (one lock, at most one wake-up of the
/// writer) per copier, each copier's records in the order they came. Empties `deliveries`.
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
                o.push(records);
            }
            None => {
                counter!(PACKETS_DROPPED, "reason" => DropReason::CopierGone.as_str()).increment(records.len() as u64);
                tracing::debug!(%copier, n = records.len(), "records for a copier that just left: dropped");
            }
        }
    }
}

/// A copier's bounded queue of records waiting to be written to its connection.
#[derive(Debug)]
pub struct Outlet {
    queue: Mutex<VecDeque<Record>>,
    capacity: usize,
    notify: Notify,
    closed: AtomicBool,
}

impl Outlet {
    /// An empty queue of at most `capacity` records (at least 1).
    pub fn new(capacity: usize) -> Outlet {
        Outlet {
            queue: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            notify: Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Record>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue records for the writer; returns how many older records were dropped for room.
    pub fn push(&self, records: impl IntoIterator<Item = Record>) -> usize {
        if self.closed.load(Ordering::Acquire) {
            let n = records.into_iter().count();
            counter!(PACKETS_DROPPED, "reason" => DropReason::CopierGone.as_str()).increment(n as u64);
            return 0;
        }
        let mut dropped = 0;
        let was_empty;
        {
            let mut q = self.lock();
            was_empty = q.is_empty();
            for r in records {
                if q.len() >= self.capacity {
                    q.pop_front();
                    dropped += 1;
                }
                q.push_back(r);
            }
        }
        if dropped > 0 {
            counter!(RECORDS_DROPPED, "reason" => DropReason::CopierSlow.as_str()).increment(dropped as u64);
        }
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
        let mut q = self.lock();
        let n = q.len().min(max);
        out.extend(q.drain(..n));
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
        let mut batch = vec![d(2, &b, 1), d(1, &a, 2), d(2, &b, 3), gone, d(1, &a, 4), d(2, &b, 5)];
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
}
