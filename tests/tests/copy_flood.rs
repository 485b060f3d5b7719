//! Spoofed ACK and data floods (issue 27, item 6): a raw socket in the client namespace sends a
//! few thousand lone data and ACK segments a second toward the online service, each from a new
//! source port (what a blind spoofer can send: it never sees the online server's answers), while
//! real clients run keep-alive and short connections against a copier with a small
//! `--max-sessions`. Every real request arrives at the test server exactly once, the flood's
//! mid-stream candidates are counted as shed (`copier_unproven_ended_total`), none of them
//! reaches the test server, and nothing leaks. Before the unproven sessions, each spoofed
//! segment took a slot for 120 s and the real sessions found the table full.

use common::flow::FourTuple;
use common::wire::TcpFlags;
use lab::fake::RawSender;
use lab::http::get;
use lab::setup::{metric_sum, scrape_metrics, tail, wait_metric, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host, Lab};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const COPIER_METRICS: &str = "127.0.0.1:9483";
const MAX_SESSIONS: usize = 8;

/// A connection from the client to the online nginx.
fn connect(lab: &Lab) -> TcpStream {
    let to = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80));
    let s = lab
        .in_ns(Host::Client, || {
            TcpStream::connect_timeout(&to, Duration::from_secs(5))
        })
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Sends spoofed segments until `stop`: about `rate` a second, each from the client's address
/// and a new port below the ephemeral range (so never a real client's), alternately 16 bytes
/// of data and a pure ACK, with arbitrary sequence and ACK numbers. Counts them in `sent`.
fn flood(mut raw: RawSender, rate: u64, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) {
    let server = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80));
    let start = Instant::now();
    let mut n: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        let due = start + Duration::from_secs_f64(n as f64 / rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let port = 1024 + (n.wrapping_mul(7919) % 30_000) as u16;
        let t = FourTuple::new(
            SocketAddr::V4(SocketAddrV4::new(addr::CLIENT, port)),
            server,
        );
        let (seq, ack) = (
            (n as u32).wrapping_mul(2_654_435_761),
            (n as u32).wrapping_mul(40_503) ^ 0x5a5a_0000,
        );
        let flags = TcpFlags(TcpFlags::PSH.0 | TcpFlags::ACK.0);
        let payload: &[u8] = if n & 1 == 0 {
            b"GET /spoofed HTTP"
        } else {
            b""
        };
        raw.send(t, seq, ack, flags, payload).unwrap();
        n += 1;
        sent.store(n, Ordering::Relaxed);
    }
}

#[test]
fn a_spoofed_segment_flood_does_not_keep_real_sessions_from_being_copied() {
    let Some(mut lab) =
        lab_or_skip("a_spoofed_segment_flood_does_not_keep_real_sessions_from_being_copied")
    else {
        return;
    };
    let opts = CopyOptions {
        copier_args: vec![
            "--metrics".into(),
            COPIER_METRICS.into(),
            "--max-sessions".into(),
            MAX_SESSIONS.to_string(),
            // Short, so that the candidates left when the flood stops are seen to time out.
            "--unproven-timeout".into(),
            "2s".into(),
        ],
        ipv6: false,
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    let raw = lab.in_ns(Host::Client, RawSender::new).unwrap().unwrap();
    let (stop, sent) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let flooder = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || flood(raw, 2_000, stop, sent))
    };
    // The flood fills the table first.
    std::thread::sleep(Duration::from_millis(500));
    const KEEP: usize = 3;
    const ROUNDS: usize = 6;
    const SHORT: usize = 12;
    let mut keep: Vec<TcpStream> = (0..KEEP).map(|_| connect(&lab)).collect();
    for r in 0..ROUNDS {
        for (k, s) in keep.iter_mut().enumerate() {
            get(s, &format!("/index.html?keep={k}&r={r}"));
        }
        // Short connections, one request each, between the rounds.
        for i in 0..SHORT / ROUNDS {
            let mut s = connect(&lab);
            get(&mut s, &format!("/index.html?short={r}-{i}"));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    stop.store(true, Ordering::Relaxed);
    flooder.join().unwrap();
    let flooded = sent.load(Ordering::Relaxed);
    let online = c
        .online
        .wait_requests(KEEP * ROUNDS + SHORT, Duration::from_secs(5));
    assert_eq!(online, KEEP * ROUNDS + SHORT);
    // Every real request once at the test server, none of the flood's, nothing leaked.
    let n = c.assert_copied_exactly(&mut lab);
    assert_eq!(n, online);
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    let log = tail(&c.copier.as_ref().unwrap().log(), 20);
    let ended = |r: &str| {
        metric_sum(
            &m,
            "copier_unproven_ended_total",
            &[&format!("reason=\"{r}\"")],
        )
    };
    let failed = |r: &str| {
        metric_sum(
            &m,
            "copier_sessions_failed_total",
            &[&format!("reason=\"{r}\"")],
        )
    };
    let shed = ended("unproven_shed");
    println!(
        "{flooded} spoofed segments, {online} real requests copied; unproven_shed {shed}, unproven_timeout {}, table_full {}",
        ended("unproven_timeout"),
        metric_sum(&m, "copier_packets_dropped_total", &["reason=\"table_full\""]),
    );
    assert!(flooded >= 2_000, "the flood ran: {flooded}");
    // Nearly every spoofed segment made a candidate that a later one (or a real session) shed.
    assert!(
        shed >= (flooded / 2) as f64,
        "{flooded} sent, {shed} shed\n{m}"
    );
    assert!(
        metric_sum(&m, "copier_unproven_proven_total", &[]) >= (KEEP + SHORT) as f64,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_sessions_started_total", &[]),
        (KEEP + SHORT) as f64,
        "no candidate started\n{m}\n{log}"
    );
    assert_eq!(
        failed("unproven_shed"),
        0.0,
        "no real session was shed\n{m}"
    );
    // The candidates left when the flood stopped end by --unproven-timeout; the table holds
    // no unproven session afterwards.
    wait_metric(
        &lab,
        Host::Online,
        COPIER_METRICS,
        "copier_unproven_ended_total",
        &["reason=\"unproven_timeout\""],
        1.0,
        Duration::from_secs(15),
    )
    .unwrap();
    // They were all made within the flood's last milliseconds.
    std::thread::sleep(Duration::from_secs(1));
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert_eq!(metric_sum(&m, "copier_unproven_sessions", &[]), 0.0, "{m}");
    drop(keep);
    c.assert_no_leak(&mut lab);
}
