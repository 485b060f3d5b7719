//! Shadow testing of a capture file (`copier --offline FILE --compare`): tcpdump in the lab
//! captures both directions of curl's requests to nginx serving version 1 on `online`; the
//! copier replays the file (at 5x, twice over with `--loop 2`: the second pass on moved client
//! ports) to a candidate nginx serving version 2 on `test` (one JSON field of `/items/N`
//! changed, `/orders/N` answers 500), and compares each test answer with the online answer the
//! file holds. Keep-alive, gzip (chunked) and short HTTP/1.0 connections. The JSON Lines file
//! and the summary must name exactly the two changed endpoints and their fields, every request
//! of both passes compared once, the file owner-only (0600); a file with one direction only says
//! it has no answers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use compare::jsonl::{read_lines, Line};
use lab::setup::{capture_whole_packets, shop_nginx, tail, CopyOptions, Copying};
use lab::{addr, ifname, lab_or_skip, Host, Proc};

const ITEMS: &str = "GET /items/{n}";
const ORDERS: &str = "GET /orders/{n}";

/// Keep-alive connections (every other one asking for gzip) and short HTTP/1.0 ones; returns the
/// request count: `items` of /items, `orders` of /orders.
fn clients(lab: &lab::Lab) -> (usize, usize, usize) {
    let u = format!("http://{}", addr::ONLINE);
    let script = format!(
        r#"set -e
for c in $(seq 1 6); do
  urls=""
  for i in $(seq 1 5); do urls="$urls {u}/items/$((c * 5 + i)) {u}/orders/$i {u}/health"; done
  if [ $((c % 2)) = 0 ]; then curl -sS -H 'Accept-Encoding: gzip' $urls >/dev/null; else curl -sS $urls >/dev/null; fi
done
for i in $(seq 1 10); do curl -sS --http1.0 {u}/items/$i >/dev/null; curl -sS --http1.0 {u}/orders/$i >/dev/null; done
"#
    );
    lab.sh(Host::Client, &script).unwrap();
    let (items, orders) = (6 * 5 + 10, 6 * 5 + 10);
    (items + orders + 6 * 5, items, orders)
}

/// Per endpoint, the fields of the differing exchanges in the file, and the diff lines.
fn read_file(path: &Path) -> (BTreeMap<String, BTreeSet<String>>, BTreeMap<String, usize>) {
    let rb = read_lines(path).unwrap();
    assert_eq!(rb.bad, 0, "{:?}", rb.first_bad);
    let mut fields: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut lines: BTreeMap<String, usize> = BTreeMap::new();
    for l in rb.lines {
        if let Line::Diff {
            endpoint, diffs, ..
        } = l
        {
            *lines.entry(endpoint.clone()).or_default() += 1;
            fields.entry(endpoint).or_default().extend(
                diffs
                    .into_iter()
                    .map(|f| compare::fields::generalize(&f.field)),
            );
        }
    }
    (fields, lines)
}

/// Runs an offline copier to its end (exit 0); returns its log.
fn replay(c: &Copying, lab: &mut lab::Lab, name: &str, args: &[&str]) -> String {
    let p: Proc = c.spawn_copier(lab, name, args).unwrap();
    let status = p.wait_timeout(Duration::from_secs(120));
    let log = p.log();
    match status {
        Some(s) if s.success() => log,
        Some(s) => panic!("{name} exited with {s}:\n{}", tail(&log, 40)),
        None => panic!("{name} still runs after 120 s:\n{}", tail(&log, 40)),
    }
}

#[test]
fn offline_compare_names_exactly_the_changed_endpoints() {
    let Some(mut lab) = lab_or_skip("offline_compare_names_exactly_the_changed_endpoints") else {
        return;
    };
    let opts = CopyOptions {
        online: shop_nginx(1),
        test: Some(shop_nginx(2)),
        ipv6: false,
        start_copier: false,
        intercept_args: vec!["--payload-bytes".into(), "65495".into()],
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();

    // Both directions, and the client's packets alone (tcpdump's direction filter).
    let both = capture_whole_packets(
        &mut lab,
        Host::Online,
        ifname::ONLINE_TO_CLIENT,
        "tcp port 80",
        "both",
    )
    .unwrap();
    let one = capture_whole_packets(
        &mut lab,
        Host::Online,
        ifname::ONLINE_TO_CLIENT,
        "tcp dst port 80",
        "requests",
    )
    .unwrap();
    let (n, items, orders) = clients(&lab);
    // nginx logs a request after its answer is sent: the client can finish first
    assert_eq!(c.online.wait_requests(n, Duration::from_secs(5)), n);
    let (both, one) = (both.stop(), one.stop());

    let map = format!("80={}:80", addr::TEST);
    let jsonl = lab.dir().join("offline-compare.jsonl");
    let (pcap_s, jsonl_s) = (
        both.to_string_lossy().into_owned(),
        jsonl.to_string_lossy().into_owned(),
    );
    let args = [
        "--offline",
        &pcap_s,
        "--map",
        &map,
        "--speed",
        "5",
        "--loop",
        "2",
        "--session-timeout",
        "20s",
        "--compare",
        "--compare-log",
        &jsonl_s,
    ];
    let log = replay(&c, &mut lab, "copier-offline-compare", &args);
    assert_eq!(
        c.test().wait_requests(2 * n, Duration::from_secs(10)),
        2 * n,
        "both passes copied"
    );

    // Every request of both passes compared once; exactly /items and /orders differ, on every
    // request, and nothing else (no header, no noise).
    let line = log
        .lines()
        .find(|l| l.contains("exchanges compared"))
        .unwrap_or_else(|| panic!("no summary:\n{}", tail(&log, 30)));
    let want = format!(
        "compare: {} exchanges compared, {} equal, {} differing, 0 malformed",
        2 * n,
        2 * (n - items - orders),
        2 * (items + orders)
    );
    assert!(
        line.ends_with(&want),
        "{line}\nwanted {want}\n{}",
        tail(&log, 30)
    );
    assert!(
        log.contains(" 0 unanswered (expired), 0 shed, 0 records dropped"),
        "{}",
        tail(&log, 30)
    );
    let (fields, lines) = read_file(&jsonl);
    // production answers: owner-only, whatever the umask
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&jsonl).unwrap().permissions())
            & 0o777;
    assert_eq!(mode, 0o600, "{} holds production answers", jsonl.display());
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    let want_fields = BTreeMap::from([
        (ITEMS.to_string(), set(&["$.price"])),
        (
            ORDERS.to_string(),
            set(&["$.error", "$.order", "$.state", "status"]),
        ),
    ]);
    assert_eq!(
        fields, want_fields,
        "the file names exactly the changed endpoints and fields"
    );
    assert_eq!(
        lines,
        BTreeMap::from([
            (ITEMS.to_string(), 2 * items),
            (ORDERS.to_string(), 2 * orders)
        ])
    );
    assert!(
        log.contains("online answer packets read for the comparison"),
        "{}",
        tail(&log, 10)
    );

    // One direction only: copied as before, nothing to compare with, and it says why.
    let one_s = one.to_string_lossy().into_owned();
    let args = [
        "--offline",
        &one_s,
        "--map",
        &map,
        "--speed",
        "max",
        "--compare",
        "--compare-timeout",
        "2s",
    ];
    let log = replay(&c, &mut lab, "copier-offline-one-way", &args);
    assert!(
        log.contains("holds no answer of the mapped services"),
        "{}",
        tail(&log, 20)
    );
    assert!(
        log.contains("compare: 0 exchanges compared"),
        "{}",
        tail(&log, 20)
    );
    c.check_alive().unwrap();
    c.assert_no_leak(&mut lab);
}
