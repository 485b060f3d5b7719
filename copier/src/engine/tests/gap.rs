//! Robustness against the capture and the test host's leftovers: a hole in the captured
//! stream that the client never fills (the capture lost it, the online server did not), and a
//! SYN that meets a TIME_WAIT socket of the test server.

use super::*;

/// The tuple of the connection registered after the first one.
fn new_tuple(ctl: &[RegEvent]) -> FourTuple {
    ctl.iter()
        .find_map(|c| match c {
            RegEvent::Register(t) if *t != test_tuple() => Some(*t),
            _ => None,
        })
        .expect("a new connection is registered")
}

fn contains(outs: &[Out], needle: &[u8]) -> bool {
    outs.iter()
        .any(|o| o.payload.windows(needle.len()).any(|w| w == needle))
}

#[test]
fn hole_at_a_request_start_resyncs_at_the_next_request_on_a_new_connection() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    assert_eq!(h.out()[0].payload, b"req1");
    h.at(5);
    h.rec(resp(0, 4, 50)); // acked and answered (as long as online: 50 bytes)
    let _ = h.out();
    // req2 = "AAAABBBB" at offset 4: the capture lost its first segment.
    h.at(10);
    h.cap(data(8, 50, b"BBBB"));
    h.at(11);
    h.cap(data(12, 120, b"req3")); // online answered req2 (70 bytes): req3 starts here
    h.at(12);
    h.cap(data(16, 200, b"req4"));
    assert!(
        h.out().is_empty(),
        "nothing past the hole goes on the old connection"
    );
    let (outs, ctl) = h.run_timers(209);
    assert!(
        outs.is_empty() && ctl.is_empty(),
        "the hole waits GAP_WAIT: {outs:?}"
    );
    let (outs, ctl) = h.run_timers(400);
    let at: Vec<(u64, TcpFlags, FourTuple, u32)> = outs
        .iter()
        .map(|(t, o)| (*t, o.flags, o.tuple, o.seq))
        .collect();
    let nt = new_tuple(&ctl);
    assert_ne!(nt.client.port(), test_tuple().client.port());
    assert!(
        at.contains(&(210, TcpFlags::RST | TcpFlags::ACK, test_tuple(), CISN + 5)),
        "{at:?}"
    );
    assert!(
        at.contains(&(210, TcpFlags::SYN, nt, CISN + 12)),
        "new connection from req3: {at:?}"
    );
    assert_eq!(h.e.stats().drops.capture_gap, 1);
    assert_eq!(h.e.stats().drops.out_of_order_overflow, 0);
    // The new connection carries req3, then (paced by the online answer size) req4.
    h.at(220);
    h.rec_to(
        nt,
        Seg {
            ack: CISN + 13,
            ..SYN_ACK
        },
    );
    let mut sent = h.out();
    assert!(sent.iter().all(|o| o.tuple == nt));
    assert_eq!(stream_of(&sent, CISN + 13), b"req3");
    h.at(230);
    h.rec_to(nt, resp(0, 16, 80));
    sent.extend(h.out());
    assert_eq!(stream_of(&sent, CISN + 13), b"req3req4");
    let all: Vec<Out> = outs.into_iter().map(|(_, o)| o).chain(sent).collect();
    assert!(
        !contains(&all, b"BBBB"),
        "the damaged request is never sent"
    );
    h.rec_to(nt, resp(80, 20, 80));
    let _ = h.out();
    h.cap(Seg {
        flags: TcpFlags::FIN | A,
        ..data(20, 280, b"")
    });
    let mut out = h.out();
    out.extend(h.run_timers(1000).0.into_iter().map(|(_, o)| o));
    assert!(
        out.iter()
            .any(|o| o.tuple == nt && o.has(TcpFlags::FIN) && o.seq == CISN + 21),
        "{out:?}"
    );
}

#[test]
fn hole_inside_a_request_drops_the_rest_of_it_and_resets_its_prefix() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    h.at(5);
    h.rec(resp(0, 4, 50));
    let _ = h.out();
    h.at(60); // req1 answered (quiet)
              // req2 = "AAAABBBBCCCC" at offset 4: "BBBB" lost. "AAAA" goes out before the hole shows.
    h.cap(data(4, 50, b"AAAA"));
    assert_eq!(h.out()[0].payload, b"AAAA");
    h.at(61);
    h.rec(resp(50, 8, 0)); // acked, no answer: the test server waits for the rest
    let _ = h.out();
    h.at(62);
    h.cap(data(12, 50, b"CCCC"));
    h.cap(data(16, 90, b"req3"));
    assert!(h.out().is_empty());
    // Inside the unit (same ACK after the hole): no answer is awaited after GAP_WAIT.
    let (outs, ctl) = h.run_timers(300);
    let nt = new_tuple(&ctl);
    let at: Vec<(u64, TcpFlags, FourTuple, u32)> = outs
        .iter()
        .map(|(t, o)| (*t, o.flags, o.tuple, o.seq))
        .collect();
    assert!(
        at.contains(&(262, TcpFlags::RST | TcpFlags::ACK, test_tuple(), CISN + 9)),
        "{at:?}"
    );
    assert!(at.contains(&(262, TcpFlags::SYN, nt, CISN + 16)), "{at:?}");
    h.rec_to(
        nt,
        Seg {
            ack: CISN + 17,
            ..SYN_ACK
        },
    );
    let sent = h.out();
    assert_eq!(stream_of(&sent, CISN + 17), b"req3");
    assert!(!contains(&sent, b"CCCC") && !outs.iter().any(|(_, o)| o.payload == b"CCCC"));
    assert_eq!(h.e.stats().drops.capture_gap, 1);
}

#[test]
fn a_hole_filled_in_time_is_no_gap() {
    let mut h = H::default();
    h.establish();
    h.cap(data(4, 0, b"2222"));
    h.at(100);
    h.cap(data(0, 0, b"1111")); // reordered, not lost
    let out = h.out();
    assert_eq!(stream_of(&out, CISN + 1), b"11112222");
    let (outs, _) = h.run_timers(1000);
    assert!(
        outs.iter()
            .all(|(_, o)| o.tuple == test_tuple() && !o.has(TcpFlags::RST)),
        "{outs:?}"
    );
    assert_eq!(h.e.stats().drops.capture_gap, 0);
}

#[test]
fn bare_ack_to_our_syn_is_reset_and_the_syn_resent_then_the_port_moves() {
    let mut h = H::default();
    h.syn(SYN);
    let out = h.out();
    assert_eq!((out.len(), out[0].flags), (1, TcpFlags::SYN));
    // A TIME_WAIT socket of the test server on the tuple: a challenge ACK.
    h.at(1);
    h.rec(Seg {
        seq: 9_999,
        ack: 5_555,
        ..BASE
    });
    let out = h.out();
    let got: Vec<(TcpFlags, u32, FourTuple)> =
        out.iter().map(|o| (o.flags, o.seq, o.tuple)).collect();
    assert_eq!(
        got,
        vec![
            (TcpFlags::RST, 5_555, test_tuple()),
            (TcpFlags::SYN, CISN, test_tuple())
        ]
    );
    assert_eq!(h.e.stats().syn_time_wait_resets, 1);
    // Again: the connection moves to another port (the old tuple's RST still goes).
    h.at(2);
    h.rec(Seg {
        seq: 9_999,
        ack: 5_556,
        ..BASE
    });
    let ctl = h.control();
    let nt = new_tuple(&ctl);
    assert_eq!(nt.server, test_tuple().server);
    let out = h.packets();
    let got: Vec<(TcpFlags, u32, FourTuple)> =
        out.iter().map(|o| (o.flags, o.seq, o.tuple)).collect();
    assert_eq!(
        got,
        vec![
            (TcpFlags::RST, 5_556, test_tuple()),
            (TcpFlags::SYN, CISN, nt)
        ]
    );
    assert_eq!(h.e.stats().syn_port_moves, 1);
    // The new connection carries the session.
    h.cap(HS_ACK);
    h.cap(data(0, 0, b"req1"));
    h.rec_to(nt, SYN_ACK);
    let out = h.out();
    assert!(out.iter().all(|o| o.tuple == nt));
    assert_eq!(stream_of(&out, CISN + 1), b"req1");
    // The old tuple lingers, then goes.
    let (_, ctl) = h.run_timers(60_000);
    assert!(
        ctl.iter()
            .any(|c| matches!(c, RegEvent::Unregister(t) if *t == test_tuple())),
        "{ctl:?}"
    );
}

#[test]
fn an_ack_of_our_syn_without_syn_is_not_a_time_wait() {
    let mut h = H::default();
    h.syn(SYN);
    let _ = h.out();
    h.rec(Seg {
        seq: 9_999,
        ack: CISN + 1,
        ..BASE
    });
    assert!(h.out().is_empty());
    assert_eq!(h.e.stats().syn_time_wait_resets, 0);
}

#[test]
fn hole_in_the_last_request_gives_way_to_the_fin() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    h.at(5);
    h.rec(resp(0, 4, 50));
    let _ = h.out();
    h.at(60);
    // req2 = "AAAABBBB": its first segment lost; then the client's FIN after the answer.
    h.cap(data(8, 50, b"BBBB"));
    h.cap(Seg {
        flags: TcpFlags::FIN | A,
        ..data(12, 90, b"")
    });
    let (outs, _) = h.run_timers(2000);
    assert!(!contains(
        &outs.iter().map(|(_, o)| o.clone()).collect::<Vec<_>>(),
        b"BBBB"
    ));
    let s = h.e.stats();
    assert_eq!(
        (
            s.drops.capture_gap,
            s.sessions_completed,
            s.sessions_failed.total()
        ),
        (1, 1, 0),
        "{s:?}"
    );
}

#[test]
fn hole_before_the_clients_reset_ends_the_session_as_the_client_did() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    h.at(5);
    h.rec(resp(0, 4, 50));
    let _ = h.out();
    h.at(20); // req1 not yet called answered (quiet rule): the RST waits for it
    h.cap(data(8, 50, b"BBBB"));
    h.cap(Seg {
        flags: TcpFlags::RST,
        ..data(12, 0, b"")
    });
    let (outs, _) = h.run_timers(2000);
    assert!(
        outs.iter().any(|(t, o)| o.has(TcpFlags::RST) && *t < 1000),
        "{outs:?}"
    );
    assert!(!outs.iter().any(|(_, o)| o.payload == b"BBBB"));
    let s = h.e.stats();
    assert_eq!(
        (
            s.drops.capture_gap,
            s.sessions_completed,
            s.sessions_failed.total()
        ),
        (1, 1, 0),
        "{s:?}"
    );
}
