// SPDX-License-Identifier: GPL-2.0

//! Eventfd contexts: 7.3 has no eventfd abstraction (`eventfd_ctx_fdget`, `eventfd_signal_mask`,
//! `eventfd_ctx_put`).

use core::ptr::NonNull;

use kernel::{bindings, prelude::*};

/// A reference to an eventfd's context (`struct eventfd_ctx`), put on drop.
pub(crate) struct EventFd(NonNull<bindings::eventfd_ctx>);

// SAFETY: An eventfd context is reference counted and its signal takes its own lock: it may be
// signaled and put from any thread.
unsafe impl Send for EventFd {}
// SAFETY: As above: `signal` through a shared reference is synchronised by the context's lock.
unsafe impl Sync for EventFd {}

impl EventFd {
    /// The eventfd `fd` of the calling process.
    ///
    /// # Errors
    ///
    /// `EBADF` for a closed fd, `EINVAL` for a file that is not an eventfd.
    pub(crate) fn get(fd: i32) -> Result<Self> {
        // SAFETY: `eventfd_ctx_fdget` accepts any integer and returns a counted reference or an
        // error pointer.
        let raw = kernel::error::from_err_ptr(unsafe { bindings::eventfd_ctx_fdget(fd) })?;
        NonNull::new(raw).map(Self).ok_or(EINVAL)
    }

    /// Adds 1 to the eventfd's counter, waking its pollers. Process context or interrupt
    /// thread; must not run from an eventfd wake-up callback (the kernel warns and skips it).
    pub(crate) fn signal(&self) {
        // SAFETY: `self.0` is a counted reference to a live eventfd context.
        unsafe { bindings::eventfd_signal_mask(self.0.as_ptr(), 0) };
    }
}

impl EventFd {
    /// Whether `self` and `other` are references to the same eventfd (whatever fds named it).
    pub(crate) fn same(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: Gives back the reference taken in `get`, once.
        unsafe { bindings::eventfd_ctx_put(self.0.as_ptr()) };
    }
}
