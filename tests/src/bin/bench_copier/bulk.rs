//! Bulk steps (`--bulk`, issue 34): large uploads in parallel at rising rates, then large
//! answers, through the copier with offloads on (64 KB super-segments captured; `--gso auto`
//! sends them on whole unless `--copier-args '--gso off'`). Its own lab and copying setup; the
//! rate steps and scenarios do not run.
//!
//! Each step: `n` curl uploads of `mb` MB at once from `client` (each its own body, so the
//! SHA-256 tells them apart), each limited to `rate` MB/s (`--limit-rate`; `max`: unlimited),
//! or `n` GETs of a 10 MB file. Then it waits until the test server is quiet for 2 s (at most
//! 60 s) and reads, for that step:
//! - online MB/s: bytes over the time the client took; test MB/s: the bytes of the requests
//!   the test server took whole over the time from the start of the load to its last log line
//!   of the step (`$msec`), and that time over the online time ("test/online");
//! - whole: the step's requests the test server's application took whole (status 200; an
//!   upload's length and SHA-256 equal to the online one, a GET's answer the whole file);
//!   aborted: lines with another status (a copy given up at a hole is logged as a 400);
//! - the copier's kernel drops, sessions shed for overload (all reasons), CPU seconds (user +
//!   system) and CPU ms per MB moved online, and the packets it sent.

use super::*;
use lab::bench::fetch_metrics;

/// The file the GET steps fetch, and its size.
const BULK_GET_PATH: &str = "bulk10m.bin";
const BULK_GET_SIZE: usize = 10 << 20;

#[derive(Clone, Copy)]
enum Kind {
    Upload { mb: usize, rate: Option<u32> },
    Get,
}

/// The steps: 4 x 20 MB uploads at 5, 10, 25 MB/s each and unlimited, 4 x 50 MB unlimited, then
/// 4 and 8 parallel GETs of 10 MB.
const STEPS: &[(usize, Kind)] = &[
    (
        4,
        Kind::Upload {
            mb: 20,
            rate: Some(5),
        },
    ),
    (
        4,
        Kind::Upload {
            mb: 20,
            rate: Some(10),
        },
    ),
    (
        4,
        Kind::Upload {
            mb: 20,
            rate: Some(25),
        },
    ),
    (4, Kind::Upload { mb: 20, rate: None }),
    (4, Kind::Upload { mb: 50, rate: None }),
    (4, Kind::Get),
    (8, Kind::Get),
];

fn counters(lab: &Lab) -> [f64; 3] {
    let m = fetch_metrics(lab, Host::Online, COPIER_METRICS);
    [
        metric_sum(&m, "copier_kernel_drops_total", &[]),
        metric_sum(&m, "copier_sessions_shed_overload_total", &[]),
        metric_sum(&m, "copier_send_packets_total", &[]),
    ]
}

fn cpu_s(pid: u32) -> f64 {
    lab::bench::Cpu::read(pid, None)
        .map(|c| (c.user_ticks + c.sys_ticks) as f64 * lab::bench::TICK_NS / 1e9)
        .unwrap_or(0.0)
}

pub(crate) fn run_bulk(args: &Args) -> Result<()> {
    let mut lab = Lab::with(LabOptions {
        offloads: true,
        capture_test_link: false,
    })?;
    if args.keep_dir {
        lab.keep_dir();
    }
    let nginx = NginxOptions {
        files: vec![(BULK_GET_PATH.into(), BULK_GET_SIZE)],
        ..NginxOptions::default()
    };
    let mut copier_args: Vec<String> = [
        "--metrics",
        COPIER_METRICS,
        "--seed",
        "7",
        "--session-buffer",
        "64M",
        "--ring-blocks",
        "512",
        "--ring-start-blocks",
        "512",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    copier_args.extend(args.copier_args.iter().cloned());
    let opts = CopyOptions {
        online: nginx.clone(),
        test: Some(nginx),
        copier_args,
        ipv6: false,
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).context("start the copying setup")?;
    let pid = c
        .copier
        .as_ref()
        .context("the copier was not started")?
        .pid();
    println!(
        "bulk steps; copier args {:?}; machine: {} CPUs, load average {}",
        args.copier_args,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "| step | online s | online MB/s | test s | test/online | test MB/s | whole | aborted | kernel drops | shed | copier CPU s | CPU ms/MB | packets sent |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (si, &(n, kind)) in STEPS.iter().enumerate() {
        let tag = format!("b{si}");
        let mut script = String::new();
        let (label, bytes) = match kind {
            Kind::Upload { mb, rate } => {
                let limit = rate
                    .map(|r| format!("--limit-rate {r}M "))
                    .unwrap_or_default();
                for i in 0..n {
                    let f = lab.dir().join(format!("bulk-{tag}-{i}.bin"));
                    let mut body = lab::pattern_bytes(mb << 20);
                    body[..8].copy_from_slice(&((si * 100 + i) as u64).to_be_bytes());
                    std::fs::write(&f, body)?;
                    script.push_str(&format!(
                        "curl -sS --max-time 120 {limit}-o /dev/null -w '%{{http_code}}\\n' --data-binary @{} http://{}/upload/{tag}-{i} & ",
                        f.display(),
                        addr::ONLINE
                    ));
                }
                let r = rate.map_or("max".to_string(), |r| format!("{r} MB/s"));
                (format!("{n} x {mb} MB up, {r} each"), n * (mb << 20))
            }
            Kind::Get => {
                for i in 0..n {
                    script.push_str(&format!(
                        "curl -sS --max-time 120 -o /dev/null -w '%{{http_code}}\\n' 'http://{}/{BULK_GET_PATH}?{tag}-{i}' & ",
                        addr::ONLINE
                    ));
                }
                (format!("{n} x GET 10 MB"), n * BULK_GET_SIZE)
            }
        };
        script.push_str("wait");
        let before = counters(&lab);
        let cpu0 = cpu_s(pid);
        let start_ms = lab::bench::wall_ms();
        let t0 = Instant::now();
        let out = lab.sh(Host::Client, &script)?;
        let online_s = t0.elapsed().as_secs_f64();
        let ok = out.lines().filter(|l| l.trim() == "200").count();
        if ok != n {
            bail!("step {label}: {ok} of {n} answered 200 online: {out}");
        }
        c.test()
            .wait_settled(Duration::from_secs(2), Duration::from_secs(60));
        std::thread::sleep(EXPORT_LAG + Duration::from_millis(1100));
        let after = counters(&lab);
        let cpu = cpu_s(pid) - cpu0;
        let mine = |e: &&LogEntry| {
            e.uri.contains(&format!("/upload/{tag}-")) || e.uri.contains(&format!("?{tag}-"))
        };
        let online: Vec<LogEntry> = c.online.requests()?.iter().filter(mine).cloned().collect();
        let test: Vec<LogEntry> = c.test().requests()?.iter().filter(mine).cloned().collect();
        let whole = test
            .iter()
            .filter(|t| {
                t.status == 200
                    && online.iter().any(|o| {
                        o.fingerprint() == t.fingerprint() && o.body_bytes_sent == t.body_bytes_sent
                    })
            })
            .count();
        let aborted = test.iter().filter(|t| t.status != 200).count();
        let last_ms = test.iter().filter_map(|t| t.msec).max().unwrap_or(start_ms);
        let test_s = (last_ms.saturating_sub(start_ms)) as f64 / 1000.0;
        let mb = bytes as f64 / (1 << 20) as f64;
        // At the test server, only what it took whole counts.
        let test_mb = mb * whole as f64 / n as f64;
        let d = |i: usize| after[i] - before[i];
        println!(
            "| {label} | {online_s:.2} | {:.0} | {test_s:.2} | {:.2} | {:.0} | {whole}/{n} | {aborted} | {} | {} | {cpu:.2} | {:.1} | {} |",
            mb / online_s,
            test_s / online_s,
            if test_s > 0.0 { test_mb / test_s } else { 0.0 },
            d(0),
            d(1),
            cpu * 1000.0 / mb,
            d(2)
        );
        // The bodies go: the next steps need the room.
        for i in 0..n {
            let _ = std::fs::remove_file(lab.dir().join(format!("bulk-{tag}-{i}.bin")));
        }
    }
    c.check_alive()?;
    let leaks = c.leaked(&lab);
    println!("leaked responses: {leaks}");
    if leaks > 0 {
        bail!("{leaks} response packet(s) leaked past the intercept");
    }
    Ok(())
}
