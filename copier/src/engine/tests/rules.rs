//! Request rules (`--rules`): a dropped request leaves a gap the test session never sees (later
//! bytes renumbered, the test server's ACKs in the renumbered space), edited heads shift the
//! rest, the online answers of dropped requests are skipped when pacing measures answers,
//! client retransmissions and overlaps land in the right place, and copies edit apart.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::engine::Rules;

fn with_rules(toml: &str, c: EngineConfig) -> H {
    let rules = Arc::new(Rules::from_toml_str(toml).unwrap());
    H::new(EngineConfig {
        rules: Some(rules),
        ..c
    })
}

const DENY_PAY: &str = "[[filter]]\nname = \"pay\"\npath = \"/pay/**\"\n";

const R1: &[u8] = b"GET /a HTTP/1.1\r\n\r\n";
const R2: &[u8] = b"GET /pay/x HTTP/1.1\r\n\r\n";
const R3: &[u8] = b"GET /b HTTP/1.1\r\n\r\n";
const R4: &[u8] = b"GET /c HTTP/1.1\r\n\r\n";

fn off(parts: &[&[u8]]) -> u32 {
    parts.iter().map(|p| p.len() as u32).sum()
}

#[test]
fn a_dropped_request_shifts_the_rest_and_its_online_answer_is_skipped() {
    let mut h = with_rules(DENY_PAY, cfg());
    h.establish();
    // Online answers: R1 100 bytes, R2 50, R3 100.
    h.cap(data(0, 0, R1));
    h.cap(data(off(&[R1]), 100, R2));
    h.cap(data(off(&[R1, R2]), 150, R3));
    h.cap(data(off(&[R1, R2, R3]), 250, R4));
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].seq, &out[0].payload[..]), (CISN + 1, R1));
    h.at(10);
    h.rec(resp(0, off(&[R1]), 100));
    let out = h.out();
    let sent: Vec<&Out> = out.iter().filter(|o| !o.payload.is_empty()).collect();
    assert_eq!(sent.len(), 1, "{out:?}");
    assert_eq!(
        (sent[0].seq, &sent[0].payload[..]),
        (CISN + 1 + off(&[R1]), R3),
        "R3 right after R1"
    );
    // The test server answers R3 with the 100 bytes online did (not 150: R2's answer is not
    // R3's): R4 goes at once, without waiting for a quiet answer.
    h.at(20);
    h.rec(resp(100, off(&[R1, R3]), 100));
    let out = h.out();
    let sent: Vec<&Out> = out.iter().filter(|o| !o.payload.is_empty()).collect();
    assert_eq!(sent.len(), 1, "{out:?}");
    assert_eq!(
        (sent[0].seq, &sent[0].payload[..]),
        (CISN + 1 + off(&[R1, R3]), R4)
    );
    let r = &h.e.stats().requests;
    assert_eq!(
        (r.http_requests, r.dropped, r.rules.clone()),
        (4, 1, vec![1, 0])
    );
    // The client's FIN lands after the renumbered bytes.
    h.cap(Seg {
        seq: CISN + 1 + off(&[R1, R2, R3, R4]),
        ack: OISN + 1 + 350,
        flags: TcpFlags(TcpFlags::FIN.0 | A.0),
        ..BASE
    });
    h.rec(resp(200, off(&[R1, R3, R4]), 100));
    let fin = h.fire_until_output(1000);
    let fin: Vec<&Out> = fin.iter().filter(|o| o.has(TcpFlags::FIN)).collect();
    assert_eq!(fin.len(), 1);
    assert_eq!(fin[0].seq, CISN + 1 + off(&[R1, R3, R4]));
}

#[test]
fn dyed_heads_lengthen_the_stream_and_retransmissions_and_overlaps_fit() {
    let toml = "[dye]\nheader = \"X-Copy\"\nvalue = \"yes\"\n";
    let mut h = with_rules(
        toml,
        EngineConfig {
            pace_requests: false,
            ..cfg()
        },
    );
    h.establish();
    let body = [b'x'; 3000];
    let mut post = b"POST /up HTTP/1.1\r\nContent-Length: 3000\r\n\r\n".to_vec();
    post.extend_from_slice(&body);
    let all: Vec<u8> = [R1, &post[..], R3].concat();
    // Cut anyhow, sent out of order, with a retransmission and an overlapping segment.
    let cuts = [0usize, 7, 30, 1000, 2000, 2500, all.len() - 5, all.len()];
    let seg = |i: usize| {
        data(
            cuts[i] as u32,
            if cuts[i] >= R1.len() { 100 } else { 0 },
            &all[cuts[i]..cuts[i + 1]],
        )
    };
    let mut outs = Vec::new();
    h.cap(seg(0));
    h.cap(seg(2)); // out of order: held
    h.cap(seg(1));
    h.cap(seg(1)); // a retransmission
    outs.extend(h.out());
    // An overlapping segment: the end of segment 2 again, and segment 3.
    h.cap(data(500, 100, &all[500..2000]));
    h.cap(seg(4));
    h.cap(seg(5));
    h.cap(seg(6));
    outs.extend(h.out());
    let want = String::from_utf8_lossy(&all)
        .replace("HTTP/1.1\r\n\r\n", "HTTP/1.1\r\nX-Copy: yes\r\n\r\n")
        .replace(
            "Content-Length: 3000\r\n\r\n",
            "Content-Length: 3000\r\nX-Copy: yes\r\n\r\n",
        );
    assert_eq!(String::from_utf8_lossy(&stream_of(&outs, CISN + 1)), want);
    assert_eq!(h.e.stats().requests.edited, 3);
    // The test server acks the whole renumbered stream; a retransmission after a timeout
    // sends edited bytes again, from the test-side number acked.
    let first_head = R1.len() as u32 + 13;
    h.rec(resp(0, first_head, 0));
    let re = h.fire_until_output(5000);
    let re: Vec<&Out> = re.iter().filter(|o| !o.payload.is_empty()).collect();
    assert!(!re.is_empty());
    assert_eq!(re[0].seq, CISN + 1 + first_head);
    assert!(
        re[0]
            .payload
            .starts_with(b"POST /up HTTP/1.1\r\nContent-Length: 3000\r\nX-Copy: yes\r\n\r\nxx"),
        "{:?}",
        String::from_utf8_lossy(&re[0].payload[..60])
    );
}

#[test]
fn copies_carry_their_own_dye_value() {
    let toml = "[dye]\nvalue = \"copy-{copy}-of-{id}\"\nid = \"c7\"\n[[rewrite]]\nname = \"short\"\nregex = \"/long/path\"\nreplace = \"/s\"\n";
    let mut h = with_rules(
        toml,
        EngineConfig {
            copies: 2,
            pace_requests: false,
            ..cfg()
        },
    );
    h.syn(SYN);
    let regs: Vec<FourTuple> = h
        .control()
        .iter()
        .filter_map(|e| {
            if let RegEvent::Register(t) = e {
                Some(*t)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(regs.len(), 2);
    let _ = h.packets();
    for &t in &regs {
        h.rec_to(t, SYN_ACK);
    }
    h.cap(data(0, 0, b"GET /long/path HTTP/1.1\r\nHost: a\r\n\r\n"));
    let outs = h.out();
    let mut by: BTreeMap<FourTuple, Vec<Out>> = BTreeMap::new();
    for o in outs {
        by.entry(o.tuple).or_default().push(o);
    }
    for (k, t) in regs.iter().enumerate() {
        let s = stream_of(&by[t], CISN + 1);
        assert_eq!(
            String::from_utf8_lossy(&s),
            format!("GET /s HTTP/1.1\r\nHost: a\r\nX-Traffic-Copy: copy-{k}-of-c7\r\n\r\n"),
            "copy {k}"
        );
    }
    let r = &h.e.stats().requests;
    assert_eq!(
        (r.http_requests, r.edited, r.rules.clone()),
        (2, 2, vec![0, 2]),
        "every copy counted"
    );
}

#[test]
fn a_malformed_body_in_a_dropped_request_gives_the_copy_up() {
    let mut h = with_rules(DENY_PAY, cfg());
    h.establish();
    h.cap(data(0, 0, R1));
    h.cap(data(
        off(&[R1]),
        100,
        b"POST /pay/1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nnot-hex\r\n",
    ));
    let s = h.e.stats();
    assert_eq!(
        (s.requests.malformed, s.sessions_failed.malformed_request),
        (1, 1)
    );
    let out = h.out();
    assert!(
        out.iter().any(|o| o.has(TcpFlags::RST)),
        "the test connection is reset: {out:?}"
    );
    assert!(out.iter().all(|o| o.payload.is_empty() || o.payload == R1));
}

#[test]
fn a_capture_hole_inside_a_held_head_resumes_edited_at_the_next_request() {
    let mut h = with_rules(
        "[dye]\nvalue = \"a-long-dye-value-to-shift-the-test-side\"\n",
        cfg(),
    );
    h.establish();
    let dye = b"X-Traffic-Copy: a-long-dye-value-to-shift-the-test-side\r\n".len() as u32;
    h.cap(data(0, 0, R1));
    assert_eq!(h.out()[0].payload.len() as u32, off(&[R1]) + dye);
    h.at(5);
    h.rec(resp(0, off(&[R1]) + dye, 50));
    let _ = h.out();
    // R3's head: its first 5 bytes captured (held by the editor), the next 5 lost.
    let r2 = off(&[R1]);
    h.at(10);
    h.cap(data(r2, 50, &R3[..5]));
    h.cap(data(r2 + 10, 50, &R3[10..]));
    h.at(11);
    h.cap(data(r2 + off(&[R3]), 120, R4)); // online answered the damaged request
    h.at(12);
    h.cap(data(r2 + off(&[R3, R4]), 200, R1));
    assert!(h.out().is_empty(), "nothing of a held head goes");
    let (outs, ctl) = h.run_timers(400);
    let nt = ctl
        .iter()
        .find_map(|c| match c {
            RegEvent::Register(t) if *t != test_tuple() => Some(*t),
            _ => None,
        })
        .expect("a new connection");
    let syn = outs
        .iter()
        .map(|(_, o)| o)
        .find(|o| o.tuple == nt && o.has(TcpFlags::SYN))
        .expect("its SYN");
    // The test side's numbers keep growing: past R1 edited, even though R4 starts before that
    // in the client's numbers.
    assert_eq!(syn.seq, CISN + off(&[R1]) + dye, "{outs:?}");
    h.at(220);
    h.rec_to(
        nt,
        Seg {
            ack: syn.seq + 1,
            ..SYN_ACK
        },
    );
    let mut sent = h.out();
    h.at(230);
    h.rec_to(
        nt,
        Seg {
            ack: syn.seq + 1 + off(&[R4]) + dye,
            ..resp(0, 0, 80)
        },
    );
    sent.extend(h.out());
    let want = [R4, R1]
        .map(|r| {
            String::from_utf8_lossy(r).replace(
                "\r\n\r\n",
                "\r\nX-Traffic-Copy: a-long-dye-value-to-shift-the-test-side\r\n\r\n",
            )
        })
        .concat();
    assert_eq!(
        String::from_utf8_lossy(&stream_of(&sent, syn.seq + 1)),
        want
    );
    assert_eq!(h.e.stats().drops.capture_gap, 1);
}

#[test]
fn unparsable_drop_ends_the_copy_at_a_huge_content_length_with_its_own_reason() {
    // The default with a filter is fail closed: the request after the unreadable one, a
    // denied one, must not slip through as "body".
    let mut h = with_rules(DENY_PAY, cfg());
    h.establish();
    h.cap(data(0, 0, R1));
    h.cap(data(off(&[R1]), 100, b"POST /a HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\nGET /pay/1 HTTP/1.1\r\n\r\n"));
    let s = h.e.stats();
    assert_eq!(
        (
            s.requests.malformed,
            s.sessions_failed.unparsable,
            s.sessions_failed.malformed_request
        ),
        (1, 1, 0)
    );
    let out = h.out();
    assert!(
        out.iter().any(|o| o.has(TcpFlags::RST)),
        "the test connection is reset: {out:?}"
    );
    assert!(
        out.iter().all(|o| o.payload.is_empty() || o.payload == R1),
        "only what came before: {out:?}"
    );
}
