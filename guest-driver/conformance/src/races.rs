//! The CPU side of the GPU/CPU fence races (RACE-06, RACE-07), on the device started with the
//! test-only MonitoredValue-update faults (`Needs::RacyMonitoredUpdates`): each update is held
//! `SLOW_MONITORED_UPDATE_MS` before it is applied, an update finding CurrentValue already past
//! posts no record, and an update finding no interrupt due posts a (spurious) record anyway.

use std::path::Path;
use std::time::{Duration, Instant};

use belfry_abi::fence::MONITORED_VALUE_NONE;
use belfry_abi::uapi::{self, FenceInfo, IrqDebug};
use belfry_umd::{CommandBuffer, Device, FenceKind, QueueMode};

use crate::fencelog::{debug_when, delta, warm_queue};
use crate::{ensure, wait_until, Needs, Test, TestResult};

/// Bound of every poll; also the CPU waits' timeout.
const WAIT: Duration = Duration::from_secs(10);

/// Waits released by any interrupt path between two `IRQ_DEBUG` reads.
fn released(before: &IrqDebug, after: &IrqDebug) -> u64 {
    (0..after.released.len()).map(|i| after.released[i].wrapping_sub(before.released[i])).sum()
}

/// proves: RACE-06 — a GPU signal lands after the waiter's first check and before the device
/// applies its MonitoredValue update (the update is held `SLOW_MONITORED_UPDATE_MS`, 1 s; the
/// test opens the GPU's gate once the wait is pending and sees CurrentValue 7
/// with MonitoredValue still UINT64_MAX, so the signal raised no interrupt), and the update,
/// finding CurrentValue past it, posts no record on this device: the wait still ends, with no
/// interrupt path releasing it. Only the module's re-read of CurrentValue after the update
/// returned can end it; without that re-read the wait times out.
fn re_read_after_the_monitored_value_update_catches_a_signal_that_raced_it(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut gate = ctx.alloc(4096, 0)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    // The GPU signals 7 once the CPU opens the gate (a GPU wait on a plain word).
    let mut cb = CommandBuffer::new();
    cb.fence_wait(gate.va_at(0)?, 1, None)?.fence_signal(f.gpu_va(), 7, None)?;
    q.submit(&cb)?;
    let d0 = dev.irq_debug()?;
    let f = &f;
    std::thread::scope(|s| -> TestResult {
        let started = Instant::now();
        let waiter = s.spawn(move || (f.wait(7, WAIT), started.elapsed()));
        // Pending: the first check found 7 unreached; the update is on its way to the device.
        let registered = wait_until(WAIT, || f.info().is_ok_and(|i| i.pending_waits >= 1));
        ensure!(registered, "the CPU wait never became pending: {:?}", f.info()?);
        gate.write_u64(0, 1)?;
        let mut seen = FenceInfo::default();
        let signaled = wait_until(WAIT, || {
            f.info().is_ok_and(|i| {
                seen = i;
                i.current_value >= 7
            })
        });
        ensure!(signaled, "the GPU never signaled 7: {seen:?}");
        ensure!(
            seen.monitored_value == MONITORED_VALUE_NONE,
            "premise: the signal did not land before the update was applied (MonitoredValue {:#x}, \
             {:?} after the wait began)",
            seen.monitored_value,
            started.elapsed()
        );
        let (result, took) = waiter.join().map_err(|_| "waiter panicked")?;
        result.map_err(|e| format!("the wait did not end after its MonitoredValue update returned ({took:?}): {e}"))?;
        Ok(())
    })?;
    let d1 = dev.irq_debug()?;
    ensure!(released(&d0, &d1) == 0, "an interrupt path released the wait: {d0:?} -> {d1:?}");
    Ok(())
}

/// proves: RACE-07 — the device posts a native-fence record naming the fence although its
/// CurrentValue (0) reached no wait (the MonitoredValue update found no interrupt due): the
/// module re-reads CurrentValue instead of trusting the record, so the interrupt releases
/// nothing (counted in `IRQ_DEBUG`, no wait released) and the waiter stays asleep; the later
/// real signal releases it. A module that released the named fence's waiters on the record's
/// word would end the wait with the fence at 0.
fn spurious_fence_record_releases_no_wait_and_a_later_signal_does(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
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
        ensure!(!waiter.is_finished(), "the spurious record ended the wait: {:?}", f.info()?);
        let info = f.info()?;
        ensure!(info.current_value == 0 && info.monitored_value == 4, "unexpected fence state {info:?}");
        ensure!(info.pending_waits >= 1, "the wait is no longer pending: {info:?}");
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
    let d2 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.released[uapi::PATH_EXACT]) >= 1)?;
    ensure!(delta(&d0, &d2, |d| d.released[uapi::PATH_EXACT]) == 1, "the real signal's record released {d2:?}");
    Ok(())
}

/// The race tests, in order.
pub(crate) fn all() -> Vec<Test> {
    macro_rules! t {
        ($f:ident, $needs:ident, [$($id:literal),*]) => {
            Test { name: stringify!($f), ids: &[$($id),*], needs: Needs::$needs, run: $f }
        };
    }
    vec![
        t!(re_read_after_the_monitored_value_update_catches_a_signal_that_raced_it, RacyMonitoredUpdates, ["RACE-06"]),
        t!(spurious_fence_record_releases_no_wait_and_a_later_signal_does, RacyMonitoredUpdates, ["RACE-07"]),
    ]
}
