//! Ending sessions: FIN both ways, RST both ways, the test server closing with requests queued,
//! and the lingering that leaves the test server with no half-open connection.

use super::*;

const FA: TcpFlags = TcpFlags(TcpFlags::FIN.0 | TcpFlags::ACK.0);
const RA: TcpFlags = TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0);

/// Session with one answered request ("req", 10 response bytes).
fn answered() -> H {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req"));
    let _ = h.out();
    h.rec(resp(0, 3, 10));
    let out = h.out();
    assert_eq!((out.len(), out[0].ack), (1, TISN + 11));
    h
}


#[test]
fn client_fin_then_server_fin() {
    let mut h = answered();
    h.cap(Seg { seq: CISN + 4, ack: OISN + 11, flags: FA, ..BASE });
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].flags, out[0].seq, out[0].ack), (FA, CISN + 4, TISN + 11));
    // The test server acks our FIN and closes too.
    h.rec(Seg { seq: TISN + 11, ack: CISN + 5, flags: FA, ..BASE });
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].flags, out[0].seq, out[0].ack), (A, CISN + 5, TISN + 12));
    assert_eq!(h.e.stats().sessions_completed, 1);
    assert_eq!(h.e.stats().sessions_active, 0);
    // Its FIN again (our last ACK was lost): acked again while lingering.
    h.at(1000);
    h.rec(Seg { seq: TISN + 11, ack: CISN + 5, flags: FA, ..BASE });
    let out = h.out();
    assert_eq!((out.len(), out[0].ack), (1, TISN + 12));
    assert!(h.control().is_empty(), "still registered while lingering");
    let (outs, ctl) = h.run_timers(60_000);
    assert!(outs.is_empty());
    assert_eq!(h.ms(), 11_000, "unregistered after the linger, restarted (and doubled) by the FIN");
    assert_eq!(ctl, vec![ControlEvent::Unregister(test_tuple())]);
    assert_eq!(h.e.session_count(), 0);
}

#[test]
fn server_fin_then_client_fin() {
    let mut h = answered();
    h.rec(Seg { seq: TISN + 11, ack: CISN + 4, flags: FA, ..BASE });
    let out = h.out();
    assert_eq!((out.len(), out[0].flags, out[0].ack), (1, A, TISN + 12));
    assert_eq!(h.e.stats().connections_opened, 1, "nothing left to carry: no new connection");
    h.cap(Seg { seq: CISN + 4, ack: OISN + 11, flags: FA, ..BASE });
    let out = h.out();
    assert_eq!((out.len(), out[0].flags, out[0].seq, out[0].ack), (1, FA, CISN + 4, TISN + 12));
    h.rec(Seg { seq: TISN + 12, ack: CISN + 5, flags: A, ..BASE });
    assert!(h.out().is_empty());
    assert_eq!(h.e.stats().sessions_completed, 1);
}

#[test]
fn our_fin_is_retransmitted() {
    let mut h = answered();
    h.cap(Seg { seq: CISN + 4, ack: OISN + 11, flags: FA, ..BASE });
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
    h.cap(Seg { seq: CISN + 4, ack: OISN + 1, flags: FA, ..BASE }); // half-close right away
    let out = h.out();
    assert_eq!(out.len(), 1, "{out:?}");
    h.rec(resp(0, 3, 0));
    assert!(h.out().is_empty(), "acked but not answered: the FIN waits");
    h.rec(resp(0, 3, 10));
    let out = h.out();
    assert_eq!((out.len(), out[0].flags, out[0].seq), (1, FA, CISN + 4));
}

#[test]
fn client_rst_is_carried_at_once() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req"));
    let _ = h.out();
    h.cap(Seg { seq: CISN + 4, flags: TcpFlags::RST, ..BASE });
    let out = h.out();
    assert_eq!(out.len(), 2);
    assert_eq!((out[0].flags, out[0].seq), (RA, CISN + 4), "after all we sent");
    assert_eq!((out[1].flags, out[1].seq), (RA, CISN + 1), "after all it acked");
    assert_eq!(h.e.stats().sessions_completed, 1);
    // Suppose it got only part of "req": it answers the RSTs with a challenge ACK, which tells
    // the exact sequence number to reset with.
    h.rec(Seg { seq: TISN + 1, ack: CISN + 3, flags: A, ..BASE });
    let out = h.out();
    assert_eq!((out.len(), out[0].flags, out[0].seq), (1, RA, CISN + 3));
    // In case that RST is lost too, it goes again 4 times, after 1, 2, 4, 8 RTOs (200 ms here).
    let (outs, ctl) = h.run_timers(60_000);
    let v: Vec<(u64, TcpFlags, u32)> = outs.iter().map(|(t, o)| (*t, o.flags, o.seq)).collect();
    assert_eq!(v, vec![(200, RA, CISN + 3), (600, RA, CISN + 3), (1400, RA, CISN + 3), (3000, RA, CISN + 3)]);
    assert_eq!(ctl, vec![ControlEvent::Unregister(test_tuple())]);
    // Late packets of the client after the end create nothing.
    assert_eq!(h.e.session_count(), 0);
}

#[test]
fn packets_after_the_end_are_counted() {
    let mut h = H::default();
    h.establish();
    h.cap(Seg { seq: CISN + 1, flags: TcpFlags::RST, ..BASE });
    let _ = h.out();
    h.cap(data(0, 0, b"late"));
    assert!(h.out().is_empty());
    assert_eq!(h.e.stats().drops.after_close, 1);
}

#[test]
fn server_rst_without_pending_requests_just_ends_that_connection() {
    let mut h = answered();
    h.rec(Seg { seq: TISN + 11, ack: CISN + 4, flags: RA, ..BASE });
    assert!(h.packets().is_empty(), "no RST back to a RST");
    assert_eq!(h.control(), vec![ControlEvent::Unregister(test_tuple())]);
    // The client's next request goes on a new connection.
    h.cap(data(3, 10, b"req2"));
    let ev = h.control();
    assert_eq!(ev.len(), 1);
    let ControlEvent::Register(t2) = ev[0] else { panic!("{ev:?}") };
    assert_ne!(t2, test_tuple());
    let out = h.packets();
    assert_eq!((out.len(), out[0].flags, out[0].seq, out[0].tuple), (1, TcpFlags::SYN, CISN + 3, t2));
}

#[test]
fn test_server_closing_with_queued_requests_moves_them_to_a_new_connection() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    h.cap(data(4, 100, b"req2"));
    h.cap(data(8, 200, b"req3"));
    let _ = h.out();
    h.rec(resp(0, 4, 10));
    let out = h.out();
    assert_eq!(out[0].payload, b"req2");
    // It took req2 but closes without answering it (keep-alive limit reached).
    h.rec(Seg { seq: TISN + 11, ack: CISN + 9, flags: FA, ..BASE });
    let ev = h.control();
    assert_eq!(ev.len(), 1, "{ev:?}");
    let ControlEvent::Register(t2) = ev[0] else { panic!("{ev:?}") };
    assert_eq!((t2.client.ip(), t2.server), (client().ip(), target()));
    assert_ne!(t2.client.port(), client().port());
    let out = h.packets();
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!((out[0].tuple, out[0].flags, out[0].seq), (test_tuple(), RA, CISN + 9), "old one reset");
    assert_eq!((out[1].tuple, out[1].flags, out[1].seq), (t2, TcpFlags::SYN, CISN + 4), "req2 again");
    h.rec_to(t2, Seg { seq: 90_000, ack: CISN + 5, ..SYN_ACK });
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].tuple, out[0].seq, out[0].ack, &out[0].payload[..]), (t2, CISN + 5, 90_001, &b"req2"[..]));
    h.rec_to(t2, Seg { seq: 90_001, ack: CISN + 9, data_len: 5, ..BASE });
    let out = h.out();
    assert_eq!(out[0].payload, b"req3");
    let s = h.e.stats();
    assert_eq!((s.reconnects, s.connections_opened), (1, 2));
    // The old connection is unregistered once its linger is over.
    let (_, ctl) = h.run_timers(6_000);
    assert_eq!(ctl, vec![ControlEvent::Unregister(test_tuple())]);
}

#[test]
fn test_server_reset_with_a_request_in_flight_replays_it() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    let _ = h.out();
    h.rec(Seg { seq: TISN + 1, ack: CISN + 5, flags: RA, ..BASE });
    let ev = h.control();
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(ev[0], ControlEvent::Unregister(test_tuple()));
    let ControlEvent::Register(t2) = ev[1] else { panic!("{ev:?}") };
    let out = h.packets();
    assert_eq!((out.len(), out[0].tuple, out[0].flags, out[0].seq), (1, t2, TcpFlags::SYN, CISN));
}

#[test]
fn a_server_that_keeps_closing_fails_the_session() {
    let mut h = H::new(EngineConfig { max_reconnects: 2, ..cfg() });
    h.establish();
    h.cap(data(0, 0, b"req1"));
    let mut tuple = test_tuple();
    let mut iss = CISN;
    for _ in 0..3 {
        let _ = h.out();
        h.rec_to(tuple, Seg { seq: 1, ack: iss + 1, flags: RA, ..BASE });
        if let Some(ControlEvent::Register(t)) = h.control().into_iter().find(|e| matches!(e, ControlEvent::Register(_))) {
            tuple = t;
            let _ = h.packets();
            h.rec_to(tuple, Seg { ack: CISN + 1, ..SYN_ACK });
            iss = CISN;
        }
    }
    assert_eq!(h.e.stats().sessions_failed.reconnect_limit, 1);
}
