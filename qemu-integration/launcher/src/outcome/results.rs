//! The suite's results where tools look: the JSON report the in-guest suite puts on the results
//! channel (framed by `BELFRY-CONFORMANCE-BEGIN/END`) is saved as `results.json` and turned
//! into `junit.xml` (JUnit XML, what CI systems read), `results.ktap` (KTAP version 1, the
//! kernel selftest format) and `coverage.txt` (every rule id and where it stands).

use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;

/// Marker lines framing the suite's JSON report on the results channel.
pub const BEGIN: &str = "BELFRY-CONFORMANCE-BEGIN";
/// See [`BEGIN`].
pub const END: &str = "BELFRY-CONFORMANCE-END";

/// The suite's report (the fields the launcher uses of `belfry_conformance::Report`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Report {
    /// Tests passed.
    pub passed: usize,
    /// Tests failed.
    pub failed: usize,
    /// Tests skipped.
    pub skipped: usize,
    /// Every test run, in order.
    pub tests: Vec<TestRecord>,
    /// Every rule id and where it stands.
    #[serde(default)]
    pub coverage: Vec<CoverageRow>,
    /// Why the run fails although no test failed: its SKIPs, the rule ids that lost their proof,
    /// and (unfiltered) its coverage gaps.
    #[serde(default)]
    pub incomplete: Option<String>,
}

/// One test's result.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct TestRecord {
    /// Its name.
    pub name: String,
    /// `pass`, `fail` or `skip`.
    pub outcome: String,
    /// Rule ids it proves.
    #[serde(default)]
    pub ids: Vec<String>,
    /// Why it failed or was skipped.
    #[serde(default)]
    pub reason: Option<String>,
    /// The device it ran on.
    #[serde(default)]
    pub device: Option<String>,
    /// Seconds it took.
    #[serde(default)]
    pub seconds: f64,
    /// The guest that ran it (1-based), in the merged report of a run across several.
    #[serde(default)]
    pub guest: Option<usize>,
}

/// One rule id's coverage.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct CoverageRow {
    /// The rule id.
    pub id: String,
    /// `guest`, `host`, `device-side`, `allowed`, `not-run` or `gap`.
    pub status: String,
    /// Tests proving it.
    #[serde(default)]
    pub proven_by: Vec<String>,
    /// Why it may stay unproven.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Parses the report framed on the results channel; `Ok(None)` if there is none (the suite did
/// not run), `Err` with the parse error if it is there but unreadable.
pub fn extract(results: &str) -> Result<Option<(String, Report)>, serde_json::Error> {
    let Some(json) = crate::outcome::golden::extract_section(results, BEGIN, END) else {
        return Ok(None);
    };
    let report = serde_json::from_str(&json)?;
    Ok(Some((json, report)))
}

/// Why the suite's run in `dir` (its saved `results.json`) fails although no test failed, as
/// the suite said: its SKIPs, the rule ids that lost their proof, its coverage gaps.
pub fn incomplete(dir: &Path) -> Option<String> {
    let json = std::fs::read_to_string(dir.join("results.json")).ok()?;
    serde_json::from_str::<Report>(&json).ok()?.incomplete
}

/// Escapes text for XML attributes and content; drops characters XML 1.0 cannot hold.
fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => {}
            c => out.push(c),
        }
    }
    out
}

/// The report as JUnit XML: one `<testsuite>` named `belfry-conformance`, one `<testcase>` per
/// test (classname: the device it ran on), `<failure>` and `<skipped>` with the reason, and
/// the rule ids as a property of each case.
pub fn junit(report: &Report) -> String {
    let total: f64 = report.tests.iter().map(|t| t.seconds).sum();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites name=\"belfry\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" errors=\"0\" time=\"{total:.3}\">",
        report.tests.len(),
        report.failed,
        report.skipped
    );
    let _ = writeln!(
        x,
        "  <testsuite name=\"belfry-conformance\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" errors=\"0\" time=\"{total:.3}\">",
        report.tests.len(),
        report.failed,
        report.skipped
    );
    for t in &report.tests {
        let device = t.device.as_deref().unwrap_or("belfry-conformance");
        let classname = match t.guest {
            Some(guest) => format!("guest{guest}:{device}"),
            None => device.to_string(),
        };
        let _ = write!(
            x,
            "    <testcase name=\"{}\" classname=\"{}\" time=\"{:.3}\">",
            xml_escape(&t.name),
            xml_escape(&classname),
            t.seconds
        );
        if !t.ids.is_empty() {
            let _ = write!(
                x,
                "<properties><property name=\"rule-ids\" value=\"{}\"/></properties>",
                xml_escape(&t.ids.join(" "))
            );
        }
        let reason = xml_escape(t.reason.as_deref().unwrap_or(""));
        match t.outcome.as_str() {
            "fail" => {
                let _ = write!(x, "<failure message=\"{reason}\">{reason}</failure>");
            }
            "skip" => {
                let _ = write!(x, "<skipped message=\"{reason}\"/>");
            }
            _ => {}
        }
        x.push_str("</testcase>\n");
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

/// One line of KTAP text: no line breaks, and no `#` (which would start a directive).
fn ktap_text(text: &str) -> String {
    text.replace(['\n', '\r'], " ").replace('#', "No.")
}

/// The report as KTAP version 1 (`Documentation/dev-tools/ktap.rst`): the plan, then
/// `ok N name`, `not ok N name` with the reason as a diagnostic line before it, or
/// `ok N name # SKIP reason`.
pub fn ktap(report: &Report) -> String {
    let mut k = String::from("KTAP version 1\n");
    let _ = writeln!(
        k,
        "# belfry-conformance: {} passed, {} failed, {} skipped",
        report.passed, report.failed, report.skipped
    );
    let _ = writeln!(k, "1..{}", report.tests.len());
    for (i, t) in report.tests.iter().enumerate() {
        let n = i + 1;
        let name = ktap_text(&t.name);
        let reason = ktap_text(t.reason.as_deref().unwrap_or(""));
        match t.outcome.as_str() {
            "pass" => {
                let _ = writeln!(k, "ok {n} {name}");
            }
            "skip" => {
                let _ = writeln!(k, "ok {n} {name} # SKIP {reason}");
            }
            _ => {
                let _ = writeln!(k, "# {name}: {reason}");
                let _ = writeln!(k, "not ok {n} {name}");
            }
        }
    }
    k
}

/// The coverage report: one line per rule id (`ID status: tests | reason`) after the totals.
pub fn coverage(report: &Report) -> String {
    let count = |s: &str| report.coverage.iter().filter(|r| r.status == s).count();
    let mut c = String::new();
    let _ = writeln!(
        c,
        "# {} rule ids: {} proven in the guest, {} by host tests only (as cited), {} device side only, {} allowed unproven, {} gaps{}",
        report.coverage.len(),
        count("guest"),
        count("host"),
        count("device-side"),
        count("allowed"),
        count("gap"),
        match count("not-run") {
            0 => String::new(),
            n => format!(" (a filtered run: {n} more proven by tests it did not select)"),
        }
    );
    for row in &report.coverage {
        let detail =
            if row.proven_by.is_empty() { row.reason.clone().unwrap_or_default() } else { row.proven_by.join(", ") };
        let _ = writeln!(c, "{} {}: {detail}", row.id, row.status);
    }
    c
}

/// Writes `results.json`, `junit.xml`, `results.ktap` and `coverage.txt` into `dir` from the
/// results channel's text; returns a note for the summary, or `None` if the suite wrote no
/// report.
pub fn save(results_text: &str, dir: &Path) -> Option<String> {
    let (json, report) = match extract(results_text) {
        Ok(Some(found)) => found,
        Ok(None) => return None,
        Err(e) => return Some(format!("the suite's JSON results could not be read: {e}")),
    };
    Some(write_files(dir, json, &report).unwrap_or_else(|why| why))
}

/// Writes the merged report of a run's guests into `dir` (as [`save`] writes one guest's) from
/// each guest's saved `results.json` (`guest_dirs`, in guest order; [`crate::outcome::merge`]);
/// `whole` when the run selected the whole suite. A note for the summary (the merged totals),
/// or why there is no merged report (which fails the run: no guest's share stands for it).
pub fn save_merged(dir: &Path, guest_dirs: &[&Path], whole: bool) -> Result<String, String> {
    let mut reports = Vec::new();
    for (i, guest) in guest_dirs.iter().enumerate() {
        match std::fs::read_to_string(guest.join("results.json")) {
            Ok(text) => reports.push(text),
            Err(e) => return Err(format!("results not merged: guest {} left no results.json: {e}", i + 1)),
        }
    }
    let json = crate::outcome::merge::merge(&reports, whole).map_err(|e| format!("results not merged: {e}"))?;
    let report: Report = serde_json::from_str(&json).map_err(|e| format!("results not merged: {e}"))?;
    let proven = report.coverage.iter().filter(|r| r.status == "guest" || r.status == "host").count();
    let totals = format!(
        "{} guests merged: {} passed, {} failed, {} skipped; {proven} of {} rule ids proven",
        guest_dirs.len(),
        report.passed,
        report.failed,
        report.skipped,
        report.coverage.len()
    );
    let written = write_files(dir, json, &report).map_err(|why| format!("merged results: {why}"))?;
    Ok(format!("{totals}; {written}"))
}

/// Each test's seconds, `SECONDS NAME` a line in the report's order, after `#` lines saying
/// what they are: the files the suite deals a run's tests across guests by
/// (`guest-driver/conformance/durations.txt` for the distro kernel, `durations-debug.txt` for
/// the debug kernel), refreshed by copying a whole run's.
pub fn durations(report: &Report) -> String {
    let mut d = String::from(
        "# Each conformance test's seconds in this run (`SECONDS NAME`): copied from a whole run to\n\
         # guest-driver/conformance/durations.txt (distro kernel) or durations-debug.txt (debug\n\
         # kernel), what `belfry-conformance --shard K/N --durations KERNEL` deals by.\n",
    );
    for t in &report.tests {
        let _ = writeln!(d, "{:.3} {}", t.seconds, t.name);
    }
    d
}

/// Writes `results.json` (`json`, as given) and the files made from `report` into `dir`; the
/// note naming them, or which could not be written.
fn write_files(dir: &Path, json: String, report: &Report) -> Result<String, String> {
    let files = [
        ("results.json", json),
        ("junit.xml", junit(report)),
        ("results.ktap", ktap(report)),
        ("coverage.txt", coverage(report)),
        ("durations.txt", durations(report)),
    ];
    for (name, text) in &files {
        if let Err(e) = std::fs::write(dir.join(name), text) {
            return Err(format!("{name} not saved: {e}"));
        }
    }
    Ok("results: junit.xml, results.ktap, coverage.txt, durations.txt, results.json".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"noise
BELFRY-CONFORMANCE-BEGIN
{
  "passed": 1, "failed": 1, "skipped": 1, "proven": ["DB-01"],
  "tests": [
    {"name": "doorbell_rings", "outcome": "pass", "ids": ["DB-01", "DB-02"], "device": "/dev/belfry0", "seconds": 0.25},
    {"name": "fence_waits", "outcome": "fail", "ids": ["FEN-01"], "reason": "value 3 < 5 # after <wait> & \"more\"", "device": "/dev/belfry0", "seconds": 1.5},
    {"name": "global_model", "outcome": "skip", "ids": [], "reason": "needs a device with --doorbell-model global", "seconds": 0.0}
  ],
  "coverage": [
    {"id": "DB-01", "tags": [], "status": "guest", "proven_by": ["doorbell_rings"]},
    {"id": "PWR-01", "tags": ["future"], "status": "allowed", "proven_by": [], "reason": "no power management yet"}
  ]
}
BELFRY-CONFORMANCE-END
BELFRY-TIMELINE-BEGIN
"#;

    fn report() -> Report {
        extract(SAMPLE).unwrap().unwrap().1
    }

    #[test]
    fn the_report_is_found_between_its_markers() {
        let r = report();
        assert_eq!((r.passed, r.failed, r.skipped, r.tests.len(), r.coverage.len()), (1, 1, 1, 3, 2));
        assert_eq!(r.tests[1].reason.as_deref(), Some("value 3 < 5 # after <wait> & \"more\""));
        assert!(extract("no report here").unwrap().is_none());
        assert!(extract("BELFRY-CONFORMANCE-BEGIN\n{ broken\nBELFRY-CONFORMANCE-END\n").is_err());
    }

    #[test]
    fn junit_has_one_case_per_test_with_failures_and_skips() {
        let x = junit(&report());
        assert!(x.contains("<testsuite name=\"belfry-conformance\" tests=\"3\" failures=\"1\" skipped=\"1\" errors=\"0\" time=\"1.750\">"), "{x}");
        assert!(x.contains("<testcase name=\"doorbell_rings\" classname=\"/dev/belfry0\" time=\"0.250\"><properties><property name=\"rule-ids\" value=\"DB-01 DB-02\"/></properties></testcase>"), "{x}");
        assert!(x.contains("<failure message=\"value 3 &lt; 5 # after &lt;wait&gt; &amp; &quot;more&quot;\">"), "{x}");
        assert!(x.contains("<testcase name=\"global_model\" classname=\"belfry-conformance\" time=\"0.000\"><skipped message=\"needs a device with --doorbell-model global\"/></testcase>"), "{x}");
        assert_eq!(x.matches("<testcase ").count(), 3);
        assert_eq!(xml_escape("a\u{1}b"), "ab");
    }

    /// Whether every test of `dir`'s results.json names the guest that ran it.
    fn merged_guests_named(dir: &Path) -> bool {
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
        json["tests"].as_array().unwrap().iter().all(|t| t["guest"].as_u64().is_some_and(|g| g >= 1))
    }

    #[test]
    fn the_guests_results_are_saved_merged_with_their_totals() {
        let (a, b, top) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        save(SAMPLE, a.path()).unwrap();
        let other =
            SAMPLE.replace("doorbell_rings", "doorbell_rings_twice").replace("fence_waits", "fence_waits_again");
        save(&other, b.path()).unwrap();
        let note = save_merged(top.path(), &[a.path(), b.path()], true).unwrap();
        assert!(merged_guests_named(top.path()), "each merged record names its guest");
        assert!(note.starts_with("2 guests merged: 2 passed, 2 failed, 2 skipped;"), "{note}");
        let merged: Report =
            serde_json::from_str(&std::fs::read_to_string(top.path().join("results.json")).unwrap()).unwrap();
        assert_eq!(merged.tests.len(), 6);
        let junit = std::fs::read_to_string(top.path().join("junit.xml")).unwrap();
        assert!(junit.contains("<testcase name=\"doorbell_rings_twice\" classname=\"guest2:/dev/belfry0\""), "{junit}");
        let gone = tempfile::tempdir().unwrap();
        assert!(save_merged(top.path(), &[a.path(), gone.path()], true)
            .unwrap_err()
            .contains("guest 2 left no results.json"));
    }

    #[test]
    fn ktap_has_the_plan_and_one_result_line_per_test() {
        let k = ktap(&report());
        let lines: Vec<&str> = k.lines().collect();
        assert_eq!(lines[0], "KTAP version 1");
        assert!(lines.contains(&"1..3"));
        assert!(lines.contains(&"ok 1 doorbell_rings"));
        assert!(lines.contains(&"# fence_waits: value 3 < 5 No. after <wait> & \"more\""));
        assert!(lines.contains(&"not ok 2 fence_waits"));
        assert!(lines.contains(&"ok 3 global_model # SKIP needs a device with --doorbell-model global"));
    }

    #[test]
    fn coverage_lists_every_rule_id() {
        let c = coverage(&report());
        assert!(
            c.starts_with("# 2 rule ids: 1 proven in the guest, 0 by host tests only (as cited), 0 device side only, 1 allowed unproven, 0 gaps\n")
        );
        assert!(c.contains("DB-01 guest: doorbell_rings\n"));
        assert!(c.contains("PWR-01 allowed: no power management yet\n"));
    }

    #[test]
    fn save_writes_the_five_files() {
        let dir = tempfile::tempdir().unwrap();
        let note = save(SAMPLE, dir.path()).unwrap();
        assert!(note.starts_with("results: junit.xml"), "{note}");
        for f in ["results.json", "junit.xml", "results.ktap", "coverage.txt", "durations.txt"] {
            assert!(dir.path().join(f).exists(), "{f}");
        }
        let durations = std::fs::read_to_string(dir.path().join("durations.txt")).unwrap();
        let timed: Vec<&str> = durations.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(timed, ["0.250 doorbell_rings", "1.500 fence_waits", "0.000 global_model"]);
        assert_eq!(save("nothing", dir.path()), None);
        assert_eq!(incomplete(dir.path()), None, "a complete run");
        let skipped = SAMPLE.replace(
            "\"coverage\": [",
            "\"incomplete\": \"1 test(s) skipped: global_model (needs a device with --doorbell-model global)\", \"coverage\": [",
        );
        save(&skipped, dir.path()).unwrap();
        assert_eq!(
            incomplete(dir.path()).as_deref(),
            Some("1 test(s) skipped: global_model (needs a device with --doorbell-model global)")
        );
    }
}
