//! Warnings about refused registrations, rate-limited: a copier that registers tuples the
//! intercept cannot guard (a wrong `--map` port, IPv6 sessions with `--ipv4-only`, too many
//! sessions) would otherwise write one log line per session.
//!
//! [`RefusalLog`] is sans-IO (it decides, with `now` passed in, whether a line may be written
//! and how many were left out since the last one): [`RefusalLog::consider`] returns the
//! [`Warning`] whose line the control connection logs.
//! The counts per reason are the router's (`intercept_registrations_refused_total{reason}`).

use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::proto::RegVerdict;

use crate::router::Guard;

/// Least time between two warnings.
pub const INTERVAL: Duration = Duration::from_secs(5);

/// Rate limiter of the refusal warnings.
#[derive(Debug, Default)]
pub struct RefusalLog {
    last: Option<Instant>,
    suppressed: u64,
}

/// One warning to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The line.
    pub text: String,
}

impl RefusalLog {
    /// A limiter that lets the first warning through.
    pub fn new() -> RefusalLog {
        RefusalLog::default()
    }

    /// Consider one Register answer; returns the warning to write, if any (at most one per
    /// [`INTERVAL`]; it names the first refused tuple and counts the others, including those
    /// left out since the previous warning).
    pub fn consider(
        &mut self,
        now: Instant,
        copier: &str,
        guard: &Guard,
        results: &[(FourTuple, RegVerdict)],
    ) -> Option<Warning> {
        let mut refused = results.iter().filter(|(_, v)| !v.accepted());
        let (t, v) = refused.next()?;
        let others = refused.count() as u64;
        if self
            .last
            .is_some_and(|l| now.saturating_duration_since(l) < INTERVAL)
        {
            self.suppressed += 1 + others;
            return None;
        }
        self.last = Some(now);
        let left_out = std::mem::take(&mut self.suppressed) + others;
        let why = match v {
            RegVerdict::PortNotGuarded => format!(
                "its server port {} is not guarded (this intercept guards {guard})",
                t.server.port()
            ),
            RegVerdict::FamilyNotGuarded => {
                format!("its IP family has no NFQUEUE rule (this intercept guards {guard})")
            }
            RegVerdict::LimitReached => {
                "the copier holds as many registrations as --max-registrations allows".to_string()
            }
            RegVerdict::HeldByOther => "another live copier holds that test tuple (copiers of one fleet need \
                 their own `copier --fleet I/N`); the copier moves its copy to another one"
                .to_string(),
            RegVerdict::ServerNotLocal => format!(
                "its server {} is not an address of this host: another intercept guards it (the copier waits for that one's verdict)",
                t.server.ip()
            ),
            _ => format!("refused ({})", v.as_str()),
        };
        let keep = match v {
            RegVerdict::HeldByOther | RegVerdict::ServerNotLocal => "",
            _ => "; its responses would not be kept off the network",
        };
        let more = if left_out > 0 {
            format!(
                "; {left_out} more refusal(s) not logged (see intercept_registrations_refused_total)"
            )
        } else {
            String::new()
        };
        Some(Warning {
            text: format!(
                "refused the registration of {} -> {} by {copier}: {why}{keep}{more}",
                t.client, t.server
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(port: u16) -> FourTuple {
        FourTuple::new(
            format!("198.19.0.1:{port}").parse().unwrap(),
            "198.18.2.2:80".parse().unwrap(),
        )
    }

    #[test]
    fn one_line_per_interval_naming_copier_tuple_and_ports() {
        let t0 = Instant::now();
        let guard = Guard {
            ports: Some(vec![8080]),
            ipv4: true,
            ipv6: false,
        };
        let mut l = RefusalLog::new();
        let bad = [
            (t(1), RegVerdict::PortNotGuarded),
            (t(2), RegVerdict::PortNotGuarded),
        ];
        assert_eq!(
            l.consider(t0, "c", &guard, &[(t(9), RegVerdict::Accepted)]),
            None
        );
        let w = l
            .consider(t0, "198.18.2.1 (copier#1)", &guard, &bad)
            .unwrap();
        assert!(
            w.text.contains("198.19.0.1:1 -> 198.18.2.2:80"),
            "{}",
            w.text
        );
        assert!(w.text.contains("copier#1"), "{}", w.text);
        assert!(w.text.contains("port(s) 8080"), "{}", w.text);
        assert!(w.text.contains("1 more"), "{}", w.text);
        for i in 0..1000 {
            assert_eq!(
                l.consider(t0 + Duration::from_millis(i), "c", &guard, &bad),
                None
            );
        }
        let w = l.consider(t0 + INTERVAL, "c", &guard, &bad).unwrap();
        assert!(w.text.contains("2001 more"), "{}", w.text);
    }
}
