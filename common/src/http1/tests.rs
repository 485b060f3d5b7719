use super::*;
use proptest::prelude::*;

const REQ: Message = Message::Request;

fn ans(status: u16) -> Message {
    Message::Answer {
        status,
        to_head: false,
    }
}

fn hs<'a>(list: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = (&'a str, &'a [u8])> {
    list.iter().map(|(n, v)| (*n, v.as_bytes()))
}

#[test]
fn lengths_and_codings_from_a_head() {
    for mode in [Mode::Relay, Mode::Capture] {
        let b = |l: &[(&str, &str)], m| body(hs(l), m, mode);
        assert_eq!(b(&[("Host", "a")], REQ), Ok(Body::None));
        assert_eq!(b(&[("Host", "a")], ans(200)), Ok(Body::UntilClose));
        assert_eq!(b(&[("content-length", " 5 ")], REQ), Ok(Body::Length(5)));
        assert_eq!(
            b(&[("Content-Length", "3"), ("Content-Length", "3")], REQ),
            Ok(Body::Length(3))
        );
        assert_eq!(
            b(
                &[("Content-Length", "1"), ("Content-Length", "2")],
                ans(200)
            ),
            Err(FramingError::ContentLengths)
        );
        assert_eq!(
            b(&[("Content-Length", "x")], REQ),
            Err(FramingError::ContentLength)
        );
        assert_eq!(
            b(&[("Transfer-Encoding", "gzip, Chunked")], REQ),
            Ok(Body::Chunked)
        );
        // chunked wins over a length
        assert_eq!(
            b(
                &[("Content-Length", "9"), ("Transfer-Encoding", "chunked")],
                ans(200)
            ),
            Ok(Body::Chunked)
        );
        // answers without a body, whatever their headers say
        for s in [100, 101, 103, 204, 304] {
            assert_eq!(b(&[("Content-Length", "x")], ans(s)), Ok(Body::None), "{s}");
        }
        let to_head = Message::Answer {
            status: 200,
            to_head: true,
        };
        assert_eq!(b(&[("Content-Length", "9")], to_head), Ok(Body::None));
    }
    assert!(interim(100) && interim(103) && !interim(101) && !interim(200));
}

#[test]
fn relaying_reads_framing_headers_strictly_capture_leniently() {
    let both = |l: &[(&str, &str)]| {
        (
            body(hs(l), REQ, Mode::Relay),
            body(hs(l), REQ, Mode::Capture),
        )
    };
    // A transfer coding other than chunked last: no end to find when relaying.
    assert_eq!(
        both(&[("Transfer-Encoding", "chunked, gzip")]),
        (Err(FramingError::TransferCoding), Ok(Body::Chunked))
    );
    assert_eq!(
        both(&[("Transfer-Encoding", "gzip")]),
        (Err(FramingError::TransferCoding), Ok(Body::None))
    );
    // Above 2^63-1 is malformed when relaying (a byte counter would read u64::MAX as "the
    // rest of the stream"); 2^63-1 is still a length.
    assert_eq!(
        both(&[("Content-Length", "18446744073709551615")]),
        (Err(FramingError::ContentLength), Ok(Body::Length(u64::MAX)))
    );
    assert_eq!(
        both(&[("Content-Length", "9223372036854775807")]).0,
        Ok(Body::Length(i64::MAX as u64))
    );
    // A list of equal lengths.
    assert_eq!(
        both(&[("Content-Length", "5, 5")]),
        (Err(FramingError::ContentLength), Ok(Body::Length(5)))
    );
    // A bad length beside a chunked coding.
    assert_eq!(
        both(&[("Transfer-Encoding", "chunked"), ("Content-Length", "x")]),
        (Err(FramingError::ContentLength), Ok(Body::Chunked))
    );
}

/// Feeds `b` whole; (data, fed or the error's offset, last chunk seen).
fn walk(b: &[u8], mode: Mode) -> (Vec<u8>, Result<Fed, u64>, bool) {
    walk_cut(b, mode, &[b.len()])
}

/// Feeds `b` in pieces ending at `cuts` (then the rest), as a streaming reader would: a piece
/// starts where the walker stopped reading.
fn walk_cut(b: &[u8], mode: Mode, cuts: &[usize]) -> (Vec<u8>, Result<Fed, u64>, bool) {
    let mut w = Chunks::new(mode);
    let mut out = Vec::new();
    let mut at = 0;
    let ends = cuts.iter().copied().filter(|&c| c <= b.len());
    for end in ends.chain([b.len()]) {
        if end < at {
            continue;
        }
        match w.feed(&b[at..end], |d| {
            out.extend_from_slice(d);
            true
        }) {
            Err(e) => return (out, Err(e.at), w.last_chunk()),
            Ok(f) => {
                at += f.used;
                if f.done {
                    break;
                }
            }
        }
    }
    (
        out,
        Ok(Fed {
            used: at,
            done: w.done(),
        }),
        w.last_chunk(),
    )
}

#[test]
fn a_chunked_body_whole_cut_and_bad() {
    let body = b"5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nT: 1\r\n\r\nNEXT";
    for mode in [Mode::Relay, Mode::Capture] {
        let (data, fed, last) = walk(body, mode);
        assert_eq!(data, b"hello world");
        assert_eq!(
            fed,
            Ok(Fed {
                used: body.len() - 4,
                done: true
            })
        );
        assert!(last);
        // cut inside the data: what there is, not done
        let (data, fed, last) = walk(&body[..19], mode);
        assert_eq!(
            (&data[..], fed.map(|f| f.done), last),
            (&b"hello w"[..], Ok(false), false)
        );
        // cut inside the trailers: the data is whole, the body not yet
        let (_, fed, last) = walk(&body[..body.len() - 6], mode);
        assert_eq!((fed.map(|f| f.done), last), (Ok(false), true));
        // a size that is not hexadecimal, at body offset 0
        assert_eq!(walk(b"zz\r\n", mode).1, Err(0));
        assert_eq!(walk(b"3\r\nabc\r\nzz\r\n", mode).1, Err(8));
    }
    assert_eq!(
        chunked_len(b"3\r\nabc\r\n0\r\nX-T: 1\r\n\r\nHTTP", Mode::Capture),
        Ok(Some(21))
    );
    assert_eq!(chunked_len(b"3\r\nabc\r\n0\r\n", Mode::Capture), Ok(None));
    assert_eq!(
        dechunk(b"5\r\nhello\r\n6\r\n wo", 100, Mode::Capture),
        Ok((b"hello wo".to_vec(), false))
    );
    assert_eq!(
        dechunk(b"5\r\nhello\r\n0\r\n", 100, Mode::Capture),
        Ok((b"hello".to_vec(), true)),
        "the data is whole without the trailers"
    );
    assert_eq!(
        dechunk(b"5\r\nhello\r\n0\r\n\r\n", 3, Mode::Capture),
        Ok((b"hel".to_vec(), false)),
        "cut by the limit"
    );
}

#[test]
fn relaying_and_capture_differ_on_malformed_bodies_only() {
    // No CRLF after a chunk's data: checked in capture, skipped unread when relaying.
    let b = b"1\r\nabc0\r\n\r\n";
    assert_eq!(walk(b, Mode::Capture).1, Err(4));
    assert_eq!(
        walk(b"1\r\naXY0\r\n\r\n", Mode::Relay).1,
        Ok(Fed {
            used: 11,
            done: true
        })
    );
    // ...but only once both bytes are there.
    assert_eq!(walk(b"1\r\naX", Mode::Capture).1.map(|f| f.done), Ok(false));
    // A chunk-size line longer than MAX_LINE (a long extension) when relaying.
    let mut long = b"1;".to_vec();
    long.resize(MAX_LINE + 10, b'e');
    long.extend_from_slice(b"\r\na\r\n0\r\n\r\n");
    assert_eq!(walk(&long, Mode::Relay).1, Err(0));
    assert_eq!(walk(&long, Mode::Capture).1.map(|f| f.done), Ok(true));
    // An LF inside an extension: the line ends there when relaying, httparse reads on in
    // capture.
    let lf = b"1;a\nb\r\nx\r\n0\r\n\r\n";
    assert_eq!(walk(lf, Mode::Relay).1, Err(0));
    assert_eq!(walk(lf, Mode::Capture).0, b"x");
    // Trailer lines ended by a bare LF when relaying only.
    let t = b"0\r\nT: 1\n\n";
    assert_eq!(walk(t, Mode::Relay).1.map(|f| f.done), Ok(true));
    assert_eq!(walk(t, Mode::Capture).1.map(|f| f.done), Ok(false));
    // A bad size line is known before its end in capture (as httparse sees it).
    assert_eq!(walk(b"zz", Mode::Capture).1, Err(0));
    assert_eq!(walk(b"zz", Mode::Relay).1.map(|f| f.done), Ok(false));
}

#[test]
fn the_walker_says_how_much_it_read_before_a_fault() {
    let mut w = Chunks::new(Mode::Relay);
    assert_eq!(
        w.feed(b"3\r\nabc\r\nq\r\nmore", |_| true),
        Err(ChunkError { at: 8, read: 11 })
    );
    let mut w = Chunks::new(Mode::Relay);
    let e = w.feed(&[b'1'; MAX_LINE + 5], |_| true).unwrap_err();
    assert_eq!((e.at, e.read), (0, MAX_LINE + 1));
    // A stop from the caller ends the read right after that piece of data.
    let mut w = Chunks::new(Mode::Capture);
    let f = w
        .feed(b"2\r\nab\r\n2\r\ncd\r\n0\r\n\r\n", |d| d != b"ab")
        .unwrap();
    assert_eq!((f.used, f.done, w.offset()), (5, false, 5));
}

#[test]
fn message_lengths() {
    use Framing::*;
    let chunked: &[u8] =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\nHTTP";
    // (bytes, a request, an answer to HEAD, the framing)
    let table: &[(&[u8], bool, bool, Framing)] = &[
        (
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /2",
            true,
            false,
            Complete(27),
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET",
            true,
            false,
            Complete(41),
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\na",
            true,
            false,
            Sized { head: 38, body: 3 },
        ),
        (b"GET / HTTP/1.1\r\nHost", true, false, Incomplete),
        (chunked, false, false, Complete(chunked.len() - 4)),
        (&chunked[..chunked.len() - 8], false, false, Incomplete),
        (b"HTTP/1.1 200 OK\r\n\r\nabc", false, false, UntilClose),
        (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No\r\n\r\nx",
            false,
            false,
            Complete(44),
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n",
            false,
            true,
            Complete(38),
        ),
        (
            b"HTTP/1.1 101 Switching\r\nUpgrade: h2c\r\n\r\n\0\0",
            false,
            false,
            Complete(40),
        ),
    ];
    for (i, &(b, req, head, want)) in table.iter().enumerate() {
        for mode in [Mode::Relay, Mode::Capture] {
            assert_eq!(
                message_len(b, req, head, mode),
                Ok(want),
                "row {i} {mode:?}"
            );
        }
    }
    type Row<'a> = (&'a [u8], bool, Mode, fn(&FramingError) -> bool);
    let bad: &[Row<'_>] = &[
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY",
            false,
            Mode::Capture,
            |e| *e == FramingError::Chunk(6),
        ),
        (b"\x00\x01", true, Mode::Capture, |e| {
            matches!(e, FramingError::Head(_))
        }),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            true,
            Mode::Relay,
            |e| *e == FramingError::TransferCoding,
        ),
    ];
    for (i, (b, req, mode, want)) in bad.iter().enumerate() {
        let e = message_len(b, *req, false, *mode).unwrap_err();
        assert!(want(&e), "row {i}: {e:?}");
    }
}

/// A chunked body from chunk sizes, with optional extensions and trailers, and garbage after.
fn chunked_body() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec((1usize..40, any::<bool>()), 0..5),
        any::<bool>(),
        prop::collection::vec(any::<u8>(), 0..8),
    )
        .prop_map(|(sizes, trailer, tail)| {
            let mut b = Vec::new();
            for (i, (n, ext)) in sizes.into_iter().enumerate() {
                b.extend_from_slice(format!("{n:X}").as_bytes());
                if ext {
                    b.extend_from_slice(b";e=1");
                }
                b.extend_from_slice(b"\r\n");
                b.extend(std::iter::repeat_n(b'a' + i as u8, n));
                b.extend_from_slice(b"\r\n");
            }
            b.extend_from_slice(b"0\r\n");
            if trailer {
                b.extend_from_slice(b"T: 1\r\n");
            }
            b.extend_from_slice(b"\r\n");
            b.extend(tail);
            b
        })
}

fn any_mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Relay), Just(Mode::Capture)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    /// However the input is cut, the walker gives the data, the end and the faults of the
    /// whole: on well-formed bodies, and on any bytes at all (a bad byte anywhere).
    #[test]
    fn any_cut_gives_what_the_whole_gives(
        body in chunked_body(),
        noise in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
        cuts in prop::collection::vec(0usize..200, 0..8),
        mode in any_mode(),
    ) {
        let whole = walk(&body, mode);
        prop_assert!(whole.1.is_ok_and(|f| f.done));
        let mut cuts = cuts;
        cuts.sort_unstable();
        prop_assert_eq!(walk_cut(&body, mode, &cuts), whole);
        let mut bad = body.clone();
        for (i, c) in noise {
            let i = i.index(bad.len());
            bad[i] = c;
        }
        prop_assert_eq!(walk_cut(&bad, mode, &cuts), walk(&bad, mode));
    }

    /// Any bytes: never a panic, and the same answer cut or whole.
    #[test]
    fn any_bytes_cut_anywhere(
        bytes in prop::collection::vec(prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'0'), Just(b'1'), Just(b';'), any::<u8>()], 0..64),
        cuts in prop::collection::vec(0usize..64, 0..6),
        mode in any_mode(),
    ) {
        let mut cuts = cuts;
        cuts.sort_unstable();
        prop_assert_eq!(walk_cut(&bytes, mode, &cuts), walk(&bytes, mode));
    }
}
