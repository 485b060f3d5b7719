//! `copier-floor`, bench_copier's floor (issue 32), end to end: beside a running copier it
//! captures the clients' segments on `online`, and every one of them reaches the test host at
//! the rewritten address and port with a valid checksum (the test host's TCP answers each with
//! a reset and counts no checksum error), while the copier's own copies stay exact.

use lab::setup::{wait_log, CopyOptions, Copying};
use lab::{addr, ifname, lab_or_skip, workspace_bin, Host};
use std::time::{Duration, Instant};

const FLOOR_PORT: u16 = 9;
const FETCHES: usize = 20;

/// Packets counted by the test host's raw PREROUTING rule for the floor's port.
fn counted(lab: &lab::Lab) -> u64 {
    let out = lab
        .exec_ok(
            Host::Test,
            &[
                "iptables",
                "-t",
                "raw",
                "-L",
                "PREROUTING",
                "-v",
                "-x",
                "-n",
            ],
        )
        .unwrap();
    out.lines()
        .find(|l| l.contains(&format!("dpt:{FLOOR_PORT}")))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("the counting rule")
}

/// Packets the floor says it sent (its last counters line).
fn sent(log: &str) -> u64 {
    log.lines()
        .rev()
        .find_map(|l| {
            l.split_once("; sent ")
                .and_then(|(_, r)| r.split_whitespace().next())
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

#[test]
fn the_floor_sends_every_captured_segment_rewritten_with_valid_checksums() {
    let Some(mut lab) =
        lab_or_skip("the_floor_sends_every_captured_segment_rewritten_with_valid_checksums")
    else {
        return;
    };
    let c = Copying::start(&mut lab, CopyOptions::default()).unwrap();
    let port = FLOOR_PORT.to_string();
    lab.exec_ok(
        Host::Test,
        &[
            "iptables",
            "-t",
            "raw",
            "-I",
            "PREROUTING",
            "-p",
            "tcp",
            "--dport",
            &port,
        ],
    )
    .unwrap();
    let bin = workspace_bin("copier-floor")
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let map = format!("80={}:{FLOOR_PORT}", addr::TEST);
    let floor = lab
        .spawn(
            Host::Online,
            "copier-floor",
            &[&bin, "--map", &map, "--interface", ifname::ONLINE_TO_CLIENT],
        )
        .unwrap();
    wait_log(&floor, "copier-floor: capturing", Duration::from_secs(10)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let (csum0, rst0) = (
        lab.netstat_counter(Host::Test, "TcpInCsumErrors").unwrap(),
        lab.netstat_counter(Host::Test, "TcpOutRsts").unwrap(),
    );

    let script = format!(
        "curl -sS --fail --max-time 30 -o /dev/null 'http://{}/index.html?n=[1-{FETCHES}]'",
        addr::ONLINE
    );
    lab.sh(Host::Client, &script).unwrap();
    assert_eq!(
        c.assert_copied_exactly(&mut lab),
        FETCHES,
        "the copier's copies beside the floor"
    );

    // The floor prints its counters every second in which they changed: wait until its count
    // and the test host's agree and stay so.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut s, mut n) = (0, 0);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1200));
        let (s1, n1) = (sent(&floor.log()), counted(&lab));
        if s1 > 0 && s1 == n1 && (s1, n1) == (s, n) {
            break;
        }
        (s, n) = (s1, n1);
    }
    let log = floor.log();
    assert!(
        s > 0 && s == n,
        "the floor sent {s}, the test host counted {n}:\n{log}"
    );
    // a handshake, FETCHES requests and their ACKs, a close: every one copied
    assert!(s >= 2 * FETCHES as u64 + 2, "only {s} segments:\n{log}");
    let csum = lab.netstat_counter(Host::Test, "TcpInCsumErrors").unwrap() - csum0;
    let rsts = lab.netstat_counter(Host::Test, "TcpOutRsts").unwrap() - rst0;
    eprintln!("copier-floor sent {s} segments, the test host counted {n} and sent {rsts} resets, {csum} checksum errors");
    assert_eq!(csum, 0, "checksum errors at the test host:\n{log}");
    assert!(
        rsts >= s,
        "{rsts} resets for {s} segments to a closed port:\n{log}"
    );
    assert!(floor.exited().is_none(), "copier-floor exited:\n{log}");
    c.assert_no_leak(&mut lab);
}
