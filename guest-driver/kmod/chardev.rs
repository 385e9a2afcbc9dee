// SPDX-License-Identifier: GPL-2.0

//! The character device front end: one misc device, `/dev/belfry<N>`, per bound device.
//!
//! Only `open` and `release` exist so far; ioctls come later. This file holds no device
//! programming: it reaches the driver core through the registration it belongs to.

use kernel::{
    device::Device,
    fs::File,
    miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    prelude::*,
    sync::aref::ARef,
};

use crate::MAX_DEVICES;

/// Names of the misc devices, by device slot (`MiscDeviceOptions` wants a `&'static CStr`).
static NAMES: [&CStr; MAX_DEVICES] = [
    c"belfry0", c"belfry1", c"belfry2", c"belfry3", c"belfry4", c"belfry5", c"belfry6", c"belfry7",
];

/// The misc device of one bound Belfry device.
///
/// # Invariants
///
/// Every `MiscDeviceRegistration<BelfryFile>` is the `misc` field of a `Registration` (only
/// [`Registration::new`] creates one), which is what [`Registration::from_misc`] relies on.
#[pin_data]
pub(crate) struct Registration {
    /// The registered misc device; deregistered when dropped.
    #[pin]
    misc: MiscDeviceRegistration<BelfryFile>,
    /// The device slot `N` of `/dev/belfry<N>`.
    index: usize,
}

impl Registration {
    /// Registers `/dev/belfry<index>`.
    ///
    /// # Errors
    ///
    /// `EINVAL` if `index` is not below `MAX_DEVICES`, or the error of `misc_register`.
    pub(crate) fn new(index: usize) -> impl PinInit<Self, Error> {
        pin_init::pin_init_scope(move || {
            let name = *NAMES.get(index).ok_or(EINVAL)?;
            Ok(try_pin_init!(Self {
                misc <- MiscDeviceRegistration::register(MiscDeviceOptions { name }),
                index,
            }? Error))
        })
    }

    /// The registration that `misc` is the `misc` field of.
    fn from_misc(misc: &MiscDeviceRegistration<BelfryFile>) -> &Self {
        // SAFETY: By the type invariant, `misc` is the `misc` field of a `Registration`, so
        // stepping back by the field's offset stays in the same allocation and yields a valid
        // `Registration` that lives at least as long as `misc`.
        unsafe { &*kernel::container_of!(core::ptr::from_ref(misc).cast_mut(), Registration, misc) }
    }
}

/// An open file of `/dev/belfry<N>`.
pub(crate) struct BelfryFile {
    /// The misc device, for messages.
    dev: ARef<Device>,
    /// The device slot `N`.
    index: usize,
}

#[vtable]
impl MiscDevice for BelfryFile {
    type Ptr = KBox<Self>;

    fn open(_file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<KBox<Self>> {
        let index = Registration::from_misc(misc).index;
        let dev = ARef::from(misc.device());
        dev_dbg!(dev, "belfry{}: open\n", index);
        Ok(KBox::new(Self { dev, index }, GFP_KERNEL)?)
    }

    fn release(this: KBox<Self>, _file: &File) {
        dev_dbg!(this.dev, "belfry{}: release\n", this.index);
    }
}
