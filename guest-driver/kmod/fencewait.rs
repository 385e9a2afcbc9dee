// SPDX-License-Identifier: GPL-2.0

//! Pollable CPU waits on fences (FEN-18), batched MonitoredValue updates, fence registration
//! and the `FENCE_DEBUG` counters.
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
//! registration. Waits are dropped unsignaled (one batched update again) when their fence
//! handle is destroyed or their file closed.

use kernel::{prelude::*, sync::Arc, transmute::AsBytes};

use crate::{
    abi::{
        fence,
        mailbox::{self, Opcode},
        uapi,
    },
    dmamem::DmaBuf,
    ffi::EventFd,
    gpucore::{Core, HwGuard},
};

/// Most eventfd waits one open file may have pending.
const MAX_EVENT_WAITS_PER_FILE: usize = 256;

/// A pending eventfd wait.
pub(crate) struct EventWait {
    /// The file that registered it (its address, for identity only).
    owner: usize,
    /// The fence's handle in that file.
    local: u32,
    /// Global handle.
    global: u64,
    /// A native fence (has a MonitoredValue to maintain).
    native: bool,
    /// The value waited for.
    value: u64,
    /// The CurrentValue page.
    current: Arc<DmaBuf>,
    /// CurrentValue's byte offset in it.
    offset: usize,
    /// The eventfd to signal.
    event: EventFd,
}

/// Fence bookkeeping of one device, kept in [`crate::gpucore::Objects`].
pub(crate) struct FenceBook {
    /// Pending eventfd waits.
    waits: KVec<EventWait>,
    /// Live global objects of shared fences.
    pub(crate) global_fences: u32,
    /// Live local handles on shared fences.
    pub(crate) local_handles: u32,
    /// `CREATE_FENCE` fences registered with the device.
    registered: u32,
    /// Eventfds signaled.
    event_signals: u64,
    /// `UPDATE_MONITORED_VALUES` commands sent by [`update_monitored`].
    updates: u64,
    /// Of those, commands carrying more than one fence.
    batched: u64,
    /// Most entries one command carried.
    largest_batch: u32,
    /// MonitoredValues last set in VRAM (optimized DEFAULT fences).
    pub(crate) vram_monitored: crate::optfence::VramMonitored,
}

impl FenceBook {
    /// Nothing yet.
    pub(crate) const fn new() -> Self {
        Self {
            waits: KVec::new(),
            global_fences: 0,
            local_handles: 0,
            registered: 0,
            event_signals: 0,
            updates: 0,
            batched: 0,
            largest_batch: 0,
            vram_monitored: crate::optfence::VramMonitored::new(),
        }
    }

    /// The values the eventfd waits on fence `global` wait for.
    pub(crate) fn waits_on(&self, global: u64) -> impl Iterator<Item = u64> + '_ {
        self.waits
            .iter()
            .filter(move |w| w.global == global)
            .map(|w| w.value)
    }

    /// The `FENCE_DEBUG` counters kept here.
    pub(crate) fn debug(&self, out: &mut uapi::FenceDebug) {
        out.global_fences = self.global_fences;
        out.local_handles = self.local_handles;
        out.registered_fences = self.registered;
        out.event_waits = u32::try_from(self.waits.len()).unwrap_or(u32::MAX);
        out.largest_batch = self.largest_batch;
        out.event_signals = self.event_signals;
        out.monitored_updates = self.updates;
        out.batched_updates = self.batched;
    }
}

/// `REGISTER_FENCE` of fence `global` (counted in `FENCE_DEBUG.registered_fences`).
///
/// # Errors
///
/// `EIO` if the device refuses, `ENODEV`, `ETIMEDOUT`.
pub(crate) fn register(
    core: &Core,
    hw: &mut HwGuard<'_>,
    global: u64,
    kind: fence::FenceKind,
    current_value: mailbox::FenceLocation,
    monitored_value: mailbox::FenceLocation,
) -> Result {
    let mut reg = mailbox::RegisterFenceArgs {
        handle: global,
        kind: kind as u32,
        current_value,
        monitored_value,
        ..Default::default()
    };
    hw.command(Opcode::RegisterFence, &mut reg, &[])?;
    core.objects().fences.registered += 1;
    Ok(())
}

/// `UNREGISTER_FENCE` of fence `global` (best effort: the device may be gone).
pub(crate) fn unregister(core: &Core, global: u64) {
    if let Ok(mut hw) = core.hw() {
        let mut args = mailbox::FenceHandleArgs {
            handle: global,
            ..Default::default()
        };
        let _ = hw.command(Opcode::UnregisterFence, &mut args, &[]);
    }
    let mut objects = core.objects();
    objects.fences.registered = objects.fences.registered.saturating_sub(1);
    objects.fences.vram_monitored.forget(global);
}

/// `WAIT_FENCE_EVENTFD`: signals eventfd `fd` once fence `global` (CurrentValue at `offset` of
/// `current`; `native`: it has a MonitoredValue) reaches `value`. Returns at once.
///
/// # Errors
///
/// `EBADF`/`EINVAL` for an fd that is not an eventfd, `ENOSPC` past the per-file limit,
/// `ENOMEM`, and the MonitoredValue update's errors (`ENODEV`, `EIO`, `ETIMEDOUT`; the wait is
/// then withdrawn).
#[allow(clippy::too_many_arguments)]
pub(crate) fn wait_eventfd(
    core: &Core,
    owner: usize,
    local: u32,
    global: u64,
    native: bool,
    current: Arc<DmaBuf>,
    offset: usize,
    value: u64,
    fd: i32,
) -> Result {
    let event = EventFd::get(fd)?;
    if fence::is_signaled(current.read64(offset), value) {
        event.signal();
        core.objects().fences.event_signals += 1;
        return Ok(());
    }
    {
        let mut objects = core.objects();
        let waits = &mut objects.fences.waits;
        if waits.iter().filter(|w| w.owner == owner).count() >= MAX_EVENT_WAITS_PER_FILE {
            return Err(ENOSPC);
        }
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
            },
            GFP_KERNEL,
        )?;
    }
    if native {
        if let Err(e) = update_monitored(core, &[global]) {
            let withdrawn = {
                let mut objects = core.objects();
                let waits = &mut objects.fences.waits;
                let mine = waits
                    .iter()
                    .rposition(|w| w.owner == owner && w.local == local && w.value == value);
                mine.and_then(|i| waits.remove(i).ok())
            };
            drop(withdrawn);
            return Err(e);
        }
    }
    // The signal may have come before the MonitoredValue update: read again (RACE-06).
    complete(core);
    Ok(())
}

/// Signals every eventfd wait whose fence reached its value, then updates the MonitoredValues
/// of the fences concerned in one command, and repeats until a re-read completes nothing more.
pub(crate) fn complete(core: &Core) {
    loop {
        let mut fired = KVec::<EventFd>::new();
        let mut touched = KVec::<u64>::new();
        {
            let mut objects = core.objects();
            let book = &mut objects.fences;
            let n = book.waits.len();
            if fired.reserve(n, GFP_KERNEL).is_err() || touched.reserve(n, GFP_KERNEL).is_err() {
                return;
            }
            let mut i = 0;
            while i < book.waits.len() {
                let w = &book.waits[i];
                if !fence::is_signaled(w.current.read64(w.offset), w.value) {
                    i += 1;
                    continue;
                }
                let Ok(w) = book.waits.remove(i) else {
                    break;
                };
                if w.native && !touched.contains(&w.global) {
                    // Room reserved above.
                    let _ = touched.push_within_capacity(w.global);
                }
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
        drop(fired);
        if touched.is_empty() || update_monitored(core, &touched).is_err() {
            return;
        }
    }
}

/// Drops, unsignaled, the eventfd waits registered by file `owner` (every one, or those on its
/// fence handle `local`), and updates the MonitoredValues of the fences concerned in one
/// command.
pub(crate) fn drop_waits(core: &Core, owner: usize, local: Option<u32>) {
    let mut touched = KVec::<u64>::new();
    let mut dropped = KVec::<EventWait>::new();
    {
        let mut objects = core.objects();
        let waits = &mut objects.fences.waits;
        let mut i = 0;
        while i < waits.len() {
            let w = &waits[i];
            if w.owner != owner || local.is_some_and(|l| l != w.local) {
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
            // Put outside the lock; on failure it is put here.
            let _ = dropped.push(w, GFP_KERNEL);
        }
    }
    drop(dropped);
    if !touched.is_empty() {
        let _ = update_monitored(core, &touched);
    }
}

/// Sets the MonitoredValue of each fence of `globals` from its lowest pending wait (blocking
/// and eventfd), all in one `UPDATE_MONITORED_VALUES` (more only past
/// [`mailbox::FENCE_BATCH_MAX`] fences). The values are chosen under the hardware mutex, so the
/// last update the device sees reflects the latest waits.
///
/// # Errors
///
/// `EIO`, `ENODEV`, `ETIMEDOUT`, `ENOMEM`.
pub(crate) fn update_monitored(core: &Core, globals: &[u64]) -> Result {
    let mut hw = core.hw()?;
    let mut entries = KVec::with_capacity(globals.len(), GFP_KERNEL)?;
    {
        let objects = core.objects();
        for &handle in globals {
            let value = fence::monitored_value_for(objects.lowest_wait(handle));
            entries.push(mailbox::FenceValue { handle, value }, GFP_KERNEL)?;
        }
    }
    // CAST: the batch limit is about 250.
    for chunk in entries.chunks(mailbox::FENCE_BATCH_MAX as usize) {
        let count = u32::try_from(chunk.len())?;
        let mut args = mailbox::FenceValuesArgs {
            count,
            ..Default::default()
        };
        hw.command(Opcode::UpdateMonitoredValues, &mut args, chunk.as_bytes())?;
        let mut objects = core.objects();
        let book = &mut objects.fences;
        for e in chunk {
            book.vram_monitored.note(e.handle, e.value);
        }
        book.updates += 1;
        if count > 1 {
            book.batched += 1;
        }
        book.largest_batch = book.largest_batch.max(count);
    }
    Ok(())
}
