//! Peer signals (`CAPS.peer_signals`, XAD-15): a GPU's signal of a cross-adapter fence wakes the
//! other GPUs directly, by a write into their *peer-signal pages*, with a payload naming the
//! fence, so each rescans only the hardware queues parked on that fence.
//!
//! A peer-signal page is one page of guest RAM the driver allocates per peer-capable device
//! and hands to it with `SET_PEER_SIGNALS` (`mailbox::PeerSignalsArgs`), together with the
//! pages of the other peer-capable devices. It holds a multi-producer, single-consumer ring of
//! [`Payload`]s: every device whose engine signals a fence registered cross-adapter is a
//! producer into every peer's page; the page's own device is the only consumer.
//!
//! - A producer claims index `i` with an atomic fetch-add on [`CLAIM_OFFSET`], then reads the
//!   consumer's index ([`CONSUMED_OFFSET`]): if `i − consumed ≥` [`SLOTS`] the ring is full
//!   and it sets the overflow word ([`OVERFLOW_OFFSET`]) instead of writing a slot. Otherwise it
//!   writes the slot's `address` and `value`, then its `sequence` = `i + 1` last (release).
//!   Either way it then wakes the consumer ([`PeerPage::wake`]).
//! - The consumer reads slot `consumed % SLOTS`: valid when its `sequence` is `consumed + 1`
//!   (acquire); it takes the payload and stores `consumed + 1`. An overflow word found set is
//!   cleared, the consumer skips to the claim index and rescans every queue parked on a
//!   cross-adapter fence. A claimed slot that stays unwritten (a producer that died between the
//!   claim and the write) is treated the same way once the consumer has waited for it long
//!   enough.
//!
//! A payload is a hint, never an authority: it only chooses which parked waits are re-read
//! from the fence's CurrentValue in memory, so a torn or forged payload costs a re-read and
//! nothing else.
//!
//! The payload names a fence by the guest physical (bus) address of its CurrentValue, which is
//! the same for every device a cross-adapter fence is open on (XAD-03).

/// Byte offset of the claim index (u64): producers' atomic fetch-add.
pub const CLAIM_OFFSET: u64 = 0;
/// Byte offset of the consumer's index (u64): written by the page's own device only.
pub const CONSUMED_OFFSET: u64 = 8;
/// Byte offset of the overflow word (u64): nonzero once a producer found the ring full.
pub const OVERFLOW_OFFSET: u64 = 16;
/// Byte offset of the first slot.
pub const SLOTS_OFFSET: u64 = 32;
/// Bytes per slot.
pub const SLOT_BYTES: u64 = 32;
/// Slots in a page.
pub const SLOTS: u64 = 127;
/// Size of a peer-signal page.
pub const PAGE_BYTES: u64 = 4096;
/// Byte offset of a slot's sequence word (claim index + 1, written last).
pub const SLOT_SEQUENCE: u64 = 0;
/// Byte offset of a slot's fence address.
pub const SLOT_ADDRESS: u64 = 8;
/// Byte offset of a slot's value.
pub const SLOT_VALUE: u64 = 16;

const _: () = assert!(SLOTS_OFFSET + SLOTS * SLOT_BYTES <= PAGE_BYTES);

/// What a signal tells the peers: which fence, and the value it was signalled to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Payload {
    /// Guest physical address of the fence's CurrentValue (the same on every device, XAD-03).
    pub address: u64,
    /// The value signalled.
    pub value: u64,
}

/// Byte offset in the page of slot `index`'s field at `field`.
pub const fn slot_offset(index: u64, field: u64) -> u64 {
    SLOTS_OFFSET + (index % SLOTS) * SLOT_BYTES + field
}

/// The shared memory of one peer-signal page, as its producers and its consumer access it.
pub trait PeerPage {
    /// Atomic fetch-add of the claim index; the index claimed.
    fn claim(&self) -> u64;
    /// Loads a u64 at `offset` (acquire).
    fn load(&self, offset: u64) -> u64;
    /// Stores a u64 at `offset` (release).
    fn store(&self, offset: u64, value: u64);
    /// Atomically takes the overflow word, leaving 0.
    fn take_overflow(&self) -> u64;
    /// Wakes the page's consumer if it sleeps (the device: a futex on the claim index).
    fn wake(&self);
}

/// Produces `payload` into `page`; false when the ring was full (the overflow word is set).
pub fn produce<P: PeerPage>(page: &P, payload: Payload) -> bool {
    let index = page.claim();
    let consumed = page.load(CONSUMED_OFFSET);
    if index.wrapping_sub(consumed) >= SLOTS {
        page.store(OVERFLOW_OFFSET, 1);
        page.wake();
        return false;
    }
    page.store(slot_offset(index, SLOT_ADDRESS), payload.address);
    page.store(slot_offset(index, SLOT_VALUE), payload.value);
    page.store(slot_offset(index, SLOT_SEQUENCE), index.wrapping_add(1));
    page.wake();
    true
}

/// What one pass of the consumer found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consumed {
    /// Nothing claimed past the consumer's index.
    Empty,
    /// A payload (the consumer's index moved past it).
    Payload(Payload),
    /// A slot is claimed but not written yet: look again later.
    Pending,
    /// The ring overflowed: payloads were lost, so every parked cross-adapter wait must be
    /// re-read (the consumer's index moved to the claim index).
    Overflow,
}

/// Takes the next payload of `page`. `give_up` says whether a [`Consumed::Pending`] slot has
/// been waited for long enough: the consumer then skips to the claim index and reports
/// [`Consumed::Overflow`].
pub fn consume<P: PeerPage>(page: &P, give_up: bool) -> Consumed {
    let claimed = page.load(CLAIM_OFFSET);
    if page.take_overflow() != 0 {
        page.store(CONSUMED_OFFSET, claimed);
        return Consumed::Overflow;
    }
    let consumed = page.load(CONSUMED_OFFSET);
    if claimed == consumed {
        return Consumed::Empty;
    }
    if claimed.wrapping_sub(consumed) > SLOTS {
        // Forged indexes (a producer never claims past a full ring without the overflow word).
        page.store(CONSUMED_OFFSET, claimed);
        return Consumed::Overflow;
    }
    if page.load(slot_offset(consumed, SLOT_SEQUENCE)) != consumed.wrapping_add(1) {
        if give_up {
            page.store(CONSUMED_OFFSET, claimed);
            return Consumed::Overflow;
        }
        return Consumed::Pending;
    }
    let payload = Payload {
        address: page.load(slot_offset(consumed, SLOT_ADDRESS)),
        value: page.load(slot_offset(consumed, SLOT_VALUE)),
    };
    page.store(CONSUMED_OFFSET, consumed.wrapping_add(1));
    Consumed::Payload(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicU64, Ordering};

    struct Page([AtomicU64; (PAGE_BYTES / 8) as usize]);

    impl Page {
        fn new() -> Self {
            Page(core::array::from_fn(|_| AtomicU64::new(0)))
        }
        fn at(&self, offset: u64) -> &AtomicU64 {
            &self.0[(offset / 8) as usize]
        }
    }

    impl PeerPage for Page {
        fn claim(&self) -> u64 {
            self.at(CLAIM_OFFSET).fetch_add(1, Ordering::SeqCst)
        }
        fn load(&self, offset: u64) -> u64 {
            self.at(offset).load(Ordering::Acquire)
        }
        fn store(&self, offset: u64, value: u64) {
            self.at(offset).store(value, Ordering::Release)
        }
        fn take_overflow(&self) -> u64 {
            self.at(OVERFLOW_OFFSET).swap(0, Ordering::SeqCst)
        }
        fn wake(&self) {}
    }

    fn p(n: u64) -> Payload {
        Payload { address: 0x1000 * n, value: n }
    }

    #[test]
    fn payloads_come_out_in_order_across_the_wrap() {
        let page = Page::new();
        for round in 0..3 * SLOTS {
            assert!(produce(&page, p(round)));
            assert_eq!(consume(&page, false), Consumed::Payload(p(round)));
        }
        assert_eq!(consume(&page, false), Consumed::Empty);
    }

    #[test]
    fn a_full_ring_overflows_and_the_consumer_skips_to_the_claim() {
        let page = Page::new();
        for n in 0..SLOTS {
            assert!(produce(&page, p(n)));
        }
        assert!(!produce(&page, p(SLOTS)), "the ring is full");
        assert_eq!(consume(&page, false), Consumed::Overflow);
        assert_eq!(consume(&page, false), Consumed::Empty);
        assert!(produce(&page, p(1)));
        assert_eq!(consume(&page, false), Consumed::Payload(p(1)));
    }

    #[test]
    fn a_claimed_unwritten_slot_is_pending_until_given_up() {
        let page = Page::new();
        page.claim();
        assert_eq!(consume(&page, false), Consumed::Pending);
        assert_eq!(consume(&page, true), Consumed::Overflow);
        assert_eq!(consume(&page, false), Consumed::Empty);
    }

    #[test]
    fn forged_indexes_read_as_an_overflow() {
        let page = Page::new();
        page.store(CLAIM_OFFSET, 1 << 40);
        assert_eq!(consume(&page, false), Consumed::Overflow);
        assert_eq!(consume(&page, false), Consumed::Empty);
    }
}
