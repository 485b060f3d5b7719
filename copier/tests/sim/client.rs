//! Simulated clients: what the copier captures of one client's connection to the online
//! service (its SYN, handshake ACK, requests cut into segments of any size, its ACKs of the
//! online answers, its FIN or RST), with the capture's own duplication, reordering and
//! repacketised retransmissions, and which requests the test server should therefore receive.
//!
//! The test server's answer to a request is as long as the online one, longer, shorter or
//! empty ([`Answer`]); a client may end with a RST after its last answer or right after its
//! last request, without waiting for the answer (as load generators do). Every request must
//! reach the test server whatever the ending.

use std::net::SocketAddr;
use std::time::Duration;

use common::seq::SeqNum;
use common::wire::{TcpBuilder, TcpFlags, TcpOption};
use rand::rngs::SmallRng;
use rand::Rng;

use super::model::request_bytes;

/// How the test server's answer compares with the online one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Same,
    Longer,
    Shorter,
    Empty,
}

/// How the client ends its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Fin,
    /// RST once the last answer is in (and acked).
    RstAfterAnswer,
    /// RST right after the last request, its answer not awaited.
    RstAfterRequest,
}

#[derive(Debug, Clone)]
pub struct Req {
    pub len: u32,
    /// Size of the test server's answer.
    pub resp_len: u32,
    /// Size of the online server's answer.
    pub online_resp: u32,
    pub answer: Answer,
    /// Sent right after the previous one, before its answer (pipelined).
    pub pipelined: bool,
}

#[derive(Debug, Clone)]
pub struct Client {
    pub id: u32,
    pub addr: SocketAddr,
    pub online: SocketAddr,
    pub isn: u32,
    pub oisn: u32,
    pub ts: Option<u32>,
    pub reqs: Vec<Req>,
    /// Online greeting size (server speaks first).
    pub greeting: u32,
    /// Capture starts in the middle of this request.
    pub midstream: Option<usize>,
    pub end: End,
    /// Keep-alive limit of the test server for this client's connections.
    pub server_limit: Option<u32>,
    pub start: Duration,
}

/// What the capture sees of a client, and what the test server must get.
#[derive(Debug)]
pub struct Script {
    pub packets: Vec<(Duration, Vec<u8>)>,
    /// Request indices the test server must serve, in order.
    pub expected: Vec<u32>,
    /// Whether the session is expected at all (a mid-stream session may never synchronise).
    pub copied: bool,
}

pub fn random_client(rng: &mut SmallRng, id: u32, start: Duration, limits: bool) -> Client {
    let greeting = if rng.random_bool(0.15) {
        rng.random_range(10..200)
    } else {
        0
    };
    let n = rng.random_range(1..8usize);
    let midstream =
        (greeting == 0 && n >= 3 && rng.random_bool(0.15)).then(|| rng.random_range(0..n - 2));
    let pipelining = midstream.is_none() && rng.random_bool(0.2);
    let reqs: Vec<Req> = (0..n)
        .map(|k| {
            let big = rng.random_bool(0.1);
            let online_resp = if rng.random_bool(0.1) {
                rng.random_range(50_000..300_000)
            } else {
                rng.random_range(1..5000)
            };
            let answer = match rng.random_range(0..100) {
                0..50 => Answer::Same,
                50..72 => Answer::Longer,
                72..95 => Answer::Shorter,
                _ => Answer::Empty,
            };
            let resp_len = match answer {
                Answer::Same => online_resp,
                Answer::Longer => {
                    let k = rng.random_range(1..20);
                    online_resp + rng.random_range(1..=(online_resp.max(2) * k).min(1 << 20))
                }
                Answer::Shorter => rng.random_range(1..=online_resp.max(2) - 1),
                Answer::Empty => 0,
            };
            Req {
                len: if big {
                    rng.random_range(20_000..200_000)
                } else {
                    rng.random_range(18..3000)
                },
                resp_len,
                online_resp,
                answer,
                pipelined: pipelining && k > 0 && rng.random_bool(0.5),
            }
        })
        .collect();
    // A test server that closes after N requests, but not where "did it take the request
    // before closing?" has no answer: pipelined requests, or requests without any answer.
    let server_limit =
        (limits && !pipelining && reqs.iter().all(|r| r.resp_len > 0) && rng.random_bool(0.25))
            .then(|| rng.random_range(1..4));
    let octet = |r: &mut SmallRng| r.random_range(1..255u8);
    Client {
        id,
        addr: SocketAddr::from((
            [10, octet(rng), octet(rng), octet(rng)],
            rng.random_range(1024..65535),
        )),
        online: if greeting > 0 {
            "192.0.2.1:25".parse().unwrap()
        } else {
            "192.0.2.1:80".parse().unwrap()
        },
        isn: rng.random(),
        oisn: rng.random(),
        ts: rng.random_bool(0.7).then(|| rng.random()),
        reqs,
        greeting,
        midstream,
        end: match rng.random_range(0..100) {
            0..10 => End::RstAfterAnswer,
            10..25 => End::RstAfterRequest,
            _ => End::Fin,
        },
        server_limit,
        start,
    }
}

struct Gen<'a> {
    c: &'a Client,
    rng: &'a mut SmallRng,
    t: Duration,
    packets: Vec<(Duration, Vec<u8>, Meta)>,
}

#[derive(Debug, Clone, Copy)]
struct Meta {
    seq: u32,
    ack: u32,
    /// Request index whose first byte this segment carries.
    starts_req: Option<u32>,
    data: bool,
    /// Sequence number after the payload.
    end: u32,
}

impl Gen<'_> {
    fn emit(
        &mut self,
        seq: u32,
        ack: u32,
        flags: TcpFlags,
        payload: &[u8],
        starts_req: Option<u32>,
    ) {
        let mut opts = Vec::new();
        if flags.contains(TcpFlags::SYN) {
            opts.push(TcpOption::Mss(1460));
            opts.push(TcpOption::WindowScale(7));
        }
        if let Some(base) = self.c.ts {
            opts.push(TcpOption::Timestamps {
                tsval: base.wrapping_add(self.t.as_millis() as u32),
                tsecr: 77,
            });
        }
        let mut out = Vec::new();
        TcpBuilder {
            src: self.c.addr,
            dst: self.c.online,
            seq: SeqNum(seq),
            ack: SeqNum(ack),
            flags,
            window: 1024,
            options: &opts,
            payload,
            ttl: 64,
            ident: 0,
        }
        .emit(&mut out);
        self.packets.push((
            self.t,
            out,
            Meta {
                seq,
                ack,
                starts_req,
                data: !payload.is_empty(),
                end: seq.wrapping_add(payload.len() as u32),
            },
        ));
    }

    fn step(&mut self, lo_us: u64, hi_us: u64) {
        self.t += Duration::from_micros(self.rng.random_range(lo_us..=hi_us));
    }
}

/// `capture_drop`: the probability that the capture loses one data segment of the client (a
/// hole the client never fills: the online server got it). Only for plain clients (from the
/// SYN, no greeting, no pipelining, no server limit, ending with a FIN), where the requests
/// the copy must carry follow from the engine's rule: the damaged request goes, and the copy
/// resumes at the first captured segment that directly follows another captured one after the
/// hole and acks more than it (or at the FIN).
pub fn script(c: &Client, rng: &mut SmallRng, capture_drop: f64) -> Script {
    let mut g = Gen {
        c,
        rng,
        t: c.start,
        packets: Vec::new(),
    };
    let a = TcpFlags::ACK;
    let pa = TcpFlags::ACK | TcpFlags::PSH;
    g.emit(c.isn, 0, TcpFlags::SYN, &[], None);
    g.step(500, 3000);
    let mut ack = c.oisn.wrapping_add(1);
    let mut seq = c.isn.wrapping_add(1);
    g.emit(seq, ack, a, &[], None);
    if c.greeting > 0 {
        g.step(500, 2000);
        ack = ack.wrapping_add(c.greeting);
        g.emit(seq, ack, a, &[], None);
    }
    let mut unanswered = 0u32;
    for (k, r) in c.reqs.iter().enumerate() {
        if !r.pipelined && unanswered > 0 {
            // The online answers arrive: the client acks them, thinks, goes on.
            g.step(1000, 5000);
            ack = ack.wrapping_add(unanswered);
            g.emit(seq, ack, a, &[], None);
            unanswered = 0;
            g.step(0, 100_000);
        }
        let bytes = request_bytes(c.id, k as u32, r.len, r.resp_len);
        let mut off = 0;
        let mut first = true;
        while off < bytes.len() {
            let n = if g.rng.random_bool(0.08) {
                g.rng.random_range(2000..30_000)
            } else {
                g.rng.random_range(1..=1448)
            };
            let n = n.min(bytes.len() - off);
            let starts = first.then_some(k as u32);
            g.emit(
                seq.wrapping_add(off as u32),
                ack,
                pa,
                &bytes[off..off + n],
                starts,
            );
            first = false;
            off += n;
            g.step(50, 400);
        }
        seq = seq.wrapping_add(bytes.len() as u32);
        unanswered += r.online_resp;
    }
    if c.end == End::RstAfterRequest {
        // Done: the connection is reset with the last answer still on its way.
        g.step(100, 2000);
        g.emit(seq, 0, TcpFlags::RST, &[], None);
    } else {
        g.step(1000, 5000);
        ack = ack.wrapping_add(unanswered);
        g.emit(seq, ack, a, &[], None);
        g.step(1000, 50_000);
        if c.end == End::RstAfterAnswer {
            g.emit(seq, 0, TcpFlags::RST, &[], None);
        } else {
            g.emit(seq, ack, TcpFlags::FIN | TcpFlags::ACK, &[], None);
        }
    }

    // Which requests the copy must carry.
    let mut packets = g.packets;
    let plain = c.midstream.is_none()
        && c.greeting == 0
        && c.end == End::Fin
        && c.server_limit.is_none()
        && c.reqs.iter().all(|r| !r.pipelined);
    let mut gap_expected = None;
    if capture_drop > 0.0 && plain && rng.random_bool(capture_drop) {
        let data: Vec<usize> = (0..packets.len()).filter(|&i| packets[i].2.data).collect();
        let j = data[rng.random_range(0..data.len())];
        let k = (0..=j).rev().find_map(|i| packets[i].2.starts_req).unwrap();
        let after: Vec<usize> = data.iter().copied().filter(|&i| i > j).collect();
        let resume = after
            .windows(2)
            .find(|w| (packets[w[1]].2.ack.wrapping_sub(packets[w[0]].2.ack) as i32) > 0)
            .map(|w| w[1]);
        let n = c.reqs.len() as u32;
        let mut exp: Vec<u32> = (0..k).collect();
        if let Some(r) = resume {
            let r = packets[r]
                .2
                .starts_req
                .expect("an ACK moves on only at a request start");
            exp.extend(r..n);
        }
        packets.remove(j);
        gap_expected = Some(exp);
    }
    let (expected, copied) = match c.midstream {
        None if gap_expected.is_some() => (gap_expected.unwrap_or_default(), true),
        None => ((0..c.reqs.len() as u32).collect(), true),
        Some(m) => {
            // Capture begins after the first segment of request m; the engine starts at the
            // first later packet whose ACK number moved past the first captured one's.
            let first = packets
                .iter()
                .position(|p| p.2.starts_req == Some(m as u32))
                .unwrap()
                + 1;
            packets.drain(..first);
            let a0 = packets[0].2.ack;
            let sync = packets
                .iter()
                .find(|p| (p.2.ack.wrapping_sub(a0) as i32) > 0)
                .map(|p| p.2.seq);
            match sync {
                None => (Vec::new(), false),
                Some(s) => {
                    let exp = packets
                        .iter()
                        .filter(|p| {
                            p.2.data
                                && p.2.starts_req.is_some()
                                && p.2.seq.wrapping_sub(s) as i32 >= 0
                        })
                        .map(|p| p.2.starts_req.unwrap())
                        .collect();
                    (exp, true)
                }
            }
        }
    };

    // The capture's own disorder (not for mid-stream clients: their first packets decide
    // where the session starts).
    let mut out: Vec<(Duration, Vec<u8>)> = Vec::new();
    let disorder = c.midstream.is_none();
    let mut prev: Option<(Duration, Vec<u8>, Meta)> = None;
    for (t, p, m) in packets {
        let t2 = if disorder && m.data {
            t + Duration::from_micros(rng.random_range(0..1500))
        } else {
            t
        };
        if disorder && m.data && rng.random_bool(0.03) {
            out.push((
                t2 + Duration::from_micros(rng.random_range(1000..8000)),
                p.clone(),
            ));
        }
        if disorder && m.data && rng.random_bool(0.03) {
            // A retransmission repacketised over the previous segment and this one.
            if let Some((_, pp, pm)) = prev
                .as_ref()
                .filter(|x| x.2.data && x.2.ack == m.ack && x.2.end == m.seq)
            {
                let merged = merge(c, pp, &p, pm.seq, m.ack);
                out.push((
                    t2 + Duration::from_micros(rng.random_range(2000..9000)),
                    merged,
                ));
            }
        }
        out.push((t2, p.clone()));
        prev = Some((t, p, m));
    }
    out.sort_by_key(|x| x.0);
    if c.end != End::Fin {
        // A RST ends the connection online too: what the server got after it does not count.
        // So the capture's disorder must not move data past the RST (the RST is the last
        // packet the client sends).
        let (t_rst, rst) = out
            .iter()
            .position(|p| is_rst(&p.1))
            .map(|i| out.remove(i))
            .expect("the RST");
        let last = out.last().map_or(t_rst, |p| p.0);
        out.push((t_rst.max(last + Duration::from_micros(100)), rst));
    }
    Script {
        packets: out,
        expected,
        copied,
    }
}

fn is_rst(pkt: &[u8]) -> bool {
    common::wire::parse_tcp_packet(pkt).is_ok_and(|p| p.tcp.flags().contains(TcpFlags::RST))
}

/// One segment carrying the payloads of two consecutive captured packets.
fn merge(c: &Client, a: &[u8], b: &[u8], seq: u32, ack: u32) -> Vec<u8> {
    let pa = common::wire::parse_tcp_packet(a).unwrap();
    let pb = common::wire::parse_tcp_packet(b).unwrap();
    let mut payload = pa.payload().to_vec();
    payload.extend_from_slice(pb.payload());
    let opts: Vec<TcpOption> = common::wire::tcp_options(pb.options()).flatten().collect();
    let mut out = Vec::new();
    TcpBuilder {
        src: c.addr,
        dst: c.online,
        seq: SeqNum(seq),
        ack: SeqNum(ack),
        flags: TcpFlags::ACK | TcpFlags::PSH,
        window: 1024,
        options: &opts,
        payload: &payload,
        ttl: 64,
        ident: 0,
    }
    .emit(&mut out);
    out
}
