//! The control listener: accepts copier connections, runs the handshake, applies their Register
//! and Unregister messages to the router and writes their records back in batches.
//!
//! Invariants:
//! - at most [`ControlConfig::max_pending`] connections are in their handshake at once, and at
//!   most [`ControlConfig::max_pending_per_addr`] from one source address (`Pending`); a
//!   connection beyond either cap is closed at once, before a byte is read, and counted
//!   (`intercept_control_refused_total{reason="pending_limit"|"pending_limit_addr"}`), so
//!   peers that connect and say nothing cannot keep a copier out;
//! - until the handshake is done, frames over `PRE_AUTH_MAX_FRAME` (4 KiB) are refused from
//!   their length field (`common::proto::io`);
//! - a connection that fails the handshake (wrong secret, wrong version, garbage, silence past
//!   the handshake timeout) is counted and closed; nothing else is touched. Refusals are logged
//!   with the peer address, at most one line per second per reason (`LogLimiter`), the next
//!   line saying how many were not logged;
//! - after the handshake every frame is authenticated (`common::proto::auth`, per-frame tags);
//!   a frame whose tag fails, or any malformed or out-of-place message, closes that connection
//!   only, with a log line naming the peer;
//! - a copier not heard from for [`ControlConfig::idle_timeout`] (six of its pings) is closed
//!   and counted (`intercept_control_closed_total{reason="idle"}`); the socket also has TCP
//!   keepalive, so a vanished host is noticed even while we only write;
//! - a copier's records are written by the NFQUEUE worker that read them when the connection
//!   is idle (`crate::outlet`: one write per receive batch); otherwise they wait in its bounded
//!   [`Outlet`] and the writer here drains it in batches of many records per frame, and the
//!   socket write is TCP-flow-controlled, so a slow copier costs bounded memory (the oldest
//!   records are dropped and counted). Both sides seal every frame under the outlet's lock with
//!   the connection's one frame counter; what a worker's partial write left over is written
//!   here before anything else;
//! - no clock in the record path: a record that finds the connection idle is written at once
//!   by the worker; the records that arrive while a write is in progress are queued and all
//!   taken by the writer's next write, so a busy connection batches by itself (one wake-up and
//!   one write per turn of the writer, not per record). The outlet wakes the writer only when
//!   its queue goes from empty to non-empty or a worker left bytes over;
//! - answer payload goes only where it is asked for: a copier whose Hello announces
//!   `FEATURE_PAYLOAD_REQUEST` gets payload only on the tuples of its RegisterPayload messages
//!   (its plain Registers get headers only); an older copier (no such feature) gets, as before,
//!   `--payload-bytes` of payload on every tuple it registers (`registration`). Either way a
//!   record never keeps more than `--payload-bytes`, the NFQUEUE copy range;
//! - when a connection ends, its registrations are removed from the router and its outlet is
//!   closed, so no later record is queued for it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::proto::io::{server_handshake, Established, FrameReader};
use common::proto::FleetMember;
use common::proto::{error_code, Message, ProtoError, RegVerdict};
use metrics::{counter, gauge};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::metrics::{CONTROL_CLOSED, CONTROL_REFUSED, COPIERS_CONNECTED, PACKETS_DROPPED};
use crate::outlet::{Outlet, Shared};
use crate::router::CopierId;

/// Most records taken from the outlet per write (several frames if they do not fit in one).
const BATCH: usize = 4096;
/// How long shutdown waits for connections to flush.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// Default [`ControlConfig::max_pending`].
pub const MAX_PENDING: usize = 64;
/// Default [`ControlConfig::max_pending_per_addr`].
pub const MAX_PENDING_PER_ADDR: usize = 8;
/// Default [`ControlConfig::idle_timeout`]: six times the copier's ping interval (5 s).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Refusal log lines: at most one per reason per this interval.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(1);
/// TCP keepalive of copier connections: first probe after this much silence, then one probe
/// per interval, given up after the retries (about 40 s in all).
const KEEPALIVE_TIME: Duration = Duration::from_secs(20);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_RETRIES: u32 = 4;

/// Settings of the control listener.
#[derive(Debug, Clone)]
pub struct ControlConfig {
    /// The shared secret; `None` only with `--no-secret`.
    pub secret: Option<Vec<u8>>,
    /// Records queued per copier before the oldest are dropped.
    pub outlet_capacity: usize,
    /// Bytes of records queued per copier before the oldest are dropped
    /// ([`crate::outlet::DEFAULT_QUEUE_BYTES`] unless set).
    pub outlet_bytes: usize,
    /// What we announce in our Hello.
    pub software: String,
    /// Connections in their handshake at once, in all ([`MAX_PENDING`]).
    pub max_pending: usize,
    /// Connections in their handshake at once from one source address
    /// ([`MAX_PENDING_PER_ADDR`]).
    pub max_pending_per_addr: usize,
    /// An authenticated copier that sends no frame for this long is disconnected
    /// ([`IDLE_TIMEOUT`]).
    pub idle_timeout: Duration,
}

impl ControlConfig {
    /// A configuration with the default limits.
    pub fn new(secret: Option<Vec<u8>>, outlet_capacity: usize, software: String) -> ControlConfig {
        ControlConfig {
            secret,
            outlet_capacity,
            outlet_bytes: crate::outlet::DEFAULT_QUEUE_BYTES,
            software,
            max_pending: MAX_PENDING,
            max_pending_per_addr: MAX_PENDING_PER_ADDR,
            idle_timeout: IDLE_TIMEOUT,
        }
    }
}

/// The connections still in their handshake, in all and per source address.
#[derive(Debug)]
pub(crate) struct Pending {
    total: usize,
    per_addr: HashMap<IpAddr, usize>,
    max_total: usize,
    max_per_addr: usize,
}

impl Pending {
    pub(crate) fn new(max_total: usize, max_per_addr: usize) -> Pending {
        Pending {
            total: 0,
            per_addr: HashMap::new(),
            max_total,
            max_per_addr,
        }
    }

    /// Take a slot for a new connection from `ip`, or say which cap it hits (the metric's
    /// reason label).
    pub(crate) fn admit(&mut self, ip: IpAddr) -> Result<(), &'static str> {
        if self.total >= self.max_total {
            return Err(RefusalReason::PendingLimit.label());
        }
        let n = self.per_addr.entry(ip).or_insert(0);
        if *n >= self.max_per_addr {
            return Err(RefusalReason::PendingLimitAddr.label());
        }
        *n += 1;
        self.total += 1;
        Ok(())
    }

    /// Give back the slot of a connection from `ip` whose handshake ended.
    pub(crate) fn release(&mut self, ip: IpAddr) {
        if let Some(n) = self.per_addr.get_mut(&ip) {
            *n -= 1;
            self.total -= 1;
            if *n == 0 {
                self.per_addr.remove(&ip);
            }
        }
    }

    /// Connections in their handshake now.
    pub(crate) fn total(&self) -> usize {
        self.total
    }
}

/// Rate limit for log lines: at most one per key per interval, counting the ones held back.
#[derive(Debug)]
pub(crate) struct LogLimiter {
    interval: Duration,
    /// Per key: when the last line was logged, and how many were held back since.
    last: HashMap<&'static str, (Instant, u64)>,
}

impl LogLimiter {
    pub(crate) fn new(interval: Duration) -> LogLimiter {
        LogLimiter {
            interval,
            last: HashMap::new(),
        }
    }

    /// Whether a line for `key` may be logged at `now`: `Some(n)` with the number of lines held
    /// back since the last one, or `None` (held back and counted).
    pub(crate) fn allow(&mut self, now: Instant, key: &'static str) -> Option<u64> {
        match self.last.get_mut(key) {
            Some((at, held)) if now.saturating_duration_since(*at) < self.interval => {
                *held += 1;
                None
            }
            Some((at, held)) => {
                let n = *held;
                *at = now;
                *held = 0;
                Some(n)
            }
            None => {
                self.last.insert(key, (now, 0));
                Some(0)
            }
        }
    }
}

/// What the accept loop and the handshakes share: the pending slots and the refusal log limit.
#[derive(Debug)]
struct Admission {
    pending: Pending,
    logs: LogLimiter,
}

type SharedAdmission = Arc<Mutex<Admission>>;

fn lock(a: &SharedAdmission) -> std::sync::MutexGuard<'_, Admission> {
    a.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Count a refused connection and log it, rate-limited per reason.
fn refused(adm: &SharedAdmission, reason: &'static str, line: impl FnOnce() -> String) {
    counter!(CONTROL_REFUSED, "reason" => reason).increment(1);
    let allowed = lock(adm).logs.allow(Instant::now(), reason);
    if let Some(held) = allowed {
        if held > 0 {
            tracing::warn!(
                "{}; {held} more refusal(s) for {reason} since the last such line not logged",
                line()
            );
        } else {
            tracing::warn!("{}", line());
        }
    }
}

/// A pending slot, given back when the handshake ends (whichever way).
struct PendingSlot {
    adm: SharedAdmission,
    ip: IpAddr,
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        lock(&self.adm).pending.release(self.ip);
    }
}

/// Accept and serve copier connections until `shutdown` turns true, then let the connections
/// flush (at most 2 s).
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    cfg: Arc<ControlConfig>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut next_id = 1u64;
    let mut conns = JoinSet::new();
    let adm = Arc::new(Mutex::new(Admission {
        pending: Pending::new(cfg.max_pending, cfg.max_pending_per_addr),
        logs: LogLimiter::new(REFUSAL_LOG_INTERVAL),
    }));
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((sock, peer)) => {
                    let admitted = lock(&adm).pending.admit(peer.ip());
                    if let Err(reason) = admitted {
                        // Closed before a byte is read: costs no task and no buffer.
                        drop(sock);
                        refused(&adm, reason, || {
                            let pending = lock(&adm).pending.total();
                            format!(
                                "control connection from {peer} closed at once: too many unauthenticated connections \
                                 ({pending} in their handshake now; at most {} in all and {} per address)",
                                cfg.max_pending, cfg.max_pending_per_addr
                            )
                        });
                        continue;
                    }
                    let slot = PendingSlot { adm: adm.clone(), ip: peer.ip() };
                    let id = CopierId(next_id);
                    next_id += 1;
                    conns.spawn(connection(sock, peer, id, slot, shared.clone(), cfg.clone(), shutdown.clone()));
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!("accept on the control listener failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    let flushed = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if flushed.is_err() {
        tracing::warn!(
            "{} copier connections did not flush within {SHUTDOWN_GRACE:?}; closing them",
            conns.len()
        );
        conns.abort_all();
    }
}

/// How a copier connection ended.
#[derive(Debug)]
enum End {
    /// The copier closed it.
    PeerClosed,
    /// The copier broke the protocol: tell it, then close.
    Protocol(String),
    /// A frame failed its authentication tag (modified, replayed, reordered or dropped on the
    /// way, or injected): tell the peer, then close.
    BadTag(String),
    /// Nothing came from the copier for the idle timeout: tell it, then close.
    Idle(Duration),
    /// The socket failed.
    Io(String),
    /// We are shutting down.
    Shutdown,
}

common::reasons! {
    /// Why an authenticated copier connection ended: the `reason` label of
    /// `intercept_control_closed_total`.
    enum CloseReason;
    /// The copier closed it.
    PeerClosed => peer_closed,
    /// The copier broke the protocol.
    Protocol => protocol,
    /// A frame failed its authentication tag.
    BadTag => bad_tag,
    /// Nothing came from the copier for the idle timeout.
    Idle => idle,
    /// The socket failed.
    Io => io,
    /// We are shutting down.
    Shutdown => shutdown,
}

impl End {
    /// Why it ended, as counted.
    fn reason(&self) -> CloseReason {
        match self {
            End::PeerClosed => CloseReason::PeerClosed,
            End::Protocol(_) => CloseReason::Protocol,
            End::BadTag(_) => CloseReason::BadTag,
            End::Idle(_) => CloseReason::Idle,
            End::Io(_) => CloseReason::Io,
            End::Shutdown => CloseReason::Shutdown,
        }
    }
}

common::reasons! {
    /// Why a control connection was refused before it was authenticated: the `reason` label of
    /// `intercept_control_refused_total`.
    enum RefusalReason;
    /// Too many connections in their handshake ([`ControlConfig::max_pending`]).
    PendingLimit => pending_limit,
    /// Too many from this address in their handshake ([`ControlConfig::max_pending_per_addr`]).
    PendingLimitAddr => pending_limit_addr,
    /// The copier's proof of the secret was wrong.
    AuthFailed => auth_failed,
    /// One side runs with a secret, the other without.
    AuthMode => auth_mode,
    /// Protocol versions differ.
    Version => version,
    /// The handshake took too long.
    Timeout => timeout,
    /// The socket failed or closed during the handshake.
    Io => io,
    /// The peer announced the wrong role.
    Role => role,
    /// A frame larger than the protocol allows.
    FrameTooLarge => frame_too_large,
    /// Anything else that is not the handshake.
    Garbage => garbage,
}

fn refusal_reason(e: &ProtoError) -> RefusalReason {
    match e {
        ProtoError::AuthFailed => RefusalReason::AuthFailed,
        ProtoError::AuthMode(_) => RefusalReason::AuthMode,
        ProtoError::VersionMismatch { .. } => RefusalReason::Version,
        ProtoError::Timeout(_) => RefusalReason::Timeout,
        ProtoError::Io(_) | ProtoError::Closed(_) => RefusalReason::Io,
        ProtoError::WrongRole { .. } => RefusalReason::Role,
        ProtoError::FrameTooLarge { .. } => RefusalReason::FrameTooLarge,
        _ => RefusalReason::Garbage,
    }
}

async fn connection(
    sock: TcpStream,
    peer: SocketAddr,
    id: CopierId,
    slot: PendingSlot,
    shared: Arc<Shared>,
    cfg: Arc<ControlConfig>,
    shutdown: watch::Receiver<bool>,
) {
    let _ = sock.set_nodelay(true);
    // For the NFQUEUE workers' own writes (crate::outlet): a descriptor of our own, so none
    // of theirs can ever reach a closed and reused number.
    let fd = match sock.as_fd().try_clone_to_owned() {
        Ok(fd) => Some(fd),
        Err(e) => {
            tracing::warn!("duplicating the socket of the connection from {peer}: {e}; its records are written by the control thread only");
            None
        }
    };
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_TIME)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_RETRIES);
    if let Err(e) = socket2::SockRef::from(&sock).set_tcp_keepalive(&keepalive) {
        tracing::debug!("TCP keepalive on the connection from {peer}: {e}");
    }
    let res = server_handshake(sock, cfg.secret.as_deref(), &cfg.software).await;
    let adm = slot.adm.clone();
    // Authenticated or not, this connection no longer counts as pending.
    drop(slot);
    let est = match res {
        Ok(e) => e,
        Err(e) => {
            refused(&adm, refusal_reason(&e).label(), || {
                format!("control connection from {peer} refused: {e}")
            });
            return;
        }
    };
    run_copier(est, fd, peer, id, shared, cfg, shutdown).await;
}

/// Serve an authenticated copier connection until it ends; clean up after it.
pub(crate) async fn run_copier<S>(
    est: Established<S>,
    fd: Option<OwnedFd>,
    peer: SocketAddr,
    id: CopierId,
    shared: Arc<Shared>,
    cfg: Arc<ControlConfig>,
    shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Established {
        mut reader,
        writer,
        peer: hello,
    } = est;
    reader.set_idle_timeout(Some(cfg.idle_timeout));
    tracing::info!(
        "copier {peer} connected as {id} ({}; instance {:016x}, fleet {}/{})",
        hello.software,
        hello.instance,
        hello.fleet_index,
        hello.fleet_size
    );
    let label = peer.ip().to_string();
    // From here on every frame is sealed by the outlet, whoever writes it.
    let (mut writer, sealer) = writer.into_parts();
    let outlet = Arc::new(Outlet::bounded(cfg.outlet_capacity, cfg.outlet_bytes));
    outlet.attach(fd, sealer, &label);
    outlet.set_stamps(hello.has(common::proto::FEATURE_STAMPS));
    // However this task ends (even aborted at shutdown), the workers' duplicate of the socket
    // is closed with it.
    struct Detach(Arc<Outlet>);
    impl Drop for Detach {
        fn drop(&mut self) {
            self.0.detach();
        }
    }
    let _detach = Detach(outlet.clone());
    {
        let mut core = shared.lock();
        core.outlets.insert(id, outlet.clone());
        // Before its first Register: who it is decides between a reconnection and another copier.
        core.router.set_instance(id, hello.instance);
        // A copier (not a doctor's probe) connecting during a restart grace: the grace does not
        // end early before it said its sessions are registered again (an older copier never
        // says so: the grace then runs its whole length).
        if hello.instance != 0 {
            core.router.grace_join(id);
        }
        let me = FleetMember {
            instance: hello.instance,
            addr: peer,
            index: hello.fleet_index,
            size: hello.fleet_size,
        };
        // A copier (not a doctor's probe, which announces no instance) whose test ports another
        // live copier also uses: they will pick the same tuples for the clients they share.
        if me.instance != 0 {
            let clash = core
                .fleet
                .values()
                .filter(|o| o.instance != 0 && o.instance != me.instance && me.shares_ports_with(o))
                .map(|o| format!("{} (fleet {}/{})", o.addr.ip(), o.index, o.size))
                .collect::<Vec<_>>();
            if !clash.is_empty() {
                tracing::warn!(
                    "copier {peer} ({id}, fleet {}/{}) shares test ports with {}: copiers with one --seed and pool pick \
                     the same test tuples for the same clients; give each copier its own `--fleet I/N` (clashing \
                     registrations are refused as held_by_other and moved)",
                    me.index,
                    me.size,
                    clash.join(", ")
                );
            }
        }
        core.fleet.insert(id, me);
    }
    gauge!(COPIERS_CONNECTED).increment(1.0);
    // Its records go at once until it says they may wait; forgotten however this task ends.
    shared.rest.join(id);
    struct Leave<'a>(&'a Shared, CopierId);
    impl Drop for Leave<'_> {
        fn drop(&mut self) {
            self.0.rest.leave(self.1);
        }
    }
    let _leave = Leave(&shared, id);

    // Pongs and Registered answers, written by the write loop after the records queued so far.
    let (reply_tx, reply_rx) = mpsc::channel(64);
    let asks = hello.has(common::proto::FEATURE_PAYLOAD_REQUEST);
    let tells = hello.has(common::proto::FEATURE_RESTART);
    let end = tokio::select! {
        e = read_loop(&mut reader, id, peer.ip(), asks, &shared, &outlet, &reply_tx) => e,
        e = write_loop(&mut writer, &outlet, reply_rx, shutdown) => e,
        e = tell_rules(tells, &shared, &reply_tx) => e,
    };
    let tell = match &end {
        End::Protocol(why) | End::BadTag(why) => Some(why.clone()),
        End::Idle(d) => Some(format!(
            "intercept: nothing heard from this copier for {d:?}"
        )),
        _ => None,
    };
    let last = match (&end, tell) {
        (_, Some(why)) => Some(Message::Error {
            code: error_code::PROTOCOL,
            message: why,
        }),
        (End::Shutdown, None) => Some(Message::Error {
            code: error_code::SHUTDOWN,
            message: "intercept shutting down".into(),
        }),
        _ => None,
    };
    // No worker writes from here on; what one left over goes before the last message.
    let mut buf = Vec::new();
    outlet.finish(last.as_ref(), &mut buf);
    if !buf.is_empty() {
        let _ = tokio::time::timeout(Duration::from_millis(200), writer.write_all(&buf)).await;
    }
    counter!(CONTROL_CLOSED, "reason" => end.reason().label()).increment(1);
    let _ = tokio::time::timeout(Duration::from_millis(200), writer.shutdown()).await;

    let removed = {
        let mut core = shared.lock();
        core.outlets.remove(&id);
        core.fleet.remove(&id);
        core.router.handle_copier_gone(id)
    };
    let lost = outlet.close();
    counter!(PACKETS_DROPPED, "reason" => crate::router::DropReason::CopierGone.label())
        .increment(lost as u64);
    gauge!(COPIERS_CONNECTED).decrement(1.0);
    let summary = format!("forgot {removed} registrations, dropped {lost} unsent records");
    match end {
        End::PeerClosed => tracing::info!("copier {peer} ({id}) closed the connection; {summary}"),
        End::Shutdown => {
            tracing::info!("copier {peer} ({id}) disconnected for shutdown; {summary}")
        }
        End::Protocol(why) => {
            tracing::warn!("copier {peer} ({id}) broke the protocol: {why}; closed; {summary}")
        }
        End::BadTag(why) => tracing::warn!(
            "copier {peer} ({id}): {why}; closed (a man in the middle, or a broken path); {summary}"
        ),
        End::Idle(d) => tracing::warn!(
            "copier {peer} ({id}) sent nothing for {d:?} (not even a ping); closed; {summary}"
        ),
        End::Io(why) => tracing::warn!("copier {peer} ({id}) connection failed: {why}; {summary}"),
    }
}

/// The registrations a Register or RegisterPayload message asks for, each tuple with the
/// payload bytes its records keep (capped later by `--payload-bytes`): a copier that asks per
/// tuple (`asks`, its Hello has `FEATURE_PAYLOAD_REQUEST`) gets payload only from
/// RegisterPayload; an older one gets it on every tuple, as before the feature. `None` for any
/// other message.
pub(crate) fn registration(msg: Message, asks: bool) -> Option<Vec<(FourTuple, u32)>> {
    match msg {
        Message::Register { tuples } => {
            let want = if asks { 0 } else { u32::MAX };
            Some(tuples.into_iter().map(|t| (t, want)).collect())
        }
        Message::RegisterPayload { tuples } => Some(tuples),
        _ => None,
    }
}

async fn read_loop<R: AsyncRead + Unpin>(
    reader: &mut FrameReader<R>,
    id: CopierId,
    peer: IpAddr,
    asks: bool,
    shared: &Shared,
    outlet: &Outlet,
    reply: &mpsc::Sender<Message>,
) -> End {
    loop {
        let msg = match reader.read_message().await {
            Ok(Some(m)) => m,
            Ok(None) => return End::PeerClosed,
            Err(ProtoError::Io(e)) => return End::Io(e.to_string()),
            Err(ProtoError::Idle(d)) => return End::Idle(d),
            Err(e @ ProtoError::BadTag { .. }) => return End::BadTag(e.to_string()),
            Err(e) => return End::Protocol(e.to_string()),
        };
        match msg {
            msg @ (Message::Register { .. } | Message::RegisterPayload { .. }) => {
                let tuples = registration(msg, asks).unwrap_or_default();
                let now = Instant::now();
                shared.rest.registered(now);
                let (reg, warning) = {
                    let mut core = shared.lock();
                    let reg = core.router.handle_register_payload(now, id, &tuples);
                    let results: Vec<(_, RegVerdict)> = tuples
                        .iter()
                        .map(|(t, _)| *t)
                        .zip(reg.verdicts.iter().copied())
                        .collect();
                    let warning = if reg.all_accepted() {
                        None
                    } else {
                        let guard = core.router.guard().clone();
                        core.refusals
                            .consider(now, &id.to_string(), &guard, &results)
                    };
                    ((results, reg.released), warning)
                };
                if let Some(w) = warning {
                    tracing::warn!("{}", w.text);
                }
                let (results, released) = reg;
                if !released.is_empty() {
                    tracing::debug!(%id, n = released.len(), "held records released by a registration");
                    outlet.push(released.into_iter().map(|(_, r)| r));
                }
                // The accepted registrations are in force: tell the copier, which sends a
                // session's SYN only after this answer; refused tuples carry their reason.
                // Waiting for room here pushes back on a copier that registers faster than
                // it reads.
                if reply.send(Message::Registered { results }).await.is_err() {
                    return End::Shutdown;
                }
            }
            Message::Unregister { tuples } => {
                shared.lock().router.handle_unregister(id, &tuples);
            }
            Message::RecordWait { micros } => shared.rest.set_wait(id, micros),
            Message::OpenWait { micros } => shared.rest.set_open_wait(id, micros),
            Message::Synced => {
                let mut core = shared.lock();
                core.router.handle_synced(Instant::now(), id);
                tracing::debug!(%id, "copier synced: its live sessions are registered");
            }
            Message::FleetQuery => {
                let mut copiers: Vec<FleetMember> = shared.lock().fleet.values().copied().collect();
                copiers.sort_by_key(|m| (m.addr, m.instance));
                if reply.send(Message::Fleet { copiers }).await.is_err() {
                    return End::Shutdown;
                }
            }
            Message::RouteQuery { nets } => {
                // `ip route get` per range: off the runtime's threads.
                let checks =
                    tokio::task::spawn_blocking(move || crate::doctor::route_checks(&nets, peer))
                        .await
                        .unwrap_or_default();
                if reply.send(Message::RouteAnswer { checks }).await.is_err() {
                    return End::Shutdown;
                }
            }
            Message::Ping { token } => {
                // A copier that pings faster than we answer loses pongs, not memory. One that
                // takes stamps gets this host's clock as of reading the Ping: with its own
                // clock at sending it and at reading the Pong, it measures the offset of the
                // two clocks (the records' stamps are on this clock).
                let clock = if outlet.stamps() {
                    crate::outlet::wall_ns()
                } else {
                    0
                };
                let _ = reply.try_send(Message::Pong { token, clock });
            }
            Message::Pong { .. } => {}
            Message::Error { code, message } => {
                return End::Io(format!("the copier sent an error: {message} (code {code})"));
            }
            other => {
                return End::Protocol(format!(
                    "unexpected {} message after the handshake",
                    other.name()
                ))
            }
        }
    }
}

/// Tell a copier that understands it (`tells`: `FEATURE_RESTART`) whether the firewall rules
/// are in force, at connect when they are not and at every change; ends only when the
/// connection's writer is gone.
async fn tell_rules(tells: bool, shared: &Shared, reply: &mpsc::Sender<Message>) -> End {
    if !tells {
        return std::future::pending().await;
    }
    let mut rx = shared.rules_ok.subscribe();
    let mut told = true;
    loop {
        let in_force = *rx.borrow_and_update();
        if in_force != told {
            if reply.send(Message::Rules { in_force }).await.is_err() {
                return End::Shutdown;
            }
            told = in_force;
        }
        if rx.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Write what the NFQUEUE workers could not write themselves: queued records, the bytes a
/// worker's partial write left over (first), and the replies. `out` is the connection's raw
/// write half: every frame is sealed by the [`Outlet`] ([`Outlet::begin_write`]).
async fn write_loop<W: AsyncWrite + Unpin>(
    out: &mut W,
    outlet: &Outlet,
    mut reply: mpsc::Receiver<Message>,
    mut shutdown: watch::Receiver<bool>,
) -> End {
    let mut buf = Vec::new();
    let mut stopping = *shutdown.borrow();
    let mut replies: Vec<Message> = Vec::new();
    loop {
        // Idle: sleep until a record is queued or a worker left bytes over (the outlet wakes
        // us only when its queue goes from empty to non-empty, or for left-over bytes), a
        // reply is due or we stop. Busy: no waiting at all.
        if !stopping && outlet.is_idle() && replies.is_empty() {
            tokio::select! {
                () = outlet.ready() => {}
                Some(m) = reply.recv() => replies.push(m),
                _ = shutdown.changed() => stopping = true,
            }
        }
        while let Ok(m) = reply.try_recv() {
            replies.push(m);
        }
        if !stopping && shutdown.has_changed().unwrap_or(true) {
            stopping = true;
        }
        // Everything queued now goes in one write (several frames if it is large). Records that
        // arrive during the write wait for the next turn of the loop, which takes them all at
        // once: batches grow with the load, and a record that finds the connection idle is
        // written at once by the NFQUEUE worker itself. A Pong or Registered goes out after
        // the records queued before it (a copier may use Ping as a barrier); on shutdown
        // everything queued is flushed first.
        let flush_all = stopping || !replies.is_empty();
        let mut left = if flush_all { outlet.len() } else { BATCH };
        loop {
            buf.clear();
            let last = !flush_all || left <= BATCH;
            let with = if last { &replies[..] } else { &[][..] };
            let n = outlet.begin_write(&mut buf, left.min(BATCH), with);
            if !buf.is_empty() {
                let r = async {
                    out.write_all(&buf).await?;
                    out.flush().await
                }
                .await;
                outlet.end_write();
                if let Err(e) = r {
                    return End::Io(e.to_string());
                }
            }
            left = left.saturating_sub(n);
            if last || n == 0 {
                break;
            }
        }
        replies.clear();
        if buf.capacity() > 4 * common::proto::MAX_FRAME {
            buf = Vec::new();
        }
        if stopping {
            return End::Shutdown;
        }
    }
}

#[cfg(test)]
mod tests;
