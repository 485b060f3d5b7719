//! The comparison's parsers on arbitrary bytes: HTTP answers (chunked, gzip), request heads,
//! JSON bodies, and a whole comparison of two answers split from the input. Nothing may panic,
//! and a decoded body never passes its limit.
#![no_main]

use compare::http::{parse_answer, parse_request_head, Limits};
use compare::{CompareConfig, Comparator, Exchange, Reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_body: 64 * 1024 };
    if let Ok(a) = parse_answer(data, false, limits) {
        assert!(a.body.len() <= limits.max_body);
    }
    let _ = parse_request_head(data);
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
