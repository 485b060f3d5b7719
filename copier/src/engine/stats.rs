//! The engine's counters: plain `u64`s that only grow (except `sessions_active`, a gauge), read
//! by the I/O layer and exported as Prometheus metrics.
//!
//! Every packet, record or session the engine does not carry through is counted once, under
//! one reason, in [`DropCounts`] or [`FailCounts`]. Reason names (the `&'static str` of the
//! `iter` methods) are stable: they become metric labels.
//!
//! With `--copies N` a session's counters (`sessions_*`, [`FailCounts`]) count copy sessions,
//! one per copy; a captured packet's drop is counted once (by the first copy of its session
//! still in the table), except `buffer_cap`, which a copy counts when it fails by it.
//! `captured_sessions_started` counts captured sessions of which at least one copy started, so
//! `sessions_started / captured_sessions_started` is the multiplier achieved
//! ([`EngineStats::copy_multiplier`]), to compare with `copies_requested`.

/// Why a session ended without completing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailReason {
    /// The test server did not acknowledge a segment (or the SYN) after every retransmission.
    RetransmitLimit,
    /// The session buffered more than the per-session cap.
    BufferCap,
    /// Shed to keep the engine under `max_memory`.
    Memory,
    /// No packet and no record for `session_timeout`.
    Timeout,
    /// The test server refused the connection (RST to our SYN).
    Refused,
    /// The test server kept closing connections without answering.
    ReconnectLimit,
    /// The client started a new connection on the same port.
    Superseded,
    /// The copier stopped ([`crate::engine::Engine::close_all`]).
    Shutdown,
    /// A new connection was needed and every test 4-tuple it could use was taken.
    NoTuple,
    /// Every connected intercept refused to guard one of its test tuples (the port or family
    /// is not guarded there, or its registration limit is reached): nothing of it was sent.
    RegistrationRefused,
}

/// Sessions that failed, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailCounts {
    /// See [`FailReason::RetransmitLimit`].
    pub retransmit_limit: u64,
    /// See [`FailReason::BufferCap`].
    pub buffer_cap: u64,
    /// See [`FailReason::Memory`].
    pub memory: u64,
    /// See [`FailReason::Timeout`].
    pub timeout: u64,
    /// See [`FailReason::Refused`].
    pub refused: u64,
    /// See [`FailReason::ReconnectLimit`].
    pub reconnect_limit: u64,
    /// See [`FailReason::Superseded`].
    pub superseded: u64,
    /// See [`FailReason::Shutdown`].
    pub shutdown: u64,
    /// See [`FailReason::NoTuple`].
    pub no_tuple: u64,
    /// See [`FailReason::RegistrationRefused`].
    pub registration_refused: u64,
}

impl FailCounts {
    pub(crate) fn bump(&mut self, r: FailReason) {
        *match r {
            FailReason::RetransmitLimit => &mut self.retransmit_limit,
            FailReason::BufferCap => &mut self.buffer_cap,
            FailReason::Memory => &mut self.memory,
            FailReason::Timeout => &mut self.timeout,
            FailReason::Refused => &mut self.refused,
            FailReason::ReconnectLimit => &mut self.reconnect_limit,
            FailReason::Superseded => &mut self.superseded,
            FailReason::Shutdown => &mut self.shutdown,
            FailReason::NoTuple => &mut self.no_tuple,
            FailReason::RegistrationRefused => &mut self.registration_refused,
        } += 1;
    }

    /// `(reason label, count)` pairs.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("retransmit_limit", self.retransmit_limit),
            ("buffer_cap", self.buffer_cap),
            ("memory", self.memory),
            ("timeout", self.timeout),
            ("refused", self.refused),
            ("reconnect_limit", self.reconnect_limit),
            ("superseded", self.superseded),
            ("shutdown", self.shutdown),
            ("no_tuple", self.no_tuple),
            ("registration_refused", self.registration_refused),
        ]
        .into_iter()
    }

    /// All failed sessions.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.iter().map(|(_, v)| v).sum()
    }
}

/// Captured SYNs whose handshake never completed (no test session was started for them), by
/// what ended their pending entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SynCounts {
    /// No handshake ACK nor data within `syn_timeout` of the last SYN.
    pub expired: u64,
    /// Shed: the pending table was full (`max_pending_syns`) or over `max_memory`.
    pub shed: u64,
    /// The client reset the connection before completing it.
    pub reset: u64,
    /// A SYN with another ISN replaced it (the client started over).
    pub replaced: u64,
}

impl SynCounts {
    /// `(reason label, count)` pairs.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [("expired", self.expired), ("shed", self.shed), ("reset", self.reset), ("replaced", self.replaced)].into_iter()
    }
}

/// Captured packets (or records) not carried, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DropCounts {
    /// Captured bytes that are not an IPv4/IPv6 TCP packet.
    pub malformed: u64,
    /// Captured packets to no mapped service.
    pub no_map: u64,
    /// Captured packets of sessions the sample (`--sample`) leaves out.
    pub not_sampled: u64,
    /// Packets of new sessions while no intercept is connected.
    pub no_intercept: u64,
    /// Packets of new sessions while the session table is full.
    pub table_full: u64,
    /// The client address family differs from the target's (and no pool fixes it).
    pub family_mismatch: u64,
    /// RST/FIN/SYN-less packets of no known session that cannot start one.
    pub no_session: u64,
    /// Data of a session caught mid-stream, before its first request boundary.
    pub midstream_skip: u64,
    /// Client retransmissions: segments with nothing new.
    pub client_retransmission: u64,
    /// Segments whose start overlapped bytes already held (the overlap was trimmed, the rest kept).
    pub overlap_trimmed: u64,
    /// Out-of-order segments beyond the per-session out-of-order cap.
    pub out_of_order_overflow: u64,
    /// Packets of a session that has already ended (or failed).
    pub after_close: u64,
    /// Packets of a session that went over its buffer cap.
    pub buffer_cap: u64,
    /// Requests skipped when a new connection could not replay a partly discarded request.
    pub replay_skipped: u64,
    /// Request units given up because the capture lost some of their bytes (a hole the
    /// client never filled: the online server had them); the session resumed at the next
    /// request after the hole, on a new connection.
    pub capture_gap: u64,
    /// Records that do not parse.
    pub record_malformed: u64,
    /// Records of no registered connection.
    pub record_unknown: u64,
    /// Test tuples the intercepts refused to guard: the session each belonged to failed
    /// (`registration_refused`) and nothing of it was sent on that tuple.
    pub registration_refused: u64,
}

impl DropCounts {
    /// `(reason label, count)` pairs.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("malformed", self.malformed),
            ("no_map", self.no_map),
            ("not_sampled", self.not_sampled),
            ("no_intercept", self.no_intercept),
            ("table_full", self.table_full),
            ("family_mismatch", self.family_mismatch),
            ("no_session", self.no_session),
            ("midstream_skip", self.midstream_skip),
            ("client_retransmission", self.client_retransmission),
            ("overlap_trimmed", self.overlap_trimmed),
            ("out_of_order_overflow", self.out_of_order_overflow),
            ("after_close", self.after_close),
            ("buffer_cap", self.buffer_cap),
            ("replay_skipped", self.replay_skipped),
            ("capture_gap", self.capture_gap),
            ("record_malformed", self.record_malformed),
            ("record_unknown", self.record_unknown),
            ("registration_refused", self.registration_refused),
        ]
        .into_iter()
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
    /// Sessions that ended as the client ended them (FIN or RST carried, after every request
    /// captured before it).
    pub sessions_completed: u64,
    /// Sessions that ended otherwise.
    pub sessions_failed: FailCounts,
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
    /// Records received from intercepts.
    pub records_received: u64,
    /// Request units sent (their first byte sent the first time), every copy counted.
    pub units_sent: u64,
    /// Of those, units sent before the test server answered the one before (windowed pacing,
    /// or no pacing).
    pub units_ahead: u64,
    /// Requests released by pacing because no answer came in time.
    pub answer_timeouts: u64,
    /// Our SYN was answered by a bare ACK (a TIME_WAIT socket of the test server on the
    /// tuple): we reset it and sent the SYN again at once.
    pub syn_time_wait_resets: u64,
    /// Test connections moved to another port because the SYN met a TIME_WAIT socket twice.
    pub syn_port_moves: u64,
    /// Sessions shed to stay under `max_memory` (also in `sessions_failed.memory`; pending
    /// SYNs shed for it are in `syns_incomplete.shed`).
    pub sessions_shed: u64,
    /// Captured SYNs waiting for the client's handshake ACK now (a gauge).
    pub syns_pending: u64,
    /// Captured SYNs whose handshake never completed, by what ended them.
    pub syns_incomplete: SynCounts,
    /// Packets and records dropped, by reason.
    pub drops: DropCounts,
    /// Replay lag of every request unit sent: from the engine's receipt of the captured
    /// segment with its first byte (the `now` of `handle_captured`) to the first send of that
    /// byte toward the test server.
    pub replay_lag: LagHistogram,
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
pub const LAG_BOUNDS: [f64; 16] =
    [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0];

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
        self.sums_ns[i] = self.sums_ns[i].saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
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
