//! Processes started in the lab: their output goes to a log file, and they are stopped
//! (SIGTERM, then SIGKILL after a grace period) when the lab is dropped.

use anyhow::{Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A process started by the lab. Clones share the same process.
#[derive(Clone, Debug)]
pub struct Proc {
    inner: Arc<Mutex<Child>>,
    name: String,
    log: PathBuf,
}

impl Proc {
    pub(crate) fn spawn(mut cmd: Command, name: &str, log: &Path) -> Result<Proc> {
        let out =
            std::fs::File::create(log).with_context(|| format!("create {}", log.display()))?;
        let err = out.try_clone()?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("start {name}: {cmd:?}"))?;
        Ok(Proc {
            inner: Arc::new(Mutex::new(child)),
            name: name.to_owned(),
            log: log.to_owned(),
        })
    }

    /// The name given at start.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).id()
    }

    /// The log file (stdout and stderr).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `Some(status)` when the process has exited.
    pub fn exited(&self) -> Option<ExitStatus> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_wait()
            .ok()
            .flatten()
    }

    /// Sends a signal.
    pub fn signal(&self, sig: Signal) {
        let _ = kill(Pid::from_raw(self.pid() as i32), sig);
    }

    /// Waits for the process to exit, at most `timeout`.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.exited() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the process: SIGTERM, then SIGKILL after 3 s. Returns its exit status.
    pub fn stop(&self) -> Option<ExitStatus> {
        if let Some(s) = self.exited() {
            return Some(s);
        }
        self.signal(Signal::SIGTERM);
        if let Some(s) = self.wait_timeout(Duration::from_secs(3)) {
            return Some(s);
        }
        self.signal(Signal::SIGKILL);
        self.wait_timeout(Duration::from_secs(2))
    }
}
