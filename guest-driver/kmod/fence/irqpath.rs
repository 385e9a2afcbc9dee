// SPDX-License-Identifier: GPL-2.0

//! The native-fence interrupt paths, run in the interrupt thread ([`process`]): exact and NULL
//! records release the waits they name (or every wait) before any log is read; then the logs
//! are read (per-queue records, overflow detection, the timeline) and the per-queue records
//! release the waits of the fences their queues' new signal entries name, falling back to a
//! scan of every wait when a record's own entry (by its log index) is not among them (see
//! `super::log`). Queue-array records (IRQ-13) read only the named queues' logs and release the
//! waits their new signal entries satisfy by the logged value alone — no fence value is read;
//! when a named queue's log overflowed, or those entries release nothing, the pass falls back
//! to reading the value of every waited fence of the device (IRQ-14), counted.

use kernel::prelude::*;

use super::{
    log::Logs,
    waits::Fences,
    work::{FenceWork, LoggedSignal},
};
use crate::abi::{fence, uapi_debug};

/// Index, past the `uapi_debug::PATH_*` ones, of the releases of the queue-array path in the
/// pass's counts (`IRQ_DEBUG.queue_array_released`).
const PATH_QUEUE_ARRAY: usize = 4;

/// The interrupt thread's native-fence work: the paths of the module doc (`super::log`).
/// Whether there was any (fence records of any form, or a ring overflow): only then may a
/// fence value have moved on this device.
pub(crate) fn process(logs_obj: &Logs, fences: &Fences) -> bool {
    let work = logs_obj.take_work();
    if !work.pending() {
        return false;
    }
    // Exact and NULL records need no log: their waits are released at once (IRQ-08: read the
    // fence value, wake its waiters), before the logs are read for the timeline.
    let mut released = [0u64; 5];
    let mut reads = 0u64;
    if release(fences, &work, &[], work.null, false, &mut released, &mut reads) {
        fences.wake_waiters();
    }
    let mut hw = logs_obj.core().hw().ok();
    let mut logs = logs_obj.state();
    let stats = &mut logs.stats;
    stats.exact_records += work.counts[0];
    stats.per_queue_records += work.counts[1];
    stats.null_records += work.counts[2];
    stats.queue_array_records += work.counts[3];
    // Per-queue records read only their queues' logs (IRQ-10); exact records read every log
    // for the timestamps (IRQ-08), NULL records rescan every log (IRQ-11).
    let every_log = work.n_exact > 0 || work.null;
    let mut signaled = KVec::new();
    let mut overflow = false;
    if every_log || work.n_per_queue > 0 || work.n_queues > 0 {
        let per_queue = work.per_queue();
        let named = work.queues();
        overflow = logs.collect(
            logs_obj.core(),
            hw.as_mut(),
            |q| every_log || per_queue.iter().any(|r| r.queue == q) || named.contains(&q),
            &mut signaled,
        );
    }
    drop(hw);
    let (carried, carried_lost) = logs.take_carried();
    let mut scan = overflow;
    let mut any = false;
    if work.n_queues > 0 {
        // IRQ-13: the named queues' new signal entries (and those read since the last pass
        // outside it) say which fences moved to which values; IRQ-14: an overflowed log (or
        // entries lost before this pass, or entries that release nothing) leaves only the
        // fences' own values.
        if !overflow && !carried_lost {
            any = release_logged(fences, &signaled, &carried, &mut released);
        }
        if overflow || carried_lost || released[PATH_QUEUE_ARRAY] == 0 {
            scan = true;
            logs.stats.queue_array_fallbacks += 1;
        }
    }
    // A per-queue record whose own entry (at its log index, with its value) is not among its
    // queue's new entries cannot name what it released — an entry of another fence with the
    // same value is no substitute: scan.
    if !scan && work.unexplained(&signaled) > 0 {
        scan = true;
        logs.stats.unlogged += 1;
    }
    if scan || work.n_per_queue > 0 {
        any |= release(fences, &work, &signaled, scan, overflow, &mut released, &mut reads);
    }
    if !scan && work.n_per_queue > 0 && released[uapi_debug::PATH_PER_QUEUE] == 0 {
        // The device interrupted for a CPU waiter, yet the logged fences released none (an
        // entry with another fence's handle): scan, so no wake-up is lost.
        scan = true;
        logs.stats.unlogged += 1;
        any |= release(fences, &work, &signaled, scan, overflow, &mut released, &mut reads);
    }
    logs.stats.fence_value_reads += reads;
    if scan || work.null {
        logs.stats.scans += 1;
        if work.legacy {
            logs.stats.legacy_scans += 1;
        }
    }
    for (total, n) in logs.stats.released.iter_mut().zip(released) {
        *total += n;
    }
    logs.stats.queue_array_released += released[PATH_QUEUE_ARRAY];
    drop(logs);
    if any {
        fences.wake_waiters();
    }
    true
}

/// One pass over the pending waits: those the batch's records name (or every one, `scan`)
/// whose fence reached their value are marked released, their fences noted for the
/// MonitoredValue update (`Fences::rearm_released`), and counted by path in `released`
/// (all under [`uapi_debug::PATH_OVERFLOW`] after an `overflow`); each CurrentValue read is
/// counted in `reads`. Whether it released any.
fn release(
    fences: &Fences,
    work: &FenceWork,
    signaled: &[LoggedSignal],
    scan: bool,
    overflow: bool,
    released: &mut [u64; 5],
    reads: &mut u64,
) -> bool {
    let mut any = false;
    let mut guard = fences.book();
    let book = &mut *guard;
    for w in book.cpu_waits.iter() {
        let path = if w.monitored {
            // Legacy waits: after monitored-fence records, or a scan that asks for them.
            (work.monitored || (scan && work.legacy)).then_some(None)
        } else if work.exact().contains(&w.handle) {
            Some(Some(uapi_debug::PATH_EXACT))
        } else if work.names(signaled, w.handle) {
            Some(Some(uapi_debug::PATH_PER_QUEUE))
        } else if scan {
            Some(Some(uapi_debug::PATH_SCAN_ALL))
        } else {
            None
        };
        let Some(path) = path else {
            continue;
        };
        if !w.is_released() {
            *reads += 1;
        }
        if w.release_if_signaled() {
            any = true;
            book.rearm.note(w);
            let path = if overflow && path.is_some() {
                Some(uapi_debug::PATH_OVERFLOW)
            } else {
                path
            };
            if let Some(n) = path.and_then(|p| released.get_mut(p)) {
                *n += 1;
            }
        }
    }
    any
}

/// The queue-array pass (IRQ-13): every pending native-fence wait whose fence an entry of
/// `signaled` or `carried` (read from the logs, by a queue whose context may name the fence)
/// logs at or past its value is marked released — on the logged value, without reading the
/// fence — its fence noted for the MonitoredValue update and counted under
/// [`PATH_QUEUE_ARRAY`]. Whether it released any.
fn release_logged(
    fences: &Fences,
    signaled: &[LoggedSignal],
    carried: &[LoggedSignal],
    released: &mut [u64; 5],
) -> bool {
    let mut any = false;
    let mut guard = fences.book();
    let book = &mut *guard;
    for w in book.cpu_waits.iter().filter(|w| !w.monitored) {
        let newest = [signaled, carried]
            .into_iter()
            .filter_map(|entries| FenceWork::logged_value(entries, w.handle))
            .reduce(|a, b| if fence::is_signaled(b, a) { b } else { a });
        if newest.is_some_and(|v| w.release_if_logged(v)) {
            any = true;
            book.rearm.note(w);
            released[PATH_QUEUE_ARRAY] += 1;
        }
    }
    any
}
