//! Session tests: captured segments and records at explicit times in, packets and control
//! events out. Segments are written from templates (`..SYN` style) and every packet the engine
//! emits is parsed back with `common::wire`, its checksums verified.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::proto::{Record, RegVerdict};
use common::seq::SeqNum;
use common::wire::{parse_tcp_packet, TcpBuilder, TcpFlags, TcpOption};

use super::{Engine, EngineConfig, PortMap, RegEvent};
use crate::engine::pkt::read_options;

mod ack;
mod answer;
mod close;
mod copies;
mod data;
mod gap;
mod h2;
mod handshake;
mod idle;
mod limits;
mod registration;
mod rules;
mod shaped;
mod shutdown;
mod unproven;
mod window;
mod ws;

pub(super) const CLIENT: &str = "203.0.113.7:40000";
pub(super) const ONLINE: &str = "192.0.2.1:80";
pub(super) const TARGET: &str = "198.18.0.2:8080";
/// The client's ISN in the templates.
pub(super) const CISN: u32 = 1_000_000;
/// The online server's ISN (as the client acks it).
pub(super) const OISN: u32 = 7_000_000;
/// The test server's ISN.
pub(super) const TISN: u32 = 50_000;

pub(super) const A: TcpFlags = TcpFlags::ACK;
pub(super) const PA: TcpFlags = TcpFlags(TcpFlags::PSH.0 | TcpFlags::ACK.0);

/// A segment template. `src`/`dst` default to the client -> online direction for captured
/// segments and test server -> test client for records.
#[derive(Debug, Clone)]
pub(super) struct Seg {
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    pub seq: u32,
    pub ack: u32,
    pub flags: TcpFlags,
    pub window: u16,
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub ts: Option<(u32, u32)>,
    pub payload: &'static [u8],
    /// Records only: payload bytes the segment carried (the record keeps none).
    pub data_len: usize,
}

pub(super) const BASE: Seg = Seg {
    src: None,
    dst: None,
    seq: 0,
    ack: 0,
    flags: A,
    window: 65535,
    mss: None,
    wscale: None,
    ts: None,
    payload: &[],
    data_len: 0,
};

/// The client's SYN.
pub(super) const SYN: Seg = Seg {
    seq: CISN,
    flags: TcpFlags::SYN,
    mss: Some(1460),
    wscale: Some(7),
    ..BASE
};
/// The client's handshake ACK.
pub(super) const HS_ACK: Seg = Seg {
    seq: CISN + 1,
    ack: OISN + 1,
    ..BASE
};
/// The test server's SYN-ACK to a connection starting at the client's ISN.
pub(super) const SYN_ACK: Seg = Seg {
    seq: TISN,
    ack: CISN + 1,
    flags: TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0),
    mss: Some(1460),
    wscale: Some(7),
    ..BASE
};

/// Client data at offset `off` (from the first byte after the ISN), acking online byte `oack`.
pub(super) fn data(off: u32, oack: u32, bytes: &[u8]) -> Seg {
    Seg {
        seq: CISN + 1 + off,
        ack: OISN + 1 + oack,
        flags: PA,
        payload: leak(bytes),
        ..BASE
    }
}

/// Test bytes with the lifetime templates need.
pub(super) fn leak(b: &[u8]) -> &'static [u8] {
    Box::leak(b.to_vec().into_boxed_slice())
}

/// A test server record acking client offset `cack`, at its own offset `off`, carrying `len`
/// response bytes.
pub(super) fn resp(off: u32, cack: u32, len: usize) -> Seg {
    Seg {
        seq: TISN + 1 + off,
        ack: CISN + 1 + cack,
        flags: A,
        window: 1000,
        data_len: len,
        ..BASE
    }
}

/// One packet the engine sent, parsed.
#[derive(Debug, Clone)]
pub(super) struct Out {
    pub tuple: FourTuple,
    pub seq: u32,
    pub ack: u32,
    pub flags: TcpFlags,
    pub window: u16,
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub ts: Option<(u32, u32)>,
    pub sack_permitted: bool,
    pub payload: Vec<u8>,
    pub len: usize,
    /// `Transmit::gso_size`.
    pub gso_size: u16,
}

impl Out {
    pub fn has(&self, f: TcpFlags) -> bool {
        self.flags.contains(f)
    }
}

pub(super) struct H {
    pub e: Engine,
    pub t0: Instant,
    pub now: Instant,
    buf: Vec<u8>,
    /// `control()` answers every Register it takes with an intercept's `Accepted` at once (as
    /// a connected intercept would); off, the test gives verdicts itself.
    pub auto_accept: bool,
}

pub(super) fn client() -> SocketAddr {
    CLIENT.parse().unwrap()
}
pub(super) fn target() -> SocketAddr {
    TARGET.parse().unwrap()
}
pub(super) fn test_tuple() -> FourTuple {
    FourTuple::new(client(), target())
}

/// The engine's defaults, but strict lock-step pacing (one request unit in flight), which
/// most session tests are written against; `tests::window` covers the adaptive window.
pub(super) fn cfg() -> EngineConfig {
    EngineConfig {
        maps: vec![PortMap {
            online_ip: None,
            online_port: 80,
            target: target(),
        }],
        pace_window: 1,
        // Every segment acknowledged at once, so tests see each ACK when its record comes;
        // the delayed ACK has its own tests (`ack.rs`).
        ack_delay: std::time::Duration::ZERO,
        // Most templates never show a request answered online (the client's ACK of the
        // answer): unproven sessions have their own tests (`unproven.rs`).
        unproven_timeout: std::time::Duration::from_secs(3600),
        ..EngineConfig::default()
    }
}

pub(super) fn build(s: &Seg, src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let mut opts = Vec::new();
    if let Some(m) = s.mss {
        opts.push(TcpOption::Mss(m));
    }
    if let Some(w) = s.wscale {
        opts.push(TcpOption::WindowScale(w));
    }
    if let Some((tsval, tsecr)) = s.ts {
        opts.push(TcpOption::Timestamps { tsval, tsecr });
    }
    let mut out = Vec::new();
    TcpBuilder {
        src: s.src.unwrap_or(src),
        dst: s.dst.unwrap_or(dst),
        seq: SeqNum(s.seq),
        ack: SeqNum(s.ack),
        flags: s.flags,
        window: s.window,
        options: &opts,
        payload: s.payload,
        ttl: 64,
        ident: 1,
    }
    .emit(&mut out);
    out
}

impl H {
    pub fn new(c: EngineConfig) -> H {
        let t0 = Instant::now();
        H {
            e: Engine::new(c, 7),
            t0,
            now: t0,
            buf: Vec::new(),
            auto_accept: true,
        }
    }

    pub fn default() -> H {
        H::new(cfg())
    }

    /// Move the clock to `ms` after the start.
    pub fn at(&mut self, ms: u64) {
        self.now = self.t0 + Duration::from_millis(ms);
    }

    pub fn ms(&self) -> u64 {
        (self.now - self.t0).as_millis() as u64
    }

    /// Feed a captured client segment.
    pub fn cap(&mut self, s: Seg) {
        let p = build(&s, client(), ONLINE.parse().unwrap());
        self.e.handle_captured(self.now, &p);
    }

    /// Feed a record of a test server segment (to the primary test tuple unless `dst` is set).
    pub fn rec(&mut self, s: Seg) {
        self.rec_to(test_tuple(), s);
    }

    pub fn rec_to(&mut self, t: FourTuple, s: Seg) {
        // Headers only, the IP length field saying how much data followed (as NFQUEUE's copy
        // range would cut it).
        let mut p = build(&s, t.server.into(), t.client.into());
        if p[0] >> 4 == 4 {
            let tl = u16::try_from(p.len() + s.data_len).expect("fits an IPv4 length");
            p[2..4].copy_from_slice(&tl.to_be_bytes());
        } else {
            let pl = u16::try_from(p.len() - 40 + s.data_len).expect("fits an IPv6 length");
            p[4..6].copy_from_slice(&pl.to_be_bytes());
        }
        let (tuple, r) = Record::from_packet(&p, 0).unwrap();
        assert_eq!(r.orig_len as usize, p.len() + s.data_len);
        assert_eq!(
            tuple,
            FourTuple {
                client: s.dst.unwrap_or(t.client.into()).into(),
                server: s.src.unwrap_or(t.server.into()).into()
            }
        );
        assert!(r.payload.is_empty());
        self.e.handle_record(self.now, &r);
    }

    /// Take every control event; with `auto_accept`, answer each Register with `Accepted`.
    pub fn control(&mut self) -> Vec<RegEvent> {
        let v: Vec<RegEvent> = std::iter::from_fn(|| self.e.poll_control()).collect();
        if self.auto_accept {
            for ev in &v {
                if let RegEvent::Register(t) = ev {
                    self.e
                        .handle_registered(self.now, 0, *t, RegVerdict::Accepted);
                }
            }
        }
        v
    }

    /// Feed a captured SYN and the client's handshake ACK after it (same addresses, the next
    /// sequence number, the same timestamp): the handshake completed, the test session starts.
    pub fn syn(&mut self, s: Seg) {
        let ack = Seg {
            seq: s.seq.wrapping_add(1),
            ack: OISN + 1,
            flags: A,
            mss: None,
            wscale: None,
            ..s.clone()
        };
        self.cap(s);
        self.cap(ack);
    }

    /// Take every pending control event, then every packet.
    pub fn out(&mut self) -> Vec<Out> {
        let _ = self.control();
        self.packets()
    }

    /// Every packet, without taking control events first.
    pub fn packets(&mut self) -> Vec<Out> {
        let mut v = Vec::new();
        while let Some(t) = self.e.poll_transmit(self.now, &mut self.buf) {
            assert_eq!(t.len, self.buf.len());
            let p = parse_tcp_packet(&self.buf).expect("engine emits parseable packets");
            assert!(p.tcp_checksum_ok(), "fresh TCP checksum");
            if p.src.is_ipv4() {
                assert!(common::wire::Ipv4Packet::new_checked(&self.buf[..])
                    .unwrap()
                    .verify_checksum());
            }
            let tuple = FourTuple::of_request(&p);
            assert_eq!(tuple, t.tuple);
            assert_eq!(t.dst, tuple.server.ip());
            let o = read_options(p.options());
            let sack_permitted =
                common::wire::tcp_options(p.options()).any(|x| x == Ok(TcpOption::SackPermitted));
            v.push(Out {
                tuple,
                seq: p.tcp.seq().0,
                ack: p.tcp.ack().0,
                flags: p.tcp.flags(),
                window: p.tcp.window(),
                mss: o.mss,
                wscale: o.wscale,
                ts: o.ts,
                sack_permitted,
                payload: p.payload().to_vec(),
                len: self.buf.len(),
                gso_size: t.gso_size,
            });
        }
        v
    }

    /// Advance to the next timer (if it is at most `limit_ms` from the start) and run it.
    pub fn fire(&mut self, limit_ms: u64) -> bool {
        match self.e.poll_timeout() {
            Some(t) if t <= self.t0 + Duration::from_millis(limit_ms) => {
                self.now = self.now.max(t);
                self.e.handle_timeout(self.now);
                true
            }
            _ => false,
        }
    }

    /// Run every timer up to `limit_ms`, sending what they produce: the packets with the time
    /// they left, and the control events.
    pub fn run_timers(&mut self, limit_ms: u64) -> (Vec<(u64, Out)>, Vec<RegEvent>) {
        let (mut outs, mut ctl) = (Vec::new(), Vec::new());
        while self.fire(limit_ms) {
            ctl.extend(self.control());
            for o in self.packets() {
                outs.push((self.ms(), o));
            }
        }
        (outs, ctl)
    }

    /// Run timers (up to `limit_ms`) until something is sent; return it.
    pub fn fire_until_output(&mut self, limit_ms: u64) -> Vec<Out> {
        while self.fire(limit_ms) {
            let o = self.out();
            if !o.is_empty() {
                return o;
            }
        }
        Vec::new()
    }

    /// Establish the standard session: SYN, handshake ACK, SYN-ACK record. Returns the packets
    /// sent for it (SYN, then the handshake ACK).
    pub fn establish(&mut self) -> Vec<Out> {
        self.cap(SYN);
        self.cap(HS_ACK);
        let mut v = self.out();
        self.rec(SYN_ACK);
        v.extend(self.out());
        v
    }
}

/// Concatenate the payloads of data segments, in order of sequence, checking they are
/// contiguous from `from`.
pub(super) fn stream_of(outs: &[Out], from: u32) -> Vec<u8> {
    let mut segs: Vec<&Out> = outs.iter().filter(|o| !o.payload.is_empty()).collect();
    segs.sort_by_key(|o| o.seq.wrapping_sub(from));
    let mut v = Vec::new();
    let mut next = from;
    for o in segs {
        let off = next.wrapping_sub(o.seq) as usize;
        if o.seq.wrapping_sub(next) as i32 > 0 {
            panic!("gap at {next}: next segment starts at {}", o.seq);
        }
        if off < o.payload.len() {
            v.extend_from_slice(&o.payload[off..]);
            next = o.seq.wrapping_add(o.payload.len() as u32);
        }
    }
    v
}
