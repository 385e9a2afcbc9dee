// SPDX-License-Identifier: GPL-2.0

//! Pollable CPU waits on fences (FEN-18).
//!
//! A pollable wait is an eventfd the caller owns: `WAIT_FENCE_EVENTFD` registers it and
//! returns at once, and the module adds 1 to it when CurrentValue reaches the value (at once if
//! it already has). Why an eventfd: the 7.3 miscdevice has no `poll`, and an eventfd is a file
//! the process already knows how to poll, epoll and read, needs no file type of ours, and is
//! signaled with one call from process context. A pending eventfd wait counts in MonitoredValue
//! (least pending value − 1) like a blocking one.
//!
//! [`complete`] signals every eventfd wait its fence satisfies, then sends the new
//! MonitoredValues of every fence it touched in ONE `UPDATE_MONITORED_VALUES` command, then
//! reads the values again (RACE-06) until nothing more completes. It runs from the interrupt
//! thread after native- or monitored-fence records, after a CPU signal and after a
//! registration. A wait is withdrawn unsignaled by `CANCEL_FENCE_EVENTFD` ([`cancel`], what the
//! library's `FenceEvent` does on drop) and when its file is closed; when its fence handle is
//! destroyed it is signaled (a poll loop wakes; the caller finds the fence gone) and dropped.
//! Each withdrawal recomputes the fence's MonitoredValue from the waits left (MV-03), in one
//! batched update.
//!
//! When the device goes — unbound, its binding lost to a device-lost reprobe or to a function
//! reset — every pending wait of the device is signaled and dropped ([`end_on_loss`]), as the
//! blocking waits end with `ENODEV`: the library's `FenceEvent` then finds the value unreached
//! and the device gone (`WAIT_FENCES` answers `ENODEV`), and a registration after that is
//! refused with `ENODEV`. Only the device's own waits are touched: each device keeps its own.
//!
//! A wait whose value a lost context's unexecuted work was going to signal (the device named
//! it, `Fences::abandon_lost_signals`) is signaled and dropped too ([`end_lost`]) as soon as
//! the module has processed the loss (the engine reset of a hang, or the fault), or at once
//! when registered after it; the library's `FenceEvent` then finds the value unreached and the
//! wait lost (`WAIT_FENCES` answers `ECANCELED`). A wait on a value no lost work was going to
//! signal is left alone: whatever else may signal it still can.
//!
//! One process may keep [`uapi::MAX_FENCE_EVENT_WAITS_PER_PROCESS`] waits pending across its
//! files of a device (counted for the file's opener in the device's per-process shares,
//! `hw::shares::Share::EventWait`); the next registration is refused with `ENOSPC` until one
//! is signaled, cancelled or dropped.

use kernel::{prelude::*, sync::Arc};

use super::{
    book::EventWait,
    log::Logs,
    lost::LostSignals,
    waits::Fences,
};
use crate::{
    abi::{fence, ids::FenceHandle, irq, uapi, uapi_debug},
    bindings::eventfd::EventFd,
    hw::{
        dmamem::DmaBuf,
        shares::{Share, ShareOwner},
    },
};

/// `WAIT_FENCE_EVENTFD` of file `owner`, whose objects count for `share_owner`: signals eventfd `fd` once
/// fence `global` (CurrentValue at `offset` of `current`; `native`: it has a MonitoredValue)
/// reaches `value`. Returns at once.
///
/// # Errors
///
/// `EBADF`/`EINVAL` for an fd that is not an eventfd, `ENOSPC` past the per-process limit,
/// `ENOMEM`, `ENODEV` once the device is gone (the wait is not left pending), and the
/// MonitoredValue update's errors (`EIO`, `ETIMEDOUT`; the wait is then withdrawn).
#[allow(clippy::too_many_arguments)]
pub(crate) fn wait_eventfd(
    fences: &Fences,
    logs: &Logs,
    owner: usize,
    share_owner: &ShareOwner,
    local: u32,
    global: FenceHandle,
    native: bool,
    current: Arc<DmaBuf>,
    offset: usize,
    value: u64,
    fd: i32,
) -> Result {
    let event = EventFd::get(fd)?;
    if fence::is_signaled(current.read64(offset), value) {
        event.signal();
        logs.note_thread(uapi_debug::TIMELINE_EVENTFD_SIGNALED, irq::NONE, global.raw(), value, 0);
        fences.book().event_signals += 1;
        return Ok(());
    }
    if fences.core().is_revoked() {
        return Err(ENODEV);
    }
    let share = fences.core().charge_share(
        share_owner,
        Share::EventWait,
        uapi::MAX_FENCE_EVENT_WAITS_PER_PROCESS,
    )?;
    {
        let mut book = fences.book();
        let waits = &mut book.event_waits;
        waits.push(
            EventWait {
                owner,
                local,
                global,
                native,
                value,
                current,
                offset,
                event,
                _share: share,
            },
            GFP_KERNEL_ACCOUNT,
        )?;
    }
    if native {
        if let Err(e) = fences.update_monitored(&[global]) {
            withdraw(fences, owner, local, value);
            return Err(e);
        }
    }
    // The device went while the wait was registered: the loss's `end_on_loss` either found it
    // (and signaled it) or runs after this check saw the core revoked.
    if fences.core().is_revoked() {
        withdraw(fences, owner, local, value);
        return Err(ENODEV);
    }
    // The signal may have come before the MonitoredValue update: read again (RACE-06).
    complete(fences, logs);
    // Its value may be one lost work was going to signal, recorded before the registration or
    // while it was made.
    end_lost(fences);
    Ok(())
}

/// Drops, unsignaled, the newest wait of file `owner` on its handle `local` for `value` (one
/// being registered that cannot stay), if it is still pending.
fn withdraw(fences: &Fences, owner: usize, local: u32, value: u64) {
    let withdrawn = {
        let mut book = fences.book();
        let waits = &mut book.event_waits;
        let mine = waits
            .iter()
            .rposition(|w| w.owner == owner && w.local == local && w.value == value);
        mine.and_then(|i| waits.remove(i).ok())
    };
    drop(withdrawn);
}

/// The device is gone (unbound, or its binding lost to a function reset): every pending wait
/// of the device is signaled and dropped, so a poller or a reader of its eventfd wakes and
/// finds the device gone (`WAIT_FENCES` answers `ENODEV`). Nothing else will signal them.
pub(crate) fn end_on_loss(fences: &Fences) {
    drop_matching(fences, Ending::Signaled, |_| true);
}

/// Signals and drops the waits whose value lost work was going to signal (see the module
/// doc), and updates the MonitoredValues of the fences concerned in one command.
pub(crate) fn end_lost(fences: &Fences) {
    let lost = LostSignals::read(fences);
    if lost.is_empty() {
        return;
    }
    drop_matching(fences, Ending::Signaled, |w| lost.reach(w.global, !w.native, w.value));
}

/// Signals every eventfd wait whose fence reached its value, then updates the MonitoredValues
/// of the fences concerned in one command, and repeats until a re-read completes nothing more.
pub(crate) fn complete(fences: &Fences, logs: &Logs) {
    loop {
        let mut fired = KVec::<EventFd>::new();
        let mut touched = KVec::<FenceHandle>::new();
        let mut noted = KVec::<(FenceHandle, u64)>::new();
        {
            let mut book = fences.book();
            let book = &mut *book;
            let n = book.event_waits.len();
            if fired.reserve(n, GFP_KERNEL).is_err()
                || touched.reserve(n, GFP_KERNEL).is_err()
                || noted.reserve(n, GFP_KERNEL).is_err()
            {
                return;
            }
            let mut i = 0;
            while i < book.event_waits.len() {
                let w = &book.event_waits[i];
                if !fence::is_signaled(w.current.read64(w.offset), w.value) {
                    i += 1;
                    continue;
                }
                let Ok(w) = book.event_waits.remove(i) else {
                    break;
                };
                if w.native && !touched.contains(&w.global) {
                    // Room reserved above.
                    let _ = touched.push_within_capacity(w.global);
                }
                let _ = noted.push_within_capacity((w.global, w.value));
                let _ = fired.push_within_capacity(w.event);
            }
            book.event_signals += fired.len() as u64;
        }
        if fired.is_empty() {
            return;
        }
        for event in fired.iter() {
            event.signal();
        }
        for &(global, value) in noted.iter() {
            logs.note_thread(uapi_debug::TIMELINE_EVENTFD_SIGNALED, irq::NONE, global.raw(), value, 0);
        }
        drop(fired);
        if touched.is_empty() || fences.update_monitored(&touched).is_err() {
            return;
        }
    }
}

/// How [`drop_waits`] ends the waits it drops.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Unsignaled: nobody polls them any more (the file is closed).
    Silently,
    /// Signaled: their fence is gone, so a poller must wake and find out.
    Signaled,
}

/// Drops the eventfd waits registered by file `owner` (every one, or those on its fence handle
/// `local`), signaling them or not as `how` says, and updates the MonitoredValues of the fences
/// concerned in one command.
pub(crate) fn drop_waits(fences: &Fences, owner: usize, local: Option<u32>, how: Ending) {
    drop_matching(fences, how, |w| {
        w.owner == owner && local.is_none_or(|l| l == w.local)
    });
}

/// `CANCEL_FENCE_EVENTFD`: withdraws, unsignaled, file `owner`'s pending waits on its fence
/// handle `local` for `value` with eventfd `fd` (the same eventfd object), and recomputes the
/// fence's MonitoredValue (MV-03).
///
/// # Errors
///
/// `EBADF`/`EINVAL` for an fd that is not an eventfd, `ENOENT` when no such wait is pending.
pub(crate) fn cancel(fences: &Fences, owner: usize, local: u32, value: u64, fd: i32) -> Result {
    let event = EventFd::get(fd)?;
    let dropped = drop_matching(fences, Ending::Silently, |w| {
        w.owner == owner && w.local == local && w.value == value && w.event.same(&event)
    });
    if dropped == 0 {
        return Err(ENOENT);
    }
    Ok(())
}

/// Drops the eventfd waits `pick` selects (signaled if `how` says so, outside the book's lock),
/// then updates the MonitoredValues of the native fences concerned in one command; how many.
fn drop_matching(fences: &Fences, how: Ending, pick: impl Fn(&EventWait) -> bool) -> usize {
    let mut touched = KVec::<FenceHandle>::new();
    let mut dropped = KVec::<EventWait>::new();
    let mut n = 0;
    {
        let mut book = fences.book();
        let waits = &mut book.event_waits;
        // Without room, the waits are put (and signaled) under the lock.
        let _ = dropped.reserve(waits.len(), GFP_KERNEL);
        let mut i = 0;
        while i < waits.len() {
            let w = &waits[i];
            if !pick(w) {
                i += 1;
                continue;
            }
            // Without room the MonitoredValue is left low: at worst spurious interrupts.
            if w.native && !touched.contains(&w.global) {
                let _ = touched.push(w.global, GFP_KERNEL);
            }
            let Ok(w) = waits.remove(i) else {
                break;
            };
            n += 1;
            // Signaled and put outside the lock; without room, here.
            if let Err(e) = dropped.push_within_capacity(w) {
                if how == Ending::Signaled {
                    e.0.event.signal();
                }
            }
        }
    }
    if how == Ending::Signaled {
        for w in dropped.iter() {
            w.event.signal();
        }
    }
    drop(dropped);
    if !touched.is_empty() {
        let _ = fences.update_monitored(&touched);
    }
    n
}
