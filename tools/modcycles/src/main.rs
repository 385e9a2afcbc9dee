//! `modcycles`: import cycles among the module files of a crate. A file imports another when its
//! code or its `use` items name a path inside the other's module (`crate::a::b`, `super::x`,
//! `self::c`, or a child module's name); a cycle is a set of files that import each other round,
//! found as the strongly connected components of that graph. With no arguments it checks every
//! crate of the repository (each `Cargo.toml`'s `src/lib.rs`, `src/main.rs` and `src/bin/*.rs`,
//! and each `Kbuild` module's root file). Prints each cycle, then one summary line per crate;
//! exits 1 when any crate has a cycle. `ci/test` runs it.

mod graph;
mod refs;
mod roots;
mod tree;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let repo = roots::repository_dir();
    let shown = |p: &Path| p.strip_prefix(&repo).unwrap_or(p).display().to_string();
    let roots = if args.is_empty() {
        match roots::of_repository(&repo) {
            Ok(roots) => roots,
            Err(e) => {
                eprintln!("modcycles: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        args
    };
    let mut cycles = 0;
    for root in &roots {
        let krate = match tree::Crate::load(root) {
            Ok(krate) => krate,
            Err(e) => {
                eprintln!("modcycles: {e}");
                return ExitCode::FAILURE;
            }
        };
        let found = graph::cycles(&krate);
        for cycle in &found {
            let names: Vec<String> = cycle.iter().map(|&i| shown(&krate.files[i].path)).collect();
            println!("cycle of {} in {}: {}", cycle.len(), shown(root), names.join(", "));
        }
        let largest = found.iter().map(Vec::len).max().unwrap_or(0);
        println!("cycles: {} (largest {largest} files) in {}", found.len(), shown(root));
        cycles += found.len();
    }
    if cycles == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
