//! Registrations: the intercepts' links and verdicts on the test tuples the engine registers
//! (`poll_control`), and the refusals to report.

use std::time::Instant;

use common::flow::FourTuple;
use common::proto::RegVerdict;

use super::{Engine, LinkEvent, Refusal, RegEvent};

impl Engine {
    /// Tell the engine whether at least one intercept is connected (while none is, new sessions
    /// are not started: counted as not copied). Same as [`Engine::set_intercept_count`] with
    /// 0 or 1.
    pub fn set_intercept_connected(&mut self, now: Instant, connected: bool) {
        self.set_intercept_count(now, usize::from(connected));
    }

    /// Tell the engine how many intercepts are connected: none stops new sessions (see
    /// [`Engine::set_intercept_connected`]); with several, a registration fails only once
    /// that many of them refused it ([`Engine::handle_registered`]).
    pub fn set_intercept_count(&mut self, _now: Instant, n: usize) {
        self.sh.intercept_up = n > 0;
        self.intercepts = n;
    }

    /// What became of intercept `from`'s control link of generation `gen` (see [`LinkEvent`]).
    /// A registration is in force only through an acceptance on the intercept's current link
    /// while its rules are in force: when the link ends (or a newer one comes up) or the rules
    /// go missing, every connection in force through that intercept alone is held back, sends
    /// nothing (`registrations_withdrawn`) and goes on once an acceptance is in force again
    /// (the copier registers every live session again on the new link; the rules come back).
    /// Returns whether the event was of the current link (an event of an older one is ignored).
    pub fn intercept_link(&mut self, _now: Instant, from: u16, gen: u32, event: LinkEvent) -> bool {
        let bit = 1u64 << (from % 64);
        let at = self.link_gens.iter().position(|(f, _)| *f == from);
        let current = at.is_some_and(|i| self.link_gens[i].1 == gen);
        match event {
            LinkEvent::Up => {
                if current {
                    return true;
                }
                match at {
                    Some(i) => self.link_gens[i].1 = gen,
                    None => self.link_gens.push((from, gen)),
                }
                self.sh.unguarded &= !bit;
                self.withdraw_all(bit, true);
            }
            LinkEvent::Down if current => {
                self.sh.unguarded &= !bit;
                self.withdraw_all(bit, true);
            }
            LinkEvent::Rules(false) if current => {
                if self.sh.unguarded & bit == 0 {
                    self.sh.unguarded |= bit;
                    self.sh.stats.rules_lost += 1;
                    self.withdraw_all(bit, false);
                }
            }
            LinkEvent::Rules(true) if current => {
                if self.sh.unguarded & bit != 0 {
                    self.sh.unguarded &= !bit;
                    for idx in 0..self.slots.len() as u32 {
                        let Some(s) = self.slots[idx as usize].s.as_mut() else {
                            continue;
                        };
                        if s.reinstate(&self.sh) {
                            self.after_op(idx);
                        }
                    }
                }
            }
            _ => return false,
        }
        true
    }

    fn withdraw_all(&mut self, bits: u64, forget: bool) {
        let mut n = 0;
        for slot in &mut self.slots {
            if let Some(s) = slot.s.as_mut() {
                n += s.withdraw(&self.sh, bits, forget);
            }
        }
        self.sh.stats.registrations_withdrawn += n;
    }

    /// Next change of the registered tuples, for the intercepts.
    pub fn poll_control(&mut self) -> Option<RegEvent> {
        self.drain_events();
        self.control.pop_front()
    }

    /// An intercept's verdict on a registered test tuple (`Message::Registered`); `from`
    /// names the intercept (any number stable for the link's life, e.g. its `--intercept`
    /// index). A tuple is in force once any intercept accepted it: only then do its packets
    /// leave. A refusal counts only while no intercept accepted it; once as many different
    /// intercepts refused it as are connected (at least one), the session it belongs to fails
    /// (`registration_refused`) having sent nothing on it, and the refusal is reported
    /// ([`Engine::poll_refusal`]). Verdicts on tuples no session holds (ended meanwhile) and
    /// repeated ones (after a reconnection) are ignored.
    pub fn handle_registered(
        &mut self,
        now: Instant,
        from: u16,
        tuple: FourTuple,
        verdict: RegVerdict,
    ) {
        let Some(slot) = self.sh.tuples.get(&tuple).filter(|s| self.live(*s)) else {
            return;
        };
        let guarding = self
            .intercepts_for
            .iter()
            .find(|(ip, _)| *ip == tuple.server.ip())
            .map(|&(_, n)| n);
        let need = guarding
            .map_or(self.intercepts, |n| n.min(self.intercepts))
            .max(1);
        let Some(key) = self.slots[slot.idx as usize].s.as_ref().map(|s| s.key) else {
            return;
        };
        let mut refused = false;
        self.with_session(slot.idx, |s, sh| {
            refused = s.on_verdict(sh, now, tuple, from, verdict, need)
        });
        if refused {
            self.sh.stats.drops.registration_refused += 1;
            let Some(map) = self.sh.p.map_for(key.server.into()).copied() else {
                return;
            };
            if !self.refusals_seen.contains(&(map, verdict)) && self.refusals_seen.len() < 256 {
                self.refusals_seen.push((map, verdict));
                self.refusals.push_back(Refusal {
                    map,
                    tuple,
                    verdict,
                });
            }
        }
    }

    /// The next refusal to report (the first of each map and verdict; see
    /// [`Engine::handle_registered`]).
    pub fn poll_refusal(&mut self) -> Option<Refusal> {
        self.refusals.pop_front()
    }
}
