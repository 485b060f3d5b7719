//! The picture as a list of shapes in pixel coordinates, drawn by either backend.
//!
//! Owns: the few primitives the charts need (filled rectangles, lines, polylines, text in two
//! sizes, horizontal or vertical) and the text metrics both backends agree on: a character cell
//! is `6 x 9` units of a 5 x 7 glyph at scale 2 for [`TextSize::Small`] and 3 for
//! [`TextSize::Large`], so layout code can measure a label before placing it.
//!
//! Invariant: coordinates are pixels from the top-left corner; `y` of a text is its baseline.

/// An RGB colour.
pub type Rgb = [u8; 3];

/// Black-ish ink for text and axes.
pub const INK: Rgb = [0x22, 0x22, 0x22];
/// Grid lines.
pub const GRID: Rgb = [0xe4, 0xe4, 0xe4];
/// Secondary text.
pub const MUTED: Rgb = [0x66, 0x66, 0x66];
/// The background.
pub const WHITE: Rgb = [0xff, 0xff, 0xff];
/// Colours of series and pools, in order.
pub const PALETTE: [Rgb; 8] = [
    [0x1f, 0x77, 0xb4],
    [0xff, 0x7f, 0x0e],
    [0x2c, 0xa0, 0x2c],
    [0xd6, 0x27, 0x28],
    [0x94, 0x67, 0xbd],
    [0x8c, 0x56, 0x4b],
    [0xe3, 0x77, 0xc2],
    [0x7f, 0x7f, 0x7f],
];

/// The colour of series `i`.
pub fn color(i: usize) -> Rgb {
    PALETTE[i % PALETTE.len()]
}

/// `c` mixed with white: `t = 0` is `c`, `t = 1` is white.
pub fn lighten(c: Rgb, t: f64) -> Rgb {
    let t = t.clamp(0.0, 1.0);
    c.map(|v| (f64::from(v) + (255.0 - f64::from(v)) * t).round() as u8)
}

/// Text sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextSize {
    /// Labels and ticks (glyph scale 2).
    Small,
    /// Titles (glyph scale 3).
    Large,
}

impl TextSize {
    /// Pixels per glyph unit.
    pub fn scale(self) -> u32 {
        match self {
            TextSize::Small => 2,
            TextSize::Large => 3,
        }
    }

    /// Advance of one character, pixels.
    pub fn advance(self) -> f64 {
        f64::from(6 * self.scale())
    }

    /// Height of a capital above the baseline, pixels.
    pub fn height(self) -> f64 {
        f64::from(7 * self.scale())
    }

    /// Width of `text`, pixels.
    pub fn width(self, text: &str) -> f64 {
        text.chars().count() as f64 * self.advance()
    }
}

/// Where a text's `x` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// At its start.
    Start,
    /// At its middle.
    Middle,
    /// At its end.
    End,
}

/// One shape.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A filled rectangle.
    Rect {
        /// Left edge.
        x: f64,
        /// Top edge.
        y: f64,
        /// Width.
        w: f64,
        /// Height.
        h: f64,
        /// Fill.
        fill: Rgb,
    },
    /// A straight line.
    Line {
        /// Start.
        from: (f64, f64),
        /// End.
        to: (f64, f64),
        /// Colour.
        color: Rgb,
        /// Width, pixels.
        width: f64,
        /// Dashed.
        dashed: bool,
    },
    /// Connected line segments.
    Polyline {
        /// The points, in order.
        points: Vec<(f64, f64)>,
        /// Colour.
        color: Rgb,
        /// Width, pixels.
        width: f64,
    },
    /// A line of text.
    Text {
        /// Anchor point, x.
        x: f64,
        /// Baseline (for vertical text: the line the glyphs' bottoms face).
        y: f64,
        /// The text (printable ASCII; anything else is drawn as `?` in PNG).
        text: String,
        /// Size.
        size: TextSize,
        /// Colour.
        color: Rgb,
        /// Which part of the text is at `x` (for vertical text: at `y`).
        anchor: Anchor,
        /// Turned 90 degrees counter-clockwise (reads bottom to top).
        vertical: bool,
    },
}

/// A whole picture.
#[derive(Debug, Clone, PartialEq)]
pub struct Scene {
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// The shapes, painted in order.
    pub items: Vec<Item>,
}

impl Scene {
    /// An empty picture.
    pub fn new(width: u32, height: u32) -> Scene {
        Scene {
            width,
            height,
            items: Vec::new(),
        }
    }

    /// A filled rectangle.
    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: Rgb) {
        if w > 0.0 && h > 0.0 {
            self.items.push(Item::Rect { x, y, w, h, fill });
        }
    }

    /// A solid line.
    pub fn line(&mut self, from: (f64, f64), to: (f64, f64), color: Rgb, width: f64) {
        self.items.push(Item::Line {
            from,
            to,
            color,
            width,
            dashed: false,
        });
    }

    /// A dashed line.
    pub fn dashed(&mut self, from: (f64, f64), to: (f64, f64), color: Rgb, width: f64) {
        self.items.push(Item::Line {
            from,
            to,
            color,
            width,
            dashed: true,
        });
    }

    /// Connected segments.
    pub fn polyline(&mut self, points: Vec<(f64, f64)>, color: Rgb, width: f64) {
        if points.len() >= 2 {
            self.items.push(Item::Polyline {
                points,
                color,
                width,
            });
        }
    }

    /// Horizontal text.
    pub fn text(
        &mut self,
        x: f64,
        y: f64,
        text: impl Into<String>,
        size: TextSize,
        anchor: Anchor,
    ) {
        self.text_colored(x, y, text, size, anchor, INK);
    }

    /// Horizontal text in a colour.
    pub fn text_colored(
        &mut self,
        x: f64,
        y: f64,
        text: impl Into<String>,
        size: TextSize,
        anchor: Anchor,
        color: Rgb,
    ) {
        self.items.push(Item::Text {
            x,
            y,
            text: text.into(),
            size,
            color,
            anchor,
            vertical: false,
        });
    }

    /// Vertical text (bottom to top), centred on `y`, glyph bottoms facing `x`.
    pub fn vtext(&mut self, x: f64, y: f64, text: impl Into<String>, size: TextSize) {
        self.items.push(Item::Text {
            x,
            y,
            text: text.into(),
            size,
            color: INK,
            anchor: Anchor::Middle,
            vertical: true,
        });
    }
}
