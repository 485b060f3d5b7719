//! The copier end to end: real clients (curl, wrk, a raw HTTP client) talk to nginx on `online`;
//! the copier replays their sessions to nginx on `test`; the intercept keeps the test server's
//! answers off the network. Each test asserts, from the two access logs, that exactly the requests
//! the clients made arrived at the test server (method, URI, request length and body hash), and
//! that no response left the test host toward a client.

use lab::http::{get_request, HttpReader};
use lab::setup::{metric_sum, scrape_metrics};
use lab::setup::{tail, CopyOptions, Copying};
use lab::{addr, lab_or_skip, lab_or_skip_with, Host, Lab, LabOptions, NginxOptions};
use std::io::Write;
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::time::Duration;

const COPIER_METRICS: &str = "127.0.0.1:9465";

fn copier_opts() -> CopyOptions {
    CopyOptions {
        copier_args: vec![
            "--metrics".into(),
            COPIER_METRICS.into(),
            "--seed".into(),
            "7".into(),
        ],
        ..CopyOptions::default()
    }
}

fn online_url(path: &str) -> String {
    format!("http://{}{path}", addr::ONLINE)
}

fn curl(lab: &Lab, args: &[&str]) -> String {
    let mut argv = vec![
        "curl",
        "-sS",
        "--max-time",
        "30",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}\n",
    ];
    argv.extend_from_slice(args);
    lab.exec_ok(Host::Client, &argv).unwrap()
}

/// Sends raw HTTP requests on one connection from `client`: all at once (`pipelined`) or each
/// after the previous answer. Returns the number of responses read.
fn http_conn(lab: &Lab, requests: &[String], pipelined: bool) -> usize {
    let reqs = requests.to_vec();
    lab.in_ns(Host::Client, move || {
        let to = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80));
        let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut reader = HttpReader::default();
        if pipelined {
            let all: String = reqs.concat();
            s.write_all(all.as_bytes()).unwrap();
            (0..reqs.len()).for_each(|_| reader.read_response(&mut s));
        } else {
            for r in &reqs {
                s.write_all(r.as_bytes()).unwrap();
                reader.read_response(&mut s);
            }
        }
        reqs.len()
    })
    .unwrap()
}

#[test]
fn short_http10_connections_and_keepalive_wrk() {
    let Some(mut lab) = lab_or_skip("short_http10_connections_and_keepalive_wrk") else {
        return;
    };
    let c = Copying::start(&mut lab, copier_opts()).unwrap();
    // 40 short HTTP/1.0 connections, each its own session
    let script = format!(
        "for i in $(seq 1 40); do curl -sS --http1.0 -o /dev/null {}?n=$i || exit 1; done",
        online_url("/index.html")
    );
    lab.sh(Host::Client, &script).unwrap();
    // keep-alive HTTP/1.1 connections driven by wrk
    lab.exec_ok(
        Host::Client,
        &["wrk", "-t1", "-c4", "-d2s", &online_url("/index.html")],
    )
    .unwrap();
    let n = c.assert_copied_exactly(&mut lab);
    assert!(n > 100, "too few requests to mean anything: {n}");
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert!(
        metric_sum(&m, "copier_sessions_started_total", &[]) >= 44.0,
        "{m}"
    );
}

#[test]
fn full_speed_keepalive_runs_requests_ahead_of_the_answers() {
    // wrk at full speed on 16 keep-alive connections: each connection's next request is
    // captured before the copy of the one before is answered, so adaptive pacing (the
    // default) sends requests ahead of the answers; the test server still gets exactly the
    // online requests, and every request's replay lag is counted once.
    let Some(mut lab) = lab_or_skip("full_speed_keepalive_runs_requests_ahead_of_the_answers")
    else {
        return;
    };
    let c = Copying::start(&mut lab, copier_opts()).unwrap();
    lab.exec_ok(
        Host::Client,
        &["wrk", "-t2", "-c16", "-d3s", &online_url("/index.html")],
    )
    .unwrap();
    let n = c.assert_copied_exactly(&mut lab);
    assert!(n > 3000, "too few requests to mean anything: {n}");
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    let ahead = metric_sum(&m, "copier_units_ahead_total", &[]);
    assert!(ahead > 0.0, "no request went ahead of an answer:\n{m}");
    assert_eq!(
        metric_sum(&m, "copier_units_sent_total", &[]),
        n as f64,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_replay_lag_seconds_count", &[]),
        n as f64,
        "{m}"
    );
    println!("{n} requests, {ahead} sent ahead of an answer");
}

#[test]
fn pipelined_requests() {
    let Some(mut lab) = lab_or_skip("pipelined_requests") else {
        return;
    };
    let c = Copying::start(&mut lab, copier_opts()).unwrap();
    let reqs: Vec<String> = (0..20)
        .map(|i| get_request(&format!("/index.html?pipelined={i}")))
        .collect();
    assert_eq!(http_conn(&lab, &reqs, true), 20);
    let reqs: Vec<String> = (0..10)
        .map(|i| get_request(&format!("/index.html?sequential={i}")))
        .collect();
    assert_eq!(http_conn(&lab, &reqs, false), 10);
    assert_eq!(c.assert_copied_exactly(&mut lab), 30);
}

#[test]
fn uploads_of_1mb_and_10mb_with_offloads_on() {
    // offloads are on by default: the copier sees 64 KB super-segments and must cut them
    let Some(mut lab) = lab_or_skip("uploads_of_1mb_and_10mb_with_offloads_on") else {
        return;
    };
    let c = Copying::start(&mut lab, copier_opts()).unwrap();
    for (name, size) in [("1m", 1 << 20), ("10m", 10 << 20)] {
        let f = lab.dir().join(format!("upload-{name}.bin"));
        std::fs::write(&f, lab::pattern_bytes(size)).unwrap();
        let code = curl(
            &lab,
            &[
                "--data-binary",
                &format!("@{}", f.display()),
                &online_url(&format!("/upload/{name}")),
            ],
        );
        assert_eq!(code.trim(), "200");
    }
    assert_eq!(c.assert_copied_exactly(&mut lab), 2);
    let test = c.test().requests().unwrap();
    let sizes: Vec<u64> = test
        .iter()
        .filter_map(|e| e.body.as_ref().map(|b| b.0))
        .collect();
    assert_eq!(sizes, vec![1 << 20, 10 << 20]);
}

#[test]
fn responses_of_different_sizes_online_and_on_test() {
    let Some(mut lab) = lab_or_skip("responses_of_different_sizes_online_and_on_test") else {
        return;
    };
    let mut opts = copier_opts();
    // /a is tiny online and 10 MB on test; /b the other way round
    opts.online.files = vec![("a".into(), 100), ("b".into(), 10 << 20)];
    opts.test = Some(NginxOptions {
        files: vec![("a".into(), 10 << 20), ("b".into(), 100)],
        ..NginxOptions::default()
    });
    let c = Copying::start(&mut lab, opts).unwrap();
    // one keep-alive connection: the session must carry on after each mismatch
    let reqs = vec![
        get_request("/a"),
        get_request("/b"),
        get_request("/a?again"),
        get_request("/index.html"),
    ];
    http_conn(&lab, &reqs, false);
    c.assert_copied_exactly(&mut lab);
    let test = c.test().requests().unwrap();
    let big: Vec<u64> = test.iter().map(|e| e.body_bytes_sent).collect();
    assert_eq!(
        big[0],
        10 << 20,
        "the test server should have sent its 10 MB answer in full: {test:?}"
    );
}

/// One keep-alive connection from `client` to the online nginx, on its own thread: `n` requests
/// `/index.html?{tag}={i}` of `before`, then (once `go` says so) those of `after`, each after a
/// `pause`, every answer read whole. Join the handle to know they are done (it fails the test
/// if the connection broke, or within 10 s of a missing answer).
fn keepalive_across(
    lab: &Lab,
    before: (&'static str, usize),
    go: std::sync::mpsc::Receiver<()>,
    after: (&'static str, usize),
    pause: Duration,
) -> std::thread::JoinHandle<()> {
    let ns = lab.ns(Host::Client);
    std::thread::spawn(move || {
        let f = std::fs::File::open(format!("/var/run/netns/{ns}")).unwrap();
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let to = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80));
        let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut r = HttpReader::default();
        for (i, (tag, n)) in [before, after].into_iter().enumerate() {
            if i == 1 {
                go.recv().unwrap();
            }
            for k in 0..n {
                s.write_all(get_request(&format!("/index.html?{tag}={k}")).as_bytes())
                    .unwrap();
                r.read_response(&mut s);
                if i == 1 {
                    std::thread::sleep(pause);
                }
            }
        }
    })
}

#[test]
fn copying_starts_in_the_middle_of_keepalive_connections() {
    let Some(mut lab) = lab_or_skip("copying_starts_in_the_middle_of_keepalive_connections") else {
        return;
    };
    let mut opts = copier_opts();
    opts.start_copier = false;
    let mut c = Copying::start(&mut lab, opts).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    // a long keep-alive connection: 3 requests before the copier starts, 8 after
    let client = keepalive_across(
        &lab,
        ("before", 3),
        rx,
        ("after", 8),
        Duration::from_millis(50),
    );
    std::thread::sleep(Duration::from_millis(300));
    c.start_copier(&mut lab).unwrap();
    tx.send(()).unwrap();
    client.join().unwrap();
    c.settle(Duration::from_secs(2), Duration::from_secs(30));
    let test = c.test().requests().unwrap();
    let uris: Vec<&str> = test.iter().map(|e| e.uri.as_str()).collect();
    // nothing from before the copier started, and every request after the first request boundary
    assert!(uris.iter().all(|u| u.contains("after=")), "{uris:?}");
    for i in 1..8 {
        let want = format!("/index.html?after={i}");
        assert!(uris.contains(&want.as_str()), "missing {want}: {uris:?}");
    }
    // every request that arrived is whole (same length as online)
    let online: Vec<_> = c.online.requests().unwrap();
    for e in &test {
        assert!(
            online.iter().any(|o| o.fingerprint() == e.fingerprint()),
            "partial or altered request {e:?}"
        );
    }
    c.assert_no_leak(&mut lab);
}

#[test]
fn test_server_closing_with_requests_queued() {
    let Some(mut lab) = lab_or_skip("test_server_closing_with_requests_queued") else {
        return;
    };
    let mut opts = copier_opts();
    // online serves all 9 requests on one connection; the test server closes after every 2
    opts.test = Some(NginxOptions {
        keepalive_requests: 2,
        ..NginxOptions::default()
    });
    let c = Copying::start(&mut lab, opts).unwrap();
    let reqs: Vec<String> = (0..9)
        .map(|i| get_request(&format!("/index.html?q={i}")))
        .collect();
    http_conn(&lab, &reqs, false);
    c.assert_copied_exactly(&mut lab);
    let test = c.test().requests().unwrap();
    let conns: std::collections::BTreeSet<u64> = test.iter().map(|e| e.connection).collect();
    assert!(
        conns.len() >= 5,
        "the requests should have been carried over >= 5 connections: {test:?}"
    );
}

#[test]
fn test_server_down_copier_survives() {
    let Some(mut lab) = lab_or_skip("test_server_down_copier_survives") else {
        return;
    };
    let mut opts = copier_opts();
    opts.test = None;
    let c = Copying::start(&mut lab, opts).unwrap();
    let script = format!(
        "for i in $(seq 1 10); do curl -sS -o /dev/null {} || exit 1; done",
        online_url("/")
    );
    lab.sh(Host::Client, &script).unwrap();
    // nginx logs a request after its answer is sent: the client can finish first
    assert_eq!(c.online.wait_requests(10, Duration::from_secs(5)), 10);
    lab::setup::wait_metric(
        &lab,
        Host::Online,
        COPIER_METRICS,
        "copier_sessions_failed_total",
        &[],
        1.0,
        Duration::from_secs(30),
    )
    .expect("refused sessions should be counted as failed");
    c.check_alive().unwrap();
    c.assert_no_leak(&mut lab);
}

#[test]
fn loss_on_the_copier_to_test_link() {
    let Some(mut lab) = lab_or_skip("loss_on_the_copier_to_test_link") else {
        return;
    };
    let c = Copying::start(&mut lab, copier_opts()).unwrap();
    // 5% of what the copier sends toward the test server is lost
    lab.exec_ok(
        Host::Test,
        &[
            "iptables",
            "-I",
            "INPUT",
            "-p",
            "tcp",
            "--dport",
            "80",
            "-s",
            addr::CLIENT_NET,
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            "0.05",
            "-j",
            "DROP",
        ],
    )
    .unwrap();
    let script = format!(
        "for i in $(seq 1 30); do curl -sS -o /dev/null {}?n=$i || exit 1; done",
        online_url("/index.html")
    );
    lab.sh(Host::Client, &script).unwrap();
    let reqs: Vec<String> = (0..30)
        .map(|i| get_request(&format!("/index.html?ka={i}")))
        .collect();
    http_conn(&lab, &reqs, false);
    let f = lab.dir().join("upload.bin");
    std::fs::write(&f, lab::pattern_bytes(2 << 20)).unwrap();
    curl(
        &lab,
        &[
            "--data-binary",
            &format!("@{}", f.display()),
            &online_url("/upload/lossy"),
        ],
    );
    assert_eq!(c.assert_copied_exactly(&mut lab), 61);
}

#[test]
fn intercept_restarted_during_a_run() {
    let Some(mut lab) = lab_or_skip_with("intercept_restarted_during_a_run", LabOptions::default())
    else {
        return;
    };
    let mut c = Copying::start(&mut lab, copier_opts()).unwrap();
    let run = |lab: &Lab, tag: &str| {
        let script = format!(
            "for i in $(seq 1 10); do curl -sS -o /dev/null '{}?{tag}='$i || exit 1; done",
            online_url("/index.html")
        );
        lab.sh(Host::Client, &script).unwrap();
    };
    // a keep-alive connection that stays open across the restart
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let client = keepalive_across(
        &lab,
        ("open-before", 3),
        go_rx,
        ("open-after", 3),
        Duration::ZERO,
    );
    run(&lab, "before");
    c.settle(Duration::from_secs(1), Duration::from_secs(20));
    c.restart_intercept(&mut lab).unwrap();
    // the copier reconnects on its own (its back-off decides when): wait for its second link
    lab::setup::wait_log_count(
        c.copier.as_ref().unwrap(),
        "connected to intercept",
        2,
        Duration::from_secs(30),
    )
    .unwrap();
    go_tx.send(()).unwrap();
    client.join().unwrap();
    run(&lab, "after");
    c.settle(Duration::from_secs(2), Duration::from_secs(30));
    let test = c.test().requests().unwrap();
    let count = |tag: &str| test.iter().filter(|e| e.uri.contains(tag)).count();
    assert_eq!(
        (
            count("?before="),
            count("?after="),
            count("open-before="),
            count("open-after=")
        ),
        (10, 10, 3, 3),
        "{test:?}\n{}",
        tail(&c.copier.as_ref().unwrap().log(), 30)
    );
    // the restarted intercept found the rules its predecessor left for the open session
    let log = c.intercept.log();
    assert!(log.contains("adopted existing firewall rule"), "{log}");
    c.check_alive().unwrap();
    c.assert_no_leak(&mut lab);
}

#[test]
fn ended_sessions_leave_the_intercept_while_the_copier_runs() {
    // Unregisters of ended sessions may wait (run::UNREGISTER_WAIT) for a Register to ride
    // with; with no new session coming they must still reach the intercept, not only at exit.
    let Some(mut lab) = lab_or_skip("ended_sessions_leave_the_intercept_while_the_copier_runs")
    else {
        return;
    };
    let intercept_metrics = format!("{}:9101", addr::TEST);
    let opts = CopyOptions {
        intercept_args: vec!["--metrics".into(), intercept_metrics.clone()],
        ..copier_opts()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    let script = format!(
        "for i in $(seq 1 20); do curl -sS --http1.0 -o /dev/null {}?n=$i || exit 1; done",
        online_url("/index.html")
    );
    lab.sh(Host::Client, &script).unwrap();
    let n = c.assert_copied_exactly(&mut lab);
    assert_eq!(n, 20);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let text = loop {
        let text = lab
            .exec_ok(
                Host::Test,
                &[
                    "curl",
                    "-sS",
                    "--max-time",
                    "3",
                    &format!("http://{intercept_metrics}/metrics"),
                ],
            )
            .unwrap_or_default();
        let answered = metric_sum(&text, "intercept_records_sent_total", &[]);
        if answered > 0.0 && lab::setup::metric_sample(&text, "intercept_registrations") == 0.0 {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the intercept still holds registrations:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(text.contains("intercept_registrations 0"), "{text}");
    c.check_alive().unwrap();
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert_eq!(
        lab::setup::metric_sample(&m, "copier_registered_sessions"),
        0.0,
        "{m}"
    );
}
