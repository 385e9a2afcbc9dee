// SPDX-License-Identifier: GPL-2.0

//! Bring-up: PCI enable, BAR0 and the identity check ([`Probed`]), then MSI-X vectors with their
//! handlers, the mailbox self-test on every vector, the interrupt ring and the system address
//! space ([`BoundGpu`]), and the link that lends BAR0 and the bound device to the [`Core`].
//!
//! Bring-up is split in two so the layers above can build their objects on the core before the
//! interrupt handlers that use them exist. Nothing here knows what the handlers do.
//!
//! Implementation note: the interrupt handlers read mailbox results from the DMA block in guest
//! memory, never from registers. The BAR is a plain lifetime-bound [`pci::Bar`] owned by the
//! driver data, so no RCU guard is ever held here, in particular not across the sleeping
//! mailbox wait.

use core::marker::PhantomPinned;

use kernel::{
    device::{Bound, Core as CoreCtx},
    dma::{Device as _, DmaMask},
    irq::{ThreadedHandler, ThreadedRegistration},
    pci,
    prelude::*,
    sync::Arc,
};

use super::{
    core::Core,
    regs::{read_reg, write_reg, Bar0, DeviceInfo, Register, BAR0_SIZE},
    vectors::request_vectors,
};
use crate::{
    abi::{irq::cause, mailbox, pci as ids, regs},
    bindings::pci::{clear_master, EnabledDevice},
};

/// The hardware state shared between process context and the IRQ handlers.
pub(crate) struct Hw<'bound> {
    /// BAR0.
    bar: Bar0<'bound>,
    /// BAR2 (doorbell pages), mapped only for the command ring's doorbell.
    doorbells: Option<pci::Bar<'bound>>,
    /// The device-programming core (mailbox, interrupt ring, objects).
    core: Arc<Core>,
}

impl Hw<'_> {
    /// Writes register `R`.
    #[inline(always)]
    pub(crate) fn write<R: Register>(&self, value: R) {
        write_reg(&self.bar, value)
    }

    /// The core.
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }
}

/// Runs `SELF_TEST` on `vector` and checks the answer.
///
/// # Errors
///
/// `ETIMEDOUT` if no completion arrives on `vector` within the mailbox timeout, `EIO` on a wrong
/// answer, `ENODEV`.
fn self_test(pdev: &pci::Device<Bound>, core: &Core, vector: u16) -> Result {
    let mut hw = core.hw()?;
    let cookie = self_test_cookie(hw.last_seq().wrapping_add(1), vector);
    let mut args = mailbox::SelfTestArgs {
        vector: u32::from(vector),
        cookie,
        ..Default::default()
    };
    let status = hw
        .mailbox(mailbox::Opcode::SelfTest, &mut args, &[], Some(vector))
        .inspect_err(|e| {
            if *e == ETIMEDOUT {
                dev_err!(
                    pdev,
                    "self-test: no interrupt on vector {} within {} ms\n",
                    vector,
                    crate::bindings::param::mailbox_timeout_ms_param()
                )
            }
        })?;
    let seq = hw.last_seq();
    let expected = mailbox::self_test_response(cookie);
    if status != mailbox::Status::Ok
        || args.response != expected
        || args.header.seq != u32::from(seq)
    {
        dev_err!(
            pdev,
            "self-test: bad response on vector {}: status {}, response 0x{:08x} (expected 0x{:08x}), seq {} (expected {})\n",
            vector,
            status.name(),
            args.response,
            expected,
            args.header.seq,
            seq
        );
        return Err(EIO);
    }
    Ok(())
}

/// A fresh cookie for each submission: the sequence number and vector, scrambled.
fn self_test_cookie(seq: u16, vector: u16) -> u32 {
    (u32::from(seq) << 16 | u32::from(vector)).wrapping_mul(0x9E37_79B9) ^ 0xB31F_5EED
}

/// Lends BAR0 and the bound device to the [`Core`] and takes them back when dropped.
struct CoreLink(Arc<Core>);

impl CoreLink {
    /// Attaches `hw`'s BAR0 and `dev` to the core.
    fn new<'bound>(hw: &Arc<Hw<'bound>>, dev: &'bound pci::Device<Bound>) -> Self {
        // SAFETY: The link is a field of `BoundGpu` declared (so dropped, and on a failed
        // initialisation dropped in reverse order) before `hw` and `_enabled`, and its `Drop`
        // revokes; `hw` (kept alive by `BoundGpu::hw`) holds BAR0 and `dev` is bound for `'bound`.
        unsafe { hw.core.attach(&hw.bar, hw.doorbells.as_ref(), dev.as_ref()) };
        Self(hw.core.clone())
    }
}

impl Drop for CoreLink {
    fn drop(&mut self) {
        self.0.revoke();
    }
}

/// The first half of bring-up: the PCI device enabled, bus mastering on, the DMA mask set,
/// BAR0 mapped and the identity checked, and the [`Core`] made. What the layers above need to
/// build their own objects on the core before [`BoundGpu::new`] requests the interrupts.
pub(crate) struct Probed<'bound> {
    /// Disables the PCI device when dropped.
    enabled: EnabledDevice<'bound>,
    /// The bound PCI device.
    pdev: &'bound pci::Device<Bound>,
    /// Registers and core.
    hw: Arc<Hw<'bound>>,
    /// Identity and geometry.
    info: DeviceInfo,
}

impl<'bound> Probed<'bound> {
    /// PCI enable, bus mastering, DMA mask, BAR0, the identity check and the core.
    ///
    /// # Errors
    ///
    /// `ENODEV` on an identity mismatch, or the error of the failing kernel call.
    pub(crate) fn new(pdev: &'bound pci::Device<CoreCtx<'_>>) -> Result<Self> {
        let enabled = EnabledDevice::new(pdev)?;
        pdev.set_master();
        // SAFETY: Called from probe, before any DMA allocation or mapping for this device.
        unsafe { pdev.dma_set_mask_and_coherent(DmaMask::new::<64>())? };

        let bound: &'bound pci::Device<Bound> = pdev;
        let bar = bound.iomap_region_sized::<BAR0_SIZE>(ids::REGS_BAR, c"belfry-regs")?;
        let mut info = DeviceInfo::read(bound, &bar)?;
        if info.has_test_faults() {
            // A device built for tests, started with faults on purpose: say so, and mark the
            // kernel as one that has run test-only code (as KUnit does).
            dev_warn!(
                bound,
                "the device injects test-only faults (TEST_INJECTIONS 0x{:08x}): tainting the kernel (TAINT_TEST)\n",
                info.test_injections.0
            );
            crate::bindings::taint::taint_test();
        }
        let doorbell_bar = bound.resource_start(ids::DOORBELL_BAR)?;
        let vram_bar = bound.resource_start(ids::VRAM_BAR)?;
        // The command ring's doorbell is a page of BAR2; without the mapping the mailbox stays
        // on BAR0.
        let doorbells = match info.cmd_ring_doorbell {
            Some(_) => bound
                .iomap_region(ids::DOORBELL_BAR, c"belfry-doorbells")
                .inspect_err(|e| {
                    dev_warn!(
                        bound,
                        "cannot map the doorbell BAR ({:?}): mailbox through BAR0\n",
                        e
                    )
                })
                .ok(),
            None => None,
        };
        if doorbells.is_none() {
            info.cmd_ring_doorbell = None;
        }
        let core = Core::new(bound.as_ref(), info, doorbell_bar, vram_bar)?;
        let hw = Arc::new(
            Hw {
                bar,
                doorbells,
                core,
            },
            GFP_KERNEL,
        )?;
        Ok(Self {
            enabled,
            pdev: bound,
            hw,
            info,
        })
    }

    /// The device-programming core.
    pub(crate) fn core(&self) -> &Arc<Core> {
        self.hw.core()
    }
}

/// The bring-up of one bound Belfry device, with the handlers `H` on its vectors.
///
/// Dropping it first quiesces the device ([`BoundGpu::quiesce`]); then the fields drop in
/// declaration order: IRQ handlers, the vectors they were requested on, the hardware (DMA block,
/// BAR0), and last the PCI enable.
#[pin_data(PinnedDrop)]
pub(crate) struct BoundGpu<'bound, H: ThreadedHandler + 'bound> {
    /// Takes BAR0 back from the core first, so no open file reaches the device any more.
    link: CoreLink,
    /// One handler per allocated vector; they borrow `vectors`.
    irqs: KVec<Pin<KBox<ThreadedRegistration<'bound, H>>>>,
    /// The MSI-X vector allocation.
    vectors: pci::IrqVectorRegistration<'bound>,
    /// Registers and mailbox, shared with the handlers.
    hw: Arc<Hw<'bound>>,
    /// Identity and geometry.
    info: DeviceInfo,
    /// The bound PCI device.
    pdev: &'bound pci::Device<Bound>,
    /// Disables the PCI device when dropped (last).
    _enabled: EnabledDevice<'bound>,
    /// `irqs` borrow `vectors` in place: a `BoundGpu` never moves.
    #[pin]
    _pin: PhantomPinned,
}

impl<'bound, H: ThreadedHandler + 'bound> BoundGpu<'bound, H> {
    /// The second half of bring-up of device `index` (the `N` of `belfry<N>`): MSI-X, one
    /// handler per vector (`make` builds the handler of each), device enable and the mailbox
    /// self-test on every vector, then the interrupt ring and the system address space.
    ///
    /// # Errors
    ///
    /// `ETIMEDOUT`/`EIO`/`EINTR` from the self-test, or the error of the failing kernel call.
    /// On a failed self-test the device is reset and quiesced before the resources are released.
    pub(crate) fn new(
        probed: Probed<'bound>,
        index: usize,
        make: impl Fn(&Arc<Hw<'bound>>, u16) -> H + 'bound,
    ) -> impl PinInit<Self, Error> + 'bound {
        let Probed {
            enabled,
            pdev: bound,
            hw,
            info,
        } = probed;
        let msix_only = pci::IrqTypes::default().with(pci::IrqType::MsiX);

        try_pin_init!(Self {
            _enabled: enabled,
            pdev: bound,
            hw,
            link: CoreLink::new(hw, bound),
            info,
            vectors: bound
                .alloc_irq_vectors(1, u32::from(info.msix_vectors), msix_only)
                .inspect_err(|e| {
                    dev_err!(
                        bound,
                        "cannot allocate 1..{} MSI-X vectors: {:?}\n",
                        info.msix_vectors,
                        e
                    )
                })?,
            irqs: request_vectors(
                // SAFETY: `vectors` is initialised at this point (fields are initialised in the
                // order written here), lives at a pinned address (`BoundGpu` is `!Unpin` and
                // never moves), and is dropped after `irqs`: field declaration order on drop,
                // reverse initialisation order if a later initialiser fails.
                unsafe { &*core::ptr::from_ref(vectors) },
                index,
                &|vector| make(hw, vector),
            )?,
            _pin: PhantomPinned,
            _: {
                start(bound, hw, vectors.len())?;
            },
        }? Error)
    }

    /// Identity and geometry of the device.
    pub(crate) fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Number of MSI-X vectors allocated (and self-tested).
    pub(crate) fn vector_count(&self) -> usize {
        self.vectors.len()
    }

    /// Prints the one line the launcher's checks look for.
    pub(crate) fn log_ready(&self) {
        let info = self.info();
        let n = self.vector_count();
        dev_info!(
            self.pdev,
            "Belfry GPU {}.{}: {} MSI-X vectors, {} doorbells, {} engines, VRAM {} MiB, self-test ok on {}/{} vectors\n",
            info.version.major(),
            info.version.minor(),
            n,
            info.doorbells,
            info.engines,
            info.vram_size >> 20,
            n,
            n
        );
        dev_dbg!(
            self.pdev,
            "CAPS 0x{:08x}, {} MSI-X vectors offered\n",
            info.caps.0,
            info.msix_vectors
        );
    }

    /// After a function reset of the device, its configuration space restored (`reset_done`):
    /// if the device reads its power-on state (`CONTROL.enable` clear, which the module set at
    /// bring-up and only a reset clears), it forgot every object of the binding, and bus
    /// mastering was off across the reset (the PCI core clears the command register after
    /// `reset_prepare` and restores it before `reset_done`), so the core's quarantine is freed
    /// and nothing is kept from now on ([`Core::forget_after_reset`]); whether it did. A device
    /// still enabled did not take the reset: what it may still reach stays in quarantine.
    pub(crate) fn after_function_reset(&self) -> bool {
        let enabled = read_reg::<regs::CONTROL>(&self.hw.bar).enable();
        if !enabled {
            self.hw.core.forget_after_reset();
        }
        !enabled
    }

    /// Stops the device before its resources go: masks every interrupt cause, resets it (which
    /// drops every object and a command in flight, so nothing refers to memory about to be
    /// freed), clears `CONTROL.enable` and turns bus mastering off; then undoes every DMA
    /// mapping of the device still in place ([`super::dmamap::release_device`]) — the memory of
    /// open files, of processes' mappings and of the quarantine, which the device can no longer
    /// reach, stays with its holders until they let go; the quarantine's is freed now, and a
    /// destroy of the gone binding frees at once ([`Core::forget_after_reset`]: the device
    /// forgot every object).
    fn quiesce(&self) {
        self.hw.write(regs::INT_MASK::default());
        self.hw.write(regs::CONTROL::default().with_reset(true));
        self.hw.write(regs::CONTROL::default());
        clear_master(self.pdev);
        let undone = super::dmamap::release_device(self.pdev.as_ref());
        if undone > 0 {
            dev_dbg!(self.pdev, "{} DMA mappings undone at unbind\n", undone);
        }
        self.hw.core.forget_after_reset();
    }
}

#[pinned_drop]
impl<H: ThreadedHandler> PinnedDrop for BoundGpu<'_, H> {
    fn drop(self: Pin<&mut Self>) {
        self.link.0.revoke();
        self.quiesce();
    }
}

/// Enables the device, unmasks every interrupt cause, self-tests vectors `0..count`, then sets
/// up the interrupt ring and the system address space.
///
/// # Errors
///
/// See [`self_test`] and [`Core::start`]. On error the device is reset and quiesced.
fn start(pdev: &pci::Device<Bound>, hw: &Hw<'_>, count: usize) -> Result {
    // Start from power-on state: a previous driver instance may have left objects behind.
    hw.write(regs::CONTROL::default().with_reset(true));
    hw.write(regs::CONTROL::default().with_enable(true));
    // CAP-04: the device refuses the fence types the OS does not support.
    hw.write(hw.core.info().os_caps);
    hw.write(regs::INT_MASK::default().with_causes(cause::ALL));

    let result = (0..count)
        .try_for_each(|v| self_test(pdev, &hw.core, u16::try_from(v)?))
        .and_then(|()| {
            hw.core.start().inspect_err(|e| {
                dev_err!(
                    pdev,
                    "interrupt ring / system address space setup failed: {:?}\n",
                    e
                )
            })
        });
    if result.is_err() {
        // A command may still be in flight: reset the device so that it stops before the DMA
        // block is freed, and keep it from interrupting or mastering the bus.
        hw.write(regs::INT_MASK::default());
        hw.write(regs::CONTROL::default().with_reset(true));
        clear_master(pdev);
    }
    result
}
