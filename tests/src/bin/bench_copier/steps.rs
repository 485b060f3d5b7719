//! One rate step of `bench_copier`: what it reads about the processes (metrics, CPU, NFQUEUE
//! drops), the matching of the two access logs, and the table of the steps.

use super::*;

// What we read about the processes.

/// The copier's metrics (fetched from inside `online`), summed over label sets by name.
pub(super) fn copier_metrics(lab: &Lab) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for (key, v) in copier_metric_lines(lab) {
        let name = key.split('{').next().unwrap_or(&key).to_owned();
        *m.entry(name).or_default() += v;
    }
    m
}

/// The intercept's counters that the steps read: (records sent to copiers, packets queued,
/// record writes by the NFQUEUE worker, record writes by the control writer; the writes are 0
/// for an intercept older than `intercept_record_writes_total`).
pub(super) fn intercept_counters(lab: &Lab) -> (f64, f64, f64, f64) {
    let text = fetch_metrics(lab, Host::Test, INTERCEPT_METRICS);
    (
        metric_sum(&text, "intercept_records_sent_total", &[]),
        metric_sum(&text, "intercept_packets_queued_total", &[]),
        metric_sum(&text, "intercept_record_writes_total", &["by=\"nfqueue\""]),
        metric_sum(&text, "intercept_record_writes_total", &["by=\"writer\""]),
    )
}

/// The copier's metrics as `(name{labels}, value)` lines.
pub(super) fn copier_metric_lines(lab: &Lab) -> Vec<(String, f64)> {
    let text = fetch_metrics(lab, super::copier_host(), COPIER_METRICS);
    text.lines()
        .filter(|l| l.starts_with("copier_"))
        .filter_map(|l| {
            let (key, val) = l.rsplit_once(' ')?;
            Some((key.to_owned(), val.parse::<f64>().ok()?))
        })
        .collect()
}

pub(super) fn metric(m: &BTreeMap<String, f64>, name: &str) -> u64 {
    // Summed over label sets: with `--workers N` every series carries a `worker` label.
    let labelled = format!("{name}{{");
    m.iter()
        .filter(|(k, _)| k.as_str() == name || k.starts_with(&labelled))
        .map(|(_, v)| *v)
        .sum::<f64>() as u64
}

/// Packets the test host's NFQUEUE queue 0 dropped so far (queue full + socket full), from
/// `/proc/net/netfilter/nfnetlink_queue` inside `test`.
pub(super) fn nfqueue_drops(lab: &Lab) -> Result<u64> {
    let text = lab.exec_ok(Host::Test, &["cat", "/proc/net/netfilter/nfnetlink_queue"])?;
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() >= 8 && f[0] == "0" {
            return Ok(f[5].parse::<u64>().unwrap_or(0) + f[6].parse::<u64>().unwrap_or(0));
        }
    }
    bail!("queue 0 is not bound in the test namespace:\n{text}")
}

/// [`nfqueue_drops`], or 0 once our intercept stopped for the C tool (`--peer`: its intercept
/// captures with pcap, no queue).
fn nfq_drops(ctx: Ctx<'_>) -> Result<u64> {
    if ctx.c.stopped() {
        return Ok(0);
    }
    nfqueue_drops(ctx.lab)
}

// ---------------------------------------------------------------------------------------------
// Steps.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Idle,
    KeepAlive,
    Short,
    /// One of the issue-10 scenarios.
    Scenario(Scenario),
}

/// One step's figures.
#[derive(Debug)]
pub(super) struct Row {
    pub(super) kind: Kind,
    pub(super) label: String,
    pub(super) tag: String,
    pub(super) secs: f64,
    pub(super) load: Load,
    /// Online log delta, and the test log's.
    pub(super) online: u64,
    pub(super) test: u64,
    /// From matching the final logs by fingerprint (filled in at the end).
    pub(super) matched: u64,
    pub(super) extra: u64,
    pub(super) copier: Cpu,
    pub(super) intercept: Cpu,
    /// The CPU of `copier-floor` over the same window, in the scenarios that run it (`floor.rs`).
    pub(super) floor: Option<Cpu>,
    /// The floor's packets captured and sent in the step (its last counters line).
    pub(super) floor_packets: (u64, u64),
    /// The copier's `copier_segments_sent_total` in the step.
    pub(super) segments_sent: u64,
    pub(super) rss_kib: u64,
    pub(super) hwm_kib: u64,
    pub(super) kernel_drops: u64,
    /// The test host's NFQUEUE drops (queue full or socket full) during the step.
    pub(super) nfq_drops: u64,
    /// Sessions in the copier's table once the step settled.
    pub(super) sessions_open: u64,
    pub(super) leaks: u64,
    /// Time from the end of the load to the settled test server.
    pub(super) drain_secs: f64,
    /// When the load ended: the last request written (wall clock, ms since the epoch).
    pub(super) end_ms: u64,
    /// How close to real time the copy was (from the final logs; for redis from its counters).
    pub(super) rt: RealTime,
    /// Records the intercept sent to copiers, and packets it read from NFQUEUE, in the step.
    pub(super) records: u64,
    pub(super) queued: u64,
    /// Writes of records to copiers (frames, but for records past 1 MiB), by the NFQUEUE
    /// worker and by the control writer (0 for an older intercept).
    pub(super) writes: (u64, u64),
    /// Client connections (scenarios; 0 for the rate steps).
    pub(super) conns: usize,
    /// The time the CPU was measured over: the load and the drain after it.
    pub(super) window_secs: f64,
    /// Scenarios: when the wait for the copies ended (wall clock ms); copies after it do not
    /// count for the step. `None`: every copy in the final logs counts.
    pub(super) final_ms: Option<u64>,
    /// Scenarios: the wait ended at its cap, with copies still arriving.
    pub(super) capped: bool,
    /// Copied sessions that failed during the step (`copier_sessions_failed_total`).
    pub(super) failed: u64,
    /// What the load generator said (redis-benchmark's summary).
    pub(super) note: String,
    /// Measured with the C tool (`--peer`) instead of the copier and the intercept.
    pub(super) peer: bool,
}

/// What a step reads before its load, to subtract.
#[derive(Debug)]
pub(super) struct Before {
    pub(super) online: u64,
    pub(super) test: u64,
    pub(super) leaks: u64,
    pub(super) copier_m: BTreeMap<String, f64>,
    pub(super) nfq: u64,
    pub(super) copier: Cpu,
    pub(super) intercept: Cpu,
    /// The intercept's (records sent, packets queued, writes by the worker, by the writer).
    pub(super) icpt: (f64, f64, f64, f64),
    pub(super) at: Instant,
}

impl Before {
    pub(super) fn take(ctx: Ctx<'_>) -> Result<Before> {
        let Ctx { lab, c, pids } = ctx;
        Ok(Before {
            online: c.online.request_count() as u64,
            test: c.test().request_count() as u64,
            leaks: c.leaks.count(lab)?,
            copier_m: copier_metrics(lab),
            nfq: nfq_drops(ctx)?,
            icpt: intercept_counters(lab),
            copier: Cpu::read(pids.copier, None)?,
            intercept: Cpu::read(pids.intercept, None)?,
            at: Instant::now(),
        })
    }

    /// The step's row, once its load ended (`load_end`) and the test server settled: reads the
    /// CPU now, then (after [`EXPORT_LAG`]) the counters.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn finish(
        &self,
        ctx: Ctx<'_>,
        kind: Kind,
        label: String,
        tag: String,
        secs: f64,
        load: Load,
        online: u64,
        load_end: Instant,
    ) -> Result<Row> {
        let Ctx { lab, c, pids } = ctx;
        let drain_secs = load_end.elapsed().as_secs_f64();
        let window_secs = self.at.elapsed().as_secs_f64();
        let t1 = c.test().request_count() as u64;
        let (cc1, ic1) = (
            Cpu::read(pids.copier, None)?,
            Cpu::read(pids.intercept, None)?,
        );
        let (rss_kib, hwm_kib) = memory_kib(pids.copier);
        // the daemons export their counters about once a second: with the quiet time, more than
        // a second has passed since the last copy, so an export came after it
        std::thread::sleep(EXPORT_LAG);
        let (l1, m1, q1, i1) = (
            c.leaks.count(lab)?,
            copier_metrics(lab),
            nfq_drops(ctx)?,
            intercept_counters(lab),
        );
        let drops = |m: &BTreeMap<String, f64>| metric(m, "copier_kernel_drops_total");
        c.check_alive()?;
        let end_ms = if load.last_send_ms > 0 {
            load.last_send_ms
        } else {
            wall_ms()
        };
        Ok(Row {
            kind,
            label,
            tag,
            secs,
            load,
            online,
            test: t1.saturating_sub(self.test),
            matched: 0,
            extra: 0,
            copier: cc1.minus(&self.copier),
            intercept: ic1.minus(&self.intercept),
            floor: None,
            floor_packets: (0, 0),
            segments_sent: metric(&m1, "copier_segments_sent_total")
                .saturating_sub(metric(&self.copier_m, "copier_segments_sent_total")),
            rss_kib,
            hwm_kib,
            kernel_drops: drops(&m1).saturating_sub(drops(&self.copier_m)),
            nfq_drops: q1.saturating_sub(self.nfq),
            sessions_open: metric(&m1, "copier_sessions_active"),
            leaks: l1 - self.leaks,
            drain_secs,
            end_ms,
            rt: RealTime::default(),
            records: (i1.0 - self.icpt.0).max(0.0) as u64,
            queued: (i1.1 - self.icpt.1).max(0.0) as u64,
            writes: (
                (i1.2 - self.icpt.2).max(0.0) as u64,
                (i1.3 - self.icpt.3).max(0.0) as u64,
            ),
            conns: 0,
            window_secs,
            final_ms: None,
            capped: false,
            failed: metric(&m1, "copier_sessions_failed_total")
                .saturating_sub(metric(&self.copier_m, "copier_sessions_failed_total")),
            note: String::new(),
            peer: false,
        })
    }
}

#[derive(Debug)]
pub(super) struct Pids {
    pub(super) copier: u32,
    pub(super) intercept: u32,
}

/// What every step works on.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ctx<'a> {
    pub(super) lab: &'a Lab,
    pub(super) c: &'a Copying,
    pub(super) pids: &'a Pids,
}

pub(super) fn run_step(
    ctx: Ctx<'_>,
    gen: &mut Generator,
    kind: Kind,
    label: String,
    tag: String,
    rate: Option<u64>,
    dur: Duration,
) -> Result<Row> {
    let Ctx { lab, c, .. } = ctx;
    let test = c.test();
    let before = Before::take(ctx)?;
    let (o0, t0) = (before.online, before.test);
    let load = match kind {
        Kind::Idle | Kind::Scenario(_) => {
            std::thread::sleep(dur);
            Load {
                secs: dur.as_secs_f64(),
                ..Load::default()
            }
        }
        Kind::KeepAlive => {
            let t = tag.clone();
            lab.in_ns(Host::Client, || gen.keepalive(&t, rate, dur))?
        }
        Kind::Short => {
            let t = tag.clone();
            let r = rate.context("short connections need a rate")?;
            lab.in_ns(Host::Client, || gen.short(&t, r, dur))?
        }
    };
    let load_end = Instant::now();
    // nginx logs a request once its answer is out: the client may have it a moment before
    std::thread::sleep(Duration::from_millis(100));
    let o1 = c.online.request_count() as u64;
    let want = (t0 + (o1 - o0)) as usize;
    test.wait_requests(want, DRAIN_WAIT);
    test.wait_settled(QUIET, Duration::from_secs(5));
    before.finish(
        ctx,
        kind,
        label,
        tag,
        dur.as_secs_f64(),
        load,
        o1 - o0,
        load_end,
    )
}

/// The step tag of a logged URI (`...?s=TAG&...`).
pub(super) fn tag_of(uri: &str) -> Option<&str> {
    let q = uri.split_once('?')?.1;
    q.split('&').find_map(|kv| kv.strip_prefix("s="))
}

/// Fills in `matched`, `extra` and the real-time figures of every row from the final logs;
/// returns the test requests that carry no step tag of ours (must be 0).
pub(super) fn match_logs(rows: &mut [Row], online: &[LogEntry], test: &[LogEntry]) -> u64 {
    // per step tag: (online, test) request fingerprints with their counts
    type Multiset = BTreeMap<String, u64>;
    let mut by_tag: BTreeMap<String, (Multiset, Multiset)> = BTreeMap::new();
    type Entries<'a> = (Vec<&'a LogEntry>, Vec<&'a LogEntry>);
    let mut entries: BTreeMap<&str, Entries> = BTreeMap::new();
    for e in online {
        if let Some(t) = tag_of(&e.uri) {
            entries.entry(t).or_default().0.push(e);
            *by_tag
                .entry(t.to_owned())
                .or_default()
                .0
                .entry(e.fingerprint())
                .or_default() += 1;
        }
    }
    let mut foreign = 0;
    for e in test {
        match tag_of(&e.uri) {
            Some(t) => {
                entries.entry(t).or_default().1.push(e);
                *by_tag
                    .entry(t.to_owned())
                    .or_default()
                    .1
                    .entry(e.fingerprint())
                    .or_default() += 1
            }
            None => foreign += 1,
        }
    }
    for r in rows.iter_mut() {
        let Some((on, te)) = by_tag.get(&r.tag) else {
            continue;
        };
        let matched: u64 = on
            .iter()
            .map(|(k, &n)| n.min(te.get(k).copied().unwrap_or(0)))
            .sum();
        let test_total: u64 = te.values().sum();
        r.matched = matched;
        r.extra = test_total - matched;
        r.online = on.values().sum();
        if let Some((on, te)) = entries.get(r.tag.as_str()) {
            r.rt = realtime(on, te, r.end_ms, r.final_ms.unwrap_or(u64::MAX));
        }
    }
    foreign
}

pub(super) fn fidelity(r: &Row) -> f64 {
    if r.online == 0 {
        100.0
    } else {
        100.0 * r.matched as f64 / r.online as f64
    }
}

pub(super) fn print_table(rows: &mut [Row]) {
    println!(
        "| step | offered req/s | online req/s | online requests | test requests | fidelity % | loss % | extra | \
         copier CPU s/1000 req | copier CPU % | user % | sys % | engine thr(s) % | copier RSS MiB (peak) | \
         intercept CPU % | capture drops | NFQUEUE drops | sessions open after | leaks | client p50/p99 ms | drain s | \
         copied by load end / +1 s / final % | copy lag p50/p99/max ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows.iter_mut() {
        let pct = |ns: f64| 100.0 * ns / (r.secs * 1e9);
        let cpu_ns = r.copier.total() as f64;
        let per_k = if r.matched == 0 {
            "-".to_string()
        } else {
            format!("{:.3}", cpu_ns / 1e9 / (r.matched as f64 / 1000.0))
        };
        let fid = fidelity(r);
        let (p50, p99) = (r.load.percentile_ms(0.5), r.load.percentile_ms(0.99));
        let offered = if r.kind == Kind::Idle {
            0.0
        } else {
            r.load.sent as f64 / r.secs
        };
        println!(
            "| {} | {:.0} | {:.0} | {} | {} | {:.3} | {:.4} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} ({:.1}) | {:.1} | {} | {} | {} | {} | {:.2}/{:.2} | {:.1} | {} | {} |",
            r.label,
            offered,
            r.online as f64 / r.secs,
            r.online,
            r.matched,
            fid,
            100.0 - fid,
            r.extra,
            per_k,
            pct(cpu_ns),
            pct(r.copier.user_ticks as f64 * TICK_NS),
            pct(r.copier.sys_ticks as f64 * TICK_NS),
            pct(r.copier.threads("engine") as f64),
            r.rss_kib as f64 / 1024.0,
            r.hwm_kib as f64 / 1024.0,
            pct(r.intercept.total() as f64),
            r.kernel_drops,
            r.nfq_drops,
            r.sessions_open,
            r.leaks,
            p50,
            p99,
            r.drain_secs,
            r.rt.shares_cell(),
            r.rt.lag_cell(),
        );
    }
}

pub(super) fn best_rate(rows: &[Row], kind: Kind) -> String {
    let ok: Vec<&Row> = rows
        .iter()
        .filter(|r| r.kind == kind && r.online > 0)
        .collect();
    match ok
        .iter()
        .filter(|r| fidelity(r) >= GOOD_FIDELITY)
        .max_by(|a, b| (a.online as f64 / a.secs).total_cmp(&(b.online as f64 / b.secs)))
    {
        Some(r) => format!(
            "{:.0} requests/s served online (step {}), fidelity {:.3} %",
            r.online as f64 / r.secs,
            r.label,
            fidelity(r)
        ),
        None => format!("none of the {} steps reached {GOOD_FIDELITY} %", ok.len()),
    }
}
