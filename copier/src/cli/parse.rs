//! The value parsers of the flags (`--map`, `--fleet`, rates, percentages, speeds, times) and
//! what a `--fleet` share gives.

use std::net::SocketAddr;
use std::time::Duration;

use crate::engine::{MapTargets, PortMap};
use crate::offline::Speed;
use crate::routing::InterceptAddr;

/// `--fleet`: the copier's index (`None`: from the host name) and the fleet's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetArg {
    /// Copier `0..size`, or `None` for `host/N`.
    pub index: Option<u16>,
    /// Copiers in the fleet.
    pub size: u16,
}

/// Parse `I/N` or `host/N`.
pub fn parse_fleet(s: &str) -> Result<FleetArg, String> {
    let (i, n) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?}: expected I/N (copier I of N, from 0) or host/N"))?;
    let size: u16 = n
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: the fleet size {n:?} is not a number from 1 to 65535"))?;
    if size == 0 {
        return Err(format!("{s:?}: a fleet has at least one copier"));
    }
    let index = match i.trim() {
        "host" => None,
        i => {
            let i: u16 = i
                .parse()
                .map_err(|_| format!("{s:?}: the copier {i:?} is neither a number nor `host`"))?;
            if i >= size {
                return Err(format!(
                    "{s:?}: copier {i} does not exist in a fleet of {size} (0 to {})",
                    size - 1
                ));
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
pub fn parse_map_targets(s: &str) -> Result<MapTargets, String> {
    let (online, targets) = s.split_once('=').ok_or_else(|| {
        format!("{s:?}: no '=': expected [ONLINE_IP:]PORT=TARGET_IP:PORT[@W][,...]")
    })?;
    let targets = crate::engine::parse_targets(targets).map_err(|e| format!("{s:?}: {e}"))?;
    let map = parse_map(&format!("{online}={}", targets[0].addr))?;
    Ok(MapTargets { map, targets })
}

/// Parse `[ONLINE_IP:]PORT=TARGET_IP:PORT` (IPv6 in brackets: `[2001:db8::1]:80=[2001:db8::2]:80`).
pub fn parse_map(s: &str) -> Result<PortMap, String> {
    let form = "expected [ONLINE_IP:]PORT=TARGET_IP:PORT, e.g. 80=198.18.1.2:8080";
    let (online, target) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: no '=': {form}"))?;
    let (online_ip, online_port) = match online.trim().parse::<u16>() {
        Ok(p) => (None, p),
        Err(_) => match online.trim().parse::<SocketAddr>() {
            Ok(sa) => (Some(sa.ip()), sa.port()),
            Err(_) => {
                return Err(format!(
                    "{s:?}: online part {online:?} is neither PORT nor IP:PORT (IPv6 as [ADDR]:PORT): {form}"
                ))
            }
        },
    };
    if online_port == 0 {
        return Err(format!("{s:?}: online port 0 cannot be copied"));
    }
    if let Some(ip) = online_ip {
        if ip.is_unspecified() || ip.is_multicast() {
            return Err(format!("{s:?}: online address {ip} cannot be a service address; leave it out to copy any address"));
        }
    }
    let target: SocketAddr = target.trim().parse().map_err(|_| {
        format!("{s:?}: target {target:?} is not IP:PORT (IPv6 as [ADDR]:PORT; host names are not resolved): {form}")
    })?;
    if target.port() == 0 || target.ip().is_unspecified() || target.ip().is_multicast() {
        return Err(format!(
            "{s:?}: target {target} needs a unicast address and a port from 1 to 65535"
        ));
    }
    Ok(PortMap {
        online_ip,
        online_port,
        target,
    })
}

/// Parse a rate or factor: a finite number above 0 (`--target-rate`, `--max-factor`).
pub(super) fn parse_rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number above 0")),
    }
}

/// Parse a percentage above 0 and at most 100 (`--sample`).
pub(super) fn parse_percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("{s:?} is not a number (e.g. 50 or 12.5)"))?;
    if v > 0.0 && v <= 100.0 {
        Ok(v)
    } else {
        Err(format!("{s:?} is not above 0 and at most 100"))
    }
}

pub(super) fn parse_speed(s: &str) -> Result<Speed, String> {
    s.parse()
}

/// A Unix time in seconds, a fraction allowed (`--from`, `--until`).
pub(super) fn parse_unix_time(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a Unix time in seconds (e.g. 1764480000.5)"))?;
    if !(0.0..=1e11).contains(&v) {
        return Err(format!("{s:?} is not a Unix time in seconds"));
    }
    Ok(Duration::from_secs_f64(v))
}

pub(super) fn parse_intercept(s: &str) -> Result<InterceptAddr, String> {
    s.parse()
}
