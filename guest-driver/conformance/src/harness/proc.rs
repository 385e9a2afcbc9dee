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
    Ok(Child { pid, label })
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
                return Ok(status);
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(format!("waitpid: {e}").into());
            }
        }
    }
}

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

    /// Receives one byte (blocks).
    pub fn take(&self) {
        let mut b = 0u8;
        loop {
            // SAFETY: reads one byte into a valid buffer.
            let r = unsafe { libc::read(self.fds[0], core::ptr::from_mut(&mut b).cast(), 1) };
            if r == 1 || r == 0 {
                return;
            }
        }
    }

    /// Receives one byte if one was sent; never blocks.
    pub fn try_take(&self) -> bool {
        let mut p = libc::pollfd { fd: self.fds[0], events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, no wait.
        let ready = unsafe { libc::poll(&mut p, 1, 0) } == 1 && p.revents & libc::POLLIN != 0;
        if ready {
            self.take();
        }
        ready
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
