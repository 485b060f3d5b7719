//! Faults while traffic flows (issue 27 item 4): loss between the copier host and the test host.
//! `FAULT_LOSS=0.05` tries another share than 1 %.
//!
//! netem is not in this kernel (see /work/shared/LAB.md), so the loss is made with the
//! firewall's `statistic` match on the test host, 1 % of the packets in each direction of the
//! link toward the copier host:
//! - `INPUT -i to-online`: the copies toward the test server (whichever way the copier sends
//!   them, raw socket or `AF_PACKET`) and the control connection's registrations and verdicts;
//! - `OUTPUT -o to-online --sport <control port>`: the intercept's records back to the copier
//!   (the test server's answers themselves never cross the link: the intercept takes them on
//!   the test host).
//!
//! Delay: this kernel has no qdisc that holds a packet for a time (netem, fq and etf are not
//! built in: `zcat /proc/config.gz`; `tbf latency` bounds a queue, it does not delay), so the
//! second test sends the same packets through an NFQUEUE queue that holds each for 50 ms
//! ([`lab::fault::Delay`]), on top of the 1 % loss: 100 ms more round trip for the copies and
//! for the control connection.
//!
//! Traffic: keep-alive clients, short connections and a test-host client ([`Traffic`]), plus an
//! upload of 4 MB. Asserts that every request the online server logged reached the test server
//! exactly once (after a wait for retransmissions), the upload whole, and that no answer leaked;
//! prints the copier's retransmission counters and the kernel's.

use lab::fault::{Delay, Traffic};
use lab::setup::{
    diff_fingerprints, fingerprints, metric_sum, scrape_metrics, tail, CopyOptions, Copying,
    CONTROL_PORT,
};
use lab::{addr, ifname, lab_or_skip, Host, Lab};
use std::time::{Duration, Instant};

const COPIER_METRICS: &str = "127.0.0.1:9473";
/// The comment that marks the loss rules (to read their counters).
const TAG: &str = "tcopy-fault-loss";
const UPLOAD: usize = 4 << 20;

/// The share of packets dropped each way: 1 %, or `FAULT_LOSS` (a probability, e.g. `0.05`) to
/// try more.
fn loss() -> f64 {
    match std::env::var("FAULT_LOSS") {
        Ok(v) => v
            .parse()
            .ok()
            .filter(|p| (0.0..1.0).contains(p))
            .unwrap_or_else(|| panic!("FAULT_LOSS={v:?}: want a probability below 1")),
        Err(_) => 0.01,
    }
}

/// Drops a share of the packets each way between the copier host and the test host (module doc).
fn add_loss(lab: &Lab, probability: f64) {
    let p = probability.to_string();
    let port = CONTROL_PORT.to_string();
    let rules: [&[&str]; 2] = [
        &["INPUT", "-i", ifname::TEST_TO_ONLINE],
        &[
            "OUTPUT",
            "-o",
            ifname::TEST_TO_ONLINE,
            "-p",
            "tcp",
            "--sport",
            &port,
        ],
    ];
    for r in rules {
        let mut argv = vec!["iptables", "-w", "-I", r[0], "1"];
        argv.extend_from_slice(&r[1..]);
        argv.extend_from_slice(&["-m", "statistic", "--mode", "random", "--probability", &p]);
        argv.extend_from_slice(&["-m", "comment", "--comment", TAG, "-j", "DROP"]);
        lab.exec_ok(Host::Test, &argv).unwrap();
    }
}

/// The NFQUEUE queue of the delay (the intercept reads queue 0).
const DELAY_QUEUE: u16 = 7;

/// Sends the same packets as [`add_loss`] through [`DELAY_QUEUE`] (after the loss rules).
fn add_delay_rules(lab: &Lab) {
    let port = CONTROL_PORT.to_string();
    let q = DELAY_QUEUE.to_string();
    let rules: [&[&str]; 2] = [
        &["INPUT", "-i", ifname::TEST_TO_ONLINE],
        &[
            "OUTPUT",
            "-o",
            ifname::TEST_TO_ONLINE,
            "-p",
            "tcp",
            "--sport",
            &port,
        ],
    ];
    for r in rules {
        let mut argv = vec!["iptables", "-w", "-I", r[0], "1"];
        argv.extend_from_slice(&r[1..]);
        argv.extend_from_slice(&[
            "-m",
            "comment",
            "--comment",
            "tcopy-fault-delay",
            "-j",
            "NFQUEUE",
            "--queue-num",
            &q,
        ]);
        lab.exec_ok(Host::Test, &argv).unwrap();
    }
}

/// Packets the loss rules dropped: (toward the test host, toward the copier host).
fn dropped(lab: &Lab) -> (u64, u64) {
    let count = |chain: &str| -> u64 {
        let listing = lab
            .exec_ok(Host::Test, &["iptables", "-w", "-nvxL", chain])
            .unwrap();
        listing
            .lines()
            .filter(|l| l.contains(TAG))
            .map(|l| {
                l.split_whitespace()
                    .next()
                    .unwrap_or("")
                    .parse::<u64>()
                    .unwrap()
            })
            .sum()
    };
    (count("INPUT"), count("OUTPUT"))
}

/// [`metric_sum`] as a count (an absent metric is 0, not -0).
fn metric_sum_u64(text: &str, name: &str, needles: &[&str]) -> u64 {
    metric_sum(text, name, needles).max(0.0) as u64
}

#[test]
fn one_percent_loss_each_way_every_request_arrives_exactly_once() {
    let Some(lab) = lab_or_skip("one_percent_loss_each_way_every_request_arrives_exactly_once")
    else {
        return;
    };
    under_loss(lab, None);
}

#[test]
fn loss_and_50_ms_delay_each_way_every_request_arrives_exactly_once() {
    let Some(lab) = lab_or_skip("loss_and_50_ms_delay_each_way_every_request_arrives_exactly_once")
    else {
        return;
    };
    under_loss(lab, Some(Duration::from_millis(50)));
}

/// Runs the traffic with [`loss`] each way (and `delay` each way, when given) between the
/// copier host and the test host, and asserts that every request arrived exactly once.
fn under_loss(mut lab: Lab, delay: Option<Duration>) {
    let opts = CopyOptions {
        copier_args: ["--metrics", COPIER_METRICS]
            .map(String::from)
            .into_iter()
            .chain(lab::fault::copier_caps())
            .collect(),
        intercept_args: lab::fault::intercept_caps(),
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    let loss = loss();
    // The delay rules first: the loss rules go above them and drop before the queue.
    let held = delay.map(|by| {
        let d = Delay::start(&lab, Host::Test, DELAY_QUEUE, by).unwrap();
        add_delay_rules(&lab);
        d
    });
    add_loss(&lab, loss);
    let t0 = Instant::now();
    let traffic = Traffic::start(&mut lab, 4).unwrap();
    std::thread::sleep(Duration::from_secs(2));

    // An upload of a few MB (its own body, so its hash is its own) in the middle of the traffic.
    let body = lab.dir().join("upload.bin");
    let mut bytes = lab::pattern_bytes(UPLOAD);
    bytes[..8].copy_from_slice(b"lossy-up");
    std::fs::write(&body, bytes).unwrap();
    let curl = format!(
        "curl -sS --max-time 60 -o /dev/null -w '%{{http_code}}' --data-binary @{} http://{}/upload/lossy",
        body.display(),
        addr::ONLINE
    );
    let code = lab.sh(Host::Client, &curl).unwrap();
    assert_eq!(code.trim(), "200", "the upload was answered online");
    std::thread::sleep(Duration::from_secs(8));
    let ka = traffic.keepalive_requests();
    traffic.stop();
    let traffic_secs = t0.elapsed().as_secs_f64();

    // Wait for the retransmissions: the test server must catch up with online, then go quiet.
    let online_n = c.online.request_count();
    let local = |uri: &str| uri.contains("?local=");
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let copied = c
            .test()
            .requests()
            .unwrap()
            .iter()
            .filter(|e| !local(&e.uri))
            .count();
        if copied >= online_n {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    c.settle(Duration::from_secs(2), Duration::from_secs(30));
    c.check_alive().unwrap();

    let online = c.online.requests().unwrap();
    let test: Vec<_> = c
        .test()
        .requests()
        .unwrap()
        .into_iter()
        .filter(|e| !local(&e.uri))
        .collect();
    let (to_test, to_copier) = dropped(&lab);
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    let retrans = metric_sum_u64(&m, "copier_retransmissions_total", &[]);
    let segments = metric_sum_u64(&m, "copier_segments_sent_total", &[]);
    let failed = metric_sum_u64(&m, "copier_sessions_failed_total", &[]);
    let control_losses = metric_sum_u64(&m, "copier_control_losses_total", &[]);
    let answer_timeouts = metric_sum_u64(&m, "copier_answer_timeouts_total", &[]);
    let kernel_retrans = lab.netstat_counter(Host::Online, "TcpRetransSegs").unwrap();
    let delayed = held.as_ref().map_or(0, Delay::delayed);
    println!(
        "{} % loss and {} ms delay each way ({delayed} packets delayed), {traffic_secs:.1} s of traffic: {} requests online ({ka} keep-alive), {} copied; \
         dropped {to_test} packets toward the test host, {to_copier} toward the copier host; \
         copier: {retrans} of {segments} segments sent again, {failed} sessions failed, {answer_timeouts} answer \
         timeouts, {control_losses} control connections lost; the copier host's kernel sent {kernel_retrans} \
         control segments again",
        loss * 100.0,
        delay.map_or(0, |d| d.as_millis()),
        online.len(),
        test.len(),
    );
    assert!(
        online.len() > 50,
        "enough traffic ran: {} requests",
        online.len()
    );
    assert!(
        to_test > 0 && to_copier > 0,
        "the loss rules dropped packets both ways ({to_test}, {to_copier})"
    );
    if delay.is_some() {
        assert!(
            delayed > 500,
            "the delay held the copies and the control segments: {delayed} packets"
        );
    }

    let up: Vec<_> = test.iter().filter(|e| e.uri == "/upload/lossy").collect();
    assert_eq!(
        up.len(),
        1,
        "the upload reached the test server once: {up:?}"
    );
    assert_eq!(
        up[0].body.as_ref().map(|b| b.0),
        Some(UPLOAD as u64),
        "the upload arrived whole: {:?}",
        up[0]
    );

    let diff = diff_fingerprints(&fingerprints(&online), &fingerprints(&test));
    assert!(
        diff.is_empty(),
        "every online request reaches the test server exactly once ({} online, {} test):\n{diff}\ncopier log:\n{}",
        online.len(),
        test.len(),
        tail(&c.copier.as_ref().unwrap().log(), 30)
    );
    lab::fault::assert_memory_within_caps(
        &c,
        if delay.is_some() {
            "loss and delay"
        } else {
            "loss"
        },
    );
    c.assert_no_leak(&mut lab);
    if let Some(d) = held {
        d.stop().unwrap();
    }
}
