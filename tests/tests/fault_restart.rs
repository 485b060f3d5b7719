//! Faults while traffic flows (issue 27 item 1): the intercept restarts, by SIGTERM and by
//! `kill -9`, while keep-alive clients, short connections and a client on the test host itself
//! run, and the copier's client pool is also on the intercept's allow list (so an answer of a
//! copy that a restarted intercept accepts by mistake leaves the test host and is counted).
//! Asserts that no answer leaked (the firewall counter of `lab::leak`) and that copying went on
//! after each restart; prints how many requests were copied after each fault. The same for a
//! copier killed (`kill -9`) and started again (item 2), and for the test server stopped and
//! started again (item 3), with the daemons' memory checked against their caps after each.

use lab::fault::Traffic;
use lab::setup::{metric_sum, scrape_metrics, tail, wait_log_count, CopyOptions, Copying};
use lab::{lab_or_skip, Host};
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};

const COPIER_METRICS: &str = "127.0.0.1:9471";
const INTERCEPT_METRICS: &str = "127.0.0.1:9472";
/// The copier's client pool, also allowed at the intercept.
const POOL: &str = "198.19.0.0/24";

#[test]
fn intercept_restarts_under_traffic_leak_nothing_and_copying_goes_on() {
    let Some(mut lab) =
        lab_or_skip("intercept_restarts_under_traffic_leak_nothing_and_copying_goes_on")
    else {
        return;
    };
    let opts = CopyOptions {
        copier_args: [
            "--metrics",
            COPIER_METRICS,
            "--client-ip",
            POOL,
            "--seed",
            "7",
        ]
        .map(String::from)
        .into_iter()
        .chain(lab::fault::copier_caps())
        .collect(),
        intercept_args: [
            "--allow",
            POOL,
            "--restart-grace",
            "6s",
            "--metrics",
            INTERCEPT_METRICS,
        ]
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
    assert!(c.test().request_count() > 0, "copying before the faults");
    assert_eq!(c.leaked(&lab), 0);

    let mut figures = Vec::new();
    for (run, fault) in [(2usize, "SIGTERM"), (3, "kill -9")] {
        let before = c.test().request_count();
        let at = Instant::now();
        if fault == "kill -9" {
            c.intercept.signal(Signal::SIGKILL);
            c.intercept
                .wait_timeout(Duration::from_secs(5))
                .expect("the intercept died");
        }
        // SIGTERM (or, after kill -9, nothing left to stop) and start again.
        c.restart_intercept(&mut lab).unwrap();
        let log = c.intercept.log();
        assert!(
            log.contains("found our rules in place"),
            "the restart is seen and the grace applies:\n{}",
            tail(&log, 20)
        );
        wait_log_count(
            c.copier.as_ref().unwrap(),
            "connected to intercept",
            run,
            Duration::from_secs(15),
        )
        .unwrap();
        std::thread::sleep(Duration::from_secs(3));
        let copied = c.test().request_count().saturating_sub(before);
        let secs = at.elapsed().as_secs_f64();
        let leaked = c.leaked(&lab);
        let m = scrape_metrics(&lab, Host::Test, INTERCEPT_METRICS);
        let held = metric_sum(&m, "intercept_restart_grace_held_total", &[]);
        println!("{fault}: {copied} requests copied in the {secs:.1} s after the fault; {held} answers held by the grace; {leaked} leaked");
        figures.push((fault, copied, leaked));
        assert!(
            copied > 0,
            "copying goes on after {fault}:\n{}",
            tail(&c.copier.as_ref().unwrap().log(), 30)
        );
        assert_eq!(leaked, 0, "after {fault}");
    }
    let ka = traffic.keepalive_requests();
    traffic.stop();
    c.settle(Duration::from_secs(1), Duration::from_secs(20));
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    let withdrawn = metric_sum(&m, "copier_registrations_withdrawn_total", &[]);
    println!("keep-alive requests answered online: {ka}; copier connections held back at a lost link: {withdrawn}");
    assert!(
        withdrawn > 0.0,
        "the copier held its sessions back while the link was down"
    );
    c.check_alive().unwrap();
    lab::fault::assert_memory_within_caps(&c, "intercept restarts");
    c.assert_no_leak(&mut lab);
    println!("figures: {figures:?}");
}

#[test]
fn a_copier_killed_and_started_again_leaks_nothing_and_picks_live_sessions_up() {
    let Some(mut lab) =
        lab_or_skip("a_copier_killed_and_started_again_leaks_nothing_and_picks_live_sessions_up")
    else {
        return;
    };
    let opts = CopyOptions {
        copier_args: ["--client-ip", POOL, "--seed", "7"]
            .map(String::from)
            .into_iter()
            .chain(lab::fault::copier_caps())
            .collect(),
        intercept_args: ["--allow", POOL]
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
    let old = c.copier.take().unwrap();
    old.signal(Signal::SIGKILL);
    old.wait_timeout(Duration::from_secs(5))
        .expect("the copier died");
    let at = Instant::now();
    // The intercept keeps dropping the answers of the dead copier's sessions (tombstones).
    std::thread::sleep(Duration::from_secs(1));
    let before = c.test().request_count();
    c.start_copier(&mut lab).unwrap();
    // The keep-alive connections that were open go on: the new copier picks them up mid-stream.
    std::thread::sleep(Duration::from_secs(3));
    let test = c.test().requests().unwrap();
    let copied = c.test().request_count().saturating_sub(before);
    let ka_after = test[before.min(test.len())..]
        .iter()
        .filter(|e| e.uri.contains("?ka"))
        .count();
    println!(
        "copier kill -9: {copied} requests copied by the new copier in the {:.1} s after its start ({ka_after} on keep-alive \
         connections opened before the kill); {} leaked",
        at.elapsed().as_secs_f64() - 1.0,
        c.leaked(&lab)
    );
    assert!(
        ka_after > 0,
        "live keep-alive sessions are copied again:\n{}",
        tail(&c.copier.as_ref().unwrap().log(), 30)
    );
    traffic.stop();
    c.settle(Duration::from_secs(1), Duration::from_secs(20));
    c.check_alive().unwrap();
    lab::fault::assert_memory_within_caps(&c, "copier kill -9");
    c.assert_no_leak(&mut lab);
}

#[test]
fn the_test_server_restarting_under_traffic_leaks_nothing_and_copying_goes_on() {
    let Some(mut lab) =
        lab_or_skip("the_test_server_restarting_under_traffic_leaks_nothing_and_copying_goes_on")
    else {
        return;
    };
    const METRICS: &str = "127.0.0.1:9475";
    let opts = CopyOptions {
        copier_args: ["--client-ip", POOL, "--seed", "7", "--metrics", METRICS]
            .map(String::from)
            .into_iter()
            .chain(lab::fault::copier_caps())
            .collect(),
        intercept_args: ["--allow", POOL]
            .map(String::from)
            .into_iter()
            .chain(lab::fault::intercept_caps())
            .collect(),
        ipv6: false,
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    let traffic = Traffic::start(&mut lab, 4).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert!(c.test().request_count() > 0, "copying before the fault");
    assert_eq!(c.leaked(&lab), 0);

    // The test server goes down for a second (its connections closed, new copies refused by the
    // kernel with resets, which the intercept takes like any answer) and comes back.
    let at = Instant::now();
    c.test()
        .restart(&mut lab, Host::Test, Duration::from_secs(1))
        .unwrap();
    let restart_secs = at.elapsed().as_secs_f64();
    let back = c.test().request_count();
    let ka_online = |c: &Copying| -> std::collections::BTreeSet<String> {
        c.online
            .requests()
            .unwrap()
            .into_iter()
            .map(|e| e.uri)
            .filter(|u| u.contains("?ka"))
            .collect()
    };
    let ka_back = ka_online(&c);
    let leaked_down = c.leaked(&lab);
    std::thread::sleep(Duration::from_secs(3));
    let copied = c.test().request_count().saturating_sub(back);
    let m = scrape_metrics(&lab, Host::Online, METRICS);
    let failed = metric_sum(&m, "copier_sessions_failed_total", &[]);
    println!(
        "test server restart (stopped, 1 s down, listening again {restart_secs:.1} s after the SIGTERM): {leaked_down} answer packets leaked while it was down and coming back, {copied} \
         requests copied in the 3 s after it was back; {failed} copied sessions failed"
    );
    assert_eq!(
        leaked_down, 0,
        "nothing leaks while the test server is down"
    );
    assert!(
        copied > 0,
        "copying goes on once the test server is back:\n{}",
        tail(&c.copier.as_ref().unwrap().log(), 30)
    );
    // The keep-alive clients kept their online connections through the restart: their copies
    // lost the test connection (reset, then refused while the server was down), and each goes
    // on at its client's next request on a new test connection (`Resume` after a test-side
    // failure), not only once the failed session is gone and a copy caught mid-stream proved
    // itself (before: 48 of 330 of these requests copied in the first 3 s).
    let after: Vec<String> = ka_online(&c).difference(&ka_back).cloned().collect();
    traffic.stop();
    c.settle(Duration::from_secs(1), Duration::from_secs(20));
    let test_uris: std::collections::HashSet<String> = c
        .test()
        .requests()
        .unwrap()
        .into_iter()
        .map(|e| e.uri)
        .collect();
    let resumed = after.iter().filter(|u| test_uris.contains(*u)).count();
    println!("keep-alive requests made online in the 3 s after the test server was back: {}, copied: {resumed}", after.len());
    assert!(
        after.len() >= 40,
        "the keep-alive clients went on online: {}",
        after.len()
    );
    assert!(
        resumed * 10 >= after.len() * 9,
        "the keep-alive sessions' copies go on at once after the test server restarts: {resumed} of {} copied:\n{}",
        after.len(),
        tail(&c.copier.as_ref().unwrap().log(), 30)
    );
    c.check_alive().unwrap();
    lab::fault::assert_memory_within_caps(&c, "test server restart");
    c.assert_no_leak(&mut lab);
}
