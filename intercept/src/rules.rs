//! The iptables/ip6tables rules that hand the test service's responses to NFQUEUE:
//! `OUTPUT -p tcp --sport PORT -j NFQUEUE --queue-num N` (or `--queue-balance A:B`).
//!
//! Either the intercept installs them (`--install-rules`: [`install`] returns an [`Installed`]
//! guard that removes exactly the rules it added when asked, and keeps them (fail closed) when
//! dropped without a decision, e.g. on a panic), or it checks that equivalent rules exist and
//! take effect ([`check`]) and otherwise fails with the exact commands to run. Native nft `queue` rules do not work on these kernels
//! (see `shared/LAB.md`), so everything goes through the `iptables` commands. The commands are
//! run through a [`Runner`] so the logic can be tested without touching the firewall.

use std::fmt;
use std::process::Command;

use anyhow::{bail, Result};

/// IPv4 (`iptables`) or IPv6 (`ip6tables`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `iptables`.
    V4,
    /// `ip6tables`.
    V6,
}

impl Family {
    /// The command for this family.
    pub fn tool(self) -> &'static str {
        match self {
            Family::V4 => "iptables",
            Family::V6 => "ip6tables",
        }
    }
}

/// Which NFQUEUE queue(s) the rule sends to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueTarget {
    /// `--queue-num N`.
    Num(u16),
    /// `--queue-balance A:B` (inclusive).
    Balance(u16, u16),
}

impl QueueTarget {
    /// The queue numbers covered.
    pub fn queues(self) -> Vec<u16> {
        match self {
            QueueTarget::Num(n) => vec![n],
            QueueTarget::Balance(a, b) => (a..=b).collect(),
        }
    }

    fn args(self) -> Vec<String> {
        match self {
            QueueTarget::Num(n) => vec!["--queue-num".into(), n.to_string()],
            QueueTarget::Balance(a, b) => vec!["--queue-balance".into(), format!("{a}:{b}")],
        }
    }
}

/// One rule of one family for one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// iptables or ip6tables.
    pub family: Family,
    /// The test service's port (`--sport`).
    pub port: u16,
    /// The queue(s).
    pub target: QueueTarget,
}

impl Rule {
    /// The rule specification after the chain name.
    pub fn spec(&self) -> Vec<String> {
        let mut v: Vec<String> = [
            "-p",
            "tcp",
            "--sport",
            &self.port.to_string(),
            "-j",
            "NFQUEUE",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.extend(self.target.args());
        v
    }

    /// Arguments for `action` (`-I`, `-C`, `-D`) on the OUTPUT chain.
    pub fn args(&self, action: &str) -> Vec<String> {
        let mut v = vec![action.to_string(), "OUTPUT".to_string()];
        v.extend(self.spec());
        v
    }

    /// The whole command line, for messages.
    pub fn command(&self, action: &str) -> String {
        format!("{} {}", self.family.tool(), self.args(action).join(" "))
    }

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
const NON_TERMINATING: &[&str] = &[
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
enum Class {
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
struct Line {
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

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} OUTPUT {}", self.family.tool(), self.spec().join(" "))
    }
}

/// The rules for these ports, IPv4 and (unless `ipv4_only`) IPv6.
pub fn rules_for(ports: &[u16], target: QueueTarget, ipv4_only: bool) -> Vec<Rule> {
    let mut v = Vec::new();
    for &port in ports {
        v.push(Rule {
            family: Family::V4,
            port,
            target,
        });
        if !ipv4_only {
            v.push(Rule {
                family: Family::V6,
                port,
                target,
            });
        }
    }
    v
}

/// Result of running one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// Exit status was 0.
    pub ok: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error (or why the command could not start).
    pub stderr: String,
}

/// Runs firewall commands.
pub trait Runner {
    /// Run `tool args...`.
    fn run(&mut self, tool: &str, args: &[String]) -> Ran;
}

/// Runs the real commands.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemRunner;

impl Runner for SystemRunner {
    fn run(&mut self, tool: &str, args: &[String]) -> Ran {
        match Command::new(tool).args(args).output() {
            Ok(o) => Ran {
                ok: o.status.success(),
                stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&o.stderr).trim().to_string(),
            },
            Err(e) => Ran {
                ok: false,
                stdout: String::new(),
                stderr: format!("cannot run {tool}: {e}"),
            },
        }
    }
}

/// Rules this process added; removes them on [`remove`](Installed::remove) or drop.
#[derive(Debug)]
pub struct Installed<R: Runner> {
    runner: R,
    rules: Vec<Rule>,
}

impl<R: Runner> Installed<R> {
    /// The rules still installed by us.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Remove every rule we added (newest first); returns one line per rule saying what
    /// happened, for the operator.
    pub fn remove(&mut self) -> Vec<String> {
        let mut report = Vec::new();
        while let Some(rule) = self.rules.pop() {
            let r = self.runner.run(rule.family.tool(), &rule.args("-D"));
            if r.ok {
                report.push(format!("removed: {rule}"));
            } else {
                report.push(format!(
                    "could NOT remove {rule}: {}; remove it by hand: {}",
                    r.stderr,
                    rule.command("-D")
                ));
            }
        }
        report
    }
}

impl<R: Runner> Installed<R> {
    /// Leave every rule in place (fail closed: while no intercept reads the queue, the kernel
    /// drops what the rules queue); returns one line per rule saying so, with the command
    /// that removes it.
    pub fn keep(&mut self) -> Vec<String> {
        std::mem::take(&mut self.rules)
            .into_iter()
            .map(|rule| {
                format!(
                    "left in place: {rule}; remove it by hand: {}",
                    rule.command("-D")
                )
            })
            .collect()
    }
}

/// Fail closed: a guard dropped without a decision (a panic unwinding, an early return) leaves
/// the rules in place and says so; only [`remove`](Installed::remove) takes them away.
impl<R: Runner> Drop for Installed<R> {
    fn drop(&mut self) {
        for line in self.keep() {
            eprintln!("intercept: {line}");
        }
    }
}

/// What a listing of OUTPUT means for one of our rules.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Finding {
    /// Our exact rule, before anything that could take its packets.
    Effective(String),
    /// No exact rule; maybe a narrowed one (extra matches) that queues only some packets.
    Missing { narrowed: Option<String> },
    /// A line with `--queue-bypass` queues our packets (fail open).
    Bypass(String),
    /// A line before our rule could take its packets.
    Shadowed(String),
}

fn analyze(listing: &str, rule: &Rule) -> Finding {
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
fn delete_command(family: Family, line: &str) -> String {
    let spec = line.trim().strip_prefix("-A ").unwrap_or(line.trim());
    format!("{} -D {spec}", family.tool())
}

fn list(runner: &mut impl Runner, family: Family) -> Result<String> {
    let r = runner.run(family.tool(), &["-S".into(), "OUTPUT".into()]);
    if !r.ok {
        bail!(
            "cannot list the OUTPUT chain with `{} -S OUTPUT`: {}",
            family.tool(),
            r.stderr
        );
    }
    Ok(r.stdout)
}

/// Insert each rule at the top of OUTPUT. A rule that exists already (`-C`), typically left in
/// place by an earlier run that stopped while copied sessions were open, is adopted instead of
/// added twice, unless a rule before it could take its packets (then ours is inserted at the
/// top anyway); adopted rules are removed at exit like added ones. A rule for our port with
/// `--queue-bypass` is an error (it fails open whenever no intercept runs). On failure, the
/// rules already added are removed again and the error names the command that failed.
pub fn install<R: Runner>(runner: R, rules: &[Rule]) -> Result<Installed<R>> {
    let mut guard = Installed {
        runner,
        rules: Vec::new(),
    };
    let mut listings: Vec<(Family, String)> = Vec::new();
    for rule in rules {
        if !listings.iter().any(|(f, _)| *f == rule.family) {
            let text = match list(&mut guard.runner, rule.family) {
                Ok(t) => t,
                Err(e) => {
                    guard.remove();
                    return Err(e);
                }
            };
            listings.push((rule.family, text));
        }
        let listing = &listings
            .iter()
            .find(|(f, _)| *f == rule.family)
            .expect("listed")
            .1;
        let finding = analyze(listing, rule);
        if let Finding::Bypass(line) = &finding {
            let undo = guard.remove();
            bail!(
                "{}: `{line}` queues the responses of port {} with --queue-bypass, so they pass whenever no \
                 intercept reads the queue (fail open); not adopting it. Remove it: {}{}",
                rule.family.tool(),
                rule.port,
                delete_command(rule.family, line),
                if undo.is_empty() { String::new() } else { format!("\n{}", undo.join("\n")) }
            );
        }
        let shadowed = matches!(finding, Finding::Shadowed(_));
        if !shadowed && guard.runner.run(rule.family.tool(), &rule.args("-C")).ok {
            tracing::info!("adopted existing firewall rule: {rule}");
            guard.rules.push(*rule);
            continue;
        }
        if let Finding::Shadowed(line) = &finding {
            tracing::warn!(
                "{}: `{line}` comes before any NFQUEUE rule for port {} and could take its responses; inserting ours at the top",
                rule.family.tool(),
                rule.port
            );
        }
        let r = guard.runner.run(rule.family.tool(), &rule.args("-I"));
        if !r.ok {
            let undo = guard.remove();
            let undo = if undo.is_empty() {
                String::new()
            } else {
                format!("\n{}", undo.join("\n"))
            };
            bail!("`{}` failed: {}{undo}", rule.command("-I"), r.stderr);
        }
        guard.rules.push(*rule);
    }
    Ok(guard)
}

/// What [`check`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Listing lines that satisfy our rules (left in place at exit).
    pub found: Vec<String>,
    /// Things the operator should know (e.g. a narrowed NFQUEUE rule before ours).
    pub warnings: Vec<String>,
}

/// Check, per rule (port and family), that OUTPUT holds exactly that rule (`-p tcp [-m tcp]
/// --sport PORT -j NFQUEUE` with our queue(s), no other match, no `--queue-bypass`) before any
/// rule that could take the same packets (ACCEPT, RETURN, DROP/REJECT, a jump, another queue;
/// a rule for another protocol or source port cannot). Otherwise fail, naming each offending
/// line and the exact commands that fix it (or the advice to use `--install-rules`).
pub fn check<R: Runner>(runner: &mut R, rules: &[Rule]) -> Result<CheckReport> {
    let mut report = CheckReport::default();
    let mut problems = Vec::new();
    let mut listings: Vec<(Family, String)> = Vec::new();
    for rule in rules {
        if !listings.iter().any(|(f, _)| *f == rule.family) {
            let text = list(runner, rule.family)?;
            listings.push((rule.family, text));
        }
        let listing = &listings
            .iter()
            .find(|(f, _)| *f == rule.family)
            .expect("listed")
            .1;
        let tool = rule.family.tool();
        match analyze(listing, rule) {
            Finding::Effective(line) => report.found.push(format!("{tool}: {line}")),
            Finding::Missing { narrowed: None } => problems.push(format!(
                "no NFQUEUE rule for port {} ({tool}). Run:\n    {}",
                rule.port,
                rule.command("-I")
            )),
            Finding::Missing {
                narrowed: Some(line),
            } => problems.push(format!(
                "{tool}: `{line}` queues only some responses of port {} (extra matches narrow it); the others \
                 would leave this host. Run:\n    {}\n    {}",
                rule.port,
                delete_command(rule.family, &line),
                rule.command("-I")
            )),
            Finding::Bypass(line) => problems.push(format!(
                "{tool}: `{line}` has --queue-bypass: while no intercept reads the queue, the responses of port {} \
                 pass (fail open). Run:\n    {}\n    {}",
                rule.port,
                delete_command(rule.family, &line),
                rule.command("-I")
            )),
            Finding::Shadowed(line) => problems.push(format!(
                "{tool}: `{line}` comes before the NFQUEUE rule for port {} and could take its responses first. \
                 Put the NFQUEUE rule at the top:\n    {}",
                rule.port,
                rule.command("-I")
            )),
        }
    }
    if !problems.is_empty() {
        bail!(
            "the firewall rules do not send every response of the test service to this intercept:\n  {}\n\
             or start the intercept with --install-rules to have it add (and later remove) them",
            problems.join("\n  ")
        );
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records commands; answers from a script.
    #[derive(Debug, Default)]
    struct Fake {
        log: Vec<String>,
        listing: String,
        fail_on: Option<String>,
        /// Rules that `-C` finds (as `-C` commands).
        existing: Vec<String>,
    }

    impl Runner for &mut Fake {
        fn run(&mut self, tool: &str, args: &[String]) -> Ran {
            let cmd = format!("{tool} {}", args.join(" "));
            self.log.push(cmd.clone());
            if self.fail_on.as_deref().is_some_and(|f| cmd.contains(f)) {
                return Ran {
                    ok: false,
                    stdout: String::new(),
                    stderr: "boom".into(),
                };
            }
            if args.first().map(String::as_str) == Some("-C") {
                return Ran {
                    ok: self.existing.contains(&cmd),
                    stdout: String::new(),
                    stderr: String::new(),
                };
            }
            if args.first().map(String::as_str) == Some("-S") {
                return Ran {
                    ok: true,
                    stdout: self.listing.clone(),
                    stderr: String::new(),
                };
            }
            Ran {
                ok: true,
                stdout: String::new(),
                stderr: String::new(),
            }
        }
    }

    #[test]
    fn commands() {
        let r = rules_for(&[80, 443], QueueTarget::Num(3), false);
        assert_eq!(r.len(), 4);
        assert_eq!(
            r[0].command("-I"),
            "iptables -I OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 3"
        );
        assert_eq!(
            r[1].command("-D"),
            "ip6tables -D OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 3"
        );
        let b = rules_for(&[80], QueueTarget::Balance(0, 3), true);
        assert_eq!(b.len(), 1);
        assert_eq!(
            b[0].to_string(),
            "iptables OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-balance 0:3"
        );
        assert_eq!(QueueTarget::Balance(2, 4).queues(), vec![2, 3, 4]);
    }

    #[test]
    fn listing_match() {
        let r = Rule {
            family: Family::V4,
            port: 80,
            target: QueueTarget::Num(0),
        };
        assert!(r.matches_listing("-A OUTPUT -p tcp -m tcp --sport 80 -j NFQUEUE --queue-num 0"));
        assert!(r.matches_listing("-A OUTPUT -p tcp -m tcp --sport 80 -j NFQUEUE"));
        // Narrowed or failing open: not our rule (it used to be accepted).
        assert!(!r.matches_listing(
            "-A OUTPUT -s 198.18.2.2/32 -p tcp -m tcp --sport 80 -j NFQUEUE --queue-bypass"
        ));
        assert!(!r.matches_listing("-A OUTPUT -p tcp -m tcp --sport 80 -j NFQUEUE --queue-bypass"));
        assert!(
            !r.matches_listing("-A OUTPUT -d 198.18.1.2/32 -p tcp -m tcp --sport 80 -j NFQUEUE")
        );
        assert!(!r.matches_listing("-A OUTPUT -o eth0 -p tcp -m tcp --sport 80 -j NFQUEUE"));
        assert!(!r.matches_listing(
            "-A OUTPUT -p tcp -m mark --mark 0x1 -m tcp --sport 80 -j NFQUEUE --queue-num 0"
        ));
        assert!(!r.matches_listing("-A OUTPUT -p tcp -m tcp --sport 8080 -j NFQUEUE --queue-num 0"));
        assert!(!r.matches_listing("-A OUTPUT -p tcp -m tcp --sport 80 -j NFQUEUE --queue-num 1"));
        assert!(!r.matches_listing("-A OUTPUT -p tcp -m tcp ! --sport 80 -j NFQUEUE --queue-num 0"));
        assert!(!r.matches_listing("-A INPUT -p tcp -m tcp --sport 80 -j NFQUEUE --queue-num 0"));
        assert!(!r.matches_listing("-A OUTPUT -p tcp -m tcp --sport 80 -j ACCEPT"));
        assert!(!r.matches_listing("-P OUTPUT ACCEPT"));
        let b = Rule {
            family: Family::V4,
            port: 80,
            target: QueueTarget::Balance(0, 1),
        };
        assert!(
            b.matches_listing("-A OUTPUT -p tcp -m tcp --sport 80 -j NFQUEUE --queue-balance 0:1")
        );
        assert!(!b.matches_listing("-A OUTPUT -p tcp -m tcp --sport 80 -j NFQUEUE --queue-num 0"));
    }

    #[test]
    fn install_then_remove_exactly_those() {
        let mut fake = Fake::default();
        let rules = rules_for(&[80], QueueTarget::Num(0), false);
        {
            let mut g = install(&mut fake, &rules).unwrap();
            assert_eq!(g.rules().len(), 2);
            let report = g.remove();
            assert_eq!(report.len(), 2);
            assert!(report[0].starts_with("removed: ip6tables"), "{report:?}");
        }
        // (the read-only listings, `-S OUTPUT`, are left out: they change nothing)
        assert_eq!(
            changes(&fake.log),
            vec![
                "iptables -C OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0",
                "iptables -I OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0",
                "ip6tables -C OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0",
                "ip6tables -I OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0",
                "ip6tables -D OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0",
                "iptables -D OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0",
            ]
        );
    }

    /// The commands of a log without the read-only listings.
    fn changes(log: &[String]) -> Vec<String> {
        log.iter()
            .filter(|c| !c.contains(" -S "))
            .cloned()
            .collect()
    }

    #[test]
    fn dropping_the_guard_keeps_the_rules() {
        // Fail closed: without a decision (a panic unwinding), the rules stay.
        let mut fake = Fake::default();
        let rules = rules_for(&[80], QueueTarget::Num(0), true);
        drop(install(&mut fake, &rules).unwrap());
        assert_eq!(
            fake.log.last().unwrap(),
            "iptables -I OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0"
        );
        assert!(
            !fake.log.iter().any(|c| c.contains(" -D ")),
            "{:?}",
            fake.log
        );
    }

    #[test]
    fn failed_install_rolls_back() {
        let mut fake = Fake {
            fail_on: Some("ip6tables -I".into()),
            ..Fake::default()
        };
        let rules = rules_for(&[80], QueueTarget::Num(0), false);
        let e = install(&mut fake, &rules).unwrap_err().to_string();
        assert!(
            e.contains("ip6tables -I OUTPUT -p tcp --sport 80") && e.contains("boom"),
            "{e}"
        );
        let log = changes(&fake.log);
        assert_eq!(log.len(), 5);
        assert_eq!(
            log[4],
            "iptables -D OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0"
        );
    }

    #[test]
    fn existing_rules_are_adopted_and_kept_rules_survive() {
        let mut fake = Fake {
            existing: vec!["iptables -C OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0".into()],
            ..Fake::default()
        };
        let rules = rules_for(&[80], QueueTarget::Num(0), false);
        {
            let mut g = install(&mut fake, &rules).unwrap();
            assert_eq!(
                g.rules().len(),
                2,
                "the existing rule is adopted, the missing one added"
            );
            let kept = g.keep();
            assert_eq!(kept.len(), 2);
            assert!(
                kept[0].contains("iptables -D OUTPUT -p tcp --sport 80"),
                "{kept:?}"
            );
        }
        // not added twice, and nothing removed after keep()
        assert_eq!(
            fake.log
                .iter()
                .filter(|c| c.starts_with("iptables -I"))
                .count(),
            0,
            "{:?}",
            fake.log
        );
        assert_eq!(
            fake.log.iter().filter(|c| c.contains(" -D ")).count(),
            0,
            "{:?}",
            fake.log
        );
    }

    #[test]
    fn check_names_the_missing_commands() {
        let mut fake = Fake {
            listing:
                "-P OUTPUT ACCEPT\n-A OUTPUT -p tcp -m tcp --sport 80 -j NFQUEUE --queue-num 0\n"
                    .into(),
            ..Fake::default()
        };
        let rules = rules_for(&[80, 443], QueueTarget::Num(0), true);
        let e = check(&mut &mut fake, &rules).unwrap_err().to_string();
        assert!(
            e.contains("iptables -I OUTPUT -p tcp --sport 443 -j NFQUEUE --queue-num 0"),
            "{e}"
        );
        assert!(!e.contains("--sport 80 "), "{e}");
        assert!(e.contains("--install-rules"), "{e}");
        let ok = check(&mut &mut fake, &rules[..1]).unwrap();
        assert_eq!(ok.found.len(), 1);
        // The listing is read once per family.
        assert_eq!(fake.log.iter().filter(|c| c.contains("-S")).count(), 2);
    }

    fn check_listing(listing: &str) -> Result<CheckReport> {
        let mut fake = Fake {
            listing: listing.into(),
            ..Fake::default()
        };
        check(&mut &mut fake, &rules_for(&[80], QueueTarget::Num(0), true))
    }

    const OURS: &str = "-A OUTPUT -p tcp -m tcp --sport 80 -j NFQUEUE --queue-num 0";

    #[test]
    fn strict_check_refuses_bypass_and_narrowed_rules() {
        for (line, says) in [
            (
                "-A OUTPUT -p tcp -m tcp --sport 80 -j NFQUEUE --queue-num 0 --queue-bypass",
                "--queue-bypass",
            ),
            (
                "-A OUTPUT -s 198.18.2.2/32 -p tcp -m tcp --sport 80 -j NFQUEUE --queue-num 0",
                "only some",
            ),
            (
                "-A OUTPUT -d 198.18.1.0/24 -p tcp -m tcp --sport 80 -j NFQUEUE --queue-num 0",
                "only some",
            ),
            (
                "-A OUTPUT -o eth0 -p tcp -m tcp --sport 80 -j NFQUEUE --queue-num 0",
                "only some",
            ),
            (
                "-A OUTPUT -p tcp -m mark --mark 0x1 -m tcp --sport 80 -j NFQUEUE --queue-num 0",
                "only some",
            ),
        ] {
            let e = check_listing(&format!("-P OUTPUT ACCEPT\n{line}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(line), "names the line: {e}");
            assert!(e.contains(says), "{e}");
            assert!(
                e.contains(&format!("iptables -D {}", &line[3..])),
                "the delete command: {e}"
            );
            assert!(
                e.contains("iptables -I OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0"),
                "{e}"
            );
        }
        // A narrowed rule before the exact one is harmless.
        let ok = check_listing(&format!(
            "-A OUTPUT -s 198.18.2.2/32 -p tcp -m tcp --sport 80 -j NFQUEUE --queue-num 0\n{OURS}\n"
        ))
        .unwrap();
        assert_eq!(ok.found, vec![format!("iptables: {OURS}")]);
        // Without --queue-num, queue 0.
        assert!(check_listing("-A OUTPUT -p tcp -m tcp --sport 80 -j NFQUEUE\n").is_ok());
    }

    #[test]
    fn strict_check_refuses_a_shadowed_rule() {
        for earlier in [
            "-A OUTPUT -j ACCEPT",
            "-A OUTPUT -p tcp -j ACCEPT",
            "-A OUTPUT -o lo -j ACCEPT",
            "-A OUTPUT -p tcp -m tcp --sport 80 -j RETURN",
            "-A OUTPUT -d 198.18.1.2/32 -j DROP",
            "-A OUTPUT -p tcp -j REJECT --reject-with tcp-reset",
            "-A OUTPUT -j MYCHAIN",
            "-A OUTPUT -p tcp -m tcp --sport 1:1024 -j ACCEPT",
            "-A OUTPUT -p tcp -m multiport --sports 80,443 -j ACCEPT",
            "-A OUTPUT -p tcp -m tcp ! --sport 22 -j ACCEPT",
            "-A OUTPUT -p tcp -m tcp --sport 80 -j NFQUEUE --queue-num 5",
            "-A OUTPUT -m conntrack --ctstate ESTABLISHED -j ACCEPT",
        ] {
            let e = check_listing(&format!("-P OUTPUT ACCEPT\n{earlier}\n{OURS}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("`{earlier}` comes before")),
                "{earlier}: {e}"
            );
            assert!(
                e.contains("iptables -I OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0"),
                "{e}"
            );
            // Put first, the same rule is fine.
            assert!(
                check_listing(&format!("{OURS}\n{earlier}\n")).is_ok(),
                "{earlier}"
            );
        }
        // Rules that clearly cannot take the packets do not shadow.
        for earlier in [
            "-A OUTPUT -p udp -j ACCEPT",
            "-A OUTPUT -p icmp -j ACCEPT",
            "-A OUTPUT ! -p tcp -j ACCEPT",
            "-A OUTPUT -p tcp -m tcp --sport 22 -j ACCEPT",
            "-A OUTPUT -p tcp -m tcp --sport 1000:2000 -j ACCEPT",
            "-A OUTPUT -p tcp -m tcp ! --sport 80 -j ACCEPT",
            "-A OUTPUT -p tcp -m multiport --sports 22,443 -j ACCEPT",
            "-A OUTPUT -p tcp -m tcp --sport 80 -j LOG --log-prefix x",
            "-A OUTPUT -p tcp -m tcp --sport 80 -j MARK --set-xmark 0x1/0xffffffff",
            "-A OUTPUT -p tcp",
            "-A INPUT -j ACCEPT",
            "-N MYCHAIN",
        ] {
            assert!(
                check_listing(&format!("{earlier}\n{OURS}\n")).is_ok(),
                "{earlier} does not shadow"
            );
        }
    }

    #[test]
    fn install_refuses_to_adopt_a_bypass_rule_and_fixes_a_shadowed_one() {
        let bypass = "-A OUTPUT -p tcp -m tcp --sport 80 -j NFQUEUE --queue-num 0 --queue-bypass";
        let mut fake = Fake {
            listing: format!("{bypass}\n"),
            existing: vec!["iptables -C OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0".into()],
            ..Fake::default()
        };
        let e = install(&mut fake, &rules_for(&[80], QueueTarget::Num(0), true))
            .unwrap_err()
            .to_string();
        assert!(e.contains(bypass) && e.contains("not adopting"), "{e}");
        assert!(
            !fake.log.iter().any(|c| c.contains(" -I ")),
            "{:?}",
            fake.log
        );
        // An existing rule behind an ACCEPT is not adopted: ours goes to the top.
        let mut fake = Fake {
            listing: format!("-A OUTPUT -j ACCEPT\n{OURS}\n"),
            existing: vec!["iptables -C OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0".into()],
            ..Fake::default()
        };
        let mut g = install(&mut fake, &rules_for(&[80], QueueTarget::Num(0), true)).unwrap();
        assert_eq!(g.rules().len(), 1);
        g.keep();
        drop(g);
        assert_eq!(
            changes(&fake.log),
            vec!["iptables -I OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0"]
        );
    }
}
