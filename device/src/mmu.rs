//! The GPU MMU: translation of GPU virtual addresses through the driver's page tables in guest
//! memory (format in `belfry_abi::mmu`), and typed access to what they map — guest RAM or VRAM.
//!
//! Every access by an engine or the CMP goes through here. Nothing is cached: a translation
//! reads the four table entries from guest memory each time, so a driver's page-table update
//! takes effect at the next access (no TLB to invalidate). Every failure is an [`MmuError`]
//! naming the faulting VA; the caller faults the context, never the process.

use std::sync::atomic::Ordering;

use belfry_abi::mmu::{self, GpuVa, GuestPa, MmuFault};
use vm_memory::{Bytes, GuestAddress, GuestMemory, Permissions};

use crate::vram::Vram;

/// Where a translated address lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phys {
    /// Guest physical address.
    Guest(u64),
    /// Offset in device memory.
    Vram(u64),
}

impl Phys {
    fn offset(self, by: u64) -> Phys {
        match self {
            Phys::Guest(a) => Phys::Guest(a + by),
            Phys::Vram(a) => Phys::Vram(a + by),
        }
    }
}

/// One level of a page walk, as [`GpuMemory::walk`] read it: the trace schema's type, which
/// the fault's trace record carries as it is.
pub use belfry_trace_schema::WalkStep;

/// A failed translation or access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmuError {
    /// Why.
    pub fault: MmuFault,
    /// The GPU VA that faulted.
    pub va: u64,
}

/// Result of MMU operations.
pub type Result<T> = std::result::Result<T, MmuError>;

/// Guest memory and VRAM as the GPU sees them.
pub struct GpuMemory<'a, M: GuestMemory> {
    guest: &'a M,
    vram: &'a Vram,
}

impl<'a, M: GuestMemory> GpuMemory<'a, M> {
    /// Access through `guest` (a snapshot of the DMA mappings) and `vram`.
    pub fn new(guest: &'a M, vram: &'a Vram) -> Self {
        GpuMemory { guest, vram }
    }

    /// Translates `va` in the address space rooted at `root`, for a write if `write`.
    pub fn translate(&self, root: GuestPa, va: GpuVa, write: bool) -> Result<Phys> {
        let err = |fault| MmuError { fault, va: va.0 };
        if !mmu::is_canonical(va) {
            return Err(err(MmuFault::NonCanonical));
        }
        let mut table = root.0;
        for level in (0..mmu::LEVELS).rev() {
            // The root comes from the driver (checked to be in guest memory when the address
            // space was created); lower tables are masked PTE addresses. Checked all the same.
            let at = table.checked_add(mmu::table_index(va, level) * 8).ok_or(err(MmuFault::Unreachable))?;
            let entry: u64 =
                self.guest.load(GuestAddress(at), Ordering::Acquire).map_err(|_| err(MmuFault::Unreachable))?;
            if entry & mmu::PTE_PRESENT == 0 {
                return Err(err(MmuFault::NotPresent));
            }
            if entry & mmu::PTE_RESERVED_MASK != 0 || (level > 0 && entry & mmu::PTE_VRAM != 0) {
                return Err(err(MmuFault::Reserved));
            }
            let address = entry & mmu::PTE_ADDR_MASK;
            if level == 0 {
                if write && entry & mmu::PTE_WRITABLE == 0 {
                    return Err(err(MmuFault::ReadOnly));
                }
                let page = if entry & mmu::PTE_VRAM != 0 { Phys::Vram(address) } else { Phys::Guest(address) };
                return Ok(page.offset(mmu::page_offset(va)));
            }
            table = address;
        }
        Err(err(MmuFault::NotPresent))
    }

    /// The entries a translation of `va` reads, root level first, up to the first that is
    /// not present, unreadable or the leaf (for tracing a fault; nothing is checked).
    pub fn walk(&self, root: GuestPa, va: GpuVa) -> Vec<WalkStep> {
        let mut steps = Vec::new();
        if !mmu::is_canonical(va) {
            return steps;
        }
        let mut table = root.0;
        for level in (0..mmu::LEVELS).rev() {
            let at = table + mmu::table_index(va, level) * 8;
            let entry: Option<u64> = self.guest.load(GuestAddress(at), Ordering::Acquire).ok();
            steps.push(WalkStep { level, at, entry });
            match entry {
                Some(e) if e & mmu::PTE_PRESENT != 0 && level > 0 => table = e & mmu::PTE_ADDR_MASK,
                _ => break,
            }
        }
        steps
    }

    /// Reads `buf.len()` bytes at `va`, page by page.
    pub fn read(&self, root: GuestPa, va: u64, buf: &mut [u8]) -> Result<()> {
        self.for_each_page(root, va, buf.len(), false, |phys, range| {
            self.read_phys(phys, &mut buf[range.clone()]).ok_or(MmuFault::Unreachable)
        })
    }

    /// Writes `data` at `va`, page by page.
    pub fn write(&self, root: GuestPa, va: u64, data: &[u8]) -> Result<()> {
        self.for_each_page(root, va, data.len(), true, |phys, range| {
            self.write_phys(phys, &data[range.clone()]).ok_or_else(|| self.write_fault(phys, range.len()))
        })
    }

    /// Why a write or store of `len` bytes at `phys` failed: guest memory the client mapped
    /// read-only (a page a guest IOMMU maps without write) is `ReadOnly`, as a read-only page
    /// would be; anything else `Unreachable`.
    pub fn write_fault(&self, phys: Phys, len: usize) -> MmuFault {
        match phys {
            Phys::Guest(a)
                if self.guest.check_range(GuestAddress(a), len, Permissions::Read)
                    && !self.guest.check_range(GuestAddress(a), len, Permissions::Write) =>
            {
                MmuFault::ReadOnly
            }
            _ => MmuFault::Unreachable,
        }
    }

    fn for_each_page(
        &self,
        root: GuestPa,
        va: u64,
        len: usize,
        write: bool,
        mut f: impl FnMut(Phys, std::ops::Range<usize>) -> std::result::Result<(), MmuFault>,
    ) -> Result<()> {
        let mut done = 0usize;
        while done < len {
            let cur = va.checked_add(done as u64).ok_or(MmuError { fault: MmuFault::NonCanonical, va })?;
            // CAST: at most a page (4096 bytes).
            #[allow(clippy::cast_possible_truncation)]
            let in_page = (mmu::PAGE_SIZE - mmu::page_offset(GpuVa(cur))) as usize;
            let n = in_page.min(len - done);
            let phys = self.translate(root, GpuVa(cur), write)?;
            f(phys, done..done + n).map_err(|fault| MmuError { fault, va: cur })?;
            done += n;
        }
        Ok(())
    }

    /// The guest memory under it.
    pub fn guest(&self) -> &'a M {
        self.guest
    }

    /// Reads at a physical location.
    pub fn read_phys(&self, phys: Phys, buf: &mut [u8]) -> Option<()> {
        match phys {
            Phys::Guest(a) => self.guest.read_slice(buf, GuestAddress(a)).ok(),
            Phys::Vram(o) => self.vram.read(o, buf),
        }
    }

    /// Writes at a physical location.
    pub fn write_phys(&self, phys: Phys, data: &[u8]) -> Option<()> {
        match phys {
            Phys::Guest(a) => self.guest.write_slice(data, GuestAddress(a)).ok(),
            Phys::Vram(o) => self.vram.write(o, data),
        }
    }

    /// Single-copy atomic 64-bit load of an 8-byte aligned location.
    pub fn load_u64(&self, phys: Phys, order: Ordering) -> Option<u64> {
        match phys {
            Phys::Guest(a) if a % 8 == 0 => self.guest.load(GuestAddress(a), order).ok(),
            Phys::Vram(o) if o % 8 == 0 => self.vram.load_u64(o, order),
            _ => None,
        }
    }

    /// Single-copy atomic 64-bit store to an 8-byte aligned location.
    pub fn store_u64(&self, phys: Phys, value: u64, order: Ordering) -> Option<()> {
        match phys {
            Phys::Guest(a) if a % 8 == 0 => self.guest.store(value, GuestAddress(a), order).ok(),
            Phys::Vram(o) if o % 8 == 0 => self.vram.store_u64(o, value, order),
            _ => None,
        }
    }

    /// Single-copy atomic 32-bit store to a 4-byte aligned location.
    pub fn store_u32(&self, phys: Phys, value: u32, order: Ordering) -> Option<()> {
        match phys {
            Phys::Guest(a) if a % 4 == 0 => self.guest.store(value, GuestAddress(a), order).ok(),
            Phys::Vram(o) if o % 4 == 0 => self.vram.store_u32(o, value, order),
            _ => None,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use vm_memory::GuestMemoryMmap;

    /// Builds page tables in `mem` with tables allocated from `next_table` upward.
    pub(crate) struct PageTableBuilder {
        pub root: u64,
        next: u64,
    }

    impl PageTableBuilder {
        pub(crate) fn new(root: u64) -> Self {
            PageTableBuilder { root, next: root + mmu::PAGE_SIZE }
        }

        pub(crate) fn map(&mut self, mem: &GuestMemoryMmap, va: u64, target: u64, flags: u64) {
            let mut table = self.root;
            for level in (1..mmu::LEVELS).rev() {
                let at = GuestAddress(table + mmu::table_index(GpuVa(va), level) * 8);
                let e: u64 = mem.read_obj(at).unwrap();
                if e & mmu::PTE_PRESENT == 0 {
                    let new = self.next;
                    self.next += mmu::PAGE_SIZE;
                    mem.write_obj(mmu::entry(new, mmu::PTE_PRESENT), at).unwrap();
                    table = new;
                } else {
                    table = e & mmu::PTE_ADDR_MASK;
                }
            }
            let at = GuestAddress(table + mmu::table_index(GpuVa(va), 0) * 8);
            mem.write_obj(mmu::entry(target, flags | mmu::PTE_PRESENT), at).unwrap();
        }
    }

    fn setup() -> (GuestMemoryMmap, Vram, PageTableBuilder) {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        (mem, Vram::new(1 << 20).unwrap(), PageTableBuilder::new(0x1000))
    }

    #[test]
    fn translates_reads_and_writes_across_pages() {
        let (mem, vram, mut pt) = setup();
        pt.map(&mem, 0x7000_0000_0000, 0x80000, mmu::PTE_WRITABLE);
        pt.map(&mem, 0x7000_0000_1000, 0x90000, mmu::PTE_WRITABLE);
        pt.map(&mem, 0x7000_0000_2000, 0x2000, mmu::PTE_WRITABLE | mmu::PTE_VRAM);
        let gpu = GpuMemory::new(&mem, &vram);
        let root = GuestPa(pt.root);
        assert_eq!(gpu.translate(root, GpuVa(0x7000_0000_0010), false), Ok(Phys::Guest(0x80010)));
        gpu.write(root, 0x7000_0000_0ffe, &[1, 2, 3, 4]).unwrap();
        assert_eq!(mem.read_obj::<u16>(GuestAddress(0x80ffe)).unwrap(), 0x0201);
        assert_eq!(mem.read_obj::<u16>(GuestAddress(0x90000)).unwrap(), 0x0403);
        let mut back = [0u8; 4];
        gpu.read(root, 0x7000_0000_0ffe, &mut back).unwrap();
        assert_eq!(back, [1, 2, 3, 4]);
        gpu.write(root, 0x7000_0000_2008, &7u64.to_le_bytes()).unwrap();
        assert_eq!(vram.load_u64(0x2008, Ordering::Acquire), Some(7));
    }

    #[test]
    fn faults_name_the_reason_and_the_address() {
        let (mem, vram, mut pt) = setup();
        pt.map(&mem, 0x1000, 0x80000, 0);
        let gpu = GpuMemory::new(&mem, &vram);
        let root = GuestPa(pt.root);
        let e = gpu.write(root, 0x1000, &[0]).unwrap_err();
        assert_eq!((e.fault, e.va), (MmuFault::ReadOnly, 0x1000));
        let e = gpu.read(root, 0xff8, &mut [0u8; 16]).unwrap_err();
        assert_eq!((e.fault, e.va), (MmuFault::NotPresent, 0xff8));
        assert_eq!(gpu.translate(root, GpuVa(1 << 48), false).unwrap_err().fault, MmuFault::NonCanonical);
        assert_eq!(gpu.translate(GuestPa(0x4000_0000), GpuVa(0), false).unwrap_err().fault, MmuFault::Unreachable);
        pt.map(&mem, 0x2000, 0xfff0_0000, 0);
        assert_eq!(gpu.read(root, 0x2000, &mut [0u8; 4]).unwrap_err().fault, MmuFault::Unreachable);
        let leaf_table_entry = mem.read_obj::<u64>(GuestAddress(pt.root)).unwrap();
        mem.write_obj(leaf_table_entry | (1 << 60), GuestAddress(pt.root)).unwrap();
        assert_eq!(gpu.translate(root, GpuVa(0x1000), false).unwrap_err().fault, MmuFault::Reserved);
    }

    #[test]
    fn a_walk_reads_the_entries_down_to_the_missing_one() {
        let (mem, vram, mut pt) = setup();
        pt.map(&mem, 0x1000, 0x80000, mmu::PTE_WRITABLE);
        let gpu = GpuMemory::new(&mem, &vram);
        let root = GuestPa(pt.root);
        let full = gpu.walk(root, GpuVa(0x1000));
        assert_eq!(full.iter().map(|s| s.level).collect::<Vec<_>>(), [3, 2, 1, 0]);
        assert_eq!(full[0].at, pt.root);
        assert_eq!(full[3].entry.map(|e| e & mmu::PTE_ADDR_MASK), Some(0x80000));
        let missing = gpu.walk(root, GpuVa(0x20_0000));
        assert_eq!(missing.len(), 3, "the level-1 entry of another 2 MiB is not present");
        assert_eq!(missing[2].entry, Some(0));
        assert_eq!(gpu.walk(GuestPa(0x4000_0000), GpuVa(0))[0].entry, None);
    }
}
