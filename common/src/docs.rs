//! Man pages and shell completions generated from a binary's clap definition (feature `docs`),
//! for the Debian packages: `TRAFFICCOPY_GEN_DOCS=DIR copier` writes `DIR/man/copier.1` (and a
//! page per subcommand, `copier-doctor.1`) and `DIR/completions/{copier.bash,_copier,copier.fish}`,
//! then exits. `packaging/build-debs.sh` runs it; without the variable nothing happens.

use std::path::Path;

/// The variable that asks a binary to write its documentation and exit.
pub const ENV: &str = "TRAFFICCOPY_GEN_DOCS";

/// When [`ENV`] names a directory, writes the man pages and completions of `cmd` there and
/// exits the process (status 0, or 1 with a message when a file cannot be written).
pub fn generate_if_asked(cmd: clap::Command) {
    let Some(dir) = std::env::var_os(ENV) else {
        return;
    };
    match generate(cmd, Path::new(&dir)) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("{ENV}: {e}");
            std::process::exit(1);
        }
    }
}

/// Writes the man pages and completions of `cmd` under `dir`.
pub fn generate(mut cmd: clap::Command, dir: &Path) -> Result<(), String> {
    use clap_complete::{generate_to, Shell};
    let name = cmd.get_name().to_string();
    let man = dir.join("man");
    let comp = dir.join("completions");
    for d in [&man, &comp] {
        std::fs::create_dir_all(d).map_err(|e| format!("create {}: {e}", d.display()))?;
    }
    // no pages for clap's own `help` subcommand (`copier-help.1`...): `--help` is in each page
    cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    clap_mangen::generate_to(cmd.clone(), &man)
        .map_err(|e| format!("man pages into {}: {e}", man.display()))?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        generate_to(shell, &mut cmd, &name, &comp)
            .map_err(|e| format!("{shell} completion into {}: {e}", comp.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn writes_pages_and_completions() {
        let cmd = clap::Command::new("demo")
            .about("does things")
            .arg(clap::Arg::new("port").long("port").help("the port"))
            .subcommand(clap::Command::new("doctor").about("checks"));
        let dir = std::env::temp_dir().join(format!("docs-test-{}", std::process::id()));
        super::generate(cmd, &dir).unwrap();
        let page = std::fs::read_to_string(dir.join("man/demo.1")).unwrap();
        assert!(
            page.contains("\\-\\-port") && page.contains("does things"),
            "{page}"
        );
        assert!(dir.join("man/demo-doctor.1").is_file());
        let bash = std::fs::read_to_string(dir.join("completions/demo.bash")).unwrap();
        assert!(bash.contains("--port") && bash.contains("doctor"), "{bash}");
        assert!(
            dir.join("completions/_demo").is_file() && dir.join("completions/demo.fish").is_file()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
