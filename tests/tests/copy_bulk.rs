//! Bulk uploads at line rate (issue 34): several large uploads in parallel, offloads on, so the
//! copier captures 64 KB super-segments and sends them on as super-segments (`--gso auto`, the
//! default: whole through AF_PACKET, cut by veth's peer as TSO would be). Every upload must reach
//! the test server whole (length and SHA-256 of the body, compared with the online server's) or,
//! when the copier cannot keep up (a debug build on a shared machine falls behind 4 x 20 MB at
//! line rate; the overload test makes it fall behind on purpose), not at all, counted as shed:
//! a copy cut short is a bug.

use lab::setup::{metric_sum, scrape_metrics, tail, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host, Lab};
use std::time::{Duration, Instant};

const COPIER_METRICS: &str = "127.0.0.1:9467";

/// One bulk test at a time: each drives hundreds of Mbit/s through this machine's two cores,
/// and two at once would starve each other's capture.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn opts(extra: &[&str]) -> CopyOptions {
    let mut copier_args = vec![
        "--metrics".to_string(),
        COPIER_METRICS.into(),
        "--seed".into(),
        "7".into(),
    ];
    copier_args.extend(extra.iter().map(|s| s.to_string()));
    CopyOptions {
        copier_args,
        ipv6: false,
        ..CopyOptions::default()
    }
}

/// `n` uploads of `size` bytes each, in parallel from the client, each with a body of its own
/// (so the SHA-256 tells them apart); returns how long the online side took, and when the
/// uploads started (ms since the Unix epoch, as nginx's `$msec`).
fn parallel_uploads(lab: &Lab, n: usize, size: usize, tag: &str) -> (Duration, u64) {
    let mut script = String::new();
    for i in 0..n {
        let f = lab.dir().join(format!("bulk-{tag}-{i}.bin"));
        let mut body = lab::pattern_bytes(size);
        body[..8].copy_from_slice(&(i as u64).to_be_bytes());
        std::fs::write(&f, body).unwrap();
        script.push_str(&format!(
            "curl -sS --max-time 60 -o /dev/null -w '%{{http_code}}\\n' --data-binary @{} http://{}/upload/{tag}-{i} & ",
            f.display(),
            addr::ONLINE
        ));
    }
    script.push_str("wait");
    let (t0, start_ms) = (Instant::now(), lab::bench::wall_ms());
    let out = lab.sh(Host::Client, &script).unwrap();
    let took = t0.elapsed();
    assert_eq!(
        out.lines().filter(|l| l.trim() == "200").count(),
        n,
        "every upload answered 200 online: {out}"
    );
    (took, start_ms)
}

#[test]
fn parallel_large_uploads_arrive_whole_through_gso() {
    let _serial = one_at_a_time();
    let Some(mut lab) = lab_or_skip("parallel_large_uploads_arrive_whole_through_gso") else {
        return;
    };
    // BULK_GSO=off: the same load the old way (for BENCHMARKS.md's before).
    let gso_off = std::env::var("BULK_GSO").is_ok_and(|v| v == "off");
    // A ring (and capture queue) of 128 MiB each holds the whole 80 MB burst while the engine
    // works through it, as a bulk front end would be sized (--ring-blocks).
    let mut args = vec![
        "--session-buffer",
        "64M",
        "--ring-blocks",
        "512",
        "--ring-start-blocks",
        "512",
    ];
    if gso_off {
        args.extend(["--gso", "off"]);
    }
    let mut c = Copying::start(&mut lab, opts(&args)).unwrap();
    // 4 x 20 MB by default (a debug copier on a shared 2-core machine); BULK_MB=50 for the
    // issue's 4 x 50 MB (with release binaries: TC_BIN_DIR=target/release).
    let mb: usize = std::env::var("BULK_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let (n, size) = (4, mb << 20);
    let (online, start_ms) = parallel_uploads(&lab, n, size, "gso");
    let t0 = Instant::now();
    let m = copied_whole_or_left_out(&mut lab, &mut c, n);
    let test_done = t0.elapsed();
    // The 1.5x: when the test server logged its last upload, against the online one
    // (nginx logs a request once its answer is out; from the start of the load).
    let last = |log: Vec<lab::LogEntry>| {
        log.iter()
            .filter_map(|e| e.msec)
            .max()
            .unwrap_or(start_ms)
            .saturating_sub(start_ms)
    };
    let (on_ms, test_ms) = (
        last(c.online.requests().unwrap()),
        last(c.test().requests().unwrap()),
    );
    println!(
        "last upload logged {on_ms} ms online, {test_ms} ms at the test server: {:.2}x",
        test_ms as f64 / on_ms.max(1) as f64
    );
    let whole = metric_sum(&m, "copier_send_gso_total", &["path=\"whole\""]);
    let cut = metric_sum(&m, "copier_send_gso_total", &["path=\"cut\""]);
    let wire = metric_sum(&m, "copier_send_gso_wire_segments_total", &[]);
    let sent = metric_sum(&m, "copier_send_packets_total", &[]);
    let copied = metric_sum(&m, "copier_sessions_completed_total", &[]);
    println!(
        "{n} x {mb} MB: online {online:?}, test side done {test_done:?} later; {copied} copied whole; super-segments \
         {whole} whole ({wire} wire segments), {cut} cut; {sent} packets sent"
    );
    if std::env::var("BULK_ALL_WHOLE").is_ok_and(|v| v == "1") {
        assert_eq!(copied as usize, n, "BULK_ALL_WHOLE=1: every upload copied");
    }
    if gso_off {
        return;
    }
    // In MSS segments the bodies are ~720 packets a MB; whole super-segments carry nearly all.
    let copied_mb = copied * mb as f64;
    assert!(
        whole > 0.0 && wire > 500.0 * copied_mb,
        "super-segments did not leave whole:\n{m}"
    );
    assert!(
        sent < 200.0 * copied_mb + 1000.0,
        "{sent} packets sent for {copied_mb} MB: the super-segments were cut"
    );
}

/// Stops the copier once the test server is quiet and asserts that every upload reached the
/// test server's application whole (nginx answered 200, length and SHA-256 of the body equal
/// to the online one) or not at all, counted as shed for overload: uploads taken whole + shed
/// sessions == uploads. A session the kernel's drops hit after part of it was sent is given up
/// at the hole with a RST before anything after it (`reason="hole"`): nginx logs that aborted
/// body as a 400 (never a 200: it is not handed to the application), and there are no more
/// such lines than sessions given up at a hole. Also that at least one upload was copied and
/// nothing leaked. Returns the copier's last metrics.
fn copied_whole_or_left_out(lab: &mut Lab, c: &mut Copying, n: usize) -> String {
    copied_whole_or_left_out_at_least(lab, c, n, 1)
}

/// [`copied_whole_or_left_out`], with at least `min_taken` uploads copied whole.
fn copied_whole_or_left_out_at_least(
    lab: &mut Lab,
    c: &mut Copying,
    n: usize,
    min_taken: usize,
) -> String {
    // Every copy the copier started has ended (completed, or failed by its own account) before
    // it is stopped: the test server's log alone can be quiet for seconds while a body still
    // flows (a test server that shut its window; the copier probes it). Then the log settles.
    let t0 = Instant::now();
    let mut m = scrape_metrics(lab, Host::Online, COPIER_METRICS);
    while t0.elapsed() < Duration::from_secs(60) {
        let started = metric_sum(&m, "copier_sessions_started_total", &[]);
        let ended = metric_sum(&m, "copier_sessions_completed_total", &[])
            + metric_sum(&m, "copier_sessions_failed_total", &[]);
        if started > 0.0 && ended >= started {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
        m = scrape_metrics(lab, Host::Online, COPIER_METRICS);
    }
    println!(
        "the copier's sessions ended {:.1} s after the load ({} zero-window probes, {} retransmissions)",
        t0.elapsed().as_secs_f64(),
        metric_sum(&m, "copier_window_probes_total", &[]),
        metric_sum(&m, "copier_retransmissions_total", &[])
    );
    c.settle(Duration::from_secs(3), Duration::from_secs(60));
    c.check_alive().unwrap();
    let m = scrape_metrics(lab, Host::Online, COPIER_METRICS);
    let copier = c.copier.take().unwrap();
    // The copier's CPU time so far (utime + stime, in clock ticks of 10 ms).
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", copier.pid())).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    println!("copier CPU {:.2} s", ticks as f64 / 100.0);
    copier.stop();
    let log = tail(&copier.log(), 20);
    c.settle(Duration::from_secs(2), Duration::from_secs(10));
    let online_log = c.online.requests().unwrap();
    let online = lab::setup::fingerprints(&online_log);
    let test_log = c.test().requests().unwrap();
    let (taken, aborted): (Vec<_>, Vec<_>) = test_log.iter().partition(|e| e.status == 200);
    let taken = lab::setup::fingerprints(&taken.into_iter().cloned().collect::<Vec<_>>());
    let shed = metric_sum(&m, "copier_sessions_shed_overload_total", &[]);
    let at_holes = metric_sum(
        &m,
        "copier_sessions_shed_overload_total",
        &["reason=\"hole\""],
    );
    let drops = metric_sum(&m, "copier_kernel_drops_total", &[]);
    println!(
        "{} of {n} uploads reached the test server whole, {} aborted there at a hole; {shed} sessions left out \
         ({at_holes} at a hole), {drops} kernel drops\n{log}",
        taken.len(),
        aborted.len()
    );
    let cut: Vec<&String> = taken.keys().filter(|k| !online.contains_key(*k)).collect();
    assert!(
        cut.is_empty(),
        "uploads the test server's application took cut short: {cut:?}\nonline: {online:?}\n{log}"
    );
    assert!(
        taken.values().all(|&k| k == 1),
        "an upload copied twice: {taken:?}"
    );
    for a in &aborted {
        let whole = online_log
            .iter()
            .find(|o| o.uri == a.uri)
            .map(|o| o.request_length);
        assert!(
            a.status == 400 && whole.is_some_and(|w| a.request_length < w) && !taken.keys().any(|k| k.contains(&format!(" {} ", a.uri))),
            "a test server line that is neither a whole upload nor one aborted at a hole: {a:?}\n{log}"
        );
    }
    assert!(
        aborted.len() as f64 <= at_holes,
        "{} uploads aborted at the test server, {at_holes} given up at a hole:\n{m}",
        aborted.len()
    );
    assert!(
        taken.len() >= min_taken,
        "fewer than {min_taken} uploads copied:\n{log}"
    );
    assert_eq!(
        taken.len() + shed as usize,
        n,
        "every upload copied whole or counted as left out:\n{m}\n{log}"
    );
    c.assert_no_leak(lab);
    m
}

#[test]
fn gso_off_cuts_in_user_space_and_uploads_still_arrive_whole() {
    let _serial = one_at_a_time();
    let Some(mut lab) = lab_or_skip("gso_off_cuts_in_user_space_and_uploads_still_arrive_whole")
    else {
        return;
    };
    let c = Copying::start(&mut lab, opts(&["--gso", "off"])).unwrap();
    let _ = parallel_uploads(&lab, 2, 5 << 20, "off");
    assert_eq!(c.assert_copied_exactly(&mut lab), 2);
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert_eq!(
        metric_sum(&m, "copier_send_gso_total", &[]),
        0.0,
        "--gso off sends no super-segment:\n{m}"
    );
    assert!(
        metric_sum(&m, "copier_send_packets_total", &[]) > 7_000.0,
        "10 MB in MSS segments:\n{m}"
    );
}

#[test]
fn overloaded_copier_leaves_sessions_out_whole_and_counts_them() {
    let _serial = one_at_a_time();
    // Ten uploads of 20 MB that start 0.05 s apart, while the first ones flood the capture: the
    // copier falls behind on purpose (over a quarter of its 64 MiB capture queue waits), and
    // the ring (64 MiB) and queue mostly hold the burst. When the capture thread is starved of
    // CPU all the same (other load on the machine) the kernel drops packets of sessions being
    // copied: those are given up at the hole, before anything after it is sent, and counted.
    // (--session-buffer holds a whole 20 MB body: a copy over its buffer cap is cut short.)
    // Whatever it could not copy must be left out whole: every upload the test server got is
    // the online one, byte for byte, and the ones left out are counted.
    let Some(mut lab) = lab_or_skip("overloaded_copier_leaves_sessions_out_whole_and_counts_them")
    else {
        return;
    };
    // BULK_RING_BLOCKS=16 (a 4 MiB ring): the kernel drops packets of sessions being copied
    // in most runs, so the give-up at a hole is exercised (by hand; CI keeps 256).
    let ring = std::env::var("BULK_RING_BLOCKS").unwrap_or_else(|_| "256".into());
    let mut c = Copying::start(
        &mut lab,
        opts(&[
            "--ring-blocks",
            &ring,
            "--ring-start-blocks",
            &ring,
            "--session-buffer",
            "64M",
        ]),
    )
    .unwrap();
    let (n, size) = (10, 20 << 20);
    let mut script = String::new();
    for i in 0..n {
        let f = lab.dir().join(format!("bulk-over-{i}.bin"));
        let mut body = lab::pattern_bytes(size);
        body[..8].copy_from_slice(&(i as u64).to_be_bytes());
        std::fs::write(&f, body).unwrap();
        script.push_str(&format!(
            "curl -sS --max-time 60 -o /dev/null -w '%{{http_code}}\\n' --data-binary @{} http://{}/upload/over-{i} & sleep 0.05; ",
            f.display(),
            addr::ONLINE
        ));
    }
    script.push_str("wait");
    let out = lab.sh(Host::Client, &script).unwrap();
    assert_eq!(
        out.lines().filter(|l| l.trim() == "200").count(),
        n,
        "{out}"
    );
    let m = copied_whole_or_left_out(&mut lab, &mut c, n);
    // Whether the copier falls behind depends on the machine: with other load the clients
    // are slowed as much as the copier, and it may keep up (1 run in 20 here, with three busy
    // loops beside). Then every upload was copied whole (asserted above: whole + shed == n);
    // `copies_the_kernel_drops_packets_of_are_given_up_at_the_hole` overloads it for certain.
    let shed = metric_sum(&m, "copier_sessions_shed_overload_total", &[]);
    if shed == 0.0 {
        println!("the copier kept up this time: all {n} uploads copied whole");
    }
}

/// The copier stopped (SIGSTOP) for 1 s in the middle of two uploads it is copying, with a
/// 16 MiB ring (30 MB arrive meanwhile): the kernel drops packets of both sessions, whose bodies were partly sent. Each
/// is given up at its hole (a RST before anything after it), counted as shed (`hole`), and no
/// cut body reaches the test server's application (nginx logs the aborted ones as 400).
#[test]
fn copies_the_kernel_drops_packets_of_are_given_up_at_the_hole() {
    let _serial = one_at_a_time();
    let Some(mut lab) = lab_or_skip("copies_the_kernel_drops_packets_of_are_given_up_at_the_hole")
    else {
        return;
    };
    let mut c = Copying::start(
        &mut lab,
        opts(&[
            "--ring-blocks",
            "64",
            "--ring-start-blocks",
            "64",
            "--session-buffer",
            "64M",
        ]),
    )
    .unwrap();
    let (n, size) = (2, 30 << 20);
    let mut script = String::new();
    for i in 0..n {
        let f = lab.dir().join(format!("bulk-stop-{i}.bin"));
        let mut body = lab::pattern_bytes(size);
        body[..8].copy_from_slice(&(i as u64).to_be_bytes());
        std::fs::write(&f, body).unwrap();
        // 15 MB/s each: 2 s an upload, so the stop falls inside both.
        script.push_str(&format!(
            "curl -sS --max-time 60 --limit-rate 15M -o /dev/null -w '%{{http_code}}\\n' --data-binary @{} http://{}/upload/stop-{i} & ",
            f.display(),
            addr::ONLINE
        ));
    }
    script.push_str("wait");
    let pid = c.copier.as_ref().unwrap().pid().to_string();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(600));
        let _ = std::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status();
        std::thread::sleep(Duration::from_millis(1000));
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &pid])
            .status();
    });
    let out = lab.sh(Host::Client, &script).unwrap();
    stopper.join().unwrap();
    assert_eq!(
        out.lines().filter(|l| l.trim() == "200").count(),
        n,
        "{out}"
    );
    let m = copied_whole_or_left_out_at_least(&mut lab, &mut c, n, 0);
    let drops = metric_sum(&m, "copier_kernel_drops_total", &[]);
    let at_holes = metric_sum(
        &m,
        "copier_sessions_shed_overload_total",
        &["reason=\"hole\""],
    );
    assert!(
        drops > 0.0 && at_holes >= 1.0,
        "the stop made no hole in a copy under way:\n{m}"
    );
}
