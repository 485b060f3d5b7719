//! The copier's Prometheus metrics: names, descriptions, and the periodic export of the
//! counters that the engine, the capture and the sender keep as plain numbers.
//!
//! Owns: every metric name (all prefixed `copier_`) and the exporter (`--metrics ADDR`). The
//! engine thread calls [`export`] about once a second with absolute values; nothing on the packet
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
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter, Gauge, Histogram, Key, KeyName,
    Label, Metadata, Recorder, SharedString, Unit,
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
    Ok(())
}

/// Gauges that describe the whole process, not one worker: never labelled by worker.
pub const PROCESS_WIDE: [&str; 2] = ["copier_intercepts_connected", "copier_registered_sessions"];

/// The histogram of each request unit's replay lag (capture to first send), in seconds.
pub const REPLAY_LAG: &str = "copier_replay_lag_seconds";

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
                h.record_many(sum as f64 / n as f64 / 1e9, usize::try_from(n).unwrap_or(usize::MAX));
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
    describe_gauge!(
        "copier_capture_ring_bytes",
        Unit::Bytes,
        "Bytes of the capture ring(s) mapped now (the ring grows with the traffic)"
    );
    describe_counter!("copier_capture_ring_grows_total", "Times the capture ring grew");

    describe_counter!(
        "copier_sessions_started_total",
        "Copy sessions started (up to --copies per captured session)"
    );
    describe_gauge!(
        "copier_copies_requested",
        "Copies asked for per captured session (--copies)"
    );
    describe_counter!(
        "copier_captured_sessions_started_total",
        "Captured sessions of which at least one copy started"
    );
    describe_gauge!(
        "copier_copy_multiplier",
        "Copy sessions started per captured session started, since the start (compare with \
         copier_copies_requested; the ratio of the rates of the two counters gives it over a window)"
    );
    describe_counter!(
        "copier_sessions_no_tuple_total",
        "Copy sessions not started because every client port of their address was taken"
    );
    describe_counter!(
        "copier_sessions_sampled_out_total",
        "Captured sessions left out by --sample"
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
    describe_gauge!(
        "copier_syns_pending",
        "Captured SYNs waiting for the client's handshake ACK (no test session yet)"
    );
    describe_counter!(
        "copier_syns_incomplete_total",
        "Captured SYNs whose handshake never completed (never copied), by what ended them"
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
        "copier_units_sent_total",
        "Request units sent to the test server (first send of their first byte), every copy counted"
    );
    describe_counter!(
        "copier_units_ahead_total",
        "Request units sent before the test server answered the one before (windowed pacing)"
    );
    describe_histogram!(
        REPLAY_LAG,
        Unit::Seconds,
        "Replay lag of each request unit: from the engine's receipt of its first captured byte \
         (the capture ring adds up to its 10 ms block timeout before) to its first send toward \
         the test server"
    );
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
        "copier_syn_time_wait_resets_total",
        "SYNs answered by a bare ACK of a TIME_WAIT socket, reset and sent again"
    );
    describe_counter!(
        "copier_syn_port_moves_total",
        "Test connections moved to another port after meeting a TIME_WAIT socket twice"
    );
    describe_counter!(
        "copier_packets_dropped_total",
        "Captured packets or records not carried, by reason"
    );
    describe_gauge!(
        "copier_memory_bytes",
        Unit::Bytes,
        "What the engine holds against --max-memory: buffered bytes plus a fixed cost per session and pending SYN"
    );
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
    describe_counter!(
        "copier_records_unroutable_total",
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
    counter!("copier_packets_captured_total").absolute(c.packets);
    counter!("copier_capture_bytes_total").absolute(c.bytes);
    counter!("copier_capture_truncated_total").absolute(c.truncated);
    counter!("copier_capture_bad_blocks_total").absolute(c.bad_blocks);
    counter!("copier_kernel_packets_total").absolute(c.kernel_packets);
    counter!("copier_kernel_drops_total").absolute(c.kernel_drops);
    counter!("copier_kernel_freezes_total").absolute(c.kernel_freezes);
    gauge!("copier_capture_ring_bytes").set(c.ring_bytes as f64);
    counter!("copier_capture_ring_grows_total").absolute(c.ring_grows);

    gauge!("copier_sessions_active").set(e.sessions_active as f64);
    counter!("copier_sessions_started_total").absolute(e.sessions_started);
    gauge!("copier_copies_requested").set(e.copies_requested as f64);
    counter!("copier_captured_sessions_started_total").absolute(e.captured_sessions_started);
    gauge!("copier_copy_multiplier").set(e.copy_multiplier());
    counter!("copier_sessions_no_tuple_total").absolute(e.sessions_no_tuple);
    counter!("copier_sessions_sampled_out_total").absolute(e.sessions_sampled_out);
    counter!("copier_sessions_midstream_total").absolute(e.sessions_midstream);
    counter!("copier_sessions_completed_total").absolute(e.sessions_completed);
    for (reason, v) in e.sessions_failed.iter() {
        counter!("copier_sessions_failed_total", "reason" => reason).absolute(v);
    }
    counter!("copier_sessions_not_copied_total").absolute(e.sessions_not_copied);
    counter!("copier_sessions_shed_total").absolute(e.sessions_shed);
    gauge!("copier_syns_pending").set(e.syns_pending as f64);
    for (reason, v) in e.syns_incomplete.iter() {
        counter!("copier_syns_incomplete_total", "reason" => reason).absolute(v);
    }
    counter!("copier_connections_opened_total").absolute(e.connections_opened);
    counter!("copier_reconnects_total").absolute(e.reconnects);
    counter!("copier_segments_sent_total").absolute(e.segments_sent);
    counter!("copier_bytes_sent_total").absolute(e.bytes_sent);
    counter!("copier_payload_bytes_sent_total").absolute(e.payload_bytes_sent);
    counter!("copier_retransmissions_total").absolute(e.retransmissions);
    counter!("copier_records_received_total").absolute(e.records_received);
    counter!("copier_answer_timeouts_total").absolute(e.answer_timeouts);
    counter!("copier_units_sent_total").absolute(e.units_sent);
    counter!("copier_units_ahead_total").absolute(e.units_ahead);
    export_lag(&e.replay_lag);
    counter!("copier_syn_time_wait_resets_total").absolute(e.syn_time_wait_resets);
    counter!("copier_syn_port_moves_total").absolute(e.syn_port_moves);
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
                engine.replay_lag.record(std::time::Duration::from_secs_f64(ms / 1e3));
            }
            export_engine(&engine);
            engine.replay_lag.record(std::time::Duration::from_millis(700));
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
