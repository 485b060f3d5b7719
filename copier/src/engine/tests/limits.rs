//! Bounds: memory shedding, the per-session cap, out-of-order cap, idle timeouts, odd input.

use super::*;
use proptest::prelude::*;

fn from_port(port: u16) -> Option<SocketAddr> {
    Some(SocketAddr::new(client().ip(), port))
}

#[test]
fn oldest_idle_sessions_are_shed_over_max_memory() {
    // Each session also costs SESSION_COST: room for three of them on top.
    let mut h = H::new(EngineConfig {
        max_memory: 10_000 + 3 * crate::engine::SESSION_COST,
        ..cfg()
    });
    for (i, port) in [1001u16, 1002, 1003].into_iter().enumerate() {
        h.at(i as u64 * 10);
        h.syn(Seg {
            src: from_port(port),
            ..SYN
        });
        assert_eq!(h.out().len(), 1, "our SYN");
        // No SYN-ACK comes: the data stays buffered.
        h.cap(Seg {
            src: from_port(port),
            ..data(0, 0, &[1; 4000])
        });
    }
    use crate::engine::chunk::{BUF_OVERHEAD, SLOT_OVERHEAD};
    assert_eq!(
        h.e.buffered_bytes(),
        8000 + 2 * (BUF_OVERHEAD + SLOT_OVERHEAD),
        "payload and bookkeeping"
    );
    let s = h.e.stats();
    // None of them proved itself (no online answer acknowledged): shed as unproven.
    assert_eq!(
        (
            s.sessions_failed.unproven_shed,
            s.sessions_shed,
            s.sessions_active
        ),
        (1, 1, 2)
    );
    let out = h.out();
    let rst: Vec<&Out> = out.iter().filter(|o| o.has(TcpFlags::RST)).collect();
    assert_eq!(rst.len(), 1);
    assert_eq!(
        (rst[0].tuple.client.port(), rst[0].seq),
        (1001, CISN + 1),
        "the oldest one"
    );
}

#[test]
fn per_session_cap_fails_the_session() {
    let mut h = H::new(EngineConfig {
        per_session_cap: 5000,
        ..cfg()
    });
    h.syn(SYN);
    let _ = h.out();
    h.cap(data(0, 0, &[1; 3000]));
    h.cap(data(3000, 0, &[1; 3000]));
    let s = h.e.stats();
    assert_eq!((s.sessions_failed.buffer_cap, s.drops.buffer_cap), (1, 1));
    assert_eq!(h.e.buffered_bytes(), 0);
    let out = h.out();
    assert_eq!((out.len(), out[0].flags), (1, TcpFlags::RST));
    h.cap(data(6000, 0, &[1; 10]));
    assert_eq!(h.e.stats().drops.after_close, 1);
}

#[test]
fn out_of_order_beyond_the_cap_is_dropped() {
    let mut h = H::new(EngineConfig {
        max_out_of_order: 100,
        ..cfg()
    });
    h.establish();
    h.cap(data(10, 0, &[1; 80]));
    h.cap(data(200, 0, &[1; 80]));
    assert_eq!(h.e.stats().drops.out_of_order_overflow, 1);
    use crate::engine::chunk::{BUF_OVERHEAD, SLOT_OVERHEAD};
    assert_eq!(
        h.e.buffered_bytes(),
        80 + BUF_OVERHEAD + SLOT_OVERHEAD,
        "one held segment"
    );
    h.cap(data(0, 0, &[1; 10]));
    assert_eq!(stream_of(&h.out(), CISN + 1), vec![1; 90]);
}

#[test]
fn idle_sessions_end_after_the_idle_timeout_with_a_reset() {
    // Established, nothing sent: idle. The session timeout (1 s) does not end it.
    let c = EngineConfig {
        session_timeout: Duration::from_secs(1),
        idle_timeout: Some(Duration::from_secs(10)),
        ..cfg()
    };
    let mut h = H::new(c);
    h.establish();
    let (outs, ctl) = h.run_timers(60_000);
    let v: Vec<(u64, TcpFlags)> = outs.iter().map(|(t, o)| (*t, o.flags)).collect();
    let ra = TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0);
    assert_eq!(
        v,
        vec![
            (10_000, ra),
            (10_200, ra),
            (10_600, ra),
            (11_400, ra),
            (13_000, ra)
        ],
        "RST, repeated with backoff in case it is lost"
    );
    assert_eq!(
        (
            h.e.stats().sessions_failed.idle_timeout,
            h.e.stats().sessions_failed.timeout
        ),
        (1, 0)
    );
    assert_eq!(ctl, vec![RegEvent::Unregister(test_tuple())]);
    assert_eq!(h.e.session_count(), 0);
}

#[test]
fn sessions_waiting_to_synchronise_expire_quietly() {
    let mut h = H::new(EngineConfig {
        session_timeout: Duration::from_secs(10),
        ..cfg()
    });
    h.cap(data(0, 0, b"mid-request"));
    assert_eq!(h.e.session_count(), 1);
    while h.fire(60_000) {}
    assert_eq!(h.e.session_count(), 0);
    assert!(h.out().is_empty());
    assert_eq!(h.e.stats().sessions_failed.total(), 0);
}

#[test]
fn a_new_syn_on_a_live_session_supersedes_it() {
    let mut h = H::default();
    h.establish();
    h.cap(SYN); // retransmission: ignored
    assert!(h.out().is_empty());
    assert_eq!(h.e.stats().drops.client_retransmission, 1);
    h.syn(Seg {
        seq: CISN + 999_999,
        ..SYN
    });
    let ev = h.control();
    let out = h.packets();
    assert_eq!(h.e.stats().sessions_failed.superseded, 1);
    assert!(out
        .iter()
        .any(|o| o.has(TcpFlags::RST) && o.tuple == test_tuple()));
    let syn = out
        .iter()
        .find(|o| o.flags == TcpFlags::SYN)
        .expect("new SYN");
    assert_eq!(syn.seq, CISN + 999_999);
    assert_ne!(syn.tuple, test_tuple(), "the old tuple is still lingering");
    assert_eq!(ev, vec![RegEvent::Register(syn.tuple)]);
}

#[test]
fn foreign_packets_and_records_are_counted() {
    let mut h = H::default();
    h.cap(Seg {
        dst: Some("192.0.2.1:443".parse().unwrap()),
        ..SYN
    });
    h.cap(Seg {
        seq: 5,
        flags: TcpFlags::RST,
        ..BASE
    });
    h.cap(Seg {
        seq: 5,
        flags: TcpFlags(TcpFlags::FIN.0 | TcpFlags::ACK.0),
        ..BASE
    });
    h.e.handle_captured(h.now, &[0x45, 0, 0]);
    h.rec(SYN_ACK);
    h.e.handle_record(
        h.now,
        &Record {
            orig_len: 3,
            headers: vec![1, 2, 3],
            payload: vec![],
            stamp: 0,
        },
    );
    let s = h.e.stats();
    assert_eq!(
        (s.drops.no_map, s.drops.no_session, s.drops.malformed),
        (1, 2, 1)
    );
    assert_eq!(
        (
            s.drops.record_unknown,
            s.drops.record_malformed,
            s.records_received
        ),
        (1, 1, 2)
    );
    assert_eq!(h.e.session_count(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any bytes, and any mangling of real packets and records, are handled without panic.
    #[test]
    fn never_panics(junk in proptest::collection::vec(any::<u8>(), 0..200),
                    flips in proptest::collection::vec((0usize..120, any::<u8>()), 0..6),
                    cut in 0usize..200) {
        let mut h = H::default();
        h.e.handle_captured(h.now, &junk);
        h.e.handle_record(h.now, &Record { orig_len: junk.len() as u32, headers: junk.clone(), payload: junk.clone(), stamp: 0 });
        for base in [build(&SYN, client(), ONLINE.parse().unwrap()), build(&data(0, 0, b"abcdef"), client(), ONLINE.parse().unwrap())] {
            let mut p = base.clone();
            for &(i, b) in &flips {
                if let Some(x) = p.get_mut(i) { *x ^= b; }
            }
            h.e.handle_captured(h.now, &p);
            h.e.handle_captured(h.now, &p[..cut.min(p.len())]);
        }
        let mut r = build(&SYN_ACK, target(), client());
        for &(i, b) in &flips {
            if let Some(x) = r.get_mut(i) { *x ^= b; }
        }
        h.e.handle_record(h.now, &Record { orig_len: r.len() as u32, headers: r[..cut.min(r.len())].to_vec(), payload: vec![], stamp: 0 });
        let _ = h.out();
        while h.fire(1_000_000) { let _ = h.out(); }
    }
}

/// After a peak of sessions the engine gives its room back: once they fell below a quarter of
/// the slab, the slab loses its free tail and the tables shrink; sessions started afterwards
/// work as before, and stale references to a dropped slot (timers, the ready queue) do not
/// reach the session that takes its place.
#[test]
fn tables_shrink_after_a_peak_of_sessions() {
    let mut h = H::default();
    let started = |i: u32| SocketAddr::new(client().ip(), 20_000 + i as u16);
    for i in 0..4000 {
        h.e.handle_captured(
            h.now,
            &build(
                &data(0, 0, b"GET / HTTP/1.1\r\n\r\n"),
                started(i),
                ONLINE.parse().unwrap(),
            ),
        );
    }
    h.control();
    h.packets();
    assert_eq!(h.e.session_count(), 4000);
    assert_eq!(h.e.slots.len(), 4000);
    let (slots_cap, keys_cap) = (h.e.slots.capacity(), h.e.by_key.capacity());
    assert!(keys_cap >= 4000);
    h.e.close_all(h.now);
    h.packets();
    h.control();
    assert_eq!(h.e.session_count(), 0);
    h.at(10);
    h.e.handle_timeout(h.now);
    assert!(
        h.e.slots.is_empty() && h.e.slots.capacity() < slots_cap,
        "{} of {slots_cap}",
        h.e.slots.capacity()
    );
    assert!(
        h.e.by_key.capacity() < keys_cap / 4 && h.e.sh.tuples.by_test.capacity() < keys_cap / 4
    );
    assert!(h.e.free.is_empty() && h.e.timers.is_empty());
    // New sessions take fresh slots, with generations past every dropped one.
    for i in 0..10 {
        h.e.handle_captured(
            h.now,
            &build(
                &data(0, 0, b"GET / HTTP/1.1\r\n\r\n"),
                started(i),
                ONLINE.parse().unwrap(),
            ),
        );
    }
    assert_eq!(h.e.session_count(), 10);
    assert!(h.e.slots.iter().all(|x| x.gen >= 1 && x.s.is_some()));
    assert_eq!(h.e.by_key.len(), 10);
    for &i in &h.e.by_key {
        assert!(h.e.live(crate::engine::SlotRef {
            idx: i,
            gen: h.e.slots[i as usize].gen
        }));
        // A reference from before the compaction does not reach the new session.
        assert!(!h.e.live(crate::engine::SlotRef { idx: i, gen: 0 }));
    }
}

/// Sessions that come and go at a steady count (no peak to compact after) do not leave the
/// timer heap holding the entries they no longer need: it is purged of them, and stays within
/// about twice the sessions; the sessions still time out as before.
#[test]
fn timer_heap_stays_near_the_sessions_while_they_come_and_go() {
    const FA: TcpFlags = TcpFlags(TcpFlags::FIN.0 | TcpFlags::ACK.0);
    let mut h = H::default();
    let (mut most_timers, mut most_sessions) = (0, 0);
    for i in 0..20_000u32 {
        let port = 10_000 + i as u16;
        let (src, t) = (
            from_port(port),
            FourTuple::new(from_port(port).unwrap(), target()),
        );
        h.at(u64::from(i));
        h.e.handle_timeout(h.now);
        h.cap(Seg { src, ..SYN });
        h.cap(Seg { src, ..HS_ACK });
        let _ = h.out();
        h.rec_to(t, SYN_ACK);
        h.cap(Seg {
            src,
            ..data(0, 0, b"req")
        });
        let _ = h.out();
        h.rec_to(t, resp(0, 3, 10));
        h.rec_to(
            t,
            Seg {
                seq: TISN + 11,
                ack: CISN + 4,
                flags: FA,
                ..BASE
            },
        );
        h.cap(Seg {
            src,
            seq: CISN + 4,
            ack: OISN + 11,
            flags: FA,
            ..BASE
        });
        let _ = h.out();
        h.rec_to(
            t,
            Seg {
                seq: TISN + 12,
                ack: CISN + 5,
                flags: A,
                ..BASE
            },
        );
        let _ = h.out();
        most_timers = most_timers.max(h.e.timers.len());
        most_sessions = most_sessions.max(h.e.session_count());
    }
    assert_eq!(h.e.stats().sessions_completed, 20_000);
    assert!(
        most_timers <= 2 * most_sessions + crate::engine::timers::PURGE_MIN,
        "the heap held {most_timers} entries at most, for {most_sessions} sessions at most"
    );
    // Every one of them still ends: lingering, then unregistered by its timer.
    let _ = h.run_timers(120_000);
    assert_eq!(h.e.session_count(), 0);
}

#[test]
fn behind_no_session_starts_and_a_left_out_one_stays_out_whole() {
    use crate::engine::OverloadReason;
    let mut h = H::new(EngineConfig {
        pace_requests: false,
        ..cfg()
    });
    // A session copied before the overload goes on.
    let old = from_port(1001);
    h.cap(Seg { src: old, ..SYN });
    h.cap(Seg { src: old, ..HS_ACK });
    assert_eq!(h.out().len(), 1, "the first session's SYN");
    h.e.set_overload(h.now, Some(OverloadReason::CaptureBacklog));
    assert_eq!(h.e.overloaded(), Some(OverloadReason::CaptureBacklog));
    // A session whose handshake completes while behind is left out, with its data.
    h.cap(SYN);
    h.cap(HS_ACK);
    h.cap(data(
        0,
        0,
        b"POST /upload HTTP/1.1\r\nContent-Length: 10\r\n\r\n01234",
    ));
    assert!(h.out().is_empty(), "nothing of it is sent");
    // Caught up: the rest of the left-out session is not copied either (no part of a session).
    h.e.set_overload(h.now, None);
    h.cap(data(48, 0, b"56789"));
    h.cap(data(53, 0, b"GET / HTTP/1.1\r\n\r\n"));
    assert!(h.out().is_empty(), "the left-out session stays out");
    let s = h.e.stats();
    assert_eq!(s.sessions_shed_overload.capture_backlog, 1);
    assert_eq!(
        s.drops.overload, 4,
        "its handshake ACK and three data segments"
    );
    assert_eq!(s.sessions_started, 1, "only the one copied before");
    // The client starts over on that port: a new session, copied.
    h.cap(Seg {
        seq: CISN + 5000,
        ..SYN
    });
    h.cap(Seg {
        seq: CISN + 5001,
        ..HS_ACK
    });
    let out = h.out();
    assert!(
        out.iter()
            .any(|o| o.has(TcpFlags::SYN) && o.tuple.client.port() == 40000),
        "{out:?}"
    );
    assert_eq!(h.e.stats().sessions_started, 2);
}

#[test]
fn far_behind_the_sessions_that_sent_nothing_are_given_up() {
    use crate::engine::OverloadReason;
    let mut h = H::new(EngineConfig {
        pace_requests: false,
        ..cfg()
    });
    // One session sends its request; another has only sent its SYN (no SYN-ACK record yet).
    h.establish();
    h.cap(data(0, 0, b"GET / HTTP/1.1\r\n\r\n"));
    assert!(h.out().iter().any(|o| !o.payload.is_empty()));
    let young = from_port(1001);
    h.cap(Seg { src: young, ..SYN });
    h.cap(Seg {
        src: young,
        ..HS_ACK
    });
    h.cap(Seg {
        src: young,
        ..data(0, 0, b"POST /upload HTTP/1.1\r\n")
    });
    assert!(h.out().iter().all(|o| o.payload.is_empty()), "only its SYN");
    assert_eq!(h.e.give_up_unsent(h.now, OverloadReason::CaptureBacklog), 1);
    let s = h.e.stats();
    assert_eq!(
        (
            s.sessions_failed.overload,
            s.sessions_shed_overload.capture_backlog,
            s.sessions_active
        ),
        (1, 1, 1)
    );
    // Nothing more of it is sent (a RST for its SYN at most); the other goes on.
    assert!(h
        .out()
        .iter()
        .all(|o| o.payload.is_empty() && o.tuple.client.port() == 1001));
    assert_eq!(h.e.give_up_unsent(h.now, OverloadReason::CaptureBacklog), 0);
    // Its later packets start nothing again, even once the copier caught up and the session
    // left the table: counted once.
    h.e.set_overload(h.now, None);
    h.at(60_000);
    let _ = h.run_timers(60_000);
    h.cap(Seg {
        src: young,
        ..data(23, 0, b"Content-Length: 0\r\n\r\n")
    });
    assert!(h
        .out()
        .iter()
        .all(|o| o.tuple.client.port() != 1001 || o.payload.is_empty()));
    let s = h.e.stats();
    assert_eq!(
        (s.sessions_shed_overload.total(), s.sessions_started),
        (1, 2)
    );
}

/// An upload whose body the capture lost part of (the kernel dropped packets): the copy
/// already sent the body's start, so the test server must get a RST before anything after the
/// hole (its application takes no cut request), and the session is counted as shed (`hole`)
/// and kept out, however many copies it had.
#[test]
fn a_hole_the_capture_lost_gives_the_session_up_before_anything_after_it() {
    let mut h = H::new(EngineConfig {
        pace_requests: false,
        copies: 2,
        ..cfg()
    });
    h.cap(SYN);
    h.cap(HS_ACK);
    let syns: Vec<FourTuple> = h
        .out()
        .iter()
        .filter(|o| o.has(TcpFlags::SYN))
        .map(|o| o.tuple)
        .collect();
    assert_eq!(syns.len(), 2, "two copies");
    for (i, &t) in syns.iter().enumerate() {
        h.rec_to(
            t,
            Seg {
                ack: CISN + 1,
                seq: 9000 + i as u32,
                ..SYN_ACK
            },
        );
    }
    let _ = h.out();
    // "POST ... Content-Length: 12\r\n\r\nAAAA" goes out; "BBBB" is lost; "CCCC" and the FIN wait.
    let head = b"POST /upload HTTP/1.1\r\nContent-Length: 12\r\n\r\nAAAA";
    h.at(10);
    h.cap(data(0, 0, head));
    assert_eq!(h.out().iter().filter(|o| o.payload == head).count(), 2);
    h.e.note_capture_loss(h.now);
    h.at(11);
    let n = head.len() as u32;
    h.cap(data(n + 4, 0, b"CCCC"));
    h.cap(Seg {
        flags: TcpFlags::FIN | A,
        ..data(n + 8, 0, b"")
    });
    assert!(h.out().is_empty(), "nothing after the hole yet");
    let (outs, _) = h.run_timers(2000);
    for &t in &syns {
        let rst = outs
            .iter()
            .find(|(_, o)| o.tuple == t && o.has(TcpFlags::RST));
        assert!(
            rst.is_some_and(|(at, _)| *at <= 300),
            "each copy reset at GAP_WAIT: {outs:?}"
        );
    }
    assert!(
        !outs
            .iter()
            .any(|(_, o)| o.payload.windows(4).any(|w| w == b"CCCC") || o.has(TcpFlags::FIN)),
        "{outs:?}"
    );
    let s = h.e.stats();
    assert_eq!(
        s.sessions_shed_overload.hole, 1,
        "counted once for its two copies: {s:?}"
    );
    assert_eq!(
        (s.sessions_failed.overload, s.sessions_completed),
        (2, 0),
        "{s:?}"
    );
    // Later packets of the session start nothing (it is left out whole).
    h.at(60_000);
    let _ = h.run_timers(60_000);
    h.cap(Seg {
        flags: A,
        ..data(n + 9, 0, b"")
    });
    h.cap(data(n + 9, 0, b"GET / HTTP/1.1\r\n\r\n"));
    assert!(h.out().is_empty());
    let s = h.e.stats();
    assert_eq!(
        (s.sessions_shed_overload.total(), s.sessions_started),
        (1, 2),
        "{s:?}"
    );
}

/// A hole with no capture loss about it (a segment the client will send again) is waited for
/// as before: the session is not given up, and the retransmission completes the copy.
#[test]
fn a_hole_without_capture_loss_is_not_given_up() {
    let mut h = H::new(EngineConfig {
        pace_requests: false,
        ..cfg()
    });
    h.e.note_capture_loss(h.now); // long before the hole
    h.at(20_000);
    h.establish();
    let head = b"POST /upload HTTP/1.1\r\nContent-Length: 12\r\n\r\nAAAA";
    let n = head.len() as u32;
    h.cap(data(0, 0, head));
    h.cap(data(n + 4, 0, b"CCCC"));
    let (outs, _) = h.run_timers(21_000);
    assert!(!outs.iter().any(|(_, o)| o.has(TcpFlags::RST)), "{outs:?}");
    h.cap(data(n, 0, b"BBBB"));
    let sent = h.out();
    assert!(
        sent.iter()
            .any(|o| o.payload.windows(8).any(|w| w == b"BBBBCCCC")),
        "{sent:?}"
    );
    let s = h.e.stats();
    assert_eq!(
        (s.sessions_shed_overload.total(), s.sessions_failed.total()),
        (0, 0),
        "{s:?}"
    );
}

/// The capture loss is noticed only after the hole is `GAP_WAIT` old and the client went quiet:
/// the hole is looked at again, and the session given up then.
#[test]
fn a_capture_loss_noticed_late_still_gives_the_session_up() {
    let mut h = H::new(EngineConfig {
        pace_requests: false,
        ..cfg()
    });
    h.establish();
    let head = b"POST /upload HTTP/1.1\r\nContent-Length: 12\r\n\r\nAAAA";
    let n = head.len() as u32;
    h.cap(data(0, 0, head));
    h.cap(data(n + 4, 0, b"CCCC"));
    h.cap(Seg {
        flags: TcpFlags::FIN | A,
        ..data(n + 8, 0, b"")
    });
    let (outs, _) = h.run_timers(700);
    assert!(
        !outs.iter().any(|(_, o)| o.has(TcpFlags::RST)),
        "no loss known yet: {outs:?}"
    );
    h.e.note_capture_loss(h.now);
    let (outs, _) = h.run_timers(3000);
    assert!(
        outs.iter().any(|(t, o)| o.has(TcpFlags::RST) && *t <= 2000),
        "{outs:?}"
    );
    assert_eq!(h.e.stats().sessions_shed_overload.hole, 1);
}
