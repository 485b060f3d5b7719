//! Tests of the offline replay: the pacer, the port filter, the per-pass ports, and the replay
//! over a file. The capture-file format itself is tested with its reader in `common::pcap`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::pcap::LinkType;
use common::testkit::{eth, pcap_file, tcp, v4, v6};

use super::*;
use crate::cli::parse_map;

// ---------------------------------------------------------------------------------------------
// Packet and file builders

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
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
        from: None,
        until: None,
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
    let file = temp_file("paced.pcap", &pcap_file(LinkType::Ethernet, &frames));
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
fn offline_replay_taps_both_directions_for_the_comparison() {
    let req = |uri: &str| tcp("198.18.1.2:40000", "198.18.1.1:80", uri.as_bytes());
    let answer = |body: &str| tcp("198.18.1.1:80", "198.18.1.2:40000", body.as_bytes());
    let frames = vec![
        (secs(100.0), eth(0x0800, &req("GET /a"))),
        (secs(100.2), eth(0x0800, &answer("HTTP/1.1 200 a"))),
        (
            secs(100.3),
            eth(0x0800, &tcp("198.18.1.1:81", "198.18.1.2:40000", b"other")),
        ),
        (secs(100.5), eth(0x0800, &req("GET /b"))),
        (secs(101.0), eth(0x0800, &answer("HTTP/1.1 200 b"))),
    ];
    let file = temp_file("tapped.pcap", &pcap_file(LinkType::Ethernet, &frames));
    let maps = [parse_map("80=198.18.2.2:80").unwrap()];
    let mut r = Replay::open(config(file.path(), Speed::Factor(5.0), 2), &maps).unwrap();
    r.tap(1.0);
    let t0 = Instant::now();
    r.start(t0);
    let mut fed = Vec::new();
    r.feed(t0 + secs(10.0), 100, |p| fed.push(p.to_vec()));
    assert!(r.finished());
    let tapped = r.take_tapped();
    assert!(r.take_tapped().is_empty());
    let got: Vec<(u64, u16, u16, Vec<u8>)> = tapped
        .iter()
        .map(|(t, p)| {
            let q = common::wire::parse_tcp_packet(p).unwrap();
            assert!(common::checksum::verify_transport(
                q.src,
                q.dst,
                6,
                &p[q.ip_header_len..]
            ));
            let ms = t.duration_since(t0).as_millis() as u64;
            (ms, q.tcp.src_port(), q.tcp.dst_port(), q.payload().to_vec())
        })
        .collect();
    // Requests at their due time (a fifth of the capture's gaps), answers that far after the
    // request before them as captured; the unmapped port's packet left out.
    let moved = got[4].1;
    assert!(moved != 40000, "the second pass moves the client port");
    let want: Vec<(u64, u16, u16, &[u8])> = vec![
        (0, 40000, 80, b"GET /a"),
        (200, 80, 40000, b"HTTP/1.1 200 a"),
        (100, 40000, 80, b"GET /b"),
        (600, 80, 40000, b"HTTP/1.1 200 b"),
        (100, moved, 80, b"GET /a"),
        (300, 80, moved, b"HTTP/1.1 200 a"),
        (200, moved, 80, b"GET /b"),
        (700, 80, moved, b"HTTP/1.1 200 b"),
    ];
    let got: Vec<(u64, u16, u16, &[u8])> = got
        .iter()
        .map(|(t, s, d, p)| (*t, *s, *d, &p[..]))
        .collect();
    assert_eq!(got, want);
    // The engine gets the client's packets only, as without the tap.
    assert_eq!(fed.len(), 4);
    let st = r.stats();
    assert_eq!((st.answers, st.filtered), (4, 6));
    assert!(
        st.to_string()
            .contains("4 online answer packets read for the comparison"),
        "{st}"
    );
    // A sample of none: nothing handed over, the answers still counted.
    let mut r = Replay::open(config(file.path(), Speed::Max, 1), &maps).unwrap();
    r.tap(0.0);
    r.start(t0);
    r.feed(t0, 100, |_| {});
    assert!(r.take_tapped().is_empty());
    assert_eq!(r.stats().answers, 2);
}

#[test]
fn offline_replay_of_a_truncated_file_goes_on_with_what_it_holds() {
    let frames: Vec<(Duration, Vec<u8>)> = (0..5)
        .map(|i| (secs(f64::from(i)), v4(format!("GET /{i}").as_bytes())))
        .collect();
    let file = pcap_file(LinkType::Raw, &frames);
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
