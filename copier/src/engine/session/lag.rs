//! Replay lag and answer times (see "Replay lag" in the session's documentation): a unit's lag
//! counted when its first byte first leaves, and its answer time when the test server answers.

use std::time::Instant;

use common::seq::SeqNum;

use super::super::event::{Event, Events};
use super::super::stamp::Stamp;
use super::super::stats::EngineStats;
use super::Session;

impl Session {
    /// Count the replay lag of every request unit whose first byte the current connection has
    /// now sent for the first time (`snd_max` passed its start).
    pub(super) fn note_sent(
        &mut self,
        stats: &mut EngineStats,
        events: &mut Events,
        now: Instant,
        snd_max: SeqNum,
    ) {
        let s = &self.stream;
        let fresh =
            |at: SeqNum, done: Option<SeqNum>| done.is_none_or(|d| at.gt(d)) && snd_max.gt(at);
        if fresh(s.cur_start, self.lag_done) {
            if let Some(t) = s.cur_t {
                stats
                    .replay_lag
                    .record(now.saturating_duration_since(t.at()));
            }
            stats.units_sent += 1;
            // Timed until its first answer byte; its trace row waits for that.
            self.sent_at = Some(Stamp::of(now));
            self.lag_done = Some(s.cur_start);
        }
        let done = self.lag_done;
        let from = s
            .bounds
            .partition_point(|b| done.is_some_and(|d| !b.at.gt(d)));
        for b in s.bounds.range(from..) {
            if !fresh(b.at, self.lag_done) {
                break;
            }
            if let Some(t) = b.t {
                stats
                    .replay_lag
                    .record(now.saturating_duration_since(t.at()));
            }
            stats.units_sent += 1;
            events.unit_sent(now, self.slot, None);
            // The current unit is not answered yet: this one goes ahead of an answer.
            stats.units_ahead += u64::from(b.at.gt(s.cur_start));
            self.lag_done = Some(b.at);
        }
    }

    /// The timed unit got its first answer byte (`answered`), or is given up unanswered
    /// (released by timeout, the session ends): its trace row, and its answer time for the
    /// test server's figures.
    pub(super) fn note_answer(&mut self, events: &mut Events, now: Instant, answered: bool) {
        let Some(at) = self.sent_at.take().map(Stamp::at) else {
            return;
        };
        let took = answered.then(|| now.saturating_duration_since(at));
        if let Some(took) = took {
            events.push(Event::Answered {
                at: now,
                server: self.target.into(),
                took,
            });
        }
        events.unit_sent(at, self.slot, took);
    }
}
