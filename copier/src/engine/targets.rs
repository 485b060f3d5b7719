//! Several test servers behind one map: which server a new session goes to, and whether each
//! server answers.
//!
//! Owns: [`WeightedTarget`] and its parser (`T1:80@3,T2:80@1`, the target part of `--map`),
//! [`MapTargets`] (a map with all its servers) and [`Targets`], the sans-IO chooser the engine
//! asks for every new copy ([`Targets::pick`]) and tells what it sees ([`Targets::on_started`]
//! when a copy starts on a server, [`Targets::on_answer`] when a server's segment comes back).
//!
//! Choice: smooth weighted round robin over the servers that are up (every server gets its
//! current weight added, the one with the largest current value is taken and loses the total),
//! so 3:1 gives exactly 3 of every 4 sessions to the first, interleaved, whatever the session
//! rate. A copy stays on the server it was given for its whole life (its connections and
//! reconnections all go there).
//!
//! Health, per server (address and port), with `down_after` ([`HealthConfig`]):
//! - *up* -> *down*: a copy started on it, and for `down_after` since then not one segment of
//!   it came back but resets (SYNs unanswered or refused, answers stopped). From then on its
//!   new sessions go to the others, by their weights; logged and counted ([`TargetEvent`]).
//! - *down* -> *up*: any segment of it but a reset comes back. While down, one copy every
//!   `retry` goes to it anyway as a probe (counted apart: [`TargetStats::probes`]); if the
//!   server is still down that copy is lost.
//! - every server of a map down: the copies keep their weighted turn over all of them (each
//!   acts as a probe), and [`TargetEvent::AllDown`] is raised once (cleared when one is back).
//!
//! Load, with `max_live` ([`HealthConfig`], 0: no limit): a server holding `max_live` live
//! copies (started and not done: a slow server keeps its copies longer) is overloaded: its new sessions go to the
//! map's other servers that are up and not overloaded, by weight; it takes sessions again once
//! it holds 3/4 of `max_live` or fewer. When every server of a map that is up is overloaded, a
//! new copy is not made at all ([`Targets::pick`] answers `None`, counted in
//! [`TargetStats::refused`]) rather than piling up on saturated servers, and
//! [`TargetEvent::AllOverloaded`] is raised once.
//!
//! Answer time, with `slow_after` ([`HealthConfig`], 0: off): every timed request unit's answer
//! time (sent to first answer byte, [`Targets::on_answer_time`]) moves the server's smoothed
//! answer time (exponential, [`ANSWER_SMOOTHING`]); past `slow_after` the server is slow
//! ([`TargetEvent::Slow`]) and takes no new sessions, like an overloaded one (a map whose every
//! server that is up is slow or overloaded makes no new copies), but for one probe copy every
//! `retry`; its first answer within 3/4 of `slow_after` (a probe's, or a live copy's) makes it
//! fast again ([`TargetEvent::Fast`]) and restarts the smoothing from that answer.
//!
//! Failures, with `fail_percent` ([`HealthConfig`], 0: off): every copy that ends says whether
//! its server failed it ([`Targets::on_outcome`]: refused, unacknowledged through every
//! retransmission, connections closed without answers) or it completed; the server's share of
//! failed copies is smoothed ([`FAIL_SMOOTHING`]) and past `fail_percent` (after at least five
//! outcomes) the server is failing ([`TargetEvent::Failing`]): it is treated as a slow one
//! (no new sessions while another server of the map can take them, one probe every `retry`)
//! until the share falls below half of `fail_percent` ([`TargetEvent::Sound`]).
//!
//! Invariants: a map's servers share one IP family; each server address has one health state
//! however many maps name it; with no answer ever expected (no copy started since its last
//! answer) a server stays as it is.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::map::PortMap;
use super::slot::SlotRef;

/// One test server of a map and its share of the sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeightedTarget {
    /// The test server.
    pub addr: SocketAddr,
    /// Its weight (1 or more): it gets `weight / sum of weights` of the sessions.
    pub weight: u32,
}

/// Largest weight accepted.
pub const MAX_WEIGHT: u32 = 1000;

/// Parse the target part of `--map`: `IP:PORT` (weight 1) or a list `IP:PORT@W,IP:PORT@W`
/// (IPv6 in brackets). Every server must be a unicast address with a port, all of one IP
/// family, none twice.
pub fn parse_targets(s: &str) -> Result<Vec<WeightedTarget>, String> {
    let mut out: Vec<WeightedTarget> = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let (addr, weight) = match part.rsplit_once('@') {
            Some((a, w)) => {
                let w: u32 = w
                    .trim()
                    .parse()
                    .map_err(|_| format!("weight {w:?} of {a:?} is not a whole number"))?;
                if w == 0 || w > MAX_WEIGHT {
                    return Err(format!("weight {w} of {a} is not from 1 to {MAX_WEIGHT}"));
                }
                (a.trim(), w)
            }
            None => (part, 1),
        };
        let addr: SocketAddr = addr.parse().map_err(|_| {
            format!(
                "target {addr:?} is not IP:PORT (IPv6 as [ADDR]:PORT; host names are not resolved)"
            )
        })?;
        if addr.port() == 0 || addr.ip().is_unspecified() || addr.ip().is_multicast() {
            return Err(format!(
                "target {addr} needs a unicast address and a port from 1 to 65535"
            ));
        }
        if let Some(first) = out.first() {
            if first.addr.is_ipv6() != addr.is_ipv6() {
                return Err(format!(
                    "targets {} and {addr} are of different IP families (one map per family: --map 80=T4 --map 80=[T6]:80)",
                    first.addr
                ));
            }
        }
        if out.iter().any(|t| t.addr == addr) {
            return Err(format!("target {addr} is given twice"));
        }
        out.push(WeightedTarget { addr, weight });
    }
    Ok(out)
}

/// A map with every test server it spreads over (`map.target` is the first of `targets`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapTargets {
    /// The map (its `target`: the first server).
    pub map: PortMap,
    /// The servers and weights, at least one.
    pub targets: Vec<WeightedTarget>,
}

/// When a server counts as down, and how often a down one is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthConfig {
    /// A server to which a copy was started and that sent nothing back (but resets) for this
    /// long is taken out.
    pub down_after: Duration,
    /// While out, one copy this often goes to it as a probe.
    pub retry: Duration,
    /// Live copies at which a server is overloaded (0: no limit).
    pub max_live: usize,
    /// Smoothed answer time above which a server is slow (0: off).
    pub slow_after: Duration,
    /// Percentage of failed copies (smoothed over its last sessions) above which a server is
    /// failing (0: off); see [`Targets::on_outcome`].
    pub fail_percent: u8,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            down_after: Duration::from_secs(3),
            retry: Duration::from_secs(5),
            max_live: 0,
            slow_after: Duration::ZERO,
            fail_percent: 0,
        }
    }
}

/// A change of a server's state, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetEvent {
    /// The server was taken out: `silent` is how long it had not answered a copy started on it.
    Down {
        /// The server.
        addr: SocketAddr,
        /// Since when no answer came while a copy waited.
        silent: Duration,
    },
    /// The server answers again and takes sessions.
    Up(SocketAddr),
    /// Every server of the map is down (the copies still go by weight, as probes).
    AllDown(PortMap),
    /// A server of the map is up again after [`TargetEvent::AllDown`].
    SomeUp(PortMap),
    /// The server holds `max_live` live copies: new sessions go elsewhere.
    Overloaded(SocketAddr),
    /// The server is down to 3/4 of `max_live` and takes sessions again.
    Relieved(SocketAddr),
    /// The server's smoothed answer time passed `slow_after`: new sessions go elsewhere.
    Slow {
        /// The server.
        addr: SocketAddr,
        /// Its smoothed answer time.
        answer: Duration,
    },
    /// A slow server answered within 3/4 of `slow_after`: it takes sessions again.
    Fast(SocketAddr),
    /// The server's smoothed share of failed copies passed `fail_percent`: new sessions go
    /// elsewhere.
    Failing {
        /// The server.
        addr: SocketAddr,
        /// Its smoothed share of failed copies, in percent.
        percent: u32,
    },
    /// A failing server's smoothed share of failed copies fell below half of `fail_percent`:
    /// it takes sessions again.
    Sound(SocketAddr),
    /// Every server of the map that is up is overloaded: new copies are not made.
    AllOverloaded(PortMap),
    /// A server of the map takes sessions again after [`TargetEvent::AllOverloaded`].
    SomeRelieved(PortMap),
}

/// What one server got, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetStats {
    /// The server.
    pub addr: SocketAddr,
    /// Its weight (the largest of the maps naming it).
    pub weight: u32,
    /// Whether it takes sessions now.
    pub up: bool,
    /// Copies started on it (probes included).
    pub sessions: u64,
    /// Copies sent to it as probes while it was down.
    pub probes: u64,
    /// Times it was taken out.
    pub downs: u64,
    /// Copies live on it now.
    pub live: usize,
    /// Whether it is overloaded (`max_live` reached).
    pub overloaded: bool,
    /// Whether it is slow (smoothed answer time above `slow_after`).
    pub slow: bool,
    /// Times it turned slow.
    pub slow_turns: u64,
    /// Copies on it that failed by its doing (refused, retransmissions unanswered, connections
    /// closed without answers).
    pub failures: u64,
    /// Whether it is failing (smoothed share of failed copies above `fail_percent`).
    pub failing: bool,
    /// Times it turned failing.
    pub failing_turns: u64,
    /// Copies not made because every server of their map was overloaded (counted on the
    /// map's first server).
    pub refused: u64,
    /// Request units timed on it that got an answer, and the sum of their answer times
    /// (send to first answer byte).
    pub answers: u64,
    /// Sum of the answer times counted in `answers`.
    pub answer_sum: Duration,
    /// The answer time smoothed over the last answers (exponential, weight
    /// `ANSWER_SMOOTHING` to the newest); `None` before the first.
    pub answer_smoothed: Option<Duration>,
}

/// The weight of the newest answer time in [`TargetStats::answer_smoothed`] (about the last
/// ten answers count).
pub const ANSWER_SMOOTHING: f64 = 0.1;

/// The weight of the newest session outcome in a server's share of failed copies (about the
/// last five count).
pub const FAIL_SMOOTHING: f64 = 0.2;

/// Outcomes a server must have had before it can be judged failing.
const FAIL_MIN_OUTCOMES: u32 = 5;

#[derive(Debug)]
struct Server {
    stats: TargetStats,
    /// The first copy started since its last answer (what `down_after` counts from).
    waiting_since: Option<Instant>,
    /// While down, slow or failing: when the next probe may go.
    next_probe: Option<Instant>,
    /// Its share of failed copies, smoothed ([`FAIL_SMOOTHING`]).
    fail_smoothed: f64,
    /// Session outcomes counted.
    outcomes: u32,
}

impl Server {
    /// Whether it takes no new sessions for its load (overloaded, slow or failing).
    fn busy(&self) -> bool {
        self.stats.overloaded || self.stats.slow || self.stats.failing
    }

    /// Whether it is probed while up (slow or failing).
    fn probed(&self) -> bool {
        self.stats.slow || self.stats.failing
    }
}

#[derive(Debug)]
struct Group {
    map: PortMap,
    /// (server index, weight, current value of the round robin).
    members: Vec<(usize, i64, i64)>,
    all_down: bool,
    all_overloaded: bool,
}

/// The servers of every map, their health and the round robin (see the module doc).
#[derive(Debug)]
pub struct Targets {
    cfg: HealthConfig,
    servers: Vec<Server>,
    groups: Vec<Group>,
    events: VecDeque<TargetEvent>,
    /// The server of the copy in each slot (`usize::MAX`: none) and that copy's slot
    /// generation, to count live copies: an outcome or an end that names a slot's earlier
    /// occupant (an event drained after the slot was reused) is not charged to the new one.
    by_slot: Vec<(usize, u32)>,
}

impl Targets {
    /// The servers of `maps`; a map absent from `spread` has its one `target`, weight 1.
    #[must_use]
    pub fn new(maps: &[PortMap], spread: &[MapTargets], cfg: HealthConfig) -> Targets {
        let mut t = Targets {
            cfg,
            servers: Vec::new(),
            groups: Vec::new(),
            events: VecDeque::new(),
            by_slot: Vec::new(),
        };
        for m in maps {
            let list = spread
                .iter()
                .find(|s| s.map == *m)
                .map(|s| s.targets.clone())
                .filter(|l| !l.is_empty())
                .unwrap_or_else(|| {
                    vec![WeightedTarget {
                        addr: m.target,
                        weight: 1,
                    }]
                });
            let mut members = Vec::new();
            for w in list {
                let i = t.server_index(w.addr).unwrap_or_else(|| {
                    t.servers.push(Server {
                        stats: TargetStats {
                            addr: w.addr,
                            weight: 0,
                            up: true,
                            sessions: 0,
                            probes: 0,
                            downs: 0,
                            live: 0,
                            overloaded: false,
                            slow: false,
                            slow_turns: 0,
                            failures: 0,
                            failing: false,
                            failing_turns: 0,
                            refused: 0,
                            answers: 0,
                            answer_sum: Duration::ZERO,
                            answer_smoothed: None,
                        },
                        waiting_since: None,
                        next_probe: None,
                        fail_smoothed: 0.0,
                        outcomes: 0,
                    });
                    t.servers.len() - 1
                });
                t.servers[i].stats.weight = t.servers[i].stats.weight.max(w.weight);
                members.push((i, i64::from(w.weight.max(1)), 0));
            }
            t.groups.push(Group {
                map: *m,
                members,
                all_down: false,
                all_overloaded: false,
            });
        }
        t
    }

    fn server_index(&self, addr: SocketAddr) -> Option<usize> {
        self.servers.iter().position(|s| s.stats.addr == addr)
    }

    /// The server a new copy under `map` goes to (see the module doc); `map.target` for a map
    /// this chooser does not know; `None` when every server of the map that is up is
    /// overloaded or slow (the copy is not to be made). Does not count the copy: call
    /// [`Targets::on_started`] once it started there.
    pub fn pick(&mut self, now: Instant, map: &PortMap) -> Option<SocketAddr> {
        self.check(now);
        let Some(g) = self.groups.iter().position(|g| g.map == *map) else {
            return Some(map.target);
        };
        // A slow server whose probe is due takes this copy (its answer time is measured again).
        for &(i, _, _) in &self.groups[g].members {
            let s = &mut self.servers[i];
            if s.stats.up && s.probed() && s.next_probe.is_some_and(|t| t <= now) {
                s.next_probe = Some(now + self.cfg.retry);
                s.stats.probes += 1;
                return Some(s.stats.addr);
            }
        }
        let servers = &self.servers;
        let busy = |i: usize| servers[i].stats.up && servers[i].busy();
        let all_busy = self.groups[g]
            .members
            .iter()
            .all(|&(i, _, _)| busy(i) || !servers[i].stats.up)
            && self.groups[g].members.iter().any(|&(i, _, _)| busy(i));
        if all_busy {
            let first = self.groups[g].members[0].0;
            self.servers[first].stats.refused += 1;
            if !self.groups[g].all_overloaded {
                self.groups[g].all_overloaded = true;
                push(&mut self.events, TargetEvent::AllOverloaded(*map));
            }
            return None;
        }
        if self.groups[g].all_overloaded {
            self.groups[g].all_overloaded = false;
            push(&mut self.events, TargetEvent::SomeRelieved(*map));
        }
        if self.groups[g].members.len() == 1 {
            return Some(map.target);
        }
        // A down server whose probe is due takes this copy.
        for &(i, _, _) in &self.groups[g].members {
            let s = &mut self.servers[i];
            if !s.stats.up && !self.groups[g].all_down && s.next_probe.is_some_and(|t| t <= now) {
                s.next_probe = Some(now + self.cfg.retry);
                s.stats.probes += 1;
                return Some(s.stats.addr);
            }
        }
        let servers = &self.servers;
        let group = &mut self.groups[g];
        let any_up = group.members.iter().any(|&(i, _, _)| servers[i].stats.up);
        let fits = |i: usize| !any_up || (servers[i].stats.up && !servers[i].busy());
        let mut total = 0;
        let mut best: Option<(usize, i64)> = None;
        for (k, m) in group.members.iter_mut().enumerate() {
            if !fits(m.0) {
                continue;
            }
            m.2 += m.1;
            total += m.1;
            if best.is_none_or(|(_, v)| m.2 > v) {
                best = Some((k, m.2));
            }
        }
        let b = best.map_or(0, |(k, _)| k);
        group.members[b].2 -= total;
        Some(self.servers[group.members[b].0].stats.addr)
    }

    /// A copy started on `addr` in session slot `slot`: an answer from it is now expected,
    /// and it counts as live there until [`Targets::on_ended`].
    pub(crate) fn on_started(&mut self, now: Instant, addr: SocketAddr, slot: SlotRef) {
        let Some(i) = self.server_index(addr) else {
            return;
        };
        let s = &mut self.servers[i];
        s.stats.sessions += 1;
        s.waiting_since.get_or_insert(now);
        s.stats.live += 1;
        if self.cfg.max_live > 0 && !s.stats.overloaded && s.stats.live >= self.cfg.max_live {
            s.stats.overloaded = true;
            push(&mut self.events, TargetEvent::Overloaded(addr));
        }
        let k = slot.idx as usize;
        if self.by_slot.len() <= k {
            self.by_slot.resize(k + 1, (usize::MAX, 0));
        }
        let (held, gen) = self.by_slot[k];
        if held != usize::MAX {
            self.on_ended(SlotRef { idx: slot.idx, gen });
        }
        self.by_slot[k] = (i, slot.gen);
    }

    /// The copy in session slot `slot` is done (it may still linger; again when its slot is
    /// freed: counted once).
    pub(crate) fn on_ended(&mut self, slot: SlotRef) {
        let Some(x) = self
            .by_slot
            .get_mut(slot.idx as usize)
            .filter(|x| x.0 != usize::MAX && x.1 == slot.gen)
        else {
            return;
        };
        let i = std::mem::replace(&mut x.0, usize::MAX);
        let Some(s) = self.servers.get_mut(i) else {
            return;
        };
        s.stats.live = s.stats.live.saturating_sub(1);
        if s.stats.overloaded && s.stats.live <= self.cfg.max_live * 3 / 4 {
            s.stats.overloaded = false;
            push(&mut self.events, TargetEvent::Relieved(s.stats.addr));
        }
    }

    /// A segment of `addr` came back; `reset` when it was a reset (which proves nothing: a
    /// stopped server's host resets its SYNs).
    pub fn on_answer(&mut self, now: Instant, addr: SocketAddr, reset: bool) {
        if reset {
            return;
        }
        let Some(i) = self.server_index(addr) else {
            return;
        };
        let s = &mut self.servers[i];
        s.waiting_since = None;
        if !s.stats.up {
            s.stats.up = true;
            // Still slow or failing: probed as such.
            s.next_probe = s.probed().then(|| now + self.cfg.retry);
            push(&mut self.events, TargetEvent::Up(addr));
            self.refresh_groups();
        }
    }

    /// A bare ACK (no SYN, FIN or data) of `addr` came back. It keeps a server that is in as
    /// heard from (a long upload's server sends nothing else), but it does not bring one that
    /// was taken out back in: a stopped server's host answers a SYN that meets one of its
    /// TIME_WAIT connections with a bare ACK, which proves nothing, as a reset proves nothing.
    pub fn on_bare_ack(&mut self, addr: SocketAddr) {
        if let Some(i) = self.server_index(addr) {
            let s = &mut self.servers[i];
            if s.stats.up {
                s.waiting_since = None;
            }
        }
    }

    /// A request unit timed on `addr` got its first answer byte `took` after it was sent
    /// (at `now`): the smoothed answer time, and with `slow_after` the slow state: slow when
    /// the smoothed time passes it, fast again at the first answer within 3/4 of it (the
    /// smoothed time then starts again from that answer).
    pub fn on_answer_time(&mut self, now: Instant, addr: SocketAddr, took: Duration) {
        let Some(i) = self.server_index(addr) else {
            return;
        };
        let limit = self.cfg.slow_after;
        let srv = &mut self.servers[i];
        let s = &mut srv.stats;
        s.answers += 1;
        s.answer_sum = s.answer_sum.saturating_add(took);
        let smoothed = match s.answer_smoothed {
            None => took,
            Some(_) if s.slow && took <= limit * 3 / 4 => took,
            Some(old) => old.mul_f64(1.0 - ANSWER_SMOOTHING) + took.mul_f64(ANSWER_SMOOTHING),
        };
        s.answer_smoothed = Some(smoothed);
        if limit.is_zero() {
            return;
        }
        if !s.slow && smoothed > limit {
            s.slow = true;
            s.slow_turns += 1;
            srv.next_probe = Some(now + self.cfg.retry);
            push(
                &mut self.events,
                TargetEvent::Slow {
                    addr,
                    answer: smoothed,
                },
            );
        } else if s.slow && took <= limit * 3 / 4 {
            s.slow = false;
            if s.up && !s.failing {
                srv.next_probe = None;
            }
            push(&mut self.events, TargetEvent::Fast(addr));
        }
    }

    /// The copy in session slot `slot` ended: `failed` when by its server's doing (it refused
    /// the connection, left segments unacknowledged through every retransmission, or kept
    /// closing connections without answering), not when it completed. Outcomes that say nothing
    /// of the server (shed for memory, the client gone quiet, a shutdown) are not reported. With
    /// `fail_percent`, a server whose smoothed share of failed copies passes it is failing: like
    /// a slow one it takes no new sessions while another server of its map can, but for one
    /// probe every `retry`; it takes sessions again when the share falls below half of it.
    pub(crate) fn on_outcome(&mut self, now: Instant, slot: SlotRef, failed: bool) {
        let Some(&(i, _)) = self
            .by_slot
            .get(slot.idx as usize)
            .filter(|x| x.1 == slot.gen)
        else {
            return;
        };
        let Some(srv) = self.servers.get_mut(i) else {
            return;
        };
        srv.stats.failures += u64::from(failed);
        srv.fail_smoothed =
            srv.fail_smoothed * (1.0 - FAIL_SMOOTHING) + if failed { FAIL_SMOOTHING } else { 0.0 };
        srv.outcomes = srv.outcomes.saturating_add(1);
        if self.cfg.fail_percent == 0 {
            return;
        }
        let limit = f64::from(self.cfg.fail_percent) / 100.0;
        let s = &mut srv.stats;
        if !s.failing && srv.outcomes >= FAIL_MIN_OUTCOMES && srv.fail_smoothed > limit {
            s.failing = true;
            s.failing_turns += 1;
            srv.next_probe = Some(now + self.cfg.retry);
            let percent = (srv.fail_smoothed * 100.0).round() as u32;
            push(
                &mut self.events,
                TargetEvent::Failing {
                    addr: s.addr,
                    percent,
                },
            );
        } else if s.failing && srv.fail_smoothed < limit / 2.0 {
            s.failing = false;
            if s.up && !s.slow {
                srv.next_probe = None;
            }
            push(&mut self.events, TargetEvent::Sound(s.addr));
        }
    }

    /// Take out the servers silent for `down_after` (also done by [`Targets::pick`]).
    pub fn check(&mut self, now: Instant) {
        let mut changed = false;
        for s in &mut self.servers {
            let Some(since) = s.waiting_since else {
                continue;
            };
            if s.stats.up && now.saturating_duration_since(since) >= self.cfg.down_after {
                s.stats.up = false;
                s.stats.downs += 1;
                s.next_probe = Some(now + self.cfg.retry);
                // Counting starts again with the next copy (a probe).
                s.waiting_since = None;
                push(
                    &mut self.events,
                    TargetEvent::Down {
                        addr: s.stats.addr,
                        silent: now - since,
                    },
                );
                changed = true;
            }
        }
        if changed {
            self.refresh_groups();
        }
    }

    fn refresh_groups(&mut self) {
        for g in &mut self.groups {
            let all_down = g.members.iter().all(|&(i, _, _)| !self.servers[i].stats.up);
            if all_down != g.all_down {
                g.all_down = all_down;
                push(
                    &mut self.events,
                    if all_down {
                        TargetEvent::AllDown(g.map)
                    } else {
                        TargetEvent::SomeUp(g.map)
                    },
                );
            }
        }
    }

    /// The next change to log.
    pub fn poll_event(&mut self) -> Option<TargetEvent> {
        self.events.pop_front()
    }

    /// Every server's counters and state.
    pub fn stats(&self) -> impl Iterator<Item = &TargetStats> {
        self.servers.iter().map(|s| &s.stats)
    }

    /// Maps whose servers are all down now.
    pub fn all_down(&self) -> impl Iterator<Item = &PortMap> {
        self.groups.iter().filter(|g| g.all_down).map(|g| &g.map)
    }

    /// Maps whose servers that are up are all overloaded (as of the last copy asked for).
    pub fn all_overloaded(&self) -> impl Iterator<Item = &PortMap> {
        self.groups
            .iter()
            .filter(|g| g.all_overloaded)
            .map(|g| &g.map)
    }
}

/// Queue a change to log (the oldest goes past 256 unread: nothing grows unbounded when nobody
/// polls).
fn push(events: &mut VecDeque<TargetEvent>, ev: TargetEvent) {
    if events.len() >= 256 {
        events.pop_front();
    }
    events.push_back(ev);
}

#[cfg(test)]
mod tests;
