//! The public API of each library crate against the listing of its last release
//! (`<crate>/public-api.txt`, made by this test with `BELFRY_BLESS=1` when a version is
//! released): an item removed or changed since then fails the test unless the crate's version
//! (its `Cargo.toml`) is a breaking bump of the released one. Added items pass (a new patch or
//! minor release lists them when it is blessed).

use std::path::{Path, PathBuf};

/// The crates whose API users program against, relative to the repository root.
const LIBRARY_CRATES: &[&str] = &["guest-driver/umd", "guest-driver/umd-c", "guest-driver/d3dkmt", "device/abi"];

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `[package]` name and version of the crate at `dir` (each spelled out in its manifest).
fn name_and_version(dir: &Path) -> (String, String) {
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let field = |key: &str| {
        manifest
            .lines()
            .take_while(|l| !l.starts_with('[') || l.trim() == "[package]")
            .find_map(|l| {
                l.strip_prefix(key)?.trim_start().strip_prefix('=')?.trim().strip_prefix('"')?.strip_suffix('"')
            })
            .map(str::to_string)
            .unwrap_or_else(|| panic!("{}: [package] has no literal {key}", dir.display()))
    };
    (field("name"), field("version"))
}

fn header(name: &str, version: &str) -> String {
    format!("# {name} {version}: the public API of this release (tools/apicheck; BELFRY_BLESS=1 cargo test -p belfry-apicheck --test public_api)")
}

#[test]
fn public_api_keeps_the_last_release_s_items_or_the_version_says_it_breaks() {
    let bless = std::env::var_os("BELFRY_BLESS").is_some();
    let mut failures = Vec::new();
    for krate in LIBRARY_CRATES {
        let dir = repository().join(krate);
        let (name, version) = name_and_version(&dir);
        let current = belfry_apicheck::listing(&dir.join("src")).unwrap();
        assert!(current.len() > 10, "{krate}: only {} public items read", current.len());
        let path = dir.join("public-api.txt");
        if bless {
            let mut text = header(&name, &version);
            for line in &current {
                text.push('\n');
                text.push_str(line);
            }
            text.push('\n');
            std::fs::write(&path, text).unwrap();
        }
        let baseline = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut lines = baseline.lines();
        let first = lines.next().unwrap_or_default();
        let released = first
            .strip_prefix(&format!("# {name} "))
            .and_then(|rest| rest.split(':').next())
            .unwrap_or_else(|| panic!("{}: the first line names no release of {name}: {first}", path.display()));
        let baseline: Vec<String> = lines.map(str::to_string).collect();
        let gone = belfry_apicheck::breaking(&baseline, &current);
        if !gone.is_empty() && !belfry_apicheck::is_breaking_bump(released, &version) {
            failures.push(format!(
                "{name} {version}: {} item(s) of release {released} removed or changed, which needs a breaking \
                 version (and a CHANGELOG entry), or the change undone:\n  {}",
                gone.len(),
                gone.join("\n  ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
