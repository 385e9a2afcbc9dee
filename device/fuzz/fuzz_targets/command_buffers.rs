//! Fuzz target: arbitrary bytes as a command buffer executed by a real device's engines,
//! through real page tables in memfd guest RAM. Whatever the packets — bad opcodes, lengths,
//! addresses, loops, waits that never finish — the device must neither panic nor wedge: the
//! queue completes, faults, hangs or waits, and the process shuts down cleanly.
#![no_main]

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use belfry_abi::ids::{ContextId, QueueId};
use belfry_abi::mailbox::{self, MailboxHeader, Opcode};
use belfry_abi::mmu;
use belfry_device::config::DeviceConfig;
use belfry_device::device::Device;
use libfuzzer_sys::fuzz_target;

mod common;
use common::{bytes, device_with_ram};
use vm_memory::GuestAddress;

const RAM: u64 = 4 << 20;
const ARGS: u64 = 0x3000;
const DATA_VA: u64 = 0x10000;
const DATA_PA: u64 = 0x100000;
const PAGES: u64 = 32;

fn command(device: &Device, ram: &File, opcode: Opcode, mut block: Vec<u8>) {
    let header = MailboxHeader { opcode: opcode as u32, length: block.len() as u32, seq: 1, status: 0 };
    block[..16].copy_from_slice(&bytes(&header));
    ram.write_all_at(&block, ARGS).unwrap();
    let mem = device.ram.memory();
    let r = belfry_device::gpu::commands::execute(&device.gpu, &mem, opcode, GuestAddress(ARGS), block.len() as u32);
    assert!(r.is_ok(), "{opcode:?}: {r:?}");
}

/// Maps `pages` pages at `va` → `pa` in the tables rooted at `root`, allocating tables from `next`.
fn map(ram: &File, root: u64, next: &mut u64, va: u64, pa: u64) {
    let mut table = root;
    for level in (1..mmu::LEVELS).rev() {
        let at = table + mmu::table_index(mmu::GpuVa(va), level) * 8;
        let mut e = [0u8; 8];
        ram.read_exact_at(&mut e, at).unwrap();
        let e = u64::from_le_bytes(e);
        table = if e & mmu::PTE_PRESENT == 0 {
            let t = *next;
            *next += 4096;
            ram.write_all_at(&mmu::entry(t, mmu::PTE_PRESENT).to_le_bytes(), at).unwrap();
            t
        } else {
            e & mmu::PTE_ADDR_MASK
        };
    }
    let at = table + mmu::table_index(mmu::GpuVa(va), 0) * 8;
    ram.write_all_at(&mmu::entry(pa, mmu::PTE_PRESENT | mmu::PTE_WRITABLE).to_le_bytes(), at).unwrap();
}

fuzz_target!(|data: &[u8]| {
    let size = (data.len().min(64 * 1024) / 4) * 4;
    let config = DeviceConfig::from_flags(["--vram-size", "1M", "--hang-timeout-ms", "20"]).unwrap();
    let (device, ram, cmp) = device_with_ram(config, RAM);

    let mut next_table = 0x20000;
    for i in 0..PAGES {
        map(&ram, 0x2000, &mut next_table, DATA_VA + i * 4096, DATA_PA + i * 4096);
    }
    command(
        &device,
        &ram,
        Opcode::CreateAddressSpace,
        bytes(&mailbox::CreateAddressSpaceArgs { id: 0, root_pa: 0x1000, ..Default::default() }),
    );
    command(
        &device,
        &ram,
        Opcode::CreateAddressSpace,
        bytes(&mailbox::CreateAddressSpaceArgs { id: 1, root_pa: 0x2000, ..Default::default() }),
    );
    command(
        &device,
        &ram,
        Opcode::CreateContext,
        bytes(&mailbox::CreateContextArgs { id: 1, address_space: 1, ..Default::default() }),
    );
    let ring_va = DATA_VA;
    let control_va = DATA_VA + 4096;
    let cmdbuf_va = DATA_VA + 2 * 4096;
    command(
        &device,
        &ram,
        Opcode::CreateQueue,
        bytes(&mailbox::CreateQueueArgs {
            id: 1,
            context: 1,
            ring_entries: 2,
            ring_va,
            ring_control_va: control_va,
            ..Default::default()
        }),
    );
    ram.write_all_at(&data[..size], DATA_PA + 2 * 4096).unwrap();
    let entry = belfry_abi::ring::RingEntry { cmdbuf_va, size_bytes: size as u32, flags: 0 };
    ram.write_all_at(&bytes(&entry), DATA_PA).unwrap();
    ram.write_all_at(&1u32.to_le_bytes(), DATA_PA + 4096).unwrap();
    command(&device, &ram, Opcode::KickQueue, bytes(&mailbox::ObjectArgs { id: 1, ..Default::default() }));

    // Run until the buffer completes or the queue stops; waits may never finish.
    let deadline = Instant::now() + Duration::from_millis(100);
    while Instant::now() < deadline {
        let mut r = [0u8; 4];
        ram.read_exact_at(&mut r, DATA_PA + 4096 + 64).unwrap();
        let stopped = {
            let o = device.gpu.lock();
            let faulted = o.contexts.get(&ContextId::new(1)).is_some_and(|c| c.state.fault_info().is_some());
            let parked = o.queues.get(&QueueId::new(1)).is_some_and(|q| q.state.wait().is_some() || q.state.is_hung());
            faulted || parked
        };
        if u32::from_le_bytes(r) == 1 || stopped {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cmp.stop();
});
