//! Tests of the capture-file reader over literal pcap and pcapng bytes built here: every link
//! type, both byte orders and timestamp resolutions, truncation at every byte, garbage, random
//! input; and the writer read back.

use std::time::Duration;

use crate::testkit::{eth, v4, v6};
use proptest::prelude::*;

use super::link::LinkLayerError;
use super::*;

// ---------------------------------------------------------------------------------------------
// Packet and file builders

fn eth_tagged(tags: &[u16], ethertype: u16, ip: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    for &t in tags {
        f.extend_from_slice(&t.to_be_bytes());
        f.extend_from_slice(&[0x00, 0x64]); // VLAN 100
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(ip);
    f
}

fn sll(proto: u16, ip: &[u8]) -> Vec<u8> {
    // pkttype 0 (host), hatype 1, halen 6, address padded to 8, protocol
    let mut f = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 2, 0, 0];
    f.extend_from_slice(&proto.to_be_bytes());
    f.extend_from_slice(ip);
    f
}

fn sll2(proto: u16, ip: &[u8]) -> Vec<u8> {
    // protocol, reserved, ifindex 3, hatype 1, pkttype 4 (outgoing), halen 6, address
    let mut f = proto.to_be_bytes().to_vec();
    f.extend_from_slice(&[0, 0, 0, 0, 0, 3, 0, 1, 4, 6, 2, 0, 0, 0, 0, 2, 0, 0]);
    f.extend_from_slice(ip);
    f
}

fn with_prefix(prefix: [u8; 4], ip: &[u8]) -> Vec<u8> {
    let mut f = prefix.to_vec();
    f.extend_from_slice(ip);
    f
}

fn put32(out: &mut Vec<u8>, be: bool, v: u32) {
    out.extend_from_slice(&if be { v.to_be_bytes() } else { v.to_le_bytes() });
}

fn put16(out: &mut Vec<u8>, be: bool, v: u16) {
    out.extend_from_slice(&if be { v.to_be_bytes() } else { v.to_le_bytes() });
}

fn pcap_header(be: bool, nanos: bool, link: u32, snaplen: u32) -> Vec<u8> {
    let mut h = Vec::new();
    put32(&mut h, be, if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 });
    put16(&mut h, be, 2);
    put16(&mut h, be, 4);
    put32(&mut h, be, 0);
    put32(&mut h, be, 0);
    put32(&mut h, be, snaplen);
    put32(&mut h, be, link);
    h
}

fn pcap_record(be: bool, nanos: bool, ts: Duration, data: &[u8], wire_len: usize) -> Vec<u8> {
    let mut r = Vec::new();
    put32(&mut r, be, ts.as_secs() as u32);
    put32(
        &mut r,
        be,
        if nanos {
            ts.subsec_nanos()
        } else {
            ts.subsec_micros()
        },
    );
    put32(&mut r, be, data.len() as u32);
    put32(&mut r, be, wire_len as u32);
    r.extend_from_slice(data);
    r
}

/// A little-endian microsecond pcap of `link` holding `frames` at `ts`.
fn pcap(link: u32, frames: &[(Duration, Vec<u8>)]) -> Vec<u8> {
    let mut f = pcap_header(false, false, link, 262_144);
    for (ts, d) in frames {
        f.extend(pcap_record(false, false, *ts, d, d.len()));
    }
    f
}

fn block(be: bool, ty: u32, body: &[u8]) -> Vec<u8> {
    let mut body = body.to_vec();
    while body.len() & 3 != 0 {
        body.push(0);
    }
    let len = (body.len() + 12) as u32;
    let mut b = Vec::new();
    put32(&mut b, be, ty);
    put32(&mut b, be, len);
    b.extend(body);
    put32(&mut b, be, len);
    b
}

fn shb(be: bool) -> Vec<u8> {
    let mut body = Vec::new();
    put32(&mut body, be, 0x1a2b_3c4d);
    put16(&mut body, be, 1);
    put16(&mut body, be, 0);
    body.extend_from_slice(&[0xff; 8]); // section length unknown
    block(be, 0x0a0d_0d0a, &body)
}

fn idb(be: bool, link: u16, opts: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = Vec::new();
    put16(&mut body, be, link);
    put16(&mut body, be, 0);
    put32(&mut body, be, 262_144);
    for (code, v) in opts {
        put16(&mut body, be, *code);
        put16(&mut body, be, v.len() as u16);
        body.extend_from_slice(v);
        while body.len() & 3 != 0 {
            body.push(0);
        }
    }
    if !opts.is_empty() {
        body.extend_from_slice(&[0; 4]); // opt_endofopt
    }
    block(be, 1, &body)
}

fn epb(be: bool, iface: u32, ticks: u64, data: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    put32(&mut body, be, iface);
    put32(&mut body, be, (ticks >> 32) as u32);
    put32(&mut body, be, ticks as u32);
    put32(&mut body, be, data.len() as u32);
    put32(&mut body, be, data.len() as u32);
    body.extend_from_slice(data);
    block(be, 6, &body)
}

fn spb(be: bool, data: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    put32(&mut body, be, data.len() as u32);
    body.extend_from_slice(data);
    block(be, 3, &body)
}

fn obsolete_pb(be: bool, iface: u16, ticks: u64, data: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    put16(&mut body, be, iface);
    put16(&mut body, be, 0);
    put32(&mut body, be, (ticks >> 32) as u32);
    put32(&mut body, be, ticks as u32);
    put32(&mut body, be, data.len() as u32);
    put32(&mut body, be, data.len() as u32);
    body.extend_from_slice(data);
    block(be, 2, &body)
}

#[derive(Debug, Default)]
struct Read {
    packets: Vec<(Duration, Vec<u8>, u64, u64)>,
    skips: Vec<Skip>,
    stats: ReadStats,
}

fn read_all(bytes: &[u8]) -> Read {
    let mut r = Reader::new(bytes).unwrap();
    let mut out = Read::default();
    // Every event consumes input, so a file of n bytes yields fewer than n + 2 events.
    for _ in 0..bytes.len() + 2 {
        match r.next_event().unwrap() {
            Some(Event::Packet(p)) => out.packets.push((p.ts, p.data.to_vec(), p.index, p.offset)),
            Some(Event::Skip(s)) => out.skips.push(s),
            None => {
                out.stats = *r.stats();
                return out;
            }
        }
    }
    panic!("the reader did not end");
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

// ---------------------------------------------------------------------------------------------
// Reader: formats and link types

#[test]
fn pcap_every_link_type() {
    let ip4 = v4(b"GET / HTTP/1.1\r\n\r\n");
    let ip6 = v6(b"GET /six HTTP/1.1\r\n\r\n");
    let arp_free = |f: Vec<u8>| f;
    let cases: Vec<(u32, Vec<u8>, &Vec<u8>)> = vec![
        (1, eth(0x0800, &ip4), &ip4),
        (1, eth(0x86dd, &ip6), &ip6),
        (1, eth_tagged(&[0x8100], 0x0800, &ip4), &ip4),
        (1, eth_tagged(&[0x88a8, 0x8100], 0x86dd, &ip6), &ip6),
        (113, sll(0x0800, &ip4), &ip4),
        (113, sll(0x86dd, &ip6), &ip6),
        (276, sll2(0x0800, &ip4), &ip4),
        (276, sll2(0x86dd, &ip6), &ip6),
        (101, arp_free(ip4.clone()), &ip4),
        (101, ip6.clone(), &ip6),
        (12, ip4.clone(), &ip4),
        (14, ip6.clone(), &ip6),
        (228, ip4.clone(), &ip4),
        (229, ip6.clone(), &ip6),
        (0, with_prefix(2u32.to_le_bytes(), &ip4), &ip4),
        (0, with_prefix(10u32.to_be_bytes(), &ip6), &ip6),
        (108, with_prefix(24u32.to_be_bytes(), &ip6), &ip6),
    ];
    for (link, frame, want) in &cases {
        let file = pcap(*link, &[(secs(1.5), frame.clone())]);
        let r = read_all(&file);
        assert!(r.skips.is_empty(), "link {link}: {:?}", r.skips);
        assert_eq!(r.packets.len(), 1, "link {link}");
        assert_eq!(&r.packets[0].1, *want, "link {link}");
        assert_eq!(r.packets[0].0, secs(1.5));
        assert_eq!((r.packets[0].2, r.packets[0].3), (1, 24));
    }
}

#[test]
fn pcap_ethernet_padding_and_trailer_are_cut() {
    let ip = v4(b""); // 40 bytes: Ethernet pads it to 60 and adds a 4-byte FCS
    let mut frame = eth(0x0800, &ip);
    frame.resize(64, 0xee);
    let r = read_all(&pcap(1, &[(secs(0.0), frame)]));
    assert_eq!(r.packets[0].1, ip);
}

#[test]
fn pcap_byte_orders_and_resolutions() {
    let ip = v4(b"x");
    let ts = Duration::new(1_700_000_000, 123_456_789);
    for be in [false, true] {
        for nanos in [false, true] {
            let mut f = pcap_header(be, nanos, 101, 65535);
            f.extend(pcap_record(be, nanos, ts, &ip, ip.len()));
            f.extend(pcap_record(be, nanos, ts + secs(1.0), &ip, ip.len()));
            let r = read_all(&f);
            let want = if nanos {
                ts
            } else {
                Duration::new(1_700_000_000, 123_456_000)
            };
            assert_eq!(r.packets.len(), 2, "be {be} nanos {nanos}");
            assert_eq!(r.packets[0].0, want, "be {be} nanos {nanos}");
            assert_eq!(r.packets[1].0, want + secs(1.0));
            assert_eq!(r.packets[1].3, 24 + 16 + ip.len() as u64);
            assert_eq!(r.packets[0].1, ip);
        }
    }
}

#[test]
fn pcap_pcapng_sections_interfaces_and_resolutions() {
    let ip4 = v4(b"GET /a HTTP/1.1\r\n\r\n");
    let ip6 = v6(b"GET /b HTTP/1.1\r\n\r\n");
    let mut f = shb(false);
    f.extend(idb(false, 1, &[])); // 0: Ethernet, microseconds
    f.extend(idb(
        false,
        101,
        &[(9, vec![9]), (14, 100i64.to_le_bytes().to_vec())],
    )); // 1: raw, ns, +100 s
    f.extend(idb(false, 276, &[(9, vec![0x8a])])); // 2: SLL2, 2^-10 s
    f.extend(epb(false, 0, 1_500_000, &eth(0x0800, &ip4))); // 1.5 s
    f.extend(block(false, 0x0000_0bad, b"custom block, skipped")); // unknown type
    f.extend(epb(false, 1, 2_000_000_001, &ip6)); // 2.000000001 s + 100
    f.extend(epb(false, 2, 3 * 1024 + 512, &sll2(0x0800, &ip4))); // 3.5 s
    f.extend(spb(false, &eth(0x86dd, &ip6))); // interface 0, time of the previous packet
    f.extend(obsolete_pb(false, 0, 4_000_000, &eth(0x0800, &ip4))); // 4 s
                                                                    // A second section, big-endian, with interfaces of its own.
    f.extend(shb(true));
    f.extend(idb(true, 113, &[(9, vec![3])])); // 0: SLL v1, milliseconds
    f.extend(epb(true, 0, 5_250, &sll(0x86dd, &ip6))); // 5.25 s
    let r = read_all(&f);
    assert!(r.skips.is_empty(), "{:?}", r.skips);
    let got: Vec<(Duration, &Vec<u8>, u64)> = r.packets.iter().map(|p| (p.0, &p.1, p.2)).collect();
    assert_eq!(
        got,
        vec![
            (secs(1.5), &ip4, 5),
            (Duration::new(102, 1), &ip6, 7),
            (secs(3.5), &ip4, 8),
            (secs(3.5), &ip6, 9),
            (secs(4.0), &ip4, 10),
            (secs(5.25), &ip6, 13),
        ]
    );
    assert_eq!(r.stats.records, 6);
    assert_eq!(r.stats.packets, 6);
}

#[test]
fn pcap_pcapng_bad_interfaces_are_named_and_skipped() {
    let ip = v4(b"y");
    let mut f = shb(false);
    f.extend(idb(false, 105, &[])); // 0: 802.11, not supported
    f.extend(idb(false, 101, &[(9, vec![0x7f])])); // 1: raw, resolution out of range
    f.extend(epb(false, 0, 1, &ip));
    f.extend(epb(false, 5, 1, &ip)); // no interface 5
    f.extend(epb(false, 1, 7_000_000, &ip)); // default resolution kept
    let r = read_all(&f);
    assert_eq!(r.packets.len(), 1);
    assert_eq!(r.packets[0].0, secs(7.0));
    let kinds: Vec<(u64, &SkipKind)> = r.skips.iter().map(|s| (s.index, &s.kind)).collect();
    assert!(
        matches!(kinds[0], (3, SkipKind::Malformed(m)) if m.contains("interface 1")),
        "{kinds:?}"
    );
    assert_eq!(kinds[1], (4, &SkipKind::UnsupportedLink(105)));
    assert!(
        matches!(kinds[2], (5, SkipKind::Malformed(m)) if m.contains("interface 5")),
        "{kinds:?}"
    );
    assert_eq!(
        r.skips[1].offset,
        (shb(false).len() + 2 * idb(false, 1, &[]).len() + 12) as u64
    );
    assert!(r.skips[1]
        .to_string()
        .starts_with(&format!("block 4 at offset {}", r.skips[1].offset)));
}

#[test]
fn pcap_non_ip_short_frames_and_snapped_packets() {
    let ip = v4(b"GET /long HTTP/1.1\r\n\r\n");
    let mut f = pcap_header(false, false, 1, 262_144);
    f.extend(pcap_record(
        false,
        false,
        secs(1.0),
        &eth(0x0806, &[0; 28]),
        42,
    )); // ARP
    f.extend(pcap_record(
        false,
        false,
        secs(2.0),
        &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        10,
    )); // short
    f.extend(pcap_record(
        false,
        false,
        secs(3.0),
        &eth(0x0800, &[0x55; 30]),
        44,
    )); // version 5
    let cut = eth(0x0800, &ip[..30]);
    f.extend(pcap_record(false, false, secs(4.0), &cut, 14 + ip.len())); // snap length
    f.extend(pcap_record(false, false, secs(5.0), &cut, cut.len())); // IP length lies
    f.extend(pcap_record(
        false,
        false,
        secs(6.0),
        &eth(0x0800, &ip),
        14 + ip.len(),
    ));
    let r = read_all(&f);
    assert_eq!(r.packets.len(), 1);
    assert_eq!(r.packets[0].2, 6);
    let kinds: Vec<&SkipKind> = r.skips.iter().map(|s| &s.kind).collect();
    assert_eq!(kinds[0], &SkipKind::Link(LinkLayerError::NotIp(0x0806)));
    assert_eq!(
        kinds[1],
        &SkipKind::Link(LinkLayerError::Short { need: 14, have: 10 })
    );
    assert_eq!(kinds[2], &SkipKind::Link(LinkLayerError::BadVersion(5)));
    assert_eq!(
        kinds[3],
        &SkipKind::Snapped {
            ip_len: ip.len(),
            have: 30
        }
    );
    assert!(matches!(kinds[4], SkipKind::Malformed(_)));
    assert_eq!(
        r.skips.iter().map(|s| s.index).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    let st = r.stats;
    assert_eq!(
        (st.records, st.packets, st.not_ip, st.snapped, st.malformed),
        (6, 1, 1, 1, 3)
    );
}

#[test]
fn pcap_files_that_are_not_captures() {
    let err = |b: &[u8]| Reader::new(b).unwrap_err().to_string();
    assert!(matches!(Reader::new(&b""[..]), Err(ReadError::Empty)));
    assert!(err(b"hello, world").contains("not a pcap or pcapng file (it starts with 68 65 6c 6c"));
    assert!(err(&pcap_header(false, false, 1, 0)[..20]).contains("cut short: 20 of its 24"));
    assert!(err(&pcap_header(false, false, 105, 0)).contains("link type 105 is not supported"));
    let mut kuznetsov = pcap_header(false, false, 1, 0);
    kuznetsov[..4].copy_from_slice(&0xa1b2_cd34u32.to_le_bytes());
    assert!(err(&kuznetsov).contains("editcap"));
    let mut bad_bom = shb(false);
    bad_bom[8] = 0;
    assert!(err(&bad_bom).contains("byte-order magic"));
    // A valid header and nothing else: no packet, no complaint.
    let r = read_all(&pcap_header(true, true, 1, 0));
    assert!(r.packets.is_empty() && r.skips.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Reader: truncation and garbage

fn three_packets() -> Vec<Vec<u8>> {
    vec![
        v4(b"GET /1 HTTP/1.1\r\n\r\n"),
        v6(b"GET /2 HTTP/1.1\r\n\r\n"),
        v4(b"GET /3 HTTP/1.1\r\n\r\n"),
    ]
}

/// Every cut of a file yields the whole records before the cut and, unless the cut falls on a
/// record boundary, one truncation report naming the record it fell in.
fn check_every_cut(file: &[u8], boundaries: &[usize], first_index: u64) {
    for cut in boundaries[0]..=file.len() {
        let r = read_all(&file[..cut]);
        let whole = boundaries.iter().skip(1).filter(|&&b| b <= cut).count();
        assert_eq!(r.packets.len(), whole, "cut at {cut}");
        if boundaries.contains(&cut) {
            assert!(r.skips.is_empty(), "cut at {cut}: {:?}", r.skips);
        } else {
            assert_eq!(r.skips.len(), 1, "cut at {cut}: {:?}", r.skips);
            let s = &r.skips[0];
            let start = boundaries[whole];
            assert_eq!(s.offset, start as u64, "cut at {cut}");
            assert_eq!(s.index, first_index + whole as u64, "cut at {cut}");
            match s.kind {
                SkipKind::Truncated { need, have } => {
                    assert_eq!(have, (cut - start) as u64);
                    assert!(need > have);
                }
                ref k => panic!("cut at {cut}: {k:?}"),
            }
            assert!(s.to_string().contains("the file ends inside it"));
            assert_eq!(r.stats.truncated, 1);
        }
    }
}

#[test]
fn pcap_truncated_at_every_byte() {
    let mut file = pcap_header(false, false, 101, 65535);
    let mut boundaries = vec![file.len()];
    for (i, p) in three_packets().iter().enumerate() {
        file.extend(pcap_record(false, false, secs(i as f64), p, p.len()));
        boundaries.push(file.len());
    }
    check_every_cut(&file, &boundaries, 1);
}

#[test]
fn pcap_pcapng_truncated_at_every_byte() {
    let mut file = shb(true);
    file.extend(idb(true, 1, &[]));
    let mut boundaries = vec![file.len()];
    for (i, p) in three_packets().iter().enumerate() {
        file.extend(epb(
            true,
            0,
            i as u64 * 1_000_000,
            &eth(if p[0] >> 4 == 4 { 0x0800 } else { 0x86dd }, p),
        ));
        boundaries.push(file.len());
    }
    check_every_cut(&file, &boundaries, 3);
}

#[test]
fn pcap_garbage_between_records_is_skipped_and_named() {
    let pk = three_packets();
    let mut file = pcap_header(false, false, 101, 65535);
    file.extend(pcap_record(false, false, secs(10.0), &pk[0], pk[0].len()));
    let garbage_at = file.len();
    // A header whose length no record has, then junk: a file overwritten in the middle.
    let mut junk = pcap_record(false, false, secs(10.5), &[], 0);
    junk[8..12].copy_from_slice(&0xffff_ff00u32.to_le_bytes());
    junk.extend((0..37u8).map(|i| i.wrapping_mul(97)));
    file.extend(&junk);
    file.extend(pcap_record(false, false, secs(11.0), &pk[1], pk[1].len()));
    file.extend(pcap_record(false, false, secs(12.0), &pk[2], pk[2].len()));
    let r = read_all(&file);
    assert_eq!(
        r.packets.iter().map(|p| p.1.clone()).collect::<Vec<_>>(),
        pk
    );
    assert_eq!(r.skips.len(), 1);
    let s = &r.skips[0];
    assert_eq!((s.index, s.offset), (2, garbage_at as u64));
    assert_eq!(
        s.kind,
        SkipKind::Garbage {
            why: "record length 4294967040 is larger than any packet of this file (at most 262144)"
                .into(),
            skipped: junk.len() as u64,
            resumed: true
        }
    );
    assert!(
        s.to_string()
            .starts_with(&format!("record 2 at offset {garbage_at}:")),
        "{s}"
    );
    assert_eq!(
        (r.stats.garbled, r.stats.garbage_bytes),
        (1, junk.len() as u64)
    );
}

#[test]
fn pcap_pcapng_garbage_is_skipped_to_the_next_block() {
    let pk = three_packets();
    let mut file = shb(false);
    file.extend(idb(false, 101, &[]));
    file.extend(epb(false, 0, 1, &pk[0]));
    let bad_at = file.len();
    let mut bad = epb(false, 0, 2, &pk[1]);
    let n = bad.len();
    bad[n - 4..].copy_from_slice(&7u32.to_le_bytes()); // the trailing length is wrong
    file.extend(&bad);
    file.extend(epb(false, 0, 3, &pk[2]));
    let tail_at = file.len();
    file.extend([0x5a; 23]); // junk at the end, no block in it
    let r = read_all(&file);
    assert_eq!(
        r.packets.iter().map(|p| p.1.clone()).collect::<Vec<_>>(),
        vec![pk[0].clone(), pk[2].clone()]
    );
    assert_eq!(r.skips.len(), 2, "{:?}", r.skips);
    assert_eq!(r.skips[0].offset, bad_at as u64);
    assert!(
        matches!(&r.skips[0].kind, SkipKind::Garbage { skipped, resumed: true, why }
        if *skipped == n as u64 && why.contains("trailing copy"))
    );
    assert_eq!(r.skips[1].offset, tail_at as u64);
    assert!(matches!(
        &r.skips[1].kind,
        SkipKind::Garbage {
            skipped: 23,
            resumed: false,
            ..
        }
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Random bytes after a valid header never make the reader panic or loop.
    #[test]
    fn pcap_random_bytes_never_panic(ng in any::<bool>(), body in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut file = if ng { let mut f = shb(false); f.extend(idb(false, 1, &[])); f } else { pcap_header(false, false, 1, 0) };
        file.extend(body);
        let r = read_all(&file);
        prop_assert!(r.stats.packets as usize == r.packets.len());
    }

    /// Damaging bytes of a valid file loses at most the records it touched (and what a resync
    /// skips), never panics, and keeps every packet delivered one of the originals.
    #[test]
    fn pcap_damaged_files_never_panic(ng in any::<bool>(), hits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
        let pk: Vec<Vec<u8>> = (0..8).map(|i| v4(format!("GET /{i} HTTP/1.1\r\n\r\n").as_bytes())).collect();
        let mut file = if ng { let mut f = shb(false); f.extend(idb(false, 101, &[])); f } else { pcap_header(false, false, 101, 0) };
        let head = file.len();
        for (i, p) in pk.iter().enumerate() {
            if ng { file.extend(epb(false, 0, i as u64, p)) } else { file.extend(pcap_record(false, false, secs(i as f64), p, p.len())) }
        }
        let hits_len = hits.len();
        for (at, v) in hits {
            let at = head + at % (file.len() - head);
            file[at] = v;
        }
        let n_hits = hits_len;
        let r = read_all(&file);
        // The undamaged packets come through in order, and each damaged byte costs at most the
        // record it hit and the one a resynchronisation may pass over.
        let intact: Vec<usize> = r.packets.iter().filter_map(|(_, d, _, _)| pk.iter().position(|p| p == d)).collect();
        prop_assert!(intact.windows(2).all(|w| w[0] < w[1]), "{:?}", intact);
        prop_assert!(intact.len() + 2 * n_hits >= pk.len(), "{} intact of {} with {} hits: {:?}", intact.len(), pk.len(), n_hits, r.skips);
    }
}

// ---------------------------------------------------------------------------------------------
// Writer

#[test]
fn pcap_writer_output_reads_back() {
    for nanos in [false, true] {
        let frames = [
            (
                Duration::new(1_700_000_000, 123_456_789),
                v4(b"GET / HTTP/1.1\r\n\r\n"),
            ),
            (Duration::new(1_700_000_001, 5_000), v6(b"")),
        ];
        let mut w = PcapWriter::new(Vec::new(), LinkType::Raw, nanos).unwrap();
        for (ts, f) in &frames {
            w.write(*ts, f).unwrap();
        }
        let file = w.into_inner().unwrap();
        let mut raw = pcap_header(false, nanos, 101, writer::SNAPLEN);
        for (ts, f) in &frames {
            raw.extend(pcap_record(false, nanos, *ts, f, f.len()));
        }
        assert_eq!(file, raw, "nanos {nanos}: the bytes of a hand-built file");
        let r = read_all(&file);
        assert!(r.skips.is_empty(), "{:?}", r.skips);
        let want_ts = |ts: Duration| {
            if nanos {
                ts
            } else {
                Duration::new(ts.as_secs(), ts.subsec_micros() * 1000)
            }
        };
        let got: Vec<(Duration, Vec<u8>)> = r.packets.iter().map(|p| (p.0, p.1.clone())).collect();
        let want: Vec<(Duration, Vec<u8>)> = frames
            .iter()
            .map(|(t, f)| (want_ts(*t), f.clone()))
            .collect();
        assert_eq!(got, want);
    }
    let mut w = PcapWriter::new(Vec::new(), LinkType::Ethernet, false).unwrap();
    let e = w.write(Duration::from_secs(1 << 33), b"x").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    let e = w
        .write(Duration::ZERO, &vec![0; writer::SNAPLEN as usize + 1])
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(
        w.into_inner().unwrap().len(),
        24,
        "nothing written for refused frames"
    );
    for n in [0, 1, 12, 14, 101, 108, 113, 228, 229, 276] {
        let l = LinkType::from_number(n).unwrap();
        assert_eq!(LinkType::from_number(l.number()), Some(l));
    }
}

#[test]
fn pcap_trim_cuts_padding_only() {
    let p = v4(b"");
    let mut padded = p.clone();
    padded.resize(60, 0);
    assert_eq!(trim_to_ip_len(&padded), &p[..]);
    assert_eq!(
        trim_to_ip_len(&p[..30]).len(),
        30,
        "short stays for the parser to judge"
    );
    assert_eq!(trim_to_ip_len(&[0x45]).len(), 1);
    assert_eq!(trim_to_ip_len(&[]).len(), 0);
}

#[test]
fn pcapng_writer_output_is_the_hand_built_file_and_reads_back() {
    let frames = [
        (
            Duration::new(1_700_000_000, 123_456_789),
            v4(b"GET / HTTP/1.1\r\n\r\n"),
        ),
        (Duration::new(1_700_000_001, 5_000), v6(b"x")),
    ];
    let mut file = Vec::new();
    let mut n = writer::pcapng_header(&mut file, LinkType::Raw).unwrap();
    for (ts, f) in &frames {
        n += writer::pcapng_packet(&mut file, *ts, f).unwrap();
    }
    assert_eq!(n, file.len() as u64);
    // Raw IP (101), no snap length limit, no options.
    let mut raw = shb(false);
    raw.extend(block(false, 1, &[101, 0, 0, 0, 0, 0, 0, 0]));
    for (ts, f) in &frames {
        raw.extend(epb(false, 0, ts.as_micros() as u64, f));
    }
    assert_eq!(file, raw, "the bytes of a hand-built file");
    let r = read_all(&file);
    assert!(r.skips.is_empty(), "{:?}", r.skips);
    let got: Vec<(Duration, Vec<u8>)> = r.packets.iter().map(|p| (p.0, p.1.clone())).collect();
    let want: Vec<(Duration, Vec<u8>)> = frames
        .iter()
        .map(|(t, f)| {
            (
                Duration::new(t.as_secs(), t.subsec_micros() * 1000),
                f.clone(),
            )
        })
        .collect();
    assert_eq!(got, want);
}
