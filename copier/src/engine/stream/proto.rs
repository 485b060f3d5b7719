//! The protocols a client's stream is read for: the HTTP/2 preface and frames (units cut at
//! frame boundaries only) and the WebSocket opening request (messages after it go unpaced).

use common::h2::{Framer, Preface, PREFACE};
use common::seq::SeqNum;

use super::{Bound, Stream};
use crate::engine::stamp::Stamp;

/// Whether a captured client segment holds a whole WebSocket opening request: it starts with
/// `GET `, its header block ends in it, and a header line says `Upgrade: websocket` (any case,
/// RFC 6455 section 4.1). A client's WebSocket frames never start with `GET ` (0x47 sets RSV1
/// with a reserved opcode), so only HTTP/1 requests match.
pub(crate) fn is_ws_upgrade(b: &[u8]) -> bool {
    let Some(end) = b
        .starts_with(b"GET ")
        .then(|| b.windows(4).position(|w| w == b"\r\n\r\n"))
        .flatten()
    else {
        return false;
    };
    b[..end].split(|&c| c == b'\n').any(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&c| c == b':') else {
            return false;
        };
        line[..colon].eq_ignore_ascii_case(b"upgrade")
            && line[colon + 1..]
                .trim_ascii()
                .eq_ignore_ascii_case(b"websocket")
    })
}

/// Unit starts (the stream's first byte, then each request unit's) at which the HTTP/2
/// preface is looked for: the first for prior knowledge, the next ones for an `Upgrade: h2c`
/// request, after whose `101` answer the client sends the preface as a unit of its own.
pub(super) const SNIFF_UNITS: u8 = 4;

/// An HTTP/2 stream of client bytes (recognised by its preface, [`common::h2`]): request units
/// are cut at frame boundaries only, so that a unit always starts with a frame header. A
/// boundary the client's ACK number asks for inside a frame waits for the next frame's start.
#[derive(Debug, Default)]
pub(crate) struct H2 {
    /// Test-side number of the preface's first byte.
    start: SeqNum,
    /// The online server's first byte (the client's handshake ACK), when the preface opened
    /// the stream (prior knowledge): the online answers' total is then known.
    online_from: Option<SeqNum>,
    pub(super) framer: Framer,
    /// An ACK that grew inside a frame: the next frame's start is a unit boundary.
    pub(super) pending: Option<(SeqNum, Stamp)>,
    /// Streams the client opened (HEADERS frames) and not yet counted by the session.
    pub new_streams: u32,
    /// The session has not yet counted this stream as HTTP/2.
    pub new_session: bool,
    /// Answer bytes the gate counts as sent although the test server did not send them (it
    /// went quiet with less than online: smaller answers, refused streams). See
    /// `Session::h2_limit`.
    pub credit: u32,
    /// What the current test connection had received when it last received more, and when.
    pub rx: u32,
    pub rx_at: Option<Stamp>,
}

impl Stream {
    /// A unit starts at `next`: look for the HTTP/2 preface there (in the first units only).
    pub(super) fn sniff_unit(&mut self) {
        if self.h2.is_none() && self.sniffs_left > 0 {
            self.sniff = Preface::Start;
        }
    }

    /// Read the client bytes `b`, which will be written at `at`: the HTTP/2 preface, then
    /// frames. Pushes the unit boundary an ACK asked for inside a frame at the next frame's
    /// start.
    pub(super) fn read_frames(&mut self, b: &[u8], at: SeqNum) {
        let mut took = 0;
        if matches!(self.sniff, Preface::Start | Preface::Partial(_)) {
            if self.sniff == Preface::Start {
                self.sniffs_left = self.sniffs_left.saturating_sub(1);
            }
            let (p, n) = self.sniff.feed(b);
            self.sniff = p;
            if p != Preface::Seen {
                return;
            }
            took = n;
            // The preface opens the stream (the first unit sniffed): the online server's
            // answers count from its first byte, the handshake's ACK, even when it spoke
            // first (an HTTP/2 server sends its SETTINGS as it accepts: a client slower than
            // that sends its preface acking them, and the greeting is a unit of its own).
            let opens = self.sniffs_left == SNIFF_UNITS - 1;
            self.sniffs_left = 0;
            let start = at.sub(u32::try_from(PREFACE.len() - n).unwrap_or(0));
            let online_from = if opens && self.bounds.iter().all(|b| b.at == start) {
                self.first_ack
            } else {
                None
            };
            self.h2 = Some(Box::new(H2 {
                start,
                online_from,
                new_session: true,
                ..H2::default()
            }));
        }
        let edited = self
            .edit
            .as_ref()
            .is_some_and(|e| e.h2_at_frame_start().is_some());
        let Some(h) = self.h2.as_mut() else { return };
        let fed = h.framer.feed(&b[took..]);
        h.new_streams += fed.streams;
        if edited {
            return; // the boundary goes where the editor's output is at a frame start
        }
        if let (Some(k), Some((ack, t))) = (fed.first_start, h.pending) {
            h.pending = None;
            let at = at.add((took + k) as u32);
            self.push_frame_bound(at, ack, t);
        }
    }

    /// HTTP/2 with rules: the test side's bytes differ from the client's (streams dropped,
    /// header blocks written again), so a boundary an ACK asked for inside a frame goes where
    /// the editor's output next ends at a frame start (the end of a segment's output).
    pub(super) fn h2_edited_bound(&mut self) {
        if self.edit.as_ref().and_then(|e| e.h2_at_frame_start()) != Some(true) {
            return;
        }
        let Some((ack, t)) = self.h2.as_mut().and_then(|h| h.pending.take()) else {
            return;
        };
        self.push_frame_bound(self.next, ack, t);
    }

    /// A unit boundary an ACK (`ack`, seen at `t`) asked for inside a frame, placed at `at`, the
    /// next frame start: kept when it lies after the current unit's start and the last boundary.
    fn push_frame_bound(&mut self, at: SeqNum, ack: SeqNum, t: Stamp) {
        if at.gt(self.cur_start) && self.bounds.back().is_none_or(|x| at.gt(x.at)) {
            self.bounds.push_back(Bound {
                at,
                ack: Some(ack),
                end: Some(ack),
                t: Some(t),
            });
        }
    }

    /// Whether the rules dropped streams of this HTTP/2 connection: the test server will not
    /// send their answers, so its total never reaches the online one.
    pub(crate) fn h2_filtered(&self) -> bool {
        self.edit
            .as_ref()
            .is_some_and(|e| e.h2_streams_dropped() > 0)
    }

    /// Whether the client speaks HTTP/2 on this stream (its preface was seen).
    pub(crate) fn is_h2(&self) -> bool {
        self.h2.is_some()
    }

    /// Whether the first unanswered unit is WebSocket traffic: it starts after a `GET` request
    /// with `Upgrade: websocket` (that request itself waits for its answer, the `101`, as any
    /// other). Its messages go as captured, unpaced: the server speaks without being asked and
    /// a client message answers nothing, so the online answer sizes tell nothing of when the
    /// test server is ready for the next message.
    pub(crate) fn in_ws(&self) -> bool {
        self.ws_from.is_some_and(|w| self.cur_start.ge(w))
    }

    /// Whether the first unanswered unit is HTTP/2 (its preface or after): an `Upgrade: h2c`
    /// request before the preface waits for its answer (the `101`) as any other.
    pub(crate) fn in_h2(&self) -> bool {
        self.h2.as_ref().is_some_and(|h| self.cur_start.ge(h.start))
    }

    /// Bytes the online server sent on an HTTP/2 connection opened with the preface, as far as
    /// the client's ACK numbers tell (`None` after an `Upgrade: h2c`).
    pub(crate) fn h2_online_total(&self) -> Option<u32> {
        self.h2_online_at(self.max_ack?)
    }

    /// Bytes the online server had sent on an HTTP/2 connection opened with the preface when
    /// the client acknowledged `ack`.
    pub(crate) fn h2_online_at(&self, ack: SeqNum) -> Option<u32> {
        let from = self.h2.as_ref()?.online_from?;
        Some(ack.diff(from).max(0) as u32)
    }

    /// The HTTP/2 state.
    pub(crate) fn h2_ref(&self) -> Option<&H2> {
        self.h2.as_deref()
    }

    /// The HTTP/2 state, for the session's counts.
    pub(crate) fn h2_mut(&mut self) -> Option<&mut H2> {
        self.h2.as_deref_mut()
    }
}
