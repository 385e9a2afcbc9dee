// SPDX-License-Identifier: GPL-2.0

//! A page of a [`DmaBuf`] as one more device reaches it.
//!
//! A buffer is allocated for one device, and its bus address is an address in that device's
//! DMA space only: behind an IOMMU every device has a domain of its own, where that address
//! names nothing (or another page). A page shared with other devices (a cross-adapter fence's
//! CurrentValue, a peer-signal page) is therefore mapped once more for each of them
//! (`dma_map_phys`, [`super::dmamap`]), and each is told its own address. For the buffer's own device the view is
//! the buffer's address and maps nothing; without an IOMMU every view's address is the page's
//! guest physical address.
//!
//! The mapping is undone when the view is dropped. A view whose device may still be using the
//! address (it did not confirm it let go) is kept instead ([`DeviceView::keep`]): the address
//! must not be handed out again for another page while that device could write to it; that
//! device's unbind undoes it, once the device is reset ([`super::dmamap`]).

use kernel::{
    bindings,
    device::{Bound, Device},
    prelude::*,
    sync::aref::ARef,
};

use super::dmamap::DmaMapping;
use crate::bindings::mm::kernel_pfn;
use crate::hw::dmamem::{DmaBuf, PAGE};

/// How a view reaches its page.
enum Reach {
    /// The buffer's own address on the device it was allocated for.
    Own(ARef<Device>, u64),
    /// A mapping of its own on another device.
    Mapped(DmaMapping),
}

/// The first page of a buffer as one device reaches it.
pub(crate) struct DeviceView {
    /// The device and its address of the page.
    reach: Reach,
}

impl DeviceView {
    /// The first page of `buf` as `dev` reaches it: the buffer's own address on the device it
    /// was allocated for, a new mapping on any other.
    ///
    /// # Errors
    ///
    /// `ENOMEM` (the mapping failed).
    pub(crate) fn new(dev: &Device<Bound>, buf: &DmaBuf) -> Result<Self> {
        let owner: &Device = dev;
        if buf.is_for(owner) {
            return Ok(Self {
                reach: Reach::Own(owner.into(), buf.dma_address()),
            });
        }
        let phys = kernel_pfn(buf.cpu_ptr()) << bindings::PAGE_SHIFT;
        // SAFETY: `phys` is the first page of `buf`, memory this module owns and keeps while the
        // view exists (its holders hold the buffer) or, for a kept view, until `dev` unbinds
        // (the holders of a kept view keep the buffer for good).
        let mapping = unsafe { DmaMapping::new(dev, phys, PAGE) }?;
        Ok(Self {
            reach: Reach::Mapped(mapping),
        })
    }

    /// The device's bus address of the page.
    pub(crate) fn address(&self) -> u64 {
        match &self.reach {
            Reach::Own(_, address) => *address,
            Reach::Mapped(m) => m.address(),
        }
    }

    /// Whether it is `dev`'s view.
    pub(crate) fn is_for(&self, dev: &Device) -> bool {
        match &self.reach {
            Reach::Own(own, _) => core::ptr::eq(&**own, dev),
            Reach::Mapped(m) => m.is_for(dev),
        }
    }

    /// Leaves the mapping in place until the device unbinds: the device may still use the
    /// address.
    pub(crate) fn keep(self) {
        if let Reach::Mapped(m) = self.reach {
            m.keep();
        }
    }
}
