// SPDX-License-Identifier: GPL-2.0

//! The optimized DEFAULT fence (NF-13). When the device offers `CAPS.optimized_default_fence`,
//! the MonitoredValues of a context's packed (non-shareable) DEFAULT fences live in device
//! memory: a VRAM page of the fence-page bitmap, each at its fence's CurrentValue slot offset,
//! registered with `LOCATION_VRAM`, instead of a system page mapped in the system address space.
//! The GPU's compare after a signal then stays local. Nothing the library sees changes:
//! CurrentValue stays in system memory at the same places and every wait and signal works as
//! for DEFAULT; the library is not told (only `FENCE_INFO.monitored_segment`, a debugging field,
//! shows it). Shareable fences keep MonitoredValue in system memory (N3: sharing wants DEFAULT).
//! With no VRAM fence page free, a page falls back to the DEFAULT form.
//!
//! MonitoredValue is written only by the device (`UPDATE_MONITORED_VALUES`), the first time
//! right after registration with UINT64_MAX (MV-02: VRAM keeps what an earlier fence left). The
//! CPU cannot read VRAM, so the module keeps, per fence, the value the device last accepted
//! (`book::VramMonitored`) for `FENCE_INFO`.

use kernel::prelude::*;

use super::waits::Fences;
use crate::{
    bindings::param,
    abi::{
        fence,
        ids::FenceHandle,
        mailbox::{self, Opcode},
        mmu, uapi,
    },
    hw::{
        command::HwGuard,
        core::Core,
        dmamem::DmaBuf,
    },
};

/// A free VRAM page for fence values (byte offset), among the device's pages and the first
/// `fence_vram_pages` (module parameter).
pub(crate) fn take_vram_page(core: &Core) -> Option<u64> {
    let pages = u32::try_from(core.info().vram_size / mmu::PAGE_SIZE).unwrap_or(u32::MAX);
    core.objects().take_vram_fence_page(pages.min(param::fence_vram_pages_param()))
}

/// The MonitoredValue page of a page of packed DEFAULT fences.
pub(crate) enum MonitoredPage {
    /// DEFAULT: a system page, mapped in the system address space one page after CurrentValue.
    System(DmaBuf),
    /// Optimized DEFAULT: a VRAM page (byte offset), mapped nowhere.
    Vram(u64),
}

impl MonitoredPage {
    /// A new MonitoredValue page: in VRAM when `optimized` and a VRAM fence page is free.
    ///
    /// # Errors
    ///
    /// `ENODEV`, `ENOMEM`.
    pub(crate) fn new(core: &Core, hw: &HwGuard<'_>, optimized: bool) -> Result<Self> {
        if let Some(offset) = optimized.then(|| take_vram_page(core)).flatten() {
            return Ok(Self::Vram(offset));
        }
        Ok(Self::System(DmaBuf::new(hw.dev()?, 1)?))
    }

    /// The system page, to map in the system address space (none for VRAM).
    pub(crate) fn system(&self) -> Option<&DmaBuf> {
        match self {
            Self::System(buf) => Some(buf),
            Self::Vram(_) => None,
        }
    }

    /// Where the MonitoredValue at byte `off` lives, `sys_va` being this page's system VA.
    pub(crate) fn location(&self, sys_va: u64, off: usize) -> mailbox::FenceLocation {
        let (space, base) = match self {
            Self::System(_) => (mailbox::LOCATION_SYSTEM_VA, sys_va),
            Self::Vram(offset) => (mailbox::LOCATION_VRAM, *offset),
        };
        mailbox::FenceLocation {
            space,
            // CAST: below a page.
            address: base + off as u64,
            ..Default::default()
        }
    }

    /// The VRAM page (byte offset) of an optimized page.
    pub(crate) fn vram_offset(&self) -> Option<u64> {
        match self {
            Self::System(_) => None,
            Self::Vram(offset) => Some(*offset),
        }
    }

    /// `FENCE_INFO.monitored_segment` of its fences.
    pub(crate) fn segment(&self) -> u32 {
        match self {
            Self::System(_) => uapi::FENCE_SEGMENT_SYSTEM,
            Self::Vram(_) => uapi::FENCE_SEGMENT_VRAM,
        }
    }

    /// Before registration: a system slot is set to UINT64_MAX by the CPU (nobody waits yet;
    /// MV-02, MV-06); a VRAM slot waits for [`Self::init`].
    pub(crate) fn clear(&self, off: usize) {
        if let Self::System(buf) = self {
            buf.write64(off, fence::MONITORED_VALUE_NONE);
        }
    }

    /// After fence `global` was registered: a VRAM slot is set to UINT64_MAX through the device
    /// and the value kept for `FENCE_INFO`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`, or the mailbox errors (`EIO`, `ENODEV`, `ETIMEDOUT`).
    pub(crate) fn init(&self, fences: &Fences, global: FenceHandle) -> Result {
        if let Self::Vram(_) = self {
            fences.book().vram_monitored.track(global)?;
            let none = fence::MONITORED_VALUE_NONE;
            fences.set_fence_values(Opcode::UpdateMonitoredValues, global, none)?;
        }
        Ok(())
    }

    /// MonitoredValue of fence `global` at byte `off`: read, or (VRAM) as last set.
    pub(crate) fn value(&self, fences: &Fences, global: FenceHandle, off: usize) -> u64 {
        match self {
            Self::System(buf) => buf.read64(off),
            Self::Vram(_) => fences.book().vram_monitored.get(global),
        }
    }

    /// Gives a VRAM page back to the bitmap (its fences are unregistered).
    pub(crate) fn release(self, core: &Core) {
        if let Self::Vram(offset) = self {
            core.objects().put_vram_fence_page(offset);
        }
    }
}
