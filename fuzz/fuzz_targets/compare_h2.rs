//! The comparison's HTTP/2 reader (`compare::h2`) on bytes from outside: frames and HPACK
//! header blocks of any shape, fed in pieces (sizes from the input). Nothing may panic (built
//! with overflow checks), a message never keeps more than its body limit, what the reader holds
//! stays within its bounds, reading in pieces finds the same messages as reading whole, and the
//! HTTP/1.1 form of every message parses. Then the same bytes behind the preface, as the
//! streams of an HTTP/2 connection through `Flows`: the running byte total stays exact.
#![no_main]

use compare::flows::{FlowConfig, Flows, Seg, Side};
use compare::h2::{answer_as_http1, request_as_http1, Message, Reader, MAX_BLOCK, MAX_STREAMS};
use compare::http::{parse_answer, parse_request_head, Limits};
use libfuzzer_sys::fuzz_target;

const MAX_BODY: usize = 1024;

fn read(bytes: &[u8], piece: usize, now: std::time::Instant) -> (Vec<(u32, Message)>, bool) {
    let mut r = Reader::new(MAX_BODY);
    let (mut buf, mut out) = (Vec::new(), Vec::new());
    for p in bytes.chunks(piece) {
        buf.extend_from_slice(p);
        loop {
            match r.read(&buf, now) {
                Ok(0) => break,
                Ok(n) => {
                    buf.drain(..n);
                    out.extend(r.take_done());
                    assert!(r.bytes() <= MAX_STREAMS * (MAX_BODY + MAX_BLOCK) + MAX_BLOCK);
                }
                Err(_) => return (out, false),
            }
        }
    }
    (out, true)
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, bytes)) = data.split_first() else { return };
    let now = std::time::Instant::now();
    let (whole, ok) = read(bytes, bytes.len().max(1), now);
    let (pieces, ok2) = read(bytes, usize::from(cut % 32) + 1, now);
    assert_eq!(ok, ok2);
    assert_eq!(whole, pieces, "the same messages whole and in pieces");
    for (_, m) in &whole {
        assert!(m.body.len() <= MAX_BODY);
        assert!(parse_request_head(&request_as_http1(m)).is_ok());
        assert!(parse_answer(&answer_as_http1(m), false, Limits::default()).is_ok());
    }
    // the four streams of one HTTP/2 connection: the preface, then these bytes on every side
    const MAX: usize = 64 << 10;
    let mut flows: Flows<u8> = Flows::new(FlowConfig { max_message: 4096, max_held: 4096, max_bytes: MAX, max_pending_bytes: MAX, ..FlowConfig::default() });
    let mut client = common::h2::PREFACE.to_vec();
    client.extend_from_slice(bytes);
    for (side, b) in [(Side::Client, &client[..]), (Side::Online, bytes), (Side::Candidate, bytes)] {
        let mut seq = 1u32;
        for chunk in b.chunks(usize::from(cut % 64) + 7) {
            let seg = Seg { seq, ack: Some(1), syn: false, fin: false, rst: false, payload: chunk, cut: false };
            seq = seq.wrapping_add(chunk.len() as u32);
            let _ = flows.handle(now, &0, side, seg);
            assert_eq!(flows.bytes(), flows.recount());
        }
    }
});
