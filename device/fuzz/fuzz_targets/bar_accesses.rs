//! Fuzz target: arbitrary reads and writes of every region a vfio-user client reaches — PCI
//! config space, the BAR0 registers, the doorbell BAR and the VRAM BAR — at any offset and
//! size, against a real device whose command ring the fuzzer placed over guest RAM it filled.
//!
//! Input: the command ring's base and size, up to 64 KiB of guest RAM (ring entries and the
//! blocks they name), then operations:
//!
//! ```text
//! op:u8  region:u8  offset:u64  len:u8  [data: len bytes for a write]
//! ```
//!
//! `op` bit 0: write (else read); bit 1: the offset as given (else folded into the region's
//! size, so most accesses land inside it); bit 2: also ring the command ring's doorbell with
//! the offset's low 32 bits as its tail; bit 3: write `len` bytes of guest RAM at the offset
//! (folded into RAM) instead. Config-space writes turn bus mastering off, enter D3hot or reset
//! the function; BAR0 writes reprogram the ring, the mailbox and the interrupts. The device
//! must never panic, every access must return, and the process must shut down cleanly.
#![no_main]

use std::os::unix::fs::FileExt;

use belfry_abi::pci;
use belfry_abi::regs::CMD_RING_DOORBELL;
use belfry_device::config::DeviceConfig;
use libfuzzer_sys::fuzz_target;

mod common;
use common::{device_with_ram, program_cmd_ring, read_reg, Input};

/// Guest RAM size.
const RAM: u64 = 1 << 20;
/// Where the input-filled RAM starts.
const FILLED: u64 = 0x10000;
/// Bytes of input-filled RAM at most.
const FILLED_SIZE: usize = 64 * 1024;
/// Operations per input.
const MAX_OPS: usize = 64;
/// vfio-user's region index of PCI config space (`VFIO_PCI_CONFIG_REGION_INDEX`).
const CONFIG_REGION: u32 = 7;
/// The regions an operation may name, by `region % 4`.
const REGIONS: [u32; 4] = [CONFIG_REGION, pci::REGS_BAR, pci::DOORBELL_BAR, pci::VRAM_BAR];

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let config =
        DeviceConfig::from_flags(["--vram-size", "256K", "--hang-timeout-ms", "20", "--doorbells", "4"]).unwrap();
    let (device, ram, cmp) = device_with_ram(config, RAM);
    let (base, size) = (input.u64(), input.u32());
    let fill = input.u32() as usize % (FILLED_SIZE + 1);
    ram.write_all_at(&input.take(fill), FILLED).unwrap();
    program_cmd_ring(&device, base, size);
    let ring_doorbell = CMD_RING_DOORBELL(read_reg(&device, CMD_RING_DOORBELL::OFFSET)).index();

    for _ in 0..MAX_OPS {
        let Some(op) = input.u8() else { break };
        let Some(region) = input.u8().map(|r| REGIONS[usize::from(r % 4)]) else { break };
        let raw_offset = input.u64();
        let len = usize::from(input.u8().unwrap_or(0));
        if op & 8 != 0 {
            let at = raw_offset % (RAM - len as u64);
            ram.write_all_at(&input.take(len), at).unwrap();
            continue;
        }
        let offset = match (op & 2 != 0, device.region_info(region)) {
            (false, Some((size, _))) if size > 0 => raw_offset % size,
            _ => raw_offset,
        };
        if op & 1 != 0 {
            let bytes = input.take(len);
            // A refused access is the device's answer (out of range, no such region).
            let _ = device.region_write(region, offset, &bytes);
        } else {
            let mut buf = vec![0u8; len];
            let _ = device.region_read(region, offset, &mut buf);
        }
        if op & 4 != 0 {
            let tail = (raw_offset as u32).to_le_bytes();
            let _ = device.region_write(pci::DOORBELL_BAR, pci::doorbell_offset(ring_doorbell), &tail);
        }
    }
    cmp.stop();
});
