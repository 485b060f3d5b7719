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
//! | 1    | Hello      | `"TCPY" | u16 version | u8 role | u8 auth_required | [32] nonce | str software [| u32 features [| u64 instance | u16 fleet_index | u16 fleet_size]]` (+ fields of later versions, ignored) |
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

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::flow::{Endpoint, FourTuple};
use crate::wire::{parse_tcp_headers, WireError};

use super::auth::{FrameKey, TAG_LEN};
use super::{ProtoError, FEATURES, MAGIC, MAX_FRAME, VERSION};
pub use super::{
    FEATURE_FLEET, FEATURE_PAYLOAD_REQUEST, FEATURE_RECORD_WAIT, FEATURE_RESTART, FEATURE_ROUTES,
    FEATURE_STAMPS,
};

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

/// Bytes of TCP payload above which a record is part of a large answer and never waits
/// ([`Record::urgent`]): three full segments, as a GSO super-segment delivers them.
pub const BULK_BYTES: usize = 4096;

/// One response packet of the test server, as the intercept sends it to the copier.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// Length of the whole original IP packet.
    pub orig_len: u32,
    /// The IP header and the full TCP header, options included.
    pub headers: Vec<u8>,
    /// The first bytes of the TCP payload (empty unless the intercept was asked for payload).
    pub payload: Vec<u8>,
    /// When the packet was seen, in nanoseconds since the Unix epoch, 0 if unknown. The
    /// intercept stamps it with its own clock when it reads the packet from NFQUEUE; it
    /// travels only in StampedRecords (peers with [`FEATURE_STAMPS`]), and the copier's control
    /// link translates it to the copier's clock (`copier::clock`) as it reads it.
    pub stamp: u64,
}

/// What the intercept needs from a response packet whose bytes may stop anywhere after its TCP
/// header: NFQUEUE's copy range cuts packets short, and a [`Record`] keeps only the headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHeaders {
    /// The session, as the test server sees it ([`FourTuple::of_response`]).
    pub tuple: FourTuple,
    /// The IP header's length.
    pub ip_header_len: usize,
    /// IP header plus full TCP header.
    pub headers_len: usize,
    /// Length of the whole original packet, from the IP length field.
    pub orig_len: usize,
}

/// Parse the IP and TCP headers of a server -> client packet that may be truncated after its
/// TCP header (the wire view [`parse_tcp_headers`]: everything [`crate::wire::parse_tcp_packet`] refuses in
/// the header part is refused here too; only "the IP length says more bytes follow than the
/// buffer holds" is accepted).
pub fn parse_response_headers(buf: &[u8]) -> Result<ResponseHeaders, WireError> {
    let h = parse_tcp_headers(buf)?;
    Ok(ResponseHeaders {
        tuple: FourTuple::of_response(&h.packet),
        ip_header_len: h.packet.ip_header_len,
        headers_len: h.packet.headers_len(),
        orig_len: h.declared_len,
    })
}

impl Record {
    /// Whether its packet opens, closes or resets a connection (SYN, FIN or RST), or its
    /// headers do not parse as IPv4 or IPv6 TCP: the records that are urgent
    /// ([`Record::urgent`]) whatever they carry.
    #[must_use]
    pub fn opens_or_ends(&self) -> bool {
        const SYN_FIN_RST: u8 = 0x07;
        match self.tcp_flags() {
            Some(flags) => flags & SYN_FIN_RST != 0,
            None => true,
        }
    }

    /// The TCP header's offset byte and flags byte, when the headers parse that far.
    fn tcp_offset_flags(&self) -> Option<(usize, u8, u8)> {
        let h = &self.headers;
        let tcp = match h.first().map(|b| b >> 4) {
            Some(4) if h[0] & 0x0f >= 5 => usize::from(h[0] & 0x0f) * 4,
            Some(6) if h.get(6) == Some(&6) => 40,
            _ => return None,
        };
        Some((tcp, *h.get(tcp + 12)?, *h.get(tcp + 13)?))
    }

    fn tcp_flags(&self) -> Option<u8> {
        self.tcp_offset_flags().map(|(_, _, f)| f)
    }

    /// Whether the record cannot wait: its packet opens, closes or resets a connection (SYN,
    /// FIN, RST); it carries data without PSH (the test server is in the middle of a write,
    /// and the rest of it may wait for the ACK of this part: a window or congestion window
    /// that is full, Nagle; Linux, like the other stacks, sets PSH on the last segment of each
    /// write, so the end of a small answer can wait); it carries more than [`BULK_BYTES`] (a
    /// large answer, whose next ones the test server sends as our ACKs open its congestion
    /// window; a handful of such records is all it costs); or its headers do not parse as IPv4
    /// or IPv6 TCP (the copier counts it; there is nothing to save by holding it).
    #[must_use]
    pub fn urgent(&self) -> bool {
        const SYN_FIN_RST: u8 = 0x07;
        const PSH: u8 = 0x08;
        let Some((tcp, offset, flags)) = self.tcp_offset_flags() else {
            return true;
        };
        let data = (self.orig_len as usize).saturating_sub(tcp + usize::from(offset >> 4) * 4);
        flags & SYN_FIN_RST != 0 || (data > 0 && flags & PSH == 0) || data > BULK_BYTES
    }

    /// Build a record from a server -> client IP packet (possibly cut short after its headers,
    /// as NFQUEUE's copy range does), keeping at most `payload_bytes` bytes of TCP payload.
    /// Returns the session too, so the caller parses once.
    pub fn from_packet(
        packet: &[u8],
        payload_bytes: usize,
    ) -> Result<(FourTuple, Record), WireError> {
        let h = parse_response_headers(packet)?;
        Ok((h.tuple, Record::from_parsed(packet, &h, payload_bytes)))
    }

    /// Build a record from a packet already parsed by [`parse_response_headers`].
    pub fn from_parsed(packet: &[u8], h: &ResponseHeaders, payload_bytes: usize) -> Record {
        let hl = h.headers_len.min(packet.len());
        // The payload ends at the IP length (Ethernet padding excluded) or where the copy stops.
        let end = h.orig_len.min(packet.len()).max(hl);
        let keep = (end - hl).min(payload_bytes);
        Record {
            orig_len: u32::try_from(h.orig_len).unwrap_or(u32::MAX),
            headers: packet[..hl].to_vec(),
            payload: packet[hl..hl + keep].to_vec(),
            stamp: 0,
        }
    }

    /// The session this record belongs to, as the test server sees it (parsed from `headers`).
    pub fn tuple(&self) -> Result<FourTuple, WireError> {
        parse_response_headers(&self.headers).map(|h| h.tuple)
    }

    /// Bytes this record takes in a Records frame (after clipping, see [`Message::encode`]).
    pub fn encoded_len(&self) -> usize {
        let (h, p) = self.clipped(false);
        MIN_RECORD + h.len() + p.len()
    }

    /// Bytes this record takes in a StampedRecords frame.
    fn stamped_len(&self) -> usize {
        let (h, p) = self.clipped(true);
        8 + MIN_RECORD + h.len() + p.len()
    }

    /// Headers and payload as they are encoded: headers at most 65535 bytes, payload cut so that
    /// one record always fits in one frame.
    /// `stamped`: in a StampedRecords frame, whose items are 8 bytes longer.
    fn clipped(&self, stamped: bool) -> (&[u8], &[u8]) {
        let h = &self.headers[..self.headers.len().min(u16::MAX as usize)];
        let room = MAX_FRAME - 1 - 4 - 8 - MIN_RECORD - h.len() + if stamped { 0 } else { 8 };
        let p = &self.payload[..self.payload.len().min(room)];
        (h, p)
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
    /// Copier -> intercept: every session the copier held when the connection came up is
    /// registered (its snapshot is sent), so a restarted intercept's grace may end for this
    /// copier. Only to an intercept whose Hello has [`FEATURE_RESTART`](super::FEATURE_RESTART).
    Synced,
    /// Intercept -> copier: whether the intercept's firewall rules are in force (`false`: they
    /// went missing and the answers of registered sessions could leave the test host, so the
    /// copier sends nothing on them until `true` comes). Only to a copier whose Hello has
    /// [`FEATURE_RESTART`](super::FEATURE_RESTART).
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
                    (
                        r.u64("instance")?,
                        r.u16("fleet_index")?,
                        r.u16("fleet_size")?,
                    )
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

/// Reassembles frames from a byte stream delivered in arbitrary pieces.
///
/// Call [`push`](Self::push) with whatever the socket returned, then [`next`](Self::next) until
/// it returns `Ok(None)`. After an `Err` the stream is unusable and every later call returns
/// [`ProtoError::Poisoned`]: close the connection.
///
/// Two settings change between the handshake and the rest of the connection, and apply from
/// the next frame [`next`](Self::next) returns (bytes already pushed included):
/// [`set_max_frame`](Self::set_max_frame) (a length field above it is refused before its body
/// arrives) and [`authenticate`](Self::authenticate) (every later frame must end with a valid
/// tag, see [`super::auth`]).
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    start: usize,
    poisoned: bool,
    max_frame: usize,
    opener: Option<Opener>,
}

/// Verification state of the incoming direction.
#[derive(Debug)]
struct Opener {
    key: FrameKey,
    /// Number of the next tagged frame.
    counter: u64,
    /// The sender, for errors.
    from: Role,
}

impl Default for FrameDecoder {
    fn default() -> FrameDecoder {
        FrameDecoder {
            buf: Vec::new(),
            start: 0,
            poisoned: false,
            max_frame: MAX_FRAME,
            opener: None,
        }
    }
}

impl FrameDecoder {
    /// An empty decoder that accepts frames up to [`MAX_FRAME`], without tags.
    pub fn new() -> FrameDecoder {
        FrameDecoder::default()
    }

    /// Refuse frames whose type and body exceed `max` bytes (at most [`MAX_FRAME`], which is
    /// the default), e.g. [`super::PRE_AUTH_MAX_FRAME`] during the handshake.
    pub fn set_max_frame(&mut self, max: usize) {
        self.max_frame = max.min(MAX_FRAME);
    }

    /// The current frame limit (type and body, without the tag).
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// From the next frame on, every frame must end with the [`TAG_LEN`]-byte tag of `key`
    /// over its counter and bytes (counting from 0); `from` names the sender in errors.
    pub fn authenticate(&mut self, key: FrameKey, from: Role) {
        self.opener = Some(Opener {
            key,
            counter: 0,
            from,
        });
    }

    /// Append received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && (self.start == self.buf.len() || self.start >= self.buf.len() / 2) {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received but not yet consumed as complete frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next complete message, `Ok(None)` if more bytes are needed.
    #[allow(clippy::should_implement_trait)] // fallible, and not an iterator over owned input
    pub fn next(&mut self) -> Result<Option<Message>, ProtoError> {
        if self.poisoned {
            return Err(ProtoError::Poisoned);
        }
        let res = self.next_inner();
        if res.is_err() {
            self.poisoned = true;
        }
        res
    }

    fn next_inner(&mut self) -> Result<Option<Message>, ProtoError> {
        let avail = &self.buf[self.start..];
        let Some(len_bytes) = avail.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        let tag_len = if self.opener.is_some() { TAG_LEN } else { 0 };
        let max = self.max_frame + tag_len;
        if len as usize > max {
            return Err(ProtoError::FrameTooLarge { len, max });
        }
        if len as usize <= tag_len {
            // Not even a type byte before the tag.
            return Err(ProtoError::EmptyFrame);
        }
        let Some(whole) = avail.get(..4 + len as usize) else {
            return Ok(None);
        };
        let (sealed, tag) = whole.split_at(whole.len() - tag_len);
        if let Some(o) = &mut self.opener {
            if !o.key.verify(o.counter, sealed, tag) {
                return Err(ProtoError::BadTag {
                    from: o.from.as_str(),
                    frame: o.counter,
                });
            }
            o.counter += 1;
        }
        let res = Message::decode_body(&sealed[4..]);
        self.start += whole.len();
        res.map(Some)
    }
}

/// Append to `out` the frames of `plain` (whole frames as [`Message::encode`] writes them),
/// each with its tag: the length field grows by [`TAG_LEN`], and the tag of `key` over
/// `*counter` and the frame's bytes follows the body; `*counter` advances by one per frame.
/// `plain` must hold whole frames (what this crate's encoder produced).
pub fn seal_frames(key: &FrameKey, counter: &mut u64, plain: &[u8], out: &mut Vec<u8>) {
    out.reserve(plain.len() + plain.len() / 64 + TAG_LEN);
    let mut rest = plain;
    while let Some(len_bytes) = rest.get(..4) {
        let len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        let end = (4 + len as usize).min(rest.len());
        debug_assert_eq!(end, 4 + len as usize, "seal_frames got a partial frame");
        let start = out.len();
        out.extend_from_slice(&(len + TAG_LEN as u32).to_be_bytes());
        out.extend_from_slice(&rest[4..end]);
        let tag = key.tag(*counter, &out[start..]);
        out.extend_from_slice(&tag);
        *counter += 1;
        rest = &rest[end..];
    }
}

// ---- encoding helpers ----

fn begin_frame(out: &mut Vec<u8>, ty: u8) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0, 0, 0, 0, ty]);
    start
}

fn end_frame(out: &mut [u8], start: usize) {
    let len = (out.len() - start - 4) as u32;
    debug_assert!(len as usize <= MAX_FRAME);
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

fn encode_list<T>(
    out: &mut Vec<u8>,
    ty: u8,
    items: &[T],
    item_len: fn(&T) -> usize,
    put: fn(&mut Vec<u8>, &T),
) {
    let mut i = 0;
    loop {
        let start = begin_frame(out, ty);
        let count_at = out.len();
        out.extend_from_slice(&[0; 4]);
        let mut size = 1 + 4;
        let mut count: u32 = 0;
        while let Some(item) = items.get(i) {
            let n = item_len(item);
            if count > 0 && size + n > MAX_FRAME {
                break;
            }
            put(out, item);
            size += n;
            count += 1;
            i += 1;
        }
        out[count_at..count_at + 4].copy_from_slice(&count.to_be_bytes());
        end_frame(out, start);
        if i >= items.len() {
            break;
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let mut end = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&(end as u16).to_be_bytes());
    out.extend_from_slice(&s.as_bytes()[..end]);
}

fn addr_len(a: &Endpoint) -> usize {
    if a.is_ipv6() {
        1 + 16 + 2
    } else {
        1 + 4 + 2
    }
}

fn tuple_len(t: &FourTuple) -> usize {
    addr_len(&t.client) + addr_len(&t.server)
}

fn put_addr(out: &mut Vec<u8>, a: &Endpoint) {
    match a.ip() {
        IpAddr::V4(ip) => {
            out.push(4);
            out.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            out.push(6);
            out.extend_from_slice(&ip.octets());
        }
    }
    out.extend_from_slice(&a.port().to_be_bytes());
}

fn put_tuple(out: &mut Vec<u8>, t: &FourTuple) {
    put_addr(out, &t.client);
    put_addr(out, &t.server);
}

fn put_record(out: &mut Vec<u8>, r: &Record) {
    put_record_clipped(out, r, false);
}

fn put_record_clipped(out: &mut Vec<u8>, r: &Record, stamped: bool) {
    let (h, p) = r.clipped(stamped);
    out.extend_from_slice(&r.orig_len.to_be_bytes());
    out.extend_from_slice(&(h.len() as u16).to_be_bytes());
    out.extend_from_slice(h);
    out.extend_from_slice(&(p.len() as u32).to_be_bytes());
    out.extend_from_slice(p);
}

// ---- decoding helpers ----

/// A cursor over one frame; every read is bounds-checked.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ProtoError> {
        if self.buf.len() < n {
            return Err(ProtoError::Truncated {
                what,
                need: n,
                have: self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ProtoError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, ProtoError> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, ProtoError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, ProtoError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, ProtoError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &'static str) -> Result<String, ProtoError> {
        let n = self.u16(what)? as usize;
        let bytes = self.take(n, what)?;
        std::str::from_utf8(bytes)
            .map(str::to_string)
            .map_err(|_| ProtoError::BadUtf8)
    }

    /// A `u32 count | items` list; the count is checked against the remaining bytes (each item
    /// at least `min_item` bytes) before anything is allocated.
    fn list<T>(
        &mut self,
        what: &'static str,
        min_item: usize,
        get: fn(&mut Reader<'a>) -> Result<T, ProtoError>,
    ) -> Result<Vec<T>, ProtoError> {
        let count = self.u32(what)?;
        let remaining = self.buf.len();
        if (count as usize).saturating_mul(min_item) > remaining {
            return Err(ProtoError::CountTooLarge {
                what,
                count,
                remaining,
            });
        }
        let mut v = Vec::with_capacity(count as usize);
        for _ in 0..count {
            v.push(get(self)?);
        }
        Ok(v)
    }
}

fn get_addr(r: &mut Reader<'_>) -> Result<SocketAddr, ProtoError> {
    let ip = match r.u8("address family")? {
        4 => IpAddr::V4(Ipv4Addr::from(r.array::<4>("IPv4 address")?)),
        6 => IpAddr::V6(Ipv6Addr::from(r.array::<16>("IPv6 address")?)),
        other => return Err(ProtoError::BadFamily(other)),
    };
    let port = r.u16("port")?;
    Ok(SocketAddr::new(ip, port))
}

fn get_tuple(r: &mut Reader<'_>) -> Result<FourTuple, ProtoError> {
    let client = get_addr(r)?;
    let server = get_addr(r)?;
    if client.is_ipv4() != server.is_ipv4() {
        return Err(ProtoError::MixedFamilies);
    }
    Ok(FourTuple::new(client, server))
}

fn get_record(r: &mut Reader<'_>) -> Result<Record, ProtoError> {
    let orig_len = r.u32("record orig_len")?;
    let hlen = r.u16("record headers length")? as usize;
    let headers = r.take(hlen, "record headers")?.to_vec();
    let plen = r.u32("record payload length")? as usize;
    let payload = r.take(plen, "record payload")?.to_vec();
    Ok(Record {
        orig_len,
        headers,
        payload,
        stamp: 0,
    })
}

#[cfg(test)]
mod tests;
