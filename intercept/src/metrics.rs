//! The code that publishes the router's counters and the kernel's NFQUEUE statistics, under the
//! names of the intercept's one metrics table ([`crate::metrics_table`], re-exported here).
//!
//! Router counters are kept by the sans-IO [`Router`](crate::router::Router) and copied into the
//! metrics registry by [`publish_router`] (called periodically and at shutdown); counters of the
//! I/O layer (queued packets, records sent, copier queues, overruns) are incremented where the
//! event happens.

use common::proto::RegVerdict;
use metrics::{counter, gauge};

use crate::router::{DropReason, Stats};

pub use crate::metrics_table::names::*;

/// Register the help texts of the intercept's metrics ([`crate::metrics_table::TABLE`]) with the
/// installed recorder.
pub fn describe() {
    common::metrics_table::describe(crate::metrics_table::TABLE);
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
        counter!(PACKETS_DROPPED, "reason" => reason.label()).absolute(n);
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

common::reasons! {
    /// Why the kernel dropped packets of a queue: the `reason` label of
    /// `intercept_nfqueue_kernel_dropped_total`.
    enum KernelQueueDrop;
    /// The queue was full.
    QueueFull => queue_full,
    /// The netlink socket was full.
    SocketFull => socket_full,
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
        for (reason, n) in [
            (KernelQueueDrop::QueueFull, s.queue_dropped),
            (KernelQueueDrop::SocketFull, s.user_dropped),
        ] {
            counter!(NFQUEUE_KERNEL_DROPPED, "queue" => q.clone(), "reason" => reason.label())
                .absolute(n);
        }
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
