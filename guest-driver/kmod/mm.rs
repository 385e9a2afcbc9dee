// SPDX-License-Identifier: GPL-2.0

//! Domain layer: the video memory manager ([`Mm`], VidMM's role). It places allocations that
//! prefer VRAM in the device memory past the fence pages, makes them resident when a
//! `SUBMIT_SPLIT` references them, evicts the least recently used ones to their system backing
//! through paging buffers on its paging queue (`pager`), and retargets their page-table entries
//! on every move so their GPU VAs stay stable. A `SUBMIT_SPLIT` that needs more VRAM than is
//! free at once is split at its split points (SPLIT-11, SPLIT-12, SPLIT-16).
//!
//! Fallback: an allocation VRAM cannot hold when work needs it — larger than VRAM, or not
//! fitting beside the other allocations that work needs at once even after every other one was
//! evicted — is used by that work where it is when it has a fallback segment (system memory,
//! its page-table entries on its backing), as WDDM's video memory manager falls back to the
//! next segment of an allocation's preference list; `MM_STATS.fallback_placements` counts
//! those placements. A `SUBMIT_SPLIT` that needs one without a fallback there fails with
//! `E2BIG` before anything runs when VRAM could never hold them, else at the split point.
//!
//! Moves and running work: an allocation moves (and its VRAM range is freed) only while the
//! device context that maps it is idle — suspended on the device for the move and resumed
//! after ([`idle::Idle`]), as a driver's eviction fence preempts user-mode queues — so no store
//! of any queue of that context, user-mode ones included, lands between the paging buffer's
//! read and the retarget. One exception: between the parts of a `SUBMIT_SPLIT`, the submitting
//! context is not suspended (its part has run; a suspension would end the engine hold of a
//! device without context save, SPLIT-03), so that process's other queues may race the moves
//! of its own allocations there. A `SUBMIT_SPLIT` returns only when its last part has run;
//! between the parts of one submission, only allocations outside the resource table of the
//! current split point and outside the part just prepared are evicted, after that part has run.
//!
//! Waits on the GPU: neither the memory manager's lock nor the submitting file's is held while
//! a split part runs, for a part may wait on a fence nobody signals (up to 10 s, then
//! `ETIMEDOUT`) and every process's allocations and exit need the one, every ioctl of the file
//! (a `SIGNAL_FENCE` that would end the wait among them) the other. Meanwhile the submitting context's allocations are not
//! moved by anyone else, and the wait ends when the caller is killed (`EINTR`) or its context is
//! lost (`EIO`). Paging buffers are waited for with the lock held and are not ended by a kill
//! (a queued `COPY` would still land in a range given away meanwhile): they run on the module's
//! own paging queue, which waits on no fence.
//!
//! Lock order: a file's state, then [`Mm`]'s state, then a kernel ring's state, then the
//! hardware mutex. The memory manager never takes a file's lock: it reaches the page tables of
//! the allocations it moves through their leaf tables (`AddressSpace::leaf_entry`).

pub(crate) mod alloc;
pub(crate) mod idle;
pub(crate) mod pager;
pub(crate) mod place;

use kernel::{
    new_mutex,
    prelude::*,
    sync::{
        lock::{mutex::MutexBackend, Guard},
        Arc, Mutex,
    },
};

use self::{
    alloc::{retarget, VidAlloc},
    idle::Idle,
    pager::{PagingMap, Pager},
};
use crate::{
    abi::{ids::ContextId, mmu, ring, uapi},
    hw::{core::Core, dmamem::DmaBuf},
    queue::{build::QueueEnv, kring::KernelRing},
};

/// VRAM below this offset holds fence pages (`Objects::take_vram_fence_page`, 256 pages).
const FENCE_VRAM: u64 = 256 * mmu::PAGE_SIZE;

/// One allocation the memory manager knows.
struct Entry {
    /// Its id (unique for the device's life).
    id: u64,
    /// The allocation.
    alloc: Arc<VidAlloc>,
    /// The device context whose address space maps it (kept idle while it moves).
    owner: ContextId,
    /// Its mappings in the paging context (allocations that prefer VRAM).
    paging: Option<PagingMap>,
    /// Its VRAM offset while resident.
    vram: Option<u64>,
    /// LRU clock of its last reference.
    last_use: u64,
    /// Never chosen for eviction (a ring in VRAM, which the device may read at any time): only
    /// D3 entry moves it, with its context suspended.
    pinned: bool,
    /// Used from system memory when VRAM cannot hold it (see the module doc); without, work
    /// that needs it then fails.
    fallback: bool,
    /// Its owner's `SUBMIT_SPLIT` waits for a part without the lock: not chosen for eviction
    /// meanwhile ([`Mm::wait_part`]).
    part_waits: bool,
}

/// An allocation [`Mm::evict_all`] moved: its id, VRAM offset, and whether it is pinned.
pub(crate) type Moved = (u64, u64, bool);

/// The memory manager's state.
struct MmState {
    /// The paging context and queue, made with the first allocation that prefers VRAM and
    /// destroyed with the last ([`drop_unused_pager`]).
    pager: Option<Pager>,
    /// Every allocation.
    entries: KVec<Entry>,
    /// Next allocation id.
    next_id: u64,
    /// LRU clock.
    clock: u64,
    /// Counters (`MM_STATS`; the residency fields are computed when read).
    stats: uapi::MmStats,
}

/// The part of a `SUBMIT_SPLIT` the file layer prepared: the kernel copy of the command buffer
/// (mapped in the submitting context), the allocation list resolved to memory-manager ids, the
/// patch locations (checked against the buffer's packets), and how to submit the last part.
pub(crate) struct SplitJob<'a> {
    /// The copy.
    pub(crate) buf: &'a DmaBuf,
    /// Its GPU VA in the queue's context.
    pub(crate) va: u64,
    /// Its bytes.
    pub(crate) size: u32,
    /// The allocation list (`None`: an unbind).
    pub(crate) list: &'a [Option<u64>],
    /// The patch locations, split offsets non-decreasing.
    pub(crate) patches: &'a [uapi::PatchLocation],
    /// The queue's ring.
    pub(crate) ring: &'a KernelRing,
    /// The queue's device context.
    pub(crate) context: ContextId,
    /// Submits the last part (`va`, `size`) with the progress signal; the ring index past it.
    pub(crate) last: &'a dyn Fn(u64, u32) -> Result<u32>,
    /// Whether the queue's context was lost (its work will not run).
    pub(crate) lost: &'a dyn Fn() -> bool,
}

/// The video memory manager of one device.
#[pin_data]
pub(crate) struct Mm {
    /// VRAM range `[base, end)` it places allocations in.
    base: u64,
    end: u64,
    /// Slots of the resource table.
    slots: u32,
    #[pin]
    state: Mutex<MmState>,
}

impl Mm {
    /// The memory manager of the device of `core`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(core: &Core) -> Result<Arc<Self>> {
        let info = core.info();
        let end = info.vram_size;
        Arc::pin_init(
            try_pin_init!(Self {
                base: FENCE_VRAM.min(end),
                end,
                slots: info.split_slots,
                state <- new_mutex!(MmState {
                    pager: None,
                    entries: KVec::new(),
                    next_id: 1,
                    clock: 0,
                    stats: uapi::MmStats::default(),
                }),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// Slots of the device's resource table.
    pub(crate) fn slots(&self) -> u32 {
        self.slots
    }

    /// Starts managing `alloc`, mapped in device context `owner` (`pinned`: never evicted but
    /// by [`Self::evict_all`]; `fallback`: used from system memory when VRAM cannot hold it);
    /// its id.
    ///
    /// # Errors
    ///
    /// Those of creating the pager and mapping it there.
    pub(crate) fn register(
        &self,
        env: &QueueEnv<'_>,
        alloc: Arc<VidAlloc>,
        owner: ContextId,
        pinned: bool,
        fallback: bool,
    ) -> Result<u64> {
        let core = env.fences.core();
        let mut st = self.state.lock();
        st.entries.reserve(1, GFP_KERNEL_ACCOUNT)?;
        let paging = if alloc.vram_preferred {
            if st.pager.is_none() {
                st.pager = Some(Pager::new(env)?);
            }
            let pager = st.pager.as_mut().ok_or(EINVAL)?;
            match pager.map(core, &alloc) {
                Ok(m) => Some(m),
                Err(e) => {
                    drop_unused_pager(&mut st, env);
                    return Err(e);
                }
            }
        } else {
            None
        };
        let id = st.next_id;
        st.next_id += 1;
        st.clock += 1;
        let last_use = st.clock;
        st.entries.push(
            Entry {
                id,
                alloc,
                owner,
                paging,
                vram: None,
                last_use,
                pinned,
                fallback,
                part_waits: false,
            },
            GFP_KERNEL_ACCOUNT,
        )?;
        Ok(id)
    }

    /// Makes allocation `id` resident in VRAM now if it prefers VRAM (evicting unpinned ones
    /// if needed; left in system memory, a fallback placement, when VRAM cannot hold it);
    /// whether it is in VRAM.
    ///
    /// # Errors
    ///
    /// `EINVAL` for an unknown id, and the paging errors.
    pub(crate) fn place(&self, env: &QueueEnv<'_>, id: u64) -> Result<bool> {
        let mut st = self.state.lock();
        let i = st.entries.iter().position(|e| e.id == id).ok_or(EINVAL)?;
        if !st.entries[i].alloc.vram_preferred {
            return Ok(false);
        }
        self.make_resident(&mut st, env, &[i], &[i], None, true)?;
        Ok(st.entries[i].vram.is_some())
    }

    /// Stops managing allocation `id`; its VRAM range is free again only once nothing can reach
    /// it: the owner's entries are pointed at the allocation's own system backing (which its
    /// caller still holds; the contents are not copied: the allocation is going) and the owning
    /// context is made idle once, so work that translated the old entries has finished. The
    /// caller then unmaps it from its context.
    pub(crate) fn unregister(&self, env: &QueueEnv<'_>, id: u64) {
        let mut st = self.state.lock();
        let Some(i) = st.entries.iter().position(|e| e.id == id) else {
            return;
        };
        if st.entries[i].vram.is_some() {
            let e = &st.entries[i];
            e.alloc.retarget(None);
            if let Some(m) = &e.paging {
                retarget(&m.window, &e.alloc, None);
            }
            if let Err(err) = Idle::owner(env, e.owner, None) {
                // The context cannot be suspended: the device no longer answers, or the
                // context is gone; either way no more of its work runs.
                dev_dbg!(env.fences.core().device(), "freeing allocation {id}: {:?}\n", err);
            }
            st.entries[i].vram = None;
        }
        let Ok(e) = st.entries.remove(i) else {
            return;
        };
        if let (Some(m), Some(pager)) = (&e.paging, st.pager.as_mut()) {
            pager.unmap(m, e.alloc.pages());
        }
        drop_unused_pager(&mut st, env);
    }

    /// Unbind (device loss included): the CPU mappings of every allocation (rings in VRAM)
    /// show nothing from now on (`SIGBUS`), before the VRAM BAR goes; a later binding may
    /// place another process's ring at the same offset.
    pub(crate) fn revoke_cpu_views(&self) {
        let st = self.state.lock();
        for e in st.entries.iter() {
            e.alloc.revoke_cpu_view();
        }
    }

    /// `ALLOCATION_RW`: moves allocation `id` to system memory if it is in VRAM, then copies
    /// `buf` into it (`write`) or out of it at `offset`.
    ///
    /// # Errors
    ///
    /// `EINVAL` for an unknown id, `EBUSY` while it is in VRAM and its owner's `SUBMIT_SPLIT`
    /// waits for a part, and the paging errors.
    pub(crate) fn access(&self, env: &QueueEnv<'_>, id: u64, offset: u64, buf: &mut [u8], write: bool) -> Result {
        let mut st = self.state.lock();
        let i = st.entries.iter().position(|e| e.id == id).ok_or(EINVAL)?;
        // Its owner's split part runs with it where it is (and a move would suspend the owner).
        if st.entries[i].part_waits && st.entries[i].vram.is_some() {
            return Err(EBUSY);
        }
        page_out(&mut st, env, i, None)?;
        st.entries[i].alloc.copy_bytes(offset, buf, write);
        Ok(())
    }

    /// The device context of the paging queue, once made (D3 entry leaves it running: its
    /// paging buffers are the eviction, PWR-02 step 3).
    pub(crate) fn paging_context(&self) -> Option<ContextId> {
        self.state.lock().pager.as_ref().map(Pager::context_id)
    }

    /// D3 entry on a device that loses VRAM (PWR-02 step 3): every allocation resident in VRAM
    /// is evicted to its backing (paging buffers on the paging queue, page tables retargeted);
    /// pinned ones (rings) included, whose contexts D3 entry suspended: the allocations moved,
    /// for [`Self::restore`].
    ///
    /// # Errors
    ///
    /// `ENOMEM` and the paging errors (what was evicted stays evicted).
    pub(crate) fn evict_all(&self, env: &QueueEnv<'_>) -> Result<KVec<Moved>> {
        let mut st = self.state.lock();
        let mut moved = KVec::new();
        for i in 0..st.entries.len() {
            if let Some(off) = st.entries[i].vram {
                moved.push((st.entries[i].id, off, st.entries[i].pinned), GFP_KERNEL)?;
                page_out(&mut st, env, i, None)?;
            }
        }
        Ok(moved)
    }

    /// D3 exit (PWR-04 step 3): the allocations [`Self::evict_all`] moved are made resident
    /// again at their offsets (still free: nothing is placed while the device is in D3), pinned
    /// ones (rings) first; how many, and how many of them pinned.
    ///
    /// # Errors
    ///
    /// The paging errors (the rest stay in system memory, paged in on their next use; a pinned
    /// one stays there for good, which is correct, only slower for nobody).
    pub(crate) fn restore(&self, env: &QueueEnv<'_>, moved: &[Moved]) -> Result<(u32, u32)> {
        let mut st = self.state.lock();
        let (mut n, mut rings) = (0, 0);
        for pinned_first in [true, false] {
            for &(id, off, pinned) in moved.iter().filter(|m| m.2 == pinned_first) {
                let Some(i) = st.entries.iter().position(|e| e.id == id) else {
                    continue;
                };
                if st.entries[i].vram.is_none() {
                    page_in(&mut st, env, i, off, None)?;
                    n += 1;
                    rings += u32::from(pinned);
                }
            }
        }
        Ok((n, rings))
    }

    /// The counters.
    pub(crate) fn stats(&self) -> uapi::MmStats {
        let st = self.state.lock();
        let mut s = st.stats;
        s.vram_managed = self.end - self.base;
        s.slots = self.slots;
        for e in st.entries.iter() {
            if e.vram.is_some() {
                s.resident_vram += e.alloc.size;
            } else {
                s.resident_system += e.alloc.size;
            }
        }
        s
    }

    /// Runs a `SUBMIT_SPLIT` (see the module doc); the number of parts.
    ///
    /// # Errors
    ///
    /// `E2BIG` before anything runs when the allocations without a fallback one split point
    /// needs cannot fit in VRAM together, and later when they cannot fit beside the pinned ones
    /// and those of other submissions waiting for their parts; `EINVAL` for an id it does not
    /// know; `EIO` when the context is lost, `EINTR` when the caller is killed, `ETIMEDOUT`, and
    /// the ring's errors.
    pub(crate) fn submit_split(&self, env: &QueueEnv<'_>, job: &SplitJob<'_>) -> Result<u32> {
        let slots = usize::try_from(self.slots)?;
        // Split points: runs of patches sharing a split offset.
        let groups = groups(job.patches)?;
        let mut st = self.state.lock();
        // The entry of every list element (None: an unbind); found again after every wait,
        // as other processes' allocations come and go meanwhile.
        let mut index = resolve(&st, job.list)?;
        // Nothing runs if one split point alone needs more VRAM than there is for allocations
        // without a fallback. The resource table holds list positions.
        let mut table: KVec<Option<usize>> = KVec::from_elem(None, slots, GFP_KERNEL)?;
        for &(from, to) in groups.iter() {
            apply(&mut table, &job.patches[from..to], job.list.len())?;
            let need: u64 = vram_needed(&st, &table, &index)?
                .iter()
                .filter(|&&i| !st.entries[i].fallback)
                .map(|&i| st.entries[i].alloc.size)
                .sum();
            if need > self.end - self.base {
                return Err(E2BIG);
            }
        }
        for t in table.iter_mut() {
            *t = None;
        }
        let mut part_start = 0u32;
        let mut parts = 0u32;
        // Ids of the allocations the part being prepared references (kept where they are,
        // SPLIT-12).
        let mut in_part: KVec<u64> = KVec::new();
        for &(from, to) in groups.iter() {
            let at = job.patches[from].split_offset;
            apply(&mut table, &job.patches[from..to], job.list.len())?;
            let mut need = vram_needed(&st, &table, &index)?;
            let mut keep = KVec::with_capacity(in_part.len() + need.len(), GFP_KERNEL)?;
            for id in in_part.iter() {
                keep.push(position(&st, *id)?, GFP_KERNEL)?;
            }
            keep.extend_from_slice(&need, GFP_KERNEL)?;
            // Once a part that continues was submitted, the queue's context is idle (the part
            // has run) and keeps the engine's hold on a device without context save: it is
            // not suspended for the moves between the parts.
            let spare = (parts > 0).then_some(job.context);
            if !self.make_resident(&mut st, env, &need, &keep, spare, false)? {
                // SPLIT-11: run what is prepared, up to this split offset.
                if at > part_start {
                    let va = job.va + u64::from(part_start);
                    let end = job.ring.submit_raw(env.held, va, at - part_start, ring::RING_FLAG_SPLIT_CONTINUES)?;
                    st = self.wait_part(st, env, job, end)?;
                    index = resolve(&st, job.list)?;
                    need = vram_needed(&st, &table, &index)?;
                    parts += 1;
                    part_start = at;
                }
                // SPLIT-12, SPLIT-16: only this split point's table is kept now; what VRAM
                // still cannot hold is used from its fallback.
                in_part.clear();
                let spare = (parts > 0).then_some(job.context);
                if !self.make_resident(&mut st, env, &need, &need, spare, true)? {
                    return Err(E2BIG);
                }
            }
            st.clock += 1;
            let now = st.clock;
            for &i in need.iter() {
                st.entries[i].last_use = now;
                let id = st.entries[i].id;
                if !in_part.contains(&id) {
                    in_part.push(id, GFP_KERNEL)?;
                }
            }
            // The patch locations of this split point get the allocations' addresses.
            for p in &job.patches[from..to] {
                let (va, size) = match index.get(usize::try_from(p.allocation_index)?).copied().flatten() {
                    Some(i) => (st.entries[i].alloc.gpu_va, st.entries[i].alloc.size),
                    None => (0, 0),
                };
                let at = usize::try_from(p.patch_offset)?;
                job.buf.write_bytes(at, &va.to_le_bytes());
                job.buf.write_bytes(at + 8, &size.to_le_bytes());
            }
        }
        // The last part (the whole buffer when nothing split), with the progress signal.
        let end = (job.last)(job.va + u64::from(part_start), job.size - part_start)?;
        let mut st = self.wait_part(st, env, job, end)?;
        parts += 1;
        st.stats.submissions += 1;
        st.stats.parts += u64::from(parts);
        st.stats.last_parts = parts;
        Ok(parts)
    }

    /// Waits for the part of `job` submitted up to ring index `end` without the lock (`st`),
    /// which it takes again: meanwhile the allocations of the job's context are marked
    /// ([`Entry::part_waits`]), so no other caller moves them (suspending the context would end
    /// its engine hold on a device without context save) and its part runs with what it was
    /// prepared with. None of them goes or moves meanwhile: only the context's file frees,
    /// moves (`ALLOCATION_RW`) and places (a ring in VRAM) them, and it refuses to while the
    /// context's submission runs (its `split_busy` mark; [`Self::access`] checks the mark
    /// too). One made meanwhile is not resident, so no eviction picks it.
    ///
    /// # Errors
    ///
    /// Those of [`pager::wait_part`] (the lock is let go).
    fn wait_part<'a>(
        &'a self,
        mut st: Guard<'a, MmState, MutexBackend>,
        env: &QueueEnv<'_>,
        job: &SplitJob<'_>,
        end: u32,
    ) -> Result<Guard<'a, MmState, MutexBackend>> {
        mark_part_waits(&mut st, job.context, true);
        drop(st);
        let waited = pager::wait_part(env.fences.core(), job.ring, end, job.lost);
        let mut st = self.state.lock();
        mark_part_waits(&mut st, job.context, false);
        waited.map(|()| st)
    }

    /// Makes the entries `need` resident, evicting the least recently used resident entries
    /// not in `keep`; false when they do not fit. An entry with a fallback that does not fit
    /// is left in system memory (a fallback placement, counted) with `fall_back`, or when it
    /// is larger than VRAM; then only the others count. Each move keeps its owner idle ([`Idle`]) but `spare`.
    fn make_resident(
        &self,
        st: &mut MmState,
        env: &QueueEnv<'_>,
        need: &[usize],
        keep: &[usize],
        spare: Option<ContextId>,
        fall_back: bool,
    ) -> Result<bool> {
        for &i in need {
            if st.entries[i].vram.is_some() {
                continue;
            }
            let size = st.entries[i].alloc.size;
            // Larger than VRAM: nothing is evicted for it, and with a fallback it is used from
            // there at once (no split would make room).
            let larger = size > self.end - self.base;
            let mut fits = !larger;
            while fits {
                let mut used: KVec<place::Range> = KVec::new();
                for e in st.entries.iter() {
                    if let Some(off) = e.vram {
                        used.push((off, e.alloc.size), GFP_KERNEL)?;
                    }
                }
                if let Some(off) = place::first_fit(&used, self.base, self.end, size) {
                    page_in(st, env, i, off, spare)?;
                    break;
                }
                let victim = place::lru_victim(st.entries.iter().enumerate().map(|(j, e)| {
                    let movable = !e.pinned && !e.part_waits && !keep.contains(&j);
                    (e.last_use, e.vram.is_some() && movable)
                }));
                match victim {
                    Some(v) => page_out(st, env, v, spare)?,
                    None => fits = false,
                }
            }
            if !fits {
                if !(st.entries[i].fallback && (fall_back || larger)) {
                    return Ok(false);
                }
                st.stats.fallback_placements += 1;
            }
        }
        Ok(true)
    }
}

/// Destroys the paging context and queue once no allocation is mapped there (the last one
/// that prefers VRAM went, or the first one could not be mapped): they were made for the
/// processes' allocations, so none outlives them; the next allocation that prefers VRAM makes
/// them again.
fn drop_unused_pager(st: &mut MmState, env: &QueueEnv<'_>) {
    if st.entries.iter().any(|e| e.paging.is_some()) {
        return;
    }
    if let Some(pager) = st.pager.take() {
        pager.destroy(env);
    }
}

/// Marks the allocations of `context` as waiting for its split part, or no longer.
fn mark_part_waits(st: &mut MmState, context: ContextId, waits: bool) {
    for e in st.entries.iter_mut().filter(|e| e.owner == context) {
        e.part_waits = waits;
    }
}

/// The split points of `patches`: `[from, to)` runs sharing a split offset; `EINVAL` when the
/// offsets decrease (N1: non-decreasing, several entries may share one).
fn groups(patches: &[uapi::PatchLocation]) -> Result<KVec<(usize, usize)>> {
    let mut out = KVec::new();
    let mut from = 0;
    for i in 1..=patches.len() {
        if i == patches.len() || patches[i].split_offset != patches[from].split_offset {
            if i < patches.len() && patches[i].split_offset < patches[from].split_offset {
                return Err(EINVAL);
            }
            out.push((from, i), GFP_KERNEL)?;
            from = i;
        }
    }
    Ok(out)
}

/// Applies one split point's patches to the resource table of list positions (SPLIT-07,
/// SPLIT-09, SPLIT-13); `list` elements.
fn apply(table: &mut [Option<usize>], patches: &[uapi::PatchLocation], list: usize) -> Result {
    for p in patches {
        let at = usize::try_from(p.allocation_index)?;
        if at >= list {
            return Err(EINVAL);
        }
        *table.get_mut(usize::try_from(p.slot_id)?).ok_or(EINVAL)? = Some(at);
    }
    Ok(())
}

/// The entry of every element of `list` (None: an unbind).
///
/// # Errors
///
/// `EINVAL` for an id it does not know, `ENOMEM`.
fn resolve(st: &MmState, list: &[Option<u64>]) -> Result<KVec<Option<usize>>> {
    let mut index = KVec::with_capacity(list.len(), GFP_KERNEL)?;
    for id in list {
        index.push(
            match id {
                Some(id) => Some(position(st, *id)?),
                None => None,
            },
            GFP_KERNEL,
        )?;
    }
    Ok(index)
}

/// The entry of allocation `id`; `EINVAL` if it does not know it.
fn position(st: &MmState, id: u64) -> Result<usize> {
    st.entries.iter().position(|e| e.id == id).ok_or(EINVAL)
}

/// The distinct entries that prefer VRAM of the list positions in `table` (`index`: their
/// entries).
fn vram_needed(st: &MmState, table: &[Option<usize>], index: &[Option<usize>]) -> Result<KVec<usize>> {
    let mut need = KVec::new();
    for &at in table.iter().flatten() {
        let Some(i) = index.get(at).copied().flatten() else {
            continue;
        };
        if st.entries[i].alloc.vram_preferred && !need.contains(&i) {
            need.push(i, GFP_KERNEL)?;
        }
    }
    Ok(need)
}

/// Pages entry `i` into VRAM at `off`: its owner made idle (unless it is `spare`), the paging
/// window onto `off`, a `COPY` from the backing, then the context's entries onto VRAM, then the
/// owner resumed.
fn page_in(st: &mut MmState, env: &QueueEnv<'_>, i: usize, off: u64, spare: Option<ContextId>) -> Result {
    let pager = st.pager.as_ref().ok_or(EINVAL)?;
    let e = &st.entries[i];
    let m = e.paging.as_ref().ok_or(EINVAL)?;
    let idle = Idle::owner(env, e.owner, spare)?;
    retarget(&m.window, &e.alloc, Some(off));
    let moved = e.alloc.moving(Some(off), || {
        pager.copy(env.held, m.sys_va, m.vram_va, e.alloc.size)?;
        e.alloc.retarget(Some(off));
        Ok(())
    });
    if let Err(err) = moved {
        retarget(&m.window, &e.alloc, None);
        return Err(err);
    }
    drop(idle);
    let size = e.alloc.size;
    st.entries[i].vram = Some(off);
    st.stats.paged_in += size;
    st.stats.paging_buffers += 1;
    Ok(())
}

/// Evicts entry `i` to its system backing if it is in VRAM: its owner made idle (unless it is
/// `spare`), a `COPY` to the backing, then every entry onto the backing, then the owner resumed.
fn page_out(st: &mut MmState, env: &QueueEnv<'_>, i: usize, spare: Option<ContextId>) -> Result {
    if st.entries[i].vram.is_none() {
        return Ok(());
    }
    let pager = st.pager.as_ref().ok_or(EINVAL)?;
    let e = &st.entries[i];
    let m = e.paging.as_ref().ok_or(EINVAL)?;
    let idle = Idle::owner(env, e.owner, spare)?;
    e.alloc.moving(None, || {
        pager.copy(env.held, m.vram_va, m.sys_va, e.alloc.size)?;
        e.alloc.retarget(None);
        Ok(())
    })?;
    drop(idle);
    retarget(&m.window, &e.alloc, None);
    let size = e.alloc.size;
    st.entries[i].vram = None;
    st.stats.evictions += 1;
    st.stats.paged_out += size;
    st.stats.paging_buffers += 1;
    Ok(())
}
