//! `shaper fit`: measure a sample capture of one service and derive a starting profile.
//!
//! Owns: what a session, a request and an ON/OFF period are in a capture, the measurements
//! ([`Fit`]: client address frequencies, sessions and requests per client, inter-request gaps,
//! ON and OFF periods, Hill estimates of their tail indices), and the profile written from them
//! ([`Fit::profile`], [`Fit::profile_toml`]). Sans-IO: the caller reads the file and feeds each
//! IP packet with its capture time to [`Fitter::handle_packet`]; nothing here reads a clock or a
//! file.
//!
//! Definitions (the port `P` names the service):
//! - A packet is the client's when its TCP destination port is `P`, the server's when its source
//!   port is `P`; anything else (other ports, non-TCP, fragments, malformed) is counted and
//!   ignored. A packet between two `P` ports counts as the client's.
//! - A **session** is a client 4-tuple (client address and port, server address and port). A SYN
//!   (without ACK) on a tuple that already carried data, a FIN or a RST starts a new session on
//!   it (port reuse); a repeated SYN does not. A tuple first seen in the middle (the capture
//!   started late) is a session too.
//! - A **request** is a burst of client data in one session: a client segment with payload
//!   starts a new request when it is the session's first data, when its ACK differs from the ACK
//!   of the segment that started the current request (the client has acknowledged new server
//!   data: an answer came in between; the copier's request unit), or when server data was seen
//!   since that segment (for captures where the ACK did not move). Retransmissions and further
//!   segments of one request carry the same ACK and join it. A request's time is that of its
//!   first segment.
//! - A client is an IP address: its request times are merged over its sessions (a user's think
//!   time spans connections), and the **inter-request gaps** are the differences of its sorted
//!   request times.
//! - **ON periods** are runs of a client's requests whose gaps are at most `idle` (a burst of
//!   activity); an ON period lasts from its first request to its last plus `unit`, the time of
//!   one request (the median of the gaps at most `idle`, or `idle / 10` when no burst has two
//!   requests). **OFF periods** are the gaps between the ON periods of one client. Only
//!   periods with a neighbour on both sides count as complete for the tail estimates (as in
//!   [`crate::stats::infer_on_off`]).
//! - The tail indices are Hill's estimate over the top 10% of the complete periods (at least 10
//!   values; none with fewer than 20 periods).
//!
//! The profile: `onoff` takes the measured tail indices (clamped into the allowed (1, 2)),
//! `beta_on_s` (the 5% quantile of the ON periods), `rho` (ON time over each client's active
//! span) and one source per client, and stays disabled; one pool holds a virtual user per
//! client, whose activity law is the table of measured sessions per client (relative to the
//! mean) and whose think-time law has the spread of the clients' mean gaps. Whatever was
//! measured, the profile written passes [`Profile::validate`].

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::IpAddr;

use common::flow::FourTuple;
use common::seq::SeqNum;
use common::wire::{parse_tcp_packet, TcpFlags};

use crate::profile::{ActivityProfile, NormalProfile, PoolProfile, Profile};
use crate::stats;

/// Settings of a fit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitConfig {
    /// The service's TCP port.
    pub port: u16,
    /// The longest gap (seconds) inside an ON period.
    pub idle: f64,
}

impl FitConfig {
    /// A fit of `port` with the default idle gap of 1 s.
    pub fn new(port: u16) -> FitConfig {
        FitConfig { port, idle: 1.0 }
    }
}

#[derive(Debug)]
struct Session {
    /// The client's address.
    client: IpAddr,
    /// ACK of the segment that started the current request.
    req_ack: Option<SeqNum>,
    /// Server data seen since the current request started.
    answered: bool,
    /// Data, FIN or RST seen: a new SYN starts a new session.
    used: bool,
}

#[derive(Debug, Default)]
struct ClientAcc {
    sessions: u64,
    times: Vec<f64>,
}

/// Feeds on the packets of a capture; see the module documentation.
#[derive(Debug)]
pub struct Fitter {
    cfg: FitConfig,
    sessions: HashMap<FourTuple, Session>,
    clients: BTreeMap<IpAddr, ClientAcc>,
    first: Option<f64>,
    last: f64,
    packets: u64,
    service_packets: u64,
}

impl Fitter {
    /// A fitter with nothing seen yet.
    pub fn new(cfg: FitConfig) -> Fitter {
        Fitter {
            cfg,
            sessions: HashMap::new(),
            clients: BTreeMap::new(),
            first: None,
            last: 0.0,
            packets: 0,
            service_packets: 0,
        }
    }

    /// One IP packet captured at `ts` seconds (any origin; times are reported from the first
    /// packet on). Packets should come in capture order; a slightly earlier one is taken as is.
    pub fn handle_packet(&mut self, ts: f64, ip: &[u8]) {
        self.packets += 1;
        let first = *self.first.get_or_insert(ts);
        let t = ts - first;
        self.last = self.last.max(t);
        let Ok(pkt) = parse_tcp_packet(ip) else {
            return;
        };
        let (sport, dport) = (pkt.tcp.src_port(), pkt.tcp.dst_port());
        let flags = pkt.tcp.flags();
        if dport == self.cfg.port {
            self.service_packets += 1;
            let key = FourTuple::of_request(&pkt);
            let syn = flags.contains(TcpFlags::SYN) && !flags.contains(TcpFlags::ACK);
            let reuse = syn && self.sessions.get(&key).is_some_and(|s| s.used);
            if reuse || !self.sessions.contains_key(&key) {
                self.clients.entry(pkt.src).or_default().sessions += 1;
                self.sessions.insert(
                    key,
                    Session {
                        client: pkt.src,
                        req_ack: None,
                        answered: false,
                        used: false,
                    },
                );
            }
            let Some(s) = self.sessions.get_mut(&key) else {
                return;
            };
            if !pkt.payload().is_empty() {
                let ack = pkt.tcp.ack();
                if s.req_ack != Some(ack) || s.answered {
                    s.req_ack = Some(ack);
                    s.answered = false;
                    self.clients.entry(s.client).or_default().times.push(t);
                }
                s.used = true;
            }
            if flags.contains(TcpFlags::FIN) || flags.contains(TcpFlags::RST) {
                s.used = true;
            }
        } else if sport == self.cfg.port {
            self.service_packets += 1;
            if !pkt.payload().is_empty() {
                if let Some(s) = self.sessions.get_mut(&FourTuple::of_response(&pkt)) {
                    s.answered = true;
                }
            }
        }
    }

    /// The measurements.
    pub fn finish(self) -> Fit {
        let idle = self.cfg.idle;
        let mut clients: Vec<ClientStats> = self
            .clients
            .into_iter()
            .map(|(addr, mut c)| {
                c.times.sort_by(f64::total_cmp);
                ClientStats {
                    addr,
                    sessions: c.sessions,
                    requests: c.times.len() as u64,
                    request_times: c.times,
                }
            })
            .collect();
        clients.sort_by(|a, b| {
            (b.sessions, b.requests)
                .cmp(&(a.sessions, a.requests))
                .then(a.addr.cmp(&b.addr))
        });
        let gaps: Vec<f64> = clients
            .iter()
            .flat_map(|c| c.request_times.windows(2).map(|w| w[1] - w[0]))
            .collect();
        let short: Vec<f64> = gaps.iter().copied().filter(|&g| g <= idle).collect();
        let unit = if short.is_empty() {
            idle / 10.0
        } else {
            stats::quantile(&short, 0.5).max(idle / 1000.0)
        };
        let (mut on, mut off, mut on_time, mut active) = (Vec::new(), Vec::new(), 0.0, 0.0);
        for c in &clients {
            let inf = stats::infer_on_off(&c.request_times, idle, unit);
            on.extend(inf.on);
            off.extend(inf.off);
            on_time += inf.on_time;
            active += inf.span;
        }
        Fit {
            cfg: self.cfg,
            unit,
            packets: self.packets,
            service_packets: self.service_packets,
            span: self.last,
            sessions: clients.iter().map(|c| c.sessions).sum(),
            requests: clients.iter().map(|c| c.requests).sum(),
            hill_on: tail(&on),
            hill_off: tail(&off),
            rho: if active > 0.0 {
                on_time / active
            } else {
                f64::NAN
            },
            clients,
            gaps,
            on,
            off,
        }
    }
}

/// Hill over the top 10% (at least 10 values); `None` with fewer than 20 values.
fn tail(periods: &[f64]) -> Option<TailFit> {
    if periods.len() < 20 {
        return None;
    }
    let k = (periods.len() / 10).max(10);
    stats::hill(periods, k).map(|alpha| TailFit { alpha, k })
}

/// A Hill estimate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TailFit {
    /// The tail index.
    pub alpha: f64,
    /// How many of the largest values it used.
    pub k: usize,
}

/// What one client address did.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientStats {
    /// The address.
    pub addr: IpAddr,
    /// Its sessions.
    pub sessions: u64,
    /// Its requests, over all its sessions.
    pub requests: u64,
    /// When each request started, sorted (seconds from the first packet of the capture).
    pub request_times: Vec<f64>,
}

/// The measurements of a capture; see the module documentation for the definitions.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    /// The settings used.
    pub cfg: FitConfig,
    /// The time of one request (seconds) added to the end of each ON period.
    pub unit: f64,
    /// IP packets fed.
    pub packets: u64,
    /// TCP packets to or from the service port.
    pub service_packets: u64,
    /// From the first to the last packet, seconds.
    pub span: f64,
    /// Sessions (all clients).
    pub sessions: u64,
    /// Requests (all clients).
    pub requests: u64,
    /// Every client, most sessions first (then most requests, then by address).
    pub clients: Vec<ClientStats>,
    /// Every inter-request gap of every client, seconds.
    pub gaps: Vec<f64>,
    /// Complete ON periods, seconds.
    pub on: Vec<f64>,
    /// Complete OFF periods, seconds.
    pub off: Vec<f64>,
    /// Hill's estimate for the ON periods.
    pub hill_on: Option<TailFit>,
    /// Hill's estimate for the OFF periods.
    pub hill_off: Option<TailFit>,
    /// ON time over the clients' active time (first to last request plus `unit`, summed).
    pub rho: f64,
}

/// A tail index clamped into the profile's open range (1, 2).
fn clamp_alpha(a: Option<TailFit>) -> f64 {
    a.map_or(1.4, |t| t.alpha.clamp(1.05, 1.95))
}

/// Rounds to 4 significant digits, so the written profile reads well.
fn round4(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let mag = 10f64.powi(3 - x.abs().log10().floor() as i32);
    (x * mag).round() / mag
}

impl Fit {
    /// Each client's share of the sessions, in the order of [`Fit::clients`].
    pub fn session_shares(&self) -> Vec<f64> {
        let total = self.sessions.max(1) as f64;
        self.clients
            .iter()
            .map(|c| c.sessions as f64 / total)
            .collect()
    }

    /// The activity table: sessions per client relative to the mean, with the fraction of
    /// clients at each value; more than 24 distinct values are grouped in log-spaced bins
    /// (each row then holds the bin's mean activity).
    pub fn activity_table(&self) -> Vec<[f64; 2]> {
        let n = self.clients.len();
        if n == 0 {
            return vec![[1.0, 1.0]];
        }
        let mean = self.sessions as f64 / n as f64;
        let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
        for c in &self.clients {
            *counts.entry(c.sessions.max(1)).or_default() += 1;
        }
        let rows: Vec<(f64, f64)> = if counts.len() <= 24 {
            counts.iter().map(|(&s, &k)| (s as f64, k as f64)).collect()
        } else {
            let lo = *counts.keys().next().unwrap_or(&1) as f64;
            let hi = *counts.keys().last().unwrap_or(&1) as f64;
            let bins = 16usize;
            let width = ((hi / lo).ln() / bins as f64).max(1e-9);
            let mut acc = vec![(0.0f64, 0.0f64); bins];
            for (&s, &k) in &counts {
                let i = (((s as f64 / lo).ln() / width) as usize).min(bins - 1);
                acc[i].0 += s as f64 * k as f64;
                acc[i].1 += k as f64;
            }
            acc.into_iter()
                .filter(|a| a.1 > 0.0)
                .map(|(sum, k)| (sum / k, k))
                .collect()
        };
        rows.into_iter()
            .map(|(s, k)| [round4(s / mean), round4(k / n as f64)])
            .collect()
    }

    /// Think-time weights: each client's mean inter-request gap over the mean of those means
    /// (clients with at least 2 gaps).
    pub fn think_weights(&self) -> Vec<f64> {
        let means: Vec<f64> = self
            .clients
            .iter()
            .filter(|c| c.request_times.len() >= 3)
            .map(|c| {
                let t = &c.request_times;
                (t[t.len() - 1] - t[0]) / (t.len() - 1) as f64
            })
            .filter(|m| *m > 0.0)
            .collect();
        let all = stats::mean(&means);
        means.iter().map(|m| m / all).collect()
    }

    /// The starting profile; it always passes [`Profile::validate`].
    pub fn profile(&self) -> Profile {
        let mut p = Profile::default();
        let o = &mut p.onoff;
        o.enabled = false;
        o.sources = (self.clients.len() as u32).clamp(1, 100_000);
        o.alpha_on = round4(clamp_alpha(self.hill_on));
        o.alpha_off = round4(clamp_alpha(self.hill_off));
        let beta_on = if self.on.is_empty() {
            self.unit
        } else {
            stats::quantile(&self.on, 0.05)
        };
        o.beta_on_s = round4(beta_on.max(1e-3));
        o.rho = if self.rho.is_finite() {
            round4(self.rho.clamp(0.02, 0.98))
        } else {
            0.5
        };
        let max_of = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        o.max_on_s = round4((2.0 * max_of(&self.on)).max(3600.0).max(10.0 * o.beta_on_s));
        o.max_off_s = round4((2.0 * max_of(&self.off)).max(3600.0));
        // A small rho with heavy OFF periods may need a higher bound for its OFF law.
        for _ in 0..6 {
            if p.onoff_model().is_ok() {
                break;
            }
            p.onoff.max_off_s *= 10.0;
        }
        if p.onoff_model().is_err() {
            p.onoff.rho = 0.5;
        }

        let users = (self.clients.len() as u32).max(1);
        // The smallest prefix of 198.19.0.0/16 (the benchmark range for virtual users) with
        // room for every user; larger populations get a /15 from 198.18.0.0.
        let (cidr, usable) = (8u32..=16)
            .rev()
            .map(|host_bits| {
                (
                    format!("198.19.0.0/{}", 32 - host_bits),
                    (1u64 << host_bits) - 2,
                )
            })
            .find(|(_, usable)| *usable >= u64::from(users))
            .unwrap_or_else(|| ("198.18.0.0/15".into(), (1 << 17) - 2));
        let think = self.think_weights();
        let var = if think.len() >= 2 {
            let m = stats::mean(&think);
            think.iter().map(|w| (w - m) * (w - m)).sum::<f64>() / (think.len() - 1) as f64
        } else {
            0.5
        };
        p.pools = vec![PoolProfile {
            name: "fitted".into(),
            weight: 1.0,
            cidr,
            users: users.min(usable as u32),
            activity: ActivityProfile {
                table: self.activity_table(),
                ..ActivityProfile::default()
            },
            think: NormalProfile {
                mean: 1.0,
                variance: round4(var.clamp(0.0, 25.0)),
                min: 0.1,
                max: 5.0,
            },
        }];
        if p.validate().is_err() {
            // Cannot happen with the clamps above; a default pool is still a valid start.
            p.pools[0].activity = ActivityProfile::default();
            p.pools[0].think = NormalProfile::default();
        }
        p
    }

    /// The profile as TOML, with the measurements as comments on top.
    pub fn profile_toml(&self) -> String {
        let body = toml::to_string(&self.profile())
            .unwrap_or_else(|e| format!("# could not write the profile: {e}\n"));
        let mut out = String::from(
            "# A starting profile written by `shaper fit` from a sample capture.\n\
             # Check it with `shaper check`; see shaper/examples/profile.toml for every key.\n\
             # The pool's range is a placeholder: give it addresses routed to the test server.\n\
             # onoff.enabled is false: the copies keep the capture's own timing until you set it.\n#\n",
        );
        for line in self.to_string().lines() {
            out.push_str("# ");
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
        out.push_str(&body);
        out
    }
}

impl fmt::Display for Fit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "port {}: {} packets, {} to or from the port, over {:.3} s",
            self.cfg.port, self.packets, self.service_packets, self.span
        )?;
        writeln!(
            f,
            "{} clients, {} sessions, {} requests",
            self.clients.len(),
            self.sessions,
            self.requests
        )?;
        let shares = self.session_shares();
        let top = self.clients.len().min(10);
        if top > 0 {
            writeln!(f, "top clients (sessions, requests, share of sessions):")?;
        }
        for (c, s) in self.clients.iter().zip(&shares).take(top) {
            writeln!(
                f,
                "  {:<40} {:>7} {:>8} {:>7.4}",
                c.addr.to_string(),
                c.sessions,
                c.requests,
                s
            )?;
        }
        let q = |v: &[f64], x| stats::quantile(v, x);
        writeln!(
            f,
            "inter-request gaps (s): n {}, min {:.4}, median {:.4}, p90 {:.4}, p99 {:.4}, max {:.4}",
            self.gaps.len(),
            q(&self.gaps, 0.0),
            q(&self.gaps, 0.5),
            q(&self.gaps, 0.9),
            q(&self.gaps, 0.99),
            q(&self.gaps, 1.0)
        )?;
        writeln!(
            f,
            "ON/OFF (idle gap {} s, request unit {:.4} s): {} ON periods (median {:.4} s), {} OFF periods (median {:.4} s), rho {:.4}",
            self.cfg.idle,
            self.unit,
            self.on.len(),
            q(&self.on, 0.5),
            self.off.len(),
            q(&self.off, 0.5),
            self.rho
        )?;
        let hill = |t: Option<TailFit>| {
            t.map_or("n/a (fewer than 20 periods)".to_string(), |t| {
                format!("{:.3} (Hill, k={})", t.alpha, t.k)
            })
        };
        writeln!(f, "tail index ON {}", hill(self.hill_on))?;
        write!(f, "tail index OFF {}", hill(self.hill_off))
    }
}

#[cfg(test)]
mod tests;
