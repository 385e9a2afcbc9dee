//! The command ring (`CAPS.cmd_ring`, `belfry_abi::cmdring`) driven over vfio-user like a
//! driver would, and fed hostile contents: every bad base, size, tail or entry is an error
//! completion or a counted ring error, never a panic, and the device keeps serving.

mod common;

use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use belfry_abi::cmdring::{self, Entry, RingError};
use belfry_abi::mailbox::{self, Opcode, SelfTestArgs, Status};
use belfry_abi::{pci, regs};
use common::gpu::*;
use common::read_u32;

/// A ring of `size` entries in the test's guest RAM, enabled.
struct Ring {
    base: u64,
    size: u32,
    tail: u32,
    doorbell: u32,
}

impl Ring {
    fn enable(g: &mut Gpu, size: u32) -> Ring {
        let base = g.alloc(2);
        program(g, base, size);
        let doorbell = regs::CMD_RING_DOORBELL(g.c.read32(pci::REGS_BAR, regs::CMD_RING_DOORBELL::OFFSET)).index();
        Ring { base, size, tail: 0, doorbell }
    }

    /// Writes entry `tail` naming the block at `arg` with `opcode`; returns its address.
    fn put(&mut self, g: &Gpu, opcode: u32, seq: u32, arg: u64) -> u64 {
        let at = cmdring::entry_address(self.base, self.size, self.tail).unwrap();
        let e = Entry { opcode, seq, arg, status: 0, done_seq: cmdring::NOT_DONE, reserved: 0 };
        g.ram.write_all_at(&to_bytes(&e), at).unwrap();
        self.tail = self.tail.wrapping_add(1);
        at
    }

    fn ring(&self, g: &mut Gpu, tail: u32) {
        g.c.write32(pci::DOORBELL_BAR, pci::doorbell_offset(self.doorbell) as u32, tail);
    }
}

fn program(g: &mut Gpu, base: u64, size: u32) {
    g.c.write32(pci::REGS_BAR, regs::CMD_RING_BASE_LO::OFFSET, base as u32);
    g.c.write32(pci::REGS_BAR, regs::CMD_RING_BASE_HI::OFFSET, (base >> 32) as u32);
    g.c.write32(pci::REGS_BAR, regs::CMD_RING_SIZE::OFFSET, size);
    g.c.write32(pci::REGS_BAR, regs::CMD_RING_CTRL::OFFSET, 0);
    g.c.write32(pci::REGS_BAR, regs::CMD_RING_CTRL::OFFSET, regs::CMD_RING_CTRL::default().with_enable(true).0);
}

/// A self-test block with `cookie` at a fresh page; its address.
fn self_test_block(g: &mut Gpu, cookie: u32) -> u64 {
    let pa = g.alloc(1);
    let args = SelfTestArgs {
        header: mailbox::MailboxHeader {
            opcode: Opcode::SelfTest as u32,
            length: Opcode::SelfTest.block_len(),
            seq: 0,
            status: Status::Pending as u32,
        },
        vector: 0,
        cookie,
        ..Default::default()
    };
    g.ram.write_all_at(&to_bytes(&args), pa).unwrap();
    pa
}

/// Waits until the entry at `at` is completed; its status.
fn wait_done(g: &Gpu, at: u64, seq: u32) -> Status {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if read_u32(&g.ram, at + cmdring::DONE_SEQ_OFFSET) == seq {
            return Status::try_from(read_u32(&g.ram, at + cmdring::STATUS_OFFSET)).expect("a valid status");
        }
        assert!(Instant::now() < deadline, "entry seq {seq} never completed");
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn ring_error(g: &mut Gpu) -> regs::CMD_RING_ERROR {
    regs::CMD_RING_ERROR(g.c.read32(pci::REGS_BAR, regs::CMD_RING_ERROR::OFFSET))
}

fn head(g: &mut Gpu) -> u32 {
    g.c.read32(pci::REGS_BAR, regs::CMD_RING_HEAD::OFFSET)
}

/// Waits until `CMD_RING_ERROR.count` reaches `count`.
fn wait_errors(g: &mut Gpu, count: u32) -> regs::CMD_RING_ERROR {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let e = ring_error(g);
        if e.count() >= count {
            return e;
        }
        assert!(Instant::now() < deadline, "ring error {count} never counted");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Commands queued together run in order through a wrapping ring, each completed with its
/// sequence number in the entry and the block; the BAR0 mailbox status is not touched.
#[test]
fn commands_run_in_order_through_a_wrapping_ring() {
    let mut g = Gpu::start(&[]);
    let caps = regs::CAPS(g.c.read32(pci::REGS_BAR, regs::CAPS::OFFSET));
    assert!(caps.cmd_ring());
    let mb_status = g.c.read32(pci::REGS_BAR, regs::MB_STATUS::OFFSET);
    let mut ring = Ring::enable(&mut g, 4);
    assert_eq!(ring.doorbell, 16, "the page after the 16 queue doorbells");
    for round in 0..2u32 {
        let mut entries = Vec::new();
        for i in 0..3u32 {
            let seq = 100 + round * 10 + i;
            let block = self_test_block(&mut g, seq * 7);
            entries.push((ring.put(&g, Opcode::SelfTest as u32, seq, block), seq, block));
        }
        ring.ring(&mut g, ring.tail);
        for (at, seq, block) in entries {
            assert_eq!(wait_done(&g, at, seq), Status::Ok);
            assert_eq!(read_u32(&g.ram, block + 8), seq, "the block's header carries the entry's seq");
            assert_eq!(read_u32(&g.ram, block + 24), mailbox::self_test_response(seq * 7));
        }
        assert_eq!(head(&mut g), 3 * (round + 1));
    }
    assert_eq!(g.c.read32(pci::REGS_BAR, regs::MB_STATUS::OFFSET), mb_status);
    assert_eq!(ring_error(&mut g).count(), 0);
}

/// In D3hot through the PM capability the command ring runs nothing: an entry rung there stays
/// pending (its doorbell latches, as every doorbell does) and runs once the device is back in
/// D0, without another ring. No rule id (the module never rings it in D3).
#[test]
fn a_command_rung_in_d3hot_runs_only_back_in_d0() {
    use vfio_bindings::bindings::vfio::VFIO_PCI_CONFIG_REGION_INDEX;
    let mut g = Gpu::start(&[]);
    let mut ring = Ring::enable(&mut g, 4);
    let pmcsr = u64::from(pci::CAP_PM_OFFSET) + 4;
    g.c.region_write(VFIO_PCI_CONFIG_REGION_INDEX, pmcsr, &[3, 0]).unwrap();
    let block = self_test_block(&mut g, 0xd3);
    let at = ring.put(&g, Opcode::SelfTest as u32, 5, block);
    ring.ring(&mut g, ring.tail);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(read_u32(&g.ram, at + cmdring::DONE_SEQ_OFFSET), cmdring::NOT_DONE, "an entry ran in D3hot");
    assert_eq!(head(&mut g), 0);
    g.c.region_write(VFIO_PCI_CONFIG_REGION_INDEX, pmcsr, &[0, 0]).unwrap();
    assert_eq!(wait_done(&g, at, 5), Status::Ok);
    assert_eq!(read_u32(&g.ram, block + 24), mailbox::self_test_response(0xd3));
}

/// Hostile entries get error completions and the ring goes on: a block address unaligned or
/// outside guest memory (BAD_ADDRESS), an entry opcode that is not the block's or not an
/// opcode at all (BAD_OPCODE), a block of the wrong length (BAD_LENGTH).
#[test]
fn hostile_entries_complete_with_errors_and_the_ring_goes_on() {
    let mut g = Gpu::start(&[]);
    let mut ring = Ring::enable(&mut g, 8);
    let good = self_test_block(&mut g, 5);
    let short = self_test_block(&mut g, 5);
    g.ram.write_all_at(&8u32.to_le_bytes(), short + 4).unwrap();
    let cases = [
        (Opcode::SelfTest as u32, good + 4, Status::BadAddress),
        (Opcode::SelfTest as u32, RAM_SIZE + 0x1000, Status::BadAddress),
        (Opcode::SelfTest as u32, u64::MAX - 7, Status::BadAddress),
        (Opcode::KickQueue as u32, good, Status::BadOpcode),
        (0xdead, good, Status::BadOpcode),
        (Opcode::SelfTest as u32, short, Status::BadLength),
        (Opcode::SelfTest as u32, good, Status::Ok),
    ];
    let ats: Vec<u64> = (0u32..).zip(&cases).map(|(seq, &(op, arg, _))| ring.put(&g, op, seq, arg)).collect();
    ring.ring(&mut g, ring.tail);
    for ((seq, &(_, arg, want)), at) in (0u32..).zip(&cases).zip(ats) {
        assert_eq!(wait_done(&g, at, seq), want, "entry {seq} naming {arg:#x}");
    }
    assert_eq!(ring_error(&mut g).count(), 0, "entry errors are completions, not ring errors");
}

/// Hostile ring registers and tails are counted ring errors, never a panic: a size that is not
/// a power of two, a tail more than `size` entries ahead (the head does not move), a base
/// outside guest memory or unaligned; the device still answers through BAR0 and the ring
/// works again once programmed sanely.
#[test]
fn hostile_ring_registers_are_ring_errors_and_the_device_keeps_serving() {
    let mut g = Gpu::start(&[]);
    let mut ring = Ring::enable(&mut g, 4);
    let block = self_test_block(&mut g, 9);
    ring.put(&g, Opcode::SelfTest as u32, 1, block);
    ring.ring(&mut g, 5);
    assert_eq!(RingError::BadTail as u32, wait_errors(&mut g, 1).last());
    assert_eq!(head(&mut g), 0, "a refused tail runs nothing");

    program(&mut g, ring.base, 3);
    ring.ring(&mut g, 1);
    assert_eq!(RingError::BadSize as u32, wait_errors(&mut g, 1).last());

    for (n, base) in [(1, RAM_SIZE + 0x10000), (2, ring.base + 8), (3, !31u64)] {
        program(&mut g, base, 4);
        ring.ring(&mut g, n);
        assert_eq!(RingError::BadBase as u32, wait_errors(&mut g, 1).last(), "base {base:#x}");
    }

    let mut args = to_bytes(&SelfTestArgs { vector: 0, cookie: 3, ..Default::default() });
    assert_eq!(g.mailbox(Opcode::SelfTest, &mut args), Status::Ok, "BAR0 mailbox still served");

    let mut ring = Ring::enable(&mut g, 4);
    let at = ring.put(&g, Opcode::SelfTest as u32, 42, block);
    ring.ring(&mut g, ring.tail);
    assert_eq!(wait_done(&g, at, 42), Status::Ok);
}

/// `--no-cmd-ring`: CAPS bit 16 clear, the ring registers ignored, no extra doorbell page.
#[test]
fn no_cmd_ring_clears_the_capability_and_ignores_the_registers() {
    let mut g = Gpu::start(&["--no-cmd-ring"]);
    assert!(!regs::CAPS(g.c.read32(pci::REGS_BAR, regs::CAPS::OFFSET)).cmd_ring());
    program(&mut g, 0x10000, 4);
    assert_eq!(g.c.read32(pci::REGS_BAR, regs::CMD_RING_CTRL::OFFSET), 0);
    assert_eq!(g.c.read32(pci::REGS_BAR, regs::CMD_RING_SIZE::OFFSET), 0);
    let mut with = Gpu::start(&[]);
    assert_eq!(with.c.read32(pci::REGS_BAR, regs::CMD_RING_SIZE::OFFSET), 0, "power-on value");
}

/// The test-only ring fault (`mailbox-stall` with `CMD_RING_FAULT_TOKEN`), which the guest's
/// fail-fast test (`stall::a_command_ring_fault_fails_the_command_at_once_and_the_device_recovers`)
/// relies on: after the NOTIFY, the next entry read is a counted ring error (`BadBase`) that
/// raises the mailbox interrupt and neither runs nor completes the entry; the injection is
/// spent, so ringing again runs it. Without the token (or the injection) the entry runs.
#[test]
fn an_injected_ring_fault_is_a_counted_ring_error_with_the_mailbox_interrupt() {
    let mut g = Gpu::start(&["--inject", "mailbox-stall"]);
    let p = g.process(1, 1);
    let mut q = g.queue(1, p, belfry_abi::engine::ENGINE_COMPUTE, 1, false);
    g.submit(&mut q, &pk::notify(regs::CMD_RING_FAULT_TOKEN));
    g.drain(&q);
    let mut ring = Ring::enable(&mut g, 4);
    let block = self_test_block(&mut g, 11);
    let at = ring.put(&g, Opcode::SelfTest as u32, 7, block);
    let mailbox_vector = belfry_abi::irq::vector_for(belfry_abi::irq::cause::MAILBOX, belfry_abi::irq::VECTOR_COUNT);
    let _ = g.interrupts(mailbox_vector);
    ring.ring(&mut g, ring.tail);
    let e = wait_errors(&mut g, 1);
    assert_eq!(e.last(), RingError::BadBase as u32, "the injected fault is a ring error");
    g.wait_for("the mailbox interrupt of the ring fault", || g.interrupts(mailbox_vector) > 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(read_u32(&g.ram, at + cmdring::DONE_SEQ_OFFSET), cmdring::NOT_DONE, "the faulted entry completed");
    assert_eq!(head(&mut g), 0, "the faulted entry was consumed");
    ring.ring(&mut g, ring.tail);
    assert_eq!(wait_done(&g, at, 7), Status::Ok, "the injection is spent: the entry runs when rung again");
    assert_eq!(ring_error(&mut g).count(), 1);
}

/// The command processor reads the ring's tail between entries while the driver's next
/// doorbell writes arrive, and the driver leaves once its entries are done: each look at the
/// tail is a `doorbell` record and the departure a `departure` record of the input log, so a
/// recording of a ring rung entry by entry (posted writes, not waiting) replays ten times out
/// of ten with the tails the run saw and the departure where the run had it.
#[test]
fn a_ring_rung_while_it_runs_replays_from_its_recording() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("device0.record");
    let mut g = Gpu::start(&["--record", log.to_str().unwrap()]);
    let mut ring = Ring::enable(&mut g, 64);
    let mut entries = Vec::new();
    for seq in 1..=48u32 {
        let block = self_test_block(&mut g, seq);
        entries.push((ring.put(&g, Opcode::SelfTest as u32, seq, block), seq));
        g.c.post_write32(pci::DOORBELL_BAR, pci::doorbell_offset(ring.doorbell) as u32, ring.tail);
    }
    for (at, seq) in entries {
        assert_eq!(wait_done(&g, at, seq), Status::Ok);
    }
    let Gpu { dev: mut device, c, .. } = g;
    drop(c);
    let status = device.wait_exit(Duration::from_secs(30)).expect("the device exits when its client leaves");
    assert!(status.success(), "{status}");
    common::in_process::replays_to_its_end(&log, 10);
}
