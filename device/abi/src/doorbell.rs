//! The sleep handshake of shared-memory doorbells (`CAPS.shared_doorbells`), as pure code over
//! [`DoorbellCells`] so the device, the library and the model check (`tests/doorbell_model.rs`,
//! loom) run the same steps.
//!
//! On a shared-doorbell device the doorbell BAR is memory the command processor (CMP) polls:
//! a ring is a store, with no exit and no message. After a configurable budget without rings
//! the CMP sleeps; while it sleeps a ring must still be noticed. So:
//!
//! - the CMP publishes its sleep in the *sleep word* of every doorbell page
//!   ([`SLEEP_WORD_OFFSET`]), issues a full fence, and re-reads every doorbell
//!   ([`publish_sleep`]); only if none changed does it sleep;
//! - the library stores the doorbell, issues a full fence, and reads the sleep word of its page
//!   ([`ring`] = the store then [`asleep_after_ring`]); if the CMP is asleep it reports the
//!   doorbell as CONNECTED_NOTIFY (DB-10) and notifies the module, which writes `DB_WAKE`.
//!
//! This is the store → full fence → load pairing of the fences' Dekker pair: whatever the
//! interleaving, either the CMP's re-read sees the library's store, or the library's load sees
//! the CMP's sleep word. Without either fence both loads may read the old values (a store
//! buffer), and the ring is lost until the next one; the model check shows both.

use super::pci::DOORBELL_PAGE_SIZE;

/// Byte offset of the sleep word in each doorbell page: a 32-bit word on its own 64-byte line,
/// written by the device, read by the library (the doorbell value is at offset 0).
pub const SLEEP_WORD_OFFSET: u64 = 64;
/// Sleep word: the CMP polls this page.
pub const AWAKE: u32 = 0;
/// Sleep word: the CMP may be asleep; a ring must be followed by a wake-up (`DB_WAKE`).
pub const ASLEEP: u32 = 1;

const _: () = assert!(SLEEP_WORD_OFFSET + 4 <= DOORBELL_PAGE_SIZE);

/// The shared memory of the handshake: doorbell values and sleep words, one of each per
/// doorbell page.
pub trait DoorbellCells {
    /// Number of doorbells.
    fn count(&self) -> u32;
    /// Loads doorbell `index`'s value (acquire).
    fn load_value(&self, index: u32) -> u64;
    /// Stores doorbell `index`'s value (release): the ring.
    fn store_value(&self, index: u32, value: u64);
    /// Loads doorbell `index`'s sleep word.
    fn load_sleep(&self, index: u32) -> u32;
    /// Stores doorbell `index`'s sleep word.
    fn store_sleep(&self, index: u32, word: u32);
    /// A full (store → load) fence: sequentially consistent.
    fn full_fence(&self);
}

/// The library's ring of doorbell `index` with `value`: true if the CMP may be asleep, so the
/// ring must be followed by a wake-up.
pub fn ring<C: DoorbellCells + ?Sized>(cells: &C, index: u32, value: u64) -> bool {
    cells.store_value(index, value);
    asleep_after_ring(cells, index)
}

/// The second half of [`ring`], after the store: full fence, then the sleep word.
pub fn asleep_after_ring<C: DoorbellCells + ?Sized>(cells: &C, index: u32) -> bool {
    cells.full_fence();
    cells.load_sleep(index) == ASLEEP
}

/// The CMP's poll: calls `rung(index, value)` for every doorbell whose value differs from
/// `seen` (updated), in index order; returns how many. `seen` has one entry per doorbell
/// (extra doorbells of either side are not looked at).
pub fn scan<C: DoorbellCells + ?Sized>(cells: &C, seen: &mut [u64], mut rung: impl FnMut(u32, u64)) -> usize {
    let mut n = 0;
    for (index, last) in (0..cells.count()).zip(seen.iter_mut()) {
        let value = cells.load_value(index);
        if value != *last {
            *last = value;
            rung(index, value);
            n += 1;
        }
    }
    n
}

/// The CMP going to sleep: publishes [`ASLEEP`] in every page, full fence, then re-reads every
/// doorbell ([`scan`]). A non-zero result means rings arrived meanwhile: the CMP must not
/// sleep (it calls [`publish_awake`] and handles them).
pub fn publish_sleep<C: DoorbellCells + ?Sized>(cells: &C, seen: &mut [u64], rung: impl FnMut(u32, u64)) -> usize {
    for index in 0..cells.count() {
        cells.store_sleep(index, ASLEEP);
    }
    cells.full_fence();
    scan(cells, seen, rung)
}

/// The CMP awake again (woken, or it found rings while publishing its sleep): [`AWAKE`] in
/// every page. It polls from then on, so no fence is needed before its next scan.
pub fn publish_awake<C: DoorbellCells + ?Sized>(cells: &C) {
    for index in 0..cells.count() {
        cells.store_sleep(index, AWAKE);
    }
}
