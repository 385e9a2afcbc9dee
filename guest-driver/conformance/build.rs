//! Collects the `proves:` lines of every test in the workspace (the device's host tests, the
//! library's host tests and this suite) into `$OUT_DIR/proves.rs`, so the suite's coverage
//! report merges the ids proven on the host with those its own passing tests prove. A host
//! citation `ID (device side)` proves only the device's half of a rule about the OS or the
//! KMD: it goes to `DEVICE_SIDE_PROVES`, counted apart.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Directories scanned, relative to the workspace root, and whether they hold guest tests.
const SOURCES: [(&str, bool); 3] =
    [("device/tests", false), ("guest-driver/umd/src", false), ("guest-driver/conformance/src", true)];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// What a `proves:` item `ID` or `ID (device side)` cites: the id, and whether only the
/// device's side.
type Cited = (String, bool);

/// `(id, device side only, test fn)`: the ids of a `proves:` line (up to ` —`) belong to the
/// next `fn`.
fn proves(text: &str) -> Vec<(String, bool, String)> {
    let mut out = Vec::new();
    let mut pending: Vec<Cited> = Vec::new();
    for line in text.lines() {
        if let Some((_, rest)) = line.split_once("proves:") {
            let ids = rest.split(" —").next().unwrap_or("");
            // Each item's first word is the id: `FEN-07 (device side)` cites FEN-07's device side.
            pending.extend(ids.split(',').map(|item| {
                let word = item.split_whitespace().next().unwrap_or("");
                let id = word.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
                (id, item.contains("(device side)"))
            }));
        }
        let code = line.trim_start();
        let code = code.strip_prefix("pub ").or_else(|| code.strip_prefix("pub(crate) ")).unwrap_or(code);
        let code = code.strip_prefix("async ").unwrap_or(code);
        if let Some(rest) = code.strip_prefix("fn ") {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            for (id, device_side) in pending.drain(..) {
                let valid = id.split_once('-').is_some_and(|(family, number)| {
                    !family.is_empty()
                        && family.chars().all(|c| c.is_ascii_uppercase())
                        && !number.is_empty()
                        && number.chars().all(|c| c.is_ascii_digit())
                });
                if valid {
                    out.push((id, device_side, name.clone()));
                }
            }
        }
    }
    out
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest.join("../..");
    let mut code = String::new();
    let lists =
        [("HOST_PROVES", false, Some(false)), ("DEVICE_SIDE_PROVES", false, Some(true)), ("GUEST_PROVES", true, None)];
    for (constant, guest, device_side) in lists {
        let _ = writeln!(code, "/// `(rule id, \"file:test\")` of every `proves:` line.");
        let _ = writeln!(code, "pub(crate) const {constant}: &[(&str, &str)] = &[");
        for (dir, is_guest) in SOURCES {
            if is_guest != guest {
                continue;
            }
            println!("cargo:rerun-if-changed={}", root.join(dir).display());
            let mut files = Vec::new();
            rust_files(&root.join(dir), &mut files);
            files.sort();
            for file in files {
                let text = std::fs::read_to_string(&file).unwrap_or_default();
                let rel = file.strip_prefix(&root).unwrap_or(&file).display().to_string();
                for (id, side, test) in proves(&text) {
                    if device_side.is_none_or(|d| d == side) {
                        let _ = writeln!(code, "    ({id:?}, {:?}),", format!("{rel}:{test}"));
                    }
                }
            }
        }
        let _ = writeln!(code, "];");
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("proves.rs"), code).expect("writing proves.rs");
}
