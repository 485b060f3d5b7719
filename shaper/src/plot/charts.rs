//! The charts: what each section of a picture shows and where, as [`Scene`] shapes.
//!
//! Owns the layout (a fixed width, sections stacked from the top, a left column wide enough
//! for an IPv4 address), the axes (1-2-5 ticks, time in s, min or h by span), and the four
//! sections:
//! - rate: the series at several time scales, coarsest on top; each finer panel zooms into the
//!   10 bins of the panel above that hold its busiest bin (shaded there), so the eye can compare
//!   the burstiness of the same traffic at bins x1, x10, x100 (self-similar traffic looks alike
//!   at every scale; short-range dependent traffic smooths out at the coarse ones);
//! - onoff: one row per source (ON periods as bars) over a window, and the number of ON sources
//!   under it;
//! - users: the histogram of user activity, stacked by pool, log-spaced bins when it spans
//!   more than a factor 20;
//! - pools: per pool, its share of sessions (target and drawn or measured) and the map of its
//!   address range, each user's cell darker the more sessions it gets.

use super::scene::{color, lighten, Anchor, Scene, TextSize, GRID, INK, MUTED};
use super::{OnOffView, PlotData, PoolsView, RateSeries, UsersView};

/// Picture width, pixels.
pub const WIDTH: f64 = 1200.0;
/// Left column (labels, y axes).
const LEFT: f64 = 190.0;
/// Right margin.
const RIGHT: f64 = 30.0;
/// Plot width.
const PLOT_W: f64 = WIDTH - LEFT - RIGHT;
/// Vertical space of a section title.
const TITLE_H: f64 = 60.0;
/// Gap between sections.
const SECTION_GAP: f64 = 30.0;

/// A plot area and its value ranges.
#[derive(Debug, Clone, Copy)]
struct Axes {
    x0: f64,
    y0: f64,
    w: f64,
    h: f64,
    xmin: f64,
    xmax: f64,
    ymin: f64,
    ymax: f64,
    /// The x values are whole numbers (ticks at least 1 apart).
    int_x: bool,
    /// The y values are whole numbers.
    int_y: bool,
}

impl Axes {
    fn px(&self, v: f64) -> f64 {
        self.x0 + (v - self.xmin) / (self.xmax - self.xmin).max(1e-300) * self.w
    }

    fn py(&self, v: f64) -> f64 {
        self.y0 + self.h - (v - self.ymin) / (self.ymax - self.ymin).max(1e-300) * self.h
    }
}

/// A 1-2-5 step giving about `n` ticks over `range`.
fn nice_step(range: f64, n: f64) -> f64 {
    if !(range > 0.0) || !range.is_finite() {
        return 1.0;
    }
    let raw = range / n.max(1.0);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// Multiples of a nice step, at least `min_step`, in `[lo, hi]`.
fn ticks_min(lo: f64, hi: f64, n: f64, min_step: f64) -> (Vec<f64>, f64) {
    let step = nice_step(hi - lo, n).max(min_step);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    let v = (first..=last.min(first + 100))
        .map(|i| i as f64 * step)
        .collect();
    (v, step)
}

/// A number as a tick label: as many decimals as the step needs, k and M for large values.
pub fn fmt_num(v: f64, step: f64) -> String {
    let a = v.abs();
    if a >= 1e6 && step >= 1e5 {
        return format!("{}M", trim(format!("{:.1}", v / 1e6)));
    }
    if a >= 1e4 && step >= 1e3 {
        return format!("{}k", trim(format!("{:.1}", v / 1e3)));
    }
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    trim(format!("{v:.decimals$}"))
}

fn trim(s: String) -> String {
    if s.contains('.') {
        let t = s.trim_end_matches('0').trim_end_matches('.');
        if t == "-0" {
            "0".into()
        } else {
            t.into()
        }
    } else if s == "-0" {
        "0".into()
    } else {
        s
    }
}

/// Seconds as a duration label: `0.25 s`, `15 s`, `2.5 min`, `3 h`.
pub fn fmt_secs(s: f64) -> String {
    if s >= 7200.0 {
        format!("{} h", fmt_num(s / 3600.0, 0.1))
    } else if s >= 120.0 {
        format!("{} min", fmt_num(s / 60.0, 0.1))
    } else if s >= 1.0 {
        format!("{} s", fmt_num(s, 0.01))
    } else {
        format!("{} s", trim(format!("{:.4}", s)))
    }
}

/// The unit of a time axis over `span` seconds.
fn time_unit(span: f64) -> (f64, &'static str) {
    if span >= 7200.0 {
        (3600.0, "h")
    } else if span >= 120.0 {
        (60.0, "min")
    } else {
        (1.0, "s")
    }
}

/// Grid, frame and tick labels of `ax`; x values are shown divided by `xdiv`.
fn frame(s: &mut Scene, ax: &Axes, xdiv: f64, yticks: bool) {
    let min_x = if ax.int_x { 1.0 } else { 0.0 };
    let (xt, xstep) = ticks_min(ax.xmin / xdiv, ax.xmax / xdiv, 8.0, min_x);
    for v in xt {
        let x = ax.px(v * xdiv);
        s.line((x, ax.y0), (x, ax.y0 + ax.h), GRID, 1.0);
        s.line((x, ax.y0 + ax.h), (x, ax.y0 + ax.h + 5.0), INK, 1.0);
        s.text(
            x,
            ax.y0 + ax.h + 22.0,
            fmt_num(v, xstep),
            TextSize::Small,
            Anchor::Middle,
        );
    }
    if yticks {
        let min_y = if ax.int_y { 1.0 } else { 0.0 };
        let (yt, ystep) = ticks_min(ax.ymin, ax.ymax, 4.0, min_y);
        for v in yt {
            let y = ax.py(v);
            s.line((ax.x0, y), (ax.x0 + ax.w, y), GRID, 1.0);
            s.line((ax.x0 - 5.0, y), (ax.x0, y), INK, 1.0);
            s.text(
                ax.x0 - 9.0,
                y + 7.0,
                fmt_num(v, ystep),
                TextSize::Small,
                Anchor::End,
            );
        }
    }
    let (x0, y0, x1, y1) = (ax.x0, ax.y0, ax.x0 + ax.w, ax.y0 + ax.h);
    s.line((x0, y1), (x1, y1), INK, 1.0);
    s.line((x0, y0), (x0, y1), INK, 1.0);
}

fn section_title(s: &mut Scene, top: f64, title: &str, note: &str) {
    s.text(20.0, top + 24.0, title, TextSize::Large, Anchor::Start);
    if !note.is_empty() {
        s.text_colored(
            20.0,
            top + 48.0,
            note,
            TextSize::Small,
            Anchor::Start,
            MUTED,
        );
    }
}

/// The header of the picture; returns its height.
pub fn header(s: &mut Scene, title: &str, subtitle: &str) -> f64 {
    let size = if TextSize::Large.width(title) <= WIDTH - 40.0 {
        TextSize::Large
    } else {
        TextSize::Small
    };
    s.text(20.0, 36.0, title, size, Anchor::Start);
    s.text_colored(20.0, 62.0, subtitle, TextSize::Small, Anchor::Start, MUTED);
    s.line((20.0, 76.0), (WIDTH - 20.0, 76.0), GRID, 2.0);
    84.0
}

/// The series aggregated by `factor` base bins (sums, or means when `mean`), whole groups only.
fn aggregate(base: &[f64], factor: usize, mean: bool) -> Vec<f64> {
    base.chunks_exact(factor)
        .map(|c| {
            let sum: f64 = c.iter().sum();
            if mean {
                sum / factor as f64
            } else {
                sum
            }
        })
        .collect()
}

/// The rate panels; returns the height used.
pub fn rate(s: &mut Scene, top: f64, r: &RateSeries, scales: usize) -> f64 {
    const PANEL_H: f64 = 130.0;
    const PANEL_GAP: f64 = 62.0;
    const MAX_BARS: usize = 2000;
    // As many scales (x1, x10, ...) as leave at least 10 bins at the coarsest.
    let mut n = scales.clamp(1, 5);
    while n > 1 && r.counts.len() / 10usize.pow(n as u32 - 1) < 10 {
        n -= 1;
    }
    let levels: Vec<Vec<f64>> = (0..n)
        .map(|k| aggregate(&r.counts, 10usize.pow(k as u32), r.mean))
        .collect();
    let hurst = crate::stats::hurst_aggregated_variance(
        &r.counts,
        &crate::stats::log_sizes(4, r.counts.len() / 16, 12),
        None,
    )
    .map_or(String::new(), |f| {
        format!("; Hurst {:.2} (aggregated variance; 0.5 = none)", f.h)
    });
    section_title(
        s,
        top,
        &format!("{} per interval at {n} time scales", r.what),
        &format!("each panel zooms into the shaded part of the one above{hurst}"),
    );
    // Windows, coarsest first: (level, first bin, end bin).
    let mut windows = Vec::with_capacity(n);
    let coarse = &levels[n - 1];
    let mut range = (0, coarse.len().min(MAX_BARS));
    for k in (0..n).rev() {
        windows.push((k, range.0, range.1));
        if k > 0 {
            let v = &levels[k];
            let (a, b) = range;
            let busiest = (a..b)
                .max_by(|&i, &j| v[i].total_cmp(&v[j]).then(j.cmp(&i)))
                .unwrap_or(a);
            let start = busiest
                .saturating_sub(4)
                .max(a)
                .min(b.saturating_sub(10).max(a));
            let end = (start + 10).min(b);
            range = (start * 10, (end * 10).min(levels[k - 1].len()));
        }
    }
    let span_all = r.counts.len() as f64 * r.bin;
    let (xdiv, unit) = time_unit(span_all);
    let mut y = top + TITLE_H;
    for (idx, &(k, a, b)) in windows.iter().enumerate() {
        let v = &levels[k];
        let bin = r.bin * 10f64.powi(k as i32);
        let shown = &v[a..b];
        let max = shown.iter().copied().fold(0.0, f64::max);
        let min_step = if r.mean { 0.0 } else { 1.0 };
        let (_, ystep) = ticks_min(0.0, max.max(1e-9), 4.0, min_step);
        let ymax = ((max / ystep).ceil() * ystep).max(ystep);
        let ax = Axes {
            x0: LEFT,
            y0: y + 24.0,
            w: PLOT_W,
            h: PANEL_H,
            xmin: a as f64 * bin,
            xmax: b as f64 * bin,
            ymin: 0.0,
            ymax,
            int_x: false,
            int_y: !r.mean,
        };
        let label = format!(
            "x{}: {} {} ({})",
            10usize.pow(k as u32),
            if r.mean { "mean per" } else { "per" },
            fmt_secs(bin),
            if b - a < v.len() {
                format!("{} of {} bins", b - a, v.len())
            } else {
                format!("{} bins", b - a)
            }
        );
        s.text(LEFT, y + 16.0, label, TextSize::Small, Anchor::Start);
        // The zoom of the next panel, shaded first so the bars stay on top.
        if let Some(&(_, na, nb)) = windows.get(idx + 1) {
            let (za, zb) = (na as f64 * bin / 10.0, nb as f64 * bin / 10.0);
            s.rect(
                ax.px(za),
                ax.y0,
                ax.px(zb) - ax.px(za),
                ax.h,
                [0xff, 0xf1, 0xc4],
            );
        }
        frame(s, &ax, xdiv, true);
        let base = ax.py(0.0);
        let c = color(0);
        for (i, &val) in shown.iter().enumerate() {
            let t = (a + i) as f64 * bin;
            let (x0, x1) = (ax.px(t), ax.px(t + bin));
            let top_y = ax.py(val);
            let w = if x1 - x0 > 3.0 {
                x1 - x0 - 1.0
            } else {
                x1 - x0
            };
            s.rect(x0, top_y, w, base - top_y, c);
        }
        let mean = shown.iter().sum::<f64>() / shown.len().max(1) as f64;
        s.dashed(
            (ax.x0, ax.py(mean)),
            (ax.x0 + ax.w, ax.py(mean)),
            color(3),
            2.0,
        );
        s.text_colored(
            ax.x0 + ax.w,
            ax.y0 - 8.0,
            format!("mean {}", fmt_num(mean, nice_step(mean.max(1e-9), 100.0))),
            TextSize::Small,
            Anchor::End,
            color(3),
        );
        s.vtext(
            LEFT - 62.0,
            ax.y0 + ax.h / 2.0,
            r.what.clone(),
            TextSize::Small,
        );
        y = ax.y0 + ax.h + PANEL_GAP - 24.0;
    }
    s.text(
        LEFT + PLOT_W / 2.0,
        y + 2.0,
        format!("time ({unit})"),
        TextSize::Small,
        Anchor::Middle,
    );
    y + 12.0 - top + SECTION_GAP
}

/// The ON/OFF timeline; returns the height used.
pub fn onoff(s: &mut Scene, top: f64, v: &OnOffView) -> f64 {
    const ROW: f64 = 19.0;
    const STRIP_H: f64 = 80.0;
    section_title(
        s,
        top,
        &format!(
            "ON/OFF timeline: {} of {} sources, first {}",
            v.rows.len(),
            v.sources,
            fmt_secs(v.window)
        ),
        &v.note,
    );
    let on_c = color(0);
    let off_c = [0xee, 0xee, 0xee];
    // Legend.
    let ly = top + TITLE_H + 12.0;
    s.rect(LEFT, ly - 12.0, 24.0, 12.0, on_c);
    s.text(LEFT + 30.0, ly, "ON", TextSize::Small, Anchor::Start);
    s.rect(LEFT + 80.0, ly - 12.0, 24.0, 12.0, off_c);
    s.text(LEFT + 110.0, ly, "OFF", TextSize::Small, Anchor::Start);
    let (xdiv, unit) = time_unit(v.window);
    let rows_top = ly + 14.0;
    let ax = Axes {
        x0: LEFT,
        y0: rows_top,
        w: PLOT_W,
        h: ROW * v.rows.len() as f64,
        xmin: 0.0,
        xmax: v.window,
        ymin: 0.0,
        ymax: 1.0,
        int_x: false,
        int_y: false,
    };
    for (i, (label, on)) in v.rows.iter().enumerate() {
        let y = rows_top + i as f64 * ROW;
        s.rect(LEFT, y + 3.0, PLOT_W, ROW - 6.0, off_c);
        for &(a, b) in on {
            if b <= 0.0 || a >= v.window {
                continue;
            }
            let (x0, x1) = (ax.px(a.max(0.0)), ax.px(b.min(v.window)));
            s.rect(x0, y + 3.0, (x1 - x0).max(1.0), ROW - 6.0, on_c);
        }
        let label: String = label.chars().take(14).collect();
        s.text(
            LEFT - 10.0,
            y + ROW - 2.0,
            label,
            TextSize::Small,
            Anchor::End,
        );
    }
    // The number of ON sources, all of them, under the rows.
    let strip_top = rows_top + ax.h + 16.0;
    let max = v.on_count.iter().copied().fold(0.0, f64::max).max(1.0);
    let (_, ystep) = ticks_min(0.0, max, 3.0, 1.0);
    let sx = Axes {
        x0: LEFT,
        y0: strip_top,
        w: PLOT_W,
        h: STRIP_H,
        xmin: 0.0,
        xmax: v.window,
        ymin: 0.0,
        ymax: ((max / ystep).ceil() * ystep).max(ystep),
        int_x: false,
        int_y: true,
    };
    frame(s, &sx, xdiv, true);
    let n = v.on_count.len().max(1);
    let bw = v.window / n as f64;
    let base = sx.py(0.0);
    for (i, &c) in v.on_count.iter().enumerate() {
        let (x0, x1) = (sx.px(i as f64 * bw), sx.px((i + 1) as f64 * bw));
        s.rect(
            x0,
            sx.py(c),
            (x1 - x0).max(1.0),
            base - sx.py(c),
            lighten(on_c, 0.35),
        );
    }
    s.vtext(
        LEFT - 62.0,
        strip_top + STRIP_H / 2.0,
        "ON",
        TextSize::Small,
    );
    s.text(
        LEFT + PLOT_W / 2.0,
        strip_top + STRIP_H + 44.0,
        format!("time ({unit})"),
        TextSize::Small,
        Anchor::Middle,
    );
    strip_top + STRIP_H + 54.0 - top + SECTION_GAP
}

/// The user-activity histogram; returns the height used.
pub fn users(s: &mut Scene, top: f64, u: &UsersView) -> f64 {
    const H: f64 = 220.0;
    const BINS: usize = 30;
    let all: Vec<f64> = u
        .pools
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|x| *x > 0.0 && x.is_finite())
        .collect();
    let total = all.len();
    section_title(
        s,
        top,
        &format!("{}: histogram over {total} users", u.label),
        if u.pools.len() > 1 {
            "stacked by pool"
        } else {
            ""
        },
    );
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = all.iter().copied().fold(0.0, f64::max);
    let log = total > 0 && hi / lo > 20.0;
    // Whole numbers over a short range: one bin per value.
    let ints = total > 0 && !log && all.iter().all(|x| x.fract() == 0.0) && hi - lo < 40.0;
    let bins = if ints { (hi - lo) as usize + 1 } else { BINS };
    let (a, b) = if total == 0 {
        (0.0, 1.0)
    } else if ints {
        (lo - 0.5, hi + 0.5)
    } else if log {
        (lo.log10(), hi.log10() + 1e-9)
    } else if hi > lo {
        (lo, hi + (hi - lo) * 1e-9)
    } else {
        (lo - 0.5, lo + 0.5)
    };
    let pos = |x: f64| if log { x.log10() } else { x };
    let mut counts = vec![vec![0.0f64; bins]; u.pools.len()];
    for (p, (_, vals)) in u.pools.iter().enumerate() {
        for &x in vals.iter().filter(|x| **x > 0.0 && x.is_finite()) {
            let i = (((pos(x) - a) / (b - a) * bins as f64) as usize).min(bins - 1);
            counts[p][i] += 1.0;
        }
    }
    let stacked: Vec<f64> = (0..bins)
        .map(|i| counts.iter().map(|c| c[i]).sum())
        .collect();
    let max = stacked.iter().copied().fold(0.0, f64::max).max(1.0);
    let (_, ystep) = ticks_min(0.0, max, 4.0, 1.0);
    let ax = Axes {
        x0: LEFT,
        y0: top + TITLE_H + 36.0,
        w: PLOT_W,
        h: H,
        xmin: a,
        xmax: b,
        ymin: 0.0,
        ymax: ((max / ystep).ceil() * ystep).max(ystep),
        int_x: ints,
        int_y: true,
    };
    if log {
        // Decades and their 2 and 5, labelled in real values.
        for e in (a.floor() as i32)..=(b.ceil() as i32) {
            for m in [1.0, 2.0, 5.0] {
                let v = m * 10f64.powi(e);
                let x = v.log10();
                if x < a || x > b {
                    continue;
                }
                let px = ax.px(x);
                s.line((px, ax.y0), (px, ax.y0 + ax.h), GRID, 1.0);
                s.line((px, ax.y0 + ax.h), (px, ax.y0 + ax.h + 5.0), INK, 1.0);
                s.text(
                    px,
                    ax.y0 + ax.h + 22.0,
                    fmt_num(v, 10f64.powi(e)),
                    TextSize::Small,
                    Anchor::Middle,
                );
            }
        }
        let (yt, ys) = ticks_min(ax.ymin, ax.ymax, 4.0, 1.0);
        for v in yt {
            let y = ax.py(v);
            s.line((ax.x0, y), (ax.x0 + ax.w, y), GRID, 1.0);
            s.text(
                ax.x0 - 9.0,
                y + 7.0,
                fmt_num(v, ys),
                TextSize::Small,
                Anchor::End,
            );
        }
        s.line(
            (ax.x0, ax.y0 + ax.h),
            (ax.x0 + ax.w, ax.y0 + ax.h),
            INK,
            1.0,
        );
        s.line((ax.x0, ax.y0), (ax.x0, ax.y0 + ax.h), INK, 1.0);
    } else {
        frame(s, &ax, 1.0, true);
    }
    let bw = (b - a) / bins as f64;
    for i in 0..bins {
        let mut acc = 0.0;
        for (p, c) in counts.iter().enumerate() {
            if c[i] == 0.0 {
                continue;
            }
            let (x0, x1) = (ax.px(a + i as f64 * bw), ax.px(a + (i + 1) as f64 * bw));
            let (y0, y1) = (ax.py(acc + c[i]), ax.py(acc));
            s.rect(x0, y0, (x1 - x0 - 1.0).max(1.0), y1 - y0, color(p));
            acc += c[i];
        }
    }
    // Legend, in a row above the plot.
    let mut x = ax.x0;
    for (p, (name, vals)) in u.pools.iter().enumerate() {
        let label = format!("{name} ({})", vals.len());
        s.rect(x, ax.y0 - 30.0, 14.0, 12.0, color(p));
        s.text(
            x + 20.0,
            ax.y0 - 18.0,
            label.clone(),
            TextSize::Small,
            Anchor::Start,
        );
        x += 20.0 + TextSize::Small.width(&label) + 30.0;
    }
    s.vtext(LEFT - 62.0, ax.y0 + ax.h / 2.0, "users", TextSize::Small);
    s.text(
        LEFT + PLOT_W / 2.0,
        ax.y0 + ax.h + 46.0,
        format!("{}{}", u.label, if log { " (log scale)" } else { "" }),
        TextSize::Small,
        Anchor::Middle,
    );
    ax.y0 + ax.h + 56.0 - top + SECTION_GAP
}

/// The pool map; returns the height used.
pub fn pools(s: &mut Scene, top: f64, p: &PoolsView) -> f64 {
    const ROW: f64 = 78.0;
    const BAR_W: f64 = 220.0;
    let map_x = LEFT + BAR_W + 190.0;
    let has_map = p.rows.iter().any(|r| !r.cells.is_empty());
    let map_w = WIDTH - RIGHT - map_x;
    let title = if has_map {
        format!("pools: share of {} and address map", p.of)
    } else {
        format!("pools: share of {}", p.of)
    };
    section_title(s, top, &title, &p.note);
    let head = top + TITLE_H + 14.0;
    s.text_colored(
        LEFT,
        head,
        format!("share of {}", p.of),
        TextSize::Small,
        Anchor::Start,
        MUTED,
    );
    if has_map {
        s.text_colored(
            map_x,
            head,
            format!("address map (darker = more {})", p.of),
            TextSize::Small,
            Anchor::Start,
            MUTED,
        );
    }
    let max_share = p
        .rows
        .iter()
        .flat_map(|r| [r.target, r.measured])
        .flatten()
        .fold(0.0, f64::max)
        .max(1e-9);
    for (i, r) in p.rows.iter().enumerate() {
        let c = color(i);
        let y = head + 14.0 + i as f64 * ROW;
        s.rect(20.0, y + 4.0, 14.0, 14.0, c);
        let name: String = r.name.chars().take(12).collect();
        s.text(40.0, y + 18.0, name, TextSize::Small, Anchor::Start);
        if r.users > 0 {
            let users = if r.users == 1 { "user" } else { "users" };
            s.text_colored(
                40.0,
                y + 40.0,
                format!("{} {users}", r.users),
                TextSize::Small,
                Anchor::Start,
                MUTED,
            );
        }
        let bars = [
            (r.target, p.target_label.as_str(), c),
            (r.measured, p.measured_label.as_str(), lighten(c, 0.45)),
        ];
        for (j, (v, label, col)) in bars.iter().enumerate() {
            let Some(v) = v else { continue };
            let by = y + 4.0 + j as f64 * 24.0;
            let w = v / max_share * BAR_W;
            s.rect(LEFT, by, w.max(1.0), 18.0, *col);
            s.text(
                LEFT + w + 8.0,
                by + 16.0,
                format!("{:.1}% {label}", v * 100.0).trim_end().to_string(),
                TextSize::Small,
                Anchor::Start,
            );
        }
        if r.cells.is_empty() {
            continue;
        }
        // The address map.
        s.rect(map_x, y + 4.0, map_w, 28.0, [0xf2, 0xf2, 0xf2]);
        let cmax = r.cells.iter().map(|c| c.1).fold(0.0, f64::max).max(1e-300);
        let cell = (map_w * r.cell_width).max(1.0);
        for &(pos, share) in &r.cells {
            let t = 1.0 - (share / cmax).sqrt();
            s.rect(
                map_x + pos * map_w,
                y + 4.0,
                cell,
                28.0,
                lighten(c, 0.1 + 0.8 * t),
            );
        }
        s.line((map_x, y + 33.0), (map_x + map_w, y + 33.0), INK, 1.0);
        if let Some(range) = &r.range {
            s.text_colored(
                map_x,
                y + 54.0,
                range,
                TextSize::Small,
                Anchor::Start,
                MUTED,
            );
        }
    }
    head + 14.0 + p.rows.len() as f64 * ROW - top + SECTION_GAP
}

/// Lays out every section of `data` that `want` selects; the scene's height fits them.
pub fn compose(data: &PlotData, want: &[super::What], scales: usize) -> Scene {
    use super::What;
    let mut s = Scene::new(WIDTH as u32, 100);
    let mut y = header(&mut s, &data.title, &data.subtitle);
    for w in want {
        y += match (w, data) {
            (What::Rate, PlotData { rate: Some(r), .. }) => {
                let h = rate(&mut s, y, r, scales);
                h + data
                    .answer
                    .as_ref()
                    .map_or(0.0, |a| rate(&mut s, y + h, a, 1))
            }
            (What::Onoff, PlotData { onoff: Some(v), .. }) => onoff(&mut s, y, v),
            (What::Users, PlotData { users: Some(u), .. }) => users(&mut s, y, u),
            (What::Pools, PlotData { pools: Some(p), .. }) => pools(&mut s, y, p),
            _ => 0.0,
        };
    }
    s.height = (y + 10.0).ceil() as u32;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_and_labels() {
        assert_eq!(nice_step(10.0, 5.0), 2.0);
        assert_eq!(nice_step(0.07, 4.0), 0.02);
        let (t, step) = ticks_min(0.0, 100.0, 4.0, 0.0);
        assert_eq!(ticks_min(0.0, 2.0, 4.0, 1.0).0, vec![0.0, 1.0, 2.0]);
        assert_eq!((t, step), (vec![0.0, 50.0, 100.0], 50.0));
        assert_eq!(fmt_num(0.25, 0.05), "0.25");
        assert_eq!(fmt_num(3.0, 1.0), "3");
        assert_eq!(fmt_num(20_000.0, 5_000.0), "20k");
        assert_eq!(fmt_num(2_500_000.0, 500_000.0), "2.5M");
        assert_eq!(fmt_num(-0.0, 0.1), "0");
        assert_eq!(fmt_secs(0.25), "0.25 s");
        assert_eq!(fmt_secs(90.0), "90 s");
        assert_eq!(fmt_secs(600.0), "10 min");
        assert_eq!(fmt_secs(86400.0), "24 h");
    }

    #[test]
    fn aggregation_keeps_whole_groups() {
        let v: Vec<f64> = (0..25).map(f64::from).collect();
        assert_eq!(aggregate(&v, 10, false), vec![45.0, 145.0]);
        assert_eq!(aggregate(&v, 10, true), vec![4.5, 14.5]);
    }
}
