//! Calls `qemu-integration/provision/provision.sh`: the provisioning root, the guest kernel
//! tree, out-of-tree module builds, the initramfs and the command that runs QEMU (on the host
//! or inside the root). Each subcommand prints one machine-readable line on stdout and its
//! progress on stderr, which goes to the terminal (`-v`) or to the run's `build.log`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::steps::ToolOutput;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The script could not be started.
    #[error("Running provision.sh {subcommand}")]
    Spawn {
        /// The subcommand.
        subcommand: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The script failed.
    #[error("provision.sh {subcommand} failed ({status}); its messages are {place}")]
    Failed {
        /// The subcommand.
        subcommand: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// Where its messages are ("above", "in …/build.log").
        place: String,
    },
    /// The script's answer was not what the contract says.
    #[error("provision.sh {subcommand} answered '{answer}': {reason}")]
    BadAnswer {
        /// The subcommand.
        subcommand: String,
        /// Its stdout line.
        answer: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, Error>;

/// Where QEMU runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QemuLocation {
    /// A suitable QEMU on the host.
    Host(PathBuf),
    /// QEMU inside the provisioning root (run through `provision.sh run-qemu`).
    Root(PathBuf),
}

/// Parses the answer of `provision.sh qemu`.
pub fn parse_qemu_answer(answer: &str) -> Option<QemuLocation> {
    let (kind, path) = answer.trim().split_once(' ')?;
    let path = PathBuf::from(path.trim());
    match kind {
        "host" => Some(QemuLocation::Host(path)),
        "root" => Some(QemuLocation::Root(path)),
        _ => None,
    }
}

/// The provisioning script.
#[derive(Clone, Debug)]
pub struct Provision {
    script: PathBuf,
    /// Where the script's progress and logs (stderr) go.
    pub output: ToolOutput,
}

impl Provision {
    /// The script of the repository at `repo`.
    pub fn new(repo: &Path) -> Self {
        Self { script: repo.join("qemu-integration/provision/provision.sh"), output: ToolOutput::Terminal }
    }

    fn command(&self, subcommand: &str) -> Command {
        let mut command = Command::new("bash");
        command.arg(&self.script).arg(subcommand);
        command
    }

    /// Runs a subcommand, passing its progress through, and returns its stdout line.
    fn answer(&self, subcommand: &str, args: &[OsString]) -> Result<String> {
        let spawn_error = |source| Error::Spawn { subcommand: subcommand.to_string(), source };
        let mut child = self
            .command(subcommand)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(self.output.stdio_with_notices())
            .spawn()
            .map_err(spawn_error)?;
        let copier = child.stderr.take().map(|stderr| self.output.copy_notices(stderr));
        let output = child.wait_with_output().map_err(spawn_error)?;
        if let Some(copier) = copier {
            let _ = copier.join();
        }
        if !output.status.success() {
            return Err(Error::Failed {
                subcommand: subcommand.to_string(),
                status: output.status,
                place: self.output.place(),
            });
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let line = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
        if line.is_empty() {
            return Err(Error::BadAnswer {
                subcommand: subcommand.to_string(),
                answer: line,
                reason: "no answer on stdout",
            });
        }
        Ok(line)
    }

    fn path_answer(&self, subcommand: &str, args: &[OsString]) -> Result<PathBuf> {
        let answer = self.answer(subcommand, args)?;
        let path = PathBuf::from(&answer);
        if !path.is_absolute() || !path.exists() {
            return Err(Error::BadAnswer {
                subcommand: subcommand.to_string(),
                answer,
                reason: "not an existing absolute path",
            });
        }
        Ok(path)
    }

    /// The guest kernel build tree (holds `vmlinux`), building it if needed.
    pub fn kernel(&self) -> Result<PathBuf> {
        self.path_answer("kernel", &[])
    }

    /// Builds the out-of-tree module in `src` and returns the `.ko` named `name`.
    pub fn kmod(&self, src: &Path, name: &str) -> Result<PathBuf> {
        let answer = self.answer("kmod", &[src.as_os_str().to_owned()])?;
        answer
            .split_whitespace()
            .map(PathBuf::from)
            .find(|p| p.file_name().is_some_and(|f| f == name))
            .filter(|p| p.exists())
            .ok_or(Error::BadAnswer {
                subcommand: "kmod".into(),
                answer,
                reason: "the module is not among the built files",
            })
    }

    /// Compiles C source `src` into the static guest program `out` with the root's gcc and
    /// `args` (include directories, libraries; absolute paths).
    pub fn cc(&self, out: &Path, src: &Path, args: &[OsString]) -> Result<PathBuf> {
        let mut all = vec![out.as_os_str().to_owned(), src.as_os_str().to_owned()];
        all.extend(args.iter().cloned());
        self.path_answer("cc", &all)
    }

    /// Where QEMU runs, provisioning the root if there is no suitable host QEMU.
    pub fn qemu(&self) -> Result<QemuLocation> {
        let answer = self.answer("qemu", &[])?;
        parse_qemu_answer(&answer).ok_or(Error::BadAnswer {
            subcommand: "qemu".into(),
            answer,
            reason: "expected 'host PATH' or 'root PATH'",
        })
    }

    /// Builds the busybox initramfs `out` with `adds` (host path, guest path).
    pub fn initramfs(&self, out: &Path, adds: &[(PathBuf, String)]) -> Result<PathBuf> {
        let mut args = vec![out.as_os_str().to_owned()];
        for (host, guest) in adds {
            args.push("--add".into());
            let mut spec = host.as_os_str().to_owned();
            spec.push(":");
            spec.push(guest);
            args.push(spec);
        }
        self.path_answer("initramfs", &args)
    }

    /// The command that runs QEMU with `args`: the host binary directly, or
    /// `provision.sh run-qemu` with `binds` visible inside the root.
    pub fn qemu_command(&self, location: &QemuLocation, binds: &[PathBuf], args: &[OsString]) -> Command {
        match location {
            QemuLocation::Host(binary) => {
                let mut command = Command::new(binary);
                command.args(args);
                command
            }
            QemuLocation::Root(_) => {
                let mut command = self.command("run-qemu");
                for dir in binds {
                    command.arg("--bind").arg(dir);
                }
                command.arg("--").args(args);
                command
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_answers_are_parsed() {
        assert_eq!(
            parse_qemu_answer("host /usr/bin/qemu-system-x86_64\n"),
            Some(QemuLocation::Host("/usr/bin/qemu-system-x86_64".into()))
        );
        assert_eq!(
            parse_qemu_answer("root /var/cache/belfry/roots/trixie-x/rootfs"),
            Some(QemuLocation::Root("/var/cache/belfry/roots/trixie-x/rootfs".into()))
        );
        assert_eq!(parse_qemu_answer("elsewhere /x"), None);
        assert_eq!(parse_qemu_answer(""), None);
    }

    #[test]
    fn run_qemu_command_binds_directories() {
        let p = Provision::new(Path::new("/repo"));
        let command = p.qemu_command(
            &QemuLocation::Root("/root".into()),
            &["/runs/r".into(), "/cache/k".into()],
            &["-M".into(), "q35".into()],
        );
        let args: Vec<_> = command.get_args().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(command.get_program(), "bash");
        assert_eq!(
            args,
            vec![
                "/repo/qemu-integration/provision/provision.sh",
                "run-qemu",
                "--bind",
                "/runs/r",
                "--bind",
                "/cache/k",
                "--",
                "-M",
                "q35"
            ]
        );
        let host = p.qemu_command(&QemuLocation::Host("/q".into()), &[], &["-M".into()]);
        assert_eq!(host.get_program(), "/q");
    }
}
