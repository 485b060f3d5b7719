//! Tests of the raw sender.

use common::wire::{tcp_options, TcpBuilder, TcpFlags, TcpOption};

use super::*;
use common::seq::SeqNum;

fn packet(
    src: &str,
    dst: &str,
    flags: TcpFlags,
    payload: &[u8],
    opts: &[TcpOption<'_>],
) -> Vec<u8> {
    let mut out = Vec::new();
    TcpBuilder {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        seq: SeqNum(4_294_967_000),
        ack: SeqNum(77),
        flags,
        window: 500,
        options: opts,
        payload,
        ttl: 63,
        ident: 9,
    }
    .emit(&mut out);
    out
}

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

#[test]
fn split_keeps_bytes_order_and_flags() {
    let data = payload(5000);
    let ts = [TcpOption::Timestamps { tsval: 1, tsecr: 2 }];
    let pkt = packet(
        "198.18.0.1:40000",
        "198.18.1.2:80",
        TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN,
        &data,
        &ts,
    );
    let mut out = Vec::new();
    let n = split_tcp_packet(&pkt, 1500, &mut out).unwrap();
    assert_eq!(n, 4);
    let mut joined = Vec::new();
    let mut next_seq = SeqNum(4_294_967_000);
    for (i, piece) in out.iter().enumerate() {
        assert!(piece.len() <= 1500, "piece {i} is {} bytes", piece.len());
        let p = parse_tcp_packet(piece).unwrap();
        assert!(p.tcp_checksum_ok());
        assert_eq!(p.tcp.seq(), next_seq, "sequence wraps correctly");
        next_seq = next_seq.add(p.payload().len() as u32);
        assert_eq!(p.tcp.ack(), SeqNum(77));
        assert_eq!(p.ttl, 63);
        let last = i + 1 == n;
        assert_eq!(p.tcp.flags().contains(TcpFlags::FIN), last);
        assert_eq!(p.tcp.flags().contains(TcpFlags::PSH), last);
        assert!(p.tcp.flags().contains(TcpFlags::ACK));
        let opts: Vec<_> = tcp_options(p.options()).map(Result::unwrap).collect();
        assert!(opts.contains(&TcpOption::Timestamps { tsval: 1, tsecr: 2 }));
        joined.extend_from_slice(p.payload());
    }
    assert_eq!(joined, data);
}

#[test]
fn split_ipv6_and_even_pieces() {
    let data = payload(2000);
    let pkt = packet(
        "[2001:db8::1]:40000",
        "[2001:db8::2]:80",
        TcpFlags::ACK,
        &data,
        &[],
    );
    let mut out = Vec::new();
    assert_eq!(split_tcp_packet(&pkt, 1500, &mut out).unwrap(), 2);
    let lens: Vec<usize> = out
        .iter()
        .map(|p| parse_tcp_packet(p).unwrap().payload().len())
        .collect();
    assert_eq!(lens, vec![1000, 1000]);
}

#[test]
fn small_packets_pass_whole_and_refusals() {
    let pkt = packet("198.18.0.1:1", "198.18.1.2:80", TcpFlags::ACK, b"abc", &[]);
    let mut out = Vec::new();
    assert_eq!(split_tcp_packet(&pkt, 1500, &mut out).unwrap(), 1);
    assert_eq!(out[0], pkt);

    let big = payload(3000);
    let syn = packet("198.18.0.1:1", "198.18.1.2:80", TcpFlags::SYN, &big, &[]);
    assert!(matches!(
        split_tcp_packet(&syn, 1500, &mut out),
        Err(SplitError::Flags(_))
    ));
    let data = packet("198.18.0.1:1", "198.18.1.2:80", TcpFlags::ACK, &big, &[]);
    assert!(matches!(
        split_tcp_packet(&data, 44, &mut out),
        Err(SplitError::TooSmall { .. })
    ));
    assert!(matches!(
        split_tcp_packet(&data[..30], 1500, &mut out),
        Err(SplitError::Parse(_))
    ));
}

#[test]
fn error_kinds() {
    let k = |errno| SendErrorKind::of(&io::Error::from_raw_os_error(errno));
    assert_eq!(k(libc::EMSGSIZE), SendErrorKind::MsgSize);
    assert_eq!(k(libc::ENOBUFS), SendErrorKind::NoBufs);
    assert_eq!(k(libc::EWOULDBLOCK), SendErrorKind::Again);
    assert_eq!(k(libc::EPERM), SendErrorKind::Perm);
    assert_eq!(k(libc::ENETUNREACH), SendErrorKind::Other);
}

#[test]
fn log_limit_one_a_second() {
    let mut l = LogLimit::default();
    let t = Instant::now();
    assert_eq!(l.allow(t), Some(0));
    assert_eq!(l.allow(t + Duration::from_millis(10)), None);
    assert_eq!(l.allow(t + Duration::from_millis(20)), None);
    assert_eq!(l.allow(t + Duration::from_secs(2)), Some(2));
}
