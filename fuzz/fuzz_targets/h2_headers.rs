//! Fuzz HTTP/2 header-block parsing on client bytes from outside: `common::hpack` decoding
//! arbitrary blocks, and the copier's HTTP/2 request editor (`--rules`: a filter, a dye, header
//! edits, a rewrite) over the preface and arbitrary frames, cut in pieces.
//!
//! Checked: no panic; a block that decodes, encoded again by `hpack::Encoder`, decodes to the
//! same fields with a fresh decoder; and whatever the editor writes for the test server is the
//! preface and frames whose header blocks all decode, in order, with one fresh decoder (the
//! test server's decoder never goes out of step), none above 16384 bytes, none on a stream
//! the filter denied.
#![no_main]

use std::sync::{Arc, OnceLock};

use common::h2::{headers_fragment, FrameHeader, Kind, END_HEADERS, HEADER_LEN, PREFACE};
use common::hpack::{Decoder, Encoder};
use libfuzzer_sys::fuzz_target;

const RULES: &str = "[[filter]]\nname = \"pay\"\npath = \"/pay/**\"\n[dye]\n[[header]]\nname = \"Cookie\"\ndelete = true\n\
    [[header]]\nname = \"Host\"\nset = \"test\"\n[[rewrite]]\nname = \"v2\"\nregex = \"^(\\\\w+) /v1/\"\nreplace = \"$1 /v2/\"\n";

fuzz_target!(|data: &[u8]| {
    let Some((&cut, bytes)) = data.split_first() else { return };
    // Blocks: the input cut at 0xff bytes, through one decoder in order.
    let mut d = Decoder::new();
    for block in bytes.split(|&b| b == 0xff) {
        let mut fields = Vec::new();
        if d.decode(block, &mut fields).is_ok() {
            let mut again = Vec::new();
            Encoder::new().encode(fields.iter().map(|(n, v)| (&n[..], &v[..])), &mut again);
            let mut back = Vec::new();
            Decoder::new().decode(&again, &mut back).expect("what the encoder wrote decodes");
            assert_eq!(back, fields);
        }
    }
    // The editor over the preface and these bytes as frames.
    static R: OnceLock<Arc<copier::engine::Rules>> = OnceLock::new();
    let rules = R.get_or_init(|| Arc::new(copier::engine::Rules::from_toml_str(RULES).unwrap()));
    let input = [&PREFACE[..], bytes].concat();
    let (out, _failed) = copier::engine::h2_edit_for_fuzz(rules, &input, usize::from(cut) + 1);
    assert!(out.starts_with(PREFACE));
    let mut at = PREFACE.len();
    let mut dec = Decoder::new();
    let mut block = Vec::new();
    while let Some(h) = FrameHeader::parse(&out[at..]) {
        let Some(p) = out.get(at + HEADER_LEN..at + HEADER_LEN + h.len as usize) else { break }; // cut short by the input's end
        at += HEADER_LEN + h.len as usize;
        match h.kind {
            Kind::Headers => {
                assert!(h.len <= 16384);
                block = headers_fragment(h.flags, p).expect("a HEADERS frame the editor wrote").1.to_vec();
            }
            Kind::Continuation => {
                assert!(h.len <= 16384);
                block.extend_from_slice(p);
            }
            _ => continue,
        }
        if h.flags & END_HEADERS != 0 {
            let mut fields = Vec::new();
            dec.decode(&block, &mut fields).expect("every block written decodes with a fresh decoder, in order");
            let path = fields.iter().find(|(n, _)| n == b":path").map(|(_, v)| v.to_ascii_lowercase());
            assert!(!path.is_some_and(|p| p.starts_with(b"/pay/")), "a denied request reached the test side");
        }
    }
});
