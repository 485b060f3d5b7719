//! TCP options: a parser over the options bytes and a writer.
//!
//! Parsing rules: EOL (kind 0) ends the list; NOP (kind 1) is skipped; every other option is
//! `kind, len, data[len - 2]`. A missing length byte, a length below 2 or a length running past
//! the end is a framing error: the iterator yields one `Err` and then stops. A known option
//! whose length is wrong for its kind (MSS not 4, SACK not 2 + 8n, ...) is framed correctly, so
//! the iterator yields an `Err` for it and goes on with the next one.

use super::WireError;
use crate::seq::SeqNum;

const KIND_EOL: u8 = 0;
const KIND_NOP: u8 = 1;
const KIND_MSS: u8 = 2;
const KIND_WSCALE: u8 = 3;
const KIND_SACK_PERMITTED: u8 = 4;
const KIND_SACK: u8 = 5;
const KIND_TIMESTAMPS: u8 = 8;

/// One TCP option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpOption<'a> {
    /// Maximum segment size (kind 2).
    Mss(u16),
    /// Window scale shift (kind 3).
    WindowScale(u8),
    /// SACK permitted (kind 4).
    SackPermitted,
    /// SACK blocks (kind 5): raw bytes, 8 per block (left edge, right edge); see
    /// [`TcpOption::sack_blocks`].
    Sack(&'a [u8]),
    /// Timestamps (kind 8).
    Timestamps {
        /// The sender's timestamp value.
        tsval: u32,
        /// The echoed timestamp.
        tsecr: u32,
    },
    /// Any other kind, with its data (length byte excluded).
    Unknown {
        /// Option kind.
        kind: u8,
        /// Option data after the length byte.
        data: &'a [u8],
    },
}

impl<'a> TcpOption<'a> {
    /// The blocks of a SACK option's raw bytes as (left, right) pairs; a trailing partial
    /// block is ignored.
    pub fn sack_blocks(data: &'a [u8]) -> impl Iterator<Item = (SeqNum, SeqNum)> + 'a {
        data.chunks_exact(8).map(|c| {
            (
                SeqNum(u32::from_be_bytes([c[0], c[1], c[2], c[3]])),
                SeqNum(u32::from_be_bytes([c[4], c[5], c[6], c[7]])),
            )
        })
    }

    /// Bytes this option takes on the wire.
    #[must_use]
    pub fn wire_len(&self) -> usize {
        match self {
            TcpOption::Mss(_) => 4,
            TcpOption::WindowScale(_) => 3,
            TcpOption::SackPermitted => 2,
            TcpOption::Sack(d) | TcpOption::Unknown { data: d, .. } => 2 + d.len(),
            TcpOption::Timestamps { .. } => 10,
        }
    }
}

/// Iterate over the options in `bytes` (the options area of a TCP header).
#[must_use]
pub fn tcp_options(bytes: &[u8]) -> TcpOptionIter<'_> {
    TcpOptionIter { bytes, pos: 0 }
}

/// Iterator returned by [`tcp_options`].
#[derive(Debug, Clone)]
pub struct TcpOptionIter<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> TcpOptionIter<'a> {
    fn stop(&mut self) {
        self.pos = self.bytes.len();
    }
}

impl<'a> Iterator for TcpOptionIter<'a> {
    type Item = Result<TcpOption<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let offset = self.pos;
            let kind = *self.bytes.get(offset)?;
            match kind {
                KIND_EOL => {
                    self.stop();
                    return None;
                }
                KIND_NOP => {
                    self.pos += 1;
                    continue;
                }
                _ => {}
            }
            let bad = |reason| WireError::BadOption {
                kind,
                offset,
                reason,
            };
            let Some(&len) = self.bytes.get(offset + 1) else {
                self.stop();
                return Some(Err(bad("no length byte")));
            };
            let len = usize::from(len);
            if len < 2 {
                self.stop();
                return Some(Err(bad("length below 2")));
            }
            let Some(data) = self.bytes.get(offset + 2..offset + len) else {
                self.stop();
                return Some(Err(bad("length runs past the options")));
            };
            self.pos = offset + len;
            let opt = match (kind, data.len()) {
                (KIND_MSS, 2) => TcpOption::Mss(u16::from_be_bytes([data[0], data[1]])),
                (KIND_WSCALE, 1) => TcpOption::WindowScale(data[0]),
                (KIND_SACK_PERMITTED, 0) => TcpOption::SackPermitted,
                (KIND_SACK, n) if n >= 8 && n % 8 == 0 => TcpOption::Sack(data),
                (KIND_TIMESTAMPS, 8) => TcpOption::Timestamps {
                    tsval: u32::from_be_bytes([data[0], data[1], data[2], data[3]]),
                    tsecr: u32::from_be_bytes([data[4], data[5], data[6], data[7]]),
                },
                (KIND_MSS | KIND_WSCALE | KIND_SACK_PERMITTED | KIND_SACK | KIND_TIMESTAMPS, _) => {
                    return Some(Err(bad("wrong length for this kind")));
                }
                _ => TcpOption::Unknown { kind, data },
            };
            return Some(Ok(opt));
        }
    }
}

impl std::iter::FusedIterator for TcpOptionIter<'_> {}

/// Append `opts` to `out` in order, then pad what was appended with EOL bytes to a multiple of
/// 4. Writes options as given: keeping the total within 40 bytes (and an `Unknown` data within
/// 253 bytes, its kind not 0 or 1) is the caller's job; an over-long `Unknown` or `Sack` gets
/// its length byte saturated at 255 and its data cut to match, so the output stays parseable.
pub fn write_tcp_options(opts: &[TcpOption<'_>], out: &mut Vec<u8>) {
    let start = out.len();
    for opt in opts {
        match *opt {
            TcpOption::Mss(v) => {
                out.extend_from_slice(&[KIND_MSS, 4]);
                out.extend_from_slice(&v.to_be_bytes());
            }
            TcpOption::WindowScale(v) => out.extend_from_slice(&[KIND_WSCALE, 3, v]),
            TcpOption::SackPermitted => out.extend_from_slice(&[KIND_SACK_PERMITTED, 2]),
            TcpOption::Sack(d) => write_raw(out, KIND_SACK, d),
            TcpOption::Timestamps { tsval, tsecr } => {
                out.extend_from_slice(&[KIND_TIMESTAMPS, 10]);
                out.extend_from_slice(&tsval.to_be_bytes());
                out.extend_from_slice(&tsecr.to_be_bytes());
            }
            TcpOption::Unknown { kind, data } => write_raw(out, kind, data),
        }
    }
    while (out.len() - start) & 3 != 0 {
        out.push(KIND_EOL);
    }
}

fn write_raw(out: &mut Vec<u8>, kind: u8, data: &[u8]) {
    let data = &data[..data.len().min(253)];
    out.push(kind);
    out.push((data.len() + 2) as u8);
    out.extend_from_slice(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(b: &[u8]) -> Vec<Result<TcpOption<'_>, WireError>> {
        tcp_options(b).collect()
    }

    #[test]
    fn linux_syn_options() {
        // what Linux sends on a SYN: MSS, SACK_PERM, TS, NOP, WS
        let b = [
            2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ];
        assert_eq!(
            parse(&b),
            vec![
                Ok(TcpOption::Mss(1460)),
                Ok(TcpOption::SackPermitted),
                Ok(TcpOption::Timestamps { tsval: 1, tsecr: 0 }),
                Ok(TcpOption::WindowScale(7)),
            ]
        );
        let mut out = Vec::new();
        let opts: Vec<_> = parse(&b).into_iter().map(Result::unwrap).collect();
        write_tcp_options(&opts, &mut out);
        // written without the NOP, so 19 bytes + 1 EOL
        assert_eq!(out.len(), 20);
        assert_eq!(out[19], 0);
        let again: Vec<_> = parse(&out).into_iter().map(Result::unwrap).collect();
        assert_eq!(again, opts);
    }

    #[test]
    fn eol_ends_and_nop_skips() {
        assert_eq!(parse(&[1, 1, 1, 0, 2, 4, 0, 1]), vec![]);
        assert_eq!(
            parse(&[1, 3, 3, 2, 0, 0xff]),
            vec![Ok(TcpOption::WindowScale(2))]
        );
        assert_eq!(parse(&[]), vec![]);
    }

    #[test]
    fn sack_and_unknown() {
        let b = [
            5, 18, 0, 0, 0, 1, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xf0, 0, 0, 0, 0x10, 30, 3, 9,
        ];
        let v = parse(&b);
        assert_eq!(v.len(), 2);
        let Ok(TcpOption::Sack(d)) = v[0] else {
            panic!("{v:?}")
        };
        let blocks: Vec<_> = TcpOption::sack_blocks(d).collect();
        assert_eq!(
            blocks,
            vec![(SeqNum(1), SeqNum(2)), (SeqNum(0xffff_fff0), SeqNum(0x10))]
        );
        assert_eq!(
            v[1],
            Ok(TcpOption::Unknown {
                kind: 30,
                data: &[9]
            })
        );
        let mut out = vec![0xaa]; // appends, pads relative to the start
        let opts: Vec<_> = v.into_iter().map(Result::unwrap).collect();
        write_tcp_options(&opts, &mut out);
        assert_eq!(out.len(), 1 + 24);
        assert_eq!(&out[1..22], &b[..]);
        assert_eq!(&out[22..], &[0, 0, 0]);
    }

    #[test]
    fn framing_errors_stop() {
        for bad in [
            &[2u8][..],
            &[2, 1, 1, 1],
            &[2, 0],
            &[2, 5, 0, 0],
            &[30, 200, 1],
        ] {
            let v = parse(bad);
            assert_eq!(v.len(), 1, "{bad:?}: {v:?}");
            assert!(
                matches!(v[0], Err(WireError::BadOption { kind, offset: 0, .. }) if kind == bad[0])
            );
        }
        // an error after a good option: the good one, then the error, then nothing
        let v = parse(&[3, 3, 1, 8, 1, 1, 1]);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0], Ok(TcpOption::WindowScale(1)));
        assert!(matches!(
            v[1],
            Err(WireError::BadOption {
                kind: 8,
                offset: 3,
                ..
            })
        ));
    }

    #[test]
    fn wrong_length_for_kind_goes_on() {
        // MSS with length 3, then a good window scale
        let v = parse(&[2, 3, 5, 3, 3, 4]);
        assert_eq!(v.len(), 2);
        assert!(matches!(v[0], Err(WireError::BadOption { kind: 2, .. })));
        assert_eq!(v[1], Ok(TcpOption::WindowScale(4)));
        // SACK with 7 bytes of blocks
        let v = parse(&[5, 9, 0, 0, 0, 0, 0, 0, 0]);
        assert!(matches!(v[..], [Err(WireError::BadOption { kind: 5, .. })]));
    }

    #[test]
    fn every_truncation_never_panics() {
        let b = [
            2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ];
        for n in 0..=b.len() {
            let v = parse(&b[..n]);
            assert!(v.len() <= 4);
        }
        assert!(parse(&b[..3]).iter().all(Result::is_err));
    }
}
