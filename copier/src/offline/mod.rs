//! Offline replay (`copier --offline FILE`): the engine is fed from a pcap or pcapng file
//! instead of the live capture ring.
//!
//! Owns: the sans-IO decisions ([`pace`]: when each packet is due, which packets are client ->
//! service packets of a mapped service, which client port each pass uses; [`window`]: which
//! sessions a time slice keeps), and [`Replay`], the
//! thin I/O layer the engine thread drives: it opens the file (again for each pass), reads
//! ahead one accepted packet, hands it over once it is due, reports skipped records, and draws
//! a progress line on a terminal. Reading the file (formats, link headers, truncation, garbage)
//! is `common::pcap`'s, re-exported here.
//!
//! Time: the replay clock starts when [`Replay::start`] is called (the engine thread calls it
//! once an intercept is connected, so the first sessions are not lost for want of one). A packet
//! is due at `start + Pacer::schedule(ts)`: gaps of the capture longer than `--max-gap` are cut
//! to it, then divided by `--speed`. Only accepted packets are scheduled, so a stretch of the
//! file with nothing to copy (answers, other ports) counts as idle. A packet the loop reaches late is handed over at once; the
//! schedule does not slip, so a late stretch is followed by a burst until it is back on time.
//!
//! Loops: pass `k` of `--loop N` replays the file again with client ports moved
//! ([`LoopPorts`]), so every pass is a new set of sessions for the test server.
//!
//! Comparison (`--compare`, [`Replay::tap`]): the file's both directions of the mapped ports
//! are also copied, as they are read and before the client -> service filter, for the
//! comparison thread ([`Replay::take_tapped`]): the client's packets at their due time, the
//! service's answers at the due time of the client packet read before them plus their capture
//! distance from it (not divided by `--speed`: the online answer time stays the captured one).
//! Both follow `--loop`'s port moves and `--from`/`--until`'s slice.
//!
//! Invariants: [`Replay::feed`] hands over at most `max` packets, each at or after its due
//! time, each an IP packet accepted by the [`PortFilter`]; it never panics on the file's
//! content. An I/O error of the file ends the replay (reported by [`ReplayStats::error`]).

pub mod pace;
pub mod window;

#[cfg(test)]
mod tests;

use std::fmt;
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::wire::{set_destination_port, set_source_port};

use crate::engine::PortMap;

pub use common::pcap::{
    Event, LinkLayerError, LinkType, Packet, ReadError, ReadStats, Reader, Skip, SkipKind,
};
pub use pace::{Accepted, LoopPorts, Pacer, PortFilter, Speed};

/// Problems shown one by one (per run); past this many they are only counted.
const MAX_MESSAGES: u64 = 20;
/// How often the progress line is redrawn.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);
/// How far a due time may lie ahead (guards `Instant` arithmetic against absurd schedules).
const FAR: Duration = Duration::from_secs(100 * 365 * 86400);

/// What to replay, and how.
#[derive(Clone, Debug, PartialEq)]
pub struct OfflineConfig {
    /// The pcap or pcapng file.
    pub path: PathBuf,
    /// Time compression.
    pub speed: Speed,
    /// Passes over the file (at least 1).
    pub loops: u32,
    /// Longest gap between two replayed packets, in capture time.
    pub max_gap: Duration,
    /// Draw a progress line on stderr (set when stderr is a terminal).
    pub progress: bool,
    /// Only sessions whose SYN was captured at or after this Unix time (`--from`).
    pub from: Option<Duration>,
    /// ... and before this one (`--until`).
    pub until: Option<Duration>,
}

impl OfflineConfig {
    /// A configuration with the command line's defaults; the progress line follows whether
    /// stderr is a terminal.
    #[must_use]
    pub fn new(path: PathBuf) -> OfflineConfig {
        OfflineConfig {
            path,
            speed: Speed::Factor(1.0),
            loops: 1,
            max_gap: Duration::from_secs(1),
            progress: std::io::stderr().is_terminal(),
            from: None,
            until: None,
        }
    }
}

/// Why the file cannot be replayed.
#[derive(Debug, thiserror::Error)]
#[error("--offline {}: {source}", path.display())]
pub struct OpenError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub source: ReadError,
}

/// Counters of a replay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// The reader's counters, over every pass.
    pub read: ReadStats,
    /// Passes read to the end.
    pub passes: u32,
    /// Packets handed to the engine.
    pub fed: u64,
    /// Their bytes.
    pub fed_bytes: u64,
    /// IP packets that are not client -> service packets of a mapped service.
    pub filtered: u64,
    /// Packets of sessions outside the time slice (`--from`, `--until`).
    pub outside_slice: u64,
    /// Times a later pass found no free client port for an address and reused one.
    pub ports_exhausted: u64,
    /// With `--compare`: the services' answer packets of the replayed sessions (those of the
    /// sampled sessions go to the comparison).
    pub answers: u64,
    /// How long the replay took, from [`Replay::start`] to the last packet handed over.
    pub elapsed: Option<Duration>,
    /// The I/O error that ended the replay early, if any.
    pub error: Option<String>,
}

impl fmt::Display for ReplayStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.read;
        write!(
            f,
            "replayed {} pass(es) in {:.1}s: {} records, {} packets fed to the engine, {} not for a mapped service, \
             {} not IP, {} cut by the snap length, {} malformed, {} truncated, {} garbled ({} bytes skipped)",
            self.passes,
            self.elapsed.unwrap_or_default().as_secs_f64(),
            r.records,
            self.fed,
            self.filtered,
            r.not_ip,
            r.snapped,
            r.malformed,
            r.truncated,
            r.garbled,
            r.garbage_bytes,
        )?;
        if self.outside_slice > 0 {
            write!(f, ", {} outside the time slice", self.outside_slice)?;
        }
        if self.answers > 0 {
            write!(
                f,
                ", {} online answer packets read for the comparison",
                self.answers
            )?;
        }
        if self.ports_exhausted > 0 {
            write!(f, ", client ports reused {} time(s)", self.ports_exhausted)?;
        }
        if let Some(e) = &self.error {
            write!(f, "; stopped by a read error: {e}")?;
        }
        Ok(())
    }
}

/// A replay of one file; see the module documentation.
#[derive(Debug)]
pub struct Replay {
    cfg: OfflineConfig,
    file_len: u64,
    reader: Option<Reader<File>>,
    pass: u32,
    pacer: Pacer,
    filter: PortFilter,
    window: window::Window,
    ports: Option<LoopPorts>,
    start: Option<Instant>,
    last_fed: Option<Instant>,
    /// The next accepted packet and its offset from `start`.
    pending: Option<(Duration, Vec<u8>)>,
    spare: Vec<u8>,
    /// Reader counters of the passes already done.
    done_read: ReadStats,
    stats: ReplayStats,
    shown: u64,
    progress: Progress,
    /// With `--compare`: what the comparison thread gets.
    tap: Option<Tapped>,
}

/// The packets copied for the comparison (see the module documentation).
#[derive(Debug)]
struct Tapped {
    /// The fraction of connections compared (`--compare-sample`): the others are not copied.
    sample: f64,
    out: Vec<(Instant, Vec<u8>)>,
    /// The capture time and due offset of the last client packet read.
    anchor: Option<(Duration, Duration)>,
}

impl Tapped {
    fn sampled(&self, acc: &Accepted, port: u16) -> bool {
        crate::shadow::sampled_client(acc.client.ip(), port, self.sample)
    }
}

impl Replay {
    /// Open the file and read its header; packets for `maps` will be replayed.
    pub fn open(cfg: OfflineConfig, maps: &[PortMap]) -> Result<Replay, OpenError> {
        let reader = open_reader(&cfg.path)?;
        let file_len = std::fs::metadata(&cfg.path).map(|m| m.len()).unwrap_or(0);
        let ports = (cfg.loops > 1).then(LoopPorts::new);
        Ok(Replay {
            pacer: Pacer::new(cfg.speed, cfg.max_gap),
            filter: PortFilter::new(maps),
            window: window::Window::new(cfg.from, cfg.until),
            progress: Progress {
                enabled: cfg.progress,
                next: None,
                drawn: false,
            },
            cfg,
            file_len,
            reader: Some(reader),
            pass: 0,
            ports,
            start: None,
            last_fed: None,
            pending: None,
            spare: Vec::new(),
            done_read: ReadStats::default(),
            stats: ReplayStats::default(),
            shown: 0,
            tap: None,
        })
    }

    /// Also copy both directions of the mapped ports for the comparison (`--compare`; `sample`
    /// from 0 to 1 as `--compare-sample`); collect them with [`Replay::take_tapped`].
    pub fn tap(&mut self, sample: f64) {
        self.tap = Some(Tapped {
            sample,
            out: Vec::new(),
            anchor: None,
        });
    }

    /// The packets copied for the comparison since the last call, in file order, each with its
    /// replay time (empty without [`Replay::tap`]).
    pub fn take_tapped(&mut self) -> Vec<(Instant, Vec<u8>)> {
        self.tap
            .as_mut()
            .map(|t| std::mem::take(&mut t.out))
            .unwrap_or_default()
    }

    /// The file's format ("pcap" or "pcapng").
    #[must_use]
    pub fn format_name(&self) -> &'static str {
        self.reader.as_ref().map_or("pcap", Reader::format_name)
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &OfflineConfig {
        &self.cfg
    }

    /// Start the replay clock (once; later calls do nothing).
    pub fn start(&mut self, now: Instant) {
        if self.start.is_none() {
            self.start = Some(now);
        }
    }

    /// Whether [`Replay::start`] was called.
    #[must_use]
    pub fn started(&self) -> bool {
        self.start.is_some()
    }

    /// Every pass has been read and every packet handed over.
    #[must_use]
    pub fn finished(&self) -> bool {
        self.reader.is_none() && self.pending.is_none()
    }

    /// Whether [`Replay::feed`] has something to do at `now` (a packet due, or the file to read
    /// on).
    #[must_use]
    pub fn ready(&self, now: Instant) -> bool {
        match (self.start, &self.pending) {
            (None, _) => false,
            (Some(_), None) => self.reader.is_some(),
            (Some(start), Some((due, _))) => start + (*due).min(FAR) <= now,
        }
    }

    /// When the next packet is due (`None` before the start and after the end).
    #[must_use]
    pub fn next_due(&self) -> Option<Instant> {
        let start = self.start?;
        let (due, _) = self.pending.as_ref()?;
        Some(start + (*due).min(FAR))
    }

    /// The counters (the reader's included, up to now).
    #[must_use]
    pub fn stats(&self) -> ReplayStats {
        let mut s = self.stats.clone();
        s.read = self.read_stats();
        s.ports_exhausted = self.ports.as_ref().map_or(0, LoopPorts::exhausted);
        s.elapsed = match (self.start, self.last_fed) {
            (Some(a), Some(b)) => Some(b.saturating_duration_since(a)),
            _ => None,
        };
        s
    }

    fn read_stats(&self) -> ReadStats {
        let mut r = self.done_read;
        if let Some(cur) = self.reader.as_ref().map(Reader::stats) {
            r.records += cur.records;
            r.packets += cur.packets;
            r.not_ip += cur.not_ip;
            r.snapped += cur.snapped;
            r.malformed += cur.malformed;
            r.truncated += cur.truncated;
            r.garbled += cur.garbled;
            r.garbage_bytes += cur.garbage_bytes;
        }
        r
    }

    /// Hand every packet due at `now` to `f`, at most `max`. Returns how many were handed over.
    /// Does nothing before [`Replay::start`].
    pub fn feed(&mut self, now: Instant, max: usize, mut f: impl FnMut(&[u8])) -> usize {
        let Some(start) = self.start else { return 0 };
        let mut n = 0;
        while n < max {
            if self.pending.is_none() && !self.read_ahead() {
                break;
            }
            let Some((due, _)) = &self.pending else { break };
            if start + (*due).min(FAR) > now {
                break;
            }
            let Some((_, pkt)) = self.pending.take() else {
                break;
            };
            f(&pkt);
            self.stats.fed += 1;
            self.stats.fed_bytes += pkt.len() as u64;
            self.spare = pkt;
            n += 1;
        }
        if n > 0 {
            self.last_fed = Some(now);
        }
        self.draw_progress(now);
        n
    }

    /// Read up to the next accepted packet into `pending`; `false` at the end of the last pass.
    fn read_ahead(&mut self) -> bool {
        loop {
            let Some(reader) = self.reader.as_mut() else {
                return false;
            };
            let event = match reader.next_event() {
                Ok(e) => e,
                Err(e) => {
                    let msg = format!(
                        "reading {} at offset {}: {e}",
                        self.cfg.path.display(),
                        reader.offset()
                    );
                    tracing::error!("offline: {msg}; the replay ends here");
                    self.stats.error = Some(msg);
                    self.end_pass(true);
                    continue;
                }
            };
            match event {
                Some(Event::Packet(p)) => {
                    let Some(acc) = self.filter.accept(p.data) else {
                        self.stats.filtered += 1;
                        if let (Some(tap), Some(start)) = (self.tap.as_mut(), self.start) {
                            if let Some(acc) = self.filter.accept_answer(p.data) {
                                let port = match self.ports.as_ref() {
                                    Some(ports) => ports.given(acc.client, acc.server),
                                    None => Some(acc.client.port()),
                                };
                                let port = port.filter(|_| self.window.keeps(&acc));
                                self.stats.answers += u64::from(port.is_some());
                                if let Some(port) = port.filter(|&port| tap.sampled(&acc, port)) {
                                    let (ts0, due0) = tap.anchor.unwrap_or((p.ts, Duration::ZERO));
                                    let at = start + (due0 + p.ts.saturating_sub(ts0)).min(FAR);
                                    let mut buf = p.data.to_vec();
                                    if port != acc.client.port() {
                                        set_destination_port(&mut buf, acc.tcp_offset, port);
                                    }
                                    tap.out.push((at, buf));
                                }
                            }
                        }
                        continue;
                    };
                    if !self.window.admit(p.ts, &acc, p.data) {
                        self.stats.outside_slice += 1;
                        continue;
                    }
                    let mut buf = std::mem::take(&mut self.spare);
                    buf.clear();
                    buf.extend_from_slice(p.data);
                    let ts = p.ts;
                    let port = self
                        .ports
                        .as_mut()
                        .map_or(acc.client.port(), |p| p.port(acc.client, acc.server));
                    if port != acc.client.port() {
                        set_source_port(&mut buf, acc.tcp_offset, port);
                    }
                    let due = self.pacer.schedule(ts);
                    if let (Some(tap), Some(start)) = (self.tap.as_mut(), self.start) {
                        tap.anchor = Some((ts, due));
                        if tap.sampled(&acc, port) {
                            tap.out.push((start + due.min(FAR), buf.clone()));
                        }
                    }
                    self.pending = Some((due, buf));
                    return true;
                }
                Some(Event::Skip(s)) => self.report(&s),
                None => self.end_pass(false),
            }
        }
    }

    /// The current pass ended (or failed): open the next one, or finish.
    fn end_pass(&mut self, failed: bool) {
        self.done_read = self.read_stats();
        self.reader = None;
        self.stats.passes += u32::from(!failed);
        self.pass += 1;
        if failed || self.pass >= self.cfg.loops {
            return;
        }
        match open_reader(&self.cfg.path) {
            Ok(r) => {
                self.reader = Some(r);
                self.pacer.restart();
                if let Some(p) = self.ports.as_mut() {
                    p.start_pass(self.pass);
                }
                tracing::debug!("offline: pass {} of {}", self.pass + 1, self.cfg.loops);
            }
            Err(e) => {
                tracing::error!(
                    "offline: opening pass {}: {e}; the replay ends here",
                    self.pass + 1
                );
                self.stats.error = Some(e.to_string());
            }
        }
    }

    /// Say what was skipped: every problem of the first pass up to a limit, then only counts
    /// (later passes meet the same records again). Non-IP frames are normal and not shown.
    fn report(&mut self, s: &Skip) {
        if matches!(s.kind, SkipKind::Link(LinkLayerError::NotIp(_))) || self.pass > 0 {
            return;
        }
        let always = matches!(s.kind, SkipKind::Truncated { .. });
        if self.shown < MAX_MESSAGES || always {
            self.clear_progress();
            tracing::warn!("offline: {}: {s}", self.cfg.path.display());
            self.shown += 1;
            if self.shown == MAX_MESSAGES {
                tracing::warn!("offline: further problems of this file are counted, not shown");
            }
        }
    }

    fn draw_progress(&mut self, now: Instant) {
        if !self.progress.enabled {
            return;
        }
        let finished = self.finished();
        // The first line comes after a moment, once the start-up messages are out.
        let next = *self.progress.next.get_or_insert(now + PROGRESS_EVERY);
        if !finished && now < next {
            return;
        }
        self.progress.next = Some(now + PROGRESS_EVERY);
        let loops = f64::from(self.cfg.loops.max(1));
        let offset = self.reader.as_ref().map_or(0, Reader::offset);
        let frac = if finished {
            1.0
        } else if self.file_len > 0 {
            (f64::from(self.pass) + (offset as f64 / self.file_len as f64).min(1.0)) / loops
        } else {
            0.0
        };
        let secs = self
            .start
            .map_or(0.0, |s| now.saturating_duration_since(s).as_secs_f64());
        let rate = if secs > 0.0 {
            self.stats.fed as f64 / secs
        } else {
            0.0
        };
        let line = progress_line(
            frac,
            self.read_stats().records,
            self.stats.fed,
            rate,
            self.pass,
            self.cfg.loops,
        );
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{line}\x1b[K");
        if finished {
            let _ = writeln!(err);
            self.progress.enabled = false;
        }
        let _ = err.flush();
        self.progress.drawn = !finished;
    }

    /// Clear the progress line before a log message.
    fn clear_progress(&mut self) {
        if self.progress.drawn {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
            self.progress.drawn = false;
        }
    }
}

#[derive(Debug)]
struct Progress {
    enabled: bool,
    next: Option<Instant>,
    drawn: bool,
}

/// The progress line: `[#####.....]  45.0%  pass 1/2  12034 records  9000 fed  3200/s`.
fn progress_line(frac: f64, records: u64, fed: u64, rate: f64, pass: u32, loops: u32) -> String {
    const WIDTH: usize = 24;
    let frac = frac.clamp(0.0, 1.0);
    let full = (frac * WIDTH as f64).round() as usize;
    let bar: String = "#".repeat(full) + &".".repeat(WIDTH - full);
    let pass = if loops > 1 {
        format!("  pass {}/{loops}", (pass + 1).min(loops))
    } else {
        String::new()
    };
    format!(
        "[{bar}] {:5.1}%{pass}  {records} records  {fed} packets fed  {rate:.0}/s",
        frac * 100.0
    )
}

fn open_reader(path: &Path) -> Result<Reader<File>, OpenError> {
    let err = |source| OpenError {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(|e| err(ReadError::Io(e)))?;
    Reader::new(file).map_err(err)
}
