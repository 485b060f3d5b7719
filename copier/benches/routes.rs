//! Cost of routing records to workers (`--workers N`): the sharded `Mutex<HashMap>` table of
//! `copier::workers::Routes` (one short lock of one of 16 shards per lookup), alone and while
//! another thread registers and unregisters tuples, and `route_records` over a 64-record batch
//! (header parse + lookup per record), which the control client pays per record with several
//! workers.
//!
//! `cargo bench -p copier --bench routes -- --warm-up-time 1 --measurement-time 3`
//! (prints plain ns/op figures too, over fixed runs).

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use common::flow::FourTuple;
use common::proto::Record;
use common::seq::SeqNum;
use common::wire::{TcpBuilder, TcpFlags};
use copier::control::RegEvent;
use copier::workers::{route_records, Routes};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const LIVE: u32 = 10_000;

fn tuple(i: u32) -> FourTuple {
    FourTuple::new(
        SocketAddr::from((
            [198, 19, (i >> 8) as u8, i as u8],
            1024 + (i % 60_000) as u16,
        )),
        SocketAddr::from(([198, 18, 2, 2], 80)),
    )
}

fn record(t: FourTuple) -> Record {
    let mut pkt = Vec::new();
    TcpBuilder {
        src: t.server.into(),
        dst: t.client.into(),
        seq: SeqNum(1),
        ack: SeqNum(2),
        flags: TcpFlags::ACK,
        window: 100,
        options: &[],
        payload: &[0u8; 64],
        ttl: 64,
        ident: 0,
    }
    .emit(&mut pkt);
    Record::from_packet(&pkt, 64).unwrap().1
}

fn table() -> Arc<Routes> {
    let r = Arc::new(Routes::new());
    let evs: Vec<RegEvent> = (0..LIVE).map(|i| RegEvent::Register(tuple(i))).collect();
    r.apply(0, &evs[..LIVE as usize / 2]);
    r.apply(1, &evs[LIVE as usize / 2..]);
    r
}

/// A thread that registers and unregisters tuples as fast as it can (a busy worker's churn),
/// until dropped.
struct Churn(Arc<AtomicBool>, Option<std::thread::JoinHandle<u64>>);

impl Churn {
    fn start(r: Arc<Routes>) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let h = std::thread::spawn(move || {
            let mut n = 0u64;
            while !s.load(Ordering::Relaxed) {
                let t = tuple(LIVE + (n % 50_000) as u32);
                r.apply(1, &[RegEvent::Register(t)]);
                r.apply(1, &[RegEvent::Unregister(t)]);
                n += 1;
            }
            n
        });
        Churn(stop, Some(h))
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        if let Some(h) = self.1.take() {
            let _ = h.join();
        }
    }
}

fn plain_figures() {
    let r = table();
    let n = 2_000_000u32;
    let live: Vec<FourTuple> = (0..LIVE).map(tuple).collect();
    let lookups = |r: &Routes| {
        let t0 = Instant::now();
        for i in 0..n {
            black_box(r.owner(&live[(i % LIVE) as usize]));
        }
        t0.elapsed().as_nanos() as f64 / f64::from(n)
    };
    let alone = lookups(&r);
    let churn = Churn::start(r.clone());
    let contended = lookups(&r);
    drop(churn);
    let t0 = Instant::now();
    for i in 0..n / 2 {
        let t = tuple(LIVE + i % 50_000);
        r.apply(0, &[RegEvent::Register(t)]);
        r.apply(0, &[RegEvent::Unregister(t)]);
    }
    let churn_ns = t0.elapsed().as_nanos() as f64 / f64::from(n);
    let batch: Vec<Record> = (0..64).map(|i| record(tuple(i * 97 % LIVE))).collect();
    let mut out = vec![Vec::with_capacity(64), Vec::with_capacity(64)];
    let rounds = 20_000u32;
    let t0 = Instant::now();
    for _ in 0..rounds {
        out.iter_mut().for_each(Vec::clear);
        black_box(route_records(&r, batch.clone(), &mut out));
    }
    let per_record = t0.elapsed().as_nanos() as f64 / f64::from(rounds * 64);
    println!(
        "routes ({LIVE} live): owner {alone:.0} ns alone, {contended:.0} ns while another thread registers/unregisters; \
         register or unregister {churn_ns:.0} ns; route_records {per_record:.0} ns/record (parse + lookup + move, batch clone included)"
    );
}

fn bench(c: &mut Criterion) {
    plain_figures();
    let r = table();
    let mut g = c.benchmark_group("routes");
    g.throughput(Throughput::Elements(1));
    let live: Vec<FourTuple> = (0..LIVE).map(tuple).collect();
    let mut i = 0usize;
    g.bench_function("owner", |b| {
        b.iter(|| {
            i = (i + 1) % live.len();
            black_box(r.owner(&live[i]))
        })
    });
    {
        let _churn = Churn::start(r.clone());
        g.bench_function("owner_with_churn", |b| {
            b.iter(|| {
                i = (i + 1) % live.len();
                black_box(r.owner(&live[i]))
            })
        });
    }
    let batch: Vec<Record> = (0..64).map(|i| record(tuple(i * 97 % LIVE))).collect();
    let mut out = vec![Vec::with_capacity(64), Vec::with_capacity(64)];
    g.throughput(Throughput::Elements(64));
    g.bench_function("route_records_64", |b| {
        b.iter(|| {
            out.iter_mut().for_each(Vec::clear);
            black_box(route_records(&r, batch.clone(), &mut out))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
