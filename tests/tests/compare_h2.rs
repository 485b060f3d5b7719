//! `copier --compare` on HTTP/2 and gRPC end to end, with real peers.
//!
//! 1. nginx serves cleartext HTTP/2 with prior knowledge (`listen 80 http2`) on `online`
//!    (version 1) and on `test` (version 2: `/items/N` has another price, `/orders/N` answers
//!    500); h2load runs 4 connections with 16 streams in flight on each over four paths, and
//!    nghttp and curl (`--http2-prior-knowledge`) add streams. nginx answers the streams of a
//!    connection in its own order on each server: the exchanges must pair by stream. The
//!    comparison must count every request once, name exactly the two changed endpoints and
//!    their fields, and find the others equal.
//! 2. The gRPC lab server (`tests/assets/grpc_lab.py`, grpcio) on `online`, and its
//!    `candidate` variant on `test`, whose Unary calls with an id ending in 3 fail with
//!    INTERNAL: the four kinds of call on one channel (one HTTP/2 connection, 16 calls in
//!    flight). Exactly those calls differ, by `grpc-status`, `grpc-message` and body; the test
//!    answers' grpc-status are counted per status.
//!
//! Both: no HTTP/2 connection stops (`h2_broken`), nothing waits at the end, 0 leaks.

use lab::setup::{metric_sum, tail, wait_metric, CopyOptions, Copying};
use lab::{addr, grpc, lab_or_skip, Host, NginxOptions};
use std::time::Duration;

const METRICS_HTTP: &str = "127.0.0.1:9481";
const METRICS_GRPC: &str = "127.0.0.1:9482";

fn h2_nginx(version: u8) -> NginxOptions {
    let price = if version == 2 { "$1.50" } else { "$1.00" };
    let orders = if version == 2 {
        r#"return 500 '{"error":"boom"}';"#
    } else {
        r#"return 200 '{"order":$1,"state":"ok"}';"#
    };
    let server_extra = format!(
        r#"location ~ ^/items/(\d+)$ {{ default_type application/json; return 200 '{{"id":$1,"price":"{price}"}}'; }}
        location ~ ^/orders/(\d+)$ {{ default_type application/json; {orders} }}
        location = /health {{ default_type application/json; return 200 '{{"ok":true}}'; }}
        location = /ping {{ default_type text/plain; return 200 'pong'; }}
"#
    );
    NginxOptions {
        http2: true,
        workers: 2,
        server_extra,
        ..NginxOptions::default()
    }
}

#[test]
fn h2_streams_are_paired_by_stream_and_the_changed_endpoints_named() {
    let Some(mut lab) =
        lab_or_skip("h2_streams_are_paired_by_stream_and_the_changed_endpoints_named")
    else {
        return;
    };
    let opts = CopyOptions {
        online: h2_nginx(1),
        test: Some(h2_nginx(2)),
        ipv6: false,
        intercept_args: vec!["--payload-bytes".into(), "65495".into()],
        copier_args: vec!["--compare".into(), "--metrics".into(), METRICS_HTTP.into()],
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    let u = format!("http://{}", addr::ONLINE);
    // h2load: 400 requests over 4 connections (100 each, 16 in flight), the four paths in turn
    let paths = ["/items/1", "/orders/1", "/health", "/ping"].map(|p| format!("{u}{p}"));
    let mut argv = vec!["h2load", "-n", "400", "-c", "4", "-m", "16"];
    argv.extend(paths.iter().map(String::as_str));
    let out = lab.exec_ok(Host::Client, &argv).unwrap();
    assert!(out.contains("400 succeeded"), "h2load:\n{out}");
    // nghttp: 4 streams in flight on one connection, twice; curl: one stream per connection
    for i in 0..2 {
        let urls: Vec<String> = [
            format!("items/{}", 10 + i),
            format!("orders/{i}"),
            "health".into(),
            "ping".into(),
        ]
        .iter()
        .map(|p| format!("{u}/{p}"))
        .collect();
        let mut argv = vec!["nghttp", "-n", "-t", "20"];
        argv.extend(urls.iter().map(String::as_str));
        lab.exec_ok(Host::Client, &argv).unwrap();
    }
    for p in ["items/7", "orders/7", "health"] {
        lab.exec_ok(
            Host::Client,
            &[
                "curl",
                "-sS",
                "--http2-prior-knowledge",
                "--max-time",
                "20",
                "-o",
                "/dev/null",
                &format!("{u}/{p}"),
            ],
        )
        .unwrap();
    }
    let n = 400 + 8 + 3;
    let log = || tail(&c.copier.as_ref().unwrap().log(), 30);
    wait_metric(
        &lab,
        Host::Online,
        METRICS_HTTP,
        "copier_compare_exchanges_total",
        &[],
        n as f64,
        Duration::from_secs(20),
    )
    .unwrap_or_else(|e| panic!("{e}\ncopier log:\n{}", log()));
    // a second more: nothing more comes (each stream compared once), and the absolute counters
    // (exported once a second) are there
    std::thread::sleep(Duration::from_secs(1));
    let m = wait_metric(
        &lab,
        Host::Online,
        METRICS_HTTP,
        "copier_compare_h2_connections_total",
        &[],
        9.0,
        Duration::from_secs(5),
    )
    .unwrap();
    let r = |m: &str, ep: &str, result: &str| {
        metric_sum(
            m,
            "copier_compare_exchanges_total",
            &[
                &format!("endpoint=\"{ep}\""),
                &format!("result=\"{result}\""),
            ],
        )
    };
    assert_eq!(
        metric_sum(&m, "copier_compare_exchanges_total", &[]),
        n as f64,
        "every stream compared once:\n{m}"
    );
    let items = (
        r(&m, "GET /items/{n}", "differ"),
        r(&m, "GET /items/{n}", "equal"),
    );
    let orders = (
        r(&m, "GET /orders/{n}", "differ"),
        r(&m, "GET /orders/{n}", "equal"),
    );
    assert_eq!((items, orders), ((103.0, 0.0), (103.0, 0.0)), "{m}");
    let equal = metric_sum(&m, "copier_compare_exchanges_total", &["result=\"equal\""]);
    let differ = metric_sum(&m, "copier_compare_exchanges_total", &["result=\"differ\""]);
    assert_eq!(
        (equal, differ),
        (205.0, 206.0),
        "only the two changed endpoints differ:\n{m}"
    );
    let kind = |k: &str| {
        metric_sum(
            &m,
            "copier_compare_differences_total",
            &[&format!("kind=\"{k}\"")],
        )
    };
    // orders: status and its JSON fields; items: $.price; no header differs
    assert_eq!(
        (
            kind("status"),
            kind("body_field"),
            kind("header"),
            kind("body")
        ),
        (103.0, 206.0, 0.0, 0.0),
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_compare_malformed_total", &[]),
        0.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_compare_h2_connections_total", &[]),
        4.0 + 2.0 + 3.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_compare_not_compared_total", &[]),
        0.0,
        "nothing left out (h2_broken, expired...):\n{m}"
    );
    assert_eq!(metric_sum(&m, "copier_compare_pending", &[]), 0.0, "{m}");
    c.check_alive().unwrap();
    c.assert_no_leak(&mut lab);
}

const GRPC_PORT: u16 = 50051;
/// Calls of each of the four kinds.
const CALLS: usize = 20;

#[test]
fn grpc_calls_are_compared_by_status_trailers_and_body() {
    let Some(mut lab) = lab_or_skip("grpc_calls_are_compared_by_status_trailers_and_body") else {
        return;
    };
    let opts = CopyOptions {
        ipv6: false,
        extra_ports: vec![GRPC_PORT],
        intercept_args: vec!["--payload-bytes".into(), "65495".into()],
        copier_args: vec![
            "--map".into(),
            format!("{GRPC_PORT}={}:{GRPC_PORT}", addr::TEST),
            "--compare".into(),
            "--metrics".into(),
            METRICS_GRPC.into(),
        ],
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    grpc::start_pair(&mut lab, GRPC_PORT, Some("candidate"));
    let out = grpc::run_client(&lab, GRPC_PORT, CALLS);
    assert_eq!(out.trim(), format!("ok {}", 4 * CALLS), "the client");

    let n = 4 * CALLS;
    let log = || tail(&c.copier.as_ref().unwrap().log(), 30);
    wait_metric(
        &lab,
        Host::Online,
        METRICS_GRPC,
        "copier_compare_exchanges_total",
        &[],
        n as f64,
        Duration::from_secs(20),
    )
    .unwrap_or_else(|e| panic!("{e}\ncopier log:\n{}", log()));
    // the absolute counters are exported once a second, after the exchanges' own
    let m = wait_metric(
        &lab,
        Host::Online,
        METRICS_GRPC,
        "copier_compare_grpc_status_total",
        &[],
        n as f64,
        Duration::from_secs(5),
    )
    .unwrap();
    let r = |ep: &str, result: &str| {
        metric_sum(
            &m,
            "copier_compare_exchanges_total",
            &[
                &format!("endpoint=\"POST /lab.Echo/{ep}\""),
                &format!("result=\"{result}\""),
            ],
        )
    };
    // ids ending in 3 of the Unary calls: u3, u13
    let changed = (0..CALLS).filter(|i| i % 10 == 3).count() as f64;
    assert_eq!(
        (r("Unary", "differ"), r("Unary", "equal")),
        (changed, CALLS as f64 - changed),
        "{m}"
    );
    for ep in ["ServerStream", "ClientStream", "Bidi"] {
        assert_eq!(
            (r(ep, "differ"), r(ep, "equal")),
            (0.0, CALLS as f64),
            "{ep}:\n{m}"
        );
    }
    assert_eq!(
        metric_sum(&m, "copier_compare_exchanges_total", &[]),
        n as f64,
        "{m}"
    );
    // the differing calls differ by their trailers (status and message) and their body (the
    // online answer's message, none from the candidate), nothing else
    let kind = |k: &str| {
        metric_sum(
            &m,
            "copier_compare_differences_total",
            &[&format!("kind=\"{k}\"")],
        )
    };
    assert_eq!(
        (
            kind("header"),
            kind("body"),
            kind("status"),
            kind("body_field")
        ),
        (changed, changed, 0.0, 0.0),
        "{m}"
    );
    // grpc-status of the test answers: NOT_FOUND (5) for ids ending in 7 of every kind,
    // INTERNAL (13) for the changed calls, OK (0) for the rest
    let failing = 4.0 * (0..CALLS).filter(|i| i % 10 == 7).count() as f64;
    let st = |s: &str| {
        metric_sum(
            &m,
            "copier_compare_grpc_status_total",
            &[&format!("status=\"{s}\"")],
        )
    };
    assert_eq!(
        (st("0"), st("5"), st("13")),
        (n as f64 - failing - changed, failing, changed),
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_compare_h2_connections_total", &[]),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_compare_not_compared_total", &[]),
        0.0,
        "{m}"
    );
    c.check_alive().unwrap();
    c.assert_no_leak(&mut lab);
}
