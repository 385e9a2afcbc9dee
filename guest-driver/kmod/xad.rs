// SPDX-License-Identifier: GPL-2.0

//! One device's part in cross-adapter fences ([`Peer`]): the [`Adapter`] a fence's side holds
//! (what a change of the shared CurrentValue does on this device) and the list of the
//! cross-adapter fences open here, which the interrupt thread and CPU signals propagate.
//!
//! The propagation path (XAD-07..09, XAD-12, XAD-13): a device's engine signals a cross-adapter
//! fence → its MonitoredValue is 0, so the device posts a native-fence record and interrupts
//! (XAD-05) → that device's interrupt thread runs its own paths, then [`Peer::propagate`] → for
//! each fence whose CurrentValue moved, every other device's [`Adapter::changed`]: a
//! notification-only `NOTIFY_FENCE_CHANGED` if the fence is native there (its hardware queues
//! waiting on it are re-evaluated, nothing is written), the release of its blocking and eventfd
//! CPU waits, and of the kernel-mode work it holds behind the fence. A CPU signal
//! (`SIGNAL_FENCE`, XAD-08) and a software signal (`QUEUE_SIGNAL_FENCE`, written from the CPU
//! when its packet executes, XAD-13) end in the same propagation.

use kernel::{
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
};

use crate::{
    abi::ids::FenceHandle,
    fence::{
        cross::{self, Adapter, XFence},
        eventfd,
        log::Logs,
        syncfile,
        waits::Fences,
    },
    queue::kring::Held,
};

/// A device's side of the cross-adapter fences.
#[pin_data]
pub(crate) struct Peer {
    /// Its fences.
    fences: Arc<Fences>,
    /// Its logs (eventfd completion takes them).
    logs: Arc<Logs>,
    /// Its kernel-mode work held behind monitored-fence waits.
    held: Arc<Held>,
    /// The cross-adapter fences open here.
    #[pin]
    open: Mutex<KVec<Arc<XFence>>>,
}

impl Peer {
    /// The part of the device of `fences`: no cross-adapter fence yet.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(fences: Arc<Fences>, logs: Arc<Logs>, held: Arc<Held>) -> Result<Arc<Self>> {
        Arc::pin_init(
            try_pin_init!(Self {
                fences,
                logs,
                held,
                open <- new_mutex!(KVec::new()),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// After this device's interrupt thread or a CPU signal: propagates every cross-adapter
    /// fence open here whose CurrentValue moved. `reported`: the change was made or seen by this
    /// device itself (its own waiters are released by its own paths), so only the other
    /// devices are told; otherwise (a value the CPU wrote for a software signal) this device's
    /// side is told too.
    pub(crate) fn propagate(&self, reported: bool) {
        let mut open = KVec::new();
        {
            let list = self.open.lock();
            if list.is_empty() || open.reserve(list.len(), GFP_KERNEL).is_err() {
                return;
            }
            for x in list.iter() {
                // Room reserved above.
                let _ = open.push(x.clone(), GFP_KERNEL);
            }
        }
        let from = reported.then_some(&*self.fences);
        for x in open {
            x.propagate(from);
        }
    }
}

impl Adapter for Peer {
    fn fences(&self) -> &Arc<Fences> {
        &self.fences
    }

    fn changed(&self, global: FenceHandle, native: bool) {
        if native {
            // A device being unbound or lost answers ENODEV: its waiters are ending anyway.
            if let Err(e) = cross::notify_changed(&self.fences, global) {
                dev_dbg!(
                    self.fences.core().device(),
                    "cross-adapter notification of {:#x}: {:?}\n",
                    global.raw(),
                    e
                );
            }
        }
        self.fences.release_fence(global);
        eventfd::complete(&self.fences, &self.logs);
        self.held.release();
        syncfile::complete(&self.fences);
    }

    fn enlist(&self, x: &Arc<XFence>) -> Result {
        self.open.lock().push(x.clone(), GFP_KERNEL_ACCOUNT)?;
        Ok(())
    }

    fn delist(&self, x: &XFence) {
        self.open
            .lock()
            .retain(|o| !core::ptr::eq(Arc::as_ptr(o), core::ptr::from_ref(x)));
    }
}
