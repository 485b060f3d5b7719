//! `copier compare-report FILE -o PAGE.html`: the static HTML report of a comparison's JSON
//! Lines file (and its rotated predecessors `FILE.1` ..), drawn by `compare::report`. The page
//! shows production answers' values: it is written 0600 (`common::private`).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

/// `copier compare-report`: turns a comparison file into a page.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The JSON Lines file written by --compare-log (its rotated files FILE.1, FILE.2 ... are
    /// read first, oldest first).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Where to write the page.
    #[arg(short = 'o', long = "output", value_name = "PAGE.html")]
    pub output: PathBuf,

    /// Headers whose values the page never shows (comma separated; `none`: show them all). A
    /// difference reads `[redacted] -> [redacted, differs]`.
    #[arg(
        long,
        value_name = "HEADERS",
        value_delimiter = ',',
        default_value = "authorization,cookie,set-cookie,proxy-authorization"
    )]
    pub redact: Vec<String>,

    /// The page's title.
    #[arg(long, default_value = "Shadow comparison")]
    pub title: String,
}

/// Writes the page; returns the line printed on success.
pub fn main(a: &ReportArgs) -> Result<String> {
    let rb = compare::jsonl::read_lines(&a.file)
        .map_err(anyhow::Error::msg)
        .context("reading the comparison file")?;
    if rb.lines.is_empty() && rb.bad > 0 {
        let (f, n) = rb.first_bad.clone().unwrap_or_default();
        bail!(
            "{}: no comparison line understood ({} bad, the first at {} line {n})",
            a.file.display(),
            rb.bad,
            f.display()
        );
    }
    let report = compare::report::Report::from_lines_redacted(
        &rb.lines,
        &compare::redact::Redact::from_list(&a.redact),
    );
    common::private::write(&a.output, report.html(&a.title).as_bytes())
        .with_context(|| format!("writing {}", a.output.display()))?;
    let mut msg = format!(
        "compare-report: {} endpoints from {} lines written to {}",
        report.rows.len(),
        rb.lines.len(),
        a.output.display()
    );
    if let Some((f, n)) = rb.first_bad {
        msg.push_str(&format!(
            " ({} lines not understood, the first at {} line {n})",
            rb.bad,
            f.display()
        ));
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_page_is_owner_only() {
        let dir = std::env::temp_dir().join(format!("compare-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("diff.jsonl");
        std::fs::write(&file, "{\"type\":\"tick\",\"t\":1,\"endpoints\":[]}\n").unwrap();
        let output = dir.join("page.html");
        let msg = main(&ReportArgs {
            file,
            output: output.clone(),
            title: "t".into(),
            redact: vec!["cookie".into()],
        })
        .unwrap();
        assert!(msg.contains("written to"), "{msg}");
        let mode = std::fs::metadata(&output).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the page shows production answers");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
