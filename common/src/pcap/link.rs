//! Link-layer headers of capture files: from one captured frame to the IP packet it carries.
//!
//! Owns: the list of link types the reader understands ([`LinkType`]), [`ip_payload`], which
//! strips the link header (Ethernet with up to two VLAN tags, Linux cooked v1 and v2, BSD
//! loopback, raw IP) and cuts link-layer padding so the slice is exactly one IP packet, and
//! [`trim_to_ip_len`], the padding cut alone (the copier's live capture uses it too).
//!
//! Invariant: [`ip_payload`] never panics and never returns a slice that does not start with an
//! IPv4 or IPv6 version nibble; anything else is a [`LinkLayerError`].

/// Cut link-layer padding (short Ethernet frames are padded to 60 bytes) so that the slice is
/// exactly the IP packet its header describes. Slices that are shorter than their IP length, or
/// not IP, are returned unchanged for the parser to judge.
pub fn trim_to_ip_len(data: &[u8]) -> &[u8] {
    match crate::wire::declared_ip_len(data) {
        Some(want) if want < data.len() => &data[..want],
        _ => data,
    }
}

/// The link types a capture file may declare (the `LINKTYPE_*` numbers of pcap and pcapng).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkType {
    /// `LINKTYPE_NULL` (0): BSD loopback, a 4-byte address family in the writer's byte order.
    Null,
    /// `LINKTYPE_ETHERNET` (1).
    Ethernet,
    /// `LINKTYPE_RAW` (101) and the platform `DLT_RAW` values found in files (12, 14): the
    /// frame is the IP packet, v4 or v6 by its first nibble.
    Raw,
    /// `LINKTYPE_LOOP` (108): OpenBSD loopback, a 4-byte big-endian address family.
    Loop,
    /// `LINKTYPE_LINUX_SLL` (113): Linux cooked capture v1 (`tcpdump -i any` before 4.99).
    LinuxSll,
    /// `LINKTYPE_IPV4` (228).
    Ipv4,
    /// `LINKTYPE_IPV6` (229).
    Ipv6,
    /// `LINKTYPE_LINUX_SLL2` (276): Linux cooked capture v2 (`tcpdump -i any` since 4.99).
    LinuxSll2,
}

/// Every number [`LinkType::from_number`] accepts, for error messages.
pub const SUPPORTED: &str =
    "Ethernet (1), Linux cooked v1 (113) and v2 (276), raw IP (101, 12, 14), \
                             IPv4 (228), IPv6 (229), BSD loopback (0, 108)";

impl LinkType {
    /// The link type of a `LINKTYPE_*` number (pcap: the low 16 bits of the header's field).
    #[must_use]
    pub fn from_number(n: u32) -> Option<LinkType> {
        Some(match n {
            0 => LinkType::Null,
            1 => LinkType::Ethernet,
            12 | 14 | 101 => LinkType::Raw,
            108 => LinkType::Loop,
            113 => LinkType::LinuxSll,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            276 => LinkType::LinuxSll2,
            _ => return None,
        })
    }

    /// The canonical `LINKTYPE_*` number of this link type (what a writer puts in a file).
    #[must_use]
    pub fn number(self) -> u32 {
        match self {
            LinkType::Null => 0,
            LinkType::Ethernet => 1,
            LinkType::Raw => 101,
            LinkType::Loop => 108,
            LinkType::LinuxSll => 113,
            LinkType::Ipv4 => 228,
            LinkType::Ipv6 => 229,
            LinkType::LinuxSll2 => 276,
        }
    }
}

/// Why a frame yields no IP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkLayerError {
    /// The frame is shorter than its link header (or than an IP version byte after it).
    #[error("frame of {have} bytes is shorter than its {need}-byte link header")]
    Short {
        /// Bytes the link header (and the IP version byte) need.
        need: usize,
        /// Bytes captured.
        have: usize,
    },
    /// The frame carries something other than IPv4 or IPv6 (ARP, LLDP, ...): not an error of
    /// the file, just no IP packet.
    #[error("not IP (protocol 0x{0:04x})")]
    NotIp(u32),
    /// The link header says IP but the bytes after it do not start with version 4 or 6.
    #[error("link header says IP but the packet's version nibble is {0}")]
    BadVersion(u8),
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;

fn be16(b: &[u8], off: usize) -> Option<u16> {
    b.get(off..off + 2)
        .map(|s| u16::from_be_bytes([s[0], s[1]]))
}

/// The IP packet inside `frame`, trimmed to its IP length (link padding and trailers cut).
pub fn ip_payload(link: LinkType, frame: &[u8]) -> Result<&[u8], LinkLayerError> {
    let short = |need: usize| LinkLayerError::Short {
        need,
        have: frame.len(),
    };
    let (start, proto): (usize, Option<u32>) = match link {
        LinkType::Raw | LinkType::Ipv4 | LinkType::Ipv6 => (0, None),
        LinkType::Ethernet => {
            let mut off = 12;
            let mut ty = be16(frame, off).ok_or(short(14))?;
            // At most two tags (802.1Q, 802.1ad Q-in-Q).
            for _ in 0..2 {
                if ty != ETHERTYPE_VLAN && ty != ETHERTYPE_QINQ {
                    break;
                }
                off += 4;
                ty = be16(frame, off).ok_or(short(off + 2))?;
            }
            (off + 2, Some(u32::from(ty)))
        }
        LinkType::LinuxSll => (16, Some(u32::from(be16(frame, 14).ok_or(short(16))?))),
        LinkType::LinuxSll2 => (20, Some(u32::from(be16(frame, 0).ok_or(short(20))?))),
        LinkType::Null | LinkType::Loop => {
            let b = frame.get(..4).ok_or(short(4))?;
            // NULL is in the writer's byte order, LOOP in network order: the family is small,
            // so whichever end holds the non-zero bytes tells.
            let le = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            let be = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            let fam = le.min(be);
            // AF_INET is 2 everywhere; AF_INET6 is 10 (Linux), 24 (NetBSD, OpenBSD), 28
            // (FreeBSD), 30 (macOS).
            let proto = match fam {
                2 => ETHERTYPE_IPV4,
                10 | 24 | 28 | 30 => ETHERTYPE_IPV6,
                other => return Err(LinkLayerError::NotIp(other)),
            };
            (4, Some(u32::from(proto)))
        }
    };
    if let Some(p) = proto {
        if p != u32::from(ETHERTYPE_IPV4) && p != u32::from(ETHERTYPE_IPV6) {
            return Err(LinkLayerError::NotIp(p));
        }
    }
    let ip = frame
        .get(start..)
        .filter(|s| !s.is_empty())
        .ok_or(short(start + 1))?;
    let version = ip[0] >> 4;
    let want = match proto {
        Some(p) if p == u32::from(ETHERTYPE_IPV4) => 4,
        Some(_) => 6,
        None => match link {
            LinkType::Ipv4 => 4,
            LinkType::Ipv6 => 6,
            _ => version,
        },
    };
    if version != want || !(version == 4 || version == 6) {
        return Err(LinkLayerError::BadVersion(version));
    }
    Ok(trim_to_ip_len(ip))
}
