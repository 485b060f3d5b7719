//! The copier's Prometheus metrics: names, descriptions, and the periodic export of the
//! counters that the engine, the capture and the sender keep as plain numbers.
//!
//! Owns: every metric name (all prefixed `copier_`) and the exporter (`--metrics ADDR`). The
//! engine thread calls [`export`] about once a second with absolute values; nothing on the packet
//! path touches the `metrics` crate. Without `--metrics` no recorder is installed and the calls are
//! no-ops.

use std::net::SocketAddr;

use ::metrics::{counter, describe_counter, describe_gauge, gauge, Unit};

use crate::capture::CaptureStats;
use crate::engine::EngineStats;
use crate::send::SendStats;

/// Install the Prometheus exporter listening on `addr` (needs a tokio runtime context) and
/// describe every metric.
pub fn install(addr: SocketAddr) -> Result<(), metrics_exporter_prometheus::BuildError> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()?;
    describe();
    Ok(())
}

fn describe() {
    describe_counter!(
        "copier_packets_captured_total",
        "IP packets read from the capture ring"
    );
    describe_counter!(
        "copier_capture_bytes_total",
        Unit::Bytes,
        "Bytes of the captured IP packets"
    );
    describe_counter!(
        "copier_capture_truncated_total",
        "Captured packets cut short by the ring (larger than a block), not copied"
    );
    describe_counter!(
        "copier_capture_bad_blocks_total",
        "Ring blocks with inconsistent headers"
    );
    describe_counter!(
        "copier_kernel_packets_total",
        "Packets that passed the kernel filter (PACKET_STATISTICS tp_packets)"
    );
    describe_counter!(
        "copier_kernel_drops_total",
        "Packets the kernel dropped because the capture ring was full (tp_drops)"
    );
    describe_counter!(
        "copier_kernel_freezes_total",
        "Times the capture queue froze on a full ring (tp_freeze_q_cnt)"
    );
    describe_gauge!("copier_sessions_active", "Sessions in the engine's table");
    describe_counter!(
        "copier_sessions_started_total",
        "Sessions whose copy started"
    );
    describe_counter!(
        "copier_sessions_midstream_total",
        "Sessions caught in the middle and started with a handshake of our own"
    );
    describe_counter!(
        "copier_sessions_completed_total",
        "Sessions that ended as the client ended them"
    );
    describe_counter!(
        "copier_sessions_failed_total",
        "Sessions that ended otherwise, by reason"
    );
    describe_counter!(
        "copier_sessions_not_copied_total",
        "Sessions not copied because no intercept was connected"
    );
    describe_counter!(
        "copier_sessions_shed_total",
        "Sessions shed to stay under --max-memory"
    );
    describe_counter!(
        "copier_connections_opened_total",
        "Connections opened to the test server"
    );
    describe_counter!(
        "copier_reconnects_total",
        "Connections opened to carry requests after the test server closed"
    );
    describe_counter!("copier_segments_sent_total", "Segments the engine sent");
    describe_counter!(
        "copier_bytes_sent_total",
        Unit::Bytes,
        "IP bytes the engine sent"
    );
    describe_counter!(
        "copier_payload_bytes_sent_total",
        Unit::Bytes,
        "Client payload bytes sent, retransmissions included"
    );
    describe_counter!("copier_retransmissions_total", "Segments sent again");
    describe_counter!(
        "copier_records_received_total",
        "Response records received from intercepts"
    );
    describe_counter!(
        "copier_answer_timeouts_total",
        "Requests released by pacing without an answer"
    );
    describe_counter!(
        "copier_packets_dropped_total",
        "Captured packets or records not carried, by reason"
    );
    describe_gauge!("copier_memory_bytes", Unit::Bytes, "Bytes the engine holds");
    describe_counter!(
        "copier_send_packets_total",
        "Packets the raw sockets accepted"
    );
    describe_counter!(
        "copier_send_bytes_total",
        Unit::Bytes,
        "Bytes the raw sockets accepted"
    );
    describe_counter!("copier_send_errors_total", "Send errors, by errno kind");
    describe_counter!(
        "copier_send_dropped_total",
        "Packets the sender dropped, by reason"
    );
    describe_counter!(
        "copier_send_split_extra_total",
        "Extra packets made by splitting after EMSGSIZE"
    );
    describe_gauge!("copier_send_queue", "Packets waiting in the send queue");
    describe_gauge!("copier_intercepts_connected", "Intercepts connected now");
    describe_gauge!(
        "copier_registered_sessions",
        "Sessions registered with the intercepts"
    );
    describe_counter!(
        "copier_control_connects_total",
        "Successful handshakes with an intercept"
    );
    describe_counter!(
        "copier_control_losses_total",
        "Connections to an intercept lost"
    );
    describe_counter!(
        "copier_control_records_total",
        "Records received, per intercept"
    );
    describe_counter!(
        "copier_engine_panics_total",
        "Engine panics survived (the session table was rebuilt)"
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
    counter!("copier_packets_captured_total").absolute(c.packets);
    counter!("copier_capture_bytes_total").absolute(c.bytes);
    counter!("copier_capture_truncated_total").absolute(c.truncated);
    counter!("copier_capture_bad_blocks_total").absolute(c.bad_blocks);
    counter!("copier_kernel_packets_total").absolute(c.kernel_packets);
    counter!("copier_kernel_drops_total").absolute(c.kernel_drops);
    counter!("copier_kernel_freezes_total").absolute(c.kernel_freezes);

    gauge!("copier_sessions_active").set(e.sessions_active as f64);
    counter!("copier_sessions_started_total").absolute(e.sessions_started);
    counter!("copier_sessions_midstream_total").absolute(e.sessions_midstream);
    counter!("copier_sessions_completed_total").absolute(e.sessions_completed);
    for (reason, v) in e.sessions_failed.iter() {
        counter!("copier_sessions_failed_total", "reason" => reason).absolute(v);
    }
    counter!("copier_sessions_not_copied_total").absolute(e.sessions_not_copied);
    counter!("copier_sessions_shed_total").absolute(e.sessions_shed);
    counter!("copier_connections_opened_total").absolute(e.connections_opened);
    counter!("copier_reconnects_total").absolute(e.reconnects);
    counter!("copier_segments_sent_total").absolute(e.segments_sent);
    counter!("copier_bytes_sent_total").absolute(e.bytes_sent);
    counter!("copier_payload_bytes_sent_total").absolute(e.payload_bytes_sent);
    counter!("copier_retransmissions_total").absolute(e.retransmissions);
    counter!("copier_records_received_total").absolute(e.records_received);
    counter!("copier_answer_timeouts_total").absolute(e.answer_timeouts);
    for (reason, v) in e.drops.iter() {
        counter!("copier_packets_dropped_total", "reason" => reason).absolute(v);
    }
    gauge!("copier_memory_bytes").set(s.memory as f64);

    let t = s.send;
    counter!("copier_send_packets_total").absolute(t.packets);
    counter!("copier_send_bytes_total").absolute(t.bytes);
    for (kind, v) in [
        ("emsgsize", t.err_msgsize),
        ("enobufs", t.err_nobufs),
        ("eagain", t.err_again),
        ("eperm", t.err_perm),
        ("other", t.err_other),
    ] {
        counter!("copier_send_errors_total", "kind" => kind).absolute(v);
    }
    for (reason, v) in [
        ("queue_full", t.dropped_queue_full),
        ("no_ipv6_socket", t.dropped_no_socket),
        ("unsplittable", t.dropped_unsplittable),
        ("eperm", t.err_perm),
        ("other_error", t.err_other),
    ] {
        counter!("copier_send_dropped_total", "reason" => reason).absolute(v);
    }
    counter!("copier_send_split_extra_total").absolute(t.split_extra);
    gauge!("copier_send_queue").set(s.send_queue as f64);

    gauge!("copier_intercepts_connected").set(s.intercepts as f64);
    gauge!("copier_registered_sessions").set(s.registered as f64);
    counter!("copier_engine_panics_total").absolute(s.panics);
}
