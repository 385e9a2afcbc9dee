//! The debugging part of the userspace interface: twelve read-only ioctls that report the
//! module's state and counters (fence bookkeeping, interrupt paths, the fence-operation
//! timeline, wake-up and mailbox timing, hang recovery, power, teardown) for the conformance
//! suite, the benchmarks and the trace tools. They observe the driver; running work needs none
//! of them (that interface is `uapi`, with `uapi_sync` and `vidmem`). Conventions as in `uapi`;
//! every field here is `out` unless it says otherwise.

use core::mem::size_of;

use super::ioctl::iowr;

/// `DEBUG_STATS`: read-only counters tests need and users cannot otherwise see.
pub const IOCTL_DEBUG_STATS: u32 = iowr(0x0f, size_of::<DebugStats>());

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
    /// Page tables of the system address space below its root (freed when empty).
    pub system_page_tables: u32,
    /// Extent of the system address space in VA slots (two pages and two guard pages each):
    /// one past the highest slot in use (freed slots are reused lowest first).
    pub system_va_slots: u32,
}
const _: () = assert!(size_of::<DebugStats>() == 224);

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

/// `FENCE_INFO`: read-only state for tests and tools (MonitoredValue, pending waits, where the
/// values live).
pub const IOCTL_FENCE_INFO: u32 = iowr(0x14, size_of::<FenceInfo>());

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
    /// Where CurrentValue lives: [`FENCE_SEGMENT_SYSTEM`](super::uapi::FENCE_SEGMENT_SYSTEM) or [`FENCE_SEGMENT_VRAM`](super::uapi::FENCE_SEGMENT_VRAM) (the
    /// registration the device was given).
    pub current_segment: u32,
    /// Where MonitoredValue lives, likewise; 0 for a MONITORED fence (it has none). A DEFAULT
    /// fence reports [`FENCE_SEGMENT_VRAM`](super::uapi::FENCE_SEGMENT_VRAM) in its optimized form (NF-13), which changes
    /// nothing else the library sees (debugging only).
    pub monitored_segment: u32,
}
const _: () = assert!(size_of::<FenceInfo>() == 40);

/// `FENCE_DEBUG`: fence bookkeeping tests need and users cannot otherwise see.
pub const IOCTL_FENCE_DEBUG: u32 = iowr(0x1b, size_of::<FenceDebug>());

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
    /// Payloads other devices' GPUs announced into this device's peer-signal page (device-wide,
    /// every fence; the page's claim index, low 32 bits; 0 without peer signals, XAD-15).
    pub peer_payloads: u32,
    /// Notification-only updates this device received for it (XAD-07).
    pub notifications: u64,
    /// Changes of its CurrentValue the module propagated (fence-wide).
    pub propagations: u64,
}
const _: () = assert!(size_of::<XadInfo>() == 48);

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
/// Verbose fence logging (LOG-20): the engine first met a wait (wait log, `WAIT_BEGIN`;
/// `observed_gpu` and `end_gpu` that time). A log event, though numbered past the thread events.
pub const TIMELINE_WAIT_BEGIN: u32 = 0x100;

/// Whether a [`TimelineEntry::operation`] is a thread event (`TIMELINE_CPU_WAIT_START` up to
/// the verbose log events) rather than a log event of a queue.
pub const fn is_thread_event(operation: u32) -> bool {
    operation >= TIMELINE_CPU_WAIT_START && operation < TIMELINE_WAIT_BEGIN
}

/// Thread events (the codes below): what a guest thread did, at `cpu_ns` (the clock of the
/// `*_QUEUED` events). `log_index` holds the thread's id (tid), `observed_gpu` its process id
/// (tgid), `end_gpu` the detail each code names; `queue` is [`NONE`](super::irq::NONE) unless named.
/// A CPU wait (`WAIT_FENCE`, `WAIT_PROGRESS`) started: `fence` (the device's handle), `value`.
pub const TIMELINE_CPU_WAIT_START: u32 = 6;
/// A CPU wait ended: `fence`, `value`; `end_gpu`: 0 when the fence reached the value, else
/// the errno it ended with (`ETIMEDOUT`, `EINTR`, …).
pub const TIMELINE_CPU_WAIT_END: u32 = 7;
/// A CPU signal (`SIGNAL_FENCE`): `fence`, `value`.
pub const TIMELINE_CPU_SIGNAL: u32 = 8;
/// An eventfd wait completed (its eventfd was signaled): `fence`, `value`.
pub const TIMELINE_EVENTFD_SIGNALED: u32 = 9;
/// A doorbell's status changed: `queue`, `value` the new [`DoorbellStatus`](super::uapi::DoorbellStatus), `end_gpu`: 1
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
    /// Native-fence records naming an array of queues (queue-array form).
    pub queue_array_records: u64,
    /// Fence CurrentValues the interrupt paths read to decide whether a wait is satisfied (the
    /// queue-array path reads none: it takes the logged values).
    pub fence_value_reads: u64,
    /// Queue-array passes that fell back to reading the CurrentValue of every waited fence of
    /// the device: a named queue's log overflowed (wrapped past what the module last read), or
    /// the entries read released no wait.
    pub queue_array_fallbacks: u64,
    /// CPU waits released, by `PATH_*`.
    pub released: [u64; 4],
    /// CPU waits released by queue-array records from the named queues' signal-log entries
    /// alone (the logged value, no fence value read).
    pub queue_array_released: u64,
    /// Fence-log buffers the module has given the device (two per queue).
    pub log_buffers: u32,
    /// Records the device dropped because the interrupt ring was full (the ring header's count;
    /// each drop is followed by a scan-all record, so no wait is lost, but a `NOTIFY` record's
    /// token is).
    pub ring_overflows: u32,
}
const _: () = assert!(size_of::<IrqDebug>() == 144);

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
    /// reset and bound again), module-wide, counted across rebinds. A function reset the module
    /// was told about is not one: it counts in `function_resets`.
    pub device_lost: u32,
    /// Function resets of a bound device the module was told about (`reset_prepare`: sysfs
    /// `reset`, a bus reset above it; every context lost, the device bound again), module-wide,
    /// counted across rebinds.
    pub function_resets: u32,
}
const _: () = assert!(size_of::<RecoveryDebug>() == 36);

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
