//! The copier's floor (issue 32): during each CPU scenario (keep-alive 4 ms think, one request
//! per connection 4 ms think, 100 KB answers 4 ms think, keep-alive full speed on 16
//! connections) `copier-floor` runs beside the copier on `online`, on the same load: the same
//! capture ring, kernel filter, capture thread and sender as the copier's, a stateless rewrite
//! of the destination in between (see `copier/src/bin/copier-floor.rs`). Its copies go to the
//! test host's port [`FLOOR_PORT`], where nothing listens: the test host's kernel answers each
//! with a reset (toward the client's address through `online`, whose kernel drops it), so they
//! disturb neither the copier's sessions nor the intercept (it queues only the mapped ports'
//! answers); with `--floor-drop` the test host drops them in raw PREROUTING instead. It sends
//! every captured segment, the clients' bare ACKs too (the copier makes its own ACKs and copies
//! none of those); `--floor-data-only` leaves them out (`copier-floor --data-only`). It starts
//! once the scenario's connections are warm, just before the step's counters are read. It runs
//! in think-ka, think-close, think-100k, full16 and full100k (at full speed it takes CPU from the
//! copier on a 2-core machine: `--no-floor` for full100k's real-time figures alone). Its CPU
//! (all its threads, from `/proc/PID/task/*/schedstat`, over the same window as the copier's)
//! per 1,000 copied requests is the floor; the copier's over it the ratio (target 1.25). The
//! intercept's floor is not run here: `bench_intercept`'s bare NFQUEUE reader is it.

use super::*;
use std::process::{Child, Stdio};

/// The test host's port the floor's copies go to (nothing listens there).
pub(super) const FLOOR_PORT: u16 = 9;
/// The copier's CPU over its floor's that the issue asks for at most.
pub(super) const FLOOR_TARGET: f64 = 1.25;

/// The scenarios that run the floor beside the copier.
pub(super) fn measured(sc: Scenario) -> bool {
    matches!(
        sc,
        Scenario::ThinkKeepAlive
            | Scenario::ThinkClose
            | Scenario::Think100k
            | Scenario::Full16
            | Scenario::Full100k
    )
}

/// A running `copier-floor` in `online`; killed when dropped.
#[derive(Debug)]
pub(super) struct Floor {
    child: Child,
    log: std::path::PathBuf,
}

impl Floor {
    /// Starts `copier-floor` (with `extra` flags) on `online`'s client link, mapping port 80 to
    /// the test host's [`FLOOR_PORT`], and waits until its capture is open.
    pub(super) fn start(lab: &Lab, tag: &str, extra: &[String]) -> Result<Floor> {
        let bin = lab::workspace_bin("copier-floor")?
            .to_string_lossy()
            .into_owned();
        let map = format!("80={}:{FLOOR_PORT}", addr::TEST);
        let log = lab.dir().join(format!("copier-floor-{tag}.log"));
        let out =
            std::fs::File::create(&log).with_context(|| format!("create {}", log.display()))?;
        let err = out.try_clone()?;
        let mut argv = vec![
            bin.as_str(),
            "--map",
            &map,
            "--interface",
            lab::ifname::ONLINE_TO_CLIENT,
        ];
        argv.extend(extra.iter().map(String::as_str));
        let child = lab
            .command(Host::Online, &argv)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("start {bin}"))?;
        let mut f = Floor { child, log };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f.log().contains("copier-floor: capturing") {
            if let Some(st) = f.child.try_wait()? {
                bail!("copier-floor exited ({st}):\n{}", tail(&f.log(), 20));
            }
            if Instant::now() >= deadline {
                bail!(
                    "copier-floor did not open its capture in 10 s:\n{}",
                    tail(&f.log(), 20)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // its capture thread and ring are up: let the first block time out once
        std::thread::sleep(Duration::from_millis(100));
        Ok(f)
    }

    pub(super) fn cpu(&self) -> Result<Cpu> {
        Cpu::read(self.child.id(), None)
    }

    pub(super) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Packets captured and sent, from its last counters line once one came after the load
    /// (`load_end`; it prints them every second in which they changed, and copies stop
    /// coming soon after the load).
    pub(super) fn packets(&self, load_end: Instant) -> (u64, u64) {
        std::thread::sleep(
            (load_end + Duration::from_millis(1300)).saturating_duration_since(Instant::now()),
        );
        parse_counters(&self.log())
    }

    /// Fails if it exited.
    pub(super) fn check_alive(&mut self) -> Result<()> {
        if let Some(st) = self.child.try_wait()? {
            bail!("copier-floor exited ({st}):\n{}", tail(&self.log(), 20));
        }
        Ok(())
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        // our own child (`ip netns exec` exec'd it): its pid is the floor's
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// (captured, sent) in the last counters line of a `copier-floor` log.
fn parse_counters(log: &str) -> (u64, u64) {
    let Some(line) = log
        .lines()
        .rev()
        .find(|l| l.starts_with("copier-floor: captured "))
    else {
        return (0, 0);
    };
    let after = |key: &str| -> u64 {
        line.split_once(key)
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (after("captured "), after("sent "))
}

/// The copier's CPU over its floor's, per scenario that ran the floor.
pub(super) fn print_floor(rows: &[Row], dropped: bool, data_only: bool) {
    let rows: Vec<&Row> = rows.iter().filter(|r| r.floor.is_some()).collect();
    if rows.is_empty() {
        return;
    }
    println!(
        "| scenario | copied requests | copier CPU s/1000 req | floor CPU s/1000 req | copier / floor | target <= {FLOOR_TARGET} | \
         copier segments sent/req | floor packets captured/req | floor packets sent/req |"
    );
    println!("|---|---:|---:|---:|---:|---|---:|---:|---:|");
    let opt = |v: Option<f64>| v.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into());
    for r in rows {
        let floor = r.floor.as_ref().expect("filtered");
        let ratio = floor_ratio(r);
        let per_req = |n: u64| n as f64 / r.rt.copied.max(1) as f64;
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} |",
            r.label,
            r.rt.copied,
            opt(per_thousand(&r.copier, r.rt.copied)),
            opt(per_thousand(floor, r.rt.copied)),
            ratio
                .map(|v| format!("{v:.2}"))
                .unwrap_or_else(|| "-".into()),
            match ratio {
                Some(v) if v <= FLOOR_TARGET => "PASS",
                Some(_) => "FAIL",
                None => "-",
            },
            per_req(r.segments_sent),
            per_req(r.floor_packets.0),
            per_req(r.floor_packets.1),
        );
    }
    println!();
    if data_only {
        println!("(--floor-data-only: the floor leaves out the clients' bare ACKs, copier-floor --data-only)");
    }
    let fate = if dropped {
        "dropped there in raw PREROUTING (--floor-drop)"
    } else {
        "answered there with resets"
    };
    println!("(the floor: copier-floor beside the copier on the same load, the same capture ring, filter and sender, a");
    println!("stateless destination rewrite, its copies to the test host's port {FLOOR_PORT}, {fate}; both CPUs over the same window,");
    println!("divided by the same copied requests; a super-segment sent whole counts as one packet sent. The");
    println!("intercept's floor is bench_intercept's bare NFQUEUE reader.)");
}

/// The copier's CPU over its floor's in `r`, if the floor ran and used any and copies came.
pub(super) fn floor_ratio(r: &Row) -> Option<f64> {
    let f = r.floor.as_ref()?.secs();
    (f > 0.0 && r.rt.copied > 0).then(|| r.copier.secs() / f)
}
