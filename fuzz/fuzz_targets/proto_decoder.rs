//! Fuzz the control-protocol decoder: arbitrary bytes, delivered in pieces whose sizes come from
//! the input itself, must never panic, and whatever decodes must encode back to the same message.
#![no_main]

use common::proto::{FrameDecoder, Message};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the chunk size so that split delivery is explored too.
    let Some((&chunk, rest)) = data.split_first() else { return };
    let chunk = usize::from(chunk).max(1);
    let mut d = FrameDecoder::new();
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
}
