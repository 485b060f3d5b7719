//! Byte-level tests of the HTTP/2 reader, and the frame builders the flows tests use.

use super::*;

/// A frame: header and payload.
pub(crate) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len() as u32;
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HEADERS with END_HEADERS (and END_STREAM when `end`), encoded by `enc`.
pub(crate) fn headers(
    enc: &mut fluke_hpack::Encoder<'static>,
    stream: u32,
    end: bool,
    list: &[(&str, &str)],
) -> Vec<u8> {
    let block = enc.encode(list.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
    frame(
        1,
        END_HEADERS | if end { END_STREAM } else { 0 },
        stream,
        &block,
    )
}

/// DATA (END_STREAM when `end`).
pub(crate) fn data(stream: u32, end: bool, body: &[u8]) -> Vec<u8> {
    frame(0, if end { END_STREAM } else { 0 }, stream, body)
}

/// Reads all whole frames of `bytes` in pieces of `piece` bytes (the way the flows feed it).
fn read_all(r: &mut Reader, bytes: &[u8], piece: usize) -> Result<Vec<(u32, Message)>, H2Error> {
    let now = Instant::now();
    let (mut buf, mut out) = (Vec::new(), Vec::new());
    for p in bytes.chunks(piece) {
        buf.extend_from_slice(p);
        loop {
            let n = r.read(&buf, now)?;
            if n == 0 {
                break;
            }
            buf.drain(..n);
            out.extend(r.take_done());
        }
    }
    Ok(out)
}

#[test]
fn answers_of_interleaved_streams_with_trailers() {
    let mut enc = fluke_hpack::Encoder::new();
    let mut b = Vec::new();
    b.extend(frame(4, 0, 0, &[])); // SETTINGS
    b.extend(headers(
        &mut enc,
        3,
        false,
        &[(":status", "200"), ("content-type", "application/grpc")],
    ));
    b.extend(headers(
        &mut enc,
        1,
        false,
        &[(":status", "404"), ("content-type", "text/plain")],
    ));
    b.extend(data(3, false, b"\0\0\0\0\x02hi"));
    b.extend(data(1, true, b"gone"));
    b.extend(headers(
        &mut enc,
        3,
        true,
        &[("grpc-status", "5"), ("grpc-message", "not found")],
    ));
    for piece in [1, 7, 4096] {
        let mut r = Reader::new(1 << 20);
        let got = read_all(&mut r, &b, piece).unwrap();
        assert_eq!(
            got.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            vec![1, 3],
            "piece {piece}"
        );
        let one = String::from_utf8(answer_as_http1(&got[0].1)).unwrap();
        assert_eq!(
            one,
            "HTTP/1.1 404 \r\ncontent-type: text/plain\r\ncontent-length: 4\r\n\r\ngone"
        );
        let three = &got[1].1;
        assert_eq!(three.get("grpc-status"), Some(&b"5"[..]));
        assert_eq!(three.body, b"\0\0\0\0\x02hi");
        let a = crate::http::parse_answer(
            &answer_as_http1(three),
            false,
            crate::http::Limits::default(),
        )
        .unwrap();
        assert_eq!(
            (
                a.status,
                a.header("grpc-status").as_deref(),
                a.header("grpc-message").as_deref()
            ),
            (200, Some("5"), Some("not found"))
        );
        assert_eq!(r.bytes(), 0, "nothing held once every stream ended");
        assert_eq!(r.open(), 0);
    }
}

#[test]
fn request_with_continuation_padding_and_priority() {
    let mut enc = fluke_hpack::Encoder::new();
    let block = enc.encode([
        (&b":method"[..], &b"POST"[..]),
        (b":path", b"/lab.Lab/Unary?x=1"),
        (b":authority", b"svc"),
        (b":scheme", b"http"),
        (b"te", b"trailers"),
        (b"x-id", b"7"),
    ]);
    let (a, c) = block.split_at(5);
    // HEADERS with PADDED and PRIORITY, then a CONTINUATION with END_HEADERS
    let mut p = vec![3u8];
    p.extend_from_slice(&[0, 0, 0, 0, 16]);
    p.extend_from_slice(a);
    p.extend_from_slice(&[0, 0, 0]);
    let mut b = frame(1, PADDED | PRIORITY, 5, &p);
    b.extend(frame(9, END_HEADERS, 5, c));
    b.extend(frame(0, PADDED | END_STREAM, 5, &[2, b'a', b'b', 0, 0]));
    let mut r = Reader::new(1 << 20);
    let got = read_all(&mut r, &b, 3).unwrap();
    assert_eq!(got.len(), 1);
    let text = String::from_utf8(request_as_http1(&got[0].1)).unwrap();
    assert_eq!(
        text,
        "POST /lab.Lab/Unary?x=1 HTTP/1.1\r\nhost: svc\r\nx-id: 7\r\ncontent-length: 2\r\n\r\nab"
    );
    let h = crate::http::parse_request_head(text.as_bytes()).unwrap();
    assert_eq!(
        (h.method.as_str(), h.target.as_str()),
        ("POST", "/lab.Lab/Unary?x=1")
    );
}

#[test]
fn interim_headers_are_replaced_and_reset_ends_a_stream() {
    let mut enc = fluke_hpack::Encoder::new();
    let mut b = headers(&mut enc, 1, false, &[(":status", "100")]);
    b.extend(headers(&mut enc, 1, false, &[(":status", "201")]));
    b.extend(data(1, false, b"par"));
    b.extend(frame(3, 0, 1, &8u32.to_be_bytes())); // RST_STREAM CANCEL
    b.extend(frame(3, 0, 9, &8u32.to_be_bytes())); // on a stream never opened here: nothing
    let mut r = Reader::new(2);
    let got = read_all(&mut r, &b, 64).unwrap();
    assert_eq!(got.len(), 1);
    let m = &got[0].1;
    assert_eq!(
        (m.reset, m.body.as_slice(), m.body_len),
        (Some(8), &b"pa"[..], 3)
    );
    assert_eq!(
        String::from_utf8(answer_as_http1(m)).unwrap(),
        "HTTP/1.1 201 \r\nx-h2-reset: 8\r\ncontent-length: 3\r\n\r\npa"
    );
}

#[test]
fn a_missing_header_block_breaks_the_table() {
    // the encoder indexes what it sends: a reader that misses the first block cannot decode the
    // second (an indexed field past its table), which must be an error, never wrong headers
    let mut enc = fluke_hpack::Encoder::new();
    let first = headers(&mut enc, 1, true, &[(":status", "200"), ("x-custom", "a")]);
    let second = headers(&mut enc, 3, true, &[(":status", "200"), ("x-custom", "a")]);
    let mut whole = Reader::new(64);
    assert_eq!(
        read_all(&mut whole, &[first.clone(), second.clone()].concat(), 64)
            .unwrap()
            .len(),
        2
    );
    let mut r = Reader::new(64);
    assert_eq!(read_all(&mut r, &second, 64), Err(H2Error::Hpack));
}

#[test]
fn framing_errors_and_bounds() {
    let mut enc = fluke_hpack::Encoder::new();
    let now = Instant::now();
    // CONTINUATION with no block before it
    assert_eq!(
        Reader::new(8).read(&frame(9, END_HEADERS, 1, b""), now),
        Err(H2Error::Frame)
    );
    // a block cut by a DATA frame
    let mut r = Reader::new(8);
    let open = frame(1, 0, 1, &enc.encode([(&b":status"[..], &b"200"[..])]));
    assert_eq!(r.read(&open, now), Ok(open.len()));
    assert_eq!(r.read(&data(1, true, b"x"), now), Err(H2Error::Frame));
    // padding longer than the frame
    assert_eq!(
        Reader::new(8).read(&frame(0, PADDED, 1, &[9, 1, 2]), now),
        Err(H2Error::Frame)
    );
    // a frame not whole yet takes nothing
    let d = data(1, false, b"abcdef");
    assert_eq!(Reader::new(8).read(&d[..d.len() - 1], now), Ok(0));
    // streams past the bound
    let mut r = Reader::new(8);
    for s in 0..MAX_STREAMS as u32 {
        assert!(r.read(&data(2 * s + 1, false, b"x"), now).is_ok());
    }
    assert_eq!(r.read(&data(99_999, false, b"x"), now), Err(H2Error::Bound));
    assert_eq!(r.bytes(), MAX_STREAMS);
}
