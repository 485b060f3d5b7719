//! Building a [`PlotData`] from what the tools read: a plan (drawn from a profile or read from a
//! plan folder) with its user table, a trace of sent requests, or a fitted capture.
//!
//! Owns the choices of what each input shows: for a plan the rate is the number of ON sources
//! (a level: coarser bins average it), for a trace or a capture the number of requests (a
//! count: coarser bins add up); ON periods of a trace or capture are its sources' or clients'
//! bursts (`stats::bursts`, idle gap as `shaper fit` uses it); a capture's "pools" are its
//! client addresses, IPv4 and IPv6 apart. The default finest bin is a 1-2-5 value near
//! `span / 10^4`, so that three scales (x1, x10, x100) end with about 100 bins.

use std::collections::BTreeMap;
use std::net::IpAddr;

use rand::Rng;

use super::charts::fmt_secs;
use super::{OnOffView, PlotData, PoolRow, PoolsView, RateSeries, UsersView};
use crate::check::Trace;
use crate::fit::Fit;
use crate::onoff::Plan;
use crate::profile::Profile;
use crate::stats;
use crate::users::{Cidr, UserTable};

/// Settings of the views.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlotOptions {
    /// The finest bin of the rate, seconds (default: about span / 10^4, a 1-2-5 value).
    pub bin: Option<f64>,
    /// Sources shown in the ON/OFF timeline.
    pub rows: usize,
    /// The window of the ON/OFF timeline, seconds (default: 60 mean ON/OFF cycles, or all).
    pub window: Option<f64>,
    /// For traces: a gap longer than this (seconds) ends an ON period.
    pub idle: f64,
    /// Sessions drawn to measure a user table's pool shares.
    pub draws: usize,
}

impl Default for PlotOptions {
    fn default() -> Self {
        PlotOptions {
            bin: None,
            rows: 32,
            window: None,
            idle: 1.0,
            draws: 100_000,
        }
    }
}

/// A 1-2-5 bin near `span / 10^4` (never below 1 microsecond).
pub fn default_bin(span: f64) -> f64 {
    let raw = (span / 1e4).max(1e-6);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let m = if f < 1.5 {
        1.0
    } else if f < 3.5 {
        2.0
    } else if f < 7.5 {
        5.0
    } else {
        10.0
    };
    m * mag
}

fn bin_of(opts: &PlotOptions, span: f64) -> f64 {
    opts.bin
        .filter(|b| *b > 0.0 && b.is_finite())
        .unwrap_or_else(|| default_bin(span))
}

/// The number of sources ON at the middle of each of `n` bins over `[0, window)`.
fn on_count(sources: &[Vec<(f64, f64)>], window: f64, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; n];
    let w = window / n as f64;
    for on in sources {
        for &(a, b) in on {
            // Bins whose middle (i + 0.5) w lies in [a, b).
            let first = ((a / w - 0.5).ceil().max(0.0)) as usize;
            let end = ((b / w - 0.5).ceil().max(0.0) as usize).min(n);
            for c in out.iter_mut().take(end).skip(first) {
                *c += 1.0;
            }
        }
    }
    out
}

/// The time of one request in a list of bursts: the median gap at most `idle` (as `fit`).
fn unit_of(times: &[Vec<f64>], idle: f64) -> f64 {
    let short: Vec<f64> = times
        .iter()
        .flat_map(|t| t.windows(2).map(|w| w[1] - w[0]))
        .filter(|g| *g <= idle)
        .collect();
    if short.is_empty() {
        idle / 10.0
    } else {
        stats::quantile(&short, 0.5).max(idle / 1000.0)
    }
}

/// A timeline view of sources given by their bursts (all of them), the first `rows` shown.
fn timeline(
    labels: Vec<String>,
    all: &[Vec<(f64, f64)>],
    span: f64,
    opts: &PlotOptions,
    note: String,
) -> OnOffView {
    let (mut on_sum, mut off_sum, mut n) = (0.0, 0.0, 0usize);
    for b in all {
        on_sum += b.iter().map(|(s, e)| e - s).sum::<f64>();
        off_sum += b.windows(2).map(|w| w[1].0 - w[0].1).sum::<f64>();
        n += b.len();
    }
    let cycle = (on_sum + off_sum) / n.max(1) as f64;
    let window = opts
        .window
        .unwrap_or(if cycle > 0.0 { 60.0 * cycle } else { span })
        .min(span)
        .max(1e-6);
    OnOffView {
        rows: labels
            .into_iter()
            .zip(all.iter().cloned())
            .take(opts.rows)
            .collect(),
        sources: all.len(),
        window,
        on_count: on_count(all, window, 400),
        note,
    }
}

fn addr_num(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u128::from(u32::from(v)),
        IpAddr::V6(v) => u128::from(v),
    }
}

impl PlotData {
    /// The views of a plan and, when there is one, its user table; `profile` (when the plan
    /// was drawn from one) gives the pools' address ranges; `rng` draws the sessions that
    /// measure the pool shares.
    pub fn from_plan<R: Rng + ?Sized>(
        plan: &Plan,
        users: Option<&UserTable>,
        profile: Option<&Profile>,
        opts: &PlotOptions,
        rng: &mut R,
    ) -> PlotData {
        let span = plan.duration();
        let bin = bin_of(opts, span);
        let rate = RateSeries {
            bin,
            counts: plan.on_count_series(bin),
            what: "ON sources".into(),
            mean: true,
        };
        let all: Vec<Vec<(f64, f64)>> = (0..plan.sources())
            .map(|s| {
                plan.periods(s)
                    .filter(|p| p.on)
                    .map(|p| (p.start, p.end))
                    .collect()
            })
            .collect();
        let labels = (0..plan.sources()).map(|s| format!("source {s}")).collect();
        let onoff = timeline(labels, &all, span, opts, "from the plan".into());
        let mut data = PlotData {
            title: format!(
                "ON/OFF plan: {} sources over {}, ON fraction {:.3}",
                plan.sources(),
                fmt_secs(span),
                plan.on_fraction()
            ),
            rate: Some(rate),
            onoff: Some(onoff),
            ..PlotData::default()
        };
        if let Some(u) = users {
            data.users = Some(UsersView {
                pools: u
                    .pool_names()
                    .iter()
                    .enumerate()
                    .map(|(p, name)| {
                        let v = u
                            .users()
                            .iter()
                            .filter(|x| x.pool == p)
                            .map(|x| x.activity)
                            .collect();
                        (name.clone(), v)
                    })
                    .collect(),
                label: "activity weight of the virtual users".into(),
            });
            data.pools = Some(pool_map(u, profile, opts.draws, rng));
        }
        data
    }

    /// The views of a trace of sent requests (`time_s` and `source` and/or `pool`).
    pub fn from_trace(trace: &Trace, opts: &PlotOptions) -> PlotData {
        let start = trace.times.iter().copied().fold(f64::INFINITY, f64::min);
        let rel: Vec<f64> = trace.times.iter().map(|t| t - start).collect();
        let span = rel.iter().copied().fold(0.0, f64::max).max(1e-6);
        let bin = bin_of(opts, span);
        let mut data = PlotData {
            title: format!(
                "trace: {} requests over {}",
                trace.times.len(),
                fmt_secs(span)
            ),
            rate: Some(RateSeries {
                bin,
                counts: stats::count_per_bin(&rel, bin, span + bin * 0.5),
                what: "requests".into(),
                mean: false,
            }),
            ..PlotData::default()
        };
        if !trace.answers.is_empty() {
            let n = ((span / bin).floor() as usize) + 1;
            let (mut sum, mut count) = (vec![0.0; n], vec![0u32; n]);
            for &(t, a) in &trace.answers {
                let k = (((t - start) / bin).max(0.0) as usize).min(n - 1);
                sum[k] += a;
                count[k] += 1;
            }
            data.answer = Some(RateSeries {
                bin,
                counts: sum
                    .iter()
                    .zip(&count)
                    .map(|(s, &c)| if c > 0 { s / f64::from(c) } else { 0.0 })
                    .collect(),
                what: "answer time (s, mean of the timed units)".into(),
                mean: true,
            });
        }
        if let Some(sources) = &trace.sources {
            let mut by: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
            for (&t, &s) in rel.iter().zip(sources) {
                by.entry(s).or_default().push(t);
            }
            for v in by.values_mut() {
                v.sort_by(f64::total_cmp);
            }
            let times: Vec<Vec<f64>> = by.values().cloned().collect();
            let unit = unit_of(&times, opts.idle);
            let all: Vec<Vec<(f64, f64)>> = times
                .iter()
                .map(|t| stats::bursts(t, opts.idle, unit))
                .collect();
            let labels = by.keys().map(|s| format!("source {s}")).collect();
            let note = format!("ON = requests with gaps <= {} s", opts.idle);
            data.onoff = Some(timeline(labels, &all, span, opts, note));
            data.users = Some(UsersView {
                pools: vec![(
                    "sources".into(),
                    times.iter().map(|t| t.len() as f64).collect(),
                )],
                label: "requests per source".into(),
            });
        }
        if let Some(pools) = &trace.pools {
            let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
            for p in pools {
                *counts.entry(p.as_str()).or_default() += 1;
            }
            let total = pools.len().max(1) as f64;
            data.pools = Some(PoolsView {
                rows: counts
                    .iter()
                    .map(|(name, &c)| PoolRow {
                        name: (*name).to_string(),
                        range: None,
                        users: 0,
                        target: None,
                        measured: Some(c as f64 / total),
                        cells: Vec::new(),
                        cell_width: 0.0,
                    })
                    .collect(),
                target_label: String::new(),
                measured_label: String::new(),
                of: "requests".into(),
                note: "a trace names pools, not addresses".into(),
            });
        }
        data
    }

    /// The views of a fitted capture: its requests, its clients' bursts, requests per client,
    /// and the map of its client addresses.
    pub fn from_fit(fit: &Fit, opts: &PlotOptions) -> PlotData {
        let span = fit.span.max(1e-6);
        let bin = bin_of(opts, span);
        let times: Vec<f64> = fit
            .clients
            .iter()
            .flat_map(|c| c.request_times.iter().copied())
            .collect();
        let mut by_requests: Vec<&crate::fit::ClientStats> = fit.clients.iter().collect();
        by_requests.sort_by(|a, b| b.requests.cmp(&a.requests).then(a.addr.cmp(&b.addr)));
        let all: Vec<Vec<(f64, f64)>> = by_requests
            .iter()
            .map(|c| stats::bursts(&c.request_times, fit.cfg.idle, fit.unit))
            .collect();
        let labels = by_requests.iter().map(|c| c.addr.to_string()).collect();
        let note = format!(
            "clients by requests; ON = requests with gaps <= {} s",
            fit.cfg.idle
        );
        let mut rows = Vec::new();
        let shares = fit.session_shares();
        for (fam, name) in [(false, "IPv4 clients"), (true, "IPv6 clients")] {
            let members: Vec<(u128, f64)> = fit
                .clients
                .iter()
                .zip(&shares)
                .filter(|(c, _)| c.addr.is_ipv6() == fam)
                .map(|(c, s)| (addr_num(c.addr), *s))
                .collect();
            if members.is_empty() {
                continue;
            }
            let lo = members.iter().map(|m| m.0).min().unwrap_or(0);
            let hi = members.iter().map(|m| m.0).max().unwrap_or(0);
            let size = (hi - lo + 1) as f64;
            let first = fit.clients.iter().filter(|c| c.addr.is_ipv6() == fam);
            let (a, b) = (
                first.clone().map(|c| c.addr).min(),
                first.map(|c| c.addr).max(),
            );
            rows.push(PoolRow {
                name: name.into(),
                range: a
                    .zip(b)
                    .map(|(a, b)| format!("{a} - {b} ({} addresses)", hi - lo + 1)),
                users: members.len(),
                target: None,
                measured: Some(members.iter().map(|m| m.1).sum()),
                cells: members
                    .iter()
                    .map(|(n, s)| ((n - lo) as f64 / size, *s))
                    .collect(),
                cell_width: 1.0 / size,
            });
        }
        PlotData {
            title: format!(
                "capture, port {}: {} clients, {} sessions, {} requests over {}",
                fit.cfg.port,
                fit.clients.len(),
                fit.sessions,
                fit.requests,
                fmt_secs(span)
            ),
            rate: Some(RateSeries {
                bin,
                counts: stats::count_per_bin(&times, bin, span + bin * 0.5),
                what: "requests".into(),
                mean: false,
            }),
            answer: None,
            onoff: (!all.is_empty()).then(|| timeline(labels, &all, span, opts, note)),
            users: (!fit.clients.is_empty()).then(|| UsersView {
                pools: vec![(
                    "clients".into(),
                    fit.clients.iter().map(|c| c.requests as f64).collect(),
                )],
                label: "requests per client".into(),
            }),
            pools: (!rows.is_empty()).then(|| PoolsView {
                rows,
                target_label: String::new(),
                measured_label: String::new(),
                of: "sessions".into(),
                note: "the capture's client addresses".into(),
            }),
            subtitle: String::new(),
        }
    }
}

/// Pool shares (by weight, and drawn) and each user's place in its range.
fn pool_map<R: Rng + ?Sized>(
    u: &UserTable,
    profile: Option<&Profile>,
    draws: usize,
    rng: &mut R,
) -> PoolsView {
    let mut drawn = vec![0u64; u.pool_names().len()];
    for _ in 0..draws {
        drawn[u.user(u.choose(rng)).pool] += 1;
    }
    let targets = u.pool_shares();
    let user_shares = u.user_shares();
    let rows = u
        .pool_names()
        .iter()
        .enumerate()
        .map(|(p, name)| {
            let members: Vec<(u128, f64)> = u
                .users()
                .iter()
                .filter(|x| x.pool == p)
                .map(|x| (addr_num(x.addr), user_shares[x.id as usize]))
                .collect();
            let cidr: Option<Cidr> = profile
                .and_then(|pr| pr.pools.iter().find(|x| &x.name == name))
                .and_then(|x| x.cidr.parse().ok());
            let (lo, size, range) = match cidr {
                Some(c) => (
                    addr_num(c.base()),
                    c.size() as f64,
                    format!("{c}: {} addresses", c.size()),
                ),
                None => {
                    let lo = members.iter().map(|m| m.0).min().unwrap_or(0);
                    let hi = members.iter().map(|m| m.0).max().unwrap_or(0);
                    let first = u.users().iter().filter(|x| x.pool == p);
                    let a = first.clone().map(|x| x.addr).min();
                    let b = first.map(|x| x.addr).max();
                    (
                        lo,
                        (hi - lo + 1) as f64,
                        a.zip(b)
                            .map_or(String::new(), |(a, b)| format!("{a} - {b}")),
                    )
                }
            };
            PoolRow {
                name: name.clone(),
                range: Some(range),
                users: members.len(),
                target: Some(targets[p]),
                measured: (draws > 0).then(|| drawn[p] as f64 / draws as f64),
                cells: members
                    .iter()
                    .map(|(n, s)| (n.saturating_sub(lo) as f64 / size, *s))
                    .collect(),
                cell_width: 1.0 / size,
            }
        })
        .collect();
    PoolsView {
        rows,
        target_label: "weight".into(),
        measured_label: "drawn".into(),
        of: "sessions".into(),
        note: format!(
            "dark: share by pool weight; light: share of {draws} sessions drawn from the user table"
        ),
    }
}
