//! Pictures of every kind of input, for every section, in both formats: the SVG is well formed,
//! the PNG has the right signature and size, and the views hold what their input says.

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::scene::Item;
use super::*;
use crate::check::Trace;
use crate::onoff::Plan;
use crate::Profile;

/// Checks that `svg` is one `<svg>` element whose tags all balance, with escaped text.
pub(crate) fn assert_well_formed_svg(svg: &str) {
    assert!(svg.starts_with("<svg "), "{}", &svg[..svg.len().min(80)]);
    let mut stack: Vec<&str> = Vec::new();
    let mut rest = svg;
    let mut roots = 0;
    while let Some(open) = rest.find('<') {
        let text = &rest[..open];
        assert!(!text.contains('>'), "stray '>' in text {text:?}");
        if let Some(amp) = text.find('&') {
            let ent = &text[amp..];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"]
                    .iter()
                    .any(|e| ent.starts_with(e)),
                "bare & in {text:?}"
            );
        }
        let close = rest[open..].find('>').expect("unclosed tag") + open;
        let tag = &rest[open + 1..close];
        assert!(!tag.contains('<'), "'<' inside a tag: {tag:?}");
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop(), Some(name.trim()), "closing {name}");
        } else if !tag.ends_with('/') {
            let name = tag.split_whitespace().next().unwrap_or("");
            if stack.is_empty() {
                roots += 1;
            }
            stack.push(name);
        } else if stack.is_empty() {
            panic!("an element outside the root: {tag}");
        }
        // Attribute values are quoted in pairs.
        assert_eq!(tag.matches('"').count() % 2, 0, "{tag}");
        rest = &rest[close + 1..];
    }
    assert!(stack.is_empty(), "unclosed {stack:?}");
    assert_eq!(roots, 1);
    assert!(rest.trim().is_empty());
}

/// The width and height in a PNG's IHDR, after checking the signature.
pub(crate) fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&png[12..16], b"IHDR");
    let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!(&png[png.len() - 8..png.len() - 4], b"IEND");
    (w, h)
}

fn profile() -> Profile {
    Profile::from_toml_str(
        "[onoff]\nsources = 16\n\
         [[pools]]\nname = \"home\"\nweight = 3\ncidr = \"198.19.0.0/24\"\nusers = 200\n\
         [[pools]]\nname = \"office\"\ncidr = \"198.19.1.0/26\"\nusers = 40\n\
         activity = { table = [[1.0, 0.5], [10.0, 0.5]] }\n",
    )
    .unwrap()
}

fn plan_data() -> PlotData {
    let p = profile();
    let mut rng = StdRng::seed_from_u64(5);
    let plan = Plan::generate(&p.onoff_model().unwrap(), 16, 2000.0, &mut rng).unwrap();
    let users = crate::users::UserTable::generate(&p.pool_specs().unwrap(), &mut rng).unwrap();
    let opts = PlotOptions {
        draws: 20_000,
        ..PlotOptions::default()
    };
    PlotData::from_plan(&plan, Some(&users), Some(&p), &opts, &mut rng)
}

fn texts(s: &scene::Scene) -> Vec<String> {
    s.items
        .iter()
        .filter_map(|i| match i {
            Item::Text { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_plan_has_every_section_in_both_formats() {
    let d = plan_data();
    let rate = d.rate.as_ref().unwrap();
    assert!(
        (rate.bin - 0.2).abs() < 1e-12,
        "2000 s / 10^4: {}",
        rate.bin
    );
    assert_eq!(rate.counts.len(), 10_000);
    let on = d.onoff.as_ref().unwrap();
    assert_eq!((on.rows.len(), on.sources), (16, 16));
    // No more ON sources than sources, and some ON at some point.
    assert!(on.on_count.iter().all(|c| *c <= 16.0) && on.on_count.iter().any(|c| *c > 0.0));
    let pools = d.pools.as_ref().unwrap();
    assert_eq!(pools.rows.len(), 2);
    assert_eq!(pools.rows[0].target, Some(0.75));
    assert!((pools.rows[0].measured.unwrap() - 0.75).abs() < 0.02);
    assert_eq!(pools.rows[0].users, 200);
    // The office's 40 users start at the base of their /26 (the first usable address).
    assert!(pools.rows[1]
        .cells
        .iter()
        .all(|c| c.0 > 0.0 && c.0 < 41.0 / 64.0));
    assert_eq!(
        pools.rows[1].range.as_deref(),
        Some("198.19.1.0/26: 64 addresses")
    );
    let users = d.users.as_ref().unwrap();
    assert!(users.pools[1].1.iter().filter(|a| **a == 10.0).count() > 5);

    for what in [What::Rate, What::Onoff, What::Users, What::Pools, What::All] {
        let scene = d.scene(what, "a plan", 3).unwrap();
        assert_eq!(scene.width, 1200);
        assert!(
            scene.height > 150 && scene.height < 3000,
            "{what}: {}",
            scene.height
        );
        let svg = String::from_utf8(d.render(what, "a plan", 3, Format::Svg).unwrap()).unwrap();
        assert_well_formed_svg(&svg);
        let png = d.render(what, "a plan", 3, Format::Png).unwrap();
        assert_eq!(png_size(&png), (scene.width, scene.height), "{what}");
        assert!(png.len() < 400_000, "{what}: {} bytes", png.len());
    }
    let all = texts(&d.scene(What::All, "a plan", 3).unwrap());
    for want in [
        "x1: mean per 0.2 s",
        "x10: mean per 2 s",
        "x100: mean per 20 s",
    ] {
        assert!(all.iter().any(|t| t.starts_with(want)), "{want} in {all:?}");
    }
    assert!(all.iter().any(|t| t == "75.0% weight"), "{all:?}");
    assert!(all.iter().any(|t| t.starts_with("home (200)")), "{all:?}");
}

#[test]
fn sections_an_input_lacks_are_named() {
    let tr = Trace::from_csv("time_s,pool\n0,a\n1,b\n2,a\n").unwrap();
    let d = PlotData::from_trace(&tr, &PlotOptions::default());
    assert!(d.onoff.is_none() && d.users.is_none());
    let e = d.scene(What::Onoff, "a trace", 3).unwrap_err().to_string();
    assert!(
        e.starts_with("--what onoff: a trace has no onoff to draw"),
        "{e}"
    );
    // `all` draws what there is.
    let s = d.scene(What::All, "a trace", 3).unwrap();
    let t = texts(&s);
    assert!(t.iter().any(|x| x == "66.7%"), "{t:?}");
}

#[test]
fn a_trace_with_sources_shows_their_bursts() {
    let mut csv = String::from("time_s,source\n");
    // Source 0: bursts [0, 0.4] and [10, 10.2]; source 1: one request at 5.
    for t in [0.0, 0.2, 0.4, 10.0, 10.2] {
        csv.push_str(&format!("{t},0\n"));
    }
    csv.push_str("5,1\n");
    let tr = Trace::from_csv(&csv).unwrap();
    let d = PlotData::from_trace(
        &tr,
        &PlotOptions {
            bin: Some(0.1),
            ..PlotOptions::default()
        },
    );
    let on = d.onoff.unwrap();
    // Unit: the median short gap, 0.2 s.
    let b0 = &on.rows[0].1;
    assert_eq!(b0.len(), 2);
    assert!(
        (b0[0].1 - 0.6).abs() < 1e-9 && (b0[1].1 - 10.4).abs() < 1e-9,
        "{b0:?}"
    );
    assert_eq!(on.rows[1].1.len(), 1);
    let rate = d.rate.unwrap();
    assert_eq!(rate.counts.iter().sum::<f64>(), 6.0);
    assert_eq!(d.users.unwrap().pools[0].1, vec![5.0, 1.0]);
}

#[test]
fn text_in_svg_is_escaped() {
    let mut d = plan_data();
    d.title = "a <b> & \"c\"".into();
    let svg = String::from_utf8(d.render(What::Rate, "x", 2, Format::Svg).unwrap()).unwrap();
    assert!(svg.contains("a &lt;b&gt; &amp; &quot;c&quot;"));
    assert_well_formed_svg(&svg);
}

#[test]
fn what_and_format_parse() {
    assert_eq!("Onoff".parse::<What>(), Ok(What::Onoff));
    assert_eq!("all".parse::<What>(), Ok(What::All));
    assert!("rates".parse::<What>().is_err());
    assert_eq!(
        Format::of_path(std::path::Path::new("x/a.PNG")),
        Some(Format::Png)
    );
    assert_eq!(
        Format::of_path(std::path::Path::new("a.svg")),
        Some(Format::Svg)
    );
    assert_eq!(Format::of_path(std::path::Path::new("a.jpg")), None);
}

#[test]
fn default_bins_are_1_2_5() {
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12 * b;
    assert!(close(data::default_bin(86_400.0), 10.0));
    assert!(close(data::default_bin(2_000.0), 0.2));
    assert!(close(data::default_bin(300.0), 0.02));
    assert!(close(data::default_bin(45.0), 0.005));
}

#[test]
fn a_trace_with_answer_times_draws_them_under_the_rate() {
    let tr =
        Trace::from_csv("time_s,pool,answer_s\n0,a,0.2\n0.5,a,0.4\n1.5,b,-\n2.5,a,0.1\n").unwrap();
    let opts = PlotOptions {
        bin: Some(1.0),
        ..PlotOptions::default()
    };
    let d = PlotData::from_trace(&tr, &opts);
    let a = d.answer.as_ref().expect("an answer series");
    assert!(a.mean);
    assert_eq!(a.counts.len(), 3);
    assert!(
        (a.counts[0] - 0.3).abs() < 1e-9 && a.counts[1] == 0.0 && (a.counts[2] - 0.1).abs() < 1e-9,
        "{:?}",
        a.counts
    );
    let t = texts(&d.scene(What::Rate, "a trace", 3).unwrap());
    assert!(t.iter().any(|x| x.starts_with("answer time")), "{t:?}");
}
