//! The copier's run trace (`--trace`) of shaped runs: a profile with ramp-up, steady and
//! ramp-down phases, and one on a CSV curve of production's rate, over steady online traffic of
//! short sessions. The test server's count per phase (or bucket) follows the schedule (what
//! each online request's factor asks for), and the copier's own trace passes `shaper check
//! PROFILE --trace FILE`, whose rate line per phase (or bucket) is the schedule held against
//! the trace.

use lab::setup::{paced_sessions, tail, CopyOptions, Copying};
use lab::{lab_or_skip, workspace_bin, Host, LogEntry};
use std::time::Duration;

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

fn msec(e: &LogEntry) -> f64 {
    e.msec.expect("nginx logs $msec") as f64 / 1000.0
}

/// Runs short sessions at `rate` a second for `secs` s through a copier shaped by the profile
/// `text` (written as `name`, with `curve` as its curve CSV when given), then checks that the
/// test server's count in each stretch of `stretches` (start, end: seconds since the first
/// online request) is what the schedule asks (each online request weighted by its factor) within
/// 5 % or 3 sigma, that the copier's trace has a row per request the test server got, and that
/// `shaper check PROFILE --trace` passes it with a rate line per stretch, named by `lines`.
#[allow(clippy::too_many_arguments)]
fn shaped_run(
    test: &str,
    name: &str,
    text: &str,
    curve: Option<&str>,
    rate: f64,
    secs: f64,
    stretches: &[(f64, f64)],
    lines: &[&str],
) {
    let Some(mut lab) = lab_or_skip(test) else {
        return;
    };
    let mut text = text.to_string();
    if let Some(csv) = curve {
        let path = lab.dir().join(format!("{name}.csv"));
        std::fs::write(&path, csv).unwrap();
        text = text.replace("CURVE", path.to_str().unwrap());
    }
    let profile = lab.dir().join(format!("{name}.toml"));
    std::fs::write(&profile, &text).unwrap();
    let trace = lab.dir().join("run-trace.csv");
    let args = [
        "--metrics",
        "127.0.0.1:9477",
        "--seed",
        "3",
        "--profile",
        profile.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
    ];
    let c = Copying::start(
        &mut lab,
        CopyOptions {
            copier_args: args.iter().map(|s| s.to_string()).collect(),
            ipv6: false,
            ..CopyOptions::default()
        },
    )
    .unwrap();

    paced_sessions(&lab, move |_| rate, secs);
    c.settle(Duration::from_secs(2), Duration::from_secs(60));
    c.check_alive().unwrap();
    let online = c.online.requests().unwrap();
    let test = c.test().requests().unwrap();
    // The schedule's clock starts at the first captured packet: the first online request.
    let t0 = online.iter().map(msec).fold(f64::INFINITY, f64::min);
    let p = shaper::Profile::load(&profile).unwrap();
    let sched = p.schedule().unwrap();
    let stretch = |t: f64| {
        stretches
            .iter()
            .position(|&(a, b)| t - t0 >= a && t - t0 < b)
    };
    let (mut want, mut got) = (vec![0.0f64; stretches.len()], vec![0.0f64; stretches.len()]);
    for e in &online {
        if let Some(k) = stretch(msec(e)) {
            want[k] += sched.factor_at(msec(e) - t0);
        }
    }
    for e in &test {
        if let Some(k) = stretch(msec(e)) {
            got[k] += 1.0;
        }
    }
    println!(
        "per stretch: online factor-weighted {want:.1?}, test server {got:?} ({} online)",
        online.len()
    );
    for k in 0..stretches.len() {
        let tol = (0.05 * want[k]).max(3.0 * want[k].sqrt());
        assert!(
            (got[k] - want[k]).abs() <= tol,
            "stretch {k}: the test server got {} requests, the schedule asks {:.1} (+- {tol:.1})\n{}",
            got[k],
            want[k],
            tail(&c.copier.as_ref().unwrap().log(), 20)
        );
    }

    // The shaper's metrics: the factor in force is the schedule's last value.
    let m = lab::setup::scrape_metrics(&lab, Host::Online, "127.0.0.1:9477");
    let factor = lab::setup::metric_sum(&m, "copier_shaper_factor", &[]);
    let last = sched.factor_at(1e9);
    assert!(
        (factor - last).abs() < 1e-6,
        "factor in force {factor}, want {last} at the schedule's end:\n{m}"
    );

    // Stop the copier so that the trace is complete, then check it.
    let copier = c.copier.as_ref().unwrap();
    copier.stop();
    let text = std::fs::read_to_string(&trace).unwrap();
    let rows = text.lines().count() - 1;
    assert_eq!(
        text.lines().next(),
        Some("time_s,copy,user,pool,target,answer_s")
    );
    assert!(
        (rows as f64 - test.len() as f64).abs() <= 2.0,
        "{rows} trace rows for {} test requests",
        test.len()
    );
    let shaper = workspace_bin("shaper").unwrap();
    let out = std::process::Command::new(&shaper)
        .args([
            "check",
            profile.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    println!("{report}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "shaper check failed on the run's own trace:\n{report}"
    );
    for line in lines {
        assert!(report.contains(line), "no {line:?} line:\n{report}");
    }
    c.assert_no_leak(&mut lab);
}

#[test]
fn a_phased_run_follows_its_schedule_and_its_trace_passes_shaper_check() {
    shaped_run(
        "a_phased_run_follows_its_schedule_and_its_trace_passes_shaper_check",
        "phases",
        PROFILE,
        None,
        80.0,
        30.0,
        &[(0.0, 10.0), (10.0, 20.0), (20.0, 30.0)],
        &[
            "rate phase ramp-up",
            "rate phase steady",
            "rate phase ramp-down",
        ],
    );
}

/// Production's curve in 10 s buckets (rates 40, 80, 120, 60: factors of their mean, 75).
#[test]
fn a_run_on_a_csv_curve_follows_it_and_its_trace_passes_shaper_check() {
    let text = "[schedule]\ncurve_csv = \"CURVE\"\n";
    shaped_run(
        "a_run_on_a_csv_curve_follows_it_and_its_trace_passes_shaper_check",
        "curve",
        text,
        Some("time_s,rate\n0,40\n10,80\n20,120\n30,60\n"),
        60.0,
        40.0,
        &[(0.0, 10.0), (10.0, 20.0), (20.0, 30.0), (30.0, 40.0)],
        &[
            "rate bucket 0-10 s",
            "rate bucket 10-20 s",
            "rate bucket 20-30 s",
            "rate bucket 30-40 s",
        ],
    );
}
