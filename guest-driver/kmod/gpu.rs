// SPDX-License-Identifier: GPL-2.0

//! The top of the domain layer: [`Gpu`], the domain objects of one device side by side (the
//! core, its fences and fence logs, its doorbells, its kernel rings' registry), and the few
//! sequences that span them (a CPU signal: the store or device update, the GPU work held
//! behind it, the eventfd waits it satisfies, the propagation to a cross-adapter fence's other
//! devices). The interrupt layer and the front end hold a
//! [`Gpu`]; nothing below knows it.

use kernel::{
    prelude::*,
    sync::Arc,
    time::{delay::fsleep, Delta},
};

use crate::abi::{
    ids::ContextId,
    irq,
    mailbox::{self, Opcode},
    uapi, uapi_debug,
};

use crate::{
    bindings::{param, runtime_pm::RuntimePm},
    fence::{
        eventfd,
        log::Logs,
        syncfile,
        object::CpuPlace,
        peers::PeerSignals,
        verbose::VerboseLog,
        waits::{Fences, WaitTarget},
        window,
    },
    hw::{core::Core, ids::IdBitmap},
    mm::Mm,
    queue::{build::QueueEnv, doorbell::Doorbells, kring::Held, watch::Watch},
    xad::{Change, Peer},
};

/// The domain objects of one device (each reference counted; cloning shares them).
#[derive(Clone)]
pub(crate) struct Gpu {
    /// The hardware core.
    pub(crate) core: Arc<Core>,
    /// Fences: registration, CPU waits and signals, MonitoredValue updates.
    pub(crate) fences: Arc<Fences>,
    /// Fence logs, the timeline and the native-fence interrupt work.
    pub(crate) logs: Arc<Logs>,
    /// The verbose fence-logging switch (LOG-20) and its watchers.
    pub(crate) verbose: Arc<VerboseLog>,
    /// Doorbells.
    pub(crate) doorbells: Arc<Doorbells>,
    /// Kernel rings holding work, pending software signals.
    pub(crate) held: Arc<Held>,
    /// Hang detection: watched queues, device-reported hangs, recovery counters.
    pub(crate) watch: Arc<Watch>,
    /// Its part in cross-adapter fences.
    pub(crate) xad: Arc<Peer>,
    /// Its part in peer signals (XAD-15): joined at bind, left at unbind.
    pub(crate) peers: Arc<PeerSignals>,
    /// The video memory manager.
    pub(crate) mm: Arc<Mm>,
    /// Runtime PM references of the device (`power` holds it in D0 per ioctl; an engine going
    /// to F1 asks for an autosuspend).
    pub(crate) rpm: Arc<RuntimePm>,
}

impl Gpu {
    /// The domain objects of the device of `core`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(core: &Arc<Core>) -> Result<Self> {
        let fences = Fences::new(core.clone())?;
        let logs = Logs::new(core.clone())?;
        let held = Held::new(fences.clone())?;
        let peers = PeerSignals::new(core.clone())?;
        Ok(Self {
            core: core.clone(),
            xad: Peer::new(fences.clone(), logs.clone(), held.clone(), peers.clone())?,
            peers,
            logs,
            verbose: Arc::pin_init(VerboseLog::new(), GFP_KERNEL)?,
            doorbells: Doorbells::new(core.clone())?,
            held,
            watch: Watch::new(core.clone())?,
            mm: Mm::new(core)?,
            rpm: Arc::new(RuntimePm::new(core.device()), GFP_KERNEL)?,
            fences,
        })
    }

    /// What building and destroying queues needs.
    pub(crate) fn queue_env(&self) -> QueueEnv<'_> {
        QueueEnv {
            fences: &self.fences,
            logs: &self.logs,
            held: &self.held,
            doorbells: &self.doorbells,
        }
    }

    /// `SIGNAL_FENCE` of the fence at `place` to `value`: a monitored fence is a CPU store to
    /// its value page (FEN-16; `ERANGE` outside the 32-bit window), which also releases the GPU
    /// work held behind it (FEN-15); a native fence is updated through the device. Then the
    /// waits it satisfies complete.
    ///
    /// # Errors
    ///
    /// `ERANGE`, or the device update's `EIO`, `ENODEV`, `ETIMEDOUT`.
    pub(crate) fn signal(&self, place: &CpuPlace, value: u64) -> Result {
        let (global, monitored, current, offset) = place;
        self.logs.note_thread(uapi_debug::TIMELINE_CPU_SIGNAL, irq::NONE, global.raw(), value, 0);
        if *monitored {
            let wrap32 = self.core.wrap32();
            if !window::in_window(wrap32, current.read64(*offset), value, true) {
                return Err(ERANGE);
            }
            self.fences.store_monitored(current, *offset, value);
            self.held.release();
            syncfile::complete(&self.fences);
        } else {
            self.fences.signal_fence(*global, value)?;
        }
        eventfd::complete(&self.fences, &self.logs);
        // A cross-adapter fence's other devices learn it now (XAD-08).
        self.xad.propagate(Change::CpuSignal);
        Ok(())
    }

    /// Timeout recovery of `engine` (ENG-06, DB-16): `RESET_ENGINE`, where the device drops
    /// the work of the queue that executed its current command buffer longest (at least
    /// `min_busy_ms`, or the one its watchdog stopped) and faults its context; that context is
    /// then lost here too: its doorbells go to DISCONNECTED_ABORT and the CPU waits on its
    /// queues' progress end with `ECANCELED`, and so do the CPU waits on fences its dropped
    /// work was going to signal (`Fences::abandon_lost_signals`). The other contexts keep
    /// their work (the device never stopped them). The lost context's device id, if the device blamed one.
    ///
    /// # Errors
    ///
    /// The mailbox's: `EIO`, `ETIMEDOUT`, `ENODEV`.
    pub(crate) fn recover_engine(&self, engine: u32, min_busy_ms: u32) -> Result<Option<u32>> {
        let mut a = mailbox::ResetEngineArgs {
            engine,
            min_busy_ms,
            ..Default::default()
        };
        self.core.hw()?.command(Opcode::ResetEngine, &mut a, &[])?;
        let lost = (a.guilty_context != irq::NONE).then_some(a.guilty_context);
        self.watch.count(|s| {
            s.engine_resets += 1;
            if let Some(context) = lost {
                s.contexts_lost += 1;
                s.last_lost_context = context;
            }
        });
        if let Some(context) = lost {
            pr_warn!(
                "engine {} reset: context {} lost (its queue made no progress)\n",
                engine,
                context
            );
            self.core.note_lost(context);
            let lost = self.doorbells.process_faults();
            self.fences.wake_waiters();
            self.end_lost_waits(&lost);
        }
        Ok(lost)
    }

    /// After contexts were lost (`lost`: device context ids): every CPU wait on a value their
    /// unexecuted work was going to signal ends — the blocking ones with `ECANCELED`
    /// (`Fences::abandon_lost_signals`), the pollable ones signaled and dropped
    /// (`eventfd::end_lost`), the `sync_file` exports failed with `ECANCELED`
    /// (`syncfile::end_lost`). Waits on values no lost work was going to signal go on.
    pub(crate) fn end_lost_waits(&self, lost: &IdBitmap<4>) {
        if lost.is_empty() {
            return;
        }
        self.fences.abandon_lost_signals(lost);
        eventfd::end_lost(&self.fences);
        syncfile::end_lost(&self.fences);
    }

    /// The device asked for `engine` to go to F1 (ENG-04) after running `device_kicks`
    /// `KICK_QUEUE` commands: the doorbells of its user-mode queues are disconnected
    /// (DISCONNECTED_RETRY, their mappings on the dummy page) first, then the engine is set to
    /// F1 — unless a submission arrived meanwhile (the device holds work of a queue whose
    /// LastQueuedValue is past its progress: the word is the process's, the verdict the
    /// device's), which keeps it in F0: its doorbell, disconnected after it rang or before,
    /// makes the library reconnect either way. A request older than the module's last
    /// kernel-mode kick is stale and changes nothing (the device asks again once the engine is
    /// idle again): that kick's work may be on the engine, parked in a wait, and nothing would
    /// wake an engine in F1 for it.
    ///
    /// # Errors
    ///
    /// `ENOMEM`, the mailbox's `EIO`, `ETIMEDOUT`, `ENODEV`.
    pub(crate) fn enter_f1(&self, engine: u32, device_kicks: u64) -> Result {
        // Test-only: the window between the request and the look, widened on a device with
        // test-only faults (`test_f1_entry_delay_ms`).
        let delay_ms = self.core.info().test_delay_ms(param::test_f1_entry_delay_ms_param());
        if delay_ms != 0 {
            fsleep(Delta::from_millis(i64::from(delay_ms)));
        }
        let queues = self.watch.queues_on(engine)?;
        let mut hw = self.core.hw()?;
        if hw.engine_in_f1(engine) {
            return Ok(());
        }
        if !hw.f1_request_is_current(device_kicks) {
            self.watch.power_step(uapi_debug::POWER_STEP_F1_ABORTED, engine);
            return Ok(());
        }
        for q in self.doorbells.disconnect_queues(&mut hw, &queues)? {
            let retry = uapi::DoorbellStatus::DisconnectedRetry as u64;
            let (queue, disconnect) = (q.raw(), uapi_debug::TIMELINE_DOORBELL_DISCONNECT);
            self.logs.note_thread(uapi_debug::TIMELINE_DOORBELL, queue, 0, retry, disconnect);
            self.watch.power_step(uapi_debug::POWER_STEP_F1_DISCONNECT, engine);
        }
        if self.watch.pending_on(&mut hw, engine) {
            self.watch.power_step(uapi_debug::POWER_STEP_F1_ABORTED, engine);
            return Ok(());
        }
        hw.set_engine_f1(engine, true)?;
        self.watch.power_step(uapi_debug::POWER_STEP_ENGINE_F1, engine);
        drop(hw);
        // An idle engine: the device may be idle too (D3 after the autosuspend delay, if user
        // space allowed runtime PM; the suspend callback checks).
        self.rpm.request_autosuspend();
        Ok(())
    }

    /// Before connecting the doorbell of queue `queue` (ENG-05): its engine, if the module put
    /// it in F1, goes back to F0 first, so the work the connect announces runs.
    ///
    /// # Errors
    ///
    /// The mailbox's: `EIO`, `ETIMEDOUT`, `ENODEV`.
    pub(crate) fn wake_for(&self, queue: crate::abi::ids::QueueId) -> Result<Option<u32>> {
        let Some(engine) = self.watch.engine_of(queue) else {
            return Ok(None);
        };
        let mut hw = self.core.hw()?;
        if hw.engine_in_f1(engine) {
            hw.set_engine_f1(engine, false)?;
            self.watch.power_step(uapi_debug::POWER_STEP_ENGINE_F0, engine);
        }
        Ok(Some(engine))
    }

    /// A CPU wait (`WAIT_FENCE`, `WAIT_PROGRESS`): [`Self::wait_many`] of the fence at `place`.
    ///
    /// # Errors
    ///
    /// Those of [`Fences::wait_fences`].
    pub(crate) fn wait(
        &self,
        place: &CpuPlace,
        value: u64,
        timeout_ms: u32,
        lost: Option<ContextId>,
    ) -> Result {
        let target = target(place, value, lost);
        self.wait_many(core::slice::from_ref(&target), true, timeout_ms)
            .map(|_| ())
    }

    /// A CPU wait on several values (`WAIT_FENCES`, or one of the waits above):
    /// [`Fences::wait_fences`], with the start and end (the errno, 0 when it ended) of each
    /// target on the timeline as the calling thread's. Returns the lowest index of a target
    /// reached (0 when `all`).
    ///
    /// # Errors
    ///
    /// Those of [`Fences::wait_fences`].
    pub(crate) fn wait_many(
        &self,
        targets: &[WaitTarget],
        all: bool,
        timeout_ms: u32,
    ) -> Result<usize> {
        let logs = &self.logs;
        for t in targets {
            let global = t.handle.raw();
            logs.note_thread(uapi_debug::TIMELINE_CPU_WAIT_START, irq::NONE, global, t.value, 0);
        }
        let result = self.fences.wait_fences(targets, all, timeout_ms);
        let errno = result.as_ref().err().map_or(0, |e| u64::from(e.to_errno().unsigned_abs()));
        for t in targets {
            let global = t.handle.raw();
            logs.note_thread_end(uapi_debug::TIMELINE_CPU_WAIT_END, irq::NONE, global, t.value, errno);
        }
        result
    }
}

/// What a CPU wait for `value` on the fence at `place` waits for; `lost` as in
/// [`WaitTarget::lost`].
pub(crate) fn target(place: &CpuPlace, value: u64, lost: Option<ContextId>) -> WaitTarget {
    let (handle, monitored, current, offset) = place;
    WaitTarget {
        handle: *handle,
        monitored: *monitored,
        current: current.clone(),
        offset: *offset,
        value,
        lost,
    }
}

/// Unbind (an administrator's, or the device-lost reprobe's), before the BARs go: the core is
/// revoked (nothing programs the device, connects a doorbell or moves a ring into VRAM any
/// more; `mmap` refuses with `ENODEV`), the blocking CPU waits end with `ENODEV` and the
/// pollable ones are signaled and dropped (`eventfd::end_on_loss`: their status is `ENODEV`),
/// then every CPU mapping of the binding lets go of its BAR
/// pages: doorbells show their dummy pages and read DISCONNECTED_ABORT for good (RING-04), rings
/// in VRAM show nothing (`SIGBUS`). A later binding may give the same BAR pages to another
/// process.
pub(crate) struct RevokeOnUnbind(pub(crate) Gpu);

impl RevokeOnUnbind {
    /// A function reset (`reset_prepare`) is about to make the device forget every context,
    /// queue and mapping: what unbind does, done before the reset. The mailbox is marked wedged
    /// and the core revoked (every later ioctl `ENODEV`, nothing programs the device), the
    /// blocking CPU waits end with `ENODEV`, the pollable ones are signaled and dropped and the
    /// pending `sync_file` exports fail with `ENODEV`, every
    /// doorbell goes to DISCONNECTED_ABORT and its dummy page, rings in VRAM to no page. The
    /// hang watchdog sees the wedged mailbox and takes the device-lost path: the reprobe waits
    /// for the reset to end (the device lock), its unbind ends the waits still pending and its
    /// probe brings the device up again.
    pub(crate) fn before_reset(&self) {
        self.0.core.lose_for_reset();
        self.0.fences.wake_waiters();
        eventfd::end_on_loss(&self.0.fences);
        syncfile::end_on_loss(&self.0.fences);
        self.0.doorbells.abort_all();
        self.0.mm.revoke_cpu_views();
    }
}

impl Drop for RevokeOnUnbind {
    fn drop(&mut self) {
        self.0.core.revoke();
        self.0.fences.wake_waiters();
        eventfd::end_on_loss(&self.0.fences);
        self.0.doorbells.abort_all();
        self.0.mm.revoke_cpu_views();
    }
}
