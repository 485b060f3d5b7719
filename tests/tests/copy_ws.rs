//! WebSocket end to end: a server that pushes messages without being asked
//! (`tests/assets/ws_lab.py`, Debian's python3-websockets) on `online` and `test`, and a client
//! on `client` with three connections at once, each sending a message after each of its first
//! 20 pushes, then holding the connection open for 4 s while the pushes go on. The test server
//! must get every client message exactly once, in order per connection, and in time: each
//! within 2 s of the online server's copy of it (so not held until the session ends, which
//! comes 4 s after the last), and none of its answers may leave the test host. Three cases:
//! both servers push alike; the test server pushes shorter messages with no pause; the test
//! server pushes every 500 ms where the online one pushed every 20 ms (with pacing by answers
//! each message waited for a test push: 2.4 s late by the sixth, before the copier sent
//! WebSocket messages unpaced).

use lab::setup::{metric_sum, scrape_metrics, tail, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

const PORT: u16 = 8765;
const COPIER_METRICS: &str = "127.0.0.1:9468";
const CONNS: usize = 3;
const MESSAGES: usize = 20;
/// Debian's python3 (python3-websockets is installed for it, see scripts/install-deps.sh).
const PYTHON: &str = "/usr/bin/python3";
/// The most a copied message may come after the online one.
const IN_TIME: f64 = 2.0;

/// Each connection's messages (`c<k> <i>`) with the time the server logged each, in order.
fn messages(log: &Path) -> BTreeMap<String, Vec<(String, f64)>> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut m: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
    for line in text.lines() {
        let mut w = line.split_whitespace();
        let (Some(t), Some(conn), Some(i)) = (w.next(), w.next(), w.next()) else {
            continue;
        };
        m.entry(conn.to_string())
            .or_default()
            .push((format!("{conn} {i}"), t.parse().unwrap()));
    }
    m
}

fn texts(m: &BTreeMap<String, Vec<(String, f64)>>) -> BTreeMap<String, Vec<String>> {
    m.iter()
        .map(|(k, v)| (k.clone(), v.iter().map(|(s, _)| s.clone()).collect()))
        .collect()
}

#[test]
fn websocket_messages_between_server_pushes_are_copied_exactly_and_in_time() {
    pushes_and_messages(
        "websocket_messages_between_server_pushes_are_copied_exactly_and_in_time",
        "0.1",
        "0",
        "0.1",
        "0",
    );
}

/// The test server pushes every 20 ms (never quiet for `--answer-quiet`), and shorter pushes
/// than the online one: the size of an online answer never comes.
#[test]
fn websocket_messages_are_not_held_by_a_test_server_that_pushes_less_without_pause() {
    pushes_and_messages(
        "websocket_messages_are_not_held_by_a_test_server_that_pushes_less_without_pause",
        "0.02",
        "200",
        "0.02",
        "20",
    );
}

/// The test server pushes every 500 ms where the online one pushed every 20 ms: the client's
/// messages (one after each online push) must not wait for the test server's pushes.
#[test]
fn websocket_messages_do_not_wait_for_a_test_server_that_pushes_less_often() {
    pushes_and_messages(
        "websocket_messages_do_not_wait_for_a_test_server_that_pushes_less_often",
        "0.02",
        "0",
        "0.5",
        "0",
    );
}

fn pushes_and_messages(
    name: &str,
    every: &str,
    online_pad: &str,
    test_every: &str,
    test_pad: &str,
) {
    let Some(mut lab) = lab_or_skip(name) else {
        return;
    };
    let online_log = lab.dir().join("ws-online.txt");
    let test_log = lab.dir().join("ws-test.txt");
    let opts = CopyOptions {
        copier_args: vec![
            "--metrics".into(),
            COPIER_METRICS.into(),
            "--map".into(),
            format!("{PORT}={}:{PORT}", addr::TEST),
        ],
        extra_ports: vec![PORT],
        ipv6: false,
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    let script = format!("{}/assets/ws_lab.py", env!("CARGO_MANIFEST_DIR"));
    let port = PORT.to_string();
    let (ol, tl) = (
        online_log.display().to_string(),
        test_log.display().to_string(),
    );
    let _online = lab
        .spawn(
            Host::Online,
            "ws-online",
            &[PYTHON, &script, "server", &ol, &port, every, online_pad],
        )
        .unwrap();
    let _test = lab
        .spawn(
            Host::Test,
            "ws-test",
            &[PYTHON, &script, "server", &tl, &port, test_every, test_pad],
        )
        .unwrap();
    for h in [Host::Online, Host::Test] {
        let wait = format!("for i in $(seq 100); do ss -ltn | grep -q ':{PORT} ' && exit 0; sleep 0.1; done; exit 1");
        lab.sh(h, &wait).unwrap();
    }

    let target = format!("{}:{PORT}", addr::ONLINE);
    let out = lab
        .exec_ok(
            Host::Client,
            &[
                PYTHON,
                &script,
                "client",
                &target,
                &CONNS.to_string(),
                &MESSAGES.to_string(),
            ],
        )
        .unwrap();
    assert_eq!(out.trim(), format!("ok {}", CONNS * MESSAGES), "the client");
    let online = messages(&online_log);
    assert_eq!(
        online.values().map(Vec::len).sum::<usize>(),
        CONNS * MESSAGES,
        "the online server's log: {online:?}"
    );

    // Every message at the test server, then quiet for a second (a message copied twice would
    // show), at most 20 s.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut test = messages(&test_log);
    let mut quiet_since = Instant::now();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let now = messages(&test_log);
        if texts(&now) != texts(&test) {
            test = now;
            quiet_since = Instant::now();
        } else if test.values().map(Vec::len).sum::<usize>() >= CONNS * MESSAGES
            && quiet_since.elapsed() >= Duration::from_secs(1)
        {
            break;
        }
    }
    c.check_alive().unwrap();
    let copier_log = tail(&c.copier.as_ref().unwrap().log(), 30);
    assert_eq!(
        texts(&test),
        texts(&online),
        "the test server's messages differ from online\ncopier log:\n{copier_log}"
    );
    // In time: each message within IN_TIME of the online one (both servers log on this
    // machine's clock).
    let mut worst = 0.0f64;
    for (conn, msgs) in &online {
        for ((m, t_on), (_, t_test)) in msgs.iter().zip(&test[conn]) {
            let late = t_test - t_on;
            worst = worst.max(late);
            assert!(late < IN_TIME, "{m} reached the test server {late:.3} s after the online one\ncopier log:\n{copier_log}");
        }
    }
    println!(
        "{} messages; the latest reached the test server {worst:.3} s after the online one",
        CONNS * MESSAGES
    );

    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert_eq!(
        metric_sum(&m, "copier_sessions_failed_total", &[]),
        0.0,
        "{m}"
    );
    c.assert_no_leak(&mut lab);
}
