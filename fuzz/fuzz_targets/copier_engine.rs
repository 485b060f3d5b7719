//! Fuzz the copier's session engine with structured input: sequences of captured client
//! segments (a few clients, plausible sequence numbers, any flags and sizes, options), records
//! of the test server's answers on the tuples the engine registered, the intercepts' verdicts
//! on those registrations (accepted, refused, from one of two intercepts, or never), raw
//! garbage, clock steps, intercept links going up and down, and a stop. With `rules`, the
//! engine has request rules (a filter, a dye, header edits, a rewrite) and the clients send
//! pipelined HTTP (bytes by their position in the stream, so retransmissions agree), which the
//! editor of each copy parses wherever the segments cut it. With `rules` and `h2`, the clients
//! speak HTTP/2 instead (the preface, then streams of requests: HPACK with static, dynamic and
//! literal fields, a filtered POST with its DATA and a late WINDOW_UPDATE, a block cut into
//! HEADERS and CONTINUATION, padding and priority, trailers, PING, SETTINGS, PRIORITY and
//! RST_STREAM frames), so the HTTP/2 editor decodes, filters and encodes again wherever the
//! segments cut the frames, and loses its place where they skip or overlap.
//!
//! Checked after every step:
//! - no panic;
//! - every packet the engine emits parses, carries valid checksums and goes to a map target,
//!   on a tuple an intercept accepted (and that was not unregistered since);
//! - the bytes the engine holds stay within `max_memory` (plus one captured segment, which is
//!   accounted before the shedding that follows it, and the fixed cost of sessions that only
//!   linger after their end, which cannot be shed).
#![no_main]

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use common::checksum;
use common::flow::FourTuple;
use common::proto::Record;
use common::seq::SeqNum;
use common::wire::{parse_tcp_packet, TcpBuilder, TcpFlags, TcpOption};
use common::proto::RegVerdict;
use copier::engine::{Engine, EngineConfig, PortMap, RegEvent, SESSION_COST};
use libfuzzer_sys::fuzz_target;

const ONLINE_PORT: u16 = 80;
const T4: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 2, 2)), 8080);
const T6: SocketAddr = SocketAddr::new(IpAddr::V6(Ipv6Addr::new(0xfd00, 0x198, 0x18, 2, 0, 0, 0, 2)), 8080);
/// Largest captured segment the fuzzer builds (a GRO super-segment's size).
const MAX_SEGMENT: usize = 64 << 10;
/// The engine's session cap here.
const MAX_SESSIONS: usize = 64;

#[derive(Arbitrary, Debug)]
struct Input {
    copies: u8,
    pacing: bool,
    /// The pacing window (1: lock-step, else adaptive up to 1 + window % 8).
    window: u8,
    /// `max_memory` in KiB (at least 64 KiB).
    mem_kib: u16,
    /// Answer every registration at once with an acceptance (else only `Verdict` ops answer).
    auto_accept: bool,
    /// Two intercepts connected instead of one.
    two_intercepts: bool,
    /// Request rules on, and the clients send HTTP.
    rules: bool,
    /// With `rules`: the clients send HTTP/2 rather than HTTP/1.1.
    h2: bool,
    ops: Vec<Op>,
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// A captured client -> online segment of client `who`.
    Client { who: u8, flags: u8, seq_off: u16, ack_off: u16, len: u16, options: u8, far: bool },
    /// A record from the test server on the `conn`-th registered tuple.
    Server { conn: u8, flags: u8, seq_off: u16, ack_delta: i16, len: u16, window: u16 },
    /// An intercept's verdict on the `conn`-th registration not yet answered.
    Verdict { conn: u8, from: u8, code: u8 },
    /// Client `who` opens a connection in one step: its SYN and handshake ACK, the test
    /// server's SYN-ACK on the tuple the engine registered for it (once accepted), and its
    /// first `len` bytes (so the editors are reached without the fuzzer finding each step).
    Open { who: u8, len: u16 },
    /// Raw bytes as a captured packet.
    Raw(Vec<u8>),
    /// Raw bytes as a record.
    RawRecord(Vec<u8>),
    /// Time passes (ms), then the due timers run.
    Tick(u16),
    /// Intercept link up or down.
    Link(bool),
    /// The copier stops.
    Stop,
}

struct Client {
    addr: SocketAddr,
    isn: u32,
}

fn clients() -> Vec<Client> {
    let mut v = Vec::new();
    for i in 0..6u16 {
        v.push(Client { addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7 + (i % 3) as u8)), 40000 + i), isn: 1_000_000 * u32::from(i + 1) });
    }
    v.push(Client { addr: "[2001:db8::7]:40100".parse().unwrap(), isn: 4_000_000_000 });
    v.push(Client { addr: "[2001:db8::8]:40101".parse().unwrap(), isn: u32::MAX - 10 });
    v
}

fn online_for(c: SocketAddr) -> SocketAddr {
    match c {
        SocketAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), ONLINE_PORT),
        SocketAddr::V6(_) => "[2001:db8::1]:80".parse().unwrap(),
    }
}

fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// Pipelined requests (a filtered one, a Content-Length body, a chunked body, a malformed one
/// now and then), repeated: the client's bytes from stream offset `off`.
const HTTP: &[u8] = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /pay/1 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello\
POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;e=1\r\nabc\r\n0\r\nT: 1\r\n\r\n\
POST /pay/2 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nzzzzz\r\n0\r\n\r\n\
GET /c HTTP/1.1\r\nCookie: a\r\n\r\n";

fn http_payload(off: usize, len: usize) -> Vec<u8> {
    (off..off + len).map(|i| HTTP[i % HTTP.len()]).collect()
}

/// One HTTP/2 frame: header (length, type, flags, stream) and payload.
fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let n = payload.len() as u32;
    out.extend_from_slice(&n.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// An HPACK string (no Huffman; lengths below 127).
fn hstr(out: &mut Vec<u8>, s: &str) {
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

/// A client's HTTP/2 bytes: the preface, a SETTINGS, then request streams 1, 3, 5... of five
/// kinds in turn, with connection-level frames between them, about 160 KiB (positions beyond
/// it wrap, which the editor then reads as malformed).
fn h2_stream() -> Vec<u8> {
    const DATA: u8 = 0;
    const HEADERS: u8 = 1;
    const PRIORITY: u8 = 2;
    const RST: u8 = 3;
    const SETTINGS: u8 = 4;
    const PING: u8 = 6;
    const WINDOW: u8 = 8;
    const CONT: u8 = 9;
    const ES: u8 = 0x1;
    const EH: u8 = 0x4;
    let mut v = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(&mut v, SETTINGS, 0, 0, &[0, 4, 0, 0, 0xff, 0xff]);
    let mut k = 0u32;
    while v.len() < 160 << 10 {
        let id = 1 + 2 * k;
        let mut b = Vec::new();
        match k % 5 {
            0 => {
                // GET /a: :method GET and :scheme http indexed, :path "/a" and :authority
                // literal with incremental indexing (into the dynamic table).
                b.extend_from_slice(&[0x82, 0x86, 0x44]);
                hstr(&mut b, "/a");
                b.push(0x41);
                hstr(&mut b, "x");
                frame(&mut v, HEADERS, EH | ES, id, &b);
            }
            1 => {
                // POST /pay/N (filtered out): literal without indexing, a body, then a
                // WINDOW_UPDATE on the dropped stream.
                b.extend_from_slice(&[0x83, 0x86, 0x04]);
                hstr(&mut b, &format!("/pay/{k}"));
                b.push(0xbe); // dynamic index 62: the latest :authority
                frame(&mut v, HEADERS, EH, id, &b);
                frame(&mut v, DATA, ES, id, b"hello");
                frame(&mut v, WINDOW, 0, id, &[0, 0, 0x10, 0]);
            }
            2 => {
                // A block cut into HEADERS and CONTINUATION, with a cookie (deleted by the
                // rules) as a new literal name.
                b.extend_from_slice(&[0x82, 0x86, 0x84, 0x40]);
                hstr(&mut b, "cookie");
                hstr(&mut b, "a=1");
                b.push(0xbf); // dynamic index 63
                let (a, c) = b.split_at(3);
                frame(&mut v, HEADERS, ES, id, a);
                frame(&mut v, CONT, EH, id, c);
            }
            3 => {
                // Padding and priority.
                let mut p = vec![3, 0, 0, 0, 1, 16];
                p.extend_from_slice(&[0x83, 0x86, 0x84, 0x0f, 0x11]);
                hstr(&mut p, "0");
                p.extend_from_slice(&[0, 0, 0]);
                frame(&mut v, HEADERS, EH | 0x8 | 0x20, id, &p);
                frame(&mut v, DATA, ES | 0x8, id, &[2, b'h', b'i', 0, 0]);
            }
            _ => {
                // A request with trailers, then connection-level frames.
                b.extend_from_slice(&[0x82, 0x86, 0x44]);
                hstr(&mut b, "/a?t");
                frame(&mut v, HEADERS, EH, id, &b);
                frame(&mut v, DATA, 0, id, b"body");
                let mut t = vec![0x40];
                hstr(&mut t, "t");
                hstr(&mut t, "1");
                frame(&mut v, HEADERS, EH | ES, id, &t);
                frame(&mut v, PING, 0, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
                frame(&mut v, PRIORITY, 0, id, &[0, 0, 0, 1, 9]);
                frame(&mut v, RST, 0, id.saturating_sub(2).max(1), &[0, 0, 0, 8]);
                frame(&mut v, WINDOW, 0, 0, &[0, 1, 0, 0]);
                frame(&mut v, SETTINGS, 1, 0, &[]);
            }
        }
        k += 1;
    }
    v
}

const RULES: &str = "[[filter]]\nname = \"pay\"\npath = \"/pay/**\"\n[[filter]]\nname = \"q\"\nprefix = \"QU\"\n\
[dye]\nvalue = \"c{copy}\"\n[[header]]\nname = \"Cookie\"\ndelete = true\n\
[[rewrite]]\nname = \"r\"\nregex = \"^GET /a\"\nreplace = \"GET /longer-a\"\n";

struct Harness {
    engine: Engine,
    now: Instant,
    /// Tuples registered with the intercepts and not yet unregistered.
    registered: HashSet<FourTuple>,
    /// Of those, the ones an intercept accepted: the only ones packets may use.
    accepted: HashSet<FourTuple>,
    /// Registrations not answered yet, in order.
    unanswered: Vec<FourTuple>,
    auto_accept: bool,
    /// Registration order, to pick a tuple by index.
    order: Vec<FourTuple>,
    /// Per tuple: the next sequence number after what the engine sent, and the SYN's seq + 1.
    sent: HashMap<FourTuple, u32>,
    max_memory: usize,
    buf: Vec<u8>,
}

impl Harness {
    /// The I/O layer's loop: control events, then packets, until neither has more (after
    /// `close_all` the Unregisters come out only once the RSTs were taken).
    fn drain(&mut self) {
        loop {
            let (events, packets) = self.drain_once();
            if events == 0 && packets == 0 {
                break;
            }
        }
        // One captured segment may be counted before the shedding that follows it.
        assert!(
            self.engine.memory_used() <= self.max_memory + 2 * MAX_SEGMENT + MAX_SESSIONS * SESSION_COST,
            "{} bytes held, max_memory {}",
            self.engine.memory_used(),
            self.max_memory
        );
    }

    fn drain_once(&mut self) -> (usize, usize) {
        let (mut events, mut packets) = (0, 0);
        while let Some(ev) = self.engine.poll_control() {
            events += 1;
            match ev {
                RegEvent::Register(t) => {
                    assert!(t.server == T4 || t.server == T6, "registered a tuple toward {}", t.server);
                    self.registered.insert(t);
                    if self.auto_accept {
                        self.accepted.insert(t);
                        self.engine.handle_registered(self.now, 0, t, RegVerdict::Accepted);
                    } else {
                        self.unanswered.push(t);
                        if self.unanswered.len() > 64 {
                            self.unanswered.remove(0);
                        }
                    }
                    self.order.push(t);
                    if self.order.len() > 64 {
                        self.order.remove(0);
                    }
                }
                RegEvent::Unregister(t) => {
                    self.registered.remove(&t);
                    self.accepted.remove(&t);
                    self.unanswered.retain(|u| *u != t);
                }
            }
        }
        let mut out = std::mem::take(&mut self.buf);
        while let Some(tx) = self.engine.poll_transmit(self.now, &mut out) {
            packets += 1;
            let pkt = &out[..tx.len];
            let p = parse_tcp_packet(pkt).expect("the engine emits packets that parse");
            assert!(tx.dst == T4.ip() || tx.dst == T6.ip(), "sent to {}, not a map target", tx.dst);
            assert_eq!(p.dst, tx.dst);
            assert_eq!(SocketAddr::new(p.dst, p.tcp.dst_port()), tx.tuple.server.socket());
            assert_eq!(SocketAddr::new(p.src, p.tcp.src_port()), tx.tuple.client.socket());
            assert!(self.accepted.contains(&tx.tuple), "sent on {} before an intercept accepted it (or after it was unregistered)", tx.tuple);
            let seg = &pkt[p.ip_header_len..];
            assert!(checksum::verify_transport(p.src, p.dst, 6, seg), "bad TCP checksum");
            let f = p.tcp.flags();
            let end = p.tcp.seq().0.wrapping_add(p.tcp.payload().len() as u32).wrapping_add(u32::from(f.contains(TcpFlags::SYN) || f.contains(TcpFlags::FIN)));
            self.sent.insert(tx.tuple, end);
        }
        self.buf = out;
        (events, packets)
    }

    fn tick(&mut self, ms: u64) {
        self.now += Duration::from_millis(ms);
        while let Some(t) = self.engine.poll_timeout() {
            if t > self.now {
                break;
            }
            self.engine.handle_timeout(self.now);
            self.drain();
        }
    }
}

/// A captured segment of client `c` toward the online server.
fn client_segment(pkt: &mut Vec<u8>, c: &Client, seq: u32, ack: u32, flags: u8, opts: &[TcpOption<'_>], data: &[u8]) {
    TcpBuilder {
        src: c.addr,
        dst: online_for(c.addr),
        seq: SeqNum(seq),
        ack: SeqNum(ack),
        flags: TcpFlags(flags),
        window: 65535,
        options: opts,
        payload: data,
        ttl: 64,
        ident: 1,
    }
    .emit(pkt);
}

/// The test server's segment on tuple `t`, handed to the engine as the intercept's record.
#[allow(clippy::too_many_arguments)]
fn server_record(h: &mut Harness, pkt: &mut Vec<u8>, t: FourTuple, seq: u32, ack: u32, flags: u8, window: u16, opts: &[TcpOption<'_>], data: &[u8]) {
    TcpBuilder {
        src: t.server.socket(),
        dst: t.client.socket(),
        seq: SeqNum(seq),
        ack: SeqNum(ack),
        flags: TcpFlags(flags),
        window,
        options: opts,
        payload: data,
        ttl: 64,
        ident: 1,
    }
    .emit(pkt);
    if let Ok((_, r)) = Record::from_packet(pkt, 0) {
        h.engine.handle_record(h.now, &r);
    }
}

fn options(bits: u8) -> Vec<TcpOption<'static>> {
    let mut o = Vec::new();
    if bits & 1 != 0 {
        o.push(TcpOption::Mss(if bits & 16 != 0 { 536 } else { 1460 }));
    }
    if bits & 2 != 0 {
        o.push(TcpOption::WindowScale(bits >> 5));
    }
    if bits & 4 != 0 {
        o.push(TcpOption::SackPermitted);
    }
    if bits & 8 != 0 {
        o.push(TcpOption::Timestamps { tsval: u32::from(bits) * 1000, tsecr: 7 });
    }
    o
}

fuzz_target!(|input: Input| {
    let max_memory = (usize::from(input.mem_kib).max(64)) << 10;
    let config = EngineConfig {
        maps: vec![
            PortMap { online_ip: None, online_port: ONLINE_PORT, target: T4 },
            PortMap { online_ip: None, online_port: ONLINE_PORT, target: T6 },
        ],
        copies: u16::from(input.copies % 4).max(1),
        pace_requests: input.pacing,
        pace_window: 1 + u32::from(input.window % 8),
        max_memory,
        per_session_cap: max_memory.min(1 << 20),
        max_sessions: MAX_SESSIONS,
        rules: input.rules.then(|| std::sync::Arc::new(copier::engine::Rules::from_toml_str(RULES).unwrap())),
        ..EngineConfig::default()
    };
    let mut h = Harness {
        engine: Engine::new(config, 7),
        now: Instant::now(),
        registered: HashSet::new(),
        accepted: HashSet::new(),
        unanswered: Vec::new(),
        auto_accept: input.auto_accept,
        order: Vec::new(),
        sent: HashMap::new(),
        max_memory,
        buf: Vec::new(),
    };
    if input.two_intercepts {
        h.engine.set_intercept_count(h.now, 2);
    }
    let clients = clients();
    let h2 = (input.rules && input.h2).then(h2_stream);
    let mut pkt = Vec::new();
    for op in input.ops.into_iter().take(400) {
        match op {
            Op::Client { who, flags, seq_off, ack_off, len, options: bits, far } => {
                let c = &clients[usize::from(who) % clients.len()];
                let seq = if far { c.isn.wrapping_add(u32::from(seq_off) << 12) } else { c.isn.wrapping_add(u32::from(seq_off)) };
                let opts = options(bits);
                let n = usize::from(len) % (MAX_SEGMENT - 200);
                let off = seq.wrapping_sub(c.isn.wrapping_add(1)) as usize;
                let data = if let Some(h2) = &h2 {
                    (off..off + n).map(|i| h2[i % h2.len()]).collect()
                } else if input.rules {
                    http_payload(off, n)
                } else {
                    payload(n)
                };
                client_segment(&mut pkt, c, seq, 7_000_000u32.wrapping_add(u32::from(ack_off)), flags, &opts, &data);
                h.engine.handle_captured(h.now, &pkt);
            }
            Op::Open { who, len } => {
                let c = &clients[usize::from(who) % clients.len()];
                let syn = TcpFlags::SYN.0;
                let ack = TcpFlags::ACK.0;
                let before = h.registered.clone();
                client_segment(&mut pkt, c, c.isn, 0, syn, &options(0x0f), &[]);
                h.engine.handle_captured(h.now, &pkt);
                client_segment(&mut pkt, c, c.isn.wrapping_add(1), 7_000_001, ack, &[], &[]);
                h.engine.handle_captured(h.now, &pkt);
                h.drain();
                // The test server's SYN-ACK on each tuple registered for it (one per copy).
                let mut fresh: Vec<FourTuple> = h.registered.difference(&before).copied().collect();
                fresh.sort();
                for t in fresh {
                    let next = h.sent.get(&t).copied().unwrap_or(0);
                    server_record(&mut h, &mut pkt, t, 50_000, next, syn | ack, 65535, &options(0x0f), &[]);
                    h.drain();
                }
                let n = usize::from(len) % (MAX_SEGMENT - 200);
                let data: Vec<u8> = match &h2 {
                    Some(h2) => h2[..n.min(h2.len())].to_vec(),
                    None if input.rules => http_payload(0, n),
                    None => payload(n),
                };
                client_segment(&mut pkt, c, c.isn.wrapping_add(1), 7_000_001, ack | TcpFlags::PSH.0, &[], &data);
                h.engine.handle_captured(h.now, &pkt);
            }
            Op::Server { conn, flags, seq_off, ack_delta, len, window } => {
                if h.order.is_empty() {
                    continue;
                }
                let t = h.order[usize::from(conn) % h.order.len()];
                let next = h.sent.get(&t).copied().unwrap_or(0);
                let data = payload(usize::from(len) % 3000);
                let (seq, ack) = (50_000u32.wrapping_add(u32::from(seq_off)), next.wrapping_add(ack_delta as i32 as u32));
                server_record(&mut h, &mut pkt, t, seq, ack, flags, window, &[], &data);
            }
            Op::Verdict { conn, from, code } => {
                if h.unanswered.is_empty() {
                    continue;
                }
                let i = usize::from(conn) % h.unanswered.len();
                let t = h.unanswered[i];
                let verdict = RegVerdict::from_code(code % 6);
                if verdict.accepted() {
                    h.unanswered.remove(i);
                    h.accepted.insert(t);
                }
                h.engine.handle_registered(h.now, u16::from(from % 3), t, verdict);
            }
            Op::Raw(bytes) => h.engine.handle_captured(h.now, &bytes),
            Op::RawRecord(bytes) => {
                let r = Record { orig_len: bytes.len() as u32, headers: bytes, payload: Vec::new(), stamp: 0 };
                h.engine.handle_record(h.now, &r);
            }
            Op::Tick(ms) => h.tick(u64::from(ms)),
            Op::Link(up) => h.engine.set_intercept_count(h.now, usize::from(up) * (1 + usize::from(input.two_intercepts))),
            Op::Stop => {
                h.engine.close_all(h.now);
                h.drain();
                assert!(h.registered.is_empty(), "close_all left tuples registered: {:?}", h.registered);
                assert_eq!(h.engine.session_count(), 0);
                return;
            }
        }
        h.drain();
    }
    // Let every timer run out: the table must empty itself.
    for _ in 0..1000 {
        match h.engine.poll_timeout() {
            Some(t) => {
                h.now = h.now.max(t);
                h.engine.handle_timeout(h.now);
                h.drain();
            }
            None => break,
        }
    }
});
