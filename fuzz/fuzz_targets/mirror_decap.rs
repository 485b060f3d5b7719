//! Fuzz the mirror input (`copier --mirror`) on any datagram: decapsulation (VXLAN and GENEVE)
//! and the selection after it must never panic; what they deliver is an IPv4 or IPv6 packet
//! exactly as long as its IP header declares (never a truncated one), and a datagram is counted
//! once, as delivered or under one reason.
#![no_main]

use copier::engine::PortMap;
use copier::mirror::{decap, Encap, MirrorConfig, MirrorStats, Selector};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for encap in [Encap::Vxlan, Encap::Geneve] {
        if let Ok(inner) = decap(encap, data) {
            assert!(matches!(inner.ip[0] >> 4, 4 | 6));
            if let Some(n) = common::wire::declared_ip_len(inner.ip) {
                assert_eq!(n, inner.ip.len());
            }
        }
        let cfg = MirrorConfig { encap, port: 4789, vnis: Vec::new() };
        let maps = [PortMap { online_ip: None, online_port: 80, target: "198.18.2.2:80".parse().unwrap() }];
        let mut sel = Selector::new(&cfg, &maps);
        let mut st = MirrorStats::default();
        let _ = sel.judge(data, &mut st);
        let _ = sel.judge(data, &mut st);
        let dropped: u64 = st.drops.iter().map(|(_, n)| n).sum();
        assert_eq!(st.datagrams, 2);
        assert_eq!(st.client_packets + st.server_packets + dropped, 2);
    }
});
