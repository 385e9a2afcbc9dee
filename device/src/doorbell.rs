//! Doorbells: the doorbell BAR (one 4 KiB page per physical doorbell) and the interface through
//! which the command processor learns which doorbells were rung.
//!
//! Two transports (`--doorbell-transport`): trapped ([`TrappedDoorbells`]), where every write
//! is a vfio-user `REGION_WRITE` (posted by QEMU, so the vCPU does not wait) received by the
//! socket thread, which kicks a queue doorbell's queues itself ([`Ring::Caller`]: the engine is
//! the next thread a ring wakes) and records the command ring's for the command processor,
//! which it wakes through an eventfd; and shared
//! ([`shared::SharedDoorbells`]), where the BAR is a memfd QEMU maps into the guest, a ring is
//! a store, and the command processor polls it, sleeping after a budget without rings behind
//! the handshake of `belfry_abi::doorbell`. The [`DoorbellSource`] trait hides which from the
//! scheduler and the socket thread.

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use belfry_abi::pci;
use vmm_sys_util::eventfd::EventFd;

pub mod shared;

/// What the command processor and the socket thread need from a doorbell implementation.
pub trait DoorbellSource: Send + Sync {
    /// Number of physical doorbells.
    fn count(&self) -> u32;
    /// An fd that becomes readable when a doorbell was rung or a wake-up requested (for the
    /// command processor's epoll).
    fn wake_fd(&self) -> RawFd;
    /// Consumes the wake-up and returns every doorbell rung since the last call, with the last
    /// value written to it, in index order. A shared transport is awake from then on.
    fn take_rung(&self) -> Vec<(u32, u64)>;
    /// How long the command processor polls ([`DoorbellSource::poll`]) after activity before
    /// it sleeps ([`DoorbellSource::try_sleep`]); `None`: rings wake it, never poll.
    fn poll_budget(&self) -> Option<Duration> {
        None
    }
    /// The doorbells rung since the last look, without a wake-up (polling).
    fn poll(&self) -> Vec<(u32, u64)> {
        Vec::new()
    }
    /// Publishes the command processor's sleep and looks once more: the rings found (then it
    /// stays awake and must handle them), or none (it may sleep until [`Self::wake_fd`]).
    fn try_sleep(&self) -> Vec<(u32, u64)> {
        Vec::new()
    }
    /// Doorbell `index` was connected to a queue: its next ring must be noticed even if it
    /// writes the value the previous queue wrote last.
    fn connected(&self, _index: u32) {}
    /// Index of the doorbell whose register is at `offset` in the doorbell BAR, if any:
    /// the register is the first 8 bytes of each page.
    fn index_at(&self, offset: u64, size: usize) -> Option<u32> {
        let index = u32::try_from(offset / pci::DOORBELL_PAGE_SIZE).ok()?;
        let in_page = offset % pci::DOORBELL_PAGE_SIZE;
        let aligned = (size == 4 || size == 8) && in_page == 0;
        (aligned && index < self.count()).then_some(index)
    }
    /// A trapped write of `value` to doorbell `index`: records it, and either wakes the command
    /// processor to take it or leaves the kick to the caller (the socket thread), as returned.
    fn ring(&self, index: u32, value: u64) -> Ring;
    /// Last value written to doorbell `index`.
    fn value(&self, index: u32) -> u64;
    /// `DB_WAKE`: wakes the command processor (a ring found it asleep).
    fn wake(&self);
    /// Power-on state.
    fn reset(&self);
    /// The memory behind the BAR, for the client to map (shared transport only).
    fn region_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
}

/// Who kicks the queues of a ring [`DoorbellSource::ring`] received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ring {
    /// The command processor, woken for it: it takes the ring with the others
    /// ([`DoorbellSource::take_rung`]).
    CommandProcessor,
    /// The caller, at once: a trapped queue doorbell of a device whose socket thread kicks
    /// ([`TrappedDoorbells::kicked_by_the_writer`]).
    Caller,
}

/// Doorbells behind trapped BAR writes.
pub struct TrappedDoorbells {
    values: Vec<AtomicU64>,
    pending: Vec<AtomicU64>,
    wake: EventFd,
    /// Whether the writer kicks a queue doorbell's queues ([`Ring::Caller`]).
    writer_kicks: bool,
    /// The command ring's doorbell, always the command processor's: it runs the ring's entries.
    command_ring: Option<u32>,
}

impl TrappedDoorbells {
    /// `count` doorbells, all zero, every ring taken by the command processor.
    pub fn new(count: u32) -> std::io::Result<Self> {
        Ok(TrappedDoorbells {
            values: (0..count).map(|_| AtomicU64::new(0)).collect(),
            pending: (0..count.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            wake: EventFd::new(libc::EFD_NONBLOCK)?,
            writer_kicks: false,
            command_ring: None,
        })
    }

    /// `count` doorbells, all zero, whose writer kicks every queue doorbell's queues itself:
    /// only the command ring's doorbell (`command_ring`) wakes the command processor. A ring
    /// then crosses one device thread fewer (socket thread → engine), and it is kicked on the
    /// doorbell bindings of the moment it arrived, before any later message is read.
    pub fn kicked_by_the_writer(count: u32, command_ring: Option<u32>) -> std::io::Result<Self> {
        Ok(TrappedDoorbells { writer_kicks: true, command_ring, ..Self::new(count)? })
    }

    fn record(&self, index: u32, value: u64) {
        let i = index as usize;
        if let Some(v) = self.values.get(i) {
            v.store(value, Ordering::Release);
            self.pending[i / 64].fetch_or(1 << (i % 64), Ordering::AcqRel);
            let _ = self.wake.write(1);
        }
    }
}

impl DoorbellSource for TrappedDoorbells {
    fn count(&self) -> u32 {
        u32::try_from(self.values.len()).unwrap_or(u32::MAX)
    }

    fn wake_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    fn take_rung(&self) -> Vec<(u32, u64)> {
        let _ = self.wake.read();
        let mut rung = Vec::new();
        for (word, bits) in (0u32..).zip(&self.pending) {
            let mut bits = bits.swap(0, Ordering::AcqRel);
            while bits != 0 {
                let bit = bits.trailing_zeros();
                bits &= bits - 1;
                let index = word * 64 + bit;
                rung.push((index, self.value(index)));
            }
        }
        rung
    }

    fn ring(&self, index: u32, value: u64) -> Ring {
        if self.writer_kicks && Some(index) != self.command_ring {
            if let Some(v) = self.values.get(index as usize) {
                v.store(value, Ordering::Release);
            }
            return Ring::Caller;
        }
        self.record(index, value);
        Ring::CommandProcessor
    }

    fn value(&self, index: u32) -> u64 {
        self.values.get(index as usize).map_or(0, |v| v.load(Ordering::Acquire))
    }

    fn wake(&self) {
        // Every ring already woke the command processor: nothing sleeps on a trapped doorbell.
    }

    fn reset(&self) {
        self.values.iter().for_each(|v| v.store(0, Ordering::Release));
        self.pending.iter().for_each(|p| p.store(0, Ordering::Release));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rung_doorbells_are_drained_once_with_their_last_value() {
        let db = TrappedDoorbells::new(70).unwrap();
        db.ring(3, 1);
        db.ring(3, 2);
        db.ring(69, 7);
        db.ring(70, 9); // out of range: ignored
        assert_eq!(db.take_rung(), vec![(3, 2), (69, 7)]);
        assert!(db.take_rung().is_empty());
    }

    #[test]
    fn a_writer_that_kicks_takes_every_ring_but_the_command_rings() {
        let db = TrappedDoorbells::kicked_by_the_writer(17, Some(16)).unwrap();
        assert_eq!(db.ring(3, 5), Ring::Caller);
        assert_eq!(db.value(3), 5);
        assert_eq!(db.ring(16, 2), Ring::CommandProcessor);
        assert_eq!(db.take_rung(), vec![(16, 2)], "only the command ring's doorbell is the command processor's");
    }

    #[test]
    fn only_the_first_word_of_a_page_is_a_doorbell() {
        let db = TrappedDoorbells::new(2).unwrap();
        assert_eq!(db.index_at(0, 4), Some(0));
        assert_eq!(db.index_at(4096, 8), Some(1));
        assert_eq!(db.index_at(4100, 4), None);
        assert_eq!(db.index_at(8192, 4), None);
        assert_eq!(db.index_at(0, 2), None);
    }
}
