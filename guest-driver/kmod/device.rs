// SPDX-License-Identifier: GPL-2.0

//! The driver core's bring-up: register access, identity, MSI-X vectors, the mailbox self-test,
//! and the link between the bound device and the [`Core`] (mailbox, interrupt ring, objects).
//!
//! Nothing here knows about character devices: a front end (the misc device today, perhaps DRM
//! later) sits on top of [`Gpu`] and its [`Core`].
//!
//! Implementation note: the device is untrusted hardware. Every value read from it is checked or
//! clamped before use, and the interrupt handlers read mailbox results from the DMA block in
//! guest memory, never from registers (a trapped BAR read costs 30-84 µs under TCG; a write is
//! cheap). The BAR is a plain lifetime-bound [`pci::Bar`] owned by the driver data, so no RCU
//! guard is ever held here, in particular not across the sleeping mailbox wait.

use core::marker::PhantomPinned;

use kernel::{
    device::{Bound, Core as CoreCtx},
    dma::{Device as _, DmaMask},
    io::Io,
    pci,
    prelude::*,
    sync::Arc,
};

use crate::{
    abi::{irq::cause, mailbox, pci as ids, regs},
    ffi,
    gpucore::Core,
    irq,
};

/// Size of BAR0 as a const generic.
// CAST: `REGS_BAR_SIZE` is 64 KiB.
const BAR0_SIZE: usize = ids::REGS_BAR_SIZE as usize;

/// BAR0 (registers, MSI-X table and PBA), mapped for the bound lifetime of the device.
pub(crate) type Bar0<'bound> = pci::Bar<'bound, BAR0_SIZE>;

/// A BAR0 register of the contract: its offset and raw value.
pub(crate) trait Register: Copy {
    /// Byte offset in BAR0.
    const OFFSET: usize;
    /// The register value for the raw bits `raw`.
    fn from_raw(raw: u32) -> Self;
    /// The raw bits of this value.
    fn into_raw(self) -> u32;
}

macro_rules! impl_register {
    ($($name:ident),* $(,)?) => {
        $(
            impl Register for regs::$name {
                // CAST: register offsets are below 64 KiB.
                const OFFSET: usize = regs::$name::OFFSET as usize;

                #[inline(always)]
                fn from_raw(raw: u32) -> Self {
                    Self(raw)
                }

                #[inline(always)]
                fn into_raw(self) -> u32 {
                    self.0
                }
            }
        )*
    };
}

impl_register!(
    MAGIC,
    VERSION,
    CAPS,
    DOORBELL_INFO,
    ENGINE_INFO,
    MSIX_INFO,
    TEST_INJECTIONS,
    VRAM_SIZE_LO,
    VRAM_SIZE_HI,
    CONTROL,
    INT_CLEAR,
    INT_MASK,
    MB_ARG_LO,
    MB_ARG_HI,
    MB_SUBMIT,
);

/// What the device told us about itself at probe time, already validated.
#[derive(Clone, Copy)]
pub(crate) struct DeviceInfo {
    /// `VERSION`; its major equals [`regs::VERSION_MAJOR`].
    pub(crate) version: regs::VERSION,
    /// `CAPS`.
    pub(crate) caps: regs::CAPS,
    /// `DOORBELL_INFO.count`.
    pub(crate) doorbells: u32,
    /// `ENGINE_INFO.count`.
    pub(crate) engines: u32,
    /// `ENGINE_INFO.user_mode_submission_mask`.
    pub(crate) user_mode_engines: u32,
    /// `ENGINE_INFO.fence_write_mask`.
    pub(crate) fence_write_engines: u32,
    /// `MSIX_INFO.vectors`, clamped to `1..=MSIX_MAX_VECTORS`.
    pub(crate) msix_vectors: u16,
    /// `VRAM_SIZE_HI:VRAM_SIZE_LO` in bytes.
    pub(crate) vram_size: u64,
    /// `TEST_INJECTIONS`: test-only faults, reported by `QUERY_CAPS` and otherwise ignored.
    pub(crate) test_injections: regs::TEST_INJECTIONS,
}

impl DeviceInfo {
    /// Reads and checks the identity and geometry registers.
    ///
    /// # Errors
    ///
    /// `ENODEV` if `MAGIC` is wrong, `VERSION.major` is not ours or `MSIX_INFO.vectors` is 0.
    fn read(pdev: &pci::Device<Bound>, bar: &Bar0<'_>) -> Result<Self> {
        let magic: regs::MAGIC = read_reg(bar);
        if magic.value() != regs::MAGIC_VALUE {
            dev_err!(
                pdev,
                "identity mismatch: MAGIC reads 0x{:08x}, expected 0x{:08x}\n",
                magic.value(),
                regs::MAGIC_VALUE
            );
            return Err(ENODEV);
        }
        let version: regs::VERSION = read_reg(bar);
        if version.major() != regs::VERSION_MAJOR {
            dev_err!(
                pdev,
                "identity mismatch: VERSION reads 0x{:08x} (major {}), expected major {}\n",
                version.0,
                version.major(),
                regs::VERSION_MAJOR
            );
            return Err(ENODEV);
        }

        let caps: regs::CAPS = read_reg(bar);
        let doorbell_info: regs::DOORBELL_INFO = read_reg(bar);
        let engine_info: regs::ENGINE_INFO = read_reg(bar);
        let msix_info: regs::MSIX_INFO = read_reg(bar);
        let test_injections: regs::TEST_INJECTIONS = read_reg(bar);
        // Low half first, as the contract wants split 64-bit values read.
        let vram_lo: regs::VRAM_SIZE_LO = read_reg(bar);
        let vram_hi: regs::VRAM_SIZE_HI = read_reg(bar);

        let reported = msix_info.vectors();
        if reported == 0 {
            dev_err!(
                pdev,
                "MSIX_INFO.vectors is 0: the device has no interrupt\n"
            );
            return Err(ENODEV);
        }
        let max = u32::from(ids::MSIX_MAX_VECTORS);
        if reported > max {
            dev_warn!(
                pdev,
                "MSIX_INFO.vectors is {}, above the contract's {}: using {}\n",
                reported,
                max,
                max
            );
        }
        // `min(max)` makes the conversion infallible; the fallback is never taken.
        let msix_vectors = u16::try_from(reported.min(max)).unwrap_or(ids::MSIX_MAX_VECTORS);

        Ok(Self {
            version,
            caps,
            doorbells: doorbell_info.count(),
            engines: engine_info.count(),
            user_mode_engines: engine_info.user_mode_submission_mask(),
            fence_write_engines: engine_info.fence_write_mask(),
            msix_vectors,
            vram_size: u64::from(vram_hi.value()) << 32 | u64::from(vram_lo.value()),
            test_injections,
        })
    }
}

/// Reads register `R` from `bar`.
#[inline(always)]
fn read_reg<R: Register>(bar: &Bar0<'_>) -> R {
    R::from_raw(bar.read32(R::OFFSET))
}

/// Writes register `R` to `bar`.
#[inline(always)]
pub(crate) fn write_reg<R: Register>(bar: &Bar0<'_>, value: R) {
    bar.write32(value.into_raw(), R::OFFSET)
}

/// The hardware state shared between process context and the IRQ handlers.
pub(crate) struct Hw<'bound> {
    /// BAR0.
    bar: Bar0<'bound>,
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
                    crate::gpucore::MAILBOX_TIMEOUT_MS
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
        // SAFETY: The link is a field of `Gpu` declared (so dropped, and on a failed
        // initialisation dropped in reverse order) before `hw` and `_enabled`, and its `Drop`
        // revokes; `hw` (kept alive by `Gpu::hw`) holds BAR0 and `dev` is bound for `'bound`.
        unsafe { hw.core.attach(&hw.bar, dev.as_ref()) };
        Self(hw.core.clone())
    }
}

impl Drop for CoreLink {
    fn drop(&mut self) {
        self.0.revoke();
    }
}

/// The driver core of one bound Belfry device.
///
/// Dropping it first quiesces the device ([`Gpu::quiesce`]); then the fields drop in declaration
/// order: IRQ handlers, the vectors they were requested on, the hardware (DMA block, BAR0), and
/// last the PCI enable.
#[pin_data(PinnedDrop)]
pub(crate) struct Gpu<'bound> {
    /// Takes BAR0 back from the core first, so no open file reaches the device any more.
    link: CoreLink,
    /// One handler per allocated vector; they borrow `vectors`.
    irqs: KVec<Pin<KBox<kernel::irq::ThreadedRegistration<'bound, irq::VectorHandler<'bound>>>>>,
    /// The MSI-X vector allocation.
    vectors: pci::IrqVectorRegistration<'bound>,
    /// Registers and mailbox, shared with the handlers.
    hw: Arc<Hw<'bound>>,
    /// Identity and geometry.
    info: DeviceInfo,
    /// The bound PCI device.
    pdev: &'bound pci::Device<Bound>,
    /// Disables the PCI device when dropped (last).
    _enabled: ffi::EnabledDevice<'bound>,
    /// `irqs` borrow `vectors` in place: a `Gpu` never moves.
    #[pin]
    _pin: PhantomPinned,
}

impl<'bound> Gpu<'bound> {
    /// Brings up device `index` (the `N` of `belfry<N>`): PCI enable, bus mastering, DMA mask,
    /// BAR0 and the identity check now; MSI-X, interrupt handlers, device enable and the mailbox
    /// self-test on every vector in the returned initialiser.
    ///
    /// # Errors
    ///
    /// `ENODEV` on an identity mismatch, `ETIMEDOUT`/`EIO`/`EINTR` from the self-test, or the
    /// error of the failing kernel call. On a failed self-test the device is reset and quiesced
    /// before the resources are released.
    pub(crate) fn new(
        pdev: &'bound pci::Device<CoreCtx<'_>>,
        index: usize,
    ) -> Result<impl PinInit<Self, Error> + 'bound> {
        let enabled = ffi::EnabledDevice::new(pdev)?;
        pdev.set_master();
        // SAFETY: Called from probe, before any DMA allocation or mapping for this device.
        unsafe { pdev.dma_set_mask_and_coherent(DmaMask::new::<64>())? };

        let bound: &'bound pci::Device<Bound> = pdev;
        let bar = bound.iomap_region_sized::<BAR0_SIZE>(ids::REGS_BAR, c"belfry-regs")?;
        let info = DeviceInfo::read(bound, &bar)?;
        let doorbell_bar = bound.resource_start(ids::DOORBELL_BAR)?;
        let core = Core::new(bound.as_ref(), info, doorbell_bar)?;
        let hw = Arc::new(Hw { bar, core }, GFP_KERNEL)?;
        let msix_only = pci::IrqTypes::default().with(pci::IrqType::MsiX);

        Ok(try_pin_init!(Self {
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
            // SAFETY: `vectors` is initialised at this point (fields are initialised in the order
            // written here), lives at a pinned address (`Gpu` is `!Unpin` and never moves), and
            // is dropped after `irqs`: field declaration order on drop, reverse initialisation
            // order if a later initialiser fails.
            irqs: irq::request_vectors(unsafe { &*core::ptr::from_ref(vectors) }, hw, index)?,
            _pin: PhantomPinned,
            _: {
                start(bound, hw, vectors.len())?;
            },
        }? Error))
    }

    /// The device-programming core, shared with the front ends.
    pub(crate) fn core(&self) -> &Arc<Core> {
        self.hw.core()
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

    /// Stops the device before its resources go: masks every interrupt cause, resets it (which
    /// drops every object and a command in flight, so nothing refers to memory about to be
    /// freed), clears `CONTROL.enable` and turns bus mastering off.
    fn quiesce(&self) {
        self.hw.write(regs::INT_MASK::default());
        self.hw.write(regs::CONTROL::default().with_reset(true));
        self.hw.write(regs::CONTROL::default());
        ffi::clear_master(self.pdev);
    }
}

#[pinned_drop]
impl PinnedDrop for Gpu<'_> {
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
        ffi::clear_master(pdev);
    }
    result
}
