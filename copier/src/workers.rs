//! Several engine threads (`--workers N`): which worker owns which test connection, and how the
//! intercepts' records reach it.
//!
//! With N workers the capture is one `PACKET_FANOUT` group of N rings (see
//! [`crate::capture::Capture::open_fanout`]): the kernel hands every packet of one client
//! connection to the same ring (ring `(client port >> 1) % N`), so each worker owns whole
//! sessions, with its own engine and raw sender. The engines' test-side ports are disjoint
//! ([`crate::engine::PortShare`], the same split as the rings', so a copy keeps its client's
//! port), so no two workers ever register the same test 4-tuple.
//!
//! Why by port and not by the kernel's flow hash (`PACKET_FANOUT_HASH`): with a hash, a worker
//! gets connections from any port and must move those outside its port share to a random port
//! of it; measured (bench_copier, 2000 short connections/s from one client, 2 workers) that
//! cost 1.3 % of the copies, whose random ports met the test server's TIME_WAIT connections,
//! where one worker, keeping the clients' ports, copied 100 %.
//!
//! Records and registration verdicts (`Message::Registered`) come back from the intercepts on
//! the control links, which know nothing of workers.
//! Owns:
//! - [`Routes`]: the table test 4-tuple -> worker, filled by each worker from its engine's
//!   Register/Unregister events (a Register is applied before the connection's first packet
//!   leaves, so no record can precede its route). Sharded behind plain mutexes: a lookup is one
//!   short lock of one shard out of [`SHARDS`].
//! - [`RecordRouter`]: what the control clients hand records to. With one worker it passes each
//!   batch on whole (no parsing: the engine judges every record); with several it parses each
//!   record's test-side tuple, looks up its owner and sends per-worker batches. A record that
//!   does not parse, or whose tuple no worker owns (the session has just ended), is counted
//!   (`copier_records_unroutable_total{reason}`) and dropped. Verdicts go the same way
//!   ([`RecordRouter::deliver_verdicts`], by their tuple's owner; one not owned is dropped, its
//!   session having ended), in the same channel, so a worker sees them in arrival order.
//!
//! Invariants: a route names the worker whose engine registered the tuple; a worker only
//! removes its own routes. Every inbox is bounded (the control client waits on a full one,
//! which pushes back over TCP to the intercept) and every send to an inbox is followed by a
//! poke of that worker's eventfd.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard};

use common::flow::FourTuple;
use common::proto::{Record, RegVerdict};
use tokio::sync::mpsc;

use crate::control::RegEvent;
use crate::sys::EventFd;

/// Number of shards of [`Routes`] (a power of two).
pub const SHARDS: usize = 16;

/// Most workers the copier runs.
pub const MAX_WORKERS: usize = 64;

/// The owner of every registered test tuple (see the module doc).
#[derive(Debug)]
pub struct Routes {
    hasher: RandomState,
    shards: Box<[Mutex<HashMap<FourTuple, u16>>]>,
}

impl Default for Routes {
    fn default() -> Self {
        Routes::new()
    }
}

impl Routes {
    /// An empty table.
    pub fn new() -> Routes {
        Routes {
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    fn shard(&self, t: &FourTuple) -> MutexGuard<'_, HashMap<FourTuple, u16>> {
        let i = self.hasher.hash_one(t) as usize & (SHARDS - 1);
        // A panic while holding a shard leaves it consistent (single insert/remove).
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Apply `worker`'s registration changes in order. An Unregister removes the route only if
    /// it is `worker`'s.
    pub fn apply(&self, worker: u16, events: &[RegEvent]) {
        for ev in events {
            match *ev {
                RegEvent::Register(t) => {
                    self.shard(&t).insert(t, worker);
                }
                RegEvent::Unregister(t) => {
                    let mut s = self.shard(&t);
                    if s.get(&t) == Some(&worker) {
                        s.remove(&t);
                    }
                }
            }
        }
    }

    /// The worker owning `t`, if any.
    pub fn owner(&self, t: &FourTuple) -> Option<u16> {
        self.shard(t).get(t).copied()
    }

    /// Remove every route of `worker` (its engine was rebuilt) and return their tuples.
    pub fn remove_worker(&self, worker: u16) -> Vec<FourTuple> {
        let mut gone = Vec::new();
        for s in self.shards.iter() {
            let mut s = s.lock().unwrap_or_else(|p| p.into_inner());
            s.retain(|t, w| {
                let mine = *w == worker;
                if mine {
                    gone.push(*t);
                }
                !mine
            });
        }
        gone
    }

    /// Routes in the table.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Records dropped by [`route_records`] because they could not be routed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unroutable {
    /// The record's headers do not parse.
    pub malformed: u64,
    /// No worker owns the record's tuple.
    pub unknown: u64,
}

/// Sort `records` into `out[worker]` by the owner of their test-side tuple; count the rest.
pub fn route_records(routes: &Routes, records: Vec<Record>, out: &mut [Vec<Record>]) -> Unroutable {
    let mut lost = Unroutable::default();
    for r in records {
        let Ok(t) = r.tuple() else {
            lost.malformed += 1;
            continue;
        };
        match routes.owner(&t).map(usize::from) {
            Some(w) if w < out.len() => out[w].push(r),
            _ => lost.unknown += 1,
        }
    }
    lost
}

/// What a control link hands an engine thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inbound {
    /// Records of the test server's answers.
    Records(Vec<Record>),
    /// Intercept `from`'s verdicts on registered tuples (`Message::Registered`).
    Verdicts {
        /// Which intercept (its `--intercept` index).
        from: u16,
        /// The verdicts.
        results: Vec<(FourTuple, RegVerdict)>,
    },
}

/// Where one worker's records go.
#[derive(Clone, Debug)]
pub struct Inbox {
    /// The worker's bounded channel of records and verdicts.
    pub records: mpsc::Sender<Inbound>,
    /// The worker's eventfd.
    pub wake: Arc<EventFd>,
}

/// The engine thread is gone (shutting down).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the engine thread is gone")]
pub struct InboxClosed;

/// What the control clients deliver records through (see the module doc).
#[derive(Clone, Debug)]
pub struct RecordRouter {
    inboxes: Arc<[Inbox]>,
    routes: Arc<Routes>,
}

impl RecordRouter {
    /// A router over one inbox per worker, `routes` telling who owns what.
    ///
    /// # Panics
    /// If `inboxes` is empty.
    pub fn new(inboxes: Vec<Inbox>, routes: Arc<Routes>) -> RecordRouter {
        assert!(!inboxes.is_empty(), "a router needs a worker");
        RecordRouter {
            inboxes: inboxes.into(),
            routes,
        }
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.inboxes.len()
    }

    /// Wake every worker (a link came up or went down).
    pub fn wake_all(&self) {
        for i in self.inboxes.iter() {
            i.wake.notify();
        }
    }

    /// Deliver one batch of records to the workers that own them, waiting while an inbox is
    /// full.
    pub async fn deliver(&self, records: Vec<Record>) -> Result<(), InboxClosed> {
        if let [only] = &*self.inboxes {
            only.records.send(Inbound::Records(records)).await.map_err(|_| InboxClosed)?;
            only.wake.notify();
            return Ok(());
        }
        let mut out: Vec<Vec<Record>> = vec![Vec::new(); self.inboxes.len()];
        let lost = route_records(&self.routes, records, &mut out);
        for (reason, n) in [
            ("malformed", lost.malformed),
            ("unknown_tuple", lost.unknown),
        ] {
            if n > 0 {
                ::metrics::counter!(crate::metrics::names::RECORDS_UNROUTABLE_TOTAL, "reason" => reason)
                    .increment(n);
            }
        }
        for (inbox, batch) in self.inboxes.iter().zip(out) {
            if batch.is_empty() {
                continue;
            }
            inbox.records.send(Inbound::Records(batch)).await.map_err(|_| InboxClosed)?;
            inbox.wake.notify();
        }
        Ok(())
    }

    /// Deliver intercept `from`'s registration verdicts to the workers that own their tuples
    /// (all to the one worker when there is one), waiting while an inbox is full. A verdict on
    /// a tuple no worker owns (its session ended) is dropped.
    pub async fn deliver_verdicts(&self, from: u16, results: Vec<(FourTuple, RegVerdict)>) -> Result<(), InboxClosed> {
        if let [only] = &*self.inboxes {
            only.records.send(Inbound::Verdicts { from, results }).await.map_err(|_| InboxClosed)?;
            only.wake.notify();
            return Ok(());
        }
        let mut out: Vec<Vec<(FourTuple, RegVerdict)>> = vec![Vec::new(); self.inboxes.len()];
        for (t, v) in results {
            if let Some(w) = self.routes.owner(&t).map(usize::from).filter(|&w| w < out.len()) {
                out[w].push((t, v));
            }
        }
        for (inbox, results) in self.inboxes.iter().zip(out) {
            if results.is_empty() {
                continue;
            }
            inbox.records.send(Inbound::Verdicts { from, results }).await.map_err(|_| InboxClosed)?;
            inbox.wake.notify();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::wire::{TcpBuilder, TcpFlags};

    fn t(c: u16) -> FourTuple {
        FourTuple::new(
            format!("198.19.0.1:{c}").parse().unwrap(),
            "198.18.2.2:80".parse().unwrap(),
        )
    }

    /// A record of the test server's answer on `tuple`.
    fn record(tuple: FourTuple) -> Record {
        let mut pkt = Vec::new();
        TcpBuilder {
            src: tuple.server.into(),
            dst: tuple.client.into(),
            seq: common::seq::SeqNum(1),
            ack: common::seq::SeqNum(2),
            flags: TcpFlags::ACK,
            window: 100,
            options: &[],
            payload: b"HTTP/1.1 200 OK\r\n",
            ttl: 64,
            ident: 0,
        }
        .emit(&mut pkt);
        let (got, r) = Record::from_packet(&pkt, 8).unwrap();
        assert_eq!(got, tuple);
        r
    }

    #[test]
    fn routes_follow_each_workers_events() {
        let r = Routes::new();
        r.apply(0, &[RegEvent::Register(t(1)), RegEvent::Register(t(2))]);
        r.apply(1, &[RegEvent::Register(t(3))]);
        assert_eq!(
            (r.owner(&t(1)), r.owner(&t(2)), r.owner(&t(3))),
            (Some(0), Some(0), Some(1))
        );
        assert_eq!(r.owner(&t(4)), None);
        // A worker cannot remove another's route; its own goes.
        r.apply(1, &[RegEvent::Unregister(t(1))]);
        assert_eq!(r.owner(&t(1)), Some(0));
        r.apply(0, &[RegEvent::Unregister(t(1)), RegEvent::Register(t(5))]);
        assert_eq!((r.owner(&t(1)), r.owner(&t(5))), (None, Some(0)));
        assert_eq!(r.len(), 3);
        // Events of one batch apply in order.
        r.apply(1, &[RegEvent::Register(t(6)), RegEvent::Unregister(t(6))]);
        assert_eq!(r.owner(&t(6)), None);
        // After a panic a worker's routes go, the others' stay.
        let mut gone = r.remove_worker(0);
        gone.sort();
        assert_eq!(gone, vec![t(2), t(5)]);
        assert_eq!(r.owner(&t(3)), Some(1));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn many_routes_over_every_shard() {
        let r = Routes::new();
        let evs: Vec<RegEvent> = (0..5000).map(|i| RegEvent::Register(t(i))).collect();
        r.apply(1, &evs[..2500]);
        r.apply(0, &evs[2500..]);
        assert_eq!(r.len(), 5000);
        for i in 0..5000u16 {
            assert_eq!(r.owner(&t(i)), Some(u16::from(i < 2500)));
        }
        let used = r
            .shards
            .iter()
            .filter(|s| !s.lock().unwrap().is_empty())
            .count();
        assert_eq!(used, SHARDS, "the hash spreads tuples over every shard");
    }

    #[test]
    fn records_go_to_the_owner_and_the_rest_is_counted() {
        let r = Routes::new();
        r.apply(0, &[RegEvent::Register(t(1))]);
        r.apply(1, &[RegEvent::Register(t(2)), RegEvent::Register(t(3))]);
        let garbage = Record {
            orig_len: 3,
            headers: vec![0x45, 0, 0],
            payload: Vec::new(),
        };
        let batch = vec![
            record(t(2)),
            record(t(1)),
            record(t(9)),
            garbage,
            record(t(3)),
            record(t(1)),
        ];
        let mut out = vec![Vec::new(), Vec::new()];
        let lost = route_records(&r, batch, &mut out);
        assert_eq!(
            lost,
            Unroutable {
                malformed: 1,
                unknown: 1
            }
        );
        let tuples = |v: &[Record]| v.iter().map(|x| x.tuple().unwrap()).collect::<Vec<_>>();
        assert_eq!(tuples(&out[0]), vec![t(1), t(1)]);
        assert_eq!(
            tuples(&out[1]),
            vec![t(2), t(3)],
            "order kept within a worker"
        );
        // A route naming a worker beyond the router's is not followed.
        r.apply(7, &[RegEvent::Register(t(4))]);
        let mut out = vec![Vec::new(), Vec::new()];
        assert_eq!(route_records(&r, vec![record(t(4))], &mut out).unknown, 1);
    }

    #[tokio::test]
    async fn router_delivers_per_worker_and_wakes_only_them() {
        let routes = Arc::new(Routes::new());
        routes.apply(1, &[RegEvent::Register(t(2))]);
        let mut rxs = Vec::new();
        let mut inboxes = Vec::new();
        for _ in 0..2 {
            let (tx, rx) = mpsc::channel(4);
            rxs.push(rx);
            inboxes.push(Inbox {
                records: tx,
                wake: Arc::new(EventFd::new().unwrap()),
            });
        }
        let router = RecordRouter::new(inboxes.clone(), routes.clone());
        assert_eq!(router.workers(), 2);
        router
            .deliver(vec![record(t(2)), record(t(5)), record(t(2))])
            .await
            .unwrap();
        assert!(matches!(rxs[1].try_recv().unwrap(), Inbound::Records(v) if v.len() == 2));
        assert!(rxs[0].try_recv().is_err(), "nothing for worker 0");
        let ready = |i: usize| {
            crate::sys::poll_readable(&[inboxes[i].wake.fd()], std::time::Duration::ZERO).unwrap()
        };
        assert_eq!((ready(0), ready(1)), (0, 1));
        router.wake_all();
        assert_eq!(ready(0), 1);
        // Verdicts go to the owner of their tuple; unowned ones are dropped.
        inboxes[0].wake.drain();
        inboxes[1].wake.drain();
        router
            .deliver_verdicts(3, vec![(t(2), RegVerdict::Accepted), (t(5), RegVerdict::PortNotGuarded)])
            .await
            .unwrap();
        assert_eq!(
            rxs[1].try_recv().unwrap(),
            Inbound::Verdicts { from: 3, results: vec![(t(2), RegVerdict::Accepted)] }
        );
        assert!(rxs[0].try_recv().is_err(), "nothing for worker 0");
        assert_eq!((ready(0), ready(1)), (0, 1));

        // One worker: batches pass whole, unparsed.
        let (tx, mut rx) = mpsc::channel(1);
        let one = RecordRouter::new(
            vec![Inbox {
                records: tx,
                wake: Arc::new(EventFd::new().unwrap()),
            }],
            Arc::new(Routes::new()),
        );
        let odd = Record {
            orig_len: 1,
            headers: vec![1],
            payload: Vec::new(),
        };
        one.deliver(vec![odd.clone()]).await.unwrap();
        assert_eq!(rx.try_recv().unwrap(), Inbound::Records(vec![odd]));
        drop(rx);
        assert_eq!(one.deliver(vec![]).await, Err(InboxClosed));
    }
}
