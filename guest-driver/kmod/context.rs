// SPDX-License-Identifier: GPL-2.0

//! Domain layer: contexts and their address spaces. A [`Context`] is a device context with a
//! GPU address space of its own; this file holds the mailbox sequences that create and destroy
//! them and the allocation of the context's GPU VA (allocations, fence pages, rings).

use kernel::{prelude::*, sync::Arc};

use crate::{
    abi::{
        ids::ContextId,
        mailbox::{self, Opcode},
    },
    hw::{
        core::Core,
        dmamem::DmaBuf,
        objects::Kind,
        pagetable::AddressSpace,
        quarantine::Kept,
    },
};

/// First GPU VA handed out in a context's address space.
const USER_VA_BASE: u64 = 0x1_0000_0000;
/// End of the GPU VA range handed out (half the 48-bit space).
const USER_VA_END: u64 = 1 << 47;

/// Bytes of `pages` pages.
pub(crate) fn page_bytes(pages: usize) -> u64 {
    // CAST: page counts are bounded by the largest allocation and ring sizes; `usize` fits
    // `u64`.
    (pages * crate::hw::dmamem::PAGE) as u64
}

/// A device context with its own GPU address space.
pub(crate) struct Context {
    /// Device context id.
    id: ContextId,
    /// Its address space.
    pub(crate) space: AddressSpace,
    /// Next free GPU VA.
    next_va: u64,
}

impl Context {
    /// `CREATE_ADDRESS_SPACE` and `CREATE_CONTEXT` with new ids (counted in `DEBUG_STATS`).
    ///
    /// # Errors
    ///
    /// `ENOSPC` when the ids run out, `EIO` if the device refuses, `ENODEV`, `ETIMEDOUT`,
    /// `ENOMEM`. Nothing is left on the device or taken on failure.
    pub(crate) fn create(core: &Core) -> Result<Self> {
        let (space_id, ctx_id) = core.objects().take_context_ids().ok_or(ENOSPC)?;
        // On failure: the error, and the address space if the device may still hold it.
        let created = (|| -> core::result::Result<AddressSpace, (Error, Option<AddressSpace>)> {
            let mut hw = core.hw().map_err(|e| (e, None))?;
            let space = AddressSpace::new(hw.dev().map_err(|e| (e, None))?, space_id)
                .map_err(|e| (e, None))?;
            let mut a = mailbox::CreateAddressSpaceArgs {
                id: space_id.raw(),
                root_pa: space.root_pa(),
                ..Default::default()
            };
            hw.command(Opcode::CreateAddressSpace, &mut a, &[])
                .map_err(|e| (e, None))?;
            let mut c = mailbox::CreateContextArgs {
                id: ctx_id.raw(),
                address_space: space_id.raw(),
                ..Default::default()
            };
            if let Err(e) = hw.command(Opcode::CreateContext, &mut c, &[]) {
                // Failures are logged by `command`.
                let destroyed = hw
                    .object_command(Opcode::DestroyAddressSpace, space_id.raw())
                    .is_ok();
                return Err((e, (!destroyed).then_some(space)));
            }
            Ok(space)
        })();
        let space = match created {
            Ok(space) => space,
            Err((e, None)) => {
                core.objects().put_context_ids(space_id, ctx_id);
                return Err(e);
            }
            Err((e, Some(space))) => {
                // The device did not confirm destroying the address space: it may still walk
                // its page tables and would refuse the id to the next context, so the page
                // tables and both ids stay taken until the device is reset, as a context's do.
                let mut objects = core.objects();
                if !objects.device_forgot() {
                    pr_warn!(
                        "address space {}: the device did not confirm its destruction; its page tables and ids are kept until the device is reset\n",
                        space_id.raw()
                    );
                }
                let kept = Self {
                    id: ctx_id,
                    space,
                    next_va: USER_VA_BASE,
                };
                objects.quarantine(Kept::Context, kept);
                return Err(e);
            }
        };
        core.objects().count(Kind::Context, true);
        Ok(Self {
            id: ctx_id,
            space,
            next_va: USER_VA_BASE,
        })
    }

    /// `DESTROY_CONTEXT` and `DESTROY_ADDRESS_SPACE`, then the page tables are freed and the
    /// ids given back; if the device refuses or does not answer either, the context (page
    /// tables and ids) goes to quarantine instead (`Objects::quarantine`, until the device is
    /// reset). Without the device (unbound) too: the unbind revokes the core before it resets the
    /// device, and the quarantine goes with the core, after the reset.
    pub(crate) fn destroy(self, core: &Core) {
        // Failures are logged by `command`.
        let confirmed = core.hw().is_ok_and(|mut hw| {
            hw.object_command(Opcode::DestroyContext, self.id.raw()).is_ok()
                && hw
                    .object_command(Opcode::DestroyAddressSpace, self.space.id().raw())
                    .is_ok()
        });
        core.add_gpu_pages(self.space.mapped_pages(), 0);
        let mut objects = core.objects();
        objects.count(Kind::Context, false);
        if !confirmed {
            // The device may still walk the page tables: they and the ids stay (quarantine)
            // until the device is reset; freed at once after a reset made it forget them.
            if !objects.device_forgot() {
                pr_warn!(
                    "context {}: the device did not confirm its destruction; its page tables and ids are kept until the device is reset\n",
                    self.id.raw()
                );
            }
            objects.quarantine(Kept::Context, self);
            return;
        }
        objects.put_context_ids(self.space.id(), self.id);
    }

    /// The device context id.
    pub(crate) fn id(&self) -> ContextId {
        self.id
    }

    /// Reserves `pages` pages (and a guard page) of GPU VA.
    ///
    /// # Errors
    ///
    /// `ENOSPC` past the end of the range handed out.
    pub(crate) fn reserve_va(&mut self, pages: usize) -> Result<u64> {
        let va = self.next_va;
        let end = va
            .checked_add(page_bytes(pages + 1))
            .filter(|&e| e <= USER_VA_END)
            .ok_or(ENOSPC)?;
        self.next_va = end;
        Ok(va)
    }

    /// `ALLOC`: `pages` new DMA-coherent pages mapped at a new GPU VA (`writable` for the GPU),
    /// counted as an allocation; the memory and its GPU VA.
    ///
    /// # Errors
    ///
    /// `ENOSPC` (VA), `ENOMEM`, `ENODEV`. Nothing stays mapped on failure.
    pub(crate) fn map_allocation(
        &mut self,
        core: &Core,
        pages: usize,
        writable: bool,
    ) -> Result<(Arc<DmaBuf>, u64)> {
        let va = self.reserve_va(pages)?;
        let hw = core.hw()?;
        let buf = Arc::new(DmaBuf::new(hw.dev()?, pages)?, GFP_KERNEL_ACCOUNT)?;
        let before = self.space.mapped_pages();
        self.space.map_buf(hw.dev()?, va, &buf, writable)?;
        core.add_gpu_pages(before, self.space.mapped_pages());
        core.objects().count(Kind::Allocation, true);
        Ok((buf, va))
    }

    /// Unmaps an allocation of `pages` pages at `va` and counts it gone.
    pub(crate) fn unmap_allocation(&mut self, core: &Core, va: u64, pages: usize) {
        core.unmap_pages(&mut self.space, va, pages);
        core.objects().count(Kind::Allocation, false);
    }
}
