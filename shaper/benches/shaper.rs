//! Per-request shaping cost and plan generation speed.
//!
//! `cargo bench -p shaper --bench shaper -- --warm-up-time 1 --measurement-time 2`

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rand::rngs::StdRng;
use rand::SeedableRng;
use shaper::onoff::Plan;
use shaper::{Profile, SessionId, Shaper};

const PROFILE: &str = r#"
[multiplication]
factor = 2.5
[onoff]
enabled = true
sources = 64
horizon_s = 3600
[[pools]]
name = "home"
weight = 0.7
cidr = "198.19.0.0/18"
users = 5000
[[pools]]
name = "office"
weight = 0.3
cidr = "198.19.64.0/20"
users = 800
"#;

fn client(i: u32) -> SocketAddr {
    SocketAddr::new(
        IpAddr::V4(Ipv4Addr::from(0xcb00_0000 + (i % 60_000))),
        20000 + (i / 60_000) as u16,
    )
}

fn shaping(c: &mut Criterion) {
    let profile = Profile::from_toml_str(PROFILE).unwrap();
    let mut g = c.benchmark_group("shaping");
    g.throughput(Throughput::Elements(1));

    // One request of a live gated copy: think-time scaling, NAT renewal, binary search in the plan.
    let mut s = Shaper::new(&profile, 1).unwrap();
    let sessions: Vec<SessionId> = (0..10_000)
        .flat_map(|i| s.on_session(Duration::ZERO, client(i)).unwrap())
        .map(|p| p.session)
        .collect();
    let mut k = 0u64;
    g.bench_function("release_at (gated, 25k live copies)", |b| {
        b.iter(|| {
            k += 1;
            let id = sessions[(k as usize) % sessions.len()];
            let idx = (k / sessions.len() as u64) as u32;
            // Online arrivals 1 ms apart over the run; the plan is 3600 s and wraps.
            black_box(s.release_at(Duration::from_millis(k), id, idx).unwrap())
        })
    });

    // A new session and its end: copies, sticky user choice, port allocation, bookkeeping.
    let mut s = Shaper::new(&profile, 2).unwrap();
    let mut i = 0u32;
    g.bench_function("on_session + end_session (factor 2.5, pools)", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            let plans = s
                .on_session(Duration::from_millis(u64::from(i)), client(i))
                .unwrap();
            for p in &plans {
                s.end_session(p.session);
            }
            black_box(plans.len())
        })
    });
    g.finish();
}

fn planning(c: &mut Criterion) {
    let profile = Profile::from_toml_str(PROFILE).unwrap();
    let model = profile.onoff_model().unwrap();
    let mut g = c.benchmark_group("plan");
    g.sample_size(10);
    // A million source-seconds: 64 sources x 15,625 s.
    g.throughput(Throughput::Elements(1_000_000));
    g.bench_function("generate 1M source-seconds", |b| {
        b.iter_batched(
            || StdRng::seed_from_u64(3),
            |mut rng| black_box(Plan::generate(&model, 64, 15_625.0, &mut rng).unwrap()),
            BatchSize::SmallInput,
        )
    });
    let plan = Plan::generate(&model, 64, 15_625.0, &mut StdRng::seed_from_u64(3)).unwrap();
    g.bench_function("to_csv 1M source-seconds", |b| {
        b.iter(|| black_box(plan.to_csv().len()))
    });
    g.finish();
}

criterion_group!(benches, shaping, planning);
criterion_main!(benches);
