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

crate::wire_enum! {
    /// Kinds of [`InterruptRecord`].
    pub enum RecordKind {
        /// Native fence signaled: `fence` names it (exact form, one record per fence of a batch),
        /// or `fence == 0` asks the driver to scan all native-fence waits (NULL array); in the
        /// optimized form `queue` names the hardware queue whose log to read (or [`NONE`]), `value`
        /// the value signaled and `address` the free-running index of that signal's entry in the
        /// queue's signal log — `packet::NO_LOG` when the log does not record this fence's signal
        /// (not logged, no signal log, or logged under another handle): only that entry explains
        /// the record, another with the same value may name another fence. In the queue-array
        /// form the record names several queues instead (see [`queue_array_record`]).
        NativeFenceSignaled = 1 => "NATIVE_FENCE_SIGNALED",
        /// A monitored fence was written by an engine: `address` is its GPU VA in `context`.
        MonitoredFenceSignaled = 2 => "MONITORED_FENCE_SIGNALED",
        /// Engine state change: `engine`, `detail` = `engine::EngineState`, `queue` if hung;
        /// for `TransitionToF1`, `value` = the `KICK_QUEUE` commands the device had run when it
        /// found the engine idle (a driver that has sent more since knows the request is stale).
        EngineState = 3 => "ENGINE_STATE",
        /// Context fault: `context`, `queue`, `address` (faulting VA), `detail` = `engine::FaultReason`.
        ContextFault = 4 => "CONTEXT_FAULT",
        /// A `NOTIFY` packet: `queue`, `value` = token.
        Notify = 5 => "NOTIFY",
    }
}

/// `detail` bit of a [`RecordKind::NativeFenceSignaled`] record: also evaluate legacy
/// (monitored) fence waits.
pub const DETAIL_EVALUATE_LEGACY: u32 = 1 << 0;
/// `detail` bit of a [`RecordKind::NativeFenceSignaled`] record: the optimized per-queue form.
pub const DETAIL_PER_QUEUE: u32 = 1 << 1;
/// `detail` bit of a [`RecordKind::NativeFenceSignaled`] record: the queue-array form
/// ([`queue_array_record`]): the record names up to [`QUEUE_ARRAY_MAX`] hardware queues whose
/// signal logs hold entries written since the last record that named them.
pub const DETAIL_QUEUE_ARRAY: u32 = 1 << 2;

/// Most hardware queues one queue-array record names: six 32-bit queue ids fill the record's
/// `fence`, `value` and `address` fields (24 bytes). A device with more queues to name posts a
/// scan-all record instead (fence 0, no queue, evaluate-legacy).
pub const QUEUE_ARRAY_MAX: usize = 6;

/// A queue-array record (the queue-array form, capability `CAPS.queue_array_interrupt`): kind
/// `NativeFenceSignaled`, `engine` the engine of the signal that raised it, `queue` the number
/// of queues named (1..=[`QUEUE_ARRAY_MAX`]), `context` [`NONE`], `detail`
/// [`DETAIL_QUEUE_ARRAY`], and the queue ids, in order, as six little-endian `u32` words in the
/// bytes of `fence`, `value` and `address` (word `2i` the low half of the field, `2i + 1` the
/// high half; unused words [`NONE`]). `None` for no queue or more than [`QUEUE_ARRAY_MAX`].
pub fn queue_array_record(engine: u32, queues: &[u32]) -> Option<InterruptRecord> {
    if queues.is_empty() || queues.len() > QUEUE_ARRAY_MAX {
        return None;
    }
    let mut words = [NONE; QUEUE_ARRAY_MAX];
    for (w, q) in words.iter_mut().zip(queues) {
        *w = *q;
    }
    let pair = |i: usize| u64::from(words[2 * i]) | u64::from(words[2 * i + 1]) << 32;
    Some(InterruptRecord {
        kind: RecordKind::NativeFenceSignaled as u32,
        engine,
        // CAST: at most QUEUE_ARRAY_MAX.
        queue: queues.len() as u32,
        context: NONE,
        fence: pair(0),
        value: pair(1),
        address: pair(2),
        detail: DETAIL_QUEUE_ARRAY,
        seq: 0,
    })
}

/// The queues a queue-array record names (see [`queue_array_record`]) and how many: `None`
/// when `r` is not one (another kind, or no [`DETAIL_QUEUE_ARRAY`]); a count above
/// [`QUEUE_ARRAY_MAX`] (a device bug) is cut to it.
pub fn queue_array(r: &InterruptRecord) -> Option<([u32; QUEUE_ARRAY_MAX], usize)> {
    if r.kind != RecordKind::NativeFenceSignaled as u32 || r.detail & DETAIL_QUEUE_ARRAY == 0 {
        return None;
    }
    let mut words = [NONE; QUEUE_ARRAY_MAX];
    for (i, field) in [r.fence, r.value, r.address].into_iter().enumerate() {
        // CAST: the two halves, truncation intended.
        words[2 * i] = field as u32;
        words[2 * i + 1] = (field >> 32) as u32;
    }
    let n = (r.queue as usize).min(QUEUE_ARRAY_MAX);
    Some((words, n))
}

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

    #[test]
    fn queue_array_records_carry_their_queues_in_order() {
        let r = queue_array_record(1, &[4, 0, 9]).unwrap();
        assert_eq!((r.queue, r.detail, r.context), (3, DETAIL_QUEUE_ARRAY, NONE));
        assert_eq!(r.fence, 4);
        assert_eq!(r.value, 9 | u64::from(NONE) << 32);
        let (words, n) = queue_array(&r).unwrap();
        assert_eq!(&words[..n], &[4, 0, 9]);
        let full: [u32; QUEUE_ARRAY_MAX] = [1, 2, 3, 4, 5, 6];
        let (words, n) = queue_array(&queue_array_record(0, &full).unwrap()).unwrap();
        assert_eq!(&words[..n], &full);
        assert!(queue_array_record(0, &[1, 2, 3, 4, 5, 6, 7]).is_none());
        assert!(queue_array_record(0, &[]).is_none());
        let per_queue = InterruptRecord { kind: 1, detail: DETAIL_PER_QUEUE, ..Default::default() };
        assert!(queue_array(&per_queue).is_none());
    }
}
