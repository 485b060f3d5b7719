//! Tests of the offline replay over literal pcap and pcapng bytes built here: every link type,
//! both byte orders and timestamp resolutions, truncation at every byte, garbage, random input;
//! the pacer, the port filter, the per-pass ports, and the replay over a file.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::seq::SeqNum;
use common::wire::{TcpBuilder, TcpFlags};
use proptest::prelude::*;

use super::link::LinkError;
use super::*;
use crate::cli::parse_map;

// ---------------------------------------------------------------------------------------------
// Packet and file builders

fn tcp(src: &str, dst: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    TcpBuilder {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        seq: SeqNum(1000),
        ack: SeqNum(2000),
        flags: TcpFlags::ACK | TcpFlags::PSH,
        window: 1000,
        options: &[],
        payload,
        ttl: 64,
        ident: 7,
    }
    .emit(&mut out);
    out
}

fn v4(payload: &[u8]) -> Vec<u8> {
    tcp("198.18.1.2:40000", "198.18.1.1:80", payload)
}

fn v6(payload: &[u8]) -> Vec<u8> {
    tcp("[fd00::2]:40000", "[fd00::1]:80", payload)
}

fn eth(ethertype: u16, ip: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(ip);
    f
}

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
fn offline_pcap_every_link_type() {
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
fn offline_ethernet_padding_and_trailer_are_cut() {
    let ip = v4(b""); // 40 bytes: Ethernet pads it to 60 and adds a 4-byte FCS
    let mut frame = eth(0x0800, &ip);
    frame.resize(64, 0xee);
    let r = read_all(&pcap(1, &[(secs(0.0), frame)]));
    assert_eq!(r.packets[0].1, ip);
}

#[test]
fn offline_pcap_byte_orders_and_resolutions() {
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
fn offline_pcapng_sections_interfaces_and_resolutions() {
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
fn offline_pcapng_bad_interfaces_are_named_and_skipped() {
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
fn offline_non_ip_short_frames_and_snapped_packets() {
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
    assert_eq!(kinds[0], &SkipKind::Link(LinkError::NotIp(0x0806)));
    assert_eq!(
        kinds[1],
        &SkipKind::Link(LinkError::Short { need: 14, have: 10 })
    );
    assert_eq!(kinds[2], &SkipKind::Link(LinkError::BadVersion(5)));
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
fn offline_files_that_are_not_captures() {
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
fn offline_pcap_truncated_at_every_byte() {
    let mut file = pcap_header(false, false, 101, 65535);
    let mut boundaries = vec![file.len()];
    for (i, p) in three_packets().iter().enumerate() {
        file.extend(pcap_record(false, false, secs(i as f64), p, p.len()));
        boundaries.push(file.len());
    }
    check_every_cut(&file, &boundaries, 1);
}

#[test]
fn offline_pcapng_truncated_at_every_byte() {
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
fn offline_pcap_garbage_between_records_is_skipped_and_named() {
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
fn offline_pcapng_garbage_is_skipped_to_the_next_block() {
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
    fn offline_random_bytes_never_panic(ng in any::<bool>(), body in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut file = if ng { let mut f = shb(false); f.extend(idb(false, 1, &[])); f } else { pcap_header(false, false, 1, 0) };
        file.extend(body);
        let r = read_all(&file);
        prop_assert!(r.stats.packets as usize == r.packets.len());
    }

    /// Damaging bytes of a valid file loses at most the records it touched (and what a resync
    /// skips), never panics, and keeps every packet delivered one of the originals.
    #[test]
    fn offline_damaged_files_never_panic(ng in any::<bool>(), hits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
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
// Pacer, speed, filter, ports

#[test]
fn offline_pacer_keeps_compresses_and_cuts_gaps() {
    let ts = [100.0, 100.5, 103.0, 102.0, 103.2];
    let run = |speed, gap: f64| {
        let mut p = Pacer::new(speed, secs(gap));
        ts.iter()
            .map(|&t| p.schedule(secs(t)).as_secs_f64())
            .collect::<Vec<_>>()
    };
    let close = |a: Vec<f64>, b: &[f64]| {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6) && a.len() == b.len()
    };
    // 1x with no cut: the capture's gaps; the packet stamped earlier comes with the one before.
    assert!(close(
        run(Speed::Factor(1.0), 60.0),
        &[0.0, 0.5, 3.0, 3.0, 3.2]
    ));
    // 10x: a tenth.
    assert!(close(
        run(Speed::Factor(10.0), 60.0),
        &[0.0, 0.05, 0.3, 0.3, 0.32]
    ));
    // Gaps cut to 1 s first, then compressed.
    assert!(close(
        run(Speed::Factor(1.0), 1.0),
        &[0.0, 0.5, 1.5, 1.5, 1.7]
    ));
    assert!(close(
        run(Speed::Factor(10.0), 1.0),
        &[0.0, 0.05, 0.15, 0.15, 0.17]
    ));
    assert!(close(
        run(Speed::Factor(0.5), 1.0),
        &[0.0, 1.0, 3.0, 3.0, 3.4]
    ));
    assert!(close(run(Speed::Max, 60.0), &[0.0; 5]));
    // A new pass follows the previous one at once and keeps its own gaps.
    let mut p = Pacer::new(Speed::Factor(2.0), secs(60.0));
    p.schedule(secs(50.0));
    assert_eq!(p.schedule(secs(54.0)), secs(2.0));
    p.restart();
    assert_eq!(p.schedule(secs(50.0)), secs(2.0));
    assert_eq!(p.schedule(secs(51.0)), secs(2.5));
}

#[test]
fn offline_speed_values() {
    assert_eq!("max".parse::<Speed>().unwrap(), Speed::Max);
    assert_eq!("MAX".parse::<Speed>().unwrap(), Speed::Max);
    assert_eq!("0".parse::<Speed>().unwrap(), Speed::Max);
    assert_eq!("10".parse::<Speed>().unwrap(), Speed::Factor(10.0));
    assert_eq!("10x".parse::<Speed>().unwrap(), Speed::Factor(10.0));
    assert_eq!("0.5".parse::<Speed>().unwrap(), Speed::Factor(0.5));
    for bad in ["fast", "-1", "inf", "NaN", "", "1e9"] {
        let e = bad.parse::<Speed>().unwrap_err();
        assert!(e.contains(&format!("{bad:?}")), "{bad:?} -> {e}");
    }
}

#[test]
fn offline_filter_takes_client_to_service_packets_only() {
    let any80 = PortFilter::new(&[parse_map("80=198.18.2.2:80").unwrap()]);
    let req = v4(b"GET");
    let acc = any80.accept(&req).unwrap();
    assert_eq!(
        acc.client,
        "198.18.1.2:40000".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(acc.server, "198.18.1.1:80".parse::<SocketAddr>().unwrap());
    assert_eq!(acc.tcp_offset, 20);
    assert_eq!(any80.accept(&v6(b"GET")).unwrap().tcp_offset, 40);
    // The answer travels the other way.
    assert_eq!(
        any80.accept(&tcp("198.18.1.1:80", "198.18.1.2:40000", b"HTTP/1.1 200")),
        None
    );
    // Other ports, UDP, later fragments, cut headers: no.
    assert_eq!(
        any80.accept(&tcp("198.18.1.2:40000", "198.18.1.1:81", b"")),
        None
    );
    let mut udp = req.clone();
    udp[9] = 17;
    assert_eq!(any80.accept(&udp), None);
    let mut frag = req.clone();
    frag[7] = 8;
    assert_eq!(any80.accept(&frag), None);
    assert_eq!(any80.accept(&req[..22]), None);
    assert_eq!(any80.accept(&[]), None);
    // A map with an address takes only that address.
    let one = PortFilter::new(&[parse_map("198.18.1.1:80=198.18.2.2:80").unwrap()]);
    assert!(one.accept(&req).is_some());
    assert_eq!(
        one.accept(&tcp("198.18.1.2:40000", "198.18.1.7:80", b"")),
        None
    );
}

#[test]
fn offline_each_pass_gets_ports_no_earlier_pass_used() {
    let server: SocketAddr = "198.18.1.1:80".parse().unwrap();
    let c = |p: u16| SocketAddr::new("198.18.1.2".parse().unwrap(), p);
    let other = SocketAddr::new("198.18.1.3".parse().unwrap(), 40000);
    let mut lp = LoopPorts::new();
    // 40000 + 7919 is itself a captured port: pass 1 must not take it for 40000.
    let captured = [40000, 47919, 47920, 1000];
    for &p in &captured {
        assert_eq!(lp.port(c(p), server), p);
    }
    assert_eq!(lp.port(other, server), 40000);
    let mut seen: std::collections::HashSet<u16> = captured.into_iter().collect();
    for pass in 1..4 {
        lp.start_pass(pass);
        for &p in &captured {
            let q = lp.port(c(p), server);
            assert!(q >= 1024, "pass {pass}: {p} -> {q}");
            assert!(seen.insert(q), "pass {pass}: {p} -> {q} was used before");
            assert_eq!(lp.port(c(p), server), q, "stable within a pass");
        }
        // Another client address has its own port space.
        assert_eq!(
            lp.port(other, server),
            (1024 + (40000 - 1024 + pass * 7919) % 64512) as u16
        );
    }
    assert_eq!(lp.exhausted(), 0);
}

#[test]
fn offline_ports_run_out_gracefully() {
    let server: SocketAddr = "198.18.1.1:80".parse().unwrap();
    let ip = "198.18.1.2".parse().unwrap();
    let mut lp = LoopPorts::new();
    for p in 1024..=65535u16 {
        lp.port(SocketAddr::new(ip, p), server);
    }
    lp.start_pass(1);
    let q = lp.port(SocketAddr::new(ip, 5000), server);
    assert!(q >= 1024);
    assert_eq!(lp.exhausted(), 1);
}

#[test]
fn offline_port_rewrite_keeps_the_checksum_right() {
    for pkt in [
        v4(b"GET / HTTP/1.1\r\n\r\n"),
        v6(b"GET / HTTP/1.1\r\n\r\n!"),
    ] {
        let p = common::wire::parse_tcp_packet(&pkt).unwrap();
        let (src, dst, off) = (p.src, p.dst, p.ip_header_len);
        let mut m = pkt.clone();
        set_source_port(&mut m, off, 51234);
        assert!(common::checksum::verify_transport(src, dst, 6, &m[off..]));
        let q = common::wire::parse_tcp_packet(&m).unwrap();
        assert_eq!(q.tcp.src_port(), 51234);
        assert_eq!(q.payload(), p.payload());
    }
}

// ---------------------------------------------------------------------------------------------
// Replay over a file

/// A file in the temp directory, removed (with its directory, once empty) when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn path(&self) -> std::path::PathBuf {
        self.0.clone()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn temp_file(name: &str, bytes: &[u8]) -> TempFile {
    let dir = std::env::temp_dir().join(format!("copier-offline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    TempFile(p)
}

fn config(path: std::path::PathBuf, speed: Speed, loops: u32) -> OfflineConfig {
    OfflineConfig {
        path,
        speed,
        loops,
        max_gap: secs(1.0),
        progress: false,
    }
}

#[test]
fn offline_replay_paces_filters_and_loops() {
    let req = |port: u16, uri: &str| {
        tcp(
            &format!("198.18.1.2:{port}"),
            "198.18.1.1:80",
            uri.as_bytes(),
        )
    };
    let answer = tcp(
        "198.18.1.1:80",
        "198.18.1.2:40000",
        b"HTTP/1.1 200 OK\r\n\r\n",
    );
    let frames = vec![
        (secs(100.0), eth(0x0800, &req(40000, "GET /a"))),
        (secs(100.2), eth(0x0800, &answer)),
        (secs(100.5), eth(0x0800, &req(40000, "GET /b"))),
        (secs(107.0), eth(0x0800, &req(40001, "GET /c"))), // a 6.5 s pause, cut to 1 s
    ];
    let file = temp_file("paced.pcap", &pcap(1, &frames));
    let maps = [parse_map("80=198.18.2.2:80").unwrap()];
    let mut r = Replay::open(config(file.path(), Speed::Factor(1.0), 2), &maps).unwrap();
    assert_eq!(r.format_name(), "pcap");
    let t0 = Instant::now();
    let mut got: Vec<Vec<u8>> = Vec::new();
    // Nothing before the start.
    assert_eq!(r.feed(t0, 100, |p| got.push(p.to_vec())), 0);
    assert!(!r.ready(t0) && r.next_due().is_none());
    r.start(t0);
    let at = |r: &mut Replay, ms: u64, got: &mut Vec<Vec<u8>>| {
        r.feed(t0 + Duration::from_millis(ms), 100, |p| {
            got.push(p.to_vec())
        })
    };
    assert_eq!(at(&mut r, 0, &mut got), 1);
    assert_eq!(at(&mut r, 499, &mut got), 0);
    assert_eq!(at(&mut r, 500, &mut got), 1);
    assert_eq!(at(&mut r, 1499, &mut got), 0);
    // /c, and pass 2's first packet, which follows at once (on another client port).
    assert_eq!(at(&mut r, 1500, &mut got), 2);
    assert_eq!(at(&mut r, 2000, &mut got), 1);
    assert_eq!(at(&mut r, 2999, &mut got), 0);
    assert_eq!(r.next_due(), Some(t0 + Duration::from_millis(3000)));
    assert_eq!(at(&mut r, 3000, &mut got), 1);
    assert_eq!(at(&mut r, 9000, &mut got), 0);
    assert!(r.finished());
    let tuples: Vec<(u16, Vec<u8>)> = got
        .iter()
        .map(|p| {
            let t = common::wire::parse_tcp_packet(p).unwrap();
            (t.tcp.src_port(), t.payload().to_vec())
        })
        .collect();
    let (a, b, c) = (&tuples[3].0, &tuples[4].0, &tuples[5].0);
    assert_eq!(
        tuples[..3].iter().map(|t| t.0).collect::<Vec<_>>(),
        vec![40000, 40000, 40001]
    );
    assert_eq!(a, b, "one connection keeps one port within a pass");
    assert!(![40000, 40001].contains(a) && ![40000, 40001].contains(c) && a != c);
    let uris: Vec<&[u8]> = tuples.iter().map(|t| &t.1[..]).collect();
    assert_eq!(
        uris,
        vec![
            &b"GET /a"[..],
            b"GET /b",
            b"GET /c",
            b"GET /a",
            b"GET /b",
            b"GET /c"
        ]
    );
    let st = r.stats();
    assert_eq!(
        (st.passes, st.fed, st.filtered, st.read.records),
        (2, 6, 2, 8)
    );
    assert_eq!(st.elapsed, Some(Duration::from_millis(3000)));
    assert!(
        st.to_string().contains("replayed 2 pass(es) in 3.0s"),
        "{st}"
    );
}

#[test]
fn offline_replay_of_a_truncated_file_goes_on_with_what_it_holds() {
    let frames: Vec<(Duration, Vec<u8>)> = (0..5)
        .map(|i| (secs(f64::from(i)), v4(format!("GET /{i}").as_bytes())))
        .collect();
    let file = pcap(101, &frames);
    let cut = temp_file("cut.pcap", &file[..file.len() - 7]);
    let maps = [parse_map("80=198.18.2.2:80").unwrap()];
    let mut r = Replay::open(config(cut.path(), Speed::Max, 1), &maps).unwrap();
    let t0 = Instant::now();
    r.start(t0);
    let mut n = 0;
    while !r.finished() {
        n += r.feed(t0, 2, |_| ());
    }
    assert_eq!(n, 4);
    let st = r.stats();
    assert_eq!((st.read.truncated, st.fed, st.passes), (1, 4, 1));
    assert!(st.error.is_none());
}

#[test]
fn offline_replay_open_errors_name_the_file() {
    let maps = [parse_map("80=198.18.2.2:80").unwrap()];
    let missing = std::path::PathBuf::from("/nonexistent/x.pcap");
    let e = Replay::open(config(missing, Speed::Max, 1), &maps)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--offline /nonexistent/x.pcap:"), "{e}");
    let junk = temp_file("junk.txt", b"not a capture at all");
    let e = Replay::open(config(junk.path(), Speed::Max, 1), &maps)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a pcap or pcapng file"), "{e}");
}

#[test]
fn offline_progress_line() {
    let l = progress_line(0.5, 1200, 900, 3199.6, 1, 2);
    assert_eq!(
        l,
        "[############............]  50.0%  pass 2/2  1200 records  900 packets fed  3200/s"
    );
    assert!(progress_line(1.0, 1, 1, 0.0, 0, 1)
        .starts_with("[########################] 100.0%  1 records"));
}
