//! The copier and the intercept over IPv6, end to end: real clients talk to nginx on `online`
//! at `[fd00:198:18:1::1]`; the copier (one `--map` per family) replays their sessions to the
//! test nginx at `[fd00:198:18:2::2]`; the intercept's ip6tables NFQUEUE rule keeps the answers
//! off the network. As in `copy_http.rs`, each test asserts from the two access logs that the
//! test server received exactly the online requests (per family, from the same client address)
//! and that no response left the test host toward a client.

use common::flow::FourTuple;
use common::wire::TcpFlags;
use lab::fake::{record_flags, record_info, FakeCopier, RawSender};
use lab::http::{get_request, HttpReader};
use lab::setup::{diff_fingerprints, fingerprints, tail, wait_log, CopyOptions, Copying};
use lab::setup::{metric_sum, scrape_metrics};
use lab::{addr, lab_or_skip, workspace_bin, Host, Lab, LogEntry, NginxOptions};
use std::io::Write;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpStream};
use std::time::{Duration, Instant};

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

fn url6(path: &str) -> String {
    format!("http://[{}]{path}", addr::ONLINE6)
}

fn url4(path: &str) -> String {
    format!("http://{}{path}", addr::ONLINE)
}

/// The requests of one family (by the client address nginx logged).
fn family(entries: &[LogEntry], v6: bool) -> Vec<LogEntry> {
    entries
        .iter()
        .filter(|e| e.remote_addr.contains(':') == v6)
        .cloned()
        .collect()
}

/// Waits for the test server to go quiet, then asserts, for each family on its own, that the
/// test server received exactly the online requests, from the real client's address; and that
/// nothing leaked. Returns the number of requests compared (IPv4, IPv6).
fn assert_copied_exactly(lab: &mut Lab, c: &Copying) -> (usize, usize) {
    assert_copied_exactly_but(lab, c, None)
}

/// [`assert_copied_exactly`], leaving out of the comparison the requests whose URI contains
/// `skip` (checked by the caller).
fn assert_copied_exactly_but(lab: &mut Lab, c: &Copying, skip: Option<&str>) -> (usize, usize) {
    c.settle(Duration::from_secs(2), Duration::from_secs(60));
    c.check_alive().unwrap();
    let keep = |e: &LogEntry| skip.is_none_or(|s| !e.uri.contains(s));
    let online: Vec<LogEntry> = c
        .online
        .requests()
        .unwrap()
        .into_iter()
        .filter(keep)
        .collect();
    let test: Vec<LogEntry> = c
        .test()
        .requests()
        .unwrap()
        .into_iter()
        .filter(keep)
        .collect();
    let mut counts = [0; 2];
    for (v6, client) in [
        (false, IpAddr::from(addr::CLIENT)),
        (true, IpAddr::from(addr::CLIENT6)),
    ] {
        let (o, t) = (family(&online, v6), family(&test, v6));
        let diff = diff_fingerprints(&fingerprints(&o), &fingerprints(&t));
        assert!(
            diff.is_empty(),
            "IPv{}: the test server did not receive exactly the online requests ({} online, {} test):\n{diff}\ncopier log:\n{}",
            if v6 { 6 } else { 4 },
            o.len(),
            t.len(),
            tail(&c.copier.as_ref().unwrap().log(), 30)
        );
        let want = client.to_string();
        assert!(
            o.iter().chain(&t).all(|e| e.remote_addr == want),
            "requests from another address than {want}"
        );
        counts[usize::from(v6)] = o.len();
    }
    assert_eq!(online.len(), counts[0] + counts[1]);
    let leaked = c.leaked(lab);
    let pcap = lab.stop_link_capture().expect("link capture");
    assert_eq!(
        leaked,
        0,
        "{leaked} response packets left the test host toward clients ({})",
        pcap.display()
    );
    if counts[1] > 0 {
        // the copies really went over IPv6, to the test server's IPv6 address
        let filter = format!(
            "ip6 and tcp dst port 80 and src host {} and dst host {}",
            addr::CLIENT6,
            addr::TEST6
        );
        let copies = Lab::count_packets(&pcap, &filter).unwrap();
        assert!(
            copies > 0,
            "no IPv6 copy seen on the test link ({})",
            pcap.display()
        );
    }
    (counts[0], counts[1])
}

#[test]
fn ipv6_short_http10_connections_and_keepalive() {
    let Some(mut lab) = lab_or_skip("ipv6_short_http10_connections_and_keepalive") else {
        return;
    };
    let c = Copying::start(&mut lab, copier_opts()).unwrap();
    // 30 short HTTP/1.0 connections, each its own session
    let script = format!(
        "for i in $(seq 1 30); do curl -6 -g -sS --http1.0 -o /dev/null '{}?n='$i || exit 1; done",
        url6("/index.html")
    );
    lab.sh(Host::Client, &script).unwrap();
    // keep-alive connections, request after answer
    assert_eq!(keepalive_conns(&lab, &[online6(); 2], 100), 200);
    // keep-alive HTTP/1.1 connections driven by wrk. wrk ends its run by resetting connections
    // with answers in flight, and a client's RST ends the copied session at once, with the
    // requests that the (paced, slower) copy had not sent yet: its requests arrive in part.
    lab.exec_ok(
        Host::Client,
        &["wrk", "-t1", "-c4", "-d2s", &url6("/index.html?wrk")],
    )
    .unwrap();
    let (n4, n6) = assert_copied_exactly_but(&mut lab, &c, Some("wrk"));
    assert_eq!((n4, n6), (0, 230));
    let is_wrk = |e: &LogEntry| e.uri.contains("wrk") && e.remote_addr == addr::CLIENT6.to_string();
    let online_wrk: Vec<LogEntry> = c
        .online
        .requests()
        .unwrap()
        .into_iter()
        .filter(is_wrk)
        .collect();
    let test_wrk: Vec<LogEntry> = c
        .test()
        .requests()
        .unwrap()
        .into_iter()
        .filter(is_wrk)
        .collect();
    let (o, t) = (online_wrk.len(), test_wrk.len());
    assert!(t > 100 && t <= o, "wrk: online {o}, test {t}");
    let wrk_request = online_wrk[0].fingerprint();
    assert!(
        online_wrk
            .iter()
            .chain(&test_wrk)
            .all(|e| e.fingerprint() == wrk_request),
        "altered wrk request"
    );
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert!(
        metric_sum(&m, "copier_sessions_started_total", &[]) >= 36.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_sessions_failed_total", &[]),
        0.0,
        "{m}"
    );
}

fn online6() -> SocketAddr {
    SocketAddr::V6(SocketAddrV6::new(addr::ONLINE6, 80, 0, 0))
}

fn online4() -> SocketAddr {
    SocketAddr::new(addr::ONLINE.into(), 80)
}

/// Keep-alive connections from `client`, one to each of `to`, all at once: `n` requests on
/// each, every request after the previous answer; each connection then closes gracefully (a
/// client that resets its connection ends the copied session with requests still queued in the
/// copier, which is not what these tests measure). Returns the number of answers read.
fn keepalive_conns(lab: &Lab, to: &[SocketAddr], n: usize) -> usize {
    let to = to.to_vec();
    lab.in_ns(Host::Client, move || {
        let conns: Vec<TcpStream> = to
            .iter()
            .map(|a| {
                let s = TcpStream::connect_timeout(a, Duration::from_secs(5)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                s
            })
            .collect();
        std::thread::scope(|sc| {
            let runs: Vec<_> = conns
                .into_iter()
                .enumerate()
                .map(|(c, mut s)| {
                    sc.spawn(move || {
                        let mut r = HttpReader::default();
                        for i in 0..n {
                            s.write_all(get_request(&format!("/index.html?ka={c}.{i}")).as_bytes())
                                .unwrap();
                            r.read_response(&mut s);
                        }
                        n
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).sum()
        })
    })
    .unwrap()
}

#[test]
fn ipv6_upload_of_1mb_with_offloads_on() {
    // offloads are on by default: the copier sees IPv6 super-segments and must cut them
    let Some(mut lab) = lab_or_skip("ipv6_upload_of_1mb_with_offloads_on") else {
        return;
    };
    let c = Copying::start(&mut lab, copier_opts()).unwrap();
    let f = lab.dir().join("upload-1m.bin");
    std::fs::write(&f, lab::pattern_bytes(1 << 20)).unwrap();
    let data = format!("@{}", f.display());
    let code = lab
        .exec_ok(
            Host::Client,
            &[
                "curl",
                "-6",
                "-g",
                "-sS",
                "--max-time",
                "30",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--data-binary",
                &data,
                &url6("/upload/1m"),
            ],
        )
        .unwrap();
    assert_eq!(code.trim(), "200");
    assert_eq!(assert_copied_exactly(&mut lab, &c), (0, 1));
    let test = c.test().requests().unwrap();
    assert_eq!(test[0].body.as_ref().map(|b| b.0), Some(1 << 20));
}

#[test]
fn ipv4_and_ipv6_at_once() {
    let Some(mut lab) = lab_or_skip("ipv4_and_ipv6_at_once") else {
        return;
    };
    let c = Copying::start(&mut lab, copier_opts()).unwrap();
    let f = lab.dir().join("upload.bin");
    std::fs::write(&f, lab::pattern_bytes(300_000)).unwrap();
    // short connections and an upload of each family, and keep-alive connections of both, all
    // at the same time
    let script = format!(
        "loop() {{ for i in $(seq 1 30); do curl $1 -g -sS --http1.0 -o /dev/null \"$2?n=$i\" || exit 1; done; \
                  curl $1 -g -sS -o /dev/null --data-binary @{f} \"$3\" || exit 1; }}
         loop -4 '{u4}' '{p4}' & a=$!
         loop -6 '{u6}' '{p6}' & b=$!
         wait $a && wait $b",
        f = f.display(),
        u4 = url4("/index.html"),
        u6 = url6("/index.html"),
        p4 = url4("/upload/v4"),
        p6 = url6("/upload/v6"),
    );
    std::thread::scope(|sc| {
        let short = sc.spawn(|| lab.sh(Host::Client, &script).unwrap());
        let ka = keepalive_conns(&lab, &[online4(), online6(), online4(), online6()], 100);
        short.join().unwrap();
        assert_eq!(ka, 400);
    });
    let (n4, n6) = assert_copied_exactly(&mut lab, &c);
    assert_eq!((n4, n6), (231, 231));
    let test = c.test().requests().unwrap();
    for v6 in [false, true] {
        let uploads = family(&test, v6)
            .iter()
            .filter(|e| e.uri.starts_with("/upload"))
            .count();
        assert_eq!(uploads, 1, "IPv{}: {test:?}", if v6 { 6 } else { 4 });
    }
}

/// The intercept alone over IPv6: the control connection is IPv6 (`--listen [TEST6]`), a fake
/// copier on `online` registers an IPv6 session from a fake client address and plays it with
/// raw segments; every answer of the test nginx must come back as a record (ip6tables NFQUEUE)
/// and none may leave the test host, while an allowed IPv6 address still gets its answers.
#[test]
fn intercept_over_ipv6_control_and_nfqueue() {
    let Some(mut lab) = lab_or_skip("intercept_over_ipv6_control_and_nfqueue") else {
        return;
    };
    let test = lab.nginx(Host::Test, NginxOptions::default()).unwrap();
    let secret = lab.dir().join("secret");
    lab::setup::write_secret(&secret).unwrap();
    let control = SocketAddr::V6(SocketAddrV6::new(addr::TEST6, 36524, 0, 0));
    let bin = workspace_bin("intercept").unwrap();
    let argv = [
        bin.to_str().unwrap(),
        "--port",
        "80",
        "--listen",
        &control.to_string(),
        "--secret-file",
        secret.to_str().unwrap(),
        "--allow",
        &addr::ONLINE_TO_TEST6.to_string(),
        "--install-rules",
    ];
    let icpt = lab.spawn(Host::Test, "intercept", &argv).unwrap();
    wait_log(&icpt, "listening for copiers", Duration::from_secs(10)).unwrap();
    let leaks = lab::leak::LeakCounter::install(&lab, Host::Test, &[80]).unwrap();

    let fake_client: Ipv6Addr = "fd00:198:19::5".parse().unwrap();
    let t = FourTuple {
        client: SocketAddr::V6(SocketAddrV6::new(fake_client, 40001, 0, 0)).into(),
        server: SocketAddr::V6(SocketAddrV6::new(addr::TEST6, 80, 0, 0)).into(),
    };
    let records = lab
        .in_ns(Host::Online, move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut cp = FakeCopier::connect(control, Some(b"lab-shared-secret")).await?;
                cp.register(&[t]).await?;
                let mut raw = RawSender::new()?;
                // the neighbour entry of the test host may take a moment: resend the SYN
                let deadline = Instant::now() + Duration::from_secs(5);
                let synack = loop {
                    raw.send(t, 1000, 0, TcpFlags::SYN, b"")?;
                    let got = cp
                        .wait_for(Duration::from_millis(500), |r| {
                            record_flags(r).contains(TcpFlags::SYN | TcpFlags::ACK)
                        })
                        .await;
                    match got {
                        Ok(r) => break r,
                        Err(e) if Instant::now() > deadline => return Err(e),
                        Err(_) => continue,
                    }
                };
                let p = record_info(&synack).expect("SYN-ACK record parses");
                assert_eq!(p.tuple, t, "SYN-ACK record for the wrong tuple");
                assert_eq!(p.ack, 1001, "SYN-ACK does not acknowledge our SYN");
                let req = b"GET /index.html?fake6 HTTP/1.0\r\n\r\n";
                raw.send(
                    t,
                    1001,
                    p.seq.wrapping_add(1),
                    TcpFlags::ACK | TcpFlags::PSH,
                    req,
                )?;
                let data = cp
                    .wait_for(Duration::from_secs(3), |r| {
                        record_info(r).is_some_and(|i| i.payload_len > 0)
                    })
                    .await?;
                assert_eq!(record_info(&data).unwrap().tuple, t);
                let fin = cp
                    .wait_for(Duration::from_secs(3), |r| {
                        record_flags(r).contains(TcpFlags::FIN)
                    })
                    .await?;
                // leave nothing half-open on the test server
                let fin_seq = record_info(&fin).unwrap().seq;
                raw.send(
                    t,
                    1001 + req.len() as u32,
                    fin_seq.wrapping_add(1),
                    TcpFlags::RST,
                    b"",
                )?;
                anyhow::Ok(cp.inbox.len())
            })
        })
        .unwrap()
        .unwrap();
    assert!(
        records >= 3,
        "expected SYN-ACK, data and FIN records, got {records}"
    );

    // an allowed IPv6 address talks to the test nginx normally
    let url = format!("http://[{}]/index.html?allowed", addr::TEST6);
    let page = lab
        .exec_ok(
            Host::Online,
            &["curl", "-6", "-g", "-sS", "--max-time", "5", &url],
        )
        .unwrap();
    assert!(page.contains("lab nginx"));

    let reqs = test.requests().unwrap();
    let who: Vec<(&str, &str)> = reqs
        .iter()
        .map(|e| (e.remote_addr.as_str(), e.uri.as_str()))
        .collect();
    let allowed = addr::ONLINE_TO_TEST6.to_string();
    assert_eq!(
        who,
        vec![
            ("fd00:198:19::5", "/index.html?fake6"),
            (allowed.as_str(), "/index.html?allowed")
        ]
    );

    let leaked = leaks.count(&lab).unwrap();
    let pcap = lab.stop_link_capture().unwrap();
    let answered = Lab::count_packets(
        &pcap,
        &format!("ip6 and tcp src port 80 and dst host {allowed}"),
    )
    .unwrap();
    assert_eq!(
        leaked, 0,
        "responses of the copied IPv6 session left the test host"
    );
    assert!(
        answered > 0,
        "the capture saw no allowed IPv6 response: it does not work"
    );
    assert!(
        icpt.exited().is_none(),
        "the intercept died:\n{}",
        icpt.log()
    );
}
