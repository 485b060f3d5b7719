//! The copier fed by a traffic mirror (`--mirror`), end to end. `online`'s client link is
//! mirrored, both directions, into a VXLAN device toward `test2` (see `lab::mirror`), which runs
//! the copier and sees nothing of the traffic but the mirror; the copies go to the test nginx
//! through the intercept as usual. Asserted from the two access logs and the copier's metrics:
//! every request exactly once (keep-alive, short connections, a 10 MB upload), nothing leaked;
//! with 1 % of the mirror's datagrams dropped and with every client packet mirrored twice, the
//! mirror counts what was injected and no request reaches the test server with wrong bytes.
//! GENEVE (no GENEVE device in this kernel) and truncation are tested with a user-space mirror:
//! a raw socket on `online`'s client link wraps each packet in GENEVE, with options, cutting
//! some short. The socket's kernel filter drops another VNI's datagrams and, without
//! `--compare`, the answers before they are read; with `--compare` the answers still come.

use lab::mirror::{self, MIRROR_DST, MIRROR_IF};
use lab::setup::{fingerprints, metric_sum, scrape_metrics, tail, CopyOptions, Copying};
use lab::{addr, lab_or_skip, lab_or_skip_with, Host, Lab, LabOptions, LogEntry, Proc};
use std::collections::BTreeMap;
use std::time::Duration;

const METRICS: &str = "127.0.0.1:9467";

fn options() -> CopyOptions {
    CopyOptions {
        start_copier: false,
        ipv6: false,
        ..CopyOptions::default()
    }
}

/// The copier on `test2`, reading the mirror.
fn mirror_copier(c: &Copying, lab: &mut Lab, mirror: &str) -> Proc {
    mirror_copier_with(c, lab, mirror, &[])
}

fn mirror_copier_with(c: &Copying, lab: &mut Lab, mirror: &str, extra: &[&str]) -> Proc {
    let map = format!("80={}:80", addr::TEST);
    let mut argv = vec![
        "--mirror",
        mirror,
        "--map",
        &map,
        "--metrics",
        METRICS,
        "--seed",
        "7",
    ];
    argv.extend_from_slice(extra);
    c.spawn_copier_in(lab, Host::Test2, "copier", &argv)
        .unwrap()
}

fn online_url(path: &str) -> String {
    format!("http://{}{path}", addr::ONLINE)
}

/// Short connections, a keep-alive connection of five requests and an upload of `upload`
/// bytes; returns the number of requests.
fn traffic(lab: &Lab, tag: &str, short: usize, upload: usize) -> usize {
    let u = |q: &str| online_url(&format!("/index.html?{tag}={q}"));
    lab.sh(
        Host::Client,
        &format!(
            "for i in $(seq 1 {short}); do curl -sS -o /dev/null '{}'$i || exit 1; done",
            u("s")
        ),
    )
    .unwrap();
    let ka: Vec<String> = (1..=5).map(|i| u(&format!("k{i}"))).collect();
    let mut argv = vec!["curl", "-sS"];
    for k in &ka {
        argv.extend(["-o", "/dev/null", k.as_str()]);
    }
    lab.exec_ok(Host::Client, &argv).unwrap();
    let f = lab.dir().join(format!("upload-{tag}.bin"));
    std::fs::write(&f, lab::pattern_bytes(upload)).unwrap();
    let code = lab
        .exec_ok(
            Host::Client,
            &[
                "curl",
                "-sS",
                "--max-time",
                "60",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--data-binary",
                &format!("@{}", f.display()),
                &online_url(&format!("/upload/{tag}")),
            ],
        )
        .unwrap();
    assert_eq!(code.trim(), "200");
    short + 5 + 1
}

/// Every complete request the test server logged is one the online server logged, at most as
/// often (no wrong bytes, no extra copy); returns (complete, aborted) counts. An aborted one
/// (a copy given up over a hole in the mirror: nginx logs what it had) must be an upload cut
/// short, never a complete request with other bytes.
fn assert_no_wrong_bytes(online: &[LogEntry], test: &[LogEntry], log: &str) -> (usize, usize) {
    let on = fingerprints(online);
    let (done, aborted): (Vec<&LogEntry>, Vec<&LogEntry>) =
        test.iter().partition(|e| e.status == 200);
    let got: BTreeMap<String, usize> =
        fingerprints(&done.iter().map(|e| (*e).clone()).collect::<Vec<_>>());
    for (k, n) in &got {
        assert!(
            on.get(k).is_some_and(|m| m >= n),
            "the test server got {n} x {k}, online {:?}\ncopier log:\n{}",
            on.get(k),
            tail(log, 30)
        );
    }
    for e in &aborted {
        let whole = online
            .iter()
            .find(|o| o.uri == e.uri)
            .expect("an aborted copy of an online request");
        assert!(
            e.request_length < whole.request_length,
            "aborted copy {e:?} is not shorter than {whole:?}"
        );
    }
    (done.len(), aborted.len())
}

/// An iptables rule's packet count in host `h` (`-nvxL CHAIN`, the rule whose line holds `tag`).
fn rule_packets(lab: &Lab, h: Host, chain: &str, tag: &str) -> u64 {
    let out = lab.exec_ok(h, &["iptables", "-w", "-nvxL", chain]).unwrap();
    out.lines()
        .filter(|l| l.contains(tag))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn mirror_metrics(lab: &Lab) -> String {
    scrape_metrics(lab, Host::Test2, METRICS)
}

fn dropped(m: &str, reason: &str) -> f64 {
    metric_sum(
        m,
        "copier_mirror_dropped_total",
        &[&format!("reason=\"{reason}\"")],
    )
}

/// The mirror's metrics once the kernel filter's count is above `min`: the copier reads the
/// kernel's counters and exports once a second, so they are read again for at most 5 s.
fn metrics_once_filtered(lab: &Lab, min: f64) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let m = mirror_metrics(lab);
        if dropped(&m, "kernel_filter") > min || std::time::Instant::now() > deadline {
            return m;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn vxlan_mirror_copies_keepalive_short_connections_and_a_10mb_upload() {
    let Some(mut lab) =
        lab_or_skip("vxlan_mirror_copies_keepalive_short_connections_and_a_10mb_upload")
    else {
        return;
    };
    let mut c = Copying::start(&mut lab, options()).unwrap();
    mirror::build(&lab, true).unwrap();
    let p = mirror_copier(&c, &mut lab, "vxlan");
    let n = traffic(&lab, "clean", 10, 10 << 20);
    c.copier = Some(p);
    assert_eq!(c.assert_copied_exactly(&mut lab), n);
    let m = metrics_once_filtered(&lab, 100.0);
    let client = metric_sum(&m, "copier_mirror_packets_total", &["direction=\"client\""]);
    let server = metric_sum(&m, "copier_mirror_packets_total", &["direction=\"server\""]);
    // The 10 MB upload alone is over 7000 client segments of at most 1448 bytes. Without
    // --compare the answers are dropped by the socket's filter in the kernel, never read.
    assert!(
        client > 7000.0 && server == 0.0,
        "client {client}, server {server}:\n{m}"
    );
    assert!(dropped(&m, "kernel_filter") > 100.0, "{m}");
    for why in ["truncated", "duplicate", "short", "bad_header"] {
        assert_eq!(dropped(&m, why), 0.0, "{why}:\n{m}");
    }
    assert_eq!(metric_sum(&m, "copier_mirror_vnis_seen", &[]), 1.0);
}

#[test]
fn vxlan_mirror_with_one_percent_loss() {
    let Some(mut lab) = lab_or_skip("vxlan_mirror_with_one_percent_loss") else {
        return;
    };
    let mut c = Copying::start(&mut lab, options()).unwrap();
    mirror::build(&lab, true).unwrap();
    let p = mirror_copier(&c, &mut lab, "vxlan");
    c.copier = Some(p.clone());
    // Every mirror datagram is counted as it arrives, then 1 % are dropped; from when the
    // copier's socket is bound, so the firewall counts none the copier could not read.
    lab.sh(
        Host::Test2,
        &format!(
            "iptables -w -A INPUT -i {MIRROR_IF} -p udp --dport 4789 -m comment --comment mirror-in && \
             iptables -w -A INPUT -i {MIRROR_IF} -p udp --dport 4789 -m statistic --mode random --probability 0.01 \
               -m comment --comment mirror-loss -j DROP"
        ),
    )
    .unwrap();
    traffic(&lab, "loss", 40, 4 << 20);
    c.settle(Duration::from_secs(3), Duration::from_secs(60));
    // The firewall counts a datagram before the copier reads it, and the copier exports its
    // counters once a second: both are read again until they agree (a late retransmission or
    // close may arrive between the two reads), for at most 5 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let (m, arrived, lost, read) = loop {
        let (arrived, lost) = (
            rule_packets(&lab, Host::Test2, "INPUT", "mirror-in"),
            rule_packets(&lab, Host::Test2, "INPUT", "mirror-loss"),
        );
        let m = mirror_metrics(&lab);
        let read = metric_sum(&m, "copier_mirror_datagrams_total", &[])
            + dropped(&m, "socket_buffer")
            + dropped(&m, "kernel_filter");
        if read == (arrived - lost) as f64 || std::time::Instant::now() > deadline {
            break (m, arrived, lost, read);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(lost > 0, "no datagram was dropped out of {arrived}");
    assert_eq!(read, (arrived - lost) as f64, "the copier read (or its filter dropped) every datagram that passed ({arrived} arrived, {lost} dropped):\n{m}");
    let online = c.online.requests().unwrap();
    let test = c.test().requests().unwrap();
    let (done, aborted) = assert_no_wrong_bytes(&online, &test, &p.log());
    // Most short sessions have no lost packet; each lost packet costs at most its session.
    assert!(
        done as u64 + lost >= online.len() as u64 && done >= online.len() / 2,
        "{done} complete, {aborted} aborted of {}, {lost} lost",
        online.len()
    );
    c.check_alive().unwrap();
    c.assert_no_leak(&mut lab);
}

#[test]
fn vxlan_mirror_with_duplicates() {
    let Some(mut lab) = lab_or_skip("vxlan_mirror_with_duplicates") else {
        return;
    };
    let mut c = Copying::start(&mut lab, options()).unwrap();
    mirror::build(&lab, true).unwrap();
    // The clients' direction mirrored twice (a second mirred action on the rule): every client
    // packet arrives twice.
    mirror::mirror_rule(&lab, "ingress", 2).unwrap();
    let p = mirror_copier(&c, &mut lab, "vxlan");
    c.copier = Some(p);
    let n = traffic(&lab, "dup", 10, 1 << 20);
    assert_eq!(c.assert_copied_exactly(&mut lab), n);
    let m = mirror_metrics(&lab);
    let client = metric_sum(&m, "copier_mirror_packets_total", &["direction=\"client\""]);
    let dup = dropped(&m, "duplicate");
    assert!(client > 700.0, "{m}");
    assert_eq!(
        dup, client,
        "every client packet came twice, once delivered:\n{m}"
    );
}

/// Sends `n` VXLAN datagrams of VNI `vni` to the mirror host, each a client's SYN to the online
/// service (what the copier would copy if it took that session).
const FOREIGN_VNI: &str = r#"
import socket, struct, sys
dst, vni, n, client, online = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 1, 0, 64, 6, 0, socket.inet_aton(client), socket.inet_aton(online))
tcp = struct.pack("!HHIIBBHHH", 40000, 80, 1, 0, 0x50, 0x02, 65535, 0, 0)
d = struct.pack("!II", 0x08000000, vni << 8) + bytes(12) + b"\x08\x00" + ip + tcp
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(n):
    s.sendto(d, (dst, 4789))
"#;

#[test]
fn vxlan_mirror_kernel_filter_drops_other_vnis_and_the_answers() {
    let Some(mut lab) = lab_or_skip("vxlan_mirror_kernel_filter_drops_other_vnis_and_the_answers")
    else {
        return;
    };
    let mut c = Copying::start(&mut lab, options()).unwrap();
    mirror::build(&lab, true).unwrap();
    let p = mirror_copier_with(&c, &mut lab, "vxlan", &["--vni", "42"]);
    c.copier = Some(p);
    lab.sh(Host::Test2, &format!("iptables -w -A INPUT -i {MIRROR_IF} -p udp --dport 4789 -m comment --comment mirror-in")).unwrap();
    let script = lab.dir().join("foreign_vni.py");
    std::fs::write(&script, FOREIGN_VNI).unwrap();
    let (s, client, online) = (
        script.display().to_string(),
        addr::CLIENT.to_string(),
        addr::ONLINE.to_string(),
    );
    let foreign = 300u64;
    lab.exec_ok(
        Host::Online,
        &[
            "python3",
            &s,
            MIRROR_DST,
            "43",
            &foreign.to_string(),
            &client,
            &online,
        ],
    )
    .unwrap();
    let n = traffic(&lab, "kf", 10, 1 << 20);
    assert_eq!(c.assert_copied_exactly(&mut lab), n);
    // Every datagram that arrived was either read (and then delivered: nothing of another VNI
    // or direction reached user space) or dropped by the filter. The firewall counts first,
    // the copier exports once a second: read both again until they agree, at most 5 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let (m, arrived, read, filtered) = loop {
        let arrived = rule_packets(&lab, Host::Test2, "INPUT", "mirror-in");
        let m = mirror_metrics(&lab);
        let read = metric_sum(&m, "copier_mirror_datagrams_total", &[]);
        let filtered = dropped(&m, "kernel_filter");
        if read + filtered == arrived as f64 || std::time::Instant::now() > deadline {
            break (m, arrived, read, filtered);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(read + filtered, arrived as f64, "{arrived} arrived:\n{m}");
    let client = metric_sum(&m, "copier_mirror_packets_total", &["direction=\"client\""]);
    assert_eq!(
        read, client,
        "every datagram read was a client packet of VNI 42:\n{m}"
    );
    for why in ["vni", "unselected", "socket_buffer"] {
        assert_eq!(dropped(&m, why), 0.0, "{why}:\n{m}");
    }
    // The foreign session and the answers (at least one per request) went in the kernel.
    assert!(
        filtered >= (foreign + n as u64) as f64,
        "{filtered} filtered:\n{m}"
    );
    assert_eq!(
        metric_sum(&m, "copier_mirror_vnis_seen", &[]),
        1.0,
        "VNI 43 never read:\n{m}"
    );
}

/// A user-space GENEVE mirror on `online`: a raw socket on the client link (both directions)
/// wraps each IPv4 frame in GENEVE with 8 bytes of options, VNI 7, and sends it to `test2`;
/// every `cut_every`-th frame that carries TCP payload to port 80 is cut to 100 bytes of inner
/// packet. Writes the number it cut to `<dir>/cut` when killed.
const GENEVE_MIRROR: &str = r#"
import socket, struct, sys, signal
iface, dst, cut_every, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
raw.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE: hold an upload's burst
raw.bind((iface, 0))
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
hdr = struct.pack("!BBHI", 2, 0, 0x6558, 7 << 8) + bytes(8)
n = cut = 0
def stop(*_):
    open(out, "w").write(str(cut))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(out + ".ready", "w").write("1")
while True:
    f = raw.recv(65535)
    if len(f) < 34 or f[12:14] != b"\x08\x00" or f[23] != 6:
        continue
    ihl = (f[14] & 15) * 4
    tcp = 14 + ihl
    dport = struct.unpack("!H", f[tcp + 2:tcp + 4])[0]
    data = struct.unpack("!H", f[16:18])[0] - ihl - (f[tcp + 12] >> 4) * 4
    if dport == 80 and data > 0:
        n += 1
        if n % cut_every == 0:
            f = f[:14 + 100]
            cut += 1
    udp.sendto(hdr + f, (dst, 6081))
"#;

#[test]
fn geneve_mirror_from_user_space_with_truncation() {
    // Offloads off: the user-space mirror sees MTU-sized frames, as a real mirror sends.
    let Some(mut lab) = lab_or_skip_with(
        "geneve_mirror_from_user_space_with_truncation",
        LabOptions {
            offloads: false,
            ..LabOptions::default()
        },
    ) else {
        return;
    };
    let mut c = Copying::start(&mut lab, options()).unwrap();
    mirror::build(&lab, false).unwrap();
    let script = lab.dir().join("geneve_mirror.py");
    std::fs::write(&script, GENEVE_MIRROR).unwrap();
    let out = lab.dir().join("cut");
    let (s, o) = (script.display().to_string(), out.display().to_string());
    let mirror_proc = lab
        .spawn(
            Host::Online,
            "geneve-mirror",
            &[
                "python3",
                &s,
                lab::ifname::ONLINE_TO_CLIENT,
                MIRROR_DST,
                "50",
                &o,
            ],
        )
        .unwrap();
    for _ in 0..100 {
        if std::path::Path::new(&format!("{o}.ready")).exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let p = mirror_copier(&c, &mut lab, "geneve");
    c.copier = Some(p.clone());
    traffic(&lab, "geneve", 30, 1 << 20);
    c.settle(Duration::from_secs(3), Duration::from_secs(60));
    mirror_proc.stop();
    let cut: f64 = std::fs::read_to_string(&out)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let m = metrics_once_filtered(&lab, 0.0);
    assert!(cut >= 10.0, "the mirror cut {cut} packets");
    assert_eq!(dropped(&m, "truncated"), cut, "{m}");
    let online = c.online.requests().unwrap();
    let test = c.test().requests().unwrap();
    let (done, aborted) = assert_no_wrong_bytes(&online, &test, &p.log());
    // The short sessions (one data segment each, every 50th cut) are nearly all copied.
    assert!(
        done >= online.len() / 2,
        "{done} complete, {aborted} aborted of {}:\n{}",
        online.len(),
        tail(&p.log(), 20)
    );
    // The answers are dropped in the kernel, its program reading past GENEVE's options.
    assert_eq!(
        metric_sum(&m, "copier_mirror_packets_total", &["direction=\"server\""]),
        0.0,
        "{m}"
    );
    assert!(dropped(&m, "kernel_filter") > 0.0, "{m}");
    c.check_alive().unwrap();
    c.assert_no_leak(&mut lab);
}

#[test]
fn compare_on_a_mirror_host_names_the_changed_endpoints() {
    // The online answers come from the mirror: nothing is captured on the online host.
    let Some(mut lab) = lab_or_skip("compare_on_a_mirror_host_names_the_changed_endpoints") else {
        return;
    };
    let opts = CopyOptions {
        online: lab::setup::shop_nginx(1),
        test: Some(lab::setup::shop_nginx(2)),
        intercept_args: vec!["--payload-bytes".into(), "65495".into()],
        ..options()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    mirror::build(&lab, true).unwrap();
    let map = format!("80={}:80", addr::TEST);
    let jsonl = lab.dir().join("mirror-compare.jsonl");
    let jsonl_s = jsonl.display().to_string();
    let p = c
        .spawn_copier_in(
            &mut lab,
            Host::Test2,
            "copier",
            &[
                "--mirror",
                "vxlan",
                "--map",
                &map,
                "--compare",
                "--compare-log",
                &jsonl_s,
            ],
        )
        .unwrap();
    let u = online_url("");
    let script = format!(
        "set -e; for c in 1 2 3 4; do curl -sS {u}/items/$c {u}/orders/$c {u}/health >/dev/null; done; \
         for i in 1 2 3 4 5 6; do curl -sS --http1.0 {u}/items/$i >/dev/null; done"
    );
    lab.sh(Host::Client, &script).unwrap();
    let n = 4 * 3 + 6;
    assert_eq!(c.test().wait_requests(n, Duration::from_secs(30)), n);
    std::thread::sleep(Duration::from_secs(2));
    p.stop();
    let log = p.log();
    let line = log
        .lines()
        .find(|l| l.contains("exchanges compared"))
        .unwrap_or_else(|| panic!("no summary:\n{}", tail(&log, 30)));
    let want = format!("compare: {n} exchanges compared, 4 equal, 14 differing, 0 malformed");
    assert!(
        line.ends_with(&want),
        "{line}\nwanted {want}\n{}",
        tail(&log, 30)
    );
    let rb = compare::jsonl::read_lines(&jsonl).unwrap();
    let mut endpoints = std::collections::BTreeSet::new();
    for l in rb.lines {
        if let compare::jsonl::Line::Diff { endpoint, .. } = l {
            endpoints.insert(endpoint);
        }
    }
    assert_eq!(
        endpoints.into_iter().collect::<Vec<_>>(),
        vec!["GET /items/{n}".to_string(), "GET /orders/{n}".to_string()]
    );
    c.assert_no_leak(&mut lab);
}

#[test]
fn doctor_checks_the_mirror_input() {
    let Some(mut lab) = lab_or_skip("doctor_checks_the_mirror_input") else {
        return;
    };
    let _c = Copying::start(&mut lab, options()).unwrap();
    mirror::build(&lab, true).unwrap();
    // The mirror link's far end at 1500: a 1500-byte inner packet plus 50 does not fit.
    lab.sh(Host::Test2, &format!("ip link set {MIRROR_IF} mtu 1500"))
        .unwrap();
    let bin = lab::workspace_bin("copier").unwrap().display().to_string();
    let secret = lab.dir().join("secret").display().to_string();
    let map = format!("80={}:80", addr::TEST);
    let icpt = format!("{}:{}", addr::TEST, lab::setup::CONTROL_PORT);
    let doctor = |extra: &[&str]| {
        let mut argv = vec![
            bin.as_str(),
            "doctor",
            "--map",
            &map,
            "--intercept",
            &icpt,
            "--secret-file",
            &secret,
        ];
        argv.extend_from_slice(extra);
        let out = lab.exec(Host::Test2, &argv).unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    // Traffic while the doctor listens: short connections, small packets (they fit).
    let traffic = |lab: &Lab| {
        lab.sh(
            Host::Client,
            &format!(
                "for i in $(seq 1 30); do curl -sS -o /dev/null {}; sleep 0.1; done",
                online_url("/index.html")
            ),
        )
        .unwrap();
    };
    let (code, text) = std::thread::scope(|s| {
        let t = s.spawn(|| traffic(&lab));
        let r = doctor(&["--mirror", "vxlan", "--mirror-listen", "4s"]);
        t.join().unwrap();
        r
    });
    for line in [
        "ok    mirror port: vxlan mirror on UDP port 4789: bound",
        "ok    mirror packets arriving:",
        "ok    mirror VNIs: seen [42]",
        "ok    mirror directions:",
        "ok    mirror truncation:",
        "WARN  mirror path MTU from 198.18.4.1: 1500 on dev mir0",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
    assert_eq!(code, 0, "{text}");
    // A VNI the mirror does not carry, and nothing arriving on another port.
    let (code, text) = std::thread::scope(|s| {
        let t = s.spawn(|| traffic(&lab));
        let r = doctor(&["--mirror", "vxlan", "--vni", "7", "--mirror-listen", "4s"]);
        t.join().unwrap();
        r
    });
    assert!(
        text.contains("FAIL  mirror VNIs: seen [42], none of --vni [7]"),
        "{text}"
    );
    assert_ne!(code, 0);
    let (code, text) = doctor(&["--mirror", "geneve", "--mirror-listen", "1s"]);
    assert!(
        text.contains("FAIL  mirror packets arriving: none in 1s"),
        "{text}"
    );
    assert_ne!(code, 0);
}
