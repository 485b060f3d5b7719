//! Tests of the copier's command line: value parsers, cross-flag checks, and what `--help` says.

use std::net::IpAddr;

use crate::engine::EngineConfig;

use super::help;
use super::*;

fn map(s: &str) -> PortMap {
    parse_map(s).unwrap()
}

#[test]
fn maps() {
    assert_eq!(
        map("80=198.18.1.2:8080"),
        PortMap {
            online_ip: None,
            online_port: 80,
            target: "198.18.1.2:8080".parse().unwrap()
        }
    );
    assert_eq!(
        map("10.0.0.5:443=198.18.1.2:443").online_ip,
        Some("10.0.0.5".parse().unwrap())
    );
    let v6 = map("[2001:db8::1]:80=[2001:db8::2]:8080");
    assert_eq!(v6.online_ip, Some("2001:db8::1".parse().unwrap()));
    assert_eq!(v6.target, "[2001:db8::2]:8080".parse().unwrap());
    assert_eq!(map(" 80 = 198.18.1.2:80 ").online_port, 80);
}

#[test]
fn bad_maps_name_the_value() {
    for (bad, needle) in [
        ("80", "no '='"),
        ("x=198.18.1.2:80", "neither PORT nor IP:PORT"),
        ("0=198.18.1.2:80", "port 0"),
        ("70000=198.18.1.2:80", "neither PORT"),
        ("80=198.18.1.2", "not IP:PORT"),
        ("80=testhost:80", "host names are not resolved"),
        ("80=198.18.1.2:0", "unicast address and a port"),
        ("80=0.0.0.0:80", "unicast"),
        ("0.0.0.0:80=198.18.1.2:80", "cannot be a service address"),
    ] {
        let e = parse_map(bad).unwrap_err().to_string();
        assert!(
            e.contains(bad.trim()) && e.contains(needle),
            "{bad:?} -> {e}"
        );
    }
}

#[test]
fn map_cross_checks() {
    let ok = [map("80=198.18.1.2:80"), map("443=198.18.1.2:443")];
    check_maps(&ok, None).unwrap();
    let dup = [map("80=198.18.1.2:80"), map("80=198.18.1.3:80")];
    assert!(check_maps(&dup, None)
        .unwrap_err()
        .to_string()
        .contains("same online port 80"));
    let dup6 = [map("80=[2001:db8::2]:80"), map("80=[2001:db8::3]:80")];
    let e = check_maps(&dup6, None).unwrap_err().to_string();
    assert!(
        e.contains("same online port 80") && e.contains("IPv6"),
        "{e}"
    );
    let dup_addr = [
        map("10.0.0.5:80=198.18.1.2:80"),
        map("10.0.0.5:80=198.18.1.3:80"),
    ];
    assert!(check_maps(&dup_addr, None)
        .unwrap_err()
        .to_string()
        .contains("same online port 80"));
    let overlap = [map("80=198.18.1.2:80"), map("10.0.0.5:80=198.18.1.3:80")];
    assert!(check_maps(&overlap, None)
        .unwrap_err()
        .to_string()
        .contains("overlaps"));
    let overlap6 = [
        map("80=[2001:db8::2]:80"),
        map("[2001:db8::1]:80=[2001:db8::3]:80"),
    ];
    assert!(check_maps(&overlap6, None)
        .unwrap_err()
        .to_string()
        .contains("overlaps"));
    let two_addrs = [
        map("10.0.0.5:80=198.18.1.2:80"),
        map("10.0.0.6:80=198.18.1.3:80"),
    ];
    check_maps(&two_addrs, None).unwrap();
    let fam = [map("[2001:db8::1]:80=198.18.1.2:80")];
    assert!(check_maps(&fam, None)
        .unwrap_err()
        .to_string()
        .contains("different IP families"));
    let pool: ClientIpPool = "198.19.0.0/16".parse().unwrap();
    check_maps(&fam, Some(&pool)).unwrap();
    let pool6: ClientIpPool = "2001:db8:ff::/48".parse().unwrap();
    assert!(check_maps(&ok, Some(&pool6))
        .unwrap_err()
        .to_string()
        .contains("--client-ip"));
}

#[test]
fn one_map_per_family_on_a_port() {
    // IPv4 clients to the IPv4 target, IPv6 clients to the IPv6 one.
    let both = [map("80=198.18.2.2:80"), map("80=[fd00:198:18:2::2]:80")];
    check_maps(&both, None).unwrap();
    // in either order
    check_maps(&[both[1], both[0]], None).unwrap();
    // a --client-ip range has one family, which every target must share
    let pool: ClientIpPool = "198.19.0.0/16".parse().unwrap();
    assert!(check_maps(&both, Some(&pool))
        .unwrap_err()
        .to_string()
        .contains("different IP families"));
    // the engine's own checks accept them; the flags parse into both maps
    let cfg = EngineConfig {
        maps: both.to_vec(),
        ..EngineConfig::default()
    };
    cfg.validate().unwrap();
    let v = args(&["--no-secret", "--map", "80=[fd00:198:18:2::2]:80"])
        .unwrap()
        .validate(1)
        .unwrap();
    assert_eq!(v.engine.maps.len(), 2);
    let three = args(&[
        "--no-secret",
        "--map",
        "80=[fd00::2]:80",
        "--map",
        "80=[fd00::3]:80",
    ])
    .unwrap()
    .validate(1)
    .unwrap_err()
    .to_string();
    assert!(three.contains("one map per family"), "{three}");
}

#[test]
fn the_idle_timeout_is_off_by_default_and_at_least_a_second() {
    let v = args(&["--no-secret"]).unwrap().validate(1).unwrap();
    assert_eq!(v.engine.idle_timeout, None);
    let v = args(&["--no-secret", "--idle-timeout", "1h"])
        .unwrap()
        .validate(1)
        .unwrap();
    assert_eq!(v.engine.idle_timeout, Some(Duration::from_secs(3600)));
    let e = args(&["--no-secret", "--idle-timeout", "100ms"])
        .unwrap()
        .validate(1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--idle-timeout"), "{e}");
}

#[test]
fn the_unproven_timeout_is_10s_by_default_and_at_least_a_second() {
    let v = args(&["--no-secret"]).unwrap().validate(1).unwrap();
    assert_eq!(v.engine.unproven_timeout, Duration::from_secs(10));
    let v = args(&["--no-secret", "--unproven-timeout", "30s"])
        .unwrap()
        .validate(1)
        .unwrap();
    assert_eq!(v.engine.unproven_timeout, Duration::from_secs(30));
    let e = args(&["--no-secret", "--unproven-timeout", "100ms"])
        .unwrap()
        .validate(1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--unproven-timeout"), "{e}");
}

#[test]
fn session_caps_parse_and_default() {
    let v = args(&["--no-secret"]).unwrap().validate(1).unwrap();
    assert_eq!(v.engine.max_sessions, crate::engine::DEFAULT_MAX_SESSIONS);
    assert_eq!(
        (v.engine.max_pending_syns, v.engine.syn_timeout),
        (65536, Duration::from_secs(5))
    );
    let v = args(&[
        "--no-secret",
        "--max-sessions",
        "5000",
        "--max-pending-syns",
        "300",
        "--syn-timeout",
        "2s",
    ])
    .unwrap()
    .validate(1)
    .unwrap();
    assert_eq!(
        (v.engine.max_sessions, v.engine.max_pending_syns),
        (5000, 300)
    );
    assert_eq!(v.engine.syn_timeout, Duration::from_secs(2));
    for bad in [
        ["--max-sessions", "0"],
        ["--max-sessions", "many"],
        ["--max-pending-syns", "0"],
    ] {
        let e = args(&bad).unwrap_err().to_string();
        assert!(e.contains(bad[0]), "{bad:?}: {e}");
    }
}

#[test]
fn a_map_to_this_host_is_refused() {
    let local: Vec<IpAddr> = vec!["198.18.1.2".parse().unwrap(), "fd00::5".parse().unwrap()];
    for target in [
        "198.18.1.2:80",
        "127.0.0.1:80",
        "127.3.4.5:8080",
        "[::1]:80",
        "[fd00::5]:80",
        "[::ffff:198.18.1.2]:80",
    ] {
        let m = map(&format!("80={target}"));
        let e = check_targets_not_local(&[map("81=198.18.2.2:81"), m], &local)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("--map {}", m)) && e.contains("this host"),
            "{target}: {e}"
        );
    }
    check_targets_not_local(&[map("80=198.18.2.2:80"), map("81=[fd00::6]:80")], &local).unwrap();
    // This machine's own addresses, as the copier reads them: loopback among them.
    let mine = local_addresses().unwrap();
    assert!(mine.iter().any(|a| a.is_loopback()), "{mine:?}");
    let e = args(&["--no-secret", "--map", "81=127.0.0.1:80"])
        .unwrap()
        .validate(1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--map 81=127.0.0.1:80"), "{e}");
    if let Some(a) = mine.iter().find(|a| !a.is_loopback()) {
        let target = SocketAddr::new(*a, 80);
        let flag = format!("81={target}");
        let e = args(&["--no-secret", "--map", &flag])
            .unwrap()
            .validate(1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("this host"), "{e}");
    }
}

/// The size and duration flags take `common::units`' grammar (its own tests cover every unit and
/// error), and a bad value's error names the flag and the value.
#[test]
fn sizes_and_durations_use_the_shared_grammar() {
    let a = args(&[
        "--no-secret",
        "--max-memory",
        "1.5G",
        "--session-timeout",
        "1d",
        "--syn-timeout",
        "500ms",
    ])
    .unwrap();
    assert_eq!(a.max_memory, 3 << 29);
    assert_eq!(a.session_timeout, Duration::from_secs(86_400));
    assert_eq!(a.syn_timeout, Duration::from_millis(500));
    let a = args(&[
        "--no-secret",
        "--max-memory",
        "100 MB",
        "--session-timeout",
        "120",
    ])
    .unwrap();
    assert_eq!(
        (a.max_memory, a.session_timeout),
        (100 << 20, Duration::from_secs(120))
    );
    for (flag, bad) in [
        ("--max-memory", "12Q"),
        ("--max-memory", "-5M"),
        ("--ring-block-size", "99999999999T"),
        ("--session-timeout", "5y"),
        ("--syn-timeout", "abc"),
        ("--session-timeout", "1e400"),
    ] {
        let e = args(&["--no-secret", &format!("{flag}={bad}")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(flag) && e.contains(&format!("{bad:?}")),
            "{flag} {bad:?} -> {e}"
        );
    }
}

fn args(extra: &[&str]) -> Result<Args, clap::Error> {
    let mut v = vec![
        "copier",
        "--map",
        "80=198.18.1.2:80",
        "--intercept",
        "198.18.1.2",
    ];
    v.extend_from_slice(extra);
    Args::try_parse_from(v)
}

#[test]
fn pacing_modes() {
    let mode = |extra: &[&str]| {
        let mut v = vec!["--no-secret"];
        v.extend_from_slice(extra);
        let e = args(&v).unwrap().validate(1).unwrap().engine;
        (e.pace_requests, e.pace_window)
    };
    assert_eq!(
        mode(&[]),
        (true, crate::engine::DEFAULT_PACE_WINDOW),
        "adaptive by default"
    );
    assert_eq!(mode(&["--pace-window", "8"]), (true, 8));
    assert_eq!(mode(&["--pacing", "strict"]), (true, 1));
    assert!(!mode(&["--pacing", "off"]).0);
    assert!(!mode(&["--no-pacing"]).0);
    assert!(args(&["--no-secret", "--pace-window", "0"]).is_err());
    assert!(args(&["--no-secret", "--pace-window", "5000"]).is_err());
    assert!(args(&["--no-secret", "--pacing", "fast"]).is_err());
    assert!(args(&["--no-secret", "--pacing", "strict", "--no-pacing"]).is_err());
}

#[test]
fn command_line() {
    let a = args(&[
        "--no-secret",
        "--max-memory",
        "2G",
        "--session-timeout",
        "5m",
        "--client-ip",
        "198.19.0.0/16",
    ])
    .unwrap();
    assert_eq!(a.max_memory, 2 << 30);
    assert_eq!(a.session_timeout, Duration::from_secs(300));
    assert_eq!(a.mtu, 1500);
    let v = a.validate(7).unwrap();
    assert!(v.secret.is_none());
    assert_eq!(v.seed, 7);
    assert!(v.engine.pace_requests);
    assert_eq!(v.engine.max_memory, 2 << 30);
    assert_eq!(v.intercepts[0].port, 36524);

    // A secret is required unless --no-secret; both at once is refused.
    assert!(args(&[]).is_err());
    assert!(args(&["--no-secret", "--secret-file", "/x"]).is_err());
    // --mtu below 576 is refused by clap.
    assert!(args(&["--no-secret", "--mtu", "500"]).is_err());
    let e = args(&["--no-secret", "--max-memory", "lots"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("lots"), "{e}");

    let missing = args(&["--secret-file", "/nonexistent/secret"])
        .unwrap()
        .validate(1)
        .unwrap_err()
        .to_string();
    assert!(missing.contains("/nonexistent/secret"), "{missing}");
    let twice = args(&["--no-secret", "--intercept", "198.18.1.2:36524"])
        .unwrap()
        .validate(1)
        .unwrap_err()
        .to_string();
    assert!(twice.contains("twice"), "{twice}");
    let ring = args(&["--no-secret", "--ring-block-size", "1000"])
        .unwrap()
        .validate(1)
        .unwrap_err()
        .to_string();
    assert!(ring.contains("--ring-block-size"), "{ring}");
}

#[test]
fn secret_file_is_read() {
    let dir = std::env::temp_dir().join(format!("copier-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("secret");
    // The secret must be owner-only and at least 16 bytes (common::proto::auth).
    std::fs::write(&f, "hunter2-hunter2-hunter2\n").unwrap();
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let v = args(&["--secret-file", f.to_str().unwrap()])
        .unwrap()
        .validate(1)
        .unwrap();
    assert_eq!(v.secret.as_deref(), Some(&b"hunter2-hunter2-hunter2"[..]));
    std::fs::write(&f, "\n").unwrap();
    let e = args(&["--secret-file", f.to_str().unwrap()])
        .unwrap()
        .validate(1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("empty"), "{e}");
    // the value of deploy/k8s/secret.yaml
    std::fs::write(&f, "REPLACE-ME-with-32-random-bytes-base64\n").unwrap();
    let e = args(&["--secret-file", f.to_str().unwrap()])
        .unwrap()
        .validate(1)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--secret-file") && e.contains("placeholder"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn offline_flags() {
    let v = args(&[
        "--no-secret",
        "--offline",
        "/tmp/x.pcap",
        "--speed",
        "10",
        "--loop",
        "3",
        "--max-gap",
        "250ms",
    ])
    .unwrap()
    .validate(1)
    .unwrap();
    let o = v.offline.unwrap();
    assert_eq!(o.path, PathBuf::from("/tmp/x.pcap"));
    assert_eq!(
        (o.speed, o.loops, o.max_gap),
        (Speed::Factor(10.0), 3, Duration::from_millis(250))
    );
    let d = args(&["--no-secret", "--offline", "x.pcapng"])
        .unwrap()
        .validate(1)
        .unwrap();
    let o = d.offline.unwrap();
    assert_eq!(
        (o.speed, o.loops, o.max_gap),
        (Speed::Factor(1.0), 1, Duration::from_secs(1))
    );
    for max in ["0", "max"] {
        let a = args(&["--no-secret", "--offline", "x", "--speed", max]).unwrap();
        assert_eq!(a.speed, Speed::Max);
    }
    assert!(args(&["--no-secret"])
        .unwrap()
        .validate(1)
        .unwrap()
        .offline
        .is_none());
    // The replay flags need --offline; --offline and --interface exclude each other.
    for bad in [
        &["--no-secret", "--speed", "10"][..],
        &["--no-secret", "--loop", "2"],
        &["--no-secret", "--max-gap", "2s"],
        &["--no-secret", "--offline", "x", "--interface", "eth0"],
        &["--no-secret", "--offline", "x", "--loop", "0"],
        &["--no-secret", "--offline", "x", "--speed", "fast"],
    ] {
        assert!(args(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn workers_flag() {
    let v = args(&["--no-secret"]).unwrap().validate(1).unwrap();
    assert_eq!(v.workers, 1, "one worker by default");
    let v = args(&["--no-secret", "--workers", "4"])
        .unwrap()
        .validate(1)
        .unwrap();
    assert_eq!(v.workers, 4);
    for bad in ["0", "65", "two"] {
        assert!(args(&["--no-secret", "--workers", bad]).is_err(), "{bad}");
    }
    let a = args(&["--no-secret", "--offline", "x.pcap", "--workers", "3"]).unwrap();
    assert_eq!(a.workers, 3);
    assert_eq!(
        a.validate(1).unwrap().workers,
        1,
        "a replay runs on one worker"
    );
    use clap::CommandFactory;
    let help = Args::command().render_long_help().to_string();
    assert!(
        help.contains("--workers <N>") && help.contains("production"),
        "{help}"
    );
}

#[test]
fn amplification_flags() {
    let v = args(&["--no-secret"]).unwrap().validate(1).unwrap();
    assert_eq!(
        (v.engine.copies, v.engine.sample_percent, v.engine.client_ip),
        (1, 100.0, None)
    );
    let v = args(&[
        "--no-secret",
        "--copies",
        "100",
        "--sample",
        "12.5",
        "--client-ip",
        "198.19.0.0/24,198.19.1.0/24",
        "--client-ip",
        "198.19.2.0/24",
    ])
    .unwrap()
    .validate(1)
    .unwrap();
    assert_eq!((v.engine.copies, v.engine.sample_percent), (100, 12.5));
    let pool = v.engine.client_ip.unwrap();
    assert_eq!(
        pool.to_string(),
        "198.19.0.0/24,198.19.1.0/24,198.19.2.0/24"
    );
    for bad in [
        &["--copies", "0"][..],
        &["--copies", "1001"],
        &["--sample", "0"],
        &["--sample", "100.5"],
        &["--sample", "half"],
        &["--client-ip", "198.19.0.0/24,x"],
    ] {
        let mut a = vec!["--no-secret"];
        a.extend_from_slice(bad);
        assert!(args(&a).is_err(), "{bad:?}");
    }
    // Overlapping ranges over two flags, and a pool without the target's family.
    let e = args(&[
        "--no-secret",
        "--client-ip",
        "198.19.0.0/16",
        "--client-ip",
        "198.19.3.0/24",
    ])
    .unwrap()
    .validate(1)
    .unwrap_err()
    .to_string();
    assert!(e.contains("--client-ip") && e.contains("overlap"), "{e}");
    let e = args(&["--no-secret", "--client-ip", "fd00:198:19::/48"])
        .unwrap()
        .validate(1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("different IP families"), "{e}");
    // One pool for both families when both are mapped.
    let v = args(&[
        "--no-secret",
        "--map",
        "81=[fd00:198:18:2::2]:80",
        "--client-ip",
        "198.19.0.0/16,fd00:198:19::/48",
    ])
    .unwrap()
    .validate(1)
    .unwrap();
    assert!(v
        .engine
        .client_ip
        .is_some_and(|p| p.serves(true) && p.serves(false)));
    use clap::CommandFactory;
    let help = Args::command().render_long_help().to_string();
    for want in [
        "--copies <N>",
        "--sample <P>",
        "Amplification",
        "--copies 10 --sample 25",
    ] {
        assert!(help.contains(want), "{want} missing in:\n{help}");
    }
}

#[test]
fn profile_flag() {
    let dir = std::env::temp_dir().join(format!("copier-cli-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(&good, "[multiplication]\nfactor = 2.5\n").unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[multiplication]\nfactor = -1\n").unwrap();
    let g = good.to_str().unwrap();
    let v = args(&["--no-secret", "--profile", g])
        .unwrap()
        .validate(1)
        .unwrap();
    assert_eq!(
        v.engine.profile.as_ref().map(|p| p.multiplication.factor),
        Some(2.5)
    );
    assert_eq!(v.engine.copies, 1);
    // The profile replaces --copies, --sample and --client-ip.
    for other in [
        &["--copies", "3"][..],
        &["--sample", "50"],
        &["--client-ip", "198.19.0.0/24"],
    ] {
        let mut a = vec!["--no-secret", "--profile", g];
        a.extend_from_slice(other);
        let e = args(&a).unwrap_err().to_string();
        assert!(e.contains("--profile") && e.contains(other[0]), "{e}");
    }
    // A key out of range is named; a missing file too.
    let e = args(&["--no-secret", "--profile", bad.to_str().unwrap()])
        .unwrap()
        .validate(1)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--profile") && e.contains("multiplication.factor"),
        "{e}"
    );
    let missing = dir.join("none.toml");
    let e = args(&["--no-secret", "--profile", missing.to_str().unwrap()])
        .unwrap()
        .validate(1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("none.toml"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
    use clap::CommandFactory;
    let help = Args::command().render_long_help().to_string();
    assert!(
        help.contains("--profile <FILE>")
            && help.contains("Shaping:")
            && help.contains("--profile /etc/tcopy/profile.toml"),
        "{help}"
    );
}

#[test]
fn help_explains_and_shows_an_example() {
    use clap::CommandFactory;
    let help = Args::command().render_long_help().to_string();
    assert!(help.contains("Copies live TCP traffic"));
    assert!(help.contains("copier --map 80=198.18.1.2:8080 --intercept 198.18.1.2"));
    assert!(help.contains("--no-pacing"));
    for flag in [
        "--offline <FILE>",
        "--speed <X>",
        "--loop <N>",
        "--max-gap <DURATION>",
        "copier --offline traffic.pcap",
    ] {
        assert!(help.contains(flag), "{flag}");
    }
}

#[test]
fn weighted_maps_and_intercept_routing() {
    let v = Args::try_parse_from([
        "copier",
        "--no-secret",
        "--map",
        "80=198.18.1.2:80@3,198.18.3.2:80@1",
        "--intercept",
        "198.18.1.2",
        "--intercept",
        "198.18.3.2",
        "--target-down-after",
        "2s",
    ])
    .unwrap()
    .validate(1)
    .unwrap();
    assert_eq!(v.engine.maps.len(), 1);
    assert_eq!(v.engine.maps[0].target, "198.18.1.2:80".parse().unwrap());
    assert_eq!(
        v.engine.spread[0]
            .targets
            .iter()
            .map(|t| t.weight)
            .collect::<Vec<_>>(),
        vec![3, 1]
    );
    assert_eq!(v.engine.health.down_after, Duration::from_secs(2));
    let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
    assert_eq!(
        v.intercept_serves,
        vec![Some(vec![ip("198.18.1.2")]), Some(vec![ip("198.18.3.2")])]
    );
    assert_eq!(
        v.engine.intercepts_for,
        vec![(ip("198.18.1.2"), 1), (ip("198.18.3.2"), 1)]
    );
    // One target keeps its old form and meaning.
    let one = parse_map_targets("80=198.18.1.2:8080").unwrap();
    assert_eq!((one.map, one.targets.len()), (map("80=198.18.1.2:8080"), 1));
    for (bad, says) in [
        ("80=198.18.1.2:80@3,[fd00::3]:80", "different IP families"),
        ("80=198.18.1.2:80@0", "not from 1"),
        ("80=198.18.1.2:80,198.18.1.2:80", "given twice"),
    ] {
        let e = parse_map_targets(bad).unwrap_err().to_string();
        assert!(e.contains(says) && e.contains(bad), "{bad}: {e}");
    }
    // Every server of a spread map is checked against this host's addresses.
    let e = args(&["--no-secret", "--map", "81=198.18.1.2:80,127.0.0.1:80"])
        .unwrap()
        .validate(1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("127.0.0.1"), "{e}");
}

#[test]
fn rules_and_record_flags() {
    let dir = std::env::temp_dir().join(format!("copier-cli-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        "[[filter]]\nname = \"pay\"\npath = \"/pay/**\"\n[dye]\n",
    )
    .unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[[filter]]\nname = \"pay\"\npath_regex = \"(\"\n").unwrap();
    let v = args(&["--no-secret", "--rules", good.to_str().unwrap()])
        .unwrap()
        .validate(1)
        .unwrap();
    assert_eq!(
        v.engine.rules.as_ref().map(|r| r.counter_names()),
        Some(vec!["pay".to_string(), "allow_only".to_string()])
    );
    assert!(v.record.is_none());
    let e = args(&["--no-secret", "--rules", bad.to_str().unwrap()])
        .unwrap()
        .validate(1)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("--rules")
            && e.contains("bad.toml")
            && e.contains("rule \"pay\": path_regex"),
        "{e}"
    );
    let e = args(&["--no-secret", "--rules", "/nonexistent/rules.toml"])
        .unwrap()
        .validate(1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("/nonexistent/rules.toml"), "{e}");
    // The archive: size split over the files; too small refused; sizes need --record.
    let rec = dir.join("archive");
    let r = rec.to_str().unwrap();
    let v = args(&[
        "--no-secret",
        "--record",
        r,
        "--record-size",
        "64M",
        "--record-files",
        "4",
    ])
    .unwrap()
    .validate(1)
    .unwrap();
    let c = v.record.unwrap();
    assert_eq!((c.max_file, c.max_files, rec.is_dir()), (16 << 20, 4, true));
    let e = args(&[
        "--no-secret",
        "--record",
        r,
        "--record-size",
        "100K",
        "--record-files",
        "4",
    ])
    .unwrap()
    .validate(1)
    .unwrap_err()
    .to_string();
    assert!(e.contains("--record-size"), "{e}");
    assert!(args(&["--no-secret", "--record-size", "1G"]).is_err());
    // The time slice of a replay.
    let v = args(&[
        "--no-secret",
        "--offline",
        "x.pcap",
        "--from",
        "1764480000.5",
        "--until",
        "1764480001",
    ])
    .unwrap()
    .validate(1)
    .unwrap();
    let o = v.offline.unwrap();
    assert_eq!(
        (o.from, o.until),
        (
            Some(Duration::from_millis(1_764_480_000_500)),
            Some(Duration::from_secs(1_764_480_001))
        )
    );
    let e = args(&["--no-secret", "--offline", "x.pcap", "--from", "yesterday"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("--from") && e.contains("yesterday"), "{e}");
    assert!(
        args(&["--no-secret", "--from", "1"]).is_err(),
        "--from needs --offline"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn compare_flags() {
    let v = args(&["--no-secret"]).unwrap().validate(1).unwrap();
    assert!(v.shadow.is_none(), "off by default");
    let v = args(&[
        "--no-secret",
        "--compare",
        "--compare-sample",
        "10",
        "--compare-ignore",
        "header:X-Request-Id, $.ts",
        "--compare-ignore",
        "$.meta.*",
        "--baseline-map",
        "80=198.18.1.3:80",
        "--compare-log",
        "/tmp/x.jsonl",
        "--compare-log-size",
        "1M",
        "--compare-bytes",
        "64K",
        "--compare-timeout",
        "5s",
    ])
    .unwrap()
    .validate(1)
    .unwrap();
    let s = v.shadow.unwrap();
    assert_eq!(s.flows.sample, 0.1);
    assert!(s.flows.baseline);
    assert_eq!(
        s.compare.ignore,
        ["header:X-Request-Id", "$.ts", "$.meta.*"]
    );
    assert_eq!(s.maps[0].baseline, Some("198.18.1.3:80".parse().unwrap()));
    assert_eq!(s.maps[0].candidate, "198.18.1.2:80".parse().unwrap());
    assert_eq!(
        (s.flows.max_message, s.flows.pair_timeout),
        (64 << 10, Duration::from_secs(5))
    );
    assert_eq!(s.log.as_ref().unwrap().max_bytes, 1 << 20);
    assert_eq!(
        v.engine.baselines.len(),
        1,
        "the engine copies to the baseline too"
    );
    assert!(!s.offline, "live: the comparison opens its own capture");
    assert_eq!(
        s.compare.redact,
        compare::redact::Redact::default(),
        "credential headers redacted by default"
    );
    assert_eq!(
        (s.flows.max_bytes, s.flows.max_pending_bytes),
        (256 << 20, 256 << 20),
        "--compare-memory bounds the streams and the pairing table together"
    );
    let redact = |v: &str| {
        args(&["--no-secret", "--compare", "--compare-redact", v])
            .unwrap()
            .validate(1)
            .unwrap()
            .shadow
            .unwrap()
            .compare
            .redact
    };
    assert_eq!(redact("Cookie,X-Api-Key").names(), ["cookie", "x-api-key"]);
    assert_eq!(redact("none"), compare::redact::Redact::none());
    // offline: the file's both directions, no capture of the comparison's own
    let v = args(&[
        "--no-secret",
        "--offline",
        "x.pcap",
        "--compare",
        "--loop",
        "2",
    ])
    .unwrap()
    .validate(1)
    .unwrap();
    assert!(v.shadow.unwrap().offline);
    // --copies: copy 0 is compared
    let v = args(&["--no-secret", "--compare", "--copies", "3"])
        .unwrap()
        .validate(1)
        .unwrap();
    assert!(v.shadow.is_some());
    // refused, each with its reason
    let err = |extra: &[&str]| {
        let mut a = vec!["--no-secret"];
        a.extend_from_slice(extra);
        match args(&a) {
            Err(e) => e.to_string(),
            Ok(a) => a.validate(1).unwrap_err().to_string(),
        }
    };
    assert!(err(&["--compare", "--client-ip", "198.18.9.0/24"]).contains("--client-ip"));
    assert!(err(&["--compare-sample", "10"]).contains("--compare"));
    assert!(err(&["--baseline-map", "80=198.18.1.3:80"]).contains("--compare"));
    assert!(err(&["--compare", "--baseline-map", "81=198.18.1.3:80"]).contains("no --map"));
    assert!(err(&["--compare", "--baseline-map", "80=198.18.1.2:80"]).contains("must differ"));
    assert!(err(&["--compare", "--compare-bytes", "100"]).contains("--compare-bytes"));
    use clap::CommandFactory;
    let help = Args::command().render_long_help().to_string();
    assert!(
        help.contains("--compare-sample <P>") && help.contains("--baseline-map"),
        "{help}"
    );
}

#[test]
fn fleet_shares_parse_and_are_checked_against_the_workers() {
    assert_eq!(
        parse_fleet("2/5"),
        Ok(FleetArg {
            index: Some(2),
            size: 5
        })
    );
    assert_eq!(
        parse_fleet("host/3"),
        Ok(FleetArg {
            index: None,
            size: 3
        })
    );
    for (bad, needle) in [
        ("5/5", "does not exist in a fleet of 5"),
        ("1/0", "at least one"),
        ("3", "expected I/N"),
        ("x/2", "neither a number"),
    ] {
        let e = parse_fleet(bad).unwrap_err().to_string();
        assert!(e.contains(needle), "{bad}: {e}");
    }
    // host/N: the same host always gets the same copier, and copier indices stay in the fleet.
    let a = fleet_share(
        FleetArg {
            index: None,
            size: 7,
        },
        "front-1",
    );
    assert_eq!(
        a,
        fleet_share(
            FleetArg {
                index: None,
                size: 7
            },
            "front-1"
        )
    );
    assert!(a.index < 7);
    let fleet = |extra: &[&str]| {
        let mut v = vec!["--no-secret"];
        v.extend_from_slice(extra);
        args(&v).unwrap().validate(1).map(|v| v.engine.port_share)
    };
    let s = fleet(&["--fleet", "1/2", "--workers", "2"]).unwrap();
    assert_eq!((s.count, s.fleet.index, s.fleet.size), (2, 1, 2));
    assert_eq!(
        fleet(&[]).unwrap().fleet,
        crate::engine::FleetShare::default()
    );
    let e = fleet(&["--fleet", "0/2000", "--workers", "64"])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--fleet 0/2000") && e.contains("--workers 64"),
        "{e}"
    );
    assert!(args(&["--no-secret", "--fleet", "2/2"]).is_err());
}

/// Parses `argv` with its `--config` expanded, as `main` does.
fn parse_with_config(argv: &[&str]) -> Result<Args, String> {
    use clap::{CommandFactory, FromArgMatches};
    use common::config_file::{matches_from, Failure};
    match matches_from(Args::command(), argv.iter().map(Into::into).collect()) {
        Ok(m) => Args::from_arg_matches(&m).map_err(|e| e.to_string()),
        Err(Failure::Config(e)) => Err(e.to_string()),
        Err(Failure::Clap(e, origin)) => Err(format!("{} {}", origin.unwrap_or_default(), e)),
    }
}

fn config_file(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("copier-cli-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn a_config_file_gives_the_same_flags_as_the_command_line() {
    let f = config_file(
        "round.toml",
        "# the copier's options\nmap = [\"80=198.18.2.2:80\", \"443=198.18.2.2:443\"]\nintercept = \"198.18.2.2\"\nno_secret = true\n\
         session-timeout = \"30s\"\ncopies = 2\nverbose = 1\nclient-ip = \"198.19.0.0/16\"\n",
    );
    let from_file = parse_with_config(&["copier", "--config", &f]).unwrap();
    let from_flags = parse_with_config(&[
        "copier",
        "--map",
        "80=198.18.2.2:80",
        "--map",
        "443=198.18.2.2:443",
        "--intercept",
        "198.18.2.2",
        "--no-secret",
        "--session-timeout",
        "30s",
        "--copies",
        "2",
        "-v",
        "--client-ip",
        "198.19.0.0/16",
    ])
    .unwrap();
    assert_eq!(
        format!("{:?}", from_file.copier),
        format!("{:?}", from_flags.copier)
    );
    assert_eq!(
        (
            from_file.maps.len(),
            from_file.session_timeout,
            from_file.copies,
            from_file.verbose
        ),
        (2, Duration::from_secs(30), 2, 1)
    );
    // copier doctor reads the same file.
    let d = parse_with_config(&["copier", "doctor", "--config", &f]).unwrap();
    let Some(crate::cli::Command::Doctor(d)) = d.command else {
        panic!("no doctor")
    };
    assert_eq!((d.maps.len(), d.copies, d.client_ip.len()), (2, 2, 1));
}

#[test]
fn the_command_line_overrides_the_config_file() {
    let f = config_file("over.toml", "map = \"80=198.18.2.2:80\"\nintercept = \"198.18.2.2\"\nno-secret = true\nsession-timeout = \"30s\"\n");
    let a = parse_with_config(&[
        "copier",
        "--session-timeout",
        "5s",
        "--config",
        &f,
        "--map",
        "8080=198.18.2.3:8080",
    ])
    .unwrap();
    assert_eq!(a.session_timeout, Duration::from_secs(5));
    assert_eq!(
        a.maps.len(),
        1,
        "a list flag on the command line replaces the file's"
    );
    assert_eq!(a.maps[0].map.online_port, 8080);
    let a = parse_with_config(&["copier", "--config", &f, "-v", "-v"]).unwrap();
    assert_eq!((a.verbose, a.session_timeout), (2, Duration::from_secs(30)));
}

#[test]
fn an_unknown_or_bad_key_names_itself_and_its_line() {
    let head = "map = \"80=198.18.2.2:80\"\nintercept = \"198.18.2.2\"\nno-secret = true\n";
    let f = config_file(
        "unknown.toml",
        &format!("{head}\nsession-timeot = \"30s\"\n"),
    );
    let e = parse_with_config(&["copier", "--config", &f]).unwrap_err();
    assert!(
        e.contains("line 5") && e.contains("unknown key `session-timeot`"),
        "{e}"
    );
    // a value clap refuses: the flag's own message, with the file's line
    let f = config_file("range.toml", &format!("{head}mtu = 100\n"));
    let e = parse_with_config(&["copier", "--config", &f]).unwrap_err();
    assert!(e.contains("line 4: key `mtu`") && e.contains("100"), "{e}");
    let f = config_file(
        "duration.toml",
        &format!("session-timeout = \"soon\"\n{head}"),
    );
    let e = parse_with_config(&["copier", "--config", &f]).unwrap_err();
    assert!(e.contains("line 1: key `session-timeout`"), "{e}");
    // a value of the wrong kind
    let f = config_file(
        "kind.toml",
        "map = \"80=198.18.2.2:80\"\nintercept = \"198.18.2.2\"\nno-secret = \"yes\"\n",
    );
    let e = parse_with_config(&["copier", "--config", &f]).unwrap_err();
    assert!(
        e.contains("line 3: key `no-secret`") && e.contains("true or false"),
        "{e}"
    );
    // not TOML, a missing file
    let f = config_file("syntax.toml", "map = [\n");
    let e = parse_with_config(&["copier", "--config", &f]).unwrap_err();
    assert!(e.contains("syntax.toml") && e.contains("line"), "{e}");
    let e = parse_with_config(&["copier", "--config", "/nonexistent/copier.toml"]).unwrap_err();
    assert!(e.contains("/nonexistent/copier.toml"), "{e}");
}

#[test]
fn help_groups_every_flag_under_a_heading_in_short_and_long_help() {
    use clap::CommandFactory;
    let headings: Vec<&str> = help::HEADINGS.iter().map(|(h, _)| *h).collect();
    assert_eq!(
        headings,
        [
            "Capture",
            "Targets",
            "Copies and shaping",
            "Pacing",
            "Rules and archive",
            "Comparison",
            "Limits",
            "Metrics and logs"
        ]
    );
    let mut cmd = Args::command();
    cmd.build();
    // Every flag of the copier but --config, -h and -V has its heading.
    let without: Vec<String> = cmd
        .get_arguments()
        .filter(|a| {
            a.get_long()
                .is_some_and(|l| !["config", "help", "version"].contains(&l))
        })
        .filter(|a| a.get_help_heading().is_none())
        .map(|a| a.get_id().to_string())
        .collect();
    assert!(
        without.is_empty(),
        "flags without a heading (add them to cli::help::HEADINGS): {without:?}"
    );
    let short = cmd.render_help().to_string();
    let long = cmd.render_long_help().to_string();
    let doctor = cmd
        .find_subcommand_mut("doctor")
        .unwrap()
        .render_help()
        .to_string();
    for h in headings {
        for (what, text) in [("-h", &short), ("--help", &long), ("doctor -h", &doctor)] {
            assert!(
                text.contains(&format!("\n{h}:\n")),
                "no heading {h:?} in {what}:\n{text}"
            );
        }
    }
    // -h keeps to first sentences: the long texts are in --help only.
    assert!(
        short.len() * 2 < long.len(),
        "-h is {} bytes, --help {}",
        short.len(),
        long.len()
    );
    assert!(
        !short.contains("The default fits the default --max-memory"),
        "{short}"
    );
    assert!(long.contains("The default fits the default --max-memory"));
}

#[test]
fn mirror_flags() {
    let v = args(&[
        "--no-secret",
        "--mirror",
        "geneve:7000",
        "--vni",
        "5,3",
        "--workers",
        "4",
    ])
    .unwrap()
    .validate(1)
    .unwrap();
    let m = v.mirror.unwrap();
    assert_eq!(
        (m.encap, m.port, m.vnis),
        (crate::mirror::Encap::Geneve, 7000, vec![3, 5])
    );
    assert_eq!(v.workers, 1, "a mirror is read by one worker");
    assert!(
        args(&["--no-secret", "--vni", "5"]).is_err(),
        "--vni needs --mirror"
    );
    assert!(args(&["--no-secret", "--mirror", "vxlan", "--interface", "eth0"]).is_err());
    let e = args(&["--no-secret", "--mirror", "gre"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("--mirror") && e.contains("gre"), "{e}");
    let e = args(&["--no-secret", "--mirror", "vxlan", "--vni", "99999999"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("--vni") && e.contains("99999999"), "{e}");
    assert!(args(&["--no-secret"])
        .unwrap()
        .validate(1)
        .unwrap()
        .mirror
        .is_none());
}
