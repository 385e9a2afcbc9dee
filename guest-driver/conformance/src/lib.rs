//! The in-guest conformance suite: tests that prove the rules of `../shared/design/RULES.md`
//! through the real module and device.
//!
//! Code map: [`registry`] (every test: name, proven rule ids, the device configuration it
//! needs), [`run`] (filtering, device selection from `QUERY_CAPS`, one line per test, the
//! JSON results), [`coverage`] (rule ids proven in the guest, by host tests, or allowed to stay
//! unproven, and the gaps), [`raw`] (raw ioctls on a file of its own, for what the library
//! refuses to do: foreign handles, forbidden submissions), [`proc`] (forked processes),
//! [`channel`] (a socket pair passing messages and file descriptors between them), `tests.rs`
//! (the tests), `capabilities.rs` (the native-fence switch, re-binding a device),
//! `lifecycle.rs` (doorbell disconnection on request, process termination, ring allocations),
//! `fencelog.rs` (fence logs, interrupt paths, timeline), `fences.rs` (shared fences,
//! pollable waits, native-fence storage rules), `monitored.rs` (monitored fences as GPU waits
//! held by the module, the 32-bit mode), `umdlogs.rs` (the fence-log slots the library
//! assigns), `races.rs` (the CPU side of the GPU/CPU fence races, on the device with
//! test-only MonitoredValue-update faults), `sleeping.rs` (CPU waits sleep until an
//! interrupt, on the device whose fence interrupts are suppressed) and `optfence.rs` (the
//! optimized DEFAULT fence: MonitoredValue in device memory).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use belfry_umd::{Caps, Device};
use serde::Serialize;

/// The registry entry of test function `$f`, which needs a device of configuration
/// `Needs::$needs` and proves the rule ids listed (each test file's `all()` lists its tests).
macro_rules! test_entry {
    ($f:ident, $needs:ident, [$($id:literal),*]) => {
        $crate::Test { name: stringify!($f), ids: &[$($id),*], needs: $crate::Needs::$needs, run: $f }
    };
}

mod capabilities;
pub mod channel;
pub mod coverage;
mod fencelog;
mod fences;
mod lifecycle;
mod monitored;
mod optfence;
pub mod proc;
mod races;
pub mod raw;
mod sleeping;
mod tests;
mod umdlogs;

/// Error of a test: its reason.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// Result of a test.
pub type TestResult = Result<(), Error>;

/// Fails the test with a formatted reason unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+).into());
        }
    };
}

/// The device configuration a test needs; the runner picks the attached device whose
/// capabilities match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// A dedicated-model device with at least 4 physical doorbells (the default is 16).
    Default,
    /// A dedicated-model device with exactly 2 physical doorbells (`--doorbells 2`).
    TwoDoorbells,
    /// A global-model device (`--doorbell-model global`).
    GlobalDoorbell,
    /// A device without 64-bit atomics: monitored fences in 32-bit wraparound mode, no native
    /// fences (`--no-64bit-atomics`).
    No64BitAtomics,
    /// A device posting the optimized per-queue native-fence records (`--interrupt-form per-queue`).
    PerQueueInterrupts,
    /// A device posting NULL native-fence records: scan all waits (`--interrupt-form scan-all`).
    ScanAllInterrupts,
    /// A default device with the test-only MonitoredValue-update faults `slow-monitored-updates`,
    /// `no-catch-up-record` and `spurious-fence-records` (its `TEST_INJECTIONS` register).
    RacyMonitoredUpdates,
    /// A default device with the test-only fault `no-fence-interrupts` alone: fence-signaled
    /// interrupt records are dropped (its `TEST_INJECTIONS` register).
    NoFenceInterrupts,
}

impl Needs {
    /// The device flags that give this configuration.
    pub fn flags(self) -> &'static str {
        match self {
            Needs::Default => "default flags",
            Needs::TwoDoorbells => "--doorbells 2",
            Needs::GlobalDoorbell => "--doorbell-model global",
            Needs::No64BitAtomics => "--no-64bit-atomics",
            Needs::PerQueueInterrupts => "--interrupt-form per-queue",
            Needs::ScanAllInterrupts => "--interrupt-form scan-all",
            Needs::RacyMonitoredUpdates => {
                "--inject slow-monitored-updates --inject no-catch-up-record --inject spurious-fence-records"
            }
            Needs::NoFenceInterrupts => "--inject no-fence-interrupts",
        }
    }

    /// Whether a device with `caps` offers this configuration. A device started with test-only
    /// faults serves only the tests that need exactly those.
    pub fn matches(self, caps: &Caps) -> bool {
        let injected = caps.test_injections();
        if self == Needs::RacyMonitoredUpdates {
            let racy = injected.slow_monitored_updates()
                && injected.no_catch_up_record()
                && injected.spurious_fence_records()
                && !injected.skip_monitored_barrier();
            return racy && Needs::Default.matches_bits(caps);
        }
        if self == Needs::NoFenceInterrupts {
            let only = belfry_abi::regs::TEST_INJECTIONS::default().with_no_fence_interrupts(true);
            return injected == only && Needs::Default.matches_bits(caps);
        }
        injected.0 == 0 && self.matches_bits(caps)
    }

    /// [`Self::matches`] on the capability bits and geometry alone.
    fn matches_bits(self, caps: &Caps) -> bool {
        let bits = caps.bits();
        let usm = bits.user_mode_submission();
        // The default device: 64-bit atomics and exact (fence-handle) interrupt records.
        let default_fences = bits.native_fence() && !bits.no_64bit_atomics() && bits.fence_handle_records();
        match self {
            Needs::Default => {
                usm && default_fences
                    && bits.dedicated_doorbells()
                    && !bits.global_doorbell()
                    && caps.doorbell_count() >= 4
            }
            Needs::TwoDoorbells => {
                usm && bits.dedicated_doorbells() && !bits.global_doorbell() && caps.doorbell_count() == 2
            }
            Needs::GlobalDoorbell => usm && bits.global_doorbell(),
            Needs::No64BitAtomics => bits.no_64bit_atomics(),
            Needs::PerQueueInterrupts => bits.native_fence() && bits.optimized_interrupt(),
            Needs::ScanAllInterrupts => {
                bits.native_fence() && !bits.fence_handle_records() && !bits.optimized_interrupt()
            }
            Needs::RacyMonitoredUpdates | Needs::NoFenceInterrupts => false,
        }
    }
}

/// One conformance test.
#[derive(Clone, Copy, Debug)]
pub struct Test {
    /// What it proves, as a sentence in snake case.
    pub name: &'static str,
    /// Rule ids it proves (each would fail the test if its behaviour were removed).
    pub ids: &'static [&'static str],
    /// The device configuration it needs.
    pub needs: Needs,
    /// The test, given the device path.
    pub run: fn(&Path) -> TestResult,
}

/// Every test, in the order they run.
pub fn registry() -> Vec<Test> {
    let mut all = tests::all();
    all.extend(capabilities::all());
    all.extend(lifecycle::all());
    all.extend(fencelog::all());
    all.extend(fences::all());
    all.extend(monitored::all());
    all.extend(umdlogs::all());
    all.extend(races::all());
    all.extend(sleeping::all());
    all.extend(optfence::all());
    all
}

/// Whether `test` is selected by `filters` (empty: all; else any filter is a substring of the
/// name or equals one of its rule ids, case-insensitively).
pub fn selected(test: &Test, filters: &[String]) -> bool {
    filters.is_empty()
        || filters.iter().any(|f| {
            let f = f.to_ascii_lowercase();
            test.name.contains(&f) || test.ids.iter().any(|id| id.eq_ignore_ascii_case(&f))
        })
}

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

/// The attached devices and their capabilities (`/dev/belfry0..7` that open).
pub fn probe_devices(paths: &[PathBuf]) -> Vec<(PathBuf, Caps)> {
    let candidates: Vec<PathBuf> = if paths.is_empty() {
        (0..8).map(|n| PathBuf::from(format!("/dev/belfry{n}"))).collect()
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

/// Runs the selected tests, printing one line each and the totals.
pub fn run(tests: &[Test], devices: &[(PathBuf, Caps)]) -> Report {
    let mut records = Vec::new();
    for test in tests {
        let ids: Vec<String> = test.ids.iter().map(|s| (*s).to_string()).collect();
        let ids_text = test.ids.join(", ");
        let Some((path, _)) = devices.iter().find(|(_, caps)| test.needs.matches(caps)) else {
            let reason = format!("needs a device with {}", test.needs.flags());
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
    let coverage = coverage::report(guest);
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

/// Fails unless `r` failed with `errno` (an ioctl's errno through the library).
pub fn expect_errno<T>(r: belfry_umd::Result<T>, errno: i32, what: &str) -> TestResult {
    match r {
        Err(e) if e.errno() == Some(errno) => Ok(()),
        Err(e) => Err(format!("{what}: {}, expected {}", chain(&e), raw::errno_name(errno)).into()),
        Ok(_) => Err(format!("{what}: succeeded, expected {}", raw::errno_name(errno)).into()),
    }
}

/// Polls `cond` every millisecond until it holds or `timeout` passes; whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
