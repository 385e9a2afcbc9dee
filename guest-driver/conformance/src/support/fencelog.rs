//! Fence-log and interrupt-path helpers: warm queues (their doorbell connected and first
//! submission done), gated GPU signals, global fence handles and log slots, `IRQ_DEBUG` and
//! `DEBUG_STATS` deltas, and checks that a CPU wait sleeps until the right record releases it.

use std::time::Duration;

use belfry_abi::uapi_debug::IrqDebug;
use belfry_umd::{CommandBuffer, Context, Device, Fence, FenceHandle, FenceKind, LogSlot, Queue, QueueDesc, QueueMode};

use crate::support::{wait_until, WAIT};
use crate::TestResult;

/// A user-mode queue whose doorbell is connected (one write ran), so later submissions make
/// no kernel call.
pub(crate) fn warm_queue(ctx: &Context, mode: QueueMode) -> Result<Queue, crate::Error> {
    let mut q = ctx.create_queue(&QueueDesc::default().with_mode(mode))?;
    let scratch = ctx.alloc(4096, 0)?;
    let mut cb = CommandBuffer::new();
    cb.write32(scratch.va_at(0)?, 1)?;
    let done = q.submit(&cb)?;
    ensure!(wait_until(WAIT, || q.completed() >= done), "warm-up work did not run");
    Ok(q)
}

/// Queues on `q` a GPU signal of `f` to `value` behind a gate: the GPU marks word 8 of the
/// returned allocation (it runs the buffer), waits until the CPU writes 1 to word 0 (opens the
/// gate), then signals. Returns once the GPU is waiting at the gate.
pub(crate) fn gated_signal(
    ctx: &Context,
    q: &mut Queue,
    f: &Fence,
    value: u64,
) -> Result<belfry_umd::Allocation, crate::Error> {
    let gate = ctx.alloc(4096, 0)?;
    let mut cb = CommandBuffer::new();
    cb.write32(gate.va_at(8)?, 1)?.fence_wait(gate.va_at(0)?, 1, None)?.fence_signal(f.gpu_va(), value, None)?;
    q.submit(&cb)?;
    ensure!(wait_until(WAIT, || gate.read_u32(8).is_ok_and(|v| v == 1)), "the GPU never ran the signal's buffer");
    Ok(gate)
}

/// The global handle of `f` (what log entries record).
pub(crate) fn global(f: &Fence) -> Result<u64, crate::Error> {
    Ok(f.info()?.global_handle)
}

/// A log slot: entry `index` recording `f`'s global handle.
pub(crate) fn slot(index: u32, handle: u64) -> Option<LogSlot> {
    Some(LogSlot { index, handle: FenceHandle::new(handle) })
}

/// Waits until a CPU wait for `value` on `f` is asleep: pending, MonitoredValue set for it (a
/// native fence), and 100 ms more, so the waiter's own re-sample after the MonitoredValue
/// update is over and only an interrupt path can release it.
pub(crate) fn expect_asleep(f: &Fence, value: u64) -> TestResult {
    let native = f.kind() != FenceKind::Monitored;
    let ok = wait_until(WAIT, || {
        f.info().is_ok_and(|i| i.pending_waits >= 1 && (!native || i.monitored_value == value - 1))
    });
    ensure!(ok, "the CPU wait for {value} never became pending: {:?}", f.info()?);
    std::thread::sleep(Duration::from_millis(100));
    Ok(())
}

/// Waits on the CPU for `f` to reach `value` (in a thread) while `signal` runs once the wait
/// is asleep; fails unless the wait returns.
pub(crate) fn cpu_wait_released_by(f: &Fence, value: u64, signal: impl FnOnce() -> TestResult) -> TestResult {
    std::thread::scope(|s| -> TestResult {
        let waiter = s.spawn(|| f.wait(value, WAIT));
        expect_asleep(f, value)?;
        signal()?;
        waiter.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })
}

/// `IRQ_DEBUG` once `done(before, now)` holds, or the last read after [`WAIT`]: the interrupt
/// thread may count a release after it woke the waiter.
pub(crate) fn debug_when(
    dev: &Device,
    before: &IrqDebug,
    done: impl Fn(&IrqDebug, &IrqDebug) -> bool,
) -> Result<IrqDebug, crate::Error> {
    let mut last = dev.irq_debug()?;
    wait_until(WAIT, || {
        dev.irq_debug().is_ok_and(|d| {
            last = d;
            done(before, &last)
        })
    });
    Ok(last)
}

/// `after - before` for a counter.
pub(crate) fn delta(before: &IrqDebug, after: &IrqDebug, field: fn(&IrqDebug) -> u64) -> u64 {
    field(after).wrapping_sub(field(before))
}

/// Waits released by any interrupt path between two `IRQ_DEBUG` reads.
pub(crate) fn released(before: &IrqDebug, after: &IrqDebug) -> u64 {
    (0..after.released.len()).map(|i| after.released[i].wrapping_sub(before.released[i])).sum::<u64>()
        + after.queue_array_released.wrapping_sub(before.queue_array_released)
}
