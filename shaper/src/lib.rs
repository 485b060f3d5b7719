//! `shaper`: multiplies and reshapes copied traffic (BACKGROUND.md §2-5, the shaper issue).
//!
//! A pure, seeded library: no socket, no clock, no global RNG. Every time is an explicit `now`
//! (a `Duration` since the run's start, or `f64` seconds in the planning modules), and every
//! random draw comes from an RNG the caller seeds, so a run can be replayed and a plan shared.
//!
//! The core, which the copier links (`default-features = false`):
//!
//! - [`pareto`]: Pareto laws, truncation (clip or redraw), truncated means, `beta_off` from rho.
//! - [`onoff`]: ON/OFF sources and the precomputed [`onoff::Plan`] (CSV, `is_on`, `next_on`).
//! - [`users`]: pools, alias-table choice, the NAT-like translation table.
//! - [`schedule`]: load phases or curves, the factor at an instant, copies per session.
//! - [`profile`]: the TOML profile and its validation.
//! - [`engine`]: [`Shaper`], the sans-IO facade the copier drives (`on_session`, `release_at`),
//!   built from a profile or from the copier's flags ([`FlagPlan`]).
//! - [`pool`]: the client address pool of the flags (`--client-ip`) and its sticky pick.
//! - [`trace`]: the run trace's CSV columns, for the copier's writer and `check`'s reader.
//!
//! The tools of the `shaper` binary (feature `tools`, on by default; only they read captures and
//! draw pictures):
//!
//! - [`stats`]: Hurst (aggregated variance, R/S), Hill, truncation-aware MLE, KS distance.
//! - [`check`]: the statistics of a plan or a trace against a profile's targets.
//! - [`fit`]: sessions, requests and ON/OFF periods measured in a capture; a starting profile.
//! - [`plot`]: pictures (SVG, PNG) of a plan, a trace or a capture.

#![warn(missing_docs)]
// Comparisons are written `!(x > 0.0)` on purpose all over this crate: unlike `x <= 0.0`, they
// also reject NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod engine;
mod hash;
pub mod onoff;
pub mod pareto;
pub mod pool;
pub mod profile;
pub mod schedule;
pub mod trace;
pub mod users;

#[cfg(feature = "tools")]
pub mod check;
#[cfg(feature = "tools")]
pub mod fit;
#[cfg(feature = "tools")]
pub mod plot;
#[cfg(feature = "tools")]
pub mod stats;

pub use engine::{CopyPlan, FlagPlan, SessionId, Shaper, ShaperError};
pub use pool::{ClientIpPool, IpRange, PoolParseError};
pub use profile::Profile;
