//! Tests of the classic BPF filter.

use super::*;
use common::seq::SeqNum;
use common::wire::{TcpBuilder, TcpFlags};
use std::net::SocketAddr;

/// Just enough of the kernel's classic BPF interpreter to run what `build_filter` emits, plus
/// the common instructions (so a wrong opcode shows up as "unsupported", not as a silent pass).
/// Out-of-bounds loads return 0, like the kernel.
fn run(prog: &[Insn], pkt: &[u8], ethertype: u16, pkttype: u32) -> u32 {
    let (mut a, mut x): (u32, u32) = (0, 0);
    let mut pc = 0usize;
    let load = |off: u32, size: usize| -> Option<u32> {
        if off >= op::AD_OFF {
            return match off - op::AD_OFF {
                op::AD_PROTOCOL => Some(ethertype.into()),
                op::AD_PKTTYPE => Some(pkttype),
                other => panic!("unsupported ancillary load {other}"),
            };
        }
        let off = off as usize;
        let b = pkt.get(off..off.checked_add(size)?)?;
        Some(b.iter().fold(0u32, |acc, &v| (acc << 8) | u32::from(v)))
    };
    let mut steps = 0;
    loop {
        steps += 1;
        assert!(
            steps <= prog.len(),
            "classic BPF only jumps forward; loop detected"
        );
        let i = *prog.get(pc).expect("ran off the end of the program");
        pc += 1;
        let size = match i.code & 0x18 {
            op::W => 4,
            op::H => 2,
            op::B => 1,
            _ => 0, // not a load: the bits mean something else
        };
        match i.code & 0x07 {
            op::LD => {
                a = match i.code & 0xe0 {
                    op::IMM => i.k,
                    op::ABS => match load(i.k, size) {
                        Some(v) => v,
                        None => return 0,
                    },
                    op::IND => match load(x.wrapping_add(i.k), size) {
                        Some(v) => v,
                        None => return 0,
                    },
                    m => panic!("unsupported LD mode {m:#x}"),
                }
            }
            op::LDX => {
                x = match i.code & 0xe0 {
                    op::IMM => i.k,
                    op::MSH => match load(i.k, 1) {
                        Some(v) => (v & 0xf) * 4,
                        None => return 0,
                    },
                    m => panic!("unsupported LDX mode {m:#x}"),
                }
            }
            op::ALU => {
                let src = if i.code & op::X != 0 { x } else { i.k };
                match i.code & 0xf0 {
                    op::AND => a &= src,
                    op::RSH => a = a.checked_shr(src).unwrap_or(0),
                    op::ADD => a = a.wrapping_add(src),
                    op::LSH => a = a.checked_shl(src).unwrap_or(0),
                    o => panic!("unsupported ALU op {o:#x}"),
                }
            }
            op::JMP => {
                let src = if i.code & op::X != 0 { x } else { i.k };
                let cond = match i.code & 0xf0 {
                    op::JA => {
                        pc += i.k as usize;
                        continue;
                    }
                    op::JEQ => a == src,
                    op::JGT => a > src,
                    op::JGE => a >= src,
                    op::JSET => a & src != 0,
                    o => panic!("unsupported JMP op {o:#x}"),
                };
                pc += usize::from(if cond { i.jt } else { i.jf });
            }
            op::RET => {
                return if i.code & 0x18 == op::A { a } else { i.k };
            }
            op::MISC => match i.code & 0xf8 {
                op::TAX => x = a,
                op::TXA => a = x,
                m => panic!("unsupported MISC op {m:#x}"),
            },
            c => panic!("unsupported class {c:#x}"),
        }
    }
}

fn tcp(src: &str, dst: &str) -> Vec<u8> {
    let src: SocketAddr = src.parse().unwrap();
    let dst: SocketAddr = dst.parse().unwrap();
    let mut out = Vec::new();
    TcpBuilder {
        src,
        dst,
        seq: SeqNum(1000),
        ack: SeqNum(0),
        flags: TcpFlags::SYN,
        window: 65535,
        options: &[],
        payload: b"hello",
        ttl: 64,
        ident: 7,
    }
    .emit(&mut out);
    out
}

fn ethertype(pkt: &[u8]) -> u16 {
    if pkt[0] >> 4 == 6 {
        0x86dd
    } else {
        0x0800
    }
}

fn accepts(prog: &[Insn], pkt: &[u8]) -> bool {
    run(prog, pkt, ethertype(pkt), 0) != 0
}

fn t(addr: Option<&str>, port: u16) -> FilterTarget {
    FilterTarget {
        addr: addr.map(|a| a.parse().unwrap()),
        port,
    }
}

#[test]
fn fanout_program_returns_the_client_port_without_its_low_bit() {
    let prog = fanout_program();
    for port in [1024u16, 1025, 40000, 40001, 40002, 65535] {
        for (src, dst) in [
            (format!("198.18.0.1:{port}"), "198.18.0.2:80"),
            (format!("[2001:db8::1]:{port}"), "[2001:db8::2]:80"),
        ] {
            let pkt = tcp(&src, dst);
            assert_eq!(
                run(&prog, &pkt, ethertype(&pkt), 0),
                u32::from(port >> 1),
                "{src}"
            );
        }
    }
    // An IPv4 header with options: the TCP header is found after them.
    let mut pkt = tcp("198.18.0.1:40006", "198.18.0.2:80");
    pkt[0] = 0x46;
    pkt.splice(20..20, [1u8, 1, 1, 1]);
    assert_eq!(run(&prog, &pkt, 0x0800, 0), 20003);
    // Not IP: member 0.
    assert_eq!(run(&prog, &[0u8; 60], 0x0806, 0), 0);
    // Two workers: consecutive port pairs alternate, whatever the parity.
    let worker = |p: u16| (u32::from(p) >> 1) % 2;
    assert_eq!(
        [40000, 40001, 40002, 40003, 40004].map(worker),
        [0, 0, 1, 1, 0]
    );
    assert!(prog.len() < 16);
}

#[test]
fn answer_filter_takes_requests_in_and_answers_out() {
    let prog = build_answer_filter(&[80, 8080, 80]).unwrap();
    let run4 = |pkt: &[u8], pkttype: u32| run(&prog, pkt, ethertype(pkt), pkttype) != 0;
    for (c, s) in [
        ("198.18.0.1:40000", "198.18.0.2:80"),
        ("[2001:db8::1]:40000", "[2001:db8::2]:8080"),
    ] {
        // a request arriving, an answer leaving (the service runs here): taken
        assert!(run4(&tcp(c, s), 0), "{c} -> {s}");
        assert!(run4(&tcp(s, c), PACKET_OUTGOING), "{s} -> {c}");
        // the copier's own copy leaving toward the test server, and a request leaving: not
        assert!(!run4(&tcp(c, s), PACKET_OUTGOING), "{c} -> {s} out");
        // an answer arriving from elsewhere is not a request
        assert!(!run4(&tcp(s, c), 0), "{s} -> {c} in");
    }
    assert!(!run4(&tcp("198.18.0.1:40000", "198.18.0.2:81"), 0));
    assert!(!run4(
        &tcp("198.18.0.2:81", "198.18.0.1:40000"),
        PACKET_OUTGOING
    ));
    // IPv4 options and fragments
    let mut pkt = tcp("198.18.0.2:80", "198.18.0.1:40006");
    pkt[0] = 0x46;
    pkt.splice(20..20, [1u8, 1, 1, 1]);
    assert!(run(&prog, &pkt, 0x0800, PACKET_OUTGOING) != 0);
    let mut frag = tcp("198.18.0.1:40000", "198.18.0.2:80");
    frag[7] = 8;
    assert!(!run4(&frag, 0));
    assert!(run(&prog, &[0u8; 60], 0x0806, 0) == 0);
    assert_eq!(build_answer_filter(&[]), Err(BpfError::NoTargets));
    let many: Vec<u16> = (1..=124).collect(); // 7 + 248 = 255: the longest jump
    assert!(build_answer_filter(&many).is_ok());
    assert!(build_answer_filter(&(1..=200).collect::<Vec<u16>>()).is_err());
}

#[test]
fn any_address_ports() {
    let prog = build_filter(&[t(None, 80), t(None, 443)]).unwrap();
    assert!(accepts(&prog, &tcp("198.18.0.1:40000", "198.18.0.2:80")));
    assert!(accepts(&prog, &tcp("198.18.0.1:40000", "10.1.2.3:443")));
    assert!(!accepts(&prog, &tcp("198.18.0.1:40000", "198.18.0.2:81")));
    // Source port 80 is a response of the online server, not a request.
    assert!(!accepts(&prog, &tcp("198.18.0.2:80", "198.18.0.1:40000")));
    assert!(accepts(
        &prog,
        &tcp("[2001:db8::1]:40000", "[2001:db8::2]:80")
    ));
    assert!(!accepts(
        &prog,
        &tcp("[2001:db8::1]:40000", "[2001:db8::2]:8080")
    ));
}

#[test]
fn accepted_packets_are_captured_whole() {
    let prog = build_filter(&[t(None, 80)]).unwrap();
    let pkt = tcp("198.18.0.1:40000", "198.18.0.2:80");
    assert_eq!(run(&prog, &pkt, 0x0800, 0), ACCEPT);
}

#[test]
fn address_restricted_ports() {
    let prog = build_filter(&[
        t(Some("198.18.0.2"), 80),
        t(Some("198.18.0.3"), 80),
        t(Some("2001:db8::2"), 80),
    ])
    .unwrap();
    assert!(accepts(&prog, &tcp("198.18.0.1:40000", "198.18.0.2:80")));
    assert!(accepts(&prog, &tcp("198.18.0.1:40000", "198.18.0.3:80")));
    assert!(!accepts(&prog, &tcp("198.18.0.1:40000", "198.18.0.4:80")));
    assert!(!accepts(&prog, &tcp("198.18.0.1:40000", "198.18.0.2:81")));
    assert!(accepts(
        &prog,
        &tcp("[2001:db8::1]:40000", "[2001:db8::2]:80")
    ));
    // Differs from the mapped address in the last word only, then in the first only.
    assert!(!accepts(
        &prog,
        &tcp("[2001:db8::1]:40000", "[2001:db8::3]:80")
    ));
    assert!(!accepts(
        &prog,
        &tcp("[2001:db8::1]:40000", "[2001:db9::2]:80")
    ));
}

#[test]
fn mixed_groups_keep_their_own_addresses() {
    let prog = build_filter(&[
        t(Some("198.18.0.2"), 80),
        t(None, 8080),
        t(Some("2001:db8::2"), 443),
    ])
    .unwrap();
    assert!(accepts(&prog, &tcp("198.18.0.1:1", "198.18.0.2:80")));
    assert!(accepts(&prog, &tcp("198.18.0.1:1", "198.18.9.9:8080")));
    assert!(accepts(
        &prog,
        &tcp("[2001:db8::1]:1", "[2001:db8::7]:8080")
    ));
    // Port 443 is only mapped on IPv6, port 80 only on IPv4.
    assert!(!accepts(&prog, &tcp("198.18.0.1:1", "198.18.0.2:443")));
    assert!(!accepts(&prog, &tcp("[2001:db8::1]:1", "[2001:db8::2]:80")));
    assert!(accepts(&prog, &tcp("[2001:db8::1]:1", "[2001:db8::2]:443")));
}

#[test]
fn only_ipv4_maps_reject_all_ipv6() {
    let prog = build_filter(&[t(Some("198.18.0.2"), 80)]).unwrap();
    assert!(!accepts(&prog, &tcp("[2001:db8::1]:1", "[2001:db8::2]:80")));
}

#[test]
fn wildcard_wins_over_addresses_on_the_same_port() {
    let prog = build_filter(&[t(Some("198.18.0.2"), 80), t(None, 80)]).unwrap();
    assert!(accepts(&prog, &tcp("198.18.0.1:1", "198.18.7.7:80")));
}

#[test]
fn rejects_udp_fragments_outgoing_and_non_ip() {
    let prog = build_filter(&[t(None, 80)]).unwrap();
    let good = tcp("198.18.0.1:40000", "198.18.0.2:80");

    let mut udp = good.clone();
    udp[9] = 17;
    assert!(!accepts(&prog, &udp));

    let mut frag = good.clone();
    frag[6] = 0x00;
    frag[7] = 0x10; // offset 16 * 8 bytes: the "TCP header" here is somebody's payload
    assert!(!accepts(&prog, &frag));
    let mut first_frag = good.clone();
    first_frag[6] = 0x20; // MF with offset 0 still carries the TCP header: let user space count it
    first_frag[7] = 0x00;
    assert!(accepts(&prog, &first_frag));

    assert_eq!(run(&prog, &good, 0x0800, PACKET_OUTGOING), 0);
    assert_eq!(run(&prog, &good, 0x0806, 0), 0, "ARP");

    let mut v6 = tcp("[2001:db8::1]:40000", "[2001:db8::2]:80");
    v6[6] = 0; // hop-by-hop options before TCP
    assert!(!accepts(&prog, &v6));
}

#[test]
fn ipv4_options_move_the_port() {
    let prog = build_filter(&[t(None, 80)]).unwrap();
    let plain = tcp("198.18.0.1:40000", "198.18.0.2:80");
    // Insert 4 bytes of IP options (NOP NOP NOP EOL): IHL 6.
    let mut with_opts = plain[..20].to_vec();
    with_opts.extend_from_slice(&[1, 1, 1, 0]);
    with_opts.extend_from_slice(&plain[20..]);
    with_opts[0] = 0x46;
    assert!(accepts(&prog, &with_opts));
    // The same bytes read with IHL 5 would put the port elsewhere: a miss.
    let mut misread = with_opts.clone();
    misread[0] = 0x45;
    assert!(!accepts(&prog, &misread));
}

#[test]
fn truncated_frames_are_rejected() {
    let prog = build_filter(&[t(None, 80)]).unwrap();
    let pkt = tcp("198.18.0.1:40000", "198.18.0.2:80");
    assert!(!accepts(&prog, &pkt[..21]));
    let v6 = tcp("[2001:db8::1]:40000", "[2001:db8::2]:80");
    assert!(!accepts(&prog, &v6[..42]));
}

#[test]
fn limits() {
    assert_eq!(build_filter(&[]), Err(BpfError::NoTargets));
    let many: Vec<FilterTarget> = (0..30u16)
        .map(|i| FilterTarget {
            addr: Some(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i))),
            port: 80,
        })
        .collect();
    assert!(matches!(
        build_filter(&many),
        Err(BpfError::TooManyAddresses {
            port: 80,
            count: 30
        })
    ));
    let fine: Vec<FilterTarget> = many[..28].to_vec();
    let prog = build_filter(&fine).unwrap();
    assert!(accepts(&prog, &tcp("[2001:db8::1]:1", "[2001:db8::1b]:80")));
    assert!(!accepts(
        &prog,
        &tcp("[2001:db8::1]:1", "[2001:db8::1c]:80")
    ));
    let ports: Vec<FilterTarget> = (1..=3000u16).map(|p| t(None, p)).collect();
    assert!(matches!(build_filter(&ports), Err(BpfError::TooLong(_))));
    let ports: Vec<FilterTarget> = (1..=1000u16).map(|p| t(None, p)).collect();
    let prog = build_filter(&ports).unwrap();
    // The IPv6 part sits behind the 32-bit jump, far beyond 255 instructions.
    assert!(accepts(&prog, &tcp("[2001:db8::1]:1", "[2001:db8::2]:999")));
    assert!(!accepts(
        &prog,
        &tcp("[2001:db8::1]:1", "[2001:db8::2]:1001")
    ));
}

/// A mirror datagram as a UDP socket filter sees it: 8 bytes of UDP header, then the
/// encapsulation (`geneve`: with `opts` bytes of options and inner `proto`), then the frame
/// (`tags` VLAN tags before the EtherType when the inner frame is Ethernet).
fn mirror_dgram(geneve: Option<(usize, u16)>, vni: u32, tags: &[u16], ip: &[u8]) -> Vec<u8> {
    let mut d = vec![0x12, 0x34, 0x12, 0xb5, 0, 0, 0, 0];
    let v = vni.to_be_bytes();
    let eth = match geneve {
        None => {
            d.extend_from_slice(&[0x08, 0, 0, 0, v[1], v[2], v[3], 0]);
            true
        }
        Some((opts, proto)) => {
            let p = proto.to_be_bytes();
            d.extend_from_slice(&[(opts / 4) as u8, 0, p[0], p[1], v[1], v[2], v[3], 0]);
            d.extend(std::iter::repeat_n(0xaa, opts));
            proto == 0x6558
        }
    };
    if eth {
        d.extend_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]);
        for &t in tags {
            d.extend_from_slice(&t.to_be_bytes());
            d.extend_from_slice(&[0, 5]);
        }
        d.extend_from_slice(if ip[0] >> 4 == 6 {
            &[0x86, 0xdd]
        } else {
            &[0x08, 0x00]
        });
    }
    d.extend_from_slice(ip);
    d
}

#[test]
fn mirror_filter_keeps_the_clients_packets_of_the_sessions_taken() {
    let req = tcp("198.18.0.1:40000", "198.18.0.2:80");
    let ans = tcp("198.18.0.2:80", "198.18.0.1:40000");
    let other = tcp("198.18.0.1:40000", "198.18.0.2:81");
    let req6 = tcp("[2001:db8::1]:40000", "[2001:db8::2]:8080");
    let ans6 = tcp("[2001:db8::2]:8080", "[2001:db8::1]:40000");
    for geneve in [
        None,
        Some((0, 0x6558)),
        Some((8, 0x6558)),
        Some((252, 0x6558)),
    ] {
        for tags in [&[][..], &[0x8100], &[0x88a8, 0x8100]] {
            let prog =
                build_mirror_filter(geneve.is_some(), &[42, 7, 8, 9], &[80, 8080], false).unwrap();
            let with = build_mirror_filter(geneve.is_some(), &[], &[8080, 80], true).unwrap();
            let go = |prog: &[Insn], vni: u32, ip: &[u8]| {
                run(prog, &mirror_dgram(geneve, vni, tags, ip), 0, 0) != 0
            };
            let what = format!("{geneve:?} {tags:?}");
            assert!(go(&prog, 42, &req) && go(&prog, 8, &req6), "{what}");
            assert_eq!(
                run(&prog, &mirror_dgram(geneve, 42, tags, &req), 0, 0),
                ACCEPT
            );
            assert!(
                !go(&prog, 43, &req) && !go(&prog, 6, &req) && !go(&prog, 10, &req6),
                "{what}: other VNIs"
            );
            assert!(
                !go(&prog, 42, &ans) && !go(&prog, 42, &ans6),
                "{what}: answers without --compare"
            );
            assert!(!go(&prog, 42, &other), "{what}: another port");
            // With --compare and no --vni: every session, both directions.
            assert!(
                go(&with, 43, &req) && go(&with, 1, &ans) && go(&with, 42, &ans6),
                "{what}"
            );
            assert!(!go(&with, 42, &other), "{what}");
            // UDP, a later fragment, TCP behind an IPv6 extension header: dropped.
            let mut udp = req.clone();
            udp[9] = 17;
            let mut frag = req.clone();
            frag[7] = 0x10;
            let mut ext = req6.clone();
            ext[6] = 0;
            assert!(
                !go(&prog, 42, &udp) && !go(&prog, 42, &frag) && !go(&prog, 42, &ext),
                "{what}"
            );
            // IPv4 options move the ports.
            let mut opts = req.clone();
            opts[0] = 0x46;
            opts.splice(20..20, [1u8, 1, 1, 0]);
            assert!(go(&prog, 42, &opts), "{what}");
            // What user space counts under a reason of its own is left to it: a bad version.
            let mut bad = req.clone();
            bad[0] = 0x55;
            assert!(go(&prog, 42, &bad), "{what}");
            // Cut before the ports: dropped, as the capture's filter drops a cut frame.
            let d = mirror_dgram(geneve, 42, tags, &req);
            assert!(
                run(&prog, &d[..d.len() - req.len() + 21], 0, 0) == 0,
                "{what}"
            );
        }
    }
    // Not IP inside (ARP; an unknown GENEVE protocol): left to user space.
    let prog = build_mirror_filter(false, &[42], &[80], false).unwrap();
    let mut arp = mirror_dgram(None, 42, &[], &[0u8; 28]);
    arp[28..30].copy_from_slice(&[0x08, 0x06]);
    assert!(run(&prog, &arp, 0, 0) != 0);
    assert!(
        run(&prog, &mirror_dgram(None, 43, &[], &[0u8; 28]), 0, 0) == 0,
        "another VNI first"
    );
    let g = build_mirror_filter(true, &[], &[80], false).unwrap();
    assert!(
        run(
            &g,
            &mirror_dgram(Some((4, 0x1234)), 42, &[], &[0u8; 40]),
            0,
            0
        ) != 0
    );
    // GENEVE carrying IP without Ethernet.
    assert!(run(&g, &mirror_dgram(Some((4, 0x0800)), 42, &[], &req), 0, 0) != 0);
    assert!(
        run(
            &g,
            &mirror_dgram(
                Some((4, 0x86dd)),
                42,
                &[],
                &tcp("[2001:db8::1]:1", "[2001:db8::2]:80")
            ),
            0,
            0
        ) != 0
    );
    assert!(run(&g, &mirror_dgram(Some((4, 0x0800)), 42, &[], &ans), 0, 0) == 0);
}

#[test]
fn mirror_filter_vni_ranges_and_limits() {
    let req = tcp("198.18.0.1:40000", "198.18.0.2:80");
    let vnis: Vec<u32> = (100..=4195).chain([1, 3, 5, 16_777_215]).collect();
    let prog = build_mirror_filter(false, &vnis, &[80], false).unwrap();
    for (vni, want) in [
        (0, false),
        (1, true),
        (2, false),
        (3, true),
        (5, true),
        (99, false),
        (100, true),
        (4195, true),
        (4196, false),
        (16_777_215, true),
        (16_777_214, false),
    ] {
        assert_eq!(
            run(&prog, &mirror_dgram(None, vni, &[], &req), 0, 0) != 0,
            want,
            "VNI {vni}"
        );
    }
    // Too many ranges: every VNI passes, user space selects.
    let scattered: Vec<u32> = (0..1000).map(|i| i * 2).collect();
    let prog = build_mirror_filter(false, &scattered, &[80], false).unwrap();
    assert!(run(&prog, &mirror_dgram(None, 1, &[], &req), 0, 0) != 0);
    assert_eq!(build_mirror_filter(false, &[], &[], false), None);
    assert_eq!(
        build_mirror_filter(false, &[], &(1..=101).collect::<Vec<u16>>(), false),
        None
    );
    let prog = build_mirror_filter(
        true,
        &(0..600)
            .map(|i| i * 2)
            .take(MIRROR_MAX_VNI_RANGES)
            .collect::<Vec<_>>(),
        &(1..=100).collect::<Vec<u16>>(),
        true,
    )
    .unwrap();
    assert!(prog.len() < MAX_INSNS);
    assert!(run(&prog, &mirror_dgram(Some((0, 0x6558)), 2, &[], &req), 0, 0) != 0);
    assert!(run(&prog, &mirror_dgram(Some((0, 0x6558)), 3, &[], &req), 0, 0) == 0);
}

/// The kernel runs the program as the interpreter above does: a UDP socket on loopback with
/// the program attached receives the datagrams of VNI 42 to port 80 and nothing else.
#[test]
fn mirror_filter_on_a_real_udp_socket() {
    use std::os::fd::AsFd;
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let prog = build_mirror_filter(false, &[42], &[80], false).unwrap();
    crate::sys::attach_filter(rx.as_fd(), &prog).unwrap();
    rx.set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let req = tcp("198.18.0.1:40000", "198.18.0.2:80");
    let ans = tcp("198.18.0.2:80", "198.18.0.1:40000");
    for (vni, ip) in [(43, &req), (42, &ans), (42, &req), (41, &req)] {
        // The socket sees the payload only: the program saw the UDP header before it.
        tx.send_to(
            &mirror_dgram(None, vni, &[], ip)[8..],
            rx.local_addr().unwrap(),
        )
        .unwrap();
    }
    let mut buf = [0u8; 2048];
    let n = rx.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], &mirror_dgram(None, 42, &[], &req)[8..]);
    assert!(rx.recv(&mut buf).is_err(), "only one datagram passes");
}
