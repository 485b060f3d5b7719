//! `copier compare-report FILE -o PAGE.html`: the static HTML report of a comparison's JSON
//! Lines file (and its rotated predecessors `FILE.1` ..), drawn by `compare::report`.

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

    /// The page's title.
    #[arg(long, default_value = "Shadow comparison")]
    pub title: String,
}

/// Writes the page; returns the line printed on success.
pub fn main(a: &ReportArgs) -> Result<String> {
    let rb = compare::jsonl::read_lines(&a.file).map_err(anyhow::Error::msg).context("reading the comparison file")?;
    if rb.lines.is_empty() && rb.bad > 0 {
        let (f, n) = rb.first_bad.clone().unwrap_or_default();
        bail!("{}: no comparison line understood ({} bad, the first at {} line {n})", a.file.display(), rb.bad, f.display());
    }
    let report = compare::report::Report::from_lines(&rb.lines);
    std::fs::write(&a.output, report.html(&a.title)).with_context(|| format!("writing {}", a.output.display()))?;
    let mut msg = format!(
        "compare-report: {} endpoints from {} lines written to {}",
        report.rows.len(),
        rb.lines.len(),
        a.output.display()
    );
    if let Some((f, n)) = rb.first_bad {
        msg.push_str(&format!(" ({} lines not understood, the first at {} line {n})", rb.bad, f.display()));
    }
    Ok(msg)
}
