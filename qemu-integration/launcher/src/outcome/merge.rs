//! One report from the shards of a run across several guests (`conformance --guests N`): each
//! guest's suite ran its share (`--shard K/N`) and judged it as a partial run; the merged report
//! is the suite's report of the whole selection, with every field the suite wrote kept.
//!
//! - `tests`: every guest's records, in registry order (each record's `index`);
//! - `passed`, `failed`, `skipped`: the sums; `proven`: the union, sorted;
//! - `coverage`: per rule id, the best status any guest found (a passing guest test, then host
//!   tests, device side only, allowed, a gap, not run), the guest tests proving it from every
//!   guest;
//! - `incomplete`: every guest's reasons (but the rule ids a guest's SKIPs cost their proof,
//!   counted again over every guest: an id another guest's test proved lost nothing), then, for
//!   the whole suite, the merged coverage's gaps
//!   (a rule proven only by a test of another shard is no gap of the whole; one that no guest's
//!   test proved is, though each shard, counting the others' tests as not selected, calls it
//!   not run);
//! - each test record gains `guest`, the guest (1-based) that ran it.

use serde_json::{Map, Value};

/// The coverage statuses, best first.
const STATUS_RANK: [&str; 6] = ["guest", "host", "device-side", "allowed", "gap", "not-run"];

/// The rank of a coverage status (unknown ones last).
fn rank(status: &str) -> usize {
    STATUS_RANK.iter().position(|s| *s == status).unwrap_or(STATUS_RANK.len())
}

/// Merges the guests' reports (each a `results.json` text, in guest order); `whole` when the
/// run selected the whole suite, so that the merged coverage's gaps make it incomplete.
///
/// # Errors
/// A report that is not JSON or not an object.
pub fn merge(reports: &[String], whole: bool) -> Result<String, String> {
    let parsed: Vec<Map<String, Value>> = reports
        .iter()
        .enumerate()
        .map(|(i, text)| match serde_json::from_str(text) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err(format!("guest {}'s results are not a JSON object", i + 1)),
            Err(e) => Err(format!("guest {}'s results: {e}", i + 1)),
        })
        .collect::<Result<_, _>>()?;
    // Each record names its guest (1-based): every guest has a /dev/belfry0.
    let mut tests: Vec<Value> = parsed
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            array(r, "tests").into_iter().map(move |mut t| {
                if let Value::Object(fields) = &mut t {
                    fields.insert("guest".into(), (i + 1).into());
                }
                t
            })
        })
        .collect();
    // A stable sort: records without an index keep their guest order, after the others.
    tests.sort_by_key(|t| t.get("index").and_then(Value::as_u64).unwrap_or(u64::MAX));
    let sum = |key: &str| parsed.iter().map(|r| r.get(key).and_then(Value::as_u64).unwrap_or(0)).sum::<u64>();
    let mut proven: Vec<String> =
        parsed.iter().flat_map(|r| array(r, "proven")).filter_map(|v| v.as_str().map(str::to_string)).collect();
    proven.sort();
    proven.dedup();
    let mut coverage = merge_coverage(&parsed);
    if whole {
        // A shard counts the tests of the others as not selected: a rule none of its provers
        // passed for in any guest is still `not-run` here, and a gap of the whole.
        for row in &mut coverage {
            if row.get("status").and_then(Value::as_str) == Some("not-run") {
                if let Value::Object(fields) = row {
                    fields.insert("status".into(), "gap".into());
                    fields.remove("reason");
                }
            }
        }
    }
    let mut reasons: Vec<String> = parsed
        .iter()
        .filter_map(|r| r.get("incomplete").and_then(Value::as_str))
        .map(|reason| reason.split("; ").filter(|part| !part.starts_with(LOST)).collect::<Vec<_>>().join("; "))
        .filter(|reason| !reason.is_empty())
        .collect();
    let lost = lost_proofs(&tests, &proven);
    if !lost.is_empty() {
        reasons.push(format!("{LOST}{}", lost.join(" ")));
    }
    if whole {
        let gaps: Vec<&str> = coverage
            .iter()
            .filter(|row| row.get("status").and_then(Value::as_str) == Some("gap"))
            .filter_map(|row| row.get("id").and_then(Value::as_str))
            .collect();
        if !gaps.is_empty() {
            reasons.push(format!("coverage gaps: {}", gaps.join(" ")));
        }
    }
    let mut out = Map::new();
    out.insert("passed".into(), sum("passed").into());
    out.insert("failed".into(), sum("failed").into());
    out.insert("skipped".into(), sum("skipped").into());
    out.insert("proven".into(), proven.into());
    out.insert("tests".into(), tests.into());
    out.insert("coverage".into(), coverage.into());
    if !reasons.is_empty() {
        out.insert("incomplete".into(), reasons.join("; ").into());
    }
    out.insert("guests".into(), reports.len().into());
    serde_json::to_string_pretty(&Value::Object(out)).map(|s| s + "\n").map_err(|e| e.to_string())
}

/// How the suite's reason names the rule ids its SKIPs cost their proof (`belfry-conformance`'s
/// `runner::incomplete`).
const LOST: &str = "rule ids that lost their proof: ";

/// The rule ids cited by a test skipped for want of a device (not because its kernel lacks a
/// feature) that no passing test of any guest proved, sorted.
fn lost_proofs(tests: &[Value], proven: &[String]) -> Vec<String> {
    let mut lost: Vec<String> = tests
        .iter()
        .filter(|t| t.get("outcome").and_then(Value::as_str) == Some("skip"))
        .filter(|t| t.get("kernel_lacks").and_then(Value::as_bool) != Some(true))
        .flat_map(|t| t.get("ids").and_then(Value::as_array).cloned().unwrap_or_default())
        .filter_map(|id| id.as_str().map(str::to_string))
        .filter(|id| !proven.contains(id))
        .collect();
    lost.sort();
    lost.dedup();
    lost
}

/// The array `key` of a report (empty if it has none).
fn array(report: &Map<String, Value>, key: &str) -> Vec<Value> {
    report.get(key).and_then(Value::as_array).cloned().unwrap_or_default()
}

/// Each rule id's best row across the guests, in the first guest's order of ids (ids only
/// another guest lists follow); a `guest` row's provers from every guest that proved it.
fn merge_coverage(reports: &[Map<String, Value>]) -> Vec<Value> {
    let mut rows: Vec<Value> = Vec::new();
    for row in reports.iter().flat_map(|r| array(r, "coverage")) {
        let id = row.get("id").and_then(Value::as_str).unwrap_or_default().to_string();
        let status = |r: &Value| rank(r.get("status").and_then(Value::as_str).unwrap_or_default());
        match rows.iter_mut().find(|r| r.get("id").and_then(Value::as_str) == Some(id.as_str())) {
            None => rows.push(row),
            Some(kept) if status(&row) < status(kept) => *kept = row,
            Some(kept) if status(&row) == status(kept) && status(kept) == 0 => {
                let more = row.get("proven_by").and_then(Value::as_array).cloned().unwrap_or_default();
                if let Some(Value::Array(by)) = kept.get_mut("proven_by") {
                    for test in more {
                        if !by.contains(&test) {
                            by.push(test);
                        }
                    }
                }
            }
            Some(_) => {}
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(tests: &str, coverage: &str, incomplete: Option<&str>) -> String {
        let incomplete = incomplete.map(|w| format!(r#", "incomplete": "{w}""#)).unwrap_or_default();
        format!(
            r#"{{"passed": 1, "failed": 0, "skipped": 0, "proven": [], "tests": [{tests}], "coverage": [{coverage}]{incomplete}}}"#
        )
    }

    fn merged(reports: &[String], whole: bool) -> Value {
        serde_json::from_str(&merge(reports, whole).expect("merges")).expect("JSON")
    }

    #[test]
    fn tests_come_back_in_registry_order_with_every_field_kept() {
        let a = shard(
            r#"{"name": "a", "outcome": "pass", "index": 0, "seconds": 1.0}, {"name": "c", "outcome": "fail", "index": 2, "reason": "x"}"#,
            "",
            None,
        );
        let b = shard(r#"{"name": "b", "outcome": "skip", "index": 1, "kernel_lacks": true}"#, "", None);
        let m = merged(&[a, b], false);
        let names: Vec<&str> = m["tests"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let guests: Vec<u64> = m["tests"].as_array().unwrap().iter().map(|t| t["guest"].as_u64().unwrap()).collect();
        assert_eq!(guests, [1, 2, 1]);
        assert_eq!(m["tests"][1]["kernel_lacks"], true, "a field the launcher does not know survives");
        assert_eq!(m["passed"], 2);
        assert_eq!(m["guests"], 2);
    }

    #[test]
    fn a_rule_proven_in_any_guest_is_proven_and_gaps_are_judged_on_the_whole() {
        let row = |id: &str, status: &str, by: &str| {
            format!(r#"{{"id": "{id}", "status": "{status}", "proven_by": [{by}]}}"#)
        };
        let a = shard(
            "",
            &[row("FEN-01", "guest", r#""t1""#), row("FEN-02", "not-run", ""), row("XAD-09", "gap", "")].join(","),
            None,
        );
        let b = shard(
            "",
            &[row("FEN-01", "guest", r#""t2""#), row("FEN-02", "guest", r#""t3""#), row("XAD-09", "not-run", "")]
                .join(","),
            None,
        );
        let m = merged(&[a.clone(), b.clone()], true);
        let rows = m["coverage"].as_array().unwrap();
        assert_eq!(rows[0]["proven_by"], serde_json::json!(["t1", "t2"]));
        assert_eq!(rows[1]["status"], "guest", "not run in one guest, proven in the other");
        assert_eq!(rows[2]["status"], "gap", "a gap in one guest and not run in the other stays a gap");
        assert_eq!(m["incomplete"], "coverage gaps: XAD-09");
        // Each shard's prover failed: each shard calls the rule not run (the other's test), the
        // whole a gap.
        let c = shard("", &row("SUB-01", "not-run", ""), None);
        let d = shard("", &row("SUB-01", "not-run", ""), None);
        let m2 = merged(&[c.clone(), d.clone()], true);
        assert_eq!(m2["coverage"][0]["status"], "gap");
        assert_eq!(m2["incomplete"], "coverage gaps: SUB-01");
        assert_eq!(merged(&[c, d], false)["coverage"][0]["status"], "not-run", "a filtered run's stays not run");
        assert!(merged(&[a, b], false).get("incomplete").is_none(), "a filtered run's gaps are not its own");
    }

    #[test]
    fn every_guests_reasons_are_kept() {
        let a = shard("", "", Some("1 test(s) skipped: x (no device)"));
        let b = shard("", "", Some("1 test(s) skipped: y (no device)"));
        let m = merged(&[a, b], true);
        assert_eq!(m["incomplete"], "1 test(s) skipped: x (no device); 1 test(s) skipped: y (no device)");
    }

    #[test]
    fn rule_ids_lost_to_a_skip_are_counted_over_every_guest() {
        // Guest 1 skipped a test citing FEN-01 and FEN-02; guest 2 proved FEN-01.
        let a = r#"{"passed": 0, "failed": 0, "skipped": 1, "proven": [],
            "tests": [{"name": "x", "outcome": "skip", "ids": ["FEN-01", "FEN-02"], "index": 0}],
            "coverage": [], "incomplete": "1 test(s) skipped: x (no device); rule ids that lost their proof: FEN-01 FEN-02"}"#;
        let b = r#"{"passed": 1, "failed": 0, "skipped": 0, "proven": ["FEN-01"],
            "tests": [{"name": "y", "outcome": "pass", "ids": ["FEN-01"], "index": 1}], "coverage": []}"#;
        let m = merged(&[a.into(), b.into()], false);
        assert_eq!(m["incomplete"], "1 test(s) skipped: x (no device); rule ids that lost their proof: FEN-02");
        // Proven everywhere else: the skip stays a reason, no id is named.
        let c = b.replace(r#""proven": ["FEN-01"]"#, r#""proven": ["FEN-01", "FEN-02"]"#);
        assert_eq!(merged(&[a.into(), c], false)["incomplete"], "1 test(s) skipped: x (no device)");
    }

    #[test]
    fn unreadable_results_are_refused_by_guest() {
        let err = merge(&[shard("", "", None), "[1]".into()], true).unwrap_err();
        assert!(err.contains("guest 2"), "{err}");
        assert!(merge(&["{".into()], true).unwrap_err().contains("guest 1"));
    }
}
