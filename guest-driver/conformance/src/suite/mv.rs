//! MV-xx: MonitoredValue and conditional interrupts (RULES.md § MonitoredValue and conditional interrupts).

use std::path::Path;
use std::time::Duration;

use belfry_umd::{Allocation, CommandBuffer, Context, Device, FenceKind};

use crate::harness::channel::{Channel, Side};
use crate::harness::proc;
use crate::support::fences::{
    expect_monitored, expect_pending, expect_placed, fence_interrupts, gpu_signal, records_settled, signal_polled,
    OPTIMIZED,
};
use crate::support::fixture::open_context;
use crate::support::sleeping::{wait_fence_for_a_later_gpu_signal, wait_progress_for_a_later_completion, CPU_WAIT};
use crate::support::work::{expect_u32, kernel_queue, user_queue, write32};
use crate::support::{wait_until, WAIT};
use crate::{Test, TestResult};

/// proves: MV-06, MV-02 — with no CPU waiter MonitoredValue is UINT64_MAX and 32 GPU signals
/// raise no native-fence interrupt; one more signal with a CPU waiter pending raises one.
fn gpu_signals_without_a_waiter_raise_no_interrupt(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = user_queue(&ctx)?;
    // Kept until the write ran: a temporary would be freed (unmapped) before the GPU writes.
    let scratch = ctx_scratch(&ctx)?;
    let w = write32(&mut q, scratch.va_at(0)?, 1)?;
    ensure!(wait_until(WAIT, || q.completed() >= w), "warm-up work did not run");
    let info = f.info()?;
    ensure!(info.monitored_value == u64::MAX, "MonitoredValue {:#x} with no waiter", info.monitored_value);
    let before = fence_interrupts(&dev)?;
    // In batches that fit the ring, polling in between: a full ring would make the library
    // wait for a slot in WAIT_PROGRESS, whose progress-fence interrupts would count here.
    for batch in 0..4 {
        for v in 1..=8 {
            gpu_signal(&mut q, &f, batch * 8 + v)?;
        }
        let want = Some(batch * 8 + 8);
        ensure!(wait_until(WAIT, || f.value() == want), "CurrentValue {:?}, expected {want:?}", f.value());
        let done = q.last_submitted();
        ensure!(wait_until(WAIT, || q.completed() >= done), "batch {batch} did not complete");
    }
    let after = fence_interrupts(&dev)?;
    ensure!(after == before, "{} interrupt(s) for signals nobody waited for", after - before);
    std::thread::scope(|s| -> TestResult {
        let waiter = s.spawn(|| f.wait(33, WAIT));
        expect_pending(&f, 1)?;
        gpu_signal(&mut q, &f, 33)?;
        waiter.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    let last = fence_interrupts(&dev)?;
    ensure!(last > after, "the signal a CPU waiter needed raised no interrupt");
    Ok(())
}

/// A small allocation of `ctx` for warm-up writes.
fn ctx_scratch(ctx: &Context) -> belfry_umd::Result<Allocation> {
    ctx.alloc(4096, 0)
}

/// proves: MV-01, MV-02, MV-05, MV-07, MV-03 — the reference's example: CurrentValue 41 with a
/// CPU wait for 42 gives MonitoredValue 41; a second wait for 50 leaves it at 41; the GPU
/// signal of 42 releases the first wait and moves MonitoredValue to 49; the CPU signal of 50
/// releases the second and MonitoredValue returns to UINT64_MAX by the time the signal returns.
fn monitored_value_follows_the_pending_waits(path: &Path) -> TestResult {
    let (_dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 41)?;
    let mut q = user_queue(&ctx)?;
    let expect = |pending: u32, monitored: u64, what: &str| -> TestResult {
        let ok =
            wait_until(WAIT, || f.info().is_ok_and(|i| i.pending_waits == pending && i.monitored_value == monitored));
        let i = f.info()?;
        ensure!(
            ok,
            "{what}: {} pending wait(s), MonitoredValue {:#x}; expected {pending}, {monitored:#x}",
            i.pending_waits,
            i.monitored_value
        );
        Ok(())
    };
    expect(0, u64::MAX, "no waiter")?;
    std::thread::scope(|s| -> TestResult {
        let w42 = s.spawn(|| f.wait(42, WAIT));
        expect(1, 41, "a wait for 42 at CurrentValue 41")?;
        ensure!(f.info()?.current_value == 41, "CurrentValue {}", f.info()?.current_value);
        let w50 = s.spawn(|| f.wait(50, WAIT));
        expect(2, 41, "waits for 42 and 50")?;
        gpu_signal(&mut q, &f, 42)?;
        w42.join().map_err(|_| "waiter panicked")??;
        expect(1, 49, "after the signal of 42")?;
        ensure!(!w50.is_finished(), "the wait for 50 returned at 42");
        f.signal(50)?;
        // The signalling path moves MonitoredValue before it returns (MV-07), not the waiter.
        let mv = f.info()?.monitored_value;
        ensure!(mv == u64::MAX, "MonitoredValue {mv:#x} when the CPU signal of 50 returned, expected UINT64_MAX");
        w50.join().map_err(|_| "waiter panicked")??;
        expect(0, u64::MAX, "after the signal of 50")?;
        Ok(())
    })?;
    ensure!(f.value() == Some(50), "CurrentValue {:?}", f.value());
    Ok(())
}

/// proves: MV-09 — MonitoredValues of several fences go to the device in one batched
/// UPDATE_MONITORED_VALUES: a process that exits with eventfd waits on three fences has them
/// dropped unsignaled in one update carrying all three. Before that, eventfd waits on three
/// fences completed by one command buffer each move their fence's MonitoredValue to the
/// fence's remaining wait − 1, not UINT64_MAX (whether the interrupt thread sees the three
/// signals at once, and so batches them, depends on timing: not asserted).
fn eventfd_waits_on_several_fences_complete_in_one_batched_update(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let fences = (0..3).map(|_| ctx.create_fence(FenceKind::Default, 0, 0)).collect::<Result<Vec<_>, _>>()?;
    let mut q = user_queue(&ctx)?;
    let events = fences.iter().map(|f| f.event(1)).collect::<Result<Vec<_>, _>>()?;
    let keep = fences.iter().map(|f| f.event(2)).collect::<Result<Vec<_>, _>>()?;
    let mut cb = CommandBuffer::new();
    for f in &fences {
        cb.fence_signal(f.gpu_va(), 1, None)?;
    }
    q.submit(&cb)?;
    for (i, e) in events.iter().enumerate() {
        ensure!(e.wait(WAIT)?, "fence {i}: not ready after its GPU signal");
    }
    for (i, f) in fences.iter().enumerate() {
        let ok = wait_until(WAIT, || f.info().is_ok_and(|i| i.monitored_value == 1));
        ensure!(ok, "fence {i}: MonitoredValue {:#x}, expected 1", f.info()?.monitored_value);
    }
    for (f, k) in fences.iter().zip(&keep) {
        f.signal(2)?;
        ensure!(k.is_ready()?, "the second wait is not ready after the CPU signal");
    }
    let before = dev.fence_debug()?;
    let ch = Channel::new(WAIT)?;
    let child = proc::spawn("waiter", || {
        let dev = Device::open(path)?;
        let ctx = dev.create_context()?;
        let fences = (0..3).map(|_| ctx.create_fence(FenceKind::Default, 0, 0)).collect::<Result<Vec<_>, _>>()?;
        let events = fences.iter().map(|f| f.event(9)).collect::<Result<Vec<_>, _>>()?;
        ch.send(Side::Child, events.len() as u64, None)?;
        // Exit with the waits pending: the file's release drops them.
        std::mem::forget((events, fences, ctx, dev));
        Ok(())
    })?;
    let (n, _) = ch.recv(Side::Parent)?;
    child.join()?;
    ensure!(n == 3, "the child registered {n} waits");
    let after = dev.fence_debug()?;
    ensure!(after.event_waits == before.event_waits, "{} eventfd waits left after the exit", after.event_waits);
    ensure!(
        after.batched_updates > before.batched_updates && after.largest_batch >= 3,
        "the exit's three dropped waits gave {} batched update(s), largest {}",
        after.batched_updates - before.batched_updates,
        after.largest_batch
    );
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

/// proves: NF-13, FEN-02, MV-01, MV-06, MV-07 — on an optimized DEFAULT fence (MonitoredValue in
/// VRAM) every pairing works as on DEFAULT: a CPU wait for 3 sets MonitoredValue 2 and a CPU
/// signal ends it; a CPU wait for 10 sets 9, a GPU signal of 5 raises no interrupt and leaves it
/// asleep (the device compared against 9 in VRAM), one of 10 interrupts and wakes it; a CPU signal
/// releases a GPU wait on a kernel-mode queue; a GPU signal releases a GPU wait on another queue
/// with no interrupt; a pollable wait for 20 sets 19 and a GPU signal makes it ready. After each
/// wait MonitoredValue is back at UINT64_MAX.
fn optimized_default_fence_serves_every_cpu_and_gpu_pairing(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    expect_placed(&f, OPTIMIZED, u64::MAX, "the fence")?;
    let buf = ctx.alloc(4096, 0)?;
    let mut signaler = user_queue(&ctx)?;
    let mut waiter = user_queue(&ctx)?;
    let mut kq = kernel_queue(&ctx)?;
    let s0 = write32(&mut signaler, buf.va_at(16)?, 1)?;
    let w0 = write32(&mut waiter, buf.va_at(20)?, 1)?;
    let k0 = write32(&mut kq, buf.va_at(24)?, 1)?;
    let warm = wait_until(WAIT, || signaler.completed() >= s0 && waiter.completed() >= w0 && kq.completed() >= k0);
    ensure!(warm, "warm-up work did not run");

    // CPU signal / CPU wait.
    std::thread::scope(|s| -> TestResult {
        let w = s.spawn(|| f.wait(3, WAIT));
        expect_monitored(&f, 1, 2)?;
        f.signal(3)?;
        w.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    expect_monitored(&f, 0, u64::MAX)?;

    // GPU signal / CPU wait: the device compares against the MonitoredValue in VRAM.
    std::thread::scope(|s| -> TestResult {
        let w = s.spawn(|| f.wait(10, WAIT));
        expect_monitored(&f, 1, 9)?;
        let before = fence_interrupts(&dev)?;
        signal_polled(&mut signaler, &f, 5)?;
        records_settled(&dev, &mut signaler)?;
        let low = fence_interrupts(&dev)?;
        ensure!(low == before, "a signal of 5 under MonitoredValue 9 raised {} interrupt(s)", low - before);
        ensure!(!w.is_finished(), "the wait for 10 ended at 5");
        signal_polled(&mut signaler, &f, 10)?;
        w.join().map_err(|_| "waiter panicked")??;
        ensure!(fence_interrupts(&dev)? > low, "the signal of 10 raised no interrupt");
        Ok(())
    })?;
    expect_monitored(&f, 0, u64::MAX)?;

    // CPU signal / GPU wait (a kernel-mode queue's QUEUE_WAIT_FENCE).
    kq.wait_fence(&f, 12)?;
    let done = write32(&mut kq, buf.va_at(0)?, 0xC1)?;
    std::thread::sleep(Duration::from_millis(100));
    ensure!(buf.read_u32(0)? == 0, "the work behind the GPU wait for 12 ran before the signal");
    f.signal(12)?;
    ensure!(wait_until(WAIT, || kq.completed() >= done), "the CPU signal did not release the GPU wait");
    expect_u32(&buf, 0, 0xC1, "the write behind the GPU wait for 12")?;

    // GPU signal / GPU wait: no CPU involved, no interrupt.
    let before = fence_interrupts(&dev)?;
    let mut cb = CommandBuffer::new();
    cb.fence_wait(f.gpu_va(), 14, None)?.write32(buf.va_at(4)?, 0xC2)?;
    let done = waiter.submit(&cb)?;
    std::thread::sleep(Duration::from_millis(100));
    ensure!(buf.read_u32(4)? == 0, "the work behind the GPU wait for 14 ran before the signal");
    signal_polled(&mut signaler, &f, 14)?;
    ensure!(wait_until(WAIT, || waiter.completed() >= done), "the GPU signal did not release the GPU wait");
    expect_u32(&buf, 4, 0xC2, "the write behind the GPU wait for 14")?;
    let irqs = fence_interrupts(&dev)? - before;
    ensure!(irqs == 0, "{irqs} native-fence interrupt(s) during a GPU-only signal/wait");

    // GPU signal / pollable CPU wait.
    let ev = f.event(20)?;
    expect_monitored(&f, 1, 19)?;
    ensure!(!ev.is_ready()?, "the pollable wait for 20 is ready at 14");
    signal_polled(&mut signaler, &f, 20)?;
    ensure!(ev.wait(WAIT)?, "the pollable wait for 20 not ready after the GPU signal");
    expect_pending(&f, 0)?;
    expect_monitored(&f, 0, u64::MAX)?;
    ensure!(f.value() == Some(20), "CurrentValue {:?}, expected 20", f.value());
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(gpu_signals_without_a_waiter_raise_no_interrupt, Default, ["MV-06", "MV-02"]),
        test_entry!(monitored_value_follows_the_pending_waits, Default, ["MV-01", "MV-02", "MV-05", "MV-07", "MV-03"]),
        test_entry!(eventfd_waits_on_several_fences_complete_in_one_batched_update, Default, ["MV-09"]),
        test_entry!(cpu_waits_for_a_later_gpu_value_return_on_its_interrupt, Default, ["MV-07"]),
        test_entry!(
            optimized_default_fence_serves_every_cpu_and_gpu_pairing,
            Default,
            ["NF-13", "FEN-02", "MV-01", "MV-06", "MV-07"]
        ),
    ]
}
