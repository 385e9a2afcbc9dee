//! The device driven by an independent peer: rust-vmm's `vfio_user::Client`. Config space and
//! capabilities, BAR0 registers, doorbells (seen in the trace), DMA over a memfd, the mailbox
//! self-test with its interrupt counted on an eventfd, reset and Function Level Reset.

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use belfry_abi::mailbox::{self, Opcode, SelfTestArgs, Status};
use belfry_abi::{irq, pci, regs};
use common::*;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_INTX_IRQ_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX,
};
use vfio_user::Client;

const RAM_BASE: u64 = 0x4000_0000;
const RAM_SIZE: u64 = 2 << 20;

fn read32(client: &mut Client, region: u32, offset: u32) -> u32 {
    let mut b = [0u8; 4];
    client.region_read(region, u64::from(offset), &mut b).unwrap();
    u32::from_le_bytes(b)
}

fn write32(client: &mut Client, region: u32, offset: u32, value: u32) {
    client.region_write(region, u64::from(offset), &value.to_le_bytes()).unwrap();
}

fn self_test_block(seq: u32, vector: u32, cookie: u32) -> Vec<u8> {
    let mut b = Vec::new();
    let len = std::mem::size_of::<SelfTestArgs>() as u32;
    for v in [Opcode::SelfTest as u32, len, seq, Status::Pending as u32, vector, cookie, 0, 0] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b
}

struct Rig {
    dev: DeviceProcess,
    client: Client,
    ram: std::fs::File,
    vectors: Vec<vmm_sys_util::eventfd::EventFd>,
}

fn rig(flags: &[&str]) -> Rig {
    let dev = DeviceProcess::start(flags);
    let mut client = Client::new(&dev.socket).expect("connect and negotiate");
    let ram = memfd(RAM_SIZE);
    client.dma_map(0, RAM_BASE, RAM_SIZE, ram.as_raw_fd()).unwrap();
    // Memory decoding and bus mastering on, as the guest driver's pci_set_master does.
    client.region_write(VFIO_PCI_CONFIG_REGION_INDEX, 4, &0x6u16.to_le_bytes()).unwrap();
    let vectors: Vec<_> = (0..irq::VECTOR_COUNT).map(|_| eventfd()).collect();
    let fds: Vec<_> = vectors.iter().map(|e| e.as_raw_fd()).collect();
    client
        .set_irqs(
            VFIO_PCI_MSIX_IRQ_INDEX,
            VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            0,
            fds.len() as u32,
            &fds,
        )
        .unwrap();
    write32(&mut client, pci::REGS_BAR, regs::CONTROL::OFFSET, regs::CONTROL::default().with_enable(true).0);
    write32(&mut client, pci::REGS_BAR, regs::INT_MASK::OFFSET, irq::cause::ALL);
    Rig { dev, client, ram, vectors }
}

/// Runs SELF_TEST on `vector` with the block at guest address `RAM_BASE + at`.
fn self_test(r: &mut Rig, at: u64, seq: u32, vector: u32, cookie: u32) {
    r.ram.write_all_at(&self_test_block(seq, vector, cookie), at).unwrap();
    let addr = RAM_BASE + at;
    write32(&mut r.client, pci::REGS_BAR, regs::MB_ARG_LO::OFFSET, addr as u32);
    write32(&mut r.client, pci::REGS_BAR, regs::MB_ARG_HI::OFFSET, (addr >> 32) as u32);
    write32(&mut r.client, pci::REGS_BAR, regs::MB_SUBMIT::OFFSET, seq);
}

#[test]
fn config_space_shows_identity_and_capabilities() {
    let mut r = rig(&[]);
    let c = &mut r.client;
    let cfg = VFIO_PCI_CONFIG_REGION_INDEX;
    assert_eq!(c.region(cfg).unwrap().size, 4096);
    assert_eq!(c.region(pci::REGS_BAR).unwrap().size, pci::REGS_BAR_SIZE);
    assert_eq!(
        c.region(pci::DOORBELL_BAR).unwrap().size,
        pci::doorbell_bar_size(17),
        "16 queue doorbells and the command ring's"
    );
    assert_eq!(c.region(pci::VRAM_BAR).unwrap().size, 64 << 20);
    let id = read32(c, cfg, 0);
    assert_eq!((id & 0xffff, id >> 16), (u32::from(pci::VENDOR_ID), u32::from(pci::DEVICE_ID)));
    assert_eq!(read32(c, cfg, 8) >> 8, pci::CLASS_CODE);
    let mut caps = Vec::new();
    let mut ptr = read32(c, cfg, 0x34) & 0xff;
    while ptr != 0 {
        let hdr = read32(c, cfg, ptr);
        caps.push((ptr, hdr & 0xff));
        ptr = (hdr >> 8) & 0xff;
    }
    assert_eq!(
        caps,
        vec![
            (u32::from(pci::CAP_PM_OFFSET), 0x01),
            (u32::from(pci::CAP_MSIX_OFFSET), 0x11),
            (u32::from(pci::CAP_PCIE_OFFSET), 0x10)
        ]
    );
    let msix_table = read32(c, cfg, u32::from(pci::CAP_MSIX_OFFSET) + 4);
    assert_eq!(msix_table, pci::MSIX_TABLE_OFFSET | pci::REGS_BAR);
    assert_eq!(c.get_irq_info(VFIO_PCI_MSIX_IRQ_INDEX).unwrap().count, u32::from(irq::VECTOR_COUNT));
}

/// The interrupt pin register (byte 0x3d) and the INTx interrupt the function offers.
fn interrupt_pin_and_intx_count(c: &mut Client) -> (u32, u32) {
    let pin = read32(c, VFIO_PCI_CONFIG_REGION_INDEX, 0x3c) >> 8 & 0xff;
    (pin, c.get_irq_info(VFIO_PCI_INTX_IRQ_INDEX).unwrap().count)
}

#[test]
fn the_function_is_msix_only_unless_asked_for_intx() {
    let mut r = rig(&[]);
    assert_eq!(interrupt_pin_and_intx_count(&mut r.client), (0, 0), "no interrupt pin, no INTx interrupt");
    let mut r = rig(&["--intx"]);
    assert_eq!(interrupt_pin_and_intx_count(&mut r.client), (1, 1), "INTA# and one INTx interrupt");
}

#[test]
fn bar0_registers_read_and_write() {
    let mut r = rig(&["--doorbells", "5", "--vram-size", "16M"]);
    let c = &mut r.client;
    assert_eq!(read32(c, 0, regs::MAGIC::OFFSET), regs::MAGIC_VALUE);
    assert_eq!(regs::VERSION(read32(c, 0, regs::VERSION::OFFSET)).major(), regs::VERSION_MAJOR);
    assert_eq!(regs::DOORBELL_INFO(read32(c, 0, regs::DOORBELL_INFO::OFFSET)).count(), 5);
    assert_eq!(read32(c, 0, regs::VRAM_SIZE_LO::OFFSET), 16 << 20);
    assert_eq!(read32(c, 0, regs::TIMESTAMP_FREQ::OFFSET), regs::TIMESTAMP_FREQUENCY_HZ);
    write32(c, 0, regs::SCRATCH::OFFSET, 0xcafe_f00d);
    assert_eq!(read32(c, 0, regs::SCRATCH::OFFSET), 0xcafe_f00d);
    assert!(regs::STATUS(read32(c, 0, regs::STATUS::OFFSET)).ready());
    let t1 = read32(c, 0, regs::TIMESTAMP_LO::OFFSET);
    let t2 = read32(c, 0, regs::TIMESTAMP_LO::OFFSET);
    assert!(t2 > t1, "the GPU timestamp advances");
    let rec = r.dev.wait_trace("SCRATCH write", |r| r["event"] == "reg_write" && r["name"] == "SCRATCH");
    assert_eq!(rec["value"], 0xcafe_f00du64);
}

#[test]
fn doorbells_wake_the_command_processor_and_are_traced() {
    let mut r = rig(&[]);
    write32(&mut r.client, pci::DOORBELL_BAR, pci::doorbell_offset(3) as u32, 42);
    write32(&mut r.client, pci::DOORBELL_BAR, pci::doorbell_offset(15) as u32, 7);
    assert_eq!(read32(&mut r.client, pci::DOORBELL_BAR, pci::doorbell_offset(3) as u32), 42);
    let ring = r.dev.wait_trace("doorbell 3", |r| r["event"] == "doorbell" && r["index"] == 3);
    assert_eq!(ring["value"], 42);
    r.dev.wait_trace("doorbell 15", |r| r["event"] == "doorbell" && r["index"] == 15);
    r.dev.wait_trace("CMP wake for doorbell 15", |r| {
        r["event"] == "doorbell_wake" && r["rung"].as_array().is_some_and(|a| a.iter().any(|e| e[0] == 15 && e[1] == 7))
    });
}

#[test]
fn mailbox_self_test_raises_each_chosen_vector() {
    let mut r = rig(&[]);
    for vector in 0..u32::from(irq::VECTOR_COUNT) {
        let at = 0x1000 + u64::from(vector) * 64;
        let cookie = 0x1234_0000 + vector;
        self_test(&mut r, at, 10 + vector, vector, cookie);
        assert_eq!(wait_eventfd(&r.vectors[vector as usize], Duration::from_secs(5)), 1, "vector {vector}");
        for (other, efd) in r.vectors.iter().enumerate() {
            if other as u32 != vector {
                assert_eq!(wait_eventfd(efd, Duration::ZERO), 0, "vector {other} stayed quiet");
            }
        }
        assert_eq!(read_u32(&r.ram, at + 12), Status::Ok as u32);
        assert_eq!(read_u32(&r.ram, at + 8), 10 + vector, "seq echoed");
        assert_eq!(read_u32(&r.ram, at + 24), mailbox::self_test_response(cookie));
        let st = regs::MB_STATUS(read32(&mut r.client, 0, regs::MB_STATUS::OFFSET));
        assert_eq!((st.busy(), st.seq(), st.status()), (false, 10 + vector, Status::Ok as u32));
    }
    assert_ne!(read32(&mut r.client, 0, regs::INT_RAWSTAT::OFFSET) & irq::cause::MAILBOX, 0);
    write32(&mut r.client, 0, regs::INT_CLEAR::OFFSET, irq::cause::MAILBOX);
    assert_eq!(read32(&mut r.client, 0, regs::INT_RAWSTAT::OFFSET), 0);
    r.dev.wait_trace("self-test completion", |r| {
        r["event"] == "mailbox" && r["phase"] == "complete" && r["opcode"] == "SELF_TEST" && r["status"] == "OK"
    });
    r.dev.wait_trace("interrupt on vector 3", |r| {
        r["event"] == "interrupt" && r["vector"] == 3 && r["delivery"] == "msix"
    });
}

#[test]
fn bad_mailbox_arguments_complete_with_an_error_and_no_harm() {
    let mut r = rig(&[]);
    // Vector out of range.
    self_test(&mut r, 0x2000, 1, 99, 5);
    assert_eq!(wait_eventfd(&r.vectors[0], Duration::from_secs(5)), 1, "error completions interrupt too");
    assert_eq!(read_u32(&r.ram, 0x2000 + 12), Status::BadArgument as u32);
    assert_eq!(read_u32(&r.ram, 0x2000 + 24), 0, "no response written");
    // Block outside guest memory.
    write32(&mut r.client, 0, regs::MB_ARG_LO::OFFSET, 0x10);
    write32(&mut r.client, 0, regs::MB_ARG_HI::OFFSET, 0);
    write32(&mut r.client, 0, regs::MB_SUBMIT::OFFSET, 2);
    assert_eq!(wait_eventfd(&r.vectors[0], Duration::from_secs(5)), 1);
    let st = regs::MB_STATUS(read32(&mut r.client, 0, regs::MB_STATUS::OFFSET));
    assert_eq!((st.seq(), st.status()), (2, Status::BadAddress as u32));
    // Unknown opcode.
    r.ram.write_all_at(&[0xff, 0, 0, 0, 32, 0, 0, 0], 0x3000).unwrap();
    write32(&mut r.client, 0, regs::MB_ARG_LO::OFFSET, (RAM_BASE + 0x3000) as u32);
    write32(&mut r.client, 0, regs::MB_ARG_HI::OFFSET, 0);
    write32(&mut r.client, 0, regs::MB_SUBMIT::OFFSET, 3);
    assert_eq!(wait_eventfd(&r.vectors[0], Duration::from_secs(5)), 1);
    assert_eq!(read_u32(&r.ram, 0x3000 + 12), Status::BadOpcode as u32);
    // The device still works.
    self_test(&mut r, 0x4000, 4, 1, 77);
    assert_eq!(wait_eventfd(&r.vectors[1], Duration::from_secs(5)), 1);
    assert_eq!(read_u32(&r.ram, 0x4000 + 12), Status::Ok as u32);
}

#[test]
fn reset_restores_power_on_state() {
    let mut r = rig(&[]);
    write32(&mut r.client, 0, regs::SCRATCH::OFFSET, 5);
    r.client.reset().unwrap();
    assert_eq!(read32(&mut r.client, 0, regs::SCRATCH::OFFSET), 0);
    assert_eq!(read32(&mut r.client, 0, regs::CONTROL::OFFSET), 0);
    assert_eq!(read32(&mut r.client, 0, regs::INT_MASK::OFFSET), 0);
    r.dev.wait_trace("reset", |r| r["event"] == "reset" && r["source"] == "vfio-user");
    // Disabled after reset: a self-test completes with DISABLED.
    self_test(&mut r, 0x1000, 1, 0, 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while read_u32(&r.ram, 0x1000 + 12) == Status::Pending as u32 {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(read_u32(&r.ram, 0x1000 + 12), Status::Disabled as u32);
    r.client.dma_unmap(RAM_BASE, RAM_SIZE).unwrap();
}

/// Function Level Reset through the PCI Express capability, as a guest kernel's `pcie_flr`
/// writes it: the device offers it, the write returns configuration space and the function's
/// state to power-on (bus mastering off, registers cleared, the mailbox disabled), and the
/// function works again once its driver restores it.
#[test]
fn function_level_reset_restores_power_on_state() {
    let mut r = rig(&[]);
    let pcie = u32::from(pci::CAP_PCIE_OFFSET);
    let devcap = read32(&mut r.client, VFIO_PCI_CONFIG_REGION_INDEX, pcie + 4);
    assert_ne!(devcap & (1 << 28), 0, "Device Capabilities offers FLR");
    let devctl = read32(&mut r.client, VFIO_PCI_CONFIG_REGION_INDEX, pcie + 8) & 0xffff;
    write32(&mut r.client, 0, regs::SCRATCH::OFFSET, 5);
    self_test(&mut r, 0x1000, 1, 2, 0x55);
    assert_eq!(wait_eventfd(&r.vectors[2], Duration::from_secs(5)), 1);

    // pcie_flr: set initiate-FLR with a 16-bit write of Device Control.
    r.client
        .region_write(VFIO_PCI_CONFIG_REGION_INDEX, u64::from(pcie + 8), &((devctl | 0x8000) as u16).to_le_bytes())
        .unwrap();
    r.dev.wait_trace("reset", |r| r["event"] == "reset" && r["source"] == "flr");
    assert_eq!(read32(&mut r.client, VFIO_PCI_CONFIG_REGION_INDEX, 4) & 0xffff, 0, "command register cleared");
    assert_eq!(read32(&mut r.client, VFIO_PCI_CONFIG_REGION_INDEX, pcie + 8) & 0x8000, 0, "initiate-FLR reads 0");
    assert_eq!(read32(&mut r.client, 0, regs::SCRATCH::OFFSET), 0);
    assert_eq!(read32(&mut r.client, 0, regs::CONTROL::OFFSET), 0);
    assert_eq!(read32(&mut r.client, 0, regs::INT_MASK::OFFSET), 0);

    // The driver restores the function: it works as before, on the same mappings and eventfds.
    r.client.region_write(VFIO_PCI_CONFIG_REGION_INDEX, 4, &0x6u16.to_le_bytes()).unwrap();
    write32(&mut r.client, pci::REGS_BAR, regs::CONTROL::OFFSET, regs::CONTROL::default().with_enable(true).0);
    write32(&mut r.client, pci::REGS_BAR, regs::INT_MASK::OFFSET, irq::cause::ALL);
    self_test(&mut r, 0x2000, 1, 2, 0x66);
    assert_eq!(wait_eventfd(&r.vectors[2], Duration::from_secs(5)), 1);
    assert_eq!(read_u32(&r.ram, 0x2000 + 12), Status::Ok as u32);
    assert_eq!(read_u32(&r.ram, 0x2000 + 24), mailbox::self_test_response(0x66));
    r.client.dma_unmap(RAM_BASE, RAM_SIZE).unwrap();
}

#[test]
fn injected_faults_are_visible() {
    let mut r = rig(&["--inject", "bad-identity", "--inject", "no-interrupts"]);
    assert_ne!(read32(&mut r.client, 0, regs::MAGIC::OFFSET), regs::MAGIC_VALUE);
    self_test(&mut r, 0x1000, 1, 0, 9);
    r.dev.wait_trace("suppressed interrupt", |r| r["event"] == "interrupt" && r["delivery"] == "suppressed");
    assert_eq!(read_u32(&r.ram, 0x1000 + 12), Status::Ok as u32);
    assert_eq!(wait_eventfd(&r.vectors[0], Duration::from_millis(200)), 0, "no interrupt reaches the eventfd");
}

#[test]
fn shared_doorbells_are_mapped_memory_the_processor_polls_and_sleeps_on() {
    use belfry_abi::doorbell::{ASLEEP, SLEEP_WORD_OFFSET};
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
    use vfio_bindings::bindings::vfio::VFIO_REGION_INFO_FLAG_MMAP;

    let mut r = rig(&["--doorbell-transport", "shared", "--doorbell-poll-us", "1000"]);
    let region = r.client.region(pci::DOORBELL_BAR).unwrap();
    assert_ne!(region.flags & VFIO_REGION_INFO_FLAG_MMAP, 0, "the shared doorbell BAR is mappable");
    let fd = region.file_offset.clone().expect("the region's fd came with its info");
    let map = vm_memory::MmapRegion::<()>::from_file(fd, region.size as usize).unwrap();
    let page = |n: u64| map.as_ptr().wrapping_add((n * pci::DOORBELL_PAGE_SIZE) as usize);
    // SAFETY: in bounds and aligned: page 3's doorbell and sleep word, in a mapping that
    // outlives the references; the device accesses them only through atomics too.
    let (value, sleep) =
        unsafe { (&*page(3).cast::<AtomicU64>(), &*page(3).add(SLEEP_WORD_OFFSET as usize).cast::<AtomicU32>()) };
    // Idle past its 1 ms budget, the command processor publishes its sleep in every page (within
    // 10 s: a loaded host may not run it for a while).
    let idle = std::time::Instant::now();
    while sleep.load(Ordering::Acquire) != ASLEEP && idle.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(sleep.load(Ordering::Acquire), ASLEEP, "no sleep published after 10 s idle");
    // A store is a ring; asleep, the processor notices it only once woken (DB_WAKE).
    value.store(42, Ordering::Release);
    std::thread::sleep(Duration::from_millis(100));
    let wake_for_3 = |r: &serde_json::Value| {
        r["event"] == "doorbell_wake" && r["rung"].as_array().is_some_and(|a| a.iter().any(|e| e[0] == 3))
    };
    assert!(!r.dev.trace_records().iter().any(wake_for_3), "a sleeping processor polled");
    write32(&mut r.client, pci::REGS_BAR, regs::DB_WAKE::OFFSET, 3);
    let woke = r.dev.wait_trace("the ring after DB_WAKE", wake_for_3);
    assert_eq!(woke["rung"][0][1], 42);
    // A trapped write reaches the same memory.
    write32(&mut r.client, pci::DOORBELL_BAR, pci::doorbell_offset(3) as u32, 43);
    assert_eq!(value.load(Ordering::Acquire), 43);
}
