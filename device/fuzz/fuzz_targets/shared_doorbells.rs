//! Fuzz target: the shared-doorbell transport's polling. The doorbell BAR is memory the guest
//! maps (a memfd shared with the client) and the command processor polls, then sleeps after
//! publishing its sleep in each page; a ring that finds it asleep is followed by a `DB_WAKE`
//! write. Here the fuzzer is the guest: it stores anything anywhere in that memory — doorbell
//! values, the sleep words, the command ring's doorbell (whose entries, over guest RAM the
//! fuzzer filled, the command processor then runs) — with or without `DB_WAKE`, at its own
//! pace, while the command processor polls and sleeps.
//!
//! Input: the command ring's base and size, up to 64 KiB of guest RAM, then operations:
//!
//! ```text
//! op:u8  page:u8  within:u8  value:u64
//! ```
//!
//! `op` bits 0–1: store 1, 2, 4 or 8 bytes of `value` at byte `within` of doorbell page `page`
//! (folded into the BAR; any alignment, as a guest may — the words that matter are at the start
//! of a page); bit 2: write `DB_WAKE` after it; bit 3: pause 100–850 µs after it so the
//! command processor polls or falls asleep. The device must never panic and must shut
//! down cleanly.
#![no_main]

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use belfry_abi::pci;
use belfry_abi::regs::DB_WAKE;
use belfry_device::config::DeviceConfig;
use libfuzzer_sys::fuzz_target;

mod common;
use common::{device_with_ram, program_cmd_ring, write_reg, Input};

/// Guest RAM size.
const RAM: u64 = 1 << 20;
/// Where the input-filled RAM starts.
const FILLED: u64 = 0x10000;
/// Bytes of input-filled RAM at most.
const FILLED_SIZE: usize = 64 * 1024;
/// Operations per input.
const MAX_OPS: usize = 128;

/// The doorbell BAR mapped shared, as the client maps it; unmapped on drop.
struct Mapping {
    base: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(fd: i32, len: usize) -> Mapping {
        // SAFETY: a fresh shared mapping of `len` bytes of the device's memfd, which is at least
        // that long and sealed against shrinking; the result is checked.
        let base = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap of the doorbell BAR");
        Mapping { base: base.cast(), len }
    }

    /// Stores the low `size` bytes of `value` at `offset` (folded so they fit), one volatile
    /// store of that width when aligned, bytewise otherwise.
    fn store(&self, offset: usize, size: usize, value: u64) {
        let at = offset % (self.len - size + 1);
        // SAFETY: `at + size <= len` inside our live mapping; volatile stores of plain integers
        // to memory another process reads, which is what a guest does.
        unsafe {
            let p = self.base.add(at);
            match size {
                8 if at % 8 == 0 => p.cast::<u64>().write_volatile(value),
                4 if at % 4 == 0 => p.cast::<u32>().write_volatile(value as u32),
                2 if at % 2 == 0 => p.cast::<u16>().write_volatile(value as u16),
                _ => {
                    for (i, b) in value.to_le_bytes().iter().take(size).enumerate() {
                        p.add(i).write_volatile(*b);
                    }
                }
            }
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let config = DeviceConfig::from_flags([
        "--doorbell-transport",
        "shared",
        "--doorbell-poll-us",
        "200",
        "--doorbells",
        "4",
        "--hang-timeout-ms",
        "20",
    ])
    .unwrap();
    let (device, ram, cmp) = device_with_ram(config, RAM);
    let (base, size) = (input.u64(), input.u32());
    let fill = input.u32() as usize % (FILLED_SIZE + 1);
    ram.write_all_at(&input.take(fill), FILLED).unwrap();
    program_cmd_ring(&device, base, size);
    let (bar_size, _) = device.region_info(pci::DOORBELL_BAR).expect("a doorbell BAR");
    let fd = device.region_fd(pci::DOORBELL_BAR).expect("the shared transport's memfd").as_raw_fd();
    let bar = Mapping::new(fd, bar_size as usize);

    for _ in 0..MAX_OPS {
        let Some(op) = input.u8() else { break };
        let page = usize::from(input.u8().unwrap_or(0)) * pci::doorbell_offset(1) as usize;
        let offset = page + usize::from(input.u8().unwrap_or(0));
        let value = input.u64();
        bar.store(offset, 1 << (op & 3), value);
        if op & 4 != 0 {
            write_reg(&device, DB_WAKE::OFFSET, 1);
        }
        if op & 8 != 0 {
            std::thread::sleep(Duration::from_micros(100 + u64::from(op >> 4) * 50));
        }
    }
    drop(bar);
    cmp.stop();
});
