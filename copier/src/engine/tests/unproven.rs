//! Unproven sessions (see "Unproven sessions" in the engine's documentation): a flood of
//! spoofed lone ACK and data segments from random ports, and forged handshakes, hold no slot
//! for long and never keep a real session out.

use super::*;
use crate::engine::UnprovenEnd;

const REQ: &[u8] = b"GET /real HTTP/1.1\r\n\r\n";

fn unproven_cfg(max_sessions: usize) -> EngineConfig {
    EngineConfig {
        max_sessions,
        unproven_timeout: Duration::from_secs(10),
        ..cfg()
    }
}

/// `n` spoofed segments, each from a new address and port, alternately data and pure ACKs
/// with arbitrary numbers (what a blind spoofer sends).
fn flood(h: &mut H, from: u32, n: u32) {
    for i in from..from + n {
        let src = SocketAddr::new(
            std::net::Ipv4Addr::from(0x0a00_0000 + i).into(),
            1024 + (i % 60_000) as u16,
        );
        let seq = i.wrapping_mul(2_654_435_761);
        let ack = i.wrapping_mul(40_503);
        let payload: &'static [u8] = if i % 2 == 0 { b"xxxxxxxxxxxxxxxx" } else { b"" };
        h.cap(Seg {
            src: Some(src),
            seq,
            ack,
            flags: PA,
            payload,
            ..BASE
        });
    }
}

/// The real client's session: handshake, a request, then its ACK of a 100-byte online answer.
fn real_session(h: &mut H) -> Vec<Out> {
    let mut out = h.establish();
    h.cap(data(0, 0, REQ));
    h.cap(Seg {
        seq: CISN + 1 + REQ.len() as u32,
        ack: OISN + 1 + 100,
        ..BASE
    });
    out.extend(h.out());
    out
}

#[test]
fn a_flood_of_lone_spoofed_segments_never_keeps_a_real_session_out() {
    let mut h = H::new(unproven_cfg(8));
    flood(&mut h, 0, 2_000);
    assert!(h.out().is_empty(), "no candidate started a test connection");
    let s = h.e.stats();
    assert_eq!(
        (s.sessions_started, s.drops.table_full),
        (0, 0),
        "candidates take each other's room"
    );
    assert_eq!(s.unproven_ended.get(UnprovenEnd::Shed), 2_000 - 8);
    assert_eq!(s.sessions_unproven, 8);
    // A real client amid the flood: its handshake sheds a candidate, and it proves itself.
    let out = real_session(&mut h);
    assert!(
        out.iter()
            .any(|o| o.tuple == test_tuple() && o.flags == TcpFlags::SYN),
        "{out:?}"
    );
    assert!(stream_of(&out, CISN + 1).starts_with(REQ), "{out:?}");
    flood(&mut h, 2_000, 2_000);
    let s = h.e.stats();
    assert_eq!(
        (s.sessions_started, s.sessions_proven, s.drops.table_full),
        (1, 1, 0)
    );
    assert!(s.sessions_failed.total() == 0, "{:?}", s.sessions_failed);
    // The flood goes on, the real session keeps its slot and carries its next request.
    h.cap(data(REQ.len() as u32, 100, REQ));
    h.rec(Seg {
        seq: TISN + 1,
        ack: CISN + 1 + 2 * REQ.len() as u32,
        ..BASE
    });
    let s = h.e.stats();
    assert_eq!((s.sessions_active, s.sessions_failed.total()), (1, 0));
}

#[test]
fn candidates_and_idle_unproven_sessions_end_after_the_unproven_timeout() {
    let mut h = H::new(unproven_cfg(100));
    flood(&mut h, 0, 10);
    // A forged handshake: SYN, then an ACK of it (its ACK number cannot be checked).
    h.at(1_000);
    let forged: SocketAddr = "203.0.113.9:5000".parse().unwrap();
    h.syn(Seg {
        src: Some(forged),
        ..SYN
    });
    let _ = h.out();
    h.rec_to(FourTuple::new(forged, target()), SYN_ACK);
    let _ = h.out();
    assert_eq!(h.e.stats().sessions_unproven, 11);
    let (outs, _) = h.run_timers(9_900);
    assert!(outs.is_empty());
    assert_eq!(
        h.e.stats().unproven_ended.get(UnprovenEnd::Timeout),
        0,
        "not before the timeout"
    );
    let _ = h.run_timers(10_100);
    assert_eq!(
        h.e.stats().unproven_ended.get(UnprovenEnd::Timeout),
        10,
        "the candidates, 10 s after they began, not 120"
    );
    let (outs, _) = h.run_timers(11_100);
    assert!(
        outs.iter()
            .any(|(t, o)| *t == 11_000 && o.has(TcpFlags::RST)),
        "the forged handshake's copy is reset: {outs:?}"
    );
    let s = h.e.stats();
    assert_eq!(
        (
            s.unproven_ended.get(UnprovenEnd::Timeout),
            s.sessions_failed.unproven_timeout
        ),
        (11, 1)
    );
    let _ = h.run_timers(30_000);
    assert_eq!(
        (h.e.stats().sessions_unproven, h.e.session_count()),
        (0, 0),
        "its connection lingered out"
    );
}

#[test]
fn a_proven_session_is_not_ended_by_the_unproven_timeout() {
    let mut h = H::new(unproven_cfg(100));
    let _ = real_session(&mut h);
    h.rec(Seg {
        seq: TISN + 1,
        ack: CISN + 1 + REQ.len() as u32,
        payload: &[0; 100],
        flags: PA,
        ..BASE
    });
    let _ = h.out();
    let _ = h.run_timers(60_000);
    let s = h.e.stats();
    assert_eq!(
        (
            s.sessions_active,
            s.sessions_proven,
            s.sessions_unproven,
            s.sessions_failed.total()
        ),
        (1, 1, 0, 0)
    );
}

#[test]
fn an_unproven_session_with_a_request_under_way_waits_for_it() {
    // A request sent (as an upload would be), not answered online yet: busy, so the timeout
    // waits until it is idle.
    let mut h = H::new(EngineConfig {
        answer_timeout: Duration::from_secs(60),
        ..unproven_cfg(100)
    });
    h.establish();
    h.cap(data(0, 0, REQ));
    let _ = h.out();
    let _ = h.run_timers(20_000);
    assert_eq!(
        (
            h.e.stats().sessions_active,
            h.e.stats().sessions_failed.total()
        ),
        (1, 0)
    );
}

#[test]
fn a_full_table_sheds_unproven_before_idle_proven_and_never_a_busy_proven_one() {
    let mut h = H::new(unproven_cfg(2));
    // A busy proven session: its request waits for the test handshake.
    let _ = real_session(&mut h);
    // A forged handshake: unproven and idle.
    h.at(10);
    h.syn(Seg {
        src: Some("203.0.113.9:5000".parse().unwrap()),
        ..SYN
    });
    let _ = h.out();
    // A new real handshake sheds the forged one, not the busy proven one.
    h.at(20);
    let src = Some("203.0.113.10:6000".parse().unwrap());
    h.syn(Seg { src, ..SYN });
    let s = h.e.stats();
    assert_eq!(
        (
            s.sessions_failed.unproven_shed,
            s.unproven_ended.get(UnprovenEnd::Shed),
            s.drops.table_full
        ),
        (1, 1, 0)
    );
    // The new one proves itself; the next handshake finds only busy proven sessions: refused.
    h.cap(Seg {
        src,
        ..data(0, 0, REQ)
    });
    h.cap(Seg {
        src,
        seq: CISN + 1 + REQ.len() as u32,
        ack: OISN + 2,
        ..BASE
    });
    h.syn(Seg {
        src: Some("203.0.113.11:7000".parse().unwrap()),
        ..SYN
    });
    let s = h.e.stats();
    assert_eq!(
        (s.sessions_shed, s.drops.table_full, s.sessions_proven),
        (1, 1, 2)
    );
}
