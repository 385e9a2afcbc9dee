//! The synchronization ioctls of the userspace interface that libdrm and Vulkan users look for
//! (issue 18): a wait on several fence values in one call, any or all
//! ([`IOCTL_WAIT_FENCES`], like `vkWaitSemaphores`, `drmSyncobjTimelineWait` and
//! `amdgpu_cs_wait_fences`) with an absolute `CLOCK_MONOTONIC` deadline and an explicit
//! "forever", and a context's reset status ([`IOCTL_CONTEXT_STATUS`], like
//! `amdgpu_cs_query_reset_state2`). Conventions as in [`super::uapi`].
//!
//! Deadlines: a deadline is a point of `CLOCK_MONOTONIC` in nanoseconds (`clock_gettime`'s
//! `tv_sec * 10^9 + tv_nsec`), not a duration, so a wait interrupted by a signal (`EINTR`) is
//! called again with the very same argument and still ends when it was asked to, however
//! many signals arrive. [`DEADLINE_FOREVER`] never times out; a deadline already passed
//! (0, for instance) checks without sleeping.

use core::mem::size_of;

use super::uapi::iowr;

/// `WAIT_FENCES`: sleeps until the values of `count` [`WaitFenceEntry`]s are reached — any
/// one of them, or all with [`WAIT_FENCES_ALL`] — or the deadline passes. An entry names a
/// fence (DEFAULT or MONITORED; the values of MONITORED fences of the 32-bit mode compare
/// across wraparound) or, with [`WAIT_ENTRY_PROGRESS`], a queue's progress fence. The waits
/// are registered like `WAIT_FENCE`'s (one MonitoredValue update for all the native fences)
/// and released by the same interrupt paths, whatever interrupt form the device uses.
///
/// Errors: `ETIMEDOUT` once the deadline passed (at once when it already has), `EINTR` on a
/// signal (call again with the same argument), `ECANCELED` when an entry not yet reached is
/// the progress of a queue whose context was lost to a GPU fault (at once, or as soon as the
/// fault is processed), `EINVAL` for a `count` of 0 or above [`MAX_WAIT_FENCES`], unknown
/// flags or nonzero padding, `ENOENT`/`EINVAL` for an unknown fence or queue handle, `EPERM`
/// for an INTRA_GPU fence (the CPU cannot read it), `ERANGE` for a 32-bit-mode value outside
/// the window (see `uapi::QueueFenceOp`), `EFAULT` for an unreadable `entries` array.
pub const IOCTL_WAIT_FENCES: u32 = iowr(0x20, size_of::<WaitFences>());

/// `CONTEXT_STATUS`: whether a context is usable, or was lost and why (all but `context` are
/// `out`). Errors: `ENOENT`/`EINVAL` for an unknown context handle, `EINVAL` nonzero padding.
pub const IOCTL_CONTEXT_STATUS: u32 = iowr(0x21, size_of::<ContextStatus>());

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
