//! Fuzz the capture-file reader (`copier --offline`, `shaper fit`) on any bytes: it must never
//! panic, must end, and every packet it delivers must be an IPv4 or IPv6 packet.
#![no_main]

use common::pcap::{Event, Reader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = Reader::new(data) else {
        return;
    };
    // Every event consumes input, so a file of n bytes yields fewer than n + 2 of them.
    for _ in 0..data.len() + 2 {
        match reader.next_event() {
            Ok(Some(Event::Packet(p))) => {
                assert!(matches!(p.data.first().map(|b| b >> 4), Some(4 | 6)));
            }
            Ok(Some(Event::Skip(_))) => {}
            Ok(None) | Err(_) => return,
        }
    }
    panic!("the reader did not end");
});
