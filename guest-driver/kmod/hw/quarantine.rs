// SPDX-License-Identifier: GPL-2.0

//! What the device may still reach after it refused (or did not answer) its destroy, kept
//! until the device is reset (from then on, what a destroy leaves is released at once: the
//! device forgot every object of the binding), and the module-wide counters of `TEARDOWN_DEBUG`: quarantined queues, contexts and fence pages, objects held and released, and the
//! mailbox's timeouts, mismatched completions and commands refused while wedged.

use kernel::{
    prelude::*,
    sync::atomic::{Atomic, Relaxed},
};

use crate::abi::uapi_debug;

/// What a quarantined object was, for the counters.
#[derive(Clone, Copy)]
pub(crate) enum Kept {
    /// A queue: ring, ring control, packets, progress and MonitoredValue pages.
    Queue,
    /// A context: page tables and ids.
    Context,
    /// A page of fences (CurrentValue and MonitoredValue pages) one of which the device did not
    /// confirm unregistering.
    FencePage,
    /// A page a quarantined queue may still read that the queue does not own (the paging
    /// queue's command page): counted with that queue, not again.
    QueuePage,
}

/// A mailbox outcome counted by [`count_mailbox`].
#[derive(Clone, Copy)]
pub(crate) enum Mailbox {
    /// No completion within the timeout.
    Timeout,
    /// A completion naming another sequence number.
    Mismatch,
    /// Refused because the mailbox was wedged.
    RefusedWedged,
}

/// Module-wide counters, in `TeardownDebug` field order.
static QUEUES: Atomic<u32> = Atomic::new(0);
static CONTEXTS: Atomic<u32> = Atomic::new(0);
static FENCE_PAGES: Atomic<u32> = Atomic::new(0);
static HELD: Atomic<u32> = Atomic::new(0);
static RELEASED: Atomic<u32> = Atomic::new(0);
static TIMEOUTS: Atomic<u32> = Atomic::new(0);
static MISMATCHES: Atomic<u32> = Atomic::new(0);
static REFUSED: Atomic<u32> = Atomic::new(0);

/// Counts one mailbox outcome.
pub(crate) fn count_mailbox(what: Mailbox) {
    let c = match what {
        Mailbox::Timeout => &TIMEOUTS,
        Mailbox::Mismatch => &MISMATCHES,
        Mailbox::RefusedWedged => &REFUSED,
    };
    c.fetch_add(1, Relaxed);
}

/// The counters now (`TEARDOWN_DEBUG`).
pub(crate) fn stats() -> uapi_debug::TeardownDebug {
    uapi_debug::TeardownDebug {
        queues_quarantined: QUEUES.load(Relaxed),
        contexts_quarantined: CONTEXTS.load(Relaxed),
        quarantine_held: HELD.load(Relaxed),
        quarantine_released: RELEASED.load(Relaxed),
        mailbox_timeouts: TIMEOUTS.load(Relaxed),
        mailbox_mismatches: MISMATCHES.load(Relaxed),
        mailbox_refused_wedged: REFUSED.load(Relaxed),
        fence_pages_quarantined: FENCE_PAGES.load(Relaxed),
    }
}

/// The objects of one bound device kept until its reset. Dropped with the device's objects,
/// after the unbind reset the device; only then is what it holds freed — or earlier, by
/// [`Self::forget`], once a reset with bus mastering off (a function reset the module was told
/// about, or the unbind's own) made the device forget every object of the binding: the device
/// knows no address of what the quarantine holds, so from then on nothing is kept.
pub(crate) struct Quarantine {
    /// The objects, type-erased (their `Drop` frees them).
    items: KVec<KBox<dyn Send>>,
    /// The device forgot every object of the binding ([`Self::forget`]): an unconfirmed
    /// destroy frees at once.
    forgotten: bool,
}

impl Quarantine {
    /// Empty.
    pub(crate) fn new() -> Self {
        Self {
            items: KVec::new(),
            forgotten: false,
        }
    }

    /// Whether the device forgot every object of the binding ([`Self::forget`]): nothing it
    /// did not confirm destroying is kept any more.
    pub(crate) fn forgotten(&self) -> bool {
        self.forgotten
    }

    /// The device forgot every object of the binding (it was reset with bus mastering off):
    /// what the quarantine holds is handed back
    /// (counted released) for the caller to drop outside its locks, and nothing is kept from
    /// now on.
    pub(crate) fn forget(&mut self) -> KVec<KBox<dyn Send>> {
        self.forgotten = true;
        let items = core::mem::take(&mut self.items);
        // CAST: at most one entry per queue and context id the device had.
        let n = items.len() as u32;
        HELD.fetch_sub(n, Relaxed);
        RELEASED.fetch_add(n, Relaxed);
        items
    }

    /// Keeps `item` until the quarantine is dropped; with no memory to record it, it is
    /// leaked, never freed. Once the device forgot every object ([`Self::forget`]) the item
    /// is freed at once instead, counted released and not quarantined.
    pub(crate) fn keep<T: Send + 'static>(&mut self, what: Kept, item: T) {
        if self.forgotten {
            RELEASED.fetch_add(1, Relaxed);
            drop(item);
            return;
        }
        let kind = match what {
            Kept::Queue => Some(&QUEUES),
            Kept::Context => Some(&CONTEXTS),
            Kept::FencePage => Some(&FENCE_PAGES),
            Kept::QueuePage => None,
        };
        if let Some(count) = kind {
            count.fetch_add(1, Relaxed);
        }
        let Ok(slot) = KBox::<T>::new_uninit(GFP_KERNEL) else {
            core::mem::forget(item);
            return;
        };
        let boxed: KBox<T> = KBox::write(slot, item);
        let boxed: KBox<dyn Send> = boxed;
        if self.items.reserve(1, GFP_KERNEL).is_err() {
            let _ = KBox::leak(boxed);
            return;
        }
        // Room reserved above: cannot fail.
        let _ = self.items.push(boxed, GFP_KERNEL);
        HELD.fetch_add(1, Relaxed);
    }
}

impl Drop for Quarantine {
    fn drop(&mut self) {
        // CAST: at most one entry per queue and context id the device had.
        let n = self.items.len() as u32;
        self.items.clear();
        HELD.fetch_sub(n, Relaxed);
        RELEASED.fetch_add(n, Relaxed);
    }
}
