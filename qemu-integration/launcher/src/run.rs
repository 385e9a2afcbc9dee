//! One run of a guest, as one value: [`Run`] holds the run directory, the workspace, the
//! options (devices, kernel, timeout…), what decides the outcome, and the steps and notes the
//! run prints; its methods are the phases, in order: [`Run::start`], then [`Run::execute`]:
//! setup (`setup/`: builds and provisioning), boot (`boot/`, with `--load`'s hog beside it),
//! judge (`outcome/`, with a repeated run's failing iterations' traces), finish.

use std::process::ExitCode;

use crate::boot::load::Hog;
use crate::boot::supervise::{self, Facts, LOG_TAIL_LINES};
use crate::message::{error_chain, say};
use crate::options::{Judging, RunOpts};
use crate::outcome::verdict::{self, Verdict};
use crate::outcome::{bench, iterations, lspci, report, results, selftests, summary::Summary, timeline};
use crate::retention;
use crate::run_dir::{self, RunDir};
use crate::setup::compile::Workspace;
use crate::setup::guest::Task;
use crate::setup::prepare::{prepare, Prepared};
use crate::setup::steps::Steps;
use crate::soak;
use crate::sys;

/// One run: what it does, where, with which options, and what it has said so far.
pub struct Run {
    /// What the guest does.
    task: Task,
    /// The options; the build may reduce the devices (`conformance --filter`).
    opts: RunOpts,
    /// What decides the outcome besides the guest's own status.
    judging: Judging,
    /// The launcher's command line, for `summary.txt`.
    argv: Vec<String>,
    /// The cargo workspace (and the repository) the builds use.
    ws: Workspace,
    /// The run directory.
    dir: RunDir,
    /// The build and provisioning steps, and where their tools write.
    steps: Steps,
    /// What the run said besides its verdict, for `summary.txt`.
    notes: Vec<String>,
    /// Each guest's directory (the run directory itself when there is one guest), once booted.
    guest_dirs: Vec<RunDir>,
    /// Restores the terminal when the run is dropped.
    _terminal: sys::TerminalGuard,
}

impl Run {
    /// Starts a run: installs the signal handlers, becomes the children's subreaper, saves the
    /// terminal and creates the run directory.
    ///
    /// # Errors
    /// The exit code of a run whose directory could not be created (the reason is printed).
    pub fn start(argv: Vec<String>, task: Task, opts: RunOpts, judging: Judging) -> Result<Self, ExitCode> {
        if let Err(e) = sys::install_signal_handlers() {
            say(format_args!("cannot install signal handlers: {e}"));
        }
        if let Err(e) = sys::become_child_subreaper() {
            say(format_args!("cannot become a child subreaper: {e}"));
        }
        let terminal = sys::TerminalGuard::save();
        let mut ws = Workspace::new(crate::setup::compile::repo_root());
        let dir = match RunDir::create(&run_dir::runs_root(&ws.target_dir), task.name()) {
            Ok(dir) => dir,
            Err(e) => {
                say(format_args!("FAILED: {}", error_chain(&e)));
                return Err(ExitCode::from(1));
            }
        };
        say(format_args!("run directory: {}", dir.path.display()));
        let steps = Steps::new(opts.verbose, dir.build_log());
        ws.output = steps.output.clone();
        Ok(Self {
            task,
            opts,
            judging,
            argv,
            ws,
            dir,
            steps,
            notes: Vec::new(),
            guest_dirs: Vec::new(),
            _terminal: terminal,
        })
    }

    /// Sets up (builds and provisions), boots and judges; ends with the run's exit code.
    pub fn execute(mut self) -> ExitCode {
        let mut prepared = match self.setup() {
            Ok(prepared) => prepared,
            Err(verdict) => return self.finish(None, &[], &verdict),
        };
        let facts = match self.boot(&mut prepared) {
            Ok(facts) => facts,
            Err(verdict) => return self.finish(Some(&prepared), &[], &verdict),
        };
        let facts: Vec<&Facts> = facts.iter().collect();
        let verdict = self.judge(&facts, &prepared);
        self.finish(Some(&prepared), &facts, &verdict)
    }

    /// Builds and provisions what the run needs; on failure, the verdict (after the build
    /// log's last lines).
    fn setup(&mut self) -> Result<Prepared, Verdict> {
        prepare(&self.task, &mut self.opts, &self.dir, &self.ws, &mut self.steps).map_err(|e| {
            let verdict = match sys::pending_signal() {
                Some(signal) => Verdict {
                    code: 128 + signal,
                    reason: format!("interrupted by {} during setup", sys::signal_name(signal)),
                },
                None => Verdict::failure(format!("setup failed: {}", error_chain(e.as_ref()))),
            };
            let tail = self.steps.log_tail(LOG_TAIL_LINES);
            if !tail.is_empty() {
                say(format_args!("last lines of {}:", self.dir.build_log().display()));
                for line in tail {
                    eprintln!("  {line}");
                }
            }
            verdict
        })
    }

    /// Starts the devices and QEMU of each guest and supervises them to the end; the facts of
    /// each guest, or the verdict of a run that could not be supervised.
    fn boot(&mut self, prepared: &mut Prepared) -> Result<Vec<Facts>, Verdict> {
        let (devices, timeout) = (self.opts.device_count(), self.opts.timeout());
        let (plans, guests) = (std::mem::take(&mut prepared.plans), self.opts.guest_count());
        let shell = matches!(self.task, Task::Shell);
        if self.opts.verbose || shell {
            let shell_note = if shell { "; device logs go to the run directory, Ctrl-C ends the guest" } else { "" };
            say(format_args!("starting {devices} device(s) and QEMU (timeout {timeout} s){shell_note}"));
        } else if guests > 1 {
            say(format_args!(
                "boot: {guests} guests side by side, each with {devices} device(s) and its share of the tests (timeout {timeout} s)"
            ));
        } else {
            say(format_args!("boot: {devices} device(s) and QEMU (timeout {timeout} s)"));
        }
        let hog = Hog::start(self.opts.load).map_err(|e| Verdict::failure(format!("--load: {e}")))?;
        if self.opts.load > 0 {
            say(format_args!("load: {} spinning thread(s) beside the guest", self.opts.load));
        }
        let (dirs, plans): (Vec<RunDir>, Vec<_>) = plans.into_iter().unzip();
        self.guest_dirs = dirs;
        let facts = supervise::run_all(plans);
        if self.opts.load > 0 {
            let spun = hog.rounds();
            self.notes.push(format!("load: {} thread(s) spun {spun} rounds of 100 000 multiply-adds", self.opts.load));
        }
        drop(hog);
        // A guest the launcher could not supervise fails the run; the others' facts stay.
        let facts: Vec<Facts> = facts
            .into_iter()
            .map(|f| f.unwrap_or_else(|e| Facts { launcher_error: Some(error_chain(&e)), ..Facts::default() }))
            .collect();
        for (dir, facts) in self.guest_dirs.iter().zip(&facts) {
            for failure in &facts.device_failures {
                let log = dir.device_log(failure.index);
                eprintln!("belfry: device {} {}; last lines of {}:", failure.index, failure.status, log.display());
                for line in &failure.tail {
                    eprintln!("  dev{}| {line}", failure.index);
                }
            }
        }
        let times: Vec<String> =
            facts.iter().filter_map(|f| f.guest_time).map(|t| format!("{:.1} s", t.as_secs_f64())).collect();
        if !times.is_empty() {
            say(format_args!("guest ran {}", times.join(", ")));
        }
        Ok(facts)
    }

    /// Saves what each guest left (results, timeline, the Perfetto trace) and, of several,
    /// their merged results; judges the run: each guest's status and the launcher's findings,
    /// then the lspci golden file (`conformance`) and the soak's bounds.
    fn judge(&mut self, facts: &[&Facts], prepared: &Prepared) -> Verdict {
        let conformance = matches!(self.task, Task::Conformance);
        let several = self.guest_dirs.len() > 1;
        for dir in self.guest_dirs.clone() {
            self.keep_guest_results(&dir, conformance);
        }
        for (dir, facts) in self.guest_dirs.clone().iter().zip(facts) {
            if let Some(stalled) = &facts.stalled_boot {
                let guest = dir.path.file_name().filter(|_| several).map(|n| format!("{}: ", n.to_string_lossy()));
                self.tell(format!("{}{}", guest.unwrap_or_default(), stalled.describe()));
            }
        }
        let mut unmerged = None;
        if conformance && several {
            let dirs: Vec<&std::path::Path> = self.guest_dirs.iter().map(|d| d.path.as_path()).collect();
            match results::save_merged(&self.dir.path, &dirs, self.opts.filters.is_empty()) {
                Ok(note) => self.tell(note),
                Err(why) => unmerged = Some(why),
            }
        }
        if let (true, [only]) = (conformance, facts) {
            let devices = usize::from(self.opts.device_count());
            for note in iterations::keep_failing(
                &self.dir,
                only.console.failed_tests.iter().filter_map(|f| f.iteration),
                &only.console.iterations,
                devices,
            ) {
                self.tell(note);
            }
        }
        let host = bench::Host {
            cpu: sys::cpu_model(),
            load_before: prepared.load_before_boot.as_deref(),
            load_after: sys::load_average(),
            placement: &prepared.placement,
        };
        let first = self.guest_dirs.first().cloned().unwrap_or_else(|| self.dir.clone());
        if let Some(note) = bench::save(&self.dir.path, &first.console_log(), &host) {
            self.tell(note);
        }
        let mut verdict = verdict::judge_guests(facts, prepared.timeout);
        if let (true, Some(why)) = (verdict.passed(), unmerged) {
            verdict = Verdict::failure(why);
        }
        let incomplete = if conformance { results::incomplete(&self.dir.path) } else { None };
        match (verdict.passed(), incomplete) {
            // A suite run that failed on its SKIPs or gaps says which (the suite's INCOMPLETE reason).
            (false, Some(why)) => verdict.reason = format!("{}; {why}", verdict.reason),
            // Each guest judged its share; what only the whole shows (a gap) is judged here.
            (true, Some(why)) if several => {
                verdict = Verdict::failure(format!("the merged results are incomplete: {why}"))
            }
            _ => {}
        }
        if verdict.passed() && conformance && self.opts.no_module {
            self.notes.push("lspci golden comparison skipped: --no-module (no driver bound)".into());
        } else if verdict.passed() && conformance {
            match lspci::check(&self.ws.repo, &first, &self.opts.default_devices(), self.judging.bless) {
                Ok(note) => self.tell(note),
                Err(failed) => verdict = failed,
            }
        }
        let devices = usize::from(self.opts.device_count());
        if let (true, Some(max_rss)) = (verdict.passed(), self.judging.max_device_rss) {
            match soak::judge(&self.dir, devices, max_rss) {
                Ok(lines) => lines.into_iter().for_each(|line| self.tell(line)),
                Err(reason) => verdict = Verdict::failure(reason),
            }
        }
        if !verdict.passed() && !self.opts.verbose {
            for (dir, facts) in self.guest_dirs.iter().zip(facts) {
                if !verdict::judge(facts, prepared.timeout).passed() || !several {
                    report::failure(dir, facts, devices);
                }
            }
        }
        verdict
    }

    /// Saves what one guest left in its directory `dir`: the suite's timeline and results
    /// (`conformance`), the selftests' KTAP, the Perfetto trace of its devices and module.
    fn keep_guest_results(&mut self, dir: &RunDir, conformance: bool) {
        let text = std::fs::read(dir.results()).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        if conformance {
            if let Some(note) = timeline::save(dir) {
                if self.opts.verbose {
                    say(&note);
                }
                self.notes.push(note);
            }
            if let Some(note) = results::save(&text, &dir.path) {
                self.tell(note);
            }
        }
        if matches!(self.task, Task::Selftests(_)) {
            for line in selftests::save(&text, &dir.path) {
                self.tell(line);
            }
        }
        let note = belfry_trace::perfetto::write_run(&dir.path)
            .unwrap_or_else(|e| format!("{} not written: {e}", belfry_trace::perfetto::RUN_FILE));
        self.tell(note);
    }

    /// Prints a note and keeps it for `summary.txt`.
    fn tell(&mut self, note: String) {
        say(&note);
        self.notes.push(note);
    }

    /// Writes `summary.txt`, tidies the run directory (the initramfs goes after a passing run
    /// unless `--keep`), prints the verdict's line and returns its exit code.
    /// Removes the run directories beyond the last `--keep-runs` (this one included) and says
    /// how many and how much.
    fn retain(&self) {
        let Some(root) = self.dir.path.parent() else { return };
        let removed = retention::keep_count(self.opts.keep_runs)
            .and_then(|keep| retention::prune(root, keep, Some(&self.dir.path)).map_err(|e| e.to_string()));
        match removed {
            Ok(removed) if !removed.dirs.is_empty() => say(format_args!(
                "removed {} older run director{} ({}; keeping the last {}: --keep-runs, {})",
                removed.dirs.len(),
                if removed.dirs.len() == 1 { "y" } else { "ies" },
                retention::human(removed.bytes),
                retention::keep_count(self.opts.keep_runs).unwrap_or(retention::DEFAULT_KEEP),
                retention::KEEP_ENV,
            )),
            Ok(_) => {}
            Err(e) => say(format_args!("older run directories kept: {e}")),
        }
    }

    fn finish(&self, prepared: Option<&Prepared>, facts: &[&Facts], verdict: &Verdict) -> ExitCode {
        let summary = Summary { argv: &self.argv, prepared, facts, steps: &self.steps, notes: &self.notes, verdict };
        let _ = std::fs::write(self.dir.summary(), summary.render());
        for dir in std::iter::once(&self.dir).chain(&self.guest_dirs) {
            if verdict.passed() && !self.opts.keep {
                let _ = std::fs::remove_file(dir.initramfs());
            }
            let _ = std::fs::remove_dir(dir.socket_dir());
        }
        self.retain();
        for dir in &self.guest_dirs {
            for i in (0..usize::from(self.opts.device_count())).filter(|&i| self.opts.records(i)) {
                let log = dir.device_record(i);
                if let Ok(m) = std::fs::metadata(&log) {
                    say(format_args!("input log: {} ({})", log.display(), retention::human(m.len())));
                }
            }
        }
        let size = retention::human(retention::dir_size(&self.dir.path));
        say(format_args!("run directory: {} ({size})", self.dir.path.display()));
        if verdict.passed() {
            say(format_args!("PASSED: {}", verdict.reason));
        } else {
            say(format_args!("FAILED: {}", verdict.reason));
        }
        ExitCode::from(u8::try_from(verdict.code).unwrap_or(1))
    }
}
