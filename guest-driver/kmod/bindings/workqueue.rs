// SPDX-License-Identifier: GPL-2.0

//! Workqueues the 7.3 kernel crate does not cover: the per-CPU system workqueue,
//! `system_percpu_wq` (the crate's `workqueue::system()` returns `system_wq`, which 7.3 marks
//! deprecated: the first work queued on it prints "enqueued on deprecated workqueue" at every
//! probe; `system_percpu_wq` is the same queue under its new name); a workqueue of the
//! module's own ([`OwnedQueue`]: `alloc_workqueue`, and `destroy_workqueue` on drop, which
//! waits for every item queued or running); and the synchronous cancel of a delayed work item
//! ([`cancel_delayed_sync`]: the crate can queue one but not cancel it).

use core::ptr::NonNull;

use kernel::{
    bindings,
    prelude::*,
    workqueue::{DelayedWork, Queue},
};

/// `system_percpu_wq`: the queue `schedule_work()` uses (short work items, CPU-bound).
pub(crate) fn system_percpu() -> &'static Queue {
    // SAFETY: `system_percpu_wq` is a C global, set up before any module loads and never freed.
    unsafe { Queue::from_raw(bindings::system_percpu_wq) }
}

/// A workqueue of our own (unbound): its drop destroys it, which first drains it — every item
/// queued on it has run and returned, so none runs module code afterwards.
pub(crate) struct OwnedQueue(NonNull<bindings::workqueue_struct>);

// SAFETY: a `workqueue_struct` is used from any thread; the pointer is only handed to the
// workqueue API, which does its own locking.
unsafe impl Send for OwnedQueue {}
// SAFETY: as above.
unsafe impl Sync for OwnedQueue {}

impl OwnedQueue {
    /// A new unbound workqueue named `name`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(name: &'static CStr) -> Result<Self> {
        // SAFETY: `"%s"` with one C-string argument, which lives for the program; flags and
        // `max_active` 0 (the default) are valid.
        let raw = unsafe {
            bindings::alloc_workqueue_noprof(
                c"%s".as_char_ptr(),
                bindings::wq_flags_WQ_UNBOUND,
                0,
                name.as_char_ptr(),
            )
        };
        NonNull::new(raw).map(Self).ok_or(ENOMEM)
    }

    /// The queue, to enqueue on.
    pub(crate) fn queue(&self) -> &Queue {
        // SAFETY: the workqueue lives until `self` is dropped, which outlives the borrow.
        unsafe { Queue::from_raw(self.0.as_ptr()) }
    }
}

impl Drop for OwnedQueue {
    fn drop(&mut self) {
        // SAFETY: allocated by `alloc_workqueue_noprof` and destroyed once, here.
        unsafe { bindings::destroy_workqueue(self.0.as_ptr()) };
    }
}

/// Cancels `work` and waits until a run of it in progress has returned
/// (`cancel_delayed_work_sync`; a run that queues it again meanwhile is refused). True when a
/// queued instance was cancelled: the reference its `Arc` work item leaked into the queue
/// (the crate's `enqueue` of an `Arc`) is then the caller's to take back.
pub(crate) fn cancel_delayed_sync<T: ?Sized, const ID: u64>(work: &DelayedWork<T, ID>) -> bool {
    // CAST: `DelayedWork` is a `#[repr(transparent)]` wrapper of `Opaque<delayed_work>`.
    let raw = core::ptr::from_ref(work)
        .cast::<bindings::delayed_work>()
        .cast_mut();
    // SAFETY: `raw` is an initialised `delayed_work` (the caller's reference keeps it alive);
    // the call sleeps, which the caller's process context allows.
    unsafe { bindings::cancel_delayed_work_sync(raw) }
}
