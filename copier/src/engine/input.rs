//! The engine's inputs from the capture and the intercepts' records: a captured packet to the
//! SYN table, to its group of copies or to a new session (with its copies planned), and a
//! record to the session that owns its test tuple.

use std::net::SocketAddr;
use std::time::Instant;

use common::proto::Record;
use common::wire::TcpFlags;

use super::gate::Gate;
use super::map::PortMap;
use super::pkt::{parse_captured, parse_record, Captured};
use super::session::{Phase, Session};
use super::shared::SlotRef;
use super::stats::FailReason;
use super::{session, Engine, Slot, Start, NO_SLOT};

impl Engine {
    /// One captured IP packet (v4 or v6, starting at the IP header), client -> online service.
    /// Packets not matching any map, or of a session the sample leaves out, are counted and
    /// ignored. Never panics on any input.
    pub fn handle_captured(&mut self, now: Instant, packet: &[u8]) {
        self.captured(now, packet);
        self.maybe_compact();
    }

    fn captured(&mut self, now: Instant, packet: &[u8]) {
        self.sh.stats.packets_captured += 1;
        self.sh.plan.clock(now);
        let Ok(c) = parse_captured(packet) else {
            self.sh.stats.drops.malformed += 1;
            return;
        };
        let Some(map) = self.sh.p.map_for(c.key.server.into()).copied() else {
            self.sh.stats.drops.no_map += 1;
            return;
        };
        let syn = c.hdr.has(TcpFlags::SYN) && !c.hdr.has(TcpFlags::ACK);
        if self.sh.plan.shaper.samples_out(c.key.client.into()) {
            self.sh.stats.drops.not_sampled += 1;
            if syn {
                self.sh.stats.sessions_sampled_out += 1;
            }
            return;
        }
        if let Some(lead) = self.group_of(&c.key) {
            let replace = syn && {
                let mut members = std::mem::take(&mut self.members);
                self.group_members(lead, &mut members);
                self.members = members;
                // A SYN starts a new session unless it repeats the one a copy is carrying.
                !self.members.iter().any(|&i| {
                    self.slots[i as usize]
                        .s
                        .as_ref()
                        .is_some_and(|s| s.phase == Phase::Active && s.isn == c.hdr.seq)
                })
            };
            if !replace {
                self.dispatch_to(now, &c, lead);
                self.check_memory(now);
                return;
            }
            for i in 0..self.members.len() {
                let idx = self.members[i];
                let closed = self.slots[idx as usize]
                    .s
                    .as_ref()
                    .is_some_and(|s| s.phase == Phase::Active && s.client_closed());
                // The old copy's plan goes: the new session gets copies of its own.
                if let Some(id) = self.slots[idx as usize]
                    .s
                    .as_mut()
                    .and_then(|s| s.plan_id.take())
                {
                    self.sh.plan.shaper.end_session(id);
                }
                if !closed {
                    // A new connection from the same client port while the old one was live:
                    // the old copy ends (its closing connections linger on, detached from the
                    // key).
                    self.with_session(idx, |s, sh| s.finish(sh, now, Some(FailReason::Superseded)));
                }
                // Else the client had closed (FIN or RST) and reuses its port: the old copy
                // goes on carrying what it captured, detached from the key.
            }
            self.group_detach(&c.key);
        }
        // A SYN on a remembered key is a new connection on its port (after a shed session,
        // copied if the copier keeps up by the end of its handshake); any other segment is
        // a late one of a connection whose copy ended, or of a session left out.
        if self.closed_keys.keeps_out(now, &c.key, syn) {
            self.sh.stats.drops.after_close += 1;
            return;
        }
        if self.shed_keys.keeps_out(now, &c.key, syn) {
            self.sh.stats.drops.overload += 1;
            return;
        }
        if syn {
            self.hold_syn(now, &c);
            self.check_memory(now);
            return;
        }
        if let Some(why) = self.overload {
            // Behind: no session starts (whole or not at all); a pending SYN goes with it.
            if self.pending.remove(&c.key).is_some() {
                self.sh.stats.syns_pending = self.pending.len() as u64;
            }
            self.shed_for_overload(now, c.key, why);
            return;
        }
        if let Some(p) = self.pending.get(&c.key).copied() {
            let h = &c.hdr;
            if h.has(TcpFlags::RST) {
                self.pending.remove(&c.key);
                self.sh.stats.syns_incomplete.reset += 1;
                self.sh.stats.drops.no_session += 1;
            } else if h.has(TcpFlags::ACK) && h.seq == p.isn.add(1) {
                // The handshake completed (its ACK, or first data if the ACK was not seen).
                self.pending.remove(&c.key);
                let baseline = self.sh.p.baseline_for(&map);
                self.new_session(
                    now,
                    &c,
                    map,
                    baseline,
                    Start::Syn {
                        isn: p.isn,
                        tsval: p.tsval,
                    },
                );
                self.dispatch(now, &c);
            } else {
                // Not of this handshake (a stray segment): no session to carry it.
                self.sh.stats.drops.no_session += 1;
            }
            self.sh.stats.syns_pending = self.pending.len() as u64;
            self.check_memory(now);
            return;
        }
        let baseline = self.sh.p.baseline_for(&map);
        if let Some(&r) = self.resumes.get(&c.key) {
            let h = &c.hdr;
            let plain = h.has(TcpFlags::ACK) && !h.has(TcpFlags::FIN) && !h.has(TcpFlags::RST);
            if plain && c.payload.is_empty() {
                // A keep-alive probe or a window update: the session starts at the next data.
                self.sh.stats.drops.no_session += 1;
                return;
            }
            self.resumes.remove(&c.key);
            if plain && h.seq == r.next && r.after_ack.is_none_or(|a| h.ack.gt(a)) {
                self.new_session(now, &c, map, baseline, Start::Resume);
                self.dispatch(now, &c);
                self.check_memory(now);
                return;
            }
        }
        self.new_session(now, &c, map, baseline, Start::Midstream);
        self.check_memory(now);
    }

    fn new_session(
        &mut self,
        now: Instant,
        c: &Captured<'_>,
        map: PortMap,
        baseline: Option<SocketAddr>,
        how: Start,
    ) {
        // Every server of a map has the family of `map.target` (`targets::parse_targets`).
        let target = map.target;
        let h = &c.hdr;
        let st = &mut self.sh.stats;
        let syn = matches!(how, Start::Syn { .. });
        if !syn
            && (h.has(TcpFlags::RST)
                || h.has(TcpFlags::FIN)
                || h.has(TcpFlags::SYN)
                || !h.has(TcpFlags::ACK))
        {
            st.drops.no_session += 1;
            return;
        }
        if !self.sh.intercept_up {
            st.drops.no_intercept += 1;
            if syn {
                st.sessions_not_copied += 1;
            }
            return;
        }
        // The planner says how many copies and on which clients (see "Copies and sampling").
        let t = self.sh.plan.clock(now);
        let v6 = target.is_ipv6();
        let plans = match self
            .sh
            .plan
            .shaper
            .on_session_to(t, c.key.client.into(), v6)
        {
            Ok(p) if p.is_empty() => {
                self.sh.stats.drops.not_sampled += 1;
                if syn {
                    self.sh.stats.sessions_sampled_out += 1;
                }
                return;
            }
            Ok(p) => p,
            Err(_) => {
                // No virtual port left for this client: not copied.
                self.sh.stats.sessions_no_tuple += 1;
                return;
            }
        };
        if self.live_sessions() + plans.len() > self.sh.p.max_sessions {
            // Room from the unproven first, then the idle (see `make_room`).
            let want = self.live_sessions() + plans.len() - self.sh.p.max_sessions;
            self.make_room(now, want, matches!(how, Start::Midstream));
        }
        if self.live_sessions() + plans.len() > self.sh.p.max_sessions {
            self.sh.stats.drops.table_full += 1;
            self.end_plans(&plans);
            return;
        }
        if plans[0].client.is_ipv6() != v6 {
            self.end_plans(&plans);
            self.sh.stats.drops.family_mismatch += 1;
            return;
        }
        let started = self.sh.stats.sessions_started;
        // Whether a copy of this call formed the group (once it is gone, later copies are
        // made outside any group).
        let mut grouped = false;
        // the baseline's copy: the first copy's client, toward the baseline (no plan of its own)
        let extra = baseline
            .filter(|b| b.is_ipv6() == v6)
            .map(|b| (b, plans[0].client));
        let copies = plans
            .iter()
            .map(|p| (target, p.client, Some(p)))
            .chain(extra.map(|(b, cl)| (b, cl, None)));
        let copies: Vec<_> = copies.collect();
        for (k, (target, client, plan)) in copies.into_iter().enumerate() {
            if client.is_ipv6() != v6 {
                let Some(plan) = plan else { continue };
                // A virtual address of the other family than the target's: that copy only.
                self.sh.stats.drops.family_mismatch += 1;
                self.sh.plan.shaper.end_session(plan.session);
                continue;
            }
            let idx = match self.free.pop() {
                Some(i) => i,
                None => {
                    self.slots.push(Slot {
                        gen: self.gen_floor,
                        next: NO_SLOT,
                        s: None,
                    });
                    // The table grew: compact once it is down to a quarter again.
                    self.compact_below = self.slots.len() / 4;
                    (self.slots.len() - 1) as u32
                }
            };
            let slot = SlotRef {
                idx,
                gen: self.slots[idx as usize].gen,
            };
            // Each copy takes its server by weight, health and load, and keeps it; the
            // baseline's copy (no plan of its own) goes to the baseline.
            let target = match plan {
                None => target,
                Some(plan) => match self.targets.pick(now, &map) {
                    Some(t) => t,
                    None => {
                        // Every server is overloaded: this copy is not made.
                        self.sh.plan.shaper.end_session(plan.session);
                        self.free.push(idx);
                        continue;
                    }
                },
            };
            if let Some(plan) = plan {
                if !matches!(how, Start::Midstream) {
                    // Live on its server from now on (one caught mid-stream once it
                    // synchronises: `Event::Started`).
                    self.targets.on_started(now, target, slot);
                }
                if let Some(tags) = self.trace.as_mut() {
                    let pool = plan
                        .user
                        .and_then(|u| self.sh.plan.shaper.users().map(|t| t.user(u).pool as u16));
                    tags.set(slot, plan, pool, target);
                }
            }
            let mut s = Session::new(c.key, slot, target, client.ip(), now);
            s.copy = k as u16;
            s.want_port = client.port();
            s.plan_id = session::PlanId::of(plan.map(|p| p.session));
            s.gate = plan
                .filter(|_| self.sh.plan.gates)
                .map(|p| Box::new(Gate::new(p.session)));
            match how {
                Start::Syn { isn, tsval } => s.start_syn(&mut self.sh, now, isn, tsval),
                Start::Midstream => s.start_syncing(&mut self.sh, c, k == 0),
                Start::Resume => s.start_resumed(&mut self.sh, now, c),
            }
            self.slots[idx as usize].s = Some(s);
            self.slots[idx as usize].next = NO_SLOT;
            self.sh.stats.sessions_unproven += 1;
            if !grouped || self.group_of(&c.key).is_some() {
                self.group_join(&c.key, idx);
                grouped = true;
            }
            self.after_op(idx);
        }
        if self.sh.stats.sessions_started > started {
            self.sh.stats.captured_sessions_started += 1;
        }
        let now_started = self.sh.stats.sessions_started > started;
        self.set_group_started(&c.key, now_started);
    }

    /// One response header record returned by the intercept.
    pub fn handle_record(&mut self, now: Instant, record: &Record) {
        self.record(now, record);
        self.maybe_compact();
    }

    fn record(&mut self, now: Instant, record: &Record) {
        self.sh.stats.records_received += 1;
        let Ok(r) = parse_record(record) else {
            self.sh.stats.drops.record_malformed += 1;
            return;
        };
        match self.sh.tuples.get(&r.tuple) {
            Some(slot) if self.live(slot) => {
                let (server, h) = (r.tuple.server.into(), &r.hdr);
                if h.has(TcpFlags::SYN) || h.has(TcpFlags::FIN) || r.data_len > 0 {
                    self.targets.on_answer(now, server, h.has(TcpFlags::RST));
                } else if h.has(TcpFlags::RST) {
                    self.targets.on_answer(now, server, true);
                } else {
                    self.targets.on_bare_ack(server);
                }
                self.with_session(slot.idx, |s, sh| s.on_record(sh, now, &r));
            }
            _ => self.sh.stats.drops.record_unknown += 1,
        }
    }

    /// For `--compare`: the copy index of the session a record belongs to, and the captured
    /// client that copy stands for, if it stands for one: it is on the captured client's address
    /// and port (with `--copies N`, copy 0 and its baseline copy; the comparison matches test
    /// answers to online connections by them), or it is copy 0, planned there, and had to take
    /// another port (the client's was taken by another live copy, a TIME_WAIT moved it, or the
    /// test server closed and the copy reconnected); the caller files such a record under the
    /// client ([`crate::shadow::file_under`]). `None` for a record of no live session.
    /// Call it before [`Engine::handle_record`] (a record may end its session).
    #[must_use]
    pub fn record_copy(&self, record: &Record) -> Option<(u16, Option<SocketAddr>)> {
        let r = parse_record(record).ok()?;
        let slot = self
            .sh
            .tuples
            .get(&r.tuple)
            .filter(|&slot| self.live(slot))?;
        let s = self.slots.get(slot.idx as usize)?.s.as_ref()?;
        let client = s.key.client.socket();
        // On the client's own tuple (copy 0, the baseline's copy), or copy 0 planned there
        // and moved (the flags' plan: the client's address and port).
        let stands = r.tuple.client == s.key.client
            || (s.copy == 0 && s.client_ip == client.ip() && s.want_port == client.port());
        Some((s.copy, stands.then_some(client)))
    }
}
