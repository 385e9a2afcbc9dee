// SPDX-License-Identifier: GPL-2.0

//! The fence object of a device, [`Fences`]: fence registration with the device, blocking CPU
//! waits and CPU signals, and the MonitoredValue updates (one fence, or many in one command).
//!
//! A blocking wait (`WAIT_PROGRESS`, `WAIT_FENCE`, the drain of process termination) first
//! spins on CurrentValue for at most `wait_spin_us` (as i915 busy-waits before it arms an
//! interrupt), then registers a [`PendingWait`], sets a native fence's MonitoredValue to its
//! lowest wait − 1, re-reads CurrentValue once and sleeps until an interrupt path (`irqpath`)
//! or a CPU signal marks it released. The path that released it moves MonitoredValue on
//! (MV-07, [`Fences::rearm_released`]), so the released waiter returns without a mailbox
//! command. A monitored (WDDM 2.0) fence has no MonitoredValue: every engine write of it posts
//! a record anyway, after which the interrupt thread re-reads every monitored-fence wait
//! (FEN-12).
//!
//! Lock order: the hardware mutex, then the book ([`FenceBook`]), then the core's objects; the
//! sleep lock is taken alone.

use kernel::{
    new_condvar, new_mutex,
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Relaxed, Release},
        lock::{mutex::MutexBackend, Guard},
        Arc, CondVar, CondVarTimeoutResult, Mutex,
    },
    time::{msecs_to_jiffies, Jiffies},
    transmute::{AsBytes, FromBytes},
};

use core::mem::size_of;

use super::{
    book::{FenceBook, PendingWait, SyncWait},
    window,
};
use crate::{
    abi::{
        fence,
        ids::{ContextId, FenceHandle},
        mailbox::{self, Opcode},
    },
    bindings::param,
    hw::{
        ids::IdBitmap,
        command::HwGuard,
        core::{monotonic_ns, Core},
        dmamem::DmaBuf,
    },
};

/// One value a blocking CPU wait waits for ([`Fences::wait_fences`]).
pub(crate) struct WaitTarget {
    /// Global fence handle.
    pub(crate) handle: FenceHandle,
    /// A monitored (WDDM 2.0) fence: no MonitoredValue to update.
    pub(crate) monitored: bool,
    /// The CurrentValue page.
    pub(crate) current: Arc<DmaBuf>,
    /// CurrentValue's byte offset in it.
    pub(crate) offset: usize,
    /// The value waited for.
    pub(crate) value: u64,
    /// The context whose loss ends the wait (a queue's progress).
    pub(crate) lost: Option<ContextId>,
}

/// A timeout of [`Fences::wait_fences`] in milliseconds that never ends.
pub(crate) const FOREVER_MS: u32 = u32::MAX;

/// The most a CPU wait spins before it sleeps, whatever `wait_spin_us` says.
const WAIT_SPIN_MAX_US: u32 = 1000;

/// The fences of one device.
#[pin_data]
pub(crate) struct Fences {
    /// The core.
    core: Arc<Core>,
    /// Pending waits and counters.
    #[pin]
    book: Mutex<FenceBook>,
    /// Pending `sync_file` exports: taken inside dma-fence signalling critical sections, so
    /// never held across an allocation that may reclaim (`syncfile`).
    #[pin]
    exports: Mutex<KVec<SyncWait>>,
    /// Taken by a blocking waiter around its sleep and by a waker before it wakes.
    #[pin]
    sleep: Mutex<()>,
    /// Signalled (with `sleep` taken first) when an interrupt path or a CPU signal may have
    /// satisfied a blocking wait.
    #[pin]
    wake: CondVar,
}

impl Fences {
    /// The fences of the device of `core`: none yet.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(core: Arc<Core>) -> Result<Arc<Self>> {
        Arc::pin_init(
            try_pin_init!(Self {
                core,
                book <- new_mutex!(FenceBook::new()),
                exports <- new_mutex!(KVec::new()),
                sleep <- new_mutex!(()),
                wake <- new_condvar!(),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// The core.
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// Locks the book.
    pub(crate) fn book(&self) -> Guard<'_, FenceBook, MutexBackend> {
        self.book.lock()
    }

    /// Locks the pending `sync_file` exports.
    pub(crate) fn exports(&self) -> Guard<'_, KVec<SyncWait>, MutexBackend> {
        self.exports.lock()
    }

    /// `REGISTER_FENCE` of fence `global`, counted in `FENCE_DEBUG.registered_fences` when
    /// `counted` (the fences of `CREATE_FENCE`; a queue's progress fence is not).
    ///
    /// # Errors
    ///
    /// `EIO` if the device refuses, `ENODEV`, `ETIMEDOUT`.
    pub(crate) fn register(
        &self,
        hw: &mut HwGuard<'_>,
        global: FenceHandle,
        kind: fence::FenceKind,
        current_value: mailbox::FenceLocation,
        monitored_value: mailbox::FenceLocation,
        counted: bool,
    ) -> Result {
        self.register_with(hw, global, kind, current_value, monitored_value, counted, 0)
    }

    /// [`Self::register`] with `REGISTER_*` `flags` (a cross-adapter fence's side).
    ///
    /// # Errors
    ///
    /// `EIO` if the device refuses, `ENODEV`, `ETIMEDOUT`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn register_with(
        &self,
        hw: &mut HwGuard<'_>,
        global: FenceHandle,
        kind: fence::FenceKind,
        current_value: mailbox::FenceLocation,
        monitored_value: mailbox::FenceLocation,
        counted: bool,
        flags: u32,
    ) -> Result {
        let mut reg = mailbox::RegisterFenceArgs {
            handle: global.raw(),
            kind: kind as u32,
            flags,
            current_value,
            monitored_value,
            ..Default::default()
        };
        hw.command(Opcode::RegisterFence, &mut reg, &[])?;
        if counted {
            self.book().registered += 1;
        }
        Ok(())
    }

    /// `UNREGISTER_FENCE` of a fence [`Self::register`]ed with `counted` (best effort: the
    /// device may be gone).
    pub(crate) fn unregister(&self, global: FenceHandle) {
        let _ = self.unregister_confirmed(global);
    }

    /// [`Self::unregister`]; whether the device confirmed it. An unconfirmed fence may still be
    /// written by the device: its pages must not be freed before the device is reset
    /// (`hw::quarantine`). Without the device (unbound) nothing is confirmed: the unbind revokes
    /// the core before it resets the device.
    pub(crate) fn unregister_confirmed(&self, global: FenceHandle) -> bool {
        let confirmed = match self.core.hw() {
            Ok(mut hw) => {
                // Under the hardware mutex: a re-arm after this never names the fence.
                self.book().rearm.forget(global);
                Self::unregister_uncounted(&mut hw, global)
            }
            Err(_) => false,
        };
        self.core.objects().forget_abandoned(global);
        let mut book = self.book();
        book.registered = book.registered.saturating_sub(1);
        book.vram_monitored.forget(global);
        confirmed
    }

    /// `UNREGISTER_FENCE` of fence `global` with the hardware locked, counting nothing (a
    /// queue's progress fence); whether the device confirmed it. Failures are logged by
    /// [`HwGuard::command`].
    pub(crate) fn unregister_uncounted(hw: &mut HwGuard<'_>, global: FenceHandle) -> bool {
        let mut args = mailbox::FenceHandleArgs {
            handle: global.raw(),
            ..Default::default()
        };
        let confirmed = hw.command(Opcode::UnregisterFence, &mut args, &[]).is_ok();
        hw.objects().forget_abandoned(global);
        confirmed
    }

    /// Sleeps (interruptibly) until fence `handle`'s CurrentValue in `current` (at byte
    /// `offset`) reaches `value`: [`Self::wait_fences`] of one target.
    ///
    /// # Errors
    ///
    /// Those of [`Self::wait_fences`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn wait_fence(
        &self,
        handle: FenceHandle,
        monitored: bool,
        current: &Arc<DmaBuf>,
        offset: usize,
        value: u64,
        timeout_ms: u32,
        lost: Option<ContextId>,
    ) -> Result {
        let target = WaitTarget {
            handle,
            monitored,
            current: current.clone(),
            offset,
            value,
            lost,
        };
        self.wait_fences(core::slice::from_ref(&target), true, timeout_ms)
            .map(|_| ())
    }

    /// Sleeps (interruptibly) until the values of `targets` are reached — all of them, or
    /// with `all` false any one — registering a wait for each so the device interrupts for
    /// it. The native fences get their MonitoredValues updated (one command for them all); a
    /// monitored (WDDM 2.0) fence has none. CurrentValues are re-sampled once after the
    /// update; then a target counts as reached only when an interrupt path (`irqpath`) or a
    /// CPU signal released its wait. Returns the lowest index of a target found reached (0
    /// when `all`).
    ///
    /// A target with `lost` (the context whose work signals it: a queue's progress) ends the
    /// wait with `ECANCELED` as soon as that context is faulted while the target is not
    /// reached, at once if it already is ([`Self::wake_after_faults`] wakes the sleepers):
    /// its work will never complete. So does a target whose value a lost context's dropped
    /// work was going to signal ([`Self::abandon_lost_signals`]).
    ///
    /// # Errors
    ///
    /// `ETIMEDOUT` after `timeout_ms` (at once when 0; [`FOREVER_MS`] never), `EINTR` on a
    /// signal, `ECANCELED` for a lost context, `ENODEV` once the device is gone (at once, with
    /// any timeout, for a target not reached), `ENOMEM`.
    pub(crate) fn wait_fences(
        &self,
        targets: &[WaitTarget],
        all: bool,
        timeout_ms: u32,
    ) -> Result<usize> {
        let mut released = KVec::with_capacity(targets.len(), GFP_KERNEL)?;
        for t in targets {
            let reached = window::reached(self.wrap32(t), t.current.read64(t.offset), t.value);
            released.push(Arc::new(Atomic::new(reached), GFP_KERNEL_ACCOUNT)?, GFP_KERNEL_ACCOUNT)?;
        }
        if let Some(first) = finished(&released, all) {
            return Ok(first);
        }
        if self.any_lost(targets, &released) {
            return Err(ECANCELED);
        }
        // The device is gone (unbind, a function reset): nothing will signal.
        if self.core.is_revoked() {
            return Err(ENODEV);
        }
        if timeout_ms == 0 {
            return Err(ETIMEDOUT);
        }
        if let Some(first) = self.spin(targets, &released, all) {
            return Ok(first);
        }
        // Targets this waiter itself finds reached (not an interrupt path or a CPU signal):
        // their MonitoredValue is this waiter's to move on.
        let mut own = KVec::from_elem(false, targets.len(), GFP_KERNEL)?;
        let mut natives: KVec<FenceHandle> = KVec::new();
        let mut waits = KVec::with_capacity(targets.len(), GFP_KERNEL_ACCOUNT)?;
        for (t, r) in targets.iter().zip(released.iter()) {
            if r.load(Relaxed) {
                continue;
            }
            if !t.monitored && !natives.contains(&t.handle) {
                natives.push(t.handle, GFP_KERNEL)?;
            }
            waits.push(
                PendingWait {
                    handle: t.handle,
                    value: t.value,
                    current: t.current.clone(),
                    offset: t.offset,
                    monitored: t.monitored,
                    wrap32: self.wrap32(t),
                    released: r.clone(),
                },
                GFP_KERNEL_ACCOUNT,
            )?;
        }
        {
            let mut book = self.book();
            book.cpu_waits.reserve(waits.len(), GFP_KERNEL_ACCOUNT)?;
            for w in waits {
                // Room reserved above.
                let _ = book.cpu_waits.push(w, GFP_KERNEL_ACCOUNT);
            }
        }
        let result = self
            .update_monitored_uncounted(&natives)
            .and_then(|()| self.sleep_on_fences(targets, &released, &mut own, all, timeout_ms));
        if result.is_ok() {
            self.core.note_woken();
        }
        self.book()
            .cpu_waits
            .retain(|w| !released.iter().any(|r| Arc::ptr_eq(&w.released, r)));
        // MV-03 on the way out, only where no other path does it: a wait an interrupt path or
        // a CPU signal released had its MonitoredValue moved on by that path (MV-07,
        // `rearm_released`); the fences of withdrawn targets (timeout, signal, lost context,
        // the rest of an "any" wait) and of targets this waiter found reached itself are
        // updated here. Best effort: the fences may be gone already.
        let mut stale: KVec<FenceHandle> = KVec::new();
        for &h in natives.iter() {
            let mine = targets
                .iter()
                .zip(released.iter().zip(own.iter()))
                .any(|(t, (r, &o))| t.handle == h && (o || !r.load(Acquire)));
            if mine {
                stale.push(h, GFP_KERNEL)?;
            }
        }
        let _ = self.update_monitored_uncounted(&stale);
        result.map(|()| finished(&released, all).unwrap_or(0))
    }

    /// The bounded spin before a CPU wait arms its interrupt and sleeps (`wait_spin_us`, at
    /// most [`WAIT_SPIN_MAX_US`]; i915 busy-waits the same way before it arms one): re-reads
    /// the targets' CurrentValues until the wait is over or the budget is spent. A value that
    /// arrives meanwhile costs no MonitoredValue update, no interrupt and no sleep. The index
    /// [`finished`] gives if the wait ended; counted in `WAKE_PATH`.
    fn spin(
        &self,
        targets: &[WaitTarget],
        released: &[Arc<Atomic<bool>>],
        all: bool,
    ) -> Option<usize> {
        let budget_us = param::wait_spin_us_param().min(WAIT_SPIN_MAX_US);
        if budget_us == 0 {
            return None;
        }
        let budget = u64::from(budget_us) * 1000;
        let start = monotonic_ns();
        loop {
            for (t, r) in targets.iter().zip(released) {
                if !r.load(Relaxed)
                    && window::reached(self.wrap32(t), t.current.read64(t.offset), t.value)
                {
                    r.store(true, Release);
                }
            }
            if let Some(first) = finished(released, all) {
                self.core.note_spin(true);
                return Some(first);
            }
            if monotonic_ns().saturating_sub(start) >= budget {
                self.core.note_spin(false);
                return None;
            }
            core::hint::spin_loop();
        }
    }

    /// MV-07 (2) after an interrupt path or a CPU signal released blocking waits: moves the
    /// MonitoredValue of their native fences to the lowest wait still pending − 1 (UINT64_MAX
    /// for none; released waits no longer count), in one command, so the released waiters
    /// return without one. Call without the hardware mutex. The fences are taken under it, so
    /// one unregistered meanwhile ([`Self::unregister_confirmed`] forgets it there) is not
    /// named; a queue's progress fence destroyed right after its wait can still be, and the
    /// device then refuses the command (`BAD_OBJECT`, not logged): a MonitoredValue left low
    /// costs only spurious interrupts until the fence's next wait, never a lost wake-up.
    pub(crate) fn rearm_released(&self) {
        if self.book().rearm.is_empty() {
            return;
        }
        let Ok(mut hw) = self.core.hw() else {
            return;
        };
        let mut entries = KVec::new();
        {
            let mut book = self.book();
            for handle in book.rearm.take() {
                let value = book.monitored_for(handle);
                let handle = handle.raw();
                if entries
                    .push(mailbox::FenceValue { handle, value }, GFP_KERNEL)
                    .is_err()
                {
                    return;
                }
            }
        }
        // CAST: the batch limit is about 250.
        for chunk in entries.chunks(mailbox::FENCE_BATCH_MAX as usize) {
            let Ok(count) = u32::try_from(chunk.len()) else {
                return;
            };
            let mut args = mailbox::FenceValuesArgs {
                count,
                ..Default::default()
            };
            let status = hw.mailbox(Opcode::UpdateMonitoredValues, &mut args, chunk.as_bytes(), None);
            if matches!(status, Ok(mailbox::Status::Ok)) {
                let mut book = self.book();
                for e in chunk {
                    book.vram_monitored.note(FenceHandle::new(e.handle), e.value);
                }
            }
        }
    }

    /// Whether `t` compares 32-bit values across wraparound.
    fn wrap32(&self, t: &WaitTarget) -> bool {
        t.monitored && self.core.wrap32()
    }

    /// Whether a target not yet `released` has its context lost, or its value was to come
    /// from lost work.
    fn any_lost(&self, targets: &[WaitTarget], released: &[Arc<Atomic<bool>>]) -> bool {
        targets
            .iter()
            .zip(released)
            .any(|(t, r)| !r.load(Acquire) && (self.is_lost(t.lost) || self.is_abandoned(t)))
    }

    /// Sets the MonitoredValue of each fence of `globals` from its lowest pending wait, not
    /// counted in `FENCE_DEBUG` (a blocking wait's update): nothing for none, one entry for one.
    fn update_monitored_uncounted(&self, globals: &[FenceHandle]) -> Result {
        match globals {
            [] => Ok(()),
            [one] => self.update_monitored_one(*one),
            _ => self.update_monitored_batch(globals, false),
        }
    }

    /// The store of a CPU signal of a monitored fence (FEN-16): `value` into its value page
    /// (visible at once to every mapping; in the 32-bit mode the low half only, as the GPU
    /// does), then the release of the CPU waits it satisfies. The GPU work held behind it is
    /// the caller's to release (FEN-15).
    pub(crate) fn store_monitored(&self, current: &DmaBuf, offset: usize, value: u64) {
        if self.core.wrap32() {
            // CAST: the 32-bit mode stores the low half, truncation intended.
            current.write32(offset, value as u32);
        } else {
            current.write64(offset, value);
        }
        self.release_signaled(|w| core::ptr::eq(&*w.current, current) && w.offset == offset);
    }

    /// CPU signal: stores fence `handle`'s CurrentValue through the device (which releases GPU
    /// waiters), then wakes the CPU waiters to re-read it (the device posts no record for it).
    ///
    /// # Errors
    ///
    /// `EIO` if the device refuses, `ENODEV`, `ETIMEDOUT`.
    pub(crate) fn signal_fence(&self, handle: FenceHandle, value: u64) -> Result {
        self.set_fence_values(Opcode::UpdateCurrentValues, handle, value)?;
        self.release_signaled(|w| w.handle == handle);
        self.rearm_released();
        Ok(())
    }

    /// One-entry `UPDATE_CURRENT_VALUES` or `UPDATE_MONITORED_VALUES`.
    ///
    /// # Errors
    ///
    /// `EIO` if the device refuses, `ENODEV`, `ETIMEDOUT`.
    pub(crate) fn set_fence_values(
        &self,
        opcode: Opcode,
        handle: FenceHandle,
        value: u64,
    ) -> Result {
        let mut hw = self.core.hw()?;
        let entry = mailbox::FenceValue {
            handle: handle.raw(),
            value,
        };
        let mut args = mailbox::FenceValuesArgs {
            count: 1,
            ..Default::default()
        };
        hw.command(opcode, &mut args, entry.as_bytes())
    }

    /// Sets fence `handle`'s MonitoredValue from its lowest pending wait. The value is chosen
    /// under the hardware mutex, so the last update the device sees reflects the latest waits.
    fn update_monitored_one(&self, handle: FenceHandle) -> Result {
        let mut hw = self.core.hw()?;
        let value = self.book().monitored_for(handle);
        let entry = mailbox::FenceValue {
            handle: handle.raw(),
            value,
        };
        let mut args = mailbox::FenceValuesArgs {
            count: 1,
            ..Default::default()
        };
        hw.command(Opcode::UpdateMonitoredValues, &mut args, entry.as_bytes())?;
        self.book().vram_monitored.note(handle, entry.value);
        Ok(())
    }

    /// Sets the MonitoredValue of each fence of `globals` from its lowest pending wait
    /// (blocking and eventfd), all in one `UPDATE_MONITORED_VALUES` (more only past
    /// [`mailbox::FENCE_BATCH_MAX`] fences), counted in `FENCE_DEBUG`. The values are chosen
    /// under the hardware mutex, so the last update the device sees reflects the latest waits.
    ///
    /// # Errors
    ///
    /// `EIO`, `ENODEV`, `ETIMEDOUT`, `ENOMEM`.
    pub(crate) fn update_monitored(&self, globals: &[FenceHandle]) -> Result {
        self.update_monitored_batch(globals, true)
    }

    /// [`Self::update_monitored`], counted in `FENCE_DEBUG` when `counted`.
    fn update_monitored_batch(&self, globals: &[FenceHandle], counted: bool) -> Result {
        let mut hw = self.core.hw()?;
        let mut entries = KVec::with_capacity(globals.len(), GFP_KERNEL)?;
        {
            let book = self.book();
            for &handle in globals {
                let value = book.monitored_for(handle);
                let handle = handle.raw();
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
            let mut book = self.book();
            for e in chunk {
                book.vram_monitored.note(FenceHandle::new(e.handle), e.value);
            }
            if !counted {
                continue;
            }
            book.updates += 1;
            if count > 1 {
                book.batched += 1;
            }
            book.largest_batch = book.largest_batch.max(count);
        }
        Ok(())
    }

    /// After contexts were lost (`lost`: device context ids): asks the device which fences
    /// their unexecuted work was going to signal (`QUERY_LOST_SIGNALS`) and records each with
    /// the highest value that work named, so every CPU wait those signals would have satisfied
    /// — pending now or started later — ends with `ECANCELED`; then wakes the sleepers. A
    /// fence no lost work names is left alone: its waits go on. Failures are logged.
    pub(crate) fn abandon_lost_signals(&self, lost: &IdBitmap<4>) {
        let mut any = false;
        for context in (0..mailbox::MAX_CONTEXTS).filter(|&c| lost.contains(c)) {
            match self.query_lost_signals(context) {
                Ok(found) => any |= found > 0,
                Err(e) => pr_warn!(
                    "context {} lost: the fences its work was going to signal are unknown ({:?}); their waits run to their deadline\n",
                    context,
                    e
                ),
            }
        }
        if any {
            self.wake_waiters();
        }
    }

    /// One context's `QUERY_LOST_SIGNALS`, recorded in the objects; how many fences it named.
    fn query_lost_signals(&self, context: u32) -> Result<usize> {
        const ENTRY: usize = size_of::<mailbox::FenceValue>();
        let capacity = mailbox::LOST_SIGNALS_MAX;
        // CAST: at most 254 entries.
        let room = KVec::from_elem(0u8, capacity as usize * ENTRY, GFP_KERNEL)?;
        let mut hw = self.core.hw()?;
        let mut args = mailbox::LostSignalsArgs {
            context,
            capacity,
            ..Default::default()
        };
        hw.command(Opcode::QueryLostSignals, &mut args, &room)?;
        // CAST: at most `capacity`.
        let count = args.count.min(capacity) as usize;
        if args.total > args.count {
            pr_warn!(
                "context {} lost: its work named {} fences, {} recorded; waits on the others run to their deadline\n",
                context,
                args.total,
                count
            );
        }
        let mut bytes = KVec::from_elem(0u8, count * ENTRY, GFP_KERNEL)?;
        hw.read_tail(size_of::<mailbox::LostSignalsArgs>(), &mut bytes);
        let mut objects = hw.objects();
        for chunk in bytes.chunks_exact(ENTRY) {
            if let Some(e) = mailbox::FenceValue::from_bytes_copy(chunk) {
                objects.add_abandoned(FenceHandle::new(e.handle), e.value)?;
            }
        }
        Ok(count)
    }

    /// Whether lost work was going to signal `t`'s fence to its value ([`Self::abandon_lost_signals`]).
    fn is_abandoned(&self, t: &WaitTarget) -> bool {
        let wrap32 = self.wrap32(t);
        self.core
            .objects()
            .abandoned(t.handle)
            .is_some_and(|v| window::reached(wrap32, v, t.value))
    }

    /// Whether context `lost` (if any) is faulted.
    fn is_lost(&self, lost: Option<ContextId>) -> bool {
        lost.is_some_and(|id| self.core.objects().is_faulted(id))
    }

    /// The device's count of context-fault records, to pass to [`Self::wake_after_faults`]
    /// once the faults it counts are recorded as faulted contexts.
    pub(crate) fn fault_count(&self) -> u64 {
        let mut n = 0;
        self.core.stats(|e| n = e.faults);
        n
    }

    /// Wakes the blocking waiters when faults were recorded since the last call (`count` from
    /// [`Self::fault_count`], taken before those contexts were marked faulted), so the waits
    /// on a faulted context's work end with `ECANCELED`.
    pub(crate) fn wake_after_faults(&self, count: u64) {
        let new = {
            let mut book = self.book();
            let new = book.faults_woken != count;
            book.faults_woken = count;
            new
        };
        if new {
            self.wake_waiters();
        }
    }

    /// The sleeping half of [`Self::wait_fences`]: CurrentValues are re-sampled once, after
    /// the MonitoredValue update has returned (a signal before it); afterwards a target is
    /// reached only when an interrupt path or a CPU signal marked it `released`, and the wait
    /// ends when [`finished`] says so, or a target's context is lost.
    fn sleep_on_fences(
        &self,
        targets: &[WaitTarget],
        released: &[Arc<Atomic<bool>>],
        own: &mut [bool],
        all: bool,
        timeout_ms: u32,
    ) -> Result {
        // `Jiffies::MAX` is beyond `c_long`: the condition variable sleeps without a timeout.
        let mut remaining: Jiffies = if timeout_ms == FOREVER_MS {
            Jiffies::MAX
        } else {
            msecs_to_jiffies(timeout_ms)
        };
        let mut guard = self.sleep.lock();
        for ((t, r), o) in targets.iter().zip(released).zip(own.iter_mut()) {
            if !r.load(Acquire)
                && window::reached(self.wrap32(t), t.current.read64(t.offset), t.value)
            {
                r.store(true, Release);
                *o = true;
            }
        }
        // A path sets the flag (or marks the context faulted) before it takes the lock held
        // here to wake, and the wait releases the lock atomically: the wake-up cannot be lost.
        // Nobody takes the sleep lock with the objects locked.
        while finished(released, all).is_none() {
            // The device is gone (unbind, a function reset): nothing will signal.
            if self.core.is_revoked() {
                return Err(ENODEV);
            }
            if self.any_lost(targets, released) {
                return Err(ECANCELED);
            }
            match self.wake.wait_interruptible_timeout(&mut guard, remaining) {
                CondVarTimeoutResult::Timeout => return Err(ETIMEDOUT),
                CondVarTimeoutResult::Signal { .. } => return Err(EINTR),
                CondVarTimeoutResult::Woken { jiffies } => remaining = jiffies,
            }
        }
        Ok(())
    }

    /// Wakes the blocking waiters to look at their `released` flags (taking the lock first
    /// orders the wake-up after the sleep of a waiter that saw its flag clear).
    pub(crate) fn wake_waiters(&self) {
        self.core.note_released();
        drop(self.sleep.lock());
        self.wake.notify_all();
    }

    /// After a change of the CurrentValues of fences `handles` (`None`: of any fence)
    /// the device did not report (other adapters' signals, XAD-07): releases their pending
    /// blocking waits now satisfied, in one pass.
    pub(crate) fn release_fences(&self, handles: Option<&[FenceHandle]>) {
        self.release_signaled(|w| handles.is_none_or(|h| h.contains(&w.handle)));
        self.rearm_released();
    }

    /// After a CPU signal: releases the pending waits `pick` selects whose fence reached their
    /// value, and wakes them; their native fences are noted for [`Self::rearm_released`].
    fn release_signaled(&self, pick: impl Fn(&PendingWait) -> bool) {
        let mut any = false;
        {
            let mut guard = self.book();
            let book = &mut *guard;
            for w in book.cpu_waits.iter().filter(|w| pick(w)) {
                if w.release_if_signaled() {
                    any = true;
                    book.rearm.note(w);
                }
            }
        }
        if any {
            self.wake_waiters();
        }
    }
}

/// Whether a wait on targets with these `released` flags is over: all of them when `all`,
/// else any; the lowest index of a released one (0 when `all`), or `None` to go on waiting.
fn finished(released: &[Arc<Atomic<bool>>], all: bool) -> Option<usize> {
    let mut done = released.iter().map(|r| r.load(Acquire));
    if all {
        done.all(|d| d).then_some(0)
    } else {
        done.position(|d| d)
    }
}
