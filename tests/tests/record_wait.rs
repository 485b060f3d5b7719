//! The intercept rests between NFQUEUE batches only as the copier allows (`--record-wait`, told
//! with `Message::RecordWait`) and its own `--max-rest` lets it: with the defaults, keep-alive
//! clients that think between requests make its workers rest, and every request is still
//! copied exactly; with `copier --record-wait 0`, or `intercept --max-rest 0`, they never rest.

use lab::setup::{metric_sum, scrape_metrics, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host, Lab};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

const INTERCEPT_METRICS: &str = "127.0.0.1:9468";
const RESTS: &str = "intercept_nfqueue_rests_total";

/// 8 keep-alive connections, each a request every 4 ms or so, for `secs`.
fn thinking_clients(lab: &Lab, tag: &str, secs: f64) -> usize {
    lab.in_ns(Host::Client, || {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|k| {
                    s.spawn(move || {
                        let to = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80));
                        let mut c =
                            TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
                        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                        let start = Instant::now();
                        let mut i = 0;
                        while start.elapsed().as_secs_f64() < secs {
                            lab::http::get(&mut c, &format!("/index.html?{tag}={k}.{i}"));
                            i += 1;
                            std::thread::sleep(Duration::from_millis(4));
                        }
                        i
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        })
    })
    .unwrap()
}

fn rests(lab: &Lab) -> f64 {
    metric_sum(
        &scrape_metrics(lab, Host::Test, INTERCEPT_METRICS),
        RESTS,
        &[],
    )
}

#[test]
fn the_intercept_rests_only_as_the_copier_and_its_max_rest_allow() {
    let Some(mut lab) =
        lab_or_skip("the_intercept_rests_only_as_the_copier_and_its_max_rest_allow")
    else {
        return;
    };
    let opts = CopyOptions {
        intercept_args: vec!["--metrics".into(), INTERCEPT_METRICS.into()],
        ipv6: false,
        ..CopyOptions::default()
    };
    let mut c = Copying::start(&mut lab, opts).unwrap();
    assert_eq!(rests(&lab), 0.0, "nothing to rest after yet");

    // The default --record-wait: records nothing waits on may wait 20 ms at the intercept.
    let sent = thinking_clients(&lab, "calm", 3.0);
    c.test().wait_requests(sent, Duration::from_secs(30));
    let calm = rests(&lab);
    assert!(calm > 0.0, "the workers rested: {calm}");
    let copied = c.assert_copied_exactly(&mut lab);
    println!("default --record-wait: {copied} requests copied exactly, {calm} rests");

    // --record-wait 0: every record goes at once, so no worker ever rests.
    c.copier.take().unwrap().stop();
    let map = format!("80={}:80", addr::TEST);
    let iface = lab::ifname::ONLINE_TO_CLIENT;
    let p = c
        .spawn_copier(
            &mut lab,
            "copier-nowait",
            &["--map", &map, "--interface", iface, "--record-wait", "0"],
        )
        .unwrap();
    c.copier = Some(p);
    let before = c.test().request_count();
    let sent = thinking_clients(&lab, "eager", 3.0);
    c.test()
        .wait_requests(before + sent, Duration::from_secs(30));
    assert_eq!(rests(&lab), calm, "no rest with --record-wait 0");
    let copied = c.assert_copied_exactly(&mut lab);
    println!("--record-wait 0: {copied} requests in all copied exactly, no more rests");

    // intercept --max-rest 0 (a new intercept process, its counter from 0), a copier with the
    // default --record-wait: no rest either.
    c.copier.take().unwrap().stop();
    c.restart_intercept_with(&mut lab, &["--max-rest", "0"])
        .unwrap();
    let p = c
        .spawn_copier(
            &mut lab,
            "copier-default",
            &["--map", &map, "--interface", iface],
        )
        .unwrap();
    c.copier = Some(p);
    let before = c.test().request_count();
    let sent = thinking_clients(&lab, "capped", 3.0);
    c.test()
        .wait_requests(before + sent, Duration::from_secs(30));
    assert_eq!(rests(&lab), 0.0, "no rest with intercept --max-rest 0");
    let copied = c.assert_copied_exactly(&mut lab);
    println!("intercept --max-rest 0: {copied} requests in all copied exactly, no rest");
}
