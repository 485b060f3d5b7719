//! Whether the engine thread keeps up: when it is behind (a backlog of captured packets or the
//! kernel's drops), what it gives up meanwhile, and the warnings about shedding.

use std::time::Instant;

use crate::engine::{Engine, OverloadReason};

use super::{LoopIo, Source, State, OVERLOAD_AFTER_DROPS, SHED_LOG_EVERY};

/// Whether the copier is behind, from what the capture holds for the engine (`backlog` of at
/// most `max` bytes) and when the kernel last dropped captured packets: behind after drops for
/// [`OVERLOAD_AFTER_DROPS`], or while over a quarter of the capture's room waits; once behind,
/// until under a sixteenth waits (so that it does not flap at the edge).
pub fn overload_of(
    backlog: usize,
    max: usize,
    drops_at: Option<Instant>,
    was: Option<OverloadReason>,
    now: Instant,
) -> Option<OverloadReason> {
    if drops_at.is_some_and(|t| now < t + OVERLOAD_AFTER_DROPS) {
        return Some(OverloadReason::KernelDrops);
    }
    if backlog.saturating_mul(4) > max {
        return Some(OverloadReason::CaptureBacklog);
    }
    if was.is_some() && backlog.saturating_mul(16) > max {
        return Some(OverloadReason::CaptureBacklog);
    }
    None
}

/// Tell the engine whether the copier keeps up (live capture only): while it is behind, no
/// new session starts, so that the sessions it copies keep the capacity and are copied whole
/// (see [`Engine::set_overload`]). Says so in the log when it starts (at most every
/// [`SHED_LOG_EVERY`]) and ends.
pub(super) fn overload_turn(engine: &mut Engine, io: &LoopIo, st: &mut State, now: Instant) {
    let Source::Live(feed) = &io.source else {
        return;
    };
    // (The capture reads the ring's drop counter at once when a block says the kernel lost
    // packets: `Capture::drain`.)
    let drops = feed.stats().kernel_drops;
    if drops > st.overload_drops {
        st.overload_drops = drops;
        st.drops_grew_at = Some(now);
        // Sessions that meet a hole about now are given up there, not cut (`Engine::note_capture_loss`).
        engine.note_capture_loss(now);
    }
    let was = engine.overloaded();
    let backlog = feed.queued_bytes();
    let why = overload_of(backlog, feed.max_bytes(), st.drops_grew_at, was, now);
    if let Some(why) = why {
        // Far behind (half the capture's room waits, or packets were lost): the sessions that
        // have sent nothing yet go too, before the kernel drops packets of the others.
        if backlog.saturating_mul(2) > feed.max_bytes() || why == OverloadReason::KernelDrops {
            let n = engine.give_up_unsent(now, why);
            if n > 0 {
                tracing::debug!(
                    "far behind ({} KiB wait): gave up {n} session(s) that had sent nothing yet",
                    backlog >> 10
                );
            }
        }
    }
    if why == was {
        return;
    }
    engine.set_overload(now, why);
    let shed = engine.stats().sessions_shed_overload.clone();
    match why {
        Some(why) if was.is_none() && st.overload_log_at.is_none_or(|t| now >= t + SHED_LOG_EVERY) => {
            st.overload_log_at = Some(now);
            let what = match why {
                OverloadReason::KernelDrops | OverloadReason::Hole => "the kernel dropped captured packets".to_string(),
                OverloadReason::CaptureBacklog => {
                    format!("{} KiB of captured packets wait for the engine", feed.queued_bytes() >> 10)
                }
            };
            tracing::warn!(
                "the copier is behind ({what}): new sessions are not copied until it catches up, so the ones it copies stay whole (copier_sessions_shed_overload_total; {} left out so far)",
                shed.total()
            );
        }
        None => tracing::info!(
            "the copier caught up: new sessions are copied again ({} left out so far: {} for a capture backlog, {} after kernel drops, \
             {} given up at a hole the capture lost)",
            shed.total(),
            shed.capture_backlog,
            shed.kernel_drops,
            shed.hole
        ),
        _ => {}
    }
}

/// Warn when sessions or pending SYNs were shed to stay under `--max-memory`, at most every
/// [`SHED_LOG_EVERY`].
pub(super) fn log_shedding(engine: &Engine, st: &mut State, now: Instant) {
    let e = engine.stats();
    if e.sessions_failed.idle_timeout > 0 && !st.idle_timeout_logged {
        st.idle_timeout_logged = true;
        tracing::info!(
            "idle sessions end after --idle-timeout (copier_sessions_failed_total{{reason=\"idle_timeout\"}}): a \
             client that sends again starts a new session at its next request, on a new test connection; logged once"
        );
    }
    let (sessions, syns, idle) = (
        e.sessions_shed,
        e.syns_incomplete.shed,
        e.sessions_failed.idle_shed,
    );
    if (sessions, syns, idle) == st.shed_logged
        || st.shed_log_at.is_some_and(|t| now < t + SHED_LOG_EVERY)
    {
        return;
    }
    tracing::warn!(
        "over --max-memory / --max-pending-syns / --max-sessions: shed {} session(s) ({} of them idle; idle ones \
         first, then quiet longest first) and {} captured SYN(s) waiting for their handshake (oldest first) since \
         the last warning; {} byte(s) held now (copier_sessions_shed_total, copier_sessions_failed_total\
         {{reason=\"idle_shed\"|\"memory\"}}, copier_syns_incomplete_total{{reason=\"shed\"}}); a shed idle \
         session's client that sends again starts a new session at its next request",
        sessions.saturating_sub(st.shed_logged.0),
        idle.saturating_sub(st.shed_logged.2),
        syns.saturating_sub(st.shed_logged.1),
        engine.memory_used()
    );
    st.shed_logged = (sessions, syns, idle);
    st.shed_log_at = Some(now);
}
