//! The intercept rests between NFQUEUE batches only as the copier allows (`--record-wait`, told
//! with `Message::RecordWait`) and its own `--max-rest` lets it: with the defaults, keep-alive
//! clients that think between requests make its workers rest, and every request is still
//! copied exactly; with `copier --record-wait 0`, or `intercept --max-rest 0`, they never rest.
//! And the records that open or end a connection wait at the intercept only as the copier's
//! `--open-wait` allows (`Message::OpenWait`): with one request per connection, the default
//! (3 ms) makes far fewer writes to the copier than `--open-wait 0`, and both copy exactly.

use lab::setup::{metric_sum, scrape_metrics, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host, Lab};
use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

const INTERCEPT_METRICS: &str = "127.0.0.1:9468";
const RESTS: &str = "intercept_nfqueue_rests_total";

/// 8 clients, each sending a request about every 4 ms for `secs` with `one(tag, k, i, conn)`
/// (client `k`'s request `i`; `conn`: its keep-alive connection, `None` without
/// `keep_alive`); the requests sent.
fn clients(
    lab: &Lab,
    tag: &str,
    secs: f64,
    keep_alive: bool,
    one: fn(&str, usize, usize, Option<&mut TcpStream>),
) -> usize {
    lab.in_ns(Host::Client, || {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|k| {
                    s.spawn(move || {
                        let mut c = keep_alive.then(connect);
                        let start = Instant::now();
                        let mut i = 0;
                        while start.elapsed().as_secs_f64() < secs {
                            one(tag, k, i, c.as_mut());
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

fn connect() -> TcpStream {
    let to = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80));
    let c = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

/// 8 keep-alive connections, each a request every 4 ms or so, for `secs`.
fn thinking_clients(lab: &Lab, tag: &str, secs: f64) -> usize {
    clients(lab, tag, secs, true, |tag, k, i, c| {
        let c = c.expect("a keep-alive connection");
        lab::http::get(c, &format!("/index.html?{tag}={k}.{i}"));
    })
}

/// 8 clients, each opening one connection per request (`Connection: close`) about every 4 ms,
/// for `secs`.
fn closing_clients(lab: &Lab, tag: &str, secs: f64) -> usize {
    clients(lab, tag, secs, false, |tag, k, i, _| {
        let mut c = connect();
        let req = format!(
            "GET /index.html?{tag}={k}.{i} HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n"
        );
        c.write_all(req.as_bytes()).unwrap();
        let mut answer = Vec::new();
        c.read_to_end(&mut answer).unwrap();
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{k}.{i}: an answer");
    })
}

/// The intercept's writes of records to copiers, in all.
fn record_writes(lab: &Lab) -> f64 {
    metric_sum(
        &scrape_metrics(lab, Host::Test, INTERCEPT_METRICS),
        "intercept_record_writes_total",
        &[],
    )
}

/// Copying (IPv4) with the intercept's metrics on [`INTERCEPT_METRICS`].
fn start(lab: &mut Lab) -> Copying {
    let opts = CopyOptions {
        intercept_args: vec!["--metrics".into(), INTERCEPT_METRICS.into()],
        ipv6: false,
        ..CopyOptions::default()
    };
    Copying::start(lab, opts).unwrap()
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
    let mut c = start(&mut lab);
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

#[test]
fn records_that_open_or_end_a_connection_wait_at_the_intercept_as_the_copiers_open_wait_allows() {
    let Some(mut lab) = lab_or_skip(
        "records_that_open_or_end_a_connection_wait_at_the_intercept_as_the_copiers_open_wait_allows",
    ) else {
        return;
    };
    let mut c = start(&mut lab);
    let map = format!("80={}:80", addr::TEST);
    let iface = lab::ifname::ONLINE_TO_CLIENT;
    // Writes per copied request with the copier run with `args`, one request per connection.
    let run = |lab: &mut Lab, c: &mut Copying, name: &str, args: &[&str]| -> f64 {
        c.copier.take().unwrap().stop();
        let mut all = vec!["--map", map.as_str(), "--interface", iface];
        all.extend_from_slice(args);
        c.copier = Some(c.spawn_copier(lab, name, &all).unwrap());
        let before = c.test().request_count();
        let writes = record_writes(lab);
        let sent = closing_clients(lab, name, 3.0);
        c.test()
            .wait_requests(before + sent, Duration::from_secs(30));
        let copied = c.assert_copied_exactly(lab);
        let per = (record_writes(lab) - writes) / sent as f64;
        println!("{name} {args:?}: {sent} connections, {copied} requests in all copied exactly, {per:.3} record writes a request");
        assert!(sent > 100, "{name}: the clients made {sent} requests");
        per
    };
    let open = run(&mut lab, &mut c, "copier-open-wait", &[]);
    let at_once = run(
        &mut lab,
        &mut c,
        "copier-open-wait-0",
        &["--open-wait", "0"],
    );
    assert!(
        open < 0.75 * at_once,
        "with the default --open-wait the intercept holds SYN-ACKs and FINs and writes less: \
         {open:.3} record writes a request against {at_once:.3} with --open-wait 0"
    );
}
