// SPDX-License-Identifier: GPL-2.0

//! The native-fence interrupt paths, run in the interrupt thread ([`process`]): exact and NULL
//! records release the waits they name (or every wait) before any log is read; then the logs
//! are read (per-queue records, overflow detection, the timeline) and the per-queue records
//! release the waits of the fences their queues' new signal entries name, falling back to a
//! scan of every wait when a record's own entry (by its log index) is not among them (see
//! `super::log`).

use kernel::prelude::*;

use super::{
    log::Logs,
    waits::Fences,
    work::{FenceWork, LoggedSignal},
};
use crate::abi::uapi;

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
    let mut released = [0u64; 4];
    if release(fences, &work, &[], work.null, false, &mut released) {
        fences.wake_waiters();
    }
    let mut hw = logs_obj.core().hw().ok();
    let mut logs = logs_obj.state();
    let stats = &mut logs.stats;
    stats.exact_records += work.counts[0];
    stats.per_queue_records += work.counts[1];
    stats.null_records += work.counts[2];
    // Per-queue records read only their queues' logs (IRQ-10); exact records read every log
    // for the timestamps (IRQ-08), NULL records rescan every log (IRQ-11).
    let every_log = work.n_exact > 0 || work.null;
    let mut signaled = KVec::new();
    let mut overflow = false;
    if every_log || work.n_per_queue > 0 {
        let per_queue = work.per_queue();
        overflow = logs.collect(
            logs_obj.core(),
            hw.as_mut(),
            |q| every_log || per_queue.iter().any(|r| r.queue == q),
            &mut signaled,
        );
    }
    drop(hw);
    let mut scan = overflow;
    // A per-queue record whose own entry (at its log index, with its value) is not among its
    // queue's new entries cannot name what it released — an entry of another fence with the
    // same value is no substitute: scan.
    if !scan && work.unexplained(&signaled) > 0 {
        scan = true;
        logs.stats.unlogged += 1;
    }
    let mut any = false;
    if scan || work.n_per_queue > 0 {
        any = release(fences, &work, &signaled, scan, overflow, &mut released);
    }
    if !scan && work.n_per_queue > 0 && released[uapi::PATH_PER_QUEUE] == 0 {
        // The device interrupted for a CPU waiter, yet the logged fences released none (an
        // entry with another fence's handle): scan, so no wake-up is lost.
        scan = true;
        logs.stats.unlogged += 1;
        any |= release(fences, &work, &signaled, scan, overflow, &mut released);
    }
    if scan || work.null {
        logs.stats.scans += 1;
        if work.legacy {
            logs.stats.legacy_scans += 1;
        }
    }
    for (total, n) in logs.stats.released.iter_mut().zip(released) {
        *total += n;
    }
    drop(logs);
    if any {
        fences.wake_waiters();
    }
    true
}

/// One pass over the pending waits: those the batch's records name (or every one, `scan`)
/// whose fence reached their value are marked released, their fences noted for the
/// MonitoredValue update (`Fences::rearm_released`), and counted by path in `released`
/// (all under [`uapi::PATH_OVERFLOW`] after an `overflow`). Whether it released any.
fn release(
    fences: &Fences,
    work: &FenceWork,
    signaled: &[LoggedSignal],
    scan: bool,
    overflow: bool,
    released: &mut [u64; 4],
) -> bool {
    let mut any = false;
    let mut guard = fences.book();
    let book = &mut *guard;
    for w in book.cpu_waits.iter() {
        let path = if w.monitored {
            // Legacy waits: after monitored-fence records, or a scan that asks for them.
            (work.monitored || (scan && work.legacy)).then_some(None)
        } else if work.exact().contains(&w.handle) {
            Some(Some(uapi::PATH_EXACT))
        } else if work.names(signaled, w.handle) {
            Some(Some(uapi::PATH_PER_QUEUE))
        } else if scan {
            Some(Some(uapi::PATH_SCAN_ALL))
        } else {
            None
        };
        let Some(path) = path else {
            continue;
        };
        if w.release_if_signaled() {
            any = true;
            book.rearm.note(w);
            let path = if overflow && path.is_some() {
                Some(uapi::PATH_OVERFLOW)
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
