//! Carrying client data: ACK translation, pacing, the test server's window, client
//! retransmissions and overlaps, reordering, super-segments, retransmission.

use super::*;

#[test]
fn acks_are_translated_and_responses_acked_by_the_engine() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    let out = h.out();
    assert_eq!(
        (out[0].seq, out[0].ack),
        (CISN + 1, TISN + 1),
        "client acked online byte {}",
        OISN + 1
    );
    // The test server answers with far more than production did: every byte is acked by us.
    h.rec(resp(0, 4, 1448));
    h.rec(resp(1448, 4, 1448));
    h.rec(resp(2896, 4, 60_000));
    let out = h.out();
    assert_eq!(out.len(), 1, "one ACK for the batch: {out:?}");
    assert_eq!(
        (out[0].flags, out[0].seq, out[0].ack),
        (A, CISN + 5, TISN + 1 + 2896 + 60_000)
    );
    // The client's next request acks production's (short) answer: the ack we send stays the
    // test server's.
    h.cap(data(4, 7, b"req2"));
    let out = h.out();
    assert_eq!(out[0].payload, b"req2");
    assert_eq!(out[0].ack, TISN + 1 + 2896 + 60_000);
}

#[test]
fn window_field_is_generous_and_scaled() {
    let mut h = H::default();
    let out = h.establish();
    assert_eq!(out[1].window, ((4u32 << 20) >> 7) as u16);
    let mut h = H::default();
    h.syn(SYN);
    let _ = h.out();
    h.rec(Seg {
        wscale: None,
        ..SYN_ACK
    });
    assert_eq!(h.out()[0].window, 65535, "no scaling agreed");
}

#[test]
fn pacing_releases_a_request_after_the_previous_is_answered() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    h.cap(data(4, 100, b"req2")); // online answered 100 bytes in between
    h.cap(data(8, 250, b"req3"));
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].payload, b"req1");
    h.at(10);
    h.rec(resp(0, 4, 0)); // acked, not answered yet
    assert!(h.out().is_empty());
    h.at(20);
    h.rec(resp(0, 4, 60)); // part of the answer
    assert_eq!(h.out().len(), 1, "only our ACK");
    h.rec(resp(60, 4, 40)); // as long as online's: answered
    let out = h.out();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].payload, b"req2");
    assert_eq!(out[0].ack, TISN + 101);
    h.rec(resp(100, 8, 150));
    let out = h.out();
    assert_eq!(out[0].payload, b"req3");
}

#[test]
fn pacing_gives_up_waiting_after_the_answer_timeout() {
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
    assert!(h.out().is_empty());
    let out = h.fire_until_output(600);
    assert_eq!(h.ms(), 510, "half a second after req1 was acked");
    assert_eq!(out[0].payload, b"req2");
    assert_eq!(h.e.stats().answer_timeouts, 1);
}

#[test]
fn without_pacing_everything_goes_at_once() {
    let mut h = H::new(EngineConfig {
        pace_requests: false,
        ..cfg()
    });
    h.establish();
    h.cap(data(0, 0, b"req1"));
    h.cap(data(4, 100, b"req2"));
    let out = h.out();
    assert_eq!(stream_of(&out, CISN + 1), b"req1req2");
}

#[test]
fn the_test_servers_window_is_respected() {
    let mut h = H::default();
    h.syn(SYN);
    let _ = h.out();
    h.rec(Seg {
        window: 1000,
        wscale: None,
        ..SYN_ACK
    });
    h.cap(data(0, 0, &[1; 3000]));
    let out = h.out();
    assert_eq!(
        out.iter().map(|o| o.payload.len()).sum::<usize>(),
        1000,
        "{out:?}"
    );
    h.rec(Seg {
        window: 1500,
        ..resp(0, 500, 0)
    });
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].seq, out[0].payload.len()),
        (CISN + 1001, 1000),
        "up to acked + window"
    );
    assert_eq!(
        h.e.stats().window_releases,
        1,
        "the record opened the full window for bytes that waited"
    );
    // Zero window: nothing goes, a probe after the RTO, data once it opens.
    h.rec(Seg {
        window: 0,
        ..resp(0, 2000, 0)
    });
    assert!(h.out().is_empty());
    assert_eq!(
        h.e.stats().window_releases,
        1,
        "a shut window releases nothing"
    );
    let out = h.fire_until_output(10_000);
    assert_eq!(out.len(), 1);
    assert!(out[0].payload.is_empty());
    assert_eq!(out[0].seq, CISN + 2000, "probe with an old sequence number");
    assert_eq!(
        (h.e.stats().window_probes, h.e.stats().retransmissions),
        (1, 0),
        "a probe is counted as one"
    );
    h.rec(Seg {
        window: 4000,
        ..resp(0, 2000, 0)
    });
    let out = h.out();
    assert_eq!(stream_of(&out, CISN + 2001), vec![1u8; 1000]);
    assert_eq!(h.e.stats().window_releases, 2);
    h.rec(Seg {
        window: 4000,
        ..resp(0, 3000, 0)
    });
    assert!(h.out().is_empty());
    assert_eq!(
        h.e.stats().window_releases,
        2,
        "an ACK with nothing left to send releases nothing"
    );
}

#[test]
fn client_retransmissions_are_skipped() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, b"hello"));
    h.cap(data(0, 0, b"hello"));
    h.cap(data(0, 0, b"hel"));
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(h.e.stats().drops.client_retransmission, 2);
}

#[test]
fn overlaps_are_trimmed_and_reordering_repaired() {
    let mut h = H::new(EngineConfig {
        pace_requests: false,
        ..cfg()
    });
    h.establish();
    h.cap(data(0, 0, b"0123456789"));
    h.cap(data(5, 0, b"56789abcde")); // overlaps 5 bytes
    h.cap(data(20, 0, b"klmno")); // ahead: held
    h.cap(data(15, 0, b"fghij"));
    h.cap(data(12, 0, b"cdefghijklmnopq")); // covers the rest and adds "pq"
    let out = h.out();
    assert_eq!(stream_of(&out, CISN + 1), b"0123456789abcdefghijklmnopq");
    let d = &h.e.stats().drops;
    assert_eq!(d.overlap_trimmed, 2);
}

#[test]
fn super_segments_are_cut_to_the_mtu() {
    let mut h = H::new(EngineConfig { mtu: 1500, ..cfg() });
    h.establish();
    let big: Vec<u8> = (0..64_000u32).map(|i| (i % 251) as u8).collect();
    h.cap(data(0, 0, &big));
    let out = h.out();
    assert!(out.len() >= 44, "{}", out.len());
    assert!(out.iter().all(|o| o.len <= 1500 && o.payload.len() <= 1460));
    assert_eq!(stream_of(&out, CISN + 1), big);
}

#[test]
fn with_gso_data_leaves_in_super_segments_of_whole_mss() {
    let mut h = H::new(EngineConfig {
        mtu: 1500,
        gso: true,
        ..cfg()
    });
    h.establish();
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    for (i, c) in big.chunks(50_000).enumerate() {
        h.cap(data(i as u32 * 50_000, 0, c));
    }
    let mut out = h.out();
    // The SYN-ACK's window (65535, no scaling) bounds what is in flight: one super-segment of
    // 44 MSS (64,240 bytes) and a tail that fills the window.
    assert_eq!(
        out.iter().map(|o| o.payload.len()).collect::<Vec<_>>(),
        vec![44 * 1460, 65535 - 44 * 1460]
    );
    assert_eq!(
        out[0].gso_size, 1460,
        "a super-segment says the MSS of its pieces"
    );
    assert_eq!(out[1].gso_size, 0, "one MSS or less: a plain segment");
    assert!(out[0].len <= 65535);
    // Acknowledged, the rest leaves the same way; the stream is whole and in order.
    let mut acked = 65535u32;
    while (acked as usize) < big.len() {
        h.rec(Seg {
            window: 65535,
            ..resp(0, acked, 0)
        });
        let more = h.out();
        assert!(!more.is_empty());
        assert!(more.iter().all(
            |o| o.payload.len() <= 44 * 1460 && (o.gso_size == 0) == (o.payload.len() <= 1460)
        ));
        acked = more
            .iter()
            .map(|o| o.seq.wrapping_sub(CISN + 1) + o.payload.len() as u32)
            .max()
            .unwrap();
        out.extend(more);
    }
    assert_eq!(stream_of(&out, CISN + 1), big);
}

#[test]
fn unacked_data_is_retransmitted_with_backoff() {
    let mut h = H::default();
    h.establish();
    h.cap(data(0, 0, &[5; 2000]));
    let out = h.out();
    assert_eq!(out.len(), 2);
    // Only the first segment is acked; the second is lost.
    h.at(50);
    h.rec(resp(0, 1460, 0));
    assert!(h.out().is_empty());
    let mut seen = Vec::new();
    for _ in 0..2 {
        for o in h.fire_until_output(100_000) {
            seen.push((h.ms(), o.seq, o.payload.len()));
        }
    }
    // The RTT sample of the handshake is 0 ms: RTO is the 200 ms floor, restarted at the ack.
    assert_eq!(seen, vec![(250, CISN + 1461, 540), (650, CISN + 1461, 540)]);
    assert_eq!(h.e.stats().retransmissions, 2);
    h.rec(resp(0, 2000, 0));
    assert!(h.out().is_empty());
    assert!(
        h.run_timers(60_000).0.is_empty(),
        "nothing more to retransmit"
    );
}
