//! The transmit poll and stopping: packets to send come from the shutdown RSTs first, then
//! from the ready sessions in turn; `close_all` ends every session (see "Stopping").

use std::time::Instant;

use super::{Engine, Event, Transmit};

impl Engine {
    /// Next packet to send: writes a complete IP packet (fresh checksums) into `out` (cleared).
    pub fn poll_transmit(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<Transmit> {
        out.clear();
        if let Some((tuple, pkt)) = self.shutdown_tx.pop_front() {
            out.extend_from_slice(&pkt);
            if self.shutdown_tx.is_empty() {
                self.release_shutdown_unreg();
            }
            let st = &mut self.sh.stats;
            st.segments_sent += 1;
            st.bytes_sent += out.len() as u64;
            return Some(Transmit {
                tuple,
                dst: tuple.server.ip(),
                len: out.len(),
                gso_size: 0,
                copy: None,
            });
        }
        while let Some(slot) = self.ready.pop_front() {
            let Some(s) = self
                .slots
                .get_mut(slot.idx as usize)
                .and_then(|x| x.s.as_mut())
                .filter(|s| s.slot == slot)
            else {
                continue;
            };
            s.in_ready = false;
            let sent = s.poll_transmit(&mut self.sh, now, out);
            self.arm(slot.idx);
            if let Some((tuple, sent)) = sent {
                let mut copy = None;
                if let Some(s) = self.slots[slot.idx as usize].s.as_mut() {
                    s.in_ready = true;
                    copy = Some((s.copy, s.key.client.socket()));
                }
                self.ready.push_back(slot);
                let st = &mut self.sh.stats;
                st.segments_sent += 1;
                st.bytes_sent += out.len() as u64;
                st.payload_bytes_sent += sent.payload as u64;
                if sent.retransmit {
                    st.retransmissions += 1;
                }
                if sent.probe {
                    st.window_probes += 1;
                }
                return Some(Transmit {
                    tuple,
                    dst: tuple.server.ip(),
                    len: out.len(),
                    gso_size: sent.gso_size,
                    copy,
                });
            }
        }
        None
    }

    /// Stop copying: every session ends (those being copied count as failed, `shutdown`),
    /// every test connection that sent anything gets a RST now (also those already closed or
    /// reset, in case their last segment was lost), and every test tuple is unregistered. The
    /// RSTs come out of [`Engine::poll_transmit`] first; the `Unregister`s come out of
    /// [`Engine::poll_control`] once the last RST was taken (see "Stopping" in the module
    /// documentation). The engine is empty afterwards: captured packets would start new
    /// sessions, so stop feeding it first.
    pub fn close_all(&mut self, now: Instant) {
        self.close_sessions(now, false);
    }

    /// [`Engine::close_all`] at the end of a capture file (`--offline`): the idle sessions
    /// (every byte sent and answered, the client's connection left open in the capture) are
    /// counted as open at the capture's end (`sessions_open_at_end`), the others as failed
    /// (`shutdown`).
    pub fn close_at_capture_end(&mut self, now: Instant) {
        self.close_sessions(now, true);
    }

    /// Sessions that still wait for something that may come once the capture file ended: a
    /// request not answered, a segment not acknowledged, a close to carry. The others cannot
    /// go on (an idle one waits for a request, a syncing one for a client ACK, that will not
    /// come; a done one whose connections are closed only lingers).
    #[must_use]
    pub fn unfinished_sessions(&self) -> usize {
        self.slots
            .iter()
            .filter_map(|s| s.s.as_ref())
            .filter(|s| !s.settled_at_capture_end())
            .count()
    }

    fn close_sessions(&mut self, now: Instant, at_capture_end: bool) {
        let mut out = Vec::new();
        let mut unreg = Vec::new();
        for idx in 0..self.slots.len() {
            let Some(s) = self.slots[idx].s.as_mut() else {
                continue;
            };
            s.shutdown(&mut self.sh, now, at_capture_end, &mut out, &mut unreg);
            self.remove(idx as u32);
        }
        self.timers.clear();
        self.ready.clear();
        self.pending.clear();
        self.resumes.clear();
        self.resume_fifo.clear();
        self.pending_fifo.clear();
        self.sh.stats.syns_pending = 0;
        self.closing = 0;
        self.shutdown_tx.extend(out);
        self.shutdown_unreg.extend(unreg);
        if self.shutdown_tx.is_empty() {
            self.release_shutdown_unreg();
        }
    }

    fn release_shutdown_unreg(&mut self) {
        for t in self.shutdown_unreg.drain(..) {
            self.sh.events.push(Event::Unregistered(t));
        }
    }
}
