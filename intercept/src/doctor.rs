//! `intercept doctor`: checks, on the test host, everything that makes copying fail silently or
//! lets a response leak, and says what to run to fix each item. Exit status 0 only when copying
//! would work.
//!
//! Owns the checks that are the intercept's: the NFQUEUE rule of each port and family present,
//! first and complete, without `--queue-bypass` (the same check the daemon runs at start,
//! [`crate::rules::check`]); a process bound to the queue; the test service listening; the
//! route back to the client ranges and the reverse-path filter on the way the copies arrive;
//! ip_forward; conntrack; and the clock skew with each copier host. The host probes live in
//! [`common::doctor`], shared with `copier doctor`.

use std::net::IpAddr;
use std::time::Duration;

use common::doctor::{self, Report};

use crate::allow::IpNet;
use crate::rules::{self, QueueTarget, SystemRunner};

/// The intercept's subcommands (next to its flat flags, which run the intercept itself).
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check this test host and say what to fix (exit status 0 only when copying would work).
    ///
    /// Checks the NFQUEUE rules (present, first, complete, no --queue-bypass) and an intercept bound to the queue, the test service listening, the route back to the
    /// client ranges and rp_filter, ip_forward, conntrack, clock skew with the copier hosts.
    /// Prints each item with the command that fixes it; exit status 0 only when copying would
    /// work. Run it while the intercept runs.
    Doctor(DoctorArgs),
}

/// `intercept doctor`: the intercept's flags for what it checks, and what only the operator
/// knows (where the copies come from).
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// A --port of the intercept (repeatable).
    #[arg(long = "port", value_name = "PORT", required = true)]
    pub ports: Vec<u16>,

    /// The intercept's --queue-num.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub queue_num: u16,

    /// The intercept runs with --ipv4-only.
    #[arg(long)]
    pub ipv4_only: bool,

    /// Source addresses of the copies: the real client ranges, or the copier's --client-ip
    /// ranges (repeatable). The test host must route them back.
    #[arg(long, value_name = "CIDR")]
    pub client_range: Vec<IpNet>,

    /// Address of a copier host as seen from here (repeatable): the route back should go
    /// toward it, and its clock is compared.
    #[arg(long, value_name = "ADDR")]
    pub copier: Vec<IpAddr>,

    /// Largest clock difference with a copier host accepted.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = common::units::parse_duration)]
    pub max_clock_skew: Duration,
}

/// The doctor's arguments when the command line is `intercept doctor ...` (exits on a bad one).
pub fn from_matches(m: &clap::ArgMatches) -> Option<DoctorArgs> {
    let (_, sub) = m.subcommand().filter(|(name, _)| *name == "doctor")?;
    Some(<DoctorArgs as clap::FromArgMatches>::from_arg_matches(sub).unwrap_or_else(|e| e.exit()))
}

/// Runs every check; prints the report to stdout; returns the exit status.
pub fn main(a: &DoctorArgs) -> u8 {
    run(a).print("intercept doctor")
}

/// Runs every check.
pub fn run(a: &DoctorArgs) -> Report {
    let mut r = Report::default();
    let wanted = rules::rules_for(&a.ports, QueueTarget::Num(a.queue_num), a.ipv4_only);
    match rules::check(&mut SystemRunner, &wanted) {
        Ok(found) => r.ok(
            "NFQUEUE rule",
            format!("present, first and complete: {}", found.found.join("; ")),
        ),
        Err(e) => {
            // The check's message: a headline, then each problem with the commands that fix it.
            let text = format!("{e:#}");
            let (head, rest) = text.split_once('\n').unwrap_or((&text, ""));
            let fix: Vec<&str> = rest
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            r.fail("NFQUEUE rule", head.trim_end_matches(':'), fix.join("\n"));
        }
    }
    queue_bound(&mut r, a.queue_num);
    for &p in &a.ports {
        if doctor::tcp_listening(p) {
            r.ok(
                format!("test service on port {p}"),
                "listening on this host",
            );
        } else {
            r.fail(
                format!("test service on port {p}"),
                "nothing listens on this port here: copies get resets (or, in a container, its answers pass FORWARD where no NFQUEUE rule sees them)",
                "start the test service on this host, or intercept the port it answers from",
            );
        }
    }
    match doctor::sysctl("net.ipv4.ip_forward").as_deref() {
        Ok("0") => r.ok("ip_forward", "0"),
        Ok(v) => r.warn(
            "ip_forward",
            format!("{v}: answers of a service behind this host (container, VM) are forwarded, and the OUTPUT NFQUEUE rule never sees them"),
            "run the test service in this host's network namespace, or sysctl -w net.ipv4.ip_forward=0",
        ),
        Err(e) => r.warn("ip_forward", e, "check sysctl net.ipv4.ip_forward"),
    }
    let toward_copier: Vec<(IpAddr, String)> = a
        .copier
        .iter()
        .filter_map(|c| match doctor::route_get(*c) {
            Ok(route) => {
                r.ok(format!("route to copier {c}"), format!("dev {}", route.dev));
                Some((*c, route.dev))
            }
            Err(e) => {
                r.fail(
                    format!("route to copier {c}"),
                    format!("none ({e})"),
                    format!("ip route add {c} via <gateway toward the copier host>"),
                );
                None
            }
        })
        .collect();
    for net in &a.client_range {
        route_back(&mut r, net, &toward_copier);
    }
    doctor::check_conntrack(&mut r);
    for c in &a.copier {
        doctor::check_clock(&mut r, "copier host", *c, a.max_clock_skew);
    }
    r
}

/// Is a process bound to the queue (/proc/net/netfilter/nfnetlink_queue lists bound queues)?
fn queue_bound(r: &mut Report, queue: u16) {
    let item = format!("NFQUEUE {queue} bound");
    let text = std::fs::read_to_string("/proc/net/netfilter/nfnetlink_queue").unwrap_or_default();
    let bound = text.lines().any(|l| {
        l.split_whitespace()
            .next()
            .and_then(|q| q.parse::<u16>().ok())
            == Some(queue)
    });
    if bound {
        r.ok(item, "a process reads the queue");
    } else {
        r.fail(
            item,
            "no process reads the queue: the test service's answers are dropped and no copied handshake completes",
            "start the intercept (systemctl start trafficcopy-intercept)",
        );
    }
}

/// Most client ranges one [`common::proto::Message::RouteQuery`] is answered for (each runs
/// `ip route get`); the rest are answered as not checked.
pub const MAX_ROUTE_QUERY: usize = 64;

/// The answer to a copier doctor's `RouteQuery`: the checks of `intercept doctor`'s route back
/// for each range (`route_back`), with `copier` (the asking copier's address as seen here) as
/// the host the copies come from. Runs `ip route get`: call it off the async threads.
pub fn route_checks(nets: &[(IpAddr, u8)], copier: IpAddr) -> Vec<common::proto::RouteCheck> {
    use common::doctor::Status;
    use common::proto::{RouteCheck, RouteStatus};
    let mut toward_copier = Vec::new();
    let mut pre = Report::default();
    match doctor::route_get(copier) {
        Ok(route) => toward_copier.push((copier, route.dev)),
        Err(e) => pre.fail(
            format!("route to copier {copier}"),
            format!("none ({e})"),
            format!("ip route add {copier} via <gateway toward the copier host>"),
        ),
    }
    let mut out = Vec::new();
    for (i, &(ip, prefix)) in nets.iter().enumerate() {
        let mut r = Report {
            findings: pre.findings.clone(),
        };
        match IpNet::new(ip, prefix) {
            None => r.fail(
                format!("route back to {ip}/{prefix}"),
                "not a prefix",
                "ask with a valid range",
            ),
            Some(_) if i >= MAX_ROUTE_QUERY => r.warn(
                format!("route back to {ip}/{prefix}"),
                format!("not checked: at most {MAX_ROUTE_QUERY} ranges per question"),
                "run intercept doctor --client-range on the test host",
            ),
            Some(net) => route_back(&mut r, &net, &toward_copier),
        }
        out.extend(r.findings.into_iter().map(|f| RouteCheck {
            net: (ip, prefix),
            status: match f.status {
                Status::Ok => RouteStatus::Ok,
                Status::Warn => RouteStatus::Warn,
                Status::Fail => RouteStatus::Fail,
            },
            item: f.item,
            detail: f.detail,
            // The copier's address where it is of the range's family.
            fix: match f.fix {
                Some(fix) if ip.is_ipv4() == copier.is_ipv4() => {
                    fix.replace("<the copier host's address>", &copier.to_string())
                }
                fix => fix.unwrap_or_default(),
            },
        }));
    }
    out
}

/// The route back to a client range exists, and the reverse-path filter lets copies in.
fn route_back(r: &mut Report, net: &IpNet, toward_copier: &[(IpAddr, String)]) {
    let probe = first_host(net);
    let item = format!("route back to {net}");
    let route = match doctor::route_get(probe) {
        Ok(route) if !route.local => route,
        Ok(_) => {
            r.fail(
                item,
                "the range is local to this host",
                "give the ranges the copies come from",
            );
            return;
        }
        Err(e) => {
            r.fail(
                item,
                format!("none ({e}): copied SYNs are dropped by the reverse-path filter or answered into nowhere"),
                format!("ip route add {net} via <the copier host's address>"),
            );
            return;
        }
    };
    r.ok(item.clone(), route.to_string());
    for (copier, dev) in toward_copier {
        if route.dev == *dev {
            continue;
        }
        let rp_item = format!("rp_filter on {dev}");
        if probe.is_ipv4() && doctor::rp_filter(dev) == 1 {
            r.fail(
                rp_item,
                format!("strict, and copies from {net} arrive on {dev} (from copier {copier}) while the route back leaves by {}: they are dropped", route.dev),
                format!("ip route replace {net} via {copier}, or sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.{dev}.rp_filter=2"),
            );
        } else {
            r.warn(
                item.clone(),
                format!(
                    "leaves by {}, not toward copier {copier} ({dev})",
                    route.dev
                ),
                format!("ip route replace {net} via {copier}"),
            );
        }
    }
    if probe.is_ipv4() {
        if let Some((_, dev)) = toward_copier.iter().find(|(_, d)| *d == route.dev) {
            r.ok(
                format!("rp_filter on {dev}"),
                format!(
                    "{} with the route back on the same interface",
                    doctor::rp_filter(dev)
                ),
            );
        }
    }
}

/// The first host address of a range (the network address itself for a /32 or /128).
fn first_host(net: &IpNet) -> IpAddr {
    let text = net.to_string();
    let (addr, prefix) = text.split_once('/').unwrap_or((&text, "128"));
    let prefix: u8 = prefix.parse().unwrap_or(128);
    match addr.parse::<IpAddr>().unwrap_or(IpAddr::V4(0.into())) {
        IpAddr::V4(a) if prefix < 31 => IpAddr::V4((u32::from(a) + 1).into()),
        IpAddr::V6(a) if prefix < 127 => IpAddr::V6((u128::from(a) + 1).into()),
        a => a,
    }
}
