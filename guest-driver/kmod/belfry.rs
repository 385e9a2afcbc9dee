// SPDX-License-Identifier: GPL-2.0

//! Belfry: the kernel-mode driver of the Belfry virtual GPU (PCI `1234:be11`).
//!
//! Code map, in layers; every import points downward (`README.md` has the file map):
//! 1. [`bindings`]: the raw `kernel::bindings` uses, generic (pfn mappings, anonymous files,
//!    eventfds, parameters, PCI gaps);
//! 2. [`hw`]: the hardware — register access, bring-up, the mailbox, the interrupt ring,
//!    device-wide ids, DMA memory and GPU page tables;
//! 3. the domain, where every mailbox sequence lives: [`context`] (contexts and their address
//!    spaces), [`fence`] (waits, logs, sharing, the optimized form, fence pages), [`queue`]
//!    (queue building, kernel rings, doorbells and their LRU), and [`gpu`], the domain objects
//!    of one device side by side, with [`power`] on top (D0/D3 through runtime PM);
//! 4. [`irq`]: the interrupt handlers, which orchestrate the domain (the core never calls up),
//!    and [`hang`], the hang watchdog and the device-lost path;
//! 5. [`file`]: the misc character device front end, `/dev/belfry<N>` (validation and
//!    bookkeeping), with [`caps`] (the `native_fences` switch) and [`term`] (termination
//!    statistics);
//!
//! and `abi`: the device contract — the very files the device process compiles (`device/abi`).
//!
//! Lifetimes and teardown: everything a bound device owns lives in [`BelfryData`], whose
//! resources borrow the bound device for `'bound` (the 7.3 driver model: BAR0 stays mapped until
//! the driver data is dropped, so teardown may still program the device). On unbind (or `rmmod`)
//! [`BelfryData`] drops in field order: the runtime PM hooks are detached (the PCI core holds
//! the device in D0 during `remove`); the misc device is deregistered; the device leaves peer
//! signals (the others drop its page, then it is freed); the core is revoked
//! (the later ioctls and `mmap`s of files still open get `ENODEV`) and every CPU mapping of the
//! binding lets go of its BAR pages: the doorbells of files still open go to DISCONNECTED_ABORT
//! and their dummy pages, rings in VRAM to no page (`SIGBUS`); then the core quiesces the device
//! (`INT_MASK` = 0, `CONTROL.enable` = 0, bus mastering off) and undoes every DMA mapping of the
//! device still in place (the memory stays with the open files, mappings and quarantine that
//! hold it, out of the device's reach), frees the IRQ handlers, releases
//! the MSI-X vectors, frees the DMA block, unmaps BAR0 and disables the PCI device; finally the
//! device slot (`N` of `/dev/belfry<N>`) is released.
//! A probe that fails part way releases what it had set up in the same order. Module exit
//! ([`BelfryModule`]) unregisters the driver (every device unbound as above), then destroys the
//! workqueue of device-lost reprobes, waiting for each one queued or running.

use kernel::{
    device::Core,
    pci,
    prelude::*,
    sync::{
        atomic::{Atomic, Full, Relaxed},
        Arc,
    },
};

/// The device contract (`device/abi`). Written for the host crate too: not every item is used
/// here, its items are `pub` inside this crate-private module, and its register types carry the
/// contract's all-caps register names.
#[allow(dead_code, unreachable_pub, clippy::upper_case_acronyms)]
mod abi;
mod bindings;
mod caps;
mod context;
mod fence;
mod file;
mod gpu;
mod hang;
mod hw;
mod irq;
mod mm;
mod power;
mod queue;
mod term;
mod xad;

/// Most Belfry devices one guest can bind (`/dev/belfry0` .. `/dev/belfry15`).
pub(crate) const MAX_DEVICES: usize = 16;

/// Bitmap of the device slots in use: bit `N` is `/dev/belfry<N>`.
static SLOTS: Atomic<u32> = Atomic::new(0);

/// A device slot: the `N` of `/dev/belfry<N>` and of the IRQ names, held while a device is bound.
///
/// Slots are handed out lowest first, so devices probed one after the other are numbered in probe
/// order; a slot is released when its device unbinds (or fails to probe).
pub(crate) struct DeviceSlot(usize);

impl DeviceSlot {
    /// Takes the lowest free slot, or `None` if [`MAX_DEVICES`] devices are bound.
    fn take() -> Option<Self> {
        let mut used = SLOTS.load(Relaxed);
        loop {
            // CAST: `trailing_zeros()` of a `u32` is at most 32.
            let free = (!used).trailing_zeros() as usize;
            if free >= MAX_DEVICES {
                return None;
            }
            match SLOTS.cmpxchg(used, used | (1 << free), Full) {
                Ok(_) => return Some(Self(free)),
                Err(now) => used = now,
            }
        }
    }

    /// The slot number `N`.
    pub(crate) fn index(&self) -> usize {
        self.0
    }
}

impl Drop for DeviceSlot {
    fn drop(&mut self) {
        let mut used = SLOTS.load(Relaxed);
        while let Err(now) = SLOTS.cmpxchg(used, used & !(1 << self.0), Full) {
            used = now;
        }
    }
}

/// Everything one bound Belfry device owns. Fields drop in declaration order (see the crate
/// documentation for the resulting teardown sequence).
#[pin_data]
struct BelfryData<'bound> {
    /// The runtime PM hooks: detached first (the PCI core's `remove` holds the device in D0).
    pm: bindings::runtime_pm::PmDomain<Arc<power::DevicePower>>,
    /// The hang watchdog: stopped first (its drop waits for it), while the device still runs.
    watchdog: hang::WatchdogHandle,
    /// The character device front end: goes first, so no new opener arrives during teardown.
    #[pin]
    front_end: file::Registration,
    /// Then the device leaves peer signals (XAD-15): every other peer-capable device drops its
    /// peer-signal page before the page is freed, while the mailbox still answers.
    leave_peers: fence::peers::LeaveOnUnbind,
    /// Then the core is revoked and every CPU mapping of the binding lets go of its BAR pages
    /// (doorbells to DISCONNECTED_ABORT and their dummy pages, rings in VRAM to nothing), while
    /// the BARs are still there.
    revoke_mappings: gpu::RevokeOnUnbind,
    /// The driver core: IRQ handlers, vectors, DMA block, BAR0, PCI enable.
    #[pin]
    gpu: hw::bringup::BoundGpu<'bound, irq::VectorHandler<'bound>>,
    /// Then the `sync_file` exports still pending fail with `ENODEV` (nothing signals them now).
    abandon_sync_files: fence::syncfile::AbandonOnUnbind,
    /// Released last, once `/dev/belfry<N>` and the `belfry<N>-*` IRQs are gone.
    slot: DeviceSlot,
}

/// The Belfry PCI driver.
struct BelfryDriver;

kernel::pci_device_table!(
    PCI_TABLE,
    <BelfryDriver as pci::Driver>::IdInfo,
    [(
        bindings::pci::pci_device_id(abi::pci::VENDOR_ID, abi::pci::DEVICE_ID),
        ()
    )]
);

impl pci::Driver for BelfryDriver {
    type IdInfo = ();
    type Data<'bound> = BelfryData<'bound>;

    const ID_TABLE: pci::IdTable<Self::IdInfo> = &PCI_TABLE;

    fn probe<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        _info: Option<&'bound Self::IdInfo>,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        bindings::reset::install::<BelfryData<'static>>(pdev);
        pin_init::pin_init_scope(move || {
            let Some(slot) = DeviceSlot::take() else {
                dev_err!(
                    pdev,
                    "belfry supports at most {} devices; not binding this one\n",
                    MAX_DEVICES
                );
                return Err(EBUSY);
            };
            let index = slot.index();
            // Bring-up in two halves: the domain objects are built on the core before the
            // interrupt handlers that use them exist.
            let probed = hw::bringup::Probed::new(pdev)?;
            let domain = gpu::Gpu::new(probed.core())?;
            let handlers = domain.clone();
            let power = power::DevicePower::new(domain.clone())?;
            let peers = domain.peers.clone();

            Ok(try_pin_init!(BelfryData {
                slot,
                gpu <- hw::bringup::BoundGpu::new(probed, index, move |hw, vector| {
                    irq::VectorHandler::new(hw.clone(), handlers.clone(), vector)
                }),
                revoke_mappings: gpu::RevokeOnUnbind(domain.clone()),
                // Before `/dev/belfry<N>` exists: no cross-adapter fence is open here yet.
                leave_peers: {
                    peers.join();
                    fence::peers::LeaveOnUnbind(peers)
                },
                abandon_sync_files: fence::syncfile::AbandonOnUnbind(domain.fences.clone()),
                watchdog: hang::Watchdog::start(domain.clone(), pdev.as_ref().into())?,
                front_end <- file::Registration::new(index, domain, power.clone()),
                pm: bindings::runtime_pm::PmDomain::attach(pdev, power, power::AUTOSUSPEND_DELAY_MS)?,
                _: {
                    gpu.as_ref().get_ref().log_ready();
                },
            }? Error))
        })
    }
}

/// A function reset of a bound device (root's `/sys/bus/pci/devices/<address>/reset`, a bus
/// reset above it) is a device loss the module is told about: before the reset the device is
/// quiesced as at unbind ([`gpu::RevokeOnUnbind::before_reset`]), and the hang watchdog's
/// device-lost path binds it again once the reset is done.
impl bindings::reset::FunctionReset for BelfryData<'_> {
    fn reset_prepare(&self) {
        hang::note_function_reset();
        let dev = self.revoke_mappings.0.core.device();
        dev_warn!(
            dev,
            "function reset: every context is lost; the device is bound again after the reset\n"
        );
        self.revoke_mappings.before_reset();
    }

    fn reset_done(&self) {
        if !self.gpu.after_function_reset() {
            let dev = self.revoke_mappings.0.core.device();
            dev_warn!(
                dev,
                "function reset: the device is still enabled after it; what it did not confirm destroying stays in quarantine\n"
            );
        }
        // The watchdog's device-lost reprobe, waiting for the device lock, binds it again.
    }
}

/// The module: the PCI driver's registration, then the workqueue of device-lost reprobes.
/// Fields drop in declaration order at module exit: unregistering the driver unbinds every
/// device (each watchdog cancelled synchronously, so no reprobe is queued after it), then the
/// reprobe queue is destroyed, which waits for every reprobe queued or running — no work item
/// runs module code once the module is gone.
#[pin_data]
struct BelfryModule {
    /// The PCI driver.
    #[pin]
    driver: kernel::driver::Registration<pci::Adapter<BelfryDriver>>,
    /// The device-lost reprobes' workqueue.
    reprobes: hang::ReprobeQueue,
}

impl kernel::InPlaceModule for BelfryModule {
    fn init(module: &'static kernel::ThisModule) -> impl PinInit<Self, Error> {
        // SAFETY: module load, before the driver registers (no device has probed).
        unsafe { fence::peers::init() };
        // SAFETY: as above.
        unsafe { hw::dmamap::init() };
        try_pin_init!(Self {
            reprobes: hang::ReprobeQueue::new()?,
            driver <- kernel::driver::Registration::new(<Self as kernel::ModuleMetadata>::NAME, module),
        })
    }
}

module! {
    type: BelfryModule,
    name: "belfry",
    authors: ["The Belfry authors"],
    description: "Belfry virtual GPU driver",
    license: "GPL",
}
