//! `summary.txt`: the command, the accelerator, each step's time, the guest's time and exit,
//! failed checks and devices, the run's notes and its verdict, one `key: value` a line.

use std::fmt::Write as _;

use crate::boot::supervise::{self, Facts};
use crate::outcome::verdict::Verdict;
use crate::setup::guest;
use crate::setup::prepare::Prepared;
use crate::setup::steps::Steps;
use crate::sys;

/// What a run knows at its end; the phases it did not reach are `None`.
pub struct Summary<'a> {
    /// The launcher's command line.
    pub argv: &'a [String],
    /// What the build phase decided.
    pub prepared: Option<&'a Prepared>,
    /// What the boot found, guest by guest (empty if it was not reached).
    pub facts: &'a [&'a Facts],
    /// The build and provisioning steps with their times.
    pub steps: &'a Steps,
    /// The notes the run printed (results, timeline, golden check…).
    pub notes: &'a [String],
    /// The verdict.
    pub verdict: &'a Verdict,
}

impl Summary<'_> {
    /// The text of `summary.txt`.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let command: Vec<String> = self.argv.iter().map(|a| guest::sh_quote(a)).collect();
        let _ = writeln!(s, "command: {}", command.join(" "));
        if let Some(p) = self.prepared {
            let _ = writeln!(s, "accelerator: {}", p.accel);
            let _ = writeln!(s, "build-seconds: {:.1}", p.build_time.as_secs_f64());
            let _ = writeln!(s, "placement: {}", p.placement);
            let unknown = || "unknown".to_string();
            let _ = writeln!(s, "host-cpu: {}", sys::cpu_model().unwrap_or_else(unknown));
            let before = p.load_before_boot.as_deref().unwrap_or("unknown");
            let now = sys::load_average().unwrap_or_else(unknown);
            let _ = writeln!(s, "host-load: {before} before the boot, {now} at the end (1, 5, 15 min)");
        }
        for (label, took) in &self.steps.done {
            let _ = writeln!(s, "step-seconds: {:.1} {label}", took.as_secs_f64());
        }
        // The run's guest time: its longest guest's; each guest's after it when there are several.
        if let Some(t) = self.facts.iter().filter_map(|f| f.guest_time).max() {
            let _ = writeln!(s, "guest-seconds: {:.1}", t.as_secs_f64());
        }
        if self.facts.len() > 1 {
            let each: Vec<String> = self
                .facts
                .iter()
                .map(|f| f.guest_time.map_or("?".into(), |t| format!("{:.1}", t.as_secs_f64())))
                .collect();
            let _ = writeln!(s, "guest-seconds-each: {}", each.join(" "));
        }
        for (i, f) in self.facts.iter().enumerate() {
            let guest = if self.facts.len() > 1 { format!("guest {}: ", i + 1) } else { String::new() };
            if let Some(status) = f.qemu_status {
                let _ = writeln!(s, "qemu: {guest}{}", supervise::describe_status(status));
            }
            if let Some(status) = f.console.exit {
                let _ = writeln!(s, "guest-exit: {guest}{status}");
            }
            for c in &f.console.check_failures {
                let _ = writeln!(s, "check-failed: {guest}{c}");
            }
            for d in &f.device_failures {
                let _ = writeln!(s, "device-failure: {guest}device {}: {}", d.index, d.status);
            }
        }
        for n in self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        let _ = writeln!(s, "exit-code: {}", self.verdict.code);
        let _ = writeln!(s, "result: {}", self.verdict.reason);
        s
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_run_that_failed_in_its_build_says_its_steps_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let mut steps = Steps::new(false, dir.path().join("build.log"));
        steps.done.push(("build: belfry-device (cargo, release)".into(), Duration::from_millis(1500)));
        let argv = ["belfry-launcher".to_string(), "exec".into(), "--".into(), "echo hi".into()];
        let verdict = Verdict::failure("setup failed: no cargo");
        let notes = ["a note".to_string()];
        let summary =
            Summary { argv: &argv, prepared: None, facts: &[], steps: &steps, notes: &notes, verdict: &verdict };
        assert_eq!(
            summary.render(),
            "command: belfry-launcher exec -- 'echo hi'\n\
             step-seconds: 1.5 build: belfry-device (cargo, release)\n\
             note: a note\n\
             exit-code: 1\n\
             result: setup failed: no cargo\n"
        );
    }
}
