//! Fuzz target: arbitrary mailbox argument blocks and page tables, through the real register
//! path (`MB_ARG_LO/HI`, `MB_SUBMIT`, `MB_STATUS`) of a real device with its command processor
//! and engines running.
//!
//! Guest RAM below [`TABLES`] + [`TABLES_SIZE`] is filled from the input, so the address space
//! the prelude creates at [`TABLES`] walks page tables the fuzzer wrote, and argument blocks
//! may point into them. Then the input is read as commands:
//!
//! ```text
//! opcode:u8  length:u8  [address:u64 if opcode bit 7]  block bytes (length * 8 + 16)
//! ```
//!
//! The block's header (opcode, length, sequence) is filled in as a driver would, except when the
//! length byte's bit 7 is set: then the header stays as the fuzzer wrote it. After every command
//! a KICK of every queue id the fuzzer may have created lets engines run whatever rings the
//! tables map. The device must neither panic nor stop answering: every command completes
//! within [`ANSWER`] with some status, and the process shuts down cleanly.
#![no_main]

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use belfry_abi::mailbox::{self, MailboxHeader, Opcode};
use belfry_abi::regs::{MB_ARG_HI, MB_ARG_LO, MB_STATUS, MB_SUBMIT};
use belfry_device::config::DeviceConfig;
use belfry_device::device::Device;
use libfuzzer_sys::fuzz_target;

mod common;
use common::{bytes, device_with_ram, read_reg, write_reg, Input};

/// Guest RAM size.
const RAM: u64 = 4 << 20;
/// Where the driver-built argument blocks go.
const ARGS: u64 = 0x1000;
/// Start of the input-filled RAM: page tables, rings and command buffers the fuzzer wrote.
const TABLES: u64 = 0x10000;
/// Bytes of input-filled RAM.
const TABLES_SIZE: usize = 64 * 1024;
/// How long a command may take to complete (generous: engines may be busy faulting).
const ANSWER: Duration = Duration::from_secs(2);
/// Commands per input.
const MAX_COMMANDS: usize = 32;

/// Submits the block at `address` as command `seq` and waits for its completion; a device
/// that stops answering is the bug this target looks for.
fn submit(device: &Device, address: u64, seq: u16) {
    write_reg(device, MB_ARG_LO::OFFSET, address as u32);
    write_reg(device, MB_ARG_HI::OFFSET, (address >> 32) as u32);
    write_reg(device, MB_SUBMIT::OFFSET, MB_SUBMIT::default().with_seq(u32::from(seq)).0);
    let start = Instant::now();
    loop {
        let status = MB_STATUS(read_reg(device, MB_STATUS::OFFSET));
        if !status.busy() {
            return;
        }
        assert!(start.elapsed() < ANSWER, "mailbox command {seq} at {address:#x} did not complete in {ANSWER:?}");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Writes a driver-style block (header filled in) at [`ARGS`] and submits it.
fn command(device: &Device, ram: &File, opcode: u32, mut block: Vec<u8>, keep_header: bool, seq: u16) {
    if !keep_header {
        let header = MailboxHeader { opcode, length: block.len() as u32, seq: u32::from(seq), status: 0 };
        block[..16].copy_from_slice(&bytes(&header));
    }
    ram.write_all_at(&block, ARGS).unwrap();
    submit(device, ARGS, seq);
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let config = DeviceConfig::from_flags(["--vram-size", "1M", "--hang-timeout-ms", "20", "--doorbells", "4"]).unwrap();
    let (device, ram, cmp) = device_with_ram(config, RAM);

    // Page tables, rings and buffers as the fuzzer wrote them.
    let tables = input.take(TABLES_SIZE.min(data.len() / 2));
    ram.write_all_at(&tables, TABLES).unwrap();
    // The prelude: an address space over those tables and a context in it, so that queues the
    // fuzzer creates in context 1 run through fuzzed translations.
    let mut seq: u16 = 1;
    let space = mailbox::CreateAddressSpaceArgs { id: 1, root_pa: TABLES, ..Default::default() };
    command(&device, &ram, Opcode::CreateAddressSpace as u32, bytes(&space), false, seq);
    seq += 1;
    let context = mailbox::CreateContextArgs { id: 1, address_space: 1, ..Default::default() };
    command(&device, &ram, Opcode::CreateContext as u32, bytes(&context), false, seq);

    for _ in 0..MAX_COMMANDS {
        let Some(op) = input.u8() else { break };
        let Some(len) = input.u8() else { break };
        let address = (op & 0x80 != 0).then(|| input.u64());
        let opcode = u32::from(op & 0x7f);
        let mut block = input.take(usize::from(len & 0x7f) * 8 + 16);
        block.resize(usize::from(len & 0x7f) * 8 + 16, 0);
        seq = seq.wrapping_add(1);
        match address {
            // An arbitrary block address: inside RAM, past it, unaligned, near u64::MAX.
            Some(address) => submit(&device, address, seq),
            None => command(&device, &ram, opcode, block, len & 0x80 != 0, seq),
        }
        // Let engines run whatever the fuzzer's queues map.
        for id in 0..4 {
            seq = seq.wrapping_add(1);
            let kick = mailbox::ObjectArgs { id, ..Default::default() };
            command(&device, &ram, Opcode::KickQueue as u32, bytes(&kick), false, seq);
        }
    }
    cmp.stop();
});
