// SPDX-License-Identifier: GPL-2.0

//! Slots of the system address space: the VA a fence page, a queue's progress fence, a shared
//! fence, a cross-adapter side or a queue's fence logs is mapped at there (two pages and two
//! guard pages each, [`SLOT_PAGES`]). Slots are handed out lowest free first from the kernel's
//! bitmap (`BitmapVec`, grown by doubling and shrunk by half when the slots in use fit a
//! quarter), so the space's extent follows the slots in use, not how many were ever taken, and
//! its page tables (freed when empty, `hw::pagetable`) stay as few as the live slots need.
//!
//! A slot is given back only once the device confirmed it no longer names it; a slot the
//! device may still name stays taken for the life of the binding (its pages unmapped: a stale
//! access faults and never reaches a later owner's pages).

use kernel::{bitmap::BitmapVec, prelude::*};

use super::ids::SlotLayout;
use crate::abi::mmu;

/// First VA the module hands out in the system address space.
const BASE: u64 = 0x1000_0000;
/// Pages per slot: two the owner maps and two guard pages (128 slots per leaf table).
pub(crate) const SLOT_PAGES: u64 = 4;
/// Where the slots lie.
const LAYOUT: SlotLayout = SlotLayout::new(BASE, SLOT_PAGES * mmu::PAGE_SIZE);

/// The slots of the system address space in use.
pub(crate) struct SystemVa {
    /// One bit per slot, set while taken.
    taken: BitmapVec,
}

impl SystemVa {
    /// No slot taken.
    pub(crate) fn new() -> Self {
        Self {
            taken: BitmapVec::new_inline(),
        }
    }

    /// The VA of the lowest free slot, now taken.
    ///
    /// # Errors
    ///
    /// `ENOMEM` (growing the bitmap), `ENOSPC` past the bitmap's largest size.
    pub(crate) fn take(&mut self) -> Result<u64> {
        let slot = match self.taken.next_zero_bit(0) {
            Some(slot) => slot,
            None => {
                let len = self.taken.len();
                let grown = len.checked_mul(2).filter(|&n| n <= BitmapVec::MAX_LEN).ok_or(ENOSPC)?;
                let mut bigger = BitmapVec::new(grown, GFP_KERNEL)?;
                bigger.copy_and_extend(&self.taken);
                self.taken = bigger;
                len
            }
        };
        self.taken.set_bit(slot);
        Ok(LAYOUT.va(slot))
    }

    /// Gives back the slot at `va` (ignored for a VA no slot starts at); the bitmap shrinks by
    /// half when the slots in use fit its first quarter (kept as it is without the memory).
    pub(crate) fn put(&mut self, va: u64) {
        let Some(slot) = LAYOUT.slot(va).filter(|&s| s < self.taken.len()) else {
            return;
        };
        self.taken.clear_bit(slot);
        let len = self.taken.len();
        let used = self.taken.last_bit().map_or(0, |last| last + 1);
        if len > BitmapVec::MAX_INLINE_LEN && used <= len / 4 {
            if let Ok(mut smaller) = BitmapVec::new(len / 2, GFP_KERNEL) {
                smaller.copy_and_extend(&self.taken);
                self.taken = smaller;
            }
        }
    }

    /// One past the highest slot taken: the extent of the space in slots (`DEBUG_STATS`).
    pub(crate) fn extent(&self) -> usize {
        self.taken.last_bit().map_or(0, |last| last + 1)
    }
}
