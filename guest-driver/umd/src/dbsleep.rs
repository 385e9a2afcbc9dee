//! The library's half of the shared-doorbell sleep handshake (`belfry_abi::doorbell`): after
//! ringing, a full fence and the sleep word of the doorbell page. A device with
//! `CAPS.shared_doorbells` publishes its command processor's sleep there; a ring that finds it
//! is reported as CONNECTED_NOTIFY (DB-10), so the submission notifies the module, which wakes
//! the command processor (`DB_WAKE`).

use core::sync::atomic::{fence, Ordering};

use belfry_abi::doorbell::{self, DoorbellCells, SLEEP_WORD_OFFSET};

use crate::sys::Mapping;

/// One mapped doorbell page as the handshake's memory (doorbell 0 of one).
pub(crate) struct PageCells<'a>(pub(crate) &'a Mapping);

impl DoorbellCells for PageCells<'_> {
    fn count(&self) -> u32 {
        1
    }
    fn load_value(&self, _: u32) -> u64 {
        self.0.load_u64(0, Ordering::Acquire)
    }
    fn store_value(&self, _: u32, value: u64) {
        self.0.ring_doorbell(0, value);
    }
    fn load_sleep(&self, _: u32) -> u32 {
        self.0.load_u32(SLEEP_WORD_OFFSET as usize, Ordering::Acquire)
    }
    fn store_sleep(&self, _: u32, word: u32) {
        self.0.store_u32(SLEEP_WORD_OFFSET as usize, word, Ordering::Release);
    }
    fn full_fence(&self) {
        fence(Ordering::SeqCst);
    }
}

/// After the ring's store: whether the command processor may be asleep (then the ring must be
/// followed by a notification).
pub(crate) fn asleep_after_ring(page: &Mapping) -> bool {
    doorbell::asleep_after_ring(&PageCells(page), 0)
}
