// SPDX-License-Identifier: GPL-2.0

//! GPU address spaces: the page-table writer used for every address space (the system one,
//! id 0, and one per context), in the `abi::mmu` format (4 levels × 512 entries, 4 KiB pages,
//! 48-bit VA).
//!
//! The device has no TLB: an entry takes effect as soon as it is written. A new table is zeroed
//! before it is linked, and a leaf is written last, so a walk never sees a half-built path.
//! The tables are kept sorted by address, so finding one on a walk is a binary search.
//!
//! A context's tables are freed only with its address space, after the device has been told to
//! forget it: the context's own work may walk any of its VAs at any time, and a table freed under
//! such a walk would be read as whatever its page held next. The system address space (id 0)
//! frees a table as soon as its last entry is cleared, after clearing the entry naming it: only
//! the module's own commands walk it, and only at VAs the device was given and has not been told
//! to forget, which never lead through an empty table.

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
    /// Every lower-level table, sorted by guest physical address (shared: the memory manager
    /// keeps the leaf tables of the allocations it moves, [`Self::leaf_entry`]).
    tables: KVec<Arc<DmaBuf>>,
    /// Leaf entries present.
    mapped: u64,
    /// Whether a table is freed when its last entry is cleared (the system address space).
    prunes: bool,
}

impl AddressSpace {
    /// A new, empty address space for device id `id` (0: the system address space, which
    /// frees its empty tables).
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
            prunes: id.raw() == 0,
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

    /// Tables below the root.
    pub(crate) fn table_count(&self) -> usize {
        self.tables.len()
    }

    /// Where the table at guest physical address `pa` is in `tables`, or where it would go.
    fn position(&self, pa: u64) -> core::result::Result<usize, usize> {
        self.tables.binary_search_by_key(&pa, |t| t.dma_address())
    }

    /// The table at guest physical address `pa`, if it is one of ours.
    fn table(&self, pa: u64) -> Option<&DmaBuf> {
        if pa == self.root.dma_address() {
            return Some(&self.root);
        }
        self.position(pa).ok().map(|i| &*self.tables[i])
    }

    /// The leaf table holding `va`'s entry and the entry's byte offset in it, for a `va` whose
    /// tables exist: the memory manager retargets the entries of an allocation it moves
    /// without the address space (the table outlives nothing it points at: it is only written).
    pub(crate) fn leaf_entry(&mut self, va: u64) -> Option<(Arc<DmaBuf>, usize)> {
        let leaf = self.leaf_table(None, va).ok()?;
        let table = self.tables[self.position(leaf).ok()?].clone();
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
                self.tables.reserve(1, GFP_KERNEL_ACCOUNT)?;
                let new = Arc::new(DmaBuf::new(dev, 1)?, GFP_KERNEL_ACCOUNT)?;
                let pa = new.dma_address();
                let at = self.position(pa).err().ok_or(EINVAL)?;
                // Room reserved above.
                self.tables.insert_within_capacity(at, new).map_err(|_| ENOMEM)?;
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
        if self.prunes {
            self.prune(va);
        }
        true
    }

    /// Frees the tables on `va`'s path that hold no entry, from the leaf up, each after the
    /// entry naming it is cleared.
    fn prune(&mut self, va: u64) {
        let mut path = [0u64; mmu::LEVELS as usize];
        let mut table = self.root.dma_address();
        for level in (0..mmu::LEVELS).rev() {
            // CAST: below `LEVELS`.
            path[level as usize] = table;
            if level == 0 {
                break;
            }
            let Some(t) = self.table(table) else {
                return;
            };
            let entry = t.read64(Self::entry_offset(va, level));
            if entry & mmu::PTE_PRESENT == 0 {
                return;
            }
            table = entry & mmu::PTE_ADDR_MASK;
        }
        for level in 0..mmu::LEVELS - 1 {
            // CAST: below `LEVELS`.
            let (pa, parent) = (path[level as usize], path[level as usize + 1]);
            let Ok(i) = self.position(pa) else {
                return;
            };
            if !Self::is_empty(&self.tables[i]) {
                return;
            }
            let Some(p) = self.table(parent) else {
                return;
            };
            p.write64(Self::entry_offset(va, level + 1), 0);
            let _ = self.tables.remove(i);
        }
    }

    /// Whether `table` holds no present entry.
    fn is_empty(table: &DmaBuf) -> bool {
        (0..PAGE / 8).all(|i| table.read64(i * 8) & mmu::PTE_PRESENT == 0)
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
