//! The PNG backend: the scene painted into an RGB buffer, then encoded as a PNG.
//!
//! Owns: rasterising the primitives (no anti-aliasing: crisp, flat colours, which also keeps
//! the file small), text from the built-in 5 x 7 font (`font`), and the PNG container (signature,
//! IHDR, one IDAT of a zlib stream from `miniz_oxide`, IEND, CRC-32 per chunk). Rows use the
//! PNG "Up" filter, so the many repeated rows of a chart compress to almost nothing.
//!
//! Invariants: nothing drawn outside the buffer (every write is clipped); the PNG is 8-bit RGB,
//! non-interlaced, of exactly the scene's size.

use super::font::glyph;
use super::scene::{Anchor, Item, Rgb, Scene, WHITE};

/// An RGB image.
#[derive(Debug, Clone, PartialEq)]
pub struct Canvas {
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// `width * height` pixels of 3 bytes, row by row.
    pub pixels: Vec<u8>,
}

impl Canvas {
    /// A white canvas.
    pub fn new(width: u32, height: u32) -> Canvas {
        let mut pixels = Vec::with_capacity(width as usize * height as usize * 3);
        for _ in 0..width as usize * height as usize {
            pixels.extend_from_slice(&WHITE);
        }
        Canvas {
            width,
            height,
            pixels,
        }
    }

    /// The colour at `(x, y)`, if inside.
    pub fn get(&self, x: i64, y: i64) -> Option<Rgb> {
        if x < 0 || y < 0 || x >= i64::from(self.width) || y >= i64::from(self.height) {
            return None;
        }
        let i = (y as usize * self.width as usize + x as usize) * 3;
        Some([self.pixels[i], self.pixels[i + 1], self.pixels[i + 2]])
    }

    fn put(&mut self, x: i64, y: i64, c: Rgb) {
        if x < 0 || y < 0 || x >= i64::from(self.width) || y >= i64::from(self.height) {
            return;
        }
        let i = (y as usize * self.width as usize + x as usize) * 3;
        self.pixels[i..i + 3].copy_from_slice(&c);
    }

    /// Fill the pixels whose centres lie in the rectangle (at least one pixel wide and high).
    fn fill(&mut self, x: f64, y: f64, w: f64, h: f64, c: Rgb) {
        let (x0, y0) = (x.round() as i64, y.round() as i64);
        let x1 = ((x + w).round() as i64).max(x0 + 1);
        let y1 = ((y + h).round() as i64).max(y0 + 1);
        let (x0, x1) = (x0.max(0), x1.min(i64::from(self.width)));
        let (y0, y1) = (y0.max(0), y1.min(i64::from(self.height)));
        for yy in y0..y1 {
            for xx in x0..x1 {
                self.put(xx, yy, c);
            }
        }
    }

    /// A line of `width` pixels (a square pen stepped along it); `dash`: 6 on, 4 off.
    fn line(&mut self, a: (f64, f64), b: (f64, f64), c: Rgb, width: f64, dash: bool) {
        let pen = width.round().max(1.0) as i64;
        let off = (pen - 1) / 2;
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let steps = dx.abs().max(dy.abs()).ceil().max(1.0) as i64;
        if steps > 100_000 {
            return;
        }
        for i in 0..=steps {
            if dash && i % 10 >= 6 {
                continue;
            }
            let t = i as f64 / steps as f64;
            let (x, y) = (
                (a.0 + dx * t).round() as i64 - off,
                (a.1 + dy * t).round() as i64 - off,
            );
            for yy in y..y + pen {
                for xx in x..x + pen {
                    self.put(xx, yy, c);
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn text(
        &mut self,
        x: f64,
        y: f64,
        text: &str,
        scale: u32,
        c: Rgb,
        anchor: Anchor,
        vertical: bool,
    ) {
        let s = i64::from(scale);
        let len = text.chars().count() as i64 * 6 * s;
        let shift = match anchor {
            Anchor::Start => 0,
            Anchor::Middle => len / 2,
            Anchor::End => len,
        };
        let (x, y) = (x.round() as i64, y.round() as i64);
        for (i, ch) in text.chars().enumerate() {
            let pen = i as i64 * 6 * s - shift;
            for (r, bits) in glyph(ch).iter().enumerate() {
                for col in 0..5i64 {
                    if bits & (0x10 >> col) == 0 {
                        continue;
                    }
                    let (gx, gy) = (pen + col * s, (r as i64 - 7) * s);
                    for sy in 0..s {
                        for sx in 0..s {
                            if vertical {
                                // Turned counter-clockwise: along the text is up the screen.
                                self.put(x + gy + sy, y - gx - sx, c);
                            } else {
                                self.put(x + gx + sx, y + gy + sy, c);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Paint the scene.
pub fn paint(scene: &Scene) -> Canvas {
    let mut cv = Canvas::new(scene.width, scene.height);
    for item in &scene.items {
        match item {
            Item::Rect { x, y, w, h, fill } => cv.fill(*x, *y, *w, *h, *fill),
            Item::Line {
                from,
                to,
                color,
                width,
                dashed,
            } => cv.line(*from, *to, *color, *width, *dashed),
            Item::Polyline {
                points,
                color,
                width,
            } => {
                for w in points.windows(2) {
                    cv.line(w[0], w[1], *color, *width, false);
                }
            }
            Item::Text {
                x,
                y,
                text,
                size,
                color,
                anchor,
                vertical,
            } => cv.text(*x, *y, text, size.scale(), *color, *anchor, *vertical),
        }
    }
    cv
}

/// The scene as a PNG file.
pub fn render(scene: &Scene) -> Vec<u8> {
    encode_png(&paint(scene))
}

/// CRC-32 (ISO-HDLC, as PNG chunks use).
pub fn crc32(data: &[u8]) -> u32 {
    let mut table = [0u32; 256];
    for (n, slot) in table.iter_mut().enumerate() {
        let mut c = n as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        *slot = c;
    }
    let mut c = 0xffff_ffffu32;
    for &b in data {
        c = table[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    c ^ 0xffff_ffff
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// An 8-bit RGB PNG of the canvas.
pub fn encode_png(cv: &Canvas) -> Vec<u8> {
    let stride = cv.width as usize * 3;
    let mut raw = Vec::with_capacity((stride + 1) * cv.height as usize);
    for y in 0..cv.height as usize {
        let row = &cv.pixels[y * stride..(y + 1) * stride];
        if y == 0 {
            raw.push(0); // None
            raw.extend_from_slice(row);
        } else {
            raw.push(2); // Up: the difference with the row above
            let above = &cv.pixels[(y - 1) * stride..y * stride];
            raw.extend(row.iter().zip(above).map(|(a, b)| a.wrapping_sub(*b)));
        }
    }
    let mut out = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&cv.width.to_be_bytes());
    ihdr.extend_from_slice(&cv.height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit, RGB, deflate, adaptive filters, no interlace
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(
        &mut out,
        b"IDAT",
        &miniz_oxide::deflate::compress_to_vec_zlib(&raw, 6),
    );
    chunk(&mut out, b"IEND", &[]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::scene::{TextSize, INK};

    #[test]
    fn crc_of_known_strings() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b"IEND"), 0xae42_6082);
    }

    #[test]
    fn png_decodes_back_to_the_pixels() {
        let mut s = Scene::new(7, 5);
        s.rect(1.0, 1.0, 3.0, 2.0, [10, 20, 30]);
        s.line((0.0, 4.0), (6.0, 4.0), [200, 0, 0], 1.0);
        let cv = paint(&s);
        assert_eq!(cv.get(1, 1), Some([10, 20, 30]));
        assert_eq!(cv.get(3, 2), Some([10, 20, 30]));
        assert_eq!(cv.get(4, 1), Some(WHITE));
        assert_eq!(cv.get(6, 4), Some([200, 0, 0]));
        assert_eq!(cv.get(7, 0), None);
        let png = encode_png(&cv);
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&png[12..16], b"IHDR");
        assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 7);
        assert_eq!(u32::from_be_bytes(png[20..24].try_into().unwrap()), 5);
        // Every chunk's CRC holds, and the IDAT inflates to the filtered rows.
        let mut at = 8;
        let mut idat = Vec::new();
        while at < png.len() {
            let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
            let body = &png[at + 4..at + 8 + len];
            let crc = u32::from_be_bytes(png[at + 8 + len..at + 12 + len].try_into().unwrap());
            assert_eq!(crc32(body), crc);
            if &body[..4] == b"IDAT" {
                idat.extend_from_slice(&body[4..]);
            }
            at += 12 + len;
        }
        let raw = miniz_oxide::inflate::decompress_to_vec_zlib(&idat).unwrap();
        assert_eq!(raw.len(), 5 * (7 * 3 + 1));
        // Undo the filters and compare with the canvas.
        let mut pix = Vec::new();
        for y in 0..5 {
            let row = &raw[y * 22..(y + 1) * 22];
            for (x, &b) in row[1..].iter().enumerate() {
                let v = match row[0] {
                    0 => b,
                    2 => b.wrapping_add(pix[(y - 1) * 21 + x]),
                    f => panic!("filter {f}"),
                };
                pix.push(v);
            }
        }
        assert_eq!(pix, cv.pixels);
    }

    #[test]
    fn text_is_drawn_where_its_anchor_says() {
        let mut s = Scene::new(100, 40);
        s.text(50.0, 20.0, "I", TextSize::Small, Anchor::Middle);
        s.vtext(20.0, 30.0, "-", TextSize::Small);
        let cv = paint(&s);
        // 'I' at scale 2: 12 px cell centred on 50, its stem in columns 2 of 5 -> x 44 + 4..6.
        assert_eq!(cv.get(48, 19), Some(INK));
        assert_eq!(cv.get(48, 6), Some(INK), "top of the I at baseline - 14");
        assert_eq!(cv.get(48, 5), Some(WHITE));
        assert_eq!(cv.get(48, 20), Some(WHITE), "nothing below the baseline");
        // '-' turned: a vertical stroke left of x = 20, centred on y = 30.
        let inked: Vec<i64> = (0..40).filter(|&y| cv.get(12, y) == Some(INK)).collect();
        assert!(
            !inked.is_empty() && inked.iter().all(|&y| (24..=36).contains(&y)),
            "{inked:?}"
        );
    }
}
