//! The control protocol spoken between a copier and an intercept (see `docs/DESIGN.md`, "The
//! control protocol").
//!
//! One TCP connection per (copier, intercept) pair, default port [`DEFAULT_PORT`]. Every frame is
//! `u32 length (big-endian, of what follows) | u8 type | body [| tag]`, type and body at most
//! [`MAX_FRAME`] bytes ([`PRE_AUTH_MAX_FRAME`] during the handshake). Both ends first exchange a
//! [`Hello`], then the copier proves that it knows the shared secret ([`Message::Auth`]) and the
//! intercept proves it back ([`Message::AuthOk`]); after that every frame carries a 16-byte tag
//! keyed per direction and numbered ([`auth`]), the copier registers and unregisters sessions
//! and the intercept sends response [`Record`]s.
//!
//! This module owns:
//! - [`codec`]: the byte format, [`Message::encode`], [`codec::seal_frames`] and the sans-IO
//!   [`FrameDecoder`], which never panics on any input, never reserves memory from a length it
//!   has not yet received, and checks the tags;
//! - [`auth`]: nonces, the HMAC-SHA256 challenge/response, the session keys and frame tags,
//!   and loading the secret file;
//! - `io` (feature `io`): the handshake and framed reading/writing over tokio streams, the only
//!   part that touches a socket or a clock.
//!
//! Invariant kept across versions: the frame header, the [`Hello`] body up to `software` and the
//! `Error` body never change layout, so that two ends of different versions can always tell each
//! other which versions they speak.

pub mod auth;
pub mod codec;
#[cfg(feature = "io")]
pub mod io;

pub use codec::{
    encode_records, encode_stamped_records, fleet_pairs, parse_response_headers, FleetMember,
    FrameDecoder, Hello, Message, Record, RegVerdict, ResponseHeaders, Role, RouteCheck,
    RouteStatus, BULK_BYTES,
};

use std::path::PathBuf;
use std::time::Duration;

/// `b"TCPY"`, the first bytes of every [`Hello`].
pub const MAGIC: [u8; 4] = *b"TCPY";
/// The protocol version this build speaks.
pub const VERSION: u16 = 2;
/// Hello feature bit: the sender understands [`Message::RegisterPayload`] (an intercept) or
/// asks for payload only with it (a copier: its plain Registers want no payload).
pub const FEATURE_PAYLOAD_REQUEST: u32 = 1;
/// Hello feature bit: the sender understands [`Message::RecordWait`] (an intercept: it may then
/// hold a copier's records that nothing waits on for as long as the copier says).
pub const FEATURE_RECORD_WAIT: u32 = 2;
/// Hello feature bit: the sender (an intercept) answers [`Message::FleetQuery`] with
/// [`Message::Fleet`].
pub const FEATURE_FLEET: u32 = 4;
/// Hello feature bit: restarts and lost rules. A copier that announces it sends
/// [`Message::Synced`] after its snapshot of registrations and understands [`Message::Rules`];
/// an intercept that announces it takes `Synced` (it ends that copier's part of a restarted
/// intercept's grace) and sends `Rules` when its firewall rules go missing or come back.
pub const FEATURE_RESTART: u32 = 8;
/// Hello feature bit: the sender (an intercept) answers [`Message::RouteQuery`] with
/// [`Message::RouteAnswer`].
pub const FEATURE_ROUTES: u32 = 16;
/// Hello feature bit: answer times. An intercept that announces it stamps each record with the
/// time it read the packet and, to a copier that announced it too, sends StampedRecords
/// instead of Records and its clock in each Pong; a copier that announces it takes both and
/// measures the offset between its clock and the intercept's from its Pings (NTP-style).
pub const FEATURE_STAMPS: u32 = 32;
/// Hello feature bit: the sender understands [`Message::OpenWait`] (an intercept: it may then
/// hold a copier's records that open or end a connection, SYN, FIN or RST, for as long as the
/// copier says, and need not wake its resting NFQUEUE readers for that copier's registrations
/// before then).
pub const FEATURE_OPEN_WAIT: u32 = 64;
/// The features this build announces in its Hello.
pub const FEATURES: u32 = FEATURE_PAYLOAD_REQUEST
    | FEATURE_RECORD_WAIT
    | FEATURE_FLEET
    | FEATURE_RESTART
    | FEATURE_ROUTES
    | FEATURE_STAMPS
    | FEATURE_OPEN_WAIT;
/// Default TCP port of the intercept's control listener.
pub const DEFAULT_PORT: u16 = 36524;
/// Largest frame length (the value of the length field: type byte and body) either end accepts;
/// a tagged frame (after an authenticated handshake) may be [`auth::TAG_LEN`] bytes longer.
pub const MAX_FRAME: usize = 1 << 20;
/// Largest frame length accepted before the handshake is complete: a Hello, Auth, AuthOk or
/// Error is far smaller, so an unauthenticated peer cannot make either end buffer more.
pub const PRE_AUTH_MAX_FRAME: usize = 4 << 10;
/// How long a handshake may take before the connection is given up.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Codes carried by [`Message::Error`].
pub mod error_code {
    /// The two ends speak different protocol versions.
    pub const VERSION_MISMATCH: u16 = 1;
    /// The peer's MAC did not verify: wrong or missing secret.
    pub const AUTH_FAILED: u16 = 2;
    /// One end requires a secret and the other runs without one.
    pub const AUTH_MODE_MISMATCH: u16 = 3;
    /// A message arrived that is not allowed at this point of the conversation.
    pub const PROTOCOL: u16 = 4;
    /// The peer announced the wrong role (e.g. a copier connected to a copier).
    pub const ROLE: u16 = 5;
    /// The sender is shutting down.
    pub const SHUTDOWN: u16 = 6;
}

/// Everything that can go wrong in the control protocol: malformed bytes, a refused handshake,
/// I/O.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// A frame's length field is larger than [`MAX_FRAME`].
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    FrameTooLarge {
        /// The declared length.
        len: u32,
        /// The limit.
        max: usize,
    },
    /// A frame's length field is zero: not even a type byte.
    #[error("empty frame (length 0)")]
    EmptyFrame,
    /// The type byte names no known message.
    #[error("unknown message type {0}")]
    UnknownType(u8),
    /// A body ended before one of its fields.
    #[error("truncated {what}: need {need} more bytes, have {have}")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Bytes the field needs.
        need: usize,
        /// Bytes left in the body.
        have: usize,
    },
    /// A body has bytes after its last field.
    #[error("{extra} unexpected trailing bytes after a {msg} message")]
    TrailingBytes {
        /// The message type.
        msg: &'static str,
        /// How many bytes were left over.
        extra: usize,
    },
    /// A list count cannot fit in the rest of the frame.
    #[error("{what} count {count} cannot fit in the {remaining} bytes left in the frame")]
    CountTooLarge {
        /// What is being counted.
        what: &'static str,
        /// The declared count.
        count: u32,
        /// Bytes left in the frame.
        remaining: usize,
    },
    /// A Hello does not start with [`MAGIC`]: the peer speaks another protocol.
    #[error("bad magic {0:02x?}: the peer does not speak this protocol")]
    BadMagic([u8; 4]),
    /// A Hello names an unknown role.
    #[error("unknown role {0}")]
    BadRole(u8),
    /// An address family byte is neither 4 nor 6.
    #[error("unknown address family {0}")]
    BadFamily(u8),
    /// A 4-tuple mixes an IPv4 and an IPv6 address.
    #[error("4-tuple mixes IPv4 and IPv6 addresses")]
    MixedFamilies,
    /// A string field is not UTF-8.
    #[error("string field is not valid UTF-8")]
    BadUtf8,
    /// The decoder already failed once; the connection must be closed.
    #[error("decoder stopped after an earlier error")]
    Poisoned,
    /// The peer speaks another protocol version.
    #[error("protocol version mismatch: this end speaks version {ours}, the peer speaks version {theirs}")]
    VersionMismatch {
        /// Our version.
        ours: u16,
        /// The peer's version.
        theirs: u16,
    },
    /// The peer announced the wrong role.
    #[error("peer announced role {got:?}, expected {expected:?}")]
    WrongRole {
        /// The role we need the peer to have.
        expected: Role,
        /// The role it announced.
        got: Role,
    },
    /// A message arrived that is not allowed at this point.
    #[error("unexpected {got} message, expected {expected}")]
    Unexpected {
        /// What was expected.
        expected: &'static str,
        /// What arrived.
        got: &'static str,
    },
    /// The peer sent an Error message.
    #[error("peer refused: {message} (code {code})")]
    Remote {
        /// The error code (see [`error_code`]).
        code: u16,
        /// The peer's explanation.
        message: String,
    },
    /// The peer's MAC did not verify (wrong secret).
    #[error("authentication failed: the peer's MAC does not match (different secret?)")]
    AuthFailed,
    /// One end has a secret and the other has none.
    #[error("authentication mode mismatch: {0}")]
    AuthMode(String),
    /// The handshake did not finish in time.
    #[error("handshake timed out after {0:?}")]
    Timeout(Duration),
    /// The peer closed the connection in the middle of a frame or of the handshake.
    #[error("connection closed by peer{0}")]
    Closed(&'static str),
    /// The OS random number generator failed.
    #[error("OS random number generator failed: {0}")]
    Rng(String),
    /// The secret file could not be read.
    #[error("cannot read secret file {path}: {source}")]
    SecretFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The secret file is empty (after trimming the trailing newline).
    #[error("secret file {0} is empty; put a shared secret in it (e.g. `head -c 32 /dev/urandom | base64 > FILE`)")]
    SecretEmpty(PathBuf),
    /// The secret is shorter than [`auth::MIN_SECRET_LEN`] bytes.
    #[error("secret file {path} holds a secret of {len} bytes, at least {min} are required (e.g. `head -c 32 /dev/urandom | base64 > FILE`)", path = path.display(), min = auth::MIN_SECRET_LEN)]
    SecretTooShort {
        /// The file.
        path: PathBuf,
        /// The secret's length after trimming the trailing newline.
        len: usize,
    },
    /// The secret is a known placeholder (the one of `deploy/k8s/secret.yaml`, or one like it).
    #[error("secret file {path} holds a placeholder ({placeholder:?}), not a secret: every copier and intercept would share a value anyone can read in the repository; put a random one in it (e.g. `head -c 32 /dev/urandom | base64 > FILE`, or `kubectl create secret generic ... --from-literal=secret=\"$(head -c 32 /dev/urandom | base64)\"`)", path = path.display())]
    SecretPlaceholder {
        /// The file.
        path: PathBuf,
        /// The placeholder it holds (or contains).
        placeholder: &'static str,
    },
    /// The secret file may be read or written by its group or by others.
    #[error("secret file {path} has mode {mode:04o}: it must be readable by its owner only; run `chmod 600 {path}`", path = path.display())]
    SecretPermissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A frame after the handshake carries a tag that does not verify: it was modified,
    /// replayed, reordered, dropped or injected between the two ends.
    #[error("frame {frame} from the {from} fails its authentication tag: the control stream was modified, replayed, reordered or cut in transit")]
    BadTag {
        /// The peer the frame claims to come from (`"copier"` or `"intercept"`).
        from: &'static str,
        /// The frame's number among the peer's tagged frames (0 is the first after the
        /// handshake).
        frame: u64,
    },
    /// Nothing arrived from the peer for longer than the reader's idle timeout.
    #[error("no frame from the peer for {0:?}")]
    Idle(Duration),
    /// Socket I/O failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}
