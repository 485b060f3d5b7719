//! The run trace's CSV columns, declared once for its writer (the copier's `--trace`) and its
//! reader (`shaper check --trace`, `shaper plot`): their names, and which a trace holds in
//! which order ([`columns`]).
//!
//! Two forms: one row per request unit (`time_s,copy,user,pool,target[,source],answer_s`) and
//! one row per interval (`time_s,pool,count[,source],answer_s`: `count` units at `time_s`). The
//! reader finds the columns by name, so it also reads traces written by hand in any order.

/// When the unit (or the interval's middle) was sent, in seconds on the schedule's clock.
pub const TIME_S: &str = "time_s";
/// The copy index of a unit's session.
pub const COPY: &str = "copy";
/// The user of a unit (`-` without pools).
pub const USER: &str = "user";
/// The pool (`-` without pools).
pub const POOL: &str = "pool";
/// The test server a unit went to.
pub const TARGET: &str = "target";
/// The ON/OFF source that let a unit through (only when the profile gates by sources).
pub const SOURCE: &str = "source";
/// Units sent in an interval.
pub const COUNT: &str = "count";
/// An answer time in seconds (the interval's mean), `-` for none.
pub const ANSWER_S: &str = "answer_s";

/// The columns of a trace, in order: per interval (`per_interval`) or per unit, with the
/// `source` column or without.
#[must_use]
pub fn columns(per_interval: bool, sources: bool) -> Vec<&'static str> {
    let mut c = if per_interval {
        vec![TIME_S, POOL, COUNT]
    } else {
        vec![TIME_S, COPY, USER, POOL, TARGET]
    };
    if sources {
        c.push(SOURCE);
    }
    c.push(ANSWER_S);
    c
}

/// The header line of a trace (without its newline).
#[must_use]
pub fn header(per_interval: bool, sources: bool) -> String {
    columns(per_interval, sources).join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_headers() {
        assert_eq!(
            header(false, false),
            "time_s,copy,user,pool,target,answer_s"
        );
        assert_eq!(
            header(false, true),
            "time_s,copy,user,pool,target,source,answer_s"
        );
        assert_eq!(header(true, false), "time_s,pool,count,answer_s");
        assert_eq!(header(true, true), "time_s,pool,count,source,answer_s");
    }
}
