//! What a test connection sends: SYN, data within the test server's window (cut to the MSS, or
//! with `Params::gso` in super-segments of whole MSS that say their `gso_size`),
//! FIN, ACKs of the test server's bytes, RSTs, probes and fast retransmissions, each built
//! whole with fresh checksums by `common::wire::TcpBuilder`.

use crate::engine::stamp::Stamp;
use std::time::Instant;

use common::seq::SeqNum;
use common::wire::{TcpBuilder, TcpFlags, TcpOption};

use super::{Conn, Sent, State, TxCtx};
use crate::engine::config::Params;

impl Conn {
    /// The next segment to send, if any, written into `out`.
    pub(crate) fn poll(
        &mut self,
        now: Instant,
        p: &Params,
        tx: &mut TxCtx<'_>,
        out: &mut Vec<u8>,
    ) -> Option<Sent> {
        if self.reg_pending || self.dead {
            return None;
        }
        if let Some(r) = self.rst.as_deref_mut() {
            let rst = if let Some(seq) = r.stale.take() {
                Some((seq, TcpFlags::RST))
            } else {
                let low = r.low.filter(|_| r.low_due && r.due.is_none());
                let seq = r.due.take().or(low);
                if let Some(seq) = seq {
                    if low == Some(seq) {
                        r.low_due = false;
                    } else {
                        r.last = seq;
                    }
                }
                seq.map(|seq| {
                    (
                        seq,
                        if self.synced {
                            TcpFlags::RST | TcpFlags::ACK
                        } else {
                            TcpFlags::RST
                        },
                    )
                })
            };
            if let Some((seq, flags)) = rst {
                self.emit(p, seq, flags, &[], None, out);
                return Some(Sent {
                    payload: 0,
                    retransmit: false,
                    gso_size: 0,
                    probe: false,
                });
            }
        }
        match self.state {
            State::SynSent => {
                if !self.syn_due {
                    return None;
                }
                self.syn_due = false;
                let retransmit = self.snd_max != self.iss;
                if !retransmit {
                    self.ts_offered = tx.tsval.is_some();
                }
                let ts = if self.ts_offered { tx.tsval } else { None };
                self.emit(p, self.iss, TcpFlags::SYN, &[], ts, out);
                self.snd_nxt = self.iss.add(1);
                self.snd_max = self.snd_nxt;
                if !retransmit {
                    self.rtt_probe = Some((self.snd_nxt, Stamp::of(now)));
                }
                self.rto_at.get_or_insert(Stamp::of(now + self.cur_rto(p)));
                Some(Sent {
                    payload: 0,
                    retransmit,
                    gso_size: 0,
                    probe: false,
                })
            }
            State::Established => self.poll_established(now, p, tx, out),
            State::Linger => {
                if self.reset || !self.ack_due {
                    return None;
                }
                self.emit_ack(p, tx.tsval, out);
                Some(Sent {
                    payload: 0,
                    retransmit: false,
                    gso_size: 0,
                    probe: false,
                })
            }
        }
    }

    fn poll_established(
        &mut self,
        now: Instant,
        p: &Params,
        tx: &mut TxCtx<'_>,
        out: &mut Vec<u8>,
    ) -> Option<Sent> {
        if self.probe_due {
            // Zero-window probe: an old sequence number makes the test server answer with its
            // current window, without sending any byte beyond it.
            self.probe_due = false;
            self.emit(p, self.snd_una.sub(1), TcpFlags::ACK, &[], tx.tsval, out);
            self.acked_rcv = self.rcv_nxt;
            self.ack_due = false;
            return Some(Sent {
                payload: 0,
                retransmit: false,
                gso_size: 0,
                probe: true,
            });
        }
        if self.fast_rexmit {
            self.fast_rexmit = false;
            if let Some(sent) = self.resend_first(p, tx, out) {
                return Some(sent);
            }
        }
        let seq = self.snd_nxt;
        if seq.lt(tx.limit) && seq.ge(tx.base) {
            let room = self.window_room();
            self.win_full = room <= 0;
            if room > 0 {
                let avail = tx.limit.diff(seq) as u32;
                let n = avail.min(room as u32).min(self.max_payload(p)) as usize;
                let off = seq.diff(tx.base) as usize;
                let data = tx.data;
                if let Some(payload) = data.get(off, n, &mut tx.scratch).filter(|b| b.len() == n) {
                    let end = seq.add(n as u32);
                    let mut flags = TcpFlags::ACK;
                    if end == tx.limit {
                        flags |= TcpFlags::PSH;
                    }
                    let retransmit = seq.lt(self.snd_max);
                    self.emit(p, seq, flags, payload, tx.tsval, out);
                    self.snd_nxt = end;
                    self.snd_max = self.snd_max.max(end);
                    self.acked_rcv = self.rcv_nxt;
                    self.ack_due = false;
                    if self.rtt_probe.is_none() && !retransmit {
                        self.rtt_probe = Some((end, Stamp::of(now)));
                    }
                    self.rto_at.get_or_insert(Stamp::of(now + self.cur_rto(p)));
                    let gso_size = if n as u32 > self.mss {
                        self.mss as u16
                    } else {
                        0
                    };
                    return Some(Sent {
                        payload: n,
                        retransmit,
                        gso_size,
                        probe: false,
                    });
                }
            }
        }
        if let Some(f) = tx.fin {
            if self.snd_nxt == f && !self.fin_acked {
                let retransmit = self.fin_sent.is_some();
                if !retransmit {
                    self.fin_acks_peer = self.peer_fin;
                }
                self.emit(p, f, TcpFlags::FIN | TcpFlags::ACK, &[], tx.tsval, out);
                self.fin_sent = Some(f);
                self.snd_nxt = f.add(1);
                self.snd_max = self.snd_max.max(self.snd_nxt);
                self.acked_rcv = self.rcv_nxt;
                self.ack_due = false;
                self.rto_at.get_or_insert(Stamp::of(now + self.cur_rto(p)));
                return Some(Sent {
                    payload: 0,
                    retransmit,
                    gso_size: 0,
                    probe: false,
                });
            }
        }
        if self.ack_due || (self.acked_rcv != self.rcv_nxt && self.ack_at.is_none()) {
            self.emit_ack(p, tx.tsval, out);
            return Some(Sent {
                payload: 0,
                retransmit: false,
                gso_size: 0,
                probe: false,
            });
        }
        None
    }

    /// Most payload of one data segment: one MSS, or with `Params::gso` as many whole MSS as a
    /// super-segment holds (the kernel or the NIC cuts it as TSO cuts a client's).
    fn max_payload(&self, p: &Params) -> u32 {
        if p.gso {
            (crate::engine::config::GSO_MAX_PAYLOAD / self.mss).max(1) * self.mss
        } else {
            self.mss
        }
    }

    /// Fast retransmit: the first unacknowledged segment (or our FIN), leaving `snd_nxt`.
    fn resend_first(&mut self, p: &Params, tx: &mut TxCtx<'_>, out: &mut Vec<u8>) -> Option<Sent> {
        let seq = self.snd_una;
        if !seq.lt(self.snd_max) {
            return None;
        }
        if self.fin_sent == Some(seq) {
            self.emit(p, seq, TcpFlags::FIN | TcpFlags::ACK, &[], tx.tsval, out);
            return Some(Sent {
                payload: 0,
                retransmit: true,
                gso_size: 0,
                probe: false,
            });
        }
        let end = self.fin_sent.unwrap_or(self.snd_max).min(self.snd_max);
        let n = (end.diff(seq).max(0) as u32).min(self.mss) as usize;
        let off = seq.diff(tx.base);
        if n == 0 || off < 0 {
            return None;
        }
        let data = tx.data;
        let payload = data
            .get(off as usize, n, &mut tx.scratch)
            .filter(|b| b.len() == n)?;
        self.emit(p, seq, TcpFlags::ACK, payload, tx.tsval, out);
        self.acked_rcv = self.rcv_nxt;
        self.ack_due = false;
        Some(Sent {
            payload: n,
            retransmit: true,
            gso_size: 0,
            probe: false,
        })
    }

    fn emit_ack(&mut self, p: &Params, tsval: Option<u32>, out: &mut Vec<u8>) {
        self.emit(p, self.snd_nxt, TcpFlags::ACK, &[], tsval, out);
        self.acked_rcv = self.rcv_nxt;
        self.ack_due = false;
    }

    fn emit(
        &mut self,
        p: &Params,
        seq: SeqNum,
        flags: TcpFlags,
        payload: &[u8],
        tsval: Option<u32>,
        out: &mut Vec<u8>,
    ) {
        let syn = flags.contains(TcpFlags::SYN);
        let mut opts = [TcpOption::SackPermitted; 3];
        let mut n = 0;
        if syn {
            opts[0] = TcpOption::Mss(self.mss as u16);
            opts[1] = TcpOption::WindowScale(p.wscale);
            n = 2;
        }
        if !flags.contains(TcpFlags::RST) && (syn || self.ts_ok) {
            if let Some(v) = tsval {
                opts[n] = TcpOption::Timestamps {
                    tsval: v,
                    tsecr: if syn { 0 } else { self.ts_recent.unwrap_or(0) },
                };
                n += 1;
            }
        }
        let with_ack = flags.contains(TcpFlags::ACK);
        if with_ack {
            self.ack_at = None; // whatever waited for an ACK is acknowledged by this segment
        }
        let window = match (syn, self.we_scale, flags.contains(TcpFlags::RST)) {
            (_, _, true) => 0,
            (false, true, _) => p.window,
            _ => u16::MAX,
        };
        TcpBuilder {
            src: self.tuple.client.into(),
            dst: self.tuple.server.into(),
            seq,
            ack: if with_ack { self.rcv_nxt } else { SeqNum(0) },
            flags,
            window,
            options: &opts[..n],
            payload,
            ttl: p.ttl,
            ident: self.ident,
        }
        .emit(out);
        self.ident = self.ident.wrapping_add(1);
    }
}
