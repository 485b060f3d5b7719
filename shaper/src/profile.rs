//! The shaping profile: a TOML file, its defaults, and its validation.
//!
//! Owns: the serde structs of the profile (every table `#[serde(default, deny_unknown_fields)]`,
//! so a misspelt key is an error and an absent one takes the documented default), `validate()`
//! (every error names the key and the allowed range, e.g. `onoff.alpha_on = 2.3: must be in
//! (1, 2)`), and the conversions into the library's models (ON/OFF laws, pools, schedule).
//!
//! Invariant: a profile that passed [`Profile::validate`] converts without error, except for the
//! curve CSV, which is read by [`Profile::load`] (the only function here that touches the file
//! system) and checked there.
//!
//! Times are seconds (`_s` suffix), factors are plain numbers. See `shaper/examples/profile.toml`
//! for a commented example.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::onoff::{OnOffModel, PeriodLaw};
use crate::pareto::{beta_off_for, beta_off_truncated, TruncatedPareto, Truncation};
use crate::schedule::{Curve, Load, Phase, Schedule};
use crate::users::{Activity, Cidr, PoolSpec, TruncatedNormal};

/// One invalid key.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The key's path, e.g. `pools[1].weight`.
    pub key: String,
    /// The value as written.
    pub value: String,
    /// What is allowed.
    pub allowed: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {}: {}", self.key, self.value, self.allowed)
    }
}

/// Errors from reading or checking a profile.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("read {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TOML is malformed, has an unknown key, or a value of the wrong type.
    #[error("profile TOML: {0}")]
    Toml(#[from] toml::de::Error),
    /// One or more keys are out of range (every error is listed, one per line).
    #[error("invalid profile:\n  {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    Invalid(Vec<FieldError>),
    /// The curve CSV is malformed.
    #[error("schedule.curve_csv {path}: {msg}")]
    Curve {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        msg: String,
    },
}

/// A whole profile.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Profile {
    /// How many copies of each session.
    pub multiplication: Multiplication,
    /// How the factor changes over the run.
    pub schedule: ScheduleProfile,
    /// ON/OFF gating of requests.
    pub onoff: OnOffProfile,
    /// Pools of virtual users; empty = copies keep the real client address (each copy still
    /// gets its own port).
    pub pools: Vec<PoolProfile>,
    /// Think time between the requests of a copied session.
    pub think: ThinkProfile,
    /// The translation table.
    pub nat: NatProfile,
    /// This copier's share when several copiers split one target.
    pub distribution: DistributionProfile,
    /// The curve read from `schedule.curve_csv` by [`Profile::load`] (not a TOML key).
    #[serde(skip)]
    pub curve: Option<Curve>,
}

/// `[multiplication]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Multiplication {
    /// Copies per session, may be fractional: 2.5 = every session twice and half of them a third
    /// time; 0.3 = a consistent 30% sample. In [0, 1000]. Default 1.
    pub factor: f64,
}

impl Default for Multiplication {
    fn default() -> Self {
        Multiplication { factor: 1.0 }
    }
}

/// `[schedule]`: either `phases` or `curve_csv` (or neither: a constant load of 1).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleProfile {
    /// Phases run one after the other from the start; after the last, its end factor holds.
    pub phases: Vec<PhaseProfile>,
    /// A CSV of `time_s,rate` buckets (relative to the profile's folder); the load factor is
    /// `rate / curve_reference`.
    pub curve_csv: Option<PathBuf>,
    /// The rate that means factor 1 (> 0). Default: the mean rate of the curve.
    pub curve_reference: Option<f64>,
}

/// `[[schedule.phases]]`: a steady phase sets `factor`, a ramp sets `from` and `to`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PhaseProfile {
    /// A name for reports (e.g. "ramp-up").
    pub name: String,
    /// Length in seconds, > 0.
    pub duration_s: f64,
    /// Load factor of a steady phase, >= 0.
    pub factor: Option<f64>,
    /// Load factor at the start of a ramp, >= 0.
    pub from: Option<f64>,
    /// Load factor at the end of a ramp, >= 0.
    pub to: Option<f64>,
}

/// The law of the ON and OFF periods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PeriodKind {
    /// Truncated Pareto (self-similar aggregate, H = (3 - min alpha) / 2).
    #[default]
    Pareto,
    /// Exponential with the same means (short-range dependent, H = 0.5), for comparison.
    Exponential,
}

/// `[onoff]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OnOffProfile {
    /// Gate requests by the ON/OFF plan. Default false (requests go as they come).
    pub enabled: bool,
    /// Number of independent sources; each copied session is gated by one of them. In
    /// [1, 100000]. Default 64.
    pub sources: u32,
    /// `pareto` or `exponential`. Default pareto.
    pub law: PeriodKind,
    /// Tail index of ON periods, in (1, 2). Default 1.4.
    pub alpha_on: f64,
    /// Tail index of OFF periods, in (1, 2). Default 1.4.
    pub alpha_off: f64,
    /// Shortest ON period, seconds (the time of one request/response), > 0. Default 1.
    pub beta_on_s: f64,
    /// Wanted load ratio E\[ON\] / (E\[ON\] + E\[OFF\]), in (0, 1); beta_off follows. Default 0.5.
    pub rho: f64,
    /// Truncation bound of ON periods, seconds, > beta_on_s. Default 3600.
    pub max_on_s: f64,
    /// Truncation bound of OFF periods, seconds, > beta_off. Default 3600.
    pub max_off_s: f64,
    /// `clip` (a long draw becomes the bound) or `redraw` (it is drawn again). Default redraw.
    pub truncation: Truncation,
    /// Solve beta_off with the truncated means so the achieved rho is exact (true), or use the
    /// untruncated formula of the background notes (false). Default true.
    pub exact_rho: bool,
    /// Length of the precomputed plan, seconds (> 0); a longer run wraps around. Default 86400.
    pub horizon_s: f64,
}

impl Default for OnOffProfile {
    fn default() -> Self {
        OnOffProfile {
            enabled: false,
            sources: 64,
            law: PeriodKind::Pareto,
            alpha_on: 1.4,
            alpha_off: 1.4,
            beta_on_s: 1.0,
            rho: 0.5,
            max_on_s: 3600.0,
            max_off_s: 3600.0,
            truncation: Truncation::Redraw,
            exact_rho: true,
            horizon_s: 86400.0,
        }
    }
}

/// `[[pools]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolProfile {
    /// A name for reports and CSVs (no comma). Default "pool".
    pub name: String,
    /// Share of sessions relative to the other pools, >= 0 (not all 0). Default 1.
    pub weight: f64,
    /// Address range of its virtual users, e.g. "198.19.0.0/16".
    pub cidr: String,
    /// Number of virtual users, in [1, usable addresses of the range]. Default 100.
    pub users: u32,
    /// Activity weight law of its users.
    pub activity: ActivityProfile,
    /// Think-time weight law W of its users (a truncated normal, min > 0).
    pub think: NormalProfile,
}

impl Default for PoolProfile {
    fn default() -> Self {
        PoolProfile {
            name: "pool".into(),
            weight: 1.0,
            cidr: String::new(),
            users: 100,
            activity: ActivityProfile::default(),
            think: NormalProfile::default(),
        }
    }
}

/// A pool's activity law: a truncated normal, or `table` when it is not empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ActivityProfile {
    /// Mean of the normal before truncation. Default 1.
    pub mean: f64,
    /// Variance of the normal before truncation, >= 0. Default 12.5.
    pub variance: f64,
    /// Lower bound, > 0. Default 0.01.
    pub min: f64,
    /// Upper bound, > min. Default 100.
    pub max: f64,
    /// Empirical law instead: `[[activity, probability weight], ...]`, activity > 0, weight >= 0.
    pub table: Vec<[f64; 2]>,
}

impl Default for ActivityProfile {
    fn default() -> Self {
        ActivityProfile {
            mean: 1.0,
            variance: 12.5,
            min: 0.01,
            max: 100.0,
            table: Vec::new(),
        }
    }
}

/// A truncated normal law (of think-time weights).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NormalProfile {
    /// Mean of the normal before truncation. Default 1.
    pub mean: f64,
    /// Variance of the normal before truncation, >= 0. Default 0.5.
    pub variance: f64,
    /// Lower bound, > 0. Default 0.1.
    pub min: f64,
    /// Upper bound, > min. Default 5.
    pub max: f64,
}

impl Default for NormalProfile {
    fn default() -> Self {
        NormalProfile {
            mean: 1.0,
            variance: 0.5,
            min: 0.1,
            max: 5.0,
        }
    }
}

/// `[think]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ThinkProfile {
    /// Scale each online gap by the virtual user's weight W. Default true.
    pub per_user: bool,
    /// A global factor on every gap, in (0, 100]. Default 1.
    pub factor: f64,
}

impl Default for ThinkProfile {
    fn default() -> Self {
        ThinkProfile {
            per_user: true,
            factor: 1.0,
        }
    }
}

/// `[nat]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatProfile {
    /// Lifetime of a translation after its last use, seconds, in (0, 86400]. Default 300.
    pub lifetime_s: f64,
    /// Lowest virtual port, >= 1. Default 1024.
    pub port_min: u16,
    /// Highest virtual port, >= port_min. Default 65535.
    pub port_max: u16,
}

impl Default for NatProfile {
    fn default() -> Self {
        NatProfile {
            lifetime_s: 300.0,
            port_min: 1024,
            port_max: 65535,
        }
    }
}

/// `[distribution]`: the global factor is split as `factor * weight / total_weight`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DistributionProfile {
    /// This copier's weight, in [0, total_weight]. Default 1.
    pub weight: f64,
    /// The sum of the weights of every copier, > 0. Default 1.
    pub total_weight: f64,
}

impl Default for DistributionProfile {
    fn default() -> Self {
        DistributionProfile {
            weight: 1.0,
            total_weight: 1.0,
        }
    }
}

/// Collects field errors.
#[derive(Default)]
struct Check(Vec<FieldError>);

impl Check {
    fn fail(
        &mut self,
        key: impl Into<String>,
        value: impl fmt::Display,
        allowed: impl Into<String>,
    ) {
        self.0.push(FieldError {
            key: key.into(),
            value: value.to_string(),
            allowed: allowed.into(),
        });
    }

    /// `lo <= v <= hi` (with open ends when `open_lo`/`open_hi`).
    fn range(&mut self, key: &str, v: f64, lo: f64, hi: f64, open_lo: bool, open_hi: bool) -> bool {
        let ok = v.is_finite()
            && (if open_lo { v > lo } else { v >= lo })
            && (if open_hi { v < hi } else { v <= hi });
        if !ok {
            let (l, r) = (
                if open_lo { "(" } else { "[" },
                if open_hi { ")" } else { "]" },
            );
            let fmt_bound = |b: f64| {
                if b.is_infinite() {
                    "inf".to_string()
                } else {
                    b.to_string()
                }
            };
            self.fail(
                key,
                v,
                format!("must be in {l}{}, {}{r}", fmt_bound(lo), fmt_bound(hi)),
            );
        }
        ok
    }
}

impl Profile {
    /// Parses TOML (unknown keys and wrong types are errors) and validates it. The curve CSV,
    /// if any, is not read: use [`Profile::load`] for that.
    pub fn from_toml_str(text: &str) -> Result<Profile, ProfileError> {
        let p: Profile = toml::from_str(text)?;
        p.validate()?;
        Ok(p)
    }

    /// Reads and validates a profile file, and the curve CSV it names (relative to the
    /// profile's folder).
    pub fn load(path: &Path) -> Result<Profile, ProfileError> {
        let io = |source| ProfileError::Io {
            path: path.to_path_buf(),
            source,
        };
        let text = std::fs::read_to_string(path).map_err(io)?;
        let mut p = Profile::from_toml_str(&text)?;
        if let Some(csv) = &p.schedule.curve_csv {
            let full = path.parent().unwrap_or(Path::new(".")).join(csv);
            let text = std::fs::read_to_string(&full).map_err(|source| ProfileError::Io {
                path: full.clone(),
                source,
            })?;
            let curve = Curve::from_csv(&text, p.schedule.curve_reference).map_err(|e| {
                ProfileError::Curve {
                    path: full,
                    msg: e.to_string(),
                }
            })?;
            p.curve = Some(curve);
        }
        Ok(p)
    }

    /// Checks every key against its allowed range; lists every failure.
    pub fn validate(&self) -> Result<(), ProfileError> {
        let mut c = Check::default();
        c.range(
            "multiplication.factor",
            self.multiplication.factor,
            0.0,
            1000.0,
            false,
            false,
        );

        let s = &self.schedule;
        if !s.phases.is_empty() && s.curve_csv.is_some() {
            c.fail(
                "schedule.curve_csv",
                format!("{:?}", s.curve_csv),
                "must not be set together with schedule.phases",
            );
        }
        if let Some(r) = s.curve_reference {
            c.range(
                "schedule.curve_reference",
                r,
                0.0,
                f64::INFINITY,
                true,
                true,
            );
        }
        for (i, ph) in s.phases.iter().enumerate() {
            let k = |f: &str| format!("schedule.phases[{i}].{f}");
            c.range(
                &k("duration_s"),
                ph.duration_s,
                0.0,
                f64::INFINITY,
                true,
                true,
            );
            match (ph.factor, ph.from, ph.to) {
                (Some(f), None, None) => {
                    c.range(&k("factor"), f, 0.0, 1000.0, false, false);
                }
                (None, Some(a), Some(b)) => {
                    c.range(&k("from"), a, 0.0, 1000.0, false, false);
                    c.range(&k("to"), b, 0.0, 1000.0, false, false);
                }
                _ => c.fail(
                    k("factor"),
                    format!("{:?}", ph.factor),
                    "set either factor (steady) or both from and to (ramp)",
                ),
            }
        }

        let o = &self.onoff;
        c.range(
            "onoff.sources",
            f64::from(o.sources),
            1.0,
            100_000.0,
            false,
            false,
        );
        let shapes_ok = match o.law {
            PeriodKind::Pareto => {
                let a = c.range("onoff.alpha_on", o.alpha_on, 1.0, 2.0, true, true);
                c.range("onoff.alpha_off", o.alpha_off, 1.0, 2.0, true, true) && a
            }
            PeriodKind::Exponential => true,
        };
        let b = c.range(
            "onoff.beta_on_s",
            o.beta_on_s,
            0.0,
            f64::INFINITY,
            true,
            true,
        );
        let r = c.range("onoff.rho", o.rho, 0.0, 1.0, true, true);
        let m = o.max_on_s.is_finite() && o.max_on_s > o.beta_on_s;
        if !m {
            c.fail(
                "onoff.max_on_s",
                o.max_on_s,
                format!("must be finite and > onoff.beta_on_s = {}", o.beta_on_s),
            );
        }
        let m2 = c.range(
            "onoff.max_off_s",
            o.max_off_s,
            0.0,
            f64::INFINITY,
            true,
            true,
        );
        c.range("onoff.horizon_s", o.horizon_s, 0.0, 1e9, true, false);
        if shapes_ok && b && r && m && m2 {
            if let Err(e) = self.onoff_model() {
                c.fail("onoff.rho", o.rho, format!("gives no valid OFF law with these bounds ({e}); raise onoff.max_off_s or rho"));
            }
        }

        let mut total = 0.0;
        for (i, p) in self.pools.iter().enumerate() {
            let k = |f: &str| format!("pools[{i}].{f}");
            if p.name.is_empty() || p.name.contains(',') {
                c.fail(
                    k("name"),
                    format!("{:?}", p.name),
                    "must be non-empty, without commas",
                );
            }
            if c.range(&k("weight"), p.weight, 0.0, f64::INFINITY, false, true) {
                total += p.weight;
            }
            match p.cidr.parse::<Cidr>() {
                Err(_) => c.fail(
                    k("cidr"),
                    format!("{:?}", p.cidr),
                    "must be ADDR/PREFIX, e.g. \"198.19.0.0/16\"",
                ),
                Ok(cidr) => {
                    let usable = cidr.usable().min(u128::from(u32::MAX)) as f64;
                    c.range(&k("users"), f64::from(p.users), 1.0, usable, false, false);
                }
            }
            let a = &p.activity;
            if a.table.is_empty() {
                c.range(&k("activity.min"), a.min, 0.0, f64::INFINITY, true, true);
                check_normal(&mut c, &k("activity"), a.mean, a.variance, a.min, a.max);
            } else {
                for (j, row) in a.table.iter().enumerate() {
                    c.range(
                        &format!("pools[{i}].activity.table[{j}][0]"),
                        row[0],
                        0.0,
                        f64::INFINITY,
                        true,
                        true,
                    );
                    c.range(
                        &format!("pools[{i}].activity.table[{j}][1]"),
                        row[1],
                        0.0,
                        f64::INFINITY,
                        false,
                        true,
                    );
                }
                if a.table.iter().map(|r| r[1]).sum::<f64>() <= 0.0 {
                    c.fail(
                        k("activity.table"),
                        "[..]",
                        "needs at least one row with weight > 0",
                    );
                }
            }
            let t = &p.think;
            c.range(&k("think.min"), t.min, 0.0, f64::INFINITY, true, true);
            check_normal(&mut c, &k("think"), t.mean, t.variance, t.min, t.max);
        }
        if !self.pools.is_empty() && total <= 0.0 {
            c.fail("pools[*].weight", total, "the weights must not all be 0");
        }

        c.range("think.factor", self.think.factor, 0.0, 100.0, true, false);
        c.range(
            "nat.lifetime_s",
            self.nat.lifetime_s,
            0.0,
            86400.0,
            true,
            false,
        );
        c.range(
            "nat.port_min",
            f64::from(self.nat.port_min),
            1.0,
            65535.0,
            false,
            false,
        );
        if self.nat.port_max < self.nat.port_min {
            c.fail(
                "nat.port_max",
                self.nat.port_max,
                format!("must be >= nat.port_min = {}", self.nat.port_min),
            );
        }
        let d = &self.distribution;
        if c.range(
            "distribution.total_weight",
            d.total_weight,
            0.0,
            f64::INFINITY,
            true,
            true,
        ) {
            c.range(
                "distribution.weight",
                d.weight,
                0.0,
                d.total_weight,
                false,
                false,
            );
        }

        if c.0.is_empty() {
            Ok(())
        } else {
            Err(ProfileError::Invalid(c.0))
        }
    }

    /// The ON and OFF laws (beta_off from rho, exactly for the truncated laws when
    /// `onoff.exact_rho`).
    pub fn onoff_model(&self) -> Result<OnOffModel, crate::onoff::OnOffError> {
        let o = &self.onoff;
        let on = TruncatedPareto::new(o.alpha_on, o.beta_on_s, o.max_on_s, o.truncation)?;
        let beta_off = if o.exact_rho {
            beta_off_truncated(o.rho, &on, o.alpha_off, o.max_off_s)?
        } else {
            beta_off_for(o.rho, o.alpha_on, o.alpha_off, o.beta_on_s)?
        };
        let off = TruncatedPareto::new(o.alpha_off, beta_off, o.max_off_s, o.truncation)?;
        let model = OnOffModel {
            on: PeriodLaw::Pareto(on),
            off: PeriodLaw::Pareto(off),
        };
        Ok(match o.law {
            PeriodKind::Pareto => model,
            PeriodKind::Exponential => model.exponential_twin(),
        })
    }

    /// The pools as the user table needs them.
    pub fn pool_specs(&self) -> Result<Vec<PoolSpec>, crate::users::UsersError> {
        self.pools
            .iter()
            .map(|p| {
                let a = &p.activity;
                let activity = if a.table.is_empty() {
                    Activity::Normal(TruncatedNormal::new(a.mean, a.variance, a.min, a.max)?)
                } else {
                    Activity::Table(a.table.iter().map(|r| (r[0], r[1])).collect())
                };
                let t = &p.think;
                Ok(PoolSpec {
                    name: p.name.clone(),
                    weight: p.weight,
                    cidr: p.cidr.parse()?,
                    users: p.users,
                    activity,
                    think: TruncatedNormal::new(t.mean, t.variance, t.min, t.max)?,
                })
            })
            .collect()
    }

    /// The multiplication schedule (uses the curve read by [`Profile::load`], if any).
    pub fn schedule(&self) -> Result<Schedule, crate::schedule::ScheduleError> {
        let load = if let Some(curve) = &self.curve {
            Load::Curve(curve.clone())
        } else if self.schedule.phases.is_empty() {
            Load::Constant(1.0)
        } else {
            Load::Phases(
                self.schedule
                    .phases
                    .iter()
                    .map(|p| Phase {
                        name: p.name.clone(),
                        duration: p.duration_s,
                        from: p.factor.or(p.from).unwrap_or(1.0),
                        to: p.factor.or(p.to).unwrap_or(1.0),
                    })
                    .collect(),
            )
        };
        Schedule::new(
            self.multiplication.factor,
            load,
            self.distribution.weight,
            self.distribution.total_weight,
        )
    }
}

fn check_normal(c: &mut Check, key: &str, mean: f64, variance: f64, min: f64, max: f64) {
    let a = c.range(
        &format!("{key}.mean"),
        mean,
        f64::NEG_INFINITY,
        f64::INFINITY,
        true,
        true,
    );
    let b = c.range(
        &format!("{key}.variance"),
        variance,
        0.0,
        f64::INFINITY,
        false,
        true,
    );
    if !(max > min) || !max.is_finite() {
        c.fail(
            format!("{key}.max"),
            max,
            format!("must be finite and > {key}.min = {min}"),
        );
    } else if a && b {
        if let Err(e) = TruncatedNormal::new(mean, variance, min, max) {
            c.fail(
                format!("{key}.min"),
                min,
                format!("[min, max] must hold some of the normal ({e})"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<String> {
        match Profile::from_toml_str(text) {
            Err(ProfileError::Invalid(errs)) => errs.iter().map(ToString::to_string).collect(),
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn empty_profile_is_valid_with_defaults() {
        let p = Profile::from_toml_str("").unwrap();
        assert_eq!(p, Profile::default());
        assert_eq!(p.multiplication.factor, 1.0);
        assert_eq!(p.onoff.sources, 64);
        assert!(!p.onoff.enabled);
        assert_eq!(p.schedule().unwrap().factor_at(123.0), 1.0);
    }

    #[test]
    fn the_example_profile_validates() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/profile.toml");
        let p = Profile::load(&path).unwrap();
        assert!(p.onoff.enabled);
        assert!(!p.pools.is_empty());
        p.onoff_model().unwrap();
        p.pool_specs().unwrap();
        p.schedule().unwrap();
    }

    #[test]
    fn errors_name_the_key_and_the_range() {
        let errs = errors("[onoff]\nalpha_on = 2.3\n");
        assert_eq!(errs, vec!["onoff.alpha_on = 2.3: must be in (1, 2)"]);
        let errs = errors("[onoff]\nrho = 1.0\nsources = 0\n");
        assert!(
            errs.contains(&"onoff.rho = 1: must be in (0, 1)".to_string()),
            "{errs:?}"
        );
        assert!(
            errs.contains(&"onoff.sources = 0: must be in [1, 100000]".to_string()),
            "{errs:?}"
        );
        let errs = errors("[multiplication]\nfactor = -2.5\n");
        assert_eq!(
            errs,
            vec!["multiplication.factor = -2.5: must be in [0, 1000]"]
        );
        let errs =
            errors("[[pools]]\nname = \"a\"\ncidr = \"198.19.0.0/24\"\nusers = 300\nweight = -1\n");
        assert!(
            errs.contains(&"pools[0].weight = -1: must be in [0, inf)".to_string()),
            "{errs:?}"
        );
        assert!(
            errs.contains(&"pools[0].users = 300: must be in [1, 254]".to_string()),
            "{errs:?}"
        );
        let errs = errors("[[pools]]\ncidr = \"nope\"\n[pools.think]\nmin = 0\n");
        assert!(
            errs.iter()
                .any(|e| e.starts_with("pools[0].cidr = \"nope\"")),
            "{errs:?}"
        );
        assert!(
            errs.contains(&"pools[0].think.min = 0: must be in (0, inf)".to_string()),
            "{errs:?}"
        );
        let errs = errors("[[schedule.phases]]\nduration_s = 0\nfrom = 1\n");
        assert!(
            errs.contains(&"schedule.phases[0].duration_s = 0: must be in (0, inf)".to_string()),
            "{errs:?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.starts_with("schedule.phases[0].factor")),
            "{errs:?}"
        );
        let errs = errors("[nat]\nport_min = 2000\nport_max = 1000\n[distribution]\nweight = 3\ntotal_weight = 2\n");
        assert!(
            errs.contains(&"nat.port_max = 1000: must be >= nat.port_min = 2000".to_string()),
            "{errs:?}"
        );
        assert!(
            errs.contains(&"distribution.weight = 3: must be in [0, 2]".to_string()),
            "{errs:?}"
        );
    }

    #[test]
    fn an_unreachable_rho_is_reported_on_rho() {
        // rho = 0.01 asks for a mean OFF period of ~99 x E[ON] ~ 300 s, above max_off_s = 100.
        let errs = errors("[onoff]\nrho = 0.01\nmax_off_s = 100\n");
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with("onoff.rho = 0.01: gives no valid OFF law"),
            "{errs:?}"
        );
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_errors() {
        let e = Profile::from_toml_str("[onoff]\nalpah_on = 1.5\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("alpah_on"), "{e}");
        let e = Profile::from_toml_str("[onoff]\ntruncation = \"cut\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("truncation") || e.contains("cut"), "{e}");
        let e = Profile::from_toml_str("[multiplication]\nfactor = \"2\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("factor"), "{e}");
    }

    #[test]
    fn phases_become_the_schedule() {
        let p = Profile::from_toml_str(
            "[multiplication]\nfactor = 2\n[distribution]\nweight = 1\ntotal_weight = 2\n\
             [[schedule.phases]]\nname = \"up\"\nduration_s = 10\nfrom = 0\nto = 1\n\
             [[schedule.phases]]\nname = \"steady\"\nduration_s = 10\nfactor = 1\n",
        )
        .unwrap();
        let s = p.schedule().unwrap();
        assert_eq!(s.factor_at(5.0), 0.5);
        assert_eq!(s.factor_at(15.0), 1.0);
    }

    #[test]
    fn exact_rho_switch_changes_beta_off() {
        let mut p = Profile::default();
        p.onoff.alpha_off = 1.2;
        p.onoff.max_off_s = 100.0;
        let exact = p.onoff_model().unwrap().rho();
        assert!((exact - 0.5).abs() < 1e-9);
        p.onoff.exact_rho = false;
        let naive = p.onoff_model().unwrap().rho();
        assert!((naive - 0.5).abs() > 0.01, "{naive}");
    }
}
