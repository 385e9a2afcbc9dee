// SPDX-License-Identifier: GPL-2.0

//! `dma_fence`s of our own and their `sync_file` export: 7.3 has no Rust `dma_fence` or
//! `sync_file` abstraction, only the raw `dma_fence_*` bindings (and `sync_file_create` is not
//! among the generated bindings at all).
//!
//! A [`DmaFence`] is a `kmalloc`'d `struct dma_fence` with its own inline lock (`dma_fence_init64`
//! with no external lock) on a timeline of its own (`dma_fence_context_alloc`), of which it holds
//! one reference. It is signalled exactly once: by [`DmaFence::signal`], by
//! [`DmaFence::end_in_place`] (with an error or not), or — so that no fence of ours is ever left
//! pending — by its drop, with `ECANCELED`. Its ops have neither `release` nor `wait`, so the kernel detaches them when the
//! fence signals (`dma_fence_signal_timestamp_locked` clears `ops`): a signalled fence, and a
//! `sync_file` holding it, may outlive this module, and the memory is freed by the kernel's own
//! `dma_fence_free` (`kfree_rcu`) with the last reference.
//!
//! [`DmaFence::sync_file`] exists only when the kernel has `CONFIG_SYNC_FILE` (the Kbuild file
//! passes `--cfg belfry_sync_file`); without it `sync_file_create` is not even exported, and
//! [`SYNC_FILE`] is `false`.
//!
//! [`Signalling`] marks a dma-fence signalling critical section (`dma_fence_begin_signalling`,
//! `dma_fence_end_signalling`): everything from the decision that a fence of ours ends to its
//! signal. The kernel's rules forbid there what could wait for a fence (an allocation that may
//! reclaim, a lock held elsewhere around one); with lockdep (the Kbuild file passes
//! `--cfg belfry_lockdep`) the kernel reports any of them, without it the section is nothing.

use core::{marker::PhantomData, ptr::NonNull};

use kernel::{bindings, prelude::*};

/// Whether this kernel can export a [`DmaFence`] as a `sync_file`.
pub(crate) const SYNC_FILE: bool = cfg!(belfry_sync_file);

/// `get_driver_name`: called only while the fence is unsignalled (the module is loaded then).
extern "C" fn driver_name(_fence: *mut bindings::dma_fence) -> *const kernel::ffi::c_char {
    c"belfry".as_char_ptr()
}

/// `get_timeline_name`: as above.
extern "C" fn timeline_name(_fence: *mut bindings::dma_fence) -> *const kernel::ffi::c_char {
    c"belfry-monitored-fence".as_char_ptr()
}

/// The ops of every fence of ours: names only. No `release` and no `wait`, so a signalled fence
/// no longer refers to this module (see the module documentation).
static OPS: bindings::dma_fence_ops = bindings::dma_fence_ops {
    get_driver_name: Some(driver_name),
    get_timeline_name: Some(timeline_name),
    enable_signaling: None,
    signaled: None,
    wait: None,
    release: None,
    set_deadline: None,
};

/// A `dma_fence` of ours, one reference held; signalled at the latest when dropped.
pub(crate) struct DmaFence {
    /// The fence, initialised, with the reference this value owns.
    fence: NonNull<bindings::dma_fence>,
    /// Whether this value signalled it.
    ended: bool,
}

// SAFETY: A `dma_fence` is reference counted and its state is behind its own (inline) lock; the
// only non-atomic store this type makes (`error`, before signalling) is made by the owner of
// the value, which is the one that signals.
unsafe impl Send for DmaFence {}
// SAFETY: `&DmaFence` offers only `sync_file`, which takes a new reference (atomic).
unsafe impl Sync for DmaFence {}

impl DmaFence {
    /// A new unsignalled fence, `seqno` on a timeline of its own.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(seqno: u64) -> Result<Self> {
        let mem = KBox::<bindings::dma_fence>::new_uninit(GFP_KERNEL_ACCOUNT)?;
        let raw = KBox::into_raw(mem).cast::<bindings::dma_fence>();
        // SAFETY: `dma_fence_context_alloc` has no precondition (an atomic counter).
        let context = unsafe { bindings::dma_fence_context_alloc(1) };
        // SAFETY: `raw` is a `kmalloc`'d `struct dma_fence`, which `dma_fence_init64` initialises
        // entirely (refcount 1, our static ops, its inline lock since `lock` is null); the kernel
        // frees such a fence with `kfree_rcu`, which fits `kmalloc` memory.
        unsafe { bindings::dma_fence_init64(raw, &OPS, core::ptr::null_mut(), context, seqno) };
        Ok(Self {
            // SAFETY: `KBox::into_raw` never returns null.
            fence: unsafe { NonNull::new_unchecked(raw) },
            ended: false,
        })
    }

    /// Signals the fence (success) and lets it go.
    pub(crate) fn signal(mut self) {
        self.end(0);
    }

    /// Signals the fence now, with error `e` if given (what waiters see as its status), keeping
    /// the value (its drop then only lets the reference go): for a caller that must end the fence inside a
    /// [`Signalling`] section and drop what holds it outside.
    pub(crate) fn end_in_place(&mut self, e: Option<Error>) {
        self.end(e.map_or(0, Error::to_errno));
    }

    /// Sets the error (if any) and signals, once.
    fn end(&mut self, errno: i32) {
        if self.ended {
            return;
        }
        self.ended = true;
        let raw = self.fence.as_ptr();
        if errno != 0 {
            // SAFETY: We hold a reference; the fence is unsignalled and only this value signals
            // it, so nobody reads `error` concurrently in a way that matters (this is
            // `dma_fence_set_error`, an inline function bindgen does not generate).
            unsafe { (*raw).error = errno };
        }
        // SAFETY: We hold a reference to an initialised fence; `dma_fence_signal` takes its lock
        // and may be called from process context.
        unsafe { bindings::dma_fence_signal(raw) };
    }

    /// A new `sync_file` holding a reference to this fence, as the file that represents it.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    #[cfg(belfry_sync_file)]
    pub(crate) fn sync_file(&self) -> Result<kernel::sync::aref::ARef<kernel::fs::File>> {
        extern "C" {
            /// `sync_file_create` (`include/linux/sync_file.h`, exported with
            /// `CONFIG_SYNC_FILE`): takes its own reference to the fence; returns a
            /// `struct sync_file *` whose first member is its `struct file *`, or null. Both
            /// structs are passed as `void *` (the bindgen structs are not FFI-safe by rustc's
            /// lint).
            fn sync_file_create(fence: *mut kernel::ffi::c_void) -> *mut kernel::ffi::c_void;
        }
        // SAFETY: We hold a reference to an initialised fence; `sync_file_create` takes one more.
        let sf = unsafe { sync_file_create(self.fence.as_ptr().cast()) };
        let sf = sf.cast::<*mut bindings::file>();
        if sf.is_null() {
            return Err(ENOMEM);
        }
        // SAFETY: `struct sync_file` begins with `struct file *file` in every configuration,
        // set by `sync_file_create` to the new file, which holds the only reference to the
        // sync_file (freed by the file's release).
        let file = unsafe { *sf };
        let file = NonNull::new(file).ok_or(ENOMEM)?;
        // SAFETY: The new file's one reference is taken over by the `ARef`; no `fdget_pos` can
        // be active on a file nobody else has seen.
        Ok(unsafe { kernel::sync::aref::ARef::from_raw(file.cast::<kernel::fs::File>()) })
    }

    /// Without `CONFIG_SYNC_FILE` there is no `sync_file`.
    ///
    /// # Errors
    ///
    /// `EOPNOTSUPP`, always.
    #[cfg(not(belfry_sync_file))]
    pub(crate) fn sync_file(&self) -> Result<kernel::sync::aref::ARef<kernel::fs::File>> {
        Err(EOPNOTSUPP)
    }
}

impl Drop for DmaFence {
    fn drop(&mut self) {
        // Never left pending: whoever waits on it learns it will not come.
        self.end(ECANCELED.to_errno());
        let raw = self.fence.as_ptr();
        // SAFETY: We own one reference (`dma_fence_put`, inline, is this `kref_put`): the last
        // one runs `dma_fence_release`, which frees the fence after a grace period.
        unsafe {
            if bindings::refcount_dec_and_test(&raw mut (*raw).refcount.refcount) {
                bindings::dma_fence_release(&raw mut (*raw).refcount);
            }
        }
    }
}

/// A dma-fence signalling critical section, from [`Signalling::begin`] to the drop, on the
/// task that began it.
pub(crate) struct Signalling {
    /// `dma_fence_begin_signalling`'s cookie.
    #[cfg_attr(not(belfry_lockdep), allow(dead_code))]
    cookie: bool,
    /// Ended on the task that began it: neither `Send` nor `Sync`.
    _task: PhantomData<*mut ()>,
}

#[cfg(belfry_lockdep)]
extern "C" {
    /// `dma_fence_begin_signalling` (`include/linux/dma-fence.h`, a function with lockdep).
    fn dma_fence_begin_signalling() -> bool;
    /// `dma_fence_end_signalling` (as above).
    fn dma_fence_end_signalling(cookie: bool);
}

impl Signalling {
    /// Begins a section.
    pub(crate) fn begin() -> Self {
        #[cfg(belfry_lockdep)]
        // SAFETY: no precondition (a lockdep annotation), ended by the drop on this task.
        let cookie = unsafe { dma_fence_begin_signalling() };
        #[cfg(not(belfry_lockdep))]
        let cookie = true;
        Self {
            cookie,
            _task: PhantomData,
        }
    }
}

impl Drop for Signalling {
    fn drop(&mut self) {
        #[cfg(belfry_lockdep)]
        // SAFETY: the cookie of the `dma_fence_begin_signalling` of this section, on its task.
        unsafe {
            dma_fence_end_signalling(self.cookie)
        };
    }
}
