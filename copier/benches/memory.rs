//! Engine memory at 10,000 live sessions: each session established (handshake, registration,
//! the test server's SYN-ACK) and carrying keep-alive traffic (ten requests of 100 bytes, each
//! answered with 200 bytes online and on test), then idle between requests. Prints the heap the engine holds (a
//! counting allocator; the bench's own packet templates subtracted), per session, the process's
//! RSS growth, and what the engine's own accounting (`memory_used`, the figure `--max-memory`
//! caps) says, and the inline sizes of a session's parts.
//!
//! `cargo bench -p copier --bench memory`

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use support::Bench;

/// The system allocator, counting the bytes live at any time.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static BLOCKS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; only a counter is added.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size(), Ordering::Relaxed);
        BLOCKS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as the caller promised for `l`.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        BLOCKS.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new, Ordering::Relaxed);
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: as the caller promised.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    const SESSIONS: u32 = 10_000;
    let (heap0, blocks0, rss0) = (
        LIVE.load(Ordering::Relaxed),
        BLOCKS.load(Ordering::Relaxed),
        rss_kib(),
    );
    let mut b = Bench::new(SESSIONS, 100);
    let mut sent = 0;
    for r in 0..10 {
        for i in 0..SESSIONS as usize {
            sent += b.exchange(i, r, 100, 200);
        }
    }
    // Every request went out (the answers' acknowledgements may wait: `--ack-delay`).
    assert!(sent >= 10 * SESSIONS as usize, "sent {sent}");
    let heap = LIVE.load(Ordering::Relaxed) - heap0 - b.template_bytes();
    let rss = rss_kib().saturating_sub(rss0);
    // The templates: one data packet and one record (two vectors) per session.
    let blocks = BLOCKS.load(Ordering::Relaxed) - blocks0 - 3 * SESSIONS as usize;
    let s = b.e.stats();
    assert_eq!(s.sessions_active, u64::from(SESSIONS));
    println!(
        "engine at {SESSIONS} live sessions: heap {:.1} MiB ({} bytes/session, templates excluded; {:.1} allocations/session), \
         process RSS +{:.1} MiB (templates included), memory_used {:.1} MiB (of it buffered client bytes {:.1} MiB)",
        heap as f64 / f64::from(1 << 20),
        heap / SESSIONS as usize,
        blocks as f64 / f64::from(SESSIONS),
        rss as f64 / 1024.0,
        b.e.memory_used() as f64 / f64::from(1 << 20),
        b.e.buffered_bytes() as f64 / f64::from(1 << 20),
    );
    // What `--max-memory` counts covers what the sessions really take.
    assert!(
        b.e.memory_used() >= heap,
        "memory_used {} below the heap {heap}",
        b.e.memory_used()
    );
    let parts: Vec<String> = copier::engine::Engine::layout()
        .iter()
        .map(|(n, b)| format!("{n} {b}"))
        .collect();
    println!("inline bytes: {}", parts.join(", "));
}
