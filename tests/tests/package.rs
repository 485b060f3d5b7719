//! The Debian packages on this (lab) machine: `dpkg -i` the two packages that
//! `packaging/build-debs.sh` built into target/debian, check what they install (binaries, units
//! that systemd accepts, configs, man pages, completions, the dedicated user and the secret),
//! then copy live traffic in the lab with the INSTALLED binaries (/usr/bin/copier,
//! /usr/bin/intercept) and assert every request arrived once and nothing leaked. The packages
//! are purged (`dpkg -P`: removed with their configuration and the secret) afterwards, also
//! when the test fails.

use lab::setup::{CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const PACKAGES: [&str; 2] = ["trafficcopy-copier", "trafficcopy-intercept"];

/// Purges the packages when dropped.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").arg("-P").args(PACKAGES).output();
    }
}

fn debs() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debian");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| {
        let n = p.file_name().unwrap().to_string_lossy().into_owned();
        n.ends_with(".deb") && PACKAGES.iter().any(|pkg| n.starts_with(&format!("{pkg}_")))
    });
    v.sort();
    v
}

fn run(argv: &[&str]) -> String {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{argv:?} failed:\n{text}");
    text
}

#[test]
fn installed_packages_copy_live_traffic() {
    let Some(mut lab) = lab_or_skip("installed_packages_copy_live_traffic") else {
        return;
    };
    let debs = debs();
    if debs.len() != 2 {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("the .deb packages are missing in target/debian (scripts/test.sh runs packaging/build-debs.sh first)");
        }
        eprintln!("\n!!!!!!!! SKIPPED installed_packages_copy_live_traffic: run packaging/build-debs.sh first !!!!!!!!\n");
        return;
    }
    for p in PACKAGES {
        let st = Command::new("dpkg-query")
            .args(["-W", "-f=${Status}", p])
            .output()
            .unwrap();
        let st = String::from_utf8_lossy(&st.stdout).into_owned();
        assert!(
            !st.contains(" installed"),
            "{p} is installed on this machine ({st}): this test installs and purges it"
        );
    }
    let _guard = Installed;
    let mut argv = vec!["dpkg", "-i"];
    let paths: Vec<String> = debs
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    argv.extend(paths.iter().map(String::as_str));
    run(&argv);

    // what the packages put in place
    for f in [
        "/usr/bin/copier",
        "/usr/bin/intercept",
        "/etc/trafficcopy/copier.conf",
        "/etc/trafficcopy/intercept.conf",
        "/usr/share/bash-completion/completions/copier",
        "/usr/share/bash-completion/completions/intercept",
        "/usr/share/zsh/vendor-completions/_copier",
        "/usr/share/fish/vendor_completions.d/intercept.fish",
    ] {
        assert!(Path::new(f).is_file(), "{f} not installed");
    }
    for page in ["copier", "copier-doctor", "intercept", "intercept-doctor"] {
        let found = ["", ".gz"]
            .iter()
            .any(|ext| Path::new(&format!("/usr/share/man/man1/{page}.1{ext}")).is_file());
        assert!(found, "man page {page}(1) not installed");
    }
    let units: Vec<String> = PACKAGES
        .iter()
        .map(|p| {
            ["/lib/systemd/system", "/usr/lib/systemd/system"]
                .iter()
                .map(|d| format!("{d}/{p}.service"))
                .find(|f| Path::new(f).is_file())
                .unwrap_or_else(|| panic!("unit {p}.service not installed"))
        })
        .collect();
    for u in &units {
        let text = std::fs::read_to_string(u).unwrap();
        assert!(
            text.contains("CapabilityBoundingSet=CAP_NET_"),
            "{u}:\n{text}"
        );
        // systemd's own checker: unknown keys, bad values, a missing binary all fail
        let out = Command::new("systemd-analyze")
            .args(["verify", u])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let real: Vec<&str> = err
            .lines()
            .filter(|l| !l.contains("Command 'man "))
            .collect();
        assert!(
            out.status.success() || real.is_empty(),
            "systemd-analyze verify {u}:\n{err}"
        );
        assert!(real.is_empty(), "systemd-analyze verify {u}:\n{err}");
    }
    run(&["getent", "passwd", "trafficcopy"]);
    let secret = std::fs::metadata("/etc/trafficcopy/secret").expect("the postinst wrote a secret");
    assert_eq!(secret.mode() & 0o777, 0o600, "secret mode");
    let version = run(&["/usr/bin/copier", "--version"]);
    assert!(version.starts_with("copier "), "{version}");
    let help = run(&["/usr/bin/intercept", "doctor", "--help"]);
    assert!(help.contains("--client-range"), "{help}");

    // The demo's setup with the installed binaries, run as the units run them (systemd is not
    // PID 1 here, so setpriv stands in): the copier as user trafficcopy with only CAP_NET_RAW
    // and CAP_NET_ADMIN (ambient), the intercept as root bounded to the same two.
    let caps = "--inh-caps=-all,+net_raw,+net_admin --ambient-caps=-all,+net_raw,+net_admin --bounding-set=-all,+net_raw,+net_admin";
    let bin = lab.dir().join("unit-bin");
    std::fs::create_dir_all(&bin).unwrap();
    for (name, user) in [
        (
            "copier",
            "--reuid=trafficcopy --regid=trafficcopy --clear-groups ",
        ),
        ("intercept", ""),
    ] {
        let script = format!("#!/bin/sh\nexec setpriv {user}{caps} /usr/bin/{name} \"$@\"\n");
        let path = bin.join(name);
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    std::env::set_var("TC_BIN_DIR", &bin);
    let mut c = Copying::start(
        &mut lab,
        CopyOptions {
            start_copier: false,
            ..CopyOptions::default()
        },
    )
    .expect("start the intercept as its unit does");
    // the copier's user reads the shared secret (the intercept has read it already)
    run(&[
        "chown",
        "trafficcopy:trafficcopy",
        &lab.dir().join("secret").to_string_lossy(),
    ]);
    c.start_copier(&mut lab)
        .expect("start the copier as its unit does");
    for (p, uid) in [
        (&c.intercept, "0".to_string()),
        (
            c.copier.as_ref().unwrap(),
            run(&["id", "-u", "trafficcopy"]).trim().to_string(),
        ),
    ] {
        let exe = std::fs::read_link(format!("/proc/{}/exe", p.pid())).unwrap();
        assert!(
            exe.starts_with("/usr/bin"),
            "{} runs {}",
            p.name(),
            exe.display()
        );
        let status = std::fs::read_to_string(format!("/proc/{}/status", p.pid())).unwrap();
        let field = |k: &str| {
            status
                .lines()
                .find(|l| l.starts_with(k))
                .unwrap_or("")
                .split_whitespace()
                .nth(1)
                .unwrap_or("")
                .to_string()
        };
        assert_eq!(field("Uid:"), uid, "{} user", p.name());
        // CAP_NET_ADMIN (12) and CAP_NET_RAW (13), nothing else
        assert_eq!(
            field("CapEff:"),
            "0000000000003000",
            "{} capabilities",
            p.name()
        );
    }
    let url = format!("http://{}/index.html", addr::ONLINE);
    lab.exec_ok(Host::Client, &["wrk", "-t1", "-c4", "-d2s", &url])
        .expect("wrk");
    let n = c.assert_copied_exactly(&mut lab);
    assert!(n > 100, "only {n} requests were made");
    drop(c);
    drop(lab);
    drop(_guard);
    for f in [
        "/usr/bin/copier",
        "/usr/bin/intercept",
        "/etc/trafficcopy/copier.conf",
        "/etc/trafficcopy/secret",
    ] {
        assert!(!Path::new(f).exists(), "dpkg -P left {f}");
    }
}
