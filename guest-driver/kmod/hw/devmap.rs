// SPDX-License-Identifier: GPL-2.0

//! A page of a [`DmaBuf`] as one more device reaches it.
//!
//! A buffer is allocated for one device, and its bus address is an address in that device's
//! DMA space only: behind an IOMMU every device has a domain of its own, where that address
//! names nothing (or another page). A page shared with other devices (a cross-adapter fence's
//! CurrentValue, a peer-signal page) is therefore mapped once more for each of them
//! (`dma_map_phys`), and each is told its own address. For the buffer's own device the view is
//! the buffer's address and maps nothing; without an IOMMU every view's address is the page's
//! guest physical address.
//!
//! The mapping is undone when the view is dropped. A view whose device may still be using the
//! address (it did not confirm it let go) is kept instead ([`DeviceView::keep`]): the address
//! must not be handed out again for another page while that device could write to it.

use kernel::{
    bindings,
    device::{Bound, Device},
    prelude::*,
    sync::aref::ARef,
};

use crate::bindings::mm::kernel_pfn;
use crate::hw::dmamem::{DmaBuf, PAGE};

/// `DMA_MAPPING_ERROR`: the address `dma_map_phys` returns on failure.
const DMA_MAPPING_ERROR: u64 = u64::MAX;

/// The raw device of `dev`.
fn raw(dev: &Device) -> *mut bindings::device {
    // CAST: `Device` is a `#[repr(transparent)]` wrapper of `Opaque<bindings::device>` (itself
    // transparent over the C struct); the C API takes a mutable pointer it does not write
    // through for these calls.
    core::ptr::from_ref(dev).cast::<bindings::device>().cast_mut()
}

/// The first page of a buffer as one device reaches it.
pub(crate) struct DeviceView {
    /// The device.
    dev: ARef<Device>,
    /// Its bus address of the page.
    address: u64,
    /// Whether the address is a mapping of its own (another device's buffer), to undo.
    mapped: bool,
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
                dev: owner.into(),
                address: buf.dma_address(),
                mapped: false,
            });
        }
        let phys = kernel_pfn(buf.cpu_ptr()) << bindings::PAGE_SHIFT;
        // SAFETY: `dev` is a bound device; `phys` is the first page of `buf`, memory this module
        // owns and keeps while the view exists (its holders hold the buffer).
        let address = unsafe {
            bindings::dma_map_phys(
                raw(owner),
                phys,
                PAGE,
                bindings::dma_data_direction::DMA_BIDIRECTIONAL,
                0,
            )
        };
        if address == DMA_MAPPING_ERROR {
            return Err(ENOMEM);
        }
        Ok(Self {
            dev: owner.into(),
            address,
            mapped: true,
        })
    }

    /// The device's bus address of the page.
    pub(crate) fn address(&self) -> u64 {
        self.address
    }

    /// Whether it is `dev`'s view.
    pub(crate) fn is_for(&self, dev: &Device) -> bool {
        core::ptr::eq(&*self.dev, dev)
    }

    /// Leaves the mapping in place for good: the device may still use the address.
    pub(crate) fn keep(mut self) {
        self.mapped = false;
    }
}

impl Drop for DeviceView {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: `address` is the live mapping `new` made for this device, undone once.
            unsafe {
                bindings::dma_unmap_phys(
                    raw(&self.dev),
                    self.address,
                    PAGE,
                    bindings::dma_data_direction::DMA_BIDIRECTIONAL,
                    0,
                )
            };
        }
    }
}
