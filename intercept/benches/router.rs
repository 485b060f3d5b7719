//! Per-packet cost of the intercept's user-space path, without the kernel: the router's decision
//! for a registered session (among 10k registrations), for an allowed address and for an
//! unregistered one (held, fail closed); the same decision through the shared core with the
//! record pushed to a copier's outlet (what an NFQUEUE worker does between `recv` and the next
//! `recv`, minus the two syscalls); and encoding a Records frame of 1000 records (what a control
//! writer does per batch).
//!
//! Run: `cargo bench -p intercept --bench router -- --warm-up-time 1 --measurement-time 3`.
//! Every packet bench handles one packet per iteration, so criterion's time is ns/packet.

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::proto::{encode_records, Record};
use common::seq::SeqNum;
use common::wire::{TcpBuilder, TcpFlags, TcpOption};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use intercept::allow::AllowList;
use intercept::nfqueue::HEADER_COPY;
use intercept::outlet::{Outlet, Shared};
use intercept::router::{CopierId, Router, RouterConfig};

const REGISTERED: usize = 10_000;
/// Distinct packets cycled through, so the hash table is not always hit in the same line.
const DISTINCT: usize = 1024;
const SERVER: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(198, 18, 2, 2), 80));
const ALLOWED: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 1);

fn client(i: usize) -> SocketAddr {
    let a = Ipv4Addr::new(198, 19, (i / 250) as u8, (i % 250 + 1) as u8);
    SocketAddr::V4(SocketAddrV4::new(a, 10_000 + (i % 50_000) as u16))
}

/// A full-sized response segment (timestamps, 1448 bytes of data) cut to NFQUEUE's header-only
/// copy range, as the worker receives it.
fn response(to: SocketAddr, i: usize) -> Vec<u8> {
    let mut out = Vec::new();
    TcpBuilder {
        src: SERVER,
        dst: to,
        seq: SeqNum(1_000_000 + i as u32 * 1448),
        ack: SeqNum(500),
        flags: TcpFlags::ACK,
        window: 502,
        options: &[TcpOption::Timestamps { tsval: 1, tsecr: 2 }],
        payload: &[0x55; 1448],
        ttl: 64,
        ident: i as u16,
    }
    .emit(&mut out);
    out.truncate(HEADER_COPY);
    out
}

fn router() -> Router {
    let mut r = Router::new(RouterConfig {
        allow: AllowList::new(vec![ALLOWED.to_string().parse().unwrap()]),
        ..RouterConfig::default()
    });
    let tuples: Vec<FourTuple> = (0..REGISTERED)
        .map(|i| FourTuple::new(client(i), SERVER))
        .collect();
    r.handle_register(Instant::now(), CopierId(1), &tuples);
    r
}

fn packets(f: impl Fn(usize) -> SocketAddr) -> Vec<Vec<u8>> {
    (0..DISTINCT)
        .map(|i| response(f(i * (REGISTERED / DISTINCT)), i))
        .collect()
}

fn bench_router(c: &mut Criterion) {
    let mut g = c.benchmark_group("router");
    g.throughput(Throughput::Elements(1));
    let now = Instant::now();

    let mut r = router();
    let pkts = packets(client);
    let mut i = 0;
    g.bench_function("handle_packet/registered_of_10k", |b| {
        b.iter(|| {
            i = (i + 1) % DISTINCT;
            black_box(r.handle_packet(now, black_box(&pkts[i]), 0))
        })
    });
    assert_eq!(
        r.stats().delivered,
        r.stats().packets,
        "every packet was delivered"
    );

    let mut r = router();
    let allowed = packets(|i| SocketAddr::V4(SocketAddrV4::new(ALLOWED, 20_000 + i as u16)));
    g.bench_function("handle_packet/allowed", |b| {
        b.iter(|| {
            i = (i + 1) % DISTINCT;
            black_box(r.handle_packet(now, black_box(&allowed[i]), 0))
        })
    });
    assert_eq!(
        r.stats().accepted,
        r.stats().packets,
        "every packet was accepted"
    );

    // Unregistered: held (the buffer is full after 4096 packets, so from then on each packet
    // also evicts the oldest): the fail-closed path under a flood of strangers.
    let mut r = router();
    let strangers = packets(|i| {
        SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::new(198, 19, 200, 1),
            30_000 + i as u16,
        ))
    });
    g.bench_function("handle_packet/unregistered_held", |b| {
        b.iter(|| {
            i = (i + 1) % DISTINCT;
            black_box(r.handle_packet(now, black_box(&strangers[i]), 0))
        })
    });
    assert_eq!(r.stats().held, r.stats().packets, "every packet was held");

    // The worker's whole user-space step: lock, decide, unlock, push to the outlet (the
    // writer's drain is amortised here: every 4096 records).
    let shared = Shared::new(router(), 0);
    let outlet = Arc::new(Outlet::new(1 << 16));
    shared.lock().outlets.insert(CopierId(1), outlet.clone());
    let mut sink = Vec::with_capacity(4096);
    g.bench_function("shared_route_and_push/registered_of_10k", |b| {
        b.iter(|| {
            i = (i + 1) % DISTINCT;
            let (accept, delivery) = shared.route(now, black_box(&pkts[i]));
            if let Some(d) = delivery {
                d.push();
            }
            if i % 4096 == 0 || outlet.len() >= 4096 {
                sink.clear();
                outlet.drain_into(&mut sink, usize::MAX);
            }
            black_box(accept)
        })
    });
    g.finish();
}

fn bench_encode(c: &mut Criterion) {
    let mut g = c.benchmark_group("records");
    let mut r = router();
    let now = Instant::now();
    let records: Vec<Record> = packets(client)
        .iter()
        .cycle()
        .take(1000)
        .map(|p| match r.handle_packet(now, p, 0) {
            intercept::router::Decision::Deliver { record, .. } => record,
            other => panic!("expected a delivery, got {other:?}"),
        })
        .collect();
    let mut out = Vec::with_capacity(1 << 17);
    g.throughput(Throughput::Elements(records.len() as u64));
    g.bench_function("encode_frame_of_1000", |b| {
        b.iter(|| {
            out.clear();
            encode_records(black_box(&records), &mut out);
            black_box(out.len())
        })
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! { name = benches; config = config(); targets = bench_router, bench_encode }
criterion_main!(benches);
