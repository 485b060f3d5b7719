//! Shared pieces of the lab benchmarks (`bench_copier`, `bench_intercept`): CPU accounting
//! from `/proc`, [`perf`] around a step, the offered rates of their command lines, a daemon's
//! Prometheus text read from inside a namespace, the wall clock that nginx's `$msec` uses, and the
//! real-time figures of a copy (how much of the online traffic had reached the test server by a
//! given instant, and how late each copy came), computed from two access logs, and a small client
//! that reads redis' command counters.
//!
//! Everything here is a plain function of what it is given (files of `/proc`, log entries, an
//! instant), so the figures can be checked by unit tests without a lab.

pub mod peer;
pub mod perf;

use crate::{Host, Lab, LogEntry};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// USER_HZ: the unit of utime/stime in `/proc/PID/stat`, in ns.
pub const TICK_NS: f64 = 1e9 / 100.0;

/// CPU time of a process (or of one of its threads): ns on CPU per thread name from
/// `/proc/PID/task/*/schedstat`, and the user and system ticks of `/proc/PID/stat`.
#[derive(Debug, Clone, Default)]
pub struct Cpu {
    /// ns on CPU, summed over the threads of each name.
    pub by_thread: BTreeMap<String, u64>,
    /// utime, in [`TICK_NS`] units.
    pub user_ticks: u64,
    /// stime, in [`TICK_NS`] units.
    pub sys_ticks: u64,
}

impl Cpu {
    /// All threads of process `pid`, or only thread `tid` of it.
    pub fn read(pid: u32, tid: Option<u32>) -> Result<Cpu> {
        let mut cpu = Cpu::default();
        let dirs: Vec<std::path::PathBuf> = match tid {
            Some(t) => vec![format!("/proc/{pid}/task/{t}").into()],
            None => std::fs::read_dir(format!("/proc/{pid}/task"))
                .context("/proc/PID/task")?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect(),
        };
        for dir in dirs {
            let (Ok(comm), Ok(ss)) = (
                std::fs::read_to_string(dir.join("comm")),
                std::fs::read_to_string(dir.join("schedstat")),
            ) else {
                continue; // the thread ended meanwhile
            };
            let ns: u64 = ss
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            *cpu.by_thread.entry(comm.trim().to_owned()).or_default() += ns;
        }
        let stat_path = match tid {
            Some(t) => format!("/proc/{pid}/task/{t}/stat"),
            None => format!("/proc/{pid}/stat"),
        };
        let stat =
            std::fs::read_to_string(&stat_path).with_context(|| format!("read {stat_path}"))?;
        // fields after "(comm)": state is field 3, utime 14, stime 15
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        cpu.user_ticks = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
        cpu.sys_ticks = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
        Ok(cpu)
    }

    /// ns on CPU of every thread.
    pub fn total(&self) -> u64 {
        self.by_thread.values().sum()
    }

    /// ns on CPU of the threads whose name starts with `prefix` (`engine`, `engine-0`, ...).
    pub fn threads(&self, prefix: &str) -> u64 {
        self.by_thread
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v)
            .sum()
    }

    /// The CPU used between `before` and `self`.
    pub fn minus(&self, before: &Cpu) -> Cpu {
        let mut by_thread = self.by_thread.clone();
        for (k, v) in by_thread.iter_mut() {
            *v = v.saturating_sub(before.by_thread.get(k).copied().unwrap_or(0));
        }
        Cpu {
            by_thread,
            user_ticks: self.user_ticks.saturating_sub(before.user_ticks),
            sys_ticks: self.sys_ticks.saturating_sub(before.sys_ticks),
        }
    }

    /// CPU seconds in all.
    pub fn secs(&self) -> f64 {
        self.total() as f64 / 1e9
    }
}

/// An offered rate of a benchmark's command line: `20000`, `20k`, or `max` (`None`: as fast as
/// the load goes).
pub fn parse_rate(s: &str) -> Result<Option<u64>> {
    let s = s.trim();
    if s == "max" {
        return Ok(None);
    }
    let (n, mult) = match s.strip_suffix('k') {
        Some(n) => (n, 1000.0),
        None => (s, 1.0),
    };
    let v: f64 = n
        .parse()
        .with_context(|| format!("rate {s:?} is not a number, NNk or max"))?;
    if v.is_nan() || v <= 0.0 {
        bail!("rate {s:?} must be positive");
    }
    Ok(Some((v * mult) as u64))
}

/// A rate for a table: `20000{unit}`, or `max`.
pub fn rate_label(unit: &str, rate: Option<u64>) -> String {
    rate.map(|r| format!("{r}{unit}"))
        .unwrap_or_else(|| "max".into())
}

/// A Prometheus endpoint's text (`GET /metrics` at `at`, an `IP:PORT`), fetched from inside
/// host `h`; empty when unreachable.
pub fn fetch_metrics(lab: &Lab, h: Host, at: &str) -> String {
    use std::io::{Read, Write};
    lab.in_ns(h, || -> Result<String> {
        let mut s =
            std::net::TcpStream::connect_timeout(&at.parse()?, std::time::Duration::from_secs(2))?;
        s.set_read_timeout(Some(std::time::Duration::from_secs(3)))?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    })
    .and_then(|r| r)
    .unwrap_or_default()
}

/// Milliseconds since the Unix epoch, from the wall clock: the clock nginx's `$msec` reads, so
/// an instant taken here compares with the access logs of the lab (same machine).
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The value at quantile `q` (0..=1) of sorted values (nearest rank); `None` when empty.
pub fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    Some(sorted[i])
}

/// How close to real time the copy of one load was.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RealTime {
    /// Requests served online.
    pub online: u64,
    /// Online requests whose copy the test server had logged by the end of the load.
    pub at_end: u64,
    /// ... by one second after the end of the load.
    pub within_1s: u64,
    /// ... at all (by the time the logs were read).
    pub copied: u64,
    /// Test minus online log time of each copied request, in ms, sorted.
    pub lags_ms: Vec<i64>,
}

impl RealTime {
    /// Share of the online requests, in %, of a count (100 when nothing was served).
    pub fn pct(&self, n: u64) -> f64 {
        if self.online == 0 {
            100.0
        } else {
            100.0 * n as f64 / self.online as f64
        }
    }

    /// `at end / +1 s / final` shares in %, for a table cell.
    pub fn shares_cell(&self) -> String {
        if self.online == 0 {
            return "-".into();
        }
        format!(
            "{:.1} / {:.1} / {:.2}",
            self.pct(self.at_end),
            self.pct(self.within_1s),
            self.pct(self.copied)
        )
    }

    /// `p50 / p99 / max` lag in ms, for a table cell.
    pub fn lag_cell(&self) -> String {
        match (
            quantile(&self.lags_ms, 0.5),
            quantile(&self.lags_ms, 0.99),
            self.lags_ms.last(),
        ) {
            (Some(a), Some(b), Some(c)) => format!("{a} / {b} / {c}"),
            _ => "-".into(),
        }
    }
}

/// Matches the copies of one load to its online requests and times them.
///
/// `online` and `test` are the access-log entries of the load at either server (each with
/// `$msec`); `end_ms` is when the load generator stopped sending ([`wall_ms`]); copies logged
/// after `until_ms` do not count ("final" is then "by `until_ms`"; `u64::MAX`: every copy). Requests are
/// matched by fingerprint (method, URI, length, body); among equal fingerprints the k-th online
/// request in time goes with the k-th copy in time. A copy counts "at the end" when the test
/// server logged it at or before `end_ms`, "within 1 s" at or before `end_ms + 1000`. nginx logs a
/// request when its answer is out, at both servers, so the lag is "answered at the test server"
/// minus "answered online", at the logs' 1 ms resolution. Entries without `$msec` count as copied
/// but are not timed.
pub fn realtime(online: &[&LogEntry], test: &[&LogEntry], end_ms: u64, until_ms: u64) -> RealTime {
    type Times = BTreeMap<String, Vec<Option<u64>>>;
    let group = |entries: &[&LogEntry]| {
        let mut m: Times = BTreeMap::new();
        for e in entries {
            m.entry(e.fingerprint()).or_default().push(e.msec);
        }
        for v in m.values_mut() {
            v.sort_unstable();
        }
        m
    };
    let in_time: Vec<&LogEntry> = test
        .iter()
        .copied()
        .filter(|e| e.msec.is_none_or(|t| t <= until_ms))
        .collect();
    let (on, te) = (group(online), group(&in_time));
    let mut rt = RealTime {
        online: online.len() as u64,
        ..RealTime::default()
    };
    for (fp, on_times) in &on {
        let Some(te_times) = te.get(fp) else { continue };
        for (o, t) in on_times.iter().zip(te_times) {
            rt.copied += 1;
            let Some(t) = *t else { continue };
            if t <= end_ms {
                rt.at_end += 1;
            }
            if t <= end_ms + 1000 {
                rt.within_1s += 1;
            }
            if let Some(o) = *o {
                rt.lags_ms.push(t as i64 - o as i64);
            }
        }
    }
    rt.lags_ms.sort_unstable();
    rt
}

/// The `calls=` count of one command in the output of redis' `INFO commandstats`
/// (`cmdstat_get:calls=12,usec=...`); 0 when the command was never called.
pub fn redis_calls(info: &str, command: &str) -> u64 {
    let key = format!("cmdstat_{command}:");
    info.lines()
        .find_map(|l| l.trim().strip_prefix(&key))
        .and_then(|rest| rest.split(',').find_map(|kv| kv.strip_prefix("calls=")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A connection to a redis server that asks it for `INFO` sections (call [`RedisConn::connect`]
/// inside the namespace whose server it asks; the socket stays there).
#[derive(Debug)]
pub struct RedisConn {
    r: std::io::BufReader<std::net::TcpStream>,
}

impl RedisConn {
    /// Connects, retrying until the server listens or `timeout` passes.
    pub fn connect(at: std::net::SocketAddr, timeout: std::time::Duration) -> Result<RedisConn> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match std::net::TcpStream::connect_timeout(&at, std::time::Duration::from_secs(1)) {
                Ok(s) => {
                    s.set_read_timeout(Some(std::time::Duration::from_secs(3)))?;
                    s.set_nodelay(true)?;
                    return Ok(RedisConn {
                        r: std::io::BufReader::new(s),
                    });
                }
                Err(e) if std::time::Instant::now() > deadline => {
                    return Err(e).with_context(|| format!("connect to redis at {at}"));
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
            }
        }
    }

    /// Sends `INFO <section>` and returns the text of the answer (a RESP bulk string).
    pub fn info(&mut self, section: &str) -> Result<String> {
        use std::io::{BufRead, Read, Write};
        self.r
            .get_mut()
            .write_all(format!("INFO {section}\r\n").as_bytes())
            .context("write to redis")?;
        let mut head = String::new();
        self.r.read_line(&mut head).context("read from redis")?;
        let len: usize = head
            .trim_end()
            .strip_prefix('$')
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("redis answered {head:?} to INFO"))?;
        let mut body = vec![0u8; len + 2];
        self.r.read_exact(&mut body).context("read from redis")?;
        body.truncate(len);
        String::from_utf8(body).context("INFO answer is not UTF-8")
    }

    /// The `calls` of `command` in `INFO commandstats`.
    pub fn calls(&mut self, command: &str) -> Result<u64> {
        Ok(redis_calls(&self.info("commandstats")?, command))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(uri: &str, msec: Option<u64>) -> LogEntry {
        LogEntry {
            remote_addr: "198.18.1.2".into(),
            remote_port: 1,
            connection: 1,
            connection_requests: 1,
            method: "GET".into(),
            status: 200,
            request_length: 80,
            body_bytes_sent: 10,
            uri: uri.into(),
            body: None,
            msec,
            dye: None,
        }
    }

    #[test]
    fn times_the_copies_against_the_end_of_the_load() {
        let on = [
            entry("/a", Some(1000)),
            entry("/b", Some(1500)),
            entry("/c", Some(1900)),
            entry("/d", Some(1950)),
        ];
        // /a on time, /b 600 ms late (after the end at 2000), /c 1101 ms late (after end + 1 s), /d never
        let te = [
            entry("/c", Some(3001)),
            entry("/a", Some(1001)),
            entry("/b", Some(2100)),
            entry("/x", Some(1)),
        ];
        let (on, te): (Vec<&LogEntry>, Vec<&LogEntry>) = (on.iter().collect(), te.iter().collect());
        let rt = realtime(&on, &te, 2000, u64::MAX);
        assert_eq!(
            (rt.online, rt.at_end, rt.within_1s, rt.copied),
            (4, 1, 2, 3)
        );
        let by_2500 = realtime(&on, &te, 2000, 2500);
        assert_eq!(
            (by_2500.at_end, by_2500.within_1s, by_2500.copied),
            (1, 2, 2)
        );
        assert_eq!(rt.lags_ms, vec![1, 600, 1101]);
        assert_eq!(rt.pct(rt.copied), 75.0);
        assert_eq!(rt.shares_cell(), "25.0 / 50.0 / 75.00");
        assert_eq!(rt.lag_cell(), "600 / 1101 / 1101");
    }

    #[test]
    fn pairs_equal_fingerprints_in_time_order() {
        let on = [entry("/same", Some(200)), entry("/same", Some(100))];
        let te = [entry("/same", Some(150)), entry("/same", Some(260))];
        let (on, te): (Vec<&LogEntry>, Vec<&LogEntry>) = (on.iter().collect(), te.iter().collect());
        let rt = realtime(&on, &te, 1000, u64::MAX);
        assert_eq!(rt.lags_ms, vec![50, 60]);
        assert_eq!(realtime(&[], &[], 0, u64::MAX).shares_cell(), "-");
        assert_eq!(realtime(&[], &[], 0, u64::MAX).lag_cell(), "-");
    }

    #[test]
    fn quantiles() {
        assert_eq!(quantile::<i64>(&[], 0.5), None);
        assert_eq!(quantile(&[1, 2, 3, 4, 5], 0.5), Some(3));
        assert_eq!(quantile(&[1, 2, 3, 4, 5], 1.0), Some(5));
        let v: Vec<u32> = (1..=1000).collect();
        assert_eq!(quantile(&v, 0.99), Some(990));
    }

    #[test]
    fn reads_redis_commandstats() {
        let info = "# Commandstats\r\ncmdstat_config:calls=2,usec=30,usec_per_call=15.00\r\n\
                    cmdstat_get:calls=200000,usec=90000,usec_per_call=0.45,rejected_calls=0,failed_calls=0\r\n";
        assert_eq!(redis_calls(info, "get"), 200_000);
        assert_eq!(redis_calls(info, "config"), 2);
        assert_eq!(redis_calls(info, "set"), 0);
    }

    #[test]
    fn rates_parse_and_label() {
        assert_eq!(parse_rate("20000").unwrap(), Some(20_000));
        assert_eq!(parse_rate(" 2.5k ").unwrap(), Some(2_500));
        assert_eq!(parse_rate("max").unwrap(), None);
        for bad in ["0", "-3k", "fast", "NaN"] {
            let e = parse_rate(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{bad:?} -> {e}");
        }
        assert_eq!(rate_label("/s", Some(5)), "5/s");
        assert_eq!(rate_label(" pps", None), "max");
    }
}
