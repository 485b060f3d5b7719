//! The classic BPF program that the kernel runs on every frame before it reaches the capture ring.
//!
//! Owns: turning the mapped `(online address?, port)` pairs into a cBPF program for an
//! `AF_PACKET`/`SOCK_DGRAM` socket, where packet data starts at the network header.
//!
//! The program accepts (returns "whole packet") exactly:
//! - frames that did not go out of this host (`pkttype != PACKET_OUTGOING`), and
//! - IPv4 TCP that is not a non-first fragment, or IPv6 whose *fixed* header says next header 6
//!   (TCP behind extension headers is not copied), and
//! - whose destination port is a mapped port and, if that port was mapped with online addresses,
//!   whose destination address is one of them.
//!
//! It also owns the program of the mirror's UDP socket ([`build_mirror_filter`]), and the program
//! of the capture's fanout group with several workers
//! ([`fanout_program`]), which picks the worker of each packet from its client port.
//!
//! Invariants: every conditional jump is short (at most a port group long) and checked against the
//! 8-bit field; the only long jump is an unconditional `ja` with a 32-bit offset. The program never
//! exceeds [`MAX_INSNS`]. Out-of-bounds loads make the kernel return 0 (reject), which is what a
//! truncated frame deserves.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One classic BPF instruction, laid out like the kernel's `struct sock_filter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Opcode (class | size | mode, or class | op | src).
    pub code: u16,
    /// Jump offset when the condition holds.
    pub jt: u8,
    /// Jump offset when it does not.
    pub jf: u8,
    /// Constant operand.
    pub k: u32,
}

/// Opcode pieces of classic BPF (from `linux/filter.h` / `linux/bpf_common.h`).
pub mod op {
    /// Class: load into the accumulator A.
    pub const LD: u16 = 0x00;
    /// Class: load into the index register X.
    pub const LDX: u16 = 0x01;
    /// Class: arithmetic and logic on A.
    pub const ALU: u16 = 0x04;
    /// Class: jumps (offsets `jt`/`jf`, or `k` for [`JA`]).
    pub const JMP: u16 = 0x05;
    /// Class: end the filter, keeping that many bytes of the packet (0 drops it).
    pub const RET: u16 = 0x06;
    /// Size: a 32-bit word (network order).
    pub const W: u16 = 0x00;
    /// Size: a 16-bit half word (network order).
    pub const H: u16 = 0x08;
    /// Size: one byte.
    pub const B: u16 = 0x10;
    /// Mode: the constant `k` itself.
    pub const IMM: u16 = 0x00;
    /// Mode: packet bytes at offset `k`.
    pub const ABS: u16 = 0x20;
    /// Mode: packet bytes at offset X + `k`.
    pub const IND: u16 = 0x40;
    /// Mode (LDX only): `4 * (packet[k] & 0xf)`, the length of an IPv4 header.
    pub const MSH: u16 = 0xa0;
    /// Jump: always, `k` instructions ahead.
    pub const JA: u16 = 0x00;
    /// Jump: when A equals the operand.
    pub const JEQ: u16 = 0x10;
    /// Jump: when A is greater than the operand.
    pub const JGT: u16 = 0x20;
    /// Jump: when A is greater than or equal to the operand.
    pub const JGE: u16 = 0x30;
    /// Jump: when A AND the operand is not zero.
    pub const JSET: u16 = 0x40;
    /// ALU: A &= operand.
    pub const AND: u16 = 0x50;
    /// ALU: A >>= operand.
    pub const RSH: u16 = 0x70;
    /// ALU: A += operand.
    pub const ADD: u16 = 0x00;
    /// ALU: A <<= operand.
    pub const LSH: u16 = 0x60;
    /// Class: moves between the registers ([`TAX`], [`TXA`]).
    pub const MISC: u16 = 0x07;
    /// Misc: X = A.
    pub const TAX: u16 = 0x00;
    /// Misc: A = X.
    pub const TXA: u16 = 0x80;
    /// Operand: the constant `k`.
    pub const K: u16 = 0x00;
    /// Operand: the index register X.
    pub const X: u16 = 0x08;
    /// RET operand: return the value of A (not `k`).
    pub const A: u16 = 0x10;
    /// `SKF_AD_OFF`: base of the ancillary "loads".
    pub const AD_OFF: u32 = (-0x1000i32) as u32;
    /// `SKF_AD_PROTOCOL`: skb->protocol (the EtherType), host order.
    pub const AD_PROTOCOL: u32 = 0;
    /// `SKF_AD_PKTTYPE`: skb->pkt_type (`PACKET_HOST`, ..., `PACKET_OUTGOING` = 4).
    pub const AD_PKTTYPE: u32 = 4;
}

/// The kernel's limit on classic BPF program length (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;
/// What an accepting program returns: capture the whole packet.
pub const ACCEPT: u32 = u32::MAX;
const PACKET_OUTGOING: u32 = 4;
const ETHERTYPE_IPV4: u32 = 0x0800;
const ETHERTYPE_IPV6: u32 = 0x86dd;
const IPPROTO_TCP: u32 = 6;

/// What the filter lets through: TCP to `port`, on `addr` if given (else any address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterTarget {
    /// The online address clients connect to; `None` for any.
    pub addr: Option<IpAddr>,
    /// The online port clients connect to.
    pub port: u16,
}

/// Why no program could be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BpfError {
    /// There is nothing to capture.
    #[error("no port to capture: give at least one --map")]
    NoTargets,
    /// One port carries more addresses than a short jump can skip over.
    #[error("port {port} is mapped with too many online addresses for one filter ({count})")]
    TooManyAddresses {
        /// The port.
        port: u16,
        /// How many addresses of one family it was given.
        count: usize,
    },
    /// The whole program is longer than the kernel accepts.
    #[error("capture filter would have {0} instructions, the kernel accepts at most {MAX_INSNS}")]
    TooLong(usize),
}

fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: usize, jf: usize) -> Insn {
    // Callers compute offsets from group sizes they have already bounded; the assert documents it.
    assert!(jt <= 255 && jf <= 255, "short jump out of range");
    Insn {
        code,
        jt: jt as u8,
        jf: jf as u8,
        k,
    }
}

/// Per port: `None` = any address, else the set of addresses of one family.
type Groups<A> = BTreeMap<u16, Option<Vec<A>>>;

fn add_group<A: PartialEq>(groups: &mut Groups<A>, port: u16, addr: Option<A>) {
    let entry = groups.entry(port).or_insert_with(|| Some(Vec::new()));
    match (entry.as_mut(), addr) {
        (None, _) => {}
        (Some(_), None) => *entry = None,
        (Some(list), Some(a)) => {
            if !list.contains(&a) {
                list.push(a)
            }
        }
    }
}

/// Build the capture filter for `targets`. See the module doc for what it accepts.
pub fn build_filter(targets: &[FilterTarget]) -> Result<Vec<Insn>, BpfError> {
    if targets.is_empty() {
        return Err(BpfError::NoTargets);
    }
    let mut v4: Groups<Ipv4Addr> = BTreeMap::new();
    let mut v6: Groups<Ipv6Addr> = BTreeMap::new();
    for t in targets {
        match t.addr {
            None => {
                add_group(&mut v4, t.port, None);
                add_group(&mut v6, t.port, None);
            }
            Some(IpAddr::V4(a)) => add_group(&mut v4, t.port, Some(a)),
            Some(IpAddr::V6(a)) => add_group(&mut v6, t.port, Some(a)),
        }
    }

    let mut p = vec![
        // Frames this host sent are never client requests (PACKET_IGNORE_OUTGOING does this too).
        stmt(op::LD | op::W | op::ABS, op::AD_OFF + op::AD_PKTTYPE),
        jump(op::JMP | op::JEQ | op::K, PACKET_OUTGOING, 0, 1),
        stmt(op::RET | op::K, 0),
        stmt(op::LD | op::H | op::ABS, op::AD_OFF + op::AD_PROTOCOL),
        jump(op::JMP | op::JEQ | op::K, ETHERTYPE_IPV4, 1, 0),
    ];
    let ja_at = p.len();
    p.push(stmt(op::JMP | op::JA, 0)); // to the IPv6 part, patched below

    // IPv4: protocol, fragment offset, then the port in the TCP header found through X.
    p.push(stmt(op::LD | op::B | op::ABS, 9));
    p.push(jump(op::JMP | op::JEQ | op::K, IPPROTO_TCP, 1, 0));
    p.push(stmt(op::RET | op::K, 0));
    p.push(stmt(op::LD | op::H | op::ABS, 6));
    p.push(jump(op::JMP | op::JSET | op::K, 0x1fff, 0, 1));
    p.push(stmt(op::RET | op::K, 0));
    p.push(stmt(op::LDX | op::B | op::MSH, 0));
    p.push(stmt(op::LD | op::H | op::IND, 2));
    for (&port, addrs) in &v4 {
        match addrs {
            None => {
                p.push(jump(op::JMP | op::JEQ | op::K, port.into(), 0, 1));
                p.push(stmt(op::RET | op::K, ACCEPT));
            }
            Some(list) => {
                let len = 1 + 2 * list.len() + 1;
                if len > 255 {
                    return Err(BpfError::TooManyAddresses {
                        port,
                        count: list.len(),
                    });
                }
                p.push(jump(op::JMP | op::JEQ | op::K, port.into(), 0, len));
                p.push(stmt(op::LD | op::W | op::ABS, 16));
                for a in list {
                    p.push(jump(op::JMP | op::JEQ | op::K, u32::from(*a), 0, 1));
                    p.push(stmt(op::RET | op::K, ACCEPT));
                }
                p.push(stmt(op::RET | op::K, 0));
            }
        }
    }
    p.push(stmt(op::RET | op::K, 0));

    // IPv6: fixed header only; the TCP header starts at 40.
    let v6_start = p.len();
    p[ja_at].k = (v6_start - ja_at - 1) as u32;
    p.push(jump(op::JMP | op::JEQ | op::K, ETHERTYPE_IPV6, 1, 0));
    p.push(stmt(op::RET | op::K, 0));
    if !v6.is_empty() {
        p.push(stmt(op::LD | op::B | op::ABS, 6));
        p.push(jump(op::JMP | op::JEQ | op::K, IPPROTO_TCP, 1, 0));
        p.push(stmt(op::RET | op::K, 0));
        p.push(stmt(op::LD | op::H | op::ABS, 42));
        for (&port, addrs) in &v6 {
            match addrs {
                None => {
                    p.push(jump(op::JMP | op::JEQ | op::K, port.into(), 0, 1));
                    p.push(stmt(op::RET | op::K, ACCEPT));
                }
                Some(list) => {
                    let len = 9 * list.len() + 1;
                    if len > 255 {
                        return Err(BpfError::TooManyAddresses {
                            port,
                            count: list.len(),
                        });
                    }
                    p.push(jump(op::JMP | op::JEQ | op::K, port.into(), 0, len));
                    for a in list {
                        let o = a.octets();
                        for (i, chunk) in o.chunks_exact(4).enumerate() {
                            let word = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
                            p.push(stmt(op::LD | op::W | op::ABS, 24 + 4 * i as u32));
                            // On mismatch skip to the next address: the rest of this block.
                            p.push(jump(op::JMP | op::JEQ | op::K, word, 0, 7 - 2 * i));
                        }
                        p.push(stmt(op::RET | op::K, ACCEPT));
                    }
                    p.push(stmt(op::RET | op::K, 0));
                }
            }
        }
    }
    p.push(stmt(op::RET | op::K, 0));

    if p.len() > MAX_INSNS {
        return Err(BpfError::TooLong(p.len()));
    }
    Ok(p)
}

/// The program of the comparison's own capture (`--compare`): both directions of the mapped
/// ports, so that the online service's answers are seen next to the requests. It accepts TCP
/// (IPv4 not a non-first fragment, IPv6 with TCP in the fixed header) whose destination port is
/// one of `ports` on a frame that did not go out of this host (a request), or whose source port
/// is one of `ports` on any frame (an answer, outgoing when the service runs here). The copier's
/// own copies leave from client ports toward the test server: they are not taken. Addresses are
/// checked by the caller (`crate::shadow`).
pub fn build_answer_filter(ports: &[u16]) -> Result<Vec<Insn>, BpfError> {
    let mut ports = ports.to_vec();
    ports.sort_unstable();
    ports.dedup();
    if ports.is_empty() {
        return Err(BpfError::NoTargets);
    }
    // one block per direction: (port offset in the TCP header, only frames not sent here)
    let block = |port_off: u32| -> Vec<Insn> {
        let mut p = Vec::new();
        let plen = 2 * ports.len() + 1; // the port tests and the final reject
                                        // IPv4: 6 insns then the ports; IPv6: 4 insns then the ports
        let v4_len = 6 + plen;
        p.push(stmt(op::LD | op::H | op::ABS, op::AD_OFF + op::AD_PROTOCOL));
        p.push(jump(op::JMP | op::JEQ | op::K, ETHERTYPE_IPV4, 0, v4_len));
        p.push(stmt(op::LD | op::B | op::ABS, 9));
        p.push(jump(
            op::JMP | op::JEQ | op::K,
            IPPROTO_TCP,
            0,
            4 + plen - 1,
        ));
        p.push(stmt(op::LD | op::H | op::ABS, 6));
        p.push(jump(op::JMP | op::JSET | op::K, 0x1fff, 2 + plen - 1, 0));
        p.push(stmt(op::LDX | op::B | op::MSH, 0));
        p.push(stmt(op::LD | op::H | op::IND, port_off));
        for &port in &ports {
            p.push(jump(op::JMP | op::JEQ | op::K, port.into(), 0, 1));
            p.push(stmt(op::RET | op::K, ACCEPT));
        }
        p.push(stmt(op::RET | op::K, 0));
        // IPv6
        p.push(jump(
            op::JMP | op::JEQ | op::K,
            ETHERTYPE_IPV6,
            0,
            3 + plen - 1,
        ));
        p.push(stmt(op::LD | op::B | op::ABS, 6));
        p.push(jump(
            op::JMP | op::JEQ | op::K,
            IPPROTO_TCP,
            0,
            1 + plen - 1,
        ));
        p.push(stmt(op::LD | op::H | op::ABS, 40 + port_off));
        for &port in &ports {
            p.push(jump(op::JMP | op::JEQ | op::K, port.into(), 0, 1));
            p.push(stmt(op::RET | op::K, ACCEPT));
        }
        p.push(stmt(op::RET | op::K, 0));
        p
    };
    // the longest short jump skips the IPv4 part: 7 + 2 per port
    if 2 * ports.len() + 7 > 255 {
        return Err(BpfError::TooLong(3 + 2 * (2 * ports.len() + 12)));
    }
    let answers = block(0);
    let requests = block(2);
    // outgoing frames: answers only; others: a request, else an answer (a service elsewhere)
    let mut p = vec![
        stmt(op::LD | op::W | op::ABS, op::AD_OFF + op::AD_PKTTYPE),
        jump(op::JMP | op::JEQ | op::K, PACKET_OUTGOING, 0, 1),
        stmt(op::JMP | op::JA, requests.len() as u32),
    ];
    // not outgoing: the request block (answers of a service on another host are not taken: the
    // copier runs where the service runs)
    p.extend(requests);
    p.extend(answers);
    if p.len() > MAX_INSNS {
        return Err(BpfError::TooLong(p.len()));
    }
    Ok(p)
}

/// Most VNI ranges the mirror program tests; a longer `--vni` list is left to user space.
pub const MIRROR_MAX_VNI_RANGES: usize = 256;
/// Most service ports the mirror program tests; more are left to user space.
pub const MIRROR_MAX_PORTS: usize = 100;
const ETHERTYPE_VLAN: u32 = 0x8100;
const ETHERTYPE_QINQ: u32 = 0x88a8;
const GENEVE_ETHERNET: u32 = 0x6558;

/// The program of the mirror's UDP socket (`--mirror`). A socket filter on a UDP socket sees
/// the datagram from its UDP header: the encapsulation header starts at 8.
///
/// It drops, in the kernel, exactly what the mirror input would drop in user space as `vni` or
/// `unselected`: datagrams of a mirror session not in `vnis` (empty: all are taken), and inner
/// packets that are IP but not TCP (IPv6: TCP in the fixed header), later IPv4 fragments, and
/// TCP that is not to one of `ports` (nor, with `answers`, from one of them: `--compare`
/// needs the answers). Pure ACKs are kept, as the capture's filter keeps them (the engine
/// follows the client's acknowledgments). Whatever it cannot parse (not IP, a bad version, a
/// third VLAN tag) it accepts, so user space counts it under its reason; an inner packet cut
/// before its TCP ports is dropped (a load beyond the datagram ends the program with 0),
/// as the capture's filter drops a truncated frame.
///
/// VXLAN: 8 bytes, then Ethernet. GENEVE: 8 bytes and `4 * (byte 0 & 0x3f)` of options, then
/// Ethernet, IPv4 or IPv6 by its protocol type. Ethernet may carry up to two VLAN tags. The
/// VNI is bytes 4 to 6 of both headers. Addresses of maps that name one are left to user space
/// (ports only here), so is everything past this filter (duplicates, truncation).
///
/// `None` when there is nothing to filter on (more than [`MIRROR_MAX_PORTS`] ports, or no
/// port): the socket then takes everything, as before this filter.
pub fn build_mirror_filter(
    geneve: bool,
    vnis: &[u32],
    ports: &[u16],
    answers: bool,
) -> Option<Vec<Insn>> {
    let mut ports = ports.to_vec();
    ports.sort_unstable();
    ports.dedup();
    if ports.is_empty() || ports.len() > MIRROR_MAX_PORTS {
        return None;
    }
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    let mut sorted = vnis.to_vec();
    sorted.sort_unstable();
    for v in sorted {
        match ranges.last_mut() {
            Some((_, hi)) if v <= *hi + 1 => *hi = (*hi).max(v),
            _ => ranges.push((v, v)),
        }
    }
    if ranges.len() > MIRROR_MAX_VNI_RANGES {
        ranges.clear();
    }
    let ret = |k: u32| stmt(op::RET | op::K, k);
    let ja = |k: usize| stmt(op::JMP | op::JA, k as u32);
    let mut p = Vec::new();
    // Jumps to labels placed later: (instruction index, label), patched at the end.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum L {
        Eth,
        V4,
        V6,
        Tcp,
    }
    let mut fixups: Vec<(usize, L)> = Vec::new();

    // The VNI: bytes 12..15 hold the VNI and a reserved byte.
    if !ranges.is_empty() {
        p.push(stmt(op::LD | op::W | op::ABS, 12));
        p.push(stmt(op::ALU | op::RSH | op::K, 8));
        let n = ranges.len();
        for (i, &(lo, hi)) in ranges.iter().enumerate() {
            p.push(jump(op::JMP | op::JGE | op::K, lo, 0, 2));
            p.push(jump(op::JMP | op::JGT | op::K, hi, 1, 0));
            // In range: over the other ranges' 3 instructions each and the final reject.
            p.push(ja(3 * (n - 1 - i) + 1));
        }
        p.push(ret(0));
    }

    // X = where the inner frame starts; Ethernet for VXLAN, by protocol type for GENEVE.
    if geneve {
        p.push(stmt(op::LD | op::B | op::ABS, 8));
        p.push(stmt(op::ALU | op::AND | op::K, 0x3f));
        p.push(stmt(op::ALU | op::LSH | op::K, 2));
        p.push(stmt(op::ALU | op::ADD | op::K, 16));
        p.push(stmt(op::MISC | op::TAX, 0));
        p.push(stmt(op::LD | op::H | op::ABS, 10));
        p.push(jump(op::JMP | op::JEQ | op::K, GENEVE_ETHERNET, 3, 0));
        p.push(jump(op::JMP | op::JEQ | op::K, ETHERTYPE_IPV4, 3, 0));
        p.push(jump(op::JMP | op::JEQ | op::K, ETHERTYPE_IPV6, 3, 0));
        p.push(ret(ACCEPT)); // not IP: counted by user space
        fixups.push((p.len(), L::Eth));
        p.push(ja(0));
        fixups.push((p.len(), L::V4));
        p.push(ja(0));
        fixups.push((p.len(), L::V6));
        p.push(ja(0));
    } else {
        p.push(stmt(op::LDX | op::IMM, 16));
    }

    // Ethernet at X, up to two VLAN tags; then X = the IP header.
    let eth = p.len();
    p.push(stmt(op::LD | op::H | op::IND, 12));
    for _ in 0..2 {
        p.push(jump(op::JMP | op::JEQ | op::K, ETHERTYPE_VLAN, 1, 0));
        p.push(jump(op::JMP | op::JEQ | op::K, ETHERTYPE_QINQ, 0, 4));
        p.push(stmt(op::MISC | op::TXA, 0));
        p.push(stmt(op::ALU | op::ADD | op::K, 4));
        p.push(stmt(op::MISC | op::TAX, 0));
        p.push(stmt(op::LD | op::H | op::IND, 12));
    }
    p.push(jump(op::JMP | op::JEQ | op::K, ETHERTYPE_IPV4, 2, 0));
    p.push(jump(op::JMP | op::JEQ | op::K, ETHERTYPE_IPV6, 5, 0));
    p.push(ret(ACCEPT)); // not IP (or a third tag): counted by user space
    p.push(stmt(op::MISC | op::TXA, 0));
    p.push(stmt(op::ALU | op::ADD | op::K, 14));
    p.push(stmt(op::MISC | op::TAX, 0));
    fixups.push((p.len(), L::V4));
    p.push(ja(0));
    p.push(stmt(op::MISC | op::TXA, 0));
    p.push(stmt(op::ALU | op::ADD | op::K, 14));
    p.push(stmt(op::MISC | op::TAX, 0));
    fixups.push((p.len(), L::V6));
    p.push(ja(0));

    // IPv4 at X: TCP, not a later fragment; X = the TCP header.
    let v4 = p.len();
    p.push(stmt(op::LD | op::B | op::IND, 0));
    p.push(stmt(op::ALU | op::RSH | op::K, 4));
    p.push(jump(op::JMP | op::JEQ | op::K, 4, 1, 0));
    p.push(ret(ACCEPT)); // bad version: counted by user space
    p.push(stmt(op::LD | op::B | op::IND, 9));
    p.push(jump(op::JMP | op::JEQ | op::K, IPPROTO_TCP, 1, 0));
    p.push(ret(0));
    p.push(stmt(op::LD | op::H | op::IND, 6));
    p.push(jump(op::JMP | op::JSET | op::K, 0x1fff, 0, 1));
    p.push(ret(0));
    p.push(stmt(op::LD | op::B | op::IND, 0));
    p.push(stmt(op::ALU | op::AND | op::K, 0xf));
    p.push(stmt(op::ALU | op::LSH | op::K, 2));
    p.push(stmt(op::ALU | op::ADD | op::X, 0));
    p.push(stmt(op::MISC | op::TAX, 0));
    fixups.push((p.len(), L::Tcp));
    p.push(ja(0));

    // IPv6 at X: TCP in the fixed header; X = the TCP header.
    let v6 = p.len();
    p.push(stmt(op::LD | op::B | op::IND, 0));
    p.push(stmt(op::ALU | op::RSH | op::K, 4));
    p.push(jump(op::JMP | op::JEQ | op::K, 6, 1, 0));
    p.push(ret(ACCEPT));
    p.push(stmt(op::LD | op::B | op::IND, 6));
    p.push(jump(op::JMP | op::JEQ | op::K, IPPROTO_TCP, 1, 0));
    p.push(ret(0));
    p.push(stmt(op::MISC | op::TXA, 0));
    p.push(stmt(op::ALU | op::ADD | op::K, 40));
    p.push(stmt(op::MISC | op::TAX, 0));

    // TCP at X: to a service port (the client's packets), or from one with `answers`.
    let tcp = p.len();
    let offsets: &[u32] = if answers { &[2, 0] } else { &[2] };
    for &off in offsets {
        p.push(stmt(op::LD | op::H | op::IND, off));
        for &port in &ports {
            p.push(jump(op::JMP | op::JEQ | op::K, port.into(), 0, 1));
            p.push(ret(ACCEPT));
        }
    }
    p.push(ret(0));

    for (at, label) in fixups {
        let to = match label {
            L::Eth => eth,
            L::V4 => v4,
            L::V6 => v6,
            L::Tcp => tcp,
        };
        p[at].k = (to - at - 1) as u32;
    }
    debug_assert!(p.len() <= MAX_INSNS);
    Some(p)
}

/// The program of the capture's `PACKET_FANOUT_CBPF` group (`--workers N`): it returns the
/// client (source) port shifted right by one, and the kernel hands the packet to member
/// `value % N`. So worker `i` gets every connection whose client port `p` has
/// `(p >> 1) % N == i`: all packets of a connection reach one worker (fragments are reassembled
/// first, `PACKET_FANOUT_FLAG_DEFRAG`), and that worker's port share
/// ([`crate::engine::PortShare`]) holds the client's port, so the copy keeps the client's port
/// and no two workers can ever pick the same test 4-tuple. The shift ignores the port's parity,
/// which Linux clients skew (`connect()` prefers ports of one parity).
///
/// The TCP header is found as the capture filter finds it: after the IPv4 header (its IHL) or
/// after the fixed IPv6 header. Anything else (the capture filter rejects it anyway) goes to
/// member 0.
pub fn fanout_program() -> Vec<Insn> {
    vec![
        stmt(op::LD | op::H | op::ABS, op::AD_OFF + op::AD_PROTOCOL),
        jump(op::JMP | op::JEQ | op::K, ETHERTYPE_IPV4, 0, 4),
        // IPv4: X = header length, A = source port at X.
        stmt(op::LDX | op::B | op::MSH, 0),
        stmt(op::LD | op::H | op::IND, 0),
        stmt(op::ALU | op::RSH | op::K, 1),
        stmt(op::RET | op::A, 0),
        jump(op::JMP | op::JEQ | op::K, ETHERTYPE_IPV6, 0, 3),
        stmt(op::LD | op::H | op::ABS, 40),
        stmt(op::ALU | op::RSH | op::K, 1),
        stmt(op::RET | op::A, 0),
        stmt(op::RET | op::K, 0),
    ]
}

#[cfg(test)]
mod tests;
