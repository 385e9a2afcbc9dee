//! What a quiet run prints when it fails, so the cause is on the screen without opening the
//! run directory: each failed test's line with the console output it produced, the console's
//! last lines, the last warnings and errors of each device log and QEMU's last lines.

use std::path::Path;

use crate::boot::supervise::Facts;
use crate::run_dir::RunDir;

/// Console lines shown after a failure.
const CONSOLE_TAIL: usize = 15;
/// Warning and error lines shown per device log.
const DEVICE_PROBLEMS: usize = 5;
/// QEMU log lines shown.
const QEMU_TAIL: usize = 5;

/// The last `n` lines of `path` that report a warning or an error (env_logger's ` WARN ` and
/// ` ERROR ` levels).
pub fn problems(path: &Path, n: usize) -> Vec<String> {
    let Ok(text) = std::fs::read(path) else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&text);
    let found: Vec<&str> = text.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).collect();
    found[found.len().saturating_sub(n)..].iter().map(|s| s.to_string()).collect()
}

fn block(title: String, prefix: &str, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    eprintln!("belfry: {title}");
    for line in lines {
        eprintln!("  {prefix}| {line}");
    }
}

/// Prints the failure report of a run that had `devices` devices.
pub fn failure(run: &RunDir, facts: &Facts, devices: usize) {
    for test in &facts.console.failed_tests {
        eprintln!("belfry: {}", test.line);
        for line in &test.output {
            eprintln!("  guest| {line}");
        }
    }
    let console: Vec<String> =
        facts.console.tail.iter().skip(facts.console.tail.len().saturating_sub(CONSOLE_TAIL)).cloned().collect();
    block(format!("last lines of {}:", run.console_log().display()), "guest", &console);
    for index in 0..devices {
        if facts.device_failures.iter().any(|f| f.index == index) {
            continue; // its tail is printed already
        }
        let log = run.device_log(index);
        block(format!("last warnings of {}:", log.display()), &format!("dev{index}"), &problems(&log, DEVICE_PROBLEMS));
    }
    let qemu = crate::run_dir::log_tail(&run.qemu_log(), QEMU_TAIL);
    block(format!("last lines of {}:", run.qemu_log().display()), "qemu", &qemu);
    // The failed tests once more, last: a log shown by its head and tail (CI's) still names them.
    for line in recap(&facts.console.failed_tests) {
        eprintln!("belfry: {line}");
    }
}

/// The closing recap of the failed tests: a count, then each test's result line.
fn recap(failed: &[crate::boot::console::FailedTest]) -> Vec<String> {
    if failed.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![format!("{} test(s) failed:", failed.len())];
    lines.extend(failed.iter().map(|t| format!("  {}", t.line)));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recap_names_every_failed_test_after_a_count() {
        use crate::boot::console::FailedTest;
        assert!(recap(&[]).is_empty());
        let failed = [
            FailedTest { line: "FAIL a [NF-01]: no".into(), output: vec!["noise".into()], iteration: None },
            FailedTest { line: "FAIL b: late".into(), output: vec![], iteration: None },
        ];
        assert_eq!(recap(&failed), vec!["2 test(s) failed:", "  FAIL a [NF-01]: no", "  FAIL b: late"]);
    }

    #[test]
    fn problems_are_the_last_warnings_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("device0.log");
        let lines: Vec<String> = (0..8)
            .map(|i| match i % 3 {
                0 => format!("[t INFO  belfry] fine {i}"),
                1 => format!("[t WARN  belfry] odd {i}"),
                _ => format!("[t ERROR belfry] bad {i}"),
            })
            .collect();
        std::fs::write(&log, lines.join("\n")).unwrap();
        assert_eq!(
            problems(&log, 3),
            vec!["[t WARN  belfry] odd 4", "[t ERROR belfry] bad 5", "[t WARN  belfry] odd 7"]
        );
        assert!(problems(&dir.path().join("missing"), 3).is_empty());
    }
}
