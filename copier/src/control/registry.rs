//! The registry of registered test tuples that the engine threads change and every client
//! forwards to its intercept (see [`Registry`]), and the messages a batch of its changes makes.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use common::flow::FourTuple;
use common::proto::Message;
use tokio::sync::broadcast;

use crate::engine::RegEvent;

/// Most tuples put in one Register/Unregister message.
pub(super) const TUPLES_PER_MESSAGE: usize = 8192;

/// Capacity of the registration broadcast, in batches (one per [`Registry::apply`] that
/// changed something: an engine turn's changes); a client further behind resynchronises (by
/// difference against a copy of the registry: a burst of more batches than this between two
/// writes of a link costs that copy). Its slots are allocated and written when the registry is
/// made, about 100 bytes each: 16,384 of them were 1.6 MiB of the idle copier's RSS.
pub(super) const BROADCAST_CAPACITY: usize = 4096;

/// A set of test tuples: the registry's, and each link's copy of what it told its intercept.
/// Keyed with the engine's fast hasher (a seed per registry, so that clients cannot aim
/// collisions at it): every session adds and removes its tuple in both, and SipHash's cost
/// showed in profiles of one request per connection.
pub type TupleSet = HashSet<FourTuple, crate::engine::FastHash>;

/// One batch of the registry's changes, as broadcast to the links.
pub type RegBatch = Arc<[RegEvent]>;

#[derive(Debug)]
struct RegistryInner {
    set: TupleSet,
    tx: broadcast::Sender<RegBatch>,
    /// Kept between calls: the changes of one [`Registry::apply`].
    changed: Vec<RegEvent>,
}

/// The sessions registered with the intercepts (see the module doc).
#[derive(Debug)]
pub struct Registry {
    inner: Mutex<RegistryInner>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        let (tx, _) = broadcast::channel(BROADCAST_CAPACITY);
        Registry {
            inner: Mutex::new(RegistryInner {
                set: TupleSet::with_hasher(crate::engine::FastHash::new(rand::random())),
                tx,
                changed: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RegistryInner> {
        // A panic while holding this lock leaves a consistent set (single insert/remove).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Apply changes in order; repeated registrations and unknown unregistrations are ignored.
    /// What changed goes to the links as one batch (one wake-up of each, not one per change).
    pub fn apply(&self, events: &[RegEvent]) {
        let mut g = self.lock();
        let RegistryInner { set, tx, changed } = &mut *g;
        changed.clear();
        for &ev in events {
            let is_new = match ev {
                RegEvent::Register(t) => set.insert(t),
                RegEvent::Unregister(t) => set.remove(&t),
            };
            if is_new {
                changed.push(ev);
            }
        }
        if !changed.is_empty() {
            // No receiver (no intercept connected) is fine: the snapshot covers it later.
            let _ = tx.send(RegBatch::from(changed.as_slice()));
        }
        shrink_if_sparse(set);
    }

    /// Batches of changes not yet seen by every client that was subscribed when they were made (to let
    /// the clients pass the last changes on before the copier exits).
    pub fn unsent(&self) -> usize {
        self.lock().tx.len()
    }

    /// Unregister everything (after the engine was rebuilt).
    pub fn clear(&self) {
        let all: Vec<RegEvent> = self
            .lock()
            .set
            .iter()
            .map(|&t| RegEvent::Unregister(t))
            .collect();
        self.apply(&all);
    }

    /// Sessions registered now.
    pub fn len(&self) -> usize {
        self.lock().set.len()
    }

    /// Whether no session is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The current set and a receiver of every change after it.
    pub fn subscribe(&self) -> (TupleSet, broadcast::Receiver<RegBatch>) {
        let g = self.lock();
        (g.set.clone(), g.tx.subscribe())
    }
}

/// Give back a set's room once it holds under a quarter of it (after a peak of sessions), so
/// that the memory comes down with them; amortised O(1) per removal.
pub(super) fn shrink_if_sparse(set: &mut TupleSet) {
    if set.capacity() > 1024 && set.len() * 4 < set.capacity() {
        set.shrink_to_fit();
    }
}

/// Which sessions ask their intercept for the payload of their answers (`--compare`): the
/// ones `--compare-sample` picks, by the same hash of the client's address and port that the
/// comparison's tap samples records by ([`crate::shadow::sampled_client`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PayloadAsk {
    /// The fraction of sessions compared (0 to 1).
    pub sample: f64,
}

impl PayloadAsk {
    /// Payload bytes asked per answer packet: all the intercept keeps (`--payload-bytes` caps
    /// it there).
    pub const BYTES: u32 = u32::MAX;

    /// Whether `t`'s answers are compared, so their payload is asked for.
    #[must_use]
    pub fn wants(&self, t: &FourTuple) -> bool {
        crate::shadow::sampled_client(t.client.ip(), t.client.port(), self.sample)
    }
}

/// Turn a run of changes into messages, keeping their order; with `ask`, the registrations of
/// the sessions it picks go in RegisterPayload messages (after the plain Register of the same
/// run: registrations of different tuples do not depend on each other's order).
pub fn messages_for(events: &[RegEvent], ask: Option<&PayloadAsk>, out: &mut Vec<Message>) {
    let mut i = 0;
    while i < events.len() {
        let reg = matches!(events[i], RegEvent::Register(_));
        let mut tuples = Vec::new();
        let mut asked = Vec::new();
        while i < events.len() && tuples.len() + asked.len() < TUPLES_PER_MESSAGE {
            match events[i] {
                RegEvent::Register(t) if reg => match ask {
                    Some(a) if a.wants(&t) => asked.push((t, PayloadAsk::BYTES)),
                    _ => tuples.push(t),
                },
                RegEvent::Unregister(t) if !reg => tuples.push(t),
                _ => break,
            }
            i += 1;
        }
        if !reg {
            out.push(Message::Unregister { tuples });
            continue;
        }
        if !tuples.is_empty() {
            out.push(Message::Register { tuples });
        }
        if !asked.is_empty() {
            out.push(Message::RegisterPayload { tuples: asked });
        }
    }
}
