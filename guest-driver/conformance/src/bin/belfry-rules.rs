//! `belfry-rules` (host): which rule ids the tests prove — the suite's `proves:` lines (checked
//! against its registry by a unit test), the device's and the library's host tests — which may
//! stay unproven and why, and the gaps, for the rule ids of `docs/RULES.md`. `ci/rules` runs it.

use std::collections::BTreeMap;
use std::process::ExitCode;

use belfry_conformance::coverage::{self, Status};
use clap::Parser;

/// List the rule ids proven by tests, the allowed unproven ones and the gaps.
#[derive(Debug, Parser)]
#[command(name = "belfry-rules", about)]
struct Cli {
    /// Also list the unproven ids: allowed (with the reason) and gaps.
    #[arg(long)]
    unproven: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rows = coverage::report(coverage::guest_documented().iter().copied(), []);
    let mut by: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (id, test) in coverage::guest_documented() {
        by.entry(id).or_default().push(format!("guest-driver/conformance:{}", test.rsplit(':').next().unwrap_or(test)));
    }
    for (id, test) in coverage::host_proves() {
        by.entry(id).or_default().push((*test).to_string());
    }
    println!("{:<8} proven by", "rule");
    for row in rows.iter().filter(|r| matches!(r.status, Status::Guest | Status::Host)) {
        let mut tests = by.get(row.id.as_str()).cloned().unwrap_or_default();
        tests.sort();
        tests.dedup();
        println!("{:<8} {}", row.id, tests.join(" "));
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
    println!();
    println!("{}", coverage::summary(&rows));
    ExitCode::SUCCESS
}
