//! The issue-10 scenarios of `bench_copier`: fixed-rate CPU scenarios, redis, full-speed
//! keep-alive; their tables and the targets.

use super::*;

// Issue 10: real time at full speed, and CPU per copied request at the C tool's comparison points.

/// Think time of the fixed-rate CPU scenarios: 16 connections, each waiting this long after
/// every answer (about 3,500 requests/s when answers are quick).
pub(super) const THINK: Duration = Duration::from_millis(4);
/// The 100 KB answer of `think-100k`, in both document roots.
pub(super) const BIG_PATH: &str = "/big.bin";
pub(super) const BIG_SIZE: usize = 100 * 1024;
/// A second client address for `think-close`: its client ports walk on their own, so no copy
/// meets a TIME_WAIT left at the test server by the short-connection steps.
pub(super) const CLIENT_B: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 3);
pub(super) const REDIS_PORT: u16 = 6379;
/// The HTTP/2 nginx pair of the `h2` scenario (cleartext, prior knowledge), beside port 80's.
pub(super) const H2_PORT: u16 = 8080;
/// Requests of the `h2` scenario, on [`H2_CONNS`] connections with [`H2_STREAMS`] streams in
/// flight each (the load of issue 29's measurement).
pub(super) const H2_REQUESTS: u64 = 40_000;
pub(super) const H2_CONNS: usize = 8;
pub(super) const H2_STREAMS: usize = 10;
/// The time without a new copy that ends the wait for a scenario's copies before its cap
/// (`--final-wait`).
pub(super) const STALL: Duration = Duration::from_secs(3);

/// The C tool's CPU seconds per 1,000 copied requests (copier, intercept) in the issue's
/// comparison: keep-alive, `Connection: close`, 100 KB answers. The target is a third of each.
pub(super) const C_TOOL_CPU: [(Scenario, f64, f64); 3] = [
    (Scenario::ThinkKeepAlive, 0.025, 0.016),
    (Scenario::ThinkClose, 0.071, 0.054),
    (Scenario::Think100k, 0.150, 0.584),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scenario {
    H2,
    Full16,
    Full100k,
    Full1,
    Redis,
    ThinkKeepAlive,
    ThinkClose,
    Think100k,
}

impl Scenario {
    /// The default order: the fixed-rate CPU scenarios first, the full-speed ones last (their
    /// lock-step copies may still arrive after the wait for them ends, and would otherwise
    /// load the next scenario), the one connection at the very end.
    pub(super) const ALL: [Scenario; 8] = [
        Scenario::ThinkKeepAlive,
        Scenario::ThinkClose,
        Scenario::Think100k,
        Scenario::Redis,
        Scenario::H2,
        Scenario::Full16,
        Scenario::Full100k,
        Scenario::Full1,
    ];

    pub(super) fn name(self) -> &'static str {
        match self {
            Scenario::H2 => "h2",
            Scenario::Full16 => "full16",
            Scenario::Full100k => "full100k",
            Scenario::Full1 => "full1",
            Scenario::Redis => "redis",
            Scenario::ThinkKeepAlive => "think-ka",
            Scenario::ThinkClose => "think-close",
            Scenario::Think100k => "think-100k",
        }
    }

    /// The step tag in the URIs.
    pub(super) fn tag(self) -> &'static str {
        match self {
            Scenario::H2 => "h2",
            Scenario::Full16 => "f16",
            Scenario::Full100k => "fb",
            Scenario::Full1 => "f1",
            Scenario::Redis => "rd",
            Scenario::ThinkKeepAlive => "tk",
            Scenario::ThinkClose => "tc",
            Scenario::Think100k => "tb",
        }
    }

    pub(super) fn conns(self) -> usize {
        match self {
            Scenario::Full1 => 1,
            Scenario::H2 => H2_CONNS,
            _ => 16,
        }
    }

    pub(super) fn what(self) -> &'static str {
        match self {
            Scenario::H2 => "HTTP/2 multiplexed at full speed: h2load -n 40000 -c 8 -m 10 against nginx `listen 8080 http2` (cleartext, prior knowledge) on online and test, the copier mapping 8080; counted from that nginx pair's access logs, no lag",
            Scenario::Full16 => "HTTP keep-alive, 16 connections at full speed (next request as soon as the answer is in, like wrk -c 16), for --scenario-secs",
            Scenario::Full100k => "HTTP keep-alive, 100 KB answers, 16 connections at full speed (like wrk -c 16 on a 100 KB file), for --scenario-secs",
            Scenario::Full1 => "HTTP keep-alive, 1 connection at full speed, for --scenario-secs",
            Scenario::Redis => "redis GET: redis-benchmark -h 198.18.1.1 -c 16 -n REQUESTS -t get (no pipelining; --redis-requests, default 200000); counted with INFO commandstats, no lag (no access log)",
            Scenario::ThinkKeepAlive => "HTTP keep-alive, 16 connections, 4 ms think time after each answer (CPU per request)",
            Scenario::ThinkClose => "HTTP Connection: close, 16 clients each opening one connection per request, 4 ms think time",
            Scenario::Think100k => "HTTP keep-alive, 100 KB answers, 16 connections, 4 ms think time (CPU, records per answer)",
        }
    }

    pub(super) fn parse(s: &str) -> Result<Scenario> {
        let s = s.trim();
        Scenario::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .with_context(|| {
                let names: Vec<&str> = Scenario::ALL.iter().map(|c| c.name()).collect();
                format!(
                    "unknown scenario {s:?} (all, none, or a list of {})",
                    names.join(", ")
                )
            })
    }
}

/// The redis servers of the `redis` scenario and a connection to each that reads its counters.
#[derive(Debug)]
pub(super) struct Redis {
    pub(super) procs: Vec<lab::Proc>,
    pub(super) online: RedisConn,
    pub(super) test: RedisConn,
}

impl Redis {
    pub(super) fn start(lab: &mut Lab) -> Result<Redis> {
        let mut procs = Vec::new();
        for h in [Host::Online, Host::Test] {
            let dir = lab.dir().join(format!("redis-{}", h.name()));
            std::fs::create_dir_all(&dir)?;
            let d = dir.to_string_lossy().into_owned();
            let port = REDIS_PORT.to_string();
            let argv = [
                "redis-server",
                "--port",
                &port,
                "--bind",
                "0.0.0.0",
                "--protected-mode",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                &d,
            ];
            procs.push(lab.spawn(h, &format!("redis-{}", h.name()), &argv)?);
        }
        let at = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, REDIS_PORT));
        let wait = Duration::from_secs(10);
        let online = lab
            .in_ns(Host::Online, || RedisConn::connect(at, wait))?
            .context("redis on online")?;
        let test = lab
            .in_ns(Host::Test, || RedisConn::connect(at, wait))?
            .context("redis on test")?;
        Ok(Redis {
            procs,
            online,
            test,
        })
    }

    pub(super) fn check_alive(&self) -> Result<()> {
        for p in &self.procs {
            if let Some(st) = p.exited() {
                bail!("{} exited ({st}):\n{}", p.name(), tail(&p.log(), 20));
            }
        }
        Ok(())
    }
}

/// Waits until `count()` reaches `want` or stops growing for [`STALL`], at most `cap`; returns
/// the last count and whether the cap ended the wait.
pub(super) fn wait_final(mut count: impl FnMut() -> u64, want: u64, cap: Duration) -> (u64, bool) {
    let deadline = Instant::now() + cap;
    let mut last = count();
    let mut since = Instant::now();
    loop {
        if last >= want || since.elapsed() >= STALL {
            return (last, false);
        }
        if Instant::now() >= deadline {
            return (last, true);
        }
        std::thread::sleep(Duration::from_millis(50));
        let c = count();
        if c != last {
            last = c;
            since = Instant::now();
        }
    }
}

/// What the scenarios keep between them.
#[derive(Debug)]
pub(super) struct ScenarioState {
    pub(super) redis: Option<Redis>,
    pub(super) redis_requests: u64,
    /// Longest wait for a scenario's copies after its load (`--final-wait`).
    pub(super) final_wait: Duration,
    /// The next port sequence number of `think-close` (from [`CLIENT_B`]).
    pub(super) close_next: u64,
    /// The HTTP/2 nginx of `online` and `test` (the `h2` scenario).
    pub(super) h2: Option<(lab::Nginx, lab::Nginx)>,
    /// Run `copier-floor` beside the copier in the CPU scenarios (`floor.rs`; not `--no-floor`,
    /// not `--mirror`).
    pub(super) floor: bool,
    /// Extra flags of `copier-floor` (`--floor-data-only`).
    pub(super) floor_args: Vec<String>,
    /// Put before each scenario's tag in the URIs (`p` in the peer's run, `--peer`).
    pub(super) tag_prefix: String,
}

pub(super) fn run_scenario(
    ctx: Ctx<'_>,
    gen: &mut Generator,
    sc: Scenario,
    dur: Duration,
    st: &mut ScenarioState,
) -> Result<Row> {
    if sc == Scenario::H2 {
        let (online, test) = st.h2.as_ref().context("the HTTP/2 nginx are not running")?;
        return run_h2(ctx, online, test, st.final_wait);
    }
    if sc == Scenario::Redis {
        let (n, wait) = (st.redis_requests, st.final_wait);
        let r = st.redis.as_mut().context("redis is not running")?;
        let row = run_redis(ctx, r, n, wait)?;
        r.check_alive()?;
        return Ok(row);
    }
    let Ctx { lab, c, .. } = ctx;
    let test = c.test();
    let kind = Kind::Scenario(sc);
    // fresh keep-alive connections, each copied and registered before the load
    let mut set = None;
    if sc != Scenario::ThinkClose {
        let conns = lab.in_ns(Host::Client, || gen.open_set(sc.conns()))??;
        let (o0, t0) = (c.online.request_count(), test.request_count());
        let warm = |_| Pace::Think(Duration::from_millis(20));
        let (conns, _) = lab.in_ns(Host::Client, || {
            gen.keepalive_set(
                conns,
                "warm",
                "/index.html",
                warm,
                Duration::from_millis(200),
            )
        })?;
        std::thread::sleep(Duration::from_millis(100));
        test.wait_requests(t0 + (c.online.request_count() - o0), DRAIN_WAIT);
        test.wait_settled(Duration::from_millis(300), Duration::from_secs(3));
        set = Some(conns);
    }
    // the step tag in the URIs: the peer's run of a scenario (`--peer`) has its own
    let tag_s = format!("{}{}", st.tag_prefix, sc.tag());
    // the floor from here on: its counters cover the step's window and nothing before
    let mut floor = if st.floor && floor::measured(sc) {
        Some(Floor::start(lab, &tag_s, &st.floor_args)?)
    } else {
        None
    };
    let before = Before::take(ctx)?;
    let floor0 = floor.as_ref().map(Floor::cpu).transpose()?;
    let tag = tag_s.as_str();
    let load = match set.take() {
        None => {
            let mut next = st.close_next;
            let l = lab.in_ns(Host::Client, || {
                gen.close_loops(tag, sc.conns(), CLIENT_B, &mut next, THINK, dur)
            })?;
            st.close_next = next;
            l
        }
        Some(conns) => {
            let pace = match sc {
                Scenario::Full16 | Scenario::Full100k | Scenario::Full1 => Pace::Full,
                _ => Pace::Think(THINK),
            };
            let path = if matches!(sc, Scenario::Think100k | Scenario::Full100k) {
                BIG_PATH
            } else {
                "/index.html"
            };
            let (conns, l) = lab.in_ns(Host::Client, || {
                gen.keepalive_set(conns, tag, path, |_| pace, dur)
            })?;
            set = Some(conns);
            l
        }
    };
    let load_end = Instant::now();
    // nginx logs a request once its answer is out: the client may have it a moment before
    std::thread::sleep(Duration::from_millis(100));
    let online = c.online.request_count() as u64 - before.online;
    let (_, capped) = wait_final(
        || test.request_count() as u64,
        before.test + online,
        st.final_wait,
    );
    if !capped {
        test.wait_settled(QUIET, Duration::from_secs(5));
    }
    let final_ms = wall_ms();
    let floor1 = floor.as_ref().map(Floor::cpu).transpose()?;
    let mut row = before.finish(
        ctx,
        kind,
        sc.name().into(),
        tag.into(),
        dur.as_secs_f64(),
        load,
        online,
        load_end,
    )?;
    if let Some(f) = floor.as_mut() {
        f.check_alive()?;
        row.floor = floor1.zip(floor0).map(|(b, a)| b.minus(&a));
        row.floor_packets = f.packets(load_end);
    }
    drop(floor);
    row.conns = sc.conns();
    row.final_ms = Some(final_ms);
    row.capped = capped;
    if let Some(conns) = set {
        gen.close_set(conns);
    }
    Ok(row)
}

/// The redis scenario: redis-benchmark from `client` against the online redis, the copier
/// mapping 6379 to the test redis; `cmdstat_get` calls at both servers when redis-benchmark
/// ended (it sends its last request just before it exits), 1 s later, and once they stop
/// growing. redis has no access log, so there is no per-request lag.
pub(super) fn run_redis(ctx: Ctx<'_>, r: &mut Redis, n: u64, final_wait: Duration) -> Result<Row> {
    let Ctx { lab, .. } = ctx;
    let (on0, te0) = (r.online.calls("get")?, r.test.calls("get")?);
    let before = Before::take(ctx)?;
    let (host, port, n_s) = (
        addr::ONLINE.to_string(),
        REDIS_PORT.to_string(),
        n.to_string(),
    );
    let out = lab.exec(
        Host::Client,
        &[
            "redis-benchmark",
            "-h",
            &host,
            "-p",
            &port,
            "-c",
            "16",
            "-n",
            &n_s,
            "-t",
            "get",
            "-q",
        ],
    )?;
    let end_ms = wall_ms();
    let load_end = Instant::now();
    let te_end = r.test.calls("get")?;
    let on1 = r.online.calls("get")?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "redis-benchmark failed ({}): {} {}",
            out.status,
            stdout.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let online = on1 - on0;
    let note = stdout
        .rsplit(['\r', '\n'])
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_owned();
    let test = &mut r.test;
    let counted = Counted {
        scenario: Scenario::Redis,
        label: "redis",
        tag: "rd",
        conns: 16,
        note,
    };
    counted_row(
        ctx,
        before,
        counted,
        [te0, te_end],
        online,
        (load_end, end_ms),
        final_wait,
        || test.calls("get"),
    )
}

/// The `h2` scenario: h2load from `client` against the online HTTP/2 nginx (port [`H2_PORT`]),
/// its requests counted in the access logs of that nginx pair when h2load ended, 1 s later, and
/// once they stop growing (every request has the same URI: no per-request lag).
pub(super) fn run_h2(
    ctx: Ctx<'_>,
    on: &lab::Nginx,
    te: &lab::Nginx,
    final_wait: Duration,
) -> Result<Row> {
    let Ctx { lab, .. } = ctx;
    let (on0, te0) = (on.request_count() as u64, te.request_count() as u64);
    let before = Before::take(ctx)?;
    let url = format!("http://{}:{H2_PORT}/index.html", addr::ONLINE);
    let (n_s, c_s, m_s) = (
        H2_REQUESTS.to_string(),
        H2_CONNS.to_string(),
        H2_STREAMS.to_string(),
    );
    let out = lab.exec(
        Host::Client,
        &["h2load", "-n", &n_s, "-c", &c_s, "-m", &m_s, &url],
    )?;
    let end_ms = wall_ms();
    let load_end = Instant::now();
    let te_end = te.request_count() as u64;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "h2load failed ({}): {} {}",
            out.status,
            stdout.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    // nginx logs a request once its answer is out: the client may have it a moment before
    std::thread::sleep(Duration::from_millis(100));
    let online = on.request_count() as u64 - on0;
    let note = stdout
        .lines()
        .find(|l| l.starts_with("requests:"))
        .unwrap_or("")
        .trim()
        .to_owned();
    let counted = Counted {
        scenario: Scenario::H2,
        label: "h2",
        tag: "h2",
        conns: H2_CONNS,
        note,
    };
    counted_row(
        ctx,
        before,
        counted,
        [te0, te_end],
        online,
        (load_end, end_ms),
        final_wait,
        || Ok(te.request_count() as u64),
    )
}

/// A scenario whose copies are counted, not matched request by request (redis has no access
/// log; h2load asks for one URI again and again): no per-request lag.
struct Counted {
    scenario: Scenario,
    label: &'static str,
    tag: &'static str,
    conns: usize,
    /// The load tool's summary line.
    note: String,
}

/// The row of a [`Counted`] scenario once its load ended: the test server's count (`count`;
/// `te0`, `te_end` at the load's start and end) 1 s after the load's end and once it stops
/// growing, then for a quiet while, to see any extra copy.
#[allow(clippy::too_many_arguments)]
fn counted_row(
    ctx: Ctx<'_>,
    before: Before,
    counted: Counted,
    [te0, te_end]: [u64; 2],
    online: u64,
    (load_end, end_ms): (Instant, u64),
    final_wait: Duration,
    mut count: impl FnMut() -> Result<u64>,
) -> Result<Row> {
    std::thread::sleep(
        (load_end + Duration::from_secs(1)).saturating_duration_since(Instant::now()),
    );
    let te_1s = count()?;
    let (mut last, capped) = wait_final(|| count().unwrap_or(0), te0 + online, final_wait);
    let quiet_until = Instant::now() + if capped { Duration::ZERO } else { QUIET };
    while Instant::now() < quiet_until {
        std::thread::sleep(Duration::from_millis(100));
        last = last.max(count()?);
    }
    let copied = (last - te0).min(online);
    let secs = load_end.duration_since(before.at).as_secs_f64();
    let load = Load {
        sent: online,
        ok: online,
        secs,
        last_send_ms: end_ms,
        ..Load::default()
    };
    let kind = Kind::Scenario(counted.scenario);
    let mut row = before.finish(
        ctx,
        kind,
        counted.label.into(),
        counted.tag.into(),
        secs,
        load,
        online,
        load_end,
    )?;
    row.rt = RealTime {
        online,
        at_end: (te_end - te0).min(online),
        within_1s: (te_1s - te0).min(online),
        copied,
        lags_ms: Vec::new(),
    };
    row.matched = copied;
    row.test = last - te0;
    row.capped = capped;
    row.extra = (last - te0).saturating_sub(online);
    row.conns = counted.conns;
    row.note = counted.note;
    Ok(row)
}

pub(super) fn per_thousand(cpu: &Cpu, copied: u64) -> Option<f64> {
    (copied > 0).then(|| cpu.secs() / (copied as f64 / 1000.0))
}

pub(super) fn print_scenarios(rows: &[Row]) {
    println!(
        "| scenario | conns | online req/s | online requests | copied by load end % | within 1 s % | final % | \
         copy lag p50/p99/max ms | copier CPU s/1000 req | intercept CPU s/1000 req | copier CPU % | intercept CPU % | \
         records/req | NFQUEUE packets/req | capture drops | NFQUEUE drops | failed sessions | extra | leaks | client p50/p99 ms | drain s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let opt = |v: Option<f64>| v.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into());
    for r in rows {
        let rt = &r.rt;
        let copied = rt.copied.max(1) as f64;
        let mut load = Load {
            lat_us: r.load.lat_us.clone(),
            ..Load::default()
        };
        let client = if load.lat_us.is_empty() {
            "-".to_string()
        } else {
            format!(
                "{:.2}/{:.2}",
                load.percentile_ms(0.5),
                load.percentile_ms(0.99)
            )
        };
        let pct = |cpu: &Cpu| 100.0 * cpu.secs() / r.window_secs.max(1e-9);
        println!(
            "| {} | {} | {:.0} | {} | {:.1} | {:.1} | {:.2} | {} | {} | {} | {:.1} | {:.1} | {:.2} | {:.2} | {} | {} | {} | {} | {} | {} | {:.1} |",
            r.label,
            r.conns,
            r.online as f64 / r.secs,
            r.online,
            rt.pct(rt.at_end),
            rt.pct(rt.within_1s),
            rt.pct(rt.copied),
            rt.lag_cell(),
            opt(per_thousand(&r.copier, rt.copied)),
            opt(per_thousand(&r.intercept, rt.copied)),
            pct(&r.copier),
            pct(&r.intercept),
            r.records as f64 / copied,
            r.queued as f64 / copied,
            r.kernel_drops,
            r.nfq_drops,
            r.failed,
            r.extra,
            r.leaks,
            client,
            r.drain_secs,
        );
    }
    println!();
    println!("(\"copied by load end\": the share of the online requests the test server had logged when the load generator");
    println!("stopped sending; nginx logs a request when its answer is out, at both servers, and the lag is test minus online");
    println!("log time; CPU % is over the load and the drain after it; records and packets are the intercept's");
    println!("intercept_records_sent_total and intercept_packets_queued_total per copied request; failed sessions: the");
    println!(
        "copier's copier_sessions_failed_total in the step, by reason in its counters at the end.)"
    );
    for r in rows.iter().filter(|r| r.writes.0 + r.writes.1 > 0) {
        let copied = r.rt.copied.max(1) as f64;
        println!(
            "{}: intercept record writes (frames) per copied request {:.2}: {:.2} by the NFQUEUE worker, {:.2} by the control writer",
            r.label,
            (r.writes.0 + r.writes.1) as f64 / copied,
            r.writes.0 as f64 / copied,
            r.writes.1 as f64 / copied,
        );
    }
    for r in rows.iter().filter(|r| !r.note.is_empty()) {
        println!("{}: {}", r.label, r.note);
    }
    for r in rows.iter().filter(|r| r.capped) {
        println!(
            "{}: copies were still arriving when the wait for them ended ({:.0} s after the load): \"final\" and the lag \
             count the copies up to then",
            r.label, r.drain_secs
        );
    }
}

/// The targets against what the scenarios measured.
pub(super) fn print_targets(rows: &[Row]) {
    let find = |sc: Scenario| rows.iter().find(|r| r.kind == Kind::Scenario(sc));
    // (what, measured, goal, at least?, goal text)
    let mut t: Vec<(String, Option<f64>, f64, bool, String)> = Vec::new();
    for (sc, what) in [
        (Scenario::Full16, "HTTP keep-alive full speed (16 conns)"),
        (Scenario::Redis, "redis GET full speed (16 conns)"),
    ] {
        let r = find(sc);
        t.push((
            format!("{what}: copied within 1 s of the load's end"),
            r.map(|r| r.rt.pct(r.rt.within_1s)),
            95.0,
            true,
            ">= 95 %".into(),
        ));
        t.push((
            format!("{what}: copied in all"),
            r.map(|r| r.rt.pct(r.rt.copied)),
            99.9,
            true,
            ">= 99.9 %".into(),
        ));
    }
    let r = find(Scenario::Full100k);
    let what = "HTTP keep-alive full speed, 100 KB answers (16 conns)";
    t.push((
        format!("{what}: copied by the load's end (issue 32)"),
        r.map(|r| r.rt.pct(r.rt.at_end)),
        95.0,
        true,
        ">= 95 %".into(),
    ));
    t.push((
        format!("{what}: copied in all"),
        r.map(|r| r.rt.pct(r.rt.copied)),
        100.0,
        true,
        "100 %".into(),
    ));
    let r = find(Scenario::H2);
    let what = "HTTP/2 multiplexed full speed (8 conns x 10 streams)";
    t.push((
        format!("{what}: copied by the load's end"),
        r.map(|r| r.rt.pct(r.rt.at_end)),
        95.0,
        true,
        ">= 95 %".into(),
    ));
    t.push((
        format!("{what}: copied in all"),
        r.map(|r| r.rt.pct(r.rt.copied)),
        100.0,
        true,
        "100 %".into(),
    ));
    let r = find(Scenario::Full1);
    t.push((
        "HTTP keep-alive full speed (1 conn): copied within 1 s of the load's end".into(),
        r.map(|r| r.rt.pct(r.rt.within_1s)),
        90.0,
        true,
        ">= 90 %".into(),
    ));
    for (sc, c_copier, c_icpt) in C_TOOL_CPU {
        let r = find(sc);
        let what = match sc {
            Scenario::ThinkKeepAlive => "keep-alive",
            Scenario::ThinkClose => "Connection: close",
            _ => "100 KB answers",
        };
        for (who, c_tool, cpu) in [
            ("copier", c_copier, r.map(|r| &r.copier)),
            ("intercept", c_icpt, r.map(|r| &r.intercept)),
        ] {
            let measured = r
                .zip(cpu)
                .and_then(|(r, cpu)| per_thousand(cpu, r.rt.copied));
            t.push((
                format!("{who} CPU s per 1000 copied requests, {what} (4 ms think)"),
                measured,
                c_tool / 3.0,
                false,
                format!("<= {:.4} (C tool {c_tool} / 3)", c_tool / 3.0),
            ));
        }
    }
    for sc in Scenario::ALL.into_iter().filter(|&sc| floor::measured(sc)) {
        if let Some(r) = find(sc).filter(|r| r.floor.is_some()) {
            t.push((
                format!("copier CPU over its floor's (issue 32), {}", sc.name()),
                floor_ratio(r),
                FLOOR_TARGET,
                false,
                format!("<= {FLOOR_TARGET}x"),
            ));
        }
    }
    let r = find(Scenario::Think100k);
    t.push((
        "intercept records per 100 KB answer".into(),
        r.filter(|r| r.rt.copied > 0)
            .map(|r| r.records as f64 / r.rt.copied as f64),
        4.0,
        false,
        "<= 4".into(),
    ));
    println!("| target | measured | goal | result |");
    println!("|---|---:|---|---|");
    let (mut pass, mut fail) = (0, 0);
    for (what, m, goal, at_least, goal_text) in t {
        let (shown, verdict) = match m {
            None => ("-".to_string(), "not run"),
            Some(v) => {
                let ok = if at_least { v >= goal } else { v <= goal };
                if ok {
                    pass += 1;
                } else {
                    fail += 1;
                }
                let shown = if goal_text.contains('%') {
                    format!("{v:.2} %")
                } else {
                    format!("{v:.4}")
                };
                (shown, if ok { "PASS" } else { "FAIL" })
            }
        };
        println!("| {what} | {shown} | {goal_text} | {verdict} |");
    }
    println!();
    println!("issue 10 targets: {pass} PASS, {fail} FAIL (informative: the exit status does not depend on them)");
}
