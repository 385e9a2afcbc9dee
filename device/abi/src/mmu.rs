//! The GPU MMU: per-context page tables in guest memory, written by the driver.
//!
//! Format: four levels of 512 eight-byte entries per 4 KiB table, translating a 48-bit GPU
//! virtual address to a 4 KiB page, like x86-64 4-level paging. Level 3 is the root (bits
//! 47:39 index it), level 0 holds leaf entries (bits 20:12). An entry is
//! `address | flags`: bit 0 present, bit 1 writable (leaf only; tables are always walkable),
//! bit 2 device memory (the address is an offset in VRAM instead of a guest physical address;
//! leaf only). Bits 63:52 and 11:3 are reserved and must be zero.

/// A GPU virtual address (in some address space).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct GpuVa(pub u64);

/// A guest physical address (what the device reaches through DMA).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct GuestPa(pub u64);

/// Page size.
pub const PAGE_SIZE: u64 = 4096;
/// log2 of [`PAGE_SIZE`].
pub const PAGE_SHIFT: u32 = 12;
/// Significant GPU VA bits.
pub const VA_BITS: u32 = 48;
/// Levels of page table.
pub const LEVELS: u32 = 4;
/// Entries per table.
pub const ENTRIES_PER_TABLE: u64 = 512;
/// Entry flag: present.
pub const PTE_PRESENT: u64 = 1 << 0;
/// Entry flag: writable (leaf entries).
pub const PTE_WRITABLE: u64 = 1 << 1;
/// Entry flag: the address is a VRAM offset (leaf entries).
pub const PTE_VRAM: u64 = 1 << 2;
/// Address bits of an entry.
pub const PTE_ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;
/// Reserved bits of an entry: set ones make the walk fault.
pub const PTE_RESERVED_MASK: u64 = !(PTE_ADDR_MASK | PTE_PRESENT | PTE_WRITABLE | PTE_VRAM);

/// Whether `va` lies in the translatable range.
pub const fn is_canonical(va: GpuVa) -> bool {
    va.0 >> VA_BITS == 0
}

/// Index of `va`'s entry in its level-`level` table (3 = root, 0 = leaf).
///
/// # Invariants
/// The result is `< ENTRIES_PER_TABLE` for `level < LEVELS`.
pub const fn table_index(va: GpuVa, level: u32) -> u64 {
    (va.0 >> (PAGE_SHIFT + 9 * level)) & (ENTRIES_PER_TABLE - 1)
}

/// Byte offset of `va` within its page.
pub const fn page_offset(va: GpuVa) -> u64 {
    va.0 & (PAGE_SIZE - 1)
}

/// An entry pointing at `address` (page aligned) with `flags`.
pub const fn entry(address: u64, flags: u64) -> u64 {
    (address & PTE_ADDR_MASK) | (flags & !PTE_ADDR_MASK & !PTE_RESERVED_MASK)
}

crate::wire_enum! {
    /// Why a translation failed.
    pub enum MmuFault {
        /// The address is beyond [`VA_BITS`].
        NonCanonical = 1 => "NON_CANONICAL",
        /// An entry on the walk is not present.
        NotPresent = 2 => "NOT_PRESENT",
        /// A write to a page without [`PTE_WRITABLE`].
        ReadOnly = 3 => "READ_ONLY",
        /// An entry has reserved bits set, or a table entry has the VRAM flag.
        Reserved = 4 => "RESERVED",
        /// A table or the page is outside guest memory or VRAM.
        Unreachable = 5 => "UNREACHABLE",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_split_the_address_like_x86_64() {
        let va = GpuVa((5 << 39) | (6 << 30) | (7 << 21) | (8 << 12) | 0x123);
        assert_eq!([3, 2, 1, 0].map(|l| table_index(va, l)), [5, 6, 7, 8]);
        assert_eq!(page_offset(va), 0x123);
        assert!(is_canonical(GpuVa((1 << 48) - 1)));
        assert!(!is_canonical(GpuVa(1 << 48)));
    }

    #[test]
    fn entries_keep_address_and_known_flags_only() {
        let e = entry(0x1234_5678_9fff, PTE_PRESENT | PTE_WRITABLE | (1 << 60));
        assert_eq!(e & PTE_ADDR_MASK, 0x1234_5678_9000);
        assert_eq!(e & !PTE_ADDR_MASK, PTE_PRESENT | PTE_WRITABLE);
        assert_eq!(e & PTE_RESERVED_MASK, 0);
    }
}
