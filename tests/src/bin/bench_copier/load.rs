//! The load generator of `bench_copier`: keep-alive and short HTTP connections on open-loop
//! schedules, run on a thread inside `client` (its sockets belong to that namespace).

use super::*;

// The load generator (runs on a thread inside `client`; its sockets belong to that namespace).

/// What one step of load did, seen from the clients.
#[derive(Debug, Default)]
pub(super) struct Load {
    /// Requests written.
    pub(super) sent: u64,
    /// Answers read with status 200.
    pub(super) ok: u64,
    /// Short connections not opened because [`SHORT_IN_FLIGHT`] were open.
    pub(super) skipped: u64,
    /// Errors by kind.
    pub(super) errors: BTreeMap<String, u64>,
    /// Latency of each answered request (µs, from the moment it was due).
    pub(super) lat_us: Vec<u32>,
    /// Time from the first due request to the last answer.
    pub(super) secs: f64,
    /// When the last request was written (wall clock, ms since the epoch; 0: none was): "the
    /// end of the load" of the real-time figures.
    pub(super) last_send_ms: u64,
}

impl Load {
    pub(super) fn merge(&mut self, o: Load) {
        self.sent += o.sent;
        self.ok += o.ok;
        self.skipped += o.skipped;
        for (k, v) in o.errors {
            *self.errors.entry(k).or_default() += v;
        }
        self.lat_us.extend(o.lat_us);
        self.last_send_ms = self.last_send_ms.max(o.last_send_ms);
    }

    pub(super) fn error(&mut self, what: impl std::fmt::Display) {
        *self.errors.entry(what.to_string()).or_default() += 1;
    }

    pub(super) fn percentile_ms(&mut self, p: f64) -> f64 {
        self.lat_us.sort_unstable();
        lab::bench::quantile(&self.lat_us, p).map_or(0.0, |us| us as f64 / 1000.0)
    }
}

#[derive(Debug)]
pub(super) struct Generator {
    pub(super) rt: tokio::runtime::Runtime,
    pub(super) conns: Vec<Option<tokio::net::TcpStream>>,
    /// The next client port of a short connection (`None`: the kernel chooses).
    pub(super) next_port: Option<u16>,
}

/// Client ports the short connections walk through; the kernel chooses the keep-alive ones from
/// [`KERNEL_PORTS`], which does not overlap.
pub(super) const SHORT_PORTS: std::ops::RangeInclusive<u16> = 1024..=59999;
/// `net.ipv4.ip_local_port_range` in `client` (with `--kernel-ports`: 1024 65535).
pub(super) const KERNEL_PORTS: &str = "60000 65535";

pub(super) fn online() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, 80))
}

/// Reads one HTTP/1.1 response with a Content-Length (nginx's static files) into `buf`; returns
/// its status.
pub(super) async fn read_response(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Result<u16> {
    buf.clear();
    let mut tmp = [0u8; 16384];
    let head = loop {
        if let Some(h) = Head::parse(buf) {
            h.content_length
                .context("response without Content-Length")?;
            break h;
        }
        let n = s.read(&mut tmp).await?;
        if n == 0 {
            bail!("closed by the server");
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let need = head.total();
    while buf.len() < need {
        let n = s.read(&mut tmp).await?;
        if n == 0 {
            bail!("closed by the server mid-body");
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    if buf.len() > need {
        bail!("more bytes than one response (nothing was pipelined)");
    }
    status_of(&head, buf)
}

/// The status of a response whose head is `head`, or an error quoting its first line.
pub(super) fn status_of(head: &Head, buf: &[u8]) -> Result<u16> {
    head.status.with_context(|| {
        let line = buf[..head.end].split(|&b| b == b'\r').next().unwrap_or(&[]);
        format!("bad status line {:?}", String::from_utf8_lossy(line))
    })
}

pub(super) async fn connect() -> Result<tokio::net::TcpStream> {
    let s = tokio::time::timeout(
        Duration::from_secs(3),
        tokio::net::TcpStream::connect(online()),
    )
    .await
    .context("connect timed out")??;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Connects from a given client address and port.
pub(super) async fn connect_from(from: SocketAddrV4) -> Result<tokio::net::TcpStream> {
    let sock = tokio::net::TcpSocket::new_v4()?;
    sock.bind(SocketAddr::V4(from))
        .with_context(|| format!("bind {from}"))?;
    let s = tokio::time::timeout(Duration::from_secs(3), sock.connect(online()))
        .await
        .context("connect timed out")??;
    s.set_nodelay(true)?;
    Ok(s)
}

/// When a keep-alive connection sends its next request.
#[derive(Debug, Clone, Copy)]
pub(super) enum Pace {
    /// Open loop: request j is due at `start + phase + j x interval` (or as soon as the previous
    /// answer is in, when that is later).
    Schedule { phase: Duration, interval: Duration },
    /// As soon as the previous answer is in (like `wrk`).
    Full,
    /// `think` after the previous answer is in.
    Think(Duration),
}

/// One keep-alive connection's part of a step: requests for `path` (tagged with the step and the
/// connection) until `end`.
pub(super) async fn keepalive_conn(
    i: usize,
    stream: Option<tokio::net::TcpStream>,
    tag: String,
    path: &'static str,
    start: tokio::time::Instant,
    end: tokio::time::Instant,
    pace: Pace,
) -> (Option<tokio::net::TcpStream>, Load) {
    let mut load = Load::default();
    let mut s = match stream {
        Some(s) => s,
        None => match connect().await {
            Ok(s) => s,
            Err(e) => {
                load.error(format!("connect: {e:#}"));
                return (None, load);
            }
        },
    };
    let mut buf = Vec::with_capacity(1024);
    let mut j: u64 = 0;
    loop {
        let due = match pace {
            Pace::Schedule { phase, interval } => {
                let due = start + phase + interval * (j as u32);
                if due >= end {
                    break;
                }
                tokio::time::sleep_until(due).await;
                due
            }
            Pace::Full | Pace::Think(_) => {
                let now = tokio::time::Instant::now();
                if now >= end {
                    break;
                }
                now
            }
        };
        let req = format!(
            "GET {path}?s={tag}&c={i}&n={j} HTTP/1.1\r\nHost: {}\r\nUser-Agent: bench_copier\r\nAccept: */*\r\n\r\n",
            addr::ONLINE
        );
        j += 1;
        if let Err(e) = s.write_all(req.as_bytes()).await {
            load.error(format!("write: {e}"));
            return (None, load);
        }
        load.sent += 1;
        load.last_send_ms = wall_ms();
        match tokio::time::timeout(Duration::from_secs(5), read_response(&mut s, &mut buf)).await {
            Ok(Ok(200)) => {
                load.ok += 1;
                load.lat_us
                    .push(due.elapsed().as_micros().min(u32::MAX as u128) as u32);
            }
            Ok(Ok(st)) => load.error(format!("status {st}")),
            Ok(Err(e)) => {
                load.error(format!("read: {e:#}"));
                return (None, load);
            }
            Err(_) => {
                load.error("no answer within 5 s");
                return (None, load);
            }
        }
        if let Pace::Think(t) = pace {
            tokio::time::sleep(t).await;
        }
    }
    (Some(s), load)
}

/// One short connection: connect, one request, read until the server closes.
pub(super) async fn short_conn(
    tag: String,
    n: u64,
    due: tokio::time::Instant,
    from: Option<SocketAddrV4>,
) -> Load {
    let mut load = Load::default();
    let mut sent_ms = 0;
    let r: Result<u16> = async {
        let mut s = match from {
            Some(a) => connect_from(a).await?,
            None => connect().await?,
        };
        let req = format!(
            "GET /index.html?s={tag}&n={n} HTTP/1.1\r\nHost: {}\r\nUser-Agent: bench_copier\r\nConnection: close\r\n\r\n",
            addr::ONLINE
        );
        s.write_all(req.as_bytes()).await.context("write")?;
        sent_ms = wall_ms();
        let mut all = Vec::with_capacity(1024);
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut all))
            .await
            .context("no answer within 5 s")?
            .context("read")?;
        let h = Head::parse(&all).context("truncated response")?;
        status_of(&h, &all)
    }
    .await;
    load.sent = 1;
    load.last_send_ms = sent_ms;
    match r {
        Ok(200) => {
            load.ok = 1;
            load.lat_us
                .push(due.elapsed().as_micros().min(u32::MAX as u128) as u32);
        }
        Ok(st) => load.error(format!("status {st}")),
        Err(e) => load.error(format!("{e:#}")),
    }
    load
}

impl Generator {
    pub(super) fn new() -> Result<Generator> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Generator {
            rt,
            conns: Vec::new(),
            next_port: None,
        })
    }

    /// Opens `n` keep-alive connections (call inside `client`).
    pub(super) fn open(&mut self, n: usize) -> Result<()> {
        let conns = self.rt.block_on(async {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(Some(connect().await?));
            }
            Ok::<_, anyhow::Error>(v)
        })?;
        self.conns = conns;
        Ok(())
    }

    /// A keep-alive step: `rate` requests/s over all connections for `dur` (call inside
    /// `client`; a connection that broke is opened again).
    pub(super) fn keepalive(&mut self, tag: &str, rate: Option<u64>, dur: Duration) -> Load {
        let k = self.conns.len();
        let conns = std::mem::take(&mut self.conns);
        let pace = |i: usize| match rate {
            Some(r) => {
                let interval = Duration::from_secs_f64(k as f64 / r as f64);
                Pace::Schedule {
                    phase: interval.mul_f64(i as f64 / k as f64),
                    interval,
                }
            }
            None => Pace::Full,
        };
        let (conns, total) = self.keepalive_set(conns, tag, "/index.html", pace, dur);
        self.conns = conns;
        total
    }

    /// Runs keep-alive connections `conns` for `dur`, each asking for `path` at its own pace
    /// (call inside `client`); returns them (`None` for one that broke) and what they did.
    pub(super) fn keepalive_set(
        &mut self,
        conns: Vec<Option<tokio::net::TcpStream>>,
        tag: &str,
        path: &'static str,
        pace: impl Fn(usize) -> Pace,
        dur: Duration,
    ) -> (Vec<Option<tokio::net::TcpStream>>, Load) {
        let k = conns.len();
        let (conns, mut total) = self.rt.block_on(async {
            let start = tokio::time::Instant::now() + Duration::from_millis(5);
            let end = start + dur;
            let handles: Vec<_> = conns
                .into_iter()
                .enumerate()
                .map(|(i, s)| {
                    tokio::spawn(keepalive_conn(
                        i,
                        s,
                        tag.to_owned(),
                        path,
                        start,
                        end,
                        pace(i),
                    ))
                })
                .collect();
            let mut conns = Vec::with_capacity(k);
            let mut total = Load::default();
            for h in handles {
                match h.await {
                    Ok((s, l)) => {
                        conns.push(s);
                        total.merge(l);
                    }
                    Err(e) => {
                        conns.push(None);
                        total.error(format!("task: {e}"));
                    }
                }
            }
            total.secs = start.elapsed().as_secs_f64();
            (conns, total)
        });
        // a connection that broke is opened again for the next step (a new session to copy)
        let broken = conns.iter().filter(|c| c.is_none()).count();
        if broken > 0 {
            total.error(format!("{broken} connection(s) broke"));
        }
        (conns, total)
    }

    /// Closes connections of a scenario (inside the runtime that owns them).
    pub(super) fn close_set(&mut self, conns: Vec<Option<tokio::net::TcpStream>>) {
        let _rt = self.rt.enter();
        drop(conns);
    }

    /// Opens `n` keep-alive connections for one scenario (call inside `client`).
    pub(super) fn open_set(&mut self, n: usize) -> Result<Vec<Option<tokio::net::TcpStream>>> {
        self.rt.block_on(async {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(Some(connect().await?));
            }
            Ok(v)
        })
    }

    /// `loops` clients, each opening a connection from `src`, sending one request
    /// (`Connection: close`), reading the answer until the server closes, waiting `think`, and
    /// again, for `dur` (call inside `client`). Client ports walk through [`SHORT_PORTS`] from
    /// `*next`, which is advanced.
    pub(super) fn close_loops(
        &mut self,
        tag: &str,
        loops: usize,
        src: Ipv4Addr,
        next: &mut u64,
        think: Duration,
        dur: Duration,
    ) -> Load {
        let seq = Arc::new(AtomicU64::new(*next));
        let total = self.rt.block_on(async {
            let start = tokio::time::Instant::now();
            let end = start + dur;
            let handles: Vec<_> = (0..loops)
                .map(|_| {
                    let (seq, tag) = (seq.clone(), tag.to_owned());
                    tokio::spawn(async move {
                        let mut load = Load::default();
                        let span = u64::from(*SHORT_PORTS.end() - *SHORT_PORTS.start()) + 1;
                        while tokio::time::Instant::now() < end {
                            let n = seq.fetch_add(1, Ordering::Relaxed);
                            let port = *SHORT_PORTS.start() + (n % span) as u16;
                            let due = tokio::time::Instant::now();
                            load.merge(
                                short_conn(tag.clone(), n, due, Some(SocketAddrV4::new(src, port)))
                                    .await,
                            );
                            tokio::time::sleep(think).await;
                        }
                        load
                    })
                })
                .collect();
            let mut total = Load::default();
            for h in handles {
                match h.await {
                    Ok(l) => total.merge(l),
                    Err(e) => total.error(format!("task: {e}")),
                }
            }
            total.secs = start.elapsed().as_secs_f64();
            total
        });
        *next = seq.load(Ordering::Relaxed);
        total
    }

    /// A short-connection step: `rate` connections/s, one request each, for `dur`.
    pub(super) fn short(&mut self, tag: &str, rate: u64, dur: Duration) -> Load {
        self.rt.block_on(async {
            let start = tokio::time::Instant::now() + Duration::from_millis(5);
            let end = start + dur;
            let interval = Duration::from_secs_f64(1.0 / rate as f64);
            let mut set = tokio::task::JoinSet::new();
            let mut total = Load::default();
            let mut n: u64 = 0;
            loop {
                let due = start + interval.mul_f64(n as f64);
                if due >= end {
                    break;
                }
                tokio::time::sleep_until(due).await;
                while let Some(r) = set.try_join_next() {
                    match r {
                        Ok(l) => total.merge(l),
                        Err(e) => total.error(format!("task: {e}")),
                    }
                }
                if set.len() >= SHORT_IN_FLIGHT {
                    total.skipped += 1;
                } else {
                    let port = self.next_port;
                    if let Some(p) = &mut self.next_port {
                        *p = if *p == *SHORT_PORTS.end() {
                            *SHORT_PORTS.start()
                        } else {
                            *p + 1
                        };
                    }
                    let from = port.map(|p| SocketAddrV4::new(addr::CLIENT, p));
                    set.spawn(short_conn(tag.to_owned(), n, due, from));
                }
                n += 1;
            }
            while let Some(r) = set.join_next().await {
                match r {
                    Ok(l) => total.merge(l),
                    Err(e) => total.error(format!("task: {e}")),
                }
            }
            total.secs = start.elapsed().as_secs_f64();
            total
        })
    }
}
