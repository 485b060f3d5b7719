//! Intercept library: the routing decision logic ([`router`], sans-IO, with [`allow`] and
//! [`hold`]) and its I/O layer: [`nfqueue`] workers, the [`outlet`] queues shared with the
//! [`control`] connections, the iptables [`rules`], and the [`metrics`] names.

pub mod allow;
pub mod control;
pub mod hold;
pub mod metrics;
pub mod nfqueue;
pub mod outlet;
pub mod refusal;
pub mod router;
pub mod tombstone;
pub mod rules;
pub mod sys;
