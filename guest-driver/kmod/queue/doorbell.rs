// SPDX-License-Identifier: GPL-2.0

//! Doorbells: in the dedicated model one physical doorbell page of BAR2 per connected user-mode
//! queue; in the global model (`CAPS.global_doorbell`) every connected queue shares doorbell 0,
//! whose value is only a hint to the device, so nothing is ever victimized.
//!
//! A [`Doorbell`] belongs to one user-mode queue of one open file. The process maps three pages:
//! the doorbell page (the BAR page while connected, the doorbell's own dummy page otherwise, and
//! nothing once the doorbell is destroyed, where an access raises `SIGBUS`: a VM_PFNMAP mapping
//! filled on fault, whose target holds the dummy page while it shows it, see `bindings::pfnmap`),
//! the read-only status page ([`DoorbellStatus`] at offset 0) and the LastQueuedValue page.
//!
//! Connecting takes a free physical doorbell or, when all are taken, victimizes the least
//! recently used connected doorbell (connect and `NOTIFY_WORK` count as uses): its status
//! becomes DISCONNECTED_RETRY and its mapping moves to its dummy page. Ordering, so a library
//! that rings and then reads the status never loses a submission: on disconnect the status is
//! written before the device lets go of the doorbell, and the mapping moves after; on connect the
//! mapping moves and then the status says CONNECTED.
//!
//! While a queue's context is suspended (`SUSPEND_CONTEXT`, until `RESUME_CONTEXT`), its
//! connected doorbells read CONNECTED_NOTIFY (DB-10, DB-13): the device does not run the work,
//! so the library tells the module with `NOTIFY_WORK`, which only counts the pending work (per
//! doorbell, reported when the context resumes). The disconnected statuses take precedence.
//! Ordering: on suspend the statuses change before the device takes the queues off the
//! runlists, on resume after it puts them back, so a ring in a suspended context always reads
//! CONNECTED_NOTIFY. D3 entry also makes every connected doorbell read CONNECTED_NOTIFY while
//! it looks for pending work ([`Doorbells::quiesce`]), before it suspends the contexts.
//!
//! Locks: the hardware mutex, then the registry of [`Doorbells`] (physical doorbells, every
//! doorbell), then the core's objects (suspended and faulted contexts), then a doorbell's own
//! state; a doorbell's pfn target is taken after its state is let go (also by the fault handler,
//! under the mmap lock), and its mapping is zapped under it.

use kernel::{
    new_mutex,
    prelude::*,
    sync::{
        barrier::{mb, Full},
        lock::{mutex::MutexBackend, Guard},
        Arc, Mutex,
    },
};

use super::lru::{self, LruClock, Slot};
use crate::{
    abi::{
        ids::{ContextId, QueueId},
        mailbox::{self, Opcode},
        pci as ids,
        uapi::DoorbellStatus,
        uapi_debug,
    },
    bindings::{
        mm::FileMapping,
        pfnmap::{PfnTarget, Shown},
    },
    fence::log::Logs,
    hw::{
        command::HwGuard,
        ids::IdBitmap,
        core::Core,
        dmamem::DmaBuf,
        objects::{Kind, Objects},
    },
};

/// A doorbell's mutable state.
struct State {
    /// Its context faulted: status DISCONNECTED_ABORT for good.
    aborted: bool,
    /// The physical doorbell, while connected.
    physical: Option<u32>,
    /// `NOTIFY_WORK`s while its context was suspended, since the last resume.
    pending_notifies: u64,
}

/// The doorbell of one user-mode queue.
#[pin_data]
pub(crate) struct Doorbell {
    /// Device id of its queue.
    pub(crate) queue_id: QueueId,
    /// Device id of its queue's context.
    context_id: ContextId,
    /// Status page.
    pub(crate) status: Arc<DmaBuf>,
    /// LastQueuedValue page.
    pub(crate) last_queued: Arc<DmaBuf>,
    /// What the doorbell mapping shows while disconnected (held by the target too while it
    /// shows it, so a mapping never outlives it).
    dummy: Arc<DmaBuf>,
    /// The page the doorbell mapping shows (the BAR page, `dummy`, or nothing once destroyed).
    pub(crate) target: Arc<PfnTarget<DmaBuf>>,
    /// The owning file's mapping, for zapping the doorbell mapping.
    mapping: FileMapping,
    /// mmap offsets (pages) of the doorbell, status and LastQueuedValue pages.
    pub(crate) pgoffs: [u64; 3],
    /// Connection state.
    #[pin]
    state: Mutex<State>,
}

impl Doorbell {
    /// Points the doorbell at `physical` and its mapping at `shown` (the BAR page, its dummy
    /// page, or nothing), zapping the process's mapping so the next access faults it in.
    fn retarget(&self, physical: Option<u32>, shown: Shown<DmaBuf>) {
        self.state.lock().physical = physical;
        self.target.show(shown, || {
            // SAFETY: The doorbell's file is open: doorbells leave the registry (and stop being
            // retargeted) in `destroy`, which the file's `release` calls before the file goes.
            unsafe { self.mapping.zap(self.pgoffs[0], 1) }
        });
    }

    /// Its dummy page, for the mapping to show.
    fn dummy(&self) -> Shown<DmaBuf> {
        Shown::Page(self.dummy.clone())
    }

    /// Sets the status word.
    fn set_status(&self, status: DoorbellStatus) {
        self.status.write32(0, status as u32);
    }

    /// The physical doorbell, while connected.
    fn physical(&self) -> Option<u32> {
        self.state.lock().physical
    }

    /// Whether `self` is `other`.
    fn is(&self, other: &Doorbell) -> bool {
        core::ptr::eq(self, other)
    }
}

/// The doorbells of a device: who holds each physical doorbell, and every doorbell.
struct Registry {
    /// The physical doorbells: who is connected to each, and when it was last used.
    slots: KVec<Slot<Arc<Doorbell>>>,
    /// Stamps for the doorbells' last use.
    clock: LruClock,
    /// Every doorbell, connected or not.
    all: KVec<Arc<Doorbell>>,
    /// D3 entry is looking for pending work ([`Doorbells::quiesce`]): every connected doorbell
    /// reads CONNECTED_NOTIFY.
    quiesced: bool,
}

impl Registry {
    /// The doorbells of device context `context`.
    fn of_context(&self, context: ContextId) -> impl Iterator<Item = &Arc<Doorbell>> + '_ {
        self.all.iter().filter(move |d| d.context_id == context)
    }

    /// Frees physical doorbell `index` if `db` holds it (in the global model nobody does).
    fn release(&mut self, index: u32, db: &Doorbell) {
        // CAST: `index` came from this registry.
        lru::release(&mut self.slots, index as usize, |d| d.is(db));
    }
}

/// The doorbells of one device.
#[pin_data]
pub(crate) struct Doorbells {
    /// The core.
    core: Arc<Core>,
    /// The registry.
    #[pin]
    reg: Mutex<Registry>,
}

/// The status of a connected doorbell: CONNECTED_NOTIFY while its context is suspended or D3
/// entry looks for pending work.
fn connected_status(reg: &Registry, objects: &Objects, db: &Doorbell) -> DoorbellStatus {
    if reg.quiesced || objects.is_suspended(db.context_id) {
        DoorbellStatus::ConnectedNotify
    } else {
        DoorbellStatus::Connected
    }
}

/// Publishes [`connected_status`] on each connected doorbell of `dbs` (disconnected ones keep
/// RETRY or ABORT).
fn republish<'a>(reg: &Registry, objects: &Objects, dbs: impl Iterator<Item = &'a Arc<Doorbell>>) {
    for db in dbs {
        let state = db.state.lock();
        if !state.aborted && state.physical.is_some() {
            db.set_status(connected_status(reg, objects, db));
        }
    }
}

/// Physical doorbell `index`'s page in BAR2.
fn bar_page(core: &Core, index: u32) -> Shown<DmaBuf> {
    Shown::Bar((core.doorbell_bar() + ids::doorbell_offset(index)) >> 12)
}

/// Disconnects `db` from the device and the registry; its status becomes `status` first.
fn disconnect_locked(
    hw: &mut HwGuard<'_>,
    reg: &mut Registry,
    db: &Doorbell,
    status: DoorbellStatus,
) {
    let Some(index) = db.physical() else {
        db.set_status(status);
        return;
    };
    db.set_status(status);
    let mut args = mailbox::DoorbellArgs {
        queue: db.queue_id.raw(),
        doorbell: index,
        ..Default::default()
    };
    // A failure leaves nothing to undo here: the queue is going or the device is.
    let _ = hw.command(Opcode::DisconnectDoorbell, &mut args, &[]);
    reg.release(index, db);
    db.retarget(None, db.dummy());
}

/// Abnormal termination marks the process's device in error (TERM-04): its doorbells read
/// DISCONNECTED_ABORT and can never reconnect. The device and the mapping are left alone.
pub(crate) fn mark_error(db: &Doorbell) {
    db.state.lock().aborted = true;
    db.set_status(DoorbellStatus::DisconnectedAbort);
}

impl Doorbells {
    /// The doorbells of the device of `core`: none yet, its physical doorbells free.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(core: Arc<Core>) -> Result<Arc<Self>> {
        let count = core.info().doorbells.min(ids::DOORBELL_MAX_COUNT);
        let mut slots = KVec::new();
        for _ in 0..count {
            slots.push(None, GFP_KERNEL)?;
        }
        Arc::pin_init(
            try_pin_init!(Self {
                core,
                reg <- new_mutex!(Registry {
                    slots,
                    clock: LruClock::new(),
                    all: KVec::new(),
                    quiesced: false,
                }),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// Locks the registry.
    fn reg(&self) -> Guard<'_, Registry, MutexBackend> {
        self.reg.lock()
    }

    /// `CREATE_DOORBELL`: a disconnected doorbell (status DISCONNECTED_RETRY; ABORT in a
    /// faulted context) for device queue `queue_id` of context `context_id`, whose pages the
    /// file of `mapping` maps.
    ///
    /// # Errors
    ///
    /// `ENOMEM`, `ENODEV`.
    pub(crate) fn create(
        &self,
        queue_id: QueueId,
        context_id: ContextId,
        mapping: FileMapping,
    ) -> Result<Arc<Doorbell>> {
        let hw = self.core.hw()?;
        let mut reg = self.reg();
        reg.all.reserve(1, GFP_KERNEL_ACCOUNT)?;
        let dev = hw.dev()?;
        let status = Arc::new(DmaBuf::new(dev, 1)?, GFP_KERNEL_ACCOUNT)?;
        // Written before the page's offset is given out: a zeroed page would read CONNECTED.
        status.write32(0, DoorbellStatus::DisconnectedRetry as u32);
        let last_queued = Arc::new(DmaBuf::new(dev, 1)?, GFP_KERNEL_ACCOUNT)?;
        let dummy = Arc::new(DmaBuf::new(dev, 1)?, GFP_KERNEL_ACCOUNT)?;
        let target = PfnTarget::new(Shown::Page(dummy.clone()))?;
        let mut objects = self.core.objects();
        let pgoffs = [
            objects.new_pgoff(1),
            objects.new_pgoff(1),
            objects.new_pgoff(1),
        ];
        let db = Arc::pin_init(
            try_pin_init!(Doorbell {
                queue_id,
                context_id,
                status,
                last_queued,
                dummy,
                target,
                mapping,
                pgoffs,
                state <- new_mutex!(State {
                    aborted: false,
                    physical: None,
                    pending_notifies: 0,
                }),
            }? Error),
            GFP_KERNEL_ACCOUNT,
        )?;
        reg.all.push(db.clone(), GFP_KERNEL_ACCOUNT)?;
        objects.count(Kind::Doorbell, true);
        if objects.is_faulted(context_id) {
            db.state.lock().aborted = true;
            db.set_status(DoorbellStatus::DisconnectedAbort);
        }
        Ok(db)
    }

    /// `CONNECT_DOORBELL`: assigns a physical doorbell (victimizing the least recently used
    /// one when none is free) and maps it; status CONNECTED.
    ///
    /// # Errors
    ///
    /// `ENOSPC` if the device has no doorbell, `EIO` if it refuses or the doorbell is aborted,
    /// `ENODEV`.
    pub(crate) fn connect(&self, db: &Arc<Doorbell>, logs: &Logs) -> Result {
        let core = &*self.core;
        let mut hw = core.hw()?;
        let mut reg = self.reg();
        let reg = &mut *reg;
        if db.state.lock().aborted {
            return Err(EIO);
        }
        if db.physical().is_some() {
            reg.clock.touch(&mut reg.slots, |d| Arc::ptr_eq(d, db));
            db.set_status(connected_status(reg, &core.objects(), db));
            return Ok(());
        }
        let global = core.info().caps.global_doorbell() && !core.info().caps.dedicated_doorbells();
        let index = match lru::free_slot(&reg.slots) {
            _ if global => 0,
            Some(index) => u32::try_from(index)?,
            None => {
                let (index, victim) = lru::least_recent(&reg.slots).ok_or(ENOSPC)?;
                let (index, victim) = (u32::try_from(index)?, victim.clone());
                disconnect_locked(&mut hw, reg, &victim, DoorbellStatus::DisconnectedRetry);
                let retry = DoorbellStatus::DisconnectedRetry as u64;
                let (queue, victimize) = (victim.queue_id.raw(), uapi_debug::TIMELINE_DOORBELL_VICTIMIZE);
                logs.note_thread(uapi_debug::TIMELINE_DOORBELL, queue, 0, retry, victimize);
                index
            }
        };
        let mut args = mailbox::DoorbellArgs {
            queue: db.queue_id.raw(),
            doorbell: index,
            ..Default::default()
        };
        hw.command(Opcode::ConnectDoorbell, &mut args, &[])?;
        // CAST: `index` came from the slots.
        if !global && !reg.clock.claim(&mut reg.slots, index as usize, db.clone()) {
            return Err(EINVAL);
        }
        db.retarget(Some(index), bar_page(core, index));
        db.set_status(connected_status(reg, &core.objects(), db));
        Ok(())
    }

    /// `NOTIFY_WORK_SUBMISSION`: in a suspended context it records pending work and changes
    /// nothing else (DB-13); otherwise the doorbell was used (it becomes the most recently
    /// used).
    ///
    /// On a shared-doorbell device (`CAPS.shared_doorbells`) the library notifies because its
    /// ring found the command processor asleep (`belfry_abi::doorbell`): the module wakes it
    /// with a `DB_WAKE` write, after the registry's lock is dropped (the hardware mutex comes
    /// first in the lock order).
    pub(crate) fn notify(&self, db: &Arc<Doorbell>) {
        let physical = {
            let mut reg = self.reg();
            let reg = &mut *reg;
            if self.core.objects().is_suspended(db.context_id) {
                let mut state = db.state.lock();
                state.pending_notifies = state.pending_notifies.saturating_add(1);
                return;
            }
            reg.clock.touch(&mut reg.slots, |d| Arc::ptr_eq(d, db));
            db.physical()
        };
        if let (true, Some(index)) = (self.core.info().caps.shared_doorbells(), physical) {
            if let Ok(hw) = self.core.hw() {
                hw.wake_doorbell(index);
            }
        }
    }

    /// `SUSPEND_CONTEXT` (`suspend`) or `RESUME_CONTEXT` of device context `context`, with its
    /// connected doorbells' statuses: CONNECTED_NOTIFY while suspended, CONNECTED again on
    /// resume.
    ///
    /// # Errors
    ///
    /// `EIO` if the device refuses (nothing changes), `ENODEV`.
    pub(crate) fn suspend_context(
        &self,
        hw: &mut HwGuard<'_>,
        context: ContextId,
        suspend: bool,
    ) -> Result {
        let reg = self.reg();
        let was = self.core.objects().is_suspended(context);
        if suspend {
            self.set_context_statuses(&reg, context, true);
            if let Err(e) = hw.object_command(Opcode::SuspendContext, context.raw()) {
                self.set_context_statuses(&reg, context, was);
                return Err(e);
            }
            return Ok(());
        }
        // Work written while suspended runs on resume: an engine that went to F1 meanwhile
        // (the suspended queues left it idle) is woken first.
        hw.wake_engines()?;
        hw.object_command(Opcode::ResumeContext, context.raw())?;
        self.set_context_statuses(&reg, context, false);
        let mut pending = 0u64;
        for db in reg.of_context(context) {
            let mut state = db.state.lock();
            pending = pending.saturating_add(state.pending_notifies);
            state.pending_notifies = 0;
        }
        if pending != 0 {
            dev_dbg!(
                self.core.device(),
                "context {} resumed with {} notified submission(s) pending\n",
                context.raw(),
                pending
            );
        }
        Ok(())
    }

    /// D3 entry's look for pending work (`quiet`) or its end: every connected doorbell reads
    /// CONNECTED_NOTIFY while it looks, then its context's status again (disconnected ones keep
    /// RETRY or ABORT). Entering, a full barrier follows the status writes, so the caller's
    /// reads of the LastQueuedValue pages come after them: a library that rings and then reads
    /// the status either reads CONNECTED_NOTIFY (and notifies, which resumes the device) or
    /// wrote its LastQueuedValue and rang before the look, which then asks the device (whose
    /// mailbox takes every earlier ring first) and finds the work.
    pub(crate) fn quiesce(&self, quiet: bool) {
        let mut reg = self.reg();
        reg.quiesced = quiet;
        let objects = self.core.objects();
        republish(&reg, &objects, reg.all.iter());
        drop(objects);
        drop(reg);
        if quiet {
            mb(Full);
        }
    }

    /// Records `context` as suspended or not and republishes its connected doorbells'
    /// statuses (disconnected ones keep RETRY or ABORT).
    fn set_context_statuses(&self, reg: &Registry, context: ContextId, suspended: bool) {
        let mut objects = self.core.objects();
        objects.set_suspended(context, suspended);
        republish(reg, &objects, reg.of_context(context));
    }

    /// `DISCONNECT_DOORBELL` and the termination path: the module's disconnect path on request
    /// (DB-17). Publishes `status` (DISCONNECTED_RETRY, or DISCONNECTED_ABORT for good; a
    /// doorbell already aborted stays aborted), lets the device go of the physical doorbell and
    /// moves the process's mapping to the dummy page, as victimization does.
    pub(crate) fn disconnect(&self, hw: &mut HwGuard<'_>, db: &Doorbell, status: DoorbellStatus) {
        let mut reg = self.reg();
        let status = {
            let mut state = db.state.lock();
            if status == DoorbellStatus::DisconnectedAbort {
                state.aborted = true;
            }
            if state.aborted {
                DoorbellStatus::DisconnectedAbort
            } else {
                status
            }
        };
        disconnect_locked(hw, &mut reg, db, status);
    }

    /// Disconnects the connected doorbells of `queues` with DISCONNECTED_RETRY (an engine going
    /// to F1, ENG-04); the queues disconnected.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn disconnect_queues(&self, hw: &mut HwGuard<'_>, queues: &[QueueId]) -> Result<KVec<QueueId>> {
        let mut reg = self.reg();
        let mut picked = KVec::new();
        for db in reg.all.iter().filter(|d| queues.contains(&d.queue_id)) {
            if db.physical().is_some() && !db.state.lock().aborted {
                picked.push(db.clone(), GFP_KERNEL)?;
            }
        }
        let mut out = KVec::new();
        for db in picked {
            disconnect_locked(hw, &mut reg, &db, DoorbellStatus::DisconnectedRetry);
            out.push(db.queue_id, GFP_KERNEL)?;
        }
        Ok(out)
    }

    /// Disconnects every connected doorbell of the device with DISCONNECTED_RETRY (D3 entry,
    /// PWR-01: the mappings move to the dummy pages); how many.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn disconnect_all(&self, hw: &mut HwGuard<'_>) -> Result<KVec<QueueId>> {
        let queues: KVec<QueueId> = {
            let reg = self.reg();
            let mut q = KVec::with_capacity(reg.all.len(), GFP_KERNEL)?;
            for db in reg.all.iter() {
                q.push(db.queue_id, GFP_KERNEL)?;
            }
            q
        };
        self.disconnect_queues(hw, &queues)
    }

    /// Disconnects and forgets `db`, connected or not: its doorbell mapping shows nothing from
    /// now on (`SIGBUS`); its status and LastQueuedValue pages stay alive while mapped (the
    /// caller keeps them).
    pub(crate) fn destroy(&self, hw: Option<&mut HwGuard<'_>>, db: &Doorbell) {
        let mut reg = self.reg();
        match hw {
            Some(hw) => disconnect_locked(hw, &mut reg, db, DoorbellStatus::DisconnectedAbort),
            None => {
                if let Some(index) = db.physical() {
                    reg.release(index, db);
                }
                db.set_status(DoorbellStatus::DisconnectedAbort);
            }
        }
        db.retarget(None, Shown::Nothing);
        reg.all.retain(|d| !d.is(db));
        self.core.objects().count(Kind::Doorbell, false);
    }

    /// Device loss for the contexts named by fault records since the last call (interrupt
    /// thread): their doorbells go to DISCONNECTED_ABORT (DB-16), for good. The contexts
    /// it took (for the fences their lost work was going to signal).
    pub(crate) fn process_faults(&self) -> IdBitmap<4> {
        let faulted = self.core.take_faults();
        if faulted.is_empty() {
            return faulted;
        }
        let Ok(mut hw) = self.core.hw() else {
            return faulted;
        };
        let mut reg = self.reg();
        let mut victims = KVec::new();
        {
            let mut objects = self.core.objects();
            objects.add_faulted(&faulted);
            for db in reg.all.iter().filter(|d| objects.is_faulted(d.context_id)) {
                if victims.push(db.clone(), GFP_KERNEL).is_err() {
                    break;
                }
            }
        }
        for db in victims {
            db.state.lock().aborted = true;
            disconnect_locked(&mut hw, &mut reg, &db, DoorbellStatus::DisconnectedAbort);
        }
        faulted
    }
}

impl Doorbells {
    /// Device termination (unbind, RING-04), for the files still open, once the core is
    /// revoked (nothing reconnects) and before the doorbell BAR goes: every doorbell goes to
    /// DISCONNECTED_ABORT for good and its mapping to its dummy page.
    pub(crate) fn abort_all(&self) {
        let mut reg = self.reg();
        for i in 0..reg.all.len() {
            let db = reg.all[i].clone();
            db.state.lock().aborted = true;
            db.set_status(DoorbellStatus::DisconnectedAbort);
            if let Some(index) = db.physical() {
                reg.release(index, &db);
            }
            db.retarget(None, db.dummy());
        }
    }
}
