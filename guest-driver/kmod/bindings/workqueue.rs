// SPDX-License-Identifier: GPL-2.0

//! The per-CPU system workqueue, `system_percpu_wq`. The 7.3 kernel crate's
//! `workqueue::system()` returns `system_wq`, which 7.3 marks deprecated: the first work queued
//! on it prints "enqueued on deprecated workqueue" at every probe. `system_percpu_wq` is the
//! same queue under its new name, which the crate does not expose yet.

use kernel::{bindings, workqueue::Queue};

/// `system_percpu_wq`: the queue `schedule_work()` uses (short work items, CPU-bound).
pub(crate) fn system_percpu() -> &'static Queue {
    // SAFETY: `system_percpu_wq` is a C global, set up before any module loads and never freed.
    unsafe { Queue::from_raw(bindings::system_percpu_wq) }
}
