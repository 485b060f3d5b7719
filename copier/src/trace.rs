//! The run trace (`--trace FILE`): what the copier actually sent, in the CSV that `shaper check
//! --trace` and `shaper plot` read, so a run is checked against its profile and drawn.
//!
//! Owns: [`TraceFile`], shared by the engine threads ([`SharedTrace`]); the columns are
//! declared once, in `shaper::trace`, for this writer and the shaper's reader. Two forms:
//! - per request unit (default): `time_s,copy,user,pool,target[,source],answer_s`, one row per
//!   unit, `time_s` the moment its first byte left (on the profile's schedule clock: seconds
//!   since the engine's first captured packet), `user` and `pool` `-` without pools, `source`
//!   only when the profile gates by ON/OFF sources, `answer_s` its answer time (first byte sent
//!   to the first answer byte from the test server; `-` when the unit was sent ahead of another's
//!   answer or got no answer byte). A timed unit's row is written when its answer comes, so
//!   rows are not in time order;
//! - per interval (`--trace-every 1s`): `time_s,pool,count[,source],answer_s`, one row per
//!   interval, pool (and source) with the number of units sent and the mean answer time of the
//!   timed ones (`-` without), `time_s` the interval's middle: small at high rates, and what
//!   `shaper check` reads as `count` requests at that time.
//!
//! Rows of several workers interleave (order within a second is not kept); intervals are
//! written one interval late (so the other workers' units of that interval join it) and all at
//! the end. Write errors are logged once and turn the trace off; the copying goes on.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::engine::UnitSent;

/// What `--trace` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceConfig {
    /// The file (created or truncated).
    pub path: PathBuf,
    /// Per-interval counts instead of one row per unit.
    pub every: Option<Duration>,
    /// Write the ON/OFF `source` column (the profile gates).
    pub sources: bool,
}

/// The trace, shared by the engine threads.
pub type SharedTrace = Arc<Mutex<TraceFile>>;

/// An open trace file.
#[derive(Debug)]
pub struct TraceFile {
    out: Option<BufWriter<File>>,
    path: PathBuf,
    every: Option<f64>,
    sources: bool,
    pools: Vec<String>,
    /// Per interval: (interval, pool, source) -> (units, timed units, sum of their answer times).
    counts: BTreeMap<(u64, Option<u16>, Option<u32>), (u64, u64, Duration)>,
    rows: u64,
}

impl TraceFile {
    /// Create the file and write its header.
    pub fn create(cfg: &TraceConfig, pools: Vec<String>) -> std::io::Result<TraceFile> {
        let f = File::create(&cfg.path)?;
        let mut t = TraceFile {
            out: Some(BufWriter::new(f)),
            path: cfg.path.clone(),
            every: cfg.every.map(|d| d.as_secs_f64()).filter(|s| *s > 0.0),
            sources: cfg.sources,
            pools,
            counts: BTreeMap::new(),
            rows: 0,
        };
        let header = shaper::trace::header(t.every.is_some(), t.sources);
        t.line(format_args!("{header}\n"));
        Ok(t)
    }

    fn line(&mut self, args: std::fmt::Arguments<'_>) {
        let Some(out) = self.out.as_mut() else { return };
        if let Err(e) = out.write_fmt(args) {
            tracing::error!(
                "--trace {}: {e}; the trace stops here (copying goes on)",
                self.path.display()
            );
            self.out = None;
        }
    }

    fn pool(&self, p: Option<u16>) -> &str {
        p.and_then(|i| self.pools.get(usize::from(i)))
            .map_or("-", String::as_str)
    }

    /// Note the units of one engine turn.
    pub fn record(&mut self, units: &[UnitSent]) {
        for u in units {
            match self.every {
                None => {
                    let user = u.user.map_or_else(|| "-".to_string(), |x| x.to_string());
                    let pool = self.pool(u.pool).to_string();
                    let t = u.t.as_secs_f64();
                    let a = answer(u.answer);
                    match u.source.filter(|_| self.sources) {
                        Some(s) => self.line(format_args!(
                            "{t:.6},{},{user},{pool},{},{s},{a}\n",
                            u.copy, u.target
                        )),
                        None if self.sources => {
                            self.line(format_args!(
                                "{t:.6},{},{user},{pool},{},0,{a}\n",
                                u.copy, u.target
                            ));
                        }
                        None => self.line(format_args!(
                            "{t:.6},{},{user},{pool},{},{a}\n",
                            u.copy, u.target
                        )),
                    }
                    self.rows += 1;
                }
                Some(every) => {
                    let k = (u.t.as_secs_f64() / every) as u64;
                    let c = self
                        .counts
                        .entry((k, u.pool, u.source.filter(|_| self.sources)))
                        .or_default();
                    c.0 += 1;
                    if let Some(d) = u.answer {
                        c.1 += 1;
                        c.2 += d;
                    }
                    // Write what is two intervals old: the other workers are done with it.
                    if let Some(&(first, _, _)) = self.counts.keys().next() {
                        if first + 1 < k {
                            self.write_counts(Some(k - 1));
                        }
                    }
                }
            }
        }
    }

    /// Write the intervals before `before` (all with `None`).
    fn write_counts(&mut self, before: Option<u64>) {
        let every = self.every.unwrap_or(1.0);
        while let Some((&(k, pool, source), &(n, timed, sum))) = self.counts.iter().next() {
            if before.is_some_and(|b| k >= b) {
                break;
            }
            self.counts.remove(&(k, pool, source));
            let t = (k as f64 + 0.5) * every;
            let pool = self.pool(pool).to_string();
            let a = answer((timed > 0).then(|| sum / u32::try_from(timed).unwrap_or(u32::MAX)));
            match source {
                Some(s) => self.line(format_args!("{t:.3},{pool},{n},{s},{a}\n")),
                None if self.sources => self.line(format_args!("{t:.3},{pool},{n},0,{a}\n")),
                None => self.line(format_args!("{t:.3},{pool},{n},{a}\n")),
            }
            self.rows += 1;
        }
    }

    /// Push what is buffered to the file (the last intervals too at the end: `last`).
    pub fn flush(&mut self, last: bool) {
        if last {
            self.write_counts(None);
        }
        if let Some(out) = self.out.as_mut() {
            if let Err(e) = out.flush() {
                tracing::error!(
                    "--trace {}: {e}; the trace stops here (copying goes on)",
                    self.path.display()
                );
                self.out = None;
            }
        }
    }

    /// Rows written so far.
    #[must_use]
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// An answer time as the trace writes it: seconds to the microsecond, `-` without.
fn answer(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".to_string(), |d| format!("{:.6}", d.as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(t: f64, pool: Option<u16>, source: Option<u32>) -> UnitSent {
        timed(t, pool, source, None)
    }

    fn timed(t: f64, pool: Option<u16>, source: Option<u32>, answer_ms: Option<u64>) -> UnitSent {
        UnitSent {
            t: Duration::from_secs_f64(t),
            copy: 1,
            user: pool.map(|_| 7),
            pool,
            source,
            target: "198.18.2.2:80".parse().unwrap(),
            answer: answer_ms.map(Duration::from_millis),
        }
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap()
    }

    #[test]
    fn per_unit_rows_and_per_interval_counts() {
        let dir = std::env::temp_dir().join(format!("copier-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("units.csv");
        let cfg = TraceConfig {
            path: path.clone(),
            every: None,
            sources: true,
        };
        let mut t = TraceFile::create(&cfg, vec!["home".into(), "office".into()]).unwrap();
        t.record(&[
            timed(0.25, Some(1), Some(3), Some(120)),
            unit(1.5, None, None),
        ]);
        t.flush(true);
        let text = read(&path);
        assert_eq!(
            text,
            "time_s,copy,user,pool,target,source,answer_s\n0.250000,1,7,office,198.18.2.2:80,3,0.120000\n\
             1.500000,1,-,-,198.18.2.2:80,0,-\n"
        );

        let path = dir.join("every.csv");
        let cfg = TraceConfig {
            path: path.clone(),
            every: Some(Duration::from_secs(1)),
            sources: false,
        };
        let mut t = TraceFile::create(&cfg, vec!["home".into()]).unwrap();
        t.record(&[
            timed(0.1, Some(0), None, Some(100)),
            timed(0.9, Some(0), None, Some(300)),
            unit(1.2, None, None),
        ]);
        t.record(&[unit(3.5, Some(0), None)]);
        // Intervals 0 and 1 are two intervals old once a unit of interval 3 came: written.
        t.flush(false);
        assert_eq!(
            read(&path),
            "time_s,pool,count,answer_s\n0.500,home,2,0.200000\n1.500,-,1,-\n"
        );
        t.flush(true);
        assert_eq!(
            read(&path),
            "time_s,pool,count,answer_s\n0.500,home,2,0.200000\n1.500,-,1,-\n3.500,home,1,-\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// One engine thread's handle on the trace: the shared file and a buffer for a turn's units.
#[derive(Debug)]
pub struct TraceSink {
    file: SharedTrace,
    buf: Vec<UnitSent>,
}

impl TraceSink {
    /// A handle on `file`.
    #[must_use]
    pub fn new(file: SharedTrace) -> TraceSink {
        TraceSink {
            file,
            buf: Vec::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TraceFile> {
        // A panic while writing leaves a usable (at worst truncated) file.
        self.file.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take the units the engine sent since the last call (the lock only when there are some).
    pub fn drain(&mut self, engine: &mut crate::engine::Engine) {
        self.buf.clear();
        while let Some(u) = engine.poll_unit() {
            self.buf.push(u);
        }
        if !self.buf.is_empty() {
            let units = std::mem::take(&mut self.buf);
            self.lock().record(&units);
            self.buf = units;
        }
    }

    /// Push the buffered rows to the file (`last`: the intervals still open too).
    pub fn flush(&self, last: bool) {
        self.lock().flush(last);
    }
}
