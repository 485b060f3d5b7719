//! A copying setup in a lab: nginx on `online` and `test`, the intercept on `test` (installing
//! its NFQUEUE rules, iptables and ip6tables), the copier on `online` mapping port 80 to the test
//! nginx: IPv4 clients to its IPv4 address, IPv6 clients to its IPv6 address. Shared by the demo
//! and the end-to-end tests, so both run the system the same way.

use crate::leak::LeakCounter;
use crate::{addr, ifname, workspace_bin, Capture, Host, Lab, LogEntry, Nginx, NginxOptions, Proc};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Port of the intercept's control listener in the lab.
pub const CONTROL_PORT: u16 = 36524;

/// What to start.
#[derive(Clone, Debug)]
pub struct CopyOptions {
    /// The online nginx.
    pub online: NginxOptions,
    /// The test nginx; `None` leaves the test server down.
    pub test: Option<NginxOptions>,
    /// Extra arguments for the copier.
    pub copier_args: Vec<String>,
    /// Extra arguments for the intercept.
    pub intercept_args: Vec<String>,
    /// Service ports on the test host besides nginx's 80 (e.g. a redis on 6379): the intercept
    /// guards each (`--port`), and the leak counter counts responses from each. The copier's
    /// `--map` for them goes in `copier_args`.
    pub extra_ports: Vec<u16>,
    /// Start the copier right away (otherwise call [`Copying::start_copier`]).
    pub start_copier: bool,
    /// Also copy IPv6 clients (a second `--map` to the test server's IPv6 address). Turn it off
    /// when `copier_args` holds an IPv4 `--client-ip`, whose family every map must share.
    pub ipv6: bool,
    /// The intercept adds (and removes) its rules itself (`--install-rules`); off: the test
    /// puts the NFQUEUE rules in place before [`Copying::start`], as an operator would.
    pub install_rules: bool,
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            online: NginxOptions::default(),
            test: Some(NginxOptions::default()),
            copier_args: Vec::new(),
            intercept_args: Vec::new(),
            extra_ports: Vec::new(),
            start_copier: true,
            ipv6: true,
            install_rules: true,
        }
    }
}

/// A running copying setup.
#[derive(Debug)]
pub struct Copying {
    /// The online nginx.
    pub online: Nginx,
    /// The test nginx (absent when the test server is down).
    pub test: Option<Nginx>,
    /// The intercept process.
    pub intercept: Proc,
    /// The copier process, once started.
    pub copier: Option<Proc>,
    /// Counts responses that leave the test host toward clients (see [`crate::leak`]).
    pub leaks: LeakCounter,
    secret: PathBuf,
    opts: CopyOptions,
    intercept_runs: u32,
    /// Set by [`Copying::stop_ours`]: the copier and the intercept were stopped on purpose.
    stopped: bool,
}

impl Copying {
    /// Starts nginx on both hosts and the intercept (serving metrics on `metrics` inside the
    /// test host), but no copier: for tests that drive a fake one ([`crate::fake`]).
    pub fn intercept_only(lab: &mut Lab, metrics: &str) -> Result<Copying> {
        let opts = CopyOptions {
            start_copier: false,
            intercept_args: vec!["--metrics".into(), metrics.into()],
            ..CopyOptions::default()
        };
        Copying::start(lab, opts)
    }

    /// Starts nginx on both hosts, the intercept, and (unless told not to) the copier.
    pub fn start(lab: &mut Lab, opts: CopyOptions) -> Result<Copying> {
        let online = lab.nginx(Host::Online, opts.online.clone())?;
        let test = match &opts.test {
            Some(o) => Some(lab.nginx(Host::Test, o.clone())?),
            None => None,
        };
        let secret = lab.dir().join("secret");
        write_secret(&secret)?;
        let ports: Vec<u16> = std::iter::once(80)
            .chain(opts.extra_ports.iter().copied())
            .collect();
        let leaks = LeakCounter::install(lab, Host::Test, &ports)?;
        let mut c = Copying {
            leaks,
            online,
            test,
            intercept: start_intercept(lab, &secret, &intercept_args(&opts), 0)?,
            copier: None,
            secret,
            opts,
            intercept_runs: 1,
            stopped: false,
        };
        if c.opts.start_copier {
            c.start_copier(lab)?;
        }
        Ok(c)
    }

    /// Starts the copier (once).
    pub fn start_copier(&mut self, lab: &mut Lab) -> Result<()> {
        if self.copier.is_some() {
            bail!("the copier is already running");
        }
        let bin = workspace_bin("copier")?;
        let map = format!("80={}:80", addr::TEST);
        let map6 = format!("80=[{}]:80", addr::TEST6);
        let icpt = format!("{}:{CONTROL_PORT}", addr::TEST);
        let secret = self.secret.to_string_lossy().into_owned();
        let mut argv: Vec<String> = vec![
            "env".into(),
            "RUST_LOG=info".into(),
            bin.to_string_lossy().into_owned(),
            "--map".into(),
            map,
        ];
        if self.opts.ipv6 {
            argv.extend(["--map".into(), map6]);
        }
        argv.extend([
            "--intercept".into(),
            icpt,
            "--secret-file".into(),
            secret,
            "--interface".into(),
            ifname::ONLINE_TO_CLIENT.into(),
        ]);
        argv.extend(self.opts.copier_args.iter().cloned());
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        let p = lab.spawn(Host::Online, "copier", &refs)?;
        wait_log(&p, "connected to intercept", Duration::from_secs(10))
            .context("copier did not connect to the intercept")?;
        self.copier = Some(p);
        Ok(())
    }

    /// Starts one more copier, as `name` (log `<name>.log`), with `args` (its `--map`s and its
    /// packet source, e.g. `--offline FILE`) plus this setup's `--intercept` and `--secret-file`,
    /// and waits until it is connected to the intercept. It is not kept in [`Copying::copier`],
    /// so a test may run several in turn (offline replays end by themselves).
    pub fn spawn_copier(&self, lab: &mut Lab, name: &str, args: &[&str]) -> Result<Proc> {
        self.spawn_copier_in(lab, Host::Online, name, args)
    }

    /// [`Copying::spawn_copier`] on host `h` (e.g. a mirror host, [`crate::mirror`]).
    pub fn spawn_copier_in(
        &self,
        lab: &mut Lab,
        h: Host,
        name: &str,
        args: &[&str],
    ) -> Result<Proc> {
        let bin = workspace_bin("copier")?.to_string_lossy().into_owned();
        let icpt = format!("{}:{CONTROL_PORT}", addr::TEST);
        let secret = self.secret.to_string_lossy().into_owned();
        let mut argv: Vec<&str> = vec![
            "env",
            "RUST_LOG=info",
            &bin,
            "--intercept",
            &icpt,
            "--secret-file",
            &secret,
        ];
        argv.extend_from_slice(args);
        let p = lab.spawn(h, name, &argv)?;
        wait_log(&p, "connected to intercept", Duration::from_secs(10))
            .with_context(|| format!("{name} did not connect to the intercept"))?;
        Ok(p)
    }

    /// Stops the intercept and starts it again with `extra` flags added to this setup's (for
    /// tests of an intercept flag).
    pub fn restart_intercept_with(&mut self, lab: &mut Lab, extra: &[&str]) -> Result<()> {
        self.intercept.stop();
        let mut args = intercept_args(&self.opts);
        args.extend(extra.iter().map(|a| a.to_string()));
        self.intercept = start_intercept(lab, &self.secret, &args, self.intercept_runs)?;
        self.intercept_runs += 1;
        Ok(())
    }

    /// Stops the intercept and starts it again (for restart tests).
    pub fn restart_intercept(&mut self, lab: &mut Lab) -> Result<()> {
        self.intercept.stop();
        self.intercept = start_intercept(
            lab,
            &self.secret,
            &intercept_args(&self.opts),
            self.intercept_runs,
        )?;
        self.intercept_runs += 1;
        Ok(())
    }

    /// Response packets of the test service that left the test host toward a client so far
    /// (a kernel counter: none can be missed). Panics if the counter cannot be read.
    pub fn leaked(&self, lab: &Lab) -> u64 {
        self.leaks.count(lab).expect("read the leak counter")
    }

    /// Asserts that no response of the test service left the test host toward a client (the
    /// kernel counter of [`Copying::leaked`]), and stops the link capture, whose pcap is kept
    /// with the failed test's files.
    pub fn assert_no_leak(&self, lab: &mut Lab) {
        let leaked = self.leaked(lab);
        let pcap = lab.stop_link_capture();
        assert_eq!(
            leaked, 0,
            "{leaked} response packets left the test host toward clients (link capture: {pcap:?})"
        );
    }

    /// Waits for the test server to have as many requests as online, then for quiet (to catch
    /// any extra copy), and asserts that it received exactly the online requests (method, URI,
    /// length, body hash; see [`fingerprints`]) and that nothing leaked. nginx logs a request
    /// when its response is complete, so a 10 MB answer through NFQUEUE takes seconds: the
    /// count is waited for first. Returns the number of requests compared.
    pub fn assert_copied_exactly(&self, lab: &mut Lab) -> usize {
        self.test()
            .wait_requests(self.online.request_count(), Duration::from_secs(60));
        self.settle(Duration::from_secs(1), Duration::from_secs(30));
        self.check_alive().unwrap();
        let online = self.online.requests().unwrap();
        let test = self.test().requests().unwrap();
        let diff = diff_fingerprints(&fingerprints(&online), &fingerprints(&test));
        let log = self
            .copier
            .as_ref()
            .map(|p| tail(&p.log(), 30))
            .unwrap_or_default();
        assert!(
            diff.is_empty(),
            "the test server did not receive exactly the online requests ({} online, {} test):\n{diff}\ncopier log:\n{log}",
            online.len(),
            test.len(),
        );
        self.assert_no_leak(lab);
        online.len()
    }

    /// The test nginx (panics when the setup has none).
    pub fn test(&self) -> &Nginx {
        self.test.as_ref().expect("this setup has no test nginx")
    }

    /// Waits until the test server's request count stops growing (no new request for `quiet`),
    /// at most `timeout`.
    pub fn settle(&self, quiet: Duration, timeout: Duration) -> usize {
        self.test
            .as_ref()
            .map(|t| t.wait_settled(quiet, timeout))
            .unwrap_or(0)
    }

    /// Stops the copier and the intercept and removes the NFQUEUE rules of the test host's
    /// OUTPUT chain (the intercept leaves them while sessions are open), so that another tool
    /// can copy in the same lab; [`Copying::check_alive`] no longer checks them.
    pub fn stop_ours(&mut self, lab: &Lab) -> Result<()> {
        if let Some(c) = self.copier.take() {
            c.stop();
        }
        self.intercept.stop();
        self.stopped = true;
        // the intercept keeps its rules at exit while sessions were open (fail closed)
        for cmd in ["iptables", "ip6tables"] {
            let rules = lab.exec_ok(Host::Test, &[cmd, "-S", "OUTPUT"])?;
            for rule in rules.lines().filter(|l| l.contains("NFQUEUE")) {
                let Some(spec) = rule.strip_prefix("-A ") else {
                    continue;
                };
                let mut argv = vec![cmd, "-D"];
                argv.extend(spec.split_whitespace());
                lab.exec_ok(Host::Test, &argv)?;
            }
        }
        let rules = lab.sh(Host::Test, "iptables -S OUTPUT; ip6tables -S OUTPUT")?;
        if rules.contains("NFQUEUE") {
            bail!("NFQUEUE rules left on test:\n{rules}");
        }
        Ok(())
    }

    /// Whether [`Copying::stop_ours`] stopped the copier and the intercept.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Checks that the process is still running; fails with its log otherwise.
    pub fn check_alive(&self) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        for p in [Some(&self.intercept), self.copier.as_ref()]
            .into_iter()
            .flatten()
        {
            if let Some(st) = p.exited() {
                bail!("{} exited ({st}):\n{}", p.name(), tail(&p.log(), 40));
            }
        }
        Ok(())
    }
}

/// The intercept's extra arguments: a `--port` per extra port, then `intercept_args`.
fn intercept_args(opts: &CopyOptions) -> Vec<String> {
    let ports = opts
        .extra_ports
        .iter()
        .flat_map(|p| ["--port".to_owned(), p.to_string()]);
    let install = opts.install_rules.then(|| "--install-rules".to_owned());
    ports
        .chain(install)
        .chain(opts.intercept_args.iter().cloned())
        .collect()
}

fn start_intercept(
    lab: &mut Lab,
    secret: &std::path::Path,
    extra: &[String],
    run: u32,
) -> Result<Proc> {
    let bin = workspace_bin("intercept")?;
    let listen = format!("{}:{CONTROL_PORT}", addr::TEST);
    let mut argv: Vec<String> = vec![
        "env".into(),
        "RUST_LOG=info".into(),
        bin.to_string_lossy().into_owned(),
        "--port".into(),
        "80".into(),
        "--listen".into(),
        listen,
        "--secret-file".into(),
        secret.to_string_lossy().into_owned(),
        "--allow".into(),
        format!("{},{}", addr::ONLINE_TO_TEST, addr::ONLINE_TO_TEST6),
    ];
    argv.extend(extra.iter().cloned());
    let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
    let name = if run == 0 {
        "intercept".to_owned()
    } else {
        format!("intercept-{run}")
    };
    let p = lab.spawn(Host::Test, &name, &refs)?;
    // ready when it listens on the control port
    let deadline = Instant::now() + Duration::from_secs(10);
    let want = format!(":{CONTROL_PORT} ");
    loop {
        if let Some(st) = p.exited() {
            bail!("intercept exited ({st}):\n{}", tail(&p.log(), 40));
        }
        let ss = lab
            .exec_ok(Host::Test, &["ss", "-Hltn"])
            .unwrap_or_default();
        if ss.lines().any(|l| l.contains(&want)) {
            return Ok(p);
        }
        if Instant::now() > deadline {
            bail!(
                "intercept did not listen within 10 s:\n{}",
                tail(&p.log(), 40)
            );
        }
        std::thread::sleep(Duration::from_millis(30));
    }
}

/// Starts tcpdump on an interface of a host keeping whole packets (`-s 0`; [`Lab::capture`]
/// keeps only headers), writing `<dir>/<name>.pcap`, and waits until it listens. Stop it with
/// [`Capture::stop`] to get a complete file.
pub fn capture_whole_packets(
    lab: &mut Lab,
    h: Host,
    iface: &str,
    filter: &str,
    name: &str,
) -> Result<Capture> {
    lab.capture_snap(h, iface, filter, name, 0)
}

/// Waits until a process's log contains `needle` at least `n` times.
pub fn wait_log_count(p: &Proc, needle: &str, n: usize, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let log = p.log();
        if log.matches(needle).count() >= n {
            return Ok(());
        }
        if let Some(st) = p.exited() {
            bail!("{} exited ({st}):\n{}", p.name(), tail(&log, 40));
        }
        if Instant::now() > deadline {
            bail!(
                "{needle:?} not {n} times in the log of {} within {timeout:?}:\n{}",
                p.name(),
                tail(&log, 40)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until a process's log contains `needle`.
pub fn wait_log(p: &Proc, needle: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let log = p.log();
        if log.contains(needle) {
            return Ok(());
        }
        if let Some(st) = p.exited() {
            bail!("{} exited ({st}):\n{}", p.name(), tail(&log, 40));
        }
        if Instant::now() > deadline {
            bail!(
                "{:?} not in the log of {} within {timeout:?}:\n{}",
                needle,
                p.name(),
                tail(&log, 40)
            );
        }
        std::thread::sleep(Duration::from_millis(30));
    }
}

/// The last `n` lines of a text.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Requests as a multiset of fingerprints (method, URI, request length, body hash).
pub fn fingerprints(entries: &[LogEntry]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for e in entries {
        *m.entry(e.fingerprint()).or_insert(0) += 1;
    }
    m
}

/// Describes how two request multisets differ (empty when equal).
pub fn diff_fingerprints(
    online: &BTreeMap<String, usize>,
    test: &BTreeMap<String, usize>,
) -> String {
    let mut out = String::new();
    for (k, &n) in online {
        let t = test.get(k).copied().unwrap_or(0);
        if t != n {
            out.push_str(&format!("  {k}: online {n}, test {t}\n"));
        }
    }
    for (k, &t) in test {
        if !online.contains_key(k) {
            out.push_str(&format!("  {k}: online 0, test {t}\n"));
        }
    }
    out
}

/// Writes the lab's shared secret to `path`, readable by its owner only (the daemons refuse a
/// secret file that others can read).
pub fn write_secret(path: &std::path::Path) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(crate::fake::SECRET)?;
    f.write_all(b"\n")?;
    Ok(())
}

/// Scrapes a Prometheus endpoint served inside host `h` (e.g. `127.0.0.1:9465`), after waiting
/// 1.5 s: the daemons publish their counters about once a second. Empty when unreachable.
pub fn scrape_metrics(lab: &Lab, h: Host, addr: &str) -> String {
    std::thread::sleep(Duration::from_millis(1500));
    lab.exec_ok(
        h,
        &[
            "curl",
            "-sS",
            "--max-time",
            "3",
            &format!("http://{addr}/metrics"),
        ],
    )
    .unwrap_or_default()
}

/// Scrapes `addr` in host `h` until the sum of metric `name` over the lines containing all of
/// `needles` reaches `min` (a condition, not a fixed wait); returns the last scrape. Fails with
/// the last scrape after `timeout`.
pub fn wait_metric(
    lab: &Lab,
    h: Host,
    addr: &str,
    name: &str,
    needles: &[&str],
    min: f64,
    timeout: Duration,
) -> Result<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let text = lab
            .exec_ok(
                h,
                &[
                    "curl",
                    "-sS",
                    "--max-time",
                    "3",
                    &format!("http://{addr}/metrics"),
                ],
            )
            .unwrap_or_default();
        if metric_sum(&text, name, needles) >= min {
            return Ok(text);
        }
        if Instant::now() > deadline {
            bail!("{name}{needles:?} did not reach {min} within {timeout:?}:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sum of every sample of metric `name` (exact name, any labels) whose line contains all of
/// `needles`.
pub fn metric_sum(text: &str, name: &str, needles: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The value of one series, written exactly as exported (e.g.
/// `copier_sessions_started_total{worker="1"}`); 0 when absent.
pub fn metric_sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

/// Short sessions from the client to the online nginx (one request `/index.html?s=<i>` each,
/// closed by the client), started at `rate(t)` a second (`t`: seconds since the first) for
/// `secs` seconds.
pub fn paced_sessions(lab: &Lab, rate: impl Fn(f64) -> f64 + Send, secs: f64) {
    lab.in_ns(Host::Client, move || {
        let to = std::net::SocketAddr::V4(std::net::SocketAddrV4::new(addr::ONLINE, 80));
        let start = Instant::now();
        let mut i = 0u64;
        let mut due = 0.0;
        while due < secs {
            if let Some(wait) =
                (start + Duration::from_secs_f64(due)).checked_duration_since(Instant::now())
            {
                std::thread::sleep(wait);
            }
            let mut s = std::net::TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            crate::http::get(&mut s, &format!("/index.html?s={i}"));
            drop(s);
            i += 1;
            due += 1.0 / rate(due);
        }
    })
    .unwrap();
}

/// Bytes the copier on `online` has received on its control connections to the intercept on
/// `test` (`ss`'s `bytes_received` of those sockets): records, answer payload and verdicts.
pub fn control_bytes_received(lab: &Lab) -> u64 {
    let out = lab
        .exec_ok(
            Host::Online,
            &[
                "ss",
                "-Htin",
                "dst",
                &format!("{}:{CONTROL_PORT}", addr::TEST),
            ],
        )
        .unwrap_or_default();
    out.split_whitespace()
        .filter_map(|w| w.strip_prefix("bytes_received:"))
        .filter_map(|v| v.parse::<u64>().ok())
        .sum()
}

/// The small JSON shop the comparison tests copy (gzip on for JSON): version 1 answers
/// `/items/N` with a price of `$1.00` and `/orders/N` with 200 and the order; version 2 changes
/// the price to `$1.50` and answers `/orders/N` with 500; `/health` is the same in both.
#[must_use]
pub fn shop_nginx(version: u8) -> NginxOptions {
    let price = if version == 2 { "$1.50" } else { "$1.00" };
    let orders = if version == 2 {
        r#"return 500 '{"error":"boom"}';"#
    } else {
        r#"return 200 '{"order":$1,"state":"ok"}';"#
    };
    NginxOptions {
        server_extra: format!(
            r#"gzip on; gzip_types application/json; gzip_min_length 1; gzip_comp_level 1;
            location ~ ^/items/(\d+)$ {{ default_type application/json; return 200 '{{"id":$1,"price":"{price}","name":"item $1"}}'; }}
            location ~ ^/orders/(\d+)$ {{ default_type application/json; {orders} }}
            location = /health {{ default_type application/json; return 200 '{{"ok":true}}'; }}
"#
        ),
        ..NginxOptions::default()
    }
}

/// A redis on `h` (port 6379, no persistence), with its process kept by the lab.
pub fn start_redis(lab: &mut Lab, h: Host) {
    let dir = lab.dir().join(format!("redis-{}", h.name()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display().to_string();
    let argv = [
        "redis-server",
        "--port",
        "6379",
        "--bind",
        "0.0.0.0",
        "--protected-mode",
        "no",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        &d,
    ];
    lab.spawn(h, &format!("redis-{}", h.name()), &argv).unwrap();
    let ping = ["redis-cli", "-h", "127.0.0.1", "PING"];
    let up = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        lab.exec_ok(h, &ping).is_ok_and(|o| o.trim() == "PONG")
    });
    assert!(up, "redis on {} did not start", h.name());
}
