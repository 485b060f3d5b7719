//! Packet captures with tcpdump: the one launcher inside a lab host ([`Capture`], started by
//! [`crate::Lab::capture_snap`]) and the one reader of a pcap's decoded lines ([`read`]).

use crate::Proc;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
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

/// tcpdump's decoded lines of the packets of `pcap` that match `filter` (`tcpdump FLAGS -r PCAP
/// FILTER`); a file cut mid-record is read up to its cut.
pub fn read(pcap: &Path, flags: &[&str], filter: &str) -> Result<String> {
    let out = Command::new("tcpdump")
        .args(flags)
        .arg("-r")
        .arg(pcap)
        .arg(filter)
        .output()
        .context("tcpdump -r")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // tcpdump exits 1 on a truncated file after printing every whole packet: keep what it read.
    if !out.status.success() && text.is_empty() {
        bail!(
            "tcpdump -r {} {filter}: {}",
            pcap.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(text)
}
