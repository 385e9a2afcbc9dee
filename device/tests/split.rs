//! VRAM and DMA-buffer splitting on the device, proven on the host through the real
//! `belfry-device` binary: COPY between system memory and VRAM (PTE_VRAM) in both directions,
//! the capabilities (`CAPS.no_context_save`, `SPLIT_INFO.slots`), `BIND_SLOT`/`SLOT_COPY`, and
//! the engine hold of a device without context save — the parts of a split DMA buffer
//! (`RING_FLAG_SPLIT_CONTINUES`) run back to back, another context never between them, a
//! paging queue (`QUEUE_FLAG_PAGING`) between them; the same submissions on a device with context
//! save interleave.
//!
//! Each test's doc names the rule ids of docs/RULES.md it proves (`proves:`).

mod common;

use std::os::unix::fs::FileExt;
use std::time::Duration;

use belfry_abi::engine::{FaultReason, QueueState, ENGINE_COMPUTE};
use belfry_abi::mailbox::{self, Opcode, Status};
use belfry_abi::packet::{self, Opcode as P};
use belfry_abi::ring::{RingEntry, RING_FLAG_SPLIT_CONTINUES};
use belfry_abi::{mmu, pci, regs};
use common::gpu::*;

/// How long a test watches for work that must not run.
const QUIET: Duration = Duration::from_millis(300);

/// A kernel-mode queue with `flags` (e.g. `QUEUE_FLAG_PAGING`) on a 16-entry ring.
fn kernel_queue(g: &mut Gpu, id: u32, p: Process, flags: u32) -> QueueRef {
    let (ring_va, ring_pa) = g.buffer(p, 1);
    let (control_va, control_pa) = g.buffer(p, 1);
    let mut a = to_bytes(&mailbox::CreateQueueArgs {
        id,
        context: p.context,
        engine: ENGINE_COMPUTE,
        priority: 1,
        flags,
        ring_entries: 16,
        ring_va,
        ring_control_va: control_va,
        ..Default::default()
    });
    g.ok(Opcode::CreateQueue, &mut a);
    QueueRef { id, process: p, ring_pa, control_pa, entries: 16, write_index: 0, doorbell: None, user_mode: false }
}

/// Appends `packets` as a command buffer whose ring entry carries `flags`, and notifies.
fn submit_flagged(g: &mut Gpu, q: &mut QueueRef, packets: &[u8], flags: u32) {
    let pages = (packets.len() as u64).div_ceil(mmu::PAGE_SIZE).max(1);
    let (va, pa) = g.buffer(q.process, pages);
    g.ram.write_all_at(packets, pa).unwrap();
    let slot = u64::from(q.write_index % q.entries);
    let entry = RingEntry { cmdbuf_va: va, size_bytes: packets.len() as u32, flags };
    g.ram.write_all_at(&to_bytes(&entry), q.ring_pa + slot * 16).unwrap();
    q.write_index = q.write_index.wrapping_add(1);
    g.ram.write_all_at(&q.write_index.to_le_bytes(), q.control_pa).unwrap();
    g.notify(q);
}

fn bind(slot: u32, va: u64, size: u64) -> Vec<u8> {
    let mut p = packet::BindSlot { slot, va, size, ..Default::default() };
    p.header = packet::header(P::BindSlot, P::BindSlot.dwords().unwrap() as u16);
    to_bytes(&p)
}

fn slot_copy(src_slot: u32, src_offset: u64, dst_slot: u32, dst_offset: u64, size: u32) -> Vec<u8> {
    let mut p = packet::SlotCopy { size, src_slot, dst_slot, src_offset, dst_offset, ..Default::default() };
    p.header = packet::header(P::SlotCopy, P::SlotCopy.dwords().unwrap() as u16);
    to_bytes(&p)
}

/// A queue's reported state and fault.
fn state(g: &mut Gpu, q: &QueueRef) -> (u32, u32) {
    let a = g.query(q.id);
    (a.state, a.fault_reason)
}

/// COPY moves data from system memory into VRAM and back through leaf entries with PTE_VRAM;
/// the CPU sees the VRAM copy through BAR4.
#[test]
fn copy_moves_data_between_system_memory_and_vram_both_ways() {
    let mut g = Gpu::start(&["--vram-size", "1M"]);
    let p = g.process(1, 1);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, false);
    let (src, src_pa) = g.buffer(p, 4);
    let (back, back_pa) = g.buffer(p, 4);
    let vram_va = 0x7000_0000;
    let vram_offset = 0x4000;
    for i in 0..4 {
        g.map(p.root, vram_va + i * 0x1000, vram_offset + i * 0x1000, mmu::PTE_WRITABLE | mmu::PTE_VRAM);
    }
    let data: Vec<u8> = (0..0x4000u32).map(|i| (i * 7 + 3) as u8).collect();
    g.ram.write_all_at(&data, src_pa).unwrap();
    g.submit(&mut q, &[pk::copy(src, vram_va, 0x4000), pk::copy(vram_va, back, 0x4000)].concat());
    g.drain(&q);
    assert_eq!(g.read_bytes(back_pa, 0x4000), data, "system → VRAM → system");
    let in_vram = g.c.region_read(pci::VRAM_BAR, vram_offset + 0x1ff0, 32).unwrap();
    assert_eq!(in_vram, data[0x1ff0..0x2010], "the data is in VRAM at the mapped offset");
    assert_eq!(g.c.region_read(pci::VRAM_BAR, vram_offset + 0x4000, 16).unwrap(), vec![0u8; 16], "nothing past it");
}

/// The capabilities report a device without context save and the slot count of the split
/// resource table (MaxAllocationListSlotId); the defaults report context save and 16 slots.
#[test]
fn capabilities_report_no_context_save_and_the_slot_count() {
    let mut g = Gpu::start(&["--no-context-save", "--bind-slots", "5"]);
    assert!(regs::CAPS(g.c.read32(pci::REGS_BAR, regs::CAPS::OFFSET)).no_context_save());
    assert_eq!(regs::SPLIT_INFO(g.c.read32(pci::REGS_BAR, regs::SPLIT_INFO::OFFSET)).slots(), 5);
    let mut d = Gpu::start(&[]);
    assert!(!regs::CAPS(d.c.read32(pci::REGS_BAR, regs::CAPS::OFFSET)).no_context_save());
    assert_eq!(regs::SPLIT_INFO(d.c.read32(pci::REGS_BAR, regs::SPLIT_INFO::OFFSET)).slots(), 16);
}

/// `SLOT_COPY` copies through the bindings of its own command buffer: a later buffer starts
/// with every slot unbound (the state a split part must bind again), and a slot past the
/// device's count or a range past a binding faults with BAD_PACKET.
#[test]
fn slot_copies_use_the_bindings_of_their_own_command_buffer() {
    let mut g = Gpu::start(&["--bind-slots", "4"]);
    let p = g.process(1, 1);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, false);
    let (a, a_pa) = g.buffer(p, 1);
    let (b, b_pa) = g.buffer(p, 1);
    g.ram.write_all_at(b"split points!", a_pa + 16).unwrap();
    g.submit(&mut q, &[bind(0, a, 0x1000), bind(3, b, 0x100), slot_copy(0, 16, 3, 32, 13)].concat());
    g.drain(&q);
    assert_eq!(g.read_bytes(b_pa + 32, 13), b"split points!");
    // The next buffer did not bind slot 0: the copy faults.
    g.submit(&mut q, &[bind(3, b, 0x100), slot_copy(0, 0, 3, 0, 4)].concat());
    g.wait_query("the unbound slot faults", q.id, |s| s.state == QueueState::Faulted as u32);
    assert_eq!(state(&mut g, &q).1, FaultReason::BadPacket as u32);

    for bad in [
        [bind(4, a, 0x1000), slot_copy(4, 0, 4, 8, 4)].concat(), // slot 4 of 4
        [bind(0, a, 0x10), bind(1, b, 0x100), slot_copy(0, 8, 1, 0, 16)].concat(), // past the binding
        [bind(0, a, 0x10), bind(0, 0, 0), slot_copy(0, 0, 0, 0, 4)].concat(), // unbound again
    ] {
        let mut g = Gpu::start(&["--bind-slots", "4"]);
        let p = g.process(1, 1);
        let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, false);
        let (a2, _) = g.buffer(p, 1);
        assert_eq!(a2, a, "the same layout as the first device");
        let _ = g.buffer(p, 1);
        g.submit(&mut q, &bad);
        g.wait_query("the bad slot faults", q.id, |s| s.state == QueueState::Faulted as u32);
        assert_eq!(state(&mut g, &q).1, FaultReason::BadPacket as u32);
    }
}

/// The split flag is the kernel's: a user-mode queue's ring entry carrying it faults with
/// BAD_RING, and a paging queue cannot be a user-mode queue.
#[test]
fn only_kernel_mode_queues_carry_split_parts_and_paging() {
    let mut g = Gpu::start(&[]);
    let p = g.process(1, 1);
    let mut a = to_bytes(&mailbox::CreateQueueArgs {
        id: 9,
        context: 1,
        engine: ENGINE_COMPUTE,
        flags: mailbox::QUEUE_FLAG_PAGING | mailbox::QUEUE_FLAG_USER_MODE_SUBMISSION,
        ring_entries: 16,
        ring_va: 0x10_0000,
        ring_control_va: 0x20_0000,
        ..Default::default()
    });
    assert_eq!(g.mailbox(Opcode::CreateQueue, &mut a), Status::BadArgument);
    let mut u = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    assert_eq!(g.connect(&mut u, 0), Status::Ok);
    let (d, _) = g.buffer(p, 1);
    submit_flagged(&mut g, &mut u, &pk::write32(d, 1), RING_FLAG_SPLIT_CONTINUES);
    g.wait_query("the flagged user-mode entry faults", u.id, |s| s.state == QueueState::Faulted as u32);
    assert_eq!(state(&mut g, &u).1, FaultReason::BadRing as u32);
}

/// Three contexts on one engine: the split queue A, another context's queue B and a paging
/// queue P; timestamps of A's two parts, B's buffer and P's buffer in the returned order
/// `(a1, a2, b, p)`, and whether B ran before A's last part was submitted.
fn split_with_another_context(flags: &[&str]) -> ([u64; 4], bool) {
    let mut g = Gpu::start(flags);
    let (pa, pb, pp) = (g.process(1, 1), g.process(2, 2), g.process(3, 3));
    let mut a = kernel_queue(&mut g, 1, pa, 0);
    let mut b = kernel_queue(&mut g, 2, pb, 0);
    let mut p = kernel_queue(&mut g, 3, pp, mailbox::QUEUE_FLAG_PAGING);
    let (ta, ta_pa) = g.buffer(pa, 1);
    let (tb, tb_pa) = g.buffer(pb, 1);
    let (tp, tp_pa) = g.buffer(pp, 1);
    // Part 1, with more to come.
    submit_flagged(&mut g, &mut a, &pk::timestamp(ta), RING_FLAG_SPLIT_CONTINUES);
    g.wait_for("part 1", || g.read_index(&a) == 1);
    // Another context submits while the memory manager prepares part 2.
    g.submit(&mut b, &pk::timestamp(tb));
    std::thread::sleep(QUIET);
    let b_between = g.read_index(&b) == 1;
    // The paging buffer between the parts.
    g.submit(&mut p, &pk::timestamp(tp));
    g.drain(&p);
    // Part 2, the last.
    g.submit(&mut a, &pk::timestamp(ta + 8));
    g.drain(&a);
    g.drain(&b);
    ([g.read_u64(ta_pa), g.read_u64(ta_pa + 8), g.read_u64(tb_pa), g.read_u64(tp_pa)], b_between)
}

/// proves: SPLIT-03, SPLIT-04 — on a device without context save, another context's buffer
/// submitted between the parts of a split buffer runs only after the last part, while a paging
/// buffer runs between the parts; with context save (the default) the other context runs
/// between the parts.
#[test]
fn split_parts_run_back_to_back_with_only_paging_between_them_without_context_save() {
    let ([a1, a2, b, p], b_between) = split_with_another_context(&["--no-context-save"]);
    assert!(!b_between, "another context ran between the parts");
    assert!(a1 < p && p < a2, "the paging buffer runs between the parts: {a1} {p} {a2}");
    assert!(a2 < b, "the other context runs after the last part: {a2} {b}");

    let ([a1, a2, b, _], b_between) = split_with_another_context(&[]);
    assert!(b_between && a1 < b && b < a2, "with context save the other context runs between: {a1} {b} {a2}");
}

/// Without context save a started command buffer runs to its end before another queue of the
/// engine runs (no 64-packet slices between contexts); with context save the two interleave.
#[test]
fn a_command_buffer_runs_to_its_end_without_context_save() {
    fn run(flags: &[&str]) -> (u64, u64, u64) {
        let mut g = Gpu::start(flags);
        let (pa, pb) = (g.process(1, 1), g.process(2, 2));
        let mut a = kernel_queue(&mut g, 1, pa, 0);
        let mut b = kernel_queue(&mut g, 2, pb, 0);
        let (ta, ta_pa) = g.buffer(pa, 1);
        let (tb, tb_pa) = g.buffer(pb, 1);
        let long: Vec<u8> = [pk::timestamp(ta)]
            .into_iter()
            .chain((0..30_000).map(|i| pk::write32(ta + 64 + (i % 64) * 4, i as u32)))
            .chain([pk::timestamp(ta + 8)])
            .collect::<Vec<_>>()
            .concat();
        let (bufa, bufa_pa) = g.buffer(pa, long.len().div_ceil(4096) as u64);
        g.ram.write_all_at(&long, bufa_pa).unwrap();
        let (bufb, bufb_pa) = g.buffer(pb, 1);
        g.ram.write_all_at(&pk::timestamp(tb), bufb_pa).unwrap();
        // Both rings are written before either queue is kicked, so both are ready at once.
        for (q, va, len) in [(&mut a, bufa, long.len()), (&mut b, bufb, 16)] {
            let entry = RingEntry { cmdbuf_va: va, size_bytes: len as u32, flags: 0 };
            g.ram.write_all_at(&to_bytes(&entry), q.ring_pa).unwrap();
            q.write_index = 1;
            g.ram.write_all_at(&1u32.to_le_bytes(), q.control_pa).unwrap();
        }
        g.notify(&a);
        g.notify(&b);
        g.drain(&a);
        g.drain(&b);
        (g.read_u64(ta_pa), g.read_u64(ta_pa + 8), g.read_u64(tb_pa))
    }
    let (start, end, other) = run(&["--no-context-save", "--hang-timeout-ms", "20000"]);
    assert!(other < start || other > end, "another queue ran inside the buffer: {start} {other} {end}");
    let (start, end, other) = run(&["--hang-timeout-ms", "20000"]);
    assert!(start < other && other < end, "with context save the slices interleave: {start} {other} {end}");
}
