//! The engine's outputs, drained each turn: registration changes to the registry (in an order
//! that keeps every connection guarded), packets to the sender (and to the loop's features:
//! `--record`, `--compare`, `--trace`, see [`super::tap`]), refusals to the log and counters to the metrics; and the closing of every
//! session when the loop ends.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::proto::RegVerdict;

use crate::control::RegEvent;
use crate::engine::Engine;
use crate::metrics::Snapshot;
use crate::{metrics as m, sys};

use super::{
    LoopIo, State, SEND_HIGH_WATER, SHUTDOWN_FLUSH, TRANSMITS_PER_TURN, UNREGISTER_BATCH,
    UNREGISTER_WAIT,
};

/// The loop ends: reset every test connection, send the RSTs (at most [`SHUTDOWN_FLUSH`]), then
/// unregister the connections (the engine releases the Unregisters once its RSTs were taken).
pub(super) fn close_all(engine: &mut Engine, io: &mut LoopIo, st: &mut State) {
    let now = Instant::now();
    let sessions = engine.session_count();
    let sent_before = engine.stats().segments_sent;
    if st.offline_done.is_some() {
        engine.close_at_capture_end(now);
    } else {
        engine.close_all(now);
    }
    let deadline = now + SHUTDOWN_FLUSH;
    let mut engine_empty = false;
    loop {
        let now = Instant::now();
        while !engine_empty && io.sender.pending() < SEND_HIGH_WATER {
            let mut buf = io.sender.buffer();
            match engine.poll_transmit(now, &mut buf) {
                Some(t) => {
                    buf.truncate(t.len);
                    io.taps.transmit(&t, &buf);
                    io.sender
                        .enqueue_segment(t.tuple, t.dst, buf, t.gso_size, now);
                }
                None => {
                    io.sender.recycle(buf);
                    engine_empty = true;
                }
            }
        }
        io.sender.flush(now);
        io.taps.flushed(engine);
        if (engine_empty && io.sender.pending() == 0) || now >= deadline {
            break;
        }
        // The kernel pushes back: wait for the sender's back-off.
        let wait = io.sender.wakeup().map_or(Duration::from_millis(1), |t| {
            t.saturating_duration_since(now)
        });
        std::thread::sleep(wait.clamp(Duration::from_micros(100), Duration::from_millis(20)));
    }
    drain_control(engine, io, st, Instant::now(), true);
    if sessions > 0 {
        tracing::info!(
            "closed {sessions} session(s): {} reset(s) sent, {} left unsent",
            engine.stats().segments_sent - sent_before,
            io.sender.pending()
        );
    }
}

/// Offline, the file is done: whether the loop may end (no session left that could still go
/// on, [`Engine::unfinished_sessions`], and nothing to send; or `session_timeout` since the
/// file ended). Sessions idle then end as open at the capture's end ([`close_all`]).
pub(super) fn offline_done(engine: &Engine, io: &LoopIo, st: &mut State, now: Instant) -> bool {
    let done_at = *st.offline_done.get_or_insert_with(|| {
        tracing::info!(
            "offline: the file is done; waiting for {} session(s) to finish (at most {:?})",
            engine.session_count(),
            st.session_timeout
        );
        now
    });
    if engine.unfinished_sessions() == 0 && io.sender.pending() == 0 {
        let open = engine.session_count();
        if open == 0 {
            tracing::info!("offline: every session finished");
        } else {
            tracing::info!(
                "offline: every session finished or waits for what the capture does not hold \
                 ({open} open at the capture's end: every byte sent and answered)"
            );
        }
        return true;
    }
    if now >= done_at + st.session_timeout {
        tracing::warn!(
            "offline: {} session(s) still open {:?} after the file ended (--session-timeout); stopping",
            engine.session_count(),
            st.session_timeout
        );
        return true;
    }
    false
}

/// Whether the registration changes waiting go to the registry now: Registers at once (a
/// connection's first segment waits for its verdict), with every Unregister before them, in
/// order; Unregisters alone once the oldest waited [`UNREGISTER_WAIT`] or [`UNREGISTER_BATCH`]
/// of them wait.
pub(super) fn publish_now(
    register: bool,
    unregister_since: Option<Instant>,
    now: Instant,
    waiting: usize,
) -> bool {
    register
        || waiting >= UNREGISTER_BATCH
        || unregister_since.is_some_and(|t| now >= t + UNREGISTER_WAIT)
}

fn drain_control(engine: &mut Engine, io: &LoopIo, st: &mut State, now: Instant, flush: bool) {
    let mut register = false;
    while let Some(ev) = engine.poll_control() {
        register |= matches!(ev, RegEvent::Register(_));
        if !register && st.unregister_since.is_none() {
            st.unregister_since = Some(now);
        }
        st.events.push(ev);
    }
    if register {
        st.last_register = Some(now);
    }
    if st.events.is_empty() {
        return;
    }
    if !(flush || publish_now(register, st.unregister_since, now, st.events.len())) {
        return;
    }
    // Routes first: a record may follow the registration as soon as the intercept has it.
    if let Some(routes) = &io.routes {
        routes.apply(io.worker, &st.events);
    }
    io.registry.apply(&st.events);
    st.events.clear();
    st.unregister_since = None;
}

/// Log the intercepts' refusals the engine reports (once per map and verdict).
fn log_refusals(engine: &mut Engine) {
    while let Some(r) = engine.poll_refusal() {
        let why = match r.verdict {
            RegVerdict::PortNotGuarded => format!(
                "its port {} is not guarded there (intercept --port)",
                r.tuple.server.port()
            ),
            RegVerdict::FamilyNotGuarded => "its IP family is not guarded there".to_string(),
            RegVerdict::LimitReached => {
                "the intercept's registration limit for this copier is reached".to_string()
            }
            v => format!("verdict {}", v.code()),
        };
        tracing::error!(
            "--map {}: the intercept refused to guard the test connections to {} (test port {}): {why} ({}); \
             these sessions are not copied (nothing is sent to the test server for them); further refusals are \
             only counted in copier_sessions_failed_total{{reason=\"registration_refused\"}}",
            r.map,
            r.tuple.server,
            r.tuple.server.port(),
            r.verdict.as_str()
        );
    }
}

pub(super) fn drain_outputs(engine: &mut Engine, io: &mut LoopIo, st: &mut State, now: Instant) {
    log_refusals(engine);
    crate::spread::log_events(engine);
    drain_control(engine, io, st, now, false);
    for _ in 0..TRANSMITS_PER_TURN {
        if io.sender.pending() >= SEND_HIGH_WATER {
            io.sender.flush(now);
            if io.sender.pending() >= SEND_HIGH_WATER {
                break; // the kernel pushes back: leave the rest in the engine
            }
        }
        let mut buf = io.sender.buffer();
        match engine.poll_transmit(now, &mut buf) {
            Some(t) => {
                buf.truncate(t.len);
                io.taps.transmit(&t, &buf);
                io.sender
                    .enqueue_segment(t.tuple, t.dst, buf, t.gso_size, now);
                if io.sender.pending() >= sys::MAX_BATCH {
                    io.sender.flush(now);
                }
            }
            None => {
                io.sender.recycle(buf);
                break;
            }
        }
    }
    // Sending may have produced no new registrations, but a timer or record may have.
    drain_control(engine, io, st, now, false);
    io.sender.flush(now);
    // the run trace's units, --compare's send times
    io.taps.flushed(engine);
}

pub(super) fn export(engine: &Engine, io: &LoopIo, st: &State) {
    sys::trim_after_peak(engine.session_count());
    crate::spread::export(engine);
    crate::shaping::export(engine, Instant::now());
    m::export(&Snapshot {
        engine: engine.stats(),
        memory: engine.memory_used(),
        capture: io.source.stats(),
        send: io.sender.stats(),
        send_queue: io.sender.pending(),
        intercepts: io.connected.load(Ordering::SeqCst),
        registered: io.registry.len(),
        panics: st.panics,
    });
}
