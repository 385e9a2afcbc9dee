// SPDX-License-Identifier: GPL-2.0

//! Debug visibility of process termination (`release` of a file that had queues): per-device
//! counts of normal and abnormal terminations, how many releases are in their drain wait, and
//! the ordered steps of the last termination with the device's mapped GPU pages at each step
//! (`DEBUG_STATS`), so tests can check the order and that ring allocations stay resident
//! until the objects are destroyed.

use kernel::{
    new_mutex,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc, Mutex,
    },
};

use crate::{abi::uapi_debug, hw::core::Core};

/// Steps recorded per termination.
const MAX_STEPS: usize = 8;

/// One termination as it happens.
#[derive(Clone, Copy, Default)]
pub(crate) struct Record {
    /// `uapi::TERM_STEP_*`, in order.
    steps: [u8; MAX_STEPS],
    /// Mapped GPU pages when each step was recorded.
    pages: [u64; MAX_STEPS],
    /// Steps recorded.
    len: usize,
    /// Queues whose work was pending when the drain began.
    pub(crate) waited: u32,
    /// Queues whose drain timed out.
    pub(crate) timed_out: u32,
}

impl Record {
    /// Records `step` with the device's mapped GPU pages now.
    pub(crate) fn step(&mut self, core: &Core, step: u8) {
        let Some(slot) = self.steps.get_mut(self.len) else {
            return;
        };
        *slot = step;
        let mut pages = 0;
        core.stats(|ev| pages = ev.gpu_pages);
        self.pages[self.len] = pages;
        self.len += 1;
    }
}

/// Counters of one device.
struct Counters {
    /// Normal terminations.
    normal: u64,
    /// Abnormal terminations.
    abnormal: u64,
    /// The last termination.
    last: Record,
}

/// The termination statistics of one device, shared by its files.
#[pin_data]
pub(crate) struct TermStats {
    /// Counters and the last record.
    #[pin]
    counters: Mutex<Counters>,
    /// Releases in their drain wait.
    draining: Atomic<u32>,
}

impl TermStats {
    /// Zeroed statistics.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            try_pin_init!(Self {
                counters <- new_mutex!(Counters {
                    normal: 0,
                    abnormal: 0,
                    last: Record::default(),
                }),
                draining: Atomic::new(0),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// A release enters (`true`) or leaves its drain wait.
    pub(crate) fn draining(&self, entering: bool) {
        if entering {
            self.draining.add(1, Relaxed);
        } else {
            self.draining.fetch_sub(1, Relaxed);
        }
    }

    /// Publishes a finished termination.
    pub(crate) fn publish(&self, record: Record, normal: bool) {
        let mut c = self.counters.lock();
        if normal {
            c.normal += 1;
        } else {
            c.abnormal += 1;
        }
        c.last = record;
    }

    /// Fills the termination fields of `DEBUG_STATS`.
    pub(crate) fn fill(&self, s: &mut uapi_debug::DebugStats) {
        let c = self.counters.lock();
        s.normal_terminations = c.normal;
        s.abnormal_terminations = c.abnormal;
        s.last_termination_steps = c.last.steps;
        s.last_termination_pages = c.last.pages;
        s.last_termination_waited = c.last.waited;
        s.last_termination_timed_out = c.last.timed_out;
        s.terminations_draining = self.draining.load(Relaxed);
    }
}
