// SPDX-License-Identifier: GPL-2.0

//! Fence ioctls: `CREATE_FENCE`, `DESTROY_FENCE`, `SIGNAL_FENCE`, `WAIT_FENCE`, `FENCE_INFO`,
//! `EXPORT_FENCE`, `IMPORT_FENCE`, `WAIT_FENCE_EVENTFD`, `CANCEL_FENCE_EVENTFD`, `WAIT_FENCES`,
//! `EXPORT_SYNC_FILE`.

use kernel::{
    prelude::*,
    sync::Arc,
    uaccess::{UserPtr, UserSlice},
};

use super::{
    args::{deadline_ms, read_arg, timeout_ms, write_arg},
    state::{released, BelfryFile, FileFence, FileState, MAX_VRAM_FENCES_PER_PROCESS},
};
use crate::{
    abi::{fence, uapi, uapi_debug, uapi_sync},
    bindings::anonfile,
    context::Context,
    bindings::param,
    fence::{
        cross::{Adapter, XFence},
        demote, eventfd,
        opt,
        object::{CpuPlace, Fence, UserView},
        share::GlobalFence,
        syncfile,
        waits::WaitTarget,
        window,
    },
    gpu,
    hw::shares::Share,
};

/// The name of exported fence files (`anon_inode:belfry-fence`).
const FENCE_FILE: &CStr = c"belfry-fence";

impl BelfryFile {
    /// `CREATE_FENCE`: DEFAULT (values in system memory, packed unless shareable), INTRA_GPU
    /// (values in VRAM, no CPU mapping) or MONITORED (one value in a page of its own, no
    /// MonitoredValue; 32-bit values in the No64BitAtomics mode). `ENOSPC` beyond
    /// [`MAX_VRAM_FENCES_PER_PROCESS`] INTRA_GPU fences of the opener's process.
    pub(super) fn create_fence(&self, a: &mut uapi::CreateFence) -> Result {
        if a.flags & uapi::FENCE_CROSS_ADAPTER != 0 {
            return self.create_cross_fence(a);
        }
        let caps = self.gpu.core.info().caps;
        let shareable = a.flags & uapi::FENCE_SHAREABLE != 0;
        // The native-fence paths are closed while the feature is off (CAP-08).
        let native = matches!(a.kind, uapi::FENCE_KIND_DEFAULT | uapi::FENCE_KIND_INTRA_GPU);
        if native && !self.feature.enabled() {
            return Err(EOPNOTSUPP);
        }
        // CAP-04: a type the OS does not support.
        if a.kind == uapi::FENCE_KIND_INTRA_GPU && !self.gpu.core.info().os_caps.intra_gpu_fence() {
            return Err(EOPNOTSUPP);
        }
        let kind = match a.kind {
            uapi::FENCE_KIND_DEFAULT if caps.native_fence() => fence::FenceKind::Default,
            // NF-17: an INTRA_GPU fence cannot be shared.
            uapi::FENCE_KIND_INTRA_GPU if caps.intra_gpu_fence() && !shareable => {
                fence::FenceKind::IntraGpu
            }
            uapi::FENCE_KIND_MONITORED if caps.monitored_fence() => fence::FenceKind::Monitored,
            _ => return Err(EINVAL),
        };
        // The 32-bit mode: values are 32-bit (FEN-08 rule in `uapi.rs`).
        if kind == fence::FenceKind::Monitored
            && caps.no_64bit_atomics()
            && a.initial_value > u64::from(u32::MAX)
        {
            return Err(ERANGE);
        }
        if a.pad != 0 || a.flags & !uapi::FENCE_SHAREABLE != 0 {
            return Err(EINVAL);
        }
        if kind == fence::FenceKind::Default && shareable {
            // A global object and the creator's local handle on it (SHR-01).
            self.state.lock().context(a.context)?;
            let obj = GlobalFence::new(&self.gpu.fences, a.initial_value)?;
            a.handle = self.open_local(a.context, obj, |v| set_view(a, v))?;
            return Ok(());
        }
        let mut st = self.state.lock();
        let st = &mut *st;
        let c = st.context(a.context)?;
        let (handle, share) = st.new_handle(&self.gpu.core, self.share_owner())?;
        st.fences.reserve(1, GFP_KERNEL_ACCOUNT)?;
        let vram = kind == fence::FenceKind::IntraGpu;
        let core = &self.gpu.core;
        if vram {
            core.objects()
                .charge(self.share_owner(), Share::VramFence, MAX_VRAM_FENCES_PER_PROCESS)?;
        }
        let vram_page = if vram {
            self.demoted_vram_page(st)
        } else {
            None
        };
        let fc = &mut st.contexts[c];
        let (fence, view) = Fence::create(
            &self.gpu.fences,
            &mut fc.ctx,
            &mut fc.fence_pages,
            kind,
            shareable,
            a.initial_value,
            vram_page,
        )
        .inspect_err(|_| {
            if vram {
                core.objects().uncharge(self.share_owner(), Share::VramFence);
            }
        })?;
        set_view(a, view);
        a.handle = handle;
        st.fences.push(
            FileFence {
                handle,
                _share: share,
                context: a.context,
                fence,
            },
            GFP_KERNEL_ACCOUNT,
        )?;
        Ok(())
    }

    /// With `demote_fences` on and no VRAM fence page free, the VRAM page of one of this file's
    /// optimized DEFAULT fence pages, its MonitoredValues demoted to system memory (NF-14), or,
    /// with none left, of this file's oldest INTRA_GPU fence still in VRAM, its values demoted
    /// to system memory (NF-18); `None` leaves the choice (and the `ENOSPC` when none is free)
    /// to `Fence::create`. Only the caller's own fences are demoted: another process's keep
    /// their place.
    fn demoted_vram_page(&self, st: &mut FileState) -> Option<u64> {
        let fences = &self.gpu.fences;
        if !param::demote_fences_param() {
            return None;
        }
        if let Some(free) = opt::take_vram_page(&self.gpu.core) {
            return Some(free);
        }
        for fc in st.contexts.iter_mut() {
            let Some(index) = demote::candidate(&mut fc.fence_pages) else {
                continue;
            };
            let mut members = KVec::new();
            for f in st.fences.iter().filter(|f| f.context == fc.handle) {
                if let Some((_, off)) = f.fence.page_offset().filter(|&(page, _)| page == index) {
                    members.push((f.fence.global, off), GFP_KERNEL).ok()?;
                }
            }
            return demote::demote(fences, &mut fc.fence_pages, index, &members).ok();
        }
        // No optimized page left: one of this file's INTRA_GPU fences still in VRAM (NF-18).
        let FileState {
            contexts,
            fences: file_fences,
            ..
        } = st;
        let f = file_fences
            .iter_mut()
            .find(|f| f.fence.intra_gpu_vram().is_some())?;
        let fc = contexts.iter_mut().find(|fc| fc.handle == f.context)?;
        demote::demote_intra_gpu(fences, &mut fc.ctx, &mut f.fence).ok()
    }

    /// `DESTROY_FENCE`: the one destroy of every kind (NF-20). Its eventfd waits are signaled
    /// (their pollers wake and find the fence gone) and dropped, its pending `sync_file` exports
    /// fail with `ECANCELED`; a local handle on a shared
    /// fence lets go of its CurrentValue page (freed with the last reference: the global
    /// fence's, or the process's last mapping of it).
    pub(super) fn destroy_fence(&self, handle: u32) -> Result {
        let mut st = self.state.lock();
        let st = &mut *st;
        let i = st.fence(handle)?;
        let c = st.context(st.fences[i].context)?;
        let mut released = released(1)?;
        eventfd::drop_waits(&self.gpu.fences, self.owner(), Some(handle), eventfd::Ending::Signaled);
        syncfile::abandon(&self.gpu.fences, self.owner(), Some(handle), ECANCELED);
        let f = st.fences.remove(i).map_err(|_| EINVAL)?;
        if f.fence.kind == fence::FenceKind::IntraGpu {
            self.gpu
                .core
                .objects()
                .uncharge(self.share_owner(), Share::VramFence);
        }
        if let Some(obj) = f.fence.shared() {
            // Room reserved above.
            let _ = released.push(obj.current().clone(), GFP_KERNEL);
        }
        let fc = &mut st.contexts[c];
        f.fence
            .destroy(&self.gpu.fences, &mut fc.ctx, &mut fc.fence_pages);
        Ok(())
    }

    /// `CREATE_FENCE` with `FENCE_CROSS_ADAPTER` (XAD-01): a DEFAULT fence (native here, so
    /// this device must have native and cross-adapter fences and the feature on) or a MONITORED
    /// one (64-bit values); any other kind `EINVAL` (XAD-02).
    fn create_cross_fence(&self, a: &mut uapi::CreateFence) -> Result {
        let caps = self.gpu.core.info().caps;
        if a.pad != 0 || a.flags & !(uapi::FENCE_SHAREABLE | uapi::FENCE_CROSS_ADAPTER) != 0 {
            return Err(EINVAL);
        }
        let native = match a.kind {
            uapi::FENCE_KIND_DEFAULT => {
                if !self.feature.enabled() {
                    return Err(EOPNOTSUPP);
                }
                if !caps.native_fence() || !caps.cross_adapter_fence() {
                    return Err(EINVAL);
                }
                true
            }
            uapi::FENCE_KIND_MONITORED if caps.monitored_fence() && !caps.no_64bit_atomics() => {
                false
            }
            _ => return Err(EINVAL),
        };
        self.state.lock().context(a.context)?;
        let obj = XFence::new(&self.gpu.fences, a.initial_value)?;
        a.handle = self.open_cross(a.context, obj, native, |v| set_view(a, v))?;
        Ok(())
    }

    /// Whether a cross-adapter fence opens as a native fence on this device (XAD-10, XAD-11).
    fn cross_native(&self) -> bool {
        let caps = self.gpu.core.info().caps;
        self.feature.enabled() && caps.native_fence() && caps.cross_adapter_fence()
    }

    /// Opens a local handle on the cross-adapter fence `obj` in context `context` (`native`
    /// or monitored on this device), tells `view` where, and returns the handle.
    fn open_cross(
        &self,
        context: u32,
        obj: Arc<XFence>,
        native: bool,
        view: impl FnOnce(UserView),
    ) -> Result<u32> {
        let adapter: Arc<dyn Adapter> = self.gpu.xad.clone();
        self.open_in(context, view, |ctx| Fence::cross(&adapter, ctx, obj, native))
    }

    /// `XAD_INFO`: how a cross-adapter fence is open on this device; `EINVAL` for another fence.
    pub(super) fn xad_info(&self, a: &mut uapi_debug::XadInfo) -> Result {
        let st = self.state.lock();
        let obj = st.fences[st.fence(a.handle)?]
            .fence
            .cross_fence()
            .ok_or(EINVAL)?
            .clone();
        drop(st);
        obj.info(&self.gpu.fences, a);
        // The claim index's low 32 bits, as the field documents.
        a.peer_payloads = u32::try_from(self.gpu.peers.announced() & u64::from(u32::MAX)).unwrap_or(0);
        Ok(())
    }

    /// Opens a local handle on `obj` in context `context` (mapped at a new GPU VA of the
    /// context and at a new mmap offset), tells `view` where, and returns the handle.
    fn open_local(
        &self,
        context: u32,
        obj: Arc<GlobalFence>,
        view: impl FnOnce(UserView),
    ) -> Result<u32> {
        self.open_in(context, view, |ctx| Fence::local(&self.gpu.fences, ctx, obj))
    }

    /// A new handle of this file on the fence `open` makes in context `context`'s address
    /// space; `view` learns where it is mapped.
    fn open_in(
        &self,
        context: u32,
        view: impl FnOnce(UserView),
        open: impl FnOnce(&mut Context) -> Result<(Fence, UserView)>,
    ) -> Result<u32> {
        let mut st = self.state.lock();
        let st = &mut *st;
        let c = st.context(context)?;
        let (handle, share) = st.new_handle(&self.gpu.core, self.share_owner())?;
        st.fences.reserve(1, GFP_KERNEL_ACCOUNT)?;
        let (fence, v) = open(&mut st.contexts[c].ctx)?;
        view(v);
        st.fences.push(
            FileFence {
                handle,
                _share: share,
                context,
                fence,
            },
            GFP_KERNEL_ACCOUNT,
        )?;
        Ok(handle)
    }

    /// `EXPORT_FENCE`: an fd holding a reference to a shared fence's global object (SHR-05).
    /// A cross-adapter fence's fd holds the [`XFence`] (its CurrentValue page), not a device's
    /// registration: any Belfry device can open it (XAD-03).
    pub(super) fn export_fence(&self, arg: usize) -> Result {
        let mut a: uapi::ExportFence = read_arg(arg)?;
        let (shared, cross) = {
            let st = self.state.lock();
            let f = &st.fences[st.fence(a.handle)?].fence;
            (f.shared().cloned(), f.cross_fence().cloned())
        };
        let fd = kernel::fs::file::FileDescriptorReservation::get_unused_fd_flags(
            kernel::fs::file::flags::O_CLOEXEC,
        )?;
        let file = match (shared, cross) {
            (Some(obj), _) => anonfile::new_file(FENCE_FILE, obj)?,
            (None, Some(obj)) => anonfile::new_file(FENCE_FILE, obj)?,
            (None, None) => return Err(EINVAL),
        };
        a.fd = i32::try_from(fd.reserved_fd())?;
        write_arg(arg, &a)?;
        fd.fd_install(file);
        Ok(())
    }

    /// `IMPORT_FENCE`: a local handle on the global object an exported fd names (SHR-02).
    pub(super) fn import_fence(&self, a: &mut uapi::ImportFence) -> Result {
        if a.pad != 0 || a.pad2 != 0 {
            return Err(EINVAL);
        }
        let obj = match anonfile::object_of_fd::<GlobalFence>(a.fd) {
            Ok(obj) => obj,
            Err(e) => {
                // A cross-adapter fence opens on any device (XAD-03, XAD-10, XAD-11).
                let Ok(x) = anonfile::object_of_fd::<XFence>(a.fd) else {
                    return Err(e);
                };
                let native = self.cross_native();
                let context = a.context;
                a.handle = self.open_cross(context, x, native, |v| {
                    (a.gpu_va, a.mmap_offset, a.page_offset) = (v.gpu_va, v.mmap_offset, 0);
                })?;
                return Ok(());
            }
        };
        if !obj.is_on(&self.gpu.fences) {
            return Err(EXDEV);
        }
        let context = a.context;
        a.handle = self.open_local(context, obj, |v| {
            (a.gpu_va, a.mmap_offset, a.page_offset) = (v.gpu_va, v.mmap_offset, 0);
        })?;
        Ok(())
    }

    /// `WAIT_FENCE_EVENTFD`: registered under the file lock, so the handle cannot go away
    /// meanwhile.
    pub(super) fn wait_fence_eventfd(&self, w: &uapi::FenceEventWait) -> Result {
        let st = self.state.lock();
        let (global, monitored, current, offset) = cpu_place(&st, w.handle)?;
        eventfd::wait_eventfd(
            &self.gpu.fences,
            &self.gpu.logs,
            self.owner(),
            self.share_owner(),
            w.handle,
            global,
            !monitored,
            current,
            offset,
            w.value,
            w.eventfd,
        )
    }

    /// `SIGNAL_FENCE`: CPU signal through the device (a monitored fence: a CPU store to its
    /// value page), then the waits it satisfies complete. A value below CurrentValue is refused
    /// with `EINVAL` (a fence never moves backwards, Vulkan
    /// VUID-VkSemaphoreSignalInfo-value-03258); in the 32-bit mode the window rule (`ERANGE`)
    /// applies instead.
    pub(super) fn signal_fence(&self, op: &uapi::FenceOp) -> Result {
        if op.pad != 0 {
            return Err(EINVAL);
        }
        let place = cpu_place(&self.state.lock(), op.handle)?;
        let (_, monitored, current, offset) = &place;
        let wrap32 = *monitored && self.gpu.core.wrap32();
        if !window::forward(wrap32, current.read64(*offset), op.value) {
            return Err(EINVAL);
        }
        self.gpu.signal(&place, op.value)
    }

    /// `CANCEL_FENCE_EVENTFD`: withdraws this file's pending eventfd waits on a fence for a
    /// value with an eventfd (MV-03: the MonitoredValue is recomputed).
    pub(super) fn cancel_fence_eventfd(&self, w: &uapi::FenceEventWait) -> Result {
        // Under the file lock, so the handle cannot go away meanwhile.
        let st = self.state.lock();
        st.fence(w.handle)?;
        eventfd::cancel(&self.gpu.fences, self.owner(), w.handle, w.value, w.eventfd)
    }

    /// `WAIT_FENCE`: the CPU-wait machinery of `WAIT_PROGRESS`.
    pub(super) fn wait_fence(&self, op: &uapi::FenceOp) -> Result {
        if op.pad != 0 {
            return Err(EINVAL);
        }
        let (global, monitored, current, offset) = cpu_place(&self.state.lock(), op.handle)?;
        let wrap32 = monitored && self.gpu.core.wrap32();
        if !window::in_window(wrap32, current.read64(offset), op.value, false) {
            return Err(ERANGE);
        }
        let place = (global, monitored, current, offset);
        self.gpu.wait(&place, op.value, timeout_ms(op.timeout_ns), None)
    }

    /// `WAIT_FENCES`: the entries are read from user memory first, then resolved under the
    /// file lock (fences and queues' progress fences), then waited on without it.
    pub(super) fn wait_fences(&self, arg: usize) -> Result {
        let mut a: uapi_sync::WaitFences = read_arg(arg)?;
        let count = usize::try_from(a.count)?;
        if a.pad != 0
            || a.flags & !uapi_sync::WAIT_FENCES_ALL != 0
            || count == 0
            || a.count > uapi_sync::MAX_WAIT_FENCES
        {
            return Err(EINVAL);
        }
        let size = count * core::mem::size_of::<uapi_sync::WaitFenceEntry>();
        let addr = usize::try_from(a.entries).map_err(|_| EFAULT)?;
        let mut reader = UserSlice::new(UserPtr::from_addr(addr), size).reader();
        let mut entries = KVec::with_capacity(count, GFP_KERNEL)?;
        for _ in 0..count {
            let e: uapi_sync::WaitFenceEntry = reader.read()?;
            entries.push(e, GFP_KERNEL)?;
        }
        let mut targets = KVec::with_capacity(count, GFP_KERNEL)?;
        {
            let st = self.state.lock();
            for e in entries.iter() {
                targets.push(self.wait_target(&st, e)?, GFP_KERNEL)?;
            }
        }
        let all = a.flags & uapi_sync::WAIT_FENCES_ALL != 0;
        // An absolute deadline makes the call restartable: a signal handler installed with
        // SA_RESTART restarts it transparently, one without gets EINTR.
        let first = match self.gpu.wait_many(&targets, all, deadline_ms(a.deadline_ns)) {
            Err(e) if e == EINTR => return Err(ERESTARTSYS),
            r => r?,
        };
        a.first = u32::try_from(first)?;
        write_arg(arg, &a)
    }

    /// What `WAIT_FENCES` entry `e` waits for: a fence's value (`WAIT_FENCE`'s checks), or a
    /// queue's progress (`WAIT_PROGRESS`'s, its context's loss ending the wait).
    fn wait_target(&self, st: &FileState, e: &uapi_sync::WaitFenceEntry) -> Result<WaitTarget> {
        match e.flags {
            0 => {
                let place = cpu_place(st, e.handle)?;
                let wrap32 = place.1 && self.gpu.core.wrap32();
                if !window::in_window(wrap32, place.2.read64(place.3), e.value, false) {
                    return Err(ERANGE);
                }
                Ok(gpu::target(&place, e.value, None))
            }
            uapi_sync::WAIT_ENTRY_PROGRESS => {
                let (place, context) = self.progress_place(st, e.handle)?;
                Ok(gpu::target(&place, e.value, Some(context)))
            }
            _ => Err(EINVAL),
        }
    }

    /// `EXPORT_SYNC_FILE`: a `sync_file` of a MONITORED fence's value (see
    /// [`uapi_sync::IOCTL_EXPORT_SYNC_FILE`]); `EPERM` for a native fence, which a user-mode
    /// queue may signal with no bound the kernel can enforce ("Indefinite DMA Fences").
    /// Registered under the file lock, so the handle cannot go away meanwhile; the fd is
    /// installed last, once nothing can fail.
    pub(super) fn export_sync_file(&self, arg: usize) -> Result {
        let mut a: uapi_sync::ExportSyncFile = read_arg(arg)?;
        if a.flags != 0 || a.pad != 0 {
            return Err(EINVAL);
        }
        if !syncfile::SUPPORTED {
            return Err(EOPNOTSUPP);
        }
        let fd = kernel::fs::file::FileDescriptorReservation::get_unused_fd_flags(
            kernel::fs::file::flags::O_CLOEXEC,
        )?;
        let file = {
            let st = self.state.lock();
            let (global, monitored, current, offset) = cpu_place(&st, a.handle)?;
            if !monitored {
                return Err(EPERM);
            }
            let wrap32 = self.gpu.core.wrap32();
            if !window::in_window(wrap32, current.read64(offset), a.value, false) {
                return Err(ERANGE);
            }
            let owner = self.owner();
            syncfile::export(
                &self.gpu.fences,
                owner,
                self.share_owner(),
                a.handle,
                global,
                current,
                offset,
                wrap32,
                a.value,
            )?
        };
        a.fd = i32::try_from(fd.reserved_fd())?;
        write_arg(arg, &a)?;
        fd.fd_install(file);
        Ok(())
    }

    /// `FENCE_INFO`.
    pub(super) fn fence_info(&self, a: &mut uapi_debug::FenceInfo) -> Result {
        let st = self.state.lock();
        let f = &st.fences[st.fence(a.handle)?];
        let pages = &st.contexts[st.context(f.context)?].fence_pages;
        f.fence.info(&self.gpu.fences, pages, a)
    }
}

/// Where a new fence is, in `CREATE_FENCE`'s output fields.
fn set_view(a: &mut uapi::CreateFence, v: UserView) {
    a.gpu_va = v.gpu_va;
    a.mmap_offset = v.mmap_offset;
    a.page_offset = v.page_offset;
}

/// Where a CPU operation on fence `handle` of `st` finds it; `EPERM` for an INTRA_GPU fence
/// (NF-16).
fn cpu_place(st: &FileState, handle: u32) -> Result<CpuPlace> {
    st.fences[st.fence(handle)?].fence.cpu_place()
}
