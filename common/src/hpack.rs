//! HPACK (RFC 7541) for the header blocks of HTTP/2, a thin wrapper over the `fluke-hpack`
//! crate (a maintained fork of `hpack`): a [`Decoder`] per connection and direction that turns
//! each header block into name/value pairs, and an [`Encoder`] that writes header lists a peer's
//! decoder reads without ever depending on a dynamic table. No frames here: cutting HEADERS and
//! CONTINUATION frames into blocks and back is `common::h2` ([`crate::h2::headers_fragment`],
//! [`crate::h2::write_header_block`]).
//!
//! Invariants:
//! - A [`Decoder`] must see every header block of its direction, whole and in connection order
//!   (its dynamic table follows the peer encoder's); after an error its table is unknown and it
//!   refuses every later block ([`HpackError::Poisoned`]).
//! - An [`Encoder`] starts its first block with a dynamic table size update to 0, and then never
//!   keeps anything in the table: whatever a peer advertised as `SETTINGS_HEADER_TABLE_SIZE`
//!   (0 is allowed and is the smallest), its decoder's table stays empty, so any sequence of
//!   blocks from this encoder decodes to what was given, in any one connection. Fields are
//!   indexed from the static table when it has them, literal otherwise (no Huffman coding).

/// The largest dynamic table a [`Decoder`] accepts a size update to (the peer's encoder cannot
/// use more than the server advertised; 4096 is the default, larger ones are rare). Bounds the
/// memory a client can make a decoder hold.
pub const MAX_DECODER_TABLE: usize = 64 << 10;

/// A header block that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    /// The block is not valid HPACK (bad index, integer or string, Huffman error, a size update
    /// above [`MAX_DECODER_TABLE`] or at the end of the block).
    #[error("HPACK decoding: {0}")]
    Decode(String),
    /// An earlier block failed: the dynamic table is unknown from there on.
    #[error("HPACK decoding: an earlier block of the connection failed")]
    Poisoned,
}

/// One direction's HPACK decoder (see the module's invariants).
pub struct Decoder {
    inner: fluke_hpack::Decoder<'static>,
    poisoned: bool,
    /// Blocks decoded.
    pub blocks: u64,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("poisoned", &self.poisoned)
            .field("blocks", &self.blocks)
            .finish_non_exhaustive()
    }
}

impl Default for Decoder {
    fn default() -> Decoder {
        let mut inner = fluke_hpack::Decoder::new();
        inner.set_max_allowed_table_size(MAX_DECODER_TABLE);
        Decoder {
            inner,
            poisoned: false,
            blocks: 0,
        }
    }
}

impl Decoder {
    /// A decoder for a new connection's direction (empty dynamic table).
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Decode one whole header block (HEADERS or PUSH_PROMISE fragment and its CONTINUATIONs,
    /// joined), appending its fields to `out` in order. On error `out` may hold the fields
    /// before the bad one, and the decoder refuses every later block.
    pub fn decode(
        &mut self,
        block: &[u8],
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), HpackError> {
        if self.poisoned {
            return Err(HpackError::Poisoned);
        }
        if let Err(e) = walk(block) {
            self.poisoned = true;
            return Err(e);
        }
        // fluke-hpack's documented errors are returned, but a corrupt input must not take the
        // process down whatever it does inside: a panic counts as an error too (with unwinding;
        // `walk` keeps the one input known to panic away from it).
        let inner = &mut self.inner;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            inner.decode_with_cb(block, |n, v| out.push((n.into_owned(), v.into_owned())))
        }));
        match r {
            Ok(Ok(())) => {
                self.blocks += 1;
                Ok(())
            }
            Ok(Err(e)) => {
                self.poisoned = true;
                Err(HpackError::Decode(format!("{e:?}")))
            }
            Err(_) => {
                self.poisoned = true;
                Err(HpackError::Decode("decoder panicked".into()))
            }
        }
    }

    /// Whether an error made the table unknown.
    pub fn poisoned(&self) -> bool {
        self.poisoned
    }
}

/// An HPACK integer with an `n`-bit prefix at `b[*i]`; `None` if truncated or above 2^32.
fn int(b: &[u8], i: &mut usize, n: u8) -> Option<u64> {
    let max = (1u64 << n) - 1;
    let mut v = u64::from(*b.get(*i)?) & max;
    *i += 1;
    if v < max {
        return Some(v);
    }
    let mut shift = 0;
    loop {
        if shift > 21 {
            return None; // more than 5 octets in all: what fluke-hpack refuses too
        }
        let c = *b.get(*i)?;
        *i += 1;
        v += u64::from(c & 0x7f) << shift;
        if v > u64::from(u32::MAX) {
            return None;
        }
        if c & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
    }
}

/// A string literal at `b[*i]` (Huffman bit, length, bytes), skipped.
fn string(b: &[u8], i: &mut usize) -> Option<()> {
    let len = usize::try_from(int(b, i, 7)?).ok()?;
    *i = i.checked_add(len).filter(|&e| e <= b.len())?;
    Some(())
}

/// Walk a block's representations without decoding them: every integer and string whole, and
/// dynamic table size updates only at the start (RFC 7541 section 4.2). fluke-hpack 0.3.1
/// panics on a truncated size update (`decoder.rs` unwraps its integer: found by the fuzz
/// target `h2_headers`), so no block reaches it without this check.
fn walk(b: &[u8]) -> Result<(), HpackError> {
    let bad = |what: &str| HpackError::Decode(what.into());
    let mut i = 0;
    let mut start = true;
    while i < b.len() {
        let c = b[i];
        let ok = if c & 0x80 != 0 {
            int(b, &mut i, 7).map(drop)
        } else if c & 0xe0 == 0x20 {
            if !start {
                return Err(bad("a table size update after a field"));
            }
            int(b, &mut i, 5).map(drop)
        } else {
            let prefix = if c & 0xc0 == 0x40 { 6 } else { 4 };
            int(b, &mut i, prefix)
                .and_then(|idx| {
                    if idx == 0 {
                        string(b, &mut i)
                    } else {
                        Some(())
                    }
                })
                .and_then(|()| string(b, &mut i))
        };
        ok.ok_or_else(|| bad("a truncated integer or string"))?;
        start &= c & 0xe0 == 0x20;
    }
    Ok(())
}

/// An encoder whose blocks never use the dynamic table (see the module's invariants).
pub struct Encoder {
    inner: fluke_hpack::Encoder<'static>,
    started: bool,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}

impl Default for Encoder {
    fn default() -> Encoder {
        let mut inner = fluke_hpack::Encoder::new();
        // Entries it would add are evicted at once, here and (after the size update below) in
        // the peer's decoder alike.
        inner.set_max_table_size(0);
        Encoder {
            inner,
            started: false,
        }
    }
}

impl Encoder {
    /// An encoder for a new connection's direction (its first block shrinks the peer's table to 0).
    pub fn new() -> Encoder {
        Encoder::default()
    }

    /// Append the block for `fields` (in order) to `out`.
    pub fn encode<'a>(
        &mut self,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        out: &mut Vec<u8>,
    ) {
        let at = out.len();
        if !self.started {
            out.push(0x20); // dynamic table size update: 0
        }
        // Writing to a Vec cannot fail.
        let _ = self.inner.encode_into(fields, out);
        if out.len() == at + 1 && !self.started {
            // No field: a block of only a size update is refused by some decoders (this one
            // too); the next block carries it.
            out.truncate(at);
        } else {
            self.started = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Fields = Vec<(Vec<u8>, Vec<u8>)>;

    fn f(pairs: &[(&str, &str)]) -> Fields {
        pairs
            .iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    fn enc(e: &mut Encoder, fields: &Fields) -> Vec<u8> {
        let mut out = Vec::new();
        e.encode(fields.iter().map(|(n, v)| (&n[..], &v[..])), &mut out);
        out
    }

    #[test]
    fn rfc7541_c3_requests_decode_in_order_with_the_dynamic_table() {
        // RFC 7541 appendix C.3: three requests without Huffman coding, each using entries
        // the ones before put in the dynamic table.
        let blocks: [&[u8]; 3] = [
            b"\x82\x86\x84\x41\x0fwww.example.com",
            b"\x82\x86\x84\xbe\x58\x08no-cache",
            b"\x82\x87\x85\xbf\x40\x0acustom-key\x0ccustom-value",
        ];
        let mut d = Decoder::new();
        let mut got = Vec::new();
        for b in blocks {
            let mut out = Vec::new();
            d.decode(b, &mut out).unwrap();
            got.push(out);
        }
        assert_eq!(
            got[0],
            f(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com")
            ])
        );
        assert_eq!(
            got[1][3..],
            f(&[
                (":authority", "www.example.com"),
                ("cache-control", "no-cache")
            ])[..]
        );
        assert_eq!(
            got[2][3..],
            f(&[
                (":authority", "www.example.com"),
                ("custom-key", "custom-value")
            ])[..]
        );
        // Out of order, the second block refers to an entry this decoder never saw.
        let mut d = Decoder::new();
        let mut out = Vec::new();
        assert!(d.decode(blocks[1], &mut out).is_err());
        assert!(d.poisoned());
        assert_eq!(d.decode(blocks[0], &mut out), Err(HpackError::Poisoned));
    }

    #[test]
    fn encoder_blocks_need_no_table_and_start_with_a_size_update_to_zero() {
        let mut e = Encoder::new();
        let a = f(&[
            (":method", "GET"),
            (":path", "/a"),
            ("x-long", &"v".repeat(5000)),
            ("x-dye", "1"),
        ]);
        let b1 = enc(&mut e, &a);
        assert_eq!(b1[0], 0x20);
        let b2 = enc(&mut e, &a);
        assert_ne!(b2[0], 0x20, "only the first block carries the size update");
        // A fresh decoder reads both; and a decoder whose table the other side filled with
        // garbage (the first block's update empties it) too.
        for mut d in [Decoder::new(), {
            let mut d = Decoder::new();
            d.decode(b"\x40\x03abc\x03def", &mut Vec::new()).unwrap();
            d
        }] {
            for b in [&b1, &b2] {
                let mut out = Vec::new();
                d.decode(b, &mut out).unwrap();
                assert_eq!(out, a);
            }
        }
        // The second block alone decodes too: it does not depend on the first.
        let mut out = Vec::new();
        Decoder::new().decode(&b2, &mut out).unwrap();
        assert_eq!(out, a);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        // `??`: a truncated size update (fluke-hpack 0.3.1 panics on it; found by the fuzz
        // target); a size update after a field.
        for b in [
            &b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"[..],
            b"\x7f",
            b"\x00\x85abc",
            b"\xc0",
            b"\x20",
            b"\x3f\xe1\xff\xff\x0f",
            b"??",
            b"\x3f",
            b"\x82\x20\x82",
            b"\x00\x3f\xca\xca\x00\x3f\xca\xb2\xca\xca\x00",
            b"\x00\x3f\x84\xa9\xa9\xa9\x80\x80\x80\x80\x80\x80\x80\x80\x50",
        ] {
            assert!(Decoder::new().decode(b, &mut Vec::new()).is_err(), "{b:?}");
        }
    }

    proptest::proptest! {
        /// Any field lists through one encoder decode, block after block, to what was given.
        #[test]
        fn any_fields_round_trip_through_one_connection(
            blocks in proptest::collection::vec(
                proptest::collection::vec((proptest::sample::select(vec![":method", ":path", "cookie", "x-a", "accept", "content-length"]), "[ -~]{0,40}"), 0..8),
                1..12,
            ),
        ) {
            let mut e = Encoder::new();
            let mut d = Decoder::new();
            for b in blocks {
                let fields: Fields = b.iter().map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())).collect();
                let mut out = Vec::new();
                d.decode(&enc(&mut e, &fields), &mut out).unwrap();
                proptest::prop_assert_eq!(out, fields);
            }
        }
    }
}
