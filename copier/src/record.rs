//! The archive of copied sessions (`--record DIR`): every packet the engine sends for the first
//! copy of a session (copy 0), as the test server gets it, so after the request rules (filtered
//! requests are not there) and after their edits (dye, header edits, rewrites), into rotating,
//! size-bounded pcapng files, with an index of the sessions.
//!
//! Files: `DIR/rec-w<worker>-<n>.pcapng` (raw IP link type, microsecond timestamps), a new one
//! once the current one holds `max_file` bytes, the oldest deleted beyond `max_files` per worker
//! and, with `max_age`, any older than that (by modification time) at each new file;
//! `DIR/index-w<worker>.tsv` gets a line per recorded test connection when its SYN is recorded:
//! `start_unix_ms`, the captured client, the test connection's client and server ends, the file.
//! The bound holds across restarts: a new run finds the worker's files already there, numbers
//! its own after the highest, and counts the old ones in `max_files` (the oldest go first); at
//! each new file the index keeps only the lines of files still there, so it is as bounded as the
//! archive.
//! A test connection is recorded from its SYN (only copy 0's) until its FIN or RST. An archive
//! file replays with `copier --offline FILE --map <test port>=...`, and `--rules` with allow
//! filters selects a slice of it (by path, method, header, client range); the index tells which
//! files hold a time range.
//!
//! The archive holds production requests whole (cookies, authorization headers, query strings):
//! its directory is made 0700 and every file 0600 (`common::private`), whatever the umask.
//!
//! The pcapng blocks are written by `common::pcap` ([`common::pcap::pcapng_packet`]).

use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use common::flow::FourTuple;
use common::pcap::{pcapng_header, pcapng_packet, LinkType};
use common::sink::{Lost, Sink};
use common::wire::{parse_tcp_packet, TcpFlags};

use crate::outage::Outage;

/// What `--record` was given.
#[derive(Debug, Clone)]
pub struct RecordConfig {
    /// The directory of the archive.
    pub dir: PathBuf,
    /// Bytes per file before the next one starts.
    pub max_file: u64,
    /// Files kept per worker (the oldest goes), those of earlier runs included.
    pub max_files: usize,
    /// Files older than this go (None: kept whatever their age).
    pub max_age: Option<std::time::Duration>,
}

/// One worker's recorder (see the module documentation).
#[derive(Debug)]
pub struct Recorder {
    cfg: RecordConfig,
    worker: u16,
    seq: u64,
    cur: Option<(PathBuf, Sink)>,
    files: VecDeque<PathBuf>,
    index: Sink,
    live: HashSet<FourTuple>,
    outage: Outage,
    /// After a file could not be made: not before this is another tried.
    retry_at: Option<Instant>,
}

const INDEX_HEADER: &str = "start_unix_ms\tclient\ttest_client\ttest_server\tfile";

/// Bytes buffered per archive file before they are written.
const FILE_BUF: usize = 1 << 16;
/// ... per index.
const INDEX_BUF: usize = 8 << 10;
/// How long after a file could not be made the next try waits (packets meanwhile are dropped).
const RETRY: Duration = Duration::from_secs(1);

/// The archive files of `worker` already in `dir`, by number.
fn existing(dir: &Path, worker: u16) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let prefix = format!("rec-w{worker}-");
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(n) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|n| n.strip_suffix(".pcapng"))
        else {
            continue;
        };
        if let Ok(n) = n.parse::<u64>() {
            out.push((n, e.path()));
        }
    }
    out.sort();
    Ok(out)
}

impl Recorder {
    /// Opens the archive directory (created if missing) for worker `worker`, taking over the
    /// files an earlier run left (see the module documentation).
    pub fn open(cfg: RecordConfig, worker: u16) -> std::io::Result<Recorder> {
        common::private::create_dir_all(&cfg.dir)?;
        let old = existing(&cfg.dir, worker)?;
        let seq = old.last().map_or(0, |(n, _)| n.saturating_add(1));
        let path = cfg.dir.join(format!("index-w{worker}.tsv"));
        let index = Sink::new(common::private::append(&path)?, INDEX_BUF)?;
        let files = old.into_iter().map(|(_, p)| p).collect();
        let outage = Outage::new("record", format!("--record {}", cfg.dir.display()));
        Ok(Recorder {
            cfg,
            worker,
            seq,
            cur: None,
            files,
            index,
            live: HashSet::new(),
            outage,
            retry_at: None,
        })
    }

    /// Counts what a write gave (see [`crate::outage`]).
    fn note(&mut self, r: Result<bool, Lost>) {
        self.outage.note(r);
    }

    /// ... of the index: its small writes may fit in room that a failed archive write left, so
    /// only the archive's own writes end an outage (no "resumed" while packets still fail).
    fn note_index(&mut self, r: Result<bool, Lost>) {
        if let Err(l) = r {
            self.outage.failed(&l.error, l.units);
        }
    }

    /// Deletes the files beyond `max_files` and past `max_age` (never the current one), then
    /// rewrites the index with the lines of the files left.
    fn prune(&mut self) -> std::io::Result<()> {
        let mut gone = false;
        while self.files.len() > self.cfg.max_files.max(1) {
            if let Some(old) = self.files.pop_front() {
                let _ = std::fs::remove_file(old);
                gone = true;
            }
        }
        if let Some(age) = self.cfg.max_age {
            let now = SystemTime::now();
            let cur = self.cur.as_ref().map(|c| c.0.clone());
            let before = self.files.len();
            self.files.retain(|p| {
                let old = Some(p) != cur.as_ref()
                    && std::fs::metadata(p)
                        .and_then(|m| m.modified())
                        .is_ok_and(|t| now.duration_since(t).unwrap_or_default() > age);
                if old {
                    let _ = std::fs::remove_file(p);
                }
                !old
            });
            gone |= self.files.len() != before;
        }
        if gone {
            self.rewrite_index()?;
        }
        Ok(())
    }

    /// The index without the lines of deleted files (written aside, then renamed over).
    fn rewrite_index(&mut self) -> std::io::Result<()> {
        let r = self.index.flush();
        self.note_index(r);
        let path = self.cfg.dir.join(format!("index-w{}.tsv", self.worker));
        let kept: HashSet<String> = self
            .files
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut out = String::with_capacity(text.len());
        out.push_str(INDEX_HEADER);
        out.push('\n');
        for line in text.lines().skip(1) {
            if line.rsplit('\t').next().is_some_and(|f| kept.contains(f)) {
                out.push_str(line);
                out.push('\n');
            }
        }
        let tmp = self
            .cfg
            .dir
            .join(format!(".index-w{}.tsv.new", self.worker));
        if let Err(e) = common::private::write(&tmp, out.as_bytes()) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, &path)?;
        self.index = Sink::new(common::private::append(&path)?, INDEX_BUF)?;
        Ok(())
    }

    /// The archive's directory.
    pub fn dir(&self) -> &Path {
        &self.cfg.dir
    }

    /// Starts the next file (the current one written out); false when none is open (it could
    /// not be made, now or less than [`RETRY`] ago).
    fn rotate(&mut self) -> bool {
        let now = Instant::now();
        if self.retry_at.is_some_and(|t| now < t) {
            return false;
        }
        if let Some((_, mut w)) = self.cur.take() {
            let r = w.flush();
            self.note(r);
        }
        let path = self
            .cfg
            .dir
            .join(format!("rec-w{}-{:06}.pcapng", self.worker, self.seq));
        match common::private::create(&path).and_then(|f| Sink::new(f, FILE_BUF)) {
            Ok(w) => {
                self.seq += 1;
                self.retry_at = None;
                self.files.push_back(path.clone());
                self.cur = Some((path, w));
            }
            Err(e) => {
                self.outage.failed(&e, 0);
                self.retry_at = Some(now + RETRY);
                return false;
            }
        }
        if let Err(e) = self.prune() {
            self.outage.failed(&e, 0);
        }
        true
    }

    /// A packet the engine sends on `tuple`: `copy` and `client` (the captured client) are the
    /// session's, `None` for the RSTs of a shutdown. A write that fails does not stop the
    /// archive: the packets it held are dropped and counted, and the next write tries again
    /// (see [`crate::outage`]).
    pub fn record(
        &mut self,
        tuple: FourTuple,
        copy: Option<u16>,
        client: Option<SocketAddr>,
        pkt: &[u8],
    ) {
        let Ok(p) = parse_tcp_packet(pkt) else { return };
        let flags = p.tcp.flags();
        let syn = flags.contains(TcpFlags::SYN);
        if syn && copy == Some(0) && self.live.insert(tuple) {
            let open = if self
                .cur
                .as_ref()
                .is_none_or(|c| c.1.len() >= self.cfg.max_file)
            {
                self.rotate()
            } else {
                true
            };
            if open {
                let ms = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis();
                let file = self.cur.as_ref().map(|c| {
                    c.0.file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned()
                });
                let client = client.map_or_else(|| "-".into(), |c| c.to_string());
                if self.index.is_empty() {
                    let r = self.index.push(format!("{INDEX_HEADER}\n").as_bytes());
                    self.note_index(r);
                }
                let line = format!(
                    "{ms}\t{client}\t{}\t{}\t{}\n",
                    tuple.client,
                    tuple.server,
                    file.unwrap_or_default()
                );
                let r = self.index.push(line.as_bytes());
                self.note_index(r);
            }
        }
        if !self.live.contains(&tuple) {
            return;
        }
        if flags.contains(TcpFlags::RST) || flags.contains(TcpFlags::FIN) {
            self.live.remove(&tuple);
        }
        if self.cur.is_none() && !self.rotate() {
            self.outage.dropped(1);
            return;
        }
        let mut block = Vec::with_capacity(pkt.len() + 64);
        if self.cur.as_ref().is_some_and(|c| c.1.is_empty()) {
            // a new file, or one whose header went with a failed write
            let _ = pcapng_header(&mut block, LinkType::Raw);
        }
        let _ = pcapng_packet(
            &mut block,
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default(),
            pkt,
        );
        if let Some((_, w)) = self.cur.as_mut() {
            let r = w.push(&block);
            self.note(r);
        }
    }

    /// Write out what is buffered.
    pub fn flush(&mut self) {
        if let Some((_, w)) = self.cur.as_mut() {
            let r = w.flush();
            self.note(r);
        }
        let r = self.index.flush();
        self.note_index(r);
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::pcap::{Event, Reader};
    use common::testkit;
    use std::fs::File;

    #[test]
    fn files_rotate_and_read_back() {
        let dir = std::env::temp_dir().join(format!("record-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut r = Recorder::open(
            RecordConfig {
                dir: dir.clone(),
                max_file: 300,
                max_files: 2,
                max_age: None,
            },
            0,
        )
        .unwrap();
        let syn = testkit::emit(&common::wire::TcpBuilder {
            flags: TcpFlags::SYN,
            ..testkit::SEGMENT
        });
        let data = testkit::v4(b"GET / HTTP/1.1\r\n\r\n");
        let t = |port: u16| {
            FourTuple::new(
                SocketAddr::from(([198, 18, 1, 2], port)),
                SocketAddr::from(([198, 18, 1, 1], 80)),
            )
        };
        for port in 1..=4 {
            r.record(t(port), Some(0), Some(t(port).client.into()), &syn);
            r.record(t(port), Some(0), None, &data);
            r.record(t(port), Some(0), None, &data);
        }
        r.record(t(9), Some(1), None, &syn); // another copy: not recorded
        r.flush();
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "index-w0.tsv",
                "rec-w0-000002.pcapng",
                "rec-w0-000003.pcapng"
            ],
            "two files kept"
        );
        let index = std::fs::read_to_string(dir.join("index-w0.tsv")).unwrap();
        assert_eq!(
            index.lines().count(),
            3,
            "the index keeps the lines of the files kept: {index}"
        );
        assert!(
            index
                .lines()
                .nth(2)
                .unwrap()
                .ends_with("198.18.1.1:80\trec-w0-000003.pcapng"),
            "{index}"
        );
        let mut rd = Reader::new(File::open(dir.join("rec-w0-000003.pcapng")).unwrap()).unwrap();
        let mut n = 0;
        while let Some(ev) = rd.next_event().unwrap() {
            match ev {
                Event::Packet(p) => {
                    assert!(p.data == &syn[..] || p.data == &data[..]);
                    n += 1;
                }
                Event::Skip(s) => panic!("{s:?}"),
            }
        }
        assert_eq!(n, 3);
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700, "the archive's directory is owner-only");
        for name in &names {
            assert_eq!(mode(&dir.join(name)), 0o600, "{name} is owner-only");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(test)]
mod restarts {
    use super::*;
    use common::testkit;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// One run of the recorder: `sessions` test connections, a file each (max_file is tiny).
    fn run(cfg: &RecordConfig, first_port: u16, sessions: u16) {
        let mut r = Recorder::open(cfg.clone(), 0).unwrap();
        let syn = testkit::emit(&common::wire::TcpBuilder {
            flags: TcpFlags::SYN,
            ..testkit::SEGMENT
        });
        let data = testkit::v4(b"GET / HTTP/1.1\r\n\r\n");
        for port in first_port..first_port + sessions {
            let t = FourTuple::new(
                SocketAddr::from(([198, 18, 1, 2], port)),
                SocketAddr::from(([198, 18, 1, 1], 80)),
            );
            r.record(t, Some(0), None, &syn);
            r.record(t, Some(0), None, &data);
        }
    }

    #[test]
    fn the_bound_holds_across_restarts_by_count_and_age() {
        let dir = std::env::temp_dir().join(format!("record-restarts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = RecordConfig {
            dir: dir.clone(),
            max_file: 1,
            max_files: 3,
            max_age: None,
        };
        run(&cfg, 1, 2);
        assert_eq!(
            names(&dir),
            [
                "index-w0.tsv",
                "rec-w0-000000.pcapng",
                "rec-w0-000001.pcapng"
            ]
        );
        // a restart: numbering goes on (file 0 is not overwritten), the old files count
        run(&cfg, 10, 2);
        assert_eq!(
            names(&dir),
            [
                "index-w0.tsv",
                "rec-w0-000001.pcapng",
                "rec-w0-000002.pcapng",
                "rec-w0-000003.pcapng"
            ]
        );
        run(&cfg, 20, 1);
        assert_eq!(
            names(&dir),
            [
                "index-w0.tsv",
                "rec-w0-000002.pcapng",
                "rec-w0-000003.pcapng",
                "rec-w0-000004.pcapng"
            ]
        );
        // the index: its header and one line per session of the files still there
        let index = std::fs::read_to_string(dir.join("index-w0.tsv")).unwrap();
        let files: Vec<&str> = index
            .lines()
            .skip(1)
            .map(|l| l.rsplit('\t').next().unwrap())
            .collect();
        assert_eq!(index.lines().next(), Some(INDEX_HEADER));
        assert_eq!(
            files,
            [
                "rec-w0-000002.pcapng",
                "rec-w0-000003.pcapng",
                "rec-w0-000004.pcapng"
            ],
            "{index}"
        );
        // by age: files older than max_age go at the next new file, whatever their number
        let old = SystemTime::now() - std::time::Duration::from_secs(7200);
        for n in [2, 3] {
            let f = std::fs::File::options()
                .write(true)
                .open(dir.join(format!("rec-w0-{n:06}.pcapng")))
                .unwrap();
            f.set_modified(old).unwrap();
        }
        let cfg = RecordConfig {
            max_age: Some(std::time::Duration::from_secs(3600)),
            max_files: 10,
            ..cfg
        };
        run(&cfg, 30, 1);
        assert_eq!(
            names(&dir),
            [
                "index-w0.tsv",
                "rec-w0-000004.pcapng",
                "rec-w0-000005.pcapng"
            ]
        );
        let index = std::fs::read_to_string(dir.join("index-w0.tsv")).unwrap();
        assert_eq!(index.lines().count(), 3, "{index}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
