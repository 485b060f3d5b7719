//! Engine cost per captured segment: established sessions stream client data segments through
//! the engine, every segment is sent on (`poll_transmit` builds it with fresh checksums), and
//! the test server's ACK records come back for every fourth segment. One "segment" below is
//! one `handle_captured` + its `poll_transmit` + a quarter of a `handle_record` (+ its ACK).
//! The plain figures are printed without and with `--rules` (each segment then one HTTP request
//! that every session's editor reads, tries against a filter and dyes).
//!
//! `cargo bench -p copier --bench engine -- --warm-up-time 1 --measurement-time 3`
//! (prints a plain ns/segment figure too, over a fixed run of segments).

mod support;

use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use support::Bench;

/// The rules of the `--rules` figure: a filter that matches nothing of the bench's requests
/// (every request is read and tried), and a dye header on every one.
const RULES: &str = "[[filter]]\nname = \"pay\"\nmethods = [\"POST\"]\npath = \"/pay/**\"\n[dye]\nvalue = \"copy-{copy}\"\n";

fn plain_figure(sessions: u32, seg: usize, rules: bool) {
    let grow = "X-Traffic-Copy: copy-0\r\n".len() as u32;
    let rules = rules.then(|| {
        (
            std::sync::Arc::new(copier::engine::Rules::from_toml_str(RULES).unwrap()),
            grow,
        )
    });
    let label = if rules.is_some() {
        ", each an HTTP request dyed by --rules"
    } else {
        ""
    };
    let mut b = Bench::with_rules(sessions, seg, rules);
    for _ in 0..200_000 {
        b.step();
    }
    let n = 2_000_000u32;
    let t = Instant::now();
    for _ in 0..n {
        b.step();
    }
    let ns = t.elapsed().as_nanos() as f64 / f64::from(n);
    let s = b.e.stats();
    assert!(
        s.segments_sent >= u64::from(n),
        "every segment went out: {s:?}"
    );
    assert_eq!(s.sessions_failed.total(), 0);
    println!(
        "engine: {ns:.0} ns/segment ({sessions} sessions, {seg}-byte segments{label}, an ACK record per 4 segments; {} KiB buffered)",
        b.e.memory_used() >> 10
    );
}

fn bench(c: &mut Criterion) {
    plain_figure(1000, 1448, false);
    plain_figure(1000, 100, false);
    plain_figure(1000, 1448, true);
    plain_figure(1000, 100, true);
    let mut g = c.benchmark_group("engine");
    g.throughput(Throughput::Elements(1));
    for (sessions, seg) in [(1000u32, 1448usize), (1000, 100), (50_000, 1448)] {
        let mut b = Bench::new(sessions, seg);
        g.bench_function(format!("segment/{sessions}_sessions/{seg}B"), |x| {
            x.iter(|| b.step())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
