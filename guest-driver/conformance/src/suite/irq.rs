//! IRQ-xx: Native fence signaled interrupt (RULES.md § Native fence signaled interrupt).

use std::path::Path;

use belfry_abi::uapi_debug;
use belfry_umd::{wait_all, wait_any, CommandBuffer, Deadline, FenceKind, QueueMode, Timeline};

use crate::support::fencelog::{cpu_wait_released_by, debug_when, delta, expect_asleep, global, slot, warm_queue};
use crate::support::fences::pollable_waits_follow_their_own_fence;
use crate::support::fixture::open_context;
use crate::support::{wait_until, WAIT};
use crate::{Test, TestResult};

/// proves: IRQ-08, IRQ-12, LOG-13 — without the optimized interrupt the device names the fence
/// and the module's exact path releases the CPU wait on it (counted) without scanning every
/// wait; the same interrupt read the logs: a FLUSH_LOGS for the queue with a new entry, then
/// the entry.
fn exact_records_release_the_named_fences_waiter_without_a_scan(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
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
        delta(a, b, |d| d.released[uapi_debug::PATH_EXACT]) >= 1 && delta(a, b, |d| d.log_entries) >= 1
    })?;
    ensure!(delta(&d0, &d1, |d| d.exact_records) >= 1, "no exact record counted");
    ensure!(delta(&d0, &d1, |d| d.per_queue_records + d.null_records) == 0, "other record forms on this device");
    let released = delta(&d0, &d1, |d| d.released[uapi_debug::PATH_EXACT]);
    ensure!(released >= 1, "the exact path released no wait");
    ensure!(delta(&d0, &d1, |d| d.scans) == 0, "{} scan(s) of every wait", delta(&d0, &d1, |d| d.scans));
    ensure!(delta(&d0, &d1, |d| d.log_flushes) >= 1, "no FLUSH_LOGS before reading the new entry");
    ensure!(delta(&d0, &d1, |d| d.log_entries) >= 1, "the interrupt read no log entry");
    Ok(())
}

/// proves: IRQ-03 — the module unregisters a fence from the device before it gives the fence's
/// slot to another, so records name only live fences by the global handle the module gave: a
/// fence whose wait had set its MonitoredValue (a wait that timed out) is destroyed, the next
/// fence of the context takes its slot under a new global handle, and a GPU signal of the new
/// fence ends a CPU wait on it through an exact record (counted). A module that freed the slot
/// without unregistering the old fence leaves the device a registration at that address under
/// the destroyed fence's handle (the device then refuses the new fence's).
fn a_destroyed_fences_slot_serves_the_next_fence_under_its_own_handle(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    let old = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let (old_handle, old_va) = (global(&old)?, old.gpu_va());
    match old.wait(5, std::time::Duration::from_millis(50)) {
        Err(e) if e.errno() == Some(libc::ETIMEDOUT) => {}
        other => return Err(format!("the wait for 5 did not time out: {other:?}").into()),
    }
    drop(old);
    let new = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let new_handle = global(&new)?;
    ensure!(new.gpu_va() == old_va, "premise: the new fence did not take the destroyed fence's slot");
    ensure!(new_handle != old_handle, "the new fence has the destroyed fence's global handle {old_handle:#x}");
    let d0 = dev.irq_debug()?;
    cpu_wait_released_by(&new, 5, || {
        let mut cb = CommandBuffer::new();
        cb.fence_signal(new.gpu_va(), 5, None)?;
        q.submit(&cb)?;
        Ok(())
    })?;
    let d1 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.released[uapi_debug::PATH_EXACT]) >= 1)?;
    ensure!(delta(&d0, &d1, |d| d.released[uapi_debug::PATH_EXACT]) >= 1, "no exact record released the wait: {d1:?}");
    Ok(())
}

/// proves: IRQ-10, LOG-13 — a per-queue record makes the module read that queue's signal log
/// and release the wait on the fence its new entry names (per-queue release counted, no scan);
/// another queue's logged signals stay unread until `READ_TIMELINE` collects them.
fn per_queue_records_read_only_that_queues_log(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
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
    let d1 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.released[uapi_debug::PATH_PER_QUEUE]) >= 1)?;
    ensure!(delta(&d0, &d1, |d| d.per_queue_records) >= 1, "no per-queue record counted");
    let released = delta(&d0, &d1, |d| d.released[uapi_debug::PATH_PER_QUEUE]);
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
    let g_signals =
        events.iter().filter(|e| e.fence == gh && e.operation == uapi_debug::TIMELINE_SIGNAL_EXECUTED).count();
    ensure!(g_signals == 3, "{g_signals} signal entries of the other queue in the timeline");
    Ok(())
}

/// proves: IRQ-10 — a per-queue record is explained only by its own signal's log entry, never
/// by another fence's entry with the same value. A queue logs a signal of fence x to 1 with
/// nobody waiting (no record: the entry stays unread); then one `WAIT_FENCES` (all) waits for
/// fence a to reach 1 and x to reach 2, and one buffer of that queue signals a to 1 without a
/// log entry, then x to 2, logged. The record of a's signal (value 1, no log index) must make
/// the module examine every wait — x's old entry, value 1 too, does not name a, and x's own
/// release must not hide that — so the wait returns.
fn an_unlogged_signal_is_not_taken_for_another_fences_entry_of_the_same_value(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let a = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let x = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    let mut cb = CommandBuffer::new();
    cb.signal_fence(&x, 1)?;
    let done = q.submit(&cb)?;
    ensure!(wait_until(WAIT, || q.completed() >= done), "x's first signal did not run");
    let d0 = dev.irq_debug()?;
    std::thread::scope(|s| -> TestResult {
        let waiter = s.spawn(|| wait_all(&[a.point(1), x.point(2)], Deadline::after(WAIT)));
        expect_asleep(&a, 1)?;
        expect_asleep(&x, 2)?;
        let mut cb = CommandBuffer::new();
        cb.fence_signal(a.gpu_va(), 1, None)?;
        cb.signal_fence(&x, 2)?;
        q.submit(&cb)?;
        ensure!(wait_until(WAIT, || a.value() == Some(1) && x.value() == Some(2)), "the GPU signals did not run");
        waiter
            .join()
            .map_err(|_| "waiter panicked")?
            .map_err(|e| format!("the wait on a = 1 and x = 2, both reached, was not released: {e}"))?;
        Ok(())
    })?;
    let d1 = debug_when(&dev, &d0, |p, n| delta(p, n, |d| d.released[uapi_debug::PATH_SCAN_ALL]) >= 1)?;
    ensure!(delta(&d0, &d1, |d| d.per_queue_records) >= 1, "no per-queue record counted");
    ensure!(delta(&d0, &d1, |d| d.unlogged) >= 1, "no record counted as unexplained by its log");
    ensure!(delta(&d0, &d1, |d| d.released[uapi_debug::PATH_SCAN_ALL]) >= 1, "no wait released by a scan: {d1:?}");
    Ok(())
}

/// proves: IRQ-11 — on the per-queue device a record naming no queue (the device's answer to
/// more logged signals than a log holds since its last record) makes the module rescan every
/// queue's logs: that interrupt reads the other queue's 4 unread entries (3 signals and its
/// progress signal) along with what is left of the signalling queue's (84), and the waiter is
/// released.
fn null_queue_records_rescan_every_queues_log(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
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
    let (dev, ctx) = open_context(path)?;
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
    let d1 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.released[uapi_debug::PATH_SCAN_ALL]) >= 2)?;
    ensure!(delta(&d0, &d1, |d| d.null_records) >= 1, "no NULL record counted");
    ensure!(delta(&d0, &d1, |d| d.exact_records + d.per_queue_records) == 0, "other record forms on this device");
    ensure!(delta(&d0, &d1, |d| d.scans) >= 1, "no scan of every wait");
    let released = delta(&d0, &d1, |d| d.released[uapi_debug::PATH_SCAN_ALL]);
    ensure!(released == 2, "{released} wait(s) released by scans, expected 2");
    Ok(())
}

/// proves: IRQ-06 — a NULL record with EvaluateLegacyMonitoredFences makes the module examine
/// the monitored-fence waits too: a CPU wait on a monitored fence whose value a plain GPU write
/// (no monitored-fence record) satisfied is released by the scan that a native signal's record
/// causes, with a legacy scan counted. The other half, a NULL record without the flag, is
/// [`null_records_without_evaluate_legacy_leave_monitored_fence_waits_alone`].
fn evaluate_legacy_records_release_monitored_fence_waits_too(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
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

/// proves: IRQ-06 — a NULL record without EvaluateLegacyMonitoredFences leaves the
/// monitored-fence (legacy) waits alone. The per-queue device answers a MonitoredValue update
/// that finds CurrentValue already past it with a record naming neither fence nor queue, and
/// without the flag. Plain GPU writes (no signal, so no record) bring a native fence `f` to 5
/// under a sleeping wait for 5, and a monitored fence `m` to 5 under a sleeping wait for
/// `m` = 5 or `h` = 1; a second wait on `f` (for 7) has the module set `f`'s MonitoredValue to
/// 4, the device answers with that NULL record, and the module's scan releases the wait on `f`.
/// The scan must not release the wait on `m`: once a CPU signal of `h` ends that wait, it
/// reports `h` (point 1), not `m` (point 0, which it would report had the scan released it).
fn null_records_without_evaluate_legacy_leave_monitored_fence_waits_alone(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let m = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let h = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    let d0 = dev.irq_debug()?;
    std::thread::scope(|s| -> TestResult {
        let m_or_h = s.spawn(|| wait_any(&[m.point(5), h.point(1)], Deadline::after(WAIT)));
        let on_f = s.spawn(|| f.wait(5, WAIT));
        expect_asleep(&m, 5)?;
        expect_asleep(&f, 5)?;
        let mut cb = CommandBuffer::new();
        cb.write64(m.gpu_va(), 5)?.write64(f.gpu_va(), 5)?;
        let done = q.submit(&cb)?;
        ensure!(wait_until(WAIT, || q.completed() >= done), "the plain GPU writes did not run");
        ensure!(
            m.value() == Some(5) && f.value() == Some(5),
            "values {:?}, {:?} after the writes",
            m.value(),
            f.value()
        );
        let on_f_later = s.spawn(|| f.wait(7, WAIT));
        on_f.join()
            .map_err(|_| "waiter panicked")?
            .map_err(|e| format!("the NULL record did not release f = 5: {e}"))?;
        let d1 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.released[uapi_debug::PATH_SCAN_ALL]) >= 1)?;
        ensure!(delta(&d0, &d1, |d| d.null_records) >= 1, "no NULL record counted: {d1:?}");
        ensure!(delta(&d0, &d1, |d| d.released[uapi_debug::PATH_SCAN_ALL]) >= 1, "no wait released by a scan: {d1:?}");
        h.signal(1)?;
        let first = m_or_h.join().map_err(|_| "waiter panicked")??;
        ensure!(
            first == 1,
            "the wait for m = 5 or h = 1 reports point {first}: the NULL record without \
             EvaluateLegacyMonitoredFences released the monitored-fence wait"
        );
        ensure!(delta(&d0, &dev.irq_debug()?, |d| d.legacy_scans) == 0, "a scan examined the legacy waits");
        f.signal(7)?;
        on_f_later.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })
}

/// proves: IRQ-05, FEN-18 — on a device that posts NULL native-fence records (it cannot say
/// which fence signaled), the module examines every pending wait: the signaled fence's pollable
/// wait becomes ready, the other fence's stays pending.
fn pollable_wait_is_released_by_a_null_record_scan(path: &Path) -> TestResult {
    pollable_waits_follow_their_own_fence(path)
}

/// proves: IRQ-13 — on the queue-array device one record names the queues whose signal logs
/// hold new entries (coalesced: a queue that signalled with nobody waiting is named beside the
/// one that interrupted), and the module learns from those entries alone which fence reached
/// which value: the CPU wait is released on the queue-array path with no fence value read and
/// no scan, and the other queue's entries are read by the same pass.
fn queue_array_records_release_waits_from_the_logs_without_reading_fences(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let g = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut qa = warm_queue(&ctx, QueueMode::UserMode)?;
    let mut qb = warm_queue(&ctx, QueueMode::UserMode)?;
    // Three signals nobody waits for: logged, no record.
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
    let d1 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.queue_array_released) >= 1)?;
    ensure!(delta(&d0, &d1, |d| d.queue_array_records) >= 1, "no queue-array record counted: {d1:?}");
    ensure!(delta(&d0, &d1, |d| d.exact_records + d.per_queue_records) == 0, "other record forms on this device");
    ensure!(delta(&d0, &d1, |d| d.queue_array_released) >= 1, "the queue-array path released no wait");
    let reads = delta(&d0, &d1, |d| d.fence_value_reads);
    ensure!(reads == 0, "{reads} fence value read(s) by the interrupt paths for a logged signal");
    ensure!(delta(&d0, &d1, |d| d.queue_array_fallbacks) == 0, "a fallback for a logged signal: {d1:?}");
    ensure!(delta(&d0, &d1, |d| d.scans) == 0, "a scan of every wait for a logged signal");
    // The other queue's three entries (and its progress signal's) came with the same pass.
    let read = delta(&d0, &d1, |d| d.log_entries);
    ensure!(read >= 4, "{read} log entries read: the other queue's were not named beside the signalling one");
    Ok(())
}

/// proves: IRQ-14 — on the queue-array device, 90 logged operations (more than a 4 KB log's 84
/// entries) between two reads of a queue's log: the record names the queue, the module finds
/// its log wrapped past what it last read, takes none of the entries left, counts the fallback
/// and reads the value of every waited fence of the device instead, which releases the CPU
/// wait (counted as an overflow release).
fn an_overflowed_log_makes_queue_array_records_read_every_waited_fence(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let h = ctx.create_fence(FenceKind::Default, 0, 1)?;
    let hh = global(&h)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
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
    let d1 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.released[uapi_debug::PATH_OVERFLOW]) >= 1)?;
    ensure!(delta(&d0, &d1, |d| d.queue_array_records) >= 1, "no queue-array record counted: {d1:?}");
    ensure!(delta(&d0, &d1, |d| d.overflows) >= 1, "no log overflow detected");
    ensure!(delta(&d0, &d1, |d| d.queue_array_fallbacks) >= 1, "no queue-array fallback counted: {d1:?}");
    ensure!(delta(&d0, &d1, |d| d.fence_value_reads) >= 1, "the fallback read no fence value");
    ensure!(delta(&d0, &d1, |d| d.released[uapi_debug::PATH_OVERFLOW]) >= 1, "no wait released by the fallback");
    ensure!(delta(&d0, &d1, |d| d.queue_array_released) == 0, "the overflowed log's entries were trusted");
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(a_destroyed_fences_slot_serves_the_next_fence_under_its_own_handle, Default, ["IRQ-03"]),
        test_entry!(
            exact_records_release_the_named_fences_waiter_without_a_scan,
            Default,
            ["IRQ-08", "IRQ-12", "LOG-13"]
        ),
        test_entry!(per_queue_records_read_only_that_queues_log, PerQueueInterrupts, ["IRQ-10", "LOG-13"]),
        test_entry!(
            an_unlogged_signal_is_not_taken_for_another_fences_entry_of_the_same_value,
            PerQueueInterrupts,
            ["IRQ-10"]
        ),
        test_entry!(null_queue_records_rescan_every_queues_log, PerQueueInterrupts, ["IRQ-11"]),
        test_entry!(null_records_release_every_satisfied_wait_by_a_scan, ScanAllInterrupts, ["IRQ-05"]),
        test_entry!(evaluate_legacy_records_release_monitored_fence_waits_too, ScanAllInterrupts, ["IRQ-06"]),
        test_entry!(
            null_records_without_evaluate_legacy_leave_monitored_fence_waits_alone,
            PerQueueInterrupts,
            ["IRQ-06"]
        ),
        test_entry!(pollable_wait_is_released_by_a_null_record_scan, ScanAllInterrupts, ["IRQ-05", "FEN-18"]),
        test_entry!(
            queue_array_records_release_waits_from_the_logs_without_reading_fences,
            QueueArrayInterrupts,
            ["IRQ-13"]
        ),
        test_entry!(
            an_overflowed_log_makes_queue_array_records_read_every_waited_fence,
            QueueArrayInterrupts,
            ["IRQ-14"]
        ),
    ]
}
