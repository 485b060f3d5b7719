//! Host checks shared by `copier doctor` and `intercept doctor` (feature `host`): a [`Report`]
//! of findings (ok, warning, failure, each with the command that fixes it), and the probes both
//! doctors run: sysctls, `ip route get` and `ip -d link show`, listening sockets, conntrack table
//! use, and the clock offset of a peer host measured with an ICMP timestamp request (RFC 792).
//!
//! Invariants: a probe never changes the host (it reads /proc and runs `ip` in its read-only
//! forms; the ICMP probe sends one request per try); the report's exit status is 0 only when no
//! finding is a failure.

use std::fmt::Write as _;
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Checked and right.
    Ok,
    /// Copying works, but the operator should know (a risk, or a check that could not run).
    Warn,
    /// Copying would fail (often silently) until this is fixed.
    Fail,
}

/// One checked item.
#[derive(Debug, Clone)]
pub struct Finding {
    /// Ok, warning or failure.
    pub status: Status,
    /// What was checked, e.g. `route to target 198.18.2.2:80` (stable words tests look for).
    pub item: String,
    /// What was found.
    pub detail: String,
    /// What to run to fix it.
    pub fix: Option<String>,
}

/// The findings of one doctor run, in the order checked.
#[derive(Debug, Default)]
pub struct Report {
    /// Every finding.
    pub findings: Vec<Finding>,
}

impl Report {
    /// Adds a finding.
    pub fn add(
        &mut self,
        status: Status,
        item: impl Into<String>,
        detail: impl Into<String>,
        fix: Option<String>,
    ) {
        self.findings.push(Finding {
            status,
            item: item.into(),
            detail: detail.into(),
            fix,
        });
    }

    /// A right item.
    pub fn ok(&mut self, item: impl Into<String>, detail: impl Into<String>) {
        self.add(Status::Ok, item, detail, None);
    }

    /// A warning, with its fix.
    pub fn warn(
        &mut self,
        item: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.add(Status::Warn, item, detail, Some(fix.into()));
    }

    /// A failure, with its fix.
    pub fn fail(
        &mut self,
        item: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.add(Status::Fail, item, detail, Some(fix.into()));
    }

    /// Findings of a status.
    pub fn count(&self, status: Status) -> usize {
        self.findings.iter().filter(|f| f.status == status).count()
    }

    /// The report as printed: one line per item (`ok`, `WARN`, `FAIL`), the fix indented under
    /// it, and a last line with the verdict.
    pub fn render(&self, who: &str) -> String {
        let mut out = String::new();
        for f in &self.findings {
            let tag = match f.status {
                Status::Ok => "ok  ",
                Status::Warn => "WARN",
                Status::Fail => "FAIL",
            };
            let _ = writeln!(out, "{tag}  {}: {}", f.item, f.detail);
            if let Some(fix) = &f.fix {
                for (i, line) in fix.lines().enumerate() {
                    let lead = if i == 0 { "fix: " } else { "     " };
                    let _ = writeln!(out, "      {lead}{line}");
                }
            }
        }
        let (fails, warns) = (self.count(Status::Fail), self.count(Status::Warn));
        let verdict = if fails == 0 {
            "copying would work"
        } else {
            "copying would NOT work"
        };
        let _ = writeln!(
            out,
            "{who}: {fails} failure(s), {warns} warning(s): {verdict}"
        );
        out
    }

    /// Prints the report (see [`Report::render`]) to stdout and returns the exit status.
    pub fn print(&self, who: &str) -> u8 {
        print!("{}", self.render(who));
        self.exit_code()
    }

    /// 0 when no finding is a failure, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.count(Status::Fail) > 0)
    }
}

/// Reads a sysctl by its dotted name (`net.ipv4.ip_forward`) from /proc/sys.
pub fn sysctl(name: &str) -> Result<String, String> {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    std::fs::read_to_string(&path)
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("cannot read {path}: {e}"))
}

/// The route the kernel picks toward an address (`ip route get`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The next hop, when the destination is not on-link.
    pub gateway: Option<IpAddr>,
    /// The outgoing interface (`lo` for a local address).
    pub dev: String,
    /// The source address the kernel would use.
    pub src: Option<IpAddr>,
    /// The route's own MTU (a route metric), when set.
    pub mtu: Option<u32>,
    /// The destination is an address of this host.
    pub local: bool,
}

/// `dev IFACE` and, when the destination is not on-link, ` via GATEWAY`: how both doctors
/// show a route.
impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "dev {}", self.dev)?;
        if let Some(g) = self.gateway {
            write!(f, " via {g}")?;
        }
        Ok(())
    }
}

/// Parses the first line (and the `cache` line) of `ip route get` output.
pub fn parse_route(text: &str) -> Option<Route> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let after = |key: &str| {
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|i| words.get(i + 1))
            .copied()
    };
    Some(Route {
        gateway: after("via").and_then(|g| g.parse().ok()),
        dev: after("dev")?.to_string(),
        src: after("src").and_then(|s| s.parse().ok()),
        mtu: after("mtu").and_then(|m| m.parse().ok()),
        local: words.first() == Some(&"local"),
    })
}

/// The route toward `ip`, or why there is none (`Network is unreachable`, ...).
pub fn route_get(ip: IpAddr) -> Result<Route, String> {
    let out = Command::new("ip")
        .args(["route", "get", &ip.to_string()])
        .output()
        .map_err(|e| format!("cannot run `ip route get {ip}` (install iproute2): {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err.trim().trim_start_matches("RTNETLINK answers: ");
        return Err(if err.is_empty() {
            "no route".into()
        } else {
            err.to_string()
        });
    }
    parse_route(&stdout).ok_or_else(|| format!("cannot read `ip route get {ip}`: {stdout:?}"))
}

/// What matters of an interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Link {
    /// The interface is administratively up.
    pub up: bool,
    /// Its MTU.
    pub mtu: u32,
    /// The largest segment GRO may build on it (the largest of `gro_max_size` and
    /// `gro_ipv4_max_size`), when the kernel tells.
    pub gro_max: Option<u32>,
}

/// Parses `ip -d link show dev IF`.
pub fn parse_link(text: &str) -> Option<Link> {
    let first = text.lines().next()?;
    let flags = first.split('<').nth(1)?.split('>').next()?;
    let words: Vec<&str> = text.split_whitespace().collect();
    let num = |key: &str| -> Option<u32> {
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|i| words.get(i + 1))
            .and_then(|v| v.parse().ok())
    };
    let gro = [num("gro_max_size"), num("gro_ipv4_max_size")]
        .into_iter()
        .flatten()
        .max();
    Some(Link {
        up: flags.split(',').any(|f| f == "UP"),
        mtu: num("mtu")?,
        gro_max: gro,
    })
}

/// An interface's state, or why it cannot be read (no such interface).
pub fn link(dev: &str) -> Result<Link, String> {
    let out = Command::new("ip")
        .args(["-d", "link", "show", "dev", dev])
        .output()
        .map_err(|e| format!("cannot run `ip link` (install iproute2): {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    parse_link(&text).ok_or_else(|| format!("cannot read `ip -d link show dev {dev}`: {text:?}"))
}

/// Every interface of this host (from /sys/class/net), loopback excluded.
pub fn interfaces() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.retain(|n| n != "lo");
    v.sort();
    v
}

/// Whether a TCP socket listens on `port` in this network namespace (any address, IPv4 or
/// IPv6), from /proc/net/tcp and /proc/net/tcp6.
pub fn tcp_listening(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f)
            .map(|t| listening_in(&t, port))
            .unwrap_or(false)
    })
}

/// Whether a /proc/net/tcp{,6} text has a listener (state 0A) on `port`.
pub fn listening_in(text: &str, port: u16) -> bool {
    text.lines().skip(1).any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        let local_port = w
            .get(1)
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| u16::from_str_radix(p, 16).ok());
        w.get(3) == Some(&"0A") && local_port == Some(port)
    })
}

/// The conntrack table: fails when it is nearly full (new connections, copies and production
/// alike, are dropped when it is full), warns from three quarters.
pub fn check_conntrack(r: &mut Report) {
    let (count, max) = match (
        sysctl("net.netfilter.nf_conntrack_count"),
        sysctl("net.netfilter.nf_conntrack_max"),
    ) {
        (Ok(c), Ok(m)) => (c.parse::<u64>().unwrap_or(0), m.parse::<u64>().unwrap_or(0)),
        _ => {
            r.ok(
                "conntrack",
                "not loaded (nf_conntrack): no connection table to fill",
            );
            return;
        }
    };
    let item = "conntrack";
    let detail = format!("{count} of {max} entries in use");
    let fix = format!(
        "raise the table (sysctl -w net.netfilter.nf_conntrack_max={}) or exempt the copied traffic from tracking \
         (iptables -t raw -I PREROUTING -p tcp --dport PORT -j CT --notrack, and the same in OUTPUT)",
        (max.max(65536)) * 2
    );
    if max > 0 && count * 10 >= max * 9 {
        r.fail(
            item,
            format!("{detail}: the table is (nearly) full and new connections are dropped"),
            fix,
        );
    } else if max > 0 && count * 4 >= max * 3 {
        r.warn(
            item,
            format!("{detail}: more than three quarters full"),
            fix,
        );
    } else {
        r.ok(item, detail);
    }
}

/// Milliseconds since midnight UTC, as ICMP timestamps count.
fn ms_of_day(t: SystemTime) -> u32 {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    (d.as_millis() % 86_400_000) as u32
}

/// Clock offset (peer minus local) from an ICMP timestamp exchange: `orig` when sent, the
/// peer's `recv` and `xmit`, and `back` when the reply arrived (all ms of day); wraps at
/// midnight.
pub fn icmp_offset_ms(orig: u32, recv: u32, xmit: u32, back: u32) -> i64 {
    let wrap = |d: i64| {
        let day = 86_400_000i64;
        let d = d.rem_euclid(day);
        if d > day / 2 {
            d - day
        } else {
            d
        }
    };
    (wrap(i64::from(recv) - i64::from(orig)) + wrap(i64::from(xmit) - i64::from(back))) / 2
}

/// Measures a peer's clock offset (peer minus local, ms) with ICMP timestamp requests (needs
/// CAP_NET_RAW); keeps the answer with the shortest round trip of three.
pub fn clock_offset(peer: Ipv4Addr, timeout: Duration) -> Result<i64, String> {
    use socket2::{Domain, Protocol, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))
        .map_err(|e| format!("cannot open an ICMP raw socket (needs CAP_NET_RAW): {e}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(|e| e.to_string())?;
    let id = (std::process::id() & 0xffff) as u16;
    let dest = SocketAddr::new(IpAddr::V4(peer), 0).into();
    let deadline = Instant::now() + timeout;
    let mut best: Option<(Duration, i64)> = None;
    for seq in 1..=3u16 {
        let orig = ms_of_day(SystemTime::now());
        let mut req = [0u8; 20];
        req[0] = 13;
        req[4..6].copy_from_slice(&id.to_be_bytes());
        req[6..8].copy_from_slice(&seq.to_be_bytes());
        req[8..12].copy_from_slice(&orig.to_be_bytes());
        let c = crate::checksum::finish(crate::checksum::sum(&req, 0));
        req[2..4].copy_from_slice(&c.to_be_bytes());
        let sent = Instant::now();
        sock.send_to(&req, &dest)
            .map_err(|e| format!("sending an ICMP timestamp request to {peer}: {e}"))?;
        let mut buf = [0u8; 1500];
        while Instant::now() < deadline.min(sent + Duration::from_secs(1)) {
            let n = match (&sock).read(&mut buf) {
                Ok(n) => n,
                Err(_) => continue,
            };
            let back = ms_of_day(SystemTime::now());
            let ihl = usize::from(buf[0] & 0x0f) * 4;
            let Some(icmp) = buf.get(ihl..n) else {
                continue;
            };
            if icmp.len() < 20
                || icmp[0] != 14
                || icmp[4..6] != id.to_be_bytes()
                || icmp[6..8] != seq.to_be_bytes()
            {
                continue;
            }
            if buf[12..16] != peer.octets() {
                continue;
            }
            let be = |i: usize| {
                u32::from_be_bytes([icmp[i], icmp[i + 1], icmp[i + 2], icmp[i + 3]]) & 0x7fff_ffff
            };
            let off = icmp_offset_ms(orig, be(12), be(16), back);
            let rtt = sent.elapsed();
            if best.is_none_or(|(b, _)| rtt < b) {
                best = Some((rtt, off));
            }
            break;
        }
    }
    best.map(|(_, off)| off)
        .ok_or_else(|| format!("no ICMP timestamp reply from {peer} (a firewall may drop them)"))
}

/// Checks the clock offset to a peer host against `max`: fails beyond it, warns when it
/// cannot be measured (IPv6, or the peer does not answer ICMP timestamp requests).
pub fn check_clock(r: &mut Report, what: &str, peer: IpAddr, max: Duration) {
    let item = format!("clock skew with {what} {peer}");
    let fix = "synchronise both clocks (chrony or systemd-timesyncd: timedatectl set-ntp true; timedatectl timesync-status)";
    let IpAddr::V4(v4) = peer else {
        r.warn(
            item,
            "not measured over IPv6 (ICMP timestamps are IPv4 only)",
            fix,
        );
        return;
    };
    match clock_offset(v4, Duration::from_secs(3)) {
        Ok(ms) if ms.unsigned_abs() > max.as_millis() as u64 => r.fail(
            item,
            format!(
                "{what}'s clock is {ms:+} ms off this host's (at most {} ms)",
                max.as_millis()
            ),
            fix,
        ),
        Ok(ms) => r.ok(item, format!("{ms:+} ms")),
        Err(e) => r.warn(item, format!("not measured: {e}"), fix),
    }
}

/// The reverse-path filter mode that applies to packets arriving on `dev`: the larger of
/// `all` and the interface's own setting (0 off, 1 strict, 2 loose).
pub fn rp_filter(dev: &str) -> u8 {
    let get = |n: &str| {
        sysctl(&format!("net.ipv4.conf.{n}.rp_filter"))
            .ok()
            .and_then(|v| v.parse::<u8>().ok())
            .unwrap_or(0)
    };
    get("all").max(get(dev))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_parse() {
        let r = parse_route(
            "198.19.0.1 via 198.18.2.1 dev to-online src 198.18.2.2 uid 0 \n    cache \n",
        )
        .unwrap();
        assert_eq!(r.gateway, Some("198.18.2.1".parse().unwrap()));
        assert_eq!((r.dev.as_str(), r.local, r.mtu), ("to-online", false, None));
        let r = parse_route("198.18.2.2 dev to-test src 198.18.2.1 uid 0 \n    cache mtu 1400 \n")
            .unwrap();
        assert_eq!((r.gateway, r.mtu), (None, Some(1400)));
        let r = parse_route(
            "local 198.18.2.1 dev lo table local src 198.18.2.1 uid 0 \n    cache <local> \n",
        )
        .unwrap();
        assert!(r.local && r.dev == "lo");
        assert!(parse_route("garbage").is_none());
    }

    #[test]
    fn links_parse() {
        let text = "5: to-test@if4: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT group default qlen 1000\n    link/ether 8a:00:00:00:00:01 brd ff:ff:ff:ff:ff:ff link-netns x promiscuity 0 allmulti 0 minmtu 68 maxmtu 65535 \n    veth addrgenmode eui64 numtxqueues 2 numrxqueues 2 gso_max_size 65536 gso_max_segs 65535 tso_max_size 524280 tso_max_segs 65535 gro_max_size 65536 gso_ipv4_max_size 65536 gro_ipv4_max_size 131072\n";
        let l = parse_link(text).unwrap();
        assert_eq!(
            l,
            Link {
                up: true,
                mtu: 1500,
                gro_max: Some(131072)
            }
        );
        let down =
            parse_link("3: eth1: <BROADCAST,MULTICAST> mtu 9000 qdisc noop state DOWN\n").unwrap();
        assert_eq!(
            down,
            Link {
                up: false,
                mtu: 9000,
                gro_max: None
            }
        );
    }

    #[test]
    fn listeners_parse() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n";
        assert!(listening_in(text, 80));
        assert!(
            !listening_in(text, 8080),
            "an established socket is not a listener"
        );
        assert!(!listening_in(text, 443));
    }

    #[test]
    fn icmp_offsets() {
        // the peer is 5 s ahead, 10 ms each way
        assert_eq!(icmp_offset_ms(1000, 6010, 6010, 1020), 5000);
        assert_eq!(icmp_offset_ms(1000, 1010, 1010, 1020), 0);
        // across midnight: sent at 23:59:59.990, the peer already past midnight
        assert_eq!(
            icmp_offset_ms(86_399_990, 4_000, 4_000, 86_399_999 + 1),
            4_005
        );
        assert_eq!(icmp_offset_ms(4_000, 86_399_000, 86_399_000, 4_010), -5_005);
    }

    #[test]
    fn report_renders_and_exits() {
        let mut r = Report::default();
        r.ok("a", "fine");
        r.warn("b", "hmm", "do x");
        assert_eq!(r.exit_code(), 0);
        r.fail("c thing", "broken", "run y\nthen z");
        let text = r.render("test doctor");
        assert!(
            text.contains("FAIL  c thing: broken\n      fix: run y\n           then z\n"),
            "{text}"
        );
        assert!(
            text.ends_with("test doctor: 1 failure(s), 1 warning(s): copying would NOT work\n"),
            "{text}"
        );
        assert_eq!(r.exit_code(), 1);
    }
}
