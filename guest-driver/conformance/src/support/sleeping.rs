//! CPU waits that must sleep until an interrupt: a `WAIT_FENCE` or `WAIT_PROGRESS` for a value
//! the GPU writes later, reporting how it ended and how long the value had been in place.

use std::path::Path;
use std::time::{Duration, Instant};

use belfry_umd::{CommandBuffer, Device, FenceKind, QueueDesc, QueueMode};

use crate::support::fencelog::{gated_signal, warm_queue};
use crate::support::{wait_until, WAIT};

/// The CPU waits' timeout: [`SETTLE`], the GPU's write (slow on a loaded host: 0.8 s once, at
/// load 26), then the value in place (`fen.rs` asks for half a second, against a module that
/// polls; `mv.rs` for a return on the interrupt before the timeout).
pub(crate) const CPU_WAIT: Duration = Duration::from_millis(1500);

/// Time given to a pending wait's MonitoredValue update and its one re-read of CurrentValue
/// before the GPU is let go: twice what `fencelog::expect_asleep` gives the same re-read once
/// the update is seen.
const SETTLE: Duration = Duration::from_millis(200);

/// How a CPU wait ended.
pub(crate) struct Ended {
    /// Its result (`Err` when it timed out).
    pub(crate) result: belfry_umd::Result<()>,
    /// How long the GPU's value had been in place when it ended (zero if not yet).
    pub(crate) in_place: Duration,
}

/// `WAIT_FENCE`: the GPU signals a DEFAULT fence to 7 once the CPU opens a gate (a GPU wait on
/// a memory word), which the test does once the CPU wait for 7 is pending and its MonitoredValue
/// (6) applied; the value is read through the fence's read-only CurrentValue mapping.
pub(crate) fn wait_fence_for_a_later_gpu_signal(path: &Path) -> Result<Ended, crate::Error> {
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
pub(crate) fn wait_progress_for_a_later_completion(path: &Path) -> Result<Ended, crate::Error> {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let mut gate = ctx.alloc(4096, 0)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    let mut marker = ctx.create_queue(&QueueDesc::default().with_mode(QueueMode::UserMode))?;
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
