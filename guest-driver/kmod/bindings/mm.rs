// SPDX-License-Identifier: GPL-2.0

//! Memory-management gaps of the 7.3 abstractions: `VmaNew` exposes no `vm_pgoff`; there is no
//! safe way to map a run of the module's pages into a process ([`map_pages`] uses
//! `remap_pfn_range`, as `dma_mmap_attrs` does); there is no `unmap_mapping_range`
//! ([`FileMapping::zap`]); and the pfn of a kernel (direct-map) address needs
//! `slow_virt_to_phys`.

use core::ptr::NonNull;

use kernel::{bindings, error::to_result, fs::File, mm::virt::VmaNew, prelude::*};

/// log2 of the page size.
pub(crate) const PAGE_SHIFT: u32 = 12;

/// The mmap offset of `vma`, in pages.
pub(crate) fn vma_pgoff(vma: &VmaNew) -> u64 {
    // SAFETY: `vma.as_ptr()` is the valid `vm_area_struct` being set up by this mmap call, under
    // the mmap lock; reading a plain field is fine.
    let pgoff = unsafe { (*vma.as_ptr()).vm_pgoff };
    // CAST: `c_ulong` is 64 bits on x86-64.
    pgoff as u64
}

/// Pages to map with [`map_pages`]: the first page frame and the size in bytes of physically
/// contiguous memory the module owns.
pub(crate) struct PageRegion {
    /// Page frame number of the first page.
    pub(crate) pfn: u64,
    /// Its size in bytes.
    pub(crate) size: usize,
}

/// Maps the first `vma.end() - vma.start()` bytes of `region` into `vma` (`remap_pfn_range`,
/// as the DMA API's own `dma_mmap_attrs` does for memory of the direct map).
///
/// # Errors
///
/// `EINVAL` if the mapping is empty or larger than `region`, or the error of
/// `remap_pfn_range`.
///
/// # Safety
///
/// `region` must describe memory the caller keeps alive until every mapping of it is gone, and
/// `vma` must be a shared mapping (`remap_pfn_range` leaves `vm_pgoff` alone then: the VMA keeps
/// its object's own offset, so `unmap_mapping_range` over one object's pages
/// ([`FileMapping::zap`]) reaches no other object's mapping).
pub(crate) unsafe fn map_pages(vma: &VmaNew, region: &PageRegion) -> Result {
    let size = vma.end().checked_sub(vma.start()).ok_or(EINVAL)?;
    if size == 0 || size > region.size {
        return Err(EINVAL);
    }
    let raw_vma = vma.as_ptr();
    // SAFETY: `raw_vma` is a shared VMA being set up under the mmap lock, no larger than the
    // region (checked above); the caller keeps the pages alive until the mapping is gone.
    let ret = unsafe {
        bindings::remap_pfn_range(
            raw_vma,
            vma.start(),
            // CAST: `u64` and `usize` are both 64 bits on x86-64.
            region.pfn as usize,
            size,
            (*raw_vma).vm_page_prot,
        )
    };
    to_result(ret)
}

/// The page-cache mapping of an open file of a misc device (`file->f_mapping`: the device
/// inode's, shared by every file of that device), for `unmap_mapping_range`.
#[derive(Clone, Copy)]
pub(crate) struct FileMapping(NonNull<bindings::address_space>);

// SAFETY: An `address_space` may be used from any thread; `FileMapping` only hands it to
// `unmap_mapping_range`, which takes the locks it needs.
unsafe impl Send for FileMapping {}
// SAFETY: As above: no unsynchronised access through a shared `FileMapping`.
unsafe impl Sync for FileMapping {}

impl FileMapping {
    /// The mapping of `file`.
    pub(crate) fn of(file: &File) -> Option<Self> {
        // SAFETY: `file.as_ptr()` is a valid, open `struct file`; `f_mapping` is set at open and
        // not changed afterwards for a character device.
        NonNull::new(unsafe { (*file.as_ptr()).f_mapping }).map(Self)
    }

    /// Zaps every user mapping of the pages `[pgoff, pgoff + pages)`, so the next access faults.
    ///
    /// # Safety
    ///
    /// A file of the device must still be open (it keeps the inode, and so the mapping, alive).
    pub(crate) unsafe fn zap(self, pgoff: u64, pages: u64) {
        let (Ok(start), Ok(len)) = (
            bindings::loff_t::try_from(pgoff << PAGE_SHIFT),
            bindings::loff_t::try_from(pages << PAGE_SHIFT),
        ) else {
            return;
        };
        // SAFETY: The mapping is alive (caller); `start`/`len` are a byte range of it.
        unsafe { bindings::unmap_mapping_range(self.0.as_ptr(), start, len, 1) };
    }
}

/// The page frame number of the kernel (direct-map) address `ptr`.
pub(crate) fn kernel_pfn(ptr: *mut u8) -> u64 {
    // SAFETY: `slow_virt_to_phys` walks the kernel page tables for any kernel virtual address;
    // callers pass the address of memory they own.
    unsafe { bindings::slow_virt_to_phys(ptr.cast()) >> PAGE_SHIFT }
}
