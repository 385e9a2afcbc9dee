//! Nothing of the reference texts is missing: every name of `reference-names.txt` (the
//! D3DKMT and D3DDDI names the texts use) is declared by the header and has a row in the
//! README's table, and every function the header declares has a row too.

use std::path::PathBuf;

fn read(file: &str) -> String {
    std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap()
}

/// The names of `reference-names.txt` (first column; `#` lines are comments).
fn reference_names() -> Vec<String> {
    read("reference-names.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split('\t').next().unwrap().trim().to_string())
        .collect()
}

/// `word` occurs in `text` as a whole identifier.
fn has_identifier(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !ident(before) && !ident(after)
    })
}

/// The header's declarations: its text without comments, string literals and the layout
/// assertions (which name the types they check, not declare them).
fn declarations() -> String {
    let text = read("include/belfry_d3dkmt.h");
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find("*/").expect("comments end") + start + 2;
        rest = &rest[end..];
    }
    out.push_str(rest);
    out.lines()
        .filter(|l| !l.starts_with("BELFRY_LAYOUT_ASSERT("))
        .map(|l| l.split('"').step_by(2).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_header_declares_every_name_of_the_reference_texts() {
    let names = reference_names();
    assert!(names.len() >= 30, "the list holds {} names", names.len());
    let header = declarations();
    let missing: Vec<_> = names.iter().filter(|n| !has_identifier(&header, n)).collect();
    assert!(missing.is_empty(), "include/belfry_d3dkmt.h lacks {missing:?}");
}

#[test]
fn the_readme_table_has_a_row_for_every_name_and_function() {
    let readme = read("README.md");
    let rows: Vec<&str> = readme.lines().filter(|l| l.starts_with("| `")).collect();
    let has_row = |name: &str| rows.iter().any(|r| r.starts_with(&format!("| `{name}`")));
    let mut missing: Vec<String> = reference_names().into_iter().filter(|n| !has_row(n)).collect();
    let header = read("include/belfry_d3dkmt.h");
    for line in header.lines().filter_map(|l| l.strip_prefix("NTSTATUS ")) {
        let name = line.split('(').next().unwrap().trim();
        if !has_row(name) {
            missing.push(name.to_string());
        }
    }
    assert!(missing.is_empty(), "README.md's table has no row for {missing:?}");
}

#[test]
fn identifiers_are_matched_whole() {
    assert!(has_identifier("NTSTATUS D3DKMTLock2(", "D3DKMTLock2"));
    assert!(!has_identifier("D3DKMTLock2x", "D3DKMTLock2"));
    assert!(!has_identifier("D3DKMT_CREATE_DOORBELL_FLAGS", "D3DKMT_CREATE_DOORBELL"));
}
