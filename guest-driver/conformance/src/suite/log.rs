//! LOG-xx: Fence logs (RULES.md § Fence logs), and verbose fence logging (LOG-20): the switch a
//! tracing tool turns, what the module and the library are told, the `WAIT_BEGIN` entries.

use std::path::Path;
use std::time::Duration;

use belfry_abi::regs;
use belfry_abi::uapi;
use belfry_abi::uapi_debug::{self, TimelineEntry};
use belfry_umd::{CommandBuffer, Deadline, Device, Error, FenceKind, QueueDesc, QueueMode, Timeline, VerboseLogWatch};

use crate::harness::proc;
use crate::harness::raw::RawDev;
use crate::support::fencelog::{cpu_wait_released_by, debug_when, delta, global, slot, warm_queue};
use crate::support::fixture::open_context;
use crate::support::{wait_until, WAIT};
use crate::{Test, TestResult};

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

/// proves: LOG-15, LOG-16 — 90 logged operations (more than a 4 KB log's 84 entries) between
/// two reads of a queue's wait log: at the next per-queue record the module sees WraparoundCount
/// past its cached copy, counts the overflow, marks the loss of 6 events in the timeline (the
/// marker; the logs keep their 4 KB, LOG-02) and releases the CPU wait by scanning every wait
/// (overflow release counted).
fn log_overflow_is_detected_and_recovered_by_scanning(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
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
    let d1 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.released[uapi_debug::PATH_OVERFLOW]) >= 1)?;
    ensure!(delta(&d0, &d1, |d| d.overflows) >= 1, "no log overflow detected");
    ensure!(delta(&d0, &d1, |d| d.scans) >= 1, "no scan of every wait after the overflow");
    let released = delta(&d0, &d1, |d| d.released[uapi_debug::PATH_OVERFLOW]);
    ensure!(released >= 1, "no wait released by the overflow scan");
    let lost: Vec<TimelineEntry> =
        timeline.read(&dev)?.into_iter().filter(|e| e.operation == uapi_debug::TIMELINE_LOST).collect();
    ensure!(lost.iter().any(|e| e.value == 6), "no loss of 6 entries in the timeline: {lost:?}");
    Ok(())
}

/// proves: LOG-01, LOG-03, LOG-10 — the timeline joins what kernel-mode SUBMIT queued (CPU
/// time) with the queues' wait and signal logs (GPU times): a wait queued then unblocked by a
/// signal 100 ms later (End > Observed, End at or after the signal's), signals queued then
/// executed in log order with strictly increasing GPU timestamps, the module's progress signal
/// among them.
fn timeline_joins_queued_operations_with_their_logged_gpu_times(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let g = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let (fh, gh) = (global(&f)?, global(&g)?);
    let mut kw = ctx.create_queue(&QueueDesc::default().with_mode(QueueMode::KernelMode))?;
    let mut ks = ctx.create_queue(&QueueDesc::default().with_mode(QueueMode::KernelMode))?;
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
    let wq = find(uapi_debug::TIMELINE_WAIT_QUEUED, fh).ok_or("no WAIT_QUEUED event")?;
    let wu = find(uapi_debug::TIMELINE_WAIT_UNBLOCKED, fh).ok_or("no WAIT_UNBLOCKED event")?;
    let sf = find(uapi_debug::TIMELINE_SIGNAL_EXECUTED, fh).ok_or("no SIGNAL_EXECUTED event of the fence")?;
    ensure!(wq.cpu_ns > 0 && wq.log_index == 0 && wq.value == 1, "WAIT_QUEUED {wq:?}");
    ensure!(wu.value == 1 && wu.observed_gpu > 0, "WAIT_UNBLOCKED {wu:?}");
    ensure!(wu.end_gpu > wu.observed_gpu, "End {} not after Observed {}", wu.end_gpu, wu.observed_gpu);
    ensure!(wu.end_gpu >= sf.end_gpu, "the wait ended ({}) before the signal ({})", wu.end_gpu, sf.end_gpu);
    ensure!(wu.queue != sf.queue, "the wait and the signal logged on one queue");
    // The signal queue's log: its 4 signals and the progress signal, in log order.
    let mut executed: Vec<&TimelineEntry> =
        events.iter().filter(|e| e.queue == sf.queue && e.operation == uapi_debug::TIMELINE_SIGNAL_EXECUTED).collect();
    executed.sort_by_key(|e| e.log_index);
    ensure!(executed.len() == 5, "{} signal entries, expected 5: {executed:?}", executed.len());
    for pair in executed.windows(2) {
        ensure!(pair[1].end_gpu > pair[0].end_gpu, "GPU timestamps not increasing: {pair:?}");
    }
    for e in &executed {
        let queued = events.iter().find(|q| {
            q.queue == e.queue
                && q.operation == uapi_debug::TIMELINE_SIGNAL_QUEUED
                && q.log_index == e.log_index
                && q.fence == e.fence
                && q.value == e.value
        });
        ensure!(queued.is_some_and(|q| q.cpu_ns > 0 && q.seq < e.seq), "no SIGNAL_QUEUED before {e:?}");
    }
    ensure!(executed.last().is_some_and(|e| e.fence != fh && e.fence != gh), "no progress signal logged last");
    Ok(())
}

/// proves: LOG-19 — the module turns on both mandatory logs, WAITS and SIGNALS, for every
/// queue it creates, without the application asking and with verbose logging off: on a
/// user-mode and a kernel-mode queue of each engine, one library wait and one library signal
/// come back from the device's logs as a `WAIT_UNBLOCKED` entry in the queue's wait log and a
/// `SIGNAL_EXECUTED` entry in its signal log (the progress signal's beside it). A module that
/// gave a queue only one of its logs loses the other kind of entry.
fn every_queue_logs_both_waits_and_signals(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    ensure!(!dev.verbose_logging()?, "verbose logging is on: the test is about the mandatory logs alone");
    let h = ctx.create_fence(FenceKind::Default, 0, 1)?;
    let g = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let (hh, gh) = (h.log_handle()?.raw(), g.log_handle()?.raw());
    let mut value = 0;
    for engine in 0..dev.caps().engine_count() {
        for mode in [QueueMode::UserMode, QueueMode::KernelMode] {
            let desc = QueueDesc::default().with_mode(mode).with_engine(belfry_umd::EngineId::new(engine));
            let mut q = ctx.create_queue(&desc)?;
            let progress = q.progress_log_handle().raw();
            let mut timeline = Timeline::from_now(&dev)?;
            value += 1;
            let mut cb = CommandBuffer::new();
            cb.wait_fence(&h, 1)?.signal_fence(&g, value)?;
            let done = q.submit(&cb)?;
            q.wait(done, WAIT)?;
            let events = timeline.read(&dev)?;
            let queue = events
                .iter()
                .find(|e| e.fence == progress && e.operation == uapi_debug::TIMELINE_SIGNAL_EXECUTED)
                .map(|e| e.queue);
            let logged = |op: u32, fence: u64, v: u64| {
                events.iter().any(|e| Some(e.queue) == queue && e.operation == op && e.fence == fence && e.value == v)
            };
            let what = format!("engine {engine}, {mode:?} queue");
            ensure!(queue.is_some(), "{what}: its signal log holds no progress signal: {events:?}");
            ensure!(
                logged(uapi_debug::TIMELINE_WAIT_UNBLOCKED, hh, 1),
                "{what}: its wait log holds no entry of the wait: {events:?}"
            );
            ensure!(
                logged(uapi_debug::TIMELINE_SIGNAL_EXECUTED, gh, value),
                "{what}: its signal log holds no entry of the signal: {events:?}"
            );
        }
    }
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
    let arg = |capacity: u32| uapi_debug::ReadTimeline { capacity, cursor: u64::MAX, ..Default::default() };
    let einval =
        |a: uapi_debug::ReadTimeline, buf: &mut [TimelineEntry]| raw.read_timeline(a, Some(buf)) == Err(libc::EINVAL);
    ensure!(einval(arg(257), &mut buf), "capacity 257 accepted");
    ensure!(einval(uapi_debug::ReadTimeline { count: 1, ..arg(4) }, &mut buf), "count set on input accepted");
    ensure!(einval(uapi_debug::ReadTimeline { lost: 1, ..arg(4) }, &mut buf), "lost set on input accepted");
    let past = raw.read_timeline(arg(4), Some(&mut buf)).map_err(|e| format!("READ_TIMELINE: {e}"))?;
    ensure!(past.count == 0 && past.lost == 0, "a cursor past the end read {past:?}");
    // From the oldest event kept: the signal's entry is among them.
    let all = uapi_debug::ReadTimeline { capacity: 256, cursor: 0, ..Default::default() };
    ensure!(raw.read_timeline(all, None) == Err(libc::EFAULT), "an unmapped array was not EFAULT");
    let mut events = Vec::new();
    let mut cursor = 0;
    loop {
        let got = raw
            .read_timeline(uapi_debug::ReadTimeline { cursor, ..all }, Some(&mut buf))
            .map_err(|e| format!("READ_TIMELINE: {e}"))?;
        events.extend_from_slice(&buf[..got.count as usize]);
        cursor = got.cursor;
        if got.count < 256 {
            break;
        }
    }
    let handle = global(&f)?;
    ensure!(
        events.iter().any(|e| e.fence == handle && e.operation == uapi_debug::TIMELINE_SIGNAL_EXECUTED),
        "the signal's event is missing after the EFAULT read"
    );
    Ok(())
}

/// proves: LOG-04, LOG-05, IRQ-10 — on the per-queue device a CPU wait for a user-mode
/// queue's progress value (the submission behind a GPU wait the CPU releases 100 ms after the
/// waiter sleeps) is released from the log: exactly one per-queue record, one per-queue
/// release, two entries read (the library's wait entry and its progress signal's entry, which
/// names the progress fence), no unlogged record and no scan. With the progress signal
/// unlogged (`NO_LOG`) the record finds no entry and the module scans.
fn user_mode_progress_waits_are_released_from_the_log_without_a_scan(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let h = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = warm_queue(&ctx, QueueMode::UserMode)?;
    // The warm-up's progress entry is read now.
    let mut timeline = Timeline::from_now(&dev)?;
    q.wait_fence(&h, 1)?;
    let value = q.last_submitted();
    let d0 = dev.irq_debug()?;
    let waits = dev.fence_debug()?.cpu_waits;
    std::thread::scope(|s| -> TestResult {
        let waiter = s.spawn(|| q.wait(value, WAIT));
        let asleep = wait_until(WAIT, || dev.fence_debug().is_ok_and(|d| d.cpu_waits > waits));
        ensure!(asleep, "the progress wait never became pending");
        std::thread::sleep(Duration::from_millis(100));
        h.signal(1)?;
        waiter.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    let d1 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.released[uapi_debug::PATH_PER_QUEUE]) >= 1)?;
    let counts = [
        ("per-queue records", delta(&d0, &d1, |d| d.per_queue_records), 1),
        ("per-queue releases", delta(&d0, &d1, |d| d.released[uapi_debug::PATH_PER_QUEUE]), 1),
        ("log entries read", delta(&d0, &d1, |d| d.log_entries), 2),
        ("unlogged records", delta(&d0, &d1, |d| d.unlogged), 0),
        ("scans", delta(&d0, &d1, |d| d.scans), 0),
        ("scan releases", delta(&d0, &d1, |d| d.released[uapi_debug::PATH_SCAN_ALL]), 0),
        ("exact and NULL records", delta(&d0, &d1, |d| d.exact_records + d.null_records), 0),
    ];
    for (what, got, want) in counts {
        ensure!(got == want, "{what}: {got}, expected {want} ({d0:?} -> {d1:?})");
    }
    let events = timeline.read(&dev)?;
    let progress = q.progress_log_handle().raw();
    let signal = events
        .iter()
        .find(|e| e.operation == uapi_debug::TIMELINE_SIGNAL_EXECUTED && e.fence == progress && e.value == value);
    ensure!(signal.is_some_and(|e| e.log_index == 1), "progress signal entry {signal:?}, expected at index 1");
    Ok(())
}

/// proves: LOG-04, LOG-05 — over 40 rounds of a user-mode queue's `wait_fence`, `signal_fence`
/// and a command buffer with both, the timeline (read each round, so nothing overflows) shows
/// every library wait in the queue's wait log and every library signal and progress signal in
/// its signal log, each at the next index of its own log in stream order — 80 waits at 0..80
/// and 200 signals at 0..200, past the 84-entry ring twice — recording the right fence handle
/// and value.
fn library_fence_operations_take_the_next_entries_of_the_right_log(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let h = ctx.create_fence(FenceKind::Default, 0, 1)?;
    let g = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = ctx.create_queue(&QueueDesc::default())?;
    let (hh, gh, ph) = (h.log_handle()?.raw(), g.log_handle()?.raw(), q.progress_log_handle().raw());
    let mut timeline = Timeline::from_now(&dev)?;
    let mut events: Vec<TimelineEntry> = Vec::new();
    let mut want_signals = Vec::new();
    for r in 0..40u64 {
        q.wait_fence(&h, 1)?;
        want_signals.push((ph, 3 * r + 1));
        q.signal_fence(&g, 2 * r + 1)?;
        want_signals.extend([(gh, 2 * r + 1), (ph, 3 * r + 2)]);
        let mut cb = CommandBuffer::new();
        cb.wait_fence(&h, 1)?.signal_fence(&g, 2 * r + 2)?;
        let done = q.submit(&cb)?;
        want_signals.extend([(gh, 2 * r + 2), (ph, 3 * r + 3)]);
        q.wait(done, WAIT)?;
        events.extend(timeline.read(&dev)?);
    }
    ensure!(!events.iter().any(|e| e.operation == uapi_debug::TIMELINE_LOST), "the timeline lost entries");
    // A log entry of the progress fence (the timeline's thread events name it too: SUBMIT, the
    // CPU waits on it).
    let signaled = |e: &&TimelineEntry| e.fence == ph && e.operation == uapi_debug::TIMELINE_SIGNAL_EXECUTED;
    let queue = events.iter().find(signaled).ok_or("no entry of the progress fence")?.queue;
    let of = |op: u32| events.iter().filter(|e| e.queue == queue && e.operation == op).collect::<Vec<_>>();
    let (waits, signals) = (of(uapi_debug::TIMELINE_WAIT_UNBLOCKED), of(uapi_debug::TIMELINE_SIGNAL_EXECUTED));
    let indices = |v: &[&TimelineEntry]| v.iter().map(|e| e.log_index).collect::<Vec<_>>();
    ensure!(indices(&waits) == (0..80).collect::<Vec<u32>>(), "wait-log indices {:?}", indices(&waits));
    ensure!(waits.iter().all(|e| e.fence == hh && e.value == 1), "a wait entry not of the awaited fence");
    ensure!(indices(&signals) == (0..200).collect::<Vec<u32>>(), "signal-log indices {:?}", indices(&signals));
    let got: Vec<(u64, u64)> = signals.iter().map(|e| (e.fence, e.value)).collect();
    ensure!(got == want_signals, "signal entries (handle, value) {got:x?}, expected {want_signals:x?}");
    Ok(())
}

/// proves: LOG-04 — on a kernel-mode queue the library's logged signals and the progress signals
/// the module appends to each `SUBMIT` take turns in the signal log, each at the next index, even
/// across a `SUBMIT` refused because the ring was full (the queue held by a GPU wait): the
/// timeline shows (signal, progress) pairs at 0, 1, 2, … with no index skipped or used twice.
fn kernel_mode_signals_and_the_modules_progress_signals_share_the_signal_log_in_order(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let h = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let g = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let desc = QueueDesc::default().with_mode(QueueMode::KernelMode).with_slot_timeout(Duration::from_millis(200));
    let mut q = ctx.create_queue(&desc)?;
    let (gh, ph) = (g.log_handle()?.raw(), q.progress_log_handle().raw());
    let mut timeline = Timeline::from_now(&dev)?;
    // Everything after this GPU wait stays on the ring until the CPU signals `h`.
    q.wait_fence(&h, 1)?;
    let mut want = Vec::new();
    let mut refused = false;
    for v in 1..=32 {
        match q.signal_fence(&g, v) {
            Ok(()) => want.extend([(gh, v), (ph, q.last_submitted())]),
            Err(Error::Timeout { .. }) => {
                refused = true;
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    ensure!(refused, "the kernel ring never filled");
    h.signal(1)?;
    let next = want.len() as u64 / 2 + 1;
    for v in next..next + 3 {
        q.signal_fence(&g, v)?;
        want.extend([(gh, v), (ph, q.last_submitted())]);
    }
    q.wait(q.last_submitted(), WAIT)?;
    let events = timeline.read(&dev)?;
    // A log entry of the progress fence (the timeline's thread events name it too: SUBMIT, the
    // CPU waits on it).
    let signaled = |e: &&TimelineEntry| e.fence == ph && e.operation == uapi_debug::TIMELINE_SIGNAL_EXECUTED;
    let queue = events.iter().find(signaled).ok_or("no entry of the progress fence")?.queue;
    let signals: Vec<&TimelineEntry> =
        events.iter().filter(|e| e.queue == queue && e.operation == uapi_debug::TIMELINE_SIGNAL_EXECUTED).collect();
    let indices: Vec<u32> = signals.iter().map(|e| e.log_index).collect();
    ensure!(indices == (0..want.len() as u32).collect::<Vec<_>>(), "signal-log indices {indices:?}");
    let got: Vec<(u64, u64)> = signals.iter().map(|e| (e.fence, e.value)).collect();
    ensure!(got == want, "signal entries (handle, value) {got:x?}, expected {want:x?}");
    Ok(())
}

/// Turns verbose logging off again when the test ends, whatever happened.
struct Off<'a>(&'a Device);

impl Drop for Off<'_> {
    fn drop(&mut self) {
        let _ = self.0.set_verbose_logging(false);
    }
}

/// A wait that does not sleep: whether the watch's eventfd is already signalled.
fn told(watch: &VerboseLogWatch) -> Result<Option<bool>, crate::Error> {
    Ok(watch.wait_change(Deadline::after(Duration::ZERO))?)
}

/// The wait-log events of the queue whose progress fence is `progress` among `events`.
fn wait_log(events: &[TimelineEntry], progress: u64) -> Result<Vec<(u32, u32)>, crate::Error> {
    let signaled = |e: &&TimelineEntry| e.fence == progress && e.operation == uapi_debug::TIMELINE_SIGNAL_EXECUTED;
    let queue = events.iter().find(signaled).ok_or("no entry of the queue's progress fence")?.queue;
    Ok(events
        .iter()
        .filter(|e| {
            e.queue == queue
                && matches!(e.operation, uapi_debug::TIMELINE_WAIT_BEGIN | uapi_debug::TIMELINE_WAIT_UNBLOCKED)
        })
        .map(|e| (e.operation, e.log_index))
        .collect())
}

/// proves: LOG-18 — the module accepts a log entry with a zero timestamp and reads on past it:
/// a wait the library submitted with verbose logging on reserves a `WAIT_BEGIN` slot; the
/// device, finding verbose logging off by the time it runs the wait, writes that slot empty,
/// timestamps zero, between entries with real ones. The module skips the empty entry, loses
/// nothing (no loss marker) and reports the entries after it at their indices with their
/// timestamps: the wait log reads `WAIT_BEGIN` 0, `WAIT_UNBLOCKED` 1, 3 and 4, their End
/// timestamps increasing. A module taking a zero timestamp for the end of the written entries
/// never reports 3 and 4.
fn a_zero_timestamp_entry_is_accepted_and_the_log_read_past_it(path: &Path) -> TestResult {
    let tool = Device::open(path)?;
    if !regs::CAPS(tool.caps().raw.caps).verbose_log() {
        return Err("the device does not advertise CAPS.verbose_log".into());
    }
    let _off = Off(&tool);
    let (app, ctx) = open_context(path)?;
    let gate = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let h = ctx.create_fence(FenceKind::Default, 0, 1)?;
    let gh = gate.log_handle()?.raw();
    let mut q = ctx.create_queue(&QueueDesc::default())?;
    let progress = q.progress_log_handle().raw();
    let mut timeline = Timeline::from_now(&app)?;
    let mut events = Vec::new();
    tool.set_verbose_logging(true)?;
    ensure!(app.verbose_logging()?, "the library does not see verbose logging on");
    let mut cb = CommandBuffer::new();
    cb.wait_fence(&gate, 1)?.wait_fence(&h, 1)?;
    let held = q.submit(&cb)?;
    let begun = wait_until(WAIT, || {
        timeline.read(&app).is_ok_and(|read| {
            events.extend(read);
            events.iter().any(|e| e.fence == gh && e.operation == uapi_debug::TIMELINE_WAIT_BEGIN)
        })
    });
    ensure!(begun, "the gate's wait never logged WAIT_BEGIN: {events:?}");
    tool.set_verbose_logging(false)?;
    ensure!(!app.verbose_logging()?, "the library does not see verbose logging off");
    gate.signal(1)?;
    q.wait(held, WAIT)?;
    let mut cb = CommandBuffer::new();
    cb.wait_fence(&h, 1)?;
    let done = q.submit(&cb)?;
    q.wait(done, WAIT)?;
    events.extend(timeline.read(&app)?);
    ensure!(!events.iter().any(|e| e.operation == uapi_debug::TIMELINE_LOST), "the timeline lost entries");
    let got = wait_log(&events, progress)?;
    let (b, u) = (uapi_debug::TIMELINE_WAIT_BEGIN, uapi_debug::TIMELINE_WAIT_UNBLOCKED);
    let want = vec![(b, 0), (u, 1), (u, 3), (u, 4)];
    ensure!(got == want, "wait-log (operation, index) {got:?}, expected {want:?} (slot 2 written empty)");
    let ends: Vec<u64> = events
        .iter()
        .filter(|e| e.operation == u && e.fence != progress && matches!(e.log_index, 1 | 3 | 4))
        .map(|e| e.end_gpu)
        .collect();
    ensure!(ends.windows(2).all(|w| w[0] < w[1]) && ends.len() == 3, "End timestamps {ends:?}");
    Ok(())
}

/// proves: LOG-20 — a tool's `VERBOSE_LOG` turns verbose fence logging on and off, and both
/// sides are told: a process without `CAP_PERFMON` and `CAP_SYS_ADMIN` is refused the switch
/// (`EPERM`) and the switch stays off; after the tool's call the module reports it (and counts
/// the change), and the eventfd another device file of the library registered is already
/// signalled when the call returns — a wait that does not sleep sees the change, on and off, so
/// no polling is involved — and that library's submissions follow it: while on, each of its
/// logged waits has a `WAIT_BEGIN` entry at its first wait-log index and its `WAIT_UNBLOCKED`
/// at the next; before and after, only `WAIT_UNBLOCKED` entries, one index each.
fn verbose_logging_is_told_to_the_library_and_the_module_and_logs_wait_begin_only_while_on(path: &Path) -> TestResult {
    let tool = Device::open(path)?;
    if !regs::CAPS(tool.caps().raw.caps).verbose_log() {
        return Err("the device does not advertise CAPS.verbose_log".into());
    }
    let _off = Off(&tool);
    tool.set_verbose_logging(false)?;
    let unprivileged = proc::spawn("a process without CAP_PERFMON and CAP_SYS_ADMIN", move || {
        super::privilege::drop_capability(super::privilege::CAP_SYS_ADMIN)?;
        super::privilege::drop_capability(super::privilege::CAP_PERFMON)?;
        let d = Device::open(path)?;
        match d.set_verbose_logging(true) {
            Err(e) if e.errno() == Some(libc::EPERM) => {}
            other => return Err(format!("VERBOSE_LOG set without the capabilities: {other:?}, expected EPERM").into()),
        }
        ensure!(!d.verbose_logging()?, "the refused call turned verbose logging on");
        Ok(())
    })?;
    unprivileged.join()?;

    let (app, ctx) = open_context(path)?;
    let watch = app.watch_verbose_logging()?;
    ensure!(told(&watch)?.is_none(), "the watch was signalled before any change");
    let h = ctx.create_fence(FenceKind::Default, 0, 0)?;
    h.signal(1)?;
    let mut q = ctx.create_queue(&QueueDesc::default())?;
    let progress = q.progress_log_handle().raw();
    let mut timeline = Timeline::from_now(&app)?;
    let mut events = Vec::new();
    let mut round = |q: &mut belfry_umd::Queue, events: &mut Vec<TimelineEntry>| -> TestResult {
        q.wait_fence(&h, 1)?;
        q.wait(q.last_submitted(), crate::support::WAIT)?;
        events.extend(timeline.read(&app)?);
        Ok(())
    };
    round(&mut q, &mut events)?;

    let raw = RawDev::open(path)?;
    let generation = || -> Result<u64, crate::Error> {
        let a = raw.verbose_log(Default::default()).map_err(|e| format!("VERBOSE_LOG (read): errno {e}"))?;
        Ok(a.generation)
    };
    let g0 = generation()?;
    ensure!(tool.set_verbose_logging(true)?, "VERBOSE_LOG set on reads off");
    ensure!(generation()? == g0 + 1, "the module did not count the change");
    ensure!(told(&watch)? == Some(true), "the library's eventfd was not signalled when the switch went on");
    round(&mut q, &mut events)?;
    round(&mut q, &mut events)?;

    ensure!(!tool.set_verbose_logging(false)?, "VERBOSE_LOG set off reads on");
    ensure!(told(&watch)? == Some(false), "the library's eventfd was not signalled when the switch went off");
    ensure!(told(&watch)?.is_none(), "the watch stays signalled after its change was taken");
    round(&mut q, &mut events)?;

    ensure!(!events.iter().any(|e| e.operation == uapi_debug::TIMELINE_LOST), "the timeline lost entries");
    let got = wait_log(&events, progress)?;
    let (b, u) = (uapi_debug::TIMELINE_WAIT_BEGIN, uapi_debug::TIMELINE_WAIT_UNBLOCKED);
    let want = vec![(u, 0), (b, 1), (u, 2), (b, 3), (u, 4), (u, 5)];
    ensure!(got == want, "wait-log (operation, index) {got:?}, expected {want:?} (WAIT_BEGIN = {b:#x})");
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(each_queue_gets_two_log_buffers_no_process_can_map, Default, ["LOG-02", "LOG-04"]),
        test_entry!(log_overflow_is_detected_and_recovered_by_scanning, PerQueueInterrupts, ["LOG-15", "LOG-16"]),
        test_entry!(
            timeline_joins_queued_operations_with_their_logged_gpu_times,
            Default,
            ["LOG-01", "LOG-03", "LOG-10"]
        ),
        test_entry!(read_timeline_refuses_bad_arguments, Default, []),
        test_entry!(every_queue_logs_both_waits_and_signals, Default, ["LOG-19"]),
        test_entry!(
            user_mode_progress_waits_are_released_from_the_log_without_a_scan,
            PerQueueInterrupts,
            ["LOG-04", "LOG-05", "IRQ-10"]
        ),
        test_entry!(library_fence_operations_take_the_next_entries_of_the_right_log, Default, ["LOG-04", "LOG-05"]),
        test_entry!(
            kernel_mode_signals_and_the_modules_progress_signals_share_the_signal_log_in_order,
            Default,
            ["LOG-04"]
        ),
        test_entry!(
            verbose_logging_is_told_to_the_library_and_the_module_and_logs_wait_begin_only_while_on,
            Default,
            ["LOG-20"]
        ),
        test_entry!(a_zero_timestamp_entry_is_accepted_and_the_log_read_past_it, Default, ["LOG-18"]),
    ]
}
