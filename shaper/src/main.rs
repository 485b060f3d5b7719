//! `shaper`: tools to plan and check traffic-shaping profiles for the copier.
//!
//! - `shaper plan PROFILE --duration D --seed S --out DIR` writes `DIR/onoff.csv` (the ON/OFF
//!   schedule of every source) and `DIR/users.csv` (the virtual users), so that a run can be
//!   reproduced and several copiers can share one plan.
//! - `shaper check PROFILE [--seed S] [--duration D]` draws a plan and prints its statistics
//!   against the profile's targets, PASS/FAIL per line; `--plan DIR` checks a written plan
//!   instead, and `--trace CSV` checks what a run sent (a copier's `--trace`: with a profile, a
//!   rate line per phase or curve bucket against the schedule's shape). Exits non-zero if a
//!   line fails.
//!
//! - `shaper fit CAPTURE --port P [--out FILE]` measures a pcap or pcapng capture of the service
//!   on port P (clients, sessions, requests, gaps, ON/OFF tails; see `shaper::fit`) and writes a
//!   starting profile (to FILE, or to stdout with the measurements on stderr).
//! - `shaper plot INPUT --what rate|onoff|users|pools|all --out FILE.png|svg` draws a picture of
//!   INPUT: a profile (planned with --seed and --duration), a plan folder written by `shaper
//!   plan`, a trace CSV as `shaper check --trace` takes, or a capture (with --port).
//!
//! Only this file reads files and prints; the statistics live in `shaper::check`, `shaper::fit`
//! and the pictures in `shaper::plot`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use rand::rngs::StdRng;
use rand::SeedableRng;
use shaper::check::{check_plan, check_trace, CheckOptions, Trace};
use shaper::fit::{Fit, FitConfig, Fitter};
use shaper::onoff::Plan;
use shaper::plot::{Format, PlotData, PlotOptions, What};
use shaper::users::UserTable;
use shaper::Profile;

/// Plans and checks traffic-shaping profiles for the copier (`copier --profile FILE`).
#[derive(Parser, Debug)]
#[command(
    version,
    about,
    after_help = "Durations (--duration, --window, --bin, --idle): plain seconds or a number with ms, \
                  s, m, h or d (500ms, 1.5s, 90m, 2h, 1d)."
)]
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
        /// Length of the plan: seconds, or a number with ms, s, m, h or d (e.g. 90m, 1d).
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
        /// Check a trace of sent requests (a copier's --trace): CSV with a header `time_s` plus
        /// `source` and/or `pool`, and `count` for per-interval rows, `answer_s` for answer times
        /// (p50 and p99 reported); other columns are ignored.
        /// With a profile of phases or a curve, each phase (bucket) gets a rate line.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Bin width of the count series, seconds (default 4 x onoff.beta_on_s, or 1 s).
        #[arg(long, value_parser = parse_seconds)]
        bin: Option<f64>,
        /// For --trace: a gap longer than this (seconds) ends an ON period (default 2 x beta_on_s).
        #[arg(long, value_parser = parse_seconds)]
        idle: Option<f64>,
    },
    /// Measure a capture of one service and write a starting profile.
    Fit {
        /// The capture (pcap or pcapng; Ethernet, Linux cooked, raw IP or loopback frames).
        capture: PathBuf,
        /// The service's TCP port: client packets go to it, answers come from it.
        #[arg(long)]
        port: u16,
        /// Write the profile here (default: to stdout, the measurements to stderr).
        #[arg(long)]
        out: Option<PathBuf>,
        /// The longest gap between two requests of one ON period, seconds.
        #[arg(long, default_value_t = 1.0, value_parser = parse_seconds)]
        idle: f64,
    },
    /// Draw a picture: rates at several time scales, ON/OFF timeline, user activity, pools.
    Plot {
        /// A profile (TOML), a plan folder (`shaper plan --out`), a trace CSV, or a capture.
        input: PathBuf,
        /// Which sections: rate, onoff, users, pools, or all that the input has.
        #[arg(long, default_value = "all")]
        what: What,
        /// The picture to write; its extension (.png or .svg) chooses the format.
        #[arg(long)]
        out: PathBuf,
        /// For a profile: seed of the plan and users drawn.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// For a profile: length of the plan (default: the profile's onoff.horizon_s).
        #[arg(long, value_parser = parse_duration)]
        duration: Option<f64>,
        /// For a plan folder: the profile it came from (gives the pools' address ranges).
        #[arg(long)]
        profile: Option<PathBuf>,
        /// For a capture: the service's TCP port.
        #[arg(long)]
        port: Option<u16>,
        /// Finest bin of the rate panels, seconds (default: about span / 10000, 1-2-5).
        #[arg(long, value_parser = parse_seconds)]
        bin: Option<f64>,
        /// Number of time scales of the rate (x1, x10, x100, ...), 1 to 5.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=5))]
        scales: u8,
        /// Sources shown in the ON/OFF timeline.
        #[arg(long, default_value_t = 32)]
        rows: usize,
        /// Length of the ON/OFF timeline, seconds (default: about 60 ON/OFF cycles).
        #[arg(long, value_parser = parse_duration)]
        window: Option<f64>,
        /// For a trace or a capture: a gap longer than this (seconds) ends an ON period.
        #[arg(long, default_value_t = 1.0, value_parser = parse_seconds)]
        idle: f64,
    },
}

/// Reads a capture into a fit; says on stderr what was skipped.
fn fit_capture(path: &Path, cfg: FitConfig) -> Result<Fit> {
    use common::pcap::{Event, LinkLayerError, Reader, SkipKind};
    let file = fs::File::open(path).with_context(|| format!("open {}", path.display()))?;
    let mut reader = Reader::new(file).with_context(|| format!("capture {}", path.display()))?;
    let mut fitter = Fitter::new(cfg);
    let mut shown = 0;
    loop {
        match reader
            .next_event()
            .with_context(|| format!("read {}", path.display()))?
        {
            None => break,
            Some(Event::Packet(p)) => fitter.handle_packet(p.ts.as_secs_f64(), p.data),
            Some(Event::Skip(s)) => {
                if matches!(s.kind, SkipKind::Link(LinkLayerError::NotIp(_))) {
                    continue;
                }
                if shown < 10 {
                    eprintln!("{}: {s}", path.display());
                }
                shown += 1;
            }
        }
    }
    if shown > 10 {
        eprintln!(
            "{}: {} more problem(s) not shown",
            path.display(),
            shown - 10
        );
    }
    let st = reader.stats();
    if st.packets == 0 {
        bail!(
            "{}: no IP packet in {} record(s)",
            path.display(),
            st.records
        );
    }
    Ok(fitter.finish())
}

fn fit_cmd(capture: &Path, port: u16, idle: f64, out: Option<&Path>) -> Result<()> {
    if !(idle > 0.0 && idle.is_finite()) {
        bail!("--idle {idle}: must be > 0");
    }
    let fit = fit_capture(capture, FitConfig { port, idle })?;
    if fit.sessions == 0 {
        eprintln!(
            "warning: no TCP session to port {port} in {}: the profile has only defaults",
            capture.display()
        );
    }
    let toml = fit.profile_toml();
    // The written profile must load as any profile does.
    Profile::from_toml_str(&toml).context("the fitted profile does not validate (a bug)")?;
    match out {
        Some(path) => {
            fs::write(path, &toml).with_context(|| format!("write {}", path.display()))?;
            println!("{fit}");
            println!("profile written to {}", path.display());
        }
        None => {
            eprintln!("{fit}");
            print!("{toml}");
        }
    }
    Ok(())
}

/// What `shaper plot` was given.
enum Input {
    Profile,
    PlanDir,
    Trace,
    Capture,
}

fn input_kind(path: &Path) -> Result<Input> {
    if path.is_dir() {
        return Ok(Input::PlanDir);
    }
    let mut head = [0u8; 4];
    let n = {
        use std::io::Read;
        let mut f = fs::File::open(path).with_context(|| format!("open {}", path.display()))?;
        f.read(&mut head)
            .with_context(|| format!("read {}", path.display()))?
    };
    let magic = u32::from_le_bytes(head);
    let capture = n == 4
        && [0xa1b2_c3d4u32, 0xa1b2_3c4d, 0x0a0d_0d0a]
            .iter()
            .any(|m| magic == *m || magic == m.swap_bytes());
    Ok(if capture {
        Input::Capture
    } else if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
    {
        Input::Trace
    } else {
        Input::Profile
    })
}

#[allow(clippy::too_many_arguments)]
fn plot_cmd(
    input: &Path,
    what: What,
    out: &Path,
    seed: u64,
    duration: Option<f64>,
    profile: Option<&Path>,
    port: Option<u16>,
    scales: usize,
    opts: PlotOptions,
) -> Result<()> {
    let format = Format::of_path(out)
        .with_context(|| format!("--out {}: the name must end in .png or .svg", out.display()))?;
    let (mut data, kind, how) = match input_kind(input)? {
        Input::Capture => {
            let Some(port) = port else {
                bail!(
                    "{} is a capture: give the service's --port",
                    input.display()
                )
            };
            let fit = fit_capture(
                input,
                FitConfig {
                    port,
                    idle: opts.idle,
                },
            )?;
            (
                PlotData::from_fit(&fit, &opts),
                "a capture",
                format!("capture {}, port {port}", input.display()),
            )
        }
        Input::Trace => {
            let text =
                fs::read_to_string(input).with_context(|| format!("read {}", input.display()))?;
            let tr =
                Trace::from_csv(&text).with_context(|| format!("trace {}", input.display()))?;
            (
                PlotData::from_trace(&tr, &opts),
                "a trace",
                format!("trace {}", input.display()),
            )
        }
        Input::PlanDir => {
            let path = input.join("onoff.csv");
            let text =
                fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
            let plan = Plan::from_csv(&text).with_context(|| format!("plan {}", path.display()))?;
            let upath = input.join("users.csv");
            let users = match fs::read_to_string(&upath) {
                Ok(t) => Some(
                    UserTable::from_csv(&t)
                        .with_context(|| format!("users {}", upath.display()))?,
                ),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(e).with_context(|| format!("read {}", upath.display())),
            };
            let p = profile.map(load_profile).transpose()?;
            let mut rng = StdRng::seed_from_u64(seed);
            (
                PlotData::from_plan(&plan, users.as_ref(), p.as_ref(), &opts, &mut rng),
                "a plan folder",
                format!("plan folder {}", input.display()),
            )
        }
        Input::Profile => {
            let p = load_profile(input)?;
            let duration = duration.unwrap_or(p.onoff.horizon_s);
            let mut rng = StdRng::seed_from_u64(seed);
            let model = p.onoff_model().context("onoff model")?;
            let plan = Plan::generate(&model, p.onoff.sources as usize, duration, &mut rng)
                .context("ON/OFF plan")?;
            let users = if p.pools.is_empty() {
                None
            } else {
                Some(UserTable::generate(
                    &p.pool_specs().context("pools")?,
                    &mut rng,
                )?)
            };
            (
                PlotData::from_plan(&plan, users.as_ref(), Some(&p), &opts, &mut rng),
                "a profile",
                format!("profile {}, seed {seed}", input.display()),
            )
        }
    };
    data.subtitle = how;
    let scene = data.scene(what, kind, scales)?;
    let bytes = match format {
        Format::Svg => shaper::plot::svg::render(&scene).into_bytes(),
        Format::Png => shaper::plot::raster::render(&scene),
    };
    fs::write(out, &bytes).with_context(|| format!("write {}", out.display()))?;
    println!(
        "{}: {} x {} {}, {} bytes ({what})",
        out.display(),
        scene.width,
        scene.height,
        match format {
            Format::Svg => "SVG",
            Format::Png => "PNG",
        },
        bytes.len()
    );
    Ok(())
}

/// A duration in `common::units`' grammar (`0.5`, `500ms`, `2s`), in seconds; zero allowed.
fn parse_seconds(s: &str) -> Result<f64, String> {
    common::units::parse_duration(s)
        .map(|d| d.as_secs_f64())
        .map_err(|e| e.to_string())
}

/// A positive duration in `common::units`' grammar (`90`, `90s`, `15m`, `2h`, `1d`), in seconds.
fn parse_duration(s: &str) -> Result<f64, String> {
    // Plans may be longer than the daemons' year: up to a century.
    const MAX: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 86_400);
    match common::units::parse_duration_at_most(s, MAX) {
        Ok(d) if !d.is_zero() => Ok(d.as_secs_f64()),
        Ok(_) => Err(format!(
            "duration {s:?} is zero: the plan needs a length above 0"
        )),
        Err(e) => Err(e.to_string()),
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
        Cmd::Fit {
            capture,
            port,
            out,
            idle,
        } => {
            fit_cmd(&capture, port, idle, out.as_deref())?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Plot {
            input,
            what,
            out,
            seed,
            duration,
            profile,
            port,
            bin,
            scales,
            rows,
            window,
            idle,
        } => {
            if let Some(b) = bin.filter(|b| !(*b > 0.0 && b.is_finite())) {
                bail!("--bin {b}: must be > 0");
            }
            if !(idle > 0.0 && idle.is_finite()) {
                bail!("--idle {idle}: must be > 0");
            }
            let opts = PlotOptions {
                bin,
                rows: rows.max(1),
                window,
                idle,
                ..PlotOptions::default()
            };
            plot_cmd(
                &input,
                what,
                &out,
                seed,
                duration,
                profile.as_deref(),
                port,
                usize::from(scales),
                opts,
            )?;
            Ok(ExitCode::SUCCESS)
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
        assert_eq!(parse_duration("400d"), Ok(400.0 * 86400.0));
        assert_eq!(parse_duration("500ms"), Ok(0.5));
        assert_eq!(parse_seconds("250ms"), Ok(0.25));
        assert_eq!(parse_seconds("0"), Ok(0.0));
        assert!(parse_seconds("1x").unwrap_err().contains("\"1x\""));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("5y").is_err());
        assert!(parse_duration("m").is_err());
        for bad in ["0", "5y", "m", "-1h"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad:?} -> {e}");
        }
    }
}
