//! Several test servers behind one map (`--map 80=TEST:80@3,TEST2:80@1`), each test host with
//! its own intercept: the sessions spread 3:1; a server stopped mid-run is taken out after
//! `--target-down-after` and its new sessions go to the other one (none of whose sessions is
//! lost); restarted, it is back in and gets its share again.
//!
//! Topology: `online` reaches `test2` through `test`, which forwards (the lab's `test2` link);
//! the copier's registrations for `test2`'s sessions go to `test2`'s intercept only (it listens
//! on the server's own address).

use lab::setup::{metric_sum, tail, wait_log, wait_log_count, CopyOptions, Copying, CONTROL_PORT};
use lab::{addr, ifname, lab_or_skip, workspace_bin, Host, Lab, LogEntry, Nginx, NginxOptions, Proc};
use std::time::{Duration, Instant};

const METRICS: &str = "127.0.0.1:9476";

/// `n` sessions from the client, one request each (a new connection per request), tagged
/// `tag` and numbered from `from`; `gap` seconds between them.
fn sessions(lab: &Lab, tag: &str, from: usize, n: usize, gap: f64) {
    let script = format!(
        "for i in $(seq {from} {}); do curl -sS --http1.0 --max-time 5 -o /dev/null 'http://{}/index.html?{tag}='$i || exit 1; sleep {gap}; done",
        from + n - 1,
        addr::ONLINE
    );
    lab.sh(Host::Client, &script).unwrap();
}

fn tagged(reqs: &[LogEntry], tag: &str) -> Vec<usize> {
    let prefix = format!("/index.html?{tag}=");
    let mut v: Vec<usize> = reqs.iter().filter_map(|r| r.uri.strip_prefix(&prefix)?.parse().ok()).collect();
    v.sort_unstable();
    v
}

fn count(n: &Nginx, tag: &str) -> usize {
    tagged(&n.requests().unwrap(), tag).len()
}

fn metrics(lab: &Lab) -> String {
    lab.exec_ok(Host::Online, &["curl", "-sS", "--max-time", "3", &format!("http://{METRICS}/metrics")]).unwrap_or_default()
}

fn target_metric(text: &str, name: &str) -> f64 {
    metric_sum(text, name, &[&format!("target=\"{}:80\"", addr::TEST2)])
}

/// Sessions a few at a time until `needle` is in the copier's log (at most `limit`); returns
/// how many were sent.
fn sessions_until(lab: &Lab, copier: &Proc, tag: &str, needle: &str, limit: Duration) -> usize {
    let start = Instant::now();
    let mut n = 0;
    while !copier.log().contains(needle) {
        assert!(start.elapsed() < limit, "no {needle:?} in the copier log within {limit:?}:\n{}", tail(&copier.log(), 30));
        sessions(lab, tag, n, 3, 0.1);
        n += 3;
    }
    n
}

fn stop_nginx(lab: &Lab, n: &Nginx) {
    let pid = n.access_log().with_file_name("nginx.pid");
    lab.sh(Host::Test2, &format!("kill -TERM $(cat {}); while [ -e {} ]; do sleep 0.05; done", pid.display(), pid.display()))
        .unwrap();
}

#[test]
fn two_test_servers_share_three_to_one_and_a_stopped_one_is_taken_out_and_rejoins() {
    let Some(mut lab) = lab_or_skip("two_test_servers_share_three_to_one_and_a_stopped_one_is_taken_out_and_rejoins") else {
        return;
    };
    let c = Copying::start(&mut lab, CopyOptions { ipv6: false, start_copier: false, ..CopyOptions::default() }).unwrap();
    let test2 = lab.nginx(Host::Test2, NginxOptions::default()).unwrap();
    let leaks2 = lab::leak::LeakCounter::install(&lab, Host::Test2, &[80]).unwrap();
    // online reaches test2 through test.
    lab.exec_ok(Host::Online, &["ip", "route", "add", "198.18.3.0/24", "via", &addr::TEST.to_string()]).unwrap();
    lab.exec_ok(Host::Test, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]).unwrap();

    let secret = lab.dir().join("secret").to_string_lossy().into_owned();
    let intercept = workspace_bin("intercept").unwrap().to_string_lossy().into_owned();
    let copier = workspace_bin("copier").unwrap().to_string_lossy().into_owned();
    let listen2 = format!("{}:{CONTROL_PORT}", addr::TEST2);
    let icpt2 = lab
        .spawn(
            Host::Test2,
            "intercept-test2",
            &["env", "RUST_LOG=info", &intercept, "--port", "80", "--listen", &listen2, "--secret-file", &secret,
              "--install-rules", "--ipv4-only"],
        )
        .unwrap();
    wait_log(&icpt2, "listening for copiers", Duration::from_secs(10)).unwrap();
    let map = format!("80={}:80@3,{}:80@1", addr::TEST, addr::TEST2);
    let listen1 = format!("{}:{CONTROL_PORT}", addr::TEST);
    let cop = lab
        .spawn(
            Host::Online,
            "copier",
            &["env", "RUST_LOG=info", &copier, "--map", &map, "--intercept", &listen1, "--intercept", &listen2,
              "--secret-file", &secret, "--interface", ifname::ONLINE_TO_CLIENT, "--metrics", METRICS, "--seed", "5",
              "--target-down-after", "2s", "--target-retry", "3s"],
        )
        .unwrap();
    wait_log_count(&cop, "connected to intercept", 2, Duration::from_secs(10)).unwrap();
    assert!(cop.log().contains(&format!("intercept {listen2} guards test server(s) {}", addr::TEST2)), "{}", cop.log());

    // 1. 200 sessions spread 3:1 (within 3 points), none lost.
    sessions(&lab, "p1", 0, 200, 0.0);
    c.test().wait_requests(150, Duration::from_secs(20));
    test2.wait_requests(50, Duration::from_secs(20));
    c.settle(Duration::from_secs(1), Duration::from_secs(10));
    let (n1, n2) = (count(c.test(), "p1"), count(&test2, "p1"));
    assert_eq!(n1 + n2, 200, "sessions lost: test {n1}, test2 {n2}\n{}", tail(&cop.log(), 30));
    let share2 = n2 as f64 / 200.0;
    assert!((share2 - 0.25).abs() <= 0.03, "test2 got {n2} of 200 sessions ({share2:.3}), not 25% +- 3 points");
    // each intercept guarded its own server's sessions only
    assert!(!icpt2.log().contains("refused"), "{}", tail(&icpt2.log(), 20));

    // 2. test2 stops: taken out 2 s after its first unanswered copy.
    stop_nginx(&lab, &test2);
    let stopped = Instant::now();
    let down = format!("test server {}:80 taken out", addr::TEST2);
    sessions_until(&lab, &cop, "p2a", &down, Duration::from_secs(20));
    assert!(stopped.elapsed() >= Duration::from_secs(2), "taken out before --target-down-after");
    std::thread::sleep(Duration::from_millis(1200)); // the metrics are published about once a second
    let before = metrics(&lab);
    // From now on: no new session goes to test2 but the probes, and test gets every other one.
    let t_b = Instant::now();
    sessions(&lab, "p2b", 0, 60, 0.1);
    let took = t_b.elapsed();
    c.settle(Duration::from_secs(1), Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(1200));
    let after = metrics(&lab);
    let started = target_metric(&after, "copier_target_sessions_total") - target_metric(&before, "copier_target_sessions_total");
    let probes = target_metric(&after, "copier_target_probes_total") - target_metric(&before, "copier_target_probes_total");
    assert_eq!(started, probes, "sessions went to the stopped test2 besides its probes:\n{after}");
    let most_probes = (took.as_secs_f64() / 3.0).ceil() + 1.0;
    assert!(probes <= most_probes, "{probes} probes in {took:?} with --target-retry 3s");
    let got = tagged(&c.test().requests().unwrap(), "p2b");
    assert!(60.0 - got.len() as f64 <= probes, "test got {} of the 60 sessions sent while test2 was out ({probes} probes)", got.len());
    assert_eq!(target_metric(&after, "copier_target_up"), 0.0, "{after}");

    // 3. test2 back: it answers a probe, is back in, and gets its share again.
    let test2 = lab.nginx(Host::Test2, NginxOptions::default()).unwrap();
    let up = format!("test server {}:80 answers again", addr::TEST2);
    sessions_until(&lab, &cop, "p3a", &up, Duration::from_secs(15));
    sessions(&lab, "p3", 0, 100, 0.0);
    c.settle(Duration::from_secs(1), Duration::from_secs(10));
    let (m1, m2) = (count(c.test(), "p3"), count(&test2, "p3"));
    assert_eq!(m1 + m2, 100, "sessions lost after the rejoin: test {m1}, test2 {m2}\n{}", tail(&cop.log(), 30));
    assert!((15..=35).contains(&m2), "test2 got {m2} of 100 sessions after rejoining");

    eprintln!(
        "spread: 3:1 -> test {n1} / test2 {n2} of 200; test2 out after {:?} of silence, then {} of 60 sessions on test, \
         {probes} probe(s) to test2 in {took:?}; after the rejoin test {m1} / test2 {m2} of 100",
        Duration::from_secs(2),
        got.len()
    );
    assert!(cop.exited().is_none(), "the copier died:\n{}", tail(&cop.log(), 30));
    assert_eq!(leaks2.count(&lab).unwrap(), 0, "test2 leaked responses");
    c.assert_no_leak(&mut lab);
}
