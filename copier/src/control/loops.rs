//! The two halves of an established link: the read loop (records, verdicts, link events to the
//! engines) and the write loop (the registry's changes, pings and the record hold to the
//! intercept).

use std::time::Duration;

use common::proto::io::{FrameReader, FrameWriter};
use common::proto::{Message, ProtoError};
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf};
use tokio::sync::broadcast;

use crate::engine::{LinkEvent, RegEvent};
use crate::link::{log_rules, LinkError};

use super::registry::{
    messages_for, shrink_if_sparse, PayloadAsk, RegBatch, TupleSet, TUPLES_PER_MESSAGE,
};
use super::{ClientConfig, HoldLink, Links};

/// The messages that tell the intercept the next record hold; never ready for a link without
/// one.
async fn hold_changed(hold: &mut Option<HoldLink>) -> Vec<Message> {
    if let Some(h) = hold {
        if h.rx.changed().await.is_ok() {
            let now = *h.rx.borrow_and_update();
            return h.messages(now);
        }
    }
    // No hold to follow (or the engines are gone): nothing more to tell.
    std::future::pending().await
}

pub(super) async fn write<W: AsyncWrite + Unpin>(
    writer: &mut FrameWriter<W>,
    msgs: &[Message],
    limit: Duration,
) -> Result<(), LinkError> {
    tokio::time::timeout(limit, writer.write_messages(msgs))
        .await
        .map_err(|_| LinkError::WriteStalled(limit))??;
    Ok(())
}

pub(super) async fn read_loop<S: AsyncRead + Unpin>(
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
pub(super) async fn write_loop<W: AsyncWrite + Unpin>(
    cfg: &ClientConfig,
    ask: Option<PayloadAsk>,
    mut hold: Option<HoldLink>,
    links: &Links,
    writer: &mut FrameWriter<W>,
    mut sent: TupleSet,
    mut rx: broadcast::Receiver<RegBatch>,
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
    if let Some(h) = hold.as_mut() {
        let now = *h.rx.borrow_and_update();
        if now != crate::workers::Hold::default() {
            write(writer, &h.messages(now), limit).await?;
        }
    }
    loop {
        events.clear();
        msgs.clear();
        let mut lagged = false;
        tokio::select! {
            r = rx.recv() => match r {
                Ok(batch) => {
                    events.extend_from_slice(&batch);
                    loop {
                        match rx.try_recv() {
                            Ok(batch) => events.extend_from_slice(&batch),
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
            tell = hold_changed(&mut hold) => {
                write(writer, &tell, limit).await?;
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
