//! The engine's side of the run trace (`--trace`): who each copy is (copy number, virtual user,
//! pool, ON/OFF source, test server) and every request unit it sends for the first time, with
//! its answer time.
//!
//! Owns: [`UnitSent`] (one row of the trace) and [`Tags`] (the copy's identity by session slot,
//! and the rows not yet taken by `Engine::poll_unit`). Sessions only queue an `Event::UnitSent`
//! (`super::event`) when a unit's first byte leaves (the unit pacing waits on: when its first
//! answer byte comes or it is given up, with its send time and answer time); the engine turns
//! those into rows as it drains its events, always before a slot is freed, so a row is never
//! lost or given to the wrong copy.
//! Nothing is kept when tracing is off.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::shared::{Planner, SlotRef};

/// One request unit sent for the first time (a row of the run trace).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UnitSent {
    /// When, on the planner's clock (the profile's schedule time: since the engine's first packet).
    pub t: Duration,
    /// Which copy of the captured session (0, 1, ...).
    pub copy: u32,
    /// The virtual user, when the profile has pools.
    pub user: Option<u32>,
    /// The user's pool (index into `Engine::pool_names`).
    pub pool: Option<u16>,
    /// The ON/OFF source that gates the copy, when gating is on.
    pub source: Option<u32>,
    /// The test server.
    pub target: SocketAddr,
    /// From the unit's first byte sent to the first byte of its answer (the first record of
    /// the test server carrying answer bytes for it); `None` when the unit was not timed (sent
    /// ahead of another's answer) or got no answer byte (timed out, session ended).
    pub answer: Option<Duration>,
}

#[derive(Debug, Clone, Copy)]
struct Tag {
    gen: u32,
    copy: u32,
    user: Option<u32>,
    pool: Option<u16>,
    source: Option<u32>,
    target: SocketAddr,
}

/// The identity of every traced copy, by slot, and the rows waiting to be taken.
#[derive(Debug, Default)]
pub(crate) struct Tags {
    by_slot: Vec<Option<Tag>>,
    rows: VecDeque<UnitSent>,
}

impl Tags {
    /// Note who the copy in `slot` is.
    pub(crate) fn set(
        &mut self,
        slot: SlotRef,
        plan: &shaper::CopyPlan,
        pool: Option<u16>,
        target: SocketAddr,
    ) {
        let i = slot.idx as usize;
        if self.by_slot.len() <= i {
            self.by_slot.resize(i + 1, None);
        }
        self.by_slot[i] = Some(Tag {
            gen: slot.gen,
            copy: plan.copy,
            user: plan.user,
            pool,
            source: plan.source,
            target,
        });
    }

    /// Turn a session's note (a unit of the copy in `slot` sent at `at`, answered after
    /// `answer`: `Event::UnitSent`) into a row (to be called before `slot` is freed).
    pub(crate) fn note(
        &mut self,
        at: Instant,
        slot: SlotRef,
        answer: Option<Duration>,
        plan: &mut Planner,
    ) {
        let Some(Some(tag)) = self.by_slot.get(slot.idx as usize) else {
            return;
        };
        if tag.gen != slot.gen {
            return;
        }
        self.rows.push_back(UnitSent {
            t: plan.clock(at),
            copy: tag.copy,
            user: tag.user,
            pool: tag.pool,
            source: tag.source,
            target: tag.target,
            answer,
        });
    }

    /// The next row.
    pub(crate) fn pop(&mut self) -> Option<UnitSent> {
        self.rows.pop_front()
    }
}
