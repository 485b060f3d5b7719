//! The intercept's leak paths on the test host, end to end: registrations it cannot enforce
//! are refused, a recently unregistered session's retransmissions stay on the host, answers to
//! the test host itself pass, and the NFQUEUE rules stay in place at exit while sessions are
//! open. Real nginx, a hand-driven copier (real control protocol, raw spoofed segments).

use common::flow::FourTuple;
use common::proto::RegVerdict;
use common::wire::TcpFlags;
use lab::fake::{
    control, record_flags, record_info, runtime as rt, spoofed as tuple, FakeCopier, RawSender,
    SECRET,
};
use lab::setup::{
    metric_sum, scrape_metrics, tail, write_secret, CopyOptions, Copying, CONTROL_PORT,
};
use lab::{addr, lab_or_skip, workspace_bin, Host, Lab};
use nix::sys::signal::Signal;
use std::net::{SocketAddr, SocketAddrV6};
use std::time::{Duration, Instant};

const METRICS: &str = "127.0.0.1:9465";

/// Waits until `cond` holds, polling, at most `timeout`; returns whether it did.
fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The intercept's counter of packets dropped as recently unregistered.
fn dropped_recently_unregistered(lab: &Lab) -> f64 {
    let m = scrape_metrics(lab, Host::Test, METRICS);
    metric_sum(
        &m,
        "intercept_packets_dropped_total",
        &["recently_unregistered"],
    )
}

#[test]
fn registrations_the_intercept_cannot_guard_are_refused() {
    let Some(mut lab) = lab_or_skip("registrations_the_intercept_cannot_guard_are_refused") else {
        return;
    };
    // Our own intercept: guarding port 8080 only, IPv4 only (Copying would add --port 80).
    let secret = lab.dir().join("secret");
    write_secret(&secret).unwrap();
    let bin = workspace_bin("intercept")
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let listen = format!("{}:{CONTROL_PORT}", addr::TEST);
    let secret_s = secret.to_string_lossy().into_owned();
    let p = lab
        .spawn(
            Host::Test,
            "intercept",
            &[
                "env",
                "RUST_LOG=info",
                &bin,
                "--port",
                "8080",
                "--ipv4-only",
                "--listen",
                &listen,
                "--secret-file",
                &secret_s,
                "--install-rules",
            ],
        )
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || {
            let ss = lab
                .exec_ok(Host::Test, &["ss", "-Hltn"])
                .unwrap_or_default();
            ss.contains(&format!(":{CONTROL_PORT} ")) || p.exited().is_some()
        }) && p.exited().is_none(),
        "intercept did not start:\n{}",
        tail(&p.log(), 30)
    );
    let web = tuple(31, 43001, 80);
    let guarded = tuple(31, 43002, 8080);
    let v6 = FourTuple {
        client: SocketAddr::V6(SocketAddrV6::new(
            "fd00:198:19::31".parse().unwrap(),
            43003,
            0,
            0,
        ))
        .into(),
        server: SocketAddr::V6(SocketAddrV6::new(addr::TEST6, 8080, 0, 0)).into(),
    };
    let verdicts = lab
        .in_ns(Host::Online, || {
            rt().block_on(async {
                let mut cp = FakeCopier::connect(control(), Some(SECRET)).await?;
                cp.register(&[web, guarded, v6]).await
            })
        })
        .unwrap()
        .unwrap();
    assert_eq!(
        verdicts,
        vec![
            (web, RegVerdict::PortNotGuarded),
            (guarded, RegVerdict::Accepted),
            (v6, RegVerdict::FamilyNotGuarded)
        ]
    );
    let log = p.log();
    assert!(
        log.contains("refused the registration of 198.19.0.31:43001 -> 198.18.2.2:80")
            && log.contains("port(s) 8080"),
        "the refusal is logged with the tuple and the guarded ports:\n{log}"
    );
    assert!(p.exited().is_none());
}

/// Registers `t`, sends a SYN, gets the SYN-ACK record, unregisters without completing the
/// handshake; returns the test server's ISN. The test server then retransmits its SYN-ACK.
fn half_open_then_unregister(lab: &Lab, t: FourTuple) -> u32 {
    lab.in_ns(Host::Online, || {
        rt().block_on(async {
            let mut cp = FakeCopier::connect(control(), Some(SECRET)).await?;
            let v = cp.register(&[t]).await?;
            assert_eq!(v, vec![(t, RegVerdict::Accepted)]);
            let mut raw = RawSender::new()?;
            raw.send(t, 1000, 0, TcpFlags::SYN, b"")?;
            let synack = cp
                .wait_for(Duration::from_secs(3), |r| {
                    record_flags(r).contains(TcpFlags::SYN | TcpFlags::ACK)
                })
                .await?;
            cp.unregister(&[t]).await?;
            anyhow::Ok(record_info(&synack).unwrap().seq)
        })
    })
    .unwrap()
    .unwrap()
}

fn reset(lab: &Lab, t: FourTuple, isn: u32) {
    lab.in_ns(Host::Online, || {
        let mut raw = RawSender::new()?;
        raw.send(
            t,
            1001,
            isn.wrapping_add(1),
            TcpFlags::RST | TcpFlags::ACK,
            b"",
        )
    })
    .unwrap()
    .unwrap();
}

fn start_allowing_fake_clients(lab: &mut Lab, extra: &[&str]) -> Copying {
    let mut intercept_args: Vec<String> = vec![
        "--metrics".into(),
        METRICS.into(),
        "--allow".into(),
        addr::FAKE_CLIENT_NET.into(),
    ];
    intercept_args.extend(extra.iter().map(|s| s.to_string()));
    let opts = CopyOptions {
        start_copier: false,
        intercept_args,
        ..CopyOptions::default()
    };
    Copying::start(lab, opts).expect("start nginx and intercept")
}

#[test]
fn retransmissions_after_unregister_stay_on_the_test_host_even_when_allowed() {
    let Some(mut lab) = lab_or_skip("retransmissions_after_unregister_stay_on_the_test_host")
    else {
        return;
    };
    let c = start_allowing_fake_clients(&mut lab, &[]);
    let t = tuple(41, 44001, 80);
    let before = c.leaked(&lab);
    let isn = half_open_then_unregister(&lab, t);
    // The test server retransmits its SYN-ACK after ~1 s and ~3 s: both dropped and counted.
    assert!(
        wait_until(Duration::from_secs(15), || dropped_recently_unregistered(
            &lab
        ) >= 2.0),
        "the SYN-ACK retransmissions were not dropped as recently unregistered:\n{}",
        scrape_metrics(&lab, Host::Test, METRICS)
    );
    let leaked = c.leaked(&lab) - before;
    reset(&lab, t, isn);
    println!("leaked after unregister (linger 120 s): {leaked}");
    assert_eq!(
        leaked, 0,
        "a retransmitted SYN-ACK of an unregistered session left the test host"
    );
    c.check_alive().unwrap();
}

#[test]
fn without_the_tombstone_the_same_retransmissions_would_leak() {
    // The control experiment: a linger shorter than the first retransmission (1 s) shows that
    // the allow list would let them out (what happened before tombstones existed).
    let Some(mut lab) = lab_or_skip("without_the_tombstone_the_same_retransmissions_would_leak")
    else {
        return;
    };
    let c = start_allowing_fake_clients(&mut lab, &["--linger", "300ms"]);
    let t = tuple(42, 44002, 80);
    let before = c.leaked(&lab);
    let isn = half_open_then_unregister(&lab, t);
    assert!(
        wait_until(Duration::from_secs(10), || c.leaked(&lab) > before),
        "the retransmission did not leak even without a tombstone: the leak test proves nothing"
    );
    let leaked = c.leaked(&lab) - before;
    reset(&lab, t, isn);
    println!("leaked after unregister (linger 300 ms): {leaked}");
    c.check_alive().unwrap();
}

#[test]
fn clients_on_the_test_host_itself_get_their_answers() {
    let Some(mut lab) = lab_or_skip("clients_on_the_test_host_itself_get_their_answers") else {
        return;
    };
    // Empty allow list apart from the setup's operator address: nothing covers the test host.
    let c = Copying::start(
        &mut lab,
        CopyOptions {
            start_copier: false,
            ..CopyOptions::default()
        },
    )
    .unwrap();
    for host in [
        addr::TEST.to_string(),
        "127.0.0.1".to_string(),
        format!("[{}]", addr::TEST6),
        "[::1]".to_string(),
    ] {
        let page = lab
            .exec_ok(
                Host::Test,
                &[
                    "curl",
                    "-sS",
                    "--max-time",
                    "5",
                    &format!("http://{host}/index.html"),
                ],
            )
            .unwrap_or_else(|e| {
                panic!(
                    "curl http://{host}/ on the test host: {e:#}\n{}",
                    tail(&c.intercept.log(), 20)
                )
            });
        assert!(page.contains("lab nginx"), "{host}: {page}");
    }
    assert_eq!(c.leaked(&lab), 0);
    c.check_alive().unwrap();
}

fn nfqueue_rules(lab: &Lab) -> Vec<String> {
    let mut v = Vec::new();
    for tool in ["iptables", "ip6tables"] {
        let s = lab
            .exec_ok(Host::Test, &[tool, "-w", "-S", "OUTPUT"])
            .unwrap();
        v.extend(
            s.lines()
                .filter(|l| l.contains("NFQUEUE"))
                .map(|l| format!("{tool}: {l}")),
        );
    }
    v
}

#[test]
fn rules_stay_at_exit_while_a_session_is_registered_and_go_when_quiet() {
    let Some(mut lab) = lab_or_skip("rules_stay_at_exit_while_a_session_is_registered") else {
        return;
    };
    let mut c = Copying::start(
        &mut lab,
        CopyOptions {
            start_copier: false,
            ..CopyOptions::default()
        },
    )
    .unwrap();
    assert_eq!(nfqueue_rules(&lab).len(), 2, "{:?}", nfqueue_rules(&lab));
    let t = tuple(51, 45001, 80);
    let intercept = &c.intercept;
    lab.in_ns(Host::Online, || {
        let rt = rt();
        let cp = rt.block_on(async {
            let mut cp = FakeCopier::connect(control(), Some(SECRET)).await?;
            cp.register(&[t]).await?;
            anyhow::Ok(cp)
        })?;
        // the copier stays connected (with its registration) through the exit grace
        intercept.signal(Signal::SIGTERM);
        let st = intercept.wait_timeout(Duration::from_secs(15));
        drop(cp);
        anyhow::ensure!(st.is_some(), "the intercept did not exit");
        anyhow::Ok(())
    })
    .unwrap()
    .unwrap_or_else(|e| panic!("{e:#}"));
    let log = c.intercept.log();
    assert_eq!(
        nfqueue_rules(&lab).len(),
        2,
        "the rules were removed with a session open:\n{log}"
    );
    assert!(log.contains("leaving the NFQUEUE rules in place"), "{log}");

    // A new intercept adopts them; with nothing registered, they go at exit after the grace.
    c.restart_intercept(&mut lab).unwrap();
    c.intercept.signal(Signal::SIGTERM);
    assert!(c.intercept.wait_timeout(Duration::from_secs(15)).is_some());
    let log = c.intercept.log();
    assert!(
        nfqueue_rules(&lab).is_empty(),
        "{:?}\n{log}",
        nfqueue_rules(&lab)
    );
    assert!(log.contains("left no firewall rules behind"), "{log}");
}
