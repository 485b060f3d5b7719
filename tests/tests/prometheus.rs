//! Metrics for real: a real Prometheus (Debian's package) scrapes the copier and the intercept
//! while real traffic is copied, and answers PromQL on their series: both targets up, counters
//! that count the requests made, a histogram that `histogram_quantile` reads, the types
//! Prometheus recorded, and every query of the Grafana dashboard (deploy/grafana) valid, with
//! every metric it names present in the live scrape.

use lab::setup::{CopyOptions, Copying};
use lab::{addr, lab_or_skip, which, Host, Lab};
use serde_json::Value;
use std::time::{Duration, Instant};

const COPIER_METRICS: &str = "127.0.0.1:9100";
const PROMETHEUS: &str = "127.0.0.1:9090";

fn intercept_metrics() -> String {
    format!("{}:9101", addr::TEST)
}

/// GET an API path of the Prometheus in `online` with URL-encoded parameters; the `data` field.
fn api(lab: &Lab, path: &str, params: &[(&str, &str)]) -> Value {
    let url = format!("http://{PROMETHEUS}{path}");
    let mut argv = vec![
        "curl".to_string(),
        "-sS".into(),
        "--max-time".into(),
        "5".into(),
        "-G".into(),
        url,
    ];
    for (k, v) in params {
        argv.push("--data-urlencode".into());
        argv.push(format!("{k}={v}"));
    }
    let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
    let text = lab.exec_ok(Host::Online, &refs).unwrap_or_default();
    // Not JSON (empty, or "Service Unavailable" while Prometheus starts): no answer yet; the
    // callers retry until their deadline.
    let Ok(v) = serde_json::from_str::<Value>(&text) else {
        return Value::Null;
    };
    assert!(
        v["status"] == "success",
        "Prometheus refused {path} {params:?}: {text}"
    );
    v["data"].clone()
}

/// The value of an instant query that returns one sample (None when it returns none).
fn scalar(lab: &Lab, query: &str) -> Option<f64> {
    let data = api(lab, "/api/v1/query", &[("query", query)]);
    data["result"].as_array()?.first()?["value"][1]
        .as_str()?
        .parse()
        .ok()
}

/// Waits until `query` returns a sample satisfying `ok`; returns it.
fn wait_for(lab: &Lab, query: &str, ok: impl Fn(f64) -> bool, timeout: Duration) -> f64 {
    let deadline = Instant::now() + timeout;
    loop {
        let v = scalar(lab, query);
        if let Some(v) = v.filter(|v| ok(*v)) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{query} gave {v:?} for {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn prometheus_scrapes_both_daemons_and_answers_promql() {
    let Some(mut lab) = lab_or_skip("prometheus_scrapes_both_daemons_and_answers_promql") else {
        return;
    };
    let Some(prometheus) = which("prometheus") else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("prometheus is not installed (scripts/install-deps.sh installs it)");
        }
        eprintln!("\n!!!!!!!! SKIPPED prometheus test: no prometheus binary (apt-get install prometheus) !!!!!!!!\n");
        return;
    };
    let opts = CopyOptions {
        copier_args: vec!["--metrics".into(), COPIER_METRICS.into()],
        intercept_args: vec!["--metrics".into(), intercept_metrics()],
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).expect("start the copying setup");

    let dir = lab.dir().join("prometheus");
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: copier\n    static_configs:\n      - targets: ['{COPIER_METRICS}']\n  - job_name: intercept\n    static_configs:\n      - targets: ['{}']\n",
            intercept_metrics()
        ),
    )
    .unwrap();
    let (cfg, data) = (
        config.to_string_lossy().into_owned(),
        dir.join("data").to_string_lossy().into_owned(),
    );
    let bin = prometheus.to_string_lossy().into_owned();
    lab.spawn(
        Host::Online,
        "prometheus",
        &[
            &bin,
            &format!("--config.file={cfg}"),
            &format!("--storage.tsdb.path={data}"),
            &format!("--web.listen-address={PROMETHEUS}"),
        ],
    )
    .unwrap();
    wait_for(
        &lab,
        "up{job=\"copier\"}",
        |v| v == 1.0,
        Duration::from_secs(30),
    );
    wait_for(
        &lab,
        "up{job=\"intercept\"}",
        |v| v == 1.0,
        Duration::from_secs(30),
    );

    // real traffic: 30 requests, each its own connection (curl), all copied
    const REQUESTS: usize = 30;
    let url = format!("http://{}/index.html", addr::ONLINE);
    for _ in 0..REQUESTS {
        lab.exec_ok(
            Host::Client,
            &["curl", "-sS", "-o", "/dev/null", "--max-time", "5", &url],
        )
        .unwrap();
    }
    c.test().wait_requests(REQUESTS, Duration::from_secs(30));
    let copied = wait_for(
        &lab,
        "sum(copier_sessions_completed_total)",
        |v| v >= REQUESTS as f64,
        Duration::from_secs(30),
    );
    assert!(
        copied <= 2.0 * REQUESTS as f64,
        "{copied} sessions completed for {REQUESTS} requests"
    );
    let captured = wait_for(
        &lab,
        "sum(copier_captured_sessions_started_total)",
        |v| v >= REQUESTS as f64,
        Duration::from_secs(10),
    );
    assert!(
        captured <= REQUESTS as f64 + 1.0,
        "captured {captured} sessions for {REQUESTS} connections"
    );
    // every copied session's SYN-ACK at least came back from the intercept as a record; the
    // two daemons are scraped at different instants while records still flow (answers, FINs),
    // so the pair is read again until the copier's count is not ahead of the intercept's
    // older sample (at most 10 s: then the last pair is what the assertion reports)
    let deadline = Instant::now() + Duration::from_secs(10);
    let (records, received) = loop {
        let received = wait_for(
            &lab,
            "sum(copier_records_received_total)",
            |v| v >= REQUESTS as f64,
            Duration::from_secs(10),
        );
        let records = wait_for(
            &lab,
            "sum(intercept_records_sent_total)",
            |v| v >= REQUESTS as f64,
            Duration::from_secs(10),
        );
        if received <= records || Instant::now() >= deadline {
            break (records, received);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        received <= records,
        "the copier received {received} records, the intercept sent {records}"
    );
    // a histogram Prometheus can take quantiles of (buckets with `le`)
    let p99 = wait_for(
        &lab,
        "histogram_quantile(0.99, sum by (le) (copier_replay_lag_seconds_bucket))",
        |v| v.is_finite() && v >= 0.0,
        Duration::from_secs(10),
    );
    assert!(p99 < 5.0, "p99 replay lag {p99} s");
    // labels: drops by reason are separate series
    let reasons = api(
        &lab,
        "/api/v1/query",
        &[("query", "intercept_packets_dropped_total")],
    );
    let n = reasons["result"].as_array().map_or(0, |r| {
        r.iter()
            .filter(|s| s["metric"]["reason"].is_string())
            .count()
    });
    assert!(
        n >= 4,
        "intercept_packets_dropped_total by reason: {reasons}"
    );

    // the types Prometheus recorded from the scrape
    let meta = api(&lab, "/api/v1/metadata", &[]);
    for (name, ty) in [
        ("copier_sessions_started_total", "counter"),
        ("copier_sessions_active", "gauge"),
        ("copier_replay_lag_seconds", "histogram"),
        ("copier_memory_bytes", "gauge"),
        ("intercept_records_sent_total", "counter"),
        ("intercept_registrations", "gauge"),
    ] {
        let got = meta[name][0]["type"].as_str().unwrap_or("absent");
        assert_eq!(got, ty, "type of {name} in Prometheus's metadata");
    }

    // every query of the Grafana dashboard is valid PromQL, and every metric it names is live
    let names = api(&lab, "/api/v1/label/__name__/values", &[]);
    let live: Vec<&str> = names
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/grafana/trafficcopy.json"
    );
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    // Series the intercept creates on the first event only (a record dropped for a slow
    // copier): they must be defined in the source, as scripts/check-deploy.sh also checks.
    let lazy = ["intercept_records_dropped_total"];
    let sources = [
        include_str!("../../intercept/src/metrics_table.rs"),
        include_str!("../../copier/src/metrics_table.rs"),
    ]
    .concat();
    let mut checked = 0;
    for panel in dash["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            let expr = t["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "1m");
            api(&lab, "/api/v1/query", &[("query", &expr)]);
            for word in expr.split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_')) {
                if lazy.contains(&word) {
                    assert!(
                        sources.contains(&format!("\"{word}\"")),
                        "{word} is not defined by the daemons"
                    );
                } else if word.starts_with("copier_") || word.starts_with("intercept_") {
                    assert!(
                        live.contains(&word),
                        "the dashboard's {word} (panel {}) is not a live series; live: {live:?}",
                        panel["title"]
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(
        checked >= 20,
        "only {checked} metric uses found in the dashboard"
    );
    c.assert_no_leak(&mut lab);
}
