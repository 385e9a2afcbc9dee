// SPDX-License-Identifier: GPL-2.0

//! DMA-coherent memory allocated with allocation flags the 7.3 abstractions cannot express.
//!
//! The `kernel` crate's `dma::Coherent` takes an `alloc::Flags`, whose constructor is private
//! and whose constants stop at `__GFP_NOWARN`: there is no `__GFP_RETRY_MAYFAIL`. A driver whose
//! buffers have sizes its users choose needs it. Behind an IOMMU, `dma_alloc_attrs` builds a
//! buffer page by page (`__iommu_dma_alloc_noncontiguous`), and an order-0 page charged past
//! the caller's `memory.max` runs the memory cgroup's OOM killer unless the flags say the
//! allocation may fail (`try_charge_memcg`: `__GFP_RETRY_MAYFAIL` gives up after reclaim);
//! without an IOMMU the same buffer is one costly-order allocation, which never runs it. So
//! [`CoherentPages`] calls `dma_alloc_attrs` with `GFP_KERNEL_ACCOUNT | __GFP_NOWARN |
//! __GFP_RETRY_MAYFAIL`: charged to the caller's memory cgroup, refused quietly with `ENOMEM`
//! at its limit (or when the system is out of memory) on every DMA path.

use core::ptr::NonNull;

use kernel::{
    bindings,
    device::{Bound, Device},
    prelude::*,
    sync::aref::ARef,
};

/// `__GFP_RETRY_MAYFAIL` (`gfp_types.h`; bindgen gives only its bit number).
const GFP_RETRY_MAYFAIL: bindings::gfp_t = 1 << bindings::___GFP_RETRY_MAYFAIL_BIT;

/// The flags of every allocation: charged to the caller's memory cgroup, never warned about,
/// and allowed to fail rather than run an OOM killer.
const FLAGS: bindings::gfp_t = bindings::GFP_KERNEL_ACCOUNT
    | bindings::__GFP_NOWARN
    | bindings::__GFP_ZERO
    | GFP_RETRY_MAYFAIL;

/// One zeroed DMA-coherent allocation of a device, freed on drop.
///
/// # Invariants
///
/// `cpu` and `dma` are what a successful `dma_alloc_attrs(dev, size, …, 0)` returned, and the
/// allocation has not been freed.
pub(crate) struct CoherentPages {
    /// The device it was allocated for.
    dev: ARef<Device>,
    /// Its kernel virtual address.
    cpu: NonNull<u8>,
    /// Its DMA (bus) address.
    dma: bindings::dma_addr_t,
    /// Its size in bytes.
    size: usize,
}

// SAFETY: The allocation is plain memory owned by this value; freeing it from any thread is
// allowed (`dma_free_attrs` may sleep, and drops happen in process context).
unsafe impl Send for CoherentPages {}
// SAFETY: `&CoherentPages` gives only addresses; every access through them is the owner's,
// volatile and bounds-checked (`hw::dmamem`).
unsafe impl Sync for CoherentPages {}

impl CoherentPages {
    /// Allocates `size` zeroed bytes (a non-zero multiple of the page size) for `dev`.
    ///
    /// # Errors
    ///
    /// `EINVAL` for a size of 0, `ENOMEM` when the allocation fails (the memory cgroup's limit
    /// included), without a warning.
    pub(crate) fn zeroed(dev: &Device<Bound>, size: usize) -> Result<Self> {
        if size == 0 {
            return Err(EINVAL);
        }
        let owner: &Device = dev;
        let raw_dev = raw_device(owner);
        let mut dma: bindings::dma_addr_t = 0;
        // SAFETY: `raw_dev` is a valid, bound device for the duration of the call; `dma` is a
        // valid place for the handle; attributes 0 ask for a kernel mapping.
        let cpu = unsafe { bindings::dma_alloc_attrs(raw_dev, size, &mut dma, FLAGS, 0) };
        let cpu = NonNull::new(cpu.cast::<u8>()).ok_or(ENOMEM)?;
        // INVARIANT: `cpu` and `dma` come from the successful call above.
        Ok(Self {
            dev: owner.into(),
            cpu,
            dma,
            size,
        })
    }

    /// The kernel virtual address of the first byte (page aligned).
    pub(crate) fn cpu_ptr(&self) -> *mut u8 {
        self.cpu.as_ptr()
    }

    /// The DMA (bus) address of the first byte.
    pub(crate) fn dma_address(&self) -> u64 {
        self.dma
    }

    /// Size in bytes.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The device it was allocated for.
    pub(crate) fn device(&self) -> &Device {
        &self.dev
    }
}

impl Drop for CoherentPages {
    fn drop(&mut self) {
        // SAFETY: By the type invariants, `cpu`/`dma`/`size` describe a live allocation of
        // `dev`, freed exactly once here.
        unsafe {
            bindings::dma_free_attrs(
                raw_device(&self.dev),
                self.size,
                self.cpu.as_ptr().cast(),
                self.dma,
                0,
            );
        }
    }
}

/// The C `struct device` of `dev`.
fn raw_device(dev: &Device) -> *mut bindings::device {
    // CAST: `Device` is a `#[repr(transparent)]` wrapper of `Opaque<bindings::device>` (itself
    // transparent); its own `as_raw()` is private to the `kernel` crate.
    core::ptr::from_ref(dev)
        .cast::<bindings::device>()
        .cast_mut()
}
