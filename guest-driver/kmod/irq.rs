// SPDX-License-Identifier: GPL-2.0

//! Interrupt handlers: one per MSI-X vector, named `belfry<N>-mb` (vector 0, the mailbox vector)
//! and `belfry<N>-v<K>` (vector K) in `/proc/interrupts`.
//!
//! The handlers never read a register (a trapped BAR read costs 30-84 µs under TCG): a mailbox
//! completion is recognised by the `status` word the device wrote into the mailbox block in
//! guest memory, other causes by the records of the interrupt ring (see `gpucore`); the causes
//! seen are acknowledged with one write to `INT_CLEAR`. Work that sleeps (fault processing,
//! the native-fence paths of `fencelog`, which read and flush the fence logs) runs in the
//! handler's thread.

use core::ffi::CStr;

use kernel::{
    irq::{Flags, IrqRequest, IrqReturn, ThreadedHandler, ThreadedIrqReturn, ThreadedRegistration},
    pci,
    prelude::*,
    sync::Arc,
};

use crate::{
    abi::{pci::MSIX_MAX_VECTORS, regs},
    device::Hw,
    MAX_DEVICES,
};

/// The handler of one MSI-X vector.
pub(crate) struct VectorHandler<'bound> {
    /// Registers and mailbox state of the device.
    hw: Arc<Hw<'bound>>,
    /// The vector this handler serves.
    vector: u16,
}

impl ThreadedHandler for VectorHandler<'_> {
    fn handle(&self) -> ThreadedIrqReturn {
        // Every Belfry cause may arrive on this vector (a device with few vectors folds causes
        // onto vector 0): the core looks at the mailbox block and the interrupt ring, both in
        // memory. MSI-X vectors are never shared, so the interrupt is ours either way.
        let core = self.hw.core();
        let (clear, thread) = core.handle_interrupt(self.vector);
        if clear != 0 {
            self.hw.write(regs::INT_CLEAR::default().with_causes(clear));
        }
        // `thread` covers fence records (monitored-fence and NOTIFY records among them, which
        // release work held behind monitored-fence waits, FEN-12, FEN-15) and fault records.
        if thread {
            ThreadedIrqReturn::WakeThread
        } else {
            ThreadedIrqReturn::Handled
        }
    }

    /// Process context, after a context-fault or fence record: the faulted contexts' doorbells
    /// go to DISCONNECTED_ABORT (device loss for that context, DB-16); the fence records' paths
    /// read the fence logs (flushing them, which sleeps on the mailbox) and release the CPU
    /// waits they find satisfied (`fencelog`); the eventfd waits their fences satisfy are
    /// signaled (`fencewait`, FEN-18); held kernel-mode work whose monitored-fence wait is now
    /// reached goes to the device (`kring`, FEN-15).
    fn handle_threaded(&self) -> IrqReturn {
        let core = self.hw.core();
        core.process_faults();
        crate::fencelog::process(core);
        crate::fencewait::complete(core);
        crate::kring::release_held(core);
        IrqReturn::Handled
    }
}

/// Requests a handler on each vector of `vectors` for device slot `index`.
///
/// # Errors
///
/// `EINVAL` if there is no name for a vector (more than `MSIX_MAX_VECTORS` vectors or an index
/// at or above `MAX_DEVICES`), `ENOMEM`, or the error of `request_irq`.
pub(crate) fn request_vectors<'bound>(
    vectors: &'bound pci::IrqVectorRegistration<'bound>,
    hw: &Arc<Hw<'bound>>,
    index: usize,
) -> Result<KVec<Pin<KBox<ThreadedRegistration<'bound, VectorHandler<'bound>>>>>> {
    let mut irqs = KVec::with_capacity(vectors.len(), GFP_KERNEL)?;
    for i in 0..vectors.len() {
        let vector = u16::try_from(i)?;
        let name = irq_name(index, vector).ok_or(EINVAL)?;
        let request: IrqRequest<'bound> = vectors.index(i)?.into();
        let handler = VectorHandler {
            hw: hw.clone(),
            vector,
        };
        // SAFETY: The registration is stored in `Gpu::irqs` and dropped with it; it is never
        // forgotten.
        let registration = unsafe {
            ThreadedRegistration::new(request, Flags::TRIGGER_NONE, name, Ok::<_, Error>(handler))
        };
        irqs.push(KBox::pin_init(registration, GFP_KERNEL)?, GFP_KERNEL)?;
    }
    Ok(irqs)
}

/// Room for the longest name, `belfry7-v63` and its NUL.
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
            // CAST: `device` < `MAX_DEVICES` (8): one digit.
            name[n] = b'0' + device as u8;
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
