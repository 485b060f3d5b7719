//! nginx in a lab host: its own config, document root and access log, with a log format that
//! lets a test compare the requests two servers received (method, path, request length, and the
//! SHA-256 of each request body).
//!
//! Bodies: `POST`/`PUT` to `/upload...` are read in full by nginx (proxied to an internal sink
//! on a unix socket) and kept in a file (`client_body_in_file_only on`), whose path the access
//! log records; [`Nginx::requests`] hashes them.

use crate::{Host, Lab, Proc};
use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How to configure an nginx.
#[derive(Clone, Debug)]
pub struct NginxOptions {
    /// TCP port to listen on (all addresses of the host, IPv4 and IPv6).
    pub port: u16,
    /// Files to put in the document root: (path below the root, size in bytes). The content is
    /// a fixed pattern ([`pattern`]). `index.html` is always there (a short page).
    pub files: Vec<(String, usize)>,
    /// Worker processes.
    pub workers: u32,
    /// Requests served on one keep-alive connection before nginx closes it.
    pub keepalive_requests: u32,
    /// More configuration inside the `server` block (locations, `add_header`, `gzip`...),
    /// placed before the catch-all `location /`.
    pub server_extra: String,
    /// Serve cleartext HTTP/2 with prior knowledge on `port` (`listen PORT http2`) instead of
    /// HTTP/1.x.
    pub http2: bool,
}

impl Default for NginxOptions {
    fn default() -> Self {
        NginxOptions {
            port: 80,
            files: Vec::new(),
            workers: 1,
            keepalive_requests: 1_000_000,
            server_extra: String::new(),
            http2: false,
        }
    }
}

/// Deterministic file content: byte `i` is `(i * 31 + 7) % 251`.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + 7) % 251) as u8).collect()
}

/// A running nginx.
#[derive(Debug, Clone)]
pub struct Nginx {
    dir: PathBuf,
    port: u16,
}

/// One line of the access log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Client address as nginx saw it.
    pub remote_addr: String,
    /// Client port.
    pub remote_port: u16,
    /// nginx's connection serial number.
    pub connection: u64,
    /// Index of this request on its connection (1 = first).
    pub connection_requests: u64,
    /// Request method.
    pub method: String,
    /// Response status.
    pub status: u16,
    /// Request length (request line, headers and body) in bytes.
    pub request_length: u64,
    /// Response body bytes sent.
    pub body_bytes_sent: u64,
    /// Request URI (path and query).
    pub uri: String,
    /// Length and SHA-256 (hex) of the request body, when nginx read one.
    pub body: Option<(u64, String)>,
    /// When nginx logged the request (`$msec`), in milliseconds since the Unix epoch; `None`
    /// for a line without it.
    pub msec: Option<u64>,
    /// The request's `X-Traffic-Copy` header (the copier's default dye header), if it had one.
    pub dye: Option<String>,
}

impl LogEntry {
    /// What must be identical between a request served online and its copy: method, URI,
    /// request length and body.
    pub fn fingerprint(&self) -> String {
        let body = self
            .body
            .as_ref()
            .map(|(l, h)| format!("{l}:{h}"))
            .unwrap_or_else(|| "-".into());
        format!(
            "{} {} {} {}",
            self.method, self.uri, self.request_length, body
        )
    }
}

impl Nginx {
    pub(crate) fn prepare(dir: &Path, opts: &NginxOptions) -> Result<(PathBuf, Nginx)> {
        let root = dir.join("root");
        let body = dir.join("body");
        for d in [&root, &body, &dir.join("tmp")] {
            std::fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
        }
        std::fs::write(
            root.join("index.html"),
            b"<html><body>lab nginx</body></html>\n",
        )?;
        for (path, size) in &opts.files {
            let p = root.join(path.trim_start_matches('/'));
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&p, pattern(*size)).with_context(|| format!("write {}", p.display()))?;
        }
        let d = dir.display();
        let mut conf = String::new();
        write!(
            conf,
            r#"user root;
worker_processes {workers};
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_max_body_size 256m;
    log_format lab '$remote_addr $remote_port $connection $connection_requests $request_method $status $request_length $body_bytes_sent "$request_body_file" "$request_uri" $msec "$http_x_traffic_copy"';
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi; uwsgi_temp_path {d}/tmp/uwsgi; scgi_temp_path {d}/tmp/scgi;
    keepalive_requests {keepalive_requests};
    keepalive_timeout 300s;
    sendfile on;
    server {{
        listen {port} reuseport backlog=4096{h2};
        listen [::]:{port} reuseport backlog=4096 ipv6only=on{h2};
        access_log {d}/access.log lab;
        root {d}/root;
        {server_extra}
        location / {{ }}
        location /upload {{
            client_max_body_size 256m;
            client_body_in_file_only on;
            proxy_pass http://unix:{d}/sink.sock:/;
            proxy_set_header Content-Length $content_length;
        }}
    }}
    server {{
        listen unix:{d}/sink.sock;
        access_log off;
        location / {{ return 200 "stored\n"; }}
    }}
}}
"#,
            workers = opts.workers.max(1),
            port = opts.port,
            keepalive_requests = opts.keepalive_requests,
            server_extra = opts.server_extra,
            h2 = if opts.http2 { " http2" } else { "" },
        )?;
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf)?;
        Ok((
            conf_path,
            Nginx {
                dir: dir.to_owned(),
                port: opts.port,
            },
        ))
    }

    pub(crate) fn wait_ready(&self, lab: &Lab, h: Host, proc: &Proc) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let want = format!(":{} ", self.port);
        loop {
            if let Some(st) = proc.exited() {
                bail!("nginx in {} exited ({st}): {}", h.name(), proc.log());
            }
            let ss = lab.exec_ok(h, &["ss", "-Hltn"]).unwrap_or_default();
            if ss.lines().any(|l| l.contains(&want)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "nginx in {} did not listen on port {} within 10 s: {}",
                    h.name(),
                    self.port,
                    proc.log()
                );
            }
            std::thread::sleep(Duration::from_millis(30));
        }
    }

    /// Stops this nginx (SIGTERM to its master, as a service manager's restart does: open
    /// connections are closed), waits until it is gone, leaves it down for `down`, and starts
    /// it again on the same configuration, document root and access log (appended to).
    pub fn restart(&self, lab: &mut Lab, h: Host, down: Duration) -> Result<()> {
        let pid_file = self.dir.join("nginx.pid");
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .with_context(|| format!("read {}", pid_file.display()))?
            .trim()
            .parse()
            .with_context(|| format!("{} holds no pid", pid_file.display()))?;
        let pid = nix::unistd::Pid::from_raw(pid);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)
            .context("SIGTERM to nginx")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        // Gone: no such process, or a zombie (nginx is a child of the test process, reaped later
        // by its `Proc`).
        let alive = || {
            nix::sys::signal::kill(pid, None).is_ok()
                && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .unwrap_or_default()
                    .rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        };
        while alive() {
            if Instant::now() > deadline {
                bail!("nginx (pid {pid}) did not stop within 10 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(down);
        let name = format!("nginx-{}-{}-again", h.name(), self.port);
        let conf = self.dir.join("nginx.conf").to_string_lossy().into_owned();
        let proc = lab.spawn(h, &name, &["nginx", "-c", &conf, "-e", "stderr"])?;
        self.wait_ready(lab, h, &proc)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The access log's path.
    pub fn access_log(&self) -> PathBuf {
        self.dir.join("access.log")
    }

    /// The document root.
    pub fn docroot(&self) -> PathBuf {
        self.dir.join("root")
    }

    /// Every request logged so far, in log order (nginx writes a line when a request completes).
    pub fn requests(&self) -> Result<Vec<LogEntry>> {
        let text = match std::fs::read_to_string(self.access_log()) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).context("read access log"),
        };
        text.lines()
            .enumerate()
            .map(|(i, l)| {
                parse_line(l).with_context(|| format!("access log line {}: {l:?}", i + 1))
            })
            .collect()
    }

    /// Number of requests logged so far.
    pub fn request_count(&self) -> usize {
        std::fs::read_to_string(self.access_log())
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    /// Waits until the log holds at least `n` requests or `timeout` passes; returns the count.
    pub fn wait_requests(&self, n: usize, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            let c = self.request_count();
            if c >= n || Instant::now() >= deadline {
                return c;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the request count stops growing for `quiet`, at most `timeout`.
    pub fn wait_settled(&self, quiet: Duration, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        let mut last = self.request_count();
        let mut since = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(50));
            let c = self.request_count();
            if c != last {
                last = c;
                since = Instant::now();
            } else if since.elapsed() >= quiet || Instant::now() >= deadline {
                return c;
            }
        }
    }
}

fn parse_line(line: &str) -> Result<LogEntry> {
    // 8 space-separated fields, then "body_file" "uri", then (optional) msec and "dye"
    let mut it = line.splitn(9, ' ');
    let mut next = |what: &str| it.next().with_context(|| format!("missing {what}"));
    let remote_addr = next("remote_addr")?.to_owned();
    let remote_port = next("remote_port")?.parse().context("remote_port")?;
    let connection = next("connection")?.parse().context("connection")?;
    let connection_requests = next("connection_requests")?
        .parse()
        .context("connection_requests")?;
    let method = next("method")?.to_owned();
    let status = next("status")?.parse().context("status")?;
    let request_length = next("request_length")?.parse().context("request_length")?;
    let body_bytes_sent = next("body_bytes_sent")?
        .parse()
        .context("body_bytes_sent")?;
    let rest = next("body file and uri")?;
    let rest = rest.strip_prefix('"').context("body file not quoted")?;
    let (body_file, rest) = rest.split_once("\" \"").context("uri not quoted")?;
    // nginx writes a quote inside a value as \x22: the first quote ends the URI.
    let (uri, tail) = rest.split_once('"').context("uri not closed")?;
    let uri = uri.to_owned();
    let (tail, dye) = match tail.trim().split_once(" \"") {
        Some((t, d)) => {
            let d = d.strip_suffix('"').context("dye header not closed")?;
            (t, (d != "-").then(|| d.to_owned()))
        }
        None => (tail, None),
    };
    let msec = match tail.trim() {
        "" => None,
        t => {
            let (s, ms) = t.split_once('.').unwrap_or((t, "000"));
            let ms = format!("{ms:0<3}");
            Some(
                s.parse::<u64>().context("msec")? * 1000
                    + ms[..3].parse::<u64>().context("msec")?,
            )
        }
    };
    let body = if body_file.is_empty() || body_file == "-" {
        None
    } else {
        let data =
            std::fs::read(body_file).with_context(|| format!("read body file {body_file}"))?;
        let hash = Sha256::digest(&data);
        let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
        Some((data.len() as u64, hex))
    };
    Ok(LogEntry {
        remote_addr,
        remote_port,
        connection,
        connection_requests,
        method,
        status,
        request_length,
        body_bytes_sent,
        uri,
        body,
        msec,
        dye,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_log_line() {
        let e = parse_line(r#"198.18.1.2 40000 7 3 GET 200 77 36 "" "/index.html?a=b""#).unwrap();
        assert_eq!(e.remote_addr, "198.18.1.2");
        assert_eq!(e.remote_port, 40000);
        assert_eq!(e.connection, 7);
        assert_eq!(e.connection_requests, 3);
        assert_eq!(e.msec, None, "a line without $msec");
        let e =
            parse_line(r#"198.18.1.2 40000 7 3 GET 200 77 36 "" "/index.html?a=b" 1764480000.123"#)
                .unwrap();
        assert_eq!(
            (e.uri.as_str(), e.msec),
            ("/index.html?a=b", Some(1_764_480_000_123))
        );
        let d = parse_line(r#"198.18.1.2 40000 7 3 GET 200 77 36 "" "/" 1764480000.123 "copy-0""#)
            .unwrap();
        assert_eq!(
            (d.msec, d.dye.as_deref()),
            (Some(1_764_480_000_123), Some("copy-0"))
        );
        let d =
            parse_line(r#"198.18.1.2 40000 7 3 GET 200 77 36 "" "/" 1764480000.123 "-""#).unwrap();
        assert_eq!((d.uri.as_str(), d.dye), ("/", None));
        assert!(parse_line(r#"198.18.1.2 40000 7 3 GET 200 77 36 "" "/" soon"#).is_err());
        assert_eq!(e.method, "GET");
        assert_eq!(e.status, 200);
        assert_eq!(e.request_length, 77);
        assert_eq!(e.body_bytes_sent, 36);
        assert_eq!(e.uri, "/index.html?a=b");
        assert_eq!(e.body, None);
        assert_eq!(e.fingerprint(), "GET /index.html?a=b 77 -");
    }

    #[test]
    fn hashes_the_body_file() {
        let dir = std::env::temp_dir().join(format!("nginx-parse-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("0000000001");
        std::fs::write(&f, b"abc").unwrap();
        let line = format!(
            r#"198.18.1.2 1 1 1 POST 200 100 7 "{}" "/upload""#,
            f.display()
        );
        let e = parse_line(&line).unwrap();
        // sha256("abc")
        assert_eq!(
            e.body,
            Some((
                3,
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".to_owned()
            ))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rejects_a_broken_line() {
        assert!(parse_line("198.18.1.2 x 1 1 GET 200 1 1 \"\" \"/\"").is_err());
        assert!(parse_line("198.18.1.2 1 1 1 GET 200 1 1 /").is_err());
        assert!(parse_line("").is_err());
    }

    #[test]
    fn pattern_is_deterministic() {
        assert_eq!(pattern(4), vec![7, 38, 69, 100]);
        assert_eq!(pattern(300)[251], 7);
    }
}
