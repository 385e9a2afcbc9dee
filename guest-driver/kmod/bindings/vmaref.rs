// SPDX-License-Identifier: GPL-2.0

//! Mappings that keep what they show alive, as GEM's VMAs hold their object: [`hold`] gives a
//! VMA one counted reference to an `Arc<T>`; its `open` (a split or a move copies the VMA)
//! takes another, its `close` gives its own back. The memory then lives exactly as long as the
//! last mapping of it, or its owner's reference, whichever goes last: freeing an object frees
//! its memory at once unless the process still maps it, and then at its `munmap`.

use core::{marker::PhantomData, mem::ManuallyDrop};

use kernel::{bindings, mm::virt::VmaNew, sync::Arc};

/// The `vm_operations_struct` of VMAs holding an `Arc<T>`.
struct HolderOps<T>(PhantomData<T>);

impl<T: Send + Sync> HolderOps<T> {
    /// `open` and `close` count the VMA's reference; nothing else is provided.
    const OPS: bindings::vm_operations_struct = bindings::vm_operations_struct {
        open: Some(holder_open::<T>),
        close: Some(holder_close::<T>),
        // SAFETY: Every other field is an optional function pointer, a plain pointer or an
        // integer, for all of which all-zeroes (`None`/null/0) is valid and means "not provided".
        ..unsafe { core::mem::zeroed() }
    };

    /// The table, `'static` (a promoted constant).
    const fn table() -> &'static bindings::vm_operations_struct {
        &Self::OPS
    }
}

/// `vm_operations_struct::open`: a VMA copy holds one more reference.
///
/// # Safety
///
/// Called by the mm core with a VMA set up by [`hold`] for this `T`.
unsafe extern "C" fn holder_open<T: Send + Sync>(vma: *mut bindings::vm_area_struct) {
    // SAFETY: `vm_private_data` came from `Arc::into_raw` in `hold` (or a previous `open`), and
    // that reference is still counted (the VMA copied from is alive).
    let held = ManuallyDrop::new(unsafe { Arc::from_raw((*vma).vm_private_data.cast::<T>()) });
    let _ = Arc::into_raw(Arc::clone(&held));
}

/// `vm_operations_struct::close`: drops the VMA's reference.
///
/// # Safety
///
/// Called by the mm core, once per VMA set up by [`hold`] (or copied by `open`), when it goes.
unsafe extern "C" fn holder_close<T: Send + Sync>(vma: *mut bindings::vm_area_struct) {
    // SAFETY: As in `holder_open`; this gives back the VMA's reference exactly once.
    drop(unsafe { Arc::from_raw((*vma).vm_private_data.cast::<T>()) });
}

/// Makes `vma` hold `owner` until its last copy closes.
///
/// # Safety
///
/// `vma` is being set up by an `mmap` call that has succeeded in mapping it (nothing can fail
/// after this), and has neither `vm_ops` nor `vm_private_data` of its own (a `remap_pfn_range`
/// mapping has none).
pub(crate) unsafe fn hold<T: Send + Sync>(vma: &VmaNew, owner: Arc<T>) {
    let raw = vma.as_ptr();
    // SAFETY: `raw` is a VMA under initial setup (caller), not yet visible to other threads;
    // `vm_ops` is a `'static` table and `vm_private_data` carries one counted reference to
    // `owner`, given back by `close`.
    unsafe {
        (*raw).vm_ops = HolderOps::<T>::table();
        (*raw).vm_private_data = Arc::into_raw(owner).cast_mut().cast();
    }
}
