//! Forked processes: a child runs a closure and exits with its verdict.
#![allow(unsafe_code)] // fork, waitpid, kill, _exit.

use crate::harness::registry::TestResult;
use crate::harness::runner::chain;

/// A forked child process.
#[derive(Debug)]
pub struct Child {
    pid: libc::pid_t,
    label: &'static str,
}

/// Forks; the child runs `f` (it must open its own device file), prints its failure on stderr
/// and exits 0 or 1 without running destructors of the parent's values.
///
/// # Errors
/// `fork`'s errno.
pub fn spawn(label: &'static str, f: impl FnOnce() -> TestResult) -> Result<Child, crate::Error> {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    // SAFETY: the suite is single-threaded, so the child may run arbitrary code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()).into());
    }
    if pid == 0 {
        let code = match f() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("conformance: {label}: {}", chain(e.as_ref()));
                1
            }
        };
        // SAFETY: ends the child without unwinding into the parent's state.
        unsafe { libc::_exit(code) };
    }
    unreaped().push(Forked { parent: (std::process::id(), std::thread::current().id()), pid, label });
    Ok(Child { pid, label })
}

/// A child [`spawn`] forked and nobody has reaped yet, with the process and thread that forked
/// it: a child inherits its parent's list and must not take its parent's children for its own,
/// and a thread waits only on its own children (another thread's may be another test's).
struct Forked {
    parent: (u32, std::thread::ThreadId),
    pid: libc::pid_t,
    label: &'static str,
}

/// The children [`spawn`] forked that are not reaped yet.
fn unreaped() -> std::sync::MutexGuard<'static, Vec<Forked>> {
    static UNREAPED: std::sync::Mutex<Vec<Forked>> = std::sync::Mutex::new(Vec::new());
    UNREAPED.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The failure of a child this thread forked with [`spawn`] that has exited with a failure
/// (its closure returned an error; exit status nonzero) and is not reaped yet, looked at
/// without reaping it. A wait for a word from another process ends on it: the test fails on
/// that child anyway, and its word may never come, so waiting out the limit only loses time
/// (a test whose child fails early under fault injection waited its whole channel timeout).
#[must_use]
pub fn failed_child() -> Option<String> {
    let me = (std::process::id(), std::thread::current().id());
    unreaped().iter().filter(|f| f.parent == me).find_map(|f| {
        // SAFETY: an all-zero `siginfo_t` is valid; `waitid` fills it.
        let mut info: libc::siginfo_t = unsafe { core::mem::zeroed() };
        // SAFETY: `f.pid` is our unreaped child; WNOWAIT leaves it to be reaped by its `Child`.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                libc::id_t::try_from(f.pid).ok()?,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: `waitid` succeeded, so `info` holds a child's state (or zeros: still running).
        let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
        (r == 0 && pid == f.pid && info.si_code == libc::CLD_EXITED && status != 0)
            .then(|| format!("process {} failed (exit status {status}; its reason is on stderr)", f.label))
    })
}

/// How often [`readable_within`] looks for a failed child while it waits.
const FAILED_CHILD_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Waits at most `limit` for `fd` to be readable: whether it is. Ends early with an error
/// when a child of this thread has failed ([`failed_child`]) and nothing is there to read.
///
/// # Errors
/// The failed child; `poll`'s errno.
pub fn readable_within(fd: std::os::fd::RawFd, limit: std::time::Duration) -> Result<bool, crate::Error> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let ms = i32::try_from(left.min(FAILED_CHILD_POLL).as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(format!("poll: {e}").into());
            }
        } else if r == 1 && p.revents & (libc::POLLIN | libc::POLLHUP) != 0 {
            return Ok(true);
        }
        if let Some(failed) = failed_child() {
            return Err(format!("no word from the other process: {failed}").into());
        }
        if left.is_zero() {
            return Ok(false);
        }
    }
}

impl Child {
    /// The child's process id.
    #[must_use]
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Waits for the child; its exit status, or `None` if a signal ended it.
    ///
    /// # Errors
    /// `waitpid`'s errno.
    pub fn exit_code(self) -> Result<Option<i32>, crate::Error> {
        let status = self.wait()?;
        Ok(libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)))
    }

    /// Waits for the child; an error unless it exited 0.
    ///
    /// # Errors
    /// The child's failure.
    pub fn join(self) -> TestResult {
        let status = self.wait()?;
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            Ok(())
        } else {
            Err(format!("process {} failed (wait status {status:#x}; its reason is on stderr)", self.label).into())
        }
    }

    /// Waits for the child; the signal that ended it, or `None` if it exited (whatever its
    /// status: a failure is on stderr).
    ///
    /// # Errors
    /// `waitpid`'s errno.
    pub fn end_signal(self) -> Result<Option<i32>, crate::Error> {
        let status = self.wait()?;
        Ok(libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)))
    }

    /// SIGKILLs the child without reaping it (so several can be killed together, then
    /// reaped with [`Child::kill`]).
    pub fn send_kill(&self) {
        // SAFETY: `pid` is our unreaped child.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
    }

    /// SIGKILLs the child and reaps it.
    ///
    /// # Errors
    /// `waitpid`'s errno.
    pub fn kill(self) -> TestResult {
        // SAFETY: `pid` is our unreaped child.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        self.wait().map(|_| ())
    }

    fn wait(&self) -> Result<i32, crate::Error> {
        let mut status = 0;
        loop {
            // SAFETY: `pid` is our child; `status` is a valid out pointer.
            let r = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if r == self.pid {
                unreaped().retain(|f| f.pid != self.pid);
                return Ok(status);
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(format!("waitpid: {e}").into());
            }
        }
    }
}

/// How long [`Signal::take`] waits: far beyond any step a test waits for, so only a process
/// that ended or stalled before it sent reaches it — a failure, where an unbounded read would
/// hang the suite (each process holds both ends of the pipe, so a dead sender is never seen).
pub const SIGNAL_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// A one-byte pipe for a parent to tell a child (or a child the parent) to go on.
#[derive(Debug)]
pub struct Signal {
    fds: [i32; 2],
}

impl Signal {
    /// A new pipe.
    ///
    /// # Errors
    /// `pipe`'s errno.
    pub fn new() -> Result<Signal, crate::Error> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for two descriptors.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(format!("pipe: {}", std::io::Error::last_os_error()).into());
        }
        Ok(Signal { fds })
    }

    /// Sends `n` bytes.
    pub fn post(&self, n: usize) {
        for _ in 0..n {
            // SAFETY: writes one byte from a valid buffer to the pipe's write end.
            unsafe { libc::write(self.fds[1], b"x".as_ptr().cast(), 1) };
        }
    }

    /// Receives one byte, waiting at most [`SIGNAL_LIMIT`].
    ///
    /// # Errors
    /// No byte within [`SIGNAL_LIMIT`]: the other process ended or stalled before it sent
    /// (each process holds both ends, so its end is never seen); `poll`'s or `read`'s errno.
    pub fn take(&self) -> Result<(), crate::Error> {
        self.take_within(SIGNAL_LIMIT)
    }

    /// Receives one byte, waiting at most `limit` (less when a child fails: [`readable_within`]).
    fn take_within(&self, limit: std::time::Duration) -> Result<(), crate::Error> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !readable_within(self.fds[0], left)? {
                return Err(format!(
                    "no word from the other process within {} s: it ended or stalled before it sent",
                    limit.as_secs_f64()
                )
                .into());
            }
            if self.read_one()? {
                return Ok(());
            }
        }
    }

    /// Receives one byte if one was sent; never blocks.
    pub fn try_take(&self) -> bool {
        matches!(readable_within(self.fds[0], std::time::Duration::ZERO), Ok(true))
            && matches!(self.read_one(), Ok(true))
    }

    /// Reads one byte; whether one was read (an interrupted read reads none).
    fn read_one(&self) -> Result<bool, crate::Error> {
        let mut b = 0u8;
        // SAFETY: reads one byte into a valid buffer.
        let r = unsafe { libc::read(self.fds[0], core::ptr::from_mut(&mut b).cast(), 1) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            return if e.raw_os_error() == Some(libc::EINTR) { Ok(false) } else { Err(format!("read: {e}").into()) };
        }
        Ok(r == 1)
    }
}

impl Drop for Signal {
    fn drop(&mut self) {
        // SAFETY: the pipe's descriptors are owned by this value.
        unsafe {
            libc::close(self.fds[0]);
            libc::close(self.fds[1]);
        }
    }
}

/// Forks a child that stores `value` at address `addr` of this process (inherited by the
/// child) and exits 0 if the store returns; the signal that ended the child instead, if any.
///
/// # Errors
/// `fork`'s or `waitpid`'s errno.
pub fn store_signal(addr: usize, value: u64) -> Result<Option<i32>, crate::Error> {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    // SAFETY: the suite is single-threaded (scoped threads of earlier tests have ended).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()).into());
    }
    if pid == 0 {
        // SAFETY: the child's own copy of the address space: the store either faults (the
        // point of the test) or changes memory only this child sees, and it exits at once.
        unsafe {
            core::ptr::write_volatile(addr as *mut u64, value);
            libc::_exit(0)
        };
    }
    let status = Child { pid, label: "store" }.wait()?;
    Ok(libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn a_signal_nobody_sends_fails_the_take_at_its_limit() {
        let signal = Signal::new().unwrap();
        let start = Instant::now();
        let err = signal.take_within(Duration::from_millis(200)).unwrap_err();
        assert!(start.elapsed() >= Duration::from_millis(200));
        assert!(err.to_string().contains("ended or stalled"), "{err}");
    }

    #[test]
    fn a_sent_byte_is_taken_once() {
        let signal = Signal::new().unwrap();
        signal.post(1);
        signal.take_within(Duration::from_millis(200)).unwrap();
        assert!(!signal.try_take());
        signal.post(1);
        assert!(signal.try_take());
    }

    #[test]
    fn a_child_that_fails_ends_the_parent_take_at_once_and_is_still_joined() {
        let signal = Signal::new().unwrap();
        let child = spawn("fails before it posts", || Err("gone".into())).unwrap();
        let start = Instant::now();
        let err = signal.take_within(Duration::from_secs(30)).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(10), "waited {:?}", start.elapsed());
        assert!(err.to_string().contains("process fails before it posts failed"), "{err}");
        assert!(child.join().is_err());
        assert!(failed_child().is_none(), "a reaped child is forgotten");
    }

    #[test]
    fn a_child_that_succeeds_or_is_killed_does_not_end_the_wait() {
        let signal = Signal::new().unwrap();
        let done = spawn("exits 0", || Ok(())).unwrap();
        let killed = spawn("killed", || {
            std::thread::sleep(Duration::from_secs(60));
            Ok(())
        })
        .unwrap();
        killed.send_kill();
        let start = Instant::now();
        let err = signal.take_within(Duration::from_millis(300)).unwrap_err();
        assert!(start.elapsed() >= Duration::from_millis(300));
        assert!(err.to_string().contains("ended or stalled"), "{err}");
        done.join().unwrap();
        assert_eq!(killed.end_signal().unwrap(), Some(libc::SIGKILL));
    }

    #[test]
    fn a_child_that_dies_before_it_sends_fails_the_parent_take() {
        let signal = Signal::new().unwrap();
        let child = spawn("dies at once", || Err("gone".into())).unwrap();
        assert_eq!(child.exit_code().unwrap(), Some(1));
        assert!(signal.take_within(Duration::from_millis(200)).is_err());
    }
}
