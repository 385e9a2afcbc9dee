//! One test in a process of its own, so that tests can run side by side without sharing a
//! process (its identity and share of each device, its signal handlers, files and limits):
//! [`start`] forks the runner (a single-threaded process), and the child runs the test (the
//! runner's [`RunHere`]), prints its line and writes its [`Record`] to a file; the runner
//! ([`wait_any`] and [`Started::reaped`], or [`Started::finish_within`]) keeps the test's
//! output (stdout and stderr together, in a file rather than a pipe so that a process the test
//! left behind cannot hold the runner up) to print it whole when the test's turn comes. A
//! fork, not an exec of the suite's binary: the child starts with the binary and its registry
//! already loaded, which took the runner's own cost per test on the debug kernel
//! from about 80 ms to about 15 ms. A runner with more than one thread (a fork would copy
//! another thread's locks) starts the suite's own binary with [`RUN_ONE`] instead.
#![allow(unsafe_code)] // fork, setpgid, dup2, close_range, waitpid, _exit.

use std::io::Write as _;
use std::os::fd::AsRawFd as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::record::{Outcome, Record};
use crate::harness::registry::Test;
use crate::harness::tasks;

/// The flag that runs one test (by exact name) instead of the suite.
pub const RUN_ONE: &str = "--run-one";
/// The flag naming the file a [`RUN_ONE`] run writes its record to.
pub const RECORD: &str = "--record";
/// The flag naming the iteration a [`RUN_ONE`] run belongs to.
pub const ITERATION: &str = "--iteration";

/// How a forked child runs `test` on `device` in iteration `k` and writes its record to the
/// file given: the runner's `run_in_this_process`, also what [`RUN_ONE`] does.
pub type RunHere = fn(test: &Test, device: &Path, k: Option<u32>, record: &Path) -> std::io::Result<()>;

/// A test started in its own process.
pub struct Started {
    pid: libc::pid_t,
    output: PathBuf,
    record: PathBuf,
    test: Test,
    device: PathBuf,
    iteration: Option<u32>,
}

/// Starts `test` on `device` in a process of its own, in a process group of its own (with
/// whatever it starts): a fork of this process if it has one thread, else a new process of the
/// suite's binary; `dir` holds its output and record files (named by `index`); a forked child
/// runs the test with `run_here`.
///
/// # Errors
/// The process cannot be started, or the files cannot be created.
pub fn start(
    test: &Test,
    device: &Path,
    iteration: Option<u32>,
    dir: &Path,
    index: usize,
    run_here: RunHere,
) -> std::io::Result<Started> {
    let output = dir.join(format!("{index}.out"));
    let record = dir.join(format!("{index}.json"));
    let out = std::fs::File::create(&output)?;
    let pid = if single_threaded() {
        fork(test, device, iteration, &out, &record, run_here)?
    } else {
        exec(test, device, iteration, out, &record)?
    };
    Ok(Started { pid, output, record, test: *test, device: device.to_path_buf(), iteration })
}

/// Whether this process has one thread (`/proc/self/task`).
fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").map(|d| d.count() == 1).unwrap_or(false)
}

/// Forks; the child, with `out` as its stdout and stderr and no other file of this process,
/// runs the test and writes its record, then exits without returning into the runner.
fn fork(
    test: &Test,
    device: &Path,
    iteration: Option<u32>,
    out: &std::fs::File,
    record: &Path,
    run_here: RunHere,
) -> std::io::Result<libc::pid_t> {
    let null = std::fs::File::open("/dev/null")?;
    let _ = std::io::stdout().flush();
    // SAFETY: this process has one thread (checked by the caller), so the child may run any code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid > 0 {
        // SAFETY: `pid` is our child; a group of its own, as the child also asks.
        unsafe { libc::setpgid(pid, pid) };
        return Ok(pid);
    }
    // SAFETY: the child's own descriptors: stdin from /dev/null, stdout and stderr to `out`,
    // then every descriptor above them closed (an exec would have closed them: all are CLOEXEC).
    unsafe {
        libc::setpgid(0, 0);
        libc::dup2(null.as_raw_fd(), 0);
        libc::dup2(out.as_raw_fd(), 1);
        libc::dup2(out.as_raw_fd(), 2);
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
    }
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_here(test, device, iteration, record)));
    let code = match ran {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            eprintln!("conformance: writing {}: {e}", record.display());
            1
        }
        Err(_) => 101,
    };
    let _ = std::io::stdout().flush();
    // SAFETY: ends the child without unwinding into the runner's state.
    unsafe { libc::_exit(code) }
}

/// Starts the suite's binary with [`RUN_ONE`], `out` as its stdout and stderr.
fn exec(
    test: &Test,
    device: &Path,
    iteration: Option<u32>,
    out: std::fs::File,
    record: &Path,
) -> std::io::Result<libc::pid_t> {
    let err = out.try_clone()?;
    let mut command = Command::new(std::env::current_exe()?);
    command.arg(RUN_ONE).arg(test.name).arg("--device").arg(device).arg(RECORD).arg(record);
    if let Some(k) = iteration {
        command.arg(ITERATION).arg(k.to_string());
    }
    let child = command.stdin(Stdio::null()).stdout(out).stderr(err).process_group(0).spawn()?;
    // The child is waited for by its pid ([`Started`]); dropping `Child` neither waits nor kills.
    Ok(libc::pid_t::try_from(child.id()).unwrap_or(libc::pid_t::MAX))
}

/// Waits for any child of this process to end: its pid and wait status.
///
/// # Errors
/// `waitpid`'s errno (`ECHILD`: no child left).
pub fn wait_any() -> std::io::Result<(libc::pid_t, i32)> {
    wait(-1, 0)
}

/// `waitpid(pid, options)`, again after `EINTR`: the pid reaped (0 under `WNOHANG` while it runs)
/// and its status.
fn wait(pid: libc::pid_t, options: libc::c_int) -> std::io::Result<(libc::pid_t, i32)> {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, options) };
        if r >= 0 {
            return Ok((r, status));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// A wait status in words.
fn describe(status: i32) -> String {
    if libc::WIFSIGNALED(status) {
        format!("killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("exit status {}", libc::WEXITSTATUS(status))
    }
}

impl Started {
    /// The test process's pid.
    #[must_use]
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Waits for the test's process: its output and its record (a FAIL record if the process
    /// ended without writing one); a test still running after `limit` has its process group
    /// killed and fails with where its tasks waited (their kernel functions and stacks).
    #[must_use]
    pub fn finish_within(self, limit: Duration) -> (String, Record) {
        let (mut overran, mut reaped) = (None, None);
        let deadline = Instant::now() + limit;
        loop {
            match wait(self.pid, libc::WNOHANG) {
                Ok((0, _)) => {}
                Ok((_, status)) => {
                    reaped = Some(status);
                    break;
                }
                Err(_) => break,
            }
            if Instant::now() >= deadline {
                overran = Some(format!(
                    "still running after {} s, killed; its tasks waited in: {}",
                    limit.as_secs(),
                    tasks::where_threads_wait(self.pid)
                ));
                tasks::kill_group(self.pid);
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let status = match reaped {
            Some(status) => Ok(status),
            None => wait(self.pid, 0).map(|(_, status)| status),
        };
        let why = overran.unwrap_or_else(|| match status {
            Ok(s) => format!("its process ended ({}) without a result", describe(s)),
            Err(e) => format!("waiting for its process: {e}"),
        });
        self.collect(why)
    }

    /// The output and record of the test's process, which [`wait_any`] reaped with `status`.
    #[must_use]
    pub fn reaped(self, status: i32) -> (String, Record) {
        let why = format!("its process ended ({}) without a result", describe(status));
        self.collect(why)
    }

    /// The output and the record the process wrote, or a FAIL record saying `why` there is none.
    /// Whatever the test's process left running in its group is killed first: a test's processes
    /// end with it (a test that fails early may leave children waiting for a word that never
    /// comes, holding their objects; its group outlives its leader while they run, so its id
    /// is still theirs).
    fn collect(self, why: String) -> (String, Record) {
        tasks::kill_group(self.pid);
        let output = std::fs::read_to_string(&self.output).unwrap_or_default();
        let written = std::fs::read_to_string(&self.record).ok().and_then(|s| serde_json::from_str::<Record>(&s).ok());
        let _ = std::fs::remove_file(&self.output);
        let _ = std::fs::remove_file(&self.record);
        if let Some(record) = written {
            return (output, record);
        }
        let line = format!("FAIL {}: {why}\n", self.test.name);
        let record = Record {
            name: self.test.name.into(),
            outcome: Outcome::Fail,
            ids: self.test.ids.iter().map(|s| (*s).to_string()).collect(),
            reason: Some(why),
            kernel_lacks: false,
            device: Some(self.device.display().to_string()),
            seconds: 0.0,
            iteration: self.iteration,
            index: 0,
        };
        (output + &line, record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Forks a test process (the leader of a group of its own) that starts a child in its
    /// group which waits forever, and exits 0 at once: the test process's pid and the child's.
    fn a_test_process_leaving_a_child() -> (libc::pid_t, libc::pid_t) {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child calls only async-signal-safe functions before it exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: as above: setpgid, fork, pause, write, _exit.
            unsafe {
                libc::setpgid(0, 0);
                let left = libc::fork();
                if left == 0 {
                    loop {
                        libc::pause();
                    }
                }
                libc::write(fds[1], core::ptr::from_ref(&left).cast(), core::mem::size_of::<libc::pid_t>());
                libc::_exit(0);
            }
        }
        // SAFETY: the test process's group, as the child also asks.
        unsafe { libc::setpgid(pid, pid) };
        let mut left: libc::pid_t = 0;
        // SAFETY: reads one pid into a valid buffer.
        let n =
            unsafe { libc::read(fds[0], core::ptr::from_mut(&mut left).cast(), core::mem::size_of::<libc::pid_t>()) };
        assert_eq!(n, 4);
        // SAFETY: the pipe's descriptors are ours.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        (pid, left)
    }

    /// Whether `pid` is a live process (not gone, not a zombie).
    fn alive(pid: libc::pid_t) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with(['Z', 'X'])))
    }

    #[test]
    fn a_process_the_test_left_running_ends_with_the_test() {
        let (pid, left) = a_test_process_leaving_a_child();
        let dir = std::env::temp_dir().join(format!("belfry-isolated-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let test = Test {
            name: "leaves_a_child",
            ids: &[],
            needs: crate::harness::registry::Needs::Default,
            run: |_| Ok(()),
            resources: crate::harness::resources::Resources::Exclusive,
            module: "tests",
        };
        let started = Started {
            pid,
            output: dir.join("0.out"),
            record: dir.join("0.json"),
            test,
            device: PathBuf::from("/dev/belfry0"),
            iteration: None,
        };
        assert!(alive(left), "the child the test process left runs");
        let (_, record) = started.finish_within(Duration::from_secs(30));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(record.outcome, Outcome::Fail, "the process wrote no record");
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(left) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let survived = alive(left);
        // SAFETY: ends the child if the test did not (it holds this binary's output pipes).
        unsafe { libc::kill(left, libc::SIGKILL) };
        assert!(!survived, "the child the test process left is still running after the test");
    }
}
