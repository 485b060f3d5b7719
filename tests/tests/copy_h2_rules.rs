//! `--rules` on HTTP/2 end to end: nginx serves cleartext HTTP/2 with prior knowledge
//! (`listen 80 http2`) on `online` and `test`; h2load runs 10 streams in flight on each of 3
//! connections over three paths, one of them denied, one rewritten. The copier decodes every
//! client header block (HPACK, in connection order), drops the denied streams' frames and
//! writes the other blocks again with its own encoder, dyed. From the test server's own
//! access log: exactly the online requests not denied (the rewritten path as rewritten), each
//! once, none denied, the dye on every line (the client's own value of that header replaced);
//! a header `delete` takes a client's header away; no answer leaves the test host.

use std::collections::BTreeMap;
use std::time::Duration;

use lab::setup::{metric_sum, scrape_metrics, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host, Lab, LogEntry, NginxOptions};

const COPIER_METRICS: &str = "127.0.0.1:9465";

fn start(lab: &mut Lab, rules: &str) -> Copying {
    let path = lab.dir().join("rules.toml");
    std::fs::write(&path, rules).unwrap();
    let files = |names: &[&str]| names.iter().map(|n| (n.to_string(), 300)).collect();
    let opts = CopyOptions {
        online: NginxOptions {
            http2: true,
            files: files(&["a.txt", "skip/b.txt", "v1/c.txt"]),
            workers: 2,
            ..NginxOptions::default()
        },
        test: Some(NginxOptions {
            http2: true,
            files: files(&["a.txt", "c.txt"]),
            workers: 2,
            ..NginxOptions::default()
        }),
        copier_args: vec![
            "--metrics".into(),
            COPIER_METRICS.into(),
            "--seed".into(),
            "7".into(),
            "--rules".into(),
            path.display().to_string(),
        ],
        ..CopyOptions::default()
    };
    Copying::start(lab, opts).unwrap()
}

/// `requests: N total, N started, N done, N succeeded, ...` of h2load's output: succeeded.
fn h2load_ok(out: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.starts_with("requests:"))
        .unwrap_or_else(|| panic!("no requests line in h2load's output:\n{out}"));
    let i = line.find(" succeeded").unwrap();
    line[..i]
        .trim_end()
        .rsplit([' ', ','])
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The test server's log once `n` requests arrived and it went quiet.
fn test_log(c: &Copying, n: usize) -> Vec<LogEntry> {
    c.test().wait_requests(n, Duration::from_secs(30));
    c.settle(Duration::from_secs(1), Duration::from_secs(20));
    c.check_alive().unwrap();
    c.test().requests().unwrap()
}

fn count(uris: impl Iterator<Item = String>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for u in uris {
        *m.entry(u).or_default() += 1;
    }
    m
}

#[test]
fn denied_streams_never_reach_the_test_server_and_every_other_stream_arrives_dyed_and_rewritten() {
    let Some(mut lab) = lab_or_skip("denied_streams_never_reach_the_test_server_and_every_other_stream_arrives_dyed_and_rewritten") else { return };
    let rules = "[[filter]]\nname = \"skip\"\npath = \"/skip/**\"\n\
                 [dye]\nvalue = \"copy-{copy}-{id}\"\nid = \"h2\"\n\
                 [[rewrite]]\nname = \"v1\"\nregex = \"^(\\\\w+) /v1/\"\nreplace = \"$1 /\"\n";
    let c = start(&mut lab, rules);
    let urls: Vec<String> = ["a.txt", "skip/b.txt", "v1/c.txt"]
        .iter()
        .map(|p| format!("http://{}/{p}", addr::ONLINE))
        .collect();
    let mut argv = vec![
        "h2load",
        "-n",
        "600",
        "-c",
        "3",
        "-m",
        "10",
        "-H",
        "x-traffic-copy: from-client",
    ];
    argv.extend(urls.iter().map(String::as_str));
    let out = lab.exec_ok(Host::Client, &argv).unwrap();
    assert_eq!(h2load_ok(&out), 600, "h2load:\n{out}");
    let online = c.online.requests().unwrap();
    assert_eq!(online.len(), 600);
    assert!(
        online
            .iter()
            .all(|e| e.dye.as_deref() == Some("from-client")),
        "online: the client's own header"
    );
    let skipped = online
        .iter()
        .filter(|e| e.uri.starts_with("/skip/"))
        .count();
    assert!(
        skipped >= 150,
        "h2load spreads its requests over the three paths: {skipped}"
    );
    let want = count(
        online
            .iter()
            .filter(|e| !e.uri.starts_with("/skip/"))
            .map(|e| e.uri.replacen("/v1/", "/", 1)),
    );
    let test = test_log(&c, 600 - skipped);
    eprintln!(
        "online 600 requests, {skipped} denied; test server {} requests",
        test.len()
    );
    let got = count(test.iter().map(|e| e.uri.clone()));
    assert_eq!(
        got, want,
        "exactly the online requests not denied, rewritten, each once"
    );
    assert_eq!(test.len(), 600 - skipped);
    assert!(
        test.iter().all(|e| !e.uri.contains("skip")),
        "no denied path at the test server"
    );
    assert!(
        test.iter().all(|e| e.dye.as_deref() == Some("copy-0-h2")),
        "the dye on every line, the client's value replaced"
    );
    assert!(
        test.iter().all(|e| e.status == 200),
        "every copied stream answered"
    );
    c.assert_no_leak(&mut lab);
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert_eq!(metric_sum(&m, "copier_h2_sessions_total", &[]), 3.0, "{m}");
    assert_eq!(metric_sum(&m, "copier_requests_total", &[]), 600.0, "{m}");
    assert_eq!(
        metric_sum(&m, "copier_requests_dropped_total", &[]),
        skipped as f64,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_requests_edited_total", &[]),
        (600 - skipped) as f64,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_requests_malformed_total", &[]),
        0.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_sessions_failed_total", &[]),
        0.0,
        "{m}"
    );
}

#[test]
fn a_header_delete_takes_the_clients_header_away_on_http2() {
    let Some(mut lab) = lab_or_skip("a_header_delete_takes_the_clients_header_away_on_http2")
    else {
        return;
    };
    let c = start(
        &mut lab,
        "[[header]]\nname = \"X-Traffic-Copy\"\ndelete = true\n",
    );
    let url = format!("http://{}/a.txt", addr::ONLINE);
    let out = lab
        .exec_ok(
            Host::Client,
            &[
                "h2load",
                "-n",
                "100",
                "-c",
                "2",
                "-m",
                "10",
                "-H",
                "x-traffic-copy: from-client",
                &url,
            ],
        )
        .unwrap();
    assert_eq!(h2load_ok(&out), 100, "h2load:\n{out}");
    let online = c.online.requests().unwrap();
    assert!(
        online.len() == 100
            && online
                .iter()
                .all(|e| e.dye.as_deref() == Some("from-client"))
    );
    let test = test_log(&c, 100);
    assert_eq!(test.len(), 100);
    assert!(
        test.iter().all(|e| e.dye.is_none() && e.uri == "/a.txt"),
        "deleted on every copied stream"
    );
    c.assert_no_leak(&mut lab);
}
