// SPDX-License-Identifier: GPL-2.0

//! Whether the current task has a fatal signal pending (`fatal_signal_pending`, a C inline the
//! Linux 7.3 Rust abstractions and helpers do not cover).

use kernel::bindings;

/// Whether `SIGKILL` is pending on the current task: it was killed, or its thread group is
/// exiting (`__fatal_signal_pending`). A sleep that polls this ends promptly on a kill while
/// an ordinary signal leaves it running (its work cannot be restarted).
pub(crate) fn fatal_signal_pending() -> bool {
    let task = kernel::current!();
    // SAFETY: the current task's `task_struct` is valid while it runs; its pending set is only
    // read, once (the kernel's own check reads it without a lock too).
    let first = unsafe { core::ptr::read_volatile(&raw const (*task.as_ptr()).pending.signal.sig[0]) };
    first & (1 << (bindings::SIGKILL - 1)) != 0
}
