//! Fuzz the packet parser on bytes from outside (capture, NFQUEUE): it must never panic, and
//! the header-prefix parser used by the intercept must agree with it on whole packets.
#![no_main]

use common::proto::parse_response_headers;
use common::wire::parse_tcp_packet;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let whole = parse_tcp_packet(data);
    let prefix = parse_response_headers(data);
    if let Ok(p) = whole {
        let _ = (p.tcp.seq(), p.tcp.flags(), p.payload().len(), p.options().len());
        let h = prefix.expect("a whole packet also parses as a header prefix");
        assert_eq!(h.headers_len, p.ip_header_len + p.tcp.header_len());
    }
});
