//! Shared-memory doorbells (`--doorbell-transport shared`): the doorbell BAR is a sealed memfd
//! that the vfio-user server offers QEMU as an mmappable region, so the guest's store lands in
//! this process's memory with no exit and no message.
//!
//! The command processor polls the pages ([`DoorbellSource::poll`]) for a budget after its last
//! activity, then sleeps ([`DoorbellSource::try_sleep`]) behind the handshake of
//! `belfry_abi::doorbell`: the sleep word in every page, a full fence, every doorbell read
//! again. A ring that finds the sleep word set is followed by the driver's `DB_WAKE` write
//! ([`DoorbellSource::wake`]), which the socket thread turns into an eventfd write.
//!
//! A ring is a change of a doorbell's value since the command processor last looked; on
//! connect the doorbell is zeroed so a new queue's first ring is a change whatever the previous
//! queue wrote. The guest can write anything anywhere in its pages: nothing here trusts the
//! memory beyond "a changed value is a ring", and only the dedicated model (one page per queue,
//! mapped by one process) is offered, so a process can only lose its own rings.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use belfry_abi::doorbell::{self, DoorbellCells, SLEEP_WORD_OFFSET};
use belfry_abi::pci;
use vm_memory::{FileOffset, MmapRegion};
use vmm_sys_util::eventfd::EventFd;

use super::{DoorbellSource, Ring};

/// The memory of the doorbell BAR, as [`DoorbellCells`].
struct Pages {
    region: MmapRegion,
    count: u32,
}

impl Pages {
    /// The atomic at `offset` in page `index`; `None` past the doorbells.
    fn at<T>(&self, index: u32, offset: u64) -> Option<&T> {
        if index >= self.count {
            return None;
        }
        let off = usize::try_from(u64::from(index) * pci::DOORBELL_PAGE_SIZE + offset).ok()?;
        if off + std::mem::size_of::<T>() > self.region.size() || !off.is_multiple_of(std::mem::align_of::<T>()) {
            return None;
        }
        // SAFETY: `off` is aligned for `T` and in bounds of the mapping (checked above), which
        // lives as long as `self`; the memory is only accessed through atomics here (the guest
        // writes it concurrently, which atomics allow), never through references to plain data.
        Some(unsafe { &*self.region.as_ptr().add(off).cast::<T>() })
    }
}

impl DoorbellCells for Pages {
    fn count(&self) -> u32 {
        self.count
    }
    fn load_value(&self, index: u32) -> u64 {
        self.at::<AtomicU64>(index, 0).map_or(0, |v| v.load(Ordering::Acquire))
    }
    fn store_value(&self, index: u32, value: u64) {
        if let Some(v) = self.at::<AtomicU64>(index, 0) {
            v.store(value, Ordering::Release);
        }
    }
    fn load_sleep(&self, index: u32) -> u32 {
        self.at::<AtomicU32>(index, SLEEP_WORD_OFFSET).map_or(0, |v| v.load(Ordering::Acquire))
    }
    fn store_sleep(&self, index: u32, word: u32) {
        if let Some(v) = self.at::<AtomicU32>(index, SLEEP_WORD_OFFSET) {
            v.store(word, Ordering::Release);
        }
    }
    fn full_fence(&self) {
        fence(Ordering::SeqCst);
    }
}

/// Doorbells in memory shared with the client.
pub struct SharedDoorbells {
    file: File,
    pages: Pages,
    /// The values the command processor last saw (its thread, and resets).
    seen: Mutex<Vec<u64>>,
    /// Written by `DB_WAKE` and trapped writes.
    wake: EventFd,
    budget: Duration,
    asleep: AtomicBool,
}

impl SharedDoorbells {
    /// `count` zeroed doorbells in a sealed memfd of the BAR's size; the command processor
    /// polls for `budget` after activity.
    pub fn new(name: &str, count: u32, budget: Duration) -> std::io::Result<Self> {
        let size = pci::doorbell_bar_size(count);
        let cname = std::ffi::CString::new(format!("{name}-doorbells")).map_err(std::io::Error::other)?;
        // SAFETY: `cname` is a valid C string; the call has no other memory effects.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(size)?;
        // The client must not shrink it under our mapping (SIGBUS) nor grow it.
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: F_ADD_SEALS on an fd we own, with an integer argument.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let len = usize::try_from(size).map_err(std::io::Error::other)?;
        let region = MmapRegion::from_file(FileOffset::new(file.try_clone()?, 0), len)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(SharedDoorbells {
            file,
            pages: Pages { region, count },
            seen: Mutex::new(vec![0; count as usize]),
            wake: EventFd::new(libc::EFD_NONBLOCK)?,
            budget,
            asleep: AtomicBool::new(false),
        })
    }

    /// Whether the command processor published its sleep and has not woken since.
    pub fn asleep(&self) -> bool {
        self.asleep.load(Ordering::Acquire)
    }

    /// The sleep word of doorbell `index` (what the library reads after ringing).
    pub fn sleep_word(&self, index: u32) -> u32 {
        self.pages.load_sleep(index)
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Vec<u64>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn scan(&self) -> Vec<(u32, u64)> {
        let mut rung = Vec::new();
        doorbell::scan(&self.pages, &mut self.seen(), |i, v| rung.push((i, v)));
        rung
    }

    fn awake(&self) {
        if self.asleep.swap(false, Ordering::AcqRel) {
            doorbell::publish_awake(&self.pages);
        }
    }
}

impl DoorbellSource for SharedDoorbells {
    fn count(&self) -> u32 {
        self.pages.count
    }

    fn wake_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    fn take_rung(&self) -> Vec<(u32, u64)> {
        let _ = self.wake.read();
        self.awake();
        self.scan()
    }

    fn poll_budget(&self) -> Option<Duration> {
        Some(self.budget)
    }

    fn poll(&self) -> Vec<(u32, u64)> {
        self.scan()
    }

    fn try_sleep(&self) -> Vec<(u32, u64)> {
        let mut rung = Vec::new();
        self.asleep.store(true, Ordering::Release);
        doorbell::publish_sleep(&self.pages, &mut self.seen(), |i, v| rung.push((i, v)));
        if !rung.is_empty() {
            self.awake();
        }
        rung
    }

    fn connected(&self, index: u32) {
        let mut seen = self.seen();
        self.pages.store_value(index, 0);
        if let Some(s) = seen.get_mut(index as usize) {
            *s = 0;
        }
    }

    fn ring(&self, index: u32, value: u64) -> Ring {
        self.pages.store_value(index, value);
        self.wake();
        Ring::CommandProcessor
    }

    fn value(&self, index: u32) -> u64 {
        self.pages.load_value(index)
    }

    fn wake(&self) {
        let _ = self.wake.write(1);
    }

    fn reset(&self) {
        let mut seen = self.seen();
        for index in 0..self.pages.count {
            self.pages.store_value(index, 0);
        }
        seen.iter_mut().for_each(|s| *s = 0);
        self.asleep.store(false, Ordering::Release);
        doorbell::publish_awake(&self.pages);
    }

    fn region_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.file.as_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use belfry_abi::doorbell::{ASLEEP, AWAKE};

    fn doorbells() -> SharedDoorbells {
        SharedDoorbells::new("test", 3, Duration::from_micros(100)).unwrap()
    }

    #[test]
    fn a_store_is_a_ring_seen_once_by_polling() {
        let db = doorbells();
        assert!(db.poll().is_empty());
        db.pages.store_value(1, 5);
        db.pages.store_value(2, 9);
        assert_eq!(db.poll(), vec![(1, 5), (2, 9)]);
        assert!(db.poll().is_empty());
        db.pages.store_value(1, 6);
        assert_eq!(db.poll(), vec![(1, 6)]);
    }

    #[test]
    fn sleeping_publishes_the_sleep_word_in_every_page_and_waking_clears_it() {
        let db = doorbells();
        assert!(db.try_sleep().is_empty());
        assert!(db.asleep());
        assert!((0..3).all(|i| db.sleep_word(i) == ASLEEP));
        // A ring now finds the CMP asleep (the library then writes DB_WAKE).
        assert!(doorbell::ring(&db.pages, 0, 1));
        db.wake();
        assert_eq!(db.take_rung(), vec![(0, 1)]);
        assert!(!db.asleep());
        assert!((0..3).all(|i| db.sleep_word(i) == AWAKE));
        assert!(!doorbell::ring(&db.pages, 0, 2));
    }

    #[test]
    fn a_ring_found_while_publishing_the_sleep_keeps_the_cmp_awake() {
        let db = doorbells();
        db.pages.store_value(2, 3);
        assert_eq!(db.try_sleep(), vec![(2, 3)]);
        assert!(!db.asleep());
        assert_eq!(db.sleep_word(2), AWAKE);
    }

    #[test]
    fn a_connected_doorbell_notices_a_repeated_value() {
        let db = doorbells();
        db.pages.store_value(0, 7);
        assert_eq!(db.poll(), vec![(0, 7)]);
        db.connected(0);
        assert!(db.poll().is_empty());
        db.pages.store_value(0, 7);
        assert_eq!(db.poll(), vec![(0, 7)]);
    }

    #[test]
    fn the_memfd_is_sealed_against_resizing() {
        let db = doorbells();
        let size = pci::doorbell_bar_size(3);
        assert_eq!(db.file.metadata().unwrap().len(), size);
        assert!(db.file.set_len(size / 2).is_err());
        assert!(db.file.set_len(size * 2).is_err());
    }

    #[test]
    fn trapped_writes_and_reset() {
        let db = doorbells();
        db.ring(1, 4);
        assert_eq!(db.value(1), 4);
        assert_eq!(db.take_rung(), vec![(1, 4)]);
        db.pages.store_value(0, 8);
        db.reset();
        assert_eq!(db.value(0), 0);
        assert!(db.poll().is_empty());
    }
}
