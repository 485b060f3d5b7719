//! The value parsers of the flags (`--map`, `--fleet`, rates, percentages, speeds, times) and
//! what a `--fleet` share gives.

use std::net::SocketAddr;
use std::time::Duration;

use crate::engine::{MapTargets, PortMap};
use crate::offline::Speed;
use crate::routing::InterceptAddr;

use super::error::ValueError;

/// `--fleet`: the copier's index (`None`: from the host name) and the fleet's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetArg {
    /// Copier `0..size`, or `None` for `host/N`.
    pub index: Option<u16>,
    /// Copiers in the fleet.
    pub size: u16,
}

/// Parse `I/N` or `host/N`.
pub fn parse_fleet(s: &str) -> Result<FleetArg, ValueError> {
    let (i, n) = s
        .split_once('/')
        .ok_or_else(|| ValueError::FleetForm(s.to_string()))?;
    let size: u16 = n.trim().parse().map_err(|_| ValueError::FleetSize {
        value: s.to_string(),
        size: n.to_string(),
    })?;
    if size == 0 {
        return Err(ValueError::FleetEmpty(s.to_string()));
    }
    let index = match i.trim() {
        "host" => None,
        i => {
            let i: u16 = i.parse().map_err(|_| ValueError::FleetIndex {
                value: s.to_string(),
                index: i.to_string(),
            })?;
            if i >= size {
                return Err(ValueError::FleetIndexOutside {
                    value: s.to_string(),
                    index: i,
                    size,
                });
            }
            Some(i)
        }
    };
    Ok(FleetArg { index, size })
}

/// The fleet share of `--fleet` (`host/N`: FNV-1a of `host` modulo N).
#[must_use]
pub fn fleet_share(arg: FleetArg, host: &str) -> crate::engine::FleetShare {
    let index = arg.index.unwrap_or_else(|| {
        let h = common::hash::fnv1a(host.as_bytes());
        (h % u64::from(arg.size)) as u16
    });
    crate::engine::FleetShare {
        index,
        size: arg.size,
    }
}

/// Parse `--map`: `[ONLINE_IP:]PORT=` and one target `IP:PORT` or weighted ones
/// `IP:PORT@W,IP:PORT@W` (see [`crate::engine::parse_targets`]).
pub fn parse_map_targets(s: &str) -> Result<MapTargets, ValueError> {
    let (online, targets) = s
        .split_once('=')
        .ok_or_else(|| ValueError::MapTargetsForm(s.to_string()))?;
    let targets = crate::engine::parse_targets(targets).map_err(|e| ValueError::MapTargets {
        value: s.to_string(),
        reason: e.to_string(),
    })?;
    let map = parse_map(&format!("{online}={}", targets[0].addr))?;
    Ok(MapTargets { map, targets })
}

/// Parse `[ONLINE_IP:]PORT=TARGET_IP:PORT` (IPv6 in brackets: `[2001:db8::1]:80=[2001:db8::2]:80`).
pub fn parse_map(s: &str) -> Result<PortMap, ValueError> {
    let (online, target) = s
        .split_once('=')
        .ok_or_else(|| ValueError::MapForm(s.to_string()))?;
    let (online_ip, online_port) = match online.trim().parse::<u16>() {
        Ok(p) => (None, p),
        Err(_) => match online.trim().parse::<SocketAddr>() {
            Ok(sa) => (Some(sa.ip()), sa.port()),
            Err(_) => {
                return Err(ValueError::MapOnline {
                    value: s.to_string(),
                    online: online.to_string(),
                })
            }
        },
    };
    if online_port == 0 {
        return Err(ValueError::MapPortZero(s.to_string()));
    }
    if let Some(ip) = online_ip {
        if ip.is_unspecified() || ip.is_multicast() {
            return Err(ValueError::MapOnlineAddress {
                value: s.to_string(),
                ip,
            });
        }
    }
    let target: SocketAddr = target.trim().parse().map_err(|_| ValueError::MapTarget {
        value: s.to_string(),
        target: target.to_string(),
    })?;
    if target.port() == 0 || target.ip().is_unspecified() || target.ip().is_multicast() {
        return Err(ValueError::MapTargetUnicast {
            value: s.to_string(),
            target,
        });
    }
    Ok(PortMap {
        online_ip,
        online_port,
        target,
    })
}

/// Parse a rate or factor: a finite number above 0 (`--target-rate`, `--max-factor`).
pub(super) fn parse_rate(s: &str) -> Result<f64, ValueError> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(ValueError::Rate(s.to_string())),
    }
}

/// Parse a percentage above 0 and at most 100 (`--sample`).
pub(super) fn parse_percent(s: &str) -> Result<f64, ValueError> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| ValueError::PercentNumber(s.to_string()))?;
    if v > 0.0 && v <= 100.0 {
        Ok(v)
    } else {
        Err(ValueError::PercentRange(s.to_string()))
    }
}

pub(super) fn parse_speed(s: &str) -> Result<Speed, String> {
    s.parse()
}

/// A Unix time in seconds, a fraction allowed (`--from`, `--until`).
pub(super) fn parse_unix_time(s: &str) -> Result<Duration, ValueError> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| ValueError::UnixTimeNumber(s.to_string()))?;
    if !(0.0..=1e11).contains(&v) {
        return Err(ValueError::UnixTimeRange(s.to_string()));
    }
    Ok(Duration::from_secs_f64(v))
}

pub(super) fn parse_intercept(s: &str) -> Result<InterceptAddr, String> {
    s.parse()
}
