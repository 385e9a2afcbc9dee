//! Calls `qemu-integration/provision/provision.sh`: the provisioning root, the guest kernel
//! tree, out-of-tree module builds, the initramfs and the command that runs QEMU (on the host
//! or inside the root). Each subcommand prints one machine-readable line on stdout and its
//! progress on stderr, which goes to the terminal (`-v`) or to the run's `build.log`. A
//! subcommand can run alongside other work ([`Provision::start`]): the guest kernel is
//! provisioned while cargo builds.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::setup::steps::ToolOutput;

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

/// The guest kernel flavour (`provision.sh kernel distro|debug|kcsan`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Flavour {
    /// Debian's packaged 7.3.4 image, booted as it is; only the `rust/` metadata a module
    /// needs is built (a few minutes cold).
    #[default]
    Distro,
    /// Built from source with clang and the debug options (KASAN, kmemleak, lockdep,
    /// DEBUG_OBJECTS, DEBUG_ATOMIC_SLEEP, PANIC_ON_OOPS, KUNIT).
    Debug,
    /// The debug options with KCSAN, the kernel's data-race detector, in place of KASAN
    /// (`qemu-integration/kernel/kcsan.config`): not provisioned by `provision.sh all`, built
    /// by its first run.
    Kcsan,
}

impl Flavour {
    /// Its name for provision.sh.
    pub fn name(self) -> &'static str {
        match self {
            Flavour::Distro => "distro",
            Flavour::Debug => "debug",
            Flavour::Kcsan => "kcsan",
        }
    }

    /// Kernel arguments the launcher adds for the flavour (a command-line change needs no
    /// rebuild of the image). The debug kernel boots with `page_poison=1`: every page is
    /// filled with a poison pattern when it is freed, so nothing a process stored in a page
    /// (through a mapping or otherwise) survives into the page's next owner, and the pattern is
    /// checked when the page is allocated again, so a store into a freed page (through a
    /// mapping the module failed to revoke) is a `pagealloc: memory corruption` report, which
    /// fails the run. It takes the place of `init_on_free`, the kernel's default without it.
    /// `pty.legacy_count=0`: the image has `CONFIG_LEGACY_PTYS` (tinyconfig's default), whose
    /// 256 BSD pty pairs nothing in the guest opens took 14 s of its boot under TCG to register
    /// (`initcall_debug`: `pty_init`); the Unix98 ptys (`/dev/ptmx`) are left as they are.
    pub fn boot_args(self) -> Option<&'static str> {
        match self {
            Flavour::Distro => None,
            Flavour::Debug | Flavour::Kcsan => Some("page_poison=1 pty.legacy_count=0"),
        }
    }

    /// Default limit of a run, from QEMU's start to its exit: the debug kernel (KASAN,
    /// kmemleak, lockdep, DEBUG_OBJECTS under TCG) boots and runs the suite 4 to 5 times
    /// slower than the distro image (measured: boot to /init 41 s against 3.5 s).
    pub fn default_timeout(self) -> u64 {
        match self {
            Flavour::Distro => 900,
            Flavour::Debug | Flavour::Kcsan => 2400,
        }
    }

    /// Guests a whole-suite `conformance` run boots side by side by default, each with its
    /// share of the tests, and the tests each guest runs at once ([`Self::suite_jobs`]). Two
    /// on the distro kernel, whose suite mostly waits (its guest time 94 → 61 s with two). Two
    /// on the debug kernel, each running one test at a time: its suite is CPU-bound under TCG,
    /// and one guest spent most of its time in the tests that run alone (334 of 420 s), one
    /// vCPU busy and the host's other core idle; two guests of one test each keep both cores
    /// busy without a third runnable vCPU (472–493 s → 273 s; two guests of two tests each
    /// took 474 s, four vCPUs on two cores: docs/BENCHMARKS.md, "Two guests"). One on the KCSAN
    /// kernel, not measured that way.
    pub fn suite_guests(self) -> u16 {
        match self {
            Flavour::Distro | Flavour::Debug => 2,
            Flavour::Kcsan => 1,
        }
    }

    /// Whose whole run's times the suite's deal across guests expects (its `--durations`): the
    /// kernels built from source run the tests in other proportions than the distro image.
    pub fn suite_durations(self) -> &'static str {
        match self {
            Flavour::Distro => "distro",
            Flavour::Debug | Flavour::Kcsan => "debug",
        }
    }

    /// The suite's `--jobs` in each guest of a whole-suite run across [`Self::suite_guests`]
    /// guests, unless the command line gives one: `None` leaves the suite's default.
    pub fn suite_jobs(self) -> Option<u32> {
        match self {
            Flavour::Debug => Some(1),
            Flavour::Distro | Flavour::Kcsan => None,
        }
    }
}

/// A provisioned guest kernel: its tree and how to boot it (from the tree's
/// `.belfry-manifest`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelTree {
    /// The tree (what modules are built against).
    pub dir: PathBuf,
    /// The image QEMU boots with `-kernel` (`vmlinux` via PVH, or a bzImage `vmlinuz`).
    pub boot: PathBuf,
    /// Kernel command line the flavour needs (e.g. `oops=panic` for the distro image).
    pub append: Option<String>,
}

impl KernelTree {
    /// Reads the tree's manifest: `boot=FILE` (default `vmlinux`, as trees built before the
    /// flavours existed have none) and `append=ARGS`.
    pub fn from_manifest(dir: &Path, manifest: &str) -> Self {
        let get = |key: &str| {
            manifest
                .lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .map(str::trim)
                .filter(|v| !v.is_empty())
        };
        Self {
            dir: dir.to_path_buf(),
            boot: dir.join(get("boot").unwrap_or("vmlinux")),
            append: get("append").map(str::to_string),
        }
    }
}

/// A subcommand running alongside other work; [`Pending::finish`] waits for its answer.
/// Dropped unfinished (the run failed meanwhile), it is stopped with SIGTERM, on which
/// provision.sh ends its build and removes its temporary directory.
#[derive(Debug)]
pub struct Pending {
    subcommand: String,
    child: Option<Child>,
    copier: Option<JoinHandle<()>>,
    /// Reads the answer until the script closes its stdout (it exits), and says when.
    reader: Option<JoinHandle<(Vec<u8>, Instant)>>,
    started: Instant,
    place: String,
}

impl Pending {
    /// Waits for the subcommand and returns its stdout line and how long it ran.
    pub fn finish(mut self) -> Result<(String, Duration)> {
        let mut child = self.child.take().expect("finished once");
        let spawn_error = |source| Error::Spawn { subcommand: self.subcommand.clone(), source };
        let status = child.wait().map_err(spawn_error)?;
        let (stdout, ended) =
            self.reader.take().and_then(|r| r.join().ok()).unwrap_or_else(|| (Vec::new(), Instant::now()));
        if let Some(copier) = self.copier.take() {
            let _ = copier.join();
        }
        if !status.success() {
            return Err(Error::Failed { subcommand: self.subcommand.clone(), status, place: self.place.clone() });
        }
        let ran = ended.saturating_duration_since(self.started);
        let stdout = String::from_utf8_lossy(&stdout);
        let line = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
        if line.is_empty() {
            return Err(Error::BadAnswer {
                subcommand: self.subcommand.clone(),
                answer: line,
                reason: "no answer on stdout",
            });
        }
        Ok((line, ran))
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            crate::sys::kill(child.id(), libc::SIGTERM);
            let _ = child.wait();
        }
    }
}

/// `answer` as an existing absolute path.
fn existing_path(subcommand: &str, answer: String) -> Result<PathBuf> {
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

/// The answer of `provision.sh kernel`: the tree, read from its manifest.
pub fn kernel_tree(answer: String) -> Result<KernelTree> {
    let dir = existing_path("kernel", answer)?;
    let manifest = std::fs::read_to_string(dir.join(".belfry-manifest")).unwrap_or_default();
    Ok(KernelTree::from_manifest(&dir, &manifest))
}

/// The provisioning script.
#[derive(Clone, Debug)]
pub struct Provision {
    script: PathBuf,
    /// Where the script's progress and logs (stderr) go.
    pub output: ToolOutput,
    /// The guest kernel flavour (`kernel`, and the tree `kmod` builds against).
    pub flavour: Flavour,
}

impl Provision {
    /// The script of the repository at `repo`.
    pub fn new(repo: &Path) -> Self {
        Self {
            script: repo.join("qemu-integration/provision/provision.sh"),
            output: ToolOutput::Terminal,
            flavour: Flavour::default(),
        }
    }

    fn command(&self, subcommand: &str) -> Command {
        let mut command = Command::new("bash");
        command.arg(&self.script).arg(subcommand).env("BELFRY_KERNEL_FLAVOUR", self.flavour.name());
        command
    }

    /// Starts a subcommand, passing its progress through; its answer comes from
    /// [`Pending::finish`]. The script dies with the launcher (spawn from the main thread).
    pub fn start(&self, subcommand: &str, args: &[OsString]) -> Result<Pending> {
        let mut command = self.command(subcommand);
        command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(self.output.stdio_with_notices());
        crate::sys::kill_child_with_parent(&mut command);
        let mut child =
            command.spawn().map_err(|source| Error::Spawn { subcommand: subcommand.to_string(), source })?;
        let copier = child.stderr.take().map(|stderr| self.output.copy_notices(stderr));
        let reader = child.stdout.take().map(|mut stdout| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = std::io::Read::read_to_end(&mut stdout, &mut bytes);
                (bytes, Instant::now())
            })
        });
        Ok(Pending {
            subcommand: subcommand.to_string(),
            child: Some(child),
            copier,
            reader,
            started: Instant::now(),
            place: self.output.place(),
        })
    }

    /// Runs a subcommand, passing its progress through, and returns its stdout line.
    fn answer(&self, subcommand: &str, args: &[OsString]) -> Result<String> {
        self.start(subcommand, args)?.finish().map(|(line, _)| line)
    }

    fn path_answer(&self, subcommand: &str, args: &[OsString]) -> Result<PathBuf> {
        existing_path(subcommand, self.answer(subcommand, args)?)
    }

    /// The guest kernel of [`Self::flavour`], provisioning it if needed.
    pub fn kernel(&self) -> Result<KernelTree> {
        kernel_tree(self.answer("kernel", &[])?)
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

    /// The distro image's VFIO modules, decompressed into `out`, in load order.
    pub fn vfio_modules(&self, out: &Path) -> Result<Vec<PathBuf>> {
        let answer = self.answer("vfio-modules", &[out.as_os_str().to_owned()])?;
        let modules: Vec<PathBuf> = answer.split_whitespace().map(PathBuf::from).collect();
        if modules.is_empty() || !modules.iter().all(|m| m.exists()) {
            return Err(Error::BadAnswer {
                subcommand: "vfio-modules".into(),
                answer,
                reason: "expected the paths of the modules",
            });
        }
        Ok(modules)
    }

    /// Linux's VFIO selftests, built static into `out` (with the driver plugin in `plugin`).
    pub fn vfio_selftests(&self, out: &Path, plugin: Option<&Path>) -> Result<PathBuf> {
        let mut args = vec![out.as_os_str().to_owned()];
        args.extend(plugin.map(|p| p.as_os_str().to_owned()));
        self.path_answer("vfio-selftests", &args)
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
    fn a_kernel_tree_says_how_it_boots() {
        let distro = KernelTree::from_manifest(
            Path::new("/c/kernels/distro-x"),
            "key=1\nflavour=distro\nboot=vmlinuz\nappend=oops=panic\nmake-args=CC=x86_64-linux-gnu-gcc-14\n",
        );
        assert_eq!(distro.boot, Path::new("/c/kernels/distro-x/vmlinuz"));
        assert_eq!(distro.append.as_deref(), Some("oops=panic"));
        // A debug tree built before the flavours existed has neither line: PVH vmlinux.
        let old = KernelTree::from_manifest(Path::new("/c/kernels/linux-y"), "key=2\nbuild-seconds=400\n");
        assert_eq!(old.boot, Path::new("/c/kernels/linux-y/vmlinux"));
        assert_eq!(old.append, None);
        // `boot-seconds=` is not `boot=`.
        let other = KernelTree::from_manifest(Path::new("/k"), "boot-seconds=3\nappend=\n");
        assert_eq!((other.boot, other.append), (PathBuf::from("/k/vmlinux"), None));
    }

    #[test]
    fn the_flavour_reaches_provision_sh() {
        let mut p = Provision::new(Path::new("/repo"));
        assert_eq!(p.flavour, Flavour::Distro);
        p.flavour = Flavour::Debug;
        let command = p.command("kmod");
        let env: Vec<_> = command.get_envs().collect();
        assert_eq!(env, vec![(std::ffi::OsStr::new("BELFRY_KERNEL_FLAVOUR"), Some(std::ffi::OsStr::new("debug")))]);
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
