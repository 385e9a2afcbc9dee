// SPDX-License-Identifier: GPL-2.0

//! Context and memory ioctls: `CREATE_CONTEXT`, `DESTROY_CONTEXT`, `SUSPEND_CONTEXT`,
//! `RESUME_CONTEXT`, `CONTEXT_STATUS`, `ALLOC`, `FREE`.

use kernel::prelude::*;

use super::state::{released, Allocation, BelfryFile, FileContext, MAX_CONTEXTS_PER_PROCESS};
use crate::{
    abi::{mmu, uapi, uapi_sync},
    context::Context,
    fence::object::FencePages,
    hw::shares::Share,
};

/// Largest allocation (`QUERY_CAPS.max_allocation`): 4 MiB. An allocation is one physically
/// contiguous DMA-coherent buffer, and the page allocator serves at most `MAX_PAGE_ORDER` (10)
/// pages of 4 KiB in one piece; more is refused before it reaches the allocator (it would
/// warn). Backing allocations by pages mapped one by one would lift this (the residency
/// issue).
pub(super) const MAX_ALLOCATION: u64 = 4 << 20;

impl BelfryFile {
    /// `CREATE_CONTEXT`: a device context with a fresh address space (`ENOSPC` beyond
    /// [`MAX_CONTEXTS_PER_PROCESS`] for the opener's process, across its files).
    pub(super) fn create_context(&self, a: &mut uapi::CreateContext) -> Result {
        if a.flags != 0 {
            return Err(EINVAL);
        }
        let mut st = self.state.lock();
        let (handle, share) = st.new_handle(&self.gpu.core, self.share_owner())?;
        st.contexts.reserve(1, GFP_KERNEL_ACCOUNT)?;
        let core = &self.gpu.core;
        core.objects()
            .charge(self.share_owner(), Share::Context, MAX_CONTEXTS_PER_PROCESS)?;
        let ctx = Context::create(core)
            .inspect_err(|_| core.objects().uncharge(self.share_owner(), Share::Context))?;
        st.contexts.push(
            FileContext {
                handle,
                _share: share,
                ctx,
                fence_pages: FencePages::new(),
                split_busy: false,
            },
            GFP_KERNEL_ACCOUNT,
        )?;
        a.handle = handle;
        Ok(())
    }

    /// `DESTROY_CONTEXT`: `EBUSY` while allocations, queues or fences use it.
    pub(super) fn destroy_context(&self, handle: u32) -> Result {
        let mut st = self.state.lock();
        let c = st.context(handle)?;
        if st.allocs.iter().any(|a| a.context == handle)
            || st.vallocs.iter().any(|v| v.context == handle)
            || st.queues.iter().any(|q| q.context == handle)
            || st.fences.iter().any(|f| f.context == handle)
        {
            return Err(EBUSY);
        }
        let pages = st.contexts[c].fence_pages.len();
        let mut released = released(pages)?;
        let st = &mut *st;
        let mut fc = st.contexts.remove(c).map_err(|_| EINVAL)?;
        fc.fence_pages
            .release(&self.gpu.core, &mut fc.ctx, &mut released);
        fc.ctx.destroy(&self.gpu.core);
        self.gpu
            .core
            .objects()
            .uncharge(self.share_owner(), Share::Context);
        Ok(())
    }

    /// `SUSPEND_CONTEXT` (`suspend`) or `RESUME_CONTEXT`: passed through to the device, with the
    /// context's doorbells' statuses.
    pub(super) fn suspend_context(&self, handle: u32, suspend: bool) -> Result {
        let id = {
            let st = self.state.lock();
            st.contexts[st.context(handle)?].ctx.id()
        };
        let gpu = &self.gpu;
        gpu.doorbells
            .suspend_context(&mut gpu.core.hw()?, id, suspend)
    }

    /// `CONTEXT_STATUS`: lost when the context faulted (guilty: its own work did; the
    /// reason and address from the device's `QUERY_QUEUE` of one of its queues) or when the
    /// device is gone (lost, not guilty).
    pub(super) fn context_status(&self, a: &mut uapi_sync::ContextStatus) -> Result {
        if a.pad != 0 {
            return Err(EINVAL);
        }
        let st = self.state.lock();
        let id = st.contexts[st.context(a.context)?].ctx.id();
        (a.flags, a.fault_reason, a.fault_address) = (0, 0, 0);
        let Ok(mut hw) = self.gpu.core.hw() else {
            a.flags = uapi_sync::CONTEXT_LOST;
            return Ok(());
        };
        if !self.gpu.core.objects().is_faulted(id) {
            return Ok(());
        }
        a.flags = uapi_sync::CONTEXT_LOST | uapi_sync::CONTEXT_GUILTY;
        for q in st.queues.iter().filter(|q| q.context == a.context) {
            if let Some((reason, address)) = q.hwq.fault(&mut hw)? {
                if reason != 0 {
                    (a.fault_reason, a.fault_address) = (reason, address);
                    break;
                }
            }
        }
        Ok(())
    }

    /// `ALLOC`.
    pub(super) fn alloc(&self, a: &mut uapi::Alloc) -> Result {
        if a.pad != 0
            || a.flags & !uapi::ALLOC_GPU_READ_ONLY != 0
            || a.size == 0
            || a.size > MAX_ALLOCATION
        {
            return Err(EINVAL);
        }
        let pages = usize::try_from(a.size.div_ceil(mmu::PAGE_SIZE))?;
        let gpu_read_only = a.flags & uapi::ALLOC_GPU_READ_ONLY != 0;
        let core = &*self.gpu.core;
        let mut st = self.state.lock();
        let c = st.context(a.context)?;
        let (handle, share) = st.new_handle(&self.gpu.core, self.share_owner())?;
        st.allocs.reserve(1, GFP_KERNEL_ACCOUNT)?;
        let (buf, va) = st.contexts[c]
            .ctx
            .map_allocation(core, pages, !gpu_read_only)?;
        let pgoff = core.objects().new_pgoff(pages);
        st.allocs.push(
            Allocation {
                handle,
                _share: share,
                context: a.context,
                buf,
                gpu_va: va,
                pgoff,
                gpu_read_only,
            },
            GFP_KERNEL_ACCOUNT,
        )?;
        a.handle = handle;
        a.gpu_va = va;
        a.mmap_offset = pgoff << mmu::PAGE_SHIFT;
        Ok(())
    }

    /// `FREE`: `EBUSY` while a queue uses the allocation as its ring or ring control.
    pub(super) fn free(&self, handle: u32) -> Result {
        let mut st = self.state.lock();
        let st = &mut *st;
        let i = st.alloc(handle)?;
        if st
            .queues
            .iter()
            .any(|q| matches!(q.user_allocs, Some((r, c)) if r == handle || c == handle))
        {
            return Err(EBUSY);
        }
        let a = st.allocs.remove(i).map_err(|_| EINVAL)?;
        if let Ok(c) = st.context(a.context) {
            st.contexts[c]
                .ctx
                .unmap_allocation(&self.gpu.core, a.gpu_va, a.buf.pages());
        }
        // `a.buf` drops here: the memory is freed now, or by the process's last `munmap` of it.
        Ok(())
    }
}
