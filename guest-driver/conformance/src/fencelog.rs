//! Fence logs, the module's native-fence interrupt paths and the timeline: tests on the
//! default device (exact records), the per-queue device and the scan-all device, read through
//! `IRQ_DEBUG` and `READ_TIMELINE`.

use std::path::Path;
use std::time::Duration;

use belfry_abi::uapi::{self, IrqDebug, TimelineEntry};
use belfry_umd::{CommandBuffer, Context, Device, Fence, FenceKind, LogSlot, Queue, QueueDesc, QueueMode, Timeline};

use crate::raw::RawDev;
use crate::{ensure, wait_until, Test, TestResult};

const WAIT: Duration = Duration::from_secs(10);

/// A user-mode queue whose doorbell is connected (one write ran), so later submissions make
/// no kernel call.
pub(crate) fn warm_queue(ctx: &Context, mode: QueueMode) -> Result<Queue, crate::Error> {
    let mut q = ctx.create_queue(&QueueDesc { mode, ..QueueDesc::default() })?;
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
fn global(f: &Fence) -> Result<u64, crate::Error> {
    Ok(f.info()?.global_handle)
}

/// A log slot: entry `index` recording `f`'s global handle.
fn slot(index: u32, handle: u64) -> Option<LogSlot> {
    Some(LogSlot { index, handle })
}

/// Waits until a CPU wait for `value` on `f` is asleep: pending, MonitoredValue set for it (a
/// native fence), and 100 ms more, so the waiter's own re-sample after the MonitoredValue
/// update is over and only an interrupt path can release it.
fn expect_asleep(f: &Fence, value: u64) -> TestResult {
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
fn cpu_wait_released_by(f: &Fence, value: u64, signal: impl FnOnce() -> TestResult) -> TestResult {
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

/// proves: LOG-02, LOG-04 — every hardware queue gets exactly two log buffers from the module
/// (four for two queues, two fewer once one is destroyed), and no mmap offset of the file maps
/// one: every page offset up to past the last one handed out maps only the allocation and the
/// progress pages the module returned.
fn each_queue_gets_two_log_buffers_no_process_can_map(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let raw = RawDev::open(path)?;
    let before = dev.irq_debug()?.log_buffers;
    let ctx = raw.create_context().map_err(|e| format!("CREATE_CONTEXT: {e}"))?;
    let alloc = raw.alloc(ctx, 4096).map_err(|e| format!("ALLOC: {e}"))?;
    let q1 = raw.create_queue(ctx, None, 64).map_err(|e| format!("CREATE_QUEUE: {e}"))?;
    let q2 = raw.create_queue(ctx, None, 64).map_err(|e| format!("CREATE_QUEUE: {e}"))?;
    let two = dev.irq_debug()?.log_buffers;
    ensure!(two == before + 4, "{} log buffers for two queues", two - before);
    let known = [alloc.mmap_offset, q1.progress_mmap_offset, q2.progress_mmap_offset];
    let last = known.iter().max().copied().unwrap_or(0) >> 12;
    let mut mapped = Vec::new();
    for page in 0..last + 256 {
        if raw.peek_u64(page << 12).is_ok() {
            mapped.push(page << 12);
        }
    }
    mapped.sort_unstable();
    let mut want = known.to_vec();
    want.sort_unstable();
    ensure!(mapped == want, "mappable offsets {mapped:x?}, expected only {want:x?}");
    raw.handle_op(uapi::IOCTL_DESTROY_QUEUE, q2.handle).map_err(|e| format!("DESTROY_QUEUE: {e}"))?;
    let one = dev.irq_debug()?.log_buffers;
    ensure!(one == before + 2, "{} log buffers left for one queue", one - before);
    Ok(())
}

/// proves: IRQ-08, IRQ-12, LOG-13 — without the optimized interrupt the device names the fence
/// and the module's exact path releases the CPU wait on it (counted) without scanning every
/// wait; the same interrupt read the logs: a FLUSH_LOGS for the queue with a new entry, then
/// the entry.
fn exact_records_release_the_named_fences_waiter_without_a_scan(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let handle = global(&f)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    let d0 = dev.irq_debug()?;
    cpu_wait_released_by(&f, 7, || {
        let mut cb = CommandBuffer::new();
        cb.fence_signal(f.gpu_va(), 7, slot(0, handle))?;
        q.submit(&cb)?;
        Ok(())
    })?;
    let d1 = debug_when(&dev, &d0, |a, b| {
        delta(a, b, |d| d.released[uapi::PATH_EXACT]) >= 1 && delta(a, b, |d| d.log_entries) >= 1
    })?;
    ensure!(delta(&d0, &d1, |d| d.exact_records) >= 1, "no exact record counted");
    ensure!(delta(&d0, &d1, |d| d.per_queue_records + d.null_records) == 0, "other record forms on this device");
    let released = delta(&d0, &d1, |d| d.released[uapi::PATH_EXACT]);
    ensure!(released >= 1, "the exact path released no wait");
    ensure!(delta(&d0, &d1, |d| d.scans) == 0, "{} scan(s) of every wait", delta(&d0, &d1, |d| d.scans));
    ensure!(delta(&d0, &d1, |d| d.log_flushes) >= 1, "no FLUSH_LOGS before reading the new entry");
    ensure!(delta(&d0, &d1, |d| d.log_entries) >= 1, "the interrupt read no log entry");
    Ok(())
}

/// proves: IRQ-10, LOG-13 — a per-queue record makes the module read that queue's signal log
/// and release the wait on the fence its new entry names (per-queue release counted, no scan);
/// another queue's logged signals stay unread until `READ_TIMELINE` collects them.
fn per_queue_records_read_only_that_queues_log(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let g = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let gh = global(&g)?;
    let mut qa = warm_queue(&ctx, QueueMode::UserMode)?;
    let mut qb = warm_queue(&ctx, QueueMode::UserMode)?;
    // The warm-ups' logged progress signals are read now.
    let mut timeline = Timeline::from_now(&dev)?;
    // Three signals nobody waits for, and the progress signal: logged, no interrupt.
    let mut cb = CommandBuffer::new();
    for i in 0..3 {
        cb.signal_fence(&g, i + 1)?;
    }
    let done = qb.submit(&cb)?;
    ensure!(wait_until(WAIT, || qb.completed() >= done), "the signals of the other queue did not run");
    let d0 = dev.irq_debug()?;
    cpu_wait_released_by(&f, 1, || {
        let mut cb = CommandBuffer::new();
        cb.signal_fence(&f, 1)?;
        qa.submit(&cb)?;
        Ok(())
    })?;
    let d1 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.released[uapi::PATH_PER_QUEUE]) >= 1)?;
    ensure!(delta(&d0, &d1, |d| d.per_queue_records) >= 1, "no per-queue record counted");
    let released = delta(&d0, &d1, |d| d.released[uapi::PATH_PER_QUEUE]);
    ensure!(released >= 1, "the per-queue path released no wait");
    ensure!(delta(&d0, &d1, |d| d.scans) == 0, "a scan of every wait on a logged per-queue record");
    // The signal's entry, and the progress signal's after it if it already ran.
    let read = delta(&d0, &d1, |d| d.log_entries);
    ensure!(read == 1 || read == 2, "{read} log entries read for one record (the other queue's must stay unread)");
    let events = timeline.read(&dev)?;
    let d2 = dev.irq_debug()?;
    ensure!(
        delta(&d0, &d2, |d| d.log_entries) == 6,
        "{} entries read in all, expected 2 of the signalling queue and 4 of the other",
        delta(&d0, &d2, |d| d.log_entries)
    );
    let g_signals = events.iter().filter(|e| e.fence == gh && e.operation == uapi::TIMELINE_SIGNAL_EXECUTED).count();
    ensure!(g_signals == 3, "{g_signals} signal entries of the other queue in the timeline");
    Ok(())
}

/// proves: IRQ-11 — on the per-queue device a record naming no queue (the device's answer to
/// more logged signals than a log holds since its last record) makes the module rescan every
/// queue's logs: that interrupt reads the other queue's 4 unread entries (3 signals and its
/// progress signal) along with what is left of the signalling queue's (84), and the waiter is
/// released.
fn null_queue_records_rescan_every_queues_log(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let g = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut qa = warm_queue(&ctx, QueueMode::UserMode)?;
    let mut qb = warm_queue(&ctx, QueueMode::UserMode)?;
    // The warm-ups' logged progress signals are read now.
    Timeline::from_now(&dev)?;
    let mut cb = CommandBuffer::new();
    for i in 0..3 {
        cb.signal_fence(&g, i + 1)?;
    }
    let done = qb.submit(&cb)?;
    ensure!(wait_until(WAIT, || qb.completed() >= done), "the other queue's signals did not run");
    let d0 = dev.irq_debug()?;
    cpu_wait_released_by(&f, 1, || {
        let mut cb = CommandBuffer::new();
        for i in 0..85 {
            cb.signal_fence(&g, i + 10)?;
        }
        cb.signal_fence(&f, 1)?;
        qa.submit(&cb)?;
        Ok(())
    })?;
    let d1 =
        debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.null_records) >= 1 && delta(a, b, |d| d.log_entries) >= 88)?;
    ensure!(delta(&d0, &d1, |d| d.null_records) >= 1, "no record without a queue counted");
    let read = delta(&d0, &d1, |d| d.log_entries);
    ensure!(read == 88, "{read} log entries read, expected 84 of the signalling queue and 4 of the other");
    Ok(())
}

/// proves: IRQ-05 — on a device posting NULL records the module examines every pending wait:
/// CPU waits on two fences signaled by one command buffer are both released by scans of all
/// waits (scan-all releases counted).
fn null_records_release_every_satisfied_wait_by_a_scan(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f1 = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let f2 = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    let d0 = dev.irq_debug()?;
    std::thread::scope(|s| -> TestResult {
        let w1 = s.spawn(|| f1.wait(3, WAIT));
        let w2 = s.spawn(|| f2.wait(4, WAIT));
        expect_asleep(&f1, 3)?;
        expect_asleep(&f2, 4)?;
        let mut cb = CommandBuffer::new();
        cb.fence_signal(f1.gpu_va(), 3, None)?.fence_signal(f2.gpu_va(), 4, None)?;
        q.submit(&cb)?;
        w1.join().map_err(|_| "waiter panicked")??;
        w2.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    let d1 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.released[uapi::PATH_SCAN_ALL]) >= 2)?;
    ensure!(delta(&d0, &d1, |d| d.null_records) >= 1, "no NULL record counted");
    ensure!(delta(&d0, &d1, |d| d.exact_records + d.per_queue_records) == 0, "other record forms on this device");
    ensure!(delta(&d0, &d1, |d| d.scans) >= 1, "no scan of every wait");
    let released = delta(&d0, &d1, |d| d.released[uapi::PATH_SCAN_ALL]);
    ensure!(released == 2, "{released} wait(s) released by scans, expected 2");
    Ok(())
}

/// proves: IRQ-06 — a NULL record with EvaluateLegacyMonitoredFences makes the module examine
/// the monitored-fence waits too: a CPU wait on a monitored fence whose value a plain GPU write
/// (no monitored-fence record) satisfied is released by the scan that a native signal's record
/// causes, with a legacy scan counted.
fn evaluate_legacy_records_release_monitored_fence_waits_too(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let m = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let n = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    let d0 = dev.irq_debug()?;
    std::thread::scope(|s| -> TestResult {
        let wm = s.spawn(|| m.wait(5, WAIT));
        let wn = s.spawn(|| n.wait(1, WAIT));
        expect_asleep(&m, 5)?;
        expect_asleep(&n, 1)?;
        let mut cb = CommandBuffer::new();
        cb.write64(m.gpu_va(), 5)?.fence_signal(n.gpu_va(), 1, None)?;
        q.submit(&cb)?;
        wn.join().map_err(|_| "waiter panicked")??;
        wm.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    let d1 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.legacy_scans) >= 1)?;
    ensure!(delta(&d0, &d1, |d| d.legacy_scans) >= 1, "no scan examined the legacy waits");
    Ok(())
}

/// proves: LOG-15, LOG-16 — 90 logged operations (more than a 4 KB log's 84 entries) between
/// two reads of a queue's wait log: at the next per-queue record the module sees WraparoundCount
/// past its cached copy, counts the overflow, marks the loss of 6 events in the timeline (the
/// marker; the logs keep their 4 KB, LOG-02) and releases the CPU wait by scanning every wait
/// (overflow release counted).
fn log_overflow_is_detected_and_recovered_by_scanning(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let h = ctx.create_fence(FenceKind::Default, 0, 1)?;
    let hh = global(&h)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    let mut timeline = Timeline::from_now(&dev)?;
    let d0 = dev.irq_debug()?;
    cpu_wait_released_by(&f, 1, || {
        // GPU waits already satisfied: each logs an entry and raises no interrupt.
        let mut cb = CommandBuffer::new();
        for i in 0..90 {
            cb.fence_wait(h.gpu_va(), 1, slot(i, hh))?;
        }
        cb.signal_fence(&f, 1)?;
        q.submit(&cb)?;
        Ok(())
    })?;
    let d1 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.released[uapi::PATH_OVERFLOW]) >= 1)?;
    ensure!(delta(&d0, &d1, |d| d.overflows) >= 1, "no log overflow detected");
    ensure!(delta(&d0, &d1, |d| d.scans) >= 1, "no scan of every wait after the overflow");
    let released = delta(&d0, &d1, |d| d.released[uapi::PATH_OVERFLOW]);
    ensure!(released >= 1, "no wait released by the overflow scan");
    let lost: Vec<TimelineEntry> =
        timeline.read(&dev)?.into_iter().filter(|e| e.operation == uapi::TIMELINE_LOST).collect();
    ensure!(lost.iter().any(|e| e.value == 6), "no loss of 6 entries in the timeline: {lost:?}");
    Ok(())
}

/// proves: LOG-01, LOG-03, LOG-10 — the timeline joins what kernel-mode SUBMIT queued (CPU
/// time) with the queues' wait and signal logs (GPU times): a wait queued then unblocked by a
/// signal 100 ms later (End > Observed, End at or after the signal's), signals queued then
/// executed in log order with strictly increasing GPU timestamps, the module's progress signal
/// among them.
fn timeline_joins_queued_operations_with_their_logged_gpu_times(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let g = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let (fh, gh) = (global(&f)?, global(&g)?);
    let mut kw = ctx.create_queue(&QueueDesc { mode: QueueMode::KernelMode, ..QueueDesc::default() })?;
    let mut ks = ctx.create_queue(&QueueDesc { mode: QueueMode::KernelMode, ..QueueDesc::default() })?;
    let mut timeline = Timeline::from_now(&dev)?;
    let mut cb = CommandBuffer::new();
    cb.fence_wait(f.gpu_va(), 1, slot(0, fh))?;
    let waited = kw.submit(&cb)?;
    std::thread::sleep(Duration::from_millis(100));
    ensure!(kw.completed() < waited, "the GPU wait completed before the signal");
    let mut cb = CommandBuffer::new();
    cb.fence_signal(f.gpu_va(), 1, slot(0, fh))?;
    for v in 1..=3 {
        cb.fence_signal(g.gpu_va(), v, slot(u32::try_from(v)?, gh))?;
    }
    let signaled = ks.submit(&cb)?;
    ensure!(
        wait_until(WAIT, || kw.completed() >= waited && ks.completed() >= signaled),
        "the wait or the signals did not complete"
    );
    let events = timeline.read(&dev)?;
    let find = |op: u32, fence: u64| events.iter().find(|e| e.operation == op && e.fence == fence);
    let wq = find(uapi::TIMELINE_WAIT_QUEUED, fh).ok_or("no WAIT_QUEUED event")?;
    let wu = find(uapi::TIMELINE_WAIT_UNBLOCKED, fh).ok_or("no WAIT_UNBLOCKED event")?;
    let sf = find(uapi::TIMELINE_SIGNAL_EXECUTED, fh).ok_or("no SIGNAL_EXECUTED event of the fence")?;
    ensure!(wq.cpu_ns > 0 && wq.log_index == 0 && wq.value == 1, "WAIT_QUEUED {wq:?}");
    ensure!(wu.value == 1 && wu.observed_gpu > 0, "WAIT_UNBLOCKED {wu:?}");
    ensure!(wu.end_gpu > wu.observed_gpu, "End {} not after Observed {}", wu.end_gpu, wu.observed_gpu);
    ensure!(wu.end_gpu >= sf.end_gpu, "the wait ended ({}) before the signal ({})", wu.end_gpu, sf.end_gpu);
    ensure!(wu.queue != sf.queue, "the wait and the signal logged on one queue");
    // The signal queue's log: its 4 signals and the progress signal, in log order.
    let mut executed: Vec<&TimelineEntry> =
        events.iter().filter(|e| e.queue == sf.queue && e.operation == uapi::TIMELINE_SIGNAL_EXECUTED).collect();
    executed.sort_by_key(|e| e.log_index);
    ensure!(executed.len() == 5, "{} signal entries, expected 5: {executed:?}", executed.len());
    for pair in executed.windows(2) {
        ensure!(pair[1].end_gpu > pair[0].end_gpu, "GPU timestamps not increasing: {pair:?}");
    }
    for e in &executed {
        let queued = events.iter().find(|q| {
            q.queue == e.queue
                && q.operation == uapi::TIMELINE_SIGNAL_QUEUED
                && q.log_index == e.log_index
                && q.fence == e.fence
                && q.value == e.value
        });
        ensure!(queued.is_some_and(|q| q.cpu_ns > 0 && q.seq < e.seq), "no SIGNAL_QUEUED before {e:?}");
    }
    ensure!(executed.last().is_some_and(|e| e.fence != fh && e.fence != gh), "no progress signal logged last");
    Ok(())
}

/// `READ_TIMELINE` validates its argument: a capacity above 256, or `count`/`lost` set on input
/// are `EINVAL`; an array at an unmapped address is `EFAULT` (nothing read is lost: the next
/// read from the same cursor returns the events); a cursor past the end reads nothing.
fn read_timeline_refuses_bad_arguments(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let raw = RawDev::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    let mut cb = CommandBuffer::new();
    cb.signal_fence(&f, 1)?;
    let done = q.submit(&cb)?;
    ensure!(wait_until(WAIT, || q.completed() >= done), "the signal did not run");
    let mut buf = vec![TimelineEntry::default(); 257];
    let arg = |capacity: u32| uapi::ReadTimeline { capacity, cursor: u64::MAX, ..Default::default() };
    let einval =
        |a: uapi::ReadTimeline, buf: &mut [TimelineEntry]| raw.read_timeline(a, Some(buf)) == Err(libc::EINVAL);
    ensure!(einval(arg(257), &mut buf), "capacity 257 accepted");
    ensure!(einval(uapi::ReadTimeline { count: 1, ..arg(4) }, &mut buf), "count set on input accepted");
    ensure!(einval(uapi::ReadTimeline { lost: 1, ..arg(4) }, &mut buf), "lost set on input accepted");
    let past = raw.read_timeline(arg(4), Some(&mut buf)).map_err(|e| format!("READ_TIMELINE: {e}"))?;
    ensure!(past.count == 0 && past.lost == 0, "a cursor past the end read {past:?}");
    // From the oldest event kept: the signal's entry is among them.
    let all = uapi::ReadTimeline { capacity: 256, cursor: 0, ..Default::default() };
    ensure!(raw.read_timeline(all, None) == Err(libc::EFAULT), "an unmapped array was not EFAULT");
    let mut events = Vec::new();
    let mut cursor = 0;
    loop {
        let got = raw
            .read_timeline(uapi::ReadTimeline { cursor, ..all }, Some(&mut buf))
            .map_err(|e| format!("READ_TIMELINE: {e}"))?;
        events.extend_from_slice(&buf[..got.count as usize]);
        cursor = got.cursor;
        if got.count < 256 {
            break;
        }
    }
    let handle = global(&f)?;
    ensure!(
        events.iter().any(|e| e.fence == handle && e.operation == uapi::TIMELINE_SIGNAL_EXECUTED),
        "the signal's event is missing after the EFAULT read"
    );
    Ok(())
}

/// The tests of this file.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(each_queue_gets_two_log_buffers_no_process_can_map, Default, ["LOG-02", "LOG-04"]),
        test_entry!(read_timeline_refuses_bad_arguments, Default, []),
        test_entry!(
            exact_records_release_the_named_fences_waiter_without_a_scan,
            Default,
            ["IRQ-08", "IRQ-12", "LOG-13"]
        ),
        test_entry!(per_queue_records_read_only_that_queues_log, PerQueueInterrupts, ["IRQ-10", "LOG-13"]),
        test_entry!(null_queue_records_rescan_every_queues_log, PerQueueInterrupts, ["IRQ-11"]),
        test_entry!(null_records_release_every_satisfied_wait_by_a_scan, ScanAllInterrupts, ["IRQ-05"]),
        test_entry!(evaluate_legacy_records_release_monitored_fence_waits_too, ScanAllInterrupts, ["IRQ-06"]),
        test_entry!(log_overflow_is_detected_and_recovered_by_scanning, PerQueueInterrupts, ["LOG-15", "LOG-16"]),
        test_entry!(
            timeline_joins_queued_operations_with_their_logged_gpu_times,
            Default,
            ["LOG-01", "LOG-03", "LOG-10"]
        ),
    ]
}
