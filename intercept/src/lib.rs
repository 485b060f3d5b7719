//! Intercept library: the daemon's [`config`] (checked before anything starts), the routing
//! decision logic ([`router`], sans-IO, with [`allow`], [`hold`] and [`tombstone`]) and its I/O
//! layer: [`nfqueue`] workers (over our own [`netlink`] messages; their unsafe system calls in
//! [`sys`]) and how long they [`rest`] between reads, the [`outlet`] queues shared with the
//! [`control`] connections, the iptables [`rules`] (notice of [`ruleset`] changes, and what
//! becomes of the rules at [`exit`]), this host's [`local`] addresses, the [`refusal`] warnings,
//! the [`metrics`] (names, kinds, labels and help texts in [`metrics_table`]), and `intercept
//! doctor` ([`doctor`]).

#![warn(missing_docs)]

pub mod allow;
pub mod config;
pub mod control;
pub mod doctor;
pub mod exit;
pub mod hold;
pub mod local;
pub mod metrics;
pub mod metrics_table;
pub mod netlink;
pub mod nfqueue;
pub mod outlet;
pub mod refusal;
pub mod rest;
pub mod router;
pub mod rules;
pub mod ruleset;
pub mod sys;
pub mod tombstone;
