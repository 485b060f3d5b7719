//! The intercept in the lab, with real nginx as the test service and a hand-driven copier
//! (real control protocol, raw spoofed segments) on `online`.

use common::flow::FourTuple;
use common::wire::TcpFlags;
use lab::fake::{
    control, record_flags, record_info, runtime as rt, spoofed, FakeCopier, RawSender, SECRET,
};
use lab::setup::{metric_sum, scrape_metrics};
use lab::setup::{wait_metric, Copying};
use lab::{addr, lab_or_skip, Host, Lab};
use std::time::Duration;

const METRICS: &str = "127.0.0.1:9464";

fn tuple(client_last: u8, port: u16) -> FourTuple {
    spoofed(client_last, port, 80)
}

fn start(lab: &mut Lab) -> Copying {
    Copying::intercept_only(lab, METRICS).expect("start nginx and intercept")
}

#[test]
fn spoofed_session_is_returned_to_its_copier_and_never_leaks() {
    let Some(mut lab) = lab_or_skip("spoofed_session_is_returned_to_its_copier_and_never_leaks")
    else {
        return;
    };
    let c = start(&mut lab);
    let t = tuple(5, 40001);
    let got = lab
        .in_ns(Host::Online, || {
            rt().block_on(async {
                let mut cp = FakeCopier::connect(control(), Some(SECRET)).await?;
                cp.register(&[t]).await?;
                let mut raw = RawSender::new()?;
                raw.send(t, 1000, 0, TcpFlags::SYN, b"")?;
                let synack = cp
                    .wait_for(Duration::from_secs(3), |r| {
                        record_flags(r).contains(TcpFlags::SYN | TcpFlags::ACK)
                    })
                    .await?;
                let p = record_info(&synack).expect("SYN-ACK record parses");
                assert_eq!(p.tuple, t, "SYN-ACK record for the wrong tuple");
                assert_eq!(p.ack, 1001, "SYN-ACK does not acknowledge our SYN");
                let isn = p.seq;
                let req = b"GET /index.html HTTP/1.0\r\n\r\n";
                raw.send(
                    t,
                    1001,
                    isn.wrapping_add(1),
                    TcpFlags::ACK | TcpFlags::PSH,
                    req,
                )?;
                let data = cp
                    .wait_for(Duration::from_secs(3), |r| {
                        record_info(r).is_some_and(|i| i.payload_len > 0)
                    })
                    .await?;
                let fin = cp
                    .wait_for(Duration::from_secs(3), |r| {
                        record_flags(r).contains(TcpFlags::FIN)
                    })
                    .await?;
                // leave nothing half-open on the test server
                let fin_seq = record_info(&fin).unwrap().seq;
                raw.send(
                    t,
                    1001 + req.len() as u32,
                    fin_seq.wrapping_add(1),
                    TcpFlags::RST,
                    b"",
                )?;
                anyhow::Ok((data.orig_len, cp.inbox.len()))
            })
        })
        .unwrap()
        .unwrap();
    assert!(
        got.0 > 40,
        "the response record should come from a packet with payload"
    );

    // an allowed address talks to the test nginx normally, at the same time
    let page = lab
        .exec_ok(
            Host::Online,
            &[
                "curl",
                "-sS",
                "--max-time",
                "5",
                &format!("http://{}/index.html", addr::TEST),
            ],
        )
        .unwrap();
    assert!(page.contains("lab nginx"));

    let reqs = c.test().requests().unwrap();
    let from_fake = reqs
        .iter()
        .filter(|r| r.remote_addr == "198.19.0.5")
        .count();
    let from_allowed = reqs
        .iter()
        .filter(|r| r.remote_addr == addr::ONLINE_TO_TEST.to_string())
        .count();
    assert_eq!((from_fake, from_allowed), (1, 1), "{reqs:?}");

    let m = scrape_metrics(&lab, Host::Test, METRICS);
    let leaked = c.leaked(&lab);
    let pcap = lab.stop_link_capture().unwrap();
    let allowed = Lab::count_packets(
        &pcap,
        &format!("tcp src port 80 and dst host {}", addr::ONLINE_TO_TEST),
    )
    .unwrap();
    assert_eq!(
        leaked, 0,
        "responses of the copied session left the test host"
    );
    assert!(
        allowed > 0,
        "the capture saw no allowed response: it does not work"
    );
    assert!(
        metric_sum(&m, "intercept_packets_accepted_total", &[]) >= 1.0,
        "{m}"
    );
    c.check_alive().unwrap();
}

#[test]
fn each_copier_gets_only_its_own_records_and_early_responses_wait_for_registration() {
    let Some(mut lab) = lab_or_skip("each_copier_gets_only_its_own_records") else {
        return;
    };
    let c = start(&mut lab);
    let (t1, t2, t3, t4) = (
        tuple(11, 41001),
        tuple(12, 41002),
        tuple(13, 41003),
        tuple(14, 41004),
    );
    lab.in_ns(Host::Online, || {
        rt().block_on(async {
            let mut a = FakeCopier::connect(control(), Some(SECRET)).await?;
            let mut b = FakeCopier::connect(control(), Some(SECRET)).await?;
            a.register(&[t1]).await?;
            b.register(&[t2]).await?;
            let mut raw = RawSender::new()?;
            for t in [t1, t2, t3, t4] {
                raw.send(t, 5000, 0, TcpFlags::SYN, b"")?;
            }
            // t3 registers late: its SYN-ACK was held and is delivered now
            tokio::time::sleep(Duration::from_millis(300)).await;
            a.register(&[t3]).await?;
            a.collect(Duration::from_millis(1500)).await?;
            b.collect(Duration::from_millis(200)).await?;
            let tuples = |cp: &FakeCopier| -> Vec<FourTuple> {
                cp.inbox
                    .iter()
                    .map(|r| r.tuple().expect("record parses"))
                    .collect()
            };
            let (ta, tb) = (tuples(&a), tuples(&b));
            assert!(ta.contains(&t1) && ta.contains(&t3), "copier a got {ta:?}");
            assert!(tb.contains(&t2), "copier b got {tb:?}");
            assert!(
                ta.iter().all(|t| *t == t1 || *t == t3),
                "copier a got another's records: {ta:?}"
            );
            assert!(
                tb.iter().all(|t| *t == t2),
                "copier b got another's records: {tb:?}"
            );
            for t in [t1, t2, t3, t4] {
                raw.send(t, 5001, 0, TcpFlags::RST, b"")?;
            }
            anyhow::Ok(())
        })
    })
    .unwrap()
    .unwrap();
    // t4 was never registered: its responses were held, then dropped and counted
    wait_metric(
        &lab,
        Host::Test,
        METRICS,
        "intercept_packets_dropped_total",
        &["unregistered"],
        1.0,
        Duration::from_secs(10),
    )
    .expect("a drop counted for the unregistered session");
    c.assert_no_leak(&mut lab);
    c.check_alive().unwrap();
}

#[test]
fn bad_peers_are_refused_and_the_daemon_keeps_serving() {
    let Some(mut lab) = lab_or_skip("bad_peers_are_refused_and_the_daemon_keeps_serving") else {
        return;
    };
    let c = start(&mut lab);
    lab.in_ns(Host::Online, || {
        rt().block_on(async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            // wrong secret
            let wrong = FakeCopier::connect(control(), Some(b"not-the-secret")).await;
            assert!(wrong.is_err(), "a wrongly keyed copier was accepted");
            // no secret at all
            let none = FakeCopier::connect(control(), None).await;
            assert!(none.is_err(), "a copier without a secret was accepted");
            // garbage: the intercept closes the connection
            let mut g = tokio::net::TcpStream::connect(control()).await?;
            g.write_all(&[0xff; 64]).await?;
            let mut buf = [0u8; 4096];
            let closed = tokio::time::timeout(Duration::from_secs(8), async {
                loop {
                    match g.read(&mut buf).await {
                        Ok(0) | Err(_) => return true,
                        Ok(_) => continue,
                    }
                }
            })
            .await
            .unwrap_or(false);
            assert!(closed, "the intercept kept a garbage connection open");
            // a good copier still works
            let t = tuple(21, 42001);
            let mut ok = FakeCopier::connect(control(), Some(SECRET)).await?;
            ok.register(&[t]).await?;
            let mut raw = RawSender::new()?;
            raw.send(t, 9000, 0, TcpFlags::SYN, b"")?;
            ok.wait_for(Duration::from_secs(3), |r| {
                record_flags(r).contains(TcpFlags::SYN)
            })
            .await?;
            raw.send(t, 9001, 0, TcpFlags::RST, b"")?;
            anyhow::Ok(())
        })
    })
    .unwrap()
    .unwrap();
    c.check_alive().unwrap();
    let log = c.intercept.log();
    assert!(
        log.contains("198.18.2.1"),
        "refusals should be logged with the peer address:\n{log}"
    );
}
