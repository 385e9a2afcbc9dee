//! Guest-boot tests: run the real launcher binary, which builds what is stale and boots a TCG
//! guest with Belfry devices. Each boot takes seconds once the caches exist (the first run
//! may build the guest kernel: ~10 min). Ignored unless asked for
//! (`cargo test -p belfry-launcher --test guest -- --ignored`; `ci/test` does), so a plain
//! `cargo test` shows them as ignored, not as passed. Under `cargo test` the boots of this
//! binary run one at a time; `ci/test` runs them through nextest, two at a time, each test in
//! its own process.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Instant;

/// One boot at a time within this process (`cargo test`): they share two cores.
static BOOTS: Mutex<()> = Mutex::new(());

/// What a launcher run printed and how it ended.
struct Run {
    output: Output,
    stderr: String,
    run_dir: PathBuf,
}

impl Run {
    fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    /// The launcher's last line: the verdict.
    fn last_line(&self) -> &str {
        self.stderr.lines().last().unwrap_or("")
    }
}

fn launcher(args: &[&str]) -> Run {
    let _one_at_a_time = BOOTS.lock().unwrap_or_else(|e| e.into_inner());
    let start = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_belfry-launcher")).args(args).output().expect("run belfry-launcher");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let run_dir =
        stderr.lines().find_map(|l| l.strip_prefix("belfry: run directory: ")).map(PathBuf::from).unwrap_or_default();
    let guest_time = stderr.lines().find(|l| l.starts_with("belfry: guest ran")).unwrap_or("belfry: guest did not run");
    println!(
        "launcher {args:?}: {:?} after {:.1} s ({guest_time})",
        output.status.code(),
        start.elapsed().as_secs_f64()
    );
    let run = Run { output, stderr, run_dir };
    let leftovers = processes_mentioning(&run.run_dir);
    if !leftovers.is_empty() || run.run_dir.as_os_str().is_empty() {
        print!("--- stdout\n{stdout}--- stderr\n{}", run.stderr);
    }
    assert!(leftovers.is_empty(), "processes of the run left behind: {leftovers:?}");
    run
}

/// Processes whose command line names a path inside `dir` (the run's sockets and files are in
/// it). The trailing `/` keeps another run's directory out: runs started in the same second are
/// `<stamp>-conformance` and `<stamp>-conformance.2`, and nextest runs two tests at once.
fn processes_mentioning(dir: &std::path::Path) -> Vec<String> {
    if dir.as_os_str().is_empty() {
        return Vec::new();
    }
    let needle = format!("{}/", dir.to_string_lossy().trim_end_matches('/'));
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) {
            found.push(format!("{}: {cmdline}", name.to_string_lossy()));
        }
    }
    found
}

fn show_failure(run: &Run) -> String {
    format!("exit {:?}, last line: {}\n--- stderr\n{}", run.code(), run.last_line(), run.stderr)
}

#[test]
#[ignore = "boots a TCG guest: run with --ignored"]
fn conformance_with_one_device_passes() {
    let run = launcher(&["conformance", "--devices", "1", "--filter", "CAP-06", "--timeout", "240"]);
    assert_eq!(run.code(), Some(0), "{}", show_failure(&run));
    assert!(run.last_line().contains("PASSED"), "{}", show_failure(&run));
    assert!(run.stderr.contains("lspci listing matches"), "{}", show_failure(&run));
    for file in ["console.log", "device0.log", "results.txt", "summary.txt"] {
        assert!(run.run_dir.join(file).exists(), "{file} missing");
    }
}

#[test]
#[ignore = "boots a TCG guest: run with --ignored"]
fn bad_identity_fails_and_says_so() {
    let run = launcher(&["conformance", "--timeout", "240", "--device-flags", "0=--inject bad-identity"]);
    assert_ne!(run.code(), Some(0), "{}", show_failure(&run));
    assert!(run.last_line().contains("FAILED"), "{}", show_failure(&run));
    assert!(run.last_line().contains("identity"), "{}", show_failure(&run));
}

#[test]
#[ignore = "boots a TCG guest: run with --ignored"]
fn missing_self_test_interrupt_fails_and_says_so() {
    let run = launcher(&["conformance", "--timeout", "240", "--device-flags", "0=--inject no-interrupts"]);
    assert_ne!(run.code(), Some(0), "{}", show_failure(&run));
    let last = run.last_line();
    assert!(last.contains("self-test") && last.contains("interrupt"), "{}", show_failure(&run));
}

#[test]
#[ignore = "boots a TCG guest: run with --ignored"]
fn guest_panic_fails_and_says_so() {
    // The initramfs has busybox's /sbin/init, which the kernel falls back to when rdinit= is
    // missing: init= must be missing too for "Requested init ... failed" to panic.
    let run =
        launcher(&["conformance", "--timeout", "240", "--kernel-append", "rdinit=/no-such-init init=/no-such-init"]);
    assert_ne!(run.code(), Some(0), "{}", show_failure(&run));
    assert!(run.last_line().contains("kernel panic"), "{}", show_failure(&run));
}

#[test]
#[ignore = "boots a TCG guest: run with --ignored"]
fn a_guest_out_of_time_leaves_its_backtraces() {
    // The limit counts from QEMU's start: 30 s leaves a boot on a loaded host (ci/test runs
    // this beside the debug kernel's suite) time to reach the command.
    let run =
        launcher(&["exec", "--no-module", "--timeout", "30", "--", "sh", "-c", "echo waiting-forever; sleep 600"]);
    assert_eq!(run.code(), Some(124), "{}", show_failure(&run));
    let last = run.last_line();
    // The last console line is the command's, or a kernel message after it (a loaded host's
    // clocksource watchdog): console.log shows which.
    assert!(last.contains("timed out after 30 s; last console line: "), "{}", show_failure(&run));
    assert!(last.contains("backtraces at the timeout are in console.log"), "{}", show_failure(&run));
    let console = std::fs::read_to_string(run.run_dir.join("console.log")).expect("console.log");
    let after = &console[console.find("waiting-forever").expect("the command's line")..];
    for wanted in ["NMI: Not continuing", "Call Trace", "NMI backtrace for cpu"] {
        assert!(after.contains(wanted), "no {wanted:?} after the command's line in console.log:\n{after}");
    }
}

#[test]
#[ignore = "boots a TCG guest: run with --ignored"]
fn two_devices_both_bind() {
    let run = launcher(&["conformance", "--timeout", "240", "--devices", "2", "--filter", "CAP-06"]);
    assert_eq!(run.code(), Some(0), "{}", show_failure(&run));
    assert!(run.stderr.contains("(2 device(s) compared)"), "{}", show_failure(&run));
    assert!(run.run_dir.join("device1.log").exists());
}

#[test]
#[ignore = "boots a TCG guest: run with --ignored"]
fn exec_returns_the_commands_status() {
    let run = launcher(&["exec", "--timeout", "240", "--", "sh", "-c", "test -c /dev/belfry0 && exit 7"]);
    assert_eq!(run.code(), Some(7), "{}", show_failure(&run));
    assert!(run.last_line().contains("status 7"), "{}", show_failure(&run));
}

#[test]
#[ignore = "boots a TCG guest: run with --ignored"]
fn a_run_across_two_guests_merges_their_results_in_registry_order() {
    let run = launcher(&["conformance", "--timeout", "400", "--guests", "2", "--filter", "cap"]);
    assert_eq!(run.code(), Some(0), "{}", show_failure(&run));
    assert!(run.last_line().contains("each of 2 guests"), "{}", show_failure(&run));
    let names = |path: PathBuf| -> Vec<String> {
        let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("results")).unwrap();
        json["tests"].as_array().expect("tests").iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
    };
    let (merged, second) = (names(run.run_dir.join("results.json")), names(run.run_dir.join("guest2/results.json")));
    assert!(!second.is_empty() && second.len() < merged.len(), "guest 2 ran a share: {second:?} of {merged:?}");
    assert!(second.iter().all(|n| merged.contains(n)), "guest 2's tests are in the merged results");
    for guest in ["guest1", "guest2"] {
        for file in ["console.log", "device0.log", "results.json", "trace.perfetto.gz"] {
            assert!(run.run_dir.join(guest).join(file).exists(), "{guest}/{file} missing");
        }
    }
    assert!(!run.run_dir.join("console.log").exists(), "no guest's files stand for the whole run's");
    // The merged results in registry order: the order the suite lists them in.
    let suite =
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/guest/x86_64-unknown-linux-gnu/release/belfry-conformance");
    let listing = Command::new(suite).args(["--list", "--"]).args(&merged).output().expect("the suite's listing");
    let listed: Vec<String> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(n, _)| n.to_string()))
        .filter(|n| merged.contains(n))
        .collect();
    assert_eq!(merged, listed);
    let junit = std::fs::read_to_string(run.run_dir.join("junit.xml")).unwrap();
    assert_eq!(junit.matches("<testcase ").count(), merged.len(), "{junit}");
}

#[test]
#[ignore = "boots a TCG guest: run with --ignored"]
fn a_passing_filtered_run_is_quiet_and_leaves_its_results() {
    // RACE needs the device with the test-only MonitoredValue faults, CAP-06 the default one
    // (not a doorbell family's test: a name filter also selects its shared-doorbell rerun,
    // `<name>_on_shared_doorbells`, which needs a third device).
    let run = launcher(&["conformance", "--timeout", "400", "--filter", "RACE", "--filter", "CAP-06"]);
    assert_eq!(run.code(), Some(0), "{}", show_failure(&run));
    let stdout = String::from_utf8_lossy(&run.output.stdout).into_owned();
    let all: Vec<&str> = stdout.lines().chain(run.stderr.lines()).collect();
    let alarming: Vec<&&str> =
        all.iter().filter(|l| l.to_ascii_lowercase().contains("error") || l.contains("WARN")).collect();
    assert!(alarming.is_empty(), "alarming lines in a passing run: {alarming:#?}\n{}", show_failure(&run));
    let tests = stdout.lines().filter(|l| ["PASS ", "FAIL ", "SKIP "].iter().any(|p| l.starts_with(p))).count();
    assert!(tests > 0, "no test lines\n{stdout}");
    assert!(all.len() - tests <= 60, "{} lines besides the tests:\n{}", all.len() - tests, all.join("\n"));
    // Only the devices the selected tests need: the default one and the faulty one.
    assert!(run.stderr.contains("tests selected, 2 device(s)"), "{}", show_failure(&run));
    assert!(run.run_dir.join("device1.log").exists() && !run.run_dir.join("device2.log").exists());
    for file in ["junit.xml", "results.ktap", "coverage.txt", "results.json", "build.log"] {
        assert!(run.run_dir.join(file).exists(), "{file} missing");
    }
    // No alarming noise in the logs either: QEMU reports no refused DMA maps (fd-less ROM
    // regions) and no missing error-recovery interrupt.
    let qemu = std::fs::read_to_string(run.run_dir.join("qemu.log")).unwrap();
    assert!(!qemu.to_ascii_lowercase().contains("error") && !qemu.contains("warning"), "qemu.log:\n{qemu}");
    let junit = std::fs::read_to_string(run.run_dir.join("junit.xml")).unwrap();
    assert_eq!(junit.matches("<testcase ").count(), tests, "{junit}");
    let ktap = std::fs::read_to_string(run.run_dir.join("results.ktap")).unwrap();
    assert!(ktap.starts_with("KTAP version 1\n") && ktap.contains(&format!("\n1..{tests}\n")), "{ktap}");
    assert_eq!(ktap.lines().filter(|l| l.starts_with("not ok ")).count(), 0, "{ktap}");
}

#[test]
#[ignore = "boots a TCG guest: run with --ignored"]
fn a_guest_in_s2idle_is_woken_by_the_launchers_key_press() {
    // Twice: the second sleep needs the launcher to press again after the first wake.
    let script = "sh /belfry/guest/s2idle.sh one && sh /belfry/guest/s2idle.sh two";
    let run = launcher(&["exec", "--no-module", "--timeout", "120", "--", "sh", "-c", script]);
    assert_eq!(run.code(), Some(0), "{}", show_failure(&run));
    let console = std::fs::read_to_string(run.run_dir.join("console.log")).unwrap();
    for tag in ["one", "two"] {
        assert!(console.contains(&format!("s2idle: slept and woke ({tag})")), "console:\n{console}");
    }
    assert_eq!(console.matches("PM: suspend exit").count(), 2, "console:\n{console}");
}
