//! The HTTP/2 editor through the copy's `Editor`: client frames encoded with a dynamic table
//! (as browsers and h2load do), cut anywhere, and what the test side gets read back with a
//! fresh decoder.

use std::sync::Arc;

use common::h2::{
    headers_fragment, FrameHeader, Kind, END_HEADERS, END_STREAM, HEADER_LEN, PREFACE,
};
use common::hpack;

use crate::engine::chunk::{ByteQueue, Meter, Payload};
use crate::engine::edit::Editor;
use crate::engine::rules::Rules;

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    common::h2::write_frame_header(out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
}

/// A client connection: the preface, SETTINGS, then for each request (path, body) a HEADERS
/// block from one indexing encoder (split in HEADERS + CONTINUATION when `split`), a DATA
/// frame, and a WINDOW_UPDATE on the stream.
fn client(reqs: &[(&str, &[u8])], split: bool) -> Vec<u8> {
    let mut enc = fluke_hpack::Encoder::new();
    let mut out = PREFACE.to_vec();
    frame(&mut out, 4, 0, 0, &[0, 3, 0, 0, 0, 100]);
    for (i, (path, body)) in reqs.iter().enumerate() {
        let id = 1 + 2 * i as u32;
        let hs: Vec<(&[u8], &[u8])> = vec![
            (b":method", if body.is_empty() { b"GET" } else { b"POST" }),
            (b":scheme", b"http"),
            (b":authority", b"shop.example"),
            (b":path", path.as_bytes()),
            (b"user-agent", b"h2load nghttp2/1.52"),
            (b"x-secret", b"s3cr3t"),
            (b"cookie", b"a=1"),
        ];
        let block = enc.encode(hs);
        let end = if body.is_empty() { END_STREAM } else { 0 };
        if split && block.len() > 4 {
            // Padded HEADERS with a priority, then a CONTINUATION.
            let mut p = vec![3, 0, 0, 0, 0, 16];
            p.extend_from_slice(&block[..4]);
            p.extend_from_slice(&[0, 0, 0]);
            frame(&mut out, 1, end | 0x8 | 0x20, id, &p);
            frame(&mut out, 9, END_HEADERS, id, &block[4..]);
        } else {
            frame(&mut out, 1, end | END_HEADERS, id, &block);
        }
        if !body.is_empty() {
            frame(&mut out, 0, END_STREAM, id, body);
        }
        frame(&mut out, 8, 0, id, &[0, 0, 1, 0]);
        frame(&mut out, 8, 0, 0, &[0, 0, 1, 0]);
    }
    out
}

/// The frames of the test side's bytes: (header, payload), and every header block decoded
/// with one fresh decoder in order: (stream, fields).
fn read(out: &[u8]) -> (Vec<(FrameHeader, Vec<u8>)>, Vec<(u32, Fields)>) {
    assert!(out.starts_with(PREFACE));
    let mut at = PREFACE.len();
    let (mut frames, mut blocks) = (Vec::new(), Vec::new());
    let mut dec = hpack::Decoder::new();
    let mut block: Vec<u8> = Vec::new();
    while at < out.len() {
        let h = FrameHeader::parse(&out[at..]).expect("a whole frame header");
        let p = out[at + HEADER_LEN..at + HEADER_LEN + h.len as usize].to_vec();
        at += HEADER_LEN + h.len as usize;
        assert!(h.len as usize <= 16384);
        match h.kind {
            Kind::Headers => block = headers_fragment(h.flags, &p).unwrap().1.to_vec(),
            Kind::Continuation => block.extend_from_slice(&p),
            _ => {}
        }
        if matches!(h.kind, Kind::Headers | Kind::Continuation) && h.flags & END_HEADERS != 0 {
            let mut f = Vec::new();
            dec.decode(&block, &mut f)
                .expect("every block decodes with a fresh decoder, in order");
            blocks.push((h.stream, f));
        }
        frames.push((h, p));
    }
    assert_eq!(at, out.len(), "the output ends at a frame boundary");
    (frames, blocks)
}

fn run(r: &Arc<Rules>, input: &[u8], cut: usize) -> (Vec<u8>, Editor) {
    let meter = Meter::default();
    let mut e = Editor::new(r.clone(), 1, "198.18.0.9".parse().unwrap(), meter.clone());
    let mut q = ByteQueue::new();
    let mut n = 0;
    for part in input.chunks(cut.max(1)) {
        n += e.feed(Payload::new(part, &meter).keep(0).unwrap(), &mut q);
    }
    n += e.flush(&mut q);
    let v = q.to_vec();
    assert_eq!(n, v.len());
    (v, e)
}

fn get<'a>(f: &'a Fields, n: &str) -> Vec<&'a [u8]> {
    f.iter()
        .filter(|(x, _)| x == n.as_bytes())
        .map(|(_, v)| &v[..])
        .collect()
}

const RULES: &str = "[[filter]]\nname = \"pay\"\npath = \"/pay/**\"\n\
    [dye]\nheader = \"X-Traffic-Copy\"\nvalue = \"copy{copy}\"\n\
    [[header]]\nname = \"X-Secret\"\ndelete = true\n\
    [[header]]\nname = \"Host\"\nset = \"test.lab\"\n\
    [[rewrite]]\nname = \"v2\"\nregex = \"^(\\\\w+) /v1/\"\nreplace = \"$1 /v2/\"\n";

#[test]
fn filtered_streams_vanish_and_every_other_block_decodes_edited_with_a_fresh_decoder() {
    let r = Arc::new(Rules::from_toml_str(RULES).unwrap());
    let paths = [
        "/v1/a", "/pay/1", "/b?q=1", "/PAY/2", "/v1/c", "//pay/3", "/d",
    ];
    let reqs: Vec<(&str, &[u8])> = (0..40)
        .map(|i| {
            (
                paths[i % paths.len()],
                if i % 3 == 0 { &b"body!"[..] } else { b"" },
            )
        })
        .collect();
    let dropped: Vec<u32> = (0..40)
        .filter(|i| paths[i % paths.len()].to_ascii_lowercase().contains("pay"))
        .map(|i| 1 + 2 * i as u32)
        .collect();
    for split in [false, true] {
        let input = client(&reqs, split);
        for cut in [1, 7, 9, 100, 1000, input.len()] {
            let (out, e) = run(&r, &input, cut);
            let (frames, blocks) = read(&out);
            assert!(
                frames.iter().all(|(h, _)| !dropped.contains(&h.stream)),
                "cut {cut}: no frame of a dropped stream"
            );
            assert_eq!(blocks.len(), 40 - dropped.len(), "cut {cut}");
            for (id, f) in &blocks {
                let i = (id - 1) as usize / 2;
                let want = paths[i % paths.len()].replace("/v1/", "/v2/");
                assert_eq!(get(f, ":path"), [want.as_bytes()], "stream {id}");
                assert_eq!(
                    get(f, "x-traffic-copy"),
                    [&b"copy1"[..]],
                    "the dye, lower-cased"
                );
                assert!(get(f, "x-secret").is_empty());
                assert_eq!(get(f, ":authority"), [&b"test.lab"[..]]);
                assert_eq!(get(f, "cookie"), [&b"a=1"[..]]);
                assert!(
                    f.iter().position(|(n, _)| n.starts_with(b":"))
                        < f.iter().position(|(n, _)| !n.starts_with(b":"))
                );
            }
            // DATA of the kept streams arrives exactly; stream-level WINDOW_UPDATEs of kept
            // streams and the connection's go too.
            let data: Vec<u32> = frames
                .iter()
                .filter(|(h, _)| h.kind == Kind::Data)
                .map(|(h, _)| h.stream)
                .collect();
            let want: Vec<u32> = (0..40u32)
                .filter(|i| i % 3 == 0)
                .map(|i| 1 + 2 * i)
                .filter(|id| !dropped.contains(id))
                .collect();
            assert_eq!(data, want);
            assert!(frames
                .iter()
                .filter(|(h, _)| h.kind == Kind::Data)
                .all(|(_, p)| p == b"body!"));
            assert_eq!(
                frames
                    .iter()
                    .filter(|(h, _)| h.kind == Kind::WindowUpdate && h.stream == 0)
                    .count(),
                40
            );
            assert_eq!(
                (
                    e.counts.http_requests,
                    e.counts.dropped,
                    e.counts.edited,
                    e.counts.malformed
                ),
                (40, dropped.len() as u64, 40 - dropped.len() as u64, 0)
            );
            assert_eq!(
                e.counts.rules,
                [dropped.len() as u64, 0, 12],
                "pay, allow_only, v2 (stream 1, 9, 15, ...)"
            );
            assert_eq!(e.h2_streams_dropped(), dropped.len() as u64);
        }
    }
}

#[test]
fn without_edits_copied_blocks_decode_to_the_client_fields() {
    let r =
        Arc::new(Rules::from_toml_str("[[filter]]\nname = \"pay\"\npath = \"/pay/**\"\n").unwrap());
    let reqs: Vec<(&str, &[u8])> =
        vec![("/a", b""), ("/pay/x", b""), ("/b", b"x"), ("/pay/y", b"")];
    let (out, e) = run(&r, &client(&reqs, false), 13);
    let (_, blocks) = read(&out);
    assert_eq!(blocks.iter().map(|b| b.0).collect::<Vec<_>>(), [1, 5]);
    assert_eq!(get(&blocks[1].1, "x-secret"), [&b"s3cr3t"[..]]);
    assert_eq!(get(&blocks[1].1, ":method"), [&b"POST"[..]]);
    assert_eq!((e.counts.edited, e.counts.dropped), (0, 2));
}

#[test]
fn malformed_hpack_gives_the_copy_up_whatever_unparsable_says() {
    for unparsable in ["drop", "pass"] {
        let r = Arc::new(
            Rules::from_toml_str(&format!("unparsable = \"{unparsable}\"\n[dye]\n")).unwrap(),
        );
        let mut input = client(&[("/a", b"")], false);
        let good = run(&r, &input, 5).0;
        // An index into a dynamic table entry that does not exist.
        frame(&mut input, 1, END_STREAM | END_HEADERS, 3, &[0xff, 0x7f]);
        frame(&mut input, 8, 0, 0, &[0, 0, 1, 0]);
        let (out, e) = run(&r, &input, 5);
        assert_eq!(
            out, good,
            "{unparsable}: what went before stays, nothing after"
        );
        assert!(e.failed && e.counts.malformed == 1);
        assert_eq!(e.unparsable, unparsable == "drop");
    }
    // A CONTINUATION that continues nothing, a padding longer than the frame.
    let r = Arc::new(Rules::from_toml_str("[dye]\n").unwrap());
    // A PUSH_PROMISE (never a client's).
    for bad in [
        (9u8, END_HEADERS, vec![0x82]),
        (1, END_HEADERS | 0x8, vec![9, 0x82]),
        (5, END_HEADERS, vec![0, 0, 0, 2, 0x82]),
    ] {
        let mut input = client(&[], false);
        frame(&mut input, bad.0, bad.1, 1, &bad.2);
        let (_, e) = run(&r, &input, 3);
        assert!(e.failed && e.counts.malformed == 1, "{bad:?}");
    }
    // A request (pseudo-headers) on a stream id not above the last: it would pass unfiltered.
    let mut input = client(&[("/a", b""), ("/b", b"")], false);
    frame(&mut input, 1, END_STREAM | END_HEADERS, 1, &[0x82, 0x84]);
    let (out, e) = run(&r, &input, 3);
    assert!(e.failed && e.counts.malformed == 1);
    assert_eq!(read(&out).1.len(), 2, "the two requests before it went");
}

#[test]
fn a_large_block_goes_in_continuation_frames_and_trailers_follow_their_stream() {
    let r = Arc::new(Rules::from_toml_str("[[filter]]\nname = \"pay\"\npath = \"/pay/**\"\n[[header]]\nname = \"x-big\"\nset = \"PLACEHOLDER\"\n").unwrap().into_big());
    let mut enc = fluke_hpack::Encoder::new();
    let mut input = PREFACE.to_vec();
    for (id, path) in [(1u32, &b"/a"[..]), (3, b"/pay/1")] {
        let b = enc.encode(vec![
            (&b":method"[..], &b"POST"[..]),
            (b":path", path),
            (b":scheme", b"http"),
        ]);
        frame(&mut input, 1, END_HEADERS, id, &b);
    }
    for id in [1u32, 3] {
        frame(&mut input, 0, 0, id, b"data");
        let t = enc.encode(vec![(&b"grpc-status"[..], &b"0"[..])]);
        frame(&mut input, 1, END_STREAM | END_HEADERS, id, &t);
    }
    let (out, e) = run(&r, &input, 17);
    let (frames, blocks) = read(&out);
    let kinds: Vec<(Kind, u32)> = frames.iter().map(|(h, _)| (h.kind, h.stream)).collect();
    assert_eq!(
        kinds[..3],
        [
            (Kind::Headers, 1),
            (Kind::Continuation, 1),
            (Kind::Continuation, 1)
        ]
    );
    assert_eq!(kinds[3..], [(Kind::Data, 1), (Kind::Headers, 1)]);
    assert_eq!(get(&blocks[0].1, "x-big")[0].len(), 40000);
    assert_eq!(
        blocks[1],
        (1, vec![(b"grpc-status".to_vec(), b"0".to_vec())]),
        "trailers: no dye, no edit"
    );
    assert_eq!((e.counts.http_requests, e.counts.dropped), (2, 1));
}

impl Rules {
    /// These rules with every `PLACEHOLDER` value 40000 bytes long (more than two frames).
    fn into_big(self) -> Rules {
        let t =
            "[[filter]]\nname = \"pay\"\npath = \"/pay/**\"\n[[header]]\nname = \"x-big\"\nset = \""
                .to_string()
                + &"v".repeat(40000) + "\"\n";
        drop(self);
        Rules::from_toml_str(&t).unwrap()
    }
}

#[test]
fn h2c_after_a_copied_upgrade_is_edited_and_a_refused_upgrade_stays_http1() {
    let r = Arc::new(Rules::from_toml_str(RULES).unwrap());
    let up = b"GET /v1/x HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n";
    let mut input = up.to_vec();
    input.extend(client(&[("/v1/q", b""), ("/pay/z", b"")], false));
    let (out, e) = run(&r, &input, 11);
    let at = out
        .windows(PREFACE.len())
        .position(|w| w == PREFACE)
        .expect("the preface after the upgrade request");
    assert!(out.starts_with(b"GET /v2/x HTTP/1.1\r\n"));
    let (_, blocks) = read(&out[at..]);
    assert_eq!(blocks.len(), 1);
    assert_eq!(get(&blocks[0].1, ":path"), [&b"/v2/q"[..]]);
    assert_eq!((e.counts.http_requests, e.counts.dropped), (3, 1));
    // Refused (no 101): the next request is HTTP/1.1 and is still filtered.
    let mut input = up.to_vec();
    input.extend_from_slice(b"GET /pay/1 HTTP/1.1\r\n\r\nGET /c HTTP/1.1\r\n\r\n");
    let (out, e) = run(&r, &input, 11);
    assert!(
        out.ends_with(
            b"\r\n\r\nGET /c HTTP/1.1\r\nX-Traffic-Copy: copy1\r\nHost: test.lab\r\n\r\n"
        ),
        "{}",
        String::from_utf8_lossy(&out)
    );
    assert_eq!(e.counts.dropped, 1);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]
    /// Any mix of requests, cut anywhere: the blocks that go decode in order with a fresh
    /// decoder, and exactly the requests not denied arrive, in order.
    #[test]
    fn any_requests_cut_anywhere_decode_consistently(
        pays in proptest::collection::vec(proptest::bool::ANY, 1..30),
        split in proptest::bool::ANY,
        cut in 1usize..300,
    ) {
        let r = Arc::new(Rules::from_toml_str(RULES).unwrap());
        let paths: Vec<String> = pays.iter().enumerate().map(|(i, &p)| if p { format!("/pay/{i}") } else { format!("/v1/{i}") }).collect();
        let reqs: Vec<(&str, &[u8])> = paths.iter().map(|p| (p.as_str(), &b""[..])).collect();
        let (out, _) = run(&r, &client(&reqs, split), cut);
        let (_, blocks) = read(&out);
        let want: Vec<Vec<u8>> = paths.iter().filter(|p| !p.starts_with("/pay")).map(|p| p.replace("/v1/", "/v2/").into_bytes()).collect();
        let got: Vec<Vec<u8>> = blocks.iter().map(|b| get(&b.1, ":path")[0].to_vec()).collect();
        proptest::prop_assert_eq!(got, want);
    }
}
