//! RACE-xx: CPU/GPU synchronization races (RULES.md § CPU/GPU synchronization races).

use std::path::Path;
use std::time::{Duration, Instant};

use belfry_abi::regs::SLOW_MONITORED_UPDATE_MS;
use belfry_abi::uapi_debug;
use belfry_umd::{CommandBuffer, Device, Fence, FenceKind, QueueMode};

use crate::support::fencelog::{debug_when, delta, gated_signal, released, warm_queue};
use crate::support::fixture::open_context;
use crate::support::{wait_until, WAIT};
use crate::{Test, TestResult};

/// A CPU wait for 7 on `f` (blocking, or an eventfd): `Ok` once it ended satisfied.
type CpuWait = fn(&Fence) -> TestResult;

/// Races a GPU signal with the MonitoredValue update of `wait`: the signal lands after the
/// wait's first check and before the device applies the update (held
/// `SLOW_MONITORED_UPDATE_MS`, 1 s, after it was accepted: the test opens the GPU's gate once
/// the wait is pending and sees CurrentValue 7 well within that second, while MonitoredValue
/// was still UINT64_MAX, so the signal raised no interrupt),
/// and the update, finding CurrentValue past it, posts no record on this device. The wait must
/// still end, with no interrupt path releasing it.
fn signal_racing_the_update_of(path: &Path, wait: CpuWait) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    let mut gate = gated_signal(&ctx, &mut q, &f, 7)?;
    let d0 = dev.irq_debug()?;
    let f = &f;
    std::thread::scope(|s| -> TestResult {
        let started = Instant::now();
        let waiter = s.spawn(move || (wait(f), started.elapsed()));
        // Pending: the first check found 7 unreached; the update is on its way to the device
        // (read through FENCE_DEBUG: the eventfd ioctl holds the file's lock, FENCE_INFO waits).
        let registered = wait_until(WAIT, || dev.fence_debug().is_ok_and(|d| d.cpu_waits + d.event_waits >= 1));
        ensure!(registered, "the CPU wait never became pending: {:?}", dev.fence_debug()?);
        gate.write_u64(0, 1)?;
        let signaled = wait_until(WAIT, || f.value().is_some_and(|v| v >= 7));
        let at = started.elapsed();
        ensure!(signaled, "the GPU never signaled 7: {:?}", f.value());
        // The device applies the update `SLOW_MONITORED_UPDATE_MS` after accepting it, which
        // was after `started`: a signal seen earlier landed before MonitoredValue was written.
        ensure!(
            at < Duration::from_millis(SLOW_MONITORED_UPDATE_MS),
            "premise: the signal landed {at:?} after the wait began, maybe after the update was applied"
        );
        let (result, took) = waiter.join().map_err(|_| "waiter panicked")?;
        result.map_err(|e| format!("the wait did not end after its MonitoredValue update returned ({took:?}): {e}"))?;
        Ok(())
    })?;
    let d1 = dev.irq_debug()?;
    ensure!(released(&d0, &d1) == 0, "an interrupt path released the wait: {d0:?} -> {d1:?}");
    Ok(())
}

/// proves: RACE-06 — a blocking CPU wait (`WAIT_FENCE`) whose GPU signal raced its
/// MonitoredValue update (see [`signal_racing_the_update_of`]) ends: only the module's re-read
/// of CurrentValue after the update returned can end it; without that re-read it times out.
fn re_read_after_the_monitored_value_update_catches_a_signal_that_raced_it(path: &Path) -> TestResult {
    signal_racing_the_update_of(path, |f| Ok(f.wait(7, WAIT)?))
}

/// proves: RACE-06 — the same race for a pollable wait (`WAIT_FENCE_EVENTFD`): the eventfd
/// becomes readable although no record came; only the module's re-read (`complete`) after the
/// batched MonitoredValue update can signal it; without that re-read it never does.
fn re_read_after_the_monitored_value_update_signals_a_raced_eventfd_wait(path: &Path) -> TestResult {
    signal_racing_the_update_of(path, |f| {
        let event = f.event(7)?;
        ensure!(event.wait(WAIT)?, "the eventfd never became readable");
        Ok(())
    })
}

/// proves: RACE-07 — the device posts a native-fence record naming the fence although its
/// CurrentValue (0) reached no wait (the MonitoredValue update found no interrupt due): the
/// module re-reads CurrentValue instead of trusting the record, so the interrupt releases
/// nothing (counted in `IRQ_DEBUG`, no wait released) and the waiter stays asleep; the later
/// real signal releases it. A module that released the named fence's waiters on the record's
/// word would end the wait with the fence at 0.
fn spurious_fence_record_releases_no_wait_and_a_later_signal_does(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    let d0 = dev.irq_debug()?;
    std::thread::scope(|s| -> TestResult {
        let waiter = s.spawn(|| f.wait(5, WAIT));
        // The update is applied (MonitoredValue 4 for the wait for 5) and its record counted;
        // then the interrupt thread is given time to finish with it.
        let applied = wait_until(WAIT, || f.info().is_ok_and(|i| i.monitored_value == 4));
        ensure!(applied, "the MonitoredValue update was never applied: {:?}", f.info()?);
        debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.exact_records) >= 1)?;
        std::thread::sleep(Duration::from_millis(300));
        let d1 = dev.irq_debug()?;
        ensure!(delta(&d0, &d1, |d| d.exact_records) >= 1, "the device posted no spurious record: {d1:?}");
        // Released, the waiter would still be in its withdrawal update: look at the wait itself.
        let info = f.info()?;
        ensure!(
            info.pending_waits >= 1 && !waiter.is_finished(),
            "the spurious record released the wait with the fence at {}: {info:?}",
            info.current_value
        );
        ensure!(info.current_value == 0 && info.monitored_value == 4, "unexpected fence state {info:?}");
        ensure!(released(&d0, &d1) == 0, "the spurious record released a wait: {d0:?} -> {d1:?}");
        let mut cb = CommandBuffer::new();
        cb.fence_signal(f.gpu_va(), 5, None)?;
        q.submit(&cb)?;
        waiter
            .join()
            .map_err(|_| "waiter panicked")?
            .map_err(|e| format!("the real signal did not end the wait: {e}"))?;
        Ok(())
    })?;
    let d2 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.released[uapi_debug::PATH_EXACT]) >= 1)?;
    ensure!(delta(&d0, &d2, |d| d.released[uapi_debug::PATH_EXACT]) == 1, "the real signal's record released {d2:?}");
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(
            re_read_after_the_monitored_value_update_catches_a_signal_that_raced_it,
            RacyMonitoredUpdates,
            ["RACE-06"]
        ),
        test_entry!(
            re_read_after_the_monitored_value_update_signals_a_raced_eventfd_wait,
            RacyMonitoredUpdates,
            ["RACE-06"]
        ),
        test_entry!(spurious_fence_record_releases_no_wait_and_a_later_signal_does, RacyMonitoredUpdates, ["RACE-07"]),
    ]
}
