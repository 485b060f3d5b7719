//! The closed loop on the rate (`copier --target-rate`): short online sessions at 50 a second,
//! a target of 150 request units a second at the test side and no factor given. From the test
//! nginx's own log: the loop reaches the target within 10 s and holds it within 5 % (per 5 s
//! window); the online rate then doubles and the loop follows (the factor halves) within 10 s.

use lab::http::get;
use lab::setup::{metric_sum, scrape_metrics, tail, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host, LogEntry};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

const METRICS: &str = "127.0.0.1:9478";

/// Short sessions (one request each) at `rate(t)` a second for `secs` seconds.
fn sessions(lab: &lab::Lab, rate: fn(f64) -> f64, secs: f64) {
    lab.in_ns(Host::Client, move || {
        let to = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80));
        let start = Instant::now();
        let mut i = 0u64;
        let mut due = 0.0;
        while due < secs {
            if let Some(wait) = (start + Duration::from_secs_f64(due)).checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            get(&mut s, &format!("/index.html?s={i}"));
            drop(s);
            i += 1;
            due += 1.0 / rate(due);
        }
    })
    .unwrap();
}

fn secs(e: &LogEntry) -> f64 {
    e.msec.expect("nginx logs $msec") as f64 / 1000.0
}

/// Per-second counts of `log` from `t0`.
fn per_second(log: &[LogEntry], t0: f64, n: usize) -> Vec<f64> {
    let mut v = vec![0.0; n];
    for e in log {
        let s = secs(e) - t0;
        if s >= 0.0 && (s as usize) < n {
            v[s as usize] += 1.0;
        }
    }
    v
}

#[test]
fn a_target_rate_is_reached_held_and_followed_when_the_online_rate_doubles() {
    let Some(mut lab) = lab_or_skip("a_target_rate_is_reached_held_and_followed_when_the_online_rate_doubles") else {
        return;
    };
    let args = ["--target-rate", "150", "--metrics", METRICS, "--seed", "4"];
    let c = Copying::start(
        &mut lab,
        CopyOptions { copier_args: args.iter().map(|s| s.to_string()).collect(), ipv6: false, ..CopyOptions::default() },
    )
    .unwrap();
    // The loop's metrics are read near the end, while the traffic still flows.
    let m = std::thread::scope(|sc| {
        let scrape = sc.spawn(|| {
            std::thread::sleep(Duration::from_secs(41));
            scrape_metrics(&lab, Host::Online, METRICS)
        });
        sessions(&lab, |t| if t < 25.0 { 50.0 } else { 100.0 }, 45.0);
        scrape.join().unwrap()
    });
    c.settle(Duration::from_secs(2), Duration::from_secs(30));
    c.check_alive().unwrap();
    let online = c.online.requests().unwrap();
    let test = c.test().requests().unwrap();
    let t0 = online.iter().map(secs).fold(f64::INFINITY, f64::min);
    let on = per_second(&online, t0, 45);
    let got = per_second(&test, t0, 45);
    let table: String = (0..45).map(|s| format!("{s:>3}s online {:>4} test {:>4}\n", on[s], got[s])).collect();
    println!("{table}");
    let window = |a: usize| got[a..a + 5].iter().sum::<f64>() / 5.0;
    let log = || tail(&c.copier.as_ref().unwrap().log(), 20);
    // Reached within 10 s, then held (5 s windows within 5 %) until the online rate changes.
    for a in [10, 15, 20] {
        let r = window(a);
        assert!((r / 150.0 - 1.0).abs() <= 0.05, "{a}-{}s: {r:.1}/s at the test server, want 150 +- 5%\n{table}\n{}", a + 5, log());
    }
    // The online rate doubled at 25 s: back on target within 10 s.
    for a in [35, 40] {
        let r = window(a);
        assert!((r / 150.0 - 1.0).abs() <= 0.05, "{a}-{}s after the doubling: {r:.1}/s, want 150 +- 5%\n{table}\n{}", a + 5, log());
    }
    // The factor in force halved with the doubled traffic; the loop's own figures agree.
    let factor = metric_sum(&m, "copier_shaper_factor", &[]);
    assert!((factor - 1.5).abs() <= 0.15, "factor in force {factor}, want about 1.5:\n{m}");
    let err = metric_sum(&m, "copier_rate_error", &[]);
    assert!(err.abs() <= 0.1, "the loop's error {err}:\n{m}");
    assert_eq!(metric_sum(&m, "copier_rate_target", &[]), 150.0, "{m}");
    c.assert_no_leak(&mut lab);
}
