//! The engine's counters: plain `u64`s that only grow (except `sessions_active`, a gauge), read
//! by the I/O layer and exported as Prometheus metrics.
//!
//! Every packet, record or session the engine does not carry through is counted once, under
//! one reason ([`DropReason`], [`FailReason`], [`SynEnd`]), in [`DropCounts`], [`FailCounts`] or
//! [`SynCounts`]. Each reason and its counter are declared together, with its label (the
//! counter's name, stable: it becomes the metric label), so a reason cannot be counted without
//! being exported: `iter` yields every one.
//!
//! With `--copies N` a session's counters (`sessions_*`, [`FailCounts`]) count copy sessions,
//! one per copy; a captured packet's drop is counted once (by the first copy of its session
//! still in the table), except `buffer_cap`, which a copy counts when it fails by it.
//! `captured_sessions_started` counts captured sessions of which at least one copy started, so
//! `sessions_started / captured_sessions_started` is the multiplier achieved
//! ([`EngineStats::copy_multiplier`]), to compare with `copies_requested`.

use common::reasons;

reasons! {
    /// Why a session ended without completing.
    enum FailReason;
    /// Sessions that failed, by reason.
    struct FailCounts;
    /// The test server did not acknowledge a segment (or the SYN) after every retransmission.
    RetransmitLimit => retransmit_limit,
    /// The session buffered more than the per-session cap.
    BufferCap => buffer_cap,
    /// Shed to keep the engine under `max_memory`.
    Memory => memory,
    /// No packet and no record for `session_timeout` while something was outstanding (a
    /// request not answered, a segment not acknowledged, a handshake, a close to carry).
    Timeout => timeout,
    /// Idle (everything answered, nothing outstanding, the client's connection open) with no
    /// packet and no record for `idle_timeout` (only when one is set). The client's next
    /// request starts a new session (the engine remembers where its stream stood).
    IdleTimeout => idle_timeout,
    /// Idle, and shed to make room (over `max_memory`, or the table full at `max_sessions`
    /// when a new session came): idle sessions go first, idle longest first. The client's next
    /// request starts a new session (the engine remembers where its stream stood).
    IdleShed => idle_shed,
    /// The test server refused the connection (RST to our SYN).
    Refused => refused,
    /// The test server kept closing connections without answering.
    ReconnectLimit => reconnect_limit,
    /// The client started a new connection on the same port.
    Superseded => superseded,
    /// The copier stopped ([`crate::engine::Engine::close_all`]).
    Shutdown => shutdown,
    /// Given up while the copier was far behind, before any of its bytes had been sent
    /// ([`crate::engine::Engine::give_up_unsent`]): nothing of it reached the test server. Or
    /// given up at a hole the capture lost ([`OverloadReason::Hole`]): its test connection was
    /// reset before any byte after the hole was sent.
    Overload => overload,
    /// A new connection was needed and every test 4-tuple it could use was taken.
    NoTuple => no_tuple,
    /// Every connected intercept refused to guard one of its test tuples (the port or family
    /// is not guarded there, or its registration limit is reached): nothing of it was sent.
    RegistrationRefused => registration_refused,
    /// An HTTP/2 session whose test connection closed (after a GOAWAY, or a reset) before it
    /// had taken every frame captured: the rest cannot go on a new connection without the
    /// preface, SETTINGS and HPACK state of the old one.
    H2Closed => h2_closed,
    /// Malformed HTTP inside the body of a request the rules dropped (the stream cannot go on
    /// without its head), or anywhere in allow-only mode (`--rules`).
    MalformedRequest => malformed_request,
    /// Unproven (no request of the client's seen answered online: see "Unproven sessions" in
    /// the engine's documentation), and shed to make room for a new session: the unproven go
    /// first. Also in `unproven_ended`.
    UnprovenShed => unproven_shed,
    /// Unproven and idle `unproven_timeout` after it began. The client's next request starts
    /// a new session (the engine remembers where its stream stood). Also in `unproven_ended`.
    UnprovenTimeout => unproven_timeout,
    /// What the rules cannot read (a malformed request, a session caught mid-stream, a huge
    /// `Content-Length`) with `unparsable = "drop"` in the rules file: the rest of the
    /// session's copy is dropped (fail closed).
    Unparsable => unparsable,
}

reasons! {
    /// Why an unproven session or mid-stream candidate ended (see "Unproven sessions" in the
    /// engine's documentation).
    enum UnprovenEnd;
    /// Unproven sessions and mid-stream candidates ended before they proved themselves, by
    /// why (the started ones are in `sessions_failed` too).
    struct UnprovenCounts;
    /// Shed to make room for a new session (the unproven go first).
    Shed => unproven_shed,
    /// Still unproven `unproven_timeout` after it began, waiting to start or idle.
    Timeout => unproven_timeout,
}

impl FailCounts {
    pub(crate) fn bump(&mut self, r: FailReason) {
        self.add(r, 1);
    }

    /// All failed sessions.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.iter().map(|(_, v)| v).sum()
    }
}

reasons! {
    /// What ended a captured SYN's wait for its handshake.
    enum SynEnd;
    /// Captured SYNs whose handshake never completed (no test session was started for them), by
    /// what ended their pending entry.
    struct SynCounts;
    /// No handshake ACK nor data within `syn_timeout` of the last SYN.
    Expired => expired,
    /// Shed: the pending table was full (`max_pending_syns`) or over `max_memory`.
    Shed => shed,
    /// The client reset the connection before completing it.
    Reset => reset,
    /// A SYN with another ISN replaced it (the client started over).
    Replaced => replaced,
}

reasons! {
    /// Why a captured packet (or a record) was not carried.
    enum DropReason;
    /// Captured packets (or records) not carried, by reason.
    struct DropCounts;
    /// Captured bytes that are not an IPv4/IPv6 TCP packet.
    Malformed => malformed,
    /// Captured packets to no mapped service.
    NoMap => no_map,
    /// Captured packets of sessions the sample (`--sample`, or a profile's factor) leaves out.
    NotSampled => not_sampled,
    /// Packets of new sessions while no intercept is connected.
    NoIntercept => no_intercept,
    /// Packets of new sessions while the session table is full.
    TableFull => table_full,
    /// The client address family differs from the target's (and no pool fixes it).
    FamilyMismatch => family_mismatch,
    /// RST/FIN/SYN-less packets of no known session that cannot start one.
    NoSession => no_session,
    /// Data of a session caught mid-stream, before its first request boundary.
    MidstreamSkip => midstream_skip,
    /// Client retransmissions: segments with nothing new.
    ClientRetransmission => client_retransmission,
    /// Segments whose start overlapped bytes already held (the overlap was trimmed, the rest kept).
    OverlapTrimmed => overlap_trimmed,
    /// Out-of-order segments beyond the per-session out-of-order cap.
    OutOfOrderOverflow => out_of_order_overflow,
    /// Packets of a session that has already ended (or failed).
    AfterClose => after_close,
    /// Packets of a session that went over its buffer cap.
    BufferCap => buffer_cap,
    /// Requests skipped when a new connection could not replay a partly discarded request.
    ReplaySkipped => replay_skipped,
    /// Request units given up because the capture lost some of their bytes (a hole the
    /// client never filled: the online server had them); the session resumed at the next
    /// request after the hole, on a new connection.
    CaptureGap => capture_gap,
    /// Records that do not parse.
    RecordMalformed => record_malformed,
    /// Records of no registered connection.
    RecordUnknown => record_unknown,
    /// Test tuples the intercepts refused to guard: the session each belonged to failed
    /// (`registration_refused`) and nothing of it was sent on that tuple.
    RegistrationRefused => registration_refused,
    /// Packets of sessions not copied because the copier was behind when they started
    /// (`Engine::set_overload`): the whole session is left out, never a part of it.
    Overload => overload,
}

reasons! {
    /// Why the copier was behind when it left a new session out (`Engine::set_overload`).
    enum OverloadReason;
    /// Sessions not copied because the copier was behind when they started, by why.
    struct ShedCounts;
    /// Captured packets waited for the engine beyond a quarter of what the capture holds.
    CaptureBacklog => capture_backlog,
    /// The kernel dropped captured packets lately (the capture ring overflowed).
    KernelDrops => kernel_drops,
    /// A session being copied met a hole the capture lost (the kernel dropped some of its
    /// packets): given up there, its test connection reset before any byte after the hole was
    /// sent, so the test server's application gets no cut request (`Session::skip_gap`).
    Hole => hole,
}

impl ShedCounts {
    /// Every session left out.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.iter().map(|(_, v)| v).sum()
    }

    /// Add another worker's counts.
    pub fn merge(&mut self, o: &ShedCounts) {
        for &r in OverloadReason::ALL {
            self.add(r, o.get(r));
        }
    }
}

/// Everything the engine counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Captured packets handed to the engine.
    pub packets_captured: u64,
    /// Sessions being copied now (started, not ended yet). A gauge.
    pub sessions_active: u64,
    /// Copies of each captured session asked for (`--copies`; a setting, not a counter).
    pub copies_requested: u64,
    /// Captured sessions of which at least one copy started.
    pub captured_sessions_started: u64,
    /// Copy sessions started (a SYN of their own was sent): with `--copies N`, up to N per
    /// captured session.
    pub sessions_started: u64,
    /// Copy sessions that did not start because every test 4-tuple they could use was taken.
    pub sessions_no_tuple: u64,
    /// Captured sessions (their SYNs) left out by the sample.
    pub sessions_sampled_out: u64,
    /// Of those, sessions caught mid-stream.
    pub sessions_midstream: u64,
    /// Sessions and mid-stream candidates in the table that have not proven themselves yet
    /// (a gauge; see "Unproven sessions" in the engine's documentation).
    pub sessions_unproven: u64,
    /// Sessions and candidates that proved themselves (a request of the client's answered
    /// online, as its ACK numbers tell).
    pub sessions_proven: u64,
    /// Unproven sessions and candidates ended, by why.
    pub unproven_ended: UnprovenCounts,
    /// Sessions that ended as the client ended them (FIN or RST carried, after every request
    /// captured before it).
    pub sessions_completed: u64,
    /// Sessions that ended otherwise.
    pub sessions_failed: FailCounts,
    /// Sessions still open, idle, when the capture file ended (`--offline`; every byte of
    /// theirs sent and answered): neither completed nor failed.
    pub sessions_open_at_end: u64,
    /// Sessions not copied because no intercept was connected when they began.
    pub sessions_not_copied: u64,
    /// Connections opened to the test server (more than sessions when it closes early).
    pub connections_opened: u64,
    /// Connections opened to carry requests left when the test server closed.
    pub reconnects: u64,
    /// Segments sent.
    pub segments_sent: u64,
    /// IP bytes sent.
    pub bytes_sent: u64,
    /// Client payload bytes sent (retransmissions included).
    pub payload_bytes_sent: u64,
    /// Segments sent again (data, SYN or FIN).
    pub retransmissions: u64,
    /// Zero-window probes sent: a test server's window was shut while data waited (a test
    /// server slower than the client it copies, or a window update it sent that was lost).
    pub window_probes: u64,
    /// Records received from intercepts.
    pub records_received: u64,
    /// Request units sent (their first byte sent the first time), every copy counted.
    pub units_sent: u64,
    /// Of those, units sent before the test server answered the one before (windowed pacing,
    /// or no pacing).
    pub units_ahead: u64,
    /// Requests released by pacing because no answer came in time.
    pub answer_timeouts: u64,
    /// Sessions recognised as HTTP/2 by the client's preface (prior knowledge or after an
    /// `Upgrade: h2c`); they go unpaced, cut at frame boundaries (once per captured session).
    pub h2_sessions: u64,
    /// Streams the clients of those sessions opened (HEADERS frames on a new stream).
    pub h2_streams: u64,
    /// Our SYN was answered by a bare ACK (a TIME_WAIT socket of the test server on the
    /// tuple): we reset it and sent the SYN again at once.
    pub syn_time_wait_resets: u64,
    /// Test connections moved to another port because the SYN met a TIME_WAIT socket twice.
    pub syn_port_moves: u64,
    /// Test connections moved to another tuple before sending anything because an intercept
    /// said another copier holds theirs (`RegVerdict::HeldByOther`: two copiers of a fleet
    /// picked the same test tuple).
    pub tuple_moves: u64,
    /// Test connections whose registration stopped being in force (their intercept's link
    /// ended, or its firewall rules went missing): held back, nothing sent, until it is in
    /// force again (`Engine::intercept_link`).
    pub registrations_withdrawn: u64,
    /// Times an intercept said its firewall rules went missing (`Message::Rules`).
    pub rules_lost: u64,
    /// Verdicts `ServerNotLocal`: an intercept that does not guard the tuple's server; the
    /// connection waits for the one that does.
    pub registrations_not_local: u64,
    /// Sessions shed to stay under `max_memory` or to make room at `max_sessions` (also in
    /// `sessions_failed.idle_shed` for idle ones, `sessions_failed.memory` for the others;
    /// pending SYNs shed for memory are in `syns_incomplete.shed`).
    pub sessions_shed: u64,
    /// Sessions not copied at all because the copier was behind when they started
    /// (`Engine::set_overload`), or given up at a hole the capture lost (`hole`: see
    /// `Engine::note_capture_loss`), by why; their later packets are in `drops.overload`.
    pub sessions_shed_overload: ShedCounts,
    /// Captured SYNs waiting for the client's handshake ACK now (a gauge).
    pub syns_pending: u64,
    /// Captured SYNs whose handshake never completed, by what ended them.
    pub syns_incomplete: SynCounts,
    /// Packets and records dropped, by reason.
    pub drops: DropCounts,
    /// Records that opened the test server's window (or ours after a timeout) for bytes of
    /// the current connection that waited for room in it: a copy that outruns the test server's
    /// window, such as a large upload running behind, waits on these records.
    pub window_releases: u64,
    /// Replay lag of every request unit sent: from the engine's receipt of the captured
    /// segment with its first byte (the `now` of `handle_captured`) to the first send of that
    /// byte toward the test server.
    pub replay_lag: LagHistogram,
    /// What the request rules did (`--rules`): requests read, dropped, edited, malformed, and
    /// per rule.
    pub requests: RequestCounts,
}

impl EngineStats {
    /// Copy sessions started per captured session started: the multiplier achieved (0 before
    /// any session).
    #[must_use]
    pub fn copy_multiplier(&self) -> f64 {
        if self.captured_sessions_started == 0 {
            return 0.0;
        }
        self.sessions_started as f64 / self.captured_sessions_started as f64
    }
}

/// Upper bounds of the [`LagHistogram`] buckets, in seconds (a last bucket takes the rest).
pub const LAG_BOUNDS: [f64; 16] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
];

/// A histogram of durations over fixed buckets ([`LAG_BOUNDS`]), with the exact sum of each
/// bucket, so the exporter can replay it into a Prometheus histogram of the same buckets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LagHistogram {
    /// Samples per bucket (not cumulative); the last one is above every bound.
    pub counts: [u64; LAG_BOUNDS.len() + 1],
    /// Sum of each bucket's samples, in nanoseconds.
    pub sums_ns: [u64; LAG_BOUNDS.len() + 1],
}

impl LagHistogram {
    /// Count one duration.
    pub fn record(&mut self, d: std::time::Duration) {
        let secs = d.as_secs_f64();
        let i = LAG_BOUNDS.partition_point(|&b| b < secs);
        self.counts[i] += 1;
        self.sums_ns[i] =
            self.sums_ns[i].saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Samples in all.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Add another histogram's samples (several workers).
    pub fn merge(&mut self, o: &LagHistogram) {
        for i in 0..self.counts.len() {
            self.counts[i] += o.counts[i];
            self.sums_ns[i] = self.sums_ns[i].saturating_add(o.sums_ns[i]);
        }
    }

    /// The upper bound of the bucket holding quantile `q` (0..=1), in seconds; `None` without
    /// samples, infinity when it falls in the last bucket.
    #[must_use]
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let want = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return Some(LAG_BOUNDS.get(i).copied().unwrap_or(f64::INFINITY));
            }
        }
        Some(f64::INFINITY)
    }
}

/// What the editors counted, drained into the engine's stats after each call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// HTTP requests read (every copy counted).
    pub http_requests: u64,
    /// Units of other protocols decided by byte-prefix filters.
    pub byte_units: u64,
    /// Requests (or units) not copied.
    pub dropped: u64,
    /// Copied requests whose head was changed (dye, header edits, rewrites).
    pub edited: u64,
    /// Malformed HTTP: the session passed the rest as captured (or the copy was given up).
    pub malformed: u64,
    /// Per rule, in [`Rules::counter_names`](super::Rules::counter_names) order: requests a filter matched (denied or
    /// allowed), requests allow-only mode dropped, requests a rewrite changed.
    pub rules: Vec<u64>,
    /// The rules' names, in that order (empty without `--rules`).
    pub names: Vec<String>,
}
