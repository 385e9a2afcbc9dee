// SPDX-License-Identifier: GPL-2.0

//! DMA buffers: whole pages that the device reaches by DMA and the CPU by volatile accesses.
//!
//! Every page table, ring, fence value page, interrupt ring and user allocation of the driver is
//! a [`DmaBuf`]. The offsets passed to its accessors are chosen by the module, never taken from
//! userspace or the device unchecked; an access outside the buffer (a module bug) is ignored (a
//! read gives 0) rather than touching memory that is not ours.
//!
//! A buffer is zeroed, physically contiguous pages of the page allocator, mapped for its device
//! through [`super::dmamap`] (both ways; x86-64's DMA is cache-coherent, so the CPU and the device
//! see each other's stores as with coherent memory). The memory and the mapping have separate
//! lives: the mapping is undone when the buffer is dropped or, at the latest, when the device
//! unbinds (after its reset, with bus mastering off), while the pages go only with the buffer —
//! so a buffer an open file, a process's mapping or the quarantine still holds at unbind stays
//! valid memory, which the device can no longer reach.
//!
//! Every buffer is charged to the memory cgroup of the task that allocates it
//! (`GFP_KERNEL_ACCOUNT`, as DRM drivers charge their GEM objects' pages): a process's
//! allocations, page tables, rings and fence pages count against its `memory.max`, and a
//! process past it gets `ENOMEM`, behind an IOMMU as without one (`__GFP_RETRY_MAYFAIL`: the
//! charge fails rather than run the cgroup's OOM killer). Buffers made in kernel threads (the interrupt thread, probe)
//! go to the root cgroup.

use core::ptr::NonNull;

use kernel::{
    bindings,
    device::{Bound, Device},
    prelude::*,
};

use super::dmamap::DmaMapping;
use crate::bindings::{
    mm::{kernel_pfn, PageRegion, PAGE_SHIFT},
    pfnmap::MappablePage,
};

/// `__GFP_RETRY_MAYFAIL` (`gfp_types.h`; bindgen gives only its bit number).
const GFP_RETRY_MAYFAIL: bindings::gfp_t = 1 << bindings::___GFP_RETRY_MAYFAIL_BIT;

/// Bytes per page.
pub(crate) const PAGE: usize = 4096;

/// Zeroed, page-granular DMA memory of one device.
pub(crate) struct DmaBuf {
    /// The kernel (direct-map) address of the first byte: `size` bytes of `alloc_pages_exact`,
    /// page aligned (so 8-byte aligned).
    cpu: NonNull<u8>,
    /// Size in bytes, a whole number of pages.
    size: usize,
    /// The device's mapping of it: its bus address is an address of that device's DMA space
    /// (`hw::devmap` for the others). Dropped by hand in `Drop`, before the pages are freed.
    mapping: core::mem::ManuallyDrop<DmaMapping>,
}

// SAFETY: The pages are owned by the buffer and accessed only through volatile accesses and
// copies that any thread may make; the mapping is `Send`.
unsafe impl Send for DmaBuf {}
// SAFETY: As above: `&DmaBuf` only reads and writes the pages volatilely.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    /// Allocates `pages` zeroed pages for `dev` and maps them for it.
    ///
    /// # Errors
    ///
    /// `EINVAL` if `pages` is 0 or too large, `ENOMEM` (quietly: the page allocator prints no
    /// warning, so no size a process asks for can make the kernel warn; also when the caller's
    /// memory cgroup is at its limit, or the mapping failed).
    pub(crate) fn new(dev: &Device<Bound>, pages: usize) -> Result<Self> {
        let size = pages.checked_mul(PAGE).ok_or(EINVAL)?;
        if size == 0 {
            return Err(EINVAL);
        }
        // `__GFP_NOWARN`: a size userspace chose may fail (ENOMEM), never warn.
        // `GFP_KERNEL_ACCOUNT`: charged to the caller's memory cgroup; `__GFP_RETRY_MAYFAIL`:
        // at the cgroup's limit the charge fails (ENOMEM) instead of running its OOM killer.
        let gfp = bindings::GFP_KERNEL_ACCOUNT
            | bindings::__GFP_ZERO
            | bindings::__GFP_NOWARN
            | GFP_RETRY_MAYFAIL;
        // SAFETY: any size and these flags may be asked for; NULL on failure.
        let cpu = NonNull::new(unsafe { bindings::alloc_pages_exact_noprof(size, gfp) })
            .ok_or(ENOMEM)?
            .cast::<u8>();
        let phys = kernel_pfn(cpu.as_ptr()) << PAGE_SHIFT;
        // SAFETY: `phys..phys + size` are the pages just allocated (physically contiguous),
        // freed only in `Drop`, after the mapping is dropped.
        match unsafe { DmaMapping::new(dev, phys, size) } {
            Ok(mapping) => Ok(Self {
                cpu,
                size,
                mapping: core::mem::ManuallyDrop::new(mapping),
            }),
            Err(e) => {
                // SAFETY: allocated above with this size, never mapped, never shared.
                unsafe { bindings::free_pages_exact(cpu.as_ptr().cast(), size) };
                Err(e)
            }
        }
    }

    /// The device (bus) address of the first byte.
    pub(crate) fn dma_address(&self) -> u64 {
        self.mapping.address()
    }

    /// Whether it was allocated for `dev` (its bus address is `dev`'s).
    pub(crate) fn is_for(&self, dev: &Device) -> bool {
        self.mapping.is_for(dev)
    }

    /// Size in bytes.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Size in pages.
    pub(crate) fn pages(&self) -> usize {
        self.size / PAGE
    }

    /// The kernel virtual address of the first byte.
    pub(crate) fn cpu_ptr(&self) -> *mut u8 {
        self.cpu.as_ptr()
    }

    /// The pages as a region to map into a process (`bindings::mm::map_pages`).
    pub(crate) fn region(&self) -> PageRegion {
        PageRegion {
            pfn: kernel_pfn(self.cpu_ptr()),
            size: self.size,
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

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // SAFETY: dropped once, here, before the pages it maps are freed.
        unsafe { core::mem::ManuallyDrop::drop(&mut self.mapping) };
        // SAFETY: the pages `new` allocated with this size; the device's mapping of them is
        // undone (just now, or at its unbind), and no process maps them any more (a mapping holds
        // the buffer).
        unsafe { bindings::free_pages_exact(self.cpu.as_ptr().cast(), self.size) };
    }
}

/// A buffer's first page can be shown by a pfn mapping that holds the buffer
/// (`bindings::pfnmap`).
impl MappablePage for DmaBuf {
    fn pfn(&self) -> u64 {
        kernel_pfn(self.cpu_ptr())
    }
}
