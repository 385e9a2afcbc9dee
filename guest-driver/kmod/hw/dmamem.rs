// SPDX-License-Identifier: GPL-2.0

//! DMA-coherent buffers: whole pages that the device reaches by DMA and the CPU by volatile
//! accesses.
//!
//! Every page table, ring, fence value page, interrupt ring and user allocation of the driver is
//! a [`DmaBuf`]. The offsets passed to its accessors are chosen by the module, never taken from
//! userspace or the device unchecked; an access outside the buffer (a module bug) is ignored (a
//! read gives 0) rather than touching memory that is not ours.
//!
//! Every buffer is charged to the memory cgroup of the task that allocates it
//! (`GFP_KERNEL_ACCOUNT`, as DRM drivers charge their GEM objects' pages): a process's
//! allocations, page tables, rings and fence pages count against its `memory.max`, and a
//! process past it gets `ENOMEM`, behind an IOMMU as without one (`__GFP_RETRY_MAYFAIL`,
//! `bindings::coherent`: the allocation fails rather than run the cgroup's OOM killer).
//! Buffers made in kernel threads (the interrupt thread, probe) go to the root cgroup.

use kernel::{
    device::{Bound, Device},
    prelude::*,
};

use crate::bindings::{
    coherent::CoherentPages,
    mm::{kernel_pfn, CoherentRegion},
    pfnmap::MappablePage,
};

/// Bytes per page.
pub(crate) const PAGE: usize = 4096;

/// Zeroed, page-granular DMA-coherent memory.
pub(crate) struct DmaBuf {
    /// The allocation: page aligned, as `dma_alloc_attrs` hands out whole pages; its device's
    /// DMA space is where its bus address is valid (`hw::devmap` for the others).
    mem: CoherentPages,
}

impl DmaBuf {
    /// Allocates `pages` zeroed pages for `dev`.
    ///
    /// # Errors
    ///
    /// `EINVAL` if `pages` is 0 or too large, `ENOMEM` (quietly: the page allocator prints no
    /// warning, so no size a process asks for can make the kernel warn; also when the caller's
    /// memory cgroup is at its limit).
    pub(crate) fn new(dev: &Device<Bound>, pages: usize) -> Result<Self> {
        let size = pages.checked_mul(PAGE).ok_or(EINVAL)?;
        Ok(Self {
            mem: CoherentPages::zeroed(dev, size)?,
        })
    }

    /// The device (guest physical) address of the first byte.
    pub(crate) fn dma_address(&self) -> u64 {
        self.mem.dma_address()
    }

    /// Whether it was allocated for `dev` (its bus address is `dev`'s).
    pub(crate) fn is_for(&self, dev: &Device) -> bool {
        core::ptr::eq(self.mem.device(), dev)
    }

    /// Size in bytes.
    pub(crate) fn size(&self) -> usize {
        self.mem.size()
    }

    /// Size in pages.
    pub(crate) fn pages(&self) -> usize {
        self.mem.size() / PAGE
    }

    /// The kernel virtual address of the first byte (for `dma_mmap_attrs`).
    pub(crate) fn cpu_ptr(&self) -> *mut u8 {
        self.mem.cpu_ptr()
    }

    /// The allocation as a region to map into a process (`bindings::mm::dma_mmap`).
    pub(crate) fn region(&self) -> CoherentRegion {
        CoherentRegion {
            cpu: self.cpu_ptr(),
            dma: self.dma_address(),
            size: self.size(),
        }
    }

    /// Whether `[offset, offset + len)` lies in the buffer and `offset` is `align`-aligned.
    fn fits(&self, offset: usize, len: usize, align: usize) -> bool {
        offset % align == 0
            && offset
                .checked_add(len)
                .is_some_and(|end| end <= self.size())
    }

    /// Volatile 32-bit read at `offset` (4-byte aligned).
    pub(crate) fn read32(&self, offset: usize) -> u32 {
        if !self.fits(offset, 4, 4) {
            return 0;
        }
        // SAFETY: `offset..offset + 4` lies in the allocation (checked above), which is valid
        // for the lifetime of `self`; the pointer is 4-byte aligned (page-aligned base, aligned
        // offset). The device may write concurrently, hence the volatile access.
        unsafe { core::ptr::read_volatile(self.cpu_ptr().add(offset).cast::<u32>()) }
    }

    /// Volatile 32-bit write at `offset` (4-byte aligned).
    pub(crate) fn write32(&self, offset: usize, value: u32) {
        if !self.fits(offset, 4, 4) {
            return;
        }
        // SAFETY: As in `read32`.
        unsafe { core::ptr::write_volatile(self.cpu_ptr().add(offset).cast::<u32>(), value) }
    }

    /// Volatile, single-copy atomic 64-bit read at `offset` (8-byte aligned).
    pub(crate) fn read64(&self, offset: usize) -> u64 {
        if !self.fits(offset, 8, 8) {
            return 0;
        }
        // SAFETY: As in `read32`, with 8-byte alignment (an aligned 64-bit access is single-copy
        // atomic on x86-64).
        unsafe { core::ptr::read_volatile(self.cpu_ptr().add(offset).cast::<u64>()) }
    }

    /// Volatile 64-bit write at `offset` (8-byte aligned).
    pub(crate) fn write64(&self, offset: usize, value: u64) {
        if !self.fits(offset, 8, 8) {
            return;
        }
        // SAFETY: As in `read64`.
        unsafe { core::ptr::write_volatile(self.cpu_ptr().add(offset).cast::<u64>(), value) }
    }

    /// Copies `data` to `offset`. Used only for memory the device does not access at the same
    /// time (an argument block before submission, a ring slot before the write index moves).
    pub(crate) fn write_bytes(&self, offset: usize, data: &[u8]) {
        if !self.fits(offset, data.len(), 1) {
            return;
        }
        // SAFETY: The destination range lies in the allocation (checked above) and cannot
        // overlap `data`, a Rust slice outside it.
        unsafe {
            core::ptr::copy_nonoverlapping(data.as_ptr(), self.cpu_ptr().add(offset), data.len())
        }
    }

    /// Copies `out.len()` bytes from `offset` into `out` (zeroes if out of range).
    pub(crate) fn read_bytes(&self, offset: usize, out: &mut [u8]) {
        if !self.fits(offset, out.len(), 1) {
            out.fill(0);
            return;
        }
        // SAFETY: The source range lies in the allocation (checked above) and cannot overlap
        // `out`.
        unsafe {
            core::ptr::copy_nonoverlapping(self.cpu_ptr().add(offset), out.as_mut_ptr(), out.len())
        }
    }
}

/// A buffer's first page can be shown by a pfn mapping that holds the buffer
/// (`bindings::pfnmap`).
impl MappablePage for DmaBuf {
    fn pfn(&self) -> u64 {
        kernel_pfn(self.cpu_ptr())
    }
}
