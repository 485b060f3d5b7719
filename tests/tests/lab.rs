//! The lab itself: it carries real traffic, keeps to its own addresses, and leaves nothing behind.

use lab::{addr, lab_or_skip, namespaces_with_prefix, Host, NginxOptions};
use std::path::Path;

fn curl(lab: &lab::Lab, url: &str) -> String {
    lab.exec_ok(Host::Client, &["curl", "-sS", "--max-time", "5", url])
        .expect("curl from client")
}

#[test]
fn curl_from_client_reaches_online_nginx() {
    let Some(mut lab) = lab_or_skip("curl_from_client_reaches_online_nginx") else {
        return;
    };
    let online = lab.nginx(Host::Online, NginxOptions::default()).unwrap();
    let body = curl(&lab, &format!("http://{}/index.html", addr::ONLINE));
    assert!(body.contains("lab nginx"), "unexpected page: {body:?}");
    let reqs = online.requests().unwrap();
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert_eq!(reqs[0].remote_addr, addr::CLIENT.to_string());
    assert_eq!(reqs[0].method, "GET");
    assert_eq!(reqs[0].uri, "/index.html");
    assert_eq!(reqs[0].status, 200);

    // an upload is logged with its body's length and hash
    let data = lab.dir().join("upload.bin");
    std::fs::write(&data, lab::pattern_bytes(100_000)).unwrap();
    let url = format!("http://{}/upload/x", addr::ONLINE);
    let arg = format!("@{}", data.display());
    lab.exec_ok(
        Host::Client,
        &[
            "curl",
            "-sS",
            "--max-time",
            "5",
            "--data-binary",
            &arg,
            &url,
        ],
    )
    .unwrap();
    let reqs = online.requests().unwrap();
    assert_eq!(reqs.len(), 2);
    let (len, _hash) = reqs[1].body.clone().expect("upload body recorded");
    assert_eq!(len, 100_000);
}

#[test]
fn no_route_leaves_the_lab() {
    let Some(lab) = lab_or_skip("no_route_leaves_the_lab") else {
        return;
    };
    for h in Host::ALL {
        let routes = lab.exec_ok(h, &["ip", "-4", "route", "show"]).unwrap();
        for r in routes.lines() {
            assert!(!r.starts_with("default"), "{}: default route {r}", h.name());
            let dst = r.split_whitespace().next().unwrap();
            assert!(
                dst.starts_with("198.18.") || dst.starts_with("198.19."),
                "{}: route outside 198.18.0.0/15: {r}",
                h.name()
            );
        }
    }
    // the test host reaches the client subnet back through online
    let r = lab
        .exec_ok(
            Host::Test,
            &["ip", "route", "get", &addr::CLIENT.to_string()],
        )
        .unwrap();
    assert!(r.contains(&format!("via {}", addr::ONLINE_TO_TEST)), "{r}");

    // IPv6: only the lab's unique-local prefixes and the kernel's link-local routes
    let mut v6_routes = 0;
    for h in Host::ALL {
        let routes = lab.exec_ok(h, &["ip", "-6", "route", "show"]).unwrap();
        for r in routes.lines() {
            assert!(
                !r.starts_with("default"),
                "{}: default IPv6 route {r}",
                h.name()
            );
            let dst = r.split_whitespace().next().unwrap();
            assert!(
                dst.starts_with("fd00:198:18:")
                    || dst.starts_with("fd00:198:19:")
                    || dst == "fe80::/64",
                "{}: IPv6 route outside the lab's prefixes: {r}",
                h.name()
            );
            v6_routes += 1;
        }
    }
    assert!(
        v6_routes >= 6,
        "every link should have its IPv6 prefix route"
    );
    for (dst, via) in [
        (addr::CLIENT6, addr::ONLINE_TO_TEST6),
        ("fd00:198:19::5".parse().unwrap(), addr::ONLINE_TO_TEST6),
    ] {
        let r = lab
            .exec_ok(Host::Test, &["ip", "-6", "route", "get", &dst.to_string()])
            .unwrap();
        assert!(r.contains(&format!("via {via}")), "{r}");
    }
    let r = lab
        .exec_ok(
            Host::Test2,
            &["ip", "-6", "route", "get", &addr::CLIENT6.to_string()],
        )
        .unwrap();
    assert!(r.contains(&format!("via {}", addr::TEST_TO_TEST2_6)), "{r}");
}

#[test]
fn nginx_serves_ipv6_too() {
    let Some(mut lab) = lab_or_skip("nginx_serves_ipv6_too") else {
        return;
    };
    let online = lab.nginx(Host::Online, NginxOptions::default()).unwrap();
    let test = lab.nginx(Host::Test, NginxOptions::default()).unwrap();
    // the addresses are usable at once (nodad): no wait before the first request
    let body = curl(&lab, &format!("http://[{}]/index.html", addr::ONLINE6));
    assert!(body.contains("lab nginx"), "unexpected page: {body:?}");
    curl(&lab, &format!("http://{}/index.html?v4", addr::ONLINE));
    let reqs = online.requests().unwrap();
    let from: Vec<(&str, &str)> = reqs
        .iter()
        .map(|e| (e.remote_addr.as_str(), e.uri.as_str()))
        .collect();
    let (c6, c4) = (addr::CLIENT6.to_string(), addr::CLIENT.to_string());
    assert_eq!(
        from,
        vec![
            (c6.as_str(), "/index.html"),
            (c4.as_str(), "/index.html?v4")
        ]
    );
    // the test nginx answers over IPv6 on its link, and test2 reaches it through its route
    let url = format!("http://[{}]/", addr::TEST6);
    lab.exec_ok(
        Host::Online,
        &["curl", "-sS", "--max-time", "5", "-o", "/dev/null", &url],
    )
    .unwrap();
    lab.exec_ok(
        Host::Test2,
        &["curl", "-sS", "--max-time", "5", "-o", "/dev/null", &url],
    )
    .unwrap();
    let reqs = test.requests().unwrap();
    let from: Vec<&str> = reqs.iter().map(|e| e.remote_addr.as_str()).collect();
    assert_eq!(
        from,
        vec![addr::ONLINE_TO_TEST6.to_string(), addr::TEST2_6.to_string()]
    );
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn lab_is_removed_when_dropped_and_on_panic() {
    let Some(mut lab) = lab_or_skip("lab_is_removed_when_dropped_and_on_panic") else {
        return;
    };
    let prefix = lab.prefix().to_owned();
    let nginx_pid = {
        lab.nginx(Host::Test, NginxOptions::default()).unwrap();
        let p = lab
            .spawn(Host::Online, "sleeper", &["sleep", "300"])
            .unwrap();
        p.pid()
    };
    assert_eq!(namespaces_with_prefix(&prefix).len(), 4);
    let dir = lab.dir().to_owned();
    drop(lab);
    assert!(
        namespaces_with_prefix(&prefix).is_empty(),
        "namespaces left: {:?}",
        namespaces_with_prefix(&prefix)
    );
    assert!(!pid_alive(nginx_pid), "process {nginx_pid} left running");
    assert!(!dir.exists(), "work dir left behind on success");

    // a panicking test body: the lab is still torn down by unwinding
    let (tx, rx) = std::sync::mpsc::channel();
    let r = std::thread::spawn(move || {
        let mut lab = lab::Lab::new().unwrap();
        let p = lab
            .spawn(Host::Client, "sleeper", &["sleep", "300"])
            .unwrap();
        tx.send((lab.prefix().to_owned(), p.pid(), lab.dir().to_owned()))
            .unwrap();
        panic!("deliberate panic inside a lab");
    })
    .join();
    assert!(r.is_err(), "the thread should have panicked");
    let (prefix, pid, dir) = rx.recv().unwrap();
    assert!(
        namespaces_with_prefix(&prefix).is_empty(),
        "namespaces left after panic"
    );
    assert!(!pid_alive(pid), "process left after panic");
    // the work dir is kept for the post-mortem
    assert!(dir.exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn two_labs_side_by_side() {
    let Some(mut a) = lab_or_skip("two_labs_side_by_side") else {
        return;
    };
    let mut b = lab::Lab::new().unwrap();
    assert_ne!(a.prefix(), b.prefix());
    let na = a.nginx(Host::Online, NginxOptions::default()).unwrap();
    let nb = b.nginx(Host::Online, NginxOptions::default()).unwrap();
    let url = format!("http://{}/", addr::ONLINE);
    curl(&a, &url);
    curl(&b, &url);
    curl(&b, &url);
    assert_eq!(na.request_count(), 1);
    assert_eq!(nb.request_count(), 2);
}

/// The leak counter that the end-to-end tests rely on counts every packet that leaves the test
/// host from the service port toward a client range, and nothing else.
#[test]
fn leak_counter_counts_what_leaves_the_test_host() {
    let Some(lab) = lab_or_skip("leak_counter_counts_what_leaves_the_test_host") else {
        return;
    };
    let leaks = lab::leak::LeakCounter::install(&lab, Host::Test, &[80]).unwrap();
    assert_eq!(leaks.count(&lab).unwrap(), 0);
    let fake_client: std::net::SocketAddr = "198.19.0.9:40000".parse().unwrap();
    let test80 = std::net::SocketAddr::new(addr::TEST.into(), 80);
    let test81 = std::net::SocketAddr::new(addr::TEST.into(), 81);
    lab.in_ns(Host::Test, move || {
        let mut raw = lab::fake::RawSender::new().unwrap();
        // "client" and "server" as RawSender names them: it sends client -> server
        let leak = common::flow::FourTuple {
            client: test80.into(),
            server: fake_client.into(),
        };
        let other_port = common::flow::FourTuple {
            client: test81.into(),
            server: fake_client.into(),
        };
        for i in 0..3 {
            raw.send(leak, 100 + i, 0, common::wire::TcpFlags::ACK, b"x")
                .unwrap();
        }
        raw.send(other_port, 100, 0, common::wire::TcpFlags::ACK, b"x")
            .unwrap();
    })
    .unwrap();
    assert_eq!(
        leaks.count(&lab).unwrap(),
        3,
        "three packets from port 80 toward a client range left"
    );
}

#[test]
fn congestion_control_is_set_in_every_host_and_only_there() {
    let Some(lab) = lab_or_skip("congestion_control_is_set_in_every_host_and_only_there") else {
        return;
    };
    let machine = lab::default_congestion();
    lab.set_congestion("reno").unwrap();
    for h in Host::ALL {
        let cc = lab
            .exec_ok(h, &["cat", "/proc/sys/net/ipv4/tcp_congestion_control"])
            .unwrap();
        assert_eq!(cc.trim(), "reno", "{}", lab.ns(h));
    }
    assert_eq!(
        lab::default_congestion(),
        machine,
        "the machine's own setting is left alone"
    );
    let err = format!("{:#}", lab.set_congestion("no-such-cc").unwrap_err());
    assert!(
        err.contains("no-such-cc") && err.contains(&lab.ns(Host::Client)),
        "{err}"
    );
}
