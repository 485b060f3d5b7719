//! Several test servers behind one map (`--map 80=TEST:80@3,TEST2:80@1`), each test host with
//! its own intercept: the sessions spread 3:1; a server stopped mid-run is taken out after
//! `--target-down-after` and its new sessions go to the other one (none of whose sessions is
//! lost); restarted, it is back in and gets its share again. Slow (`--target-slow-after`) and
//! failing (`--target-fail-rate`: test2's kernel resets most SYNs) servers get probes only and
//! rejoin when they recover.
//!
//! Topology: `online` reaches `test2` through `test`, which forwards (the lab's `test2` link);
//! the copier's registrations for `test2`'s sessions go to `test2`'s intercept only (it listens
//! on the server's own address).

use lab::setup::{metric_sum, tail, wait_log, wait_log_count, CopyOptions, Copying, CONTROL_PORT};
use lab::{
    addr, ifname, lab_or_skip, workspace_bin, Host, Lab, LogEntry, Nginx, NginxOptions, Proc,
};
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
    let mut v: Vec<usize> = reqs
        .iter()
        .filter_map(|r| r.uri.strip_prefix(&prefix)?.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

fn count(n: &Nginx, tag: &str) -> usize {
    tagged(&n.requests().unwrap(), tag).len()
}

fn metrics(lab: &Lab) -> String {
    lab.exec_ok(
        Host::Online,
        &[
            "curl",
            "-sS",
            "--max-time",
            "3",
            &format!("http://{METRICS}/metrics"),
        ],
    )
    .unwrap_or_default()
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
        assert!(
            start.elapsed() < limit,
            "no {needle:?} in the copier log within {limit:?}:\n{}",
            tail(&copier.log(), 30)
        );
        sessions(lab, tag, n, 3, 0.1);
        n += 3;
    }
    n
}

fn stop_nginx(lab: &Lab, n: &Nginx) {
    let pid = n.access_log().with_file_name("nginx.pid");
    lab.sh(
        Host::Test2,
        &format!(
            "kill -TERM $(cat {}); while [ -e {} ]; do sleep 0.05; done",
            pid.display(),
            pid.display()
        ),
    )
    .unwrap();
}

/// `test2` reachable from `online` through `test`, with its own intercept (returned).
fn second_test_host(lab: &mut Lab) -> Proc {
    lab.exec_ok(
        Host::Online,
        &[
            "ip",
            "route",
            "add",
            "198.18.3.0/24",
            "via",
            &addr::TEST.to_string(),
        ],
    )
    .unwrap();
    lab.exec_ok(Host::Test, &["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        .unwrap();
    let secret = lab.dir().join("secret").to_string_lossy().into_owned();
    let intercept = workspace_bin("intercept")
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let listen2 = format!("{}:{CONTROL_PORT}", addr::TEST2);
    let icpt2 = lab
        .spawn(
            Host::Test2,
            "intercept-test2",
            &[
                "env",
                "RUST_LOG=info",
                &intercept,
                "--port",
                "80",
                "--listen",
                &listen2,
                "--secret-file",
                &secret,
                "--install-rules",
                "--ipv4-only",
            ],
        )
        .unwrap();
    wait_log(&icpt2, "listening for copiers", Duration::from_secs(10)).unwrap();
    icpt2
}

/// A Python HTTP server on `test2`'s port 80 that answers each request (HTTP/1.0, a 5-byte
/// body) some seconds after reading it (`delay_s`, or what [`set_delay`] wrote since), and
/// appends its path to `log2`.
fn slow_server(lab: &mut Lab, delay_s: f64, log2: &std::path::Path) -> Proc {
    set_delay(lab, delay_s);
    let script = format!(
        r#"
import http.server, socketserver, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def do_GET(self):
        time.sleep(float(open("{delay}").read()))
        body = b"slow\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with open("{}", "a") as f:
            f.write(self.path + "\n")
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
S(("0.0.0.0", 80), H).serve_forever()
"#,
        log2.display(),
        delay = lab.dir().join("slow-delay").display()
    );
    let py = lab.dir().join("slow_server.py");
    std::fs::write(&py, script).unwrap();
    let slow = lab
        .spawn(
            Host::Test2,
            "slow-server",
            &["python3", py.to_str().unwrap()],
        )
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !lab
        .exec_ok(Host::Test2, &["ss", "-Hltn"])
        .unwrap_or_default()
        .contains(":80 ")
    {
        assert!(Instant::now() < deadline, "the slow server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    slow
}

/// The lab's copying set-up without a copier, the slow server on `test2` (answering after
/// `delay_s`; its log) and `test2`'s intercept.
fn slow_test2(lab: &mut Lab, delay_s: f64) -> (Copying, std::path::PathBuf, Proc, Proc) {
    let c = Copying::start(
        lab,
        CopyOptions {
            ipv6: false,
            start_copier: false,
            ..CopyOptions::default()
        },
    )
    .unwrap();
    let log2 = lab.dir().join("slow-server.log");
    let slow = slow_server(lab, delay_s, &log2);
    let icpt2 = second_test_host(lab);
    (c, log2, slow, icpt2)
}

/// The slow server's delay from its next request on.
fn set_delay(lab: &Lab, delay_s: f64) {
    let path = lab.dir().join("slow-delay");
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{delay_s}")).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
}

/// The copier on `online` with `--map map`, an intercept on each test host, and `extra` flags;
/// waits until both intercepts are connected.
fn spread_copier(lab: &mut Lab, map: &str, extra: &[&str]) -> Proc {
    let secret = lab.dir().join("secret").to_string_lossy().into_owned();
    let copier = workspace_bin("copier")
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let (listen1, listen2) = (
        format!("{}:{CONTROL_PORT}", addr::TEST),
        format!("{}:{CONTROL_PORT}", addr::TEST2),
    );
    let mut argv = vec![
        "env",
        "RUST_LOG=info",
        &copier,
        "--map",
        map,
        "--intercept",
        &listen1,
        "--intercept",
        &listen2,
        "--secret-file",
        &secret,
        "--interface",
        ifname::ONLINE_TO_CLIENT,
        "--metrics",
        METRICS,
        "--seed",
        "5",
    ];
    argv.extend_from_slice(extra);
    let cop = lab.spawn(Host::Online, "copier", &argv).unwrap();
    wait_log_count(&cop, "connected to intercept", 2, Duration::from_secs(10)).unwrap();
    assert!(
        cop.log().contains(&format!(
            "intercept {listen2} guards test server(s) {}",
            addr::TEST2
        )),
        "{}",
        cop.log()
    );
    cop
}

#[test]
fn two_test_servers_share_three_to_one_and_a_stopped_one_is_taken_out_and_rejoins() {
    let Some(mut lab) = lab_or_skip(
        "two_test_servers_share_three_to_one_and_a_stopped_one_is_taken_out_and_rejoins",
    ) else {
        return;
    };
    let c = Copying::start(
        &mut lab,
        CopyOptions {
            ipv6: false,
            start_copier: false,
            ..CopyOptions::default()
        },
    )
    .unwrap();
    let test2 = lab.nginx(Host::Test2, NginxOptions::default()).unwrap();
    let leaks2 = lab::leak::LeakCounter::install(&lab, Host::Test2, &[80]).unwrap();
    let icpt2 = second_test_host(&mut lab);
    let map = format!("80={}:80@3,{}:80@1", addr::TEST, addr::TEST2);
    let cop = spread_copier(
        &mut lab,
        &map,
        &["--target-down-after", "2s", "--target-retry", "3s"],
    );

    // 1. 200 sessions spread 3:1 (within 3 points), none lost.
    sessions(&lab, "p1", 0, 200, 0.0);
    c.test().wait_requests(150, Duration::from_secs(20));
    test2.wait_requests(50, Duration::from_secs(20));
    c.settle(Duration::from_secs(1), Duration::from_secs(10));
    let (n1, n2) = (count(c.test(), "p1"), count(&test2, "p1"));
    assert_eq!(
        n1 + n2,
        200,
        "sessions lost: test {n1}, test2 {n2}\n{}",
        tail(&cop.log(), 30)
    );
    let share2 = n2 as f64 / 200.0;
    assert!(
        (share2 - 0.25).abs() <= 0.03,
        "test2 got {n2} of 200 sessions ({share2:.3}), not 25% +- 3 points"
    );
    // each intercept guarded its own server's sessions only
    assert!(
        !icpt2.log().contains("refused"),
        "{}",
        tail(&icpt2.log(), 20)
    );

    // 2. test2 stops: taken out 2 s after its first unanswered copy.
    stop_nginx(&lab, &test2);
    let stopped = Instant::now();
    let down = format!("test server {}:80 taken out", addr::TEST2);
    sessions_until(&lab, &cop, "p2a", &down, Duration::from_secs(20));
    assert!(
        stopped.elapsed() >= Duration::from_secs(2),
        "taken out before --target-down-after"
    );
    std::thread::sleep(Duration::from_millis(1200)); // the metrics are published about once a second
    let before = metrics(&lab);
    // From now on: no new session goes to test2 but the probes, and test gets every other one.
    let t_b = Instant::now();
    sessions(&lab, "p2b", 0, 60, 0.1);
    let took = t_b.elapsed();
    c.settle(Duration::from_secs(1), Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(1200));
    let after = metrics(&lab);
    let started = target_metric(&after, "copier_target_sessions_total")
        - target_metric(&before, "copier_target_sessions_total");
    let probes = target_metric(&after, "copier_target_probes_total")
        - target_metric(&before, "copier_target_probes_total");
    assert_eq!(
        started, probes,
        "sessions went to the stopped test2 besides its probes:\n{after}"
    );
    let most_probes = (took.as_secs_f64() / 3.0).ceil() + 1.0;
    assert!(
        probes <= most_probes,
        "{probes} probes in {took:?} with --target-retry 3s"
    );
    let got = tagged(&c.test().requests().unwrap(), "p2b");
    assert!(
        60.0 - got.len() as f64 <= probes,
        "test got {} of the 60 sessions sent while test2 was out ({probes} probes)",
        got.len()
    );
    assert_eq!(target_metric(&after, "copier_target_up"), 0.0, "{after}");

    // 3. test2 back: it answers a probe, is back in, and gets its share again.
    let test2 = lab.nginx(Host::Test2, NginxOptions::default()).unwrap();
    let up = format!("test server {}:80 answers again", addr::TEST2);
    sessions_until(&lab, &cop, "p3a", &up, Duration::from_secs(15));
    sessions(&lab, "p3", 0, 100, 0.0);
    c.settle(Duration::from_secs(1), Duration::from_secs(10));
    let (m1, m2) = (count(c.test(), "p3"), count(&test2, "p3"));
    assert_eq!(
        m1 + m2,
        100,
        "sessions lost after the rejoin: test {m1}, test2 {m2}\n{}",
        tail(&cop.log(), 30)
    );
    assert!(
        (15..=35).contains(&m2),
        "test2 got {m2} of 100 sessions after rejoining"
    );

    eprintln!(
        "spread: 3:1 -> test {n1} / test2 {n2} of 200; test2 out after {:?} of silence, then {} of 60 sessions on test, \
         {probes} probe(s) to test2 in {took:?}; after the rejoin test {m1} / test2 {m2} of 100",
        Duration::from_secs(2),
        got.len()
    );
    assert!(
        cop.exited().is_none(),
        "the copier died:\n{}",
        tail(&cop.log(), 30)
    );
    assert_eq!(leaks2.count(&lab).unwrap(), 0, "test2 leaked responses");
    c.assert_no_leak(&mut lab);
}

/// A slow test server on `test2` (a threaded Python HTTP server answering after 1 s) next to a
/// fast nginx on `test`, weights 1:1, `--target-max-live 8`: the slow one holds at most 8 live
/// copies and the sessions it cannot take go to the fast one, instead of a backlog growing on
/// the slow one; none is lost, and the copier's session table stays small.
#[test]
fn a_slow_test_server_gets_less_load_instead_of_a_backlog() {
    let Some(mut lab) = lab_or_skip("a_slow_test_server_gets_less_load_instead_of_a_backlog")
    else {
        return;
    };
    let (c, log2, _slow, _icpt2) = slow_test2(&mut lab, 1.0);
    let map = format!("80={}:80@1,{}:80@1", addr::TEST, addr::TEST2);
    let cop = spread_copier(&mut lab, &map, &["--target-max-live", "8"]);

    // 600 sessions one after the other (about 20 a second), the copier's figures read every
    // 2 s meanwhile.
    let started = Instant::now();
    let samples = std::thread::scope(|sc| {
        let reader = sc.spawn(|| {
            let mut v = Vec::new();
            for _ in 0..6 {
                std::thread::sleep(Duration::from_secs(2));
                let m = metrics(&lab);
                v.push((
                    target_metric(&m, "copier_target_live_sessions"),
                    metric_sum(&m, "copier_sessions_active", &[]),
                ));
            }
            v
        });
        sessions(&lab, "s", 0, 600, 0.025);
        reader.join().unwrap()
    });
    let took = started.elapsed().as_secs_f64();
    c.settle(Duration::from_secs(2), Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(2));
    let slow = std::fs::read_to_string(&log2)
        .unwrap_or_default()
        .lines()
        .count();
    let fast = count(c.test(), "s");
    println!(
        "slow server {slow}, fast server {fast} of 600 sessions in {took:.1} s; (live on the slow one, sessions in the table) every 2 s: {samples:?}"
    );
    assert_eq!(
        slow + fast,
        600,
        "sessions lost: slow {slow}, fast {fast}\n{}",
        tail(&cop.log(), 30)
    );
    assert!(
        samples.iter().all(|&(live, _)| live <= 8.0),
        "more than 8 live copies on the slow server: {samples:?}"
    );
    assert!(
        samples.iter().all(|&(_, active)| active <= 40.0),
        "the session table grew: {samples:?}"
    );
    // At most 8 at a time for about a second each: at most about 8 a second, the rest (more
    // than the 1:1 weights' half) on the fast one.
    assert!(
        (slow as f64) <= 8.0 * (took + 2.0),
        "the slow server got {slow} sessions in {took:.1} s"
    );
    assert!(
        fast > 300,
        "the fast server got only {fast}: the slow one was not relieved of its share"
    );
    assert!(
        cop.log()
            .contains(&format!("test server {}:80 overloaded", addr::TEST2)),
        "{}",
        tail(&cop.log(), 20)
    );
}

/// Answer times: a test server answering 200 ms after each request and a fast one (nginx); the
/// copier's trace has each unit's answer time, at least the delay on the slow one (and under a
/// second), under it on the fast one; the metrics give the slow one's smoothed answer time;
/// `shaper check --trace` reports the answer time.
#[test]
fn the_trace_and_the_metrics_give_each_servers_answer_times() {
    let Some(mut lab) = lab_or_skip("the_trace_and_the_metrics_give_each_servers_answer_times")
    else {
        return;
    };
    let (c, _log2, _slow, _icpt2) = slow_test2(&mut lab, 0.2);
    let trace = lab.dir().join("answers.csv");
    let map = format!("80={}:80@1,{}:80@1", addr::TEST, addr::TEST2);
    let cop = spread_copier(&mut lab, &map, &["--trace", trace.to_str().unwrap()]);
    sessions(&lab, "a", 0, 60, 0.05);
    c.settle(Duration::from_secs(2), Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(1));
    let m = metrics(&lab);
    let smoothed = target_metric(&m, "copier_target_answer_smoothed_seconds");
    let answers = target_metric(&m, "copier_target_answers_total");
    assert!(
        (0.2..1.0).contains(&smoothed),
        "test2's smoothed answer time {smoothed} s, its delay 0.2 s:\n{m}"
    );
    assert!(answers >= 25.0, "{answers} answers timed on test2:\n{m}");
    cop.stop();

    let text = std::fs::read_to_string(&trace).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("time_s,copy,user,pool,target,answer_s"));
    let (mut slow, mut fast) = (Vec::new(), Vec::new());
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        let a: f64 = f[5]
            .parse()
            .unwrap_or_else(|_| panic!("a unit not timed in a lock-step run: {l}"));
        if f[4] == format!("{}:80", addr::TEST2) {
            slow.push(a)
        } else {
            fast.push(a)
        }
    }
    println!("answer times: slow server {slow:?}\nfast server {fast:?}");
    assert_eq!(slow.len() + fast.len(), 60, "a row per session:\n{text}");
    assert!(
        slow.len() >= 25 && fast.len() >= 25,
        "1:1 weights: {} slow, {} fast",
        slow.len(),
        fast.len()
    );
    assert!(
        slow.iter().all(|a| (0.2..1.0).contains(a)),
        "slow server answer times outside 0.2..1 s: {slow:?}"
    );
    assert!(
        fast.iter().all(|a| *a < 0.2),
        "fast server answer times of 0.2 s or more: {fast:?}"
    );

    let out = std::process::Command::new(workspace_bin("shaper").unwrap())
        .args(["check", "--trace", trace.to_str().unwrap()])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && report.contains("answer time p50"),
        "{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.assert_no_leak(&mut lab);
}

/// Back-pressure by answer time (`--target-slow-after 100ms`): two servers 1:1, the Python one
/// made slow mid-run (300 ms a request): it is found slow and its share of new sessions falls
/// (probes only, one every `--target-retry`), the fast one takes the rest, none is lost and the
/// session table stays small; made fast again, it is back in at a probe's answer and gets its
/// share again.
#[test]
fn a_server_made_slow_gets_fewer_sessions_and_rejoins_when_fast() {
    let Some(mut lab) = lab_or_skip("a_server_made_slow_gets_fewer_sessions_and_rejoins_when_fast")
    else {
        return;
    };
    let (c, log2, _slow, _icpt2) = slow_test2(&mut lab, 0.0);
    let map = format!("80={}:80@1,{}:80@1", addr::TEST, addr::TEST2);
    let cop = spread_copier(
        &mut lab,
        &map,
        &["--target-slow-after", "100ms", "--target-retry", "2s"],
    );
    let on2 = |tag: &str| {
        let prefix = format!("/index.html?{tag}=");
        std::fs::read_to_string(&log2)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .count()
    };
    let both = |tag: &str| {
        std::thread::sleep(Duration::from_millis(800));
        (count(c.test(), tag), on2(tag))
    };

    // 1. Both fast: 1:1.
    sessions(&lab, "f", 0, 40, 0.05);
    c.settle(Duration::from_secs(1), Duration::from_secs(10));
    let (f1, f2) = both("f");
    assert_eq!(f1 + f2, 40, "sessions lost while fast: {f1} + {f2}");
    assert!(
        (16..=24).contains(&f2),
        "test2 got {f2} of 40 with weights 1:1"
    );

    // 2. test2 answers in 300 ms: slow after a few answers, then only probes.
    set_delay(&lab, 0.3);
    sessions(&lab, "s", 0, 80, 0.05);
    let m = metrics(&lab);
    c.settle(Duration::from_secs(2), Duration::from_secs(20));
    let (s1, s2) = both("s");
    println!("slow phase: test {s1}, test2 {s2} of 80");
    assert!(
        cop.log()
            .contains(&format!("test server {}:80 slow", addr::TEST2)),
        "{}",
        tail(&cop.log(), 20)
    );
    assert_eq!(
        s1 + s2,
        80,
        "sessions lost while test2 was slow: {s1} + {s2}\n{}",
        tail(&cop.log(), 20)
    );
    assert!(
        s2 <= 16,
        "test2 got {s2} of 80 sessions while slow (40 by weight)"
    );
    assert!(target_metric(&m, "copier_target_slow") == 1.0, "{m}");
    assert!(
        metric_sum(&m, "copier_sessions_active", &[]) <= 20.0,
        "the session table grew:\n{m}"
    );

    // 3. test2 fast again: a probe's answer brings it back, it gets its share.
    set_delay(&lab, 0.0);
    sessions(&lab, "r", 0, 80, 0.1);
    c.settle(Duration::from_secs(1), Duration::from_secs(10));
    let (r1, r2) = both("r");
    println!("fast again: test {r1}, test2 {r2} of 80");
    assert!(
        cop.log().contains(&format!(
            "test server {}:80 answers fast again",
            addr::TEST2
        )),
        "{}",
        tail(&cop.log(), 20)
    );
    assert_eq!(
        r1 + r2,
        80,
        "sessions lost after test2 recovered: {r1} + {r2}"
    );
    assert!(
        r2 >= 25,
        "test2 got only {r2} of 80 sessions once fast again"
    );
    c.assert_no_leak(&mut lab);
}

/// The closed loop against a single test server that is slow (500 ms a request, with
/// `--target-slow-after 100ms`): the rate asked for (twice the online one) cannot be taken, so
/// the loop lowers the factor (a WARN, `copier_rate_held`) instead of raising it and piling up
/// sessions; the session table stays small.
#[test]
fn with_a_target_rate_a_slow_server_makes_the_loop_lower_the_factor() {
    let Some(mut lab) =
        lab_or_skip("with_a_target_rate_a_slow_server_makes_the_loop_lower_the_factor")
    else {
        return;
    };
    let (c, log2, _slow, _icpt2) = slow_test2(&mut lab, 0.5);
    let map = format!("80={}:80", addr::TEST2);
    let cop = spread_copier(
        &mut lab,
        &map,
        &[
            "--target-rate",
            "40",
            "--max-factor",
            "4",
            "--target-slow-after",
            "100ms",
            "--target-retry",
            "2s",
        ],
    );
    let samples = std::thread::scope(|sc| {
        let reader = sc.spawn(|| {
            let mut v = Vec::new();
            for _ in 0..7 {
                std::thread::sleep(Duration::from_secs(2));
                let m = metrics(&lab);
                v.push((
                    metric_sum(&m, "copier_rate_scale", &[]),
                    metric_sum(&m, "copier_rate_held", &[]),
                    metric_sum(&m, "copier_sessions_active", &[]),
                ));
            }
            v
        });
        lab::setup::paced_sessions(&lab, |_| 20.0, 15.0);
        reader.join().unwrap()
    });
    let got = std::fs::read_to_string(&log2)
        .unwrap_or_default()
        .lines()
        .count();
    println!("(scale, held, sessions in the table) every 2 s: {samples:?}; the slow server got {got} requests");
    let log = cop.log();
    assert!(
        log.contains(&format!("test server {}:80 slow", addr::TEST2)),
        "{}",
        tail(&log, 20)
    );
    assert!(
        log.contains("the loop lowers the factor"),
        "{}",
        tail(&log, 20)
    );
    let last = samples.last().unwrap();
    assert!(
        last.1 == 1.0 && last.0 < 1.0,
        "the loop did not lower the factor: {samples:?}"
    );
    assert!(
        samples.iter().all(|s| s.2 <= 20.0),
        "the session table grew: {samples:?}"
    );
    assert!(
        got < 150,
        "the slow server got {got} requests (300 online at 20/s, 40/s asked)"
    );
    drop(c);
}

#[test]
fn a_server_that_refuses_many_connections_is_failing_and_rejoins_when_sound() {
    let Some(mut lab) =
        lab_or_skip("a_server_that_refuses_many_connections_is_failing_and_rejoins_when_sound")
    else {
        return;
    };
    let (c, log2, _server, _icpt2) = slow_test2(&mut lab, 0.0);
    let map = format!("80={}:80@1,{}:80@1", addr::TEST, addr::TEST2);
    let cop = spread_copier(
        &mut lab,
        &map,
        &["--target-fail-rate", "30", "--target-retry", "1s"],
    );
    let on2 = |tag: &str| {
        let prefix = format!("/index.html?{tag}=");
        std::fs::read_to_string(&log2)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .count()
    };
    // test2's kernel resets 60 % of the SYNs to port 80 (the RSTs go out through the
    // intercept's queue, like any answer of the test server).
    let reject = "INPUT -p tcp --dport 80 --syn -m statistic --mode random --probability 0.6 -j REJECT --reject-with tcp-reset";
    lab.sh(Host::Test2, &format!("iptables -I {reject}"))
        .unwrap();
    let failing = format!("test server {}:80 failing", addr::TEST2);
    let n = sessions_until(&lab, &cop, "f", &failing, Duration::from_secs(40));
    std::thread::sleep(Duration::from_millis(1500)); // the metrics are exported once a second
    let m = metrics(&lab);
    println!("failing after {n} sessions");
    assert!(target_metric(&m, "copier_target_failing") == 1.0, "{m}");
    // Five outcomes at least, two of them failures at least (0.2, then 0.36 > 0.3).
    assert!(
        target_metric(&m, "copier_target_failures_total") >= 2.0,
        "{m}"
    );

    // Failing: test2 gets only a probe a second; test takes every other session.
    sessions(&lab, "p", 0, 40, 0.05);
    c.settle(Duration::from_secs(1), Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    let (p1, p2) = (count(c.test(), "p"), on2("p"));
    println!("failing: test {p1}, test2 {p2} of 40");
    assert!(
        p2 <= 10,
        "test2 got {p2} of 40 sessions while failing (20 by weight)"
    );
    assert!(
        p1 >= 28,
        "test got only {p1} of 40 sessions while test2 was failing"
    );

    // Sound again: the probes complete, the share falls under 15 %, test2 is back.
    lab.sh(Host::Test2, &format!("iptables -D {reject}"))
        .unwrap();
    sessions_until(
        &lab,
        &cop,
        "r",
        &format!("test server {}:80 no longer failing", addr::TEST2),
        Duration::from_secs(40),
    );
    sessions(&lab, "b", 0, 40, 0.05);
    c.settle(Duration::from_secs(1), Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    let (b1, b2) = (count(c.test(), "b"), on2("b"));
    println!("sound again: test {b1}, test2 {b2} of 40");
    assert_eq!(
        b1 + b2,
        40,
        "sessions lost once test2 was sound: {b1} + {b2}"
    );
    assert!(
        b2 >= 12,
        "test2 got only {b2} of 40 sessions once sound again"
    );
    c.assert_no_leak(&mut lab);
}
