//! A model test server: a small TCP endpoint per connection (SYN-ACK with its own ISN,
//! in-order receive with a fixed window, immediate ACKs, RFC 5961 RST checks with challenge
//! ACKs, PAWS on timestamps, retransmission of what it sent, a fixed congestion window so that
//! long answers stream over several round trips, FIN in every order) under an
//! application that parses the simulation's self-describing requests, checks their bytes,
//! answers each with the size the request asks for after a think time (up to `think_max`),
//! and optionally greets first or closes after N requests (keep-alive limit).
//!
//! It records what it received (per client id, the request indices in the order it served
//! them) and everything the engine did wrong by TCP's rules (`errors`).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use common::seq::SeqNum;
use common::wire::{parse_tcp_packet, tcp_options, TcpBuilder, TcpFlags, TcpOption};

/// Bytes of a request header: magic, client id, request index, length, response length.
pub const REQ_HDR: usize = 18;
pub const MAGIC: [u8; 2] = *b"RQ";

/// The body byte `j` of request `idx` of client `id`.
pub fn body_byte(id: u32, idx: u32, j: usize) -> u8 {
    (id.wrapping_mul(31) ^ idx.wrapping_mul(17) ^ (j as u32).wrapping_mul(7) ^ (j as u32 >> 8))
        as u8
}

pub fn request_bytes(id: u32, idx: u32, len: u32, resp_len: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(len as usize);
    v.extend_from_slice(&MAGIC);
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(&idx.to_be_bytes());
    v.extend_from_slice(&len.to_be_bytes());
    v.extend_from_slice(&resp_len.to_be_bytes());
    for j in REQ_HDR..len as usize {
        v.push(body_byte(id, idx, j));
    }
    v
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum St {
    SynRcvd,
    Established,
    CloseWait,
    LastAck,
    FinWait1,
    FinWait2,
    Closing,
    TimeWait,
    Closed,
    /// Reset by a RST of the engine.
    Reset,
    /// Gave up retransmitting: a half-open connection the engine left behind.
    GaveUp,
}

impl St {
    /// States a connection may be left in at the end.
    pub fn is_final(self) -> bool {
        matches!(self, St::TimeWait | St::Closed | St::Reset)
    }
}

#[derive(Debug)]
pub struct MConn {
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub st: St,
    iss: SeqNum,
    snd_una: SeqNum,
    snd_nxt: SeqNum,
    /// End of the response bytes queued (FIN, if any, at this number).
    snd_end: SeqNum,
    fin_queued: bool,
    irs: SeqNum,
    rcv_nxt: SeqNum,
    rcv_wnd: u32,
    peer_wscale: u8,
    peer_wnd: u32,
    mss: u32,
    ts_on: bool,
    ts_recent: u32,
    app: Vec<u8>,
    ooo: Vec<(SeqNum, Vec<u8>, bool)>,
    served: u32,
    /// Answers being prepared: when each is ready, and its size (in order).
    pending: VecDeque<(Instant, u32)>,
    limit: Option<u32>,
    app_closed: bool,
    rto_at: Option<Instant>,
    retries: u32,
    tw_until: Option<Instant>,
    ack_now: bool,
    pub client_id: Option<u32>,
}

#[derive(Debug, Default)]
pub struct Model {
    pub conns: Vec<MConn>,
    pub table: HashMap<(SocketAddr, SocketAddr), usize>,
    /// Packets the model sends (to the intercept).
    pub out: Vec<Vec<u8>>,
    /// Listening ports and their greeting size (0: the client speaks first).
    pub listeners: HashMap<u16, u32>,
    /// Keep-alive limit per client id.
    pub limits: HashMap<u32, u32>,
    /// Whether a connection whose application closed reads and discards what still comes (a
    /// lingering close, as HTTP servers do) instead of answering it with RST (and losing the
    /// answers it had not sent yet).
    pub linger_close: bool,
    /// Request indices served, per client id, in order.
    pub delivered: HashMap<u32, Vec<u32>>,
    /// The same per client id and test client address (one address per copy of a session
    /// when the copier rewrites into a pool with `copies` > 1).
    pub delivered_by_addr: HashMap<(u32, IpAddr), Vec<u32>>,
    pub errors: Vec<String>,
    pub window_violations: u64,
    pub paws_drops: u64,
    /// The engine's FIN (the client's) arrived while this server had not finished answering:
    /// a real server may abort the answer (nginx logs 499).
    pub fin_before_answered: u64,
    pub rng_state: u64,
    /// Longest think time of the application before an answer.
    pub think_max: Duration,
    pub now: Option<Instant>,
    /// Start of simulated time (for the model's own timestamps).
    pub t0: Option<Instant>,
    /// ISNs of connections that ended, per tuple: a late duplicate of their SYN is ignored.
    pub closed_irs: HashMap<(SocketAddr, SocketAddr), SeqNum>,
}

const RTO: Duration = Duration::from_millis(200);
/// Bytes in flight at most (a fixed congestion window).
const CWND: u32 = 16 << 10;
const TIME_WAIT: Duration = Duration::from_secs(2);
const MAX_RETRIES: u32 = 8;

impl Model {
    fn rand(&mut self) -> u64 {
        self.rng_state = self
            .rng_state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.rng_state >> 33
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns
            .iter()
            .filter_map(|c| {
                let t = match (c.rto_at, c.tw_until) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                let ready = c
                    .pending
                    .front()
                    .filter(|_| !matches!(c.st, St::Closed | St::Reset | St::GaveUp))
                    .map(|p| p.0);
                match (t, ready) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            })
            .min()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = Some(now);
        for i in 0..self.conns.len() {
            let c = &mut self.conns[i];
            if c.pending.front().is_some_and(|p| p.0 <= now)
                && !matches!(c.st, St::Closed | St::Reset | St::GaveUp)
            {
                self.settle(i, now);
                self.flush(i, now, false);
            }
            let c = &mut self.conns[i];
            if c.tw_until.is_some_and(|t| t <= now) {
                c.tw_until = None;
                c.st = St::Closed;
                let key = (c.client, c.server);
                if self.table.get(&key) == Some(&i) {
                    self.forget(key);
                }
                continue;
            }
            if c.rto_at.is_some_and(|t| t <= now) {
                c.retries += 1;
                if c.retries > MAX_RETRIES {
                    let what = format!(
                        "{} -> {} gave up in {:?} (client {:?})",
                        c.client, c.server, c.st, c.client_id
                    );
                    c.st = St::GaveUp;
                    c.rto_at = None;
                    self.errors.push(what);
                    let key = (c.client, c.server);
                    self.forget(key);
                    continue;
                }
                c.snd_nxt = c.snd_una;
                c.rto_at = Some(now + RTO * (1 << c.retries.min(6)));
                self.flush(i, now, true);
            }
        }
    }

    /// One packet from the engine.
    pub fn handle_packet(&mut self, now: Instant, pkt: &[u8]) {
        self.now = Some(now);
        let p = match parse_tcp_packet(pkt) {
            Ok(p) => p,
            Err(e) => {
                self.errors
                    .push(format!("unparseable packet from the engine: {e}"));
                return;
            }
        };
        if !p.tcp_checksum_ok() {
            self.errors.push("bad TCP checksum from the engine".into());
            return;
        }
        let client = p.src_socket();
        let server = p.dst_socket();
        let t = &p.tcp;
        let flags = t.flags();
        let (seq, ack) = (t.seq(), t.ack());
        let payload = p.payload();
        let mut tsval = None;
        let mut mss = None;
        let mut wscale = None;
        for o in tcp_options(t.options()).flatten() {
            match o {
                TcpOption::Timestamps { tsval: v, .. } => tsval = Some(v),
                TcpOption::Mss(m) => mss = Some(m),
                TcpOption::WindowScale(w) => wscale = Some(w),
                TcpOption::SackPermitted => self.errors.push("SACK offered".into()),
                _ => {}
            }
        }
        let Some(&greeting) = self.listeners.get(&server.port()) else {
            self.errors
                .push(format!("packet to a closed port {server}"));
            return;
        };
        let key = (client, server);
        let idx = self.table.get(&key).copied();
        if flags.contains(TcpFlags::SYN) {
            if flags.contains(TcpFlags::ACK) {
                self.errors.push("SYN-ACK from the engine".into());
                return;
            }
            if self.closed_irs.get(&key) == Some(&seq) {
                return; // a late duplicate of an old connection's SYN
            }
            match idx.map(|i| self.conns[i].st) {
                Some(_)
                    if self.conns[idx.unwrap()].irs == seq
                        && self.conns[idx.unwrap()].st != St::SynRcvd =>
                {
                    return; // a duplicate SYN of this connection
                }
                Some(St::SynRcvd) if self.conns[idx.unwrap()].irs == seq => {
                    // SYN again: SYN-ACK again.
                    let i = idx.unwrap();
                    self.conns[i].snd_nxt = self.conns[i].iss;
                    self.flush(i, now, true);
                    return;
                }
                Some(st) if !matches!(st, St::TimeWait | St::Closed | St::Reset | St::GaveUp) => {
                    self.errors.push(format!(
                        "SYN on a live connection {client} -> {server} ({st:?})"
                    ));
                    return;
                }
                _ => {}
            }
            let iss = SeqNum(self.rand() as u32);
            let wnd = [2920u32, 8192, 65535][(self.rand() % 3) as usize];
            let c = MConn {
                client,
                server,
                st: St::SynRcvd,
                iss,
                snd_una: iss,
                snd_nxt: iss,
                snd_end: iss.add(1),
                fin_queued: false,
                irs: seq,
                rcv_nxt: seq.add(1),
                rcv_wnd: wnd,
                peer_wscale: wscale.unwrap_or(0).min(14),
                peer_wnd: u32::from(t.window()),
                mss: u32::from(mss.unwrap_or(536)).min(1460),
                ts_on: tsval.is_some(),
                ts_recent: tsval.unwrap_or(0),
                app: Vec::new(),
                ooo: Vec::new(),
                served: 0,
                pending: VecDeque::new(),
                limit: None,
                app_closed: false,
                rto_at: None,
                retries: 0,
                tw_until: None,
                ack_now: false,
                client_id: None,
            };
            if wscale.is_none() {
                self.errors.push("SYN without window scale".into());
            }
            self.conns.push(c);
            let i = self.conns.len() - 1;
            self.table.insert(key, i);
            self.flush(i, now, true);
            return;
        }
        let Some(i) = idx else {
            if !flags.contains(TcpFlags::RST) {
                // No socket: a stack answers with RST.
                self.send_raw(server, client, ack, SeqNum(0), TcpFlags::RST, 0, &[], None);
            }
            return;
        };
        let c = &mut self.conns[i];
        if matches!(c.st, St::Closed | St::Reset | St::GaveUp) {
            return;
        }
        if flags.contains(TcpFlags::RST) {
            let exact = seq == c.rcv_nxt || (c.st == St::SynRcvd && seq == c.irs.add(1));
            if exact {
                c.st = St::Reset;
                c.rto_at = None;
                c.tw_until = None;
                self.forget(key);
            } else if seq.in_window(c.rcv_nxt, c.rcv_wnd) {
                c.ack_now = true; // challenge ACK
                self.flush(i, now, false);
            }
            return;
        }
        // PAWS
        if c.ts_on {
            match tsval {
                None => self
                    .errors
                    .push("segment without timestamps on a timestamped connection".into()),
                Some(v) if SeqNum(v).add(1).lt(SeqNum(c.ts_recent)) => {
                    // Linux's PAWS tolerates a TSval one below ts_recent (TCP_PAWS_WINDOW).
                    let end =
                        seq.add(payload.len() as u32 + u32::from(flags.contains(TcpFlags::FIN)));
                    if end.gt(c.rcv_nxt) {
                        // New bytes with an older timestamp than one already taken in order.
                        self.paws_drops += 1;
                        if std::env::var("SIM_DEBUG").is_ok() {
                            println!(
                                "PAWS {client} seq {seq} len {} ts {v} recent {} rcv_nxt {}",
                                payload.len(),
                                c.ts_recent,
                                c.rcv_nxt
                            );
                        }
                    }
                    c.ack_now = true;
                    self.flush(i, now, false);
                    return;
                }
                Some(v) => {
                    if seq.le(c.rcv_nxt) {
                        c.ts_recent = v;
                    }
                }
            }
        }
        if !flags.contains(TcpFlags::ACK) {
            return;
        }
        if c.st == St::SynRcvd {
            if ack != c.iss.add(1) {
                self.send_raw(server, client, ack, SeqNum(0), TcpFlags::RST, 0, &[], None);
                return;
            }
            c.st = St::Established;
            c.snd_una = ack;
            c.snd_nxt = c.snd_nxt.max(ack);
            c.retries = 0;
            c.rto_at = None;
            if greeting > 0 {
                c.snd_end = c.snd_end.add(greeting);
            }
        }
        // ACK of our data / FIN
        if ack.gt(c.snd_una) && ack.le(c.snd_nxt) {
            c.snd_una = ack;
            c.retries = 0;
            c.rto_at = if c.snd_una == c.snd_nxt {
                None
            } else {
                Some(now + RTO)
            };
            let fin_acked = c.fin_queued && ack == c.snd_end.add(1);
            if fin_acked {
                match c.st {
                    St::FinWait1 => c.st = St::FinWait2,
                    St::Closing => {
                        c.st = St::TimeWait;
                        c.tw_until = Some(now + TIME_WAIT);
                    }
                    St::LastAck => {
                        c.st = St::Closed;
                        self.forget(key);
                        return;
                    }
                    _ => {}
                }
            }
        } else if ack.gt(c.snd_nxt) && ack.gt(c.snd_una) {
            self.errors.push(format!(
                "ack {ack} beyond what the server sent ({})",
                c.snd_nxt
            ));
        }
        c.peer_wnd = u32::from(t.window()) << c.peer_wscale;
        let c = &mut self.conns[i];
        // Data
        let fin = flags.contains(TcpFlags::FIN);
        let len = payload.len() as u32;
        if len > 0 || fin {
            c.ack_now = true;
            let end = seq.add(len);
            if end.gt(c.rcv_nxt.add(c.rcv_wnd)) {
                self.window_violations += 1;
            }
            if seq.gt(c.rcv_nxt) {
                // Out of order: held, as a real stack would (within the window).
                if seq.diff(c.rcv_nxt) < c.rcv_wnd as i32 && c.ooo.len() < 256 {
                    c.ooo.push((seq, payload.to_vec(), fin));
                }
            } else if !self.accept(i, now, seq, payload, fin) {
                return;
            }
            loop {
                let c = &mut self.conns[i];
                let Some(k) = c.ooo.iter().position(|x| x.0.le(c.rcv_nxt)) else {
                    break;
                };
                let (s, d, f) = c.ooo.swap_remove(k);
                if !self.accept(i, now, s, &d, f) {
                    return;
                }
            }
            self.app(i, now);
        }
        self.flush(i, now, false);
    }

    fn forget(&mut self, key: (SocketAddr, SocketAddr)) {
        if let Some(i) = self.table.remove(&key) {
            self.closed_irs.insert(key, self.conns[i].irs);
        }
    }

    /// Take in-order bytes (and FIN) starting at or before `rcv_nxt`. False if the connection
    /// was reset (data for a closed socket).
    fn accept(
        &mut self,
        i: usize,
        now: Instant,
        seq: SeqNum,
        payload: &[u8],
        mut fin: bool,
    ) -> bool {
        let c = &mut self.conns[i];
        let end = seq.add(payload.len() as u32);
        if end.lt(c.rcv_nxt) || (end == c.rcv_nxt && !fin) {
            return true; // old
        }
        let skip = c.rcv_nxt.diff(seq) as usize;
        let room = c.rcv_wnd as usize;
        let take = (payload.len() - skip.min(payload.len())).min(room);
        if take < payload.len() - skip.min(payload.len()) {
            fin = false;
        }
        let data = &payload[skip.min(payload.len())..skip.min(payload.len()) + take];
        if !data.is_empty() {
            if c.app_closed && !self.linger_close {
                // Data for a closed socket: RST.
                let (s, a) = (c.snd_nxt, c.rcv_nxt.add(take as u32));
                let (server, client) = (c.server, c.client);
                c.st = St::Reset;
                c.rto_at = None;
                self.forget((client, server));
                self.send_raw(
                    server,
                    client,
                    s,
                    a,
                    TcpFlags::RST | TcpFlags::ACK,
                    0,
                    &[],
                    None,
                );
                return false;
            }
            if matches!(
                c.st,
                St::CloseWait | St::LastAck | St::Closing | St::TimeWait
            ) {
                let e = format!("data after the client's FIN on {}", c.client);
                self.errors.push(e);
                return true;
            }
            c.rcv_nxt = c.rcv_nxt.add(take as u32);
            if !c.app_closed {
                c.app.extend_from_slice(data);
            }
            // (A lingering close, RFC 9112 9.6: what comes after the close is read and discarded.)
        }
        let c = &mut self.conns[i];
        if fin && c.rcv_nxt == end {
            let answer_end = if c.fin_queued {
                c.snd_end
            } else {
                c.snd_end.max(c.snd_nxt)
            };
            if (c.snd_una.lt(answer_end) || !c.pending.is_empty()) && !c.app_closed {
                self.fin_before_answered += 1;
            }
            let c = &mut self.conns[i];
            c.rcv_nxt = c.rcv_nxt.add(1);
            match c.st {
                St::Established => c.st = St::CloseWait,
                St::FinWait1 => c.st = St::Closing,
                St::FinWait2 => {
                    c.st = St::TimeWait;
                    c.tw_until = Some(now + TIME_WAIT);
                }
                St::TimeWait => c.tw_until = Some(now + TIME_WAIT),
                _ => {}
            }
        }
        true
    }

    /// The application: serve complete requests, close when told to.
    fn app(&mut self, i: usize, now: Instant) {
        loop {
            let c = &mut self.conns[i];
            if c.app_closed || c.app.len() < REQ_HDR {
                break;
            }
            if c.app[..2] != MAGIC {
                let e = format!(
                    "bad request header on {} -> {}: {:02x?}",
                    c.client,
                    c.server,
                    &c.app[..REQ_HDR]
                );
                c.app.clear();
                self.errors.push(e);
                break;
            }
            let f =
                |o: usize| u32::from_be_bytes([c.app[o], c.app[o + 1], c.app[o + 2], c.app[o + 3]]);
            let (id, idx, len, resp) = (f(2), f(6), f(10), f(14));
            if c.app.len() < len as usize {
                break;
            }
            let bad = (REQ_HDR..len as usize).find(|&j| c.app[j] != body_byte(id, idx, j));
            c.app.drain(..len as usize);
            if let Some(j) = bad {
                self.errors
                    .push(format!("client {id} request {idx}: byte {j} differs"));
            }
            c.client_id = Some(id);
            if c.limit.is_none() {
                c.limit = self.limits.get(&id).copied();
            }
            let addr = c.client.ip();
            self.delivered.entry(id).or_default().push(idx);
            self.delivered_by_addr
                .entry((id, addr))
                .or_default()
                .push(idx);
            let think =
                Duration::from_micros(self.rand() % (self.think_max.as_micros() as u64 + 1));
            let c = &mut self.conns[i];
            let ready = c
                .pending
                .back()
                .map_or(now + think, |p| p.0.max(now + think));
            c.pending.push_back((ready, resp));
            c.served += 1;
            if c.limit.is_some_and(|l| c.served >= l) {
                c.app_closed = true;
                c.app.clear();
            }
        }
        let c = &mut self.conns[i];
        if c.st == St::CloseWait && !c.app_closed {
            c.app_closed = true; // the client closed: so do we
        }
        self.settle(i, now);
    }

    /// Queue the answers that are ready, and the FIN once the application closed and has
    /// nothing left to answer.
    fn settle(&mut self, i: usize, now: Instant) {
        let c = &mut self.conns[i];
        while let Some(&(t, resp)) = c.pending.front() {
            if t > now {
                break;
            }
            c.pending.pop_front();
            c.snd_end = c.snd_end.add(resp);
        }
        if c.app_closed && !c.fin_queued && c.pending.is_empty() {
            c.fin_queued = true;
            c.st = match c.st {
                St::Established => St::FinWait1,
                St::CloseWait => St::LastAck,
                s => s,
            };
        }
    }

    /// Send what is due: SYN-ACK, data within the peer's window, FIN, or a pure ACK.
    fn flush(&mut self, i: usize, now: Instant, _retransmit: bool) {
        let zeros = [0u8; 1460];
        loop {
            let c = &mut self.conns[i];
            if matches!(c.st, St::Closed | St::Reset | St::GaveUp) {
                return;
            }
            let clock = 1000
                + self
                    .t0
                    .map_or(0, |t| now.saturating_duration_since(t).as_millis() as u32);
            let ts = c.ts_on.then_some((clock, c.ts_recent));
            let (client, server) = (c.client, c.server);
            if c.st == St::SynRcvd {
                if c.snd_nxt == c.iss {
                    let (seq, ack) = (c.iss, c.rcv_nxt);
                    c.snd_nxt = c.iss.add(1);
                    c.rto_at.get_or_insert(now + RTO);
                    let (win, ts_on) = (c.rcv_wnd.min(65535) as u16, c.ts_on);
                    self.send_raw(
                        server,
                        client,
                        seq,
                        ack,
                        TcpFlags::SYN | TcpFlags::ACK,
                        win,
                        &[],
                        ts.filter(|_| ts_on).map(|t| (t, true)),
                    );
                }
                return;
            }
            let wnd_end = c.snd_una.add(c.peer_wnd.clamp(1, CWND));
            let win = (c.rcv_wnd >> 7).max(1) as u16;
            if c.snd_nxt.lt(c.snd_end) && c.snd_nxt.lt(wnd_end) {
                let n = (c.snd_end.diff(c.snd_nxt) as u32)
                    .min(c.mss)
                    .min(wnd_end.diff(c.snd_nxt) as u32) as usize;
                let seq = c.snd_nxt;
                c.snd_nxt = seq.add(n as u32);
                let mut flags = TcpFlags::ACK | TcpFlags::PSH;
                if c.fin_queued && c.snd_nxt == c.snd_end {
                    flags |= TcpFlags::FIN;
                    c.snd_nxt = c.snd_nxt.add(1);
                }
                c.rto_at.get_or_insert(now + RTO);
                c.ack_now = false;
                let ack = c.rcv_nxt;
                self.send_raw(
                    server,
                    client,
                    seq,
                    ack,
                    flags,
                    win,
                    &zeros[..n],
                    ts.map(|t| (t, false)),
                );
                continue;
            }
            if c.fin_queued && c.snd_nxt == c.snd_end {
                let seq = c.snd_nxt;
                c.snd_nxt = seq.add(1);
                c.rto_at.get_or_insert(now + RTO);
                c.ack_now = false;
                let ack = c.rcv_nxt;
                self.send_raw(
                    server,
                    client,
                    seq,
                    ack,
                    TcpFlags::FIN | TcpFlags::ACK,
                    win,
                    &[],
                    ts.map(|t| (t, false)),
                );
                continue;
            }
            if c.ack_now {
                c.ack_now = false;
                let (seq, ack) = (c.snd_nxt, c.rcv_nxt);
                self.send_raw(
                    server,
                    client,
                    seq,
                    ack,
                    TcpFlags::ACK,
                    win,
                    &[],
                    ts.map(|t| (t, false)),
                );
            }
            return;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn send_raw(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        seq: SeqNum,
        ack: SeqNum,
        flags: TcpFlags,
        window: u16,
        payload: &[u8],
        ts: Option<((u32, u32), bool)>,
    ) {
        let mut opts = Vec::new();
        if let Some(((v, e), syn)) = ts {
            if syn {
                opts.push(TcpOption::Mss(1460));
                opts.push(TcpOption::WindowScale(7));
            }
            opts.push(TcpOption::Timestamps { tsval: v, tsecr: e });
        } else if flags.contains(TcpFlags::SYN) {
            opts.push(TcpOption::Mss(1460));
            opts.push(TcpOption::WindowScale(7));
        }
        let mut out = Vec::new();
        TcpBuilder {
            src,
            dst,
            seq,
            ack,
            flags,
            window,
            options: &opts,
            payload,
            ttl: 64,
            ident: 0,
        }
        .emit(&mut out);
        self.out.push(out);
    }
}
