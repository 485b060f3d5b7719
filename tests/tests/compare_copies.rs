//! `--compare` with `--copies 3`: every session goes three times to the candidate (nginx serving
//! version 2 on `test`: one JSON field of `/items/N` changed, `/orders/N` answers 500), and copy
//! 0, the one on the client's own address and port, is compared with the online answer (nginx
//! version 1): the other copies' answers (on other client ports) are never paired with a
//! connection (nor followed). Keep-alive and short connections from real curl. The metrics must count every
//! request compared exactly once and name exactly the two changed endpoints.

use std::time::Duration;

use lab::setup::{metric_sum, shop_nginx, tail, wait_metric, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host};

const METRICS: &str = "127.0.0.1:9476";

#[test]
fn compare_with_three_copies_compares_copy_zero_once() {
    let Some(mut lab) = lab_or_skip("compare_with_three_copies_compares_copy_zero_once") else {
        return;
    };
    let opts = CopyOptions {
        online: shop_nginx(1),
        test: Some(shop_nginx(2)),
        ipv6: false,
        intercept_args: vec!["--payload-bytes".into(), "65495".into()],
        copier_args: vec![
            "--compare".into(),
            "--copies".into(),
            "3".into(),
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
        r#"set -e
for c in $(seq 1 8); do
  urls=""
  for i in $(seq 1 4); do urls="$urls {u}/items/$((c * 4 + i)) {u}/orders/$i {u}/health"; done
  curl -sS $urls >/dev/null
done
for i in $(seq 1 10); do curl -sS --http1.0 {u}/items/$i >/dev/null; curl -sS --http1.0 {u}/orders/$i >/dev/null; done
"#
    );
    lab.sh(Host::Client, &script).unwrap();
    let (items, orders, health) = (8 * 4 + 10, 8 * 4 + 10, 8 * 4);
    let n = items + orders + health;
    // nginx logs a request after its answer is sent: the client can finish first
    assert_eq!(c.online.wait_requests(n, Duration::from_secs(5)), n);
    assert_eq!(
        c.test().wait_requests(3 * n, Duration::from_secs(60)),
        3 * n,
        "three copies of every request"
    );
    let log = || tail(&c.copier.as_ref().unwrap().log(), 30);
    let m = wait_metric(
        &lab,
        Host::Online,
        METRICS,
        "copier_compare_exchanges_total",
        &[],
        n as f64,
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", log()));
    // past --compare-timeout: nothing more is compared, and no answer of another copy waited
    // in vain for its online part (expired)
    std::thread::sleep(Duration::from_secs(4));
    let m2 = lab::bench::fetch_metrics(&lab, Host::Online, METRICS);
    let r = |result: &str, ep: &str| {
        let mut l = vec![format!("result=\"{result}\"")];
        if !ep.is_empty() {
            l.push(format!("endpoint=\"{ep}\""));
        }
        let l: Vec<&str> = l.iter().map(String::as_str).collect();
        metric_sum(&m2, "copier_compare_exchanges_total", &l)
    };
    assert_eq!(
        metric_sum(&m2, "copier_compare_exchanges_total", &[]),
        n as f64,
        "every request compared once (copy 0):\n{m}\n{m2}"
    );
    assert_eq!(r("differ", "GET /items/{n}"), items as f64, "{m2}");
    assert_eq!(r("differ", "GET /orders/{n}"), orders as f64, "{m2}");
    assert_eq!(
        r("differ", ""),
        (items + orders) as f64,
        "only those two endpoints differ:\n{m2}"
    );
    assert_eq!(r("equal", ""), health as f64, "{m2}");
    assert_eq!(
        metric_sum(
            &m2,
            "copier_compare_differences_total",
            &["kind=\"header\""]
        ),
        0.0,
        "{m2}"
    );
    assert_eq!(
        metric_sum(
            &m2,
            "copier_compare_differences_total",
            &["kind=\"status\""]
        ),
        orders as f64,
        "{m2}"
    );
    assert_eq!(
        metric_sum(&m2, "copier_compare_malformed_total", &[]),
        0.0,
        "{m2}"
    );
    for reason in ["expired", "unsynced", "not_http", "queue_full"] {
        let v = metric_sum(
            &m2,
            "copier_compare_not_compared_total",
            &[&format!("reason=\"{reason}\"")],
        );
        assert_eq!(v, 0.0, "{reason}:\n{m2}\n{}", log());
    }
    // the comparison follows the 28 client connections, not the other copies' 56 (their
    // answers, on other client ports, are not handed to it)
    assert_eq!(
        metric_sum(&m2, "copier_compare_connections", &[]),
        28.0,
        "{m2}"
    );
    c.check_alive().unwrap();
    c.assert_no_leak(&mut lab);
}
