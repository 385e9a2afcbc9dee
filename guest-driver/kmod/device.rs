// SPDX-License-Identifier: GPL-2.0

//! The driver core: register access, the CMP mailbox and its self-test, MSI-X vectors.
//!
//! Nothing here knows about character devices: a front end (the misc device today, perhaps DRM
//! later) sits on top of [`Gpu`].
//!
//! Implementation note: the device is untrusted hardware. Every value read from it is checked or
//! clamped before use, and the interrupt handlers read mailbox results from the DMA block in
//! guest memory, never from registers (a trapped BAR read costs 30-84 µs under TCG; a write is
//! cheap). The BAR is a plain lifetime-bound [`pci::Bar`] owned by the driver data, so no RCU
//! guard is ever held here, in particular not across the sleeping mailbox wait.

use core::marker::PhantomPinned;

use kernel::{
    device::{Bound, Core},
    dma::{Coherent, Device as _, DmaMask},
    io::{io_read, io_write, Io},
    new_condvar, new_mutex, new_spinlock_irq, pci,
    prelude::*,
    sync::{
        barrier::{dma_mb, Read},
        Arc, CondVar, CondVarTimeoutResult, Mutex, SpinLockIrq,
    },
    time::msecs_to_jiffies,
    transmute::{AsBytes, FromBytes},
};

use crate::{
    abi::{irq::cause, mailbox, pci as ids, regs},
    ffi, irq,
};

/// Size of BAR0 as a const generic.
// CAST: `REGS_BAR_SIZE` is 64 KiB.
const BAR0_SIZE: usize = ids::REGS_BAR_SIZE as usize;

/// BAR0 (registers, MSI-X table and PBA), mapped for the bound lifetime of the device.
pub(crate) type Bar0<'bound> = pci::Bar<'bound, BAR0_SIZE>;

/// How long the self-test waits for each vector's interrupt.
const SELF_TEST_TIMEOUT_MS: u32 = 5000;

// SAFETY: `SelfTestArgs` is `#[repr(C)]`, made of `u32`s only (a `MailboxHeader` of four `u32`s
// and four `u32`s, 32 bytes, no padding): every bit pattern is valid and it has no interior
// mutability.
unsafe impl FromBytes for mailbox::SelfTestArgs {}
// SAFETY: As above: no padding, so no uninitialized byte, and no interior mutability.
unsafe impl AsBytes for mailbox::SelfTestArgs {}

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
    /// `MSIX_INFO.vectors`, clamped to `1..=MSIX_MAX_VECTORS`.
    pub(crate) msix_vectors: u16,
    /// `VRAM_SIZE_HI:VRAM_SIZE_LO` in bytes.
    pub(crate) vram_size: u64,
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
            msix_vectors,
            vram_size: u64::from(vram_hi.value()) << 32 | u64::from(vram_lo.value()),
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
fn write_reg<R: Register>(bar: &Bar0<'_>, value: R) {
    bar.write32(value.into_raw(), R::OFFSET)
}

/// Interrupt-side mailbox state, shared by the handlers and the waiter.
#[derive(Default)]
struct Events {
    /// Bit `v`: a mailbox completion arrived on MSI-X vector `v` since the bit was last cleared.
    done: u64,
    /// Interrupts received, all vectors together.
    interrupts: u64,
}

/// The hardware state shared between process context and the IRQ handlers.
#[pin_data]
pub(crate) struct Hw<'bound> {
    /// BAR0.
    bar: Bar0<'bound>,
    /// The mailbox argument block (DMA-coherent; page aligned, so 8-byte aligned).
    block: Coherent<mailbox::SelfTestArgs>,
    /// Serialises mailbox commands (one in flight at a time); holds the last sequence number.
    #[pin]
    mailbox: Mutex<u16>,
    /// What the handlers saw; taken in hard-IRQ context, hence interrupt-safe.
    #[pin]
    events: SpinLockIrq<Events>,
    /// Signalled by the handlers when `events` changes.
    #[pin]
    wake: CondVar,
}

impl<'bound> Hw<'bound> {
    fn new(
        bar: Bar0<'bound>,
        block: Coherent<mailbox::SelfTestArgs>,
    ) -> impl PinInit<Self, Error> + 'bound {
        try_pin_init!(Self {
            bar,
            block,
            mailbox <- new_mutex!(0u16),
            events <- new_spinlock_irq!(Events::default()),
            wake <- new_condvar!(),
        }? Error)
    }

    /// Writes register `R`.
    #[inline(always)]
    pub(crate) fn write<R: Register>(&self, value: R) {
        write_reg(&self.bar, value)
    }

    /// The `status` word of the mailbox block, as the device last wrote it (a memory read).
    pub(crate) fn mailbox_status(&self) -> u32 {
        io_read!(&self.block, .header.status)
    }

    /// Records an interrupt on `vector` and, if `completed`, a mailbox completion; wakes the
    /// waiter. Called from the IRQ handlers.
    pub(crate) fn note_interrupt(&self, vector: u16, completed: bool) {
        let mut events = self.events.lock();
        events.interrupts = events.interrupts.wrapping_add(1);
        if completed {
            events.done |= vector_bit(vector);
        }
        drop(events);
        self.wake.notify_all();
    }

    /// Runs `SELF_TEST` on `vector` and checks the answer.
    ///
    /// # Errors
    ///
    /// `ETIMEDOUT` if no completion arrives on `vector` within [`SELF_TEST_TIMEOUT_MS`], `EIO` on
    /// a wrong answer, `EINTR` if a signal interrupts the wait.
    fn self_test(&self, pdev: &pci::Device<Bound>, vector: u16) -> Result {
        let mut seq_guard = self.mailbox.lock();
        let seq = seq_guard.wrapping_add(1);
        *seq_guard = seq;
        let cookie = self_test_cookie(seq, vector);

        let block = &self.block;
        io_write!(block, .header.opcode, mailbox::Opcode::SelfTest as u32);
        io_write!(block, .header.length, mailbox::Opcode::SelfTest.block_len());
        io_write!(block, .header.seq, u32::from(seq));
        io_write!(block, .header.status, mailbox::Status::Pending as u32);
        io_write!(block, .vector, u32::from(vector));
        io_write!(block, .cookie, cookie);
        io_write!(block, .response, 0u32);
        io_write!(block, .reserved, 0u32);
        self.events.lock().done &= !vector_bit(vector);

        let addr: u64 = block.dma_address();
        if addr % mailbox::BLOCK_ALIGN != 0 {
            dev_err!(
                pdev,
                "self-test: DMA block at 0x{:x} is not aligned\n",
                addr
            );
            return Err(EINVAL);
        }
        // MMIO writes are ordered after the block's memory writes above (`writel` semantics).
        // CAST: the two halves of the 64-bit address, truncation intended.
        self.write(regs::MB_ARG_LO::default().with_value(addr as u32));
        // CAST: as above.
        self.write(regs::MB_ARG_HI::default().with_value((addr >> 32) as u32));
        self.write(regs::MB_SUBMIT::default().with_seq(u32::from(seq)));

        let done = self.wait_done(vector).inspect_err(|_| {
            dev_err!(
                pdev,
                "self-test: interrupted by a signal while waiting on vector {}\n",
                vector
            )
        })?;
        if !done {
            let events = self.events.lock();
            let (done, interrupts) = (events.done, events.interrupts);
            drop(events);
            dev_err!(
                pdev,
                "self-test: no interrupt on vector {} within {} ms (completions on vectors 0x{:x}, {} interrupts in all, block status {})\n",
                vector,
                SELF_TEST_TIMEOUT_MS,
                done,
                interrupts,
                status_name(self.mailbox_status())
            );
            return Err(ETIMEDOUT);
        }

        let status = self.mailbox_status();
        // The device writes the payload before the status (release): read it after.
        dma_mb(Read);
        let response = io_read!(block, .response);
        let echoed_seq = io_read!(block, .header.seq);
        let expected = mailbox::self_test_response(cookie);
        let ok = status == mailbox::Status::Ok as u32;
        if !ok || response != expected || echoed_seq != u32::from(seq) {
            dev_err!(
                pdev,
                "self-test: bad response on vector {}: status {}, response 0x{:08x} (expected 0x{:08x}), seq {} (expected {})\n",
                vector,
                status_name(status),
                response,
                expected,
                echoed_seq,
                seq
            );
            return Err(EIO);
        }
        Ok(())
    }

    /// Sleeps until a mailbox completion is recorded on `vector`; `Ok(false)` on timeout.
    ///
    /// # Errors
    ///
    /// `EINTR` if a signal is pending.
    fn wait_done(&self, vector: u16) -> Result<bool> {
        let bit = vector_bit(vector);
        let mut remaining = msecs_to_jiffies(SELF_TEST_TIMEOUT_MS);
        let mut events = self.events.lock();
        while events.done & bit == 0 {
            // The spinlock is released while sleeping; no other lock or RCU guard is held but the
            // mailbox mutex, which may be held across a sleep.
            match self.wake.wait_interruptible_timeout(&mut events, remaining) {
                CondVarTimeoutResult::Timeout => return Ok(false),
                CondVarTimeoutResult::Signal { .. } => return Err(EINTR),
                CondVarTimeoutResult::Woken { jiffies } => remaining = jiffies,
            }
        }
        Ok(true)
    }
}

/// The bit of `vector` in [`Events::done`]; vectors are below `MSIX_MAX_VECTORS` (64).
fn vector_bit(vector: u16) -> u64 {
    1u64.checked_shl(u32::from(vector)).unwrap_or(0)
}

/// A fresh cookie for each submission: the sequence number and vector, scrambled.
fn self_test_cookie(seq: u16, vector: u16) -> u32 {
    (u32::from(seq) << 16 | u32::from(vector)).wrapping_mul(0x9E37_79B9) ^ 0xB31F_5EED
}

/// Name of the raw mailbox status `raw`, for messages.
fn status_name(raw: u32) -> &'static str {
    match mailbox::Status::try_from(raw) {
        Ok(status) => status.name(),
        Err(_) => "(unknown)",
    }
}

/// The driver core of one bound Belfry device.
///
/// Dropping it first quiesces the device ([`Gpu::quiesce`]); then the fields drop in declaration
/// order: IRQ handlers, the vectors they were requested on, the hardware (DMA block, BAR0), and
/// last the PCI enable.
#[pin_data(PinnedDrop)]
pub(crate) struct Gpu<'bound> {
    /// One handler per allocated vector; they borrow `vectors`.
    irqs: KVec<Pin<KBox<kernel::irq::Registration<'bound, irq::VectorHandler<'bound>>>>>,
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
        pdev: &'bound pci::Device<Core<'_>>,
        index: usize,
    ) -> Result<impl PinInit<Self, Error> + 'bound> {
        let enabled = ffi::EnabledDevice::new(pdev)?;
        pdev.set_master();
        // SAFETY: Called from probe, before any DMA allocation or mapping for this device.
        unsafe { pdev.dma_set_mask_and_coherent(DmaMask::new::<64>())? };

        let bound: &'bound pci::Device<Bound> = pdev;
        let bar = bound.iomap_region_sized::<BAR0_SIZE>(ids::REGS_BAR, c"belfry-regs")?;
        let info = DeviceInfo::read(bound, &bar)?;
        let block = Coherent::<mailbox::SelfTestArgs>::zeroed(bound.as_ref(), GFP_KERNEL)?;
        let hw = Arc::pin_init(Hw::new(bar, block), GFP_KERNEL)?;
        let msix_only = pci::IrqTypes::default().with(pci::IrqType::MsiX);

        Ok(try_pin_init!(Self {
            _enabled: enabled,
            pdev: bound,
            hw,
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
            "belfry: Belfry GPU {}.{}: {} MSI-X vectors, {} doorbells, {} engines, VRAM {} MiB, self-test ok on {}/{} vectors\n",
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

    /// Stops the device before its resources go: masks every interrupt cause, clears
    /// `CONTROL.enable` and turns bus mastering off.
    fn quiesce(&self) {
        self.hw.write(regs::INT_MASK::default());
        self.hw.write(regs::CONTROL::default());
        ffi::clear_master(self.pdev);
    }
}

#[pinned_drop]
impl PinnedDrop for Gpu<'_> {
    fn drop(self: Pin<&mut Self>) {
        self.quiesce();
    }
}

/// Enables the device, unmasks every interrupt cause and self-tests vectors `0..count`.
///
/// # Errors
///
/// See [`Hw::self_test`]. On error the device is reset and quiesced.
fn start(pdev: &pci::Device<Bound>, hw: &Hw<'_>, count: usize) -> Result {
    hw.write(regs::CONTROL::default().with_enable(true));
    hw.write(regs::INT_MASK::default().with_causes(cause::ALL));

    let result = (0..count).try_for_each(|v| hw.self_test(pdev, u16::try_from(v)?));
    if result.is_err() {
        // A command may still be in flight: reset the device so that it stops before the DMA
        // block is freed, and keep it from interrupting or mastering the bus.
        hw.write(regs::INT_MASK::default());
        hw.write(regs::CONTROL::default().with_reset(true));
        ffi::clear_master(pdev);
    }
    result
}
