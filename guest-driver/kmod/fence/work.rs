// SPDX-License-Identifier: GPL-2.0

//! The native-fence records the hard interrupt handler saw, kept for the interrupt thread
//! ([`super::irqpath`]): exact records (a fence handle, IRQ-02/08), per-queue records
//! (IRQ-09/10), NULL records (IRQ-04/05/11, or too many records of a kind) and whether the
//! monitored-fence waits must be looked at (a monitored-fence or `NOTIFY` record, or a record
//! with EvaluateLegacyMonitoredFences, IRQ-06). Pure `core` code, compiled into the module and
//! into the host crate `belfry-kmod-host`, whose tests run it.

use crate::abi::{
    ids::{FenceHandle, QueueId},
    irq as abi_irq,
};

/// Records of one kind kept per batch; more make the batch a scan of every wait.
const MAX_RECORDS: usize = 16;

/// Native-fence records seen by the hard interrupt handler, for the interrupt thread.
#[derive(Default)]
pub(crate) struct FenceWork {
    /// Fences named by exact records.
    pub(crate) exact: [FenceHandle; MAX_RECORDS],
    /// Entries of `exact` in use.
    pub(crate) n_exact: usize,
    /// (queue, signaled value) of per-queue records.
    pub(crate) per_queue: [(QueueId, u64); MAX_RECORDS],
    /// Entries of `per_queue` in use.
    pub(crate) n_per_queue: usize,
    /// A NULL record (or too many records): examine every wait.
    pub(crate) null: bool,
    /// A record asked for the legacy (monitored-fence) waits too.
    pub(crate) legacy: bool,
    /// A monitored-fence or NOTIFY record: examine the monitored-fence waits.
    pub(crate) monitored: bool,
    /// Records by form, for `IRQ_DEBUG`.
    pub(crate) counts: [u64; 3],
}

impl FenceWork {
    /// Notes a native-fence record naming `fence` (0: none), `queue` (or `abi_irq::NONE`) and
    /// `value`, with `detail` bits.
    pub(crate) fn native(&mut self, fence: u64, queue: u32, value: u64, detail: u32) {
        if fence != 0 {
            self.counts[0] += 1;
            match self.exact.get_mut(self.n_exact) {
                Some(slot) => {
                    *slot = FenceHandle::new(fence);
                    self.n_exact += 1;
                }
                None => self.null = true,
            }
        } else if queue != abi_irq::NONE && detail & abi_irq::DETAIL_PER_QUEUE != 0 {
            self.counts[1] += 1;
            match self.per_queue.get_mut(self.n_per_queue) {
                Some(slot) => {
                    *slot = (QueueId::new(queue), value);
                    self.n_per_queue += 1;
                }
                None => self.null = true,
            }
        } else {
            self.counts[2] += 1;
            self.null = true;
        }
        if detail & abi_irq::DETAIL_EVALUATE_LEGACY != 0 {
            self.legacy = true;
        }
    }

    /// Whether the interrupt thread has something to do.
    pub(crate) fn pending(&self) -> bool {
        self.n_exact > 0 || self.n_per_queue > 0 || self.null || self.monitored
    }

    /// The fences of the exact records.
    pub(crate) fn exact(&self) -> &[FenceHandle] {
        self.exact.get(..self.n_exact).unwrap_or(&[])
    }

    /// The per-queue records.
    pub(crate) fn per_queue(&self) -> &[(QueueId, u64)] {
        self.per_queue.get(..self.n_per_queue).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_kept_by_form() {
        let mut w = FenceWork::default();
        assert!(!w.pending());
        w.native(7, abi_irq::NONE, 1, 0);
        w.native(0, 3, 9, abi_irq::DETAIL_PER_QUEUE);
        assert!(w.pending());
        assert_eq!(w.exact(), &[FenceHandle::new(7)]);
        assert_eq!(w.per_queue(), &[(QueueId::new(3), 9)]);
        assert!(!w.null && !w.legacy);
        // No fence and no per-queue detail: a NULL record, a scan of every wait.
        w.native(0, 3, 9, 0);
        assert!(w.null);
        assert_eq!(w.counts, [1, 1, 1]);
    }

    #[test]
    fn too_many_records_become_a_scan() {
        let mut w = FenceWork::default();
        for fence in 1..=MAX_RECORDS as u64 {
            w.native(fence, abi_irq::NONE, 0, 0);
        }
        assert!(!w.null);
        w.native(99, abi_irq::NONE, 0, 0);
        assert!(w.null);
        assert_eq!(w.exact().len(), MAX_RECORDS);
    }

    #[test]
    fn legacy_detail_asks_for_monitored_waits() {
        let mut w = FenceWork::default();
        w.native(0, abi_irq::NONE, 0, abi_irq::DETAIL_EVALUATE_LEGACY);
        assert!(w.legacy && w.null);
    }
}
