//! The NFQUEUE netlink messages the intercept sends and reads, as plain bytes: no socket, no
//! unsafe code (the socket is in [`crate::sys`]).
//!
//! What is built: the queue's configuration (bind, copy range, flags, queue length), one
//! verdict for one packet (`NFQNL_MSG_VERDICT`) and one verdict for every queued packet up to
//! an id (`NFQNL_MSG_VERDICT_BATCH`). What is parsed: the messages of one netlink datagram
//! (a queued packet, `NFQNL_MSG_PACKET`, with its id, payload, original length and offload
//! flags; an error or acknowledgement; anything else is skipped).
//!
//! Invariants:
//! - parsing never panics and never reads past the datagram: every length is checked against
//!   what is left, a message or attribute whose length is impossible ends the walk of that
//!   datagram ([`Msg::Malformed`]), and a packet message without a packet header is malformed;
//! - netlink headers and attribute headers are in host byte order, the nfnetlink payloads
//!   (ids, verdicts, lengths, flags) in network byte order, as the kernel has them
//!   (`include/uapi/linux/netfilter/nfnetlink_queue.h`).

/// `NETLINK_NETFILTER` subsystem of NFQUEUE.
const NFNL_SUBSYS_QUEUE: u16 = 3;
/// nfnetlink message types of the queue subsystem.
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;
const NFQNL_MSG_VERDICT_BATCH: u16 = 3;

/// Netlink control messages.
const NLMSG_NOOP: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;

const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;

/// `struct nlmsghdr`, `struct nfgenmsg`, `struct nlattr`.
pub const NLMSG_HDRLEN: usize = 16;
const NFGENMSG_LEN: usize = 4;
const NLA_HDRLEN: usize = 4;
/// Attribute type bits that are flags, not the type.
const NLA_TYPE_MASK: u16 = !(0x8000 | 0x4000);

/// Configuration attributes.
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_META: u8 = 1;
const NFQNL_COPY_PACKET: u8 = 2;

/// Queue flags (`NFQA_CFG_F_*`).
pub const CFG_F_FAIL_OPEN: u32 = 1;
/// Hand over GSO super-segments unsegmented (with partial checksums).
pub const CFG_F_GSO: u32 = 4;

/// Packet attributes.
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_PAYLOAD: u16 = 10;
const NFQA_CAP_LEN: u16 = 13;
const NFQA_SKB_INFO: u16 = 14;
/// `NFQA_SKB_INFO` bit: the packet is a GSO super-segment.
const NFQA_SKB_GSO: u32 = 2;

/// The verdicts the intercept gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// `NF_DROP`.
    Drop,
    /// `NF_ACCEPT`.
    Accept,
}

impl Verdict {
    fn code(self) -> u32 {
        match self {
            Verdict::Drop => 0,
            Verdict::Accept => 1,
        }
    }
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn msg_type(msg: u16) -> u16 {
    (NFNL_SUBSYS_QUEUE << 8) | msg
}

/// Appends netlink messages to a buffer, several per buffer (one `send` for all of them).
#[derive(Debug, Default)]
pub struct Builder {
    buf: Vec<u8>,
    /// Where the message being built starts.
    start: usize,
}

impl Builder {
    /// An empty buffer.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// The messages built so far.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Whether nothing was built.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Forget every message (keeps the allocation).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.start = 0;
    }

    fn begin(&mut self, msg: u16, flags: u16, seq: u32, queue: u16) {
        self.start = self.buf.len();
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // length, set by end()
        self.buf.extend_from_slice(&msg_type(msg).to_ne_bytes());
        self.buf
            .extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
        self.buf.extend_from_slice(&seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's is 0
                                                         // nfgenmsg: family AF_UNSPEC, version 0, res_id = the queue (big-endian)
        self.buf.extend_from_slice(&[0, 0]);
        self.buf.extend_from_slice(&queue.to_be_bytes());
    }

    fn attr(&mut self, ty: u16, data: &[u8]) {
        let len = NLA_HDRLEN + data.len();
        self.buf
            .extend_from_slice(&u16::try_from(len).unwrap_or(u16::MAX).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.buf.resize(self.buf.len() + align4(len) - len, 0);
    }

    fn end(&mut self) {
        let len = u32::try_from(self.buf.len() - self.start).unwrap_or(u32::MAX);
        self.buf[self.start..self.start + 4].copy_from_slice(&len.to_ne_bytes());
    }

    /// Bind this socket to `queue` (acknowledged, with sequence number `seq`).
    pub fn bind(&mut self, seq: u32, queue: u16) {
        self.begin(NFQNL_MSG_CONFIG, NLM_F_ACK, seq, queue);
        // nfqnl_msg_config_cmd: command, pad, pf (big-endian; unused by BIND)
        self.attr(NFQA_CFG_CMD, &[NFQNL_CFG_CMD_BIND, 0, 0, 0]);
        self.end();
    }

    /// Copy at most `range` bytes of each packet (0: metadata only).
    pub fn copy_range(&mut self, seq: u32, queue: u16, range: u32) {
        self.begin(NFQNL_MSG_CONFIG, NLM_F_ACK, seq, queue);
        let mut p = [0u8; 5];
        p[..4].copy_from_slice(&range.to_be_bytes());
        p[4] = if range == 0 {
            NFQNL_COPY_META
        } else {
            NFQNL_COPY_PACKET
        };
        self.attr(NFQA_CFG_PARAMS, &p);
        self.end();
    }

    /// Set the queue flags under `mask` to `flags` (`CFG_F_*`).
    pub fn flags(&mut self, seq: u32, queue: u16, flags: u32, mask: u32) {
        self.begin(NFQNL_MSG_CONFIG, NLM_F_ACK, seq, queue);
        self.attr(NFQA_CFG_FLAGS, &flags.to_be_bytes());
        self.attr(NFQA_CFG_MASK, &mask.to_be_bytes());
        self.end();
    }

    /// Packets the kernel may keep waiting for a verdict.
    pub fn queue_max_len(&mut self, seq: u32, queue: u16, len: u32) {
        self.begin(NFQNL_MSG_CONFIG, NLM_F_ACK, seq, queue);
        self.attr(NFQA_CFG_QUEUE_MAXLEN, &len.to_be_bytes());
        self.end();
    }

    /// The verdict on packet `id` alone (not acknowledged: the kernel answers only a failure).
    pub fn verdict(&mut self, queue: u16, id: u32, verdict: Verdict) {
        self.verdict_msg(NFQNL_MSG_VERDICT, queue, id, verdict);
    }

    /// The same verdict on every packet of the queue whose id is `id` or before it.
    pub fn verdict_batch(&mut self, queue: u16, id: u32, verdict: Verdict) {
        self.verdict_msg(NFQNL_MSG_VERDICT_BATCH, queue, id, verdict);
    }

    fn verdict_msg(&mut self, msg: u16, queue: u16, id: u32, verdict: Verdict) {
        self.begin(msg, 0, 0, queue);
        let mut v = [0u8; 8];
        v[..4].copy_from_slice(&verdict.code().to_be_bytes());
        v[4..].copy_from_slice(&id.to_be_bytes());
        self.attr(NFQA_VERDICT_HDR, &v);
        self.end();
    }
}

/// A queued packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The queue it came from (nfgenmsg res_id).
    pub queue: u16,
    /// Its id, for the verdict.
    pub id: u32,
    /// The bytes copied (from the IP header on, at most the copy range).
    pub payload: &'a [u8],
    /// Length of the whole packet (`NFQA_CAP_LEN` when the copy was cut short, else the
    /// payload's length).
    pub orig_len: usize,
    /// A GSO super-segment (`NFQA_SKB_INFO`).
    pub gso: bool,
}

/// One message of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Msg<'a> {
    /// A queued packet.
    Packet(Packet<'a>),
    /// An acknowledgement (`errno == 0`) or the failure of a request (`errno > 0`), with the
    /// sequence number of the request.
    Ack {
        /// The request's sequence number.
        seq: u32,
        /// 0, or the positive errno.
        errno: i32,
    },
    /// The end of a multi-part answer, or an overrun notice.
    Done,
    /// Something this layer does not use (another message type): skipped.
    Other,
    /// A message that cannot be what it claims; the rest of the datagram is not read. The
    /// packet id when it could be read (its packet still gets a DROP).
    Malformed(Option<u32>),
}

/// The messages of one received datagram, in order.
pub fn messages(datagram: &[u8]) -> Messages<'_> {
    Messages { rest: datagram }
}

/// Iterator of [`messages`].
#[derive(Debug, Clone)]
pub struct Messages<'a> {
    rest: &'a [u8],
}

fn ne_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn ne_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

impl<'a> Iterator for Messages<'a> {
    type Item = Msg<'a>;

    fn next(&mut self) -> Option<Msg<'a>> {
        if self.rest.len() < NLMSG_HDRLEN {
            // Nothing, or trailing bytes too short for a header (padding): done.
            self.rest = &[];
            return None;
        }
        let b = self.rest;
        let len = ne_u32(b, 0).map_or(0, |l| l as usize);
        if len < NLMSG_HDRLEN || len > b.len() {
            self.rest = &[];
            return Some(Msg::Malformed(None));
        }
        let ty = ne_u16(b, 4).unwrap_or(0);
        let seq = ne_u32(b, 8).unwrap_or(0);
        let body = &b[NLMSG_HDRLEN..len];
        self.rest = b.get(align4(len)..).unwrap_or(&[]);
        Some(match ty {
            NLMSG_ERROR => match body.get(..4) {
                Some(e) => Msg::Ack {
                    seq,
                    errno: i32::from_ne_bytes([e[0], e[1], e[2], e[3]]).saturating_neg(),
                },
                None => Msg::Malformed(None),
            },
            NLMSG_DONE | NLMSG_OVERRUN => Msg::Done,
            NLMSG_NOOP => Msg::Other,
            t if t == msg_type(NFQNL_MSG_PACKET) => {
                let m = parse_packet(body);
                if matches!(m, Msg::Malformed(_)) {
                    self.rest = &[];
                }
                m
            }
            _ => Msg::Other,
        })
    }
}

/// The body of an `NFQNL_MSG_PACKET` (after the netlink header).
fn parse_packet(body: &[u8]) -> Msg<'_> {
    let Some(gen) = body.get(..NFGENMSG_LEN) else {
        return Msg::Malformed(None);
    };
    let queue = u16::from_be_bytes([gen[2], gen[3]]);
    let mut attrs = &body[NFGENMSG_LEN..];
    let mut id = None;
    let mut payload: &[u8] = &[];
    let mut cap_len = None;
    let mut gso = false;
    let mut bad = false;
    while attrs.len() >= NLA_HDRLEN {
        let len = usize::from(ne_u16(attrs, 0).unwrap_or(0));
        let ty = ne_u16(attrs, 2).unwrap_or(0) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN || len > attrs.len() {
            bad = true;
            break;
        }
        let data = &attrs[NLA_HDRLEN..len];
        match ty {
            // nfqnl_msg_packet_hdr: id (be32), hw_protocol (be16), hook (u8)
            NFQA_PACKET_HDR => id = be_u32(data, 0),
            NFQA_PAYLOAD => payload = data,
            NFQA_CAP_LEN => cap_len = be_u32(data, 0),
            NFQA_SKB_INFO => gso = be_u32(data, 0).is_some_and(|i| i & NFQA_SKB_GSO != 0),
            _ => {}
        }
        attrs = attrs.get(align4(len)..).unwrap_or(&[]);
    }
    match id {
        Some(id) if !bad => Msg::Packet(Packet {
            queue,
            id,
            payload,
            orig_len: cap_len.map_or(payload.len(), |l| (l as usize).max(payload.len())),
            gso,
        }),
        _ => Msg::Malformed(id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet message as the kernel builds it: header, nfgenmsg, the attributes given.
    fn packet_msg(queue: u16, attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut b = Builder::new();
        b.begin(NFQNL_MSG_PACKET, 0, 0, queue);
        for (t, d) in attrs {
            b.attr(*t, d);
        }
        b.end();
        b.buf
    }

    fn hdr(id: u32) -> (u16, Vec<u8>) {
        let mut d = id.to_be_bytes().to_vec();
        d.extend_from_slice(&0x0800u16.to_be_bytes());
        d.push(3); // NF_INET_LOCAL_OUT
        (NFQA_PACKET_HDR, d)
    }

    #[test]
    fn verdict_and_batch_messages_have_the_kernels_layout() {
        let mut b = Builder::new();
        b.verdict(7, 0x0102_0304, Verdict::Accept);
        b.verdict_batch(7, 0x0000_0100, Verdict::Drop);
        let mut want = Vec::new();
        for (ty, verdict, id) in [(0x0301u16, 1u32, 0x0102_0304u32), (0x0303, 0, 0x100)] {
            want.extend_from_slice(&32u32.to_ne_bytes()); // 16 + 4 + 4 + 8
            want.extend_from_slice(&ty.to_ne_bytes());
            want.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
            want.extend_from_slice(&[0; 8]); // seq, pid
            want.extend_from_slice(&[0, 0, 0, 7]); // nfgenmsg, queue 7
            want.extend_from_slice(&12u16.to_ne_bytes());
            want.extend_from_slice(&NFQA_VERDICT_HDR.to_ne_bytes());
            want.extend_from_slice(&verdict.to_be_bytes());
            want.extend_from_slice(&id.to_be_bytes());
        }
        assert_eq!(b.bytes(), &want[..]);
    }

    #[test]
    fn config_messages_are_acknowledged_and_padded() {
        let mut b = Builder::new();
        b.copy_range(5, 2, 128);
        let m = b.bytes();
        // 16 + 4 + attr (4 + 5, padded to 12)
        assert_eq!(ne_u32(m, 0), Some(32));
        assert_eq!(ne_u16(m, 4), Some(0x0302));
        assert_eq!(ne_u16(m, 6), Some(NLM_F_REQUEST | NLM_F_ACK));
        assert_eq!(ne_u32(m, 8), Some(5));
        assert_eq!(&m[16..20], &[0, 0, 0, 2]);
        assert_eq!(ne_u16(m, 20), Some(9));
        assert_eq!(ne_u16(m, 22), Some(NFQA_CFG_PARAMS));
        assert_eq!(&m[24..29], &[0, 0, 0, 128, NFQNL_COPY_PACKET]);
        assert_eq!(&m[29..32], &[0, 0, 0]);
        b.clear();
        b.flags(6, 2, CFG_F_GSO, CFG_F_GSO | CFG_F_FAIL_OPEN);
        let m = b.bytes();
        assert_eq!(m.len(), 36);
        assert_eq!(&m[24..28], &4u32.to_be_bytes());
        assert_eq!(ne_u16(m, 30), Some(NFQA_CFG_MASK));
        assert_eq!(&m[32..36], &5u32.to_be_bytes());
        b.clear();
        b.bind(1, 9);
        b.queue_max_len(2, 9, 16384);
        let all: Vec<_> = messages(b.bytes()).collect();
        // our own requests parse as messages of another kind
        assert_eq!(all, vec![Msg::Other, Msg::Other]);
    }

    #[test]
    fn a_packet_message_gives_its_id_payload_and_lengths() {
        let ip = vec![0x45u8, 0, 0x05, 0xdc, 1, 2, 3];
        let m = packet_msg(
            3,
            &[
                hdr(42),
                (5, 7u32.to_be_bytes().to_vec()), // NFQA_IFINDEX_INDEV: skipped
                (NFQA_SKB_INFO, (NFQA_SKB_GSO | 1).to_be_bytes().to_vec()),
                (NFQA_CAP_LEN, 65_000u32.to_be_bytes().to_vec()),
                (NFQA_PAYLOAD | 0x4000, ip.clone()), // a flag bit in the type is ignored
            ],
        );
        let all: Vec<_> = messages(&m).collect();
        assert_eq!(
            all,
            vec![Msg::Packet(Packet {
                queue: 3,
                id: 42,
                payload: &ip,
                orig_len: 65_000,
                gso: true,
            })]
        );
        // without CAP_LEN the copy is the whole packet
        let m = packet_msg(0, &[(NFQA_PAYLOAD, ip.clone()), hdr(1)]);
        match messages(&m).next() {
            Some(Msg::Packet(p)) => {
                assert_eq!((p.id, p.orig_len, p.gso), (1, 7, false));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn several_messages_in_one_datagram_and_acks() {
        let mut d = packet_msg(0, &[hdr(1), (NFQA_PAYLOAD, vec![0x45; 5])]);
        d.extend(packet_msg(0, &[hdr(2), (NFQA_PAYLOAD, vec![0x45; 6])]));
        // NLMSG_ERROR: errno -16 (EBUSY) for request 9, then an ack (0) for request 10
        for (seq, err) in [(9u32, -16i32), (10, 0)] {
            d.extend_from_slice(&36u32.to_ne_bytes());
            d.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
            d.extend_from_slice(&0u16.to_ne_bytes());
            d.extend_from_slice(&seq.to_ne_bytes());
            d.extend_from_slice(&0u32.to_ne_bytes());
            d.extend_from_slice(&err.to_ne_bytes());
            d.extend_from_slice(&[0; 16]); // the request's header
        }
        let all: Vec<_> = messages(&d).collect();
        assert_eq!(all.len(), 4, "{all:?}");
        assert!(matches!(all[0], Msg::Packet(Packet { id: 1, .. })));
        assert!(matches!(all[1], Msg::Packet(Packet { id: 2, payload, .. }) if payload.len() == 6));
        assert_eq!(all[2], Msg::Ack { seq: 9, errno: 16 });
        assert_eq!(all[3], Msg::Ack { seq: 10, errno: 0 });
    }

    #[test]
    fn impossible_lengths_end_the_walk_without_panicking() {
        let good = packet_msg(0, &[hdr(5), (NFQA_PAYLOAD, vec![0x45; 20])]);
        // every truncation of a valid message
        for cut in 0..good.len() {
            let all: Vec<_> = messages(&good[..cut]).collect();
            assert!(
                all.is_empty() || matches!(all[..], [Msg::Malformed(_)]),
                "cut {cut}: {all:?}"
            );
        }
        // message length below the header, or beyond the datagram
        for len in [0u32, 15, good.len() as u32 + 1, u32::MAX] {
            let mut m = good.clone();
            m[..4].copy_from_slice(&len.to_ne_bytes());
            assert_eq!(messages(&m).collect::<Vec<_>>(), vec![Msg::Malformed(None)]);
        }
        // an attribute longer than the message: malformed, but the id read before it is kept
        let mut m = good.clone();
        let payload_attr = NLMSG_HDRLEN + NFGENMSG_LEN + 12;
        m[payload_attr..payload_attr + 2].copy_from_slice(&500u16.to_ne_bytes());
        assert_eq!(
            messages(&m).collect::<Vec<_>>(),
            vec![Msg::Malformed(Some(5))]
        );
        // an attribute shorter than its header
        m[payload_attr..payload_attr + 2].copy_from_slice(&2u16.to_ne_bytes());
        assert_eq!(
            messages(&m).collect::<Vec<_>>(),
            vec![Msg::Malformed(Some(5))]
        );
        // no packet header at all
        let m = packet_msg(0, &[(NFQA_PAYLOAD, vec![1, 2, 3])]);
        assert_eq!(messages(&m).collect::<Vec<_>>(), vec![Msg::Malformed(None)]);
        // a packet header too short for the id
        let m = packet_msg(0, &[(NFQA_PACKET_HDR, vec![1, 2])]);
        assert_eq!(messages(&m).collect::<Vec<_>>(), vec![Msg::Malformed(None)]);
        // an error message without its errno
        let mut m = Vec::new();
        m.extend_from_slice(&16u32.to_ne_bytes());
        m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        assert_eq!(messages(&m).collect::<Vec<_>>(), vec![Msg::Malformed(None)]);
        // errno i32::MIN does not overflow
        let mut m = Vec::new();
        m.extend_from_slice(&20u32.to_ne_bytes());
        m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&i32::MIN.to_ne_bytes());
        assert!(matches!(
            messages(&m).next(),
            Some(Msg::Ack {
                errno: i32::MAX,
                ..
            })
        ));
    }

    #[test]
    fn a_cap_len_below_the_copy_is_not_believed() {
        let m = packet_msg(
            0,
            &[
                hdr(1),
                (NFQA_CAP_LEN, 3u32.to_be_bytes().to_vec()),
                (NFQA_PAYLOAD, vec![0x45; 40]),
            ],
        );
        match messages(&m).next() {
            Some(Msg::Packet(p)) => assert_eq!(p.orig_len, 40),
            other => panic!("{other:?}"),
        }
    }
}
