//! HTTP/2 connections through the flows and the comparator: exchanges paired by stream id with
//! answers interleaved in different orders on each server, gRPC trailers compared, answer
//! times, and connections that lost bytes counted as not compared (never as differences).

use super::*;
use crate::h2::tests::{data, frame, headers};
use crate::{Comparator, CompareConfig, Outcome};
use fluke_hpack::Encoder;

const CISN: u32 = 1000;
const OISN: u32 = 50_000;
const TISN: u32 = 900_000;

struct H {
    f: Flows<u16>,
    t: Instant,
    next: [u32; 4],
    out: Vec<Exchange>,
}

impl H {
    fn new(cfg: FlowConfig) -> H {
        let mut h = H {
            f: Flows::new(cfg),
            t: Instant::now(),
            next: [CISN + 1, OISN + 1, TISN + 1, TISN + 1],
            out: Vec::new(),
        };
        h.seg(Side::Client, true, b"");
        h.seg(Side::Online, true, b"");
        h.seg(Side::Candidate, true, b"");
        h
    }

    fn seg(&mut self, side: Side, syn: bool, payload: &[u8]) {
        self.seg_cut(side, syn, payload, false);
    }

    fn seg_cut(&mut self, side: Side, syn: bool, payload: &[u8], cut: bool) {
        let i = idx(side);
        let seq = if syn { self.next[i] - 1 } else { self.next[i] };
        let s = Seg {
            seq,
            ack: None,
            syn,
            fin: false,
            rst: false,
            payload,
            cut,
        };
        self.out.extend(self.f.handle(self.t, &7, side, s));
        assert_eq!(
            self.f.bytes(),
            self.f.recount(),
            "the running total of the streams' bytes"
        );
        self.next[i] = self.next[i].wrapping_add(payload.len() as u32);
    }

    /// `bytes` in segments of `mss`.
    fn send(&mut self, side: Side, bytes: &[u8], mss: usize) {
        for p in bytes.chunks(mss) {
            self.seg(side, false, p);
        }
    }
}

/// The client's preface, SETTINGS and a GET per path on streams 1, 3, 5, ...
fn requests(enc: &mut Encoder<'static>, paths: &[&str]) -> Vec<u8> {
    let mut b = common::h2::PREFACE.to_vec();
    b.extend(frame(4, 0, 0, &[0, 3, 0, 0, 0, 100]));
    for (i, p) in paths.iter().enumerate() {
        b.extend(headers(
            enc,
            2 * i as u32 + 1,
            true,
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":authority", "lab"),
                (":path", p),
            ],
        ));
    }
    b
}

/// Answers on the streams in `order`: status and a JSON body naming the stream's path index.
fn answers(
    enc: &mut Encoder<'static>,
    order: &[u32],
    status: impl Fn(u32) -> &'static str,
) -> Vec<u8> {
    let mut b = frame(4, 0, 0, &[]);
    for &s in order {
        b.extend(headers(
            enc,
            s,
            false,
            &[
                (":status", status(s)),
                ("content-type", "application/json"),
                ("server", "nginx"),
            ],
        ));
    }
    for &s in order.iter().rev() {
        b.extend(data(s, true, format!("{{\"n\":{}}}", s / 2).as_bytes()));
    }
    b
}

#[test]
fn exchanges_pair_by_stream_not_by_order() {
    // before HTTP/2 was read, the preface failed as an HTTP/1.x request line (version 2.0) and
    // the connection was compared whole, as bytes (not_http): the preface is looked for first
    assert!(crate::http::parse_request_head(common::h2::PREFACE).is_err());
    for mss in [7, 100, 1460] {
        let mut h = H::new(FlowConfig::default());
        let (mut ce, mut oe, mut te) = (Encoder::new(), Encoder::new(), Encoder::new());
        h.send(
            Side::Client,
            &requests(&mut ce, &["/items/0", "/items/1", "/items/2", "/items/3"]),
            mss,
        );
        h.later_ms(4);
        h.send(
            Side::Online,
            &answers(&mut oe, &[3, 1, 7, 5], |_| "200"),
            mss,
        );
        assert!(h.out.is_empty(), "nothing before the candidate answers");
        // the candidate answers in another order, and stream 5 (/items/2) with a 500
        h.send(
            Side::Candidate,
            &answers(
                &mut te,
                &[7, 5, 1, 3],
                |s| if s == 5 { "500" } else { "200" },
            ),
            mss,
        );
        assert_eq!(h.out.len(), 4, "mss {mss}");
        let mut cmp = Comparator::new(CompareConfig::default());
        let mut differ = Vec::new();
        for e in &h.out {
            let path = String::from_utf8_lossy(&e.request)
                .lines()
                .next()
                .unwrap()
                .to_string();
            let n: u32 = path
                .split('/')
                .nth(2)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            // the body of each answer names its own request's stream: paired by stream
            let want = format!("{{\"n\":{n}}}");
            assert!(e.online.bytes.ends_with(want.as_bytes()), "{path}");
            assert!(e.candidate.bytes.ends_with(want.as_bytes()), "{path}");
            assert_eq!(e.online.time, Some(Duration::from_millis(4)));
            let v = cmp.compare(e);
            if v.outcome == Outcome::Differ {
                differ.push((
                    v.request.clone(),
                    v.diffs
                        .iter()
                        .map(|d| (d.field.clone(), d.online.clone(), d.test.clone()))
                        .collect::<Vec<_>>(),
                ));
            }
        }
        assert_eq!(
            differ,
            vec![(
                "GET /items/2".to_string(),
                vec![(
                    "status".to_string(),
                    Some("200".to_string()),
                    Some("500".to_string())
                )]
            )]
        );
        assert_eq!((cmp.totals().compared, cmp.totals().equal), (4, 3));
        assert_eq!(h.f.counts().h2, 1);
        assert_eq!(h.f.counts().h2_broken, 0);
        assert_eq!(h.f.sizes().1, 0, "nothing waits");
        assert_eq!(h.f.bytes(), 0, "nothing held once every stream ended");
    }
}

impl H {
    fn later_ms(&mut self, ms: u64) {
        self.t += Duration::from_millis(ms);
    }
}

/// A unary gRPC call on stream `s`: HEADERS, a length-prefixed message, trailers.
fn grpc_answer(
    enc: &mut Encoder<'static>,
    s: u32,
    msg: &[u8],
    status: &str,
    message: &str,
) -> Vec<u8> {
    let mut b = headers(
        enc,
        s,
        false,
        &[(":status", "200"), ("content-type", "application/grpc")],
    );
    let mut m = vec![0];
    m.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    m.extend_from_slice(msg);
    b.extend(data(s, false, &m));
    let mut t = vec![("grpc-status", status)];
    if !message.is_empty() {
        t.push(("grpc-message", message));
    }
    b.extend(headers(enc, s, true, &t));
    b
}

#[test]
fn grpc_trailers_and_bodies_are_compared() {
    let mut h = H::new(FlowConfig::default());
    let (mut ce, mut oe, mut te) = (Encoder::new(), Encoder::new(), Encoder::new());
    let mut req = common::h2::PREFACE.to_vec();
    for (s, method) in [(1, "Unary"), (3, "Fail"), (5, "Echo")] {
        req.extend(headers(
            &mut ce,
            s,
            false,
            &[
                (":method", "POST"),
                (":scheme", "http"),
                (":path", &format!("/lab.Lab/{method}")),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ],
        ));
        req.extend(data(s, true, &[0, 0, 0, 0, 1, b'x']));
    }
    h.send(Side::Client, &req, 500);
    let mut on = Vec::new();
    let mut te_b = Vec::new();
    for s in [5, 1, 3] {
        on.extend(grpc_answer(&mut oe, s, b"ok", "0", ""));
    }
    for s in [1, 3, 5] {
        let (msg, st, m): (&[u8], _, _) = match s {
            3 => (b"", "13", "boom"),
            5 => (b"ko", "0", ""),
            _ => (b"ok", "0", ""),
        };
        te_b.extend(grpc_answer(&mut te, s, msg, st, m));
    }
    h.send(Side::Online, &on, 1460);
    h.send(Side::Candidate, &te_b, 1460);
    assert_eq!(h.out.len(), 3);
    let mut cmp = Comparator::new(CompareConfig::default());
    let mut got = Vec::new();
    for e in &h.out {
        let v = cmp.compare(e);
        let fields: Vec<String> = v
            .diffs
            .iter()
            .map(|d| format!("{}={:?}", d.field, d.test))
            .collect();
        got.push((v.endpoint.clone(), fields));
    }
    got.sort();
    let body = |b: &[u8]| {
        format!(
            "body={:?}",
            Some(format!("{} bytes {}", b.len(), fnv_of(b)))
        )
    };
    assert_eq!(
        got,
        vec![
            (
                "POST /lab.Lab/Echo".to_string(),
                vec![body(b"\0\0\0\0\x02ko")]
            ),
            (
                "POST /lab.Lab/Fail".to_string(),
                vec![
                    body(b"\0\0\0\0\0"),
                    "header:grpc-message=Some(\"boom\")".to_string(),
                    "header:grpc-status=Some(\"13\")".to_string()
                ]
            ),
            ("POST /lab.Lab/Unary".to_string(), vec![]),
        ]
    );
    assert_eq!(
        (
            cmp.totals().compared,
            cmp.totals().equal,
            cmp.totals().differing
        ),
        (3, 1, 2)
    );
    // the test answers' grpc-status, counted
    let counted: Vec<(&str, u64)> = cmp
        .totals()
        .grpc_status
        .iter()
        .map(|(k, n)| (k.as_str(), *n))
        .collect();
    assert_eq!(counted, vec![("0", 2), ("13", 1)]);
    assert!(
        cmp.summary()
            .to_string()
            .contains("; test grpc-status: 0 x2, 13 x1"),
        "{}",
        cmp.summary()
    );
}

fn fnv_of(b: &[u8]) -> String {
    format!("{:016x}", crate::fields::fnv(b))
}

#[test]
fn a_connection_that_lost_answer_bytes_is_not_compared() {
    let mut h = H::new(FlowConfig::default());
    let (mut ce, mut oe, mut te) = (Encoder::new(), Encoder::new(), Encoder::new());
    h.send(Side::Client, &requests(&mut ce, &["/a", "/b", "/c"]), 1460);
    h.send(Side::Online, &answers(&mut oe, &[1, 3, 5], |_| "200"), 1460);
    // the candidate's first answer whole, then a record cut short (the rest of its bytes lost)
    let first = answers(&mut te, &[1], |_| "200");
    h.send(Side::Candidate, &first, 1460);
    assert_eq!(h.out.len(), 1, "the answer before the loss is compared");
    let rest = answers(&mut te, &[3, 5], |_| "200");
    h.seg_cut(Side::Candidate, false, &rest[..20], true);
    h.send(Side::Candidate, &rest[20..], 1460);
    assert_eq!(h.out.len(), 1, "nothing after the loss");
    assert_eq!(h.f.counts().h2_broken, 1);
    assert_eq!(
        h.f.sizes().1,
        0,
        "the exchanges waiting for the lost answers are dropped"
    );
    assert_eq!(h.f.bytes(), 0);
    // and they are not counted expired later
    h.later_ms(60_000);
    assert!(h.f.expire(h.t).is_empty());
    assert_eq!(h.f.pending_counts().expired, 0);
}

#[test]
fn a_hole_past_the_bound_or_a_header_block_that_does_not_decode_stops_the_connection() {
    // a hole (a lost record) that the out-of-order bound cannot wait for
    let mut h = H::new(FlowConfig {
        max_held: 64,
        ..FlowConfig::default()
    });
    let (mut ce, mut oe, mut te) = (Encoder::new(), Encoder::new(), Encoder::new());
    h.send(Side::Client, &requests(&mut ce, &["/a", "/b"]), 1460);
    h.send(Side::Online, &answers(&mut oe, &[1, 3], |_| "200"), 1460);
    let t = answers(&mut te, &[1, 3], |_| "200");
    h.next[2] += 10; // 10 bytes never come
    h.send(Side::Candidate, &t[10..], 30);
    assert!(h.out.is_empty());
    assert_eq!(h.f.counts().h2_broken, 1);
    assert_eq!(h.f.sizes().1, 0);
    // a candidate whose first header block is not HPACK (the table cannot be trusted)
    let mut h = H::new(FlowConfig::default());
    let mut ce = Encoder::new();
    h.send(Side::Client, &requests(&mut ce, &["/a"]), 1460);
    h.send(
        Side::Candidate,
        &frame(1, 0x5, 1, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
        1460,
    );
    assert_eq!(h.f.counts().h2_broken, 1);
    assert_eq!(h.f.sizes().1, 0, "the request waits no more");
}

#[test]
fn answers_before_the_preface_wait() {
    let mut h = H::new(FlowConfig::default());
    let (mut ce, mut oe, mut te) = (Encoder::new(), Encoder::new(), Encoder::new());
    // the answers come first (the records' faster path), then the client's bytes
    h.send(Side::Online, &answers(&mut oe, &[1], |_| "200"), 5);
    h.send(Side::Candidate, &answers(&mut te, &[1], |_| "404"), 5);
    assert!(h.out.is_empty());
    h.send(Side::Client, &requests(&mut ce, &["/"]), 5);
    assert_eq!(h.out.len(), 1);
    let v = Comparator::new(CompareConfig::default()).compare(&h.out[0]);
    assert_eq!(
        (v.outcome, v.diffs[0].field.as_str()),
        (Outcome::Differ, "status")
    );
}

#[test]
fn a_body_past_max_message_is_cut_and_a_frame_past_it_stops_the_connection() {
    let mut h = H::new(FlowConfig {
        max_message: 32,
        ..FlowConfig::default()
    });
    let (mut ce, mut oe, mut te) = (Encoder::new(), Encoder::new(), Encoder::new());
    let big = |enc: &mut Encoder<'static>, tail: &[u8]| {
        let mut b = headers(enc, 1, false, &[(":status", "200")]);
        b.extend(data(1, false, b"0123456789abcdef"));
        b.extend(data(1, false, b"ghijklmnopqrstuv"));
        b.extend(data(1, true, tail));
        b
    };
    h.send(Side::Client, &requests(&mut ce, &["/"]), 5);
    h.send(Side::Online, &big(&mut oe, b"wxyz"), 5);
    h.send(Side::Candidate, &big(&mut te, b"wxyX"), 5);
    assert_eq!(h.out.len(), 1);
    let e = &h.out[0];
    assert!(!e.online.complete && !e.candidate.complete);
    assert_eq!(
        e.online.bytes,
        b"HTTP/1.1 200 \r\ncontent-length: 36\r\n\r\n0123456789abcdefghijklmnopqrstuv"
    );
    // compared on the bytes kept: equal
    let v = Comparator::new(CompareConfig::default()).compare(e);
    assert_eq!(v.outcome, Outcome::Equal);
    assert_eq!(h.f.counts().h2_broken, 0);
    // a DATA frame longer than max_message cannot be read whole within the bound
    let mut h = H::new(FlowConfig {
        max_message: 32,
        ..FlowConfig::default()
    });
    h.send(Side::Client, &requests(&mut Encoder::new(), &["/"]), 5);
    h.send(Side::Candidate, &data(1, true, &[b'x'; 33]), 5);
    assert_eq!(h.f.counts().h2_broken, 1);
}
