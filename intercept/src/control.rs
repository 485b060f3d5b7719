//! The control listener: accepts copier connections, runs the handshake, applies their Register
//! and Unregister messages to the router and writes their records back in batches.
//!
//! Invariants:
//! - a connection that fails the handshake (wrong secret, wrong version, garbage, silence past
//!   the handshake timeout) is logged with the peer address and closed; nothing else is touched;
//! - a malformed or out-of-place message after the handshake closes that connection only, with
//!   a log line naming the peer;
//! - a copier's records wait in its bounded [`Outlet`]; the writer drains it in batches of
//!   many records per frame, and the socket write is TCP-flow-controlled, so a slow copier costs
//!   bounded memory (the oldest records are dropped and counted);
//! - writes to one copier are at least [`WRITE_INTERVAL`] apart: a record that finds the writer
//!   idle goes out at once, records that come while it has just written wait for the next write
//!   (at most one interval, plus the timer's rounding), so a busy connection costs one wake-up
//!   and one write per interval instead of one per record;
//! - when a connection ends, its registrations are removed from the router and its outlet is
//!   closed, so no later record is queued for it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::proto::io::{server_handshake, Established, FrameReader, FrameWriter};
use common::proto::{error_code, Message, ProtoError, RegVerdict};
use metrics::{counter, gauge};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::metrics::{CONTROL_REFUSED, COPIERS_CONNECTED, PACKETS_DROPPED, RECORDS_SENT};
use crate::outlet::{Outlet, Shared};
use crate::router::CopierId;

/// Records written per batch (several frames if they do not fit in one).
const BATCH: usize = 4096;
/// Least time between two record writes to one copier (see the module doc). Measured with
/// `bench_intercept` (BENCHMARKS.md): writing every record as it came cost the control thread
/// about 5 µs of CPU per record at 20k records/s (a wake-up, a futex and a `send` for every few
/// records); with 1 ms it costs 1 to 2 µs, and the writer wakes about once per millisecond.
pub const WRITE_INTERVAL: Duration = Duration::from_millis(1);
/// How long shutdown waits for connections to flush.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Settings of the control listener.
#[derive(Debug, Clone)]
pub struct ControlConfig {
    /// The shared secret; `None` only with `--no-secret`.
    pub secret: Option<Vec<u8>>,
    /// Records queued per copier before the oldest are dropped.
    pub outlet_capacity: usize,
    /// What we announce in our Hello.
    pub software: String,
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
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((sock, peer)) => {
                    let id = CopierId(next_id);
                    next_id += 1;
                    conns.spawn(connection(sock, peer, id, shared.clone(), cfg.clone(), shutdown.clone()));
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
    /// The socket failed.
    Io(String),
    /// We are shutting down.
    Shutdown,
}

fn refusal_reason(e: &ProtoError) -> &'static str {
    match e {
        ProtoError::AuthFailed => "auth_failed",
        ProtoError::AuthMode(_) => "auth_mode",
        ProtoError::VersionMismatch { .. } => "version",
        ProtoError::Timeout(_) => "timeout",
        ProtoError::Io(_) | ProtoError::Closed(_) => "io",
        ProtoError::WrongRole { .. } => "role",
        _ => "garbage",
    }
}

async fn connection(
    sock: TcpStream,
    peer: SocketAddr,
    id: CopierId,
    shared: Arc<Shared>,
    cfg: Arc<ControlConfig>,
    shutdown: watch::Receiver<bool>,
) {
    let _ = sock.set_nodelay(true);
    let est = match server_handshake(sock, cfg.secret.as_deref(), &cfg.software).await {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!("control connection from {peer} refused: {e}");
            counter!(CONTROL_REFUSED, "reason" => refusal_reason(&e)).increment(1);
            return;
        }
    };
    run_copier(est, peer, id, shared, cfg, shutdown).await;
}

/// Serve an authenticated copier connection until it ends; clean up after it.
pub(crate) async fn run_copier<S>(
    est: Established<S>,
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
        mut writer,
        peer: hello,
    } = est;
    tracing::info!("copier {peer} connected as {id} ({})", hello.software);
    let outlet = Arc::new(Outlet::new(cfg.outlet_capacity));
    shared.lock().outlets.insert(id, outlet.clone());
    gauge!(COPIERS_CONNECTED).increment(1.0);

    // Pongs and Registered answers, written by the write loop after the records queued so far.
    let (reply_tx, reply_rx) = mpsc::channel(64);
    let label = peer.ip().to_string();
    let end = tokio::select! {
        e = read_loop(&mut reader, id, &shared, &outlet, &reply_tx) => e,
        e = write_loop(&mut writer, &outlet, reply_rx, shutdown, &label) => e,
    };
    if let End::Protocol(why) = &end {
        let msg = Message::Error {
            code: error_code::PROTOCOL,
            message: why.clone(),
        };
        let _ = tokio::time::timeout(Duration::from_millis(200), writer.write_message(&msg)).await;
    }
    let _ = tokio::time::timeout(Duration::from_millis(200), writer.shutdown()).await;

    let removed = {
        let mut core = shared.lock();
        core.outlets.remove(&id);
        core.router.handle_copier_gone(id)
    };
    let lost = outlet.close();
    counter!(PACKETS_DROPPED, "reason" => "copier_gone").increment(lost as u64);
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
        End::Io(why) => tracing::warn!("copier {peer} ({id}) connection failed: {why}; {summary}"),
    }
}

async fn read_loop<R: AsyncRead + Unpin>(
    reader: &mut FrameReader<R>,
    id: CopierId,
    shared: &Shared,
    outlet: &Outlet,
    reply: &mpsc::Sender<Message>,
) -> End {
    loop {
        let msg = match reader.read_message().await {
            Ok(Some(m)) => m,
            Ok(None) => return End::PeerClosed,
            Err(ProtoError::Io(e)) => return End::Io(e.to_string()),
            Err(e) => return End::Protocol(e.to_string()),
        };
        match msg {
            Message::Register { tuples } => {
                let now = Instant::now();
                let (reg, warning) = {
                    let mut core = shared.lock();
                    let reg = core.router.handle_register(now, id, &tuples);
                    let results: Vec<(_, RegVerdict)> = tuples
                        .iter()
                        .copied()
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
            Message::Ping { token } => {
                // A copier that pings faster than we answer loses pongs, not memory.
                let _ = reply.try_send(Message::Pong { token });
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

async fn write_loop<W: AsyncWrite + Unpin>(
    writer: &mut FrameWriter<W>,
    outlet: &Outlet,
    mut reply: mpsc::Receiver<Message>,
    mut shutdown: watch::Receiver<bool>,
    label: &str,
) -> End {
    let sent = counter!(RECORDS_SENT, "copier" => label.to_string());
    let mut batch = Vec::with_capacity(BATCH);
    let mut stopping = *shutdown.borrow();
    // When the last records were written: the next write waits until WRITE_INTERVAL after it.
    let mut last_write: Option<tokio::time::Instant> = None;
    let mut replies: Vec<Message> = Vec::new();
    loop {
        if !stopping {
            let due = last_write.map(|t| t + WRITE_INTERVAL);
            tokio::select! {
                // Within the interval after a write: sleep it out, then write whatever came
                // meanwhile without waiting for (and being woken by) each record.
                () = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {
                    last_write = None;
                    if outlet.is_empty() {
                        continue;
                    }
                }
                () = outlet.ready(), if due.is_none() => {}
                // A Pong or Registered goes out at once, after the records queued so far (a
                // copier may use Ping as a barrier).
                Some(m) = reply.recv() => {
                    replies.push(m);
                    while let Ok(m) = reply.try_recv() {
                        replies.push(m);
                    }
                }
                _ = shutdown.changed() => stopping = true,
            }
        }
        loop {
            batch.clear();
            outlet.drain_into(&mut batch, BATCH);
            if batch.is_empty() {
                break;
            }
            if let Err(e) = writer.write_records(&batch).await {
                return End::Io(e.to_string());
            }
            last_write = Some(tokio::time::Instant::now());
            sent.increment(batch.len() as u64);
        }
        if !replies.is_empty() {
            if let Err(e) = writer.write_messages(&replies).await {
                return End::Io(e.to_string());
            }
            replies.clear();
        }
        if stopping {
            let bye = Message::Error {
                code: error_code::SHUTDOWN,
                message: "intercept shutting down".into(),
            };
            let _ = writer.write_message(&bye).await;
            return End::Shutdown;
        }
    }
}

#[cfg(test)]
mod tests;
