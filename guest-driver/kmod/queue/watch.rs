// SPDX-License-Identifier: GPL-2.0

//! Domain layer: hang detection (ENG-01). With user-mode submission the module does not see
//! when an engine goes busy or idle, so it watches progress instead: every user-mode queue is
//! registered here with its engine, its progress fence's CurrentValue page and its
//! LastQueuedValue page. An engine is pending while the device holds work of one of its queues
//! (in a context neither faulted nor suspended); it made progress when any of its queues'
//! CurrentValue moved. An engine pending for the `hang_timeout_ms` module parameter without
//! progress is reported by [`Watch::tick`] (the caller resets it). Engines the device reported
//! `Hung` (engine-state records, noted by the hard interrupt handler) are taken by
//! [`Watch::take_device_hangs`]. The counters are `RECOVERY_DEBUG`'s.
//!
//! LastQueuedValue is the process's to write, so it is only a hint: a queue whose
//! LastQueuedValue is past its CurrentValue is asked about (`QUERY_QUEUE`,
//! [`devstate::has_work`]), and only the device's answer makes it pending — for the hang clock,
//! the engine's F1 and the device's D3 alike. A false claim costs the device one query per
//! claim and half a timeout, never a reset or a refused power transition. Lock order: the
//! hardware mutex, then the registry.

use kernel::{
    new_mutex,
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Full, Relaxed, Release},
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
    hw::{command::HwGuard, core::Core, dmamem::DmaBuf, objects::Objects},
};

use super::{devstate, hangclock::HangClock};

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
    /// The device's last "no work" answer for a hint: the CurrentValue and LastQueuedValue it
    /// answered, and when (ms). The same hint is not asked about again within half a timeout.
    idle_answer: Option<(u64, u64, u64)>,
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
    /// The `KICK_QUEUE` count engine `e`'s last F1 request carried (set before its bit).
    f1_request_kicks: [Atomic<u64>; ENGINES],
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
                f1_request_kicks: [const { Atomic::new(0) }; ENGINES],
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
        let e = Entry {
            w,
            seen,
            idle_answer: None,
        };
        self.inner.lock().entries.push(e, GFP_KERNEL)?;
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
        let timeout = u64::from(timeout_ms);
        let mut progressed = [false; ENGINES];
        // The queues whose hint says pending: (engine, queue, CurrentValue, LastQueuedValue).
        let mut ask = KVec::new();
        let now = {
            let mut inner = self.inner.lock();
            let now = now_ms(inner.origin);
            let objects = self.core.objects();
            for e in inner.entries.iter_mut() {
                let current = e.w.progress.read64(0);
                // CAST: engines are below `ENGINES`.
                let engine = e.w.engine as usize;
                if current != e.seen {
                    e.seen = current;
                    if let Some(p) = progressed.get_mut(engine) {
                        *p = true;
                    }
                }
                let ctx = e.w.context;
                if objects.is_faulted(ctx) || objects.is_suspended(ctx) {
                    continue;
                }
                let last = e.w.last_queued.read64(0);
                if window::reached(wrap32, current, last) {
                    continue;
                }
                let answered = e.idle_answer.is_some_and(|(c, l, at)| {
                    (c, l) == (current, last) && now.saturating_sub(at) < timeout / 2
                });
                if !answered && ask.push((engine, e.w.queue, current, last), GFP_KERNEL).is_err() {
                    break;
                }
            }
            now
        };
        let (pending, idle) = self.device_verdicts(&ask);
        let mut hung = KVec::new();
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        for (queue, current, last) in idle {
            if let Some(e) = inner.entries.iter_mut().find(|e| e.w.queue == queue) {
                e.idle_answer = Some((current, last, now));
            }
        }
        for (engine, clock) in (0..ENGINE_COUNT).zip(inner.clocks.iter_mut()) {
            // CAST: below `ENGINES`.
            let (p, moved) = (pending[engine as usize], progressed[engine as usize]);
            if let Some(waited) = clock.look(now, p, moved, timeout) {
                if hung.push((engine, u32::try_from(waited).unwrap_or(u32::MAX)), GFP_KERNEL).is_err() {
                    break;
                }
            }
        }
        hung
    }

    /// The device's answers for the queues of `ask` (from [`Self::tick`]; the registry not
    /// locked): per engine, whether it holds work of one of them (one such queue is enough),
    /// and the queues it holds none of, with the hint that was asked about. A device that cannot
    /// answer makes nothing pending: its loss is the watchdog's other path.
    fn device_verdicts(
        &self,
        ask: &[(usize, QueueId, u64, u64)],
    ) -> ([bool; ENGINES], KVec<(QueueId, u64, u64)>) {
        let mut pending = [false; ENGINES];
        let mut idle = KVec::new();
        if ask.is_empty() {
            return (pending, idle);
        }
        let Ok(mut hw) = self.core.hw() else {
            return (pending, idle);
        };
        for &(engine, queue, current, last) in ask {
            if pending.get(engine).copied().unwrap_or(true) {
                continue;
            }
            match devstate::has_work(&mut hw, queue) {
                Ok(true) => pending[engine] = true,
                Ok(false) => {
                    if idle.push((queue, current, last), GFP_KERNEL).is_err() {
                        break;
                    }
                }
                Err(_) => {}
            }
        }
        (pending, idle)
    }

    /// The device reported engine `engine` Hung (hard interrupt handler).
    pub(crate) fn note_device_hang(&self, engine: u32) {
        set_bit(&self.device_hangs, 1u32.checked_shl(engine).unwrap_or(0));
    }

    /// The device asked for engine `engine` to go to F1 after running `kicks` `KICK_QUEUE`
    /// commands (hard interrupt handler).
    pub(crate) fn note_f1_request(&self, engine: u32, kicks: u64) {
        // CAST: engine indexes are small; an unknown engine's request has no bit either.
        if let Some(k) = self.f1_request_kicks.get(engine as usize) {
            k.store(kicks, Release);
        }
        set_bit(&self.f1_requests, 1u32.checked_shl(engine).unwrap_or(0));
    }

    /// Takes the engines the device asked to put in F1 since the last call (a bitmap).
    pub(crate) fn take_f1_requests(&self) -> u32 {
        self.f1_requests.xchg(0, Full)
    }

    /// The `KICK_QUEUE` count engine `engine`'s last F1 request carried.
    pub(crate) fn f1_request_kicks(&self, engine: u32) -> u64 {
        // CAST: as in `note_f1_request`.
        self.f1_request_kicks.get(engine as usize).map_or(0, |k| k.load(Acquire))
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

    /// The watched queues that `filter` keeps and whose LastQueuedValue is past their
    /// CurrentValue: the hint of work, for the device to confirm.
    fn claiming(&self, filter: impl Fn(&Watched, &Objects) -> bool) -> Result<KVec<QueueId>> {
        let wrap32 = self.core.wrap32();
        let inner = self.inner.lock();
        let objects = self.core.objects();
        let mut out = KVec::new();
        for e in inner.entries.iter().filter(|e| filter(&e.w, &objects)) {
            if !window::reached(wrap32, e.w.progress.read64(0), e.w.last_queued.read64(0)) {
                out.push(e.w.queue, GFP_KERNEL)?;
            }
        }
        Ok(out)
    }

    /// Whether the device holds work of one of `queues`; a device that cannot answer (or no
    /// memory to look) counts as busy, so no power transition starts on a guess.
    fn any_has_work(hw: &mut HwGuard<'_>, queues: Result<KVec<QueueId>>) -> bool {
        let Ok(queues) = queues else {
            return true;
        };
        queues.iter().any(|&q| devstate::has_work(hw, q).unwrap_or(true))
    }

    /// Whether the device holds work of a watched queue on `engine` whose LastQueuedValue says
    /// it submitted some (F1 entry, with the hardware locked).
    pub(crate) fn pending_on(&self, hw: &mut HwGuard<'_>, engine: u32) -> bool {
        Self::any_has_work(hw, self.claiming(|w, _| w.engine == engine))
    }

    /// Whether the device holds work of a watched queue of a running context (neither faulted
    /// nor suspended) whose LastQueuedValue says it submitted some: the device is not idle.
    pub(crate) fn pending_any(&self) -> bool {
        let claiming = self.claiming(|w, o| !o.is_faulted(w.context) && !o.is_suspended(w.context));
        if claiming.as_ref().is_ok_and(|q| q.is_empty()) {
            return false;
        }
        match self.core.hw() {
            Ok(mut hw) => Self::any_has_work(&mut hw, claiming),
            Err(_) => true,
        }
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
