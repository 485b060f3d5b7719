//! Codec tests: literal frames, malformed input, and properties (encode then decode is the
//! identity, split delivery changes nothing, no input makes the decoder panic).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use proptest::prelude::*;

use super::super::auth::TAG_LEN;
use super::super::MAX_FRAME;
use super::*;
use crate::wire::{TcpBuilder, TcpOption};

fn decode_all(bytes: &[u8]) -> Result<Vec<Message>, ProtoError> {
    let mut d = FrameDecoder::new();
    d.push(bytes);
    let mut out = Vec::new();
    while let Some(m) = d.next()? {
        out.push(m);
    }
    assert_eq!(d.buffered(), 0, "bytes left over");
    Ok(out)
}

fn encoded(m: &Message) -> Vec<u8> {
    let mut v = Vec::new();
    m.encode(&mut v);
    v
}

fn t4(c: &str, s: &str) -> FourTuple {
    FourTuple {
        client: c.parse().unwrap(),
        server: s.parse().unwrap(),
    }
}

// ---- literal frames ----

#[test]
fn ping_literal() {
    let m = Message::Ping {
        token: 0x0102_0304_0506_0708,
    };
    assert_eq!(encoded(&m), [0, 0, 0, 9, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(decode_all(&encoded(&m)).unwrap(), vec![m]);
}

#[test]
fn register_literal() {
    let m = Message::Register {
        tuples: vec![t4("198.18.0.10:40000", "198.19.0.1:80")],
    };
    #[rustfmt::skip]
    let want = [
        0, 0, 0, 19,            // length: type + count + 14
        5,                      // Register
        0, 0, 0, 1,             // one tuple
        4, 198, 18, 0, 10, 0x9c, 0x40,   // client 198.18.0.10:40000
        4, 198, 19, 0, 1, 0, 80,         // server 198.19.0.1:80
    ];
    assert_eq!(encoded(&m), want);
    assert_eq!(decode_all(&want).unwrap(), vec![m]);
}

#[test]
fn hello_literal() {
    let m = Message::Hello(Hello {
        version: 1,
        role: Role::Intercept,
        auth_required: true,
        nonce: [7; 32],
        software: "ab".into(),
        features: 0x0102_0304,
        instance: 0,
        fleet_index: 0,
        fleet_size: 0,
    });
    let mut want = vec![0, 0, 0, 49, 1, b'T', b'C', b'P', b'Y', 0, 1, 2, 1];
    want.extend_from_slice(&[7; 32]);
    want.extend_from_slice(&[0, 2, b'a', b'b']);
    want.extend_from_slice(&[1, 2, 3, 4]);
    assert_eq!(encoded(&m), want);
    assert_eq!(decode_all(&want).unwrap(), vec![m]);
}

#[test]
fn hello_with_a_copier_identity_round_trips_and_old_builds_read_up_to_features() {
    let h = Hello {
        instance: 0x0102_0304_0506_0708,
        fleet_index: 2,
        fleet_size: 5,
        ..Hello::new(Role::Copier, true, [7; 32], "ab")
    };
    let f = encoded(&Message::Hello(h.clone()));
    let plain = encoded(&Message::Hello(Hello::new(
        Role::Copier,
        true,
        [7; 32],
        "ab",
    )));
    // The identity is appended after `features`: the rest is what a build without it sends.
    assert_eq!(f.len(), plain.len() + 12);
    assert_eq!(&f[4..plain.len()], &plain[4..]);
    assert_eq!(&f[plain.len()..], &[1, 2, 3, 4, 5, 6, 7, 8, 0, 2, 0, 5]);
    assert_eq!(decode_all(&f).unwrap(), vec![Message::Hello(h)]);
    // A Hello without it decodes as "not announced".
    let Message::Hello(d) = &decode_all(&plain).unwrap()[0] else {
        panic!()
    };
    assert_eq!((d.instance, d.fleet_index, d.fleet_size), (0, 0, 0));
    // Nor does one whose instance is 0 (not announced), whatever fleet share it carries: it
    // decodes as the Hello its encoding says, so it round-trips.
    let mut zero = plain.clone();
    zero.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0x58, 0x50, 0x43, 0x54]);
    let len = u32::try_from(zero.len() - 4).unwrap();
    zero[..4].copy_from_slice(&len.to_be_bytes());
    let decoded = decode_all(&zero).unwrap();
    let Message::Hello(d) = &decoded[0] else {
        panic!()
    };
    assert_eq!((d.instance, d.fleet_index, d.fleet_size), (0, 0, 0));
    assert_eq!(encoded(&decoded[0]), plain);
    assert_eq!(RegVerdict::from_code(4), RegVerdict::HeldByOther);
    assert_eq!(RegVerdict::HeldByOther.code(), 4);
    assert_eq!(RegVerdict::from_code(5), RegVerdict::ServerNotLocal);
    assert_eq!(RegVerdict::ServerNotLocal.code(), 5);
    assert!(!RegVerdict::ServerNotLocal.accepted());
}

#[test]
fn fleet_query_and_answer_round_trip_and_overlaps_are_found() {
    use super::{FleetMember, Message};
    let a = FleetMember {
        instance: 7,
        addr: "198.18.1.1:40000".parse().unwrap(),
        index: 0,
        size: 2,
    };
    let b = FleetMember {
        instance: 8,
        addr: "[fd00::1]:1".parse().unwrap(),
        index: 1,
        size: 2,
    };
    let m = Message::Fleet {
        copiers: vec![a, b],
    };
    assert_eq!(decode_all(&encoded(&m)).unwrap(), vec![m]);
    assert_eq!(
        decode_all(&encoded(&Message::FleetQuery)).unwrap(),
        vec![Message::FleetQuery]
    );
    assert!(!a.shares_ports_with(&b));
    assert!(a.shares_ports_with(&FleetMember { instance: 9, ..a }));
    // No fleet (or an older copier): every port.
    let whole = FleetMember {
        size: 1,
        index: 0,
        ..b
    };
    assert!(whole.shares_ports_with(&a) && whole.shares_ports_with(&b));
    assert!(FleetMember { size: 0, ..b }.shares_ports_with(&a));
    assert!(!FleetMember {
        index: 2,
        size: 4,
        ..a
    }
    .shares_ports_with(&FleetMember {
        index: 1,
        size: 4,
        ..a
    }));
}

#[test]
fn route_query_and_answer_round_trip() {
    use super::{Message, RouteCheck, RouteStatus};
    let q = Message::RouteQuery {
        nets: vec![
            ("198.18.0.0".parse().unwrap(), 24),
            ("fd00::".parse().unwrap(), 64),
        ],
    };
    assert_eq!(decode_all(&encoded(&q)).unwrap(), vec![q]);
    let a = Message::RouteAnswer {
        checks: vec![
            RouteCheck {
                net: ("198.18.0.0".parse().unwrap(), 24),
                status: RouteStatus::Fail,
                item: "route back to 198.18.0.0/24".into(),
                detail: "none".into(),
                fix: "ip route add 198.18.0.0/24 via 198.18.1.1".into(),
            },
            RouteCheck {
                net: ("fd00::".parse().unwrap(), 64),
                status: RouteStatus::Ok,
                item: "x".into(),
                detail: String::new(),
                fix: String::new(),
            },
        ],
    };
    assert_eq!(decode_all(&encoded(&a)).unwrap(), vec![a]);
    for s in [RouteStatus::Ok, RouteStatus::Warn, RouteStatus::Fail] {
        assert_eq!(RouteStatus::from_code(s.code()), s);
    }
    assert_eq!(RouteStatus::from_code(9), RouteStatus::Fail);
}

#[test]
fn hello_of_a_build_before_features_decodes_with_none() {
    // What an older build of version 2 sends: the body ends after `software`.
    let mut old = vec![0, 0, 0, 45, 1, b'T', b'C', b'P', b'Y', 0, 2, 1, 0];
    old.extend_from_slice(&[9; 32]);
    old.extend_from_slice(&[0, 2, b'o', b'k']);
    let got = decode_all(&old).unwrap();
    let Message::Hello(h) = &got[0] else {
        panic!("{got:?}")
    };
    assert_eq!((h.version, h.features, h.software.as_str()), (2, 0, "ok"));
    assert!(!h.has(FEATURE_PAYLOAD_REQUEST));
    // And what an older build reads of ours: everything up to `software`, the rest ignored
    // (the same rule `hello_of_a_later_version_with_extra_fields_still_decodes` checks).
    let new = Hello::new(Role::Copier, false, [9; 32], "ok");
    assert!(new.has(FEATURE_PAYLOAD_REQUEST));
    let f = encoded(&Message::Hello(new.clone()));
    assert_eq!(&f[4..old.len()], &old[4..]);
    assert_eq!(f.len(), old.len() + 4);
}

#[test]
fn synced_and_rules_literals() {
    assert_eq!(encoded(&Message::Synced), [0, 0, 0, 1, 15]);
    assert_eq!(
        decode_all(&[0, 0, 0, 1, 15]).unwrap(),
        vec![Message::Synced]
    );
    let m = Message::Rules { in_force: false };
    assert_eq!(encoded(&m), [0, 0, 0, 2, 16, 0]);
    assert_eq!(
        decode_all(&[0, 0, 0, 2, 16, 1]).unwrap(),
        vec![Message::Rules { in_force: true }]
    );
    assert!(matches!(
        first_error(&[0, 0, 0, 1, 16]),
        ProtoError::Truncated { .. }
    ));
}

#[test]
fn record_wait_literal() {
    let m = Message::RecordWait { micros: 2000 };
    let want = [0, 0, 0, 5, 12, 0, 0, 0x07, 0xd0];
    assert_eq!(encoded(&m), want);
    assert_eq!(decode_all(&want).unwrap(), vec![m]);
    // Cut short: an error naming the field, not a panic.
    assert!(
        matches!(
            first_error(&[0, 0, 0, 3, 12, 0, 0]),
            ProtoError::Truncated { .. }
        ),
        "{:?}",
        first_error(&[0, 0, 0, 3, 12, 0, 0])
    );
}

#[test]
fn open_wait_literal() {
    let m = Message::OpenWait { micros: 3000 };
    let want = [0, 0, 0, 5, 20, 0, 0, 0x0b, 0xb8];
    assert_eq!(encoded(&m), want);
    assert_eq!(decode_all(&want).unwrap(), vec![m]);
    assert!(
        matches!(
            first_error(&[0, 0, 0, 2, 20, 0]),
            ProtoError::Truncated { .. }
        ),
        "{:?}",
        first_error(&[0, 0, 0, 2, 20, 0])
    );
}

#[test]
fn register_payload_literal() {
    let t = FourTuple {
        client: "198.18.0.10:40000".parse().unwrap(),
        server: "198.19.0.1:80".parse().unwrap(),
    };
    let m = Message::RegisterPayload {
        tuples: vec![(t, 65495)],
    };
    #[rustfmt::skip]
    let want = [
        0, 0, 0, 23, 11,
        0, 0, 0, 1,                      // one tuple
        4, 198, 18, 0, 10, 0x9c, 0x40,   // client 198.18.0.10:40000
        4, 198, 19, 0, 1, 0, 80,         // server 198.19.0.1:80
        0, 0, 0xff, 0xd7,                // 65495 bytes
    ];
    assert_eq!(encoded(&m), want);
    assert_eq!(decode_all(&want).unwrap(), vec![m]);
    // A count that cannot fit, and a cut want, are errors, not panics.
    let mut bad = want;
    bad[8] = 2;
    assert!(matches!(
        first_error(&bad),
        ProtoError::CountTooLarge { .. }
    ));
    let mut cut = want[..want.len() - 1].to_vec();
    cut[3] -= 1;
    assert!(decode_all(&cut).is_err());
}

#[test]
fn records_literal() {
    let m = Message::Records {
        records: vec![Record {
            orig_len: 1500,
            headers: vec![0x45, 0],
            payload: vec![9],
            stamp: 0,
        }],
    };
    #[rustfmt::skip]
    let want = [
        0, 0, 0, 18, 7, 0, 0, 0, 1,
        0, 0, 0x05, 0xdc,   // orig_len 1500
        0, 2, 0x45, 0,      // headers
        0, 0, 0, 1, 9,      // payload
    ];
    assert_eq!(encoded(&m), want);
    assert_eq!(decode_all(&want).unwrap(), vec![m]);
}

#[test]
fn error_literal() {
    let m = Message::Error {
        code: 1,
        message: "v".into(),
    };
    assert_eq!(encoded(&m), [0, 0, 0, 6, 4, 0, 1, 0, 1, b'v']);
}

#[test]
fn hello_of_a_later_version_with_extra_fields_still_decodes() {
    let mut f = encoded(&Message::Hello(Hello::new(
        Role::Copier,
        false,
        [0; 32],
        "x",
    )));
    f.extend_from_slice(&[1, 2, 3]);
    let len = (f.len() - 4) as u32;
    f[..4].copy_from_slice(&len.to_be_bytes());
    let got = decode_all(&f).unwrap();
    assert!(matches!(&got[0], Message::Hello(h) if h.software == "x"));
}

// ---- malformed input ----

fn first_error(bytes: &[u8]) -> ProtoError {
    decode_all(bytes).expect_err("should not decode")
}

#[test]
fn oversized_length_is_refused_before_the_body_arrives() {
    let mut d = FrameDecoder::new();
    d.push(&((MAX_FRAME as u32) + 1).to_be_bytes());
    assert!(matches!(d.next(), Err(ProtoError::FrameTooLarge { .. })));
    assert!(matches!(d.next(), Err(ProtoError::Poisoned)));
    // Exactly MAX_FRAME is allowed: the decoder waits for the body.
    let mut d = FrameDecoder::new();
    d.push(&(MAX_FRAME as u32).to_be_bytes());
    assert!(d.next().unwrap().is_none());
}

#[test]
fn huge_count_is_refused_without_allocating() {
    // Register claiming 4 billion tuples in a 9-byte frame.
    let f = [0, 0, 0, 5, 5, 0xff, 0xff, 0xff, 0xff];
    assert!(matches!(
        first_error(&f),
        ProtoError::CountTooLarge {
            count: u32::MAX,
            ..
        }
    ));
    let f = [0, 0, 0, 5, 7, 0xff, 0xff, 0xff, 0xff];
    assert!(matches!(
        first_error(&f),
        ProtoError::CountTooLarge { what: "record", .. }
    ));
}

#[test]
fn malformed_bodies() {
    assert!(matches!(first_error(&[0, 0, 0, 0]), ProtoError::EmptyFrame));
    assert!(matches!(
        first_error(&[0, 0, 0, 1, 99]),
        ProtoError::UnknownType(99)
    ));
    assert!(matches!(
        first_error(&[0, 0, 0, 2, 8, 0]),
        ProtoError::Truncated { what: "token", .. }
    ));
    let mut ping = encoded(&Message::Ping { token: 1 });
    ping[3] += 1;
    ping.push(0);
    assert!(matches!(
        first_error(&ping),
        ProtoError::TrailingBytes {
            msg: "Ping",
            extra: 1
        }
    ));
    // Bad family.
    let f = [
        0, 0, 0, 19, 5, 0, 0, 0, 1, 5, 1, 1, 1, 1, 0, 1, 4, 1, 1, 1, 1, 0, 1,
    ];
    assert!(matches!(first_error(&f), ProtoError::BadFamily(5)));
    // Mixed families.
    let m = Message::Register {
        tuples: vec![t4("1.1.1.1:1", "1.1.1.1:1")],
    };
    let mut f = encoded(&m);
    f[16] = 6; // second address claims IPv6 but has 4 bytes: mixed, then truncated
    assert!(decode_all(&f).is_err());
    let good = FourTuple {
        client: "1.2.3.4:5".parse().unwrap(),
        server: "[::1]:80".parse().unwrap(),
    };
    let f = encoded(&Message::Register { tuples: vec![good] });
    assert!(matches!(first_error(&f), ProtoError::MixedFamilies));
    // Bad magic and bad role.
    let mut h = encoded(&Message::Hello(Hello::new(
        Role::Copier,
        false,
        [0; 32],
        "",
    )));
    h[5] = b'X';
    assert!(matches!(first_error(&h), ProtoError::BadMagic(_)));
    let mut h = encoded(&Message::Hello(Hello::new(
        Role::Copier,
        false,
        [0; 32],
        "",
    )));
    h[11] = 3;
    assert!(matches!(first_error(&h), ProtoError::BadRole(3)));
    // Bad UTF-8.
    let f = [0, 0, 0, 6, 4, 0, 1, 0, 1, 0xff];
    assert!(matches!(first_error(&f), ProtoError::BadUtf8));
}

#[test]
fn decoder_stays_failed_after_an_error() {
    let mut d = FrameDecoder::new();
    d.push(&[0, 0, 0, 1, 99]);
    d.push(&encoded(&Message::Ping { token: 3 }));
    assert!(d.next().is_err());
    assert!(matches!(d.next(), Err(ProtoError::Poisoned)));
}

// ---- splitting of large lists ----

#[test]
fn big_records_list_is_split_into_frames_under_the_limit() {
    let rec = Record {
        orig_len: 9000,
        headers: vec![0x45; 52],
        payload: vec![1; 8000],
        stamp: 0,
    };
    let records = vec![rec; 300]; // ~2.4 MB
    let m = Message::Records {
        records: records.clone(),
    };
    let bytes = encoded(&m);
    // Walk the frames: each within the limit.
    let mut off = 0;
    let mut frames = 0;
    while off < bytes.len() {
        let len = u32::from_be_bytes(bytes[off..off + 4].try_into().unwrap()) as usize;
        assert!(len <= MAX_FRAME);
        off += 4 + len;
        frames += 1;
    }
    assert_eq!(frames, 3);
    let got: Vec<Record> = decode_all(&bytes)
        .unwrap()
        .into_iter()
        .flat_map(|m| match m {
            Message::Records { records } => records,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, records);
}

#[test]
fn oversized_payload_is_clipped_to_fit_one_frame() {
    let rec = Record {
        orig_len: 1,
        headers: vec![1; 40],
        payload: vec![2; 2 * MAX_FRAME],
        stamp: 0,
    };
    let bytes = encoded(&Message::Records { records: vec![rec] });
    assert_eq!(bytes.len(), 4 + MAX_FRAME);
    let got = decode_all(&bytes).unwrap();
    let Message::Records { records } = &got[0] else {
        panic!()
    };
    assert_eq!(records[0].headers, vec![1; 40]);
    assert!(records[0].payload.iter().all(|&b| b == 2));
}

#[test]
fn stamped_records_are_type_19_and_keep_their_stamps() {
    let rec = |stamp| Record {
        orig_len: 40,
        headers: vec![0x45; 40],
        payload: b"hi".to_vec(),
        stamp,
    };
    let records = vec![rec(1_764_000_000_123_456_789), rec(0)];
    let mut bytes = Vec::new();
    encode_stamped_records(&records, &mut bytes);
    assert_eq!(bytes[4], 19);
    assert_eq!(&bytes[9..17], &1_764_000_000_123_456_789u64.to_be_bytes());
    assert_eq!(
        decode_all(&bytes).unwrap(),
        vec![Message::Records {
            records: records.clone()
        }]
    );
    // Message::Records picks the stamped form when a record has a stamp.
    assert_eq!(
        encoded(&Message::Records {
            records: records.clone()
        }),
        bytes
    );
    // A writer to an older peer drops the stamps: plain Records (type 7), stamps 0.
    let mut plain = Vec::new();
    encode_records(&records, &mut plain);
    assert_eq!(plain[4], 7);
    let Message::Records { records: got } = &decode_all(&plain).unwrap()[0] else {
        panic!()
    };
    assert!(got.iter().all(|r| r.stamp == 0));
    assert_eq!(got[0].payload, b"hi");
    // A truncated stamp is an error, not a panic.
    let mut cut = vec![0, 0, 0, 9, 19, 0, 0, 0, 1];
    cut.extend_from_slice(&[0; 4]);
    assert!(decode_all(&cut).is_err());
}

#[test]
fn pong_carries_the_clock_only_when_set() {
    let old = encoded(&Message::Pong { token: 5, clock: 0 });
    assert_eq!(
        old,
        [0, 0, 0, 9, 9, 0, 0, 0, 0, 0, 0, 0, 5],
        "as before the feature"
    );
    let new = encoded(&Message::Pong { token: 5, clock: 7 });
    assert_eq!(new.len(), old.len() + 8);
    assert_eq!(
        decode_all(&new).unwrap(),
        vec![Message::Pong { token: 5, clock: 7 }]
    );
}

#[test]
fn stamped_oversized_payload_is_clipped_to_fit_one_frame() {
    let rec = Record {
        orig_len: 1,
        headers: vec![1; 40],
        payload: vec![2; 2 * MAX_FRAME],
        stamp: 3,
    };
    let bytes = encoded(&Message::Records { records: vec![rec] });
    assert_eq!(bytes.len(), 4 + MAX_FRAME);
    let Message::Records { records } = &decode_all(&bytes).unwrap()[0] else {
        panic!()
    };
    assert_eq!(records[0].stamp, 3);
}

#[test]
fn empty_lists_encode_as_one_frame() {
    let m = Message::Unregister { tuples: vec![] };
    assert_eq!(encoded(&m), [0, 0, 0, 5, 6, 0, 0, 0, 0]);
    assert_eq!(decode_all(&encoded(&m)).unwrap(), vec![m]);
}

// ---- records from packets ----

fn response(src: &str, dst: &str, payload: &[u8], options: &[TcpOption<'_>]) -> Vec<u8> {
    crate::testkit::emit(&TcpBuilder {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        window: 500,
        options,
        payload,
        ..crate::testkit::SEGMENT
    })
}

#[test]
fn record_from_whole_and_truncated_packets() {
    let opts = [TcpOption::Timestamps { tsval: 1, tsecr: 2 }];
    let pkt = response("198.19.0.1:80", "198.18.0.10:40000", &[b'x'; 100], &opts);
    let hl = 20 + 20 + 12;
    let want_tuple = t4("198.18.0.10:40000", "198.19.0.1:80");
    // Whole packet, headers only.
    let (t, r) = Record::from_packet(&pkt, 0).unwrap();
    assert_eq!(t, want_tuple);
    assert_eq!(r.orig_len as usize, pkt.len());
    assert_eq!(r.headers, pkt[..hl]);
    assert!(r.payload.is_empty());
    assert_eq!(r.tuple().unwrap(), want_tuple);
    // Whole packet, 10 payload bytes.
    let (_, r) = Record::from_packet(&pkt, 10).unwrap();
    assert_eq!(r.payload, vec![b'x'; 10]);
    // Cut after 70 bytes (NFQUEUE copy range), payload asked for: what is there.
    let (t, r) = Record::from_packet(&pkt[..70], 1000).unwrap();
    assert_eq!(t, want_tuple);
    assert_eq!(r.orig_len as usize, pkt.len());
    assert_eq!(r.payload, vec![b'x'; 70 - hl]);
    // Padding after the IP length is not payload.
    let mut padded = pkt.clone();
    padded.extend_from_slice(&[0xee; 6]);
    let (_, r) = Record::from_packet(&padded, 1000).unwrap();
    assert_eq!(r.payload, vec![b'x'; 100]);
    // Cut inside the TCP header: refused.
    assert!(Record::from_packet(&pkt[..hl - 1], 0).is_err());
}

#[test]
fn record_from_ipv6_packet() {
    let pkt = response("[2001:db8::1]:443", "[2001:db8::a]:5555", b"hello", &[]);
    let (t, r) = Record::from_packet(&pkt[..60], 0).unwrap();
    assert_eq!(t, t4("[2001:db8::a]:5555", "[2001:db8::1]:443"));
    assert_eq!(r.orig_len as usize, pkt.len());
    assert_eq!(r.headers.len(), 60);
    assert_eq!(r.tuple().unwrap(), t);
}

#[test]
fn response_headers_refuse_what_wire_refuses() {
    let pkt = response("198.19.0.1:80", "198.18.0.10:40000", b"", &[]);
    // Not TCP.
    let mut udp = pkt.clone();
    udp[9] = 17;
    assert!(parse_response_headers(&udp).is_err());
    // Total length smaller than the headers.
    let mut short = pkt.clone();
    short[2..4].copy_from_slice(&30u16.to_be_bytes());
    assert!(parse_response_headers(&short).is_err());
    // Empty and garbage.
    assert!(parse_response_headers(&[]).is_err());
    assert!(parse_response_headers(&[0x45]).is_err());
    assert!(parse_response_headers(&[0x75; 60]).is_err());
}

// ---- properties ----

fn arb_v4() -> impl Strategy<Value = SocketAddr> {
    (any::<u32>(), any::<u16>())
        .prop_map(|(a, p)| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(a), p)))
}

fn arb_v6() -> impl Strategy<Value = SocketAddr> {
    (any::<u128>(), any::<u16>())
        .prop_map(|(a, p)| SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(a), p, 0, 0)))
}

fn arb_tuple() -> impl Strategy<Value = FourTuple> {
    prop_oneof![
        (arb_v4(), arb_v4()).prop_map(|(client, server)| FourTuple::new(client, server)),
        (arb_v6(), arb_v6()).prop_map(|(client, server)| FourTuple::new(client, server)),
    ]
}

fn arb_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

fn arb_record() -> impl Strategy<Value = Record> {
    (
        any::<u32>(),
        arb_bytes(130),
        arb_bytes(300),
        prop_oneof![Just(0u64), any::<u64>()],
    )
        .prop_map(|(orig_len, headers, payload, stamp)| Record {
            orig_len,
            headers,
            payload,
            stamp,
        })
}

fn arb_string() -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<char>(), 0..40).prop_map(String::from_iter)
}

fn arb_message() -> impl Strategy<Value = Message> {
    let nonce = proptest::array::uniform32(any::<u8>());
    let role = prop_oneof![Just(Role::Copier), Just(Role::Intercept)];
    prop_oneof![
        (
            any::<u16>(),
            role,
            any::<bool>(),
            nonce,
            arb_string(),
            any::<u32>()
        )
            .prop_map(
                |(version, role, auth_required, nonce, software, features)| {
                    Message::Hello(Hello {
                        version,
                        role,
                        auth_required,
                        nonce,
                        software,
                        features,
                        instance: 0,
                        fleet_index: 0,
                        fleet_size: 0,
                    })
                }
            ),
        proptest::collection::vec((arb_tuple(), any::<u32>()), 0..20)
            .prop_map(|tuples| Message::RegisterPayload { tuples }),
        nonce.prop_map(|mac| Message::Auth { mac }),
        nonce.prop_map(|mac| Message::AuthOk { mac }),
        (any::<u16>(), arb_string()).prop_map(|(code, message)| Message::Error { code, message }),
        proptest::collection::vec(arb_tuple(), 0..20)
            .prop_map(|tuples| Message::Register { tuples }),
        proptest::collection::vec(arb_tuple(), 0..20)
            .prop_map(|tuples| Message::Unregister { tuples }),
        proptest::collection::vec(arb_record(), 0..10)
            .prop_map(|records| Message::Records { records }),
        any::<u64>().prop_map(|token| Message::Ping { token }),
        any::<u32>().prop_map(|micros| Message::RecordWait { micros }),
        any::<u32>().prop_map(|micros| Message::OpenWait { micros }),
        any::<bool>().prop_map(|in_force| Message::Rules { in_force }),
        Just(Message::Synced),
        (any::<u64>(), any::<u64>()).prop_map(|(token, clock)| Message::Pong { token, clock }),
        proptest::collection::vec((arb_tuple(), any::<u8>()), 0..20).prop_map(|v| {
            Message::Registered {
                results: v
                    .into_iter()
                    .map(|(t, c)| (t, RegVerdict::from_code(c)))
                    .collect(),
            }
        }),
    ]
}

/// Drive a decoder to the end of what it has, returning messages and the first error.
fn drain(d: &mut FrameDecoder, out: &mut Vec<Message>) -> Result<(), ProtoError> {
    while let Some(m) = d.next()? {
        out.push(m);
    }
    Ok(())
}

proptest! {
    #[test]
    fn encode_then_decode_is_identity(m in arb_message()) {
        prop_assert_eq!(decode_all(&encoded(&m)).unwrap(), vec![m]);
    }

    #[test]
    fn split_delivery_gives_the_same_messages(
        msgs in proptest::collection::vec(arb_message(), 1..8),
        cuts in proptest::collection::vec(1usize..64, 1..400),
    ) {
        let mut bytes = Vec::new();
        for m in &msgs {
            m.encode(&mut bytes);
        }
        let mut d = FrameDecoder::new();
        let mut got = Vec::new();
        let mut off = 0;
        let mut i = 0;
        while off < bytes.len() {
            let n = cuts[i % cuts.len()].min(bytes.len() - off);
            d.push(&bytes[off..off + n]);
            off += n;
            i += 1;
            drain(&mut d, &mut got).unwrap();
        }
        prop_assert_eq!(got, msgs);
        prop_assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in arb_bytes(2000)) {
        let mut d = FrameDecoder::new();
        d.push(&bytes);
        let mut out = Vec::new();
        let _ = drain(&mut d, &mut out);
    }

    #[test]
    fn corrupted_frames_never_panic(m in arb_message(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
        let mut bytes = encoded(&m);
        for (at, v) in flips {
            let i = at % bytes.len();
            bytes[i] = v;
        }
        let mut d = FrameDecoder::new();
        d.push(&bytes);
        let mut out = Vec::new();
        let _ = drain(&mut d, &mut out);
    }

    #[test]
    fn response_headers_never_panic(bytes in arb_bytes(200)) {
        let _ = parse_response_headers(&bytes);
    }
}

// ---- frame limit and tags ----

#[test]
fn settable_limit_refuses_a_big_frame_from_its_length_alone() {
    let mut d = FrameDecoder::new();
    d.set_max_frame(crate::proto::PRE_AUTH_MAX_FRAME);
    let mut f = encoded(&Message::Error {
        code: 1,
        message: "x".repeat(5000),
    });
    f.truncate(5); // only the length field and the type have arrived
    d.push(&f);
    assert!(matches!(
        d.next(),
        Err(ProtoError::FrameTooLarge { max: 4096, .. })
    ));
    // A small frame passes, and the limit can be raised again (never above MAX_FRAME).
    let mut d = FrameDecoder::new();
    d.set_max_frame(crate::proto::PRE_AUTH_MAX_FRAME);
    d.push(&encoded(&Message::Ping { token: 1 }));
    assert_eq!(d.next().unwrap(), Some(Message::Ping { token: 1 }));
    d.set_max_frame(usize::MAX);
    assert_eq!(d.max_frame(), MAX_FRAME);
}

use crate::proto::auth::{session_keys, SessionKeys};

fn keys() -> SessionKeys {
    session_keys(b"a-long-enough-shared-secret", &[1; 32], &[2; 32])
}

/// The frames of `msgs` as the copier sends them after the handshake, one Vec per frame.
fn sealed_c2i(msgs: &[Message]) -> Vec<Vec<u8>> {
    let k = keys();
    let mut counter = 0;
    msgs.iter()
        .map(|m| {
            let mut out = Vec::new();
            seal_frames(&k.copier_to_intercept, &mut counter, &encoded(m), &mut out);
            out
        })
        .collect()
}

/// An intercept-side decoder after the handshake.
fn intercept_decoder() -> FrameDecoder {
    let mut d = FrameDecoder::new();
    d.authenticate(keys().copier_to_intercept, Role::Copier);
    d
}

fn three() -> Vec<Message> {
    vec![
        Message::Register {
            tuples: vec![t4("198.19.0.1:1000", "198.18.2.2:80")],
        },
        Message::Ping { token: 7 },
        Message::Unregister {
            tuples: vec![t4("198.19.0.1:1000", "198.18.2.2:80")],
        },
    ]
}

#[test]
fn sealed_frames_decode_in_order_and_the_length_covers_the_tag() {
    let frames = sealed_c2i(&three());
    let plain = encoded(&three()[1]);
    assert_eq!(frames[1].len(), plain.len() + TAG_LEN);
    assert_eq!(
        u32::from_be_bytes(frames[1][..4].try_into().unwrap()) as usize,
        plain.len() - 4 + TAG_LEN
    );
    assert_eq!(frames[1][4..plain.len()], plain[4..]);
    let mut d = intercept_decoder();
    for f in &frames {
        d.push(f);
    }
    let mut got = Vec::new();
    drain(&mut d, &mut got).unwrap();
    assert_eq!(got, three());
    // Several frames sealed by one call are the same bytes as one call per frame.
    let mut all = Vec::new();
    for m in three() {
        m.encode(&mut all);
    }
    let mut one_call = Vec::new();
    let mut counter = 0;
    seal_frames(
        &keys().copier_to_intercept,
        &mut counter,
        &all,
        &mut one_call,
    );
    assert_eq!(counter, 3);
    assert_eq!(one_call, frames.concat());
}

fn refused(frames: &[&[u8]]) -> (usize, ProtoError) {
    let mut d = intercept_decoder();
    for (i, f) in frames.iter().enumerate() {
        d.push(f);
        match d.next() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("frame {i} incomplete"),
            Err(e) => {
                assert!(matches!(d.next(), Err(ProtoError::Poisoned)));
                return (i, e);
            }
        }
    }
    panic!("every frame was accepted");
}

#[test]
fn a_flipped_bit_anywhere_is_refused() {
    let frames = sealed_c2i(&three());
    for byte in 0..frames[0].len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = frames[0].clone();
            bad[byte] ^= bit;
            // A changed length may also ask for more bytes than there are: push the next
            // frame too, the decoder must fail and never hand out the message.
            let mut d = intercept_decoder();
            d.push(&bad);
            d.push(&frames[1]);
            d.push(&frames[2]);
            let mut out = Vec::new();
            let r = drain(&mut d, &mut out);
            assert!(
                out.is_empty() && (r.is_err() || d.buffered() > 0),
                "byte {byte} bit {bit:#x}: {out:?} {r:?}"
            );
            if byte >= 4 {
                // Body or tag: a clear tag error naming the sender and the frame.
                let e = r.unwrap_err();
                assert!(
                    matches!(
                        e,
                        ProtoError::BadTag {
                            from: "copier",
                            frame: 0
                        }
                    ),
                    "{e:?}"
                );
                assert!(e.to_string().contains("from the copier"), "{e}");
            }
        }
    }
}

#[test]
fn a_replayed_frame_is_refused() {
    let f = sealed_c2i(&three());
    let (at, e) = refused(&[&f[0], &f[1], &f[1]]);
    assert_eq!(at, 2);
    assert!(matches!(e, ProtoError::BadTag { frame: 2, .. }), "{e:?}");
    // Replaying the first frame later, too.
    let (at, _) = refused(&[&f[0], &f[0]]);
    assert_eq!(at, 1);
}

#[test]
fn a_dropped_or_reordered_frame_is_refused() {
    let f = sealed_c2i(&three());
    let (at, e) = refused(&[&f[0], &f[2]]);
    assert_eq!(at, 1);
    assert!(matches!(e, ProtoError::BadTag { frame: 1, .. }), "{e:?}");
    let (at, _) = refused(&[&f[1], &f[0]]);
    assert_eq!(at, 0);
}

#[test]
fn a_frame_from_the_other_direction_is_refused() {
    // A frame the intercept sealed, reflected back to it as if the copier had sent it.
    let k = keys();
    let mut reflected = Vec::new();
    seal_frames(
        &k.intercept_to_copier,
        &mut 0,
        &encoded(&Message::Ping { token: 7 }),
        &mut reflected,
    );
    let (at, e) = refused(&[&reflected]);
    assert_eq!(at, 0);
    assert!(matches!(e, ProtoError::BadTag { .. }), "{e:?}");
}

#[test]
fn untagged_or_foreign_frames_are_refused_after_authentication() {
    // A plain frame (no tag), a frame shorter than a tag, and one keyed with another secret.
    let plain = encoded(&three()[0]);
    assert!(matches!(refused(&[&plain]).1, ProtoError::BadTag { .. }));
    // Shorter than a tag plus a type byte: refused without looking further.
    let ping = encoded(&Message::Ping { token: 7 });
    assert!(matches!(refused(&[&ping]).1, ProtoError::EmptyFrame));
    let tiny = [0, 0, 0, TAG_LEN as u8];
    let mut d = intercept_decoder();
    d.push(&tiny);
    assert!(matches!(d.next(), Err(ProtoError::EmptyFrame)));
    let other = session_keys(b"another-long-enough-secret", &[1; 32], &[2; 32]);
    let mut foreign = Vec::new();
    seal_frames(&other.copier_to_intercept, &mut 0, &plain, &mut foreign);
    assert!(matches!(refused(&[&foreign]).1, ProtoError::BadTag { .. }));
}

#[test]
fn tagged_frames_may_exceed_max_frame_by_the_tag_only() {
    let mut d = intercept_decoder();
    d.push(&((MAX_FRAME + TAG_LEN) as u32).to_be_bytes());
    assert!(d.next().unwrap().is_none());
    let mut d = intercept_decoder();
    d.push(&((MAX_FRAME + TAG_LEN + 1) as u32).to_be_bytes());
    assert!(matches!(d.next(), Err(ProtoError::FrameTooLarge { .. })));
}

proptest! {
    #[test]
    fn sealed_messages_round_trip(ms in proptest::collection::vec(arb_message(), 1..5), chunk in 1usize..300) {
        let frames = sealed_c2i(&ms).concat();
        let mut d = intercept_decoder();
        let mut out = Vec::new();
        for piece in frames.chunks(chunk) {
            d.push(piece);
            drain(&mut d, &mut out).unwrap();
        }
        prop_assert_eq!(out, ms);
    }

    #[test]
    fn corrupted_sealed_frames_never_decode(m in arb_message(), at in any::<usize>(), flip in 1u8..=255) {
        let mut f = sealed_c2i(std::slice::from_ref(&m)).concat();
        let i = 4 + at % (f.len() - 4);
        f[i] ^= flip;
        let mut d = intercept_decoder();
        d.push(&f);
        let mut out = Vec::new();
        prop_assert!(drain(&mut d, &mut out).is_err());
        prop_assert!(out.is_empty());
    }
}
