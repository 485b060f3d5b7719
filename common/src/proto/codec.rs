//! The byte format of the control protocol: [`Message`] and its frames, and the sans-IO
//! [`FrameDecoder`].
//!
//! Frame: `u32 len | u8 type | body [| tag]`, `len` counts the type byte, the body and the tag;
//! the type byte and body are at most [`MAX_FRAME`] bytes, or what
//! [`FrameDecoder::set_max_frame`] allows (the handshake uses [`super::PRE_AUTH_MAX_FRAME`]).
//! After an authenticated handshake every frame ends with a [`TAG_LEN`]-byte tag over a frame
//! counter and the frame's bytes before the tag ([`seal_frames`], [`FrameDecoder::authenticate`];
//! the keys and the tag are defined in [`super::auth`]); without a secret there is no tag.
//! Integers are big-endian. Address: `u8 family (4|6) | 4 or 16 bytes | u16 port`;
//! a 4-tuple is the client address then the server address, both of one family. A string is
//! `u16 len | UTF-8 bytes`; a list is `u32 count | items`.
//!
//! | type | message    | body |
//! |------|------------|------|
//! | 1    | Hello      | `"TCPY" | u16 version | u8 role | u8 auth_required | [32] nonce | str software [| u32 features [| u64 instance | u16 fleet_index | u16 fleet_size]]` (+ fields of later versions, ignored; instance 0: no identity, its fleet share ignored) |
//! | 2    | Auth       | `[32] mac` |
//! | 3    | AuthOk     | `[32] mac` |
//! | 4    | Error      | `u16 code | str message` |
//! | 5    | Register   | `list of 4-tuple` |
//! | 6    | Unregister | `list of 4-tuple` |
//! | 7    | Records    | `list of (u32 orig_len | u16 hlen | headers | u32 plen | payload)` |
//! | 8    | Ping       | `u64 token` |
//! | 9    | Pong       | `u64 token [| u64 clock_ns]`: `clock_ns` (the intercept's clock when it read the Ping, nanoseconds since the Unix epoch) only to a copier whose Hello has [`FEATURE_STAMPS`] |
//! | 10   | Registered | `list of (4-tuple | u8 verdict)`: the intercept's answer to each Register or RegisterPayload, in order (0 accepted, 1 port not guarded, 2 family not guarded, 3 limit reached, 4 held by another copier: another live copier instance holds the tuple, 5 server not local: the server address is not one of the intercept's host, another intercept guards it) |
//! | 11   | RegisterPayload | `list of (4-tuple | u32 payload_bytes)`: a Register that also asks for up to `payload_bytes` of each answer packet's TCP payload on that tuple; sent only to a peer whose Hello has [`FEATURE_PAYLOAD_REQUEST`] |
//! | 12   | RecordWait | `u32 micros`: copier -> intercept, how long the intercept may hold this copier's records that nothing waits on (0: send every record at once, the default of a connection); sent only to a peer whose Hello has [`FEATURE_RECORD_WAIT`] |
//! | 13   | FleetQuery | empty: copier -> intercept (`copier doctor`), which copiers are connected; sent only to a peer whose Hello has [`FEATURE_FLEET`] |
//! | 14   | Fleet      | `list of (u64 instance | address | u16 fleet_index | u16 fleet_size)`: intercept -> copier, the answer to a FleetQuery: every connected copier connection with the identity its Hello announced |
//! | 15   | Synced     | empty: copier -> intercept, its snapshot of live sessions is registered (ends its part of a restarted intercept's grace); sent only to a peer whose Hello has [`FEATURE_RESTART`] |
//! | 16   | Rules      | `u8 in_force`: intercept -> copier, its firewall rules went missing (0: send nothing on registered sessions) or are back (1); sent only to a peer whose Hello has [`FEATURE_RESTART`] |
//! | 17   | RouteQuery | `list of (address | u8 prefix)`: copier -> intercept (`copier doctor`), does the intercept's host route these client ranges back through the asking copier's host; sent only to a peer whose Hello has [`FEATURE_ROUTES`] |
//! | 18   | RouteAnswer | `list of (address | u8 prefix | u8 status | str item | str detail | str fix)`: intercept -> copier, the answer to a RouteQuery: its findings per range (status 0 ok, 1 warning, 2 failure) |
//! | 19   | StampedRecords | `list of (u64 stamp_ns | record as in Records)`: intercept -> copier, Records with the time the intercept read each packet from NFQUEUE ([`Record::stamp`], 0 unknown); sent instead of Records only to a copier whose Hello has [`FEATURE_STAMPS`] |
//! | 20   | OpenWait   | `u32 micros`: copier -> intercept, how long the intercept may hold this copier's records that open, close or reset a connection (SYN, FIN, RST) and how long a registration's SYN-ACK may wait for a resting NFQUEUE reader (0: send them at once, the default of a connection); sent only to a peer whose Hello has [`FEATURE_OPEN_WAIT`] |
//!
//! `features` (a bit set, [`super::FEATURES`] for this build) was appended to the Hello within
//! version 2: a Hello without it (an older build) decodes with `features` 0, and an older
//! build ignores it (it ignores whatever follows `software`). So the version stays 2 and both
//! pairings of old and new ends keep working; a feature is used only when the peer announced it.
//! The copier's identity (`instance`, a random number per copier process, kept across its
//! reconnections, and its fleet share `fleet_index`/`fleet_size`, `--fleet`) was appended the
//! same way: encoded only when set (an instance above 0), decoded as 0 when absent.
//!
//! Invariants: the decoder never panics, whatever the input; a tagged frame is decoded only
//! after its tag verified, and the counter advances only then; it allocates only for bytes it has
//! actually received (a list count is checked against the bytes left in its frame before any
//! `Vec` is reserved); after the first error it stays failed ([`ProtoError::Poisoned`]) because
//! the stream can no longer be resynchronised. Encoding never produces a frame larger than
//! [`MAX_FRAME`]: long lists are split over several frames of the same type, which mean the same.
//!
//! [`MAX_FRAME`]: super::MAX_FRAME
//! [`TAG_LEN`]: super::auth::TAG_LEN

mod body;
mod frame;
mod record;

use std::net::{IpAddr, SocketAddr};

use crate::flow::{Endpoint, FourTuple};

use super::{ProtoError, FEATURES, MAGIC, VERSION};
pub use super::{
    FEATURE_FLEET, FEATURE_OPEN_WAIT, FEATURE_PAYLOAD_REQUEST, FEATURE_RECORD_WAIT,
    FEATURE_RESTART, FEATURE_ROUTES, FEATURE_STAMPS,
};
use body::{
    addr_len, begin_frame, encode_list, end_frame, get_addr, get_record, get_tuple, put_addr,
    put_record, put_record_clipped, put_str, put_tuple, tuple_len, Reader,
};
pub use frame::{seal_frames, FrameDecoder};
pub use record::{parse_response_headers, Record, ResponseHeaders, BULK_BYTES};

const T_HELLO: u8 = 1;
const T_AUTH: u8 = 2;
const T_AUTH_OK: u8 = 3;
const T_ERROR: u8 = 4;
const T_REGISTER: u8 = 5;
const T_UNREGISTER: u8 = 6;
const T_RECORDS: u8 = 7;
const T_PING: u8 = 8;
const T_PONG: u8 = 9;
const T_REGISTERED: u8 = 10;
const T_REGISTER_PAYLOAD: u8 = 11;
const T_RECORD_WAIT: u8 = 12;
const T_FLEET_QUERY: u8 = 13;
const T_FLEET: u8 = 14;
const T_SYNCED: u8 = 15;
const T_RULES: u8 = 16;
const T_ROUTE_QUERY: u8 = 17;
const T_ROUTE_ANSWER: u8 = 18;
const T_STAMPED_RECORDS: u8 = 19;
const T_OPEN_WAIT: u8 = 20;

/// Smallest encoded 4-tuple (two IPv4 addresses with ports).
const MIN_TUPLE: usize = 2 * (1 + 4 + 2);
/// Smallest encoded record (empty headers and payload).
const MIN_RECORD: usize = 4 + 2 + 4;

/// Which end of the control connection a peer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The copier: registers sessions, receives records.
    Copier,
    /// The intercept: sends records.
    Intercept,
}

impl Role {
    /// `"copier"` or `"intercept"`, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Copier => "copier",
            Role::Intercept => "intercept",
        }
    }

    fn to_byte(self) -> u8 {
        match self {
            Role::Copier => 1,
            Role::Intercept => 2,
        }
    }

    fn from_byte(b: u8) -> Result<Role, ProtoError> {
        match b {
            1 => Ok(Role::Copier),
            2 => Ok(Role::Intercept),
            other => Err(ProtoError::BadRole(other)),
        }
    }
}

/// The first message of each end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Protocol version of the sender ([`VERSION`] for this build).
    pub version: u16,
    /// Who the sender is.
    pub role: Role,
    /// Whether the sender runs with a shared secret.
    pub auth_required: bool,
    /// Fresh random challenge of the sender.
    pub nonce: [u8; 32],
    /// Free text naming the sender's software and version, for logs (at most 65535 bytes).
    pub software: String,
    /// What the sender supports beyond version 2's first form (bits such as
    /// [`FEATURE_PAYLOAD_REQUEST`]); 0 from a build that predates the field.
    pub features: u32,
    /// A copier's instance: random per copier process (never 0), the same on every
    /// connection it opens and reopens, so an intercept tells a copier reconnecting (which
    /// takes its tuples back) from another copier (refused a tuple it does not hold). 0: not
    /// announced (an intercept, or a build that predates the field).
    pub instance: u64,
    /// The copier's share of the test ports in its fleet (`--fleet I/N`): index ...
    pub fleet_index: u16,
    /// ... of this many copiers (1: no fleet, the whole range; 0: not announced).
    pub fleet_size: u16,
}

impl Hello {
    /// A Hello of this build's [`VERSION`].
    pub fn new(role: Role, auth_required: bool, nonce: [u8; 32], software: &str) -> Hello {
        Hello {
            version: VERSION,
            role,
            auth_required,
            nonce,
            software: software.to_string(),
            features: FEATURES,
            instance: 0,
            fleet_index: 0,
            fleet_size: 0,
        }
    }

    /// Whether the sender announced `feature` (a [`FEATURE_PAYLOAD_REQUEST`]-like bit).
    pub fn has(&self, feature: u32) -> bool {
        self.features & feature == feature
    }
}

/// The intercept's verdict on one registered tuple ([`Message::Registered`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RegVerdict {
    /// The registration is in force: the intercept routes this session's responses to the
    /// copier from now on.
    Accepted,
    /// The tuple's server port is not one the intercept guards (`--port`): its responses would
    /// leave the test host, so the intercept refuses it.
    PortNotGuarded,
    /// The intercept has no NFQUEUE rule for the tuple's IP family (e.g. `--ipv4-only` and an
    /// IPv6 tuple).
    FamilyNotGuarded,
    /// The copier holds as many registrations as the intercept allows one copier.
    LimitReached,
    /// Another live copier (another instance, see [`Hello::instance`]) holds the tuple: two
    /// copiers picked the same test 4-tuple. The copier moves its copy to another tuple.
    HeldByOther,
    /// The tuple's server address is not an address of the intercept's host (network
    /// namespace): another intercept guards that server, this one could not keep its answers
    /// on the test host. The copier waits for the guarding intercept's verdict.
    ServerNotLocal,
    /// A verdict code this build does not know (a newer intercept): treated as a refusal.
    Other(u8),
}

impl RegVerdict {
    /// The wire code.
    pub fn code(self) -> u8 {
        match self {
            RegVerdict::Accepted => 0,
            RegVerdict::PortNotGuarded => 1,
            RegVerdict::FamilyNotGuarded => 2,
            RegVerdict::LimitReached => 3,
            RegVerdict::HeldByOther => 4,
            RegVerdict::ServerNotLocal => 5,
            RegVerdict::Other(c) => c,
        }
    }

    /// From the wire code.
    pub fn from_code(c: u8) -> RegVerdict {
        match c {
            0 => RegVerdict::Accepted,
            1 => RegVerdict::PortNotGuarded,
            2 => RegVerdict::FamilyNotGuarded,
            3 => RegVerdict::LimitReached,
            4 => RegVerdict::HeldByOther,
            5 => RegVerdict::ServerNotLocal,
            c => RegVerdict::Other(c),
        }
    }

    /// Whether the registration is in force.
    pub fn accepted(self) -> bool {
        self == RegVerdict::Accepted
    }

    /// Short label for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            RegVerdict::Accepted => "accepted",
            RegVerdict::PortNotGuarded => "port_not_guarded",
            RegVerdict::FamilyNotGuarded => "family_not_guarded",
            RegVerdict::LimitReached => "limit_reached",
            RegVerdict::HeldByOther => "held_by_other",
            RegVerdict::ServerNotLocal => "server_not_local",
            RegVerdict::Other(_) => "unknown",
        }
    }
}

/// How an intercept judges one client range of a [`Message::RouteQuery`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteStatus {
    /// Routed back through the asking copier's host, and let in.
    Ok,
    /// Copying works, but the operator should know.
    Warn,
    /// The test server's answers to this range go nowhere, or its copies are dropped.
    Fail,
}

impl RouteStatus {
    /// The wire code (0, 1, 2).
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            RouteStatus::Ok => 0,
            RouteStatus::Warn => 1,
            RouteStatus::Fail => 2,
        }
    }

    /// The status of a wire code (an unknown one is a failure: it cannot be trusted).
    #[must_use]
    pub fn from_code(c: u8) -> RouteStatus {
        match c {
            0 => RouteStatus::Ok,
            1 => RouteStatus::Warn,
            _ => RouteStatus::Fail,
        }
    }
}

/// One finding of an intercept on a client range, as [`Message::RouteAnswer`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteCheck {
    /// The range asked about: its address and prefix length.
    pub net: (IpAddr, u8),
    /// How bad it is.
    pub status: RouteStatus,
    /// What was checked (`route back to 198.18.0.0/24`, `rp_filter on eth0`).
    pub item: String,
    /// What was found.
    pub detail: String,
    /// The command that fixes it (empty when nothing is to fix).
    pub fix: String,
}

/// One copier connection an intercept has, as [`Message::Fleet`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetMember {
    /// Its Hello's [`Hello::instance`] (0: not announced).
    pub instance: u64,
    /// Where it connected from.
    pub addr: SocketAddr,
    /// Its Hello's [`Hello::fleet_index`] ...
    pub index: u16,
    /// ... and [`Hello::fleet_size`] (0: not announced).
    pub size: u16,
}

/// The test port pairs (`port >> 1`, of 1024..=65535: pairs 512..=32767) of copier `index` of
/// a fleet of `size` (`copier --fleet I/N`): the `index`-th of `size` contiguous runs, split as
/// evenly as they go; `lo > hi` when the fleet has more copiers than pairs. A size of 0 or 1
/// (no fleet) is the whole range.
#[must_use]
pub fn fleet_pairs(index: u16, size: u16) -> (u32, u32) {
    const FIRST: u32 = 512;
    const LAST: u32 = 32767;
    let n = u32::from(size.max(1));
    let i = u32::from(index) % n;
    let all = LAST - FIRST + 1;
    (FIRST + i * all / n, FIRST + (i + 1) * all / n - 1)
}

impl FleetMember {
    /// Whether two copiers' test port runs overlap (a copier that announced no fleet uses
    /// every port). Two copiers that overlap and see the same clients pick the same test
    /// tuples (the intercept refuses the second, and it moves its copy).
    #[must_use]
    pub fn shares_ports_with(&self, other: &FleetMember) -> bool {
        let (a, b) = (
            fleet_pairs(self.index, self.size),
            fleet_pairs(other.index, other.size),
        );
        a.0 <= a.1 && b.0 <= b.1 && a.0 <= b.1 && b.0 <= a.1
    }
}

/// A control-protocol message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// First message of both ends.
    Hello(Hello),
    /// Copier -> intercept: `HMAC-SHA256(secret, "tcopy-v1 copier" | intercept_nonce | copier_nonce)`.
    Auth {
        /// The MAC (all zero without a secret).
        mac: [u8; 32],
    },
    /// Intercept -> copier: `HMAC-SHA256(secret, "tcopy-v1 intercept" | copier_nonce | intercept_nonce)`.
    AuthOk {
        /// The MAC (all zero without a secret).
        mac: [u8; 32],
    },
    /// Either way: the sender refuses and closes.
    Error {
        /// See [`super::error_code`].
        code: u16,
        /// Human-readable reason (at most 65535 bytes).
        message: String,
    },
    /// Copier -> intercept: route the responses of these sessions to me.
    Register {
        /// Sessions as the test server sees them.
        tuples: Vec<FourTuple>,
    },
    /// Copier -> intercept: these sessions are over.
    Unregister {
        /// Sessions as the test server sees them.
        tuples: Vec<FourTuple>,
    },
    /// Intercept -> copier: response packets of registered sessions.
    Records {
        /// The records, in the order the packets were queued.
        records: Vec<Record>,
    },
    /// Liveness probe; answered with a Pong carrying the same token.
    Ping {
        /// Echoed back.
        token: u64,
    },
    /// Answer to a Ping.
    Pong {
        /// The Ping's token.
        token: u64,
        /// The intercept's clock when it read the Ping (nanoseconds since the Unix epoch; 0:
        /// absent, not encoded). Only to a copier whose Hello has [`FEATURE_STAMPS`]: the
        /// copier measures the offset between the two clocks with it.
        clock: u64,
    },
    /// Copier -> intercept: route the responses of these sessions to me (as
    /// [`Message::Register`] does) and keep up to the given number of TCP payload bytes of each
    /// of their response packets in the records. Only to an intercept whose Hello has
    /// [`FEATURE_PAYLOAD_REQUEST`].
    RegisterPayload {
        /// Sessions as the test server sees them, each with the payload bytes asked for.
        tuples: Vec<(FourTuple, u32)>,
    },
    /// Copier -> intercept (`copier doctor`): which copiers are connected ([`Message::Fleet`]).
    /// Only to an intercept whose Hello has [`FEATURE_FLEET`].
    FleetQuery,
    /// Intercept -> copier: the answer to a [`Message::FleetQuery`].
    Fleet {
        /// Every copier connection, the asking one included.
        copiers: Vec<FleetMember>,
    },
    /// Intercept -> copier: the verdict on every tuple of a Register, sent after the
    /// registrations it accepts are in force (a copier sends a session's SYN only after its
    /// tuple was accepted).
    Registered {
        /// Each tuple of the Register with its verdict, in the Register's order.
        results: Vec<(FourTuple, RegVerdict)>,
    },
    /// Copier -> intercept (`copier doctor`): does the intercept's host route these client
    /// ranges (address, prefix length) back through the asking copier's host, and does
    /// rp_filter let their copies in ([`Message::RouteAnswer`]). Only to an intercept whose
    /// Hello has [`FEATURE_ROUTES`].
    RouteQuery {
        /// The client ranges the copies come from.
        nets: Vec<(IpAddr, u8)>,
    },
    /// Intercept -> copier: the answer to a [`Message::RouteQuery`], its findings per range.
    RouteAnswer {
        /// The findings, ranges in the query's order.
        checks: Vec<RouteCheck>,
    },
    /// Copier -> intercept: how long the intercept may hold this copier's records that nothing
    /// waits on (none of SYN, FIN, RST) before it sends them; 0, the default of a connection:
    /// not at all. The copier says 0 while its engine waits on records (lock-step sessions),
    /// its `--record-wait` otherwise. Only to an intercept whose Hello has
    /// [`FEATURE_RECORD_WAIT`].
    RecordWait {
        /// Microseconds.
        micros: u32,
    },
    /// Copier -> intercept: how long the intercept may hold this copier's records that open,
    /// close or reset a connection (SYN, FIN, RST: [`Record::opens_or_ends`]), and how long the
    /// SYN-ACK of a connection it registers may wait for a resting NFQUEUE reader; 0, the
    /// default of a connection: not at all (they go at once, and every registration wakes a
    /// resting reader). The copier says its `--open-wait` while it says a [`Message::RecordWait`]
    /// above 0, and 0 with it. Only to an intercept whose Hello has [`FEATURE_OPEN_WAIT`].
    OpenWait {
        /// Microseconds.
        micros: u32,
    },
    /// Copier -> intercept: every session the copier held when the connection came up is
    /// registered (its snapshot is sent), so a restarted intercept's grace may end for this
    /// copier. Only to an intercept whose Hello has [`super::FEATURE_RESTART`].
    Synced,
    /// Intercept -> copier: whether the intercept's firewall rules are in force (`false`: they
    /// went missing and the answers of registered sessions could leave the test host, so the
    /// copier sends nothing on them until `true` comes). Only to a copier whose Hello has
    /// [`super::FEATURE_RESTART`].
    Rules {
        /// The rules are in force.
        in_force: bool,
    },
}

impl Message {
    /// Short name of the message type, for errors and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Hello(_) => "Hello",
            Message::Auth { .. } => "Auth",
            Message::AuthOk { .. } => "AuthOk",
            Message::Error { .. } => "Error",
            Message::Register { .. } => "Register",
            Message::Unregister { .. } => "Unregister",
            Message::Records { .. } => "Records",
            Message::Ping { .. } => "Ping",
            Message::Pong { .. } => "Pong",
            Message::Registered { .. } => "Registered",
            Message::RegisterPayload { .. } => "RegisterPayload",
            Message::RecordWait { .. } => "RecordWait",
            Message::OpenWait { .. } => "OpenWait",
            Message::FleetQuery => "FleetQuery",
            Message::RouteQuery { .. } => "RouteQuery",
            Message::RouteAnswer { .. } => "RouteAnswer",
            Message::Fleet { .. } => "Fleet",
            Message::Synced => "Synced",
            Message::Rules { .. } => "Rules",
        }
    }

    /// Append this message to `out` as one frame, or as several frames of the same type when a
    /// Register/Unregister/Records list would not fit in [`MAX_FRAME`]; the receiver sees the
    /// same tuples or records in the same order. Strings longer than 65535 bytes and record
    /// payloads that could never fit in a frame are cut (at a character boundary for strings).
    ///
    /// [`MAX_FRAME`]: super::MAX_FRAME
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Message::Hello(h) => {
                let start = begin_frame(out, T_HELLO);
                out.extend_from_slice(&MAGIC);
                out.extend_from_slice(&h.version.to_be_bytes());
                out.push(h.role.to_byte());
                out.push(u8::from(h.auth_required));
                out.extend_from_slice(&h.nonce);
                put_str(out, &h.software);
                out.extend_from_slice(&h.features.to_be_bytes());
                if h.instance != 0 {
                    out.extend_from_slice(&h.instance.to_be_bytes());
                    out.extend_from_slice(&h.fleet_index.to_be_bytes());
                    out.extend_from_slice(&h.fleet_size.to_be_bytes());
                }
                end_frame(out, start);
            }
            Message::Auth { mac } | Message::AuthOk { mac } => {
                let ty = if matches!(self, Message::Auth { .. }) {
                    T_AUTH
                } else {
                    T_AUTH_OK
                };
                let start = begin_frame(out, ty);
                out.extend_from_slice(mac);
                end_frame(out, start);
            }
            Message::Error { code, message } => {
                let start = begin_frame(out, T_ERROR);
                out.extend_from_slice(&code.to_be_bytes());
                put_str(out, message);
                end_frame(out, start);
            }
            Message::Register { tuples } => {
                encode_list(out, T_REGISTER, tuples, tuple_len, put_tuple)
            }
            Message::Unregister { tuples } => {
                encode_list(out, T_UNREGISTER, tuples, tuple_len, put_tuple)
            }
            Message::RegisterPayload { tuples } => encode_list(
                out,
                T_REGISTER_PAYLOAD,
                tuples,
                |(t, _)| tuple_len(t) + 4,
                |out, (t, n)| {
                    put_tuple(out, t);
                    out.extend_from_slice(&n.to_be_bytes());
                },
            ),
            // Stamped records go as StampedRecords (which only a peer with FEATURE_STAMPS
            // reads); a writer that must not send them uses `encode_records`.
            Message::Records { records } if records.iter().any(|r| r.stamp != 0) => {
                encode_stamped_records(records, out)
            }
            Message::Records { records } => encode_records(records, out),
            Message::Registered { results } => encode_list(
                out,
                T_REGISTERED,
                results,
                |(t, _)| tuple_len(t) + 1,
                |out, (t, v)| {
                    put_tuple(out, t);
                    out.push(v.code());
                },
            ),
            Message::FleetQuery => {
                let start = begin_frame(out, T_FLEET_QUERY);
                end_frame(out, start);
            }
            Message::Synced => {
                let start = begin_frame(out, T_SYNCED);
                end_frame(out, start);
            }
            Message::Rules { in_force } => {
                let start = begin_frame(out, T_RULES);
                out.push(u8::from(*in_force));
                end_frame(out, start);
            }
            Message::Fleet { copiers } => encode_list(
                out,
                T_FLEET,
                copiers,
                |m| 8 + addr_len(&Endpoint::new(m.addr.ip(), m.addr.port())) + 4,
                |out, m| {
                    out.extend_from_slice(&m.instance.to_be_bytes());
                    put_addr(out, &Endpoint::new(m.addr.ip(), m.addr.port()));
                    out.extend_from_slice(&m.index.to_be_bytes());
                    out.extend_from_slice(&m.size.to_be_bytes());
                },
            ),
            Message::RouteQuery { nets } => encode_list(
                out,
                T_ROUTE_QUERY,
                nets,
                |(ip, _)| addr_len(&Endpoint::new(*ip, 0)) + 1,
                |out, (ip, p)| {
                    put_addr(out, &Endpoint::new(*ip, 0));
                    out.push(*p);
                },
            ),
            Message::RouteAnswer { checks } => {
                let len = |c: &RouteCheck| {
                    let s = |t: &str| 2 + t.len().min(u16::MAX as usize);
                    addr_len(&Endpoint::new(c.net.0, 0)) + 2 + s(&c.item) + s(&c.detail) + s(&c.fix)
                };
                encode_list(out, T_ROUTE_ANSWER, checks, len, |out, c| {
                    put_addr(out, &Endpoint::new(c.net.0, 0));
                    out.push(c.net.1);
                    out.push(c.status.code());
                    put_str(out, &c.item);
                    put_str(out, &c.detail);
                    put_str(out, &c.fix);
                })
            }
            Message::RecordWait { micros } => {
                let start = begin_frame(out, T_RECORD_WAIT);
                out.extend_from_slice(&micros.to_be_bytes());
                end_frame(out, start);
            }
            Message::OpenWait { micros } => {
                let start = begin_frame(out, T_OPEN_WAIT);
                out.extend_from_slice(&micros.to_be_bytes());
                end_frame(out, start);
            }
            Message::Ping { token } => {
                let start = begin_frame(out, T_PING);
                out.extend_from_slice(&token.to_be_bytes());
                end_frame(out, start);
            }
            Message::Pong { token, clock } => {
                let start = begin_frame(out, T_PONG);
                out.extend_from_slice(&token.to_be_bytes());
                if *clock != 0 {
                    out.extend_from_slice(&clock.to_be_bytes());
                }
                end_frame(out, start);
            }
        }
    }

    /// Decode one frame body (the bytes after the length field: type byte, then body).
    pub fn decode_body(frame: &[u8]) -> Result<Message, ProtoError> {
        let mut r = Reader { buf: frame };
        let ty = r.u8("message type")?;
        let (msg, name) = match ty {
            T_HELLO => {
                let magic: [u8; 4] = r.array("magic")?;
                if magic != MAGIC {
                    return Err(ProtoError::BadMagic(magic));
                }
                let version = r.u16("version")?;
                let role = Role::from_byte(r.u8("role")?)?;
                let auth_required = r.u8("auth_required")? != 0;
                let nonce = r.array("nonce")?;
                let software = r.string("software")?;
                // Absent from a build that predates it.
                let features = if r.buf.len() >= 4 {
                    r.u32("features")?
                } else {
                    0
                };
                let (instance, fleet_index, fleet_size) = if r.buf.len() >= 12 {
                    let identity = (
                        r.u64("instance")?,
                        r.u16("fleet_index")?,
                        r.u16("fleet_size")?,
                    );
                    // Instance 0 is "not announced", and the encoder leaves such an identity
                    // out: a fleet share sent beside it means nothing (found by fuzzing: it
                    // decoded, and its re-encoding did not say it).
                    if identity.0 == 0 {
                        (0, 0, 0)
                    } else {
                        identity
                    }
                } else {
                    (0, 0, 0)
                };
                // Later versions may append fields to Hello: ignore them.
                r.buf = &[];
                (
                    Message::Hello(Hello {
                        version,
                        role,
                        auth_required,
                        nonce,
                        software,
                        features,
                        instance,
                        fleet_index,
                        fleet_size,
                    }),
                    "Hello",
                )
            }
            T_AUTH => (
                Message::Auth {
                    mac: r.array("mac")?,
                },
                "Auth",
            ),
            T_AUTH_OK => (
                Message::AuthOk {
                    mac: r.array("mac")?,
                },
                "AuthOk",
            ),
            T_ERROR => {
                let code = r.u16("error code")?;
                let message = r.string("error message")?;
                (Message::Error { code, message }, "Error")
            }
            T_REGISTER => (
                Message::Register {
                    tuples: r.list("tuple", MIN_TUPLE, get_tuple)?,
                },
                "Register",
            ),
            T_UNREGISTER => (
                Message::Unregister {
                    tuples: r.list("tuple", MIN_TUPLE, get_tuple)?,
                },
                "Unregister",
            ),
            T_RECORDS => (
                Message::Records {
                    records: r.list("record", MIN_RECORD, get_record)?,
                },
                "Records",
            ),
            T_STAMPED_RECORDS => (
                Message::Records {
                    records: r.list("stamped record", 8 + MIN_RECORD, |r| {
                        let stamp = r.u64("record stamp")?;
                        Ok(Record {
                            stamp,
                            ..get_record(r)?
                        })
                    })?,
                },
                "StampedRecords",
            ),
            T_PING => (
                Message::Ping {
                    token: r.u64("token")?,
                },
                "Ping",
            ),
            T_PONG => (
                Message::Pong {
                    token: r.u64("token")?,
                    clock: if r.buf.len() >= 8 { r.u64("clock")? } else { 0 },
                },
                "Pong",
            ),
            T_REGISTERED => (
                Message::Registered {
                    results: r.list("registration result", MIN_TUPLE + 1, |r| {
                        let t = get_tuple(r)?;
                        Ok((t, RegVerdict::from_code(r.u8("registration verdict")?)))
                    })?,
                },
                "Registered",
            ),
            T_RECORD_WAIT => (
                Message::RecordWait {
                    micros: r.u32("record wait")?,
                },
                "RecordWait",
            ),
            T_OPEN_WAIT => (
                Message::OpenWait {
                    micros: r.u32("open wait")?,
                },
                "OpenWait",
            ),
            T_FLEET_QUERY => (Message::FleetQuery, "FleetQuery"),
            T_SYNCED => (Message::Synced, "Synced"),
            T_RULES => (
                Message::Rules {
                    in_force: r.u8("rules state")? != 0,
                },
                "Rules",
            ),
            T_FLEET => (
                Message::Fleet {
                    copiers: r.list("fleet member", 8 + 7 + 4, |r| {
                        let instance = r.u64("instance")?;
                        let addr = get_addr(r)?;
                        Ok(FleetMember {
                            instance,
                            addr,
                            index: r.u16("fleet_index")?,
                            size: r.u16("fleet_size")?,
                        })
                    })?,
                },
                "Fleet",
            ),
            T_ROUTE_QUERY => (
                Message::RouteQuery {
                    nets: r.list("client range", 7 + 1, |r| {
                        Ok((get_addr(r)?.ip(), r.u8("prefix")?))
                    })?,
                },
                "RouteQuery",
            ),
            T_ROUTE_ANSWER => (
                Message::RouteAnswer {
                    checks: r.list("route check", 7 + 2 + 6, |r| {
                        let net = (get_addr(r)?.ip(), r.u8("prefix")?);
                        let status = RouteStatus::from_code(r.u8("route status")?);
                        Ok(RouteCheck {
                            net,
                            status,
                            item: r.string("item")?,
                            detail: r.string("detail")?,
                            fix: r.string("fix")?,
                        })
                    })?,
                },
                "RouteAnswer",
            ),
            T_REGISTER_PAYLOAD => (
                Message::RegisterPayload {
                    tuples: r.list("payload registration", MIN_TUPLE + 4, |r| {
                        let t = get_tuple(r)?;
                        Ok((t, r.u32("payload bytes")?))
                    })?,
                },
                "RegisterPayload",
            ),
            other => return Err(ProtoError::UnknownType(other)),
        };
        if !r.buf.is_empty() {
            return Err(ProtoError::TrailingBytes {
                msg: name,
                extra: r.buf.len(),
            });
        }
        Ok(msg)
    }
}

/// Append `records` as `Message::Records` frames (as many as [`MAX_FRAME`] requires) without
/// building a `Message`: what a writer draining a queue of records uses. Their stamps are not
/// sent ([`encode_stamped_records`] sends them).
///
/// [`MAX_FRAME`]: super::MAX_FRAME
pub fn encode_records(records: &[Record], out: &mut Vec<u8>) {
    encode_list(out, T_RECORDS, records, Record::encoded_len, put_record)
}

/// [`encode_records`] with each record's [`Record::stamp`]: StampedRecords frames (type 19),
/// which decode as `Message::Records`; only for a peer whose Hello has [`FEATURE_STAMPS`].
pub fn encode_stamped_records(records: &[Record], out: &mut Vec<u8>) {
    encode_list(
        out,
        T_STAMPED_RECORDS,
        records,
        Record::stamped_len,
        |out, r| {
            out.extend_from_slice(&r.stamp.to_be_bytes());
            put_record_clipped(out, r, true);
        },
    )
}

#[cfg(test)]
mod tests;
