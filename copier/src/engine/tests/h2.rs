//! HTTP/2 sessions (recognised by the client's preface, `common::h2`): their units go as
//! captured, however many streams are in flight, cut at frame boundaries; an `Upgrade: h2c`
//! request waits for its answer first; a test server's close with frames not taken ends the
//! session (`h2_closed`) rather than sending frames on a new connection without a preface.

use super::*;
use crate::engine::chunk::{Meter, Payload};
use crate::engine::stream::Stream;
use common::h2::PREFACE;
use common::seq::SeqNum;

fn frame(len: u32, kind: u8, flags: u8, stream: u32) -> Vec<u8> {
    let mut v = len.to_be_bytes()[1..].to_vec();
    v.extend([kind, flags]);
    v.extend(stream.to_be_bytes());
    v.extend(std::iter::repeat_n(0x5au8, len as usize));
    v
}

/// A request on stream `id`: one HEADERS frame with END_STREAM and END_HEADERS.
fn get(id: u32) -> Vec<u8> {
    frame(20, 1, 5, id)
}

/// The preface, the client's SETTINGS and its first request (stream 1).
fn opening() -> Vec<u8> {
    let mut v = PREFACE.to_vec();
    v.extend(frame(6, 4, 0, 0));
    v.extend(get(1));
    v
}

/// A session whose client sent the opening (preface, SETTINGS, stream 1); returns it and the
/// opening's length.
fn opened() -> (H, u32) {
    let mut h = H::new(cfg()); // strict pacing: an HTTP/1 session would send one unit
    h.establish();
    let first = opening();
    h.cap(data(0, 0, &first));
    (h, first.len() as u32)
}

/// The test server's FIN at its offset `off`, acking client offset `cack`.
fn server_fin(off: u32, cack: u32) -> Seg {
    Seg {
        seq: TISN + 1 + off,
        ack: CISN + 1 + cack,
        flags: TcpFlags(TcpFlags::FIN.0 | TcpFlags::ACK.0),
        ..BASE
    }
}

/// The client's FIN at its offset `off`, acking `oack` bytes of the online answers.
fn client_fin(off: u32, oack: u32) -> Seg {
    Seg {
        seq: CISN + 1 + off,
        ack: OISN + 1 + oack,
        flags: TcpFlags(TcpFlags::FIN.0 | TcpFlags::ACK.0),
        ..BASE
    }
}

/// The close that follows `rec`: no new connection; the session's `h2_closed` count.
fn close_ends(h: &mut H, rec: Seg) -> u64 {
    h.rec(rec);
    let out = h.out();
    assert!(
        !out.iter().any(|o| o.has(TcpFlags::SYN)),
        "no new connection: {out:?}"
    );
    assert_eq!(h.e.stats().reconnects, 0);
    h.e.stats().sessions_failed.h2_closed
}

/// The test server just sent as much as the online one did: the FIN goes once it has been
/// quiet for `answer_quiet` after that (it may still be answering the last streams), long
/// before `answer_timeout`.
fn fin_after_quiet(h: &mut H) {
    let at = h.ms();
    assert!(
        !h.out().iter().any(|o| o.has(TcpFlags::FIN)),
        "the online total reached: the FIN waits for the quiet after it"
    );
    let out = h.fire_until_output(10_000);
    assert!(out.iter().any(|o| o.has(TcpFlags::FIN)), "{out:?}");
    let quiet = cfg().answer_quiet.as_millis() as u64;
    assert_eq!(h.ms(), at + quiet, "the FIN goes after the quiet");
}

fn sent(out: &[Out]) -> usize {
    out.iter().map(|o| o.payload.len()).sum()
}

#[test]
fn streams_go_as_captured_without_waiting_for_answers() {
    let (mut h, mut off) = opened();
    // The online server answered in between (the client's ACK grows before each request).
    for (i, id) in [3u32, 5, 7, 9].into_iter().enumerate() {
        h.cap(data(off, 100 * (i as u32 + 1), &get(id)));
        off += 29;
    }
    let out = h.out();
    assert_eq!(
        sent(&out),
        off as usize,
        "every frame went with no answer: {out:?}"
    );
    let s = h.e.stats();
    assert_eq!((s.h2_sessions, s.h2_streams), (1, 5));
    assert_eq!(s.answer_timeouts, 0);
}

#[test]
fn the_same_bytes_without_the_preface_are_paced() {
    let mut h = H::new(cfg());
    h.establish();
    let first = b"GET / HTTP/1.1\r\n\r\n";
    h.cap(data(0, 0, first));
    h.cap(data(first.len() as u32, 100, &get(3)));
    assert_eq!(
        sent(&h.out()),
        first.len(),
        "lock-step: the second unit waits"
    );
    assert_eq!(h.e.stats().h2_sessions, 0);
}

#[test]
fn a_unit_boundary_inside_a_frame_moves_to_the_next_frame() {
    let meter = Meter::default();
    let now = std::time::Instant::now();
    let isn = SeqNum(CISN);
    let mut s = Stream::new(isn);
    let mut a = opening();
    let data_frame = frame(100, 0, 1, 1);
    a.extend(&data_frame[..40]);
    let mut b = data_frame[40..].to_vec();
    let at = a.len() + b.len();
    b.extend(get(3));
    s.push(
        isn.add(1),
        Some(SeqNum(OISN + 1)),
        &mut Payload::new(&a, &meter),
        false,
        1 << 20,
        now,
    );
    assert!(s.is_h2() && s.in_h2());
    // The ACK grew on a segment that starts inside the DATA frame.
    s.push(
        isn.add(1 + a.len() as u32),
        Some(SeqNum(OISN + 50)),
        &mut Payload::new(&b, &meter),
        false,
        1 << 20,
        now,
    );
    let bounds: Vec<SeqNum> = s.bounds.iter().map(|b| b.at).collect();
    assert_eq!(
        bounds,
        vec![isn.add(1 + at as u32)],
        "at the HEADERS of stream 3"
    );
    assert_eq!(s.h2_mut().map(|h| h.new_streams), Some(2));
}

#[test]
fn an_h2c_upgrade_waits_for_its_answer_then_goes_unpaced() {
    let mut h = H::new(cfg());
    h.establish();
    let up = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n";
    let n = up.len() as u32;
    h.cap(data(0, 0, up));
    let mut rest = PREFACE.to_vec();
    rest.extend(frame(6, 4, 0, 0));
    h.cap(data(n, 150, &rest)); // after the 101 and the answer on stream 1
    let m = n + rest.len() as u32;
    h.cap(data(m, 250, &get(3)));
    h.cap(data(m + 29, 350, &get(5)));
    assert_eq!(sent(&h.out()), up.len(), "the upgrade request first, alone");
    assert_eq!(h.e.stats().h2_sessions, 1);
    h.at(1);
    h.rec(resp(0, n, 150)); // the 101 and stream 1's answer
    assert_eq!(sent(&h.out()), rest.len() + 58, "then every frame at once");
}

#[test]
fn a_session_caught_mid_stream_is_not_recognised() {
    let mut h = H::new(cfg());
    // No handshake seen: the first packet is a request of a connection already open.
    h.cap(data(500, 1000, &get(3)));
    h.cap(data(529, 1100, &opening()));
    let _ = h.out();
    assert_eq!(h.e.stats().h2_sessions, 0);
}

#[test]
fn a_close_after_every_frame_was_taken_ends_nothing() {
    let (mut h, n) = opened();
    assert_eq!(sent(&h.out()), n as usize);
    // The test server takes it all, answers, and closes (GOAWAY, then FIN).
    h.rec(resp(0, n, 80));
    assert_eq!(close_ends(&mut h, server_fin(80, n)), 0);
}

#[test]
fn a_close_before_every_frame_was_taken_ends_the_session() {
    let (mut h, _) = opened();
    let _ = h.out();
    // The server took only the preface and closed.
    assert_eq!(close_ends(&mut h, server_fin(0, 24)), 1);
}

#[test]
fn the_fin_waits_until_the_test_server_answered_as_much_as_online() {
    let (mut h, n) = opened();
    h.cap(data(n, 100, &get(3)));
    // The client read 500 bytes of answers online, then closed.
    h.cap(client_fin(n + 29, 500));
    assert_eq!(sent(&h.out()), n as usize + 29);
    h.at(1);
    h.rec(resp(0, n + 29, 200));
    let out = h.out();
    assert!(
        !out.iter().any(|o| o.has(TcpFlags::FIN)),
        "200 of 500 bytes: the server still answers: {out:?}"
    );
    h.at(2);
    h.rec(resp(200, n + 29, 300));
    fin_after_quiet(&mut h);
}

#[test]
fn a_fin_after_every_stream_was_released_still_waits_for_the_answers() {
    let (mut h, n) = opened();
    h.cap(data(n, 100, &get(3)));
    assert_eq!(sent(&h.out()), n as usize + 29);
    // The test server took and answered both streams in part: both are released.
    h.at(1);
    h.rec(resp(0, n + 29, 200));
    let _ = h.out();
    // Only now the client's FIN (it had read 500 bytes online): the test server is still
    // answering (a gRPC server would cancel the calls still running if the FIN went now).
    h.at(2);
    h.cap(client_fin(n + 29, 500));
    assert!(
        !h.out().iter().any(|o| o.has(TcpFlags::FIN)),
        "200 of 500 bytes answered"
    );
    h.at(3);
    h.rec(resp(200, n + 29, 300));
    fin_after_quiet(&mut h);
}

#[test]
fn a_quiet_pause_of_the_test_server_does_not_close_an_h2_connection_early() {
    let (mut h, n) = opened();
    h.cap(data(n, 100, &get(3)));
    h.cap(client_fin(n + 29, 500));
    let _ = h.out();
    h.at(1);
    h.rec(resp(0, n + 29, 200));
    let _ = h.out();
    h.at(2);
    h.rec(resp(200, n + 29, 100));
    let _ = h.out();
    // Then quiet for longer than answer_quiet: the online total (500) is known, so the FIN
    // waits for it, or for answer_timeout.
    let out = h.fire_until_output(10_000);
    assert!(out.iter().any(|o| o.has(TcpFlags::FIN)), "{out:?}");
    let timeout = cfg().answer_timeout.as_millis() as u64;
    assert!(
        h.ms() >= timeout,
        "closed after {} ms, before the answer timeout ({timeout} ms)",
        h.ms()
    );
}

#[test]
fn the_fin_goes_once_the_test_server_is_quiet() {
    let mut h = H::new(cfg());
    h.establish();
    // After an h2c upgrade the online total is not known: the quiet rule closes.
    let up = b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\n\r\n";
    let n = up.len() as u32;
    h.cap(data(0, 0, up));
    let mut rest = PREFACE.to_vec();
    rest.extend(get(3));
    h.cap(data(n, 100, &rest));
    let m = n + rest.len() as u32;
    h.cap(client_fin(m, 300));
    let _ = h.out();
    h.at(1);
    h.rec(resp(0, n, 100));
    let _ = h.out();
    h.at(2);
    h.rec(resp(100, m, 150));
    assert!(!h.out().iter().any(|o| o.has(TcpFlags::FIN)));
    let out = h.fire_until_output(1000);
    assert!(out.iter().any(|o| o.has(TcpFlags::FIN)), "{out:?}");
    assert!(
        h.ms() < 1000,
        "by the quiet, not the answer timeout: {} ms",
        h.ms()
    );
}

#[test]
fn a_test_server_behind_the_online_one_holds_the_next_streams() {
    let (mut h, n) = opened();
    // Stream 3 was sent once the client had 40,000 answer bytes online, stream 5 at 41,000.
    h.cap(data(n, 40_000, &get(3)));
    h.cap(data(n + 29, 41_000, &get(5)));
    assert_eq!(
        sent(&h.out()),
        n as usize,
        "the test server sent nothing yet: stream 3 waits"
    );
    h.at(1);
    h.rec(resp(0, n, 30_000)); // 30,000 + 4 KB of slack < 40,000
    assert_eq!(sent(&h.out()), 0);
    h.at(2);
    h.rec(resp(30_000, n, 8_000)); // 38,000 + 4 KB >= 41,000: both go
    assert_eq!(sent(&h.out()), 58);
    assert_eq!(h.e.stats().sessions_failed.total(), 0);
}

#[test]
fn a_quiet_test_server_with_smaller_answers_does_not_hold_the_streams() {
    let (mut h, n) = opened();
    h.cap(data(n, 40_000, &get(3)));
    h.cap(data(n + 29, 80_000, &get(5)));
    let _ = h.out();
    h.at(1);
    h.rec(resp(0, n, 300)); // a 300-byte answer where online sent 40,000
    assert_eq!(sent(&h.out()), 0);
    let out = h.fire_until_output(1000);
    assert_eq!(sent(&out), 29, "stream 3 went after the quiet: {out:?}");
    let t = h.ms();
    assert!(t < 500, "by the quiet ({t} ms)");
    h.rec(resp(300, n + 29, 300));
    assert_eq!(
        sent(&h.out()),
        0,
        "stream 5 waits for its 40,000 bytes in turn"
    );
    let out = h.fire_until_output(1000);
    assert_eq!(sent(&out), 29);
}

#[test]
fn the_fin_waits_for_the_online_total_when_the_server_spoke_first() {
    // An HTTP/2 server sends its SETTINGS as soon as it accepts (a gRPC server does): a client
    // slower than that sends its preface acking them, a greeting. The online total still
    // counts from the handshake, and the FIN waits for it.
    let mut h = H::new(cfg());
    h.establish();
    let first = opening();
    let n = first.len() as u32;
    h.cap(data(0, 30, &first));
    assert_eq!(
        sent(&h.out()),
        0,
        "the preface waits for the test server's greeting"
    );
    h.rec(resp(0, 0, 30));
    assert_eq!(sent(&h.out()), n as usize, "then it goes");
    h.cap(data(n, 100, &get(3)));
    h.cap(client_fin(n + 29, 500));
    assert_eq!(sent(&h.out()), 29);
    h.at(1);
    h.rec(resp(30, n + 29, 270));
    assert!(
        !h.out().iter().any(|o| o.has(TcpFlags::FIN)),
        "300 of 500 bytes: the server still answers"
    );
    // Quiet for longer than answer_quiet: a gRPC server working on a call may be.
    let (outs, _) = h.run_timers(200);
    assert!(
        !outs.iter().any(|(_, o)| o.has(TcpFlags::FIN)),
        "300 of 500 bytes after a pause: the FIN still waits"
    );
    h.at(201);
    h.rec(resp(300, n + 29, 200));
    assert!(!h.out().iter().any(|o| o.has(TcpFlags::FIN)));
    // The test server's frames outnumber the online one's (its PINGs): it reached the online
    // total with the last answers still to come. They restart the quiet.
    h.at(231);
    h.rec(resp(500, n + 29, 60));
    fin_after_quiet(&mut h);
}
