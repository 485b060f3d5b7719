//! `shaper plot`: pictures of a plan, a trace or a capture, as SVG or PNG.
//!
//! Owns: the views a picture is drawn from ([`PlotData`]: a count series, ON/OFF timelines,
//! activity values, pool shares and address maps; built from a plan and its user table, a trace
//! or a fitted capture in [`data`]), the sections to draw ([`What`]), and the two backends
//! ([`svg`], written by hand; [`raster`], a built-in bitmap font and a PNG encoder over
//! `miniz_oxide`'s deflate). The layout lives in [`charts`] and draws into a backend-neutral
//! [`scene::Scene`], so SVG and PNG show the same picture.
//!
//! Pure: no file is read or written here; the binary does that.

pub mod charts;
pub mod data;
mod font;
pub mod raster;
pub mod scene;
pub mod svg;

use std::fmt;
use std::str::FromStr;

pub use data::PlotOptions;

/// A section of a picture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    /// Requests (or ON sources) per interval at several time scales.
    Rate,
    /// The ON/OFF timeline of the sources.
    Onoff,
    /// The histogram of user activity.
    Users,
    /// Pool shares and address ranges.
    Pools,
    /// Every section the input has.
    All,
}

impl What {
    /// The sections this stands for, in picture order.
    pub fn sections(self) -> Vec<What> {
        match self {
            What::All => vec![What::Rate, What::Onoff, What::Users, What::Pools],
            w => vec![w],
        }
    }

    fn name(self) -> &'static str {
        match self {
            What::Rate => "rate",
            What::Onoff => "onoff",
            What::Users => "users",
            What::Pools => "pools",
            What::All => "all",
        }
    }
}

impl fmt::Display for What {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for What {
    type Err = String;
    fn from_str(s: &str) -> Result<What, String> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "rate" => What::Rate,
            "onoff" | "on-off" => What::Onoff,
            "users" => What::Users,
            "pools" => What::Pools,
            "all" => What::All,
            _ => return Err(format!("{s:?}: expected rate, onoff, users, pools or all")),
        })
    }
}

/// The picture format, from the output file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Scalable vector graphics.
    Svg,
    /// An 8-bit RGB PNG.
    Png,
}

impl Format {
    /// `png` or `svg` (any case) from a file name.
    pub fn of_path(path: &std::path::Path) -> Option<Format> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "png" => Some(Format::Png),
            "svg" => Some(Format::Svg),
            _ => None,
        }
    }
}

/// A count series at its finest bin.
#[derive(Debug, Clone, PartialEq)]
pub struct RateSeries {
    /// The finest bin, seconds.
    pub bin: f64,
    /// The value of each bin, from the start.
    pub counts: Vec<f64>,
    /// What is counted (y axis), e.g. "requests" or "ON sources".
    pub what: String,
    /// Coarser bins take the mean of their finer bins (a level such as the number of ON
    /// sources) instead of the sum (a count such as requests).
    pub mean: bool,
}

/// ON/OFF timelines of some sources over a window from 0.
#[derive(Debug, Clone, PartialEq)]
pub struct OnOffView {
    /// `(label, ON intervals)` of each source shown.
    pub rows: Vec<(String, Vec<(f64, f64)>)>,
    /// How many sources there are in all.
    pub sources: usize,
    /// The window shown, seconds from 0.
    pub window: f64,
    /// The number of ON sources (of all of them) in equal bins over the window.
    pub on_count: Vec<f64>,
    /// A note shown with the title (how ON periods were found).
    pub note: String,
}

/// Activity values, per pool.
#[derive(Debug, Clone, PartialEq)]
pub struct UsersView {
    /// `(pool name, each user's value)`.
    pub pools: Vec<(String, Vec<f64>)>,
    /// What the value is (x axis).
    pub label: String,
}

/// One pool of the pool map.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolRow {
    /// Its name.
    pub name: String,
    /// Its address range, as text.
    pub range: Option<String>,
    /// Its users.
    pub users: usize,
    /// Its share of sessions by the profile.
    pub target: Option<f64>,
    /// Its share of sessions drawn or measured.
    pub measured: Option<f64>,
    /// `(position in the range, 0..1; the user's share of sessions)` of each user.
    pub cells: Vec<(f64, f64)>,
    /// The width of one address in the range, as a fraction of it.
    pub cell_width: f64,
}

/// The pool map.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolsView {
    /// The pools.
    pub rows: Vec<PoolRow>,
    /// What `target` is ("weight").
    pub target_label: String,
    /// What `measured` is ("drawn", "sessions").
    pub measured_label: String,
    /// What is shared out: "sessions" or "requests".
    pub of: String,
    /// A note shown with the title.
    pub note: String,
}

/// Everything a picture can show; each section is there when the input has it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PlotData {
    /// The picture's title.
    pub title: String,
    /// A line under it (the input and the options).
    pub subtitle: String,
    /// The count series.
    pub rate: Option<RateSeries>,
    /// A trace's answer times (mean per bin, 0 where none), drawn under the count series.
    pub answer: Option<RateSeries>,
    /// The ON/OFF timelines.
    pub onoff: Option<OnOffView>,
    /// The activity histogram.
    pub users: Option<UsersView>,
    /// The pool map.
    pub pools: Option<PoolsView>,
}

/// Why a picture cannot be drawn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlotError {
    /// The input has nothing for a section asked for.
    #[error("--what {what}: {kind} has no {what} to draw ({hint})")]
    Unavailable {
        /// The section.
        what: What,
        /// The kind of input.
        kind: String,
        /// Which input has it.
        hint: &'static str,
    },
}

impl PlotData {
    fn has(&self, w: What) -> bool {
        match w {
            What::Rate => self.rate.is_some(),
            What::Onoff => self.onoff.is_some(),
            What::Users => self.users.is_some(),
            What::Pools => self.pools.is_some(),
            What::All => true,
        }
    }

    /// The scene of the sections `what` asks for (with `All`, those the input has), the rate
    /// at `scales` time scales.
    pub fn scene(&self, what: What, kind: &str, scales: usize) -> Result<scene::Scene, PlotError> {
        let want: Vec<What> = match what {
            What::All => What::All
                .sections()
                .into_iter()
                .filter(|w| self.has(*w))
                .collect(),
            w if self.has(w) => vec![w],
            w => {
                return Err(PlotError::Unavailable {
                    what: w,
                    kind: kind.into(),
                    hint: match w {
                        What::Onoff => {
                            "a profile, a plan folder, a trace with a source column or a capture has"
                        }
                        What::Users => {
                            "a profile with pools, a plan folder with users.csv, a trace with a source column or a capture has"
                        }
                        What::Pools => {
                            "a profile with pools, a plan folder with users.csv, a trace with a pool column or a capture has"
                        }
                        _ => "every input has it",
                    },
                })
            }
        };
        Ok(charts::compose(self, &want, scales))
    }

    /// The picture in `format`.
    pub fn render(
        &self,
        what: What,
        kind: &str,
        scales: usize,
        format: Format,
    ) -> Result<Vec<u8>, PlotError> {
        let scene = self.scene(what, kind, scales)?;
        Ok(match format {
            Format::Svg => svg::render(&scene).into_bytes(),
            Format::Png => raster::render(&scene),
        })
    }
}

#[cfg(test)]
mod tests;
