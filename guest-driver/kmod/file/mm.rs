// SPDX-License-Identifier: GPL-2.0

//! Video-memory ioctls: `CREATE_ALLOCATION`, `DESTROY_ALLOCATION`, `ALLOCATION_RW`,
//! `SUBMIT_SPLIT`, `MM_STATS`. Validation and per-file handles here; placement, paging and
//! splitting in the memory manager (`crate::mm`).

use core::cell::Cell;

use kernel::{
    prelude::*,
    sync::Arc,
    uaccess::{UserPtr, UserSlice},
};

use super::state::{BelfryFile, FileState, FileVidAlloc};
use crate::{
    abi::{
        ids::FenceHandle,
        mmu,
        packet::{self, Opcode},
        ring, uapi,
    },
    context::page_bytes,
    gpu::Gpu,
    hw::{dmamem::DmaBuf, objects::Kind},
    mm::{alloc::VidAlloc, SplitJob},
};

/// Bytes `ALLOCATION_RW` moves per step through its bounce buffer.
const RW_CHUNK: usize = 64 * 1024;

impl BelfryFile {
    /// `CREATE_ALLOCATION`.
    pub(super) fn create_allocation(&self, a: &mut uapi::CreateAllocation) -> Result {
        let vram = match a.preferred {
            uapi::SEGMENT_VRAM => true,
            uapi::SEGMENT_SYSTEM => false,
            _ => return Err(EINVAL),
        };
        let fallback = match a.fallback {
            uapi::SEGMENT_SYSTEM => true,
            uapi::SEGMENT_NONE if vram => false,
            _ => return Err(EINVAL),
        };
        if a.pad != 0
            || a.pad2 != 0
            || a.size == 0
            || a.size % mmu::PAGE_SIZE != 0
            || a.size > uapi::MAX_VIDEO_ALLOCATION
        {
            return Err(EINVAL);
        }
        let mut st = self.state.lock();
        let c = st.context(a.context)?;
        let (handle, share) = st.new_handle(&self.gpu.core, self.share_owner())?;
        st.vallocs.reserve(1, GFP_KERNEL_ACCOUNT)?;
        let (id, alloc) = self.new_valloc(&mut st, c, a.size, vram, fallback, None)?;
        let va = alloc.gpu_va;
        st.vallocs.push(
            FileVidAlloc {
                handle,
                _share: share,
                context: a.context,
                id,
                alloc,
            },
            GFP_KERNEL_ACCOUNT,
        )?;
        a.handle = handle;
        a.gpu_va = va;
        Ok(())
    }

    /// A video allocation of `size` bytes in the file's context `c` at a new GPU VA, managed by
    /// the memory manager (`vram`: preferring VRAM; `fallback`: used from system memory when
    /// VRAM cannot hold it). With `cpu_pgoff`, a one-page allocation
    /// with a CPU mapping at that mmap offset that follows it, pinned (a queue's ring in VRAM).
    /// Its memory-manager id and the allocation; undone by [`drop_valloc`].
    ///
    /// # Errors
    ///
    /// `ENOSPC` (VA), `ENOMEM`, `ENODEV`, the mapping errors; nothing stays made.
    pub(super) fn new_valloc(
        &self,
        st: &mut FileState,
        c: usize,
        size: u64,
        vram: bool,
        fallback: bool,
        cpu_pgoff: Option<u64>,
    ) -> Result<(u64, Arc<VidAlloc>)> {
        let core = &*self.gpu.core;
        let pages = usize::try_from(size / mmu::PAGE_SIZE)?;
        let fc = &mut st.contexts[c];
        let va = fc.ctx.reserve_va(pages)?;
        let made = (|| -> Result<VidAlloc> {
            let hw = core.hw()?;
            let before = fc.ctx.space.mapped_pages();
            let made = VidAlloc::new(hw.dev()?, &mut fc.ctx.space, va, size, vram);
            core.add_gpu_pages(before, fc.ctx.space.mapped_pages());
            match cpu_pgoff {
                Some(pgoff) => made?.with_cpu_view(self.mapping.ok_or(EINVAL)?, pgoff, core.vram_bar()),
                None => made,
            }
        })();
        let alloc = match made.and_then(|m| Arc::new(m, GFP_KERNEL_ACCOUNT).map_err(Error::from)) {
            Ok(alloc) => alloc,
            Err(e) => {
                core.unmap_pages(&mut fc.ctx.space, va, pages);
                return Err(e);
            }
        };
        core.objects().count(Kind::Allocation, true);
        match self
            .gpu
            .mm
            .register(&self.gpu.queue_env(), alloc.clone(), fc.ctx.id(), cpu_pgoff.is_some(), fallback)
        {
            Ok(id) => Ok((id, alloc)),
            Err(e) => {
                fc.ctx.unmap_allocation(core, va, pages);
                Err(e)
            }
        }
    }

    /// `DESTROY_ALLOCATION`.
    pub(super) fn destroy_allocation(&self, handle: u32) -> Result {
        let mut st = self.state.lock();
        let i = st.valloc(handle)?;
        st.split_idle(st.vallocs[i].context)?;
        let v = st.vallocs.remove(i).map_err(|_| EINVAL)?;
        drop_valloc(&self.gpu, &mut st, v.context, v.id, &v.alloc);
        Ok(())
    }

    /// `ALLOCATION_RW`: the allocation is moved to system memory first, then copied.
    pub(super) fn allocation_rw(&self, a: &uapi::AllocationRw) -> Result {
        let write = match a.write {
            0 => false,
            1 => true,
            _ => return Err(EINVAL),
        };
        let (id, size) = {
            let st = self.state.lock();
            let v = &st.vallocs[st.valloc(a.handle)?];
            // Moving it to system memory would suspend its context under a split part.
            st.split_idle(v.context)?;
            (v.id, v.alloc.size)
        };
        let end = a.offset.checked_add(a.size).ok_or(EINVAL)?;
        if end > size {
            return Err(EINVAL);
        }
        let mut bounce = KVec::from_elem(0u8, RW_CHUNK, GFP_KERNEL)?;
        let env = self.gpu.queue_env();
        let mut done = 0u64;
        while done < a.size {
            // CAST: at most `RW_CHUNK`.
            let n = (a.size - done).min(RW_CHUNK as u64) as usize;
            let user = UserPtr::from_addr(usize::try_from(a.user_ptr.checked_add(done).ok_or(EINVAL)?)?);
            let buf = &mut bounce[..n];
            if write {
                UserSlice::new(user, n).reader().read_slice(buf)?;
                self.gpu.mm.access(&env, id, a.offset + done, buf, true)?;
            } else {
                self.gpu.mm.access(&env, id, a.offset + done, buf, false)?;
                UserSlice::new(user, n).writer().write_slice(buf)?;
            }
            // CAST: `usize` fits `u64`.
            done += n as u64;
        }
        Ok(())
    }

    /// `SUBMIT_SPLIT`: the buffer is copied, its packets and patch locations checked, then the
    /// memory manager runs it in as many parts as VRAM requires; returns once it has run.
    ///
    /// The file's lock is let go while the parts run on the GPU (a part may wait on a fence
    /// nobody signals, up to 10 s): the queue's context is marked busy meanwhile
    /// ([`super::state::FileContext::split_busy`]), so the objects the submission uses stay, and
    /// every other ioctl of the file goes on. A second `SUBMIT_SPLIT` of the context waits for
    /// the first (`ERESTARTSYS` on a signal).
    pub(super) fn submit_split(&self, s: &mut uapi::SubmitSplit) -> Result {
        if s.pad != 0
            || s.allocation_count > uapi::MAX_ALLOCATION_LIST
            || s.patch_count > uapi::MAX_PATCH_LOCATIONS
            || s.offset % 4 != 0
            || s.size % 4 != 0
            || s.size == 0
            || s.size > ring::CMDBUF_MAX_BYTES
        {
            return Err(EINVAL);
        }
        let handles = read_list::<u32>(s.allocations, s.allocation_count)?;
        let patches = read_list::<uapi::PatchLocation>(s.patches, s.patch_count)?;
        let core = &*self.gpu.core;
        let mut guard = self.state.lock();
        // One submission of a context at a time: the memory manager keeps a waiting context's
        // allocations where they are, and moves between its parts count on the context idle.
        while guard.split_idle(guard.queues[guard.queue(s.queue)?].context).is_err() {
            if self.split_done.wait_interruptible(&mut guard) {
                return Err(ERESTARTSYS);
            }
        }
        let st = &mut *guard;
        let qi = st.queue(s.queue)?;
        let ai = st.alloc(s.cmdbuf)?;
        let (qctx, alloc) = (st.queues[qi].context, &st.allocs[ai]);
        let kring = st.queues[qi].hwq.kring.clone().ok_or(EPERM)?;
        let end = u64::from(s.offset) + u64::from(s.size);
        if alloc.context != qctx || end > page_bytes(alloc.buf.pages()) {
            return Err(EINVAL);
        }
        // The allocation list: video allocations of the queue's context, or none.
        let mut list = KVec::with_capacity(handles.len(), GFP_KERNEL)?;
        for &h in handles.iter() {
            list.push(
                match h {
                    0 => None,
                    h => {
                        let v = &st.vallocs[st.valloc(h)?];
                        if v.context != qctx {
                            return Err(EINVAL);
                        }
                        Some(v.id)
                    }
                },
                GFP_KERNEL,
            )?;
        }
        // The module's copy: the process cannot change what was checked.
        let pages = usize::try_from(u64::from(s.size).div_ceil(mmu::PAGE_SIZE))?;
        let kbuf = DmaBuf::new(core.hw()?.dev()?, pages)?;
        copy_buf(&alloc.buf, usize::try_from(s.offset)?, &kbuf, usize::try_from(s.size)?)?;
        check(&kbuf, s.size, &patches, list.len(), self.gpu.mm.slots())?;
        let c = st.context(qctx)?;
        let ctx_id = st.contexts[c].ctx.id();
        let va = st.contexts[c].ctx.reserve_va(pages)?;
        {
            let hw = core.hw()?;
            let space = &mut st.contexts[c].ctx.space;
            let before = space.mapped_pages();
            let mapped = space.map_buf(hw.dev()?, va, &kbuf, false);
            core.add_gpu_pages(before, space.mapped_pages());
            mapped?;
        }
        let q = &st.queues[qi];
        let qid = q.hwq.id.ok_or(EINVAL)?;
        let progress_handle = q.hwq.fence.as_ref().map_or(FenceHandle::new(0), |f| f.handle);
        // From here to the lock taken again, nothing returns early: the mark is cleared there.
        st.contexts[c].split_busy = true;
        drop(guard);
        let logs = &self.gpu.logs;
        let queued = Cell::new(false);
        let last = |part_va: u64, size: u32| -> Result<u32> {
            // CAST: `part_va - va` is an offset in the copy, below 1 MiB.
            let offset = (part_va - va) as u32;
            let log_entry = logs.note_submit(qid, &kbuf, offset, size, progress_handle, s.progress_value);
            kring
                .submit(&self.gpu.held, part_va, size, s.progress_value, log_entry)
                .inspect_err(|_| logs.unnote_submit(qid, log_entry))?;
            queued.set(true);
            Ok(kring.write_index())
        };
        let lost = || core.objects().is_faulted(ctx_id);
        let job = SplitJob {
            buf: &kbuf,
            va,
            size: s.size,
            list: &list,
            patches: &patches,
            ring: &kring,
            context: ctx_id,
            last: &last,
            lost: &lost,
        };
        let result = self.gpu.mm.submit_split(&self.gpu.queue_env(), &job);
        let mut guard = self.state.lock();
        let st = &mut *guard;
        // The queue and its context stayed: their destroys were refused meanwhile.
        if queued.get() {
            if let Ok(qi) = st.queue(s.queue) {
                let q = &mut st.queues[qi];
                q.last_submitted = q.last_submitted.max(s.progress_value);
            }
        }
        // Every part has run, or will not run with this copy: its context is lost, or the
        // caller was killed and its release suspends its contexts, or (`ETIMEDOUT`) it faults
        // its own context on the missing copy if it ever runs. The copy goes.
        if let Ok(c) = st.context(qctx) {
            core.unmap_pages(&mut st.contexts[c].ctx.space, va, pages);
            st.contexts[c].split_busy = false;
        }
        drop(guard);
        self.split_done.notify_all();
        s.parts = result?;
        Ok(())
    }
}

/// Undoes [`BelfryFile::new_valloc`] for allocation `id` (`alloc`) of the file's context
/// `context`: its CPU mapping revoked, the memory manager lets it go (the context's entries off
/// its VRAM range, the context idle once, then the range free again), unmapped from the
/// context.
pub(super) fn drop_valloc(gpu: &Gpu, st: &mut FileState, context: u32, id: u64, alloc: &VidAlloc) {
    alloc.revoke_cpu_view();
    gpu.mm.unregister(&gpu.queue_env(), id);
    if let Ok(c) = st.context(context) {
        st.contexts[c]
            .ctx
            .unmap_allocation(&gpu.core, alloc.gpu_va, alloc.pages());
    }
}

/// Reads `count` `T`s from user address `addr`.
fn read_list<T: kernel::transmute::FromBytes>(addr: u64, count: u32) -> Result<KVec<T>> {
    let n = usize::try_from(count)?;
    let mut out = KVec::with_capacity(n, GFP_KERNEL)?;
    let mut reader = UserSlice::new(
        UserPtr::from_addr(usize::try_from(addr)?),
        n.checked_mul(core::mem::size_of::<T>()).ok_or(EINVAL)?,
    )
    .reader();
    for _ in 0..n {
        out.push(reader.read::<T>()?, GFP_KERNEL)?;
    }
    Ok(out)
}

/// Copies `size` bytes at `offset` of `src` to the start of `dst`.
fn copy_buf(src: &DmaBuf, offset: usize, dst: &DmaBuf, size: usize) -> Result {
    let mut page = KVec::from_elem(0u8, 4096, GFP_KERNEL)?;
    let mut done = 0;
    while done < size {
        let n = (size - done).min(page.len());
        src.read_bytes(offset + done, &mut page[..n]);
        dst.write_bytes(done, &page[..n]);
        done += n;
    }
    Ok(())
}

/// Checks the copy's packets (as the device will) and the patch locations against them: each
/// split offset is a packet boundary inside the buffer, at or before its patch location, which
/// is the `va` of a `BIND_SLOT` of the entry's slot; indexes and slots in range; split offsets
/// non-decreasing (checked again by the memory manager).
fn check(buf: &DmaBuf, size: u32, patches: &[uapi::PatchLocation], list: usize, slots: u32) -> Result {
    // CAST: at most `CMDBUF_MAX_BYTES` (1 MiB).
    let size = size as usize;
    // One bit per dword: a packet starts there.
    let mut starts = KVec::from_elem(0u64, size.div_ceil(4 * 64), GFP_KERNEL)?;
    let mut window = [0u8; 64];
    let mut at = 0;
    while at < size {
        let n = (size - at).min(window.len());
        buf.read_bytes(at, &mut window[..n]);
        let (op, dwords) = match packet::validate(&window[..n]) {
            Ok(v) => v,
            // A NOP longer than the window is checked by its header alone.
            Err(packet::PacketError::Truncated) if n == window.len() => {
                let h = u32::from_le_bytes([window[0], window[1], window[2], window[3]]);
                packet::check_header(h).map_err(|_| EINVAL)?
            }
            Err(_) => return Err(EINVAL),
        };
        let _ = op;
        starts[at / 256] |= 1 << ((at / 4) % 64);
        // CAST: a packet is at most 65535 dwords.
        at += dwords as usize * 4;
    }
    if at != size {
        return Err(EINVAL);
    }
    let starts_at = |o: usize| o < size && o % 4 == 0 && starts[o / 256] & (1 << ((o / 4) % 64)) != 0;
    let mut last = 0;
    for p in patches {
        let split = usize::try_from(p.split_offset)?;
        let patch = usize::try_from(p.patch_offset)?;
        let bind = patch.checked_sub(packet::BIND_SLOT_PATCH_OFFSET as usize).ok_or(EINVAL)?;
        if usize::try_from(p.allocation_index)? >= list
            || p.slot_id >= slots
            || split < last
            || !starts_at(split)
            || !starts_at(bind)
            || bind < split
        {
            return Err(EINVAL);
        }
        last = split;
        let mut b = [0u8; core::mem::size_of::<packet::BindSlot>()];
        buf.read_bytes(bind, &mut b);
        let header = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let slot = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        if packet::header_opcode(header) != Opcode::BindSlot as u32 || slot != p.slot_id {
            return Err(EINVAL);
        }
    }
    Ok(())
}
