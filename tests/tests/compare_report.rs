//! `copier compare-report` in a real headless Chromium: a comparison file written by the
//! comparison library (a candidate that changes one JSON field of one endpoint and fails
//! another, a noisy baseline) is turned into a page by the real binary, and the DOM Chromium
//! builds from it must rank exactly those two endpoints first, name their fields, list the
//! noise, and hold the picture of the difference rate over time. Skips loudly without
//! Chromium (a failure under CI=true: scripts/install-deps.sh installs it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use compare::jsonl::{JsonlWriter, Line};
use compare::{Comparator, CompareConfig, Exchange, Reply};

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|c| {
            let out = Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {c}"))
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        })
}

fn answer(version: u8, noisy: bool, target: &str, seq: u64) -> Vec<u8> {
    let (status, body) = if let Some(n) = target.strip_prefix("/items/") {
        let n: u64 = n.parse().unwrap();
        let price = if version == 2 { n + 100 } else { n };
        let ts = if noisy {
            format!(",\"ts\":{}", 1_700_000_000_000u64 + seq)
        } else {
            String::new()
        };
        (200, format!("{{\"id\":{n},\"price\":{price}{ts}}}"))
    } else if target.starts_with("/orders/") && version == 2 {
        (500, "{\"error\":\"boom\"}".to_string())
    } else {
        (200, "{\"state\":\"ok\"}".to_string())
    };
    format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn write_file(path: &Path) {
    let mut c = Comparator::new(CompareConfig::default());
    let mut w = JsonlWriter::create(path, 1 << 20, 2, 1.0).unwrap();
    let reply = |b: Vec<u8>| Reply {
        bytes: b,
        complete: true,
        time: Some(Duration::from_millis(3)),
    };
    let t0 = 1_700_000_000_000u64;
    for seq in 0..300u64 {
        let target = match seq % 3 {
            0 => format!("/items/{}", seq % 7),
            1 => format!("/orders/{}", seq % 5),
            _ => "/health".to_string(),
        };
        let ex = Exchange {
            port: 80,
            request: format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes(),
            online: reply(answer(1, false, &target, seq)),
            candidate: reply(answer(2, true, &target, seq)),
            baseline: Some(reply(answer(1, true, &target, seq))),
            baseline_expected: true,
        };
        let v = c.compare(&ex);
        let t = t0 + seq * 100;
        w.write_verdict(&v, t).unwrap();
        if seq % 30 == 29 {
            w.write(&Line::tick(t, &c)).unwrap();
        }
    }
    w.flush().unwrap();
}

#[test]
fn report_page_in_headless_chromium() {
    let Some(browser) = chromium() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("compare_report: chromium is missing under CI=true (scripts/install-deps.sh installs it)");
        }
        eprintln!("\n!!!!!!!! SKIPPED report_page_in_headless_chromium: no chromium !!!!!!!!\n");
        return;
    };
    let dir = std::env::temp_dir().join(format!("compare-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("diff.jsonl");
    write_file(&file);
    let page = dir.join("report.html");
    let copier = lab::workspace_bin("copier").unwrap();
    let out = Command::new(&copier)
        .args(["compare-report"])
        .arg(&file)
        .arg("-o")
        .arg(&page)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "compare-report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // a missing file is a clear error naming it
    let bad = Command::new(&copier)
        .args(["compare-report", "/nonexistent/x.jsonl", "-o"])
        .arg(dir.join("x.html"))
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("/nonexistent/x.jsonl"));

    let profile = dir.join("profile");
    let dom = Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        dom.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        dom.contains("<table id=\"endpoints\">"),
        "no table in the DOM:\n{dom}"
    );
    // rows in rank order: orders fail always (100%), items always differ in price, health never
    let row = |i: usize| {
        let start = dom
            .find(&format!("<tr id=\"ep-{i}\""))
            .unwrap_or_else(|| panic!("row {i} missing:\n{dom}"));
        let end = dom[start..].find("</tr>").unwrap() + start;
        dom[start..end].to_string()
    };
    let (r0, r1, r2) = (row(0), row(1), row(2));
    assert!(
        r0.contains("GET /items/{n}") || r0.contains("GET /orders/{n}"),
        "{r0}"
    );
    let (items, orders) = if r0.contains("items") {
        (&r0, &r1)
    } else {
        (&r1, &r0)
    };
    assert!(
        items.contains("$.price") && !items.contains("class=\"field\">$.ts"),
        "{items}"
    );
    assert!(
        items.contains("$.ts") && !items.contains("header:"),
        "noise listed: {items}"
    );
    assert!(
        orders.contains("class=\"field\">status</code>") && orders.contains("100.00%"),
        "{orders}"
    );
    assert!(r2.contains("GET /health") && r2.contains("0.00%"), "{r2}");
    assert!(
        !dom.contains("<tr id=\"ep-3\""),
        "one endpoint too many:\n{dom}"
    );
    // the picture: an SVG with a line of at least two points, parsed as SVG by the browser
    let svg = dom.find("<svg id=\"rate\"").expect("no svg");
    let pts = dom[svg..]
        .split("points=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert!(pts.split(' ').count() >= 2, "{pts}");
    assert!(
        dom.contains("300 exchanges compared, 200 differing"),
        "{dom}"
    );
}
