//! Which intercept gets which registrations, when the maps spread copies over several test
//! hosts, each with an intercept of its own.
//!
//! Owns: the address of an intercept (`--intercept HOST[:PORT]`, [`InterceptAddr`], which the
//! flags, the control clients and the doctor take from here),
//! `--intercept-for INTERCEPT=TARGET_IP[,TARGET_IP...]` ([`InterceptFor`]) and the plan
//! ([`plan`]) that gives each `--intercept` the set of test server addresses it guards:
//! - an intercept named by `--intercept-for` guards the addresses listed there;
//! - else an intercept whose address is a test server's address guards that server (the usual
//!   setup: `--map 80=T1:80@3,T2:80@1 --intercept T1 --intercept T2`);
//! - the intercepts left (no claim) guard every server no intercept claimed, and when every
//!   intercept claims some, all of them guard the servers left (a dual-stack test host: `--map
//!   80=T4 --map 80=[T6]:80 --intercept T4`); when no intercept claims anything, every intercept
//!   gets every registration, as with one test host.
//!
//! A registration goes only to the intercepts that guard its server (`control::ClientConfig::
//! serves`). The engine counts an intercept's refusal against the intercepts that guard the
//! server ([`serving_counts`]).

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use common::proto::DEFAULT_PORT;

/// Where an intercept listens: `HOST[:PORT]`, port 36524 by default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterceptAddr {
    /// Host name or address (an IPv6 address without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl FromStr for InterceptAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| {
            format!(
                "bad intercept address {s:?}: {why} (expected HOST[:PORT], IPv6 as [ADDR]:PORT)"
            )
        };
        let s = s.trim();
        if s.is_empty() {
            return Err(bad("empty"));
        }
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (h, after) = rest.split_once(']').ok_or_else(|| bad("missing ']'"))?;
            match after {
                "" => (h, None),
                p => (
                    h,
                    Some(
                        p.strip_prefix(':')
                            .ok_or_else(|| bad("expected ':' after ']'"))?,
                    ),
                ),
            }
        } else if s.matches(':').count() > 1 {
            (s, None) // a bare IPv6 address
        } else {
            match s.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (s, None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = match port {
            None => DEFAULT_PORT,
            Some(p) => match p.parse::<u16>() {
                Ok(0) | Err(_) => {
                    return Err(bad(&format!("port {p:?} is not a number from 1 to 65535")))
                }
                Ok(n) => n,
            },
        };
        Ok(InterceptAddr {
            host: host.to_string(),
            port,
        })
    }
}

impl fmt::Display for InterceptAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// `--intercept-for HOST[:PORT]=IP[,IP...]`: the test servers an intercept guards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterceptFor {
    /// The intercept (as given to `--intercept`).
    pub intercept: InterceptAddr,
    /// The test server addresses whose registrations it gets.
    pub targets: Vec<IpAddr>,
}

/// Parse `HOST[:PORT]=IP[,IP...]`.
pub fn parse_intercept_for(s: &str) -> Result<InterceptFor, String> {
    let form =
        "expected INTERCEPT=TARGET_IP[,TARGET_IP...], e.g. 198.18.9.1:36524=198.18.1.2,198.18.1.3";
    let (i, t) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("{s:?}: no '=': {form}"))?;
    let intercept: InterceptAddr = i.parse()?;
    let mut targets = Vec::new();
    for ip in t.split(',') {
        let ip: IpAddr = ip
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("{s:?}: {ip:?} is not an IP address: {form}"))?;
        targets.push(ip);
    }
    Ok(InterceptFor { intercept, targets })
}

/// The address set each intercept guards (`None`: every registration), in `intercepts`' order,
/// for test servers at `targets` (see the module doc).
pub fn plan(
    intercepts: &[InterceptAddr],
    explicit: &[InterceptFor],
    targets: &[IpAddr],
) -> Result<Vec<Option<Vec<IpAddr>>>, String> {
    for e in explicit {
        if !intercepts.contains(&e.intercept) {
            return Err(format!(
                "--intercept-for {}: no --intercept {} is given",
                e.intercept, e.intercept
            ));
        }
        for ip in &e.targets {
            if !targets.contains(ip) {
                return Err(format!(
                    "--intercept-for {}: {ip} is not the address of a --map target",
                    e.intercept
                ));
            }
        }
    }
    let claims: Vec<Option<Vec<IpAddr>>> = intercepts
        .iter()
        .map(|i| {
            if let Some(e) = explicit.iter().find(|e| e.intercept == *i) {
                return Some(e.targets.clone());
            }
            let own: Option<IpAddr> = i.host.parse().ok();
            own.filter(|ip| targets.contains(ip)).map(|ip| vec![ip])
        })
        .collect();
    if claims.iter().all(Option::is_none) {
        return Ok(vec![None; intercepts.len()]);
    }
    let claimed: BTreeSet<IpAddr> = claims.iter().flatten().flatten().copied().collect();
    let rest: Vec<IpAddr> = targets
        .iter()
        .copied()
        .filter(|t| !claimed.contains(t))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    // The servers no intercept claims go to the intercepts that claim nothing, or, when every
    // intercept claims some, to all of them (a dual-stack test host: `--map 80=T4
    // --map 80=[T6]:80 --intercept T4`).
    let every = claims.iter().all(Option::is_some);
    Ok(claims
        .into_iter()
        .map(|c| {
            Some(match c {
                Some(mut list) if every => {
                    list.extend(rest.iter().copied());
                    list
                }
                Some(list) => list,
                None => rest.clone(),
            })
        })
        .collect())
}

/// How many intercepts guard each test server address under `plan` (for the engine's count of
/// refusals); empty when every intercept gets every registration.
#[must_use]
pub fn serving_counts(plan: &[Option<Vec<IpAddr>>], targets: &[IpAddr]) -> Vec<(IpAddr, usize)> {
    if plan.iter().all(Option::is_none) {
        return Vec::new();
    }
    let set: BTreeSet<IpAddr> = targets.iter().copied().collect();
    set.into_iter()
        .map(|t| {
            (
                t,
                plan.iter()
                    .filter(|p| p.as_ref().is_none_or(|l| l.contains(&t)))
                    .count(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(s: &str) -> InterceptAddr {
        s.parse().unwrap()
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn intercept_addresses() {
        let p = |s: &str| s.parse::<InterceptAddr>();
        assert_eq!(
            p("10.0.0.1").unwrap(),
            InterceptAddr {
                host: "10.0.0.1".into(),
                port: 36524
            }
        );
        assert_eq!(
            p("test-host:9000").unwrap(),
            InterceptAddr {
                host: "test-host".into(),
                port: 9000
            }
        );
        assert_eq!(
            p("[2001:db8::1]:9").unwrap(),
            InterceptAddr {
                host: "2001:db8::1".into(),
                port: 9
            }
        );
        assert_eq!(p("[2001:db8::1]").unwrap().port, 36524);
        assert_eq!(
            p("2001:db8::1").unwrap(),
            InterceptAddr {
                host: "2001:db8::1".into(),
                port: 36524
            }
        );
        assert_eq!(p("[2001:db8::1]:9").unwrap().to_string(), "[2001:db8::1]:9");
        for bad in [
            "",
            "host:",
            "host:0",
            "host:70000",
            "host:http",
            ":80",
            "[::1",
            "[::1]x",
        ] {
            let e = p(bad).unwrap_err();
            assert!(e.contains("HOST[:PORT]"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn one_test_host_gets_everything_as_before() {
        let p = plan(&[i("198.18.9.9")], &[], &[ip("198.18.1.2")]).unwrap();
        assert_eq!(p, vec![None]);
        assert!(serving_counts(&p, &[ip("198.18.1.2")]).is_empty());
        let p = plan(&[i("a.example"), i("198.18.9.9")], &[], &[ip("198.18.1.2")]).unwrap();
        assert_eq!(p, vec![None, None]);
    }

    #[test]
    fn each_test_host_its_own_intercept_by_address() {
        let t = [ip("198.18.1.2"), ip("198.18.3.2")];
        let p = plan(&[i("198.18.1.2"), i("198.18.3.2:4000")], &[], &t).unwrap();
        assert_eq!(p, vec![Some(vec![t[0]]), Some(vec![t[1]])]);
        assert_eq!(serving_counts(&p, &t), vec![(t[0], 1), (t[1], 1)]);
    }

    #[test]
    fn explicit_claims_and_the_rest() {
        let t = [ip("198.18.1.2"), ip("198.18.3.2"), ip("198.18.5.2")];
        let f = parse_intercept_for("198.18.9.1:36524=198.18.1.2, 198.18.3.2").unwrap();
        assert_eq!(f.targets, vec![t[0], t[1]]);
        let p = plan(
            &[i("198.18.9.1:36524"), i("198.18.9.2")],
            std::slice::from_ref(&f),
            &t,
        )
        .unwrap();
        assert_eq!(p, vec![Some(vec![t[0], t[1]]), Some(vec![t[2]])]);
        // Nobody left for 198.18.5.2: the intercepts that claim take it too.
        let p = plan(&[i("198.18.9.1:36524")], std::slice::from_ref(&f), &t).unwrap();
        assert_eq!(p, vec![Some(t.to_vec())]);
        let dual = plan(&[i("198.18.1.2")], &[], &[t[0], ip("fd00::2")]).unwrap();
        assert_eq!(dual, vec![Some(vec![t[0], ip("fd00::2")])]);
        let e = plan(&[i("198.18.9.2")], &[f], &t).unwrap_err();
        assert!(e.contains("no --intercept 198.18.9.1:36524"), "{e}");
        assert!(parse_intercept_for("198.18.9.1=host")
            .unwrap_err()
            .contains("not an IP address"));
        assert!(parse_intercept_for("198.18.9.1")
            .unwrap_err()
            .contains("no '='"));
    }
}
