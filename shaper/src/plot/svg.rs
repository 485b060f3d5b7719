//! The SVG backend: one element per shape, written by hand (no dependency).
//!
//! Invariant: the output is a standalone SVG 1.1 document whose every element is closed and
//! whose text is escaped, so any XML parser reads it.

use std::fmt::Write as _;

use common::markup::escape;

use super::scene::{Anchor, Item, Rgb, Scene, TextSize, WHITE};

fn hex(c: Rgb) -> String {
    format!("#{:02x}{:02x}{:02x}", c[0], c[1], c[2])
}

/// The scene as an SVG document.
pub fn render(scene: &Scene) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">",
        w = scene.width,
        h = scene.height
    );
    let _ = writeln!(
        s,
        "<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"{}\"/>",
        scene.width,
        scene.height,
        hex(WHITE)
    );
    let _ = writeln!(
        s,
        "<g font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\" shape-rendering=\"crispEdges\">"
    );
    for item in &scene.items {
        match item {
            Item::Rect { x, y, w, h, fill } => {
                let _ = writeln!(
                    s,
                    "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"{}\"/>",
                    hex(*fill)
                );
            }
            Item::Line {
                from,
                to,
                color,
                width,
                dashed,
            } => {
                let dash = if *dashed {
                    " stroke-dasharray=\"6 4\""
                } else {
                    ""
                };
                let _ = writeln!(
                    s,
                    "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{}\" stroke-width=\"{width}\"{dash}/>",
                    from.0,
                    from.1,
                    to.0,
                    to.1,
                    hex(*color)
                );
            }
            Item::Polyline {
                points,
                color,
                width,
            } => {
                let pts: Vec<String> = points
                    .iter()
                    .map(|(x, y)| format!("{x:.1},{y:.1}"))
                    .collect();
                let _ = writeln!(
                    s,
                    "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{width}\" stroke-linejoin=\"round\" shape-rendering=\"auto\"/>",
                    pts.join(" "),
                    hex(*color)
                );
            }
            Item::Text {
                x,
                y,
                text,
                size,
                color,
                anchor,
                vertical,
            } => {
                let anchor = match anchor {
                    Anchor::Start => "start",
                    Anchor::Middle => "middle",
                    Anchor::End => "end",
                };
                // A monospace font at this size has about the bitmap font's advance (0.6 em).
                let px = size.advance() / 0.6;
                let weight = if *size == TextSize::Large {
                    " font-weight=\"bold\""
                } else {
                    ""
                };
                let rotate = if *vertical {
                    format!(" transform=\"rotate(-90 {x:.1} {y:.1})\"")
                } else {
                    String::new()
                };
                let _ = writeln!(
                    s,
                    "<text x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"{px:.1}\" fill=\"{}\" text-anchor=\"{anchor}\"{weight}{rotate}>{}</text>",
                    hex(*color),
                    escape(text)
                );
            }
        }
    }
    s.push_str("</g>\n</svg>\n");
    s
}
