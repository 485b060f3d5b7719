//! `shaper`: multiplies and reshapes copied traffic (BACKGROUND.md §2-5, the shaper issue).
//!
//! A pure, seeded library: no socket, no clock, no global RNG. Every time is an explicit `now`
//! (a `Duration` since the run's start, or `f64` seconds in the planning modules), and every
//! random draw comes from an RNG the caller seeds, so a run can be replayed and a plan shared.
//!
//! - [`pareto`]: Pareto laws, truncation (clip or redraw), truncated means, `beta_off` from rho.
//! - [`onoff`]: ON/OFF sources and the precomputed [`onoff::Plan`] (CSV, `is_on`, `next_on`).
//! - [`stats`]: Hurst (aggregated variance, R/S), Hill, truncation-aware MLE, KS distance.
//! - [`users`]: pools, alias-table choice, the NAT-like translation table.
//! - [`schedule`]: load phases or curves, the factor at an instant, copies per session.
//! - [`profile`]: the TOML profile and its validation.
//! - [`engine`]: [`Shaper`], the sans-IO facade the copier drives (`on_session`, `release_at`),
//!   built from a profile or from the copier's flags ([`FlagPlan`]).
//! - [`pool`]: the client address pool of the flags (`--client-ip`) and its sticky pick.
//! - [`check`]: the statistics of a plan or a trace against a profile's targets.
//! - [`fit`]: sessions, requests and ON/OFF periods measured in a capture; a starting profile.
//! - [`plot`]: pictures (SVG, PNG) of a plan, a trace or a capture.

// Comparisons are written `!(x > 0.0)` on purpose all over this crate: unlike `x <= 0.0`, they
// also reject NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod check;
pub mod engine;
pub mod fit;
mod hash;
pub mod onoff;
pub mod pareto;
pub mod plot;
pub mod pool;
pub mod profile;
pub mod schedule;
pub mod stats;
pub mod users;

pub use engine::{CopyPlan, FlagPlan, SessionId, Shaper, ShaperError};
pub use pool::{ClientIpPool, IpRange, PoolParseError};
pub use profile::Profile;
