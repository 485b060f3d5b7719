//! The delayed ACK (`EngineConfig::ack_delay`): one segment of the test server's answer waits
//! for the next request to carry its ACK; a second segment, a FIN, a repeat or a super-segment
//! is acknowledged at once; a delay that runs out makes the connection acknowledge at once.

use std::time::Duration;

use super::*;

fn delayed() -> H {
    H::new(EngineConfig {
        ack_delay: Duration::from_millis(40),
        ..cfg()
    })
}

#[test]
fn a_one_segment_answer_is_acknowledged_by_the_next_request() {
    let mut h = delayed();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    assert_eq!(h.out()[0].payload, b"req1");
    h.at(1);
    h.rec(resp(0, 4, 100)); // the whole answer, one segment
    assert!(h.out().is_empty(), "its ACK waits");
    h.at(5);
    h.cap(data(4, 100, b"req2")); // the client's next request, 4 ms later
    let out = h.out();
    assert_eq!(out.len(), 1, "one segment carries both: {out:?}");
    assert_eq!(out[0].payload, b"req2");
    assert_eq!(out[0].ack, TISN + 101, "it acknowledges the answer");
    // Nothing is left to acknowledge: no ACK when the delay would have run out.
    let (outs, _) = h.run_timers(100);
    assert!(outs.is_empty(), "{outs:?}");
}

#[test]
fn a_second_segment_is_acknowledged_at_once() {
    let mut h = delayed();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    let _ = h.out();
    h.at(1);
    h.rec(resp(0, 4, 60));
    assert!(h.out().is_empty());
    h.rec(resp(60, 4, 40));
    let out = h.out();
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(out[0].payload.is_empty() && out[0].has(A));
    assert_eq!(out[0].ack, TISN + 101, "both segments in one ACK");
}

#[test]
fn a_super_segment_a_fin_and_a_repeat_are_acknowledged_at_once() {
    let mut h = delayed();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    let _ = h.out();
    h.at(1);
    h.rec(resp(0, 4, 4000)); // several MSS in one record (GSO)
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack, TISN + 4001);
    h.rec(resp(0, 4, 4000)); // the same bytes again: our ACK was lost
    let out = h.out();
    assert_eq!(out.len(), 1, "a repeat is acknowledged at once");
    let fin = Seg {
        flags: TcpFlags(TcpFlags::FIN.0 | A.0),
        ..resp(4000, 4, 0)
    };
    h.rec(fin);
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack, TISN + 4002, "the FIN at once");
}

#[test]
fn a_delay_that_runs_out_sends_the_ack_and_later_ones_go_at_once() {
    let mut h = delayed();
    h.establish();
    h.cap(data(0, 0, b"req1"));
    let _ = h.out();
    h.at(1);
    h.rec(resp(0, 4, 100));
    assert!(h.out().is_empty());
    let (outs, _) = h.run_timers(200);
    assert_eq!(outs.len(), 1, "{outs:?}");
    assert_eq!(outs[0].0, 41, "40 ms after the segment");
    assert_eq!(outs[0].1.ack, TISN + 101);
    // The client thinks longer than the delay: from now on every segment is acknowledged
    // at once.
    h.at(300);
    h.cap(data(4, 100, b"req2"));
    assert_eq!(h.out()[0].payload, b"req2");
    h.at(301);
    h.rec(resp(100, 8, 100));
    let out = h.out();
    assert_eq!(out.len(), 1, "at once now: {out:?}");
    assert_eq!(out[0].ack, TISN + 201);
}

#[test]
fn zero_acknowledges_every_segment_at_once() {
    let mut h = H::new(EngineConfig {
        ack_delay: Duration::ZERO,
        ..cfg()
    });
    h.establish();
    h.cap(data(0, 0, b"req1"));
    let _ = h.out();
    h.at(1);
    h.rec(resp(0, 4, 100));
    assert_eq!(h.out().len(), 1);
}
