//! The iptables/ip6tables rules that hand the test service's responses to NFQUEUE:
//! `OUTPUT -p tcp --sport PORT -j NFQUEUE --queue-num N` (or `--queue-balance A:B`).
//!
//! Either the intercept installs them (`--install-rules`: [`install`] returns an [`Installed`]
//! guard that removes exactly the rules it added when asked, and keeps them (fail closed) when
//! dropped without a decision, e.g. on a panic), or it checks that equivalent rules exist and
//! take effect ([`check`]) and otherwise fails with the exact commands to run. Native nft
//! `queue` rules do not work on these kernels (see `shared/LAB.md`), so everything goes through
//! the `iptables` commands. The commands are run through a [`Runner`] so the logic can be tested
//! without touching the firewall; what a listed line means is the business of `listing`.

use std::fmt;
use std::process::Command;

use anyhow::{bail, Result};

mod listing;

use listing::{analyze, delete_command, Finding};

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
pub struct FirewallRule {
    /// iptables or ip6tables.
    pub family: Family,
    /// The test service's port (`--sport`).
    pub port: u16,
    /// The queue(s).
    pub target: QueueTarget,
}

impl FirewallRule {
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
}

impl fmt::Display for FirewallRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} OUTPUT {}", self.family.tool(), self.spec().join(" "))
    }
}

/// The rules for these ports, IPv4 and (unless `ipv4_only`) IPv6.
pub fn rules_for(ports: &[u16], target: QueueTarget, ipv4_only: bool) -> Vec<FirewallRule> {
    let mut v = Vec::new();
    for &port in ports {
        v.push(FirewallRule {
            family: Family::V4,
            port,
            target,
        });
        if !ipv4_only {
            v.push(FirewallRule {
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
    rules: Vec<FirewallRule>,
    adopted: usize,
}

impl<R: Runner> Installed<R> {
    /// The rules still installed by us.
    pub fn rules(&self) -> &[FirewallRule] {
        &self.rules
    }

    /// How many of them were found in place at start (left by an earlier intercept that
    /// stopped while copied sessions were open) rather than added.
    pub fn adopted(&self) -> usize {
        self.adopted
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

/// The OUTPUT chain of each family, listed once per [`install`] or [`check`].
#[derive(Debug, Default)]
struct Listings(Vec<(Family, String)>);

impl Listings {
    /// The listing of `family`, running `-S OUTPUT` the first time it is asked for.
    fn of(&mut self, runner: &mut impl Runner, family: Family) -> Result<&str> {
        let at = match self.0.iter().position(|(f, _)| *f == family) {
            Some(at) => at,
            None => {
                self.0.push((family, list(runner, family)?));
                self.0.len() - 1
            }
        };
        Ok(&self.0[at].1)
    }
}

/// Insert each rule at the top of OUTPUT. A rule that exists already (`-C`), typically left in
/// place by an earlier run that stopped while copied sessions were open, is adopted instead of
/// added twice, unless a rule before it could take its packets (then ours is inserted at the
/// top anyway); adopted rules are removed at exit like added ones. A rule for our port with
/// `--queue-bypass` is an error (it fails open whenever no intercept runs). On failure, the
/// rules already added are removed again and the error names the command that failed.
pub fn install<R: Runner>(runner: R, rules: &[FirewallRule]) -> Result<Installed<R>> {
    let mut guard = Installed {
        runner,
        rules: Vec::new(),
        adopted: 0,
    };
    let mut listings = Listings::default();
    for rule in rules {
        let finding = match listings.of(&mut guard.runner, rule.family) {
            Ok(listing) => analyze(listing, rule),
            Err(e) => {
                guard.remove();
                return Err(e);
            }
        };
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
            guard.adopted += 1;
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

/// How often the running daemon checks its rules ([`restore`] with `--install-rules`,
/// [`check`] without).
pub const CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Put back every rule of `rules` that is gone (`-C` fails: a flush, a firewall reload), at
/// the top of OUTPUT. Returns the rules put back, and an error naming the first command that
/// failed.
pub fn restore(runner: &mut impl Runner, rules: &[FirewallRule]) -> Result<Vec<FirewallRule>> {
    let mut back = Vec::new();
    for rule in rules {
        if runner.run(rule.family.tool(), &rule.args("-C")).ok {
            continue;
        }
        let r = runner.run(rule.family.tool(), &rule.args("-I"));
        if !r.ok {
            bail!("`{}` failed: {}", rule.command("-I"), r.stderr);
        }
        back.push(*rule);
    }
    Ok(back)
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
pub fn check<R: Runner>(runner: &mut R, rules: &[FirewallRule]) -> Result<CheckReport> {
    let mut report = CheckReport::default();
    let mut problems = Vec::new();
    let mut listings = Listings::default();
    for rule in rules {
        let listing = listings.of(runner, rule.family)?;
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
mod tests;
