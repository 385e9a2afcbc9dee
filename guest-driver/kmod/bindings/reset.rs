// SPDX-License-Identifier: GPL-2.0

//! PCI function reset hooks: `reset_prepare` and `reset_done` of `struct pci_error_handlers`,
//! which the 7.3 Rust `pci::Driver` cannot declare (its `struct pci_driver` is filled inside the
//! `kernel` crate, which sets no `err_handler`).
//!
//! The PCI core calls them around every reset of a function it performs for someone else: a
//! write of `1` to `/sys/bus/pci/devices/<address>/reset` (`pci_reset_function`), a bus or slot
//! reset of a bridge above the device. Without them the core resets the bound device under its
//! driver ("resetting" in the log) and the driver goes on programming a device that forgot it.
//! [`install`], called from probe, points the driver's `err_handler` at handlers that call the
//! driver data's [`FunctionReset`] methods. The PCI core calls both with the device lock held,
//! so they never race the driver's probe or remove (the driver data is there or it is not).

use core::marker::PhantomData;

use kernel::{bindings, device::Core, pci};

/// What a bound driver's data does around a reset of its function.
pub(crate) trait FunctionReset {
    /// Before the reset: the device is about to forget every state the driver gave it.
    fn reset_prepare(&self);
    /// After the reset, the function's configuration space restored.
    fn reset_done(&self);
}

/// The handlers for driver data `T`.
struct Handlers<T>(PhantomData<T>);

impl<T: FunctionReset> Handlers<T> {
    /// The table the driver's `err_handler` points at (promoted to a `'static`: no interior
    /// mutability, only function pointers).
    const TABLE: bindings::pci_error_handlers = bindings::pci_error_handlers {
        error_detected: None,
        mmio_enabled: None,
        slot_reset: None,
        reset_prepare: Some(reset_prepare::<T>),
        reset_done: Some(reset_done::<T>),
        resume: None,
        cor_error_detected: None,
    };
}

/// The driver data of `pdev`, if a driver's probe has stored it and its remove not taken it.
///
/// # Safety
///
/// `pdev` is a valid PCI device whose device lock the caller holds, and its driver data, when
/// set, is a `T` (the driver that called [`install`] for `T` is the one bound).
unsafe fn driver_data<'a, T>(pdev: *mut bindings::pci_dev) -> Option<&'a T> {
    // SAFETY: `pdev` is valid (the caller's contract).
    let data = unsafe { bindings::dev_get_drvdata(&raw mut (*pdev).dev) };
    // SAFETY: A non-null driver data is the `T` the Rust PCI abstraction stored at probe
    // (`Pin<KBox<T>>::into_foreign`), which stays until its remove, excluded by the device lock.
    (!data.is_null()).then(|| unsafe { &*data.cast::<T>() })
}

/// `reset_prepare`.
///
/// # Safety
///
/// Called by the PCI core only, with the device lock of `pdev` held.
unsafe extern "C" fn reset_prepare<T: FunctionReset>(pdev: *mut bindings::pci_dev) {
    // SAFETY: The PCI core calls this for the device bound to the driver whose `err_handler`
    // [`install`] set for `T`, with the device lock held.
    if let Some(data) = unsafe { driver_data::<T>(pdev) } {
        data.reset_prepare();
    }
}

/// `reset_done`.
///
/// # Safety
///
/// As for [`reset_prepare`].
unsafe extern "C" fn reset_done<T: FunctionReset>(pdev: *mut bindings::pci_dev) {
    // SAFETY: As in `reset_prepare`.
    if let Some(data) = unsafe { driver_data::<T>(pdev) } {
        data.reset_done();
    }
}

/// Points the `err_handler` of the driver probing `pdev` at the reset handlers of driver data
/// `T`, the type the driver's probe stores. Called from probe: the PCI core set the device's
/// driver before calling it. Every probe writes the same table.
pub(crate) fn install<T: FunctionReset>(pdev: &pci::Device<Core<'_>>) {
    let table: &'static bindings::pci_error_handlers = &Handlers::<T>::TABLE;
    // CAST: `pci::Device` is a `#[repr(transparent)]` wrapper of `Opaque<bindings::pci_dev>`
    // (itself transparent); the abstraction's own `as_raw()` is private to the `kernel` crate.
    let raw = core::ptr::from_ref(pdev)
        .cast::<bindings::pci_dev>()
        .cast_mut();
    // SAFETY: `raw` is the device being probed (valid, device lock held); its `driver` is our
    // `struct pci_driver`, which the module's registration owns (writable, alive while the
    // driver is registered). The PCI core reads `err_handler` only under a bound device's
    // lock; the store is one aligned pointer, always of the same table.
    unsafe {
        let drv = (*raw).driver;
        if !drv.is_null() {
            core::ptr::write_volatile(&raw mut (*drv).err_handler, table);
        }
    }
}
