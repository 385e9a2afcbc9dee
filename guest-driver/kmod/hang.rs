// SPDX-License-Identifier: GPL-2.0

//! Layer 4: the hang watchdog of one bound device, and the device-lost path.
//!
//! The watchdog is a delayed work item that re-arms itself every `hang_timeout_ms / 4`
//! (between 10 and 100 ms). Each run it asks the domain's [`Watch`](crate::queue::watch) for
//! the engines pending without progress for the timeout (ENG-01) and resets each one
//! ([`Gpu::recover_engine`], blaming only a queue whose command buffer executed at least half
//! the timeout). Engines the device reports `Hung` are recovered by the interrupt thread
//! instead (`irq`). Each run also ends the `sync_file` exports pending too long
//! ([`syncfile::expire`]).
//!
//! Device lost: when the mailbox wedged (a command got no completion: the device stopped
//! answering), the watchdog stops and hands the device to a work item of its own that calls
//! `device_reprobe`: the unbind loses every context (open files get `ENODEV`, their doorbells
//! DISCONNECTED_ABORT) and resets the device (`CONTROL.reset`), and the new probe brings it up
//! again, `/dev/belfry<N>` with the same `N`. The reprobe must not run in the watchdog's own
//! work: the unbind waits for the watchdog to stop.

use kernel::{
    device::Device,
    new_condvar, new_mutex,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        aref::ARef,
        Arc, CondVar, Mutex,
    },
    time::msecs_to_jiffies,
    workqueue::{self, impl_has_delayed_work, impl_has_work, new_work, DelayedWork, Work, WorkItem},
};

use crate::{bindings::param, bindings::reprobe, bindings::workqueue as wq, fence::syncfile, gpu::Gpu};

/// The shortest hang timeout the watchdog applies, whatever the parameter says.
const MIN_TIMEOUT_MS: u32 = 100;

/// Device-lost recoveries started, module-wide (survives the rebind it causes).
static DEVICE_LOST: Atomic<u32> = Atomic::new(0);

/// Device-lost recoveries started since the module was loaded.
pub(crate) fn device_lost_count() -> u32 {
    DEVICE_LOST.load(Relaxed)
}

/// Whether the watchdog should keep running, and whether it is still queued.
struct Run {
    /// The device is going away: do not re-arm.
    stop: bool,
    /// A run is queued or executing.
    armed: bool,
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
    /// Signalled when `armed` clears.
    #[pin]
    disarmed: CondVar,
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
                run <- new_mutex!(Run { stop: false, armed: true }),
                disarmed <- new_condvar!(),
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
        // Fails only if already queued, which `armed` rules out.
        let _ = wq::system_percpu().enqueue_delayed(this.clone(), delay);
    }

    /// Marks the watchdog not queued and wakes an unbind waiting for that.
    fn disarm(&self) {
        self.run.lock().armed = false;
        self.disarmed.notify_all();
    }

    /// One run: device lost, or hung engines reset; then re-arms unless stopped.
    fn tick(self: Arc<Self>) {
        if self.run.lock().stop {
            return self.disarm();
        }
        let gpu = &self.gpu;
        if gpu.core.is_wedged() {
            DEVICE_LOST.fetch_add(1, Relaxed);
            let dev: &Device = &self.dev;
            dev_err!(
                dev,
                "device lost (the mailbox stopped answering): every context is lost; resetting and binding the device again\n"
            );
            let dev = self.dev.clone();
            if let Ok(r) = Arc::pin_init(
                pin_init!(Reprobe {
                    dev,
                    work <- new_work!("belfry::reprobe"),
                }),
                GFP_KERNEL,
            ) {
                let _ = workqueue::system_long().enqueue(r);
            }
            return self.disarm();
        }
        // In D3 nothing runs (the contexts are suspended): no clock may blame anyone.
        if gpu.core.is_d3() {
            let run = self.run.lock();
            if run.stop {
                drop(run);
                return self.disarm();
            }
            drop(run);
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
        let run = self.run.lock();
        if run.stop {
            drop(run);
            return self.disarm();
        }
        drop(run);
        Self::arm(&self);
    }
}

/// Owns a running watchdog; dropping it (unbind) waits until the watchdog stopped.
pub(crate) struct WatchdogHandle(Arc<Watchdog>);

impl Drop for WatchdogHandle {
    fn drop(&mut self) {
        let w = &self.0;
        let mut run = w.run.lock();
        run.stop = true;
        while run.armed {
            w.disarmed.wait(&mut run);
        }
    }
}

/// The device-lost reprobe, a work item of its own.
#[pin_data]
struct Reprobe {
    /// The PCI device.
    dev: ARef<Device>,
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
        let dev: &Device = &this.dev;
        if let Err(e) = reprobe::reprobe(dev) {
            dev_err!(dev, "device lost: binding the device again failed: {:?}\n", e);
        }
    }
}
