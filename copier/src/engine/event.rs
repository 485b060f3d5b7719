//! What the sessions tell the engine: typed events, pushed in order into one queue
//! ([`Events`], in `Shared`) while a session runs, and drained in that order by the engine
//! (`Engine::drain_events`) into their targets: the registrations into the control output
//! (`Engine::poll_control`), answer times and outcomes into the test servers' figures
//! (`Targets`), units
//! sent into the run trace's rows (`trace::Tags`), and sessions given up at a lost hole into
//! the overload counters and the shed keys.
//!
//! Invariants: the engine drains the queue before a slot is freed (`Engine::remove`: a trace
//! row is never given to the wrong copy), after every session operation (`Engine::after_op`,
//! before it looks at the session: an outcome counts before the copy leaves its server)
//! and before any of its outputs is polled, so nothing waits in it across a call of the I/O
//! layer. Draining pushes no event. The queue keeps its room: no allocation per event once warm.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::flow::FourTuple;

use super::slot::SlotRef;

/// Something that happened in a session, for the engine to pass on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// A test tuple became a session's (indexed): the intercepts must guard it before any of
    /// its packets leaves.
    Registered(FourTuple),
    /// A test tuple was dropped (out of the index): the intercepts may forget it.
    Unregistered(FourTuple),
    /// The planned copy in `slot`, caught mid-stream, synchronised at `at` and started on its
    /// test server `server` (`Targets::on_started`: from now on it is live there and an answer
    /// is expected; not before, as it sent nothing while it waited).
    Started {
        at: Instant,
        slot: SlotRef,
        server: SocketAddr,
    },
    /// The copy in `slot` ended at `at`: `failed` by its test server's doing (refused,
    /// retransmit or reconnect limit), or completed (`Targets::on_outcome`: the server's
    /// failure share). Not sent for other ends.
    Ended {
        at: Instant,
        slot: SlotRef,
        failed: bool,
    },
    /// A timed request unit got its first answer byte at `at`, `took` after its first byte
    /// left, from the test server `server`.
    Answered {
        at: Instant,
        server: SocketAddr,
        took: Duration,
    },
    /// (Run trace only.) A request unit of the session in `slot` was sent for the first time
    /// at `at`, answered after `answer` (`None`: not timed, or given up unanswered).
    UnitSent {
        at: Instant,
        slot: SlotRef,
        answer: Option<Duration>,
    },
    /// The session of captured 4-tuple `key` was given up at `at` at a hole the capture lost
    /// (`Session::skip_gap`): counted once per captured session and kept out.
    ShedAtHole { at: Instant, key: FourTuple },
}

/// The queue of [`Event`]s, in the order they happened.
#[derive(Debug, Default)]
pub(crate) struct Events {
    q: Vec<Event>,
    /// Whether units sent are noted ([`Event::UnitSent`]: only with a run trace).
    trace: bool,
}

impl Events {
    /// An empty queue; `trace`: keep [`Event::UnitSent`]s.
    pub(crate) fn new(trace: bool) -> Events {
        Events {
            q: Vec::new(),
            trace,
        }
    }

    /// Queue `e`.
    #[inline]
    pub(crate) fn push(&mut self, e: Event) {
        self.q.push(e);
    }

    /// Queue an [`Event::UnitSent`] when tracing (else nothing).
    #[inline]
    pub(crate) fn unit_sent(&mut self, at: Instant, slot: SlotRef, answer: Option<Duration>) {
        if self.trace {
            self.q.push(Event::UnitSent { at, slot, answer });
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// The queued events, leaving the queue empty; give the (drained) vector back with
    /// [`Events::restore`] to keep its room.
    pub(crate) fn take(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.q)
    }

    /// Put back the vector [`Events::take`] gave (emptied), unless events came meanwhile.
    pub(crate) fn restore(&mut self, mut q: Vec<Event>) {
        if self.q.is_empty() {
            q.clear();
            self.q = q;
        }
    }

    /// Give back the room of a peak.
    pub(crate) fn shrink_to_fit(&mut self) {
        self.q.shrink_to_fit();
    }
}
