//! What the fuzz targets share: a device with guest RAM mapped and enabled, the VERSION
//! message that opens a vfio-user stream, sealed memfds, abi structs as bytes, the input read
//! front to back, and the command ring programmed over guest RAM.
#![allow(dead_code)] // Each target uses its own part.

use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

use belfry_device::config::DeviceConfig;
use belfry_device::device::Device;
use belfry_device::gpu::cmp::CommandProcessor;
use belfry_device::trace::Tracer;

/// The bytes of an abi struct.
pub fn bytes<T: Copy>(v: &T) -> Vec<u8> {
    let mut out = vec![0u8; std::mem::size_of::<T>()];
    // SAFETY: abi layouts are plain integers without implicit padding.
    unsafe { std::ptr::copy_nonoverlapping((v as *const T).cast::<u8>(), out.as_mut_ptr(), out.len()) };
    out
}

/// A memfd of `size` bytes, sealed against shrinking when `sealed` (as QEMU's memfd backend
/// does by default, and as the device requires of guest RAM).
pub fn memfd(size: u64, sealed: bool) -> File {
    // SAFETY: memfd_create with a NUL-terminated name; result checked.
    let fd = unsafe { libc::memfd_create(c"fuzz-memory".as_ptr(), libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0);
    // SAFETY: fresh descriptor owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size).unwrap();
    if sealed {
        // SAFETY: fcntl(F_ADD_SEALS) on a descriptor we own only adds seals.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) }, 0);
    }
    file
}

/// A device of `config` with `ram_size` bytes of guest RAM at address 0 (returned, for the
/// target to fill), bus mastering on, enabled, and its command processor running.
pub fn device_with_ram(config: DeviceConfig, ram_size: u64) -> (Arc<Device>, File, CommandProcessor) {
    let device = Arc::new(Device::new(config, Arc::new(Tracer::new("fuzz"))).unwrap());
    let ram = memfd(ram_size, true);
    device.ram.map(0, ram_size, 0, 3, Some(OwnedFd::from(ram.try_clone().unwrap()))).unwrap();
    device.ram.set_bus_master(true);
    device.regs.write(belfry_abi::regs::CONTROL::OFFSET, 1);
    let cmp = CommandProcessor::start(device.gpu.clone()).unwrap();
    (device, ram, cmp)
}

/// The VERSION message a client sends first, so a fuzzed stream reaches every command.
pub fn version_message() -> Vec<u8> {
    let caps = b"{\"capabilities\":{}}\0";
    let size = 16 + 4 + caps.len() as u32;
    let mut m = Vec::new();
    m.extend_from_slice(&0u16.to_le_bytes());
    m.extend_from_slice(&1u16.to_le_bytes());
    m.extend_from_slice(&size.to_le_bytes());
    m.extend_from_slice(&[0; 8]);
    m.extend_from_slice(&[0, 0, 1, 0]);
    m.extend_from_slice(caps);
    m
}

/// The input, consumed front to back; reads past its end give zeros.
pub struct Input<'a>(pub &'a [u8]);

impl Input<'_> {
    /// The next `n` bytes (fewer at the end).
    pub fn take(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.0.len());
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        head.to_vec()
    }

    /// The next byte, or `None` at the end.
    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).first().copied()
    }

    /// The next 4 bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        let mut b = self.take(4);
        b.resize(4, 0);
        u32::from_le_bytes(b.try_into().unwrap_or_default())
    }

    /// The next 8 bytes, little-endian.
    pub fn u64(&mut self) -> u64 {
        let mut b = self.take(8);
        b.resize(8, 0);
        u64::from_le_bytes(b.try_into().unwrap_or_default())
    }
}

/// Writes BAR0 register `offset`; a refused write is the device's answer, not a bug.
pub fn write_reg(device: &Device, offset: u32, value: u32) {
    let _ = device.region_write(belfry_abi::pci::REGS_BAR, u64::from(offset), &value.to_le_bytes());
}

/// Reads BAR0 register `offset` (0 when refused).
pub fn read_reg(device: &Device, offset: u32) -> u32 {
    let mut b = [0u8; 4];
    let _ = device.region_read(belfry_abi::pci::REGS_BAR, u64::from(offset), &mut b);
    u32::from_le_bytes(b)
}

/// Programs and enables the command ring at `base` with `size` entries, both the fuzzer's.
pub fn program_cmd_ring(device: &Device, base: u64, size: u32) {
    use belfry_abi::regs::{CMD_RING_BASE_HI, CMD_RING_BASE_LO, CMD_RING_CTRL, CMD_RING_SIZE};
    write_reg(device, CMD_RING_BASE_LO::OFFSET, base as u32);
    write_reg(device, CMD_RING_BASE_HI::OFFSET, (base >> 32) as u32);
    write_reg(device, CMD_RING_SIZE::OFFSET, size);
    write_reg(device, CMD_RING_CTRL::OFFSET, CMD_RING_CTRL::default().with_enable(true).0);
}
