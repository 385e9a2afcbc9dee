// SPDX-License-Identifier: GPL-2.0

//! GPU address spaces: the page-table writer used for every address space (the system one,
//! id 0, and one per context), in the `abi::mmu` format (4 levels × 512 entries, 4 KiB pages,
//! 48-bit VA).
//!
//! The device has no TLB: an entry takes effect as soon as it is written. A new table is zeroed
//! before it is linked, and a leaf is written last, so a walk never sees a half-built path.
//! Tables are freed only with the address space, after the device has been told to forget it.

use kernel::{
    device::{Bound, Device},
    prelude::*,
    sync::Arc,
};

use super::dmamem::{DmaBuf, PAGE};
use crate::abi::{
    ids::AddressSpaceId,
    mmu::{self, GpuVa},
};

/// One GPU address space and the tables it owns.
pub(crate) struct AddressSpace {
    /// Device id (0 for the system address space).
    id: AddressSpaceId,
    /// The root (level-3) table.
    root: DmaBuf,
    /// Every lower-level table, in creation order (shared: the memory manager keeps the leaf
    /// tables of the allocations it moves, [`Self::leaf_entry`]).
    tables: KVec<Arc<DmaBuf>>,
    /// Leaf entries present.
    mapped: u64,
}

impl AddressSpace {
    /// A new, empty address space for device id `id`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(dev: &Device<Bound>, id: AddressSpaceId) -> Result<Self> {
        Ok(Self {
            id,
            root: DmaBuf::new(dev, 1)?,
            tables: KVec::new(),
            mapped: 0,
        })
    }

    /// The device id.
    pub(crate) fn id(&self) -> AddressSpaceId {
        self.id
    }

    /// Guest physical address of the root table.
    pub(crate) fn root_pa(&self) -> u64 {
        self.root.dma_address()
    }

    /// Leaf entries present.
    pub(crate) fn mapped_pages(&self) -> u64 {
        self.mapped
    }

    /// The table at guest physical address `pa`, if it is one of ours.
    fn table(&self, pa: u64) -> Option<&DmaBuf> {
        if pa == self.root.dma_address() {
            return Some(&self.root);
        }
        self.tables
            .iter()
            .find(|t| t.dma_address() == pa)
            .map(|t| &**t)
    }

    /// The leaf table holding `va`'s entry and the entry's byte offset in it, for a `va` whose
    /// tables exist: the memory manager retargets the entries of an allocation it moves
    /// without the address space (the table outlives nothing it points at: it is only written).
    pub(crate) fn leaf_entry(&mut self, va: u64) -> Option<(Arc<DmaBuf>, usize)> {
        let leaf = self.leaf_table(None, va).ok()?;
        let table = self.tables.iter().find(|t| t.dma_address() == leaf)?.clone();
        Some((table, Self::entry_offset(va, 0)))
    }

    /// Byte offset of `va`'s entry in its level-`level` table.
    fn entry_offset(va: u64, level: u32) -> usize {
        // CAST: `table_index` is below 512, so the offset is below 4096.
        (mmu::table_index(GpuVa(va), level) * 8) as usize
    }

    /// The leaf table of `va`, creating missing tables when `dev` is given.
    fn leaf_table(&mut self, dev: Option<&Device<Bound>>, va: u64) -> Result<u64> {
        let mut table = self.root.dma_address();
        for level in (1..mmu::LEVELS).rev() {
            let offset = Self::entry_offset(va, level);
            let entry = self.table(table).ok_or(EINVAL)?.read64(offset);
            table = if entry & mmu::PTE_PRESENT != 0 {
                entry & mmu::PTE_ADDR_MASK
            } else {
                let dev = dev.ok_or(ENOENT)?;
                let new = DmaBuf::new(dev, 1)?;
                let pa = new.dma_address();
                self.tables.push(Arc::new(new, GFP_KERNEL_ACCOUNT)?, GFP_KERNEL_ACCOUNT)?;
                self.table(table)
                    .ok_or(EINVAL)?
                    .write64(offset, mmu::entry(pa, mmu::PTE_PRESENT));
                pa
            };
        }
        Ok(table)
    }

    /// Maps the page at guest physical address `pa` at `va`.
    ///
    /// # Errors
    ///
    /// `EINVAL` for an unaligned or non-canonical address, `EEXIST` if `va` is mapped, `ENOMEM`.
    pub(crate) fn map_page(
        &mut self,
        dev: &Device<Bound>,
        va: u64,
        pa: u64,
        writable: bool,
    ) -> Result {
        let flags = mmu::PTE_PRESENT | if writable { mmu::PTE_WRITABLE } else { 0 };
        self.map_entry(dev, va, pa, flags)
    }

    /// Maps the device-memory page at VRAM offset `offset` at `va`.
    ///
    /// # Errors
    ///
    /// As [`Self::map_page`].
    pub(crate) fn map_vram_page(
        &mut self,
        dev: &Device<Bound>,
        va: u64,
        offset: u64,
        writable: bool,
    ) -> Result {
        let flags =
            mmu::PTE_PRESENT | mmu::PTE_VRAM | if writable { mmu::PTE_WRITABLE } else { 0 };
        self.map_entry(dev, va, offset, flags)
    }

    /// Writes the leaf entry for `va`: `pa` with `flags`.
    fn map_entry(&mut self, dev: &Device<Bound>, va: u64, pa: u64, flags: u64) -> Result {
        if mmu::page_offset(GpuVa(va)) != 0
            || !mmu::is_canonical(GpuVa(va))
            || pa % mmu::PAGE_SIZE != 0
        {
            return Err(EINVAL);
        }
        let leaf = self.leaf_table(Some(dev), va)?;
        let offset = Self::entry_offset(va, 0);
        let table = self.table(leaf).ok_or(EINVAL)?;
        if table.read64(offset) & mmu::PTE_PRESENT != 0 {
            return Err(EEXIST);
        }
        table.write64(offset, mmu::entry(pa, flags));
        self.mapped += 1;
        Ok(())
    }

    /// Unmaps the page at `va`; whether it was mapped.
    pub(crate) fn unmap_page(&mut self, va: u64) -> bool {
        let Ok(leaf) = self.leaf_table(None, va) else {
            return false;
        };
        let offset = Self::entry_offset(va, 0);
        let Some(table) = self.table(leaf) else {
            return false;
        };
        if table.read64(offset) & mmu::PTE_PRESENT == 0 {
            return false;
        }
        table.write64(offset, 0);
        self.mapped -= 1;
        true
    }

    /// Maps all of `buf` at `va` (page aligned); on failure nothing stays mapped.
    ///
    /// # Errors
    ///
    /// As [`Self::map_page`].
    pub(crate) fn map_buf(
        &mut self,
        dev: &Device<Bound>,
        va: u64,
        buf: &DmaBuf,
        writable: bool,
    ) -> Result {
        for i in 0..buf.pages() {
            // CAST: `i * PAGE` is below the buffer size, a `usize` that fits `u64`.
            let offset = (i * PAGE) as u64;
            if let Err(e) = self.map_page(dev, va + offset, buf.dma_address() + offset, writable) {
                self.unmap_range(va, i);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Unmaps `pages` pages from `va`.
    pub(crate) fn unmap_range(&mut self, va: u64, pages: usize) {
        for i in 0..pages {
            // CAST: as in `map_buf`.
            self.unmap_page(va + (i * PAGE) as u64);
        }
    }
}
