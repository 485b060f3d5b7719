//! Ending sessions: FIN both ways, RST both ways, the test server closing with requests queued,
//! and the lingering that leaves the test server with no half-open connection.

use super::*;

const FA: TcpFlags = TcpFlags(TcpFlags::FIN.0 | TcpFlags::ACK.0);
const RA: TcpFlags = TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0);

/// Session with one answered request ("req", 10 response bytes), 100 ms ago: the test server
/// has been quiet since.
fn answered() -> H {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req"));
    let _ = h.out();
    h.rec(resp(0, 3, 10));
    let out = h.out();
    assert_eq!((out.len(), out[0].ack), (1, TISN + 11));
    h.at(100);
    h
}

#[test]
fn client_fin_then_server_fin() {
    let mut h = answered();
    h.cap(Seg {
        seq: CISN + 4,
        ack: OISN + 11,
        flags: FA,
        ..BASE
    });
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].flags, out[0].seq, out[0].ack),
        (FA, CISN + 4, TISN + 11)
    );
    // The test server acks our FIN and closes too.
    h.rec(Seg {
        seq: TISN + 11,
        ack: CISN + 5,
        flags: FA,
        ..BASE
    });
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].flags, out[0].seq, out[0].ack),
        (A, CISN + 5, TISN + 12)
    );
    assert_eq!(h.e.stats().sessions_completed, 1);
    assert_eq!(h.e.stats().sessions_active, 0);
    // Its FIN again (our last ACK was lost): acked again while lingering.
    h.at(1000);
    h.rec(Seg {
        seq: TISN + 11,
        ack: CISN + 5,
        flags: FA,
        ..BASE
    });
    let out = h.out();
    assert_eq!((out.len(), out[0].ack), (1, TISN + 12));
    assert!(h.control().is_empty(), "still registered while lingering");
    let (outs, ctl) = h.run_timers(60_000);
    assert!(outs.is_empty());
    assert_eq!(
        h.ms(),
        11_000,
        "unregistered after the linger, restarted (and doubled) by the FIN at 1 s"
    );
    assert_eq!(ctl, vec![RegEvent::Unregister(test_tuple())]);
    assert_eq!(h.e.session_count(), 0);
}

#[test]
fn server_fin_then_client_fin() {
    let mut h = answered();
    passive_close(&mut h);
}

/// On [`answered`]: the test server's FIN, then the client's, ours acknowledged. A passive
/// close: our FIN carried the ACK of theirs and is acknowledged, so the test server holds the
/// TIME_WAIT and has nothing left that needs an answer. No linger: the tuple is unregistered
/// and the session gone at once.
fn passive_close(h: &mut H) {
    h.rec(Seg {
        seq: TISN + 11,
        ack: CISN + 4,
        flags: FA,
        ..BASE
    });
    let out = h.out();
    assert_eq!((out.len(), out[0].flags, out[0].ack), (1, A, TISN + 12));
    assert_eq!(
        h.e.stats().connections_opened,
        1,
        "nothing left to carry: no new connection"
    );
    h.cap(Seg {
        seq: CISN + 4,
        ack: OISN + 11,
        flags: FA,
        ..BASE
    });
    let out = h.out();
    assert_eq!(
        (out.len(), out[0].flags, out[0].seq, out[0].ack),
        (1, FA, CISN + 4, TISN + 12)
    );
    h.rec(Seg {
        seq: TISN + 12,
        ack: CISN + 5,
        flags: A,
        ..BASE
    });
    assert!(h.packets().is_empty());
    assert_eq!(h.e.stats().sessions_completed, 1);
    assert_eq!(h.control(), vec![RegEvent::Unregister(test_tuple())]);
    assert_eq!(h.e.session_count(), 0);
}

#[test]
fn a_client_segment_after_its_session_ended_starts_nothing() {
    // The copy ends at once by a passive close. The client's ACK of the online server's FIN
    // comes after that (the client closed first online): it belongs to the session that
    // ended, not to a connection caught mid-stream, so it starts no session (one waiting to
    // synchronise would count as live on its test server until it timed out).
    let mut h = answered();
    passive_close(&mut h);
    h.at(50);
    h.cap(Seg {
        seq: CISN + 5,
        ack: OISN + 12,
        flags: A,
        ..BASE
    });
    assert!(h.packets().is_empty());
    assert_eq!(
        h.e.session_count(),
        0,
        "no session for a closed connection's segment"
    );
    assert_eq!(h.e.stats().drops.after_close, 1);
    // A new connection on the same client port is a new session.
    h.at(100);
    h.establish();
    assert_eq!(h.e.session_count(), 1);
}

#[test]
fn server_fin_while_our_fin_is_out_still_lingers() {
    // Our FIN leaves first and the test server's crosses it: the last ACK is ours (theirs
    // acknowledged by a bare ACK that can be lost), so the connection lingers as after an
    // active close.
    let mut h = answered();
    h.cap(Seg {
        seq: CISN + 4,
        ack: OISN + 11,
        flags: FA,
        ..BASE
    });
    let out = h.out();
    assert_eq!((out.len(), out[0].flags), (1, FA));
    h.rec(Seg {
        seq: TISN + 11,
        ack: CISN + 4,
        flags: FA,
        ..BASE
    });
    let out = h.out();
    assert_eq!((out.len(), out[0].flags, out[0].ack), (1, A, TISN + 12));
    h.rec(Seg {
        seq: TISN + 12,
        ack: CISN + 5,
        flags: A,
        ..BASE
    });
    assert_eq!(h.e.stats().sessions_completed, 1);
    assert!(h.control().is_empty(), "still registered while lingering");
    let (_, ctl) = h.run_timers(60_000);
    assert_eq!(ctl, vec![RegEvent::Unregister(test_tuple())]);
    assert_eq!(h.e.session_count(), 0);
}

#[test]
fn our_fin_is_retransmitted() {
    let mut h = answered();
    h.cap(Seg {
        seq: CISN + 4,
        ack: OISN + 11,
        flags: FA,
        ..BASE
    });
    let _ = h.out();
    let out = h.fire_until_output(10_000);
    assert_eq!((out.len(), out[0].flags, out[0].seq), (1, FA, CISN + 4));
    assert_eq!(h.e.stats().retransmissions, 1);
}

#[test]
fn client_fin_waits_for_the_answer_with_pacing() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req"));
    h.cap(Seg {
        seq: CISN + 4,
        ack: OISN + 1,
        flags: FA,
        ..BASE
    }); // half-close right away
    let out = h.out();
    assert_eq!(out.len(), 1, "{out:?}");
    h.rec(resp(0, 3, 0));
    assert!(h.out().is_empty(), "acked but not answered: the FIN waits");
    h.at(10);
    h.rec(resp(0, 3, 10));
    assert_eq!(h.out().len(), 1, "the answer is acked, the FIN still waits");
    // The last request's answer may be longer than online: the FIN goes once the test server
    // has been quiet for answer_quiet (50 ms).
    let out = h.fire_until_output(10_000);
    assert_eq!((out.len(), out[0].flags, out[0].seq), (1, FA, CISN + 4));
    assert_eq!(h.ms(), 60);
}

#[test]
fn client_rst_with_nothing_left_is_carried_at_once() {
    let mut h = answered();
    h.cap(Seg {
        seq: CISN + 4,
        flags: TcpFlags::RST,
        ..BASE
    });
    let out = h.out();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        (out[0].flags, out[0].seq, out[0].ack),
        (RA, CISN + 4, TISN + 11)
    );
    assert_eq!(h.e.stats().sessions_completed, 1);
    // The RST goes again 4 times, after 1, 2, 4, 8 RTOs (200 ms here), in case it was lost.
    let (outs, ctl) = h.run_timers(60_000);
    let v: Vec<(u64, TcpFlags, u32)> = outs.iter().map(|(t, o)| (*t, o.flags, o.seq)).collect();
    assert_eq!(
        v,
        vec![
            (300, RA, CISN + 4),
            (700, RA, CISN + 4),
            (1500, RA, CISN + 4),
            (3100, RA, CISN + 4)
        ]
    );
    assert_eq!(ctl, vec![RegEvent::Unregister(test_tuple())]);
    assert_eq!(h.e.session_count(), 0);
}

#[test]
fn a_reset_with_data_in_flight_follows_challenge_acks() {
    let mut h = H::new(EngineConfig {
        session_timeout: Duration::from_secs(1),
        ..cfg()
    });
    h.establish();
    h.cap(data(0, 0, b"req"));
    let _ = h.out();
    // "req" is never acked; the session times out and resets the connection.
    let mut rst = Vec::new();
    while rst.is_empty() {
        let out = h.fire_until_output(10_000);
        assert!(!out.is_empty());
        rst = out.into_iter().filter(|o| o.has(TcpFlags::RST)).collect();
    }
    let t = h.ms();
    assert_eq!(t, 1000);
    let v: Vec<(TcpFlags, u32)> = rst.iter().map(|o| (o.flags, o.seq)).collect();
    assert_eq!(
        v,
        vec![(RA, CISN + 4), (RA, CISN + 1)],
        "after all we sent, and after all it acked"
    );
    assert_eq!(h.e.stats().sessions_failed.timeout, 1);
    // Suppose it got only part of "req": it answers the RSTs with a challenge ACK, which tells
    // the exact sequence number to reset with.
    h.rec(Seg {
        seq: TISN + 1,
        ack: CISN + 3,
        flags: A,
        ..BASE
    });
    let out = h.out();
    assert_eq!((out.len(), out[0].flags, out[0].seq), (1, RA, CISN + 3));
    // In case that RST is lost too, it goes again with backoff (the RTO had backed off
    // already: the linger of 5 s leaves room for two).
    let (outs, ctl) = h.run_timers(60_000);
    let v: Vec<(u64, TcpFlags, u32)> = outs.iter().map(|(t, o)| (*t, o.flags, o.seq)).collect();
    assert_eq!(
        v,
        vec![(t + 800, RA, CISN + 3), (t + 2400, RA, CISN + 3)],
        "RTO 800 ms after two retransmissions"
    );
    assert_eq!(ctl, vec![RegEvent::Unregister(test_tuple())]);
    assert_eq!(h.e.session_count(), 0);
}

#[test]
fn packets_after_the_end_are_counted() {
    let mut h = H::default();
    h.establish();
    h.cap(Seg {
        seq: CISN + 1,
        flags: TcpFlags::RST,
        ..BASE
    });
    let _ = h.out();
    h.cap(data(0, 0, b"late"));
    assert!(h.out().is_empty());
    assert_eq!(h.e.stats().drops.after_close, 1);
}

#[test]
fn server_rst_without_pending_requests_just_ends_that_connection() {
    let mut h = answered();
    h.rec(Seg {
        seq: TISN + 11,
        ack: CISN + 4,
        flags: RA,
        ..BASE
    });
    assert!(h.packets().is_empty(), "no RST back to a RST");
    assert_eq!(h.control(), vec![RegEvent::Unregister(test_tuple())]);
    // The client's next request goes on a new connection.
    h.cap(data(3, 10, b"req2"));
    let ev = h.control();
    assert_eq!(ev.len(), 1);
    let RegEvent::Register(t2) = ev[0] else {
        panic!("{ev:?}")
    };
    assert_ne!(t2, test_tuple());
    let out = h.packets();
    assert_eq!(
        (out.len(), out[0].flags, out[0].seq, out[0].tuple),
        (1, TcpFlags::SYN, CISN + 3, t2)
    );
}

#[test]
fn test_server_closing_with_queued_requests_moves_them_to_a_new_connection() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    h.cap(data(4, 100, b"req2"));
    h.cap(data(8, 200, b"req3"));
    let _ = h.out();
    h.rec(resp(0, 4, 100));
    let out = h.out();
    assert_eq!(out[0].payload, b"req2");
    // It took req2 but closes without answering it (keep-alive limit reached).
    h.rec(Seg {
        seq: TISN + 101,
        ack: CISN + 9,
        flags: FA,
        ..BASE
    });
    let ev = h.control();
    assert_eq!(ev.len(), 1, "{ev:?}");
    let RegEvent::Register(t2) = ev[0] else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (t2.client.ip(), t2.server.socket()),
        (client().ip(), target())
    );
    assert_ne!(t2.client.port(), client().port());
    let out = h.packets();
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(
        (out[0].tuple, out[0].flags, out[0].seq),
        (test_tuple(), RA, CISN + 9),
        "old one reset"
    );
    assert_eq!(
        (out[1].tuple, out[1].flags, out[1].seq),
        (t2, TcpFlags::SYN, CISN + 4),
        "req2 again"
    );
    h.rec_to(
        t2,
        Seg {
            seq: 90_000,
            ack: CISN + 5,
            ..SYN_ACK
        },
    );
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].tuple, out[0].seq, out[0].ack, &out[0].payload[..]),
        (t2, CISN + 5, 90_001, &b"req2"[..])
    );
    h.rec_to(
        t2,
        Seg {
            seq: 90_001,
            ack: CISN + 9,
            data_len: 100,
            ..BASE
        },
    );
    let out = h.out();
    assert_eq!(out[0].payload, b"req3");
    let s = h.e.stats();
    assert_eq!((s.reconnects, s.connections_opened), (1, 2));
    // The old connection is unregistered once its linger is over.
    let (_, ctl) = h.run_timers(6_000);
    assert_eq!(ctl, vec![RegEvent::Unregister(test_tuple())]);
}

#[test]
fn test_server_reset_with_a_request_in_flight_replays_it() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    let _ = h.out();
    h.rec(Seg {
        seq: TISN + 1,
        ack: CISN + 5,
        flags: RA,
        ..BASE
    });
    let ev = h.control();
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(ev[0], RegEvent::Unregister(test_tuple()));
    let RegEvent::Register(t2) = ev[1] else {
        panic!("{ev:?}")
    };
    let out = h.packets();
    assert_eq!(
        (out.len(), out[0].tuple, out[0].flags, out[0].seq),
        (1, t2, TcpFlags::SYN, CISN)
    );
}

#[test]
fn a_server_that_keeps_closing_fails_the_session() {
    let mut h = H::new(EngineConfig {
        max_reconnects: 2,
        ..cfg()
    });
    h.establish();
    h.cap(data(0, 0, b"req1"));
    let mut tuple = test_tuple();
    let mut iss = CISN;
    for _ in 0..3 {
        let _ = h.out();
        h.rec_to(
            tuple,
            Seg {
                seq: 1,
                ack: iss + 1,
                flags: RA,
                ..BASE
            },
        );
        if let Some(RegEvent::Register(t)) = h
            .control()
            .into_iter()
            .find(|e| matches!(e, RegEvent::Register(_)))
        {
            tuple = t;
            let _ = h.packets();
            h.rec_to(
                tuple,
                Seg {
                    ack: CISN + 1,
                    ..SYN_ACK
                },
            );
            iss = CISN;
        }
    }
    assert_eq!(h.e.stats().sessions_failed.reconnect_limit, 1);
}

/// req1 (online answer 100), req2 (online 50), req3 captured; then the client's RST right after
/// req3, before its answer: a load generator ending its connection.
fn reset_with_requests_queued(c: EngineConfig) -> H {
    let mut h = H::new(c);
    h.establish();
    h.cap(data(0, 0, b"req1"));
    h.cap(data(4, 100, b"req2"));
    h.cap(data(8, 150, b"req3"));
    h.cap(Seg {
        seq: CISN + 13,
        flags: TcpFlags::RST,
        ..BASE
    });
    h
}

#[test]
fn client_rst_after_queued_requests_carries_them_then_resets() {
    let mut h = reset_with_requests_queued(cfg());
    let out = h.out();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        out[0].payload, b"req1",
        "no RST yet: req2 and req3 are still to be carried"
    );
    // Packets of the client after its RST count for nothing.
    h.cap(data(12, 150, b"late"));
    assert_eq!(h.e.stats().drops.after_close, 1);
    h.at(10);
    h.rec(resp(0, 4, 100));
    assert_eq!(h.out()[0].payload, b"req2");
    h.at(20);
    h.rec(resp(100, 8, 50));
    assert_eq!(h.out()[0].payload, b"req3");
    h.at(30);
    h.rec(resp(150, 12, 20));
    let out = h.out();
    assert!(
        out.iter().all(|o| !o.has(TcpFlags::RST)),
        "the last answer may go on: wait for quiet"
    );
    let out = h.fire_until_output(10_000);
    assert_eq!(h.ms(), 80);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        (out[0].flags, out[0].seq, out[0].ack),
        (RA, CISN + 13, TISN + 171)
    );
    let s = h.e.stats();
    assert_eq!(
        (
            s.sessions_completed,
            s.sessions_failed.total(),
            s.sessions_active
        ),
        (1, 0, 0)
    );
}

#[test]
fn client_rst_waits_at_most_the_answer_timeout_for_the_last_answer() {
    let mut h = reset_with_requests_queued(EngineConfig {
        answer_timeout: Duration::from_millis(400),
        ..cfg()
    });
    let _ = h.out();
    h.rec(resp(0, 4, 100));
    let _ = h.out();
    h.rec(resp(100, 8, 50));
    let _ = h.out();
    h.at(100);
    h.rec(resp(150, 12, 0)); // req3 acked, never answered
    let out = h.fire_until_output(10_000);
    assert_eq!((out.len(), out[0].flags, out[0].seq), (1, RA, CISN + 13));
    assert_eq!(h.ms(), 500);
    let s = h.e.stats();
    assert_eq!((s.sessions_completed, s.answer_timeouts), (1, 1));
}

#[test]
fn client_rst_with_data_that_cannot_be_carried_fails_after_the_session_timeout() {
    // The test server keeps streaming an endless answer to req1 (so the session is never
    // idle) and never lets req2 through in time.
    let c = EngineConfig {
        session_timeout: Duration::from_secs(2),
        answer_timeout: Duration::from_secs(60),
        ..cfg()
    };
    let mut h = reset_with_requests_queued(c);
    let _ = h.out();
    let mut off = 0;
    for t in (0..3000).step_by(20) {
        h.at(t);
        h.rec(Seg {
            window: 0,
            ..resp(off, 0, 10)
        }); // acks nothing of req1
        off += 10;
        while h.fire(t) {}
        let _ = h.out();
    }
    let s = h.e.stats();
    assert_eq!(
        (s.sessions_failed.timeout, s.sessions_completed),
        (1, 0),
        "failed 2 s after the client's RST"
    );
}

#[test]
fn a_new_connection_on_the_port_of_a_reset_one_leaves_it_carrying() {
    let mut h = reset_with_requests_queued(cfg());
    let _ = h.out();
    h.syn(Seg {
        seq: CISN + 777_777,
        ..SYN
    });
    let ev = h.control();
    let RegEvent::Register(t2) = ev[0] else {
        panic!("{ev:?}")
    };
    assert_ne!(
        t2,
        test_tuple(),
        "the old session still holds the client's port"
    );
    assert_eq!(h.e.stats().sessions_failed.total(), 0, "not superseded");
    let out = h.packets();
    assert_eq!(
        (out.len(), out[0].tuple, out[0].seq),
        (1, t2, CISN + 777_777)
    );
    // The old one goes on: req2 after req1's answer.
    h.rec(resp(0, 4, 100));
    let out = h.out();
    assert_eq!(
        (out[0].tuple, &out[0].payload[..]),
        (test_tuple(), &b"req2"[..])
    );
}
