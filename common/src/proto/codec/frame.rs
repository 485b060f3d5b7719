//! Frames on the byte stream: the sans-IO [`FrameDecoder`] (reassembly, the size limit, the
//! tag check) and [`seal_frames`], which tags outgoing frames.

use super::super::auth::{FrameKey, TAG_LEN};
use super::super::{ProtoError, MAX_FRAME};
use super::{Message, Role};

/// Reassembles frames from a byte stream delivered in arbitrary pieces.
///
/// Call [`push`](Self::push) with whatever the socket returned, then [`next`](Self::next) until
/// it returns `Ok(None)`. After an `Err` the stream is unusable and every later call returns
/// [`ProtoError::Poisoned`]: close the connection.
///
/// Two settings change between the handshake and the rest of the connection, and apply from
/// the next frame [`next`](Self::next) returns (bytes already pushed included):
/// [`set_max_frame`](Self::set_max_frame) (a length field above it is refused before its body
/// arrives) and [`authenticate`](Self::authenticate) (every later frame must end with a valid
/// tag, see [`super::super::auth`]).
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    start: usize,
    poisoned: bool,
    max_frame: usize,
    opener: Option<Opener>,
}

/// Verification state of the incoming direction.
#[derive(Debug)]
struct Opener {
    key: FrameKey,
    /// Number of the next tagged frame.
    counter: u64,
    /// The sender, for errors.
    from: Role,
}

impl Default for FrameDecoder {
    fn default() -> FrameDecoder {
        FrameDecoder {
            buf: Vec::new(),
            start: 0,
            poisoned: false,
            max_frame: MAX_FRAME,
            opener: None,
        }
    }
}

impl FrameDecoder {
    /// An empty decoder that accepts frames up to [`MAX_FRAME`], without tags.
    pub fn new() -> FrameDecoder {
        FrameDecoder::default()
    }

    /// Refuse frames whose type and body exceed `max` bytes (at most [`MAX_FRAME`], which is
    /// the default), e.g. [`super::super::PRE_AUTH_MAX_FRAME`] during the handshake.
    pub fn set_max_frame(&mut self, max: usize) {
        self.max_frame = max.min(MAX_FRAME);
    }

    /// The current frame limit (type and body, without the tag).
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// From the next frame on, every frame must end with the [`TAG_LEN`]-byte tag of `key`
    /// over its counter and bytes (counting from 0); `from` names the sender in errors.
    pub fn authenticate(&mut self, key: FrameKey, from: Role) {
        self.opener = Some(Opener {
            key,
            counter: 0,
            from,
        });
    }

    /// Append received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && (self.start == self.buf.len() || self.start >= self.buf.len() / 2) {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received but not yet consumed as complete frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next complete message, `Ok(None)` if more bytes are needed.
    #[allow(clippy::should_implement_trait)] // fallible, and not an iterator over owned input
    pub fn next(&mut self) -> Result<Option<Message>, ProtoError> {
        if self.poisoned {
            return Err(ProtoError::Poisoned);
        }
        let res = self.next_inner();
        if res.is_err() {
            self.poisoned = true;
        }
        res
    }

    fn next_inner(&mut self) -> Result<Option<Message>, ProtoError> {
        let avail = &self.buf[self.start..];
        let Some(len_bytes) = avail.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        let tag_len = if self.opener.is_some() { TAG_LEN } else { 0 };
        let max = self.max_frame + tag_len;
        if len as usize > max {
            return Err(ProtoError::FrameTooLarge { len, max });
        }
        if len as usize <= tag_len {
            // Not even a type byte before the tag.
            return Err(ProtoError::EmptyFrame);
        }
        let Some(whole) = avail.get(..4 + len as usize) else {
            return Ok(None);
        };
        let (sealed, tag) = whole.split_at(whole.len() - tag_len);
        if let Some(o) = &mut self.opener {
            if !o.key.verify(o.counter, sealed, tag) {
                return Err(ProtoError::BadTag {
                    from: o.from.as_str(),
                    frame: o.counter,
                });
            }
            o.counter += 1;
        }
        let res = Message::decode_body(&sealed[4..]);
        self.start += whole.len();
        res.map(Some)
    }
}

/// Append to `out` the frames of `plain` (whole frames as [`Message::encode`] writes them),
/// each with its tag: the length field grows by [`TAG_LEN`], and the tag of `key` over
/// `*counter` and the frame's bytes follows the body; `*counter` advances by one per frame.
/// `plain` must hold whole frames (what this crate's encoder produced).
pub fn seal_frames(key: &FrameKey, counter: &mut u64, plain: &[u8], out: &mut Vec<u8>) {
    out.reserve(plain.len() + plain.len() / 64 + TAG_LEN);
    let mut rest = plain;
    while let Some(len_bytes) = rest.get(..4) {
        let len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        let end = (4 + len as usize).min(rest.len());
        debug_assert_eq!(end, 4 + len as usize, "seal_frames got a partial frame");
        let start = out.len();
        out.extend_from_slice(&(len + TAG_LEN as u32).to_be_bytes());
        out.extend_from_slice(&rest[4..end]);
        let tag = key.tag(*counter, &out[start..]);
        out.extend_from_slice(&tag);
        *counter += 1;
        rest = &rest[end..];
    }
}
