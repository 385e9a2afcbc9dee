//! The runner: probing the attached devices, running each selected test on the first device
//! whose capabilities match its needs, one line per test, the totals and the JSON results
//! ([`Report`], with the rule [`coverage`]); the selection once, or again and again in one boot
//! ([`Repeat`]: `--repeat N`, `--until-fail`) to hunt a rare failure, each iteration announced
//! by an `ITERATION k` line and its failures listed at the end.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use belfry_umd::{Caps, Device};
use serde::Serialize;

use crate::harness::coverage::{self, Status};
use crate::harness::fail_inject::FailInject;
pub use crate::harness::record::{Outcome, Record};
use crate::harness::registry::{DeviceMatch as _, Skip, Test};
use crate::harness::{isolated, schedule};

/// How often the selection runs in one boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repeat {
    /// Iterations at most (`None`: until a failure).
    pub times: Option<u32>,
    /// Stop after the first iteration with a failure.
    pub until_fail: bool,
}

impl Repeat {
    /// The selection once.
    pub const ONCE: Repeat = Repeat { times: Some(1), until_fail: false };

    /// Whether more than one iteration may run (then records carry their iteration).
    fn repeats(self) -> bool {
        self != Self::ONCE && self.times != Some(0)
    }
}

/// The line that announces iteration `k` of a repeated run (`ITERATION k/N`, or `ITERATION k`
/// until a failure): the launcher reads it on the console to cut each iteration's traces.
pub const ITERATION: &str = "ITERATION";

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

/// Tests at once unless `--jobs` says otherwise: two, one a vCPU of the suite's guest. Whole
/// suites passed with it on both kernels, their output in the order of `--jobs 1`; on the
/// distro kernel it ran the tests in 0.89–0.91 of the time of `--jobs 1`, on the debug kernel
/// beside other guests in as long (docs/BENCHMARKS.md, "The suite's guest time").
pub const DEFAULT_JOBS: usize = 2;

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

/// Runs the selected tests as `repeat` says, printing one line each and the totals (of every
/// iteration); `unselected` (the tests a filter left out) only keeps the ids they prove from
/// counting as coverage gaps. A repeated run prints `ITERATION k[/N]` before each iteration and
/// at the end how many iterations passed and every failure with its iteration.
///
/// Under fault injection (`fail_inject`) the tests run one at a time, each in a process of its
/// own, and each is judged by whether the module stayed sound ([`FailInject::judge`]), not by
/// its own checks.
pub fn run(
    tests: &[Test],
    unselected: &[Test],
    devices: &[(PathBuf, Caps)],
    repeat: Repeat,
    jobs: usize,
    fail_inject: Option<&FailInject>,
) -> Report {
    let start = Instant::now();
    let jobs = if fail_inject.is_some() { 1 } else { jobs };
    if !repeat.repeats() {
        let records = run_once(tests, devices, None, jobs, fail_inject);
        return report(records, unselected, start);
    }
    let (records, iterations, clean) = iterate(repeat, |k| {
        match repeat.times {
            Some(n) => println!("{ITERATION} {k}/{n}"),
            None => println!("{ITERATION} {k}"),
        }
        run_once(tests, devices, Some(k), jobs, fail_inject)
    });
    println!("repeat: {clean} of {iterations} iterations passed");
    for r in records.iter().filter(|r| r.outcome == Outcome::Fail) {
        println!(
            "repeat: iteration {}: FAIL {}: {}",
            r.iteration.unwrap_or(0),
            r.name,
            r.reason.as_deref().unwrap_or("")
        );
    }
    report(records, unselected, start)
}

/// Calls `once` with iterations 1, 2, … as `repeat` says: `times` at most, and after the first
/// with a failed record when `until_fail`. Every record, the iterations run and how many of
/// them had no failure.
fn iterate(repeat: Repeat, mut once: impl FnMut(u32) -> Vec<Record>) -> (Vec<Record>, u32, u32) {
    let mut records = Vec::new();
    let (mut iterations, mut clean) = (0u32, 0u32);
    while repeat.times.is_none_or(|n| iterations < n) {
        iterations += 1;
        let these = once(iterations);
        let failed = these.iter().any(|r| r.outcome == Outcome::Fail);
        records.extend(these);
        if !failed {
            clean += 1;
        } else if repeat.until_fail {
            break;
        }
    }
    (records, iterations, clean)
}

/// One run of the selected tests, a line each, in registry order; `iteration` is noted in the
/// records. With `jobs` above 1 each test runs in a process of its own ([`isolated`]) and up to
/// `jobs` of them at once, as their [`Resources`](crate::harness::resources::Resources) allow
/// ([`schedule`]); each test's output is printed whole, in registry order, once it and every
/// test before it have finished.
fn run_once(
    tests: &[Test],
    devices: &[(PathBuf, Caps)],
    iteration: Option<u32>,
    jobs: usize,
    fail_inject: Option<&FailInject>,
) -> Vec<Record> {
    let placed: Vec<Result<&Path, Record>> = tests.iter().map(|t| place(t, devices, iteration)).collect();
    if jobs > 1 {
        let dir = scratch_dir();
        match std::fs::create_dir_all(&dir) {
            Ok(()) => {
                let records = run_side_by_side(tests, placed, iteration, jobs, &dir);
                let _ = std::fs::remove_dir(&dir);
                return records;
            }
            Err(e) => eprintln!("conformance: {}: {e}; running the tests one at a time", dir.display()),
        }
    }
    let all: Vec<PathBuf> = devices.iter().map(|(p, _)| p.clone()).collect();
    tests
        .iter()
        .zip(placed)
        .map(|(test, place)| match (place, fail_inject) {
            (Ok(path), None) => run_test(test, path, iteration),
            (Ok(path), Some(fi)) => run_test_injected(test, path, iteration, fi, &all),
            (Err(skip), _) => {
                print!("{}", skip_line(&skip));
                skip
            }
        })
        .collect()
}

/// The device of the first attached device that serves `test`, or its SKIP record (the line
/// printed).
fn place<'a>(test: &Test, devices: &'a [(PathBuf, Caps)], iteration: Option<u32>) -> Result<&'a Path, Record> {
    if let Some((path, _)) = devices.iter().find(|(_, caps)| test.needs.matches(caps)) {
        return Ok(path);
    }
    let reason = test.needs.missing();
    Err(Record {
        name: test.name.into(),
        outcome: Outcome::Skip,
        ids: test.ids.iter().map(|s| (*s).to_string()).collect(),
        reason: Some(reason),
        kernel_lacks: false,
        device: None,
        seconds: 0.0,
        iteration,
        index: 0,
    })
}

/// The line of a record that never ran (a SKIP for want of a device).
fn skip_line(record: &Record) -> String {
    format!("SKIP {}: {}\n", record.name, record.reason.as_deref().unwrap_or(""))
}

/// Where tests run in processes of their own keep their output and record files.
fn scratch_dir() -> PathBuf {
    std::env::temp_dir().join(format!("belfry-conformance.{}", std::process::id()))
}

/// [`run_once`] with up to `jobs` tests at once, each in its own process (its files in `dir`),
/// started by this process, which keeps to one thread so that it may fork them
/// ([`isolated::start`]) and reaps whichever ends first ([`isolated::wait_any`]).
fn run_side_by_side<'a>(
    tests: &[Test],
    placed: Vec<Result<&'a Path, Record>>,
    iteration: Option<u32>,
    jobs: usize,
    dir: &Path,
) -> Vec<Record> {
    use std::io::Write as _;
    let mut done: Vec<Option<(String, Record)>> = vec![None; tests.len()];
    let mut waiting: Vec<(usize, &'a Path)> = Vec::new();
    for (i, place) in placed.into_iter().enumerate() {
        match place {
            Ok(path) => waiting.push((i, path)),
            Err(skip) => done[i] = Some((skip_line(&skip), skip)),
        }
    }
    let mut running: Vec<(usize, &'a Path, isolated::Started)> = Vec::new();
    let mut printed = 0;
    loop {
        while running.len() < jobs {
            let w: Vec<schedule::Slot<'a>> =
                waiting.iter().map(|&(i, device)| schedule::Slot { resources: tests[i].resources, device }).collect();
            let r: Vec<schedule::Slot<'a>> = running
                .iter()
                .map(|&(i, device, _)| schedule::Slot { resources: tests[i].resources, device })
                .collect();
            let Some(k) = schedule::next(&w, &r) else { break };
            let (i, device) = waiting.remove(k);
            match isolated::start(&tests[i], device, iteration, dir, i, run_in_this_process) {
                Ok(started) => running.push((i, device, started)),
                Err(e) => {
                    done[i] = Some(not_started(&tests[i], device, iteration, &format!("starting its process: {e}")))
                }
            }
        }
        let mut out = std::io::stdout().lock();
        while printed < done.len() {
            let Some((output, _)) = &done[printed] else { break };
            let _ = out.write_all(output.as_bytes());
            printed += 1;
        }
        let _ = out.flush();
        drop(out);
        if running.is_empty() {
            break;
        }
        match isolated::wait_any() {
            Ok((pid, status)) => {
                if let Some(k) = running.iter().position(|(_, _, s)| s.pid() == pid) {
                    let (i, _, started) = running.remove(k);
                    done[i] = Some(started.reaped(status));
                }
            }
            Err(e) => {
                for (i, device, _) in running.drain(..) {
                    done[i] = Some(not_started(&tests[i], device, iteration, &format!("waiting for its process: {e}")));
                }
            }
        }
    }
    done.into_iter().flatten().map(|(_, record)| record).collect()
}

/// The FAIL line and record of a test whose process did not start or could not be waited for.
fn not_started(test: &Test, device: &Path, iteration: Option<u32>, reason: &str) -> (String, Record) {
    let record = Record {
        name: test.name.into(),
        outcome: Outcome::Fail,
        ids: test.ids.iter().map(|s| (*s).to_string()).collect(),
        reason: Some(reason.to_string()),
        kernel_lacks: false,
        device: Some(device.display().to_string()),
        seconds: 0.0,
        iteration,
        index: 0,
    };
    (format!("FAIL {}: {reason}\n", test.name), record)
}

/// Runs `test` on `path` here, printing its line: its record.
pub fn run_test(test: &Test, path: &Path, iteration: Option<u32>) -> Record {
    let ids: Vec<String> = test.ids.iter().map(|s| (*s).to_string()).collect();
    let ids_text = test.ids.join(", ");
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
    Record {
        name: test.name.into(),
        outcome,
        ids,
        reason,
        kernel_lacks,
        device: Some(path.display().to_string()),
        seconds,
        iteration,
        index: 0,
    }
}

/// How long one test may run under fault injection before its processes are killed (a failure
/// its own checks did not expect may leave it waiting for a process that died): six times the
/// slowest of the hostile and storm tests on a quiet debug kernel (the random fuzzer, 19.5 s).
const INJECTED_TEST_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Runs `test` on `path` under fault injection, in a process of its own (marked for failures,
/// killed after [`INJECTED_TEST_LIMIT`]), printing its line: PASS when the module stayed sound,
/// whatever the test's own checks made of the failures it met, FAIL when it did not or the test
/// overran. Its record proves no rule id: the test's own verdict was not asked for.
fn run_test_injected(test: &Test, path: &Path, iteration: Option<u32>, fi: &FailInject, devices: &[PathBuf]) -> Record {
    let start = Instant::now();
    let fail = |reason: String| {
        println!("FAIL {}: {reason}", test.name);
        (Outcome::Fail, Some(reason))
    };
    let dir = scratch_dir();
    let (outcome, reason) = match fi.before(devices) {
        Err(e) => fail(format!("before the test: {e}")),
        Ok(before) => match std::fs::create_dir_all(&dir)
            .and_then(|()| fi.start_marked(|| isolated::start(test, path, iteration, &dir, 0, run_in_this_process)))
        {
            Err(e) => fail(format!("starting its process: {e}")),
            Ok(started) => {
                let (output, own) = started.finish_within(INJECTED_TEST_LIMIT);
                let _ = std::fs::remove_dir(&dir);
                // The test's own lines, but its verdict line, which the judgement replaces.
                for line in output.lines().filter(|l| !console_verdict(l, test.name)) {
                    println!("{line}");
                }
                let own = match own.outcome {
                    Outcome::Pass => "passed".to_string(),
                    _ => format!("failed: {}", own.reason.unwrap_or_default()),
                };
                match fi.judge(before) {
                    Ok((slab, page)) => {
                        println!(
                            "PASS {} [{} %: {slab} slab and {page} page allocation failures injected; the test itself {own}]",
                            test.name, fi.percent
                        );
                        (Outcome::Pass, None)
                    }
                    Err(why) => fail(format!("under fault injection: {why}; the test itself {own}")),
                }
            }
        },
    };
    Record {
        name: test.name.into(),
        outcome,
        ids: Vec::new(),
        reason,
        kernel_lacks: false,
        device: Some(path.display().to_string()),
        seconds: start.elapsed().as_secs_f64(),
        iteration,
        index: 0,
    }
}

/// Whether `line` is test `name`'s own verdict line (`PASS name …`, `FAIL name: …`, `SKIP name: …`).
fn console_verdict(line: &str, name: &str) -> bool {
    ["PASS ", "FAIL ", "SKIP "].iter().any(|p| {
        line.strip_prefix(p)
            .is_some_and(|rest| rest.strip_prefix(name).is_some_and(|r| r.is_empty() || r.starts_with([' ', ':'])))
    })
}

/// The report of `records` (the totals printed; the run began at `start`).
fn report(mut records: Vec<Record>, unselected: &[Test], start: Instant) -> Report {
    let registry: Vec<&str> = crate::registry().iter().map(|t| t.name).collect();
    for r in &mut records {
        let at = registry.iter().position(|n| *n == r.name).unwrap_or(registry.len());
        r.index = u32::try_from(at).unwrap_or(u32::MAX);
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
    println!("suite ran {seconds:.1} s of tests in {:.1} s", start.elapsed().as_secs_f64());
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

/// The side of a test run in a process of its own (`--run-one`, [`crate::harness::isolated`]):
/// runs `test` on `device` here (its line printed as the runner prints it) and writes its
/// record to `record`.
///
/// # Errors
/// The record cannot be written.
pub fn run_in_this_process(test: &Test, device: &Path, iteration: Option<u32>, record: &Path) -> std::io::Result<()> {
    let r = run_test(test, device, iteration);
    let json = serde_json::to_string(&r).map_err(std::io::Error::other)?;
    std::fs::write(record, json)
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
            iteration: None,
            index: 0,
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

    /// A run of one test that fails in the iterations `failing` lists.
    fn once(failing: &[u32]) -> impl FnMut(u32) -> Vec<Record> + '_ {
        move |k| {
            let outcome = if failing.contains(&k) { Outcome::Fail } else { Outcome::Pass };
            vec![Record {
                name: "t".into(),
                outcome,
                ids: vec![],
                reason: None,
                device: None,
                seconds: 0.0,
                iteration: Some(k),
                kernel_lacks: false,
                index: 0,
            }]
        }
    }

    #[test]
    fn repeat_runs_every_iteration_and_counts_the_clean_ones() {
        let (records, iterations, clean) = iterate(Repeat { times: Some(5), until_fail: false }, once(&[2, 4]));
        assert_eq!((records.len(), iterations, clean), (5, 5, 3));
        let failed: Vec<_> = records.iter().filter(|r| r.outcome == Outcome::Fail).map(|r| r.iteration).collect();
        assert_eq!(failed, [Some(2), Some(4)]);
    }

    #[test]
    fn until_fail_stops_after_the_first_failing_iteration() {
        let (records, iterations, clean) = iterate(Repeat { times: Some(10), until_fail: true }, once(&[3, 4]));
        assert_eq!((records.len(), iterations, clean), (3, 3, 2));
        // Without a bound it runs until the failure.
        let (_, iterations, clean) = iterate(Repeat { times: None, until_fail: true }, once(&[7]));
        assert_eq!((iterations, clean), (7, 6));
        // A bound reached first ends it with every iteration clean.
        let (_, iterations, clean) = iterate(Repeat { times: Some(2), until_fail: true }, once(&[7]));
        assert_eq!((iterations, clean), (2, 2));
    }

    #[test]
    fn once_is_not_a_repetition() {
        assert!(!Repeat::ONCE.repeats());
        assert!(Repeat { times: Some(1), until_fail: true }.repeats());
        assert!(Repeat { times: None, until_fail: true }.repeats());
    }
}
