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
//! when its packet executes, XAD-13) end in the same propagation. With peer signals (XAD-15,
//! `fence::peers`) a GPU signal's propagation only releases the CPU waits of the devices
//! taking part: their GPUs were woken by the signalling GPU.

use kernel::{
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
};

use crate::{
    abi::ids::FenceHandle,
    fence::{
        cross::{self, Adapter, Notices, XFence},
        eventfd,
        log::Logs,
        peers::PeerSignals,
        syncfile,
        waits::Fences,
    },
    queue::kring::Held,
};

/// What moved a cross-adapter fence's CurrentValue, as [`Peer::propagate`] learns it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// `SIGNAL_FENCE` on this device.
    CpuSignal,
    /// Fence records of this device's interrupt (a GPU signal, XAD-05).
    FenceRecords,
    /// A software signal written from the CPU in this device's interrupt thread (XAD-13).
    SoftwareSignal,
}

/// A device's side of the cross-adapter fences.
#[pin_data]
pub(crate) struct Peer {
    /// Its fences.
    fences: Arc<Fences>,
    /// Its logs (eventfd completion takes them).
    logs: Arc<Logs>,
    /// Its kernel-mode work held behind monitored-fence waits.
    held: Arc<Held>,
    /// Its part in peer signals (XAD-15).
    peers: Arc<PeerSignals>,
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
    pub(crate) fn new(
        fences: Arc<Fences>,
        logs: Arc<Logs>,
        held: Arc<Held>,
        peers: Arc<PeerSignals>,
    ) -> Result<Arc<Self>> {
        Arc::pin_init(
            try_pin_init!(Self {
                fences,
                logs,
                held,
                peers,
                open <- new_mutex!(KVec::new()),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// After this device's interrupt thread or a CPU signal: propagates every cross-adapter
    /// fence open here whose CurrentValue moved. A CPU signal or fence records: the change was
    /// made or seen by this device itself (its own waiters are released by its own paths), so
    /// only the other devices are told; a software signal (a value the CPU wrote in the
    /// interrupt thread) tells this device's side too. Fence records of a device taking part
    /// in peer signals leave the notification of the devices taking part to its GPU's
    /// announcements (XAD-15).
    pub(crate) fn propagate(&self, change: Change) {
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
        let from = (change != Change::SoftwareSignal).then_some(&*self.fences);
        let announced = change == Change::FenceRecords && self.peers.active();
        let mut notices = Notices::new();
        for x in open {
            x.propagate(from, announced, &mut notices);
        }
        notices.deliver();
    }
}

impl Adapter for Peer {
    fn fences(&self) -> &Arc<Fences> {
        &self.fences
    }

    fn changed(&self, notify: Option<FenceHandle>, fences: Option<&[FenceHandle]>) {
        if let Some(global) = notify {
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
        self.fences.release_fences(fences);
        eventfd::complete(&self.fences, &self.logs);
        self.held.release();
        syncfile::complete(&self.fences);
    }

    fn peer_signals(&self) -> bool {
        self.peers.active()
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
