//! Property tests for `common::checksum` and `common::wire`: the fast sum against a naive one,
//! RFC 1624 incremental updates against full recomputation, the parser against arbitrary bytes,
//! and the builder against the parser.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use common::checksum::{self, finish, fold, sum};
use common::seq::SeqNum;
use common::wire::{
    parse_tcp_packet, tcp_options, Ipv4Packet, Ipv6Packet, TcpBuilder, TcpFlags, TcpOption,
    TcpSegment,
};
use proptest::prelude::*;

/// RFC 1071 the obvious way, folded but not complemented.
fn naive_fold(data: &[u8], initial: u32) -> u16 {
    let mut s: u64 = u64::from(initial);
    for (i, b) in data.iter().enumerate() {
        s += if i % 2 == 0 {
            u64::from(*b) << 8
        } else {
            u64::from(*b)
        };
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// An owned stand-in for `TcpOption` so proptest can generate it.
#[derive(Debug, Clone)]
enum Opt {
    Mss(u16),
    Ws(u8),
    SackPerm,
    Sack(Vec<u8>),
    Ts(u32, u32),
    Unknown(u8, Vec<u8>),
}

impl Opt {
    fn as_option(&self) -> TcpOption<'_> {
        match self {
            Opt::Mss(v) => TcpOption::Mss(*v),
            Opt::Ws(v) => TcpOption::WindowScale(*v),
            Opt::SackPerm => TcpOption::SackPermitted,
            Opt::Sack(d) => TcpOption::Sack(d),
            Opt::Ts(a, b) => TcpOption::Timestamps {
                tsval: *a,
                tsecr: *b,
            },
            Opt::Unknown(k, d) => TcpOption::Unknown { kind: *k, data: d },
        }
    }
}

fn opt_strategy() -> impl Strategy<Value = Opt> {
    prop_oneof![
        any::<u16>().prop_map(Opt::Mss),
        any::<u8>().prop_map(Opt::Ws),
        Just(Opt::SackPerm),
        (1usize..=3)
            .prop_flat_map(|n| proptest::collection::vec(any::<u8>(), n * 8))
            .prop_map(Opt::Sack),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| Opt::Ts(a, b)),
        (
            prop_oneof![6u8..=7, 9u8..=255],
            proptest::collection::vec(any::<u8>(), 0..8)
        )
            .prop_map(|(k, d)| Opt::Unknown(k, d)),
    ]
}

/// Up to 5 options, cut to what fits in 40 bytes.
fn opts_strategy() -> impl Strategy<Value = Vec<Opt>> {
    proptest::collection::vec(opt_strategy(), 0..5).prop_map(|v| {
        let mut total = 0;
        v.into_iter()
            .take_while(|o| {
                total += o.as_option().wire_len();
                total <= 40
            })
            .collect()
    })
}

fn addr_pair() -> impl Strategy<Value = (IpAddr, IpAddr)> {
    prop_oneof![
        (any::<u32>(), any::<u32>())
            .prop_map(|(a, b)| (Ipv4Addr::from(a).into(), Ipv4Addr::from(b).into())),
        (any::<u128>(), any::<u128>())
            .prop_map(|(a, b)| (Ipv6Addr::from(a).into(), Ipv6Addr::from(b).into())),
    ]
}

#[derive(Debug, Clone)]
struct Spec {
    src: SocketAddr,
    dst: SocketAddr,
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    opts: Vec<Opt>,
    payload: Vec<u8>,
    ttl: u8,
    ident: u16,
}

impl Spec {
    fn emit(&self) -> Vec<u8> {
        let opts: Vec<TcpOption<'_>> = self.opts.iter().map(Opt::as_option).collect();
        let mut out = Vec::new();
        TcpBuilder {
            src: self.src,
            dst: self.dst,
            seq: SeqNum(self.seq),
            ack: SeqNum(self.ack),
            flags: TcpFlags(self.flags),
            window: self.window,
            options: &opts,
            payload: &self.payload,
            ttl: self.ttl,
            ident: self.ident,
        }
        .emit(&mut out);
        out
    }
}

fn spec_strategy() -> impl Strategy<Value = Spec> {
    (
        addr_pair(),
        any::<(u16, u16, u32, u32, u8, u16, u8, u16)>(),
        opts_strategy(),
        proptest::collection::vec(any::<u8>(), 0..1600),
    )
        .prop_map(
            |((s, d), (sp, dp, seq, ack, flags, window, ttl, ident), opts, payload)| Spec {
                src: SocketAddr::new(s, sp),
                dst: SocketAddr::new(d, dp),
                seq,
                ack,
                flags,
                window,
                opts,
                payload,
                ttl,
                ident,
            },
        )
}

/// The new values a middlebox (the copier) might write into a packet.
#[derive(Debug, Clone)]
struct Rewrite {
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    dst_port: u16,
    seq: u32,
    ack: u32,
    ttl: u8,
}

fn rewrite_for(v6: bool) -> impl Strategy<Value = Rewrite> {
    (
        any::<u128>(),
        any::<u128>(),
        any::<(u16, u16, u32, u32, u8)>(),
    )
        .prop_map(move |(a, b, (sp, dp, seq, ack, ttl))| {
            let (src, dst): (IpAddr, IpAddr) = if v6 {
                (Ipv6Addr::from(a).into(), Ipv6Addr::from(b).into())
            } else {
                (
                    Ipv4Addr::from(a as u32).into(),
                    Ipv4Addr::from(b as u32).into(),
                )
            };
            Rewrite {
                src,
                dst,
                src_port: sp,
                dst_port: dp,
                seq,
                ack,
                ttl,
            }
        })
}

fn octets(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// Apply `rw` to the packet in place, updating both checksums incrementally only.
fn rewrite_incrementally(pkt: &mut [u8], rw: &Rewrite) {
    let p = parse_tcp_packet(pkt).unwrap();
    let (old_src, old_dst, ihl) = (p.src, p.dst, p.ip_header_len);
    let (tcp_old, old_ports, old_seq, old_ack) = (
        p.tcp.checksum(),
        (p.tcp.src_port(), p.tcp.dst_port()),
        p.tcp.seq().0,
        p.tcp.ack().0,
    );
    let mut tc = tcp_old;
    tc = checksum::update_bytes(tc, &octets(old_src), &octets(rw.src));
    tc = checksum::update_bytes(tc, &octets(old_dst), &octets(rw.dst));
    tc = checksum::update_u16(tc, old_ports.0, rw.src_port);
    tc = checksum::update_u16(tc, old_ports.1, rw.dst_port);
    tc = checksum::update_u32(tc, old_seq, rw.seq);
    tc = checksum::update_u32(tc, old_ack, rw.ack);

    match (rw.src, rw.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut ip = Ipv4Packet::new_checked(&mut *pkt).unwrap();
            let (IpAddr::V4(os), IpAddr::V4(od)) = (old_src, old_dst) else {
                unreachable!()
            };
            let mut hc = ip.checksum();
            hc = checksum::update_u32(hc, u32::from(os), u32::from(s));
            hc = checksum::update_u32(hc, u32::from(od), u32::from(d));
            let old_word = u16::from_be_bytes([ip.ttl(), ip.protocol()]);
            hc = checksum::update_u16(hc, old_word, u16::from_be_bytes([rw.ttl, ip.protocol()]));
            ip.set_src_addr(s);
            ip.set_dst_addr(d);
            ip.set_ttl(rw.ttl);
            ip.set_checksum(hc);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let mut ip = Ipv6Packet::new_checked(&mut *pkt).unwrap();
            ip.set_src_addr(s);
            ip.set_dst_addr(d);
            ip.set_hop_limit(rw.ttl);
        }
        _ => unreachable!(),
    }
    let mut seg = TcpSegment::new_checked(&mut pkt[ihl..]).unwrap();
    seg.set_src_port(rw.src_port);
    seg.set_dst_port(rw.dst_port);
    seg.set_seq(SeqNum(rw.seq));
    seg.set_ack(SeqNum(rw.ack));
    seg.set_checksum(tc);
}

fn check_incremental(spec: &Spec, rw: &Rewrite) -> Result<(), TestCaseError> {
    let mut pkt = spec.emit();
    rewrite_incrementally(&mut pkt, rw);
    let p = parse_tcp_packet(&pkt).unwrap();
    prop_assert!(p.tcp_checksum_ok(), "incremental TCP checksum invalid");
    let (incr_tcp, ihl) = (p.tcp.checksum(), p.ip_header_len);
    let incr_ip = Ipv4Packet::new_checked(&pkt[..])
        .map(|ip| ip.checksum())
        .ok();

    // full recomputation over the same bytes
    let mut full = pkt.clone();
    let (src, dst) = (p.src, p.dst);
    TcpSegment::new_checked(&mut full[ihl..])
        .unwrap()
        .fill_checksum(src, dst);
    if let Ok(mut ip) = Ipv4Packet::new_checked(&mut full[..]) {
        ip.fill_checksum();
        prop_assert_eq!(incr_ip, Some(ip.checksum()));
        prop_assert!(ip.verify_checksum());
    }
    let fp = parse_tcp_packet(&full).unwrap();
    prop_assert_eq!(incr_tcp, fp.tcp.checksum());
    prop_assert_eq!(&pkt, &full);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn fast_sum_equals_naive(data in proptest::collection::vec(any::<u8>(), 0..3000),
                             initial in prop_oneof![Just(0u32), any::<u16>().prop_map(u32::from), any::<u32>()]) {
        prop_assert_eq!(fold(sum(&data, initial)), naive_fold(&data, initial));
    }

    #[test]
    fn split_sum_equals_whole(data in proptest::collection::vec(any::<u8>(), 0..600), cut in 0usize..300) {
        let cut = (cut * 2).min(data.len() & !1); // only the last piece may be odd
        let (a, b) = data.split_at(cut);
        prop_assert_eq!(fold(sum(b, sum(a, 0))), fold(sum(&data, 0)));
    }

    #[test]
    fn incremental_update_v4_equals_full(spec in spec_strategy().prop_filter("v4", |s| s.src.is_ipv4()),
                                         rw in rewrite_for(false)) {
        check_incremental(&spec, &rw)?;
    }

    #[test]
    fn incremental_update_v6_equals_full(spec in spec_strategy().prop_filter("v6", |s| s.src.is_ipv6()),
                                         rw in rewrite_for(true)) {
        check_incremental(&spec, &rw)?;
    }

    #[test]
    fn update_bytes_on_random_data(mut data in proptest::collection::vec(any::<u8>(), 2..400),
                                   at in 0usize..200, new in proptest::collection::vec(any::<u8>(), 0..16)) {
        // an even offset and an even-length replacement that fits
        let at = (at * 2) % (data.len() & !1).max(2);
        let n = (new.len() & !1).min((data.len() - at) & !1);
        data[0] |= 1; // keep the data from being all zero (0 vs 0xffff ambiguity)
        let c0 = finish(sum(&data, 0));
        let old = data[at..at + n].to_vec();
        data[at..at + n].copy_from_slice(&new[..n]);
        let c1 = checksum::update_bytes(c0, &old, &new[..n]);
        prop_assert_eq!(c1, finish(sum(&data, 0)));
    }

    #[test]
    fn parse_never_panics_on_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(p) = parse_tcp_packet(&data) {
            // every accessor must be safe, and lengths consistent
            let _ = (p.tcp.src_port(), p.tcp.seq(), p.tcp.flags(), p.tcp.urgent());
            prop_assert!(p.headers_len() + p.payload().len() == p.ip_total_len);
            prop_assert!(p.ip_total_len <= data.len());
            for o in tcp_options(p.options()) {
                let _ = o;
            }
            let _ = p.tcp_checksum_ok();
        }
    }

    #[test]
    fn parse_never_panics_on_mutated_packets(spec in spec_strategy(),
                                             edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
                                             cut in any::<usize>()) {
        let mut pkt = spec.emit();
        for (i, v) in edits {
            let i = i % pkt.len();
            pkt[i] = v;
        }
        let cut = cut % (pkt.len() + 1);
        for buf in [&pkt[..], &pkt[..cut]] {
            if let Ok(p) = parse_tcp_packet(buf) {
                prop_assert!(p.headers_len() + p.payload().len() == p.ip_total_len);
                prop_assert!(p.ip_total_len <= buf.len());
                for o in p.tcp.options_iter() {
                    let _ = o;
                }
            }
        }
    }

    #[test]
    fn emit_then_parse_round_trip(spec in spec_strategy()) {
        let pkt = spec.emit();
        let p = parse_tcp_packet(&pkt).unwrap();
        prop_assert_eq!(p.src_socket(), spec.src);
        prop_assert_eq!(p.dst_socket(), spec.dst);
        prop_assert_eq!(p.tcp.seq(), SeqNum(spec.seq));
        prop_assert_eq!(p.tcp.ack(), SeqNum(spec.ack));
        prop_assert_eq!(p.tcp.flags(), TcpFlags(spec.flags));
        prop_assert_eq!(p.tcp.window(), spec.window);
        prop_assert_eq!(p.ttl, spec.ttl);
        prop_assert_eq!(p.payload(), &spec.payload[..]);
        prop_assert_eq!(p.ip_total_len, pkt.len());
        prop_assert_eq!(p.tcp.header_len() % 4, 0);
        let parsed: Vec<TcpOption<'_>> = p.tcp.options_iter().collect::<Result<_, _>>().unwrap();
        let want: Vec<TcpOption<'_>> = spec.opts.iter().map(Opt::as_option).collect();
        prop_assert_eq!(parsed, want);
        prop_assert!(p.tcp_checksum_ok());
        // and the TCP checksum equals the naive one over pseudo-header + segment
        let seg = &pkt[p.ip_header_len..];
        let mut zeroed = seg.to_vec();
        zeroed[16..18].fill(0);
        let mut pseudo = octets(p.src);
        pseudo.extend(octets(p.dst));
        match p.src {
            IpAddr::V4(_) => pseudo.extend([0, 6]),
            IpAddr::V6(_) => pseudo.extend([0, 0, 0, 6]),
        }
        let len = seg.len() as u32;
        pseudo.extend(if p.src.is_ipv4() { (len as u16).to_be_bytes().to_vec() } else { len.to_be_bytes().to_vec() });
        pseudo.extend(zeroed);
        prop_assert_eq!(p.tcp.checksum(), !naive_fold(&pseudo, 0));
        if let Ok(ip) = Ipv4Packet::new_checked(&pkt[..]) {
            prop_assert!(ip.verify_checksum());
            prop_assert_eq!(ip.ident(), spec.ident);
            prop_assert!(ip.dont_frag());
        }
    }
}
