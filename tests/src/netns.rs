//! Entering a lab namespace from a thread of this process.
//!
//! `setns(CLONE_NEWNET)` changes the namespace of the calling thread only, so the work runs on a
//! fresh thread that is joined before returning; the caller's thread never changes namespace.

use anyhow::{anyhow, Context, Result};
use nix::sched::{setns, CloneFlags};

/// Runs `f` on a new thread inside network namespace `ns` (a name under /var/run/netns).
pub(crate) fn in_netns<F, R>(ns: &str, f: F) -> Result<R>
where
    F: FnOnce() -> R + Send,
    R: Send,
{
    let path = format!("/var/run/netns/{ns}");
    let file = std::fs::File::open(&path).with_context(|| format!("open {path}"))?;
    std::thread::scope(|s| {
        s.spawn(move || -> Result<R> {
            setns(&file, CloneFlags::CLONE_NEWNET).with_context(|| format!("setns {path}"))?;
            Ok(f())
        })
        .join()
        .map_err(|_| anyhow!("the thread running in namespace {ns} panicked"))?
    })
}
