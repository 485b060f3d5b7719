//! WebSocket sessions (a `GET` with `Upgrade: websocket`, `Stream::in_ws`): the opening request
//! waits for its answer (the `101`) as any other; the messages after it go as captured, since
//! the server pushes without being asked and no client message waits for an answer.

use super::*;
use crate::engine::stream::is_ws_upgrade;

const OPEN: &[u8] = b"GET /chat HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/// A masked client text frame of 8 payload bytes.
const MSG: &[u8] = b"\x81\x88\x01\x02\x03\x04abcdefgh";

fn sent(out: &[Out]) -> usize {
    out.iter().map(|o| o.payload.len()).sum()
}

#[test]
fn the_opening_request_is_recognised_in_any_case_and_only_whole() {
    assert!(is_ws_upgrade(OPEN));
    assert!(is_ws_upgrade(
        b"GET / HTTP/1.1\r\nupgrade:WebSocket \r\n\r\n"
    ));
    assert!(!is_ws_upgrade(b"GET / HTTP/1.1\r\nUpgrade: h2c\r\n\r\n"));
    assert!(
        !is_ws_upgrade(b"GET / HTTP/1.1\r\nUpgrade: websocket\r\n"),
        "the header block goes on"
    );
    assert!(!is_ws_upgrade(
        b"POST / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n"
    ));
    assert!(!is_ws_upgrade(
        b"GET / HTTP/1.1\r\nX-Upgrade: websocket\r\n\r\n"
    ));
    assert!(
        !is_ws_upgrade(b"GET / HTTP/1.1\r\n\r\nUpgrade: websocket\r\n\r\n"),
        "in the body, not a header"
    );
    assert!(!is_ws_upgrade(MSG));
    assert!(!is_ws_upgrade(b""));
}

#[test]
fn messages_after_the_opening_go_without_waiting_for_pushes() {
    let mut h = H::new(cfg()); // strict pacing: an HTTP/1 session would send one unit at a time
    h.establish();
    let n = OPEN.len() as u32;
    h.cap(data(0, 0, OPEN));
    // The online server answered 101 (129 bytes) and pushed between the client's messages.
    for i in 0..4u32 {
        h.cap(data(n + 14 * i, 129 + 40 * i, MSG));
    }
    assert_eq!(
        sent(&h.out()),
        OPEN.len(),
        "the opening request first, alone"
    );
    h.at(1);
    h.rec(resp(0, n, 129)); // the 101
    assert_eq!(
        sent(&h.out()),
        4 * MSG.len(),
        "then every message at once, no push awaited"
    );
    // Later messages go as captured too, while the test server pushes nothing.
    h.at(2);
    h.cap(data(n + 56, 400, MSG));
    assert_eq!(sent(&h.out()), MSG.len());
}

#[test]
fn an_http1_session_with_the_same_acks_is_paced() {
    let mut h = H::new(cfg());
    h.establish();
    let get = b"GET /a HTTP/1.1\r\nHost: a\r\n\r\n";
    let n = get.len() as u32;
    h.cap(data(0, 0, get));
    h.cap(data(n, 129, get));
    h.cap(data(2 * n, 258, get));
    assert_eq!(sent(&h.out()), get.len(), "lock-step: one request unit");
}
