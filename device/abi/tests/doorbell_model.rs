//! Model check (loom) of the shared-doorbell sleep handshake in `belfry_abi::doorbell`: every
//! interleaving and every store-buffer outcome the C11 model allows of one library ring against
//! the command processor's last poll and its publishing of the sleep. The property: the CMP
//! sees the ring, or the library sees the CMP asleep and notifies it — a ring is never lost.
//!
//! The broken variants drop one of the two full fences (the library's after its store, or the
//! CMP's after publishing the sleep) and expect the checker to find the lost wake-up.
//! `cargo test -p belfry-abi --test doorbell_model` runs all three.

use belfry_abi::doorbell::{self, DoorbellCells};
use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use loom::sync::Arc;

/// One doorbell page: its value and sleep word.
struct Page {
    value: AtomicU64,
    sleep: AtomicU32,
}

/// One side's view of the page; `fenced: false` removes that side's full fence.
struct View {
    page: Arc<Page>,
    fenced: bool,
}

impl DoorbellCells for View {
    fn count(&self) -> u32 {
        1
    }
    fn load_value(&self, _: u32) -> u64 {
        self.page.value.load(Ordering::Acquire)
    }
    fn store_value(&self, _: u32, value: u64) {
        self.page.value.store(value, Ordering::Release);
    }
    fn load_sleep(&self, _: u32) -> u32 {
        self.page.sleep.load(Ordering::Acquire)
    }
    fn store_sleep(&self, _: u32, word: u32) {
        self.page.sleep.store(word, Ordering::Release);
    }
    fn full_fence(&self) {
        if self.fenced {
            fence(Ordering::SeqCst);
        }
    }
}

/// Explores every execution of one ring against the CMP's poll and sleep; panics with "lost
/// wake-up" when one loses the ring.
fn check(library_fence: bool, cmp_fence: bool) {
    loom::model(move || {
        let page = Arc::new(Page { value: AtomicU64::new(0), sleep: AtomicU32::new(doorbell::AWAKE) });
        let notified = Arc::new(AtomicBool::new(false));
        let library = {
            let view = View { page: page.clone(), fenced: library_fence };
            let notified = notified.clone();
            loom::thread::spawn(move || {
                if doorbell::ring(&view, 0, 1) {
                    notified.store(true, Ordering::Release);
                }
            })
        };
        let cmp = View { page, fenced: cmp_fence };
        let mut seen = [0u64];
        let mut noticed = doorbell::scan(&cmp, &mut seen, |_, _| {}) > 0;
        if !noticed {
            noticed = doorbell::publish_sleep(&cmp, &mut seen, |_, _| {}) > 0;
        }
        library.join().unwrap();
        // The CMP went to sleep without seeing the ring: only a notification wakes it.
        assert!(noticed || notified.load(Ordering::Acquire), "lost wake-up: the CMP sleeps on an unseen ring");
    });
}

#[test]
fn a_ring_is_never_lost_with_both_fences() {
    check(true, true);
}

#[test]
#[should_panic(expected = "lost wake-up")]
fn without_the_cmp_fence_the_checker_finds_the_lost_wake_up() {
    check(true, false);
}

#[test]
#[should_panic(expected = "lost wake-up")]
fn without_the_library_fence_the_checker_finds_the_lost_wake_up() {
    check(false, true);
}
