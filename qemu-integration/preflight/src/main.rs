//! `cargo belfry`'s first step (the alias runs this binary): before the launcher, with its
//! dependencies, is compiled, it asks `provision.sh status` whether the provisioning root is
//! built. When it is not and this user is not root, it prints the one root command that
//! builds it and stops, unless the command is `doctor`, help or version. Otherwise it replaces
//! itself with `cargo run --quiet --release -p belfry-launcher -- ARGS` (same process, same
//! terminal, signals and exit status). `BELFRY_KERNEL` (a kernel of one's own) skips the check.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, ExitCode};

/// The launcher's arguments that need no guest: they run even without provisioning.
const NO_GUEST: [&str; 7] = ["doctor", "clean", "help", "-h", "--help", "-V", "--version"];

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let repo = belfry_preflight::repo_root();
    let script = repo.join(belfry_preflight::PROVISION_SCRIPT);
    let own_kernel = std::env::var_os("BELFRY_KERNEL").is_some_and(|v| !v.is_empty());
    if !own_kernel && !belfry_preflight::running_as_root() {
        let needed = belfry_preflight::read_status(&script).and_then(|s| belfry_preflight::root_needed(&s));
        if let Some(needed) = needed {
            eprintln!("belfry: {needed}");
            let guest = args.first().is_some_and(|a| !NO_GUEST.iter().any(|n| a == n));
            if guest {
                eprintln!("belfry: FAILED: provisioning needs root first (`cargo belfry doctor` checks the rest)");
                return ExitCode::from(1);
            }
        }
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let error =
        Command::new(cargo).args(["run", "--quiet", "--release", "-p", "belfry-launcher", "--"]).args(&args).exec();
    eprintln!("belfry: FAILED: cannot start cargo for the launcher: {error}");
    ExitCode::from(1)
}
