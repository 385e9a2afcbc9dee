//! `belfry-rules` (host): which rule ids the tests prove. Given the runs' results — each guest
//! kernel's `results.json` (`--guest KERNEL=PATH`, repeatable) and the host tests' JUnit report
//! (`--host-junit PATH`, cargo-nextest's) — an id is proven in the guest when, in every guest
//! run given, a test citing it passed, and by a host test when a host test citing it passed
//! (`ID (device side)` citations count apart, as "device side only"); the ids proven on some
//! kernels only, and the cited host tests that did not pass, are named, and any of them or a
//! gap fails. Without results it lists the citations, saying they are not proofs. Also the ids
//! of `docs/RULES.md` that may stay unproven and why. `ci/rules` runs it; `ci/test` gives it the
//! runs it just did.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use belfry_conformance::coverage::{self, Row, Status};
use clap::Parser;
use serde::Deserialize;

/// List the rule ids proven by tests, the allowed unproven ones and the gaps.
#[derive(Debug, Parser)]
#[command(name = "belfry-rules", about)]
struct Cli {
    /// Also list the unproven ids: allowed (with the reason) and gaps.
    #[arg(long)]
    unproven: bool,
    /// A guest run's results.json, labelled with its kernel (`debug=PATH`); repeatable: an id
    /// counts as proven in the guest only if a test citing it passed in every run given.
    #[arg(long = "guest", value_name = "KERNEL=PATH", value_parser = parse_labelled)]
    guest: Vec<(String, PathBuf)>,
    /// The host tests' JUnit report (`cargo nextest run --profile ci`).
    #[arg(long, value_name = "PATH")]
    host_junit: Option<PathBuf>,
}

/// `KERNEL=PATH`.
fn parse_labelled(text: &str) -> Result<(String, PathBuf), String> {
    let (label, path) = text.split_once('=').ok_or_else(|| format!("{text}: expected KERNEL=PATH"))?;
    Ok((label.to_string(), PathBuf::from(path)))
}

/// The fields of the suite's results.json this tool reads.
#[derive(Debug, Deserialize)]
struct GuestResults {
    tests: Vec<GuestTest>,
}

/// One test of a guest run.
#[derive(Debug, Deserialize)]
struct GuestTest {
    name: String,
    outcome: String,
    #[serde(default)]
    ids: Vec<String>,
}

/// `(id, test)` of a guest run's passing tests.
fn guest_proofs(path: &Path) -> Result<BTreeSet<(String, String)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let results: GuestResults = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(results
        .tests
        .iter()
        .filter(|t| t.outcome == "pass")
        .flat_map(|t| t.ids.iter().map(|id| (id.clone(), t.name.clone())))
        .collect())
}

/// One test case of a JUnit report.
#[derive(Debug, PartialEq, Eq)]
struct Case {
    /// nextest's binary id (`classname`): `belfry-device::command_processor`, `belfry-umd`.
    binary: String,
    /// The test's path in its binary (`name`): `submit::tests::a_test`.
    name: String,
    /// No `failure`, `error` or `skipped` child.
    passed: bool,
}

/// A JUnit report's test cases.
fn junit_cases(path: &Path) -> Result<Vec<Case>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let doc = roxmltree::Document::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(doc
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .map(|case| {
            let binary = case.attribute("classname").unwrap_or_default().to_string();
            let name = case.attribute("name").unwrap_or_default().to_string();
            let passed = !case
                .children()
                .any(|c| c.has_tag_name("failure") || c.has_tag_name("error") || c.has_tag_name("skipped"));
            Case { binary, name, passed }
        })
        .collect())
}

/// The package name of the crate whose directory is `dir` (its Cargo.toml's `name`).
fn package_name(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
    let package = text.split("[package]").nth(1)?;
    let line = package.lines().find(|l| l.trim_start().starts_with("name"))?;
    Some(line.split('"').nth(1)?.to_string())
}

/// nextest's binary id of the test binary holding a test of `file` (workspace-relative):
/// `PACKAGE::STEM` for an integration test (`tests/STEM.rs`), `PACKAGE` for the library's
/// unit tests (`src/...`).
fn binary_id(root: &Path, file: &str) -> Option<String> {
    if let Some((dir, test)) = file.split_once("/tests/") {
        let stem = test.strip_suffix(".rs")?;
        return Some(format!("{}::{}", package_name(&root.join(dir))?, stem.split('/').next()?));
    }
    let (dir, _) = file.split_once("/src/")?;
    package_name(&root.join(dir))
}

/// Whether the JUnit `cases` hold a passing run of `place` (`file:test fn`): a case of its
/// binary named `fn` or `...::fn`; `None` if no case of that name ran at all.
fn host_passed(root: &Path, cases: &[Case], place: &str) -> Option<bool> {
    let (file, test) = place.rsplit_once(':')?;
    let binary = binary_id(root, file)?;
    let suffix = format!("::{test}");
    let matching: Vec<bool> = cases
        .iter()
        .filter(|c| c.binary == binary && (c.name == test || c.name.ends_with(&suffix)))
        .map(|c| c.passed)
        .collect();
    if matching.is_empty() {
        None
    } else {
        Some(matching.iter().all(|p| *p))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut ok = true;
    let from_runs = !cli.guest.is_empty() || cli.host_junit.is_some();
    let computed = if from_runs { from_results(&cli) } else { Ok(as_cited()) };
    let (rows, basis, problems) = match computed {
        Ok(found) => found,
        Err(e) => {
            eprintln!("belfry-rules: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{:<8} proven by", "rule");
    for row in rows.iter().filter(|r| matches!(r.status, Status::Guest | Status::Host | Status::DeviceSide)) {
        let side = if row.status == Status::DeviceSide { " (device side only)" } else { "" };
        println!("{:<8} {}{side}", row.id, row.proven_by.join(" "));
    }
    let reasons = coverage::unproven_reasons();
    for row in rows.iter().filter(|r| matches!(r.status, Status::Guest | Status::Host)) {
        if reasons.contains_key(row.id.as_str()) {
            eprintln!("note: {} is proven; its line in rules/unproven.txt is stale", row.id);
        }
    }
    if cli.unproven {
        println!();
        for row in rows.iter().filter(|r| matches!(r.status, Status::Allowed | Status::Gap)) {
            match &row.reason {
                Some(why) => println!("{:<8} allowed: {why}", row.id),
                None => println!("{:<8} GAP", row.id),
            }
        }
    }
    for problem in &problems {
        eprintln!("error: {problem}");
    }
    if from_runs && !problems.is_empty() {
        ok = false;
    }
    if from_runs && rows.iter().any(|r| r.status == Status::Gap) {
        ok = false;
    }
    println!();
    println!("{}", coverage::summary(&rows, &basis));
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The rows, what they were computed from, and what is wrong with the runs.
type Computed = (Vec<Row>, String, Vec<String>);

/// The citations of the source, with no run: not proofs, and said so.
fn as_cited() -> Computed {
    let guest = coverage::guest_documented().iter().map(|(id, place)| (*id, place.rsplit(':').next().unwrap_or(place)));
    let rows = coverage::report(guest, []);
    (rows, "as cited in the source, not from runs: give ci/rules the runs' results".into(), Vec::new())
}

/// The rows from the runs' results.
fn from_results(cli: &Cli) -> Result<Computed, String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut problems = Vec::new();
    // Guest: an id is proven if in every run some test citing it passed.
    let mut runs: Vec<(String, BTreeMap<String, BTreeSet<String>>)> = Vec::new();
    for (kernel, path) in &cli.guest {
        let mut by_id: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (id, test) in guest_proofs(path)? {
            by_id.entry(id).or_default().insert(test);
        }
        runs.push((kernel.clone(), by_id));
    }
    let mut guest: Vec<(String, String)> = Vec::new();
    let all_ids: BTreeSet<&String> = runs.iter().flat_map(|(_, by_id)| by_id.keys()).collect();
    for id in all_ids {
        let missing: Vec<&str> =
            runs.iter().filter(|(_, by_id)| !by_id.contains_key(id)).map(|(k, _)| k.as_str()).collect();
        if missing.is_empty() {
            let tests: BTreeSet<&String> = runs.iter().flat_map(|(_, by_id)| &by_id[id]).collect();
            guest.extend(tests.into_iter().map(|t| (id.clone(), t.clone())));
        } else {
            problems.push(format!("{id} has no passing guest test on the {} kernel", missing.join(", ")));
        }
    }
    // Host: a citation counts if its test passed in the JUnit report.
    let cases = match &cli.host_junit {
        Some(path) => junit_cases(path)?,
        None => Vec::new(),
    };
    let mut passed = |list: &'static [(&'static str, &'static str)]| -> Vec<(&'static str, &'static str)> {
        let mut out = Vec::new();
        for (id, place) in list {
            match host_passed(&root, &cases, place) {
                Some(true) => out.push((*id, *place)),
                Some(false) => problems.push(format!("{place} (proves {id}) did not pass")),
                None if cli.host_junit.is_some() => {
                    problems.push(format!("{place} (proves {id}) is not in the host tests' report"))
                }
                None => {}
            }
        }
        out
    };
    let host = passed(coverage::host_proves());
    let device_side = passed(coverage::device_side_proves());
    let rows = coverage::report_from(guest.iter().map(|(id, t)| (id.as_str(), t.as_str())), host, device_side, []);
    let mut basis: Vec<String> = cli.guest.iter().map(|(k, p)| format!("{k} kernel {}", p.display())).collect();
    match &cli.host_junit {
        Some(p) => basis.push(format!("host tests {}", p.display())),
        None => basis.push("no host run given".into()),
    }
    if cli.guest.is_empty() {
        basis.push("no guest run given".into());
    }
    Ok((rows, format!("from runs: {}", basis.join(", ")), problems))
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_citations_match_the_test_cases_of_their_binary() {
        let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let case = |b: &str, n: &str, p: bool| super::Case { binary: b.into(), name: n.into(), passed: p };
        let cases = vec![
            case("belfry-device::command_processor", "fence_logs_record_operations_and_wrap", true),
            case("belfry-umd", "submit::tests::a_failed_recreate", false),
            case("belfry-umd", "vidmem::tests::split_points", true),
        ];
        let passed = |place: &str| super::host_passed(&root, &cases, place);
        assert_eq!(passed("device/tests/command_processor.rs:fence_logs_record_operations_and_wrap"), Some(true));
        assert_eq!(passed("device/tests/peer_client.rs:fence_logs_record_operations_and_wrap"), None, "another binary");
        assert_eq!(passed("guest-driver/umd/src/submit.rs:a_failed_recreate"), Some(false));
        assert_eq!(passed("guest-driver/umd/src/vidmem.rs:split_points"), Some(true));
        assert_eq!(passed("guest-driver/umd/src/vidmem.rs:points"), None, "a whole segment, not a suffix");
    }

    #[test]
    fn junit_cases_pass_unless_failed_errored_or_skipped() {
        let dir = std::env::temp_dir().join(format!("belfry-rules-junit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("junit.xml");
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="3" failures="1" errors="0">
  <testsuite name="belfry-device::command_processor" tests="3">
    <testcase name="a" classname="belfry-device::command_processor" time="0.1"/>
    <testcase name="b" classname="belfry-device::command_processor" time="0.1"><failure type="test failure">boom</failure></testcase>
    <testcase name="c" classname="belfry-device::command_processor" time="0.0"><skipped/></testcase>
  </testsuite>
</testsuites>"#;
        std::fs::write(&path, xml).unwrap();
        let cases = super::junit_cases(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let outcome: Vec<(&str, bool)> = cases.iter().map(|c| (c.name.as_str(), c.passed)).collect();
        assert_eq!(outcome, vec![("a", true), ("b", false), ("c", false)]);
    }
}
