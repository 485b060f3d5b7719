//! The copier's `--help` texts: the one-line and the long description, and the examples.

pub(super) const ABOUT: &str =
    "Copies live TCP traffic from this production host to a test server, session by session.";

pub(super) const LONG_ABOUT: &str = "\
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
send them in batches (0: every record goes and wakes at once); those of a connection opening or
ending (a verdict, a SYN-ACK, a FIN) wait up to --open-wait (3ms) there, and the intercepts may
hold the SYN-ACKs, FINs and RSTs as long. copier_replay_lag_seconds tells how far behind
production the copies run; copier_units_ahead_total counts requests sent ahead of an answer.

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

pub(super) const EXAMPLES: &str = "\
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
