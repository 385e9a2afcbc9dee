//! Hardware-queue rings: the ring of command-buffer references and its ring-control page.
//!
//! The ring is `entries` × [`RingEntry`] in the queue's GPU address space (`entries` a power of
//! two). Ring control holds the write index (written by the submitter, offset 0 as in the
//! reference pseudocode) and the read index (written by the device, in its own cache line).
//! Both indexes are free-running `u32` counters: slot = index mod entries, and the work
//! pending is `write - read` with wrapping arithmetic. Submission: write the entry, then store
//! the write index with release order, then ring the doorbell.

use core::mem::size_of;

/// One ring entry: a command buffer to execute.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingEntry {
    /// GPU VA of the command buffer (4-byte aligned).
    pub cmdbuf_va: u64,
    /// Its size in bytes (a multiple of 4, at most [`CMDBUF_MAX_BYTES`]).
    pub size_bytes: u32,
    /// `RING_FLAG_*`; zero on user-mode queues.
    pub flags: u32,
}
const _: () = assert!(size_of::<RingEntry>() == 16);

/// [`RingEntry::flags`]: this command buffer is a part of a split DMA buffer and more parts
/// follow on the same queue (kernel-mode queues only; a user-mode queue faults with `BAD_RING`).
/// On a device without context save (`CAPS.no_context_save`) the engine runs nothing but this
/// queue and paging queues until a part without the flag ends (SPLIT-03, SPLIT-04).
pub const RING_FLAG_SPLIT_CONTINUES: u32 = 1 << 0;
/// Every flag a kernel-mode queue's ring entry may carry.
pub const RING_FLAGS_KERNEL: u32 = RING_FLAG_SPLIT_CONTINUES;

/// The ring-control page's layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingControl {
    /// Next index the submitter will fill; written by the submitter.
    pub write_index: u32,
    /// Reserved.
    pub reserved0: [u32; 15],
    /// Next index the device will execute; written by the device after a command buffer ends.
    pub read_index: u32,
    /// Reserved.
    pub reserved1: [u32; 15],
}
const _: () = assert!(size_of::<RingControl>() == 128);

/// Byte offset of [`RingControl::write_index`].
pub const WRITE_INDEX_OFFSET: u64 = 0;
/// Byte offset of [`RingControl::read_index`].
pub const READ_INDEX_OFFSET: u64 = 64;
/// Fewest ring entries.
pub const MIN_ENTRIES: u32 = 2;
/// Most ring entries.
pub const MAX_ENTRIES: u32 = 1 << 16;
/// Largest command buffer.
pub const CMDBUF_MAX_BYTES: u32 = 1 << 20;

/// Command buffers submitted and not yet executed.
///
/// # Invariants
/// Correct across `u32` wraparound of both indexes.
pub const fn pending(write_index: u32, read_index: u32) -> u32 {
    write_index.wrapping_sub(read_index)
}

/// Whether a write index is consistent with the read index for a ring of `entries` (no more
/// pending work than slots); a violation is a malformed ring.
pub const fn is_consistent(write_index: u32, read_index: u32, entries: u32) -> bool {
    pending(write_index, read_index) <= entries
}

/// Slot of `index` in a ring of `entries` (a power of two).
pub const fn slot(index: u32, entries: u32) -> u32 {
    index & (entries - 1)
}

/// Whether `entries` is a valid ring size.
pub const fn is_valid_size(entries: u32) -> bool {
    entries.is_power_of_two() && entries >= MIN_ENTRIES && entries <= MAX_ENTRIES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_work_survives_wraparound() {
        assert_eq!(pending(5, 3), 2);
        assert_eq!(pending(1, u32::MAX), 2);
        assert!(is_consistent(1, u32::MAX, 2));
        assert!(!is_consistent(4, u32::MAX, 4));
        assert_eq!(slot(u32::MAX, 8), 7);
        assert!(is_valid_size(2) && is_valid_size(1 << 16));
        assert!(!is_valid_size(3) && !is_valid_size(1) && !is_valid_size(1 << 17));
    }
}
