//! RACE-xx: CPU/GPU synchronization races (RULES.md § CPU/GPU synchronization races).

use std::path::Path;
use std::time::{Duration, Instant};

use belfry_abi::regs::{HOLD_MONITORED_UPDATE_TOKEN, SLOW_MONITORED_UPDATE_MS};
use belfry_abi::uapi_debug;
use belfry_umd::{wait_all, CommandBuffer, Context, Deadline, Device, Fence, FenceKind, Queue, QueueMode};

use crate::support::fencelog::{cpu_wait_released_by, debug_when, delta, gated_signal, released, warm_queue};
use crate::support::fixture::open_context;
use crate::support::work::notify_ran;
use crate::support::{wait_until, WAIT};
use crate::{Test, TestResult};

/// A CPU wait for 7 on `f` (blocking, or an eventfd): `Ok` once it ended satisfied.
type CpuWait = fn(&Fence) -> TestResult;

/// Arms the racy device's hold of the next MonitoredValue update it accepts: held until a
/// signal of each fence it names landed, at most `SLOW_MONITORED_UPDATE_MS` (1 s), then
/// applied. A NOTIFY with `HOLD_MONITORED_UPDATE_TOKEN` on `q`, run before this returns; called
/// with no other update on its way, so the update held is the next CPU wait's.
fn hold_the_next_update(q: &mut Queue) -> TestResult {
    notify_ran(q, HOLD_MONITORED_UPDATE_TOKEN)
}

/// Races a GPU signal with the MonitoredValue update of `wait`: the signal lands after the
/// wait's first check and before the device applies the update (held by
/// [`hold_the_next_update`] until the signal landed, at most `SLOW_MONITORED_UPDATE_MS`, 1 s,
/// after it was accepted: the test opens the GPU's gate once the wait is pending and sees
/// CurrentValue 7 within that second, while MonitoredValue was still UINT64_MAX, so the signal
/// raised no interrupt),
/// and the update, finding CurrentValue past it, posts no record on this device. The wait must
/// still end, with no interrupt path releasing it.
fn signal_racing_the_update_of(path: &Path, wait: CpuWait) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    hold_the_next_update(&mut q)?;
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
        // The device applies the update once the signal landed or `SLOW_MONITORED_UPDATE_MS`
        // after accepting it, which was after `started`: a signal seen earlier landed before
        // MonitoredValue was written.
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

/// Queues on `q` GPU signals of each fence of `fences` to `value` behind one gate (as
/// [`gated_signal`]): returns once the GPU is waiting at the gate; writing 1 to word 0 of the
/// returned allocation opens it.
fn gated_signals(
    ctx: &Context,
    q: &mut Queue,
    fences: &[&Fence],
    value: u64,
) -> Result<belfry_umd::Allocation, crate::Error> {
    let gate = ctx.alloc(4096, 0)?;
    let mut cb = CommandBuffer::new();
    cb.write32(gate.va_at(8)?, 1)?.fence_wait(gate.va_at(0)?, 1, None)?;
    for f in fences {
        cb.fence_signal(f.gpu_va(), value, None)?;
    }
    q.submit(&cb)?;
    ensure!(wait_until(WAIT, || gate.read_u32(8).is_ok_and(|v| v == 1)), "the GPU never ran the signals' buffer");
    Ok(gate)
}

/// Opens `gate` once a CPU wait of `dev` is pending (its MonitoredValue update on its way to
/// the racy device, which holds it as [`hold_the_next_update`] armed it: until the signal
/// landed, at most `SLOW_MONITORED_UPDATE_MS`), and returns once the GPU wrote `value` to `f`,
/// checking that this happened within that second: before the update was applied.
fn open_during_the_update(
    dev: &Device,
    gate: &mut belfry_umd::Allocation,
    f: &Fence,
    value: u64,
    started: Instant,
) -> TestResult {
    let registered = wait_until(WAIT, || dev.fence_debug().is_ok_and(|d| d.cpu_waits + d.event_waits >= 1));
    ensure!(registered, "the CPU wait never became pending: {:?}", dev.fence_debug()?);
    gate.write_u64(0, 1)?;
    let signaled = wait_until(WAIT, || f.value().is_some_and(|v| v >= value));
    let at = started.elapsed();
    ensure!(signaled, "the GPU never signaled {value}: {:?}", f.value());
    ensure!(
        at < Duration::from_millis(SLOW_MONITORED_UPDATE_MS),
        "premise: the signal landed {at:?} after the wait began, maybe after the update was applied"
    );
    Ok(())
}

/// How many times the first race of RACE-01 is set up before the test gives up on seeing its
/// wait asleep when the GPU signals: a waiter whose thread the guest had not run since the
/// MonitoredValue update returned (a loaded host) ends on its own re-read of CurrentValue
/// instead, the interrupt still raised but releasing nothing.
const ASLEEP_ATTEMPTS: u32 = 5;

/// proves: RACE-01 — both races the reference names, through one device file. First, the GPU
/// reads the MonitoredValue the module set: once a blocking wait for 5 is asleep with
/// MonitoredValue 4 applied, the GPU's signal of 5 raises the interrupt that releases it (an
/// exact record, counted; set up again, at most [`ASLEEP_ATTEMPTS`] times, while the waiter
/// ends on its own re-read before it slept). Second, a CurrentValue written while the CMP is
/// still deciding on the MonitoredValue update of a wait for 7 (the racy device holds the
/// update until the signal landed and then posts no record for it) is visible to the module's
/// read of CurrentValue once the update returned: that wait ends too, with no interrupt path
/// releasing it. A module that read CurrentValue before the update returned misses the second.
fn neither_a_stale_monitored_value_nor_a_signal_during_the_update_loses_a_wake_up(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    // The GPU reads the MonitoredValue the module set.
    let mut asleep = false;
    for _ in 0..ASLEEP_ATTEMPTS {
        let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
        let d0 = dev.irq_debug()?;
        cpu_wait_released_by(&f, 5, || {
            let mut cb = CommandBuffer::new();
            cb.fence_signal(f.gpu_va(), 5, None)?;
            q.submit(&cb)?;
            Ok(())
        })
        .map_err(|e| format!("the GPU's signal past the MonitoredValue the module set did not end the wait: {e}"))?;
        let d1 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.released[uapi_debug::PATH_EXACT]) >= 1)?;
        ensure!(
            delta(&d0, &d1, |d| d.exact_records) >= 1,
            "the GPU's signal of 5 past MonitoredValue 4 posted no exact record: {d0:?} -> {d1:?}"
        );
        // The interrupt path (or the wait's withdrawal) moves MonitoredValue on to UINT64_MAX
        // by an update of its own: once it is applied, the next update is the next wait's.
        let rearmed = wait_until(WAIT, || f.info().is_ok_and(|i| i.monitored_value == u64::MAX));
        ensure!(rearmed, "the ended wait's fence kept MonitoredValue {:?}", f.info()?.monitored_value);
        if delta(&d0, &d1, |d| d.released[uapi_debug::PATH_EXACT]) >= 1 {
            asleep = true;
            break;
        }
        ensure!(released(&d0, &d1) == 0, "a path other than the exact record released the wait: {d0:?} -> {d1:?}");
    }
    ensure!(
        asleep,
        "in {ASLEEP_ATTEMPTS} attempts no interrupt released the wait: each ended on its own re-read of CurrentValue"
    );
    // A CurrentValue written while the CMP decides on the update (the first race's updates
    // all applied: the next update is the second wait's).
    let g = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let d1 = dev.irq_debug()?;
    hold_the_next_update(&mut q)?;
    let mut gate = gated_signals(&ctx, &mut q, &[&g], 7)?;
    let g = &g;
    std::thread::scope(|s| -> TestResult {
        let started = Instant::now();
        let waiter = s.spawn(move || g.wait(7, WAIT));
        open_during_the_update(&dev, &mut gate, g, 7, started)?;
        waiter
            .join()
            .map_err(|_| "waiter panicked")?
            .map_err(|e| format!("a CurrentValue written while the CMP applied the update was lost: {e}"))?;
        Ok(())
    })?;
    let d2 = dev.irq_debug()?;
    ensure!(released(&d1, &d2) == 0, "an interrupt path released the second wait: {d1:?} -> {d2:?}");
    Ok(())
}

/// proves: RACE-03 — the module's read of CurrentValue (step 3) comes after its
/// MonitoredValue update returned, and so after the device's barrier: a blocking wait for two
/// fences sends one batched update (held by the racy device until both signals landed, at
/// most a second; it then posts no record for it); both fences are signalled while it is held,
/// and the wait ends on the module's one read after the batch returned, no interrupt path
/// releasing either. A module reading before the update returned (step 3 before step 2) sleeps
/// for ever.
fn the_read_after_a_batched_update_returns_sees_every_signal_that_raced_it(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let g = ctx.create_fence(FenceKind::Default, 0, 0)?;
    hold_the_next_update(&mut q)?;
    let mut gate = gated_signals(&ctx, &mut q, &[&f, &g], 7)?;
    let d0 = dev.irq_debug()?;
    let (f, g) = (&f, &g);
    std::thread::scope(|s| -> TestResult {
        let started = Instant::now();
        let waiter = s.spawn(move || wait_all(&[f.point(7), g.point(7)], Deadline::after(WAIT)));
        open_during_the_update(&dev, &mut gate, g, 7, started)?;
        ensure!(f.value() == Some(7), "the first signal did not land: {:?}", f.value());
        waiter
            .join()
            .map_err(|_| "waiter panicked")?
            .map_err(|e| format!("signals landing while the batched update was held were lost: {e}"))?;
        Ok(())
    })?;
    let d1 = dev.irq_debug()?;
    ensure!(released(&d0, &d1) == 0, "an interrupt path released the wait: {d0:?} -> {d1:?}");
    Ok(())
}

/// proves: RACE-05 — once the module's MonitoredValue update of a pollable wait
/// (`WAIT_FENCE_EVENTFD`) returns, the CurrentValue it reads is the one the CMP wrote after it
/// observed the update: the GPU signals 7 while the racy device holds the update (until the
/// signal landed, at most a second; it then posts no record for it), and when the call returns
/// the eventfd is already readable — no later interrupt is needed or comes. A module that read
/// CurrentValue before its update returned leaves the eventfd unreadable.
fn a_pollable_wait_reads_current_value_only_after_its_update_returned(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    hold_the_next_update(&mut q)?;
    let mut gate = gated_signals(&ctx, &mut q, &[&f], 7)?;
    let d0 = dev.irq_debug()?;
    let f = &f;
    std::thread::scope(|s| -> TestResult {
        let started = Instant::now();
        let waiter = s.spawn(move || -> Result<bool, crate::Error> { Ok(f.event(7)?.is_ready()?) });
        open_during_the_update(&dev, &mut gate, f, 7, started)?;
        let ready = waiter.join().map_err(|_| "waiter panicked")??;
        ensure!(ready, "the eventfd was not readable when WAIT_FENCE_EVENTFD returned, CurrentValue 7 written before");
        Ok(())
    })?;
    let d1 = dev.irq_debug()?;
    ensure!(released(&d0, &d1) == 0, "an interrupt path released the wait: {d0:?} -> {d1:?}");
    Ok(())
}

/// proves: RACE-08 — whatever the interleaving of wait registration, withdrawal and GPU
/// signals, MonitoredValue stays at the lowest pending wait − 1, so no wake-up is missed: with
/// a wait for 10 asleep (MonitoredValue 9), a wait for 20 registered after it leaves 9; a wait
/// for 5 that times out (withdrawn) lowers it to 4 and, withdrawn, puts it back to 9, not to
/// UINT64_MAX; the GPU's signal of 10 then interrupts and ends the first wait (an exact record),
/// MonitoredValue moves on to 19, and the signal of 20 ends the second.
fn registering_and_withdrawing_waits_never_hide_a_pending_wait_from_the_gpu(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    let monitored = |want: u64, pending: u32| -> TestResult {
        let ok = wait_until(WAIT, || f.info().is_ok_and(|i| i.pending_waits >= pending && i.monitored_value == want));
        ensure!(ok, "expected MonitoredValue {want} with {pending} waits pending: {:?}", f.info()?);
        Ok(())
    };
    let signal = |q: &mut belfry_umd::Queue, value: u64| -> TestResult {
        let mut cb = CommandBuffer::new();
        cb.fence_signal(f.gpu_va(), value, None)?;
        q.submit(&cb)?;
        Ok(())
    };
    let d0 = dev.irq_debug()?;
    std::thread::scope(|s| -> TestResult {
        let first = s.spawn(|| f.wait(10, WAIT));
        monitored(9, 1)?;
        let second = s.spawn(|| f.wait(20, WAIT));
        ensure!(
            wait_until(WAIT, || f.info().is_ok_and(|i| i.pending_waits >= 2)),
            "the second wait never became pending: {:?}",
            f.info()?
        );
        monitored(9, 2)?;
        match f.wait(5, Duration::from_millis(50)) {
            Err(e) if e.errno() == Some(libc::ETIMEDOUT) => {}
            other => return Err(format!("the wait for 5 did not time out: {other:?}").into()),
        }
        monitored(9, 2)?;
        signal(&mut q, 10)?;
        first
            .join()
            .map_err(|_| "waiter panicked")?
            .map_err(|e| format!("the wait for 10 missed its wake-up after another wait was withdrawn: {e}"))?;
        monitored(19, 1)?;
        signal(&mut q, 20)?;
        second
            .join()
            .map_err(|_| "waiter panicked")?
            .map_err(|e| format!("the wait for 20 missed its wake-up: {e}"))?;
        Ok(())
    })?;
    let d1 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.released[uapi_debug::PATH_EXACT]) >= 2)?;
    ensure!(delta(&d0, &d1, |d| d.released[uapi_debug::PATH_EXACT]) >= 2, "interrupts released {d1:?}");
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
        test_entry!(
            neither_a_stale_monitored_value_nor_a_signal_during_the_update_loses_a_wake_up,
            RacyMonitoredUpdates,
            ["RACE-01"]
        ),
        test_entry!(
            the_read_after_a_batched_update_returns_sees_every_signal_that_raced_it,
            RacyMonitoredUpdates,
            ["RACE-03"]
        ),
        test_entry!(
            a_pollable_wait_reads_current_value_only_after_its_update_returned,
            RacyMonitoredUpdates,
            ["RACE-05"]
        ),
        test_entry!(registering_and_withdrawing_waits_never_hide_a_pending_wait_from_the_gpu, Default, ["RACE-08"]),
    ]
}
