//! HTTP/2 copied in real time: nginx serves cleartext HTTP/2 with prior knowledge
//! (`listen 80 http2`) on `online` and `test`; `h2load` runs many streams in flight on each of
//! several connections, and curl and nghttp make
//! `--http2-prior-knowledge` requests. The copier
//! recognises each session by its preface and sends its frames as captured (no pacing by
//! answers: the streams of a connection are answered in any order). From the two access logs:
//! at least 95 % of the requests are at the test server by the time the load ends, and exactly
//! the online requests (each once) shortly after; no response leaves the test host.

use lab::setup::{metric_sum, scrape_metrics, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host, NginxOptions};
use std::time::{Duration, Instant};

const COPIER_METRICS: &str = "127.0.0.1:9465";

fn h2_nginx() -> NginxOptions {
    NginxOptions {
        http2: true,
        files: vec![("small.txt".into(), 300)],
        workers: 2,
        ..NginxOptions::default()
    }
}

fn setup(lab: &mut lab::Lab) -> Copying {
    let opts = CopyOptions {
        online: h2_nginx(),
        test: Some(h2_nginx()),
        copier_args: vec![
            "--metrics".into(),
            COPIER_METRICS.into(),
            "--seed".into(),
            "7".into(),
        ],
        ..CopyOptions::default()
    };
    Copying::start(lab, opts).unwrap()
}

/// `requests: N total, N started, N done, N succeeded, ...` of h2load's output: (done, succeeded).
fn h2load_counts(out: &str) -> (u64, u64) {
    let line = out
        .lines()
        .find(|l| l.starts_with("requests:"))
        .unwrap_or_else(|| panic!("no requests line in h2load's output:\n{out}"));
    let num = |word: &str| -> u64 {
        let i = line
            .find(word)
            .unwrap_or_else(|| panic!("no '{word}' in {line}"));
        line[..i]
            .trim_end()
            .rsplit([' ', ','])
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    (num(" done"), num(" succeeded"))
}

#[test]
fn multiplexed_h2load_is_copied_in_real_time_and_exactly() {
    let Some(mut lab) = lab_or_skip("multiplexed_h2load_is_copied_in_real_time_and_exactly") else {
        return;
    };
    let c = setup(&mut lab);
    let url = format!("http://{}/small.txt", addr::ONLINE);
    // 4 connections, 16 streams in flight on each, 4,000 GETs: nginx answers them in well under
    // a second online.
    let t0 = Instant::now();
    let out = lab
        .exec_ok(
            Host::Client,
            &["h2load", "-n", "4000", "-c", "4", "-m", "16", &url],
        )
        .unwrap();
    let took = t0.elapsed();
    let (done, ok) = h2load_counts(&out);
    assert_eq!((done, ok), (4000, 4000), "h2load:\n{out}");
    // By the load's end (a second of grace for the test server's log on a loaded machine):
    // at least 95 % of the requests are at the test server.
    let online = c.online.wait_requests(4000, Duration::from_secs(2));
    assert_eq!(online, 4000);
    let at_end = c
        .test()
        .wait_requests(online * 95 / 100, Duration::from_secs(1));
    eprintln!("load took {took:?}; at its end the test server had {at_end} of {online}");
    assert!(
        at_end * 100 >= online * 95,
        "only {at_end} of {online} requests at the test server by the load's end ({took:?})"
    );
    // Shortly after: exactly the online requests, each once, nothing leaked.
    let n = c.assert_copied_exactly(&mut lab);
    assert_eq!(n, 4000);
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert_eq!(metric_sum(&m, "copier_h2_sessions_total", &[]), 4.0, "{m}");
    assert_eq!(
        metric_sum(&m, "copier_h2_streams_total", &[]),
        4000.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_sessions_failed_total", &[]),
        0.0,
        "{m}"
    );
}

#[test]
fn curl_and_nghttp_with_prior_knowledge_are_copied_exactly() {
    let Some(mut lab) = lab_or_skip("curl_and_nghttp_with_prior_knowledge_are_copied_exactly")
    else {
        return;
    };
    let c = setup(&mut lab);
    // curl: one request per connection (Debian's curl 7.88 fails a second stream on a
    // connection to Debian's nginx 1.22 with "Error in the HTTP2 framing layer", copier or not).
    for i in 0..5 {
        let url = format!("http://{}/small.txt?curl={i}", addr::ONLINE);
        lab.exec_ok(
            Host::Client,
            &[
                "curl",
                "-sS",
                "--http2-prior-knowledge",
                "--max-time",
                "20",
                "-o",
                "/dev/null",
                &url,
            ],
        )
        .unwrap();
    }
    // nghttp: several streams on one connection, all in flight at once.
    for i in 0..3 {
        let urls: Vec<String> = (0..4)
            .map(|k| format!("http://{}/small.txt?nghttp={i}&k={k}", addr::ONLINE))
            .collect();
        let mut argv = vec!["nghttp", "-n", "-t", "20"];
        argv.extend(urls.iter().map(String::as_str));
        lab.exec_ok(Host::Client, &argv).unwrap();
    }
    let n = c.assert_copied_exactly(&mut lab);
    assert_eq!(n, 17);
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert_eq!(metric_sum(&m, "copier_h2_sessions_total", &[]), 8.0, "{m}");
    assert_eq!(metric_sum(&m, "copier_h2_streams_total", &[]), 17.0, "{m}");
    assert_eq!(
        metric_sum(&m, "copier_sessions_failed_total", &[]),
        0.0,
        "{m}"
    );
}
