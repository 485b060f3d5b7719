//! `--record` on a disk that fills (issue 27 item 5): the archive directory is a tiny tmpfs; the
//! copy goes on when it is full (every request still reaches the test server), the failed writes
//! are counted and logged once per outage, and after files are deleted the archive resumes by
//! itself (new files appear, "writing resumed" is logged).

use std::io::Write;
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lab::http::{get_request, HttpReader};
use lab::setup::{metric_sum, scrape_metrics, tail, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host, Lab};

const METRICS: &str = "127.0.0.1:9467";
/// A request of about 4 KiB (a long query string), so that a few hundred fill the disk.
const PAD: usize = 4000;

/// A tmpfs mounted for the test, unmounted when dropped (even when the test fails).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let opt = format!("size={size},mode=0700");
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &opt, "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(st.success(), "mount -t tmpfs {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `conns` client connections of `per` keep-alive requests of ~4 KiB each; `from` numbers them.
fn traffic(lab: &Lab, from: usize, conns: usize, per: usize) {
    lab.in_ns(Host::Client, move || {
        let to = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80));
        let pad = "p".repeat(PAD);
        for c in from..from + conns {
            let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            for i in 0..per {
                s.write_all(get_request(&format!("/index.html?c={c}&i={i}&pad={pad}")).as_bytes())
                    .unwrap();
                HttpReader::default().read_response(&mut s);
            }
        }
    })
    .unwrap();
}

fn archive_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".pcapng"))
        .collect();
    v.sort();
    v
}

#[test]
fn a_full_record_disk_drops_and_counts_the_archive_and_the_copy_goes_on_then_resumes() {
    let Some(mut lab) = lab_or_skip(
        "a_full_record_disk_drops_and_counts_the_archive_and_the_copy_goes_on_then_resumes",
    ) else {
        return;
    };
    let dir = lab.dir().join("archive");
    let _disk = Tmpfs::mount(&dir, "512k");
    let opts = CopyOptions {
        copier_args: vec![
            "--metrics".into(),
            METRICS.into(),
            "--record".into(),
            dir.display().to_string(),
            "--record-size".into(),
            "1M".into(),
            "--record-files".into(),
            "16".into(),
        ],
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    // ~1.3 MB of requests into a 512 KiB disk
    let (conns, per) = (40, 8);
    traffic(&lab, 0, conns, per);
    let n = c.test().wait_requests(conns * per, Duration::from_secs(30));
    assert_eq!(
        n,
        conns * per,
        "every request reached the test server, the disk full or not"
    );
    c.check_alive().unwrap();
    let m = scrape_metrics(&lab, Host::Online, METRICS);
    let errors = metric_sum(
        &m,
        "copier_output_errors_total",
        &["output=\"record\"", "reason=\"no_space\""],
    );
    let dropped = metric_sum(&m, "copier_output_dropped_total", &["output=\"record\""]);
    println!("full disk: {errors} failed writes, {dropped} packets dropped");
    assert!(
        errors > 0.0 && dropped > 0.0,
        "the full disk is counted:\n{m}"
    );
    let log = c.copier.as_ref().unwrap().log();
    let logged = log.matches("what cannot be written is dropped").count();
    assert!(logged >= 1, "{}", tail(&log, 20));
    assert!(
        (logged as f64) < errors,
        "logged once per outage, not per failed write: {logged} lines, {errors} errors\n{}",
        tail(&log, 20)
    );
    // space returns: the archive resumes by itself
    let before = archive_files(&dir);
    let last = before.last().cloned().unwrap_or_default();
    for f in &before {
        std::fs::remove_file(dir.join(f)).unwrap();
    }
    traffic(&lab, conns, 20, per);
    let n = c
        .test()
        .wait_requests((conns + 20) * per, Duration::from_secs(30));
    assert_eq!(n, (conns + 20) * per);
    let after = archive_files(&dir);
    assert!(
        after.iter().any(|f| *f > last),
        "new files after {last}: {after:?}"
    );
    let log = c.copier.as_ref().unwrap().log();
    assert!(log.contains("writing resumed"), "{}", tail(&log, 20));
    c.assert_no_leak(&mut lab);
}
