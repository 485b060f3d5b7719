//! The checks that run before anything starts: [`CopierArgs::validate`] turns the flags into
//! the configurations of the engine, capture, sender and control clients (or says which flag is
//! wrong: a [`FlagError`]), and the cross-checks of the maps and of the test servers' addresses.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::capture::CaptureConfig;
use crate::engine::{ClientIpPool, EngineConfig, HealthConfig, PortMap};
use crate::offline::OfflineConfig;
use crate::routing::InterceptAddr;
use crate::send::SendConfig;

use super::error::FlagError;
use super::parse::fleet_share;
use super::{CopierArgs, GsoMode, PacingMode};

/// Everything the binary needs, checked.
#[derive(Debug)]
pub struct Validated {
    /// The engine's configuration.
    pub engine: EngineConfig,
    /// The capture's.
    pub capture: CaptureConfig,
    /// The sender's.
    pub send: SendConfig,
    /// The intercepts.
    pub intercepts: Vec<InterceptAddr>,
    /// The shared secret, `None` with `--no-secret`.
    pub secret: Option<Arc<[u8]>>,
    /// The seed.
    pub seed: u64,
    /// Metrics listener.
    pub metrics: Option<SocketAddr>,
    /// The file to replay instead of capturing (`--offline`).
    pub offline: Option<OfflineConfig>,
    /// The mirror to read instead of capturing (`--mirror`, with `--vni`).
    pub mirror: Option<crate::mirror::MirrorConfig>,
    /// Engine threads to run (1 with `--offline`, whatever `--workers` said).
    pub workers: u16,
    /// The test server addresses each intercept guards (`None`: all), in `intercepts`' order.
    pub intercept_serves: Vec<Option<Vec<IpAddr>>>,
    /// The run trace to write.
    pub trace: Option<crate::trace::TraceConfig>,
    /// The closed loop on the rate (its `part` is for one engine thread: 1 / workers).
    pub rate: Option<crate::rate::RateConfig>,
    /// The archive (`--record`).
    pub record: Option<crate::record::RecordConfig>,
    /// The comparison (`--compare`).
    pub shadow: Option<crate::shadow::ShadowConfig>,
}

impl CopierArgs {
    /// Check every flag and build the configurations; `seed` is used when `--seed` is absent.
    /// Reads the secret file; opens nothing else.
    pub fn validate(&self, seed: u64) -> Result<Validated, FlagError> {
        let client_ip = match self.client_ip.len() {
            0 => None,
            _ => Some(
                ClientIpPool::join(self.client_ip.iter().cloned()).map_err(FlagError::ClientIp)?,
            ),
        };
        let maps: Vec<PortMap> = self.maps.iter().map(|m| m.map).collect();
        // One map per server, to check every server's address.
        let every_target: Vec<PortMap> = self
            .maps
            .iter()
            .flat_map(|m| {
                m.targets.iter().map(|t| PortMap {
                    target: t.addr,
                    ..m.map
                })
            })
            .chain(self.baseline_maps.iter().copied())
            .collect();
        check_maps(&maps, client_ip.as_ref())?;
        let profile = match &self.profile {
            None => None,
            Some(path) => {
                let ctx = |e: &dyn std::fmt::Display| FlagError::Profile {
                    path: path.clone(),
                    reason: e.to_string(),
                };
                let p = shaper::Profile::load(path).map_err(|e| ctx(&e))?;
                p.validate().map_err(|e| ctx(&e))?;
                // Builds the plan and the users once, so that a profile the engine cannot
                // use is refused here.
                shaper::Shaper::new(&p, 0).map_err(|e| ctx(&e))?;
                Some(Arc::new(p))
            }
        };
        // A closed loop needs a factor to move: without a profile, one of factor 1.
        let profile = match (profile, self.target_rate) {
            (None, Some(_)) => Some(Arc::new(shaper::Profile::default())),
            (p, _) => p,
        };
        let rules = match &self.rules {
            None => None,
            Some(path) => Some(Arc::new(
                crate::engine::Rules::load(path).map_err(FlagError::Rules)?,
            )),
        };
        let engine = EngineConfig {
            profile,
            rules,
            maps: maps.clone(),
            spread: self
                .maps
                .iter()
                .filter(|m| m.targets.len() > 1)
                .cloned()
                .collect(),
            health: HealthConfig {
                down_after: self.target_down_after,
                retry: self.target_retry,
                max_live: self.target_max_live,
                slow_after: self.target_slow_after,
                fail_percent: self.target_fail_rate,
            },
            baselines: self.baseline_maps.clone(),
            mtu: self.mtu,
            gso: self.gso == GsoMode::Auto,
            client_ip,
            copies: self.copies,
            sample_percent: self.sample,
            session_timeout: self.session_timeout,
            per_session_cap: usize::try_from(self.session_buffer)
                .unwrap_or(usize::MAX)
                .max(64 << 10),
            idle_timeout: self.idle_timeout,
            unproven_timeout: self.unproven_timeout,
            max_memory: usize::try_from(self.max_memory)
                .map_err(|_| FlagError::MaxMemoryTooLarge)?,
            pace_requests: !self.no_pacing && self.pacing != PacingMode::Off,
            pace_window: if self.pacing == PacingMode::Strict {
                1
            } else {
                self.pace_window
            },
            ack_delay: self.ack_delay,
            max_sessions: self.max_sessions,
            max_pending_syns: self.max_pending_syns,
            syn_timeout: self.syn_timeout,
            ..EngineConfig::default()
        };
        check_targets_not_local(&every_target, &local_addresses()?)?;
        if self.target_down_after < Duration::from_millis(100)
            || self.target_retry < Duration::from_millis(100)
        {
            return Err(FlagError::HealthTooFast);
        }
        if self.session_timeout < Duration::from_secs(1) {
            return Err(FlagError::SessionTimeout(self.session_timeout));
        }
        if let Some(t) = self.idle_timeout.filter(|t| *t < Duration::from_secs(1)) {
            return Err(FlagError::IdleTimeout(t));
        }
        if self.unproven_timeout < Duration::from_secs(1) {
            return Err(FlagError::UnprovenTimeout(self.unproven_timeout));
        }
        if engine.max_memory < 1 << 20 {
            return Err(FlagError::MaxMemoryTooSmall(engine.max_memory));
        }
        let one_worker = self.offline.is_some() || self.mirror.is_some();
        let workers = if one_worker { 1 } else { self.workers.max(1) };
        let fleet = match self.fleet {
            None => crate::engine::FleetShare::default(),
            Some(f) => {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
                let share = fleet_share(f, host.trim());
                if f.index.is_none() {
                    tracing::info!(
                        "--fleet host/{}: host {:?} is copier {share}",
                        f.size,
                        host.trim()
                    );
                }
                share
            }
        };
        let engine = EngineConfig {
            per_session_cap: engine.per_session_cap.min(engine.max_memory),
            port_share: crate::engine::PortShare {
                index: 0,
                count: workers,
                fleet,
            },
            ..engine
        };
        engine.validate().map_err(FlagError::Engine)?;
        if fleet.is_split() {
            let (first, last) = fleet.ports();
            let each = engine.port_share.size();
            tracing::info!("--fleet {fleet}: this copier's test client ports are {first}-{last} ({each} per worker)");
            if each < crate::engine::FEW_SHARE_PORTS {
                tracing::warn!(
                    "--fleet {fleet} with --workers {workers} leaves each worker {each} test ports per client address \
                     and test server: one client address with more connections at once finds no free port \
                     (copier_sessions_no_tuple_total); a smaller fleet or fewer workers leave more"
                );
            }
        }

        let page = 4096u64;
        if self.ring_block_size < 64 * 1024
            || self.ring_block_size % page != 0
            || self.ring_block_size > 1 << 30
        {
            return Err(FlagError::RingBlockSize(self.ring_block_size));
        }
        if let Some(name) = &self.interface {
            if name.is_empty() || name.len() >= 16 || name.contains(['/', ' ', '\0']) {
                return Err(FlagError::Interface(name.clone()));
            }
        }
        let capture = CaptureConfig {
            interface: self.interface.clone(),
            block_size: self.ring_block_size as u32,
            block_count: self.ring_blocks,
            initial_blocks: self.ring_start_blocks.min(self.ring_blocks),
            ..CaptureConfig::default()
        };
        let secret = match (&self.secret_file, self.no_secret) {
            (_, true) => None,
            (Some(path), false) => {
                let s = common::proto::auth::load_secret(path).map_err(FlagError::SecretFile)?;
                warn_if_readable_by_others(path);
                Some(Arc::from(s))
            }
            (None, false) => return Err(FlagError::NoSecret),
        };
        let mut intercepts = Vec::new();
        for i in &self.intercepts {
            if intercepts.contains(i) {
                return Err(FlagError::InterceptTwice(i.clone()));
            }
            intercepts.push(i.clone());
        }
        let target_ips: Vec<IpAddr> = every_target.iter().map(|m| m.target.ip()).collect();
        let intercept_serves = crate::routing::plan(&intercepts, &self.intercept_for, &target_ips)
            .map_err(FlagError::InterceptFor)?;
        if self
            .trace_every
            .is_some_and(|d| d < Duration::from_millis(10))
        {
            return Err(FlagError::TraceEvery);
        }
        let trace = self.trace.as_ref().map(|path| crate::trace::TraceConfig {
            path: path.clone(),
            every: self.trace_every,
            sources: engine.profile.as_ref().is_some_and(|p| p.onoff.enabled),
        });
        let engine = EngineConfig {
            intercepts_for: crate::routing::serving_counts(&intercept_serves, &target_ips),
            trace: self.trace.is_some(),
            ..engine
        };
        let record = match &self.record {
            None => None,
            Some(dir) => {
                common::private::create_dir_all(dir).map_err(|error| FlagError::RecordDir {
                    dir: dir.clone(),
                    error,
                })?;
                let max_file = self.record_size / u64::from(self.record_files);
                if max_file < 1 << 16 {
                    return Err(FlagError::RecordSize {
                        size: self.record_size,
                        files: self.record_files,
                    });
                }
                Some(crate::record::RecordConfig {
                    dir: dir.clone(),
                    max_file,
                    max_files: self.record_files as usize,
                    max_age: self.record_max_age,
                })
            }
        };
        let shadow = self.shadow_config(&capture)?;
        Ok(Validated {
            shadow,
            record,
            engine,
            capture,
            send: SendConfig {
                mtu: self.mtu,
                gso: self.gso == GsoMode::Auto,
                ..SendConfig::default()
            },
            intercepts,
            intercept_serves,
            trace,
            rate: self.target_rate.map(|rate| crate::rate::RateConfig {
                rate,
                part: 1.0 / f64::from(workers),
                max_factor: self.max_factor,
                gain: crate::rate::DEFAULT_GAIN,
            }),
            secret,
            seed: self.seed.unwrap_or(seed),
            metrics: self.metrics,
            workers,
            mirror: self.mirror.clone().map(|m| crate::mirror::MirrorConfig {
                vnis: self.vni.clone().map(|v| v.0).unwrap_or_default(),
                ..m
            }),
            offline: self.offline.as_ref().map(|path| OfflineConfig {
                speed: self.speed,
                loops: self.loops,
                max_gap: self.max_gap,
                from: self.from,
                until: self.until,
                ..OfflineConfig::new(path.clone())
            }),
        })
    }
}

impl CopierArgs {
    /// The comparison's configuration from the `--compare*` flags (None without `--compare`).
    fn shadow_config(
        &self,
        capture: &CaptureConfig,
    ) -> Result<Option<crate::shadow::ShadowConfig>, FlagError> {
        use crate::shadow::{LogConfig, ShadowConfig, ShadowMap};
        if !self.compare {
            if !self.baseline_maps.is_empty() {
                return Err(FlagError::BaselineWithoutCompare);
            }
            return Ok(None);
        }
        let mut maps = Vec::new();
        for m in &self.maps {
            if m.targets.len() > 1 {
                return Err(FlagError::CompareSpread(m.map));
            }
            let m = &m.map;
            let baseline = self
                .baseline_maps
                .iter()
                .find(|b| b.online_port == m.online_port && b.online_ip == m.online_ip);
            if let Some(b) = baseline {
                if b.target.is_ipv4() != m.target.is_ipv4() || b.target == m.target {
                    return Err(FlagError::BaselineTarget {
                        baseline: *b,
                        candidate: m.target,
                    });
                }
            }
            maps.push(ShadowMap {
                online: m.online_ip,
                port: m.online_port,
                candidate: m.target,
                baseline: baseline.map(|b| b.target),
            });
        }
        for b in &self.baseline_maps {
            if !maps
                .iter()
                .any(|m| m.port == b.online_port && m.online == b.online_ip)
            {
                return Err(FlagError::BaselineWithoutMap(*b));
            }
        }
        let max_message = usize::try_from(self.compare_bytes).unwrap_or(usize::MAX);
        if max_message < 1024 {
            return Err(FlagError::CompareBytes(self.compare_bytes));
        }
        let compare = compare::CompareConfig {
            ignore: self
                .compare_ignore
                .iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            limits: compare::http::Limits {
                max_body: max_message,
            },
            redact: compare::redact::Redact::from_list(&self.compare_redact),
            ..compare::CompareConfig::default()
        };
        let baseline = maps.iter().any(|m| m.baseline.is_some());
        let flows = compare::flows::FlowConfig {
            max_message,
            pair_timeout: self.compare_timeout,
            max_pending_bytes: usize::try_from(self.compare_memory).unwrap_or(usize::MAX),
            max_bytes: usize::try_from(self.compare_memory).unwrap_or(usize::MAX),
            baseline,
            sample: self.compare_sample / 100.0,
            port: self.maps.first().map_or(0, |m| m.map.online_port),
            ..compare::flows::FlowConfig::default()
        };
        let log = self.compare_log.as_ref().map(|path| LogConfig {
            path: path.clone(),
            max_bytes: self.compare_log_size,
            keep: self.compare_log_keep,
            sample: self.compare_log_sample / 100.0,
        });
        // the comparison's ring: a fixed 16 MiB of the capture's block size
        let blocks = ((16u64 << 20) / u64::from(capture.block_size)).max(2) as u32;
        let capture = CaptureConfig {
            block_count: blocks,
            initial_blocks: blocks,
            ..capture.clone()
        };
        // Offline and mirrored, both directions reach the comparison through its tap.
        let offline = self.offline.is_some() || self.mirror.is_some();
        Ok(Some(ShadowConfig {
            maps,
            flows,
            compare,
            log,
            capture,
            tick: Duration::from_secs(10),
            offline,
        }))
    }
}

fn warn_if_readable_by_others(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(path) {
        if m.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                "secret file {} is readable by group or others; chmod 600 it",
                path.display()
            );
        }
    }
}

/// Cross-checks of the maps: no port mapped twice for the same online address, no port mapped
/// both for any address and for a given one (which would win is not obvious), families that
/// can work.
///
/// A port without an online address may have one map per target family: the engine sends a
/// client to the map of its own family (`--map 80=198.18.2.2:80 --map 80=[fd00::2]:80`), and
/// to the other one only through a `--client-ip` range, which every target must share anyway.
pub fn check_maps(maps: &[PortMap], pool: Option<&ClientIpPool>) -> Result<(), FlagError> {
    // Key: port, online address, and for maps of any address the target's family.
    type Key = (u16, Option<IpAddr>, Option<bool>);
    let key = |m: &PortMap| -> Key {
        let fam = m.online_ip.is_none().then(|| m.target.is_ipv6());
        (m.online_port, m.online_ip, fam)
    };
    let mut seen: BTreeMap<Key, &PortMap> = BTreeMap::new();
    for m in maps {
        if let Some(prev) = seen.get(&key(m)) {
            let (first, second) = (**prev, *m);
            return Err(if m.online_ip.is_none() {
                FlagError::SamePortAndFamily { first, second }
            } else {
                FlagError::SamePort { first, second }
            });
        }
        seen.insert(key(m), m);
    }
    for m in maps {
        if m.online_ip.is_some() {
            let any = [false, true]
                .into_iter()
                .find_map(|v6| seen.get(&(m.online_port, None, Some(v6))));
            if let Some(any) = any {
                return Err(FlagError::AnyOverlaps {
                    any: **any,
                    given: *m,
                });
            }
        }
        match (m.online_ip, pool) {
            (_, Some(p)) if !p.serves(m.target.is_ipv6()) => {
                return Err(FlagError::PoolFamily {
                    pool: p.clone(),
                    map: *m,
                });
            }
            (Some(ip), None) if ip.is_ipv6() != m.target.is_ipv6() => {
                return Err(FlagError::MapFamilies(*m));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The addresses of this host's interfaces (loopback included).
pub fn local_addresses() -> Result<Vec<IpAddr>, FlagError> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(FlagError::LocalAddresses)?;
    Ok(addrs
        .filter_map(|a| a.address)
        .filter_map(|sa| {
            sa.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| sa.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect())
}

/// Refuse a map whose target is this host itself (one of `local`, any loopback or the
/// unspecified address): the copies would go to the production host.
pub fn check_targets_not_local(maps: &[PortMap], local: &[IpAddr]) -> Result<(), FlagError> {
    for m in maps {
        let ip = m.target.ip();
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        if ip.is_loopback() || ip.is_unspecified() || local.contains(&ip) {
            return Err(FlagError::TargetIsLocal {
                map: *m,
                ip: m.target.ip(),
            });
        }
    }
    Ok(())
}
