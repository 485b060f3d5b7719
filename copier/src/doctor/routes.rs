//! `copier doctor`'s question to each intercept: does the test host route the copied client
//! addresses back through this copier host, and does its reverse-path filter let them in.
//!
//! The copied client addresses are the `--client-ip` pool's ranges when there is one, else the
//! client networks seen here: the peers of this host's TCP sockets on the mapped online ports
//! (/proc/net/tcp and tcp6), as /24 (IPv4) and /64 (IPv6) networks. The intercept answers each
//! range with the checks of `intercept doctor --client-range` (`Message::RouteQuery`,
//! `Message::RouteAnswer`); a missing route back is a failure naming the test host, the range
//! and the command that adds it.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use common::doctor::Report;
use common::proto::{Message, RouteStatus};

use crate::engine::PortMap;

/// Most client networks seen that are asked about (the busiest first).
const MAX_SEEN_NETS: usize = 16;

/// The client ranges the copies come from, each with its address and prefix length, and how
/// they were found (for the report); a warning when none is known.
pub(super) fn client_nets(
    r: &mut Report,
    pool: &[crate::engine::ClientIpPool],
    maps: &[PortMap],
) -> Vec<(IpAddr, u8)> {
    if !pool.is_empty() {
        let nets: Vec<(IpAddr, u8)> = pool
            .iter()
            .flat_map(|p| p.ranges().iter().map(|r| r.net()))
            .collect();
        r.ok(
            "copied client addresses",
            format!("the --client-ip pool: {}", show(&nets)),
        );
        return nets;
    }
    let mut text = String::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        text.push_str(&std::fs::read_to_string(f).unwrap_or_default());
    }
    let peers: Vec<IpAddr> = proc_net_tcp(&text)
        .into_iter()
        .filter(|(local, _)| {
            maps.iter().any(|m| {
                m.online_port == local.port() && m.online_ip.is_none_or(|ip| ip == local.ip())
            })
        })
        .map(|(_, peer)| peer.ip())
        .collect();
    let nets = networks(&peers);
    if nets.is_empty() {
        let ports: Vec<String> = maps.iter().map(|m| m.online_port.to_string()).collect();
        r.warn(
            "copied client addresses",
            format!("no client connection to port {} of this host seen: the test host's route back to the real clients is not checked", ports.join(", ")),
            "run `copier doctor` while clients are connected, or `intercept doctor --client-range CIDR` on the test host",
        );
    } else {
        r.ok(
            "copied client addresses",
            format!(
                "the real clients' (networks seen on the mapped ports): {}",
                show(&nets)
            ),
        );
    }
    nets
}

fn show(nets: &[(IpAddr, u8)]) -> String {
    nets.iter()
        .map(|(ip, p)| format!("{ip}/{p}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The (local, peer) addresses of the sockets listed in /proc/net/tcp or tcp6 text (the peer
/// of a listening socket, unspecified, left out); IPv4-mapped IPv6 addresses as IPv4.
pub(super) fn proc_net_tcp(text: &str) -> Vec<(SocketAddr, SocketAddr)> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            w.next()?.strip_suffix(':')?.parse::<u32>().ok()?;
            let local = hex_addr(w.next()?)?;
            let peer = hex_addr(w.next()?)?;
            (!peer.ip().is_unspecified()).then_some((local, peer))
        })
        .collect()
}

/// `0100007F:0050` (IPv4) or 32 hex digits (IPv6), each 32-bit word in the host's byte order,
/// then the port.
fn hex_addr(s: &str) -> Option<SocketAddr> {
    let (a, p) = s.split_once(':')?;
    let port = u16::from_str_radix(p, 16).ok()?;
    let word = |i: usize| {
        a.get(i * 8..i * 8 + 8)
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .map(u32::to_ne_bytes)
    };
    let ip = match a.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            let v6 = Ipv6Addr::from(b);
            v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The /24 (IPv4) and /64 (IPv6) networks of `peers`, loopback left out, the busiest first (at
/// most [`MAX_SEEN_NETS`]).
pub(super) fn networks(peers: &[IpAddr]) -> Vec<(IpAddr, u8)> {
    let mut count: BTreeMap<(IpAddr, u8), usize> = BTreeMap::new();
    for ip in peers.iter().filter(|ip| !ip.is_loopback()) {
        let net = match ip {
            IpAddr::V4(a) => (IpAddr::V4(Ipv4Addr::from(u32::from(*a) & 0xffff_ff00)), 24),
            IpAddr::V6(a) => (
                IpAddr::V6(Ipv6Addr::from(u128::from(*a) & !((1u128 << 64) - 1))),
                64,
            ),
        };
        *count.entry(net).or_default() += 1;
    }
    let mut nets: Vec<((IpAddr, u8), usize)> = count.into_iter().collect();
    nets.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    nets.into_iter()
        .take(MAX_SEEN_NETS)
        .map(|(n, _)| n)
        .collect()
}

/// Asks the intercept `name` (on test host `host`) about the route back to `nets` and reports
/// its findings under its name.
pub(super) async fn ask<S>(
    r: &mut Report,
    name: &str,
    host: IpAddr,
    est: &mut common::proto::io::Established<S>,
    nets: &[(IpAddr, u8)],
    timeout: Duration,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let item = format!("route back from test host {host}");
    let answer = super::ask(
        est,
        &Message::RouteQuery {
            nets: nets.to_vec(),
        },
        timeout,
        |m| match m {
            Message::RouteAnswer { checks } => Some(checks),
            _ => None,
        },
    )
    .await;
    let Ok(answer) = answer else {
        r.warn(
            item,
            "the link closed before the intercept answered",
            "see the intercept's log",
        );
        return;
    };
    let Some(checks) = answer else {
        r.warn(
            item,
            "no answer to the question of the route back",
            format!(
                "run `intercept doctor --client-range {}` on the test host",
                show(nets)
            ),
        );
        return;
    };
    for c in checks {
        let item = format!("{} on test host {host} (intercept {name})", c.item);
        match c.status {
            RouteStatus::Ok => r.ok(item, c.detail),
            RouteStatus::Warn => r.warn(
                item,
                c.detail,
                format!("on the test host {host}: {}", c.fix),
            ),
            RouteStatus::Fail => r.fail(
                item,
                c.detail,
                format!("on the test host {host}: {}", c.fix),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_tcp_lines_give_local_and_peer() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
                  0: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n   \
                  1: 010112C6:0050 020112C6:C350 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1\n";
        let v6 = "  sl  local_address                         remote_address                        st\n   \
                  0: 0000000000000000FFFF0000010112C6:0050 0000000000000000FFFF0000020112C6:A000 01 0\n";
        if cfg!(target_endian = "little") {
            assert_eq!(
                proc_net_tcp(v4),
                vec![(
                    "198.18.1.1:80".parse().unwrap(),
                    "198.18.1.2:50000".parse().unwrap()
                )]
            );
            assert_eq!(
                proc_net_tcp(v6),
                vec![(
                    "198.18.1.1:80".parse().unwrap(),
                    "198.18.1.2:40960".parse().unwrap()
                )]
            );
        }
        assert!(proc_net_tcp("garbage\n 0: zz:1 00:2 01").is_empty());
    }

    #[test]
    fn peers_group_into_networks_busiest_first() {
        let ips: Vec<IpAddr> = [
            "198.18.1.2",
            "198.18.1.3",
            "10.0.0.1",
            "127.0.0.1",
            "fd00:198:18:1::2",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        assert_eq!(
            networks(&ips),
            vec![
                ("198.18.1.0".parse().unwrap(), 24),
                ("10.0.0.0".parse().unwrap(), 24),
                ("fd00:198:18:1::".parse().unwrap(), 64)
            ]
        );
        let many: Vec<IpAddr> = (0..40u32)
            .map(|i| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + (i << 8))))
            .collect();
        assert_eq!(networks(&many).len(), MAX_SEEN_NETS);
    }
}
