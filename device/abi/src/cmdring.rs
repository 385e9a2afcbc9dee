//! The command ring (`CAPS.cmd_ring`): mailbox commands handed to the command processor through
//! a ring in guest memory and a doorbell, instead of three BAR0 writes each.
//!
//! Why: QEMU turns posted writes off for a whole device as soon as one of its regions is
//! mappable (shared doorbells), so each trapped BAR0 write then waits for the device's reply
//! (~45 µs under TCG). Real GPUs' firmware queues work the same way: the driver writes an
//! entry in memory and rings a doorbell; BAR0 stays for bring-up and rare control.
//!
//! Protocol:
//! - The driver programs `CMD_RING_BASE_LO/HI` (guest physical address, [`ENTRY_SIZE`]-aligned)
//!   and `CMD_RING_SIZE` (entries, a power of two up to [`MAX_ENTRIES`]) and sets
//!   `CMD_RING_CTRL.enable`, which zeroes the device's head. Everything is checked when the
//!   ring is used, not when it is programmed: a bad base or size makes the device count a ring
//!   error (`CMD_RING_ERROR`) and raise the mailbox interrupt, never panic.
//! - A command is an argument block exactly as for the BAR0 mailbox (a `MailboxHeader`
//!   first) and an [`Entry`] naming it at index `tail % size`; the driver then writes the new
//!   free-running `tail` to the ring's doorbell, the doorbell page [`doorbell_index`] (one page
//!   past the queues' doorbells, so no queue loses one), with the same sleep handshake as the
//!   queues' doorbells on a shared-doorbell device (`super::doorbell`).
//! - The device executes entries from its head to the tail in order. For each it writes the
//!   block's header back as the BAR0 mailbox does, then the entry's [`Entry::status`], then its
//!   [`Entry::done_seq`] (the entry's `seq`, release order: the driver that sees `done_seq`
//!   sees the status and results), advances `CMD_RING_HEAD`, and raises the mailbox interrupt.
//!   An entry whose `opcode` differs from its block header's completes with `BadOpcode`.
//! - A tail more than `size` entries past the head is refused whole (a ring error; the head
//!   does not move). `MB_STATUS` is the BAR0 mailbox's only: the ring never touches it.

use core::mem::size_of;

/// Most entries a command ring may have.
pub const MAX_ENTRIES: u32 = 256;

/// Value of [`Entry::done_seq`] before the device completes the entry.
pub const NOT_DONE: u32 = u32::MAX;

/// One command of the ring.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    /// The command (`mailbox::Opcode`); must equal the block header's.
    pub opcode: u32,
    /// Sequence number chosen by the driver; the device copies it to `done_seq` and to the
    /// block header's `seq` on completion.
    pub seq: u32,
    /// Guest physical address of the argument block (8-byte aligned).
    pub arg: u64,
    /// Written by the device: the completion's `mailbox::Status`.
    pub status: u32,
    /// Written by the device last: `seq` once the entry completed ([`NOT_DONE`] until then).
    pub done_seq: u32,
    /// Reserved, zero.
    pub reserved: u64,
}
const _: () = assert!(size_of::<Entry>() == 32);

/// Size of one entry in bytes; the ring base must be aligned to it.
pub const ENTRY_SIZE: u64 = size_of::<Entry>() as u64;

/// Byte offset of [`Entry::status`] in an entry.
pub const STATUS_OFFSET: u64 = 16;
/// Byte offset of [`Entry::done_seq`] in an entry.
pub const DONE_SEQ_OFFSET: u64 = 20;

/// The doorbell page of the command ring on a device with `queue_doorbells` queue doorbells
/// (`DOORBELL_INFO.count`): the page right after them.
pub const fn doorbell_index(queue_doorbells: u32) -> u32 {
    queue_doorbells
}

/// Whether `size` entries is a valid ring size.
pub const fn valid_size(size: u32) -> bool {
    size != 0 && size <= MAX_ENTRIES && size.is_power_of_two()
}

/// Guest address of entry `index` (free-running) of a ring at `base` with `size` entries, if
/// the ring is valid (aligned base, valid size) and the address does not overflow.
pub fn entry_address(base: u64, size: u32, index: u32) -> Option<u64> {
    if !valid_size(size) || base % ENTRY_SIZE != 0 {
        return None;
    }
    base.checked_add(u64::from(index & (size - 1)) * ENTRY_SIZE)
}

/// How many entries a doorbell value `tail` asks the device to run from `head`, or `None` if
/// the tail is more than `size` entries ahead (a hostile or corrupt tail).
pub fn pending(head: u32, tail: u32, size: u32) -> Option<u32> {
    let n = tail.wrapping_sub(head);
    (n <= size).then_some(n)
}

crate::wire_enum! {
    /// Ring-level errors counted in `CMD_RING_ERROR.last`.
    pub enum RingError {
        /// No error yet.
        None = 0 => "NONE",
        /// `CMD_RING_SIZE` is not a power of two in `1..=MAX_ENTRIES`.
        BadSize = 1 => "BAD_SIZE",
        /// `CMD_RING_BASE` is unaligned or an entry is not in guest memory.
        BadBase = 2 => "BAD_BASE",
        /// The doorbell's tail is more than `size` entries past the head.
        BadTail = 3 => "BAD_TAIL",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_addresses_wrap_and_refuse_bad_rings() {
        assert_eq!(entry_address(0x1000, 4, 5), Some(0x1000 + 32));
        assert_eq!(entry_address(0x1000, 3, 0), None, "not a power of two");
        assert_eq!(entry_address(0x1000, 0, 0), None);
        assert_eq!(entry_address(0x1000, 512, 0), None, "above MAX_ENTRIES");
        assert_eq!(entry_address(0x1008, 4, 0), None, "unaligned base");
        assert_eq!(entry_address(u64::MAX - 31, 4, 1), None, "overflow");
    }

    #[test]
    fn pending_counts_free_running_indices_and_refuses_overruns() {
        assert_eq!(pending(0, 3, 4), Some(3));
        assert_eq!(pending(u32::MAX, 1, 4), Some(2), "wraps");
        assert_eq!(pending(0, 5, 4), None);
        assert_eq!(pending(3, 2, 4), None, "a tail behind the head");
    }
}
