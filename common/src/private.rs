//! Files that hold production data (the `--record` archive, the `--compare-log` JSON Lines, the
//! HTML report): created owner-only, whatever the process's umask.
//!
//! Owns: [`create_dir_all`] (missing directories made 0700), [`create`] (truncate or make a
//! file 0600), [`append`] (open or make a file 0600 for appending) and [`write()`] (a whole file,
//! 0600). A file that already exists with bits for group or others is narrowed to 0600 when it
//! is opened: it is ours, and it is about to receive production data. An existing directory is
//! left as it is (it may be a shared parent such as `/var/lib`); the files in it are 0600.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of the files.
pub const FILE_MODE: u32 = 0o600;
/// Mode of the directories made.
pub const DIR_MODE: u32 = 0o700;

/// Makes `dir` and its missing parents, each 0700.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

fn narrow(f: &File) -> io::Result<()> {
    let mode = f.metadata()?.permissions().mode();
    if mode & 0o077 != 0 {
        f.set_permissions(Permissions::from_mode(mode & 0o700 | FILE_MODE))?;
    }
    Ok(())
}

/// Creates `path` (or truncates it) for writing, 0600.
pub fn create(path: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(path)?;
    narrow(&f)?;
    Ok(f)
}

/// Opens `path` for appending (made if missing), 0600.
pub fn append(path: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(FILE_MODE)
        .open(path)?;
    narrow(&f)?;
    Ok(f)
}

/// Writes `data` as the whole of `path`, 0600.
pub fn write(path: &Path, data: &[u8]) -> io::Result<()> {
    create(path)?.write_all(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn files_and_directories_are_owner_only() {
        let base = std::env::temp_dir().join(format!("common-private-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("a/b");
        create_dir_all(&dir).unwrap();
        assert_eq!(
            (mode(&base), mode(&base.join("a")), mode(&dir)),
            (0o700, 0o700, 0o700)
        );
        write(&dir.join("w"), b"x").unwrap();
        append(&dir.join("a")).unwrap();
        create(&dir.join("c")).unwrap();
        for f in ["w", "a", "c"] {
            assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
        }
        // a file left readable by an earlier version is narrowed when it is opened again
        let old = dir.join("old");
        std::fs::write(&old, "x").unwrap();
        std::fs::set_permissions(&old, Permissions::from_mode(0o644)).unwrap();
        append(&old).unwrap();
        assert_eq!(mode(&old), 0o600);
        std::fs::set_permissions(&old, Permissions::from_mode(0o664)).unwrap();
        create(&old).unwrap();
        assert_eq!(mode(&old), 0o600);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
