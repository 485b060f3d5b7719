//! The C tool as a peer of a benchmark (`bench_copier --peer DIR`, issue 32): its `tcpcopy` on
//! `online` and its `intercept` on `test`, from a directory holding the binaries as the public C
//! project builds them (`./configure && make`; the project neither downloads nor vendors them).
//!
//! They run the way the C project's README runs them, in this lab's places:
//! - `intercept -i <test's link to online> -F 'tcp and src port 80'` on the test host: it captures
//!   the test server's answers with pcap (it drops nothing: the answers go on, by the test host's
//!   route to the client ranges, to `online`, whose kernel drops them, the "black hole" of the
//!   README's assistant server);
//! - `tcpcopy -x 80-<test>:80 -s <test>` on `online`: it captures the clients' requests to port 80
//!   (raw socket, inbound) and sends them to the test server, keeping the client addresses, and
//!   asks the intercept at `<test>` for the answers.
//!
//! Neither is given `-d` (daemon): the bench measures the CPU of the processes it started.

use crate::{addr, ifname, Host, Lab, Proc};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The command lines of the C tool's two programs in `dir`: (tcpcopy, intercept).
pub fn argv(dir: &Path) -> (Vec<String>, Vec<String>) {
    let bin = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let tcpcopy = vec![
        bin("tcpcopy"),
        "-x".into(),
        format!("80-{}:80", addr::TEST),
        "-s".into(),
        addr::TEST.to_string(),
    ];
    let intercept = vec![
        bin("intercept"),
        "-i".into(),
        ifname::TEST_TO_ONLINE.into(),
        "-F".into(),
        "tcp and src port 80".into(),
    ];
    (tcpcopy, intercept)
}

/// The C tool's programs running in a lab (stopped when the lab ends, or by [`Peer::stop`]).
#[derive(Debug)]
pub struct Peer {
    /// The directory of the binaries.
    pub dir: PathBuf,
    /// `tcpcopy`, on `online`.
    pub tcpcopy: Proc,
    /// `intercept`, on `test`.
    pub intercept: Proc,
}

impl Peer {
    /// Checks that `dir` holds both programs, executable.
    pub fn check_dir(dir: &Path) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        for name in ["tcpcopy", "intercept"] {
            let p = dir.join(name);
            let meta = std::fs::metadata(&p).with_context(|| {
                format!(
                    "--peer {}: no {name} there (the C tool's binaries, built from its public sources)",
                    dir.display()
                )
            })?;
            if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
                bail!("--peer: {} is not an executable file", p.display());
            }
        }
        Ok(())
    }

    /// Starts the intercept on `test`, then (after `settle`, so that it listens) tcpcopy on
    /// `online`; fails if either has exited by `settle` after its start.
    pub fn start(lab: &mut Lab, dir: &Path, settle: Duration) -> Result<Peer> {
        Peer::check_dir(dir)?;
        let (tc, ic) = argv(dir);
        fn refs(v: &[String]) -> Vec<&str> {
            v.iter().map(String::as_str).collect()
        }
        let intercept = lab.spawn(Host::Test, "peer-intercept", &refs(&ic))?;
        std::thread::sleep(settle);
        if let Some(st) = intercept.exited() {
            bail!(
                "the peer's intercept exited ({st}):\n{}",
                crate::setup::tail(&intercept.log(), 20)
            );
        }
        let tcpcopy = lab.spawn(Host::Online, "peer-tcpcopy", &refs(&tc))?;
        std::thread::sleep(settle);
        let peer = Peer {
            dir: dir.to_owned(),
            tcpcopy,
            intercept,
        };
        peer.check_alive()?;
        Ok(peer)
    }

    /// Fails with its log if either program exited.
    pub fn check_alive(&self) -> Result<()> {
        for p in [&self.tcpcopy, &self.intercept] {
            if let Some(st) = p.exited() {
                bail!(
                    "the peer's {} exited ({st}):\n{}",
                    p.name(),
                    crate::setup::tail(&p.log(), 20)
                );
            }
        }
        Ok(())
    }

    /// Stops both.
    pub fn stop(&self) {
        self.tcpcopy.stop();
        self.intercept.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_follows_the_c_tools_readme() {
        let (tc, ic) = argv(Path::new("/opt/c"));
        assert_eq!(
            tc,
            [
                "/opt/c/tcpcopy",
                "-x",
                "80-198.18.2.2:80",
                "-s",
                "198.18.2.2"
            ]
        );
        assert_eq!(
            ic,
            [
                "/opt/c/intercept",
                "-i",
                "to-online",
                "-F",
                "tcp and src port 80"
            ]
        );
    }
}
