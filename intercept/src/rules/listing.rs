//! What a line of `iptables -S OUTPUT` means for one of our rules: the line split into its
//! matches and target ([`Line`]), how it relates to the rule ([`Class`]: exactly ours, harmless,
//! narrowed, fail-open bypass, or shadowing), and what a whole listing means ([`Finding`]).
//!
//! Pure text analysis: the commands that produce the listing run in the parent module.

use super::{Family, FirewallRule, QueueTarget};

impl FirewallRule {
    /// Whether a line of `iptables -S OUTPUT` is exactly this rule: `-A OUTPUT -p tcp [-m tcp]
    /// --sport PORT -j NFQUEUE` with our queue(s), no other match, no `--queue-bypass`.
    pub fn matches_listing(&self, line: &str) -> bool {
        matches!(self.classify(&Line::parse(line)), Class::Exact)
    }

    fn classify(&self, l: &Line) -> Class {
        if !l.in_output {
            return Class::Irrelevant;
        }
        let port = self.port.to_string();
        let target_ours = l.target.as_deref() == Some("NFQUEUE")
            && l.queue == Some(self.target)
            && !l.bypass
            && l.target_extra.is_empty();
        let plain_ours = l.proto.as_ref() == Some(&(false, "tcp".to_string()))
            && l.sport.as_ref() == Some(&(false, port.clone()))
            && l.other.is_empty();
        if plain_ours && target_ours {
            return Class::Exact;
        }
        if !l.may_match(self.port) {
            return Class::Irrelevant;
        }
        match l.target.as_deref() {
            None => Class::Irrelevant,
            Some(t) if NON_TERMINATING.contains(&t) => Class::Irrelevant,
            Some("NFQUEUE") if l.bypass => Class::Bypass,
            Some("NFQUEUE") if target_ours => Class::Narrowed,
            Some(_) => Class::Shadows,
        }
    }
}

/// Targets after which a packet goes on to the next rule.
pub(super) const NON_TERMINATING: &[&str] = &[
    "LOG",
    "NFLOG",
    "ULOG",
    "MARK",
    "CONNMARK",
    "CLASSIFY",
    "DSCP",
    "TOS",
    "TCPMSS",
    "TRACE",
    "AUDIT",
    "SECMARK",
    "CONNSECMARK",
    "TEE",
    "CHECKSUM",
    "IDLETIMER",
    "LED",
    "RATEEST",
    "SET",
    "HMARK",
    "TTL",
    "HL",
    "ECN",
    "TCPOPTSTRIP",
];

/// How a listing line relates to one of our rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    /// Exactly our rule.
    Exact,
    /// Cannot take our packets (another chain, protocol or port; a non-terminating target).
    Irrelevant,
    /// Queues some of our packets to our queue(s) but has extra matches: harmless before our
    /// rule, not enough on its own.
    Narrowed,
    /// Queues our packets with `--queue-bypass`: they pass while no intercept reads the queue.
    Bypass,
    /// Could take our packets before our rule (ACCEPT, RETURN, DROP, a jump, another queue).
    Shadows,
}

/// A line of `iptables -S`, split into what the check looks at.
#[derive(Debug, Default)]
pub(super) struct Line {
    in_output: bool,
    /// (negated, protocol).
    proto: Option<(bool, String)>,
    /// (negated, port or range).
    sport: Option<(bool, String)>,
    /// (negated, multiport list).
    sports: Option<(bool, String)>,
    /// Every other match option with its values (and `-m` modules other than tcp/multiport).
    other: Vec<String>,
    /// `-j`/`-g` target.
    target: Option<String>,
    queue: Option<QueueTarget>,
    bypass: bool,
    /// Target options other than the queue and bypass.
    target_extra: Vec<String>,
}

impl Line {
    fn parse(line: &str) -> Line {
        let t: Vec<&str> = line.split_whitespace().collect();
        let mut l = Line::default();
        if t.len() < 2 || t[0] != "-A" || t[1] != "OUTPUT" {
            return l;
        }
        l.in_output = true;
        let mut i = 2;
        let mut neg = false;
        let mut in_target = false;
        let mut queue_num = None;
        let mut balance = None;
        while i < t.len() {
            let w = t[i];
            let next = t.get(i + 1).map(|s| s.to_string()).unwrap_or_default();
            if w == "!" {
                neg = true;
                i += 1;
                continue;
            }
            if in_target {
                match w {
                    "--queue-num" => {
                        queue_num = next.parse::<u16>().ok();
                        i += 2;
                    }
                    "--queue-balance" => {
                        balance = next.split_once(':').and_then(|(a, b)| {
                            Some((a.parse::<u16>().ok()?, b.parse::<u16>().ok()?))
                        });
                        i += 2;
                    }
                    "--queue-bypass" => {
                        l.bypass = true;
                        i += 1;
                    }
                    _ => {
                        l.target_extra.push(w.to_string());
                        i += 1;
                    }
                }
                continue;
            }
            match w {
                "-p" | "--protocol" => {
                    l.proto = Some((neg, next));
                    i += 2;
                }
                "--sport" | "--source-port" => {
                    l.sport = Some((neg, next));
                    i += 2;
                }
                "--sports" | "--source-ports" => {
                    l.sports = Some((neg, next));
                    i += 2;
                }
                "-m" | "--match" if next == "tcp" || next == "multiport" => i += 2,
                "-j" | "--jump" | "-g" | "--goto" => {
                    l.target = Some(next);
                    in_target = true;
                    i += 2;
                }
                _ => {
                    let mut opt = if neg { format!("! {w}") } else { w.to_string() };
                    i += 1;
                    while i < t.len() && !t[i].starts_with('-') && t[i] != "!" {
                        opt.push(' ');
                        opt.push_str(t[i]);
                        i += 1;
                    }
                    l.other.push(opt);
                }
            }
            neg = false;
        }
        if l.target.as_deref() == Some("NFQUEUE") {
            l.queue = Some(match (queue_num, balance) {
                (_, Some((a, b))) => QueueTarget::Balance(a, b),
                (Some(n), None) => QueueTarget::Num(n),
                (None, None) => QueueTarget::Num(0),
            });
        }
        l
    }

    /// Whether this line could match a TCP packet from `port` (false only when its protocol or
    /// source-port match clearly excludes it).
    fn may_match(&self, port: u16) -> bool {
        if let Some((neg, p)) = &self.proto {
            let is_tcp = p == "tcp" || p == "6";
            let any = p == "all" || p == "0";
            if (*neg && (is_tcp || any)) || (!*neg && !is_tcp && !any) {
                return false;
            }
        }
        let in_spec = |spec: &str| -> Option<bool> {
            let mut hit = false;
            for part in spec.split(',') {
                let (a, b) = match part.split_once(':') {
                    Some((a, b)) => (
                        if a.is_empty() {
                            0
                        } else {
                            a.parse::<u16>().ok()?
                        },
                        if b.is_empty() {
                            u16::MAX
                        } else {
                            b.parse::<u16>().ok()?
                        },
                    ),
                    None => {
                        let p = part.parse::<u16>().ok()?;
                        (p, p)
                    }
                };
                hit |= (a..=b).contains(&port);
            }
            Some(hit)
        };
        for (neg, spec) in [&self.sport, &self.sports].into_iter().flatten() {
            // An unreadable spec (a service name) might match.
            if let Some(hit) = in_spec(spec) {
                if hit == *neg {
                    return false;
                }
            }
        }
        true
    }
}

/// What a listing of OUTPUT means for one of our rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Finding {
    /// Our exact rule, before anything that could take its packets.
    Effective(String),
    /// No exact rule; maybe a narrowed one (extra matches) that queues only some packets.
    Missing { narrowed: Option<String> },
    /// A line with `--queue-bypass` queues our packets (fail open).
    Bypass(String),
    /// A line before our rule could take its packets.
    Shadowed(String),
}

pub(super) fn analyze(listing: &str, rule: &FirewallRule) -> Finding {
    let mut narrowed = None;
    for line in listing.lines() {
        let l = Line::parse(line);
        match rule.classify(&l) {
            Class::Exact => return Finding::Effective(line.trim().to_string()),
            Class::Irrelevant => {}
            Class::Narrowed => {
                narrowed.get_or_insert_with(|| line.trim().to_string());
            }
            Class::Bypass => return Finding::Bypass(line.trim().to_string()),
            Class::Shadows => return Finding::Shadowed(line.trim().to_string()),
        }
    }
    Finding::Missing { narrowed }
}

/// The command that deletes a listed rule (`-A OUTPUT ...` -> `tool -D OUTPUT ...`).
pub(super) fn delete_command(family: Family, line: &str) -> String {
    let spec = line.trim().strip_prefix("-A ").unwrap_or(line.trim());
    format!("{} -D {spec}", family.tool())
}
