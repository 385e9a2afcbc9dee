// SPDX-License-Identifier: GPL-2.0

//! What one open file of `/dev/belfry<N>` is ([`BelfryFile`]) and owns ([`FileState`]): its
//! contexts, allocations, queues, doorbells and fences under per-file handles, and the memory
//! the process may still have mapped. Handles are per file, so another process's handles name
//! nothing here.

use kernel::{
    device::Device,
    prelude::*,
    sync::{aref::ARef, atomic::Atomic, Arc, CondVar, Mutex},
    task::Task,
};

use crate::{
    abi::uapi,
    bindings::mm::FileMapping,
    caps::NativeFenceFeature,
    context::Context,
    fence::object::{Fence, FencePages},
    gpu::Gpu,
    power::DevicePower,
    hw::{
        core::{Core, ShareCharge},
        dmamem::DmaBuf,
        shares::{Share, ShareOwner},
    },
    mm::alloc::VidAlloc,
    queue::{build::HwQueue, doorbell::Doorbell},
    term::TermStats,
};

/// Most contexts one process may hold on a device, across every file it opened (`ENOSPC`
/// beyond): a quarter of the device's `MAX_CONTEXTS` (256), so one process cannot take every
/// context id. A file counts for the process that opened it (its `struct pid`, so each forked
/// child is a process of its own) and that process's user: one user's processes together hold
/// at most [`crate::hw::shares::USER_SHARES`] shares (192 contexts, 768 queues, 192 INTRA_GPU
/// fences), so a process of another user still finds a share free.
pub(crate) const MAX_CONTEXTS_PER_PROCESS: u32 = 64;

/// Most queues one process may hold on a device, across its files (`ENOSPC` beyond): a quarter
/// of the device's `MAX_QUEUES` (1024).
pub(crate) const MAX_QUEUES_PER_PROCESS: u32 = 256;

/// Most INTRA_GPU fences (one VRAM fence page each) one process may hold on a device, across
/// its files (`ENOSPC` beyond): a quarter of the device's 256 VRAM fence pages. Optimized
/// DEFAULT fence pages need no cap: they fall back to system memory when VRAM fence pages run
/// out.
pub(crate) const MAX_VRAM_FENCES_PER_PROCESS: u32 = 64;

/// Pages a destroy or `FREE` lets go of, in a vector whose room was reserved before anything
/// changed (so the layers below push infallibly): dropped when the ioctl returns. A process's
/// mappings hold their own references (`bindings::vmaref`), so memory it still maps lives until
/// its `munmap`, and nothing waits for the file's release.
pub(crate) type Released = KVec<Arc<DmaBuf>>;

/// An empty [`Released`] with room for `pages`.
///
/// # Errors
///
/// `ENOMEM`.
pub(crate) fn released(pages: usize) -> Result<Released> {
    let mut v = KVec::new();
    v.reserve(pages, GFP_KERNEL)?;
    Ok(v)
}

/// A context of the file.
pub(crate) struct FileContext {
    /// Per-file handle.
    pub(crate) handle: u32,
    /// Its count in the process's objects ([`uapi::MAX_OBJECTS_PER_PROCESS`]).
    pub(crate) _share: ShareCharge,
    /// The device context and its address space.
    pub(crate) ctx: Context,
    /// Its pages of DEFAULT and MONITORED fence values.
    pub(crate) fence_pages: FencePages,
    /// A `SUBMIT_SPLIT` of one of its queues waits on the GPU without the file's lock: calls
    /// that would move or free the context's video memory or destroy its queues meanwhile get
    /// `EBUSY`, and another `SUBMIT_SPLIT` of the context waits for [`BelfryFile::split_done`].
    pub(crate) split_busy: bool,
}

/// An allocation: DMA-coherent pages mapped in a context and mmappable.
pub(crate) struct Allocation {
    /// Per-file handle.
    pub(crate) handle: u32,
    /// Its count in the process's objects ([`uapi::MAX_OBJECTS_PER_PROCESS`]).
    pub(crate) _share: ShareCharge,
    /// Handle of the context whose address space maps it.
    pub(crate) context: u32,
    /// The memory.
    pub(crate) buf: Arc<DmaBuf>,
    /// Its GPU VA.
    pub(crate) gpu_va: u64,
    /// Its mmap offset, in pages.
    pub(crate) pgoff: u64,
    /// `ALLOC_GPU_READ_ONLY`.
    pub(crate) gpu_read_only: bool,
}

/// A hardware queue of the file.
pub(crate) struct FileQueue {
    /// Per-file handle.
    pub(crate) handle: u32,
    /// Its count in the process's objects ([`uapi::MAX_OBJECTS_PER_PROCESS`]).
    pub(crate) _share: ShareCharge,
    /// Handle of its context.
    pub(crate) context: u32,
    /// User-mode queues: the ring and ring-control allocations (handles), kept while the queue
    /// exists (`FREE` refuses them with `EBUSY`).
    pub(crate) user_allocs: Option<(u32, u32)>,
    /// Kernel-mode queues: the highest progress value submitted.
    pub(crate) last_submitted: u64,
    /// Its engine.
    pub(crate) engine: u32,
    /// The queue on the device.
    pub(crate) hwq: HwQueue,
    /// `QUEUE_RING_IN_VRAM` queues: the ring and ring-control allocations the module made
    /// (memory-manager id, allocation; ring first), empty otherwise.
    pub(crate) vram_ring: KVec<(u64, Arc<VidAlloc>)>,
}

/// A doorbell of one of this file's user-mode queues.
pub(crate) struct FileDoorbell {
    /// Per-file handle.
    pub(crate) handle: u32,
    /// Its count in the process's objects ([`uapi::MAX_OBJECTS_PER_PROCESS`]).
    pub(crate) _share: ShareCharge,
    /// Handle of its queue.
    pub(crate) queue: u32,
    /// The doorbell.
    pub(crate) db: Arc<Doorbell>,
}

/// A fence of the file.
pub(crate) struct FileFence {
    /// Per-file handle.
    pub(crate) handle: u32,
    /// Its count in the process's objects ([`uapi::MAX_OBJECTS_PER_PROCESS`]).
    pub(crate) _share: ShareCharge,
    /// Handle of its context.
    pub(crate) context: u32,
    /// The fence.
    pub(crate) fence: Fence,
}

/// A video-memory allocation of the file (`CREATE_ALLOCATION`), placed by the memory manager.
pub(crate) struct FileVidAlloc {
    /// Per-file handle.
    pub(crate) handle: u32,
    /// Its count in the process's objects ([`uapi::MAX_OBJECTS_PER_PROCESS`]).
    pub(crate) _share: ShareCharge,
    /// Handle of the context whose address space maps it.
    pub(crate) context: u32,
    /// The memory manager's id.
    pub(crate) id: u64,
    /// The allocation.
    pub(crate) alloc: Arc<VidAlloc>,
}

/// What one open file owns.
pub(crate) struct FileState {
    /// Next handle.
    pub(crate) next_handle: u32,
    /// Contexts.
    pub(crate) contexts: KVec<FileContext>,
    /// Allocations.
    pub(crate) allocs: KVec<Allocation>,
    /// Queues.
    pub(crate) queues: KVec<FileQueue>,
    /// Doorbells.
    pub(crate) doorbells: KVec<FileDoorbell>,
    /// Fences.
    pub(crate) fences: KVec<FileFence>,
    /// Video-memory allocations.
    pub(crate) vallocs: KVec<FileVidAlloc>,
}

impl FileState {
    /// Nothing yet.
    pub(crate) const fn new() -> Self {
        Self {
            next_handle: 1,
            contexts: KVec::new(),
            allocs: KVec::new(),
            queues: KVec::new(),
            doorbells: KVec::new(),
            fences: KVec::new(),
            vallocs: KVec::new(),
        }
    }

    /// A new handle and its count for `owner` (the file's opener, see
    /// [`BelfryFile::share_owner`]) on device `core`, which the object made under it keeps (dropped
    /// unused, it is given back), or `ENOSPC` when the process holds
    /// [`uapi::MAX_OBJECTS_PER_PROCESS`] objects across its files of the device.
    ///
    /// # Errors
    ///
    /// `ENOSPC`, `ENOMEM`.
    pub(crate) fn new_handle(&mut self, core: &Arc<Core>, owner: &ShareOwner) -> Result<(u32, ShareCharge)> {
        let handle = self.next_handle;
        let share = core.charge_share(owner, Share::Object, uapi::MAX_OBJECTS_PER_PROCESS)?;
        self.next_handle = self.next_handle.checked_add(1).ok_or(ENOSPC)?;
        Ok((handle, share))
    }

    /// Index of context `handle`.
    pub(crate) fn context(&self, handle: u32) -> Result<usize> {
        index_of(&self.contexts, handle, |c| c.handle)
    }

    /// `EBUSY` while a `SUBMIT_SPLIT` of context `handle` waits on the GPU
    /// ([`FileContext::split_busy`]); a context that does not exist is not busy.
    pub(crate) fn split_idle(&self, handle: u32) -> Result {
        match self.context(handle) {
            Ok(c) if self.contexts[c].split_busy => Err(EBUSY),
            _ => Ok(()),
        }
    }

    /// Index of allocation `handle`.
    pub(crate) fn alloc(&self, handle: u32) -> Result<usize> {
        index_of(&self.allocs, handle, |a| a.handle)
    }

    /// Index of doorbell `handle`.
    pub(crate) fn doorbell(&self, handle: u32) -> Result<usize> {
        index_of(&self.doorbells, handle, |d| d.handle)
    }

    /// Index of fence `handle`.
    pub(crate) fn fence(&self, handle: u32) -> Result<usize> {
        index_of(&self.fences, handle, |f| f.handle)
    }

    /// Index of video-memory allocation `handle`.
    pub(crate) fn valloc(&self, handle: u32) -> Result<usize> {
        index_of(&self.vallocs, handle, |v| v.handle)
    }

    /// Index of queue `handle`.
    pub(crate) fn queue(&self, handle: u32) -> Result<usize> {
        index_of(&self.queues, handle, |q| q.handle)
    }
}

/// Index of the object that `handle` names among `items` (whose handles `key` reads); handle 0
/// names nothing.
fn index_of<T>(items: &[T], handle: u32, key: impl Fn(&T) -> u32) -> Result<usize> {
    items
        .iter()
        .position(|x| handle != 0 && key(x) == handle)
        .ok_or(ENOENT)
}

/// An open file of `/dev/belfry<N>`.
#[pin_data]
pub(crate) struct BelfryFile {
    /// The misc device, for messages.
    pub(crate) dev: ARef<Device>,
    /// The device slot `N`.
    pub(crate) index: usize,
    /// The device's domain objects.
    pub(crate) gpu: Gpu,
    /// The device's power (each ioctl holds it in D0).
    pub(crate) power: Arc<DevicePower>,
    /// The device's native-fence feature (negotiated at probe).
    pub(crate) feature: NativeFenceFeature,
    /// The device's termination statistics.
    pub(crate) term: Arc<TermStats>,
    /// ioctls made through this file.
    pub(crate) ioctls: Atomic<u64>,
    /// The file's page-cache mapping, for moving doorbell mappings.
    pub(crate) mapping: Option<FileMapping>,
    /// The process that opened the file (its thread-group leader): whether a signal killed it
    /// decides the release path, whoever closes the last reference (a child that inherited the
    /// file, a process it was passed to).
    pub(crate) opener: ARef<Task>,
    /// What the file's objects count against (the per-process caps and the per-user ceiling):
    /// the opener's process and its effective user at open.
    pub(crate) share_owner: ShareOwner,
    /// What this file owns.
    #[pin]
    pub(crate) state: Mutex<FileState>,
    /// Notified (under nothing) when a `SUBMIT_SPLIT` clears its context's
    /// [`FileContext::split_busy`].
    #[pin]
    pub(crate) split_done: CondVar,
}

impl BelfryFile {
    /// The process (and user) that opened the file: what its objects count against (the
    /// per-process caps and the per-user ceiling).
    pub(crate) fn share_owner(&self) -> &ShareOwner {
        &self.share_owner
    }

    /// This file's identity, for the eventfd waits it registers.
    pub(crate) fn owner(&self) -> usize {
        core::ptr::from_ref(self).addr()
    }
}
