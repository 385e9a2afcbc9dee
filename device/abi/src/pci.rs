//! PCI identity, BAR layout and configuration-space capability placement of the Belfry GPU.

/// PCI vendor id: QEMU's de facto vendor id for test and emulated devices.
pub const VENDOR_ID: u16 = 0x1234;
/// PCI device id of the Belfry GPU.
pub const DEVICE_ID: u16 = 0xbe11;
/// Revision id of this version of the contract.
pub const REVISION_ID: u8 = 0x01;
/// Base class 0x03 (display controller), subclass 0x02 (3D controller), prog-if 0.
pub const CLASS_CODE: u32 = 0x03_02_00;
/// Subsystem vendor id.
pub const SUBSYSTEM_VENDOR_ID: u16 = VENDOR_ID;
/// Subsystem id.
pub const SUBSYSTEM_ID: u16 = 0x0001;

/// Size of the PCI Express extended configuration space.
pub const CONFIG_SPACE_SIZE: usize = 4096;

/// BAR holding the registers (32-bit, non-prefetchable memory), with the MSI-X table and PBA.
pub const REGS_BAR: u32 = 0;
/// Size of [`REGS_BAR`].
pub const REGS_BAR_SIZE: u64 = 64 * 1024;
/// Offset of the MSI-X table in [`REGS_BAR`].
pub const MSIX_TABLE_OFFSET: u32 = 0x8000;
/// Offset of the MSI-X pending-bit array in [`REGS_BAR`].
pub const MSIX_PBA_OFFSET: u32 = 0xC000;
/// Size of one MSI-X table entry.
pub const MSIX_ENTRY_SIZE: u32 = 16;
/// Most MSI-X vectors the device can be configured with.
pub const MSIX_MAX_VECTORS: u16 = 64;

/// BAR holding the doorbells (32-bit, non-prefetchable memory): one page per doorbell.
pub const DOORBELL_BAR: u32 = 2;
/// Size of one doorbell page, which is also the doorbell memory size a mapping needs.
pub const DOORBELL_PAGE_SIZE: u64 = 4096;
/// Most physical doorbells a device can be configured with.
pub const DOORBELL_MAX_COUNT: u32 = 1024;

/// BAR exposing device memory (VRAM) (64-bit, prefetchable). It uses BAR slots 4 and 5.
pub const VRAM_BAR: u32 = 4;
/// Smallest VRAM size a device can be configured with.
pub const VRAM_MIN_SIZE: u64 = 1 << 20;
/// Largest VRAM size a device can be configured with.
pub const VRAM_MAX_SIZE: u64 = 4 << 30;

/// Configuration-space offset of the power-management capability.
pub const CAP_PM_OFFSET: u8 = 0x40;
/// Configuration-space offset of the MSI-X capability.
pub const CAP_MSIX_OFFSET: u8 = 0x50;
/// Configuration-space offset of the PCI Express capability.
pub const CAP_PCIE_OFFSET: u8 = 0x60;

/// Size of the doorbell BAR for `count` doorbells: the next power of two of `count` pages.
///
/// # Invariants
/// The result is a power of two, at least one page, and holds `count` pages.
pub const fn doorbell_bar_size(count: u32) -> u64 {
    let pages = if count == 0 { 1 } else { count as u64 };
    (pages * DOORBELL_PAGE_SIZE).next_power_of_two()
}

/// Offset of doorbell `index` in the doorbell BAR.
pub const fn doorbell_offset(index: u32) -> u64 {
    index as u64 * DOORBELL_PAGE_SIZE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doorbell_bar_is_a_power_of_two_holding_every_page() {
        for count in [0, 1, 2, 3, 16, 17, DOORBELL_MAX_COUNT] {
            let size = doorbell_bar_size(count);
            assert!(size.is_power_of_two());
            assert!(size >= u64::from(count.max(1)) * DOORBELL_PAGE_SIZE);
        }
    }

    #[test]
    fn msix_structures_fit_in_the_register_bar() {
        let table_end = u64::from(MSIX_TABLE_OFFSET) + u64::from(MSIX_MAX_VECTORS) * u64::from(MSIX_ENTRY_SIZE);
        assert!(table_end <= u64::from(MSIX_PBA_OFFSET));
        assert!(u64::from(MSIX_PBA_OFFSET) + u64::from(MSIX_MAX_VECTORS) / 8 <= REGS_BAR_SIZE);
    }
}
