//! The runner: probing the attached devices, running each selected test on the first device
//! whose capabilities match its needs, one line per test, the totals and the JSON results
//! ([`Report`], with the rule [`coverage`]).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use belfry_umd::{Caps, Device};
use serde::Serialize;

use crate::harness::coverage::{self, Status};
use crate::harness::registry::{Skip, Test};

/// Outcome of one test.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Passed.
    Pass,
    /// Failed.
    Fail,
    /// Not run: no attached device offers the configuration, or the kernel lacks a feature the
    /// test needs ([`Skip`]). A run with a SKIP fails ([`incomplete`]).
    Skip,
}

/// One line of the results file.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    /// Test name.
    pub name: String,
    /// Outcome.
    pub outcome: Outcome,
    /// Rule ids the test proves.
    pub ids: Vec<String>,
    /// Why it failed or was skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A SKIP because the kernel lacks a feature ([`Skip`]): another kernel's run must pass it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kernel_lacks: bool,
    /// Device it ran on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Seconds.
    pub seconds: f64,
}

/// The results file.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Tests passed.
    pub passed: usize,
    /// Tests failed.
    pub failed: usize,
    /// Tests skipped.
    pub skipped: usize,
    /// Rule ids proven by passing tests, sorted.
    pub proven: Vec<String>,
    /// Every test run.
    pub tests: Vec<Record>,
    /// Every rule id: proven by this run's passing tests, by host tests, allowed unproven, or a gap.
    pub coverage: Vec<coverage::Row>,
    /// Why the run fails although no test failed ([`incomplete`]): its SKIPs, the rule ids they
    /// took the proof of, and (unfiltered) its coverage gaps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
}

/// Formats an error with its chain of causes.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

/// How many `/dev/belfryN` nodes a run without `--device` tries.
pub const MAX_PROBED_DEVICES: usize = 32;

/// The attached devices and their capabilities (`/dev/belfry0..31` that open).
pub fn probe_devices(paths: &[PathBuf]) -> Vec<(PathBuf, Caps)> {
    let candidates: Vec<PathBuf> = if paths.is_empty() {
        (0..MAX_PROBED_DEVICES).map(|n| PathBuf::from(format!("/dev/belfry{n}"))).collect()
    } else {
        paths.to_vec()
    };
    candidates
        .into_iter()
        .filter_map(|p| match Device::open(&p) {
            Ok(d) => Some((p, *d.caps())),
            Err(e) => {
                if p.exists() {
                    eprintln!("conformance: {}: {}", p.display(), chain(&e));
                }
                None
            }
        })
        .collect()
}

/// Runs the selected tests, printing one line each and the totals; `unselected` (the tests a
/// filter left out) only keeps the ids they prove from counting as coverage gaps.
pub fn run(tests: &[Test], unselected: &[Test], devices: &[(PathBuf, Caps)]) -> Report {
    let mut records = Vec::new();
    for test in tests {
        let ids: Vec<String> = test.ids.iter().map(|s| (*s).to_string()).collect();
        let ids_text = test.ids.join(", ");
        let Some((path, _)) = devices.iter().find(|(_, caps)| test.needs.matches(caps)) else {
            let reason = test.needs.missing();
            println!("SKIP {}: {reason}", test.name);
            records.push(Record {
                name: test.name.into(),
                outcome: Outcome::Skip,
                ids,
                reason: Some(reason),
                kernel_lacks: false,
                device: None,
                seconds: 0.0,
            });
            continue;
        };
        let start = Instant::now();
        let result = (test.run)(path);
        let seconds = start.elapsed().as_secs_f64();
        let kernel_lacks = matches!(&result, Err(e) if e.downcast_ref::<Skip>().is_some());
        let (outcome, reason) = match result {
            Ok(()) => {
                println!("PASS {} [{ids_text}]", test.name);
                (Outcome::Pass, None)
            }
            Err(e) if kernel_lacks => {
                let reason = chain(e.as_ref());
                println!("SKIP {}: {reason}", test.name);
                (Outcome::Skip, Some(reason))
            }
            Err(e) => {
                let reason = chain(e.as_ref());
                println!("FAIL {}: {reason}", test.name);
                (Outcome::Fail, Some(reason))
            }
        };
        records.push(Record {
            name: test.name.into(),
            outcome,
            ids,
            reason,
            kernel_lacks,
            device: Some(path.display().to_string()),
            seconds,
        });
    }
    let count = |o: Outcome| records.iter().filter(|r| r.outcome == o).count();
    let mut proven: Vec<String> =
        records.iter().filter(|r| r.outcome == Outcome::Pass).flat_map(|r| r.ids.iter().cloned()).collect();
    proven.sort();
    proven.dedup();
    let guest = records
        .iter()
        .filter(|r| r.outcome == Outcome::Pass)
        .flat_map(|r| r.ids.iter().map(move |id| (id.as_str(), r.name.as_str())));
    let not_run = unselected.iter().flat_map(|t| t.ids.iter().map(move |id| (*id, t.name)));
    let coverage = coverage::report(guest, not_run);
    println!("{}", coverage::summary(&coverage, "this run's passing guest tests; host tests as cited"));
    let report = Report {
        passed: count(Outcome::Pass),
        failed: count(Outcome::Fail),
        skipped: count(Outcome::Skip),
        proven,
        tests: records,
        coverage,
        incomplete: None,
    };
    let seconds: f64 = report.tests.iter().map(|r| r.seconds).sum();
    println!("suite ran {seconds:.1} s");
    if report.skipped > 0 {
        println!("{} passed, {} failed, {} skipped", report.passed, report.failed, report.skipped);
    } else {
        println!("{} passed, {} failed", report.passed, report.failed);
    }
    report
}

/// Why a run in which no test failed still fails, or `None`: every SKIP for want of a device
/// configuration (a test that did not run proves nothing, in any run: a filtered run attaches
/// the devices its tests need), with the rule ids that lost their proof (cited by a skipped
/// test, proven by no passing one), and in an unfiltered run (`filtered` false) every coverage
/// gap. A SKIP because the kernel lacks a feature is left to `belfry-rules`, which requires
/// another kernel's run to pass that test.
pub fn incomplete(report: &Report, filtered: bool) -> Option<String> {
    let skipped: Vec<&Record> = report.tests.iter().filter(|r| r.outcome == Outcome::Skip && !r.kernel_lacks).collect();
    let mut lost: Vec<&str> = skipped
        .iter()
        .flat_map(|r| r.ids.iter())
        .filter(|id| !report.proven.contains(id))
        .map(String::as_str)
        .collect();
    lost.sort_unstable();
    lost.dedup();
    let gaps: Vec<&str> = if filtered {
        Vec::new()
    } else {
        report.coverage.iter().filter(|r| r.status == Status::Gap).map(|r| r.id.as_str()).collect()
    };
    if skipped.is_empty() && gaps.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if !skipped.is_empty() {
        let names: Vec<String> =
            skipped.iter().map(|r| format!("{} ({})", r.name, r.reason.as_deref().unwrap_or("no reason"))).collect();
        parts.push(format!("{} test(s) skipped: {}", skipped.len(), names.join(", ")));
        if !lost.is_empty() {
            parts.push(format!("rule ids that lost their proof: {}", lost.join(" ")));
        }
    }
    if !gaps.is_empty() {
        parts.push(format!("coverage gaps: {}", gaps.join(" ")));
    }
    Some(parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, outcome: Outcome, ids: &[&str]) -> Record {
        Record {
            name: name.into(),
            outcome,
            ids: ids.iter().map(|s| (*s).to_string()).collect(),
            reason: Some("needs a device with --no-native-fences".into()),
            kernel_lacks: false,
            device: None,
            seconds: 0.0,
        }
    }

    fn report(tests: Vec<Record>, gap: bool) -> Report {
        let proven: Vec<String> =
            tests.iter().filter(|r| r.outcome == Outcome::Pass).flat_map(|r| r.ids.iter().cloned()).collect();
        let coverage = if gap {
            vec![coverage::Row {
                id: "XAD-09".into(),
                tags: vec![],
                status: Status::Gap,
                proven_by: vec![],
                reason: None,
            }]
        } else {
            vec![]
        };
        Report { passed: 0, failed: 0, skipped: 0, proven, tests, coverage, incomplete: None }
    }

    #[test]
    fn a_skip_fails_any_run_and_names_the_ids_it_took_away() {
        let r = report(
            vec![record("a", Outcome::Pass, &["XAD-01"]), record("b", Outcome::Skip, &["XAD-01", "XAD-02"])],
            false,
        );
        assert_eq!(
            incomplete(&r, true).as_deref(),
            Some(
                "1 test(s) skipped: b (needs a device with --no-native-fences); rule ids that lost their proof: XAD-02"
            )
        );
        assert!(incomplete(&report(vec![record("a", Outcome::Pass, &["XAD-01"])], false), false).is_none());
        let mut lacking = record("c", Outcome::Skip, &[]);
        lacking.kernel_lacks = true;
        assert!(incomplete(&report(vec![lacking], false), false).is_none(), "left to belfry-rules");
    }

    #[test]
    fn gaps_fail_only_an_unfiltered_run() {
        let r = report(vec![record("a", Outcome::Pass, &["XAD-01"])], true);
        assert_eq!(incomplete(&r, false).as_deref(), Some("coverage gaps: XAD-09"));
        assert_eq!(incomplete(&r, true), None);
    }
}
