//! Every metric of the copier, declared once: name, kind, unit, labels and help text.
//!
//! Owns: the [`TABLE`] that [`crate::metrics::install`] describes to the exporter, and the name
//! constants the recording sites use, one module per part of the copier (`engine`, `output`,
//! `spread`, `shaping`, `rate`, `compare`, `mirror`). Nothing else in the copier spells a metric
//! name. The tests at the end keep the docs (README.md, docs/*.md) and the Grafana dashboard
//! (deploy/grafana) naming only metrics of the table, and the docs naming every one of them.
//!
//! With several workers every series of a worker's thread also carries a `worker` label, except
//! the process-wide gauges ([`crate::metrics::PROCESS_WIDE`]); the labels below do not list it.

common::metrics_table! {
/// Every metric the copier exports.
pub const TABLE;
/// The engine, the capture, the sender, the links to the intercepts and the workers (`crate::metrics`).
pub mod engine {
    PACKETS_CAPTURED_TOTAL: Counter "copier_packets_captured_total" [] =
        "IP packets read from the capture ring";
    CAPTURE_BYTES_TOTAL: Counter(Bytes) "copier_capture_bytes_total" [] =
        "Bytes of the captured IP packets";
    CAPTURE_TRUNCATED_TOTAL: Counter "copier_capture_truncated_total" [] =
        "Captured packets cut short by the ring (larger than a block), not copied";
    CAPTURE_BAD_BLOCKS_TOTAL: Counter "copier_capture_bad_blocks_total" [] =
        "Ring blocks with inconsistent headers";
    KERNEL_PACKETS_TOTAL: Counter "copier_kernel_packets_total" [] =
        "Packets that passed the kernel filter (PACKET_STATISTICS tp_packets)";
    KERNEL_DROPS_TOTAL: Counter "copier_kernel_drops_total" [] =
        "Packets the kernel dropped because the capture ring was full (tp_drops)";
    KERNEL_FREEZES_TOTAL: Counter "copier_kernel_freezes_total" [] =
        "Times the capture queue froze on a full ring (tp_freeze_q_cnt)";
    SESSIONS_ACTIVE: Gauge "copier_sessions_active" [] =
        "Sessions in the engine's table";
    CAPTURE_RING_BYTES: Gauge(Bytes) "copier_capture_ring_bytes" [] =
        "Bytes of the capture ring(s) mapped now (the ring grows with the traffic)";
    CAPTURE_RING_GROWS_TOTAL: Counter "copier_capture_ring_grows_total" [] =
        "Times the capture ring grew";
    SESSIONS_STARTED_TOTAL: Counter "copier_sessions_started_total" [] =
        "Copy sessions started (up to --copies per captured session)";
    COPIES_REQUESTED: Gauge "copier_copies_requested" [] =
        "Copies asked for per captured session (--copies)";
    CAPTURED_SESSIONS_STARTED_TOTAL: Counter "copier_captured_sessions_started_total" [] =
        "Captured sessions of which at least one copy started";
    COPY_MULTIPLIER: Gauge "copier_copy_multiplier" [] =
        "Copy sessions started per captured session started, since the start (compare with \
     copier_copies_requested; the ratio of the rates of the two counters gives it over a window)";
    SESSIONS_NO_TUPLE_TOTAL: Counter "copier_sessions_no_tuple_total" [] =
        "Copy sessions not started because every client port of their address was taken";
    SESSIONS_SAMPLED_OUT_TOTAL: Counter "copier_sessions_sampled_out_total" [] =
        "Captured sessions left out by --sample";
    SESSIONS_MIDSTREAM_TOTAL: Counter "copier_sessions_midstream_total" [] =
        "Sessions caught in the middle and started with a handshake of our own";
    SESSIONS_COMPLETED_TOTAL: Counter "copier_sessions_completed_total" [] =
        "Sessions that ended as the client ended them";
    SESSIONS_OPEN_AT_END_TOTAL: Counter "copier_sessions_open_at_end_total" [] =
        "Sessions still open, every byte sent and answered, when the capture file ended (--offline): neither completed nor failed";
    SESSIONS_FAILED_TOTAL: Counter "copier_sessions_failed_total" ["reason"] =
        "Sessions that ended otherwise, by reason";
    SESSIONS_NOT_COPIED_TOTAL: Counter "copier_sessions_not_copied_total" [] =
        "Sessions not copied because no intercept was connected";
    SESSIONS_SHED_TOTAL: Counter "copier_sessions_shed_total" [] =
        "Sessions shed to stay under --max-memory or to make room at --max-sessions (mid-stream candidates included)";
    UNPROVEN_SESSIONS: Gauge "copier_unproven_sessions" [] =
        "Sessions and mid-stream candidates in the table that have not shown a request answered online yet (see --unproven-timeout)";
    UNPROVEN_PROVEN_TOTAL: Counter "copier_unproven_proven_total" [] =
        "Sessions and mid-stream candidates that proved themselves (a request of the client's answered online)";
    UNPROVEN_ENDED_TOTAL: Counter "copier_unproven_ended_total" ["reason"] =
        "Unproven sessions and mid-stream candidates ended before they proved themselves, by reason (unproven_shed: room was needed; unproven_timeout: --unproven-timeout)";
    SYNS_PENDING: Gauge "copier_syns_pending" [] =
        "Captured SYNs waiting for the client's handshake ACK (no test session yet)";
    SYNS_INCOMPLETE_TOTAL: Counter "copier_syns_incomplete_total" ["reason"] =
        "Captured SYNs whose handshake never completed (never copied), by what ended them";
    CONNECTIONS_OPENED_TOTAL: Counter "copier_connections_opened_total" [] =
        "Connections opened to the test server";
    RECONNECTS_TOTAL: Counter "copier_reconnects_total" [] =
        "Connections opened to carry requests after the test server closed";
    SEGMENTS_SENT_TOTAL: Counter "copier_segments_sent_total" [] =
        "Segments the engine sent";
    UNITS_SENT_TOTAL: Counter "copier_units_sent_total" [] =
        "Request units sent to the test server (first send of their first byte), every copy counted";
    H2_SESSIONS_TOTAL: Counter "copier_h2_sessions_total" [] =
        "Captured sessions recognised as HTTP/2 by the client's preface (copied unpaced, cut at frame boundaries)";
    H2_STREAMS_TOTAL: Counter "copier_h2_streams_total" [] =
        "Streams the clients of HTTP/2 sessions opened (HEADERS frames)";
    UNITS_AHEAD_TOTAL: Counter "copier_units_ahead_total" [] =
        "Request units sent before the test server answered the one before (windowed pacing)";
    REQUESTS_TOTAL: Counter "copier_requests_total" ["protocol"] =
        "Requests the --rules editor read, by protocol (http, or bytes: units of other protocols), every copy counted";
    REQUESTS_DROPPED_TOTAL: Counter "copier_requests_dropped_total" [] =
        "Requests the --rules filters kept from the test server";
    REQUESTS_EDITED_TOTAL: Counter "copier_requests_edited_total" [] =
        "Copied requests whose head --rules changed (dye, header edits, rewrites)";
    REQUESTS_MALFORMED_TOTAL: Counter "copier_requests_malformed_total" [] =
        "Malformed HTTP requests (--rules): the rest of the session passed as captured";
    RULE_MATCHES_TOTAL: Counter "copier_rule_matches_total" ["rule"] =
        "Requests each --rules rule matched (filters: denied or allowed; allow_only: dropped for matching no allow filter; rewrites: changed)";
    REPLAY_LAG: Histogram(Seconds) "copier_replay_lag_seconds" [] =
        "Replay lag of each request unit: from the engine's receipt of its first captured byte \
     (the capture ring adds up to its 10 ms block timeout before) to its first send toward \
     the test server";
    BYTES_SENT_TOTAL: Counter(Bytes) "copier_bytes_sent_total" [] =
        "IP bytes the engine sent";
    PAYLOAD_BYTES_SENT_TOTAL: Counter(Bytes) "copier_payload_bytes_sent_total" [] =
        "Client payload bytes sent, retransmissions included";
    RETRANSMISSIONS_TOTAL: Counter "copier_retransmissions_total" [] =
        "Segments sent again";
    WINDOW_PROBES_TOTAL: Counter "copier_window_probes_total" [] =
        "Zero-window probes sent: a test server's window was shut while data waited for it";
    RECORDS_RECEIVED_TOTAL: Counter "copier_records_received_total" [] =
        "Response records received from intercepts";
    ANSWER_TIMEOUTS_TOTAL: Counter "copier_answer_timeouts_total" [] =
        "Requests released by pacing without an answer";
    SYN_TIME_WAIT_RESETS_TOTAL: Counter "copier_syn_time_wait_resets_total" [] =
        "SYNs answered by a bare ACK of a TIME_WAIT socket, reset and sent again";
    REGISTRATIONS_WITHDRAWN_TOTAL: Counter "copier_registrations_withdrawn_total" [] =
        "Test connections held back (nothing sent) because their registration stopped being in force: the intercept's link ended or its firewall rules went missing";
    INTERCEPT_RULES_LOST_TOTAL: Counter "copier_intercept_rules_lost_total" [] =
        "Times an intercept said its firewall rules went missing (its sessions send nothing until they are back)";
    REGISTRATIONS_NOT_LOCAL_TOTAL: Counter "copier_registrations_not_local_total" [] =
        "Verdicts server_not_local: an intercept that does not guard the test server (the copy waits for the one that does)";
    TUPLE_MOVES_TOTAL: Counter "copier_tuple_moves_total" [] =
        "Test connections moved to another tuple before sending anything: an intercept said another copier holds theirs";
    SYN_PORT_MOVES_TOTAL: Counter "copier_syn_port_moves_total" [] =
        "Test connections moved to another port after meeting a TIME_WAIT socket twice";
    PACKETS_DROPPED_TOTAL: Counter "copier_packets_dropped_total" ["reason"] =
        "Captured packets or records not carried, by reason";
    MEMORY_BYTES: Gauge(Bytes) "copier_memory_bytes" [] =
        "What the engine holds against --max-memory: buffered bytes plus a fixed cost per session and pending SYN";
    SEND_PACKETS_TOTAL: Counter "copier_send_packets_total" [] =
        "Packets the raw sockets accepted";
    SEND_BYTES_TOTAL: Counter(Bytes) "copier_send_bytes_total" [] =
        "Bytes the raw sockets accepted";
    SEND_ERRORS_TOTAL: Counter "copier_send_errors_total" ["kind"] =
        "Send errors, by errno kind";
    SEND_DROPPED_TOTAL: Counter "copier_send_dropped_total" ["reason"] =
        "Packets the sender dropped, by reason";
    SEND_SPLIT_EXTRA_TOTAL: Counter "copier_send_split_extra_total" [] =
        "Extra packets made by splitting after EMSGSIZE, or by cutting super-segments in user space";
    SESSIONS_SHED_OVERLOAD_TOTAL: Counter "copier_sessions_shed_overload_total" ["reason"] =
        "Captured sessions not copied at all because the copier was behind when they started (capture_backlog, kernel_drops), or given up at a hole the capture lost, their test connection reset before anything after the hole (hole): each session is copied whole or not at all";
    SEND_GSO_TOTAL: Counter "copier_send_gso_total" ["path"] =
        "Super-segments (--gso) by path: whole (AF_PACKET with a GSO header, cut by the kernel or the NIC) or cut (by the copier)";
    SEND_GSO_WIRE_SEGMENTS_TOTAL: Counter "copier_send_gso_wire_segments_total" [] =
        "Segments on the wire that the super-segments sent whole stand for";
    SEND_GSO_ERRORS_TOTAL: Counter "copier_send_gso_errors_total" [] =
        "AF_PACKET sends of super-segments that failed (the super-segment was then cut by the copier)";
    SEND_QUEUE: Gauge "copier_send_queue" [] =
        "Packets waiting in the send queue";
    INTERCEPTS_CONNECTED: Gauge "copier_intercepts_connected" [] =
        "Intercepts connected now";
    REGISTERED_SESSIONS: Gauge "copier_registered_sessions" [] =
        "Sessions registered with the intercepts";
    CONTROL_CONNECTS_TOTAL: Counter "copier_control_connects_total" ["intercept"] =
        "Successful handshakes with an intercept";
    CONTROL_LOSSES_TOTAL: Counter "copier_control_losses_total" ["intercept"] =
        "Connections to an intercept lost";
    CONTROL_RECORDS_TOTAL: Counter "copier_control_records_total" ["intercept"] =
        "Records received, per intercept";
    ENGINE_PANICS_TOTAL: Counter "copier_engine_panics_total" [] =
        "Engine panics survived (the session table was rebuilt)";
    RECORDS_UNROUTABLE_TOTAL: Counter "copier_records_unroutable_total" ["reason"] =
        "Records dropped before reaching a worker (several workers): headers that do not parse, \
     or a session no worker owns, by reason";
}
/// The file outputs (`crate::outage`): the `--record` archive and the `--compare-log` file.
pub mod output {
    OUTPUT_ERRORS_TOTAL: Counter "copier_output_errors_total" ["output", "reason"] =
        "Failed writes of a file output (output: record = --record, compare_log = --compare-log), by reason \
     (no_space, quota, read_only, permission, other); the copy goes on and the next write tries again";
    OUTPUT_DROPPED_TOTAL: Counter "copier_output_dropped_total" ["output"] =
        "Items a file output could not write and dropped (record: packets; compare_log: lines)";
    OUTPUT_DOWN: Gauge "copier_output_down" ["output"] =
        "1 while a file output's writes fail (from its first failed write to the next that works), else 0";
}
/// The test servers of spread maps (`crate::spread`).
pub mod spread {
    TARGET_SESSIONS_TOTAL: Counter "copier_target_sessions_total" ["target"] =
        "Copies started per test server (probes included)";
    TARGET_PROBES_TOTAL: Counter "copier_target_probes_total" ["target"] =
        "Probe copies sent to a test server while it was taken out";
    TARGET_DOWNS_TOTAL: Counter "copier_target_downs_total" ["target"] =
        "Times a test server was taken out (no answer for --target-down-after)";
    TARGET_UP: Gauge "copier_target_up" ["target"] =
        "1 while a test server takes new sessions, 0 while it is taken out";
    TARGET_WEIGHT: Gauge "copier_target_weight" ["target"] =
        "A test server's weight in its map";
    MAPS_ALL_TARGETS_DOWN: Gauge "copier_maps_all_targets_down" [] =
        "Maps whose every test server is taken out (alert)";
    TARGET_LIVE: Gauge "copier_target_live_sessions" ["target"] =
        "Copies live on a test server";
    TARGET_OVERLOADED: Gauge "copier_target_overloaded" ["target"] =
        "1 while a test server holds --target-max-live copies";
    OVERLOAD_REFUSED_TOTAL: Counter "copier_target_overload_refused_total" ["target"] =
        "Copies not made because every test server of their map was overloaded (on the map's first server)";
    MAPS_ALL_TARGETS_OVERLOADED: Gauge "copier_maps_all_targets_overloaded" [] =
        "Maps whose every test server that is up is overloaded (alert)";
    TARGET_ANSWERS_TOTAL: Counter "copier_target_answers_total" ["target"] =
        "Request units timed on a test server that got an answer (the unit pacing waits on; units sent ahead are not timed)";
    TARGET_ANSWER_SECONDS_TOTAL: Gauge "copier_target_answer_seconds_total" ["target"] =
        "Sum of the answer times (unit's first byte sent to the first answer byte) of copier_target_answers_total";
    TARGET_ANSWER_SMOOTHED: Gauge "copier_target_answer_smoothed_seconds" ["target"] =
        "A test server's answer time, smoothed over about its last ten answers (0 before the first)";
    TARGET_SLOW: Gauge "copier_target_slow" ["target"] =
        "1 while a test server's smoothed answer time is above --target-slow-after";
    TARGET_SLOW_TOTAL: Counter "copier_target_slow_total" ["target"] =
        "Times a test server turned slow (--target-slow-after)";
    TARGET_FAILURES_TOTAL: Counter "copier_target_failures_total" ["target"] =
        "Copies a test server failed (refused, segments unacknowledged through every retransmission, closed without answers)";
    TARGET_FAILING: Gauge "copier_target_failing" ["target"] =
        "1 while a test server fails more than --target-fail-rate percent of its copies";
}
/// The shaper (`crate::shaping`).
pub mod shaping {
    FACTOR: Gauge "copier_shaper_factor" [] =
        "The multiplication factor in force (profile factor x load x share)";
    COPIES_LIVE: Gauge "copier_shaper_copies_live" [] =
        "Copies the shaper holds (live copy sessions)";
    USERS_ACTIVE: Gauge "copier_shaper_users_active" [] =
        "Virtual users in use (live client-to-user mappings), with pools";
    SOURCES_ON: Gauge "copier_shaper_sources_on" [] =
        "ON/OFF sources in an ON period now, with gating";
    HELD_UNITS: Gauge "copier_shaper_held_units" [] =
        "Request units held by the shaper's gates now (think time, OFF periods)";
    GATED_UNITS_TOTAL: Counter "copier_shaper_gated_units_total" [] =
        "Request units the shaper's gates decided on";
    GATE_DELAY_MS_TOTAL: Counter "copier_shaper_gate_delay_milliseconds_total" [] =
        "Sum of the gates' holds in ms (release minus online arrival); its rate over the gated units' rate: the mean gate delay";
}
/// The closed loop of `--target-rate` (`crate::rate`).
pub mod rate {
    TARGET: Gauge "copier_rate_target" [] =
        "Closed loop (--target-rate): this engine's target, request units per second";
    MEASURED: Gauge "copier_rate_measured" [] =
        "Closed loop: request units per second sent to the test side in the last second";
    ERROR: Gauge "copier_rate_error" [] =
        "Closed loop: (measured - target) / target";
    SCALE: Gauge "copier_rate_scale" [] =
        "Closed loop: the multiplier of the profile's factor it set";
    BOUNDED: Gauge "copier_rate_bounded" [] =
        "Closed loop: 1 while the factor is held at a bound (target out of reach)";
    HELD: Gauge "copier_rate_held" [] =
        "Closed loop: 1 while the test side is saturated and the loop lowers the factor (10 % a second)";
}
/// The comparison of `--compare` (`crate::shadow`).
pub mod compare {
    EXCHANGES_TOTAL: Counter "copier_compare_exchanges_total" ["endpoint", "result"] =
        "Exchanges compared, by endpoint and result (equal, differ, malformed)";
    DIFFERENCES_TOTAL: Counter "copier_compare_differences_total" ["endpoint", "kind"] =
        "Differing exchanges by endpoint and kind of difference (status, header, body_field, body)";
    NOISE_LEARNED_TOTAL: Counter "copier_compare_noise_learned_total" ["endpoint"] =
        "Fields learned as noise, by endpoint";
    TIME_RATIO: Gauge "copier_compare_answer_time_ratio" ["endpoint", "quantile"] =
        "Test answer time over the online one at a quantile, by endpoint";
    NOT_COMPARED_TOTAL: Counter "copier_compare_not_compared_total" ["reason"] =
        "Requests or connections not compared, by reason";
    MALFORMED_TOTAL: Counter "copier_compare_malformed_total" [] =
        "Exchanges not compared because an answer is malformed (HTTP/1.x that does not parse or frame, or an HTTP/2 message that does not decode)";
    CONNECTIONS: Gauge "copier_compare_connections" [] =
        "Connections the comparison follows";
    GRPC_STATUS_TOTAL: Counter "copier_compare_grpc_status_total" ["status"] =
        "Test answers compared, by their grpc-status";
    H2_CONNECTIONS_TOTAL: Counter "copier_compare_h2_connections_total" [] =
        "Connections compared as HTTP/2 (stream by stream)";
    PENDING: Gauge "copier_compare_pending" [] =
        "Exchanges waiting for an answer";
    BYTES: Gauge "copier_compare_bytes" [] =
        "Bytes the comparison holds (streams and waiting exchanges)";
}
/// The mirror input (`crate::mirror`).
pub mod mirror {
    DATAGRAMS: Counter "copier_mirror_datagrams_total" [] =
        "Datagrams read from the mirror's UDP port";
    PACKETS: Counter "copier_mirror_packets_total" ["direction"] =
        "Inner packets of the mirror taken, by direction (client: copied; server: the online answers, compared with --compare)";
    DROPPED: Counter "copier_mirror_dropped_total" ["reason"] =
        "Datagrams or inner packets of the mirror not taken, by reason (short, bad_header, control, not_ip, bad_version, \
     truncated, vni, unselected, duplicate, socket_buffer; kernel_filter: by the socket's filter in the kernel, never read)";
    VNIS: Gauge "copier_mirror_vnis_seen" [] =
        "Mirror sessions (VNIs) seen so far";
}}

#[cfg(test)]
mod tests {
    use super::TABLE;
    use std::path::{Path, PathBuf};

    /// Words with the prefix `copier_` in the docs that are no metric.
    const NOT_METRICS: &[&str] = &[
        "copier_nonce",  // the handshake's nonce (DESIGN.md)
        "copier_slow",   // a reason label of intercept_records_dropped_total
        "copier_gone",   // a reason label of intercept_packets_dropped_total
        "copier_engine", // a fuzz target (BENCHMARKS.md)
    ];

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    #[test]
    fn every_name_is_in_the_table_once() {
        let problems = common::metrics_table::table_problems(TABLE, "copier_");
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn the_docs_and_the_dashboard_name_only_metrics_of_the_table() {
        let docs = common::metrics_table::repo_docs(&repo()).unwrap();
        let unknown = common::metrics_table::unknown_names(TABLE, "copier_", NOT_METRICS, &docs);
        assert!(
            unknown.is_empty(),
            "not in copier/src/metrics_table.rs: {unknown:#?}"
        );
    }

    #[test]
    fn docs_metrics_md_lists_the_table() {
        common::metrics_table::check_doc_section(&repo().join("docs/METRICS.md"), "copier", TABLE)
            .unwrap();
    }
}
