//! `copier`: copies live production TCP traffic to a test server (see `copier --help`).
//!
//! Threads: `main` runs a single-threaded tokio runtime with the intercept clients, the metrics
//! exporter and the signal handler; each `engine` thread (one per `--workers`, `engine-<i>` when
//! several) owns a session engine, a capture ring (or, with `--offline`, the file being
//! replayed) and raw sockets (see `copier::run`); one engine thread reads the intercept links'
//! sockets itself (`copier::link`). They meet in the registration registry, an eventfd per
//! worker and, with several workers, bounded record channels (one per worker, fed through
//! `copier::workers::RecordRouter`). SIGINT/SIGTERM stop the workers first (each resets its test connections
//! and unregisters them), then the intercept clients once they passed the Unregisters on, and
//! print a one-line summary; an offline replay also ends by itself.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use copier::bpf::{build_filter, FilterTarget};
use copier::capture::Capture;
use copier::cli::Args;
use copier::control::{run_client, ClientConfig, Links, Registry};
use copier::engine::{EngineConfig, PortShare};
use copier::feed::{Feed, FeedConfig};
use copier::mirror::MirrorInput;
use copier::offline::Replay;
use copier::run::{run_engine_loop, CompareTap, LoopIo, RunSummary, Source, Tap, Taps};
use copier::send::RawSender;
use copier::workers::{Inbox, RecordRouter, Routes, Wake};
use tokio::sync::{mpsc, watch};

/// Record batches waiting for one engine thread before the control clients stop reading (a
/// batch is at most one Records frame, 1 MiB: this bounds the memory in flight to 32 MiB per
/// worker).
const RECORD_CHANNEL: usize = 32;

fn main() -> ExitCode {
    common::docs::generate_if_asked(<Args as clap::CommandFactory>::command());
    let matches = common::config_file::matches(<Args as clap::CommandFactory>::command());
    let args =
        <Args as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match &args.command {
        Some(copier::cli::Command::Doctor(d)) => return ExitCode::from(copier::doctor::main(d)),
        Some(copier::cli::Command::CompareReport(r)) => {
            return match copier::compare_report::main(r) {
                Ok(line) => {
                    println!("{line}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("copier compare-report: error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        None => {}
    }
    init_tracing(args.verbose);
    match run(args) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("copier: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    // An explicit -v wins over RUST_LOG; without it RUST_LOG applies, else "info".
    let filter = match verbose {
        0 => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        1 => EnvFilter::new("debug"),
        _ => EnvFilter::new("trace"),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

fn random_seed() -> u64 {
    use rand::{rngs::SmallRng, Rng, SeedableRng};
    SmallRng::from_os_rng().random()
}

fn run(args: Args) -> Result<RunSummary> {
    let v = args.validate(random_seed())?;
    if v.offline.is_some() && args.workers > 1 {
        tracing::warn!(
            "--workers {} ignored with --offline: a replay runs on one worker",
            args.workers
        );
    }
    if v.mirror.is_some() && args.workers > 1 {
        tracing::warn!(
            "--workers {} ignored with --mirror: the mirror is read by one worker",
            args.workers
        );
    }
    let workers = usize::from(v.workers);

    let targets: Vec<FilterTarget> = v
        .engine
        .maps
        .iter()
        .map(|m| FilterTarget {
            addr: m.online_ip,
            port: m.online_port,
        })
        .collect();
    let mut sources: Vec<Source> = match &v.offline {
        // --mirror: opened once the comparison runs (its tap takes the answers)
        None if v.mirror.is_some() => Vec::new(),
        None => {
            let filter = build_filter(&targets).context("building the capture filter")?;
            let feed = FeedConfig {
                max_bytes: v.capture.block_size as usize * v.capture.block_count as usize,
            };
            Capture::open_fanout(&v.capture, &filter, workers)
                .context("starting the capture (run as root or with CAP_NET_RAW)")?
                .into_iter()
                .map(|c| {
                    Feed::start(c, feed)
                        .map(Source::Live)
                        .context("starting the capture thread")
                })
                .collect::<anyhow::Result<_>>()?
        }
        Some(cfg) => {
            let mut replay = Replay::open(cfg.clone(), &v.engine.maps)?;
            // --compare: the file's answers are the online ones
            if let Some(s) = &v.shadow {
                replay.tap(s.flows.sample);
            }
            vec![Source::Offline(Box::new(replay))]
        }
    };
    let mut senders = Vec::with_capacity(workers);
    for _ in 0..workers {
        senders.push(
            RawSender::open(v.send).context("opening the raw send sockets (needs CAP_NET_RAW)")?,
        );
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    if let Some(addr) = v.metrics {
        let _guard = rt.enter();
        copier::metrics::install(addr)
            .with_context(|| format!("serving metrics on --metrics {addr}"))?;
    }

    // The comparison thread (--compare): its own capture of both directions, fed the records.
    let shadow = match v.shadow.clone() {
        Some(cfg) => Some(copier::shadow::start(cfg)?),
        None => None,
    };

    let mut mirror_stats = None;
    if let Some(m) = &v.mirror {
        let tap = shadow
            .as_ref()
            .zip(v.shadow.as_ref())
            .map(|(s, c)| (s.tap.clone(), c.flows.sample));
        let input = MirrorInput::open(m.clone(), &v.engine.maps, tap)
            .with_context(|| format!("--mirror {}:{}", m.encap.name(), m.port))?;
        mirror_stats = Some(input.shared());
        // The queue holds what the ring would (--capture-block-size x --capture-blocks).
        let feed = FeedConfig {
            max_bytes: v.capture.block_size as usize * v.capture.block_count as usize,
        };
        sources.push(Source::Live(
            Feed::start(input, feed).context("starting the mirror thread")?,
        ));
    }

    let registry = Arc::new(Registry::new());
    let routes = Arc::new(Routes::new());
    let connected = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));

    let maps: Vec<String> = v
        .engine
        .maps
        .iter()
        .map(|m| match v.engine.spread.iter().find(|s| s.map == *m) {
            Some(s) => {
                let t: Vec<String> = s
                    .targets
                    .iter()
                    .map(|t| format!("{}@{}", t.addr, t.weight))
                    .collect();
                format!(
                    "{}={}",
                    m.to_string().split('=').next().unwrap_or_default(),
                    t.join(",")
                )
            }
            None => m.to_string(),
        })
        .collect();
    let iface = match (&v.offline, &sources[..]) {
        (None, _) if v.mirror.is_some() => {
            let m = v.mirror.as_ref().expect("checked");
            format!(
                "{} mirror on UDP port {}, {}",
                m.encap.name(),
                m.port,
                if m.vnis.is_empty() { "every VNI".to_string() } else { format!("VNIs {:?}", m.vnis) }
            )
        }
        (Some(o), [Source::Offline(r)]) => format!(
            "replay of {} file {} at speed {}, {} pass(es), gaps cut to {:?}, starting once an intercept is connected",
            r.format_name(),
            o.path.display(),
            o.speed,
            o.loops,
            o.max_gap
        ),
        (_, [Source::Live(c), ..]) if workers > 1 => format!(
            "capture on {}, {workers} workers (fanout group {})",
            v.capture.interface.as_deref().unwrap_or("all interfaces"),
            c.fanout_group().unwrap_or_default()
        ),
        _ => format!(
            "capture on {}",
            v.capture.interface.as_deref().unwrap_or("all interfaces")
        ),
    };
    tracing::info!(
        "copying {} ({iface}, mtu {}, pacing {}, seed {})",
        maps.join(", "),
        v.engine.mtu,
        if v.engine.pace_requests { "on" } else { "off" },
        v.seed
    );

    let trace = match &v.trace {
        None => None,
        Some(cfg) => {
            let pools = v
                .engine
                .profile
                .as_ref()
                .map(|p| p.pools.iter().map(|x| x.name.clone()).collect())
                .unwrap_or_default();
            let f = copier::trace::TraceFile::create(cfg, pools).with_context(|| {
                format!("creating the run trace --trace {}", cfg.path.display())
            })?;
            tracing::info!(
                "run trace: {} ({})",
                cfg.path.display(),
                cfg.every.map_or_else(
                    || "a row per request unit".to_string(),
                    |d| format!("counts per {d:?}")
                )
            );
            Some(Arc::new(std::sync::Mutex::new(f)))
        }
    };
    // Each worker sends its index here when its loop has ended (sessions closed).
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<usize>();
    let mut inboxes = Vec::with_capacity(workers);
    let mut threads = Vec::with_capacity(workers);
    // One worker reads the intercept links itself (no hop through the main thread).
    let desk = (workers == 1 && v.intercepts.len() <= copier::link::MAX_DIRECT_LINKS)
        .then(|| Arc::new(copier::link::LinkDesk::new()));
    // --compare times records at their read: the intercepts hold none.
    let calm = if v.shadow.is_some() {
        std::time::Duration::ZERO
    } else {
        args.record_wait
    };
    let hold = Arc::new(copier::workers::InterceptHold::new(calm, args.open_wait));
    for (i, (source, sender)) in sources.into_iter().zip(senders).enumerate() {
        let wake = Arc::new(
            Wake::with_delays(
                args.record_wait.min(copier::workers::MAX_RECORD_WAIT),
                args.open_wait,
            )
            .context("eventfd and timerfd")?,
        );
        let (records_tx, records_rx) = mpsc::channel(RECORD_CHANNEL);
        inboxes.push(Inbox {
            records: records_tx,
            wake: wake.clone(),
        });
        // The loop's features, in this order (see `copier::run::Tap`).
        let mut taps: Vec<Box<dyn Tap>> = Vec::new();
        if let Some(t) = &trace {
            taps.push(Box::new(copier::trace::TraceSink::new(t.clone())));
        }
        if let Some(r) = v.rate {
            taps.push(Box::new(copier::rate::RateDriver::new(r)));
        }
        if let Some(r) = &v.record {
            taps.push(Box::new(
                copier::record::Recorder::open(r.clone(), i as u16)
                    .with_context(|| format!("--record {}", r.dir.display()))?,
            ));
        }
        if let Some(s) = &shadow {
            taps.push(Box::new(CompareTap::new(s.tap.clone())));
        }
        let io = LoopIo {
            source,
            sender,
            records: records_rx,
            registry: registry.clone(),
            connected: connected.clone(),
            wake,
            hold: hold.clone(),
            stop: stop.clone(),
            worker: i as u16,
            routes: (workers > 1).then(|| routes.clone()),
            taps: Taps::new(taps),
            desk: desk.clone(),
        };
        let engine_cfg = EngineConfig {
            port_share: PortShare {
                index: i as u16,
                count: workers as u16,
                fleet: v.engine.port_share.fleet,
            },
            port_salt: copier::control::instance(),
            ..v.engine.clone()
        };
        let seed = v.seed;
        let done = Done(done_tx.clone(), i);
        let name = if workers == 1 {
            "engine".to_string()
        } else {
            format!("engine-{i}")
        };
        let t = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                let _done = done;
                run_engine_loop(engine_cfg, seed, io)
            })
            .context("starting an engine thread")?;
        threads.push(t);
    }
    drop(done_tx);

    let router = RecordRouter::new(inboxes, routes);
    let links = Links {
        registry: registry.clone(),
        records: router.clone(),
        connected,
        desk,
        hold,
        gens: Arc::new(copier::control::LinkGens::new()),
    };
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    rt.block_on(async {
        for (i, addr) in v.intercepts.iter().enumerate() {
            let mut cfg =
                ClientConfig::new(addr.clone(), v.secret.clone(), v.seed ^ (i as u64 + 1));
            // Names this link's registration verdicts to the engines.
            cfg.id = u16::try_from(i).unwrap_or(u16::MAX);
            let fleet = v.engine.port_share.fleet;
            cfg.identity.fleet_index = fleet.index;
            cfg.identity.fleet_size = fleet.size;
            cfg.serves = v.intercept_serves.get(i).cloned().flatten().map(Arc::from);
            // --compare: the compared sessions ask for their answers' payload.
            cfg.payload = v.shadow.as_ref().map(|s| copier::control::PayloadAsk {
                sample: s.flows.sample,
            });
            if let Some(l) = &cfg.serves {
                let l: Vec<String> = l.iter().map(ToString::to_string).collect();
                tracing::info!("intercept {addr} guards test server(s) {}", l.join(", "));
            }
            tokio::spawn(run_client(cfg, links.clone(), shutdown_rx.clone()));
        }
        drop(links);
        if let Some(rules) = v.engine.rules.clone() {
            tokio::spawn(reload_on_hup(rules));
        }
        let (why, ended) = wait_for_stop(&mut done_rx).await?;
        tracing::info!("stopping ({why})");
        stop.store(true, Ordering::SeqCst);
        router.wake_all();
        // The workers close their sessions (RSTs, then Unregisters) while the intercept clients
        // keep running to pass the Unregisters on.
        let mut finished = usize::from(ended);
        while finished < workers && done_rx.recv().await.is_some() {
            finished += 1;
        }
        let until = tokio::time::Instant::now() + Duration::from_millis(500);
        if registry.unsent() > 0 {
            while registry.unsent() > 0 && tokio::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // The last write may still be on its way to the socket.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok::<_, anyhow::Error>(())
    })?;
    let _ = shutdown_tx.send(true);
    let mut summary = RunSummary {
        mirror: mirror_stats.map(|m| m.stats()),
        ..RunSummary::default()
    };
    let mut fatal = None;
    for t in threads {
        let (s, f) = t.join().map_err(|_| anyhow!("an engine thread panicked"))?;
        summary.workers.push(s);
        if fatal.is_none() {
            fatal = f;
        }
    }
    drop(rt);
    if let (Some(o), Some(_)) = (&v.offline, &shadow) {
        let answers: u64 = summary
            .workers
            .iter()
            .filter_map(|w| w.offline.as_ref())
            .map(|r| r.answers)
            .sum();
        if answers == 0 {
            tracing::warn!(
                "--compare: {} holds no answer of the mapped services (capture both directions): nothing to compare with",
                o.path.display()
            );
        }
    }
    if let Some(report) = shadow.and_then(|s| s.stop()) {
        println!("{report}");
    }
    if let Some(e) = fatal {
        eprintln!("{summary}");
        return Err(e).context("the engine loop stopped");
    }
    Ok(summary)
}

/// Tells the main thread that a worker's loop has ended, however it ended.
struct Done(mpsc::UnboundedSender<usize>, usize);

impl Drop for Done {
    fn drop(&mut self) {
        let _ = self.0.send(self.1);
    }
}

/// SIGHUP: re-read the header values `--rules` takes from files (a file that fails keeps its
/// old value, and the error is logged).
async fn reload_on_hup(rules: Arc<copier::engine::Rules>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot install the SIGHUP handler: --rules header files are not re-read");
        return;
    };
    while hup.recv().await.is_some() {
        let errs = rules.reload();
        for e in &errs {
            tracing::warn!("SIGHUP: --rules {e} (the old value stays)");
        }
        tracing::info!(
            "SIGHUP: --rules header files re-read ({} failed)",
            errs.len()
        );
    }
}

/// Wait for a signal or for a worker's loop to end by itself; says why, and whether a worker
/// ended.
async fn wait_for_stop(done: &mut mpsc::UnboundedReceiver<usize>) -> Result<(&'static str, bool)> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(tokio::select! {
        _ = term.recv() => ("SIGTERM", false),
        _ = int.recv() => ("SIGINT", false),
        _ = done.recv() => ("the engine loop ended", true),
    })
}
