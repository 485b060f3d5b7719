//! The copier's Prometheus metrics: names, descriptions, and the periodic export of the
//! counters that the engine, the capture and the sender keep as plain numbers.
//!
//! Owns: the exporter (`--metrics ADDR`) and the names of the engine's, the capture's, the
//! sender's, the control links' and the file outputs' metrics ([`names`], all prefixed
//! `copier_`). The comparison ([`crate::shadow`]), the spread maps ([`crate::spread`]), the
//! shaper ([`crate::shaping`]), the rate loop ([`crate::rate`]) and the mirror input
//! ([`crate::mirror`]) name and describe theirs in their own modules. The engine thread calls [`export`] about once a second with absolute values; nothing on the packet
//! path touches the `metrics` crate. Without `--metrics` no recorder is installed and the calls are
//! no-ops.
//!
//! With several workers (`--workers N`, N > 1) each engine thread names itself with
//! [`label_this_thread`], and every metric it records gets a `worker="i"` label (the installed
//! recorder adds it), so the workers' absolute values do not overwrite each other: sum over
//! `worker` for the copier's total. The process-wide gauges ([`PROCESS_WIDE`]) stay unlabelled.
//! With one worker no label is added.

use std::cell::Cell;
use std::net::SocketAddr;

use ::metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter,
    Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit,
};

use crate::capture::CaptureStats;
use crate::engine::{EngineStats, LagHistogram};
use crate::send::SendStats;

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The exporter could not be built (e.g. the address is taken).
    #[error("{0}")]
    Build(#[from] metrics_exporter_prometheus::BuildError),
    /// A recorder was installed already.
    #[error("a metrics recorder is already installed")]
    AlreadyInstalled,
}

/// Install the Prometheus exporter listening on `addr` (needs a tokio runtime context: the
/// exporter is spawned on it) and describe every metric.
pub fn install(addr: SocketAddr) -> Result<(), MetricsError> {
    let (recorder, exporter) = metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full(REPLAY_LAG.to_string()),
            &crate::engine::LAG_BOUNDS,
        )?
        .build()?;
    tokio::spawn(exporter);
    ::metrics::set_global_recorder(WorkerLabels(recorder))
        .map_err(|_| MetricsError::AlreadyInstalled)?;
    describe();
    crate::spread::describe();
    crate::shaping::describe();
    crate::rate::describe();
    Ok(())
}

/// Gauges that describe the whole process, not one worker: never labelled by worker.
pub const PROCESS_WIDE: [&str; 2] = [names::INTERCEPTS_CONNECTED, names::REGISTERED_SESSIONS];

/// The histogram of each request unit's replay lag (capture to first send), in seconds.
pub const REPLAY_LAG: &str = "copier_replay_lag_seconds";

/// The names this module exports under, and those the control clients and the worker routes
/// write (the modules that name their own are listed in this module's doc).
#[allow(missing_docs)] // each name is described where `describe` registers it
pub mod names {
    pub const ANSWER_TIMEOUTS_TOTAL: &str = "copier_answer_timeouts_total";
    pub const BYTES_SENT_TOTAL: &str = "copier_bytes_sent_total";
    pub const CAPTURE_BAD_BLOCKS_TOTAL: &str = "copier_capture_bad_blocks_total";
    pub const CAPTURE_BYTES_TOTAL: &str = "copier_capture_bytes_total";
    pub const CAPTURE_RING_BYTES: &str = "copier_capture_ring_bytes";
    pub const CAPTURE_RING_GROWS_TOTAL: &str = "copier_capture_ring_grows_total";
    pub const CAPTURE_TRUNCATED_TOTAL: &str = "copier_capture_truncated_total";
    pub const CAPTURED_SESSIONS_STARTED_TOTAL: &str = "copier_captured_sessions_started_total";
    pub const CONNECTIONS_OPENED_TOTAL: &str = "copier_connections_opened_total";
    pub const CONTROL_CONNECTS_TOTAL: &str = "copier_control_connects_total";
    pub const CONTROL_LOSSES_TOTAL: &str = "copier_control_losses_total";
    pub const CONTROL_RECORDS_TOTAL: &str = "copier_control_records_total";
    pub const COPIES_REQUESTED: &str = "copier_copies_requested";
    pub const COPY_MULTIPLIER: &str = "copier_copy_multiplier";
    pub const ENGINE_PANICS_TOTAL: &str = "copier_engine_panics_total";
    pub const INTERCEPTS_CONNECTED: &str = "copier_intercepts_connected";
    pub const KERNEL_DROPS_TOTAL: &str = "copier_kernel_drops_total";
    pub const KERNEL_FREEZES_TOTAL: &str = "copier_kernel_freezes_total";
    pub const KERNEL_PACKETS_TOTAL: &str = "copier_kernel_packets_total";
    pub const MEMORY_BYTES: &str = "copier_memory_bytes";
    pub use crate::outage::names::{OUTPUT_DOWN, OUTPUT_DROPPED_TOTAL, OUTPUT_ERRORS_TOTAL};
    pub const PACKETS_CAPTURED_TOTAL: &str = "copier_packets_captured_total";
    pub const PACKETS_DROPPED_TOTAL: &str = "copier_packets_dropped_total";
    pub const PAYLOAD_BYTES_SENT_TOTAL: &str = "copier_payload_bytes_sent_total";
    pub const RECONNECTS_TOTAL: &str = "copier_reconnects_total";
    pub const RECORDS_RECEIVED_TOTAL: &str = "copier_records_received_total";
    pub const RECORDS_UNROUTABLE_TOTAL: &str = "copier_records_unroutable_total";
    pub const REGISTERED_SESSIONS: &str = "copier_registered_sessions";
    pub const RETRANSMISSIONS_TOTAL: &str = "copier_retransmissions_total";
    pub const WINDOW_PROBES_TOTAL: &str = "copier_window_probes_total";
    pub const SEGMENTS_SENT_TOTAL: &str = "copier_segments_sent_total";
    pub const SEND_BYTES_TOTAL: &str = "copier_send_bytes_total";
    pub const SEND_DROPPED_TOTAL: &str = "copier_send_dropped_total";
    pub const SEND_ERRORS_TOTAL: &str = "copier_send_errors_total";
    pub const SEND_PACKETS_TOTAL: &str = "copier_send_packets_total";
    pub const SEND_QUEUE: &str = "copier_send_queue";
    pub const SEND_SPLIT_EXTRA_TOTAL: &str = "copier_send_split_extra_total";
    /// Super-segments (`--gso`), by path: `whole` (AF_PACKET with a GSO header) or `cut` (by the copier).
    pub const SEND_GSO_TOTAL: &str = "copier_send_gso_total";
    /// Segments on the wire that the super-segments sent whole stand for.
    pub const SEND_GSO_WIRE_SEGMENTS_TOTAL: &str = "copier_send_gso_wire_segments_total";
    /// AF_PACKET sends of super-segments that failed (then cut by the copier).
    pub const SEND_GSO_ERRORS_TOTAL: &str = "copier_send_gso_errors_total";
    pub const SESSIONS_ACTIVE: &str = "copier_sessions_active";
    pub const SESSIONS_COMPLETED_TOTAL: &str = "copier_sessions_completed_total";
    pub const SESSIONS_FAILED_TOTAL: &str = "copier_sessions_failed_total";
    pub const SESSIONS_MIDSTREAM_TOTAL: &str = "copier_sessions_midstream_total";
    /// Sessions idle when the capture file ended (`--offline`): neither completed nor failed.
    pub const SESSIONS_OPEN_AT_END_TOTAL: &str = "copier_sessions_open_at_end_total";
    pub const SESSIONS_NO_TUPLE_TOTAL: &str = "copier_sessions_no_tuple_total";
    pub const SESSIONS_NOT_COPIED_TOTAL: &str = "copier_sessions_not_copied_total";
    pub const SESSIONS_SAMPLED_OUT_TOTAL: &str = "copier_sessions_sampled_out_total";
    pub const SESSIONS_SHED_TOTAL: &str = "copier_sessions_shed_total";
    /// Sessions not copied at all because the copier was behind when they started, by reason.
    pub const SESSIONS_SHED_OVERLOAD_TOTAL: &str = "copier_sessions_shed_overload_total";
    pub const SESSIONS_STARTED_TOTAL: &str = "copier_sessions_started_total";
    pub const SYN_PORT_MOVES_TOTAL: &str = "copier_syn_port_moves_total";
    pub const TUPLE_MOVES_TOTAL: &str = "copier_tuple_moves_total";
    pub const REGISTRATIONS_WITHDRAWN_TOTAL: &str = "copier_registrations_withdrawn_total";
    pub const INTERCEPT_RULES_LOST_TOTAL: &str = "copier_intercept_rules_lost_total";
    pub const REGISTRATIONS_NOT_LOCAL_TOTAL: &str = "copier_registrations_not_local_total";
    pub const SYN_TIME_WAIT_RESETS_TOTAL: &str = "copier_syn_time_wait_resets_total";
    pub const SYNS_INCOMPLETE_TOTAL: &str = "copier_syns_incomplete_total";
    pub const SYNS_PENDING: &str = "copier_syns_pending";
    /// Sessions and mid-stream candidates in the table not proven yet (`--unproven-timeout`).
    pub const UNPROVEN_SESSIONS: &str = "copier_unproven_sessions";
    pub const UNPROVEN_PROVEN_TOTAL: &str = "copier_unproven_proven_total";
    pub const UNPROVEN_ENDED_TOTAL: &str = "copier_unproven_ended_total";
    pub const UNITS_AHEAD_TOTAL: &str = "copier_units_ahead_total";
    pub const H2_SESSIONS_TOTAL: &str = "copier_h2_sessions_total";
    pub const H2_STREAMS_TOTAL: &str = "copier_h2_streams_total";
    pub const REQUESTS_TOTAL: &str = "copier_requests_total";
    pub const REQUESTS_DROPPED_TOTAL: &str = "copier_requests_dropped_total";
    pub const REQUESTS_EDITED_TOTAL: &str = "copier_requests_edited_total";
    pub const REQUESTS_MALFORMED_TOTAL: &str = "copier_requests_malformed_total";
    pub const RULE_MATCHES_TOTAL: &str = "copier_rule_matches_total";
    pub const UNITS_SENT_TOTAL: &str = "copier_units_sent_total";
    pub use super::REPLAY_LAG;
}

thread_local! {
    static WORKER: Cell<Option<u16>> = const { Cell::new(None) };
    /// The replay-lag histogram as last exported from this thread (each engine thread exports
    /// its own engine's): the export records only what is new since.
    static LAG_EXPORTED: std::cell::RefCell<LagHistogram> = std::cell::RefCell::new(LagHistogram::default());
}

/// Record into the `copier_replay_lag_seconds` histogram what `now` has more than the last
/// export from this thread (all of it when the engine was rebuilt and its counts restarted):
/// each bucket's new samples at their mean, so the sum stays exact and every sample lands in
/// the bucket it was counted in.
fn export_lag(now: &LagHistogram) {
    LAG_EXPORTED.with(|last| {
        let mut last = last.borrow_mut();
        let restarted = now.counts.iter().zip(&last.counts).any(|(n, l)| n < l);
        if restarted {
            *last = LagHistogram::default();
        }
        let h = histogram!(REPLAY_LAG);
        for i in 0..now.counts.len() {
            let n = now.counts[i] - last.counts[i];
            if n > 0 {
                let sum = now.sums_ns[i].saturating_sub(last.sums_ns[i]);
                h.record_many(
                    sum as f64 / n as f64 / 1e9,
                    usize::try_from(n).unwrap_or(usize::MAX),
                );
            }
        }
        *last = now.clone();
    });
}

/// Label every metric recorded from this thread with `worker="index"` (`None`: no label).
pub fn label_this_thread(worker: Option<u16>) {
    WORKER.with(|w| w.set(worker));
}

/// A recorder that adds the calling thread's `worker` label (see [`label_this_thread`]).
#[derive(Debug)]
struct WorkerLabels<R>(R);

impl<R> WorkerLabels<R> {
    fn key(key: &Key) -> Option<Key> {
        let w = WORKER.with(Cell::get)?;
        if PROCESS_WIDE.contains(&key.name()) {
            return None;
        }
        Some(key.with_extra_labels(vec![Label::new("worker", w.to_string())]))
    }
}

impl<R: Recorder> Recorder for WorkerLabels<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_counter(key, unit, description);
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_gauge(key, unit, description);
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_histogram(key, unit, description);
    }
    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        match Self::key(key) {
            Some(k) => self.0.register_counter(&k, metadata),
            None => self.0.register_counter(key, metadata),
        }
    }
    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        match Self::key(key) {
            Some(k) => self.0.register_gauge(&k, metadata),
            None => self.0.register_gauge(key, metadata),
        }
    }
    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        match Self::key(key) {
            Some(k) => self.0.register_histogram(&k, metadata),
            None => self.0.register_histogram(key, metadata),
        }
    }
}

fn describe() {
    describe_counter!(
        names::PACKETS_CAPTURED_TOTAL,
        "IP packets read from the capture ring"
    );
    describe_counter!(
        names::CAPTURE_BYTES_TOTAL,
        Unit::Bytes,
        "Bytes of the captured IP packets"
    );
    describe_counter!(
        names::CAPTURE_TRUNCATED_TOTAL,
        "Captured packets cut short by the ring (larger than a block), not copied"
    );
    describe_counter!(
        names::CAPTURE_BAD_BLOCKS_TOTAL,
        "Ring blocks with inconsistent headers"
    );
    describe_counter!(
        names::KERNEL_PACKETS_TOTAL,
        "Packets that passed the kernel filter (PACKET_STATISTICS tp_packets)"
    );
    describe_counter!(
        names::KERNEL_DROPS_TOTAL,
        "Packets the kernel dropped because the capture ring was full (tp_drops)"
    );
    describe_counter!(
        names::KERNEL_FREEZES_TOTAL,
        "Times the capture queue froze on a full ring (tp_freeze_q_cnt)"
    );
    describe_gauge!(names::SESSIONS_ACTIVE, "Sessions in the engine's table");
    describe_gauge!(
        names::CAPTURE_RING_BYTES,
        Unit::Bytes,
        "Bytes of the capture ring(s) mapped now (the ring grows with the traffic)"
    );
    describe_counter!(
        names::CAPTURE_RING_GROWS_TOTAL,
        "Times the capture ring grew"
    );

    describe_counter!(
        names::SESSIONS_STARTED_TOTAL,
        "Copy sessions started (up to --copies per captured session)"
    );
    describe_gauge!(
        names::COPIES_REQUESTED,
        "Copies asked for per captured session (--copies)"
    );
    describe_counter!(
        names::CAPTURED_SESSIONS_STARTED_TOTAL,
        "Captured sessions of which at least one copy started"
    );
    describe_gauge!(
        names::COPY_MULTIPLIER,
        "Copy sessions started per captured session started, since the start (compare with \
         copier_copies_requested; the ratio of the rates of the two counters gives it over a window)"
    );
    describe_counter!(
        names::SESSIONS_NO_TUPLE_TOTAL,
        "Copy sessions not started because every client port of their address was taken"
    );
    describe_counter!(
        names::SESSIONS_SAMPLED_OUT_TOTAL,
        "Captured sessions left out by --sample"
    );
    describe_counter!(
        names::SESSIONS_MIDSTREAM_TOTAL,
        "Sessions caught in the middle and started with a handshake of our own"
    );
    describe_counter!(
        names::SESSIONS_COMPLETED_TOTAL,
        "Sessions that ended as the client ended them"
    );
    describe_counter!(
        names::SESSIONS_OPEN_AT_END_TOTAL,
        "Sessions still open, every byte sent and answered, when the capture file ended (--offline): neither completed nor failed"
    );
    describe_counter!(
        names::SESSIONS_FAILED_TOTAL,
        "Sessions that ended otherwise, by reason"
    );
    describe_counter!(
        names::SESSIONS_NOT_COPIED_TOTAL,
        "Sessions not copied because no intercept was connected"
    );
    describe_counter!(
        names::SESSIONS_SHED_TOTAL,
        "Sessions shed to stay under --max-memory or to make room at --max-sessions (mid-stream candidates included)"
    );
    describe_gauge!(
        names::UNPROVEN_SESSIONS,
        "Sessions and mid-stream candidates in the table that have not shown a request answered online yet (see --unproven-timeout)"
    );
    describe_counter!(
        names::UNPROVEN_PROVEN_TOTAL,
        "Sessions and mid-stream candidates that proved themselves (a request of the client's answered online)"
    );
    describe_counter!(
        names::UNPROVEN_ENDED_TOTAL,
        "Unproven sessions and mid-stream candidates ended before they proved themselves, by reason (unproven_shed: room was needed; unproven_timeout: --unproven-timeout)"
    );
    describe_gauge!(
        names::SYNS_PENDING,
        "Captured SYNs waiting for the client's handshake ACK (no test session yet)"
    );
    describe_counter!(
        names::SYNS_INCOMPLETE_TOTAL,
        "Captured SYNs whose handshake never completed (never copied), by what ended them"
    );
    describe_counter!(
        names::CONNECTIONS_OPENED_TOTAL,
        "Connections opened to the test server"
    );
    describe_counter!(
        names::RECONNECTS_TOTAL,
        "Connections opened to carry requests after the test server closed"
    );
    describe_counter!(names::SEGMENTS_SENT_TOTAL, "Segments the engine sent");
    describe_counter!(
        names::UNITS_SENT_TOTAL,
        "Request units sent to the test server (first send of their first byte), every copy counted"
    );
    describe_counter!(
        names::H2_SESSIONS_TOTAL,
        "Captured sessions recognised as HTTP/2 by the client's preface (copied unpaced, cut at frame boundaries)"
    );
    describe_counter!(
        names::H2_STREAMS_TOTAL,
        "Streams the clients of HTTP/2 sessions opened (HEADERS frames)"
    );
    describe_counter!(
        names::UNITS_AHEAD_TOTAL,
        "Request units sent before the test server answered the one before (windowed pacing)"
    );
    describe_counter!(
        names::REQUESTS_TOTAL,
        "Requests the --rules editor read, by protocol (http, or bytes: units of other protocols), every copy counted"
    );
    describe_counter!(
        names::REQUESTS_DROPPED_TOTAL,
        "Requests the --rules filters kept from the test server"
    );
    describe_counter!(
        names::REQUESTS_EDITED_TOTAL,
        "Copied requests whose head --rules changed (dye, header edits, rewrites)"
    );
    describe_counter!(
        names::REQUESTS_MALFORMED_TOTAL,
        "Malformed HTTP requests (--rules): the rest of the session passed as captured"
    );
    describe_counter!(
        names::RULE_MATCHES_TOTAL,
        "Requests each --rules rule matched (filters: denied or allowed; allow_only: dropped for matching no allow filter; rewrites: changed)"
    );
    describe_histogram!(
        REPLAY_LAG,
        Unit::Seconds,
        "Replay lag of each request unit: from the engine's receipt of its first captured byte \
         (the capture ring adds up to its 10 ms block timeout before) to its first send toward \
         the test server"
    );
    describe_counter!(
        names::BYTES_SENT_TOTAL,
        Unit::Bytes,
        "IP bytes the engine sent"
    );
    describe_counter!(
        names::PAYLOAD_BYTES_SENT_TOTAL,
        Unit::Bytes,
        "Client payload bytes sent, retransmissions included"
    );
    describe_counter!(names::RETRANSMISSIONS_TOTAL, "Segments sent again");
    describe_counter!(
        names::WINDOW_PROBES_TOTAL,
        "Zero-window probes sent: a test server's window was shut while data waited for it"
    );
    describe_counter!(
        names::RECORDS_RECEIVED_TOTAL,
        "Response records received from intercepts"
    );
    describe_counter!(
        names::ANSWER_TIMEOUTS_TOTAL,
        "Requests released by pacing without an answer"
    );
    describe_counter!(
        names::SYN_TIME_WAIT_RESETS_TOTAL,
        "SYNs answered by a bare ACK of a TIME_WAIT socket, reset and sent again"
    );
    describe_counter!(
        names::REGISTRATIONS_WITHDRAWN_TOTAL,
        "Test connections held back (nothing sent) because their registration stopped being in force: the intercept's link ended or its firewall rules went missing"
    );
    describe_counter!(
        names::INTERCEPT_RULES_LOST_TOTAL,
        "Times an intercept said its firewall rules went missing (its sessions send nothing until they are back)"
    );
    describe_counter!(
        names::REGISTRATIONS_NOT_LOCAL_TOTAL,
        "Verdicts server_not_local: an intercept that does not guard the test server (the copy waits for the one that does)"
    );
    describe_counter!(
        names::TUPLE_MOVES_TOTAL,
        "Test connections moved to another tuple before sending anything: an intercept said another copier holds theirs"
    );
    describe_counter!(
        names::SYN_PORT_MOVES_TOTAL,
        "Test connections moved to another port after meeting a TIME_WAIT socket twice"
    );
    describe_counter!(
        names::PACKETS_DROPPED_TOTAL,
        "Captured packets or records not carried, by reason"
    );
    describe_gauge!(
        names::MEMORY_BYTES,
        Unit::Bytes,
        "What the engine holds against --max-memory: buffered bytes plus a fixed cost per session and pending SYN"
    );
    describe_counter!(
        names::OUTPUT_ERRORS_TOTAL,
        "Failed writes of a file output (output: record = --record, compare_log = --compare-log), by reason \
         (no_space, quota, read_only, permission, other); the copy goes on and the next write tries again"
    );
    describe_counter!(
        names::OUTPUT_DROPPED_TOTAL,
        "Items a file output could not write and dropped (record: packets; compare_log: lines)"
    );
    describe_gauge!(
        names::OUTPUT_DOWN,
        "1 while a file output's writes fail (from its first failed write to the next that works), else 0"
    );
    describe_counter!(
        names::SEND_PACKETS_TOTAL,
        "Packets the raw sockets accepted"
    );
    describe_counter!(
        names::SEND_BYTES_TOTAL,
        Unit::Bytes,
        "Bytes the raw sockets accepted"
    );
    describe_counter!(names::SEND_ERRORS_TOTAL, "Send errors, by errno kind");
    describe_counter!(
        names::SEND_DROPPED_TOTAL,
        "Packets the sender dropped, by reason"
    );
    describe_counter!(
        names::SEND_SPLIT_EXTRA_TOTAL,
        "Extra packets made by splitting after EMSGSIZE, or by cutting super-segments in user space"
    );
    describe_counter!(
        names::SESSIONS_SHED_OVERLOAD_TOTAL,
        "Captured sessions not copied at all because the copier was behind when they started (capture_backlog, kernel_drops), or given up at a hole the capture lost, their test connection reset before anything after the hole (hole): each session is copied whole or not at all"
    );
    describe_counter!(
        names::SEND_GSO_TOTAL,
        "Super-segments (--gso) by path: whole (AF_PACKET with a GSO header, cut by the kernel or the NIC) or cut (by the copier)"
    );
    describe_counter!(
        names::SEND_GSO_WIRE_SEGMENTS_TOTAL,
        "Segments on the wire that the super-segments sent whole stand for"
    );
    describe_counter!(
        names::SEND_GSO_ERRORS_TOTAL,
        "AF_PACKET sends of super-segments that failed (the super-segment was then cut by the copier)"
    );
    describe_gauge!(names::SEND_QUEUE, "Packets waiting in the send queue");
    describe_gauge!(names::INTERCEPTS_CONNECTED, "Intercepts connected now");
    describe_gauge!(
        names::REGISTERED_SESSIONS,
        "Sessions registered with the intercepts"
    );
    describe_counter!(
        names::CONTROL_CONNECTS_TOTAL,
        "Successful handshakes with an intercept"
    );
    describe_counter!(
        names::CONTROL_LOSSES_TOTAL,
        "Connections to an intercept lost"
    );
    describe_counter!(
        names::CONTROL_RECORDS_TOTAL,
        "Records received, per intercept"
    );
    describe_counter!(
        names::ENGINE_PANICS_TOTAL,
        "Engine panics survived (the session table was rebuilt)"
    );
    describe_counter!(
        names::RECORDS_UNROUTABLE_TOTAL,
        "Records dropped before reaching a worker (several workers): headers that do not parse, \
         or a session no worker owns, by reason"
    );
}

/// Everything the engine thread exports.
#[derive(Debug)]
pub struct Snapshot<'a> {
    /// The engine's counters.
    pub engine: &'a EngineStats,
    /// Bytes the engine holds.
    pub memory: usize,
    /// The capture's counters.
    pub capture: CaptureStats,
    /// The sender's counters.
    pub send: &'a SendStats,
    /// Packets waiting to be sent.
    pub send_queue: usize,
    /// Intercepts connected now.
    pub intercepts: usize,
    /// Sessions registered now.
    pub registered: usize,
    /// Engine panics so far.
    pub panics: u64,
}

/// Publish absolute values of everything in `s`.
pub fn export(s: &Snapshot<'_>) {
    let e = s.engine;
    let c = &s.capture;
    counter!(names::PACKETS_CAPTURED_TOTAL).absolute(c.packets);
    counter!(names::CAPTURE_BYTES_TOTAL).absolute(c.bytes);
    counter!(names::CAPTURE_TRUNCATED_TOTAL).absolute(c.truncated);
    counter!(names::CAPTURE_BAD_BLOCKS_TOTAL).absolute(c.bad_blocks);
    counter!(names::KERNEL_PACKETS_TOTAL).absolute(c.kernel_packets);
    counter!(names::KERNEL_DROPS_TOTAL).absolute(c.kernel_drops);
    counter!(names::KERNEL_FREEZES_TOTAL).absolute(c.kernel_freezes);
    gauge!(names::CAPTURE_RING_BYTES).set(c.ring_bytes as f64);
    counter!(names::CAPTURE_RING_GROWS_TOTAL).absolute(c.ring_grows);

    gauge!(names::SESSIONS_ACTIVE).set(e.sessions_active as f64);
    counter!(names::SESSIONS_STARTED_TOTAL).absolute(e.sessions_started);
    gauge!(names::COPIES_REQUESTED).set(e.copies_requested as f64);
    counter!(names::CAPTURED_SESSIONS_STARTED_TOTAL).absolute(e.captured_sessions_started);
    gauge!(names::COPY_MULTIPLIER).set(e.copy_multiplier());
    counter!(names::SESSIONS_NO_TUPLE_TOTAL).absolute(e.sessions_no_tuple);
    counter!(names::SESSIONS_SAMPLED_OUT_TOTAL).absolute(e.sessions_sampled_out);
    counter!(names::SESSIONS_MIDSTREAM_TOTAL).absolute(e.sessions_midstream);
    counter!(names::SESSIONS_COMPLETED_TOTAL).absolute(e.sessions_completed);
    counter!(names::SESSIONS_OPEN_AT_END_TOTAL).absolute(e.sessions_open_at_end);
    for (reason, v) in e.sessions_failed.iter() {
        counter!(names::SESSIONS_FAILED_TOTAL, "reason" => reason).absolute(v);
    }
    counter!(names::SESSIONS_NOT_COPIED_TOTAL).absolute(e.sessions_not_copied);
    counter!(names::SESSIONS_SHED_TOTAL).absolute(e.sessions_shed);
    for (reason, v) in e.sessions_shed_overload.iter() {
        counter!(names::SESSIONS_SHED_OVERLOAD_TOTAL, "reason" => reason).absolute(v);
    }
    gauge!(names::SYNS_PENDING).set(e.syns_pending as f64);
    gauge!(names::UNPROVEN_SESSIONS).set(e.sessions_unproven as f64);
    counter!(names::UNPROVEN_PROVEN_TOTAL).absolute(e.sessions_proven);
    for (reason, v) in e.unproven_ended.iter() {
        counter!(names::UNPROVEN_ENDED_TOTAL, "reason" => reason).absolute(v);
    }
    for (reason, v) in e.syns_incomplete.iter() {
        counter!(names::SYNS_INCOMPLETE_TOTAL, "reason" => reason).absolute(v);
    }
    counter!(names::CONNECTIONS_OPENED_TOTAL).absolute(e.connections_opened);
    counter!(names::RECONNECTS_TOTAL).absolute(e.reconnects);
    counter!(names::SEGMENTS_SENT_TOTAL).absolute(e.segments_sent);
    counter!(names::BYTES_SENT_TOTAL).absolute(e.bytes_sent);
    counter!(names::PAYLOAD_BYTES_SENT_TOTAL).absolute(e.payload_bytes_sent);
    counter!(names::RETRANSMISSIONS_TOTAL).absolute(e.retransmissions);
    counter!(names::WINDOW_PROBES_TOTAL).absolute(e.window_probes);
    counter!(names::RECORDS_RECEIVED_TOTAL).absolute(e.records_received);
    counter!(names::ANSWER_TIMEOUTS_TOTAL).absolute(e.answer_timeouts);
    counter!(names::UNITS_SENT_TOTAL).absolute(e.units_sent);
    counter!(names::UNITS_AHEAD_TOTAL).absolute(e.units_ahead);
    counter!(names::H2_SESSIONS_TOTAL).absolute(e.h2_sessions);
    counter!(names::H2_STREAMS_TOTAL).absolute(e.h2_streams);
    let r = &e.requests;
    if !r.names.is_empty() {
        counter!(names::REQUESTS_TOTAL, "protocol" => "http").absolute(r.http_requests);
        counter!(names::REQUESTS_TOTAL, "protocol" => "bytes").absolute(r.byte_units);
        counter!(names::REQUESTS_DROPPED_TOTAL).absolute(r.dropped);
        counter!(names::REQUESTS_EDITED_TOTAL).absolute(r.edited);
        counter!(names::REQUESTS_MALFORMED_TOTAL).absolute(r.malformed);
        for (i, name) in r.names.iter().enumerate() {
            counter!(names::RULE_MATCHES_TOTAL, "rule" => name.clone())
                .absolute(r.rules.get(i).copied().unwrap_or(0));
        }
    }
    export_lag(&e.replay_lag);
    counter!(names::SYN_TIME_WAIT_RESETS_TOTAL).absolute(e.syn_time_wait_resets);
    counter!(names::SYN_PORT_MOVES_TOTAL).absolute(e.syn_port_moves);
    counter!(names::TUPLE_MOVES_TOTAL).absolute(e.tuple_moves);
    counter!(names::REGISTRATIONS_WITHDRAWN_TOTAL).absolute(e.registrations_withdrawn);
    counter!(names::INTERCEPT_RULES_LOST_TOTAL).absolute(e.rules_lost);
    counter!(names::REGISTRATIONS_NOT_LOCAL_TOTAL).absolute(e.registrations_not_local);
    for (reason, v) in e.drops.iter() {
        counter!(names::PACKETS_DROPPED_TOTAL, "reason" => reason).absolute(v);
    }
    gauge!(names::MEMORY_BYTES).set(s.memory as f64);

    let t = s.send;
    counter!(names::SEND_PACKETS_TOTAL).absolute(t.packets);
    counter!(names::SEND_BYTES_TOTAL).absolute(t.bytes);
    for (kind, v) in [
        ("emsgsize", t.err_msgsize),
        ("enobufs", t.err_nobufs),
        ("eagain", t.err_again),
        ("eperm", t.err_perm),
        ("other", t.err_other),
    ] {
        counter!(names::SEND_ERRORS_TOTAL, "kind" => kind).absolute(v);
    }
    for (reason, v) in [
        ("queue_full", t.dropped_queue_full),
        ("no_ipv6_socket", t.dropped_no_socket),
        ("unsplittable", t.dropped_unsplittable),
        ("eperm", t.err_perm),
        ("other_error", t.err_other),
    ] {
        counter!(names::SEND_DROPPED_TOTAL, "reason" => reason).absolute(v);
    }
    counter!(names::SEND_SPLIT_EXTRA_TOTAL).absolute(t.split_extra);
    counter!(names::SEND_GSO_TOTAL, "path" => "whole").absolute(t.gso_whole);
    counter!(names::SEND_GSO_TOTAL, "path" => "cut").absolute(t.gso_cut);
    counter!(names::SEND_GSO_WIRE_SEGMENTS_TOTAL).absolute(t.gso_wire_segments);
    counter!(names::SEND_GSO_ERRORS_TOTAL).absolute(t.gso_errors);
    gauge!(names::SEND_QUEUE).set(s.send_queue as f64);

    gauge!(names::INTERCEPTS_CONNECTED).set(s.intercepts as f64);
    gauge!(names::REGISTERED_SESSIONS).set(s.registered as f64);
    counter!(names::ENGINE_PANICS_TOTAL).absolute(s.panics);
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_exporter_prometheus::PrometheusBuilder;

    /// Export `engine` with everything else empty (one intercept connected).
    fn export_engine(engine: &EngineStats) {
        export(&Snapshot {
            engine,
            memory: 0,
            capture: CaptureStats::default(),
            send: &SendStats::default(),
            send_queue: 0,
            intercepts: 1,
            registered: 0,
            panics: 0,
        });
    }

    #[test]
    fn the_multiplier_is_exported_next_to_the_request() {
        let prom = PrometheusBuilder::new().build_recorder();
        let handle = prom.handle();
        let engine = EngineStats {
            copies_requested: 3,
            captured_sessions_started: 10,
            sessions_started: 29,
            sessions_no_tuple: 1,
            sessions_sampled_out: 12,
            ..EngineStats::default()
        };
        ::metrics::with_local_recorder(&prom, || {
            export_engine(&engine);
        });
        let text = handle.render();
        for want in [
            "copier_copies_requested 3",
            "copier_captured_sessions_started_total 10",
            "copier_sessions_started_total 29",
            "copier_copy_multiplier 2.9",
            "copier_sessions_no_tuple_total 1",
            "copier_sessions_sampled_out_total 12",
            "copier_packets_dropped_total{reason=\"not_sampled\"} 0",
            "copier_sessions_failed_total{reason=\"no_tuple\"} 0",
        ] {
            assert!(text.contains(want), "{want} missing in:\n{text}");
        }
    }

    #[test]
    fn the_replay_lag_is_a_histogram_fed_with_what_is_new() {
        let prom = PrometheusBuilder::new()
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full(REPLAY_LAG.to_string()),
                &crate::engine::LAG_BOUNDS,
            )
            .unwrap()
            .build_recorder();
        let handle = prom.handle();
        let mut engine = EngineStats::default();
        ::metrics::with_local_recorder(&prom, || {
            for ms in [0.3, 0.4, 3.0] {
                engine
                    .replay_lag
                    .record(std::time::Duration::from_secs_f64(ms / 1e3));
            }
            export_engine(&engine);
            engine
                .replay_lag
                .record(std::time::Duration::from_millis(700));
            export_engine(&engine); // only the new sample is recorded again
        });
        let text = handle.render();
        for want in [
            "copier_replay_lag_seconds_bucket{le=\"0.0005\"} 2",
            "copier_replay_lag_seconds_bucket{le=\"0.005\"} 3",
            "copier_replay_lag_seconds_bucket{le=\"1\"} 4",
            "copier_replay_lag_seconds_count 4",
        ] {
            assert!(text.contains(want), "{want} missing in:\n{text}");
        }
        let sum: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("copier_replay_lag_seconds_sum "))
            .unwrap()
            .parse()
            .unwrap();
        assert!((sum - 0.7037).abs() < 1e-6, "{sum}");
    }

    #[test]
    fn a_worker_threads_metrics_carry_its_label() {
        let prom = PrometheusBuilder::new().build_recorder();
        let handle = prom.handle();
        let rec = WorkerLabels(prom);
        ::metrics::with_local_recorder(&rec, || {
            counter!("copier_packets_captured_total").absolute(5);
            std::thread::scope(|s| {
                for w in 0..2u16 {
                    let rec = &rec;
                    s.spawn(move || {
                        label_this_thread(Some(w));
                        ::metrics::with_local_recorder(rec, || {
                            counter!("copier_packets_captured_total").absolute(10 + u64::from(w));
                            counter!("copier_sessions_failed_total", "reason" => "timeout")
                                .absolute(1);
                            gauge!("copier_registered_sessions").set(3.0);
                        });
                    });
                }
            });
        });
        let text = handle.render();
        for want in [
            "copier_packets_captured_total 5",
            "copier_packets_captured_total{worker=\"0\"} 10",
            "copier_packets_captured_total{worker=\"1\"} 11",
            "copier_sessions_failed_total{reason=\"timeout\",worker=\"1\"} 1",
            "copier_registered_sessions 3",
        ] {
            assert!(text.contains(want), "{want} missing in:\n{text}");
        }
        assert!(
            !text.contains("copier_registered_sessions{"),
            "process-wide gauges stay unlabelled:\n{text}"
        );
    }
}
