//! Device processes: per-device flags (`--device-flags I=FLAGS`), the `belfry-device`
//! command line, and starting each device and waiting until its socket exists.

use std::fmt;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;

use crate::boot::placement::{self, Pinning};

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A `--device-flags` value is malformed.
    #[error("Bad --device-flags '{value}': {reason}")]
    BadFlags {
        /// The value as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A `--device-flags` index names no device.
    #[error("--device-flags names device {index}, but only {count} device(s) are attached")]
    NoSuchDevice {
        /// The index given.
        index: usize,
        /// The number of devices.
        count: usize,
    },
    /// Spawning a device failed.
    #[error("Starting device {index} ({program})")]
    Spawn {
        /// Device index.
        index: usize,
        /// The binary.
        program: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, Error>;

/// Which devices a `--device-flags` value applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Every device.
    All,
    /// Device `i` (0-based).
    Index(usize),
}

/// One `--device-flags I=FLAGS` value: extra `belfry-device` arguments for some devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceFlags {
    /// The devices it applies to.
    pub target: Target,
    /// The arguments, split like a shell would.
    pub args: Vec<String>,
}

impl FromStr for DeviceFlags {
    type Err = Error;

    fn from_str(value: &str) -> Result<Self> {
        let bad = |reason: &str| Error::BadFlags { value: value.to_string(), reason: reason.to_string() };
        let (target, flags) = value.split_once('=').ok_or_else(|| bad("expected I=FLAGS or all=FLAGS"))?;
        let target = match target.trim() {
            "all" => Target::All,
            index => {
                Target::Index(index.parse().map_err(|_| bad("the part before '=' must be a device index or 'all'"))?)
            }
        };
        let args = split_words(flags).map_err(bad)?;
        Ok(Self { target, args })
    }
}

impl fmt::Display for DeviceFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.target {
            Target::All => write!(f, "all=")?,
            Target::Index(i) => write!(f, "{i}=")?,
        }
        write!(f, "{}", self.args.join(" "))
    }
}

/// Splits `text` into words like a POSIX shell (whitespace, single and double quotes,
/// backslash escapes), without expansions.
pub fn split_words(text: &str) -> std::result::Result<Vec<String>, &'static str> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("unterminated single quote"),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("unterminated double quote"),
                        },
                        Some(c) => word.push(c),
                        None => return Err("unterminated double quote"),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => word.push(c),
                    None => return Err("trailing backslash"),
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// The extra arguments of each of `count` devices: `all=` flags first, then the device's own.
pub fn per_device_args(count: usize, flags: &[DeviceFlags]) -> Result<Vec<Vec<String>>> {
    let mut args = vec![Vec::new(); count];
    for f in flags {
        if let Target::Index(index) = f.target {
            if index >= count {
                return Err(Error::NoSuchDevice { index, count });
            }
        }
    }
    for f in flags.iter().filter(|f| f.target == Target::All) {
        for a in &mut args {
            a.extend(f.args.iter().cloned());
        }
    }
    for f in flags {
        if let Target::Index(index) = f.target {
            args[index].extend(f.args.iter().cloned());
        }
    }
    Ok(args)
}

/// Whether any of the devices' arguments (`per_device_args`) asks for a test-only fault
/// injection: the device binary must then be built with the `fault-injection` feature, which a
/// release build leaves off.
pub fn inject_faults(args: &[Vec<String>]) -> bool {
    args.iter().flatten().any(|a| a == "--inject" || a.starts_with("--inject="))
}

/// How to start one device.
#[derive(Clone, Debug)]
pub struct DeviceSpec {
    /// Index (also in file names and prefixes).
    pub index: usize,
    /// The vfio-user socket the device creates.
    pub socket: PathBuf,
    /// Its JSON-lines trace.
    pub trace: PathBuf,
    /// Its standard error, saved.
    pub log: PathBuf,
    /// Its input log, if the run records (`--record`).
    pub record: Option<PathBuf>,
    /// Extra arguments from `--device-flags`.
    pub extra: Vec<String>,
    /// The CPUs and slice of `--placement device-core` (none: wherever the host schedules it).
    pub pinning: Option<Pinning>,
}

impl DeviceSpec {
    /// The `belfry-device` arguments.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--socket-path".to_string(),
            self.socket.display().to_string(),
            "--trace".to_string(),
            self.trace.display().to_string(),
        ];
        if let Some(record) = &self.record {
            args.extend(["--record".to_string(), record.display().to_string()]);
        }
        // The name prefixes the device's log lines and trace records.
        if !self.extra.iter().any(|a| a == "--name" || a.starts_with("--name=")) {
            args.extend(["--name".to_string(), format!("belfry{}", self.index)]);
        }
        args.extend(self.extra.iter().cloned());
        args
    }
}

/// A started device.
pub struct Device {
    /// How it was started.
    pub spec: DeviceSpec,
    /// The process (in its own process group).
    pub child: Child,
}

/// Starts device `spec` with `binary`; its standard error is left as a pipe for streaming.
pub fn spawn(binary: &Path, spec: DeviceSpec) -> Result<Device> {
    let mut command = Command::new(binary);
    command
        .args(spec.args())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        // Its own group: a terminal Ctrl-C reaches only the launcher, which stops the device.
        .process_group(0);
    if std::env::var_os("RUST_LOG").is_none() {
        command.env("RUST_LOG", "info");
    }
    crate::sys::kill_child_with_parent(&mut command);
    if let Some(pinning) = &spec.pinning {
        placement::pin(&mut command, &pinning.cpus, pinning.slice);
    }
    let child = command.spawn().map_err(|source| Error::Spawn {
        index: spec.index,
        program: binary.display().to_string(),
        source,
    })?;
    Ok(Device { spec, child })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_flags_parse_index_all_and_quotes() {
        let f: DeviceFlags = "1=--inject no-interrupts".parse().unwrap();
        assert_eq!(f.target, Target::Index(1));
        assert_eq!(f.args, vec!["--inject", "no-interrupts"]);

        let f: DeviceFlags = "all=--vram-size 64M --inject 'bad-identity'".parse().unwrap();
        assert_eq!(f.target, Target::All);
        assert_eq!(f.args, vec!["--vram-size", "64M", "--inject", "bad-identity"]);

        let f: DeviceFlags = r#"0=--x "a b" c\ d"#.parse().unwrap();
        assert_eq!(f.args, vec!["--x", "a b", "c d"]);

        let f: DeviceFlags = "0=".parse().unwrap();
        assert!(f.args.is_empty());
    }

    #[test]
    fn malformed_device_flags_are_rejected() {
        assert!("--inject x".parse::<DeviceFlags>().is_err());
        assert!("one=--x".parse::<DeviceFlags>().is_err());
        assert!("-1=--x".parse::<DeviceFlags>().is_err());
        assert!("0='open".parse::<DeviceFlags>().is_err());
        assert!("0=\"open".parse::<DeviceFlags>().is_err());
    }

    #[test]
    fn per_device_args_put_all_first_and_check_indices() {
        let flags: Vec<DeviceFlags> =
            ["1=--inject no-interrupts", "all=--doorbells 8"].iter().map(|s| s.parse().unwrap()).collect();
        let args = per_device_args(2, &flags).unwrap();
        assert_eq!(args[0], vec!["--doorbells", "8"]);
        assert_eq!(args[1], vec!["--doorbells", "8", "--inject", "no-interrupts"]);
        assert!(matches!(per_device_args(1, &flags), Err(Error::NoSuchDevice { index: 1, count: 1 })));
    }

    #[test]
    fn device_command_line_has_socket_trace_and_extras() {
        let spec = DeviceSpec {
            index: 0,
            socket: "/r/sock/device0.sock".into(),
            trace: "/r/device0.trace.jsonl".into(),
            log: "/r/device0.log".into(),
            record: None,
            extra: vec!["--inject".into(), "bad-identity".into()],
            pinning: None,
        };
        assert_eq!(
            spec.args(),
            vec![
                "--socket-path",
                "/r/sock/device0.sock",
                "--trace",
                "/r/device0.trace.jsonl",
                "--name",
                "belfry0",
                "--inject",
                "bad-identity"
            ]
        );
    }

    #[test]
    fn only_devices_that_inject_need_the_feature() {
        let words = |s: &str| split_words(s).unwrap();
        assert!(!inject_faults(&[words("--doorbells 2"), words("--no-cmd-ring")]));
        assert!(inject_faults(&[words(""), words("--inject mailbox-stall")]));
        assert!(inject_faults(&[words("--inject=bad-identity")]));
        // The suite's layout has injecting devices; the conformance run builds with the feature.
        assert!(inject_faults(&crate::suite::suite_device_flags().iter().map(|f| words(f)).collect::<Vec<_>>()));
    }
}
