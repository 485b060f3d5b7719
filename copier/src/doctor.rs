//! `copier doctor`: checks, on the production front end, everything that makes copying fail
//! silently, and says what to run to fix each item. Exit status 0 only when copying would work.
//!
//! Owns the checks that are the copier's: capture and raw-send permission, the capture
//! interface, the offloads that decide the largest captured packet against the ring block, the
//! route and path MTU to each target, the route to each intercept, its handshake with the
//! shared secret and its verdict on a probe registration of each map's test port, and the clock
//! skew with each intercept host, and (`routes`) each test host's route back to the copied
//! client addresses; with `--mirror`, the mirror input in place of the capture interface
//! (`mirror_input`: it listens as the copier would and judges what arrives with the copier's own
//! `crate::mirror::Selector`). The host probes themselves (routes, sysctls, conntrack, the
//! ICMP clock probe, the report) live in [`common::doctor`], shared with `intercept doctor`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use common::doctor::{self, Report};
use common::flow::FourTuple;
use common::proto::io::client_handshake_timeout;
use common::proto::Message;

use crate::cli::DoctorArgs;
use crate::engine::PortMap;
use crate::routing::InterceptAddr;

mod routes;

/// Bytes a TPACKET_V3 block needs besides the packet: the block and packet headers and the
/// link-layer address (rounded up).
const RING_OVERHEAD: u64 = 256;

/// Runs every check; prints the report to stdout; returns the exit status.
pub fn main(a: &DoctorArgs) -> u8 {
    run(a).print("copier doctor")
}

/// Runs every check.
pub fn run(a: &DoctorArgs) -> Report {
    let mut r = Report::default();
    match a.copier.validate(0) {
        Ok(_) => r.ok("copier flags", "the copier accepts them"),
        Err(e) => r.fail(
            "copier flags",
            e.to_string(),
            "fix the flag named (copier --help)",
        ),
    }
    permissions(&mut r);
    // One map per test server.
    let maps: Vec<PortMap> = a
        .maps
        .iter()
        .flat_map(|m| {
            m.targets.iter().map(move |t| PortMap {
                target: t.addr,
                ..m.map
            })
        })
        .collect();
    match &a.mirror {
        Some(m) => {
            let cfg = crate::mirror::MirrorConfig {
                vnis: a.vni.clone().map(|v| v.0).unwrap_or_default(),
                ..m.clone()
            };
            mirror_input(&mut r, &cfg, &maps, a.mirror_listen, a.inner_mtu);
        }
        None => capture_interface(&mut r, a),
    }
    for m in &maps {
        // A mirror host does not run the online service.
        if a.mirror.is_none() {
            online_service(&mut r, m);
        }
        target(&mut r, m, a.mtu);
        send_path(&mut r, m, a.gso);
    }
    let secret = match (&a.secret_file, a.no_secret) {
        (Some(path), false) => match common::proto::auth::load_secret(path) {
            Ok(s) => {
                r.ok("secret file", path.display().to_string());
                Some(s)
            }
            Err(e) => {
                r.fail("secret file", format!("{}: {e}", path.display()), "write at least 16 bytes to it and chmod 600 it (the same file as on the test host)");
                None
            }
        },
        _ => None,
    };
    let secret_ok = a.no_secret || secret.is_some();
    let online: Vec<PortMap> = a.maps.iter().map(|m| m.map).collect();
    let nets = routes::client_nets(&mut r, &a.client_ip, &online);
    for i in &a.intercepts {
        intercept(
            &mut r,
            i,
            secret.as_deref(),
            secret_ok,
            &maps,
            &nets,
            a.max_clock_skew,
        );
    }
    forwarding(&mut r);
    doctor::check_conntrack(&mut r);
    r
}

/// `--mirror`: bind the port, listen for `listen`, judge what arrives as the copier would.
fn mirror_input(
    r: &mut Report,
    cfg: &crate::mirror::MirrorConfig,
    maps: &[PortMap],
    listen: Duration,
    inner_mtu: u16,
) {
    use crate::mirror::{bind, MirrorStats, Selector};
    let what = format!("{} mirror on UDP port {}", cfg.encap.name(), cfg.port);
    let sock = match bind(cfg.port) {
        Ok(s) => {
            r.ok("mirror port", format!("{what}: bound"));
            s
        }
        Err(e) => {
            r.fail(
                "mirror port",
                format!("{what}: {e}"),
                format!("stop what listens on UDP {} (ss -lunp sport = :{}), or give the mirror another port (--mirror {}:PORT)", cfg.port, cfg.port, cfg.encap.name()),
            );
            return;
        }
    };
    let _ = sock.set_nonblocking(false);
    let sock = std::net::UdpSocket::from(sock);
    let mut sel = Selector::new(cfg, maps);
    let mut st = MirrorStats::default();
    let mut buf = vec![0u8; crate::mirror::DATAGRAM_MAX];
    let mut sources = std::collections::BTreeSet::new();
    let mut largest = 0usize;
    let deadline = std::time::Instant::now() + listen;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || sock.set_read_timeout(Some(left)).is_err() {
            break;
        }
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            break;
        };
        largest = largest.max(n);
        if sources.len() < 8 {
            sources.insert(from.ip().to_canonical());
        }
        let _ = sel.judge(&buf[..n], &mut st);
    }
    if st.datagrams == 0 {
        r.fail(
            "mirror packets arriving",
            format!("none in {listen:?}"),
            format!(
                "point the mirror session's target at this host; allow UDP {} in (security group, NSG, firewall: iptables -I INPUT -p udp --dport {} -j ACCEPT)",
                cfg.port, cfg.port
            ),
        );
        return;
    }
    r.ok(
        "mirror packets arriving",
        format!(
            "{} datagrams in {listen:?} from {:?}",
            st.datagrams, sources
        ),
    );
    let vnis: Vec<u32> = st.vnis.iter().copied().collect();
    if !cfg.vnis.is_empty() && st.drops.vni == st.datagrams {
        r.fail(
            "mirror VNIs",
            format!("seen {vnis:?}, none of --vni {:?}", cfg.vnis),
            "give --vni the VNI of the mirror session (or leave it out)",
        );
    } else {
        r.ok("mirror VNIs", format!("seen {vnis:?}"));
    }
    match (st.client_packets, st.server_packets) {
        (0, 0) => r.warn(
            "mirror directions",
            format!("no packet of a mapped service among {} datagrams ({} unselected)", st.datagrams, st.drops.unselected),
            "check --map against what is mirrored (the mirror filter's ports and addresses), and make traffic",
        ),
        (_, 0) => r.warn(
            "mirror directions",
            format!("{} client packets, no answer of the services", st.client_packets),
            "mirror both directions (AWS: accept rules for inbound and outbound; tc: ingress and egress) for --compare",
        ),
        (0, _) => r.warn(
            "mirror directions",
            format!("{} answers, no client packet: nothing to copy", st.server_packets),
            "mirror the interface's inbound traffic too",
        ),
        (c, s) => r.ok("mirror directions", format!("{c} client packets, {s} answers")),
    }
    if st.drops.truncated > 0 {
        r.fail(
            "mirror truncation",
            format!(
                "{} of {} datagrams cut short: their sessions cannot be copied whole",
                st.drops.truncated, st.datagrams
            ),
            "remove the mirror session's packet length limit (AWS: --packet-length unset)",
        );
    } else {
        r.ok("mirror truncation", "no packet cut short");
    }
    let need = u32::from(inner_mtu) + 50;
    for src in sources {
        let item = format!("mirror path MTU from {src}");
        match doctor::route_get(src) {
            Ok(route) => {
                let dev_mtu = doctor::link(&route.dev).map(|l| l.mtu).unwrap_or(u32::MAX);
                let path = route.mtu.unwrap_or(u32::MAX).min(dev_mtu);
                if path < need {
                    r.warn(
                        item,
                        format!("{path} on dev {}: a {inner_mtu}-byte inner packet needs {need} (50 bytes of encapsulation): the sender fragments or drops it", route.dev),
                        format!("raise the MTU of the mirror path to at least {need} (ip link set {} mtu {need}, and on the sender's side), or lower the mirrored interface's MTU", route.dev),
                    );
                } else {
                    r.ok(
                        item,
                        format!("{path} on dev {} carries {inner_mtu} + 50", route.dev),
                    );
                }
            }
            Err(e) => r.warn(item, e, "check the route back to the mirror's sender"),
        }
    }
    if largest > 0 {
        r.ok("mirror datagram size", format!("largest {largest} bytes"));
    }
}

fn permissions(r: &mut Report) {
    use socket2::{Domain, Protocol, Socket, Type};
    let eth_p_all = Protocol::from(i32::from((libc::ETH_P_ALL as u16).to_be()));
    match Socket::new(Domain::PACKET, Type::RAW, Some(eth_p_all)) {
        Ok(_) => r.ok("capture permission", "an AF_PACKET socket opens (CAP_NET_RAW)"),
        Err(e) => r.fail(
            "capture permission",
            format!("cannot open an AF_PACKET socket: {e}"),
            "run the copier as root or with CAP_NET_RAW and CAP_NET_ADMIN (the packaged unit grants both: AmbientCapabilities=CAP_NET_RAW CAP_NET_ADMIN)",
        ),
    }
    match Socket::new(
        Domain::IPV4,
        Type::RAW,
        Some(Protocol::from(libc::IPPROTO_RAW)),
    ) {
        Ok(_) => r.ok("send permission", "a raw IP socket opens (CAP_NET_RAW)"),
        Err(e) => r.fail(
            "send permission",
            format!("cannot open a raw IP socket: {e}"),
            "run the copier with CAP_NET_RAW",
        ),
    }
}

fn capture_interface(r: &mut Report, a: &DoctorArgs) {
    let names = match &a.interface {
        Some(i) => vec![i.clone()],
        None => doctor::interfaces(),
    };
    for name in names {
        let l = match doctor::link(&name) {
            Ok(l) => l,
            Err(e) => {
                r.fail(format!("interface {name}"), format!("cannot capture on it: {e}"), "give --interface the interface clients reach the online service on (ip -br link)");
                continue;
            }
        };
        if !l.up {
            let item = format!("interface {name}");
            if a.interface.is_some() {
                r.fail(
                    item,
                    "is down: nothing is captured",
                    format!(
                        "ip link set dev {name} up, or give the interface that carries the traffic"
                    ),
                );
            }
            continue;
        }
        r.ok(format!("interface {name}"), format!("up, mtu {}", l.mtu));
        // The largest packet the capture meets is a GRO super-segment (or a jumbo frame); a
        // TPACKET_V3 block must hold it whole, or it is cut and its data lost.
        let biggest = u64::from(l.gro_max.unwrap_or(65536).max(l.mtu));
        let item = format!("offloads on {name}");
        if biggest + RING_OVERHEAD > a.ring_block_size {
            r.fail(
                item,
                format!(
                    "GRO may build packets of {biggest} bytes, more than a capture ring block of {} holds: their data would be cut",
                    a.ring_block_size
                ),
                format!(
                    "start the copier with --ring-block-size {}K, or ip link set dev {name} gro_max_size 65536 (and gro_ipv4_max_size 65536)",
                    (biggest + RING_OVERHEAD).div_ceil(4096) * 4
                ),
            );
        } else {
            r.ok(
                item,
                format!(
                    "largest captured packet {biggest} bytes fits a ring block of {}",
                    a.ring_block_size
                ),
            );
        }
    }
}

fn online_service(r: &mut Report, m: &PortMap) {
    let item = format!("online service of --map {}", m);
    if doctor::tcp_listening(m.online_port) {
        r.ok(
            item,
            format!("a process listens on port {} here", m.online_port),
        );
    } else {
        r.warn(
            item,
            format!("nothing listens on port {} in this network namespace", m.online_port),
            "fine when the service runs in a container whose traffic crosses this host's interfaces; otherwise check the port of --map",
        );
    }
}

fn target(r: &mut Report, m: &PortMap, mtu: u16) {
    let t = m.target;
    let item = format!("route to target {t}");
    let route = match doctor::route_get(t.ip()) {
        Ok(route) => route,
        Err(e) => {
            r.fail(
                item,
                format!("none ({e}): the copies cannot be sent"),
                format!("ip route add {} via <gateway toward the test host>", t.ip()),
            );
            return;
        }
    };
    if route.local {
        r.fail(
            item,
            "the target is an address of this host: the copies would come back here",
            "give --map the test server's address",
        );
        return;
    }
    r.ok(item, route.to_string());
    let dev_mtu = doctor::link(&route.dev).map(|l| l.mtu).unwrap_or(u32::MAX);
    let path = route.mtu.unwrap_or(u32::MAX).min(dev_mtu);
    let item = format!("MTU toward {t}");
    if path < u32::from(mtu) {
        r.fail(
            item,
            format!("--mtu {mtu} but the path through {} allows {path}: larger copies are dropped on the way", route.dev),
            format!("start the copier with --mtu {path}"),
        );
    } else {
        r.ok(item, format!("--mtu {mtu} fits {} (mtu {path})", route.dev));
    }
}

/// Which way super-segments (`--gso`) take toward a test server: whole through AF_PACKET, or cut
/// by the copier, and why.
fn send_path(r: &mut Report, m: &PortMap, gso: crate::cli::GsoMode) {
    let t = m.target;
    let item = format!("send path toward {t}");
    if gso == crate::cli::GsoMode::Off {
        r.ok(
            item,
            "--gso off: every segment is built and sent one by one through the raw socket",
        );
        return;
    }
    if let Err(e) = crate::sys::PacketTx::open(1 << 16) {
        r.warn(
            item,
            format!("no AF_PACKET socket with PACKET_VNET_HDR ({e}): super-segments are cut by the copier (more CPU per MB)"),
            "run the copier with CAP_NET_RAW on a kernel with PACKET_VNET_HDR",
        );
        return;
    }
    match crate::egress::lookup(t.ip()) {
        Ok(e) => r.ok(
            item,
            format!(
                "super-segments leave whole through {} (AF_PACKET with a GSO header, next hop {}, mtu {}): the kernel or the NIC cuts them",
                e.dev, e.next_hop, e.mtu
            ),
        ),
        Err(why) if why.contains("no Ethernet address known yet") => r.ok(
            item,
            format!("{why}: the first copies (raw socket) make the kernel resolve it; super-segments leave whole from then on"),
        ),
        Err(why) => r.warn(
            item,
            format!("super-segments are cut by the copier: {why} (more CPU per MB)"),
            "route the test server through an Ethernet interface (a NIC, veth or bridge) to have the kernel cut them",
        ),
    }
}

fn intercept(
    r: &mut Report,
    i: &InterceptAddr,
    secret: Option<&[u8]>,
    secret_ok: bool,
    maps: &[PortMap],
    nets: &[(IpAddr, u8)],
    skew: Duration,
) {
    let name = format!("{}:{}", i.host, i.port);
    let addr = match (i.host.as_str(), i.port)
        .to_socket_addrs()
        .map(|mut a| a.next())
    {
        Ok(Some(a)) => a,
        Ok(None) | Err(_) => {
            r.fail(
                format!("intercept {name}"),
                "the name does not resolve",
                "give --intercept the test host's address",
            );
            return;
        }
    };
    match doctor::route_get(addr.ip()) {
        Ok(route) if route.local => r.fail(
            format!("route to intercept {name}"),
            "is an address of this host",
            "the intercept runs on the test host; give its address",
        ),
        Ok(route) => r.ok(
            format!("route to intercept {name}"),
            format!("dev {}", route.dev),
        ),
        Err(e) => {
            r.fail(
                format!("route to intercept {name}"),
                format!("none ({e})"),
                format!(
                    "ip route add {} via <gateway toward the test host>",
                    addr.ip()
                ),
            );
            return;
        }
    }
    doctor::check_clock(r, "intercept host", addr.ip(), skew);
    if !secret_ok {
        return;
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            r.fail(
                format!("intercept {name} reachable"),
                format!("cannot start a runtime: {e}"),
                "",
            );
            return;
        }
    };
    rt.block_on(talk(r, &name, addr, secret, maps, nets));
}

/// A client address of the documentation ranges, of the target's family: a probe registration
/// no real session can collide with.
fn probe_tuple(m: &PortMap, n: u16) -> FourTuple {
    let client = match m.target.ip() {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
    };
    FourTuple {
        client: SocketAddr::new(client, 1024 + n).into(),
        server: m.target.into(),
    }
}

async fn talk(
    r: &mut Report,
    name: &str,
    addr: SocketAddr,
    secret: Option<&[u8]>,
    maps: &[PortMap],
    nets: &[(IpAddr, u8)],
) {
    let timeout = Duration::from_secs(3);
    let stream = match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            r.fail(
                format!("intercept {name} reachable"),
                format!("cannot connect: {e}"),
                "start the intercept on the test host (systemctl start trafficcopy-intercept) with --listen on this address, and let this host reach its port",
            );
            return;
        }
        Err(_) => {
            r.fail(
                format!("intercept {name} reachable"),
                format!("no answer to a connect within {timeout:?}"),
                "open the control port (36524) from this host to the test host",
            );
            return;
        }
    };
    r.ok(format!("intercept {name} reachable"), "connected");
    let mut est = match client_handshake_timeout(stream, secret, "copier doctor", timeout).await {
        Ok(est) => est,
        Err(e) => {
            r.fail(
                format!("secret accepted by intercept {name}"),
                format!("handshake refused: {e}"),
                "use the same secret file on both hosts (or --no-secret on both)",
            );
            return;
        }
    };
    r.ok(
        format!("secret accepted by intercept {name}"),
        format!("handshake done with {}", est.peer.software),
    );
    let tuples: Vec<FourTuple> = maps
        .iter()
        .enumerate()
        .map(|(k, m)| probe_tuple(m, k as u16))
        .collect();
    if est
        .writer
        .write_message(&Message::Register {
            tuples: tuples.clone(),
        })
        .await
        .is_err()
    {
        r.fail(
            format!("intercept {name} guards the test ports"),
            "the link closed",
            "see the intercept's log",
        );
        return;
    }
    let verdicts = tokio::time::timeout(timeout, async {
        loop {
            match est.reader.read_message().await {
                Ok(Some(Message::Registered { results })) => return Some(results),
                Ok(Some(_)) => continue,
                _ => return None,
            }
        }
    })
    .await
    .ok()
    .flatten();
    let _ = est
        .writer
        .write_message(&Message::Unregister { tuples })
        .await;
    let Some(verdicts) = verdicts else {
        r.fail(
            format!("intercept {name} guards the test ports"),
            "no answer to a probe registration",
            "see the intercept's log",
        );
        return;
    };
    for (m, (_, v)) in maps.iter().zip(verdicts) {
        let item = format!("intercept {name} guards --map {}", m);
        if v.accepted() {
            r.ok(item, "a probe registration was accepted");
        } else if v == common::proto::RegVerdict::ServerNotLocal {
            r.warn(
                item,
                format!("refused (server_not_local): {} is not an address of this intercept's host", m.target.ip()),
                "another intercept must guard that server (--intercept on its host); for a server behind NAT on this \
                 host, start the intercept with --any-server",
            );
        } else {
            r.fail(
                item,
                format!("refused ({}): its responses could not be kept off the network, so nothing is copied", v.as_str()),
                format!("start the intercept with --port {} (and without --ipv4-only for IPv6 targets)", m.target.port()),
            );
        }
    }
    if est.peer.has(common::proto::FEATURE_FLEET) {
        fleet(r, name, &mut est, timeout).await;
    }
    if nets.is_empty() {
        // Nothing to ask about (said once, by `routes::client_nets`).
    } else if est.peer.has(common::proto::FEATURE_ROUTES) {
        routes::ask(r, name, addr.ip(), &mut est, nets, Duration::from_secs(10)).await;
    } else {
        r.warn(
            format!("route back from test host {}", addr.ip()),
            format!("intercept {name} is older and cannot say whether it routes the copied clients back"),
            "run `intercept doctor --client-range CIDR` on the test host, or update the intercept",
        );
    }
    let _ = est.writer.shutdown().await;
}

/// Sends `query` to an intercept and waits, at most `timeout`, for the answer `pick` takes
/// (other messages are skipped): `Err` when the query could not be sent, `Ok(None)` without an
/// answer.
async fn ask<S, T>(
    est: &mut common::proto::io::Established<S>,
    query: &Message,
    timeout: Duration,
    pick: impl Fn(Message) -> Option<T>,
) -> Result<Option<T>, ()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    est.writer.write_message(query).await.map_err(|_| ())?;
    let answer = tokio::time::timeout(timeout, async {
        loop {
            match est.reader.read_message().await {
                Ok(Some(m)) => match pick(m) {
                    Some(t) => return Some(t),
                    None => continue,
                },
                _ => return None,
            }
        }
    })
    .await;
    Ok(answer.ok().flatten())
}

/// Asks the intercept which copiers are connected (`Message::FleetQuery`) and warns when two
/// of them (two instances) share test ports: with one seed and pool they pick the same test
/// tuples for the same clients.
async fn fleet<S>(
    r: &mut Report,
    name: &str,
    est: &mut common::proto::io::Established<S>,
    timeout: Duration,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let item = format!("copiers at intercept {name} have their own test ports");
    let answer = ask(est, &Message::FleetQuery, timeout, |m| match m {
        Message::Fleet { copiers } => Some(copiers),
        _ => None,
    })
    .await;
    let Ok(answer) = answer else {
        r.warn(
            item,
            "the link closed before the intercept said which copiers it has",
            "see the intercept's log",
        );
        return;
    };
    let Some(members) = answer else {
        r.warn(
            item,
            "no answer to the question which copiers are connected",
            "see the intercept's log",
        );
        return;
    };
    match fleet_clashes(&members) {
        (n, clashes) if clashes.is_empty() => r.ok(item, format!("{n} copier(s) connected, no two share test ports")),
        (n, clashes) => r.warn(
            item,
            format!("{n} copiers connected; sharing test ports: {}", clashes.join("; ")),
            "give every copier of a fleet its own `copier --fleet I/N` (I from 0 to N-1); until then the intercept refuses the \
             second copier's tuple (held_by_other) and it moves the copy",
        ),
    }
}

/// The copiers (distinct instances; a doctor's or an older copier's connection, instance 0,
/// left out) among `members`, and every pair of them whose test ports overlap, described.
fn fleet_clashes(members: &[common::proto::FleetMember]) -> (usize, Vec<String>) {
    let mut seen: Vec<common::proto::FleetMember> = Vec::new();
    for m in members.iter().filter(|m| m.instance != 0) {
        if !seen.iter().any(|o| o.instance == m.instance) {
            seen.push(*m);
        }
    }
    let show = |m: &common::proto::FleetMember| match m.size {
        0 | 1 => format!("{} (no --fleet)", m.addr.ip()),
        _ => format!("{} (--fleet {}/{})", m.addr.ip(), m.index, m.size),
    };
    let mut clashes = Vec::new();
    for (i, a) in seen.iter().enumerate() {
        for b in &seen[i + 1..] {
            if a.shares_ports_with(b) {
                clashes.push(format!("{} and {}", show(a), show(b)));
            }
        }
    }
    (seen.len(), clashes)
}

fn forwarding(r: &mut Report) {
    match doctor::sysctl("net.ipv4.ip_forward").as_deref() {
        Ok("0") => r.ok("ip_forward", "0: answers of the test host that escape the intercept are dropped here"),
        Ok(v) => r.warn(
            "ip_forward",
            format!("{v}: this host routes; a test answer that escaped the intercept would be forwarded toward the clients"),
            "sysctl -w net.ipv4.ip_forward=0 unless this host must route (a Kubernetes node must: then rely on the intercept)",
        ),
        Err(e) => r.warn("ip_forward", e, "check sysctl net.ipv4.ip_forward"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::parse_map;
    use crate::cli::{Args, Command};
    use clap::Parser;

    #[test]
    fn copiers_sharing_test_ports_are_named_and_a_fleet_split_is_not() {
        use common::proto::FleetMember;
        let m = |instance, addr: &str, index, size| FleetMember {
            instance,
            addr: addr.parse().unwrap(),
            index,
            size,
        };
        // Two copiers without --fleet (the setup), and a doctor's connection.
        let (n, c) = fleet_clashes(&[
            m(1, "198.18.1.1:1", 0, 1),
            m(2, "198.18.1.2:2", 0, 1),
            m(0, "198.18.1.1:3", 0, 0),
        ]);
        assert_eq!(n, 2);
        assert_eq!(
            c,
            vec!["198.18.1.1 (no --fleet) and 198.18.1.2 (no --fleet)".to_string()]
        );
        // Two copiers given the same share by mistake, one reconnected (two links, one instance).
        let (n, c) = fleet_clashes(&[
            m(1, "198.18.1.1:1", 1, 3),
            m(1, "198.18.1.1:9", 1, 3),
            m(2, "198.18.1.2:2", 1, 3),
            m(3, "198.18.1.3:2", 2, 3),
        ]);
        assert_eq!((n, c.len()), (3, 1), "{c:?}");
        assert!(c[0].contains("--fleet 1/3"), "{c:?}");
        // A proper split.
        let (n, c) = fleet_clashes(&[m(1, "198.18.1.1:1", 0, 2), m(2, "198.18.1.2:2", 1, 2)]);
        assert_eq!((n, c.len()), (2, 0));
    }

    #[test]
    fn doctor_is_a_subcommand_next_to_the_flat_flags() {
        let a = Args::try_parse_from([
            "copier",
            "doctor",
            "--map",
            "80=198.18.2.2:80",
            "--intercept",
            "198.18.2.2",
            "--no-secret",
        ])
        .unwrap();
        let Some(Command::Doctor(d)) = a.command else {
            panic!("no doctor: {a:?}")
        };
        assert_eq!(
            (d.maps.len(), d.intercepts[0].port, d.mtu, d.ring_block_size),
            (1, 36524, 1500, 256 << 10)
        );
        assert_eq!(d.max_clock_skew, Duration::from_secs(1));
        // the daemon's flags are unchanged and still required without the subcommand
        let a = Args::try_parse_from([
            "copier",
            "--map",
            "80=198.18.2.2:80",
            "--intercept",
            "198.18.2.2",
            "--no-secret",
        ])
        .unwrap();
        assert!(a.command.is_none());
        assert!(Args::try_parse_from(["copier", "--no-secret"]).is_err());
        // the doctor needs what it checks, and does not mix with the daemon's flags
        assert!(Args::try_parse_from(["copier", "doctor", "--no-secret"]).is_err());
        assert!(Args::try_parse_from(["copier", "--map", "80=198.18.2.2:80", "doctor"]).is_err());
    }

    #[test]
    fn the_doctor_takes_every_flag_of_the_copier_with_its_checks() {
        let base = [
            "copier",
            "doctor",
            "--map",
            "80=198.18.2.2:80",
            "--intercept",
            "198.18.2.2",
            "--no-secret",
        ];
        let parse =
            |extra: &[&str]| Args::try_parse_from(base.iter().chain(extra)).map(|a| a.command);
        let Ok(Some(Command::Doctor(d))) = parse(&[
            "--client-ip",
            "198.19.0.0/16",
            "--workers",
            "2",
            "--pace-window",
            "4",
            "--max-clock-skew",
            "2s",
        ]) else {
            panic!("the copier's flags are refused")
        };
        assert_eq!(
            (d.client_ip.len(), d.workers, d.max_clock_skew),
            (1, 2, Duration::from_secs(2))
        );
        let e = parse(&["--mtu", "100"]).unwrap_err().to_string();
        assert!(e.contains("--mtu"), "{e}");
        assert!(parse(&["--no-such-flag"]).is_err());
    }

    #[test]
    fn probes_use_documentation_addresses_of_the_target_family() {
        let m4 = parse_map("80=198.18.2.2:8080").unwrap();
        let m6 = parse_map("80=[fd00::2]:80").unwrap();
        assert_eq!(
            probe_tuple(&m4, 0).client,
            "192.0.2.1:1024".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(probe_tuple(&m4, 0).server, m4.target);
        assert_eq!(
            probe_tuple(&m6, 1).client,
            "[2001:db8::1]:1025".parse::<SocketAddr>().unwrap()
        );
    }
}
