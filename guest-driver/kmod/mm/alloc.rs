// SPDX-License-Identifier: GPL-2.0

//! A video-memory allocation ([`VidAlloc`]): its system-memory backing (DMA-coherent chunks of
//! at most 4 MiB, so allocations larger than the page allocator's largest piece work, and
//! smaller ones, down to single pages, where memory is too fragmented for them), its GPU
//! VA in its context, and the leaf page-table entries that map it there, kept so the memory
//! manager can retarget them to VRAM or back without the context's address space (which lives
//! under its file's lock; the memory manager never takes a file lock). A one-page allocation may
//! also have a CPU mapping in its process ([`CpuView`], the rings of `QUEUE_RING_IN_VRAM`
//! queues) that follows it: the VRAM BAR page while it is resident, its system page otherwise.

use kernel::{
    device::{Bound, Device},
    prelude::*,
    sync::Arc,
};

use crate::{
    abi::mmu,
    bindings::{
        mm::FileMapping,
        pfnmap::{PfnTarget, Shown},
    },
    hw::{dmamem::DmaBuf, pagetable::AddressSpace},
};

/// Pages per backing chunk at most (4 MiB: the page allocator's largest contiguous piece).
const CHUNK_PAGES: usize = 1024;
/// Bytes per page.
const PAGE: u64 = mmu::PAGE_SIZE;

/// Leaf entries mapping an allocation somewhere: page `i`'s entry is `ptes[i]`.
pub(crate) type Ptes = KVec<(Arc<DmaBuf>, usize)>;

/// The CPU mapping of a one-page allocation in its process: a pfn mapping
/// (`bindings::pfnmap`) of the file at `pgoff` whose page is moved with the allocation (its
/// system page, held by the target while shown, or its VRAM BAR page), until it is revoked.
pub(crate) struct CpuView {
    /// The page the mapping shows.
    pub(crate) target: Arc<PfnTarget<DmaBuf>>,
    /// The owning file's mapping, zapped on every move.
    mapping: FileMapping,
    /// mmap offset, in pages.
    pub(crate) pgoff: u64,
    /// Bus address of VRAM offset 0 (BAR4).
    vram_bar: u64,
}

/// A video-memory allocation.
pub(crate) struct VidAlloc {
    /// Bytes (whole pages).
    pub(crate) size: u64,
    /// Prefers VRAM (falls back to system memory); otherwise system memory only.
    pub(crate) vram_preferred: bool,
    /// Its GPU VA there (stable across moves).
    pub(crate) gpu_va: u64,
    /// System-memory backing, in order (reference counted: a CPU view's target holds the
    /// page it shows).
    chunks: KVec<Arc<DmaBuf>>,
    /// Pages per chunk (the last may hold fewer): [`CHUNK_PAGES`], or a smaller power of two
    /// when memory had no contiguous piece that large.
    chunk_pages: usize,
    /// Its leaf entries in the context's address space.
    ptes: Ptes,
    /// Its CPU mapping, if it has one.
    cpu: Option<CpuView>,
}

impl VidAlloc {
    /// `size` bytes (whole pages) of backing, mapped at `va` in `space` (writable).
    ///
    /// # Errors
    ///
    /// `ENOMEM`, and the mapping errors of `AddressSpace::map_page`; nothing stays mapped.
    pub(crate) fn new(
        dev: &Device<Bound>,
        space: &mut AddressSpace,
        va: u64,
        size: u64,
        vram_preferred: bool,
    ) -> Result<Self> {
        let pages = usize::try_from(size / PAGE)?;
        // Physically contiguous chunks as large as memory has: a guest long up (or a kernel
        // without compaction) may have no free 4 MiB piece left while it has the pages.
        let mut chunk_pages = CHUNK_PAGES;
        let chunks = loop {
            match backing(dev, pages, chunk_pages) {
                Ok(chunks) => break chunks,
                Err(e) if e == ENOMEM && chunk_pages > 1 => chunk_pages /= 2,
                Err(e) => return Err(e),
            }
        };
        let mut a = Self {
            size,
            vram_preferred,
            gpu_va: va,
            chunks,
            chunk_pages,
            ptes: KVec::new(),
            cpu: None,
        };
        a.ptes = match a.map(dev, space, va) {
            Ok(p) => p,
            Err(e) => {
                space.unmap_range(va, pages);
                return Err(e);
            }
        };
        Ok(a)
    }

    /// Gives a one-page allocation (in system memory: not yet registered) a CPU mapping at
    /// `pgoff` of the file of `mapping`, showing its system page until it moves.
    ///
    /// # Errors
    ///
    /// `EINVAL` for a larger allocation, `ENOMEM`.
    pub(crate) fn with_cpu_view(mut self, mapping: FileMapping, pgoff: u64, vram_bar: u64) -> Result<Self> {
        if self.pages() != 1 {
            return Err(EINVAL);
        }
        self.cpu = Some(CpuView {
            target: PfnTarget::new_movable(Shown::Page(self.chunks[0].clone()))?,
            mapping,
            pgoff,
            vram_bar,
        });
        Ok(self)
    }

    /// Its CPU mapping, if it has one.
    pub(crate) fn cpu_view(&self) -> Option<&CpuView> {
        self.cpu.as_ref()
    }

    /// Runs `copy` (the paging buffer moving the contents to VRAM offset `to`, or to the system
    /// backing) with the CPU mapping taken away: it is zapped first and its faults wait until the
    /// copy has run, then show the page at the new place. So no CPU store lands on the old page
    /// after the copy started. Without a CPU mapping, just `copy`.
    ///
    /// # Errors
    ///
    /// `copy`'s (the mapping keeps showing the old place).
    pub(crate) fn moving(&self, to: Option<u64>, copy: impl FnOnce() -> Result) -> Result {
        let Some(v) = &self.cpu else {
            return copy();
        };
        v.target.locked(|shown| {
            // Revoked (its queue or its binding is gone): no mapping to move.
            if shown.is_nothing() {
                return copy();
            }
            // SAFETY: The file is open: the view is revoked (below) before its queue's file
            // goes, under the target's lock, and never used again then.
            unsafe { v.mapping.zap(v.pgoff, 1) };
            copy()?;
            *shown = match to {
                Some(off) => Shown::Bar((v.vram_bar + off) >> mmu::PAGE_SHIFT),
                None => Shown::Page(self.chunks[0].clone()),
            };
            Ok(())
        })
    }

    /// Takes the CPU mapping away for good (later accesses raise `SIGBUS`), before the
    /// allocation is unregistered and freed, always before the owning file goes, and at unbind
    /// before the VRAM BAR goes.
    pub(crate) fn revoke_cpu_view(&self) {
        if let Some(v) = &self.cpu {
            v.target.locked(|shown| {
                if !shown.is_nothing() {
                    // SAFETY: The owning file is open: a view is revoked by its file, open, or at
                    // unbind while the memory manager still has the allocation, which the file
                    // unregisters (after revoking) before it goes; not revoked before.
                    unsafe { v.mapping.zap(v.pgoff, 1) };
                    *shown = Shown::Nothing;
                }
            });
        }
    }

    /// Pages.
    pub(crate) fn pages(&self) -> usize {
        // CAST: at most `MAX_VIDEO_ALLOCATION / 4096` pages.
        (self.size / PAGE) as usize
    }

    /// Guest physical address of backing page `i`.
    pub(crate) fn page_pa(&self, i: usize) -> u64 {
        let chunk = &self.chunks[(i / self.chunk_pages).min(self.chunks.len() - 1)];
        // CAST: below a chunk's 4 MiB.
        chunk.dma_address() + ((i % self.chunk_pages) as u64) * PAGE
    }

    /// Maps the backing at `va` in `space` (writable); the leaf entries it wrote. On error the
    /// caller unmaps the range.
    ///
    /// # Errors
    ///
    /// Those of `AddressSpace::map_page`, `ENOMEM`.
    pub(crate) fn map(
        &self,
        dev: &Device<Bound>,
        space: &mut AddressSpace,
        va: u64,
    ) -> Result<Ptes> {
        let mut ptes = KVec::with_capacity(self.pages(), GFP_KERNEL)?;
        for i in 0..self.pages() {
            // CAST: page index below 4096.
            let at = va + (i as u64) * PAGE;
            space.map_page(dev, at, self.page_pa(i), true)?;
            ptes.push(space.leaf_entry(at).ok_or(EINVAL)?, GFP_KERNEL)?;
        }
        Ok(ptes)
    }

    /// Points the context's entries at VRAM offset `vram` (`None`: the system backing).
    pub(crate) fn retarget(&self, vram: Option<u64>) {
        retarget(&self.ptes, self, vram);
    }

    /// Copies between the backing at `offset` and `buf` (`to_backing`: into the backing).
    pub(crate) fn copy_bytes(&self, offset: u64, buf: &mut [u8], to_backing: bool) {
        let mut done = 0usize;
        while done < buf.len() {
            // CAST: `done` is at most `buf.len()`, a `usize`.
            let at = offset + done as u64;
            // CAST: the page index of a checked range of at most 16 MiB.
            let page = (at / PAGE) as usize;
            let chunk = &self.chunks[page / self.chunk_pages];
            // CAST: below 4 MiB.
            let in_chunk = ((page % self.chunk_pages) as u64 * PAGE + at % PAGE) as usize;
            let n = (chunk.size() - in_chunk).min(buf.len() - done);
            if to_backing {
                chunk.write_bytes(in_chunk, &buf[done..done + n]);
            } else {
                chunk.read_bytes(in_chunk, &mut buf[done..done + n]);
            }
            done += n;
        }
    }
}

/// Points `ptes` (one per page of `a`) at VRAM offset `vram`, or at `a`'s system backing.
pub(crate) fn retarget(ptes: &Ptes, a: &VidAlloc, vram: Option<u64>) {
    for (i, (table, offset)) in ptes.iter().enumerate() {
        let entry = match vram {
            // CAST: page index below 4096.
            Some(base) => mmu::entry(
                base + i as u64 * PAGE,
                mmu::PTE_PRESENT | mmu::PTE_WRITABLE | mmu::PTE_VRAM,
            ),
            None => mmu::entry(a.page_pa(i), mmu::PTE_PRESENT | mmu::PTE_WRITABLE),
        };
        table.write64(*offset, entry);
    }
}

/// `pages` pages of DMA-coherent backing in chunks of `chunk_pages` (the last may hold fewer).
///
/// # Errors
///
/// `ENOMEM` when a chunk could not be had (what was allocated goes), and `DmaBuf::new`'s.
fn backing(dev: &Device<Bound>, pages: usize, chunk_pages: usize) -> Result<KVec<Arc<DmaBuf>>> {
    let mut chunks = KVec::new();
    let mut left = pages;
    while left > 0 {
        let n = left.min(chunk_pages);
        let chunk = Arc::new(DmaBuf::new(dev, n)?, GFP_KERNEL_ACCOUNT)?;
        chunks.push(chunk, GFP_KERNEL_ACCOUNT)?;
        left -= n;
    }
    Ok(chunks)
}
