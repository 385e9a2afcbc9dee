// SPDX-License-Identifier: GPL-2.0

//! The fence bookkeeping of one device, under one mutex of [`super::waits::Fences`]: the
//! pending CPU waits (blocking, [`PendingWait`], and pollable, [`EventWait`]), the
//! MonitoredValues the device last accepted for fences whose MonitoredValue is in VRAM
//! ([`VramMonitored`], NF-13), and the `FENCE_DEBUG` counters; and the pending `sync_file`
//! exports ([`SyncWait`]), which live under a mutex of their own (`Fences::exports`: the
//! dma-fence signalling paths take it, so nothing holding it may allocate memory that can
//! reclaim).

use kernel::{
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Relaxed, Release},
        Arc,
    },
};

use super::window;
use crate::{
    abi::{fence, ids::FenceHandle, uapi_debug},
    bindings::{dmafence::DmaFence, eventfd::EventFd},
    hw::{core::ShareCharge, dmamem::DmaBuf},
};

/// A pending blocking CPU wait: the interrupt paths (`irqpath`) read its fence's CurrentValue.
pub(crate) struct PendingWait {
    /// Global fence handle.
    pub(crate) handle: FenceHandle,
    /// Value waited for.
    pub(crate) value: u64,
    /// The page holding CurrentValue.
    pub(crate) current: Arc<DmaBuf>,
    /// CurrentValue's byte offset in `current`.
    pub(crate) offset: usize,
    /// A monitored (WDDM 2.0) fence: examined after monitored-fence records.
    pub(crate) monitored: bool,
    /// A monitored fence of a device without 64-bit atomics: low halves compared across
    /// wraparound ([`window::reached`]).
    pub(crate) wrap32: bool,
    /// Set (before the waiters are woken) once an interrupt path or a CPU signal found it
    /// satisfied; the waiter returns only then (or on its own re-sample, see
    /// [`super::waits::Fences::wait_fence`]).
    pub(crate) released: Arc<Atomic<bool>>,
}

impl PendingWait {
    /// Whether an interrupt path or a CPU signal already released it.
    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Relaxed)
    }

    /// Marks the wait released if `logged`, a value its fence's log says the fence was
    /// signaled to, reaches its value (the queue-array path, IRQ-13: the fence is not read);
    /// whether it did just now. A 32-bit-mode fence is never released this way.
    pub(crate) fn release_if_logged(&self, logged: u64) -> bool {
        if self.wrap32 || self.released.load(Relaxed) || !window::reached(false, logged, self.value) {
            return false;
        }
        self.released.store(true, Release);
        true
    }

    /// Marks the wait released if its fence reached its value; whether it did just now.
    pub(crate) fn release_if_signaled(&self) -> bool {
        if self.released.load(Relaxed)
            || !window::reached(self.wrap32, self.current.read64(self.offset), self.value)
        {
            return false;
        }
        self.released.store(true, Release);
        true
    }
}

/// A pending eventfd wait.
pub(crate) struct EventWait {
    /// The file that registered it (its address, for identity only).
    pub(crate) owner: usize,
    /// The fence's handle in that file.
    pub(crate) local: u32,
    /// Global handle.
    pub(crate) global: FenceHandle,
    /// A native fence (has a MonitoredValue to maintain).
    pub(crate) native: bool,
    /// The value waited for.
    pub(crate) value: u64,
    /// The CurrentValue page.
    pub(crate) current: Arc<DmaBuf>,
    /// CurrentValue's byte offset in it.
    pub(crate) offset: usize,
    /// The eventfd to signal.
    pub(crate) event: EventFd,
    /// Its count in the registering process's eventfd waits (given back when it goes).
    pub(crate) _share: ShareCharge,
}

/// A pending `sync_file` export (`EXPORT_SYNC_FILE`) of a monitored fence's value.
pub(crate) struct SyncWait {
    /// The file that exported it (its address, for identity only).
    pub(crate) owner: usize,
    /// The fence's handle in that file.
    pub(crate) local: u32,
    /// Global handle.
    pub(crate) global: FenceHandle,
    /// The value waited for.
    pub(crate) value: u64,
    /// The CurrentValue page.
    pub(crate) current: Arc<DmaBuf>,
    /// CurrentValue's byte offset in it.
    pub(crate) offset: usize,
    /// 32-bit-mode values ([`window::reached`]).
    pub(crate) wrap32: bool,
    /// The fence the `sync_file` holds.
    pub(crate) fence: DmaFence,
    /// When it was exported (`CLOCK_MONOTONIC`, ns).
    pub(crate) since_ns: i64,
    /// Its count in the exporting process's `sync_file` exports (given back when it goes).
    pub(crate) _share: ShareCharge,
}

impl SyncWait {
    /// Whether its fence reached its value.
    pub(crate) fn reached(&self) -> bool {
        window::reached(self.wrap32, self.current.read64(self.offset), self.value)
    }
}

/// MonitoredValues the device last accepted for the registered fences whose MonitoredValue is
/// in VRAM (the CPU cannot read VRAM), for `FENCE_INFO`.
pub(crate) struct VramMonitored(KVec<(FenceHandle, u64)>);

impl VramMonitored {
    /// None yet.
    pub(crate) const fn new() -> Self {
        Self(KVec::new())
    }

    /// Starts keeping fence `global`'s value (UINT64_MAX until an update is accepted).
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn track(&mut self, global: FenceHandle) -> Result {
        self.forget(global);
        self.0.push((global, fence::MONITORED_VALUE_NONE), GFP_KERNEL_ACCOUNT)?;
        Ok(())
    }

    /// The device accepted `value` as fence `global`'s MonitoredValue (kept if tracked).
    pub(crate) fn note(&mut self, global: FenceHandle, value: u64) {
        if let Some(e) = self.0.iter_mut().find(|e| e.0 == global) {
            e.1 = value;
        }
    }

    /// Fence `global` was unregistered.
    pub(crate) fn forget(&mut self, global: FenceHandle) {
        self.0.retain(|e| e.0 != global);
    }

    /// Fence `global`'s value as last set (UINT64_MAX if not tracked).
    pub(crate) fn get(&self, global: FenceHandle) -> u64 {
        self.0
            .iter()
            .find(|e| e.0 == global)
            .map_or(fence::MONITORED_VALUE_NONE, |e| e.1)
    }
}

/// Fence bookkeeping of one device.
pub(crate) struct FenceBook {
    /// Pending blocking CPU waits.
    pub(crate) cpu_waits: KVec<PendingWait>,
    /// Pending eventfd waits.
    pub(crate) event_waits: KVec<EventWait>,
    /// Live global objects of shared fences.
    pub(crate) global_fences: u32,
    /// Live local handles on shared fences.
    pub(crate) local_handles: u32,
    /// `CREATE_FENCE` fences registered with the device.
    pub(crate) registered: u32,
    /// Eventfds signaled.
    pub(crate) event_signals: u64,
    /// Batched `UPDATE_MONITORED_VALUES` commands sent.
    pub(crate) updates: u64,
    /// Of those, commands carrying more than one fence.
    pub(crate) batched: u64,
    /// Most entries one command carried.
    pub(crate) largest_batch: u32,
    /// MonitoredValues last set in VRAM (optimized DEFAULT fences).
    pub(crate) vram_monitored: VramMonitored,
    /// The context-fault count the blocking waiters were last woken for.
    pub(crate) faults_woken: u64,
    /// Cross-adapter fences registered natively here: MonitoredValue held at 0 (XAD-05).
    pub(crate) pinned: KVec<FenceHandle>,
    /// Native fences whose blocking waits a path released, their MonitoredValue still to move
    /// on by that path (MV-07, `Fences::rearm_released`).
    pub(crate) rearm: Rearm,
}

/// Native fences whose MonitoredValue the path that released their waits still has to move on.
pub(crate) struct Rearm(KVec<FenceHandle>);

impl Rearm {
    /// None yet.
    pub(crate) const fn new() -> Self {
        Self(KVec::new())
    }

    /// Notes the fence of wait `w`, just released, if it has a MonitoredValue. Without memory
    /// the value stays low: spurious interrupts, never a lost wake-up.
    pub(crate) fn note(&mut self, w: &PendingWait) {
        if !w.monitored && !self.0.contains(&w.handle) {
            let _ = self.0.push(w.handle, GFP_KERNEL);
        }
    }

    /// Whether no fence is noted.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Forgets fence `global` (being unregistered).
    pub(crate) fn forget(&mut self, global: FenceHandle) {
        self.0.retain(|h| *h != global);
    }

    /// Takes the fences noted.
    pub(crate) fn take(&mut self) -> KVec<FenceHandle> {
        core::mem::replace(&mut self.0, KVec::new())
    }
}

impl FenceBook {
    /// Nothing yet.
    pub(crate) const fn new() -> Self {
        Self {
            cpu_waits: KVec::new(),
            event_waits: KVec::new(),
            global_fences: 0,
            local_handles: 0,
            registered: 0,
            event_signals: 0,
            updates: 0,
            batched: 0,
            largest_batch: 0,
            vram_monitored: VramMonitored::new(),
            faults_woken: 0,
            pinned: KVec::new(),
            rearm: Rearm::new(),
        }
    }

    /// The MonitoredValue fence `handle` gets: its lowest pending wait − 1, or 0 for a
    /// cross-adapter fence, whose every signal must interrupt (XAD-05).
    pub(crate) fn monitored_for(&self, handle: FenceHandle) -> u64 {
        if self.pinned.contains(&handle) {
            return 0;
        }
        fence::monitored_value_for(self.lowest_wait(handle))
    }

    /// The values the eventfd waits on fence `global` wait for.
    fn event_waits_on(&self, global: FenceHandle) -> impl Iterator<Item = u64> + '_ {
        self.event_waits
            .iter()
            .filter(move |w| w.global == global)
            .map(|w| w.value)
    }

    /// The lowest pending wait value (blocking and eventfd) of fence `handle`; a released
    /// blocking wait (its waiter not back yet) is no longer pending.
    pub(crate) fn lowest_wait(&self, handle: FenceHandle) -> Option<u64> {
        let blocking = self
            .cpu_waits
            .iter()
            .filter(|w| w.handle == handle && !w.released.load(Acquire))
            .map(|w| w.value);
        Iterator::chain(blocking, self.event_waits_on(handle)).min()
    }

    /// CPU waits (blocking and eventfd) pending on fence `handle`.
    pub(crate) fn pending_waits(&self, handle: FenceHandle) -> u32 {
        let n = self.cpu_waits.iter().filter(|w| w.handle == handle).count()
            + self.event_waits_on(handle).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The `FENCE_DEBUG` counters kept here.
    pub(crate) fn debug(&self, out: &mut uapi_debug::FenceDebug) {
        out.global_fences = self.global_fences;
        out.local_handles = self.local_handles;
        out.registered_fences = self.registered;
        out.event_waits = u32::try_from(self.event_waits.len()).unwrap_or(u32::MAX);
        out.largest_batch = self.largest_batch;
        out.event_signals = self.event_signals;
        out.monitored_updates = self.updates;
        out.batched_updates = self.batched;
        out.cpu_waits = u32::try_from(self.cpu_waits.len()).unwrap_or(u32::MAX);
    }
}
