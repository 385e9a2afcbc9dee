// SPDX-License-Identifier: GPL-2.0

//! `device_reprobe`: unbind a device's driver and probe the device again. A driver recovering
//! a device that stopped answering calls it from a work item of its own (never from the
//! driver's own callbacks, which run with the device lock held, nor from work its unbind
//! waits for).

use kernel::{bindings, device::Device, error::to_result, prelude::*};

/// Unbinds the driver of `dev` and probes `dev` again (`device_reprobe`).
///
/// # Errors
///
/// The error of the new probe (the old binding is gone either way).
pub(crate) fn reprobe(dev: &Device) -> Result {
    // CAST: `Device` is a `#[repr(transparent)]` wrapper of `Opaque<bindings::device>` (itself
    // transparent); its own `as_raw()` is private to the `kernel` crate.
    let raw = core::ptr::from_ref(dev).cast::<bindings::device>().cast_mut();
    // SAFETY: `raw` is a valid device for the call (the caller's reference keeps it alive);
    // `device_reprobe` takes the device lock itself, and the caller holds no lock it takes.
    to_result(unsafe { bindings::device_reprobe(raw) })
}
