//! Copier library: the session engine and its I/O layer.
//!
//! - `engine`: the sans-IO session table (no socket, no clock);
//! - [`capture`] (with [`bpf`] and [`sys`]): the AF_PACKET TPACKET_V3 ring and its kernel filter;
//! - [`send`]: raw IP_HDRINCL sockets toward the test server, and [`egress`]: super-segments
//!   (`--gso`) whole through AF_PACKET with a GSO header, or cut as TSO would; [`spread`]: logs and metrics of the
//!   test servers of a map over several;
//! - [`control`]: the clients of the intercepts; [`link`]: the engine thread's read side of
//!   their links; [`routing`]: an intercept's address and which intercept guards which test server;
//! - [`feed`]: the capture thread; [`mirror`]: the mirror input (`--mirror`) in place of the capture;
//! - [`offline`]: replay of a pcap or pcapng file instead of the live capture; [`rate`]: the
//!   closed loop holding a target rate;
//! - [`run`]: the engine thread that ties them together; [`workers`]: several engine threads
//!   (`--workers`), each owning the sessions of its capture ring; [`metrics`]: the exported
//!   counters, [`metrics_table`]: every metric's name, kind, labels and help; [`shaping`]: the shaper's own metrics; [`trace`]: the run trace (`--trace`);
//! - [`record`]: the `--record` archive; [`outage`]: what a file output does when its disk fills;
//! - [`shadow`]: the comparison thread (`--compare`); [`clock`]: the intercepts' and the
//!   capture's packet times on the copier's clock, which it times answers by;
//!   [`compare_report`]: `copier compare-report`;
//! - [`cli`]: the command line (flags and subcommands); [`doctor`]: `copier doctor`.
//!
//! No import circle: no module imports another that imports it back, directly or through
//! others. `engine` and `routing` import no other module of this crate; none imports `run` or
//! `doctor` (`main` does).

#![warn(missing_docs)]

pub mod bpf;
pub mod capture;
pub mod cli;
pub mod clock;
pub mod compare_report;
pub mod control;
pub mod doctor;
pub mod egress;
pub mod engine;
pub mod feed;
pub mod link;
pub mod metrics;
pub mod metrics_table;
pub mod mirror;
pub mod offline;
pub mod outage;
pub mod rate;
pub mod record;
pub mod routing;
pub mod run;
pub mod send;
pub mod shadow;
pub mod shaping;
pub mod spread;
pub mod sys;
pub mod trace;
pub mod workers;
