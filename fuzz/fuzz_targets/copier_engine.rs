//! Fuzz the copier's session engine with structured input: sequences of captured client
//! segments (a few clients, plausible sequence numbers, any flags and sizes, options), records
//! of the test server's answers on the tuples the engine registered, the intercepts' verdicts
//! on those registrations (accepted, refused, from one of two intercepts, or never), raw
//! garbage, clock steps, intercept links going up and down, and a stop. With `rules`, the
//! engine has request rules (a filter, a dye, header edits, a rewrite) and the clients send
//! pipelined HTTP (bytes by their position in the stream, so retransmissions agree), which the
//! editor of each copy parses wherever the segments cut it.
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
    let mut pkt = Vec::new();
    for op in input.ops.into_iter().take(400) {
        match op {
            Op::Client { who, flags, seq_off, ack_off, len, options: bits, far } => {
                let c = &clients[usize::from(who) % clients.len()];
                let seq = if far { c.isn.wrapping_add(u32::from(seq_off) << 12) } else { c.isn.wrapping_add(u32::from(seq_off)) };
                let opts = options(bits);
                let n = usize::from(len) % (MAX_SEGMENT - 200);
                let data = if input.rules {
                    http_payload(seq.wrapping_sub(c.isn.wrapping_add(1)) as usize, n)
                } else {
                    payload(n)
                };
                TcpBuilder {
                    src: c.addr,
                    dst: online_for(c.addr),
                    seq: SeqNum(seq),
                    ack: SeqNum(7_000_000u32.wrapping_add(u32::from(ack_off))),
                    flags: TcpFlags(flags),
                    window: 65535,
                    options: &opts,
                    payload: &data,
                    ttl: 64,
                    ident: 1,
                }
                .emit(&mut pkt);
                h.engine.handle_captured(h.now, &pkt);
            }
            Op::Server { conn, flags, seq_off, ack_delta, len, window } => {
                if h.order.is_empty() {
                    continue;
                }
                let t = h.order[usize::from(conn) % h.order.len()];
                let next = h.sent.get(&t).copied().unwrap_or(0);
                let data = payload(usize::from(len) % 3000);
                TcpBuilder {
                    src: t.server.socket(),
                    dst: t.client.socket(),
                    seq: SeqNum(50_000u32.wrapping_add(u32::from(seq_off))),
                    ack: SeqNum(next.wrapping_add(ack_delta as i32 as u32)),
                    flags: TcpFlags(flags),
                    window,
                    options: &[],
                    payload: &data,
                    ttl: 64,
                    ident: 1,
                }
                .emit(&mut pkt);
                if let Ok((_, r)) = Record::from_packet(&pkt, 0) {
                    h.engine.handle_record(h.now, &r);
                }
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
