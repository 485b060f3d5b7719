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

mod loops;
mod registry;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::flow::FourTuple;
use common::proto::io::{client_handshake_as, Established, FrameWriter, Identity};
use common::proto::{Message, ProtoError};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, watch};

use crate::engine::LinkEvent;
use crate::link::{EngineLink, FdWriter, LinkDesk, LinkError, LinkShared};
use crate::routing::InterceptAddr;
use crate::workers::RecordRouter;

use loops::{read_loop, write, write_loop};

pub use registry::{messages_for, PayloadAsk, Registry};

/// The longest back-off between attempts while sessions are registered (they send nothing
/// until a link is up again).
pub const RETRY_WITH_SESSIONS: Duration = Duration::from_secs(1);

/// A change of the registry: the engine's event, applied as it comes.
pub use crate::engine::RegEvent;

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
    let fut = connect_unpaced(cfg.addr.host.as_str(), cfg.addr.port);
    let stream = tokio::time::timeout(cfg.connect_timeout, fut)
        .await
        .map_err(|_| LinkError::ConnectTimeout(cfg.connect_timeout))?
        .map_err(LinkError::Connect)?;
    // Registrations are small and urgent: they race the test server's SYN-ACK.
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Connect to the first address of `host` that answers, each socket asking before it connects
/// for a congestion control that does not pace (common::control_socket): a registration goes
/// out from the write that makes it, not from a pacing timer.
async fn connect_unpaced(host: &str, port: u16) -> std::io::Result<TcpStream> {
    let mut last = None;
    for addr in tokio::net::lookup_host((host, port)).await? {
        let sock = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        if let Err(e) =
            common::control_socket::set_control_congestion(socket2::SockRef::from(&sock))
        {
            tracing::debug!("the link to {addr} keeps the host's congestion control: {e}");
        }
        match sock.connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{host} has no address"),
        )
    }))
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
) -> Result<(registry::TupleSet, broadcast::Receiver<registry::RegBatch>), LinkError> {
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
fn hold_watch(links: &Links, peer: &common::proto::Hello) -> Option<HoldLink> {
    peer.has(common::proto::FEATURE_RECORD_WAIT)
        .then(|| HoldLink {
            rx: links.hold.watch(),
            open: peer.has(common::proto::FEATURE_OPEN_WAIT),
        })
}

/// A link's record hold: its changes, and whether the intercept takes `Message::OpenWait`.
pub(super) struct HoldLink {
    rx: watch::Receiver<crate::workers::Hold>,
    open: bool,
}

impl HoldLink {
    /// The messages that tell the intercept `hold`.
    fn messages(&self, hold: crate::workers::Hold) -> Vec<Message> {
        let mut v = vec![Message::RecordWait {
            micros: hold.record,
        }];
        if self.open {
            v.push(Message::OpenWait { micros: hold.open });
        }
        v
    }
}

#[cfg(test)]
mod tests;
