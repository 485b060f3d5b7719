//! Fuzz the control-protocol decoder: arbitrary bytes, delivered in pieces whose sizes come from
//! the input itself, must never panic, and whatever decodes must encode back to the same message.
//! The first byte also picks the decoder's mode: the handshake's small frame limit, and/or
//! per-frame tags (arbitrary bytes then also exercise the tag checks; well-tagged frames are
//! covered by the sealed round trip).
#![no_main]

use common::proto::auth::session_keys;
use common::proto::codec::seal_frames;
use common::proto::{FrameDecoder, Message, Role, PRE_AUTH_MAX_FRAME};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the chunk size (low 6 bits) and the mode (high 2 bits).
    let Some((&first, rest)) = data.split_first() else { return };
    let chunk = usize::from(first & 0x3f).max(1);
    let small = first & 0x40 != 0;
    let tagged = first & 0x80 != 0;
    let keys = session_keys(b"fuzz-secret-of-enough-bytes", &[1; 32], &[2; 32]);
    let mut d = FrameDecoder::new();
    if small {
        d.set_max_frame(PRE_AUTH_MAX_FRAME);
    }
    if tagged {
        d.authenticate(keys.copier_to_intercept.clone(), Role::Copier);
    }
    for piece in rest.chunks(chunk) {
        d.push(piece);
        loop {
            match d.next() {
                Ok(Some(m)) => roundtrip(&m),
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});

fn roundtrip(m: &Message) {
    let mut bytes = Vec::new();
    m.encode(&mut bytes);
    let mut d = FrameDecoder::new();
    d.push(&bytes);
    let again = d.next().expect("re-encoded message decodes").expect("complete frame");
    assert_eq!(&again, m);
    // The same message sealed decodes through a tag-checking decoder.
    let keys = session_keys(b"fuzz-secret-of-enough-bytes", &[1; 32], &[2; 32]);
    let mut sealed = Vec::new();
    seal_frames(&keys.intercept_to_copier, &mut 0, &bytes, &mut sealed);
    let mut d = FrameDecoder::new();
    d.authenticate(keys.intercept_to_copier, Role::Intercept);
    d.push(&sealed);
    let mut all = Vec::new();
    while let Some(x) = d.next().expect("sealed message decodes") {
        all.push(x);
    }
    assert_eq!(all.len(), 1);
    assert_eq!(&all[0], m);
}
