//! The iptables/ip6tables rules that hand the test service's responses to NFQUEUE:
//! `OUTPUT -p tcp --sport PORT -j NFQUEUE --queue-num N` (or `--queue-balance A:B`).
//!
//! Either the intercept installs them (`--install-rules`: [`install`] returns an [`Installed`]
//! guard that removes exactly the rules it added, when asked or when dropped, so error paths and
//! panics clean up too), or it checks that equivalent rules exist ([`check`]) and otherwise
//! fails with the exact commands to run. Native nft `queue` rules do not work on these kernels
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

    /// Whether a line of `iptables -S OUTPUT` is a rule that queues this port's responses to
    /// our queue(s). Extra matches are tolerated; a negation (`!`) is not.
    pub fn matches_listing(&self, line: &str) -> bool {
        let t: Vec<&str> = line.split_whitespace().collect();
        let has = |a: &str, b: &str| t.windows(2).any(|w| w[0] == a && w[1] == b);
        if t.len() < 2 || t[0] != "-A" || t[1] != "OUTPUT" || t.contains(&"!") {
            return false;
        }
        if !(has("-p", "tcp") && has("--sport", &self.port.to_string()) && has("-j", "NFQUEUE")) {
            return false;
        }
        match self.target {
            QueueTarget::Num(n) => {
                has("--queue-num", &n.to_string())
                    || (n == 0 && !t.contains(&"--queue-num") && !t.contains(&"--queue-balance"))
            }
            QueueTarget::Balance(a, b) => has("--queue-balance", &format!("{a}:{b}")),
        }
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
            .map(|rule| format!("left in place: {rule}; remove it by hand: {}", rule.command("-D")))
            .collect()
    }
}

impl<R: Runner> Drop for Installed<R> {
    fn drop(&mut self) {
        for line in self.remove() {
            eprintln!("intercept: {line}");
        }
    }
}

/// Insert each rule at the top of OUTPUT. A rule that exists already (`-C`), typically left in
/// place by an earlier run that stopped while copied sessions were open, is adopted instead of
/// added twice; adopted rules are removed at exit like added ones. On failure, the rules already
/// added are removed again and the error names the command that failed.
pub fn install<R: Runner>(runner: R, rules: &[Rule]) -> Result<Installed<R>> {
    let mut guard = Installed {
        runner,
        rules: Vec::new(),
    };
    for rule in rules {
        if guard.runner.run(rule.family.tool(), &rule.args("-C")).ok {
            tracing::info!("adopted existing firewall rule: {rule}");
            guard.rules.push(*rule);
            continue;
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
    /// Things the operator should know (e.g. `--queue-bypass` makes the rule fail open).
    pub warnings: Vec<String>,
}

/// Check that each rule has an equivalent in the OUTPUT chain; if any is missing, fail with
/// the exact commands to run (or the advice to use `--install-rules`).
pub fn check<R: Runner>(runner: &mut R, rules: &[Rule]) -> Result<CheckReport> {
    let mut report = CheckReport::default();
    let mut missing = Vec::new();
    let mut listings: Vec<(Family, Result<String, String>)> = Vec::new();
    for rule in rules {
        if !listings.iter().any(|(f, _)| *f == rule.family) {
            let r = runner.run(rule.family.tool(), &["-S".into(), "OUTPUT".into()]);
            listings.push((rule.family, if r.ok { Ok(r.stdout) } else { Err(r.stderr) }));
        }
        let listing = &listings
            .iter()
            .find(|(f, _)| *f == rule.family)
            .expect("listed above")
            .1;
        let text = match listing {
            Ok(t) => t,
            Err(e) => bail!(
                "cannot list the OUTPUT chain with `{} -S OUTPUT`: {e}",
                rule.family.tool()
            ),
        };
        match text.lines().find(|l| rule.matches_listing(l)) {
            Some(line) => {
                if line.split_whitespace().any(|w| w == "--queue-bypass") {
                    report.warnings.push(format!(
                        "{}: `{line}` has --queue-bypass: while no intercept runs, responses pass (fail open)",
                        rule.family.tool()
                    ));
                }
                report.found.push(format!("{}: {line}", rule.family.tool()));
            }
            None => missing.push(rule.command("-I")),
        }
    }
    if !missing.is_empty() {
        bail!(
            "no NFQUEUE rule sends the test service's responses to this intercept. Run:\n  {}\n\
             or start the intercept with --install-rules to have it add (and later remove) them",
            missing.join("\n  ")
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
        assert!(r.matches_listing(
            "-A OUTPUT -s 198.18.2.2/32 -p tcp -m tcp --sport 80 -j NFQUEUE --queue-bypass"
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
        assert_eq!(
            fake.log,
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

    #[test]
    fn dropping_the_guard_removes_the_rules() {
        let mut fake = Fake::default();
        let rules = rules_for(&[80], QueueTarget::Num(0), true);
        drop(install(&mut fake, &rules).unwrap());
        assert_eq!(
            fake.log.last().unwrap(),
            "iptables -D OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0"
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
        assert_eq!(fake.log.len(), 5);
        assert_eq!(
            fake.log[4],
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
            assert_eq!(g.rules().len(), 2, "the existing rule is adopted, the missing one added");
            let kept = g.keep();
            assert_eq!(kept.len(), 2);
            assert!(kept[0].contains("iptables -D OUTPUT -p tcp --sport 80"), "{kept:?}");
        }
        // not added twice, and nothing removed after keep()
        assert_eq!(fake.log.iter().filter(|c| c.starts_with("iptables -I")).count(), 0, "{:?}", fake.log);
        assert_eq!(fake.log.iter().filter(|c| c.contains(" -D ")).count(), 0, "{:?}", fake.log);
    }

    #[test]
    fn check_names_the_missing_commands() {
        let mut fake = Fake {
            listing: "-P OUTPUT ACCEPT\n-A OUTPUT -p tcp -m tcp --sport 80 -j NFQUEUE --queue-num 0 --queue-bypass\n"
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
        assert!(ok.warnings[0].contains("fail open"), "{:?}", ok.warnings);
        // The listing is read once per family.
        assert_eq!(fake.log.iter().filter(|c| c.contains("-S")).count(), 2);
    }
}
