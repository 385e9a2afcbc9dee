// SPDX-License-Identifier: GPL-2.0

//! The native-fence records the hard interrupt handler saw, kept for the interrupt thread
//! ([`super::irqpath`]): exact records (a fence handle, IRQ-02/08), per-queue records
//! (IRQ-09/10), queue-array records (IRQ-13: the union of the queues they name), NULL records
//! (IRQ-04/05/11, or too many records of a kind) and whether the
//! monitored-fence waits must be looked at (a monitored-fence or `NOTIFY` record, or a record
//! with EvaluateLegacyMonitoredFences, IRQ-06); and which per-queue records the signal-log
//! entries the thread read explain ([`FenceWork::unexplained`]). Pure `core` code, compiled into
//! the module and into the host crate `belfry-kmod-host`, whose tests run it.

use crate::abi::{
    ids::{FenceHandle, QueueId},
    irq as abi_irq, packet,
};

/// A per-queue record (IRQ-09): the queue whose signal log to read, the value signaled and the
/// free-running index of that signal's entry in the log (`packet::NO_LOG` when the log does not
/// record it: the signal was not logged, or logged under another fence's handle).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PerQueueRecord {
    /// The queue that signaled.
    pub(crate) queue: QueueId,
    /// The value signaled.
    pub(crate) value: u64,
    /// The signal's entry in the queue's signal log, or `packet::NO_LOG`.
    pub(crate) index: u32,
}

/// A signal-log entry the interrupt thread read: its queue, the fence handle as logged (the
/// submitter's word), the value and its free-running index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LoggedSignal {
    /// The queue whose log holds it.
    pub(crate) queue: QueueId,
    /// The fence handle as logged.
    pub(crate) handle: FenceHandle,
    /// The value signaled.
    pub(crate) value: u64,
    /// Its free-running index in the log.
    pub(crate) index: u32,
    /// The queue's context may name the logged fence (one of its fences, or the queue's
    /// progress fence): only such an entry may release a wait on its value alone.
    pub(crate) nameable: bool,
}

/// Records of one kind kept per batch; more make the batch a scan of every wait.
const MAX_RECORDS: usize = 16;

/// Native-fence records seen by the hard interrupt handler, for the interrupt thread.
#[derive(Default)]
pub(crate) struct FenceWork {
    /// Fences named by exact records.
    pub(crate) exact: [FenceHandle; MAX_RECORDS],
    /// Entries of `exact` in use.
    pub(crate) n_exact: usize,
    /// Per-queue records.
    pub(crate) per_queue: [PerQueueRecord; MAX_RECORDS],
    /// Entries of `per_queue` in use.
    pub(crate) n_per_queue: usize,
    /// Queues named by queue-array records (each once).
    pub(crate) queues: [QueueId; MAX_RECORDS],
    /// Entries of `queues` in use.
    pub(crate) n_queues: usize,
    /// A NULL record (or too many records): examine every wait.
    pub(crate) null: bool,
    /// A record asked for the legacy (monitored-fence) waits too.
    pub(crate) legacy: bool,
    /// A monitored-fence or NOTIFY record: examine the monitored-fence waits.
    pub(crate) monitored: bool,
    /// Records by form (exact, per-queue, NULL, queue-array), for `IRQ_DEBUG`.
    pub(crate) counts: [u64; 4],
}

impl FenceWork {
    /// Notes a native-fence record naming `fence` (0: none), `queue` (or `abi_irq::NONE`),
    /// `value` and `address` (a per-queue record's log index), with `detail` bits.
    pub(crate) fn native(&mut self, fence: u64, queue: u32, value: u64, address: u64, detail: u32) {
        let record = abi_irq::InterruptRecord {
            kind: abi_irq::RecordKind::NativeFenceSignaled as u32,
            queue,
            fence,
            value,
            address,
            detail,
            ..Default::default()
        };
        if let Some((ids, n)) = abi_irq::queue_array(&record) {
            self.counts[3] += 1;
            for id in ids.iter().take(n).map(|&q| QueueId::new(q)) {
                if self.queues().contains(&id) {
                    continue;
                }
                match self.queues.get_mut(self.n_queues) {
                    Some(slot) => {
                        *slot = id;
                        self.n_queues += 1;
                    }
                    None => self.null = true,
                }
            }
            if n == 0 {
                self.null = true;
            }
        } else if fence != 0 {
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
                    // A log index beyond 32 bits names no entry.
                    let index = u32::try_from(address).unwrap_or(packet::NO_LOG);
                    *slot = PerQueueRecord { queue: QueueId::new(queue), value, index };
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
        self.n_exact > 0 || self.n_per_queue > 0 || self.n_queues > 0 || self.null || self.monitored
    }

    /// The queues the queue-array records named.
    pub(crate) fn queues(&self) -> &[QueueId] {
        self.queues.get(..self.n_queues).unwrap_or(&[])
    }

    /// The newest value the entries `signaled` log for fence `handle` that may release a wait
    /// on their word alone (IRQ-13): entries whose queue's context may name the fence. `None`
    /// when no such entry names it.
    pub(crate) fn logged_value(signaled: &[LoggedSignal], handle: FenceHandle) -> Option<u64> {
        signaled.iter().filter(|e| e.nameable && e.handle == handle).map(|e| e.value).reduce(|a, b| {
            if crate::abi::fence::is_signaled(b, a) {
                b
            } else {
                a
            }
        })
    }

    /// The fences of the exact records.
    pub(crate) fn exact(&self) -> &[FenceHandle] {
        self.exact.get(..self.n_exact).unwrap_or(&[])
    }

    /// The per-queue records.
    pub(crate) fn per_queue(&self) -> &[PerQueueRecord] {
        self.per_queue.get(..self.n_per_queue).unwrap_or(&[])
    }

    /// Whether the waits on fence `handle` are the per-queue records' to release (IRQ-10): an
    /// entry just read from the log of a queue a record names names it, whether or not that
    /// entry's signal raised a record of its own.
    pub(crate) fn names(&self, signaled: &[LoggedSignal], handle: FenceHandle) -> bool {
        signaled.iter().any(|e| e.handle == handle && self.per_queue().iter().any(|r| r.queue == e.queue))
    }

    /// How many per-queue records the entries just read (`signaled`) do not explain. A record
    /// is explained only by its own signal's entry — the one at its log index, with its value —
    /// never by another entry of its queue with the same value (an entry of another fence left
    /// unread because that signal interrupted nobody, say): for an unexplained record the
    /// fence that moved is unknown and every wait must be examined.
    pub(crate) fn unexplained(&self, signaled: &[LoggedSignal]) -> usize {
        self.per_queue()
            .iter()
            .filter(|r| {
                r.index == packet::NO_LOG
                    || !signaled.iter().any(|e| e.queue == r.queue && e.index == r.index && e.value == r.value)
            })
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_kept_by_form() {
        let mut w = FenceWork::default();
        assert!(!w.pending());
        w.native(7, abi_irq::NONE, 1, 0, 0);
        w.native(0, 3, 9, 4, abi_irq::DETAIL_PER_QUEUE);
        assert!(w.pending());
        assert_eq!(w.exact(), &[FenceHandle::new(7)]);
        let record = PerQueueRecord { queue: QueueId::new(3), value: 9, index: 4 };
        assert_eq!(w.per_queue(), &[record]);
        assert!(!w.null && !w.legacy);
        // No fence and no per-queue detail: a NULL record, a scan of every wait.
        w.native(0, 3, 9, 0, 0);
        assert!(w.null);
        assert_eq!(w.counts, [1, 1, 1, 0]);
    }

    #[test]
    fn too_many_records_become_a_scan() {
        let mut w = FenceWork::default();
        for fence in 1..=MAX_RECORDS as u64 {
            w.native(fence, abi_irq::NONE, 0, 0, 0);
        }
        assert!(!w.null);
        w.native(99, abi_irq::NONE, 0, 0, 0);
        assert!(w.null);
        assert_eq!(w.exact().len(), MAX_RECORDS);
    }

    #[test]
    fn legacy_detail_asks_for_monitored_waits() {
        let mut w = FenceWork::default();
        w.native(0, abi_irq::NONE, 0, 0, abi_irq::DETAIL_EVALUATE_LEGACY);
        assert!(w.legacy && w.null);
    }

    /// A signal-log entry of queue 3.
    fn logged(handle: u64, value: u64, index: u32) -> LoggedSignal {
        LoggedSignal { queue: QueueId::new(3), handle: FenceHandle::new(handle), value, index, nameable: true }
    }

    #[test]
    fn a_per_queue_record_is_explained_by_its_own_entry() {
        let mut w = FenceWork::default();
        w.native(0, 3, 5, 7, abi_irq::DETAIL_PER_QUEUE);
        assert_eq!(w.unexplained(&[logged(0x20, 5, 7)]), 0);
        assert!(w.names(&[logged(0x20, 5, 7)], FenceHandle::new(0x20)));
        // Its entry not read in this pass (read earlier, by READ_TIMELINE say): a scan.
        assert_eq!(w.unexplained(&[]), 1);
        // The same index with another value is a later signal's entry: a scan.
        assert_eq!(w.unexplained(&[logged(0x20, 6, 7)]), 1);
        // Entries of another queue explain nothing, and their fences are not its to release.
        let other = LoggedSignal { queue: QueueId::new(4), ..logged(0x20, 5, 7) };
        assert_eq!(w.unexplained(&[other]), 1);
        assert!(!w.names(&[other], FenceHandle::new(0x20)));
    }

    /// The interleaving of a multi-fence wait on the per-queue device: a user-mode queue's
    /// progress signal to 2 was logged at index 5 while nobody waited on progress (no record,
    /// its entry left unread); later one buffer of that queue signals fence A to 2 without a
    /// log entry and the progress fence to 3 at index 6, both waited on. The record of A's
    /// signal carries value 2 and no log index: the progress fence's old entry, value 2 too,
    /// must not pass for it, or A's wait is never examined (the progress wait's release hides
    /// it from the "released nothing" fallback as well).
    #[test]
    fn an_unlogged_signal_is_not_explained_by_another_fences_entry_of_the_same_value() {
        let (a, progress) = (0x30, 0x40);
        let mut w = FenceWork::default();
        w.native(0, 3, 2, u64::from(packet::NO_LOG), abi_irq::DETAIL_PER_QUEUE);
        w.native(0, 3, 3, 6, abi_irq::DETAIL_PER_QUEUE);
        let read = [logged(progress, 2, 5), logged(progress, 3, 6)];
        assert_eq!(w.unexplained(&read), 1, "A's record must make the pass a scan");
        assert!(w.names(&read, FenceHandle::new(progress)));
        assert!(!w.names(&read, FenceHandle::new(a)));
        // A's signal logged at 7 (under A's handle): explained, no scan.
        let mut logged_a = FenceWork::default();
        logged_a.native(0, 3, 2, 7, abi_irq::DETAIL_PER_QUEUE);
        logged_a.native(0, 3, 3, 6, abi_irq::DETAIL_PER_QUEUE);
        let read = [logged(progress, 2, 5), logged(progress, 3, 6), logged(a, 2, 7)];
        assert_eq!(logged_a.unexplained(&read), 0);
        assert!(logged_a.names(&read, FenceHandle::new(a)));
    }

    #[test]
    fn queue_array_records_name_each_queue_once() {
        let mut w = FenceWork::default();
        let r = abi_irq::queue_array_record(0, &[3, 4]).unwrap();
        w.native(r.fence, r.queue, r.value, r.address, r.detail);
        let r = abi_irq::queue_array_record(1, &[4, 0]).unwrap();
        w.native(r.fence, r.queue, r.value, r.address, r.detail);
        assert!(w.pending() && !w.null);
        assert_eq!(w.queues(), &[QueueId::new(3), QueueId::new(4), QueueId::new(0)]);
        assert_eq!(w.counts, [0, 0, 0, 2]);
        assert_eq!(w.n_exact, 0, "the array is not a fence handle");
    }

    #[test]
    fn logged_values_come_only_from_entries_that_may_name_the_fence() {
        let mut e = [logged(0x20, 5, 1), logged(0x20, 9, 2), logged(0x30, 4, 3)];
        assert_eq!(FenceWork::logged_value(&e, FenceHandle::new(0x20)), Some(9));
        assert_eq!(FenceWork::logged_value(&e, FenceHandle::new(0x40)), None);
        e[1].nameable = false;
        assert_eq!(FenceWork::logged_value(&e, FenceHandle::new(0x20)), Some(5));
    }
}
