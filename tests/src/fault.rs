//! Traffic for the fault suite (`tests/tests/fault_*.rs`): what runs while a fault is injected.
//!
//! [`Traffic::start`] starts, until [`Traffic::stop`]:
//! - keep-alive clients on the client host, each a connection to the online nginx with a
//!   request every 50 ms (reconnecting if the connection ends);
//! - short connections: a `curl` loop on the client host, one connection per request;
//! - a client on the test host itself: a `curl` loop to the test nginx's own address (its
//!   answers go to this host and pass the intercept as local answers, or are held during a
//!   restart grace).
//!
//! The copied sessions' answers go to the copier's client pool, which a fault test also puts
//! on the intercept's `--allow` list, so an answer the intercept lets through by mistake is
//! counted by the leak counter ([`crate::leak`]).

use crate::http::{get_request, HttpReader};
use crate::{addr, Host, Lab, Proc};
use anyhow::Result;
use std::io::Write;
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Traffic running in a lab (see the module doc).
#[derive(Debug)]
pub struct Traffic {
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
    loops: Vec<Proc>,
}

impl Traffic {
    /// Starts `keepalive` keep-alive clients, the short-connection loop and the test host's
    /// own client.
    pub fn start(lab: &mut Lab, keepalive: usize) -> Result<Traffic> {
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for i in 0..keepalive {
            let (ns, stop, requests) = (lab.ns(Host::Client), stop.clone(), requests.clone());
            threads.push(std::thread::spawn(move || {
                keepalive_client(&ns, i, &stop, &requests)
            }));
        }
        let short = format!(
            "while true; do curl -s -o /dev/null --max-time 5 'http://{}/index.html?short='$(date +%s%N); sleep 0.1; done",
            addr::ONLINE
        );
        let local = format!(
            "while true; do curl -s -o /dev/null --max-time 10 'http://{}/index.html?local='$(date +%s%N); sleep 0.2; done",
            addr::TEST
        );
        let loops = vec![
            lab.spawn(Host::Client, "short-connections", &["sh", "-c", &short])?,
            lab.spawn(Host::Test, "test-host-client", &["sh", "-c", &local])?,
        ];
        Ok(Traffic {
            stop,
            requests,
            threads,
            loops,
        })
    }

    /// Requests the keep-alive clients got answered so far.
    pub fn keepalive_requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Stops every client.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for p in &self.loops {
            p.stop();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn keepalive_client(ns: &str, i: usize, stop: &AtomicBool, requests: &AtomicU64) {
    let Ok(f) = std::fs::File::open(format!("/var/run/netns/{ns}")) else {
        return;
    };
    if nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).is_err() {
        return;
    }
    let to = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80));
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect_timeout(&to, Duration::from_secs(5)) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let mut r = HttpReader::default();
        while !stop.load(Ordering::Relaxed) {
            if s.write_all(get_request(&format!("/index.html?ka{i}={n}")).as_bytes())
                .is_err()
            {
                break;
            }
            // The reader panics on a closed connection: catch it and reconnect.
            let read =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.read_response(&mut s)));
            if read.is_err() {
                break;
            }
            n += 1;
            requests.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Holds every packet of an NFQUEUE queue in a namespace for a fixed time, then lets it go:
/// a delay of our own, because this kernel has no qdisc that holds packets for a time (netem,
/// fq and etf are not built in). The firewall rules that send packets to the queue are the
/// caller's. A thread of the test process joins the namespace and reads the queue until
/// [`Delay::stop`] (or drop), when it lets go of what it still holds.
#[derive(Debug)]
pub struct Delay {
    stop: Arc<AtomicBool>,
    delayed: Arc<AtomicU64>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl Delay {
    /// Starts delaying the packets of `queue` in `h`'s namespace by `by`.
    pub fn start(lab: &Lab, h: Host, queue: u16, by: Duration) -> Result<Delay> {
        let (ns, stop, delayed) = (
            lab.ns(h),
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = {
            let (stop, delayed) = (stop.clone(), delayed.clone());
            std::thread::spawn(move || {
                let r = delay_queue(&ns, queue, by, &stop, &delayed, &ready_tx);
                if let Err(e) = &r {
                    let _ = ready_tx.send(Err(format!("{e:#}")));
                }
                r
            })
        };
        match ready_rx.recv_timeout(Duration::from_secs(5)) {
            Ok(Ok(())) => Ok(Delay {
                stop,
                delayed,
                thread: Some(thread),
            }),
            Ok(Err(e)) => anyhow::bail!("delay on queue {queue}: {e}"),
            Err(_) => anyhow::bail!("delay on queue {queue}: the queue reader did not start"),
        }
    }

    /// Packets held and let go so far.
    pub fn delayed(&self) -> u64 {
        self.delayed.load(Ordering::Relaxed)
    }

    /// Lets go of every held packet and ends the reader.
    pub fn stop(mut self) -> Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join()
                .map_err(|_| anyhow::anyhow!("the delay thread panicked"))??;
        }
        Ok(self.delayed())
    }
}

impl Drop for Delay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn delay_queue(
    ns: &str,
    queue: u16,
    by: Duration,
    stop: &AtomicBool,
    delayed: &AtomicU64,
    ready: &std::sync::mpsc::Sender<std::result::Result<(), String>>,
) -> Result<()> {
    use anyhow::Context;
    let f = std::fs::File::open(format!("/var/run/netns/{ns}")).context("open the namespace")?;
    nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).context("join the namespace")?;
    let mut q = nfq::Queue::open().context("open an NFQUEUE socket")?;
    q.bind(queue)
        .with_context(|| format!("bind queue {queue}"))?;
    // Nothing of the packet is needed: the verdict leaves it as it is.
    q.set_copy_range(queue, 64)?;
    q.set_queue_max_len(queue, 65_536)?;
    q.set_nonblocking(true);
    let _ = ready.send(Ok(()));
    let mut held: std::collections::VecDeque<(std::time::Instant, nfq::Message)> =
        std::collections::VecDeque::new();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        loop {
            match q.recv() {
                Ok(mut m) => {
                    m.set_verdict(nfq::Verdict::Accept);
                    held.push_back((std::time::Instant::now() + by, m));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.raw_os_error() == Some(libc_enobufs()) => continue,
                Err(e) => return Err(e).context("read the queue"),
            }
        }
        let now = std::time::Instant::now();
        while held.front().is_some_and(|(due, _)| stopping || *due <= now) {
            let (_, m) = held.pop_front().expect("front checked");
            q.verdict(m).context("verdict")?;
            delayed.fetch_add(1, Ordering::Relaxed);
        }
        if stopping {
            return Ok(());
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

fn libc_enobufs() -> i32 {
    nix::errno::Errno::ENOBUFS as i32
}

/// The memory caps the fault suite gives the daemons: the copier's `--max-memory` and the
/// intercept's `--hold-bytes` and `--copier-queue-bytes` (small, so that a fault that made
/// them grow past their caps shows).
pub const COPIER_MAX_MEMORY_MIB: u64 = 64;
/// See [`COPIER_MAX_MEMORY_MIB`].
pub const INTERCEPT_HOLD_MIB: u64 = 8;
/// See [`COPIER_MAX_MEMORY_MIB`].
pub const INTERCEPT_QUEUE_MIB: u64 = 4;

/// The copier's flags for [`COPIER_MAX_MEMORY_MIB`].
pub fn copier_caps() -> Vec<String> {
    vec!["--max-memory".into(), format!("{COPIER_MAX_MEMORY_MIB}M")]
}

/// The intercept's flags for [`INTERCEPT_HOLD_MIB`] and [`INTERCEPT_QUEUE_MIB`].
pub fn intercept_caps() -> Vec<String> {
    vec![
        "--hold-bytes".into(),
        format!("{INTERCEPT_HOLD_MIB}M"),
        "--copier-queue-bytes".into(),
        format!("{INTERCEPT_QUEUE_MIB}M"),
    ]
}

/// What a daemon may hold beyond its caps: its code, thread stacks, allocator arenas and
/// buffers (measured at 10 to 25 MiB for either, debug build), and for the copier its capture
/// ring (32 MiB at most with the default ring flags).
const BASE_MIB: u64 = 48;
const RING_MIB: u64 = 32;

/// Asserts that the copier and the intercept of `c` (the ones running now) never held more
/// resident memory (`VmHWM`) than their caps allow, and prints both peaks.
pub fn assert_memory_within_caps(c: &crate::setup::Copying, what: &str) {
    let copier = c
        .copier
        .as_ref()
        .map_or((0, 0), |p| crate::procstat::memory_kib(p.pid()));
    let intercept = crate::procstat::memory_kib(c.intercept.pid());
    let (copier_peak, intercept_peak) = (copier.1 / 1024, intercept.1 / 1024);
    let copier_bound = COPIER_MAX_MEMORY_MIB + RING_MIB + BASE_MIB;
    let intercept_bound = INTERCEPT_HOLD_MIB + INTERCEPT_QUEUE_MIB + BASE_MIB;
    println!(
        "{what}: peak resident memory: copier {copier_peak} MiB (bound {copier_bound}: --max-memory \
         {COPIER_MAX_MEMORY_MIB}M + ring + base), intercept {intercept_peak} MiB (bound {intercept_bound}: \
         --hold-bytes {INTERCEPT_HOLD_MIB}M + --copier-queue-bytes {INTERCEPT_QUEUE_MIB}M + base)"
    );
    assert!(
        copier.1 > 0 && intercept.1 > 0,
        "{what}: both daemons are running ({copier:?}, {intercept:?})"
    );
    assert!(
        copier_peak <= copier_bound,
        "{what}: the copier held {copier_peak} MiB, over {copier_bound} MiB"
    );
    assert!(
        intercept_peak <= intercept_bound,
        "{what}: the intercept held {intercept_peak} MiB, over {intercept_bound} MiB"
    );
}
