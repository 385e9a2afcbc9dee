//! The engine: packets execute through the MMU, refused packets and guest errors fault the
//! context (status, record, interrupt), fence waits park and resume, slices yield, and the
//! watchdog hangs a queue.

use belfry_abi::engine::{FaultReason, QueueState as Reported};
use belfry_abi::fence::FenceKind;
use belfry_abi::irq::{self, RecordKind};
use belfry_abi::mailbox::{self, Opcode};
use belfry_abi::packet::{self, Opcode as P};

use super::*;
use crate::gpu::state::Fault;

fn write32(va: u64, value: u32) -> Vec<u8> {
    pk(P::WriteData32, packet::WriteData32 { va, value, ..Default::default() })
}

fn query(rig: &Rig) -> mailbox::QueryQueueArgs {
    rig.ok(Opcode::QueryQueue, mailbox::QueryQueueArgs { id: 1, ..Default::default() });
    rig.gpu.ports.ram.memory().read_obj::<Wire<mailbox::QueryQueueArgs>>(GuestAddress(ARGS)).unwrap().0
}

/// Submits `packets`, runs them, and returns the context's fault.
fn fault_of(packets: &[u8]) -> Option<Fault> {
    let mut rig = Rig::new(DeviceConfig::default());
    rig.submit(packets);
    rig.run();
    rig.context_state().fault_info()
}

fn bad_packet_at(va: u64) -> Option<Fault> {
    Some(Fault { reason: FaultReason::BadPacket, address: va, queue: QueueId::new(1) })
}

#[test]
fn packets_write_memory_and_the_read_index_advances() {
    let mut rig = Rig::new(DeviceConfig::default());
    let mut buf = write32(FREE_VA, 0x1234_5678);
    buf.extend(pk(P::WriteData64, packet::WriteData64 { va: FREE_VA + 8, value: u64::MAX - 1, ..Default::default() }));
    buf.extend(pk(P::WriteTimestamp, packet::WriteTimestamp { va: FREE_VA + 16, ..Default::default() }));
    buf.extend(pk(P::Fill, packet::Fill { dst_va: FREE_VA + 32, size: 8, value: 0xabab_cdcd, ..Default::default() }));
    buf.extend(pk(P::Copy, packet::Copy { src_va: FREE_VA, dst_va: FREE_VA + 64, size: 4, ..Default::default() }));
    buf.extend(packet::header(P::Nop, 3).to_le_bytes());
    buf.extend([0u8; 8]);
    rig.submit(&buf);
    assert_eq!(rig.queue_state(1), QueueState::Ready { cursor: None });
    rig.run();
    assert_eq!(rig.read_u32(FREE_PA), 0x1234_5678);
    assert_eq!(rig.read_u64(FREE_PA + 8), u64::MAX - 1);
    assert_ne!(rig.read_u64(FREE_PA + 16), 0, "a timestamp");
    assert_eq!((rig.read_u32(FREE_PA + 32), rig.read_u32(FREE_PA + 36)), (0xabab_cdcd, 0xabab_cdcd));
    assert_eq!(rig.read_u32(FREE_PA + 64), 0x1234_5678);
    assert_eq!(rig.read_index(), 1);
    assert_eq!(rig.queue_state(1), QueueState::Idle);
    assert_eq!(rig.context_state(), ContextState::Active);
    assert!(rig.sink.causes().is_empty());
}

#[test]
fn compute_applies_its_operation_per_element() {
    let mut rig = Rig::new(DeviceConfig::default());
    rig.write(FREE_PA, &[3u32, 4].map(u32::to_le_bytes).concat());
    rig.write(FREE_PA + 8, &[10u32, 20].map(u32::to_le_bytes).concat());
    let c = packet::Compute {
        op: packet::ComputeOp::MulU32 as u32,
        count: 2,
        a_va: FREE_VA,
        b_va: FREE_VA + 8,
        dst_va: FREE_VA + 16,
        ..Default::default()
    };
    rig.submit(&pk(P::Compute, c));
    rig.run();
    assert_eq!((rig.read_u32(FREE_PA + 16), rig.read_u32(FREE_PA + 20)), (30, 80));
    let saxpy =
        crate::gpu::packets::apply_compute(packet::ComputeOp::SaxpyF32, 2f32.to_bits(), 1f32.to_bits(), 3f32.to_bits());
    assert_eq!(f32::from_bits(saxpy), 7.0);
}

#[test]
fn a_jump_continues_in_another_buffer() {
    let mut rig = Rig::new(DeviceConfig::default());
    let target = FREE_VA + 0x100;
    rig.write(FREE_PA + 0x100, &write32(FREE_VA, 7));
    rig.submit(&pk(P::Jump, packet::Jump { va: target, size_bytes: 16, ..Default::default() }));
    rig.run();
    assert_eq!(rig.read_u32(FREE_PA), 7);
    assert_eq!(rig.read_index(), 1);
}

#[test]
fn refused_packets_fault_the_context_with_bad_packet() {
    let at = CMDBUF_VA;
    assert_eq!(fault_of(&(0x7f | (2 << 16) as u32).to_le_bytes().repeat(2)), bad_packet_at(at), "unknown opcode");
    let mut reserved_header = write32(FREE_VA, 1);
    reserved_header[1] = 1;
    assert_eq!(fault_of(&reserved_header), bad_packet_at(at), "reserved header bits");
    let mut wrong_length = write32(FREE_VA, 1);
    wrong_length[2] = 5;
    assert_eq!(fault_of(&wrong_length), bad_packet_at(at), "length not the opcode's");
    assert_eq!(fault_of(&write32(FREE_VA, 1)[..8]), bad_packet_at(at), "runs past the buffer");
    let reserved = pk(P::WriteData64, packet::WriteData64 { va: FREE_VA, reserved: 1, ..Default::default() });
    assert_eq!(fault_of(&reserved), bad_packet_at(at), "reserved field");
    assert_eq!(fault_of(&write32(FREE_VA + 2, 1)), bad_packet_at(FREE_VA + 2), "misaligned: at the address");
    let overlap = pk(P::Copy, packet::Copy { src_va: FREE_VA, dst_va: FREE_VA + 4, size: 8, ..Default::default() });
    assert_eq!(fault_of(&overlap), bad_packet_at(at), "overlapping copy");
    let op = pk(P::Compute, packet::Compute { op: 9, ..Default::default() });
    assert_eq!(fault_of(&op), bad_packet_at(at), "unknown compute op");
    let jump = pk(P::Jump, packet::Jump { va: FREE_VA + 2, size_bytes: 16, ..Default::default() });
    assert_eq!(fault_of(&jump), bad_packet_at(at), "misaligned jump: at the packet");
}

#[test]
fn a_fault_is_reported_by_status_record_and_interrupt_and_stops_the_context() {
    let mut rig = Rig::new(DeviceConfig::default());
    let unmapped = DATA_VA + DATA_PAGES * 0x1000;
    let mut buf = write32(unmapped, 1);
    buf.extend(write32(FREE_VA, 2));
    rig.submit(&buf);
    rig.run();
    let fault = Fault { reason: FaultReason::MmuNotPresent, address: unmapped, queue: QueueId::new(1) };
    assert_eq!(rig.context_state(), ContextState::Faulted(fault));
    assert_eq!(rig.read_u32(FREE_PA), 0, "nothing after the fault runs");
    let r = rig.records();
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].kind, r[0].queue, r[0].context), (RecordKind::ContextFault as u32, 1, 1));
    assert_eq!((r[0].address, r[0].detail), (unmapped, FaultReason::MmuNotPresent as u32));
    assert_eq!(rig.sink.causes(), vec![irq::cause::FAULT]);
    let st = query(&rig);
    assert_eq!(
        (st.state, st.fault_reason, st.fault_address),
        (Reported::Faulted as u32, FaultReason::MmuNotPresent as u32, unmapped)
    );
    // A kick does not run a faulted context.
    rig.submit(&write32(FREE_VA, 3));
    assert_eq!(rig.run(), 0);
}

#[test]
fn engines_without_fence_writes_refuse_fence_signals() {
    let config = DeviceConfig::from_flags(["--engine-without-fence-writes", &ENGINE.raw().to_string()]).unwrap();
    let mut rig = Rig::new(config);
    rig.submit(&pk(P::FenceSignal, packet::FenceSignal { fence_va: FREE_VA, value: 1, ..Default::default() }));
    rig.run();
    assert_eq!(rig.context_state().fault_info().map(|f| f.reason), Some(FaultReason::EngineCannotWriteFence));
}

#[test]
fn monitored_signals_fault_on_user_mode_queues_and_post_a_record_on_kernel_queues() {
    let mut rig = Rig::new(DeviceConfig::default());
    let signal =
        pk(P::MonitoredFenceSignal, packet::MonitoredFenceSignal { fence_va: FREE_VA, value: 9, ..Default::default() });
    rig.submit(&signal);
    rig.run();
    assert_eq!(rig.read_u64(FREE_PA), 9);
    let r = rig.records();
    assert_eq!((r[0].kind, r[0].value, r[0].address), (RecordKind::MonitoredFenceSignaled as u32, 9, FREE_VA));
    assert_eq!(rig.sink.causes(), vec![irq::cause::MONITORED_FENCE]);

    let mut user = Rig::new(DeviceConfig::default());
    user.ok(Opcode::DestroyQueue, mailbox::ObjectArgs { id: 1, ..Default::default() });
    user.create_queue(1, mailbox::QUEUE_FLAG_USER_MODE_SUBMISSION);
    user.push(&signal);
    user.gpu.lock().queues.get_mut(&QueueId::new(1)).unwrap().state.kick();
    user.run();
    assert_eq!(user.context_state().fault_info().map(|f| f.reason), Some(FaultReason::MonitoredFenceOnUserModeQueue));
}

/// Registers native fence `handle` with CurrentValue at `FREE_VA` and MonitoredValue at
/// `FREE_VA + 8` (system VAs).
fn register_native(rig: &Rig, handle: u64, monitored: u64) {
    rig.write(FREE_PA + 8, &monitored.to_le_bytes());
    let loc = |address| mailbox::FenceLocation { space: mailbox::LOCATION_SYSTEM_VA, address, ..Default::default() };
    let args = mailbox::RegisterFenceArgs {
        handle,
        kind: FenceKind::Default as u32,
        current_value: loc(FREE_VA),
        monitored_value: loc(FREE_VA + 8),
        ..Default::default()
    };
    rig.ok(Opcode::RegisterFence, args);
}

#[test]
fn a_native_signal_interrupts_only_past_the_monitored_value() {
    let mut rig = Rig::new(DeviceConfig::default());
    register_native(&rig, 0x77, 5);
    let signal = |value| {
        pk(
            P::FenceSignal,
            packet::FenceSignal { fence_va: FREE_VA, value, log_entry: packet::NO_LOG, ..Default::default() },
        )
    };
    rig.submit(&signal(5));
    rig.run();
    assert_eq!(rig.read_u64(FREE_PA), 5);
    assert!(rig.records().is_empty(), "not past the MonitoredValue: no interrupt");
    rig.submit(&signal(6));
    rig.run();
    let r = rig.records();
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].kind, r[0].fence, r[0].value), (RecordKind::NativeFenceSignaled as u32, 0x77, 6));
    assert_eq!(rig.sink.causes(), vec![irq::cause::NATIVE_FENCE]);
}

#[test]
fn a_fence_wait_parks_the_queue_until_the_fence_is_reached() {
    let mut rig = Rig::new(DeviceConfig::default());
    let mut buf = pk(
        P::FenceWait,
        packet::FenceWait { fence_va: FREE_VA, value: 3, log_entry: packet::NO_LOG, ..Default::default() },
    );
    buf.extend(write32(FREE_VA + 16, 1));
    rig.submit(&buf);
    rig.run();
    let QueueState::Waiting { cursor, wait } = rig.queue_state(1) else { panic!("{:?}", rig.queue_state(1)) };
    assert_eq!((cursor.va, wait.fence_va, wait.value), (CMDBUF_VA, FREE_VA, 3));
    assert_eq!(query(&rig).state, Reported::Waiting as u32);
    assert_eq!(rig.run(), 0, "not ready while the fence is below the value");
    rig.write(FREE_PA, &3u64.to_le_bytes());
    rig.run();
    assert_eq!(rig.read_u32(FREE_PA + 16), 1);
    assert_eq!(rig.queue_state(1), QueueState::Idle);
    assert_eq!(query(&rig).state, Reported::Idle as u32, "the work ran: the device holds none of it");
}

#[test]
fn a_slice_yields_after_its_packet_budget() {
    let mut rig = Rig::new(DeviceConfig::default());
    let nops: Vec<u8> =
        (0..crate::gpu::engine::SLICE_PACKETS + 1).flat_map(|_| packet::header(P::Nop, 1).to_le_bytes()).collect();
    rig.submit(&nops);
    assert!(crate::gpu::engine::step(&rig.gpu, ENGINE));
    let QueueState::Ready { cursor: Some(c) } = rig.queue_state(1) else { panic!("{:?}", rig.queue_state(1)) };
    assert_eq!(c.va, CMDBUF_VA + 4 * 63, "the ring fetch and 63 packets ran");
    rig.run();
    assert_eq!(rig.read_index(), 1);
}

#[test]
fn the_watchdog_hangs_a_queue_that_runs_too_long() {
    let mut rig = Rig::new(DeviceConfig::from_flags(["--hang-timeout-ms", "0"]).unwrap());
    rig.submit(&pk(P::Jump, packet::Jump { va: CMDBUF_VA, size_bytes: 16, ..Default::default() }));
    rig.run();
    assert_eq!(rig.queue_state(1), QueueState::Hung);
    let r = rig.records();
    assert_eq!(
        (r[0].kind, r[0].detail),
        (RecordKind::EngineState as u32, belfry_abi::engine::EngineState::Hung as u32)
    );
    assert_eq!(query(&rig).state, Reported::Hung as u32);
    rig.submit(&write32(FREE_VA, 1));
    assert_eq!(rig.run(), 0, "a hung queue never runs again");
}
