//! HTTP/2 framing (RFC 9113 section 4): the client connection preface and the 9-byte frame
//! header, as pure functions and one incremental cutter over a byte stream; a HEADERS payload's
//! fragment and a header block written back as frames (the HPACK inside is `common::hpack`). No
//! socket, no clock: the copier's engine uses it to recognise an HTTP/2 session and to cut
//! its client bytes at frame boundaries; the comparison and the request editor can read frames
//! with the same code.
//!
//! Every frame header is valid on the wire as far as framing goes (any 24-bit length, any type
//! byte: unknown types are ignored by peers, RFC 9113 section 4.1), so the cutter never fails;
//! whether a length exceeds the peer's `SETTINGS_MAX_FRAME_SIZE` is the peer's business.
//!
//! Invariants of [`Framer`]: `have < 9` bytes of a header are kept while `left == 0`; while
//! `left > 0` the cutter is inside a frame's payload and `have == 0`.

/// The client connection preface: the first 24 bytes a client sends on an HTTP/2 connection
/// (prior knowledge, or after the `101 Switching Protocols` of an `Upgrade: h2c`).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Length of a frame header.
pub const HEADER_LEN: usize = 9;

/// The frame types of RFC 9113 section 6 (others are carried as `Other`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// DATA (type 0): a piece of a stream's body.
    Data,
    /// HEADERS (type 1): opens a stream; carries the start of a header block.
    Headers,
    /// PRIORITY (type 2): a stream's priority (deprecated by RFC 9113).
    Priority,
    /// RST_STREAM (type 3): ends one stream at once, with an error code.
    RstStream,
    /// SETTINGS (type 4): the connection's parameters, or their acknowledgement.
    Settings,
    /// PUSH_PROMISE (type 5): a server announces a stream it will push.
    PushPromise,
    /// PING (type 6): a liveness probe and its echo.
    Ping,
    /// GOAWAY (type 7): the sender takes no more streams above a given id.
    GoAway,
    /// WINDOW_UPDATE (type 8): flow-control credit for a stream or the connection.
    WindowUpdate,
    /// CONTINUATION (type 9): the rest of a header block that did not fit one frame.
    Continuation,
    /// A type this module does not know (extensions; ignored by peers).
    Other(u8),
}

impl Kind {
    /// The kind of a frame header's type byte.
    pub fn of(b: u8) -> Kind {
        match b {
            0 => Kind::Data,
            1 => Kind::Headers,
            2 => Kind::Priority,
            3 => Kind::RstStream,
            4 => Kind::Settings,
            5 => Kind::PushPromise,
            6 => Kind::Ping,
            7 => Kind::GoAway,
            8 => Kind::WindowUpdate,
            9 => Kind::Continuation,
            x => Kind::Other(x),
        }
    }
}

/// Flag END_STREAM (DATA, HEADERS).
pub const END_STREAM: u8 = 0x1;
/// Flag END_HEADERS (HEADERS, PUSH_PROMISE, CONTINUATION).
pub const END_HEADERS: u8 = 0x4;
/// Flag PADDED (DATA, HEADERS, PUSH_PROMISE).
pub const PADDED: u8 = 0x8;
/// Flag PRIORITY (HEADERS): the payload starts with 5 bytes of priority.
pub const PRIORITY: u8 = 0x20;
/// The largest frame payload every peer accepts (`SETTINGS_MAX_FRAME_SIZE` is never lower).
pub const MIN_MAX_FRAME: usize = 16384;

/// A HEADERS frame's payload split: the priority fields (with the PRIORITY flag) and the
/// header block fragment, without padding. `None` when the padding or priority does not fit
/// (a PROTOCOL_ERROR for the peer).
pub fn headers_fragment(flags: u8, payload: &[u8]) -> Option<(Option<[u8; 5]>, &[u8])> {
    let mut p = payload;
    let mut pad = 0;
    if flags & PADDED != 0 {
        let (&n, rest) = p.split_first()?;
        pad = usize::from(n);
        p = rest;
    }
    let prio = if flags & PRIORITY != 0 {
        let (pr, rest) = p.split_at_checked(5)?;
        p = rest;
        Some(<[u8; 5]>::try_from(pr).ok()?)
    } else {
        None
    };
    let end = p.len().checked_sub(pad)?;
    Some((prio, &p[..end]))
}

/// Append a frame header to `out`.
pub fn write_frame_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
}

/// Append a header block as a HEADERS frame and as many CONTINUATION frames as it needs, each
/// payload at most `max_frame` bytes (at least [`MIN_MAX_FRAME`] is always safe). `flags` keeps
/// END_STREAM and PRIORITY (with `prio`, which then leads the first payload); PADDED is not
/// written; END_HEADERS goes on the last frame.
pub fn write_header_block(
    out: &mut Vec<u8>,
    stream: u32,
    flags: u8,
    prio: Option<[u8; 5]>,
    block: &[u8],
    max_frame: usize,
) {
    let max = max_frame.max(6);
    let prio = prio.filter(|_| flags & PRIORITY != 0);
    let first_room = max - prio.map_or(0, |p| p.len());
    let (first, mut rest) = block.split_at(block.len().min(first_room));
    let keep = flags & (END_STREAM | PRIORITY) & if prio.is_some() { 0xff } else { !PRIORITY };
    let end = if rest.is_empty() { END_HEADERS } else { 0 };
    write_frame_header(
        out,
        first.len() + prio.map_or(0, |p| p.len()),
        1,
        keep | end,
        stream,
    );
    if let Some(p) = prio {
        out.extend_from_slice(&p);
    }
    out.extend_from_slice(first);
    while !rest.is_empty() {
        let (part, r) = rest.split_at(rest.len().min(max));
        rest = r;
        write_frame_header(
            out,
            part.len(),
            9,
            if rest.is_empty() { END_HEADERS } else { 0 },
            stream,
        );
        out.extend_from_slice(part);
    }
}

/// A frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload length (24 bits).
    pub len: u32,
    /// Frame type: how the payload is to be read.
    pub kind: Kind,
    /// Flag bits (meaning per type: [`END_STREAM`], [`END_HEADERS`], ...).
    pub flags: u8,
    /// Stream identifier (31 bits; the reserved bit is cleared). 0 for connection frames.
    pub stream: u32,
}

impl FrameHeader {
    /// The header in the first 9 bytes of `b`, if there are 9.
    pub fn parse(b: &[u8]) -> Option<FrameHeader> {
        let h: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        Some(FrameHeader {
            len: u32::from_be_bytes([0, h[0], h[1], h[2]]),
            kind: Kind::of(h[3]),
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        })
    }

    /// A connection frame (stream 0: SETTINGS, PING, GOAWAY, connection WINDOW_UPDATE).
    pub fn is_connection(&self) -> bool {
        self.stream == 0
    }

    /// The frame that opens a client stream: HEADERS on a stream other than 0.
    pub fn opens_stream(&self) -> bool {
        self.kind == Kind::Headers && self.stream != 0
    }

    /// The client's last frame on its stream (END_STREAM on DATA or HEADERS).
    pub fn ends_stream(&self) -> bool {
        matches!(self.kind, Kind::Data | Kind::Headers) && self.flags & END_STREAM != 0
    }
}

/// Matching the connection preface against bytes that arrive in pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preface {
    /// Nothing read yet.
    #[default]
    Start,
    /// This many bytes of the preface matched so far.
    Partial(u8),
    /// All 24 bytes matched.
    Seen,
    /// The bytes are not the preface.
    No,
}

impl Preface {
    /// Match the next bytes. Returns the new state and how many bytes of `b` the preface took
    /// (the rest are frames, once `Seen`).
    pub fn feed(self, b: &[u8]) -> (Preface, usize) {
        let have = match self {
            Preface::Start => 0,
            Preface::Partial(n) => n as usize,
            done => return (done, 0),
        };
        let want = &PREFACE[have..];
        let n = want.len().min(b.len());
        if b[..n] != want[..n] {
            return (Preface::No, 0);
        }
        if have + n == PREFACE.len() {
            (Preface::Seen, n)
        } else {
            (Preface::Partial((have + n) as u8), n)
        }
    }
}

/// What [`Framer::feed`] found in one piece of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fed {
    /// Offset in the piece of the first frame header that starts in it, if one does.
    pub first_start: Option<usize>,
    /// Frames whose header completed in the piece.
    pub frames: u32,
    /// Of those, HEADERS frames that open a stream (requests).
    pub streams: u32,
}

/// Cuts a byte stream of frames (after the preface) at frame boundaries, whatever pieces it
/// arrives in.
#[derive(Debug, Clone, Default)]
pub struct Framer {
    /// Bytes of the current frame's header seen (when `left == 0`).
    head: [u8; HEADER_LEN],
    have: usize,
    /// Payload bytes of the current frame still to come.
    left: u32,
    /// Frames whose header was read.
    pub frames: u64,
}

impl Framer {
    /// Whether the next byte starts a frame header.
    pub fn at_start(&self) -> bool {
        self.left == 0 && self.have == 0
    }

    /// Read the next piece of the stream.
    pub fn feed(&mut self, mut b: &[u8]) -> Fed {
        let mut fed = Fed::default();
        let mut off = 0;
        while !b.is_empty() {
            if self.left > 0 {
                let n = (self.left as usize).min(b.len());
                self.left -= n as u32;
                b = &b[n..];
                off += n;
                continue;
            }
            if self.have == 0 && fed.first_start.is_none() {
                fed.first_start = Some(off);
            }
            let n = (HEADER_LEN - self.have).min(b.len());
            self.head[self.have..self.have + n].copy_from_slice(&b[..n]);
            self.have += n;
            b = &b[n..];
            off += n;
            if self.have == HEADER_LEN {
                self.have = 0;
                let h = FrameHeader::parse(&self.head).unwrap_or(FrameHeader {
                    len: 0,
                    kind: Kind::Other(0xff),
                    flags: 0,
                    stream: 0,
                });
                self.left = h.len;
                self.frames += 1;
                fed.frames += 1;
                if h.opens_stream() {
                    fed.streams += 1;
                }
            }
        }
        fed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: u32, kind: u8, flags: u8, stream: u32) -> Vec<u8> {
        let mut v = len.to_be_bytes()[1..].to_vec();
        v.extend([kind, flags]);
        v.extend(stream.to_be_bytes());
        v.extend(std::iter::repeat_n(0xabu8, len as usize));
        v
    }

    #[test]
    fn header_parses_and_clears_the_reserved_bit() {
        let b = [0, 0x01, 0x02, 1, 0x05, 0x80, 0, 0, 3];
        let h = FrameHeader::parse(&b).unwrap();
        assert_eq!(
            h,
            FrameHeader {
                len: 258,
                kind: Kind::Headers,
                flags: 5,
                stream: 3
            }
        );
        assert!(h.opens_stream() && h.ends_stream() && !h.is_connection());
        assert_eq!(FrameHeader::parse(&b[..8]), None);
        assert_eq!(Kind::of(0x42), Kind::Other(0x42));
        // The largest length a header can carry.
        let h = FrameHeader::parse(&[0xff, 0xff, 0xff, 4, 0, 0, 0, 0, 0]).unwrap();
        assert_eq!(
            (h.len, h.kind, h.is_connection()),
            (0xff_ffff, Kind::Settings, true)
        );
    }

    #[test]
    fn preface_in_pieces() {
        let (p, n) = Preface::Start.feed(&PREFACE[..5]);
        assert_eq!((p, n), (Preface::Partial(5), 5));
        let mut rest = PREFACE[5..].to_vec();
        rest.extend(frame(0, 4, 0, 0));
        let (p, n) = p.feed(&rest);
        assert_eq!((p, n), (Preface::Seen, 19));
        assert_eq!(Preface::Start.feed(b"GET / HTTP/1.1\r\n").0, Preface::No);
        assert_eq!(Preface::Partial(3).feed(b"X").0, Preface::No);
        assert_eq!(Preface::Seen.feed(b"anything"), (Preface::Seen, 0));
    }

    #[test]
    fn framer_finds_starts_across_any_cut() {
        let mut s = frame(6, 4, 0, 0); // SETTINGS
        s.extend(frame(12, 1, 5, 1)); // HEADERS stream 1, END_STREAM|END_HEADERS
        s.extend(frame(0, 4, 1, 0)); // SETTINGS ack
        s.extend(frame(20, 0, 1, 3)); // DATA on 3 (no HEADERS seen: not counted as opening)
        s.extend(frame(3, 1, 4, 5)); // HEADERS stream 5
        let starts = [0usize, 15, 36, 45, 74];
        for cut in 1..s.len() {
            let mut f = Framer::default();
            let (a, b) = s.split_at(cut);
            let fa = f.feed(a);
            let fb = f.feed(b);
            assert_eq!(fa.frames + fb.frames, 5, "cut {cut}");
            assert_eq!(fa.streams + fb.streams, 2, "cut {cut}");
            assert_eq!(fa.first_start, Some(0));
            let want = starts.iter().find(|&&x| x >= cut).map(|x| x - cut);
            assert_eq!(fb.first_start, want, "cut {cut}");
            assert!(f.at_start());
        }
        // Byte by byte.
        let mut f = Framer::default();
        let n: u32 = s.chunks(1).map(|c| f.feed(c).frames).sum();
        assert_eq!((n, f.frames), (5, 5));
    }

    #[test]
    fn headers_payload_without_padding_and_back_in_frames() {
        // PADDED|PRIORITY: pad length 2, 5 priority bytes, fragment "abc", 2 bytes of padding.
        let p = [2, 0x80, 0, 0, 1, 15, b'a', b'b', b'c', 0, 0];
        assert_eq!(
            headers_fragment(PADDED | PRIORITY, &p),
            Some((Some([0x80, 0, 0, 1, 15]), &b"abc"[..]))
        );
        assert_eq!(headers_fragment(0, b"abc"), Some((None, &b"abc"[..])));
        assert_eq!(
            headers_fragment(PADDED, &[5, 1, 2]),
            None,
            "padding longer than the payload"
        );
        assert_eq!(headers_fragment(PRIORITY, &[1, 2, 3]), None);
        assert_eq!(headers_fragment(PADDED, &[]), None);
        // A block of 40 bytes in frames of at most 16: HEADERS (5 + 11), CONTINUATION 16, 13.
        let block: Vec<u8> = (0..40).collect();
        let mut out = Vec::new();
        write_header_block(
            &mut out,
            7,
            END_STREAM | PRIORITY | PADDED,
            Some([0, 0, 0, 3, 200]),
            &block,
            16,
        );
        let mut at = 0;
        let mut frames = Vec::new();
        let mut joined = Vec::new();
        while let Some(h) = FrameHeader::parse(&out[at..]) {
            let pl = &out[at + HEADER_LEN..at + HEADER_LEN + h.len as usize];
            frames.push((h.kind, h.flags, h.len, h.stream));
            joined.extend_from_slice(if h.kind == Kind::Headers {
                headers_fragment(h.flags, pl).unwrap().1
            } else {
                pl
            });
            at += HEADER_LEN + h.len as usize;
        }
        assert_eq!(at, out.len());
        assert_eq!(
            frames,
            [
                (Kind::Headers, END_STREAM | PRIORITY, 16, 7),
                (Kind::Continuation, 0, 16, 7),
                (Kind::Continuation, END_HEADERS, 13, 7)
            ]
        );
        assert_eq!(joined, block);
        // A small block fits one frame.
        let mut out = Vec::new();
        write_header_block(&mut out, 1, END_STREAM, None, b"xy", MIN_MAX_FRAME);
        assert_eq!(
            out,
            [0, 0, 2, 1, END_STREAM | END_HEADERS, 0, 0, 0, 1, b'x', b'y']
        );
    }

    #[test]
    fn truncated_frame_leaves_the_framer_inside_it() {
        let s = frame(100, 0, 0, 1);
        let mut f = Framer::default();
        let fed = f.feed(&s[..50]);
        assert_eq!((fed.frames, fed.first_start), (1, Some(0)));
        assert!(!f.at_start());
        let fed = f.feed(&s[50..]);
        assert_eq!((fed.frames, fed.first_start), (0, None));
        assert!(f.at_start());
    }
}
