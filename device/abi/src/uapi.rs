//! The userspace interface of the kernel module: ioctls on `/dev/belfry<N>` and their argument
//! structs, shared by the module and the userspace library.
//!
//! Conventions: every struct is `#[repr(C)]` with explicit padding that must be zero;
//! handles are per-open-file `u32`s (0 is never a valid handle); `out` fields are written by
//! the module; mmap offsets are opaque page-aligned cookies returned by the module. Every
//! ioctl validates all of its input and fails with an errno (`EINVAL` malformed, `ENOENT`
//! unknown handle, `EBUSY` in use, `ENOSPC` limits, `EFAULT` bad pointer, `EPERM` wrong queue
//! kind, `ETIMEDOUT` a wait ran out, `EINTR` a signal interrupted a wait — call again,
//! `ERANGE` a fence value outside the 32-bit window, see [`QueueFenceOp`], `ECANCELED` a wait
//! on work of a context lost to a GPU fault) without side effects.
//!
//! Limits per process, across every file of a device it opened (a file counts for the process
//! that opened it; `ENOSPC` beyond; a quarter of each device-wide pool, so one process cannot
//! take every id): 64 contexts, 256 queues, 64 INTRA_GPU fences (one VRAM fence page each),
//! 1024 objects of all kinds together, 256 pending `WAIT_FENCE_EVENTFD` waits, 256 pending
//! `EXPORT_SYNC_FILE` exports.
//!
//! Mappings: every mmap offset names exactly one page unless it names an allocation (then its
//! size rounded up to pages). Allocations are zeroed. A queue's progress fence starts at 0;
//! each submission must signal a value above the last one submitted. A faulted context (GPU
//! page fault: its doorbells read DISCONNECTED_ABORT) refuses new queues with `EIO`: the library
//! reports the context lost and the application creates a new one. On disconnect the module writes the new status before it moves
//! the doorbell mapping to the dummy page, so a ring that lands on the dummy page is always
//! followed by a status read that says so.

use core::mem::size_of;

/// Version of this interface, reported by [`QueryCaps`].
pub const UAPI_VERSION: u32 = 1;

pub use super::ioctl::{iowr, Handle};
pub use super::vidmem::*;

/// `QUERY_CAPS`.
pub const IOCTL_QUERY_CAPS: u32 = iowr(0x00, size_of::<QueryCaps>());
/// `CREATE_CONTEXT`.
pub const IOCTL_CREATE_CONTEXT: u32 = iowr(0x01, size_of::<CreateContext>());
/// `DESTROY_CONTEXT`.
pub const IOCTL_DESTROY_CONTEXT: u32 = iowr(0x02, size_of::<Handle>());
/// `ALLOC`.
pub const IOCTL_ALLOC: u32 = iowr(0x03, size_of::<Alloc>());
/// `FREE`.
pub const IOCTL_FREE: u32 = iowr(0x04, size_of::<Handle>());
/// `CREATE_QUEUE`.
pub const IOCTL_CREATE_QUEUE: u32 = iowr(0x05, size_of::<CreateQueue>());
/// `DESTROY_QUEUE`.
pub const IOCTL_DESTROY_QUEUE: u32 = iowr(0x06, size_of::<Handle>());
/// `CREATE_DOORBELL`.
pub const IOCTL_CREATE_DOORBELL: u32 = iowr(0x07, size_of::<CreateDoorbell>());
/// `DESTROY_DOORBELL`.
pub const IOCTL_DESTROY_DOORBELL: u32 = iowr(0x08, size_of::<Handle>());
/// `CONNECT_DOORBELL`: assign a physical doorbell (victimizing the least recently used one
/// when none is free) and map it at the doorbell offset; status becomes CONNECTED. A doorbell
/// whose context faulted (DISCONNECTED_ABORT) cannot reconnect: `EIO`.
pub const IOCTL_CONNECT_DOORBELL: u32 = iowr(0x09, size_of::<Handle>());
/// `NOTIFY_WORK_SUBMISSION`: the library saw CONNECTED_NOTIFY after ringing.
pub const IOCTL_NOTIFY_WORK: u32 = iowr(0x0a, size_of::<Handle>());
/// `SUBMIT`: kernel-mode submission onto a kernel-owned ring.
pub const IOCTL_SUBMIT: u32 = iowr(0x0b, size_of::<Submit>());
/// `WAIT_PROGRESS`: sleep until a queue's progress fence reaches a value (or a relative
/// timeout; `uapi_sync::IOCTL_WAIT_FENCES` with `WAIT_ENTRY_PROGRESS` takes an absolute deadline).
/// `ECANCELED` when the value is not reached and the queue's context was lost to a GPU fault
/// (at once, or as soon as the fault is processed while sleeping): the work will never complete.
pub const IOCTL_WAIT_PROGRESS: u32 = iowr(0x0c, size_of::<WaitProgress>());
/// `SUSPEND_CONTEXT` (tests and tools).
pub const IOCTL_SUSPEND_CONTEXT: u32 = iowr(0x0d, size_of::<Handle>());
/// `RESUME_CONTEXT` (tests and tools).
pub const IOCTL_RESUME_CONTEXT: u32 = iowr(0x0e, size_of::<Handle>());
/// `DEBUG_STATS`: read-only counters tests need and users cannot otherwise see.
pub const IOCTL_DEBUG_STATS: u32 = iowr(0x0f, size_of::<DebugStats>());

/// `CREATE_FENCE`: a native (or monitored) fence in a context.
pub const IOCTL_CREATE_FENCE: u32 = iowr(0x10, size_of::<CreateFence>());
/// `DESTROY_FENCE`: the generic destroy of a fence handle (NF-20).
pub const IOCTL_DESTROY_FENCE: u32 = iowr(0x11, size_of::<Handle>());
/// `SIGNAL_FENCE`: CPU signal. A value below CurrentValue is refused with `EINVAL` (a fence
/// never moves backwards; Vulkan VUID-VkSemaphoreSignalInfo-value-03258), the current value
/// itself is accepted (no change); in the 32-bit mode the window rule applies instead (`ERANGE`,
/// see [`QueueFenceOp`]).
pub const IOCTL_SIGNAL_FENCE: u32 = iowr(0x12, size_of::<FenceOp>());
/// `WAIT_FENCE`: blocking CPU wait with a relative timeout (sleeps; woken by fence
/// interrupts). A call restarted after `EINTR` starts its timeout again: the library uses
/// `uapi_sync::IOCTL_WAIT_FENCES`, whose deadline is absolute, instead.
pub const IOCTL_WAIT_FENCE: u32 = iowr(0x13, size_of::<FenceOp>());
/// `FENCE_INFO`: read-only state for tests and tools (MonitoredValue, pending waits, where the
/// values live).
pub const IOCTL_FENCE_INFO: u32 = iowr(0x14, size_of::<FenceInfo>());
/// `DISCONNECT_DOORBELL`: the module's disconnect path on request (DB-17): publishes the given
/// status, disconnects the doorbell from the device and moves the process's doorbell mapping to
/// the dummy page, as victimization does. DISCONNECTED_RETRY: a later `CONNECT_DOORBELL`
/// reconnects; DISCONNECTED_ABORT: for good (`CONNECT_DOORBELL` then fails with `EIO`).
pub const IOCTL_DISCONNECT_DOORBELL: u32 = iowr(0x15, size_of::<DisconnectDoorbell>());

/// `DISCONNECT_DOORBELL`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DisconnectDoorbell {
    /// Doorbell handle.
    pub handle: u32,
    /// [`DoorbellStatus::DisconnectedRetry`] or [`DoorbellStatus::DisconnectedAbort`] as a `u32`
    /// (anything else: `EINVAL`).
    pub status: u32,
}
const _: () = assert!(size_of::<DisconnectDoorbell>() == 8);
/// `EXPORT_FENCE`: a file descriptor naming the global object of a `FENCE_SHAREABLE` DEFAULT
/// fence (SHR-05); it holds a reference to that object until closed.
pub const IOCTL_EXPORT_FENCE: u32 = iowr(0x18, size_of::<ExportFence>());
/// `IMPORT_FENCE`: opens a local handle, in a context of the caller, on the global object an
/// exported fd names (`EINVAL` for an fd that is not a Belfry fence, `EXDEV` for another
/// device's).
pub const IOCTL_IMPORT_FENCE: u32 = iowr(0x19, size_of::<ImportFence>());
/// `WAIT_FENCE_EVENTFD`: registers a CPU wait that signals an eventfd once CurrentValue
/// reaches the value, and returns at once (FEN-18). `ENOSPC` past
/// [`MAX_FENCE_EVENT_WAITS_PER_PROCESS`] pending waits of one process.
pub const IOCTL_WAIT_FENCE_EVENTFD: u32 = iowr(0x1a, size_of::<FenceEventWait>());
/// `CANCEL_FENCE_EVENTFD`: withdraws, unsignaled, the pending `WAIT_FENCE_EVENTFD` waits of
/// this file on fence `handle` for `value` with the same eventfd (the same eventfd object, by
/// any fd naming it), and recomputes the fence's MonitoredValue from the waits left (MV-03).
/// `ENOENT` when none is pending (already signaled, or never registered), `EINVAL` for an
/// unknown handle, `EBADF`/`EINVAL` for an fd that is not an eventfd.
pub const IOCTL_CANCEL_FENCE_EVENTFD: u32 = iowr(0x16, size_of::<FenceEventWait>());
/// Most `WAIT_FENCE_EVENTFD` waits one process may have pending at a time on a device, across
/// every file of it the process opened (waits signaled, cancelled, or dropped with their fence
/// or file no longer count).
pub const MAX_FENCE_EVENT_WAITS_PER_PROCESS: u32 = 256;
/// Most objects under a handle (contexts, allocations, queues, doorbells, fences, video-memory
/// allocations together) one process may hold on a device, across every file of it the
/// process opened (`ENOSPC` beyond; destroyed objects and closed files no longer count).
pub const MAX_OBJECTS_PER_PROCESS: u32 = 1024;
/// `FENCE_DEBUG`: fence bookkeeping tests need and users cannot otherwise see.
pub const IOCTL_FENCE_DEBUG: u32 = iowr(0x1b, size_of::<FenceDebug>());

/// `QUEUE_WAIT_FENCE`: GPU wait of a kernel-mode queue on a fence (FEN-13, FEN-14, FEN-15);
/// see [`QueueFenceOp`].
pub const IOCTL_QUEUE_WAIT_FENCE: u32 = iowr(0x1c, size_of::<QueueFenceOp>());
/// `QUEUE_SIGNAL_FENCE`: the software signal packet of a monitored fence (FEN-10), for engines
/// that cannot write fences: queued behind the kernel-mode queue's work as a `NOTIFY` packet;
/// when it executes, its interrupt record makes the module write `value` to the fence from the
/// CPU, which then completes the waits it satisfies like `SIGNAL_FENCE` (CPU waits, GPU waits
/// held by the module). Errors as `QUEUE_WAIT_FENCE`, plus `EINVAL` for a fence that is not
/// monitored; the 32-bit window is checked against the value when the call is made.
pub const IOCTL_QUEUE_SIGNAL_FENCE: u32 = iowr(0x1d, size_of::<QueueFenceOp>());

/// `CREATE_FENCE` kinds (`fence::FenceKind` values).
pub const FENCE_KIND_DEFAULT: u32 = 1;
/// INTRA_GPU: values in device memory; CPU wait and signal refused (`EPERM`).
pub const FENCE_KIND_INTRA_GPU: u32 = 2;
/// Monitored (WDDM 2.0) fence.
pub const FENCE_KIND_MONITORED: u32 = 3;
/// `CREATE_FENCE` flag: shareable (its values get pages of their own).
pub const FENCE_SHAREABLE: u32 = 1 << 0;
/// `CREATE_FENCE` flag: a cross-adapter fence (XAD-01), shareable, whose exported fd opens it
/// on another Belfry device with `IMPORT_FENCE` (no `EXDEV`). Kind DEFAULT (a cross-adapter
/// native fence; INTRA_GPU is refused with `EINVAL`, XAD-02) or MONITORED (a cross-adapter
/// monitored fence, opened as a native fence on a native device, XAD-11). One CurrentValue page
/// in system memory is mapped on every device it is opened on (XAD-03); each native device's
/// MonitoredValue is held at 0 (XAD-05); a change seen on one device is propagated to the others
/// by the module (XAD-07, XAD-08). On a device without native fences it opens as a monitored
/// fence (XAD-10); on a kernel-mode queue its GPU waits are held by the module and its GPU
/// signals are software signals (XAD-12..14).
pub const FENCE_CROSS_ADAPTER: u32 = 1 << 1;

/// `XAD_INFO`: how a cross-adapter fence is open on this device (tests and tools); `EINVAL` for
/// a fence that is not cross-adapter.
pub const IOCTL_XAD_INFO: u32 = iowr(0x28, size_of::<XadInfo>());

/// `XAD_INFO` (all but `handle` are `out`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XadInfo {
    /// Fence handle.
    pub handle: u32,
    /// 1 when it is a native fence on this device, 0 when a monitored one (XAD-10, XAD-11).
    pub native: u32,
    /// Bus (guest physical) address of the one CurrentValue page, as this device's GPU page
    /// tables map it (XAD-03).
    pub current_address: u64,
    /// This device's MonitoredValue: 0 while cross-adapter (XAD-05); UINT64_MAX when monitored.
    pub monitored_value: u64,
    /// Devices it is open on.
    pub devices: u32,
    /// Zero.
    pub pad: u32,
    /// Notification-only updates this device received for it (XAD-07).
    pub notifications: u64,
    /// Changes of its CurrentValue the module propagated (fence-wide).
    pub propagations: u64,
}
const _: () = assert!(size_of::<XadInfo>() == 48);

/// `CREATE_FENCE`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateFence {
    /// Context whose address space maps the fence.
    pub context: u32,
    /// `FENCE_KIND_*`.
    pub kind: u32,
    /// `FENCE_*` flags.
    pub flags: u32,
    /// out: fence handle.
    pub handle: u32,
    /// Initial CurrentValue.
    pub initial_value: u64,
    /// out: GPU VA of CurrentValue in the context's address space (for signal/wait packets).
    pub gpu_va: u64,
    /// out: mmap offset of the read-only page holding CurrentValue (0 for INTRA_GPU).
    pub mmap_offset: u64,
    /// out: byte offset of CurrentValue in that page (non-shared fences are packed).
    pub page_offset: u32,
    /// Zero.
    pub pad: u32,
}
const _: () = assert!(size_of::<CreateFence>() == 48);

/// `SIGNAL_FENCE` / `WAIT_FENCE`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FenceOp {
    /// Fence handle.
    pub handle: u32,
    /// Zero.
    pub pad: u32,
    /// Value to signal, or to wait for (CurrentValue ≥ value).
    pub value: u64,
    /// Wait timeout in nanoseconds (0: do not sleep); ignored by signal.
    pub timeout_ns: u64,
}
const _: () = assert!(size_of::<FenceOp>() == 24);

/// `FENCE_INFO` (all but `handle` are `out`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FenceInfo {
    /// Fence handle.
    pub handle: u32,
    /// CPU waits pending on it.
    pub pending_waits: u32,
    /// CurrentValue.
    pub current_value: u64,
    /// MonitoredValue (UINT64_MAX when nobody waits).
    pub monitored_value: u64,
    /// Global handle the device knows it by.
    pub global_handle: u64,
    /// Where CurrentValue lives: [`FENCE_SEGMENT_SYSTEM`] or [`FENCE_SEGMENT_VRAM`] (the
    /// registration the device was given).
    pub current_segment: u32,
    /// Where MonitoredValue lives, likewise; 0 for a MONITORED fence (it has none). A DEFAULT
    /// fence reports [`FENCE_SEGMENT_VRAM`] in its optimized form (NF-13), which changes
    /// nothing else the library sees (debugging only).
    pub monitored_segment: u32,
}
const _: () = assert!(size_of::<FenceInfo>() == 40);

/// `EXPORT_FENCE`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportFence {
    /// Fence handle (a `FENCE_SHAREABLE` DEFAULT fence, created or imported).
    pub handle: u32,
    /// out: the file descriptor (close-on-exec).
    pub fd: i32,
}
const _: () = assert!(size_of::<ExportFence>() == 8);

/// `IMPORT_FENCE`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImportFence {
    /// A file descriptor from `EXPORT_FENCE` (possibly received from another process).
    pub fd: i32,
    /// Context whose address space maps the fence.
    pub context: u32,
    /// out: local fence handle.
    pub handle: u32,
    /// Zero.
    pub pad: u32,
    /// out: GPU VA of CurrentValue in the context's address space.
    pub gpu_va: u64,
    /// out: mmap offset of the read-only page holding CurrentValue.
    pub mmap_offset: u64,
    /// out: byte offset of CurrentValue in that page (0: shared fences have pages of their own).
    pub page_offset: u32,
    /// Zero.
    pub pad2: u32,
}
const _: () = assert!(size_of::<ImportFence>() == 40);

/// `WAIT_FENCE_EVENTFD`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FenceEventWait {
    /// Fence handle (not INTRA_GPU: `EPERM`).
    pub handle: u32,
    /// An eventfd of the caller; the module adds 1 to it once CurrentValue ≥ `value` (at once
    /// if it already is). When the fence handle is destroyed first, the module adds 1 as well
    /// (so a poll loop wakes; the caller tells the two apart by the fence being gone). The
    /// wait is dropped unsignaled by `CANCEL_FENCE_EVENTFD` or when the device file is closed.
    pub eventfd: i32,
    /// Value to wait for.
    pub value: u64,
}
const _: () = assert!(size_of::<FenceEventWait>() == 16);

/// `FENCE_DEBUG` (all `out`; device-wide unless said otherwise).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FenceDebug {
    /// Live global objects of shared fences.
    pub global_fences: u32,
    /// Live local handles on shared fences (creator's and importers').
    pub local_handles: u32,
    /// `CREATE_FENCE` fences registered with the device (a shared fence once, by its global
    /// handle).
    pub registered_fences: u32,
    /// Blocking CPU waits pending (`WAIT_FENCE`, `WAIT_PROGRESS`).
    pub cpu_waits: u32,
    /// Eventfd waits pending.
    pub event_waits: u32,
    /// Most entries one `UPDATE_MONITORED_VALUES` of the eventfd path carried.
    pub largest_batch: u32,
    /// Eventfds signaled.
    pub event_signals: u64,
    /// `UPDATE_MONITORED_VALUES` commands sent by the eventfd path.
    pub monitored_updates: u64,
    /// Of those, commands carrying more than one fence.
    pub batched_updates: u64,
}
const _: () = assert!(size_of::<FenceDebug>() == 48);

/// `QUEUE_WAIT_FENCE` and `QUEUE_SIGNAL_FENCE`: a fence operation queued on a kernel-mode
/// queue. `QUEUE_WAIT_FENCE`: the queue's later work runs only once `fence` reaches `value`. The call
/// records the dependency and returns at once (FEN-13); `SUBMIT`s that follow are accepted
/// and run in order after the wait (FEN-14). A native fence (DEFAULT, INTRA_GPU) becomes a
/// `FENCE_WAIT` packet on the queue's ring: the GPU waits, no CPU is involved. A MONITORED
/// fence has no GPU-side wait (FEN-15): the module holds the later submissions on the CPU and
/// gives them to the device when the value is reached, by a CPU signal (`SIGNAL_FENCE`) or by
/// a GPU signal seen in the interrupt path (the interrupt thread re-reads the fences that have
/// pending GPU waits after every monitored-fence interrupt). Held work counts as queued work:
/// `release` waits for it like for any submission and, when it never runs, suspends the
/// context and drops it. While work is held, the ring room it will need is reserved: `SUBMIT`
/// gives `EBUSY` once the ring could not take it all.
///
/// Errors: `EPERM` on a user-mode-submission queue (NF-21: they cannot use monitored fences;
/// for a native fence they put the `FENCE_WAIT` in their own stream), `ENOENT` unknown queue or
/// fence, `EINVAL` a fence of another context or nonzero padding, `ERANGE` a value outside the
/// 32-bit window (see below), `EBUSY` the ring has no room for a `FENCE_WAIT` entry or the
/// queue already holds 64 items (waits and submissions) behind its waits.
///
/// The 32-bit mode (`CAPS.no_64bit_atomics`, FEN-07, FEN-08): a device that cannot update
/// 64-bit values atomically has no native fences, and its monitored fences hold 32-bit values
/// (the GPU stores the low half of a `MONITORED_FENCE_SIGNAL` value; the high half of the
/// value reads 0). Comparisons wrap (`fence::is_signaled32`): a wait for V is satisfied once
/// (current − V) mod 2^32 ≤ UINT_MAX/2, so signals and waits keep their order across
/// 0xFFFF_FFFF → 0. Our rule for FEN-08, whose reference leaves the report open: a value
/// above 0xFFFF_FFFF, a `SIGNAL_FENCE` value that is not at or ahead of the last signaled
/// value by at most UINT_MAX/2 (`fence::in_window32`), and a wait value (`WAIT_FENCE`,
/// `QUEUE_WAIT_FENCE`) that is neither reached nor within that window are refused with
/// `ERANGE`, as is a `CREATE_FENCE` initial value above 0xFFFF_FFFF.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueFenceOp {
    /// Kernel-mode queue.
    pub queue: u32,
    /// Fence (same context as the queue).
    pub fence: u32,
    /// Value to wait for (CurrentValue ≥ value), or to signal.
    pub value: u64,
}
const _: () = assert!(size_of::<QueueFenceOp>() == 16);

/// `QUERY_CAPS` (all `out`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueryCaps {
    /// [`UAPI_VERSION`].
    pub uapi_version: u32,
    /// The device's `CAPS` register bits (`regs::CAPS`), masked by module parameters.
    pub caps: u32,
    /// Physical doorbells.
    pub doorbell_count: u32,
    /// Doorbell memory size in bytes (CAP-12): one page, 4096.
    pub doorbell_size: u32,
    /// Engines.
    pub engine_count: u32,
    /// Bit n: engine n supports user-mode submission (CAP-11).
    pub user_mode_submission_engines: u32,
    /// Bit n: engine n can write fences itself.
    pub fence_write_engines: u32,
    /// Packing stride of non-shared fence values, bytes (CAP-05).
    pub fence_stride: u32,
    /// Device memory size.
    pub vram_size: u64,
    /// Largest allocation.
    pub max_allocation: u64,
    /// Version of the native-fence capabilities the module negotiated at probe (CAP-01, CAP-03):
    /// [`NATIVE_FENCE_CAPS_VERSION`] while the module parameter `native_fences` was on when
    /// the device was bound, 0 when it was off (the module then offers no native fence).
    pub native_fence_caps_version: u32,
    /// `CAPS_FLAG_*`.
    pub flags: u32,
    /// Where fence values live (CAP-05): `FENCE_SEGMENT_*` bits; 0 without native fences.
    pub fence_segments: u32,
    /// The device's `TEST_INJECTIONS` register (`regs::TEST_INJECTIONS`): test-only faults it
    /// was started with; zero on a normal device.
    pub test_injections: u32,
}
const _: () = assert!(size_of::<QueryCaps>() == 64);

/// The native-fence capabilities version this module speaks (CAP-03).
pub const NATIVE_FENCE_CAPS_VERSION: u32 = 1;
/// `QueryCaps.flags`: native GPU fences are supported (CAP-07): the feature was on at probe
/// and the device has `CAPS.native_fence` (CAP-02).
pub const CAPS_FLAG_NATIVE_GPU_FENCE_SUPPORTED: u32 = 1 << 0;
/// `QueryCaps.flags`: every native fence's CurrentValue and MonitoredValue are mapped in the
/// system (CMP) address space, and those addresses are what the device is given (CAP-05, CAP-06).
pub const CAPS_FLAG_MAP_TO_GPU_SYSTEM_PROCESS: u32 = 1 << 1;
/// `QueryCaps.fence_segments`: fence values in system memory (DEFAULT fences).
pub const FENCE_SEGMENT_SYSTEM: u32 = 1 << 0;
/// `QueryCaps.fence_segments`: fence values in device memory (INTRA_GPU fences).
pub const FENCE_SEGMENT_VRAM: u32 = 1 << 1;

/// `CREATE_CONTEXT`: a hardware context with its own GPU address space.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateContext {
    /// Reserved, zero.
    pub flags: u32,
    /// out: context handle.
    pub handle: u32,
}
const _: () = assert!(size_of::<CreateContext>() == 8);

/// `ALLOC` flag: the GPU may only read the allocation.
pub const ALLOC_GPU_READ_ONLY: u32 = 1 << 0;

/// `ALLOC`: GPU memory mapped into a context's GPU address space and mmappable by the process.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Alloc {
    /// Context whose address space maps it.
    pub context: u32,
    /// `ALLOC_*`.
    pub flags: u32,
    /// Bytes (rounded up to pages).
    pub size: u64,
    /// out: handle.
    pub handle: u32,
    /// Zero.
    pub pad: u32,
    /// out: GPU VA in the context's address space.
    pub gpu_va: u64,
    /// out: mmap offset of the CPU mapping.
    pub mmap_offset: u64,
}
const _: () = assert!(size_of::<Alloc>() == 40);

/// `CREATE_QUEUE` flag: a user-mode-submission queue (doorbell; refuses `SUBMIT`). Refused
/// (`EINVAL`) on a device without native fences (`CAPS.no_64bit_atomics`): a user-mode queue
/// synchronizes only through native fences, its progress fence among them (NF-21).
pub const QUEUE_USER_MODE_SUBMISSION: u32 = 1 << 0;
/// `CREATE_QUEUE` flag (user-mode queues only): the module makes the ring and ring-control
/// allocations itself (`ring` and `ring_control` must be 0), places them in VRAM (system memory
/// when VRAM is full) and returns their mmap offsets (`ring_mmap_offset`,
/// `ring_control_mmap_offset`). The ring is at most one page (`ring_entries` ≤ 256). The CPU
/// mapping follows the allocation: the VRAM BAR page while it is resident (each access a trapped
/// BAR access under QEMU: slow, correct), its system page after an eviction; it is moved (the
/// access faulting on the new page) while the module pages it. Only D3 entry on a device that
/// loses VRAM moves them (PWR-02 step 3, after the doorbells are disconnected) and D3 exit
/// brings them back before any doorbell reconnects (PWR-04); the memory manager never evicts
/// them otherwise. After `DESTROY_QUEUE` an access to the old mappings raises `SIGBUS`.
pub const QUEUE_RING_IN_VRAM: u32 = 1 << 1;
/// Largest ring of a [`QUEUE_RING_IN_VRAM`] queue (one page of 16-byte entries).
pub const VRAM_RING_MAX_ENTRIES: u32 = 256;

/// `CREATE_QUEUE`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateQueue {
    /// Context.
    pub context: u32,
    /// Engine.
    pub engine: u32,
    /// Priority 0..=3 (`engine::PRIORITY_MAX`); above `engine::PRIORITY_NORMAL` (1) only for a
    /// caller with `CAP_SYS_NICE` (`EACCES` otherwise), since strict priority lets a
    /// higher-priority queue starve every normal one on its engine.
    pub priority: u32,
    /// `QUEUE_*`.
    pub flags: u32,
    /// Ring allocation (user-mode queues; the module owns kernel-mode rings).
    pub ring: u32,
    /// Ring entries (power of two); for kernel-mode queues, of the module-owned ring.
    pub ring_entries: u32,
    /// Ring-control allocation (user-mode queues). Both ring allocations stay referenced while
    /// the queue or its doorbell exists (RING-03), whatever the caller frees.
    pub ring_control: u32,
    /// out: queue handle.
    pub handle: u32,
    /// out: GPU VA of the progress fence's CurrentValue, for the signal packet ending each
    /// command buffer.
    pub progress_fence_va: u64,
    /// out: mmap offset of a read-only page holding the progress CurrentValue at offset 0.
    pub progress_mmap_offset: u64,
    /// out: the progress fence's global handle: the `log_handle` the library writes into the
    /// progress signal of each user-mode command buffer (its signal-log entry), so that a
    /// per-queue interrupt record releases progress waits from the log (IRQ-10, LOG-05).
    pub progress_log_handle: u64,
    /// out ([`QUEUE_RING_IN_VRAM`]): mmap offset of the ring (one page, read-write).
    pub ring_mmap_offset: u64,
    /// out ([`QUEUE_RING_IN_VRAM`]): mmap offset of the ring control (one page, read-write).
    pub ring_control_mmap_offset: u64,
}
const _: () = assert!(size_of::<CreateQueue>() == 72);

/// `CREATE_DOORBELL`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateDoorbell {
    /// User-mode queue.
    pub queue: u32,
    /// out: doorbell handle.
    pub handle: u32,
    /// out: mmap offset of the doorbell page (the dummy page while disconnected).
    pub doorbell_offset: u64,
    /// out: mmap offset of the read-only status page ([`DoorbellStatus`] as a `u32` at offset 0).
    pub status_offset: u64,
    /// out: mmap offset of the read/write LastQueuedValue page (`u64` at offset 0).
    pub last_queued_offset: u64,
}
const _: () = assert!(size_of::<CreateDoorbell>() == 32);

/// Doorbell status values, read by the library from the status page.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoorbellStatus {
    /// Connected: a ring reaches the device.
    Connected = 1,
    /// Connected, and the module wants `NOTIFY_WORK_SUBMISSION` after each ring. The rule: a
    /// connected doorbell reads this while its queue's context is suspended (the device will
    /// not run the work, so the module must learn that the context has work pending); it reads
    /// CONNECTED again on resume. The disconnected statuses take precedence.
    ConnectedNotify = 2,
    /// Disconnected (victimized, power, suspend): reconnect and submit again.
    DisconnectedRetry = 3,
    /// Disconnected for good (device loss, fault): destroy and re-create the queue.
    DisconnectedAbort = 4,
}

impl TryFrom<u32> for DoorbellStatus {
    type Error = u32;
    fn try_from(raw: u32) -> Result<Self, u32> {
        match raw {
            1 => Ok(DoorbellStatus::Connected),
            2 => Ok(DoorbellStatus::ConnectedNotify),
            3 => Ok(DoorbellStatus::DisconnectedRetry),
            4 => Ok(DoorbellStatus::DisconnectedAbort),
            other => Err(other),
        }
    }
}

/// `SUBMIT`: kernel-mode submission of `size` bytes at `offset` of allocation `cmdbuf`; the
/// module appends it to the queue's kernel-owned ring followed by the progress-fence signal of
/// `progress_value`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Submit {
    /// Kernel-mode queue.
    pub queue: u32,
    /// Command-buffer allocation.
    pub cmdbuf: u32,
    /// Offset in it (4-byte aligned).
    pub offset: u32,
    /// Bytes (multiple of 4).
    pub size: u32,
    /// Progress value this submission signals when done.
    pub progress_value: u64,
}
const _: () = assert!(size_of::<Submit>() == 24);

/// `WAIT_PROGRESS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitProgress {
    /// Queue.
    pub queue: u32,
    /// Zero.
    pub pad: u32,
    /// Value to wait for.
    pub value: u64,
    /// Timeout in nanoseconds (0: do not sleep).
    pub timeout_ns: u64,
}
const _: () = assert!(size_of::<WaitProgress>() == 24);

/// `DEBUG_STATS` (all `out`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DebugStats {
    /// Interrupt records handled, by `irq::cause` bit index of their kind (NOTIFY records count
    /// under MONITORED_FENCE; unknown kinds at index 7).
    pub interrupts_by_cause: [u64; 8],
    /// Live contexts on the device.
    pub contexts: u32,
    /// Live queues.
    pub queues: u32,
    /// Live allocations.
    pub allocations: u32,
    /// Live doorbells.
    pub doorbells: u32,
    /// GPU pages mapped in all address spaces.
    pub gpu_pages: u64,
    /// ioctls made by the calling file.
    pub ioctls_by_caller: u64,
    /// Context faults seen.
    pub faults: u64,
    /// Files released on the normal path: every queue reached its last queued progress value.
    pub normal_terminations: u64,
    /// Files released on the abnormal path: a killed process, or a drain that timed out.
    pub abnormal_terminations: u64,
    /// `TERM_STEP_*` codes of the last release that had queues, in order, 0-terminated.
    pub last_termination_steps: [u8; 8],
    /// GPU pages mapped on the device (as `gpu_pages`) when each of those steps was recorded
    /// (a wait step when the wait ended, the others as they began).
    pub last_termination_pages: [u64; 8],
    /// Queues of the last such release whose progress was below its target when the drain
    /// began (work still pending at the exit).
    pub last_termination_waited: u32,
    /// Queues of the last such release whose drain timed out.
    pub last_termination_timed_out: u32,
    /// Releases now in their drain wait.
    pub terminations_draining: u32,
    /// Records the device dropped because the interrupt ring was full (as `IRQ_DEBUG`).
    pub ring_overflows: u32,
    /// GPU pages mapped in the system (CMP) address space (CAP-06: fence values live there).
    pub system_gpu_pages: u64,
}
const _: () = assert!(size_of::<DebugStats>() == 216);

/// Termination step: the process's doorbells are disconnected (TERM-01).
pub const TERM_STEP_DISCONNECT: u8 = 1;
/// Termination step: every queue reached its last queued progress value (TERM-02).
pub const TERM_STEP_WAIT_SATISFIED: u8 = 2;
/// Termination step: the wait for the last queued values timed out.
pub const TERM_STEP_WAIT_TIMED_OUT: u8 = 3;
/// Termination step: the process's device is marked in error (TERM-04).
pub const TERM_STEP_MARK_ERROR: u8 = 4;
/// Termination step: its contexts are suspended (TERM-05).
pub const TERM_STEP_SUSPEND: u8 = 5;
/// Termination step: its objects are destroyed (TERM-03).
pub const TERM_STEP_DESTROY: u8 = 6;

/// `READ_TIMELINE`: the module's fence-operation timeline (native-fence logs turned into
/// events, plus the CPU time kernel-mode `SUBMIT` queued each logged operation), read from a
/// cursor; the module first collects every queue's new log entries. A caller with `CAP_PERFMON`
/// or `CAP_SYS_ADMIN` reads every event; any other caller only its own (thread events of its
/// process, log events of its file's queues): the cursor passes over the others.
pub const IOCTL_READ_TIMELINE: u32 = iowr(0x1e, size_of::<ReadTimeline>());
/// `IRQ_DEBUG`: counters of the native-fence interrupt paths and the fence logs (all `out`).
pub const IOCTL_IRQ_DEBUG: u32 = iowr(0x1f, size_of::<IrqDebug>());
/// `WAKE_PATH`: when the guest-side stages of the last interrupt-driven wake-up ran (all `out`),
/// for the wake-path breakdown of `belfry-bench`.
pub const IOCTL_WAKE_PATH: u32 = iowr(0x38, size_of::<WakePath>());

/// `WAKE_PATH` (all `out`): `CLOCK_MONOTONIC` nanoseconds (the clock of `clock_gettime`), 0
/// until the stage first ran. A stage older than the one before it did not run for the last
/// wake-up (say, the waiter was released by the hard interrupt handler, not the thread).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakePath {
    /// The hard interrupt handler consumed a fence record (native, monitored or NOTIFY).
    pub hard_irq_ns: u64,
    /// The threaded interrupt handler started.
    pub thread_ns: u64,
    /// A `WAIT_FENCES` (or `WAIT_FENCE`) that slept returned satisfied, in the kernel, after
    /// its sleeper ran again.
    pub woken_ns: u64,
    /// Interrupts received, all vectors (as `DEBUG_STATS`).
    pub interrupts: u64,
    /// The path that released the waiter (the threaded handler, or a CPU signal) woke the
    /// sleepers; the threaded handler's own work before it is `released_ns - thread_ns`.
    pub released_ns: u64,
    /// The CPU the threaded handler last ran on.
    pub thread_cpu: u32,
    /// The CPU the waiter of `woken_ns` ran on when it woke.
    pub woken_cpu: u32,
    /// CPU waits that ended in their bounded spin (`wait_spin_us`), before arming an interrupt.
    pub spin_hits: u32,
    /// CPU waits that spun the whole budget and went on to sleep.
    pub spin_misses: u32,
}
const _: () = assert!(size_of::<WakePath>() == 56);

/// `MAILBOX_TIMING`: the module's stamps of its last mailbox command's round trip and its
/// mailbox counters (all `out`), for the per-path mailbox figures of `belfry-bench`.
pub const IOCTL_MAILBOX_TIMING: u32 = iowr(0x36, size_of::<MailboxTiming>());

/// [`MailboxTiming::path`]: the command went through the BAR0 mailbox (three register writes).
pub const MAILBOX_PATH_BAR0: u32 = 0;
/// [`MailboxTiming::path`]: the command went through the command ring (an entry and a store of
/// the tail to the ring's doorbell page).
pub const MAILBOX_PATH_RING: u32 = 1;

/// `MAILBOX_TIMING` (all `out`): `CLOCK_MONOTONIC` nanoseconds of the last mailbox command
/// that completed, 0 before the first.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MailboxTiming {
    /// The argument block was written; the submission (ring entry and doorbell, or BAR0
    /// writes) starts.
    pub submit_ns: u64,
    /// The submission's writes returned (their guest cost: trapped or not).
    pub written_ns: u64,
    /// The hard interrupt handler saw the completion.
    pub irq_ns: u64,
    /// The thread that sent the command ran again with the completion.
    pub done_ns: u64,
    /// Its opcode (`mailbox::Opcode`).
    pub opcode: u32,
    /// [`MAILBOX_PATH_BAR0`] or [`MAILBOX_PATH_RING`].
    pub path: u32,
    /// Commands completed since the device was bound.
    pub commands: u64,
    /// Command-ring errors (`CMD_RING_ERROR`) the module found while waiting for a command,
    /// each failing that command at once (the mailbox then wedges).
    pub ring_errors: u32,
    /// The last one's `cmdring::RingError`, 0 for none.
    pub last_ring_error: u32,
}
const _: () = assert!(size_of::<MailboxTiming>() == 56);

/// `READ_TIMELINE`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadTimeline {
    /// In: user address of an array of `capacity` [`TimelineEntry`].
    pub entries: u64,
    /// In: room in `entries` (at most [`TIMELINE_MAX_READ`]).
    pub capacity: u32,
    /// Out: entries written.
    pub count: u32,
    /// In: sequence number of the first entry wanted; out: the one after the last written.
    pub cursor: u64,
    /// Out: entries from `cursor` on that the module no longer keeps.
    pub lost: u64,
}
const _: () = assert!(size_of::<ReadTimeline>() == 32);

/// Most entries one `READ_TIMELINE` returns.
pub const TIMELINE_MAX_READ: u32 = 256;

/// [`TimelineEntry::operation`]: a kernel-mode submission queued a GPU wait (CPU time).
pub const TIMELINE_WAIT_QUEUED: u32 = 1;
/// A kernel-mode submission queued a GPU signal (CPU time).
pub const TIMELINE_SIGNAL_QUEUED: u32 = 2;
/// A signal executed (signal log; `end_gpu`).
pub const TIMELINE_SIGNAL_EXECUTED: u32 = 3;
/// A wait was unblocked (wait log; `observed_gpu` and `end_gpu`).
pub const TIMELINE_WAIT_UNBLOCKED: u32 = 4;
/// The log of `queue` overflowed: entries before `log_index` were lost (`value`: how many).
pub const TIMELINE_LOST: u32 = 5;

/// Thread events (the codes below): what a guest thread did, at `cpu_ns` (the clock of the
/// `*_QUEUED` events). `log_index` holds the thread's id (tid), `observed_gpu` its process id
/// (tgid), `end_gpu` the detail each code names; `queue` is [`crate::irq::NONE`] unless named.
/// A CPU wait (`WAIT_FENCE`, `WAIT_PROGRESS`) started: `fence` (the device's handle), `value`.
pub const TIMELINE_CPU_WAIT_START: u32 = 6;
/// A CPU wait ended: `fence`, `value`; `end_gpu`: 0 when the fence reached the value, else
/// the errno it ended with (`ETIMEDOUT`, `EINTR`, …).
pub const TIMELINE_CPU_WAIT_END: u32 = 7;
/// A CPU signal (`SIGNAL_FENCE`): `fence`, `value`.
pub const TIMELINE_CPU_SIGNAL: u32 = 8;
/// An eventfd wait completed (its eventfd was signaled): `fence`, `value`.
pub const TIMELINE_EVENTFD_SIGNALED: u32 = 9;
/// A doorbell's status changed: `queue`, `value` the new [`DoorbellStatus`], `end_gpu`: 1
/// connect, 2 disconnect (`DISCONNECT_DOORBELL`), 3 victimized (its slot given to another
/// queue), 4 aborted (the file released).
pub const TIMELINE_DOORBELL: u32 = 10;
/// A kernel-mode `SUBMIT` queued work: `queue`, `fence` the progress fence's handle, `value`
/// the value it will signal.
pub const TIMELINE_SUBMIT: u32 = 11;
/// [`TIMELINE_DOORBELL`] `end_gpu`: connected.
pub const TIMELINE_DOORBELL_CONNECT: u64 = 1;
/// Disconnected by `DISCONNECT_DOORBELL`.
pub const TIMELINE_DOORBELL_DISCONNECT: u64 = 2;
/// Victimized: its slot went to another queue.
pub const TIMELINE_DOORBELL_VICTIMIZE: u64 = 3;
/// Aborted: its file was released.
pub const TIMELINE_DOORBELL_ABORT: u64 = 4;

/// One timeline event.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimelineEntry {
    /// Sequence number (device-wide, increasing).
    pub seq: u64,
    /// Fence handle as logged (the submitter's handle from the packet), or 0 with
    /// [`TIMELINE_FLAG_FOREIGN_FENCE`] when the queue's context cannot name that fence.
    pub fence: u64,
    /// Fence value.
    pub value: u64,
    /// GPU time the wait was first seen (waits), else 0.
    pub observed_gpu: u64,
    /// GPU time the signal executed or the wait was unblocked, else 0.
    pub end_gpu: u64,
    /// CPU time (ns since the device was bound) of a `*_QUEUED` event, else 0.
    pub cpu_ns: u64,
    /// Device queue id.
    pub queue: u32,
    /// `TIMELINE_*`.
    pub operation: u32,
    /// Free-running log index of the operation (joins `*_QUEUED` with the log events).
    pub log_index: u32,
    /// `TIMELINE_FLAG_*`.
    pub flags: u32,
}
const _: () = assert!(size_of::<TimelineEntry>() == 64);

/// [`TimelineEntry::flags`]: the packet logged a fence handle its queue's context cannot name
/// (no fence of that handle was created, imported or opened in it, nor is it the queue's
/// progress fence): a log entry is the submitter's word, so the module shows `fence` as 0
/// rather than attribute the operation to another process's fence.
pub const TIMELINE_FLAG_FOREIGN_FENCE: u32 = 1 << 0;

/// [`IrqDebug::released`] index: waits released by exact (fence-handle) records.
pub const PATH_EXACT: usize = 0;
/// Waits released by per-queue records (that queue's signal log).
pub const PATH_PER_QUEUE: usize = 1;
/// Waits released by a scan of all waits for a NULL record.
pub const PATH_SCAN_ALL: usize = 2;
/// Waits released by a scan of all waits after a log overflow.
pub const PATH_OVERFLOW: usize = 3;

/// `IRQ_DEBUG` (all `out`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IrqDebug {
    /// Native-fence records naming a fence (exact form).
    pub exact_records: u64,
    /// Native-fence records naming a queue (per-queue form).
    pub per_queue_records: u64,
    /// Native-fence records naming neither (NULL: scan all).
    pub null_records: u64,
    /// Scans of all pending waits, any reason.
    pub scans: u64,
    /// Log overflows detected (WraparoundCount against the cached copy).
    pub overflows: u64,
    /// Per-queue records whose signal was not in the queue's log (then: a scan).
    pub unlogged: u64,
    /// Scans that also examined legacy (monitored-fence) waits.
    pub legacy_scans: u64,
    /// `FLUSH_LOGS` commands issued.
    pub log_flushes: u64,
    /// Log entries read.
    pub log_entries: u64,
    /// CPU waits released, by `PATH_*`.
    pub released: [u64; 4],
    /// Fence-log buffers the module has given the device (two per queue).
    pub log_buffers: u32,
    /// Records the device dropped because the interrupt ring was full (the ring header's count;
    /// each drop is followed by a scan-all record, so no wait is lost, but a `NOTIFY` record's
    /// token is).
    pub ring_overflows: u32,
}
const _: () = assert!(size_of::<IrqDebug>() == 112);

/// Every ioctl of this interface with its name (for fuzzers, tracers and decoders); a unit test
/// checks that no `IOCTL_*` constant is missing.
pub const IOCTLS: &[(&str, u32)] = &[
    ("QUERY_CAPS", IOCTL_QUERY_CAPS),
    ("CREATE_CONTEXT", IOCTL_CREATE_CONTEXT),
    ("DESTROY_CONTEXT", IOCTL_DESTROY_CONTEXT),
    ("ALLOC", IOCTL_ALLOC),
    ("FREE", IOCTL_FREE),
    ("CREATE_QUEUE", IOCTL_CREATE_QUEUE),
    ("DESTROY_QUEUE", IOCTL_DESTROY_QUEUE),
    ("CREATE_DOORBELL", IOCTL_CREATE_DOORBELL),
    ("DESTROY_DOORBELL", IOCTL_DESTROY_DOORBELL),
    ("CONNECT_DOORBELL", IOCTL_CONNECT_DOORBELL),
    ("NOTIFY_WORK", IOCTL_NOTIFY_WORK),
    ("SUBMIT", IOCTL_SUBMIT),
    ("WAIT_PROGRESS", IOCTL_WAIT_PROGRESS),
    ("SUSPEND_CONTEXT", IOCTL_SUSPEND_CONTEXT),
    ("RESUME_CONTEXT", IOCTL_RESUME_CONTEXT),
    ("DEBUG_STATS", IOCTL_DEBUG_STATS),
    ("CREATE_FENCE", IOCTL_CREATE_FENCE),
    ("DESTROY_FENCE", IOCTL_DESTROY_FENCE),
    ("SIGNAL_FENCE", IOCTL_SIGNAL_FENCE),
    ("WAIT_FENCE", IOCTL_WAIT_FENCE),
    ("FENCE_INFO", IOCTL_FENCE_INFO),
    ("DISCONNECT_DOORBELL", IOCTL_DISCONNECT_DOORBELL),
    ("EXPORT_FENCE", IOCTL_EXPORT_FENCE),
    ("IMPORT_FENCE", IOCTL_IMPORT_FENCE),
    ("WAIT_FENCE_EVENTFD", IOCTL_WAIT_FENCE_EVENTFD),
    ("CANCEL_FENCE_EVENTFD", IOCTL_CANCEL_FENCE_EVENTFD),
    ("FENCE_DEBUG", IOCTL_FENCE_DEBUG),
    ("QUEUE_WAIT_FENCE", IOCTL_QUEUE_WAIT_FENCE),
    ("QUEUE_SIGNAL_FENCE", IOCTL_QUEUE_SIGNAL_FENCE),
    ("READ_TIMELINE", IOCTL_READ_TIMELINE),
    ("IRQ_DEBUG", IOCTL_IRQ_DEBUG),
    ("WAKE_PATH", IOCTL_WAKE_PATH),
    ("MAILBOX_TIMING", IOCTL_MAILBOX_TIMING),
    ("RECOVERY_DEBUG", IOCTL_RECOVERY_DEBUG),
    ("POWER_DEBUG", IOCTL_POWER_DEBUG),
    ("DEVICE_POWER", IOCTL_DEVICE_POWER),
    ("XAD_INFO", IOCTL_XAD_INFO),
    ("WAIT_FENCES", super::uapi_sync::IOCTL_WAIT_FENCES),
    ("CONTEXT_STATUS", super::uapi_sync::IOCTL_CONTEXT_STATUS),
    ("EXPORT_SYNC_FILE", super::uapi_sync::IOCTL_EXPORT_SYNC_FILE),
    ("CREATE_ALLOCATION", IOCTL_CREATE_ALLOCATION),
    ("DESTROY_ALLOCATION", IOCTL_DESTROY_ALLOCATION),
    ("ALLOCATION_RW", IOCTL_ALLOCATION_RW),
    ("SUBMIT_SPLIT", IOCTL_SUBMIT_SPLIT),
    ("MM_STATS", IOCTL_MM_STATS),
    ("TEARDOWN_DEBUG", IOCTL_TEARDOWN_DEBUG),
    ("IRQ_MODERATION", IOCTL_IRQ_MODERATION),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_encode_direction_size_and_type() {
        assert_eq!(IOCTL_QUERY_CAPS >> 30, 3);
        assert_eq!((IOCTL_QUERY_CAPS >> 16) & 0x3fff, 64);
        assert_eq!((IOCTL_ALLOC >> 8) & 0xff, u32::from(b'B'));
        let all = IOCTLS.iter().map(|&(_, code)| code);
        // Numbers are handed out in ranges, so they need not be dense: unique and below 0x40.
        let mut seen = 0u64;
        for a in all {
            let nr = a & 0xff;
            assert_eq!((a >> 30, (a >> 8) & 0xff), (3, u32::from(b'B')), "ioctl {a:#x}");
            assert!(nr < 64, "ioctl number {nr:#x}");
            assert_eq!(seen & (1 << nr), 0, "ioctl number {nr:#x} used twice");
            seen |= 1 << nr;
        }
    }

    #[test]
    fn doorbell_statuses_round_trip() {
        for raw in 1..=4 {
            assert_eq!(DoorbellStatus::try_from(raw).map(|s| s as u32), Ok(raw));
        }
        assert!(DoorbellStatus::try_from(0).is_err());
    }

    #[test]
    fn the_ioctl_table_names_every_ioctl_once() {
        let source = include_str!("uapi.rs")
            .lines()
            .chain(include_str!("uapi_sync.rs").lines())
            .chain(include_str!("vidmem.rs").lines());
        let declared = source
            .filter_map(|l| l.strip_prefix("pub const IOCTL_"))
            .filter(|l| l.contains(": u32 = iowr("))
            .filter_map(|l| l.split(':').next());
        let mut count = 0;
        for name in declared {
            count += 1;
            assert_eq!(IOCTLS.iter().filter(|(n, _)| *n == name).count(), 1, "IOCTLS must list {name} once");
        }
        assert_eq!(count, IOCTLS.len());
        for (i, (a, code)) in IOCTLS.iter().enumerate() {
            for (b, other) in &IOCTLS[i + 1..] {
                assert_ne!(code & 0xff, other & 0xff, "{a} and {b} share an ioctl number");
            }
        }
    }
}

/// `RECOVERY_DEBUG`: the module's hang detection and recovery counters (all `out`; device-wide
/// unless said otherwise).
pub const IOCTL_RECOVERY_DEBUG: u32 = iowr(0x2c, size_of::<RecoveryDebug>());

/// `RECOVERY_DEBUG`.
///
/// Recovery rule (ENG-01, ENG-06, DB-16): an engine with submitted, unfinished work on a
/// user-mode queue and no progress-fence advance on any of its queues for the module's
/// `hang_timeout_ms` (or a `Hung` engine-state record from the device) is reset with
/// `RESET_ENGINE`; the guilty context is lost: its doorbells go to DISCONNECTED_ABORT, new
/// queues in it are refused, and every CPU wait on its queues' progress (`WAIT_PROGRESS`,
/// blocking) ends with `ECANCELED`. The other contexts on the engine keep their work. Native
/// fences the lost context would have signalled are not signalled for it (no "signal max
/// value on reset"): a fence is not owned by one context, so waits on it keep their timeouts.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryDebug {
    /// Hangs the module's progress timeout detected.
    pub hangs_by_timeout: u32,
    /// Hangs the device reported (`Hung` engine-state records).
    pub hangs_by_device: u32,
    /// `RESET_ENGINE` commands sent.
    pub engine_resets: u32,
    /// Contexts lost to an engine reset.
    pub contexts_lost: u32,
    /// The `hang_timeout_ms` module parameter now.
    pub timeout_ms: u32,
    /// For the last hang the timeout detected: milliseconds between the engine's last progress
    /// (or the start of its pending work) and the detection.
    pub last_detect_ms: u32,
    /// Device context id of the last context lost, or `u32::MAX`.
    pub last_lost_context: u32,
    /// Device-lost recoveries (the mailbox stopped answering: every context lost, the device
    /// reset and bound again), module-wide, counted across rebinds.
    pub device_lost: u32,
}
const _: () = assert!(size_of::<RecoveryDebug>() == 32);

/// `POWER_DEBUG`: the module's engine and device power counters and its last power steps, in
/// order (all `out`, device-wide).
pub const IOCTL_POWER_DEBUG: u32 = iowr(0x2d, size_of::<PowerDebug>());

/// Most steps [`PowerDebug::steps`] keeps (the latest).
pub const POWER_STEPS: usize = 32;

/// [`PowerDebug::steps`] code: a doorbell disconnected (DISCONNECTED_RETRY) because its engine
/// goes to F1 (ENG-04 step 1).
pub const POWER_STEP_F1_DISCONNECT: u8 = 1;
/// The engine was set to F1 (ENG-04 step 2).
pub const POWER_STEP_ENGINE_F1: u8 = 2;
/// A doorbell connect found its engine in F1 and set it back to F0 first (ENG-05).
pub const POWER_STEP_ENGINE_F0: u8 = 3;
/// A doorbell was connected (after any F0 it needed).
pub const POWER_STEP_CONNECT: u8 = 4;
/// The F1 request was dropped: work arrived while the doorbells were being disconnected.
pub const POWER_STEP_F1_ABORTED: u8 = 5;

/// D3 entry step 1 (PWR-02): the module suspended the hardware contexts that were running (the
/// step's low byte: how many, at most 255).
pub const POWER_STEP_D3_SUSPEND_CONTEXTS: u8 = 6;
/// D3 entry step 2 (PWR-01, PWR-02): every connected doorbell disconnected, DISCONNECTED_RETRY
/// (low byte: how many).
pub const POWER_STEP_D3_DISCONNECT: u8 = 7;
/// D3 entry step 3 (PWR-02), only on a device that loses VRAM in D3: the allocations resident in
/// VRAM evicted to system memory (low byte: how many).
pub const POWER_STEP_D3_EVICT: u8 = 8;
/// The device was put in D3hot (the PCI core's PMCSR write).
pub const POWER_STEP_D3: u8 = 9;
/// D3 exit step 2 (PWR-04): the device is back in D0 (the PCI core's PMCSR write, its config
/// space restored).
pub const POWER_STEP_D0: u8 = 10;
/// D3 exit step 3 (PWR-04): what D3 entry evicted was made resident again (low byte: how many).
pub const POWER_STEP_D0_RESTORE: u8 = 11;
/// D3 exit step 5 (PWR-04): the contexts D3 entry suspended were resumed (low byte: how many).
pub const POWER_STEP_D0_RESUME_CONTEXTS: u8 = 12;
/// A runtime suspend was refused (`EBUSY`): work was pending, the device stays in D0.
pub const POWER_STEP_D3_REFUSED: u8 = 13;
/// D3 entry step 3, part of [`POWER_STEP_D3_EVICT`]: of the allocations evicted, the ring and
/// ring-control allocations of `QUEUE_RING_IN_VRAM` queues (low byte: how many), recorded just
/// before it.
pub const POWER_STEP_D3_EVICT_RINGS: u8 = 14;
/// D3 exit step 3, part of [`POWER_STEP_D0_RESTORE`]: of the allocations made resident again,
/// the ring and ring-control allocations (low byte: how many), recorded just before it.
pub const POWER_STEP_D0_RESTORE_RINGS: u8 = 15;
/// A system sleep (suspend-to-idle or suspend-to-RAM) began for the device: the module waited
/// for its pending work to finish (low byte: 1 if it had to wait), and the D3 entry steps follow
/// unless the device was already in D3 or the wait timed out (then [`POWER_STEP_D3_REFUSED`]
/// follows and the system sleep is refused, `EBUSY`).
pub const POWER_STEP_SYSTEM_SUSPEND: u8 = 16;
/// The system woke: the device's system resume ran (after the D3 exit steps, when the device was
/// taken back to D0 at once; low byte: 1 if it was).
pub const POWER_STEP_SYSTEM_RESUME: u8 = 17;

/// `DEVICE_POWER`: the module's device power (D-state) counters and figures (all `out`).
pub const IOCTL_DEVICE_POWER: u32 = iowr(0x2e, size_of::<DevicePower>());

/// `DEVICE_POWER`.
///
/// Device power rule (PWR-01..04): the module uses Linux runtime PM (the PCI device's standard
/// `power/` sysfs files: `control` `auto` lets it suspend, `on` — the PCI default — pins D0;
/// `autosuspend_delay_ms`). Every ioctl holds the device in D0 while it runs; the device is
/// idle when no ioctl runs and no queue has submitted work its progress has not reached. D3
/// entry: suspend every running context, disconnect every doorbell (DISCONNECTED_RETRY, the
/// mapping on the dummy page), evict VRAM allocations if the device loses VRAM in D3, then
/// D3hot. A connect (or any other ioctl) in D3 resumes it: D0, evicted allocations made
/// resident again, the ioctl's own work (the connect), then the suspended contexts resumed. The
/// steps are recorded in `POWER_DEBUG.steps` (`POWER_STEP_D3_*`, `POWER_STEP_D0*`). A system
/// sleep (suspend-to-idle) waits up to 5 s for pending work to finish (else it is refused,
/// `EBUSY`), then takes the device through the same D3 entry, and the system resume through
/// the D3 exit (`POWER_STEP_SYSTEM_SUSPEND`/`_RESUME` around them).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevicePower {
    /// Suspends completed (D0 → D3), runtime and system sleep.
    pub suspends: u32,
    /// Resumes completed (D3 → D0), runtime and system sleep.
    pub resumes: u32,
    /// Suspends refused because work was pending (runtime, or a system sleep after its wait).
    pub refused: u32,
    /// 1 while the device is in D3.
    pub d3: u32,
    /// Allocations evicted from VRAM by D3 entries, all time.
    pub evicted: u32,
    /// Allocations made resident again by D3 exits, all time.
    pub restored: u32,
    /// Contexts suspended by the last D3 entry.
    pub last_contexts: u32,
    /// Doorbells disconnected by the last D3 entry.
    pub last_doorbells: u32,
    /// The last D3 entry: nanoseconds from the runtime-suspend callback's start to the device
    /// in D3hot (the PCI core's PMCSR write and its D3hot delay included).
    pub last_suspend_ns: u64,
    /// The last D3 exit: nanoseconds from the runtime-resume callback's start to the restored
    /// allocations (the PCI core's D0 write, its delay and the config-space restore included).
    pub last_resume_ns: u64,
}
const _: () = assert!(size_of::<DevicePower>() == 48);

/// `POWER_DEBUG`.
///
/// Engine F1 rule (ENG-04, ENG-05): on the device's TransitionToF1 request the module first
/// disconnects the doorbells of every user-mode queue on that engine, publishing
/// DISCONNECTED_RETRY (the text names no status; RETRY is the one that makes the library
/// reconnect and submit again rather than re-create its queue), then sets the engine to F1;
/// the `CONNECT_DOORBELL` that follows a submission sets it back to F0 before connecting, so the
/// work runs. A kernel-mode submission wakes every F1 engine before its kick.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowerDebug {
    /// Engines set to F1.
    pub engine_f1: u32,
    /// Engines set back to F0 by a doorbell connect.
    pub engine_f0: u32,
    /// F1 requests dropped because work arrived.
    pub f1_aborted: u32,
    /// Steps recorded so far (all time; the last [`POWER_STEPS`] are in `steps`).
    pub step_count: u32,
    /// The latest steps, oldest first: `code << 8 | engine` (the `POWER_STEP_*` codes).
    pub steps: [u16; POWER_STEPS],
}
const _: () = assert!(size_of::<PowerDebug>() == 80);

/// `TEARDOWN_DEBUG`: what the module did when the device did not confirm a command (all `out`;
/// module-wide, counted across the rebinds a lost device causes).
pub const IOCTL_TEARDOWN_DEBUG: u32 = iowr(0x35, size_of::<TeardownDebug>());

/// `TEARDOWN_DEBUG`.
///
/// Teardown rule: when the device refuses or does not answer
/// `DESTROY_QUEUE`, `DESTROY_CONTEXT`, `DESTROY_ADDRESS_SPACE` or `UNREGISTER_FENCE`, the module
/// frees nothing the device may still reach (a queue's ring, ring control, packets and progress
/// pages, its MonitoredValue page; a context's page tables and ids; a fence's CurrentValue and
/// MonitoredValue page, its slot or VRAM page not handed out again): they go to quarantine, kept
/// until the device is reset (unbind). A mailbox command whose completion does not come within the
/// module's timeout, or whose completion names another sequence number, wedges the mailbox:
/// every later command fails with `EIO` (never with an earlier command's status), and the
/// device-lost path resets and binds the device again.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TeardownDebug {
    /// Queues put in quarantine (their destroy not confirmed).
    pub queues_quarantined: u32,
    /// Contexts (page tables and ids) put in quarantine.
    pub contexts_quarantined: u32,
    /// Objects in quarantine now, on every bound device.
    pub quarantine_held: u32,
    /// Objects freed from quarantine, after their device was reset.
    pub quarantine_released: u32,
    /// Mailbox commands that got no completion within the timeout.
    pub mailbox_timeouts: u32,
    /// Mailbox completions that named another command's sequence number (refused).
    pub mailbox_mismatches: u32,
    /// Mailbox commands refused (`EIO`, never sent) because the mailbox was wedged.
    pub mailbox_refused_wedged: u32,
    /// Fence pages put in quarantine (a fence of the page destroyed without the device
    /// confirming `UNREGISTER_FENCE`; the page was released with its context).
    pub fence_pages_quarantined: u32,
}
const _: () = assert!(size_of::<TeardownDebug>() == 32);

/// `IRQ_MODERATION`: the device's interrupt moderation (`regs::CAPS.irq_moderation`):
/// a vector's fence, NOTIFY, engine-state and fault interrupts come at most once per
/// `interval_us`. Any caller reads it; setting it needs `CAP_SYS_ADMIN` (`EPERM`), as
/// `ethtool -C` needs `CAP_NET_ADMIN`. `EOPNOTSUPP` on a device without moderation, `EINVAL` for
/// an interval above `regs::MAX_IRQ_MODERATION_US` or unknown flags. A device reset (unbind,
/// device loss) restores the device's own default.
pub const IOCTL_IRQ_MODERATION: u32 = iowr(0x23, size_of::<IrqModeration>());

/// [`IrqModeration::flags`]: set `interval_us` (otherwise the call only reads).
pub const IRQ_MODERATION_SET: u32 = 1 << 0;

/// `IRQ_MODERATION`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IrqModeration {
    /// In: `IRQ_MODERATION_SET` or 0.
    pub flags: u32,
    /// In (with `IRQ_MODERATION_SET`) and out: the interval in microseconds; 0 is off.
    pub interval_us: u32,
    /// Out: interrupts the device held back (folded into a later one) since its reset
    /// (`regs::IRQ_MODERATED`, wrapping).
    pub moderated: u32,
    /// Out: records the device dropped because the interrupt ring was full (the ring header's
    /// count since the module set the ring; each drop is followed by a scan-all record).
    pub ring_overflows: u32,
}
const _: () = assert!(size_of::<IrqModeration>() == 16);
