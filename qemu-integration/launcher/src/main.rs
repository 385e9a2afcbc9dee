//! `cargo belfry`: builds what is stale (device, guest kernel, module, initramfs), boots QEMU
//! with one or more Belfry devices attached over vfio-user, runs a task in the guest and
//! exits with its status, saying why on the last line.
//!
//! Code map: [`main`] (command line and the steps of a run), [`steps`] (one line per build
//! step; the tools' output to `build.log` unless `-v`), [`compile`] (nested cargo builds),
//! [`provision`] (provision.sh), [`artifacts`] (the run directory), [`guest`] (what goes into
//! the initramfs), [`qemu`] (the QEMU command line), [`devices`] (device processes and flags),
//! [`supervise`] (children, streaming, the end of a run), [`console`] (console parsing),
//! [`verdict`] (exit code and reason), [`golden`] (the lspci golden file), [`prepare`] (the
//! builds and provisioning before the boot, overlapped), [`filter`]
//! (`conformance --filter`), [`results`] (JUnit, KTAP and coverage files), [`report`] (what a
//! quiet run shows when it fails), [`doctor`] (what a
//! run needs), [`soak`] (`soak`'s guest command and host-side bounds), [`sys`] (signals,
//! process trees; all unsafe code).

mod artifacts;
mod compile;
mod console;
mod devices;
mod doctor;
mod filter;
mod golden;
mod guest;
mod prepare;
mod provision;
mod qemu;
mod report;
mod results;
mod soak;
mod steps;
mod supervise;
mod sys;
mod verdict;
mod wake;

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::artifacts::RunDir;
use crate::devices::{DeviceFlags, Target};
use crate::guest::Task;
use crate::prepare::{prepare, Prepared};
use crate::provision::Flavour;
use crate::qemu::AccelChoice;
use crate::steps::Steps;
use crate::supervise::{Facts, LOG_TAIL_LINES};
use crate::verdict::Verdict;

/// Boot QEMU with Belfry devices and run a task in the guest.
#[derive(Debug, Parser)]
#[command(name = "cargo belfry", bin_name = "cargo belfry", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Load the module, check every device, then run the in-guest conformance suite.
    Conformance {
        #[command(flatten)]
        opts: RunOpts,
        /// Rewrite qemu-integration/golden/lspci.txt from this run's listing.
        #[arg(long)]
        bless: bool,
        /// Run only the tests a filter selects: a rule family (FEN), a rule id (FEN-01) or part
        /// of a test name; repeatable. Without --devices/--device-flags only the devices those
        /// tests need are attached.
        #[arg(long = "filter", value_name = "NAME|RULE-ID|FAMILY")]
        filters: Vec<String>,
    },
    /// An interactive guest shell with the device(s); Ctrl-C ends everything.
    Shell {
        #[command(flatten)]
        opts: RunOpts,
    },
    /// Run a command in the guest (after insmod) and exit with its status.
    Exec {
        #[command(flatten)]
        opts: RunOpts,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Soak: `belfry-soak` runs a mixed workload across processes in the guest for N minutes
    /// and checks guest memory, the module's objects and kernel warnings; the launcher then
    /// bounds each device's peak RSS and trace size.
    Soak {
        #[command(flatten)]
        opts: RunOpts,
        /// How long the workload runs (fractions allowed).
        #[arg(long, default_value_t = 1.0)]
        minutes: f64,
        /// Worker processes in the guest.
        #[arg(long, default_value_t = 3)]
        workers: u32,
        /// Largest peak RSS a device may reach, in MiB.
        #[arg(long, default_value_t = 1024, value_name = "MIB")]
        max_device_rss: u64,
    },
    /// Check what a run needs (toolchain, disk, cache, KVM, namespaces, QEMU) and say how to
    /// fix each problem.
    Doctor,
}

#[derive(Debug, Clone, Args)]
struct RunOpts {
    /// Number of Belfry devices to attach (default 1; `conformance` without `--devices` or
    /// `--device-flags` attaches the suite's nine: default, `--doorbells 2`,
    /// `--doorbell-model global`, `--no-64bit-atomics`, `--interrupt-form per-queue`,
    /// `--interrupt-form scan-all`, one with the test-only MonitoredValue-update faults, one
    /// with `--inject no-fence-interrupts`, one with `--inject mailbox-stall`, one with
    /// `--no-native-fences` and one with `--doorbell-transport shared`; at most 16, the
    /// module's limit).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=16))]
    devices: Option<u16>,
    /// Extra belfry-device flags: I=FLAGS for device I (0-based) or all=FLAGS; repeatable.
    #[arg(long = "device-flags", value_name = "I=FLAGS")]
    device_flags: Vec<DeviceFlags>,
    /// Limit in seconds from QEMU's start to its exit (builds are not counted); default 300 on
    /// the distro kernel, 1500 on the (several times slower) debug kernel.
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64>,
    /// Extra kernel command line.
    #[arg(long, value_name = "STR", allow_hyphen_values = true)]
    kernel_append: Option<String>,
    /// Guest kernel: `distro` (Debian's packaged image, only its rust/ metadata built: a fast
    /// first run) or `debug` (built from source with DEBUG_ATOMIC_SLEEP and PANIC_ON_OOPS; what
    /// ci/test runs the suite on).
    #[arg(long = "kernel", value_enum, default_value_t = Flavour::Distro, value_name = "FLAVOUR")]
    kernel: Flavour,
    /// Do not load the module in the guest (and do not build it).
    #[arg(long)]
    no_module: bool,
    /// Keep the whole run directory on success (by default the initramfs is then removed;
    /// logs, traces and results are always kept).
    #[arg(long)]
    keep: bool,
    /// Accelerator: auto picks KVM only where it truly works.
    #[arg(long, value_enum, default_value_t = AccelChoice::Auto)]
    accel: AccelChoice,
    /// Build workspace package PKG (binary BIN, default PKG) as a static guest binary and put
    /// it in the guest's /belfry/bin (on PATH); repeatable.
    #[arg(long = "guest-bin", value_name = "PKG[:BIN]")]
    guest_bins: Vec<String>,
    /// Also attach QEMU's `edu` test device (`1234:11e8`): `belfry-bench`'s reference for the
    /// cost of one register write handled inside QEMU.
    #[arg(long)]
    edu: bool,
    /// Stream every build tool's, device's and QEMU's output and the whole guest console (by
    /// default they go to the run directory's logs).
    #[arg(short, long)]
    verbose: bool,
    /// `conformance --filter`: the filters.
    #[arg(skip)]
    filters: Vec<String>,
    /// The devices are the suite's default layout (chosen by `for_conformance`, not on the
    /// command line): a filter may reduce them.
    #[arg(skip)]
    suite_layout: bool,
    /// Build the C API's demo program for the guest (`conformance` with the suite).
    #[arg(skip)]
    c_demo: bool,
}

impl RunOpts {
    /// The run's limit in seconds: `--timeout` or the kernel flavour's default.
    fn timeout(&self) -> u64 {
        self.timeout.unwrap_or(self.kernel.default_timeout())
    }

    /// Devices to attach.
    fn device_count(&self) -> u16 {
        self.devices.unwrap_or(1)
    }

    /// Attaches device 0 with default flags and one device per entry of `flags` after it.
    fn set_layout(&mut self, flags: &[&str]) {
        self.devices = Some(u16::try_from(flags.len() + 1).unwrap_or(1));
        self.device_flags.clear();
        for (index, flags) in flags.iter().enumerate() {
            let value = format!("{}={flags}", index + 1);
            if let Ok(flags) = value.parse() {
                self.device_flags.push(flags);
            }
        }
    }

    /// For `conformance`: the suite and timeline binaries in the guest (unless `--no-module`)
    /// and, unless the devices were chosen on the command line, the suite's device layout
    /// ([`devices::suite_layout`]).
    fn for_conformance(mut self) -> Self {
        // `all=` flags alone keep the layout and go to every device of it (the whole suite
        // with, say, `--device-flags all=--no-cmd-ring`).
        if self.devices.is_none() && self.device_flags.iter().all(|f| f.target == Target::All) {
            let all = std::mem::take(&mut self.device_flags);
            self.set_layout(&devices::suite_layout());
            self.device_flags.extend(all);
            self.suite_layout = true;
        }
        self.c_demo = !self.no_module;
        if !self.no_module && !self.guest_bins.iter().any(|b| b.split(':').next() == Some(SUITE_PACKAGE)) {
            self.guest_bins.push(SUITE_PACKAGE.to_string());
            self.guest_bins.push(format!("{SUITE_PACKAGE}:{TIMELINE_BINARY}"));
        }
        self
    }
}

/// The in-guest conformance suite's package (and binary).
const SUITE_PACKAGE: &str = "belfry-conformance";
/// The suite package's tool that prints the module's fence timeline after the suite.
const TIMELINE_BINARY: &str = "belfry-timeline";
/// A failure of the launcher before or around the run (not a guest verdict).
type BoxError = Box<dyn std::error::Error>;

/// Prints `message` with the launcher's prefix.
fn say(message: impl std::fmt::Display) {
    eprintln!("belfry: {message}");
}

/// Formats an error with its chain of causes.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

/// Stops the run if a termination signal arrived during a build step.
fn check_signal() -> Result<(), BoxError> {
    match sys::pending_signal() {
        Some(signal) => Err(format!("interrupted by {}", sys::signal_name(signal)).into()),
        None => Ok(()),
    }
}

/// Saves the fence timeline the guest put on the results channel next to the device traces;
/// a note saying where, if there was one.
fn save_timeline(run: &RunDir) -> Option<String> {
    let results = std::fs::read(run.results()).ok()?;
    let timeline =
        golden::extract_section(&String::from_utf8_lossy(&results), guest::TIMELINE_BEGIN, guest::TIMELINE_END)?;
    let events = timeline.lines().filter(|l| !l.starts_with('#')).count();
    match std::fs::write(run.timeline(), timeline) {
        Ok(()) => Some(format!("fence timeline: {events} event(s) in {}", run.timeline().display())),
        Err(e) => Some(format!("fence timeline not saved: {}: {e}", run.timeline().display())),
    }
}

/// Compares (or, with `bless`, rewrites) the golden lspci listing.
fn check_golden(repo: &Path, run: &RunDir, opts: &RunOpts, bless: bool) -> Result<String, Verdict> {
    let results = std::fs::read(run.results()).unwrap_or_default();
    let results = String::from_utf8_lossy(&results);
    let console = std::fs::read(run.console_log()).unwrap_or_default();
    let console = String::from_utf8_lossy(&console);
    let listing = golden::extract_section(&results, guest::LSPCI_BEGIN, guest::LSPCI_END)
        .or_else(|| golden::extract_section(&console, guest::LSPCI_BEGIN, guest::LSPCI_END))
        .ok_or_else(|| Verdict::failure("the guest wrote no lspci listing (results.txt)"))?;
    let normalised = golden::normalise_addresses(&listing);
    let _ = std::fs::write(run.lspci(), &normalised);
    let blocks = golden::device_blocks(&listing);
    let extra = devices::per_device_args(usize::from(opts.device_count()), &opts.device_flags).unwrap_or_default();
    let defaults: Vec<usize> = (0..extra.len()).filter(|&i| extra[i].is_empty()).collect();
    let golden_path = repo.join(golden::GOLDEN_LSPCI);
    if bless {
        let Some(&first) = defaults.first() else {
            return Err(Verdict::failure("--bless needs a device with default flags"));
        };
        let block = golden::normalise_addresses(blocks.get(first).map_or("", String::as_str));
        if block.is_empty() {
            return Err(Verdict::failure("--bless: the listing has no device block"));
        }
        std::fs::write(&golden_path, golden::blessed(&block))
            .map_err(|e| Verdict::failure(format!("writing {}: {e}", golden_path.display())))?;
        return Ok(format!("blessed {}", golden::GOLDEN_LSPCI));
    }
    let golden = std::fs::read_to_string(&golden_path)
        .map_err(|e| Verdict::failure(format!("reading {}: {e} (create it with --bless)", golden::GOLDEN_LSPCI)))?;
    match golden::compare(&golden, &blocks, &defaults) {
        golden::Comparison::Match { compared } => {
            Ok(format!("lspci listing matches {} ({compared} device(s) compared)", golden::GOLDEN_LSPCI))
        }
        golden::Comparison::Differs { device, diff } => {
            eprintln!(
                "belfry: lspci listing of device {device} differs from {} (- golden, + guest):",
                golden::GOLDEN_LSPCI
            );
            eprint!("{diff}");
            Err(Verdict::failure(format!(
                "lspci listing of device {device} differs from {} (diff above; --bless accepts it)",
                golden::GOLDEN_LSPCI
            )))
        }
        golden::Comparison::Missing { expected, found } => {
            Err(Verdict::failure(format!("lspci listing has {found} device block(s), expected at least {expected}")))
        }
    }
}

fn write_summary(
    run: &RunDir,
    argv: &[String],
    prepared: Option<&Prepared>,
    facts: Option<&Facts>,
    steps: &Steps,
    notes: &[String],
    verdict: &Verdict,
) {
    let mut s = String::new();
    let command: Vec<String> = argv.iter().map(|a| guest::sh_quote(a)).collect();
    let _ = writeln!(s, "command: {}", command.join(" "));
    if let Some(p) = prepared {
        let _ = writeln!(s, "accelerator: {}", p.accel);
        let _ = writeln!(s, "build-seconds: {:.1}", p.build_time.as_secs_f64());
    }
    for (label, took) in &steps.done {
        let _ = writeln!(s, "step-seconds: {:.1} {label}", took.as_secs_f64());
    }
    if let Some(f) = facts {
        if let Some(t) = f.guest_time {
            let _ = writeln!(s, "guest-seconds: {:.1}", t.as_secs_f64());
        }
        if let Some(status) = f.qemu_status {
            let _ = writeln!(s, "qemu: {}", supervise::describe_status(status));
        }
        if let Some(status) = f.console.exit {
            let _ = writeln!(s, "guest-exit: {status}");
        }
        for c in &f.console.check_failures {
            let _ = writeln!(s, "check-failed: {c}");
        }
        for d in &f.device_failures {
            let _ = writeln!(s, "device-failure: device {}: {}", d.index, d.status);
        }
    }
    for n in notes {
        let _ = writeln!(s, "note: {n}");
    }
    let _ = writeln!(s, "exit-code: {}", verdict.code);
    let _ = writeln!(s, "result: {}", verdict.reason);
    let _ = std::fs::write(run.summary(), s);
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let cli = Cli::parse();
    let mut soak_rss = None;
    let (task, mut opts, bless) = match cli.command {
        Command::Conformance { mut opts, bless, filters } => {
            opts.filters = filters;
            (Task::Conformance, opts.for_conformance(), bless)
        }
        Command::Shell { opts } => (Task::Shell, opts, false),
        Command::Exec { opts, command } => (Task::Exec(command), opts, false),
        Command::Soak { mut opts, minutes, workers, max_device_rss } => {
            soak_rss = Some(max_device_rss);
            opts.guest_bins.push(soak::GUEST_BIN.into());
            if let Ok(flags) = format!("all=--trace-limit {}", soak::TRACE_LIMIT).parse() {
                opts.device_flags.push(flags);
            }
            // The workload's own time comes on top of the flavour's limit for a boot and setup.
            // CAST: a soak's seconds fit in u64.
            opts.timeout = opts.timeout.or(Some(opts.kernel.default_timeout() + (minutes * 60.0) as u64));
            (Task::Exec(soak::command(minutes, workers)), opts, false)
        }
        Command::Doctor => return doctor::run(&compile::repo_root()),
    };
    if let Err(e) = sys::install_signal_handlers() {
        say(format_args!("cannot install signal handlers: {e}"));
    }
    if let Err(e) = sys::become_child_subreaper() {
        say(format_args!("cannot become a child subreaper: {e}"));
    }
    let _terminal = sys::TerminalGuard::save();

    let repo = compile::repo_root();
    let mut ws = compile::Workspace::new(repo.clone());
    let run = match RunDir::create(&artifacts::runs_root(&ws.target_dir), task.name()) {
        Ok(run) => run,
        Err(e) => {
            say(format_args!("FAILED: {}", error_chain(&e)));
            return ExitCode::from(1);
        }
    };
    say(format_args!("run directory: {}", run.path.display()));
    let mut steps = Steps::new(opts.verbose, run.build_log());
    ws.output = steps.output.clone();

    let mut notes = Vec::new();
    let mut prepared = match prepare(&task, &mut opts, &repo, &run, &ws, &mut steps) {
        Ok(p) => p,
        Err(e) => {
            let verdict = match sys::pending_signal() {
                Some(signal) => Verdict {
                    code: 128 + signal,
                    reason: format!("interrupted by {} during setup", sys::signal_name(signal)),
                },
                None => Verdict::failure(format!("setup failed: {}", error_chain(e.as_ref()))),
            };
            let tail = steps.log_tail(LOG_TAIL_LINES);
            if !tail.is_empty() {
                say(format_args!("last lines of {}:", run.build_log().display()));
                for line in tail {
                    eprintln!("  {line}");
                }
            }
            return finish(&run, &argv, None, None, &steps, &notes, &verdict, &opts);
        }
    };
    if opts.verbose || matches!(task, Task::Shell) {
        say(format_args!(
            "starting {} device(s) and QEMU (timeout {} s){}",
            opts.device_count(),
            opts.timeout(),
            if matches!(task, Task::Shell) {
                "; device logs go to the run directory, Ctrl-C ends the guest"
            } else {
                ""
            }
        ));
    } else {
        say(format_args!("boot: {} device(s) and QEMU (timeout {} s)", opts.device_count(), opts.timeout()));
    }
    let plan = prepared.plan.take().expect("prepared once");
    let facts = match supervise::run(plan) {
        Ok(facts) => facts,
        Err(e) => {
            let verdict = Verdict::failure(format!("run failed: {}", error_chain(&e)));
            return finish(&run, &argv, Some(&prepared), None, &steps, &notes, &verdict, &opts);
        }
    };
    for failure in &facts.device_failures {
        eprintln!("belfry: device {} {}; last lines of device{}.log:", failure.index, failure.status, failure.index);
        for line in &failure.tail {
            eprintln!("  dev{}| {line}", failure.index);
        }
    }
    if let Some(t) = facts.guest_time {
        say(format_args!("guest ran {:.1} s", t.as_secs_f64()));
    }
    if matches!(task, Task::Conformance) {
        if let Some(note) = save_timeline(&run) {
            if opts.verbose {
                say(&note);
            }
            notes.push(note);
        }
        let results = std::fs::read(run.results()).unwrap_or_default();
        if let Some(note) = results::save(&String::from_utf8_lossy(&results), &run.path) {
            say(&note);
            notes.push(note);
        }
    }
    let note =
        belfry_trace::perfetto::write_run(&run.path).unwrap_or_else(|e| format!("trace.perfetto not written: {e}"));
    say(&note);
    notes.push(note);
    let mut verdict = verdict::judge(&facts, prepared.timeout);
    if verdict.passed() && matches!(task, Task::Conformance) && opts.no_module {
        notes.push("lspci golden comparison skipped: --no-module (no driver bound)".into());
    } else if verdict.passed() && matches!(task, Task::Conformance) {
        match check_golden(&repo, &run, &opts, bless) {
            Ok(note) => {
                say(&note);
                notes.push(note);
            }
            Err(v) => verdict = v,
        }
    }
    if let (true, Some(max_rss)) = (verdict.passed(), soak_rss) {
        match soak::judge(&run, usize::from(opts.device_count()), max_rss) {
            Ok(lines) => {
                for line in lines {
                    say(&line);
                    notes.push(line);
                }
            }
            Err(reason) => verdict = Verdict::failure(reason),
        }
    }
    if !verdict.passed() && !opts.verbose {
        report::failure(&run, &facts, usize::from(opts.device_count()));
    }
    finish(&run, &argv, Some(&prepared), Some(&facts), &steps, &notes, &verdict, &opts)
}

#[allow(clippy::too_many_arguments)]
fn finish(
    run: &RunDir,
    argv: &[String],
    prepared: Option<&Prepared>,
    facts: Option<&Facts>,
    steps: &Steps,
    notes: &[String],
    verdict: &Verdict,
    opts: &RunOpts,
) -> ExitCode {
    write_summary(run, argv, prepared, facts, steps, notes, verdict);
    if verdict.passed() && !opts.keep {
        let _ = std::fs::remove_file(run.initramfs());
    }
    let _ = std::fs::remove_dir(run.socket_dir());
    say(format_args!("run directory: {}", run.path.display()));
    if verdict.passed() {
        say(format_args!("PASSED: {}", verdict.reason));
    } else {
        say(format_args!("FAILED: {}", verdict.reason));
    }
    ExitCode::from(u8::try_from(verdict.code).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    /// Tests that start processes run one at a time: the supervisor kills every descendant
    /// of the (shared) test process when it stops.
    pub static PROCESSES: std::sync::Mutex<()> = std::sync::Mutex::new(());

    use super::*;

    #[test]
    fn conformance_flags_parse() {
        let cli = Cli::try_parse_from([
            "belfry-launcher",
            "conformance",
            "--devices",
            "2",
            "--device-flags",
            "1=--inject no-interrupts",
            "--device-flags=all=--vram-size 16M",
            "--kernel-append",
            "rdinit=/no-such-init",
            "--bless",
        ])
        .unwrap();
        let Command::Conformance { opts, bless, filters } = cli.command else { panic!("not conformance") };
        assert!(filters.is_empty());
        assert!(!opts.verbose);
        assert!(bless);
        assert_eq!(opts.devices, Some(2));
        assert_eq!(opts.timeout(), 300);
        assert_eq!(opts.accel, AccelChoice::Auto);
        assert_eq!(opts.device_flags[0].target, Target::Index(1));
        assert_eq!(opts.device_flags[0].args, vec!["--inject", "no-interrupts"]);
        assert_eq!(opts.device_flags[1].target, Target::All);
        assert_eq!(opts.kernel_append.as_deref(), Some("rdinit=/no-such-init"));
    }

    #[test]
    fn conformance_defaults_to_the_suite_layout_and_binary() {
        let cli = Cli::try_parse_from(["belfry-launcher", "conformance"]).unwrap();
        let Command::Conformance { opts, .. } = cli.command else { panic!("not conformance") };
        let opts = opts.for_conformance();
        assert_eq!(usize::from(opts.device_count()), belfry_suite_layout::LAYOUT.len());
        assert_eq!(opts.device_flags[0].target, Target::Index(1));
        assert_eq!(opts.device_flags[0].args, vec!["--doorbells", "2"]);
        assert_eq!(opts.device_flags[1].args, vec!["--doorbell-model", "global"]);
        assert_eq!(opts.device_flags[4].target, Target::Index(5));
        assert_eq!(opts.device_flags[4].args, vec!["--interrupt-form", "scan-all"]);
        assert_eq!(opts.device_flags[5].target, Target::Index(6));
        assert_eq!(opts.device_flags[5].args[..2], ["--inject", "slow-monitored-updates"]);
        assert_eq!(opts.device_flags[6].target, Target::Index(7));
        assert_eq!(opts.device_flags[6].args, vec!["--inject", "no-fence-interrupts"]);
        assert_eq!(opts.device_flags[7].target, Target::Index(8));
        assert_eq!(opts.device_flags[7].args, vec!["--inject", "mailbox-stall"]);
        assert_eq!(opts.device_flags[8].target, Target::Index(9));
        assert_eq!(opts.device_flags[8].args, vec!["--no-native-fences"]);
        assert_eq!(opts.device_flags[9].target, Target::Index(10));
        assert_eq!(opts.device_flags[9].args, vec!["--doorbell-transport", "shared"]);
        assert_eq!(opts.device_flags[11].args, vec!["--no-cmd-ring"]);
        assert_eq!(opts.guest_bins, vec!["belfry-conformance", "belfry-conformance:belfry-timeline"]);
        let cli =
            Cli::try_parse_from(["belfry-launcher", "conformance", "--device-flags", "all=--no-cmd-ring"]).unwrap();
        let Command::Conformance { opts, .. } = cli.command else { panic!("not conformance") };
        let opts = opts.for_conformance();
        assert_eq!(usize::from(opts.device_count()), belfry_suite_layout::LAYOUT.len(), "all= keeps the layout");
        assert_eq!(opts.device_flags.last().map(|f| f.target), Some(Target::All));
        let cli = Cli::try_parse_from(["belfry-launcher", "conformance", "--devices", "2", "--no-module"]).unwrap();
        let Command::Conformance { opts, .. } = cli.command else { panic!("not conformance") };
        let opts = opts.for_conformance();
        assert_eq!((opts.device_count(), opts.device_flags.len(), opts.guest_bins.len()), (2, 0, 0));
    }

    #[test]
    fn filters_and_verbosity_parse_and_a_layout_can_shrink() {
        let cli = Cli::try_parse_from(["belfry-launcher", "conformance", "-v", "--filter", "FEN", "--filter=RACE-06"])
            .unwrap();
        let Command::Conformance { mut opts, filters, .. } = cli.command else { panic!("not conformance") };
        assert!(opts.verbose);
        opts.filters = filters;
        let mut opts = opts.for_conformance();
        assert_eq!(opts.filters, vec!["FEN", "RACE-06"]);
        assert!(opts.suite_layout);
        opts.set_layout(&["--inject no-fence-interrupts"]);
        assert_eq!(opts.device_count(), 2);
        assert_eq!(opts.device_flags.len(), 1);
        assert_eq!(opts.device_flags[0].target, Target::Index(1));
        assert_eq!(opts.device_flags[0].args, vec!["--inject", "no-fence-interrupts"]);
        let cli = Cli::try_parse_from(["belfry-launcher", "conformance", "--devices", "1", "--filter", "x"]).unwrap();
        let Command::Conformance { opts, .. } = cli.command else { panic!("not conformance") };
        assert!(!opts.for_conformance().suite_layout, "devices chosen on the command line stay");
        assert!(matches!(Cli::try_parse_from(["belfry-launcher", "doctor"]).unwrap().command, Command::Doctor));
        assert!(Cli::try_parse_from(["belfry-launcher", "exec", "--filter", "x", "--", "ls"]).is_err());
    }

    #[test]
    fn exec_takes_the_command_after_the_separator() {
        let cli = Cli::try_parse_from(["belfry-launcher", "exec", "--no-module", "--", "ls", "-l", "/dev"]).unwrap();
        let Command::Exec { opts, command } = cli.command else { panic!("not exec") };
        assert!(opts.no_module);
        assert_eq!(command, vec!["ls", "-l", "/dev"]);
        assert!(Cli::try_parse_from(["belfry-launcher", "exec"]).is_err());
    }

    #[test]
    fn bad_flags_are_rejected() {
        for args in [
            &["belfry-launcher", "conformance", "--devices", "0"][..],
            &["belfry-launcher", "conformance", "--device-flags", "x=--y"],
            &["belfry-launcher", "conformance", "--accel", "hvf"],
            &["belfry-launcher", "shell", "--bless"],
        ] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?} accepted");
        }
    }
}
