//! `bench_copier --peer DIR`'s plumbing (issue 32), with a stub DIR: the C tool's binaries cannot
//! be built or fetched here, so `tcpcopy` and `intercept` are shell scripts that record the
//! namespace they run in and their argv, then sleep. Checks that the copier and the intercept
//! stop (and the intercept's NFQUEUE rules go with it), that each stub starts in its host with
//! the flags of the C tool's README, and that the peer is seen alive, then stopped.

use lab::bench::peer::Peer;
use lab::setup::{CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

const STUB: &str = "#!/bin/sh\n\
{ ip netns identify $$; for a in \"$@\"; do printf '%s\\n' \"$a\"; done; } > \"$0.argv.tmp\"\n\
mv \"$0.argv.tmp\" \"$0.argv\"\n\
exec sleep 60\n";

#[test]
fn peer_stubs_get_the_c_tools_flags_in_their_hosts() {
    let Some(mut lab) = lab_or_skip("peer_stubs_get_the_c_tools_flags_in_their_hosts") else {
        return;
    };
    let mut c = Copying::start(
        &mut lab,
        CopyOptions {
            ipv6: false,
            ..CopyOptions::default()
        },
    )
    .unwrap();
    let dir = lab.dir().join("peer");
    std::fs::create_dir_all(&dir).unwrap();
    // a directory without the binaries is refused
    assert!(Peer::check_dir(&dir).is_err());
    for name in ["tcpcopy", "intercept"] {
        let p = dir.join(name);
        std::fs::write(&p, STUB).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    c.stop_ours(&lab).unwrap();
    c.check_alive().unwrap();
    assert!(c.copier.is_none());
    assert!(c.intercept.exited().is_some());

    let peer = Peer::start(&mut lab, &dir, Duration::from_millis(300)).unwrap();
    let read = |name: &str| -> Vec<String> {
        let p = dir.join(format!("{name}.argv"));
        for _ in 0..100 {
            if let Ok(s) = std::fs::read_to_string(&p) {
                return s.lines().map(str::to_owned).collect();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{} was not written", p.display());
    };
    let test = addr::TEST.to_string();
    let tc = read("tcpcopy");
    assert_eq!(tc[0], lab.ns(Host::Online), "tcpcopy runs on online");
    assert_eq!(tc[1..], ["-x", &format!("80-{test}:80"), "-s", &test]);
    let ic = read("intercept");
    assert_eq!(ic[0], lab.ns(Host::Test), "intercept runs on test");
    assert_eq!(
        ic[1..],
        [
            "-i",
            lab::ifname::TEST_TO_ONLINE,
            "-F",
            "tcp and src port 80"
        ]
    );
    peer.check_alive().unwrap();
    assert_ne!(peer.tcpcopy.pid(), peer.intercept.pid());
    peer.stop();
    assert!(peer.check_alive().is_err());
}
