//! Fuzz the intercept's NFQUEUE netlink parser on arbitrary datagrams: it must never panic or
//! read past the datagram, a packet's bytes lie inside it, its length is at least what was
//! copied, and the walk ends.
#![no_main]

use intercept::netlink::{messages, Msg};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let range = data.as_ptr_range();
    let mut n = 0usize;
    for m in messages(data) {
        n += 1;
        // every message takes at least a netlink header
        assert!(n <= data.len() / 16 + 1);
        if let Msg::Packet(p) = m {
            let r = p.payload.as_ptr_range();
            assert!(p.payload.is_empty() || (r.start >= range.start && r.end <= range.end));
            assert!(p.orig_len >= p.payload.len());
        }
    }
});
