//! The one grammar for durations and sizes on the command lines of `copier`, `intercept` and
//! `shaper` (and in their `--help`): a number, optionally followed by a unit.
//!
//! - Durations: a number of seconds (`120`, `1.5`, `1e3`), or a number with `ms`, `s`
//!   (`sec`, `secs`), `m` (`min`, `mins`), `h` (`hr`, `hrs`) or `d` (`day`, `days`): `500ms`,
//!   `30s`, `5m`, `2h`, `1d`. At most 365 days; a binary may ask for less with
//!   [`parse_duration_at_most`].
//! - Sizes: a number of bytes, or a number with `K`, `M`, `G` or `T`, powers of 1024 (`KB`,
//!   `KiB` and `B` accepted): `64K`, `512M`, `1.5G`.
//!
//! Units are case-insensitive and may stand after a space (`100 MB`); decimals and exponents
//! are allowed; negative numbers, NaN and infinity are not. Every error names the value that
//! was given ([`UnitError`]). Nothing here knows about clap: each function has the signature of
//! a clap value parser.

use std::time::Duration;

/// The longest duration any flag takes: a year.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);

/// One line for `--help` texts: the duration grammar.
pub const DURATION_HELP: &str =
    "durations: plain seconds or a number with ms, s, m, h or d (500ms, 1.5s, 30s, 5m, 2h, 1d)";

/// One line for `--help` texts: the size grammar.
pub const SIZE_HELP: &str =
    "sizes: plain bytes or a number with K, M, G or T, powers of 1024 (64K, 512M, 1.5G)";

/// Why a duration or size was refused; every variant carries the value as it was given.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UnitError {
    /// Nothing but (perhaps) a unit.
    #[error("{kind} {value:?}: no number (e.g. {example})")]
    NoNumber {
        /// "duration" or "size".
        kind: &'static str,
        /// The value given.
        value: String,
        /// An example of a good value.
        example: &'static str,
    },
    /// The part before the unit is not a number.
    #[error("{kind} {value:?}: {number:?} is not a number (e.g. {example})")]
    NotANumber {
        /// "duration" or "size".
        kind: &'static str,
        /// The value given.
        value: String,
        /// The part that should have been a number.
        number: String,
        /// An example of a good value.
        example: &'static str,
    },
    /// A suffix that is not one of the units.
    #[error("{kind} {value:?}: unknown unit {unit:?} (use {units})")]
    UnknownUnit {
        /// "duration" or "size".
        kind: &'static str,
        /// The value given.
        value: String,
        /// The suffix found.
        unit: String,
        /// The units this kind takes.
        units: &'static str,
    },
    /// Below zero.
    #[error("{kind} {value:?} is negative")]
    Negative {
        /// "duration" or "size".
        kind: &'static str,
        /// The value given.
        value: String,
    },
    /// A duration above the limit.
    #[error("duration {value:?} is too long (at most {})", show_duration(*max))]
    TooLong {
        /// The value given.
        value: String,
        /// The limit.
        max: Duration,
    },
    /// A size that does not fit in 64 bits.
    #[error("size {value:?} is too large")]
    TooLarge {
        /// The value given.
        value: String,
    },
}

const DURATION_UNITS: &str = "ms, s, m, h or d, e.g. 30s";
const DURATION_EXAMPLE: &str = "30s, 5m, 120";
const SIZE_UNITS: &str = "K, M, G or T, e.g. 512M";
const SIZE_EXAMPLE: &str = "512M, 2G, 1048576";

/// Parses a duration (see the module documentation), at most [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    parse_duration_at_most(s, MAX_DURATION)
}

/// Parses a duration (see the module documentation), at most `max`.
pub fn parse_duration_at_most(s: &str, max: Duration) -> Result<Duration, UnitError> {
    let (num, unit) = split(s);
    let secs_per = match unit.to_ascii_lowercase().as_str() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "m" | "min" | "mins" => 60.0,
        "h" | "hr" | "hrs" => 3600.0,
        "d" | "day" | "days" => 86_400.0,
        _ => {
            return Err(UnitError::UnknownUnit {
                kind: "duration",
                value: s.to_string(),
                unit: unit.to_string(),
                units: DURATION_UNITS,
            })
        }
    };
    let v = number(s, num, "duration", DURATION_EXAMPLE)?;
    let secs = v * secs_per;
    if !secs.is_finite() || secs > max.as_secs_f64() {
        return Err(UnitError::TooLong {
            value: s.to_string(),
            max,
        });
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a size in bytes (see the module documentation).
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let (num, unit) = split(s);
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => {
            return Err(UnitError::UnknownUnit {
                kind: "size",
                value: s.to_string(),
                unit: unit.to_string(),
                units: SIZE_UNITS,
            })
        }
    };
    let too_large = || UnitError::TooLarge {
        value: s.to_string(),
    };
    // Whole numbers exactly (no rounding through f64), the rest through f64.
    if let Ok(v) = num.parse::<u64>() {
        return v.checked_mul(mult).ok_or_else(too_large);
    }
    let bytes = number(s, num, "size", SIZE_EXAMPLE)? * mult as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(too_large());
    }
    Ok(bytes as u64)
}

/// Writes a duration as the grammar reads it, the largest whole unit first: `1h = 3600s`,
/// `500ms`, `1.5s`.
pub fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    let secs = d.as_secs();
    if d.subsec_nanos() == 0 && secs > 0 {
        for (unit, per) in [("d", 86_400), ("h", 3600), ("m", 60)] {
            if secs % per == 0 {
                return format!("{}{unit} = {secs}s", secs / per);
            }
        }
        return format!("{secs}s");
    }
    if d.as_nanos() == ms * 1_000_000 && ms < 1000 {
        return format!("{ms}ms");
    }
    format!("{}s", d.as_secs_f64())
}

/// Splits `" 1.5 GiB "` into `("1.5", "GiB")`: the unit is the trailing run of letters.
fn split(s: &str) -> (&str, &str) {
    let t = s.trim();
    let at = t
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_alphabetic())
        .last()
        .map_or(t.len(), |(i, _)| i);
    let (num, unit) = t.split_at(at);
    (num.trim(), unit)
}

fn number(
    value: &str,
    num: &str,
    kind: &'static str,
    example: &'static str,
) -> Result<f64, UnitError> {
    if num.is_empty() {
        return Err(UnitError::NoNumber {
            kind,
            value: value.to_string(),
            example,
        });
    }
    let v: f64 = num.parse().map_err(|_| UnitError::NotANumber {
        kind,
        value: value.to_string(),
        number: num.to_string(),
        example,
    })?;
    if v < 0.0 {
        return Err(UnitError::Negative {
            kind,
            value: value.to_string(),
        });
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `parse` refuses `bad` with an error that quotes it and contains `needle`.
    fn refused<T: std::fmt::Debug>(
        parse: fn(&str) -> Result<T, UnitError>,
        bad: &str,
        needle: &str,
    ) {
        let e = parse(bad).unwrap_err().to_string();
        assert!(e.contains(&format!("{bad:?}")), "{bad:?} -> {e}");
        assert!(e.contains(needle), "{bad:?} -> {e} (wanted {needle:?})");
    }

    fn secs(s: &str) -> f64 {
        parse_duration(s).unwrap().as_secs_f64()
    }

    #[test]
    fn durations_in_every_unit() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("120").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(secs("1.5m"), 90.0);
        assert_eq!(secs("1e3"), 1000.0);
        assert_eq!(secs("2E1ms"), 0.02);
        assert_eq!(secs(" 10 MIN "), 600.0);
        assert_eq!(secs("3 days"), 3.0 * 86_400.0);
        assert_eq!(secs("2hrs"), 7200.0);
        assert_eq!(parse_duration("365d").unwrap(), MAX_DURATION);
    }

    #[test]
    fn bad_durations_name_the_value() {
        [
            ("", "no number"),
            ("s", "no number"),
            ("abc", "unknown unit \"abc\""),
            ("5y", "unknown unit \"y\""),
            ("12 parsecs", "unknown unit"),
            ("1.2.3s", "is not a number"),
            ("-1s", "negative"),
            ("1e400", "too long"),
            ("366d", "too long (at most 365d = 31536000s)"),
            ("inf", "unknown unit"),
            ("NaN", "unknown unit"),
        ]
        .into_iter()
        .for_each(|(bad, needle)| refused(parse_duration, bad, needle));
    }

    #[test]
    fn a_lower_limit_is_named_in_the_error() {
        let hour = Duration::from_secs(3600);
        assert_eq!(parse_duration_at_most("3600s", hour).unwrap(), hour);
        assert_eq!(parse_duration_at_most("1h", hour).unwrap(), hour);
        let e = parse_duration_at_most("1e30", hour)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("too long") && e.contains("3600s") && e.contains("1h"),
            "{e}"
        );
        assert!(parse_duration_at_most("3601s", hour).is_err());
        assert!(parse_duration_at_most("3600.001", hour).is_err());
    }

    #[test]
    fn sizes_in_every_unit() {
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("64kb").unwrap(), 64 << 10);
        assert_eq!(parse_size("1T").unwrap(), 1 << 40);
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_size("7b").unwrap(), 7);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("100 MB").unwrap(), 100 << 20);
        assert_eq!(parse_size("1e3").unwrap(), 1000);
        assert_eq!(parse_size("18446744073709551615").unwrap(), u64::MAX);
    }

    #[test]
    fn bad_sizes_name_the_value() {
        [
            ("", "no number"),
            ("M", "no number"),
            ("12Q", "unknown unit \"Q\""),
            ("1.2.3M", "is not a number"),
            ("-5M", "negative"),
            ("99999999999T", "too large"),
            ("1e30", "too large"),
            ("18446744073709551616", "too large"),
        ]
        .into_iter()
        .for_each(|(bad, needle)| refused(parse_size, bad, needle));
    }

    #[test]
    fn durations_show_as_the_grammar_reads_them() {
        for d in [
            Duration::from_secs(3600),
            Duration::from_secs(86_400 * 2),
            Duration::from_secs(90),
            Duration::from_secs(61),
            Duration::from_millis(500),
            Duration::from_millis(1500),
        ] {
            let shown = show_duration(d);
            let first = shown.split(" = ").next().unwrap();
            assert_eq!(parse_duration(first).unwrap(), d, "{shown}");
        }
        assert_eq!(show_duration(Duration::from_secs(3600)), "1h = 3600s");
    }
}
