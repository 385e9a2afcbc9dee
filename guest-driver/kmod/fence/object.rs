// SPDX-License-Identifier: GPL-2.0

//! The fences `CREATE_FENCE` and `IMPORT_FENCE` make ([`Fence`]), with every mailbox sequence
//! they need:
//! - DEFAULT (`CAPS.native_fence`): CurrentValues of non-shareable fences packed per context at
//!   a [`FENCE_STRIDE`] stride in [`FencePage`]s mapped in the system address space, read/write
//!   in the context's address space and read-only at an mmap offset; MonitoredValues at the
//!   same offsets in a page mapped only in the system address space, or in VRAM (the optimized
//!   form, NF-13, [`super::opt`]);
//! - MONITORED (`CAPS.monitored_fence`): one value in a fence page of its own, registered as
//!   `FenceKind::Monitored`;
//! - INTRA_GPU (`CAPS.intra_gpu_fence`): a VRAM page with CurrentValue at 0 and MonitoredValue
//!   at 2048, mapped at a GPU VA only, both values set through the device; or, once demoted
//!   under local-memory pressure (NF-18, [`super::demote`]), a system page of the same layout
//!   mapped at the same GPU VA and in the system address space, still without a CPU mapping;
//! - a local handle on a shared DEFAULT fence ([`super::share`]).

use kernel::{prelude::*, sync::Arc};

use super::{
    cross::{Adapter, XFence},
    opt::{self, MonitoredPage},
    share::GlobalFence,
    waits::Fences,
};
use crate::{
    abi::{
        fence,
        ids::FenceHandle,
        mailbox::{self, Opcode},
        mmu, uapi, uapi_debug,
    },
    context::Context,
    hw::{
        command::HwGuard,
        core::Core,
        dmamem::{DmaBuf, PAGE},
        quarantine::Kept,
    },
};

/// Packing stride of non-shared fence values (`QUERY_CAPS.fence_stride`, NF-07).
pub(crate) const FENCE_STRIDE: usize = 64;
/// Fence slots in one page.
const FENCE_SLOTS: usize = PAGE / FENCE_STRIDE;
/// Byte offset of an INTRA_GPU fence's MonitoredValue in its VRAM page, or in the system page
/// it was demoted to (CurrentValue at 0).
pub(super) const VRAM_MONITORED_OFFSET: u64 = 2048;

/// A page of DEFAULT-fence CurrentValues (slots of [`FENCE_STRIDE`] bytes) and the matching
/// page of MonitoredValues. CurrentValue: system address space, the context's address space
/// (read/write) and the process (read-only); MonitoredValue: system address space only, or
/// VRAM (the optimized form, NF-13, `opt`).
pub(crate) struct FencePage {
    /// CurrentValues.
    pub(crate) current: Arc<DmaBuf>,
    /// MonitoredValues, same slot offsets.
    pub(super) monitored: MonitoredPage,
    /// VA of `current` in the system address space (`monitored` one page after it).
    pub(super) sys_va: u64,
    /// VA of `current` in the context's address space.
    proc_va: u64,
    /// mmap offset of `current`, in pages.
    pub(crate) pgoff: u64,
    /// Slots in use (bit n: byte offset n × stride).
    used: u64,
    /// Holds one shareable fence and nothing else (NF-08).
    pub(super) shared: bool,
    /// A fence of this page was destroyed without the device confirming its unregistration
    /// (or a demotion failed half-way): the device may still write the page, so it is kept
    /// until the device is reset.
    pub(super) kept: bool,
}

/// Where a fence's values live.
pub(crate) enum FenceStorage {
    /// DEFAULT: slot `slot` of page `page` of its context.
    System {
        /// Index in the context's [`FencePages`].
        page: usize,
        /// Slot in the page.
        slot: usize,
        /// The CurrentValue page (for waits after the file lock is dropped).
        current: Arc<DmaBuf>,
    },
    /// INTRA_GPU: a VRAM page (CurrentValue at 0), mapped at `gpu_va` only.
    Vram {
        /// VRAM byte offset of the page.
        offset: u64,
        /// Its GPU VA in the context's address space.
        gpu_va: u64,
    },
    /// INTRA_GPU demoted to system memory (NF-18, `super::demote`): a system page of the VRAM
    /// page's layout, mapped at `gpu_va` of the context and at `sys_va` of the system address
    /// space (where the device's registration points), never mapped for the CPU.
    Demoted {
        /// The page.
        page: DmaBuf,
        /// Its VA in the system address space (two pages reserved, one mapped).
        sys_va: u64,
        /// Its GPU VA in the context's address space.
        gpu_va: u64,
    },
    /// A local handle on a shared DEFAULT fence (`share`): CurrentValue at 0 of the
    /// global object's page, mapped at `proc_va` of the context and read-only at `pgoff`.
    Shared {
        /// The global object (one reference).
        obj: Arc<GlobalFence>,
        /// GPU VA of CurrentValue in the context's address space.
        proc_va: u64,
        /// mmap offset of the CurrentValue page, in pages.
        pgoff: u64,
    },
    /// A local handle on a cross-adapter fence (`cross`): its one CurrentValue page, mapped at
    /// `proc_va` of the context and read-only at `pgoff`.
    Cross {
        /// The fence (one reference; one user of this device's side).
        obj: Arc<XFence>,
        /// A native fence on this device, else a monitored one.
        native: bool,
        /// GPU VA of CurrentValue in the context's address space.
        proc_va: u64,
        /// mmap offset of the CurrentValue page, in pages.
        pgoff: u64,
    },
}

/// The fence pages of one context; kept (possibly empty) until the context is destroyed, so
/// indices into it stay valid.
pub(crate) struct FencePages(KVec<FencePage>);

impl FencePages {
    /// None yet.
    pub(crate) const fn new() -> Self {
        Self(KVec::new())
    }

    /// How many.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The pages, to change one in place (`super::demote`).
    pub(super) fn pages_mut(&mut self) -> &mut [FencePage] {
        &mut self.0
    }

    /// The CurrentValue page mmapped at `pgoff`, if one of these.
    pub(crate) fn find(&self, pgoff: u64) -> Option<&Arc<DmaBuf>> {
        self.0.iter().find(|p| p.pgoff == pgoff).map(|p| &p.current)
    }

    /// Unmaps every page from `ctx` and the system address space and frees its VRAM page; the
    /// CurrentValue pages go to `retired` (the process may have them mapped; the caller
    /// reserved room).
    pub(crate) fn release(
        &mut self,
        core: &Core,
        ctx: &mut Context,
        retired: &mut KVec<Arc<DmaBuf>>,
    ) {
        while let Some(p) = self.0.pop() {
            core.unmap_pages(&mut ctx.space, p.proc_va, 1);
            if p.kept {
                // Still mapped in the system address space, where the device's registration
                // points: kept whole (both pages) until the device is reset.
                let mut objects = core.objects();
                if !objects.device_forgot() {
                    pr_warn!(
                        "a fence page whose unregistration the device did not confirm is kept until the device is reset\n"
                    );
                }
                objects.quarantine(Kept::FencePage, p);
                continue;
            }
            core.release_system(p.sys_va, true);
            p.monitored.release(core);
            // As in `destroy_queue`: callers reserved room.
            let _ = retired.push(p.current, GFP_KERNEL);
        }
    }
}

/// Where a new fence is for the process: its GPU VA, the mmap offset of its CurrentValue page
/// (0: none) and its offset in that page.
pub(crate) struct UserView {
    /// GPU VA of CurrentValue in the context's address space.
    pub(crate) gpu_va: u64,
    /// mmap offset (bytes) of the CurrentValue page, 0 for none.
    pub(crate) mmap_offset: u64,
    /// CurrentValue's byte offset in that page.
    pub(crate) page_offset: u32,
}

/// What a kernel-mode queue's GPU wait or software signal on a fence uses.
pub(crate) enum QueueTarget {
    /// A monitored fence: its value page and the value's byte offset (held on the CPU).
    Monitored(Arc<DmaBuf>, usize),
    /// A native fence: the GPU VA of its CurrentValue in the queue's context.
    Native(u64),
}

/// Where a CPU operation finds a fence: global handle, whether it is a monitored fence, its
/// CurrentValue page and the value's byte offset.
pub(crate) type CpuPlace = (FenceHandle, bool, Arc<DmaBuf>, usize);

/// A fence of one context.
pub(crate) struct Fence {
    /// Global handle (device and interrupt records).
    pub(crate) global: FenceHandle,
    /// Registered with the device (a local handle on a shared fence is not itself).
    registered: bool,
    /// Its kind.
    pub(crate) kind: fence::FenceKind,
    /// Its values.
    storage: FenceStorage,
}

/// One more local handle on a shared page mapped at `proc_va`: counted in the book, given a new
/// mmap offset; returns that page offset and where the user finds CurrentValue.
fn local_view(fences: &Fences, proc_va: u64) -> (u64, UserView) {
    fences.book().local_handles += 1;
    let pgoff = fences.core().objects().new_pgoff(1);
    let view = UserView {
        gpu_va: proc_va,
        mmap_offset: pgoff << mmu::PAGE_SHIFT,
        page_offset: 0,
    };
    (pgoff, view)
}

impl Fence {
    /// `CREATE_FENCE` of a non-shareable DEFAULT, a MONITORED or an INTRA_GPU fence (`kind`) in
    /// `ctx`, with CurrentValue `initial`; a MONITORED fence always gets a page of its own
    /// (`shareable` only matters there). Registered with the device, an optimized DEFAULT
    /// fence's VRAM MonitoredValue and an INTRA_GPU fence's values set through it.
    ///
    /// An INTRA_GPU fence takes `vram_page` (a VRAM fence page already the caller's, given to
    /// the fence or back to the bitmap), or a free one.
    ///
    /// # Errors
    ///
    /// `EIO` if the device refuses the registration, `ENOSPC` (slots, VRAM pages, VA),
    /// `ENOMEM`, `ENODEV`, `ETIMEDOUT`. Nothing is left behind on failure (fence pages stay).
    pub(crate) fn create(
        fences: &Fences,
        ctx: &mut Context,
        pages: &mut FencePages,
        kind: fence::FenceKind,
        shareable: bool,
        initial: u64,
        vram_page: Option<u64>,
    ) -> Result<(Self, UserView)> {
        let core = fences.core();
        let global = core.objects().take_fence_handle();
        let mut hw = match core.hw() {
            Ok(hw) => hw,
            Err(e) => {
                if let Some(offset) = vram_page {
                    core.objects().put_vram_fence_page(offset);
                }
                return Err(e);
            }
        };
        let before = ctx.space.mapped_pages();
        let made = if kind == fence::FenceKind::IntraGpu {
            intra_gpu_fence(fences, &mut hw, ctx, global, vram_page)
        } else {
            default_fence(fences, &mut hw, ctx, pages, kind, shareable, global, initial)
        };
        core.add_gpu_pages(before, ctx.space.mapped_pages());
        let (storage, registered) = made?;
        let f = Fence {
            global,
            registered,
            kind,
            storage,
        };
        drop(hw);
        if !f.registered {
            f.destroy(fences, ctx, pages);
            return Err(EIO);
        }
        if let FenceStorage::System { page, .. } = &f.storage {
            // An optimized DEFAULT fence: its MonitoredValue in VRAM is set through the device.
            let init = match pages.0.get(*page) {
                Some(p) => p.monitored.init(fences, global),
                None => Err(EINVAL),
            };
            if let Err(e) = init {
                f.destroy(fences, ctx, pages);
                return Err(e);
            }
        }
        if kind == fence::FenceKind::IntraGpu {
            // VRAM keeps what an earlier fence left: set both values through the device.
            let set = fences
                .set_fence_values(
                    Opcode::UpdateMonitoredValues,
                    global,
                    fence::MONITORED_VALUE_NONE,
                )
                .and_then(|()| {
                    fences.set_fence_values(Opcode::UpdateCurrentValues, global, initial)
                });
            if let Err(e) = set {
                f.destroy(fences, ctx, pages);
                return Err(e);
            }
        }
        // The objects lock is let go before the roll-back, which takes the hardware lock first
        // (an `if let` on the call itself would hold the guard through its body).
        let named = core.objects().name_fence(ctx.id(), global);
        if let Err(e) = named {
            f.destroy_unnamed(fences, ctx, pages);
            return Err(e);
        }
        let view = match &f.storage {
            FenceStorage::System { page, slot, .. } => {
                let p = &pages.0[*page];
                let off = *slot * FENCE_STRIDE;
                UserView {
                    // CAST: below a page.
                    gpu_va: p.proc_va + off as u64,
                    mmap_offset: p.pgoff << mmu::PAGE_SHIFT,
                    // CAST: as above.
                    page_offset: off as u32,
                }
            }
            FenceStorage::Vram { gpu_va, .. } => UserView {
                gpu_va: *gpu_va,
                mmap_offset: 0,
                page_offset: 0,
            },
            FenceStorage::Shared { .. }
            | FenceStorage::Cross { .. }
            | FenceStorage::Demoted { .. } => return Err(EINVAL),
        };
        Ok((f, view))
    }

    /// A local handle on the shared fence `obj` in `ctx` (SHR-01, SHR-02): CurrentValue mapped
    /// at a new GPU VA of the context and at a new mmap offset.
    ///
    /// # Errors
    ///
    /// `ENOSPC` (VA), `ENOMEM`, `ENODEV`, `EINVAL`.
    pub(crate) fn local(
        fences: &Fences,
        ctx: &mut Context,
        obj: Arc<GlobalFence>,
    ) -> Result<(Self, UserView)> {
        let proc_va = ctx.reserve_va(1)?;
        fences.core().objects().name_fence(ctx.id(), obj.global())?;
        if let Err(e) = obj.map_local(&mut ctx.space, proc_va) {
            fences.core().objects().unname_fence(ctx.id(), obj.global());
            return Err(e);
        }
        let (pgoff, view) = local_view(fences, proc_va);
        let f = Fence {
            global: obj.global(),
            registered: false,
            kind: fence::FenceKind::Default,
            storage: FenceStorage::Shared {
                obj,
                proc_va,
                pgoff,
            },
        };
        Ok((f, view))
    }

    /// A local handle on the cross-adapter fence `obj` in `ctx` on the device of `adapter`
    /// (XAD-03): one more user of the device's side (registered now if it is the first,
    /// `native` or monitored), CurrentValue mapped at a new GPU VA and mmap offset.
    ///
    /// # Errors
    ///
    /// `ENOSPC` (VA), `ENOMEM`, `ENODEV`, `EIO`, `ETIMEDOUT`.
    pub(crate) fn cross(
        adapter: &Arc<dyn Adapter>,
        ctx: &mut Context,
        obj: Arc<XFence>,
        native: bool,
    ) -> Result<(Self, UserView)> {
        let fences = adapter.fences();
        let proc_va = ctx.reserve_va(1)?;
        let (global, native) = obj.attach(adapter, native)?;
        // As in `create`: the objects lock is let go before the roll-back.
        let named = fences.core().objects().name_fence(ctx.id(), global);
        if let Err(e) = named {
            obj.detach(fences);
            return Err(e);
        }
        if let Err(e) = obj.map_local(fences, &mut ctx.space, proc_va) {
            fences.core().objects().unname_fence(ctx.id(), global);
            obj.detach(fences);
            return Err(e);
        }
        let (pgoff, view) = local_view(fences, proc_va);
        let kind = if native {
            fence::FenceKind::Default
        } else {
            fence::FenceKind::Monitored
        };
        let f = Fence {
            global,
            registered: false,
            kind,
            storage: FenceStorage::Cross {
                obj,
                native,
                proc_va,
                pgoff,
            },
        };
        Ok((f, view))
    }

    /// Unregisters the fence and gives back its slot (DEFAULT) or its VRAM page and GPU VA
    /// (INTRA_GPU); a local handle on a shared fence is unmapped from its context and drops its
    /// reference, the last one destroying the global object (SHR-03, SHR-04). The hardware
    /// must not be locked.
    pub(crate) fn destroy(self, fences: &Fences, ctx: &mut Context, pages: &mut FencePages) {
        fences.core().objects().unname_fence(ctx.id(), self.global);
        self.destroy_unnamed(fences, ctx, pages);
    }

    /// [`Self::destroy`] of a fence its context does not name (yet).
    fn destroy_unnamed(self, fences: &Fences, ctx: &mut Context, pages: &mut FencePages) {
        let core = fences.core();
        let confirmed = !self.registered || fences.unregister_confirmed(self.global);
        match self.storage {
            FenceStorage::Shared { obj, proc_va, .. } => {
                obj.unmap_local(&mut ctx.space, proc_va);
                {
                    let mut book = fences.book();
                    book.local_handles = book.local_handles.saturating_sub(1);
                }
                drop(obj);
            }
            FenceStorage::Cross { obj, proc_va, .. } => {
                obj.unmap_local(fences, &mut ctx.space, proc_va);
                {
                    let mut book = fences.book();
                    book.local_handles = book.local_handles.saturating_sub(1);
                }
                obj.detach(fences);
            }
            FenceStorage::System { page, slot, .. } => {
                if let Some(p) = pages.0.get_mut(page) {
                    // An unconfirmed slot stays taken, so no new fence shares it.
                    if confirmed {
                        p.used &= !(1 << slot);
                    }
                    p.kept |= !confirmed;
                }
            }
            FenceStorage::Vram { offset, gpu_va } => {
                core.unmap_pages(&mut ctx.space, gpu_va, 1);
                // Device memory: an unconfirmed page is not handed out again (the device may
                // still write it); the bitmap goes with the device's objects at its reset.
                if confirmed {
                    core.objects().put_vram_fence_page(offset);
                }
            }
            FenceStorage::Demoted {
                page,
                sys_va,
                gpu_va,
            } => {
                core.unmap_pages(&mut ctx.space, gpu_va, 1);
                if confirmed {
                    core.unmap_system(sys_va, 2);
                    drop(page);
                } else {
                    // Still mapped in the system address space, where the registration points.
                    let mut objects = core.objects();
                    if !objects.device_forgot() {
                        pr_warn!(
                            "a demoted INTRA_GPU fence page whose unregistration the device did not confirm is kept until the device is reset\n"
                        );
                    }
                    objects.quarantine(Kept::FencePage, page);
                }
            }
        }
    }

    /// An INTRA_GPU fence whose values are still in VRAM: its page's VRAM offset and GPU VA.
    pub(crate) fn intra_gpu_vram(&self) -> Option<(u64, u64)> {
        match self.storage {
            FenceStorage::Vram { offset, gpu_va } => Some((offset, gpu_va)),
            _ => None,
        }
    }

    /// The INTRA_GPU fence's values now live in `page`, mapped at `sys_va` of the system address
    /// space and at the fence's GPU VA (`super::demote`); its VRAM page is the caller's.
    pub(super) fn set_demoted(&mut self, page: DmaBuf, sys_va: u64) -> Result {
        let FenceStorage::Vram { gpu_va, .. } = self.storage else {
            return Err(EINVAL);
        };
        self.storage = FenceStorage::Demoted {
            page,
            sys_va,
            gpu_va,
        };
        Ok(())
    }

    /// The fence page index and the byte offset in it of a packed DEFAULT fence's values.
    pub(crate) fn page_offset(&self) -> Option<(usize, usize)> {
        match (&self.storage, self.kind) {
            (FenceStorage::System { page, slot, .. }, fence::FenceKind::Default) => {
                Some((*page, *slot * FENCE_STRIDE))
            }
            _ => None,
        }
    }

    /// The shared fence a local handle is on.
    pub(crate) fn shared(&self) -> Option<&Arc<GlobalFence>> {
        match &self.storage {
            FenceStorage::Shared { obj, .. } => Some(obj),
            _ => None,
        }
    }

    /// The cross-adapter fence a local handle is on.
    pub(crate) fn cross_fence(&self) -> Option<&Arc<XFence>> {
        match &self.storage {
            FenceStorage::Cross { obj, .. } => Some(obj),
            _ => None,
        }
    }

    /// The CurrentValue page a local handle on a shared or cross-adapter fence has mmapped at
    /// `pgoff`.
    pub(crate) fn shared_page(&self, pgoff: u64) -> Option<&Arc<DmaBuf>> {
        match &self.storage {
            FenceStorage::Shared { obj, pgoff: p, .. } if *p == pgoff => Some(obj.current()),
            FenceStorage::Cross { obj, pgoff: p, .. } if *p == pgoff => Some(obj.current()),
            _ => None,
        }
    }

    /// Where a CPU operation finds the fence; `EPERM` for an INTRA_GPU fence (NF-16).
    pub(crate) fn cpu_place(&self) -> Result<CpuPlace> {
        let monitored = self.kind == fence::FenceKind::Monitored;
        match &self.storage {
            FenceStorage::System { slot, current, .. } => {
                Ok((self.global, monitored, current.clone(), *slot * FENCE_STRIDE))
            }
            FenceStorage::Shared { obj, .. } => Ok((self.global, false, obj.current().clone(), 0)),
            FenceStorage::Cross { obj, native, .. } => {
                Ok((self.global, !native, obj.current().clone(), 0))
            }
            FenceStorage::Vram { .. } | FenceStorage::Demoted { .. } => Err(EPERM),
        }
    }

    /// What a kernel-mode queue's GPU wait (`signal` false) or software signal uses; `EINVAL`
    /// for a software signal of a native fence. A cross-adapter fence is always handled as a
    /// monitored one there, native device or not (XAD-12..14): the wait is held by the module,
    /// the signal is a software signal written from the CPU and then propagated.
    pub(crate) fn queue_target(&self, pages: &FencePages, signal: bool) -> Result<QueueTarget> {
        match (&self.storage, self.kind) {
            (FenceStorage::Cross { obj, .. }, _) => Ok(QueueTarget::Monitored(obj.current().clone(), 0)),
            (FenceStorage::System { slot, current, .. }, fence::FenceKind::Monitored) => {
                Ok(QueueTarget::Monitored(current.clone(), *slot * FENCE_STRIDE))
            }
            _ if signal => Err(EINVAL),
            (FenceStorage::System { page, slot, .. }, _) => {
                let p = pages.0.get(*page).ok_or(EINVAL)?;
                // CAST: below a page.
                Ok(QueueTarget::Native(p.proc_va + (*slot * FENCE_STRIDE) as u64))
            }
            (FenceStorage::Vram { gpu_va, .. }, _) | (FenceStorage::Demoted { gpu_va, .. }, _) => {
                Ok(QueueTarget::Native(*gpu_va))
            }
            (FenceStorage::Shared { proc_va, .. }, _) => Ok(QueueTarget::Native(*proc_va)),
        }
    }

    /// `FENCE_INFO`: values as the module sees them (INTRA_GPU in VRAM: CurrentValue 0,
    /// unreadable by the CPU; MonitoredValue UINT64_MAX, since no CPU wait is possible; demoted
    /// INTRA_GPU: both values read from its system page, by the module only; MONITORED:
    /// MonitoredValue UINT64_MAX, since it has none), where they live, the pending waits.
    ///
    /// # Errors
    ///
    /// `EINVAL` for a fence page that is gone (cannot happen).
    pub(crate) fn info(
        &self,
        fences: &Fences,
        pages: &FencePages,
        a: &mut uapi_debug::FenceInfo,
    ) -> Result {
        match &self.storage {
            FenceStorage::System { page, slot, .. } => {
                let p = pages.0.get(*page).ok_or(EINVAL)?;
                a.current_value = p.current.read64(*slot * FENCE_STRIDE);
                a.current_segment = uapi::FENCE_SEGMENT_SYSTEM;
                let off = *slot * FENCE_STRIDE;
                (a.monitored_value, a.monitored_segment) = match self.kind {
                    fence::FenceKind::Monitored => (fence::MONITORED_VALUE_NONE, 0),
                    _ => (
                        p.monitored.value(fences, self.global, off),
                        p.monitored.segment(),
                    ),
                };
            }
            FenceStorage::Vram { .. } => {
                a.current_value = 0;
                a.monitored_value = fence::MONITORED_VALUE_NONE;
                a.current_segment = uapi::FENCE_SEGMENT_VRAM;
                a.monitored_segment = uapi::FENCE_SEGMENT_VRAM;
            }
            FenceStorage::Demoted { page, .. } => {
                // CAST: below a page.
                let monitored = VRAM_MONITORED_OFFSET as usize;
                a.current_value = page.read64(0);
                a.monitored_value = page.read64(monitored);
                a.current_segment = uapi::FENCE_SEGMENT_SYSTEM;
                a.monitored_segment = uapi::FENCE_SEGMENT_SYSTEM;
            }
            FenceStorage::Shared { obj, .. } => {
                a.current_value = obj.current().read64(0);
                a.monitored_value = obj.monitored_value();
                a.current_segment = uapi::FENCE_SEGMENT_SYSTEM;
                a.monitored_segment = uapi::FENCE_SEGMENT_SYSTEM;
            }
            FenceStorage::Cross { obj, native, .. } => {
                a.current_value = obj.current().read64(0);
                a.monitored_value = obj.monitored_value(fences);
                a.current_segment = uapi::FENCE_SEGMENT_SYSTEM;
                a.monitored_segment = if *native { uapi::FENCE_SEGMENT_SYSTEM } else { 0 };
            }
        }
        a.global_handle = self.global.raw();
        a.pending_waits = fences.book().pending_waits(self.global);
        Ok(())
    }
}

/// A DEFAULT fence in a slot of one of `ctx`'s fence pages (a new page when none has room, or
/// a page of its own when `shareable`), registered as `global`; whether it got registered.
/// A MONITORED fence (`kind`) always gets a page of its own (its one value page) and is
/// registered with that value only (the device ignores its MonitoredValue place).
#[allow(clippy::too_many_arguments)]
fn default_fence(
    fences: &Fences,
    hw: &mut HwGuard<'_>,
    ctx: &mut Context,
    pages: &mut FencePages,
    kind: fence::FenceKind,
    shareable: bool,
    global: FenceHandle,
    initial: u64,
) -> Result<(FenceStorage, bool)> {
    let shareable = shareable || kind == fence::FenceKind::Monitored;
    let found = pages.0.iter().position(|p| {
        if shareable {
            p.shared && p.used == 0
        } else {
            !p.shared && p.used != u64::MAX
        }
    });
    let page = match found {
        Some(i) => i,
        None => {
            new_fence_page(fences.core(), hw, ctx, pages, shareable)?;
            pages.0.len() - 1
        }
    };
    let p = pages.0.get_mut(page).ok_or(EINVAL)?;
    // CAST: `trailing_ones` of a `u64` is at most 64.
    let slot = p.used.trailing_ones() as usize;
    if slot >= FENCE_SLOTS {
        return Err(ENOSPC);
    }
    p.used |= 1 << slot;
    let off = slot * FENCE_STRIDE;
    p.current.write64(off, initial);
    // Nobody waits yet: no signal may interrupt (MV-02, MV-06).
    p.monitored.clear(off);
    // CAST: below a page.
    let sys = p.sys_va + off as u64;
    let monitored = p.monitored.location(p.sys_va + mmu::PAGE_SIZE, off);
    let storage = FenceStorage::System {
        page,
        slot,
        current: p.current.clone(),
    };
    let registered = fences
        .register(
            hw,
            global,
            kind,
            mailbox::FenceLocation {
                space: mailbox::LOCATION_SYSTEM_VA,
                address: sys,
                ..Default::default()
            },
            monitored,
            true,
        )
        .is_ok();
    Ok((storage, registered))
}

/// Appends a fence page to `ctx`: mapped in the system address space (both pages; only
/// CurrentValue when the MonitoredValues are in VRAM, `opt`), in the context's address
/// space and at a new mmap offset (CurrentValue only). A page of non-shared fences is optimized
/// when the device offers it (NF-13).
fn new_fence_page(
    core: &Core,
    hw: &mut HwGuard<'_>,
    ctx: &mut Context,
    pages: &mut FencePages,
    shared: bool,
) -> Result {
    pages.0.reserve(1, GFP_KERNEL_ACCOUNT)?;
    let current = Arc::new(DmaBuf::new(hw.dev()?, 1)?, GFP_KERNEL_ACCOUNT)?;
    // Not on a device that loses VRAM in D3: the MonitoredValues would be lost with it.
    let caps = core.info().caps;
    let optimized = !shared && caps.optimized_default_fence() && !caps.vram_lost_in_d3();
    let monitored = MonitoredPage::new(core, hw, optimized)?;
    let mapped = ctx.reserve_va(1).and_then(|proc_va| {
        ctx.space.map_buf(hw.dev()?, proc_va, &current, true)?;
        core.map_system(hw, &current, monitored.system())
            .map(|sys_va| (proc_va, sys_va, core.objects().new_pgoff(1)))
            .inspect_err(|_| ctx.space.unmap_range(proc_va, 1))
    });
    let (proc_va, sys_va, pgoff) = match mapped {
        Ok(m) => m,
        Err(e) => {
            monitored.release(core);
            return Err(e);
        }
    };
    pages.0.push(
        FencePage {
            current,
            monitored,
            sys_va,
            proc_va,
            pgoff,
            used: 0,
            shared,
            kept: false,
        },
        GFP_KERNEL_ACCOUNT,
    )?;
    Ok(())
}

/// An INTRA_GPU fence: a VRAM page (`vram_page`, or a free one) mapped (PTE_VRAM) at a new GPU
/// VA of `ctx`, registered as `global` with both values in VRAM; whether it got registered.
fn intra_gpu_fence(
    fences: &Fences,
    hw: &mut HwGuard<'_>,
    ctx: &mut Context,
    global: FenceHandle,
    vram_page: Option<u64>,
) -> Result<(FenceStorage, bool)> {
    let core = fences.core();
    let offset = vram_page
        .or_else(|| opt::take_vram_page(core))
        .ok_or(ENOSPC)?;
    let mapped = ctx.reserve_va(1).and_then(|va| {
        ctx.space
            .map_vram_page(hw.dev()?, va, offset, true)
            .map(|()| va)
    });
    let gpu_va = match mapped {
        Ok(va) => va,
        Err(e) => {
            core.objects().put_vram_fence_page(offset);
            return Err(e);
        }
    };
    let registered = fences
        .register(
            hw,
            global,
            fence::FenceKind::IntraGpu,
            mailbox::FenceLocation {
                space: mailbox::LOCATION_VRAM,
                address: offset,
                ..Default::default()
            },
            mailbox::FenceLocation {
                space: mailbox::LOCATION_VRAM,
                address: offset + VRAM_MONITORED_OFFSET,
                ..Default::default()
            },
            true,
        )
        .is_ok();
    Ok((FenceStorage::Vram { offset, gpu_va }, registered))
}
