//! The engine thread's optional features (`--trace`, `--target-rate`, `--record`, `--compare`):
//! each implements [`Tap`], and the loop holds them in [`Taps`] and calls every one at the
//! same points (a packet about to be sent, the sender flushed, a batch of records, the
//! capture file's packets, the report tick once a second, the end), instead of one hook and
//! one branch per feature. Every method does nothing by default.
//!
//! Invariants: with no feature the loop pays one test of an empty list per point; a record
//! batch goes through the per-record hook only when a feature asks for the records
//! ([`Tap::wants_records`]).

use std::net::SocketAddr;
use std::time::Instant;

use common::proto::Record;

use crate::engine::{Engine, Transmit};
use crate::offline::Replay;

/// A feature of the engine thread's loop: what it does at each point of a turn.
pub trait Tap: Send + std::fmt::Debug {
    /// A packet the engine made (`pkt`, described by `t`), about to be queued for sending.
    fn on_transmit(&mut self, _t: &Transmit, _pkt: &[u8]) {}
    /// The sender flushed the packets of a round (after [`Tap::on_transmit`]s).
    fn on_flushed(&mut self, _engine: &mut Engine) {}
    /// Whether [`Tap::on_record`] and [`Tap::on_records`] are wanted.
    fn wants_records(&self) -> bool {
        false
    }
    /// One record of a batch, just before the engine takes it (which may end its session).
    fn on_record(&mut self, _engine: &Engine, _r: &Record) {}
    /// The batch of records the engine took (each record at the instant `at` of its read).
    fn on_records(&mut self, _at: Instant, _batch: &mut Vec<Record>) {}
    /// The capture file (`--offline`) handed packets to the engine this turn.
    fn on_replayed(&mut self, _replay: &mut Replay) {}
    /// The report tick (about once a second), before the counters are exported.
    fn on_tick(&mut self, _engine: &mut Engine, _now: Instant) {}
    /// The loop ended and every session was closed.
    fn on_end(&mut self, _engine: &mut Engine) {}
    /// Whether it times the test server's answers, so that records must not wait (the links
    /// the loop reads do not rest: see `link_rest`).
    fn times_answers(&self) -> bool {
        false
    }
}

/// The loop's features.
#[derive(Debug, Default)]
pub struct Taps {
    all: Vec<Box<dyn Tap>>,
    /// Whether any wants the records.
    records: bool,
    /// Whether any times the answers.
    answers: bool,
}

impl Taps {
    /// The features `all`, called in that order.
    #[must_use]
    pub fn new(all: Vec<Box<dyn Tap>>) -> Taps {
        let records = all.iter().any(|t| t.wants_records());
        let answers = all.iter().any(|t| t.times_answers());
        Taps {
            all,
            records,
            answers,
        }
    }

    /// Whether any feature times the answers ([`Tap::times_answers`]).
    #[must_use]
    pub fn time_answers(&self) -> bool {
        self.answers
    }

    #[inline]
    pub(super) fn transmit(&mut self, t: &Transmit, pkt: &[u8]) {
        for x in &mut self.all {
            x.on_transmit(t, pkt);
        }
    }

    pub(super) fn flushed(&mut self, engine: &mut Engine) {
        for x in &mut self.all {
            x.on_flushed(engine);
        }
    }

    /// Hand `batch` to the engine (each record at `at`), and to the features that want it.
    pub(super) fn records(&mut self, engine: &mut Engine, at: Instant, mut batch: Vec<Record>) {
        if !self.records {
            for r in &batch {
                engine.handle_record(at, r);
            }
            return;
        }
        for r in &batch {
            for x in &mut self.all {
                x.on_record(engine, r);
            }
            engine.handle_record(at, r);
        }
        for x in &mut self.all {
            x.on_records(at, &mut batch);
        }
    }

    pub(super) fn replayed(&mut self, replay: &mut Replay) {
        for x in &mut self.all {
            x.on_replayed(replay);
        }
    }

    pub(super) fn tick(&mut self, engine: &mut Engine, now: Instant) {
        for x in &mut self.all {
            x.on_tick(engine, now);
        }
    }

    pub(super) fn end(&mut self, engine: &mut Engine) {
        for x in &mut self.all {
            x.on_end(engine);
        }
    }
}

/// The run trace (`--trace`): the units sent, taken after every round of sending; the file
/// flushed every tick and at the end.
impl Tap for crate::trace::TraceSink {
    fn on_flushed(&mut self, engine: &mut Engine) {
        self.drain(engine);
    }
    fn on_tick(&mut self, _engine: &mut Engine, _now: Instant) {
        self.flush(false);
    }
    fn on_end(&mut self, engine: &mut Engine) {
        self.drain(engine);
        self.flush(true);
    }
}

/// The closed loop on the rate (`--target-rate`): one step a tick.
impl Tap for crate::rate::RateDriver {
    fn on_tick(&mut self, engine: &mut Engine, now: Instant) {
        self.tick(engine, now);
    }
}

/// The archive (`--record`): every packet about to be sent; a write that fails (a full disk)
/// is logged once and counted by the archive, which tries again (copying goes on).
impl Tap for crate::record::Recorder {
    fn on_transmit(&mut self, t: &Transmit, pkt: &[u8]) {
        self.record(t.tuple, t.copy.map(|c| c.0), t.copy.map(|c| c.1), pkt);
    }
}

/// `--compare`: copies of the records (of the copies that stand for the captured client),
/// the send time of the copies' requests, and offline the file's packets of both directions.
#[derive(Debug)]
pub struct CompareTap {
    tap: crate::shadow::Tap,
    /// The batch's records' copies (`Engine::record_copy`, asked before the engine takes each).
    copies: Vec<Option<(u16, Option<SocketAddr>)>>,
    /// Which records of the batch go to the comparison.
    compared: Vec<bool>,
}

impl CompareTap {
    /// The feature on `tap`.
    #[must_use]
    pub fn new(tap: crate::shadow::Tap) -> CompareTap {
        CompareTap {
            tap,
            copies: Vec::new(),
            compared: Vec::new(),
        }
    }
}

impl Tap for CompareTap {
    fn on_transmit(&mut self, t: &Transmit, pkt: &[u8]) {
        // when the copy's request bytes leave (a test answer time's start)
        self.tap.sent(t, pkt);
    }
    fn on_flushed(&mut self, _engine: &mut Engine) {
        self.tap.flush_sent();
    }
    fn wants_records(&self) -> bool {
        true
    }
    fn on_record(&mut self, engine: &Engine, r: &Record) {
        self.copies.push(engine.record_copy(r));
    }
    fn on_records(&mut self, at: Instant, batch: &mut Vec<Record>) {
        // the records of the copies that stand for the captured client (copy 0 and its
        // baseline copy), filed under its address and port
        self.compared.clear();
        // Only this batch's: a batch the engine panicked in left its copies behind.
        let stale = self.copies.len().saturating_sub(batch.len());
        self.copies.drain(..stale);
        for (r, copy) in batch.iter_mut().zip(self.copies.drain(..)) {
            self.compared.push(match copy {
                None => true,
                Some((_, None)) => false,
                Some((_, Some(client))) => {
                    crate::shadow::file_under(r, client);
                    true
                }
            });
        }
        self.tap.records(at, std::mem::take(batch), &self.compared);
    }
    fn on_replayed(&mut self, replay: &mut Replay) {
        self.tap.packets(replay.take_tapped());
    }
    fn times_answers(&self) -> bool {
        true
    }
}
