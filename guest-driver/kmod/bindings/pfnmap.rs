// SPDX-License-Identifier: GPL-2.0

//! One-page mappings of raw pfns that can be retargeted: 7.3 has no `vm_operations_struct`
//! fault hook and no pfn insertion (`vm_insert_page` on a VM_PFNMAP mapping hits a BUG_ON). A
//! mapping made by [`map`] is VM_PFNMAP|VM_IO; its raw `fault` handler inserts the pfn its
//! [`PfnTarget`] names at that moment (`vmf_insert_pfn`). Whoever retargets zaps the mapping
//! (`mm::FileMapping::zap`) afterwards, so the next access faults the new page in.

use core::mem::ManuallyDrop;

use kernel::{
    bindings, mm::virt::VmaNew, new_mutex, prelude::*, sync::{Arc, Mutex},
};

/// What a revoked target shows: nothing (an access raises `SIGBUS`).
pub(crate) const NO_PFN: u64 = u64::MAX;

/// The pfn a mapping shows, under a lock the fault handler takes while inserting it (so a
/// retarget followed by a zap cannot be undone by a fault in between).
#[pin_data]
pub(crate) struct PfnTarget {
    /// The pfn.
    #[pin]
    pfn: Mutex<u64>,
}

impl PfnTarget {
    /// A target showing `pfn`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(pfn: u64) -> Result<Arc<Self>> {
        Arc::pin_init(try_pin_init!(Self { pfn <- new_mutex!(pfn) }? Error), GFP_KERNEL)
    }

    /// A target showing `pfn` whose page is moved under its lock ([`Self::locked`] held across
    /// a paging copy, which takes the kernel-ring and hardware locks): a lock class of its own,
    /// apart from the targets of [`Self::new`] (doorbells), which are retargeted under those
    /// locks.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new_movable(pfn: u64) -> Result<Arc<Self>> {
        Arc::pin_init(try_pin_init!(Self { pfn <- new_mutex!(pfn) }? Error), GFP_KERNEL)
    }

    /// Shows `pfn` from the next fault on (the caller zaps the mappings).
    pub(crate) fn set(&self, pfn: u64) {
        *self.pfn.lock() = pfn;
    }

    /// Runs `f` with the target locked: a fault on a mapping of it waits until `f` returns and
    /// then inserts the pfn `f` left. For a move of the page's contents: the caller zaps the
    /// mappings inside `f` first, so no store lands on the old page after the copy started.
    pub(crate) fn locked<R>(&self, f: impl FnOnce(&mut u64) -> R) -> R {
        let mut pfn = self.pfn.lock();
        f(&mut pfn)
    }
}

/// The `vm_operations_struct` of pfn mappings, shareable between threads.
struct PfnVmOps(bindings::vm_operations_struct);

// SAFETY: The table is immutable and holds only function pointers (and null fields).
unsafe impl Sync for PfnVmOps {}

/// Pfn mappings: `open`/`close` count references to the [`PfnTarget`] in `vm_private_data`;
/// `fault` inserts the pfn it shows.
static PFN_VM_OPS: PfnVmOps = PfnVmOps(bindings::vm_operations_struct {
    open: Some(pfn_vm_open),
    close: Some(pfn_vm_close),
    fault: Some(pfn_vm_fault),
    // SAFETY: Every other field is an optional function pointer, a plain pointer or an integer,
    // for all of which all-zeroes (`None`/null/0) is valid and means "not provided".
    ..unsafe { core::mem::zeroed() }
});

/// `vm_operations_struct::open`: a VMA copy holds one more reference.
///
/// # Safety
///
/// Called by the mm core with a pfn VMA (one set up by [`map`]).
unsafe extern "C" fn pfn_vm_open(vma: *mut bindings::vm_area_struct) {
    // SAFETY: `vma` is a pfn VMA: its `vm_private_data` came from `Arc::into_raw` in `map` (or
    // a previous `open`), and that reference is still counted.
    let t = ManuallyDrop::new(unsafe { Arc::from_raw((*vma).vm_private_data.cast::<PfnTarget>()) });
    let _ = Arc::into_raw(Arc::clone(&t));
}

/// `vm_operations_struct::close`: drops the VMA's reference.
///
/// # Safety
///
/// Called by the mm core, once per pfn VMA, when it goes away.
unsafe extern "C" fn pfn_vm_close(vma: *mut bindings::vm_area_struct) {
    // SAFETY: As in `pfn_vm_open`; this gives back the VMA's reference exactly once.
    drop(unsafe { Arc::from_raw((*vma).vm_private_data.cast::<PfnTarget>()) });
}

/// `vm_operations_struct::fault`: maps the target's current pfn.
///
/// # Safety
///
/// Called by the mm core with a fault on a pfn VMA, under the mmap lock.
unsafe extern "C" fn pfn_vm_fault(vmf: *mut bindings::vm_fault) -> bindings::vm_fault_t {
    // SAFETY: `vmf` is the fault being handled; its VMA is a pfn VMA (see `pfn_vm_open` for
    // `vm_private_data`), alive for the duration of the fault.
    let (vma, address) = unsafe { ((*vmf).__bindgen_anon_1.vma, (*vmf).__bindgen_anon_1.address) };
    // SAFETY: As above; the VMA holds a reference, so the target outlives this borrow.
    let target = unsafe { &*(*vma).vm_private_data.cast::<PfnTarget>() };
    let pfn = target.pfn.lock();
    if *pfn == NO_PFN {
        return bindings::vm_fault_reason_VM_FAULT_SIGBUS as bindings::vm_fault_t;
    }
    // CAST: a pfn fits `c_ulong` (64 bits on x86-64).
    let raw = *pfn as usize;
    // SAFETY: `vma` is a VM_PFNMAP VMA being faulted under the mmap lock; `address` lies in it
    // (one page). The owner of the target keeps the page it names alive while the target names
    // it (and zaps the mapping before it names another).
    unsafe { bindings::vmf_insert_pfn(vma, address & !0xfff, raw) }
}

/// Sets `vma` up as a one-page pfn mapping of `target`: VM_PFNMAP | VM_IO, the page inserted on
/// fault. `vm_pgoff` is kept, so zapping the offset reaches it.
///
/// # Errors
///
/// `EINVAL` unless the mapping is exactly one page.
pub(crate) fn map(vma: &VmaNew, target: Arc<PfnTarget>) -> Result {
    if vma.end().checked_sub(vma.start()) != Some(4096) {
        return Err(EINVAL);
    }
    vma.set_io();
    vma.set_dontexpand();
    vma.set_dontcopy();
    vma.set_dontdump();
    let raw = vma.as_ptr();
    // SAFETY: `raw` is a VMA under initial setup (not yet visible to other threads). VM_PFNMAP
    // says it maps raw pfns, which the fault handler inserts with `vmf_insert_pfn`; `vm_ops` is
    // a `'static` table and `vm_private_data` carries one counted reference to `target`, given
    // back by `close`.
    unsafe {
        (*raw).__bindgen_anon_2.vm_flags |= bindings::VM_PFNMAP as bindings::vm_flags_t;
        (*raw).vm_ops = &PFN_VM_OPS.0;
        (*raw).vm_private_data = Arc::into_raw(target).cast_mut().cast();
    }
    Ok(())
}
