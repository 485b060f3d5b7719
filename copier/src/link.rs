//! The read side of the intercept links, done by the engine thread itself (one worker).
//!
//! With one engine worker (the default), a control client ([`crate::control::run_client`]),
//! once its link is up (connected, handshaken, the registry's snapshot sent), hands the engine
//! thread the link's read side: a duplicate of the socket's file descriptor (non-blocking) and
//! the frame decoder with everything it already knows (the session key and the number of the
//! next frame, bytes read but not yet decoded, the frame limit). The engine adds the descriptor
//! to the set it sleeps on (`crate::run`), reads it until it would block each time it is
//! readable (or the engine is busy, see [`EngineLink::pump`]) and handles the records (each
//! stamped with the instant of the read that completed it) and registration verdicts in the
//! same turn. So a record of the intercept costs no wake-up of the main thread and no hop
//! through an inbox: the copier's threads used to trade two context switches per record that
//! could not wait (`crate::workers::Wake`), tens of microseconds each on a VM.
//!
//! The tokio side keeps the write side (registrations, pings) on a descriptor registered for
//! writability only ([`FdWriter`]), so incoming bytes do not wake the runtime either, and
//! watches the link: [`LinkShared`] says when the engine last heard from the intercept (any
//! whole message, a Pong included: the silence check) and, when the engine finds the link
//! dead (end of stream, a read error, a frame that fails its tag, is too large or does not
//! decode, an Error or unexpected message), why; the engine then drops its descriptor and
//! wakes the client task ([`tokio::sync::Notify`]), which ends the link exactly as a read
//! error used to (metrics, log, `connected`, back-off and reconnect). When the tokio side ends
//! first (a write that stalls, the silence check, the copier stopping), it marks the link dead,
//! shuts the socket down and pokes the engine's eventfd, and the engine drops its descriptor at
//! its next turn.
//!
//! With several workers the records must be routed to the worker that owns each session, so
//! the clients keep reading them and deliver them through [`crate::workers::RecordRouter`].
//!
//! Also owns what both sides of a link say of it: why a link ended ([`LinkError`]) and the log
//! line of an intercept's firewall rules ([`log_rules`]).
//!
//! Invariants: a link's descriptor is read by one thread only (the engine), and the decoder
//! never holds more than one frame limit plus one read's worth of bytes; an [`EngineLink`]
//! that is dropped, for whatever reason (the engine thread ending, a panic), marks its link
//! dead and wakes its client, so no link outlives its reader unnoticed.

use std::io::{self, Read};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use common::proto::{FrameDecoder, Message, ProtoError};
use tokio::io::unix::AsyncFd;
use tokio::io::AsyncWrite;
use tokio::sync::Notify;

use crate::workers::Inbound;

/// Most intercept links one engine reads itself (with more, the control clients read them and
/// deliver through the inbox, as with several workers): the engine's poll set holds at most 32
/// descriptors.
pub const MAX_DIRECT_LINKS: usize = 16;

/// Bytes read from a link per `read` call (the engine's buffer).
pub const READ_CHUNK: usize = 64 * 1024;

/// Reads of one link per turn of the engine before it turns to its other inputs (then the
/// link counts as still readable, and the next turn goes on).
pub const READS_PER_TURN: usize = 16;

/// What the engine and a link's client share about the link.
#[derive(Debug)]
pub struct LinkShared {
    dead: AtomicBool,
    why: Mutex<Option<LinkError>>,
    wake: Notify,
    base: Instant,
    /// Nanoseconds from `base` to the last whole message read.
    heard: AtomicU64,
    /// The intercept's clock against ours (from the Pongs), for the records' stamps.
    pub clock: crate::clock::ClockSync,
}

impl LinkShared {
    /// A live link, heard from now.
    pub fn new() -> LinkShared {
        LinkShared {
            dead: AtomicBool::new(false),
            why: Mutex::new(None),
            wake: Notify::new(),
            base: Instant::now(),
            heard: AtomicU64::new(0),
            clock: crate::clock::ClockSync::default(),
        }
    }

    /// Whether either side ended the link.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// End the link (`why`: the first reason given is kept) and wake its client.
    pub fn end(&self, why: Option<LinkError>) {
        if let Some(w) = why {
            let mut g = self.why.lock().unwrap_or_else(|p| p.into_inner());
            if g.is_none() {
                *g = Some(w);
            }
        }
        self.dead.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// Why the link ended (once).
    pub fn take_why(&self) -> Option<LinkError> {
        self.why.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Note a whole message read at `at`.
    pub fn heard(&self, at: Instant) {
        let ns =
            u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX);
        self.heard.fetch_max(ns, Ordering::Relaxed);
    }

    /// When the last whole message was read (the hand-off, if none was).
    pub fn last_heard(&self) -> Instant {
        self.base + Duration::from_nanos(self.heard.load(Ordering::Relaxed))
    }

    /// Client side: wait until the link is dead or silent for `silence`, and say why. When the
    /// engine thread let go of the link because it ended (the copier stops), this waits forever:
    /// the client goes on writing (the engine's last Unregisters) until it is told to stop.
    pub async fn watch(&self, silence: Duration) -> LinkError {
        loop {
            if self.is_dead() {
                return match self.take_why() {
                    Some(LinkError::EngineGone) => std::future::pending().await,
                    why => why.unwrap_or(LinkError::Closed),
                };
            }
            let due = self.last_heard() + silence;
            if Instant::now() >= due {
                self.end(Some(LinkError::Silent(silence)));
                continue;
            }
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep_until(due.into()) => {}
            }
        }
    }
}

impl Default for LinkShared {
    fn default() -> Self {
        LinkShared::new()
    }
}

/// The read side of one intercept link, owned by the engine thread.
#[derive(Debug)]
pub struct EngineLink {
    sock: std::net::TcpStream,
    decoder: FrameDecoder,
    /// The link's `--intercept` index (names its verdicts to the engine).
    id: u16,
    /// Its generation (`crate::control::LinkGens`).
    gen: u32,
    shared: Arc<LinkShared>,
    records: ::metrics::Counter,
    /// Whether the next turn reads it (poll said so, or the engine did not poll since).
    pub ready: bool,
}

impl EngineLink {
    /// The read side of a link: `sock` a non-blocking duplicate of its socket, `decoder` what
    /// its frame reader knew (see [`common::proto::io::FrameReader::into_parts`]), `records`
    /// its `copier_control_records_total` counter.
    pub fn new(
        sock: std::net::TcpStream,
        decoder: FrameDecoder,
        id: u16,
        shared: Arc<LinkShared>,
        records: ::metrics::Counter,
    ) -> EngineLink {
        EngineLink {
            sock,
            decoder,
            id,
            gen: 0,
            shared,
            records,
            ready: true,
        }
    }

    /// The link's generation (`crate::control::LinkGens`; 0 by default).
    #[must_use]
    pub fn with_gen(mut self, gen: u32) -> EngineLink {
        self.gen = gen;
        self
    }

    /// Which intercept and which of its links this is.
    pub fn link(&self) -> (u16, u32) {
        (self.id, self.gen)
    }

    /// The descriptor, for `poll`.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.sock.as_fd()
    }

    /// Whether the client ended the link.
    pub fn is_dead(&self) -> bool {
        self.shared.is_dead()
    }

    /// Read what the link holds, at most [`READS_PER_TURN`] reads of `buf`, and hand each
    /// Records and Registered message to `f` (records stamped with the instant of the read that
    /// completed them). `Ok(true)`: more may be waiting; `Ok(false)`: the socket would block, or
    /// a read came back short (it took all the socket held).
    /// An error ends the link: give it to [`fail`](Self::fail).
    pub fn pump(&mut self, buf: &mut [u8], mut f: impl FnMut(Inbound)) -> Result<bool, LinkError> {
        for _ in 0..READS_PER_TURN {
            let n = match (&self.sock).read(buf) {
                Ok(0) => {
                    return Err(if self.decoder.buffered() == 0 {
                        LinkError::Closed
                    } else {
                        ProtoError::Closed(" in the middle of a frame").into()
                    })
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ProtoError::Io(e).into()),
            };
            let at = Instant::now();
            self.decoder.push(&buf[..n]);
            while let Some(m) = self.decoder.next()? {
                self.shared.heard(at);
                match m {
                    Message::Records { mut records } => {
                        if !records.is_empty() {
                            self.shared.clock.translate(&mut records);
                            self.records.increment(records.len() as u64);
                            f(Inbound::Records { at, records });
                        }
                    }
                    Message::Registered { results } => {
                        if !results.is_empty() {
                            f(Inbound::Verdicts {
                                from: self.id,
                                results,
                            });
                        }
                    }
                    Message::Pong { token, clock } => self.shared.clock.on_pong_now(token, clock),
                    Message::Rules { in_force } => {
                        log_rules(self.id, in_force);
                        f(Inbound::Link {
                            from: self.id,
                            gen: self.gen,
                            event: crate::engine::LinkEvent::Rules(in_force),
                        });
                    }
                    Message::Error { code, message } => {
                        return Err(ProtoError::Remote { code, message }.into())
                    }
                    other => return Err(LinkError::Unexpected(other.name())),
                }
            }
            if n < buf.len() {
                // A short read emptied the socket: another read now would only say it would
                // block (a system call per turn). What comes after it makes the socket readable
                // again, as after that answer, so nothing waits longer for this.
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// End the link for `why`: the client learns it, and the descriptor is closed.
    pub fn fail(self, why: LinkError) {
        self.shared.end(Some(why));
    }
}

impl Drop for EngineLink {
    fn drop(&mut self) {
        // However the engine lets go of a link, its client learns (after `fail`, of the failure;
        // otherwise the engine thread ended, and the client keeps writing until it stops).
        self.shared.end(Some(LinkError::EngineGone));
    }
}

/// Where the control clients hand their links' read sides to the one engine.
#[derive(Debug, Default)]
pub struct LinkDesk {
    new: Mutex<Vec<EngineLink>>,
    pending: AtomicBool,
}

impl LinkDesk {
    /// An empty desk.
    pub fn new() -> LinkDesk {
        LinkDesk::default()
    }

    /// Client side: hand a link to the engine (wake it afterwards).
    pub fn hand(&self, link: EngineLink) {
        self.new
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(link);
        self.pending.store(true, Ordering::SeqCst);
    }

    /// Engine side: take the links handed since the last call.
    pub fn take(&self, into: &mut Vec<EngineLink>) {
        if self.pending.swap(false, Ordering::SeqCst) {
            into.append(&mut self.new.lock().unwrap_or_else(|p| p.into_inner()));
        }
    }
}

/// A socket written by tokio while another thread reads it: registered with the runtime for
/// writability only, so bytes arriving do not wake the runtime's thread.
#[derive(Debug)]
pub struct FdWriter(AsyncFd<std::net::TcpStream>);

impl FdWriter {
    /// Register `sock` (non-blocking) for writability.
    pub fn new(sock: std::net::TcpStream) -> io::Result<FdWriter> {
        sock.set_nonblocking(true)?;
        Ok(FdWriter(crate::sys::register_writable(sock)?))
    }
}

impl AsyncWrite for FdWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        use std::io::Write;
        loop {
            let mut guard = ready!(self.0.poll_write_ready(cx))?;
            match guard.try_io(|s| s.get_ref().write(buf)) {
                Ok(r) => return Poll::Ready(r),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.0.get_ref().shutdown(std::net::Shutdown::Write))
    }
}

/// Why a link ended.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// TCP connect failed.
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    /// TCP connect did not finish in time.
    #[error("connect timed out after {0:?}")]
    ConnectTimeout(Duration),
    /// Handshake or framing failed, or the peer sent an Error.
    #[error("{0}")]
    Proto(#[from] ProtoError),
    /// The peer was silent too long.
    #[error("no message (not even a Pong) for {0:?}")]
    Silent(Duration),
    /// A write did not finish in time: the peer does not read.
    #[error("a write did not finish within {0:?}: the peer does not read")]
    WriteStalled(Duration),
    /// The peer closed the connection.
    #[error("closed by the peer")]
    Closed,
    /// The peer sent a message a copier never expects.
    #[error("unexpected {0} message")]
    Unexpected(&'static str),
    /// The engine thread is gone (shutting down).
    #[error("engine stopped")]
    EngineGone,
}

/// Log what an intercept said of its firewall rules (`Message::Rules`).
pub fn log_rules(id: u16, in_force: bool) {
    if in_force {
        tracing::info!(
            "intercept #{id}: its firewall rules are back in force; its sessions send again"
        );
    } else {
        tracing::error!(
            "intercept #{id}: its firewall rules are MISSING (flushed or reloaded): nothing is sent on its sessions \
             until they are back (copier_intercept_rules_lost_total)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::proto::auth::FrameKey;
    use common::proto::io::FrameWriter;
    use common::proto::{Record, RegVerdict, Role};
    use std::io::Write;

    fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        a.set_nonblocking(true).unwrap();
        (a, b)
    }

    fn key() -> FrameKey {
        common::proto::auth::session_keys(b"a secret of some length", &[1; 32], &[2; 32])
            .intercept_to_copier
    }

    fn tuple(c: u16) -> common::flow::FourTuple {
        common::flow::FourTuple::new(
            format!("198.18.0.1:{c}").parse().unwrap(),
            "198.18.1.2:80".parse().unwrap(),
        )
    }

    /// Sealed frames of `msgs`, from frame `counter` on.
    fn sealed(msgs: &[Message], counter: &mut u64) -> Vec<u8> {
        let mut plain = Vec::new();
        msgs.iter().for_each(|m| m.encode(&mut plain));
        let mut out = Vec::new();
        common::proto::codec::seal_frames(&key(), counter, &plain, &mut out);
        out
    }

    fn link(sock: std::net::TcpStream, shared: &Arc<LinkShared>) -> EngineLink {
        let mut d = FrameDecoder::new();
        d.authenticate(key(), Role::Intercept);
        EngineLink::new(sock, d, 3, shared.clone(), ::metrics::Counter::noop())
    }

    fn rec(b: u8) -> Record {
        Record {
            orig_len: 40,
            headers: vec![0x45; 20].into_iter().chain([b; 20]).collect(),
            payload: Vec::new(),
            stamp: 0,
        }
    }

    /// Pump until `want` inbounds came (or the link fails).
    fn pump_until(l: &mut EngineLink, want: usize) -> Result<Vec<Inbound>, LinkError> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 7]; // small reads: frames arrive split
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < want && Instant::now() < deadline {
            if !l.pump(&mut buf, |i| got.push(i))? {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(got)
    }

    #[test]
    fn a_short_read_ends_the_pump_and_full_reads_go_on() {
        let (a, mut b) = pair();
        let shared = Arc::new(LinkShared::new());
        let mut l = link(a, &shared);
        let mut n = 0;
        let bytes = sealed(
            &[Message::Records {
                records: vec![rec(1)],
            }],
            &mut n,
        );
        b.write_all(&bytes).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        // A buffer larger than what came: one read takes it all, and the pump says the
        // socket is empty without reading again.
        let mut big = vec![0u8; 4096];
        let mut got = Vec::new();
        assert!(!l.pump(&mut big, |i| got.push(i)).unwrap());
        assert_eq!(got.len(), 1);
        // Reads that fill the buffer: more may wait, and every one of them is read.
        b.write_all(&sealed(
            &[Message::Records {
                records: vec![rec(2)],
            }],
            &mut n,
        ))
        .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut small = vec![0u8; 1];
        got.clear();
        assert!(l.pump(&mut small, |i| got.push(i)).unwrap(), "a full read");
        while l.pump(&mut small, |i| got.push(i)).unwrap() {}
        assert_eq!(got.len(), 1);
    }

    #[test]
    fn split_frames_decode_in_order_with_the_read_instant() {
        let (a, mut b) = pair();
        let shared = Arc::new(LinkShared::new());
        let mut l = link(a, &shared);
        let mut n = 0;
        let before = Instant::now();
        let bytes = sealed(
            &[
                Message::Pong { token: 1, clock: 0 },
                Message::Records {
                    records: vec![rec(1), rec(2)],
                },
                Message::Registered { results: vec![] },
                Message::Registered {
                    results: vec![(tuple(9), RegVerdict::Accepted)],
                },
            ],
            &mut n,
        );
        // In two writes, cut inside a frame.
        b.write_all(&bytes[..9]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        b.write_all(&bytes[9..]).unwrap();
        let got = pump_until(&mut l, 2).unwrap();
        let Inbound::Records { at, records } = &got[0] else {
            panic!("{got:?}")
        };
        assert_eq!(records, &vec![rec(1), rec(2)]);
        assert!(*at >= before && *at <= Instant::now());
        assert_eq!(
            got[1],
            Inbound::Verdicts {
                from: 3,
                results: vec![(tuple(9), RegVerdict::Accepted)]
            },
            "verdicts named by the link; empty ones dropped"
        );
        assert!(shared.last_heard() >= before, "a message counts as heard");
        assert!(!shared.is_dead());
        // Nothing more: would block.
        assert!(!l.pump(&mut [0u8; 64], |_| panic!()).unwrap());
        // End of stream: the link is over.
        drop(b);
        let e = pump_until(&mut l, 1).unwrap_err();
        assert!(matches!(e, LinkError::Closed), "{e}");
    }

    #[test]
    fn a_bad_tag_or_an_oversized_frame_ends_the_link_and_wakes_the_client() {
        // A frame tagged with the wrong number (a replay) fails.
        let (a, mut b) = pair();
        let shared = Arc::new(LinkShared::new());
        let mut l = link(a, &shared);
        let mut n = 1;
        b.write_all(&sealed(&[Message::Pong { token: 1, clock: 0 }], &mut n))
            .unwrap();
        let e = pump_until(&mut l, 1).unwrap_err();
        assert!(
            matches!(e, LinkError::Proto(ProtoError::BadTag { frame: 0, .. })),
            "{e}"
        );
        l.fail(e);
        assert!(shared.is_dead());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let why = rt.block_on(shared.watch(Duration::from_secs(60)));
        assert!(
            matches!(why, LinkError::Proto(ProtoError::BadTag { .. })),
            "the client ends with the engine's reason: {why}"
        );

        // A length over the limit fails before anything is buffered.
        let (a, mut b) = pair();
        let shared = Arc::new(LinkShared::new());
        let mut l = link(a, &shared);
        b.write_all(&(common::proto::MAX_FRAME as u32 + 100).to_be_bytes())
            .unwrap();
        b.write_all(&[0u8; 64]).unwrap();
        let e = pump_until(&mut l, 1).unwrap_err();
        assert!(
            matches!(e, LinkError::Proto(ProtoError::FrameTooLarge { .. })),
            "{e}"
        );
    }

    #[test]
    fn a_dropped_engine_link_ends_its_link_and_a_silent_one_is_noticed() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let (a, _b) = pair();
        let shared = Arc::new(LinkShared::new());
        let desk = LinkDesk::new();
        desk.hand(link(a, &shared));
        let mut taken = Vec::new();
        desk.take(&mut taken);
        assert_eq!(taken.len(), 1);
        desk.take(&mut taken);
        assert_eq!(taken.len(), 1, "taken once");
        drop(taken); // the engine thread ends
        assert!(shared.is_dead());
        let watched = rt.block_on(async {
            tokio::time::timeout(
                Duration::from_millis(50),
                shared.watch(Duration::from_millis(10)),
            )
            .await
        });
        assert!(
            watched.is_err(),
            "the client keeps writing the last Unregisters until it is stopped"
        );

        // Silence: nothing heard for the interval.
        let shared = Arc::new(LinkShared::new());
        let t0 = Instant::now();
        let why = rt.block_on(shared.watch(Duration::from_millis(50)));
        assert!(matches!(why, LinkError::Silent(_)), "{why}");
        assert!(t0.elapsed() >= Duration::from_millis(50));
        assert!(
            shared.is_dead(),
            "the engine drops a link its client gave up"
        );
    }

    #[test]
    fn the_writer_moves_to_a_write_only_registration_with_its_frame_count() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (a, b) = pair();
        b.set_nonblocking(true).unwrap();
        let mut reader = link(b, &Arc::new(LinkShared::new()));
        let _w = rt.block_on(async {
            let w = FdWriter::new(a).unwrap();
            let mut w = FrameWriter::from_parts(w, Some((key(), 0)));
            w.write_message(&Message::Records {
                records: vec![rec(5)],
            })
            .await
            .unwrap();
            w.write_message(&Message::Records {
                records: vec![rec(6)],
            })
            .await
            .unwrap();
            w
        });
        let got = pump_until(&mut reader, 2).unwrap();
        assert_eq!(
            got.len(),
            2,
            "both frames verify, numbered on from the parts"
        );
    }
}
