// SPDX-License-Identifier: GPL-2.0

//! Queue ioctls: `CREATE_QUEUE`, `DESTROY_QUEUE`, `SUBMIT`, `QUEUE_WAIT_FENCE`,
//! `QUEUE_SIGNAL_FENCE`, `WAIT_PROGRESS`.

use kernel::{prelude::*, sync::Arc};

use super::{
    args::timeout_ms,
    mm::drop_valloc,
    state::{released, BelfryFile, FileQueue, FileState, MAX_QUEUES_PER_PROCESS},
};
use crate::{
    abi::{
        engine,
        ids::{ContextId, FenceHandle},
        mmu, ring, uapi, uapi_debug,
    },
    bindings::cap,
    context::page_bytes,
    mm::alloc::VidAlloc,
    fence::{
        object::{CpuPlace, QueueTarget},
        window,
    },
    hw::shares::Share,
    queue::{build::HwQueue, items::HeldWait},
};

impl BelfryFile {
    /// `CREATE_QUEUE` (`ENOSPC` beyond [`MAX_QUEUES_PER_PROCESS`] for the opener's process).
    pub(super) fn create_queue(&self, a: &mut uapi::CreateQueue) -> Result {
        let info = self.gpu.core.info();
        let user_mode = a.flags & uapi::QUEUE_USER_MODE_SUBMISSION != 0;
        // A user-mode queue's progress fence is a native fence (CAP-08).
        if user_mode && !self.feature.enabled() {
            return Err(EOPNOTSUPP);
        }
        let in_vram = a.flags & uapi::QUEUE_RING_IN_VRAM != 0;
        if a.flags & !(uapi::QUEUE_USER_MODE_SUBMISSION | uapi::QUEUE_RING_IN_VRAM) != 0
            // Rings in VRAM: user-mode, made by the module, one page.
            || (in_vram
                && (!user_mode
                    || a.ring != 0
                    || a.ring_control != 0
                    || a.ring_entries > uapi::VRAM_RING_MAX_ENTRIES
                    || self.mapping.is_none()))
            || a.engine >= info.engines
            || a.priority > engine::PRIORITY_MAX
            || !ring::is_valid_size(a.ring_entries)
            || (user_mode && (info.user_mode_engines >> a.engine) & 1 == 0)
            // NF-21: user-mode queues synchronize through native fences only.
            || (user_mode && !info.caps.native_fence())
            || (!user_mode && (a.ring != 0 || a.ring_control != 0))
        {
            return Err(EINVAL);
        }
        // Strict priority: a queue above normal runs before every normal queue of its engine,
        // so only a caller allowed to raise its own scheduling priority may ask (amdgpu's rule).
        if a.priority > engine::PRIORITY_NORMAL && !cap::capable(cap::Cap::SysNice) {
            return Err(EACCES);
        }
        let core = &*self.gpu.core;
        let mut st = self.state.lock();
        let st = &mut *st;
        let c = st.context(a.context)?;
        // A ring in VRAM is placed now, which would suspend the context under a split part.
        if in_vram {
            st.split_idle(a.context)?;
        }
        // A faulted context refuses new queues (uapi: the library re-creates the context).
        if core.objects().is_faulted(st.contexts[c].ctx.id()) {
            return Err(EIO);
        }
        let user_allocs = if user_mode && !in_vram {
            let r = &st.allocs[st.alloc(a.ring)?];
            let k = &st.allocs[st.alloc(a.ring_control)?];
            let ring_bytes = u64::from(a.ring_entries) * 16;
            if r.context != a.context
                || k.context != a.context
                || a.ring == a.ring_control
                || page_bytes(r.buf.pages()) < ring_bytes
                || k.gpu_read_only
            {
                return Err(EINVAL);
            }
            Some((r.handle, k.handle, r.gpu_va, k.gpu_va))
        } else {
            None
        };
        let (handle, share) = st.new_handle(&self.gpu.core, self.share_owner())?;
        st.queues.reserve(1, GFP_KERNEL_ACCOUNT)?;
        let mut released = released(1)?;
        let mut vram_ring = KVec::new();
        if in_vram {
            self.make_vram_ring(st, c, &mut vram_ring)
                .inspect_err(|_| self.drop_vram_ring(st, a.context, &mut vram_ring, true))?;
        }
        let user_ring = match (user_allocs, vram_ring.as_slice()) {
            (Some((_, _, ring_va, control_va)), _) => Some((ring_va, control_va)),
            (None, [(_, r), (_, k)]) => Some((r.gpu_va, k.gpu_va)),
            _ => None,
        };
        let pgoff = core.objects().new_pgoff(1);
        core.objects()
            .charge(self.share_owner(), Share::Queue, MAX_QUEUES_PER_PROCESS)
            .inspect_err(|_| self.drop_vram_ring(st, a.context, &mut vram_ring, true))?;
        let mut kept = false;
        let hwq = HwQueue::create(
            &self.gpu.queue_env(),
            &mut st.contexts[c].ctx,
            a,
            pgoff,
            user_ring,
            &mut released,
            &mut kept,
        )
        .inspect_err(|_| {
            core.objects().uncharge(self.share_owner(), Share::Queue);
            self.drop_vram_ring(st, a.context, &mut vram_ring, !kept);
        })?;
        let offset = |i: usize| -> u64 {
            vram_ring
                .get(i)
                .and_then(|(_, v)| v.cpu_view())
                .map_or(0, |v| v.pgoff << mmu::PAGE_SHIFT)
        };
        a.ring_mmap_offset = offset(0);
        a.ring_control_mmap_offset = offset(1);
        a.handle = handle;
        if let Some(f) = &hwq.fence {
            a.progress_fence_va = f.proc_va;
            a.progress_mmap_offset = f.pgoff << mmu::PAGE_SHIFT;
            a.progress_log_handle = f.handle.raw();
        }
        st.queues.push(
            FileQueue {
                handle,
                _share: share,
                context: a.context,
                user_allocs: user_allocs.map(|(r, k, _, _)| (r, k)),
                last_submitted: 0,
                engine: a.engine,
                hwq,
                vram_ring,
            },
            GFP_KERNEL_ACCOUNT,
        )?;
        Ok(())
    }

    /// `DESTROY_QUEUE`: `EBUSY` while the queue has a doorbell.
    pub(super) fn destroy_queue(&self, handle: u32) -> Result {
        let mut st = self.state.lock();
        let st = &mut *st;
        let i = st.queue(handle)?;
        if st.doorbells.iter().any(|d| d.queue == handle) {
            return Err(EBUSY);
        }
        st.split_idle(st.queues[i].context)?;
        let mut released = released(1)?;
        let q = st.queues.remove(i).map_err(|_| EINVAL)?;
        self.gpu.core.objects().uncharge(self.share_owner(), Share::Queue);
        let c = st.context(q.context)?;
        if let Some(kring) = &q.hwq.kring {
            kring.close(&self.gpu.held);
        }
        let mut hw = self.gpu.core.hw().ok();
        let destroyed = q.hwq.destroy(
            &self.gpu.queue_env(),
            hw.as_mut(),
            &mut st.contexts[c].ctx,
            &mut released,
        );
        drop(hw);
        let mut ring = q.vram_ring;
        self.drop_vram_ring(st, q.context, &mut ring, destroyed);
        Ok(())
    }

    /// The ring and ring-control allocations of a `QUEUE_RING_IN_VRAM` queue in the file's
    /// context `c`, one page each with a CPU mapping, pinned, placed in VRAM now (in system
    /// memory if VRAM is full), pushed to `ring` (whose contents the caller drops on error).
    fn make_vram_ring(&self, st: &mut FileState, c: usize, ring: &mut KVec<(u64, Arc<VidAlloc>)>) -> Result {
        ring.reserve(2, GFP_KERNEL_ACCOUNT)?;
        for _ in 0..2 {
            let pgoff = self.gpu.core.objects().new_pgoff(1);
            ring.push(self.new_valloc(st, c, mmu::PAGE_SIZE, true, true, Some(pgoff))?, GFP_KERNEL_ACCOUNT)?;
        }
        for (id, _) in ring.iter() {
            self.gpu.mm.place(&self.gpu.queue_env(), *id)?;
        }
        Ok(())
    }

    /// Drops a queue's ring in VRAM ([`Self::make_vram_ring`]): the CPU mappings are revoked
    /// (`SIGBUS` from now on); the memory is freed only if `free` (the device confirmed the
    /// queue's destruction, or never had it), else it stays with the memory manager until the
    /// device goes, like the quarantined queue that may still reach it.
    pub(super) fn drop_vram_ring(
        &self,
        st: &mut FileState,
        context: u32,
        ring: &mut KVec<(u64, Arc<VidAlloc>)>,
        free: bool,
    ) {
        while let Some((id, alloc)) = ring.pop() {
            if free {
                drop_valloc(&self.gpu, st, context, id, &alloc);
            } else {
                alloc.revoke_cpu_view();
            }
        }
    }

    /// `SUBMIT`: the command buffer and a FENCE_SIGNAL of the progress value on the queue's
    /// kernel ring, then `KICK_QUEUE`; held by the module behind a monitored-fence GPU wait
    /// (`kring`).
    pub(super) fn submit(&self, s: &uapi::Submit) -> Result {
        let mut st = self.state.lock();
        let st = &mut *st;
        let qi = st.queue(s.queue)?;
        let ai = st.alloc(s.cmdbuf)?;
        let alloc = &st.allocs[ai];
        let q = &mut st.queues[qi];
        let Some(kring) = q.hwq.kring.as_ref() else {
            return Err(EPERM);
        };
        let end = u64::from(s.offset) + u64::from(s.size);
        if alloc.context != q.context
            || s.offset % 4 != 0
            || s.size % 4 != 0
            || s.size == 0
            || s.size > ring::CMDBUF_MAX_BYTES
            || end > page_bytes(alloc.buf.pages())
        {
            return Err(EINVAL);
        }
        let id = q.hwq.id.ok_or(EINVAL)?;
        let logs = &self.gpu.logs;
        // Its logged fence packets are queued now (timeline); the progress signal the ring adds
        // is logged at the index this returns.
        let log_entry = logs.note_submit(
            id,
            &alloc.buf,
            s.offset,
            s.size,
            q.hwq.fence.as_ref().map_or(FenceHandle::new(0), |f| f.handle),
            s.progress_value,
        );
        kring
            .submit(
                &self.gpu.held,
                alloc.gpu_va + u64::from(s.offset),
                s.size,
                s.progress_value,
                log_entry,
            )
            .inspect_err(|_| logs.unnote_submit(id, log_entry))?;
        let progress = q.hwq.fence.as_ref().map_or(0, |f| f.handle.raw());
        logs.note_thread(uapi_debug::TIMELINE_SUBMIT, id.raw(), progress, s.progress_value, 0);
        // Held work counts as queued: `release` waits for it too.
        q.last_submitted = q.last_submitted.max(s.progress_value);
        Ok(())
    }

    /// `QUEUE_WAIT_FENCE` (`signal` false): a GPU wait of a kernel-mode queue, recorded
    /// without blocking (FEN-13): a FENCE_WAIT packet for a native fence, work held by the
    /// module for a monitored one (FEN-14, FEN-15). `QUEUE_SIGNAL_FENCE` (`signal`): the
    /// software signal packet of a monitored fence (FEN-10). `EPERM` on a user-mode queue
    /// (NF-21).
    pub(super) fn queue_fence_op(&self, w: &uapi::QueueFenceOp, signal: bool) -> Result {
        let st = self.state.lock();
        let q = &st.queues[st.queue(w.queue)?];
        let f = &st.fences[st.fence(w.fence)?];
        let Some(kring) = q.hwq.kring.as_ref() else {
            return Err(EPERM);
        };
        if f.context != q.context {
            return Err(EINVAL);
        }
        let pages = &st.contexts[st.context(f.context)?].fence_pages;
        let held = &self.gpu.held;
        match f.fence.queue_target(pages, signal)? {
            QueueTarget::Monitored(page, offset) => {
                let wrap32 = self.gpu.core.wrap32();
                if !window::in_window(wrap32, page.read64(offset), w.value, signal) {
                    return Err(ERANGE);
                }
                let op = HeldWait {
                    page,
                    offset,
                    value: w.value,
                    wrap32,
                };
                if signal {
                    kring.soft_signal(held, op)
                } else {
                    kring.hold(held, op)
                }
            }
            QueueTarget::Native(va) => kring.gpu_wait(held, va, w.value, f.fence.global),
        }
    }

    /// `WAIT_PROGRESS`: `ECANCELED` once the queue's context is lost to a GPU fault.
    pub(super) fn wait_progress(&self, w: &uapi::WaitProgress) -> Result {
        if w.pad != 0 {
            return Err(EINVAL);
        }
        let (place, context) = self.progress_place(&self.state.lock(), w.queue)?;
        // The work of a context lost to a fault never completes: ECANCELED at once.
        self.gpu.wait(&place, w.value, timeout_ms(w.timeout_ns), Some(context))
    }

    /// Where queue `queue`'s progress fence is, and its context's device id (whose loss ends a
    /// wait on it).
    pub(super) fn progress_place(&self, st: &FileState, queue: u32) -> Result<(CpuPlace, ContextId)> {
        let q = &st.queues[st.queue(queue)?];
        let f = q.hwq.fence.as_ref().ok_or(EINVAL)?;
        let context = st.contexts[st.context(q.context)?].ctx.id();
        // Monitored on a device without 64-bit atomics or without native fences (XAD-10).
        let monitored = self.gpu.core.monitored_progress();
        Ok(((f.handle, monitored, f.current.clone(), 0), context))
    }
}
