// SPDX-License-Identifier: GPL-2.0

//! `release` of an open file: process termination ([`drain_or_suspend`]: disconnect and
//! drain, or mark in error and suspend), then the file's objects destroyed in a safe order:
//! doorbells, queues (device first, then their memory), allocations, the pending `sync_file`
//! exports (failed unless reached), fences, contexts; its verbose-logging watch goes first.

use kernel::prelude::*;

use super::{
    mm::drop_valloc,
    state::{BelfryFile, FileQueue, FileState, Released},
};
use crate::{
    abi::{
        ids::ContextId,
        uapi::DoorbellStatus,
        uapi_debug,
    },
    bindings::param::killed_by_signal,
    fence::{eventfd, syncfile, window},
    gpu::Gpu,
    hw::shares::Share,
    queue::doorbell::mark_error,
    term::{Record, TermStats},
};

impl BelfryFile {
    /// Process termination and the destruction of everything the file owns.
    pub(super) fn terminate(&self) {
        let gpu = &self.gpu;
        let core = &*gpu.core;
        let env = gpu.queue_env();
        eventfd::drop_waits(&gpu.fences, self.owner(), None, eventfd::Ending::Silently);
        gpu.verbose.unwatch(self.owner());
        let mut released = Released::new();
        let mut st = self.state.lock();
        let st = &mut *st;
        let with_queues = !st.queues.is_empty();
        let mut rec = Record::default();
        let killed = killed_by_signal(&self.opener);
        let normal = drain_or_suspend(gpu, st, &self.term, &mut rec, killed);
        // Held work is dropped (its context is suspended if it never ran) before the hardware
        // mutex is taken (lock order, see `kring`).
        for kring in st.queues.iter().filter_map(|q| q.hwq.kring.as_ref()) {
            kring.close(&gpu.held);
        }
        if with_queues {
            rec.step(core, uapi_debug::TERM_STEP_DESTROY);
        }
        // Rings in VRAM, freed after the hardware mutex is let go (lock order: the memory
        // manager before the hardware).
        let mut rings = KVec::new();
        {
            let mut hw = core.hw().ok();
            while let Some(d) = st.doorbells.pop() {
                gpu.watch.remove(d.db.queue_id);
                gpu.doorbells.destroy(hw.as_mut(), &d.db);
            }
            while let Some(q) = st.queues.pop() {
                core.objects().uncharge(self.share_owner(), Share::Queue);
                let Ok(c) = st.context(q.context) else {
                    continue;
                };
                let destroyed = q
                    .hwq
                    .destroy(&env, hw.as_mut(), &mut st.contexts[c].ctx, &mut released);
                if !q.vram_ring.is_empty() {
                    if rings.reserve(1, GFP_KERNEL).is_ok() {
                        // Cannot fail: room reserved.
                        let _ = rings.push((q.context, q.vram_ring, destroyed), GFP_KERNEL);
                    } else {
                        // Out of memory: the ring stays with the memory manager until the
                        // device goes (as for a queue the device did not destroy).
                        for (_, a) in q.vram_ring.iter() {
                            a.revoke_cpu_view();
                        }
                    }
                }
            }
        }
        for (context, mut ring, destroyed) in rings {
            self.drop_vram_ring(st, context, &mut ring, destroyed);
        }
        while let Some(v) = st.vallocs.pop() {
            drop_valloc(gpu, st, v.context, v.id, &v.alloc);
        }
        while let Some(a) = st.allocs.pop() {
            if let Ok(c) = st.context(a.context) {
                st.contexts[c]
                    .ctx
                    .unmap_allocation(core, a.gpu_va, a.buf.pages());
            }
        }
        // The drain let queued work signal what it could; the rest never will (ECANCELED).
        syncfile::abandon(&gpu.fences, self.owner(), None, ECANCELED);
        while let Some(f) = st.fences.pop() {
            if f.fence.kind == crate::abi::fence::FenceKind::IntraGpu {
                core.objects().uncharge(self.share_owner(), Share::VramFence);
            }
            if let Ok(c) = st.context(f.context) {
                let fc = &mut st.contexts[c];
                f.fence.destroy(&gpu.fences, &mut fc.ctx, &mut fc.fence_pages);
            }
        }
        while let Some(mut fc) = st.contexts.pop() {
            fc.fence_pages.release(core, &mut fc.ctx, &mut released);
            fc.ctx.destroy(core);
            core.objects().uncharge(self.share_owner(), Share::Context);
        }
        drop(released);
        if with_queues {
            self.term.publish(rec, normal);
        }
    }
}

/// Process termination, before `release` destroys the file's objects; whether it took the
/// normal path. Every step goes to `rec` (`DEBUG_STATS`).
///
/// Normal (TERM-01..03): every doorbell is disconnected first (DISCONNECTED_ABORT), then the
/// release waits (at most the `close_drain_timeout_ms` module parameter, 2 s by default, in
/// all, interruptibly) until every queue
/// reached its last queued progress value (kernel-mode: the highest submitted; user-mode: the
/// doorbell's LastQueuedValue), so the work queued before the exit finishes; the ring
/// allocations stay mapped meanwhile. Abnormal, `killed`: the process that opened the file was
/// killed by a signal, whichever process closed it last (TERM-04, TERM-05):
/// its doorbells are marked in error (DISCONNECTED_ABORT for good), the contexts of its queues
/// are suspended, and only then are the doorbells disconnected. A drain that does not finish
/// (timeout, a signal, a faulted context) ends the same way: mark, then suspend the contexts of
/// the queues that did not get there.
fn drain_or_suspend(
    gpu: &Gpu,
    st: &mut FileState,
    stats: &TermStats,
    rec: &mut Record,
    killed: bool,
) -> bool {
    let core = &*gpu.core;
    if st.queues.is_empty() {
        return true;
    }
    if killed {
        let mut all = KVec::<ContextId>::new();
        for q in st.queues.iter() {
            add_context(st, q, &mut all);
        }
        mark_and_suspend(gpu, st, rec, all);
        rec.step(core, uapi_debug::TERM_STEP_DISCONNECT);
        disconnect_all(gpu, st);
        return false;
    }
    rec.step(core, uapi_debug::TERM_STEP_DISCONNECT);
    disconnect_all(gpu, st);
    stats.draining(true);
    let stuck = drain(gpu, st, rec);
    stats.draining(false);
    if stuck.is_empty() {
        rec.step(core, uapi_debug::TERM_STEP_WAIT_SATISFIED);
        return true;
    }
    rec.step(core, uapi_debug::TERM_STEP_WAIT_TIMED_OUT);
    mark_and_suspend(gpu, st, rec, stuck);
    false
}

/// Waits for every queue's last queued progress value; the device ids of the contexts of the
/// queues that did not get there.
fn drain(gpu: &Gpu, st: &FileState, rec: &mut Record) -> KVec<ContextId> {
    let core = &*gpu.core;
    let mut budget = crate::bindings::param::close_drain_timeout_ms_param();
    let mut stuck = KVec::<ContextId>::new();
    for q in st.queues.iter() {
        let Some(f) = q.hwq.fence.as_ref() else {
            continue;
        };
        let target = match st.doorbells.iter().find(|d| d.queue == q.handle) {
            Some(d) => d.db.last_queued.read64(0),
            None => q.last_submitted,
        };
        if window::reached(core.wrap32(), f.current.read64(0), target) {
            continue;
        }
        rec.waited += 1;
        let start = kernel::time::Instant::<kernel::time::Monotonic>::now();
        let drained = budget > 0
            && gpu
                .fences
                .wait_fence(
                    f.handle,
                    core.monitored_progress(),
                    &f.current,
                    0,
                    target,
                    budget,
                    None,
                )
                .is_ok();
        let spent = u32::try_from(start.elapsed().as_millis()).unwrap_or(u32::MAX);
        budget = budget.saturating_sub(spent);
        if !drained {
            rec.timed_out += 1;
            add_context(st, q, &mut stuck);
        }
    }
    stuck
}

/// Adds the device id of `q`'s context to `ids` (once).
fn add_context(st: &FileState, q: &FileQueue, ids: &mut KVec<ContextId>) {
    if let Ok(c) = st.context(q.context) {
        let id = st.contexts[c].ctx.id();
        if !ids.contains(&id) {
            // Out of memory: that context is not suspended; its queues are destroyed anyway.
            let _ = ids.push(id, GFP_KERNEL);
        }
    }
}

/// The abnormal steps: the process's doorbells are marked in error, then `contexts` suspended.
fn mark_and_suspend(gpu: &Gpu, st: &FileState, rec: &mut Record, contexts: KVec<ContextId>) {
    let core = &*gpu.core;
    rec.step(core, uapi_debug::TERM_STEP_MARK_ERROR);
    for d in st.doorbells.iter() {
        mark_error(&d.db);
    }
    rec.step(core, uapi_debug::TERM_STEP_SUSPEND);
    if let Ok(mut hw) = core.hw() {
        for id in contexts {
            dev_dbg!(
                core.device(),
                "close with unfinished work: suspending context {}\n",
                id.raw()
            );
            let _ = gpu.doorbells.suspend_context(&mut hw, id, true);
        }
    }
}

/// Disconnects every doorbell of the file (DISCONNECTED_ABORT).
fn disconnect_all(gpu: &Gpu, st: &FileState) {
    if let Ok(mut hw) = gpu.core.hw() {
        for d in st.doorbells.iter() {
            gpu.doorbells
                .disconnect(&mut hw, &d.db, DoorbellStatus::DisconnectedAbort);
            let (queue, abort) = (d.db.queue_id.raw(), uapi_debug::TIMELINE_DOORBELL_ABORT);
            let status = DoorbellStatus::DisconnectedAbort as u64;
            gpu.logs.note_thread(uapi_debug::TIMELINE_DOORBELL, queue, 0, status, abort);
        }
    }
}
