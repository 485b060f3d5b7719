//! The sans-IO parts of the offline replay: when each packet is due ([`Pacer`]), which packets
//! are fed to the engine ([`PortFilter`]; with `--compare`, also which are the services'
//! answers), and how each pass of a looped replay gets client
//! ports of its own ([`LoopPorts`]).
//!
//! Invariants:
//! - [`Pacer::schedule`] never goes backwards: a packet stamped earlier than the one before it
//!   (captures from several interfaces interleave that way) is due at the same time as it.
//! - [`PortFilter`] accepts exactly what the live capture's kernel filter accepts (see
//!   `crate::bpf`), except that the capture direction is not looked at: a file may have been
//!   taken anywhere, and the ports tell the direction.
//! - Within a pass, [`LoopPorts`] maps each captured (client, server) pair to one port; a pass
//!   after the first never gives a client address a port that an earlier pass (or another pair
//!   of this pass) used with it, while the port space lasts.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use common::wire::{Ipv4Packet, Ipv6Packet, TcpSegment, IPPROTO_TCP};

use crate::engine::PortMap;

/// How fast the file is replayed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Speed {
    /// As fast as the engine takes packets; gaps are ignored.
    Max,
    /// Capture time divided by this factor (10 = ten times faster), always > 0.
    Factor(f64),
}

impl std::str::FromStr for Speed {
    type Err = String;
    fn from_str(s: &str) -> Result<Speed, String> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("max") {
            return Ok(Speed::Max);
        }
        let v: f64 = t
            .trim_end_matches(['x', 'X'])
            .parse()
            .map_err(|_| format!("speed {s:?} is neither a number (e.g. 1, 10, 0.5) nor `max`"))?;
        if v == 0.0 {
            Ok(Speed::Max)
        } else if v.is_finite() && (0.001..=1e6).contains(&v) {
            Ok(Speed::Factor(v))
        } else {
            Err(format!("speed {s:?} is out of range (0.001 to 1000000, or 0 / max for as fast as possible)"))
        }
    }
}

impl std::fmt::Display for Speed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Speed::Max => write!(f, "max"),
            Speed::Factor(v) => write!(f, "{v}x"),
        }
    }
}

/// Maps capture timestamps to offsets from the start of the replay.
///
/// A gap between two packets longer than `max_gap` (in capture time) is cut to `max_gap`; then
/// every gap is divided by the speed. The first packet (of each pass) is due at once after the
/// previous one.
#[derive(Clone, Debug)]
pub struct Pacer {
    speed: Speed,
    max_gap: Duration,
    last: Option<Duration>,
    at: Duration,
}

impl Pacer {
    /// A pacer at offset zero.
    #[must_use]
    pub fn new(speed: Speed, max_gap: Duration) -> Pacer {
        Pacer {
            speed,
            max_gap,
            last: None,
            at: Duration::ZERO,
        }
    }

    /// Offset from the start of the replay at which the packet captured at `ts` is due.
    pub fn schedule(&mut self, ts: Duration) -> Duration {
        let gap = match self.last {
            Some(last) if ts > last => (ts - last).min(self.max_gap),
            _ => Duration::ZERO,
        };
        if !matches!(self.last, Some(l) if l >= ts) {
            self.last = Some(ts);
        }
        self.at += match self.speed {
            Speed::Max => Duration::ZERO,
            Speed::Factor(f) => gap.div_f64(f),
        };
        self.at
    }

    /// A new pass over the file: its first packet follows the last one of the previous pass at
    /// once.
    pub fn restart(&mut self) {
        self.last = None;
    }
}

/// Which packets of a file are client -> service packets of a mapped service.
#[derive(Clone, Debug)]
pub struct PortFilter {
    maps: Vec<(Option<IpAddr>, u16)>,
}

/// The parts of an accepted packet the replay uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The client end.
    pub client: SocketAddr,
    /// The service end.
    pub server: SocketAddr,
    /// Offset of the TCP header in the packet.
    pub tcp_offset: usize,
}

impl PortFilter {
    /// A filter for these maps.
    #[must_use]
    pub fn new(maps: &[PortMap]) -> PortFilter {
        PortFilter {
            maps: maps.iter().map(|m| (m.online_ip, m.online_port)).collect(),
        }
    }

    /// `Some` when `ip` is IPv4 TCP (not a later fragment) or IPv6 whose fixed header says TCP,
    /// to a mapped port, and to a mapped address when that port was mapped with addresses.
    #[must_use]
    pub fn accept(&self, ip: &[u8]) -> Option<Accepted> {
        let (src, dst, off) = tcp_ends(ip)?;
        self.hit(dst).then_some(Accepted {
            client: src,
            server: dst,
            tcp_offset: off,
        })
    }

    /// The other direction (`--offline --compare`): `Some` when `ip` is a packet of a mapped
    /// service to its client (what [`PortFilter::accept`] takes, with the ends swapped);
    /// `client` and `server` are named as for the client's packets.
    #[must_use]
    pub fn accept_answer(&self, ip: &[u8]) -> Option<Accepted> {
        let (src, dst, off) = tcp_ends(ip)?;
        self.hit(src).then_some(Accepted {
            client: dst,
            server: src,
            tcp_offset: off,
        })
    }

    /// Whether `service` is a mapped port (and address, when its map names one).
    fn hit(&self, service: SocketAddr) -> bool {
        self.maps.iter().any(|&(addr, port)| {
            port == service.port() && !matches!(addr, Some(a) if a != service.ip())
        })
    }
}

/// The source and destination ends of an IPv4 TCP packet (not a later fragment) or an IPv6 one
/// whose fixed header says TCP, and the offset of its TCP header.
fn tcp_ends(ip: &[u8]) -> Option<(SocketAddr, SocketAddr, usize)> {
    // The fixed headers only, through the wire views (nothing past them is checked: the
    // engine judges and counts the rest).
    let (src, dst, off): (IpAddr, IpAddr, usize) = match ip.first()? >> 4 {
        4 => {
            let h = Ipv4Packet::new_unchecked(ip.get(..20)?);
            if h.protocol() != IPPROTO_TCP || h.frag_offset() != 0 {
                return None;
            }
            (h.src_addr().into(), h.dst_addr().into(), h.header_len())
        }
        6 => {
            let h = Ipv6Packet::new_unchecked(ip.get(..40)?);
            if h.next_header() != IPPROTO_TCP {
                return None;
            }
            (h.src_addr().into(), h.dst_addr().into(), 40)
        }
        _ => return None,
    };
    let ports = TcpSegment::new_unchecked(ip.get(off..off + 4)?);
    Some((
        SocketAddr::new(src, ports.src_port()),
        SocketAddr::new(dst, ports.dst_port()),
        off,
    ))
}

/// Lowest port given to a shifted client.
const PORT_BASE: u32 = 1024;
const PORT_SPAN: u32 = 65536 - PORT_BASE;
/// How far each pass shifts the ports before looking for a free one (a prime, so the passes do
/// not line up with the kernel's sequential ephemeral ports).
const PASS_STRIDE: u32 = 7919;

/// Client ports per pass of a looped replay.
///
/// Pass 0 keeps the captured ports. Pass `k` moves each client's port by `k * 7919` within
/// 1024-65535 and then on to the first port that no earlier pass and no other pair of this pass
/// used with that client address, so every pass is a new set of connections for the test server
/// (whose TIME_WAIT sockets and PAWS checks would otherwise refuse or confuse a second session
/// on the same tuple with the same sequence numbers).
#[derive(Debug, Default)]
pub struct LoopPorts {
    pass: u32,
    /// Every (client address, port) handed out so far, over all passes.
    used: HashSet<(IpAddr, u16)>,
    /// This pass's choices, by captured (client, server).
    current: HashMap<(SocketAddr, SocketAddr), u16>,
    /// Times no free port was left for a client address and one was reused.
    exhausted: u64,
}

impl LoopPorts {
    /// Ports for pass 0.
    #[must_use]
    pub fn new() -> LoopPorts {
        LoopPorts::default()
    }

    /// Start pass `pass` (0-based).
    pub fn start_pass(&mut self, pass: u32) {
        self.pass = pass;
        self.current.clear();
    }

    /// Times a client address ran out of ports.
    #[must_use]
    pub fn exhausted(&self) -> u64 {
        self.exhausted
    }

    /// The port this pass gave the captured `client` talking to `server`, if it gave one (the
    /// service's answers of a session follow its client's first packet).
    #[must_use]
    pub fn given(&self, client: SocketAddr, server: SocketAddr) -> Option<u16> {
        self.current.get(&(client, server)).copied()
    }

    /// The client port to use for the captured `client` talking to `server` in this pass.
    pub fn port(&mut self, client: SocketAddr, server: SocketAddr) -> u16 {
        if let Some(&p) = self.current.get(&(client, server)) {
            return p;
        }
        let ip = client.ip();
        let port = if self.pass == 0 {
            client.port()
        } else {
            let orig = u32::from(client.port()).max(PORT_BASE) - PORT_BASE;
            let shift =
                (u64::from(self.pass) * u64::from(PASS_STRIDE) % u64::from(PORT_SPAN)) as u32;
            let first = (orig + shift) % PORT_SPAN;
            let free = (0..PORT_SPAN)
                .map(|i| (PORT_BASE + (first + i) % PORT_SPAN) as u16)
                .find(|&p| !self.used.contains(&(ip, p)));
            match free {
                Some(p) => p,
                None => {
                    self.exhausted += 1;
                    (PORT_BASE + first) as u16
                }
            }
        };
        self.used.insert((ip, port));
        self.current.insert((client, server), port);
        port
    }
}
