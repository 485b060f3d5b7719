//! The lab: a throwaway network of namespaces on this machine, shared by the demo and the
//! end-to-end tests.
//!
//! ```text
//!  client ---------- online ------------ test ------------- test2
//!  198.18.1.2   .1.1      .2.1      198.18.2.2   .3.1    198.18.3.2
//!  fd00:198:18:1::2 ::1   2::1      fd00:198:18:2::2 3::1 fd00:198:18:3::2
//!  (curl, wrk)  (nginx, copier)     (nginx, intercept)   (nginx, intercept)
//! ```
//!
//! Every link has an IPv4 /24 and an IPv6 /64 with the same link number: link N is
//! `198.18.N.0/24` and `fd00:198:18:N::/64` (a unique-local prefix).
//!
//! Invariants this module keeps:
//! - Every namespace of a lab is named `<prefix>-<host>` with a prefix unique to the run
//!   (`tl<pid>x<n>`), so two labs (or two test processes) never collide.
//! - Only addresses from 198.18.0.0/15 and fd00:198:18::/47 are assigned (IPv6 addresses with
//!   `nodad`, usable at once; the kernel adds its own link-local ones), and no namespace has a
//!   route that leaves the lab: the test hosts route the client and fake-client subnets (both
//!   families) back through the link they came from, nothing else.
//! - Dropping a [`Lab`] kills every process it started (and anything else still running in its
//!   namespaces) and deletes the namespaces, also while a panic unwinds. Labs left behind by a
//!   process that was killed outright are swept by the next `Lab::new`.
//! - When a test fails (the lab is dropped while panicking), its work directory is kept, with the
//!   pcap of the test host's link, logs and configs, and its path is printed.

#![deny(missing_docs)]

pub mod bench;
pub mod capture;
pub mod fake;
pub mod fault;
pub mod grpc;
pub mod http;
pub mod leak;
pub mod mirror;
mod netns;
mod nginx;
mod proc;
pub mod procstat;
pub mod setup;

pub use capture::Capture;
pub use nginx::{pattern as pattern_bytes, LogEntry, Nginx, NginxOptions};
pub use proc::Proc;

use anyhow::{bail, Context, Result};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// A host of the lab.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    /// Runs the real clients (curl, wrk).
    Client,
    /// The production front end: the online nginx and the copier.
    Online,
    /// The test server: the test nginx, the intercept and its NFQUEUE rule.
    Test,
    /// A second test host, for cascades.
    Test2,
}

impl Host {
    /// All hosts, in link order.
    pub const ALL: [Host; 4] = [Host::Client, Host::Online, Host::Test, Host::Test2];

    /// Short name, used in namespace names.
    pub fn name(self) -> &'static str {
        match self {
            Host::Client => "client",
            Host::Online => "online",
            Host::Test => "test",
            Host::Test2 => "test2",
        }
    }
}

/// Addresses of the lab: IPv4 in the benchmarking range 198.18.0.0/15, IPv6 in the unique-local
/// fd00:198:18::/48 (links) and fd00:198:19::/48 (fake clients).
pub mod addr {
    use std::net::{Ipv4Addr, Ipv6Addr};
    /// `client` on the client-online link.
    pub const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
    /// `online` on the client-online link: where clients reach production.
    pub const ONLINE: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
    /// `online` on the online-test link: where copies leave from.
    pub const ONLINE_TO_TEST: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 1);
    /// `test` on the online-test link: the test server.
    pub const TEST: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 2);
    /// `test` on the test-test2 link.
    pub const TEST_TO_TEST2: Ipv4Addr = Ipv4Addr::new(198, 18, 3, 1);
    /// `test2`: the second test server.
    pub const TEST2: Ipv4Addr = Ipv4Addr::new(198, 18, 3, 2);
    /// The real clients' subnet.
    pub const CLIENT_NET: &str = "198.18.1.0/24";
    /// Fake client addresses (`copier --client-ip`) come from here; the test hosts route it
    /// back through the link the copies arrive on.
    pub const FAKE_CLIENT_NET: &str = "198.19.0.0/16";

    /// `client` on the client-online link (IPv6).
    pub const CLIENT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x198, 0x18, 1, 0, 0, 0, 2);
    /// `online` on the client-online link (IPv6): where clients reach production.
    pub const ONLINE6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x198, 0x18, 1, 0, 0, 0, 1);
    /// `online` on the online-test link (IPv6): where copies leave from.
    pub const ONLINE_TO_TEST6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x198, 0x18, 2, 0, 0, 0, 1);
    /// `test` on the online-test link (IPv6): the test server.
    pub const TEST6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x198, 0x18, 2, 0, 0, 0, 2);
    /// `test` on the test-test2 link (IPv6).
    pub const TEST_TO_TEST2_6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x198, 0x18, 3, 0, 0, 0, 1);
    /// `test2` (IPv6): the second test server.
    pub const TEST2_6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x198, 0x18, 3, 0, 0, 0, 2);
    /// The real clients' IPv6 subnet.
    pub const CLIENT_NET6: &str = "fd00:198:18:1::/64";
    /// The online-test link's IPv6 subnet.
    pub const TEST_NET6: &str = "fd00:198:18:2::/64";
    /// Fake IPv6 client addresses (`copier --client-ip`); routed back like [`FAKE_CLIENT_NET`].
    pub const FAKE_CLIENT_NET6: &str = "fd00:198:19::/48";
}

/// Interface names inside the namespaces (names are per namespace, so they never collide).
pub mod ifname {
    /// On `client`, toward `online`.
    pub const CLIENT_TO_ONLINE: &str = "to-online";
    /// On `online`, toward `client`.
    pub const ONLINE_TO_CLIENT: &str = "to-client";
    /// On `online`, toward `test`.
    pub const ONLINE_TO_TEST: &str = "to-test";
    /// On `test`, toward `online`.
    pub const TEST_TO_ONLINE: &str = "to-online";
    /// On `test`, toward `test2`.
    pub const TEST_TO_TEST2: &str = "to-test2";
    /// On `test2`, toward `test`.
    pub const TEST2_TO_TEST: &str = "to-test";
}

/// How to build a lab.
#[derive(Clone, Debug)]
pub struct LabOptions {
    /// Leave segmentation offloads on (the default; the copier must cope with super-segments).
    /// `false` runs `ethtool -K DEV tx off tso off gso off gro off` on every link.
    pub offloads: bool,
    /// Keep a pcap of the test host's link toward `online` (kept only when the test fails).
    pub capture_test_link: bool,
}

impl Default for LabOptions {
    fn default() -> Self {
        LabOptions {
            offloads: true,
            capture_test_link: true,
        }
    }
}

/// Why a lab cannot be built here.
#[derive(Debug)]
pub enum Unavailable {
    /// Not running as root.
    NotRoot,
    /// A tool the lab needs is missing.
    MissingTool(&'static str),
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unavailable::NotRoot => write!(f, "the lab needs root (network namespaces)"),
            Unavailable::MissingTool(t) => write!(
                f,
                "the lab needs `{t}` (run scripts/test.sh, which installs it)"
            ),
        }
    }
}

/// Checks that a lab can be built here: root, and the tools it uses.
pub fn available() -> std::result::Result<(), Unavailable> {
    if !nix::unistd::geteuid().is_root() {
        return Err(Unavailable::NotRoot);
    }
    for tool in ["ip", "nginx", "tcpdump", "ethtool", "curl", "iptables"] {
        if which(tool).is_none() {
            return Err(Unavailable::MissingTool(tool));
        }
    }
    Ok(())
}

/// Builds a lab for a test, or, when a lab cannot be built here, skips the test with a loud
/// message; under `CI=true` a skip is a failure (panics).
///
/// Use: `let Some(mut lab) = lab::lab_or_skip("my_test") else { return };`
pub fn lab_or_skip(test: &str) -> Option<Lab> {
    lab_or_skip_with(test, LabOptions::default())
}

/// [`lab_or_skip`] with options.
pub fn lab_or_skip_with(test: &str, opts: LabOptions) -> Option<Lab> {
    if let Err(why) = available() {
        if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
            panic!("{test}: cannot run under CI=true: {why}");
        }
        eprintln!("\n!!!!!!!! SKIPPED {test}: {why} !!!!!!!!\n");
        return None;
    }
    Some(Lab::with(opts).unwrap_or_else(|e| panic!("{test}: building the lab failed: {e:#}")))
}

/// The machine's TCP congestion control (what a lab host has unless
/// [`Lab::set_congestion`] changes it), or `?` when unreadable.
pub fn default_congestion() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".into())
}

/// Finds a program on PATH (and in the sbin directories, which a non-login root shell may lack).
pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file());
    found
}

/// Path of a binary of this workspace (`copier`, `intercept`, `shaper`), built by
/// `cargo build --bins` into the same target directory as the running test or demo.
/// `TC_BIN_DIR` overrides the directory.
pub fn workspace_bin(name: &str) -> Result<PathBuf> {
    let dir = match std::env::var_os("TC_BIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let exe = std::env::current_exe().context("current_exe")?;
            let mut dir = exe.parent().context("exe has no parent")?.to_path_buf();
            // tests run from target/<profile>/deps; the demo from target/<profile>
            if dir.ends_with("deps") {
                dir.pop();
            }
            dir
        }
    };
    let p = dir.join(name);
    if !p.is_file() {
        bail!(
            "{} not found: build the binaries first (`cargo build --bins`), or set TC_BIN_DIR",
            p.display()
        );
    }
    Ok(p)
}

static LAB_COUNTER: AtomicU32 = AtomicU32::new(0);

/// A throwaway network of namespaces; see the module docs.
#[derive(Debug)]
pub struct Lab {
    prefix: String,
    dir: PathBuf,
    procs: Vec<Proc>,
    link_capture: Option<Capture>,
    keep_dir: bool,
}

impl Lab {
    /// Builds the lab with default options (offloads on).
    pub fn new() -> Result<Lab> {
        Lab::with(LabOptions::default())
    }

    /// Builds the lab.
    pub fn with(opts: LabOptions) -> Result<Lab> {
        if let Err(why) = available() {
            bail!("{why}");
        }
        sweep_stale_labs();
        let n = LAB_COUNTER.fetch_add(1, Ordering::SeqCst);
        let prefix = format!("tl{}x{}", std::process::id(), n);
        let dir = std::env::temp_dir().join(format!("lab-{prefix}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        let mut lab = Lab {
            prefix,
            dir,
            procs: Vec::new(),
            link_capture: None,
            keep_dir: false,
        };
        lab.build(&opts)
            .with_context(|| format!("building lab {}", lab.prefix))?;
        if opts.capture_test_link {
            let cap = lab.capture(Host::Test, ifname::TEST_TO_ONLINE, "tcp", "test-link")?;
            lab.link_capture = Some(cap);
        }
        Ok(lab)
    }

    fn build(&mut self, opts: &LabOptions) -> Result<()> {
        for h in Host::ALL {
            run(&["ip", "netns", "add", &self.ns(h)])?;
            self.ip(h, &["link", "set", "lo", "up"])?;
        }
        use addr::*;
        let links = [
            (
                Host::Client,
                ifname::CLIENT_TO_ONLINE,
                CLIENT,
                CLIENT6,
                Host::Online,
                ifname::ONLINE_TO_CLIENT,
                ONLINE,
                ONLINE6,
            ),
            (
                Host::Online,
                ifname::ONLINE_TO_TEST,
                ONLINE_TO_TEST,
                ONLINE_TO_TEST6,
                Host::Test,
                ifname::TEST_TO_ONLINE,
                TEST,
                TEST6,
            ),
            (
                Host::Test,
                ifname::TEST_TO_TEST2,
                TEST_TO_TEST2,
                TEST_TO_TEST2_6,
                Host::Test2,
                ifname::TEST2_TO_TEST,
                TEST2,
                TEST2_6,
            ),
        ];
        for (h1, if1, a1, b1, h2, if2, a2, b2) in links {
            let (ns1, ns2) = (self.ns(h1), self.ns(h2));
            run(&[
                "ip", "link", "add", if1, "netns", &ns1, "type", "veth", "peer", "name", if2,
                "netns", &ns2,
            ])?;
            for (h, ifn, a, b) in [(h1, if1, a1, b1), (h2, if2, a2, b2)] {
                self.ip(h, &["addr", "add", &format!("{a}/24"), "dev", ifn])?;
                // nodad: usable at once, not "tentative" for a second or two
                self.ip(
                    h,
                    &["-6", "addr", "add", &format!("{b}/64"), "dev", ifn, "nodad"],
                )?;
                self.ip(h, &["link", "set", ifn, "up"])?;
                if !opts.offloads {
                    self.exec_ok(
                        h,
                        &[
                            "ethtool", "-K", ifn, "tx", "off", "tso", "off", "gso", "off", "gro",
                            "off",
                        ],
                    )?;
                }
            }
        }
        // Routes back toward the (real and fake) clients, through the link copies arrive on.
        for net in [CLIENT_NET, FAKE_CLIENT_NET] {
            self.ip(
                Host::Test,
                &["route", "add", net, "via", &ONLINE_TO_TEST.to_string()],
            )?;
            self.ip(
                Host::Test2,
                &["route", "add", net, "via", &TEST_TO_TEST2.to_string()],
            )?;
        }
        self.ip(
            Host::Test2,
            &[
                "route",
                "add",
                "198.18.2.0/24",
                "via",
                &TEST_TO_TEST2.to_string(),
            ],
        )?;
        // The same over IPv6: the gateway is on-link, so only it needs neighbour discovery.
        for net in [CLIENT_NET6, FAKE_CLIENT_NET6] {
            self.ip(
                Host::Test,
                &[
                    "-6",
                    "route",
                    "add",
                    net,
                    "via",
                    &ONLINE_TO_TEST6.to_string(),
                ],
            )?;
            self.ip(
                Host::Test2,
                &[
                    "-6",
                    "route",
                    "add",
                    net,
                    "via",
                    &TEST_TO_TEST2_6.to_string(),
                ],
            )?;
        }
        self.ip(
            Host::Test2,
            &[
                "-6",
                "route",
                "add",
                TEST_NET6,
                "via",
                &TEST_TO_TEST2_6.to_string(),
            ],
        )?;
        Ok(())
    }

    /// The namespace name of a host.
    pub fn ns(&self, h: Host) -> String {
        format!("{}-{}", self.prefix, h.name())
    }

    /// This lab's unique prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The lab's work directory (configs, logs, pcaps).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Keep the work directory after the lab is dropped, even when the test passed.
    pub fn keep_dir(&mut self) {
        self.keep_dir = true;
    }

    fn ip(&self, h: Host, args: &[&str]) -> Result<()> {
        let mut full = vec!["ip", "-n"];
        let ns = self.ns(h);
        full.push(&ns);
        full.extend_from_slice(args);
        run(&full)
    }

    /// A `Command` that runs `argv` inside host `h`'s namespace.
    pub fn command(&self, h: Host, argv: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(h)]).args(argv);
        c
    }

    /// Runs a command in a host and returns its output, whatever its exit status.
    pub fn exec(&self, h: Host, argv: &[&str]) -> Result<Output> {
        self.command(h, argv)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("run {argv:?} in {}", self.ns(h)))
    }

    /// Runs a command in a host; fails with its stderr when it exits non-zero. Returns stdout.
    pub fn exec_ok(&self, h: Host, argv: &[&str]) -> Result<String> {
        let out = self.exec(h, argv)?;
        if !out.status.success() {
            bail!(
                "{argv:?} in {} failed ({}): {}",
                self.ns(h),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs a shell script in a host (`sh -c`); fails on a non-zero exit. Returns stdout.
    pub fn sh(&self, h: Host, script: &str) -> Result<String> {
        self.exec_ok(h, &["sh", "-c", script])
    }

    /// Gives both ends of a veth link (`ifn` on `h`, `peer_if` on `peer`) a receive thread of
    /// their own, as two hosts have: each end gets GRO on and threaded NAPI
    /// (`/sys/class/net/IF/threaded`) and TSO off (veth hands a TCP packet to the receiver's
    /// NAPI only when the sending device has no TSO; with it, it runs the receiver's IP and TCP
    /// inside the sender's system call and charges them to the sender). What arrives is then
    /// processed by a kernel thread (`napi/IF-N`). The sender segments its own large packets
    /// (GSO in software) instead.
    pub fn thread_link(&self, h: Host, ifn: &str, peer: Host, peer_if: &str) -> Result<()> {
        for (h, ifn) in [(h, ifn), (peer, peer_if)] {
            self.exec_ok(h, &["ethtool", "-K", ifn, "gro", "on", "tso", "off"])?;
            self.sh(h, &format!("echo 1 > /sys/class/net/{ifn}/threaded"))?;
            let t = self.sh(h, &format!("cat /sys/class/net/{ifn}/threaded"))?;
            if t.trim() != "1" {
                bail!(
                    "{ifn} in {}: threaded NAPI did not take ({})",
                    self.ns(h),
                    t.trim()
                );
            }
        }
        Ok(())
    }

    /// Sets the TCP congestion control of every host (its namespace's
    /// `net.ipv4.tcp_congestion_control`) for the sockets made afterwards: start the servers
    /// after it. A namespace may take only the names of
    /// `/proc/sys/net/ipv4/tcp_allowed_congestion_control`.
    pub fn set_congestion(&self, name: &str) -> Result<()> {
        let setting = format!("net.ipv4.tcp_congestion_control={name}");
        for h in Host::ALL {
            self.exec_ok(h, &["sysctl", "-qw", &setting])
                .with_context(|| format!("congestion control {name:?} in {}", self.ns(h)))?;
        }
        Ok(())
    }

    /// Starts a long-running process in a host. Its stdout and stderr go to `<dir>/<name>.log`;
    /// the lab stops it (SIGTERM, then SIGKILL) when dropped, if it still runs.
    pub fn spawn(&mut self, h: Host, name: &str, argv: &[&str]) -> Result<Proc> {
        let log = self.dir.join(format!("{name}.log"));
        let p = Proc::spawn(self.command(h, argv), name, &log)?;
        self.procs.push(p.clone());
        Ok(p)
    }

    /// Starts nginx in a host with its own config, document root and access log.
    pub fn nginx(&mut self, h: Host, opts: NginxOptions) -> Result<Nginx> {
        let name = format!("nginx-{}-{}", h.name(), opts.port);
        let dir = self.dir.join(&name);
        let (conf, nginx) = Nginx::prepare(&dir, &opts)?;
        let conf = conf.to_string_lossy().into_owned();
        let proc = self.spawn(h, &name, &["nginx", "-c", &conf, "-e", "stderr"])?;
        nginx.wait_ready(self, h, &proc)?;
        Ok(nginx)
    }

    /// Starts tcpdump on an interface of a host keeping the first 256 bytes of each packet
    /// (headers), writing `<dir>/<name>.pcap`; see [`Lab::capture_snap`].
    pub fn capture(&mut self, h: Host, iface: &str, filter: &str, name: &str) -> Result<Capture> {
        self.capture_snap(h, iface, filter, name, 256)
    }

    /// Starts tcpdump on an interface of a host keeping `snaplen` bytes of each packet (0: whole
    /// packets), writing `<dir>/<name>.pcap`, and waits until it listens, so that no packet sent
    /// afterwards is missed. Stop it with [`Capture::stop`] to get a complete file.
    pub fn capture_snap(
        &mut self,
        h: Host,
        iface: &str,
        filter: &str,
        name: &str,
        snaplen: u32,
    ) -> Result<Capture> {
        let pcap = self.dir.join(format!("{name}.pcap"));
        let pcap_s = pcap.to_string_lossy().into_owned();
        let snap = snaplen.to_string();
        let mut argv = vec![
            "tcpdump",
            "-i",
            iface,
            "-n",
            "-U",
            "--immediate-mode",
            "-s",
            &snap,
        ];
        if snaplen == 0 {
            // Whole packets: libpcap's ring (2 MiB by default) holds few frames of a whole
            // snapshot, and a burst on a loaded machine overflowed it (CI: "20 packets dropped
            // by kernel" of a page load's 66, so a replay test lost 4 of 9 requests). 64 MiB.
            argv.extend(["-B", "65536"]);
        }
        argv.extend(["-w", &pcap_s, filter]);
        let proc = self.spawn(h, &format!("tcpdump-{name}"), &argv)?;
        Capture::started(proc, pcap)
    }

    /// Runs `f` on a thread that has entered host `h`'s network namespace: sockets created there
    /// belong to that namespace, whichever thread later uses them.
    pub fn in_ns<F, R>(&self, h: Host, f: F) -> Result<R>
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        netns::in_netns(&self.ns(h), f)
    }

    /// Counts packets of a pcap that match a tcpdump filter.
    pub fn count_packets(pcap: &Path, filter: &str) -> Result<usize> {
        Ok(capture::read(pcap, &["-n"], filter)?.lines().count())
    }

    /// Reads a `/proc/net/snmp`-style TCP counter inside a host (e.g. `TcpExtTCPSynRetrans`
    /// from `nstat`-like files). Returns 0 when absent.
    pub fn netstat_counter(&self, h: Host, name: &str) -> Result<u64> {
        let text = self.sh(h, "cat /proc/net/netstat /proc/net/snmp")?;
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.chunks(2) {
            if pair.len() < 2 {
                continue;
            }
            let keys: Vec<&str> = pair[0].split_whitespace().collect();
            let vals: Vec<&str> = pair[1].split_whitespace().collect();
            let prefix = keys.first().map(|k| k.trim_end_matches(':')).unwrap_or("");
            for (k, v) in keys.iter().zip(vals.iter()).skip(1) {
                if format!("{prefix}{k}") == name || *k == name {
                    return Ok(v.parse().unwrap_or(0));
                }
            }
        }
        Ok(0)
    }

    /// Stops the test-link capture (if any) and returns the pcap path.
    pub fn stop_link_capture(&mut self) -> Option<PathBuf> {
        self.link_capture.take().map(|c| c.stop())
    }

    /// Address of the online service as clients see it.
    pub fn online_addr(&self) -> Ipv4Addr {
        addr::ONLINE
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(c) = self.link_capture.take() {
            c.stop();
        }
        for p in self.procs.iter().rev() {
            p.stop();
        }
        for h in Host::ALL {
            destroy_ns(&self.ns(h));
        }
        if std::thread::panicking() || self.keep_dir {
            eprintln!(
                "lab {}: kept its work directory (logs, configs, pcaps): {}",
                self.prefix,
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Kills whatever still runs in a namespace, then deletes it. Errors are ignored: this runs in
/// `Drop`, and each step is retried by the sweep of the next lab.
fn destroy_ns(ns: &str) {
    for _ in 0..3 {
        let pids = Command::new("ip").args(["netns", "pids", ns]).output();
        let Ok(out) = pids else { break };
        let list = String::from_utf8_lossy(&out.stdout).into_owned();
        if list.trim().is_empty() {
            break;
        }
        for pid in list
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = Command::new("ip")
        .args(["netns", "del", ns])
        .stderr(Stdio::null())
        .status();
}

/// Deletes the namespaces of labs whose process no longer exists.
fn sweep_stale_labs() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix("tl") else {
            continue;
        };
        let Some((pid, _)) = rest.split_once('x') else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("lab: removing namespace {name} left by a process that is gone");
            destroy_ns(name);
        }
    }
}

/// Lists this machine's namespaces whose name starts with `prefix`.
pub fn namespaces_with_prefix(prefix: &str) -> Vec<String> {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return vec![];
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

pub(crate) fn run(argv: &[&str]) -> Result<()> {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("run {argv:?}"))?;
    if !out.status.success() {
        bail!(
            "{argv:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
