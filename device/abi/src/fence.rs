//! Fences: value arithmetic shared by the device, the module and the library, and the fence-log
//! buffer layout.
//!
//! A native fence has a CurrentValue and a MonitoredValue. A wait for V is satisfied once
//! CurrentValue ≥ V; the CPU must be interrupted for a signal only when the new CurrentValue is
//! above MonitoredValue, which is (lowest pending CPU wait − 1), or `u64::MAX` when nobody waits.
//! On a device without 64-bit atomics fence values are 32-bit and wrap: comparisons then hold
//! within a window of `u32::MAX / 2` around the last signaled value.

use core::mem::size_of;

/// MonitoredValue when no CPU waiter exists: no signal can exceed it.
pub const MONITORED_VALUE_NONE: u64 = u64::MAX;

/// Whether a wait for `wait_value` is satisfied by `current`.
pub const fn is_signaled(current: u64, wait_value: u64) -> bool {
    current >= wait_value
}

/// MonitoredValue for the lowest pending CPU wait value (`None` when nothing waits).
///
/// # Invariants
/// `needs_interrupt(c, monitored_value_for(Some(v)))` ⇔ `is_signaled(c, v)` for every `v ≥ 1`.
/// A wait for 0 is always satisfied and never needs an interrupt.
pub const fn monitored_value_for(lowest_pending_wait: Option<u64>) -> u64 {
    match lowest_pending_wait {
        Some(0) | None => MONITORED_VALUE_NONE,
        Some(v) => v - 1,
    }
}

/// Whether a signal to `current` must interrupt the CPU given `monitored`.
pub const fn needs_interrupt(current: u64, monitored: u64) -> bool {
    current > monitored
}

/// Half of the 32-bit value space: the window within which wrapped comparisons are valid.
pub const WRAP_WINDOW: u32 = u32::MAX / 2;

/// 32-bit mode: whether `current` satisfies a wait for `wait_value`, across wraparound.
///
/// # Invariants
/// Valid when both values lie within [`WRAP_WINDOW`] of each other.
pub const fn is_signaled32(current: u32, wait_value: u32) -> bool {
    current.wrapping_sub(wait_value) <= WRAP_WINDOW
}

/// 32-bit mode: whether a new signal or wait `value` is at or ahead of `last_signaled` by at
/// most the window (FEN-08); values outside it cannot be ordered and are refused.
pub const fn in_window32(last_signaled: u32, value: u32) -> bool {
    value.wrapping_sub(last_signaled) <= WRAP_WINDOW
}

/// 32-bit mode: the 64-bit value whose low half is `low`, nearest to `reference` (the last
/// known 64-bit value), so a 64-bit view keeps increasing across 32-bit wraparound.
pub const fn extend32(reference: u64, low: u32) -> u64 {
    let base = reference & !0xffff_ffff;
    let candidate = base | low as u64;
    let ref_low = reference as u32;
    if low.wrapping_sub(ref_low) <= WRAP_WINDOW {
        // `low` is at or after the reference: same epoch, or the next one if it wrapped.
        if (low as u64) < (ref_low as u64) {
            candidate.wrapping_add(1 << 32)
        } else {
            candidate
        }
    } else if (low as u64) > (ref_low as u64) {
        // `low` is before the reference and wrapped backwards: previous epoch.
        candidate.wrapping_sub(1 << 32)
    } else {
        candidate
    }
}

crate::wire_enum! {
    /// Fence kinds the driver registers with the device.
    pub enum FenceKind {
        /// Native fence, values in system memory (or MonitoredValue in VRAM when optimized).
        Default = 1 => "DEFAULT",
        /// Native fence, both values in VRAM with no CPU mapping.
        IntraGpu = 2 => "INTRA_GPU",
        /// Monitored (WDDM 2.0) fence: one value, always interrupts when an engine writes it.
        Monitored = 3 => "MONITORED",
    }
}

/// Size of one log buffer.
pub const LOG_BUFFER_SIZE: u64 = 4096;

/// Header of a fence-log buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogHeader {
    /// Index of the next entry the device will write (mod [`LOG_ENTRIES`]).
    pub first_free_entry_index: u32,
    /// Times the device wrapped past the end of the entries.
    pub wraparound_count: u32,
    /// [`LOG_ENTRIES`], written by the device when the buffer is set.
    pub entry_count: u32,
    /// [`LogKind`].
    pub kind: u32,
    /// Reserved.
    pub reserved: [u64; 6],
}
const _: () = assert!(size_of::<LogHeader>() == 64);

/// One fence-log entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogEntry {
    /// The submitter's fence handle from the packet.
    pub fence_handle: u64,
    /// Fence value signaled or waited for.
    pub value: u64,
    /// Waits: GPU time the wait was first seen by the engine; signals: 0.
    pub observed_gpu_timestamp: u64,
    /// GPU time the signal executed or the wait was unblocked.
    pub end_gpu_timestamp: u64,
    /// [`LogOperation`].
    pub operation: u32,
    /// Reserved.
    pub reserved0: u32,
    /// Reserved.
    pub reserved1: u64,
}
const _: () = assert!(size_of::<LogEntry>() == 48);

/// Entries in one log buffer.
pub const LOG_ENTRIES: u32 = ((LOG_BUFFER_SIZE as usize - size_of::<LogHeader>()) / size_of::<LogEntry>()) as u32;

/// Byte offset of entry `index` (free-running) in a log buffer.
pub const fn log_entry_offset(index: u32) -> u64 {
    size_of::<LogHeader>() as u64 + (index % LOG_ENTRIES) as u64 * size_of::<LogEntry>() as u64
}

/// The slot a free-running log index lands in.
pub const fn log_slot(index: u32) -> u32 {
    index % LOG_ENTRIES
}

/// A log's free-running position from its header: WraparoundCount × entries +
/// FirstFreeEntryIndex (the index the device writes next).
///
/// # Invariants
/// Increases by one for every entry the device writes, across `u32` wraparound.
pub const fn log_position(first_free_entry_index: u32, wraparound_count: u32) -> u32 {
    wraparound_count.wrapping_mul(LOG_ENTRIES).wrapping_add(first_free_entry_index % LOG_ENTRIES)
}

/// What a reader of a log can still read between its last position `read` and the log's
/// position `head` ([`log_position`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogUnread {
    /// The first index still in the buffer to read (read up to `head`, exclusive).
    pub from: u32,
    /// Entries written over before they were read (0 when the log moved backwards).
    pub lost: u32,
    /// Whether the device wrapped over unread entries, or the position moved backwards: either
    /// way some signals may have been missed and every wait must be re-examined (LOG-15).
    pub overflowed: bool,
}

/// The entries of a log still to read between `read` and `head`.
///
/// # Invariants
/// `from..head` never spans more than [`LOG_ENTRIES`]; `lost + (head - from) = head - read`
/// whenever the log moved forwards.
pub const fn log_unread(read: u32, head: u32) -> LogUnread {
    let new = head.wrapping_sub(read);
    if new <= LOG_ENTRIES {
        LogUnread { from: read, lost: 0, overflowed: false }
    } else if new > WRAP_WINDOW {
        // Moved backwards (a reset log or a hostile header): nothing of it can be trusted.
        LogUnread { from: head, lost: 0, overflowed: true }
    } else {
        LogUnread { from: head.wrapping_sub(LOG_ENTRIES), lost: new - LOG_ENTRIES, overflowed: true }
    }
}

/// Whether a free-running log `index` is at or after `cursor` (the next index a side will
/// assign), across `u32` wraparound: an index a caller chose that is ahead moves the cursor.
pub const fn log_index_at_or_after(index: u32, cursor: u32) -> bool {
    index.wrapping_sub(cursor) <= WRAP_WINDOW
}

crate::wire_enum! {
    /// The two log buffers of a hardware queue.
    pub enum LogKind {
        /// Wait log.
        Waits = 0 => "WAITS",
        /// Signal log.
        Signals = 1 => "SIGNALS",
    }
}

crate::wire_enum! {
    /// Operation recorded in a log entry.
    pub enum LogOperation {
        /// A signal executed (signal log).
        SignalExecuted = 1 => "SIGNAL_EXECUTED",
        /// A wait was unblocked (wait log).
        WaitUnblocked = 2 => "WAIT_UNBLOCKED",
        /// Verbose (LOG-20): the engine first met a wait, satisfied or not (wait log; written
        /// only while `regs::LOG_VERBOSE` is on, for a `FENCE_WAIT` carrying
        /// `packet::FENCE_WAIT_LOG_BEGIN`). `observed_gpu_timestamp` and
        /// `end_gpu_timestamp` are both that time; `value` the value waited for.
        WaitBegin = 3 => "WAIT_BEGIN",
    }
}

/// [`LogEntry::operation`] of an entry the device wrote empty: the `WAIT_BEGIN` slot a
/// `FENCE_WAIT` reserved while verbose logging was off. Readers skip it, as they skip every
/// operation they do not know.
pub const LOG_OPERATION_NONE: u32 = 0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitored_value_tracks_the_lowest_wait() {
        assert_eq!(monitored_value_for(None), u64::MAX);
        assert_eq!(monitored_value_for(Some(42)), 41);
        for v in [1u64, 42, u64::MAX] {
            let mv = monitored_value_for(Some(v));
            for c in [0, v - 1, v, v.saturating_add(1)] {
                assert_eq!(needs_interrupt(c, mv), is_signaled(c, v), "c={c} v={v}");
            }
        }
        assert!(!needs_interrupt(u64::MAX, MONITORED_VALUE_NONE));
    }

    #[test]
    fn wrapped_comparisons_hold_across_the_boundary() {
        assert!(is_signaled32(5, 0xffff_fff0));
        assert!(!is_signaled32(0xffff_fff0, 5));
        assert!(is_signaled32(7, 7));
        assert!(in_window32(0xffff_fff0, 5));
        assert!(!in_window32(0, 0x8000_0001));
        assert_eq!(extend32(0x1_ffff_fff0, 5), 0x2_0000_0005);
        assert_eq!(extend32(0x2_0000_0005, 0xffff_fff0), 0x1_ffff_fff0);
        assert_eq!(extend32(0x2_0000_0005, 9), 0x2_0000_0009);
    }

    #[test]
    fn log_entries_fill_the_page() {
        assert_eq!(LOG_ENTRIES, 84);
        assert_eq!(log_entry_offset(0), 64);
        assert_eq!(log_entry_offset(LOG_ENTRIES), 64);
        assert!(log_entry_offset(LOG_ENTRIES - 1) + 48 <= LOG_BUFFER_SIZE);
    }

    #[test]
    fn log_positions_and_unread_spans_survive_wraparound() {
        assert_eq!(log_position(5, 0), 5);
        assert_eq!(log_position(5, 2), 2 * LOG_ENTRIES + 5);
        assert_eq!(log_position(LOG_ENTRIES + 1, 0), 1);
        assert_eq!(log_slot(LOG_ENTRIES + 3), 3);
        assert_eq!(log_unread(10, 20), LogUnread { from: 10, lost: 0, overflowed: false });
        assert_eq!(log_unread(0, LOG_ENTRIES), LogUnread { from: 0, lost: 0, overflowed: false });
        assert_eq!(log_unread(0, LOG_ENTRIES + 5), LogUnread { from: 5, lost: 5, overflowed: true });
        assert_eq!(log_unread(u32::MAX - 1, LOG_ENTRIES + 1), LogUnread { from: 1, lost: 3, overflowed: true });
        assert_eq!(log_unread(50, 40), LogUnread { from: 40, lost: 0, overflowed: true });
        assert!(log_index_at_or_after(7, 7) && log_index_at_or_after(2, u32::MAX));
        assert!(!log_index_at_or_after(6, 7));
    }
}
