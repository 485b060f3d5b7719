//! The JSON Lines file of a comparison: one [`Line`] per line.
//!
//! Owns: the line types ([`Line::Diff`]: a differing exchange, its request, its differences
//! trimmed; [`Line::Noise`]: a field learned as noise; [`Line::Tick`]: the cumulative counts per
//! endpoint, written periodically and at exit, from which the report draws rates over time),
//! [`JsonlWriter`] (sampling of differing exchanges: `sample` = 0.1 writes every tenth; rotation:
//! at most `max_bytes` per file, `keep` older files `FILE.1` .. `FILE.keep`, so the disk used is
//! at most `(keep + 1) x max_bytes`; every file made 0600, `common::private`; lines are written
//! whole or not at all, `common::sink`: when the disk fills, the lines that could not be written
//! are dropped and counted, the file stays readable, and the next write tries again) and
//! [`read_lines`] (every file of a rotation, oldest first).

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::sink::{Lost, Sink};
use serde::{Deserialize, Serialize};

use crate::comparator::{Outcome, Verdict};
use crate::fields::FieldDiff;

/// Bytes of lines buffered before they are written.
const BUF: usize = 8 << 10;

/// Longest request line kept in a file.
const MAX_REQUEST: usize = 300;

/// Cumulative counts of one endpoint in a [`Line::Tick`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TickEndpoint {
    /// Endpoint.
    pub endpoint: String,
    /// Exchanges compared so far.
    pub compared: u64,
    /// ... of which differing.
    pub differing: u64,
    /// Answer-time ratio test/online at p50 and p99, when known.
    #[serde(default)]
    pub ratio_p50: Option<f64>,
    /// ...
    #[serde(default)]
    pub ratio_p99: Option<f64>,
}

/// One line of the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line {
    /// A differing (or malformed) exchange.
    Diff {
        /// Milliseconds since the Unix epoch.
        t: u64,
        /// Endpoint.
        endpoint: String,
        /// Request line.
        request: String,
        /// `differ`, `malformed_online`, `malformed_candidate`.
        outcome: String,
        /// Differences (at most the comparator's `max_diffs`).
        diffs: Vec<FieldDiff>,
        /// How many differences in all.
        diff_count: usize,
        /// Answer times in milliseconds.
        online_ms: Option<f64>,
        /// ...
        test_ms: Option<f64>,
    },
    /// A field learned as noise for an endpoint.
    Noise {
        /// Milliseconds since the Unix epoch.
        t: u64,
        /// Endpoint.
        endpoint: String,
        /// Generalized field.
        field: String,
    },
    /// Cumulative counts.
    Tick {
        /// Milliseconds since the Unix epoch.
        t: u64,
        /// Every endpoint.
        endpoints: Vec<TickEndpoint>,
    },
}

impl Line {
    /// The tick line of the comparator's counts now (`t`: ms since the epoch).
    pub fn tick(t: u64, cmp: &crate::comparator::Comparator) -> Line {
        let endpoints = cmp
            .endpoints()
            .map(|(n, s)| TickEndpoint {
                endpoint: n.to_string(),
                compared: s.compared,
                differing: s.differing,
                ratio_p50: s.time_ratio(0.5),
                ratio_p99: s.time_ratio(0.99),
            })
            .collect();
        Line::Tick { t, endpoints }
    }

    /// The lines of one verdict (a diff line when it differs or is malformed, a noise line per
    /// field learned); `t` in ms since the epoch.
    pub fn of_verdict(v: &Verdict, t: u64) -> (Option<Line>, Vec<Line>) {
        let noise = v
            .learned
            .iter()
            .map(|f| Line::Noise {
                t,
                endpoint: v.endpoint.clone(),
                field: f.clone(),
            })
            .collect();
        let outcome = match v.outcome {
            Outcome::Equal => return (None, noise),
            Outcome::Differ => "differ".to_string(),
            Outcome::Malformed(side) => format!("malformed_{side}"),
        };
        let mut request = v.request.clone();
        if request.len() > MAX_REQUEST {
            let mut end = MAX_REQUEST;
            while !request.is_char_boundary(end) {
                end -= 1;
            }
            request.truncate(end);
        }
        let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1000.0);
        let diff = Line::Diff {
            t,
            endpoint: v.endpoint.clone(),
            request,
            outcome,
            diffs: v.diffs.clone(),
            diff_count: v.diff_count,
            online_ms: ms(v.online_time),
            test_ms: ms(v.test_time),
        };
        (Some(diff), noise)
    }
}

/// The rotating writer (see the module doc).
#[derive(Debug)]
pub struct JsonlWriter {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    sample: f64,
    seen: u64,
    size: u64,
    out: Sink,
    /// Differing exchanges not written because of the sampling.
    pub sampled_out: u64,
}

impl JsonlWriter {
    /// Opens `path` (appending), rotating at `max_bytes`, keeping `keep` older files, writing
    /// the fraction `sample` (0..=1) of differing exchanges.
    pub fn create(
        path: &Path,
        max_bytes: u64,
        keep: usize,
        sample: f64,
    ) -> io::Result<JsonlWriter> {
        let out = Sink::new(common::private::append(path)?, BUF)?;
        let size = out.len();
        Ok(JsonlWriter {
            path: path.to_path_buf(),
            max_bytes: max_bytes.max(1024),
            keep,
            sample: sample.clamp(0.0, 1.0),
            seen: 0,
            size,
            out,
            sampled_out: 0,
        })
    }

    /// Writes the lines of a verdict (the diff line subject to sampling). `Ok(true)` when lines
    /// reached the disk; an error tells how many lines were dropped (all of the verdict's that
    /// were not written, and those buffered before).
    pub fn write_verdict(&mut self, v: &Verdict, t: u64) -> Result<bool, Lost> {
        let (diff, noise) = Line::of_verdict(v, t);
        let mut lines = noise;
        if let Some(d) = diff {
            self.seen += 1;
            let before = ((self.seen - 1) as f64 * self.sample).floor();
            if (self.seen as f64 * self.sample).floor() > before {
                lines.push(d);
            } else {
                self.sampled_out += 1;
            }
        }
        let mut wrote = false;
        for (i, l) in lines.iter().enumerate() {
            match self.write(l) {
                Ok(w) => wrote |= w,
                Err(mut lost) => {
                    lost.units += (lines.len() - i - 1) as u64;
                    return Err(lost);
                }
            }
        }
        Ok(wrote)
    }

    /// Writes one line (rotating first when it would not fit): `Ok(true)` when the buffer went
    /// to disk; an error drops the buffered lines, this one too (counted in [`Lost`]).
    pub fn write(&mut self, line: &Line) -> Result<bool, Lost> {
        let mut text = serde_json::to_string(line).map_err(io::Error::other)?;
        text.push('\n');
        let mut wrote = false;
        if self.size > 0 && self.size + text.len() as u64 > self.max_bytes {
            match self.rotate() {
                Ok(w) => wrote = w,
                Err(mut lost) => {
                    lost.units += 1;
                    return Err(lost);
                }
            }
        }
        wrote |= self.out.push(text.as_bytes())?;
        self.size = self.out.len();
        Ok(wrote)
    }

    /// Flushes to the file (`Ok(true)` when something was written).
    pub fn flush(&mut self) -> Result<bool, Lost> {
        let r = self.out.flush();
        self.size = self.out.len();
        r
    }

    fn rotate(&mut self) -> Result<bool, Lost> {
        let wrote = self.flush()?;
        if self.keep == 0 {
            self.out = Sink::new(common::private::create(&self.path)?, BUF)?;
            self.size = 0;
            return Ok(wrote);
        }
        let _ = fs::remove_file(numbered(&self.path, self.keep));
        for i in (1..self.keep).rev() {
            let from = numbered(&self.path, i);
            if from.exists() {
                fs::rename(&from, numbered(&self.path, i + 1))?;
            }
        }
        fs::rename(&self.path, numbered(&self.path, 1))?;
        self.out = Sink::new(common::private::create(&self.path)?, BUF)?;
        self.size = 0;
        Ok(wrote)
    }
}

fn numbered(path: &Path, i: usize) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{i}"));
    PathBuf::from(s)
}

/// Lines read back from a file and its rotated predecessors (oldest first), and how many lines
/// were not understood (`(file, line number)` of the first).
#[derive(Debug, Default)]
pub struct ReadBack {
    /// The lines.
    pub lines: Vec<Line>,
    /// Lines that were not JSON of a known type.
    pub bad: usize,
    /// Where the first bad line is.
    pub first_bad: Option<(PathBuf, usize)>,
}

/// Reads `path.N` .. `path.1`, then `path` (see [`ReadBack`]). An error names the file.
pub fn read_lines(path: &Path) -> Result<ReadBack, String> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut i = 1;
    while numbered(path, i).exists() {
        files.push(numbered(path, i));
        i += 1;
    }
    files.reverse();
    files.push(path.to_path_buf());
    let mut rb = ReadBack::default();
    for f in files {
        let file = File::open(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        for (n, line) in BufReader::new(file).lines().enumerate() {
            let line = line.map_err(|e| format!("{}: line {}: {e}", f.display(), n + 1))?;
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Line>(&line) {
                Ok(l) => rb.lines.push(l),
                Err(_) => {
                    rb.bad += 1;
                    rb.first_bad.get_or_insert((f.clone(), n + 1));
                }
            }
        }
    }
    Ok(rb)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::Kind;

    fn verdict(i: usize) -> Verdict {
        Verdict {
            endpoint: "GET /a/{n}".into(),
            request: format!("GET /a/{i}"),
            outcome: Outcome::Differ,
            diffs: vec![FieldDiff {
                field: "$.x".into(),
                kind: Kind::BodyField,
                online: Some("1".into()),
                test: Some("2".into()),
                offset: None,
            }],
            diff_count: 1,
            learned: if i == 0 { vec!["$.ts".into()] } else { vec![] },
            online_time: Some(Duration::from_millis(2)),
            test_time: None,
        }
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("compare-jsonl-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d.join("diff.jsonl")
    }

    #[test]
    fn writes_samples_and_reads_back() {
        let p = tmp("sample");
        let mut w = JsonlWriter::create(&p, 1 << 20, 2, 0.1).unwrap();
        for i in 0..100 {
            w.write_verdict(&verdict(i), 1000 + i as u64).unwrap();
        }
        w.flush().unwrap();
        fs::write(p.with_extension("x"), "").unwrap();
        let rb = read_lines(&p).unwrap();
        let diffs = rb
            .lines
            .iter()
            .filter(|l| matches!(l, Line::Diff { .. }))
            .count();
        let noise = rb
            .lines
            .iter()
            .filter(|l| matches!(l, Line::Noise { .. }))
            .count();
        assert_eq!((diffs, noise, rb.bad), (10, 1, 0));
        assert_eq!(w.sampled_out, 90);
        let Line::Diff {
            diffs, online_ms, ..
        } = &rb.lines[1]
        else {
            panic!("{:?}", rb.lines[1])
        };
        assert_eq!(diffs[0].field, "$.x");
        assert_eq!(*online_ms, Some(2.0));
        fs::remove_dir_all(p.parent().unwrap()).unwrap();
    }

    #[test]
    fn rotates_within_the_bound_and_reads_oldest_first() {
        let p = tmp("rotate");
        let mut w = JsonlWriter::create(&p, 2048, 2, 1.0).unwrap();
        for i in 0..200 {
            w.write_verdict(&verdict(i + 1), i as u64).unwrap();
        }
        w.flush().unwrap();
        let total: u64 = fs::read_dir(p.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(total <= 3 * 2048, "{total}");
        assert!(numbered(&p, 2).exists() && !numbered(&p, 3).exists());
        use std::os::unix::fs::PermissionsExt;
        for f in [p.clone(), numbered(&p, 1), numbered(&p, 2)] {
            let mode = fs::metadata(&f).unwrap().permissions().mode() & 0o777;
            assert_eq!(
                mode,
                0o600,
                "{} holds production answers: owner-only",
                f.display()
            );
        }
        let rb = read_lines(&p).unwrap();
        let ts: Vec<u64> = rb
            .lines
            .iter()
            .map(|l| if let Line::Diff { t, .. } = l { *t } else { 0 })
            .collect();
        assert!(
            ts.windows(2).all(|w| w[0] < w[1]) && *ts.last().unwrap() == 199,
            "{ts:?}"
        );
        // a bad line is counted and located
        fs::write(&p, "{\"type\":\"nope\"}\n").unwrap();
        let rb = read_lines(&p).unwrap();
        assert_eq!(rb.bad, 1);
        assert_eq!(rb.first_bad, Some((p.clone(), 1)));
        assert!(read_lines(&p.with_extension("missing"))
            .unwrap_err()
            .contains("missing"));
        fs::remove_dir_all(p.parent().unwrap()).unwrap();
    }
}
