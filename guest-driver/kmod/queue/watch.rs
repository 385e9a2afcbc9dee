// SPDX-License-Identifier: GPL-2.0

//! Domain layer: hang detection (ENG-01). With user-mode submission the module does not see
//! when an engine goes busy or idle, so it watches progress instead: every user-mode queue is
//! registered here with its engine, its progress fence's CurrentValue page and its
//! LastQueuedValue page. An engine is pending while one of its queues (in a context neither
//! faulted nor suspended) has LastQueuedValue past CurrentValue; it made progress when any of
//! its queues' CurrentValue moved. An engine pending for the `hang_timeout_ms` module parameter
//! without progress is reported by [`Watch::tick`] (the caller resets it). Engines the device
//! reported `Hung` (engine-state records, noted by the hard interrupt handler) are taken by
//! [`Watch::take_device_hangs`]. The counters are `RECOVERY_DEBUG`'s.

use kernel::{
    new_mutex,
    prelude::*,
    sync::{
        atomic::{Atomic, Full, Relaxed},
        Arc, Mutex,
    },
    time::{Instant, Monotonic},
};

/// Milliseconds since the module's first look (a monotonic origin for the hang clocks).
fn now_ms(origin: Instant<Monotonic>) -> u64 {
    u64::try_from(origin.elapsed().as_millis()).unwrap_or(0)
}

use crate::{
    abi::{
        engine::ENGINE_COUNT,
        ids::{ContextId, QueueId},
        uapi_debug,
    },
    fence::window,
    hw::{core::Core, dmamem::DmaBuf},
};

use super::hangclock::HangClock;

/// Engines, as an array length.
// CAST: 2.
const ENGINES: usize = ENGINE_COUNT as usize;

/// A user-mode queue whose progress is watched.
pub(crate) struct Watched {
    /// Device queue id.
    pub(crate) queue: QueueId,
    /// Its device context.
    pub(crate) context: ContextId,
    /// Its engine.
    pub(crate) engine: u32,
    /// Its progress fence's CurrentValue page (offset 0).
    pub(crate) progress: Arc<DmaBuf>,
    /// Its doorbell's LastQueuedValue page (offset 0), written by the library.
    pub(crate) last_queued: Arc<DmaBuf>,
}

/// A watched queue and the CurrentValue last seen.
struct Entry {
    /// The queue.
    w: Watched,
    /// CurrentValue at the last tick.
    seen: u64,
}

/// The registry and the per-engine clocks.
struct Inner {
    /// Watched queues.
    entries: KVec<Entry>,
    /// When the registry was made: the hang clocks' origin.
    origin: Instant<Monotonic>,
    /// Per engine: the hang clock.
    clocks: [HangClock; ENGINES],
    /// The counters.
    stats: uapi_debug::RecoveryDebug,
    /// The power counters and steps.
    power: uapi_debug::PowerDebug,
}

/// Hang detection of one device.
#[pin_data]
pub(crate) struct Watch {
    /// The core (faulted and suspended contexts, the 32-bit mode).
    core: Arc<Core>,
    /// Registry, clocks, counters.
    #[pin]
    inner: Mutex<Inner>,
    /// Bit `e`: the device reported engine `e` Hung (set in hard-IRQ context).
    device_hangs: Atomic<u32>,
    /// Bit `e`: the device asked for engine `e` to go to F1 (set in hard-IRQ context).
    f1_requests: Atomic<u32>,
}

/// Sets `bit` in `word` (hard-IRQ safe).
fn set_bit(word: &Atomic<u32>, bit: u32) {
    let mut now = word.load(Relaxed);
    while let Err(seen) = word.cmpxchg(now, now | bit, Full) {
        now = seen;
    }
}

impl Watch {
    /// An empty registry.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(core: Arc<Core>) -> Result<Arc<Self>> {
        Arc::pin_init(
            try_pin_init!(Self {
                core,
                inner <- new_mutex!(Inner {
                    entries: KVec::new(),
                    origin: Instant::now(),
                    clocks: [HangClock::default(); ENGINES],
                    stats: uapi_debug::RecoveryDebug {
                        last_lost_context: u32::MAX,
                        ..Default::default()
                    },
                    power: uapi_debug::PowerDebug::default(),
                }),
                device_hangs: Atomic::new(0),
                f1_requests: Atomic::new(0),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// Starts watching `w`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn add(&self, w: Watched) -> Result {
        let seen = w.progress.read64(0);
        self.inner.lock().entries.push(Entry { w, seen }, GFP_KERNEL)?;
        Ok(())
    }

    /// Stops watching queue `queue`.
    pub(crate) fn remove(&self, queue: QueueId) {
        self.inner.lock().entries.retain(|e| e.w.queue != queue);
    }

    /// One look at every engine: the engines pending without progress for `timeout_ms`, each
    /// with how long (ms). A reported engine's clock restarts.
    pub(crate) fn tick(&self, timeout_ms: u32) -> KVec<(u32, u32)> {
        let wrap32 = self.core.wrap32();
        let mut hung = KVec::new();
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let objects = self.core.objects();
        let now = now_ms(inner.origin);
        for (engine, clock) in (0..ENGINE_COUNT).zip(inner.clocks.iter_mut()) {
            let (mut pending, mut progressed) = (false, false);
            for e in inner.entries.iter_mut().filter(|e| e.w.engine == engine) {
                let current = e.w.progress.read64(0);
                if current != e.seen {
                    e.seen = current;
                    progressed = true;
                }
                let ctx = e.w.context;
                if objects.is_faulted(ctx) || objects.is_suspended(ctx) {
                    continue;
                }
                pending |= !window::reached(wrap32, current, e.w.last_queued.read64(0));
            }
            if let Some(waited) = clock.look(now, pending, progressed, u64::from(timeout_ms)) {
                if hung.push((engine, u32::try_from(waited).unwrap_or(u32::MAX)), GFP_KERNEL).is_err() {
                    break;
                }
            }
        }
        hung
    }

    /// The device reported engine `engine` Hung (hard interrupt handler).
    pub(crate) fn note_device_hang(&self, engine: u32) {
        set_bit(&self.device_hangs, 1u32.checked_shl(engine).unwrap_or(0));
    }

    /// The device asked for engine `engine` to go to F1 (hard interrupt handler).
    pub(crate) fn note_f1_request(&self, engine: u32) {
        set_bit(&self.f1_requests, 1u32.checked_shl(engine).unwrap_or(0));
    }

    /// Takes the engines the device asked to put in F1 since the last call (a bitmap).
    pub(crate) fn take_f1_requests(&self) -> u32 {
        self.f1_requests.xchg(0, Full)
    }

    /// Whether a device-reported hang or F1 request waits for the interrupt thread.
    pub(crate) fn thread_work_pending(&self) -> bool {
        self.device_hangs.load(Relaxed) != 0 || self.f1_requests.load(Relaxed) != 0
    }

    /// The watched queues on engine `engine`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn queues_on(&self, engine: u32) -> Result<KVec<QueueId>> {
        let inner = self.inner.lock();
        let mut out = KVec::new();
        for e in inner.entries.iter().filter(|e| e.w.engine == engine) {
            out.push(e.w.queue, GFP_KERNEL)?;
        }
        Ok(out)
    }

    /// The engine of watched queue `queue`.
    pub(crate) fn engine_of(&self, queue: QueueId) -> Option<u32> {
        let inner = self.inner.lock();
        inner.entries.iter().find(|e| e.w.queue == queue).map(|e| e.w.engine)
    }

    /// Whether a watched queue on `engine` has submitted work its progress has not reached.
    pub(crate) fn pending_on(&self, engine: u32) -> bool {
        let wrap32 = self.core.wrap32();
        let inner = self.inner.lock();
        inner.entries.iter().filter(|e| e.w.engine == engine).any(|e| {
            !window::reached(wrap32, e.w.progress.read64(0), e.w.last_queued.read64(0))
        })
    }

    /// Whether a watched queue of a running context (neither faulted nor suspended) has
    /// submitted work its progress has not reached: the device is not idle.
    pub(crate) fn pending_any(&self) -> bool {
        let wrap32 = self.core.wrap32();
        let inner = self.inner.lock();
        let objects = self.core.objects();
        inner.entries.iter().any(|e| {
            let ctx = e.w.context;
            !objects.is_faulted(ctx)
                && !objects.is_suspended(ctx)
                && !window::reached(wrap32, e.w.progress.read64(0), e.w.last_queued.read64(0))
        })
    }

    /// Records power step `code` on `engine` and updates the power counters.
    pub(crate) fn power_step(&self, code: u8, engine: u32) {
        let mut inner = self.inner.lock();
        let p = &mut inner.power;
        match code {
            uapi_debug::POWER_STEP_ENGINE_F1 => p.engine_f1 += 1,
            uapi_debug::POWER_STEP_ENGINE_F0 => p.engine_f0 += 1,
            uapi_debug::POWER_STEP_F1_ABORTED => p.f1_aborted += 1,
            _ => {}
        }
        // CAST: engines are below 256.
        let step = u16::from(code) << 8 | (engine & 0xff) as u16;
        if p.step_count as usize >= uapi_debug::POWER_STEPS {
            p.steps.copy_within(1.., 0);
            p.steps[uapi_debug::POWER_STEPS - 1] = step;
        } else {
            p.steps[p.step_count as usize] = step;
        }
        p.step_count = p.step_count.wrapping_add(1);
    }

    /// A copy of the power counters and steps.
    pub(crate) fn power(&self) -> uapi_debug::PowerDebug {
        self.inner.lock().power
    }

    /// Takes the engines the device reported Hung since the last call (a bitmap).
    pub(crate) fn take_device_hangs(&self) -> u32 {
        self.device_hangs.xchg(0, Full)
    }

    /// Updates the counters.
    pub(crate) fn count(&self, f: impl FnOnce(&mut uapi_debug::RecoveryDebug)) {
        f(&mut self.inner.lock().stats);
    }

    /// A copy of the counters.
    pub(crate) fn stats(&self) -> uapi_debug::RecoveryDebug {
        self.inner.lock().stats
    }
}
