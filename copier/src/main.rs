//! `copier`: copies live production TCP traffic to a test server (see `copier --help`).
//!
//! Threads: `main` runs a single-threaded tokio runtime with the intercept clients, the metrics
//! exporter and the signal handler; the `engine` thread owns the session engine, the capture ring
//! (or, with `--offline`, the file being replayed) and the raw sockets (see `copier::run`). They
//! meet in a bounded record channel, the registration registry and an eventfd. SIGINT/SIGTERM
//! stop both and print a one-line summary; an offline replay also ends by itself.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use clap::Parser;
use copier::bpf::{build_filter, FilterTarget};
use copier::capture::Capture;
use copier::cli::{show_map, Args};
use copier::control::{run_client, ClientConfig, Links, Registry};
use copier::offline::Replay;
use copier::run::{run_engine_loop, LoopIo, Source, Summary};
use copier::send::RawSender;
use copier::sys::EventFd;
use tokio::sync::{mpsc, watch};

/// Record batches waiting for the engine thread before the control clients stop reading (a
/// batch is one Records frame, at most 1 MiB: this bounds the memory in flight to 32 MiB).
const RECORD_CHANNEL: usize = 32;

fn main() -> ExitCode {
    let args = Args::parse();
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

fn run(args: Args) -> Result<Summary> {
    let v = args.validate(random_seed()).map_err(|e| anyhow!(e))?;

    let targets: Vec<FilterTarget> = v
        .engine
        .maps
        .iter()
        .map(|m| FilterTarget {
            addr: m.online_ip,
            port: m.online_port,
        })
        .collect();
    let source = match &v.offline {
        None => {
            let filter = build_filter(&targets).context("building the capture filter")?;
            let capture = Capture::open(&v.capture, &filter)
                .context("starting the capture (run as root or with CAP_NET_RAW)")?;
            Source::Live(capture)
        }
        Some(cfg) => Source::Offline(Box::new(Replay::open(cfg.clone(), &v.engine.maps)?)),
    };
    let sender =
        RawSender::open(v.send).context("opening the raw send sockets (needs CAP_NET_RAW)")?;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    if let Some(addr) = v.metrics {
        let _guard = rt.enter();
        copier::metrics::install(addr)
            .with_context(|| format!("serving metrics on --metrics {addr}"))?;
    }

    let wake = Arc::new(EventFd::new().context("eventfd")?);
    let registry = Arc::new(Registry::new());
    let connected = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (records_tx, records_rx) = mpsc::channel(RECORD_CHANNEL);

    let maps: Vec<String> = v.engine.maps.iter().map(show_map).collect();
    let iface = match (&v.offline, &source) {
        (Some(o), Source::Offline(r)) => format!(
            "replay of {} file {} at speed {}, {} pass(es), gaps cut to {:?}, starting once an intercept is connected",
            r.format_name(),
            o.path.display(),
            o.speed,
            o.loops,
            o.max_gap
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

    let io = LoopIo {
        source,
        sender,
        records: records_rx,
        registry: registry.clone(),
        connected: connected.clone(),
        wake: wake.clone(),
        stop: stop.clone(),
    };
    let (engine_cfg, seed) = (v.engine.clone(), v.seed);
    let (done_tx, mut done_rx) = watch::channel(false);
    let engine = std::thread::Builder::new()
        .name("engine".into())
        .spawn(move || {
            let r = run_engine_loop(engine_cfg, seed, io);
            let _ = done_tx.send(true);
            r
        })
        .context("starting the engine thread")?;

    let links = Links {
        registry,
        records: records_tx,
        wake: wake.clone(),
        connected,
    };
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let why = rt.block_on(async {
        for (i, addr) in v.intercepts.iter().enumerate() {
            let cfg = ClientConfig::new(addr.clone(), v.secret.clone(), v.seed ^ (i as u64 + 1));
            tokio::spawn(run_client(cfg, links.clone(), shutdown_rx.clone()));
        }
        drop(links);
        wait_for_stop(&mut done_rx).await
    })?;
    tracing::info!("stopping ({why})");
    let _ = shutdown_tx.send(true);
    stop.store(true, Ordering::SeqCst);
    wake.notify();
    let (summary, fatal) = engine
        .join()
        .map_err(|_| anyhow!("the engine thread panicked"))?;
    drop(rt);
    if let Some(e) = fatal {
        eprintln!("{summary}");
        return Err(e).context("the engine loop stopped");
    }
    Ok(summary)
}

async fn wait_for_stop(done: &mut watch::Receiver<bool>) -> Result<&'static str> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
        _ = done.changed() => "the engine loop ended",
    })
}
