//! The `intercept` daemon: runs on the test host, takes the test service's responses from
//! NFQUEUE, sends the headers of copied sessions' responses to their copiers and drops them, lets
//! allowed addresses through, and drops everything else (fail closed).
//!
//! This file owns the command line, start-up order (bind the queues, then add or check the
//! firewall rules, then listen for copiers), and the stop on SIGTERM/SIGINT or an error (a dead
//! NFQUEUE worker): it waits up to `--exit-grace` for the router to become quiet, then removes
//! the rules it added only if nothing is registered, held or recently unregistered
//! ([`intercept::exit`]), and says what it leaves behind.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{ArgAction, Parser};
use common::proto::{auth, DEFAULT_PORT};
use common::units::{self, UnitError};
use intercept::allow::IpNet;
use intercept::config::{InterceptConfig, MAX_DURATION};
use intercept::control::{self, ControlConfig};
use intercept::exit::{self, RulesAtExit};
use intercept::outlet::Shared;
use intercept::router::{Router, DEFAULT_MAX_REGISTRATIONS, DEFAULT_TOMBSTONE_CAPACITY};
use intercept::rules::{self, QueueTarget, SystemRunner};
use intercept::{local, metrics as names, nfqueue};
use tokio::sync::{mpsc, watch};

const ABOUT: &str = "Keeps the responses of copied sessions on the test host and returns their headers to the copier";

const LONG_ABOUT: &str = "\
Runs on the test host next to the test service. Every TCP packet the service sends from the
given --port(s) is handed to this daemon by an iptables NFQUEUE rule. For each packet:
  - it belongs to a session a copier registered: its IP+TCP headers go to that copier, and the
    packet is dropped (it never reaches the network);
  - it goes to an address on the --allow list: it is accepted (operators, health checks);
  - its session was unregistered less than --linger ago (the copier is done with it, or its
    connection ended): it is dropped and counted, even for an allowed address (the test
    server's retransmissions);
  - it goes to this host itself (loopback or an address of one of its interfaces, re-read
    every 2 s): it is accepted, as it cannot leave the host (a curl or redis-cli on the test
    host gets its answer); --no-local-answers turns this off;
  - anything else is held for --hold-time in case its registration is on its way, then dropped
    and counted (fail closed).
The queue hands over segmentation-offload super-segments whole (NFQUEUE GSO delivery), so a
large answer is a few packets and a few records, not one per MTU; an accepted one is cut by the
kernel after the verdict. Packets are read several per system call when several wait, and
dropped with one batch verdict; the thread that reads them writes their records to the copier
itself when its connection is idle (one write per batch, after one more look for packets
already waiting; a lone record is not held), and queues them for the connection's writer,
which batches them, while it is busy.
Copiers connect to --listen and authenticate with the shared secret in --secret-file. A copier's
registration of a session this intercept cannot guard (a server port that is not a --port, an
IPv6 session with --ipv4-only, more than --max-registrations) is refused, and the copier told.
With --install-rules, the rules are removed at exit only when nothing is registered, held or
recently unregistered (after waiting up to --exit-grace); otherwise they stay (fail closed).
A registration whose server address is not an address of this host is refused (another
intercept guards that server; --any-server turns this off).
Restarts: an intercept that finds its rules in place at start (--install-rules adopted them: an
earlier intercept stopped while sessions were open; and always without --install-rules, as it
cannot tell) knows none of the earlier registrations, so for --restart-grace it accepts nothing,
not even for an allowed or local address, until its copiers have registered their sessions again.
The rules are checked at every change of the ruleset (nf_tables events) and every second while
running: with --install-rules a missing rule is put back (logged,
intercept_rules_restored_total); without, the copiers are told to send nothing
until the rules are back, and an error is logged.";

const AFTER_HELP: &str = "\
Examples:
  # test nginx on port 80, copiers connect to 198.18.2.2:36524, the operator at 198.18.2.1
  # still reaches the service; the daemon adds its iptables rules and removes them on exit:
  intercept --port 80 --listen 198.18.2.2 --secret-file /etc/tcopy/secret \\
            --allow 198.18.2.1 --install-rules

  # rules managed by you (the daemon checks that each is exactly this, without
  # --queue-bypass, and comes before any rule of OUTPUT that could accept the responses;
  # otherwise it names the rule and prints the command to fix it):
  iptables -I OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0
  ip6tables -I OUTPUT -p tcp --sport 80 -j NFQUEUE --queue-num 0
  intercept --port 80 --listen 198.18.2.2:36524 --secret-file /etc/tcopy/secret

The secret file holds a string of at least 16 bytes (a trailing newline is ignored) and must
be readable by its owner only (chmod 600); the copier needs the same file. Durations: plain
seconds or a number with ms, s, m, h or d (500ms, 1.5s, 2s; at most 1h here). Logs go to stderr
(RUST_LOG or --log-level set the level); metrics are served in Prometheus text format with
--metrics ADDR:PORT.";

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "intercept", version, about = ABOUT, long_about = LONG_ABOUT, after_help = AFTER_HELP,
          subcommand_negates_reqs = true, args_conflicts_with_subcommands = true)]
struct Cli {
    /// `intercept doctor ...` checks the host instead of intercepting.
    #[command(subcommand)]
    command: Option<intercept::doctor::Command>,

    /// Read options from this TOML file: its keys are the long flags of this help
    /// (`listen = "198.18.2.2"`, `port = [80, 443]`, `no-secret = true`); a flag on the command
    /// line overrides the file's. An unknown key or a bad value stops start-up, naming the key
    /// and its line.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// Source port of the test service's responses to intercept; repeat for several ports.
    #[arg(long = "port", value_name = "PORT", required = true, value_parser = parse_port)]
    ports: Vec<u16>,

    /// Where copiers connect: an address of this host, with or without a port (default port
    /// 36524). There is no default address: choose the interface the copiers reach.
    #[arg(long, value_name = "ADDR[:PORT]", value_parser = parse_listen)]
    listen: SocketAddr,

    /// File holding the shared secret that copiers must prove they know: at least 16 bytes,
    /// readable by its owner only, not a placeholder (the value of deploy/k8s/secret.yaml, or
    /// anything with REPLACE-ME, CHANGEME, placeholder in it).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "no_secret",
        conflicts_with = "no_secret"
    )]
    secret_file: Option<PathBuf>,

    /// Run without a secret: any host that reaches --listen can register sessions and read
    /// response headers. The copier must use --no-secret too.
    #[arg(long)]
    no_secret: bool,

    /// Client addresses or CIDR prefixes whose responses pass normally (comma-separated or
    /// repeated), e.g. --allow 198.18.2.1,10.0.0.0/8.
    #[arg(long, value_name = "ADDR[,ADDR...]", value_delimiter = ',')]
    allow: Vec<IpNet>,

    /// NFQUEUE queue number to read.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        conflicts_with = "queue_balance"
    )]
    queue_num: u16,

    /// Spread the packets over queues A..=B (iptables --queue-balance), one worker thread each;
    /// use when one core is not enough. The kernel spreads by address pair, so this helps with
    /// many client addresses, not with many connections of one client.
    #[arg(long, value_name = "A:B", value_parser = parse_balance)]
    queue_balance: Option<(u16, u16)>,

    /// At most K bytes of each response's TCP payload go to a copier that asks for them
    /// (default: headers only; K is also the NFQUEUE copy range). A copier asks per session
    /// (`copier --compare` for the sessions it compares); a copier older than these requests
    /// gets K bytes on every session. Of a super-segment, the first K bytes of the whole
    /// super-segment. For `copier --compare` (shadow testing) give at least 65495, the most one
    /// packet carries, so that every answer byte reaches the copier.
    #[arg(long, value_name = "K", default_value_t = 0)]
    payload_bytes: usize,

    /// Add the iptables and ip6tables NFQUEUE rules at start and remove exactly those at exit.
    /// Without it, the rules must exist already (the daemon checks and prints the command).
    #[arg(long)]
    install_rules: bool,

    /// With --install-rules: remove the rules at exit even when copied sessions are still open
    /// or recently ended (their later responses then leave this host). By default the rules
    /// are left in place in that case, so the kernel drops those responses (fail closed), and
    /// a restarted intercept adopts them.
    #[arg(long, requires = "install_rules")]
    always_remove_rules: bool,

    /// Do not check the firewall rules (for setups that queue the packets by other means).
    #[arg(long, conflicts_with = "install_rules")]
    no_rule_check: bool,

    /// Only IPv4 rules (no ip6tables rule is added or required).
    #[arg(long)]
    ipv4_only: bool,

    /// Serve Prometheus metrics over HTTP on this address, e.g. 127.0.0.1:9101.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<SocketAddr>,

    /// How long a response waits for its session's registration before it is dropped
    /// (e.g. 2s, 500ms; at most 1h).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    hold_time: Duration,

    /// How many responses may wait for a registration at once; beyond, the oldest is dropped
    /// (hold_overflow).
    #[arg(long, value_name = "N", default_value_t = 4096)]
    hold_capacity: usize,

    /// How many bytes of responses may wait for a registration at once (a held response keeps
    /// its headers and up to --payload-bytes of payload, plus about 100 bytes); beyond, the
    /// oldest is dropped (hold_bytes). E.g. 32M, 512K; 0 holds nothing.
    #[arg(long, value_name = "SIZE", default_value = "32M", value_parser = parse_bytes)]
    hold_bytes: usize,

    /// Registrations one copier connection may hold at once; beyond, they are refused (the
    /// copier is told).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_REGISTRATIONS, value_parser = parse_positive)]
    max_registrations: usize,

    /// How long an unregistered session's responses are still dropped (the test server
    /// retransmits a SYN-ACK for about 63 s with tcp_synack_retries=5), at most 1h.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = parse_duration)]
    linger: Duration,

    /// How many recently unregistered sessions are remembered; beyond, the oldest is forgotten
    /// early (counted). About 100 bytes each.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TOMBSTONE_CAPACITY)]
    tombstone_capacity: usize,

    /// At exit, how long to wait for copiers to unregister and held responses to expire before
    /// deciding whether the rules can go (they go only when nothing is registered, held or
    /// recently unregistered). A second signal ends the wait.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    exit_grace: Duration,

    /// Do not accept answers to this host's own addresses (loopback, interface addresses):
    /// they are then held and dropped like any other unregistered response.
    #[arg(long)]
    no_local_answers: bool,

    /// Records queued per copier before the oldest are dropped (a slow copier; copier_slow).
    #[arg(long, value_name = "N", default_value_t = 65536)]
    copier_queue: usize,

    /// Bytes of records queued per copier before the oldest are dropped (queue_bytes): with
    /// --payload-bytes a record carries up to that much payload, so this, not --copier-queue,
    /// bounds a slow copier's memory. At least 256K. The records the intercept keeps are at
    /// most --hold-bytes plus this per connected copier (docs/DESIGN.md has the arithmetic).
    #[arg(long, value_name = "SIZE", default_value = "16M", value_parser = parse_bytes)]
    copier_queue_bytes: usize,

    /// The longest an NFQUEUE worker rests between batches of records that nothing waits on,
    /// whatever the copiers allow (a copier tells its --record-wait, 20ms by default, while no
    /// copy of it waits on records, and its --open-wait, 3ms by default, for the SYN-ACKs,
    /// FINs and RSTs; see README). Resting reads, gives verdicts and writes records in
    /// batches; an allow-listed answer that comes during a rest waits for its end.
    /// 0: never rest (every packet at the kernel's pace). At most 20ms.
    #[arg(long, value_name = "DURATION", default_value = "20ms", value_parser = parse_max_rest)]
    max_rest: Duration,

    /// After a restart (the rules were found in place at start, or are not ours), how long to
    /// accept nothing that could be a copy, not even for an allowed or local address: what is
    /// not registered is held and dropped. Ends earlier, but not before 2s, once every copier
    /// that connected said its sessions are registered again. 0: no grace. At most 1h.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    restart_grace: Duration,

    /// Accept registrations for servers whose address is not one of this host's (a test
    /// server behind NAT on this host). By default they are refused (server_not_local), so an
    /// intercept never lets a copy go toward a host it does not guard.
    #[arg(long)]
    any_server: bool,

    /// More log output (-v debug, -vv trace).
    #[arg(short = 'v', action = ArgAction::Count)]
    verbose: u8,

    /// Log level or filter (error, warn, info, debug, trace, or a RUST_LOG-style filter);
    /// overrides -v and RUST_LOG. Default: info.
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<String>,
}

fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let ip = s.trim_start_matches('[').trim_end_matches(']');
    ip.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, DEFAULT_PORT))
        .map_err(|_| {
            format!("{s:?} is not ADDR or ADDR:PORT (e.g. 198.18.2.2 or 198.18.2.2:36524)")
        })
}

fn parse_balance(s: &str) -> Result<(u16, u16), String> {
    let err = || format!("{s:?} is not A:B with A <= B (e.g. 0:3)");
    let (a, b) = s.split_once(':').ok_or_else(err)?;
    let (a, b) = (
        a.parse::<u16>().map_err(|_| err())?,
        b.parse::<u16>().map_err(|_| err())?,
    );
    if a > b {
        return Err(err());
    }
    Ok((a, b))
}

fn parse_port(s: &str) -> Result<u16, String> {
    match s.trim().parse::<u16>() {
        Ok(0) => Err("port 0 is not a port a service answers from (1 to 65535)".to_string()),
        Ok(p) => Ok(p),
        Err(_) => Err(format!("{s:?} is not a port number (1 to 65535)")),
    }
}

fn parse_positive(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{s:?} is not a whole number")),
    }
}

/// A duration in `common::units`' grammar, at most [`MAX_DURATION`].
fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    units::parse_duration_at_most(s, MAX_DURATION)
}

/// A size in `common::units`' grammar (`16M`, `512K`, `1048576`).
fn parse_bytes(s: &str) -> Result<usize, String> {
    let n = units::parse_size(s).map_err(|e| e.to_string())?;
    usize::try_from(n).map_err(|_| format!("{s:?} is too large"))
}

fn parse_max_rest(s: &str) -> Result<Duration, UnitError> {
    units::parse_duration_at_most(s, intercept::rest::MAX_REST)
}

impl Cli {
    /// The daemon's configuration from the flags (checked by [`InterceptConfig::validate`]).
    fn config(&self) -> InterceptConfig {
        InterceptConfig {
            ports: self.ports.clone(),
            listen: self.listen,
            secret_file: self.secret_file.clone(),
            allow: self.allow.clone(),
            queue: match self.queue_balance {
                Some((a, b)) => QueueTarget::Balance(a, b),
                None => QueueTarget::Num(self.queue_num),
            },
            payload_bytes: self.payload_bytes,
            install_rules: self.install_rules,
            always_remove_rules: self.always_remove_rules,
            no_rule_check: self.no_rule_check,
            ipv4_only: self.ipv4_only,
            metrics: self.metrics,
            hold_time: self.hold_time,
            hold_capacity: self.hold_capacity,
            hold_bytes: self.hold_bytes,
            max_registrations: self.max_registrations,
            linger: self.linger,
            tombstone_capacity: self.tombstone_capacity,
            exit_grace: self.exit_grace,
            local_answers: !self.no_local_answers,
            copier_queue: self.copier_queue,
            copier_queue_bytes: self.copier_queue_bytes,
            max_rest: self.max_rest,
            restart_grace: self.restart_grace,
            any_server: self.any_server,
        }
    }
}

fn init_logging(cli: &Cli) {
    use tracing_subscriber::EnvFilter;
    let filter = match (&cli.log_level, cli.verbose) {
        (Some(l), _) => EnvFilter::new(l),
        (None, 1) => EnvFilter::new("debug"),
        (None, v) if v >= 2 => EnvFilter::new("trace"),
        _ => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn main() -> ExitCode {
    common::docs::generate_if_asked(<Cli as clap::CommandFactory>::command());
    // `intercept doctor` is matched before the daemon's flags are read: it needs none of them.
    let matches = common::config_file::matches(<Cli as clap::CommandFactory>::command());
    if let Some(d) = intercept::doctor::from_matches(&matches) {
        return ExitCode::from(intercept::doctor::main(&d));
    }
    let cli =
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    init_logging(&cli);
    match run(cli.config()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("intercept: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: InterceptConfig) -> Result<()> {
    cli.validate()?;
    let secret = match &cli.secret_file {
        Some(path) => Some(auth::load_secret(path).context("--secret-file")?),
        None => {
            tracing::warn!(
                "running WITHOUT a secret (--no-secret): any host that reaches {} can register sessions and read response headers",
                cli.listen
            );
            None
        }
    };
    let queues = cli.queue.queues();
    let rules = cli.rules();

    let mut router = Router::new(cli.router_config());
    if cli.local_answers || !cli.any_server {
        let addrs = local::interface_addrs()?;
        if cli.local_answers {
            tracing::info!(
                "answers to this host pass (loopback and {addrs:?}; re-read every {:?})",
                local::REFRESH
            );
        }
        if !cli.any_server {
            tracing::info!(
                "registrations accepted for servers on this host only ({addrs:?} and loopback)"
            );
        }
        router.set_local_addrs(addrs);
    }
    let shared = Shared::new(router, cli.payload_bytes);
    shared.rest.set_max(cli.max_rest);

    // The queues first: once a rule exists, packets wait for a reader.
    let mut bound = Vec::new();
    for &q in &queues {
        bound.push(nfqueue::bind(q, cli.payload_bytes)?);
    }
    tracing::info!(
        "bound NFQUEUE queue(s) {queues:?}, copy range {} bytes, fail-open off, GSO delivery on",
        nfqueue::copy_range(cli.payload_bytes)
    );

    let mut installed = None;
    let mut left_behind = Vec::new();
    if cli.install_rules {
        let g = rules::install(SystemRunner, &rules).context("--install-rules")?;
        for r in g.rules() {
            tracing::info!("firewall rule in place: {}", r.command("-I"));
        }
        installed = Some(g);
    } else if cli.no_rule_check {
        tracing::warn!("not checking firewall rules (--no-rule-check)");
    } else {
        let report = rules::check(&mut SystemRunner, &rules)?;
        for w in &report.warnings {
            tracing::warn!("{w}");
        }
        for f in &report.found {
            tracing::info!("found firewall rule: {f}");
        }
        left_behind = report.found;
    }
    // A restart: the rules were there before us (adopted), or they are not ours at all and we
    // cannot tell. Copies of an earlier intercept's copiers may be under way.
    let restarted = match &installed {
        Some(g) => g.adopted() > 0,
        None => true,
    };
    if restarted && !cli.restart_grace.is_zero() {
        shared
            .lock()
            .router
            .start_grace(Instant::now(), cli.restart_grace);
        tracing::warn!(
            "{}: for up to {:?} nothing of port(s) {:?} is accepted, not even for allowed or local addresses, until              the copiers have registered their sessions again (--restart-grace)",
            if cli.install_rules { "found our rules in place (an earlier intercept ran)" } else { "rules not ours" },
            cli.restart_grace,
            cli.ports
        );
    }

    // From here on, every way out (a signal, an error) comes back here, where the rules are
    // removed only if the router is quiet; a panic leaves them in place (the guard's Drop).
    let outcome = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("intercept-ctl")
        .enable_all()
        .build()
        .context("start the tokio runtime")
        .and_then(|rt| {
            let r = rt.block_on(serve(&cli, secret, shared.clone(), bound, &queues));
            rt.shutdown_timeout(Duration::from_millis(500));
            r
        });
    if let Err(e) = &outcome {
        tracing::error!("stopping on an error: {e:#}");
    }

    let activity = {
        let mut core = shared.lock();
        core.router.handle_timeout(Instant::now());
        core.router.quiet()
    };
    let mut report = Vec::new();
    let mut kept = false;
    if let Some(mut g) = installed.take() {
        match exit::decide(activity, cli.always_remove_rules) {
            RulesAtExit::Remove => {
                if !activity.is_quiet() {
                    eprintln!(
                        "intercept: --always-remove-rules: removing the rules although {activity}; their later responses leave this host"
                    );
                }
                report = g.remove();
            }
            RulesAtExit::Keep(a) => {
                eprintln!(
                    "intercept: copied sessions were still open or recently ended ({a}): leaving the NFQUEUE rules in place, so the \
                     kernel drops their responses instead of sending them to clients; a restarted intercept with \
                     --install-rules adopts them (use --always-remove-rules to remove them anyway)"
                );
                report = g.keep();
                kept = true;
            }
        }
    }
    let s = shared.lock().router.stats().clone();
    eprintln!(
        "intercept: stopped after {} packets: {} to copiers ({} after being held), {} accepted ({} more to this host), \
         {} dropped unregistered, {} dropped as recently unregistered, {} dropped as hold overflow ({} by bytes), {} malformed; \
         {} registrations refused ({} held by another copier)",
        s.packets,
        s.delivered + s.released,
        s.released,
        s.accepted,
        s.accepted_local,
        s.dropped_unregistered,
        s.dropped_recently_unregistered,
        s.dropped_hold_overflow + s.dropped_hold_bytes,
        s.dropped_hold_bytes,
        s.dropped_malformed,
        s.refused_port + s.refused_family + s.refused_limit + s.refused_held,
        s.refused_held
    );
    for line in &report {
        eprintln!("intercept: {line}");
    }
    if cli.install_rules && !kept {
        if report.iter().all(|l| l.starts_with("removed")) {
            eprintln!("intercept: left no firewall rules behind");
        }
    } else if !left_behind.is_empty() {
        for f in &left_behind {
            eprintln!("intercept: left in place (not installed by us): {f}");
        }
        eprintln!(
            "intercept: while no intercept reads queue(s) {queues:?}, the kernel drops the packets these rules queue"
        );
    } else if !cli.install_rules {
        eprintln!("intercept: did not check or touch firewall rules");
    }
    outcome
}

/// Everything that runs until a signal (or a fatal error): metrics, NFQUEUE workers, control
/// listener, timers; then the exit grace, with all of them still running.
async fn serve(
    cli: &InterceptConfig,
    secret: Option<Vec<u8>>,
    shared: Arc<Shared>,
    bound: Vec<nfqueue::BoundQueue>,
    queues: &[u16],
) -> Result<()> {
    if let Some(addr) = cli.metrics {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
            .with_context(|| format!("serve metrics on {addr}"))?;
        names::describe();
        tracing::info!("metrics on http://{addr}/metrics");
    }

    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .with_context(|| format!("listen for copiers on {} (--listen)", cli.listen))?;
    // The copiers' connections inherit it: records go out from this thread's write, not from
    // a pacing timer (common::control_socket).
    if let Err(e) =
        common::control_socket::set_control_congestion(socket2::SockRef::from(&listener))
    {
        tracing::warn!(
            "control connections keep the host's congestion control (it may pace records): {e}"
        );
    }

    // Workers are plain threads blocked in recvmmsg(); at exit the process ends them (the kernel
    // then drops whatever is still queued: fail closed). A worker that ends or panics is
    // reported (log, metric) and stops the daemon.
    let (dead_tx, mut dead_rx) = mpsc::unbounded_channel::<String>();
    for b in bound {
        let shared = shared.clone();
        let dead = dead_tx.clone();
        let num = b.num();
        std::thread::Builder::new()
            .name("nfqueue".into())
            .spawn(move || {
                let why = nfqueue::run_supervised(num, || nfqueue::run(b, shared));
                let _ = dead.send(why);
            })
            .context("start an NFQUEUE worker thread")?;
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut ctl = ControlConfig::new(
        secret,
        cli.copier_queue,
        format!("intercept {}", env!("CARGO_PKG_VERSION")),
    );
    ctl.outlet_bytes = cli.copier_queue_bytes;
    let ctl = Arc::new(ctl);
    let server = tokio::spawn(control::serve(
        listener,
        shared.clone(),
        ctl,
        stop_rx.clone(),
    ));
    tracing::info!(
        "intercepting responses from port(s) {:?}; listening for copiers on {}; allowed: {}",
        cli.ports,
        cli.listen,
        if cli.allow.is_empty() {
            "nobody".to_string()
        } else {
            cli.allow
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        }
    );

    let ticker = tokio::spawn(tick(
        shared.clone(),
        queues.to_vec(),
        cli.local_answers || !cli.any_server,
        stop_rx.clone(),
    ));
    let watcher = (!cli.no_rule_check).then(|| {
        tokio::spawn(watch_rules(
            shared.clone(),
            cli.install_rules,
            cli.rules(),
            stop_rx,
        ))
    });

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("install the SIGTERM handler")?;
    let outcome = tokio::select! {
        _ = term.recv() => { tracing::info!("SIGTERM: stopping"); Ok(()) }
        r = tokio::signal::ctrl_c() => { r.context("wait for SIGINT")?; tracing::info!("SIGINT: stopping"); Ok(()) }
        Some(why) = dead_rx.recv() => Err(anyhow::anyhow!("NFQUEUE worker died: {why}")),
    };

    // The exit grace: copiers may still unregister, held records expire. Everything keeps
    // running meanwhile, so responses still get their verdicts.
    let deadline = tokio::time::Instant::now() + cli.exit_grace;
    loop {
        let activity = {
            let mut core = shared.lock();
            core.router.handle_timeout(Instant::now());
            core.router.quiet()
        };
        if activity.is_quiet() {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::info!("exit grace over: {activity}");
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = term.recv() => { tracing::info!("second SIGTERM: ending the exit grace"); break; }
            _ = tokio::signal::ctrl_c() => { tracing::info!("second SIGINT: ending the exit grace"); break; }
        }
    }
    let _ = stop_tx.send(true);
    let _ = server.await;
    let _ = ticker.await;
    if let Some(w) = watcher {
        let _ = w.await;
    }
    names::publish_router(shared.lock().router.stats());
    outcome
}

/// Check the firewall rules at every change of the ruleset (`ruleset::RulesetChanges`: a
/// flush is seen at once) and every [`rules::CHECK_EVERY`], until told to stop: with
/// `--install-rules` put back the missing ones; without, tell the copiers to send nothing while
/// they are missing (`Shared::rules_ok`).
async fn watch_rules(
    shared: Arc<Shared>,
    install: bool,
    wanted: Vec<rules::FirewallRule>,
    mut stop: watch::Receiver<bool>,
) {
    let mut every = tokio::time::interval(rules::CHECK_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let changed = Arc::new(tokio::sync::Notify::new());
    match intercept::ruleset::RulesetChanges::open() {
        Ok(mut changes) => {
            tracing::info!(
                "firewall rules checked at every ruleset change (nf_tables events) and every {:?}",
                rules::CHECK_EVERY
            );
            let changed = changed.clone();
            // A thread of its own: it sleeps in recv(2) until the kernel reports a change, and
            // ends with the process.
            let spawned = std::thread::Builder::new()
                .name("ruleset".into())
                .spawn(move || loop {
                    if let Err(e) = changes.wait() {
                        tracing::warn!(
                            "ruleset changes: {e}; the rules are checked every {:?} only",
                            rules::CHECK_EVERY
                        );
                        return;
                    }
                    metrics::counter!(names::RULESET_CHANGES).increment(1);
                    changed.notify_one();
                });
            if let Err(e) = spawned {
                tracing::warn!(
                    "ruleset changes: {e}; the rules are checked every {:?} only",
                    rules::CHECK_EVERY
                );
            }
        }
        Err(e) => tracing::info!(
            "ruleset changes cannot be watched ({e}): the firewall rules are checked every {:?}",
            rules::CHECK_EVERY
        ),
    }
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = changed.notified() => {}
            _ = stop.changed() => return,
        }
        let wanted = wanted.clone();
        let checked = tokio::task::spawn_blocking(move || {
            if install {
                rules::restore(&mut SystemRunner, &wanted).map(Some)
            } else {
                rules::check(&mut SystemRunner, &wanted).map(|_| None)
            }
        })
        .await;
        let Ok(checked) = checked else { continue };
        match checked {
            Ok(Some(back)) => {
                for r in &back {
                    tracing::warn!("firewall rule was gone (flushed or reloaded), put back: {r}");
                }
                metrics::counter!(names::RULES_RESTORED).increment(back.len() as u64);
            }
            Ok(None) => {
                if !*shared.rules_ok.borrow() {
                    tracing::info!("firewall rules back in force: the copiers may send again");
                }
                shared
                    .rules_ok
                    .send_if_modified(|ok| !std::mem::replace(ok, true));
                metrics::gauge!(names::RULES_MISSING).set(0.0);
            }
            Err(e) => {
                if *shared.rules_ok.borrow() || install {
                    tracing::error!(
                        "firewall rules no longer in force: {e:#}{}",
                        if install {
                            ""
                        } else {
                            "; told the copiers to send nothing until they are back"
                        }
                    );
                }
                if !install {
                    shared
                        .rules_ok
                        .send_if_modified(|ok| std::mem::replace(ok, false));
                    metrics::gauge!(names::RULES_MISSING).set(1.0);
                }
            }
        }
    }
}

/// Expire held records and tombstones, publish counters, re-read this host's addresses, until
/// told to stop.
async fn tick(
    shared: Arc<Shared>,
    queues: Vec<u16>,
    local_answers: bool,
    mut stop: watch::Receiver<bool>,
) {
    const EVERY: Duration = Duration::from_millis(100);
    let mut every = tokio::time::interval(EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let local_every = (local::REFRESH.as_millis() / EVERY.as_millis()) as u64;
    let mut n = 0u64;
    let mut in_grace = false;
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.changed() => return,
        }
        let stats = {
            let mut core = shared.lock();
            core.router.handle_timeout(Instant::now());
            core.router.stats().clone()
        };
        names::publish_router(&stats);
        if std::mem::replace(&mut in_grace, stats.grace > 0) && stats.grace == 0 {
            tracing::info!(
                "restart grace over ({} packet(s) held that would otherwise have passed); allowed and local answers pass again",
                stats.grace_held
            );
        }
        n += 1;
        if n % 10 == 0 {
            names::publish_kernel_queues(&queues);
        }
        if local_answers && n % local_every == 0 {
            match local::interface_addrs() {
                Ok(a) => shared.lock().router.set_local_addrs(a),
                Err(e) => tracing::warn!("{e:#}; keeping the last known addresses"),
            }
        }
    }
}

#[cfg(test)]
mod tests;
