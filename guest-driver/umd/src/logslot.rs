//! Fence-log slots the library assigns (LOG-04, LOG-05).
//!
//! The module gives every hardware queue two 4 KiB logs, a wait log and a signal log of
//! [`LOG_ENTRIES`](belfry_abi::fence::LOG_ENTRIES) entries each, that no process can map
//! (LOG-02, LOG-03). The library cannot read them, but it decides where they advance: for every native-fence wait and signal packet
//! it puts in a queue's command stream — a [`CommandBuffer::wait_fence`] or
//! [`CommandBuffer::signal_fence`] packet, the `FENCE_WAIT`/`FENCE_SIGNAL` of
//! [`crate::Queue::wait_fence`]/[`crate::Queue::signal_fence`], and the progress signal closing
//! each user-mode submission — it takes that queue's next index of the right log and writes it,
//! with the fence's global handle, into the packet's `log_entry`/`log_handle` fields. Those
//! fields are Belfry's form of the reference's "command that tells the GPU to write a payload to
//! a given log entry" (LOG-05): the engine writes the entry when it executes the operation.
//!
//! Indices are free-running `u32`s, one counter per log, advancing by one per fence operation
//! in stream order (monotonic, LOG-04); the device writes index `i` at ring entry
//! `i % LOG_ENTRIES` (the abi's [`log_slot`]), so the 84-entry ring wraps on its own. There is no
//! back-pressure (LOG-17): an index may overwrite an entry the module has not read yet; the
//! module detects the overflow (LOG-15). A packet built with a caller's own [`LogSlot`] keeps
//! its index, and the counter moves past it. The counters start at 0 with each hardware queue
//! (a re-created or fallback queue has new logs). On a kernel-mode queue the module appends the
//! progress signal itself, logged at the signal log's next index: the library counts that index
//! per `SUBMIT` ([`LogCursor::skip`]) so that both agree.
//!
//! While verbose fence logging is on (LOG-20, as the library last learnt it: [`crate::Device::verbose_logging`]),
//! each wait packet the library logs takes two wait-log indices, the first for the device's
//! `WAIT_BEGIN` entry, and carries `packet::FENCE_WAIT_LOG_BEGIN`; `log_entry` names the first.
//!
//! [`CommandBuffer::wait_fence`]: crate::CommandBuffer::wait_fence
//! [`CommandBuffer::signal_fence`]: crate::CommandBuffer::signal_fence
//! [`LogSlot`]: crate::LogSlot
//! [`log_slot`]: belfry_abi::fence::log_slot

use core::mem::offset_of;

use belfry_abi::fence::{log_index_at_or_after, LogKind};
use belfry_abi::packet::{self, Opcode};

/// The next free-running index of each log of one hardware queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogCursor {
    next: [u32; 2],
}

impl LogCursor {
    /// A new queue's cursor: both logs at index 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The index the next operation logged in `kind` gets.
    pub fn next(&self, kind: LogKind) -> u32 {
        self.next[kind as usize]
    }

    /// Takes the next index of `kind`.
    pub fn take(&mut self, kind: LogKind) -> u32 {
        let index = self.next[kind as usize];
        self.next[kind as usize] = index.wrapping_add(1);
        index
    }

    /// Counts an index of `kind` someone else assigned: the module's progress signal of a
    /// kernel-mode `SUBMIT`.
    pub fn skip(&mut self, kind: LogKind) {
        self.take(kind);
    }

    /// Assigns the log slots of the fence packets of `bytes`, in stream order: a packet at a
    /// byte offset in `sites` gets the next index of its log; any other with an index of its own
    /// (a caller's `LogSlot`) moves the cursor past that index if it is ahead. Returns how many
    /// indices were assigned.
    pub fn assign(&mut self, bytes: &mut [u8], sites: &[u32]) -> usize {
        self.assign_verbose(bytes, sites, false)
    }

    /// [`LogCursor::assign`], and with `verbose` (LOG-20) a wait at a site takes two indices,
    /// the first for `WAIT_BEGIN`, and the `FENCE_WAIT_LOG_BEGIN` flag. Returns how many packets
    /// were assigned indices.
    pub fn assign_verbose(&mut self, bytes: &mut [u8], sites: &[u32], verbose: bool) -> usize {
        const ENTRY: usize = offset_of!(packet::FenceSignal, log_entry);
        const _: () = assert!(ENTRY == offset_of!(packet::FenceWait, log_entry));
        let mut assigned = 0;
        let mut at = 0usize;
        while let Some(h) = read32(bytes, at) {
            let dwords = packet::header_dwords(h) as usize; // CAST: at most 65535.
            if dwords == 0 {
                break;
            }
            let kind = match Opcode::try_from(packet::header_opcode(h)) {
                Ok(Opcode::FenceSignal) => Some(LogKind::Signals),
                Ok(Opcode::FenceWait) => Some(LogKind::Waits),
                _ => None,
            };
            if let (Some(kind), Some(index)) = (kind, read32(bytes, at + ENTRY)) {
                let begin = h & packet::FENCE_WAIT_LOG_BEGIN != 0;
                if u32::try_from(at).is_ok_and(|at| sites.contains(&at)) {
                    let index = self.take(kind);
                    bytes[at + ENTRY..at + ENTRY + 4].copy_from_slice(&index.to_le_bytes());
                    if verbose && kind == LogKind::Waits {
                        self.take(kind);
                        bytes[at..at + 4].copy_from_slice(&(h | packet::FENCE_WAIT_LOG_BEGIN).to_le_bytes());
                    }
                    assigned += 1;
                } else if index != packet::NO_LOG && log_index_at_or_after(index, self.next(kind)) {
                    let last = if begin { index.wrapping_add(1) } else { index };
                    self.next[kind as usize] = last.wrapping_add(1);
                }
            }
            at += dwords * 4;
        }
        assigned
    }
}

fn read32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
mod tests {
    use belfry_abi::fence::{log_slot, LOG_ENTRIES};
    use belfry_abi::ids::FenceHandle;

    use super::*;
    use crate::cmdbuf::{decode, CommandBuffer, LogSlot, Packet};

    /// (kind, index, handle) of every fence packet.
    fn slots(bytes: &[u8]) -> Vec<(LogKind, u32, u64)> {
        decode(bytes)
            .unwrap()
            .into_iter()
            .filter_map(|p| match p {
                Packet::FenceSignal(s) => Some((LogKind::Signals, s.log_entry, s.log_handle)),
                Packet::FenceWait(w) => Some((LogKind::Waits, w.log_entry, w.log_handle)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn each_fence_operation_takes_the_next_index_of_its_own_log() {
        let mut cb = CommandBuffer::new();
        cb.logged_wait(0x1000, 1, FenceHandle::new(11))
            .unwrap()
            .write32(0x2000, 5)
            .unwrap()
            .logged_signal(0x1008, 2, FenceHandle::new(12))
            .unwrap()
            .logged_wait(0x1010, 3, FenceHandle::new(13))
            .unwrap()
            .logged_signal(0x1018, 4, FenceHandle::new(14))
            .unwrap();
        let mut bytes = cb.as_bytes().to_vec();
        let mut cursor = LogCursor::new();
        assert_eq!(cursor.assign(&mut bytes, cb.log_sites()), 4);
        assert_eq!(
            slots(&bytes),
            [(LogKind::Waits, 0, 11), (LogKind::Signals, 0, 12), (LogKind::Waits, 1, 13), (LogKind::Signals, 1, 14)]
        );
        assert_eq!((cursor.next(LogKind::Waits), cursor.next(LogKind::Signals)), (2, 2));
        // A second buffer continues where the first stopped.
        let mut again = cb.as_bytes().to_vec();
        cursor.assign(&mut again, cb.log_sites());
        assert_eq!(slots(&again).iter().map(|s| s.1).collect::<Vec<_>>(), [2, 2, 3, 3]);
    }

    #[test]
    fn verbose_waits_reserve_their_wait_begin_entry() {
        let mut cb = CommandBuffer::new();
        cb.logged_wait(0x1000, 1, FenceHandle::new(11))
            .unwrap()
            .logged_signal(0x1008, 2, FenceHandle::new(12))
            .unwrap()
            .logged_wait(0x1010, 3, FenceHandle::new(13))
            .unwrap();
        let flagged = |bytes: &[u8]| -> Vec<bool> {
            decode(bytes)
                .unwrap()
                .into_iter()
                .filter_map(|p| match p {
                    Packet::FenceWait(w) => Some(w.header & packet::FENCE_WAIT_LOG_BEGIN != 0),
                    _ => None,
                })
                .collect()
        };
        let mut bytes = cb.as_bytes().to_vec();
        let mut cursor = LogCursor::new();
        assert_eq!(cursor.assign_verbose(&mut bytes, cb.log_sites(), true), 3);
        assert_eq!(slots(&bytes), [(LogKind::Waits, 0, 11), (LogKind::Signals, 0, 12), (LogKind::Waits, 2, 13)]);
        assert_eq!(flagged(&bytes), [true, true]);
        assert_eq!(cursor.next(LogKind::Waits), 4, "each wait took two entries");
        // Off again: one entry each, no flag.
        let mut again = cb.as_bytes().to_vec();
        cursor.assign(&mut again, cb.log_sites());
        assert_eq!(slots(&again).iter().map(|s| s.1).collect::<Vec<_>>(), [4, 1, 5]);
        assert_eq!(flagged(&again), [false, false]);
    }

    #[test]
    fn indices_are_monotonic_and_wrap_the_84_entry_ring() {
        let mut cb = CommandBuffer::new();
        cb.logged_signal(0x1000, 1, FenceHandle::new(7)).unwrap();
        let mut cursor = LogCursor::new();
        let mut seen = Vec::new();
        for _ in 0..2 * LOG_ENTRIES + 3 {
            let mut bytes = cb.as_bytes().to_vec();
            cursor.assign(&mut bytes, cb.log_sites());
            seen.push(slots(&bytes)[0].1);
        }
        assert!(seen.windows(2).all(|w| w[1] == w[0] + 1), "not monotonic: {seen:?}");
        assert_eq!(log_slot(seen[84]), 0);
        assert_eq!(log_slot(seen[85]), 1);
        assert_eq!(log_slot(seen[2 * 84 + 2]), 2);
        // The free-running index wraps at u32::MAX too (the device's header arithmetic wraps).
        let mut cursor = LogCursor { next: [0, u32::MAX] };
        let mut bytes = cb.as_bytes().to_vec();
        cursor.assign(&mut bytes, cb.log_sites());
        assert_eq!(slots(&bytes)[0].1, u32::MAX);
        assert_eq!(cursor.next(LogKind::Signals), 0);
    }

    #[test]
    fn caller_slots_and_unlogged_packets_keep_their_index_and_are_passed() {
        let mut cb = CommandBuffer::new();
        cb.fence_signal(0x1000, 1, Some(LogSlot { index: 9, handle: FenceHandle::new(3) }))
            .unwrap()
            .fence_wait(0x1000, 1, None)
            .unwrap()
            .logged_signal(0x1008, 2, FenceHandle::new(4))
            .unwrap()
            .fence_signal(0x1000, 1, Some(LogSlot { index: 2, handle: FenceHandle::new(3) }))
            .unwrap();
        let mut bytes = cb.as_bytes().to_vec();
        let mut cursor = LogCursor::new();
        assert_eq!(cursor.assign(&mut bytes, cb.log_sites()), 1);
        assert_eq!(
            slots(&bytes),
            [
                (LogKind::Signals, 9, 3),
                (LogKind::Waits, packet::NO_LOG, 0),
                (LogKind::Signals, 10, 4),
                (LogKind::Signals, 2, 3)
            ]
        );
        // An index behind the cursor does not move it back; NO_LOG moves nothing.
        assert_eq!((cursor.next(LogKind::Waits), cursor.next(LogKind::Signals)), (0, 11));
        cursor.skip(LogKind::Signals);
        assert_eq!(cursor.next(LogKind::Signals), 12);
    }
}
