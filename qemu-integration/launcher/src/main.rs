//! `cargo belfry`: builds what is stale (device, guest kernel, module, initramfs), boots QEMU
//! with one or more Belfry devices attached over vfio-user, runs a task in the guest and
//! exits with its status, saying why on the last line.
//!
//! Code map: this file dispatches; [`cli`] is the command line, [`options`] holds the options
//! every run takes, [`run`] one run as a value whose methods are its phases, each phase with
//! its own folder: [`setup`] (cargo builds, provision.sh, the initramfs, `--filter`, one line
//! per step), [`boot`] (the QEMU command line, device processes, the supervisor, console
//! parsing, waking a sleeping guest) and [`outcome`] (verdict, lspci golden file, results
//! files, timeline, failure report, `summary.txt`). Beside them: [`run_dir`] (the run
//! directory), [`retention`] (which run directories stay, `clean`), [`suite`] (the conformance suite's package and device layout), [`soak`]
//! (`soak`'s guest command and host-side bounds), [`message`] (how the launcher speaks),
//! [`doctor`] (what a run needs) and [`sys`] (signals, process trees, the monotonic clock; all
//! unsafe code).

mod boot;
mod cli;
mod doctor;
mod message;
mod options;
mod outcome;
mod retention;
mod run;
mod run_dir;
mod setup;
mod soak;
mod suite;
mod sys;

use std::process::ExitCode;

use crate::cli::{Cli, Request};
use crate::run::Run;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    match Cli::parse_checked().request() {
        Request::Doctor => doctor::run(&setup::compile::repo_root()),
        Request::Clean { keep, all } => clean(keep, all),
        Request::Run { task, opts, judging } => match Run::start(argv, task, *opts, judging) {
            Ok(run) => run.execute(),
            Err(code) => code,
        },
    }
}

/// `cargo belfry clean`: removes the run directories beyond the newest `keep` (or all), says
/// which and how much they held.
fn clean(keep: Option<usize>, all: bool) -> ExitCode {
    let root = run_dir::runs_root(&setup::compile::Workspace::new(setup::compile::repo_root()).target_dir);
    let removed = match retention::keep_count(keep) {
        Err(e) => {
            message::say(format_args!("FAILED: {e}"));
            return ExitCode::from(2);
        }
        Ok(_) if all => retention::remove_all(&root),
        Ok(keep) => retention::prune(&root, keep, None),
    };
    match removed {
        Ok(removed) => {
            for dir in &removed.dirs {
                message::say(format_args!("removed {}", dir.display()));
            }
            for (dir, why) in &removed.failed {
                message::say(format_args!("could not remove {}: {why}", dir.display()));
            }
            let left = retention::run_dirs(&root).map_or(0, |d| d.len());
            message::say(format_args!(
                "clean: {} run director{} removed ({}), {left} left in {}",
                removed.dirs.len(),
                if removed.dirs.len() == 1 { "y" } else { "ies" },
                retention::human(removed.bytes),
                root.display()
            ));
            ExitCode::from(u8::from(!removed.failed.is_empty()))
        }
        Err(e) => {
            message::say(format_args!("FAILED: reading {}: {e}", root.display()));
            ExitCode::from(1)
        }
    }
}
