//! The video-memory part of the userspace interface (re-exported by `uapi`): allocations the
//! module's memory manager places (`CREATE_ALLOCATION`, `DESTROY_ALLOCATION`, `ALLOCATION_RW`),
//! kernel-mode submission with an allocation list and a patch-location list (`SUBMIT_SPLIT`,
//! DMA-buffer split points, SPLIT-01..16) and the memory manager's counters (`MM_STATS`).

use core::mem::size_of;

use super::ioctl::{iowr, Handle};

/// `CREATE_ALLOCATION`: an allocation of video memory the memory manager places
/// ([`CreateAllocation`]).
pub const IOCTL_CREATE_ALLOCATION: u32 = iowr(0x30, size_of::<CreateAllocation>());
/// `DESTROY_ALLOCATION` ([`Handle`]): the module waits for no work (a `SUBMIT_SPLIT` returns
/// only once its work has run); `EBUSY` while another thread's `SUBMIT_SPLIT` of the
/// allocation's context waits for its work.
pub const IOCTL_DESTROY_ALLOCATION: u32 = iowr(0x31, size_of::<Handle>());
/// `ALLOCATION_RW`: CPU access to an allocation's bytes ([`AllocationRw`]). An allocation in
/// VRAM is first moved to system memory (a paging buffer), then copied from or to the caller;
/// `EBUSY` while a `SUBMIT_SPLIT` of its context waits for its work.
pub const IOCTL_ALLOCATION_RW: u32 = iowr(0x32, size_of::<AllocationRw>());
/// `SUBMIT_SPLIT`: a kernel-mode submission with an allocation list and a patch-location list
/// ([`SubmitSplit`]); returns once every part has run. While it waits for its work, the file's
/// other calls go on, but those that would move, free or place video memory of its context or
/// destroy a queue of it get `EBUSY` (`DESTROY_ALLOCATION`, `ALLOCATION_RW`, `DESTROY_QUEUE`,
/// `CREATE_QUEUE` with `QUEUE_RING_IN_VRAM`), and another `SUBMIT_SPLIT` of the context waits for
/// it (`EINTR` on a signal, restarted under `SA_RESTART`).
pub const IOCTL_SUBMIT_SPLIT: u32 = iowr(0x33, size_of::<SubmitSplit>());
/// `MM_STATS`: the memory manager's counters ([`MmStats`]).
pub const IOCTL_MM_STATS: u32 = iowr(0x34, size_of::<MmStats>());

/// A segment: system memory.
pub const SEGMENT_SYSTEM: u32 = 1;
/// A segment: device memory (VRAM).
pub const SEGMENT_VRAM: u32 = 2;
/// No segment: `CreateAllocation.fallback` of an allocation that lives in VRAM or nowhere.
pub const SEGMENT_NONE: u32 = 0;
/// Largest video-memory allocation (`CREATE_ALLOCATION.size`): one `COPY` pages it.
pub const MAX_VIDEO_ALLOCATION: u64 = 16 << 20;
/// Most entries of a `SUBMIT_SPLIT` allocation list.
pub const MAX_ALLOCATION_LIST: u32 = 64;
/// Most entries of a `SUBMIT_SPLIT` patch-location list.
pub const MAX_PATCH_LOCATIONS: u32 = 256;

/// `CREATE_ALLOCATION`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateAllocation {
    /// Context whose address space maps it.
    pub context: u32,
    /// Preferred segment: [`SEGMENT_VRAM`] or [`SEGMENT_SYSTEM`].
    pub preferred: u32,
    /// Where it lives when not in the preferred segment: [`SEGMENT_SYSTEM`], or with
    /// `preferred` VRAM also [`SEGMENT_NONE`]. An allocation with a fallback that VRAM cannot
    /// hold when work needs it (even after evicting everything else that work does not need)
    /// is used by that work from its fallback, as WDDM's video memory manager places an
    /// allocation in the next segment of its preference list (`MmStats::fallback_placements`);
    /// one without fails that work with `E2BIG`. With `preferred` system it is ignored but
    /// must be [`SEGMENT_SYSTEM`].
    pub fallback: u32,
    /// Zero.
    pub pad: u32,
    /// Bytes (a multiple of 4096, at most [`MAX_VIDEO_ALLOCATION`]).
    pub size: u64,
    /// Out: handle.
    pub handle: u32,
    /// Zero.
    pub pad2: u32,
    /// Out: GPU VA in the context's address space, stable across every move.
    pub gpu_va: u64,
}
const _: () = assert!(size_of::<CreateAllocation>() == 40);

/// `ALLOCATION_RW`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocationRw {
    /// Allocation (`CREATE_ALLOCATION`).
    pub handle: u32,
    /// 1: write the caller's bytes into the allocation; 0: read them out.
    pub write: u32,
    /// Byte offset in the allocation.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
    /// The caller's buffer.
    pub user_ptr: u64,
}
const _: () = assert!(size_of::<AllocationRw>() == 32);

/// One patch location (D3DDDI_PATCHLOCATIONLIST): the allocation-list entry it names, the slot
/// of the resource table (SlotId), the offset in the DMA buffer at which the allocation is
/// needed (SplitOffset: a split point, at a packet boundary) and where the allocation's address
/// goes: the offset of a `BIND_SLOT` packet's `va` field (`packet::BIND_SLOT_PATCH_OFFSET` into
/// the packet) binding that slot; the module writes the allocation's GPU VA and size there
/// (zeroes for an unbind).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PatchLocation {
    /// Index in the allocation list.
    pub allocation_index: u32,
    /// Slot (below `MmStats::slots`).
    pub slot_id: u32,
    /// Split offset in the buffer (bytes; non-decreasing along the list).
    pub split_offset: u32,
    /// Byte offset of the patched `BIND_SLOT.va` in the buffer (at or after `split_offset`).
    pub patch_offset: u32,
}
const _: () = assert!(size_of::<PatchLocation>() == 16);

/// `SUBMIT_SPLIT`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubmitSplit {
    /// Kernel-mode queue.
    pub queue: u32,
    /// Command-buffer allocation (`ALLOC`), copied by the module before anything runs.
    pub cmdbuf: u32,
    /// Offset in it (4-byte aligned).
    pub offset: u32,
    /// Bytes (a multiple of 4, at most `ring::CMDBUF_MAX_BYTES`).
    pub size: u32,
    /// Progress value the last part signals.
    pub progress_value: u64,
    /// Entries of the allocation list: `u32` allocation handles, 0 for none (an unbind).
    pub allocation_count: u32,
    /// Entries of the patch-location list.
    pub patch_count: u32,
    /// Address of the allocation list.
    pub allocations: u64,
    /// Address of the patch-location list ([`PatchLocation`]s).
    pub patches: u64,
    /// Out: parts the buffer ran in (1: not split).
    pub parts: u32,
    /// Zero.
    pub pad: u32,
}
const _: () = assert!(size_of::<SubmitSplit>() == 56);

/// `MM_STATS`: the memory manager's counters since the device was bound. It grows at its end
/// only: every field keeps its offset (the number of `IOCTL_MM_STATS` encodes the size).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MmStats {
    /// VRAM bytes the memory manager places allocations in.
    pub vram_managed: u64,
    /// Bytes of allocations resident in VRAM now.
    pub resident_vram: u64,
    /// Bytes of allocations in system memory now (system ones and evicted VRAM ones).
    pub resident_system: u64,
    /// Allocations evicted from VRAM to system memory.
    pub evictions: u64,
    /// Bytes paged from system memory into VRAM.
    pub paged_in: u64,
    /// Bytes paged from VRAM to system memory.
    pub paged_out: u64,
    /// Paging buffers run.
    pub paging_buffers: u64,
    /// `SUBMIT_SPLIT`s completed.
    pub submissions: u64,
    /// Parts of all of them.
    pub parts: u64,
    /// Parts of the last one.
    pub last_parts: u32,
    /// Slots of the device's resource table (MaxAllocationListSlotId, `SPLIT_INFO.slots`).
    pub slots: u32,
    /// Times an allocation that prefers VRAM was used by work (`SUBMIT_SPLIT`, a ring in VRAM)
    /// from its fallback segment, system memory, because VRAM could not hold it beside what
    /// that work needed at once, even after eviction.
    pub fallback_placements: u64,
    /// Pages of optimized DEFAULT fences whose MonitoredValues were demoted from VRAM to system
    /// memory to free a VRAM fence page (NF-14; only with the module's `demote_fences` on).
    pub fence_demotions: u64,
}
const _: () = assert!(size_of::<MmStats>() == 96);
const _: () = assert!(core::mem::offset_of!(MmStats, slots) == 76);
