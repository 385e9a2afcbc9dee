// SPDX-License-Identifier: GPL-2.0

//! Device-wide ids and objects, under one mutex of the [`super::core::Core`]: the id
//! allocators (address spaces, contexts, queues, global fence handles, VRAM fence pages), mmap
//! offsets, the system address space (id 0) and its VA slots, the per-context flags (faulted,
//! suspended) and the live-object counts of `DEBUG_STATS`.

use kernel::prelude::*;

use super::{
    ids::{IdBitmap, RangeCursor},
    pagetable::AddressSpace,
    quarantine::{Kept, Quarantine},
    shares::{Share, ShareOwner, Shares},
    sysva::SystemVa,
};
use crate::abi::{
    ids::{AddressSpaceId, ContextId, FenceHandle, QueueId},
    mailbox, mmu,
};

/// First mmap offset (in pages) handed out.
const PGOFF_BASE: u64 = 0x100;
/// VRAM pages (from offset 0) set aside for fence values.
pub(crate) const VRAM_FENCE_PAGES: u32 = 256;

/// Index of a live-object count in [`Objects::counts`].
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// Contexts.
    Context = 0,
    /// Hardware queues.
    Queue = 1,
    /// Allocations.
    Allocation = 2,
    /// Doorbells.
    Doorbell = 3,
}

/// Device-wide ids and objects.
pub(crate) struct Objects {
    /// Address-space ids in use (bit 0, the system address space, always).
    spaces: IdBitmap<4>,
    /// Context ids in use.
    contexts: IdBitmap<4>,
    /// Queue ids in use.
    queues: IdBitmap<16>,
    /// Last global fence handle handed out.
    last_fence: u64,
    /// The system address space (id 0), once created.
    system: Option<AddressSpace>,
    /// The slots of the system address space in use.
    system_va: SystemVa,
    /// VRAM pages (from offset 0) holding fence values, in use.
    vram_fence_pages: IdBitmap<4>,
    /// Live objects on the device: contexts, queues, allocations, doorbells.
    pub(crate) counts: [u32; 4],
    /// Fence pages whose MonitoredValues were demoted to system memory (`MM_STATS`, NF-14).
    pub(crate) fence_demotions: u64,
    /// mmap offsets, in pages (a gap page after each range). Device-wide: every file of a
    /// device shares the inode's address space, so `unmap_mapping_range` over one object's
    /// offset must not hit another file's mapping.
    pgoffs: RangeCursor,
    /// Device context ids that faulted (until their context is destroyed): device loss.
    faulted: IdBitmap<4>,
    /// Fences the unexecuted work of a lost context was going to signal, each with the highest
    /// value that work named (`QUERY_LOST_SIGNALS`): a CPU wait on one for a value not above
    /// it ends with `ECANCELED`. Kept until the fence is unregistered.
    abandoned: KVec<(FenceHandle, u64)>,
    /// Device context ids suspended by `SUSPEND_CONTEXT` (until resumed or destroyed): their
    /// connected doorbells read CONNECTED_NOTIFY.
    suspended: IdBitmap<4>,
    /// What the device may still reach after it refused (or did not answer) its destroy: a
    /// queue's ring and progress pages, a context's page tables. Kept until the core goes,
    /// which is after the device was reset (unbind), so never freed under a live device.
    quarantine: Quarantine,
    /// Which device context may name which fence in its queues' fence logs: (context id,
    /// global handle) for every fence created, imported or opened in a context (a log entry carries the submitter's handle, which the timeline shows only if
    /// the queue's context may name it).
    names: KVec<(u32, u64)>,
    /// What each process and each user holds on the device ([`Share`]), against the
    /// per-process caps and the per-user ceiling (one process opening many files gets no more
    /// than one file's share, one user's processes no more than
    /// [`super::shares::USER_SHARES`] shares of device ids).
    shares: Shares,
}

impl Objects {
    /// Nothing but the system address space id.
    pub(crate) fn new() -> Self {
        Self {
            spaces: IdBitmap::with_zero(),
            contexts: IdBitmap::new(),
            queues: IdBitmap::new(),
            last_fence: 0,
            names: KVec::new(),
            shares: Shares::new(),
            system: None,
            system_va: SystemVa::new(),
            vram_fence_pages: IdBitmap::new(),
            counts: [0; 4],
            fence_demotions: 0,
            pgoffs: RangeCursor::new(PGOFF_BASE, 1),
            faulted: IdBitmap::new(),
            suspended: IdBitmap::new(),
            abandoned: KVec::new(),
            quarantine: Quarantine::new(),
        }
    }

    /// A new address-space id (never 0) and context id.
    pub(crate) fn take_context_ids(&mut self) -> Option<(AddressSpaceId, ContextId)> {
        let space = self.spaces.take(mailbox::MAX_ADDRESS_SPACES)?;
        let Some(context) = self.contexts.take(mailbox::MAX_CONTEXTS) else {
            self.spaces.remove(space);
            return None;
        };
        Some((AddressSpaceId::new(space), ContextId::new(context)))
    }

    /// Frees the ids of [`Self::take_context_ids`] (and forgets the context's flags).
    pub(crate) fn put_context_ids(&mut self, space: AddressSpaceId, context: ContextId) {
        if space.raw() != 0 {
            self.spaces.remove(space.raw());
        }
        self.contexts.remove(context.raw());
        self.faulted.remove(context.raw());
        self.suspended.remove(context.raw());
    }

    /// Whether device context `context` runs: created, neither suspended nor faulted.
    pub(crate) fn is_running(&self, context: ContextId) -> bool {
        let id = context.raw();
        self.contexts.contains(id) && !self.suspended.contains(id) && !self.faulted.contains(id)
    }

    /// The device contexts that run: created, neither suspended nor faulted.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn running_contexts(&self) -> Result<KVec<ContextId>> {
        let mut out = KVec::new();
        for id in 0..mailbox::MAX_CONTEXTS {
            if self.contexts.contains(id) && !self.suspended.contains(id) && !self.faulted.contains(id) {
                out.push(ContextId::new(id), GFP_KERNEL)?;
            }
        }
        Ok(out)
    }

    /// Whether device context `context` is suspended.
    pub(crate) fn is_suspended(&self, context: ContextId) -> bool {
        self.suspended.contains(context.raw())
    }

    /// Records device context `context` as suspended or not.
    pub(crate) fn set_suspended(&mut self, context: ContextId, suspended: bool) {
        if suspended {
            self.suspended.insert(context.raw());
        } else {
            self.suspended.remove(context.raw());
        }
    }

    /// Whether device context `context` faulted.
    pub(crate) fn is_faulted(&self, context: ContextId) -> bool {
        self.faulted.contains(context.raw())
    }

    /// Records the contexts of `faulted` as faulted, for good.
    pub(crate) fn add_faulted(&mut self, faulted: &IdBitmap<4>) {
        self.faulted.union(faulted);
    }

    /// Records that lost work was going to signal fence `handle` up to `value` (the higher
    /// value kept when it is already recorded).
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn add_abandoned(&mut self, handle: FenceHandle, value: u64) -> Result {
        if let Some(e) = self.abandoned.iter_mut().find(|e| e.0 == handle) {
            e.1 = e.1.max(value);
            return Ok(());
        }
        self.abandoned.push((handle, value), GFP_KERNEL)?;
        Ok(())
    }

    /// The highest value lost work was going to signal fence `handle` to, if any.
    pub(crate) fn abandoned(&self, handle: FenceHandle) -> Option<u64> {
        self.abandoned.iter().find(|e| e.0 == handle).map(|e| e.1)
    }

    /// Every [`Self::add_abandoned`] record: `(fence, highest value)`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn abandoned_all(&self) -> Result<KVec<(FenceHandle, u64)>> {
        let mut out = KVec::with_capacity(self.abandoned.len(), GFP_KERNEL)?;
        out.extend_from_slice(&self.abandoned, GFP_KERNEL)?;
        Ok(out)
    }

    /// Forgets fence `handle`'s [`Self::add_abandoned`] record (it is unregistered).
    pub(crate) fn forget_abandoned(&mut self, handle: FenceHandle) {
        self.abandoned.retain(|e| e.0 != handle);
    }

    /// Keeps `item` (a `what`) until the core goes (see `quarantine`); with no memory to
    /// record it, it is leaked, never freed. Once the device forgot every object of the
    /// binding ([`Self::device_forgot`]) it is freed at once instead.
    pub(crate) fn quarantine<T: Send + 'static>(&mut self, what: Kept, item: T) {
        self.quarantine.keep(what, item);
    }

    /// Whether a reset made the device forget every object of the binding
    /// ([`Self::forget_all`]): a destroy it did not confirm keeps nothing.
    pub(crate) fn device_forgot(&self) -> bool {
        self.quarantine.forgotten()
    }

    /// A reset with bus mastering off made the device forget every object of the binding: what the
    /// quarantine holds, for the caller to drop once the lock is let go; nothing is kept from
    /// now on.
    pub(crate) fn forget_all(&mut self) -> KVec<KBox<dyn Send>> {
        self.quarantine.forget()
    }

    /// A new queue id.
    pub(crate) fn take_queue_id(&mut self) -> Option<QueueId> {
        self.queues.take(mailbox::MAX_QUEUES).map(QueueId::new)
    }

    /// Frees a queue id.
    pub(crate) fn put_queue_id(&mut self, id: QueueId) {
        self.queues.remove(id.raw());
    }

    /// A new global fence handle (non-zero).
    pub(crate) fn take_fence_handle(&mut self) -> FenceHandle {
        self.last_fence += 1;
        FenceHandle::new(self.last_fence)
    }

    /// A free VRAM page for fence values (byte offset), among the first `limit` pages.
    pub(crate) fn take_vram_fence_page(&mut self, limit: u32) -> Option<u64> {
        let page = self.vram_fence_pages.take(limit.min(VRAM_FENCE_PAGES))?;
        Some(u64::from(page) * mmu::PAGE_SIZE)
    }

    /// Frees a page of [`Self::take_vram_fence_page`].
    pub(crate) fn put_vram_fence_page(&mut self, offset: u64) {
        if let Ok(page) = u32::try_from(offset / mmu::PAGE_SIZE) {
            self.vram_fence_pages.remove(page);
        }
    }

    /// Counts an object of `kind` created (`up`) or destroyed.
    pub(crate) fn count(&mut self, kind: Kind, up: bool) {
        let c = &mut self.counts[kind as usize];
        *c = if up {
            c.saturating_add(1)
        } else {
            c.saturating_sub(1)
        };
    }

    /// The system address space.
    ///
    /// # Errors
    ///
    /// `ENODEV` before it exists.
    pub(crate) fn system(&mut self) -> Result<&mut AddressSpace> {
        self.system.as_mut().ok_or(ENODEV)
    }

    /// Installs the system address space (bring-up).
    pub(crate) fn set_system(&mut self, space: AddressSpace) {
        self.system = Some(space);
    }

    /// Takes a slot of the system address space (two pages and their guard pages); its VA.
    ///
    /// # Errors
    ///
    /// As [`SystemVa::take`].
    pub(crate) fn take_system_va(&mut self) -> Result<u64> {
        self.system_va.take()
    }

    /// Gives back the system-VA slot at `va`: the device no longer names it.
    pub(crate) fn put_system_va(&mut self, va: u64) {
        self.system_va.put(va);
    }

    /// The extent of the system address space in slots ([`SystemVa::extent`]).
    pub(crate) fn system_va_extent(&self) -> usize {
        self.system_va.extent()
    }

    /// One more `what` for `owner` ([`Shares::charge`]).
    ///
    /// # Errors
    ///
    /// `ENOSPC` at the per-process cap or the per-user ceiling, `ENOMEM`.
    pub(crate) fn charge(&mut self, owner: &ShareOwner, what: Share, cap: u32) -> Result {
        self.shares.charge(owner, what, cap)
    }

    /// One `what` of `owner` is gone.
    pub(crate) fn uncharge(&mut self, owner: &ShareOwner, what: Share) {
        self.shares.uncharge(owner, what);
    }

    /// Context `ctx` may name fence `fence` from now on (a fence created, imported or opened in
    /// it).
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn name_fence(&mut self, ctx: ContextId, fence: FenceHandle) -> Result {
        self.names.push((ctx.raw(), fence.raw()), GFP_KERNEL)?;
        Ok(())
    }

    /// One naming of `fence` by `ctx` ends (its handle there destroyed).
    pub(crate) fn unname_fence(&mut self, ctx: ContextId, fence: FenceHandle) {
        if let Some(i) = self
            .names
            .iter()
            .position(|&n| n == (ctx.raw(), fence.raw()))
        {
            let _ = self.names.remove(i);
        }
    }

    /// Whether device context `ctx` may name fence handle `fence`.
    pub(crate) fn may_name(&self, ctx: u32, fence: u64) -> bool {
        self.names.contains(&(ctx, fence))
    }

    /// A new mmap offset range of `pages` pages (and a gap page), in pages.
    pub(crate) fn new_pgoff(&mut self, pages: usize) -> u64 {
        // CAST: page counts are small (bounded by the largest allocation).
        self.pgoffs.take(pages as u64)
    }
}
