//! The planner's hold on a copy's request units, for a planner that gates them (a profile:
//! think time and ON/OFF periods, `Shaper::release_at`). The flags' plan gates nothing: its
//! sessions have no [`Gate`].
//!
//! Once the current unit's first bytes are there, the gate asks when it may go (unit index
//! counted per copy, the planner's clock at the unit's online arrival, i.e. when its first
//! bytes were captured) and holds it until then; the hold lifts once that instant has passed.
//! A unit is held only before its first byte goes, so a request is never cut; a planner that no
//! longer knows the copy (its translation expired) holds nothing.

use std::collections::VecDeque;
use std::time::Instant;

use common::seq::SeqNum;

use super::shared::Planner;
use super::stream::Stream;

/// One copy's gate (see the module documentation).
#[derive(Debug)]
pub(crate) struct Gate {
    /// The planner's id of the copy.
    id: shaper::SessionId,
    /// The start of the unit the planner was last asked about, and how many units were asked
    /// about.
    asked: Option<SeqNum>,
    units_asked: u32,
    /// The instant before which the current unit may not go (held, never dropped).
    until: Option<Instant>,
    /// When the first bytes of each unit not yet asked about were captured (the online arrival
    /// `Shaper::release_at` scales think time from), by the unit's first byte.
    arrivals: VecDeque<(SeqNum, Instant)>,
}

impl Gate {
    pub(crate) fn new(id: shaper::SessionId) -> Gate {
        Gate {
            id,
            asked: None,
            units_asked: 0,
            until: None,
            arrivals: VecDeque::new(),
        }
    }

    /// The instant the current hold lifts, if any.
    pub(crate) fn until(&self) -> Option<Instant> {
        self.until
    }

    /// Asks the planner about the current unit once its first bytes are there, and lifts the
    /// hold once due.
    pub(crate) fn update(&mut self, stream: &Stream, plan: &mut Planner, now: Instant) {
        let start = stream.cur_start;
        if self.asked != Some(start) && stream.next.gt(start) {
            self.asked = Some(start);
            // The unit's online arrival: when its first bytes were captured (not later than
            // now; earlier units' entries go).
            while self.arrivals.front().is_some_and(|&(at, _)| start.gt(at)) {
                self.arrivals.pop_front();
            }
            let arrived = match self.arrivals.front() {
                Some(&(at, t)) if at == start => t,
                _ => now,
            };
            let t = plan.clock(arrived.min(now));
            let index = self.units_asked;
            self.units_asked += 1;
            let until = plan.shaper.release_at(t, self.id, index).ok();
            if let Some(u) = until {
                plan.gated_units += 1;
                plan.gate_delay += u.saturating_sub(t);
            }
            self.until = until.and_then(|d| plan.instant(d));
        }
        if self.until.is_some_and(|u| u <= now) {
            self.until = None;
        }
    }

    /// Notes the capture instant of the units whose first bytes just arrived (the current one
    /// and the later ones the stream knows the starts of).
    pub(crate) fn note_arrivals(&mut self, stream: &Stream, now: Instant) {
        let known =
            |a: &VecDeque<(SeqNum, Instant)>, at: SeqNum| a.back().is_some_and(|&(b, _)| b.ge(at));
        let cur = stream.cur_start;
        if self.asked != Some(cur) && !known(&self.arrivals, cur) {
            self.arrivals.push_back((cur, now));
        }
        for b in stream.bounds.iter() {
            if b.at.gt(cur) && !known(&self.arrivals, b.at) {
                self.arrivals.push_back((b.at, now));
            }
        }
    }

    /// Whether the unit starting at `cur_start` is held (asked about and not yet due, or not
    /// asked about yet).
    pub(crate) fn held(&self, cur_start: SeqNum) -> bool {
        self.until.is_some() || self.asked != Some(cur_start)
    }
}
