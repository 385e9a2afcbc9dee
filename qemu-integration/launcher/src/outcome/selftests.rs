//! `cargo belfry selftests`' results: each VFIO selftest's KTAP output, framed on the results
//! channel by `selftests.sh` (`BELFRY-SELFTEST-BEGIN NAME` … `BELFRY-SELFTEST-END NAME
//! STATUS`), becomes one subtest of `selftests.ktap` in the run directory, and its cases are
//! counted (ok, not ok, skipped with the test's own reasons).

use std::fmt::Write as _;
use std::path::Path;

/// The run directory's file of the selftests' KTAP.
pub const KTAP_FILE: &str = "selftests.ktap";

/// How `selftests.sh` reports a case it did not run, with the reason (a KTAP diagnostic line).
const NOT_RUN: &str = "# BELFRY-SKIP ";

/// One selftest binary's run.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Selftest {
    /// The binary's name.
    pub name: String,
    /// Its output, line by line.
    pub lines: Vec<String>,
    /// Its exit status (`None`: the output ended before the binary did).
    pub status: Option<i32>,
}

/// A selftest's cases by result.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Cases reported `ok` (not skipped).
    pub ok: usize,
    /// Cases reported `not ok`.
    pub not_ok: usize,
    /// Cases skipped, with the reason each gave (`case: reason`).
    pub skipped: Vec<String>,
}

impl Selftest {
    /// Its cases by result: the top-level `ok N name [# SKIP reason]` / `not ok N name` lines,
    /// and the cases `selftests.sh` did not run (`# BELFRY-SKIP case: reason`).
    pub fn counts(&self) -> Counts {
        let mut counts = Counts::default();
        for line in &self.lines {
            if let Some(skipped) = line.strip_prefix(NOT_RUN) {
                counts.skipped.push(skipped.trim().to_string());
                continue;
            }
            let (passed, rest) = if let Some(rest) = line.strip_prefix("ok ") {
                (true, rest)
            } else if let Some(rest) = line.strip_prefix("not ok ") {
                (false, rest)
            } else {
                continue;
            };
            let case = rest.split_once(' ').map_or("", |(_, case)| case);
            match case.split_once("# SKIP") {
                Some((case, reason)) => counts.skipped.push(format!("{}: {}", case.trim(), reason.trim())),
                None if passed => counts.ok += 1,
                None => counts.not_ok += 1,
            }
        }
        counts
    }

    /// Whether the binary exited 0 (kselftest's "skipped" exit, 4, included) with no case failed.
    pub fn passed(&self) -> bool {
        matches!(self.status, Some(0 | 4)) && self.counts().not_ok == 0
    }
}

/// The selftests framed in the results channel's `text`, in order.
pub fn parse(text: &str) -> Vec<Selftest> {
    let mut tests = Vec::new();
    let mut current: Option<Selftest> = None;
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(name) = line.strip_prefix("BELFRY-SELFTEST-BEGIN ") {
            tests.extend(current.take());
            current = Some(Selftest { name: name.trim().to_string(), ..Selftest::default() });
        } else if let Some(end) = line.strip_prefix("BELFRY-SELFTEST-END ") {
            if let Some(mut test) = current.take() {
                test.status = end.rsplit_once(' ').and_then(|(_, status)| status.trim().parse().ok());
                tests.push(test);
            }
        } else if let Some(test) = current.as_mut() {
            test.lines.push(line.to_string());
        }
    }
    tests.extend(current);
    tests
}

/// The KTAP document of `tests`: each selftest a subtest, its output indented.
pub fn ktap(tests: &[Selftest]) -> String {
    let mut out = format!("KTAP version 1\n1..{}\n", tests.len());
    for (index, test) in tests.iter().enumerate() {
        for line in &test.lines {
            let _ = writeln!(out, "    {line}");
        }
        let status = match test.status {
            Some(status) => format!("exit status {status}"),
            None => "output ended before the test did".into(),
        };
        let verdict = if test.passed() { "ok" } else { "not ok" };
        // kselftest's exit status 4: the whole test skipped.
        let directive = match (test.status, test.counts().skipped.first()) {
            (Some(4), Some(reason)) => format!("SKIP {reason}; {status}"),
            _ => status,
        };
        let _ = writeln!(out, "{verdict} {} {} # {directive}", index + 1, test.name);
    }
    out
}

/// One line per selftest: its counts and skip reasons.
pub fn summary(tests: &[Selftest]) -> Vec<String> {
    tests
        .iter()
        .map(|test| {
            let c = test.counts();
            let mut line =
                format!("selftest {}: {} ok, {} not ok, {} skipped", test.name, c.ok, c.not_ok, c.skipped.len());
            if !c.skipped.is_empty() {
                let _ = write!(line, " ({})", c.skipped.join("; "));
            }
            if test.status.is_none() {
                line.push_str("; its output ended before the test did");
            }
            line
        })
        .collect()
}

/// Saves `selftests.ktap` in `dir` from the results channel's `text` and returns the lines
/// to tell (one per selftest, or why there are none).
pub fn save(text: &str, dir: &Path) -> Vec<String> {
    let tests = parse(text);
    if tests.is_empty() {
        return vec!["selftests: none ran (no BELFRY-SELFTEST-BEGIN on the results channel)".into()];
    }
    let mut lines = summary(&tests);
    let path = dir.join(KTAP_FILE);
    match std::fs::write(&path, ktap(&tests)) {
        Ok(()) => lines.push(format!("selftests' KTAP: {}", path.display())),
        Err(e) => lines.push(format!("{} not written: {e}", path.display())),
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHANNEL: &str = "noise\n\
BELFRY-SELFTEST-BEGIN vfio_pci_device_test\n\
TAP version 13\n\
1..3\n\
# Starting 3 tests from 2 test cases.\n\
ok 1 vfio_pci_device_test.config_space_read_write\n\
not ok 2 vfio_pci_device_test.dma.mmap\n\
ok 3 vfio_pci_device_test.msix # SKIP MSI-X not supported\n\
# Totals: pass:1 fail:1 xfail:0 xpass:0 skip:1 error:0\n\
BELFRY-SELFTEST-END vfio_pci_device_test 1\n\
BELFRY-SELFTEST-BEGIN vfio_dma_mapping_test\n\
# BELFRY-SKIP vfio_dma_mapping_test.iommufd: no IOMMUFD\n\
ok 1 vfio_dma_mapping_test.a\n\
BELFRY-SELFTEST-END vfio_dma_mapping_test 0\n\
BELFRY-SELFTEST-BEGIN vfio_iommufd_setup_test\n\
ok 1 vfio_iommufd_setup_test.a\n\
BELFRY-SELFTEST-BEGIN vfio_pci_driver_test\n\
# BELFRY-SKIP vfio_pci_driver_test: no plugin\n\
BELFRY-SELFTEST-END vfio_pci_driver_test 4\n";

    #[test]
    fn each_selftest_is_counted_with_its_skip_reasons() {
        let tests = parse(CHANNEL);
        assert_eq!(tests.len(), 4);
        assert_eq!(tests[0].status, Some(1));
        assert_eq!(
            tests[0].counts(),
            Counts { ok: 1, not_ok: 1, skipped: vec!["vfio_pci_device_test.msix: MSI-X not supported".into()] }
        );
        assert!(!tests[0].passed());
        assert!(tests[1].passed());
        assert_eq!(
            tests[1].counts(),
            Counts { ok: 1, not_ok: 0, skipped: vec!["vfio_dma_mapping_test.iommufd: no IOMMUFD".into()] }
        );
        assert_eq!(tests[2].status, None, "cut off: no end line");
        assert!(!tests[2].passed());
        let lines = summary(&tests);
        assert_eq!(
            lines[0],
            "selftest vfio_pci_device_test: 1 ok, 1 not ok, 1 skipped (vfio_pci_device_test.msix: MSI-X not supported)"
        );
        assert!(lines[2].ends_with("its output ended before the test did"));
    }

    #[test]
    fn the_ktap_nests_each_selftest_as_a_subtest() {
        let ktap = ktap(&parse(CHANNEL));
        assert!(ktap.starts_with("KTAP version 1\n1..4\n    TAP version 13\n"));
        assert!(ktap.contains("    not ok 2 vfio_pci_device_test.dma.mmap\n"));
        assert!(ktap.contains("\nnot ok 1 vfio_pci_device_test # exit status 1\n"));
        assert!(ktap.contains("\nok 2 vfio_dma_mapping_test # exit status 0\n"));
        assert!(ktap.contains("\nnot ok 3 vfio_iommufd_setup_test # output ended before the test did\n"));
        assert!(ktap.ends_with("\nok 4 vfio_pci_driver_test # SKIP vfio_pci_driver_test: no plugin; exit status 4\n"));
        assert!(!ktap.contains("noise"));
    }
}
