//! The control protocol's cost per Records frame: encoding, sealing (the per-frame tag of the
//! authenticated connection), decoding, and decoding with tag verification, for one frame of
//! 4096 records with 52-byte headers (an IPv4 + TCP header with timestamps), what a busy
//! intercept writes in one go.
//!
//! `cargo bench -p common --bench proto`

use common::proto::auth::session_keys;
use common::proto::codec::seal_frames;
use common::proto::{encode_records, FrameDecoder, Record, Role};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn records(n: usize) -> Vec<Record> {
    (0..n)
        .map(|i| Record {
            orig_len: 1500,
            headers: vec![(i % 251) as u8; 52],
            payload: Vec::new(),
            stamp: 0,
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let recs = records(4096);
    let mut plain = Vec::new();
    encode_records(&recs, &mut plain);
    let keys = || session_keys(b"a secret of at least 16 bytes", &[1; 32], &[2; 32]);
    let mut sealed = Vec::new();
    seal_frames(&keys().intercept_to_copier, &mut 0, &plain, &mut sealed);

    let mut g = c.benchmark_group("records_frame_4096");
    g.throughput(Throughput::Elements(recs.len() as u64));
    let mut out = Vec::with_capacity(sealed.len());
    g.bench_function("encode", |b| {
        b.iter(|| {
            out.clear();
            encode_records(&recs, &mut out);
        })
    });
    let key = keys().intercept_to_copier;
    g.bench_function("encode_and_seal", |b| {
        let mut buf = Vec::new();
        b.iter(|| {
            buf.clear();
            out.clear();
            encode_records(&recs, &mut buf);
            seal_frames(&key, &mut 0, &buf, &mut out);
        })
    });
    g.bench_function("decode", |b| {
        b.iter(|| {
            let mut d = FrameDecoder::new();
            d.push(&plain);
            d.next().unwrap().unwrap()
        })
    });
    g.bench_function("decode_and_verify", |b| {
        b.iter(|| {
            let mut d = FrameDecoder::new();
            d.authenticate(keys().intercept_to_copier, Role::Intercept);
            d.push(&sealed);
            d.next().unwrap().unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
