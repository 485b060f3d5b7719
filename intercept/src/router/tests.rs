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

fn router() -> Router {
    Router::new(RouterConfig {
        allow: AllowList::new(vec![ALLOWED.parse::<IpNet>().unwrap()]),
        hold_time: HOLD,
        hold_capacity: 4,
    })
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
    assert!(r.handle_register(t0, A, &[tuple(c)]).is_empty());
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
    r.handle_register(t0, A, &[tuple(c)]);
    let pkt = response(c, TcpFlags::ACK | TcpFlags::PSH, b"HTTP/1.1 200 OK\r\n");
    let (_, rec) = record_of(r.handle_packet(t0, &pkt, 0));
    assert_eq!(rec.headers.len(), 20 + 24);
    assert!(rec.payload.is_empty());
    let (_, rec) = record_of(r.handle_packet(t0, &pkt, 8));
    assert_eq!(rec.payload, b"HTTP/1.1");
    // A copy cut after 50 bytes (NFQUEUE copy range) still routes, with what there is.
    let (_, rec) = record_of(r.handle_packet(t0, &pkt[..50], 100));
    assert_eq!(rec.payload, b"HTTP/1");
    assert_eq!(rec.orig_len as usize, pkt.len());
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
        .is_empty());
    let out = r.handle_register(t0 + Duration::from_millis(300), B, &[tuple(c)]);
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
    assert!(r.handle_register(t0 + HOLD, A, &[tuple(c)]).is_empty());
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
        .is_empty());
    assert_eq!(r.handle_register(t0, A, &[tuple("198.19.7.1:6")]).len(), 1);
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
    // A's responses are now held (fail closed), not accepted.
    assert_eq!(
        r.handle_packet(t0, &syn_ack("198.19.7.1:2"), 0),
        Decision::Held
    );
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
    let out = r.handle_register(t0, A, &[t]);
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
