//! Long-lived connections that go quiet (issue 33): keep-alive HTTP connections to nginx and
//! redis connections that idle for longer than the copier's `--session-timeout` (1 s here),
//! several times with requests between, are copied on: every request arrives at the test server
//! exactly once, and nothing leaks. The test nginx closes idle connections after 2 s
//! (`keepalive_timeout`): a request after a longer quiet goes on a new test connection, one
//! after a shorter quiet (but past the session timeout) on the same one. And with a cap
//! (`--max-sessions 3`, six connections) that forces idle sessions out: the shed sessions are
//! counted (`idle_shed`), a shed session's next request starts a new session at once, every
//! request the copier says it copied arrives once, and any not copied is counted by reason.

use lab::setup::{metric_sum, scrape_metrics, start_redis, tail, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host, Lab, NginxOptions};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::time::Duration;

const COPIER_METRICS: &str = "127.0.0.1:9483";
const REDIS: u16 = 6379;

/// A connection from `client` to the online host's `port`.
fn connect(lab: &Lab, port: u16) -> TcpStream {
    let to = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, port));
    let s = lab
        .in_ns(Host::Client, || {
            TcpStream::connect_timeout(&to, Duration::from_secs(5))
        })
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// One keep-alive GET on `s`, its whole answer read.
fn get(s: &mut TcpStream, path: &str) {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: online\r\n\r\n").as_bytes())
        .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut len = None;
    let mut line = String::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        assert!(!line.is_empty(), "the online server closed");
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = Some(v.trim().parse::<usize>().unwrap());
        }
    }
    let mut body = vec![0; len.expect("content-length")];
    r.read_exact(&mut body).unwrap();
    assert!(r.buffer().is_empty(), "nothing beyond the answer");
}

/// One `INCR key` on a redis connection; its answer.
fn incr(s: &mut TcpStream, key: &str) -> String {
    s.write_all(format!("*2\r\n$4\r\nINCR\r\n${}\r\n{key}\r\n", key.len()).as_bytes())
        .unwrap();
    let mut line = String::new();
    BufReader::new(s.try_clone().unwrap())
        .read_line(&mut line)
        .unwrap();
    line
}

/// The test server's requests by client `c` (`?c=<c>&r=<r>`): request index -> nginx's
/// connection serial.
fn test_requests(c: &Copying) -> BTreeMap<(usize, usize), Vec<u64>> {
    let mut by = BTreeMap::new();
    for e in c.test().requests().unwrap() {
        let q = e.uri.split('?').nth(1).unwrap_or("");
        let v: Vec<usize> = q
            .split('&')
            .filter_map(|kv| kv.split('=').nth(1)?.parse().ok())
            .collect();
        if let [k, r] = v[..] {
            by.entry((k, r)).or_insert_with(Vec::new).push(e.connection);
        }
    }
    by
}

#[test]
fn idle_keep_alive_and_redis_connections_are_copied_after_every_quiet_spell() {
    let Some(mut lab) =
        lab_or_skip("idle_keep_alive_and_redis_connections_are_copied_after_every_quiet_spell")
    else {
        return;
    };
    start_redis(&mut lab, Host::Online);
    start_redis(&mut lab, Host::Test);
    let opts = CopyOptions {
        // The test nginx ends idle connections after 2 s (the online one after 300 s).
        test: Some(NginxOptions {
            server_extra: "keepalive_timeout 2s;".into(),
            ..NginxOptions::default()
        }),
        copier_args: vec![
            "--metrics".into(),
            COPIER_METRICS.into(),
            "--session-timeout".into(),
            "1s".into(),
            "--map".into(),
            format!("{REDIS}={}:{REDIS}", addr::TEST),
        ],
        extra_ports: vec![REDIS],
        ipv6: false,
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    const HTTP: usize = 5;
    const KV: usize = 3;
    let mut http: Vec<TcpStream> = (0..HTTP).map(|_| connect(&lab, 80)).collect();
    let mut kv: Vec<TcpStream> = (0..KV).map(|_| connect(&lab, REDIS)).collect();
    // Quiet before each round: none, past the session timeout but within the test nginx's
    // keep-alive, past both, past the session timeout again.
    let quiet = [0, 1500, 2600, 1500];
    for (r, q) in quiet.iter().enumerate() {
        std::thread::sleep(Duration::from_millis(*q));
        for (k, s) in http.iter_mut().enumerate() {
            get(s, &format!("/index.html?c={k}&r={r}"));
        }
        for (k, s) in kv.iter_mut().enumerate() {
            assert_eq!(incr(s, &format!("c{k}")), format!(":{}\r\n", r + 1));
        }
    }
    let n = c.assert_copied_exactly(&mut lab);
    assert_eq!(n, HTTP * quiet.len());
    let log = tail(&c.copier.as_ref().unwrap().log(), 30);
    // Each copied request on its test connection: the same one after 1.5 s of quiet (kept past
    // the session timeout), a new one after 2.6 s (the test nginx had closed the old).
    let by = test_requests(&c);
    for k in 0..HTTP {
        let conn = |r: usize| by.get(&(k, r)).map(|v| v[..].to_vec()).unwrap_or_default();
        let (c0, c1, c2, c3) = (conn(0), conn(1), conn(2), conn(3));
        assert_eq!(c0.len(), 1, "client {k}: {by:?}");
        assert_eq!(
            c0, c1,
            "client {k}: the request after 1.5 s went on the same test connection\n{log}"
        );
        assert_ne!(
            c1, c2,
            "client {k}: the request after 2.6 s went on a new test connection"
        );
        assert_eq!(c2, c3, "client {k}");
    }
    // Every INCR once at the test redis too.
    for k in 0..KV {
        let got = lab
            .exec_ok(
                Host::Test,
                &["redis-cli", "-h", "127.0.0.1", "GET", &format!("c{k}")],
            )
            .unwrap();
        assert_eq!(
            got.trim(),
            quiet.len().to_string(),
            "redis client {k}\n{log}"
        );
    }
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    let failed = |r: &str| {
        metric_sum(
            &m,
            "copier_sessions_failed_total",
            &[&format!("reason=\"{r}\"")],
        )
    };
    assert_eq!(
        (
            failed("timeout"),
            failed("idle_timeout"),
            failed("idle_shed")
        ),
        (0.0, 0.0, 0.0),
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_sessions_started_total", &[]),
        (HTTP + KV) as f64,
        "one session per connection"
    );
    assert_eq!(
        metric_sum(
            &m,
            "copier_packets_dropped_total",
            &["reason=\"after_close\""]
        ),
        0.0
    );
    assert!(
        metric_sum(&m, "copier_reconnects_total", &[]) >= HTTP as f64,
        "{m}"
    );
    drop((http, kv));
    c.assert_no_leak(&mut lab);
}

#[test]
fn idle_sessions_forced_out_by_the_session_cap_are_counted_and_their_next_requests_copied() {
    let Some(mut lab) = lab_or_skip(
        "idle_sessions_forced_out_by_the_session_cap_are_counted_and_their_next_requests_copied",
    ) else {
        return;
    };
    let opts = CopyOptions {
        copier_args: vec![
            "--metrics".into(),
            COPIER_METRICS.into(),
            "--session-timeout".into(),
            "1s".into(),
            "--max-sessions".into(),
            "3".into(),
        ],
        ipv6: false,
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    const CONNS: usize = 6;
    const ROUNDS: usize = 4;
    let mut conns = Vec::new();
    // One after the other, each copy answered (idle) before the next comes.
    for k in 0..CONNS {
        let mut s = connect(&lab, 80);
        get(&mut s, &format!("/index.html?c={k}&r=0"));
        conns.push(s);
        std::thread::sleep(Duration::from_millis(300));
    }
    for r in 1..ROUNDS {
        std::thread::sleep(Duration::from_millis(1500));
        for (k, s) in conns.iter_mut().enumerate() {
            get(s, &format!("/index.html?c={k}&r={r}"));
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let online = c
        .online
        .wait_requests(CONNS * ROUNDS, Duration::from_secs(5));
    assert_eq!(online, CONNS * ROUNDS);
    c.settle(Duration::from_secs(2), Duration::from_secs(20));
    c.check_alive().unwrap();
    let by = test_requests(&c);
    let log = tail(&c.copier.as_ref().unwrap().log(), 30);
    assert!(
        by.values().all(|v| v.len() == 1),
        "a request copied twice: {by:?}\n{log}"
    );
    let copied = by.len();
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    let failed = |r: &str| {
        metric_sum(
            &m,
            "copier_sessions_failed_total",
            &[&format!("reason=\"{r}\"")],
        )
    };
    let dropped = |r: &str| {
        metric_sum(
            &m,
            "copier_packets_dropped_total",
            &[&format!("reason=\"{r}\"")],
        )
    };
    // What the copier says it copied arrived, once each.
    assert_eq!(
        metric_sum(&m, "copier_units_sent_total", &[]),
        copied as f64,
        "{m}\n{log}"
    );
    assert!(failed("idle_shed") >= 3.0, "{m}");
    assert_eq!((failed("memory"), failed("timeout")), (0.0, 0.0), "{m}");
    // A shed session's client that sends again starts a new session at that request (the
    // copier remembered where its stream stood): nothing is lost for lack of a request
    // boundary. Only a request that finds the table full of busy sessions is not copied, and is
    // counted (one packet each: a GET fits a segment), as is any request of its connection
    // skipped while a new session waits for a boundary.
    let missing = online - copied;
    let (full, skipped) = (dropped("table_full"), dropped("midstream_skip"));
    assert!(
        missing as f64 <= full + skipped + dropped("after_close"),
        "{missing} not copied\n{m}"
    );
    if full == 0.0 {
        assert_eq!((missing, skipped), (0, 0.0), "{m}\n{log}");
    }
    println!("{online} requests online, {copied} copied, {missing} not copied; idle_shed {}, table_full {full}", failed("idle_shed"));
    drop(conns);
    c.assert_no_leak(&mut lab);
}
