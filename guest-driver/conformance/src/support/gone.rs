//! CPU waits outstanding while their device goes (unbound through sysfs, reset through its PCI
//! function): an eventfd of the test's own registered for a fence wait and read by a blocked
//! thread ([`BlockingEventfd`], [`read_ends_across`]), a pollable wait's end
//! ([`expect_pollable_gone`]) and the status the module gives a wait of a device that went
//! ([`expect_status_gone`]: `ENODEV`, as a blocking wait ends).
#![allow(unsafe_code)] // eventfd(2), read(2), write(2).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use belfry_umd::{Fence, FenceEvent};

use crate::support::{expect_errno, wait_until, WAIT};
use crate::TestResult;

/// An eventfd whose reads block until it is signaled (no `EFD_NONBLOCK`), as a program that
/// waits for a fence by reading it would make.
pub(crate) struct BlockingEventfd(OwnedFd);

impl BlockingEventfd {
    /// A new eventfd, count 0.
    pub(crate) fn new() -> Result<Self, crate::Error> {
        // SAFETY: `eventfd` has no memory-safety preconditions.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(format!("eventfd: {}", io::Error::last_os_error()).into());
        }
        // SAFETY: `fd` was just returned by a successful `eventfd` and nothing else owns it.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Reads the count (resetting it), blocking until it is not 0.
    pub(crate) fn read(&self) -> io::Result<u64> {
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a valid, exclusive `u64`.
        let rc = unsafe { libc::read(self.0.as_raw_fd(), core::ptr::from_mut(&mut count).cast(), 8) };
        if rc == 8 {
            Ok(count)
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Adds `n` to the count (waking a blocked reader).
    pub(crate) fn post(&self, n: u64) -> io::Result<()> {
        // SAFETY: writes 8 bytes from a valid `u64`.
        let rc = unsafe { libc::write(self.0.as_raw_fd(), core::ptr::from_ref(&n).cast(), 8) };
        if rc == 8 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl AsFd for BlockingEventfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Runs `loss` (what makes the device go) while another thread is blocked reading `ev`, an
/// eventfd registered for a fence wait; fails unless the read returns within [`WAIT`] of the
/// loss with a count of 1 (signaled once). A read still blocked then is released by a write of
/// the test's own, so the suite never hangs on it.
pub(crate) fn read_ends_across(ev: &BlockingEventfd, loss: impl FnOnce() -> TestResult, what: &str) -> TestResult {
    std::thread::scope(|s| -> TestResult {
        let reader = s.spawn(|| ev.read());
        let lost = loss();
        let start = Instant::now();
        let ended = lost.is_ok() && wait_until(WAIT, || reader.is_finished());
        if !ended {
            ev.post(1).map_err(|e| format!("releasing the blocked reader: {e}"))?;
        }
        let read = reader.join().map_err(|_| "the reading thread panicked")?;
        lost?;
        ensure!(
            ended,
            "a read of the eventfd registered for a fence wait still blocked {:?} after {what}",
            start.elapsed()
        );
        let n = read.map_err(|e| format!("read of the eventfd registered for a fence wait: {e}"))?;
        ensure!(n == 1, "the eventfd registered for a fence wait counted {n} after {what}, expected 1");
        Ok(())
    })
}

/// Fails unless pollable wait `ev` becomes ready within [`WAIT`] and reports the device gone
/// (`ENODEV`, a blocking wait's answer).
pub(crate) fn expect_pollable_gone(ev: &FenceEvent, what: &str) -> TestResult {
    let start = Instant::now();
    match ev.wait(WAIT) {
        Err(e) if e.errno() == Some(libc::ENODEV) => Ok(()),
        Ok(false) => Err(format!("{what}: still pending {:?} after its device went", start.elapsed()).into()),
        other => Err(format!("{what}, its device gone: {other:?}, expected ENODEV").into()),
    }
}

/// Fails unless the status of a wait of `f` for `value` — a `WAIT_FENCES` that does not sleep,
/// what a program asks once its eventfd is readable — is `ENODEV`.
pub(crate) fn expect_status_gone(f: &Fence, value: u64, what: &str) -> TestResult {
    expect_errno(f.wait(value, Duration::ZERO), libc::ENODEV, what)
}
