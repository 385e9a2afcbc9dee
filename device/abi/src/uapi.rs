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

/// Version of this interface, reported by [`QueryCaps`]: a change to an ioctl, an argument struct
/// or a value the module's pages carry is a new version, and the library opens only a module of
/// its own.
pub const UAPI_VERSION: u32 = 2;

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
/// `QueryCaps.flags`: the OS supports optimized DEFAULT fences (CAP-04, SupportOptimizedDefaultFenceType
/// of the OS capabilities version 1, the module parameter `os_optimized_default_fences` at probe).
pub const CAPS_FLAG_OS_OPTIMIZED_DEFAULT_FENCE: u32 = 1 << 3;
/// `QueryCaps.flags`: the OS supports INTRA_GPU fences (CAP-04, SupportIntraGpuFenceType, the
/// module parameter `os_intra_gpu_fences` at probe); without it `CREATE_FENCE` of that kind is
/// refused with `EOPNOTSUPP`.
pub const CAPS_FLAG_OS_INTRA_GPU_FENCE: u32 = 1 << 4;
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

crate::wire_enum! {
    /// Doorbell status values, read by the library from the status page: the values of
    /// `D3DDDI_DOORBELL_STATUS`, so a program that reads the page compares them as documented.
    /// The module writes the status of a doorbell before it gives out the page's offset, so a
    /// mapping never shows the zeroed page (which would read CONNECTED).
    pub enum DoorbellStatus {
        /// Connected: a ring reaches the device.
        Connected = 0 => "CONNECTED",
        /// Connected, and the module wants `NOTIFY_WORK_SUBMISSION` after each ring. The rule: a
        /// connected doorbell reads this while its queue's context is suspended (the device will
        /// not run the work, so the module must learn that the context has work pending); it reads
        /// CONNECTED again on resume. The disconnected statuses take precedence.
        ConnectedNotify = 1 => "CONNECTED_NOTIFY",
        /// Disconnected (victimized, power, suspend): reconnect and submit again.
        DisconnectedRetry = 2 => "DISCONNECTED_RETRY",
        /// Disconnected for good (device loss, fault): destroy and re-create the queue.
        DisconnectedAbort = 3 => "DISCONNECTED_ABORT",
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

/// `VERBOSE_LOG`: the device-wide switch of verbose fence logging (LOG-20, `regs::LOG_VERBOSE`):
/// while on, a `FENCE_WAIT` carrying `packet::FENCE_WAIT_LOG_BEGIN` gets a `WAIT_BEGIN` entry in
/// its queue's wait log. Any caller reads the switch and may watch it ([`VERBOSE_LOG_WATCH`]);
/// setting it needs `CAP_PERFMON` or `CAP_SYS_ADMIN` (`EPERM`), as the other device-wide
/// debug ioctls. `EOPNOTSUPP` on a device without `CAPS.verbose_log`, `EINVAL` for unknown
/// flags, an `enable` other than 0 or 1, or a watch `eventfd` that is not an eventfd.
pub const IOCTL_VERBOSE_LOG: u32 = iowr(0x3c, size_of::<VerboseLog>());

/// [`VerboseLog::flags`]: set the switch to `enable` (otherwise the call only reads).
pub const VERBOSE_LOG_SET: u32 = 1 << 0;
/// [`VerboseLog::flags`]: from now on, signal `eventfd` (1 is added) each time the switch
/// changes, until the file is closed; replaces this file's earlier watch. Applied before a
/// [`VERBOSE_LOG_SET`] in the same call, so a setter that also watches is told of its own change.
pub const VERBOSE_LOG_WATCH: u32 = 1 << 1;

/// `VERBOSE_LOG`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerboseLog {
    /// In: `VERBOSE_LOG_SET`, `VERBOSE_LOG_WATCH`, both or 0.
    pub flags: u32,
    /// In (with `VERBOSE_LOG_SET`): 1 on, 0 off. Out: the switch after the call.
    pub enable: u32,
    /// In (with `VERBOSE_LOG_WATCH`): an eventfd.
    pub eventfd: i32,
    /// Zero.
    pub pad: u32,
    /// Out: how many times the switch changed since the module bound the device.
    pub generation: u64,
}
const _: () = assert!(size_of::<VerboseLog>() == 24);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doorbell_statuses_round_trip() {
        for raw in 0..=3 {
            assert_eq!(DoorbellStatus::try_from(raw).map(|s| s as u32), Ok(raw));
        }
        assert_eq!(DoorbellStatus::try_from(4).map_err(|e| e.raw), Err(4));
        assert_eq!(DoorbellStatus::ALL.len(), 4);
    }
}
