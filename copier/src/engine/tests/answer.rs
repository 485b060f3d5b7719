//! Pacing by the size of the answers: the next request goes once the test server sent as much
//! as the online server did (the client's ACK numbers tell how much that was), or some and then
//! nothing for `answer_quiet`, or some and a close; the client's FIN waits for the quiet.

use super::*;

const FA: TcpFlags = TcpFlags(TcpFlags::FIN.0 | TcpFlags::ACK.0);

/// req1 (online answer 100 bytes), req2 (online answer 50), req3; req1 sent and acked.
fn three_requests() -> H {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    h.cap(data(4, 100, b"req2"));
    h.cap(data(8, 150, b"req3"));
    let out = h.out();
    assert_eq!((out.len(), &out[0].payload[..]), (1, &b"req1"[..]));
    h.at(5);
    h.rec(resp(0, 4, 0));
    assert!(h.out().is_empty());
    h
}

fn payloads(out: &[Out]) -> Vec<&[u8]> {
    out.iter()
        .filter(|o| !o.payload.is_empty())
        .map(|o| &o.payload[..])
        .collect()
}

#[test]
fn an_answer_as_long_as_online_releases_the_next_request_at_once() {
    let mut h = three_requests();
    h.at(10);
    h.rec(resp(0, 4, 60));
    assert_eq!(payloads(&h.out()), Vec::<&[u8]>::new(), "60 of 100 bytes");
    h.rec(resp(60, 4, 40));
    assert_eq!(payloads(&h.out()), vec![b"req2"]);
    h.rec(resp(100, 8, 50));
    assert_eq!(payloads(&h.out()), vec![b"req3"]);
    assert_eq!(h.ms(), 10, "no waiting");
    assert_eq!(h.e.stats().answer_timeouts, 0);
}

#[test]
fn a_longer_test_answer_releases_the_next_request_at_the_online_size() {
    let mut h = three_requests();
    h.at(10);
    // The test server answers req1 with far more than online did: req2 goes after the first
    // 100 bytes, while the rest still streams.
    h.rec(resp(0, 4, 1448));
    assert_eq!(payloads(&h.out()), vec![b"req2"]);
    h.rec(resp(1448, 4, 1448));
    h.rec(resp(2896, 8, 1448)); // it has req2 now: this counts toward req2's answer
    assert_eq!(payloads(&h.out()), vec![b"req3"], "1448 >= 50");
}

#[test]
fn a_shorter_test_answer_releases_after_the_quiet() {
    let mut h = three_requests();
    h.at(10);
    h.rec(resp(0, 4, 10));
    assert_eq!(payloads(&h.out()), Vec::<&[u8]>::new(), "10 of 100 bytes");
    // More of it 30 ms later: the quiet starts again.
    h.at(40);
    h.rec(resp(10, 4, 5));
    let _ = h.out();
    let out = h.fire_until_output(10_000);
    assert_eq!(payloads(&out), vec![b"req2"]);
    assert_eq!(h.ms(), 90, "50 ms after the last answer byte");
    assert_eq!(h.e.stats().answer_timeouts, 0);
}

#[test]
fn duplicated_or_reordered_records_are_counted_once() {
    let mut h = three_requests();
    h.at(10);
    h.rec(resp(50, 4, 50));
    h.rec(resp(50, 4, 50));
    h.rec(resp(50, 4, 50));
    assert_eq!(
        payloads(&h.out()),
        Vec::<&[u8]>::new(),
        "50 distinct bytes, not 150"
    );
    h.rec(resp(0, 4, 50)); // the first half, late
    assert_eq!(payloads(&h.out()), vec![b"req2"]);
}

#[test]
fn bytes_sent_before_the_test_server_had_the_request_do_not_count() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    h.cap(data(4, 100, b"req2"));
    let _ = h.out();
    // Data acking only part of req1 (it cannot be the answer), then the answer.
    h.rec(resp(0, 2, 1000));
    assert_eq!(payloads(&h.out()), Vec::<&[u8]>::new());
    h.rec(resp(1000, 4, 99));
    assert_eq!(
        payloads(&h.out()),
        Vec::<&[u8]>::new(),
        "99 of 100 bytes after it had req1"
    );
    h.rec(resp(1099, 4, 1));
    assert_eq!(payloads(&h.out()), vec![b"req2"]);
}

#[test]
fn the_answer_timeout_still_applies() {
    let mut h = H::new(EngineConfig {
        answer_timeout: Duration::from_millis(500),
        ..cfg()
    });
    h.establish();
    h.cap(data(0, 0, b"req1"));
    h.cap(data(4, 100, b"req2"));
    let _ = h.out();
    h.at(10);
    h.rec(resp(0, 4, 0));
    let out = h.fire_until_output(10_000);
    assert_eq!((payloads(&out), h.ms()), (vec![&b"req2"[..]], 510));
    assert_eq!(h.e.stats().answer_timeouts, 1);
}

#[test]
fn a_test_server_closing_after_a_short_answer_answered_it() {
    let mut h = three_requests();
    h.at(10);
    // 10 bytes and a FIN: answered (no quiet to wait for); req2 goes on a new connection, req1
    // is not sent again.
    h.rec(Seg {
        seq: TISN + 1,
        ack: CISN + 5,
        flags: TcpFlags(FA.0 | TcpFlags::PSH.0),
        data_len: 10,
        ..BASE
    });
    let ev = h.control();
    let RegEvent::Register(t2) = ev[0] else {
        panic!("{ev:?}")
    };
    let out = h.packets();
    let syn = out
        .iter()
        .find(|o| o.tuple == t2)
        .expect("SYN of the new connection");
    assert_eq!(
        (syn.flags, syn.seq),
        (TcpFlags::SYN, CISN + 4),
        "starts at req2"
    );
    h.rec_to(
        t2,
        Seg {
            seq: 90_000,
            ack: CISN + 5,
            ..SYN_ACK
        },
    );
    assert_eq!(payloads(&h.out()), vec![b"req2"]);
}

#[test]
fn a_test_server_resetting_after_a_short_answer_answered_it() {
    let mut h = three_requests();
    h.at(10);
    h.rec(resp(0, 4, 10));
    h.rec(Seg {
        seq: TISN + 11,
        ack: CISN + 5,
        flags: TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0),
        ..BASE
    });
    let ev = h.control();
    assert_eq!(ev[0], RegEvent::Unregister(test_tuple()));
    let RegEvent::Register(t2) = ev[1] else {
        panic!("{ev:?}")
    };
    let out = h.packets();
    assert_eq!(
        (out.len(), out[0].tuple, out[0].seq),
        (1, t2, CISN + 4),
        "starts at req2: {out:?}"
    );
}

#[test]
fn a_reset_beyond_what_was_seen_does_not_answer_the_unit() {
    // The test server's RST comes with a sequence number beyond what we saw of it (the end of
    // an earlier answer, and its FIN, were lost): nothing says it answered req1, which is
    // carried again on a new connection.
    let mut h = three_requests();
    h.at(10);
    h.rec(Seg {
        seq: TISN + 421,
        ack: CISN + 5,
        flags: TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0),
        ..BASE
    });
    let ev = h.control();
    let Some(RegEvent::Register(t2)) = ev
        .iter()
        .copied()
        .find(|e| matches!(e, RegEvent::Register(_)))
    else {
        panic!("{ev:?}")
    };
    let out = h.packets();
    let syn = out
        .iter()
        .find(|o| o.tuple == t2)
        .expect("SYN of the new connection");
    assert_eq!(
        (syn.flags, syn.seq),
        (TcpFlags::SYN, CISN),
        "starts at req1 again"
    );
    h.rec_to(
        t2,
        Seg {
            seq: 90_000,
            ack: CISN + 1,
            ..SYN_ACK
        },
    );
    assert_eq!(payloads(&h.out()), vec![b"req1"]);
}

#[test]
fn the_fin_waits_for_the_quiet_even_after_an_answer_of_the_online_size() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    let _ = h.out();
    // The client got 100 bytes online, then closed.
    h.cap(Seg {
        seq: CISN + 5,
        ack: OISN + 101,
        flags: FA,
        ..BASE
    });
    h.at(10);
    h.rec(resp(0, 4, 100));
    assert!(
        h.out().iter().all(|o| !o.has(TcpFlags::FIN)),
        "the test answer may be longer: wait"
    );
    h.at(30);
    h.rec(resp(100, 4, 5000)); // it was
    let _ = h.out();
    let out = h.fire_until_output(10_000);
    assert_eq!((out.len(), out[0].flags, out[0].seq), (1, FA, CISN + 5));
    assert_eq!(h.ms(), 80);
}

#[test]
fn a_shorter_greeting_releases_after_the_quiet() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 20, b"EHLO x\r\n")); // the online greeting was 20 bytes
    h.at(5);
    h.rec(resp(0, 0, 30));
    assert_eq!(payloads(&h.out()), vec![b"EHLO x\r\n"], "30 >= 20");
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 20, b"EHLO x\r\n"));
    h.at(5);
    h.rec(resp(0, 0, 12));
    assert_eq!(payloads(&h.out()), Vec::<&[u8]>::new(), "12 < 20");
    let out = h.fire_until_output(10_000);
    assert_eq!((payloads(&out), h.ms()), (vec![&b"EHLO x\r\n"[..]], 55));
}

#[test]
fn mid_stream_answers_are_measured_from_the_synchronising_ack() {
    let mut h = H::default();
    let mid = |off: u32, oack: u32, b: &[u8]| Seg {
        seq: 5_000_000 + off,
        ack: 9_000_000 + oack,
        flags: PA,
        payload: leak(b),
        ..BASE
    };
    h.cap(mid(0, 0, b"tail of an old request"));
    h.cap(Seg {
        seq: 5_000_022,
        ack: 9_000_500,
        ..BASE
    }); // synchronised here
    h.cap(mid(22, 500, b"GET /a"));
    h.cap(mid(28, 800, b"GET /b")); // online answered /a with 300 bytes
    let _ = h.out();
    h.rec(Seg {
        ack: 5_000_022,
        ..SYN_ACK
    });
    let out = h.out();
    assert_eq!(payloads(&out), vec![b"GET /a"]);
    h.rec(Seg {
        seq: TISN + 1,
        ack: 5_000_028,
        data_len: 299,
        ..BASE
    });
    assert_eq!(payloads(&h.out()), Vec::<&[u8]>::new(), "299 of 300");
    h.rec(Seg {
        seq: TISN + 300,
        ack: 5_000_028,
        data_len: 1,
        ..BASE
    });
    assert_eq!(payloads(&h.out()), vec![b"GET /b"]);
}

#[test]
fn without_pacing_any_answer_still_counts_for_replays() {
    // Pacing off sends everything at once; what counts as answered only decides what a new
    // connection replays when the test server closes: as before, any answer byte.
    let mut h = H::new(EngineConfig {
        pace_requests: false,
        ..cfg()
    });
    h.establish();
    h.cap(data(0, 0, b"req1"));
    h.cap(data(4, 100, b"req2"));
    assert_eq!(stream_of(&h.out(), CISN + 1), b"req1req2");
    h.rec(resp(0, 8, 10)); // 10 bytes acking both
    h.rec(Seg {
        seq: TISN + 11,
        ack: CISN + 9,
        flags: FA,
        ..BASE
    });
    let _ = h.out();
    assert_eq!(h.e.stats().connections_opened, 1, "nothing to replay");
}

#[test]
fn after_an_answered_last_unit_the_next_one_is_measured_from_what_the_client_received() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    let _ = h.out();
    h.rec(resp(0, 4, 100));
    let _ = h.out();
    h.cap(Seg {
        seq: CISN + 5,
        ack: OISN + 101,
        ..BASE
    }); // the client acks 100 bytes online
    let _ = h.fire_until_output(1_000); // quiet: req1 counts as answered
                                        // req2 starts a unit of its own (everything before is answered): its online answer is
                                        // counted from req2's own ACK, not from req1's. req3 follows a 40-byte answer online.
    h.at(500);
    h.cap(data(4, 100, b"req2"));
    assert_eq!(payloads(&h.out()), vec![b"req2"]);
    h.cap(data(8, 140, b"req3"));
    h.rec(resp(100, 8, 40));
    assert_eq!(
        payloads(&h.out()),
        vec![b"req3"],
        "40 bytes, as online (not 140)"
    );
}
