//! One client session: its captured byte stream ([`Stream`]) and the test connections
//! ([`Conn`]) that carry it, with the rules that tie them: when a connection opens, which bytes
//! it may send (pacing, the greeting gate, the client's FIN), when the test server's close
//! means "carry the rest on a new connection", and how a session ends.
//!
//! Pacing (which units the current connection may send, and when the test server answered
//! them) is in [`pacing`]; the planner's hold on units in `gate`. Of the session's own rules,
//! the test server's records are taken in `record`, capture holes in `gap`, the replay lag and
//! answer times in `lag`, the intercepts' verdicts in `verdict` and the end of a session in
//! `end`.
//!
//! Replay lag: when a unit's first byte is first sent, the time since it was captured goes
//! into `EngineStats::replay_lag` (once per unit and copy; resends do not count). The last unit
//! before the client's FIN or RST is never called answered by size alone: the close waits for
//! the test server to go quiet, so that a test answer longer than the online one is not cut.
//!
//! The client's RST after data it sent ("closing by reset", as load generators end their
//! connections) does not drop what pacing still holds: every captured request is carried, and
//! the RST goes to the test server once the last one is answered (or timed out). That wait is
//! bounded by `session_timeout` from the RST.
//!
//! Capture holes: when the capture loses a client segment the online server got, the client
//! never sends it again and the stream waits for it forever. Once the hole is `GAP_WAIT` old,
//! a later request is known (a held segment acks more than the damaged unit did: see
//! [`Stream::gap_resume`]) and every unit before the damaged one is answered, the damaged unit
//! is given up (`capture_gap`) and the stream resumes at that later request. Sequence numbers
//! are the client's on every connection, so the skip cannot go on the same connection: the
//! current one is reset and the rest goes on a new one, as after the test server's close. No
//! damaged unit is ever completed: what of it was sent before the hole dies with the RST.
//! When the capture lost packets about the time the hole began (`Shared::capture_loss_at`:
//! kernel drops), the whole session is given up at `GAP_WAIT` instead (reset, failed as
//! `overload`, counted by the engine as shed at a hole), so that a session the copier's own
//! overload damaged is copied whole or not at all.
//!
//! TIME_WAIT: a SYN answered by a bare ACK met a TIME_WAIT socket of the test server (client
//! port reuse); the connection resets it and sends the SYN again at once (`conn`); the second
//! time, the session moves the connection to another port ([`Session::move_port`]).
//!
//! Invariants:
//! - at most one current connection (`cur`) carries data; `old` holds only connections that
//!   are closing (lingering after a graceful close or a RST of ours);
//! - every connection in `cur` or `old` is registered in `Shared::by_test` under its tuple,
//!   and is unregistered exactly once, when it is dropped ([`Session::sweep`]);
//! - `Phase::Done` sessions hold no stream bytes and no `cur`; the engine removes them once
//!   `old` is empty.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use common::flow::{Endpoint, FourTuple};
use common::seq::SeqNum;
use common::wire::TcpFlags;

use super::answer::Watch;
use super::chunk::Payload;
use super::config::Params;
use super::conn::{Conn, Expiry, Sent, State, TxCtx};
use super::edit::Editor;
use super::event::Event;
use super::gate::Gate;
use super::pkt::Captured;
use super::shared::{Shared, SlotRef};
use super::stamp::Stamp;
use super::stats::FailReason;
use super::stream::Stream;

mod end;
mod gap;
mod lag;
mod pacing;
mod record;
mod verdict;

/// The planner's id of a copy, if it has one, in 8 bytes (an `Option<SessionId>` takes 16;
/// the planner counts its ids up from 0 and never reaches `u64::MAX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PlanId(u64);

impl PlanId {
    pub(crate) const NONE: PlanId = PlanId(u64::MAX);

    pub(crate) fn of(id: Option<shaper::SessionId>) -> PlanId {
        id.map_or(PlanId::NONE, |i| PlanId(i.0))
    }

    pub(crate) fn get(self) -> Option<shaper::SessionId> {
        (self != PlanId::NONE).then_some(shaper::SessionId(self.0))
    }

    /// The id, leaving none.
    pub(crate) fn take(&mut self) -> Option<shaper::SessionId> {
        std::mem::replace(self, PlanId::NONE).get()
    }
}

/// The connections of a session that are closing (boxed: most sessions have none and pay a
/// pointer; room for one more at a time: 10,000 sessions ending together would otherwise each
/// take a place for four connections, 1 KB, until they linger out). Its room goes back once
/// the last one is dropped.
// The box is the point: 8 bytes in every slot rather than the collection's header.
#[allow(clippy::box_collection)]
#[derive(Debug, Default)]
pub(crate) struct Closing(Option<Box<Vec<Conn>>>);

impl Closing {
    fn push(&mut self, c: Conn) {
        let v = self.0.get_or_insert_with(Box::default);
        v.reserve_exact(1);
        v.push(c);
    }

    /// Keep the connections `f` says; the room goes back when none is left.
    fn retain(&mut self, f: impl FnMut(&Conn) -> bool) {
        if let Some(v) = self.0.as_mut() {
            v.retain(f);
            if v.is_empty() {
                self.0 = None;
            }
        }
    }

    /// All of them, leaving none.
    fn take(&mut self) -> Vec<Conn> {
        self.0.take().map_or_else(Vec::new, |v| *v)
    }
}

impl std::ops::Deref for Closing {
    type Target = [Conn];
    fn deref(&self) -> &[Conn] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }
}

impl std::ops::DerefMut for Closing {
    fn deref_mut(&mut self) -> &mut [Conn] {
        match self.0.as_deref_mut() {
            Some(v) => v.as_mut_slice(),
            None => &mut [],
        }
    }
}

/// How long a hole in the captured stream may wait for its bytes before the damaged request
/// unit is given up (when a later request is known).
const GAP_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// How often a hole that nothing else will resolve is looked at again (a capture loss noticed
/// late gives its session up: see `skip_gap`).
const HOLE_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Strikes (answers that timed out, came shorter or longer than the online ones) from which a
/// session's pacing is lock-step (window 1), until answers that match forgive them.
const STRIKES_LOCKSTEP: u8 = 3;

/// `Session::strikes` of a session that stays lock-step for good (the test server closed a
/// connection with requests left): nothing forgives it.
const STRIKES_FOR_GOOD: u8 = u8::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Caught mid-stream: waiting for the client's ACK number to move past this one (a
    /// request boundary) before starting.
    Syncing {
        ack: SeqNum,
    },
    Active,
    Done,
}

/// How a session ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// As the client ended it.
    Completed,
    /// Without completing.
    Failed(FailReason),
    /// Idle when the capture file ended (offline): every byte sent and answered, the client's
    /// connection still open. Neither completed nor failed.
    LeftOpen,
}

/// A hole in the captured stream that the session waits at.
#[derive(Debug)]
struct Gap {
    /// Since when the stream has had a hole at `next`, if it has.
    since: Option<Instant>,
    next: SeqNum,
    /// When to look at the hole again (set by `skip_gap`, always in its future).
    due: Option<Instant>,
}

#[derive(Debug)]
pub(crate) struct Session {
    pub key: FourTuple,
    pub slot: SlotRef,
    /// The copy's test server (an `Endpoint`: 19 bytes where a `SocketAddr` takes 32).
    target: Endpoint,
    /// The copy's client address (the plan's: the captured client's, or a pool's).
    pub client_ip: IpAddr,
    /// The client port the first test connection takes when free (the plan's: the captured
    /// client's, or the profile's virtual port).
    pub want_port: u16,
    /// The planner's id of this copy (ended in the planner when the engine removes the copy).
    pub plan_id: PlanId,
    /// The planner's hold on the request units, when it gates them (a profile; boxed: a
    /// session without one pays a pointer).
    pub gate: Option<Box<Gate>>,
    pub phase: Phase,
    pub isn: SeqNum,
    pub stream: Stream,
    pub cur: Option<Conn>,
    pub old: Closing,
    midstream: bool,
    tsval: Option<u32>,
    pub last_activity: Stamp,
    unit_acked_at: Option<Stamp>,
    /// When the unit pacing waits on first left, until its first answer byte (its answer
    /// time: [`Session::note_answer`]); units sent ahead of it are not timed.
    sent_at: Option<Stamp>,
    /// How far the test server answered the unit pacing waits on.
    watch: Watch,
    /// Request units the current connection may have in flight (windowed pacing: see
    /// [`Session::window`]).
    win: u32,
    /// Answers that timed out, or whose size differed from the online one, less the answers
    /// that matched since (see `Session::strike`); from [`STRIKES_LOCKSTEP`] on the session is
    /// lock-step, and [`STRIKES_FOR_GOOD`] (the test server closed a connection with requests
    /// left) keeps it so.
    strikes: u8,
    /// The start of the last request unit whose replay lag was counted.
    lag_done: Option<SeqNum>,
    /// When the client reset the connection while requests were still to be carried.
    client_reset: Option<Stamp>,
    reconnects: u32,
    /// The capture hole the stream waits at (boxed: most sessions never have one; `None`
    /// when neither `since` nor `due` is set).
    gap: Option<Box<Gap>>,
    /// This copy counts the captured packets' drops for the session (see `on_captured`).
    lead: bool,
    /// The copy's index among the copies of its captured session (the dye value may carry it).
    pub copy: u16,
    pub armed: Option<Stamp>,
    pub in_ready: bool,
    /// Counted in the engine's sessions that are done and only linger.
    pub closing_counted: bool,
    /// As the lead copy of its captured session's group: a copy of the group started (counted
    /// in `captured_sessions_started`).
    pub group_started: bool,
    /// Ended while idle (`idle_timeout`, `idle_shed`): the engine takes it out of its captured
    /// session's group, so that the client's next packet starts a new session rather than
    /// being dropped after the close while this one lingers.
    pub detach: bool,
    /// Detached after the test side failed (`Refused`, `RetransmitLimit`, `ReconnectLimit`)
    /// with the client's connection open: the client's ACK number on the last unit captured.
    /// The client's next data resumes the copy only if it acks more (the online server answered
    /// in between, so it starts a new request unit, not the rest of the last one).
    pub resume_after: Option<SeqNum>,
    /// A request of the client's was seen answered online (its ACK moved past where it stood
    /// at the client's first data): see "Unproven sessions" in the engine's documentation.
    pub proven: bool,
    /// The client's ACK number at its first data captured, while not proven.
    proof_ack: Option<SeqNum>,
    /// When the session entered the table (`unproven_timeout` counts from there).
    born: Stamp,
}

impl Session {
    pub(crate) fn new(
        key: FourTuple,
        slot: SlotRef,
        target: SocketAddr,
        client_ip: IpAddr,
        now: Instant,
    ) -> Session {
        Session {
            key,
            slot,
            target: target.into(),
            client_ip,
            want_port: key.client.port(),
            plan_id: PlanId::NONE,
            gate: None,
            phase: Phase::Done,
            isn: SeqNum(0),
            stream: Stream::new(SeqNum(0)),
            cur: None,
            old: Closing::default(),
            midstream: false,
            tsval: None,
            last_activity: Stamp::of(now),
            unit_acked_at: None,
            sent_at: None,
            watch: Watch::default(),
            win: 1,
            strikes: 0,
            lag_done: None,
            client_reset: None,
            reconnects: 0,
            gap: None,
            lead: true,
            copy: 0,
            armed: None,
            in_ready: false,
            closing_counted: false,
            group_started: false,
            detach: false,
            resume_after: None,
            proven: false,
            proof_ack: None,
            born: Stamp::of(now),
        }
    }

    /// Whether the session is a mid-stream candidate: waiting for a request boundary to start.
    pub(crate) fn candidate(&self) -> bool {
        matches!(self.phase, Phase::Syncing { .. })
    }

    /// Look for the proof in a captured packet: data from the client, then an ACK past the one
    /// it carried (the online server answered it). A blind spoofer's lone segments never show
    /// it; see "Unproven sessions" in the engine's documentation for what it does not prove.
    fn note_proof(&mut self, sh: &mut Shared, c: &Captured<'_>) {
        let h = &c.hdr;
        if self.proven || !h.has(TcpFlags::ACK) || h.has(TcpFlags::RST) || h.has(TcpFlags::SYN) {
            return;
        }
        match self.proof_ack {
            Some(a) if h.ack.gt(a) => {
                self.proven = true;
                self.proof_ack = None;
                sh.stats.sessions_proven += 1;
                sh.stats.sessions_unproven = sh.stats.sessions_unproven.saturating_sub(1);
            }
            None if !c.payload.is_empty() => self.proof_ack = Some(h.ack),
            _ => {}
        }
    }

    /// How early the session goes when room is needed (lowest first): 0 a mid-stream
    /// candidate, 1 unproven and idle, 2 proven and idle, 3 unproven and busy, 4 proven and
    /// busy.
    pub(crate) fn shed_rank(&self) -> u8 {
        match (self.candidate(), self.proven, self.idle()) {
            (true, _, _) => 0,
            (false, false, true) => 1,
            (false, true, true) => 2,
            (false, false, false) => 3,
            (false, true, false) => 4,
        }
    }

    /// Start from the client's SYN (its ISN and timestamp value), its handshake completed.
    pub(crate) fn start_syn(
        &mut self,
        sh: &mut Shared,
        now: Instant,
        isn: SeqNum,
        tsval: Option<u32>,
    ) {
        self.isn = isn;
        self.stream = Stream::new(self.isn).with_editor(self.editor(sh));
        self.tsval = tsval;
        self.start(sh, now);
    }

    /// The request editor of this copy, with `--rules`.
    fn editor(&self, sh: &Shared) -> Option<Editor> {
        let r = sh.p.rules.as_ref()?;
        Some(Editor::new(
            r.clone(),
            self.copy,
            self.key.client.ip(),
            sh.meter.clone(),
        ))
    }

    /// Wait for a request boundary: `c` is the first captured packet. `lead`: this copy counts
    /// the captured packet's drops for the whole session (see `on_captured`).
    pub(crate) fn start_syncing(&mut self, sh: &mut Shared, c: &Captured<'_>, lead: bool) {
        self.phase = Phase::Syncing { ack: c.hdr.ack };
        self.midstream = true;
        if !c.payload.is_empty() && lead {
            sh.stats.drops.midstream_skip += 1;
        }
    }

    /// Start at `c`, the first data of a captured session that ended idle (shed, or its idle
    /// timeout) and whose client stream stood exactly there: `c` starts a request, as at the
    /// request boundary a session caught mid-stream waits for. The caller hands `c` over next.
    pub(crate) fn start_resumed(&mut self, sh: &mut Shared, now: Instant, c: &Captured<'_>) {
        self.midstream = true;
        self.isn = c.hdr.seq.sub(1);
        self.stream = Stream::midstream(self.isn, c.hdr.ack).with_editor(self.editor(sh));
        self.tsval = c.hdr.opts.ts.map(|t| t.0);
        self.start(sh, now);
    }

    /// Where the client's stream stands: its next sequence number.
    pub(crate) fn client_next(&self) -> SeqNum {
        self.stream.client_next()
    }

    /// Start copying: the first test connection opens. Without a free test tuple the copy does
    /// not start (`sessions_no_tuple`) and the session is done.
    fn start(&mut self, sh: &mut Shared, now: Instant) {
        let Some(tuple) =
            sh.tuples
                .free_tuple(self.client_ip, self.target.into(), Some(self.want_port))
        else {
            sh.stats.sessions_no_tuple += 1;
            self.phase = Phase::Done;
            return;
        };
        self.phase = Phase::Active;
        sh.stats.sessions_started += 1;
        sh.stats.sessions_active += 1;
        if self.midstream {
            sh.stats.sessions_midstream += 1;
        }
        self.open_conn(sh, now, tuple, self.isn.add(1));
    }

    /// Open a test connection on `tuple` (free: see [`Shared::free_tuple`]). The first one
    /// keeps the client's port when it can; a later one (after the test server closed) takes a
    /// fresh port, so that it is a new connection for the test server.
    fn open_conn(&mut self, sh: &mut Shared, _now: Instant, tuple: FourTuple, start: SeqNum) {
        let conn = Conn::new(tuple, start, &sh.p);
        sh.register(tuple, self.slot);
        self.cur = Some(conn);
        self.unit_acked_at = None;
    }

    pub(crate) fn removable(&self) -> bool {
        self.phase == Phase::Done && self.cur.is_none() && self.old.is_empty()
    }

    /// Whether the client ended its connection (FIN or RST) and the session is only carrying
    /// what it captured before.
    pub(crate) fn client_closed(&self) -> bool {
        self.client_reset.is_some() || self.stream.fin.is_some()
    }

    /// Whether the session is *idle*: being copied, everything captured was sent and answered,
    /// nothing is outstanding (no request waiting, no hole, no segment of ours unacknowledged,
    /// no handshake or registration under way) and the client has not closed: a keep-alive
    /// connection between requests. `session_timeout` does not end an idle session (only
    /// `idle_timeout`, if set); shedding takes idle sessions first. A current connection the
    /// test server closed meanwhile still counts (the next request reconnects, as after any
    /// early close); so does having none.
    pub(crate) fn idle(&self) -> bool {
        self.phase == Phase::Active
            && !self.client_closed()
            && !self.stream.unanswered()
            && !self.stream.has_held()
            && self.gap.is_none()
            && self.cur.as_ref().is_none_or(Conn::quiet)
    }

    /// Whether nothing more can come of it once the capture file ended: idle (it waits for a
    /// request), waiting to synchronise (for a client ACK), or done with every connection
    /// closed on our side.
    pub(crate) fn settled_at_capture_end(&self) -> bool {
        match self.phase {
            Phase::Syncing { .. } => true,
            Phase::Active => self.idle(),
            Phase::Done => self.old.iter().all(Conn::closed),
        }
    }

    /// When the session ends for lack of activity, and why: `session_timeout` after the last
    /// packet or record while something is outstanding, `idle_timeout` (if set) while idle.
    fn expiry(&self, p: &Params) -> Option<(Instant, FailReason)> {
        let unproven = (!self.proven).then(|| {
            (
                self.born.at() + p.unproven_timeout,
                FailReason::UnprovenTimeout,
            )
        });
        let idle = self.idle();
        let usual = match self.phase {
            Phase::Done => return None,
            _ if idle => p
                .idle_timeout
                .map(|t| (self.last_activity.at() + t, FailReason::IdleTimeout)),
            _ => Some((
                self.last_activity.at() + p.session_timeout,
                FailReason::Timeout,
            )),
        };
        // Unproven, a candidate or an idle session goes `unproven_timeout` after it began; a
        // busy one (a request under way) only once it is idle again.
        let unproven = unproven.filter(|_| idle || self.candidate());
        match (usual, unproven) {
            (Some(a), Some(b)) => Some(if b.0 <= a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    pub(crate) fn next_deadline(&self, p: &Params) -> Option<Instant> {
        let mut d = self.expiry(p).map(|(t, _)| t);
        let mut take = |t: Option<Instant>| {
            if let Some(t) = t {
                d = Some(d.map_or(t, |x: Instant| x.min(t)));
            }
        };
        if let Some(c) = &self.cur {
            take(c.deadline());
        }
        for c in self.old.iter() {
            take(c.deadline());
        }
        if self.phase == Phase::Active && self.cur.is_some() {
            // Set only while a unit waits for its answer (see `waiting`).
            take(self.unit_acked_at.map(|t| t.at() + p.answer_timeout));
            take(self.quiet_deadline(p));
            take(self.h2_deadline(p));
        }
        if self.phase == Phase::Active {
            take(self.client_reset.map(|t| t.at() + p.session_timeout));
            take(self.gate.as_deref().and_then(Gate::until));
            take(self.gap.as_ref().and_then(|g| g.due));
        }
        d
    }

    /// A captured client packet of this session; `payload` is its payload, shared with the
    /// other copies of the session. `lead`: this copy counts the packet's drops for the whole
    /// session (the first copy still in the table does, so that with `--copies N` a packet
    /// is counted once, not N times; a copy's own failure is counted by that copy).
    pub(crate) fn on_captured(
        &mut self,
        sh: &mut Shared,
        now: Instant,
        c: &Captured<'_>,
        payload: &mut Payload<'_>,
        lead: bool,
    ) {
        let h = &c.hdr;
        self.lead = lead;
        let lead = u64::from(lead);
        match self.phase {
            Phase::Done => {
                sh.stats.drops.after_close += lead;
                return;
            }
            _ => self.note_proof(sh, c),
        }
        match self.phase {
            Phase::Done => return,
            Phase::Syncing { ack } => {
                self.last_activity = Stamp::of(now);
                if h.has(TcpFlags::RST) || h.has(TcpFlags::FIN) || h.has(TcpFlags::SYN) {
                    if !c.payload.is_empty() {
                        sh.stats.drops.midstream_skip += lead;
                    }
                    self.phase = Phase::Done;
                    return;
                }
                if !(h.has(TcpFlags::ACK) && h.ack.gt(ack)) {
                    if !c.payload.is_empty() {
                        sh.stats.drops.midstream_skip += lead;
                    }
                    return;
                }
                if !sh.intercept_up {
                    sh.stats.sessions_not_copied += lead;
                    sh.stats.drops.no_intercept += lead;
                    self.phase = Phase::Done;
                    return;
                }
                // The online server answered in between: a request starts here, and its
                // answer online starts at this ACK.
                self.isn = h.seq.sub(1);
                // Caught mid-stream: whether a request really starts here is not known.
                self.stream = Stream::midstream(self.isn, h.ack)
                    .with_editor(self.editor(sh).map(Editor::midstream));
                self.tsval = h.opts.ts.map(|t| t.0);
                self.start(sh, now);
                if self.phase != Phase::Active {
                    return;
                }
                if self.plan_id.get().is_some() {
                    sh.events.push(Event::Started {
                        at: now,
                        slot: self.slot,
                        server: self.target.into(),
                    });
                }
            }
            Phase::Active => {}
        }
        if self.client_reset.is_some() {
            // Nothing counts after the client's RST.
            sh.stats.drops.after_close += lead;
            return;
        }
        self.last_activity = Stamp::of(now);
        if let Some((v, _)) = h.opts.ts {
            if self.tsval.is_none_or(|old| SeqNum(v).ge(SeqNum(old))) {
                self.tsval = Some(v);
            }
        }
        if h.has(TcpFlags::SYN) {
            sh.stats.drops.client_retransmission += lead;
            return;
        }
        if h.has(TcpFlags::RST) {
            if self.stream.unanswered() {
                // Requests are still to be carried: the RST waits for their answers.
                self.client_reset = Some(Stamp::of(now));
                self.reconcile(sh, now);
            } else {
                self.finish(sh, now, None);
            }
            return;
        }
        let fin = h.has(TcpFlags::FIN);
        if c.payload.is_empty() && !fin {
            if h.has(TcpFlags::ACK) {
                self.stream.note_pure_ack(h.ack);
            }
            return;
        }
        let ack = h.has(TcpFlags::ACK).then_some(h.ack);
        let r = self
            .stream
            .push(h.seq, ack, payload, fin, sh.p.max_ooo, now);
        if let Some(h2) = self.stream.h2_mut() {
            if std::mem::take(&mut h2.new_session) {
                sh.stats.h2_sessions += lead;
            }
            sh.stats.h2_streams += u64::from(std::mem::take(&mut h2.new_streams)) * lead;
        }
        if let Some(e) = self.stream.editor() {
            e.counts.drain_into(&mut sh.stats.requests);
            if e.failed {
                let why = if e.unparsable {
                    FailReason::Unparsable
                } else {
                    FailReason::MalformedRequest
                };
                self.finish(sh, now, Some(why));
                return;
            }
        }
        if let Some(g) = self.gate.as_mut().filter(|_| r.appended > 0) {
            g.note_arrivals(&self.stream, now);
        }
        let d = &mut sh.stats.drops;
        if r.duplicate {
            d.client_retransmission += lead;
        }
        if r.trimmed > 0 {
            d.overlap_trimmed += lead;
        }
        if r.overflow {
            d.out_of_order_overflow += lead;
        }
        if self.stream.mem() > sh.p.per_session_cap {
            d.buffer_cap += 1;
            self.finish(sh, now, Some(FailReason::BufferCap));
            return;
        }
        if self.stream.has_held() {
            let at = self.stream.hole_at();
            if self
                .gap
                .as_ref()
                .is_none_or(|g| g.since.is_none() || g.next != at)
            {
                // A new hole (an earlier one filled, this one is where the stream waits now).
                let g = self.gap_mut();
                g.since = Some(now);
                g.next = at;
            }
        } else {
            self.set_gap_since(None);
        }
        self.reconcile(sh, now);
    }

    /// A deadline of this session passed.
    pub(crate) fn on_timeout(&mut self, sh: &mut Shared, now: Instant) {
        let st = sh.p.session_timeout;
        let reset_overdue = self.client_reset.is_some_and(|t| t.at() + st <= now);
        match self.expiry(&sh.p) {
            Some((t, why)) if t <= now => self.finish(sh, now, Some(why)),
            _ if reset_overdue => self.finish(sh, now, Some(FailReason::Timeout)),
            _ => {}
        }
        let pending = self
            .send_limit(&sh.p)
            .gt(self.cur.as_ref().map_or(self.stream.next, |c| c.snd_nxt));
        if let Some(c) = self.cur.as_mut() {
            if c.on_timeout(now, &sh.p, pending) == Expiry::GaveUp {
                self.finish(sh, now, Some(FailReason::RetransmitLimit));
            }
        }
        for c in self.old.iter_mut() {
            c.on_timeout(now, &sh.p, false);
        }
        self.reconcile(sh, now);
        self.sweep(sh);
    }

    /// Drop dead connections, unregistering them.
    fn sweep(&mut self, sh: &mut Shared) {
        if self.cur.as_ref().is_some_and(|c| c.dead) {
            if let Some(c) = self.cur.take() {
                sh.unregister(c.tuple);
            }
        }
        self.old.retain(|c| {
            if c.dead {
                sh.unregister(c.tuple);
            }
            !c.dead
        });
    }

    /// Bring connections in line with the stream after any event.
    fn reconcile(&mut self, sh: &mut Shared, now: Instant) {
        if self.phase != Phase::Active {
            return;
        }
        // What the current connection got answered (before dropping it if the test server
        // reset it: it may have answered first).
        self.release(sh, now);
        self.gate(sh, now);
        // The test server reset or refused the current connection.
        if let Some(refused) = self.cur.as_ref().filter(|c| c.dead).map(|c| c.refused) {
            self.sweep(sh);
            if refused {
                self.finish(sh, now, Some(FailReason::Refused));
                return;
            }
        }
        self.skip_gap(sh, now);
        if self.phase != Phase::Active {
            return; // given up at a hole the capture lost
        }
        // The client reset: done once everything before its RST is carried.
        if self.client_reset.is_some() && !self.stream.unanswered() {
            self.finish(sh, now, None);
            return;
        }
        let h2_all_taken = self
            .cur
            .as_ref()
            .is_some_and(|c| c.peer_fin && c.acked().ge(self.stream.next));
        if self.stream.is_h2() && h2_all_taken {
            // The test server closed an HTTP/2 connection (after a GOAWAY) that had taken every
            // byte captured so far: nothing is left to carry again.
            while self.stream.unanswered() {
                self.stream.release_one();
            }
        }
        let unanswered = self.stream.unanswered();
        // The test server closed while requests remain: close this one, open another.
        if let Some(c) = self.cur.as_mut() {
            if c.peer_fin && unanswered && c.state != State::Linger && !c.fin_sent() {
                let drop_now = c.abandon(now, &sh.p);
                if let Some(c) = self.cur.take() {
                    self.retire(c);
                }
                if drop_now {
                    self.sweep(sh);
                }
            }
        }
        if self.cur.is_none() && unanswered {
            if self.stream.is_h2() {
                // Frames cannot go on a new connection without the preface, SETTINGS and
                // HPACK state of the old one.
                self.finish(sh, now, Some(FailReason::H2Closed));
                return;
            }
            if self.reconnects >= sh.p.max_reconnects {
                self.finish(sh, now, Some(FailReason::ReconnectLimit));
                return;
            }
            let (start, skipped) = self.stream.restart();
            if skipped {
                sh.stats.drops.replay_skipped += 1;
            }
            if self.stream.unanswered() {
                // The test server closed (or reset) a connection while requests remained: one
                // that ends connections by itself may also reset one with unread requests in
                // it, losing the answer to the last it served, so the rest of this session
                // goes lock-step (nothing is sent ahead of an answer again).
                self.lock_step();
                let Some(tuple) = sh
                    .tuples
                    .free_tuple(self.client_ip, self.target.into(), None)
                else {
                    self.finish(sh, now, Some(FailReason::NoTuple));
                    return;
                };
                self.reconnects += 1;
                sh.stats.reconnects += 1;
                self.open_conn(sh, now, tuple, start);
            }
        }
        // The client's FIN: done once carried (or when nothing is left to carry it on).
        if self.stream.fin.is_some() {
            let closed = match &self.cur {
                None => !self.stream.unanswered(),
                Some(c) => c.state == State::Linger,
            };
            if closed {
                self.finish(sh, now, None);
                return;
            }
        }
        let limit = self.send_limit(&sh.p);
        if let Some(c) = self.cur.as_mut() {
            let pending = limit.gt(c.snd_nxt);
            c.arm_persist(now, &sh.p, pending);
        }
    }

    /// The next segment of this session, if any: the test tuple it belongs to.
    pub(crate) fn poll_transmit(
        &mut self,
        sh: &mut Shared,
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Option<(FourTuple, Sent)> {
        for c in self.old.iter_mut() {
            if let Some(s) = c.poll(now, &sh.p, &mut TxCtx::nothing(self.tsval), out) {
                return Some((c.tuple, s));
            }
        }
        self.gate(sh, now);
        let mut limit = self.send_limit(&sh.p);
        if self.held() && limit.gt(self.stream.cur_start) {
            limit = self.stream.cur_start;
        }
        let (paced, h2) = (self.paced(&sh.p), self.stream.in_h2());
        let c = self.cur.as_mut()?;
        let fin = self.stream.fin.filter(|&f| {
            self.stream.next == f
                && c.acked().ge(f)
                && ((!paced && !h2) || self.stream.bounds.is_empty())
        });
        let scratch = std::mem::take(&mut sh.scratch);
        let mut tx = TxCtx {
            data: self.stream.data(),
            base: self.stream.base,
            limit,
            fin,
            tsval: self.tsval,
            scratch,
        };
        let sent = c.poll(now, &sh.p, &mut tx, out);
        sh.scratch = tx.scratch;
        let (tuple, snd_max) = (c.tuple, c.snd_max);
        let sent = sent?;
        if sent.payload > 0 && !sent.retransmit {
            self.note_sent(&mut sh.stats, &mut sh.events, now, snd_max);
        }
        Some((tuple, sent))
    }
}
