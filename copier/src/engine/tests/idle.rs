//! Idle sessions: a keep-alive connection quiet between requests for longer than
//! `session_timeout` is carried on (only `idle_timeout`, if set, ends it); a session waiting for
//! something still times out; room is made from idle sessions first (`idle_shed`).

use super::*;
use crate::engine::SESSION_COST;

fn from_port(port: u16) -> Option<SocketAddr> {
    Some(SocketAddr::new(client().ip(), port))
}

fn tuple_of(port: u16) -> FourTuple {
    FourTuple::new(SocketAddr::new(client().ip(), port), target())
}

const REQS: [&[u8]; 3] = [
    b"GET /1 HTTP/1.1\r\n\r\n",
    b"GET /2 HTTP/1.1\r\n\r\n",
    b"GET /3 HTTP/1.1\r\n\r\n",
];

/// Request `i` of [`REQS`] on the standard session, each answered online with 100 bytes.
fn request(i: usize) -> Seg {
    let off = REQS[..i].iter().map(|r| r.len() as u32).sum();
    data(off, 100 * i as u32, REQS[i])
}

/// The test server's answer to request `i`: it acks it and sends 100 bytes.
fn answer(i: usize) -> Seg {
    let end = REQS[..=i].iter().map(|r| r.len() as u32).sum();
    resp(100 * i as u32, end, 100)
}

#[test]
fn a_session_idle_for_several_timeouts_carries_every_later_request_once() {
    let mut h = H::new(EngineConfig {
        session_timeout: Duration::from_secs(1),
        ..cfg()
    });
    let mut sent = h.establish();
    for i in 0..REQS.len() {
        // Every request comes after 5 s of quiet: five session timeouts.
        h.at(5_000 * i as u64 + 100);
        h.cap(request(i));
        sent.extend(h.out());
        h.rec(answer(i));
        sent.extend(h.out());
        let (outs, _) = h.run_timers(5_000 * (i as u64 + 1));
        sent.extend(outs.into_iter().map(|(_, o)| o));
        let s = h.e.stats();
        assert_eq!(
            (
                s.sessions_failed.total(),
                s.sessions_active,
                h.e.session_count()
            ),
            (0, 1, 1),
            "still carried after request {i}"
        );
    }
    // No timer is left but the one armed while it was unproven (it finds nothing to do): an
    // idle session costs no wake-up.
    let _ = h.run_timers(3_700_000);
    assert_eq!(h.e.poll_timeout(), None);
    assert!(
        sent.iter().all(|o| o.tuple == test_tuple()),
        "one connection"
    );
    assert!(!sent
        .iter()
        .any(|o| o.has(TcpFlags::RST) || o.has(TcpFlags::FIN)));
    let data: Vec<&[u8]> = sent
        .iter()
        .filter(|o| !o.payload.is_empty())
        .map(|o| &o.payload[..])
        .collect();
    assert_eq!(data, REQS.to_vec(), "each request once, in order");
    let s = h.e.stats();
    assert_eq!(
        (s.units_sent, s.retransmissions, s.drops.after_close),
        (3, 0, 0)
    );
    // The client closes at last: completed.
    let fin = Seg {
        flags: TcpFlags(TcpFlags::FIN.0 | TcpFlags::ACK.0),
        payload: &[],
        ..request(3 - 1)
    };
    let end: u32 = REQS.iter().map(|r| r.len() as u32).sum();
    h.at(20_000);
    h.cap(Seg {
        seq: CISN + 1 + end,
        ack: OISN + 1 + 300,
        ..fin
    });
    assert!(h.out().iter().any(|o| o.has(TcpFlags::FIN)));
}

#[test]
fn a_session_waiting_for_an_answer_still_times_out() {
    let mut h = H::new(EngineConfig {
        session_timeout: Duration::from_secs(1),
        answer_timeout: Duration::from_secs(60),
        ..cfg()
    });
    h.establish();
    h.cap(request(0));
    let _ = h.out();
    // Acknowledged but never answered: the unit is outstanding.
    h.at(10);
    h.rec(resp(0, REQS[0].len() as u32, 0));
    let (outs, ctl) = h.run_timers(10_000);
    assert!(
        outs.iter()
            .any(|(t, o)| *t == 1_010 && o.has(TcpFlags::RST)),
        "{outs:?}"
    );
    let s = h.e.stats();
    assert_eq!(
        (s.sessions_failed.timeout, s.sessions_failed.idle_timeout),
        (1, 0)
    );
    assert_eq!(ctl, vec![RegEvent::Unregister(test_tuple())]);
}

#[test]
fn a_test_handshake_never_answered_still_times_out() {
    let mut h = H::new(EngineConfig {
        session_timeout: Duration::from_secs(1),
        max_retries: 100,
        ..cfg()
    });
    h.syn(SYN);
    let _ = h.out();
    let _ = h.run_timers(5_000);
    assert_eq!(
        h.e.stats().sessions_failed.timeout,
        1,
        "a SYN outstanding is not idle"
    );
}

#[test]
fn the_idle_timeout_ends_an_idle_session_and_its_next_request_starts_a_new_one() {
    let c = EngineConfig {
        session_timeout: Duration::from_secs(1),
        idle_timeout: Some(Duration::from_secs(10)),
        ..cfg()
    };
    let mut h = H::new(c);
    h.establish();
    h.cap(request(0));
    let _ = h.out();
    h.at(10);
    h.rec(answer(0));
    let _ = h.out();
    let (outs, ctl) = h.run_timers(9_000);
    assert!(
        outs.is_empty() && ctl.is_empty(),
        "idle: not ended by the session timeout"
    );
    let (outs, ctl) = h.run_timers(10_100);
    assert!(
        outs.iter()
            .any(|(t, o)| *t == 10_010 && o.has(TcpFlags::RST)),
        "{outs:?}"
    );
    assert!(ctl.is_empty(), "its connection lingers");
    let s = h.e.stats();
    assert_eq!(
        (
            s.sessions_failed.idle_timeout,
            s.sessions_failed.timeout,
            s.sessions_active
        ),
        (1, 0, 0)
    );
    // The client sends again while the old connection lingers (a keep-alive probe first): the
    // engine remembered where its stream stood, so the request starts a new session at once
    // (on another port: the old tuple still lingers), nothing skipped, nothing dropped.
    h.at(11_000);
    let next = CISN + 1 + REQS[0].len() as u32;
    h.cap(Seg {
        seq: next - 1,
        ack: OISN + 1 + 100,
        ..BASE
    });
    assert_eq!(h.e.session_count(), 1, "a probe starts nothing");
    h.cap(request(1));
    let s = h.e.stats();
    assert_eq!(
        (
            s.drops.after_close,
            s.drops.midstream_skip,
            s.sessions_midstream
        ),
        (0, 0, 1)
    );
    let out = h.out();
    let syn: Vec<&Out> = out.iter().filter(|o| o.flags == TcpFlags::SYN).collect();
    assert_eq!(syn.len(), 1, "{out:?}");
    let (t, isn) = (syn[0].tuple, syn[0].seq);
    assert_ne!(t, test_tuple(), "the old tuple still lingers: another port");
    assert_eq!(isn, next - 1);
    h.rec_to(
        t,
        Seg {
            ack: next,
            ..SYN_ACK
        },
    );
    let out = h.out();
    let data: Vec<&[u8]> = out
        .iter()
        .filter(|o| !o.payload.is_empty())
        .map(|o| &o.payload[..])
        .collect();
    assert_eq!(data, vec![REQS[1]]);
}

/// A session on `port` made idle: handshake, one request answered.
fn idle_session(h: &mut H, port: u16) {
    h.syn(Seg {
        src: from_port(port),
        ..SYN
    });
    let _ = h.out();
    h.rec_to(tuple_of(port), SYN_ACK);
    h.cap(Seg {
        src: from_port(port),
        ..request(0)
    });
    let _ = h.out();
    h.rec_to(tuple_of(port), answer(0));
    let _ = h.out();
    // The client acknowledges the online answer: proven (see "Unproven sessions").
    h.cap(Seg {
        src: from_port(port),
        seq: CISN + 1 + REQS[0].len() as u32,
        ack: OISN + 1 + 100,
        ..BASE
    });
    let until = h.ms() + 200;
    let _ = h.run_timers(until);
}

/// A session on `port` waiting for its test handshake (busy); what was sent meanwhile.
fn busy_session(h: &mut H, port: u16) -> Vec<Out> {
    h.syn(Seg {
        src: from_port(port),
        ..SYN
    });
    h.out()
}

/// The client on `port`, having sent `len` bytes, acknowledges an online answer: its session
/// is proven (see "Unproven sessions").
fn prove(h: &mut H, port: u16, len: u32) {
    h.cap(Seg {
        src: from_port(port),
        seq: CISN + 1 + len,
        ack: OISN + 2,
        ..BASE
    });
}

/// [`busy_session`] with a request of the client's answered online: busy and proven.
fn proven_busy_session(h: &mut H, port: u16) -> Vec<Out> {
    let mut out = busy_session(h, port);
    h.cap(Seg {
        src: from_port(port),
        ..request(0)
    });
    prove(h, port, REQS[0].len() as u32);
    out.extend(h.out());
    out
}

#[test]
fn a_full_table_makes_room_from_idle_sessions_idle_longest_first() {
    let mut h = H::new(EngineConfig {
        session_timeout: Duration::from_secs(60),
        max_sessions: 3,
        ..cfg()
    });
    h.at(0);
    idle_session(&mut h, 1001);
    h.at(1_000);
    proven_busy_session(&mut h, 1002);
    h.at(2_000);
    idle_session(&mut h, 1003);
    // The busy one is older than the second idle one, but idle ones go first.
    h.at(2_500);
    let out = proven_busy_session(&mut h, 1004);
    let s = h.e.stats();
    assert_eq!(
        (
            s.sessions_failed.idle_shed,
            s.sessions_shed,
            s.drops.table_full
        ),
        (1, 1, 0)
    );
    assert!(
        out.iter()
            .any(|o| o.tuple == tuple_of(1001) && o.has(TcpFlags::RST)),
        "{out:?}"
    );
    h.at(2_600);
    let out = proven_busy_session(&mut h, 1005);
    assert_eq!(h.e.stats().sessions_failed.idle_shed, 2);
    assert!(out
        .iter()
        .any(|o| o.tuple == tuple_of(1003) && o.has(TcpFlags::RST)));
    // No idle session left, and a busy proven one is never shed: the next one is not copied
    // (its handshake ACK, then its request and ACK as mid-stream candidates, all refused).
    h.at(2_700);
    let _ = proven_busy_session(&mut h, 1006);
    let s = h.e.stats();
    assert_eq!(
        (
            s.sessions_failed.idle_shed,
            s.drops.table_full,
            s.sessions_failed.memory
        ),
        (2, 3, 0)
    );
    // The shed session's client sends again: a new session from that request on (it sheds
    // no one: the others are busy, but the shed ones linger and do not count), not a drop.
    h.cap(Seg {
        src: from_port(1001),
        ..request(1)
    });
    let s = h.e.stats();
    assert_eq!(
        (
            s.drops.after_close,
            s.drops.midstream_skip,
            s.drops.table_full
        ),
        (0, 0, 4)
    );
}

#[test]
fn over_max_memory_idle_sessions_are_shed_before_older_busy_ones() {
    use crate::engine::chunk::{BUF_OVERHEAD, SLOT_OVERHEAD};
    const { assert!(SESSION_COST > 1_500, "the figures below need it") };
    let ov = BUF_OVERHEAD + SLOT_OVERHEAD;
    let max = 3 * SESSION_COST + 8_000 + 2 * ov - 1;
    let mut h = H::new(EngineConfig {
        session_timeout: Duration::from_secs(60),
        max_memory: max,
        ..cfg()
    });
    // Busy and oldest: its 4000 bytes wait for a test handshake that does not come.
    let _ = busy_session(&mut h, 1001);
    h.cap(Seg {
        src: from_port(1001),
        ..data(0, 0, &[1; 4000])
    });
    prove(&mut h, 1001, 4000);
    h.at(1_000);
    idle_session(&mut h, 1002);
    h.at(2_000);
    let _ = busy_session(&mut h, 1003);
    assert_eq!(h.e.stats().sessions_shed, 0);
    h.cap(Seg {
        src: from_port(1003),
        ..data(0, 0, &[1; 4000])
    });
    prove(&mut h, 1003, 4000);
    let s = h.e.stats();
    assert_eq!(
        (
            s.sessions_failed.idle_shed,
            s.sessions_failed.memory,
            s.sessions_shed
        ),
        (1, 0, 1)
    );
    let out = h.out();
    let rst: Vec<u16> = out
        .iter()
        .filter(|o| o.has(TcpFlags::RST))
        .map(|o| o.tuple.client.port())
        .collect();
    assert_eq!(rst, vec![1002], "the idle one, not the older busy one");
}

#[test]
fn where_sessions_ended_idle_stood_is_counted_and_bounded() {
    use crate::engine::RESUME_COST;
    let c = EngineConfig {
        session_timeout: Duration::from_secs(60),
        idle_timeout: Some(Duration::from_secs(1)),
        max_sessions: 2,
        ..cfg()
    };
    let mut h = H::new(c);
    for (i, port) in [1001u16, 1002, 1003].into_iter().enumerate() {
        h.at(100 * i as u64);
        idle_session(&mut h, port);
    }
    // The third shed the first to make room; the idle timeout ends the other two.
    let _ = h.run_timers(20_000);
    let s = h.e.stats();
    assert_eq!(
        (s.sessions_failed.idle_shed, s.sessions_failed.idle_timeout),
        (1, 2)
    );
    assert_eq!(h.e.session_count(), 0, "their connections lingered out");
    assert_eq!(
        h.e.memory_used(),
        2 * RESUME_COST,
        "at most max_sessions places kept, the oldest forgotten"
    );
    // The forgotten one starts mid-stream (skipped to the next boundary); a kept one at once.
    h.cap(Seg {
        src: from_port(1001),
        ..request(1)
    });
    h.cap(Seg {
        src: from_port(1003),
        ..request(1)
    });
    let s = h.e.stats();
    assert_eq!((s.drops.midstream_skip, s.sessions_started), (1, 4));
    assert_eq!(
        h.e.memory_used() - h.e.buffered_bytes(),
        RESUME_COST + 2 * SESSION_COST
    );
}

#[test]
fn at_the_capture_end_idle_sessions_are_open_not_failed_and_busy_ones_are_unfinished() {
    let mut h = H::new(cfg());
    idle_session(&mut h, 1001);
    let _ = busy_session(&mut h, 1002);
    assert_eq!(
        (h.e.session_count(), h.e.unfinished_sessions()),
        (2, 1),
        "only the busy one may still go on"
    );
    h.e.close_at_capture_end(h.now);
    let s = h.e.stats();
    assert_eq!(
        (
            s.sessions_open_at_end,
            s.sessions_failed.shutdown,
            s.sessions_completed
        ),
        (1, 1, 0)
    );
    assert_eq!(s.sessions_failed.total(), 1, "the idle one is no failure");
    assert_eq!(h.e.session_count(), 0);
}

#[test]
fn close_all_counts_idle_sessions_as_shut_down() {
    let mut h = H::new(cfg());
    idle_session(&mut h, 1001);
    assert_eq!(h.e.unfinished_sessions(), 0);
    h.e.close_all(h.now);
    let s = h.e.stats();
    assert_eq!((s.sessions_open_at_end, s.sessions_failed.shutdown), (0, 1));
}

/// The test server restarts under a keep-alive session: it resets the copy's connection, then
/// refuses the new one the next request opens (it is still down). The client's connection goes
/// on online: the session fails (`refused`), and the client's next request, which acks more
/// (a new request unit), starts a new session at once; its own restart is not waited for.
#[test]
fn after_the_test_server_refused_a_keep_alive_copy_the_clients_next_request_resumes_it() {
    let mut h = H::default();
    h.establish();
    h.cap(request(0));
    let _ = h.out();
    h.rec(answer(0));
    let _ = h.out();
    // The test server goes down: its connection is reset.
    let end0 = REQS[0].len() as u32;
    h.rec(Seg {
        flags: TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0),
        ..resp(100, end0, 0)
    });
    let _ = h.out();
    // The client's next request (proving the session: it acks the online answer) reconnects,
    // and the test server, still down, refuses.
    h.at(100);
    h.cap(request(1));
    let out = h.out();
    let syn = out
        .iter()
        .find(|o| o.flags == TcpFlags::SYN)
        .expect("a new connection for request 1");
    let t1 = syn.tuple;
    assert_ne!(t1, test_tuple());
    h.rec_to(
        t1,
        Seg {
            seq: 0,
            ack: syn.seq.wrapping_add(1),
            flags: TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0),
            ..BASE
        },
    );
    let s = h.e.stats();
    assert_eq!(
        (s.sessions_failed.refused, s.sessions_active),
        (1, 0),
        "{s:?}"
    );
    // A segment continuing request 1's unit (it acks no more) does not resume the copy there.
    // Then request 2, after request 1 was answered online: a new session on a new tuple, with
    // exactly request 2.
    h.at(200);
    let next = CISN + 1 + end0 + REQS[1].len() as u32;
    h.cap(request(2));
    assert_eq!(
        h.e.stats().sessions_midstream,
        1,
        "resumed as at a request boundary"
    );
    let out = h.out();
    let syn: Vec<&Out> = out.iter().filter(|o| o.flags == TcpFlags::SYN).collect();
    assert_eq!(syn.len(), 1, "{out:?}");
    let (t2, isn) = (syn[0].tuple, syn[0].seq);
    assert_eq!(isn, next - 1);
    h.rec_to(
        t2,
        Seg {
            ack: next,
            ..SYN_ACK
        },
    );
    let data: Vec<Vec<u8>> = h
        .out()
        .iter()
        .filter(|o| !o.payload.is_empty())
        .map(|o| o.payload.to_vec())
        .collect();
    assert_eq!(data, vec![REQS[2].to_vec()]);
}

/// After the same failure, a segment that acks no more than the last unit did continues that
/// unit (the rest of an upload): it does not resume the copy mid-request; the session caught
/// there must prove itself like any other caught mid-stream.
#[test]
fn after_a_refused_copy_the_rest_of_the_same_request_does_not_resume_it() {
    let mut h = H::default();
    h.establish();
    h.cap(request(0));
    let _ = h.out();
    h.rec(answer(0));
    let end0 = REQS[0].len() as u32;
    h.rec(Seg {
        flags: TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0),
        ..resp(100, end0, 0)
    });
    let _ = h.out();
    h.at(100);
    h.cap(request(1));
    let out = h.out();
    let syn = out
        .iter()
        .find(|o| o.flags == TcpFlags::SYN)
        .expect("a new connection for request 1");
    let t1 = syn.tuple;
    h.rec_to(
        t1,
        Seg {
            seq: 0,
            ack: syn.seq.wrapping_add(1),
            flags: TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0),
            ..BASE
        },
    );
    assert_eq!(h.e.stats().sessions_failed.refused, 1);
    // More bytes of request 1's unit, acking what request 1 acked.
    h.at(200);
    let off = end0 + REQS[1].len() as u32;
    h.cap(data(off, 100, b"more of the same request"));
    let out = h.out();
    assert!(
        !out.iter().any(|o| !o.payload.is_empty()),
        "nothing of a unit's middle is sent: {out:?}"
    );
    assert!(
        !out.iter()
            .any(|o| o.flags == TcpFlags::SYN && o.seq == CISN + off),
        "not resumed there: {out:?}"
    );
}
