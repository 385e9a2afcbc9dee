//! The library's fence-log slots (LOG-04, LOG-05): every native-fence wait and signal the
//! library queues — its `wait_fence`/`signal_fence` packets and the progress signal closing each
//! user-mode submission — is logged at its queue's next entry of the right log, so the module's
//! per-queue interrupt path finds the progress signal in the log instead of scanning every wait.

use std::path::Path;
use std::time::Duration;

use belfry_abi::uapi::{self, TimelineEntry};
use belfry_umd::{CommandBuffer, Device, Error, FenceKind, QueueDesc, QueueMode, Timeline};

use crate::fencelog::{debug_when, delta, warm_queue};
use crate::{ensure, wait_until, Test, TestResult};

const WAIT: Duration = Duration::from_secs(10);

/// proves: LOG-04, LOG-05, IRQ-10 — on the per-queue device a CPU wait for a user-mode
/// queue's progress value (the submission behind a GPU wait the CPU releases 100 ms after the
/// waiter sleeps) is released from the log: exactly one per-queue record, one per-queue
/// release, two entries read (the library's wait entry and its progress signal's entry, which
/// names the progress fence), no unlogged record and no scan. With the progress signal
/// unlogged (`NO_LOG`) the record finds no entry and the module scans.
fn user_mode_progress_waits_are_released_from_the_log_without_a_scan(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
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
    let d1 = debug_when(&dev, &d0, |a, b| delta(a, b, |d| d.released[uapi::PATH_PER_QUEUE]) >= 1)?;
    let counts = [
        ("per-queue records", delta(&d0, &d1, |d| d.per_queue_records), 1),
        ("per-queue releases", delta(&d0, &d1, |d| d.released[uapi::PATH_PER_QUEUE]), 1),
        ("log entries read", delta(&d0, &d1, |d| d.log_entries), 2),
        ("unlogged records", delta(&d0, &d1, |d| d.unlogged), 0),
        ("scans", delta(&d0, &d1, |d| d.scans), 0),
        ("scan releases", delta(&d0, &d1, |d| d.released[uapi::PATH_SCAN_ALL]), 0),
        ("exact and NULL records", delta(&d0, &d1, |d| d.exact_records + d.null_records), 0),
    ];
    for (what, got, want) in counts {
        ensure!(got == want, "{what}: {got}, expected {want} ({d0:?} -> {d1:?})");
    }
    let events = timeline.read(&dev)?;
    let progress = q.progress_log_handle();
    let signal = events
        .iter()
        .find(|e| e.operation == uapi::TIMELINE_SIGNAL_EXECUTED && e.fence == progress && e.value == value);
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
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let h = ctx.create_fence(FenceKind::Default, 0, 1)?;
    let g = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = ctx.create_queue(&QueueDesc::default())?;
    let (hh, gh, ph) = (h.log_handle()?, g.log_handle()?, q.progress_log_handle());
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
    ensure!(!events.iter().any(|e| e.operation == uapi::TIMELINE_LOST), "the timeline lost entries");
    let queue = events.iter().find(|e| e.fence == ph).ok_or("no entry of the progress fence")?.queue;
    let of = |op: u32| events.iter().filter(|e| e.queue == queue && e.operation == op).collect::<Vec<_>>();
    let (waits, signals) = (of(uapi::TIMELINE_WAIT_UNBLOCKED), of(uapi::TIMELINE_SIGNAL_EXECUTED));
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
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let h = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let g = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let desc =
        QueueDesc { mode: QueueMode::KernelMode, slot_timeout: Duration::from_millis(200), ..QueueDesc::default() };
    let mut q = ctx.create_queue(&desc)?;
    let (gh, ph) = (g.log_handle()?, q.progress_log_handle());
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
    let queue = events.iter().find(|e| e.fence == ph).ok_or("no entry of the progress fence")?.queue;
    let signals: Vec<&TimelineEntry> =
        events.iter().filter(|e| e.queue == queue && e.operation == uapi::TIMELINE_SIGNAL_EXECUTED).collect();
    let indices: Vec<u32> = signals.iter().map(|e| e.log_index).collect();
    ensure!(indices == (0..want.len() as u32).collect::<Vec<_>>(), "signal-log indices {indices:?}");
    let got: Vec<(u64, u64)> = signals.iter().map(|e| (e.fence, e.value)).collect();
    ensure!(got == want, "signal entries (handle, value) {got:x?}, expected {want:x?}");
    Ok(())
}

/// The tests of this file.
pub(crate) fn all() -> Vec<Test> {
    vec![
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
    ]
}
