//! The userspace interface of the kernel module: ioctls on `/dev/belfry<N>` and their argument
//! structs, shared by the module and the userspace library.
//!
//! Conventions: every struct is `#[repr(C)]` with explicit padding that must be zero;
//! handles are per-open-file `u32`s (0 is never a valid handle); `out` fields are written by
//! the module; mmap offsets are opaque page-aligned cookies returned by the module. Every
//! ioctl validates all of its input and fails with an errno (`EINVAL` malformed, `ENOENT`
//! unknown handle, `EBUSY` in use, `ENOSPC` limits, `EFAULT` bad pointer, `EPERM` wrong queue
//! kind, `ETIMEDOUT` a wait ran out, `EINTR` a signal interrupted a wait — call again,
//! `ERANGE` a fence value outside the 32-bit window, see [`QueueFenceOp`]) without side
//! effects.
//!
//! Mappings: every mmap offset names exactly one page unless it names an allocation (then its
//! size rounded up to pages). Allocations are zeroed. A queue's progress fence starts at 0;
//! each submission must signal a value above the last one submitted. A faulted context (GPU
//! page fault: its doorbells read DISCONNECTED_ABORT) refuses new queues with `EIO`: the library
//! re-creates the context too. On disconnect the module writes the new status before it moves
//! the doorbell mapping to the dummy page, so a ring that lands on the dummy page is always
//! followed by a status read that says so.

use core::mem::size_of;

/// ioctl type byte.
pub const IOCTL_TYPE: u32 = b'B' as u32;
/// Version of this interface, reported by [`QueryCaps`].
pub const UAPI_VERSION: u32 = 1;

/// `_IOWR(IOCTL_TYPE, nr, size)`.
pub const fn iowr(nr: u32, size: usize) -> u32 {
    (3 << 30) | (((size as u32) & 0x3fff) << 16) | (IOCTL_TYPE << 8) | nr
}

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
/// `WAIT_PROGRESS`: sleep until a queue's progress fence reaches a value (or timeout).
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
/// `SIGNAL_FENCE`: CPU signal.
pub const IOCTL_SIGNAL_FENCE: u32 = iowr(0x12, size_of::<FenceOp>());
/// `WAIT_FENCE`: blocking CPU wait with timeout (sleeps; woken by fence interrupts).
pub const IOCTL_WAIT_FENCE: u32 = iowr(0x13, size_of::<FenceOp>());
/// `FENCE_INFO`: read-only state for tests and tools (MonitoredValue, pending waits).
pub const IOCTL_FENCE_INFO: u32 = iowr(0x14, size_of::<FenceInfo>());

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
}
const _: () = assert!(size_of::<FenceInfo>() == 32);

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

/// An ioctl argument that is just a handle.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handle {
    /// The handle.
    pub handle: u32,
    /// Zero.
    pub pad: u32,
}
const _: () = assert!(size_of::<Handle>() == 8);

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
}
const _: () = assert!(size_of::<QueryCaps>() == 48);

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

/// `CREATE_QUEUE`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateQueue {
    /// Context.
    pub context: u32,
    /// Engine.
    pub engine: u32,
    /// Priority 0..=3.
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
}
const _: () = assert!(size_of::<CreateQueue>() == 48);

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
}
const _: () = assert!(size_of::<DebugStats>() == 104);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_encode_direction_size_and_type() {
        assert_eq!(IOCTL_QUERY_CAPS >> 30, 3);
        assert_eq!((IOCTL_QUERY_CAPS >> 16) & 0x3fff, 48);
        assert_eq!((IOCTL_ALLOC >> 8) & 0xff, u32::from(b'B'));
        let all = [
            IOCTL_QUERY_CAPS,
            IOCTL_CREATE_CONTEXT,
            IOCTL_DESTROY_CONTEXT,
            IOCTL_ALLOC,
            IOCTL_FREE,
            IOCTL_CREATE_QUEUE,
            IOCTL_DESTROY_QUEUE,
            IOCTL_CREATE_DOORBELL,
            IOCTL_DESTROY_DOORBELL,
            IOCTL_CONNECT_DOORBELL,
            IOCTL_NOTIFY_WORK,
            IOCTL_SUBMIT,
            IOCTL_WAIT_PROGRESS,
            IOCTL_SUSPEND_CONTEXT,
            IOCTL_RESUME_CONTEXT,
            IOCTL_DEBUG_STATS,
            IOCTL_CREATE_FENCE,
            IOCTL_DESTROY_FENCE,
            IOCTL_SIGNAL_FENCE,
            IOCTL_WAIT_FENCE,
            IOCTL_FENCE_INFO,
            IOCTL_QUEUE_WAIT_FENCE,
            IOCTL_QUEUE_SIGNAL_FENCE,
        ];
        // Numbers are handed out in ranges, so they need not be dense: unique and below 0x40.
        for (i, a) in all.iter().enumerate() {
            assert!(a & 0xff < 0x40, "{a:#x}");
            assert!(all[..i].iter().all(|b| b & 0xff != a & 0xff), "{a:#x} repeats a number");
        }
    }

    #[test]
    fn doorbell_statuses_round_trip() {
        for raw in 1..=4 {
            assert_eq!(DoorbellStatus::try_from(raw).map(|s| s as u32), Ok(raw));
        }
        assert!(DoorbellStatus::try_from(0).is_err());
    }
}
