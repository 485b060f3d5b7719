//! The copier's side of the control protocol: one client per `--intercept`, kept connected.
//!
//! Owns:
//! - [`Registry`]: the set of sessions currently registered, shared by the engine thread (which
//!   changes it) and the clients (which tell their intercepts). A change and its broadcast happen
//!   under one lock, and a client takes its snapshot and subscribes under the same lock, so every
//!   client sees each change exactly once after its snapshot.
//! - [`run_client`]: connect (TCP_NODELAY, 5 s timeout), handshake with the shared secret, send
//!   the whole registry (so a restarted intercept learns every live session again; only the
//!   tuples of the test servers it guards, [`ClientConfig::serves`], see `crate::routing`), then forward
//!   registry changes and pings while reading records and registration verdicts
//!   (`Registered`: a connection's packets leave only once an intercept accepted its tuple).
//!   With one worker the engine thread reads them itself ([`serve_direct`], `crate::link`):
//!   the client hands it the socket's read side and keeps writing and the silence check.
//!   With several, both go to the engine threads through
//!   a [`RecordRouter`] (to the worker that owns each session) and bounded channels, records
//!   stamped with the instant their frame was read (their time for the engine, which may take
//!   them up to `--record-wait` later: `workers::Wake` decides); when one is
//!   full the client stops reading, which pushes back over TCP to the intercept (whose queue then
//!   sheds the oldest records and counts them). With several workers, each applies its own
//!   changes to the one registry (their tuples are disjoint), so a reconnected intercept still
//!   learns every live session of every worker. A lost link is
//!   retried with exponential back-off (100 ms doubling to 5 s, with jitter; to 1 s while
//!   sessions are registered) for as long as the copier runs.
//! - Link generations ([`LinkGens`]): every link that comes up is the next generation of its
//!   intercept, and the engines learn of each link's start and end in order with its verdicts
//!   (`crate::engine::LinkEvent`): an acceptance counts only on the link that gave it, so
//!   after a reconnection (a restarted intercept knows no registration) a session sends
//!   nothing until the new link accepted it again. After its snapshot the client says
//!   `Synced` to an intercept with `FEATURE_RESTART` (it may end the intercept's restart
//!   grace), and that intercept's `Rules` messages (its firewall rules missing or back) go
//!   to the engines too.
//!
//! Invariants: `connected` counts the links that finished their handshake and sent their
//! snapshot; it is decremented when a link ends, whatever the reason (a guard). No lock is held
//! across an `.await`. Nothing here grows without bound: the broadcast channel has a fixed
//! capacity, and a client that falls behind resynchronises from the registry by difference.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::flow::FourTuple;
use common::proto::io::{client_handshake_as, Established, FrameReader, FrameWriter, Identity};
use common::proto::{Message, ProtoError};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, watch};

use crate::engine::LinkEvent;
use crate::link::{log_rules, EngineLink, FdWriter, LinkDesk, LinkError, LinkShared};
use crate::routing::InterceptAddr;
use crate::workers::RecordRouter;

/// The longest back-off between attempts while sessions are registered (they send nothing
/// until a link is up again).
pub const RETRY_WITH_SESSIONS: Duration = Duration::from_secs(1);
/// Most tuples put in one Register/Unregister message.
const TUPLES_PER_MESSAGE: usize = 8192;
/// Capacity of the registration broadcast; a client further behind resynchronises (by
/// difference against a copy of the registry: a burst of more changes than this between two
/// writes of a link costs that copy). Its slots are allocated and written when the registry is
/// made, about 100 bytes each: 16,384 of them were 1.6 MiB of the idle copier's RSS.
const BROADCAST_CAPACITY: usize = 4096;

/// A change of the registry: the engine's event, applied as it comes.
pub use crate::engine::RegEvent;

#[derive(Debug)]
struct RegistryInner {
    set: HashSet<FourTuple>,
    tx: broadcast::Sender<RegEvent>,
}

/// The sessions registered with the intercepts (see the module doc).
#[derive(Debug)]
pub struct Registry {
    inner: Mutex<RegistryInner>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        let (tx, _) = broadcast::channel(BROADCAST_CAPACITY);
        Registry {
            inner: Mutex::new(RegistryInner {
                set: HashSet::new(),
                tx,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RegistryInner> {
        // A panic while holding this lock leaves a consistent set (single insert/remove).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Apply changes in order; repeated registrations and unknown unregistrations are ignored.
    pub fn apply(&self, events: &[RegEvent]) {
        let mut g = self.lock();
        for &ev in events {
            let changed = match ev {
                RegEvent::Register(t) => g.set.insert(t),
                RegEvent::Unregister(t) => g.set.remove(&t),
            };
            if changed {
                // No receiver (no intercept connected) is fine: the snapshot covers it later.
                let _ = g.tx.send(ev);
            }
        }
        shrink_if_sparse(&mut g.set);
    }

    /// Changes not yet seen by every client that was subscribed when they were made (to let
    /// the clients pass the last changes on before the copier exits).
    pub fn unsent(&self) -> usize {
        self.lock().tx.len()
    }

    /// Unregister everything (after the engine was rebuilt).
    pub fn clear(&self) {
        let all: Vec<RegEvent> = self
            .lock()
            .set
            .iter()
            .map(|&t| RegEvent::Unregister(t))
            .collect();
        self.apply(&all);
    }

    /// Sessions registered now.
    pub fn len(&self) -> usize {
        self.lock().set.len()
    }

    /// Whether no session is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The current set and a receiver of every change after it.
    pub fn subscribe(&self) -> (HashSet<FourTuple>, broadcast::Receiver<RegEvent>) {
        let g = self.lock();
        (g.set.clone(), g.tx.subscribe())
    }
}

/// Give back a set's room once it holds under a quarter of it (after a peak of sessions), so
/// that the memory comes down with them; amortised O(1) per removal.
fn shrink_if_sparse(set: &mut HashSet<FourTuple>) {
    if set.capacity() > 1024 && set.len() * 4 < set.capacity() {
        set.shrink_to_fit();
    }
}

/// Which sessions ask their intercept for the payload of their answers (`--compare`): the
/// ones `--compare-sample` picks, by the same hash of the client's address and port that the
/// comparison's tap samples records by ([`crate::shadow::sampled_client`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PayloadAsk {
    /// The fraction of sessions compared (0 to 1).
    pub sample: f64,
}

impl PayloadAsk {
    /// Payload bytes asked per answer packet: all the intercept keeps (`--payload-bytes` caps
    /// it there).
    pub const BYTES: u32 = u32::MAX;

    /// Whether `t`'s answers are compared, so their payload is asked for.
    #[must_use]
    pub fn wants(&self, t: &FourTuple) -> bool {
        crate::shadow::sampled_client(t.client.ip(), t.client.port(), self.sample)
    }
}

/// Turn a run of changes into messages, keeping their order; with `ask`, the registrations of
/// the sessions it picks go in RegisterPayload messages (after the plain Register of the same
/// run: registrations of different tuples do not depend on each other's order).
pub fn messages_for(events: &[RegEvent], ask: Option<&PayloadAsk>, out: &mut Vec<Message>) {
    let mut i = 0;
    while i < events.len() {
        let reg = matches!(events[i], RegEvent::Register(_));
        let mut tuples = Vec::new();
        let mut asked = Vec::new();
        while i < events.len() && tuples.len() + asked.len() < TUPLES_PER_MESSAGE {
            match events[i] {
                RegEvent::Register(t) if reg => match ask {
                    Some(a) if a.wants(&t) => asked.push((t, PayloadAsk::BYTES)),
                    _ => tuples.push(t),
                },
                RegEvent::Unregister(t) if !reg => tuples.push(t),
                _ => break,
            }
            i += 1;
        }
        if !reg {
            out.push(Message::Unregister { tuples });
            continue;
        }
        if !tuples.is_empty() {
            out.push(Message::Register { tuples });
        }
        if !asked.is_empty() {
            out.push(Message::RegisterPayload { tuples: asked });
        }
    }
}

/// The link generations of every intercept: each link that comes up takes the next number of
/// its intercept (`--intercept` index), from 1.
#[derive(Debug, Default)]
pub struct LinkGens(Mutex<Vec<(u16, u32)>>);

impl LinkGens {
    /// No link came up yet.
    pub fn new() -> LinkGens {
        LinkGens::default()
    }

    /// The generation of intercept `id`'s new link.
    pub fn next(&self, id: u16) -> u32 {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match g.iter_mut().find(|(i, _)| *i == id) {
            Some((_, n)) => {
                *n = n.wrapping_add(1);
                *n
            }
            None => {
                g.push((id, 1));
                1
            }
        }
    }
}

/// What the clients share with the engine thread.
#[derive(Clone, Debug)]
pub struct Links {
    /// The registered sessions.
    pub registry: Arc<Registry>,
    /// Records toward the engine threads (bounded); also wakes them when `connected` changes.
    pub records: RecordRouter,
    /// Links that are up.
    pub connected: Arc<AtomicUsize>,
    /// With one engine worker: where each link's read side goes, for the engine thread to read
    /// itself (`crate::link`); `None`: the clients read and deliver through `records`.
    pub desk: Option<Arc<LinkDesk>>,
    /// How long the intercepts may hold records that nothing waits on, as the engines say
    /// (`Message::RecordWait`, to an intercept with `FEATURE_RECORD_WAIT`).
    pub hold: Arc<crate::workers::InterceptHold>,
    /// The generation of each intercept's links.
    pub gens: Arc<LinkGens>,
}

/// How one client behaves.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The intercept.
    pub addr: InterceptAddr,
    /// The shared secret; `None` with `--no-secret`.
    pub secret: Option<Arc<[u8]>>,
    /// Our software string for the Hello.
    pub software: String,
    /// Interval of Pings; a link silent for three intervals is dropped.
    pub ping_interval: Duration,
    /// Largest back-off between attempts.
    pub backoff_max: Duration,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Seed of the back-off jitter.
    pub seed: u64,
    /// Which intercept this is (its `--intercept` index): names the link's verdicts to the
    /// engines (`Engine::handle_registered`).
    pub id: u16,
    /// The test server addresses whose registrations this intercept gets (`None`: every one);
    /// see `crate::routing`.
    pub serves: Option<Arc<[std::net::IpAddr]>>,
    /// Which sessions ask for their answers' payload (`--compare`); `None`: none do.
    pub payload: Option<PayloadAsk>,
    /// Who this copier is in its Hello: [`instance`] (the same on every link and reconnection
    /// of this process) and its `--fleet` share.
    pub identity: Identity,
}

/// This copier process's instance (random, never 0, drawn once): an intercept lets a
/// connection of the same instance take a tuple over (a reconnection) and refuses one of
/// another instance (`RegVerdict::HeldByOther`).
#[must_use]
pub fn instance() -> u64 {
    static INSTANCE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *INSTANCE.get_or_init(|| rand::random::<u64>().max(1))
}

impl ClientConfig {
    /// Defaults for `addr`.
    pub fn new(addr: InterceptAddr, secret: Option<Arc<[u8]>>, seed: u64) -> ClientConfig {
        ClientConfig {
            addr,
            secret,
            software: format!("copier {}", env!("CARGO_PKG_VERSION")),
            ping_interval: Duration::from_secs(5),
            backoff_max: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            seed,
            id: 0,
            serves: None,
            payload: None,
            identity: Identity {
                instance: instance(),
                fleet_index: 0,
                fleet_size: 1,
            },
        }
    }

    /// Whether this intercept guards `t`'s test server (gets its registration).
    #[must_use]
    pub fn guards(&self, t: &FourTuple) -> bool {
        self.serves
            .as_ref()
            .is_none_or(|l| l.contains(&t.server.ip()))
    }
}

/// Decrements `connected` when a link ends, however it ends.
struct UpGuard<'a>(&'a Links);

impl Drop for UpGuard<'_> {
    fn drop(&mut self) {
        self.0.connected.fetch_sub(1, Ordering::SeqCst);
        self.0.records.wake_all();
    }
}

/// Keep a link to one intercept until `shutdown` turns true.
pub async fn run_client(cfg: ClientConfig, links: Links, mut shutdown: watch::Receiver<bool>) {
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let mut backoff = Duration::from_millis(100);
    let mut last_err: Option<String> = None;
    let name = cfg.addr.to_string();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let attempt = async {
            let stream = connect(&cfg).await?;
            let est = client_handshake_as(
                stream,
                cfg.secret.as_deref(),
                &cfg.software,
                common::proto::HANDSHAKE_TIMEOUT,
                cfg.identity,
            )
            .await?;
            Ok::<_, LinkError>(est)
        };
        let result = tokio::select! {
            r = attempt => r,
            _ = shutdown.changed() => return,
        };
        match result {
            Ok(est) => {
                backoff = Duration::from_millis(100);
                last_err = None;
                let served = async {
                    match &links.desk {
                        Some(desk) => serve_direct(&cfg, &links, desk, est).await,
                        None => serve(&cfg, &links, est).await,
                    }
                };
                let outcome = tokio::select! {
                    r = served => r,
                    _ = shutdown.changed() => return,
                };
                ::metrics::counter!(crate::metrics::names::CONTROL_LOSSES_TOTAL, "intercept" => name.clone())
                    .increment(1);
                let up = links.connected.load(Ordering::SeqCst);
                let err = outcome
                    .err()
                    .map_or_else(|| "closed".to_string(), |e| e.to_string());
                if up == 0 {
                    tracing::warn!(
                        "intercept {name} lost: {err}; reconnecting. No intercept is connected: new sessions \
                         are not copied until one is (counted in copier_sessions_not_copied_total)"
                    );
                } else {
                    tracing::warn!("intercept {name} lost: {err}; reconnecting ({up} other intercept link(s) up)");
                }
            }
            Err(e) => {
                let msg = e.to_string();
                let refused = matches!(&e, LinkError::Proto(p) if !matches!(p, ProtoError::Io(_) | ProtoError::Closed(_) | ProtoError::Timeout(_)));
                if last_err.as_deref() != Some(msg.as_str()) {
                    if refused {
                        tracing::error!(
                            "control link to {name}: handshake refused: {msg}; retrying every {:?}",
                            cfg.backoff_max
                        );
                    } else {
                        tracing::warn!(
                            "control link to {name}: {msg}; retrying with back-off up to {:?}",
                            cfg.backoff_max
                        );
                    }
                } else {
                    tracing::debug!("control link to {name}: {msg}");
                }
                last_err = Some(msg);
            }
        }
        // Sessions registered: their copies wait for the link, so retry at least every second.
        let cap = if links.registry.is_empty() {
            cfg.backoff_max
        } else {
            cfg.backoff_max.min(RETRY_WITH_SESSIONS)
        };
        let jitter = rng.random_range(0.8..1.2);
        let wait = backoff.min(cap).mul_f64(jitter);
        backoff = (backoff * 2).min(cap);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => return,
        }
    }
}

async fn connect(cfg: &ClientConfig) -> Result<TcpStream, LinkError> {
    let fut = TcpStream::connect((cfg.addr.host.as_str(), cfg.addr.port));
    let stream = tokio::time::timeout(cfg.connect_timeout, fut)
        .await
        .map_err(|_| LinkError::ConnectTimeout(cfg.connect_timeout))?
        .map_err(LinkError::Connect)?;
    // Registrations are small and urgent: they race the test server's SYN-ACK.
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Run one established link until it fails: send the registry, then forward changes and pings
/// while reading records. Public for tests over in-memory streams.
pub async fn serve<S>(
    cfg: &ClientConfig,
    links: &Links,
    est: Established<S>,
) -> Result<(), LinkError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Established {
        mut reader,
        mut writer,
        peer,
    } = est;
    let ask = payload_ask(cfg, &peer);
    let gen = links.gens.next(cfg.id);
    let (snapshot, rx) = send_snapshot(cfg, links, ask.as_ref(), &peer, &mut writer).await?;
    links
        .records
        .deliver_link(cfg.id, gen, LinkEvent::Up)
        .await
        .map_err(|_| LinkError::EngineGone)?;
    links.connected.fetch_add(1, Ordering::SeqCst);
    let _up = UpGuard(links);
    links.records.wake_all();
    log_connected(cfg, &peer, snapshot.len());

    let r = tokio::select! {
        r = read_loop(cfg, links, gen, &mut reader) => r,
        r = write_loop(cfg, ask, hold_watch(links, &peer), links, &mut writer, snapshot, rx, peer.has(common::proto::FEATURE_STAMPS)) => r,
    };
    let _ = links
        .records
        .deliver_link(cfg.id, gen, LinkEvent::Down)
        .await;
    r
}

/// Send the registry's tuples this link guards (then `Synced`, to an intercept with
/// `FEATURE_RESTART`); returns them and the receiver of every later change.
async fn send_snapshot<W: AsyncWrite + Unpin>(
    cfg: &ClientConfig,
    links: &Links,
    ask: Option<&PayloadAsk>,
    peer: &common::proto::Hello,
    writer: &mut FrameWriter<W>,
) -> Result<(HashSet<FourTuple>, broadcast::Receiver<RegEvent>), LinkError> {
    let (mut snapshot, rx) = links.registry.subscribe();
    snapshot.retain(|t| cfg.guards(t));
    let mut msgs = Vec::new();
    if peer.has(common::proto::FEATURE_STAMPS) {
        // The first offset of the intercept's clock before its first stamped record: a Ping
        // now (its token is our clock, `crate::clock`), not a whole ping interval later.
        msgs.push(Message::Ping {
            token: crate::clock::wall_ns(),
        });
    }
    let events: Vec<RegEvent> = snapshot.iter().map(|&t| RegEvent::Register(t)).collect();
    messages_for(&events, ask, &mut msgs);
    if peer.has(common::proto::FEATURE_RESTART) {
        msgs.push(Message::Synced);
    }
    for chunk in msgs.chunks(4) {
        write(writer, chunk, cfg.ping_interval * 3).await?;
    }
    Ok((snapshot, rx))
}

fn log_connected(cfg: &ClientConfig, peer: &common::proto::Hello, sessions: usize) {
    ::metrics::counter!(crate::metrics::names::CONTROL_CONNECTS_TOTAL, "intercept" => cfg.addr.to_string())
        .increment(1);
    tracing::info!(
        "connected to intercept {} ({}); {} live session(s) registered",
        cfg.addr,
        peer.software,
        sessions
    );
}

/// Marks a link the engine reads dead when its client ends it, however it ends, and shuts its
/// socket down (the engine's duplicate descriptor would keep it open until its next turn).
struct DeadGuard<'a> {
    shared: Arc<LinkShared>,
    sock: std::net::TcpStream,
    links: &'a Links,
}

impl Drop for DeadGuard<'_> {
    fn drop(&mut self) {
        self.shared.end(None);
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        self.links.records.wake_all();
    }
}

/// [`serve`] with one engine worker: the engine thread reads the link (`crate::link`). The
/// socket leaves tokio's reactor for a registration for writability only, so the intercept's
/// frames wake the engine and nothing else; this task writes the registrations and pings and
/// ends the link when the engine finds it dead or it is silent too long. Public for tests.
pub async fn serve_direct(
    cfg: &ClientConfig,
    links: &Links,
    desk: &LinkDesk,
    est: Established<TcpStream>,
) -> Result<(), LinkError> {
    let Established {
        reader,
        writer,
        peer,
    } = est;
    let (read_half, decoder) = reader.into_parts();
    let (write_half, sealer) = writer.into_parts();
    let io = |e: std::io::Error| LinkError::Proto(ProtoError::Io(e));
    // Deregisters the socket from the reactor (it stays non-blocking).
    let sock = read_half.unsplit(write_half).into_std().map_err(io)?;
    let engine_sock = sock.try_clone().map_err(io)?;
    let closer = sock.try_clone().map_err(io)?;
    let mut writer = FrameWriter::from_parts(FdWriter::new(sock).map_err(io)?, sealer);
    let ask = payload_ask(cfg, &peer);
    let gen = links.gens.next(cfg.id);
    let (snapshot, rx) = send_snapshot(cfg, links, ask.as_ref(), &peer, &mut writer).await?;

    let shared = Arc::new(LinkShared::new());
    let counter = ::metrics::counter!(crate::metrics::names::CONTROL_RECORDS_TOTAL, "intercept" => cfg.addr.to_string());
    desk.hand(EngineLink::new(engine_sock, decoder, cfg.id, shared.clone(), counter).with_gen(gen));
    links.connected.fetch_add(1, Ordering::SeqCst);
    let _up = UpGuard(links);
    // Dropped before `_up`: the engine, woken by `_up`, finds the link dead.
    let _dead = DeadGuard {
        shared: shared.clone(),
        sock: closer,
        links,
    };
    links.records.wake_all();
    log_connected(cfg, &peer, snapshot.len());

    tokio::select! {
        e = shared.watch(cfg.ping_interval * 3) => Err(e),
        r = write_loop(cfg, ask, hold_watch(links, &peer), links, &mut writer, snapshot, rx, peer.has(common::proto::FEATURE_STAMPS)) => r,
    }
}

/// How this link asks for payload: per session with an intercept that understands
/// RegisterPayload; not at all with an older one, which sends its `--payload-bytes` on every
/// session by itself (said once per connection, since `--compare-sample` then saves no control
/// bytes).
fn payload_ask(cfg: &ClientConfig, peer: &common::proto::Hello) -> Option<PayloadAsk> {
    let ask = cfg.payload?;
    if peer.has(common::proto::FEATURE_PAYLOAD_REQUEST) {
        return Some(ask);
    }
    tracing::warn!(
        "intercept {} ({}) predates per-session payload requests: it sends answer payload on every \
         session if it runs with --payload-bytes, so --compare-sample does not cut the control bytes",
        cfg.addr,
        peer.software
    );
    None
}

/// The record hold this link follows: `None` with an intercept that predates
/// `Message::RecordWait` (it sends every record at once).
fn hold_watch(links: &Links, peer: &common::proto::Hello) -> Option<watch::Receiver<u32>> {
    peer.has(common::proto::FEATURE_RECORD_WAIT)
        .then(|| links.hold.watch())
}

/// The next record hold to tell the intercept; never ready for a link without one.
async fn hold_changed(hold: &mut Option<watch::Receiver<u32>>) -> u32 {
    if let Some(rx) = hold {
        if rx.changed().await.is_ok() {
            return *rx.borrow_and_update();
        }
    }
    // No hold to follow (or the engines are gone): nothing more to tell.
    std::future::pending().await
}

async fn write<W: AsyncWrite + Unpin>(
    writer: &mut FrameWriter<W>,
    msgs: &[Message],
    limit: Duration,
) -> Result<(), LinkError> {
    tokio::time::timeout(limit, writer.write_messages(msgs))
        .await
        .map_err(|_| LinkError::WriteStalled(limit))??;
    Ok(())
}

async fn read_loop<S: AsyncRead + Unpin>(
    cfg: &ClientConfig,
    links: &Links,
    gen: u32,
    reader: &mut FrameReader<ReadHalf<S>>,
) -> Result<(), LinkError> {
    let silence = cfg.ping_interval * 3;
    let clock = crate::clock::ClockSync::default();
    let counter = ::metrics::counter!(crate::metrics::names::CONTROL_RECORDS_TOTAL, "intercept" => cfg.addr.to_string());
    loop {
        let msg = tokio::time::timeout(silence, reader.read_message())
            .await
            .map_err(|_| LinkError::Silent(silence))??;
        match msg {
            None => return Err(LinkError::Closed),
            Some(Message::Records { mut records }) => {
                if records.is_empty() {
                    continue;
                }
                clock.translate(&mut records);
                // The records' time for the engine, which may take them a little later.
                let at = std::time::Instant::now();
                counter.increment(records.len() as u64);
                // Waits while an engine's inbox is full: backpressure toward the intercept.
                links
                    .records
                    .deliver(at, records)
                    .await
                    .map_err(|_| LinkError::EngineGone)?;
            }
            Some(Message::Pong {
                token,
                clock: theirs,
            }) => clock.on_pong_now(token, theirs),
            Some(Message::Rules { in_force }) => {
                log_rules(cfg.id, in_force);
                links
                    .records
                    .deliver_link(cfg.id, gen, LinkEvent::Rules(in_force))
                    .await
                    .map_err(|_| LinkError::EngineGone)?;
            }
            Some(Message::Registered { results }) => {
                if results.is_empty() {
                    continue;
                }
                links
                    .records
                    .deliver_verdicts(cfg.id, results)
                    .await
                    .map_err(|_| LinkError::EngineGone)?;
            }
            Some(Message::Error { code, message }) => {
                return Err(ProtoError::Remote { code, message }.into())
            }
            Some(other) => return Err(LinkError::Unexpected(other.name())),
        }
    }
}

/// Pings sent at the start of a link to an intercept with `FEATURE_STAMPS`, for the clock offset.
const CLOCK_PINGS: u32 = 8;
/// Their spacing.
const CLOCK_PING_INTERVAL: Duration = Duration::from_millis(50);

#[allow(clippy::too_many_arguments)]
async fn write_loop<W: AsyncWrite + Unpin>(
    cfg: &ClientConfig,
    ask: Option<PayloadAsk>,
    mut hold: Option<watch::Receiver<u32>>,
    links: &Links,
    writer: &mut FrameWriter<W>,
    mut sent: HashSet<FourTuple>,
    mut rx: broadcast::Receiver<RegEvent>,
    stamps: bool,
) -> Result<(), LinkError> {
    let limit = cfg.ping_interval * 3;
    let mut ping = tokio::time::interval(cfg.ping_interval);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await; // the first tick is immediate
    let mut token = 0u64;
    // With an intercept that stamps its records: a few more Pings at the start, so that the
    // clock offset comes from a round trip that no busy moment stretched (`crate::clock`:
    // the smallest of them wins; the ping interval's Pings refresh it afterwards).
    let mut clock_pings = if stamps { CLOCK_PINGS } else { 0 };
    let mut clock_tick = tokio::time::interval(CLOCK_PING_INTERVAL);
    clock_tick.tick().await;
    let mut events = Vec::new();
    let mut msgs = Vec::new();
    // A connection starts with no hold: say ours if we have one.
    if let Some(rx) = hold.as_mut() {
        let micros = *rx.borrow_and_update();
        if micros > 0 {
            write(writer, &[Message::RecordWait { micros }], limit).await?;
        }
    }
    loop {
        events.clear();
        msgs.clear();
        let mut lagged = false;
        tokio::select! {
            r = rx.recv() => match r {
                Ok(ev) => {
                    events.push(ev);
                    loop {
                        match rx.try_recv() {
                            Ok(ev) => events.push(ev),
                            Err(broadcast::error::TryRecvError::Lagged(_)) => { lagged = true; break }
                            Err(_) => break,
                        }
                        if events.len() >= 4 * TUPLES_PER_MESSAGE {
                            break;
                        }
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => lagged = true,
                Err(broadcast::error::RecvError::Closed) => return Err(LinkError::EngineGone),
            },
            _ = clock_tick.tick(), if clock_pings > 0 => {
                clock_pings -= 1;
                token = crate::clock::wall_ns().max(token.wrapping_add(1));
                write(writer, &[Message::Ping { token }], limit).await?;
                continue;
            }
            _ = ping.tick() => {
                // Our clock at sending: the Pong's round trip and, from an intercept with
                // FEATURE_STAMPS, the offset of its clock (`crate::clock`).
                token = crate::clock::wall_ns().max(token.wrapping_add(1));
                write(writer, &[Message::Ping { token }], limit).await?;
                continue;
            }
            micros = hold_changed(&mut hold) => {
                write(writer, &[Message::RecordWait { micros }], limit).await?;
                continue;
            }
        }
        events.retain(|ev| match ev {
            RegEvent::Register(t) | RegEvent::Unregister(t) => cfg.guards(t),
        });
        for ev in &events {
            match *ev {
                RegEvent::Register(t) => sent.insert(t),
                RegEvent::Unregister(t) => sent.remove(&t),
            };
        }
        shrink_if_sparse(&mut sent);
        if lagged {
            // We missed changes: take a fresh snapshot and send the difference.
            let (mut now_set, new_rx) = links.registry.subscribe();
            now_set.retain(|t| cfg.guards(t));
            rx = new_rx;
            tracing::debug!(
                "control link to {}: fell behind on registrations; resynchronising",
                cfg.addr
            );
            for t in sent.difference(&now_set) {
                events.push(RegEvent::Unregister(*t));
            }
            for t in now_set.difference(&sent) {
                events.push(RegEvent::Register(*t));
            }
            sent = now_set;
        }
        messages_for(&events, ask.as_ref(), &mut msgs);
        for chunk in msgs.chunks(4) {
            write(writer, chunk, limit).await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::{Inbound, Inbox, Routes, Wake};
    use common::proto::{Record, RegVerdict};
    use tokio::sync::mpsc;

    fn t(c: u16) -> FourTuple {
        FourTuple::new(
            format!("198.18.0.1:{c}").parse().unwrap(),
            "198.18.1.2:80".parse().unwrap(),
        )
    }

    #[test]
    fn messages_keep_order_and_group_runs() {
        let evs = [
            RegEvent::Register(t(1)),
            RegEvent::Register(t(2)),
            RegEvent::Unregister(t(1)),
            RegEvent::Register(t(3)),
        ];
        let mut out = Vec::new();
        messages_for(&evs, None, &mut out);
        assert_eq!(
            out,
            vec![
                Message::Register {
                    tuples: vec![t(1), t(2)]
                },
                Message::Unregister { tuples: vec![t(1)] },
                Message::Register { tuples: vec![t(3)] },
            ]
        );
        let many: Vec<RegEvent> = (0..TUPLES_PER_MESSAGE as u16 + 5)
            .map(|i| RegEvent::Register(t(i)))
            .collect();
        out.clear();
        messages_for(&many, None, &mut out);
        assert_eq!(out.len(), 2);
    }

    fn links() -> (Links, mpsc::Receiver<Inbound>) {
        let (tx, rx) = mpsc::channel(4);
        let links = Links {
            registry: Arc::new(Registry::new()),
            records: RecordRouter::new(
                vec![Inbox {
                    records: tx,
                    wake: Arc::new(Wake::new().unwrap()),
                }],
                Arc::new(Routes::new()),
            ),
            connected: Arc::new(AtomicUsize::new(0)),
            desk: None,
            hold: Arc::new(crate::workers::InterceptHold::new(Duration::ZERO)),
            gens: Arc::new(LinkGens::new()),
        };
        (links, rx)
    }

    /// Read the next Register/Unregister, answering Pings on the way.
    async fn next_reg<S: AsyncRead + AsyncWrite + Unpin>(est: &mut Established<S>) -> Message {
        loop {
            match est
                .reader
                .read_message()
                .await
                .unwrap()
                .expect("client closed")
            {
                Message::Ping { token } => est
                    .writer
                    .write_message(&Message::Pong { token, clock: 0 })
                    .await
                    .unwrap(),
                // After the snapshot (the link test checks where).
                Message::Synced => {}
                m @ (Message::Register { .. }
                | Message::Unregister { .. }
                | Message::RegisterPayload { .. }
                | Message::RecordWait { .. }) => return m,
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn link_registers_everything_forwards_changes_and_records() {
        use common::proto::io::{client_handshake, server_handshake};
        let (links, mut records) = links();
        links
            .registry
            .apply(&[RegEvent::Register(t(1)), RegEvent::Register(t(2))]);
        let mut cfg = ClientConfig::new(
            "fake:1".parse().unwrap(),
            Some(Arc::from(&b"s3cret"[..])),
            1,
        );
        cfg.ping_interval = Duration::from_millis(100);
        cfg.id = 7;
        let (a, b) = tokio::io::duplex(64 * 1024);
        let client = async {
            let est = client_handshake(a, Some(b"s3cret"), "copier test")
                .await
                .unwrap();
            serve(&cfg, &links, est).await
        };
        let fake = async {
            let mut est = server_handshake(b, Some(b"s3cret"), "fake intercept")
                .await
                .unwrap();
            let Message::Register { mut tuples } = next_reg(&mut est).await else {
                panic!("snapshot first")
            };
            tuples.sort();
            assert_eq!(
                tuples,
                vec![t(1), t(2)],
                "a (re)connected intercept learns every live session"
            );
            assert_eq!(
                est.reader.read_message().await.unwrap(),
                Some(Message::Synced),
                "then it is told the snapshot is complete (FEATURE_RESTART)"
            );
            for _ in 0..100 {
                if links.connected.load(Ordering::SeqCst) == 1 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert_eq!(links.connected.load(Ordering::SeqCst), 1);

            links
                .registry
                .apply(&[RegEvent::Register(t(3)), RegEvent::Unregister(t(1))]);
            assert_eq!(
                next_reg(&mut est).await,
                Message::Register { tuples: vec![t(3)] }
            );
            assert_eq!(
                next_reg(&mut est).await,
                Message::Unregister { tuples: vec![t(1)] }
            );

            let rec = Record {
                orig_len: 40,
                headers: vec![0x45; 40],
                payload: Vec::new(),
                stamp: 0,
            };
            est.writer
                .write_message(&Message::Records {
                    records: vec![rec.clone(), rec.clone()],
                })
                .await
                .unwrap();
            let sent_at = std::time::Instant::now();
            // The engines learned first that this link (generation 1 of intercept 7) is up.
            assert_eq!(
                records.recv().await.unwrap(),
                Inbound::Link {
                    from: 7,
                    gen: 1,
                    event: LinkEvent::Up
                }
            );
            let Inbound::Records { at, records: got } = records.recv().await.unwrap() else {
                panic!("records expected")
            };
            assert_eq!(got, vec![rec.clone(), rec]);
            assert!(
                at >= sent_at && at <= std::time::Instant::now(),
                "stamped when read"
            );

            // The intercept's verdicts reach the engine, named by the link's id.
            let results = vec![
                (t(3), RegVerdict::Accepted),
                (t(2), RegVerdict::PortNotGuarded),
            ];
            est.writer
                .write_message(&Message::Registered {
                    results: results.clone(),
                })
                .await
                .unwrap();
            assert_eq!(
                records.recv().await.unwrap(),
                Inbound::Verdicts { from: 7, results }
            );

            // Stay silent (no Pong) past three ping intervals: the client must give up on us.
            tokio::time::sleep(Duration::from_millis(600)).await;
            est
        };
        let (result, _est) = tokio::join!(client, fake);
        assert!(matches!(result, Err(LinkError::Silent(_))), "{result:?}");
        assert_eq!(
            links.connected.load(Ordering::SeqCst),
            0,
            "the link no longer counts as up"
        );
    }

    /// An intercept whose clock is 5 s ahead: the Pongs' clock gives the offset, and the stamps
    /// of its records reach the engine on the copier's clock; before the first Pong they are
    /// unknown (0).
    #[tokio::test]
    async fn record_stamps_reach_the_engine_on_the_copiers_clock() {
        use common::proto::io::{client_handshake, server_handshake};
        const AHEAD: u64 = 5_000_000_000;
        let (links, mut inbox) = links();
        let mut cfg = ClientConfig::new(
            "fake:1".parse().unwrap(),
            Some(Arc::from(&b"s3cret"[..])),
            1,
        );
        cfg.ping_interval = Duration::from_millis(200);
        let (a, b) = tokio::io::duplex(64 * 1024);
        let client = async {
            let est = client_handshake(a, Some(b"s3cret"), "copier test")
                .await
                .unwrap();
            serve(&cfg, &links, est).await
        };
        let fake = async {
            let mut est = server_handshake(b, Some(b"s3cret"), "fake intercept")
                .await
                .unwrap();
            let rec = |stamp| Record {
                orig_len: 40,
                headers: vec![0x45; 40],
                payload: Vec::new(),
                stamp,
            };
            let mut pongs = 0;
            let mut before = false;
            while pongs < 3 {
                match est.reader.read_message().await.unwrap().expect("open") {
                    Message::Ping { token } => {
                        if !before {
                            // the first Ping is not answered yet: a stamp now is unknown
                            let r = vec![rec(crate::clock::wall_ns() + AHEAD)];
                            est.writer
                                .write_message(&Message::Records { records: r })
                                .await
                                .unwrap();
                            before = true;
                        }
                        let clock = crate::clock::wall_ns() + AHEAD;
                        est.writer
                            .write_message(&Message::Pong { token, clock })
                            .await
                            .unwrap();
                        pongs += 1;
                    }
                    Message::Register { .. } | Message::Synced => {}
                    other => panic!("unexpected {other:?}"),
                }
            }
            // the client reads in order: its third Pong is in before these records
            let ours = crate::clock::wall_ns();
            let r = vec![rec(ours + AHEAD), rec(0)];
            est.writer
                .write_message(&Message::Records { records: r })
                .await
                .unwrap();
            let mut got = Vec::new();
            while got.len() < 3 {
                if let Inbound::Records { records, .. } = inbox.recv().await.unwrap() {
                    got.extend(records.into_iter().map(|r| r.stamp));
                }
            }
            assert_eq!(got[0], 0, "before the first Pong: unknown");
            assert!(
                got[1].abs_diff(ours) < 50_000_000,
                "{} vs {ours}: on our clock",
                got[1]
            );
            assert_eq!(got[2], 0, "an unstamped record stays so");
            est
        };
        tokio::select! {
            r = client => panic!("the client ended: {r:?}"),
            _ = fake => {}
        }
    }

    #[tokio::test]
    async fn with_one_worker_the_engine_reads_the_link_and_ends_it_with_its_reason() {
        use crate::link::LinkDesk;
        use common::proto::io::{client_handshake, server_handshake};
        let (mut links, mut inbox) = links();
        let desk = Arc::new(LinkDesk::new());
        links.desk = Some(desk.clone());
        links.registry.apply(&[RegEvent::Register(t(1))]);
        let mut cfg = ClientConfig::new(
            "fake:1".parse().unwrap(),
            Some(Arc::from(&b"s3cret"[..])),
            1,
        );
        cfg.id = 4;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = async {
            let stream = TcpStream::connect(addr).await.unwrap();
            let est = client_handshake(stream, Some(b"s3cret"), "copier test")
                .await
                .unwrap();
            serve_direct(&cfg, &links, &desk, est).await
        };
        let fake = async {
            let (stream, _) = listener.accept().await.unwrap();
            let mut est = server_handshake(stream, Some(b"s3cret"), "fake intercept")
                .await
                .unwrap();
            assert_eq!(
                next_reg(&mut est).await,
                Message::Register { tuples: vec![t(1)] }
            );
            // The engine's side: the link it was handed.
            let mut engine_links = Vec::new();
            while engine_links.is_empty() {
                desk.take(&mut engine_links);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            assert_eq!(links.connected.load(Ordering::SeqCst), 1);
            let rec = Record {
                orig_len: 40,
                headers: vec![0x45; 40],
                payload: Vec::new(),
                stamp: 0,
            };
            let results = vec![(t(1), RegVerdict::Accepted)];
            est.writer
                .write_message(&Message::Records {
                    records: vec![rec.clone()],
                })
                .await
                .unwrap();
            est.writer
                .write_message(&Message::Registered {
                    results: results.clone(),
                })
                .await
                .unwrap();
            let sent_at = std::time::Instant::now();
            let mut got = Vec::new();
            let mut buf = vec![0u8; 1024];
            while got.len() < 2 {
                engine_links[0].pump(&mut buf, |i| got.push(i)).unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let Inbound::Records { at, records } = &got[0] else {
                panic!("{got:?}")
            };
            assert_eq!(records, &vec![rec]);
            assert!(*at >= sent_at, "stamped when the engine read it");
            assert_eq!(got[1], Inbound::Verdicts { from: 4, results });
            assert!(inbox.try_recv().is_err(), "nothing went through the inbox");
            // Registrations still go out from the client.
            links.registry.apply(&[RegEvent::Register(t(2))]);
            assert_eq!(
                next_reg(&mut est).await,
                Message::Register { tuples: vec![t(2)] }
            );
            // A frame of an unknown type: the engine ends the link, the client ends with its reason.
            est.writer.write_frames(&[0, 0, 0, 1, 0xee]).await.unwrap();
            let e = loop {
                match engine_links[0].pump(&mut buf, |_| panic!("no message")) {
                    Err(e) => break e,
                    Ok(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                }
            };
            engine_links.pop().unwrap().fail(e);
            est
        };
        let (result, _est) = tokio::join!(client, fake);
        assert!(
            matches!(result, Err(LinkError::Proto(ProtoError::UnknownType(0xee)))),
            "{result:?}"
        );
        assert_eq!(
            links.connected.load(Ordering::SeqCst),
            0,
            "the link no longer counts as up"
        );
    }

    #[test]
    fn compared_sessions_ask_for_payload_the_others_do_not() {
        let evs: Vec<RegEvent> = (0..400).map(|i| RegEvent::Register(t(i))).collect();
        let ask = PayloadAsk { sample: 0.25 };
        let mut out = Vec::new();
        messages_for(&evs, Some(&ask), &mut out);
        let (mut plain, mut asked) = (Vec::new(), Vec::new());
        for m in out {
            match m {
                Message::Register { tuples } => plain.extend(tuples),
                Message::RegisterPayload { tuples } => asked.extend(tuples),
                other => panic!("{other:?}"),
            }
        }
        assert!(asked
            .iter()
            .all(|&(t, n)| ask.wants(&t) && n == PayloadAsk::BYTES));
        assert!(plain.iter().all(|t| !ask.wants(t)));
        assert_eq!(plain.len() + asked.len(), 400);
        assert!(
            (60..140).contains(&asked.len()),
            "about a quarter asks: {}",
            asked.len()
        );
        // The same rule as the comparison's tap.
        assert!(asked.iter().all(|(t, _)| crate::shadow::sampled_client(
            t.client.ip(),
            t.client.port(),
            0.25
        )));
        // Unregisters never carry a want.
        out = Vec::new();
        messages_for(
            &[RegEvent::Unregister(t(1))],
            Some(&PayloadAsk { sample: 1.0 }),
            &mut out,
        );
        assert_eq!(out, vec![Message::Unregister { tuples: vec![t(1)] }]);
    }

    /// The snapshot a link sends first, with `payload` asked, to a fake intercept announcing
    /// `features`.
    async fn first_registration(features: u32) -> Message {
        use common::proto::io::{client_handshake, handshake_with_features};
        use common::proto::Role;
        let (links, _records) = links();
        links.registry.apply(&[RegEvent::Register(t(1))]);
        let mut cfg = ClientConfig::new("fake:1".parse().unwrap(), None, 1);
        cfg.payload = Some(PayloadAsk { sample: 1.0 });
        let (a, b) = tokio::io::duplex(64 * 1024);
        let client = async {
            let est = client_handshake(a, None, "copier test").await.unwrap();
            let _ = serve(&cfg, &links, est).await;
        };
        let fake = async {
            let mut est = handshake_with_features(b, None, "intercept", Role::Intercept, features)
                .await
                .unwrap();
            next_reg(&mut est).await
        };
        tokio::select! {
            () = client => panic!("the link ended first"),
            m = fake => m,
        }
    }

    #[tokio::test]
    async fn payload_is_asked_per_session_only_of_an_intercept_that_understands_it() {
        assert_eq!(
            first_registration(common::proto::FEATURE_PAYLOAD_REQUEST).await,
            Message::RegisterPayload {
                tuples: vec![(t(1), PayloadAsk::BYTES)]
            }
        );
        // An older intercept would refuse the unknown message: it gets a plain Register (and
        // sends payload on every session by itself, if it runs with --payload-bytes).
        assert_eq!(
            first_registration(0).await,
            Message::Register { tuples: vec![t(1)] }
        );
    }

    /// What a fake intercept announcing `features` reads from a link whose record hold is 2 ms,
    /// while the engine turns eager and calm again and then a session registers.
    async fn holds_told(features: u32) -> Vec<Message> {
        use common::proto::io::{client_handshake, handshake_with_features};
        use common::proto::Role;
        let (mut links, _records) = links();
        links.hold = Arc::new(crate::workers::InterceptHold::new(Duration::from_millis(2)));
        let hold = links.hold.clone();
        let cfg = ClientConfig::new("fake:1".parse().unwrap(), None, 1);
        let (a, b) = tokio::io::duplex(64 * 1024);
        let client = async {
            let est = client_handshake(a, None, "copier test").await.unwrap();
            let _ = serve(&cfg, &links, est).await;
        };
        let fake = async {
            let mut est = handshake_with_features(b, None, "intercept", Role::Intercept, features)
                .await
                .unwrap();
            let mut got = Vec::new();
            if features & common::proto::FEATURE_RECORD_WAIT != 0 {
                got.push(next_reg(&mut est).await);
                hold.engine_eager(true);
                got.push(next_reg(&mut est).await);
                hold.engine_eager(false);
                got.push(next_reg(&mut est).await);
            } else {
                hold.engine_eager(true);
                hold.engine_eager(false);
            }
            links.registry.apply(&[RegEvent::Register(t(1))]);
            got.push(next_reg(&mut est).await);
            got
        };
        tokio::select! {
            () = client => panic!("the link ended first"),
            m = fake => m,
        }
    }

    #[tokio::test]
    async fn the_intercept_is_told_how_long_it_may_hold_records_if_it_understands() {
        let wait = |micros| Message::RecordWait { micros };
        let reg = Message::Register { tuples: vec![t(1)] };
        assert_eq!(
            holds_told(common::proto::FEATURES).await,
            vec![wait(2000), wait(0), wait(2000), reg.clone()]
        );
        // An older intercept would refuse the message: it is never sent one.
        assert_eq!(holds_told(0).await, vec![reg]);
    }

    #[tokio::test]
    async fn a_link_that_fell_behind_resynchronises_by_difference() {
        use common::proto::io::{client_handshake, server_handshake};
        let (links, _records) = links();
        let cfg = ClientConfig::new("fake:1".parse().unwrap(), None, 1);
        // A pipe much smaller than the changes: the client's writer blocks and its broadcast
        // receiver lags behind.
        let (a, b) = tokio::io::duplex(1024);
        let client = async {
            let est = client_handshake(a, None, "copier test").await.unwrap();
            serve(&cfg, &links, est).await
        };
        let fake = async {
            let mut est = server_handshake(b, None, "fake intercept").await.unwrap();
            // Subscribed (empty snapshot sent) before the flood, so the flood must come through
            // the broadcast, overflow it, and be recovered from the registry.
            while links.connected.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let n = 3 * BROADCAST_CAPACITY as u16;
            let regs: Vec<RegEvent> = (0..n).map(|i| RegEvent::Register(t(i))).collect();
            links.registry.apply(&regs);
            tokio::time::sleep(Duration::from_millis(50)).await;
            let unregs: Vec<RegEvent> = (0..n)
                .filter(|i| i % 2 == 0)
                .map(|i| RegEvent::Unregister(t(i)))
                .collect();
            links.registry.apply(&unregs);
            let want: HashSet<FourTuple> = (0..n).filter(|i| i % 2 == 1).map(t).collect();
            let mut have = HashSet::new();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            while have != want {
                let m = tokio::time::timeout_at(deadline, next_reg(&mut est))
                    .await
                    .expect("never converged");
                match m {
                    Message::Register { tuples } => have.extend(tuples),
                    Message::Unregister { tuples } => tuples.iter().for_each(|x| {
                        have.remove(x);
                    }),
                    _ => unreachable!(),
                }
            }
            drop(est);
        };
        let (result, ()) = tokio::join!(client, fake);
        assert!(result.is_err());
    }

    #[test]
    fn registry_snapshot_then_changes_exactly_once() {
        let r = Registry::new();
        r.apply(&[RegEvent::Register(t(1)), RegEvent::Register(t(2))]);
        let (snap, mut rx) = r.subscribe();
        assert_eq!(snap.len(), 2);
        r.apply(&[
            RegEvent::Register(t(2)),
            RegEvent::Unregister(t(1)),
            RegEvent::Unregister(t(9)),
        ]);
        assert_eq!(rx.try_recv().unwrap(), RegEvent::Unregister(t(1)));
        assert!(
            rx.try_recv().is_err(),
            "duplicates and unknown tuples are not broadcast"
        );
        r.clear();
        assert_eq!(rx.try_recv().unwrap(), RegEvent::Unregister(t(2)));
        assert!(r.is_empty());
    }
}
