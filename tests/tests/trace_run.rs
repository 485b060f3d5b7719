//! The copier's run trace (`--trace`) of a shaped run: a profile with ramp-up, steady and
//! ramp-down phases over steady online traffic of short sessions. The test server's count per
//! phase follows the schedule (what each online request's factor asks for), and the copier's
//! own trace passes `shaper check PROFILE --trace FILE`, whose rate line per phase is the
//! schedule held against the trace.

use lab::http::get;
use lab::setup::{tail, CopyOptions, Copying};
use lab::{addr, lab_or_skip, workspace_bin, Host, LogEntry};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

const PROFILE: &str = r#"
[multiplication]
factor = 1.0

[[schedule.phases]]
name = "ramp-up"
duration_s = 10
from = 0.2
to = 1.0

[[schedule.phases]]
name = "steady"
duration_s = 10
factor = 1.0

[[schedule.phases]]
name = "ramp-down"
duration_s = 10
from = 1.0
to = 0.2
"#;

/// Short sessions (one request each, closed by the client) at `rate` a second for `secs`.
fn steady_sessions(lab: &lab::Lab, rate: f64, secs: f64) {
    lab.in_ns(Host::Client, move || {
        let to = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80));
        let start = Instant::now();
        let mut i = 0u64;
        while start.elapsed().as_secs_f64() < secs {
            let due = start + Duration::from_secs_f64(i as f64 / rate);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            get(&mut s, &format!("/index.html?s={i}"));
            drop(s);
            i += 1;
        }
    })
    .unwrap();
}

fn msec(e: &LogEntry) -> f64 {
    e.msec.expect("nginx logs $msec") as f64 / 1000.0
}

#[test]
fn a_phased_run_follows_its_schedule_and_its_trace_passes_shaper_check() {
    let Some(mut lab) = lab_or_skip("a_phased_run_follows_its_schedule_and_its_trace_passes_shaper_check") else { return };
    let profile = lab.dir().join("phases.toml");
    std::fs::write(&profile, PROFILE).unwrap();
    let trace = lab.dir().join("run-trace.csv");
    let args = ["--metrics", "127.0.0.1:9477", "--seed", "3", "--profile", profile.to_str().unwrap(), "--trace", trace.to_str().unwrap()];
    let c = Copying::start(
        &mut lab,
        CopyOptions { copier_args: args.iter().map(|s| s.to_string()).collect(), ipv6: false, ..CopyOptions::default() },
    )
    .unwrap();

    steady_sessions(&lab, 80.0, 30.0);
    c.settle(Duration::from_secs(2), Duration::from_secs(60));
    c.check_alive().unwrap();
    let online = c.online.requests().unwrap();
    let test = c.test().requests().unwrap();
    // The schedule's clock starts at the first captured packet: the first online request.
    let t0 = online.iter().map(msec).fold(f64::INFINITY, f64::min);
    let p = shaper::Profile::from_toml_str(PROFILE).unwrap();
    let sched = p.schedule().unwrap();
    let phase = |t: f64| ((t - t0).max(0.0) / 10.0).min(2.0) as usize;
    let (mut want, mut got) = ([0.0f64; 3], [0.0f64; 3]);
    for e in &online {
        want[phase(msec(e))] += sched.factor_at(msec(e) - t0);
    }
    for e in &test {
        got[phase(msec(e))] += 1.0;
    }
    println!("per phase: online factor-weighted {want:?}, test server {got:?} ({} online)", online.len());
    for k in 0..3 {
        let tol = (0.05 * want[k]).max(3.0 * want[k].sqrt());
        assert!(
            (got[k] - want[k]).abs() <= tol,
            "phase {k}: the test server got {} requests, the schedule asks {:.1} (+- {tol:.1})\n{}",
            got[k],
            want[k],
            tail(&c.copier.as_ref().unwrap().log(), 20)
        );
    }

    // The shaper's metrics: the factor in force is the last phase's end value.
    let m = lab::setup::scrape_metrics(&lab, Host::Online, "127.0.0.1:9477");
    let factor = lab::setup::metric_sum(&m, "copier_shaper_factor", &[]);
    assert!((factor - 0.2).abs() < 1e-9, "factor in force {factor}, want 0.2 after the ramp-down:\n{m}");

    // Stop the copier so that the trace is complete, then check it.
    let copier = c.copier.as_ref().unwrap();
    copier.stop();
    let text = std::fs::read_to_string(&trace).unwrap();
    let rows = text.lines().count() - 1;
    assert_eq!(text.lines().next(), Some("time_s,copy,user,pool,target"));
    assert!((rows as f64 - test.len() as f64).abs() <= 2.0, "{rows} trace rows for {} test requests", test.len());
    let shaper = workspace_bin("shaper").unwrap();
    let out = std::process::Command::new(&shaper)
        .args(["check", profile.to_str().unwrap(), "--trace", trace.to_str().unwrap()])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    println!("{report}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "shaper check failed on the run's own trace:\n{report}");
    for phase in ["ramp-up", "steady", "ramp-down"] {
        assert!(report.contains(&format!("rate phase {phase}")), "no rate line for {phase}:\n{report}");
    }
    c.assert_no_leak(&mut lab);
}
