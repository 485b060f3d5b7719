//! The command line of the `copier` binary: flags, parsing of their values, and the checks that
//! run before anything starts.
//!
//! Owns: the [`Args`] type (clap), the value parsers (`--map`, percentages, speeds; sizes and
//! durations are `common::units`'), and [`CopierArgs::validate`], which turns the flags into the
//! configurations of the engine, capture, sender and control clients or says precisely which
//! flag is wrong. Nothing here opens a socket. Its tests are in `cli/tests.rs`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{ArgAction, Parser};
use common::units::{parse_duration, parse_size};

use crate::capture::CaptureConfig;
use crate::engine::{ClientIpPool, EngineConfig, HealthConfig, MapTargets, PortMap};
use crate::offline::{OfflineConfig, Speed};
use crate::routing::{parse_intercept_for, InterceptAddr, InterceptFor};
use crate::send::SendConfig;

const ABOUT: &str =
    "Copies live TCP traffic from this production host to a test server, session by session.";

const LONG_ABOUT: &str = "\
Copies live TCP traffic from this production host to a test server, session by session.

The copier captures what clients send to the online service (AF_PACKET ring with a kernel
filter; the online service is not touched), and replays it to the test server from raw sockets
with the clients' addresses (or addresses from --client-ip), keeping every TCP session
consistent: it learns the test server's sequence numbers and acknowledgements from the
`intercept` daemon on the test host, which also keeps the test server's responses off the
network. Run `intercept` on the test host first, with the same secret.

Needs root (CAP_NET_RAW). The test host needs a route back to the client addresses via this
host, and the intercept's NFQUEUE rule.

Offline replay: with --offline FILE the copier reads a pcap or pcapng file (Ethernet, Linux
cooked v1/v2, raw IP, IPv4/IPv6 link types; tcpdump -w output) instead of capturing, and copies
its client -> service packets of the mapped ports (destination port and, when the map names one,
destination address: a capture of both directions is fine) as it would live traffic. The replay
starts once an intercept is connected, keeps the file's timing (--speed compresses it, --max-gap
cuts idle pauses), and may run several passes (--loop: each pass moves the client ports so that
it is a new set of sessions for the test server). Damaged records are skipped and named (record
number and file offset); a file cut mid-record is replayed up to the cut. When the file is done
the copier waits for the copied sessions that can still go on (a request not answered, a
segment not acknowledged, a close to carry; at most --session-timeout), prints its summary and
exits 0. Sessions idle then (every byte sent and answered, the client's connection left open in
the capture, as keep-alive connections are) are not waited for: they are counted as open at
the capture's end (copier_sessions_open_at_end_total), neither completed nor failed. A progress line is drawn when stderr is a terminal.

Mirror input: with --mirror vxlan[:PORT] or geneve[:PORT] the copier runs on a host of its own
and reads a traffic mirror (AWS VPC Traffic Mirroring, Azure vTAP, a switch or tc mirred into a
VXLAN device) from a UDP port instead of capturing: it takes the inner Ethernet/IP packets of the
mirror sessions --vni selects, copies the client -> service packets of the mapped ports as it
would captured ones, and gives the services' answers to --compare. Truncated inner packets and
duplicates are counted and dropped (copier_mirror_dropped_total{reason}); lost or reordered
packets are handled as in a capture (holes: copier_dropped_total, reason capture_gap).

Amplification: --copies N sends every captured session N times, each copy on a test 4-tuple of
its own, so the test server sees N distinct connections. Copy 0 keeps the client's address (or
its --client-ip address) and port; copy k takes the k-th pool address after it (distinct while
the pool has N addresses) or, without a pool, the client's address and another port. No two
live copies ever share a 4-tuple; a copy for which every port is taken is not started and is
counted (copier_sessions_no_tuple_total): one address has 64512 ports, so for N copies of S
concurrent sessions give a pool of at least N x S / 64512 addresses (and the test host a route
back to it). The multiplier achieved is exported next to the one asked for
(copier_copy_multiplier, copier_copies_requested). The captured bytes are held once for all the
copies of a session. --sample P copies only P% of the sessions: a keyed hash of the seed and the
client's address and port picks them (the hash a profile's factor samples by), so a session is
copied whole or not at all, and the same --seed picks the same sessions.

Shaping: --profile FILE (a TOML shaping profile, see shaper/examples/profile.toml; checked at
start, errors name the key) replaces --copies, --sample and --client-ip (refused together): the
profile's factor (2.5 = every session twice and half of them a third time, 0.3 = a consistent
30% sample, decided per session from the seed) times its load schedule at the session's start
gives each session's copies; each copy comes from a virtual user of the profile's pools (its
address, and its port when free) and, with ON/OFF gating or think time, its requests wait until
the shaper releases them (held, never dropped; a session is never cut).

Several test servers: --map 80=T1:80@3,T2:80@1 spreads the copies over T1 and T2 by weight
(smooth round robin: 3 of every 4 to T1), and each copy stays on its server. Give each test
host's intercept (--intercept T1 --intercept T2): a registration goes to the intercept at its
server's address, or to the one --intercept-for names. A server to which copies were started
and that answers nothing but resets for --target-down-after is taken out (logged, metric
copier_target_up): its new sessions go to the others; one probe copy every --target-retry tests
it, and its first answer puts it back in.

Intercept links: a test connection sends nothing until an intercept guarding its server
accepted its registration on its current link (an intercept refuses servers not on its own
host: server_not_local, and the copy waits for the one that guards it). When a link ends (the
intercept restarted or its host went away), every connection in force through it alone is held
back, sending nothing (copier_registrations_withdrawn_total), until the new link accepted it
again: the copier reconnects at least every second while sessions are registered and registers
them all at once. An intercept whose firewall rules went missing says so, and its sessions send
nothing until the rules are back (copier_intercept_rules_lost_total).

Fleets: copiers that run one configuration (a DaemonSet: the same flags, the same --seed, the
same --client-ip pool) see the same client addresses and ports (clients behind one NAT or load
balancer) and would pick the same test 4-tuple for them: the test server would see one
connection where there are two. Give each copier its share with --fleet I/N (copier I of N,
from 0): copier I takes the I-th of N contiguous runs of the test client ports 1024-65535 (its
--workers split that run again), so no two copiers of the fleet ever pick the same tuple,
with or without --client-ip; sampling stays a function of the seed alone (the same sessions
are picked everywhere). --fleet host/N derives I from a hash of the host name (two hosts may
land on the same share: `copier doctor` warns). A copy keeps the client's port when it lies
in the copier's run, else takes one of the run. The start is refused when a run holds fewer
than 64 ports per worker, and warned about under 4096 (one client address with that many
connections at once would find no free port). Each intercept also refuses a tuple another
live copier holds (verdict held_by_other): the copier then moves that copy to another port
(copier_tuple_moves_total), and a copier that reconnects takes its own tuples back.

Closed loop: --target-rate R holds the request units sent to the test side at R per second:
once a second the copier measures what it sent in the last second and multiplies the factor by
(target / measured)^0.4 (a step of at most 2x either way, the factor at most --max-factor): with
short sessions the gap shrinks by 40 % each second, without overshoot. New sessions get their copies under the
factor in force; live sessions keep theirs, so the loop reacts as fast as sessions turn over.
With --profile the target follows the profile's phases or curve (R at load 1) and this copier
holds its share weight / total_weight of it ([distribution]): copiers started with the same R
and their own weights add up to R with no coordinator. copier_rate_target, _measured, _error
and _scale, and copier_shaper_factor (the factor in force) are exported.

Pacing: the test server must get each request of a session after the one before was answered
(or it would see pipelining that production never sent, and a slow test server would be
flooded), but a copy that waits a whole round trip (NFQUEUE -> intercept -> copier) per
request falls behind fast keep-alive clients. --pacing adaptive (the default) lets a test
connection run ahead by a window of whole requests (at most --pace-window, 64, and at most
64 KB, so that everything in flight can be sent again): the window starts at one, opens by one
with each request answered, and answers that arrive together release their requests in order
by the online answers' sizes. A session goes back to one request at a time for good when a test
answer's size differs from the online one (the sizes would no longer say where each answer
ends), when the test server closes a connection with requests left (those go again on a new
connection), or after three answer timeouts; server-speaks-first protocols (a greeting) and
shaped sessions (--profile) are always one at a time. Choose strict for a test server that
must never see two requests of a connection at once, off (--no-pacing) for a load test where
only the request rate matters. The ACK of a test server's answer waits up to --ack-delay (40ms)
for the next request to carry it, as a client's delayed ACK does. With one worker the engine
thread reads the intercept links itself; records that nothing waits on wait up to --record-wait
(20ms) to share the engine's next wake-up, and the intercepts may hold them as long to read and
send them in batches (0: every record goes and wakes at once). copier_replay_lag_seconds
tells how far behind production the copies run; copier_units_ahead_total counts requests sent
ahead of an answer.

Protocols: HTTP/1.x and every other protocol are paced as above. HTTP/2 (a session whose client
sends the preface PRI * HTTP/2.0, with prior knowledge or after an Upgrade: h2c request, which
waits for its answer first) is not paced request by request, since its streams are answered in
any order: its bytes are cut at frame boundaries and go as captured as long as the test server
has sent, on the whole connection, as many answer bytes as the online server had when the client
sent them (less 4 KB), so the test server never holds many more streams open than the online one
did; a test server that falls quiet with less (smaller answers, refused streams) lets the next
frames go after the answer quiet time. The client's FIN waits until the test server sent as many
bytes as the online one on the whole connection, or the answer timeout (3 s; gRPC servers cancel
the calls in progress when the client closes). gRPC is HTTP/2 and is copied as such (unary and
streaming calls; --compare counts the grpc-status of the test answers). WebSocket (a GET with Upgrade:
websocket, which waits for its answer first): the messages after it go as captured, unpaced,
since the server speaks without being asked. An HTTP/2 connection the test server closes before
it took every frame is not carried on a new one (copier_sessions_failed_total, reason
h2_closed); an HTTP/2 session caught mid-stream (no preface seen) is carried as an unknown
protocol, and its test server refuses it. copier_h2_sessions_total and copier_h2_streams_total
count them. --rules work on HTTP/2 too (see Request rules).

Request rules: --rules FILE (TOML, checked at start, errors name the rule; see README) selects,
marks and edits what each copy sends. HTTP/1.x requests (pipelined, Content-Length or chunked
bodies) are filtered by method, path (glob or regex), header and client range, deny or
allow-only; a dropped request is left out of the test session as if the client never sent it
(later bytes are renumbered, the session stays one consistent TCP connection). Copied requests
may get a dye header (its value may carry the copy index and a copier id), header edits (set,
replace, delete; a value from a file re-read on SIGHUP) and regex rewrites of the request
line. HTTP/2 (prior knowledge, or after a copied Upgrade: h2c request): every client header
block is decoded (HPACK, in connection order) and the filters see :method, :path, the fields
and :authority as host; a denied stream's frames (HEADERS, CONTINUATION, DATA, RST_STREAM,
PRIORITY, WINDOW_UPDATE) never reach the test server, every other stream's do, and each header
block sent is encoded again by the copy's own encoder (no dynamic table), with the dye (name
lower-cased), header edits (Host edits :authority) and rewrites applied to the line
\"METHOD PATH HTTP/2.0\". Undecodable HTTP/2 gives that copy up (counted as malformed) whatever
unparsable says. Other protocols are filtered by a byte prefix at the start of each request
unit, or pass untouched. Paths are matched normalised, as a server resolves them: the query cut, every %XX
decoded once (%2F too), // and ./.. segments resolved, and without case unless the file says
path_case = \"sensitive\"; so //pay/1, /%70ay/1 and /PAY/1 all match path = \"/pay/*\" (a path_regex
matches the raw target or the normalised one). What cannot be read as requests (malformed HTTP,
a Content-Length above 2^63-1, a session caught mid-stream that does not start with a request
while HTTP filters exist) is counted; with unparsable = \"drop\" in the file (the default when it
has a filter: fail closed) the rest of that session's copy is dropped
(copier_sessions_failed_total{reason=\"unparsable\"}), with unparsable = \"pass\" (the default
without filters) it passes as captured, unfiltered and undyed (in allow-only mode the copy is
given up either way). Matches
per rule: copier_rule_matches_total{rule} and the summary line. --record DIR archives what is
copied (copy 0, after the rules' filters and edits) as rotating pcapng files with an index of
sessions; --offline FILE with --rules allow filters (and --from/--until for a time range)
replays a slice of it.

Comparison (shadow testing): with --compare the copier also compares every test answer with the
online service's answer to the same request. It captures both directions of the mapped ports on a
ring of its own (the requests and the online answers), takes the test answers from the intercept's
records (the compared connections ask for their payload: run the intercept with --payload-bytes
65495), puts each connection's three byte streams
back in order, cuts them into HTTP/1.x messages and pairs the n-th request with the n-th answer of
each server. Status, headers (not Date, Content-Length, Transfer-Encoding, Content-Encoding,
Connection, Keep-Alive) and body are compared, chunked and gzip bodies decoded, JSON bodies field
by field ($.items[3].price); endpoints are the method and the path with numbers and ids collapsed
(GET /items/12 and GET /items/7 are one endpoint), at most 500. Noise: the --compare-ignore list;
with --baseline-map, every session also goes to a baseline running the online version, and a field
where the baseline differs from online is noise, learned per endpoint; and a field that changes
between two answers of one server to identical requests is noise too. The copy never waits for the comparison: records reach it
through a bounded queue (dropped and counted when full), and a request waits --compare-timeout for
its answers. Out: copier_compare_* metrics per endpoint (exchanges by result, differences by kind,
noise learned, answer-time ratio), --compare-log (JSON Lines, rotated; `copier compare-report FILE
-o PAGE.html` draws it) and a summary at exit. Files are written 0600 (they hold production
answers), and the values of Authorization, Cookie, Set-Cookie and Proxy-Authorization are
compared but never written or logged (--compare-redact). HTTP/2 (cleartext, with prior
knowledge: the client's bytes start with the preface; gRPC): each direction's frames are read
with an HPACK decoder of its own, and the exchanges are paired by stream id, not by order
(stream N of the test connection carries the request of stream N online); :status, headers,
trailers (grpc-status, grpc-message: compared as headers) and bodies are compared as for
HTTP/1.x (gRPC bodies, length-prefixed protobuf messages, as bytes);
copier_compare_grpc_status_total{status} counts the test answers' grpc-status. An HTTP/2
connection that lost bytes (a record cut or lost) or whose header blocks do not decode is not
compared from there on (copier_compare_not_compared_total{reason=\"h2_broken\"}: its HPACK
tables are lost, its later headers would read wrong). A connection that is neither is compared
whole, as bytes (first differing offset), once every server closed it. With --offline FILE the
requests and the online answers come from the file (it must hold both directions: tcpdump -w
without a direction filter), with its timing, --loop's moved ports and --from/--until followed.
A test answer is matched to its online connection by the client's address and port, so not with
--client-ip or --profile; with --copies N, copy 0 (on the client's own address and port) is
compared and the other copies are not.";

const EXAMPLES: &str = "\
Examples:
  # copy port 80 to the test server 198.18.1.2:8080, intercept on that host (default port 36524)
  copier --map 80=198.18.1.2:8080 --intercept 198.18.1.2 --secret-file /etc/tcopy/secret

  # only traffic to one online address, on one interface, metrics on :9100, fake client range
  copier --map 10.0.0.5:443=198.18.1.2:443 --interface eth0 --intercept 198.18.1.2 \\
         --secret-file /etc/tcopy/secret --metrics 127.0.0.1:9100 --client-ip 198.19.0.0/16

  # ten copies of a sampled quarter of the sessions, from two fake client ranges
  copier --map 80=198.18.1.2:80 --intercept 198.18.1.2 --secret-file /etc/tcopy/secret \\
         --copies 10 --sample 25 --client-ip 198.19.0.0/24,198.19.1.0/24

  # copies shaped by a profile (factor, load phases, user pools, ON/OFF gating, think time)
  copier --map 80=198.18.1.2:80 --intercept 198.18.1.2 --secret-file /etc/tcopy/secret \\
         --profile /etc/tcopy/profile.toml --seed 7

  # compare the test server's answers with production's, a baseline filtering the noise, and
  # turn the file into a page (the intercept runs with --payload-bytes 65495)
  copier --map 80=198.18.1.2:80 --baseline-map 80=198.18.1.3:80 --intercept 198.18.1.2 \\
         --intercept 198.18.1.3 --secret-file /etc/tcopy/secret --compare --compare-log diff.jsonl
  copier compare-report diff.jsonl -o report.html

  # replay a tcpdump capture ten times faster, twice over (the second pass on other client ports)
  copier --offline traffic.pcap --speed 10 --loop 2 --map 80=198.18.1.2:80 \\
         --intercept 198.18.1.2 --secret-file /etc/tcopy/secret

Sizes: plain bytes or a number with K, M, G or T, powers of 1024 (64K, 512M, 1.5G); durations: plain
seconds or a number with ms, s, m, h or d (500ms, 1.5s, 30s, 5m, 2h, 1d).
Logs go to stderr: -v for debug, -vv for trace; without -v, RUST_LOG (e.g. RUST_LOG=debug) applies.";

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
    /// unpolled this long and reads them at its next wake-up, unless a connection is opening (a
    /// Register lately, a SYN, FIN or RST record), a record is part of a large answer or of one
    /// the test server is still writing (more than 4 KiB, or data without PSH), --compare times
    /// the answers, or a copy runs behind. With --workers above 1, those records, registration
    /// verdicts, a filling inbox and a copy running behind wake it at once. The intercepts are
    /// told the same wait (except with --compare, or while a copy runs behind: then 0): theirs
    /// rest between batches of such records that long.
    #[arg(long, value_name = "DURATION", default_value = "20ms", value_parser = parse_duration)]
    pub record_wait: Duration,

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

/// Everything the binary needs, checked.
#[derive(Debug)]
pub struct Validated {
    /// The engine's configuration.
    pub engine: EngineConfig,
    /// The capture's.
    pub capture: CaptureConfig,
    /// The sender's.
    pub send: SendConfig,
    /// The intercepts.
    pub intercepts: Vec<InterceptAddr>,
    /// The shared secret, `None` with `--no-secret`.
    pub secret: Option<Arc<[u8]>>,
    /// The seed.
    pub seed: u64,
    /// Metrics listener.
    pub metrics: Option<SocketAddr>,
    /// The file to replay instead of capturing (`--offline`).
    pub offline: Option<OfflineConfig>,
    /// The mirror to read instead of capturing (`--mirror`, with `--vni`).
    pub mirror: Option<crate::mirror::MirrorConfig>,
    /// Engine threads to run (1 with `--offline`, whatever `--workers` said).
    pub workers: u16,
    /// The test server addresses each intercept guards (`None`: all), in `intercepts`' order.
    pub intercept_serves: Vec<Option<Vec<IpAddr>>>,
    /// The run trace to write.
    pub trace: Option<crate::trace::TraceConfig>,
    /// The closed loop on the rate (its `part` is for one engine thread: 1 / workers).
    pub rate: Option<crate::rate::RateConfig>,
    /// The archive (`--record`).
    pub record: Option<crate::record::RecordConfig>,
    /// The comparison (`--compare`).
    pub shadow: Option<crate::shadow::ShadowConfig>,
}

impl CopierArgs {
    /// Check every flag and build the configurations; `seed` is used when `--seed` is absent.
    /// Reads the secret file; opens nothing else.
    pub fn validate(&self, seed: u64) -> Result<Validated, String> {
        let client_ip = match self.client_ip.len() {
            0 => None,
            _ => Some(
                ClientIpPool::join(self.client_ip.iter().cloned())
                    .map_err(|e| format!("--client-ip: {e}"))?,
            ),
        };
        let maps: Vec<PortMap> = self.maps.iter().map(|m| m.map).collect();
        // One map per server, to check every server's address.
        let every_target: Vec<PortMap> = self
            .maps
            .iter()
            .flat_map(|m| {
                m.targets.iter().map(|t| PortMap {
                    target: t.addr,
                    ..m.map
                })
            })
            .chain(self.baseline_maps.iter().copied())
            .collect();
        check_maps(&maps, client_ip.as_ref())?;
        let profile = match &self.profile {
            None => None,
            Some(path) => {
                let ctx = |e: &dyn std::fmt::Display| format!("--profile {}: {e}", path.display());
                let p = shaper::Profile::load(path).map_err(|e| ctx(&e))?;
                p.validate().map_err(|e| ctx(&e))?;
                // Builds the plan and the users once, so that a profile the engine cannot
                // use is refused here.
                shaper::Shaper::new(&p, 0).map_err(|e| ctx(&e))?;
                Some(Arc::new(p))
            }
        };
        // A closed loop needs a factor to move: without a profile, one of factor 1.
        let profile = match (profile, self.target_rate) {
            (None, Some(_)) => Some(Arc::new(shaper::Profile::default())),
            (p, _) => p,
        };
        let rules = match &self.rules {
            None => None,
            Some(path) => Some(Arc::new(
                crate::engine::Rules::load(path).map_err(|e| format!("--rules: {e}"))?,
            )),
        };
        let engine = EngineConfig {
            profile,
            rules,
            maps: maps.clone(),
            spread: self
                .maps
                .iter()
                .filter(|m| m.targets.len() > 1)
                .cloned()
                .collect(),
            health: HealthConfig {
                down_after: self.target_down_after,
                retry: self.target_retry,
                max_live: self.target_max_live,
                slow_after: self.target_slow_after,
                fail_percent: self.target_fail_rate,
            },
            baselines: self.baseline_maps.clone(),
            mtu: self.mtu,
            gso: self.gso == GsoMode::Auto,
            client_ip,
            copies: self.copies,
            sample_percent: self.sample,
            session_timeout: self.session_timeout,
            per_session_cap: usize::try_from(self.session_buffer)
                .unwrap_or(usize::MAX)
                .max(64 << 10),
            idle_timeout: self.idle_timeout,
            unproven_timeout: self.unproven_timeout,
            max_memory: usize::try_from(self.max_memory).map_err(|_| {
                "--max-memory is larger than this machine's address space".to_string()
            })?,
            pace_requests: !self.no_pacing && self.pacing != PacingMode::Off,
            pace_window: if self.pacing == PacingMode::Strict {
                1
            } else {
                self.pace_window
            },
            ack_delay: self.ack_delay,
            max_sessions: self.max_sessions,
            max_pending_syns: self.max_pending_syns,
            syn_timeout: self.syn_timeout,
            ..EngineConfig::default()
        };
        check_targets_not_local(&every_target, &local_addresses()?)?;
        if self.target_down_after < Duration::from_millis(100)
            || self.target_retry < Duration::from_millis(100)
        {
            return Err("--target-down-after and --target-retry must be at least 100ms".into());
        }
        if self.session_timeout < Duration::from_secs(1) {
            return Err(format!(
                "--session-timeout {:?} is too short (at least 1s)",
                self.session_timeout
            ));
        }
        if let Some(t) = self.idle_timeout.filter(|t| *t < Duration::from_secs(1)) {
            return Err(format!("--idle-timeout {t:?} is too short (at least 1s)"));
        }
        if self.unproven_timeout < Duration::from_secs(1) {
            return Err(format!(
                "--unproven-timeout {:?} is too short (at least 1s)",
                self.unproven_timeout
            ));
        }
        if engine.max_memory < 1 << 20 {
            return Err(format!(
                "--max-memory {} is too small (at least 1M)",
                engine.max_memory
            ));
        }
        let one_worker = self.offline.is_some() || self.mirror.is_some();
        let workers = if one_worker { 1 } else { self.workers.max(1) };
        let fleet = match self.fleet {
            None => crate::engine::FleetShare::default(),
            Some(f) => {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
                let share = fleet_share(f, host.trim());
                if f.index.is_none() {
                    tracing::info!(
                        "--fleet host/{}: host {:?} is copier {share}",
                        f.size,
                        host.trim()
                    );
                }
                share
            }
        };
        let engine = EngineConfig {
            per_session_cap: engine.per_session_cap.min(engine.max_memory),
            port_share: crate::engine::PortShare {
                index: 0,
                count: workers,
                fleet,
            },
            ..engine
        };
        engine
            .validate()
            .map_err(|e| format!("invalid configuration: {e}"))?;
        if fleet.is_split() {
            let (first, last) = fleet.ports();
            let each = engine.port_share.size();
            tracing::info!("--fleet {fleet}: this copier's test client ports are {first}-{last} ({each} per worker)");
            if each < crate::engine::FEW_SHARE_PORTS {
                tracing::warn!(
                    "--fleet {fleet} with --workers {workers} leaves each worker {each} test ports per client address \
                     and test server: one client address with more connections at once finds no free port \
                     (copier_sessions_no_tuple_total); a smaller fleet or fewer workers leave more"
                );
            }
        }

        let page = 4096u64;
        if self.ring_block_size < 64 * 1024
            || self.ring_block_size % page != 0
            || self.ring_block_size > 1 << 30
        {
            return Err(format!(
                "--ring-block-size {} must be a multiple of 4K between 64K and 1G",
                self.ring_block_size
            ));
        }
        if let Some(name) = &self.interface {
            if name.is_empty() || name.len() >= 16 || name.contains(['/', ' ', '\0']) {
                return Err(format!(
                    "--interface {name:?} is not a valid interface name"
                ));
            }
        }
        let capture = CaptureConfig {
            interface: self.interface.clone(),
            block_size: self.ring_block_size as u32,
            block_count: self.ring_blocks,
            initial_blocks: self.ring_start_blocks.min(self.ring_blocks),
            ..CaptureConfig::default()
        };
        let secret = match (&self.secret_file, self.no_secret) {
            (_, true) => None,
            (Some(path), false) => {
                let s = common::proto::auth::load_secret(path)
                    .map_err(|e| format!("--secret-file: {e}"))?;
                warn_if_readable_by_others(path);
                Some(Arc::from(s))
            }
            (None, false) => {
                return Err("give --secret-file FILE, or --no-secret to run without one".into())
            }
        };
        let mut intercepts = Vec::new();
        for i in &self.intercepts {
            if intercepts.contains(i) {
                return Err(format!("--intercept {i} is given twice"));
            }
            intercepts.push(i.clone());
        }
        let target_ips: Vec<IpAddr> = every_target.iter().map(|m| m.target.ip()).collect();
        let intercept_serves = crate::routing::plan(&intercepts, &self.intercept_for, &target_ips)?;
        if self
            .trace_every
            .is_some_and(|d| d < Duration::from_millis(10))
        {
            return Err("--trace-every must be at least 10ms".into());
        }
        let trace = self.trace.as_ref().map(|path| crate::trace::TraceConfig {
            path: path.clone(),
            every: self.trace_every,
            sources: engine.profile.as_ref().is_some_and(|p| p.onoff.enabled),
        });
        let engine = EngineConfig {
            intercepts_for: crate::routing::serving_counts(&intercept_serves, &target_ips),
            trace: self.trace.is_some(),
            ..engine
        };
        let record = match &self.record {
            None => None,
            Some(dir) => {
                common::private::create_dir_all(dir)
                    .map_err(|e| format!("--record {}: {e}", dir.display()))?;
                let max_file = self.record_size / u64::from(self.record_files);
                if max_file < 1 << 16 {
                    return Err(format!(
                        "--record-size {} over {} files is under 64K a file",
                        self.record_size, self.record_files
                    ));
                }
                Some(crate::record::RecordConfig {
                    dir: dir.clone(),
                    max_file,
                    max_files: self.record_files as usize,
                    max_age: self.record_max_age,
                })
            }
        };
        let shadow = self.shadow_config(&capture)?;
        Ok(Validated {
            shadow,
            record,
            engine,
            capture,
            send: SendConfig {
                mtu: self.mtu,
                gso: self.gso == GsoMode::Auto,
                ..SendConfig::default()
            },
            intercepts,
            intercept_serves,
            trace,
            rate: self.target_rate.map(|rate| crate::rate::RateConfig {
                rate,
                part: 1.0 / f64::from(workers),
                max_factor: self.max_factor,
                gain: crate::rate::DEFAULT_GAIN,
            }),
            secret,
            seed: self.seed.unwrap_or(seed),
            metrics: self.metrics,
            workers,
            mirror: self.mirror.clone().map(|m| crate::mirror::MirrorConfig {
                vnis: self.vni.clone().map(|v| v.0).unwrap_or_default(),
                ..m
            }),
            offline: self.offline.as_ref().map(|path| OfflineConfig {
                speed: self.speed,
                loops: self.loops,
                max_gap: self.max_gap,
                from: self.from,
                until: self.until,
                ..OfflineConfig::new(path.clone())
            }),
        })
    }
}

impl CopierArgs {
    /// The comparison's configuration from the `--compare*` flags (None without `--compare`).
    fn shadow_config(
        &self,
        capture: &CaptureConfig,
    ) -> Result<Option<crate::shadow::ShadowConfig>, String> {
        use crate::shadow::{LogConfig, ShadowConfig, ShadowMap};
        if !self.compare {
            if !self.baseline_maps.is_empty() {
                return Err("--baseline-map needs --compare".into());
            }
            return Ok(None);
        }
        let mut maps = Vec::new();
        for m in &self.maps {
            if m.targets.len() > 1 {
                return Err(format!(
                    "--compare with --map {}: a compared map has one candidate test server (several weighted ones are not compared)",
                    m.map
                ));
            }
            let m = &m.map;
            let baseline = self
                .baseline_maps
                .iter()
                .find(|b| b.online_port == m.online_port && b.online_ip == m.online_ip);
            if let Some(b) = baseline {
                if b.target.is_ipv4() != m.target.is_ipv4() || b.target == m.target {
                    return Err(format!(
                        "--baseline-map {}: its target must differ from the --map target {} and be of its family",
                        b,
                        m.target
                    ));
                }
            }
            maps.push(ShadowMap {
                online: m.online_ip,
                port: m.online_port,
                candidate: m.target,
                baseline: baseline.map(|b| b.target),
            });
        }
        for b in &self.baseline_maps {
            if !maps
                .iter()
                .any(|m| m.port == b.online_port && m.online == b.online_ip)
            {
                return Err(format!(
                    "--baseline-map {}: no --map for that online port and address",
                    b
                ));
            }
        }
        let max_message = usize::try_from(self.compare_bytes).unwrap_or(usize::MAX);
        if max_message < 1024 {
            return Err(format!(
                "--compare-bytes {} is too small (at least 1K)",
                self.compare_bytes
            ));
        }
        let compare = compare::CompareConfig {
            ignore: self
                .compare_ignore
                .iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            limits: compare::http::Limits {
                max_body: max_message,
            },
            redact: compare::redact::Redact::from_list(&self.compare_redact),
            ..compare::CompareConfig::default()
        };
        let baseline = maps.iter().any(|m| m.baseline.is_some());
        let flows = compare::flows::FlowConfig {
            max_message,
            pair_timeout: self.compare_timeout,
            max_pending_bytes: usize::try_from(self.compare_memory).unwrap_or(usize::MAX),
            max_bytes: usize::try_from(self.compare_memory).unwrap_or(usize::MAX),
            baseline,
            sample: self.compare_sample / 100.0,
            port: self.maps.first().map_or(0, |m| m.map.online_port),
            ..compare::flows::FlowConfig::default()
        };
        let log = self.compare_log.as_ref().map(|path| LogConfig {
            path: path.clone(),
            max_bytes: self.compare_log_size,
            keep: self.compare_log_keep,
            sample: self.compare_log_sample / 100.0,
        });
        // the comparison's ring: a fixed 16 MiB of the capture's block size
        let blocks = ((16u64 << 20) / u64::from(capture.block_size)).max(2) as u32;
        let capture = CaptureConfig {
            block_count: blocks,
            initial_blocks: blocks,
            ..capture.clone()
        };
        // Offline and mirrored, both directions reach the comparison through its tap.
        let offline = self.offline.is_some() || self.mirror.is_some();
        Ok(Some(ShadowConfig {
            maps,
            flows,
            compare,
            log,
            capture,
            tick: Duration::from_secs(10),
            offline,
        }))
    }
}

/// `--fleet`: the copier's index (`None`: from the host name) and the fleet's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetArg {
    /// Copier `0..size`, or `None` for `host/N`.
    pub index: Option<u16>,
    /// Copiers in the fleet.
    pub size: u16,
}

/// Parse `I/N` or `host/N`.
pub fn parse_fleet(s: &str) -> Result<FleetArg, String> {
    let (i, n) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?}: expected I/N (copier I of N, from 0) or host/N"))?;
    let size: u16 = n
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: the fleet size {n:?} is not a number from 1 to 65535"))?;
    if size == 0 {
        return Err(format!("{s:?}: a fleet has at least one copier"));
    }
    let index = match i.trim() {
        "host" => None,
        i => {
            let i: u16 = i
                .parse()
                .map_err(|_| format!("{s:?}: the copier {i:?} is neither a number nor `host`"))?;
            if i >= size {
                return Err(format!(
                    "{s:?}: copier {i} does not exist in a fleet of {size} (0 to {})",
                    size - 1
                ));
            }
            Some(i)
        }
    };
    Ok(FleetArg { index, size })
}

/// The fleet share of `--fleet` (`host/N`: FNV-1a of `host` modulo N).
#[must_use]
pub fn fleet_share(arg: FleetArg, host: &str) -> crate::engine::FleetShare {
    let index = arg.index.unwrap_or_else(|| {
        let h = common::hash::fnv1a(host.as_bytes());
        (h % u64::from(arg.size)) as u16
    });
    crate::engine::FleetShare {
        index,
        size: arg.size,
    }
}

fn warn_if_readable_by_others(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(path) {
        if m.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                "secret file {} is readable by group or others; chmod 600 it",
                path.display()
            );
        }
    }
}

/// Cross-checks of the maps: no port mapped twice for the same online address, no port mapped
/// both for any address and for a given one (which would win is not obvious), families that
/// can work.
///
/// A port without an online address may have one map per target family: the engine sends a
/// client to the map of its own family (`--map 80=198.18.2.2:80 --map 80=[fd00::2]:80`), and
/// to the other one only through a `--client-ip` range, which every target must share anyway.
pub fn check_maps(maps: &[PortMap], pool: Option<&ClientIpPool>) -> Result<(), String> {
    // Key: port, online address, and for maps of any address the target's family.
    type Key = (u16, Option<IpAddr>, Option<bool>);
    let key = |m: &PortMap| -> Key {
        let fam = m.online_ip.is_none().then(|| m.target.is_ipv6());
        (m.online_port, m.online_ip, fam)
    };
    let mut seen: BTreeMap<Key, &PortMap> = BTreeMap::new();
    for m in maps {
        if let Some(prev) = seen.get(&key(m)) {
            let what = if m.online_ip.is_none() {
                format!(
                    "copy the same online port {} to the same family ({}); one map per family",
                    m.online_port,
                    if m.target.is_ipv6() { "IPv6" } else { "IPv4" }
                )
            } else {
                format!("copy the same online port {}", m.online_port)
            };
            return Err(format!("--map {} and --map {} {what}", prev, m));
        }
        seen.insert(key(m), m);
    }
    for m in maps {
        if m.online_ip.is_some() {
            let any = [false, true]
                .into_iter()
                .find_map(|v6| seen.get(&(m.online_port, None, Some(v6))));
            if let Some(any) = any {
                return Err(format!(
                    "--map {} (any address) overlaps --map {}: give addresses to both or to neither",
                    any,
                    m
                ));
            }
        }
        match (m.online_ip, pool) {
            (_, Some(p)) if !p.serves(m.target.is_ipv6()) => {
                return Err(format!(
                    "--client-ip {p} has no range of the IP family of the target of --map {} \
                     (different IP families)",
                    m
                ));
            }
            (Some(ip), None) if ip.is_ipv6() != m.target.is_ipv6() => {
                return Err(format!(
                    "--map {}: the online address and the target are of different IP families; \
                     add --client-ip with a range of the target's family",
                    m
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The addresses of this host's interfaces (loopback included).
pub fn local_addresses() -> Result<Vec<IpAddr>, String> {
    let addrs = nix::ifaddrs::getifaddrs()
        .map_err(|e| format!("cannot list this host's addresses (getifaddrs): {e}"))?;
    Ok(addrs
        .filter_map(|a| a.address)
        .filter_map(|sa| {
            sa.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| sa.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect())
}

/// Refuse a map whose target is this host itself (one of `local`, any loopback or the
/// unspecified address): the copies would go to the production host.
pub fn check_targets_not_local(maps: &[PortMap], local: &[IpAddr]) -> Result<(), String> {
    for m in maps {
        let ip = m.target.ip();
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        if ip.is_loopback() || ip.is_unspecified() || local.contains(&ip) {
            return Err(format!(
                "--map {}: the target {} is an address of this host (the production host): the copies \
                 would be sent here; give the test server's address",
                m,
                m.target.ip()
            ));
        }
    }
    Ok(())
}

/// Parse `--map`: `[ONLINE_IP:]PORT=` and one target `IP:PORT` or weighted ones
/// `IP:PORT@W,IP:PORT@W` (see [`crate::engine::parse_targets`]).
pub fn parse_map_targets(s: &str) -> Result<MapTargets, String> {
    let (online, targets) = s.split_once('=').ok_or_else(|| {
        format!("{s:?}: no '=': expected [ONLINE_IP:]PORT=TARGET_IP:PORT[@W][,...]")
    })?;
    let targets = crate::engine::parse_targets(targets).map_err(|e| format!("{s:?}: {e}"))?;
    let map = parse_map(&format!("{online}={}", targets[0].addr))?;
    Ok(MapTargets { map, targets })
}

/// Parse `[ONLINE_IP:]PORT=TARGET_IP:PORT` (IPv6 in brackets: `[2001:db8::1]:80=[2001:db8::2]:80`).
pub fn parse_map(s: &str) -> Result<PortMap, String> {
    let form = "expected [ONLINE_IP:]PORT=TARGET_IP:PORT, e.g. 80=198.18.1.2:8080";
    let (online, target) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: no '=': {form}"))?;
    let (online_ip, online_port) = match online.trim().parse::<u16>() {
        Ok(p) => (None, p),
        Err(_) => match online.trim().parse::<SocketAddr>() {
            Ok(sa) => (Some(sa.ip()), sa.port()),
            Err(_) => {
                return Err(format!(
                    "{s:?}: online part {online:?} is neither PORT nor IP:PORT (IPv6 as [ADDR]:PORT): {form}"
                ))
            }
        },
    };
    if online_port == 0 {
        return Err(format!("{s:?}: online port 0 cannot be copied"));
    }
    if let Some(ip) = online_ip {
        if ip.is_unspecified() || ip.is_multicast() {
            return Err(format!("{s:?}: online address {ip} cannot be a service address; leave it out to copy any address"));
        }
    }
    let target: SocketAddr = target.trim().parse().map_err(|_| {
        format!("{s:?}: target {target:?} is not IP:PORT (IPv6 as [ADDR]:PORT; host names are not resolved): {form}")
    })?;
    if target.port() == 0 || target.ip().is_unspecified() || target.ip().is_multicast() {
        return Err(format!(
            "{s:?}: target {target} needs a unicast address and a port from 1 to 65535"
        ));
    }
    Ok(PortMap {
        online_ip,
        online_port,
        target,
    })
}

/// Most copies of a session (`--copies`).
pub const MAX_COPIES: i64 = 1000;

/// Parse a rate or factor: a finite number above 0 (`--target-rate`, `--max-factor`).
fn parse_rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number above 0")),
    }
}

/// Parse a percentage above 0 and at most 100 (`--sample`).
fn parse_percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("{s:?} is not a number (e.g. 50 or 12.5)"))?;
    if v > 0.0 && v <= 100.0 {
        Ok(v)
    } else {
        Err(format!("{s:?} is not above 0 and at most 100"))
    }
}

fn parse_speed(s: &str) -> Result<Speed, String> {
    s.parse()
}

/// A Unix time in seconds, a fraction allowed (`--from`, `--until`).
fn parse_unix_time(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a Unix time in seconds (e.g. 1764480000.5)"))?;
    if !(0.0..=1e11).contains(&v) {
        return Err(format!("{s:?} is not a Unix time in seconds"));
    }
    Ok(Duration::from_secs_f64(v))
}

fn parse_intercept(s: &str) -> Result<InterceptAddr, String> {
    s.parse()
}

mod commands;
mod help;

pub use commands::{Command, DoctorArgs};
#[cfg(test)]
mod tests;
