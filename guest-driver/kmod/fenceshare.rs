// SPDX-License-Identifier: GPL-2.0

//! Shared native fences (SHR-01..05): the global object and its local handles.
//!
//! A `FENCE_SHAREABLE` DEFAULT fence is one [`GlobalFence`] on the device: its CurrentValue and
//! MonitoredValue pages (each holding this fence only, NF-08), mapped in the system address
//! space and registered with the device under one global handle. Every local handle (the
//! creator's, and each `IMPORT_FENCE`) holds an `Arc` of it and maps its CurrentValue page in
//! its own context's address space and, read-only, at an mmap offset of its own file. An
//! exported fd (`EXPORT_FENCE`, an `anon_inode:belfry-fence` file, see `ffi.rs`) holds one more
//! reference. Closing a local handle unmaps it from its context and drops its reference
//! (SHR-03); when the last reference goes, [`GlobalFence`]'s `drop` unregisters the fence from
//! the device and unmaps it from the system address space (SHR-04: the local handle is closed
//! first, then the global object destroyed).
//!
//! A `GlobalFence` must never be dropped with the hardware locked (its `drop` locks it).

use kernel::{prelude::*, sync::Arc};

use crate::{
    abi::{fence, mailbox, mmu},
    dmamem::DmaBuf,
    gpucore::Core,
    pagetable::AddressSpace,
};

/// The device-wide object of a shared native fence.
pub(crate) struct GlobalFence {
    /// The core it is registered with.
    core: Arc<Core>,
    /// Global handle (device and interrupt records).
    global: u64,
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
    pub(crate) fn new(core: &Arc<Core>, initial: u64) -> Result<Arc<Self>> {
        let (current, monitored, global, sys_va) = {
            let mut hw = core.hw()?;
            let current = Arc::new(DmaBuf::new(hw.dev()?, 1)?, GFP_KERNEL)?;
            let monitored = DmaBuf::new(hw.dev()?, 1)?;
            current.write64(0, initial);
            // Nobody waits yet (MV-02).
            monitored.write64(0, fence::MONITORED_VALUE_NONE);
            let (global, sys_va) = {
                let mut objects = core.objects();
                let global = objects.take_fence_handle();
                (global, core.map_fence_values(&hw, &mut objects, &current, Some(&monitored))?)
            };
            let location = |address| mailbox::FenceLocation {
                space: mailbox::LOCATION_SYSTEM_VA,
                address,
                ..Default::default()
            };
            let registered = crate::fencewait::register(
                core,
                &mut hw,
                global,
                fence::FenceKind::Default,
                location(sys_va),
                location(sys_va + mmu::PAGE_SIZE),
            );
            if let Err(e) = registered {
                drop(hw);
                unmap_system(core, sys_va);
                return Err(e);
            }
            (current, monitored, global, sys_va)
        };
        core.objects().fences.global_fences += 1;
        // A failed allocation drops the value, whose `drop` undoes the above (no lock held).
        Ok(Arc::new(
            Self {
                core: core.clone(),
                global,
                current,
                monitored,
                sys_va,
            },
            GFP_KERNEL,
        )?)
    }

    /// Global handle.
    pub(crate) fn global(&self) -> u64 {
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
    pub(crate) fn is_on(&self, core: &Core) -> bool {
        core::ptr::eq(&*self.core, core)
    }

    /// Maps CurrentValue read/write at `va` of `space` (a local handle's GPU VA).
    ///
    /// # Errors
    ///
    /// `ENODEV`, `ENOMEM`, `EINVAL`.
    pub(crate) fn map_local(&self, space: &mut AddressSpace, va: u64) -> Result {
        let hw = self.core.hw()?;
        let before = space.mapped_pages();
        let r = space.map_buf(hw.dev()?, va, &self.current, true);
        self.core.add_gpu_pages(before, space.mapped_pages());
        r
    }

    /// Unmaps a local handle's GPU VA `va` from `space`.
    pub(crate) fn unmap_local(&self, space: &mut AddressSpace, va: u64) {
        let before = space.mapped_pages();
        space.unmap_range(va, 1);
        self.core.add_gpu_pages(before, space.mapped_pages());
    }
}

impl Drop for GlobalFence {
    fn drop(&mut self) {
        crate::fencewait::unregister(&self.core, self.global);
        unmap_system(&self.core, self.sys_va);
        let mut objects = self.core.objects();
        objects.fences.global_fences = objects.fences.global_fences.saturating_sub(1);
    }
}

/// Unmaps a shared fence's two pages at `sys_va` from the system address space.
fn unmap_system(core: &Core, sys_va: u64) {
    let mut objects = core.objects();
    if let Ok(system) = objects.system() {
        let before = system.mapped_pages();
        system.unmap_range(sys_va, 2);
        core.add_gpu_pages(before, system.mapped_pages());
    }
}
