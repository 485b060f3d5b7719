//! The copier's Prometheus metrics: names, descriptions, and the periodic export of the
//! counters that the engine, the capture and the sender keep as plain numbers.
//!
//! Owns: the exporter (`--metrics ADDR`), which describes every metric of the copier's one table
//! ([`crate::metrics_table`]: names, kinds, labels, help texts), and the export of the engine's,
//! the capture's and the sender's counters under the names of [`names`]. The
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
    counter, gauge, histogram, Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder,
    SharedString, Unit,
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
    common::metrics_table::describe(crate::metrics_table::TABLE);
    Ok(())
}

/// Gauges that describe the whole process, not one worker: never labelled by worker.
pub const PROCESS_WIDE: [&str; 2] = [names::INTERCEPTS_CONNECTED, names::REGISTERED_SESSIONS];

/// The histogram of each request unit's replay lag (capture to first send), in seconds.
pub use crate::metrics_table::engine::REPLAY_LAG;

/// The metric names of the engine, the capture, the sender, the links to the intercepts and the
/// file outputs (declared, with their help texts, in [`crate::metrics_table`]).
pub mod names {
    pub use crate::metrics_table::engine::*;
    pub use crate::metrics_table::output::*;
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

common::reasons! {
    /// The errno kinds of failed sends: the `kind` label of `copier_send_errors_total`.
    enum SendError;
    /// `EMSGSIZE` answers (the packet is then split).
    Emsgsize => emsgsize,
    /// `ENOBUFS` answers.
    Enobufs => enobufs,
    /// `EAGAIN` answers.
    Eagain => eagain,
    /// `EPERM`/`EACCES` answers (packet dropped).
    Eperm => eperm,
    /// Other errors (packet dropped).
    Other => other,
}

common::reasons! {
    /// Why the sender dropped a packet: the `reason` label of `copier_send_dropped_total`.
    enum SendDrop;
    /// The queue was full.
    QueueFull => queue_full,
    /// Their family has no socket (IPv6 unavailable).
    NoIpv6Socket => no_ipv6_socket,
    /// Too big, and they could not be split.
    Unsplittable => unsplittable,
    /// `EPERM`/`EACCES` answers.
    Eperm => eperm,
    /// Other errors.
    OtherError => other_error,
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
        (SendError::Emsgsize, t.err_msgsize),
        (SendError::Enobufs, t.err_nobufs),
        (SendError::Eagain, t.err_again),
        (SendError::Eperm, t.err_perm),
        (SendError::Other, t.err_other),
    ] {
        counter!(names::SEND_ERRORS_TOTAL, "kind" => kind.label()).absolute(v);
    }
    for (reason, v) in [
        (SendDrop::QueueFull, t.dropped_queue_full),
        (SendDrop::NoIpv6Socket, t.dropped_no_socket),
        (SendDrop::Unsplittable, t.dropped_unsplittable),
        (SendDrop::Eperm, t.err_perm),
        (SendDrop::OtherError, t.err_other),
    ] {
        counter!(names::SEND_DROPPED_TOTAL, "reason" => reason.label()).absolute(v);
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
