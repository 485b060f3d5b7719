//! Why the copier's flags were refused before anything started: [`FlagError`], one variant per
//! check of [`CopierArgs::validate`](super::CopierArgs::validate), [`check_maps`](super::check_maps)
//! and [`check_targets_not_local`](super::check_targets_not_local), each naming the flag and the
//! value it refuses, and [`ValueError`], the value parsers' (one variant per way a value is wrong).
//! `main` prints the message and exits; `copier doctor` reports it; clap prints a `ValueError`. The
//! errors of other crates inside are part of the message, not a source (printed once).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::engine::{ClientIpPool, ConfigError, PoolParseError, PortMap, RulesError};
use crate::routing::InterceptAddr;

/// A flag, or a combination of flags, the copier refuses.
#[derive(Debug, thiserror::Error)]
pub enum FlagError {
    /// A `--client-ip` range does not parse or the ranges do not join.
    #[error("--client-ip: {0}")]
    ClientIp(PoolParseError),
    /// The `--profile` file does not load, is inconsistent, or gives no plan.
    #[error("--profile {}: {reason}", path.display())]
    Profile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The `--rules` file does not load.
    #[error("--rules: {0}")]
    Rules(RulesError),
    /// `--max-memory` does not fit in a `usize`.
    #[error("--max-memory is larger than this machine's address space")]
    MaxMemoryTooLarge,
    /// `--max-memory` under 1 MiB.
    #[error("--max-memory {0} is too small (at least 1M)")]
    MaxMemoryTooSmall(usize),
    /// `--target-down-after` or `--target-retry` under 100 ms.
    #[error("--target-down-after and --target-retry must be at least 100ms")]
    HealthTooFast,
    /// `--session-timeout` under a second.
    #[error("--session-timeout {0:?} is too short (at least 1s)")]
    SessionTimeout(Duration),
    /// `--idle-timeout` under a second.
    #[error("--idle-timeout {0:?} is too short (at least 1s)")]
    IdleTimeout(Duration),
    /// `--unproven-timeout` under a second.
    #[error("--unproven-timeout {0:?} is too short (at least 1s)")]
    UnprovenTimeout(Duration),
    /// The engine's own check of the configuration the flags make.
    #[error("invalid configuration: {0}")]
    Engine(ConfigError),
    /// `--ring-block-size` not a multiple of 4K between 64K and 1G.
    #[error("--ring-block-size {0} must be a multiple of 4K between 64K and 1G")]
    RingBlockSize(u64),
    /// `--interface` is no interface name.
    #[error("--interface {0:?} is not a valid interface name")]
    Interface(String),
    /// The `--secret-file` cannot be read or holds no usable secret.
    #[error("--secret-file: {0}")]
    SecretFile(common::proto::ProtoError),
    /// Neither `--secret-file` nor `--no-secret`.
    #[error("give --secret-file FILE, or --no-secret to run without one")]
    NoSecret,
    /// The same `--intercept` twice.
    #[error("--intercept {0} is given twice")]
    InterceptTwice(InterceptAddr),
    /// `--intercept-for` does not fit the intercepts and the test servers (the message names
    /// the flag).
    #[error("{0}")]
    InterceptFor(String),
    /// `--trace-every` under 10 ms.
    #[error("--trace-every must be at least 10ms")]
    TraceEvery,
    /// The `--record` directory cannot be made.
    #[error("--record {}: {error}", dir.display())]
    RecordDir {
        /// The directory.
        dir: PathBuf,
        /// Why it cannot be made.
        error: std::io::Error,
    },
    /// `--record-size` over `--record-files` files under 64K a file.
    #[error("--record-size {size} over {files} files is under 64K a file")]
    RecordSize {
        /// `--record-size`.
        size: u64,
        /// `--record-files`.
        files: u32,
    },
    /// `--baseline-map` without `--compare`.
    #[error("--baseline-map needs --compare")]
    BaselineWithoutCompare,
    /// `--compare` with a map of several test servers.
    #[error(
        "--compare with --map {0}: a compared map has one candidate test server (several weighted ones are not compared)"
    )]
    CompareSpread(PortMap),
    /// A `--baseline-map` whose target is the candidate's, or of another family.
    #[error(
        "--baseline-map {baseline}: its target must differ from the --map target {candidate} and be of its family"
    )]
    BaselineTarget {
        /// The baseline map.
        baseline: PortMap,
        /// The candidate's target.
        candidate: std::net::SocketAddr,
    },
    /// A `--baseline-map` with no `--map` of its online port and address.
    #[error("--baseline-map {0}: no --map for that online port and address")]
    BaselineWithoutMap(PortMap),
    /// `--compare-bytes` under 1 KiB.
    #[error("--compare-bytes {0} is too small (at least 1K)")]
    CompareBytes(u64),
    /// Two `--map`s of the same online port and address.
    #[error("--map {first} and --map {second} copy the same online port {}", second.online_port)]
    SamePort {
        /// The first map.
        first: PortMap,
        /// The second.
        second: PortMap,
    },
    /// Two `--map`s of the same online port for any address, to targets of the same family.
    #[error(
        "--map {first} and --map {second} copy the same online port {} to the same family ({}); one map per family",
        second.online_port,
        if second.target.is_ipv6() { "IPv6" } else { "IPv4" }
    )]
    SamePortAndFamily {
        /// The first map.
        first: PortMap,
        /// The second.
        second: PortMap,
    },
    /// A `--map` for any address and one for a given address of the same port.
    #[error(
        "--map {any} (any address) overlaps --map {given}: give addresses to both or to neither"
    )]
    AnyOverlaps {
        /// The map for any address.
        any: PortMap,
        /// The map for a given address.
        given: PortMap,
    },
    /// A `--client-ip` pool without a range of a target's family.
    #[error(
        "--client-ip {pool} has no range of the IP family of the target of --map {map} (different IP families)"
    )]
    PoolFamily {
        /// The pool.
        pool: ClientIpPool,
        /// The map.
        map: PortMap,
    },
    /// A `--map` from one family to the other without a `--client-ip` pool.
    #[error(
        "--map {0}: the online address and the target are of different IP families; add --client-ip with a range of the target's family"
    )]
    MapFamilies(PortMap),
    /// This host's addresses cannot be listed (to refuse a target that is one of them).
    #[error("cannot list this host's addresses (getifaddrs): {0}")]
    LocalAddresses(nix::Error),
    /// A `--map` whose target is this host itself.
    #[error(
        "--map {map}: the target {ip} is an address of this host (the production host): the copies would be sent here; give the test server's address"
    )]
    TargetIsLocal {
        /// The map.
        map: PortMap,
        /// Its target's address.
        ip: IpAddr,
    },
}

/// A flag's value that does not parse (the value parsers of `--map`, `--baseline-map`,
/// `--fleet`, rates, percentages and Unix times); clap prints it after the flag's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// `--fleet` without a `/`.
    #[error("{0:?}: expected I/N (copier I of N, from 0) or host/N")]
    FleetForm(String),
    /// `--fleet`'s size is no number from 1 to 65535.
    #[error("{value:?}: the fleet size {size:?} is not a number from 1 to 65535")]
    FleetSize {
        /// The value.
        value: String,
        /// Its size part.
        size: String,
    },
    /// `--fleet .../0`.
    #[error("{0:?}: a fleet has at least one copier")]
    FleetEmpty(String),
    /// `--fleet`'s copier is neither a number nor `host`.
    #[error("{value:?}: the copier {index:?} is neither a number nor `host`")]
    FleetIndex {
        /// The value.
        value: String,
        /// Its copier part.
        index: String,
    },
    /// `--fleet`'s copier is not below the fleet's size.
    #[error("{value:?}: copier {index} does not exist in a fleet of {size} (0 to {})", size - 1)]
    FleetIndexOutside {
        /// The value.
        value: String,
        /// The copier.
        index: u16,
        /// The fleet's size.
        size: u16,
    },
    /// `--map` without `=`.
    #[error("{0:?}: no '=': expected [ONLINE_IP:]PORT=TARGET_IP:PORT[@W][,...]")]
    MapTargetsForm(String),
    /// `--map`'s test servers do not parse.
    #[error("{value:?}: {reason}")]
    MapTargets {
        /// The value.
        value: String,
        /// What is wrong with its test servers.
        reason: String,
    },
    /// A map without `=`.
    #[error("{0:?}: no '=': expected [ONLINE_IP:]PORT=TARGET_IP:PORT, e.g. 80=198.18.1.2:8080")]
    MapForm(String),
    /// A map's online part is neither `PORT` nor `IP:PORT`.
    #[error(
        "{value:?}: online part {online:?} is neither PORT nor IP:PORT (IPv6 as [ADDR]:PORT): expected [ONLINE_IP:]PORT=TARGET_IP:PORT, e.g. 80=198.18.1.2:8080"
    )]
    MapOnline {
        /// The value.
        value: String,
        /// Its online part.
        online: String,
    },
    /// A map of online port 0.
    #[error("{0:?}: online port 0 cannot be copied")]
    MapPortZero(String),
    /// A map's online address is unspecified or multicast.
    #[error(
        "{value:?}: online address {ip} cannot be a service address; leave it out to copy any address"
    )]
    MapOnlineAddress {
        /// The value.
        value: String,
        /// The online address.
        ip: IpAddr,
    },
    /// A map's target is not `IP:PORT`.
    #[error(
        "{value:?}: target {target:?} is not IP:PORT (IPv6 as [ADDR]:PORT; host names are not resolved): expected [ONLINE_IP:]PORT=TARGET_IP:PORT, e.g. 80=198.18.1.2:8080"
    )]
    MapTarget {
        /// The value.
        value: String,
        /// Its target part.
        target: String,
    },
    /// A map's target is not a unicast address with a port.
    #[error("{value:?}: target {target} needs a unicast address and a port from 1 to 65535")]
    MapTargetUnicast {
        /// The value.
        value: String,
        /// The target.
        target: std::net::SocketAddr,
    },
    /// A rate or factor that is not a finite number above 0.
    #[error("{0:?} is not a number above 0")]
    Rate(String),
    /// A percentage that is no number.
    #[error("{0:?} is not a number (e.g. 50 or 12.5)")]
    PercentNumber(String),
    /// A percentage not above 0 and at most 100.
    #[error("{0:?} is not above 0 and at most 100")]
    PercentRange(String),
    /// A Unix time that is no number.
    #[error("{0:?} is not a Unix time in seconds (e.g. 1764480000.5)")]
    UnixTimeNumber(String),
    /// A Unix time out of range.
    #[error("{0:?} is not a Unix time in seconds")]
    UnixTimeRange(String),
}
