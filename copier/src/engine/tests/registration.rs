//! Acknowledged registrations (nothing of a tuple leaves before an intercept accepted it; a
//! refused one never sends), SYNs held until the client's handshake completes, and what every
//! session and pending SYN costs against `max_memory`.

use super::*;
use crate::engine::{FailReason, Refusal, PENDING_SYN_COST, SESSION_COST};

fn from_port(port: u16) -> Option<SocketAddr> {
    Some(SocketAddr::new(client().ip(), port))
}

#[test]
fn nothing_leaves_before_an_intercept_accepted_the_tuple() {
    let mut h = H::default();
    h.auto_accept = false;
    h.syn(SYN);
    h.cap(data(0, 0, b"GET / HTTP/1.1\r\n\r\n"));
    assert_eq!(h.control(), vec![RegEvent::Register(test_tuple())]);
    // The Register was sent, but no verdict came: nothing goes, timers or not.
    assert!(h.packets().is_empty());
    let (outs, _) = h.run_timers(2_000);
    assert!(outs.is_empty(), "{outs:?}");
    // A verdict on another tuple changes nothing.
    let other = FourTuple::new(from_port(1).unwrap(), target());
    h.e.handle_registered(h.now, 0, other, RegVerdict::Accepted);
    assert!(h.packets().is_empty());
    h.e.handle_registered(h.now, 0, test_tuple(), RegVerdict::Accepted);
    let out = h.packets();
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].flags, out[0].seq), (TcpFlags::SYN, CISN));
    // A later refusal (another intercept, after a reconnect) does not take it back.
    h.e.handle_registered(h.now, 1, test_tuple(), RegVerdict::PortNotGuarded);
    h.rec(SYN_ACK);
    let out = h.packets();
    assert_eq!(out.len(), 1, "the request goes: {out:?}");
    assert_eq!(out[0].payload, b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(h.e.stats().sessions_failed.registration_refused, 0);
}

#[test]
fn a_refused_session_never_sends_and_is_reported_once_per_map_and_reason() {
    let mut h = H::default();
    h.auto_accept = false;
    for port in [1001u16, 1002] {
        h.syn(Seg {
            src: from_port(port),
            ..SYN
        });
        h.cap(Seg {
            src: from_port(port),
            ..data(0, 0, b"GET / HTTP/1.1\r\n\r\n")
        });
        let ctl = h.control();
        let t = FourTuple::new(from_port(port).unwrap(), target());
        assert_eq!(ctl, vec![RegEvent::Register(t)]);
        h.e.handle_registered(h.now, 0, t, RegVerdict::PortNotGuarded);
        assert!(h.packets().is_empty(), "nothing of a refused tuple leaves");
        assert_eq!(
            h.control(),
            vec![RegEvent::Unregister(t)],
            "and it is withdrawn"
        );
    }
    let s = h.e.stats();
    assert_eq!(s.sessions_failed.registration_refused, 2);
    assert_eq!(s.drops.registration_refused, 2);
    assert_eq!(s.segments_sent, 0);
    assert_eq!(h.e.session_count(), 0);
    // Reported once for the map and reason; the second is only counted.
    let r = h.e.poll_refusal().expect("a refusal to report");
    assert_eq!(
        r,
        Refusal {
            map: cfg().maps[0],
            tuple: FourTuple::new(from_port(1001).unwrap(), target()),
            verdict: RegVerdict::PortNotGuarded
        }
    );
    assert_eq!(h.e.poll_refusal(), None);
    // Another reason is reported again.
    h.syn(Seg {
        src: from_port(1003),
        ..SYN
    });
    let _ = h.control();
    h.e.handle_registered(
        h.now,
        0,
        FourTuple::new(from_port(1003).unwrap(), target()),
        RegVerdict::LimitReached,
    );
    assert_eq!(
        h.e.poll_refusal().map(|r| r.verdict),
        Some(RegVerdict::LimitReached)
    );
    let (outs, _) = h.run_timers(300_000);
    assert!(outs.is_empty());
    assert_eq!(
        h.e.stats()
            .sessions_failed
            .iter()
            .filter(|(_, n)| *n > 0)
            .count(),
        1
    );
    let _ = FailReason::RegistrationRefused;
}

#[test]
fn with_several_intercepts_a_refusal_fails_only_once_every_one_refused() {
    let mut h = H::default();
    h.auto_accept = false;
    h.e.set_intercept_count(h.now, 2);
    // Both refuse: the session fails at the second refusal, not the first.
    h.syn(Seg {
        src: from_port(1001),
        ..SYN
    });
    let _ = h.control();
    let t1 = FourTuple::new(from_port(1001).unwrap(), target());
    h.e.handle_registered(h.now, 0, t1, RegVerdict::PortNotGuarded);
    h.e.handle_registered(h.now, 0, t1, RegVerdict::PortNotGuarded); // the same one again
    assert_eq!(h.e.stats().sessions_failed.registration_refused, 0);
    assert!(h.packets().is_empty());
    h.e.handle_registered(h.now, 1, t1, RegVerdict::FamilyNotGuarded);
    assert_eq!(h.e.stats().sessions_failed.registration_refused, 1);
    assert!(h.packets().is_empty());
    // One refuses, the other accepts: copied.
    h.syn(Seg {
        src: from_port(1002),
        ..SYN
    });
    let _ = h.control();
    let t2 = FourTuple::new(from_port(1002).unwrap(), target());
    h.e.handle_registered(h.now, 1, t2, RegVerdict::PortNotGuarded);
    assert!(h.packets().is_empty());
    h.e.handle_registered(h.now, 0, t2, RegVerdict::Accepted);
    let out = h.packets();
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].tuple, out[0].flags), (t2, TcpFlags::SYN));
    assert_eq!(h.e.stats().sessions_failed.registration_refused, 1);
}

#[test]
fn an_unanswered_registration_ends_with_the_session_timeout() {
    let mut h = H::new(EngineConfig {
        session_timeout: Duration::from_secs(10),
        ..cfg()
    });
    h.auto_accept = false;
    h.syn(SYN);
    let _ = h.control();
    let (outs, ctl) = h.run_timers(11_000);
    assert!(outs.is_empty());
    assert_eq!(ctl, vec![RegEvent::Unregister(test_tuple())]);
    assert_eq!(h.e.stats().sessions_failed.timeout, 1);
    assert_eq!(h.e.session_count(), 0);
}

#[test]
fn a_syn_alone_starts_nothing_until_its_handshake_completes() {
    let mut h = H::default();
    h.cap(Seg {
        ts: Some((1000, 0)),
        ..SYN
    });
    assert!(
        h.out().is_empty() && h.control().is_empty(),
        "no registration, no SYN"
    );
    assert_eq!((h.e.session_count(), h.e.pending_syns()), (0, 1));
    assert_eq!(h.e.stats().sessions_started, 0);
    // A stray segment that is not the handshake's ACK starts nothing either.
    h.cap(Seg {
        seq: CISN + 5000,
        ..HS_ACK
    });
    assert!(h.out().is_empty());
    assert_eq!(h.e.pending_syns(), 1);
    // The handshake ACK: registration, then our SYN with the client's ISN and timestamp.
    h.at(20);
    h.cap(Seg {
        ts: Some((1001, 77)),
        ..HS_ACK
    });
    assert_eq!(h.control(), vec![RegEvent::Register(test_tuple())]);
    let out = h.packets();
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].flags, out[0].seq, out[0].mss, out[0].wscale),
        (TcpFlags::SYN, CISN, Some(1460), Some(7))
    );
    assert_eq!(
        out[0].ts.map(|t| t.0),
        Some(1001),
        "the latest client timestamp"
    );
    assert_eq!(h.e.pending_syns(), 0);
    assert_eq!(h.e.stats().sessions_started, 1);
}

#[test]
fn first_data_completes_the_handshake_when_the_ack_was_not_captured() {
    let mut h = H::default();
    h.cap(SYN);
    h.cap(data(0, 0, b"GET / HTTP/1.1\r\n\r\n"));
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].flags, TcpFlags::SYN);
    h.rec(SYN_ACK);
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].payload, b"GET / HTTP/1.1\r\n\r\n");
}

#[test]
fn syns_that_never_complete_expire_are_refreshed_and_counted() {
    let mut h = H::new(EngineConfig {
        syn_timeout: Duration::from_secs(3),
        ..cfg()
    });
    h.cap(Seg {
        src: from_port(1001),
        ..SYN
    });
    h.at(2_000);
    h.cap(Seg {
        src: from_port(1002),
        ..SYN
    });
    h.at(2_500);
    h.cap(Seg {
        src: from_port(1001),
        ..SYN
    }); // retransmitted: waits 3 s from now
    assert_eq!(h.e.pending_syns(), 2);
    assert!(h.fire(10_000));
    assert_eq!(
        h.ms(),
        3_000,
        "the first entry's original deadline (refreshed since)"
    );
    assert_eq!(h.e.pending_syns(), 2);
    while h.fire(5_000) {}
    assert_eq!(h.e.pending_syns(), 1, "1002 expired at 5 s");
    assert_eq!(h.e.stats().syns_incomplete.expired, 1);
    // 1001 completes in time.
    h.at(5_400);
    h.cap(Seg {
        src: from_port(1001),
        ..HS_ACK
    });
    assert_eq!(h.out().len(), 1);
    // The client resets a pending one: gone, counted; a SYN with a new ISN replaces one.
    h.cap(Seg {
        src: from_port(1003),
        ..SYN
    });
    h.cap(Seg {
        src: from_port(1003),
        flags: TcpFlags::RST,
        ..HS_ACK
    });
    h.cap(Seg {
        src: from_port(1004),
        ..SYN
    });
    h.cap(Seg {
        src: from_port(1004),
        seq: CISN + 999,
        ..SYN
    });
    h.cap(Seg {
        src: from_port(1004),
        ..HS_ACK
    });
    assert!(
        h.out().is_empty(),
        "the old ISN's ACK does not complete the new one"
    );
    let s = h.e.stats();
    assert_eq!(
        (
            s.syns_incomplete.reset,
            s.syns_incomplete.replaced,
            s.syns_pending
        ),
        (1, 1, 1)
    );
    assert_eq!(s.sessions_started, 1);
}

#[test]
fn a_syn_flood_is_bounded_and_real_sessions_still_go() {
    let mut h = H::new(EngineConfig {
        max_pending_syns: 1000,
        ..cfg()
    });
    let mut n = 0u32;
    let mut flood = |h: &mut H, count: u32| {
        for _ in 0..count {
            n += 1;
            let src = SocketAddr::new(
                std::net::Ipv4Addr::from(0x0a00_0000 + n).into(),
                1024 + (n % 60000) as u16,
            );
            h.cap(Seg {
                src: Some(src),
                seq: n.wrapping_mul(7919),
                ..SYN
            });
        }
    };
    flood(&mut h, 5000);
    assert_eq!(h.e.pending_syns(), 1000);
    assert_eq!(h.e.stats().syns_incomplete.shed, 4000);
    // A real client amid the flood: its SYN, more flood, its ACK.
    h.cap(SYN);
    flood(&mut h, 500);
    h.cap(HS_ACK);
    flood(&mut h, 500);
    let out = h.out();
    assert_eq!(out.len(), 1, "only the real session's SYN: {out:?}");
    assert_eq!(out[0].tuple, test_tuple());
    assert_eq!(h.e.session_count(), 1);
    assert_eq!(h.e.memory_used(), SESSION_COST + 1000 * PENDING_SYN_COST);
}

#[test]
fn every_session_costs_memory_and_the_oldest_are_shed() {
    assert!(SESSION_COST > std::mem::size_of::<crate::engine::session::Session>());
    assert!(PENDING_SYN_COST >= 2 * std::mem::size_of::<crate::engine::PendingSyn>());
    // Room for 10 empty sessions, not 11: the 11th sheds the idle-longest down to 90%.
    let max = 10 * SESSION_COST + SESSION_COST / 2;
    let mut h = H::new(EngineConfig {
        max_memory: max,
        ..cfg()
    });
    for i in 0..10u16 {
        h.at(u64::from(i));
        h.syn(Seg {
            src: from_port(2000 + i),
            ..SYN
        });
    }
    let _ = h.out();
    assert_eq!(h.e.memory_used(), 10 * SESSION_COST);
    assert_eq!(h.e.stats().sessions_shed, 0);
    h.at(100);
    h.syn(Seg {
        src: from_port(3000),
        ..SYN
    });
    let s = h.e.stats();
    assert!(s.sessions_shed >= 2, "down to 90%: {}", s.sessions_shed);
    // Unproven (no online answer acknowledged): they go as such.
    assert_eq!(s.sessions_failed.unproven_shed, s.sessions_shed);
    assert!(s.sessions_active as usize * SESSION_COST <= max - max / 10);
    // The newest session stays, the oldest went.
    let out = h.out();
    assert!(out
        .iter()
        .any(|o| o.tuple.client.port() == 3000 && o.flags == TcpFlags::SYN));
    assert!(out
        .iter()
        .any(|o| o.tuple.client.port() == 2000 && o.has(TcpFlags::RST)));
    // The shed ones linger (counted, not shed again) and then go.
    let shed = h.e.stats().sessions_shed;
    let _ = h.run_timers(6_000);
    assert_eq!(h.e.stats().sessions_shed, shed);
    assert!(
        h.e.memory_used() <= max - max / 10,
        "{} > {}",
        h.e.memory_used(),
        max - max / 10
    );
}

#[test]
fn the_default_session_cap_fits_the_default_memory_cap() {
    let d = EngineConfig::default();
    assert!(
        d.max_sessions * SESSION_COST <= d.max_memory,
        "{} x {SESSION_COST}",
        d.max_sessions
    );
    assert!(d.max_pending_syns * PENDING_SYN_COST <= d.max_memory / 8);
}

#[test]
fn max_sessions_bounds_the_table() {
    let mut h = H::new(EngineConfig {
        max_sessions: 3,
        ..cfg()
    });
    for i in 0..5u16 {
        let src = from_port(2000 + i);
        h.syn(Seg { src, ..SYN });
        // A request answered online (the client acknowledges it): proven and busy, so no
        // new session may shed it.
        h.cap(Seg {
            src,
            ..data(0, 0, b"GET / HTTP/1.1\r\n\r\n")
        });
        h.cap(Seg {
            src,
            seq: CISN + 1 + 18,
            ack: OISN + 2,
            ..BASE
        });
    }
    assert_eq!(h.e.session_count(), 3);
    assert_eq!(
        h.e.stats().drops.table_full,
        2 * 3,
        "the SYN's ACK and both data segments of each"
    );
}

#[test]
fn a_tuple_held_by_another_copier_moves_the_copy_to_another_port() {
    let mut h = H::default();
    h.auto_accept = false;
    h.syn(SYN);
    h.cap(data(0, 0, b"GET / HTTP/1.1\r\n\r\n"));
    assert_eq!(h.control(), vec![RegEvent::Register(test_tuple())]);
    // Another copier of the fleet holds that tuple on the test host.
    h.e.handle_registered(h.now, 0, test_tuple(), RegVerdict::HeldByOther);
    assert!(
        h.packets().is_empty(),
        "nothing of the refused tuple leaves"
    );
    let ctl = h.control();
    assert_eq!(ctl.len(), 2, "{ctl:?}");
    assert_eq!(
        ctl[0],
        RegEvent::Unregister(test_tuple()),
        "the refused tuple is withdrawn"
    );
    let RegEvent::Register(moved) = ctl[1] else {
        panic!("{ctl:?}")
    };
    assert_eq!(
        (moved.client.ip(), moved.server),
        (test_tuple().client.ip(), test_tuple().server)
    );
    assert_ne!(
        moved.client.port(),
        test_tuple().client.port(),
        "another port"
    );
    // Not a refusal of the session: nothing is reported, nothing failed.
    assert_eq!(h.e.poll_refusal(), None);
    assert_eq!(h.e.stats().tuple_moves, 1);
    assert_eq!(h.e.stats().sessions_failed.total(), 0);
    // The copy goes on the new tuple once it is accepted: SYN with the client's ISN, then the
    // request.
    h.e.handle_registered(h.now, 0, moved, RegVerdict::Accepted);
    let out = h.packets();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        (out[0].tuple, out[0].flags, out[0].seq),
        (moved, TcpFlags::SYN, CISN)
    );
    h.rec_to(moved, SYN_ACK);
    let out = h.packets();
    assert_eq!(out.len(), 1, "the request goes: {out:?}");
    assert_eq!(
        (out[0].tuple, out[0].payload.as_slice()),
        (moved, &b"GET / HTTP/1.1\r\n\r\n"[..])
    );
    assert_eq!(h.e.stats().sessions_failed.total(), 0);
}

#[test]
fn a_lost_link_holds_every_send_until_the_new_link_accepts_the_tuple_again() {
    use crate::engine::LinkEvent;
    let mut h = H::default();
    h.auto_accept = false;
    assert!(h.e.intercept_link(h.now, 0, 1, LinkEvent::Up));
    h.syn(SYN);
    h.cap(data(0, 0, b"GET / HTTP/1.1\r\n\r\n"));
    assert_eq!(h.control(), vec![RegEvent::Register(test_tuple())]);
    h.e.handle_registered(h.now, 0, test_tuple(), RegVerdict::Accepted);
    assert_eq!(h.packets().len(), 1, "the SYN");
    h.rec(SYN_ACK);
    let out = h.packets();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].payload, b"GET / HTTP/1.1\r\n\r\n");
    // The intercept restarts: the link ends. The request is not acknowledged, but nothing is
    // sent again while no intercept guards the tuple (a restarted one knows nothing of it).
    assert!(h.e.intercept_link(h.now, 0, 1, LinkEvent::Down));
    assert_eq!(h.e.stats().registrations_withdrawn, 1);
    let (outs, _) = h.run_timers(3_000);
    assert!(outs.is_empty(), "{outs:?}");
    // The new link is up and the snapshot registered the tuple again, no verdict yet: still
    // nothing. An event of the old link is ignored.
    assert!(h.e.intercept_link(h.now, 0, 2, LinkEvent::Up));
    assert!(!h.e.intercept_link(h.now, 0, 1, LinkEvent::Down), "stale");
    let (outs, _) = h.run_timers(1_000);
    assert!(outs.is_empty(), "{outs:?}");
    // The new link accepts it: the request goes again.
    h.e.handle_registered(h.now, 0, test_tuple(), RegVerdict::Accepted);
    let mut out = h.packets();
    if out.is_empty() {
        out = h.run_timers(3_000).0.into_iter().map(|(_, o)| o).collect();
    }
    assert!(
        out.iter().any(|p| p.payload == b"GET / HTTP/1.1\r\n\r\n"),
        "{out:?}"
    );
    assert_eq!(h.e.stats().registrations_withdrawn, 1);
}

#[test]
fn missing_rules_hold_sends_until_they_are_back_and_server_not_local_waits_for_the_guard() {
    use crate::engine::LinkEvent;
    let mut h = H::default();
    h.auto_accept = false;
    h.e.set_intercept_count(h.now, 2);
    h.e.intercept_link(h.now, 0, 1, LinkEvent::Up);
    h.e.intercept_link(h.now, 1, 1, LinkEvent::Up);
    h.syn(SYN);
    h.cap(data(0, 0, b"GET / HTTP/1.1\r\n\r\n"));
    let _ = h.control();
    // Intercept 1 does not guard this server: no refusal, the copy waits for intercept 0.
    h.e.handle_registered(h.now, 1, test_tuple(), RegVerdict::ServerNotLocal);
    assert!(h.packets().is_empty());
    assert_eq!(h.e.stats().registrations_not_local, 1);
    assert_eq!(h.e.session_count(), 1, "not failed");
    h.e.handle_registered(h.now, 0, test_tuple(), RegVerdict::Accepted);
    assert_eq!(
        h.packets().len(),
        1,
        "the guarding intercept accepted: the SYN goes"
    );
    h.rec(SYN_ACK);
    assert_eq!(h.packets().len(), 1);
    // Intercept 0's rules are flushed: nothing goes until they are back.
    assert!(h.e.intercept_link(h.now, 0, 1, LinkEvent::Rules(false)));
    assert_eq!(h.e.stats().rules_lost, 1);
    assert_eq!(h.e.stats().registrations_withdrawn, 1);
    let (outs, _) = h.run_timers(3_000);
    assert!(outs.is_empty(), "{outs:?}");
    // Rules of intercept 1 (which never accepted it) change nothing.
    h.e.intercept_link(h.now, 1, 1, LinkEvent::Rules(true));
    assert!(h.run_timers(1_000).0.is_empty());
    assert!(h.e.intercept_link(h.now, 0, 1, LinkEvent::Rules(true)));
    let mut out = h.packets();
    if out.is_empty() {
        out = h.run_timers(3_000).0.into_iter().map(|(_, o)| o).collect();
    }
    assert!(
        out.iter().any(|p| p.payload == b"GET / HTTP/1.1\r\n\r\n"),
        "{out:?}"
    );
}
