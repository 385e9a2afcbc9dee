// SPDX-License-Identifier: GPL-2.0

//! Doorbells: in the dedicated model one physical doorbell page of BAR2 per connected user-mode
//! queue; in the global model (`CAPS.global_doorbell`) every connected queue shares doorbell 0,
//! whose value is only a hint to the device, so nothing is ever victimized.
//!
//! A [`Doorbell`] belongs to one user-mode queue of one open file. The process maps three pages:
//! the doorbell page (the BAR page while connected, the doorbell's own dummy page otherwise: a
//! VM_PFNMAP mapping filled on fault, see `ffi::doorbell_mmap`), the read-only status page
//! ([`DoorbellStatus`] at offset 0) and the LastQueuedValue page.
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
//! CONNECTED_NOTIFY.
//!
//! Locks: the hardware mutex, then [`Objects`] (the physical-doorbell registry), then a
//! doorbell's own state (also taken by the fault handler, under the mmap lock).

use kernel::{
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
};

use crate::{
    abi::{
        mailbox::{self, Opcode},
        pci as ids,
        uapi::DoorbellStatus,
    },
    dmamem::DmaBuf,
    ffi::{self, FileMapping},
    gpucore::{Core, HwGuard, Kind, Objects},
};

/// A doorbell's mutable state.
struct State {
    /// Its context faulted: status DISCONNECTED_ABORT for good.
    aborted: bool,
    /// The physical doorbell, while connected.
    physical: Option<u32>,
    /// The pfn the doorbell mapping shows.
    pfn: u64,
    /// `NOTIFY_WORK`s while its context was suspended, since the last resume.
    pending_notifies: u64,
}

/// The doorbell of one user-mode queue.
#[pin_data]
pub(crate) struct Doorbell {
    /// Device id of its queue.
    queue_id: u32,
    /// Device id of its queue's context.
    context_id: u32,
    /// Status page.
    pub(crate) status: Arc<DmaBuf>,
    /// LastQueuedValue page.
    pub(crate) last_queued: Arc<DmaBuf>,
    /// What the doorbell mapping shows while disconnected.
    dummy: DmaBuf,
    /// pfn of `dummy`.
    dummy_pfn: u64,
    /// The owning file's mapping, for zapping the doorbell mapping.
    mapping: FileMapping,
    /// mmap offsets (pages) of the doorbell, status and LastQueuedValue pages.
    pub(crate) pgoffs: [u64; 3],
    /// Connection state.
    #[pin]
    state: Mutex<State>,
}

impl Doorbell {
    /// A disconnected doorbell (status DISCONNECTED_RETRY) for device queue `queue_id`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`, `ENODEV`.
    pub(crate) fn new(
        hw: &HwGuard<'_>,
        objects: &mut Objects,
        queue_id: u32,
        context_id: u32,
        mapping: FileMapping,
    ) -> Result<Arc<Self>> {
        objects.all_doorbells_reserve()?;
        let dev = hw.dev()?;
        let status = Arc::new(DmaBuf::new(dev, 1)?, GFP_KERNEL)?;
        status.write32(0, DoorbellStatus::DisconnectedRetry as u32);
        let last_queued = Arc::new(DmaBuf::new(dev, 1)?, GFP_KERNEL)?;
        let dummy = DmaBuf::new(dev, 1)?;
        let dummy_pfn = ffi::kernel_pfn(dummy.cpu_ptr());
        let initial_pfn = dummy_pfn;
        let pgoffs = [
            objects.new_pgoff(1),
            objects.new_pgoff(1),
            objects.new_pgoff(1),
        ];
        let db = Arc::pin_init(
            try_pin_init!(Self {
                queue_id,
                context_id,
                status,
                last_queued,
                dummy,
                dummy_pfn,
                mapping,
                pgoffs,
                state <- new_mutex!(State {
                    aborted: false,
                    physical: None,
                    pfn: initial_pfn,
                    pending_notifies: 0,
                }),
            }? Error),
            GFP_KERNEL,
        )?;
        objects.add_doorbell(db.clone())?;
        objects.count(Kind::Doorbell, true);
        if objects.is_faulted(context_id) {
            db.state.lock().aborted = true;
            db.set_status(DoorbellStatus::DisconnectedAbort);
        }
        Ok(db)
    }

    /// Runs `f` with the pfn the doorbell mapping must show, under the doorbell's lock (the
    /// fault handler inserts it before a retarget can zap).
    pub(crate) fn with_pfn<R>(&self, f: impl FnOnce(u64) -> R) -> R {
        let state = self.state.lock();
        f(state.pfn)
    }

    /// Points the doorbell at `physical` (or its dummy page) and zaps the process's mapping so
    /// the next access faults the new page in.
    fn retarget(&self, physical: Option<u32>, pfn: u64) {
        {
            let mut state = self.state.lock();
            state.physical = physical;
            state.pfn = pfn;
        }
        // SAFETY: The doorbell's file is open: doorbells leave the registry (and stop being
        // retargeted) in `destroy`, which the file's `release` calls before the file goes.
        unsafe { self.mapping.zap(self.pgoffs[0], 1) };
    }

    /// Sets the status word.
    fn set_status(&self, status: DoorbellStatus) {
        self.status.write32(0, status as u32);
    }

    /// Device id of its queue's context.
    pub(crate) fn context_id(&self) -> u32 {
        self.context_id
    }

    /// The physical doorbell, while connected.
    fn physical(&self) -> Option<u32> {
        self.state.lock().physical
    }
}

/// The status of a connected doorbell: CONNECTED_NOTIFY while its context is suspended.
fn connected_status(objects: &Objects, db: &Doorbell) -> DoorbellStatus {
    if objects.is_suspended(db.context_id) {
        DoorbellStatus::ConnectedNotify
    } else {
        DoorbellStatus::Connected
    }
}

/// The pfn of physical doorbell `index`'s page in BAR2.
fn bar_pfn(core: &Core, index: u32) -> u64 {
    (core.doorbell_bar() + ids::doorbell_offset(index)) >> 12
}

/// Disconnects `db` from the device and the registry; its status becomes `status` first.
fn disconnect_locked(
    hw: &mut HwGuard<'_>,
    objects: &mut Objects,
    db: &Doorbell,
    status: DoorbellStatus,
) {
    let Some(index) = db.physical() else {
        db.set_status(status);
        return;
    };
    db.set_status(status);
    let mut args = mailbox::DoorbellArgs {
        queue: db.queue_id,
        doorbell: index,
        ..Default::default()
    };
    // A failure leaves nothing to undo here: the queue is going or the device is.
    let _ = hw.command(Opcode::DisconnectDoorbell, &mut args, &[]);
    objects.release_doorbell(index, db);
    db.retarget(None, db.dummy_pfn);
}

/// `CONNECT_DOORBELL`: assigns a physical doorbell (victimizing the least recently used one when
/// none is free) and maps it; status CONNECTED.
///
/// # Errors
///
/// `ENOSPC` if the device has no doorbell, `EIO` if it refuses, `ENODEV`.
pub(crate) fn connect(core: &Core, db: &Arc<Doorbell>) -> Result {
    let mut hw = core.hw()?;
    let mut objects = core.objects();
    if db.state.lock().aborted {
        return Err(EIO);
    }
    if db.physical().is_some() {
        objects.touch_doorbell(db);
        db.set_status(connected_status(&objects, db));
        return Ok(());
    }
    let global = core.info().caps.global_doorbell() && !core.info().caps.dedicated_doorbells();
    let index = match objects.free_doorbell() {
        _ if global => 0,
        Some(index) => index,
        None => {
            let (index, victim) = objects.lru_doorbell().ok_or(ENOSPC)?;
            disconnect_locked(
                &mut hw,
                &mut objects,
                &victim,
                DoorbellStatus::DisconnectedRetry,
            );
            index
        }
    };
    let mut args = mailbox::DoorbellArgs {
        queue: db.queue_id,
        doorbell: index,
        ..Default::default()
    };
    hw.command(Opcode::ConnectDoorbell, &mut args, &[])?;
    if !global {
        objects.claim_doorbell(index, db.clone())?;
    }
    db.retarget(Some(index), bar_pfn(core, index));
    db.set_status(connected_status(&objects, db));
    Ok(())
}

/// `NOTIFY_WORK_SUBMISSION`: in a suspended context it records pending work and changes nothing
/// else (DB-13); otherwise the doorbell was used (it becomes the most recently used).
pub(crate) fn notify(core: &Core, db: &Arc<Doorbell>) {
    let mut objects = core.objects();
    if objects.is_suspended(db.context_id) {
        let mut state = db.state.lock();
        state.pending_notifies = state.pending_notifies.saturating_add(1);
        return;
    }
    objects.touch_doorbell(db);
}

/// `SUSPEND_CONTEXT` (`suspend`) or `RESUME_CONTEXT` of device context `context`, with its
/// connected doorbells' statuses: CONNECTED_NOTIFY while suspended, CONNECTED again on resume.
///
/// # Errors
///
/// `EIO` if the device refuses (nothing changes), `ENODEV`.
pub(crate) fn suspend_context(
    core: &Core,
    hw: &mut HwGuard<'_>,
    context: u32,
    suspend: bool,
) -> Result {
    let mut objects = core.objects();
    let was = objects.is_suspended(context);
    let mut args = mailbox::ObjectArgs {
        id: context,
        ..Default::default()
    };
    if suspend {
        set_context_statuses(&mut objects, context, true);
        if let Err(e) = hw.command(Opcode::SuspendContext, &mut args, &[]) {
            set_context_statuses(&mut objects, context, was);
            return Err(e);
        }
        return Ok(());
    }
    hw.command(Opcode::ResumeContext, &mut args, &[])?;
    set_context_statuses(&mut objects, context, false);
    let mut pending = 0u64;
    for db in objects.doorbells_of(context) {
        let mut state = db.state.lock();
        pending = pending.saturating_add(state.pending_notifies);
        state.pending_notifies = 0;
    }
    if pending != 0 {
        dev_dbg!(
            core.device(),
            "context {} resumed with {} notified submission(s) pending\n",
            context,
            pending
        );
    }
    Ok(())
}

/// Records `context` as suspended or not and republishes its connected doorbells' statuses
/// (disconnected ones keep RETRY or ABORT).
fn set_context_statuses(objects: &mut Objects, context: u32, suspended: bool) {
    objects.set_suspended(context, suspended);
    for db in objects.doorbells_of(context) {
        let state = db.state.lock();
        if !state.aborted && state.physical.is_some() {
            db.set_status(connected_status(objects, db));
        }
    }
}

/// `DISCONNECT_DOORBELL` and the termination path: the module's disconnect path on request
/// (DB-17). Publishes `status` (DISCONNECTED_RETRY, or DISCONNECTED_ABORT for good; a doorbell
/// already aborted stays aborted), lets the device go of the physical doorbell and moves the
/// process's mapping to the dummy page, as victimization does.
pub(crate) fn disconnect(core: &Core, hw: &mut HwGuard<'_>, db: &Doorbell, status: DoorbellStatus) {
    let mut objects = core.objects();
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
    disconnect_locked(hw, &mut objects, db, status);
}

/// Abnormal termination marks the process's device in error (TERM-04): its doorbells read
/// DISCONNECTED_ABORT and can never reconnect. The device and the mapping are left alone.
pub(crate) fn mark_error(db: &Doorbell) {
    db.state.lock().aborted = true;
    db.set_status(DoorbellStatus::DisconnectedAbort);
}

/// Disconnects and forgets `db` (its pages stay alive while mapped: the caller keeps them).
pub(crate) fn destroy(core: &Core, hw: Option<&mut HwGuard<'_>>, db: &Doorbell) {
    let mut objects = core.objects();
    match hw {
        Some(hw) => disconnect_locked(hw, &mut objects, db, DoorbellStatus::DisconnectedAbort),
        None => {
            if let Some(index) = db.physical() {
                objects.release_doorbell(index, db);
            }
            db.set_status(DoorbellStatus::DisconnectedAbort);
            db.retarget(None, db.dummy_pfn);
        }
    }
    objects.remove_doorbell(db);
    objects.count(Kind::Doorbell, false);
}

/// Device termination (unbind, RING-04), for the files still open: once the core is revoked
/// (nothing reconnects) and the device reset (every queue on it destroyed), every doorbell goes
/// to DISCONNECTED_ABORT for good and its mapping to its dummy page.
pub(crate) struct AbortOnUnbind(pub(crate) Arc<Core>);

impl Drop for AbortOnUnbind {
    fn drop(&mut self) {
        let mut objects = self.0.objects();
        for i in 0..objects.all_doorbells().len() {
            let db = objects.all_doorbells()[i].clone();
            db.state.lock().aborted = true;
            db.set_status(DoorbellStatus::DisconnectedAbort);
            if let Some(index) = db.physical() {
                objects.release_doorbell(index, &db);
            }
            db.retarget(None, db.dummy_pfn);
        }
    }
}

/// Every doorbell of a faulted context goes to DISCONNECTED_ABORT (DB-16), for good.
pub(crate) fn abort_faulted(hw: &mut HwGuard<'_>, objects: &mut Objects) {
    let mut victims = KVec::new();
    for db in objects.doorbells_of_faulted() {
        if victims.push(db, GFP_KERNEL).is_err() {
            break;
        }
    }
    for db in victims {
        db.state.lock().aborted = true;
        disconnect_locked(hw, objects, &db, DoorbellStatus::DisconnectedAbort);
    }
}
