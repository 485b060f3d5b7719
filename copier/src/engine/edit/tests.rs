use super::*;

fn rules(t: &str) -> Arc<Rules> {
    Arc::new(Rules::from_toml_str(t).unwrap())
}

/// Feeds `input` cut at every `cut` bytes; returns what the test side gets.
fn run(r: &Arc<Rules>, input: &[u8], cut: usize) -> (Vec<u8>, Editor) {
    let meter = Meter::default();
    let mut e = Editor::new(r.clone(), 2, "198.18.0.9".parse().unwrap(), meter.clone());
    let mut q = ByteQueue::new();
    let mut n = 0;
    for part in input.chunks(cut.max(1)) {
        n += e.feed(Payload::new(part, &meter).keep(0).unwrap(), &mut q);
    }
    n += e.flush(&mut q);
    let v = q.to_vec();
    assert_eq!(n, v.len(), "the count written is what was written");
    (v, e)
}

const DENY_PAY: &str = "[[filter]]\nname = \"pay\"\npath = \"/pay/**\"\n";

#[test]
fn pipelined_requests_with_bodies_are_told_apart_wherever_cut() {
    let input: &[u8] = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n\
        POST /pay/1 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello\
        POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\nabc\r\n0\r\nT: 1\r\n\r\n\
        POST /pay/2 HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nzz\r\n0\r\n\r\n\
        GET /c HTTP/1.1\r\n\r\n";
    let want: &[u8] = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n\
        POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\nabc\r\n0\r\nT: 1\r\n\r\n\
        GET /c HTTP/1.1\r\n\r\n";
    let r = rules(DENY_PAY);
    for cut in [1, 2, 3, 7, 16, 1000] {
        let (out, e) = run(&r, input, cut);
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(want),
            "cut {cut}"
        );
        assert_eq!(
            (e.counts.http_requests, e.counts.dropped, e.counts.malformed),
            (5, 2, 0)
        );
        assert_eq!(e.counts.rules, [2]);
    }
}

#[test]
fn dye_edits_and_rewrites_change_heads_only() {
    let r = rules(
        "[dye]\nheader = \"X-Copy\"\nvalue = \"c{copy}-{id}\"\nid = \"t1\"\n\
         [[header]]\nname = \"Host\"\nset = \"test.lab\"\n\
         [[header]]\nname = \"Cookie\"\ndelete = true\n\
         [[header]]\nname = \"X-Absent\"\nreplace = \"no\"\n\
         [[rewrite]]\nname = \"v2\"\nregex = \"^(\\\\w+) /v1/\"\nreplace = \"$1 /version2/\"\n",
    );
    let input = b"POST /v1/x HTTP/1.1\r\nhost: a\r\nCookie: s=1\r\nContent-Length: 3\r\n\r\nabcGET /other HTTP/1.1\r\n\r\n";
    let (out, e) = run(&r, input, 5);
    assert_eq!(
        String::from_utf8_lossy(&out),
        "POST /version2/x HTTP/1.1\r\nContent-Length: 3\r\nX-Copy: c2-t1\r\nHost: test.lab\r\n\r\nabc\
         GET /other HTTP/1.1\r\nX-Copy: c2-t1\r\nHost: test.lab\r\n\r\n"
    );
    assert_eq!((e.counts.edited, e.counts.rules.clone()), (2, vec![0, 1]));
}

#[test]
fn malformed_http_passes_the_rest_as_captured() {
    let r = rules(&format!("unparsable = \"pass\"\n{DENY_PAY}"));
    let input = b"GET /pay/1 HTTP/1.1\r\n\r\nGET /x HTTP/1.1\r\nBad Header\r\n\r\nGET /pay/2 HTTP/1.1\r\n\r\n";
    let (out, e) = run(&r, input, 4);
    let from = input.windows(6).position(|w| w == b"GET /x").unwrap();
    assert_eq!(
        &out[..],
        &input[from..],
        "from the bad request on, as captured"
    );
    assert_eq!(
        (e.counts.malformed, e.counts.dropped, e.failed),
        (1, 1, false)
    );
    // A bad chunk line inside a dropped request gives the copy up.
    let bad = b"POST /pay/1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
    let (out, e) = run(&r, bad, 3);
    assert!(out.is_empty());
    assert!(e.failed && e.counts.malformed == 1);
    // Allow-only mode gives the copy up rather than pass what no filter allowed.
    let allow = rules("[[filter]]\nname = \"api\"\naction = \"allow\"\npath = \"/api/**\"\n");
    let (out, e) = run(&allow, b"GET /api/1 HTTP/1.1\r\n\r\nGET /x HTTP/1.1\r\nBad Header\r\n\r\nGET /api/2 HTTP/1.1\r\n\r\n", 3);
    assert_eq!(&out[..], b"GET /api/1 HTTP/1.1\r\n\r\n");
    assert!(e.failed && e.counts.malformed == 1);
    let (out, e) = run(&allow, b"\x16\x03\x01binary", 3);
    assert!(
        out.is_empty() && e.counts.dropped == 1,
        "another protocol is not allowed"
    );
    // What follows an upgrade goes with it: passed when it is copied, dropped when not.
    let ws = |p: &str| {
        format!(
            "GET {p} HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x01\x05GET /"
        )
    };
    let (out, _) = run(&r, ws("/pay/ws").as_bytes(), 5);
    assert!(out.is_empty());
    let (out, e) = run(&r, ws("/ws").as_bytes(), 5);
    assert_eq!((out, e.counts.malformed), (ws("/ws").into_bytes(), 0));
    // A head that never ends.
    let mut long = b"GET / HTTP/1.1\r\n".to_vec();
    long.resize(MAX_HEAD + 100, b'a');
    let (out, e) = run(&r, &long, 1000);
    assert_eq!((out.len(), e.counts.malformed), (long.len(), 1));
}

#[test]
fn other_protocols_pass_or_are_cut_by_units() {
    let r = rules(DENY_PAY);
    let (out, e) = run(&r, b"\x16\x03\x01binary", 2);
    assert_eq!(
        (out, e.counts.http_requests),
        (b"\x16\x03\x01binary".to_vec(), 0)
    );
    let r = rules("[[filter]]\nname = \"quit\"\nprefix = \"QUIT\"\n");
    let meter = Meter::default();
    let mut e = Editor::new(r, 0, "198.18.0.9".parse().unwrap(), meter.clone());
    let mut q = ByteQueue::new();
    let feed = |e: &mut Editor, q: &mut ByteQueue, b: &[u8]| {
        e.feed(Payload::new(b, &meter).keep(0).unwrap(), q)
    };
    feed(&mut e, &mut q, b"set a 1\r\n");
    e.unit_start(&mut q);
    feed(&mut e, &mut q, b"QU");
    feed(&mut e, &mut q, b"IT now\r\n");
    e.unit_start(&mut q);
    feed(&mut e, &mut q, b"Q");
    e.unit_start(&mut q);
    feed(&mut e, &mut q, b"get a\r\n");
    e.flush(&mut q);
    assert_eq!(q.to_vec(), b"set a 1\r\nQget a\r\n");
    assert_eq!(
        (
            e.counts.byte_units,
            e.counts.dropped,
            e.counts.rules.clone()
        ),
        (4, 1, vec![1])
    );
}

/// A request as the property test builds it: (dropped, raw bytes, bytes the test side gets).
fn build_req(pay: bool, body: Option<(bool, Vec<usize>)>, dye: bool) -> (bool, Vec<u8>, Vec<u8>) {
    let path = if pay { "/pay/x" } else { "/a?b=c" };
    let (method, framing, body_bytes) = match &body {
        None => ("GET", String::new(), Vec::new()),
        Some((false, sizes)) => {
            let n: usize = sizes.iter().sum();
            ("POST", format!("Content-Length: {n}\r\n"), vec![b'b'; n])
        }
        Some((true, sizes)) => {
            let mut b = Vec::new();
            for &n in sizes.iter().filter(|&&n| n > 0) {
                b.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                b.extend(std::iter::repeat_n(b'c', n));
                b.extend_from_slice(b"\r\n");
            }
            b.extend_from_slice(b"0\r\n\r\n");
            ("POST", "Transfer-Encoding: chunked\r\n".to_string(), b)
        }
    };
    let head = |extra: &str| {
        format!("{method} {path} HTTP/1.1\r\nHost: h\r\n{framing}{extra}\r\n").into_bytes()
    };
    let raw = [head(""), body_bytes.clone()].concat();
    let out = if dye {
        [head("X-Traffic-Copy: 1\r\n"), body_bytes].concat()
    } else {
        raw.clone()
    };
    (pay, raw, out)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]
    #[test]
    fn any_pipeline_cut_anywhere_gives_the_kept_requests_edited(
        reqs in proptest::collection::vec(
            (proptest::bool::ANY, proptest::option::of((proptest::bool::ANY, proptest::collection::vec(0usize..300, 0..4)))),
            1..8,
        ),
        dye in proptest::bool::ANY,
        cut in 1usize..200,
        tail in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
    ) {
        let r = rules(&format!("{DENY_PAY}{}", if dye { "[dye]\n" } else { "" }));
        let built: Vec<_> = reqs.into_iter().map(|(pay, body)| build_req(pay, body, dye)).collect();
        let input: Vec<u8> = built.iter().flat_map(|b| b.1.clone()).collect();
        let want: Vec<u8> = built.iter().filter(|b| !b.0).flat_map(|b| b.2.clone()).collect();
        let (out, e) = run(&r, &input, cut);
        proptest::prop_assert_eq!(&out, &want);
        proptest::prop_assert_eq!(e.counts.dropped, built.iter().filter(|b| b.0).count() as u64);
        proptest::prop_assert_eq!(e.counts.malformed, 0);
        // Garbage after them: never a panic, the requests before unchanged.
        let (out, _) = run(&r, &[input, tail].concat(), cut);
        proptest::prop_assert!(out.starts_with(&want));
    }
}

#[test]
fn unparsable_drop_gives_the_copy_up_at_a_malformed_request() {
    // The default with a filter: fail closed.
    let r = rules(DENY_PAY);
    assert_eq!(r.unparsable, Unparsable::Drop);
    let input = b"GET /a HTTP/1.1\r\n\r\nGET /x HTTP/1.1\r\nBad Header\r\n\r\nGET /pay/2 HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n";
    for cut in [1, 4, 200] {
        let (out, e) = run(&r, input, cut);
        assert_eq!(
            &out[..],
            b"GET /a HTTP/1.1\r\n\r\n",
            "cut {cut}: what came before stays, nothing after"
        );
        assert!(e.failed && e.unparsable && e.counts.malformed == 1);
    }
    // Without filters, the default passes (nothing to check).
    assert_eq!(rules("[dye]\n").unparsable, Unparsable::Pass);
    assert!(Rules::from_toml_str("unparsable = \"maybe\"\n")
        .unwrap_err()
        .to_string()
        .contains("unparsable"));
}

#[test]
fn a_content_length_above_i64_max_is_malformed_not_the_rest_of_the_stream() {
    let huge = b"POST /a HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\nGET /pay/1 HTTP/1.1\r\n\r\n";
    let (out, e) = run(&rules(DENY_PAY), huge, 7);
    assert!(
        out.is_empty() && e.unparsable && e.counts.malformed == 1,
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    let pass = rules(&format!("unparsable = \"pass\"\n{DENY_PAY}"));
    let (out, e) = run(&pass, huge, 7);
    assert_eq!(
        (&out[..], e.counts.malformed, e.failed),
        (&huge[..], 1, false),
        "passes as captured, counted"
    );
    let max = b"POST /a HTTP/1.1\r\nContent-Length: 9223372036854775807\r\n\r\nbody";
    let (out, e) = run(&rules(DENY_PAY), max, 7);
    assert_eq!(
        (&out[..], e.counts.malformed),
        (&max[..], 0),
        "2^63-1 is still a length"
    );
}

#[test]
fn a_midstream_start_inside_a_body_is_dropped_when_unparsable_is_drop() {
    let body = b"tail of an upload\r\nGET /pay/1 HTTP/1.1\r\n\r\n";
    let feed = |r: &Arc<Rules>, mid: bool| {
        let meter = Meter::default();
        let mut e = Editor::new(r.clone(), 0, "198.18.0.9".parse().unwrap(), meter.clone());
        if mid {
            e = e.midstream();
        }
        let mut q = ByteQueue::new();
        e.feed(Payload::new(body, &meter).keep(0).unwrap(), &mut q);
        (q.len(), e)
    };
    let (n, e) = feed(&rules(DENY_PAY), true);
    assert!(n == 0 && e.failed && e.unparsable);
    let (n, e) = feed(&rules(&format!("unparsable = \"pass\"\n{DENY_PAY}")), true);
    assert!(n == body.len() && !e.failed, "pass: as today");
    // From the SYN, bytes that are not HTTP are another protocol: they pass.
    let (n, e) = feed(&rules(DENY_PAY), false);
    assert!(n == body.len() && !e.failed);
}
