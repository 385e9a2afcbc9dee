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
//! [`AbandonOnUnbind`] fails every export of a device being unbound (`ENODEV`; an export on a
//! binding already gone — its core revoked by a function reset or the unbind — fails at once), and
//! [`expire`], run by the hang watchdog, fails those pending longer than
//! `uapi_sync::SYNC_FILE_TIMEOUT_MS` (`ETIMEDOUT`), and [`end_lost`] fails those whose value a
//! lost context's unexecuted work was going to signal (`ECANCELED`, as amdgpu fails the
//! fences of a lost context's jobs) once the module has processed the loss, or at once when
//! exported after it: a kernel fence must signal in bounded
//! time (Documentation/driver-api/dma-buf.rst), and a monitored fence's value may be one no
//! queued work will ever write. One process may keep [`uapi_sync::MAX_SYNC_EXPORTS_PER_PROCESS`]
//! exports pending across its files of a device (counted for the file's opener in the
//! device's per-process shares, `hw::shares::Share::SyncExport`).
//!
//! Every path that ends exports ends each inside a dma-fence signalling critical section
//! ([`Signalling`]) that takes only the exports' own lock and allocates nothing; the exports'
//! list grows outside that lock ([`register`]), so no signalling path waits for an allocation
//! that may reclaim (the kernel's dma-fence rules; lockdep checks them on a debug kernel).

use kernel::{
    fs::File,
    prelude::*,
    sync::{aref::ARef, Arc},
    time::{ClockSource, Monotonic},
};

use super::{book::SyncWait, lost::LostSignals, waits::Fences, window};
use crate::{
    abi::{ids::FenceHandle, uapi_sync},
    bindings::dmafence::{DmaFence, Signalling},
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
    register(fences, w)?;
    // The value may have been reached between the check and the registration, after the
    // signaller's own `complete`: look again; and the value may be one lost work was going
    // to signal.
    complete(fences);
    end_lost(fences);
    // A gone binding (a function reset or an unbind revoked its core; the revocation comes
    // before their own `end_on_loss`, so an export registered after that ran sees it here)
    // signals nothing any more: the export fails at once.
    if fences.core().is_revoked() {
        end_on_loss(fences);
    }
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

/// Signals every export whose fence reached its value.
pub(crate) fn complete(fences: &Fences) {
    end_each(fences, |w| w.reached().then_some(None));
}

/// Fails with `err` the exports of file `owner` (every one, or those of its fence handle
/// `local`) whose value is not reached, and signals those whose value is.
pub(crate) fn abandon(fences: &Fences, owner: usize, local: Option<u32>, err: Error) {
    end_matching(fences, err, |w| {
        w.owner == owner && local.is_none_or(|l| l == w.local)
    });
}

/// Ends the exports `pick` selects: signalled if reached, else failed with `err`.
fn end_matching(fences: &Fences, err: Error, pick: impl Fn(&SyncWait) -> bool) {
    end_each(fences, |w| pick(w).then(|| (!w.reached()).then_some(err)));
}

/// Ends, one by one, each export for which `verdict` says how (`Some(None)`: signalled,
/// `Some(Some(e))`: failed with `e`). Each is taken out of the list and ended inside a
/// dma-fence signalling section, which allocates nothing and takes only the list's lock; what
/// it held (its share, its CurrentValue page) is let go after the section.
fn end_each(fences: &Fences, verdict: impl Fn(&SyncWait) -> Option<Option<Error>>) {
    loop {
        let section = Signalling::begin();
        let taken = {
            let mut list = fences.exports();
            list.iter()
                .enumerate()
                .find_map(|(i, w)| verdict(w).map(|how| (i, how)))
                .and_then(|(i, how)| list.remove(i).ok().map(|w| (w, how)))
        };
        let Some((mut w, how)) = taken else {
            return;
        };
        w.fence.end_in_place(how);
        drop(section);
        drop(w);
    }
}

/// Adds `w` to the pending exports. The list grows outside its lock (a new, larger list
/// allocated, then the entries moved into it under the lock), so nothing allocates while the
/// signalling paths could be waiting for the lock.
///
/// # Errors
///
/// `ENOMEM` (`w` is dropped: its fence fails with `ECANCELED`).
fn register(fences: &Fences, w: SyncWait) -> Result {
    let mut w = w;
    loop {
        let want = {
            let mut list = fences.exports();
            match list.push_within_capacity(w) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    w = e.0;
                    (list.len() + 1).max(4).saturating_mul(2)
                }
            }
        };
        let mut bigger = KVec::<SyncWait>::with_capacity(want, GFP_KERNEL_ACCOUNT)?;
        let mut list = fences.exports();
        if list.len() < bigger.capacity() {
            for x in list.drain_all() {
                // Room: the new list holds more than the old one's entries.
                let _ = bigger.push_within_capacity(x);
            }
            core::mem::swap(&mut *list, &mut bigger);
        }
        drop(list);
        // `bigger` is now the old, empty list (or the unused new one): freed outside the lock.
    }
}

/// `CLOCK_MONOTONIC` now, in ns.
fn now_ns() -> i64 {
    <Monotonic as ClockSource>::ktime_get()
}

/// Fails with `ETIMEDOUT` the exports pending for `uapi_sync::SYNC_FILE_TIMEOUT_MS` or more
/// (signals those reached meanwhile); the hang watchdog's every run.
pub(crate) fn expire(fences: &Fences) {
    if fences.exports().is_empty() {
        return;
    }
    let limit = i64::from(uapi_sync::SYNC_FILE_TIMEOUT_MS) * 1_000_000;
    let now = now_ns();
    end_matching(fences, ETIMEDOUT, |w| now - w.since_ns >= limit);
}

/// Fails every pending export with `ENODEV` when dropped: a field of the bound device's data,
/// dropped once its interrupts are gone (nothing would signal them any more).
pub(crate) struct AbandonOnUnbind(pub(crate) Arc<Fences>);

impl Drop for AbandonOnUnbind {
    fn drop(&mut self) {
        end_on_loss(&self.0);
    }
}

/// Fails every pending export of the device with `ENODEV`: the device is gone (unbound, or its
/// binding lost to a function reset), and nothing will signal them.
pub(crate) fn end_on_loss(fences: &Fences) {
    end_matching(fences, ENODEV, |_| true);
}
