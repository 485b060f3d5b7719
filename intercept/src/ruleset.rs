//! Notice of firewall ruleset changes, so that a flush or a firewall reload is seen at once and
//! not at the next periodic check of the rules ([`crate::rules::CHECK_EVERY`]).
//!
//! The kernel's nf_tables sends a message to the `NFNLGRP_NFTABLES` multicast group of
//! `NETLINK_NETFILTER` for every committed change of the ruleset (a rule added or deleted, a
//! chain flushed, a table reloaded): `iptables` of the `nf_tables` kind (Debian's default),
//! `nft` and firewalld all commit through it. The content of the messages is not read: any
//! change (or a lost message, `ENOBUFS`) means "check now". Changes made with
//! `iptables-legacy` send nothing: there the periodic check alone finds them.

use crate::sys::NetlinkSocket;
use std::io;

/// `NFNLGRP_NFTABLES` (`include/uapi/linux/netfilter/nfnetlink.h`).
pub const NFNLGRP_NFTABLES: u32 = 7;

/// A subscription to the ruleset changes of this network namespace.
#[derive(Debug)]
pub struct RulesetChanges {
    sock: NetlinkSocket,
    buf: Vec<u8>,
}

impl RulesetChanges {
    /// Subscribe (needs CAP_NET_ADMIN).
    pub fn open() -> io::Result<RulesetChanges> {
        let sock = NetlinkSocket::open_netfilter()?;
        sock.join_group(NFNLGRP_NFTABLES)?;
        // A reload of a large ruleset sends a message per object: room for a burst; an
        // overrun is reported (ENOBUFS) and counts as a change.
        let _ = sock.force_rcvbuf(1 << 20);
        sock.report_enobufs(true)?;
        Ok(RulesetChanges {
            sock,
            buf: vec![0; 64 << 10],
        })
    }

    /// Wait for the next change (or lost changes). Errors are the socket's own.
    pub fn wait(&mut self) -> io::Result<()> {
        loop {
            match self.sock.recv(&mut self.buf) {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subscription_opens_as_root() {
        // Joining the group is all that can be checked without changing this host's rules;
        // the lab test `fault_rules` flushes the rules of a namespace of its own.
        if !nix::unistd::geteuid().is_root() {
            eprintln!("!! SKIPPED: joining NFNLGRP_NFTABLES needs root");
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI runs as root"
            );
            return;
        }
        RulesetChanges::open().expect("join NFNLGRP_NFTABLES");
    }
}
