//! Every metric of the intercept, declared once: name, kind, labels and help text.
//!
//! Owns: the [`TABLE`] that [`crate::metrics::describe`] describes to the exporter, and the name
//! constants the recording sites use (re-exported by [`crate::metrics`]). Nothing else in the
//! intercept spells a metric name. The tests at the end keep the docs and the Grafana dashboard
//! naming only metrics of the table, and the docs naming every one of them.

common::metrics_table! {
/// Every metric the intercept exports.
pub const TABLE;
/// The intercept's metrics.
pub mod names {
    PACKETS_QUEUED: Counter "intercept_packets_queued_total" ["queue"] =
        "Packets read from NFQUEUE";
    NFQUEUE_RESTS: Counter "intercept_nfqueue_rests_total" ["queue"] =
        "Rests of an NFQUEUE worker between batches, as the copiers allow (their records wait meanwhile)";
    PACKETS_ACCEPTED: Counter "intercept_packets_accepted_total" [] =
        "Packets accepted because their destination is on the allow list";
    PACKETS_DROPPED: Counter "intercept_packets_dropped_total" ["reason"] =
        "Packets or records that reached no copier, by reason (hold_overflow: --hold-capacity records held, hold_bytes: --hold-bytes held, unregistered, recently_unregistered, malformed, copier_gone)";
    PACKETS_ACCEPTED_LOCAL: Counter "intercept_packets_accepted_local_total" [] =
        "Packets accepted because they go to this host itself";
    REGISTRATIONS_REFUSED: Counter "intercept_registrations_refused_total" ["reason"] =
        "Registrations refused, by reason (port_not_guarded, family_not_guarded, limit_reached, held_by_other, server_not_local)";
    TOMBSTONES: Gauge "intercept_tombstones" [] =
        "Recently unregistered sessions whose packets are dropped";
    TOMBSTONES_EVICTED: Counter "intercept_tombstones_evicted_total" [] =
        "Tombstones evicted from a full set before their linger was over";
    WORKERS_DIED: Counter "intercept_nfqueue_workers_died_total" ["queue"] =
        "NFQUEUE worker threads that died (an error or a panic; the daemon then exits)";
    RECORDS_ROUTED: Counter "intercept_records_routed_total" [] =
        "Records routed to a copier (directly or after being held)";
    RECORDS_SENT: Counter "intercept_records_sent_total" ["copier"] =
        "Records written to a copier connection";
    RECORD_WRITES: Counter "intercept_record_writes_total" ["by"] =
        "Writes of records to copier connections, by who wrote (nfqueue worker or control writer)";
    RECORDS_DROPPED: Counter "intercept_records_dropped_total" ["reason"] =
        "Records dropped from a full copier queue, by reason (copier_slow: --copier-queue records queued, queue_bytes: --copier-queue-bytes queued)";
    HELD: Counter "intercept_held_total" [] =
        "Records held because their registration was not known yet";
    RELEASED: Counter "intercept_held_released_total" [] =
        "Held records delivered after their registration arrived";
    HOLDING: Gauge "intercept_holding" [] =
        "Records in the hold buffer";
    HOLDING_BYTES: Gauge "intercept_holding_bytes" [] =
        "Bytes of the records in the hold buffer (at most --hold-bytes)";
    REGISTRATIONS: Gauge "intercept_registrations" [] =
        "Registered sessions";
    REGISTER_CONFLICTS: Counter "intercept_register_conflicts_total" [] =
        "Registrations that took a session over from another copier";
    COPIERS_CONNECTED: Gauge "intercept_copiers_connected" [] =
        "Connected copiers";
    CONTROL_REFUSED: Counter "intercept_control_refused_total" ["reason"] =
        "Control connections refused, by reason";
    CONTROL_CLOSED: Counter "intercept_control_closed_total" ["reason"] =
        "Authenticated copier connections that ended, by reason (idle, bad_tag, protocol, io, peer_closed, shutdown)";
    NFQUEUE_OVERRUNS: Counter "intercept_nfqueue_overruns_total" ["queue"] =
        "ENOBUFS on the NFQUEUE socket (packets lost by the kernel)";
    NFQUEUE_KERNEL_DROPPED: Counter "intercept_nfqueue_kernel_dropped_total" ["queue", "reason"] =
        "The kernel's own NFQUEUE drop counters (/proc/net/netfilter/nfnetlink_queue), by queue and reason (queue_full: the queue was full, socket_full: the netlink socket was)";
    VERDICT_ERRORS: Counter "intercept_verdict_errors_total" [] =
        "Verdicts the kernel refused";
    GRACE_HELD: Counter "intercept_restart_grace_held_total" [] =
        "Packets held during a restart grace that the allow list or the local rule would have accepted";
    GRACE: Gauge "intercept_restart_grace" [] =
        "1 while a restart grace holds (--restart-grace)";
    RULES_RESTORED: Counter "intercept_rules_restored_total" [] =
        "Firewall rules put back after they went missing at run time (--install-rules)";
    RULESET_CHANGES: Counter "intercept_ruleset_changes_total" [] =
        "Changes of the firewall ruleset seen (nf_tables events); each has the rules checked at once";
    RULES_MISSING: Gauge "intercept_rules_missing" [] =
        "1 while the firewall rules are missing (the copiers are told to send nothing)";
}}

#[cfg(test)]
mod tests {
    use super::TABLE;
    use std::path::{Path, PathBuf};

    /// Words with the prefix `intercept_` in the docs that are no metric.
    const NOT_METRICS: &[&str] = &[
        "intercept_nonce",  // the handshake's nonce (DESIGN.md)
        "intercept_router", // a fuzz target (BENCHMARKS.md)
        "intercept_gso",    // a lab test (BENCHMARKS.md)
    ];

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    #[test]
    fn every_name_is_in_the_table_once() {
        let problems = common::metrics_table::table_problems(TABLE, "intercept_");
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn the_docs_and_the_dashboard_name_only_metrics_of_the_table() {
        let docs = common::metrics_table::repo_docs(&repo()).unwrap();
        let unknown = common::metrics_table::unknown_names(TABLE, "intercept_", NOT_METRICS, &docs);
        assert!(
            unknown.is_empty(),
            "not in intercept/src/metrics_table.rs: {unknown:#?}"
        );
    }

    #[test]
    fn docs_metrics_md_lists_the_table() {
        common::metrics_table::check_doc_section(
            &repo().join("docs/METRICS.md"),
            "intercept",
            TABLE,
        )
        .unwrap();
    }
}
