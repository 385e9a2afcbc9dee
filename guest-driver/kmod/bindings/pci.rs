// SPDX-License-Identifier: GPL-2.0

//! PCI gaps of the 7.3 abstractions: `pci::DeviceId::from_id` takes a `pci::Vendor`, which has
//! no public constructor for an id outside its list (QEMU's `0x1234` is not in it);
//! `pci::Device::enable_device_mem` has no counterpart, so nothing would ever call
//! `pci_disable_device` (which also turns bus mastering off) on unbind; and
//! `pci::Device::set_master` has no counterpart either.

use kernel::{
    bindings,
    device::{Bound, Core},
    pci,
    prelude::*,
};

/// Equivalent of C's `PCI_DEVICE(vendor, device)`: matches `vendor:device`, any subsystem.
pub(crate) const fn pci_device_id(vendor: u16, device: u16) -> pci::DeviceId {
    /// `PCI_ANY_ID`.
    const ANY: u32 = !0;
    let raw = bindings::pci_device_id {
        // CAST: `u16` to `u32` is lossless; `From` is not usable in a `const fn`.
        vendor: vendor as u32,
        // CAST: as above.
        device: device as u32,
        subvendor: ANY,
        subdevice: ANY,
        class: 0,
        class_mask: 0,
        driver_data: 0,
        override_only: 0,
    };
    // SAFETY: `pci::DeviceId` is a `#[repr(transparent)]` wrapper of `bindings::pci_device_id`
    // that adds no invariant (its `RawDeviceId` implementation promises that layout
    // compatibility), and `raw` is exactly what `pci::DeviceId::from_id` builds for a `Vendor`.
    unsafe { core::mem::transmute::<bindings::pci_device_id, pci::DeviceId>(raw) }
}

/// The raw `struct pci_dev` of `pdev`.
fn raw(pdev: &pci::Device<Bound>) -> *mut bindings::pci_dev {
    // CAST: `pci::Device` is a `#[repr(transparent)]` wrapper of `Opaque<bindings::pci_dev>`
    // (itself transparent); the PCI abstraction casts the same way in its probe callback. The
    // abstraction's own `as_raw()` is private to the `kernel` crate.
    core::ptr::from_ref(pdev)
        .cast::<bindings::pci_dev>()
        .cast_mut()
}

/// A PCI device enabled with `enable_device_mem`; dropping it disables the device again.
pub(crate) struct EnabledDevice<'bound>(&'bound pci::Device<Bound>);

impl<'bound> EnabledDevice<'bound> {
    /// Enables the memory resources of `pdev`.
    ///
    /// # Errors
    ///
    /// The error of `pci_enable_device_mem`.
    pub(crate) fn new(pdev: &'bound pci::Device<Core<'_>>) -> Result<Self> {
        pdev.enable_device_mem()?;
        Ok(Self(pdev))
    }
}

impl Drop for EnabledDevice<'_> {
    fn drop(&mut self) {
        // SAFETY: `self.0` is a valid, bound PCI device that `Self::new` enabled, and this runs
        // once per successful enable.
        unsafe { bindings::pci_disable_device(raw(self.0)) };
    }
}

/// Turns bus mastering off for `pdev`.
pub(crate) fn clear_master(pdev: &pci::Device<Bound>) {
    // SAFETY: `pdev` is a valid, bound PCI device.
    unsafe { bindings::pci_clear_master(raw(pdev)) };
}
