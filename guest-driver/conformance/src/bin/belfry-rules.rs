//! `belfry-rules` (host): which rule ids the tests prove — the suite's `proves:` lines (checked
//! against its registry by a unit test), the device's and the library's host tests — which may
//! stay unproven and why, and the gaps. With `--rules RULES.md` it also checks that
//! `rules/index.txt` matches RULES.md (`--write-index` regenerates it). `ci/rules` runs it.

use std::collections::BTreeMap;
use std::path::PathBuf;
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
    /// RULES.md to check rules/index.txt against.
    #[arg(long, value_name = "PATH")]
    rules: Option<PathBuf>,
    /// Rewrite rules/index.txt from --rules.
    #[arg(long, requires = "rules")]
    write_index: bool,
}

const INDEX_HEADER: &str = "# Rule ids of ../shared/design/RULES.md with their tags, one per line: ID [tag ...].\n\
# Generated: ci/rules --write-index (checked against RULES.md by ci/rules when it is beside the checkout).\n";

/// `rules/index.txt` as RULES.md gives it: each `- **ID** — …` line's id and its tags in order.
fn index_of(rules: &str) -> String {
    let mut out = String::from(INDEX_HEADER);
    for line in rules.lines() {
        let Some(rest) = line.strip_prefix("- **") else { continue };
        let Some((id, text)) = rest.split_once("**") else { continue };
        let valid = id.split_once('-').is_some_and(|(f, n)| {
            !f.is_empty()
                && f.chars().all(|c| c.is_ascii_uppercase())
                && !n.is_empty()
                && n.chars().all(|c| c.is_ascii_digit())
        });
        if !valid {
            continue;
        }
        out.push_str(id);
        let mut rest = text;
        while let Some(start) = rest.find('[') {
            let Some(len) = rest[start..].find(']') else { break };
            let tag = &rest[start + 1..start + len];
            if matches!(tag, "future" | "optional" | "ambiguous") {
                out.push(' ');
                out.push_str(tag);
            }
            rest = &rest[start + len..];
        }
        out.push('\n');
    }
    out
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut ok = true;
    let index_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("rules/index.txt");
    if let Some(path) = &cli.rules {
        let rules = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) => {
                eprintln!("belfry-rules: {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        };
        let fresh = index_of(&rules);
        if cli.write_index {
            if let Err(e) = std::fs::write(&index_path, &fresh) {
                eprintln!("belfry-rules: {}: {e}", index_path.display());
                return ExitCode::FAILURE;
            }
            println!("wrote {}; rebuild to use it", index_path.display());
            return ExitCode::SUCCESS;
        }
        if std::fs::read_to_string(&index_path).ok().as_deref() != Some(fresh.as_str()) {
            eprintln!("error: {} differs from {}: run ci/rules --write-index", index_path.display(), path.display());
            ok = false;
        }
    }
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
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn index_takes_ids_and_tags_in_order() {
        let rules = "## A\n\n- **FEN-08** — text [x] (source) [ambiguous]\n- **N1** (FEN-08): note\n- **LOG-16** — t [optional] [ambiguous]\n";
        assert_eq!(
            super::index_of(rules),
            format!("{}FEN-08 ambiguous\nLOG-16 optional ambiguous\n", super::INDEX_HEADER)
        );
    }
}
