//! CPU waits sleep until an interrupt: on the device started with the test-only
//! `--inject no-fence-interrupts` (`Needs::NoFenceInterrupts`: fence-signaled records are
//! dropped, the mailbox and other interrupts still work) a blocking CPU wait for a value the GPU
//! writes after the wait began times out with the value in place, where a module that polled
//! CurrentValue would return; the same waits on the default device return.

use std::path::Path;
use std::time::{Duration, Instant};

use belfry_umd::{CommandBuffer, Device, FenceKind, QueueDesc, QueueMode};

use crate::fencelog::{gated_signal, warm_queue};
use crate::{ensure, wait_until, Test, TestResult};

/// Bound of every poll.
const WAIT: Duration = Duration::from_secs(10);
/// The CPU waits' timeout.
const CPU_WAIT: Duration = Duration::from_secs(2);
/// Time given to a pending wait's MonitoredValue update and its one re-read of CurrentValue
/// before the GPU is let go.
const SETTLE: Duration = Duration::from_millis(500);
/// How long the value must have been in place when a wait ended by timing out, for that
/// timeout to show the wait slept through it.
const IN_PLACE: Duration = Duration::from_millis(1000);

/// How a CPU wait ended.
struct Ended {
    /// Its result (`Err` when it timed out).
    result: belfry_umd::Result<()>,
    /// How long the GPU's value had been in place when it ended (zero if not yet).
    in_place: Duration,
}

/// `WAIT_FENCE`: the GPU signals a DEFAULT fence to 7 once the CPU opens a gate (a GPU wait on
/// a memory word), which the test does once the CPU wait for 7 is pending and its MonitoredValue
/// (6) applied; the value is read through the fence's read-only CurrentValue mapping.
fn wait_fence_for_a_later_gpu_signal(path: &Path) -> Result<Ended, crate::Error> {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    let mut gate = gated_signal(&ctx, &mut q, &f, 7)?;
    let f = &f;
    std::thread::scope(|s| -> Result<Ended, crate::Error> {
        let started = Instant::now();
        let waiter = s.spawn(move || (f.wait(7, CPU_WAIT), started.elapsed()));
        let pending = wait_until(WAIT, || f.info().is_ok_and(|i| i.pending_waits >= 1 && i.monitored_value == 6));
        ensure!(pending, "the CPU wait never became pending: {:?}", f.info()?);
        std::thread::sleep(SETTLE);
        ensure!(f.value() == Some(0) && !waiter.is_finished(), "the wait ended before the GPU signaled");
        gate.write_u64(0, 1)?;
        ensure!(wait_until(WAIT, || f.value().is_some_and(|v| v >= 7)), "the GPU never signaled 7: {:?}", f.value());
        let seen = started.elapsed();
        let (result, ended) = waiter.join().map_err(|_| "waiter panicked")?;
        Ok(Ended { result, in_place: ended.saturating_sub(seen) })
    })
}

/// `WAIT_PROGRESS`: a queue's buffer waits on a gate (a GPU wait on a memory word) that the test
/// opens once the CPU wait for its progress value is pending; another queue's GPU wait on that
/// progress fence then writes a marker, so the CPU sees the value was written (and, after the
/// wait, reads it through the queue's read-only progress mapping).
fn wait_progress_for_a_later_completion(path: &Path) -> Result<Ended, crate::Error> {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let mut gate = ctx.alloc(4096, 0)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    let mut marker = ctx.create_queue(&QueueDesc { mode: QueueMode::UserMode, ..QueueDesc::default() })?;
    let mut cb = CommandBuffer::new();
    cb.write32(gate.va_at(8)?, 1)?.fence_wait(gate.va_at(0)?, 1, None)?;
    let done = q.submit(&cb)?;
    let mut mark = CommandBuffer::new();
    mark.fence_wait(q.progress_fence_va(), done, None)?.write32(gate.va_at(16)?, 1)?;
    marker.submit(&mark)?;
    ensure!(wait_until(WAIT, || gate.read_u32(8).is_ok_and(|v| v == 1)), "the GPU never ran the gated buffer");
    let q = &mut q;
    let (ended, completed) = std::thread::scope(|s| -> Result<(Ended, u64), crate::Error> {
        let started = Instant::now();
        let waiter = s.spawn(move || {
            let result = q.wait(done, CPU_WAIT);
            (result, started.elapsed(), q.completed())
        });
        let pending = wait_until(WAIT, || dev.fence_debug().is_ok_and(|d| d.cpu_waits >= 1));
        ensure!(pending, "the CPU wait never became pending: {:?}", dev.fence_debug()?);
        std::thread::sleep(SETTLE);
        ensure!(!waiter.is_finished(), "the wait ended before the GPU completed the buffer");
        gate.write_u64(0, 1)?;
        let written = wait_until(WAIT, || gate.read_u32(16).is_ok_and(|v| v == 1));
        ensure!(written, "the GPU never wrote progress value {done}");
        let seen = started.elapsed();
        let (result, ended, completed) = waiter.join().map_err(|_| "waiter panicked")?;
        Ok((Ended { result, in_place: ended.saturating_sub(seen) }, completed))
    })?;
    ensure!(completed >= done, "the progress mapping reads {completed} after the wait, below {done}");
    Ok(ended)
}

/// proves: FEN-17 — with the device's fence-signaled interrupts suppressed, a blocking
/// `WAIT_FENCE` (timeout 2 s) for a value the GPU wrote after the wait began, and a
/// `WAIT_PROGRESS` for a completion after it began, each time out although the value had been
/// in place (read through the read-only mapping) for at least a second: the module sleeps until
/// an interrupt releases the wait. A module that polled CurrentValue, or that returned before
/// the value was reached, would return.
fn cpu_waits_sleep_until_an_interrupt_and_time_out_without_one(path: &Path) -> TestResult {
    for (what, ended) in [
        ("WAIT_FENCE", wait_fence_for_a_later_gpu_signal(path)?),
        ("WAIT_PROGRESS", wait_progress_for_a_later_completion(path)?),
    ] {
        ensure!(ended.result.is_err(), "{what} returned with no fence interrupt: the module polls");
        let timed_out = match &ended.result {
            Err(belfry_umd::Error::Timeout { .. }) => true,
            Err(e) => e.errno() == Some(libc::ETIMEDOUT),
            Ok(()) => false,
        };
        ensure!(timed_out, "{what} failed otherwise than by timing out: {:?}", ended.result);
        ensure!(
            ended.in_place >= IN_PLACE,
            "premise: {what} timed out only {:?} after the value was in place",
            ended.in_place
        );
    }
    Ok(())
}

/// proves: MV-07 — the same waits on the default device return once the GPU writes the value:
/// the fence interrupt releases them (the control of the test above; without the release on the
/// interrupt, this module's waits time out).
fn cpu_waits_for_a_later_gpu_value_return_on_its_interrupt(path: &Path) -> TestResult {
    for (what, ended) in [
        ("WAIT_FENCE", wait_fence_for_a_later_gpu_signal(path)?),
        ("WAIT_PROGRESS", wait_progress_for_a_later_completion(path)?),
    ] {
        ended.result.map_err(|e| format!("{what} did not return after the GPU wrote the value: {e}"))?;
        ensure!(ended.in_place < CPU_WAIT, "{what} returned late: {:?} after the value", ended.in_place);
    }
    Ok(())
}

/// The sleeping-wait tests, in order.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(cpu_waits_sleep_until_an_interrupt_and_time_out_without_one, NoFenceInterrupts, ["FEN-17"]),
        test_entry!(cpu_waits_for_a_later_gpu_value_return_on_its_interrupt, Default, ["MV-07"]),
    ]
}
