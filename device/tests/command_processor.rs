//! The command processor proven on the host: page tables, rings and packets built in memfd
//! guest RAM, programmed through the mailbox over vfio-user, results checked in memory, fence
//! values, log entries, interrupt records and counted interrupt eventfds.
//!
//! Each test's doc names the rule ids of docs/RULES.md it proves (`proves:`);
//! `ci/rules` lists them.

mod common;

use std::time::Duration;

use belfry_abi::engine::{EngineState, FaultReason, QueueState, ENGINE_COMPUTE, ENGINE_COPY};
use belfry_abi::fence::{LogKind, LogOperation};
use belfry_abi::irq::{self, RecordKind};
use belfry_abi::mailbox::{self, Opcode, Status};
use belfry_abi::packet::{ComputeOp, NO_LOG};
use belfry_abi::{mmu, regs};
use common::gpu::*;
use common::read_u32;
use std::os::unix::fs::FileExt;

/// The fault reason a `QUERY_QUEUE` word names, decoded as the library and the trace tools decode
/// it: every reason the device writes must convert.
fn reason(word: u32) -> Result<FaultReason, belfry_abi::wire_enum::UnknownValue> {
    FaultReason::try_from(word)
}

const V_FENCE: u16 = irq::VECTOR_FENCE;

/// Every data packet does what it says: WRITE_DATA32/64, WRITE_TIMESTAMP, COPY, FILL, COMPUTE
/// (integer and float), NOP and JUMP chaining.
#[test]
fn every_data_packet_executes() {
    let mut g = Gpu::start(&[]);
    let p = g.process(1, 1);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    assert_eq!(g.connect(&mut q, 0), Status::Ok);
    let (buf, buf_pa) = g.buffer(p, 4);
    let (a, a_pa) = (buf, buf_pa);
    let (b, b_pa) = (buf + 0x1000, buf_pa + 0x1000);
    let (dst, dst_pa) = (buf + 0x2000, buf_pa + 0x2000);
    let xs: Vec<u32> = (0..256).collect();
    let ys: Vec<f32> = (0..256).map(|i| i as f32 * 0.5).collect();
    g.ram.write_all_at(&xs.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(), a_pa).unwrap();
    g.ram.write_all_at(&xs.iter().flat_map(|x| (x * 3).to_le_bytes()).collect::<Vec<_>>(), b_pa).unwrap();
    let mut cmds = [
        pk::nop(3),
        pk::write32(dst + 0x800, 0xdead_beef),
        pk::write64(dst + 0x808, 0x0123_4567_89ab_cdef),
        pk::timestamp(dst + 0x810),
        pk::fill(dst + 0xc00, 0x5a5a_a5a5, 64),
    ]
    .concat();
    // JUMP into a second buffer holding the compute and copy work.
    let second = [pk::compute(ComputeOp::AddU32, a, b, dst, 256, 0), pk::copy(a, buf + 0x3000, 1024)].concat();
    let (second_va, second_pa) = g.buffer(p, 1);
    g.ram.write_all_at(&second, second_pa).unwrap();
    cmds.extend(pk::jump(second_va, second.len() as u32));
    cmds.extend(pk::write32(dst + 0x900, 1)); // skipped: after the jump
    g.submit(&mut q, &cmds);
    g.drain(&q);
    assert_eq!(read_u32(&g.ram, dst_pa + 0x800), 0xdead_beef);
    assert_eq!(g.read_u64(dst_pa + 0x808), 0x0123_4567_89ab_cdef);
    assert!(g.read_u64(dst_pa + 0x810) > 0, "timestamp written");
    assert!(g.read_bytes(dst_pa + 0xc00, 64).chunks(4).all(|c| c == 0x5a5a_a5a5u32.to_le_bytes()));
    assert_eq!(read_u32(&g.ram, dst_pa + 0x900), 0, "packets after a JUMP do not run");
    for i in [0u64, 7, 255] {
        assert_eq!(read_u32(&g.ram, dst_pa + i * 4), (i * 4) as u32, "a + b at {i}");
        assert_eq!(read_u32(&g.ram, buf_pa + 0x3000 + i * 4), i as u32, "copy at {i}");
    }
    // Float SAXPY and integer multiply.
    g.ram.write_all_at(&ys.iter().flat_map(|y| y.to_le_bytes()).collect::<Vec<_>>(), b_pa).unwrap();
    let xf: Vec<f32> = (0..256).map(|i| i as f32).collect();
    g.ram.write_all_at(&xf.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(), a_pa).unwrap();
    g.submit(&mut q, &pk::compute(ComputeOp::SaxpyF32, a, b, dst, 256, 2.0f32.to_bits()));
    g.drain(&q);
    for i in [1u64, 100] {
        let got = f32::from_bits(read_u32(&g.ram, dst_pa + i * 4));
        assert_eq!(got, 2.0 * i as f32 + i as f32 * 0.5);
    }
    assert_eq!(g.interrupts(V_FENCE), 0);
}

/// proves: NF-01, MV-08, MV-06 — a GPU wait on one engine is released by another engine's
/// signal with no CPU interrupt and no mailbox command in between.
#[test]
fn gpu_wait_released_by_another_queue_without_cpu_interrupts() {
    let mut g = Gpu::start(&[]);
    let p = g.process(1, 1);
    let f = g.native_fence(7, p);
    let (out, out_pa) = g.buffer(p, 1);
    let mut waiter = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    let mut signaler = g.queue(2, p, ENGINE_COPY, 1, true);
    g.connect(&mut waiter, 0);
    g.connect(&mut signaler, 1);
    g.submit(&mut waiter, &[pk::wait(f.va, 5, NO_LOG), pk::write32(out, 42)].concat());
    g.wait_query("the waiter to block", 1, |st| st.state == QueueState::Waiting as u32);
    assert_eq!(read_u32(&g.ram, out_pa), 0, "blocked before the signal");
    g.submit(&mut signaler, &pk::signal(f.va, 5, NO_LOG));
    g.drain(&signaler);
    g.drain(&waiter);
    assert_eq!(read_u32(&g.ram, out_pa), 42);
    assert_eq!(g.read_u64(f.current_pa), 5);
    assert_eq!(g.interrupts(V_FENCE), 0, "no CPU interrupt for a GPU-only signal/wait");
    assert!(g.new_records().is_empty());
}

/// proves: MV-06, IRQ-02, IRQ-03 (device side), IRQ-07, MV-04 — a signal interrupts only when it
/// exceeds MonitoredValue; the record names exactly the global fence handle.
#[test]
fn conditional_interrupts_follow_monitored_value() {
    let mut g = Gpu::start(&[]);
    let p = g.process(1, 1);
    let f = g.native_fence(0x51, p);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    g.connect(&mut q, 0);
    g.submit(&mut q, &pk::signal(f.va, 1, NO_LOG));
    g.drain(&q);
    assert_eq!(g.interrupts(V_FENCE), 0, "MonitoredValue UINT64_MAX: nobody waits");
    assert_eq!(g.update_monitored(&[(f.handle, 4)]), Status::Ok); // a waiter for 5
    assert_eq!(g.read_u64(f.monitored_pa), 4, "the CMP writes exactly the value given");
    g.submit(&mut q, &pk::signal(f.va, 4, NO_LOG));
    g.drain(&q);
    assert_eq!(g.interrupts(V_FENCE), 0, "4 is not above MonitoredValue 4");
    g.submit(&mut q, &pk::signal(f.va, 5, NO_LOG));
    g.drain(&q);
    g.wait_for("fence interrupt", || g.interrupts(V_FENCE) > 0);
    let recs = g.new_records();
    assert_eq!(recs.len(), 1);
    assert_eq!((recs[0].kind, recs[0].fence, recs[0].value), (RecordKind::NativeFenceSignaled as u32, 0x51, 5));
    assert_eq!(recs[0].queue, irq::NONE);
}

/// proves: IRQ-03 (device side) — a fence the driver unregistered is never named in a record: a
/// waiter had set its MonitoredValue to 4, it is unregistered, and a signal of 5 at its address
/// posts nothing (the NOTIFY behind the signal arrives alone).
#[test]
fn an_unregistered_fence_is_never_named_in_a_record() {
    let mut g = Gpu::start(&[]);
    let p = g.process(1, 1);
    let f = g.native_fence(0x52, p);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    g.connect(&mut q, 0);
    assert_eq!(g.update_monitored(&[(f.handle, 4)]), Status::Ok);
    let mut args = to_bytes(&mailbox::FenceHandleArgs { handle: f.handle, ..Default::default() });
    assert_eq!(g.mailbox(Opcode::UnregisterFence, &mut args), Status::Ok);
    g.submit(&mut q, &[pk::signal(f.va, 5, NO_LOG), pk::notify(7)].concat());
    g.drain(&q);
    g.wait_for("the NOTIFY's interrupt", || g.interrupts(V_FENCE) > 0);
    let recs = g.new_records();
    assert_eq!(g.read_u64(f.current_pa), 5, "the signal ran");
    assert!(recs.iter().all(|r| r.fence != f.handle), "a record names the unregistered fence: {recs:?}");
    assert!(recs.iter().any(|r| r.kind == RecordKind::Notify as u32), "no NOTIFY record: {recs:?}");
}

/// proves: RACE-02, MV-03, MV-09 — a MonitoredValue update (batched) that finds CurrentValue
/// already above it interrupts at once.
#[test]
fn monitored_value_update_catches_an_earlier_signal() {
    let mut g = Gpu::start(&[]);
    let p = g.process(1, 1);
    let f1 = g.native_fence(1, p);
    let f2 = g.native_fence(2, p);
    g.write_u64(f1.current_pa, 10);
    g.write_u64(f2.current_pa, 3);
    assert_eq!(g.update_monitored(&[(f1.handle, 9), (f2.handle, 9)]), Status::Ok);
    g.wait_for("interrupt", || !g.read_bytes(0x2000, 4).iter().all(|&b| b == 0));
    let recs = g.new_records();
    assert_eq!(recs.len(), 1, "only the fence whose CurrentValue exceeds MonitoredValue: {recs:?}");
    assert_eq!(recs[0].fence, 1);
    assert_eq!(g.read_u64(f2.monitored_pa), 9);
    assert_eq!(g.update_monitored(&[(0x999, 1)]), Status::BadObject, "unknown fence refused");
}

/// Races GPU signals against CMP MonitoredValue updates: in each round a CPU waiter sets
/// MonitoredValue = target − 1 while the engine signals past the target. The engine's signals
/// are held behind a GPU wait on a gate fence that a helper thread opens 2 ms after the update
/// is submitted, so they land while the CMP is applying it. Returns the number of rounds in
/// which no interrupt record named the fence (a CPU waiter that would never wake), and of those
/// in which, besides, the CPU read a satisfying CurrentValue right after the update returned:
/// a value no interrupt decision against the new MonitoredValue accounted for (RACE-05).
fn lost_wakeups(flags: &[&str], rounds: u64) -> (u64, u64) {
    let mut g = Gpu::start(flags);
    let p = g.process(1, 1);
    let f = g.native_fence(9, p);
    let gate = g.native_fence(10, p);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    g.connect(&mut q, 0);
    let (mut lost, mut unaccounted) = (0, 0);
    let mut value = 0u64;
    for round in 1..=rounds {
        let target = value + 2;
        let signals: Vec<u8> = (value + 1..=value + 3).flat_map(|v| pk::signal(f.va, v, NO_LOG)).collect();
        g.enqueue(&mut q, &[pk::wait(gate.va, round, NO_LOG), signals].concat());
        g.notify(&q);
        let ram = g.ram.try_clone().unwrap();
        let gate_pa = gate.current_pa;
        let opener = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(2));
            ram.write_all_at(&round.to_le_bytes(), gate_pa).unwrap();
        });
        assert_eq!(g.update_monitored(&[(f.handle, target - 1)]), Status::Ok);
        let seen = g.read_u64(f.current_pa);
        opener.join().unwrap();
        g.drain(&q);
        value += 3;
        if !g.new_records().iter().any(|r| r.fence == f.handle) {
            lost += 1;
            if seen >= target {
                unaccounted += 1;
            }
        }
        // The waiter is satisfied: nobody waits.
        assert_eq!(g.update_monitored(&[(f.handle, u64::MAX)]), Status::Ok);
    }
    (lost, unaccounted)
}

/// proves: RACE-01 (device side), RACE-03 (device side), RACE-05 (device side), RACE-08 (device side), LOG-12 —
/// bounded stress: MonitoredValue updates racing engine signals never lose a wake-up; the same test against a test-only device mode
/// that drops the barrier (and widens the window) does lose them, so the test can fail. RACE-05:
/// with the barrier, every CurrentValue the CPU reads once the update returned was either seen
/// by the update or written by a signal that compared it with the new MonitoredValue (either
/// way a record names the fence); without it, the CPU reads a satisfying value written by a
/// signal that saw the old MonitoredValue, and no record ever names it.
#[test]
fn monitored_value_updates_racing_signals_never_lose_a_wakeup() {
    let with_barrier = lost_wakeups(&[], 60);
    let without = lost_wakeups(&["--inject", "skip-monitored-barrier"], 60);
    eprintln!(
        "lost wake-ups (unaccounted values read after the update) in 60 rounds: {with_barrier:?} with the \
         barrier, {without:?} without"
    );
    assert_eq!(with_barrier, (0, 0), "no lost wake-up with the barrier");
    assert!(without.0 > 0, "the stress test detects a dropped barrier");
    assert!(without.1 > 0, "the CPU reads a value no decision against the new MonitoredValue saw");
}

/// The test-only record faults the guest suite's RACE-06/RACE-07 tests rely on, and the
/// register that shows them: an update finding CurrentValue past posts no record, one finding
/// no interrupt due posts one.
#[test]
fn test_injections_are_shown_and_change_only_the_update_s_record() {
    let mut g = Gpu::start(&[]);
    assert_eq!(g.c.read32(0, regs::TEST_INJECTIONS::OFFSET), 0, "a normal device shows no injection");
    drop(g);
    let mut g = Gpu::start(&["--inject", "no-catch-up-record", "--inject", "spurious-fence-records"]);
    let shown = regs::TEST_INJECTIONS(g.c.read32(0, regs::TEST_INJECTIONS::OFFSET));
    assert!(shown.no_catch_up_record() && shown.spurious_fence_records());
    assert!(!shown.slow_monitored_updates() && !shown.skip_monitored_barrier());
    let p = g.process(1, 1);
    let f = g.native_fence(0x61, p);
    g.write_u64(f.current_pa, 10);
    assert_eq!(g.update_monitored(&[(f.handle, 9)]), Status::Ok);
    assert_eq!(g.read_u64(f.monitored_pa), 9, "the update is applied");
    assert_eq!(g.update_monitored(&[(f.handle, 20)]), Status::Ok);
    g.wait_for("the spurious record", || g.interrupts(V_FENCE) > 0);
    let recs = g.new_records();
    assert_eq!(recs.len(), 1, "only the update with no interrupt due posts a record: {recs:?}");
    assert_eq!((recs[0].fence, recs[0].value), (0x61, 10));
}

/// The test-only fault the guest suite's sleeping-wait tests rely on: with
/// `no-fence-interrupts` (shown in `TEST_INJECTIONS`) a signal past MonitoredValue, a
/// MonitoredValue update finding CurrentValue past it and a monitored-fence signal post no
/// record and raise no interrupt, while the mailbox keeps completing and an engine fault still
/// posts its record.
#[test]
fn no_fence_interrupts_drops_only_fence_records() {
    let mut g = Gpu::start(&["--inject", "no-fence-interrupts"]);
    let shown = regs::TEST_INJECTIONS(g.c.read32(0, regs::TEST_INJECTIONS::OFFSET));
    assert!(shown.no_fence_interrupts() && !shown.no_catch_up_record() && !shown.spurious_fence_records());
    let p = g.process(1, 1);
    let f = g.native_fence(0x71, p);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    g.connect(&mut q, 0);
    assert_eq!(g.update_monitored(&[(f.handle, 4)]), Status::Ok); // a waiter for 5
    g.submit(&mut q, &pk::signal(f.va, 5, NO_LOG));
    g.drain(&q);
    assert_eq!(g.read_u64(f.current_pa), 5, "the GPU wrote the value");
    assert_eq!(g.update_monitored(&[(f.handle, 4)]), Status::Ok, "the mailbox still completes");
    let (fence_va, fence_pa) = g.buffer(p, 1);
    let mut kq = g.queue(2, p, ENGINE_COMPUTE, 1, false);
    g.submit(&mut kq, &pk::monitored_signal(fence_va, 1));
    g.drain(&kq);
    assert_eq!(g.read_u64(fence_pa), 1, "the monitored fence is written");
    assert!(g.new_records().is_empty(), "no fence record was posted");
    assert_eq!(g.interrupts(V_FENCE), 0, "no fence interrupt was raised");
    g.submit(&mut q, &pk::monitored_signal(fence_va, 2));
    g.wait_query("fault", 1, |st| st.state == QueueState::Faulted as u32);
    g.wait_for("the fault interrupt", || g.interrupts(irq::VECTOR_FAULT) > 0);
    let recs = g.new_records();
    assert!(recs.iter().any(|r| r.kind == RecordKind::ContextFault as u32), "the fault record still comes: {recs:?}");
    assert!(recs.iter().all(|r| r.kind != RecordKind::MonitoredFenceSignaled as u32));
}

/// proves: IRQ-09, IRQ-10, IRQ-11, CAP-09, IRQ-04, IRQ-06 (device side) — the optimized form names the
/// hardware queue instead of fences (and is advertised), and a NULL queue when the CMP itself
/// raised it (no queue executing); a device that cannot tell sends a NULL fence with
/// evaluate-legacy.
#[test]
fn per_queue_and_scan_all_interrupt_forms() {
    for (form, expect_queue) in [("per-queue", true), ("scan-all", false)] {
        let mut g = Gpu::start(&["--interrupt-form", form]);
        let caps = regs::CAPS(g.c.read32(0, regs::CAPS::OFFSET));
        assert_eq!(caps.optimized_interrupt(), expect_queue);
        let p = g.process(1, 1);
        let f = g.native_fence(3, p);
        let mut q = g.queue(4, p, ENGINE_COMPUTE, 1, true);
        g.connect(&mut q, 0);
        g.update_monitored(&[(f.handle, 0)]);
        g.submit(&mut q, &pk::signal(f.va, 1, NO_LOG));
        g.drain(&q);
        let recs = g.new_records();
        assert_eq!(recs.len(), 1, "{form}");
        assert_eq!(recs[0].fence, 0, "{form}: no fence handle");
        if expect_queue {
            assert_eq!((recs[0].queue, recs[0].detail & irq::DETAIL_PER_QUEUE), (4, irq::DETAIL_PER_QUEUE));
            // A MonitoredValue update that finds the fence already above: no queue to name.
            g.update_monitored(&[(f.handle, 0)]);
            let recs = g.new_records();
            assert_eq!((recs.len(), recs[0].queue, recs[0].fence), (1, irq::NONE, 0));
            assert_eq!(recs[0].detail & irq::DETAIL_PER_QUEUE, irq::DETAIL_PER_QUEUE);
        } else {
            assert_eq!((recs[0].queue, recs[0].detail), (irq::NONE, irq::DETAIL_EVALUATE_LEGACY));
        }
    }
}

/// proves: IRQ-04 — in the per-queue form, a queue whose signal log wrapped since its last
/// record (more entries than the log holds) gets a scan-all record instead: the device cannot
/// tell which signals the driver missed. Fewer entries keep the per-queue form.
#[test]
fn per_queue_records_fall_back_to_scan_all_when_the_log_wrapped() {
    let mut g = Gpu::start(&["--interrupt-form", "per-queue"]);
    let p = g.process(1, 1);
    let f = g.native_fence(8, p);
    let mut q = g.queue(3, p, ENGINE_COMPUTE, 1, true);
    g.connect(&mut q, 0);
    g.log_buffer(&q, LogKind::Signals);
    let mut value = 0u64;
    for (count, wrapped) in [(10u32, false), (log_entries() + 6, true)] {
        // A CPU waiter far ahead: the signals below stay under MonitoredValue.
        let waiter = value + 100_000;
        g.update_monitored(&[(f.handle, waiter - 1)]);
        let mut entry = 0;
        let below: Vec<u8> = (1..=count)
            .flat_map(|i| {
                entry = i;
                pk::signal(f.va, value + u64::from(i), i)
            })
            .collect();
        g.submit(&mut q, &below);
        g.drain(&q);
        assert!(g.new_records().is_empty(), "below MonitoredValue: no record");
        value = waiter;
        g.submit(&mut q, &pk::signal(f.va, value, entry + 1));
        g.drain(&q);
        let recs = g.new_records();
        assert_eq!(recs.len(), 1);
        if wrapped {
            assert_eq!((recs[0].queue, recs[0].fence, recs[0].detail), (irq::NONE, 0, irq::DETAIL_EVALUATE_LEGACY));
        } else {
            assert_eq!((recs[0].queue, recs[0].detail), (3, irq::DETAIL_PER_QUEUE));
        }
    }
}

/// proves: IRQ-10 — a per-queue record names its own signal's entry in the queue's signal log
/// (the free-running index, in `address`), so the driver never takes another entry with the
/// same value for it; a signal the log does not record as this fence's — not logged, or logged
/// under another handle — names none (`NO_LOG`), and the driver examines every wait.
#[test]
fn per_queue_records_name_their_signals_log_entry() {
    let mut g = Gpu::start(&["--interrupt-form", "per-queue"]);
    let p = g.process(1, 1);
    let (a, progress) = (g.native_fence(0x30, p), g.native_fence(0x40, p));
    let mut q = g.queue(3, p, ENGINE_COMPUTE, 1, true);
    g.connect(&mut q, 0);
    g.log_buffer(&q, LogKind::Signals);
    // Progress to 2 at entry 5 with nobody waiting: no record, the entry stays.
    g.submit(&mut q, &pk::signal_as(progress.va, 2, 5, progress.handle));
    g.drain(&q);
    assert!(g.new_records().is_empty(), "no waiter on progress: no record");
    // Waiters on a ≥ 2 and progress ≥ 3; a is signaled without a log entry, progress logged.
    g.update_monitored(&[(a.handle, 1), (progress.handle, 2)]);
    let mut cmds = pk::signal_as(a.va, 2, NO_LOG, a.handle);
    cmds.extend(pk::signal_as(progress.va, 3, 6, progress.handle));
    g.submit(&mut q, &cmds);
    g.drain(&q);
    let recs: Vec<(u32, u64, u64)> = g.new_records().iter().map(|r| (r.queue, r.value, r.address)).collect();
    assert_eq!(recs, [(3, 2, u64::from(NO_LOG)), (3, 3, 6)], "(queue, value, log index) of each record");
    // Logged under another fence's handle: the log does not record a's signal.
    g.update_monitored(&[(a.handle, 2)]);
    g.submit(&mut q, &pk::signal_as(a.va, 3, 7, progress.handle));
    g.drain(&q);
    let recs: Vec<(u32, u64, u64)> = g.new_records().iter().map(|r| (r.queue, r.value, r.address)).collect();
    assert_eq!(recs, [(3, 3, u64::from(NO_LOG))]);
    // Logged as its own: named.
    g.update_monitored(&[(a.handle, 3)]);
    g.submit(&mut q, &pk::signal_as(a.va, 4, 8, a.handle));
    g.drain(&q);
    let recs: Vec<(u32, u64, u64)> = g.new_records().iter().map(|r| (r.queue, r.value, r.address)).collect();
    assert_eq!(recs, [(3, 4, 8)]);
}

/// proves: IRQ-13 (device side) — the queue-array form (advertised, and neither of the other
/// optimized forms' bits): one record names every queue whose signal log got entries since the
/// last record, coalesced (a queue that signalled with nobody waiting is named by the next
/// record of another queue), in the record's array; a signal whose own entry is not in its log,
/// or more queues than one record holds, get the scan-all record instead.
#[test]
fn queue_array_records_name_every_queue_with_new_signal_entries() {
    let mut g = Gpu::start(&["--interrupt-form", "queue-array"]);
    let caps = regs::CAPS(g.c.read32(0, regs::CAPS::OFFSET));
    assert!(caps.queue_array_interrupt() && !caps.optimized_interrupt() && !caps.fence_handle_records());
    let p = g.process(1, 1);
    let f = g.native_fence(0x50, p);
    let ids = [3u32, 4, 5, 6, 7, 8, 9];
    let mut queues: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(doorbell, &id)| {
            let mut q = g.queue(id, p, ENGINE_COMPUTE, 1, true);
            g.connect(&mut q, u32::try_from(doorbell).unwrap());
            g.log_buffer(&q, LogKind::Signals);
            q
        })
        .collect();
    // The fence's value so far; each signal raises it by one.
    let value = std::cell::Cell::new(0u64);
    let signal = |g: &mut Gpu, q: &mut QueueRef, entry: u32, handle: u64| {
        value.set(value.get() + 1);
        g.submit(q, &pk::signal_as(f.va, value.get(), entry, handle));
        g.drain(q);
    };
    // A waiter for the next signal (the device interrupts above MonitoredValue).
    let arm = |g: &mut Gpu| {
        g.update_monitored(&[(f.handle, value.get())]);
    };
    // Queue 4 signals with nobody waiting: logged, no record.
    g.update_monitored(&[(f.handle, 1_000)]);
    signal(&mut g, &mut queues[1], 0, f.handle);
    assert!(g.new_records().is_empty(), "no waiter: no record");
    // Queue 3 signals past a waiter, logged as its own: one record naming queues 3 and 4.
    arm(&mut g);
    signal(&mut g, &mut queues[0], 0, f.handle);
    let recs = g.new_records();
    assert_eq!(recs.len(), 1, "{recs:?}");
    let (words, n) = irq::queue_array(&recs[0]).expect("a queue-array record");
    assert_eq!(&words[..n], &[3, 4], "the queues with new signal entries, coalesced");
    assert_eq!((recs[0].engine, recs[0].context), (ENGINE_COMPUTE, irq::NONE));
    // Named once: the next record names only the queue that signalled since.
    arm(&mut g);
    signal(&mut g, &mut queues[0], 1, f.handle);
    let (words, n) = irq::queue_array(&g.new_records()[0]).expect("a queue-array record");
    assert_eq!(&words[..n], &[3]);
    // A signal logged under another handle: its own entry is not in the log, scan-all.
    arm(&mut g);
    signal(&mut g, &mut queues[0], 2, 0x99);
    let recs = g.new_records();
    assert_eq!(
        (recs.len(), recs[0].queue, recs[0].fence, recs[0].detail),
        (1, irq::NONE, 0, irq::DETAIL_EVALUATE_LEGACY)
    );
    // Seven queues with new entries do not fit one record: scan-all.
    g.update_monitored(&[(f.handle, 1_000)]);
    for q in &mut queues[1..] {
        signal(&mut g, q, 1, f.handle);
    }
    assert!(g.new_records().is_empty());
    arm(&mut g);
    signal(&mut g, &mut queues[0], 3, f.handle);
    let recs = g.new_records();
    assert_eq!(
        (recs.len(), recs[0].queue, recs[0].fence, recs[0].detail),
        (1, irq::NONE, 0, irq::DETAIL_EVALUATE_LEGACY)
    );
    // The scan-all record named them all: six queues next time fit again.
    g.update_monitored(&[(f.handle, 1_000)]);
    for q in &mut queues[2..] {
        signal(&mut g, q, 2, f.handle);
    }
    arm(&mut g);
    signal(&mut g, &mut queues[1], 2, f.handle);
    let (words, n) = irq::queue_array(&g.new_records()[0]).expect("a queue-array record");
    assert_eq!(&words[..n], &ids[1..]);
}

/// proves: LOG-06, LOG-07, LOG-08, LOG-09, LOG-11, LOG-14, LOG-17, LOG-18 (device side), LOG-19 (device side) —
/// signal and wait log entries with their operations and timestamps, End > Observed for a wait released
/// later, FirstFreeEntryIndex advancing and WraparoundCount counting overflow without stalling
/// the queue, and logging moving to a re-created buffer. LOG-18 and LOG-19 on the device side
/// only: timestamps never go back and both log types are always written; the module's accepting
/// a zero or repeated timestamp, and its always enabling both logs, are not tested here.
#[test]
fn fence_logs_record_operations_and_wrap() {
    let mut g = Gpu::start(&[]);
    let p = g.process(1, 1);
    let f = g.native_fence(5, p);
    let mut waiter = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    let mut signaler = g.queue(2, p, ENGINE_COPY, 1, true);
    g.connect(&mut waiter, 0);
    g.connect(&mut signaler, 1);
    let wait_log = g.log_buffer(&waiter, LogKind::Waits);
    let signal_log = g.log_buffer(&signaler, LogKind::Signals);
    assert_eq!(g.log_header(wait_log).entry_count, log_entries());
    g.submit(&mut waiter, &pk::wait(f.va, 1, 0));
    g.wait_query("the waiter to block", 1, |st| st.state == QueueState::Waiting as u32);
    g.submit(&mut signaler, &pk::signal(f.va, 1, 0));
    g.drain(&signaler);
    g.drain(&waiter);
    let s = g.log_entry(signal_log, 0);
    assert_eq!((s.fence_handle, s.value, s.operation), (0xf00d_0001, 1, LogOperation::SignalExecuted as u32));
    assert!(s.end_gpu_timestamp > 0);
    let w = g.log_entry(wait_log, 0);
    assert_eq!((w.fence_handle, w.value, w.operation), (0xbeef_0001, 1, LogOperation::WaitUnblocked as u32));
    assert!(w.end_gpu_timestamp > w.observed_gpu_timestamp, "released later: End > Observed");
    assert!(w.end_gpu_timestamp >= s.end_gpu_timestamp, "unblocked after the signal executed");
    assert_eq!(g.log_header(signal_log).first_free_entry_index, 1);
    // Fill past the end: entries wrap and WraparoundCount counts it; timestamps never go back.
    let n = log_entries() + 5;
    let signals: Vec<u8> = (1..n).flat_map(|i| pk::signal(f.va, 1 + i as u64, i)).collect();
    g.submit(&mut signaler, &signals);
    g.drain(&signaler);
    let h = g.log_header(signal_log);
    assert_eq!((h.first_free_entry_index, h.wraparound_count), (n % log_entries(), 1));
    let mut last = 0;
    for i in log_entries()..n {
        let e = g.log_entry(signal_log, i);
        assert_eq!(e.value, 1 + i as u64, "entry {i} overwritten by the wrapped write");
        assert!(e.end_gpu_timestamp > last, "timestamps strictly increase across work");
        last = e.end_gpu_timestamp;
    }
    assert_eq!(g.read_u64(f.current_pa), n as u64, "value written before its log entry (LOG-11)");
    assert_eq!(g.object(Opcode::FlushLogs, 2), Status::Ok);
    // The OS re-creates the signal log: logging continues in the new buffer only.
    let new_log = g.log_buffer(&signaler, LogKind::Signals);
    g.submit(&mut signaler, &pk::signal(f.va, 5000, 0));
    g.drain(&signaler);
    assert_eq!(g.log_entry(new_log, 0).value, 5000);
    assert_eq!(g.log_header(new_log).first_free_entry_index, 1);
    assert_ne!(g.log_entry(signal_log, 0).value, 5000, "the old buffer is no longer written");
}

/// proves: LOG-20 (device side) — verbose fence logging: a wait carrying
/// `FENCE_WAIT_LOG_BEGIN` gets a `WAIT_BEGIN` entry at its first index and `WAIT_UNBLOCKED` at
/// the next only while `LOG_VERBOSE` is on; with it off the reserved slot is written empty, and
/// a wait without the flag is logged as always whatever the switch says.
#[test]
fn verbose_wait_entries_appear_only_while_log_verbose_is_on() {
    let mut g = Gpu::start(&[]);
    assert!(regs::CAPS(g.c.read32(0, regs::CAPS::OFFSET)).verbose_log());
    let p = g.process(1, 1);
    let f = g.native_fence(5, p);
    let mut waiter = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    let mut signaler = g.queue(2, p, ENGINE_COPY, 1, true);
    g.connect(&mut waiter, 0);
    g.connect(&mut signaler, 1);
    let wait_log = g.log_buffer(&waiter, LogKind::Waits);
    // On: WAIT_BEGIN when the engine meets the blocked wait, WAIT_UNBLOCKED after it.
    g.set_log_verbose(true);
    assert!(regs::LOG_VERBOSE(g.c.read32(0, regs::LOG_VERBOSE::OFFSET)).enable());
    g.submit(&mut waiter, &pk::wait_verbose(f.va, 1, 0));
    g.wait_query("the waiter to block", 1, |st| st.state == QueueState::Waiting as u32);
    let b = g.log_entry(wait_log, 0);
    assert_eq!((b.fence_handle, b.value, b.operation), (0xbeef_0001, 1, LogOperation::WaitBegin as u32));
    assert_eq!(g.log_header(wait_log).first_free_entry_index, 1, "WAIT_BEGIN written while blocked");
    g.submit(&mut signaler, &pk::signal(f.va, 1, 0));
    g.drain(&signaler);
    g.drain(&waiter);
    let u = g.log_entry(wait_log, 1);
    assert_eq!((u.value, u.operation), (1, LogOperation::WaitUnblocked as u32));
    assert!(u.end_gpu_timestamp > b.end_gpu_timestamp, "unblocked after it began");
    assert_eq!(u.observed_gpu_timestamp, b.observed_gpu_timestamp, "both name the first sight");
    assert_eq!(g.log_header(wait_log).first_free_entry_index, 2);
    // A wait without the flag: one entry, as always.
    g.submit(&mut waiter, &pk::wait(f.va, 1, 2));
    g.drain(&waiter);
    assert_eq!(g.log_entry(wait_log, 2).operation, LogOperation::WaitUnblocked as u32);
    // Off: the reserved slot is written empty, the unblock goes to the next one.
    g.set_log_verbose(false);
    g.submit(&mut waiter, &pk::wait_verbose(f.va, 1, 3));
    g.drain(&waiter);
    assert_eq!(g.log_entry(wait_log, 3), belfry_abi::fence::LogEntry::default(), "no WAIT_BEGIN while off");
    assert_eq!(g.log_entry(wait_log, 4).operation, LogOperation::WaitUnblocked as u32);
    assert_eq!(g.log_header(wait_log).first_free_entry_index, 5);
    // A reset turns it off.
    g.set_log_verbose(true);
    g.c.write32(0, regs::CONTROL::OFFSET, regs::CONTROL::default().with_reset(true).0);
    assert!(!regs::LOG_VERBOSE(g.c.read32(0, regs::LOG_VERBOSE::OFFSET)).enable());
}

/// proves: DB-03, DB-11, DB-01 — dedicated model: each queue rings its own doorbell page with
/// its write index and only that queue runs.
#[test]
fn dedicated_doorbells_run_exactly_their_queue() {
    let mut g = Gpu::start(&["--doorbells", "2"]);
    let p = g.process(1, 1);
    let (out, out_pa) = g.buffer(p, 1);
    let mut q1 = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    let mut q2 = g.queue(2, p, ENGINE_COMPUTE, 1, true);
    assert_eq!(g.connect(&mut q1, 0), Status::Ok);
    assert_eq!(g.connect(&mut q2, 0), Status::BadObject, "doorbell 0 is taken");
    assert_eq!(g.connect(&mut q2, 1), Status::Ok);
    // A connect makes the engine re-read the queue once (work written while disconnected runs):
    // let that happen on an empty ring before writing work that must wait for its doorbell.
    g.submit(&mut q2, &pk::nop(1));
    g.drain(&q2);
    std::thread::sleep(Duration::from_millis(100));
    g.enqueue(&mut q2, &pk::write32(out + 4, 2));
    g.submit(&mut q1, &pk::write32(out, 1));
    g.drain(&q1);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(read_u32(&g.ram, out_pa + 4), 0, "q2 was not rung");
    g.notify(&q2);
    g.drain(&q2);
    assert_eq!(read_u32(&g.ram, out_pa + 4), 2);
    g.dev.wait_trace("doorbell 1", |r| r["event"] == "doorbell" && r["index"] == 1);
}

/// proves: DB-02, VIC-05 — global model: every queue shares doorbell 0, whose value is only a
/// hint; a ring re-reads every connected queue's write index.
#[test]
fn global_doorbell_runs_every_connected_queue() {
    let mut g = Gpu::start(&["--doorbell-model", "global"]);
    assert!(regs::CAPS(g.c.read32(0, regs::CAPS::OFFSET)).global_doorbell());
    assert_eq!(regs::DOORBELL_INFO(g.c.read32(0, regs::DOORBELL_INFO::OFFSET)).count(), 1);
    let p = g.process(1, 1);
    let (out, out_pa) = g.buffer(p, 1);
    let mut qs: Vec<_> = (1..=3).map(|i| g.queue(i, p, ENGINE_COMPUTE, 1, true)).collect();
    for q in &mut qs {
        assert_eq!(g.connect(q, 0), Status::Ok);
    }
    let mut extra = g.queue(9, p, ENGINE_COMPUTE, 1, true);
    assert_eq!(g.connect(&mut extra, 1), Status::BadArgument);
    for (i, q) in qs.iter_mut().enumerate() {
        g.enqueue(q, &pk::write32(out + i as u64 * 4, 10 + i as u32));
    }
    g.c.write32(belfry_abi::pci::DOORBELL_BAR, 0, 0xdead); // any value: a hint
    for q in &qs {
        g.drain(q);
    }
    assert_eq!([0, 4, 8].map(|o| read_u32(&g.ram, out_pa + o)), [10, 11, 12]);
}

/// proves: CTX-01, CTX-02, CTX-03, CTX-04, CTX-05, CTX-06 — a suspended context's queues leave
/// the runlist with doorbells connected; work written and rung meanwhile (and kernel-mode
/// kicks) runs after resume, also when the queue's doorbell was taken and a new one connected
/// while it was suspended.
#[test]
fn suspended_contexts_keep_work_until_resume() {
    let mut g = Gpu::start(&[]);
    let p = g.process(1, 1);
    let (out, out_pa) = g.buffer(p, 1);
    let mut um = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    let mut km = g.queue(2, p, ENGINE_COPY, 1, false);
    g.connect(&mut um, 0);
    assert_eq!(g.object(Opcode::SuspendContext, 1), Status::Ok);
    assert_eq!(g.query(1).state, QueueState::Suspended as u32);
    assert_eq!(g.query(1).doorbell, 0, "doorbell stays connected");
    g.submit(&mut um, &pk::write32(out, 1));
    g.submit(&mut km, &pk::write32(out + 4, 2));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!((read_u32(&g.ram, out_pa), read_u32(&g.ram, out_pa + 4)), (0, 0), "nothing runs while suspended");
    // Victimized while suspended: disconnected, then reconnected to another doorbell.
    let mut a = to_bytes(&mailbox::DoorbellArgs { queue: 1, ..Default::default() });
    g.ok(Opcode::DisconnectDoorbell, &mut a);
    um.doorbell = None;
    assert_eq!(g.connect(&mut um, 5), Status::Ok);
    g.submit(&mut um, &pk::write32(out + 8, 3));
    assert_eq!(g.object(Opcode::ResumeContext, 1), Status::Ok);
    g.drain(&um);
    g.drain(&km);
    assert_eq!([0, 4, 8].map(|o| read_u32(&g.ram, out_pa + o)), [1, 2, 3]);
}

/// proves: ENG-02, ENG-03 — an engine idle past the idle time asks for F1 with an
/// engine-state record; in F1 it runs nothing until set back to F0.
#[test]
fn idle_engines_ask_for_f1() {
    let mut g = Gpu::start(&["--idle-f1-ms", "30"]);
    let p = g.process(1, 1);
    let (out, out_pa) = g.buffer(p, 1);
    let mut q = g.queue(1, p, ENGINE_COPY, 1, false);
    g.submit(&mut q, &pk::write32(out, 1));
    g.drain(&q);
    g.wait_for("F1 request", || g.interrupts(irq::VECTOR_ENGINE) > 0);
    let rec = g.new_records().into_iter().find(|r| r.kind == RecordKind::EngineState as u32).expect("record");
    assert_eq!((rec.engine, rec.detail), (ENGINE_COPY, EngineState::TransitionToF1 as u32));
    assert_eq!(rec.value, 1, "the request carries the KICK_QUEUEs run before it (the submission's one)");
    let mut f1 = to_bytes(&mailbox::PowerArgs { target: ENGINE_COPY, state: 3, ..Default::default() });
    g.ok(Opcode::SetEnginePower, &mut f1);
    g.submit(&mut q, &pk::write32(out, 2));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(read_u32(&g.ram, out_pa), 1, "an engine in F1 runs nothing");
    let mut f0 = to_bytes(&mailbox::PowerArgs { target: ENGINE_COPY, state: 0, ..Default::default() });
    g.ok(Opcode::SetEnginePower, &mut f0);
    g.drain(&q);
    assert_eq!(read_u32(&g.ram, out_pa), 2);
}

/// A device in D3hot raises no interrupt: an engine idle there asks for F1 only once back in
/// D0 (the driver touches no register of a device in D3).
#[test]
fn no_f1_request_in_d3hot() {
    // The idle delay outlasts the D3 command by far even on a loaded machine (30 ms did not:
    // the engine's F1 request came before D3 was set); the sleep in D3 outlasts the delay.
    let mut g = Gpu::start(&["--idle-f1-ms", "1000"]);
    let p = g.process(1, 1);
    let (out, _) = g.buffer(p, 1);
    let mut q = g.queue(1, p, ENGINE_COPY, 1, false);
    g.submit(&mut q, &pk::write32(out, 1));
    g.drain(&q);
    let mut d3 = to_bytes(&mailbox::PowerArgs { target: 0, state: 3, ..Default::default() });
    g.ok(Opcode::SetDevicePower, &mut d3);
    assert_eq!(g.interrupts(irq::VECTOR_ENGINE), 0, "an F1 request before D3 was set (the D3 command took over 1 s)");
    std::thread::sleep(Duration::from_millis(1300));
    assert_eq!(g.interrupts(irq::VECTOR_ENGINE), 0, "an F1 request from a device in D3hot");
    let mut d0 = to_bytes(&mailbox::PowerArgs { target: 0, state: 0, ..Default::default() });
    g.ok(Opcode::SetDevicePower, &mut d0);
    g.wait_for("F1 request after D0", || g.interrupts(irq::VECTOR_ENGINE) > 0);
}

/// In D3hot through the PM capability (PMCSR) the device executes nothing: an `MB_SUBMIT`
/// there is ignored — no completion, no effect (the address space it would have created does
/// not exist: creating it in D0 succeeds) — and the mailbox works again back in D0. The
/// module's own D3 mark never sends one (its mailbox returns `EAGAIN`); no rule id.
#[test]
fn a_mailbox_command_in_d3hot_is_ignored_and_the_mailbox_works_in_d0() {
    use vfio_bindings::bindings::vfio::VFIO_PCI_CONFIG_REGION_INDEX;
    let mut g = Gpu::start(&[]);
    let pmcsr = u64::from(belfry_abi::pci::CAP_PM_OFFSET) + 4;
    g.c.region_write(VFIO_PCI_CONFIG_REGION_INDEX, pmcsr, &[3, 0]).unwrap();
    let root = g.alloc(1);
    let args = mailbox::CreateAddressSpaceArgs { id: 7, root_pa: root, ..Default::default() };
    let mut block = to_bytes(&args);
    let len = block.len() as u32;
    block[0..4].copy_from_slice(&(Opcode::CreateAddressSpace as u32).to_le_bytes());
    block[4..8].copy_from_slice(&len.to_le_bytes());
    block[8..12].copy_from_slice(&0x77u32.to_le_bytes());
    block[12..16].copy_from_slice(&(Status::Pending as u32).to_le_bytes());
    let pa = g.alloc(1);
    g.ram.write_all_at(&block, pa).unwrap();
    g.c.write32(0, regs::MB_ARG_LO::OFFSET, pa as u32);
    g.c.write32(0, regs::MB_ARG_HI::OFFSET, (pa >> 32) as u32);
    g.c.write32(0, regs::MB_SUBMIT::OFFSET, 0x77);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(read_u32(&g.ram, pa + 12), Status::Pending as u32, "a mailbox command completed in D3hot");
    assert!(!regs::MB_STATUS(g.c.read32(0, regs::MB_STATUS::OFFSET)).busy(), "the D3hot submit was taken");
    g.c.region_write(VFIO_PCI_CONFIG_REGION_INDEX, pmcsr, &[0, 0]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(read_u32(&g.ram, pa + 12), Status::Pending as u32, "the D3hot command ran on the return to D0");
    let mut again = to_bytes(&args);
    g.ok(Opcode::CreateAddressSpace, &mut again);
}

/// proves: ENG-02, ENG-06 — a queue that makes no progress (a command buffer jumping to
/// itself) goes Hung with an engine-state record; another queue on the same engine still runs.
#[test]
fn hung_queues_are_stopped_and_others_keep_running() {
    let mut g = Gpu::start(&["--hang-timeout-ms", "100"]);
    let p = g.process(1, 1);
    let (out, out_pa) = g.buffer(p, 1);
    let mut bad = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    let mut good = g.queue(2, p, ENGINE_COMPUTE, 1, true);
    g.connect(&mut bad, 0);
    g.connect(&mut good, 1);
    let (loop_va, loop_pa) = g.buffer(p, 1);
    let looping = [pk::nop(4), pk::jump(loop_va, 32)].concat();
    g.ram.write_all_at(&looping, loop_pa).unwrap();
    g.submit(&mut bad, &pk::jump(loop_va, 32));
    g.submit(&mut good, &pk::write32(out, 7));
    g.drain(&good);
    assert_eq!(read_u32(&g.ram, out_pa), 7, "the other queue ran despite the loop");
    g.wait_for("hang record", || g.interrupts(irq::VECTOR_ENGINE) > 0);
    let rec = g.new_records().into_iter().find(|r| r.kind == RecordKind::EngineState as u32).unwrap();
    assert_eq!((rec.queue, rec.detail), (1, EngineState::Hung as u32));
    assert_eq!(g.query(1).state, QueueState::Hung as u32);
    g.submit(&mut good, &pk::write32(out, 8));
    g.drain(&good);
    assert_eq!(read_u32(&g.ram, out_pa), 8);
}

/// proves: ENG-06 (device side) — `RESET_ENGINE` (timeout recovery) drops the work of the
/// queue looping on the engine and faults its context (`ENGINE_RESET`), reports it, and the
/// other process's queue on the same engine keeps running.
#[test]
fn an_engine_reset_drops_the_looping_queue_and_faults_only_its_context() {
    let mut g = Gpu::start(&["--hang-timeout-ms", "60000"]);
    let (p1, p2) = (g.process(1, 1), g.process(2, 2));
    let (out, out_pa) = g.buffer(p2, 1);
    let mut bad = g.queue(1, p1, ENGINE_COMPUTE, 1, true);
    let mut good = g.queue(2, p2, ENGINE_COMPUTE, 1, true);
    g.connect(&mut bad, 0);
    g.connect(&mut good, 1);
    let (loop_va, loop_pa) = g.buffer(p1, 1);
    g.ram.write_all_at(&[pk::nop(4), pk::jump(loop_va, 32)].concat(), loop_pa).unwrap();
    g.submit(&mut bad, &pk::jump(loop_va, 32));
    std::thread::sleep(Duration::from_millis(100));
    let mut reset =
        to_bytes(&mailbox::ResetEngineArgs { engine: ENGINE_COMPUTE, min_busy_ms: 20, ..Default::default() });
    g.ok(Opcode::ResetEngine, &mut reset);
    let out_args: mailbox::ResetEngineArgs = from_bytes(&reset);
    assert_eq!((out_args.guilty_queue, out_args.guilty_context), (1, 1));
    let st = g.query(1);
    assert_eq!((st.state, reason(st.fault_reason)), (QueueState::Faulted as u32, Ok(FaultReason::EngineReset)));
    g.submit(&mut good, &pk::write32(out, 9));
    g.drain(&good);
    assert_eq!(read_u32(&g.ram, out_pa), 9, "the other process's queue runs after the reset");
}

/// proves: DB-16 (device side) — a GPU page fault faults only that context: a fault record,
/// the FAULT interrupt, the queue reports the reason and address; another process's queue
/// keeps running.
#[test]
fn mmu_faults_are_contained_to_their_context() {
    let mut g = Gpu::start(&[]);
    let a = g.process(1, 1);
    let b = g.process(2, 2);
    let (a_out, a_pa) = g.buffer(a, 1);
    let mut qa = g.queue(1, a, ENGINE_COMPUTE, 1, true);
    let mut qb = g.queue(2, b, ENGINE_COMPUTE, 1, true);
    g.connect(&mut qa, 0);
    g.connect(&mut qb, 1);
    // B writes to A's VA: not mapped in B's address space.
    g.submit(&mut qb, &pk::write32(a_out, 0x666));
    g.wait_for("fault interrupt", || g.interrupts(irq::VECTOR_FAULT) > 0);
    let rec = g.new_records().into_iter().find(|r| r.kind == RecordKind::ContextFault as u32).unwrap();
    assert_eq!((rec.context, rec.queue, rec.address), (2, 2, a_out));
    assert_eq!(rec.detail, FaultReason::MmuNotPresent as u32);
    let st = g.query(2);
    assert_eq!(
        (st.state, reason(st.fault_reason), st.fault_address),
        (QueueState::Faulted as u32, Ok(FaultReason::MmuNotPresent), a_out)
    );
    g.submit(&mut qa, &pk::write32(a_out, 1));
    g.drain(&qa);
    assert_eq!(read_u32(&g.ram, a_pa), 1, "A unaffected and its data not B's");
    // Read-only pages fault on write.
    let ro_pa = g.alloc(1);
    g.map(a.root, 0x7700_0000, ro_pa, 0);
    g.submit(&mut qa, &pk::write32(0x7700_0000, 1));
    g.wait_query("read-only fault", 1, |st| st.state == QueueState::Faulted as u32);
    assert_eq!(reason(g.query(1).fault_reason), Ok(FaultReason::MmuReadOnly));
}

/// Bus mastering off (PCI command bit 2 clear) means no DMA: a rung queue waits, untouched and
/// unfaulted, until the driver sets it again.
#[test]
fn no_dma_while_bus_mastering_is_off() {
    let mut g = Gpu::start(&[]);
    let p = g.process(1, 1);
    let (out, out_pa) = g.buffer(p, 1);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    assert_eq!(g.connect(&mut q, 0), Status::Ok);
    set_bus_master(&mut g.c, false);
    g.submit(&mut q, &pk::write32(out, 0x55));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(read_u32(&g.ram, out_pa), 0, "no DMA while bus mastering is off");
    assert_eq!(g.read_index(&q), 0, "the ring is not even read");
    set_bus_master(&mut g.c, true);
    g.drain(&q);
    assert_eq!(read_u32(&g.ram, out_pa), 0x55, "the work runs once it is set");
    assert_eq!(g.query(1).state, QueueState::Idle as u32, "and nothing faulted");
}

/// A region the client mapped read-only is never written: a GPU write into it faults the
/// context and the memory keeps its contents.
#[test]
fn gpu_writes_into_a_read_only_dma_region_fault_the_context() {
    let mut g = Gpu::start(&[]);
    let rom = common::memfd(0x1000);
    rom.write_all_at(&0x1234_5678u32.to_le_bytes(), 0).unwrap();
    let rom_pa = RAM_SIZE;
    assert!(!g.c.dma_map_with(rom_pa, 0x1000, 1, &[std::os::fd::AsRawFd::as_raw_fd(&rom)]).is_error());
    let p = g.process(1, 1);
    let (out, out_pa) = g.buffer(p, 1);
    // Mapped writable in the GPU's page tables: only the DMA region says read-only.
    g.map(p.root, 0x7700_0000, rom_pa, mmu::PTE_WRITABLE);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, false);
    g.submit(&mut q, &pk::copy(0x7700_0000, out, 4));
    g.drain(&q);
    assert_eq!(read_u32(&g.ram, out_pa), 0x1234_5678, "reads are allowed");
    g.submit(&mut q, &pk::write32(0x7700_0000, 0x666));
    g.wait_query("read-only DMA fault", 1, |st| st.state == QueueState::Faulted as u32);
    let st = g.query(1);
    assert_eq!((reason(st.fault_reason), st.fault_address), (Ok(FaultReason::MmuReadOnly), 0x7700_0000));
    assert_eq!(read_u32(&rom, 0), 0x1234_5678, "never written");
}

/// Malformed packets, rings and mailbox arguments are contained to the offending context (or
/// refused with a status) and the device keeps serving.
#[test]
fn malformed_work_and_arguments_are_contained() {
    let mut g = Gpu::start(&[]);
    let p = g.process(1, 1);
    let good_p = g.process(2, 2);
    let (out, out_pa) = g.buffer(good_p, 1);
    let mut good = g.queue(9, good_p, ENGINE_COPY, 1, false);
    for (i, bytes) in [
        0xffu32.to_le_bytes().to_vec(), // unknown opcode
        (belfry_abi::packet::header(belfry_abi::packet::Opcode::WriteData32, 3)).to_le_bytes().to_vec(), // wrong length
        pk::write32(0x1003, 1),         // unaligned
        pk::write32(1 << 50, 1),        // non-canonical
        pk::fill(0x1000, 0, 3),         // size not a multiple of 4
        pk::compute(ComputeOp::AddU32, 0, 0, 0, 1, 0)[..20].to_vec(), // runs past the buffer
    ]
    .into_iter()
    .enumerate()
    {
        let ctx = 10 + i as u32;
        let proc_ = g.process(10 + i as u32, ctx);
        let mut q = g.queue(10 + i as u32, proc_, ENGINE_COMPUTE, 1, false);
        g.submit(&mut q, &bytes);
        g.wait_query("fault", q.id, |st| st.state == QueueState::Faulted as u32);
    }
    // A ring whose write index claims more work than slots.
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, false);
    g.ram.write_all_at(&100u32.to_le_bytes(), q.control_pa).unwrap();
    q.write_index = 100;
    g.notify(&q);
    g.wait_query("ring fault", 1, |st| reason(st.fault_reason) == Ok(FaultReason::BadRing));
    // Mailbox arguments.
    assert_eq!(g.object(Opcode::DestroyQueue, 555), Status::BadObject);
    assert_eq!(g.object(Opcode::DestroyContext, 2), Status::BadObject, "context still has a queue");
    assert_eq!(g.object(Opcode::KickQueue, 4242), Status::BadObject);
    let mut bad_ring =
        to_bytes(&mailbox::CreateQueueArgs { id: 77, context: 1, ring_entries: 3, ..Default::default() });
    assert_eq!(g.mailbox(Opcode::CreateQueue, &mut bad_ring), Status::BadArgument);
    let mut bad_ctx = to_bytes(&mailbox::CreateContextArgs { id: 50, address_space: 0, ..Default::default() });
    assert_eq!(g.mailbox(Opcode::CreateContext, &mut bad_ctx), Status::BadObject, "system AS is not a process AS");
    let mut bad_as =
        to_bytes(&mailbox::CreateAddressSpaceArgs { id: 60, root_pa: RAM_SIZE + 0x1000, ..Default::default() });
    assert_eq!(g.mailbox(Opcode::CreateAddressSpace, &mut bad_as), Status::BadAddress);
    let mut short = to_bytes(&mailbox::FenceValuesArgs { count: 3, ..Default::default() });
    assert_eq!(g.mailbox(Opcode::UpdateMonitoredValues, &mut short), Status::BadLength);
    // The healthy process still runs.
    g.submit(&mut good, &pk::write32(out, 5));
    g.drain(&good);
    assert_eq!(read_u32(&g.ram, out_pa), 5);
}

/// proves: DB-04, DB-05 — kernel-mode and user-mode queues side by side; a user-mode queue
/// refuses kernel-mode kicks and a kernel-mode queue refuses doorbells.
#[test]
fn kernel_mode_and_user_mode_queues_side_by_side() {
    let mut g = Gpu::start(&[]);
    let p = g.process(1, 1);
    let (out, out_pa) = g.buffer(p, 1);
    let mut um = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    let mut km = g.queue(2, p, ENGINE_COMPUTE, 1, false);
    g.connect(&mut um, 0);
    assert_eq!(g.connect(&mut km, 1), Status::BadArgument);
    assert_eq!(g.object(Opcode::KickQueue, 1), Status::BadArgument);
    g.submit(&mut um, &pk::write32(out, 1));
    g.submit(&mut km, &pk::write32(out + 4, 2));
    g.drain(&um);
    g.drain(&km);
    assert_eq!((read_u32(&g.ram, out_pa), read_u32(&g.ram, out_pa + 4)), (1, 2));
}

/// proves: FEN-10, FEN-11, IRQ-01 — an engine that cannot write fences faults on fence packets
/// and uses NOTIFY (a record the driver answers by writing the fence); monitored-fence signals
/// always interrupt, with their own record kind, apart from native-fence records.
#[test]
fn monitored_signals_always_interrupt_and_fenceless_engines_notify() {
    let mut g = Gpu::start(&["--engine-without-fence-writes", "1"]);
    let info = regs::ENGINE_INFO(g.c.read32(0, regs::ENGINE_INFO::OFFSET));
    assert_eq!((info.count(), info.fence_write_mask()), (2, 0b01));
    let p = g.process(1, 1);
    let (fence_va, fence_pa) = g.buffer(p, 1);
    // Kernel-mode: user-mode queues cannot use monitored fences (NF-21).
    let mut compute = g.queue(1, p, ENGINE_COMPUTE, 1, false);
    for v in [1u64, 2] {
        g.submit(&mut compute, &pk::monitored_signal(fence_va, v));
    }
    g.drain(&compute);
    assert_eq!(g.read_u64(fence_pa), 2);
    let recs: Vec<_> =
        g.new_records().into_iter().filter(|r| r.kind == RecordKind::MonitoredFenceSignaled as u32).collect();
    assert_eq!(recs.iter().map(|r| r.value).collect::<Vec<_>>(), vec![1, 2], "one interrupt per signal, waiter or not");
    let mut copy = g.queue(2, p, ENGINE_COPY, 1, true);
    g.connect(&mut copy, 1);
    g.submit(&mut copy, &pk::notify(0x77));
    g.drain(&copy);
    let rec = g.new_records().into_iter().find(|r| r.kind == RecordKind::Notify as u32).unwrap();
    assert_eq!((rec.queue, rec.value), (2, 0x77));
    g.submit(&mut copy, &pk::monitored_signal(fence_va, 3));
    g.wait_query("fault", 2, |st| st.state == QueueState::Faulted as u32);
    assert_eq!(reason(g.query(2).fault_reason), Ok(FaultReason::EngineCannotWriteFence));
}

/// proves: NF-21 (device side) — a MONITORED_FENCE_SIGNAL on a user-mode-submission queue
/// faults that queue's context (reason MONITORED_FENCE_ON_USER_MODE_QUEUE, the fence
/// unwritten, no monitored-fence record), while a kernel-mode queue of another context signals
/// the same kind of fence.
#[test]
fn monitored_fence_signals_fault_user_mode_queues() {
    let mut g = Gpu::start(&[]);
    let user = g.process(1, 1);
    let kernel = g.process(2, 2);
    let (user_va, user_pa) = g.buffer(user, 1);
    let (kernel_va, kernel_pa) = g.buffer(kernel, 1);
    let mut uq = g.queue(1, user, ENGINE_COMPUTE, 1, true);
    g.connect(&mut uq, 0);
    g.submit(&mut uq, &pk::monitored_signal(user_va, 7));
    g.wait_query("fault", 1, |st| st.state == QueueState::Faulted as u32);
    let st = g.query(1);
    assert_eq!((reason(st.fault_reason), st.fault_address), (Ok(FaultReason::MonitoredFenceOnUserModeQueue), user_va));
    assert_eq!(g.read_u64(user_pa), 0, "the fence was written");
    let recs = g.new_records();
    assert!(recs.iter().all(|r| r.kind != RecordKind::MonitoredFenceSignaled as u32), "{recs:?}");
    assert!(recs.iter().any(|r| r.kind == RecordKind::ContextFault as u32 && r.context == 1), "{recs:?}");
    let mut kq = g.queue(2, kernel, ENGINE_COMPUTE, 1, false);
    g.submit(&mut kq, &pk::monitored_signal(kernel_va, 7));
    g.drain(&kq);
    assert_eq!(g.read_u64(kernel_pa), 7);
}

/// proves: CAP-10, FEN-07 (device side) — without 64-bit atomics the device advertises it,
/// refuses native fences and writes monitored fences 32 bits wide.
#[test]
fn no_64bit_atomics_mode() {
    let mut g = Gpu::start(&["--no-64bit-atomics"]);
    let caps = regs::CAPS(g.c.read32(0, regs::CAPS::OFFSET));
    assert!(caps.no_64bit_atomics() && !caps.native_fence() && caps.monitored_fence());
    let p = g.process(1, 1);
    let (va, pa) = g.buffer(p, 1);
    g.write_u64(pa, 0xaaaa_aaaa_0000_0000);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, false);
    g.submit(&mut q, &pk::monitored_signal(va, 0x1_0000_0005));
    g.drain(&q);
    assert_eq!(g.read_u64(pa), 0xaaaa_aaaa_0000_0005, "only the low 32 bits are written");
    let mut a = to_bytes(&mailbox::RegisterFenceArgs { handle: 1, kind: 1, ..Default::default() });
    assert_eq!(g.mailbox(Opcode::RegisterFence, &mut a), Status::BadArgument);
}

/// proves: NF-15 (device side), NF-09 — an INTRA_GPU fence lives in VRAM (the trace shows the
/// placement), engines signal and wait on it through a VRAM-backed GPU VA, and the CPU never
/// sees it in guest RAM.
#[test]
fn intra_gpu_fences_live_in_vram() {
    let mut g = Gpu::start(&[]);
    let p = g.process(1, 1);
    let (out, out_pa) = g.buffer(p, 1);
    g.map(p.root, 0x9000_0000, 0x10000, mmu::PTE_WRITABLE | mmu::PTE_VRAM);
    let mut a = to_bytes(&mailbox::RegisterFenceArgs {
        handle: 0x77,
        kind: belfry_abi::fence::FenceKind::IntraGpu as u32,
        current_value: mailbox::FenceLocation { space: mailbox::LOCATION_VRAM, address: 0x10000, ..Default::default() },
        monitored_value: mailbox::FenceLocation {
            space: mailbox::LOCATION_VRAM,
            address: 0x10008,
            ..Default::default()
        },
        ..Default::default()
    });
    g.ok(Opcode::RegisterFence, &mut a);
    let rec = g.dev.wait_trace("placement", |r| r["event"] == "fence_registered" && r["handle"] == 0x77);
    assert!(rec["current"].as_str().unwrap().starts_with("Vram"), "{rec}");
    let mut w = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    let mut s = g.queue(2, p, ENGINE_COPY, 1, true);
    g.connect(&mut w, 0);
    g.connect(&mut s, 1);
    g.submit(&mut w, &[pk::wait(0x9000_0000, 3, NO_LOG), pk::write32(out, 9)].concat());
    g.submit(&mut s, &pk::signal(0x9000_0000, 3, NO_LOG));
    g.drain(&w);
    assert_eq!(read_u32(&g.ram, out_pa), 9);
    let mut bad = to_bytes(&mailbox::RegisterFenceArgs {
        handle: 0x78,
        kind: 2,
        current_value: mailbox::FenceLocation { space: mailbox::LOCATION_VRAM, address: 1 << 40, ..Default::default() },
        ..Default::default()
    });
    assert_eq!(g.mailbox(Opcode::RegisterFence, &mut bad), Status::BadArgument, "outside VRAM");
}

/// proves: CAP-04 (device side) — the device follows the OS capabilities the driver reported
/// in `OS_CAPS`: with a version-1 table without SupportIntraGpuFenceType an INTRA_GPU fence is
/// refused at registration, without SupportOptimizedDefaultFenceType a DEFAULT fence whose
/// MonitoredValue is in VRAM is refused while one in system memory is registered; with both
/// reported (and with no table: version 0) both are registered. A device reset forgets the table.
#[test]
fn fence_types_follow_the_os_capabilities_reported() {
    use belfry_abi::fence::FenceKind;
    let mut g = Gpu::start(&[]);
    let p = g.process(1, 1);
    let vram = |address| mailbox::FenceLocation { space: mailbox::LOCATION_VRAM, address, ..Default::default() };
    let mut next = 0x100u64;
    // A fence of `kind` whose values are in VRAM (for DEFAULT: the optimized form's
    // MonitoredValue; its CurrentValue's placement is the driver's choice).
    let mut register = |g: &mut Gpu, kind: FenceKind| {
        next += 0x10;
        let mut a = to_bytes(&mailbox::RegisterFenceArgs {
            handle: next,
            kind: kind as u32,
            current_value: vram(next * 0x100),
            monitored_value: vram(next * 0x100 + 8),
            ..Default::default()
        });
        g.mailbox(Opcode::RegisterFence, &mut a)
    };
    let os = |g: &mut Gpu, optimized: bool, intra: bool| {
        let v = regs::OS_CAPS::default()
            .with_version(regs::OS_CAPS_VERSION)
            .with_optimized_default_fence(optimized)
            .with_intra_gpu_fence(intra);
        g.c.write32(0, regs::OS_CAPS::OFFSET, v.0);
        assert_eq!(g.c.read32(0, regs::OS_CAPS::OFFSET), v.0, "OS_CAPS reads back");
    };
    assert_eq!(register(&mut g, FenceKind::IntraGpu), Status::Ok, "no table (version 0): every type");
    os(&mut g, true, false);
    assert_eq!(register(&mut g, FenceKind::IntraGpu), Status::BadArgument, "INTRA_GPU not supported");
    assert_eq!(register(&mut g, FenceKind::Default), Status::Ok, "optimized DEFAULT supported");
    os(&mut g, false, true);
    assert_eq!(register(&mut g, FenceKind::Default), Status::BadArgument, "optimized DEFAULT not supported");
    assert_eq!(register(&mut g, FenceKind::IntraGpu), Status::Ok, "INTRA_GPU supported");
    os(&mut g, false, false);
    // A DEFAULT fence with its values in system memory needs no OS capability.
    g.native_fence(0x9000, p);
    g.c.write32(0, regs::OS_CAPS::OFFSET, regs::OS_CAPS::default().with_version(2).with_intra_gpu_fence(true).0);
    assert_eq!(register(&mut g, FenceKind::IntraGpu), Status::BadArgument, "a table of an unknown version");
}

/// proves: CAP-11 (device side), CAP-12 — engines flag user-mode submission support and the doorbell
/// memory size is published.
#[test]
fn capabilities_describe_engines_and_doorbells() {
    let mut g = Gpu::start(&[]);
    let info = regs::ENGINE_INFO(g.c.read32(0, regs::ENGINE_INFO::OFFSET));
    assert_eq!(info.user_mode_submission_mask(), 0b11);
    let db = regs::DOORBELL_INFO(g.c.read32(0, regs::DOORBELL_INFO::OFFSET));
    assert_eq!(1u64 << db.page_shift(), belfry_abi::pci::DOORBELL_PAGE_SIZE);
    let caps = regs::CAPS(g.c.read32(0, regs::CAPS::OFFSET));
    assert!(
        caps.native_fence() && caps.user_mode_submission() && caps.dedicated_doorbells() && !caps.optimized_interrupt()
    );
}

/// proves: CAP-11 (device side) — an engine the device leaves unflagged takes no user-mode
/// queue: the device without native fences clears ENGINE_INFO's user-mode submission mask, and
/// on each of its engines it refuses a user-mode queue while it takes a kernel-mode one. The
/// module's refusal of an unflagged engine is not tested here: the suite's device without
/// native fences refuses user-mode queues for that reason too.
#[test]
fn unflagged_engines_take_no_user_mode_queue() {
    let mut g = Gpu::start(&["--no-native-fences"]);
    let info = regs::ENGINE_INFO(g.c.read32(0, regs::ENGINE_INFO::OFFSET));
    assert_eq!(info.user_mode_submission_mask(), 0, "every engine left unflagged");
    let p = g.process(1, 1);
    for engine in 0..info.count() {
        for (id, flags) in [(2 * engine + 1, mailbox::QUEUE_FLAG_USER_MODE_SUBMISSION), (2 * engine + 2, 0)] {
            let (ring_va, _) = g.buffer(p, 1);
            let (ring_control_va, _) = g.buffer(p, 1);
            let mut a = to_bytes(&mailbox::CreateQueueArgs {
                id,
                context: p.context,
                engine,
                priority: 1,
                flags,
                ring_entries: 16,
                ring_va,
                ring_control_va,
                ..Default::default()
            });
            let want = if flags == 0 { Status::Ok } else { Status::BadArgument };
            assert_eq!(g.mailbox(Opcode::CreateQueue, &mut a), want, "engine {engine}, queue flags {flags:#x}");
        }
    }
}

/// A full interrupt ring is never overwritten: the overflow is counted and a scan-all record
/// follows as soon as there is room (IRQ-04's "cannot tell" case).
#[test]
fn interrupt_ring_overflow_falls_back_to_scan_all() {
    let mut g = Gpu::start(&[]);
    let p = g.process(1, 1);
    let (va, _) = g.buffer(p, 1);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, false);
    let n = IRQ_RING_ENTRIES as u64 + 8;
    let signals: Vec<u8> = (1..=n).flat_map(|v| pk::monitored_signal(va, v)).collect();
    g.submit(&mut q, &signals);
    g.drain(&q);
    assert_eq!(g.record_overflows(), 8);
    let first = g.new_records();
    assert_eq!(first.len(), IRQ_RING_ENTRIES as usize);
    g.submit(&mut q, &pk::monitored_signal(va, 1000));
    g.drain(&q);
    let next = g.new_records();
    assert_eq!(next[0].kind, RecordKind::NativeFenceSignaled as u32);
    assert_eq!((next[0].fence, next[0].detail), (0, irq::DETAIL_EVALUATE_LEGACY));
    assert_eq!(next[1].value, 1000);
}

/// Issue 11: a NOTIFY storm that ends with the interrupt ring full leaves the device owing the
/// scan-all record and the queue's newest token. When the driver drains the ring (read index
/// advanced) and acknowledges with `INT_CLEAR`, as the kernel module's handler does, the owed
/// records arrive with a fence-vector interrupt, no further record being generated.
#[test]
fn owed_records_arrive_once_the_driver_drains_and_acknowledges() {
    let mut g = Gpu::start(&[]);
    let p = g.process(1, 1);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, false);
    let n = IRQ_RING_ENTRIES as u64 + 8;
    let notifies: Vec<u8> = (1..=n).flat_map(pk::notify).collect();
    g.submit(&mut q, &notifies);
    g.drain(&q);
    assert_eq!(g.record_overflows(), 8);
    let first = g.new_records();
    assert_eq!(first.len(), IRQ_RING_ENTRIES as usize);
    assert_eq!(first.last().map(|r| r.value), Some(IRQ_RING_ENTRIES as u64));
    // The storm is over and the ring drained: past the moderation interval, the storm's own
    // interrupts are all in, and nothing was written for the drain alone.
    std::thread::sleep(Duration::from_millis(20));
    g.interrupts(V_FENCE);
    assert!(g.new_records().is_empty(), "written without an acknowledgement");
    g.c.write32(0, regs::INT_CLEAR::OFFSET, irq::cause::ALL);
    g.wait_for("the owed records after INT_CLEAR", || g.record_write_index() == IRQ_RING_ENTRIES + 2);
    let owed = g.new_records();
    assert_eq!(
        (owed[0].kind, owed[0].fence, owed[0].detail),
        (RecordKind::NativeFenceSignaled as u32, 0, irq::DETAIL_EVALUATE_LEGACY),
        "the scan-all record first: {owed:?}"
    );
    assert_eq!((owed[1].kind, owed[1].queue, owed[1].value), (RecordKind::Notify as u32, 1, n), "the newest token");
    g.wait_for("their interrupt", || g.interrupts(V_FENCE) > 0);
    // Delivered once.
    g.c.write32(0, regs::INT_CLEAR::OFFSET, irq::cause::ALL);
    assert!(g.new_records().is_empty(), "owed twice");
}
