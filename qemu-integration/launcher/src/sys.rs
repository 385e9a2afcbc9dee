//! The few operating-system calls the launcher needs beyond `std`: signal handling, process
//! groups and trees, parent-death signals, terminal state and the few facts `doctor` asks
//! about (effective uid, write access, free space), and the affinity and slice calls of
//! `--placement`. All of the crate's `unsafe`
//! code lives in this module.
//!
//! Implementation note: the signal handler only stores the signal number in an atomic; the
//! supervisor loop polls [`pending_signal`] every tick and does the real work (killing the
//! children) in normal context. Handlers installed with `sigaction` are reset to the default
//! disposition by `execve`, so children are not affected by them.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// The last termination signal received (0: none).
static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn record_signal(signal: libc::c_int) {
    PENDING_SIGNAL.store(signal, Ordering::SeqCst);
}

/// Installs handlers for SIGINT, SIGTERM and SIGHUP that record the signal for
/// [`pending_signal`] instead of terminating the launcher.
pub fn install_signal_handlers() -> io::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: `sigaction` is plain data; all-zero is a valid initial value.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = record_signal as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        // SAFETY: `action.sa_mask` is a valid, writable sigset_t.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: `action` is fully initialised and `record_signal` is async-signal-safe (it
        // only stores to an atomic).
        let rc = unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The termination signal received since the handlers were installed, if any.
pub fn pending_signal() -> Option<i32> {
    match PENDING_SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// A signal's conventional name, for messages.
pub fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGABRT => "SIGABRT".into(),
        other => format!("signal {other}"),
    }
}

// The scheduler's calls of `--placement` (`boot/placement.rs`).

/// The CPUs this process may run on.
///
/// # Errors
/// `sched_getaffinity` failed.
pub fn available_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; zeroed is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer and size describe `set`, which the call fills.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET reads `set` within CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize).filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) }).collect())
}

/// `SCHED_ATTR_SIZE_VER0`: the size of the `struct sched_attr` every kernel since 3.14 reads.
const SCHED_ATTR_SIZE: u32 = 48;
const _: () = assert!(std::mem::size_of::<libc::sched_attr>() == SCHED_ATTR_SIZE as usize);

/// A fair-class `struct sched_attr` (`SCHED_ATTR_SIZE_VER0`) of `policy` with `slice`.
fn sched_attr(policy: libc::c_int, slice: Duration) -> libc::sched_attr {
    libc::sched_attr {
        size: SCHED_ATTR_SIZE,
        // CAST: the policies are small non-negative constants.
        sched_policy: policy as u32,
        sched_flags: 0,
        sched_nice: 0,
        sched_priority: 0,
        sched_runtime: u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX),
        sched_deadline: 0,
        sched_period: 0,
    }
}

/// Asks for a fair-class slice of `slice` for thread `tid` (0: the calling thread).
pub fn set_slice(tid: libc::pid_t, slice: Duration) -> io::Result<()> {
    let attr = sched_attr(libc::SCHED_OTHER, slice);
    // SAFETY: sched_setattr reads `attr`, whose size field says how much.
    if unsafe { libc::syscall(libc::SYS_sched_setattr, tid, &attr as *const libc::sched_attr, 0u32) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The fair-class slice of thread `tid` (0: the calling thread) in nanoseconds, as
/// `sched_getattr` reports it (0 from kernels without custom slices).
pub fn slice_of(tid: libc::pid_t) -> io::Result<u64> {
    let mut attr = sched_attr(libc::SCHED_OTHER, Duration::ZERO);
    // SAFETY: sched_getattr writes at most `attr.size` bytes into `attr`.
    let r = unsafe { libc::syscall(libc::SYS_sched_getattr, tid, &mut attr as *mut libc::sched_attr, attr.size, 0u32) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(attr.sched_runtime)
}

/// Pins the process `command` starts to `cpus` and, with `slice`, asks for that fair-class
/// slice, between fork and exec (a refused slice is ignored; a refused affinity fails the spawn).
pub fn pin_before_exec(command: &mut Command, cpus: &[usize], slice: Option<Duration>) {
    // SAFETY: cpu_set_t is plain data; zeroed is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: CPU_SET writes within `set` for cpu < CPU_SETSIZE (the callers' CPUs come
        // from `available_cpus`).
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: the closure runs between fork and exec and makes two system calls on the calling
    // process, which are async-signal-safe; it allocates nothing and takes no locks.
    unsafe {
        command.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(slice) = slice {
                let _ = set_slice(0, slice);
            }
            Ok(())
        });
    }
}

/// The host CPU's model name (`/proc/cpuinfo`), for the run's summary.
pub fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("model name"))?;
    Some(line.split_once(':')?.1.trim().to_string())
}

/// The host's load averages over 1, 5 and 15 minutes (`/proc/loadavg`), as it prints them.
pub fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(text.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

/// Makes the launcher the reaper of its orphaned descendants, so that a grandchild whose
/// parent died (QEMU below `unshare`/`chroot`) stays findable by [`descendants`].
pub fn become_child_subreaper() -> io::Result<()> {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes one integer argument and touches no memory.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks the kernel to SIGKILL the child spawned from `command` when the launcher dies, so
/// that even a SIGKILLed launcher leaves no device or QEMU behind.
///
/// The signal is tied to the spawning thread, not the process: spawn from a thread that
/// outlives the child (the main thread, or a guest's supervising thread, which stops its
/// children before it ends).
pub fn kill_child_with_parent(command: &mut Command) {
    // SAFETY: the closure runs between fork and exec and only calls `prctl` and `getppid`,
    // which are async-signal-safe; it allocates nothing and takes no locks.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before the prctl: then we are orphaned already.
            if libc::getppid() == 1 {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Sends `signal` to process `pid`; a process that is already gone is not an error.
pub fn kill(pid: u32, signal: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) takes plain integers; a positive pid names one process.
    unsafe { libc::kill(pid, signal) };
}

/// Sends `signal` to every process of process group `pgid`.
pub fn kill_group(pgid: u32, signal: i32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) takes plain integers; a negative pid names a process group.
    unsafe { libc::kill(-pgid, signal) };
}

/// Reaps `pid` if it is a zombie child of ours (an orphan reparented to the launcher);
/// returns whether it was reaped.
pub fn reap(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer; WNOHANG never blocks.
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) == pid }
}

/// Whether the launcher runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether this user may create files in directory `dir` (`access(W_OK)`).
pub fn writable(dir: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `path` is a valid NUL-terminated string alive for the call.
    unsafe { libc::access(path.as_ptr(), libc::W_OK) == 0 }
}

/// Bytes available to unprivileged users on the file system holding `path` (`statvfs`).
pub fn free_bytes(path: &std::path::Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid NUL-terminated string and `st` a writable statvfs, both alive
    // for the call.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// The host's `CLOCK_MONOTONIC` in nanoseconds (the clock of the devices' trace headers).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// The launcher's process id.
pub fn own_pid() -> u32 {
    std::process::id()
}

/// Parent pid and state from the contents of a `/proc/<pid>/stat` file.
pub fn parse_stat(stat: &str) -> Option<(u32, char)> {
    // The command name is in parentheses and may itself contain spaces or parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state))
}

/// Every live (non-zombie) descendant of `root`, children before grandchildren.
pub fn descendants(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((ppid, state)) = parse_stat(&stat) {
            if state != 'Z' {
                children.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut seen = HashSet::new();
    let mut order = Vec::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
            if seen.insert(child) {
                order.push(child);
                queue.push(child);
            }
        }
    }
    order
}

/// Terminal attributes and file status flags of standard input, restored on drop (QEMU puts
/// the terminal in raw, non-blocking mode for `shell`; if it is killed it cannot restore it).
pub struct TerminalGuard {
    saved: Option<(libc::termios, libc::c_int)>,
}

impl TerminalGuard {
    /// Saves the state of standard input if it is a terminal.
    pub fn save() -> Self {
        // SAFETY: `termios` is plain data; all-zero is a valid initial value.
        let mut termios: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: fd 0 is checked with isatty first; `termios` is a valid out-pointer and
        // F_GETFL takes no argument.
        let saved = unsafe {
            if libc::isatty(libc::STDIN_FILENO) == 1 && libc::tcgetattr(libc::STDIN_FILENO, &mut termios) == 0 {
                let flags = libc::fcntl(libc::STDIN_FILENO, libc::F_GETFL);
                (flags >= 0).then_some((termios, flags))
            } else {
                None
            }
        };
        Self { saved }
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        if let Some((termios, flags)) = &self.saved {
            // SAFETY: both values came from the same descriptor. SIGTTOU is ignored around
            // tcsetattr so a launcher in a background group is not stopped by it.
            unsafe {
                libc::fcntl(libc::STDIN_FILENO, libc::F_SETFL, *flags);
                let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, termios);
                libc::signal(libc::SIGTTOU, old);
            }
        }
    }
}

/// Tests that start processes run one at a time: the supervisor kills every descendant of the
/// (shared) test process when it stops.
#[cfg(test)]
pub static PROCESSES: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parsing_survives_odd_command_names() {
        let stat = "4242 (qemu (x) y) S 17 4242 4242 0 -1 4194560 ...";
        assert_eq!(parse_stat(stat), Some((17, 'S')));
        assert_eq!(parse_stat("1 (init) Z 0 1"), Some((0, 'Z')));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn a_spawned_child_is_a_descendant() {
        let _serial = crate::sys::PROCESSES.lock().unwrap_or_else(|e| e.into_inner());
        let mut child = Command::new("sleep").arg("5").spawn().expect("spawn sleep");
        assert!(descendants(own_pid()).contains(&child.id()));
        kill(child.id(), libc::SIGKILL);
        child.wait().expect("wait");
    }
}
