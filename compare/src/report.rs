//! The HTML report of a comparison file: one static page, no script, no outside resource.
//!
//! Owns: [`Report`] (built from the [`Line`]s of a file: per endpoint the counts of the last
//! tick, the differing fields with an example each, fields learned as noise left out; the
//! difference rate between consecutive ticks) and [`Report::html`] (a table of endpoints ranked
//! by difference rate, worst first, with `id="ep-N"` rows, and an inline SVG of the difference
//! rate over time). Every text from the file is HTML-escaped; the values of credential headers
//! are redacted ([`crate::redact`]) even when the file holds them.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;

use crate::fields::generalize;
use crate::jsonl::Line;
use crate::redact::Redact;

/// One endpoint of the report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EndpointRow {
    /// Endpoint.
    pub endpoint: String,
    /// Exchanges compared (from the last tick; diff lines when there is none).
    pub compared: u64,
    /// Differing exchanges.
    pub differing: u64,
    /// Differing fields (generalized) -> (exchanges in the file, an example `online -> test`).
    pub fields: BTreeMap<String, (u64, String)>,
    /// Noise learned.
    pub noise: Vec<String>,
    /// Answer-time ratio test/online at p50 and p99.
    pub ratio: (Option<f64>, Option<f64>),
}

impl EndpointRow {
    /// Differing over compared.
    pub fn rate(&self) -> f64 {
        if self.compared == 0 {
            0.0
        } else {
            self.differing as f64 / self.compared as f64
        }
    }
}

/// The report's content.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Endpoints, worst first.
    pub rows: Vec<EndpointRow>,
    /// (ms since epoch, difference rate in that interval) between consecutive ticks.
    pub series: Vec<(u64, f64)>,
    /// Lines read.
    pub lines: usize,
}

impl Report {
    /// Builds the report from the lines of a file (oldest first), the values of the default
    /// credential headers redacted ([`crate::redact::DEFAULT_REDACTED`]).
    pub fn from_lines(lines: &[Line]) -> Report {
        Report::from_lines_redacted(lines, &Redact::default())
    }

    /// Builds the report, the values of the headers in `redact` replaced by markers (again: a
    /// file written with redaction off, or by an older version, may hold them).
    pub fn from_lines_redacted(lines: &[Line], redact: &Redact) -> Report {
        let mut rows: BTreeMap<String, EndpointRow> = BTreeMap::new();
        let mut noise: HashSet<(String, String)> = HashSet::new();
        let mut last_tick: Option<&Vec<crate::jsonl::TickEndpoint>> = None;
        let mut prev: Option<(u64, u64)> = None;
        let mut series = Vec::new();
        for l in lines {
            match l {
                Line::Noise {
                    endpoint, field, ..
                } => {
                    noise.insert((endpoint.clone(), generalize(field)));
                }
                Line::Tick { t, endpoints } => {
                    let (c, d) = endpoints
                        .iter()
                        .fold((0, 0), |a, e| (a.0 + e.compared, a.1 + e.differing));
                    if let Some((pc, pd)) = prev {
                        if c > pc {
                            series.push((*t, d.saturating_sub(pd) as f64 / (c - pc) as f64));
                        }
                    }
                    prev = Some((c, d));
                    last_tick = Some(endpoints);
                }
                Line::Diff {
                    endpoint, diffs, ..
                } => {
                    let row = rows.entry(endpoint.clone()).or_insert_with(|| EndpointRow {
                        endpoint: endpoint.clone(),
                        ..EndpointRow::default()
                    });
                    row.differing += 1;
                    let mut seen = HashSet::new();
                    for d in diffs {
                        let mut d = d.clone();
                        redact.diff(&mut d);
                        let g = generalize(&d.field);
                        if !seen.insert(g.clone()) {
                            continue;
                        }
                        let e = row.fields.entry(g).or_insert_with(|| {
                            let v =
                                |x: &Option<String>| x.clone().unwrap_or_else(|| "(absent)".into());
                            let mut ex = format!("{} -> {}", v(&d.online), v(&d.test));
                            if let Some(o) = d.offset {
                                ex.push_str(&format!(" (first difference at byte {o})"));
                            }
                            (0, ex)
                        });
                        e.0 += 1;
                    }
                }
            }
        }
        if let Some(tick) = last_tick {
            for e in tick {
                let row = rows
                    .entry(e.endpoint.clone())
                    .or_insert_with(|| EndpointRow {
                        endpoint: e.endpoint.clone(),
                        ..EndpointRow::default()
                    });
                row.compared = e.compared;
                row.differing = e.differing;
                row.ratio = (e.ratio_p50, e.ratio_p99);
            }
        }
        let mut rows: Vec<EndpointRow> = rows
            .into_values()
            .map(|mut r| {
                r.fields
                    .retain(|f, _| !noise.contains(&(r.endpoint.clone(), f.clone())));
                r.noise = noise
                    .iter()
                    .filter(|(e, _)| *e == r.endpoint)
                    .map(|(_, f)| f.clone())
                    .collect();
                r.noise.sort();
                if r.compared < r.differing {
                    r.compared = r.differing;
                }
                r
            })
            .collect();
        rows.sort_by(|a, b| {
            b.rate()
                .total_cmp(&a.rate())
                .then(a.endpoint.cmp(&b.endpoint))
        });
        Report {
            rows,
            series,
            lines: lines.len(),
        }
    }

    /// The page.
    pub fn html(&self, title: &str) -> String {
        let mut h = String::new();
        let (c, d) = self
            .rows
            .iter()
            .fold((0, 0), |a, r| (a.0 + r.compared, a.1 + r.differing));
        let _ = write!(
            h,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\n<style>\
body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;vertical-align:top}}\
th{{background:#eee}}td.num{{text-align:right}}code{{font-size:90%}}.noise{{color:#777}}</style></head><body>\n\
<h1>{t}</h1>\n<p id=\"totals\">{c} exchanges compared, {d} differing ({r:.2}%), {e} endpoints, {n} lines read.</p>\n",
            t = esc(title),
            r = if c == 0 { 0.0 } else { 100.0 * d as f64 / c as f64 },
            e = self.rows.len(),
            n = self.lines,
        );
        h.push_str("<h2>Difference rate over time</h2>\n");
        h.push_str(&self.svg());
        h.push_str(
            "\n<h2>Endpoints by difference rate</h2>\n<table id=\"endpoints\"><thead><tr><th>endpoint</th><th>compared</th>\
<th>differing</th><th>rate</th><th>time ratio p50 / p99</th><th>differing fields (exchanges, example online -&gt; test)</th>\
<th>noise learned</th></tr></thead><tbody>\n",
        );
        for (i, r) in self.rows.iter().enumerate() {
            let fields: Vec<String> = r
                .fields
                .iter()
                .map(|(f, (n, ex))| {
                    format!(
                        "<li><code class=\"field\">{}</code> ({n}): {}</li>",
                        esc(f),
                        esc(ex)
                    )
                })
                .collect();
            let noise: Vec<String> = r
                .noise
                .iter()
                .map(|f| format!("<code>{}</code>", esc(f)))
                .collect();
            let ratio = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}"));
            let _ = writeln!(
                h,
                "<tr id=\"ep-{i}\" class=\"endpoint\"><td class=\"name\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
<td class=\"num rate\">{:.2}%</td><td class=\"num\">{} / {}</td><td><ul>{}</ul></td><td class=\"noise\">{}</td></tr>",
                esc(&r.endpoint),
                r.compared,
                r.differing,
                100.0 * r.rate(),
                ratio(r.ratio.0),
                ratio(r.ratio.1),
                fields.join(""),
                noise.join(" ")
            );
        }
        h.push_str("</tbody></table>\n</body></html>\n");
        h
    }

    fn svg(&self) -> String {
        const W: f64 = 640.0;
        const H: f64 = 200.0;
        const PAD: f64 = 40.0;
        let mut s = format!(
            "<svg id=\"rate\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\">\
<rect x=\"0\" y=\"0\" width=\"{W}\" height=\"{H}\" fill=\"white\" stroke=\"#ccc\"/>"
        );
        if self.series.is_empty() {
            s.push_str(
                "<text x=\"20\" y=\"100\">no interval to draw (fewer than two ticks)</text></svg>",
            );
            return s;
        }
        let t0 = self.series[0].0 as f64;
        let t1 = (self.series.last().map_or(t0, |p| p.0 as f64)).max(t0 + 1.0);
        let top = self
            .series
            .iter()
            .map(|p| p.1)
            .fold(0.0f64, f64::max)
            .max(0.01);
        let x = |t: u64| PAD + (t as f64 - t0) / (t1 - t0) * (W - 2.0 * PAD);
        let y = |r: f64| H - PAD + -(r / top) * (H - 2.0 * PAD);
        let pts: Vec<String> = self
            .series
            .iter()
            .map(|&(t, r)| format!("{:.1},{:.1}", x(t), y(r)))
            .collect();
        let _ = write!(
            s,
            "<line x1=\"{PAD}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/>\
<line x1=\"{PAD}\" y1=\"{PAD}\" x2=\"{PAD}\" y2=\"{b}\" stroke=\"black\"/>\
<text x=\"2\" y=\"{PAD}\" font-size=\"11\">{top:.1}%</text><text x=\"2\" y=\"{b}\" font-size=\"11\">0%</text>\
<text x=\"{PAD}\" y=\"{lb}\" font-size=\"11\">0 s</text><text x=\"{r2}\" y=\"{lb}\" font-size=\"11\">{span:.0} s</text>\
<polyline id=\"rate-line\" fill=\"none\" stroke=\"#c00\" stroke-width=\"2\" points=\"{p}\"/></svg>",
            b = H - PAD,
            r = W - PAD,
            r2 = W - PAD - 30.0,
            lb = H - PAD + 15.0,
            top = top * 100.0,
            span = (t1 - t0) / 1000.0,
            p = pts.join(" "),
        );
        s
    }
}

/// HTML-escapes text ([`common::markup::escape`]).
pub use common::markup::escape as esc;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::{FieldDiff, Kind};
    use crate::jsonl::TickEndpoint;

    fn diff(ep: &str, field: &str) -> Line {
        Line::Diff {
            t: 5,
            endpoint: ep.into(),
            request: "GET /x".into(),
            outcome: "differ".into(),
            diffs: vec![FieldDiff {
                field: field.into(),
                kind: Kind::BodyField,
                online: Some("1".into()),
                test: Some("<b>".into()),
                offset: None,
            }],
            diff_count: 1,
            online_ms: None,
            test_ms: None,
        }
    }

    fn tick(t: u64, a: (u64, u64), b: (u64, u64)) -> Line {
        let ep = |n: &str, (c, d): (u64, u64)| TickEndpoint {
            endpoint: n.into(),
            compared: c,
            differing: d,
            ratio_p50: Some(1.5),
            ratio_p99: None,
        };
        Line::Tick {
            t,
            endpoints: vec![ep("GET /a", a), ep("GET /b", b)],
        }
    }

    #[test]
    fn ranks_filters_noise_and_draws() {
        let lines = vec![
            tick(1000, (0, 0), (0, 0)),
            diff("GET /b", "$.items[0].price"),
            diff("GET /b", "$.items[1].price"),
            diff("GET /b", "$.ts"),
            Line::Noise {
                t: 6,
                endpoint: "GET /b".into(),
                field: "$.ts".into(),
            },
            diff("GET /a", "status"),
            tick(11000, (100, 10), (50, 40)),
            tick(21000, (200, 10), (100, 90)),
        ];
        let r = Report::from_lines(&lines);
        assert_eq!(r.rows[0].endpoint, "GET /b");
        assert_eq!((r.rows[0].compared, r.rows[0].differing), (100, 90));
        assert_eq!(
            r.rows[0].fields.keys().collect::<Vec<_>>(),
            ["$.items[*].price"]
        );
        assert_eq!(r.rows[0].fields["$.items[*].price"].0, 2);
        assert_eq!(r.rows[0].noise, ["$.ts"]);
        assert_eq!(r.rows[1].endpoint, "GET /a");
        assert_eq!(r.series, vec![(11000, 50.0 / 150.0), (21000, 50.0 / 150.0)]);
        let h = r.html("a <report>");
        assert!(h.contains("<title>a &lt;report&gt;</title>"));
        assert!(h.contains("1 -&gt; &lt;b&gt;"));
        assert!(h.contains("<polyline id=\"rate-line\""));
        assert!(h.find("GET /b").unwrap() < h.find("GET /a").unwrap());
        assert!(!h.contains("<script"));
    }

    #[test]
    fn credential_values_in_an_old_file_are_redacted() {
        let mut l = diff("GET /a", "header:Set-Cookie");
        if let Line::Diff { diffs, .. } = &mut l {
            diffs[0].field = "header:set-cookie".into();
            diffs[0].online = Some("sid=0nline-s3cr3t".into());
            diffs[0].test = Some("sid=test-s3cr3t".into());
        }
        let h = Report::from_lines(&[l.clone()]).html("x");
        assert!(!h.contains("s3cr3t"), "{h}");
        assert!(h.contains("[redacted] -&gt; [redacted, differs]"), "{h}");
        let h = Report::from_lines_redacted(&[l], &Redact::none()).html("x");
        assert!(h.contains("sid=test-s3cr3t"), "redaction off");
    }

    #[test]
    fn empty_file() {
        let r = Report::from_lines(&[]);
        let h = r.html("x");
        assert!(h.contains("0 exchanges compared"));
        assert!(h.contains("fewer than two ticks"));
    }
}
