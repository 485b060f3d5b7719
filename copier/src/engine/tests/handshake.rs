//! Starting sessions: handshake, data held until the SYN-ACK, timestamps, mid-stream start,
//! the greeting of server-speaks-first protocols, SYN retransmission.

use super::*;
use crate::engine::ClientIpPool;

#[test]
fn syn_registers_then_sends_our_own_syn() {
    let mut h = H::default();
    h.syn(Seg {
        ts: Some((1000, 0)),
        ..SYN
    });
    // Nothing leaves before the I/O layer has taken the Register.
    assert!(h.packets().is_empty());
    assert_eq!(h.control(), vec![RegEvent::Register(test_tuple())]);
    let out = h.packets();
    assert_eq!(out.len(), 1);
    let syn = &out[0];
    assert_eq!(syn.tuple, test_tuple());
    assert_eq!(syn.flags, TcpFlags::SYN);
    assert_eq!(syn.seq, CISN, "the client's own ISN");
    assert_eq!(syn.mss, Some(1460));
    assert_eq!(syn.wscale, Some(7));
    assert_eq!(syn.ts, Some((1000, 0)));
    assert!(!syn.sack_permitted);
    assert!(syn.len <= 1500);
    assert_eq!(h.e.stats().sessions_started, 1);
    assert_eq!(h.e.stats().sessions_active, 1);
}

#[test]
fn syn_without_timestamps_offers_none_and_ipv6_mss() {
    let mut h = H::new(EngineConfig {
        maps: vec![PortMap {
            online_ip: None,
            online_port: 80,
            target: "[2001:db8::2]:80".parse().unwrap(),
        }],
        ..EngineConfig::default()
    });
    let c6: SocketAddr = "[2001:db8:1::7]:4000".parse().unwrap();
    let o6: SocketAddr = "[2001:db8::1]:80".parse().unwrap();
    h.syn(Seg {
        src: Some(c6),
        dst: Some(o6),
        ..SYN
    });
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].mss, Some(1440));
    assert_eq!(out[0].ts, None);
    assert_eq!(out[0].tuple.client, c6);
}

#[test]
fn data_is_held_until_the_syn_ack_record() {
    let mut h = H::default();
    h.syn(SYN);
    h.cap(HS_ACK);
    h.cap(data(0, 0, b"GET / HTTP/1.1\r\n\r\n"));
    let out = h.out();
    assert_eq!(out.len(), 1, "only the SYN: {out:?}");
    assert_eq!(out[0].flags, TcpFlags::SYN);
    h.at(1);
    h.rec(SYN_ACK);
    let out = h.out();
    assert_eq!(out.len(), 1, "{out:?}");
    let d = &out[0];
    assert!(d.has(TcpFlags::ACK) && d.has(TcpFlags::PSH));
    assert_eq!(d.seq, CISN + 1);
    assert_eq!(d.ack, TISN + 1, "acks the test server's SYN");
    assert_eq!(d.payload, b"GET / HTTP/1.1\r\n\r\n");
}

#[test]
fn handshake_ack_alone_when_no_data_waits() {
    let mut h = H::default();
    let out = h.establish();
    assert_eq!(out.len(), 2);
    assert_eq!(out[1].flags, A);
    assert_eq!((out[1].seq, out[1].ack), (CISN + 1, TISN + 1));
    assert!(out[1].payload.is_empty());
    // A retransmitted SYN-ACK (our ACK was lost) is acked again.
    h.rec(SYN_ACK);
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].flags, out[0].ack), (A, TISN + 1));
}

#[test]
fn timestamps_are_translated() {
    let mut h = H::default();
    h.syn(Seg {
        ts: Some((1000, 0)),
        ..SYN
    });
    h.cap(Seg {
        ts: Some((1001, 90_000)),
        ..HS_ACK
    });
    let _ = h.out();
    h.rec(Seg {
        ts: Some((5000, 1000)),
        ..SYN_ACK
    });
    let out = h.out();
    assert_eq!(
        out[0].ts,
        Some((1001, 5000)),
        "TSval = client's latest, TSecr = test server's"
    );
    h.cap(Seg {
        ts: Some((1010, 90_100)),
        ..data(0, 0, b"hello")
    });
    let out = h.out();
    assert_eq!(out[0].ts, Some((1010, 5000)));
    h.rec(Seg {
        ts: Some((5100, 1010)),
        ..resp(0, 5, 10)
    });
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ts, Some((1010, 5100)));
    assert_eq!(out[0].ack, TISN + 1 + 10);
    // An older TSval from a reordered record does not move TSecr back.
    h.rec(Seg {
        ts: Some((5050, 1010)),
        ..resp(0, 5, 10)
    });
    let out = h.out();
    assert_eq!(out[0].ts, Some((1010, 5100)));
}

#[test]
fn no_timestamps_when_the_test_server_declines_them() {
    let mut h = H::default();
    h.syn(Seg {
        ts: Some((1000, 0)),
        ..SYN
    });
    let _ = h.out();
    h.rec(SYN_ACK); // no TS option
    h.cap(Seg {
        ts: Some((1010, 1)),
        ..data(0, 0, b"x")
    });
    let out = h.out();
    assert!(out.iter().all(|o| o.ts.is_none()), "{out:?}");
}

#[test]
fn mss_is_cut_to_the_test_servers_and_timestamps() {
    let mut h = H::default();
    h.syn(Seg {
        ts: Some((1, 0)),
        ..SYN
    });
    let _ = h.out();
    h.rec(Seg {
        mss: Some(1000),
        ts: Some((9, 1)),
        ..SYN_ACK
    });
    h.cap(Seg {
        ts: Some((2, 0)),
        ..data(0, 0, &[7; 3000])
    });
    let out = h.out();
    let sizes: Vec<usize> = out.iter().map(|o| o.payload.len()).collect();
    assert_eq!(sizes, vec![988, 988, 988, 36]);
}

#[test]
fn mid_stream_session_starts_at_the_next_request() {
    let mut h = H::default();
    // Copying starts while the client is in the middle of a request: dropped.
    let mid = |off: u32, oack: u32, b: &[u8]| Seg {
        seq: 5_000_000 + off,
        ack: 9_000_000 + oack,
        flags: PA,
        payload: leak(b),
        ..BASE
    };
    h.cap(mid(0, 0, b"tail of an old request"));
    h.cap(mid(22, 0, b"more of it"));
    assert!(h.out().is_empty());
    assert_eq!(h.e.stats().drops.midstream_skip, 2);
    assert_eq!(h.e.stats().sessions_started, 0);
    let live = |h: &H| h.e.target_stats().map(|t| t.live).sum::<usize>();
    assert_eq!(
        live(&h),
        0,
        "waiting to synchronise: no load on the test server yet"
    );
    // The client acks the response: the next data starts a request.
    h.cap(Seg {
        seq: 5_000_032,
        ack: 9_000_500,
        ..BASE
    });
    assert_eq!(h.control(), vec![RegEvent::Register(test_tuple())]);
    assert_eq!(live(&h), 1, "started: live on its test server");
    let out = h.packets();
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].flags, out[0].seq),
        (TcpFlags::SYN, 5_000_031),
        "synthetic ISN: first byte - 1"
    );
    h.cap(mid(32, 500, b"GET /next"));
    h.cap(Seg {
        seq: 5_000_041,
        ack: 9_000_600,
        ..BASE
    }); // more response acked: no new unit
    h.rec(Seg {
        ack: 5_000_032,
        ..SYN_ACK
    });
    let out = h.out();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].payload, b"GET /next");
    assert_eq!(out[0].seq, 5_000_032);
    assert_eq!(h.e.stats().sessions_midstream, 1);
}

#[test]
fn server_speaks_first_waits_for_the_greeting() {
    let mut h = H::default();
    h.establish();
    // The client got a 20-byte greeting online, then sends a command.
    h.cap(data(0, 20, b"EHLO x\r\n"));
    assert!(h.out().is_empty(), "held until the test server greets");
    h.at(5);
    h.rec(resp(0, 0, 30));
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].payload, b"EHLO x\r\n");
    assert_eq!(out[0].ack, TISN + 1 + 30);
}

#[test]
fn a_greeting_that_comes_before_the_first_command_is_captured_counts() {
    // The session starts at the client's handshake ACK; the test server greets before the
    // client's first command is captured (a busy capture, or a client slow to speak).
    let mut h = H::default();
    h.establish();
    h.at(5);
    h.rec(resp(0, 0, 20));
    assert!(
        h.out().iter().all(|o| o.payload.is_empty()),
        "nothing to send yet"
    );
    h.at(7);
    h.cap(data(0, 20, b"EHLO x\r\n")); // the online greeting was 20 bytes
    let out = h.out();
    let sent: Vec<&[u8]> = out
        .iter()
        .map(|o| &o.payload[..])
        .filter(|p| !p.is_empty())
        .collect();
    assert_eq!(
        sent,
        vec![b"EHLO x\r\n"],
        "the greeting came already: no wait for the answer timeout"
    );
    assert_eq!(
        out.iter().find(|o| !o.payload.is_empty()).unwrap().ack,
        TISN + 1 + 20
    );
    assert_eq!(h.e.stats().answer_timeouts, 0);
}

#[test]
fn greeting_wait_gives_up_after_the_answer_timeout() {
    let mut h = H::new(EngineConfig {
        pace_requests: false,
        answer_timeout: Duration::from_secs(1),
        ..cfg()
    });
    h.establish();
    h.cap(data(0, 20, b"EHLO x\r\n"));
    assert!(
        h.out().is_empty(),
        "the greeting gate holds even without pacing"
    );
    while h.fire(1500) {}
    let out = h.out();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].payload, b"EHLO x\r\n");
    assert_eq!(h.ms(), 1000);
    assert_eq!(h.e.stats().answer_timeouts, 1);
}

#[test]
fn syn_is_retransmitted_with_backoff_then_the_session_fails() {
    let mut h = H::new(EngineConfig {
        max_retries: 3,
        ..cfg()
    });
    h.syn(SYN);
    let _ = h.out();
    let (outs, ctl) = h.run_timers(60_000);
    let times: Vec<(u64, TcpFlags)> = outs.iter().map(|(t, o)| (*t, o.flags)).collect();
    assert_eq!(
        times,
        vec![
            (300, TcpFlags::SYN),
            (900, TcpFlags::SYN),
            (2100, TcpFlags::SYN),
            (4500, TcpFlags::RST),
            (9300, TcpFlags::RST)
        ],
        "backoff 300, 600, 1200, then RST, repeated once within the linger"
    );
    let s = h.e.stats();
    assert_eq!(s.retransmissions, 3);
    assert_eq!(s.sessions_failed.retransmit_limit, 1);
    assert_eq!(s.sessions_active, 0);
    assert_eq!(ctl, vec![RegEvent::Unregister(test_tuple())]);
    assert_eq!(h.e.session_count(), 0);
}

#[test]
fn refused_connection_fails_the_session() {
    let mut h = H::default();
    h.syn(SYN);
    let _ = h.out();
    h.rec(Seg {
        seq: 0,
        ack: CISN + 1,
        flags: TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0),
        ..BASE
    });
    assert_eq!(h.e.stats().sessions_failed.refused, 1);
    assert_eq!(h.control(), vec![RegEvent::Unregister(test_tuple())]);
    assert!(h.packets().is_empty(), "nothing to reset");
}

#[test]
fn stale_syn_ack_is_reset() {
    let mut h = H::default();
    h.syn(SYN);
    let _ = h.out();
    h.rec(Seg {
        ack: 12345,
        ..SYN_ACK
    });
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].flags, out[0].seq), (TcpFlags::RST, 12345));
    h.rec(SYN_ACK);
    assert_eq!(h.out().len(), 1, "the real SYN-ACK is acked");
}

#[test]
fn no_intercept_no_new_session() {
    let mut h = H::default();
    h.e.set_intercept_connected(h.now, false);
    h.syn(SYN);
    h.cap(HS_ACK);
    assert!(h.out().is_empty());
    let s = h.e.stats();
    assert_eq!(s.sessions_not_copied, 1);
    assert_eq!(s.drops.no_intercept, 2);
    assert_eq!(s.sessions_started, 0);
}

#[test]
fn client_addresses_are_rewritten_into_the_pool() {
    let pool: ClientIpPool = "198.19.0.0/16".parse().unwrap();
    let mut h = H::new(EngineConfig {
        client_ip: Some(pool.clone()),
        ..cfg()
    });
    h.syn(SYN);
    let ev = h.control();
    let RegEvent::Register(t) = ev[0] else {
        panic!("{ev:?}")
    };
    assert!(pool.contains(t.client.ip()), "{t}");
    assert_eq!(t.client.port(), 40000);
    let out = h.packets();
    assert_eq!(out[0].tuple, t);
    // Sticky: the same client on another port gets the same address.
    h.syn(Seg {
        src: Some("203.0.113.7:40001".parse().unwrap()),
        ..SYN
    });
    let ev = h.control();
    let RegEvent::Register(t2) = ev[0] else {
        panic!("{ev:?}")
    };
    assert_eq!(t2.client.ip(), t.client.ip());
}

#[test]
fn pool_parsing() {
    let p: ClientIpPool = "198.19.7.9/16".parse().unwrap();
    assert_eq!(p.to_string(), "198.19.0.0/16");
    assert!(p.contains("198.19.255.1".parse().unwrap()));
    assert!(!p.contains("198.20.0.1".parse().unwrap()));
    let q: ClientIpPool = "2001:db8::/64".parse().unwrap();
    assert!(q.serves(true) && !q.serves(false));
    let a = q.pick("203.0.113.1".parse().unwrap(), 1, 0, true).unwrap();
    assert!(q.contains(a));
    assert_ne!(a, "2001:db8::".parse::<std::net::IpAddr>().unwrap());
    assert!("198.19.0.0".parse::<ClientIpPool>().is_err());
    assert!("198.19.0.0/33".parse::<ClientIpPool>().is_err());
    assert!("x/8".parse::<ClientIpPool>().is_err());
}

#[test]
fn a_fin_before_any_data_waits_only_for_a_greeting() {
    let fa = TcpFlags(TcpFlags::FIN.0 | TcpFlags::ACK.0);
    // Connected and closed at once: nothing to wait for.
    let mut h = H::default();
    h.establish();
    h.cap(Seg {
        seq: CISN + 1,
        ack: OISN + 1,
        flags: fa,
        ..BASE
    });
    let out = h.out();
    assert_eq!((out.len(), out[0].flags, out[0].seq), (1, fa, CISN + 1));
    // Greeted online (20 bytes), then closed: the test server's greeting comes first.
    let mut h = H::default();
    h.establish();
    h.cap(Seg {
        seq: CISN + 1,
        ack: OISN + 21,
        flags: fa,
        ..BASE
    });
    assert!(h.out().is_empty());
    h.at(5);
    h.rec(resp(0, 0, 20));
    let _ = h.out();
    let out = h.fire_until_output(10_000);
    assert_eq!(
        (out.len(), out[0].flags, h.ms()),
        (1, fa, 55),
        "after the greeting and a quiet"
    );
}

#[test]
fn engines_of_several_workers_never_share_a_test_port_and_keep_the_pool_sticky() {
    use crate::engine::PortShare;
    let pool: ClientIpPool = "198.19.0.0/30".parse().unwrap();
    let mut regs = Vec::new();
    for index in 0..2u16 {
        let share = PortShare::new(index, 2);
        let mut h = H::new(EngineConfig {
            client_ip: Some(pool.clone()),
            port_share: share,
            ..cfg()
        });
        // The client's port 40000 is in share 0 of 2 ((40000 >> 1) % 2 == 0): worker 0 keeps
        // it, worker 1 must not.
        for port in [40000u16, 40001, 40002] {
            h.syn(Seg {
                src: Some(SocketAddr::new(client().ip(), port)),
                ..SYN
            });
        }
        let ev = h.control();
        assert_eq!(ev.len(), 3, "{ev:?}");
        for e in ev {
            let RegEvent::Register(t) = e else {
                panic!("{e:?}")
            };
            assert!(
                share.contains(t.client.port()),
                "worker {index}: {t} outside its share"
            );
            regs.push((index, t));
        }
        let kept = regs
            .iter()
            .filter(|(i, t)| *i == index && t.client.port() == 40000)
            .count();
        assert_eq!(kept, usize::from(index == 0), "{regs:?}");
    }
    // One pool address for the client whatever worker carries its connection.
    let ips: std::collections::BTreeSet<_> = regs.iter().map(|(_, t)| t.client.ip()).collect();
    assert_eq!(ips.len(), 1, "{regs:?}");
    let tuples: std::collections::BTreeSet<_> = regs.iter().map(|(_, t)| *t).collect();
    assert_eq!(
        tuples.len(),
        regs.len(),
        "two workers picked one test tuple: {regs:?}"
    );
}
