// SPDX-License-Identifier: GPL-2.0

//! A counted reference to a process's thread-group `struct pid` (`get_task_pid`, `put_pid`),
//! which the Linux 7.3 Rust abstractions do not wrap: an identity of a process that an exec
//! from a non-leader thread does not change (the thread group keeps its `struct pid`) and that
//! no later process shares while the reference is held (a process that reuses the number gets
//! another `struct pid`). Two references are the same process when they name the same
//! `struct pid`.

use core::ptr::NonNull;

use kernel::{bindings, prelude::*};

/// A counted reference to one thread group's `struct pid`.
pub(crate) struct ProcessRef(NonNull<bindings::pid>);

// SAFETY: A `struct pid` reference may be taken, compared and given back from any thread
// (`put_pid` is callable in any context).
unsafe impl Send for ProcessRef {}
// SAFETY: Shared references only compare the pointer.
unsafe impl Sync for ProcessRef {}

impl ProcessRef {
    /// The calling thread's process (its thread group).
    ///
    /// # Errors
    ///
    /// `ESRCH` for a thread that has no thread-group pid left (it is exiting).
    pub(crate) fn current() -> Result<Self> {
        // SAFETY: `current` is a live task; `get_task_pid` takes its own reference (under RCU)
        // and returns null when the task has none.
        let pid = unsafe { bindings::get_task_pid(kernel::current!().as_ptr(), bindings::pid_type_PIDTYPE_TGID) };
        NonNull::new(pid).map(Self).ok_or(ESRCH)
    }
}

impl Clone for ProcessRef {
    fn clone(&self) -> Self {
        // SAFETY: `self` holds a reference, so the count is non-zero (`get_pid`).
        unsafe { bindings::refcount_inc(&raw mut (*self.0.as_ptr()).count) };
        Self(self.0)
    }
}

impl Drop for ProcessRef {
    fn drop(&mut self) {
        // SAFETY: `self` holds one reference, given back once here.
        unsafe { bindings::put_pid(self.0.as_ptr()) };
    }
}

impl PartialEq for ProcessRef {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for ProcessRef {}
