//! Router tests over literal packets built with `common::wire::TcpBuilder`, on an explicit clock.

use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::seq::SeqNum;
use common::wire::{TcpBuilder, TcpFlags, TcpOption};

use super::*;
use crate::allow::{AllowList, IpNet};

const SERVER: &str = "198.18.2.2:80";
const ALLOWED: &str = "198.18.2.1";
const A: CopierId = CopierId(1);
const B: CopierId = CopierId(2);
const HOLD: Duration = Duration::from_secs(2);

/// A response of the test server to `client`.
fn response(client: &str, flags: TcpFlags, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    TcpBuilder {
        src: SERVER.parse().unwrap(),
        dst: client.parse().unwrap(),
        seq: SeqNum(7000),
        ack: SeqNum(100),
        flags,
        window: 29200,
        options: &[TcpOption::Mss(1460)],
        payload,
        ttl: 64,
        ident: 1,
    }
    .emit(&mut out);
    out
}

fn syn_ack(client: &str) -> Vec<u8> {
    response(client, TcpFlags::SYN | TcpFlags::ACK, b"")
}

fn tuple(client: &str) -> FourTuple {
    FourTuple::new(client.parse().unwrap(), SERVER.parse().unwrap())
}

const LINGER: Duration = Duration::from_secs(120);

fn config() -> RouterConfig {
    RouterConfig {
        allow: AllowList::new(vec![ALLOWED.parse::<IpNet>().unwrap()]),
        hold_time: HOLD,
        hold_capacity: 4,
        hold_bytes: usize::MAX,
        guard: Guard {
            ports: Some(vec![80]),
            ipv4: true,
            ipv6: true,
        },
        max_registrations: 100,
        linger: LINGER,
        tombstone_capacity: 100,
        accept_local: true,
        local_servers_only: false,
    }
}

fn router() -> Router {
    Router::new(config())
}

fn record_of(d: Decision) -> (CopierId, Record) {
    match d {
        Decision::Deliver { copier, record } => (copier, record),
        other => panic!("expected Deliver, got {other:?}"),
    }
}

#[test]
fn registered_session_is_delivered_with_full_headers() {
    let t0 = Instant::now();
    let mut r = router();
    let c = "198.19.7.1:40000";
    assert!(r.handle_register(t0, A, &[tuple(c)]).released.is_empty());
    let pkt = syn_ack(c);
    let (who, rec) = record_of(r.handle_packet(t0, &pkt, 0));
    assert_eq!(who, A);
    assert_eq!(
        rec.headers, pkt,
        "SYN-ACK without payload: the record is the whole packet"
    );
    assert_eq!(rec.orig_len as usize, pkt.len());
    assert_eq!(rec.tuple().unwrap(), tuple(c));
    assert_eq!(r.stats().delivered, 1);
}

#[test]
fn payload_is_kept_only_when_asked() {
    let t0 = Instant::now();
    let mut r = router();
    let c = "198.19.7.1:40000";
    let pkt = response(c, TcpFlags::ACK | TcpFlags::PSH, b"HTTP/1.1 200 OK\r\n");
    // A plain Register asks for none, whatever the intercept's cap.
    r.handle_register(t0, A, &[tuple(c)]);
    let (_, rec) = record_of(r.handle_packet(t0, &pkt, 100));
    assert_eq!(rec.headers.len(), 20 + 24);
    assert!(rec.payload.is_empty());
    assert_eq!(r.payload_of(&tuple(c)), Some(0));
    // Asked for: the smaller of what the copier asks and the intercept's cap.
    r.handle_register_payload(t0, A, &[(tuple(c), 10)]);
    assert_eq!(r.payload_of(&tuple(c)), Some(10));
    let (_, rec) = record_of(r.handle_packet(t0, &pkt, 0));
    assert!(rec.payload.is_empty());
    let (_, rec) = record_of(r.handle_packet(t0, &pkt, 8));
    assert_eq!(rec.payload, b"HTTP/1.1");
    let (_, rec) = record_of(r.handle_packet(t0, &pkt, 100));
    assert_eq!(rec.payload, b"HTTP/1.1 2");
    // A copy cut after 50 bytes (NFQUEUE copy range) still routes, with what there is.
    let (_, rec) = record_of(r.handle_packet(t0, &pkt[..50], 100));
    assert_eq!(rec.payload, b"HTTP/1");
    assert_eq!(rec.orig_len as usize, pkt.len());
    // Another tuple of the same copier, registered plainly, still gets none.
    let c2 = "198.19.7.1:40001";
    r.handle_register(t0, A, &[tuple(c2)]);
    let pkt2 = response(c2, TcpFlags::ACK | TcpFlags::PSH, b"HTTP/1.1 200 OK\r\n");
    assert!(record_of(r.handle_packet(t0, &pkt2, 100))
        .1
        .payload
        .is_empty());
}

#[test]
fn held_records_keep_only_the_payload_their_registration_asks_for() {
    let t0 = Instant::now();
    let mut r = router();
    let (c1, c2) = ("198.19.7.1:40000", "198.19.7.1:40001");
    for c in [c1, c2] {
        let pkt = response(c, TcpFlags::ACK | TcpFlags::PSH, b"HTTP/1.1 200 OK\r\n");
        assert_eq!(r.handle_packet(t0, &pkt, 100), Decision::Held);
    }
    let reg = r.handle_register(t0, A, &[tuple(c1)]);
    assert_eq!(reg.released.len(), 1);
    assert!(reg.released[0].1.payload.is_empty());
    let reg = r.handle_register_payload(t0, A, &[(tuple(c2), 4)]);
    assert_eq!(reg.released.len(), 1);
    assert_eq!(reg.released[0].1.payload, b"HTTP");
}

#[test]
fn allowed_address_is_accepted_and_others_fail_closed() {
    let t0 = Instant::now();
    let mut r = router();
    let d = r.handle_packet(
        t0,
        &response(&format!("{ALLOWED}:5555"), TcpFlags::ACK, b"x"),
        0,
    );
    assert_eq!(d, Decision::Accept);
    assert!(d.accepts());
    let d = r.handle_packet(t0, &response("198.18.2.3:5555", TcpFlags::ACK, b"x"), 0);
    assert_eq!(d, Decision::Held);
    assert!(!d.accepts());
    assert_eq!(r.stats().accepted, 1);
    assert_eq!(r.stats().held, 1);
}

#[test]
fn registration_wins_over_the_allow_list() {
    let t0 = Instant::now();
    let mut r = router();
    let c = format!("{ALLOWED}:6000");
    r.handle_register(t0, B, &[tuple(&c)]);
    let (who, _) = record_of(r.handle_packet(t0, &syn_ack(&c), 0));
    assert_eq!(who, B);
    // Another port of the same allowed host is not a copied session.
    assert_eq!(
        r.handle_packet(t0, &syn_ack(&format!("{ALLOWED}:6001")), 0),
        Decision::Accept
    );
}

#[test]
fn malformed_packets_are_dropped() {
    let t0 = Instant::now();
    let mut r = router();
    let pkt = syn_ack("198.19.7.1:40000");
    for bad in [&pkt[..30], &[][..], &[0x60; 10][..], &[0x45, 0, 0, 20][..]] {
        assert_eq!(
            r.handle_packet(t0, bad, 0),
            Decision::Drop(DropReason::Malformed)
        );
    }
    let mut udp = pkt.clone();
    udp[9] = 17;
    assert_eq!(
        r.handle_packet(t0, &udp, 0),
        Decision::Drop(DropReason::Malformed)
    );
    assert_eq!(r.stats().dropped_malformed, 5);
}

#[test]
fn early_response_is_released_by_its_registration() {
    let t0 = Instant::now();
    let mut r = router();
    let c = "198.19.7.1:40000";
    let sa = syn_ack(c);
    assert_eq!(r.handle_packet(t0, &sa, 0), Decision::Held);
    assert_eq!(r.poll_timeout(), Some(t0 + HOLD));
    // Another session's registration releases nothing.
    assert!(r
        .handle_register(t0, A, &[tuple("198.19.7.1:40001")])
        .released
        .is_empty());
    let out = r
        .handle_register(t0 + Duration::from_millis(300), B, &[tuple(c)])
        .released;
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, B);
    assert_eq!(out[0].1.headers, sa);
    assert_eq!(r.stats().released, 1);
    assert_eq!(r.stats().holding, 0);
    assert_eq!(r.poll_timeout(), None);
    // Later packets go straight through.
    let (who, _) = record_of(r.handle_packet(t0, &sa, 0));
    assert_eq!(who, B);
}

#[test]
fn held_records_come_out_in_arrival_order() {
    let t0 = Instant::now();
    let mut r = router();
    let c = "198.19.7.1:40000";
    let p1 = response(c, TcpFlags::ACK, b"1");
    let p2 = response(c, TcpFlags::ACK, b"22");
    r.handle_packet(t0, &p1, 0);
    r.handle_packet(t0, &response("198.19.7.2:1", TcpFlags::ACK, b""), 0);
    r.handle_packet(t0 + Duration::from_millis(1), &p2, 0);
    let out: Vec<u32> = r
        .handle_register(t0, A, &[tuple(c)])
        .into_iter()
        .map(|(_, rec)| rec.orig_len)
        .collect();
    assert_eq!(out, vec![p1.len() as u32, p2.len() as u32]);
}

#[test]
fn unregistered_response_is_dropped_after_the_hold_time() {
    let t0 = Instant::now();
    let mut r = router();
    let c = "198.19.7.1:40000";
    r.handle_packet(t0, &syn_ack(c), 0);
    assert_eq!(r.handle_timeout(t0 + HOLD - Duration::from_millis(1)), 0);
    assert_eq!(r.handle_timeout(t0 + HOLD), 1);
    assert_eq!(r.stats().dropped_unregistered, 1);
    assert_eq!(r.poll_timeout(), None);
    // A registration after that finds nothing.
    assert!(r
        .handle_register(t0 + HOLD, A, &[tuple(c)])
        .released
        .is_empty());
}

#[test]
fn expiry_also_runs_on_packet_arrival() {
    let t0 = Instant::now();
    let mut r = router();
    r.handle_packet(t0, &syn_ack("198.19.7.1:1"), 0);
    r.handle_packet(t0 + HOLD, &syn_ack("198.19.7.1:2"), 0);
    assert_eq!(r.stats().dropped_unregistered, 1);
    assert_eq!(r.stats().holding, 1);
}

#[test]
fn hold_buffer_is_bounded_and_evicts_the_oldest() {
    let t0 = Instant::now();
    let mut r = router(); // capacity 4
    for port in 1..=6u16 {
        assert_eq!(
            r.handle_packet(t0, &syn_ack(&format!("198.19.7.1:{port}")), 0),
            Decision::Held
        );
    }
    assert_eq!(r.stats().holding, 4);
    assert_eq!(r.stats().dropped_hold_overflow, 2);
    assert!(r
        .handle_register(t0, A, &[tuple("198.19.7.1:1"), tuple("198.19.7.1:2")])
        .released
        .is_empty());
    assert_eq!(
        r.handle_register(t0, A, &[tuple("198.19.7.1:6")])
            .released
            .len(),
        1
    );
}

#[test]
fn hold_buffer_is_bounded_by_bytes_with_full_payloads() {
    let t0 = Instant::now();
    let payload = vec![b'x'; 60_000];
    let max = 256 << 10;
    let mut r = Router::new(RouterConfig {
        hold_capacity: 4096,
        hold_bytes: max,
        ..config()
    });
    for port in 1..=20u16 {
        let p = response(&format!("198.19.7.1:{port}"), TcpFlags::ACK, &payload);
        assert_eq!(r.handle_packet(t0, &p, 65495), Decision::Held);
        assert!(r.stats().holding_bytes as usize <= max);
    }
    let size = 60_000 + 44 + crate::hold::RECORD_OVERHEAD; // IPv4 20, TCP 24 (MSS option)
    let fit = max / size;
    assert_eq!(r.stats().holding as usize, fit);
    assert_eq!(r.stats().holding_bytes as usize, fit * size);
    assert_eq!(r.stats().dropped_hold_bytes as usize, 20 - fit);
    assert_eq!(r.stats().dropped_hold_overflow, 0);
    // The oldest went; the newest are still there.
    let gone = r.handle_register(t0, A, &[tuple("198.19.7.1:1")]);
    assert!(gone.released.is_empty());
    let kept = r.handle_register(t0, A, &[tuple("198.19.7.1:20")]);
    assert_eq!(kept.released.len(), 1);
    assert_eq!(r.stats().holding as usize, fit - 1);
}

#[test]
fn two_copiers_get_only_their_own_records() {
    let t0 = Instant::now();
    let mut r = router();
    let ca = "198.19.7.1:40000";
    let cb = "198.19.7.1:40001"; // differs from ca only in the port
    r.handle_register(t0, A, &[tuple(ca)]);
    r.handle_register(t0, B, &[tuple(cb)]);
    for _ in 0..3 {
        assert_eq!(record_of(r.handle_packet(t0, &syn_ack(ca), 0)).0, A);
        assert_eq!(record_of(r.handle_packet(t0, &syn_ack(cb), 0)).0, B);
    }
    // Same ports, other server address or port: not registered.
    let mut other = Vec::new();
    TcpBuilder {
        src: "198.18.2.2:81".parse().unwrap(),
        dst: ca.parse().unwrap(),
        seq: SeqNum(1),
        ack: SeqNum(1),
        flags: TcpFlags::ACK,
        window: 1,
        options: &[],
        payload: b"",
        ttl: 64,
        ident: 0,
    }
    .emit(&mut other);
    assert_eq!(r.handle_packet(t0, &other, 0), Decision::Held);
}

#[test]
fn unregister_and_copier_gone_only_touch_own_tuples() {
    let t0 = Instant::now();
    let mut r = router();
    let (t1, t2, t3) = (
        tuple("198.19.7.1:1"),
        tuple("198.19.7.1:2"),
        tuple("198.19.7.1:3"),
    );
    r.handle_register(t0, A, &[t1, t2]);
    r.handle_register(t0, B, &[t3]);
    assert_eq!(
        r.handle_unregister(B, &[t1]),
        0,
        "B cannot unregister A's session"
    );
    assert_eq!(r.route(&t1), Some(A));
    assert_eq!(r.handle_unregister(A, &[t1]), 1);
    assert_eq!(r.route(&t1), None);
    assert_eq!(r.handle_copier_gone(A), 1);
    assert_eq!(r.route(&t2), None);
    assert_eq!(r.route(&t3), Some(B));
    assert_eq!(r.stats().registrations, 1);
    // A's responses are not accepted (fail closed): dropped, as the tuple is now a tombstone.
    let d = r.handle_packet(t0, &syn_ack("198.19.7.1:2"), 0);
    assert!(!d.accepts());
    assert_eq!(d, Decision::Drop(DropReason::RecentlyUnregistered));
}

#[test]
fn reconnecting_copier_takes_over_its_tuples() {
    let t0 = Instant::now();
    let mut r = router();
    let t = tuple("198.19.7.1:1");
    r.handle_register(t0, A, &[t]);
    r.handle_register(t0, B, &[t]);
    assert_eq!(r.stats().register_conflicts, 1);
    assert_eq!(r.route(&t), Some(B));
    // The old connection going away does not remove the new owner's registration.
    assert_eq!(r.handle_copier_gone(A), 0);
    assert_eq!(r.route(&t), Some(B));
    // Registering again by the same copier is not a conflict.
    r.handle_register(t0, B, &[t]);
    assert_eq!(r.stats().register_conflicts, 1);
}

#[test]
fn a_reconnection_of_the_same_instance_takes_over_its_tuples() {
    let t0 = Instant::now();
    let mut r = router();
    let t = tuple("198.19.7.1:1");
    // A and B are two connections of one copier process (B opened after A broke).
    r.set_instance(A, 7);
    r.set_instance(B, 7);
    assert!(r.handle_register(t0, A, &[t]).all_accepted());
    let reg = r.handle_register(t0, B, &[t]);
    assert_eq!(reg.verdicts, vec![RegVerdict::Accepted]);
    assert_eq!(r.route(&t), Some(B));
    assert_eq!(r.stats().register_conflicts, 1);
    assert_eq!(r.stats().refused_held, 0);
    assert_eq!(r.registrations_of(A), 0);
    assert_eq!(r.registrations_of(B), 1);
    assert_eq!(r.handle_copier_gone(A), 0);
    assert_eq!(r.route(&t), Some(B));
}

#[test]
fn another_live_instance_is_refused_a_tuple_and_gets_it_once_free() {
    let t0 = Instant::now();
    let mut r = router();
    let t = tuple("198.19.7.1:1");
    let other = tuple("198.19.7.1:2");
    // Two copiers of a fleet (instances 7 and 8) pick the same test tuple.
    r.set_instance(A, 7);
    r.set_instance(B, 8);
    assert!(r.handle_register(t0, A, &[t]).all_accepted());
    let reg = r.handle_register(t0, B, &[t, other]);
    assert_eq!(
        reg.verdicts,
        vec![RegVerdict::HeldByOther, RegVerdict::Accepted]
    );
    // A keeps it: its answers still go to A, and nothing was taken from it.
    assert_eq!(r.route(&t), Some(A));
    assert_eq!(r.route(&other), Some(B));
    assert_eq!((r.registrations_of(A), r.registrations_of(B)), (1, 1));
    assert_eq!(r.stats().refused_held, 1);
    assert_eq!(r.stats().register_conflicts, 0);
    let d = r.handle_packet(t0, &syn_ack("198.19.7.1:1"), 0);
    assert!(matches!(d, Decision::Deliver { copier, .. } if copier == A));
    // B's Unregister of the refused tuple leaves A's registration alone.
    assert_eq!(r.handle_unregister(B, &[t]), 0);
    assert_eq!(r.route(&t), Some(A));
    // Once A is done with it (or gone), B may take it.
    assert_eq!(r.handle_unregister(A, &[t]), 1);
    assert!(r.handle_register(t0, B, &[t]).all_accepted());
    assert_eq!(r.route(&t), Some(B));
    // A copier that announced no instance (an older build) still takes over, as before.
    let c = CopierId(99);
    assert!(r.handle_register(t0, c, &[t]).all_accepted());
    assert_eq!(r.route(&t), Some(c));
    assert_eq!(r.stats().register_conflicts, 1);
    // A gone connection's instance is forgotten with it.
    r.handle_copier_gone(A);
    r.set_instance(A, 0);
    assert_eq!(r.stats().refused_held, 1);
}

#[test]
fn ipv6_sessions_route_too() {
    let t0 = Instant::now();
    let mut r = router();
    let mut pkt = Vec::new();
    TcpBuilder {
        src: "[2001:db8::2]:80".parse().unwrap(),
        dst: "[2001:db8:9::1]:40000".parse().unwrap(),
        seq: SeqNum(1),
        ack: SeqNum(1),
        flags: TcpFlags::SYN | TcpFlags::ACK,
        window: 1,
        options: &[],
        payload: b"",
        ttl: 64,
        ident: 0,
    }
    .emit(&mut pkt);
    assert_eq!(r.handle_packet(t0, &pkt, 0), Decision::Held);
    let t = FourTuple::new(
        "[2001:db8:9::1]:40000".parse().unwrap(),
        "[2001:db8::2]:80".parse().unwrap(),
    );
    let out = r.handle_register(t0, A, &[t]).released;
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1.headers, pkt);
}

#[test]
fn counters_add_up() {
    let t0 = Instant::now();
    let mut r = router();
    r.handle_register(t0, A, &[tuple("198.19.7.1:1")]);
    r.handle_packet(t0, &syn_ack("198.19.7.1:1"), 0); // delivered
    r.handle_packet(t0, &syn_ack(&format!("{ALLOWED}:9")), 0); // accepted
    r.handle_packet(t0, &syn_ack("198.19.7.1:2"), 0); // held, later expired
    r.handle_packet(t0, &[1, 2, 3], 0); // malformed
    r.handle_timeout(t0 + HOLD);
    let s = r.stats();
    assert_eq!(s.packets, 4);
    assert_eq!(
        s.delivered + s.accepted + s.held + s.dropped_malformed,
        s.packets
    );
    assert_eq!(s.dropped_unregistered, 1);
}

fn tuple_to(client: &str, server: &str) -> FourTuple {
    FourTuple::new(client.parse().unwrap(), server.parse().unwrap())
}

#[test]
fn unenforceable_registrations_are_refused_and_not_inserted() {
    let t0 = Instant::now();
    let mut r = Router::new(RouterConfig {
        guard: Guard {
            ports: Some(vec![80, 443]),
            ipv4: true,
            ipv6: false,
        },
        ..config()
    });
    let ok = tuple("198.19.7.1:1");
    let other_port = tuple_to("198.19.7.1:2", "198.18.2.2:8080");
    let v6 = tuple_to("[2001:db8:9::1]:3", "[2001:db8::2]:80");
    let tls = tuple_to("198.19.7.1:4", "198.18.2.2:443");
    let reg = r.handle_register(t0, A, &[ok, other_port, v6, tls]);
    assert_eq!(
        reg.verdicts,
        vec![
            RegVerdict::Accepted,
            RegVerdict::PortNotGuarded,
            RegVerdict::FamilyNotGuarded,
            RegVerdict::Accepted
        ]
    );
    assert!(!reg.all_accepted());
    assert_eq!(r.route(&ok), Some(A));
    assert_eq!(r.route(&other_port), None);
    assert_eq!(r.route(&v6), None);
    assert_eq!(r.stats().registrations, 2);
    assert_eq!((r.stats().refused_port, r.stats().refused_family), (1, 1));
    // A refused tuple does not release held records either.
    let mut pkt = Vec::new();
    TcpBuilder {
        src: "198.18.2.2:8080".parse().unwrap(),
        dst: "198.19.7.1:2".parse().unwrap(),
        seq: SeqNum(1),
        ack: SeqNum(1),
        flags: TcpFlags::ACK,
        window: 1,
        options: &[],
        payload: b"",
        ttl: 64,
        ident: 0,
    }
    .emit(&mut pkt);
    assert_eq!(r.handle_packet(t0, &pkt, 0), Decision::Held);
    let again = r.handle_register(t0, A, &[other_port]);
    assert_eq!(again.verdicts, vec![RegVerdict::PortNotGuarded]);
    assert!(again.released.is_empty());
    assert_eq!(r.stats().holding, 1);
}

#[test]
fn registrations_per_copier_are_limited() {
    let t0 = Instant::now();
    let mut r = Router::new(RouterConfig {
        max_registrations: 2,
        ..config()
    });
    let ts: Vec<FourTuple> = (1..=3).map(|p| tuple(&format!("198.19.7.1:{p}"))).collect();
    let reg = r.handle_register(t0, A, &ts);
    assert_eq!(
        reg.verdicts,
        vec![
            RegVerdict::Accepted,
            RegVerdict::Accepted,
            RegVerdict::LimitReached
        ]
    );
    assert_eq!(r.route(&ts[2]), None);
    assert_eq!(r.stats().refused_limit, 1);
    assert_eq!(r.registrations_of(A), 2);
    // Re-registering an own tuple is not a new registration.
    assert!(r.handle_register(t0, A, &[ts[0]]).all_accepted());
    // The limit is per copier: B may register, and a takeover moves the count.
    assert!(r.handle_register(t0, B, &[ts[2], ts[0]]).all_accepted());
    assert_eq!(r.registrations_of(A), 1);
    assert_eq!(r.registrations_of(B), 2);
    assert!(r.handle_register(t0, A, &[ts[2]]).all_accepted());
    // Unregistering frees room.
    assert_eq!(
        r.handle_register(t0, A, &[tuple("198.19.7.1:9")]).verdicts,
        vec![RegVerdict::LimitReached]
    );
    r.handle_unregister(A, &[ts[1]]);
    assert!(r
        .handle_register(t0, A, &[tuple("198.19.7.1:9")])
        .all_accepted());
    r.handle_copier_gone(A);
    assert_eq!(r.registrations_of(A), 0);
}

#[test]
fn unregistered_tuple_stays_blocked_for_the_linger_even_when_allowed() {
    let t0 = Instant::now();
    let mut r = router();
    let c = format!("{ALLOWED}:7000"); // on the allow list
    let t = tuple(&c);
    r.handle_register(t0, A, &[t]);
    assert_eq!(r.handle_unregister(A, &[t]), 1);
    assert!(r.is_tombstoned(&t));
    assert_eq!(r.poll_timeout(), Some(t0 + LINGER));
    // The test server's retransmitted SYN-ACKs: dropped, counted, never accepted.
    for s in [1, 3, 7, 60] {
        let d = r.handle_packet(t0 + Duration::from_secs(s), &syn_ack(&c), 0);
        assert_eq!(
            d,
            Decision::Drop(DropReason::RecentlyUnregistered),
            "after {s} s"
        );
    }
    assert_eq!(r.stats().dropped_recently_unregistered, 4);
    assert_eq!(r.stats().accepted, 0);
    assert_eq!(r.stats().tombstones, 1);
    // After the linger, the allow list applies again.
    assert_eq!(r.handle_timeout(t0 + LINGER), 0);
    assert!(!r.is_tombstoned(&t));
    assert_eq!(r.stats().tombstones, 0);
    assert_eq!(
        r.handle_packet(t0 + LINGER, &syn_ack(&c), 0),
        Decision::Accept
    );
}

#[test]
fn copier_gone_lays_tombstones_and_a_new_registration_clears_them() {
    let t0 = Instant::now();
    let mut r = router();
    let c = "198.19.7.1:7001";
    let t = tuple(c);
    r.handle_register(t0, A, &[t]);
    assert_eq!(r.handle_copier_gone(A), 1);
    assert!(r.is_tombstoned(&t));
    assert_eq!(
        r.handle_packet(t0, &syn_ack(c), 0),
        Decision::Drop(DropReason::RecentlyUnregistered)
    );
    // The reconnected copier registers it again: its records flow again.
    assert!(r
        .handle_register(t0 + Duration::from_secs(1), B, &[t])
        .all_accepted());
    assert!(!r.is_tombstoned(&t));
    assert_eq!(record_of(r.handle_packet(t0, &syn_ack(c), 0)).0, B);
    // Another copier cannot lay a tombstone over someone else's tuple.
    assert_eq!(r.handle_unregister(A, &[t]), 0);
    assert!(!r.is_tombstoned(&t));
}

#[test]
fn tombstones_are_bounded_oldest_first() {
    let t0 = Instant::now();
    let mut r = Router::new(RouterConfig {
        tombstone_capacity: 2,
        ..config()
    });
    let ts: Vec<FourTuple> = (1..=3).map(|p| tuple(&format!("198.19.7.1:{p}"))).collect();
    r.handle_register(t0, A, &ts);
    r.handle_unregister(A, &ts);
    assert_eq!(r.stats().tombstones, 2);
    assert_eq!(r.stats().tombstones_evicted, 1);
    assert!(!r.is_tombstoned(&ts[0]));
    assert!(r.is_tombstoned(&ts[1]) && r.is_tombstoned(&ts[2]));
}

#[test]
fn answers_to_this_host_are_accepted_unless_registered_or_tombstoned() {
    let t0 = Instant::now();
    let mut r = router();
    let own = "198.18.2.2";
    // Loopback is always local; an interface address once it is known.
    assert_eq!(
        r.handle_packet(t0, &syn_ack("127.0.0.1:5000"), 0),
        Decision::Accept
    );
    assert_eq!(
        r.handle_packet(t0, &syn_ack(&format!("{own}:5000")), 0),
        Decision::Held
    );
    r.set_local_addrs(vec![own.parse().unwrap()]);
    assert_eq!(
        r.handle_packet(t0, &syn_ack(&format!("{own}:5001")), 0),
        Decision::Accept
    );
    assert_eq!(r.stats().accepted_local, 2);
    assert_eq!(r.stats().accepted, 0);
    // IPv6 loopback.
    let mut pkt = Vec::new();
    TcpBuilder {
        src: "[::1]:80".parse().unwrap(),
        dst: "[::1]:5002".parse().unwrap(),
        seq: SeqNum(1),
        ack: SeqNum(1),
        flags: TcpFlags::ACK,
        window: 1,
        options: &[],
        payload: b"",
        ttl: 64,
        ident: 0,
    }
    .emit(&mut pkt);
    assert_eq!(r.handle_packet(t0, &pkt, 0), Decision::Accept);
    // A registered or tombstoned local tuple is not accepted.
    let reg = tuple("127.0.0.1:6000");
    r.handle_register(t0, A, &[reg]);
    assert_eq!(
        record_of(r.handle_packet(t0, &syn_ack("127.0.0.1:6000"), 0)).0,
        A
    );
    r.handle_unregister(A, &[reg]);
    assert_eq!(
        r.handle_packet(t0, &syn_ack("127.0.0.1:6000"), 0),
        Decision::Drop(DropReason::RecentlyUnregistered)
    );
    // A refreshed list replaces the old one.
    r.set_local_addrs(vec![]);
    assert_eq!(
        r.handle_packet(t0, &syn_ack(&format!("{own}:5003")), 0),
        Decision::Held
    );
    // Turned off: loopback is held like anything else.
    let mut off = Router::new(RouterConfig {
        accept_local: false,
        ..config()
    });
    assert_eq!(
        off.handle_packet(t0, &syn_ack("127.0.0.1:5000"), 0),
        Decision::Held
    );
}

#[test]
fn quiet_only_when_nothing_is_registered_held_or_tombstoned() {
    let t0 = Instant::now();
    let mut r = router();
    assert!(r.quiet().is_quiet());
    let t = tuple("198.19.7.1:1");
    r.handle_register(t0, A, &[t]);
    assert_eq!(r.quiet().registered, 1);
    assert!(!r.quiet().is_quiet());
    r.handle_unregister(A, &[t]);
    let q = r.quiet();
    assert_eq!((q.registered, q.tombstoned), (0, 1));
    assert!(!q.is_quiet());
    r.handle_packet(t0, &syn_ack("198.19.7.2:1"), 0); // held
    r.handle_timeout(t0 + HOLD);
    assert_eq!(r.quiet().held, 0);
    assert!(!r.quiet().is_quiet(), "the tombstone lingers");
    r.handle_timeout(t0 + LINGER);
    assert!(r.quiet().is_quiet(), "{}", r.quiet());
    // A held record alone keeps it busy.
    r.handle_packet(t0 + LINGER, &syn_ack("198.19.7.2:2"), 0);
    assert_eq!(r.quiet().held, 1);
    assert!(!r.quiet().is_quiet());
}

/// A registration has no time limit: a copied session that stays quiet for as long as the
/// copier keeps it (an idle keep-alive connection, issue 33) is still routed to its copier
/// however many timers ran meanwhile; once unregistered, none of its answers goes out, neither
/// during the linger (tombstone) nor after it (held, then dropped as unregistered).
#[test]
fn a_quiet_registration_never_expires_and_an_unregistered_one_never_lets_an_answer_out() {
    let t0 = Instant::now();
    let mut r = router();
    let c = "198.19.7.1:40000"; // neither allowed nor local
    let t = tuple(c);
    let answer = || {
        response(
            c,
            TcpFlags(TcpFlags::PSH.0 | TcpFlags::ACK.0),
            b"late answer",
        )
    };
    assert_eq!(
        r.handle_register(t0, A, &[t]).verdicts,
        vec![RegVerdict::Accepted]
    );
    assert_eq!(r.poll_timeout(), None, "no timer for a registration");
    for secs in [1u64, 60, 600, 3_600, 86_400] {
        let now = t0 + Duration::from_secs(secs);
        assert_eq!(r.handle_timeout(now), 0);
        let (copier, _) = record_of(r.handle_packet(now, &answer(), 0));
        assert_eq!(copier, A, "after {secs} s of quiet");
    }
    assert_eq!((r.route(&t), r.registrations_of(A)), (Some(A), 1));
    let t1 = t0 + Duration::from_secs(86_400);
    assert_eq!(r.handle_unregister(A, &[t]), 1);
    for secs in [0, 1, 60] {
        let d = r.handle_packet(t1 + Duration::from_secs(secs), &answer(), 0);
        assert_eq!(d, Decision::Drop(DropReason::RecentlyUnregistered));
    }
    // The tombstone expired: an answer is held for a registration that never comes, then
    // dropped.
    let after = t1 + LINGER;
    r.handle_timeout(after);
    assert!(!r.is_tombstoned(&t));
    assert_eq!(r.handle_packet(after, &answer(), 0), Decision::Held);
    assert_eq!(r.handle_timeout(after + HOLD), 1);
    let s = r.stats();
    assert_eq!(
        (
            s.accepted,
            s.accepted_local,
            s.dropped_unregistered,
            s.delivered
        ),
        (0, 0, 1, 5)
    );
}

#[test]
fn a_restart_grace_holds_allowed_and_local_answers_until_the_copiers_are_synced() {
    let t0 = Instant::now();
    let mut r = router();
    r.set_local_addrs(["198.18.2.2".parse().unwrap()]);
    r.start_grace(t0, Duration::from_secs(15));
    assert_eq!(r.stats().grace, 1);
    let allowed = format!("{ALLOWED}:40000");
    let local = "198.18.2.2:40001";
    // A copy of a copier that has not registered again yet, to an allowed and a local address.
    assert_eq!(r.handle_packet(t0, &syn_ack(&allowed), 0), Decision::Held);
    assert_eq!(r.handle_packet(t0, &syn_ack(local), 0), Decision::Held);
    assert_eq!(r.stats().grace_held, 2);
    assert_eq!(
        r.stats().accepted + r.stats().accepted_local,
        0,
        "nothing passes during the grace"
    );
    // Its copier connects and registers the allowed one: the held answer goes to it.
    r.grace_join(A);
    let reg = r.handle_register(t0 + Duration::from_millis(500), A, &[tuple(&allowed)]);
    assert_eq!(
        reg.released.len(),
        1,
        "the held answer reaches its copier, never the network"
    );
    // Synced before the settle time: the grace still holds (other copiers may come back).
    r.handle_synced(t0 + Duration::from_secs(1), A);
    assert!(r.in_grace(t0 + Duration::from_secs(1)));
    // A second copier connects and has not synced: the grace holds past the settle time.
    r.grace_join(B);
    assert!(r.in_grace(t0 + Duration::from_secs(3)));
    assert_eq!(
        r.handle_packet(t0 + Duration::from_secs(3), &syn_ack("198.18.2.1:40002"), 0),
        Decision::Held
    );
    // It syncs: the grace is over, allowed and local answers pass again.
    r.handle_synced(t0 + Duration::from_secs(3), B);
    assert!(!r.in_grace(t0 + Duration::from_secs(3)));
    assert_eq!(r.stats().grace, 0);
    assert_eq!(
        r.handle_packet(t0 + Duration::from_secs(3), &syn_ack("198.18.2.1:40003"), 0),
        Decision::Accept
    );
    assert_eq!(
        r.handle_packet(t0 + Duration::from_secs(3), &syn_ack("198.18.2.2:40004"), 0),
        Decision::Accept
    );
}

#[test]
fn a_restart_grace_ends_at_its_deadline_and_a_copier_gone_does_not_keep_it() {
    let t0 = Instant::now();
    let mut r = router();
    r.start_grace(t0, Duration::from_secs(5));
    // A copier that never says it is synced (an older one) keeps the grace to its end.
    r.grace_join(A);
    assert!(r.in_grace(t0 + Duration::from_secs(4)));
    assert_eq!(
        r.handle_packet(
            t0 + Duration::from_secs(4),
            &syn_ack(&format!("{ALLOWED}:1")),
            0
        ),
        Decision::Held
    );
    assert_eq!(
        r.handle_packet(
            t0 + Duration::from_secs(5),
            &syn_ack(&format!("{ALLOWED}:2")),
            0
        ),
        Decision::Accept
    );
    // Nobody synced: no early end even with nobody waiting.
    let mut r = router();
    r.start_grace(t0, Duration::from_secs(5));
    assert!(
        r.in_grace(t0 + Duration::from_secs(3)),
        "no copier came back yet"
    );
    // A copier that leaves unsynced no longer holds the grace once another synced.
    r.grace_join(A);
    r.grace_join(B);
    r.handle_synced(t0, B);
    assert!(r.in_grace(t0 + Duration::from_secs(3)));
    r.handle_copier_gone(A);
    assert!(!r.in_grace(t0 + Duration::from_secs(3)));
    // Zero: no grace at all.
    let mut r = router();
    r.start_grace(t0, Duration::ZERO);
    assert_eq!(
        r.handle_packet(t0, &syn_ack(&format!("{ALLOWED}:3")), 0),
        Decision::Accept
    );
}

#[test]
fn registrations_for_servers_of_another_host_are_refused_as_not_local() {
    let t0 = Instant::now();
    let mut r = Router::new(RouterConfig {
        local_servers_only: true,
        ..config()
    });
    r.set_local_addrs(["198.18.2.2".parse().unwrap()]);
    let here = tuple("198.19.0.1:40000");
    let there = tuple_to("198.19.0.1:40001", "198.18.3.2:80");
    let lo = tuple_to("127.0.0.1:40002", "127.0.0.1:80");
    let reg = r.handle_register(t0, A, &[here, there, lo]);
    assert_eq!(
        reg.verdicts,
        vec![
            RegVerdict::Accepted,
            RegVerdict::ServerNotLocal,
            RegVerdict::Accepted
        ]
    );
    assert_eq!(r.route(&there), None, "not inserted");
    assert_eq!(r.stats().refused_not_local, 1);
    // Its answers (if they ever came here) are held and dropped like any unregistered one.
    let mut pkt = Vec::new();
    TcpBuilder {
        src: "198.18.3.2:80".parse().unwrap(),
        dst: "198.19.0.1:40001".parse().unwrap(),
        ..common::testkit::SEGMENT
    }
    .emit(&mut pkt);
    assert_eq!(r.handle_packet(t0, &pkt, 0), Decision::Held);
}
