//! The shaper issue's acceptance tests that span modules: self-similarity of the aggregate,
//! a plan shared through its CSVs, and the `shaper` binary. (Per-module tests, e.g. KS, truncated
//! means, weighted choice, the translation table and validation messages, sit with each module.)

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use shaper::onoff::{OnOffModel, PeriodLaw, Plan};
use shaper::pareto::{beta_off_truncated, TruncatedPareto, Truncation};
use shaper::stats::{
    hurst_aggregated_variance, hurst_aggregated_variance_pooled, hurst_rescaled_range, log_sizes,
};
use shaper::users::UserTable;
use shaper::{Profile, Shaper};

/// alpha_on = alpha_off = 1.4, beta_on = 1 s, rho = 0.5, truncation far away (10^5 s, redraw) so
/// it does not shorten the dependence over the scales fitted.
fn model() -> OnOffModel {
    let on = TruncatedPareto::new(1.4, 1.0, 1e5, Truncation::Redraw).unwrap();
    let beta_off = beta_off_truncated(0.5, &on, 1.4, 1e5).unwrap();
    let off = TruncatedPareto::new(1.4, beta_off, 1e5, Truncation::Redraw).unwrap();
    OnOffModel {
        on: PeriodLaw::Pareto(on),
        off: PeriodLaw::Pareto(off),
    }
}

const SOURCES: usize = 64;
const BIN: f64 = 4.0;

fn series(m: &OnOffModel, duration: f64, seed: u64) -> Vec<f64> {
    Plan::generate(m, SOURCES, duration, &mut StdRng::seed_from_u64(seed))
        .unwrap()
        .on_count_series(BIN)
}

/// 64 sources with alpha = 1.4: H = (3 - 1.4) / 2 = 0.8 within 0.05.
///
/// Estimator: aggregated variance over blocks of 4..n/16 bins, taken around the known mean
/// `64 * rho` (the sample mean of a long-range-dependent series soaks up variance at large
/// blocks and biases H down), pooled over 4 independent plans of 2^18 s (2^16 bins each): a
/// single heavy-tailed path can tilt the curve by +-0.03, the pool averages that out. R/S is
/// checked on the same data with the same tolerance (it reads ~0.81, its usual upward bias).
#[test]
fn aggregate_of_pareto_sources_is_self_similar_with_h_0_8() {
    let m = model();
    let reps: Vec<Vec<f64>> = (0..4)
        .map(|seed| series(&m, 262_144.0, 100 + seed))
        .collect();
    let n = reps[0].len();
    assert_eq!(n, 65_536);
    let mean = SOURCES as f64 * m.rho();
    let pooled =
        hurst_aggregated_variance_pooled(&reps, &log_sizes(4, n / 16, 12), Some(mean)).unwrap();
    let singles: Vec<f64> = reps
        .iter()
        .map(|s| {
            hurst_aggregated_variance(s, &log_sizes(4, n / 16, 12), Some(mean))
                .unwrap()
                .h
        })
        .collect();
    assert!(
        (pooled.h - 0.8).abs() < 0.05,
        "pooled H {} (single paths {singles:?})",
        pooled.h
    );
    let rs: Vec<f64> = reps
        .iter()
        .map(|s| {
            hurst_rescaled_range(s, &log_sizes(16, n / 4, 12))
                .unwrap()
                .h
        })
        .collect();
    let rs_mean = rs.iter().sum::<f64>() / rs.len() as f64;
    assert!((rs_mean - 0.8).abs() < 0.05, "R/S {rs:?}");
}

/// The same means with exponential periods: short-range dependent, H near 0.5 (AV within 0.05;
/// R/S, biased up at these sizes, within 0.1).
#[test]
fn aggregate_of_exponential_sources_has_h_0_5() {
    let m = model().exponential_twin();
    let reps: Vec<Vec<f64>> = (0..2)
        .map(|seed| series(&m, 131_072.0, 200 + seed))
        .collect();
    let n = reps[0].len();
    let mean = SOURCES as f64 * m.rho();
    let pooled =
        hurst_aggregated_variance_pooled(&reps, &log_sizes(4, n / 16, 12), Some(mean)).unwrap();
    assert!((pooled.h - 0.5).abs() < 0.05, "pooled H {}", pooled.h);
    for s in &reps {
        let rs = hurst_rescaled_range(s, &log_sizes(16, n / 4, 12))
            .unwrap()
            .h;
        assert!((rs - 0.5).abs() < 0.1, "R/S {rs}");
    }
}

const PROFILE: &str = r#"
[multiplication]
factor = 2.5
[onoff]
enabled = true
sources = 16
horizon_s = 3600
rho = 0.4
[[pools]]
name = "home"
weight = 0.7
cidr = "198.19.0.0/20"
users = 400
[[pools]]
name = "office"
weight = 0.3
cidr = "198.19.64.0/24"
users = 50
"#;

/// Two copiers given the same plan and user table (through their CSVs) and the same seed make
/// the same decisions for the same sessions.
#[test]
fn a_plan_shared_through_csv_gives_the_same_decisions() {
    let p = Profile::from_toml_str(PROFILE).unwrap();
    let a = Shaper::new(&p, 11).unwrap();
    let plan = Plan::from_csv(&a.plan().unwrap().to_csv()).unwrap();
    let users = UserTable::from_csv(&a.users().unwrap().to_csv()).unwrap();
    let mut b = Shaper::with_tables(&p, Some(plan), Some(users), 11).unwrap();
    let mut a = a;
    for i in 0..500u32 {
        let now = Duration::from_millis(u64::from(i) * 37);
        let client: SocketAddr = format!("203.0.113.{}:{}", i % 250, 40000 + i)
            .parse()
            .unwrap();
        let pa = a.on_session(now, client).unwrap();
        let pb = b.on_session(now, client).unwrap();
        assert_eq!(pa, pb);
        for (x, y) in pa.iter().zip(&pb) {
            assert_eq!(
                a.release_at(now, x.session, 0).unwrap(),
                b.release_at(now, y.session, 0).unwrap()
            );
        }
    }
    let mismatched = Plan::generate(
        &p.onoff_model().unwrap(),
        3,
        10.0,
        &mut StdRng::seed_from_u64(1),
    )
    .unwrap();
    assert!(Shaper::with_tables(&p, Some(mismatched), None, 11).is_err());
}

fn shaper_bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shaper"))
}

#[test]
fn cli_plan_writes_csvs_that_check_passes() {
    let dir = std::env::temp_dir().join(format!("shaper-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let profile = dir.join("p.toml");
    std::fs::write(&profile, PROFILE).unwrap();
    let out = dir.join("plan");
    let o = shaper_bin()
        .args([
            "plan",
            profile.to_str().unwrap(),
            "--duration",
            "2h",
            "--seed",
            "5",
            "--out",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let plan = Plan::from_csv(&std::fs::read_to_string(out.join("onoff.csv")).unwrap()).unwrap();
    assert_eq!((plan.sources(), plan.duration()), (16, 7200.0));
    let users =
        UserTable::from_csv(&std::fs::read_to_string(out.join("users.csv")).unwrap()).unwrap();
    assert_eq!(users.users().len(), 450);

    let o = shaper_bin()
        .args([
            "check",
            profile.to_str().unwrap(),
            "--plan",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for line in [
        "achieved rho",
        "tail index ON (MLE)",
        "tail index OFF (Hill",
        "Hurst (aggregated variance)",
        "Hurst (R/S)",
        "pool share home",
        "pool share office",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(line) && l.ends_with("PASS")),
            "{line}:\n{stdout}"
        );
    }

    // A profile whose targets the plan does not meet: FAIL lines and exit code 1.
    let other = dir.join("other.toml");
    std::fs::write(&other, PROFILE.replace("rho = 0.4", "rho = 0.7")).unwrap();
    let o = shaper_bin()
        .args([
            "check",
            other.to_str().unwrap(),
            "--plan",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout)
        .lines()
        .any(|l| l.starts_with("achieved rho") && l.ends_with("FAIL")));

    // Validation errors name the key and the range.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[onoff]\nalpha_on = 2.3\n").unwrap();
    let o = shaper_bin()
        .args(["check", bad.to_str().unwrap()])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("onoff.alpha_on = 2.3: must be in (1, 2)"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A trace of what a gated run would send (every request released by the Shaper), checked
/// against its profile: the ON/OFF gating shows in the inferred rho and the pools in the shares.
#[test]
fn cli_check_reads_a_trace() {
    let p = Profile::from_toml_str(PROFILE).unwrap();
    let mut s = Shaper::new(&p, 12).unwrap();
    let mut csv = String::from("time_s,source,pool\n");
    // 3,000 sessions of 5 requests, 0.2 s apart online.
    for i in 0..3000u32 {
        let start = Duration::from_millis(u64::from(i) * 1000);
        let client: SocketAddr = format!("203.0.{}.{}:40000", (i / 250) % 256, i % 250)
            .parse()
            .unwrap();
        for plan in s.on_session(start, client).unwrap() {
            let pool = s.users().unwrap().user(plan.user.unwrap()).pool;
            let name = s.users().unwrap().pool_names()[pool].clone();
            for k in 0..5u32 {
                let t = s
                    .release_at(
                        start + Duration::from_millis(u64::from(k) * 200),
                        plan.session,
                        k,
                    )
                    .unwrap();
                csv.push_str(&format!(
                    "{},{},{}\n",
                    t.as_secs_f64(),
                    plan.source.unwrap(),
                    name
                ));
            }
            s.end_session(plan.session);
        }
    }
    let dir = std::env::temp_dir().join(format!("shaper-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (trace, profile) = (dir.join("trace.csv"), dir.join("p.toml"));
    std::fs::write(&trace, csv).unwrap();
    std::fs::write(&profile, PROFILE).unwrap();
    let o = shaper_bin()
        .args([
            "check",
            profile.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
            "--bin",
            "10",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    for line in ["pool share home", "pool share office"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(line) && l.ends_with("PASS")),
            "{line}:\n{stdout}"
        );
    }
    assert!(stdout.contains("achieved rho (inferred)"), "{stdout}");
    assert!(stdout.contains("Hurst (R/S)"), "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}
