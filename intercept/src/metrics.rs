//! Metric names and the code that publishes the router's counters and the kernel's NFQUEUE
//! statistics. Everything the intercept exports is named here, so the names stay consistent.
//!
//! Router counters are kept by the sans-IO [`Router`](crate::router::Router) and copied into the
//! metrics registry by [`publish_router`] (called periodically and at shutdown); counters of the
//! I/O layer (queued packets, records sent, copier queues, overruns) are incremented where the
//! event happens.

use common::proto::RegVerdict;
use metrics::{counter, describe_counter, describe_gauge, gauge};

use crate::router::{DropReason, Stats};

/// Packets read from NFQUEUE, label `queue`.
pub const PACKETS_QUEUED: &str = "intercept_packets_queued_total";
/// Packets given an ACCEPT verdict (allow list).
pub const PACKETS_ACCEPTED: &str = "intercept_packets_accepted_total";
/// Packets given an ACCEPT verdict because they go to this host itself (loopback or an
/// interface address).
pub const PACKETS_ACCEPTED_LOCAL: &str = "intercept_packets_accepted_local_total";
/// Registrations refused, label `reason` (`port_not_guarded`, `family_not_guarded`,
/// `limit_reached`, `held_by_other`, `server_not_local`).
pub const REGISTRATIONS_REFUSED: &str = "intercept_registrations_refused_total";
/// Gauge: recently unregistered tuples whose packets are dropped (tombstones).
pub const TOMBSTONES: &str = "intercept_tombstones";
/// Tombstones evicted from a full set before their linger was over.
pub const TOMBSTONES_EVICTED: &str = "intercept_tombstones_evicted_total";
/// NFQUEUE worker threads that died (error or panic), label `queue`; the daemon then exits.
pub const WORKERS_DIED: &str = "intercept_nfqueue_workers_died_total";
/// Packets or records that reached no copier, label `reason` (see
/// [`crate::router::DropReason`]).
pub const PACKETS_DROPPED: &str = "intercept_packets_dropped_total";
/// Records routed to a copier (directly or after being held).
pub const RECORDS_ROUTED: &str = "intercept_records_routed_total";
/// Records written to a copier's connection, label `copier` (its address).
pub const RECORDS_SENT: &str = "intercept_records_sent_total";
/// Writes of records to copier connections, label `by`: `nfqueue` (an NFQUEUE worker wrote a
/// receive batch's records itself, the connection being idle) or `writer` (the connection's
/// control writer wrote what was queued). Records per write = `RECORDS_SENT` / this.
pub const RECORD_WRITES: &str = "intercept_record_writes_total";
/// Records dropped from a full copier queue (DESIGN.md), label `reason`:
/// [`DropReason::CopierSlow`]'s label (`--copier-queue` records) or
/// [`DropReason::QueueBytes`]'s (`--copier-queue-bytes`).
pub const RECORDS_DROPPED: &str = "intercept_records_dropped_total";
/// Records put in the hold buffer because no registration was known yet.
pub const HELD: &str = "intercept_held_total";
/// Held records released by a later registration.
pub const RELEASED: &str = "intercept_held_released_total";
/// Gauge: records in the hold buffer now.
pub const HOLDING: &str = "intercept_holding";
/// Gauge: bytes of the records in the hold buffer now (bounded by `--hold-bytes`).
pub const HOLDING_BYTES: &str = "intercept_holding_bytes";
/// Gauge: registered sessions now.
pub const REGISTRATIONS: &str = "intercept_registrations";
/// Registrations that took a tuple over from another copier.
pub const REGISTER_CONFLICTS: &str = "intercept_register_conflicts_total";
/// Gauge: copiers connected now.
pub const COPIERS_CONNECTED: &str = "intercept_copiers_connected";
/// Control connections refused (handshake failed), label `reason`.
pub const CONTROL_REFUSED: &str = "intercept_control_refused_total";
/// Authenticated copier connections that ended, label `reason` (`idle`, `bad_tag`,
/// `protocol`, `io`, `peer_closed`, `shutdown`).
pub const CONTROL_CLOSED: &str = "intercept_control_closed_total";
/// ENOBUFS from the NFQUEUE socket: the kernel could not hand us packets (they were dropped),
/// label `queue`.
pub const NFQUEUE_OVERRUNS: &str = "intercept_nfqueue_overruns_total";
/// The kernel's own per-queue drop counters (`/proc/net/netfilter/nfnetlink_queue`), labels
/// `queue` and `reason` (`queue_full`, `socket_full`).
pub const NFQUEUE_KERNEL_DROPPED: &str = "intercept_nfqueue_kernel_dropped_total";
/// Rests of an NFQUEUE worker between batches (`crate::rest`), label `queue`.
pub const NFQUEUE_RESTS: &str = "intercept_nfqueue_rests_total";
/// Verdicts the kernel refused.
pub const VERDICT_ERRORS: &str = "intercept_verdict_errors_total";

/// Packets held during a restart grace that the allow list or the local rule would otherwise
/// have accepted (`--restart-grace`).
pub const GRACE_HELD: &str = "intercept_restart_grace_held_total";
/// Gauge: 1 while a restart grace holds.
pub const GRACE: &str = "intercept_restart_grace";
/// Firewall rules put back after they went missing at run time (`--install-rules`).
pub const RULES_RESTORED: &str = "intercept_rules_restored_total";
/// Changes of the firewall ruleset seen (nf_tables events): each one has the rules checked at once.
pub const RULESET_CHANGES: &str = "intercept_ruleset_changes_total";
/// Gauge: 1 while the firewall rules are missing (without `--install-rules`: the copiers are
/// told to send nothing).
pub const RULES_MISSING: &str = "intercept_rules_missing";

/// Register help texts with the installed recorder.
pub fn describe() {
    describe_counter!(PACKETS_QUEUED, "Packets read from NFQUEUE");
    describe_counter!(
        NFQUEUE_RESTS,
        "Rests of an NFQUEUE worker between batches, as the copiers allow (their records wait meanwhile)"
    );
    describe_counter!(
        PACKETS_ACCEPTED,
        "Packets accepted because their destination is on the allow list"
    );
    describe_counter!(
        PACKETS_DROPPED,
        "Packets or records that reached no copier, by reason (hold_overflow: --hold-capacity records held, hold_bytes: --hold-bytes held, unregistered, recently_unregistered, malformed, copier_gone)"
    );
    describe_counter!(
        PACKETS_ACCEPTED_LOCAL,
        "Packets accepted because they go to this host itself"
    );
    describe_counter!(REGISTRATIONS_REFUSED, "Registrations refused, by reason");
    describe_gauge!(
        TOMBSTONES,
        "Recently unregistered sessions whose packets are dropped"
    );
    describe_counter!(
        TOMBSTONES_EVICTED,
        "Tombstones evicted from a full set before their linger was over"
    );
    describe_counter!(WORKERS_DIED, "NFQUEUE worker threads that died");
    describe_counter!(RECORDS_ROUTED, "Records routed to a copier");
    describe_counter!(RECORDS_SENT, "Records written to a copier connection");
    describe_counter!(
        RECORD_WRITES,
        "Writes of records to copier connections, by who wrote (nfqueue worker or control writer)"
    );
    describe_counter!(
        RECORDS_DROPPED,
        "Records dropped from a full copier queue, by reason (copier_slow: --copier-queue records queued, queue_bytes: --copier-queue-bytes queued)"
    );
    describe_counter!(
        HELD,
        "Records held because their registration was not known yet"
    );
    describe_counter!(
        RELEASED,
        "Held records delivered after their registration arrived"
    );
    describe_gauge!(HOLDING, "Records in the hold buffer");
    describe_gauge!(
        HOLDING_BYTES,
        "Bytes of the records in the hold buffer (at most --hold-bytes)"
    );
    describe_gauge!(REGISTRATIONS, "Registered sessions");
    describe_counter!(
        REGISTER_CONFLICTS,
        "Registrations that took a session over from another copier"
    );
    describe_gauge!(COPIERS_CONNECTED, "Connected copiers");
    describe_counter!(CONTROL_REFUSED, "Control connections refused, by reason");
    describe_counter!(
        CONTROL_CLOSED,
        "Authenticated copier connections that ended, by reason"
    );
    describe_counter!(
        NFQUEUE_OVERRUNS,
        "ENOBUFS on the NFQUEUE socket (packets lost by the kernel)"
    );
    describe_counter!(NFQUEUE_KERNEL_DROPPED, "The kernel's NFQUEUE drop counters");
    describe_counter!(VERDICT_ERRORS, "Verdicts the kernel refused");
    describe_counter!(
        GRACE_HELD,
        "Packets held during a restart grace that the allow list or the local rule would have accepted"
    );
    describe_gauge!(GRACE, "1 while a restart grace holds (--restart-grace)");
    describe_counter!(
        RULES_RESTORED,
        "Firewall rules put back after they went missing at run time (--install-rules)"
    );
    describe_counter!(
        RULESET_CHANGES,
        "Changes of the firewall ruleset seen (nf_tables events); each has the rules checked at once"
    );
    describe_gauge!(
        RULES_MISSING,
        "1 while the firewall rules are missing (the copiers are told to send nothing)"
    );
}

/// Copy the router's counters into the registry.
pub fn publish_router(s: &Stats) {
    counter!(PACKETS_ACCEPTED).absolute(s.accepted);
    counter!(RECORDS_ROUTED).absolute(s.delivered + s.released);
    counter!(HELD).absolute(s.held);
    counter!(RELEASED).absolute(s.released);
    for (reason, n) in [
        (DropReason::Malformed, s.dropped_malformed),
        (DropReason::Unregistered, s.dropped_unregistered),
        (DropReason::HoldOverflow, s.dropped_hold_overflow),
        (DropReason::HoldBytes, s.dropped_hold_bytes),
        (
            DropReason::RecentlyUnregistered,
            s.dropped_recently_unregistered,
        ),
    ] {
        counter!(PACKETS_DROPPED, "reason" => reason.as_str()).absolute(n);
    }
    counter!(PACKETS_ACCEPTED_LOCAL).absolute(s.accepted_local);
    for (verdict, n) in [
        (RegVerdict::PortNotGuarded, s.refused_port),
        (RegVerdict::FamilyNotGuarded, s.refused_family),
        (RegVerdict::LimitReached, s.refused_limit),
        (RegVerdict::HeldByOther, s.refused_held),
        (RegVerdict::ServerNotLocal, s.refused_not_local),
    ] {
        counter!(REGISTRATIONS_REFUSED, "reason" => verdict.as_str()).absolute(n);
    }
    counter!(TOMBSTONES_EVICTED).absolute(s.tombstones_evicted);
    gauge!(TOMBSTONES).set(s.tombstones as f64);
    counter!(REGISTER_CONFLICTS).absolute(s.register_conflicts);
    gauge!(HOLDING).set(s.holding as f64);
    gauge!(HOLDING_BYTES).set(s.holding_bytes as f64);
    gauge!(REGISTRATIONS).set(s.registrations as f64);
    counter!(GRACE_HELD).absolute(s.grace_held);
    gauge!(GRACE).set(s.grace as f64);
}

/// One line of `/proc/net/netfilter/nfnetlink_queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelQueueStats {
    /// Queue number.
    pub queue: u16,
    /// Packets waiting for a verdict.
    pub waiting: u64,
    /// Packets dropped because the queue was full.
    pub queue_dropped: u64,
    /// Packets dropped because the netlink socket was full.
    pub user_dropped: u64,
}

/// Parse `/proc/net/netfilter/nfnetlink_queue` (fields: queue, portid, waiting, copy mode,
/// copy range, queue dropped, user dropped, id sequence, 1). Malformed lines are skipped.
pub fn parse_kernel_queue_stats(text: &str) -> Vec<KernelQueueStats> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 7 {
                return None;
            }
            Some(KernelQueueStats {
                queue: f[0].parse().ok()?,
                waiting: f[2].parse().ok()?,
                queue_dropped: f[5].parse().ok()?,
                user_dropped: f[6].parse().ok()?,
            })
        })
        .collect()
}

/// Read the kernel's counters for our queues and publish them; returns them for logging.
pub fn publish_kernel_queues(queues: &[u16]) -> Vec<KernelQueueStats> {
    let Ok(text) = std::fs::read_to_string("/proc/net/netfilter/nfnetlink_queue") else {
        return Vec::new();
    };
    let stats: Vec<_> = parse_kernel_queue_stats(&text)
        .into_iter()
        .filter(|s| queues.contains(&s.queue))
        .collect();
    for s in &stats {
        let q = s.queue.to_string();
        counter!(NFQUEUE_KERNEL_DROPPED, "queue" => q.clone(), "reason" => "queue_full")
            .absolute(s.queue_dropped);
        counter!(NFQUEUE_KERNEL_DROPPED, "queue" => q, "reason" => "socket_full")
            .absolute(s.user_dropped);
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_queue_stats_parse() {
        let text = "    0  12345     3 2 65535     7     9      100  1\n    4 -4294 0 2 128 0 0 0 1\ngarbage\n";
        let s = parse_kernel_queue_stats(text);
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[0],
            KernelQueueStats {
                queue: 0,
                waiting: 3,
                queue_dropped: 7,
                user_dropped: 9
            }
        );
        assert_eq!(s[1].queue, 4);
    }
}
