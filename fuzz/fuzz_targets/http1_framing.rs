//! `common::http1` on arbitrary bytes: every cut of the input gives the framing of the whole.
//! The first byte picks the mode and the cut points; the rest is fed to the chunked-body walker
//! whole and in pieces (data, end and faults must agree), and to `message_len` as a request and
//! as an answer (a complete message never ends past the bytes; the same prefix framed whole
//! and then extended by more bytes keeps a complete length). Nothing may panic (built with
//! overflow checks: scripts/fuzz.sh).
#![no_main]

use common::http1::{chunked_len, dechunk, message_len, Chunks, Fed, Framing, Mode};
use libfuzzer_sys::fuzz_target;

/// Feeds `b` in pieces ending at `cuts`, each piece starting where the walker stopped reading.
fn walk(b: &[u8], mode: Mode, cuts: &[usize]) -> (Vec<u8>, Result<Fed, u64>, bool) {
    let mut w = Chunks::new(mode);
    let mut out = Vec::new();
    let mut at = 0;
    for end in cuts.iter().copied().chain([b.len()]) {
        if end < at || end > b.len() {
            continue;
        }
        match w.feed(&b[at..end], |d| {
            out.extend_from_slice(d);
            true
        }) {
            Err(e) => {
                assert!(e.read <= end - at);
                return (out, Err(e.at), w.last_chunk());
            }
            Ok(f) => {
                assert!(f.used <= end - at);
                at += f.used;
                if f.done {
                    break;
                }
            }
        }
    }
    assert_eq!(w.offset(), at as u64);
    (
        out,
        Ok(Fed {
            used: at,
            done: w.done(),
        }),
        w.last_chunk(),
    )
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, b)) = data.split_first() else {
        return;
    };
    let mode = if first & 1 == 0 {
        Mode::Relay
    } else {
        Mode::Capture
    };
    // cut points from the first byte: every `step` bytes, and at a byte-dependent offset
    let step = usize::from(first >> 1).max(1);
    let mut cuts: Vec<usize> = (step..b.len()).step_by(step).collect();
    cuts.push(usize::from(first) % (b.len() + 1));
    cuts.sort_unstable();
    let whole = walk(b, mode, &[]);
    assert_eq!(walk(b, mode, &cuts), whole, "cut at {cuts:?}");
    let every = (1..b.len()).collect::<Vec<_>>();
    assert_eq!(walk(b, mode, &every), whole, "cut at every byte");
    if let Ok(Some(n)) = chunked_len(b, mode) {
        assert!(n <= b.len());
        assert_eq!(
            whole.1,
            Ok(Fed {
                used: n,
                done: true
            })
        );
    }
    if let Ok((d, _)) = dechunk(b, 1024, mode) {
        assert!(d.len() <= 1024);
        assert!(whole.0.starts_with(&d));
    }
    for req in [true, false] {
        if let Ok(Framing::Complete(n)) = message_len(b, req, first & 2 != 0, mode) {
            assert!(n <= b.len());
            // more bytes after a whole message do not change its length
            let mut more = b.to_vec();
            more.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
            assert_eq!(
                message_len(&more, req, first & 2 != 0, mode),
                Ok(Framing::Complete(n))
            );
        }
    }
});
