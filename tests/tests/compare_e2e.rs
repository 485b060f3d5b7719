//! Shadow testing end to end (`copier --compare`): real clients (curl) talk to nginx serving
//! version 1 on `online`; the copier copies each session to a candidate nginx (version 2: one
//! JSON field of `/items/N` changed, `/orders/N` answers 500) and to a baseline nginx (version 1)
//! on `test`, both adding a random `X-Request-Id` header and a time stamp (`$msec`) to their
//! JSON. Keep-alive and short connections, gzip (chunked) answers, a 1 MB file, answers the
//! candidate sends 1.5 s after the online ones. The comparison must name exactly the two
//! changed endpoints and their fields, and no noise field, in its metrics, its JSON Lines file
//! and the HTML report; the same run without the baseline, given the ignore list, must give the
//! same answer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use compare::jsonl::{read_lines, Line};
use lab::setup::{metric_sum, tail, wait_log, wait_metric, CopyOptions, Copying};
use lab::{addr, ifname, lab_or_skip, workspace_bin, Host, Lab, NginxOptions};

const METRICS_1: &str = "127.0.0.1:9471";
const METRICS_2: &str = "127.0.0.1:9472";
const ITEMS: &str = "GET /items/{n}";
const ORDERS: &str = "GET /orders/{n}";

/// The server block of one version of the service.
fn service(version: u8, noisy: bool, slow: bool) -> String {
    let ts = if noisy { r#","ts":$msec"# } else { "" };
    let price = if version == 2 { "$1.50" } else { "$1.00" };
    let orders = if version == 2 {
        format!(r#"return 500 '{{"error":"boom"{ts}}}';"#)
    } else {
        format!(r#"return 200 '{{"order":$1,"state":"ok"{ts}}}';"#)
    };
    let mut s = format!(
        r#"gzip on; gzip_types application/json; gzip_min_length 1; gzip_comp_level 1;
        location ~ ^/items/(\d+)$ {{ default_type application/json; return 200 '{{"id":$1,"price":"{price}","name":"item $1"{ts}}}'; }}
        location ~ ^/orders/(\d+)$ {{ default_type application/json; {orders} }}
        location = /health {{ default_type application/json; return 200 '{{"ok":true{ts}}}'; }}
"#
    );
    if noisy {
        s.push_str("add_header X-Request-Id $request_id always;\n");
    }
    if slow {
        // answered by a small server that waits 1.5 s: seconds after the online answer
        s.push_str(&format!(
            "location = /slow {{ proxy_pass http://127.0.0.1:{SLOW_PORT}; }}\n"
        ));
    } else {
        s.push_str(
            "location = /slow { default_type application/json; return 200 '{\"slow\":true}'; }\n",
        );
    }
    s
}

fn nginx(version: u8, noisy: bool, slow: bool, port: u16) -> NginxOptions {
    NginxOptions {
        port,
        files: vec![("big.bin".into(), 1 << 20)],
        server_extra: service(version, noisy, slow),
        ..NginxOptions::default()
    }
}

/// The candidate's slow upstream: answers `/slow` like the others, 1.5 s late.
const SLOW_PORT: u16 = 9099;
const SLOW_SERVER: &str = r#"
import http.server, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        time.sleep(1.5)
        body = b'{"slow":true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 9099), H).serve_forever()
"#;

/// The clients: keep-alive connections (some asking for gzip), short HTTP/1.0 connections, and
/// the 1 MB file twice on one connection. Returns the number of requests.
fn clients(lab: &Lab) -> usize {
    let u = format!("http://{}", addr::ONLINE);
    let script = format!(
        r#"set -e
for c in $(seq 1 10); do
  urls=""
  for i in $(seq 1 8); do urls="$urls {u}/items/$((c * 8 + i)) {u}/orders/$i {u}/health"; done
  if [ $((c % 2)) = 0 ]; then curl -sS -H 'Accept-Encoding: gzip' $urls >/dev/null; else curl -sS $urls >/dev/null; fi
done
for i in $(seq 1 20); do curl -sS --http1.0 {u}/items/$i >/dev/null; curl -sS --http1.0 {u}/orders/$i >/dev/null; done
curl -sS {u}/big.bin {u}/big.bin >/dev/null
curl -sS {u}/slow {u}/slow {u}/slow >/dev/null
"#
    );
    lab.sh(Host::Client, &script).unwrap();
    10 * 24 + 40 + 2 + 3
}

/// Per endpoint, the fields of the differing exchanges in the file; and the noise learned.
fn read_file(path: &Path) -> (BTreeMap<String, BTreeSet<String>>, BTreeSet<String>, usize) {
    let rb = read_lines(path).unwrap();
    assert_eq!(rb.bad, 0, "{:?}", rb.first_bad);
    let mut diffs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut noise = BTreeSet::new();
    let mut ticks = 0;
    for l in rb.lines {
        match l {
            Line::Diff {
                endpoint, diffs: d, ..
            } => {
                diffs
                    .entry(endpoint)
                    .or_default()
                    .extend(d.into_iter().map(|f| compare::fields::generalize(&f.field)));
            }
            Line::Noise { field, .. } => {
                noise.insert(field);
            }
            Line::Tick { .. } => ticks += 1,
        }
    }
    (diffs, noise, ticks)
}

fn expected() -> BTreeMap<String, BTreeSet<String>> {
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    BTreeMap::from([
        (ITEMS.to_string(), set(&["$.price"])),
        (
            ORDERS.to_string(),
            set(&["$.error", "$.order", "$.state", "status"]),
        ),
    ])
}

/// Waits until `n` exchanges were compared; asserts the metrics name exactly the two endpoints.
fn check_metrics(lab: &Lab, metrics: &str, n: usize, log: &str) {
    let m = wait_metric(
        lab,
        Host::Online,
        metrics,
        "copier_compare_exchanges_total",
        &[],
        n as f64,
        Duration::from_secs(90),
    )
    .unwrap_or_else(|e| panic!("{e}\ncopier log:\n{log}"));
    let total = metric_sum(&m, "copier_compare_exchanges_total", &[]);
    assert_eq!(total, n as f64, "every request compared once:\n{m}");
    let differ = metric_sum(&m, "copier_compare_exchanges_total", &["result=\"differ\""]);
    let items = metric_sum(
        &m,
        "copier_compare_exchanges_total",
        &["result=\"differ\"", "endpoint=\"GET /items/{n}\""],
    );
    let orders = metric_sum(
        &m,
        "copier_compare_exchanges_total",
        &["result=\"differ\"", "endpoint=\"GET /orders/{n}\""],
    );
    assert_eq!((items, orders), (100.0, 100.0), "{m}");
    assert_eq!(
        differ,
        items + orders,
        "only those two endpoints differ:\n{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_compare_differences_total", &["kind=\"header\""]),
        0.0,
        "no header difference (noise):\n{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_compare_differences_total", &["kind=\"status\""]),
        100.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_compare_malformed_total", &[]),
        0.0,
        "{m}"
    );
    let equal = metric_sum(&m, "copier_compare_exchanges_total", &["result=\"equal\""]);
    assert_eq!(
        equal,
        (n - 200) as f64,
        "health, the slow answers and the 1 MB file are equal:\n{m}"
    );
}

#[test]
fn compare_names_exactly_the_changed_endpoints_with_and_without_a_baseline() {
    let Some(mut lab) =
        lab_or_skip("compare_names_exactly_the_changed_endpoints_with_and_without_a_baseline")
    else {
        return;
    };
    let log1 = lab.dir().join("compare-baseline.jsonl");
    let log2 = lab.dir().join("compare-ignore.jsonl");
    let baseline = format!("80={}:8080", addr::TEST);
    let opts = CopyOptions {
        online: nginx(1, false, false, 80),
        test: Some(nginx(2, true, true, 80)),
        ipv6: false,
        extra_ports: vec![8080],
        intercept_args: vec!["--payload-bytes".into(), "65495".into()],
        copier_args: vec![
            "-v".into(),
            "--compare".into(),
            "--baseline-map".into(),
            baseline,
            "--compare-log".into(),
            log1.to_string_lossy().into_owned(),
            "--metrics".into(),
            METRICS_1.into(),
        ],
        ..CopyOptions::default()
    };
    let base = lab.nginx(Host::Test, nginx(1, true, false, 8080)).unwrap();
    let _slow = lab
        .spawn(Host::Test, "slow-upstream", &["python3", "-c", SLOW_SERVER])
        .unwrap();
    let mut c = Copying::start(&mut lab, opts).unwrap();
    // the same file on every server: the same mtime, so the same ETag and Last-Modified
    for root in [c.online.docroot(), c.test().docroot(), base.docroot()] {
        let f = root.join("big.bin");
        std::process::Command::new("touch")
            .arg("-d")
            .arg("@1700000000")
            .arg(&f)
            .status()
            .unwrap();
    }

    // 1. three-way: online, candidate, baseline
    let n = clients(&lab);
    let copier = c.copier.take().unwrap();
    check_metrics(&lab, METRICS_1, n, &tail(&copier.log(), 40));
    copier.stop();
    let out = copier.log();
    assert!(
        out.contains(&format!("compare: {n} exchanges compared")),
        "{}",
        tail(&out, 30)
    );
    let (diffs, noise, ticks) = read_file(&log1);
    assert_eq!(
        diffs,
        expected(),
        "the file names exactly the changed endpoints and fields"
    );
    assert!(ticks >= 1);
    for f in ["header:x-request-id", "$.ts"] {
        assert!(noise.contains(f), "{f} learned as noise: {noise:?}");
    }

    // the report page names them first
    let page = lab.dir().join("compare.html");
    let r = std::process::Command::new(workspace_bin("copier").unwrap())
        .args(["compare-report"])
        .arg(&log1)
        .arg("-o")
        .arg(&page)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    let row = |i: usize| {
        html.split(&format!("<tr id=\"ep-{i}\""))
            .nth(1)
            .map(|r| r.split("</tr>").next().unwrap_or("").to_string())
    };
    let (r0, r1, r2) = (row(0).unwrap(), row(1).unwrap(), row(2).unwrap_or_default());
    let top = format!("{r0}{r1}");
    assert!(
        top.contains("GET /orders/{n}") && top.contains("GET /items/{n}"),
        "{r0}\n{r1}"
    );
    assert!(
        r2.contains("0.00%"),
        "the third endpoint does not differ: {r2}"
    );

    // 2. two-way with the ignore list: the same answer
    let ignore = "header:x-request-id,$.ts,header:etag,header:last-modified";
    let map = format!("80={}:80", addr::TEST);
    let log2s = log2.to_string_lossy().into_owned();
    let args = [
        "--map",
        &map,
        "--interface",
        ifname::ONLINE_TO_CLIENT,
        "--compare",
        "--compare-ignore",
        ignore,
        "--compare-log",
        &log2s,
        "--metrics",
        METRICS_2,
    ];
    let copier2 = c.spawn_copier(&mut lab, "copier-ignore", &args).unwrap();
    let n = clients(&lab);
    check_metrics(&lab, METRICS_2, n, &tail(&copier2.log(), 40));
    copier2.stop();
    wait_log(&copier2, "exchanges compared", Duration::from_secs(5)).unwrap();
    let (diffs2, _, _) = read_file(&log2);
    assert_eq!(
        diffs2,
        expected(),
        "without a baseline, given the ignore list"
    );
    c.check_alive().unwrap();
    c.assert_no_leak(&mut lab);
}

/// A test server that never answers: every request waits `--compare-timeout`, then is counted
/// as not compared; what the comparison holds returns to nothing, and the copier lives on.
#[test]
fn unanswered_requests_expire_and_are_counted() {
    let Some(mut lab) = lab_or_skip("unanswered_requests_expire_and_are_counted") else {
        return;
    };
    const METRICS: &str = "127.0.0.1:9473";
    let opts = CopyOptions {
        online: nginx(1, false, false, 80),
        test: None,
        ipv6: false,
        intercept_args: vec!["--payload-bytes".into(), "65495".into()],
        copier_args: vec![
            "--compare".into(),
            "--compare-timeout".into(),
            "2s".into(),
            "--metrics".into(),
            METRICS.into(),
        ],
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    let u = format!("http://{}", addr::ONLINE);
    let script = format!(
        "for i in $(seq 1 30); do curl -sS {u}/items/$i {u}/big.bin >/dev/null || exit 1; done"
    );
    lab.sh(Host::Client, &script).unwrap();
    let m = wait_metric(
        &lab,
        Host::Online,
        METRICS,
        "copier_compare_not_compared_total",
        &["reason=\"expired\""],
        60.0,
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", tail(&c.copier.as_ref().unwrap().log(), 30)));
    assert_eq!(
        metric_sum(&m, "copier_compare_exchanges_total", &[]),
        0.0,
        "nothing to compare:\n{m}"
    );
    // the 30 MB of online answers waited, bounded, and are gone (the gauges are exported with
    // the counters, in the same pass)
    assert_eq!(metric_sum(&m, "copier_compare_pending", &[]), 0.0, "{m}");
    assert!(
        metric_sum(&m, "copier_compare_bytes", &[]) < 1_000_000.0,
        "{m}"
    );
    c.check_alive().unwrap();
}

/// Another protocol (redis): each connection is compared whole, as bytes. Online and test hold
/// different values under one key: those connections differ (at the value's offset), the others
/// are equal.
#[test]
fn redis_connections_are_compared_as_bytes() {
    let Some(mut lab) = lab_or_skip("redis_connections_are_compared_as_bytes") else {
        return;
    };
    const METRICS: &str = "127.0.0.1:9474";
    for (h, value) in [(Host::Online, "one"), (Host::Test, "two")] {
        lab::setup::start_redis(&mut lab, h);
        let set = format!("for i in $(seq 1 50); do redis-cli -p 6379 SET same same >/dev/null && redis-cli -p 6379 SET k {value} >/dev/null && exit 0; sleep 0.1; done; exit 1");
        lab.sh(h, &set).unwrap();
    }
    let map = format!("6379={}:6379", addr::TEST);
    let opts = CopyOptions {
        online: nginx(1, false, false, 80),
        test: Some(nginx(1, false, false, 80)),
        ipv6: false,
        extra_ports: vec![6379],
        intercept_args: vec!["--payload-bytes".into(), "65495".into()],
        copier_args: vec![
            "--map".into(),
            map,
            "--compare".into(),
            "--metrics".into(),
            METRICS.into(),
        ],
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    let script = format!(
        "for i in $(seq 1 10); do redis-cli -h {o} GET k >/dev/null; redis-cli -h {o} GET same >/dev/null; done",
        o = addr::ONLINE
    );
    lab.sh(Host::Client, &script).unwrap();
    let m = wait_metric(
        &lab,
        Host::Online,
        METRICS,
        "copier_compare_exchanges_total",
        &["endpoint=\"tcp/6379\""],
        20.0,
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", tail(&c.copier.as_ref().unwrap().log(), 30)));
    let r = |result: &str| {
        metric_sum(
            &m,
            "copier_compare_exchanges_total",
            &["endpoint=\"tcp/6379\"", &format!("result=\"{result}\"")],
        )
    };
    assert_eq!((r("differ"), r("equal")), (10.0, 10.0), "{m}");
    assert_eq!(
        metric_sum(&m, "copier_compare_differences_total", &["kind=\"body\""]),
        10.0,
        "{m}"
    );
    c.check_alive().unwrap();
}
