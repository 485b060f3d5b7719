//! What the copier's benches share: an engine with established sessions, and one step of
//! traffic through it. Each bench uses part of it.
#![allow(dead_code)]

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::proto::Record;
use common::seq::SeqNum;
use common::wire::{TcpBuilder, TcpFlags, TcpOption};
use copier::engine::{Engine, EngineConfig, PortMap, RegEvent};

/// The online service the benches' clients talk to, and the test server their copies go to.
pub const ONLINE: &str = "192.0.2.1:80";
pub const TARGET: &str = "198.18.0.2:8080";
const ISN: u32 = 1_000;
const TISN: u32 = 5_000_000;

fn client(i: u32) -> SocketAddr {
    SocketAddr::from((
        [10, 1 + (i >> 16) as u8, (i >> 8) as u8, i as u8],
        40_000 + (i % 20_000) as u16,
    ))
}

/// A segment's builder (`emit` it into a buffer of one's own to build without allocating).
#[allow(clippy::too_many_arguments)]
pub fn builder<'a>(
    src: SocketAddr,
    dst: SocketAddr,
    seq: u32,
    ack: u32,
    flags: TcpFlags,
    window: u16,
    opts: &'a [TcpOption],
    payload: &'a [u8],
) -> TcpBuilder<'a> {
    TcpBuilder {
        src,
        dst,
        seq: SeqNum(seq),
        ack: SeqNum(ack),
        flags,
        window,
        options: opts,
        payload,
        ttl: 64,
        ident: 0,
    }
}

/// The bytes of a segment that [`builder`] describes.
fn packet(b: TcpBuilder<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    b.emit(&mut out);
    out
}

/// `sessions` established sessions with timestamps, and a template data segment and ACK
/// record for each, whose sequence numbers the run patches in place.
pub struct Bench {
    pub e: Engine,
    now: Instant,
    out: Vec<u8>,
    data: Vec<Vec<u8>>,
    acks: Vec<Record>,
    next: Vec<u32>,
    /// The test side's next byte per session (ahead of `next` by what the rules add).
    sent: Vec<u32>,
    /// Bytes the rules add to each request.
    grow: u32,
    i: usize,
    /// The session the next ACK record is for.
    a: usize,
    n: u64,
    seg: u32,
}

impl Bench {
    pub fn new(sessions: u32, seg: usize) -> Bench {
        Bench::with_rules(sessions, seg, None)
    }

    /// [`Bench::new`] with request rules (`--rules`) that add `grow` bytes to each request:
    /// every data segment is then one whole HTTP request of `seg` bytes (at least 40), which
    /// each session's editor reads and edits, and the test server acks the grown stream.
    pub fn with_rules(
        sessions: u32,
        seg: usize,
        rules: Option<(std::sync::Arc<copier::engine::Rules>, u32)>,
    ) -> Bench {
        let (rules, grow) = match rules {
            Some((r, g)) => (Some(r), g),
            None => (None, 0),
        };
        let payload = match &rules {
            None => vec![0x61; seg],
            Some(_) => {
                let fixed = "GET / HTTP/1.1\r\nHost: a\r\n\r\n".len();
                format!(
                    "GET /{} HTTP/1.1\r\nHost: a\r\n\r\n",
                    "x".repeat(seg.max(fixed) - fixed)
                )
                .into_bytes()
            }
        };
        let cfg = EngineConfig {
            maps: vec![PortMap {
                online_ip: None,
                online_port: 80,
                target: TARGET.parse().unwrap(),
            }],
            rules,
            ..EngineConfig::default()
        };
        let mut e = Engine::new(cfg, 1);
        let now = Instant::now();
        let online: SocketAddr = ONLINE.parse().unwrap();
        let target: SocketAddr = TARGET.parse().unwrap();
        let mut out = Vec::new();
        let ts = [TcpOption::Timestamps {
            tsval: 77,
            tsecr: 5,
        }];
        let mut data = Vec::new();
        let mut acks = Vec::new();
        for i in 0..sessions {
            let c = client(i);
            let syn_opts = [TcpOption::Mss(1460), TcpOption::WindowScale(7), ts[0]];
            e.handle_captured(
                now,
                &packet(builder(
                    c,
                    online,
                    ISN,
                    0,
                    TcpFlags::SYN,
                    65535,
                    &syn_opts,
                    &[],
                )),
            );
            e.handle_captured(
                now,
                &packet(builder(
                    c,
                    online,
                    ISN + 1,
                    9,
                    TcpFlags::ACK,
                    1024,
                    &ts,
                    &[],
                )),
            );
            while let Some(ev) = e.poll_control() {
                let RegEvent::Register(t) = ev else {
                    panic!("not a Register: {ev:?}")
                };
                // As a connected intercept does: the registration is in force.
                e.handle_registered(now, 0, t, common::proto::RegVerdict::Accepted);
            }
            while e.poll_transmit(now, &mut out).is_some() {}
            let sa = packet(builder(
                target,
                c,
                TISN,
                ISN + 1,
                TcpFlags::SYN | TcpFlags::ACK,
                65535,
                &syn_opts,
                &[],
            ));
            let (t, r) = Record::from_packet(&sa, 0).unwrap();
            assert_eq!(t, FourTuple::new(c, target));
            e.handle_record(now, &r);
            while e.poll_transmit(now, &mut out).is_some() {}
            data.push(packet(builder(
                c,
                online,
                ISN + 1,
                9,
                TcpFlags::ACK | TcpFlags::PSH,
                1024,
                &ts,
                &payload,
            )));
            let ack = packet(builder(
                target,
                c,
                TISN + 1,
                ISN + 1,
                TcpFlags::ACK,
                20_000,
                &ts,
                &[],
            ));
            acks.push(Record::from_packet(&ack, 0).unwrap().1);
        }
        assert_eq!(e.stats().sessions_active, u64::from(sessions));
        let seg = payload.len() as u32;
        let next = vec![ISN + 1; sessions as usize];
        Bench {
            e,
            now,
            out,
            data,
            acks,
            sent: next.clone(),
            next,
            grow,
            i: 0,
            a: 0,
            n: 0,
            seg,
        }
    }

    /// One request of `len` bytes on session `i` and its answer of `answer` bytes, online and
    /// on test: the client's segment (acknowledging the online answers so far), then the test
    /// server's answer as a record, which the engine acknowledges. `r` numbers the session's
    /// requests from 0. Returns the engine's packets sent.
    pub fn exchange(&mut self, i: usize, r: u32, len: u32, answer: u32) -> usize {
        let c = client(i as u32);
        let (online, target): (SocketAddr, SocketAddr) =
            (ONLINE.parse().unwrap(), TARGET.parse().unwrap());
        let ts = [TcpOption::Timestamps {
            tsval: 77 + r,
            tsecr: 5,
        }];
        let seq = self.next[i];
        self.next[i] = seq.wrapping_add(len);
        self.sent[i] = self.sent[i].wrapping_add(len + self.grow);
        self.now += Duration::from_micros(50);
        let req = packet(builder(
            c,
            online,
            seq,
            9 + answer * r,
            TcpFlags::ACK | TcpFlags::PSH,
            1024,
            &ts,
            &vec![0x61; len as usize],
        ));
        self.e.handle_captured(self.now, &req);
        let mut sent = 0;
        while self.e.poll_transmit(self.now, &mut self.out).is_some() {
            sent += 1;
        }
        let ans = packet(builder(
            target,
            c,
            TISN + 1 + answer * r,
            seq.wrapping_add(len),
            TcpFlags::ACK | TcpFlags::PSH,
            20_000,
            &ts,
            &vec![0x62; answer as usize],
        ));
        let (_, rec) = Record::from_packet(&ans, 0).unwrap();
        self.now += Duration::from_micros(50);
        self.e.handle_record(self.now, &rec);
        while self.e.poll_transmit(self.now, &mut self.out).is_some() {
            sent += 1;
        }
        sent
    }

    /// The test server acknowledges everything every session sent: the sessions go idle.
    pub fn ack_all(&mut self) {
        for a in 0..self.acks.len() {
            let r = &mut self.acks[a];
            r.headers[28..32].copy_from_slice(&self.sent[a].to_be_bytes());
            self.e.handle_record(self.now, r);
            while let Some(t) = self.e.poll_transmit(self.now, &mut self.out) {
                black_box(t);
            }
        }
    }

    /// Bytes the bench itself holds for its templates (not the engine's).
    pub fn template_bytes(&self) -> usize {
        let data: usize = self.data.iter().map(Vec::capacity).sum();
        let acks: usize = self
            .acks
            .iter()
            .map(|r| r.headers.capacity() + r.payload.capacity() + std::mem::size_of::<Record>())
            .sum();
        data + acks
            + self.data.capacity() * std::mem::size_of::<Vec<u8>>()
            + self.next.capacity() * 4
            + self.out.capacity()
    }

    /// One captured segment of the next session, sent on; every fourth, an ACK record.
    #[inline]
    pub fn step(&mut self) {
        let i = self.i;
        self.i = (self.i + 1) % self.data.len();
        self.n += 1;
        self.now += Duration::from_nanos(100);
        let seq = self.next[i];
        self.next[i] = seq.wrapping_add(self.seg);
        self.sent[i] = self.sent[i].wrapping_add(self.seg + self.grow);
        let p = &mut self.data[i];
        p[24..28].copy_from_slice(&seq.to_be_bytes()); // IPv4 (20) + TCP seq offset (4)
        self.e.handle_captured(self.now, p);
        while let Some(t) = self.e.poll_transmit(self.now, &mut self.out) {
            black_box(t);
        }
        if self.n % 4 == 0 {
            // The test server acks everything one session sent so far: each session gets an
            // ACK for every four of its segments.
            let a = self.a;
            self.a = (self.a + 1) % self.acks.len();
            let r = &mut self.acks[a];
            r.headers[28..32].copy_from_slice(&self.sent[a].to_be_bytes()); // TCP ack offset (8)
            self.e.handle_record(self.now, r);
            while let Some(t) = self.e.poll_transmit(self.now, &mut self.out) {
                black_box(t);
            }
        }
    }
}
