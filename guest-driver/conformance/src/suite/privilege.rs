//! What needs privilege (no rule family): a process without the
//! capability is refused, the same request of a process with it is served (priorities above
//! normal, the whole timeline, the device-wide debug reads).
#![allow(unsafe_code)] // capget/capset on the calling (forked) process.

use std::path::Path;

use belfry_abi::engine::{PRIORITY_MAX, PRIORITY_NORMAL};
use belfry_abi::uapi::MmStats;
use belfry_abi::uapi_debug::{self, TimelineEntry};
use belfry_umd::{
    CommandBuffer, Device, FenceFlags, FenceKind, QueueDesc, QueueMode, Segment, Timeline, VideoAllocation,
};

use crate::harness::proc;
use crate::harness::raw::RawDev;
use crate::support::work::{kernel_queue, write32};
use crate::support::WAIT;
use crate::{Test, TestResult};

/// `CAP_SYS_NICE`.
const CAP_SYS_NICE: u32 = 23;
/// `CAP_SYS_ADMIN`.
pub(super) const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_PERFMON`.
pub(super) const CAP_PERFMON: u32 = 38;
/// `_LINUX_CAPABILITY_VERSION_3` (two 32-bit words per set).
const CAP_V3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Removes `cap` from the calling process's effective and permitted sets (for good).
pub(super) fn drop_capability(cap: u32) -> TestResult {
    let mut header = CapHeader { version: CAP_V3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: `header` and `data` are the layouts capget expects for version 3.
    let r = unsafe { libc::syscall(libc::SYS_capget, &raw mut header, data.as_mut_ptr()) };
    ensure!(r == 0, "capget: {}", std::io::Error::last_os_error());
    let (word, bit) = ((cap / 32) as usize, 1u32 << (cap % 32));
    data[word].effective &= !bit;
    data[word].permitted &= !bit;
    // SAFETY: as above; capset only reads them.
    let r = unsafe { libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) };
    ensure!(r == 0, "capset: {}", std::io::Error::last_os_error());
    Ok(())
}

/// A kernel-mode queue of `priority` in a new context of a new file of `path`: the errno of
/// `CREATE_QUEUE`, or `None` when it was created.
fn queue_of_priority(path: &Path, priority: u32) -> Result<Option<i32>, crate::Error> {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    match ctx.create_queue(&QueueDesc::default().with_mode(QueueMode::KernelMode).with_priority(priority)) {
        Ok(_) => Ok(None),
        Err(e) => Ok(Some(e.errno().ok_or_else(|| format!("CREATE_QUEUE of priority {priority}: {e}"))?)),
    }
}

/// Strict priority cannot be taken by anyone (amdgpu's rule): a process without
/// `CAP_SYS_NICE` (dropped with `capset` in a forked child) is refused a queue above normal
/// priority with `EACCES` and still gets normal and lower ones; the suite's process, which has
/// the capability, gets every priority up to `PRIORITY_MAX`.
fn priorities_above_normal_need_cap_sys_nice(path: &Path) -> TestResult {
    let child = proc::spawn("process without CAP_SYS_NICE", || {
        drop_capability(CAP_SYS_NICE)?;
        for priority in 0..=PRIORITY_MAX {
            let got = queue_of_priority(path, priority)?;
            let want = (priority > PRIORITY_NORMAL).then_some(libc::EACCES);
            ensure!(
                got == want,
                "CREATE_QUEUE of priority {priority} without CAP_SYS_NICE: errno {got:?}, expected {want:?}"
            );
        }
        Ok(())
    })?;
    child.join()?;
    for priority in 0..=PRIORITY_MAX {
        let got = queue_of_priority(path, priority)?;
        ensure!(got.is_none(), "CREATE_QUEUE of priority {priority} with CAP_SYS_NICE: errno {got:?}");
    }
    Ok(())
}

/// A kernel-mode `SUBMIT` by this process on a new file of `path`, run to its end: the timeline
/// then holds its `TIMELINE_SUBMIT` event (this process's id) and the log events of its queue.
fn submit_once(path: &Path) -> Result<Device, crate::Error> {
    let dev = Device::open(path)?;
    {
        let ctx = dev.create_context()?;
        let buf = ctx.alloc(4096, 0)?;
        let mut q = kernel_queue(&ctx)?;
        let v = write32(&mut q, buf.gpu_va(), 0x7117)?;
        q.wait(v, WAIT)?;
    }
    Ok(dev)
}

/// The processes (`observed_gpu` of thread events) the timeline shows `dev`'s caller.
fn processes_seen(dev: &Device) -> Result<Vec<TimelineEntry>, crate::Error> {
    let mut t = Timeline::new();
    Ok(t.read(dev)?.into_iter().filter(|e| uapi_debug::is_thread_event(e.operation)).collect())
}

/// The device-wide timeline is not every process's to read: a process without
/// `CAP_PERFMON` and `CAP_SYS_ADMIN` (dropped in a forked child) reads only its own events — the
/// thread events of its process and the log events of its queues — though another process
/// submitted work just before; a process with the capability reads both processes' events.
fn the_timeline_shows_an_unprivileged_process_only_its_own_events(path: &Path) -> TestResult {
    let parent = std::process::id();
    let _mine = submit_once(path)?;
    let child = proc::spawn("process without CAP_PERFMON", || {
        drop_capability(CAP_PERFMON)?;
        drop_capability(CAP_SYS_ADMIN)?;
        let me = std::process::id();
        let dev = submit_once(path)?;
        let seen = processes_seen(&dev)?;
        let own_queues: Vec<u32> =
            seen.iter().filter(|e| e.operation == uapi_debug::TIMELINE_SUBMIT).map(|e| e.queue).collect();
        ensure!(!own_queues.is_empty(), "the process's own SUBMIT is not in its timeline");
        if let Some(e) = seen.iter().find(|e| e.observed_gpu != u64::from(me)) {
            return Err(format!("an unprivileged process (pid {me}) read another process's event: {e:?}").into());
        }
        let mut t = Timeline::new();
        let all = t.read(&dev)?;
        if let Some(e) =
            all.iter().find(|e| !uapi_debug::is_thread_event(e.operation) && !own_queues.contains(&e.queue))
        {
            return Err(format!(
                "an unprivileged process read a log event of another queue: {e:?} (its queues {own_queues:?})"
            )
            .into());
        }
        Ok(())
    })?;
    child.join()?;
    let seen = processes_seen(&_mine)?;
    ensure!(
        seen.iter().any(|e| e.observed_gpu == u64::from(parent))
            && seen.iter().any(|e| e.observed_gpu != u64::from(parent)),
        "with CAP_PERFMON the timeline shows not both processes' events: {:?}",
        seen.iter().map(|e| e.observed_gpu).collect::<Vec<_>>()
    );
    Ok(())
}

/// Spoofed timeline entries are contained: a fence-log entry carries the handle
/// the submitting packet chose, so another process's queues (a user-mode one, whose signal
/// and wait entries the engine writes, and a kernel-mode one, whose queued events `SUBMIT`
/// records) log operations on their own fence under this process's fence handle. A privileged
/// reader of the whole timeline never sees them under that handle: they show fence 0 with
/// `TIMELINE_FLAG_FOREIGN_FENCE`, while the same process's honestly logged signal keeps its
/// handle.
fn the_timeline_never_shows_a_spoofed_entry_under_another_process_fence(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let mine = ctx.create_fence(FenceKind::Default, FenceFlags::empty(), 0)?;
    let victim = mine.log_handle()?;
    let mut timeline = Timeline::from_now(&dev)?;
    let child = proc::spawn("a process logging under another's fence handle", move || {
        let d = Device::open(path)?;
        let c = d.create_context()?;
        let own = c.create_fence(FenceKind::Default, FenceFlags::empty(), 0)?;
        for desc in [QueueDesc::default(), QueueDesc::default().with_mode(QueueMode::KernelMode)] {
            let mut q = c.create_queue(&desc)?;
            if desc.mode == QueueMode::UserMode {
                q.connect_doorbell()?;
            }
            let base = own.value().unwrap_or(0);
            let mut cb = CommandBuffer::new();
            cb.logged_signal(own.gpu_va(), base + 1, victim)?;
            cb.logged_wait(own.gpu_va(), base + 1, victim)?;
            cb.logged_signal(own.gpu_va(), base + 2, own.log_handle()?)?;
            let v = q.submit(&cb)?;
            q.wait(v, WAIT)?;
        }
        Ok(())
    })?;
    child.join()?;
    let events = timeline.read(&dev)?;
    if let Some(e) = events.iter().find(|e| e.fence == victim.raw() && !uapi_debug::is_thread_event(e.operation)) {
        return Err(
            format!("another process's entry is shown under this process's fence {:#x}: {e:?}", victim.raw()).into()
        );
    }
    let contained =
        events.iter().filter(|e| e.flags & uapi_debug::TIMELINE_FLAG_FOREIGN_FENCE != 0 && e.fence == 0).count();
    // Per queue: a signal and a wait executed (user-mode), or a signal and a wait queued and
    // the signal executed (kernel-mode).
    ensure!(contained >= 4, "{contained} contained entries, expected at least 4: {events:?}");
    let honest = events
        .iter()
        .filter(|e| e.operation == uapi_debug::TIMELINE_SIGNAL_EXECUTED && e.fence != 0 && e.flags == 0)
        .count();
    ensure!(honest >= 2, "the honestly logged signals are not shown with their handle: {events:?}");
    Ok(())
}

/// Each device-wide debug read through the library, by ioctl name: its errno, `None` when
/// served.
fn device_wide_debug_reads(dev: &Device, raw: &RawDev) -> Vec<(&'static str, Option<i32>)> {
    /// The errno of a failed read (-1 for a failure without one).
    fn errno<T>(r: belfry_umd::Result<T>) -> Option<i32> {
        r.err().map(|e| e.errno().unwrap_or(-1))
    }
    vec![
        ("DEBUG_STATS", errno(dev.debug_stats())),
        ("FENCE_DEBUG", errno(dev.fence_debug())),
        ("IRQ_DEBUG", errno(dev.irq_debug())),
        ("WAKE_PATH", errno(dev.wake_path())),
        ("MAILBOX_TIMING", errno(dev.mailbox_timing())),
        ("RECOVERY_DEBUG", errno(dev.recovery_debug())),
        ("POWER_DEBUG", errno(dev.power_debug())),
        ("DEVICE_POWER", errno(dev.device_power())),
        ("TEARDOWN_DEBUG", raw.teardown_debug().err()),
    ]
}

/// The module's device-wide debug reads — counters (`DEBUG_STATS`, `FENCE_DEBUG`,
/// `IRQ_DEBUG`), timing stamps (`WAKE_PATH`, `MAILBOX_TIMING`), recovery and power steps
/// (`RECOVERY_DEBUG`, `POWER_DEBUG`, `DEVICE_POWER`), the module-wide teardown counters
/// (`TEARDOWN_DEBUG`) — describe every process's work, so they
/// are not every process's to read, as the whole timeline is not: a process without
/// `CAP_PERFMON` and `CAP_SYS_ADMIN` (dropped in a forked child) is refused each with `EPERM`;
/// the suite's process, which has them, reads each.
fn device_wide_debug_reads_need_cap_perfmon(path: &Path) -> TestResult {
    let child = proc::spawn("process without CAP_PERFMON", || {
        drop_capability(CAP_PERFMON)?;
        drop_capability(CAP_SYS_ADMIN)?;
        let (dev, raw) = (Device::open(path)?, RawDev::open(path)?);
        let served: Vec<_> =
            device_wide_debug_reads(&dev, &raw).into_iter().filter(|(_, e)| *e != Some(libc::EPERM)).collect();
        ensure!(
            served.is_empty(),
            "a process without CAP_PERFMON and CAP_SYS_ADMIN was not refused with EPERM: {served:?} (errno; None: served)"
        );
        Ok(())
    })?;
    child.join()?;
    let (dev, raw) = (Device::open(path)?, RawDev::open(path)?);
    let refused: Vec<_> = device_wide_debug_reads(&dev, &raw).into_iter().filter(|(_, e)| e.is_some()).collect();
    ensure!(refused.is_empty(), "a process with CAP_PERFMON was refused: {refused:?} (errno)");
    Ok(())
}

/// `MM_STATS` describes every process's allocations and work (resident, evicted, paged,
/// submitted): a process without `CAP_PERFMON` and `CAP_SYS_ADMIN` reads the device's facts
/// only (`vram_managed`, `slots`, which the library needs to split) and zero for the rest, while
/// the suite's process holds an allocation (VRAM-preferring, in system memory until work uses it)
/// that its own read shows resident.
fn memory_manager_counters_need_cap_perfmon(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let _held = VideoAllocation::new(&ctx, 64 * 1024, Segment::Vram)?;
    let all = dev.mm_stats()?;
    ensure!(all.resident_vram + all.resident_system > 0, "the suite's own allocation is resident nowhere: {all:?}");
    let child = proc::spawn("process without CAP_PERFMON", move || {
        drop_capability(CAP_PERFMON)?;
        drop_capability(CAP_SYS_ADMIN)?;
        let seen = Device::open(path)?.mm_stats()?;
        let facts = MmStats { vram_managed: all.vram_managed, slots: all.slots, ..Default::default() };
        ensure!(
            seen == facts,
            "a process without CAP_PERFMON read the memory manager's counters: {seen:?}, expected only {facts:?}"
        );
        Ok(())
    })?;
    child.join()
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(priorities_above_normal_need_cap_sys_nice, Default, []),
        test_entry!(the_timeline_shows_an_unprivileged_process_only_its_own_events, Default, []),
        test_entry!(the_timeline_never_shows_a_spoofed_entry_under_another_process_fence, Default, []),
        test_entry!(device_wide_debug_reads_need_cap_perfmon, Default, []),
        test_entry!(memory_manager_counters_need_cap_perfmon, Default, []),
    ]
}
