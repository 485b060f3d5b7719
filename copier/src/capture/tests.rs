//! Tests of the capture ring.

use super::*;
use std::mem::offset_of;

#[test]
fn offsets_match_libc() {
    let bh = offset_of!(libc::tpacket_block_desc, hdr);
    assert_eq!(
        bh + offset_of!(libc::tpacket_hdr_v1, num_pkts),
        block::NUM_PKTS
    );
    assert_eq!(
        bh + offset_of!(libc::tpacket_hdr_v1, offset_to_first_pkt),
        block::OFFSET_TO_FIRST_PKT
    );
    assert_eq!(
        bh + offset_of!(libc::tpacket_hdr_v1, blk_len),
        block::BLK_LEN
    );
    assert_eq!(std::mem::size_of::<libc::tpacket_block_desc>(), block::SIZE);
    assert_eq!(
        offset_of!(libc::tpacket3_hdr, tp_next_offset),
        frame::NEXT_OFFSET
    );
    assert_eq!(offset_of!(libc::tpacket3_hdr, tp_sec), frame::SEC);
    assert_eq!(offset_of!(libc::tpacket3_hdr, tp_nsec), frame::NSEC);
    assert_eq!(offset_of!(libc::tpacket3_hdr, tp_snaplen), frame::SNAPLEN);
    assert_eq!(offset_of!(libc::tpacket3_hdr, tp_len), frame::LEN);
    assert_eq!(offset_of!(libc::tpacket3_hdr, tp_status), frame::STATUS);
    assert_eq!(offset_of!(libc::tpacket3_hdr, tp_mac), frame::MAC);
    assert_eq!(std::mem::size_of::<libc::tpacket3_hdr>(), frame::SIZE);
}

/// Lay out a block the way the kernel does: header, then frames at 16-aligned offsets, each
/// a tpacket3_hdr + sockaddr_ll gap + data at tp_mac.
fn make_block(size: usize, packets: &[(&[u8], u32)]) -> Vec<u8> {
    let mut b = vec![0u8; size];
    let put32 =
        |b: &mut Vec<u8>, off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    let first = 48usize;
    let mac = 48 + 20 + 12; // TPACKET_ALIGN(hdr) + sizeof(sockaddr_ll) rounded as the kernel does
    let mut off = first;
    let mut offs = Vec::new();
    for (data, _) in packets {
        offs.push(off);
        off += (mac + data.len()).next_multiple_of(16);
    }
    for (i, ((data, wire_len), &o)) in packets.iter().zip(&offs).enumerate() {
        let next = if i + 1 < packets.len() {
            offs[i + 1] - o
        } else {
            0
        };
        put32(&mut b, o + frame::NEXT_OFFSET, next as u32);
        put32(&mut b, o + frame::SNAPLEN, data.len() as u32);
        put32(&mut b, o + frame::LEN, *wire_len);
        put32(&mut b, o + frame::STATUS, 1);
        put32(&mut b, o + frame::SEC, 1_764_000_000 + i as u32);
        put32(&mut b, o + frame::NSEC, 123_456_789);
        b[o + frame::MAC..o + frame::MAC + 2].copy_from_slice(&(mac as u16).to_ne_bytes());
        b[o + mac..o + mac + data.len()].copy_from_slice(data);
    }
    put32(&mut b, block::NUM_PKTS, packets.len() as u32);
    put32(&mut b, block::OFFSET_TO_FIRST_PKT, first as u32);
    put32(&mut b, block::BLK_LEN, off as u32);
    b
}

#[test]
fn walks_all_frames_in_order() {
    let p1 = [0x45u8; 60];
    let p2 = [0x60u8; 100];
    let p3 = [7u8; 1];
    let blk = make_block(4096, &[(&p1, 60), (&p2, 100), (&p3, 1)]);
    let mut seen = Vec::new();
    assert_eq!(walk_block(&blk, |f| seen.push(f.data.to_vec())).unwrap(), 3);
    assert_eq!(seen, vec![p1.to_vec(), p2.to_vec(), p3.to_vec()]);
    let mut stamps = Vec::new();
    walk_block(&blk, |f| stamps.push(f.stamp)).unwrap();
    assert_eq!(
        stamps,
        [0, 1, 2].map(|i| (1_764_000_000 + i) * 1_000_000_000 + 123_456_789)
    );
}

#[test]
fn empty_block() {
    let blk = make_block(4096, &[]);
    assert_eq!(walk_block(&blk, |_| panic!("no frames")).unwrap(), 0);
}

#[test]
fn reports_cut_frames_through_wire_len() {
    let p = [1u8; 64];
    let blk = make_block(4096, &[(&p, 9000)]);
    let mut lens = Vec::new();
    walk_block(&blk, |f| lens.push((f.data.len(), f.wire_len))).unwrap();
    assert_eq!(lens, vec![(64, 9000)]);
}

#[test]
fn rejects_headers_pointing_outside() {
    let p = [1u8; 64];
    let good = make_block(1024, &[(&p, 64), (&p, 64)]);

    let mut b = good.clone();
    b[block::BLK_LEN..block::BLK_LEN + 4].copy_from_slice(&5000u32.to_ne_bytes());
    assert!(matches!(
        walk_block(&b, |_| {}),
        Err(RingFormatError::BadBlock { .. })
    ));

    let mut b = good.clone();
    b[block::NUM_PKTS..block::NUM_PKTS + 4].copy_from_slice(&3u32.to_ne_bytes());
    let mut n = 0;
    // Frame 2 would follow a zero next-offset: the first two are delivered, then the error.
    assert!(matches!(
        walk_block(&b, |_| n += 1),
        Err(RingFormatError::BadFrame { index: 2, .. })
    ));
    assert_eq!(n, 2);

    let mut b = good.clone();
    let first = 48;
    b[first + frame::SNAPLEN..first + frame::SNAPLEN + 4]
        .copy_from_slice(&100_000u32.to_ne_bytes());
    assert!(matches!(
        walk_block(&b, |_| {}),
        Err(RingFormatError::BadFrame { index: 0, .. })
    ));

    let mut b = good.clone();
    b[block::OFFSET_TO_FIRST_PKT..block::OFFSET_TO_FIRST_PKT + 4]
        .copy_from_slice(&8u32.to_ne_bytes());
    assert!(
        walk_block(&b, |_| {}).is_err(),
        "a frame overlapping the block header"
    );

    let mut b = good.clone();
    b[first + frame::NEXT_OFFSET..first + frame::NEXT_OFFSET + 4]
        .copy_from_slice(&u32::MAX.to_ne_bytes());
    assert!(walk_block(&b, |_| {}).is_err());

    assert!(walk_block(&good[..20], |_| {}).is_err());
}

#[test]
fn trims_ethernet_padding() {
    // A 40-byte IPv4/TCP ACK padded to 46 bytes.
    let mut p = vec![0u8; 46];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&40u16.to_be_bytes());
    assert_eq!(trim_to_ip_len(&p).len(), 40);
    // IPv6 with 20 bytes of payload, padded.
    let mut p6 = vec![0u8; 64];
    p6[0] = 0x60;
    p6[4..6].copy_from_slice(&20u16.to_be_bytes());
    assert_eq!(trim_to_ip_len(&p6).len(), 60);
    // Shorter than claimed, impossible length, garbage: unchanged.
    p[2..4].copy_from_slice(&400u16.to_be_bytes());
    assert_eq!(trim_to_ip_len(&p).len(), 46);
    p[2..4].copy_from_slice(&3u16.to_be_bytes());
    assert_eq!(trim_to_ip_len(&p).len(), 46);
    assert_eq!(trim_to_ip_len(&[0x45]).len(), 1);
    assert_eq!(trim_to_ip_len(&[]).len(), 0);
}
