//! True answer times in `--compare`: online and test servers answer the same three endpoints
//! (nginx on both, `/items/N` and `/orders/N` straight from nginx, `/slow/N` through a small
//! python upstream on each host), and the test host's upstream waits 20 ms before it answers.
//! Every answer differs (the versions say so in the body), so every exchange writes a diff line
//! with its online and test answer times. Keep-alive and one-request connections from curl.
//!
//! The comparison must see the 20 ms: `/slow/{n}`'s test - online answer time at p50 between
//! 15 and 40 ms (and its ratio p50 at least 3 in the last tick), the other endpoints within 5 ms
//! of each other (ratio p50 within [0.5, 2]), and no online answer time exactly 0.0 ms (with
//! the old per-batch stamps most were: the request and its answer came out of one ring block).

use std::collections::BTreeMap;
use std::time::Duration;

use compare::jsonl::{read_lines, Line};
use lab::setup::{metric_sum, tail, wait_metric, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host, NginxOptions};

const METRICS: &str = "127.0.0.1:9479";
const SLOW: &str = "GET /slow/{n}";
const UPSTREAM: u16 = 9097;

/// The upstream of `/slow/N`: answers at once, or `delay` seconds late.
fn upstream(version: u8, delay: f64) -> String {
    format!(
        r#"
import http.server, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if {delay} > 0:
            time.sleep({delay})
        body = b'{{"slow":true,"v":{version}}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", {UPSTREAM}), H).serve_forever()
"#
    )
}

fn nginx(version: u8) -> NginxOptions {
    NginxOptions {
        server_extra: format!(
            r#"location ~ ^/items/(\d+)$ {{ default_type application/json; return 200 '{{"id":$1,"v":{version}}}'; }}
            location ~ ^/orders/(\d+)$ {{ default_type application/json; return 200 '{{"order":$1,"v":{version}}}'; }}
            location /slow/ {{ proxy_pass http://127.0.0.1:{UPSTREAM}; proxy_http_version 1.1; proxy_set_header Connection ""; }}
"#
        ),
        ..NginxOptions::default()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn compare_sees_a_test_server_20ms_slower_on_one_endpoint() {
    let Some(mut lab) = lab_or_skip("compare_sees_a_test_server_20ms_slower_on_one_endpoint")
    else {
        return;
    };
    let jsonl = lab.dir().join("compare-times.jsonl");
    let opts = CopyOptions {
        online: nginx(1),
        test: Some(nginx(2)),
        ipv6: false,
        intercept_args: vec!["--payload-bytes".into(), "65495".into()],
        copier_args: vec![
            "-v".into(),
            "--compare".into(),
            "--compare-log".into(),
            jsonl.to_string_lossy().into_owned(),
            "--metrics".into(),
            METRICS.into(),
        ],
        ..CopyOptions::default()
    };
    let _on = lab
        .spawn(
            Host::Online,
            "upstream-online",
            &["python3", "-c", &upstream(1, 0.0)],
        )
        .unwrap();
    let _test = lab
        .spawn(
            Host::Test,
            "upstream-test",
            &["python3", "-c", &upstream(2, 0.020)],
        )
        .unwrap();
    let mut c = Copying::start(&mut lab, opts).unwrap();
    let u = format!("http://{}", addr::ONLINE);
    // both upstreams up (python starts in a few hundred ms), asked on their own hosts
    for h in [Host::Online, Host::Test] {
        let wait = format!("for i in $(seq 1 100); do curl -sf http://127.0.0.1:{UPSTREAM}/ >/dev/null && exit 0; sleep 0.1; done; exit 1");
        lab.sh(h, &wait).unwrap();
    }
    let script = format!(
        r#"set -e
for c in $(seq 1 6); do
  urls=""
  for i in $(seq 1 4); do urls="$urls {u}/items/$((c * 4 + i)) {u}/orders/$i {u}/slow/$i"; done
  curl -sS $urls >/dev/null
done
for i in $(seq 1 12); do
  curl -sS --http1.0 {u}/items/$i >/dev/null; curl -sS --http1.0 {u}/orders/$i >/dev/null; curl -sS --http1.0 {u}/slow/$i >/dev/null
done
"#
    );
    lab.sh(Host::Client, &script).unwrap();
    let per = 6 * 4 + 12;
    let n = 3 * per;
    let log = || tail(&c.copier.as_ref().unwrap().log(), 30);
    let m = wait_metric(
        &lab,
        Host::Online,
        METRICS,
        "copier_compare_exchanges_total",
        &[],
        n as f64,
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", log()));
    assert_eq!(
        metric_sum(&m, "copier_compare_exchanges_total", &["result=\"differ\""]),
        n as f64,
        "every answer differs:\n{m}"
    );
    c.copier.take().unwrap().stop();
    let rb = read_lines(&jsonl).unwrap();
    assert_eq!(rb.bad, 0, "{:?}", rb.first_bad);
    let mut times: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut ratios = BTreeMap::new();
    let mut untimed: BTreeMap<String, usize> = BTreeMap::new();
    for l in rb.lines {
        match l {
            Line::Diff {
                endpoint,
                online_ms,
                test_ms,
                ..
            } => match (online_ms, test_ms) {
                (Some(on), Some(t)) => times.entry(endpoint).or_default().push((on, t)),
                // a test answer cut before the capture showed its request whole has no time
                // (the records came faster than the comparison's ring): rare, counted below
                _ => *untimed.entry(endpoint).or_insert(0) += 1,
            },
            Line::Tick { endpoints, .. } => {
                for e in endpoints {
                    ratios.insert(e.endpoint, e.ratio_p50);
                }
            }
            Line::Noise { .. } => {}
        }
    }
    let mut report = String::new();
    for (ep, v) in &times {
        let on = median(v.iter().map(|x| x.0).collect());
        let t = median(v.iter().map(|x| x.1).collect());
        let d = median(v.iter().map(|x| x.1 - x.0).collect());
        report.push_str(&format!(
            "{ep}: {} exchanges, online p50 {on:.2} ms, test p50 {t:.2} ms, test - online p50 {d:.2} ms, ratio p50 {:?}\n",
            v.len(),
            ratios.get(ep).copied().flatten()
        ));
    }
    println!("{report}");
    if let Some(v) = times.get(SLOW) {
        println!("{SLOW} (online, test) ms: {v:.2?}");
    }
    assert_eq!(
        times.keys().collect::<Vec<_>>(),
        ["GET /items/{n}", "GET /orders/{n}", SLOW],
        "{report}"
    );
    assert!(
        untimed.values().all(|&n| n <= 3),
        "answers without a time: {untimed:?}\n{report}"
    );
    for (ep, v) in &times {
        let zero = v.iter().filter(|x| x.0 == 0.0).count();
        assert_eq!(
            zero, 0,
            "{ep}: online answer times of exactly 0.0 ms (batch stamps?)\n{report}"
        );
        let d = median(v.iter().map(|x| x.1 - x.0).collect());
        let ratio = ratios
            .get(ep)
            .copied()
            .flatten()
            .unwrap_or_else(|| panic!("{ep}: no ratio\n{report}"));
        if ep == SLOW {
            assert!(
                (15.0..=40.0).contains(&d),
                "{ep}: test - online p50 {d:.2} ms, not ~20 ms\n{report}"
            );
            assert!(ratio >= 3.0, "{ep}: ratio p50 {ratio}\n{report}");
        } else {
            assert!(
                d.abs() < 5.0,
                "{ep}: test - online p50 {d:.2} ms, not ~0\n{report}"
            );
            assert!(
                (0.5..=2.0).contains(&ratio),
                "{ep}: ratio p50 {ratio}\n{report}"
            );
        }
    }
}
