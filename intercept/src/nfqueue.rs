//! NFQUEUE workers: one blocking thread per queue reads the test service's responses, asks the
//! router what to do, gives every packet a verdict and hands records to the copiers' outlets.
//!
//! Invariants:
//! - every packet read gets a verdict; it is ACCEPT only when the router says
//!   `Decision::Accept`, DROP otherwise (also when the copier's queue is full or the copier is
//!   gone: the record is lost and counted, the packet still never leaves);
//! - the queue is bound with fail-open off, so when the intercept is slow the kernel drops
//!   rather than accepts; ENOBUFS (the kernel could not deliver to us) is counted as an overrun;
//! - the copy range is headers only (128 bytes, enough for 60-byte IP and TCP headers) plus the
//!   payload asked for, and GSO delivery stays off so packets arrive no larger than the MTU;
//! - the router lock is held only for the decision, never during the verdict or a push;
//! - a worker that ends (an error or a panic) is reported loudly by [`run_supervised`]: an
//!   error log line, `intercept_nfqueue_workers_died_total{queue}`, and the reason returned to
//!   the daemon, which then stops with a non-zero exit status.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use metrics::counter;
use nfq::{Queue, Verdict};

use crate::metrics::{NFQUEUE_OVERRUNS, PACKETS_QUEUED, VERDICT_ERRORS, WORKERS_DIED};
use crate::outlet::Shared;

/// Bytes copied per packet when no payload is asked for: IPv4 (≤ 60) + TCP (≤ 60) headers.
pub const HEADER_COPY: usize = 128;

/// Receive buffer asked for the netlink socket: at 20k packets/s the kernel's 208 KiB default
/// holds about 13 ms of responses, too little when the host is busy for a moment.
pub const RCVBUF: usize = 16 << 20;

/// Packets the kernel may keep waiting for a verdict on one queue (its default is 1024).
pub const QUEUE_MAX_LEN: u32 = 16384;

/// Consecutive receive errors (other than ENOBUFS) after which a worker gives up.
const MAX_CONSECUTIVE_ERRORS: u32 = 100;

/// A queue opened and bound, ready to be served by [`run`] on its own thread.
pub struct BoundQueue {
    queue: Queue,
    num: u16,
}

impl std::fmt::Debug for BoundQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundQueue")
            .field("num", &self.num)
            .finish()
    }
}

impl BoundQueue {
    /// The queue number.
    pub fn num(&self) -> u16 {
        self.num
    }
}

/// Run a worker's body (normally [`run`]) and report its end, whether it returned or
/// panicked: an error log line and `intercept_nfqueue_workers_died_total{queue}`. Returns the
/// reason, for the daemon to stop on.
pub fn run_supervised(queue: u16, body: impl FnOnce() -> Result<()>) -> String {
    let why = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => "stopped".to_string(),
        Ok(Err(e)) => format!("{e:#}"),
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_string());
            format!("panicked: {msg}")
        }
    };
    counter!(WORKERS_DIED, "queue" => queue.to_string()).increment(1);
    tracing::error!(
        queue,
        "NFQUEUE worker of queue {queue} died: {why}; the packets of this queue get no verdict any more \
         (the kernel drops them); the intercept stops with an error"
    );
    format!("queue {queue}: {why}")
}

/// The copy range for `payload_bytes` of payload.
pub fn copy_range(payload_bytes: usize) -> u16 {
    u16::try_from(HEADER_COPY + payload_bytes).unwrap_or(u16::MAX)
}

/// Open a netlink socket and bind queue `num` with fail-open off and the copy range for
/// `payload_bytes`.
pub fn bind(num: u16, payload_bytes: usize) -> Result<BoundQueue> {
    let predicted = crate::sys::next_fd().ok();
    let mut queue =
        Queue::open().context("open the NFQUEUE netlink socket (needs CAP_NET_ADMIN)")?;
    match predicted.filter(|&fd| crate::sys::is_netfilter_socket(fd)) {
        Some(fd) => match crate::sys::force_rcvbuf(fd, RCVBUF) {
            Ok(n) => tracing::debug!("NFQUEUE socket receive buffer: {n} bytes"),
            Err(e) => tracing::warn!("could not enlarge the NFQUEUE socket's receive buffer: {e}"),
        },
        None => tracing::warn!(
            "could not find the NFQUEUE socket to enlarge its receive buffer; bursts may overrun it (counted)"
        ),
    }
    queue
        .bind(num)
        .with_context(|| format!("bind NFQUEUE queue {num} (is another intercept bound to it?)"))?;
    queue
        .set_fail_open(num, false)
        .with_context(|| format!("turn fail-open off on queue {num}"))?;
    queue
        .set_recv_gso(num, false)
        .with_context(|| format!("turn GSO delivery off on queue {num}"))?;
    queue
        .set_copy_range(num, copy_range(payload_bytes))
        .with_context(|| format!("set the copy range of queue {num}"))?;
    queue
        .set_queue_max_len(num, QUEUE_MAX_LEN)
        .with_context(|| format!("set the kernel queue length of queue {num}"))?;
    queue
        .set_recv_enobufs(true)
        .context("enable ENOBUFS reports on the NFQUEUE socket")?;
    Ok(BoundQueue { queue, num })
}

/// Serve a bound queue until an unrecoverable error. Meant for a dedicated thread; it never
/// returns `Ok`.
pub fn run(bound: BoundQueue, shared: Arc<Shared>) -> Result<()> {
    let BoundQueue { mut queue, num } = bound;
    let label = num.to_string();
    let queued = counter!(PACKETS_QUEUED, "queue" => label.clone());
    let overruns = counter!(NFQUEUE_OVERRUNS, "queue" => label);
    let verdict_errors = counter!(VERDICT_ERRORS);
    let mut errors = 0u32;
    loop {
        let mut msg = match queue.recv() {
            Ok(m) => {
                errors = 0;
                m
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                overruns.increment(1);
                tracing::warn!(
                    queue = num,
                    "NFQUEUE overrun: the kernel dropped packets it could not deliver to us"
                );
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                errors += 1;
                tracing::error!(queue = num, "NFQUEUE receive failed: {e}");
                if errors >= MAX_CONSECUTIVE_ERRORS {
                    bail!("NFQUEUE queue {num}: {errors} receive errors in a row, last: {e}");
                }
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        queued.increment(1);
        let (accept, delivery) = shared.route(Instant::now(), msg.get_payload());
        msg.set_verdict(if accept {
            Verdict::Accept
        } else {
            Verdict::Drop
        });
        if let Err(e) = queue.verdict(msg) {
            verdict_errors.increment(1);
            tracing::error!(queue = num, "NFQUEUE verdict failed: {e}");
        }
        if let Some(d) = delivery {
            d.push();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dying_worker_is_reported_with_its_reason() {
        let why = run_supervised(3, || bail!("receive failed"));
        assert_eq!(why, "queue 3: receive failed");
        let why = run_supervised(4, || panic!("index out of bounds"));
        assert!(
            why.starts_with("queue 4: panicked: index out of bounds"),
            "{why}"
        );
        let n = 5;
        let why = run_supervised(5, move || panic!("boom {n}"));
        assert!(why.contains("panicked: boom 5"), "{why}");
    }
}
