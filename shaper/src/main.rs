//! `shaper`: tools to plan, fit, check and plot traffic-shaping profiles.
//!
//! Not built yet: see the shaper issue. The binary exists so that the workspace layout is final.

use clap::Parser;

/// Plans, fits, checks and plots traffic-shaping profiles for the copier (not built yet: every
/// subcommand is still to come, and this binary says so instead of pretending).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _ = Cli::parse();
    anyhow::bail!("shaper: no subcommand is built yet; traffic shaping is planned (see docs/DESIGN.md)")
}
