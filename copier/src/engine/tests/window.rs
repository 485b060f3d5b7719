//! Windowed pacing: while the test server's answers match the online sizes, a connection may
//! have several request units in flight (the window opens by one with each unit answered, up
//! to `pace_window`); answers that come together release the units in order; a size mismatch
//! or a timeout closes the window to one (a strike), answers that keep differing make the
//! session lock-step until matching ones forgive them, and a server close with requests left
//! makes it lock-step for good.

use super::*;

/// Six requests of 4 bytes captured at once, each answered online with 100 bytes; the first
/// sent and acked. `win`: the pacing window.
fn backlog(win: u32) -> H {
    backlog_of(win, 6)
}

/// `n` requests (`req0`, `req1`...) of 4 bytes captured at once, each answered online with
/// 100 bytes; the first sent and acked.
fn backlog_of(win: u32, n: u32) -> H {
    let mut h = H::new(EngineConfig {
        pace_window: win,
        ..cfg()
    });
    h.establish();
    for i in 0..n {
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
fn a_shorter_answer_closes_the_window_and_matching_answers_open_it_again() {
    let mut h = backlog(8);
    h.rec(resp(0, 4, 10)); // 10 of 100 bytes
    let out = h.fire_until_output(100);
    assert_eq!(
        payloads(&out),
        "req1",
        "released by the quiet, one unit in flight"
    );
    h.rec(resp(10, 8, 100));
    assert_eq!(
        payloads(&h.out()),
        "req2req3",
        "req1 answered with the online size: the window opens again"
    );
}

#[test]
fn answers_that_keep_differing_keep_the_session_lock_step_until_matching_ones_forgive() {
    let mut h = backlog_of(8, 10);
    // Five answers of 10 bytes where the online ones had 100: five strikes, lock-step.
    let mut at = 0;
    for i in 0..5u32 {
        h.rec(resp(at, 4 * (i + 1), 10));
        at += 10;
        let mut sent = String::new();
        while sent.is_empty() {
            let out = h.fire_until_output(10_000);
            assert!(!out.is_empty(), "the quiet rule releases req{i}");
            sent = payloads(&out);
        }
        assert_eq!(sent, format!("req{}", i + 1), "one at a time");
    }
    // Matching answers forgive one strike each: lock-step still after two of them...
    for i in 5..7u32 {
        h.rec(resp(at, 4 * (i + 1), 100));
        at += 100;
        assert_eq!(
            payloads(&h.out()),
            format!("req{}", i + 1),
            "still lock-step"
        );
    }
    // ...and the window opens again after the third.
    h.rec(resp(at, 32, 100));
    assert_eq!(payloads(&h.out()), "req8req9");
}

/// The test server pauses in the middle of an answer for longer than the quiet rule waits (a
/// busy test host): the unit is released early, and the tail of its answer then counts for the
/// next one. Two strikes, then answers of the online size: the window opens again (it used to
/// stay at one for the rest of the session).
#[test]
fn a_pause_in_the_middle_of_an_answer_costs_the_window_for_a_while_only() {
    let mut h = backlog(8);
    h.rec(resp(0, 4, 60)); // 60 of req0's 100 bytes, then a pause
    let out = h.fire_until_output(1000);
    assert_eq!(payloads(&out), "req1", "released by the quiet");
    // The rest of req0's answer (sent after the server had req1), then req1's answer.
    h.rec(resp(60, 8, 40));
    h.rec(resp(100, 8, 100));
    assert_eq!(
        payloads(&h.out()),
        "req2",
        "req1 released; the 40 bytes beyond its online size: a second strike, window one"
    );
    h.rec(resp(200, 12, 100));
    assert_eq!(
        payloads(&h.out()),
        "req3req4",
        "req2 answered with the online size: the window opens by one"
    );
    h.rec(resp(300, 20, 200));
    assert_eq!(
        payloads(&h.out()),
        "req5",
        "both answered, the last request goes"
    );
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
