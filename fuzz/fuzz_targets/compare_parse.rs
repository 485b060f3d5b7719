//! The comparison's parsers on arbitrary bytes: HTTP answers (chunked, gzip), request heads,
//! JSON bodies, and a whole comparison of two answers split from the input. Nothing may panic
//! (built with overflow checks: scripts/fuzz.sh), a decoded body never passes its limit, and
//! the comparison's streams and pairing table stay within their byte bound.
#![no_main]

use compare::flows::{FlowConfig, Flows, Seg, Side};
use compare::http::{message_len, parse_answer, parse_request_head, Limits};
use compare::{CompareConfig, Comparator, Exchange, Reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_body: 64 * 1024 };
    if let Ok(a) = parse_answer(data, false, limits) {
        assert!(a.body.len() <= limits.max_body);
    }
    let _ = parse_request_head(data);
    let _ = message_len(data, true, false);
    if let Ok(compare::http::Framing::Complete(n)) = message_len(data, false, data.first() == Some(&b'H')) {
        assert!(n <= data.len());
    }
    // the same bytes as the three streams of a connection, in slices of 7..70 bytes
    const MAX: usize = 16 << 10;
    let mut flows: Flows<u8> = Flows::new(FlowConfig {
        max_message: 4096,
        max_held: 4096,
        max_bytes: MAX,
        max_pending_bytes: MAX,
        ..FlowConfig::default()
    });
    let now = std::time::Instant::now();
    let mut seq = [1u32; 4];
    for (i, chunk) in data.chunks(7 + data.len() % 64).enumerate() {
        let side = [Side::Client, Side::Online, Side::Candidate, Side::Baseline][i % 4];
        let s = &mut seq[i % 4];
        let seg = Seg { seq: *s, ack: Some(1), syn: false, fin: chunk[0] == 0, rst: false, payload: chunk, cut: chunk[0] == 1 };
        *s = s.wrapping_add(chunk.len() as u32);
        // a few connections, so that the memory bound sheds some
        let _ = flows.handle(now, &((i / 4 % 3) as u8), side, seg);
        // the running total is the recount, and the whole stays within the bound (plus a
        // segment, and a message on its way from a stream to the pairing table)
        assert_eq!(flows.bytes(), flows.recount());
        assert!(flows.bytes() <= MAX + 4096 + 70, "{}", flows.bytes());
    }
    // request | online | candidate, split at the first two 0xff bytes
    let mut parts = data.splitn(3, |&b| b == 0xff);
    let req = parts.next().unwrap_or_default().to_vec();
    let on = parts.next().unwrap_or_default().to_vec();
    let cand = parts.next().unwrap_or_default().to_vec();
    let mut c = Comparator::new(CompareConfig { limits, ..CompareConfig::default() });
    for _ in 0..2 {
        let _ = c.compare(&Exchange {
            port: 80,
            request: req.clone(),
            online: Reply { bytes: on.clone(), complete: true, time: None },
            candidate: Reply { bytes: cand.clone(), complete: data.len() % 2 == 0, time: None },
            baseline: Some(Reply { bytes: data.to_vec(), complete: true, time: None }),
            baseline_expected: true,
        });
    }
});
