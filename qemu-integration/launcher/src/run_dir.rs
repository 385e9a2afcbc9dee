//! The run directory: one per launcher run, under `$BELFRY_RUNS` (default
//! `<target>/belfry-runs`), named `<UTC timestamp>-<subcommand>`, holding every artefact of
//! the run:
//!
//! ```text
//! sock/                      device sockets (mode 0700)
//! console.log                guest console (first serial port)
//! results.txt                guest /dev/ttyS1 (second serial port)
//! qemu.log                   QEMU's own stderr
//! device<I>.log              stderr of device I
//! device<I>.trace.jsonl.gz   trace of device I (belfry-device --trace; gzip JSON lines)
//! timeline.txt               the module's fence timeline (conformance; belfry-timeline)
//! trace.perfetto.gz          devices and module on one timeline (belfry-trace perfetto)
//! guest-run.sh               the generated /belfry/run of the initramfs
//! initramfs.cpio             the initramfs (removed after a successful run unless --keep)
//! lspci.txt                  the listing from the guest, addresses normalised
//! build.log                  the build tools' and provision.sh's messages (unless -v)
//! results.json               the suite's JSON results (conformance)
//! junit.xml                  the suite's results as JUnit XML
//! results.ktap               the suite's results as KTAP
//! coverage.txt               every rule id: proven in the guest, by host tests, allowed, gap
//! summary.txt                command, accelerator, timings, verdict
//! bench.json                 belfry-bench's figures with the host's CPU and load (if it ran)
//! durations.txt              each test's seconds (conformance), the suite's deal by time
//! guest<N>/                  guest N's files in a run across several guests (`conformance
//!                            --guests`): its sock/, console, devices, traces, shard's
//!                            results, as above; results.json, junit.xml, results.ktap,
//!                            coverage.txt and durations.txt of the run directory itself are
//!                            then every guest's, merged
//! ```

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The longest path a UNIX socket address can hold (sun_path without its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Creating a directory failed.
    #[error("Creating {}", path.display())]
    Create {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A socket path would not fit in a UNIX socket address.
    #[error("Socket path {} is longer than {MAX_SOCKET_PATH} bytes; set BELFRY_RUNS to a shorter directory", path.display())]
    SocketPathTooLong {
        /// The path.
        path: PathBuf,
    },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, Error>;

/// Formats seconds since the epoch as `YYYYMMDD-HHMMSS` (UTC).
pub fn timestamp(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}{month:02}{day:02}-{:02}{:02}{:02}", rem / 3600, rem / 60 % 60, rem % 60)
}

/// Proleptic Gregorian date of `days` since 1970-01-01 (H. Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// The directory holding every run directory.
pub fn runs_root(target_dir: &Path) -> PathBuf {
    match std::env::var_os("BELFRY_RUNS") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => target_dir.join("belfry-runs"),
    }
}

/// One run's directory and the paths inside it.
#[derive(Clone, Debug)]
pub struct RunDir {
    /// The directory.
    pub path: PathBuf,
}

impl RunDir {
    /// Creates a fresh run directory for `subcommand` under `root`.
    pub fn create(root: &Path, subcommand: &str) -> Result<Self> {
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let base = format!("{}-{subcommand}", timestamp(secs));
        fs::create_dir_all(root).map_err(|source| Error::Create { path: root.to_path_buf(), source })?;
        let root = root.canonicalize().map_err(|source| Error::Create { path: root.to_path_buf(), source })?;
        for attempt in 1.. {
            let name = if attempt == 1 { base.clone() } else { format!("{base}.{attempt}") };
            let path = root.join(name);
            match fs::create_dir(&path) {
                Ok(()) => return Self::with_socket_dir(path),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(Error::Create { path, source }),
            }
        }
        unreachable!("the attempt counter is unbounded")
    }

    /// The run directory at `path` (created) with its private socket directory.
    fn with_socket_dir(path: PathBuf) -> Result<Self> {
        let run = Self { path };
        let sock = run.socket_dir();
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&sock)
            .and_then(|()| fs::set_permissions(&sock, fs::Permissions::from_mode(0o700)))
            .map_err(|source| Error::Create { path: sock, source })?;
        Ok(run)
    }

    /// The directory of guest `n` (1-based) of a run of `guests`: this one for a run of one,
    /// else `guest<n>/` inside it (created, with its own socket directory), so that nothing of
    /// one guest is taken for the whole run's.
    pub fn guest(&self, n: usize, guests: usize) -> Result<Self> {
        if guests <= 1 {
            return Ok(self.clone());
        }
        let path = self.path.join(format!("guest{n}"));
        fs::create_dir(&path).map_err(|source| Error::Create { path: path.clone(), source })?;
        Self::with_socket_dir(path)
    }

    /// The private directory of the device sockets.
    pub fn socket_dir(&self) -> PathBuf {
        self.path.join("sock")
    }

    /// The socket of device `i`, checked to fit in a socket address.
    pub fn socket(&self, i: usize) -> Result<PathBuf> {
        self.socket_named(&format!("device{i}.sock"))
    }

    /// QEMU's monitor (QMP) socket, checked to fit in a socket address.
    pub fn qmp_socket(&self) -> Result<PathBuf> {
        self.socket_named("qmp.sock")
    }

    /// Socket `name` in [`Self::socket_dir`], or an error if its path does not fit in a socket
    /// address.
    fn socket_named(&self, name: &str) -> Result<PathBuf> {
        let path = self.socket_dir().join(name);
        if path.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(Error::SocketPathTooLong { path });
        }
        Ok(path)
    }

    /// The guest console log.
    pub fn console_log(&self) -> PathBuf {
        self.path.join("console.log")
    }

    /// QEMU's stderr.
    pub fn qemu_log(&self) -> PathBuf {
        self.path.join("qemu.log")
    }

    /// Device `i`'s stderr.
    pub fn device_log(&self, i: usize) -> PathBuf {
        self.path.join(format!("device{i}.log"))
    }

    /// Device `i`'s trace (gzip, the device's default form).
    pub fn device_trace(&self, i: usize) -> PathBuf {
        self.path.join(belfry_trace_schema::file::device_file_name(i, belfry_trace_schema::file::Compression::Gzip))
    }

    /// Device `i`'s input log (`--record`).
    pub fn device_record(&self, i: usize) -> PathBuf {
        self.path
            .join(belfry_trace_schema::input_log::device_file_name(i, belfry_trace_schema::file::Compression::Gzip))
    }

    /// The module's fence timeline, from the results channel.
    pub fn timeline(&self) -> PathBuf {
        self.path.join("timeline.txt")
    }

    /// The guest's second serial port.
    pub fn results(&self) -> PathBuf {
        self.path.join("results.txt")
    }

    /// The initramfs.
    pub fn initramfs(&self) -> PathBuf {
        self.path.join("initramfs.cpio")
    }

    /// The generated `/belfry/run` script.
    pub fn guest_run_script(&self) -> PathBuf {
        self.path.join("guest-run.sh")
    }

    /// The normalised lspci-style listing.
    pub fn lspci(&self) -> PathBuf {
        self.path.join("lspci.txt")
    }

    /// The build tools' messages (quiet runs).
    pub fn build_log(&self) -> PathBuf {
        self.path.join("build.log")
    }

    /// The summary.
    pub fn summary(&self) -> PathBuf {
        self.path.join("summary.txt")
    }
}

/// The last `lines` lines of a log file (empty if it cannot be read).
pub fn log_tail(path: &Path, lines: usize) -> Vec<String> {
    let Ok(text) = std::fs::read(path) else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&text);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].iter().map(|s| s.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        assert_eq!(timestamp(0), "19700101-000000");
        // 2026-11-22 02:31:04 UTC
        assert_eq!(timestamp(1_795_314_664), "20261122-023104");
        // 2024-02-29 23:59:59 UTC (leap day)
        assert_eq!(timestamp(1_709_251_199), "20240229-235959");
    }

    #[test]
    fn run_dirs_are_unique_with_a_private_socket_dir() {
        let root = tempfile::tempdir().unwrap();
        let a = RunDir::create(root.path(), "conformance").unwrap();
        let b = RunDir::create(root.path(), "conformance").unwrap();
        assert_ne!(a.path, b.path);
        assert!(a.path.file_name().unwrap().to_str().unwrap().contains("-conformance"));
        let mode = fs::metadata(a.socket_dir()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(a.socket(0).unwrap().ends_with("sock/device0.sock"));
    }

    #[test]
    fn each_further_guest_has_a_directory_and_sockets_of_its_own() {
        let root = tempfile::tempdir().expect("tempdir");
        let run = RunDir::create(root.path(), "conformance").expect("create");
        assert_eq!(run.guest(1, 1).expect("the only guest").path, run.path);
        let (first, second) = (run.guest(1, 2).expect("guest 1"), run.guest(2, 2).expect("guest 2"));
        assert_eq!((first.path.clone(), second.path.clone()), (run.path.join("guest1"), run.path.join("guest2")));
        assert_ne!(second.socket(0).expect("socket"), first.socket(0).expect("socket"));
        let mode = fs::metadata(second.socket_dir()).expect("sock").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert!(run.guest(2, 2).is_err(), "a guest's directory is made once");
    }

    #[test]
    fn overlong_socket_paths_are_refused() {
        let run = RunDir { path: PathBuf::from(format!("/{}", "x".repeat(120))) };
        assert!(matches!(run.socket(0), Err(Error::SocketPathTooLong { .. })));
    }

    #[test]
    fn log_tail_returns_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "a\nb\nc\n").unwrap();
        assert_eq!(log_tail(&path, 2), vec!["b", "c"]);
        assert!(log_tail(&dir.path().join("missing"), 2).is_empty());
    }
}
