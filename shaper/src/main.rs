//! `shaper`: tools to plan and check traffic-shaping profiles for the copier.
//!
//! - `shaper plan PROFILE --duration D --seed S --out DIR` writes `DIR/onoff.csv` (the ON/OFF
//!   schedule of every source) and `DIR/users.csv` (the virtual users), so that a run can be
//!   reproduced and several copiers can share one plan.
//! - `shaper check PROFILE [--seed S] [--duration D]` draws a plan and prints its statistics
//!   against the profile's targets, PASS/FAIL per line; `--plan DIR` checks a written plan
//!   instead, and `--trace CSV` checks what a run sent. Exits non-zero if a line fails.
//!
//! Only this file reads files and prints; the statistics live in `shaper::check`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use rand::rngs::StdRng;
use rand::SeedableRng;
use shaper::check::{check_plan, check_trace, CheckOptions, Trace};
use shaper::onoff::Plan;
use shaper::users::UserTable;
use shaper::Profile;

/// Plans and checks traffic-shaping profiles for the copier (`copier --profile FILE`).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Write the ON/OFF schedule of every source (onoff.csv) and the user table (users.csv).
    Plan {
        /// The profile (TOML).
        profile: PathBuf,
        /// Length of the plan: seconds, or with a unit s, m, h, d (e.g. 90m).
        #[arg(long, value_parser = parse_duration)]
        duration: f64,
        /// Seed of every random draw.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Folder to write the CSVs into (created if missing).
        #[arg(long)]
        out: PathBuf,
    },
    /// Print the statistics of a plan or a trace against the profile's targets.
    Check {
        /// The profile (TOML); optional with --trace (the lines then have no target).
        profile: Option<PathBuf>,
        /// Seed of the plan to draw.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Length of the plan to draw (default 262144 s: 2^16 bins of 4 s).
        #[arg(long, value_parser = parse_duration, default_value = "262144")]
        duration: f64,
        /// Check the plan written by `shaper plan` in this folder instead of drawing one.
        #[arg(long, conflicts_with = "trace")]
        plan: Option<PathBuf>,
        /// Check a trace of sent requests: CSV with a header `time_s` plus `source` and/or `pool`.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Bin width of the count series, seconds (default 4 x onoff.beta_on_s, or 1 s).
        #[arg(long)]
        bin: Option<f64>,
        /// For --trace: a gap longer than this (seconds) ends an ON period (default 2 x beta_on_s).
        #[arg(long)]
        idle: Option<f64>,
    },
}

/// Parses `90`, `90s`, `15m`, `2h`, `1d` into seconds.
fn parse_duration(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let (num, unit) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c),
        _ => (s, 's'),
    };
    let mult = match unit {
        's' => 1.0,
        'm' => 60.0,
        'h' => 3600.0,
        'd' => 86400.0,
        _ => return Err(format!("unknown unit {unit:?} in {s:?}: use s, m, h or d")),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v * mult),
        _ => Err(format!(
            "{s:?}: expected a positive number of seconds, or a number with s, m, h or d"
        )),
    }
}

fn load_profile(path: &Path) -> Result<Profile> {
    Profile::load(path).with_context(|| format!("profile {}", path.display()))
}

fn plan_cmd(profile: &Path, duration: f64, seed: u64, out: &Path) -> Result<()> {
    let p = load_profile(profile)?;
    let model = p.onoff_model().context("onoff model")?;
    let mut rng = StdRng::seed_from_u64(seed);
    let plan = Plan::generate(&model, p.onoff.sources as usize, duration, &mut rng)
        .context("ON/OFF plan")?;
    fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    let onoff = out.join("onoff.csv");
    fs::write(&onoff, plan.to_csv()).with_context(|| format!("write {}", onoff.display()))?;
    println!(
        "{}: {} sources x {} s, {} periods, ON fraction {:.4} (rho {:.4}), mean ON {:.3} s, mean OFF {:.3} s",
        onoff.display(),
        plan.sources(),
        duration,
        plan.all_periods().count(),
        plan.on_fraction(),
        model.rho(),
        model.on.mean(),
        model.off.mean()
    );
    if p.pools.is_empty() {
        println!("no [[pools]] in the profile: no users.csv (copies keep the real client address)");
    } else {
        let users = UserTable::generate(&p.pool_specs().context("pools")?, &mut rng)
            .context("user table")?;
        let path = out.join("users.csv");
        fs::write(&path, users.to_csv()).with_context(|| format!("write {}", path.display()))?;
        println!(
            "{}: {} users in {} pools",
            path.display(),
            users.users().len(),
            users.pool_names().len()
        );
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn check_cmd(
    profile: Option<&Path>,
    seed: u64,
    duration: f64,
    plan_dir: Option<&Path>,
    trace: Option<&Path>,
    bin: Option<f64>,
    idle: Option<f64>,
) -> Result<bool> {
    let p = profile.map(load_profile).transpose()?;
    let mut opts = p.as_ref().map_or(
        CheckOptions {
            bin: 1.0,
            pool_draws: 100_000,
            idle: 2.0,
        },
        CheckOptions::for_profile,
    );
    if let Some(b) = bin {
        if !b.is_finite() || b <= 0.0 {
            bail!("--bin {b}: must be > 0");
        }
        opts.bin = b;
    }
    if let Some(i) = idle {
        opts.idle = i;
    }
    let report = if let Some(trace) = trace {
        let text =
            fs::read_to_string(trace).with_context(|| format!("read {}", trace.display()))?;
        let tr = Trace::from_csv(&text).with_context(|| format!("trace {}", trace.display()))?;
        check_trace(p.as_ref(), &tr, &opts)
    } else {
        let Some(p) = p else {
            bail!("shaper check needs a PROFILE (or --trace CSV)")
        };
        let mut rng = StdRng::seed_from_u64(seed);
        let (plan, users) = match plan_dir {
            Some(dir) => {
                let path = dir.join("onoff.csv");
                let text = fs::read_to_string(&path)
                    .with_context(|| format!("read {}", path.display()))?;
                let plan =
                    Plan::from_csv(&text).with_context(|| format!("plan {}", path.display()))?;
                let path = dir.join("users.csv");
                let users = match fs::read_to_string(&path) {
                    Ok(text) => Some(
                        UserTable::from_csv(&text)
                            .with_context(|| format!("users {}", path.display()))?,
                    ),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
                };
                (plan, users)
            }
            None => {
                let model = p.onoff_model().context("onoff model")?;
                let plan = Plan::generate(&model, p.onoff.sources as usize, duration, &mut rng)?;
                let users = if p.pools.is_empty() {
                    None
                } else {
                    Some(UserTable::generate(&p.pool_specs()?, &mut rng)?)
                };
                (plan, users)
            }
        };
        check_plan(&p, &plan, users.as_ref(), &opts, &mut rng)
    };
    print!("{report}");
    Ok(report.passed())
}

fn main() -> Result<ExitCode> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Plan {
            profile,
            duration,
            seed,
            out,
        } => {
            plan_cmd(&profile, duration, seed, &out)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Check {
            profile,
            seed,
            duration,
            plan,
            trace,
            bin,
            idle,
        } => {
            let ok = check_cmd(
                profile.as_deref(),
                seed,
                duration,
                plan.as_deref(),
                trace.as_deref(),
                bin,
                idle,
            )?;
            if ok {
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!("shaper check: some lines FAIL");
                Ok(ExitCode::from(1))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("90"), Ok(90.0));
        assert_eq!(parse_duration("1.5m"), Ok(90.0));
        assert_eq!(parse_duration("2h"), Ok(7200.0));
        assert_eq!(parse_duration("1d"), Ok(86400.0));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("5y").is_err());
        assert!(parse_duration("m").is_err());
    }
}
