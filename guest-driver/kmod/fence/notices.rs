// SPDX-License-Identifier: GPL-2.0

//! What one propagation pass owes the other devices ([`Notices`]): the cross-adapter fences
//! whose CurrentValue moved, gathered per device, so that each device gets one notice however
//! many fences moved — at most one `NOTIFY_FENCE_CHANGED` (naming one of them: the device's
//! engines then re-read every queue parked on a cross-adapter fence, not only those on the
//! fence named) and one pass over its CPU waits, eventfd waits, held work and `sync_file`
//! exports. A fence that moves after a pass was gathered is propagated by a later pass (its
//! side is marked told only when this pass gathered it), so batching loses no wake-up.

use kernel::{prelude::*, sync::Arc};

use super::cross::Adapter;
use crate::abi::ids::FenceHandle;

/// One device's notice.
struct Notice {
    /// The device.
    adapter: Arc<dyn Adapter>,
    /// The native fence its `NOTIFY_FENCE_CHANGED` names, when one of its sides is to be told.
    notify: Option<FenceHandle>,
    /// The fences whose waits there are re-checked.
    fences: KVec<FenceHandle>,
    /// A fence could not be recorded (no memory): every wait there is re-checked.
    every: bool,
}

/// The notices of one propagation pass.
pub(crate) struct Notices {
    /// One per device.
    list: KVec<Notice>,
}

impl Notices {
    /// No notice yet.
    pub(crate) fn new() -> Self {
        Self { list: KVec::new() }
    }

    /// Makes room for `devices` more devices, so that [`Self::add`] of any of them cannot fail.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn reserve(&mut self, devices: usize) -> Result {
        self.list.reserve(devices, GFP_KERNEL)?;
        Ok(())
    }

    /// Adds fence `global` of `adapter`'s device (`notify`: a native side there that must be
    /// told). Whether this fence is the one the device's notification names (the first of the
    /// pass to need one), which the side counts in `XAD_INFO.notifications`.
    ///
    /// Needs room for a device not yet in the pass ([`Self::reserve`]); without it, the fence
    /// is left out.
    pub(crate) fn add(&mut self, adapter: &Arc<dyn Adapter>, global: FenceHandle, notify: bool) -> bool {
        let fences = Arc::as_ptr(adapter.fences());
        let i = match self
            .list
            .iter()
            .position(|n| core::ptr::eq(Arc::as_ptr(n.adapter.fences()), fences))
        {
            Some(i) => i,
            None => {
                let notice = Notice {
                    adapter: adapter.clone(),
                    notify: None,
                    fences: KVec::new(),
                    every: false,
                };
                if self.list.push(notice, GFP_KERNEL).is_err() {
                    return false;
                }
                self.list.len() - 1
            }
        };
        let n = &mut self.list[i];
        if !n.every && n.fences.push(global, GFP_KERNEL).is_err() {
            n.every = true;
        }
        let named = notify && n.notify.is_none();
        if named {
            n.notify = Some(global);
        }
        named
    }

    /// Gives each device its notice.
    pub(crate) fn deliver(self) {
        for n in self.list {
            let fences = (!n.every).then_some(&n.fences[..]);
            n.adapter.changed(n.notify, fences);
        }
    }
}
