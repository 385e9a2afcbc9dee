//! Fence helpers: GPU signal packets, fence-interrupt counts, pending-wait expectations,
//! shared-fence counts (`FENCE_DEBUG`), system-page counts and where a fence's values are
//! placed (`FENCE_INFO` segments).

use std::path::Path;
use std::time::Duration;

use belfry_abi::uapi;
use belfry_umd::{CommandBuffer, Device, Fence, FenceKind, Queue};

use crate::support::work::user_queue;
use crate::support::{wait_until, WAIT};
use crate::TestResult;

/// Interrupt records of native-fence kind counted so far (`DEBUG_STATS`).
pub(crate) fn fence_interrupts(dev: &Device) -> Result<u64, crate::Error> {
    Ok(dev.debug_stats()?.interrupts_by_cause[1])
}

/// The token of [`records_settled`]'s NOTIFY (no test-only meaning).
const SETTLED_TOKEN: u64 = 0x5E77_1ED0;

/// Puts a NOTIFY behind the work `q` submitted so far and waits until the module has counted
/// its record (`DEBUG_STATS`: NOTIFY records count under index 2, native-fence ones under 1).
/// The device posts a queue's records in the order its packets run and the module counts them
/// in ring order, so by then every record of that earlier work is counted: what a "no
/// interrupt was raised" count synchronises on, instead of a sleep.
pub(crate) fn records_settled(dev: &Device, q: &mut Queue) -> TestResult {
    let before = dev.debug_stats()?.interrupts_by_cause[2];
    let mut cb = CommandBuffer::new();
    cb.notify(SETTLED_TOKEN)?;
    q.submit(&cb)?;
    let counted = wait_until(WAIT, || dev.debug_stats().is_ok_and(|d| d.interrupts_by_cause[2] > before));
    ensure!(counted, "the marker NOTIFY's interrupt record was not counted within {WAIT:?}");
    Ok(())
}

/// Submits a `FENCE_SIGNAL` of `value` on `f`; returns the progress value.
pub(crate) fn gpu_signal(q: &mut Queue, f: &Fence, value: u64) -> belfry_umd::Result<u64> {
    let mut cb = CommandBuffer::new();
    cb.fence_signal(f.gpu_va(), value, None)?;
    q.submit(&cb)
}

/// Waits (polling `FENCE_INFO`) until `f` has `n` pending CPU waits.
pub(crate) fn expect_pending(f: &Fence, n: u32) -> TestResult {
    let ok = wait_until(WAIT, || f.info().is_ok_and(|i| i.pending_waits == n));
    ensure!(ok, "pending waits {:?}, expected {n}", f.info()?.pending_waits);
    Ok(())
}

/// Pages mapped in the system (CMP) address space.
pub(crate) fn system_pages(dev: &Device) -> Result<u64, crate::Error> {
    Ok(dev.debug_stats()?.system_gpu_pages)
}

/// The shared-fence counts of `FENCE_DEBUG`: global objects, local handles, fences registered
/// with the device.
pub(crate) fn shared_counts(dev: &Device) -> Result<(u32, u32, u32), crate::Error> {
    let d = dev.fence_debug()?;
    Ok((d.global_fences, d.local_handles, d.registered_fences))
}

/// Fails unless `FENCE_DEBUG` shows `base` plus `delta` (globals, locals, registered).
pub(crate) fn expect_counts(dev: &Device, base: (u32, u32, u32), delta: (u32, u32, u32), what: &str) -> TestResult {
    let want = (base.0 + delta.0, base.1 + delta.1, base.2 + delta.2);
    let got = shared_counts(dev)?;
    ensure!(got == want, "{what}: (global objects, local handles, registered) = {got:?}, expected {want:?}");
    Ok(())
}

/// Two fences with a pollable wait each: a GPU signal of one makes its wait ready (through a
/// native-fence interrupt) and leaves the other's pending with its MonitoredValue, until that
/// one is signaled too.
pub(crate) fn pollable_waits_follow_their_own_fence(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let (a, b) = (ctx.create_fence(FenceKind::Default, 0, 0)?, ctx.create_fence(FenceKind::Default, 0, 0)?);
    let mut q = user_queue(&ctx)?;
    let (ea, eb) = (a.event(1)?, b.event(1)?);
    let before = fence_interrupts(&dev)?;
    gpu_signal(&mut q, &a, 1)?;
    ensure!(ea.wait(WAIT)?, "the signaled fence's wait is not ready");
    ensure!(fence_interrupts(&dev)? > before, "no native-fence interrupt counted");
    std::thread::sleep(Duration::from_millis(100));
    ensure!(!eb.is_ready()?, "the other fence's wait is ready");
    let i = b.info()?;
    ensure!(
        i.pending_waits == 1 && i.monitored_value == 0,
        "other fence: {} pending, MonitoredValue {:#x}",
        i.pending_waits,
        i.monitored_value
    );
    gpu_signal(&mut q, &b, 1)?;
    ensure!(eb.wait(WAIT)?, "the second fence's wait is not ready after its signal");
    Ok(())
}

/// Fails unless `FENCE_INFO` of `f` places CurrentValue and MonitoredValue in `segments`
/// (`FENCE_SEGMENT_*`) with MonitoredValue `monitored`.
pub(crate) fn expect_placed(f: &Fence, segments: (u32, u32), monitored: u64, what: &str) -> TestResult {
    let i = f.info()?;
    ensure!(
        (i.current_segment, i.monitored_segment) == segments && i.monitored_value == monitored,
        "{what}: (CurrentValue, MonitoredValue) segments ({}, {}), MonitoredValue {:#x}; expected {segments:?}, {monitored:#x}",
        i.current_segment,
        i.monitored_segment,
        i.monitored_value
    );
    Ok(())
}

/// Where an optimized DEFAULT fence keeps its values.
pub(crate) const OPTIMIZED: (u32, u32) = (uapi::FENCE_SEGMENT_SYSTEM, uapi::FENCE_SEGMENT_VRAM);

/// Submits a GPU signal of `value` on `f` and polls until it ran (a `WAIT_PROGRESS` would arm
/// the progress fence's own interrupt).
pub(crate) fn signal_polled(q: &mut Queue, f: &Fence, value: u64) -> TestResult {
    let v = gpu_signal(q, f, value)?;
    ensure!(wait_until(WAIT, || q.completed() >= v), "the GPU signal of {value} did not complete");
    Ok(())
}

/// Waits (polling `FENCE_INFO`) until `f` has `pending` CPU waits and MonitoredValue `monitored`.
pub(crate) fn expect_monitored(f: &Fence, pending: u32, monitored: u64) -> TestResult {
    let ok = wait_until(WAIT, || f.info().is_ok_and(|i| i.pending_waits == pending && i.monitored_value == monitored));
    let i = f.info()?;
    ensure!(
        ok,
        "{} pending wait(s), MonitoredValue {:#x}; expected {pending}, {monitored:#x}",
        i.pending_waits,
        i.monitored_value
    );
    Ok(())
}
