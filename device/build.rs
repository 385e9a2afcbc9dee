//! Names the sources a build of the device is made from, for the input log's `build`
//! (`src/build_identity.rs`): a hash of every file that decides what the device does — its own
//! sources, those of the `belfry-abi` and `belfry-trace-schema` crates beside it, and the three
//! manifests — as `BELFRY_DEVICE_SOURCES`. A hash of the files rather than a git commit: it is
//! the same on a clean clone and in a tree without `.git`, and an uncommitted edit changes it.

use std::path::{Path, PathBuf};

/// The files and directories hashed, relative to this crate's directory.
const SOURCES: [&str; 6] =
    ["Cargo.toml", "src", "abi/Cargo.toml", "abi/src", "trace-schema/Cargo.toml", "trace-schema/src"];

/// Every file under `path` (or `path` itself), in `out`.
fn files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let Ok(entries) = std::fs::read_dir(path) else { return };
        for entry in entries.flatten() {
            files(&entry.path(), out);
        }
    } else if path.is_file() {
        out.push(path.to_path_buf());
    }
}

/// 64-bit FNV-1a, continued from `hash` over `bytes`: stable across Rust releases and hosts
/// (std's hashers promise neither), and enough to tell two source trees apart.
fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

fn main() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for source in SOURCES {
        println!("cargo:rerun-if-changed={source}");
        files(&root.join(source), &mut found);
    }
    // Each file's path (relative, `/`-separated), length and bytes, in path order: the same
    // tree hashes the same wherever it is checked out.
    let mut named: Vec<(String, PathBuf)> = found
        .into_iter()
        .map(|p| {
            let relative = p.strip_prefix(&root).unwrap_or(&p);
            let name = relative.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/");
            (name, p)
        })
        .collect();
    named.sort();
    let mut hash = 0xcbf2_9ce4_8422_2325;
    for (name, path) in named {
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        hash = fnv1a(hash, name.as_bytes());
        hash = fnv1a(hash, &(bytes.len() as u64).to_le_bytes());
        hash = fnv1a(hash, &bytes);
    }
    println!("cargo:rustc-env=BELFRY_DEVICE_SOURCES={hash:016x}");
}
