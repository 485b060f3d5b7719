//! Fuzz the HTTP/2 framing (`common::h2`) on client bytes from outside: the preface matcher and
//! the frame cutter must never panic, and cutting the same bytes in pieces (sizes taken from
//! the input) must find the same frames as reading them whole, header by header.
#![no_main]

use common::h2::{FrameHeader, Framer, Preface, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, bytes)) = data.split_first() else { return };
    // The preface, fed in pieces, agrees with a comparison of the whole.
    let mut p = Preface::Start;
    for piece in bytes.chunks(usize::from(cut % 7) + 1) {
        p = p.feed(piece).0;
    }
    let n = bytes.len().min(24);
    match p {
        Preface::Seen => assert_eq!(&bytes[..24], common::h2::PREFACE),
        Preface::Partial(k) => assert_eq!((k as usize, &bytes[..n]), (n, &common::h2::PREFACE[..n])),
        Preface::No => assert_ne!(&bytes[..n], &common::h2::PREFACE[..n]),
        Preface::Start => assert!(bytes.is_empty()),
    }
    // Frames: whole reading against the cutter in pieces.
    let (mut starts, mut streams, mut at) = (Vec::new(), 0u32, 0usize);
    while at < bytes.len() {
        starts.push(at);
        match FrameHeader::parse(&bytes[at..]) {
            Some(h) => {
                streams += u32::from(h.opens_stream());
                at += HEADER_LEN + h.len as usize;
            }
            None => break,
        }
    }
    let whole_frames = starts.iter().filter(|&&s| s + HEADER_LEN <= bytes.len()).count() as u32;
    let mut f = Framer::default();
    let (mut found, mut frames, mut opened, mut off) = (Vec::new(), 0u32, 0u32, 0usize);
    for piece in bytes.chunks(usize::from(cut) + 1) {
        let fed = f.feed(piece);
        frames += fed.frames;
        opened += fed.streams;
        if let Some(k) = fed.first_start {
            found.push(off + k);
        }
        off += piece.len();
    }
    assert_eq!(frames, whole_frames);
    assert_eq!(opened, streams);
    // Every first start of a piece is a frame start.
    for s in found {
        assert!(starts.contains(&s), "{s} is no frame start");
    }
});
