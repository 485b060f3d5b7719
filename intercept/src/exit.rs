//! What happens to the NFQUEUE rules when the intercept stops, on every exit path (signal,
//! error, panic): removed only when that cannot let a response out, otherwise kept (fail
//! closed: while no intercept reads the queue, the kernel drops what the rules queue).
//!
//! - [`decide`]: the rules go only if the router is quiet (nothing registered, held or
//!   recently unregistered) or the operator asked for `--always-remove-rules`;
//! - the daemon waits up to `--exit-grace` for the router to become quiet before deciding
//!   (copiers may still unregister; held records expire);
//! - a panic decides nothing: the [`Installed`](crate::rules::Installed) guard's `Drop` keeps
//!   the rules.

use crate::router::Activity;

/// What to do with the rules we installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RulesAtExit {
    /// Remove them.
    Remove,
    /// Leave them in place; why.
    Keep(Activity),
}

/// The decision for the router's state at exit.
pub fn decide(activity: Activity, always_remove: bool) -> RulesAtExit {
    if activity.is_quiet() || always_remove {
        RulesAtExit::Remove
    } else {
        RulesAtExit::Keep(activity)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use common::flow::FourTuple;

    use super::*;
    use crate::router::{CopierId, Router, RouterConfig};

    fn t() -> FourTuple {
        FourTuple::new(
            "198.19.0.1:4000".parse().unwrap(),
            "198.18.2.2:80".parse().unwrap(),
        )
    }

    #[test]
    fn rules_go_only_when_quiet_or_forced() {
        let t0 = Instant::now();
        let mut r = Router::new(RouterConfig::default());
        assert_eq!(decide(r.quiet(), false), RulesAtExit::Remove);
        r.handle_register(t0, CopierId(1), &[t()]);
        // e.g. a dead NFQUEUE worker ends the daemon with an error while a session is open:
        // the outcome does not matter, the router's state does.
        assert!(matches!(decide(r.quiet(), false), RulesAtExit::Keep(a) if a.registered == 1));
        assert_eq!(decide(r.quiet(), true), RulesAtExit::Remove);
        // the copier's connection ends (at shutdown): a tombstone still keeps the rules
        r.handle_copier_gone(CopierId(1));
        assert!(matches!(decide(r.quiet(), false), RulesAtExit::Keep(a) if a.tombstoned == 1));
        r.handle_timeout(t0 + Duration::from_secs(3600));
        assert_eq!(decide(r.quiet(), false), RulesAtExit::Remove);
    }
}
