//! The synchronization ioctls of the userspace interface that libdrm and Vulkan users look for:
//! a wait on several fence values in one call, any or all
//! ([`IOCTL_WAIT_FENCES`], like `vkWaitSemaphores`, `drmSyncobjTimelineWait` and
//! `amdgpu_cs_wait_fences`) with an absolute `CLOCK_MONOTONIC` deadline and an explicit
//! "forever", and a context's reset status ([`IOCTL_CONTEXT_STATUS`], like
//! `amdgpu_cs_query_reset_state2`), and a `sync_file` of a monitored fence value
//! ([`IOCTL_EXPORT_SYNC_FILE`], like WSL dxgkrnl's `CREATESYNCFILE`). Conventions as in
//! [`super::uapi`].
//!
//! Deadlines: a deadline is a point of `CLOCK_MONOTONIC` in nanoseconds (`clock_gettime`'s
//! `tv_sec * 10^9 + tv_nsec`), not a duration, so a wait interrupted by a signal (`EINTR`) is
//! called again with the very same argument and still ends when it was asked to, however
//! many signals arrive. [`DEADLINE_FOREVER`] never times out; a deadline already passed
//! (0, for instance) checks without sleeping.

use core::mem::size_of;

use super::ioctl::iowr;

/// `WAIT_FENCES`: sleeps until the values of `count` [`WaitFenceEntry`]s are reached — any
/// one of them, or all with [`WAIT_FENCES_ALL`] — or the deadline passes. An entry names a
/// fence (DEFAULT or MONITORED; the values of MONITORED fences of the 32-bit mode compare
/// across wraparound) or, with [`WAIT_ENTRY_PROGRESS`], a queue's progress fence. The waits
/// are registered like `WAIT_FENCE`'s (one MonitoredValue update for all the native fences)
/// and released by the same interrupt paths, whatever interrupt form the device uses.
///
/// Errors: `ETIMEDOUT` once the deadline passed (at once when it already has), `EINTR` on a
/// signal whose handler was installed without `SA_RESTART` (call again with the same
/// argument; with `SA_RESTART` the kernel restarts the call itself, which the absolute deadline
/// makes safe: the module returns `ERESTARTSYS`), `ECANCELED` when an entry not yet reached is
/// the progress of a queue whose context was lost to a GPU fault (at once, or as soon as the
/// fault is processed), `EINVAL` for a `count` of 0 or above [`MAX_WAIT_FENCES`], unknown
/// flags or nonzero padding, `ENOENT`/`EINVAL` for an unknown fence or queue handle, `EPERM`
/// for an INTRA_GPU fence (the CPU cannot read it), `ERANGE` for a 32-bit-mode value outside
/// the window (see `uapi::QueueFenceOp`), `EFAULT` for an unreadable `entries` array.
pub const IOCTL_WAIT_FENCES: u32 = iowr(0x20, size_of::<WaitFences>());

/// `CONTEXT_STATUS`: whether a context is usable, or was lost and why (all but `context` are
/// `out`). Errors: `ENOENT`/`EINVAL` for an unknown context handle, `EINVAL` nonzero padding.
pub const IOCTL_CONTEXT_STATUS: u32 = iowr(0x21, size_of::<ContextStatus>());

/// `EXPORT_SYNC_FILE`: a new `sync_file` fd (`O_CLOEXEC`) whose `dma_fence` signals once the
/// MONITORED fence `handle` reaches `value` (at once if it has), so the Linux fence world —
/// `poll()`, `SYNC_IOC_MERGE`, `SYNC_IOC_FILE_INFO`, other drivers' in-fences — can wait on
/// it. The module signals it where it releases the CPU waits of monitored fences: the
/// interrupt thread after a kernel-mode queue's `MONITORED_FENCE_SIGNAL` or software signal
/// (`QUEUE_SIGNAL_FENCE`), and `SIGNAL_FENCE`. It never outlives what could signal it: once
/// the fence handle is destroyed or the exporting file closed it signals with the error
/// `ECANCELED`, once the device is unbound with `ENODEV`, and once it has been pending
/// [`SYNC_FILE_TIMEOUT_MS`] with `ETIMEDOUT` — a kernel fence must signal in bounded time, as
/// a GPU scheduler's job timeout bounds its jobs (`SYNC_IOC_FILE_INFO` reports the error as
/// the fence's status).
///
/// Only monitored fences: their every signal goes through the kernel (a kernel-mode queue's
/// work or a CPU signal; user-mode queues refuse them, NF-21). A native fence (DEFAULT,
/// INTRA_GPU, a cross-adapter fence open natively) may be signalled by a user-mode queue's
/// work that no kernel code ever sees or bounds, and a `dma_fence` must signal in bounded time
/// without depending on userspace (Documentation/driver-api/dma-buf.rst, "Indefinite DMA
/// Fences"), so it is refused with `EPERM`.
///
/// Errors: `EOPNOTSUPP` when the guest kernel has no `sync_file` (`CONFIG_SYNC_FILE` off;
/// [`super::uapi::QueryCaps::flags`] then lacks [`CAPS_FLAG_SYNC_FILE_EXPORT`]), `EPERM` for a
/// native fence, `ENOENT`/`EINVAL` for an unknown handle, `EINVAL` for nonzero flags or padding,
/// `ERANGE` for a 32-bit-mode value outside the window, `ENOSPC` with
/// [`MAX_SYNC_EXPORTS_PER_PROCESS`] exports of the process pending, `EMFILE`, `ENOMEM`.
pub const IOCTL_EXPORT_SYNC_FILE: u32 = iowr(0x22, size_of::<ExportSyncFile>());

/// How long an `EXPORT_SYNC_FILE` export may stay pending before its fence signals with
/// `ETIMEDOUT` (measured from the export, checked every 100 ms at most).
pub const SYNC_FILE_TIMEOUT_MS: u32 = 10_000;

/// Most `EXPORT_SYNC_FILE` exports one process may have pending on a device, across every file
/// of it the process opened (`ENOSPC` beyond; exports signalled, failed or expired no longer
/// count).
pub const MAX_SYNC_EXPORTS_PER_PROCESS: u32 = 256;

/// `QueryCaps.flags`: [`IOCTL_EXPORT_SYNC_FILE`] works (the guest kernel has `sync_file`).
pub const CAPS_FLAG_SYNC_FILE_EXPORT: u32 = 1 << 2;

/// `EXPORT_SYNC_FILE`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportSyncFile {
    /// Fence handle (a MONITORED fence).
    pub handle: u32,
    /// Zero.
    pub flags: u32,
    /// The value the `sync_file` waits for (CurrentValue ≥ value).
    pub value: u64,
    /// out: the `sync_file` fd.
    pub fd: i32,
    /// Zero.
    pub pad: u32,
}
const _: () = assert!(size_of::<ExportSyncFile>() == 24);

/// Most entries of one `WAIT_FENCES`.
pub const MAX_WAIT_FENCES: u32 = 64;

/// [`WaitFences::flags`]: return once every entry is reached (default: once any is).
pub const WAIT_FENCES_ALL: u32 = 1 << 0;

/// [`WaitFenceEntry::flags`]: `handle` names a queue, and the entry waits for its progress
/// fence (what `WAIT_PROGRESS` waits on) to reach `value`.
pub const WAIT_ENTRY_PROGRESS: u32 = 1 << 0;

/// A deadline that never passes.
pub const DEADLINE_FOREVER: u64 = u64::MAX;

/// One value `WAIT_FENCES` waits for.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitFenceEntry {
    /// Fence handle (or queue handle with [`WAIT_ENTRY_PROGRESS`]).
    pub handle: u32,
    /// `WAIT_ENTRY_*`.
    pub flags: u32,
    /// Value to wait for (CurrentValue ≥ value).
    pub value: u64,
}
const _: () = assert!(size_of::<WaitFenceEntry>() == 16);

/// `WAIT_FENCES`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitFences {
    /// User address of an array of `count` [`WaitFenceEntry`].
    pub entries: u64,
    /// Entries, 1..=[`MAX_WAIT_FENCES`].
    pub count: u32,
    /// `WAIT_FENCES_*`.
    pub flags: u32,
    /// Absolute `CLOCK_MONOTONIC` deadline in nanoseconds, or [`DEADLINE_FOREVER`].
    pub deadline_ns: u64,
    /// out: the lowest index of an entry found reached when the wait ended (any mode; 0 in
    /// the all mode).
    pub first: u32,
    /// Zero.
    pub pad: u32,
}
const _: () = assert!(size_of::<WaitFences>() == 32);

/// [`ContextStatus::flags`]: the context was lost: a GPU fault (or the device's loss) ended
/// its work, its doorbells read DISCONNECTED_ABORT, its pending progress never completes and
/// it refuses new queues. Create a new context (`amdgpu`'s `AMDGPU_CTX_QUERY2_FLAGS_RESET`).
pub const CONTEXT_LOST: u32 = 1 << 0;
/// [`ContextStatus::flags`]: this context's own work caused the loss (a GPU fault in its
/// address space or a refused packet of its queues; `AMDGPU_CTX_QUERY2_FLAGS_GUILTY`). A
/// context lost because the device went away is lost without being guilty.
pub const CONTEXT_GUILTY: u32 = 1 << 1;

/// `CONTEXT_STATUS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContextStatus {
    /// Context handle.
    pub context: u32,
    /// out: `CONTEXT_*` flags (0: usable).
    pub flags: u32,
    /// out: the fault's `engine::FaultReason` as a `u32` (0 when not guilty or not known).
    pub fault_reason: u32,
    /// Zero.
    pub pad: u32,
    /// out: the faulting GPU VA (0 when not guilty or not known).
    pub fault_address: u64,
}
const _: () = assert!(size_of::<ContextStatus>() == 24);
