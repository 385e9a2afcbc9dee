// SPDX-License-Identifier: GPL-2.0

//! Layer 4: the hang watchdog of one bound device, and the device-lost path.
//!
//! The watchdog is a delayed work item that re-arms itself every `hang_timeout_ms / 4`
//! (between 10 and 100 ms). Each run it asks the domain's [`Watch`](crate::queue::watch) for
//! the engines pending without progress for the timeout (ENG-01) and resets each one
//! ([`Gpu::recover_engine`], blaming only a queue whose command buffer executed at least half
//! the timeout). Engines the device reports `Hung` are recovered by the interrupt thread
//! instead (`irq`). Each run also ends the `sync_file` exports pending too long
//! ([`syncfile::expire`]), in D3 as in D0 (a kernel fence's bound does not pause while the
//! device sleeps).
//!
//! Device lost: when the mailbox wedged (a command got no completion: the device stopped
//! answering; or a function reset the module was told about marked it so, which the log line
//! says instead of a silent device), the watchdog stops and hands the device to a work item of its own that calls
//! `device_reprobe`: the unbind loses every context (open files get `ENODEV`, their doorbells
//! DISCONNECTED_ABORT) and resets the device (`CONTROL.reset`), and the new probe brings it up
//! again, `/dev/belfry<N>` with the same `N`. The reprobe must not run in the watchdog's own
//! work: the unbind cancels the watchdog.
//!
//! No work outlives the module: the unbind cancels the watchdog synchronously (a run in progress
//! has returned when [`WatchdogHandle`]'s drop does), and the reprobes run on the module's own
//! workqueue ([`ReprobeQueue`]), which module exit destroys after the driver is unregistered —
//! waiting for every reprobe queued or running. On a device with test-only faults
//! (`TEST_INJECTIONS`, the kernel tainted `TAINT_TEST`) a reprobe first sleeps the
//! `test_reprobe_delay_ms` module parameter, so a test can unload the module inside that window.

use kernel::{
    bindings as raw,
    device::Device,
    new_mutex,
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Relaxed, Release},
        aref::ARef,
        Arc, Mutex,
    },
    time::{delay::fsleep, msecs_to_jiffies, Delta},
    workqueue::{impl_has_delayed_work, impl_has_work, new_work, DelayedWork, Queue, Work, WorkItem},
};

use crate::{bindings::param, bindings::reprobe, bindings::workqueue as wq, fence::syncfile, gpu::Gpu};

/// The shortest hang timeout the watchdog applies, whatever the parameter says.
const MIN_TIMEOUT_MS: u32 = 100;

/// Device-lost recoveries started, module-wide (survives the rebind it causes): devices that
/// stopped answering, not the function resets the module was told about.
static DEVICE_LOST: Atomic<u32> = Atomic::new(0);

/// Function resets the module was told about (`reset_prepare` of a bound device), module-wide.
static FUNCTION_RESETS: Atomic<u32> = Atomic::new(0);

/// Device-lost recoveries started since the module was loaded.
pub(crate) fn device_lost_count() -> u32 {
    DEVICE_LOST.load(Relaxed)
}

/// Counts a function reset the module was told about.
pub(crate) fn note_function_reset() {
    FUNCTION_RESETS.fetch_add(1, Relaxed);
}

/// Function resets the module was told about since it was loaded.
pub(crate) fn function_reset_count() -> u32 {
    FUNCTION_RESETS.load(Relaxed)
}

/// Whether the watchdog should keep running.
struct Run {
    /// The device is going away: do not re-arm.
    stop: bool,
}

/// The module's workqueue of reprobes while [`ReprobeQueue`] lives (null otherwise).
static REPROBES: Atomic<*mut raw::workqueue_struct> = Atomic::new(core::ptr::null_mut());

/// The module's workqueue of device-lost reprobes: published for the watchdogs while it lives;
/// its drop (module exit, after the driver is unregistered, so no watchdog is left to queue
/// one) destroys it, waiting for every reprobe queued or running.
pub(crate) struct ReprobeQueue {
    /// The queue: destroyed, once drained, when this is dropped.
    _queue: wq::OwnedQueue,
}

impl ReprobeQueue {
    /// Makes and publishes the queue.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new() -> Result<Self> {
        let q = wq::OwnedQueue::new(c"belfry_reprobe")?;
        REPROBES.store(core::ptr::from_ref(q.queue()).cast::<raw::workqueue_struct>().cast_mut(), Release);
        Ok(Self { _queue: q })
    }
}

impl Drop for ReprobeQueue {
    fn drop(&mut self) {
        REPROBES.store(core::ptr::null_mut(), Release);
        // `_queue` drops next: destroyed once drained.
    }
}

/// The published reprobe queue, if the module still has one.
fn reprobes() -> Option<&'static Queue> {
    let q = REPROBES.load(Acquire);
    // SAFETY: a non-null value is the live queue of the `ReprobeQueue`, which is dropped only at
    // module exit, after every watchdog (the only caller) was cancelled.
    (!q.is_null()).then(|| unsafe { Queue::from_raw(q) })
}

/// The watchdog of one bound device.
#[pin_data]
pub(crate) struct Watchdog {
    /// The domain objects.
    gpu: Gpu,
    /// The PCI device, for the device-lost reprobe.
    dev: ARef<Device>,
    /// Run state.
    #[pin]
    run: Mutex<Run>,
    /// The work item.
    #[pin]
    work: DelayedWork<Watchdog>,
}

impl_has_delayed_work! {
    impl HasDelayedWork<Self> for Watchdog { self.work }
}

impl WorkItem for Watchdog {
    type Pointer = Arc<Watchdog>;

    fn run(this: Arc<Self>) {
        this.tick();
    }
}

/// How often the watchdog looks, for a timeout of `timeout_ms`.
fn period_ms(timeout_ms: u32) -> u32 {
    (timeout_ms / 4).clamp(10, 100)
}

impl Watchdog {
    /// Starts the watchdog of `gpu`, bound to PCI device `dev`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn start(gpu: Gpu, dev: ARef<Device>) -> Result<WatchdogHandle> {
        let w = Arc::pin_init(
            pin_init!(Watchdog {
                gpu,
                dev,
                run <- new_mutex!(Run { stop: false }),
                work <- kernel::workqueue::new_delayed_work!("belfry::watchdog"),
            }),
            GFP_KERNEL,
        )?;
        Self::arm(&w);
        Ok(WatchdogHandle(w))
    }

    /// Queues the next run.
    fn arm(this: &Arc<Self>) {
        let delay = msecs_to_jiffies(period_ms(param::hang_timeout_ms_param()));
        // Fails only while the unbind cancels it (the reference comes back and is dropped).
        let _ = wq::system_percpu().enqueue_delayed(this.clone(), delay);
    }

    /// One run: device lost, or hung engines reset; then re-arms unless stopped.
    fn tick(self: Arc<Self>) {
        if self.run.lock().stop {
            return;
        }
        let gpu = &self.gpu;
        if gpu.core.is_wedged() {
            let dev: &Device = &self.dev;
            if gpu.core.lost_to_reset() {
                // Counted as a reset when the module was told (`note_function_reset`).
                dev_info!(dev, "binding the device again after a function reset\n");
            } else {
                DEVICE_LOST.fetch_add(1, Relaxed);
                dev_err!(
                    dev,
                    "device lost (the mailbox stopped answering): every context is lost; resetting and binding the device again\n"
                );
            }
            let dev = self.dev.clone();
            // Test-only: the window a test unloads the module in.
            let delay_ms = gpu.core.info().test_delay_ms(param::test_reprobe_delay_ms_param());
            if let (Ok(r), Some(q)) = (
                Arc::pin_init(
                    pin_init!(Reprobe {
                        dev,
                        delay_ms,
                        work <- new_work!("belfry::reprobe"),
                    }),
                    GFP_KERNEL,
                ),
                reprobes(),
            ) {
                let _ = q.enqueue(r);
            }
            return;
        }
        // In D3 nothing runs (the contexts are suspended): no clock may blame anyone; but the
        // `sync_file` exports' bound holds in every power state.
        if gpu.core.is_d3() {
            syncfile::expire(&gpu.fences);
            if self.run.lock().stop {
                return;
            }
            return Self::arm(&self);
        }
        // A timeout under 100 ms would blame queues for ordinary command buffers.
        let timeout = param::hang_timeout_ms_param().max(MIN_TIMEOUT_MS);
        for (engine, waited) in gpu.watch.tick(timeout) {
            gpu.watch.count(|s| {
                s.hangs_by_timeout += 1;
                s.last_detect_ms = waited;
            });
            // Failures are logged by the mailbox.
            let _ = gpu.recover_engine(engine, timeout / 2);
        }
        // `sync_file` exports pending too long end with ETIMEDOUT (bounded dma_fences).
        syncfile::expire(&gpu.fences);
        if self.run.lock().stop {
            return;
        }
        Self::arm(&self);
    }
}

/// Owns a running watchdog; dropping it (unbind) stops it and cancels it synchronously: once the
/// drop returns, no run is queued and none is executing.
pub(crate) struct WatchdogHandle(Arc<Watchdog>);

impl Drop for WatchdogHandle {
    fn drop(&mut self) {
        let w = &self.0;
        // A run that checks after this does not re-arm; one that re-arms during the cancel is
        // refused.
        w.run.lock().stop = true;
        if wq::cancel_delayed_sync(&w.work) {
            // SAFETY: the cancelled instance's reference, which `enqueue_delayed` leaked into the
            // queue (`Arc::into_raw` of a clone of `w`): taken back once, here.
            drop(unsafe { Arc::from_raw(Arc::as_ptr(w)) });
        }
    }
}

/// The device-lost reprobe, a work item of its own.
#[pin_data]
struct Reprobe {
    /// The PCI device.
    dev: ARef<Device>,
    /// Test-only: how long to sleep first (ms; 0 but on a device with test-only faults).
    delay_ms: u32,
    /// The work item.
    #[pin]
    work: Work<Reprobe>,
}

impl_has_work! {
    impl HasWork<Self> for Reprobe { self.work }
}

impl WorkItem for Reprobe {
    type Pointer = Arc<Reprobe>;

    fn run(this: Arc<Self>) {
        if this.delay_ms != 0 {
            fsleep(Delta::from_millis(i64::from(this.delay_ms)));
        }
        let dev: &Device = &this.dev;
        if let Err(e) = reprobe::reprobe(dev) {
            dev_err!(dev, "device lost: binding the device again failed: {:?}\n", e);
        }
    }
}
