//! The copier with several workers (`--workers 2`): two capture rings in one PACKET_FANOUT
//! group, two engines, records routed to the engine that owns each session. Real clients (wrk,
//! curl, raw keep-alive connections) talk to nginx on `online`; the test nginx must receive
//! exactly the online requests (from the two access logs), nothing may leak from the test host,
//! both workers must carry sessions, a restarted intercept must learn the sessions of both, and
//! a stopped copier must reset every test connection it opened.

use lab::http::get;
use lab::setup::{metric_sample, scrape_metrics};
use lab::setup::{tail, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host, Lab};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

const COPIER_METRICS: &str = "127.0.0.1:9466";

fn two_workers() -> CopyOptions {
    CopyOptions {
        copier_args: vec![
            "--workers".into(),
            "2".into(),
            "--metrics".into(),
            COPIER_METRICS.into(),
            "--seed".into(),
            "11".into(),
        ],
        ..CopyOptions::default()
    }
}

fn online_url(path: &str) -> String {
    format!("http://{}{path}", addr::ONLINE)
}

/// `n` keep-alive connections from the client to the online nginx, each after one request
/// tagged `tag`. They stay open while the streams live.
fn open_connections(lab: &Lab, n: usize, tag: &str) -> Vec<TcpStream> {
    let tag = tag.to_owned();
    lab.in_ns(Host::Client, move || {
        let to = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80));
        (0..n)
            .map(|i| {
                let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                get(&mut s, &format!("/index.html?{tag}={i}"));
                s
            })
            .collect()
    })
    .unwrap()
}

/// Connections to port 80 established on the test host.
fn test_established(lab: &Lab) -> usize {
    lab.exec_ok(
        Host::Test,
        &["ss", "-Htn", "state", "established", "( sport = :80 )"],
    )
    .unwrap()
    .lines()
    .filter(|l| !l.trim().is_empty())
    .count()
}

fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn two_workers_copy_wrk_and_short_connections_exactly() {
    let Some(mut lab) = lab_or_skip("two_workers_copy_wrk_and_short_connections_exactly") else {
        return;
    };
    let c = Copying::start(&mut lab, two_workers()).unwrap();
    let log = c.copier.as_ref().unwrap().log();
    assert!(log.contains("2 workers (fanout group"), "{log}");
    // many short HTTP/1.0 and HTTP/1.1 connections, each its own session (and client port)
    let script = format!(
        "for i in $(seq 1 120); do curl -sS --http1.0 -o /dev/null '{}?short='$i || exit 1; done; \
         for i in $(seq 1 40); do curl -sS -o /dev/null '{}?close='$i -H 'Connection: close' || exit 1; done",
        online_url("/index.html"),
        online_url("/index.html")
    );
    lab.sh(Host::Client, &script).unwrap();
    // keep-alive connections driven by wrk, two threads
    lab.exec_ok(
        Host::Client,
        &["wrk", "-t2", "-c16", "-d3s", &online_url("/index.html")],
    )
    .unwrap();
    let n = c.assert_copied_exactly(&mut lab);
    assert!(n > 500, "too few requests to mean anything: {n}");

    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    let started: Vec<f64> = (0..2)
        .map(|w| {
            metric_sample(
                &m,
                &format!("copier_sessions_started_total{{worker=\"{w}\"}}"),
            )
        })
        .collect();
    assert!(
        started.iter().all(|&s| s >= 10.0),
        "both workers must carry sessions: {started:?}\n{m}"
    );
    assert!(started.iter().sum::<f64>() >= 176.0, "{started:?}\n{m}");
    for w in 0..2 {
        assert!(
            metric_sample(
                &m,
                &format!("copier_packets_captured_total{{worker=\"{w}\"}}")
            ) > 0.0,
            "{m}"
        );
        assert_eq!(
            metric_sample(&m, &format!("copier_kernel_drops_total{{worker=\"{w}\"}}")),
            0.0,
            "{m}"
        );
    }
    assert_eq!(
        metric_sample(&m, "copier_records_unroutable_total{reason=\"malformed\"}"),
        0.0,
        "{m}"
    );
}

/// Copy 12 keep-alive connections that stay open, stop the copier with SIGTERM (it must exit
/// cleanly) and wait until every test connection was reset (none is left waiting for nginx's
/// keep-alive timeout). Returns the copying (the intercept still runs), the copier's log and the
/// client connections.
fn copy_12_held_connections_then_sigterm(
    lab: &mut Lab,
    opts: CopyOptions,
) -> (Copying, String, Vec<TcpStream>) {
    let c = Copying::start(lab, opts).unwrap();
    let conns = open_connections(lab, 12, "held");
    c.test().wait_requests(12, Duration::from_secs(20));
    wait_for(
        "12 copied connections on the test host",
        Duration::from_secs(10),
        || test_established(lab) == 12,
    );

    let copier = c.copier.as_ref().unwrap();
    let status = copier.stop().expect("the copier stops on SIGTERM");
    let log = copier.log();
    assert!(status.success(), "{status}\n{}", tail(&log, 20));
    wait_for(
        "the test connections to be reset",
        Duration::from_secs(3),
        || test_established(lab) == 0,
    );
    (c, log, conns)
}

#[test]
fn two_workers_reset_every_test_connection_on_sigterm() {
    let Some(mut lab) = lab_or_skip("two_workers_reset_every_test_connection_on_sigterm") else {
        return;
    };
    let (_c, log, conns) = copy_12_held_connections_then_sigterm(&mut lab, two_workers());
    let closed: usize = log
        .lines()
        .filter_map(|l| {
            l.split("closed ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .sum();
    assert_eq!(
        closed,
        12,
        "sessions closed at exit, over both workers:\n{}",
        tail(&log, 20)
    );
    assert!(log.contains("with 2 workers"), "{}", tail(&log, 5));
    drop(conns);
}

/// One worker (the default) reads the intercept link itself (`copier::link`); when it stops, its
/// client still passes the last Unregisters on before it closes the link.
#[test]
fn one_worker_resets_and_unregisters_every_test_connection_on_sigterm() {
    let Some(mut lab) =
        lab_or_skip("one_worker_resets_and_unregisters_every_test_connection_on_sigterm")
    else {
        return;
    };
    let opts = CopyOptions {
        copier_args: vec!["--metrics".into(), COPIER_METRICS.into()],
        ..CopyOptions::default()
    };
    let (c, log, conns) = copy_12_held_connections_then_sigterm(&mut lab, opts);
    assert!(log.contains("closed 12 session(s)"), "{}", tail(&log, 20));
    // The intercept got every Unregister before the link closed: it had nothing left to forget.
    wait_for(
        "the intercept to see the copier leave",
        Duration::from_secs(5),
        || c.intercept.log().contains("closed the connection; forgot"),
    );
    let ilog = c.intercept.log();
    assert!(
        ilog.contains("closed the connection; forgot 0 registrations"),
        "{}",
        tail(&ilog, 10)
    );
    drop(conns);
}

#[test]
fn two_workers_survive_an_intercept_restart() {
    let Some(mut lab) = lab_or_skip("two_workers_survive_an_intercept_restart") else {
        return;
    };
    let mut c = Copying::start(&mut lab, two_workers()).unwrap();
    // keep-alive connections that stay open across the restart, on both workers
    let mut conns = open_connections(&lab, 16, "before");
    c.test().wait_requests(16, Duration::from_secs(20));
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    let active: Vec<f64> = (0..2)
        .map(|w| metric_sample(&m, &format!("copier_sessions_active{{worker=\"{w}\"}}")))
        .collect();
    assert!(
        active.iter().all(|&a| a >= 1.0),
        "both workers should hold open sessions: {active:?}\n{m}"
    );

    c.restart_intercept(&mut lab).unwrap();
    // the copier reconnects by itself and registers every live session of both workers
    wait_for("the copier to reconnect", Duration::from_secs(10), || {
        c.intercept.log().contains("connected as")
    });
    std::thread::sleep(Duration::from_millis(500));
    let log = c.copier.as_ref().unwrap().log();
    let resent = log.lines().rev().find_map(|l| {
        l.split("; ")
            .nth(1)?
            .strip_suffix(" live session(s) registered")?
            .parse::<usize>()
            .ok()
    });
    assert_eq!(
        resent,
        Some(16),
        "the reconnected intercept learns all 16 sessions:\n{}",
        tail(&log, 10)
    );

    lab.in_ns(Host::Client, move || {
        for (i, s) in conns.iter_mut().enumerate() {
            get(s, &format!("/index.html?after={i}"));
        }
    })
    .unwrap();
    c.test().wait_requests(32, Duration::from_secs(30));
    c.settle(Duration::from_secs(1), Duration::from_secs(20));
    let test = c.test().requests().unwrap();
    let count = |tag: &str| test.iter().filter(|e| e.uri.contains(tag)).count();
    assert_eq!(
        (count("?before="), count("?after=")),
        (16, 16),
        "{test:?}\n{}",
        tail(&c.copier.as_ref().unwrap().log(), 30)
    );
    c.check_alive().unwrap();
    c.assert_no_leak(&mut lab);
}
