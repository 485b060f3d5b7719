//! Engine cost per short connection (issue 32's one request per connection): a whole copied
//! connection through the engine, as in `bench_copier`'s think-close: the client's SYN, the
//! Register and the intercept's verdict, the test server's SYN-ACK, the client's handshake ACK
//! and request, the test server's answer and FIN (records), the client's ACK and FIN, the test
//! server's last ACK, and the timers that come due meanwhile. One "connection" below is all of
//! that, with the engine's segments built; the sessions overlap (`live` at a time), as 16
//! clients' do, the engine's clock runs at think-close's 2,400 connections a second, and every
//! client port is new for a long while (as a client's are).
//!
//! `cargo bench -p copier --bench session -- --warm-up-time 1 --measurement-time 3`
//! (prints a plain ns/connection figure too, over a fixed run of connections).

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::proto::{Record, RegVerdict};
use common::wire::{TcpFlags, TcpOption};
use copier::engine::{Engine, EngineConfig, PortMap, RegEvent};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use support::{ONLINE, TARGET};

mod support;

const REQUEST: &[u8] =
    b"GET /index.html HTTP/1.1\r\nHost: bench\r\nUser-Agent: wrk\r\nConnection: close\r\n\r\n";
const ANSWER: usize = 850;
/// The clock's advance per step: a connection takes 6 steps, so 2,400 connections a second,
/// think-close's rate (what the engine remembers for a while, such as the keys of closed
/// sessions for `close_linger`, is then as large as there).
const STEP: Duration = Duration::from_micros(69);

/// The connections in flight, each at one step of its life.
struct Run {
    e: Engine,
    now: Instant,
    pkt: Vec<u8>,
    out: Vec<u8>,
    /// Connections started so far (the next one's number).
    started: u32,
    /// Per live slot: the connection's number and the step it is at.
    live: Vec<(u32, u8)>,
    /// Per live slot: the test connection's client end and ISN, from the engine's SYN.
    test: Vec<(SocketAddr, u32)>,
    /// The last SYN the engine sent: its client end and ISN.
    syn: Option<(SocketAddr, u32)>,
    slot: usize,
    sent: u64,
    online: SocketAddr,
    target: SocketAddr,
}

impl Run {
    fn new(live: usize) -> Run {
        let cfg = EngineConfig {
            maps: vec![PortMap {
                online_ip: None,
                online_port: 80,
                target: TARGET.parse().unwrap(),
            }],
            ..EngineConfig::default()
        };
        Run {
            e: Engine::new(cfg, 1),
            now: Instant::now(),
            pkt: Vec::with_capacity(2048),
            out: Vec::with_capacity(2048),
            started: 0,
            live: vec![(0, 0); live],
            test: vec![(SocketAddr::from(([0, 0, 0, 0], 0)), 0); live],
            syn: None,
            slot: 0,
            sent: 0,
            online: ONLINE.parse().unwrap(),
            target: TARGET.parse().unwrap(),
        }
        .started()
    }

    fn started(mut self) -> Run {
        for i in 0..self.live.len() {
            self.live[i] = (self.started, 0);
            self.started += 1;
        }
        self
    }

    /// The client of connection `n`: 16 addresses, ports walking 1024..=65023 (a port comes
    /// back after 1,024,000 connections).
    fn client(n: u32) -> SocketAddr {
        let port = 1024 + (n / 16) % 64_000;
        SocketAddr::from(([10, 9, 0, 1 + (n % 16) as u8], port as u16))
    }

    fn drain(&mut self) {
        while let Some(ev) = self.e.poll_control() {
            if let RegEvent::Register(t) = ev {
                // As a connected intercept does: the registration is in force.
                self.e
                    .handle_registered(self.now, 0, t, RegVerdict::Accepted);
            }
        }
        while let Some(t) = self.e.poll_transmit(self.now, &mut self.out) {
            // IPv4 (20 bytes), then the TCP header: seq at 4, flags at 13.
            if self.out[33] & 0x02 != 0 {
                let isn = u32::from_be_bytes(self.out[24..28].try_into().unwrap());
                self.syn = Some((t.tuple.client.socket(), isn));
            }
            black_box(t);
            self.sent += 1;
        }
    }

    /// Builds a segment into `self.pkt`, with timestamps (and on a SYN the options a client's
    /// SYN carries).
    #[allow(clippy::too_many_arguments)]
    fn build(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        seq: u32,
        ack: u32,
        flags: TcpFlags,
        data: &[u8],
        (tsval, tsecr): (u32, u32),
    ) {
        let opts = [
            TcpOption::Mss(1460),
            TcpOption::WindowScale(7),
            TcpOption::Timestamps { tsval, tsecr },
        ];
        let opts = if flags.contains(TcpFlags::SYN) {
            &opts[..]
        } else {
            &opts[2..]
        };
        support::builder(src, dst, seq, ack, flags, 502, opts, data).emit(&mut self.pkt);
    }

    fn captured(&mut self, c: SocketAddr, seq: u32, ack: u32, flags: TcpFlags, data: &[u8]) {
        self.build(c, self.online, seq, ack, flags, data, (7, 5));
        self.e.handle_captured(self.now, &self.pkt);
    }

    fn record(&mut self, seq: u32, ack: u32, flags: TcpFlags, data: &[u8]) {
        let c = self.test[self.slot].0;
        self.build(self.target, c, seq, ack, flags, data, (9, 7));
        let (_, r) = Record::from_packet(&self.pkt, 0).unwrap();
        self.e.handle_record(self.now, &r);
    }

    /// One step of the next live connection (its steps interleave with the others', as
    /// overlapping connections' do); a connection done makes room for a new one.
    fn step(&mut self) {
        let (n, at) = self.live[self.slot];
        let c = Run::client(n);
        let (isn, tisn, oisn) = (n.wrapping_mul(7919), 5_000_000u32, 9_000u32);
        // The test connection's ISN (the engine's, known from its SYN once sent).
        let iss = self.test[self.slot].1;
        let (a, q) = (ANSWER as u32, REQUEST.len() as u32);
        self.now += STEP;
        let ack = TcpFlags::ACK;
        match at {
            0 => self.captured(c, isn, 0, TcpFlags::SYN, &[]),
            1 => {
                self.captured(c, isn + 1, oisn + 1, ack, &[]);
                self.captured(c, isn + 1, oisn + 1, ack | TcpFlags::PSH, REQUEST);
            }
            2 => self.record(tisn, iss + 1, TcpFlags::SYN | ack, &[]),
            3 => {
                let answer = [0x62u8; ANSWER];
                self.record(tisn + 1, iss + 1 + q, ack | TcpFlags::PSH, &answer);
                self.record(tisn + 1 + a, iss + 1 + q, ack | TcpFlags::FIN, &[]);
            }
            4 => {
                self.captured(c, isn + 1 + q, oisn + 1 + a, ack, &[]);
                self.captured(c, isn + 1 + q, oisn + 2 + a, ack | TcpFlags::FIN, &[]);
            }
            _ => self.record(tisn + 2 + a, iss + 2 + q, ack, &[]),
        }
        self.drain();
        // The engine opens the test connection once the client's handshake is complete.
        if let Some(syn) = self.syn.take() {
            self.test[self.slot] = syn;
        }
        if self.e.poll_timeout().is_some_and(|t| t <= self.now) {
            self.e.handle_timeout(self.now);
            self.drain();
        }
        self.live[self.slot] = if at >= 5 {
            self.started += 1;
            (self.started - 1, 0)
        } else {
            (n, at + 1)
        };
        self.slot = (self.slot + 1) % self.live.len();
    }

    /// Runs whole connections: as many steps as `conns` connections take.
    fn connections(&mut self, conns: u32) {
        for _ in 0..conns * 6 {
            self.step();
        }
    }
}

fn plain_figure(live: usize) {
    let mut r = Run::new(live);
    r.connections(50_000);
    let (sent0, done0) = (r.sent, r.e.stats().sessions_completed);
    let n = 300_000u32;
    let t = Instant::now();
    r.connections(n);
    let ns = t.elapsed().as_nanos() as f64 / f64::from(n);
    let s = r.e.stats();
    let done = s.sessions_completed - done0;
    assert!(
        done + live as u64 >= u64::from(n),
        "every connection completed: {done} of {n}: {s:?}"
    );
    assert_eq!(s.sessions_failed.total(), 0, "{s:?}");
    println!(
        "engine: {ns:.0} ns/connection ({live} at a time; {:.2} segments sent and 5 records each; {} sessions held at the end)",
        (r.sent - sent0) as f64 / f64::from(n),
        r.e.session_count()
    );
}

fn bench(c: &mut Criterion) {
    plain_figure(16);
    plain_figure(1000);
    let mut g = c.benchmark_group("session");
    g.throughput(Throughput::Elements(1));
    let mut r = Run::new(16);
    r.connections(20_000);
    g.bench_function("short_connection/16_live", |x| x.iter(|| r.connections(1)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
