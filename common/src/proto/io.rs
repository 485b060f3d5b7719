//! The control protocol over tokio streams: framed reading and writing, and the handshake of
//! each end.
//!
//! This is the only part of [`crate::proto`] that performs I/O or reads the clock. The handshake
//! runs under a timeout ([`HANDSHAKE_TIMEOUT`] by default) so that a silent peer cannot hold a
//! connection slot, and reads frames of at most [`PRE_AUTH_MAX_FRAME`] bytes, so that an
//! unauthenticated peer cannot make us buffer more. A refusal (version mismatch, wrong role,
//! authentication) is first told to the peer in an `Error` message naming the reason, then the
//! write side is shut down and the function returns the matching [`ProtoError`]; dropping the
//! returned halves closes the socket.
//!
//! When the handshake succeeds with a secret, the [`Established`] halves carry the session keys
//! ([`auth::session_keys`]): the writer tags every frame it sends and the reader refuses every
//! frame whose tag does not verify ([`ProtoError::BadTag`]), so both daemons get per-frame
//! authentication without doing anything. The reader's limit is back to [`MAX_FRAME`].

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};

use super::auth::{self, FrameKey};
use super::codec::{encode_records, seal_frames, FrameDecoder, Hello, Message, Record, Role};
use super::{
    error_code, ProtoError, FEATURES, HANDSHAKE_TIMEOUT, MAX_FRAME, PRE_AUTH_MAX_FRAME, VERSION,
};

/// Reads whole messages from a byte stream.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
    decoder: FrameDecoder,
    buf: Box<[u8]>,
    idle: Option<Duration>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Wrap a stream: frames up to [`MAX_FRAME`], no tags, no idle timeout.
    pub fn new(inner: R) -> FrameReader<R> {
        FrameReader {
            inner,
            decoder: FrameDecoder::new(),
            buf: vec![0u8; 64 * 1024].into_boxed_slice(),
            idle: None,
        }
    }

    /// Refuse frames longer than `max` (see [`FrameDecoder::set_max_frame`]).
    pub fn set_max_frame(&mut self, max: usize) {
        self.decoder.set_max_frame(max);
    }

    /// Require a valid tag of `key` on every later frame (see [`FrameDecoder::authenticate`]).
    /// The handshake functions do this themselves.
    pub fn authenticate(&mut self, key: FrameKey, from: Role) {
        self.decoder.authenticate(key, from);
    }

    /// Fail [`read_message`](Self::read_message) with [`ProtoError::Idle`] when no whole frame
    /// arrives for `idle` (`None`: wait forever, the default).
    pub fn set_idle_timeout(&mut self, idle: Option<Duration>) {
        self.idle = idle;
    }

    /// The next message; `Ok(None)` when the peer closed the connection between two frames.
    ///
    /// Cancel-safe: if the future is dropped before it completes, no byte is lost, so it can be
    /// used in `tokio::select!`.
    pub async fn read_message(&mut self) -> Result<Option<Message>, ProtoError> {
        match self.idle {
            None => self.read_inner().await,
            Some(d) => tokio::time::timeout(d, self.read_inner())
                .await
                .map_err(|_| ProtoError::Idle(d))?,
        }
    }

    async fn read_inner(&mut self) -> Result<Option<Message>, ProtoError> {
        loop {
            if let Some(m) = self.decoder.next()? {
                return Ok(Some(m));
            }
            let n = self.inner.read(&mut self.buf).await?;
            if n == 0 {
                return if self.decoder.buffered() == 0 {
                    Ok(None)
                } else {
                    Err(ProtoError::Closed(" in the middle of a frame"))
                };
            }
            self.decoder.push(&self.buf[..n]);
        }
    }

    /// The wrapped stream.
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// The stream and the decoder, with the bytes read but not yet decoded, its frame limit
    /// and, with a session key, the key and the number of the next frame: for a reader that
    /// goes on decoding the same stream elsewhere, without tokio (feed the decoder what the
    /// stream gives, [`FrameDecoder::push`], and take the messages, [`FrameDecoder::next`]).
    pub fn into_parts(self) -> (R, FrameDecoder) {
        (self.inner, self.decoder)
    }
}

/// Writes messages to a byte stream, several per write where possible.
#[derive(Debug)]
pub struct FrameWriter<W> {
    inner: W,
    buf: Vec<u8>,
    /// With a session key: the key, the number of the next frame, and where frames are encoded
    /// before they are tagged into `buf`.
    sealer: Option<(FrameKey, u64, Vec<u8>)>,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    /// Wrap a stream (frames without tags).
    pub fn new(inner: W) -> FrameWriter<W> {
        FrameWriter {
            inner,
            buf: Vec::new(),
            sealer: None,
        }
    }

    /// Wrap a stream with the sealing state [`into_parts`](Self::into_parts) gave (the key and
    /// the number of the next frame), so a writer can move to another stream type mid-session.
    pub fn from_parts(inner: W, sealer: Option<(FrameKey, u64)>) -> FrameWriter<W> {
        FrameWriter {
            inner,
            buf: Vec::new(),
            sealer: sealer.map(|(key, counter)| (key, counter, Vec::new())),
        }
    }

    /// Tag every later frame with `key` (see [`seal_frames`]). The handshake functions do this
    /// themselves.
    pub fn authenticate(&mut self, key: FrameKey) {
        self.sealer = Some((key, 0, Vec::new()));
    }

    /// Write one message and flush it.
    pub async fn write_message(&mut self, msg: &Message) -> Result<(), ProtoError> {
        self.write_messages(std::slice::from_ref(msg)).await
    }

    /// Write several messages with one write (as far as the socket takes it) and flush.
    pub async fn write_messages(&mut self, msgs: &[Message]) -> Result<(), ProtoError> {
        self.encode(|out| {
            for m in msgs {
                m.encode(out);
            }
        });
        self.send_buf().await
    }

    /// Write records as few Records frames as [`MAX_FRAME`] allows, and flush.
    pub async fn write_records(&mut self, records: &[Record]) -> Result<(), ProtoError> {
        self.encode(|out| encode_records(records, out));
        self.send_buf().await
    }

    /// Write frames encoded elsewhere (whole `u32 len | type | body` frames, without tags),
    /// tagged like every other frame if there is a session key, and flush. For tests that
    /// need a frame [`Message`] cannot express, e.g. an unknown type.
    pub async fn write_frames(&mut self, frames: &[u8]) -> Result<(), ProtoError> {
        self.encode(|out| out.extend_from_slice(frames));
        self.send_buf().await
    }

    /// Fill `buf` with the frames `f` encodes, tagged if there is a session key.
    fn encode(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        self.buf.clear();
        match &mut self.sealer {
            None => f(&mut self.buf),
            Some((key, counter, plain)) => {
                plain.clear();
                f(plain);
                seal_frames(key, counter, plain, &mut self.buf);
                if plain.capacity() > 4 * MAX_FRAME {
                    *plain = Vec::new();
                }
            }
        }
    }

    async fn send_buf(&mut self) -> Result<(), ProtoError> {
        self.inner.write_all(&self.buf).await?;
        self.inner.flush().await?;
        // Don't keep a huge buffer around after one big batch.
        if self.buf.capacity() > 4 * MAX_FRAME {
            self.buf = Vec::new();
        }
        Ok(())
    }

    /// Flush and shut down the write side (the peer reads end-of-stream).
    pub async fn shutdown(&mut self) -> Result<(), ProtoError> {
        self.inner.shutdown().await?;
        Ok(())
    }

    /// The wrapped stream.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    /// The stream and, with a session key, the key and the number of the next frame: for a
    /// writer that seals its frames itself (with [`seal_frames`], from that number on) and
    /// writes them to the stream, e.g. from more than one thread under a lock of its own.
    pub fn into_parts(self) -> (W, Option<(FrameKey, u64)>) {
        (
            self.inner,
            self.sealer.map(|(key, counter, _)| (key, counter)),
        )
    }
}

/// A connection whose handshake succeeded.
#[derive(Debug)]
pub struct Established<S> {
    /// Messages from the peer.
    pub reader: FrameReader<ReadHalf<S>>,
    /// Messages to the peer.
    pub writer: FrameWriter<WriteHalf<S>>,
    /// The peer's Hello (its software string is worth logging).
    pub peer: Hello,
}

/// Handshake as the copier, with the default [`HANDSHAKE_TIMEOUT`]. `secret: None` means
/// `--no-secret`, which works only if the intercept also runs without a secret.
pub async fn client_handshake<S>(
    stream: S,
    secret: Option<&[u8]>,
    software: &str,
) -> Result<Established<S>, ProtoError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    client_handshake_timeout(stream, secret, software, HANDSHAKE_TIMEOUT).await
}

/// Handshake as the intercept, with the default [`HANDSHAKE_TIMEOUT`].
pub async fn server_handshake<S>(
    stream: S,
    secret: Option<&[u8]>,
    software: &str,
) -> Result<Established<S>, ProtoError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    server_handshake_timeout(stream, secret, software, HANDSHAKE_TIMEOUT).await
}

/// [`client_handshake`] with an explicit timeout.
pub async fn client_handshake_timeout<S>(
    stream: S,
    secret: Option<&[u8]>,
    software: &str,
    timeout: Duration,
) -> Result<Established<S>, ProtoError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    handshake(
        stream,
        secret,
        software,
        timeout,
        Role::Copier,
        FEATURES,
        Identity::default(),
    )
    .await
}

/// Who a copier is, as its Hello says ([`Hello::instance`], [`Hello::fleet_index`],
/// [`Hello::fleet_size`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Identity {
    /// Random per copier process, never 0 (0: not announced).
    pub instance: u64,
    /// The fleet share's index ...
    pub fleet_index: u16,
    /// ... of this many copiers (1: no fleet).
    pub fleet_size: u16,
}

/// [`client_handshake_timeout`] announcing the copier's [`Identity`] in its Hello.
pub async fn client_handshake_as<S>(
    stream: S,
    secret: Option<&[u8]>,
    software: &str,
    timeout: Duration,
    identity: Identity,
) -> Result<Established<S>, ProtoError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    handshake(
        stream,
        secret,
        software,
        timeout,
        Role::Copier,
        FEATURES,
        identity,
    )
    .await
}

/// [`server_handshake`] with an explicit timeout.
pub async fn server_handshake_timeout<S>(
    stream: S,
    secret: Option<&[u8]>,
    software: &str,
    timeout: Duration,
) -> Result<Established<S>, ProtoError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    handshake(
        stream,
        secret,
        software,
        timeout,
        Role::Intercept,
        FEATURES,
        Identity::default(),
    )
    .await
}

/// A handshake as `role` (the copier's side for [`Role::Copier`]) that announces `features`
/// in its Hello instead of this build's [`FEATURES`]: what a build that predates a feature
/// sends (features 0), for tests of old and new ends together.
pub async fn handshake_with_features<S>(
    stream: S,
    secret: Option<&[u8]>,
    software: &str,
    role: Role,
    features: u32,
) -> Result<Established<S>, ProtoError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    handshake(
        stream,
        secret,
        software,
        HANDSHAKE_TIMEOUT,
        role,
        features,
        Identity::default(),
    )
    .await
}

/// Split `stream`, run `side`'s steps of the handshake within `timeout` with frames capped at
/// [`PRE_AUTH_MAX_FRAME`], then lift the cap to [`MAX_FRAME`].
async fn handshake<S>(
    stream: S,
    secret: Option<&[u8]>,
    software: &str,
    timeout: Duration,
    side: Role,
    features: u32,
    identity: Identity,
) -> Result<Established<S>, ProtoError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (r, w) = tokio::io::split(stream);
    let mut reader = FrameReader::new(r);
    reader.set_max_frame(PRE_AUTH_MAX_FRAME);
    let mut writer = FrameWriter::new(w);
    let steps = async {
        match side {
            Role::Copier => {
                client_steps(
                    &mut reader,
                    &mut writer,
                    secret,
                    software,
                    features,
                    identity,
                )
                .await
            }
            Role::Intercept => {
                server_steps(&mut reader, &mut writer, secret, software, features).await
            }
        }
    };
    let peer = tokio::time::timeout(timeout, steps)
        .await
        .map_err(|_| ProtoError::Timeout(timeout))??;
    reader.set_max_frame(MAX_FRAME);
    Ok(Established {
        reader,
        writer,
        peer,
    })
}

fn role_name(r: Role) -> &'static str {
    r.as_str()
}

/// Tell the peer why we refuse, shut down our write side and hand back `err`.
async fn refuse<W: AsyncWrite + Unpin>(
    writer: &mut FrameWriter<W>,
    code: u16,
    message: String,
    err: ProtoError,
) -> ProtoError {
    // Best effort: the peer may already be gone.
    let _ = writer
        .write_message(&Message::Error { code, message })
        .await;
    let _ = writer.shutdown().await;
    err
}

/// The step of a handshake that reads the peer's next message, `got`, written once for every
/// step of both sides: `pick` takes the message `expected` names out of it; an Error from the
/// peer is its refusal, any other message is refused (the peer is told why, as `me`), and the
/// end of the stream is an error.
async fn expect<W, T>(
    writer: &mut FrameWriter<W>,
    got: Option<Message>,
    me: &str,
    expected: &'static str,
    pick: impl FnOnce(Message) -> Result<T, Message>,
) -> Result<T, ProtoError>
where
    W: AsyncWrite + Unpin,
{
    match got.map(pick) {
        Some(Ok(t)) => Ok(t),
        Some(Err(Message::Error { code, message })) => Err(ProtoError::Remote { code, message }),
        Some(Err(other)) => {
            let err = ProtoError::Unexpected {
                expected,
                got: other.name(),
            };
            let msg = format!("{me}: expected {expected}, got {}", other.name());
            Err(refuse(writer, error_code::PROTOCOL, msg, err).await)
        }
        None => Err(ProtoError::Closed(" during the handshake")),
    }
}

/// Send our Hello, read the peer's and check version, role and authentication mode.
async fn exchange_hello<R, W>(
    reader: &mut FrameReader<R>,
    writer: &mut FrameWriter<W>,
    ours: &Hello,
    expected: Role,
) -> Result<Hello, ProtoError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    writer.write_message(&Message::Hello(ours.clone())).await?;
    let me = role_name(ours.role);
    let them = role_name(expected);
    let got = match reader.read_message().await {
        Ok(got) => got,
        Err(e @ ProtoError::Io(_)) => return Err(e),
        Err(e) => {
            let msg = format!("{me}: cannot decode your Hello: {e}");
            return Err(refuse(writer, error_code::PROTOCOL, msg, e).await);
        }
    };
    let peer = expect(writer, got, me, "Hello", |m| match m {
        Message::Hello(h) => Ok(h),
        other => Err(other),
    })
    .await?;
    if peer.version != VERSION {
        let msg = format!(
            "protocol version mismatch: this {me} speaks version {VERSION}, the {them} speaks version {}",
            peer.version
        );
        let err = ProtoError::VersionMismatch {
            ours: VERSION,
            theirs: peer.version,
        };
        return Err(refuse(writer, error_code::VERSION_MISMATCH, msg, err).await);
    }
    if peer.role != expected {
        let msg = format!(
            "this {me} expects a {them}, the peer says it is a {}",
            role_name(peer.role)
        );
        let err = ProtoError::WrongRole {
            expected,
            got: peer.role,
        };
        return Err(refuse(writer, error_code::ROLE, msg, err).await);
    }
    if peer.auth_required != ours.auth_required {
        let msg = if ours.auth_required {
            format!(
                "this {me} requires a shared secret but the {them} runs without one (--no-secret)"
            )
        } else {
            format!("this {me} runs without a secret (--no-secret) but the {them} requires one")
        };
        return Err(refuse(
            writer,
            error_code::AUTH_MODE_MISMATCH,
            msg.clone(),
            ProtoError::AuthMode(msg),
        )
        .await);
    }
    Ok(peer)
}

async fn client_steps<R, W>(
    reader: &mut FrameReader<R>,
    writer: &mut FrameWriter<W>,
    secret: Option<&[u8]>,
    software: &str,
    features: u32,
    id: Identity,
) -> Result<Hello, ProtoError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let ours = Hello {
        features,
        instance: id.instance,
        fleet_index: id.fleet_index,
        fleet_size: id.fleet_size,
        ..Hello::new(Role::Copier, secret.is_some(), auth::nonce()?, software)
    };
    let peer = exchange_hello(reader, writer, &ours, Role::Intercept).await?;
    let mac = secret.map_or([0; 32], |s| auth::copier_mac(s, &peer.nonce, &ours.nonce));
    writer.write_message(&Message::Auth { mac }).await?;
    let got = reader.read_message().await?;
    let mac = expect(writer, got, "copier", "AuthOk", |m| match m {
        Message::AuthOk { mac } => Ok(mac),
        other => Err(other),
    })
    .await?;
    if let Some(s) = secret {
        if auth::verify_intercept_mac(s, &ours.nonce, &peer.nonce, &mac).is_err() {
            let msg =
                "copier: the intercept's MAC does not match: it has another secret".to_string();
            return Err(refuse(writer, error_code::AUTH_FAILED, msg, ProtoError::AuthFailed).await);
        }
        // Every later frame, both ways, is tagged. Frames the intercept sent right
        // after AuthOk may already be buffered: the decoder checks them too.
        let keys = auth::session_keys(s, &ours.nonce, &peer.nonce);
        writer.authenticate(keys.copier_to_intercept);
        reader.authenticate(keys.intercept_to_copier, Role::Intercept);
    }
    Ok(peer)
}

async fn server_steps<R, W>(
    reader: &mut FrameReader<R>,
    writer: &mut FrameWriter<W>,
    secret: Option<&[u8]>,
    software: &str,
    features: u32,
) -> Result<Hello, ProtoError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let ours = Hello {
        features,
        ..Hello::new(Role::Intercept, secret.is_some(), auth::nonce()?, software)
    };
    let peer = exchange_hello(reader, writer, &ours, Role::Copier).await?;
    let got = reader.read_message().await?;
    let mac = expect(writer, got, "intercept", "Auth", |m| match m {
        Message::Auth { mac } => Ok(mac),
        other => Err(other),
    })
    .await?;
    if let Some(s) = secret {
        if auth::verify_copier_mac(s, &ours.nonce, &peer.nonce, &mac).is_err() {
            let msg = "intercept: authentication failed: wrong secret".to_string();
            return Err(refuse(writer, error_code::AUTH_FAILED, msg, ProtoError::AuthFailed).await);
        }
    }
    let mac = secret.map_or([0; 32], |s| {
        auth::intercept_mac(s, &peer.nonce, &ours.nonce)
    });
    writer.write_message(&Message::AuthOk { mac }).await?;
    // Every later frame, both ways, is tagged.
    if let Some(s) = secret {
        let keys = auth::session_keys(s, &peer.nonce, &ours.nonce);
        writer.authenticate(keys.intercept_to_copier);
        reader.authenticate(keys.copier_to_intercept, Role::Copier);
    }
    Ok(peer)
}

#[cfg(test)]
mod tests;
