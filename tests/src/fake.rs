//! A hand-driven copier for intercept tests: a control connection (real protocol, real
//! handshake) plus a raw socket that sends hand-built segments with a spoofed client address.
//!
//! Everything runs on a current-thread tokio runtime owned by the caller, inside the namespace
//! the sockets were made in (see [`crate::Lab::in_ns`]).

use anyhow::{bail, Context, Result};
use common::flow::FourTuple;
use common::proto::io::{client_handshake, Established};
use common::proto::{Message, Record, RegVerdict};
use common::seq::SeqNum;
use common::wire::{parse_tcp_packet, TcpBuilder, TcpFlags};
use socket2::{Domain, Protocol, Socket, Type};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::time::Duration;
use tokio::net::TcpStream;

/// The lab's shared secret (what [`crate::setup::write_secret`] writes).
pub const SECRET: &[u8] = b"lab-shared-secret";

/// The intercept's control address in the lab (the test host, [`crate::setup::CONTROL_PORT`]).
pub fn control() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(
        crate::addr::TEST,
        crate::setup::CONTROL_PORT,
    ))
}

/// A session of a spoofed client, `198.19.0.{client_last}:{port}`, with the test host's
/// `server_port`.
pub fn spoofed(client_last: u8, port: u16, server_port: u16) -> FourTuple {
    FourTuple {
        client: SocketAddr::V4(SocketAddrV4::new(
            std::net::Ipv4Addr::new(198, 19, 0, client_last),
            port,
        ))
        .into(),
        server: SocketAddr::V4(SocketAddrV4::new(crate::addr::TEST, server_port)).into(),
    }
}

/// The current-thread tokio runtime a fake copier runs on (inside the namespace it was made in).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// One control connection of a fake copier.
#[derive(Debug)]
pub struct FakeCopier {
    conn: Established<TcpStream>,
    /// Records received and not yet taken.
    pub inbox: Vec<Record>,
}

impl FakeCopier {
    /// Connects and authenticates (`secret: None` for `--no-secret`).
    pub async fn connect(intercept: SocketAddr, secret: Option<&[u8]>) -> Result<FakeCopier> {
        let stream = TcpStream::connect(intercept)
            .await
            .with_context(|| format!("connect {intercept}"))?;
        let conn = client_handshake(stream, secret, "lab-fake-copier")
            .await
            .context("handshake")?;
        Ok(FakeCopier {
            conn,
            inbox: Vec::new(),
        })
    }

    /// Registers 4-tuples and waits (at most 5 s) for the intercept's verdict on each: the
    /// registrations it accepted are in force when this returns. Records that arrive meanwhile
    /// are kept in `inbox`.
    pub async fn register(&mut self, tuples: &[FourTuple]) -> Result<Vec<(FourTuple, RegVerdict)>> {
        self.conn
            .writer
            .write_message(&Message::Register {
                tuples: tuples.to_vec(),
            })
            .await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            match tokio::time::timeout_at(deadline, self.conn.reader.read_message()).await {
                Err(_) => bail!("no Registered answer within 5 s"),
                Ok(Ok(Some(Message::Registered { results }))) => return Ok(results),
                Ok(Ok(Some(Message::Records { records }))) => self.inbox.extend(records),
                Ok(Ok(Some(_))) => {}
                Ok(Ok(None)) => bail!("the intercept closed the control connection"),
                Ok(Err(e)) => bail!("control connection: {e}"),
            }
        }
    }

    /// Sends a Register without waiting for its answer (the answer is skipped by the readers).
    pub async fn register_nowait(&mut self, tuples: &[FourTuple]) -> Result<()> {
        self.conn
            .writer
            .write_message(&Message::Register {
                tuples: tuples.to_vec(),
            })
            .await?;
        Ok(())
    }

    /// Unregisters 4-tuples.
    pub async fn unregister(&mut self, tuples: &[FourTuple]) -> Result<()> {
        self.conn
            .writer
            .write_message(&Message::Unregister {
                tuples: tuples.to_vec(),
            })
            .await?;
        Ok(())
    }

    /// Reads messages for `dur`, keeping records in `inbox`. Fails if the connection closes.
    pub async fn collect(&mut self, dur: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + dur;
        loop {
            match tokio::time::timeout_at(deadline, self.conn.reader.read_message()).await {
                Err(_) => return Ok(()),
                Ok(Ok(Some(Message::Records { records }))) => self.inbox.extend(records),
                Ok(Ok(Some(_))) => {}
                Ok(Ok(None)) => bail!("the intercept closed the control connection"),
                Ok(Err(e)) => bail!("control connection: {e}"),
            }
        }
    }

    /// Reads until a record matching `pred` arrives (kept in `inbox`), at most `timeout`.
    pub async fn wait_for(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&Record) -> bool,
    ) -> Result<Record> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(r) = self.inbox.iter().find(|r| pred(r)) {
                return Ok(r.clone());
            }
            match tokio::time::timeout_at(deadline, self.conn.reader.read_message()).await {
                Err(_) => bail!(
                    "no matching record within {timeout:?}; got {} others",
                    self.inbox.len()
                ),
                Ok(Ok(Some(Message::Records { records }))) => self.inbox.extend(records),
                Ok(Ok(Some(_))) => {}
                Ok(Ok(None)) => bail!("the intercept closed the control connection"),
                Ok(Err(e)) => bail!("control connection: {e}"),
            }
        }
    }
}

/// The fields of a record's TCP header that tests look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordInfo {
    /// The session.
    pub tuple: FourTuple,
    /// TCP flags.
    pub flags: TcpFlags,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number.
    pub ack: u32,
    /// Bytes of TCP payload the original packet carried.
    pub payload_len: usize,
}

/// Parses a record (its headers are cut after the TCP header; `orig_len` tells the rest).
pub fn record_info(r: &Record) -> Option<RecordInfo> {
    let h = common::proto::parse_response_headers(&r.headers).ok()?;
    let mut copy = r.headers[..h.headers_len].to_vec();
    // shrink the IP length to the headers so that the full-packet parser accepts the copy
    match copy[0] >> 4 {
        4 => copy[2..4].copy_from_slice(&(h.headers_len as u16).to_be_bytes()),
        _ => copy[4..6].copy_from_slice(&((h.headers_len - 40) as u16).to_be_bytes()),
    }
    let p = parse_tcp_packet(&copy).ok()?;
    Some(RecordInfo {
        tuple: h.tuple,
        flags: p.tcp.flags(),
        seq: p.tcp.seq().0,
        ack: p.tcp.ack().0,
        payload_len: h.orig_len.saturating_sub(h.headers_len),
    })
}

/// Flags of a record's TCP header.
pub fn record_flags(r: &Record) -> TcpFlags {
    record_info(r).map(|i| i.flags).unwrap_or(TcpFlags(0))
}

/// A raw sender of hand-built segments for both IP families (`IPPROTO_RAW`: the IP header is
/// ours, so any client address goes). The IPv6 socket is opened on the first IPv6 segment.
#[derive(Debug)]
pub struct RawSender {
    v4: Socket,
    v6: Option<Socket>,
    buf: Vec<u8>,
}

impl RawSender {
    /// Opens the IPv4 socket (in the current thread's namespace).
    pub fn new() -> Result<RawSender> {
        let v4 = Socket::new(
            Domain::IPV4,
            Type::RAW,
            Some(Protocol::from(libc_ipproto_raw())),
        )
        .context("raw socket")?;
        v4.set_header_included_v4(true).context("IP_HDRINCL")?;
        Ok(RawSender {
            v4,
            v6: None,
            buf: Vec::with_capacity(2048),
        })
    }

    /// Sends one segment of the tuple's client toward its server.
    pub fn send(
        &mut self,
        t: FourTuple,
        seq: u32,
        ack: u32,
        flags: TcpFlags,
        payload: &[u8],
    ) -> Result<()> {
        TcpBuilder {
            src: t.client.into(),
            dst: t.server.into(),
            seq: SeqNum(seq),
            ack: SeqNum(ack),
            flags,
            window: 65535,
            options: &[],
            payload,
            ttl: 64,
            ident: 1,
        }
        .emit(&mut self.buf);
        match t.server.socket() {
            SocketAddr::V4(dst) => {
                let to = SocketAddrV4::new(*dst.ip(), 0);
                self.v4.send_to(&self.buf, &to.into()).context("raw send")?;
            }
            SocketAddr::V6(dst) => {
                let sock = match &mut self.v6 {
                    Some(s) => s,
                    None => self.v6.insert(
                        Socket::new(
                            Domain::IPV6,
                            Type::RAW,
                            Some(Protocol::from(libc_ipproto_raw())),
                        )
                        .context("raw IPv6 socket")?,
                    ),
                };
                let to = SocketAddrV6::new(*dst.ip(), 0, 0, 0);
                sock.send_to(&self.buf, &to.into())
                    .context("raw send (IPv6)")?;
            }
        }
        Ok(())
    }
}

const fn libc_ipproto_raw() -> i32 {
    255
}
