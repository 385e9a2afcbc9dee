//! The verdict of a run: one exit code and one line saying why, from the facts the supervisor
//! collected. The most fundamental cause wins: a signal, then a dead device (the guest's own
//! failure is then a consequence), a kernel panic, the timeout, a missing exit line, a kernel
//! bug report, the guest command's status, and last a device failing after the guest ended.

use std::time::Duration;

use crate::boot::supervise::{describe_status, Facts, Stacks};

/// Exit code when the run timed out (as timeout(1)).
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code of a failure detected by the launcher.
pub const EXIT_FAILURE: i32 = 1;

/// The end of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The launcher's exit code.
    pub code: i32,
    /// One line saying why.
    pub reason: String,
}

impl Verdict {
    /// Whether the run passed.
    pub fn passed(&self) -> bool {
        self.code == 0
    }

    /// A failure with `reason`.
    pub fn failure(reason: impl Into<String>) -> Self {
        Self { code: EXIT_FAILURE, reason: reason.into() }
    }
}

/// The guest status as a process exit code (non-zero stays non-zero).
fn exit_code(status: i32) -> i32 {
    match status {
        0 => 0,
        1..=255 => status,
        _ => EXIT_FAILURE,
    }
}

/// Judges a run that had `timeout` as its limit.
pub fn judge(facts: &Facts, timeout: Duration) -> Verdict {
    judge_at(facts, timeout, "")
}

/// [`judge`], naming the device logs as in `logs` (`guest2/` for the second guest of several).
fn judge_at(facts: &Facts, timeout: Duration, logs: &str) -> Verdict {
    let console = &facts.console;
    if let Some(signal) = facts.signal {
        return Verdict { code: 128 + signal, reason: format!("interrupted by {}", crate::sys::signal_name(signal)) };
    }
    if let Some(error) = &facts.launcher_error {
        return Verdict::failure(format!("run failed: {error}"));
    }
    if let Some(f) = facts.device_failures.iter().find(|f| f.during_run) {
        return Verdict::failure(format!(
            "device {} died during the run ({}); see {logs}device{}.log",
            f.index, f.status, f.index
        ));
    }
    if facts.timed_out {
        let last = facts.last_line_at_timeout.as_ref().map(|l| format!("; last console line: {l}")).unwrap_or_default();
        let stacks = match &facts.stacks {
            Some(Stacks::Printed) => format!("; the guest's backtraces at the timeout are in {logs}console.log"),
            Some(Stacks::NoAnswer) => {
                "; an NMI at the timeout brought no panic (its CPUs ran no handler, or its kernel ignores unknown NMIs)"
                    .to_string()
            }
            Some(Stacks::NotInjected(why)) => format!("; no NMI for the guest's backtraces: {why}"),
            None => String::new(),
        };
        return Verdict {
            code: EXIT_TIMEOUT,
            reason: format!("timed out after {} s{last}{stacks}", timeout.as_secs()),
        };
    }
    if let Some(message) = &console.panic {
        return Verdict::failure(format!("guest kernel panic: {message}"));
    }
    let Some(status) = console.exit else {
        let qemu = facts.qemu_status.map(describe_status).unwrap_or_else(|| "still running".into());
        let said = facts.qemu_tail.last().map(|l| format!(": {l}")).unwrap_or_default();
        return Verdict::failure(format!("QEMU exited ({qemu}) without a BELFRY-EXIT line{said}"));
    };
    if let Some(bug) = console.kernel_bugs.first() {
        return Verdict::failure(format!("guest kernel reported a bug: {bug}"));
    }
    if status != 0 {
        let why = console.check_failures.first().map(|c| format!(": CHECK FAILED: {c}")).unwrap_or_default();
        let more = match console.check_failures.len() {
            0 | 1 => String::new(),
            n => format!(" (and {} more failed checks)", n - 1),
        };
        return Verdict {
            code: exit_code(status),
            reason: format!("guest command exited with status {status}{why}{more}"),
        };
    }
    if let Some(f) = facts.device_failures.first() {
        return Verdict::failure(format!(
            "device {} failed after the guest finished ({}); see {logs}device{}.log",
            f.index, f.status, f.index
        ));
    }
    Verdict { code: 0, reason: "guest command exited with status 0".into() }
}

/// Judges a run of several guests side by side (in guest order): the first guest's failure,
/// named, or a pass when every guest passed. One guest is judged as [`judge`] judges it.
pub fn judge_guests(guests: &[&Facts], timeout: Duration) -> Verdict {
    if let [one] = guests {
        return judge(one, timeout);
    }
    let verdicts: Vec<Verdict> =
        guests.iter().enumerate().map(|(i, f)| judge_at(f, timeout, &format!("guest{}/", i + 1))).collect();
    // A signal stopped every guest: say so once.
    if let Some(v) = verdicts.iter().find(|v| v.code > 128) {
        return v.clone();
    }
    match verdicts.iter().enumerate().find(|(_, v)| !v.passed()) {
        Some((i, v)) => Verdict { code: v.code, reason: format!("guest {}: {}", i + 1, v.reason) },
        None => Verdict { code: 0, reason: format!("each of {} guests' commands exited with status 0", guests.len()) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boot::supervise::DeviceFailure;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    const T: Duration = Duration::from_secs(300);

    fn facts(lines: &[&str]) -> Facts {
        let mut f = Facts { qemu_status: Some(ExitStatus::from_raw(0)), ..Facts::default() };
        for l in lines {
            f.console.feed(l);
        }
        f
    }

    #[test]
    fn the_guest_status_is_the_exit_code() {
        assert_eq!(judge(&facts(&["BELFRY-EXIT 0"]), T).code, 0);
        let v = judge(&facts(&["CHECK FAILED: identity mismatch on 00:01.0", "BELFRY-EXIT 3"]), T);
        assert_eq!(v.code, 3);
        assert_eq!(v.reason, "guest command exited with status 3: CHECK FAILED: identity mismatch on 00:01.0");
        assert_eq!(judge(&facts(&["BELFRY-EXIT 300"]), T).code, EXIT_FAILURE);
    }

    #[test]
    fn a_panic_beats_the_missing_exit_line() {
        let v = judge(&facts(&["Kernel panic - not syncing: VFS: Unable to mount root fs"]), T);
        assert_eq!(v.code, EXIT_FAILURE);
        assert_eq!(v.reason, "guest kernel panic: VFS: Unable to mount root fs");
    }

    #[test]
    fn a_missing_exit_line_is_reported_with_qemus_status() {
        let mut f = facts(&["booting"]);
        f.qemu_status = Some(ExitStatus::from_raw(1 << 8));
        f.qemu_tail = vec!["qemu-system-x86_64: cannot connect".into()];
        let v = judge(&f, T);
        assert_eq!(
            v.reason,
            "QEMU exited (exit status 1) without a BELFRY-EXIT line: qemu-system-x86_64: cannot connect"
        );
    }

    #[test]
    fn timeout_reports_the_last_console_line() {
        let mut f = facts(&["stuck here", ""]);
        f.qemu_status = None;
        f.timed_out = true;
        f.last_line_at_timeout = Some("stuck here".into());
        let v = judge(&f, T);
        assert_eq!(v.code, EXIT_TIMEOUT);
        assert_eq!(v.reason, "timed out after 300 s; last console line: stuck here");
    }

    #[test]
    fn a_timeout_beats_the_panic_of_its_nmi_and_says_where_the_backtraces_are() {
        let mut f = facts(&["stuck here", "Kernel panic - not syncing: NMI: Not continuing"]);
        f.timed_out = true;
        f.last_line_at_timeout = Some("stuck here".into());
        f.stacks = Some(Stacks::Printed);
        let v = judge(&f, T);
        assert_eq!(v.code, EXIT_TIMEOUT);
        assert_eq!(
            v.reason,
            "timed out after 300 s; last console line: stuck here; the guest's backtraces at the timeout are in \
             console.log"
        );
        f.stacks = Some(Stacks::NoAnswer);
        assert!(judge(&f, T).reason.ends_with(
            "an NMI at the timeout brought no panic (its CPUs ran no handler, or its kernel ignores unknown NMIs)"
        ));
    }

    #[test]
    fn a_dead_device_beats_the_guests_failure() {
        let mut f = facts(&["CHECK FAILED: x", "BELFRY-EXIT 1"]);
        f.device_failures.push(DeviceFailure {
            index: 1,
            status: "killed by SIGSEGV".into(),
            during_run: true,
            tail: vec![],
        });
        assert_eq!(judge(&f, T).reason, "device 1 died during the run (killed by SIGSEGV); see device1.log");
        f.device_failures[0].during_run = false;
        assert!(judge(&f, T).reason.starts_with("guest command exited with status 1"));
        let mut ok = facts(&["BELFRY-EXIT 0"]);
        ok.device_failures = f.device_failures.clone();
        assert!(judge(&ok, T).reason.starts_with("device 1 failed after the guest finished"));
    }

    #[test]
    fn guests_side_by_side_pass_together_and_fail_by_name() {
        let (ok, bad) = (facts(&["BELFRY-EXIT 0"]), facts(&["CHECK FAILED: x", "BELFRY-EXIT 2"]));
        assert_eq!(judge_guests(&[&ok], T), judge(&ok, T), "one guest is judged as before");
        assert_eq!(judge_guests(&[&ok, &ok], T).reason, "each of 2 guests' commands exited with status 0");
        let v = judge_guests(&[&ok, &bad], T);
        assert_eq!(v.code, 2);
        assert_eq!(v.reason, "guest 2: guest command exited with status 2: CHECK FAILED: x");
        let mut stopped = facts(&[]);
        stopped.signal = Some(libc::SIGTERM);
        assert_eq!(judge_guests(&[&bad, &stopped], T).reason, "interrupted by SIGTERM");
        let mut dead = facts(&["BELFRY-EXIT 0"]);
        dead.device_failures.push(DeviceFailure {
            index: 3,
            status: "killed by SIGSEGV".into(),
            during_run: true,
            tail: vec![],
        });
        assert_eq!(
            judge_guests(&[&ok, &dead], T).reason,
            "guest 2: device 3 died during the run (killed by SIGSEGV); see guest2/device3.log",
            "the log named is the guest's own"
        );
        let mut unsupervised = facts(&[]);
        unsupervised.launcher_error = Some("Starting QEMU: no such file".into());
        assert_eq!(judge_guests(&[&unsupervised, &ok], T).reason, "guest 1: run failed: Starting QEMU: no such file");
    }

    #[test]
    fn kernel_bugs_fail_a_successful_command_and_signals_win() {
        let v = judge(&facts(&["WARNING: CPU: 1 PID: 7 at x.c:3", "BELFRY-EXIT 0"]), T);
        assert_eq!(v.code, EXIT_FAILURE);
        assert!(v.reason.contains("WARNING: CPU: 1"));
        let mut f = facts(&["BELFRY-EXIT 0"]);
        f.signal = Some(libc::SIGINT);
        assert_eq!(judge(&f, T), Verdict { code: 130, reason: "interrupted by SIGINT".into() });
    }
}
