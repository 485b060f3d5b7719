//! `--compare-sample` cuts the control channel's bytes: the copier asks its intercept for the
//! answers' payload only on the sessions it compares (RegisterPayload), so the others cost what
//! a copy without `--compare` costs (headers-only records). Real curl against nginx version 1
//! online and version 2 on test (one JSON field of `/items/N` changed), 16 KB answers on 200
//! short sessions, the intercept run with `--payload-bytes 65495` (its cap, not what it sends).

use std::time::Duration;

use lab::setup::{control_bytes_received, metric_sum, tail, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host, NginxOptions};

const METRICS: &str = "127.0.0.1:9475";
const SESSIONS: usize = 200;
const FILE: usize = 16 << 10;

fn nginx(version: u8) -> NginxOptions {
    let price = if version == 2 { "$1.50" } else { "$1.00" };
    NginxOptions {
        files: vec![("f.bin".into(), FILE)],
        server_extra: format!(
            r#"location ~ ^/items/(\d+)$ {{ default_type application/json; return 200 '{{"id":$1,"price":"{price}"}}'; }}"#
        ),
        ..NginxOptions::default()
    }
}

#[test]
fn a_ten_percent_sample_asks_payload_only_for_its_sessions() {
    let Some(mut lab) = lab_or_skip("a_ten_percent_sample_asks_payload_only_for_its_sessions")
    else {
        return;
    };
    let opts = CopyOptions {
        online: nginx(1),
        test: Some(nginx(2)),
        ipv6: false,
        intercept_args: vec!["--payload-bytes".into(), "65495".into()],
        copier_args: vec![
            "--compare".into(),
            "--compare-sample".into(),
            "10".into(),
            "--metrics".into(),
            METRICS.into(),
        ],
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    for root in [c.online.docroot(), c.test().docroot()] {
        let f = root.join("f.bin");
        std::process::Command::new("touch")
            .arg("-d")
            .arg("@1700000000")
            .arg(&f)
            .status()
            .unwrap();
    }
    let before = control_bytes_received(&lab);
    // One session per curl: two requests on it, the JSON item and the 16 KB file.
    let u = format!("http://{}", addr::ONLINE);
    let script = format!("for i in $(seq 1 {SESSIONS}); do curl -sS {u}/items/$i {u}/f.bin >/dev/null || exit 1; done");
    lab.sh(Host::Client, &script).unwrap();
    // nginx logs a request after its answer went out: curl may have read it first.
    let online_n = c.online.wait_requests(2 * SESSIONS, Duration::from_secs(5));
    assert_eq!(online_n, 2 * SESSIONS);
    let test_n = c.test().wait_requests(online_n, Duration::from_secs(60));
    assert_eq!(test_n, online_n, "every request copied");
    // Let the last records and comparisons arrive.
    let mut m = String::new();
    let mut compared = -1.0;
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(500));
        m = lab::bench::fetch_metrics(&lab, Host::Online, METRICS);
        let now = metric_sum(&m, "copier_compare_exchanges_total", &[]);
        if now == compared && now > 0.0 {
            break;
        }
        compared = now;
    }
    let bytes = control_bytes_received(&lab).saturating_sub(before) as f64;
    let log = tail(&c.copier.as_ref().unwrap().log(), 30);

    // Comparisons still work on the sampled sessions: each compares its two exchanges, and
    // names the changed field of /items.
    let sessions = compared / 2.0;
    assert!(
        (4.0..=60.0).contains(&sessions),
        "about 10% of {SESSIONS} sessions compared, got {compared} exchanges:\n{m}\n{log}"
    );
    assert_eq!(compared.fract(), 0.0);
    let items = metric_sum(
        &m,
        "copier_compare_exchanges_total",
        &["result=\"differ\"", "endpoint=\"GET /items/{n}\""],
    );
    assert_eq!(items, sessions, "the sampled /items answers differ:\n{m}");
    let equal = metric_sum(&m, "copier_compare_exchanges_total", &["result=\"equal\""]);
    assert_eq!(equal, sessions, "the file is the same:\n{m}");
    assert_eq!(
        metric_sum(&m, "copier_compare_not_compared_total", &[]),
        0.0,
        "{m}"
    );

    // The control bytes: the sampled sessions' answers (payload) plus headers-only records of
    // every session. Were payload sent on every session, it would be 200 x 16 KB and more.
    let answer = FILE as f64 + 600.0;
    let payload_of_sampled = sessions * answer;
    let per_unsampled = (bytes - payload_of_sampled) / SESSIONS as f64;
    eprintln!(
        "control bytes: {bytes} for {SESSIONS} sessions ({compared} exchanges compared): {:.0} B/request, \
         {per_unsampled:.0} B per session besides the sampled answers",
        bytes / online_n as f64
    );
    assert!(
        bytes > payload_of_sampled * 0.9,
        "the sampled answers came with their payload: {bytes} B"
    );
    assert!(
        per_unsampled < 2000.0,
        "a session not compared costs headers-only records (about 16 of about 70 B), not its answers: \
         {per_unsampled:.0} B per session"
    );
    assert!(
        bytes < 0.4 * SESSIONS as f64 * FILE as f64,
        "far below payload on every session: {bytes} B"
    );
    c.check_alive().unwrap();
}
