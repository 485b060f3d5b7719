//! Amplification and sampling: `copies` sessions per captured session, each on a test tuple of
//! its own and carrying every byte; tuples that never collide (also for N = 100 over thousands
//! of live sessions, with and without a pool, and across port shares); shared captured bytes;
//! the multiplier counters; sampling that is consistent per session and near the percentage;
//! which copy a record is of (`--compare`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::*;
use crate::engine::chunk::{BUF_OVERHEAD, SLOT_OVERHEAD};
use crate::engine::{ClientIpPool, PortShare};

/// What the meter counts for `bytes` in `bufs` buffers referred to from `slots` queue slots.
fn held(bytes: usize, bufs: usize, slots: usize) -> usize {
    bytes + bufs * BUF_OVERHEAD + slots * SLOT_OVERHEAD
}

fn copies(n: u16) -> EngineConfig {
    EngineConfig { copies: n, ..cfg() }
}

fn registers(ev: &[RegEvent]) -> Vec<FourTuple> {
    ev.iter()
        .filter_map(|e| {
            if let RegEvent::Register(t) = e {
                Some(*t)
            } else {
                None
            }
        })
        .collect()
}

fn from(ip: [u8; 4], port: u16) -> Option<SocketAddr> {
    Some(SocketAddr::from((ip, port)))
}

/// The SYN-ACK record of the test server on `t`.
fn syn_ack(h: &mut H, t: FourTuple) {
    h.rec_to(t, SYN_ACK);
}

/// The payload bytes sent on each tuple, in sequence order from the client's first byte.
fn streams(outs: &[Out]) -> BTreeMap<FourTuple, Vec<u8>> {
    let mut by: BTreeMap<FourTuple, Vec<Out>> = BTreeMap::new();
    for o in outs {
        by.entry(o.tuple).or_default().push(o.clone());
    }
    by.into_iter()
        .map(|(t, v)| (t, stream_of(&v, CISN + 1)))
        .collect()
}

#[test]
fn three_copies_get_three_tuples_and_each_gets_every_byte() {
    let mut h = H::new(copies(3));
    h.syn(SYN);
    let regs = registers(&h.control());
    assert_eq!(regs.len(), 3, "{regs:?}");
    assert_eq!(
        regs.iter().collect::<BTreeSet<_>>().len(),
        3,
        "distinct: {regs:?}"
    );
    assert_eq!(
        regs[0],
        test_tuple(),
        "copy 0 keeps the client's address and port"
    );
    for t in &regs {
        assert_eq!(
            (t.client.ip(), t.server.socket()),
            (client().ip(), target()),
            "no pool: the client's address"
        );
    }
    let syns = h.packets();
    assert_eq!(
        syns.iter().map(|o| o.tuple).collect::<Vec<_>>(),
        regs,
        "one SYN per copy, after its Register"
    );
    assert!(syns.iter().all(|o| o.has(TcpFlags::SYN) && o.seq == CISN));
    h.cap(HS_ACK);
    for &t in &regs {
        syn_ack(&mut h, t);
    }
    let _ = h.out();
    // An upload in three captured segments, one of them a 20 KB super-segment.
    let body: Vec<u8> = (0..23_000u32).map(|i| (i % 251) as u8).collect();
    h.cap(data(0, 0, &body[..1000]));
    h.cap(data(1000, 0, &body[1000..21_000]));
    h.cap(data(21_000, 0, &body[21_000..]));
    // The test servers' windows are wide open: everything goes at once, on every copy.
    let outs = h.out();
    let s = streams(&outs);
    assert_eq!(
        s.keys().copied().collect::<Vec<_>>(),
        regs.iter()
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
    );
    for (t, v) in &s {
        assert!(
            v == &body,
            "{t}: {} of {} bytes, or altered",
            v.len(),
            body.len()
        );
        assert!(
            outs.iter()
                .filter(|o| o.tuple == *t)
                .all(|o| o.payload.len() <= 1460),
            "cut to the MSS"
        );
    }
    let st = h.e.stats();
    assert_eq!(
        (
            st.copies_requested,
            st.captured_sessions_started,
            st.sessions_started,
            st.copy_multiplier()
        ),
        (3, 1, 3, 3.0)
    );
}

#[test]
fn copies_share_the_captured_bytes_and_each_has_the_per_session_cap() {
    // A short replay window, so that a copy drops what its test server acknowledged.
    let mut h = H::new(EngineConfig {
        per_session_cap: 30_000,
        replay_keep: 1000,
        ..copies(3)
    });
    h.syn(SYN);
    let regs = registers(&h.control());
    let _ = h.packets();
    // No SYN-ACK yet: everything stays buffered, once.
    for i in 0..5u32 {
        h.cap(data(i * 5000, 0, &[i as u8; 5000]));
    }
    assert_eq!(
        h.e.buffered_bytes(),
        held(25_000, 5, 15),
        "three copies, one buffer per segment"
    );
    // Copy 1's test server takes it all; the others still hold every byte.
    syn_ack(&mut h, regs[1]);
    let _ = h.out();
    h.rec_to(regs[1], resp(0, 25_000, 0));
    let _ = h.out();
    assert_eq!(h.e.buffered_bytes(), held(25_000, 5, 10));
    // Copies 0 and 2 go over their cap and fail; copy 1 goes on, alone holding what it needs.
    h.cap(data(25_000, 0, &[9; 6000]));
    let st = h.e.stats();
    assert_eq!(
        (
            st.sessions_failed.buffer_cap,
            st.drops.buffer_cap,
            st.sessions_active
        ),
        (2, 2, 1)
    );
    assert_eq!(
        h.e.buffered_bytes(),
        held(6000, 1, 1),
        "only what copy 1 still needs"
    );
    let out = h.out();
    assert!(
        out.iter()
            .any(|o| o.tuple == regs[1] && o.payload == [9; 1460]),
        "copy 1 carries on: {out:?}"
    );
}

#[test]
fn memory_shedding_counts_shared_bytes_once() {
    // 3 sessions x 3 copies x 4000 bytes: 12 000 bytes held (and bookkeeping), not 36 000.
    // Shedding goes down to 90% of the cap, just above three sessions.
    // Every copy session also costs SESSION_COST: room for nine of them on top.
    let max_memory = (held(12_000, 3, 9) + 9 * crate::engine::SESSION_COST) * 10 / 9 + 10;
    let mut h = H::new(EngineConfig {
        max_memory,
        ..copies(3)
    });
    for (i, port) in [1001u16, 1002, 1003].into_iter().enumerate() {
        h.at(i as u64 * 10);
        h.syn(Seg {
            src: from([203, 0, 113, 7], port),
            ..SYN
        });
        assert_eq!(h.out().len(), 3, "three SYNs");
        h.cap(Seg {
            src: from([203, 0, 113, 7], port),
            ..data(0, 0, &[1; 4000])
        });
    }
    assert_eq!(h.e.buffered_bytes(), held(12_000, 3, 9));
    assert_eq!(h.e.stats().sessions_shed, 0);
    // One more goes over: the oldest session's copies are shed until its bytes are freed.
    h.at(100);
    h.syn(Seg {
        src: from([203, 0, 113, 7], 1004),
        ..SYN
    });
    // (The new copies' own cost may shed before their data comes.)
    let mut out = h.out();
    h.cap(Seg {
        src: from([203, 0, 113, 7], 1004),
        ..data(0, 0, &[1; 4000])
    });
    let st = h.e.stats();
    assert_eq!(
        (st.sessions_shed, h.e.buffered_bytes()),
        (3, held(12_000, 3, 9)),
        "{st:?}"
    );
    out.extend(h.out());
    let rst: BTreeSet<u16> = out
        .iter()
        .filter(|o| o.has(TcpFlags::RST))
        .map(|o| o.tuple.client.port())
        .collect();
    assert!(
        rst.contains(&1001) && rst.len() == 3,
        "the three copies of the oldest: {rst:?}"
    );
}

#[test]
fn a_pool_gives_each_copy_its_own_address_from_every_range() {
    let pool: ClientIpPool = "198.19.0.0/24,198.19.1.0/24".parse().unwrap();
    let mut h = H::new(EngineConfig {
        client_ip: Some(pool.clone()),
        ..copies(4)
    });
    let mut per_session = Vec::new();
    for i in 0..300u32 {
        let src = from([10, 1, (i >> 8) as u8, i as u8], 40000 + i as u16);
        h.syn(Seg { src, ..SYN });
        per_session.push(registers(&h.control()));
    }
    let mut octets = BTreeSet::new();
    let mut all = BTreeSet::new();
    for regs in &per_session {
        assert_eq!(regs.len(), 4);
        let ips: BTreeSet<IpAddr> = regs.iter().map(|t| t.client.ip()).collect();
        assert_eq!(ips.len(), 4, "one address per copy: {regs:?}");
        for t in regs {
            assert!(pool.contains(t.client.ip()), "{t}");
            let IpAddr::V4(a) = t.client.ip() else {
                panic!()
            };
            octets.insert(a.octets()[2]);
            assert!(all.insert(*t), "{t} twice");
            // A different address: every copy keeps the client's port.
            assert_eq!(t.client.port(), regs[0].client.port(), "{regs:?}");
        }
    }
    assert_eq!(octets, [0u8, 1].into(), "both ranges used");
    // Sticky: another session of the first client gets the same four addresses.
    h.syn(Seg {
        src: from([10, 1, 0, 0], 50000),
        ..SYN
    });
    let again: BTreeSet<IpAddr> = registers(&h.control())
        .iter()
        .map(|t| t.client.ip())
        .collect();
    assert_eq!(
        again,
        per_session[0].iter().map(|t| t.client.ip()).collect()
    );
}

#[test]
fn a_hundred_copies_of_thousands_of_sessions_never_collide() {
    // With a pool: 2000 live sessions x 100 copies over two /24s.
    let pool: ClientIpPool = "198.19.0.0/24,198.19.1.0/24".parse().unwrap();
    let mut h = H::new(EngineConfig {
        client_ip: Some(pool.clone()),
        ..copies(100)
    });
    let mut seen = BTreeSet::new();
    for i in 0..2000u32 {
        // Few real clients, many ports each: the pool addresses of their copies overlap a lot.
        h.syn(Seg {
            src: from([10, 2, 0, (i % 5) as u8], 20000 + (i / 5) as u16),
            ..SYN
        });
        for t in registers(&h.control()) {
            assert!(pool.contains(t.client.ip()));
            assert!(seen.insert(t), "collision on {t}");
        }
        let _ = h.packets();
    }
    assert_eq!(seen.len(), 200_000);
    assert_eq!(h.e.registered().count(), 200_000);
    let st = h.e.stats();
    assert_eq!(
        (
            st.captured_sessions_started,
            st.sessions_started,
            st.sessions_no_tuple
        ),
        (2000, 200_000, 0)
    );
    assert_eq!(st.copy_multiplier(), 100.0);
}

#[test]
fn without_a_pool_copies_use_other_ports_until_none_is_left() {
    // One client address, 100 copies of 700 sessions: 70 000 tuples wanted, 64 512 ports.
    let mut h = H::new(copies(100));
    let mut seen = BTreeSet::new();
    let mut ports = std::collections::HashSet::new();
    for i in 0..700u16 {
        h.syn(Seg {
            src: from([203, 0, 113, 7], 30000 + i),
            ..SYN
        });
        let regs = registers(&h.control());
        if !ports.contains(&(30000 + i)) && !regs.is_empty() {
            assert_eq!(
                regs[0].client.port(),
                30000 + i,
                "copy 0 keeps the client's port while free"
            );
        }
        ports.extend(regs.iter().map(|t| t.client.port()));
        for t in regs {
            assert_eq!(t.client.ip(), client().ip());
            assert!(t.client.port() >= 1024);
            assert!(seen.insert(t), "collision on {t}");
        }
        let _ = h.packets();
    }
    let st = h.e.stats();
    assert_eq!(seen.len(), 64_512, "every port once");
    assert_eq!(
        (st.sessions_started, st.sessions_no_tuple),
        (64_512, 70_000 - 64_512)
    );
    // The last 54 sessions found no port at all.
    assert_eq!(
        st.captured_sessions_started, 646,
        "sessions that got a copy"
    );
    assert!((st.copy_multiplier() - 64_512.0 / 646.0).abs() < 1e-9);
    // A session ends: its ports are free again for the next one.
    let first = *seen.iter().find(|t| t.client.port() == 30000).unwrap();
    h.rec_to(
        first,
        Seg {
            flags: TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0),
            ack: CISN + 1,
            ..SYN_ACK
        },
    );
    let _ = h.out();
    h.syn(Seg {
        src: from([203, 0, 113, 7], 31000),
        ..SYN
    });
    assert_eq!(registers(&h.control()).len(), 1, "the one freed tuple");
}

#[test]
fn copies_of_several_workers_stay_in_their_port_shares() {
    let mut all = BTreeSet::new();
    for index in 0..3u16 {
        let share = PortShare::new(index, 3);
        let mut h = H::new(EngineConfig {
            port_share: share,
            ..copies(5)
        });
        for port in 40000..40030u16 {
            h.syn(Seg {
                src: from([203, 0, 113, 7], port),
                ..SYN
            });
        }
        for t in registers(&h.control()) {
            assert!(share.contains(t.client.port()), "worker {index}: {t}");
            assert!(all.insert(t), "two workers picked {t}");
        }
    }
    assert_eq!(all.len(), 3 * 30 * 5);
}

#[test]
fn a_packet_is_counted_once_however_many_copies() {
    let mut h = H::new(copies(4));
    h.establish();
    h.cap(data(0, 0, b"req1"));
    h.cap(data(0, 0, b"req1")); // a client retransmission
    h.cap(data(2, 0, b"q1xx")); // overlaps 2 bytes
    let d = &h.e.stats().drops;
    assert_eq!((d.client_retransmission, d.overlap_trimmed), (1, 1));
}

#[test]
fn a_session_caught_mid_stream_starts_all_its_copies_at_the_boundary() {
    let mut h = H::new(copies(3));
    h.cap(data(0, 0, b"middle of a request"));
    assert_eq!(h.e.session_count(), 3);
    assert!(h.out().is_empty());
    assert_eq!(h.e.stats().drops.midstream_skip, 1);
    h.cap(data(19, 100, b"GET /next"));
    let regs = registers(&h.control());
    assert_eq!(regs.len(), 3);
    let st = h.e.stats();
    assert_eq!(
        (
            st.captured_sessions_started,
            st.sessions_started,
            st.sessions_midstream
        ),
        (1, 3, 3)
    );
    let syns = h.packets();
    assert!(syns
        .iter()
        .all(|o| o.has(TcpFlags::SYN) && o.seq == CISN + 19));
}

#[test]
fn a_new_syn_supersedes_every_copy_and_a_repeated_one_does_not() {
    let mut h = H::new(copies(3));
    h.syn(SYN);
    let first = registers(&h.control());
    let _ = h.packets();
    h.cap(SYN); // the client's SYN again
    assert!(h.out().is_empty());
    assert_eq!(h.e.stats().drops.client_retransmission, 1);
    h.syn(Seg {
        seq: CISN + 777_777,
        ..SYN
    }); // a new connection on the same port
    let second = registers(&h.control());
    let st = h.e.stats();
    assert_eq!(
        (
            st.sessions_failed.superseded,
            st.sessions_started,
            st.captured_sessions_started
        ),
        (3, 6, 2)
    );
    assert_eq!(second.len(), 3);
    // The old copies reset their connections and linger on them: the new ones take others.
    let rst: BTreeSet<FourTuple> = h
        .packets()
        .iter()
        .filter(|o| o.has(TcpFlags::RST))
        .map(|o| o.tuple)
        .collect();
    assert_eq!(rst, first.iter().copied().collect());
    assert!(
        second.iter().all(|t| !first.contains(t)),
        "{first:?} {second:?}"
    );
}

#[test]
fn sampling_is_consistent_per_session_and_near_the_percentage() {
    let sessions = 4000u32;
    let mut chosen = Vec::new();
    for index in 0..2u16 {
        // Two workers' engines (same seed, other RNG streams) choose the same sessions.
        let mut h = H::new(EngineConfig {
            sample_percent: 50.0,
            port_share: PortShare::new(index, 2),
            ..cfg()
        });
        let mut mine = BTreeSet::new();
        for i in 0..sessions {
            let src = from([10, 3, (i >> 8) as u8, i as u8], 1024 + (i % 50_000) as u16);
            // The test session starts at the client's handshake ACK.
            h.cap(Seg { src, ..SYN });
            h.cap(Seg { src, ..HS_ACK });
            let regs = registers(&h.control());
            let copied = !regs.is_empty();
            let _ = h.packets();
            if let Some(t) = regs.first() {
                h.rec_to(*t, SYN_ACK);
            }
            h.cap(Seg {
                src,
                ..data(0, 0, b"GET / HTTP/1.1\r\n\r\n")
            });
            let out = h.out();
            // Every segment of a chosen session goes; none of the others.
            assert_eq!(
                out.iter().any(|o| o.payload == b"GET / HTTP/1.1\r\n\r\n"),
                copied,
                "session {i}"
            );
            if copied {
                mine.insert(i);
            }
        }
        let st = h.e.stats();
        let n = mine.len() as u64;
        assert_eq!(
            (st.sessions_started, st.sessions_sampled_out),
            (n, u64::from(sessions) - n)
        );
        assert_eq!(
            st.drops.not_sampled,
            3 * (u64::from(sessions) - n),
            "SYN, ACK and data of each"
        );
        chosen.push(mine);
    }
    assert_eq!(chosen[0], chosen[1], "same seed, same sessions");
    // 4000 fair draws: sd 32; five of them either way.
    let n = chosen[0].len() as i64;
    assert!((n - 2000).abs() <= 160, "{n} of 4000 at 50%");
    // Other percentages, and another seed picks other sessions.
    for (pct, seed) in [(10.0, 7u64), (90.0, 7), (50.0, 8)] {
        let mut e = Engine::new(
            EngineConfig {
                sample_percent: pct,
                ..cfg()
            },
            seed,
        );
        let mut buf = Vec::new();
        let mut picked = BTreeSet::new();
        for i in 0..sessions {
            let src = SocketAddr::from(([10, 3, (i >> 8) as u8, i as u8], 1024 + i as u16));
            let p = build(&SYN, src, ONLINE.parse().unwrap());
            let before = e.stats().sessions_started;
            e.handle_captured(Instant::now(), &p);
            e.handle_captured(
                Instant::now(),
                &build(&HS_ACK, src, ONLINE.parse().unwrap()),
            );
            if e.stats().sessions_started > before {
                picked.insert(i);
            }
            while e.poll_control().is_some() {}
            while e.poll_transmit(Instant::now(), &mut buf).is_some() {}
        }
        let want = pct / 100.0 * f64::from(sessions);
        let sd = (f64::from(sessions) * pct / 100.0 * (1.0 - pct / 100.0)).sqrt();
        assert!(
            (picked.len() as f64 - want).abs() <= 5.0 * sd,
            "{} at {pct}%",
            picked.len()
        );
        if seed == 8 {
            assert_ne!(picked, chosen[0], "another seed, another sample");
        }
    }
}

#[test]
fn a_baseline_gets_its_own_copy_with_the_clients_address_and_port() {
    let baseline: SocketAddr = "198.18.7.7:8080".parse().unwrap();
    let cfg = EngineConfig {
        baselines: vec![PortMap {
            online_ip: None,
            online_port: 80,
            target: baseline,
        }],
        ..cfg()
    };
    let mut h = H::new(cfg);
    h.syn(SYN);
    let regs = registers(&h.control());
    assert_eq!(
        regs,
        vec![test_tuple(), FourTuple::new(client(), baseline)],
        "the candidate, then the baseline"
    );
    let _ = h.packets();
    h.cap(HS_ACK);
    for &t in &regs {
        syn_ack(&mut h, t);
    }
    let _ = h.out();
    h.cap(data(0, 0, b"GET / HTTP/1.1\r\n\r\n"));
    let s = streams(&h.out());
    assert_eq!(s.len(), 2);
    assert!(
        s.values().all(|v| v == b"GET / HTTP/1.1\r\n\r\n"),
        "identical copies: {s:?}"
    );
    let st = h.e.stats();
    assert_eq!((st.captured_sessions_started, st.sessions_started), (1, 2));
}

/// `--compare` hands the comparison only the records of copies that stand for the captured
/// client (its address and port): the engine says which copy a record is of, and for whom.
#[test]
fn a_records_copy_and_the_client_it_stands_for() {
    let mut h = H::new(copies(3));
    h.syn(SYN);
    let regs = registers(&h.control());
    let rec = |t: FourTuple| {
        Record::from_packet(&build(&SYN_ACK, t.server.into(), t.client.into()), 0)
            .unwrap()
            .1
    };
    let got: Vec<_> = regs.iter().map(|&t| h.e.record_copy(&rec(t))).collect();
    assert_eq!(
        got,
        vec![Some((0, Some(client()))), Some((1, None)), Some((2, None))]
    );
    let stranger = FourTuple::new(SocketAddr::from(([198, 18, 9, 9], 1234)), target());
    assert_eq!(h.e.record_copy(&rec(stranger)), None, "no session");
    assert_eq!(h.e.record_copy(&Record::default()), None, "not a packet");

    // A later client whose port another copy holds: its copy 0 takes another port, and still
    // stands for that client (the comparison files its records under it).
    let taken = regs[1].client;
    let later = Seg {
        src: Some(taken.into()),
        ..SYN
    };
    h.syn(later);
    let regs2 = registers(&h.control());
    assert_eq!(regs2.len(), 3, "{regs2:?}");
    assert_ne!(regs2[0].client, taken, "the port is taken: copy 0 moves");
    assert_eq!(
        h.e.record_copy(&rec(regs2[0])),
        Some((0, Some(taken.into()))),
        "it stands for the client all the same"
    );
    assert_eq!(
        h.e.record_copy(&rec(regs[1])),
        Some((1, None)),
        "the copy holding the port does not"
    );
    let mut r = rec(regs2[0]);
    crate::shadow::file_under(&mut r, taken.into());
    let filed = common::wire::parse_tcp_headers(&r.headers).unwrap();
    assert_eq!(
        (filed.packet.dst, filed.packet.tcp.dst_port()),
        (taken.ip(), taken.port()),
        "filed under the client"
    );
    assert_eq!(
        filed.packet.tcp.src_port(),
        regs2[0].server.port(),
        "the rest unchanged"
    );
}

#[test]
fn the_copies_go_on_when_the_first_is_gone_and_a_new_syn_still_finds_them() {
    // The captured-session table names a group by its first copy's slot (`by_key`): once that
    // copy is gone, the next one leads it.
    let mut h = H::new(copies(3));
    h.syn(SYN);
    let regs = registers(&h.control());
    let _ = h.packets();
    h.rec_to(
        regs[0],
        Seg {
            seq: 0,
            ack: CISN + 1,
            flags: TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0),
            ..BASE
        },
    );
    assert_eq!(h.e.stats().sessions_failed.refused, 1);
    assert_eq!(h.e.session_count(), 2, "copy 0 left the table");
    h.cap(HS_ACK);
    for &t in &regs[1..] {
        syn_ack(&mut h, t);
    }
    let _ = h.out();
    h.cap(data(0, 0, b"GET / HTTP/1.1\r\n\r\n"));
    let s = streams(&h.out());
    assert_eq!(
        s.keys().copied().collect::<Vec<_>>(),
        regs[1..]
            .iter()
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
    );
    assert!(s.values().all(|v| v == b"GET / HTTP/1.1\r\n\r\n"), "{s:?}");
    assert_eq!(h.e.stats().captured_sessions_started, 1);
    // A new connection on the same port supersedes both copies left.
    h.syn(Seg {
        seq: CISN + 777_777,
        ..SYN
    });
    let st = h.e.stats();
    assert_eq!(
        (st.sessions_failed.superseded, st.captured_sessions_started),
        (2, 2)
    );
    assert_eq!(h.e.by_key.len(), 1);
}
