// SPDX-License-Identifier: GPL-2.0

//! Shared native fences (SHR-01..05): the global object and its local handles.
//!
//! A `FENCE_SHAREABLE` DEFAULT fence is one [`GlobalFence`] on the device: its CurrentValue and
//! MonitoredValue pages (each holding this fence only, NF-08), mapped in the system address
//! space and registered with the device under one global handle. Every local handle (the
//! creator's, and each `IMPORT_FENCE`) holds an `Arc` of it and maps its CurrentValue page in
//! its own context's address space and, read-only, at an mmap offset of its own file. An
//! exported fd (`EXPORT_FENCE`, an `anon_inode:belfry-fence` file, see `bindings::anonfile`) holds one more
//! reference. Closing a local handle unmaps it from its context and drops its reference
//! (SHR-03); when the last reference goes, [`GlobalFence`]'s `drop` unregisters the fence from
//! the device and unmaps it from the system address space (SHR-04: the local handle is closed
//! first, then the global object destroyed).
//!
//! A `GlobalFence` must never be dropped with the hardware locked (its `drop` locks it).

use kernel::{prelude::*, sync::Arc};

use super::waits::Fences;
use crate::{
    abi::{fence, ids::FenceHandle, mailbox, mmu},
    hw::{dmamem::DmaBuf, pagetable::AddressSpace},
};

/// The device-wide object of a shared native fence.
pub(crate) struct GlobalFence {
    /// The fences of the device it is registered with.
    fences: Arc<Fences>,
    /// Global handle (device and interrupt records).
    global: FenceHandle,
    /// CurrentValue at offset 0.
    current: Arc<DmaBuf>,
    /// MonitoredValue at offset 0 (system address space only: no user mapping, NF-05).
    monitored: DmaBuf,
    /// VA of `current` in the system address space (`monitored` one page after it).
    sys_va: u64,
}

impl GlobalFence {
    /// A new shared DEFAULT fence with CurrentValue `initial`, registered with the device.
    ///
    /// # Errors
    ///
    /// `ENOMEM`, `ENODEV`, `EIO` (the device refused the registration), `ETIMEDOUT`.
    pub(crate) fn new(fences: &Arc<Fences>, initial: u64) -> Result<Arc<Self>> {
        let core = fences.core();
        let (current, monitored, global, sys_va) = {
            let mut hw = core.hw()?;
            let current = Arc::new(DmaBuf::new(hw.dev()?, 1)?, GFP_KERNEL_ACCOUNT)?;
            let monitored = DmaBuf::new(hw.dev()?, 1)?;
            current.write64(0, initial);
            // Nobody waits yet (MV-02).
            monitored.write64(0, fence::MONITORED_VALUE_NONE);
            let global = core.objects().take_fence_handle();
            let sys_va = core.map_system(&hw, &current, Some(&monitored))?;
            let location = |address| mailbox::FenceLocation {
                space: mailbox::LOCATION_SYSTEM_VA,
                address,
                ..Default::default()
            };
            let registered = fences.register(
                &mut hw,
                global,
                fence::FenceKind::Default,
                location(sys_va),
                location(sys_va + mmu::PAGE_SIZE),
                true,
            );
            if let Err(e) = registered {
                drop(hw);
                // The device may hold the registration: the slot stays taken.
                core.release_system(sys_va, false);
                return Err(e);
            }
            (current, monitored, global, sys_va)
        };
        fences.book().global_fences += 1;
        // A failed allocation drops the value, whose `drop` undoes the above (no lock held).
        Ok(Arc::new(
            Self {
                fences: fences.clone(),
                global,
                current,
                monitored,
                sys_va,
            },
            GFP_KERNEL_ACCOUNT,
        )?)
    }

    /// Global handle.
    pub(crate) fn global(&self) -> FenceHandle {
        self.global
    }

    /// The CurrentValue page (CurrentValue at offset 0).
    pub(crate) fn current(&self) -> &Arc<DmaBuf> {
        &self.current
    }

    /// MonitoredValue, as the module last wrote it.
    pub(crate) fn monitored_value(&self) -> u64 {
        self.monitored.read64(0)
    }

    /// Whether it lives on the device of `core`.
    pub(crate) fn is_on(&self, fences: &Fences) -> bool {
        core::ptr::eq(&*self.fences, fences)
    }

    /// Maps CurrentValue read/write at `va` of `space` (a local handle's GPU VA).
    ///
    /// # Errors
    ///
    /// `ENODEV`, `ENOMEM`, `EINVAL`.
    pub(crate) fn map_local(&self, space: &mut AddressSpace, va: u64) -> Result {
        let core = self.fences.core();
        let hw = core.hw()?;
        let before = space.mapped_pages();
        let r = space.map_buf(hw.dev()?, va, &self.current, true);
        core.add_gpu_pages(before, space.mapped_pages());
        r
    }

    /// Unmaps a local handle's GPU VA `va` from `space`.
    pub(crate) fn unmap_local(&self, space: &mut AddressSpace, va: u64) {
        self.fences.core().unmap_pages(space, va, 1);
    }
}

impl Drop for GlobalFence {
    fn drop(&mut self) {
        let forgotten = self.fences.unregister_confirmed(self.global);
        self.fences.core().release_system(self.sys_va, forgotten);
        let mut book = self.fences.book();
        book.global_fences = book.global_fences.saturating_sub(1);
    }
}
