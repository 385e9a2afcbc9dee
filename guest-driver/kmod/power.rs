// SPDX-License-Identifier: GPL-2.0

//! Domain layer, on top of [`Gpu`]: device power, D0 ↔ D3hot through Linux runtime PM (PWR-01..04).
//! [`DevicePower`] is the owner the PM domain (`bindings::runtime_pm`) calls around the PCI core's
//! own runtime callbacks, and what the front end holds a reference of while an ioctl runs
//! ([`DevicePower::busy`]).
//!
//! D3 entry (the runtime-suspend callback; PWR-01, PWR-02): every connected doorbell reads
//! CONNECTED_NOTIFY first, so a submission rung while the module looks for pending work is either
//! found by the look or notified (the notification resumes the device); the entry is refused with
//! `EBUSY` while a user-mode queue of a running context has submitted work its progress has not
//! reached, a kernel ring of a running context holds entries the device has not executed, or
//! kernel-mode work is held; otherwise (1) every running context is suspended (`SUSPEND_CONTEXT`:
//! the device takes its queues off the runlists; the paging context stays), (2) every connected
//! doorbell is disconnected with DISCONNECTED_RETRY (mappings on the dummy pages), (3) only on a
//! device that loses VRAM in D3 (`CAPS.vram_lost_in_d3`), every allocation resident in VRAM is
//! evicted by the paging queue — the rings of `QUEUE_RING_IN_VRAM` queues among them, their CPU
//! mappings moved to the system pages (steps `D3_EVICT_RINGS`, `D3_EVICT`) — then the hardware is
//! marked D3 (no register access, mailbox commands `EAGAIN`) and the PCI core saves the config
//! space and writes PMCSR = D3hot.
//!
//! D3 exit (PWR-03, PWR-04): any ioctl resumes the device first (the library's connect after it
//! found its doorbell disconnected, or anything else): the PCI core writes D0 and restores the
//! config space, the hardware mark is cleared, (3) what step 3 evicted is paged back in at its
//! offsets, rings first (`D0_RESTORE_RINGS`, `D0_RESTORE`); then the ioctl runs — (4) the connect —
//! and (5) the contexts D3 entry suspended are resumed, after a connect and before any other ioctl
//! (so a wait never waits on a suspended context). Each step is a `POWER_DEBUG` step and the
//! counters are `DEVICE_POWER`'s.
//!
//! System sleep (suspend-to-idle, suspend-to-RAM; `bindings::runtime_pm` wraps the PM domain's
//! `suspend`/`resume` and runs the domain's runtime callbacks itself, as
//! `pm_runtime_force_suspend`/`_resume` would for a driver with `dev_pm_ops`): with user space
//! frozen the module first waits up to `system_sleep_drain_ms` (5 s by default) for pending work
//! to finish (work submitted before the sleep runs to completion: nothing submitted is dropped,
//! and no context is suspended in the middle of a command buffer), refusing the sleep (`EBUSY`)
//! if it does not; then
//! the D3 entry above runs as for a runtime suspend, and the system resume takes the device back
//! through the D3 exit (or leaves it in D3 for runtime PM, if it was runtime-suspended before).
//! Steps `SYSTEM_SUSPEND` and `SYSTEM_RESUME` frame them.

use kernel::{
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
    time::{delay::fsleep, Delta, Instant, Monotonic},
};

use crate::{
    abi::{ids::ContextId, uapi_debug},
    bindings::{
        param,
        runtime_pm::{RpmRef, RuntimePower},
    },
    gpu::Gpu,
    hw::command::HwGuard,
    mm::Moved,
};

/// The autosuspend delay set at probe (user space changes it through `power/`).
pub(crate) const AUTOSUSPEND_DELAY_MS: i32 = 1000;

/// What D3 entry did, which D3 exit undoes.
struct Book {
    /// The counters.
    stats: uapi_debug::DevicePower,
    /// Contexts D3 entry suspended, resumed after the first ioctl in D0.
    contexts: KVec<ContextId>,
    /// Allocations D3 entry evicted from VRAM, with their offsets.
    evicted: KVec<Moved>,
    /// When the running suspend or resume started.
    started: Option<Instant<Monotonic>>,
}

/// Device power of one device.
#[pin_data]
pub(crate) struct DevicePower {
    /// The domain objects.
    gpu: Gpu,
    /// Bookkeeping.
    #[pin]
    book: Mutex<Book>,
}

/// A step's low byte: a count, at most 255.
fn low(n: usize) -> u32 {
    u32::try_from(n.min(255)).unwrap_or(255)
}

/// Nanoseconds since `t`.
fn ns_since(t: Option<Instant<Monotonic>>) -> u64 {
    t.map_or(0, |t| u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

impl DevicePower {
    /// The device power of `gpu`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(gpu: Gpu) -> Result<Arc<Self>> {
        Arc::pin_init(
            try_pin_init!(Self {
                gpu,
                book <- new_mutex!(Book {
                    stats: uapi_debug::DevicePower::default(),
                    contexts: KVec::new(),
                    evicted: KVec::new(),
                    started: None,
                }),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// Holds the device in D0 for one ioctl (`after_connect`: a `CONNECT_DOORBELL`), resuming
    /// it first if it is in D3. The contexts D3 entry suspended are resumed now, or — for a
    /// connect, PWR-04 step 5 after step 4 — when the returned reference is dropped.
    ///
    /// # Errors
    ///
    /// The resume's error.
    pub(crate) fn busy(&self, after_connect: bool) -> Result<Busy<'_>> {
        let rpm = self.gpu.rpm.get()?;
        if !after_connect {
            self.resume_contexts();
        }
        Ok(Busy {
            power: self,
            after_connect,
            _rpm: rpm,
        })
    }

    /// PWR-04 step 5: resumes the contexts D3 entry suspended (failures are logged by the
    /// mailbox; such a context stays suspended).
    fn resume_contexts(&self) {
        let contexts = core::mem::take(&mut self.book.lock().contexts);
        if contexts.is_empty() {
            return;
        }
        let Ok(mut hw) = self.gpu.core.hw() else {
            return;
        };
        for &c in contexts.iter() {
            let _ = self.gpu.doorbells.suspend_context(&mut hw, c, false);
        }
        drop(hw);
        self.gpu.watch.power_step(uapi_debug::POWER_STEP_D0_RESUME_CONTEXTS, low(contexts.len()));
    }

    /// `DEVICE_POWER`.
    pub(crate) fn stats(&self) -> uapi_debug::DevicePower {
        self.book.lock().stats
    }

    /// Whether work is pending: a user-mode queue's submission the device still holds, a
    /// kernel ring with entries the device has not executed, or kernel-mode work held (the
    /// words a process can write only say which queues to ask the device about).
    fn work_pending(&self) -> bool {
        let gpu = &self.gpu;
        gpu.watch.pending_any() || gpu.held.waiting() || gpu.held.rings_busy()
    }

    /// A D3 entry refused for pending work: counted, stepped; the error to return.
    fn refuse(&self) -> Error {
        self.book.lock().stats.refused += 1;
        self.gpu.watch.power_step(uapi_debug::POWER_STEP_D3_REFUSED, 0);
        EBUSY
    }

    /// D3 entry's look for pending work and step 1, with every connected doorbell reading
    /// CONNECTED_NOTIFY from before the look until the contexts are suspended
    /// ([`crate::queue::doorbell::Doorbells::quiesce`]): a submission rung meanwhile is either
    /// found by the look or notified, and the notification resumes the device. The contexts
    /// suspended, and the hardware still locked; on failure none is.
    fn look_then_suspend_contexts(&self) -> Result<(KVec<ContextId>, HwGuard<'_>)> {
        let gpu = &self.gpu;
        gpu.doorbells.quiesce(true);
        let suspended = self.refuse_or_suspend_contexts();
        gpu.doorbells.quiesce(false);
        suspended
    }

    /// Refuses D3 entry for pending work, or suspends every running context but the paging
    /// context (step 1); on failure none stays suspended.
    fn refuse_or_suspend_contexts(&self) -> Result<(KVec<ContextId>, HwGuard<'_>)> {
        let gpu = &self.gpu;
        if self.work_pending() {
            return Err(self.refuse());
        }
        // Test-only: the window between the look and the suspension, widened on a device with
        // test-only faults (`test_d3_look_delay_ms`).
        let delay_ms = gpu.core.info().test_delay_ms(param::test_d3_look_delay_ms_param());
        if delay_ms != 0 {
            fsleep(Delta::from_millis(i64::from(delay_ms)));
        }
        self.book.lock().started = Some(Instant::now());
        let paging = gpu.mm.paging_context();
        let mut hw = gpu.core.hw()?;
        let running = gpu.core.objects().running_contexts()?;
        let mut suspended = KVec::with_capacity(running.len(), GFP_KERNEL)?;
        for &c in running.iter().filter(|&&c| Some(c) != paging) {
            if let Err(e) = gpu.doorbells.suspend_context(&mut hw, c, true) {
                for &s in suspended.iter() {
                    let _ = gpu.doorbells.suspend_context(&mut hw, s, false);
                }
                return Err(e);
            }
            suspended.push(c, GFP_KERNEL)?;
        }
        Ok((suspended, hw))
    }

    /// D3 entry steps 1-3 (see the module documentation); on failure what was done is undone.
    fn enter(&self) -> Result {
        let gpu = &self.gpu;
        // 1. suspend-context for every running context (the paging context pages below).
        let (suspended, mut hw) = self.look_then_suspend_contexts()?;
        gpu.watch.power_step(uapi_debug::POWER_STEP_D3_SUSPEND_CONTEXTS, low(suspended.len()));
        // 2. every doorbell disconnected, RETRY.
        let disconnected = match gpu.doorbells.disconnect_all(&mut hw) {
            Ok(d) => d,
            Err(e) => {
                for &s in suspended.iter() {
                    let _ = gpu.doorbells.suspend_context(&mut hw, s, false);
                }
                return Err(e);
            }
        };
        gpu.watch.power_step(uapi_debug::POWER_STEP_D3_DISCONNECT, low(disconnected.len()));
        drop(hw);
        {
            let mut book = self.book.lock();
            book.contexts = suspended;
            book.stats.last_contexts = u32::try_from(book.contexts.len()).unwrap_or(u32::MAX);
            book.stats.last_doorbells = u32::try_from(disconnected.len()).unwrap_or(u32::MAX);
        }
        // 3. only if VRAM will be lost: evict what lives there.
        if gpu.core.info().caps.vram_lost_in_d3() {
            match gpu.mm.evict_all(&gpu.queue_env()) {
                Ok(moved) => {
                    let rings = moved.iter().filter(|m| m.2).count();
                    gpu.watch.power_step(uapi_debug::POWER_STEP_D3_EVICT_RINGS, low(rings));
                    gpu.watch.power_step(uapi_debug::POWER_STEP_D3_EVICT, low(moved.len()));
                    let mut book = self.book.lock();
                    book.stats.evicted = book.stats.evicted.saturating_add(low(moved.len()));
                    book.evicted = moved;
                }
                Err(e) => {
                    self.resume_contexts();
                    return Err(e);
                }
            }
        }
        gpu.core.hw()?.set_d3(true);
        Ok(())
    }
}

impl RuntimePower for Arc<DevicePower> {
    fn suspend(&self) -> Result {
        self.enter()
    }

    fn suspended(&self, result: Result) {
        match result {
            Ok(()) => {
                self.gpu.watch.power_step(uapi_debug::POWER_STEP_D3, 0);
                let mut book = self.book.lock();
                book.stats.suspends += 1;
                book.stats.d3 = 1;
                book.stats.last_suspend_ns = ns_since(book.started.take());
            }
            Err(_) => {
                // The PCI core left the device in D0: the hardware is usable again; the
                // doorbells reconnect on use.
                if let Ok(mut hw) = self.gpu.core.hw() {
                    hw.set_d3(false);
                }
                self.resume_contexts();
            }
        }
    }

    fn system_suspend(&self) -> Result {
        let waited = self.work_pending();
        self.gpu.watch.power_step(uapi_debug::POWER_STEP_SYSTEM_SUSPEND, u32::from(waited));
        let start = Instant::<Monotonic>::now();
        let drain_ms = param::system_sleep_drain_ms_param();
        while self.work_pending() {
            if start.elapsed() >= Delta::from_millis(i64::from(drain_ms)) {
                pr_warn!("system sleep refused: work still pending after {drain_ms} ms\n");
                return Err(self.refuse());
            }
            fsleep(Delta::from_millis(1));
        }
        Ok(())
    }

    fn system_resume(&self, resumed: bool) {
        self.gpu.watch.power_step(uapi_debug::POWER_STEP_SYSTEM_RESUME, u32::from(resumed));
    }

    fn resuming(&self) {
        self.book.lock().started = Some(Instant::now());
    }

    fn resume(&self) -> Result {
        let gpu = &self.gpu;
        gpu.core.hw()?.set_d3(false);
        gpu.watch.power_step(uapi_debug::POWER_STEP_D0, 0);
        // 3. what D3 entry evicted, resident again.
        let moved = core::mem::take(&mut self.book.lock().evicted);
        if !moved.is_empty() {
            let (n, rings) = gpu.mm.restore(&gpu.queue_env(), &moved).unwrap_or((0, 0));
            gpu.watch.power_step(uapi_debug::POWER_STEP_D0_RESTORE_RINGS, rings);
            gpu.watch.power_step(uapi_debug::POWER_STEP_D0_RESTORE, n);
            let mut book = self.book.lock();
            book.stats.restored = book.stats.restored.saturating_add(n);
        }
        let mut book = self.book.lock();
        book.stats.resumes += 1;
        book.stats.d3 = 0;
        book.stats.last_resume_ns = ns_since(book.started.take());
        Ok(())
    }
}

/// The device held in D0 for one ioctl ([`DevicePower::busy`]).
pub(crate) struct Busy<'a> {
    /// The device power.
    power: &'a DevicePower,
    /// Resume the suspended contexts when dropped.
    after_connect: bool,
    /// The runtime PM reference (dropped after the contexts resumed).
    _rpm: RpmRef<'a>,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        if self.after_connect {
            self.power.resume_contexts();
        }
    }
}
