// SPDX-License-Identifier: GPL-2.0

//! BAR0 register access and what the device says about itself at probe.
//!
//! Implementation note: the device is untrusted hardware. Every value read here is checked or
//! clamped before use. A trapped BAR read costs 30-84 µs under TCG (a write is cheap), so the
//! registers are read at probe only; later results come from memory the device writes.

use kernel::{device::Bound, io::Io, pci, prelude::*};

use crate::abi::{pci as ids, regs};
use crate::bindings::param;

/// Size of BAR0 as a const generic.
// CAST: `REGS_BAR_SIZE` is 64 KiB.
pub(crate) const BAR0_SIZE: usize = ids::REGS_BAR_SIZE as usize;

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
    SPLIT_INFO,
    OS_CAPS,
    VRAM_SIZE_LO,
    VRAM_SIZE_HI,
    CONTROL,
    INT_CLEAR,
    INT_MASK,
    MB_ARG_LO,
    MB_ARG_HI,
    MB_SUBMIT,
    DB_WAKE,
    CMD_RING_BASE_LO,
    CMD_RING_BASE_HI,
    CMD_RING_SIZE,
    CMD_RING_CTRL,
    CMD_RING_DOORBELL,
    CMD_RING_ERROR,
    IRQ_MODERATION,
    IRQ_MODERATED,
    LOG_VERBOSE,
);

/// What the device told us about itself at probe time, already validated.
#[derive(Clone, Copy)]
pub(crate) struct DeviceInfo {
    /// `VERSION`; its major equals [`regs::VERSION_MAJOR`].
    pub(crate) version: regs::VERSION,
    /// `CAPS`, without the fence types the OS does not support (`os_caps`).
    pub(crate) caps: regs::CAPS,
    /// The OS capabilities (CAP-04) read at probe, written to `OS_CAPS` at bring-up.
    pub(crate) os_caps: regs::OS_CAPS,
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
    /// `SPLIT_INFO.slots`: slots of the resource table (MaxAllocationListSlotId), at most
    /// `packet::BIND_SLOTS_MAX`.
    pub(crate) split_slots: u32,
    /// The command ring's doorbell page (`CMD_RING_DOORBELL`) when `CAPS.cmd_ring` is set and
    /// the page lies past the queue doorbells; `None`: mailbox commands go through BAR0.
    pub(crate) cmd_ring_doorbell: Option<u32>,
}

impl DeviceInfo {
    /// Whether the device injects test-only faults (`TEST_INJECTIONS` non-zero).
    pub(crate) fn has_test_faults(&self) -> bool {
        self.test_injections.0 != 0
    }

    /// A test-only delay: `ms` (a test-only module parameter's value) on a device with
    /// test-only faults, 0 on every other device.
    pub(crate) fn test_delay_ms(&self, ms: u32) -> u32 {
        if self.has_test_faults() {
            ms
        } else {
            0
        }
    }

    /// Reads and checks the identity and geometry registers.
    ///
    /// # Errors
    ///
    /// `ENODEV` if `MAGIC` is wrong, `VERSION.major` is not ours or `MSIX_INFO.vectors` is 0.
    pub(crate) fn read(pdev: &pci::Device<Bound>, bar: &Bar0<'_>) -> Result<Self> {
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

        // CAP-04: the OS capabilities, version 1, read once here; a fence type the OS does not
        // support is one the device does not offer to this driver.
        let os_caps = regs::OS_CAPS::default()
            .with_version(regs::OS_CAPS_VERSION)
            .with_optimized_default_fence(param::os_optimized_default_fences_param())
            .with_intra_gpu_fence(param::os_intra_gpu_fences_param());
        let device_caps: regs::CAPS = read_reg(bar);
        let caps = device_caps
            .with_optimized_default_fence(device_caps.optimized_default_fence() && os_caps.optimized_default_fence())
            .with_intra_gpu_fence(device_caps.intra_gpu_fence() && os_caps.intra_gpu_fence());
        let doorbell_info: regs::DOORBELL_INFO = read_reg(bar);
        let engine_info: regs::ENGINE_INFO = read_reg(bar);
        let msix_info: regs::MSIX_INFO = read_reg(bar);
        let test_injections: regs::TEST_INJECTIONS = read_reg(bar);
        let split_info: regs::SPLIT_INFO = read_reg(bar);
        // Low half first, as the contract wants split 64-bit values read.
        let vram_lo: regs::VRAM_SIZE_LO = read_reg(bar);
        let vram_hi: regs::VRAM_SIZE_HI = read_reg(bar);

        let cmd_ring_doorbell = if caps.cmd_ring() {
            let index = read_reg::<regs::CMD_RING_DOORBELL>(bar).index();
            let sane = index >= doorbell_info.count() && index <= ids::DOORBELL_MAX_COUNT;
            if !sane {
                dev_warn!(
                    pdev,
                    "CMD_RING_DOORBELL {} is not past the {} queue doorbells: mailbox through BAR0\n",
                    index,
                    doorbell_info.count()
                );
            }
            sane.then_some(index)
        } else {
            None
        };

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
            os_caps,
            doorbells: doorbell_info.count(),
            engines: engine_info.count(),
            user_mode_engines: engine_info.user_mode_submission_mask(),
            fence_write_engines: engine_info.fence_write_mask(),
            msix_vectors,
            vram_size: u64::from(vram_hi.value()) << 32 | u64::from(vram_lo.value()),
            test_injections,
            split_slots: split_info
                .slots()
                .min(crate::abi::packet::BIND_SLOTS_MAX),
            cmd_ring_doorbell,
        })
    }
}

/// Reads register `R` from `bar`.
#[inline(always)]
pub(crate) fn read_reg<R: Register>(bar: &Bar0<'_>) -> R {
    R::from_raw(bar.read32(R::OFFSET))
}

/// Writes register `R` to `bar`.
#[inline(always)]
pub(crate) fn write_reg<R: Register>(bar: &Bar0<'_>, value: R) {
    bar.write32(value.into_raw(), R::OFFSET)
}
