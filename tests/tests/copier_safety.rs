//! The copier's safety on the production host, end to end: a flood of spoofed SYNs is not
//! copied (no session starts before the client's handshake completes) while real sessions still
//! are, within a bounded memory; a `--map` toward this host itself is refused at start; and a
//! session whose test tuple the intercept refuses to guard is never sent (the copier says which
//! map and port).

use common::flow::FourTuple;
use common::wire::TcpFlags;
use lab::fake::RawSender;
use lab::setup::{wait_log, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host, Lab};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

fn online_url(path: &str) -> String {
    format!("http://{}{path}", addr::ONLINE)
}

/// Resident memory of a process, in bytes.
fn rss(pid: u32) -> u64 {
    lab::procstat::memory_kib(pid).0 * 1024
}

/// Packets counted by the test host's INPUT rule for SYNs from `net`.
fn syns_from(lab: &Lab, net: &str) -> u64 {
    let out = lab
        .exec_ok(Host::Test, &["iptables", "-w", "-nvxL", "INPUT"])
        .unwrap();
    out.lines()
        .filter(|l| l.contains(net) && l.contains("flags:0x17/0x02"))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn a_spoofed_syn_flood_is_not_copied_and_real_sessions_are() {
    let Some(mut lab) = lab_or_skip("a_spoofed_syn_flood_is_not_copied_and_real_sessions_are")
    else {
        return;
    };
    // Count every SYN from the flood's addresses that reaches the test host.
    lab.exec_ok(
        Host::Test,
        &[
            "iptables",
            "-w",
            "-I",
            "INPUT",
            "-s",
            addr::FAKE_CLIENT_NET,
            "-p",
            "tcp",
            "--syn",
        ],
    )
    .unwrap();
    let opts = CopyOptions {
        copier_args: vec![
            "--max-memory".into(),
            "16M".into(),
            "--seed".into(),
            "7".into(),
        ],
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    let pid = c.copier.as_ref().unwrap().pid();
    let rss_before = rss(pid);
    const FLOOD: u32 = 20_000;
    std::thread::scope(|s| {
        let lab = &lab;
        let flood = s.spawn(move || {
            lab.in_ns(Host::Client, move || {
                let mut raw = RawSender::new().unwrap();
                let online = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80));
                let mut x: u32 = 0x2545_f491;
                for i in 0..FLOOD {
                    // xorshift: random sources in 198.19.0.0/16, ports and ISNs
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    let src = Ipv4Addr::new(198, 19, (x >> 8) as u8, x as u8);
                    let port = 1024 + (x >> 16) as u16 % 60000;
                    let t = FourTuple::new(SocketAddr::V4(SocketAddrV4::new(src, port)), online);
                    raw.send(t, x.wrapping_mul(2_654_435_761), 0, TcpFlags::SYN, &[])
                        .unwrap();
                    if i % 2000 == 1999 {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            })
            .unwrap();
        });
        // Real traffic meanwhile: short connections and keep-alive ones.
        let script = format!(
            "for i in $(seq 1 60); do curl -sS --http1.0 -o /dev/null {}?flood=$i || exit 1; done",
            online_url("/index.html")
        );
        lab.sh(Host::Client, &script).unwrap();
        lab.exec_ok(
            Host::Client,
            &["wrk", "-t1", "-c4", "-d2s", &online_url("/index.html")],
        )
        .unwrap();
        flood.join().unwrap();
    });
    let n = c.assert_copied_exactly(&mut lab);
    assert!(n > 60, "{n} requests");
    assert_eq!(
        syns_from(&lab, addr::FAKE_CLIENT_NET),
        0,
        "SYNs of the flood reached the test server"
    );
    // Before: +106 MB for 60 000 SYNs; now each costs a pending entry of about 100 bytes at most.
    let grown = rss(pid).saturating_sub(rss_before);
    println!(
        "copier RSS {} KiB before the flood of {FLOOD} SYNs, grew by {} KiB",
        rss_before >> 10,
        grown >> 10
    );
    assert!(grown < 24 << 20, "the copier grew by {} MB", grown >> 20);
    assert_eq!(c.leaked(&lab), 0);
}

#[test]
fn a_map_to_this_host_is_refused_at_start() {
    let Some(mut lab) = lab_or_skip("a_map_to_this_host_is_refused_at_start") else {
        return;
    };
    let bin = lab::workspace_bin("copier")
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let map = format!("80={}:80", addr::ONLINE);
    let p = lab
        .spawn(
            Host::Online,
            "copier-self",
            &[
                &bin,
                "--map",
                &map,
                "--intercept",
                &addr::TEST.to_string(),
                "--no-secret",
                "--interface",
                "lo",
            ],
        )
        .unwrap();
    let st = p
        .wait_timeout(Duration::from_secs(10))
        .expect("the copier exits");
    assert!(!st.success(), "{st:?}");
    let log = p.log();
    assert!(
        log.contains(&format!("--map {map}")) && log.contains("this host"),
        "{log}"
    );
}

#[test]
fn a_tuple_the_intercept_does_not_guard_is_never_sent() {
    let Some(mut lab) = lab_or_skip("a_tuple_the_intercept_does_not_guard_is_never_sent") else {
        return;
    };
    let opts = CopyOptions {
        start_copier: false,
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    // The intercept guards port 80 only; this map copies to the test host's port 8080.
    let map = format!("80={}:8080", addr::TEST);
    let copier = c
        .spawn_copier(
            &mut lab,
            "copier-8080",
            &["--map", &map, "--interface", lab::ifname::ONLINE_TO_CLIENT],
        )
        .unwrap();
    lab.exec_ok(
        Host::Test,
        &[
            "iptables", "-w", "-I", "INPUT", "-p", "tcp", "--dport", "8080", "--syn",
        ],
    )
    .unwrap();
    let script = format!(
        "for i in $(seq 1 10); do curl -sS -o /dev/null {}?r=$i || exit 1; done",
        online_url("/index.html")
    );
    lab.sh(Host::Client, &script).unwrap();
    wait_log(&copier, &format!("--map {map}"), Duration::from_secs(10)).unwrap();
    let log = copier.log();
    assert!(
        log.contains("ERROR") && log.contains("8080") && log.contains("port_not_guarded"),
        "{log}"
    );
    assert_eq!(
        log.matches("the intercept refused").count(),
        1,
        "once per map and reason:\n{log}"
    );
    let out = lab
        .exec_ok(Host::Test, &["iptables", "-w", "-nvxL", "INPUT"])
        .unwrap();
    let syns: u64 = out
        .lines()
        .filter(|l| l.contains("dpt:8080"))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(syns, 0, "nothing of a refused session is sent:\n{out}");
    assert_eq!(c.test().request_count(), 0);
    assert_eq!(c.leaked(&lab), 0);
}
