//! The runner: probing the attached devices, running each selected test on the first device
//! whose capabilities match its needs, one line per test, the totals and the JSON results
//! ([`Report`], with the rule [`coverage`]).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use belfry_umd::{Caps, Device};
use serde::Serialize;

use crate::harness::coverage;
use crate::harness::registry::{DeviceMatch as _, Test};

/// Outcome of one test.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Passed.
    Pass,
    /// Failed.
    Fail,
    /// Not run: no attached device offers the configuration.
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
            let reason = format!("needs a device with {}", test.needs.listed());
            println!("SKIP {}: {reason}", test.name);
            records.push(Record {
                name: test.name.into(),
                outcome: Outcome::Skip,
                ids,
                reason: Some(reason),
                device: None,
                seconds: 0.0,
            });
            continue;
        };
        let start = Instant::now();
        let result = (test.run)(path);
        let seconds = start.elapsed().as_secs_f64();
        let (outcome, reason) = match result {
            Ok(()) => {
                println!("PASS {} [{ids_text}]", test.name);
                (Outcome::Pass, None)
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
    println!("{}", coverage::summary(&coverage));
    let report = Report {
        passed: count(Outcome::Pass),
        failed: count(Outcome::Fail),
        skipped: count(Outcome::Skip),
        proven,
        tests: records,
        coverage,
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
