//! `copier doctor` and `intercept doctor` in the lab: with the copying setup of the demo running,
//! each doctor exits 0; then every checked item is broken once, for real (a capability taken
//! away, a route removed, an MTU lowered, a firewall rule shadowed, a conntrack table filled, a
//! peer whose clock is 5 s ahead...), and the doctor must name it (and exit non-zero, or 0 with a
//! warning for the items that are warnings), then the item is repaired.

use lab::setup::{CopyOptions, Copying, CONTROL_PORT};
use lab::{addr, ifname, lab_or_skip, workspace_bin, Host, Lab};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Runs a doctor in a host; returns (exit code, stdout).
fn doctor(lab: &Lab, h: Host, prefix: &[&str], bin: &str, args: &[String]) -> (i32, String) {
    let bin = workspace_bin(bin).unwrap().to_string_lossy().into_owned();
    let mut argv: Vec<&str> = prefix.to_vec();
    argv.push(&bin);
    argv.push("doctor");
    argv.extend(args.iter().map(String::as_str));
    let out = lab.exec(h, &argv).unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

fn copier_args(lab: &Lab, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "--map".into(),
        format!("80={}:80", addr::TEST),
        "--map".into(),
        format!("80=[{}]:80", addr::TEST6),
        "--intercept".into(),
        format!("{}:{CONTROL_PORT}", addr::TEST),
        "--secret-file".into(),
        lab.dir().join("secret").to_string_lossy().into_owned(),
        "--interface".into(),
        ifname::ONLINE_TO_CLIENT.into(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn intercept_args(extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "--port",
        "80",
        "--client-range",
        addr::FAKE_CLIENT_NET,
        "--client-range",
        addr::CLIENT_NET,
        "--copier",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push(addr::ONLINE_TO_TEST.to_string());
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// The copier's doctor flags with `flag`'s value replaced.
fn with(lab: &Lab, flag: &str, value: &str) -> Vec<String> {
    let mut args = copier_args(lab, &[]);
    let i = args.iter().position(|a| a == flag).unwrap();
    args[i + 1] = value.to_string();
    args
}

/// Asserts that the doctor names `item` with `tag` (`FAIL` or `WARN`) and exits accordingly.
#[track_caller]
fn names(what: &str, (code, text): (i32, String), tag: &str, item: &str) {
    let line = format!("{tag}  {item}");
    assert!(
        text.contains(&line),
        "{what}: the doctor did not report {line:?}:\n{text}"
    );
    let want = if tag == "FAIL" { 1 } else { 0 };
    assert_eq!(
        code, want,
        "{what}: exit status {code}, want {want}:\n{text}"
    );
}

#[track_caller]
fn healthy(what: &str, (code, text): (i32, String)) {
    assert_eq!(
        code, 0,
        "{what}: the doctor fails on a healthy setup:\n{text}"
    );
    assert!(!text.contains("FAIL"), "{what}:\n{text}");
}

fn sh(lab: &Lab, h: Host, script: &str) {
    lab.sh(h, script)
        .unwrap_or_else(|e| panic!("{script}: {e:#}"));
}

/// Fills the connection-tracking table of host `h` to 92 % of its size with UDP flows toward
/// `peer` (conntrack is switched on in the namespace by a rule that needs it).
fn fill_conntrack(lab: &Lab, h: Host, peer: Ipv4Addr) {
    sh(lab, h, "iptables -w -A OUTPUT -m conntrack --ctstate NEW");
    let max: usize = lab
        .sh(h, "cat /proc/sys/net/netfilter/nf_conntrack_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let want = max * 92 / 100;
    lab.in_ns(h, || {
        let mut sent = 0usize;
        'outer: for _ in 0..64 {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            for port in 1..=65535u16 {
                let _ = s.send_to(b"x", SocketAddrV4::new(peer, port));
                sent += 1;
                if sent >= want {
                    break 'outer;
                }
            }
        }
    })
    .unwrap();
    let count: usize = lab
        .sh(h, "cat /proc/sys/net/netfilter/nf_conntrack_count")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        count * 10 >= max * 9,
        "filled the conntrack table to {count} of {max} only"
    );
}

fn ms_of_day() -> u32 {
    (SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
        % 86_400_000) as u32
}

/// Answers ICMP timestamp requests in host `h` as a host whose clock runs `ahead_ms` ahead
/// (the kernel's own replies are dropped by a firewall rule meanwhile), until `stop`.
fn skewed_clock(
    lab: &Lab,
    h: Host,
    ahead_ms: u32,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    use socket2::{Domain, Protocol, Socket, Type};
    sh(
        lab,
        h,
        "iptables -w -I OUTPUT -p icmp --icmp-type timestamp-reply -m mark ! --mark 0x7 -j DROP",
    );
    let ns = format!("/var/run/netns/{}", lab.ns(h));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        let f = std::fs::File::open(&ns).unwrap();
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let s = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4)).unwrap();
        s.set_mark(7).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        ready_tx.send(()).unwrap();
        let mut buf = [0u8; 1500];
        while !stop.load(Ordering::SeqCst) {
            let Ok(n) = std::io::Read::read(&mut &s, &mut buf) else {
                continue;
            };
            let ihl = usize::from(buf[0] & 0x0f) * 4;
            if n < ihl + 20 || buf[ihl] != 13 {
                continue;
            }
            let from = Ipv4Addr::new(buf[12], buf[13], buf[14], buf[15]);
            let mut reply = buf[ihl..ihl + 20].to_vec();
            reply[0] = 14;
            reply[2..4].copy_from_slice(&[0, 0]);
            let now = (ms_of_day() + ahead_ms) % 86_400_000;
            reply[12..16].copy_from_slice(&now.to_be_bytes());
            reply[16..20].copy_from_slice(&now.to_be_bytes());
            let c = common::checksum::finish(common::checksum::sum(&reply, 0));
            reply[2..4].copy_from_slice(&c.to_be_bytes());
            let _ = s.send_to(&reply, &SocketAddr::V4(SocketAddrV4::new(from, 0)).into());
        }
    });
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the skewed-clock responder started");
    t
}

fn with_skewed_clock<R>(lab: &Lab, h: Host, f: impl FnOnce() -> R) -> R {
    let stop = Arc::new(AtomicBool::new(false));
    let t = skewed_clock(lab, h, 5000, stop.clone());
    let out = f();
    stop.store(true, Ordering::SeqCst);
    t.join().unwrap();
    sh(
        lab,
        h,
        "iptables -w -D OUTPUT -p icmp --icmp-type timestamp-reply -m mark ! --mark 0x7 -j DROP",
    );
    out
}

#[test]
fn copier_doctor_names_every_broken_item() {
    let Some(mut lab) = lab_or_skip("copier_doctor_names_every_broken_item") else {
        return;
    };
    let _c = Copying::start(&mut lab, CopyOptions::default()).expect("start the copying setup");
    let run = |lab: &Lab, extra: &[&str]| {
        doctor(lab, Host::Online, &[], "copier", &copier_args(lab, extra))
    };
    let started = Instant::now();
    let out = run(&lab, &[]);
    // The send path of super-segments toward each target (--gso): on the lab's veth, whole
    // through AF_PACKET once the next hop is known (nothing was copied yet: it may not be).
    assert!(
        out.1
            .contains(&format!("send path toward {}:80", addr::TEST)),
        "{}",
        out.1
    );
    healthy("healthy", out);
    let (_, off) = run(&lab, &["--gso", "off"]);
    assert!(
        off.contains("--gso off: every segment is built and sent one by one"),
        "{off}"
    );

    // capture permission: without CAP_NET_RAW
    let args = copier_args(&lab, &[]);
    names(
        "no CAP_NET_RAW",
        doctor(
            &lab,
            Host::Online,
            &[
                "setpriv",
                "--inh-caps=-net_raw",
                "--bounding-set=-net_raw",
                "--",
            ],
            "copier",
            &args,
        ),
        "FAIL",
        "capture permission",
    );
    // the capture interface
    let args = with(&lab, "--interface", "nosuch0");
    names(
        "no such interface",
        doctor(&lab, Host::Online, &[], "copier", &args),
        "FAIL",
        "interface nosuch0",
    );
    sh(
        &lab,
        Host::Online,
        &format!("ip link set dev {} down", ifname::ONLINE_TO_CLIENT),
    );
    names(
        "interface down",
        run(&lab, &[]),
        "FAIL",
        &format!("interface {}", ifname::ONLINE_TO_CLIENT),
    );
    sh(
        &lab,
        Host::Online,
        &format!("ip link set dev {} up", ifname::ONLINE_TO_CLIENT),
    );
    // offloads: GRO may build 384 KB packets (BIG TCP), more than a 256 KB ring block
    sh(
        &lab,
        Host::Online,
        &format!(
            "ip link set dev {} gro_max_size 393216",
            ifname::ONLINE_TO_CLIENT
        ),
    );
    names(
        "GRO larger than a ring block",
        run(&lab, &[]),
        "FAIL",
        &format!("offloads on {}", ifname::ONLINE_TO_CLIENT),
    );
    sh(
        &lab,
        Host::Online,
        &format!(
            "ip link set dev {} gro_max_size 65536",
            ifname::ONLINE_TO_CLIENT
        ),
    );
    // MTU toward the target
    sh(
        &lab,
        Host::Online,
        &format!("ip link set dev {} mtu 1400", ifname::ONLINE_TO_TEST),
    );
    names(
        "path MTU below --mtu",
        run(&lab, &[]),
        "FAIL",
        &format!("MTU toward {}:80", addr::TEST),
    );
    sh(
        &lab,
        Host::Online,
        &format!("ip link set dev {} mtu 1500", ifname::ONLINE_TO_TEST),
    );
    // routes to the target and to the intercept (the same host in the lab)
    sh(
        &lab,
        Host::Online,
        &format!("ip route add unreachable {}/32", addr::TEST),
    );
    let out = run(&lab, &[]);
    names(
        "no route",
        out.clone(),
        "FAIL",
        &format!("route to target {}:80", addr::TEST),
    );
    names(
        "no route",
        out,
        "FAIL",
        &format!("route to intercept {}:{CONTROL_PORT}", addr::TEST),
    );
    sh(
        &lab,
        Host::Online,
        &format!("ip route del unreachable {}/32", addr::TEST),
    );
    // the intercept: not reachable, the secret refused, a test port it does not guard
    let wrong_port = format!("{}:36599", addr::TEST);
    let args = with(&lab, "--intercept", &wrong_port);
    names(
        "intercept not listening",
        doctor(&lab, Host::Online, &[], "copier", &args),
        "FAIL",
        &format!("intercept {wrong_port} reachable"),
    );
    let other = lab.dir().join("other-secret");
    lab::setup::write_secret(&other).unwrap();
    std::fs::write(&other, "not-the-lab-shared-secret\n").unwrap();
    let args = with(&lab, "--secret-file", &other.to_string_lossy());
    names(
        "wrong secret",
        doctor(&lab, Host::Online, &[], "copier", &args),
        "FAIL",
        &format!("secret accepted by intercept {}:{CONTROL_PORT}", addr::TEST),
    );
    let unguarded = format!("8080={}:8080", addr::TEST);
    names(
        "test port not guarded",
        run(&lab, &["--map", &unguarded]),
        "FAIL",
        &format!(
            "intercept {}:{CONTROL_PORT} guards --map {unguarded}",
            addr::TEST
        ),
    );
    // ip_forward on the production host: a warning
    sh(&lab, Host::Online, "sysctl -qw net.ipv4.ip_forward=1");
    names("ip_forward on", run(&lab, &[]), "WARN", "ip_forward");
    sh(&lab, Host::Online, "sysctl -qw net.ipv4.ip_forward=0");
    // clock skew: the intercept host answers as if its clock were 5 s ahead
    let out = with_skewed_clock(&lab, Host::Test, || run(&lab, &[]));
    names(
        "clock 5 s ahead",
        out,
        "FAIL",
        &format!("clock skew with intercept host {}", addr::TEST),
    );
    healthy("repaired", run(&lab, &[]));
    // conntrack last: its entries stay for 30 s
    fill_conntrack(&lab, Host::Online, addr::TEST);
    names("conntrack table full", run(&lab, &[]), "FAIL", "conntrack");
    eprintln!(
        "copier doctor: every item broken and named in {:?}",
        started.elapsed()
    );
}

#[test]
fn intercept_doctor_names_every_broken_item() {
    let Some(mut lab) = lab_or_skip("intercept_doctor_names_every_broken_item") else {
        return;
    };
    let c = Copying::start(
        &mut lab,
        CopyOptions {
            start_copier: false,
            ..CopyOptions::default()
        },
    )
    .expect("start the copying setup");
    let run = |lab: &Lab, extra: &[&str]| {
        doctor(lab, Host::Test, &[], "intercept", &intercept_args(extra))
    };
    healthy("healthy", run(&lab, &[]));

    // the NFQUEUE rule: shadowed by an earlier ACCEPT, with --queue-bypass, missing
    sh(
        &lab,
        Host::Test,
        "iptables -w -I OUTPUT 1 -p tcp --sport 80 -j ACCEPT",
    );
    names("shadowed rule", run(&lab, &[]), "FAIL", "NFQUEUE rule");
    sh(
        &lab,
        Host::Test,
        "iptables -w -D OUTPUT -p tcp --sport 80 -j ACCEPT",
    );
    sh(
        &lab,
        Host::Test,
        "ip6tables -w -I OUTPUT 1 -p tcp --sport 80 -j NFQUEUE --queue-num 0 --queue-bypass",
    );
    let (code, text) = run(&lab, &[]);
    assert!(text.contains("--queue-bypass"), "{text}");
    names("bypass rule", (code, text), "FAIL", "NFQUEUE rule");
    sh(
        &lab,
        Host::Test,
        "ip6tables -w -D OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0 --queue-bypass",
    );
    // a deleted rule: the intercept (--install-rules) sees the ruleset change and puts it back
    // at once, so the doctor finds it whole again; the rule missing is named further down, once
    // the intercept has stopped and removed its rules
    sh(
        &lab,
        Host::Test,
        "iptables -w -D OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0",
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (code, text) = run(&lab, &[]);
        if code == 0 && !text.contains("FAIL") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the intercept did not put its deleted rule back within 5 s:\n{text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // a port nobody listens on (its rules are there)
    sh(&lab, Host::Test, "iptables -w -I OUTPUT -p tcp --sport 8081 -j NFQUEUE --queue-num 0; ip6tables -w -I OUTPUT -p tcp --sport 8081 -j NFQUEUE --queue-num 0");
    let (code, text) = run(&lab, &["--port", "8081"]);
    assert_eq!(
        text.matches("FAIL").count(),
        1,
        "only the listener is wrong:\n{text}"
    );
    names(
        "no listener",
        (code, text),
        "FAIL",
        "test service on port 8081",
    );
    // the route back to a client range, then rp_filter with the route back on another link
    sh(
        &lab,
        Host::Test,
        &format!("ip route del {}", addr::FAKE_CLIENT_NET),
    );
    names(
        "no route back",
        run(&lab, &[]),
        "FAIL",
        &format!("route back to {}", addr::FAKE_CLIENT_NET),
    );
    sh(
        &lab,
        Host::Test,
        &format!("ip route add {} via {}", addr::FAKE_CLIENT_NET, addr::TEST2),
    );
    let (code, text) = run(&lab, &[]);
    assert_eq!(code, 0, "rp_filter off: copies still come in:\n{text}");
    assert!(
        text.contains(&format!("WARN  route back to {}", addr::FAKE_CLIENT_NET)),
        "{text}"
    );
    sh(&lab, Host::Test, "sysctl -qw net.ipv4.conf.all.rp_filter=1");
    names(
        "strict rp_filter",
        run(&lab, &[]),
        "FAIL",
        &format!("rp_filter on {}", ifname::TEST_TO_ONLINE),
    );
    sh(&lab, Host::Test, "sysctl -qw net.ipv4.conf.all.rp_filter=0");
    sh(
        &lab,
        Host::Test,
        &format!(
            "ip route replace {} via {}",
            addr::FAKE_CLIENT_NET,
            addr::ONLINE_TO_TEST
        ),
    );
    // ip_forward on the test host: a warning
    sh(&lab, Host::Test, "sysctl -qw net.ipv4.ip_forward=1");
    names("ip_forward on", run(&lab, &[]), "WARN", "ip_forward");
    sh(&lab, Host::Test, "sysctl -qw net.ipv4.ip_forward=0");
    // clock skew with the copier host
    let out = with_skewed_clock(&lab, Host::Online, || run(&lab, &[]));
    names(
        "clock 5 s ahead",
        out,
        "FAIL",
        &format!("clock skew with copier host {}", addr::ONLINE_TO_TEST),
    );
    healthy("repaired", run(&lab, &[]));
    // no intercept reading the queue (it removes its rules as it exits)
    c.intercept.stop();
    let out = run(&lab, &[]);
    names("intercept stopped", out.clone(), "FAIL", "NFQUEUE 0 bound");
    names("rule missing", out, "FAIL", "NFQUEUE rule");
    // conntrack last
    fill_conntrack(&lab, Host::Test, addr::ONLINE_TO_TEST);
    names("conntrack table full", run(&lab, &[]), "FAIL", "conntrack");
}

/// Holds one keep-alive connection from the client to the online nginx (one request answered)
/// until stopped: the client network the copier doctor sees on the mapped port.
const HOLD_CONNECTION: &str = r#"
import socket, sys, time
s = socket.create_connection((sys.argv[1], 80), timeout=10)
s.sendall(b"GET /index.html HTTP/1.1\r\nHost: online\r\n\r\n")
s.recv(65536)
print("connected", flush=True)
time.sleep(60)
"#;

#[test]
fn copier_doctor_finds_the_test_hosts_missing_route_back() {
    let Some(mut lab) = lab_or_skip("copier_doctor_finds_the_test_hosts_missing_route_back") else {
        return;
    };
    let _c = Copying::start(
        &mut lab,
        CopyOptions {
            start_copier: false,
            ..CopyOptions::default()
        },
    )
    .expect("start the copying setup");
    let run = |lab: &Lab, extra: &[&str]| {
        doctor(lab, Host::Online, &[], "copier", &copier_args(lab, extra))
    };
    let test_host = addr::TEST;

    // A --client-ip pool: the copier's own flag, routed back on the test host.
    let pool_arg = format!("{},{}", addr::FAKE_CLIENT_NET, addr::FAKE_CLIENT_NET6);
    let pool = ["--client-ip", pool_arg.as_str()];
    let (code, text) = run(&lab, &pool);
    assert!(
        text.contains(&format!(
            "ok    route back to {} on test host {test_host}",
            addr::FAKE_CLIENT_NET
        )),
        "{text}"
    );
    healthy("pool routed back", (code, text));
    sh(
        &lab,
        Host::Test,
        &format!("ip route del {}", addr::FAKE_CLIENT_NET),
    );
    let (code, text) = run(&lab, &pool);
    sh(
        &lab,
        Host::Test,
        &format!(
            "ip route replace {} via {}",
            addr::FAKE_CLIENT_NET,
            addr::ONLINE_TO_TEST
        ),
    );
    let fix = format!(
        "on the test host {test_host}: ip route add {} via {}",
        addr::FAKE_CLIENT_NET,
        addr::ONLINE_TO_TEST
    );
    assert!(text.contains(&fix), "the fix is not named:\n{text}");
    names(
        "pool not routed back",
        (code, text),
        "FAIL",
        &format!(
            "route back to {} on test host {test_host}",
            addr::FAKE_CLIENT_NET
        ),
    );

    // The real clients: the network of a connection seen on the mapped port.
    let online = addr::ONLINE.to_string();
    let client = lab
        .spawn(
            Host::Client,
            "hold-connection",
            &["python3", "-c", HOLD_CONNECTION, &online],
        )
        .unwrap();
    lab::setup::wait_log(&client, "connected", Duration::from_secs(20)).unwrap();
    let (code, text) = run(&lab, &[]);
    assert!(
        text.contains(&format!(
            "ok    route back to {} on test host {test_host}",
            addr::CLIENT_NET
        )),
        "{text}"
    );
    healthy("clients routed back", (code, text));
    sh(
        &lab,
        Host::Test,
        &format!("ip route del {}", addr::CLIENT_NET),
    );
    let out = run(&lab, &[]);
    sh(
        &lab,
        Host::Test,
        &format!(
            "ip route replace {} via {}",
            addr::CLIENT_NET,
            addr::ONLINE_TO_TEST
        ),
    );
    client.stop();
    names(
        "clients not routed back",
        out,
        "FAIL",
        &format!(
            "route back to {} on test host {test_host}",
            addr::CLIENT_NET
        ),
    );
}
