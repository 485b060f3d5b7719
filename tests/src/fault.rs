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
            threads.push(std::thread::spawn(move || keepalive_client(&ns, i, &stop, &requests)));
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
        Ok(Traffic { stop, requests, threads, loops })
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
    let Ok(f) = std::fs::File::open(format!("/var/run/netns/{ns}")) else { return };
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
            if s.write_all(get_request(&format!("/index.html?ka{i}={n}")).as_bytes()).is_err() {
                break;
            }
            // The reader panics on a closed connection: catch it and reconnect.
            let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.read_response(&mut s)));
            if read.is_err() {
                break;
            }
            n += 1;
            requests.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
