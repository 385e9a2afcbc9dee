//! Nested cargo builds: the device binary (release, the workspace's target directory) and
//! static guest userspace binaries and libraries (glibc `crt-static`, `--target
//! x86_64-unknown-linux-gnu`, `target/guest`: a static-pie glibc binary needs no extra rustup target, unlike musl). Cargo
//! decides what is stale.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::setup::steps::ToolOutput;

/// The guest's target triple.
pub const GUEST_TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Cargo could not be started.
    #[error("Running {cargo} build -p {package}")]
    Spawn {
        /// The cargo binary.
        cargo: String,
        /// The package.
        package: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The build failed.
    #[error("cargo build -p {package} failed ({status}); its messages are {place}")]
    Failed {
        /// The package.
        package: String,
        /// Cargo's exit status.
        status: std::process::ExitStatus,
        /// Where its messages are ("above", "in …/build.log").
        place: String,
    },
    /// The build succeeded but the binary is not where expected.
    #[error("cargo build -p {package} produced no {}", path.display())]
    Missing {
        /// The package.
        package: String,
        /// The expected binary.
        path: PathBuf,
    },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, Error>;

/// The workspace, as far as builds are concerned.
#[derive(Clone, Debug)]
pub struct Workspace {
    /// The cargo binary (`$CARGO` when run by cargo).
    pub cargo: OsString,
    /// The repository root.
    pub repo: PathBuf,
    /// The target directory of host builds.
    pub target_dir: PathBuf,
    /// Where cargo's messages go.
    pub output: ToolOutput,
}

impl Workspace {
    /// The workspace at `repo`, with the target directory cargo would use.
    pub fn new(repo: PathBuf) -> Self {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let target_dir = match std::env::var_os("CARGO_TARGET_DIR") {
            Some(dir) if !dir.is_empty() => repo.join(dir),
            _ => repo.join("target"),
        };
        Self { cargo, repo, target_dir, output: ToolOutput::Terminal }
    }

    fn cargo(&self) -> Command {
        let mut command = Command::new(&self.cargo);
        command.current_dir(&self.repo).stdin(Stdio::null()).stdout(self.output.stdio()).stderr(self.output.stdio());
        command
    }

    fn run(&self, mut command: Command, package: &str) -> Result<()> {
        let status = command.status().map_err(|source| Error::Spawn {
            cargo: self.cargo.to_string_lossy().into_owned(),
            package: package.to_string(),
            source,
        })?;
        if !status.success() {
            return Err(Error::Failed { package: package.to_string(), status, place: self.output.place() });
        }
        Ok(())
    }

    /// Builds binary `name` of host package `package` (release, with cargo features
    /// `features` of the package besides its defaults) and returns its path.
    pub fn build_host_binary(&self, package: &str, name: &str, features: &[&str]) -> Result<PathBuf> {
        let mut command = self.cargo();
        command.args(["build", "--release", "--quiet", "-p", package]).arg("--target-dir").arg(&self.target_dir);
        if !features.is_empty() {
            command.arg("--features").arg(features.join(","));
        }
        self.run(command, package)?;
        let path = self.target_dir.join("release").join(name);
        if !path.exists() {
            return Err(Error::Missing { package: package.to_string(), path });
        }
        Ok(path)
    }

    /// The target directory of guest builds.
    pub fn guest_target_dir(&self) -> PathBuf {
        self.repo.join("target/guest")
    }

    /// A cargo command for a guest build: fully static (`crt-static`; `--target` keeps the
    /// RUSTFLAGS off build scripts and proc macros), without debug information (the release
    /// profile's line tables made 60 of the initramfs's 75 MiB, which every boot unpacks; a
    /// panic still names its file and line, a backtrace its functions).
    fn guest_cargo(&self) -> Command {
        let mut command = self.cargo();
        command
            .env("RUSTFLAGS", "-C target-feature=+crt-static")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env("CARGO_PROFILE_RELEASE_DEBUG", "0");
        command
    }

    /// Builds binary `name` of workspace package `package` for the guest ([`Self::guest_cargo`])
    /// and returns its path.
    pub fn build_guest_binary(&self, package: &str, name: &str) -> Result<PathBuf> {
        let mut command = self.guest_cargo();
        command
            .args(["build", "--release", "--quiet", "--target", GUEST_TRIPLE, "-p", package])
            .arg("--target-dir")
            .arg(self.guest_target_dir());
        self.run(command, package)?;
        let path = self.guest_target_dir().join(GUEST_TRIPLE).join("release").join(name);
        if !path.exists() {
            return Err(Error::Missing { package: package.to_string(), path });
        }
        Ok(path)
    }
}

impl Workspace {
    /// Builds workspace package `package`'s library as a static library for the guest
    /// (`cargo rustc --crate-type staticlib`, release, like the guest binaries:
    /// [`Self::guest_cargo`]) and returns the path of `lib<lib>.a`.
    pub fn build_guest_staticlib(&self, package: &str, lib: &str) -> Result<PathBuf> {
        let mut command = self.guest_cargo();
        command
            .args(["rustc", "--release", "--quiet", "--lib", "--crate-type", "staticlib", "--target", GUEST_TRIPLE])
            .args(["-p", package])
            .arg("--target-dir")
            .arg(self.guest_target_dir());
        self.run(command, package)?;
        let path = self.guest_target_dir().join(GUEST_TRIPLE).join("release").join(format!("lib{lib}.a"));
        if !path.exists() {
            return Err(Error::Missing { package: package.to_string(), path });
        }
        Ok(path)
    }
}

/// The C API's package, whose static library the demo program links.
pub const C_API_PACKAGE: &str = "belfry-umd-c";
/// The C API's demo program, in the guest's `/belfry/bin`.
pub const C_DEMO_BINARY: &str = "belfry-c-demo";

/// The C API's demo program, which the suite runs in the guest
/// (`c_api_program_passes_in_the_guest`): `examples/belfry_c_demo.c` compiled by the
/// provisioning root's gcc and linked against `lib` (the guest's `libbelfry_umd_c.a`).
pub fn c_demo(
    ws: &Workspace,
    provision: &crate::setup::provision::Provision,
    lib: &Path,
) -> crate::setup::provision::Result<PathBuf> {
    let dir = ws.repo.join("guest-driver/umd-c");
    let out = ws.guest_target_dir().join("c").join(C_DEMO_BINARY);
    let mut args: Vec<OsString> = vec!["-I".into(), dir.join("include").into(), lib.into()];
    args.extend(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil"].map(OsString::from));
    provision.cc(&out, &dir.join("examples/belfry_c_demo.c"), &args)
}

/// The D3DKMT-shaped C API's package, whose static library its examples link.
pub const D3DKMT_PACKAGE: &str = "belfry-d3dkmt";
/// The D3DKMT API's guest programs: (source under `guest-driver/d3dkmt/`, binary in the
/// guest's `/belfry/bin`): the two examples, run by the suite's `suite/d3dkmt.rs`, and the rule
/// checks, run by its `d3dkmt_*` tests of the rule families.
pub const D3DKMT_PROGRAMS: [(&str, &str); 3] = [
    ("examples/d3dkmt_doorbell.c", "belfry-d3dkmt-doorbell"),
    ("examples/d3dkmt_shared_fence.c", "belfry-d3dkmt-shared-fence"),
    ("rules/d3dkmt_rules.c", "belfry-d3dkmt-rules"),
];

/// The D3DKMT API's guest programs ([`D3DKMT_PROGRAMS`]), each compiled by the provisioning
/// root's gcc and linked against `lib` (the guest's `libbelfry_d3dkmt.a`).
pub fn d3dkmt_programs(
    ws: &Workspace,
    provision: &crate::setup::provision::Provision,
    lib: &Path,
) -> crate::setup::provision::Result<Vec<PathBuf>> {
    let dir = ws.repo.join("guest-driver/d3dkmt");
    let mut args: Vec<OsString> = vec!["-I".into(), dir.join("include").into(), lib.into()];
    args.extend(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil"].map(OsString::from));
    D3DKMT_PROGRAMS
        .iter()
        .map(|(source, binary)| {
            let out = ws.guest_target_dir().join("c").join(binary);
            provision.cc(&out, &dir.join(source), &args)
        })
        .collect()
}

/// The repository root, from where this package is in it.
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().and_then(Path::parent).unwrap_or(manifest);
    root.canonicalize().unwrap_or_else(|_| root.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_root_holds_the_workspace_manifest() {
        assert!(repo_root().join("Cargo.toml").exists());
        assert!(repo_root().join("qemu-integration/launcher/Cargo.toml").exists());
    }

    #[test]
    fn d3dkmt_programs_exist() {
        for (source, _) in D3DKMT_PROGRAMS {
            assert!(repo_root().join("guest-driver/d3dkmt").join(source).exists(), "{source}");
        }
    }

    #[test]
    fn guest_binaries_go_to_their_own_target_dir() {
        let ws = Workspace {
            cargo: "cargo".into(),
            repo: "/repo".into(),
            target_dir: "/repo/target".into(),
            output: ToolOutput::Terminal,
        };
        assert_eq!(ws.guest_target_dir(), PathBuf::from("/repo/target/guest"));
    }
}
