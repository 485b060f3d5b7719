//! Fuzz the intercept's router with structured input: response packets (IPv4 and IPv6, a few
//! clients among them allowed, local and loopback addresses, guarded and unguarded ports, any
//! flags and sizes), garbage, registrations (plain, and with the answer payload each tuple's
//! records keep: `handle_register_payload`) and unregistrations by three copiers, copiers that
//! go away, and clock steps, with any `--payload-bytes`; checked against a model of what must
//! never happen.
//!
//! Checked after every step:
//! - no panic;
//! - a packet of a tuple that is registered, or was unregistered (or whose copier went away)
//!   less than `linger` ago, is never accepted: it goes to its copier or is dropped;
//! - a delivered record goes to the copier that registered the tuple last, and describes the
//!   packet's tuple; its payload is at most what that registration asked for (0 for a plain
//!   one), what `--payload-bytes` lets through, and what the packet carried; a record released by
//!   a registration keeps at most what that registration asked for;
//! - a registration is accepted only for a guarded port and family; an accepted one routes the
//!   tuple to its copier, a refused one changes nothing;
//! - the hold buffer stays within its capacity.
#![no_main]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use common::flow::FourTuple;
use common::seq::SeqNum;
use common::wire::{TcpBuilder, TcpFlags};
use intercept::allow::{AllowList, IpNet};
use intercept::router::{CopierId, Decision, Guard, Router, RouterConfig};
use libfuzzer_sys::fuzz_target;

const PORTS: [u16; 3] = [80, 443, 8080];
const HOLD_CAPACITY: usize = 16;

#[derive(Arbitrary, Debug)]
struct Input {
    /// Guard only ports 80 and 443 (else every port).
    guard_ports: bool,
    /// Guard IPv6 too.
    ipv6: bool,
    /// Registrations per copier (1..=8).
    max_registrations: u8,
    /// Linger in 100 ms steps (1..=64).
    linger: u8,
    accept_local: bool,
    /// `--payload-bytes` (the NFQUEUE copy range) handed with every packet.
    payload_bytes: u16,
    ops: Vec<Op>,
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// A response from the test server: `server` port index, to client `who`.
    Packet { who: u8, port: u8, flags: u8, len: u16 },
    /// Garbage from NFQUEUE.
    Raw(Vec<u8>),
    Register { copier: u8, who: Vec<(u8, u8)> },
    /// A registration asking for answer payload: (client, port, bytes kept).
    RegisterPayload { copier: u8, who: Vec<(u8, u8, u32)> },
    Unregister { copier: u8, who: Vec<(u8, u8)> },
    Gone { copier: u8 },
    /// Time passes (in 10 ms), then the timers run.
    Tick(u8),
}

fn clients() -> Vec<IpAddr> {
    vec![
        IpAddr::V4(Ipv4Addr::new(198, 19, 0, 5)),   // allowed
        IpAddr::V4(Ipv4Addr::new(198, 19, 0, 6)),   // allowed
        IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7)),  // neither
        IpAddr::V4(Ipv4Addr::new(198, 18, 2, 2)),   // this host
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),    // loopback
        IpAddr::V6("fd00:198:19::5".parse::<Ipv6Addr>().unwrap()), // allowed
        IpAddr::V6("2001:db8::7".parse::<Ipv6Addr>().unwrap()),    // neither
        IpAddr::V6(Ipv6Addr::LOCALHOST),                           // loopback
    ]
}

fn tuple(clients: &[IpAddr], who: u8, port: u8) -> FourTuple {
    let c = clients[usize::from(who) % clients.len()];
    let server = match c {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::new(198, 18, 2, 2)),
        IpAddr::V6(_) => IpAddr::V6("fd00:198:18:2::2".parse().unwrap()),
    };
    FourTuple {
        client: SocketAddr::new(c, 40000 + u16::from(who % 4)).into(),
        server: SocketAddr::new(server, PORTS[usize::from(port) % PORTS.len()]).into(),
    }
}

/// What the model knows of a tuple.
#[derive(Debug, Clone, Copy)]
enum State {
    /// Its copier, and the answer payload its records keep.
    Registered(CopierId, u32),
    /// Unregistered at the router's clock then: blocked until `at + linger`.
    Unregistered { at: Instant },
}

fuzz_target!(|input: Input| {
    let linger = Duration::from_millis(100 * u64::from(input.linger.clamp(1, 64)));
    let guard = Guard { ports: input.guard_ports.then(|| vec![80, 443]), ipv4: true, ipv6: input.ipv6 };
    let mut router = Router::new(RouterConfig {
        allow: AllowList::new(vec![
            IpNet::new(IpAddr::V4(Ipv4Addr::new(198, 19, 0, 0)), 24).unwrap(),
            IpNet::new(IpAddr::V6("fd00:198:19::".parse().unwrap()), 48).unwrap(),
        ]),
        hold_time: Duration::from_millis(500),
        hold_capacity: HOLD_CAPACITY,
        hold_bytes: usize::MAX,
        guard: guard.clone(),
        max_registrations: usize::from(input.max_registrations.clamp(1, 8)),
        linger,
        tombstone_capacity: 1 << 16,
        accept_local: input.accept_local,
        local_servers_only: false,
    });
    router.set_local_addrs([IpAddr::V4(Ipv4Addr::new(198, 18, 2, 2))]);
    let clients = clients();
    let mut model: HashMap<FourTuple, State> = HashMap::new();
    let mut now = Instant::now();
    // The router's clock: the last `now` it was given.
    let mut clock: Option<Instant> = None;
    let mut pkt = Vec::new();
    for op in input.ops.into_iter().take(500) {
        match op {
            Op::Packet { who, port, flags, len } => {
                let t = tuple(&clients, who, port);
                let data = vec![0x5a; usize::from(len) % 2000];
                TcpBuilder {
                    src: t.server.socket(),
                    dst: t.client.socket(),
                    seq: SeqNum(1000),
                    ack: SeqNum(2000),
                    flags: TcpFlags(flags),
                    window: 1000,
                    options: &[],
                    payload: &data,
                    ttl: 64,
                    ident: 1,
                }
                .emit(&mut pkt);
                clock = Some(now);
                let d = router.handle_packet(now, &pkt, usize::from(input.payload_bytes));
                match model.get(&t).copied() {
                    Some(State::Registered(c, want)) => match &d {
                        Decision::Deliver { copier, record } => {
                            assert_eq!(*copier, c, "{t} delivered to {copier}, registered to {c}");
                            assert_eq!(record.tuple().unwrap(), t);
                            let most = (want as usize).min(usize::from(input.payload_bytes)).min(data.len());
                            assert!(record.payload.len() <= most, "{t}: {} payload bytes kept, at most {most}", record.payload.len());
                        }
                        other => panic!("{t} is registered to {c} but the router said {other:?}"),
                    },
                    Some(State::Unregistered { at }) if now < at + linger => {
                        assert!(!d.accepts(), "{t} was unregistered {:?} ago (linger {linger:?}) and was accepted", now - at);
                        assert!(!matches!(d, Decision::Deliver { .. }), "{t} delivered after its unregistration");
                    }
                    _ => assert!(!matches!(d, Decision::Deliver { .. }), "{t} delivered but never registered: {d:?}"),
                }
            }
            Op::Raw(bytes) => {
                clock = Some(now);
                let d = router.handle_packet(now, &bytes, usize::from(input.payload_bytes));
                // Garbage may happen to be a valid packet; it may never be accepted unless it is.
                if d.accepts() {
                    assert!(common::proto::parse_response_headers(&bytes).is_ok());
                }
            }
            Op::Register { copier, who } => {
                let tuples: Vec<(FourTuple, u32)> = who.iter().take(16).map(|&(w, p)| (tuple(&clients, w, p), 0)).collect();
                clock = Some(now);
                register(&mut router, &mut model, &guard, now, copier, &tuples, false);
            }
            Op::RegisterPayload { copier, who } => {
                let tuples: Vec<(FourTuple, u32)> = who.iter().take(16).map(|&(w, p, n)| (tuple(&clients, w, p), n)).collect();
                clock = Some(now);
                register(&mut router, &mut model, &guard, now, copier, &tuples, true);
            }
            Op::Unregister { copier, who } => {
                let c = CopierId(u64::from(copier % 3));
                let tuples: Vec<FourTuple> = who.iter().take(16).map(|&(w, p)| tuple(&clients, w, p)).collect();
                router.handle_unregister(c, &tuples);
                for t in &tuples {
                    if let Some(State::Registered(owner, _)) = model.get(t) {
                        if *owner == c {
                            if let Some(at) = clock {
                                model.insert(*t, State::Unregistered { at });
                            }
                        }
                    }
                }
            }
            Op::Gone { copier } => {
                let c = CopierId(u64::from(copier % 3));
                router.handle_copier_gone(c);
                for s in model.values_mut() {
                    if matches!(s, State::Registered(owner, _) if *owner == c) {
                        if let Some(at) = clock {
                            *s = State::Unregistered { at };
                        }
                    }
                }
            }
            Op::Tick(steps) => {
                now += Duration::from_millis(10 * u64::from(steps));
                clock = Some(now);
                router.handle_timeout(now);
            }
        }
        assert!(router.stats().holding as usize <= HOLD_CAPACITY);
        assert!(router.quiet().held <= HOLD_CAPACITY);
    }
});

/// A registration (plain: `payload` false, every amount 0) checked against the model.
fn register(
    router: &mut Router,
    model: &mut HashMap<FourTuple, State>,
    guard: &Guard,
    now: Instant,
    copier: u8,
    tuples: &[(FourTuple, u32)],
    payload: bool,
) {
    let c = CopierId(u64::from(copier % 3));
    let reg = if payload {
        router.handle_register_payload(now, c, tuples)
    } else {
        let plain: Vec<FourTuple> = tuples.iter().map(|&(t, _)| t).collect();
        router.handle_register(now, c, &plain)
    };
    assert_eq!(reg.verdicts.len(), tuples.len());
    for ((t, want), v) in tuples.iter().zip(&reg.verdicts) {
        if v.accepted() {
            assert!(guard.verdict(t).accepted(), "{t} accepted outside the guard ({guard})");
            model.insert(*t, State::Registered(c, *want));
        }
        // Refused: the model (and the router) keep what they had.
        match model.get(t) {
            Some(State::Registered(owner, _)) => assert_eq!(router.route(t), Some(*owner)),
            _ => assert_eq!(router.route(t), None),
        }
    }
    for (c2, r) in &reg.released {
        assert_eq!(*c2, c);
        let t = r.tuple().unwrap();
        // (a tuple may be in a registration twice: the most asked for it)
        let want = tuples.iter().filter(|(u, _)| *u == t).map(|&(_, n)| n).max();
        assert!(want.is_some(), "{t} released but not in the registration");
        let want = want.unwrap() as usize;
        assert!(r.payload.len() <= want, "{t}: released with {} payload bytes, {want} asked", r.payload.len());
    }
}
