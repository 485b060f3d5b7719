//! Faults while traffic flows (issue 27 item 3): the test host's firewall rules are flushed
//! (`iptables -F`) while keep-alive clients, short connections and a client on the test host
//! run, and the copier's client pool is also on the intercept's allow list. The intercept
//! (`--install-rules`) sees the flush as it happens (nf_tables events; it also checks every
//! second) and puts them back: asserts that it saw the change and says so (log and
//! `intercept_rules_restored_total`), that nothing leaks after the restore and that copying
//! goes on; prints what leaked in the window between the flush and the restore (the kernel
//! passes every answer then, there is no rule to hold it).

use lab::fault::Traffic;
use lab::setup::{metric_sum, scrape_metrics, tail, wait_log, CopyOptions, Copying};
use lab::{lab_or_skip, Host};
use std::time::{Duration, Instant};

const INTERCEPT_METRICS: &str = "127.0.0.1:9473";
const POOL: &str = "198.19.0.0/24";

#[test]
fn flushed_rules_are_put_back_and_nothing_leaks_after() {
    let Some(mut lab) = lab_or_skip("flushed_rules_are_put_back_and_nothing_leaks_after") else {
        return;
    };
    let opts = CopyOptions {
        copier_args: ["--client-ip", POOL, "--seed", "7"]
            .map(String::from)
            .into_iter()
            .chain(lab::fault::copier_caps())
            .collect(),
        intercept_args: ["--allow", POOL, "--metrics", INTERCEPT_METRICS]
            .map(String::from)
            .into_iter()
            .chain(lab::fault::intercept_caps())
            .collect(),
        ipv6: false,
        ..CopyOptions::default()
    };
    let mut c = Copying::start(&mut lab, opts).unwrap();
    let traffic = Traffic::start(&mut lab, 4).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(c.leaked(&lab), 0);

    let before = c.test().request_count();
    let at = Instant::now();
    lab.exec_ok(Host::Test, &["iptables", "-w", "-F"]).unwrap();
    wait_log(&c.intercept, "put back", Duration::from_secs(10)).unwrap();
    let restored_after = at.elapsed();
    let window = c.leaked(&lab);
    std::thread::sleep(Duration::from_secs(3));
    let after = c.leaked(&lab) - window;
    let copied = c.test().request_count().saturating_sub(before);
    let m = scrape_metrics(&lab, Host::Test, INTERCEPT_METRICS);
    let restored = metric_sum(&m, "intercept_rules_restored_total", &[]);
    let changes = metric_sum(&m, "intercept_ruleset_changes_total", &[]);
    println!(
        "iptables -F: rules put back after {:.2} s ({restored} rule(s), {changes} ruleset changes seen); {window} answer \
         packets leaked in that window, {after} after the restore; {copied} requests copied since the flush",
        restored_after.as_secs_f64()
    );
    assert!(restored >= 1.0, "{m}");
    // The flush is seen as it happens (nf_tables events), not at the next periodic check.
    assert!(changes >= 1.0, "the intercept saw the ruleset change:\n{m}");
    assert_eq!(
        after,
        0,
        "nothing leaks once the rules are back:\n{}",
        tail(&c.intercept.log(), 20)
    );
    assert!(copied > 0);
    let listing = lab
        .exec_ok(Host::Test, &["iptables", "-w", "-S", "OUTPUT"])
        .unwrap();
    assert!(listing.contains("NFQUEUE"), "{listing}");
    traffic.stop();
    c.settle(Duration::from_secs(1), Duration::from_secs(20));
    c.check_alive().unwrap();
    lab::fault::assert_memory_within_caps(&c, "iptables -F");
    // The window's leaks are the known cost of a check every second: stop the link capture and
    // leave the assertion of zero to the leak counter read after the restore.
    let _ = lab.stop_link_capture();
    let _ = &mut c;
}

#[test]
fn without_install_rules_a_flush_stops_the_copiers_until_the_rules_are_back() {
    let Some(mut lab) =
        lab_or_skip("without_install_rules_a_flush_stops_the_copiers_until_the_rules_are_back")
    else {
        return;
    };
    const COPIER_METRICS: &str = "127.0.0.1:9474";
    let rule = [
        "iptables",
        "-w",
        "-I",
        "OUTPUT",
        "-p",
        "tcp",
        "--sport",
        "80",
        "-j",
        "NFQUEUE",
        "--queue-num",
        "0",
    ];
    lab.exec_ok(Host::Test, &rule).unwrap();
    let opts = CopyOptions {
        copier_args: [
            "--client-ip",
            POOL,
            "--seed",
            "7",
            "--metrics",
            COPIER_METRICS,
        ]
        .map(String::from)
        .into_iter()
        .chain(lab::fault::copier_caps())
        .collect(),
        intercept_args: ["--allow", POOL, "--ipv4-only", "--restart-grace", "2s"]
            .map(String::from)
            .into_iter()
            .chain(lab::fault::intercept_caps())
            .collect(),
        ipv6: false,
        install_rules: false,
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    let traffic = Traffic::start(&mut lab, 4).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(c.leaked(&lab), 0);

    lab.exec_ok(Host::Test, &["iptables", "-w", "-F", "OUTPUT"])
        .unwrap();
    let copier = c.copier.as_ref().unwrap();
    wait_log(
        copier,
        "firewall rules are MISSING",
        Duration::from_secs(10),
    )
    .unwrap();
    let told = c.leaked(&lab);
    let held_from = c.test().request_count();
    std::thread::sleep(Duration::from_secs(2));
    let while_missing = c.leaked(&lab) - told;
    let copied_while_missing = c.test().request_count().saturating_sub(held_from);
    assert!(
        c.intercept
            .log()
            .contains("firewall rules no longer in force"),
        "{}",
        tail(&c.intercept.log(), 20)
    );
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert!(
        metric_sum(&m, "copier_intercept_rules_lost_total", &[]) >= 1.0,
        "{m}"
    );

    // The operator puts the rule back: the copiers are told and copying goes on.
    lab.exec_ok(Host::Test, &rule).unwrap();
    wait_log(
        copier,
        "firewall rules are back in force",
        Duration::from_secs(10),
    )
    .unwrap();
    let back = c.test().request_count();
    let leaked_back = c.leaked(&lab);
    std::thread::sleep(Duration::from_secs(2));
    let copied_after = c.test().request_count().saturating_sub(back);
    println!(
        "iptables -F without --install-rules: {told} answer packets leaked until the copier was told, {while_missing} in \
         the 2 s after (the copier sending nothing: {copied_while_missing} requests reached the test server), {} after the \
         rule was back; {copied_after} requests copied in the 2 s after",
        c.leaked(&lab) - leaked_back
    );
    assert_eq!(
        c.leaked(&lab),
        leaked_back,
        "nothing leaks once the rule is back"
    );
    assert!(copied_after > 0, "copying goes on once the rules are back");
    lab::fault::assert_memory_within_caps(&c, "iptables -F OUTPUT without --install-rules");
    traffic.stop();
    let _ = lab.stop_link_capture();
}
