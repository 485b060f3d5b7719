//! The comparator on a small JSON service in several versions: three-way with a noisy baseline,
//! two-way with an ignore list or with noise learned from repeated requests, malformed and
//! non-HTTP answers, cut large answers, the endpoint cap.

use super::*;

/// A version of a small JSON service: `/items/N` (a price), `/health`, `/orders/N`.
#[derive(Clone, Copy)]
struct Server {
    version: u8,
    /// adds a random X-Request-Id and a time stamp (as a baseline on another host would)
    noisy: bool,
}

fn answer(s: Server, target: &str, seq: u64) -> Vec<u8> {
    let (status, body) = if let Some(n) = target.strip_prefix("/items/") {
        let n: u64 = n.parse().unwrap();
        let price = if s.version == 2 { n * 10 + 1 } else { n * 10 };
        let ts = if s.noisy {
            format!(",\"ts\":{}", 1_700_000_000_000u64 + seq * 7)
        } else {
            String::new()
        };
        (
            200,
            format!("{{\"id\":{n},\"price\":{price},\"tags\":[\"a\",\"b\"]{ts}}}"),
        )
    } else if target.starts_with("/orders/") {
        if s.version == 2 {
            (500, "{\"error\":\"boom\"}".to_string())
        } else {
            (200, "{\"state\":\"ok\"}".to_string())
        }
    } else {
        (200, "{\"ok\":true}".to_string())
    };
    let rid = if s.noisy {
        format!("X-Request-Id: {:032x}\r\n", fnv(&seq.to_le_bytes()))
    } else {
        String::new()
    };
    format!(
        "HTTP/1.1 {status} X\r\nServer: t\r\nDate: {seq}\r\n{rid}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn reply(bytes: Vec<u8>, ms: u64) -> Reply {
    Reply {
        bytes,
        complete: true,
        time: Some(Duration::from_millis(ms)),
    }
}

fn run(cfg: CompareConfig, candidate: Server, baseline: Option<Server>, n: u64) -> Comparator {
    let mut c = Comparator::new(cfg);
    let online = Server {
        version: 1,
        noisy: false,
    };
    for seq in 0..n {
        let target = match seq % 3 {
            0 => format!("/items/{}", seq % 7),
            1 => format!("/orders/{}", seq % 5),
            _ => "/health".to_string(),
        };
        let ex = Exchange {
            port: 80,
            request: format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes(),
            online: reply(answer(online, &target, seq), 2),
            candidate: reply(answer(candidate, &target, seq), 3),
            baseline: baseline.map(|b| reply(answer(b, &target, seq), 2)),
            baseline_expected: baseline.is_some(),
        };
        c.compare(&ex);
    }
    c
}

fn differing(c: &Comparator) -> Vec<(String, Vec<String>)> {
    c.summary()
        .endpoints
        .into_iter()
        .filter(|(_, s, _)| s.differing > 0)
        .map(|(n, s, _)| (n, s.fields.keys().cloned().collect()))
        .collect()
}

#[test]
fn three_way_names_exactly_the_two_changes_and_learns_the_noise() {
    let cand = Server {
        version: 2,
        noisy: true,
    };
    let base = Server {
        version: 1,
        noisy: true,
    };
    let c = run(CompareConfig::default(), cand, Some(base), 300);
    let mut d = differing(&c);
    d.sort();
    assert_eq!(
        d,
        [
            ("GET /items/{n}".to_string(), vec!["$.price".to_string()]),
            (
                "GET /orders/{n}".to_string(),
                vec!["$.error".into(), "$.state".into(), "status".into()]
            ),
        ]
    );
    assert_eq!(
        c.noise_of("GET /items/{n}"),
        ["$.ts", "header:x-request-id"]
    );
    let t = c.totals();
    assert_eq!((t.compared, t.differing, t.malformed), (300, 200, 0));
    let s = c.endpoints().find(|(n, _)| *n == "GET /health").unwrap().1;
    assert_eq!((s.compared, s.equal), (100, 100));
    let text = c.summary().to_string();
    assert!(text.contains("GET /orders/{n}: 100/100 differ"), "{text}");
    assert!(!text.contains("GET /health:"), "{text}");
}

#[test]
fn two_way_with_the_ignore_list_gives_the_same_answer() {
    let cand = Server {
        version: 2,
        noisy: true,
    };
    let cfg = CompareConfig {
        ignore: vec!["header:X-Request-Id".into(), "$.ts".into()],
        ..CompareConfig::default()
    };
    let c = run(cfg, cand, None, 300);
    let mut d = differing(&c);
    d.sort();
    assert_eq!(d.len(), 2);
    assert_eq!(
        d[0],
        ("GET /items/{n}".to_string(), vec!["$.price".to_string()])
    );
    assert_eq!(d[1].0, "GET /orders/{n}");
}

#[test]
fn two_way_without_an_ignore_list_learns_noise_from_repeated_requests() {
    // the time stamp and request id are new on every answer to the same request: noise, once
    // a request was seen twice; the changed price is the same every time: a difference
    let cand = Server {
        version: 2,
        noisy: true,
    };
    let c = run(CompareConfig::default(), cand, None, 300);
    assert_eq!(
        c.noise_of("GET /items/{n}"),
        ["$.ts", "header:x-request-id"]
    );
    let s = c.summary();
    let items = s
        .endpoints
        .iter()
        .find(|e| e.0 == "GET /items/{n}")
        .unwrap();
    assert_eq!(items.1.fields.keys().collect::<Vec<_>>(), ["$.price"]);
}

#[test]
fn same_version_is_equal() {
    let c = run(
        CompareConfig::default(),
        Server {
            version: 1,
            noisy: false,
        },
        None,
        90,
    );
    assert_eq!(c.totals().equal, 90);
    let s = c.endpoints().next().unwrap().1;
    let r = s.time_ratio(0.5).unwrap();
    assert!((1.0..2.0).contains(&r), "{r}");
}

#[test]
fn malformed_and_non_http() {
    let mut c = Comparator::new(CompareConfig::default());
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi".to_vec();
    let v = c.compare(&Exchange {
        port: 80,
        request: b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        online: reply(ok.clone(), 1),
        candidate: reply(b"HTTP/1.1 2x0 OK\r\n\r\n".to_vec(), 1),
        ..Exchange::default()
    });
    assert_eq!(v.outcome, Outcome::Malformed("candidate"));
    assert_eq!(c.totals().malformed, 1);
    let v = c.compare(&Exchange {
        port: 6379,
        request: b"GET k\r\n".to_vec(),
        online: reply(b"$5\r\nhello\r\n".to_vec(), 1),
        candidate: reply(b"$5\r\nhellO\r\n".to_vec(), 1),
        ..Exchange::default()
    });
    assert_eq!(v.endpoint, "tcp/6379");
    assert_eq!(v.outcome, Outcome::Differ);
    assert_eq!(v.diffs[0].offset, Some(8));
}

#[test]
fn large_cut_answers_compare_on_what_both_have() {
    let body = "x".repeat(1 << 20);
    let full = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes();
    let mut c = Comparator::new(CompareConfig::default());
    // the test answer's record carried only its first 64 KB: equal on that prefix
    let v = c.compare(&Exchange {
        port: 80,
        request: b"GET /big HTTP/1.1\r\n\r\n".to_vec(),
        online: reply(full.clone(), 1),
        candidate: Reply {
            bytes: full[..65536].to_vec(),
            complete: false,
            time: None,
        },
        ..Exchange::default()
    });
    assert_eq!(v.outcome, Outcome::Equal, "{:?}", v.diffs);
    let mut other = full.clone();
    let n = other.len() - 10;
    other[n] = b'y';
    let v = c.compare(&Exchange {
        port: 80,
        request: b"GET /big HTTP/1.1\r\n\r\n".to_vec(),
        online: reply(full, 1),
        candidate: reply(other, 1),
        ..Exchange::default()
    });
    assert_eq!(v.outcome, Outcome::Differ);
    assert_eq!(v.diffs[0].offset, Some(body.len() - 10));
}

#[test]
fn endpoints_are_capped() {
    let cfg = CompareConfig {
        max_endpoints: 3,
        ..CompareConfig::default()
    };
    let mut c = Comparator::new(cfg);
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec();
    for i in 0..20 {
        c.compare(&Exchange {
            port: 80,
            request: format!("GET /p{i} HTTP/1.1\r\n\r\n").into_bytes(),
            online: reply(ok.clone(), 1),
            candidate: reply(ok.clone(), 1),
            ..Exchange::default()
        });
    }
    assert_eq!(c.endpoints().count(), 4);
    assert_eq!(c.endpoints().last().unwrap().1.compared, 17);
}

#[test]
fn credential_headers_are_compared_but_their_values_never_leave() {
    let ans = |cookie: &str| {
        format!("HTTP/1.1 200 OK\r\nSet-Cookie: {cookie}\r\nX-A: 1\r\nContent-Length: 2\r\n\r\nhi")
            .into_bytes()
    };
    let ex = |online: &str, test: &str| Exchange {
        port: 80,
        request: b"GET / HTTP/1.1\r\nCookie: sid=client-s3cr3t\r\n\r\n".to_vec(),
        online: reply(ans(online), 1),
        candidate: reply(ans(test), 1),
        ..Exchange::default()
    };
    let mut c = Comparator::new(CompareConfig {
        repeat_table: 0,
        ..CompareConfig::default()
    });
    assert_eq!(
        c.compare(&ex("sid=online-s3cr3t", "sid=online-s3cr3t"))
            .outcome,
        Outcome::Equal
    );
    let v = c.compare(&ex("sid=online-s3cr3t", "sid=test-s3cr3t"));
    assert_eq!(
        v.outcome,
        Outcome::Differ,
        "a differing Set-Cookie still counts"
    );
    assert_eq!(v.diffs.len(), 1);
    assert_eq!(v.diffs[0].field, "header:set-cookie");
    assert_eq!(v.diffs[0].online.as_deref(), Some(crate::redact::MARK));
    assert_eq!(
        v.diffs[0].test.as_deref(),
        Some(crate::redact::MARK_DIFFERS)
    );
    let line = crate::jsonl::Line::of_verdict(&v, 1).0.unwrap();
    let text = serde_json::to_string(&line).unwrap();
    assert!(!text.contains("s3cr3t"), "{text}");
    let html = crate::report::Report::from_lines(&[line]).html("r");
    assert!(
        !html.contains("s3cr3t") && html.contains("[redacted, differs]"),
        "{html}"
    );
    // configurable: off
    let mut c = Comparator::new(CompareConfig {
        repeat_table: 0,
        redact: crate::redact::Redact::none(),
        ..CompareConfig::default()
    });
    let v = c.compare(&ex("sid=online-s3cr3t", "sid=test-s3cr3t"));
    assert_eq!(v.diffs[0].test.as_deref(), Some("sid=test-s3cr3t"));
}
