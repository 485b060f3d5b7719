//! A session's place in the engine's slab ([`SlotRef`]): what the sessions' events, the timers
//! and the trace name a session by (a leaf: it takes nothing from the engine).

/// A session's place in the engine's slab: index and generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotRef {
    pub idx: u32,
    pub gen: u32,
}
