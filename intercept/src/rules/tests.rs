//! Tests of the rules module over a scripted [`Runner`]: install, adopt, remove or keep, and
//! the check of existing listings (exact, narrowed, bypass, shadowed).

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
    let r = FirewallRule {
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
    assert!(!r.matches_listing("-A OUTPUT -d 198.18.1.2/32 -p tcp -m tcp --sport 80 -j NFQUEUE"));
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
    let b = FirewallRule {
        family: Family::V4,
        port: 80,
        target: QueueTarget::Balance(0, 1),
    };
    assert!(b.matches_listing("-A OUTPUT -p tcp -m tcp --sport 80 -j NFQUEUE --queue-balance 0:1"));
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
        assert_eq!(g.adopted(), 1, "a restart: one rule was found in place");
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
fn restore_puts_back_only_the_missing_rules() {
    let mut fake = Fake {
        existing: vec!["iptables -C OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0".into()],
        ..Fake::default()
    };
    let rules = rules_for(&[80], QueueTarget::Num(0), false);
    let back = restore(&mut &mut fake, &rules).unwrap();
    assert_eq!(back, vec![rules[1]], "only the flushed ip6tables rule");
    assert_eq!(
        fake.log
            .iter()
            .filter(|c| c.contains(" -I "))
            .cloned()
            .collect::<Vec<_>>(),
        vec!["ip6tables -I OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0".to_string()]
    );
    fake.fail_on = Some("-I".into());
    fake.existing.clear();
    let e = restore(&mut &mut fake, &rules).unwrap_err().to_string();
    assert!(
        e.contains("iptables -I OUTPUT") && e.contains("boom"),
        "{e}"
    );
}

#[test]
fn check_names_the_missing_commands() {
    let mut fake = Fake {
        listing: "-P OUTPUT ACCEPT\n-A OUTPUT -p tcp -m tcp --sport 80 -j NFQUEUE --queue-num 0\n"
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
