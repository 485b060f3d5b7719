//! The command line of the `copier` binary: flags, parsing of their values, and the checks that
//! run before anything starts.
//!
//! Owns: the [`Args`] type (clap), the value parsers (`--map`, percentages, speeds; sizes and
//! durations are `common::units`'; in `cli/parse.rs`), and [`CopierArgs::validate`], which turns
//! the flags into the configurations of the engine, capture, sender and control clients or says
//! precisely which flag is wrong (in `cli/validate.rs`, with the maps' cross-checks). Nothing
//! here opens a socket. The `--help` texts are in `cli/texts.rs` and `cli/help.rs`, the
//! subcommands in `cli/commands.rs`, its tests in `cli/tests.rs`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};
use common::units::{parse_duration, parse_size};

use crate::engine::{ClientIpPool, MapTargets, PortMap};
use crate::offline::Speed;
use crate::routing::{parse_intercept_for, InterceptAddr, InterceptFor};

use parse::{parse_intercept, parse_percent, parse_rate, parse_speed, parse_unix_time};
use texts::{ABOUT, EXAMPLES, LONG_ABOUT};

/// `--pacing`: how requests wait for the test server's answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PacingMode {
    /// Up to --pace-window requests of a connection in flight while the test server's answers
    /// match the online sizes; one at a time otherwise.
    Adaptive,
    /// One request at a time: each waits for the answer to the one before.
    Strict,
    /// No waiting: requests go as fast as they are captured.
    Off,
}

/// `--gso`: how data larger than one segment leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GsoMode {
    /// Super-segments of up to 64K, cut into MSS-sized segments by the kernel or the NIC (an
    /// AF_PACKET socket with a GSO header, where the route to the test server is Ethernet and
    /// its next hop is known), else by the copier as TSO would.
    Auto,
    /// One MSS per segment, built and sent one by one (as before --gso).
    Off,
}

/// The copier's command line: a subcommand, or the copier's own flags ([`CopierArgs`], which
/// `copier doctor` takes too). Derefs to the flags.
#[derive(Debug, Parser)]
#[command(name = "copier", version, about = ABOUT, long_about = LONG_ABOUT, after_help = EXAMPLES,
          subcommand_negates_reqs = true, args_conflicts_with_subcommands = true)]
pub struct Args {
    /// `copier doctor ...` checks the host instead of copying.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// The copier's flags.
    #[command(flatten)]
    pub copier: CopierArgs,
}

impl std::ops::Deref for Args {
    type Target = CopierArgs;

    fn deref(&self) -> &CopierArgs {
        &self.copier
    }
}

/// Every flag of the copier: one struct for the copier and for `copier doctor` (which takes
/// the same command line and ignores what does not matter to it).
#[derive(Debug, clap::Args)]
#[command(mut_args = help::arrange)]
pub struct CopierArgs {
    /// Read options from this TOML file: its keys are the long flags of this help
    /// (`session-timeout = "30s"`, `map = ["80=198.18.2.2:80"]`, `no-secret = true`); a flag on
    /// the command line overrides the file's. An unknown key or a bad value stops start-up,
    /// naming the key and its line. `copier doctor --config FILE` reads the same file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Copy TCP sent to [ONLINE_IP:]PORT on this host to TARGET_IP:PORT (repeatable).
    /// Without ONLINE_IP any destination address on that port is copied. A port may have two
    /// such maps, one per target family: `--map 80=TARGET4 --map 80=[TARGET6]:80` sends IPv4
    /// clients to TARGET4 and IPv6 clients to TARGET6. Several test servers with weights:
    /// `--map 80=T1:80@3,T2:80@1` spreads the copies 3:1 (each copy stays on its server; a
    /// server that stops answering is taken out: see --target-down-after).
    #[allow(rustdoc::broken_intra_doc_links)] // --help text: its [..] are no links
    #[arg(long = "map", value_name = "[ONLINE_IP:]PORT=TARGET_IP:PORT[@W][,...]", required = true, value_parser = parse_map_targets)]
    pub maps: Vec<MapTargets>,

    /// An intercept daemon to connect to, default port 36524 (repeatable). With one test host,
    /// registrations go to every intercept; with a map over several test servers, an intercept
    /// at a server's own address gets that server's registrations only (see --intercept-for).
    #[arg(long = "intercept", value_name = "HOST[:PORT]", required = true, value_parser = parse_intercept)]
    pub intercepts: Vec<InterceptAddr>,

    /// File holding the secret shared with the intercepts: at least 16 bytes (trailing newline
    /// ignored), readable by its owner only (chmod 600), not a placeholder (the value of
    /// deploy/k8s/secret.yaml, or anything with REPLACE-ME, CHANGEME, placeholder in it).
    #[arg(long, value_name = "FILE", required_unless_present = "no_secret")]
    pub secret_file: Option<PathBuf>,

    /// Run without a shared secret (the intercepts must run with --no-secret too).
    #[arg(long, conflicts_with = "secret_file")]
    pub no_secret: bool,

    /// Capture on this interface only (default: all interfaces).
    #[arg(long, value_name = "IF")]
    pub interface: Option<String>,

    /// Path MTU toward the test server: larger segments (GRO/TSO) are split to fit.
    #[arg(long, value_name = "N", default_value_t = 1500, value_parser = clap::value_parser!(u16).range(576..))]
    pub mtu: u16,

    /// How data larger than one segment leaves: auto sends super-segments of up to 64K whole,
    /// cut into --mtu sized segments by the kernel or the NIC (AF_PACKET with a GSO header) where
    /// the route to the test server allows, and by the copier, the same way, elsewhere; off
    /// builds and sends every segment one by one. `copier doctor` says which path each test
    /// server gets.
    #[arg(long, value_name = "MODE", value_enum, default_value_t = GsoMode::Auto)]
    pub gso: GsoMode,

    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9100).
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,

    /// Most memory for sessions: their buffered data plus a fixed cost per session (about
    /// 1.5K, empty sessions included) and per captured SYN waiting for its handshake; above it
    /// the oldest waiting SYNs, then the unproven sessions (see --unproven-timeout), then the
    /// idle ones (see --session-timeout), then the others, each quiet longest first, are shed
    /// (counted, and logged).
    #[arg(long, value_name = "SIZE", default_value = "512M", value_parser = parse_size)]
    pub max_memory: u64,

    /// Most bytes one session may hold that its copy has not sent yet (a large upload that
    /// arrives faster than the test server takes it); over it the session fails (buffer_cap)
    /// and the test server gets its request cut short: raise it for bulk uploads (at most
    /// --max-memory).
    #[arg(long, value_name = "SIZE", default_value = "16M", value_parser = parse_size)]
    pub session_buffer: u64,

    /// Most sessions in the table at once (per worker; those closed and only lingering not
    /// counted). When a new session finds it full, room is made in this order, quiet longest
    /// first: unproven mid-stream candidates, then idle unproven, idle proven and busy
    /// unproven sessions (copier_sessions_failed_total{reason="unproven_shed"|"idle_shed"};
    /// see --unproven-timeout, --session-timeout); a busy proven session is never shed, and a
    /// new mid-stream candidate takes only another candidate's room. Without room the new
    /// session is not copied (copier_packets_dropped_total{reason="table_full"}). The default
    /// fits the default --max-memory.
    #[arg(long, value_name = "N", default_value_t = crate::engine::DEFAULT_MAX_SESSIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_sessions: usize,

    /// Most captured SYNs waiting for the client's handshake ACK at once (per worker); a test
    /// session starts only once the client completed its handshake online, so a flood of
    /// spoofed SYNs never reaches the test server. The oldest goes when full.
    #[arg(long, value_name = "N", default_value_t = 65536,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_pending_syns: usize,

    /// How long a captured SYN waits for the client's handshake ACK (a retransmitted SYN
    /// waits again).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub syn_timeout: Duration,

    /// A session waiting for something (a request not answered yet, a segment not
    /// acknowledged, the test handshake, a close to carry) with no packet and no response for
    /// this long is abandoned (copier_sessions_failed_total{reason="timeout"}). An idle session
    /// (every request answered, nothing outstanding, the client's connection open: a keep-alive
    /// or pooled connection between requests) is kept however long it stays quiet, and its
    /// later requests are copied on: it costs its place in --max-sessions and about 1.7K
    /// against --max-memory (1.5K fixed, plus its last request, kept for a resend; 1.6K of heap
    /// measured at 10,000 idle sessions: BENCHMARKS.md), and when room is needed the idle sessions go first, quiet longest
    /// first (reason="idle_shed"; see --idle-timeout).
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = parse_duration)]
    pub session_timeout: Duration,

    /// End an idle session (see --session-timeout) after this long with no packet and no
    /// response (copier_sessions_failed_total{reason="idle_timeout"}); the copier remembers
    /// where the client's stream stood (about 130 bytes), so its next request starts a new
    /// session on a new test connection, nothing skipped. Default: none, idle sessions
    /// stay until the client closes or room is needed (a test server that closes an idle
    /// connection does not end the session: its next request goes on a new connection) (about 1.7K each
    /// against --max-memory: see --session-timeout).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub idle_timeout: Option<Duration>,

    /// How long a session may stay unproven while it waits to start mid-stream or sits idle.
    /// A session is proven once the client's packets show one of its requests answered
    /// online (data, then an ACK past the one that data carried); until then it may be a
    /// spoofer's: any ACK or data segment of an unknown connection makes a mid-stream
    /// candidate, and a handshake's ACK cannot be checked. An unproven candidate or idle
    /// session ends after this long (copier_unproven_ended_total{reason="unproven_timeout"};
    /// an idle one's next request starts a new session, nothing skipped), and the unproven go
    /// first when room is needed (see --max-sessions), so a flood of spoofed segments holds
    /// no slot for long. The proof is not a cryptographic one: the copier sees only the
    /// client's direction, so a spoofer who fakes a request and a later ACK per connection
    /// passes it.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub unproven_timeout: Duration,

    /// Rewrite client addresses into these ranges (sticky per real client), e.g.
    /// 198.19.0.0/16, or a list: 198.19.0.0/24,198.19.1.0/24,fd00:198:19::/48 (repeatable;
    /// ranges must not overlap). Each target needs a range of its IP family. The test host must
    /// route the ranges back to this host.
    #[arg(long, value_name = "CIDR[,CIDR...]", action = ArgAction::Append)]
    pub client_ip: Vec<ClientIpPool>,

    /// This copier's share of the test ports in a fleet of copiers with one configuration:
    /// I/N (copier I of N, from 0), or host/N (I from a hash of the host name). See "Fleets"
    /// at the top of --help.
    #[arg(long, value_name = "I/N", value_parser = parse_fleet)]
    pub fleet: Option<FleetArg>,

    /// Send N copies of every copied session, each on its own client address and/or port
    /// (see "Amplification" at the top of --help).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=MAX_COPIES))]
    pub copies: u16,

    /// Copy only this percentage of the sessions (0 < P <= 100), chosen per session.
    #[arg(long, value_name = "P", default_value = "100", value_parser = parse_percent)]
    pub sample: f64,

    /// Shape the copies with this TOML profile: multiplication factor and load schedule,
    /// virtual user pools, ON/OFF gating, think time (see "Shaping" at the top of --help).
    /// Not with --copies, --sample or --client-ip.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["copies", "sample", "client_ip"])]
    pub profile: Option<PathBuf>,

    /// How requests wait for the test server's answers (see "Pacing" in --help): adaptive
    /// (several requests of a connection in flight while the answers keep pace), strict (one
    /// at a time) or off (as fast as captured).
    #[arg(long, value_name = "MODE", value_enum, default_value_t = PacingMode::Adaptive)]
    pub pacing: PacingMode,

    /// The same as --pacing off.
    #[arg(long, conflicts_with = "pacing")]
    pub no_pacing: bool,

    /// With --pacing adaptive, most request units one test connection may have in flight.
    #[arg(long, value_name = "N", default_value_t = crate::engine::DEFAULT_PACE_WINDOW,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::engine::MAX_PACE_WINDOW)))]
    pub pace_window: u32,

    /// How long the ACK of a test server segment may wait for the next request to carry it,
    /// like a client's delayed ACK (one segment at most; 0 acknowledges every segment at once;
    /// at most 100ms is used).
    #[arg(long, value_name = "DURATION", default_value = "40ms", value_parser = parse_duration)]
    pub ack_delay: Duration,

    /// How long a record of the intercept that nothing waits on (a bare ACK or the end of a
    /// small answer: it only moves a test connection's ACK and window) may wait for its engine
    /// thread, so that records share its wake-ups; 0 wakes it for every record (at most 20ms is
    /// used). With one worker, after the engine read records from the links it leaves them
    /// unpolled this long (--open-wait while a connection opens or ends: a Register lately, a
    /// SYN, FIN or RST record) and reads them at its next wake-up, unless a record is part of a
    /// large answer or of one the test server is still writing (more than 4 KiB, or data
    /// without PSH), --compare times the answers, or a copy runs behind. With --workers above 1, those records, registration
    /// verdicts, a filling inbox and a copy running behind wake it at once. The intercepts are
    /// told the same wait (except with --compare, or while a copy runs behind: then 0): theirs
    /// rest between batches of such records that long.
    #[arg(long, value_name = "DURATION", default_value = "20ms", value_parser = parse_duration)]
    pub record_wait: Duration,

    /// With one worker: how long the intercept links' records and verdicts of a connection that
    /// opens or ends (a registration verdict, a SYN-ACK, a FIN or RST of the test server) may
    /// wait to share the engine thread's next wake-up (at most --record-wait). They delay only
    /// the start or the end of their own copied connection, never another one's requests; with
    /// many short connections (one request each) their round trips otherwise wake the engine
    /// one by one. Whatever --workers, the intercepts are told the same wait (0 whenever they
    /// are told a record wait of 0): they hold the SYN-ACKs, FINs and RSTs that long too, and
    /// read, give verdicts and write in batches. 0: such records wake the engine at once and
    /// leave the intercepts at once.
    #[arg(long, value_name = "DURATION", default_value = "3ms", value_parser = parse_duration)]
    pub open_wait: Duration,

    /// Request rules (TOML): filters, a dye header, header edits and request-line rewrites
    /// (see "Request rules" in --help). Header values read from files are re-read on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,

    /// Archive what is copied (copy 0 of each session, as the test server gets it: after the
    /// rules' filters and edits) into DIR: rotating pcapng files and an index of sessions
    /// (time, client, endpoint). Replay a slice: --offline FILE with --rules allow filters.
    /// The requests are kept whole (cookies, credentials): files 0600, DIR made 0700.
    /// A full disk does not stop the copy: what cannot be written is dropped and counted
    /// (copier_output_errors_total, copier_output_dropped_total), the error logged once, and
    /// writing resumes by itself when there is room again.
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,

    /// With --record, the archive's most bytes per worker, split over --record-files files
    /// (the oldest file goes).
    #[arg(long, value_name = "SIZE", default_value = "1G", requires = "record", value_parser = parse_size)]
    pub record_size: u64,

    /// With --record, files kept per worker, those of earlier runs in DIR included (a restart
    /// numbers its files after the highest there; the index keeps the lines of the files kept).
    #[arg(long, value_name = "N", default_value_t = 8, requires = "record",
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub record_files: u32,

    /// With --record, files older than this (modification time) are deleted when a new file
    /// starts, whatever their number (default: kept until --record-files pushes them out).
    #[arg(long, value_name = "DURATION", requires = "record", value_parser = parse_duration)]
    pub record_max_age: Option<Duration>,

    /// Seed of every random choice (default: random, printed at start).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,

    /// More log output (-v debug, -vv trace).
    #[arg(short, long, action = ArgAction::Count)]
    pub verbose: u8,

    /// Replay client packets from this pcap or pcapng file instead of capturing live traffic.
    #[arg(long, value_name = "FILE", conflicts_with = "interface")]
    pub offline: Option<PathBuf>,

    /// Read a traffic mirror instead of capturing: VXLAN (`vxlan`, UDP 4789) or GENEVE
    /// (`geneve`, UDP 6081) datagrams arriving on this host's UDP port (`vxlan:PORT` for
    /// another). The client's packets of the mapped services are copied; with --compare the
    /// services' answers in the mirror are the online ones (nothing runs on the online host).
    /// Runs one worker. See docs/MIRROR.md.
    #[arg(long, value_name = "vxlan[:PORT]|geneve[:PORT]", conflicts_with_all = ["interface", "offline"],
          value_parser = |s: &str| s.parse::<crate::mirror::MirrorConfig>())]
    pub mirror: Option<crate::mirror::MirrorConfig>,

    /// With --mirror: take only these mirror sessions (VNIs, e.g. `42` or `100-103,7`; default
    /// all); the others are counted (copier_mirror_dropped_total{reason="vni"}).
    #[arg(long, value_name = "LIST", requires = "mirror", value_parser = |s: &str| s.parse::<crate::mirror::VniList>())]
    pub vni: Option<crate::mirror::VniList>,

    /// With --offline: time compression (10 = ten times faster than captured, 0.5 = half as
    /// fast; 0 or `max` = as fast as the copier goes).
    #[arg(long, value_name = "X", default_value = "1", requires = "offline", value_parser = parse_speed)]
    pub speed: Speed,

    /// With --offline: replay the file N times. Pass k (from 0) moves every client port by
    /// k x 7919 (within 1024-65535, then on to a port no earlier pass used with that client
    /// address), so each pass is a new set of sessions for the test server.
    #[arg(long = "loop", value_name = "N", default_value_t = 1, requires = "offline",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub loops: u32,

    /// With --offline: a pause between two copied packets longer than this (in capture time) is
    /// cut to it.
    #[arg(long, value_name = "DURATION", default_value = "1s", requires = "offline", value_parser = parse_duration)]
    pub max_gap: Duration,

    /// With --offline: replay only the sessions whose SYN was captured at or after this Unix
    /// time (seconds, a fraction allowed; the --record index gives milliseconds), each whole.
    #[arg(long, value_name = "UNIX_TIME", requires = "offline", value_parser = parse_unix_time)]
    pub from: Option<Duration>,

    /// With --offline: ... and before this Unix time.
    #[arg(long, value_name = "UNIX_TIME", requires = "offline", value_parser = parse_unix_time)]
    pub until: Option<Duration>,

    /// Capture ring: bytes per block (also the largest packet that can be captured whole).
    /// 256K holds three 64 KB offload super-segments (128K would hold one). A thread of its own
    /// reads the ring as soon as the kernel hands a block over and keeps what the engine has not
    /// taken yet in memory (at most the ring's largest size, blocks x size), so the ring only
    /// has to absorb that thread's scheduling delays; copier_kernel_drops_total counts what did
    /// not fit.
    #[arg(long, value_name = "SIZE", default_value = "256K", value_parser = parse_size, hide_short_help = true)]
    pub ring_block_size: u64,

    /// Capture ring: the most blocks it grows to (32 MiB with the default block size). The
    /// kernel hands a block over when it is full or 10 ms old, so at ordinary rates every block
    /// holds only 10 ms of traffic: many small blocks rather than a few big ones.
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=4096), hide_short_help = true)]
    pub ring_blocks: u32,

    /// Capture ring: blocks it starts with (16 MiB with the default block size, half the most:
    /// room for a 10 MB burst of 64 KB offload super-segments even while the capture thread
    /// waits for a CPU, as on a busy 2-core host), so that a quiet service does not pay for the
    /// whole ring. When a quarter of it waits to be read, or the
    /// kernel drops a packet, it grows four times larger, up to --ring-blocks, without losing or
    /// repeating a packet (a new ring takes every packet from that instant; the old one is read
    /// to its end first), and never shrinks (copier_capture_ring_bytes). With --workers above 1
    /// every ring has --ring-blocks from the start. Equal to --ring-blocks: a fixed ring.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096), hide_short_help = true)]
    pub ring_start_blocks: u32,

    /// Engine threads. Each has its own capture ring (a PACKET_FANOUT group spreads client
    /// connections over the rings by client port, so each connection stays with one worker), its
    /// own session table and raw socket, and may take a whole core under load. The default is
    /// one on purpose: the copier runs on a production front end and must never take the cores
    /// the service needs. Raise it only when one worker cannot keep up (copier_kernel_drops_total
    /// grows, or the engine thread sits near 100% of a core) and cores are idle at peak: N at
    /// most the idle cores, leaving the service its share. Ring memory is per worker (N x 32 MiB
    /// by default). --offline always runs one worker.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=crate::workers::MAX_WORKERS as i64))]
    pub workers: u16,

    // Several test servers per map: health and which intercept guards which server.
    /// A test server to which copies were started and that sent nothing back but resets (SYNs
    /// unanswered or refused, answers stopped) for this long is taken out: its new sessions go
    /// to the map's other servers by their weights (copier_target_up, logged). It is back in as
    /// soon as it answers; while out it gets one probe copy every --target-retry (lost if it is
    /// still down). When every server of a map is out, an ERROR is logged
    /// (copier_maps_all_targets_down) and copies go on by weight, as probes.
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    pub target_down_after: Duration,

    /// How often a test server that was taken out gets a probe copy.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub target_retry: Duration,

    /// Live copies (per worker) at which a test server counts as overloaded (a slow server
    /// keeps its copies longer): its new sessions go to the map's other servers; when every
    /// server of a map is overloaded new sessions are not copied (a WARN, the metric
    /// copier_maps_all_targets_overloaded and copier_target_overload_refused_total) rather than
    /// piling up. It takes sessions again at 3/4 of N. 0: no limit.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub target_max_live: usize,

    /// A test server whose smoothed answer time (unit sent to first answer byte, about the
    /// last ten answers: copier_target_answer_smoothed_seconds) passes this is slow: its new
    /// sessions go to the map's other servers, as when overloaded, and one probe copy every
    /// --target-retry measures it again; it takes sessions again at its first answer within
    /// 3/4 of this (copier_target_slow, logged). 0: off.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub target_slow_after: Duration,

    /// A test server that fails more than this percentage of its copies (smoothed over about
    /// its last five sessions, after five: it refused the connection, left segments
    /// unacknowledged through every retransmission, or kept closing without answers) is
    /// failing: its new sessions go to the map's other servers, as when slow, with one probe
    /// copy every --target-retry; it takes sessions again when the share falls below half of
    /// this (copier_target_failing, copier_target_failures_total, logged). 0: off.
    #[arg(long, value_name = "PERCENT", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=99))]
    pub target_fail_rate: u8,

    /// The test servers an intercept guards: INTERCEPT=TARGET_IP[,TARGET_IP...] (repeatable;
    /// INTERCEPT as given to --intercept). Only needed when an intercept does not listen on its
    /// test server's own address: an --intercept at a --map target's address guards that target,
    /// and intercepts that guard nothing named get the registrations of the targets left.
    #[arg(long, value_name = "HOST[:PORT]=IP[,IP...]", value_parser = parse_intercept_for)]
    pub intercept_for: Vec<InterceptFor>,

    /// Write a run trace to FILE: a CSV row per request unit sent (time on the profile's
    /// schedule clock, copy, virtual user, pool, test server, the ON/OFF source when the
    /// profile gates, and `answer_s`: from the unit's first byte sent to the test server's
    /// first answer byte, `-` for units sent ahead of an answer or not answered), the format `shaper check --trace` and `shaper plot` read, so a run is
    /// checked against its profile (`shaper check PROFILE --trace FILE`) and drawn.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,

    /// With --trace: per-interval counts and mean answer time (`time_s,pool,count,answer_s`)
    /// instead of a row per unit, for high rates (e.g. 1s).
    #[arg(long, value_name = "DURATION", requires = "trace", value_parser = parse_duration)]
    pub trace_every: Option<Duration>,

    /// Hold the request units sent to the test side at RATE per second by adjusting the
    /// multiplication factor while running (a closed loop on what leaves the copier, once a
    /// second; see "Closed loop" in --help). With --profile the target follows the profile's
    /// phases or curve and this copier holds its [distribution] share of it; without, copies
    /// come from a profile of factor 1. Not with --copies, --sample or --client-ip.
    #[allow(rustdoc::broken_intra_doc_links)] // --help text: its [..] are no links
    #[arg(long, value_name = "RATE", value_parser = parse_rate, conflicts_with_all = ["copies", "sample", "client_ip"])]
    pub target_rate: Option<f64>,

    /// With --target-rate: the largest multiplication factor the loop may set.
    #[arg(long, value_name = "F", default_value_t = 100.0, requires = "target_rate", value_parser = parse_rate)]
    pub max_factor: f64,

    // ---- shadow testing (see "Comparison" in --help; crate::shadow) ----
    /// Compare every test answer with the online service's answer to the same request (HTTP/1.x
    /// and HTTP/2 with gRPC, paired by stream: status, headers and trailers, body, JSON field by
    /// field): per-endpoint metrics, --compare-log, and a
    /// summary at exit. The copier also captures the online answers of the mapped ports (with
    /// --offline: reads them from the file, which must hold both directions), and asks the
    /// intercept for the answers' payload of the compared sessions (the intercept must allow
    /// it: intercept --payload-bytes 65495). Not with --client-ip or --profile (a test answer is
    /// matched to its online connection by the client's address and port); with --copies N,
    /// copy 0 is compared.
    #[arg(long, help_heading = "Comparison", conflicts_with_all = ["client_ip", "profile"])]
    pub compare: bool,

    /// Compare this percentage of the connections (0 < P <= 100, chosen per connection); only
    /// those ask the intercept for their answers' payload, so the control channel carries
    /// payload for P% of the connections.
    #[arg(long, value_name = "P", default_value = "100", value_parser = parse_percent, help_heading = "Comparison", requires = "compare")]
    pub compare_sample: f64,

    /// A field never compared (repeatable, or comma separated): `header:NAME`, a JSON path such
    /// as `$.meta.ts` or `$.items[*].id`, or a prefix ending in `*` (`$.debug.*`).
    #[arg(
        long,
        value_name = "FIELD",
        value_delimiter = ',',
        help_heading = "Comparison",
        requires = "compare"
    )]
    pub compare_ignore: Vec<String>,

    /// Also copy every compared session, identically, to this baseline (a test server running
    /// the online version): a field where the baseline's answer differs from online is noise,
    /// learned per endpoint, and is not reported for the candidate (the --map target).
    /// [ONLINE_IP:]PORT=TARGET_IP:PORT as --map; its intercept is one of --intercept.
    #[allow(rustdoc::broken_intra_doc_links)] // --help text: its [..] are no links
    #[arg(long = "baseline-map", value_name = "[ONLINE_IP:]PORT=TARGET_IP:PORT", value_parser = parse_map, help_heading = "Comparison", requires = "compare")]
    pub baseline_maps: Vec<PortMap>,

    /// Headers whose values are never written or logged by the comparison (comma separated, any
    /// case; `none`: redact nothing). They are still compared: a difference reads `[redacted]`
    /// (online) and `[redacted, differs]` (test) in --compare-log and the report.
    #[arg(
        long,
        value_name = "HEADERS",
        value_delimiter = ',',
        default_value = "authorization,cookie,set-cookie,proxy-authorization",
        help_heading = "Comparison"
    )]
    pub compare_redact: Vec<String>,

    /// Write the differing exchanges to this JSON Lines file (rotated; turn it into a page with
    /// `copier compare-report FILE -o PAGE.html`). Created 0600: it holds production answers
    /// (credential headers redacted, see --compare-redact; request lines and bodies are kept).
    /// On a full disk, lines are dropped and counted (output="compare_log") and writing resumes
    /// by itself.
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "Comparison",
        requires = "compare"
    )]
    pub compare_log: Option<PathBuf>,

    /// Size of one --compare-log file before it rotates (FILE.1, FILE.2, ...).
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = parse_size, help_heading = "Comparison")]
    pub compare_log_size: u64,

    /// Rotated --compare-log files kept.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 4,
        help_heading = "Comparison"
    )]
    pub compare_log_keep: usize,

    /// Percentage of the differing exchanges written to --compare-log (all are counted).
    #[arg(long, value_name = "P", default_value = "100", value_parser = parse_percent, help_heading = "Comparison")]
    pub compare_log_sample: f64,

    /// Bytes kept of one request or answer (a longer one is compared on its first SIZE bytes).
    #[arg(long, value_name = "SIZE", default_value = "4M", value_parser = parse_size, help_heading = "Comparison")]
    pub compare_bytes: u64,

    /// How long a request waits for its answers before it is counted as not compared.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration, help_heading = "Comparison")]
    pub compare_timeout: Duration,

    /// Most memory the comparison may hold: the streams it is cutting into messages (partial
    /// requests and answers, out-of-order bytes) and the exchanges waiting for an answer
    /// together. Past it the idlest connections are forgotten (counted memory_shed), a
    /// connection that fills it alone stops being compared (unsynced), the oldest waiting
    /// exchanges are dropped (shed).
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = parse_size, help_heading = "Comparison")]
    pub compare_memory: u64,
}

/// Most copies of a session (`--copies`).
pub const MAX_COPIES: i64 = 1000;

mod commands;
mod error;
mod help;
mod parse;
mod texts;
mod validate;

pub use commands::{Command, DoctorArgs};
pub use error::{FlagError, ValueError};
pub use parse::{fleet_share, parse_fleet, parse_map, parse_map_targets, FleetArg};
pub use validate::{check_maps, check_targets_not_local, local_addresses, Validated};

#[cfg(test)]
mod tests;
