//! Cascades: a copier on the test host copies what reaches it (the copies from `online`) on to a
//! second test host, `test2`, with its own intercept there: `online -> test -> test2`.

use lab::setup::{
    diff_fingerprints, fingerprints, tail, wait_log, CopyOptions, Copying, CONTROL_PORT,
};
use lab::{addr, ifname, lab_or_skip, workspace_bin, Host, NginxOptions};
use std::time::Duration;

#[test]
fn copy_of_a_copy_reaches_test2() {
    let Some(mut lab) = lab_or_skip("copy_of_a_copy_reaches_test2") else {
        return;
    };
    let c = Copying::start(
        &mut lab,
        CopyOptions {
            ipv6: false,
            ..CopyOptions::default()
        },
    )
    .unwrap();
    let test2 = lab.nginx(Host::Test2, NginxOptions::default()).unwrap();
    let test2_link = lab
        .capture(Host::Test2, ifname::TEST2_TO_TEST, "tcp", "test2-link")
        .unwrap();
    let leaks2 = lab::leak::LeakCounter::install(&lab, Host::Test2, &[80]).unwrap();

    let secret = lab.dir().join("secret").to_string_lossy().into_owned();
    let intercept = workspace_bin("intercept")
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let copier = workspace_bin("copier")
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let listen2 = format!("{}:{CONTROL_PORT}", addr::TEST2);
    let allow2 = addr::TEST_TO_TEST2.to_string();
    let icpt2 = lab
        .spawn(
            Host::Test2,
            "intercept-test2",
            &[
                "env",
                "RUST_LOG=info",
                &intercept,
                "--port",
                "80",
                "--listen",
                &listen2,
                "--secret-file",
                &secret,
                "--allow",
                &allow2,
                "--install-rules",
                "--ipv4-only",
            ],
        )
        .unwrap();
    wait_log(&icpt2, "listening for copiers", Duration::from_secs(10)).unwrap();
    // the second copier captures, on test's link toward online, the copies the first one sends
    let map2 = format!("80={}:80", addr::TEST2);
    let cop2 = lab
        .spawn(
            Host::Test,
            "copier-test",
            &[
                "env",
                "RUST_LOG=info",
                &copier,
                "--map",
                &map2,
                "--intercept",
                &listen2,
                "--secret-file",
                &secret,
                "--interface",
                ifname::TEST_TO_ONLINE,
                "--seed",
                "11",
            ],
        )
        .unwrap();
    wait_log(&cop2, "connected to intercept", Duration::from_secs(10)).unwrap();

    let script = format!(
        "for i in $(seq 1 20); do curl -sS --http1.0 -o /dev/null 'http://{}/index.html?short='$i || exit 1; done; \
         curl -sS -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null \
         'http://{0}/index.html?ka=1' 'http://{0}/index.html?ka=2' 'http://{0}/index.html?ka=3' \
         'http://{0}/index.html?ka=4' 'http://{0}/index.html?ka=5'",
        addr::ONLINE
    );
    lab.sh(Host::Client, &script).unwrap();

    let online = c.online.requests().unwrap();
    assert_eq!(online.len(), 25);
    test2.wait_requests(online.len(), Duration::from_secs(30));
    test2.wait_settled(Duration::from_secs(1), Duration::from_secs(20));
    c.check_alive().unwrap();
    assert!(
        cop2.exited().is_none(),
        "the cascade copier died:\n{}",
        tail(&cop2.log(), 30)
    );
    let fo = fingerprints(&online);
    for (host, reqs) in [
        ("test", c.test().requests().unwrap()),
        ("test2", test2.requests().unwrap()),
    ] {
        let diff = diff_fingerprints(&fo, &fingerprints(&reqs));
        assert!(
            diff.is_empty(),
            "{host} did not get exactly the online requests:\n{diff}\n{}",
            tail(&cop2.log(), 30)
        );
    }
    // nothing left either test host toward a client
    let pcap2 = test2_link.stop();
    assert_eq!(
        leaks2.count(&lab).unwrap(),
        0,
        "test2 leaked responses (link capture {})",
        pcap2.display()
    );
    c.assert_no_leak(&mut lab);
}
