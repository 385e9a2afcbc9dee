//! PCI configuration space of the Belfry GPU: a type-0 header, three BARs and the power
//! management, MSI-X and PCI Express capabilities, with per-byte write and write-1-to-clear
//! masks so any client (QEMU, a raw test client) sees standard PCI behaviour, BAR sizing included.
//! The PCI Express capability offers Function Level Reset: a write of Device Control's
//! initiate-FLR bit returns every register to its power-on value and asks the device for a
//! reset ([`ConfigEffect::FunctionReset`]).

use belfry_abi::pci;

const CONFIG_SIZE: usize = pci::CONFIG_SPACE_SIZE;
const PMCSR: usize = pci::CAP_PM_OFFSET as usize + 4;
const MSIX_CONTROL: usize = pci::CAP_MSIX_OFFSET as usize + 2;
const PCIE_CAP_LEN: usize = 0x3c;
/// The PCI Express capability's Device Capabilities register.
const PCIE_DEVCAP: usize = pci::CAP_PCIE_OFFSET as usize + 4;
/// The PCI Express capability's Device Control register.
const PCIE_DEVCTL: usize = pci::CAP_PCIE_OFFSET as usize + 8;
/// Device Capabilities: Function Level Reset capability.
pub const DEVCAP_FLR: u32 = 1 << 28;
/// Device Control: initiate Function Level Reset (write-only, reads 0).
pub const DEVCTL_BCR_FLR: u16 = 1 << 15;

/// What a configuration write changed that the rest of the device must act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigEffect {
    /// The PM capability's power state changed (0 = D0, 3 = D3hot).
    PowerState(u8),
    /// The command register's bus-master bit changed (no DMA while clear).
    BusMaster(bool),
    /// Function Level Reset: configuration space is back to its power-on values (the
    /// effects before this one say what that changed); the device resets its function.
    FunctionReset,
}

/// The command register's bus-master bit.
const COMMAND_BUS_MASTER: u8 = 1 << 2;

/// Layout of one memory BAR.
#[derive(Clone, Copy, Debug)]
struct Bar {
    slot: usize,
    size: u64,
    is_64bit: bool,
    prefetchable: bool,
}

/// The configuration space.
pub struct ConfigSpace {
    bytes: [u8; CONFIG_SIZE],
    wmask: [u8; CONFIG_SIZE],
    w1cmask: [u8; CONFIG_SIZE],
    power_on: [u8; CONFIG_SIZE],
}

impl ConfigSpace {
    /// Configuration space for a device with `msix_vectors` vectors, an INTx pin (INTA#) if
    /// `intx`, and `doorbell_bar_size` and `vram_size` bytes in its doorbell and VRAM BARs.
    pub fn new(msix_vectors: u16, intx: bool, doorbell_bar_size: u64, vram_size: u64) -> Self {
        let mut cs = ConfigSpace {
            bytes: [0; CONFIG_SIZE],
            wmask: [0; CONFIG_SIZE],
            w1cmask: [0; CONFIG_SIZE],
            power_on: [0; CONFIG_SIZE],
        };
        cs.set16(0x00, pci::VENDOR_ID);
        cs.set16(0x02, pci::DEVICE_ID);
        cs.set16_mask(0x04, 0, 0x0547); // command: IO, MEM, master, parity, SERR, INTx disable
        cs.set16(0x06, 0x0010); // status: capability list
        cs.w1c16(0x06, 0xf900);
        cs.bytes[0x08] = pci::REVISION_ID;
        let class = pci::CLASS_CODE.to_le_bytes();
        cs.bytes[0x09..0x0c].copy_from_slice(&class[..3]);
        cs.wmask[0x0c] = 0xff; // cache line size
        cs.set16(0x2c, pci::SUBSYSTEM_VENDOR_ID);
        cs.set16(0x2e, pci::SUBSYSTEM_ID);
        cs.bytes[0x34] = pci::CAP_PM_OFFSET;
        cs.wmask[0x3c] = 0xff; // interrupt line
        cs.bytes[0x3d] = u8::from(intx); // interrupt pin: INTA#, or none (MSI-X only)

        for bar in Self::bars(doorbell_bar_size, vram_size) {
            cs.add_bar(bar);
        }

        // Power management: version 3, D3hot only (no D1/D2, no PME).
        let pm = pci::CAP_PM_OFFSET as usize;
        cs.bytes[pm] = 0x01;
        cs.bytes[pm + 1] = pci::CAP_MSIX_OFFSET;
        cs.set16(pm + 2, 0x0003);
        cs.set16_mask(PMCSR, 0x0008, 0x0003); // NoSoftReset; power state writable

        // MSI-X: table and PBA in the register BAR.
        let mx = pci::CAP_MSIX_OFFSET as usize;
        cs.bytes[mx] = 0x11;
        cs.bytes[mx + 1] = pci::CAP_PCIE_OFFSET;
        cs.set16_mask(MSIX_CONTROL, msix_vectors.saturating_sub(1) & 0x7ff, 0xc000);
        cs.set32(mx + 4, pci::MSIX_TABLE_OFFSET | pci::REGS_BAR);
        cs.set32(mx + 8, pci::MSIX_PBA_OFFSET | pci::REGS_BAR);

        // PCI Express v2 endpoint, x1 at 2.5 GT/s.
        let pe = pci::CAP_PCIE_OFFSET as usize;
        cs.bytes[pe] = 0x10;
        cs.bytes[pe + 1] = 0;
        cs.set16(pe + 2, 0x0002);
        cs.set32(PCIE_DEVCAP, 0x0000_8000 | DEVCAP_FLR); // device caps: role-based error reporting, FLR
        cs.set16_mask(PCIE_DEVCTL, 0x2810, 0x7fff); // device control (bit 15, initiate FLR, reads 0)
        cs.w1c16(pe + 0x0a, 0x000f); // device status
        cs.set32(pe + 0x0c, 0x0000_0011); // link caps
        cs.set16_mask(pe + 0x10, 0, 0x0fff); // link control
        cs.set16(pe + 0x12, 0x0011); // link status
        cs.set16_mask(pe + 0x28, 0, 0xffff); // device control 2
        cs.set32(pe + 0x2c, 0x0000_0002); // link caps 2: 2.5 GT/s
        cs.set16_mask(pe + 0x30, 0x0001, 0xffff); // link control 2
        debug_assert!(pe + PCIE_CAP_LEN <= 0x100);
        cs.power_on = cs.bytes;
        cs
    }

    fn bars(doorbell_bar_size: u64, vram_size: u64) -> [Bar; 3] {
        [
            Bar { slot: pci::REGS_BAR as usize, size: pci::REGS_BAR_SIZE, is_64bit: false, prefetchable: false },
            Bar { slot: pci::DOORBELL_BAR as usize, size: doorbell_bar_size, is_64bit: false, prefetchable: false },
            Bar { slot: pci::VRAM_BAR as usize, size: vram_size, is_64bit: true, prefetchable: true },
        ]
    }

    fn add_bar(&mut self, bar: Bar) {
        let off = 0x10 + bar.slot * 4;
        let flags = (u32::from(bar.is_64bit) << 2) | (u32::from(bar.prefetchable) << 3);
        let size_mask = !(bar.size - 1);
        self.set32_mask(off, flags, ((size_mask & 0xffff_ffff) as u32) & !0xf);
        if bar.is_64bit {
            self.set32_mask(off + 4, 0, (size_mask >> 32) as u32);
        }
    }

    fn set16(&mut self, off: usize, v: u16) {
        self.bytes[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }
    fn set32(&mut self, off: usize, v: u32) {
        self.bytes[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }
    fn set16_mask(&mut self, off: usize, v: u16, wmask: u16) {
        self.set16(off, v);
        self.wmask[off..off + 2].copy_from_slice(&wmask.to_le_bytes());
    }
    fn set32_mask(&mut self, off: usize, v: u32, wmask: u32) {
        self.set32(off, v);
        self.wmask[off..off + 4].copy_from_slice(&wmask.to_le_bytes());
    }
    fn w1c16(&mut self, off: usize, mask: u16) {
        self.w1cmask[off..off + 2].copy_from_slice(&mask.to_le_bytes());
    }

    /// Reads `buf.len()` bytes at `offset`; `None` if the range is outside configuration space.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Option<()> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(buf.len())?;
        buf.copy_from_slice(self.bytes.get(start..end)?);
        Some(())
    }

    /// Writes `data` at `offset` through the write masks; `None` if outside configuration space.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Option<Vec<ConfigEffect>> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(data.len())?;
        if end > CONFIG_SIZE {
            return None;
        }
        let old_power = self.power_state();
        let old_master = self.bus_master();
        let flr =
            (start..end).zip(data).any(|(i, &v)| i == PCIE_DEVCTL + 1 && v & DEVCTL_BCR_FLR.to_le_bytes()[1] != 0);
        if flr {
            // The rest of the write is lost in the reset, as on hardware.
            self.bytes = self.power_on;
            let mut effects = Vec::new();
            if old_master {
                effects.push(ConfigEffect::BusMaster(false));
            }
            if old_power != 0 {
                effects.push(ConfigEffect::PowerState(0));
            }
            effects.push(ConfigEffect::FunctionReset);
            return Some(effects);
        }
        for (i, &v) in (start..end).zip(data) {
            let w = self.wmask[i];
            let c = self.w1cmask[i];
            let mut b = (self.bytes[i] & !w) | (v & w);
            b &= !(v & c);
            self.bytes[i] = b;
        }
        // D1 and D2 are not supported: a write of either leaves the state unchanged.
        let requested = self.power_state();
        if requested == 1 || requested == 2 {
            self.bytes[PMCSR] = (self.bytes[PMCSR] & !3) | old_power;
        }
        let mut effects = Vec::new();
        if self.power_state() != old_power {
            effects.push(ConfigEffect::PowerState(self.power_state()));
        }
        if self.bus_master() != old_master {
            effects.push(ConfigEffect::BusMaster(self.bus_master()));
        }
        Some(effects)
    }

    /// Whether the command register's bus-master bit is set.
    pub fn bus_master(&self) -> bool {
        self.bytes[0x04] & COMMAND_BUS_MASTER != 0
    }

    /// Current PM power state (0 = D0, 3 = D3hot).
    pub fn power_state(&self) -> u8 {
        self.bytes[PMCSR] & 3
    }

    /// Whether the guest enabled MSI-X.
    pub fn msix_enabled(&self) -> bool {
        self.bytes[MSIX_CONTROL + 1] & 0x80 != 0
    }

    /// Back to power-on values, keeping BAR addresses (a function reset in QEMU re-programs
    /// them anyway).
    pub fn reset_power_state(&mut self) {
        self.bytes[PMCSR] &= !3;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cs() -> ConfigSpace {
        ConfigSpace::new(4, true, pci::doorbell_bar_size(16), 64 << 20)
    }

    fn read32(cs: &ConfigSpace, off: u64) -> u32 {
        let mut b = [0u8; 4];
        cs.read(off, &mut b).unwrap();
        u32::from_le_bytes(b)
    }

    #[test]
    fn identity_and_capability_chain() {
        let cs = cs();
        assert_eq!(read32(&cs, 0), u32::from(pci::DEVICE_ID) << 16 | u32::from(pci::VENDOR_ID));
        assert_eq!(read32(&cs, 8) >> 8, pci::CLASS_CODE);
        let mut ids = Vec::new();
        let mut ptr = read32(&cs, 0x34).to_le_bytes()[0];
        while ptr != 0 {
            let hdr = read32(&cs, u64::from(ptr));
            let [id, next, ..] = hdr.to_le_bytes();
            ids.push(id);
            ptr = next;
        }
        assert_eq!(ids, vec![0x01, 0x11, 0x10]);
        assert_eq!(read32(&cs, u64::from(pci::CAP_MSIX_OFFSET)) >> 16 & 0x7ff, 3);
    }

    #[test]
    fn bars_size_like_real_hardware() {
        let mut cs = cs();
        for (slot, size, flags) in [(0u64, pci::REGS_BAR_SIZE, 0u32), (2, 64 << 10, 0), (4, 64 << 20, 0xc)] {
            let off = 0x10 + slot * 4;
            cs.write(off, &[0xff; 4]).unwrap();
            assert_eq!(read32(&cs, off), (!(u32::try_from(size).unwrap() - 1)) | flags, "BAR{slot}");
        }
        cs.write(0x14, &[0xff; 4]).unwrap();
        assert_eq!(read32(&cs, 0x14), 0, "unused BAR1 reads zero");
        cs.write(0x24, &[0xff; 4]).unwrap();
        assert_eq!(read32(&cs, 0x24), 0xffff_ffff, "VRAM BAR high half is all address bits");
    }

    #[test]
    fn read_only_fields_resist_writes_and_power_state_changes() {
        let mut cs = cs();
        cs.write(0, &[0; 4]).unwrap();
        assert_eq!(read32(&cs, 0) & 0xffff, u32::from(pci::VENDOR_ID));
        assert_eq!(cs.write(PMCSR as u64, &[3, 0]).unwrap(), vec![ConfigEffect::PowerState(3)]);
        assert_eq!(cs.write(PMCSR as u64, &[2, 0]).unwrap(), vec![], "D2 is unsupported");
        assert_eq!(cs.power_state(), 3);
        assert!(cs.write(4095, &[0, 0]).is_none());
        assert!(cs.read(4096, &mut [0]).is_none());
        cs.write(MSIX_CONTROL as u64, &[0, 0x80]).unwrap();
        assert!(cs.msix_enabled());
    }

    #[test]
    fn function_level_reset_is_offered_and_returns_every_register_to_power_on() {
        let mut cs = cs();
        let power_on = cs.bytes;
        assert_ne!(read32(&cs, PCIE_DEVCAP as u64) & DEVCAP_FLR, 0, "FLR capable");
        assert_eq!(cs.write(4, &[0x06, 0x04]).unwrap(), vec![ConfigEffect::BusMaster(true)]);
        cs.write(0x10, &[0xff; 4]).unwrap();
        cs.write(0x0c, &[0x10]).unwrap();
        cs.write(MSIX_CONTROL as u64, &[0, 0xc0]).unwrap();
        cs.write(PMCSR as u64, &[3, 0]).unwrap();
        cs.write(PCIE_DEVCTL as u64, &[0x1f, 0x50]).unwrap();
        assert_ne!(cs.bytes, power_on);

        let effects = cs.write(PCIE_DEVCTL as u64 + 1, &[0x80]).unwrap();
        assert_eq!(
            effects,
            vec![ConfigEffect::BusMaster(false), ConfigEffect::PowerState(0), ConfigEffect::FunctionReset]
        );
        assert_eq!(cs.bytes, power_on, "every register back to its power-on value");
        assert_eq!(read32(&cs, PCIE_DEVCTL as u64) & u32::from(DEVCTL_BCR_FLR), 0, "initiate-FLR reads 0");
        assert!(!cs.bus_master() && !cs.msix_enabled());
        assert_eq!(cs.power_state(), 0);

        // A device at power-on state resets again without effects beyond the reset itself.
        let effects = cs.write(PCIE_DEVCTL as u64, &DEVCTL_BCR_FLR.to_le_bytes()).unwrap();
        assert_eq!(effects, vec![ConfigEffect::FunctionReset]);
        // Device Control writes without the bit reset nothing.
        assert_eq!(cs.write(PCIE_DEVCTL as u64, &[0x10, 0x28]).unwrap(), vec![]);
    }
}
