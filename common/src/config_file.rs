//! `--config FILE` of the binaries: a TOML file whose keys are the long flags of the command
//! line (`session-timeout = "30s"`, `map = ["80=198.18.2.2:80"]`, `no-secret = true`), turned
//! into those flags before clap parses, so that clap checks every value and `--help` stays the
//! one reference of the options.
//!
//! Rules: a key is a long flag of the command (or of the subcommand `--config` is given to),
//! `_` and `-` alike; a flag given on the command line overrides the file's (a list flag given
//! there replaces the file's list); an array gives a repeatable flag once per element; `true`
//! gives a flag without value, `false` leaves it out. An unknown key, a value of the wrong kind,
//! or a value clap refuses stops start-up with the file, the line and the key.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use toml::{Spanned, Value};

/// Why a config file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `--config` without a file name.
    #[error("--config needs a file name")]
    NoFile,
    /// The file cannot be read.
    #[error("--config {path}: {err}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        err: std::io::Error,
    },
    /// Not TOML, or not a table of keys.
    #[error("--config {path}: {msg}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The TOML parser's message (with its line).
        msg: String,
    },
    /// A key that is no flag of the command.
    #[error(
        "--config {path} line {line}: unknown key `{key}` (the keys are the long flags of --help)"
    )]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// Its line.
        line: usize,
        /// The key.
        key: String,
    },
    /// A value of a kind the flag cannot take.
    #[error("--config {path} line {line}: key `{key}`: {why}")]
    BadValue {
        /// The file.
        path: PathBuf,
        /// Its line.
        line: usize,
        /// The key.
        key: String,
        /// What is wrong.
        why: String,
    },
}

/// Where the flags that came from the file were written: flag name -> (file, line).
#[derive(Debug, Default, Clone)]
pub struct Origins(BTreeMap<String, (PathBuf, usize)>);

impl Origins {
    /// The file and line a flag (its long name) came from, if it came from a file.
    #[must_use]
    pub fn of(&self, flag: &str) -> Option<(&Path, usize)> {
        self.0.get(flag).map(|(p, l)| (p.as_path(), *l))
    }
}

/// `argv` with every `--config FILE` (or `--config=FILE`) replaced by the flags of FILE, those
/// given elsewhere on the command line left out; `cmd` is the whole command (a `--config` after
/// a subcommand's name takes that subcommand's flags).
pub fn expand(
    cmd: &clap::Command,
    argv: Vec<OsString>,
) -> Result<(Vec<OsString>, Origins), ConfigError> {
    let words: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let Some(at) = words
        .iter()
        .take_while(|w| *w != "--")
        .position(|w| w == "--config" || w.starts_with("--config="))
    else {
        return Ok((argv, Origins::default()));
    };
    let (path, used) = match words[at].strip_prefix("--config=") {
        Some(p) => (PathBuf::from(p), 1),
        None => (
            PathBuf::from(words.get(at + 1).ok_or(ConfigError::NoFile)?),
            2,
        ),
    };
    let sub = words
        .get(1)
        .and_then(|w| cmd.find_subcommand(w))
        .filter(|_| at > 1);
    let cmd = sub.unwrap_or(cmd);
    let text = std::fs::read_to_string(&path).map_err(|err| ConfigError::Read {
        path: path.clone(),
        err,
    })?;
    let rest: Vec<&String> = words
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < at || *i >= at + used)
        .map(|(_, w)| w)
        .collect();
    let given = flags_given(cmd, &rest);
    let (flags, origins) = flags_of(cmd, &path, &text, &given)?;
    let mut out: Vec<OsString> = argv[..at].to_vec();
    out.extend(flags.into_iter().map(OsString::from));
    out.extend_from_slice(&argv[at + used..]);
    Ok((out, origins))
}

/// The long names of the flags on a command line (short ones mapped to theirs).
fn flags_given(cmd: &clap::Command, words: &[&String]) -> Vec<String> {
    let mut out = Vec::new();
    for w in words.iter().take_while(|w| **w != "--") {
        if let Some(long) = w.strip_prefix("--") {
            out.push(long.split('=').next().unwrap_or(long).to_string());
        } else if let Some(shorts) = w.strip_prefix('-') {
            for c in shorts.chars() {
                if let Some(a) = cmd.get_arguments().find(|a| a.get_short() == Some(c)) {
                    out.extend(a.get_long().map(str::to_string));
                }
            }
        }
    }
    out
}

/// The flags a config text stands for, and where each came from.
fn flags_of(
    cmd: &clap::Command,
    path: &Path,
    text: &str,
    given: &[String],
) -> Result<(Vec<String>, Origins), ConfigError> {
    let table: BTreeMap<Spanned<String>, Spanned<Value>> =
        toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.to_path_buf(),
            msg: e.to_string().trim_end().to_string(),
        })?;
    let line_of = |at: usize| text[..at.min(text.len())].matches('\n').count() + 1;
    let mut entries: Vec<_> = table.into_iter().collect();
    entries.sort_by_key(|(k, _)| k.span().start);
    let mut flags = Vec::new();
    let mut origins = Origins::default();
    for (key, value) in entries {
        let line = line_of(key.span().start);
        let name = key.get_ref().replace('_', "-");
        let bad = |why: String| ConfigError::BadValue {
            path: path.to_path_buf(),
            line,
            key: key.get_ref().clone(),
            why,
        };
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(name.as_str()))
            .filter(|a| {
                name != "config"
                    && !matches!(
                        a.get_action(),
                        clap::ArgAction::Help
                            | clap::ArgAction::HelpShort
                            | clap::ArgAction::HelpLong
                            | clap::ArgAction::Version
                    )
            })
            .ok_or_else(|| ConfigError::UnknownKey {
                path: path.to_path_buf(),
                line,
                key: key.get_ref().clone(),
            })?;
        if given.contains(&name) {
            continue; // the command line overrides it
        }
        origins.0.insert(name.clone(), (path.to_path_buf(), line));
        let items: Vec<&Value> = match value.get_ref() {
            Value::Array(a) => a.iter().collect(),
            v => vec![v],
        };
        let takes_value = arg.get_action().takes_values();
        for v in items {
            match (v, takes_value, arg.get_action()) {
                (Value::Boolean(b), false, _) => {
                    if *b {
                        flags.push(format!("--{name}"));
                    }
                }
                (Value::Integer(n), false, clap::ArgAction::Count) if *n >= 0 => {
                    flags.extend((0..*n).map(|_| format!("--{name}")));
                }
                (_, false, _) => {
                    return Err(bad("this flag takes no value: give true or false".into()))
                }
                (Value::String(s), true, _) => flags.push(format!("--{name}={s}")),
                (Value::Integer(n), true, _) => flags.push(format!("--{name}={n}")),
                (Value::Float(x), true, _) => flags.push(format!("--{name}={x}")),
                (Value::Boolean(b), true, _) => flags.push(format!("--{name}={b}")),
                (Value::Datetime(d), true, _) => flags.push(format!("--{name}={d}")),
                (Value::Array(_) | Value::Table(_), true, _) => {
                    return Err(bad(
                        "expects a value or a list of values, not a table or a nested list".into(),
                    ))
                }
            }
        }
    }
    Ok((flags, origins))
}

/// Parses the process's command line with its `--config` file expanded ([`expand`]); a bad
/// file or value prints the error (naming the file, line and key when the value came from the
/// file) and exits with status 2, as clap does.
pub fn matches(cmd: clap::Command) -> clap::ArgMatches {
    match matches_from(cmd, std::env::args_os().collect()) {
        Ok(m) => m,
        Err(Failure::Config(e)) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
        Err(Failure::Clap(e, origin)) => {
            if let Some(o) = origin {
                eprintln!("error: {o}");
            }
            e.exit()
        }
    }
}

/// Why [`matches_from`] failed.
#[derive(Debug)]
pub enum Failure {
    /// The file.
    Config(ConfigError),
    /// clap refused the flags; where the flag it names was written, when in the file.
    Clap(clap::Error, Option<String>),
}

/// [`matches()`] over a given command line, returning the failure.
pub fn matches_from(cmd: clap::Command, argv: Vec<OsString>) -> Result<clap::ArgMatches, Failure> {
    let (argv, origins) = expand(&cmd, argv).map_err(Failure::Config)?;
    cmd.try_get_matches_from(argv).map_err(|e| {
        let origin = e.get(clap::error::ContextKind::InvalidArg).and_then(|v| {
            let clap::error::ContextValue::String(s) = v else {
                return None;
            };
            let long = s
                .strip_prefix("--")?
                .split([' ', '=', '<'])
                .next()?
                .to_string();
            let (path, line) = origins.of(&long)?;
            Some(format!(
                "--config {} line {line}: key `{long}`:",
                path.display()
            ))
        });
        Failure::Clap(e, origin)
    })
}
