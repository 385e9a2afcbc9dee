//! `include/belfry_umd.h` is what cbindgen generates from the crate: regenerated and compared
//! (`BELFRY_BLESS=1` writes it instead); the README's C example and the guest's C program
//! compile against it with the host's C compiler (`cc`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn generated() -> String {
    let dir = crate_dir();
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut out);
    let header = String::from_utf8(out).expect("the header is UTF-8");
    c89_comments(&header)
}

/// cbindgen ends its C++ guards (`cpp_compat`) with `//` comments, which C89 lacks: they are
/// rewritten as `/* */` comments, so the header is C89 throughout.
fn c89_comments(header: &str) -> String {
    header
        .lines()
        .map(|line| match line.split_once("//") {
            Some((code, comment)) => format!("{code}/* {} */", comment.trim()),
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn header_is_current() {
    let path = crate_dir().join("include/belfry_umd.h");
    let fresh = generated();
    if std::env::var_os("BELFRY_BLESS").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "{} is not what cbindgen generates from src/: run BELFRY_BLESS=1 cargo test -p belfry-umd-c --test header",
        path.display()
    );
    for name in ["belfry_device_open", "belfry_wait_fences", "belfry_fence_export", "BELFRY_DEADLINE_FOREVER"] {
        assert!(fresh.contains(name), "the header lacks {name}");
    }
}

/// Compiles C `source` (a file) against the header with `cc -fsyntax-only`, warnings as errors.
fn compiles(source: &Path) {
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I"])
        .arg(crate_dir().join("include"))
        .arg(source)
        .output()
        .expect("the host has a C compiler (cc)");
    assert!(out.status.success(), "cc {}:\n{}", source.display(), String::from_utf8_lossy(&out.stderr));
}

/// A translation unit that includes the header and uses one call and one constant.
const USES_THE_HEADER: &str =
    "#include \"belfry_umd.h\"\nint main(void) { return belfry_api_version() == BELFRY_UMD_API_VERSION ? 0 : 1; }\n";

/// Compiles [`USES_THE_HEADER`] with `compiler` in `std`, pedantic, warnings as errors.
fn header_compiles_as(compiler: &str, std: &str, file: &str) {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join(file);
    std::fs::write(&source, USES_THE_HEADER).unwrap();
    let out = Command::new(compiler)
        .args([format!("-std={std}").as_str(), "-pedantic", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I"])
        .arg(crate_dir().join("include"))
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("the host has a compiler {compiler}: {e}"));
    assert!(out.status.success(), "{compiler} -std={std} -pedantic:\n{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn header_compiles_as_c89_c99_c11_and_cxx() {
    for std in ["c89", "c99", "c11"] {
        header_compiles_as("cc", std, "uses_header.c");
    }
    for std in ["c++98", "c++11", "c++17"] {
        header_compiles_as("c++", std, "uses_header.cpp");
    }
}

#[test]
fn readme_c_example_compiles() {
    let readme = std::fs::read_to_string(crate_dir().join("README.md")).unwrap();
    let start = readme.find("```c\n").expect("the README has a C example") + 5;
    let end = start + readme[start..].find("```").expect("the C example ends");
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("readme_example.c");
    std::fs::write(&source, &readme[start..end]).unwrap();
    compiles(&source);
}

#[test]
fn guest_c_program_compiles() {
    compiles(&crate_dir().join("examples/belfry_c_demo.c"));
}

#[test]
fn pkg_config_file_names_the_library_and_header() {
    let pc = std::fs::read_to_string(crate_dir().join("belfry-umd.pc")).unwrap();
    for line in ["Name: belfry-umd", "Libs: -L${libdir} -lbelfry_umd_c", "Cflags: -I${includedir}"] {
        assert!(pc.lines().any(|l| l == line), "belfry-umd.pc lacks '{line}'");
    }
    let version = format!("Version: {}", env!("CARGO_PKG_VERSION"));
    assert!(pc.lines().any(|l| l == version), "belfry-umd.pc lacks '{version}'");
}
