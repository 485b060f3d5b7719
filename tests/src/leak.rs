//! Counting leaks with the firewall: a counting rule at the very end of a host's output path
//! (`mangle POSTROUTING`, which every packet that leaves the host passes after the `filter
//! OUTPUT` chain where the intercept's NFQUEUE verdicts are given) for responses of the test
//! service toward the lab's client ranges. Unlike a capture on a busy link, a kernel counter
//! cannot miss a packet, so "0 leaked" means none left.
//!
//! Usage: [`LeakCounter::install`] before traffic starts, [`LeakCounter::count`] at the end.
//! The rules live in the lab's namespace and go away with it.

use crate::{addr, Host, Lab};
use anyhow::{bail, Context, Result};

/// The comment that marks our counting rules.
const TAG: &str = "tcopy-leak-counter";

/// Counting rules installed on one host.
#[derive(Debug, Clone)]
pub struct LeakCounter {
    host: Host,
    ports: Vec<u16>,
}

impl LeakCounter {
    /// Counts packets that leave `host` from one of `ports` (the test service's ports) toward
    /// the lab's client ranges (real and fake clients, IPv4 and IPv6).
    pub fn install(lab: &Lab, host: Host, ports: &[u16]) -> Result<LeakCounter> {
        for &port in ports {
            for (tool, nets) in [
                ("iptables", [addr::CLIENT_NET, addr::FAKE_CLIENT_NET]),
                ("ip6tables", [addr::CLIENT_NET6, addr::FAKE_CLIENT_NET6]),
            ] {
                for net in nets {
                    let p = port.to_string();
                    lab.exec_ok(
                        host,
                        &[
                            tool,
                            "-w",
                            "-t",
                            "mangle",
                            "-A",
                            "POSTROUTING",
                            "-p",
                            "tcp",
                            "--sport",
                            &p,
                            "-d",
                            net,
                            "-m",
                            "comment",
                            "--comment",
                            TAG,
                        ],
                    )
                    .with_context(|| {
                        format!("install the leak counter ({tool}, port {port}, {net})")
                    })?;
                }
            }
        }
        Ok(LeakCounter {
            host,
            ports: ports.to_vec(),
        })
    }

    /// Packets counted so far (IPv4 and IPv6).
    pub fn count(&self, lab: &Lab) -> Result<u64> {
        let mut total = 0;
        let mut rules = 0;
        for tool in ["iptables", "ip6tables"] {
            let listing = lab.exec_ok(
                self.host,
                &[tool, "-w", "-t", "mangle", "-nvxL", "POSTROUTING"],
            )?;
            for line in listing.lines().filter(|l| l.contains(TAG)) {
                let pkts = line.split_whitespace().next().unwrap_or("");
                total += pkts
                    .parse::<u64>()
                    .with_context(|| format!("bad counter line {line:?}"))?;
                rules += 1;
            }
        }
        if rules != 4 * self.ports.len() {
            bail!(
                "expected {} leak-counting rules on {:?}, found {rules}",
                4 * self.ports.len(),
                self.host
            );
        }
        Ok(total)
    }
}
