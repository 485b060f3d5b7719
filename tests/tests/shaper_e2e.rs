//! `copier --profile` end to end: real short connections from the client to nginx on `online`;
//! the copier shapes their copies with a profile; from the two access logs each test asserts
//! what the test nginx received (how many copies of each request, every one intact: method,
//! URI, length, body hash), from which client addresses, and that no response left the test
//! host toward a client.

use lab::setup::{fingerprints, leak_filter, tail, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host, Lab, LogEntry};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

const COPIER_METRICS: &str = "127.0.0.1:9469";

/// Writes `text` to a profile file of this test; its path.
fn profile_file(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("lab-shaper-{name}-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

fn opts(profile: &PathBuf) -> CopyOptions {
    let copier_args = ["--metrics", COPIER_METRICS, "--seed", "7", "--profile", profile.to_str().unwrap()];
    CopyOptions {
        copier_args: copier_args.iter().map(|s| s.to_string()).collect(),
        // the pools are IPv4
        ipv6: false,
        ..CopyOptions::default()
    }
}

/// `GET path` on `s`, reading the whole answer (HTTP/1.1 with a Content-Length).
fn get(s: &mut TcpStream, path: &str) {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: lab\r\nUser-Agent: lab-test\r\n\r\n").as_bytes())
        .unwrap();
    let mut buf = Vec::new();
    let mut tmp = [0u8; 16384];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return;
            }
        }
        let n = s.read(&mut tmp).expect("read response");
        assert!(n > 0, "connection closed early");
        buf.extend_from_slice(&tmp[..n]);
    }
}

/// `n` short connections from the client, one after the other `gap` apart, each with one
/// request `/index.html?s=<i>`, then closed by the client.
fn short_sessions(lab: &Lab, n: usize, gap: Duration) {
    lab.in_ns(Host::Client, move || {
        let to = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80));
        for i in 0..n {
            let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            get(&mut s, &format!("/index.html?s={i}"));
            drop(s);
            std::thread::sleep(gap);
        }
    })
    .unwrap();
}

/// Waits for the test server to see about `factor` times the online requests and to go quiet;
/// asserts that every online request arrived `floor(factor)` or `ceil(factor)` times, intact
/// (its fingerprint), nothing else arrived, the total is within 2% of `factor` times the online
/// count, and nothing leaked. Returns the online and test log entries.
fn assert_shaped(lab: &mut Lab, c: &Copying, factor: f64) -> (Vec<LogEntry>, Vec<LogEntry>) {
    let want = (factor * c.online.request_count() as f64) as usize;
    c.test().wait_requests(want * 98 / 100, Duration::from_secs(180));
    c.settle(Duration::from_secs(3), Duration::from_secs(60));
    c.check_alive().unwrap();
    let online = c.online.requests().unwrap();
    let test = c.test().requests().unwrap();
    let log = || tail(&c.copier.as_ref().unwrap().log(), 30);
    let (fo, ft) = (fingerprints(&online), fingerprints(&test));
    let (lo, hi) = (factor.floor() as usize, factor.ceil() as usize);
    for (k, &o) in &fo {
        let t = ft.get(k).copied().unwrap_or(0);
        assert!(t >= lo * o && t <= hi * o, "{k}: {t} at the test server for {o} online at {factor}\ncopier log:\n{}", log());
    }
    for k in ft.keys() {
        assert!(fo.contains_key(k), "{k} at the test server was never made online");
    }
    let ratio = test.len() as f64 / online.len() as f64;
    println!("online {} requests, test {} ({ratio:.4} x, want {factor})", online.len(), test.len());
    assert!((ratio / factor - 1.0).abs() <= 0.02, "{ratio:.4} x the online requests, want {factor} within 2%\ncopier log:\n{}", log());
    let pcap = lab.stop_link_capture().expect("link capture");
    let leaked = Lab::count_packets(&pcap, &leak_filter()).unwrap();
    assert_eq!(leaked, 0, "{leaked} response packets left the test host toward clients ({})", pcap.display());
    (online, test)
}

/// Factor 2.5 over 2000 short sessions: every request copied twice or three times, 2.5 x in
/// all; the copies come from the two pools, in their weights.
///
/// The extra copy is a fair draw per session, so the total is 5000 with a standard deviation of
/// sqrt(2000 x 0.25) = 22 requests (0.45% of it): the 2% bound is 4.5 of them. The pools: every
/// copy draws its pool by weight when its real client has no live mapping; the NAT lifetime of
/// 1 us, and sessions 12 ms apart (more than the capture ring's 10 ms block timeout, so two
/// sessions do not reach the engine at one `now`), make each session of the one real client
/// address a new draw. Over about 5000 copies the share of a 0.7 pool has a standard deviation
/// of 0.65%, and the bound of 3 points is 4.6 of them.
#[test]
fn factor_two_and_a_half_from_two_pools() {
    let Some(mut lab) = lab_or_skip("factor_two_and_a_half_from_two_pools") else { return };
    let profile = profile_file(
        "factor",
        r#"
[multiplication]
factor = 2.5

[[pools]]
name = "home"
weight = 0.7
cidr = "198.19.0.0/18"
users = 5000
activity = { mean = 1.0, variance = 12.5, min = 0.01, max = 100.0 }

[[pools]]
name = "office"
weight = 0.3
cidr = "198.19.64.0/20"
users = 800
activity = { table = [[1.0, 0.6], [5.0, 0.3], [20.0, 0.1]] }

[nat]
lifetime_s = 0.000001
"#,
    );
    let c = Copying::start(&mut lab, opts(&profile)).unwrap();
    short_sessions(&lab, 2000, Duration::from_millis(12));
    let (online, test) = assert_shaped(&mut lab, &c, 2.5);
    assert_eq!(online.len(), 2000);
    let mut by_pool: BTreeMap<&str, usize> = BTreeMap::new();
    let mut conns: BTreeMap<u64, Ipv4Addr> = BTreeMap::new();
    for e in &test {
        let a: Ipv4Addr = e.remote_addr.parse().unwrap();
        conns.insert(e.connection, a);
    }
    for a in conns.values() {
        let pool = match a.octets() {
            [198, 19, 0..=63, _] => "home",
            [198, 19, 64..=79, _] => "office",
            _ => panic!("a copy from {a}, in no pool"),
        };
        *by_pool.entry(pool).or_default() += 1;
    }
    let home = by_pool.get("home").copied().unwrap_or(0) as f64 / conns.len() as f64;
    println!("{} test connections, pools {by_pool:?}, home share {home:.4}", conns.len());
    assert!((home - 0.7).abs() <= 0.03, "home share {home:.4} of {} connections, want 0.7", conns.len());
    std::fs::remove_file(&profile).unwrap();
}
