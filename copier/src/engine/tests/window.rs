//! Windowed pacing: while the test server's answers match the online sizes, a connection may
//! have several request units in flight (the window opens by one with each unit answered, up
//! to `pace_window`); answers that come together release the units in order; a size mismatch,
//! a server close with requests left or a timeout makes the session lock-step.

use super::*;

/// Six requests of 4 bytes captured at once, each answered online with 100 bytes; the first
/// sent and acked. `win`: the pacing window.
fn backlog(win: u32) -> H {
    let mut h = H::new(EngineConfig {
        pace_window: win,
        ..cfg()
    });
    h.establish();
    for i in 0..6u32 {
        h.cap(data(4 * i, 100 * i, format!("req{i}").as_bytes()));
    }
    let out = h.out();
    assert_eq!(payloads(&out), "req0", "one unit before any answer");
    h.at(1);
    h.rec(resp(0, 4, 0));
    h
}

/// The client bytes sent, in order (segments may carry several units).
fn payloads(out: &[Out]) -> String {
    out.iter()
        .filter(|o| !o.payload.is_empty())
        .map(|o| String::from_utf8_lossy(&o.payload).into_owned())
        .collect()
}

#[test]
fn the_window_opens_with_each_answer_and_answers_together_release_in_order() {
    let mut h = backlog(8);
    h.at(2);
    h.rec(resp(0, 4, 100));
    assert_eq!(payloads(&h.out()), "req1req2", "window 2 after one answer");
    // Both answers in one record (the server had both): both released, the window is 4.
    h.rec(resp(100, 12, 200));
    assert_eq!(payloads(&h.out()), "req3req4req5", "window 4, only 3 left");
    assert_eq!(
        h.e.stats().units_ahead,
        3,
        "req2, req4 and req5 went ahead of an answer"
    );
    assert_eq!(h.e.stats().answer_timeouts, 0);
}

#[test]
fn the_answer_of_a_unit_starts_where_the_one_before_ended() {
    let mut h = backlog(8);
    h.rec(resp(0, 4, 100));
    assert_eq!(payloads(&h.out()), "req1req2");
    // 150 bytes: req1's answer and half of req2's.
    h.rec(resp(100, 12, 150));
    assert_eq!(
        payloads(&h.out()),
        "req3req4",
        "req1 released: window 3, req2 to req4 in flight"
    );
    h.rec(resp(250, 16, 50));
    assert_eq!(payloads(&h.out()), "req5", "req2 complete");
}

#[test]
fn strict_pacing_keeps_one_unit_in_flight() {
    let mut h = backlog(1);
    h.rec(resp(0, 4, 100));
    assert_eq!(payloads(&h.out()), "req1");
    h.rec(resp(100, 8, 100));
    assert_eq!(payloads(&h.out()), "req2");
    assert_eq!(h.e.stats().units_ahead, 0);
}

#[test]
fn a_shorter_answer_makes_the_session_lock_step() {
    let mut h = backlog(8);
    h.rec(resp(0, 4, 10)); // 10 of 100 bytes
    assert!(
        h.fire_until_output(100)
            .iter()
            .any(|o| o.payload == b"req1"),
        "released by the quiet"
    );
    h.rec(resp(10, 8, 100));
    assert_eq!(payloads(&h.out()), "req2", "one at a time from now on");
    h.rec(resp(110, 12, 100));
    assert_eq!(payloads(&h.out()), "req3");
}

#[test]
fn requests_in_flight_when_the_test_server_closes_go_again_on_a_new_connection() {
    let mut h = backlog(8);
    h.rec(resp(0, 4, 100));
    assert_eq!(payloads(&h.out()), "req1req2");
    // The server answers req1, then closes (a keep-alive limit): req2 was not answered.
    h.rec(resp(100, 12, 100));
    let _ = h.out();
    h.rec(Seg {
        seq: TISN + 1 + 200,
        ack: CISN + 1 + 12,
        flags: TcpFlags(TcpFlags::FIN.0 | TcpFlags::ACK.0),
        ..BASE
    });
    let out = h.out();
    let syn = out
        .iter()
        .find(|o| o.has(TcpFlags::SYN))
        .expect("a new connection");
    assert_eq!(syn.seq, CISN + 8, "it starts at req2");
    let t = syn.tuple;
    h.rec_to(
        t,
        Seg {
            seq: 9000,
            ack: CISN + 9,
            flags: TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0),
            mss: Some(1460),
            dst: Some(t.client.into()),
            ..BASE
        },
    );
    let out = h.out();
    assert_eq!(
        payloads(&out),
        "req2",
        "lock-step on the new connection: {out:?}"
    );
    assert_eq!(h.e.stats().drops.replay_skipped, 0);
}

#[test]
fn the_replay_lag_of_each_unit_is_counted_once() {
    let mut h = backlog(8);
    h.at(30);
    h.rec(resp(0, 4, 100));
    let _ = h.out();
    let lag = &h.e.stats().replay_lag;
    assert_eq!(lag.count(), 3, "req0, req1, req2 sent");
    // req0 left at once, req1 and req2 30 ms after their capture.
    assert_eq!(lag.quantile_bound(0.3), Some(0.0005));
    assert_eq!(lag.quantile_bound(1.0), Some(0.05));
    h.rec(resp(0, 4, 100)); // a duplicate record: nothing new
    let _ = h.out();
    assert_eq!(h.e.stats().replay_lag.count(), 3);
}

#[test]
fn each_unit_pacing_waits_on_is_timed_to_its_first_answer_byte() {
    let mut h = backlog(1); // req0 sent at 0 ms, acked at 1 ms
    h.at(40);
    h.rec(resp(0, 4, 100)); // its answer, 40 ms after it left: req1 goes
    assert_eq!(payloads(&h.out()), "req1");
    h.at(65);
    h.rec(resp(100, 8, 30)); // the first 30 bytes of req1's answer: 25 ms
    h.at(70);
    h.rec(resp(130, 8, 70)); // the rest: not timed again
    assert_eq!(payloads(&h.out()), "req2");
    let t = h.e.target_stats().next().expect("the map's server");
    assert_eq!(t.answers, 2);
    assert_eq!(t.answer_sum, Duration::from_millis(65));
    // Smoothed: 40 ms, then 10 % of the way to 25 ms.
    assert_eq!(t.answer_smoothed, Some(Duration::from_micros(38_500)));
}
