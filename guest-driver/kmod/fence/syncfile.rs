// SPDX-License-Identifier: GPL-2.0

//! `sync_file` exports of monitored fence values (`EXPORT_SYNC_FILE`).
//!
//! An export is a [`DmaFence`] in a `sync_file` and a [`SyncWait`] in the fence book, like an
//! eventfd wait: [`complete`] signals the exports whose fence reached its value. It runs where
//! a monitored fence can have moved, after the CPU waits and the held work of that path were
//! released: the interrupt thread (after the `MONITORED_FENCE_SIGNAL` and `NOTIFY` records of
//! kernel-mode queues, whose software signals `Held::release` writes just before), a CPU
//! signal, and a cross-adapter change. Monitored fences have no MonitoredValue, so an export
//! needs no device update.
//!
//! Nothing exported is left pending for ever: [`abandon`] fails the exports of a fence handle
//! when it is destroyed and those of a file when it closes (`ECANCELED`: what could have
//! signalled them — the file's kernel-mode queues, its CPU signals — is gone), and
//! [`AbandonOnUnbind`] fails every export of a device being unbound (`ENODEV`), and
//! [`expire`], run by the hang watchdog, fails those pending longer than
//! `uapi_sync::SYNC_FILE_TIMEOUT_MS` (`ETIMEDOUT`), and [`end_lost`] fails those whose value a
//! lost context's unexecuted work was going to signal (`ECANCELED`, as amdgpu fails the
//! fences of a lost context's jobs) once the module has processed the loss, or at once when
//! exported after it: a kernel fence must signal in bounded
//! time (Documentation/driver-api/dma-buf.rst), and a monitored fence's value may be one no
//! queued work will ever write. One process may keep [`uapi_sync::MAX_SYNC_EXPORTS_PER_PROCESS`]
//! exports pending across its files of a device (counted for the file's opener in the
//! device's per-process shares, `hw::shares::Share::SyncExport`).

use kernel::{
    fs::File,
    prelude::*,
    sync::{aref::ARef, Arc},
    time::{ClockSource, Monotonic},
};

use super::{book::SyncWait, lost::LostSignals, waits::Fences, window};
use crate::{
    abi::{ids::FenceHandle, uapi_sync},
    bindings::dmafence::DmaFence,
    hw::{
        dmamem::DmaBuf,
        shares::{Share, ShareOwner},
    },
};

/// Whether this kernel can export (`CONFIG_SYNC_FILE`; `QUERY_CAPS`'s
/// `CAPS_FLAG_SYNC_FILE_EXPORT`).
pub(crate) const SUPPORTED: bool = crate::bindings::dmafence::SYNC_FILE;

/// `EXPORT_SYNC_FILE` of file `owner`'s (its objects counted for `share_owner`) monitored fence `local`
/// (global handle `global`, CurrentValue at `offset` of `current`, 32-bit values if `wrap32`)
/// at `value`: the
/// `sync_file`'s file, its fence signalled at once if the value is reached, else registered
/// for [`complete`].
///
/// # Errors
///
/// `EOPNOTSUPP` without `CONFIG_SYNC_FILE`, `ENOSPC` past the per-process limit, `ENOMEM`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn export(
    fences: &Fences,
    owner: usize,
    share_owner: &ShareOwner,
    local: u32,
    global: FenceHandle,
    current: Arc<DmaBuf>,
    offset: usize,
    wrap32: bool,
    value: u64,
) -> Result<ARef<File>> {
    let fence = DmaFence::new(value)?;
    let file = fence.sync_file()?;
    if window::reached(wrap32, current.read64(offset), value) {
        fence.signal();
        return Ok(file);
    }
    // `fence` drops on an error here: it fails with `ECANCELED` and `file` is let go.
    let share = fences
        .core()
        .charge_share(share_owner, Share::SyncExport, uapi_sync::MAX_SYNC_EXPORTS_PER_PROCESS)?;
    let w = SyncWait {
        owner,
        local,
        global,
        value,
        current,
        offset,
        wrap32,
        fence,
        since_ns: now_ns(),
        _share: share,
    };
    fences.book().sync_waits.push(w, GFP_KERNEL_ACCOUNT)?;
    // The value may have been reached between the check and the registration, after the
    // signaller's own `complete`: look again; and the value may be one lost work was going
    // to signal.
    complete(fences);
    end_lost(fences);
    Ok(file)
}

/// Fails with `ECANCELED` the exports whose value lost work was going to signal (signals
/// those reached meanwhile); after a context loss was processed.
pub(crate) fn end_lost(fences: &Fences) {
    let lost = LostSignals::read(fences);
    if lost.is_empty() {
        return;
    }
    end_matching(fences, ECANCELED, |w| lost.reach(w.global, true, w.value));
}

/// Signals every export whose fence reached its value (outside the book's lock).
pub(crate) fn complete(fences: &Fences) {
    let mut reached = KVec::<SyncWait>::new();
    {
        let mut book = fences.book();
        let waits = &mut book.sync_waits;
        if waits.is_empty() || reached.reserve(waits.len(), GFP_KERNEL).is_err() {
            return;
        }
        let mut i = 0;
        while i < waits.len() {
            if !waits[i].reached() {
                i += 1;
                continue;
            }
            let Ok(w) = waits.remove(i) else {
                break;
            };
            // Room reserved above.
            if let Err(e) = reached.push_within_capacity(w) {
                e.0.fence.signal();
            }
        }
    }
    for w in reached {
        w.fence.signal();
    }
}

/// Fails with `err` the exports of file `owner` (every one, or those of its fence handle
/// `local`) whose value is not reached, and signals those whose value is.
pub(crate) fn abandon(fences: &Fences, owner: usize, local: Option<u32>, err: Error) {
    end_matching(fences, err, |w| {
        w.owner == owner && local.is_none_or(|l| l == w.local)
    });
}

/// Ends the exports `pick` selects, outside the book's lock: signalled if reached, else failed
/// with `err`.
fn end_matching(fences: &Fences, err: Error, pick: impl Fn(&SyncWait) -> bool) {
    let mut picked = KVec::<SyncWait>::new();
    {
        let mut book = fences.book();
        let waits = &mut book.sync_waits;
        // Without room, the exports are ended under the lock.
        let _ = picked.reserve(waits.len(), GFP_KERNEL);
        let mut i = 0;
        while i < waits.len() {
            if !pick(&waits[i]) {
                i += 1;
                continue;
            }
            let Ok(w) = waits.remove(i) else {
                break;
            };
            if let Err(e) = picked.push_within_capacity(w) {
                end(e.0, err);
            }
        }
    }
    for w in picked {
        end(w, err);
    }
}

/// `CLOCK_MONOTONIC` now, in ns.
fn now_ns() -> i64 {
    <Monotonic as ClockSource>::ktime_get()
}

/// Fails with `ETIMEDOUT` the exports pending for `uapi_sync::SYNC_FILE_TIMEOUT_MS` or more
/// (signals those reached meanwhile); the hang watchdog's every run.
pub(crate) fn expire(fences: &Fences) {
    if fences.book().sync_waits.is_empty() {
        return;
    }
    let limit = i64::from(uapi_sync::SYNC_FILE_TIMEOUT_MS) * 1_000_000;
    let now = now_ns();
    end_matching(fences, ETIMEDOUT, |w| now - w.since_ns >= limit);
}

/// Signals `w` if its value is reached, else fails it with `err`.
fn end(w: SyncWait, err: Error) {
    if w.reached() {
        w.fence.signal();
    } else {
        w.fence.fail(err);
    }
}

/// Fails every pending export with `ENODEV` when dropped: a field of the bound device's data,
/// dropped once its interrupts are gone (nothing would signal them any more).
pub(crate) struct AbandonOnUnbind(pub(crate) Arc<Fences>);

impl Drop for AbandonOnUnbind {
    fn drop(&mut self) {
        end_matching(&self.0, ENODEV, |_| true);
    }
}
