//! Amplification end to end: `copier --copies N` (3, and 100), `--client-ip` with two ranges,
//! and `--sample 50`. Real clients (wrk, curl, keep-alive connections of the test's own) talk to
//! nginx on `online`; from the two access logs each test asserts that the test nginx received N
//! times the online requests (at least 99.9% of them, none beyond N per request, every one
//! intact: method, URI, length, body hash) over N times the online connections, that copies
//! came from where they should (the pool; distinct tuples), and that no response left the test
//! host toward a client.

use lab::http::get;
use lab::setup::{fingerprints, tail, CopyOptions, Copying};
use lab::setup::{metric_sample, scrape_metrics};
use lab::{addr, ifname, lab_or_skip, Host, Lab, LogEntry, NginxOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::Duration;

const COPIER_METRICS: &str = "127.0.0.1:9467";

fn opts(extra: &[&str]) -> CopyOptions {
    let mut copier_args: Vec<String> = vec![
        "--metrics".into(),
        COPIER_METRICS.into(),
        "--seed".into(),
        "7".into(),
    ];
    copier_args.extend(extra.iter().map(|s| s.to_string()));
    CopyOptions {
        copier_args,
        ..CopyOptions::default()
    }
}

fn online_url(path: &str) -> String {
    format!("http://{}{path}", addr::ONLINE)
}

/// Waits for `n` times the online requests at the test server (then for quiet), and asserts:
/// at least 99.9% of them arrived, no request more than `n` times its online count, none that
/// was not made online, over at most `n` times the online connections (99.9% of them at least),
/// and nothing leaked. Returns the online and test log entries.
fn assert_amplified(lab: &mut Lab, c: &Copying, n: usize) -> (Vec<LogEntry>, Vec<LogEntry>) {
    let want = n * c.online.request_count();
    c.test().wait_requests(want, Duration::from_secs(180));
    c.settle(Duration::from_secs(2), Duration::from_secs(60));
    c.check_alive().unwrap();
    let online = c.online.requests().unwrap();
    let test = c.test().requests().unwrap();
    let (fo, ft) = (fingerprints(&online), fingerprints(&test));
    let log = || tail(&c.copier.as_ref().unwrap().log(), 30);
    for (k, &t) in &ft {
        let o = fo.get(k).copied().unwrap_or(0);
        assert!(
            t <= n * o,
            "{k}: {t} at the test server, {o} online x {n} copies\ncopier log:\n{}",
            log()
        );
    }
    let floor = (want as f64 * 0.999).ceil() as usize;
    assert!(
        test.len() >= floor,
        "{} requests at the test server, want {n} x {} = {want} (99.9%: {floor})\ncopier log:\n{}",
        test.len(),
        online.len(),
        log()
    );
    let conns = |v: &[LogEntry]| {
        v.iter()
            .map(|e| e.connection)
            .collect::<BTreeSet<_>>()
            .len()
    };
    let (co, ct) = (conns(&online), conns(&test));
    assert!(
        ct <= n * co && ct as f64 >= 0.999 * (n * co) as f64,
        "{ct} test connections for {co} online x {n}"
    );
    c.assert_no_leak(lab);
    (online, test)
}

/// `conns` keep-alive connections from the client to the online nginx, all open at once, each
/// with `reqs` requests `/index.html?<tag>=<connection>&r=<request>` (round robin over the
/// connections), then closed.
fn keepalive(lab: &Lab, conns: usize, reqs: usize, tag: &str) {
    let tag = tag.to_owned();
    lab.in_ns(Host::Client, move || {
        let to = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80));
        let mut ss: Vec<TcpStream> = (0..conns)
            .map(|_| {
                let s = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                s
            })
            .collect();
        for r in 0..reqs {
            for (i, s) in ss.iter_mut().enumerate() {
                get(s, &format!("/index.html?{tag}={i}&r={r}"));
            }
        }
    })
    .unwrap();
}

/// The value of `key=` in a URI's query.
fn query<'a>(uri: &'a str, key: &str) -> Option<&'a str> {
    uri.split(['?', '&'])
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

#[test]
fn three_copies_of_keepalive_and_short_connections() {
    let Some(mut lab) = lab_or_skip("three_copies_of_keepalive_and_short_connections") else {
        return;
    };
    let c = Copying::start(&mut lab, opts(&["--copies", "3"])).unwrap();
    // short HTTP/1.0 connections, each its own session, and wrk's keep-alive connections
    let script = format!(
        "for i in $(seq 1 30); do curl -sS --http1.0 -o /dev/null '{}?short='$i || exit 1; done",
        online_url("/index.html")
    );
    lab.sh(Host::Client, &script).unwrap();
    lab.exec_ok(
        Host::Client,
        &["wrk", "-t1", "-c4", "-d2s", &online_url("/index.html")],
    )
    .unwrap();
    let (online, test) = assert_amplified(&mut lab, &c, 3);
    assert!(
        online.len() > 1000,
        "a few thousand requests expected, got {}",
        online.len()
    );
    println!(
        "online {} requests, test {} ({:.4} x)",
        online.len(),
        test.len(),
        test.len() as f64 / online.len() as f64
    );
    // each short session three times, from three distinct client ports of the client's address
    for i in 1..=30 {
        let uri = format!("/index.html?short={i}");
        let from: BTreeSet<(String, u16)> = test
            .iter()
            .filter(|e| e.uri == uri)
            .map(|e| (e.remote_addr.clone(), e.remote_port))
            .collect();
        assert_eq!(from.len(), 3, "{uri}: {from:?}");
        assert!(
            from.iter().all(|(a, _)| *a == addr::CLIENT.to_string()),
            "{from:?}"
        );
    }
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert_eq!(metric_sample(&m, "copier_copies_requested"), 3.0, "{m}");
    assert_eq!(metric_sample(&m, "copier_copy_multiplier"), 3.0, "{m}");
    assert_eq!(
        metric_sample(&m, "copier_sessions_no_tuple_total"),
        0.0,
        "{m}"
    );
    // 30 curl and 4 wrk connections (wrk may open one more to try the server first)
    let captured = metric_sample(&m, "copier_captured_sessions_started_total");
    assert!((34.0..=36.0).contains(&captured), "{m}");
    assert_eq!(
        metric_sample(&m, "copier_sessions_started_total"),
        3.0 * captured,
        "{m}"
    );
}

#[test]
fn a_hundred_copies() {
    let Some(mut lab) = lab_or_skip("a_hundred_copies") else {
        return;
    };
    let mut o = opts(&["--copies", "100"]);
    // 100 x the connections at once: a second worker process for the test nginx
    o.test = Some(NginxOptions {
        workers: 2,
        ..NginxOptions::default()
    });
    let c = Copying::start(&mut lab, o).unwrap();
    keepalive(&lab, 8, 10, "ka");
    let script = format!(
        "for i in $(seq 1 6); do curl -sS --http1.0 -o /dev/null '{}?short='$i || exit 1; done",
        online_url("/index.html")
    );
    lab.sh(Host::Client, &script).unwrap();
    let started = std::time::Instant::now();
    let (online, test) = assert_amplified(&mut lab, &c, 100);
    assert_eq!(online.len(), 86);
    println!(
        "online {} requests on 14 connections; test {} requests on {} connections in {:?}",
        online.len(),
        test.len(),
        test.iter()
            .map(|e| e.connection)
            .collect::<BTreeSet<_>>()
            .len(),
        started.elapsed()
    );
    // each keep-alive connection's requests, in order, on each of its 100 copies
    let mut per_conn: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for e in &test {
        per_conn
            .entry(e.connection)
            .or_default()
            .push(e.uri.clone());
    }
    for k in 0..8 {
        let want: Vec<String> = (0..10)
            .map(|r| format!("/index.html?ka={k}&r={r}"))
            .collect();
        let copies = per_conn
            .values()
            .filter(|v| v.first() == Some(&want[0]))
            .collect::<Vec<_>>();
        assert!(
            copies.len() >= 99,
            "connection {k}: {} copies",
            copies.len()
        );
        assert!(
            copies.iter().all(|v| **v == want),
            "connection {k}: a copy out of order or short"
        );
    }
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert_eq!(metric_sample(&m, "copier_copies_requested"), 100.0, "{m}");
    assert_eq!(metric_sample(&m, "copier_copy_multiplier"), 100.0, "{m}");
    assert_eq!(
        metric_sample(&m, "copier_sessions_started_total"),
        1400.0,
        "{m}"
    );
}

#[test]
fn copies_from_a_pool_of_two_ranges() {
    let Some(mut lab) = lab_or_skip("copies_from_a_pool_of_two_ranges") else {
        return;
    };
    let ranges = ["198.19.0.0/24", "198.19.1.0/24"];
    let mut o = opts(&["--copies", "3", "--client-ip", &ranges.join(",")]);
    o.ipv6 = false; // an IPv4-only pool: every map must have its family
    let c = Copying::start(&mut lab, o).unwrap();
    // 24 real client addresses, two short sessions each
    let clients: Vec<Ipv4Addr> = (0..24)
        .map(|i| Ipv4Addr::new(198, 18, 1, 100 + i))
        .collect();
    for a in &clients {
        lab.exec_ok(
            Host::Client,
            &[
                "ip",
                "addr",
                "add",
                &format!("{a}/24"),
                "dev",
                ifname::CLIENT_TO_ONLINE,
            ],
        )
        .unwrap();
    }
    let mut script = String::new();
    for (i, a) in clients.iter().enumerate() {
        for n in 0..2 {
            script.push_str(&format!(
                "curl -sS --http1.0 --interface {a} -o /dev/null '{}?c={i}&n={n}' || exit 1\n",
                online_url("/index.html")
            ));
        }
    }
    lab.sh(Host::Client, &script).unwrap();
    let (online, test) = assert_amplified(&mut lab, &c, 3);
    assert_eq!(online.len(), 48);
    let online_from: BTreeSet<&str> = online.iter().map(|e| e.remote_addr.as_str()).collect();
    assert_eq!(online_from.len(), 24);
    let in_pool = |a: &str| {
        let ip: IpAddr = a.parse().unwrap();
        matches!(ip, IpAddr::V4(v) if v.octets()[..2] == [198, 19] && v.octets()[2] < 2)
    };
    let at_test: BTreeSet<&str> = test.iter().map(|e| e.remote_addr.as_str()).collect();
    assert!(
        at_test.iter().all(|a| in_pool(a)),
        "addresses outside {ranges:?}: {at_test:?}"
    );
    let third: BTreeSet<&str> = at_test
        .iter()
        .map(|a| a.rsplit_once('.').unwrap().0)
        .collect();
    assert_eq!(
        third,
        ["198.19.0", "198.19.1"].into(),
        "both ranges used: {at_test:?}"
    );
    // each real client: three addresses (one per copy), the same for both of its sessions
    for i in 0..24 {
        let mut per_session = Vec::new();
        for n in 0..2 {
            let uri = format!("/index.html?c={i}&n={n}");
            let from: BTreeSet<&str> = test
                .iter()
                .filter(|e| e.uri == uri)
                .map(|e| e.remote_addr.as_str())
                .collect();
            assert_eq!(from.len(), 3, "{uri}: {from:?}");
            per_session.push(from);
        }
        assert_eq!(
            per_session[0], per_session[1],
            "client {i}: sticky addresses"
        );
    }
    println!(
        "{} distinct pool addresses for 24 clients x 3 copies",
        at_test.len()
    );
}

#[test]
fn half_the_sessions_sampled_each_whole() {
    let Some(mut lab) = lab_or_skip("half_the_sessions_sampled_each_whole") else {
        return;
    };
    let c = Copying::start(&mut lab, opts(&["--sample", "50"])).unwrap();
    const SESSIONS: usize = 400;
    keepalive(&lab, SESSIONS, 3, "s");
    c.settle(Duration::from_secs(3), Duration::from_secs(60));
    c.check_alive().unwrap();
    let online = c.online.requests().unwrap();
    let test = c.test().requests().unwrap();
    assert_eq!(online.len(), 3 * SESSIONS);
    let fo = fingerprints(&online);
    let mut per_session: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &test {
        assert!(fo.contains_key(&e.fingerprint()), "altered request {e:?}");
        *per_session.entry(query(&e.uri, "s").unwrap()).or_default() += 1;
    }
    // a session is copied whole or not at all
    assert!(
        per_session.values().all(|&n| n == 3),
        "{:?}",
        per_session
            .iter()
            .filter(|(_, &n)| n != 3)
            .collect::<Vec<_>>()
    );
    // 400 fair draws: mean 200, standard deviation 10. 45 either way (4.5 sd) fails a correct
    // sampler about once in 150 000 runs, and catches a rule that picks, say, 40% or 60%.
    let chosen = per_session.len();
    println!("--sample 50: {chosen} of {SESSIONS} sessions copied");
    assert!(
        (155..=245).contains(&chosen),
        "{chosen} of {SESSIONS} sessions copied at --sample 50"
    );
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    let out = metric_sample(&m, "copier_sessions_sampled_out_total");
    let started = metric_sample(&m, "copier_captured_sessions_started_total");
    assert_eq!(
        (started, out),
        (chosen as f64, (SESSIONS - chosen) as f64),
        "{m}"
    );
    assert!(
        metric_sample(&m, "copier_packets_dropped_total{reason=\"not_sampled\"}") >= 5.0 * out,
        "{m}"
    );
    c.assert_no_leak(&mut lab);
}
