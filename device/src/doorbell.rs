//! Doorbells: the doorbell BAR (one 4 KiB page per physical doorbell) and the interface through
//! which the command processor learns which doorbells were rung.
//!
//! Today doorbells are trapped: every write is a vfio-user `REGION_WRITE` (posted by QEMU, so
//! the vCPU does not wait), recorded here by the socket thread, which then wakes the command
//! processor through an eventfd. The [`DoorbellSource`] trait lets a shared-memory doorbell
//! (an mmapped page the command processor polls) replace it without touching the scheduler.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use belfry_abi::pci;
use vmm_sys_util::eventfd::EventFd;

/// What the command processor needs from a doorbell implementation.
pub trait DoorbellSource: Send + Sync {
    /// Number of physical doorbells.
    fn count(&self) -> u32;
    /// An fd that becomes readable when a doorbell was rung (for the command processor's epoll).
    fn wake_fd(&self) -> RawFd;
    /// Consumes the wake-up and returns every doorbell rung since the last call, with the last
    /// value written to it, in index order.
    fn take_rung(&self) -> Vec<(u32, u64)>;
}

/// Doorbells behind trapped BAR writes.
pub struct TrappedDoorbells {
    values: Vec<AtomicU64>,
    pending: Vec<AtomicU64>,
    wake: EventFd,
}

impl TrappedDoorbells {
    /// `count` doorbells, all zero.
    pub fn new(count: u32) -> std::io::Result<Self> {
        Ok(TrappedDoorbells {
            values: (0..count).map(|_| AtomicU64::new(0)).collect(),
            pending: (0..count.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            wake: EventFd::new(libc::EFD_NONBLOCK)?,
        })
    }

    /// Index of the doorbell whose register is at `offset` in the doorbell BAR, if any:
    /// the register is the first 8 bytes of each page.
    pub fn index_at(&self, offset: u64, size: usize) -> Option<u32> {
        let index = u32::try_from(offset / pci::DOORBELL_PAGE_SIZE).ok()?;
        let in_page = offset % pci::DOORBELL_PAGE_SIZE;
        let aligned = (size == 4 || size == 8) && in_page == 0;
        (aligned && index < self.count()).then_some(index)
    }

    /// Records a write of `value` to doorbell `index` and wakes the command processor.
    pub fn ring(&self, index: u32, value: u64) {
        let i = index as usize;
        if let Some(v) = self.values.get(i) {
            v.store(value, Ordering::Release);
            self.pending[i / 64].fetch_or(1 << (i % 64), Ordering::AcqRel);
            let _ = self.wake.write(1);
        }
    }

    /// Last value written to doorbell `index`.
    pub fn value(&self, index: u32) -> u64 {
        self.values.get(index as usize).map_or(0, |v| v.load(Ordering::Acquire))
    }

    /// Power-on state.
    pub fn reset(&self) {
        self.values.iter().for_each(|v| v.store(0, Ordering::Release));
        self.pending.iter().for_each(|p| p.store(0, Ordering::Release));
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
    fn only_the_first_word_of_a_page_is_a_doorbell() {
        let db = TrappedDoorbells::new(2).unwrap();
        assert_eq!(db.index_at(0, 4), Some(0));
        assert_eq!(db.index_at(4096, 8), Some(1));
        assert_eq!(db.index_at(4100, 4), None);
        assert_eq!(db.index_at(8192, 4), None);
        assert_eq!(db.index_at(0, 2), None);
    }
}
