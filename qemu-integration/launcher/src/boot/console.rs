//! Console streaming and parsing: reader threads turn the guest console, QEMU's stderr and
//! each device's stderr into prefixed lines on one channel (and into their log files), and
//! [`ConsoleState`] extracts what the verdict needs from the guest console: the framed
//! `BELFRY-EXIT N` line, kernel panics, oopses, the debug kernel's detector reports, the guest scripts' `CHECK FAILED:` lines and
//! the suite's failed tests with their output (and their iteration in a repeated run, with when
//! each iteration was announced: [`crate::outcome::iterations`]); [`is_headline`] picks what a quiet run
//! shows.

use std::collections::VecDeque;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::mpsc::Sender;
use std::thread;

/// The line the initramfs `/init` prints with the status of `/belfry/run`.
pub const EXIT_MARKER: &str = "BELFRY-EXIT";
/// The prefix of a failed check printed by the guest scripts.
pub const CHECK_FAILED: &str = "CHECK FAILED:";
/// The start of a kernel panic message.
pub const PANIC_MARKER: &str = "Kernel panic - not syncing";

/// Where a streamed line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The guest's console (QEMU's first serial port).
    Guest,
    /// QEMU's own standard error.
    Qemu,
    /// The standard error of device `i`.
    Device(usize),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Guest => write!(f, "guest"),
            Source::Qemu => write!(f, "qemu"),
            Source::Device(i) => write!(f, "dev{i}"),
        }
    }
}

/// A message from a reader thread.
#[derive(Debug)]
pub enum Event {
    /// One line (without its line ending).
    Line(Source, String),
    /// The stream ended.
    Eof(Source),
}

/// Starts a thread that copies `reader` line by line into `log` and sends each line to `tx`.
pub fn stream(
    source: Source,
    reader: impl Read + Send + 'static,
    mut log: File,
    tx: Sender<Event>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut reader = BufReader::new(reader);
        let mut raw = Vec::new();
        loop {
            raw.clear();
            match reader.read_until(b'\n', &mut raw) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = clean_line(&raw);
                    // A full disk must not stop the run: the terminal still gets the line.
                    let _ = writeln!(log, "{line}");
                    if tx.send(Event::Line(source, line)).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = log.flush();
        let _ = tx.send(Event::Eof(source));
    })
}

/// Decodes one raw line: lossy UTF-8, without the line ending or carriage returns.
pub fn clean_line(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).trim_end_matches(['\n', '\r']).replace('\r', "")
}

/// A line without the kernel's `[    1.234567] ` timestamp prefix, if it has one.
fn strip_timestamp(line: &str) -> &str {
    let trimmed = line.trim_start();
    if let Some(rest) = trimmed.strip_prefix('[') {
        if let Some(end) = rest.find(']') {
            let stamp = rest[..end].trim();
            if !stamp.is_empty() && stamp.chars().all(|c| c.is_ascii_digit() || c == '.') {
                return rest[end + 1..].trim_start();
            }
        }
    }
    trimmed
}

/// What one console line means to the launcher.
#[derive(Debug, PartialEq, Eq)]
pub enum ConsoleEvent<'a> {
    /// `BELFRY-EXIT N`: the guest command finished with status N.
    Exit(i32),
    /// A kernel panic, with its message.
    Panic(&'a str),
    /// A kernel oops, BUG or WARNING: a kernel bug even if the command succeeds.
    KernelBug(&'a str),
    /// A failed check reported by a guest script, with its reason.
    CheckFailed(&'a str),
}

/// Classifies one console line.
pub fn classify(line: &str) -> Option<ConsoleEvent<'_>> {
    let text = strip_timestamp(line);
    if let Some(at) = text.find(PANIC_MARKER) {
        let message = text[at + PANIC_MARKER.len()..].trim_start_matches([':', ' ']);
        return Some(ConsoleEvent::Panic(message));
    }
    if let Some(rest) = text.strip_prefix(EXIT_MARKER) {
        // The frame is exactly `BELFRY-EXIT <decimal>`; anything else (an echoed command
        // line, a script mentioning the marker) is not an exit.
        if rest.starts_with(' ') {
            if let Ok(status) = rest.trim().parse() {
                return Some(ConsoleEvent::Exit(status));
            }
        }
        return None;
    }
    if let Some(at) = text.find(CHECK_FAILED) {
        return Some(ConsoleEvent::CheckFailed(text[at + CHECK_FAILED.len()..].trim()));
    }
    const BUG_PREFIXES: [&str; 4] = ["BUG:", "Oops:", "WARNING:", "UBSAN:"];
    if BUG_PREFIXES.iter().any(|p| text.starts_with(p))
        || text.starts_with("general protection fault")
        || text.starts_with("kernel BUG at")
        || is_debug_detector_report(text)
        || is_our_deprecated_api_use(text)
    {
        return Some(ConsoleEvent::KernelBug(text));
    }
    None
}

/// Whether `text` starts a report of one of the debug kernel's detectors whose first line is
/// not a `BUG:` or `WARNING:`: a hung task (`INFO: task … blocked for more than N seconds`), a
/// soft lockup (`watchdog: BUG: soft lockup - CPU#N stuck`), a hard lockup (`watchdog: CPUn:
/// Watchdog detected hard LOCKUP on cpu N`), an RCU stall (`rcu: INFO: rcu_preempt detected
/// stalls`), a write to a freed page (`pagealloc: memory corruption`, page poisoning) and a
/// device released with DMA-API mappings or allocations still held (`DMA-API: … device driver
/// has pending DMA allocations`; its other misuse reports are `WARNING:`s).
fn is_debug_detector_report(text: &str) -> bool {
    text.starts_with("INFO: task ")
        || text.contains("BUG: soft lockup")
        || text.contains("Watchdog detected hard LOCKUP")
        || (text.contains("INFO: ")
            && (text.contains(" detected stalls") || text.contains(" detected expedited stalls")))
        || text.starts_with("pagealloc: memory corruption")
        || text.starts_with("pagealloc: single bit error")
        || (text.contains("DMA-API: ") && text.contains("device driver"))
}

/// Whether `text` is the kernel's one-time warning that the module used a deprecated kernel
/// interface (a work item of ours queued on the deprecated `system_wq`): a `pr_warn_once`, not a
/// `WARNING:`, but a defect of the module all the same. Other parts of the kernel may print it
/// for their own work; only lines naming one of the module's symbols count.
fn is_our_deprecated_api_use(text: &str) -> bool {
    text.contains("enqueued on deprecated workqueue") && text.contains("belfry")
}

/// Whether `line` is the kernel's report that it starts the initramfs's init (`Run /init as
/// init process`): the kernel's own boot is over, the guest's scripts come next.
pub fn is_init_start(line: &str) -> bool {
    line.starts_with('[') && line.contains("] Run ") && line.ends_with(" as init process")
}

/// Whether `line` is one of the in-guest suite's result lines (`PASS name [ids]`,
/// `FAIL name: reason`, `SKIP name: reason`).
pub fn is_test_line(line: &str) -> bool {
    ["PASS ", "FAIL ", "SKIP "].iter().any(|p| line.starts_with(p))
}

/// Whether `line` is a failed test's line.
fn is_failed_test_line(line: &str) -> bool {
    line.starts_with("FAIL ")
}

/// Whether a console line is shown on the terminal by a quiet run: the suite's result lines,
/// its totals and coverage line, failed checks, panics and kernel bug reports. Everything else
/// stays in `console.log`.
pub fn is_headline(line: &str) -> bool {
    if is_test_line(line)
        || line.starts_with("coverage: ")
        || line.starts_with("coverage (")
        || line.starts_with(crate::outcome::iterations::SUMMARY)
    {
        return true;
    }
    // The suite's totals: `N passed, M failed[, K skipped]`.
    if let Some((count, rest)) = line.split_once(' ') {
        if count.chars().all(|c| c.is_ascii_digit()) && !count.is_empty() && rest.starts_with("passed, ") {
            return true;
        }
    }
    classify(line).is_some_and(|e| !matches!(e, ConsoleEvent::Exit(_)))
}

/// How many recent console lines to keep for reports.
const TAIL_LINES: usize = 30;
/// How many lines before a failed test's line are kept as its output.
const TEST_OUTPUT_LINES: usize = 40;

/// A failed test of the in-guest suite and what the console showed while it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedTest {
    /// Its `FAIL name: reason` line.
    pub line: String,
    /// The console lines since the previous test's result line (at most the last 40).
    pub output: Vec<String>,
    /// The iteration it failed in, in a repeated run (`conformance --repeat`).
    pub iteration: Option<u32>,
}

/// What the guest console said so far.
#[derive(Debug, Default)]
pub struct ConsoleState {
    /// The status from the `BELFRY-EXIT` line.
    pub exit: Option<i32>,
    /// The first kernel panic message.
    pub panic: Option<String>,
    /// Kernel oops, BUG and WARNING lines.
    pub kernel_bugs: Vec<String>,
    /// Reasons of the guest scripts' failed checks, in order.
    pub check_failures: Vec<String>,
    /// The last lines, for reports.
    pub tail: VecDeque<String>,
    /// The suite's failed tests with their output.
    pub failed_tests: Vec<FailedTest>,
    /// When each iteration of a repeated run was announced (host `CLOCK_MONOTONIC`).
    pub iterations: crate::outcome::iterations::Marks,
    /// Console lines since the last test result line.
    since_test: VecDeque<String>,
}

impl ConsoleState {
    /// The last line that is not blank.
    pub fn last_line(&self) -> Option<String> {
        self.tail.iter().rev().find(|l| !l.trim().is_empty()).cloned()
    }

    /// Takes one console line into account.
    pub fn feed(&mut self, line: &str) {
        self.iterations.feed(line, crate::sys::monotonic_ns());
        match classify(line) {
            Some(ConsoleEvent::Exit(status)) => {
                self.exit.get_or_insert(status);
            }
            Some(ConsoleEvent::Panic(message)) => {
                self.panic.get_or_insert_with(|| message.to_string());
            }
            Some(ConsoleEvent::KernelBug(text)) => self.kernel_bugs.push(text.to_string()),
            Some(ConsoleEvent::CheckFailed(reason)) => self.check_failures.push(reason.to_string()),
            None => {}
        }
        if is_test_line(line) {
            if is_failed_test_line(line) {
                let output = self.since_test.drain(..).collect();
                let iteration = self.iterations.last();
                self.failed_tests.push(FailedTest { line: line.to_string(), output, iteration });
            }
            self.since_test.clear();
        } else {
            if self.since_test.len() == TEST_OUTPUT_LINES {
                self.since_test.pop_front();
            }
            self.since_test.push_back(line.to_string());
        }
        if self.tail.len() == TAIL_LINES {
            self.tail.pop_front();
        }
        self.tail.push_back(line.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_line_is_parsed_with_or_without_timestamp() {
        assert_eq!(classify("BELFRY-EXIT 0"), Some(ConsoleEvent::Exit(0)));
        assert_eq!(classify("BELFRY-EXIT 3\r"), Some(ConsoleEvent::Exit(3)));
        assert_eq!(classify("  BELFRY-EXIT 127  "), Some(ConsoleEvent::Exit(127)));
        assert_eq!(classify("[    2.345678] BELFRY-EXIT 1"), Some(ConsoleEvent::Exit(1)));
    }

    #[test]
    fn lookalike_exit_lines_are_ignored() {
        assert_eq!(classify("echo BELFRY-EXIT 0"), None);
        assert_eq!(classify("BELFRY-EXIT $status"), None);
        assert_eq!(classify("BELFRY-EXIT"), None);
        assert_eq!(classify("BELFRY-EXIT 1 2"), None);
    }

    #[test]
    fn panic_is_detected_with_its_message() {
        let line = "[    1.000000] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)";
        assert_eq!(classify(line), Some(ConsoleEvent::Panic("VFS: Unable to mount root fs on unknown-block(0,0)")));
        assert_eq!(
            classify("---[ end Kernel panic - not syncing: Attempted to kill init! ]---"),
            Some(ConsoleEvent::Panic("Attempted to kill init! ]---"))
        );
    }

    #[test]
    fn kernel_bugs_and_failed_checks_are_detected() {
        assert_eq!(
            classify("[    3.1] BUG: sleeping function called from invalid context"),
            Some(ConsoleEvent::KernelBug("BUG: sleeping function called from invalid context"))
        );
        assert!(matches!(classify("WARNING: CPU: 0 PID: 1 at drivers/x.c:1"), Some(ConsoleEvent::KernelBug(_))));
        let ours = "workqueue: work func _RNvXs8_NtCs1_6kernel9workqueue_6belfry4hang8WatchdogE3run [belfry] enqueued on deprecated workqueue. Use system_{percpu|dfl}_wq instead.";
        assert!(matches!(classify(ours), Some(ConsoleEvent::KernelBug(_))));
        let theirs =
            "workqueue: work func vmstat_update enqueued on deprecated workqueue. Use system_{percpu|dfl}_wq instead.";
        assert_eq!(classify(theirs), None);
        assert_eq!(
            classify("CHECK FAILED: 0000:00:03.0 is not bound"),
            Some(ConsoleEvent::CheckFailed("0000:00:03.0 is not bound"))
        );
        assert_eq!(classify("belfry 0000:00:03.0: self-test ok"), None);
        assert_eq!(classify("ACPI: no BUG: here"), None);
    }

    #[test]
    fn every_debug_detectors_report_is_a_kernel_bug() {
        for line in [
            "[  120.5] INFO: task belfry-conforma:311 blocked for more than 30 seconds.",
            "[   61.0] watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [belfry-conforma:311]",
            "[   61.0] watchdog: CPU0: Watchdog detected hard LOCKUP on cpu 1",
            "[   90.1] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:",
            "[   90.1] rcu: INFO: rcu_preempt detected expedited stalls on CPUs/tasks: { 1-... }",
            "[    9.9] pagealloc: memory corruption",
            "[    9.9] pagealloc: single bit error",
            "[    9.9] UBSAN: array-index-out-of-bounds in drivers/pci/msi/msi.c:100:5",
            "[    9.9] DMA-API: belfry 0000:00:03.0: device driver tries to free DMA memory it has not allocated",
            "[    9.9] belfry 0000:00:03.0: DMA-API: device driver has pending DMA allocations while released from device [count=2]",
            "[    9.9] BUG: KASAN: slab-use-after-free in belfry_release+0x10/0x20 [belfry]",
        ] {
            assert!(matches!(classify(line), Some(ConsoleEvent::KernelBug(_))), "{line}");
        }
        for line in [
            "[    0.5] DMA-API: preallocated 65536 debug entries",
            "[    0.5] DMA-API: debugging enabled by kernel config",
            "[    0.5] mem auto-init: CONFIG_PAGE_POISONING is on, will take precedence over init_on_alloc and init_on_free",
            "[    0.5] NMI watchdog: Perf NMI watchdog permanently disabled",
            "[   30.0] FAULT_INJECTION: forcing a failure.",
            "[   30.0] name failslab, interval 1, probability 1, space 0, times -1",
            "[   30.0] belfry-conforma: page allocation failure: order:0, mode:0xcc0(GFP_KERNEL), nodemask=(null)",
        ] {
            assert_eq!(classify(line), None, "{line}");
        }
    }

    #[test]
    fn state_keeps_the_first_exit_and_panic_and_a_bounded_tail() {
        let mut state = ConsoleState::default();
        state.feed("CHECK FAILED: one");
        state.feed("BELFRY-EXIT 2");
        state.feed("BELFRY-EXIT 0");
        state.feed("Kernel panic - not syncing: first");
        state.feed("Kernel panic - not syncing: second");
        for i in 0..100 {
            state.feed(&format!("line {i}"));
        }
        assert_eq!(state.exit, Some(2));
        assert_eq!(state.panic.as_deref(), Some("first"));
        assert_eq!(state.check_failures, vec!["one".to_string()]);
        assert_eq!(state.tail.len(), TAIL_LINES);
        assert_eq!(state.tail.back().map(String::as_str), Some("line 99"));
    }

    #[test]
    fn headlines_are_results_totals_and_failures() {
        for line in [
            "PASS doorbell_rings [DB-01]",
            "FAIL fence_waits: timed out",
            "SKIP global_model: needs a device with --doorbell-model global",
            "86 passed, 0 failed",
            "80 passed, 1 failed, 5 skipped",
            "coverage: 150 of 200 rule ids proven (120 in the guest, 30 by host tests only); 50 allowed unproven; 0 gaps",
            "coverage (this run's passing guest tests; host tests as cited): 181 of 197 rule ids proven (155 in the guest, 26 by host tests only); 8 device side only (…); 8 allowed unproven; 0 gaps",
            "coverage (this run's passing guest tests; host tests as cited; partial: a filtered run, 104 more ids are proven by tests it did not select): 63 of 197 rule ids proven (9 in the guest, 54 by host tests only); 16 device side only (…); 14 allowed unproven; 0 gaps",
            "CHECK FAILED: 0000:00:03.0 is not bound",
            "[    1.0] Kernel panic - not syncing: x",
            "[    2.0] BUG: unable to handle page fault",
        ] {
            assert!(is_headline(line), "{line}");
        }
        for line in [
            "BELFRY-EXIT 0",
            "belfry-guest: insmod /belfry/belfry.ko",
            "[    1.0] belfry 0000:00:03.0: self-test ok on 4/4 vectors",
            "passed, 3 failed",
            "coverage.txt written",
            "x passed, 0 failed",
            "PASSED",
        ] {
            assert!(!is_headline(line), "{line}");
        }
    }

    #[test]
    fn a_failed_test_keeps_the_lines_printed_while_it_ran() {
        let mut state = ConsoleState::default();
        for line in ["PASS a [X-1]", "noise of b", "more of b", "FAIL b: wrong value", "PASS c [X-2]", "FAIL d: no"] {
            state.feed(line);
        }
        assert_eq!(
            state.failed_tests,
            vec![
                FailedTest {
                    line: "FAIL b: wrong value".into(),
                    output: vec!["noise of b".into(), "more of b".into()],
                    iteration: None,
                },
                FailedTest { line: "FAIL d: no".into(), output: vec![], iteration: None },
            ]
        );
        for i in 0..100 {
            state.feed(&format!("line {i}"));
        }
        state.feed("FAIL e: late");
        assert_eq!(state.failed_tests[2].output.len(), TEST_OUTPUT_LINES);
        assert_eq!(state.failed_tests[2].output.last().map(String::as_str), Some("line 99"));
    }

    #[test]
    fn a_repeated_runs_failures_know_their_iteration() {
        let mut state = ConsoleState::default();
        for line in ["ITERATION 1/3", "PASS a [X-1]", "ITERATION 2/3", "FAIL a: late", "ITERATION 3/3", "PASS a [X-1]"]
        {
            state.feed(line);
        }
        let failed: Vec<_> = state.failed_tests.iter().map(|f| (f.line.as_str(), f.iteration)).collect();
        assert_eq!(failed, [("FAIL a: late", Some(2))]);
        assert_eq!(state.iterations.last(), Some(3));
        assert!(state.iterations.window(2).is_some_and(|(from, to)| from < to));
        assert!(is_headline("repeat: 2 of 3 iterations passed"));
    }

    #[test]
    fn the_start_of_init_ends_the_kernels_boot() {
        assert!(is_init_start("[   10.130288] Run /init as init process"));
        assert!(!is_init_start("[    1.013559] smpboot: Total of 2 processors activated (7356.46 BogoMIPS)"));
        assert!(!is_init_start("belfry-guest: Run /init as init process"));
    }

    #[test]
    fn raw_lines_are_cleaned() {
        assert_eq!(clean_line(b"abc\r\n"), "abc");
        assert_eq!(clean_line(b"a\rb\n"), "ab");
        assert_eq!(clean_line(b"\xffx"), "\u{fffd}x");
    }
}
