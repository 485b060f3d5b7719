//! Streams to exchanges: keep-alive pairing with answer times, out-of-order and repeated
//! segments, long answers cut and skipped, close-delimited answers, gzip and chunked answers,
//! counted failures (not HTTP, cut records, holes, unanswered requests), ordering between the
//! capture and the records, sampling and the connection bound.

use super::*;

const CISN: u32 = 1000;
const OISN: u32 = 50_000;
const TISN: u32 = 900_000;

struct H {
    f: Flows<u16>,
    t: Instant,
    /// next sequence number per side
    next: [u32; 4],
    out: Vec<Exchange>,
}

impl H {
    fn new(cfg: FlowConfig) -> H {
        H {
            f: Flows::new(cfg),
            t: Instant::now(),
            next: [CISN + 1, OISN + 1, TISN + 1, TISN + 1],
            out: Vec::new(),
        }
    }

    fn seg(&mut self, side: Side, syn: bool, payload: &[u8], ack: Option<u32>) {
        let i = idx(side);
        let seq = if syn { self.next[i] - 1 } else { self.next[i] };
        let s = Seg {
            seq,
            ack,
            syn,
            fin: false,
            rst: false,
            payload,
            cut: false,
        };
        let got = self.f.handle(self.t, &7, side, s);
        self.out.extend(got);
        assert_eq!(
            self.f.bytes(),
            self.f.recount(),
            "the running total of the streams' bytes"
        );
        self.next[i] = self.next[i].wrapping_add(payload.len() as u32);
    }

    fn open(&mut self) {
        self.seg(Side::Client, true, b"", None);
        self.seg(Side::Online, true, b"", Some(CISN + 1));
        self.seg(Side::Candidate, true, b"", Some(CISN + 1));
    }

    fn later(&mut self, ms: u64) {
        self.t += Duration::from_millis(ms);
    }

    fn client_end(&self) -> u32 {
        self.next[0]
    }
}

fn ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn keep_alive_pairs_in_order_with_times() {
    let mut h = H::new(FlowConfig::default());
    h.open();
    h.seg(
        Side::Client,
        false,
        b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n",
        None,
    );
    h.later(5);
    // the online answer in two segments, the second with the next answer's start
    let a1 = ok("{\"a\":1}");
    let a2 = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nxyz\r\n0\r\n\r\n".to_vec();
    h.seg(Side::Online, false, &a1[..10], None);
    h.seg(Side::Client, false, b"GET /b HTTP/1.1\r\n\r\n", None);
    let mut rest = a1[10..].to_vec();
    rest.extend_from_slice(&a2[..20]);
    h.seg(Side::Online, false, &rest, None);
    h.seg(Side::Online, false, &a2[20..], None);
    assert!(h.out.is_empty(), "nothing without the candidate");
    // the copy sends the first request; the test server acks it 3 ms later (the pure ACK is
    // when it had it), answers 20 ms after that, then the second
    let end1 = CISN + 1 + 29;
    h.later(97);
    h.f.handle_sent(h.t, &7, Side::Candidate, end1);
    h.later(3);
    h.seg(Side::Candidate, false, b"", Some(end1));
    h.later(20);
    h.seg(Side::Candidate, false, &ok("{\"a\":2}"), Some(end1));
    assert_eq!(h.out.len(), 1);
    let e = &h.out[0];
    assert!(e.request.starts_with(b"GET /a "));
    assert_eq!(e.online.bytes, a1);
    assert_eq!(e.online.time, Some(Duration::from_millis(5)));
    assert_eq!(e.candidate.time, Some(Duration::from_millis(20)));
    let end = h.client_end();
    h.f.handle_sent(h.t, &7, Side::Candidate, end);
    h.later(7);
    h.seg(Side::Candidate, false, &a2, Some(end));
    assert_eq!(h.out.len(), 2);
    assert!(h.out[1].request.starts_with(b"GET /b "));
    assert_eq!(h.out[1].online.bytes, a2);
    assert_eq!(h.out[1].candidate.bytes, a2);
    // the second request was acknowledged on its answer (delayed ACK): that says nothing of
    // when the server had it, so it is timed from the copy's send of its last byte
    assert_eq!(h.out[1].candidate.time, Some(Duration::from_millis(7)));
    assert_eq!(h.f.sizes().1, 0);
}

#[test]
fn an_answer_acknowledging_its_request_is_timed_from_the_copys_send_or_not_at_all() {
    let mut h = H::new(FlowConfig::default());
    h.open();
    let end0 = h.client_end();
    h.seg(Side::Client, false, b"GET /a HTTP/1.1\r\n\r\n", None);
    h.seg(Side::Online, false, &ok("1"), None);
    let end1 = h.client_end();
    // marks before the connection's client bytes, of another connection, and of a sent part
    // of the request only, say nothing
    h.f.handle_sent(h.t, &8, Side::Candidate, end1);
    h.f.handle_sent(h.t, &7, Side::Candidate, end0 + 4);
    h.later(2);
    // sent once, then again (a retransmission): the first send counts
    h.f.handle_sent(h.t, &7, Side::Candidate, end1);
    h.later(5);
    h.f.handle_sent(h.t, &7, Side::Candidate, end1);
    h.later(20);
    h.seg(Side::Candidate, false, &ok("1"), Some(end1));
    assert_eq!(h.out.len(), 1);
    assert_eq!(h.out[0].candidate.time, Some(Duration::from_millis(25)));
    // no mark at all: the ACK on the answer is all there is (0)
    h.seg(Side::Client, false, b"GET /b HTTP/1.1\r\n\r\n", None);
    h.seg(Side::Online, false, &ok("2"), None);
    h.later(20);
    let end2 = h.client_end();
    h.seg(Side::Candidate, false, &ok("2"), Some(end2));
    assert_eq!(h.out.len(), 2);
    assert_eq!(h.out[1].candidate.time, Some(Duration::ZERO));
}

#[test]
fn a_pipelined_request_is_timed_from_the_end_of_the_answer_before_it() {
    let mut h = H::new(FlowConfig::default());
    h.open();
    h.seg(Side::Client, false, b"GET /slow HTTP/1.1\r\n\r\n", None);
    h.seg(Side::Client, false, b"GET /fast HTTP/1.1\r\n\r\n", None);
    h.seg(Side::Online, false, &ok("1"), None);
    h.seg(Side::Online, false, &ok("2"), None);
    // the copy sends both requests at once; the server acks them, takes 20 ms for the first
    // and answers the second at once after it
    let end = h.client_end();
    h.f.handle_sent(h.t, &7, Side::Candidate, end);
    h.seg(Side::Candidate, false, b"", Some(end));
    h.later(20);
    h.seg(Side::Candidate, false, &ok("1"), Some(end));
    h.later(1);
    h.seg(Side::Candidate, false, &ok("2"), Some(end));
    assert_eq!(h.out.len(), 2);
    assert_eq!(h.out[0].candidate.time, Some(Duration::from_millis(20)));
    assert_eq!(
        h.out[1].candidate.time,
        Some(Duration::from_millis(1)),
        "not 21 ms: it waited for the first"
    );
}

#[test]
fn a_test_answer_before_its_request_was_captured_waits_for_it_and_keeps_its_time() {
    let mut h = H::new(FlowConfig::default());
    h.open();
    let req = b"GET /a HTTP/1.1\r\n\r\n";
    let end = h.client_end() + req.len() as u32;
    // the copy's send and the test answer (its ACK on it) come before the capture's request
    h.f.handle_sent(h.t, &7, Side::Candidate, end);
    h.later(3);
    h.seg(Side::Candidate, false, &ok("1"), Some(end));
    h.later(10);
    h.seg(Side::Client, false, req, None);
    h.later(1);
    h.seg(Side::Online, false, &ok("1"), None);
    assert_eq!(h.out.len(), 1);
    assert_eq!(h.out[0].candidate.time, Some(Duration::from_millis(3)));
    assert_eq!(h.out[0].online.time, Some(Duration::from_millis(1)));
}

#[test]
fn out_of_order_and_retransmitted_segments() {
    let mut h = H::new(FlowConfig::default());
    h.open();
    h.seg(Side::Client, false, b"GET /a HTTP/1.1\r\n\r\n", None);
    let a = ok(&"x".repeat(3000));
    // online: second half first, then the first half twice
    let s0 = h.next[1];
    let f = &mut h.f;
    let mk = |seq: u32, p: &'static [u8]| Seg {
        seq,
        ack: None,
        syn: false,
        fin: false,
        rst: false,
        payload: p,
        cut: false,
    };
    let a: &'static [u8] = Box::leak(a.into_boxed_slice());
    assert!(f
        .handle(h.t, &7, Side::Online, mk(s0 + 1500, &a[1500..]))
        .is_empty());
    f.handle(h.t, &7, Side::Online, mk(s0, &a[..1500]));
    f.handle(h.t, &7, Side::Online, mk(s0, &a[..1500]));
    let out = f.handle(h.t, &7, Side::Candidate, mk(TISN + 1, a));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].online.bytes, a);
    assert!(out[0].online.complete && out[0].candidate.complete);
}

#[test]
fn a_long_answer_is_cut_skipped_and_the_next_one_still_pairs() {
    let cfg = FlowConfig {
        max_message: 64 * 1024,
        ..FlowConfig::default()
    };
    let mut h = H::new(cfg);
    h.open();
    h.seg(
        Side::Client,
        false,
        b"GET /big HTTP/1.1\r\n\r\nGET /small HTTP/1.1\r\n\r\n",
        None,
    );
    let big = ok(&"y".repeat(1 << 20));
    for side in [Side::Online, Side::Candidate] {
        for ch in big.chunks(60_000) {
            h.seg(side, false, ch, None);
        }
        h.seg(side, false, &ok("small"), None);
    }
    assert_eq!(
        h.out.len(),
        2,
        "{:?}",
        h.out.iter().map(|e| e.request.len()).collect::<Vec<_>>()
    );
    assert_eq!(h.out[0].online.bytes.len(), 64 * 1024);
    assert!(!h.out[0].online.complete);
    assert_eq!(h.out[1].candidate.bytes, ok("small"));
    assert!(h.f.bytes() < 200 * 1024);
}

#[test]
fn close_delimited_answer_ends_at_fin() {
    let mut h = H::new(FlowConfig::default());
    h.open();
    h.seg(Side::Client, false, b"GET / HTTP/1.0\r\n\r\n", None);
    for side in [Side::Online, Side::Candidate] {
        h.seg(side, false, b"HTTP/1.0 200 OK\r\n\r\nhello", None);
        let i = idx(side);
        let s = Seg {
            seq: h.next[i],
            ack: None,
            syn: false,
            fin: true,
            rst: false,
            payload: b"",
            cut: false,
        };
        let got = h.f.handle(h.t, &7, side, s);
        h.out.extend(got);
    }
    assert_eq!(h.out.len(), 1);
    assert!(h.out[0].online.bytes.ends_with(b"hello") && h.out[0].online.complete);
}

#[test]
fn not_http_cut_records_and_unanswered_requests_are_counted() {
    let mut h = H::new(FlowConfig {
        pair_timeout: Duration::from_secs(5),
        ..FlowConfig::default()
    });
    h.open();
    h.seg(
        Side::Client,
        false,
        b"\x16\x03\x01\x02\x00binary hello",
        None,
    );
    assert_eq!(h.f.counts().not_http, 1);
    // a new connection on the same key (another ISN): HTTP, whose test record is cut
    h.next = [CISN + 10_001, OISN + 1, TISN + 1, TISN + 1];
    h.open();
    h.seg(Side::Client, false, b"GET / HTTP/1.1\r\n\r\n", None);
    h.seg(Side::Online, false, &ok("abc"), None);
    let s = Seg {
        seq: TISN + 1,
        ack: None,
        syn: false,
        fin: false,
        rst: false,
        payload: &ok("abc")[..10],
        cut: true,
    };
    let got = h.f.handle(h.t, &7, Side::Candidate, s);
    assert_eq!(got.len(), 1, "compared on what came");
    assert!(!got[0].candidate.complete);
    assert_eq!(h.f.counts().unsynced, 1);
    // a third connection never answered by the test server: expires, counted
    h.next = [CISN + 20_001, OISN + 1, TISN + 1, TISN + 1];
    h.open();
    h.seg(Side::Client, false, b"GET / HTTP/1.1\r\n\r\n", None);
    h.seg(Side::Online, false, &ok("abc"), None);
    assert_eq!(h.f.sizes().1, 1);
    h.later(6000);
    assert!(h.f.expire(h.t).is_empty());
    assert_eq!(h.f.pending_counts().expired, 1);
    // segments of a test server before the client's SYN are counted and kept
    h.f.handle(h.t, &99, Side::Candidate, s);
    assert_eq!(h.f.counts().orphan_segments, 1);
}

#[test]
fn test_answers_before_the_client_syn_and_repeated_syns_keep_the_pairing() {
    let mut h = H::new(FlowConfig::default());
    // the test server's SYN-ACK and answer come before the capture shows the client
    h.seg(Side::Candidate, true, b"", Some(CISN + 1));
    h.seg(Side::Candidate, false, &ok("one"), None);
    h.seg(Side::Client, true, b"", None);
    h.seg(Side::Online, true, b"", Some(CISN + 1));
    h.seg(Side::Client, false, b"GET /1 HTTP/1.1\r\n\r\n", None);
    h.seg(Side::Online, false, &ok("one"), None);
    assert_eq!(h.out.len(), 1);
    // a retransmitted client SYN and test SYN-ACK change nothing
    let syn = |seq| Seg {
        seq,
        ack: None,
        syn: true,
        fin: false,
        rst: false,
        payload: b"",
        cut: false,
    };
    h.f.handle(h.t, &7, Side::Client, syn(CISN));
    h.f.handle(h.t, &7, Side::Candidate, syn(TISN));
    h.seg(Side::Client, false, b"GET /2 HTTP/1.1\r\n\r\n", None);
    h.seg(Side::Online, false, &ok("two"), None);
    h.seg(Side::Candidate, false, &ok("two"), None);
    assert_eq!(h.out.len(), 2);
    assert!(h.out[1].request.starts_with(b"GET /2") && h.out[1].candidate.bytes.ends_with(b"two"));
    // a new client connection on the same port (another ISN) starts afresh
    h.next = [CISN + 1001, OISN + 1, TISN + 5001, TISN + 1];
    h.seg(Side::Client, true, b"", None);
    h.seg(Side::Client, false, b"GET /3 HTTP/1.1\r\n\r\n", None);
    h.seg(Side::Online, true, b"", None);
    h.seg(Side::Online, false, &ok("three"), None);
    h.seg(Side::Candidate, true, b"", None);
    h.seg(Side::Candidate, false, &ok("three"), None);
    assert_eq!(h.out.len(), 3);
    assert!(h.out[2].request.starts_with(b"GET /3"));
}

#[test]
fn sampling_and_connection_bound() {
    let mut f: Flows<u16> = Flows::new(FlowConfig {
        sample: 0.0,
        ..FlowConfig::default()
    });
    let syn = Seg {
        seq: 1,
        ack: None,
        syn: true,
        fin: false,
        rst: false,
        payload: b"",
        cut: false,
    };
    f.handle(Instant::now(), &1, Side::Client, syn);
    assert_eq!(f.counts().sampled_out, 1);
    let n = (0..10_000u32).filter(|k| sampled(k, 0.1)).count();
    assert!((900..1100).contains(&n), "{n}");
    let mut f: Flows<u16> = Flows::new(FlowConfig {
        max_conns: 10,
        ..FlowConfig::default()
    });
    let t = Instant::now();
    for k in 0..100u16 {
        f.handle(t + Duration::from_millis(k.into()), &k, Side::Client, syn);
    }
    assert_eq!(f.sizes().0, 10);
    assert_eq!(f.counts().conns_shed, 90);
    f.expire(t + Duration::from_secs(1000));
    assert_eq!(f.sizes().0, 0);
    // a connection forgotten with a hole it never filled counts as out of sync
    let mut h = H::new(FlowConfig::default());
    h.open();
    let s = Seg {
        seq: CISN + 100,
        ack: None,
        syn: false,
        fin: false,
        rst: false,
        payload: b"late",
        cut: false,
    };
    h.f.handle(h.t, &7, Side::Client, s);
    h.f.expire(h.t + Duration::from_secs(1000));
    assert_eq!(h.f.counts().unsynced, 1);
}

#[test]
fn gzip_chunked_keep_alive_stays_aligned() {
    use std::io::Write;
    let gz = |s: &str| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(s.as_bytes()).unwrap();
        e.finish().unwrap()
    };
    let chunked = |body: &str| {
        let z = gz(body);
        let mut v = format!(
            "HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\nContent-Encoding: gzip\r\n\r\n{:x}\r\n",
            z.len()
        )
        .into_bytes();
        v.extend_from_slice(&z);
        v.extend_from_slice(b"\r\n0\r\n\r\n");
        v
    };
    let err = b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 16\r\nConnection: keep-alive\r\n\r\n{\"error\":\"boom\"}".to_vec();
    let mut h = H::new(FlowConfig::default());
    h.open();
    let mut reqs = Vec::new();
    for i in 0..30 {
        let path = match i % 3 {
            0 => format!("/items/{i}"),
            1 => format!("/orders/{i}"),
            _ => "/health".to_string(),
        };
        reqs.push(path);
    }
    for (i, p) in reqs.iter().enumerate() {
        h.seg(
            Side::Client,
            false,
            format!("GET {p} HTTP/1.1\r\nAccept-Encoding: gzip\r\n\r\n").as_bytes(),
            None,
        );
        let on = chunked(&format!("{{\"path\":\"{p}\",\"n\":{i}}}"));
        h.seg(Side::Online, false, &on, None);
        let t = if i % 3 == 1 {
            err.clone()
        } else {
            chunked(&format!("{{\"path\":\"{p}\",\"n\":{i}}}"))
        };
        h.seg(Side::Candidate, false, &t, None);
    }
    assert_eq!(h.out.len(), 30);
    for (i, e) in h.out.iter().enumerate() {
        assert!(e
            .request
            .starts_with(format!("GET {} ", reqs[i]).as_bytes()));
        let a = crate::http::parse_answer(&e.online.bytes, false, Default::default()).unwrap();
        assert_eq!(
            a.body,
            format!("{{\"path\":\"{}\",\"n\":{i}}}", reqs[i]).into_bytes()
        );
    }
}

#[test]
fn other_protocols_are_compared_whole_as_bytes() {
    let mut h = H::new(FlowConfig {
        port: 6379,
        ..FlowConfig::default()
    });
    h.open();
    // the server speaks first; the client's bytes are not HTTP
    h.seg(Side::Online, false, b"+HELLO\r\n", None);
    h.seg(Side::Client, false, b"PING\r\n", None);
    h.seg(Side::Online, false, b"+PONG\r\n", None);
    h.seg(Side::Candidate, false, b"+HELLO\r\n+PANG\r\n", None);
    assert!(h.out.is_empty(), "not before the servers closed");
    for side in [Side::Online, Side::Candidate] {
        let i = idx(side);
        let s = Seg {
            seq: h.next[i],
            ack: None,
            syn: false,
            fin: true,
            rst: false,
            payload: b"",
            cut: false,
        };
        let got = h.f.handle(h.t, &7, side, s);
        h.out.extend(got);
    }
    assert_eq!(h.out.len(), 1);
    let e = &h.out[0];
    assert_eq!(
        (e.request.as_slice(), e.online.bytes.as_slice()),
        (&b"PING\r\n"[..], &b"+HELLO\r\n+PONG\r\n"[..])
    );
    assert!(e.online.complete && e.candidate.complete);
    let mut c = crate::Comparator::new(crate::CompareConfig::default());
    let v = c.compare(e);
    assert_eq!(v.endpoint, "tcp/6379");
    assert_eq!(v.diffs[0].offset, Some(10));
    assert_eq!(h.f.counts().not_http, 1);
    // bounded: a long non-HTTP stream keeps its first max_message bytes
    let mut h = H::new(FlowConfig {
        max_message: 1000,
        ..FlowConfig::default()
    });
    h.open();
    h.seg(Side::Client, false, b"\x00binary", None);
    for _ in 0..10 {
        h.seg(Side::Online, false, &[7u8; 500], None);
    }
    assert!(h.f.bytes() < 1100, "{}", h.f.bytes());
}

#[test]
fn an_impossible_content_length_stops_the_stream_without_a_panic() {
    // usize::MAX and u64::MAX: head + body overflowed (a panic with overflow checks, a wrong
    // skip without); the stream's end cannot be found, so it stops, counted
    for side in [Side::Client, Side::Online] {
        let mut h = H::new(FlowConfig {
            max_message: 1024,
            ..FlowConfig::default()
        });
        h.open();
        let head = if side == Side::Client {
            "POST /u HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\n"
        } else {
            h.seg(Side::Client, false, b"GET /a HTTP/1.1\r\n\r\n", None);
            "HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\n\r\n"
        };
        h.seg(side, false, head.as_bytes(), None);
        for _ in 0..4 {
            h.seg(side, false, &[b'x'; 600], None);
        }
        assert!(h.f.counts().unsynced >= 1, "{side:?}: {:?}", h.f.counts());
        // what the stream holds stays bounded
        assert!(h.f.bytes() <= 4 * 1024 + (1 << 20), "{}", h.f.bytes());
    }
}

#[test]
fn partial_uploads_of_many_connections_stay_within_the_memory_bound() {
    // the case: 200 connections each holding a partial upload, a 64 KiB bound (the
    // pairing table's alone used to be bounded: 12 MB were held)
    let max = 64 << 10;
    let mut f: Flows<u16> = Flows::new(FlowConfig {
        max_bytes: max,
        max_pending_bytes: max,
        ..FlowConfig::default()
    });
    let mut t = Instant::now();
    let seg = |seq: u32, syn: bool, payload: &'static [u8]| Seg {
        seq,
        ack: None,
        syn,
        fin: false,
        rst: false,
        payload,
        cut: false,
    };
    static HEAD: &[u8] = b"POST /up HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n";
    static BODY: [u8; 1400] = [b'x'; 1400];
    for conn in 0..200u16 {
        t += Duration::from_millis(1);
        f.handle(t, &conn, Side::Client, seg(CISN, true, b""));
        f.handle(t, &conn, Side::Client, seg(CISN + 1, false, HEAD));
        let mut seq = CISN + 1 + HEAD.len() as u32;
        for _ in 0..43 {
            f.handle(t, &conn, Side::Client, seg(seq, false, &BODY));
            seq += BODY.len() as u32;
            assert!(
                f.bytes() <= max + BODY.len(),
                "{} bytes held, bound {max}",
                f.bytes()
            );
            assert_eq!(f.bytes(), f.recount());
        }
    }
    let c = f.counts();
    assert!(c.memory_shed > 150, "{c:?}");
    // one connection alone past the bound: its stream stops, counted, nothing else breaks
    let before = f.counts().unsynced;
    let mut seq = CISN + 1;
    t += Duration::from_millis(1);
    f.handle(t, &999, Side::Client, seg(CISN, true, b""));
    f.handle(t, &999, Side::Client, seg(seq, false, HEAD));
    seq += HEAD.len() as u32;
    for _ in 0..100 {
        f.handle(t, &999, Side::Client, seg(seq, false, &BODY));
        seq += BODY.len() as u32;
    }
    assert!(f.bytes() <= max + BODY.len(), "{}", f.bytes());
    assert_eq!(f.counts().unsynced, before + 1);
    // a small exchange still pairs afterwards
    let mut h = H {
        f,
        t: t + Duration::from_millis(1),
        next: [CISN + 1, OISN + 1, TISN + 1, TISN + 1],
        out: Vec::new(),
    };
    h.open();
    h.seg(Side::Client, false, b"GET /a HTTP/1.1\r\n\r\n", None);
    h.seg(Side::Online, false, &ok("{}"), None);
    h.seg(Side::Candidate, false, &ok("{}"), None);
    assert_eq!(h.out.len(), 1);
    // after a panic in the caller, everything is forgotten and the counts stay
    let shed = h.f.counts().memory_shed;
    h.f.reset();
    assert_eq!(
        (
            h.f.bytes(),
            h.f.recount(),
            h.f.counts().memory_shed,
            h.f.counts().panics
        ),
        (0, 0, shed, 1)
    );
}
