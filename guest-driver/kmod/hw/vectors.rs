// SPDX-License-Identifier: GPL-2.0

//! The MSI-X vectors' handler registrations and their names in `/proc/interrupts`:
//! `belfry<N>-mb` (vector 0, the mailbox vector) and `belfry<N>-v<K>` (vector K). What a
//! handler does is the caller's (the interrupt layer, `crate::irq`).

use core::ffi::CStr;

use kernel::{
    irq::{Flags, IrqRequest, ThreadedHandler, ThreadedRegistration},
    pci,
    prelude::*,
};

use crate::{abi::pci::MSIX_MAX_VECTORS, MAX_DEVICES};

/// Requests a handler on each vector of `vectors` for device slot `index`; `make` builds the
/// handler of each vector.
///
/// # Errors
///
/// `EINVAL` if there is no name for a vector (more than `MSIX_MAX_VECTORS` vectors or an index
/// at or above `MAX_DEVICES`), `ENOMEM`, or the error of `request_irq`.
pub(crate) fn request_vectors<'bound, H: ThreadedHandler + 'bound>(
    vectors: &'bound pci::IrqVectorRegistration<'bound>,
    index: usize,
    make: &impl Fn(u16) -> H,
) -> Result<KVec<Pin<KBox<ThreadedRegistration<'bound, H>>>>> {
    let mut irqs = KVec::with_capacity(vectors.len(), GFP_KERNEL)?;
    for i in 0..vectors.len() {
        let vector = u16::try_from(i)?;
        let name = irq_name(index, vector).ok_or(EINVAL)?;
        let request: IrqRequest<'bound> = vectors.index(i)?.into();
        let handler = make(vector);
        // SAFETY: The registration is stored in `BoundGpu::irqs` and dropped with it; it is never
        // forgotten.
        let registration = unsafe {
            ThreadedRegistration::new(request, Flags::TRIGGER_NONE, name, Ok::<_, Error>(handler))
        };
        irqs.push(KBox::pin_init(registration, GFP_KERNEL)?, GFP_KERNEL)?;
    }
    Ok(irqs)
}

/// Room for the longest name, `belfry15-v63` and its NUL.
const NAME_LEN: usize = 16;
/// Vectors that have a name.
const NAMED_VECTORS: usize = MSIX_MAX_VECTORS as usize;

/// The IRQ names, `[device slot][vector]`, NUL-terminated: `request_irq` keeps the pointer for as
/// long as the handler is registered, so the names must be `'static`.
static IRQ_NAMES: [[[u8; NAME_LEN]; NAMED_VECTORS]; MAX_DEVICES] = irq_names();

/// Builds [`IRQ_NAMES`] at compile time.
const fn irq_names() -> [[[u8; NAME_LEN]; NAMED_VECTORS]; MAX_DEVICES] {
    const PREFIX: &[u8] = b"belfry";
    let mut table = [[[0u8; NAME_LEN]; NAMED_VECTORS]; MAX_DEVICES];
    let mut device = 0;
    while device < MAX_DEVICES {
        let mut vector = 0;
        while vector < NAMED_VECTORS {
            let name = &mut table[device][vector];
            let mut n = 0;
            while n < PREFIX.len() {
                name[n] = PREFIX[n];
                n += 1;
            }
            if device >= 10 {
                // CAST: `device` < `MAX_DEVICES` (16): two digits at most.
                name[n] = b'0' + (device / 10) as u8;
                n += 1;
            }
            // CAST: one digit.
            name[n] = b'0' + (device % 10) as u8;
            name[n + 1] = b'-';
            n += 2;
            if vector == 0 {
                name[n] = b'm';
                name[n + 1] = b'b';
            } else {
                name[n] = b'v';
                n += 1;
                if vector >= 10 {
                    // CAST: `vector` < `NAMED_VECTORS` (64): two digits at most.
                    name[n] = b'0' + (vector / 10) as u8;
                    n += 1;
                }
                // CAST: one digit.
                name[n] = b'0' + (vector % 10) as u8;
            }
            vector += 1;
        }
        device += 1;
    }
    table
}

/// The name of `vector` of device slot `index`.
fn irq_name(index: usize, vector: u16) -> Option<&'static CStr> {
    let bytes = IRQ_NAMES.get(index)?.get(usize::from(vector))?;
    CStr::from_bytes_until_nul(bytes).ok()
}
