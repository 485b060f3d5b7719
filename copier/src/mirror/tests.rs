use super::*;

/// IPv4 + TCP with `payload` bytes: `src` -> `dst`, IP ID `id`.
fn tcp4(src: ([u8; 4], u16), dst: ([u8; 4], u16), id: u16, payload: usize) -> Vec<u8> {
    let len = 40 + payload;
    let mut p = vec![
        0x45,
        0,
        (len >> 8) as u8,
        len as u8,
        (id >> 8) as u8,
        id as u8,
        0x40,
        0,
        64,
        6,
        0,
        0,
    ];
    p.extend_from_slice(&src.0);
    p.extend_from_slice(&dst.0);
    p.extend_from_slice(&src.1.to_be_bytes());
    p.extend_from_slice(&dst.1.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    p.resize(len, b'x');
    p
}

const CLIENT: ([u8; 4], u16) = ([198, 18, 0, 1], 40000);
const SERVER: ([u8; 4], u16) = ([198, 18, 1, 1], 80);

fn selector(vnis: Vec<u32>) -> Selector {
    let cfg = MirrorConfig {
        encap: Encap::Vxlan,
        port: 4789,
        vnis,
    };
    let maps = [PortMap {
        online_ip: None,
        online_port: 80,
        target: "198.18.2.1:8080".parse().unwrap(),
    }];
    Selector::new(&cfg, &maps)
}

#[test]
fn both_directions_are_told_apart() {
    let mut s = selector(Vec::new());
    let mut st = MirrorStats::default();
    let req = tcp4(CLIENT, SERVER, 1, 10);
    let ans = tcp4(SERVER, CLIENT, 2, 20);
    let other = tcp4(CLIENT, ([198, 18, 1, 1], 443), 3, 0);
    let d = wire::encap(Encap::Vxlan, 9, 0, &req);
    let (dir, ip, client) = s.judge(&d, &mut st).unwrap();
    assert_eq!(
        (dir, ip, client),
        (
            Direction::Client,
            &req[..],
            "198.18.0.1:40000".parse().unwrap()
        )
    );
    let d = wire::encap(Encap::Vxlan, 9, 0, &ans);
    assert_eq!(s.judge(&d, &mut st).unwrap().0, Direction::Server);
    assert!(s
        .judge(&wire::encap(Encap::Vxlan, 9, 0, &other), &mut st)
        .is_none());
    assert_eq!(
        (
            st.datagrams,
            st.client_packets,
            st.server_packets,
            st.drops.unselected
        ),
        (3, 1, 1, 1)
    );
    assert_eq!(st.vnis.iter().copied().collect::<Vec<_>>(), vec![9]);
}

#[test]
fn vnis_not_selected_are_counted() {
    let mut s = selector(parse_vnis("5,7-8").unwrap());
    let mut st = MirrorStats::default();
    for (vni, id) in [(5, 1), (6, 2), (8, 3)] {
        let _ = s.judge(
            &wire::encap(Encap::Vxlan, vni, 0, &tcp4(CLIENT, SERVER, id, 1)),
            &mut st,
        );
    }
    assert_eq!((st.client_packets, st.drops.vni), (2, 1));
    assert_eq!(st.vnis.len(), 3);
}

#[test]
fn duplicates_are_delivered_once_retransmissions_are_not_duplicates() {
    let mut s = selector(Vec::new());
    let mut st = MirrorStats::default();
    let p = tcp4(CLIENT, SERVER, 1, 100);
    let d = wire::encap(Encap::Vxlan, 1, 0, &p);
    assert!(s.judge(&d, &mut st).is_some());
    assert!(s.judge(&d, &mut st).is_none());
    // The same segment with a new IP ID (a retransmission by the client) goes through.
    assert!(s
        .judge(
            &wire::encap(Encap::Vxlan, 1, 0, &tcp4(CLIENT, SERVER, 2, 100)),
            &mut st
        )
        .is_some());
    assert_eq!((st.client_packets, st.drops.duplicate), (2, 1));
}

#[test]
fn truncated_and_malformed_are_counted_by_reason() {
    let mut s = selector(Vec::new());
    let mut st = MirrorStats::default();
    let d = wire::encap(Encap::Vxlan, 1, 0, &tcp4(CLIENT, SERVER, 1, 1000));
    assert!(s.judge(&d[..200], &mut st).is_none());
    assert!(s.judge(&d[..4], &mut st).is_none());
    let mut bad = d.clone();
    bad[0] = 0;
    assert!(s.judge(&bad, &mut st).is_none());
    assert_eq!(
        (
            st.drops.truncated,
            st.drops.short,
            st.drops.bad_header,
            st.client_packets
        ),
        (1, 1, 1, 0)
    );
    assert!(st.to_string().contains("truncated 1"), "{st}");
}

#[test]
fn mirror_flag_and_vni_lists_parse() {
    let m: MirrorConfig = "vxlan".parse().unwrap();
    assert_eq!((m.encap, m.port), (Encap::Vxlan, 4789));
    let m: MirrorConfig = "GENEVE:7000".parse().unwrap();
    assert_eq!((m.encap, m.port), (Encap::Geneve, 7000));
    assert!("geneve"
        .parse::<MirrorConfig>()
        .is_ok_and(|m| m.port == 6081));
    assert!("gre".parse::<MirrorConfig>().unwrap_err().contains("gre"));
    assert!("vxlan:0".parse::<MirrorConfig>().is_err());
    assert!("vxlan:x".parse::<MirrorConfig>().is_err());
    assert_eq!(parse_vnis("3, 1,2-4").unwrap(), vec![1, 2, 3, 4]);
    assert!(parse_vnis("16777216").is_err());
    assert!(parse_vnis("5-1").is_err());
    assert!(parse_vnis("").is_err());
}

#[test]
fn the_socket_reads_many_datagrams_per_call() {
    use crate::feed::Ring;
    let maps = [PortMap {
        online_ip: None,
        online_port: 80,
        target: "198.18.2.1:8080".parse().unwrap(),
    }];
    // An ephemeral port: bind 0, then read the port back.
    let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let mut m = MirrorInput::open(
        MirrorConfig {
            encap: Encap::Vxlan,
            port,
            vnis: vec![],
        },
        &maps,
        None,
    )
    .unwrap();
    let out = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for id in 0..10u16 {
        let d = wire::encap(Encap::Vxlan, 1, 0, &tcp4(CLIENT, SERVER, id, 10));
        out.send_to(&d, ("127.0.0.1", port)).unwrap();
        if id == 3 {
            out.send_to(&d, ("127.0.0.1", port)).unwrap();
        }
    }
    let mut got = 0;
    for _ in 0..100 {
        m.drain(4, &mut |_| got += 1);
        if got == 10 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let st = m.shared().stats();
    assert_eq!((got, st.datagrams, st.drops.duplicate), (10, 11, 1));
    assert!(st.reads < 11, "{} reads for 11 datagrams", st.reads);
    assert_eq!(m.stats().packets, 10);
}

#[test]
fn a_copy_is_found_after_a_super_segment_of_others() {
    let mut d = Dedup::default();
    let pkts: Vec<Vec<u8>> = (0..2000u16)
        .map(|id| tcp4(CLIENT, SERVER, id, 100))
        .collect();
    // Runs of 45 segments, then their 45 copies.
    let mut missed = 0;
    for run in pkts.chunks(45) {
        for p in run {
            assert!(!d.seen(p, 40));
        }
        missed += run.iter().filter(|p| !d.seen(p, 40)).count();
    }
    assert_eq!(missed, 0);
}

#[test]
fn the_shared_copy_of_the_counters_follows_them() {
    let mut st = MirrorStats {
        datagrams: 3,
        ..MirrorStats::default()
    };
    st.vnis.insert(7);
    let mut shared = MirrorStats::default();
    st.copy_into(&mut shared);
    assert_eq!(shared, st);
    st.datagrams += 1;
    st.drops.duplicate += 2;
    st.vnis.insert(9);
    st.copy_into(&mut shared);
    assert_eq!(shared, st);
}
