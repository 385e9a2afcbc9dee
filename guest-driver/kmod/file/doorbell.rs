// SPDX-License-Identifier: GPL-2.0

//! Doorbell ioctls: `CREATE_DOORBELL`, `DESTROY_DOORBELL`, `CONNECT_DOORBELL`,
//! `DISCONNECT_DOORBELL`, `NOTIFY_WORK`.

use kernel::{prelude::*, sync::Arc};

use super::state::{BelfryFile, FileDoorbell};
use crate::{
    abi::{
        mmu,
        uapi::{self, DoorbellStatus},
        uapi_debug,
    },
    queue::{doorbell::Doorbell, watch::Watched},
};

impl BelfryFile {
    /// `CREATE_DOORBELL`: for a user-mode queue without one (`EPERM` for a kernel-mode queue,
    /// `EBUSY` if it has one); disconnected until `CONNECT_DOORBELL`.
    pub(super) fn create_doorbell(&self, a: &mut uapi::CreateDoorbell) -> Result {
        let mapping = self.mapping.ok_or(EINVAL)?;
        let mut st = self.state.lock();
        let q = &st.queues[st.queue(a.queue)?];
        if q.hwq.kring.is_some() {
            return Err(EPERM);
        }
        let id = q.hwq.id.ok_or(EINVAL)?;
        let context_id = st.contexts[st.context(q.context)?].ctx.id();
        if st.doorbells.iter().any(|d| d.queue == a.queue) {
            return Err(EBUSY);
        }
        let progress = q.hwq.fence.as_ref().map(|f| f.current.clone()).ok_or(EINVAL)?;
        let engine = q.engine;
        let (handle, share) = st.new_handle(&self.gpu.core, self.share_owner())?;
        st.doorbells.reserve(1, GFP_KERNEL_ACCOUNT)?;
        let db = self.gpu.doorbells.create(id, context_id, mapping)?;
        // Its progress is watched for hangs (ENG-01) while the doorbell exists.
        let watched = Watched {
            queue: id,
            context: context_id,
            engine,
            progress,
            last_queued: db.last_queued.clone(),
        };
        if let Err(e) = self.gpu.watch.add(watched) {
            self.gpu.doorbells.destroy(self.gpu.core.hw().ok().as_mut(), &db);
            return Err(e);
        }
        a.handle = handle;
        a.doorbell_offset = db.pgoffs[0] << mmu::PAGE_SHIFT;
        a.status_offset = db.pgoffs[1] << mmu::PAGE_SHIFT;
        a.last_queued_offset = db.pgoffs[2] << mmu::PAGE_SHIFT;
        st.doorbells.push(
            FileDoorbell {
                handle,
                _share: share,
                queue: a.queue,
                db,
            },
            GFP_KERNEL_ACCOUNT,
        )?;
        Ok(())
    }

    /// `DESTROY_DOORBELL`: disconnects it; its status and LastQueuedValue pages are freed with
    /// the process's last mapping of them.
    pub(super) fn destroy_doorbell(&self, handle: u32) -> Result {
        let mut st = self.state.lock();
        let i = st.doorbell(handle)?;
        let d = st.doorbells.remove(i).map_err(|_| EINVAL)?;
        self.gpu.watch.remove(d.db.queue_id);
        let mut hw = self.gpu.core.hw().ok();
        self.gpu.doorbells.destroy(hw.as_mut(), &d.db);
        Ok(())
    }

    /// `CONNECT_DOORBELL`.
    pub(super) fn connect_doorbell(&self, handle: u32) -> Result {
        let db = self.find_doorbell(handle)?;
        // An engine in F1 goes back to F0 before the connect (ENG-05).
        let engine = self.gpu.wake_for(db.queue_id)?;
        self.gpu.doorbells.connect(&db, &self.gpu.logs)?;
        if let Some(engine) = engine {
            self.gpu.watch.power_step(uapi_debug::POWER_STEP_CONNECT, engine);
        }
        let (queue, status) = (db.queue_id.raw(), u64::from(db.status.read32(0)));
        let connect = uapi_debug::TIMELINE_DOORBELL_CONNECT;
        self.gpu.logs.note_thread(uapi_debug::TIMELINE_DOORBELL, queue, 0, status, connect);
        Ok(())
    }

    /// `DISCONNECT_DOORBELL` (DB-17): `EINVAL` unless the status is RETRY or ABORT.
    pub(super) fn disconnect_doorbell(&self, a: &uapi::DisconnectDoorbell) -> Result {
        let status = match DoorbellStatus::try_from(a.status) {
            Ok(s @ (DoorbellStatus::DisconnectedRetry | DoorbellStatus::DisconnectedAbort)) => s,
            _ => return Err(EINVAL),
        };
        let db = self.find_doorbell(a.handle)?;
        let gpu = &self.gpu;
        gpu.doorbells.disconnect(&mut gpu.core.hw()?, &db, status);
        let (queue, disconnect) = (db.queue_id.raw(), uapi_debug::TIMELINE_DOORBELL_DISCONNECT);
        gpu.logs.note_thread(uapi_debug::TIMELINE_DOORBELL, queue, 0, status as u64, disconnect);
        Ok(())
    }

    /// `NOTIFY_WORK`.
    pub(super) fn notify_work(&self, handle: u32) -> Result {
        let db = self.find_doorbell(handle)?;
        self.gpu.doorbells.notify(&db);
        Ok(())
    }

    /// The doorbell `handle` of this file.
    fn find_doorbell(&self, handle: u32) -> Result<Arc<Doorbell>> {
        let st = self.state.lock();
        Ok(st.doorbells[st.doorbell(handle)?].db.clone())
    }
}
