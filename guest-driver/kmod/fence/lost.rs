// SPDX-License-Identifier: GPL-2.0

//! The fences lost work was going to signal, as the pollable waits and `sync_file` exports see
//! them ([`LostSignals`]): a snapshot of the records `Fences::abandon_lost_signals` keeps, taken
//! before the fence book's lock (the objects' lock is never taken under it), so those waits end
//! like the blocking waits the lost signals would have satisfied.

use kernel::prelude::*;

use super::{waits::Fences, window};
use crate::abi::ids::FenceHandle;

/// The fences lost work was going to signal, each with the highest value it named.
pub(crate) struct LostSignals {
    /// `(fence, highest value)` of every record.
    fences: KVec<(FenceHandle, u64)>,
    /// The device compares monitored fences' values in the 32-bit mode.
    wrap32: bool,
}

impl LostSignals {
    /// The records of `fences`' device now; none without memory (those waits then run to
    /// their deadline, as without a record).
    pub(crate) fn read(fences: &Fences) -> Self {
        let core = fences.core();
        Self {
            fences: core.objects().abandoned_all().unwrap_or_default(),
            wrap32: core.wrap32(),
        }
    }

    /// None recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.fences.is_empty()
    }

    /// Whether lost work was going to signal fence `handle` (`monitored`: a monitored fence,
    /// compared in the 32-bit mode on a device without 64-bit atomics) to `value` or past it.
    pub(crate) fn reach(&self, handle: FenceHandle, monitored: bool, value: u64) -> bool {
        let wrap32 = monitored && self.wrap32;
        self.fences
            .iter()
            .any(|&(h, v)| h == handle && window::reached(wrap32, v, value))
    }
}
