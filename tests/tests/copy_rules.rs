//! Request rules end to end (`copier --rules`): raw HTTP clients talk to nginx on `online`; the
//! copier drops the filtered requests, dyes and rewrites the others, and nginx on `test` logs
//! what arrived (URI, connection, body hash and the `X-Traffic-Copy` header). Each test checks
//! that the test server got exactly the selected requests, edited, in order, on one test
//! connection per client connection, with every answer complete, and that no answer leaked.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::time::Duration;

use lab::http::HttpReader;
use lab::setup::{metric_sum, scrape_metrics, start_redis, tail, CopyOptions, Copying};
use lab::LogEntry;
use lab::{addr, lab_or_skip, Host, Lab, NginxOptions};

const COPIER_METRICS: &str = "127.0.0.1:9465";

/// Answer sizes: one of each kind (a few bytes to 2 MB), online and on test alike.
const SIZES: [usize; 4] = [10, 1000, 100_000, 2_000_000];

fn files(prefixes: &[&str]) -> Vec<(String, usize)> {
    prefixes
        .iter()
        .flat_map(|p| {
            SIZES
                .iter()
                .enumerate()
                .map(move |(i, &s)| (format!("{p}f{i}"), s))
        })
        .collect()
}

/// A copying setup with `rules` (TOML) and the lab's files under each of `prefixes`.
fn start(lab: &mut Lab, rules: &str, online: &[&str], test: &[&str]) -> Copying {
    let path = lab.dir().join("rules.toml");
    std::fs::write(&path, rules).unwrap();
    let opts = CopyOptions {
        copier_args: vec![
            "--metrics".into(),
            COPIER_METRICS.into(),
            "--seed".into(),
            "7".into(),
            "--rules".into(),
            path.display().to_string(),
        ],
        online: NginxOptions {
            files: files(online),
            ..NginxOptions::default()
        },
        test: Some(NginxOptions {
            files: files(test),
            ..NginxOptions::default()
        }),
        ..CopyOptions::default()
    };
    Copying::start(lab, opts).unwrap()
}

fn request(path: &str, close: bool) -> String {
    let conn = if close { "Connection: close\r\n" } else { "" };
    format!("GET {path} HTTP/1.1\r\nHost: lab\r\nUser-Agent: lab-rules\r\n{conn}\r\n")
}

/// How the client sends a session's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// One connection, each request after the answer before.
    KeepAlive,
    /// One connection, every request in one write.
    Pipelined,
    /// A connection per request (`Connection: close`).
    Close,
}

/// Sends `reqs` from the client as `way` says and reads every answer whole.
fn send(lab: &Lab, reqs: &[String], way: Way) {
    let reqs = reqs.to_vec();
    lab.in_ns(Host::Client, move || {
        let to = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80));
        let connect = || {
            let s = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            s
        };
        match way {
            Way::Close => {
                for r in &reqs {
                    let mut s = connect();
                    s.write_all(r.as_bytes()).unwrap();
                    HttpReader::default().read_response(&mut s);
                }
            }
            Way::KeepAlive | Way::Pipelined => {
                let mut s = connect();
                let mut reader = HttpReader::default();
                if way == Way::Pipelined {
                    s.write_all(reqs.concat().as_bytes()).unwrap();
                    reqs.iter().for_each(|_| reader.read_response(&mut s));
                } else {
                    for r in &reqs {
                        s.write_all(r.as_bytes()).unwrap();
                        reader.read_response(&mut s);
                    }
                }
            }
        }
    })
    .unwrap();
}

/// The test server's log once `n` requests arrived and it went quiet.
fn test_log(c: &Copying, n: usize) -> Vec<LogEntry> {
    c.test().wait_requests(n, Duration::from_secs(60));
    c.settle(Duration::from_secs(1), Duration::from_secs(30));
    c.check_alive().unwrap();
    c.test().requests().unwrap()
}

/// The value of query parameter `s` (the session) of a URI.
fn session_of(uri: &str) -> String {
    uri.split(['?', '&'])
        .find_map(|kv| kv.strip_prefix("s="))
        .unwrap_or("")
        .to_string()
}

/// Test log entries by session, in log order.
fn by_session(log: &[LogEntry]) -> BTreeMap<String, Vec<LogEntry>> {
    let mut m: BTreeMap<String, Vec<LogEntry>> = BTreeMap::new();
    for e in log {
        m.entry(session_of(&e.uri)).or_default().push(e.clone());
    }
    m
}

/// Request `i` (1 to 10) of session `s`: requests 3 and 7 go to `/skip/`, the others not; the
/// answer sizes cycle through [`SIZES`].
fn skip_path(s: &str, i: usize) -> String {
    let f = format!("f{}?s={s}&i={i}", i % SIZES.len());
    if i == 3 || i == 7 {
        format!("/skip/{f}")
    } else {
        format!("/{f}")
    }
}

#[test]
fn filtered_requests_leave_consistent_sessions_keepalive_pipelined_and_close() {
    let Some(mut lab) =
        lab_or_skip("filtered_requests_leave_consistent_sessions_keepalive_pipelined_and_close")
    else {
        return;
    };
    let rules = "[[filter]]\nname = \"skip\"\npath = \"/skip/**\"\n\
                 [dye]\nvalue = \"copy-{copy}-{id}\"\nid = \"lab\"\n";
    let c = start(&mut lab, rules, &["", "skip/"], &["", "skip/"]);
    // Sessions of 10 requests; requests 3 and 7 are filtered. Answers of every size.
    let path = skip_path;
    let mut want: BTreeMap<String, (Way, Vec<String>)> = BTreeMap::new();
    for (k, way) in [
        Way::KeepAlive,
        Way::KeepAlive,
        Way::Pipelined,
        Way::Pipelined,
        Way::Close,
    ]
    .into_iter()
    .enumerate()
    {
        let s = format!("{way:?}{k}");
        let reqs: Vec<String> = (1..=10)
            .map(|i| request(&path(&s, i), way == Way::Close))
            .collect();
        send(&lab, &reqs, way);
        let kept = (1..=10)
            .filter(|&i| i != 3 && i != 7)
            .map(|i| path(&s, i))
            .collect();
        want.insert(s, (way, kept));
    }
    // nginx logs a request once its answer is out: the last line may come just after the
    // client read that answer.
    c.online.wait_requests(50, Duration::from_secs(10));
    let online = c.online.requests().unwrap();
    assert_eq!(online.len(), 50, "every request was served online");
    let log = test_log(&c, 40);
    let copier_log = c
        .copier
        .as_ref()
        .map(|p| tail(&p.log(), 30))
        .unwrap_or_default();
    assert_eq!(
        log.len(),
        40,
        "exactly the 8 kept requests of each session:\n{log:#?}\n{copier_log}"
    );
    let got = by_session(&log);
    for (s, (way, kept)) in &want {
        let entries = &got[s];
        let mut uris: Vec<&str> = entries.iter().map(|e| e.uri.as_str()).collect();
        let mut kept: Vec<&str> = kept.iter().map(String::as_str).collect();
        if *way == Way::Close {
            // Separate connections, copied side by side: nginx logs each when its answer ends.
            uris.sort_unstable();
            kept.sort_unstable();
        }
        assert_eq!(
            uris, kept,
            "session {s}: the kept requests (in order on one connection)"
        );
        let conns: std::collections::BTreeSet<u64> = entries.iter().map(|e| e.connection).collect();
        if *way == Way::Close {
            assert_eq!(conns.len(), 8, "session {s}: a connection per request");
        } else {
            assert_eq!(
                conns.len(),
                1,
                "session {s}: one test connection: {entries:#?}"
            );
            let nth: Vec<u64> = entries.iter().map(|e| e.connection_requests).collect();
            assert_eq!(
                nth,
                (1..=8).collect::<Vec<u64>>(),
                "session {s}: the test server saw no other request"
            );
        }
        for e in entries {
            assert_eq!(e.status, 200, "{e:?}");
            let f: usize = e
                .uri
                .split('?')
                .next()
                .unwrap()
                .trim_start_matches("/f")
                .parse()
                .unwrap();
            assert_eq!(
                e.body_bytes_sent, SIZES[f] as u64,
                "the whole answer was sent: {e:?}"
            );
            assert_eq!(e.dye.as_deref(), Some("copy-0-lab"), "dyed: {e:?}");
        }
    }
    assert!(
        online.iter().all(|e| e.dye.is_none()),
        "nothing dyed online"
    );
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert_eq!(
        metric_sum(&m, "copier_rule_matches_total", &["rule=\"skip\""]),
        10.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_requests_dropped_total", &[]),
        10.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_requests_edited_total", &[]),
        40.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_requests_malformed_total", &[]),
        0.0,
        "{m}"
    );
    c.assert_no_leak(&mut lab);
}

#[test]
fn dyed_uploads_of_1mb_arrive_intact() {
    let Some(mut lab) = lab_or_skip("dyed_uploads_of_1mb_arrive_intact") else {
        return;
    };
    let c = start(&mut lab, "[dye]\n", &[], &[]);
    let f = lab.dir().join("upload-1m.bin");
    std::fs::write(&f, lab::pattern_bytes(1 << 20)).unwrap();
    let data = format!("@{}", f.display());
    for (name, chunked) in [("plain", false), ("chunked", true)] {
        let url = format!("http://{}/upload/{name}", addr::ONLINE);
        let mut argv = vec![
            "curl",
            "-sS",
            "--max-time",
            "30",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--data-binary",
            &data,
        ];
        if chunked {
            argv.extend(["-H", "Transfer-Encoding: chunked"]);
        }
        argv.push(&url);
        assert_eq!(lab.exec_ok(Host::Client, &argv).unwrap().trim(), "200");
    }
    c.online.wait_requests(2, Duration::from_secs(10));
    // Each log in the order its uploads ended: a copy may end after the next upload's copy
    // (its session started later than the other's, or waited longer for the test server's
    // window), so the two are matched by URI.
    let mut online = c.online.requests().unwrap();
    assert_eq!(online.len(), 2, "{online:#?}");
    let mut test = test_log(&c, 2);
    assert_eq!(test.len(), 2, "{test:#?}");
    online.sort_by(|a, b| a.uri.cmp(&b.uri));
    test.sort_by(|a, b| a.uri.cmp(&b.uri));
    let dye_line = "X-Traffic-Copy: 1\r\n".len() as u64;
    for (o, t) in online.iter().zip(&test) {
        assert_eq!((&t.method, &t.uri), (&o.method, &o.uri));
        assert_eq!(o.body.as_ref().map(|b| b.0), Some(1 << 20));
        assert_eq!(
            t.body, o.body,
            "the body arrived intact (length and SHA-256)"
        );
        assert_eq!(
            t.request_length,
            o.request_length + dye_line,
            "the dye header added: {t:?}"
        );
        assert_eq!(t.dye.as_deref(), Some("1"));
    }
    c.assert_no_leak(&mut lab);
}

#[test]
fn request_line_rewrites_lengthen_and_shorten_long_sessions() {
    let Some(mut lab) = lab_or_skip("request_line_rewrites_lengthen_and_shorten_long_sessions")
    else {
        return;
    };
    let rules = "[[rewrite]]\nname = \"longer\"\nregex = \"^GET /v1/\"\nreplace = \"GET /version-one/\"\n\
                 [[rewrite]]\nname = \"shorter\"\nregex = \"^GET /long-prefix-name/\"\nreplace = \"GET /s/\"\n";
    let c = start(
        &mut lab,
        rules,
        &["", "v1/", "long-prefix-name/"],
        &["", "version-one/", "s/"],
    );
    let dirs = ["", "v1/", "long-prefix-name/"];
    let path = |s: &str, i: usize| format!("/{}f{}?s={s}&i={i}", dirs[i % 3], i % SIZES.len());
    let rewritten = |p: &str| {
        p.replacen("/v1/", "/version-one/", 1)
            .replacen("/long-prefix-name/", "/s/", 1)
    };
    for (s, way) in [("ka", Way::KeepAlive), ("pipe", Way::Pipelined)] {
        let reqs: Vec<String> = (0..30).map(|i| request(&path(s, i), false)).collect();
        send(&lab, &reqs, way);
    }
    let test = test_log(&c, 60);
    assert_eq!(test.len(), 60, "{test:#?}");
    let got = by_session(&test);
    for s in ["ka", "pipe"] {
        let uris: Vec<String> = got[s].iter().map(|e| e.uri.clone()).collect();
        let want: Vec<String> = (0..30).map(|i| rewritten(&path(s, i))).collect();
        assert_eq!(uris, want, "session {s}");
        assert_eq!(
            got[s]
                .iter()
                .map(|e| e.connection)
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            1
        );
        for e in &got[s] {
            let f: usize = e
                .uri
                .split('?')
                .next()
                .unwrap()
                .rsplit("/f")
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(
                (e.status, e.body_bytes_sent),
                (200, SIZES[f] as u64),
                "{e:?}"
            );
        }
    }
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert_eq!(
        metric_sum(&m, "copier_rule_matches_total", &["rule=\"longer\""]),
        20.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_rule_matches_total", &["rule=\"shorter\""]),
        20.0,
        "{m}"
    );
    c.assert_no_leak(&mut lab);
}

#[test]
fn malformed_http_is_counted_and_the_session_passes_as_captured() {
    let Some(mut lab) = lab_or_skip("malformed_http_is_counted_and_the_session_passes_as_captured")
    else {
        return;
    };
    // `unparsable = "pass"`: the rest of a session that cannot be read passes (the default
    // with filters is to drop it).
    let rules = "unparsable = \"pass\"\n[[filter]]\nname = \"skip\"\npath = \"/skip/**\"\n";
    let c = start(&mut lab, rules, &["", "skip/"], &["", "skip/"]);
    // A header value with a control byte: httparse refuses it, nginx serves it. From there on
    // the session passes as captured, the filtered request after it included.
    let bad = "GET /f1?s=m&i=4 HTTP/1.1\r\nHost: lab\r\nX-Odd: a\u{1}b\r\n\r\n".to_string();
    let reqs = vec![
        request("/f0?s=m&i=1", false),
        request("/skip/f0?s=m&i=2", false),
        request("/f2?s=m&i=3", false),
        bad,
        request("/skip/f1?s=m&i=5", false),
        request("/f3?s=m&i=6", false),
    ];
    send(&lab, &reqs, Way::KeepAlive);
    c.online.wait_requests(6, Duration::from_secs(10));
    let online = c.online.requests().unwrap();
    assert_eq!(
        online.len(),
        6,
        "nginx served the odd request too: {online:#?}"
    );
    let test = test_log(&c, 5);
    let uris: Vec<&str> = test.iter().map(|e| e.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "/f0?s=m&i=1",
            "/f2?s=m&i=3",
            "/f1?s=m&i=4",
            "/skip/f1?s=m&i=5",
            "/f3?s=m&i=6"
        ]
    );
    assert_eq!(
        test.iter()
            .map(|e| e.connection)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        1
    );
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert_eq!(
        metric_sum(&m, "copier_requests_malformed_total", &[]),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_rule_matches_total", &["rule=\"skip\""]),
        1.0,
        "{m}"
    );
    c.assert_no_leak(&mut lab);
}

#[test]
fn other_spellings_of_a_denied_path_are_denied_too() {
    let Some(mut lab) = lab_or_skip("other_spellings_of_a_denied_path_are_denied_too") else {
        return;
    };
    let c = start(
        &mut lab,
        "[[filter]]\nname = \"pay\"\npath = \"/pay/*\"\n",
        &["", "pay/"],
        &["", "pay/"],
    );
    // Every spelling of /pay/f0 that nginx serves as that file, and requests that must pass.
    let denied = [
        "/pay/f0?s=d&i=1",
        "//pay/f0?s=d&i=2",
        "/%70ay/f0?s=d&i=3",
        "/PAY/f0?s=d&i=4",
        "/x/../pay/f0?s=d&i=5",
    ];
    let passed = ["/f0?s=p&i=1", "/payment?s=p&i=2", "/f1?s=p&i=3"];
    let mut reqs: Vec<String> = Vec::new();
    for (d, p) in denied
        .iter()
        .zip(passed.iter().chain(std::iter::repeat(&"/f2?s=p&i=9")))
    {
        reqs.push(request(d, false));
        reqs.push(request(p, false));
    }
    send(&lab, &reqs, Way::KeepAlive);
    for d in &denied {
        send(&lab, &[request(d, true)], Way::Close);
    }
    let n_online = reqs.len() + denied.len();
    c.online.wait_requests(n_online, Duration::from_secs(10));
    let online = c.online.requests().unwrap();
    assert_eq!(online.len(), n_online);
    // nginx served each spelling (a 200 for the file, or a 404 for the upper-case one).
    let kept: Vec<String> = reqs
        .iter()
        .filter_map(|r| {
            let uri = r.split(' ').nth(1).unwrap();
            (!denied.contains(&uri)).then(|| uri.to_string())
        })
        .collect();
    let log = test_log(&c, kept.len());
    let uris: Vec<String> = log.iter().map(|e| e.uri.clone()).collect();
    assert_eq!(
        uris, kept,
        "only the requests outside /pay/ reached the test server"
    );
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert_eq!(
        metric_sum(&m, "copier_rule_matches_total", &["rule=\"pay\""]),
        (2 * denied.len()) as f64,
        "{m}"
    );
    c.assert_no_leak(&mut lab);
}

#[test]
fn a_header_value_from_a_file_is_read_again_on_sighup() {
    let Some(mut lab) = lab_or_skip("a_header_value_from_a_file_is_read_again_on_sighup") else {
        return;
    };
    let token = lab.dir().join("token");
    std::fs::write(&token, "first-token\n").unwrap();
    let rules = format!(
        "[[header]]\nname = \"X-Traffic-Copy\"\nfile = \"{}\"\n",
        token.display()
    );
    let c = start(&mut lab, &rules, &[], &[]);
    send(
        &lab,
        &[request("/?s=a&i=1", false), request("/?s=a&i=2", false)],
        Way::KeepAlive,
    );
    assert_eq!(test_log(&c, 2).len(), 2);
    // A bad value keeps the old one; a good one is taken.
    let copier = c.copier.as_ref().unwrap();
    std::fs::write(&token, "bad\rvalue\n").unwrap();
    copier.signal(nix::sys::signal::Signal::SIGHUP);
    lab::setup::wait_log(
        copier,
        "header files re-read (1 failed)",
        Duration::from_secs(10),
    )
    .unwrap();
    send(&lab, &[request("/?s=b&i=1", false)], Way::KeepAlive);
    // (the copy is edited when captured, a few milliseconds after the online answer)
    assert_eq!(test_log(&c, 3).len(), 3);
    std::fs::write(&token, "second-token").unwrap();
    copier.signal(nix::sys::signal::Signal::SIGHUP);
    lab::setup::wait_log(
        copier,
        "header files re-read (0 failed)",
        Duration::from_secs(10),
    )
    .unwrap();
    send(
        &lab,
        &[request("/?s=c&i=1", false), request("/?s=c&i=2", false)],
        Way::KeepAlive,
    );
    let log = test_log(&c, 5);
    let dyes: Vec<(String, Option<String>)> = log
        .iter()
        .map(|e| (session_of(&e.uri), e.dye.clone()))
        .collect();
    let want: Vec<(String, Option<String>)> = [
        ("a", "first-token"),
        ("a", "first-token"),
        ("b", "first-token"),
        ("c", "second-token"),
        ("c", "second-token"),
    ]
    .iter()
    .map(|(s, v)| (s.to_string(), Some(v.to_string())))
    .collect();
    assert_eq!(dyes, want);
    c.assert_no_leak(&mut lab);
}

#[test]
fn a_recorded_archive_replayed_with_a_slice_filter_gives_exactly_the_selected_requests() {
    let Some(mut lab) = lab_or_skip(
        "a_recorded_archive_replayed_with_a_slice_filter_gives_exactly_the_selected_requests",
    ) else {
        return;
    };
    let archive = lab.dir().join("archive");
    let rules = lab.dir().join("rules.toml");
    std::fs::write(&rules, "[[filter]]\nname = \"skip\"\npath = \"/skip/**\"\n").unwrap();
    let opts = CopyOptions {
        copier_args: vec![
            "--rules".into(),
            rules.display().to_string(),
            "--record".into(),
            archive.display().to_string(),
        ],
        online: NginxOptions {
            files: files(&["", "skip/"]),
            ..NginxOptions::default()
        },
        test: Some(NginxOptions {
            files: files(&["", "skip/"]),
            ..NginxOptions::default()
        }),
        ..CopyOptions::default()
    };
    let mut c = Copying::start(&mut lab, opts).unwrap();
    let path = skip_path;
    for (s, way) in [
        ("r1", Way::KeepAlive),
        ("r2", Way::Pipelined),
        ("r3", Way::KeepAlive),
    ] {
        let reqs: Vec<String> = (1..=10).map(|i| request(&path(s, i), false)).collect();
        send(&lab, &reqs, way);
        // Apart in time, for the time slice below (the index has milliseconds).
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(test_log(&c, 24).len(), 24, "the live copies");
    // The live copier stops: its archive is complete.
    let live = c.copier.take().unwrap();
    assert!(
        live.stop().is_some_and(|s| s.success()),
        "{}",
        tail(&live.log(), 20)
    );
    let index = std::fs::read_to_string(archive.join("index-w0.tsv")).unwrap();
    let lines: Vec<&str> = index.lines().skip(1).collect();
    assert_eq!(lines.len(), 3, "one line per session:\n{index}");
    assert!(
        lines.iter().all(|l| l
            .split('\t')
            .nth(1)
            .unwrap()
            .contains(&addr::CLIENT.to_string())),
        "{index}"
    );
    let file = archive.join(lines[0].split('\t').nth(4).unwrap());
    // The slice: /f2 requests (and the filtered /skip/ ones, which are not in the archive).
    let slice = lab.dir().join("slice.toml");
    std::fs::write(
        &slice,
        "[[filter]]\nname = \"f2\"\naction = \"allow\"\npath = \"/f2\"\n\
         [[filter]]\nname = \"skipped\"\naction = \"allow\"\npath = \"/skip/**\"\n",
    )
    .unwrap();
    let map = format!("80={}:80", addr::TEST);
    let (file_s, slice_s) = (file.display().to_string(), slice.display().to_string());
    let args = [
        "--offline",
        &file_s,
        "--map",
        &map,
        "--rules",
        &slice_s,
        "--session-timeout",
        "5s",
    ];
    let p = c.spawn_copier(&mut lab, "replay", &args).unwrap();
    let status = p.wait_timeout(Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "{}",
        tail(&p.log(), 30)
    );
    let log = test_log(&c, 24 + 9);
    let replayed: Vec<&LogEntry> = log[24..].iter().collect();
    let mut uris: Vec<&str> = replayed.iter().map(|e| e.uri.as_str()).collect();
    uris.sort();
    let mut want: Vec<String> = ["r1", "r2", "r3"]
        .iter()
        .flat_map(|s| [2, 6, 10].map(|i| path(s, i)))
        .collect();
    want.sort();
    assert_eq!(uris, want, "exactly the selected requests of the archive");
    assert!(
        replayed
            .iter()
            .all(|e| e.status == 200 && e.body_bytes_sent == SIZES[2] as u64),
        "{replayed:#?}"
    );
    assert!(
        p.log().contains("matched: f2 9, skipped 0, allow_only 15"),
        "{}",
        tail(&p.log(), 5)
    );
    // A time slice from the index: the sessions that started from r2's start to r3's.
    let start = |l: &str| {
        format!(
            "{:.3}",
            l.split('\t').next().unwrap().parse::<f64>().unwrap() / 1000.0
        )
    };
    let (from, until) = (start(lines[1]), start(lines[2]));
    let mut args = args.to_vec();
    args.extend(["--from", &from, "--until", &until]);
    let p = c.spawn_copier(&mut lab, "replay-slice", &args).unwrap();
    let status = p.wait_timeout(Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "{}",
        tail(&p.log(), 30)
    );
    let log = test_log(&c, 33 + 3);
    let uris: Vec<&str> = log[33..].iter().map(|e| e.uri.as_str()).collect();
    assert_eq!(
        uris,
        [2, 6, 10].map(|i| path("r2", i)),
        "only r2's selected requests ({from} to {until}):\n{index}\n{}",
        tail(&p.log(), 10)
    );
    assert!(
        p.log().contains("outside the time slice"),
        "{}",
        tail(&p.log(), 5)
    );
    c.assert_no_leak(&mut lab);
}

#[test]
fn a_byte_prefix_filter_keeps_a_redis_delete_from_the_test_server() {
    let Some(mut lab) =
        lab_or_skip("a_byte_prefix_filter_keeps_a_redis_delete_from_the_test_server")
    else {
        return;
    };
    start_redis(&mut lab, Host::Online);
    start_redis(&mut lab, Host::Test);
    let rules = lab.dir().join("rules.toml");
    // RESP: DEL with one key, as redis-cli sends it.
    std::fs::write(
        &rules,
        "[[filter]]\nname = \"no-del\"\nprefix = \"*2\\r\\n$3\\r\\nDEL\\r\\n\"\n",
    )
    .unwrap();
    let opts = CopyOptions {
        copier_args: vec![
            "--metrics".into(),
            COPIER_METRICS.into(),
            "--rules".into(),
            rules.display().to_string(),
            "--map".into(),
            format!("6379={}:6379", addr::TEST),
        ],
        extra_ports: vec![6379],
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    // One connection, each command after the answer to the one before.
    let script = format!(
        "printf 'SET k1 v1\\nSET k2 v2\\nDEL k1\\nSET k3 v3\\nGET k1\\n' | redis-cli -h {}",
        addr::ONLINE
    );
    let out = lab.sh(Host::Client, &script).unwrap();
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["OK", "OK", "1", "OK", ""],
        "online: k1 deleted"
    );
    let get = |k: &str| {
        lab.exec_ok(Host::Test, &["redis-cli", "-h", "127.0.0.1", "GET", k])
            .unwrap()
            .trim()
            .to_string()
    };
    let copied = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        get("k3") == "v3"
    });
    assert!(
        copied,
        "the session was copied: {}",
        tail(&c.copier.as_ref().unwrap().log(), 20)
    );
    assert_eq!(
        (get("k1"), get("k2")),
        ("v1".to_string(), "v2".to_string()),
        "the DEL never reached the test server"
    );
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert_eq!(
        metric_sum(&m, "copier_rule_matches_total", &["rule=\"no-del\""]),
        1.0,
        "{m}"
    );
    // The five commands, and whatever redis-cli asks on connecting.
    assert!(
        metric_sum(&m, "copier_requests_total", &["protocol=\"bytes\""]) >= 5.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_requests_total", &["protocol=\"http\""]),
        0.0,
        "{m}"
    );
    c.assert_no_leak(&mut lab);
}
