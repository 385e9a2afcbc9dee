//! What the fuzz targets share: a device with guest RAM mapped and enabled, the VERSION
//! message that opens a vfio-user stream, sealed memfds and abi structs as bytes.
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
