//! The supervisor: starts the devices, waits for their sockets, starts QEMU, streams every
//! output, watches for the end (guest exit line and QEMU exit, a panic, a dead device, the
//! timeout, a signal), then stops every child and returns the facts for the verdict.
//!
//! Implementation note: children are spawned with a parent-death signal by the thread that
//! supervises their guest ([`run_all`]: one thread a guest, which ends only after its
//! children); devices (and QEMU, unless it owns the terminal) get their own process groups so
//! a terminal Ctrl-C reaches only the launcher, which stops them in order: SIGTERM to each
//! group, a grace period, SIGKILL, then SIGKILL to any descendant left (the launcher is a
//! child subreaper, so orphans of `unshare`/`chroot` chains are still its descendants).

use std::fs::File;
use std::io::Write;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::boot::console::{self, ConsoleState, Event, Source};
use crate::boot::devices::{self, Device, DeviceSpec};
use crate::boot::qmp::Qmp;
use crate::boot::wake::Waker;
use crate::sys;

/// How long a device may take to create its socket.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(15);
/// How long devices may take to exit by themselves after QEMU is gone.
const DEVICE_EXIT_GRACE: Duration = Duration::from_secs(3);
/// How long a child may take to exit after SIGTERM.
const TERM_GRACE: Duration = Duration::from_secs(3);
/// How often the supervisor looks at its children.
const TICK: Duration = Duration::from_millis(50);
/// How long a guest that ran out of time has, after the NMI, to print its backtraces and end.
pub const NMI_GRACE: Duration = Duration::from_secs(15);
/// How long a streamed guest's console may stay silent before its kernel starts init: past it,
/// the boot counts as stopped (`Plan::boot_stall`). A kernel booting under TCG on a loaded host
/// is silent for a few seconds at most; one that stopped (two such boots in `ci/test`, both in
/// an early `stop_machine`, on two cores shared by four guests) stays silent.
pub const BOOT_STALL: Duration = Duration::from_secs(60);
/// The prefix of the file names of the logs of a boot that stopped before init
/// (`stalled-boot.console.log`).
pub const STALLED_BOOT: &str = "stalled-boot";
/// Lines of a device log shown when it fails.
pub const LOG_TAIL_LINES: usize = 20;

/// Errors of this module (failures of the launcher itself, not verdicts).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A log file could not be created.
    #[error("Creating {}", path.display())]
    Log {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// QEMU could not be started.
    #[error("Starting QEMU")]
    SpawnQemu(#[source] std::io::Error),
    /// A device could not be started.
    #[error(transparent)]
    Device(#[from] devices::Error),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, Error>;

/// How the console is connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsoleMode {
    /// Piped through the launcher, prefixed `guest| ` and parsed.
    Stream,
    /// The terminal belongs to QEMU (interactive `shell`); QEMU logs the console itself.
    Terminal,
}

/// Everything needed to run one guest.
pub struct Plan {
    /// The device binary.
    pub device_binary: PathBuf,
    /// One spec per device.
    pub devices: Vec<DeviceSpec>,
    /// The QEMU command (host binary or `provision.sh run-qemu`), without stdio settings.
    pub qemu: Command,
    /// How the console is connected.
    pub console_mode: ConsoleMode,
    /// The guest console log (written by the launcher in stream mode).
    pub console_log: PathBuf,
    /// QEMU's stderr log.
    pub qemu_log: PathBuf,
    /// The limit from QEMU's start to its exit.
    pub timeout: Duration,
    /// What reaches the terminal in stream mode (everything is always in the logs).
    pub show: Show,
    /// QEMU's monitor socket (stream mode): key presses when the guest asks to be woken, and
    /// an NMI for the guest's backtraces when the run hits its timeout.
    pub qmp: Option<PathBuf>,
    /// The guest's name on the terminal when several run side by side (`guest 2`).
    pub label: Option<String>,
    /// In stream mode: a guest whose console stays silent this long before its kernel starts
    /// init ([`console::is_init_start`]) is asked for its backtraces (an NMI), stopped with its
    /// devices, and booted once more, the first boot's logs set aside
    /// ([`StalledBoot`]). `None`: no such watch.
    pub boot_stall: Option<Duration>,
}

/// What a streaming run shows on the terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Show {
    /// Every line of the guest console, QEMU and the devices, prefixed (`-v`).
    All,
    /// The guest console, prefixed (`exec` without `-v`: the command's output).
    GuestConsole,
    /// A boot line and the console's headlines ([`console::is_headline`]): the suite's
    /// result lines, totals and failures (`conformance` without `-v`).
    Headlines,
}

/// A device that ended badly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceFailure {
    /// Device index.
    pub index: usize,
    /// How it ended ("exit status: 1", "signal: 11 (SIGSEGV)", "socket never appeared").
    pub status: String,
    /// Whether it ended before the guest did (at start-up or while QEMU ran).
    pub during_run: bool,
    /// The last lines of its log.
    pub tail: Vec<String>,
}

/// What happened during the run.
#[derive(Debug, Default)]
pub struct Facts {
    /// What the console said.
    pub console: ConsoleState,
    /// QEMU's exit status, if it exited by itself.
    pub qemu_status: Option<ExitStatus>,
    /// The last lines QEMU wrote on stderr.
    pub qemu_tail: Vec<String>,
    /// Devices that ended badly.
    pub device_failures: Vec<DeviceFailure>,
    /// The run hit the timeout.
    pub timed_out: bool,
    /// The last console line when the run hit the timeout (before the NMI's output).
    pub last_line_at_timeout: Option<String>,
    /// What the NMI injected at the timeout brought.
    pub stacks: Option<Stacks>,
    /// A termination signal stopped the run.
    pub signal: Option<i32>,
    /// From QEMU's start to its exit (or to the end of the run).
    pub guest_time: Option<Duration>,
    /// A first boot that stopped in the kernel before init and was done again.
    pub stalled_boot: Option<StalledBoot>,
    /// Why the launcher could not supervise this guest (a log it could not create, QEMU or a
    /// device it could not start): its run failed whatever else these facts say.
    pub launcher_error: Option<String>,
}

/// What the NMI injected into a guest that ran out of time brought.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stacks {
    /// The guest panicked on it: its CPUs' backtraces and blocked tasks are on the console.
    Printed,
    /// No panic within [`NMI_GRACE`]: the guest's CPUs ran no handler, or its kernel ignores
    /// unknown NMIs (one booted without `unknown_nmi_panic`).
    NoAnswer,
    /// The NMI could not be injected (QEMU's monitor refused or was gone).
    NotInjected(String),
}

/// A boot whose kernel stopped before it started init ([`Plan::boot_stall`]): nothing of the
/// guest's own had run (no module, no test), so the guest was booted again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StalledBoot {
    /// The console's last line.
    pub last_line: Option<String>,
    /// How long the console had been silent.
    pub silent: Duration,
    /// What the NMI brought (`None`: no monitor socket).
    pub stacks: Option<Stacks>,
    /// The boot's logs, renamed to `stalled-boot.*`.
    pub kept: Vec<PathBuf>,
}

impl StalledBoot {
    /// One line for the run's output and `summary.txt`.
    pub fn describe(&self) -> String {
        let last = self.last_line.as_deref().map(|l| format!(" after \"{l}\"")).unwrap_or_default();
        // The console log is the first set aside.
        let console = match self.kept.first() {
            Some(path) => path.display().to_string(),
            None => format!("{STALLED_BOOT}.console.log (not kept)"),
        };
        let stacks = match &self.stacks {
            Some(Stacks::Printed) => format!("its backtraces are in {console}"),
            Some(Stacks::NoAnswer) => format!("an NMI brought no backtraces; its console is in {console}"),
            Some(Stacks::NotInjected(why)) => format!("no NMI for its backtraces ({why}); its console is in {console}"),
            None => format!("its console is in {console}"),
        };
        let silent = crate::message::format_duration(self.silent);
        format!(
            "the kernel stopped before init (no console line for {silent}{last}), before anything of the run's own; {stacks}; booted it again"
        )
    }
}

/// `path` with [`STALLED_BOOT`] before its file name (`device0.trace.jsonl.gz` becomes
/// `stalled-boot.device0.trace.jsonl.gz`: what reads a run's `device<I>.*` files sees only the
/// boot that ran).
fn stalled_name(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!("{STALLED_BOOT}.{name}"))
}

/// Sets a stopped boot's logs aside ([`stalled_name`]) and removes its devices' sockets, so
/// the next boot starts from none of them; returns the logs kept.
fn set_aside(plan: &Plan, specs: &[DeviceSpec]) -> Vec<PathBuf> {
    let mut logs = vec![plan.console_log.clone(), plan.qemu_log.clone()];
    for spec in specs {
        logs.extend([spec.log.clone(), spec.trace.clone()]);
        logs.extend(spec.record.clone());
        let _ = std::fs::remove_file(&spec.socket);
    }
    logs.into_iter()
        .filter_map(|log| {
            let kept = stalled_name(&log);
            std::fs::rename(&log, &kept).ok().map(|()| kept)
        })
        .collect()
}

/// A child process under supervision.
struct Supervised {
    name: String,
    child: Child,
    /// Its own process group (its pid), if it has one.
    group: Option<u32>,
    status: Option<ExitStatus>,
    /// We signalled it: its death is not a failure.
    stopped_by_us: bool,
    /// Its exit was already looked at by `check_devices`.
    reported: bool,
}

impl Supervised {
    fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.status = Some(status);
            }
        }
        self.status
    }

    fn signal(&mut self, signal: i32) {
        if self.poll().is_some() {
            // Its group may still hold processes (a forked child): signal them too.
            if let Some(group) = self.group {
                sys::kill_group(group, signal);
            }
            return;
        }
        self.stopped_by_us = true;
        match self.group {
            Some(group) => sys::kill_group(group, signal),
            None => sys::kill(self.child.id(), signal),
        }
    }
}

/// Describes an exit status for messages.
pub fn describe_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by {}", sys::signal_name(signal)),
        _ => status.to_string(),
    }
}

/// Prints streamed lines to the terminal.
struct Printer {
    mode: ConsoleMode,
    show: Show,
    /// The guest's name when several run side by side: put before its lines.
    label: Option<String>,
    /// When QEMU started (for the boot line of a quiet run).
    qemu_started: Option<Instant>,
    /// The boot line was printed.
    booted: bool,
}

/// The guest scripts' prefix: their first line means the guest has booted.
const GUEST_SCRIPT_PREFIX: &str = "belfry-guest: ";

impl Printer {
    fn line(&mut self, source: Source, text: &str) {
        match (self.mode, source) {
            (ConsoleMode::Stream, Source::Guest) if self.show == Show::Headlines => {
                if !self.booted && text.starts_with(GUEST_SCRIPT_PREFIX) {
                    self.booted = true;
                    let after = self.qemu_started.map(|t| crate::message::format_duration(t.elapsed()));
                    let guest = self.label.as_deref().unwrap_or("guest");
                    eprintln!("belfry: boot: {guest} up after {}", after.unwrap_or_else(|| "?".into()));
                }
                if console::is_headline(text) {
                    let mut out = std::io::stdout().lock();
                    let _ = match &self.label {
                        Some(label) => writeln!(out, "[{label}] {text}"),
                        None => writeln!(out, "{text}"),
                    };
                }
            }
            (ConsoleMode::Stream, Source::Qemu | Source::Device(_)) if self.show != Show::All => {}
            (ConsoleMode::Stream, _) => {
                let mut out = std::io::stdout().lock();
                let _ = match &self.label {
                    Some(label) => writeln!(out, "[{label}] {source}| {text}"),
                    None => writeln!(out, "{source}| {text}"),
                };
            }
            // The terminal is QEMU's (raw mode): device logs go to their files only, QEMU's
            // own messages are shown with explicit carriage returns.
            (ConsoleMode::Terminal, Source::Qemu) => eprint!("{source}| {text}\r\n"),
            (ConsoleMode::Terminal, _) => {}
        }
    }
}

/// The run in progress.
struct Supervisor {
    tx: Sender<Event>,
    rx: Receiver<Event>,
    readers: Vec<JoinHandle<()>>,
    devices: Vec<(DeviceSpec, Supervised)>,
    qemu: Option<Supervised>,
    printer: Printer,
    facts: Facts,
    qemu_lines: std::collections::VecDeque<String>,
    guest_eof: bool,
    waker: Option<Waker>,
    /// When the guest console last printed a line (QEMU's start before its first).
    last_guest_line: Instant,
    /// The kernel started init ([`console::is_init_start`]).
    init_started: bool,
    /// The boot stopped before init ([`Plan::boot_stall`]).
    stalled: Option<StalledBoot>,
}

impl Supervisor {
    fn new(mode: ConsoleMode, show: Show, label: Option<String>) -> Self {
        let (tx, rx) = mpsc::channel();
        Self {
            tx,
            rx,
            readers: Vec::new(),
            devices: Vec::new(),
            qemu: None,
            printer: Printer { mode, show, label, qemu_started: None, booted: false },
            facts: Facts::default(),
            qemu_lines: Default::default(),
            guest_eof: false,
            waker: None,
            last_guest_line: Instant::now(),
            init_started: false,
            stalled: None,
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Line(source, text) => {
                self.printer.line(source, &text);
                match source {
                    Source::Guest => {
                        self.last_guest_line = Instant::now();
                        self.init_started |= console::is_init_start(&text);
                        if let Some(waker) = self.waker.as_mut() {
                            waker.plan.line(&text, Instant::now());
                        }
                        self.facts.console.feed(&text);
                    }
                    Source::Qemu => {
                        if self.qemu_lines.len() == LOG_TAIL_LINES {
                            self.qemu_lines.pop_front();
                        }
                        self.qemu_lines.push_back(text);
                    }
                    Source::Device(_) => {}
                }
            }
            Event::Eof(Source::Guest) => self.guest_eof = true,
            Event::Eof(_) => {}
        }
    }

    /// Injects an NMI into the guest (which panics on it and prints every CPU's backtrace and
    /// its blocked tasks: `unknown_nmi_panic`) and reads the console until QEMU ends or
    /// [`NMI_GRACE`] passes.
    fn ask_for_stacks(&mut self, socket: &Path) -> Stacks {
        if let Err(e) = Qmp::connect(socket).and_then(|mut qmp| qmp.inject_nmi()) {
            return Stacks::NotInjected(e.to_string());
        }
        let deadline = Instant::now() + NMI_GRACE;
        while Instant::now() < deadline {
            self.pump(TICK);
            if self.qemu.as_mut().is_some_and(|q| q.poll().is_some()) {
                break;
            }
        }
        self.drain_console(deadline);
        if self.facts.console.panic.is_some() {
            Stacks::Printed
        } else {
            Stacks::NoAnswer
        }
    }

    /// Reads the console until its end (QEMU gone) or `deadline`.
    fn drain_console(&mut self, deadline: Instant) {
        while !self.guest_eof && Instant::now() < deadline {
            self.pump(Duration::from_millis(20));
        }
    }

    /// Waits up to `wait` for an event, then handles every event already queued.
    fn pump(&mut self, wait: Duration) {
        match self.rx.recv_timeout(wait) {
            Ok(event) => self.handle(event),
            Err(RecvTimeoutError::Timeout) => return,
            Err(RecvTimeoutError::Disconnected) => unreachable!("the supervisor holds a sender"),
        }
        while let Ok(event) = self.rx.try_recv() {
            self.handle(event);
        }
    }

    fn stream(&mut self, source: Source, reader: impl std::io::Read + Send + 'static, log: &Path) -> Result<()> {
        let file = File::create(log).map_err(|source| Error::Log { path: log.to_path_buf(), source })?;
        self.readers.push(console::stream(source, reader, file, self.tx.clone()));
        Ok(())
    }

    /// Records devices that exited since the last call; returns true if one failed.
    fn check_devices(&mut self, during_run: bool) -> bool {
        let mut failed = false;
        for (spec, device) in &mut self.devices {
            if device.reported || device.stopped_by_us {
                continue;
            }
            if let Some(status) = device.poll() {
                device.reported = true;
                if !status.success() {
                    failed = true;
                    self.facts.device_failures.push(DeviceFailure {
                        index: spec.index,
                        status: describe_status(status),
                        during_run,
                        tail: Vec::new(),
                    });
                }
            }
        }
        failed
    }

    /// Stops every child: SIGTERM, a grace period, SIGKILL ([`sweep_descendants`] then kills
    /// what they left).
    fn stop_all(&mut self) {
        let mut all: Vec<&mut Supervised> = self.devices.iter_mut().map(|(_, d)| d).collect();
        if let Some(qemu) = self.qemu.as_mut() {
            all.insert(0, qemu);
        }
        for child in &mut all {
            child.signal(libc::SIGTERM);
        }
        let deadline = Instant::now() + TERM_GRACE;
        while Instant::now() < deadline && all.iter_mut().any(|c| c.poll().is_none()) {
            thread::sleep(Duration::from_millis(20));
        }
        for child in &mut all {
            if child.poll().is_none() {
                eprintln!("belfry: {} did not stop after SIGTERM, killing it", child.name);
                child.signal(libc::SIGKILL);
            }
            let _ = child.child.wait();
        }
    }
}

/// Kills (SIGKILL) and reaps every descendant of the launcher left once its children are
/// stopped: orphans of `unshare`/`chroot` chains, which the child subreaper inherits.
fn sweep_descendants() {
    for _ in 0..3 {
        let left = sys::descendants(sys::own_pid());
        if left.is_empty() {
            break;
        }
        for pid in &left {
            sys::kill(*pid, libc::SIGKILL);
        }
        thread::sleep(Duration::from_millis(50));
        for pid in &left {
            sys::reap(*pid);
        }
    }
}

/// Runs several guests' plans side by side, each supervised by a thread of its own (which
/// spawns its children, so their parent-death signal follows that thread), and returns what
/// happened to each, in order. The descendants left are swept once every guest has ended,
/// never while another guest runs.
pub fn run_all(plans: Vec<Plan>) -> Vec<Result<Facts>> {
    let facts = thread::scope(|scope| {
        let guests: Vec<_> = plans.into_iter().map(|plan| scope.spawn(move || run_without_sweep(plan))).collect();
        guests.into_iter().map(|g| g.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    });
    sweep_descendants();
    facts
}

/// Runs one guest's plan to its end and returns what happened, leaving the sweep of the
/// launcher's descendants to [`run_all`]. A boot that stopped before init
/// ([`Plan::boot_stall`]) is done once more, with no such watch the second time: a guest that
/// stops again runs into its timeout.
fn run_without_sweep(mut plan: Plan) -> Result<Facts> {
    let specs = plan.devices.clone();
    let (result, facts, stalled) = boot(&mut plan);
    let Some(mut stalled) = stalled else { return result.map(|()| facts) };
    stalled.kept = set_aside(&plan, &specs);
    let guest = plan.label.as_deref().unwrap_or("guest");
    let silent = crate::message::format_duration(stalled.silent);
    eprintln!("belfry: {guest}: the kernel stopped before init (no console line for {silent}): booting it again");
    plan.devices = specs;
    plan.boot_stall = None;
    let (result, mut facts, _) = boot(&mut plan);
    facts.stalled_boot = Some(stalled);
    result.map(|()| facts)
}

/// One boot of `plan`: its devices and QEMU, supervised to their end; what happened, and
/// whether the boot stopped before init.
fn boot(plan: &mut Plan) -> (Result<()>, Facts, Option<StalledBoot>) {
    let mut sup = Supervisor::new(plan.console_mode, plan.show, plan.label.clone());
    let result = run_inner(&mut sup, plan);
    sup.stop_all();
    // Every child is gone, so every pipe is closed: let the readers finish their logs.
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && sup.readers.iter().any(|r| !r.is_finished()) {
        sup.pump(Duration::from_millis(20));
    }
    while let Ok(event) = sup.rx.try_recv() {
        sup.handle(event);
    }
    for reader in sup.readers.drain(..) {
        if reader.is_finished() {
            let _ = reader.join();
        }
    }
    if sup.printer.mode == ConsoleMode::Terminal {
        // QEMU wrote the interactive console to its log file: parse it now.
        if let Ok(text) = std::fs::read(&plan.console_log) {
            for line in text.split(|&b| b == b'\n') {
                sup.facts.console.feed(&console::clean_line(line));
            }
        }
    }
    let mut facts = std::mem::take(&mut sup.facts);
    facts.qemu_tail = sup.qemu_lines.into_iter().collect();
    for failure in &mut facts.device_failures {
        if let Some((spec, _)) = sup.devices.iter().find(|(s, _)| s.index == failure.index) {
            failure.tail = crate::run_dir::log_tail(&spec.log, LOG_TAIL_LINES);
        }
    }
    (result, facts, sup.stalled)
}

fn run_inner(sup: &mut Supervisor, plan: &mut Plan) -> Result<()> {
    sup.waker = plan.qmp.clone().map(Waker::new);
    // Devices first, each with its socket in place before QEMU starts.
    for spec in plan.devices.drain(..) {
        let log = spec.log.clone();
        let Device { spec, mut child } = devices::spawn(&plan.device_binary, spec)?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let index = spec.index;
        sup.devices.push((
            spec,
            Supervised {
                name: format!("device {index}"),
                group: Some(child.id()),
                child,
                status: None,
                stopped_by_us: false,
                reported: false,
            },
        ));
        sup.stream(Source::Device(index), stderr, &log)?;
        let socket = sup.devices.last().expect("pushed").0.socket.clone();
        let start = Instant::now();
        while !socket.exists() {
            sup.pump(Duration::from_millis(20));
            if let Some(signal) = sys::pending_signal() {
                sup.facts.signal = Some(signal);
                return Ok(());
            }
            if sup.check_devices(true) {
                return Ok(());
            }
            if start.elapsed() > SOCKET_TIMEOUT {
                sup.facts.device_failures.push(DeviceFailure {
                    index,
                    status: format!("created no socket {} within {} s", socket.display(), SOCKET_TIMEOUT.as_secs()),
                    during_run: true,
                    tail: Vec::new(),
                });
                return Ok(());
            }
        }
    }

    let qemu = &mut plan.qemu;
    let qemu_log = plan.qemu_log.clone();
    match plan.console_mode {
        ConsoleMode::Stream => {
            qemu.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
        }
        ConsoleMode::Terminal => {
            // QEMU needs the terminal: it stays in the launcher's (foreground) group.
            qemu.stdin(Stdio::inherit()).stdout(Stdio::inherit()).stderr(Stdio::piped());
        }
    }
    sys::kill_child_with_parent(qemu);
    let started = Instant::now();
    sup.printer.qemu_started = Some(started);
    sup.last_guest_line = started;
    let mut child = qemu.spawn().map_err(Error::SpawnQemu)?;
    if let Some(stdout) = child.stdout.take() {
        sup.stream(Source::Guest, stdout, &plan.console_log)?;
    } else {
        sup.guest_eof = true;
    }
    let stderr = child.stderr.take().expect("stderr is piped");
    sup.stream(Source::Qemu, stderr, &qemu_log)?;
    let group = (plan.console_mode == ConsoleMode::Stream).then_some(child.id());
    sup.qemu =
        Some(Supervised { name: "QEMU".into(), child, group, status: None, stopped_by_us: false, reported: false });

    loop {
        sup.pump(TICK);
        if let Some(waker) = sup.waker.as_mut() {
            waker.tick(Instant::now());
        }
        if let Some(signal) = sys::pending_signal() {
            sup.facts.signal = Some(signal);
            break;
        }
        let qemu = sup.qemu.as_mut().expect("started above");
        let qemu_status = qemu.poll();
        if sup.check_devices(qemu_status.is_none()) {
            break;
        }
        if let Some(status) = qemu_status {
            sup.facts.qemu_status = Some(status);
            sup.facts.guest_time = Some(started.elapsed());
            // The console's last lines may still be in the pipe.
            sup.drain_console(Instant::now() + Duration::from_secs(2));
            // Devices exit by themselves when QEMU disconnects.
            let deadline = Instant::now() + DEVICE_EXIT_GRACE;
            while Instant::now() < deadline && sup.devices.iter_mut().any(|(_, d)| d.poll().is_none()) {
                sup.pump(Duration::from_millis(20));
            }
            sup.check_devices(false);
            break;
        }
        let stall = plan.boot_stall.filter(|_| plan.console_mode == ConsoleMode::Stream && !sup.init_started);
        let silent = sup.last_guest_line.elapsed();
        if stall.is_some_and(|stall| silent >= stall) {
            let last_line = sup.facts.console.last_line();
            let stacks = plan.qmp.clone().map(|socket| sup.ask_for_stacks(&socket));
            sup.stalled = Some(StalledBoot { last_line, silent, stacks, kept: Vec::new() });
            break;
        }
        if started.elapsed() >= plan.timeout {
            sup.facts.timed_out = true;
            sup.facts.guest_time = Some(started.elapsed());
            sup.facts.last_line_at_timeout = sup.facts.console.last_line();
            if let Some(socket) = &plan.qmp {
                sup.facts.stacks = Some(sup.ask_for_stacks(socket));
            }
            break;
        }
    }
    if sup.facts.guest_time.is_none() {
        sup.facts.guest_time = Some(started.elapsed());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A fake device: creates its "socket", then waits for the fake QEMU's `done` file and
    /// exits with `$FAKE_DEVICE_EXIT` (or exits at once with `$FAKE_DEVICE_CRASH`).
    const FAKE_DEVICE: &str = r#"#!/bin/sh
sock=$2
echo "listening on $sock" >&2
[ -n "$FAKE_DEVICE_CRASH" ] && { echo "fake device crashing" >&2; exit "$FAKE_DEVICE_CRASH"; }
: > "$sock"
while [ ! -e "$(dirname "$(dirname "$sock")")/done" ]; do sleep 0.05; done
echo "client disconnected" >&2
# A device failing after the guest: leave the supervisor ample time to see QEMU end first.
[ -n "$FAKE_DEVICE_EXIT" ] && sleep 1
exit "${FAKE_DEVICE_EXIT:-0}"
"#;

    struct Fixture {
        dir: tempfile::TempDir,
        device: PathBuf,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sock")).unwrap();
        let device = dir.path().join("fake-device");
        std::fs::write(&device, FAKE_DEVICE).unwrap();
        std::fs::set_permissions(&device, std::fs::Permissions::from_mode(0o755)).unwrap();
        Fixture { dir, device }
    }

    impl Fixture {
        fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }

        /// A plan whose "QEMU" runs `script` (with `$DONE` naming the done file).
        fn plan(&self, devices: usize, script: &str, timeout: Duration) -> Plan {
            let mut qemu = Command::new("sh");
            qemu.arg("-c").arg(script).env("DONE", self.path("done"));
            Plan {
                device_binary: self.device.clone(),
                devices: (0..devices)
                    .map(|index| DeviceSpec {
                        index,
                        socket: self.path(&format!("sock/device{index}.sock")),
                        trace: self.path(&format!("device{index}.trace.jsonl.gz")),
                        log: self.path(&format!("device{index}.log")),
                        record: None,
                        extra: Vec::new(),
                        pinning: None,
                    })
                    .collect(),
                qemu,
                console_mode: ConsoleMode::Stream,
                console_log: self.path("console.log"),
                qemu_log: self.path("qemu.log"),
                timeout,
                show: Show::All,
                qmp: None,
                label: None,
                boot_stall: None,
            }
        }
    }

    /// One guest's plan run as the launcher runs it.
    fn run(plan: Plan) -> Result<Facts> {
        run_all(vec![plan]).pop().expect("one guest, one result")
    }

    fn no_descendants_left() {
        let left = sys::descendants(sys::own_pid());
        assert!(left.is_empty(), "descendants left: {left:?}");
    }

    #[test]
    fn a_clean_run_collects_the_exit_line_and_logs() {
        let _serial = crate::sys::PROCESSES.lock().unwrap_or_else(|e| e.into_inner());
        let f = fixture();
        let plan = f.plan(
            2,
            "echo booting; echo 'BELFRY-EXIT 0'; echo qemu-note >&2; touch \"$DONE\"",
            Duration::from_secs(20),
        );
        let facts = run(plan).unwrap();
        assert_eq!(facts.console.exit, Some(0));
        assert!(facts.qemu_status.unwrap().success());
        assert!(facts.device_failures.is_empty(), "{:?}", facts.device_failures);
        assert!(!facts.timed_out);
        assert_eq!(std::fs::read_to_string(f.path("console.log")).unwrap(), "booting\nBELFRY-EXIT 0\n");
        assert_eq!(std::fs::read_to_string(f.path("qemu.log")).unwrap(), "qemu-note\n");
        let log = std::fs::read_to_string(f.path("device1.log")).unwrap();
        assert!(log.contains("listening on") && log.contains("client disconnected"), "{log}");
        no_descendants_left();
    }

    #[test]
    fn guests_side_by_side_each_end_on_their_own() {
        let _serial = crate::sys::PROCESSES.lock().unwrap_or_else(|e| e.into_inner());
        let (quick, slow) = (fixture(), fixture());
        let mut plans = vec![
            quick.plan(1, "echo 'BELFRY-EXIT 0'; touch \"$DONE\"", Duration::from_secs(20)),
            // Still running when the first guest ends and is stopped: it must not be stopped too.
            slow.plan(2, "sleep 1.5; echo 'BELFRY-EXIT 3'; touch \"$DONE\"", Duration::from_secs(20)),
        ];
        plans[1].label = Some("guest 2".into());
        let facts: Vec<Facts> = run_all(plans).into_iter().map(Result::unwrap).collect();
        assert_eq!(facts.iter().map(|f| f.console.exit).collect::<Vec<_>>(), [Some(0), Some(3)]);
        for f in &facts {
            assert!(f.device_failures.is_empty(), "{:?}", f.device_failures);
            assert!(f.qemu_status.is_some_and(|s| s.success()), "QEMU ended by itself");
            assert!(!f.timed_out);
        }
        assert!(slow.path("device1.log").exists() && quick.path("device0.log").exists());
        no_descendants_left();
    }

    #[test]
    fn a_device_failing_after_the_guest_is_reported() {
        let _serial = crate::sys::PROCESSES.lock().unwrap_or_else(|e| e.into_inner());
        let f = fixture();
        std::env::set_var("FAKE_DEVICE_EXIT", "4");
        let facts = run(f.plan(1, "echo 'BELFRY-EXIT 0'; touch \"$DONE\"", Duration::from_secs(20)));
        std::env::remove_var("FAKE_DEVICE_EXIT");
        let facts = facts.unwrap();
        assert_eq!(facts.device_failures.len(), 1);
        assert_eq!(facts.device_failures[0].status, "exit status 4");
        assert!(!facts.device_failures[0].during_run);
        assert!(facts.device_failures[0].tail.iter().any(|l| l == "client disconnected"));
        no_descendants_left();
    }

    #[test]
    fn a_device_dying_at_start_stops_the_run_before_qemu() {
        let _serial = crate::sys::PROCESSES.lock().unwrap_or_else(|e| e.into_inner());
        let f = fixture();
        std::env::set_var("FAKE_DEVICE_CRASH", "3");
        let facts = run(f.plan(1, "touch \"$DONE\"; echo 'BELFRY-EXIT 0'", Duration::from_secs(20)));
        std::env::remove_var("FAKE_DEVICE_CRASH");
        let facts = facts.unwrap();
        assert_eq!(facts.device_failures.len(), 1);
        assert!(facts.device_failures[0].during_run);
        assert_eq!(facts.console.exit, None, "QEMU must not have started");
        assert!(!f.path("done").exists());
        no_descendants_left();
    }

    #[test]
    fn a_timeout_kills_qemu_and_its_process_group() {
        let _serial = crate::sys::PROCESSES.lock().unwrap_or_else(|e| e.into_inner());
        let f = fixture();
        let start = Instant::now();
        // The background sleep outlives its shell's death as an orphan in QEMU's group.
        let facts = run(f.plan(1, "sleep 60 & echo 'still booting'; sleep 60", Duration::from_millis(500))).unwrap();
        assert!(facts.timed_out);
        assert_eq!(facts.console.exit, None);
        assert!(facts.device_failures.is_empty(), "devices stopped by us are not failures");
        assert!(start.elapsed() < Duration::from_secs(8), "took {:?}", start.elapsed());
        assert_eq!(facts.console.tail.back().map(String::as_str), Some("still booting"));
        no_descendants_left();
    }

    #[test]
    fn a_boot_that_stops_before_init_is_done_again_and_its_logs_kept() {
        let _serial = crate::sys::PROCESSES.lock().unwrap_or_else(|e| e.into_inner());
        let f = fixture();
        let mut plan = f.plan(
            1,
            "if [ ! -e \"$DONE.first\" ]; then : > \"$DONE.first\"; echo '[ 1.0] smpboot: stuck here'; sleep 60; fi; \
             echo '[ 2.0] Run /init as init process'; echo 'BELFRY-EXIT 0'; touch \"$DONE\"",
            Duration::from_secs(20),
        );
        plan.boot_stall = Some(Duration::from_millis(600));
        let facts = run(plan).unwrap();
        assert_eq!(facts.console.exit, Some(0), "the second boot ran");
        assert!(!facts.timed_out);
        let stalled = facts.stalled_boot.expect("the first boot stopped");
        assert_eq!(stalled.last_line.as_deref(), Some("[ 1.0] smpboot: stuck here"));
        assert!(stalled.silent >= Duration::from_millis(600));
        assert_eq!(stalled.stacks, None, "no monitor socket in this plan");
        let first = std::fs::read_to_string(f.path("stalled-boot.console.log")).unwrap();
        assert_eq!(first, "[ 1.0] smpboot: stuck here\n");
        let second = std::fs::read_to_string(f.path("console.log")).unwrap();
        assert!(!second.contains("stuck") && second.contains("BELFRY-EXIT 0"), "{second}");
        assert!(stalled.kept.contains(&f.path("stalled-boot.device0.log")), "{:?}", stalled.kept);
        assert!(f.path("device0.log").exists(), "the second boot's device logged anew");
        assert!(stalled.describe().contains("stopped before init"), "{}", stalled.describe());
        no_descendants_left();
    }

    #[test]
    fn a_guest_silent_after_init_started_is_not_booted_again() {
        let _serial = crate::sys::PROCESSES.lock().unwrap_or_else(|e| e.into_inner());
        let f = fixture();
        let mut plan = f.plan(
            1,
            "echo '[ 2.0] Run /init as init process'; sleep 1.5; echo 'BELFRY-EXIT 0'; touch \"$DONE\"",
            Duration::from_secs(20),
        );
        plan.boot_stall = Some(Duration::from_millis(500));
        let facts = run(plan).unwrap();
        assert_eq!(facts.console.exit, Some(0));
        assert_eq!(facts.stalled_boot, None);
        assert!(!f.path("stalled-boot.console.log").exists());
        no_descendants_left();
    }

    #[test]
    fn logs_set_aside_are_prefixed() {
        assert_eq!(
            stalled_name(Path::new("/r/device0.trace.jsonl.gz")),
            Path::new("/r/stalled-boot.device0.trace.jsonl.gz")
        );
        assert_eq!(stalled_name(Path::new("/r/console.log")), Path::new("/r/stalled-boot.console.log"));
    }

    #[test]
    fn a_panic_line_is_seen_before_qemu_exits() {
        let _serial = crate::sys::PROCESSES.lock().unwrap_or_else(|e| e.into_inner());
        let f = fixture();
        let facts = run(f.plan(
            1,
            "echo '[ 1.0] Kernel panic - not syncing: Attempted to kill init!'; touch \"$DONE\"; exit 0",
            Duration::from_secs(20),
        ))
        .unwrap();
        assert_eq!(facts.console.panic.as_deref(), Some("Attempted to kill init!"));
        assert_eq!(facts.console.exit, None);
        no_descendants_left();
    }
}
