//! Which run directories stay: `cargo belfry` keeps the last [`DEFAULT_KEEP`] (`--keep-runs N`,
//! `BELFRY_KEEP_RUNS`; 0 keeps all) under the runs root and removes older ones when a run ends;
//! `cargo belfry clean` removes all but the last N, or all (`--all`). Only directories named as
//! the launcher names them (`YYYYMMDD-HHMMSS-<subcommand>[.N]`, [`is_run_dir_name`]) are ever
//! counted or removed: anything else under the root is left alone. Also the size of a run
//! directory, printed with its path at the end of a run.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Run directories kept when neither the flag nor the environment says.
pub const DEFAULT_KEEP: usize = 10;

/// The environment variable giving the number of run directories kept.
pub const KEEP_ENV: &str = "BELFRY_KEEP_RUNS";

/// The number of run directories to keep: `flag`, else `$BELFRY_KEEP_RUNS`, else
/// [`DEFAULT_KEEP`]; 0 keeps all.
///
/// # Errors
/// `BELFRY_KEEP_RUNS` set to something that is not a number.
pub fn keep_count(flag: Option<usize>) -> Result<usize, String> {
    keep_count_from(flag, std::env::var(KEEP_ENV).ok().as_deref())
}

/// [`keep_count`] with the environment's value given.
fn keep_count_from(flag: Option<usize>, env: Option<&str>) -> Result<usize, String> {
    if let Some(n) = flag {
        return Ok(n);
    }
    match env.map(str::trim) {
        None | Some("") => Ok(DEFAULT_KEEP),
        Some(text) => text.parse().map_err(|_| format!("{KEEP_ENV}={text:?} is not a number of run directories")),
    }
}

/// Whether `name` is a run directory's name as [`crate::run_dir::RunDir::create`] makes it:
/// `YYYYMMDD-HHMMSS-<subcommand>`, optionally `.N`.
pub fn is_run_dir_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let stamp = bytes.len() > 16
        && bytes[..8].iter().all(u8::is_ascii_digit)
        && bytes[8] == b'-'
        && bytes[9..15].iter().all(u8::is_ascii_digit)
        && bytes[15] == b'-';
    if !stamp {
        return false;
    }
    let rest = &name[16..];
    let (command, attempt) = rest.split_once('.').unwrap_or((rest, "1"));
    !command.is_empty()
        && command.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
        && !attempt.is_empty()
        && attempt.bytes().all(|b| b.is_ascii_digit())
}

/// The run directories under `root`, oldest first (by the time in their names, then the
/// attempt number). A missing root has none.
///
/// # Errors
/// Reading `root`.
pub fn run_dirs(root: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found: Vec<(String, u32, PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry?;
        // Directories themselves, not symlinks to them: a link is not the launcher's.
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
        if !is_run_dir_name(&name) {
            continue;
        }
        let attempt = name.rsplit_once('.').and_then(|(_, n)| n.parse().ok()).unwrap_or(1);
        found.push((name[..15].to_string(), attempt, entry.path()));
    }
    found.sort();
    Ok(found.into_iter().map(|(_, _, path)| path).collect())
}

/// What removing run directories did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Removed {
    /// The directories removed, oldest first.
    pub dirs: Vec<PathBuf>,
    /// Their bytes.
    pub bytes: u64,
    /// Those that could not be removed, with why.
    pub failed: Vec<(PathBuf, String)>,
}

/// Removes the run directories under `root` beyond the newest `keep` (0: none removed), never
/// `current` (the run in progress).
///
/// # Errors
/// Reading `root`.
pub fn prune(root: &Path, keep: usize, current: Option<&Path>) -> io::Result<Removed> {
    if keep == 0 {
        return Ok(Removed::default());
    }
    let dirs = run_dirs(root)?;
    let excess = dirs.len().saturating_sub(keep);
    Ok(remove(dirs.into_iter().take(excess).filter(|d| Some(d.as_path()) != current)))
}

/// Removes every run directory under `root`.
///
/// # Errors
/// Reading `root`.
pub fn remove_all(root: &Path) -> io::Result<Removed> {
    Ok(remove(run_dirs(root)?))
}

fn remove(dirs: impl IntoIterator<Item = PathBuf>) -> Removed {
    let mut removed = Removed::default();
    for dir in dirs {
        let bytes = dir_size(&dir);
        match fs::remove_dir_all(&dir) {
            Ok(()) => {
                removed.bytes += bytes;
                removed.dirs.push(dir);
            }
            Err(e) => removed.failed.push((dir, e.to_string())),
        }
    }
    removed
}

/// The bytes of the files under `dir` (symlinks not followed; what cannot be read counts 0).
pub fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => dir_size(&entry.path()),
            Ok(t) if t.is_file() => entry.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// `bytes` for people: `512 B`, `3.4 KiB`, `12.0 MiB`, `1.2 GiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests;
