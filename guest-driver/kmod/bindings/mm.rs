// SPDX-License-Identifier: GPL-2.0

//! Memory-management gaps of the 7.3 abstractions: `VmaNew` exposes no `vm_pgoff`; there is no
//! safe way to map DMA-coherent memory into a process (`vm_insert_page` wants a `struct page`
//! the coherent allocation does not promise), so [`dma_mmap`] uses the DMA API's own
//! `dma_mmap_attrs`; there is no `unmap_mapping_range` ([`FileMapping::zap`]); and the pfn of a
//! kernel (direct-map) address needs `slow_virt_to_phys`.

use core::ptr::NonNull;

use kernel::{bindings, device::Device, error::to_result, fs::File, mm::virt::VmaNew, prelude::*};

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

/// DMA-coherent memory to map with [`dma_mmap`]: the CPU address, the DMA address and the size
/// in bytes of one coherent allocation of `dev`.
pub(crate) struct CoherentRegion {
    /// Kernel virtual address of the first byte.
    pub(crate) cpu: *mut u8,
    /// Its DMA (bus) address.
    pub(crate) dma: u64,
    /// Its size in bytes.
    pub(crate) size: usize,
}

/// Maps the first `vma.end() - vma.start()` bytes of `region` into `vma` with `dma_mmap_attrs`.
///
/// # Errors
///
/// `EINVAL` if the mapping is empty or larger than `region`, or the error of `dma_mmap_attrs`.
///
/// # Safety
///
/// `region` must describe exactly one coherent allocation made for `dev`, the caller must keep
/// it alive until every mapping of it is gone, and `vma` must be a shared mapping (`vm_pgoff`
/// is kept: the object's own offset).
pub(crate) unsafe fn dma_mmap(dev: &Device, vma: &VmaNew, region: &CoherentRegion) -> Result {
    let size = vma.end().checked_sub(vma.start()).ok_or(EINVAL)?;
    if size == 0 || size > region.size {
        return Err(EINVAL);
    }
    let raw_vma = vma.as_ptr();
    // CAST: `Device` is a `#[repr(transparent)]` wrapper of `Opaque<bindings::device>` (itself
    // transparent); its own `as_raw()` is private to the `kernel` crate.
    let raw_dev = core::ptr::from_ref(dev)
        .cast::<bindings::device>()
        .cast_mut();
    // SAFETY: `raw_vma` is being set up under the mmap lock. `dma_mmap_attrs` reads `vm_pgoff` as
    // a page offset into the buffer, so it is 0 for the call; the caller's offset is put back
    // after it (below).
    let pgoff = unsafe { core::mem::replace(&mut (*raw_vma).vm_pgoff, 0) };
    // SAFETY: `raw_dev` is the device the region was allocated for, and the region describes
    // that coherent allocation exactly (caller); `raw_vma` is a VMA being set up (no larger than
    // the region, checked above). The caller keeps the memory alive until the mapping is gone.
    let ret = unsafe {
        bindings::dma_mmap_attrs(
            raw_dev,
            raw_vma,
            region.cpu.cast(),
            region.dma,
            region.size,
            0,
        )
    };
    // SAFETY: As above. The VMA keeps the file offset it was mapped at: every mapping then
    // covers its own object's range of the device inode's address space, and
    // `unmap_mapping_range` over one object's pages ([`FileMapping::zap`]) reaches no other
    // object's mapping (with 0, every mapping covered `[0, size)`, and a zapped doorbell offset
    // in it unmapped another process's allocation). The mapping is shared (the caller refuses
    // private ones), so `remap_pfn_range` did not use `vm_pgoff` for a copy-on-write pfn.
    unsafe { (*raw_vma).vm_pgoff = pgoff };
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
