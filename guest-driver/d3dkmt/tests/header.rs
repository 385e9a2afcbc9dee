//! `include/belfry_d3dkmt.h`, written by hand: it compiles as C11, GNU C11 and C17 (anonymous
//! unions, `cc -pedantic -Werror`) and as C++11/17 (`c++ -Werror`), so its `_Static_assert` lines on
//! the documented layouts hold; each function it declares is exported by this crate
//! (`#[no_mangle] extern "C"` in `src/`) and each exported function is declared; the
//! guest programs (examples and rule checks) compile against it; the pkg-config file names the library and header.

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn header() -> String {
    std::fs::read_to_string(crate_dir().join("include/belfry_d3dkmt.h")).unwrap()
}

/// Compiles `source` with `compiler -std=std`, warnings as errors; pedantic for C (C++ has
/// no anonymous structs, which the documented declarations use inside their unions: an
/// extension g++ and clang++ accept, so C++ is checked without `-pedantic`).
fn compiles(compiler: &str, std: &str, source: &Path) {
    let pedantic = if compiler == "c++" { "-Wno-pedantic" } else { "-pedantic" };
    let out = Command::new(compiler)
        .args([format!("-std={std}").as_str(), pedantic, "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I"])
        .arg(crate_dir().join("include"))
        .arg(source)
        .output()
        .unwrap_or_else(|e| panic!("the host has a compiler {compiler}: {e}"));
    assert!(
        out.status.success(),
        "{compiler} -std={std} {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

const USES_THE_HEADER: &str = "#include \"belfry_d3dkmt.h\"\nint main(void) { D3DKMT_CLOSEADAPTER c = {0}; return NT_SUCCESS(D3DKMTCloseAdapter(&c)) ? 0 : 1; }\n";

#[test]
fn header_compiles_with_its_layout_assertions_as_c11_and_cxx() {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("uses_header.c");
    std::fs::write(&c, USES_THE_HEADER).unwrap();
    for std in ["c11", "gnu11", "c17"] {
        compiles("cc", std, &c);
    }
    let cxx = dir.path().join("uses_header.cpp");
    std::fs::write(&cxx, USES_THE_HEADER).unwrap();
    for std in ["c++11", "c++17"] {
        compiles("c++", std, &cxx);
    }
    let asserts = header().lines().filter(|l| l.starts_with("BELFRY_LAYOUT_ASSERT(")).count();
    assert!(asserts > 150, "the header pins {asserts} sizes and offsets");
}

#[test]
fn a_wrong_layout_fails_to_compile() {
    // The assertions are live: a header whose pinned size of D3DKMT_CREATEHWQUEUE is off by 8
    // does not compile.
    let dir = tempfile::tempdir().unwrap();
    let broken = header().replace(
        "BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_CREATEHWQUEUE) == 48,",
        "BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_CREATEHWQUEUE) == 56,",
    );
    assert_ne!(broken, header(), "the header pins sizeof(D3DKMT_CREATEHWQUEUE) == 48");
    std::fs::write(dir.path().join("belfry_d3dkmt.h"), broken).unwrap();
    let source = dir.path().join("uses_header.c");
    std::fs::write(&source, USES_THE_HEADER).unwrap();
    let out =
        Command::new("cc").args(["-std=c11", "-fsyntax-only", "-I"]).arg(dir.path()).arg(&source).output().unwrap();
    assert!(!out.status.success(), "a wrong pinned size compiled");
    assert!(String::from_utf8_lossy(&out.stderr).contains("size of D3DKMT_CREATEHWQUEUE"));
}

/// The names of the functions the header declares.
fn declared_functions() -> Vec<String> {
    let text = header();
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("NTSTATUS "))
        .filter_map(|l| l.split_once('(').map(|(name, _)| name.trim().to_string()))
        .collect();
    names.sort();
    names
}

/// The names of the functions `src/` exports.
fn exported_functions() -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(crate_dir().join("src")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if line.trim() == "#[no_mangle]" {
                let next = lines.next().unwrap_or_default();
                let name = next.split("extern \"C\" fn ").nth(1).and_then(|r| r.split('(').next());
                names.push(name.unwrap_or_else(|| panic!("#[no_mangle] before '{next}'")).to_string());
            }
        }
    }
    names.sort();
    names
}

#[test]
fn every_declared_function_is_exported_and_every_export_declared() {
    let declared = declared_functions();
    assert!(declared.len() > 20, "the header declares {declared:?}");
    assert_eq!(declared, exported_functions(), "header declarations and the crate's exports differ");
}

#[test]
fn guest_programs_compile() {
    for program in ["examples/d3dkmt_doorbell.c", "examples/d3dkmt_shared_fence.c", "rules/d3dkmt_rules.c"] {
        compiles("cc", "gnu11", &crate_dir().join(program));
    }
}

#[test]
fn pkg_config_file_names_the_library_and_header() {
    let pc = std::fs::read_to_string(crate_dir().join("belfry-d3dkmt.pc")).unwrap();
    for line in ["Name: belfry-d3dkmt", "Libs: -L${libdir} -lbelfry_d3dkmt", "Cflags: -I${includedir}"] {
        assert!(pc.lines().any(|l| l == line), "belfry-d3dkmt.pc lacks '{line}'");
    }
    let version = format!("Version: {}", env!("CARGO_PKG_VERSION"));
    assert!(pc.lines().any(|l| l == version), "belfry-d3dkmt.pc lacks '{version}'");
}
