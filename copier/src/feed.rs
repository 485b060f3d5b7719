//! The capture thread: one OS thread per capture ring reads the ring as soon as the kernel hands
//! a block over and copies its packets into memory, so the ring is nearly always empty and can
//! stay small; the engine thread takes the copies in batches, in capture order, woken through an
//! eventfd.
//!
//! Why: the engine works on a packet for much longer than it takes to copy it (it reassembles,
//! cuts and sends it, and the test host's receive path runs in its `sendmmsg`), so a burst of
//! large segments (a 10 MB upload arrives in milliseconds) outruns it. Held in the ring, such a
//! burst needs a ring that is always as large as the largest burst (32 MiB, paid by every quiet
//! host); held here, it costs memory only while it lasts.
//!
//! Owns: the thread, the queue of batches and its bound, a few spare batch buffers (a steady
//! rate allocates nothing; what a burst took beyond them is freed), and the capture counters as
//! the engine sees them (published by the thread after every batch and at least every
//! [`STATS_EVERY`]).
//!
//! The thread reads any [`Ring`]: the capture ring ([`Capture`]) or the mirror's UDP socket
//! (`crate::mirror::MirrorInput`), so both reach the engine the same way.
//!
//! Invariants: packets leave in the order the ring delivered them (one producer, one FIFO);
//! the queue holds at most [`FeedConfig::max_bytes`] (at least one batch): at the bound the
//! thread stops reading, and the ring (which then grows, up to its limit) holds the rest, so the
//! kernel counts what still does not fit; the thread's errors are logged by it, at most once a
//! second.

use std::collections::VecDeque;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::capture::{Capture, CaptureStats};
use crate::sys::{self, EventFd};

/// What the thread reads: the capture ring, or the mirror's UDP socket ([`crate::mirror`]).
pub trait Ring: Send + 'static {
    /// The descriptor to wait on for more packets.
    fn fd(&self) -> BorrowedFd<'_>;
    /// Are packets ready (a source that must read to know may read here)?
    fn ready(&mut self) -> bool;
    /// Hand the ready packets of up to `max` units (ring blocks, socket reads) to `f`, each
    /// one IP packet, in arrival order.
    fn drain(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> usize;
    /// The counters.
    fn stats(&self) -> CaptureStats;
    /// Read the kernel's counters (called every [`STATS_EVERY`] when idle).
    fn refresh_kernel_stats(&mut self) -> io::Result<()>;
    /// Read the kernel's counters a last time, when the thread stops (a source that reads them
    /// less often than it is asked must read them here).
    fn final_kernel_stats(&mut self) -> io::Result<()> {
        self.refresh_kernel_stats()
    }
    /// While the source grows: when to look again even if nothing arrives.
    fn growing_until(&self) -> Option<Instant> {
        None
    }
    /// The pending error of the descriptor, after a poll said it has one.
    fn take_error(&self) -> Option<io::Error>;
    /// The workers' fanout group, if any.
    fn fanout_group(&self) -> Option<u16> {
        None
    }
    /// A poll said the descriptor is readable: the source may let more packets gather here, on
    /// the thread's time, before [`Ring::ready`]. A source that hands over packet by packet (a
    /// socket) would otherwise wake the thread, and the engine, once per packet; a ring
    /// gathers in its blocks itself.
    fn readable(&mut self) {}
}

impl Ring for Capture {
    fn fd(&self) -> BorrowedFd<'_> {
        Capture::fd(self)
    }
    fn ready(&mut self) -> bool {
        self.has_ready()
    }
    fn drain(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> usize {
        Capture::drain(self, max, f)
    }
    fn stats(&self) -> CaptureStats {
        Capture::stats(self)
    }
    fn refresh_kernel_stats(&mut self) -> io::Result<()> {
        Capture::refresh_kernel_stats(self)
    }
    fn growing_until(&self) -> Option<Instant> {
        Capture::growing_until(self)
    }
    fn take_error(&self) -> Option<io::Error> {
        Capture::take_error(self)
    }
    fn fanout_group(&self) -> Option<u16> {
        Capture::fanout_group(self)
    }
}

/// How often the thread reads the kernel's counters and publishes them when it has nothing
/// else to publish; also the longest it sleeps, so a stop is seen within it.
pub const STATS_EVERY: Duration = Duration::from_millis(100);

/// Ring blocks copied into one batch at most.
const BLOCKS_PER_BATCH: usize = 2;

/// Spare batch buffers kept for reuse.
const SPARES: usize = 8;
/// Largest batch buffer kept as a spare: a batch grows to the largest two blocks it ever held
/// (megabytes under a burst), and eight such spares stayed resident after it.
const SPARE_BYTES: usize = 256 * 1024;

/// How the capture thread holds what the engine has not taken yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedConfig {
    /// The most bytes of copied packets held at once.
    pub max_bytes: usize,
}

/// Packets copied out of the ring: their bytes back to back, and where each ends.
#[derive(Debug, Default)]
struct Batch {
    data: Vec<u8>,
    ends: Vec<usize>,
}

impl Batch {
    fn clear(&mut self) {
        self.data.clear();
        self.ends.clear();
    }

    fn packets(&self) -> impl Iterator<Item = &[u8]> {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let p = &self.data[start..end];
            start = end;
            p
        })
    }
}

#[derive(Debug, Default)]
struct Queue {
    batches: VecDeque<Batch>,
    bytes: usize,
    spare: Vec<Batch>,
}

#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    stats: Mutex<CaptureStats>,
    /// Made readable by the thread when it queues a batch into an empty queue; read empty by
    /// the engine when its poll says it is readable ([`Feed::woken`]).
    wake: EventFd,
    stop: AtomicBool,
    max_bytes: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic on the other side leaves plain data behind; use it.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A capture ring read by a thread of its own; the engine's side.
#[derive(Debug)]
pub struct Feed {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    fanout: Option<u16>,
}

impl Feed {
    /// Start the thread that reads `capture`. The thread is created from the calling thread,
    /// so it is in the same network namespace (a ring that grows opens new sockets there).
    pub fn start(capture: impl Ring, cfg: FeedConfig) -> io::Result<Feed> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            stats: Mutex::new(capture.stats()),
            wake: EventFd::new()?,
            stop: AtomicBool::new(false),
            max_bytes: cfg.max_bytes,
        });
        let fanout = capture.fanout_group();
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("capture".into())
            .spawn(move || read_ring(capture, &theirs))?;
        Ok(Feed {
            shared,
            thread: Some(thread),
            fanout,
        })
    }

    /// The descriptor to poll: readable when batches have come since the last [`Feed::drain`].
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.shared.wake.fd()
    }

    /// The caller's poll said [`Feed::fd`] is readable: make it not readable. Call it before
    /// the next [`Feed::has_ready`] and [`Feed::drain`]: a batch queued after this read finds the
    /// queue empty or is taken by that drain, and one queued into an empty queue makes the
    /// descriptor readable again, so no batch waits for a poll that does not wake.
    pub fn woken(&self) {
        self.shared.wake.drain();
    }

    /// Is a batch waiting?
    pub fn has_ready(&self) -> bool {
        !lock(&self.shared.queue).batches.is_empty()
    }

    /// Hand the packets of up to `max_batches` batches, in capture order, to `f`. Returns the
    /// number of batches taken.
    pub fn drain(&mut self, max_batches: usize, mut f: impl FnMut(&[u8])) -> usize {
        let mut done = 0;
        while done < max_batches {
            let Some(batch) = ({
                let mut q = lock(&self.shared.queue);
                let b = q.batches.pop_front();
                if let Some(b) = &b {
                    q.bytes -= b.data.len();
                }
                b
            }) else {
                break;
            };
            for p in batch.packets() {
                f(p);
            }
            let mut q = lock(&self.shared.queue);
            if q.spare.len() < SPARES && batch.data.capacity() <= SPARE_BYTES {
                q.spare.push(batch);
            }
            done += 1;
        }
        done
    }

    /// The capture counters as the thread last published them.
    pub fn stats(&self) -> CaptureStats {
        *lock(&self.shared.stats)
    }

    /// The thread reads the kernel's counters itself (every [`STATS_EVERY`]); nothing to do.
    pub fn refresh_kernel_stats(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// The id of the workers' fanout group this ring belongs to, if any.
    pub fn fanout_group(&self) -> Option<u16> {
        self.fanout
    }

    /// Bytes of copied packets waiting for the engine.
    pub fn queued_bytes(&self) -> usize {
        lock(&self.shared.queue).bytes
    }

    /// The most bytes the queue holds ([`FeedConfig::max_bytes`]).
    pub fn max_bytes(&self) -> usize {
        self.shared.max_bytes
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The thread: copy every ready block while the queue has room, publish counters, wait on the
/// ring.
fn read_ring(mut capture: impl Ring, shared: &Shared) {
    let mut next_stats = Instant::now() + STATS_EVERY;
    let mut last_error_log: Option<Instant> = None;
    let mut batch = Batch::default();
    while !shared.stop.load(Ordering::Acquire) {
        let room = lock(&shared.queue).bytes < shared.max_bytes;
        if room && capture.ready() {
            batch.clear();
            capture.drain(BLOCKS_PER_BATCH, &mut |p| {
                batch.data.extend_from_slice(p);
                batch.ends.push(batch.data.len());
            });
            if !batch.ends.is_empty() {
                let mut q = lock(&shared.queue);
                let was_empty = q.batches.is_empty();
                let fresh = q.spare.pop().unwrap_or_default();
                q.bytes += batch.data.len();
                q.batches.push_back(std::mem::replace(&mut batch, fresh));
                drop(q);
                if was_empty {
                    shared.wake.notify();
                }
                *lock(&shared.stats) = capture.stats();
            }
            continue;
        }
        let now = Instant::now();
        if now >= next_stats {
            next_stats = now + STATS_EVERY;
            if let Err(e) = capture.refresh_kernel_stats() {
                tracing::debug!("PACKET_STATISTICS: {e}");
            }
            *lock(&shared.stats) = capture.stats();
        }
        if !room {
            // The engine is behind: look again soon; the ring holds meanwhile (and grows).
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let mut until = next_stats;
        if let Some(t) = capture.growing_until() {
            until = until.min(t.max(now + Duration::from_micros(200)));
        }
        let polled = sys::poll_readable(&[capture.fd()], until.saturating_duration_since(now));
        if matches!(polled, Ok(ready) if ready & 1 != 0) {
            capture.readable();
        }
        match polled {
            Ok(ready)
                if ready & 1 != 0 && !capture.ready() && capture.growing_until().is_none() =>
            {
                // POLLERR without data: read the error, or poll would return at once forever.
                if let Some(e) = capture.take_error() {
                    if last_error_log.is_none_or(|t| now >= t + Duration::from_secs(1)) {
                        last_error_log = Some(now);
                        tracing::warn!(
                            "capture socket: {e} (interface down? capture resumes when it is up)"
                        );
                    }
                }
            }
            Ok(_) => {}
            Err(e) => {
                if last_error_log.is_none_or(|t| now >= t + Duration::from_secs(1)) {
                    last_error_log = Some(now);
                    tracing::warn!("capture thread: poll: {e}");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    let _ = capture.final_kernel_stats();
    *lock(&shared.stats) = capture.stats();
}
