//! Packet captures with tcpdump inside a lab host.

use crate::Proc;
use anyhow::{bail, Result};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A running tcpdump writing a pcap file.
#[derive(Debug)]
pub struct Capture {
    proc: Proc,
    pcap: PathBuf,
}

impl Capture {
    /// Waits until tcpdump says it listens, so that no packet sent afterwards is missed.
    pub(crate) fn started(proc: Proc, pcap: PathBuf) -> Result<Capture> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !proc.log().contains("listening on") {
            if let Some(st) = proc.exited() {
                bail!("tcpdump exited ({st}): {}", proc.log());
            }
            if Instant::now() > deadline {
                bail!("tcpdump did not start listening within 5 s: {}", proc.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Capture { proc, pcap })
    }

    /// Stops the capture (flushing the file) and returns the pcap's path.
    pub fn stop(self) -> PathBuf {
        // tcpdump -U writes each packet as it comes; SIGTERM makes it close the file cleanly
        std::thread::sleep(Duration::from_millis(200));
        self.proc.stop();
        self.pcap
    }

    /// The pcap path (complete only after `stop`).
    pub fn path(&self) -> &PathBuf {
        &self.pcap
    }
}
