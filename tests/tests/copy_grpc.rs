//! gRPC end to end: a real gRPC server (grpcio's generic handlers, `tests/assets/grpc_lab.py`)
//! on `online` and `test`, a real client on `client` making unary, server-streaming,
//! client-streaming and bidirectional calls, 16 in flight at once on one channel (one HTTP/2
//! connection). Each server logs every call once, when it ends, with its method, its id, the
//! request messages it read and the status it gave. The test server must log exactly the
//! online calls, each `--copies` times, whole (every message of every stream), and none of its
//! answers may leave the test host.
//!
//! `grpc-status` of the test answers is counted from the test server's log: this copier copies
//! without `--compare`, so its records of the test answers carry TCP headers only (with
//! `--compare` the comparison decodes the trailers and counts them: `compare_h2.rs`).

use lab::setup::{metric_sum, scrape_metrics, tail, CopyOptions, Copying};
use lab::{addr, grpc, lab_or_skip, Host};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

const PORT: u16 = 50051;
const COPIER_METRICS: &str = "127.0.0.1:9467";
/// Calls of each of the four kinds.
const CALLS: usize = 30;
/// The calls a server logged: line (`<method> <id> <messages> <status>`) -> times.
fn calls(log: &Path) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut m = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        *m.entry(line.to_string()).or_insert(0) += 1;
    }
    m
}

fn total(m: &BTreeMap<String, usize>) -> usize {
    m.values().sum()
}

fn grpc_calls_reach_the_test_server_once_per_copy(name: &str, copies: usize) {
    let Some(mut lab) = lab_or_skip(name) else {
        return;
    };
    let opts = CopyOptions {
        copier_args: vec![
            "--metrics".into(),
            COPIER_METRICS.into(),
            "--map".into(),
            format!("{PORT}={}:{PORT}", addr::TEST),
            "--copies".into(),
            copies.to_string(),
        ],
        extra_ports: vec![PORT],
        ipv6: false,
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    let (online_log, test_log) = grpc::start_pair(&mut lab, PORT, None);
    let out = grpc::run_client(&lab, PORT, CALLS);
    assert_eq!(out.trim(), format!("ok {}", 4 * CALLS), "the client");
    let online = calls(&online_log);
    assert_eq!(
        total(&online),
        4 * CALLS,
        "the online server's log: {online:?}"
    );
    assert!(
        online.values().all(|&n| n == 1),
        "a call twice online: {online:?}"
    );

    // Every call at the test server `copies` times, then quiet for a second (an extra copy
    // would show), at most 30 s.
    let want: BTreeMap<String, usize> = online
        .iter()
        .map(|(k, &n)| (k.clone(), n * copies))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut test = calls(&test_log);
    let mut quiet_since = Instant::now();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let now = calls(&test_log);
        if now != test {
            test = now;
            quiet_since = Instant::now();
        } else if total(&test) >= total(&want) && quiet_since.elapsed() >= Duration::from_secs(1) {
            break;
        }
    }
    c.check_alive().unwrap();
    let copier_log = tail(&c.copier.as_ref().unwrap().log(), 30);
    assert_eq!(
        test, want,
        "the test server's calls differ from online x {copies}\ncopier log:\n{copier_log}"
    );

    // grpc-status of the test answers (from the test server's log): ids ending in 7 fail.
    let failing = test
        .iter()
        .filter(|(k, _)| k.ends_with(" NOT_FOUND"))
        .map(|(_, n)| n)
        .sum::<usize>();
    let ok = test
        .iter()
        .filter(|(k, _)| k.ends_with(" OK"))
        .map(|(_, n)| n)
        .sum::<usize>();
    let failing_ids = (0..CALLS).filter(|i| i % 10 == 7).count();
    assert_eq!(
        (ok, failing),
        (
            (4 * CALLS - 4 * failing_ids) * copies,
            4 * failing_ids * copies
        )
    );
    println!("grpc-status of the test answers: OK {ok}, NOT_FOUND {failing}");

    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert_eq!(metric_sum(&m, "copier_h2_sessions_total", &[]), 1.0, "{m}");
    assert_eq!(
        metric_sum(&m, "copier_sessions_failed_total", &[]),
        0.0,
        "{m}"
    );
    c.assert_no_leak(&mut lab);
}

#[test]
fn grpc_calls_of_every_kind_are_copied_exactly_once() {
    grpc_calls_reach_the_test_server_once_per_copy(
        "grpc_calls_of_every_kind_are_copied_exactly_once",
        1,
    );
}

#[test]
fn grpc_calls_of_every_kind_are_copied_twice_with_copies_2() {
    grpc_calls_reach_the_test_server_once_per_copy(
        "grpc_calls_of_every_kind_are_copied_twice_with_copies_2",
        2,
    );
}
