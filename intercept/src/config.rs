//! The intercept daemon's configuration ([`InterceptConfig`]): what the command line asked for,
//! as one plain struct, and [`InterceptConfig::validate`], which runs before anything is bound,
//! installed or listened on and names the flag that is wrong.
//!
//! The command line (`main.rs`) only parses values (with `common::units` for durations) and
//! fills this struct; the derived configurations of the other modules ([`RouterConfig`], the
//! NFQUEUE rules) come from here, so a check lives in one place whatever built the struct.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::allow::{AllowList, IpNet};
use crate::router::{Guard, RouterConfig};
use crate::rules::{self, FirewallRule, QueueTarget};

/// The longest duration a flag of the intercept takes (`--hold-time`, `--linger`,
/// `--exit-grace`).
pub const MAX_DURATION: Duration = Duration::from_secs(3600);

/// The largest `--payload-bytes`: the most payload one IP packet carries (65535 bytes less an
/// IPv4 and a TCP header without options). The NFQUEUE copy range (headers plus payload) is a
/// `u16`, clamped to 65535 (`crate::nfqueue::copy_range`): the whole of any packet, a GSO super-segment
/// of 64 KB included, so that shadow testing (`copier --compare`) gets every answer byte.
pub const MAX_PAYLOAD_BYTES: usize = u16::MAX as usize - 40;

/// The least `--copier-queue-bytes`: room for a few records of the largest packet (a record of
/// `--payload-bytes 65495` is about 64 KiB), so that a record always fits a queue.
pub const MIN_COPIER_QUEUE_BYTES: usize = 256 << 10;

/// Everything the daemon runs with (one field per flag of `intercept --help`).
#[derive(Debug, Clone)]
pub struct InterceptConfig {
    /// Source ports of the test service's responses to intercept (`--port`).
    pub ports: Vec<u16>,
    /// Where copiers connect (`--listen`).
    pub listen: SocketAddr,
    /// The shared secret's file; `None` only with `--no-secret`.
    pub secret_file: Option<PathBuf>,
    /// Client addresses or prefixes whose responses pass (`--allow`).
    pub allow: Vec<IpNet>,
    /// The NFQUEUE queue(s) read (`--queue-num` or `--queue-balance`).
    pub queue: QueueTarget,
    /// Bytes of each response's payload sent to the copier with the headers (`--payload-bytes`).
    pub payload_bytes: usize,
    /// Add the rules at start and remove them at exit (`--install-rules`).
    pub install_rules: bool,
    /// Remove installed rules at exit even when sessions are open (`--always-remove-rules`).
    pub always_remove_rules: bool,
    /// Do not check the firewall rules (`--no-rule-check`).
    pub no_rule_check: bool,
    /// IPv4 rules only (`--ipv4-only`).
    pub ipv4_only: bool,
    /// Where Prometheus metrics are served (`--metrics`).
    pub metrics: Option<SocketAddr>,
    /// How long a response waits for its registration (`--hold-time`).
    pub hold_time: Duration,
    /// Responses that may wait at once (`--hold-capacity`).
    pub hold_capacity: usize,
    /// Bytes of responses that may wait at once (`--hold-bytes`).
    pub hold_bytes: usize,
    /// Registrations one copier connection may hold (`--max-registrations`).
    pub max_registrations: usize,
    /// How long an unregistered session's responses are still dropped (`--linger`).
    pub linger: Duration,
    /// Recently unregistered sessions remembered (`--tombstone-capacity`).
    pub tombstone_capacity: usize,
    /// How long the exit waits for the router to be quiet (`--exit-grace`).
    pub exit_grace: Duration,
    /// Accept answers to this host's own addresses (not `--no-local-answers`).
    pub local_answers: bool,
    /// Records queued per copier before the oldest are dropped (`--copier-queue`).
    pub copier_queue: usize,
    /// Bytes of records queued per copier before the oldest are dropped
    /// (`--copier-queue-bytes`).
    pub copier_queue_bytes: usize,
    /// The longest rest of an NFQUEUE worker between batches (`--max-rest`; zero: never).
    pub max_rest: Duration,
    /// How long a restarted intercept accepts nothing it cannot prove is no copy
    /// (`--restart-grace`; zero: no grace).
    pub restart_grace: Duration,
    /// Accept registrations for servers whose address is not this host's (`--any-server`).
    pub any_server: bool,
}

/// A configuration the daemon refuses to start with; each names its flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// No `--port`.
    #[error("--port: at least one port is needed")]
    NoPorts,
    /// Port 0 among the ports.
    #[error("--port: port 0 is not a port a service answers from (1 to 65535)")]
    PortZero,
    /// `--queue-balance A:B` with A > B.
    #[error("--queue-balance {0}:{1}: A must not be above B")]
    Balance(u16, u16),
    /// `--payload-bytes` above [`MAX_PAYLOAD_BYTES`].
    #[error("--payload-bytes {0} is too large (at most {MAX_PAYLOAD_BYTES})")]
    PayloadBytes(usize),
    /// A duration above [`MAX_DURATION`].
    #[error("{flag} {value:?} is too long (at most 1h = 3600s)")]
    TooLong {
        /// The flag.
        flag: &'static str,
        /// Its value.
        value: Duration,
    },
    /// A count that must be at least 1.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// `--copier-queue-bytes` below [`MIN_COPIER_QUEUE_BYTES`].
    #[error("--copier-queue-bytes {0} is too small: at least {MIN_COPIER_QUEUE_BYTES} (256K), a few records of the largest packet")]
    QueueBytes(usize),
}

impl InterceptConfig {
    /// Checks what the flags' own parsers cannot see (limits that tie flags together, and every
    /// limit again for a struct built in code).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.ports.is_empty() {
            return Err(ConfigError::NoPorts);
        }
        if self.ports.contains(&0) {
            return Err(ConfigError::PortZero);
        }
        if let QueueTarget::Balance(a, b) = self.queue {
            if a > b {
                return Err(ConfigError::Balance(a, b));
            }
        }
        if self.payload_bytes > MAX_PAYLOAD_BYTES {
            return Err(ConfigError::PayloadBytes(self.payload_bytes));
        }
        for (flag, value) in [
            ("--hold-time", self.hold_time),
            ("--linger", self.linger),
            ("--exit-grace", self.exit_grace),
            ("--restart-grace", self.restart_grace),
        ] {
            if value > MAX_DURATION {
                return Err(ConfigError::TooLong { flag, value });
            }
        }
        for (flag, n) in [
            ("--max-registrations", self.max_registrations),
            ("--copier-queue", self.copier_queue),
        ] {
            if n == 0 {
                return Err(ConfigError::Zero(flag));
            }
        }
        if self.copier_queue_bytes < MIN_COPIER_QUEUE_BYTES {
            return Err(ConfigError::QueueBytes(self.copier_queue_bytes));
        }
        Ok(())
    }

    /// The router's configuration: what the rules guard (these ports, IPv6 unless
    /// `--ipv4-only`) and the hold, linger and registration limits.
    pub fn router_config(&self) -> RouterConfig {
        RouterConfig {
            allow: AllowList::new(self.allow.clone()),
            hold_time: self.hold_time,
            hold_capacity: self.hold_capacity,
            hold_bytes: self.hold_bytes,
            guard: Guard {
                ports: Some(self.ports.clone()),
                ipv4: true,
                ipv6: !self.ipv4_only,
            },
            max_registrations: self.max_registrations,
            linger: self.linger,
            tombstone_capacity: self.tombstone_capacity,
            accept_local: self.local_answers,
            local_servers_only: !self.any_server,
        }
    }

    /// The NFQUEUE rules these ports and queues need.
    pub fn rules(&self) -> Vec<FirewallRule> {
        rules::rules_for(&self.ports, self.queue, self.ipv4_only)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> InterceptConfig {
        InterceptConfig {
            ports: vec![80],
            listen: "198.18.2.2:36524".parse().unwrap(),
            secret_file: None,
            allow: Vec::new(),
            queue: QueueTarget::Num(0),
            payload_bytes: 0,
            install_rules: false,
            always_remove_rules: false,
            no_rule_check: false,
            ipv4_only: false,
            metrics: None,
            hold_time: Duration::from_secs(2),
            hold_capacity: 4096,
            hold_bytes: 32 << 20,
            max_registrations: 10,
            linger: Duration::from_secs(120),
            tombstone_capacity: 100,
            exit_grace: Duration::from_secs(2),
            local_answers: true,
            copier_queue: 65536,
            copier_queue_bytes: 16 << 20,
            max_rest: crate::rest::MAX_REST,
            restart_grace: Duration::from_secs(15),
            any_server: false,
        }
    }

    #[test]
    fn each_refusal_names_its_flag() {
        assert_eq!(config().validate(), Ok(()));
        let cases: Vec<(fn(&mut InterceptConfig), &str)> = vec![
            (|c| c.ports.clear(), "--port"),
            (|c| c.ports.push(0), "--port: port 0"),
            (
                |c| c.queue = QueueTarget::Balance(3, 0),
                "--queue-balance 3:0",
            ),
            (
                |c| c.payload_bytes = MAX_PAYLOAD_BYTES + 1,
                "--payload-bytes 65496",
            ),
            (|c| c.hold_time = Duration::from_secs(3601), "--hold-time"),
            (|c| c.linger = Duration::from_secs(3601), "--linger"),
            (|c| c.exit_grace = Duration::from_secs(3601), "--exit-grace"),
            (|c| c.max_registrations = 0, "--max-registrations"),
            (|c| c.copier_queue = 0, "--copier-queue"),
            (
                |c| c.copier_queue_bytes = 1000,
                "--copier-queue-bytes 1000 is too small",
            ),
        ];
        for (change, needle) in cases {
            let mut c = config();
            change(&mut c);
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(needle), "{e} (wanted {needle:?})");
        }
        let mut c = config();
        c.payload_bytes = MAX_PAYLOAD_BYTES;
        c.linger = MAX_DURATION;
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn router_and_rules_follow_the_flags() {
        let mut c = config();
        c.ports = vec![80, 8080];
        c.ipv4_only = true;
        c.local_answers = false;
        let r = c.router_config();
        assert_eq!(r.guard.ports, Some(vec![80, 8080]));
        assert!(r.guard.ipv4 && !r.guard.ipv6 && !r.accept_local);
        assert_eq!(r.linger, c.linger);
        assert_eq!(c.rules().len(), 2, "one IPv4 rule per port");
        c.ipv4_only = false;
        assert_eq!(c.rules().len(), 4, "IPv4 and IPv6 per port");
    }
}
