// SPDX-License-Identifier: GPL-2.0

//! One-page mappings of raw pfns that can be retargeted: 7.3 has no `vm_operations_struct`
//! fault hook and no pfn insertion (`vm_insert_page` on a VM_PFNMAP mapping hits a BUG_ON). A
//! mapping made by [`map`] is VM_PFNMAP|VM_IO; its raw `fault` handler inserts the pfn its
//! [`PfnTarget`] shows at that moment (`vmf_insert_pfn`), or raises `SIGBUS` when it shows
//! nothing.
//!
//! A target never names a page nobody holds (the rule of the kernel's own pfn-mapping drivers:
//! a page stays allocated until the last mapping that can reach it is gone or zapped). What it
//! shows is a [`Shown`]: nothing; a page of system memory, which the target holds a reference
//! to while it shows it (so the page outlives every mapping of it, whatever its owner frees);
//! or a page of a device BAR, which the owner revokes before the BAR goes (unbind). Every change
//! goes through the target's lock together with the zap of the mappings ([`PfnTarget::show`],
//! [`PfnTarget::locked`]): a fault waits for it, and the page shown before is let go only after
//! the zap, so no user page table names it any more.

use core::{marker::PhantomData, mem::ManuallyDrop};

use kernel::{
    bindings, mm::virt::VmaNew, new_mutex, prelude::*, sync::{Arc, Mutex},
};

/// A page of system memory a [`PfnTarget`] can show while holding it.
pub(crate) trait MappablePage: Send + Sync {
    /// The pfn of the page (the first, if it has more).
    fn pfn(&self) -> u64;
}

/// What a [`PfnTarget`] shows.
pub(crate) enum Shown<P> {
    /// Nothing: an access raises `SIGBUS`.
    Nothing,
    /// A page of system memory, held while shown.
    Page(Arc<P>),
    /// The page of a device BAR with this pfn: its owner revokes it before the BAR goes.
    Bar(u64),
}

impl<P: MappablePage> Shown<P> {
    /// The pfn to insert; `None` for nothing.
    fn pfn(&self) -> Option<u64> {
        match self {
            Shown::Nothing => None,
            Shown::Page(page) => Some(page.pfn()),
            Shown::Bar(pfn) => Some(*pfn),
        }
    }

    /// Whether it shows nothing.
    pub(crate) fn is_nothing(&self) -> bool {
        matches!(self, Shown::Nothing)
    }
}

/// The page a mapping shows, under a lock the fault handler takes while inserting it (so a
/// change followed by a zap cannot be undone by a fault in between).
#[pin_data]
pub(crate) struct PfnTarget<P> {
    /// What it shows.
    #[pin]
    shown: Mutex<Shown<P>>,
}

impl<P: MappablePage + 'static> PfnTarget<P> {
    /// A target showing `shown`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(shown: Shown<P>) -> Result<Arc<Self>> {
        Arc::pin_init(try_pin_init!(Self { shown <- new_mutex!(shown) }? Error), GFP_KERNEL)
    }

    /// A target showing `shown` whose page is moved under its lock ([`Self::locked`] held
    /// across a paging copy, which takes the kernel-ring and hardware locks): a lock class of its
    /// own, apart from the targets of [`Self::new`] (doorbells), which are retargeted under those
    /// locks.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new_movable(shown: Shown<P>) -> Result<Arc<Self>> {
        Arc::pin_init(try_pin_init!(Self { shown <- new_mutex!(shown) }? Error), GFP_KERNEL)
    }

    /// Shows `shown` from the next fault on: under the target's lock it replaces what was shown
    /// and `zap` (the caller's zap of every mapping of the target) runs; what was shown is let
    /// go after the zap.
    pub(crate) fn show(&self, shown: Shown<P>, zap: impl FnOnce()) {
        let old = {
            let mut now = self.shown.lock();
            let old = core::mem::replace(&mut *now, shown);
            zap();
            old
        };
        drop(old);
    }

    /// Runs `f` with the target locked: a fault on a mapping of it waits until `f` returns and
    /// then inserts what `f` left. `f` zaps the mappings before it changes what is shown, or
    /// before it moves the page's contents (so no store lands on the old page after the copy
    /// started); a page it replaces is let go when the replacement is stored, after that zap.
    pub(crate) fn locked<R>(&self, f: impl FnOnce(&mut Shown<P>) -> R) -> R {
        let mut shown = self.shown.lock();
        f(&mut shown)
    }
}

/// The `vm_operations_struct` of pfn mappings of `PfnTarget<P>`.
struct PfnVmOps<P>(PhantomData<P>);

impl<P: MappablePage + 'static> PfnVmOps<P> {
    /// `open`/`close` count references to the [`PfnTarget`] in `vm_private_data`; `fault`
    /// inserts the pfn it shows.
    const OPS: bindings::vm_operations_struct = bindings::vm_operations_struct {
        open: Some(pfn_vm_open::<P>),
        close: Some(pfn_vm_close::<P>),
        fault: Some(pfn_vm_fault::<P>),
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
/// Called by the mm core with a pfn VMA of `PfnTarget<P>` (one set up by [`map`]).
unsafe extern "C" fn pfn_vm_open<P: MappablePage + 'static>(vma: *mut bindings::vm_area_struct) {
    // SAFETY: `vma` is a pfn VMA: its `vm_private_data` came from `Arc::into_raw` in `map` (or
    // a previous `open`), and that reference is still counted.
    let t = ManuallyDrop::new(unsafe { Arc::from_raw((*vma).vm_private_data.cast::<PfnTarget<P>>()) });
    let _ = Arc::into_raw(Arc::clone(&t));
}

/// `vm_operations_struct::close`: drops the VMA's reference.
///
/// # Safety
///
/// Called by the mm core, once per pfn VMA of `PfnTarget<P>`, when it goes away.
unsafe extern "C" fn pfn_vm_close<P: MappablePage + 'static>(vma: *mut bindings::vm_area_struct) {
    // SAFETY: As in `pfn_vm_open`; this gives back the VMA's reference exactly once.
    drop(unsafe { Arc::from_raw((*vma).vm_private_data.cast::<PfnTarget<P>>()) });
}

/// `vm_operations_struct::fault`: maps the page the target shows, or raises `SIGBUS`.
///
/// # Safety
///
/// Called by the mm core with a fault on a pfn VMA of `PfnTarget<P>`, under the mmap lock.
unsafe extern "C" fn pfn_vm_fault<P: MappablePage + 'static>(
    vmf: *mut bindings::vm_fault,
) -> bindings::vm_fault_t {
    // SAFETY: `vmf` is the fault being handled; its VMA is a pfn VMA (see `pfn_vm_open` for
    // `vm_private_data`), alive for the duration of the fault.
    let (vma, address) = unsafe { ((*vmf).__bindgen_anon_1.vma, (*vmf).__bindgen_anon_1.address) };
    // SAFETY: As above; the VMA holds a reference, so the target outlives this borrow.
    let target = unsafe { &*(*vma).vm_private_data.cast::<PfnTarget<P>>() };
    let shown = target.shown.lock();
    let Some(pfn) = shown.pfn() else {
        return bindings::vm_fault_reason_VM_FAULT_SIGBUS as bindings::vm_fault_t;
    };
    // CAST: a pfn fits `c_ulong` (64 bits on x86-64).
    let raw = pfn as usize;
    // SAFETY: `vma` is a VM_PFNMAP VMA being faulted under the mmap lock; `address` lies in it
    // (one page). The page stays valid while shown: a system page is held by the target until
    // a change of what it shows has zapped every mapping (and a change waits for this fault,
    // which holds the target's lock); a BAR page is revoked, the same way, before the BAR goes.
    unsafe { bindings::vmf_insert_pfn(vma, address & !0xfff, raw) }
}

/// Sets `vma` up as a one-page pfn mapping of `target`: VM_PFNMAP | VM_IO, the page inserted on
/// fault. `vm_pgoff` is kept, so zapping the offset reaches it.
///
/// # Errors
///
/// `EINVAL` unless the mapping is exactly one page.
pub(crate) fn map<P: MappablePage + 'static>(vma: &VmaNew, target: Arc<PfnTarget<P>>) -> Result {
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
        (*raw).vm_ops = PfnVmOps::<P>::table();
        (*raw).vm_private_data = Arc::into_raw(target).cast_mut().cast();
    }
    Ok(())
}
