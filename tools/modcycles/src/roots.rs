//! The crate roots of the repository: for each `Cargo.toml`, its `src/lib.rs`, `src/main.rs` and
//! `src/bin/*.rs`; for each `Kbuild`, the root file of each `obj-m` module it names.

use std::path::{Path, PathBuf};

/// The repository this tool was built from (two levels above its own crate).
pub fn repository_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    dir.canonicalize().unwrap_or(dir)
}

/// Every crate root under `dir`, sorted, leaving out `target/` and hidden directories.
pub fn of_repository(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut roots = Vec::new();
    walk(dir, &mut roots)?;
    roots.sort();
    Ok(roots)
}

fn walk(dir: &Path, roots: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                walk(&path, roots)?;
            }
        } else if name == "Cargo.toml" {
            for file in ["src/lib.rs", "src/main.rs"] {
                let root = dir.join(file);
                if root.exists() {
                    roots.push(root);
                }
            }
            if let Ok(bins) = std::fs::read_dir(dir.join("src/bin")) {
                roots.extend(bins.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "rs")));
            }
        } else if name == "Kbuild" {
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            roots.extend(kbuild_modules(&text).into_iter().map(|m| dir.join(format!("{m}.rs"))).filter(|p| p.exists()));
        }
    }
    Ok(())
}

/// The module names of a Kbuild's `obj-m := a.o b.o` / `obj-m += c.o` lines.
fn kbuild_modules(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("obj-m"))
        .filter_map(|rest| rest.trim_start().strip_prefix(":=").or_else(|| rest.trim_start().strip_prefix("+=")))
        .flat_map(|objs| {
            objs.split_whitespace().filter_map(|o| o.strip_suffix(".o")).map(str::to_string).collect::<Vec<_>>()
        })
        .collect()
}
