//! Interrupt vectors and causes.
//!
//! Each cause has a bit in the interrupt block (`INT_RAWSTAT`/`INT_CLEAR`/`INT_MASK`/`INT_STATUS`,
//! see [`super::regs`]) and a default MSI-X vector. A device configured with fewer vectors
//! than [`VECTOR_COUNT`] folds the missing ones onto vector 0 ([`vector_for`]).

/// Vector for mailbox completions.
pub const VECTOR_MAILBOX: u16 = 0;
/// Vector for fence-signaled interrupts (native and monitored).
pub const VECTOR_FENCE: u16 = 1;
/// Vector for engine state changes (F1 transition, hang).
pub const VECTOR_ENGINE: u16 = 2;
/// Vector for faults (GPU page faults, malformed work).
pub const VECTOR_FAULT: u16 = 3;
/// Number of vectors with a dedicated cause; the default MSI-X vector count.
pub const VECTOR_COUNT: u16 = 4;

/// Interrupt cause bits, as laid out in `INT_RAWSTAT`, `INT_CLEAR`, `INT_MASK` and `INT_STATUS`.
pub mod cause {
    /// A mailbox command completed.
    pub const MAILBOX: u32 = 1 << 0;
    /// A native fence crossed its MonitoredValue.
    pub const NATIVE_FENCE: u32 = 1 << 1;
    /// A monitored (legacy) fence was written by an engine.
    pub const MONITORED_FENCE: u32 = 1 << 2;
    /// An engine changed state (TransitionToF1, Hung).
    pub const ENGINE_STATE: u32 = 1 << 3;
    /// A context faulted.
    pub const FAULT: u32 = 1 << 4;
    /// Every defined cause.
    pub const ALL: u32 = MAILBOX | NATIVE_FENCE | MONITORED_FENCE | ENGINE_STATE | FAULT;
}

/// Default vector of the cause bit `cause` on a device with `vectors` MSI-X vectors.
///
/// # Invariants
/// The result is always `< vectors` when `vectors > 0`; causes without a dedicated vector and
/// unknown bits use vector 0.
pub const fn vector_for(cause: u32, vectors: u16) -> u16 {
    let v = if cause & self::cause::NATIVE_FENCE != 0 || cause & self::cause::MONITORED_FENCE != 0 {
        VECTOR_FENCE
    } else if cause & self::cause::ENGINE_STATE != 0 {
        VECTOR_ENGINE
    } else if cause & self::cause::FAULT != 0 {
        VECTOR_FAULT
    } else {
        VECTOR_MAILBOX
    };
    if v < vectors {
        v
    } else {
        VECTOR_MAILBOX
    }
}

/// "No queue" / "no fence" in interrupt records: the driver must scan.
pub const NONE: u32 = u32::MAX;

/// Kinds of [`InterruptRecord`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// Native fence signaled: `fence` names it (exact form, one record per fence of a batch),
    /// or `fence == 0` asks the driver to scan all native-fence waits (NULL array); in the
    /// optimized form `queue` names the hardware queue whose log to read (or [`NONE`]), `value`
    /// the value signaled and `address` the free-running index of that signal's entry in the
    /// queue's signal log — `packet::NO_LOG` when the log does not record this fence's signal
    /// (not logged, no signal log, or logged under another handle): only that entry explains
    /// the record, another with the same value may name another fence.
    NativeFenceSignaled = 1,
    /// A monitored fence was written by an engine: `address` is its GPU VA in `context`.
    MonitoredFenceSignaled = 2,
    /// Engine state change: `engine`, `detail` = `engine::EngineState`, `queue` if hung.
    EngineState = 3,
    /// Context fault: `context`, `queue`, `address` (faulting VA), `detail` = `engine::FaultReason`.
    ContextFault = 4,
    /// A `NOTIFY` packet: `queue`, `value` = token.
    Notify = 5,
}

/// `detail` bit of a [`RecordKind::NativeFenceSignaled`] record: also evaluate legacy
/// (monitored) fence waits.
pub const DETAIL_EVALUATE_LEGACY: u32 = 1 << 0;
/// `detail` bit of a [`RecordKind::NativeFenceSignaled`] record: the optimized per-queue form.
pub const DETAIL_PER_QUEUE: u32 = 1 << 1;

/// One interrupt record, written by the device to the interrupt ring in guest memory before
/// it raises the vector, so the handler reads causes from memory, not registers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InterruptRecord {
    /// [`RecordKind`].
    pub kind: u32,
    /// Engine index, or [`NONE`].
    pub engine: u32,
    /// Hardware queue id, or [`NONE`].
    pub queue: u32,
    /// Context id, or [`NONE`].
    pub context: u32,
    /// Global fence handle (0: none/scan all).
    pub fence: u64,
    /// Fence value, token or 0.
    pub value: u64,
    /// GPU VA (faults, monitored fences), a per-queue native-fence record's log index, or 0.
    pub address: u64,
    /// Kind-specific detail bits.
    pub detail: u32,
    /// Sequence number of this record (free-running), for the driver to detect gaps.
    pub seq: u32,
}
const _: () = assert!(core::mem::size_of::<InterruptRecord>() == 48);

/// Header of the interrupt ring (at its base; records follow at [`RECORDS_OFFSET`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InterruptRingHeader {
    /// Next record index the device writes (free-running); written by the device.
    pub write_index: u32,
    /// Next record index the driver reads (free-running); written by the driver, which then
    /// writes `INT_CLEAR` (the device reads it again on that write).
    pub read_index: u32,
    /// Records the device could not write because the ring was full; it then writes a
    /// scan-all record (and each queue's newest dropped NOTIFY) at its next record write or the
    /// driver's next `INT_CLEAR`, whichever first finds room.
    pub overflows: u32,
    /// Reserved.
    pub reserved0: u32,
    /// Reserved.
    pub reserved1: [u64; 6],
}
const _: () = assert!(core::mem::size_of::<InterruptRingHeader>() == 64);

/// Byte offset of the first record after the ring header.
pub const RECORDS_OFFSET: u64 = 64;
/// Byte offset of [`InterruptRingHeader::write_index`].
pub const WRITE_INDEX_OFFSET: u64 = 0;
/// Byte offset of [`InterruptRingHeader::read_index`].
pub const READ_INDEX_OFFSET: u64 = 4;
/// Byte offset of [`InterruptRingHeader::overflows`].
pub const OVERFLOWS_OFFSET: u64 = 8;

/// Byte offset, from the ring's base, of the record at free-running `index` in a ring of
/// `entries` records (0 entries: the first record's place).
pub const fn record_offset(index: u32, entries: u32) -> u64 {
    let slot = if entries == 0 { 0 } else { index % entries };
    RECORDS_OFFSET + slot as u64 * core::mem::size_of::<InterruptRecord>() as u64
}

/// Whether the device may write one more record: fewer than `entries` are unread. A device
/// with no room counts the record in [`InterruptRingHeader::overflows`] and owes a scan-all
/// record.
///
/// # Invariants
/// Correct across `u32` wraparound of both indexes.
pub const fn has_room(write_index: u32, read_index: u32, entries: u32) -> bool {
    write_index.wrapping_sub(read_index) < entries
}

/// Where a driver that has read up to `read_index` resumes: `read_index`, or, if the device
/// claims more unread records than the ring holds (impossible for a healthy device), the oldest
/// record that can still be there.
pub const fn resume_index(write_index: u32, read_index: u32, entries: u32) -> u32 {
    if write_index.wrapping_sub(read_index) > entries {
        write_index.wrapping_sub(entries)
    } else {
        read_index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_header_offsets_match_the_layout() {
        assert_eq!(core::mem::offset_of!(InterruptRingHeader, write_index) as u64, WRITE_INDEX_OFFSET);
        assert_eq!(core::mem::offset_of!(InterruptRingHeader, read_index) as u64, READ_INDEX_OFFSET);
        assert_eq!(core::mem::offset_of!(InterruptRingHeader, overflows) as u64, OVERFLOWS_OFFSET);
    }

    #[test]
    fn causes_map_to_their_vectors_and_fold_onto_zero() {
        assert_eq!(vector_for(cause::MAILBOX, 4), VECTOR_MAILBOX);
        assert_eq!(vector_for(cause::NATIVE_FENCE, 4), VECTOR_FENCE);
        assert_eq!(vector_for(cause::ENGINE_STATE, 4), VECTOR_ENGINE);
        assert_eq!(vector_for(cause::FAULT, 4), VECTOR_FAULT);
        assert_eq!(vector_for(cause::FAULT, 2), VECTOR_MAILBOX);
        assert_eq!(vector_for(cause::NATIVE_FENCE, 1), VECTOR_MAILBOX);
    }

    #[test]
    fn ring_room_and_resume_survive_wraparound() {
        assert_eq!(record_offset(0, 64), RECORDS_OFFSET);
        assert_eq!(record_offset(65, 64), RECORDS_OFFSET + 48);
        assert_eq!(record_offset(3, 0), RECORDS_OFFSET);
        assert!(has_room(63, 0, 64) && !has_room(64, 0, 64));
        assert!(has_room(1, u32::MAX, 64) && !has_room(62, u32::MAX - 1, 64));
        assert_eq!(resume_index(10, 5, 64), 5);
        assert_eq!(resume_index(100, 5, 64), 36);
        assert_eq!(resume_index(3, u32::MAX - 100, 64), 3u32.wrapping_sub(64));
    }
}
