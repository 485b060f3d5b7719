//! Captured client bytes, stored once and shared by every copy of a session (`--copies N`),
//! and the meter that counts them.
//!
//! A captured payload becomes one reference-counted buffer the first time a copy keeps any of
//! it ([`Payload::keep`]); the other copies of the session take [`Chunk`]s (views) of the same
//! buffer. A [`ByteQueue`] is one stream's in-order bytes as a FIFO of chunks. The engine's
//! [`Meter`] counts a buffer's bytes from the moment they are copied in until its last chunk
//! goes (the engine is single-threaded, so the chunk dropped while `Arc::strong_count` is 1 is
//! the last), so the meter is what the engine really holds, however many copies share it. The
//! bookkeeping is counted too ([`BUF_OVERHEAD`] per buffer, [`SLOT_OVERHEAD`] per chunk), so
//! that a client sending tiny segments cannot hold far more memory than the meter says. One
//! allocation per captured payload kept, whatever the number of copies.
//!
//! Invariants: a [`ByteQueue`]'s `len` is the bytes of its chunks minus the `head` bytes already
//! consumed from the first one, and no chunk in it is empty; the meter's value is, for every
//! buffer still referred to, its length plus [`BUF_OVERHEAD`], plus [`SLOT_OVERHEAD`] for every
//! chunk alive.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes a buffer costs beyond its payload (allocation header and rounding), as counted.
pub(crate) const BUF_OVERHEAD: usize = 32;
/// Bytes a chunk costs (the view itself and its slot in a queue or a held segment), as counted.
pub(crate) const SLOT_OVERHEAD: usize = 64;

/// Bytes held in chunk buffers, for one engine. Cloning shares the count.
#[derive(Debug, Clone, Default)]
pub(crate) struct Meter(Arc<AtomicUsize>);

impl Meter {
    /// Bytes of every live chunk buffer, with the bookkeeping.
    pub(crate) fn bytes(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// A view of part of a shared buffer; the buffer is uncounted when its last chunk drops.
#[derive(Debug)]
pub(crate) struct Chunk {
    buf: Arc<[u8]>,
    meter: Meter,
    start: usize,
    end: usize,
}

impl Clone for Chunk {
    fn clone(&self) -> Chunk {
        self.meter.0.fetch_add(SLOT_OVERHEAD, Ordering::Relaxed);
        Chunk {
            buf: self.buf.clone(),
            meter: self.meter.clone(),
            start: self.start,
            end: self.end,
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        let mut n = SLOT_OVERHEAD;
        if Arc::strong_count(&self.buf) == 1 {
            n += self.buf.len() + BUF_OVERHEAD;
        }
        self.meter.0.fetch_sub(n, Ordering::Relaxed);
    }
}

impl Chunk {
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }

    /// The view without its first `skip` bytes (`None` if nothing is left).
    pub(crate) fn tail(&self, skip: usize) -> Option<Chunk> {
        (skip < self.len()).then(|| {
            let mut c = self.clone();
            c.start += skip;
            c
        })
    }

    /// The view of bytes `[from, to)` of this one (`None` if empty).
    pub(crate) fn slice(&self, from: usize, to: usize) -> Option<Chunk> {
        let to = to.min(self.len());
        (from < to).then(|| {
            let mut c = self.clone();
            c.start += from;
            c.end = c.start + (to - from);
            c
        })
    }

    /// [`Chunk::tail`], consuming the view.
    fn into_tail(mut self, skip: usize) -> Option<Chunk> {
        (skip < self.len()).then(|| {
            self.start += skip;
            self
        })
    }
}

/// A captured payload on its way to the copies of its session: copied into a shared [`Chunk`]
/// the first time one of them keeps it, so a duplicate that no copy keeps costs no allocation.
#[derive(Debug)]
pub(crate) struct Payload<'a> {
    bytes: &'a [u8],
    chunk: Option<Chunk>,
    meter: &'a Meter,
    /// The copy being served is the last one: what it keeps need not stay cached.
    last: bool,
}

impl<'a> Payload<'a> {
    pub(crate) fn new(bytes: &'a [u8], meter: &'a Meter) -> Payload<'a> {
        Payload {
            bytes,
            chunk: None,
            meter,
            last: false,
        }
    }

    /// Tell whether the copy served next is the last one to see this payload (it then takes
    /// the cached chunk rather than a new reference to it).
    pub(crate) fn set_last(&mut self, last: bool) {
        self.last = last;
    }

    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The payload from byte `skip` on, as a shared chunk (`None` if nothing is left).
    pub(crate) fn keep(&mut self, skip: usize) -> Option<Chunk> {
        if skip >= self.bytes.len() {
            return None;
        }
        let whole = match self.chunk.take() {
            Some(c) => c,
            None => {
                let n = self.bytes.len();
                self.meter
                    .0
                    .fetch_add(n + BUF_OVERHEAD + SLOT_OVERHEAD, Ordering::Relaxed);
                Chunk {
                    buf: self.bytes.into(),
                    meter: self.meter.clone(),
                    start: 0,
                    end: n,
                }
            }
        };
        if self.last {
            return whole.into_tail(skip);
        }
        let part = whole.tail(skip);
        self.chunk = Some(whole);
        part
    }
}

/// One stream's in-order bytes: a FIFO of shared chunks.
#[derive(Debug, Default)]
pub(crate) struct ByteQueue {
    /// Each chunk with the queue position of its first byte (bytes pushed before it).
    chunks: VecDeque<(u64, Chunk)>,
    /// Bytes consumed from the first chunk.
    head: usize,
    len: usize,
    /// Bytes pushed so far.
    pushed: u64,
}

impl ByteQueue {
    pub(crate) const fn new() -> ByteQueue {
        ByteQueue {
            chunks: VecDeque::new(),
            head: 0,
            len: 0,
            pushed: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn push(&mut self, c: Chunk) {
        let n = c.len();
        if n == 0 {
            return;
        }
        if self.chunks.capacity() == 0 {
            // Room for one chunk only: an idle keep-alive session holds its last request, one
            // chunk, and a deque grown by doubling would give it four places (144 bytes more).
            self.chunks.reserve_exact(1);
        }
        self.chunks.push_back((self.pushed, c));
        self.pushed += n as u64;
        self.len += n;
    }

    /// Drop the first `n` bytes (all of them if fewer).
    pub(crate) fn consume(&mut self, n: usize) {
        let mut n = n.min(self.len);
        self.len -= n;
        while n > 0 {
            let Some((_, c)) = self.chunks.front() else {
                break;
            };
            let rest = c.len() - self.head;
            if n < rest {
                self.head += n;
                return;
            }
            n -= rest;
            self.head = 0;
            self.chunks.pop_front();
        }
        if self.chunks.is_empty() {
            // An idle session holds no allocation for its bytes (see "Engine memory per live
            // session" in BENCHMARKS.md): the next request allocates the deque again.
            self.chunks = VecDeque::new();
        }
    }

    pub(crate) fn free(&mut self) {
        self.chunks = VecDeque::new();
        self.head = 0;
        self.len = 0;
    }

    /// Up to `max` bytes from `off` bytes after the head: one slice of the chunk holding `off`
    /// when that chunk has them all (or is the last), else gathered into `scratch`. `None` when
    /// `off` is at or beyond the end.
    pub(crate) fn get<'s>(
        &'s self,
        off: usize,
        max: usize,
        scratch: &'s mut Vec<u8>,
    ) -> Option<&'s [u8]> {
        if off >= self.len || max == 0 {
            return None;
        }
        let first = self.chunks.front()?.0 + self.head as u64;
        let at = first + off as u64;
        // The last chunk starting at or before `at`: mostly the last one (new data) or the
        // first (a retransmission), else a binary search.
        let n = self.chunks.len();
        let i = if self.chunks[n - 1].0 <= at {
            n - 1
        } else if n < 2 || self.chunks[1].0 > at {
            0
        } else {
            self.chunks.partition_point(|(p, _)| *p <= at) - 1
        };
        let (p, c) = &self.chunks[i];
        let s = &c.as_slice()[(at - p) as usize..];
        let want = max.min(self.len - off);
        if s.len() >= want {
            return Some(&s[..want]);
        }
        scratch.clear();
        scratch.extend_from_slice(s);
        for (_, c) in self.chunks.range(i + 1..) {
            let need = want - scratch.len();
            if need == 0 {
                break;
            }
            let b = c.as_slice();
            scratch.extend_from_slice(&b[..need.min(b.len())]);
        }
        Some(&scratch[..])
    }

    /// Every byte in order (tests and the fuzz hook of `h2edit`).
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        let mut skip = self.head;
        for (_, c) in &self.chunks {
            v.extend_from_slice(&c.as_slice()[skip..]);
            skip = 0;
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_bytes_are_counted_once_and_freed_with_the_last_reference() {
        let meter = Meter::default();
        let (mut a, mut b) = (ByteQueue::new(), ByteQueue::new());
        {
            let mut p = Payload::new(b"hello world", &meter);
            assert_eq!(meter.bytes(), 0, "nothing kept yet");
            a.push(p.keep(0).unwrap());
            p.set_last(true);
            b.push(p.keep(6).unwrap());
            assert!(p.keep(11).is_none());
        }
        assert_eq!(
            meter.bytes(),
            11 + BUF_OVERHEAD + 2 * SLOT_OVERHEAD,
            "one buffer for both copies"
        );
        assert_eq!(
            (a.to_vec(), b.to_vec()),
            (b"hello world".to_vec(), b"world".to_vec())
        );
        a.free();
        assert_eq!(meter.bytes(), 11 + BUF_OVERHEAD + SLOT_OVERHEAD);
        b.consume(4);
        assert_eq!(
            (b.len(), meter.bytes()),
            (1, 11 + BUF_OVERHEAD + SLOT_OVERHEAD),
            "a chunk lives until wholly consumed"
        );
        b.consume(1);
        assert_eq!((b.len(), meter.bytes()), (0, 0));
        // A payload nobody keeps costs nothing.
        let mut p = Payload::new(b"dup", &meter);
        assert_eq!(p.len(), 3);
        drop(p.keep(3));
        assert_eq!(meter.bytes(), 0);
    }

    #[test]
    fn get_returns_one_slice_or_gathers_across_chunks() {
        let meter = Meter::default();
        let mut q = ByteQueue::new();
        for part in [&b"abc"[..], b"defgh", b"i", b"jklmnop"] {
            q.push(Payload::new(part, &meter).keep(0).unwrap());
        }
        let mut scratch = Vec::new();
        assert_eq!(q.get(0, 3, &mut scratch), Some(&b"abc"[..]));
        assert_eq!(q.get(1, 2, &mut scratch), Some(&b"bc"[..]));
        assert_eq!(q.get(1, 6, &mut scratch), Some(&b"bcdefg"[..]));
        assert_eq!(q.get(4, 100, &mut scratch), Some(&b"efghijklmnop"[..]));
        assert_eq!(q.get(9, 100, &mut scratch), Some(&b"jklmnop"[..]));
        assert_eq!(q.get(16, 1, &mut scratch), None);
        q.consume(4);
        assert_eq!(q.get(0, 2, &mut scratch), Some(&b"ef"[..]));
        assert_eq!(q.get(3, 3, &mut scratch), Some(&b"hij"[..]));
        q.consume(5);
        assert_eq!(
            (q.len(), q.get(0, 50, &mut scratch)),
            (7, Some(&b"jklmnop"[..]))
        );
        assert_eq!(q.to_vec(), b"jklmnop");
        q.consume(100);
        assert_eq!((q.len(), q.get(0, 1, &mut scratch)), (0, None));
    }
}
