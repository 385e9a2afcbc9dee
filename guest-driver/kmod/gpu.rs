// SPDX-License-Identifier: GPL-2.0

//! The top of the domain layer: [`Gpu`], the domain objects of one device side by side (the
//! core, its fences and fence logs, its doorbells, its kernel rings' registry), and the few
//! sequences that span them (a CPU signal: the store or device update, the GPU work held
//! behind it, the eventfd waits it satisfies). The interrupt layer and the front end hold a
//! [`Gpu`]; nothing below knows it.

use kernel::{prelude::*, sync::Arc};

use crate::abi::{ids::ContextId, irq, uapi};

use crate::{
    fence::{eventfd, log::Logs, object::CpuPlace, waits::Fences, window},
    hw::core::Core,
    mm::Mm,
    queue::{build::QueueEnv, doorbell::Doorbells, kring::Held},
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
    /// Doorbells.
    pub(crate) doorbells: Arc<Doorbells>,
    /// Kernel rings holding work, pending software signals.
    pub(crate) held: Arc<Held>,
    /// The video memory manager.
    pub(crate) mm: Arc<Mm>,
}

impl Gpu {
    /// The domain objects of the device of `core`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(core: &Arc<Core>) -> Result<Self> {
        let fences = Fences::new(core.clone())?;
        Ok(Self {
            core: core.clone(),
            logs: Logs::new(core.clone())?,
            doorbells: Doorbells::new(core.clone())?,
            held: Held::new(fences.clone())?,
            mm: Mm::new(core)?,
            fences,
        })
    }

    /// What building and destroying queues needs.
    pub(crate) fn queue_env(&self) -> QueueEnv<'_> {
        QueueEnv {
            fences: &self.fences,
            logs: &self.logs,
            held: &self.held,
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
        self.logs.note_thread(uapi::TIMELINE_CPU_SIGNAL, irq::NONE, global.raw(), value, 0);
        if *monitored {
            let wrap32 = self.core.wrap32();
            if !window::in_window(wrap32, current.read64(*offset), value, true) {
                return Err(ERANGE);
            }
            self.fences.store_monitored(current, *offset, value);
            self.held.release();
        } else {
            self.fences.signal_fence(*global, value)?;
        }
        eventfd::complete(&self.fences, &self.logs);
        Ok(())
    }

    /// A CPU wait (`WAIT_FENCE`, `WAIT_PROGRESS`): [`Fences::wait_fence`], with its start and
    /// end (the errno, 0 when reached) on the timeline as the calling thread's.
    ///
    /// # Errors
    ///
    /// Those of [`Fences::wait_fence`].
    pub(crate) fn wait(
        &self,
        place: &CpuPlace,
        value: u64,
        timeout_ms: u32,
        lost: Option<ContextId>,
    ) -> Result {
        let (global, monitored, current, offset) = place;
        let logs = &self.logs;
        logs.note_thread(uapi::TIMELINE_CPU_WAIT_START, irq::NONE, global.raw(), value, 0);
        let result =
            self.fences.wait_fence(*global, *monitored, current, *offset, value, timeout_ms, lost);
        let errno = result.as_ref().err().map_or(0, |e| u64::from(e.to_errno().unsigned_abs()));
        logs.note_thread(uapi::TIMELINE_CPU_WAIT_END, irq::NONE, global.raw(), value, errno);
        result
    }
}
