//! Mailbox commands: arguments are validated before anything changes, references between
//! objects are enforced, and the commands that move queue and context state do so through the
//! state transitions.

use belfry_abi::fence::FenceKind;
use belfry_abi::irq::{self, RecordKind};
use belfry_abi::mailbox::{self, Opcode, Status};

use super::*;

fn object(id: u32) -> mailbox::ObjectArgs {
    mailbox::ObjectArgs { id, ..Default::default() }
}

#[test]
fn objects_are_validated_and_referenced_objects_stay() {
    let rig = Rig::new(DeviceConfig::default());
    let space = |id, root_pa| mailbox::CreateAddressSpaceArgs { id, root_pa, ..Default::default() };
    assert_eq!(rig.fails(Opcode::CreateAddressSpace, space(mailbox::MAX_ADDRESS_SPACES, 0x8000)), Status::BadArgument);
    assert_eq!(rig.fails(Opcode::CreateAddressSpace, space(2, 0x8001)), Status::BadAddress);
    assert_eq!(rig.fails(Opcode::CreateAddressSpace, space(2, RAM)), Status::BadAddress, "outside guest memory");
    assert_eq!(rig.fails(Opcode::CreateAddressSpace, space(1, 0x8000)), Status::BadObject, "exists");
    let ctx = |id, address_space| mailbox::CreateContextArgs { id, address_space, ..Default::default() };
    assert_eq!(rig.fails(Opcode::CreateContext, ctx(2, 0)), Status::BadObject, "the system space is no process's");
    assert_eq!(rig.fails(Opcode::CreateContext, ctx(2, 9)), Status::BadObject, "no such space");
    assert_eq!(rig.fails(Opcode::DestroyAddressSpace, object(1)), Status::BadObject, "used by context 1");
    assert_eq!(rig.fails(Opcode::DestroyContext, object(1)), Status::BadObject, "has queue 1");
    rig.ok(Opcode::DestroyQueue, object(1));
    assert_eq!(rig.fails(Opcode::DestroyQueue, object(1)), Status::BadObject, "gone");
    rig.ok(Opcode::DestroyContext, object(1));
    rig.ok(Opcode::DestroyAddressSpace, object(1));
    assert!(rig.gpu.lock().scheduler.runlist(ENGINE).next().is_none(), "off the runlist");
}

#[test]
fn queues_are_validated_before_they_exist() {
    let rig = Rig::new(DeviceConfig::default());
    let base = mailbox::CreateQueueArgs {
        id: 2,
        context: 1,
        ring_entries: 16,
        ring_va: FREE_VA,
        ring_control_va: FREE_VA + 0x1000,
        ..Default::default()
    };
    let bad = [
        mailbox::CreateQueueArgs { ring_entries: 3, ..base },
        mailbox::CreateQueueArgs { ring_va: FREE_VA + 8, ..base },
        mailbox::CreateQueueArgs { ring_control_va: FREE_VA + 64, ..base },
        mailbox::CreateQueueArgs { flags: 0x80, ..base },
        mailbox::CreateQueueArgs { priority: belfry_abi::engine::PRIORITY_MAX + 1, ..base },
    ];
    for args in bad {
        assert_eq!(rig.fails(Opcode::CreateQueue, args), Status::BadArgument, "{args:?}");
    }
    assert_eq!(rig.fails(Opcode::CreateQueue, mailbox::CreateQueueArgs { context: 5, ..base }), Status::BadObject);
    assert!(!rig.gpu.lock().queues.contains_key(&QueueId::new(2)));
    rig.ok(Opcode::CreateQueue, base);
    assert_eq!(rig.queue_state(2), QueueState::Idle);
}

#[test]
fn suspend_and_resume_move_the_context_and_its_queues() {
    let rig = Rig::new(DeviceConfig::default());
    rig.ok(Opcode::SuspendContext, object(1));
    assert_eq!(rig.context_state(), ContextState::Suspended);
    assert!(!rig.gpu.lock().scheduler.contains(QueueId::new(1)));
    rig.ok(Opcode::ResumeContext, object(1));
    assert_eq!(rig.context_state(), ContextState::Active);
    assert!(rig.gpu.lock().scheduler.contains(QueueId::new(1)));
    assert_eq!(rig.queue_state(1), QueueState::Ready { cursor: None }, "resumed queues re-read their rings");
    assert_eq!(rig.fails(Opcode::SuspendContext, object(7)), Status::BadObject);
}

#[test]
fn doorbells_connect_to_user_mode_queues_only_and_kick_them() {
    let rig = Rig::new(DeviceConfig::from_flags(["--doorbells", "2"]).unwrap());
    let connect = |queue, doorbell| mailbox::DoorbellArgs { queue, doorbell, ..Default::default() };
    assert_eq!(rig.fails(Opcode::ConnectDoorbell, connect(1, 0)), Status::BadArgument, "kernel-mode queue");
    rig.create_queue(2, mailbox::QUEUE_FLAG_USER_MODE_SUBMISSION);
    rig.create_queue(3, mailbox::QUEUE_FLAG_USER_MODE_SUBMISSION);
    assert_eq!(rig.fails(Opcode::ConnectDoorbell, connect(2, 2)), Status::BadArgument, "out of range");
    rig.ok(Opcode::ConnectDoorbell, connect(2, 1));
    assert_eq!(rig.queue_state(2), QueueState::Ready { cursor: None }, "a connect kicks");
    assert_eq!(rig.fails(Opcode::ConnectDoorbell, connect(3, 1)), Status::BadObject, "taken");
    assert_eq!(rig.fails(Opcode::KickQueue, object(2)), Status::BadArgument, "user-mode queues take doorbells");
    rig.gpu.lock().queues.get_mut(&QueueId::new(2)).unwrap().state = QueueState::Idle;
    crate::gpu::commands::doorbell_rung(&rig.gpu, 1);
    assert_eq!(rig.queue_state(2), QueueState::Ready { cursor: None });
    rig.ok(Opcode::DisconnectDoorbell, connect(2, 0));
    assert_eq!(rig.fails(Opcode::DisconnectDoorbell, connect(2, 0)), Status::BadObject);
    rig.ok(Opcode::ConnectDoorbell, connect(3, 1));

    let global = Rig::new(DeviceConfig::from_flags(["--doorbell-model", "global"]).unwrap());
    global.create_queue(2, mailbox::QUEUE_FLAG_USER_MODE_SUBMISSION);
    global.create_queue(3, mailbox::QUEUE_FLAG_USER_MODE_SUBMISSION);
    assert_eq!(global.fails(Opcode::ConnectDoorbell, connect(2, 1)), Status::BadArgument, "only doorbell 0");
    global.ok(Opcode::ConnectDoorbell, connect(2, 0));
    global.ok(Opcode::ConnectDoorbell, connect(3, 0));
}

fn register(rig: &Rig, handle: u64, kind: FenceKind) -> Result<(), (Status, String)> {
    let loc = |address| mailbox::FenceLocation { space: mailbox::LOCATION_SYSTEM_VA, address, ..Default::default() };
    let args = mailbox::RegisterFenceArgs {
        handle,
        kind: kind as u32,
        current_value: loc(FREE_VA),
        monitored_value: loc(FREE_VA + 8),
        ..Default::default()
    };
    rig.command(Opcode::RegisterFence, args)
}

fn values(entries: &[(u64, u64)]) -> Vec<u8> {
    let count = u32::try_from(entries.len()).unwrap();
    let mut block = bytes(mailbox::FenceValuesArgs { count, ..Default::default() });
    for &(handle, value) in entries {
        block.extend(bytes(mailbox::FenceValue { handle, value }));
    }
    block
}

#[test]
fn fences_register_once_per_location() {
    let rig = Rig::new(DeviceConfig::default());
    assert_eq!(register(&rig, 0, FenceKind::Default).unwrap_err().0, Status::BadArgument, "handle 0");
    register(&rig, 5, FenceKind::Default).unwrap();
    assert_eq!(register(&rig, 5, FenceKind::Default).unwrap_err().0, Status::BadObject);
    assert_eq!(register(&rig, 6, FenceKind::Default).unwrap_err().0, Status::BadObject, "same CurrentValue");
    rig.ok(Opcode::UnregisterFence, mailbox::FenceHandleArgs { handle: 5, ..Default::default() });
    register(&rig, 6, FenceKind::Default).unwrap();
    let no64 = Rig::new(DeviceConfig::from_flags(["--no-64bit-atomics"]).unwrap());
    assert_eq!(register(&no64, 5, FenceKind::Default).unwrap_err().0, Status::BadArgument);
    register(&no64, 5, FenceKind::Monitored).unwrap();
}

#[test]
fn a_monitored_value_update_catches_up_with_a_signal_that_passed_it() {
    let rig = Rig::new(DeviceConfig::default());
    register(&rig, 5, FenceKind::Default).unwrap();
    rig.write(FREE_PA, &10u64.to_le_bytes());
    rig.command_bytes(Opcode::UpdateMonitoredValues, values(&[(5, 20)])).unwrap();
    assert_eq!(rig.read_u64(FREE_PA + 8), 20);
    assert!(rig.records().is_empty(), "CurrentValue below: no record");
    rig.command_bytes(Opcode::UpdateMonitoredValues, values(&[(5, 9)])).unwrap();
    let r = rig.records();
    assert_eq!((r.len(), r[0].kind, r[0].fence, r[0].value), (1, RecordKind::NativeFenceSignaled as u32, 5, 10));
    assert_eq!(rig.sink.causes(), vec![irq::cause::NATIVE_FENCE]);
    assert_eq!(rig.command_bytes(Opcode::UpdateMonitoredValues, values(&[(9, 1)])).unwrap_err().0, Status::BadObject);

    let quiet = Rig::new(DeviceConfig::from_flags(["--inject", "no-catch-up-record"]).unwrap());
    register(&quiet, 5, FenceKind::Default).unwrap();
    quiet.write(FREE_PA, &10u64.to_le_bytes());
    quiet.command_bytes(Opcode::UpdateMonitoredValues, values(&[(5, 9)])).unwrap();
    assert!(quiet.records().is_empty(), "NoCatchUpRecord drops it");
}

#[test]
fn fence_value_batches_must_match_their_length() {
    let rig = Rig::new(DeviceConfig::default());
    register(&rig, 5, FenceKind::Default).unwrap();
    let mut block = values(&[(5, 1)]);
    block.extend([0u8; 16]);
    assert_eq!(rig.command_bytes(Opcode::UpdateCurrentValues, block).unwrap_err().0, Status::BadLength);
    let mut huge = values(&[]);
    huge[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(rig.command_bytes(Opcode::UpdateCurrentValues, huge).unwrap_err().0, Status::BadLength, "no overflow");
    rig.command_bytes(Opcode::UpdateCurrentValues, values(&[(5, 42)])).unwrap();
    assert_eq!(rig.read_u64(FREE_PA), 42);
}

#[test]
fn the_interrupt_ring_must_be_aligned_and_inside_guest_memory() {
    let rig = Rig::bare(DeviceConfig::default());
    let ring = |base_pa, entries| mailbox::SetInterruptRingArgs { base_pa, entries, ..Default::default() };
    assert_eq!(rig.fails(Opcode::SetInterruptRing, ring(IRQ_RING, 3)), Status::BadArgument);
    assert_eq!(rig.fails(Opcode::SetInterruptRing, ring(IRQ_RING + 8, 4)), Status::BadArgument);
    assert_eq!(rig.fails(Opcode::SetInterruptRing, ring(RAM - 0x1000, 128)), Status::BadAddress);
    rig.ok(Opcode::SetInterruptRing, ring(RAM - 0x1000, 4));
}

#[test]
fn device_and_engine_power_stop_scheduling() {
    let mut rig = Rig::new(DeviceConfig::default());
    let power = |target, state| mailbox::PowerArgs { target, state, ..Default::default() };
    rig.ok(Opcode::SetDevicePower, power(0, 3));
    rig.submit(&pk(
        belfry_abi::packet::Opcode::WriteData32,
        belfry_abi::packet::WriteData32 { va: FREE_VA, value: 1, ..Default::default() },
    ));
    assert!(!rig.gpu.lock().schedulable(QueueId::new(1)));
    assert_eq!(rig.run(), 0, "nothing runs in D3");
    rig.ok(Opcode::SetDevicePower, power(0, 0));
    rig.ok(Opcode::SetEnginePower, power(ENGINE.raw(), 3));
    assert_eq!(rig.run(), 0, "nothing runs on an engine in F1");
    assert_eq!(rig.fails(Opcode::SetEnginePower, power(99, 0)), Status::BadArgument);
    rig.ok(Opcode::SetEnginePower, power(ENGINE.raw(), 0));
    rig.run();
    assert_eq!(rig.read_u32(FREE_PA), 1);
}

#[test]
fn vram_fence_locations_near_the_top_of_the_address_range_are_refused() {
    let rig = Rig::new(DeviceConfig::default());
    let vram = |address| mailbox::FenceLocation { space: mailbox::LOCATION_VRAM, address, ..Default::default() };
    let size = rig.gpu.ports.vram.size();
    for (handle, address) in [(5, u64::MAX - 7), (6, size), (7, u64::MAX - 15)] {
        let args = mailbox::RegisterFenceArgs {
            handle,
            kind: FenceKind::Monitored as u32,
            current_value: vram(address),
            ..Default::default()
        };
        assert_eq!(rig.command(Opcode::RegisterFence, args).unwrap_err().0, Status::BadArgument, "{address:#x}");
    }
    let last = mailbox::RegisterFenceArgs {
        handle: 8,
        kind: FenceKind::Monitored as u32,
        current_value: vram(size - 8),
        ..Default::default()
    };
    rig.command(Opcode::RegisterFence, last).unwrap();
}

fn reset(rig: &Rig, min_busy_ms: u32) -> mailbox::ResetEngineArgs {
    rig.ok(Opcode::ResetEngine, mailbox::ResetEngineArgs { engine: ENGINE.raw(), min_busy_ms, ..Default::default() });
    rig.gpu.ports.ram.memory().read_obj::<Wire<mailbox::ResetEngineArgs>>(GuestAddress(ARGS)).unwrap().0
}

/// proves: ENG-06 (device side) — `RESET_ENGINE` drops the work of the queue whose command
/// buffer ran longest and faults its context; a queue of another context keeps its unfinished
/// buffer and its context runs; a queue that merely waited its turn is never blamed.
#[test]
fn an_engine_reset_drops_only_the_guilty_queue() {
    use crate::gpu::state::Cursor;
    use std::time::Duration;
    let mut rig = Rig::new(DeviceConfig::from_flags(["--hang-timeout-ms", "60000"]).unwrap());
    rig.ok(Opcode::CreateContext, mailbox::CreateContextArgs { id: 2, address_space: 1, ..Default::default() });
    rig.ok(
        Opcode::CreateQueue,
        mailbox::CreateQueueArgs {
            id: 2,
            context: 2,
            engine: ENGINE.raw(),
            ring_entries: 16,
            ring_va: RING_VA,
            ring_control_va: CONTROL_VA,
            ..Default::default()
        },
    );
    let jump = belfry_abi::packet::Jump { va: CMDBUF_VA, size_bytes: 16, ..Default::default() };
    rig.submit(&pk(belfry_abi::packet::Opcode::Jump, jump));
    std::thread::sleep(Duration::from_millis(5));
    while rig.queue_state(1).hang_rank().unwrap_or_default() < Duration::from_millis(20) {
        assert!(crate::gpu::engine::step(&rig.gpu, ENGINE), "the loop keeps its engine busy");
    }
    let innocent = QueueState::Ready {
        cursor: Some(Cursor { va: CMDBUF_VA, end: CMDBUF_VA + 64, busy: Duration::from_millis(1), continues: false }),
    };
    rig.gpu.lock().queues.get_mut(&QueueId::new(2)).unwrap().state = innocent;

    let none = reset(&rig, 60_000);
    assert_eq!((none.guilty_queue, none.guilty_context), (irq::NONE, irq::NONE), "nobody ran that long");
    assert_eq!(rig.context_state(), ContextState::Active);

    let out = reset(&rig, 10);
    assert_eq!((out.guilty_queue, out.guilty_context), (1, 1));
    assert_eq!(rig.context_state().fault_info().map(|f| f.reason), Some(belfry_abi::engine::FaultReason::EngineReset));
    assert_eq!(rig.queue_state(1), QueueState::Idle, "its work is dropped");
    assert_eq!(rig.queue_state(2), innocent, "the other queue keeps its unfinished buffer");
    assert!(rig.gpu.lock().contexts[&ContextId::new(2)].state.runs());
    assert!(rig.gpu.lock().schedulable(QueueId::new(2)), "the engine runs again");
    assert_eq!(
        rig.fails(Opcode::ResetEngine, mailbox::ResetEngineArgs { engine: 9, ..Default::default() }),
        Status::BadArgument
    );
}

/// The test-only `mailbox-stall`: a NOTIFY with the stall token makes every later command go
/// unanswered (no status, no completion interrupt) until the device is reset.
#[test]
fn the_mailbox_stall_injection_silences_the_mailbox_until_a_reset() {
    let config = DeviceConfig::from_flags(["--inject", "mailbox-stall"]).unwrap();
    let mut rig = Rig::new(config);
    let notify = belfry_abi::packet::Notify { token: belfry_abi::regs::MAILBOX_STALL_TOKEN, ..Default::default() };
    rig.submit(&pk(belfry_abi::packet::Opcode::Notify, notify));
    rig.run();
    assert!(rig.gpu.lock().mailbox_stalled);
    rig.gpu.reset();
    assert!(!rig.gpu.lock().mailbox_stalled, "a reset clears it");
    let mut plain = Rig::new(DeviceConfig::default());
    plain.submit(&pk(belfry_abi::packet::Opcode::Notify, notify));
    plain.run();
    assert!(!plain.gpu.lock().mailbox_stalled, "only with the injection");
}

/// The test-only stale sequence number (`mailbox-stall` with `MAILBOX_STALE_SEQ_TOKEN`): armed by
/// the NOTIFY only on a device with the injection, cleared by a reset (the guest test
/// `stall::a_completion_of_another_sequence_is_refused_and_the_device_recovered` sees the
/// answer).
#[test]
fn the_stale_sequence_injection_is_armed_by_its_token_and_cleared_by_a_reset() {
    let token = belfry_abi::regs::MAILBOX_STALE_SEQ_TOKEN;
    let notify = belfry_abi::packet::Notify { token, ..Default::default() };
    let config = DeviceConfig::from_flags(["--inject", "mailbox-stall"]).unwrap();
    let mut rig = Rig::new(config);
    rig.submit(&pk(belfry_abi::packet::Opcode::Notify, notify));
    rig.run();
    assert!(rig.gpu.lock().mailbox_stale_seq);
    rig.gpu.reset();
    assert!(!rig.gpu.lock().mailbox_stale_seq, "a reset clears it");
    let mut plain = Rig::new(DeviceConfig::default());
    plain.submit(&pk(belfry_abi::packet::Opcode::Notify, notify));
    plain.run();
    assert!(!plain.gpu.lock().mailbox_stale_seq, "only with the injection");
}

/// In D3hot no slice starts and a rung doorbell only latches: the queue runs once in D0.
#[test]
fn d3hot_latches_doorbells_and_d0_runs_their_work() {
    let mut rig = Rig::new(DeviceConfig::default());
    rig.gpu.set_d3(true);
    let write = belfry_abi::packet::WriteData32 { va: FREE_VA, value: 0xD0, ..Default::default() };
    rig.submit(&pk(belfry_abi::packet::Opcode::WriteData32, write));
    assert_eq!(rig.run(), 0, "nothing runs in D3hot");
    assert!(rig.queue_state(1).has_work(), "the kick is latched");
    rig.gpu.set_d3(false);
    assert!(rig.run() > 0, "the latched work runs in D0");
    assert_eq!(rig.read_index(), 1);
}

/// Registers a native fence `handle` whose CurrentValue is at `FREE_VA + offset` (its
/// MonitoredValue 8 bytes on, never reached).
fn register_at(rig: &Rig, handle: u64, offset: u64) {
    rig.write(FREE_PA + offset + 8, &u64::MAX.to_le_bytes());
    let loc = |address| mailbox::FenceLocation { space: mailbox::LOCATION_SYSTEM_VA, address, ..Default::default() };
    let args = mailbox::RegisterFenceArgs {
        handle,
        kind: belfry_abi::fence::FenceKind::Default as u32,
        current_value: loc(FREE_VA + offset),
        monitored_value: loc(FREE_VA + offset + 8),
        ..Default::default()
    };
    rig.ok(Opcode::RegisterFence, args);
}

/// `QUERY_LOST_SIGNALS` of the rig's context with room for `capacity` entries: its result
/// and the entries written.
fn lost_signals(rig: &Rig, capacity: u32) -> Result<(mailbox::LostSignalsArgs, Vec<mailbox::FenceValue>), Status> {
    let args = mailbox::LostSignalsArgs { context: CONTEXT.raw(), capacity, ..Default::default() };
    let mut block = bytes(args);
    block.resize(block.len() + capacity as usize * 16, 0);
    rig.command_bytes(Opcode::QueryLostSignals, block).map_err(|e| e.0)?;
    let mem = rig.gpu.ports.ram.memory();
    let out = mem.read_obj::<Wire<mailbox::LostSignalsArgs>>(GuestAddress(ARGS)).unwrap().0;
    let entries = (0..u64::from(out.count))
        .map(|i| mem.read_obj::<Wire<mailbox::FenceValue>>(GuestAddress(ARGS + 32 + i * 16)).unwrap().0)
        .collect();
    Ok((out, entries))
}

/// proves: ENG-06 (device side) — after `RESET_ENGINE` drops a looping queue, the device names
/// the registered fences its unexecuted work (the ring entries behind the loop) was going to
/// signal, each with the highest value named, and no other fence: not one signalled only by
/// work that already ran, not one no work names, not an unregistered address.
#[test]
fn the_fences_a_lost_contexts_dropped_work_would_signal_are_named() {
    use std::time::Duration;
    let signal = |offset: u64, value| {
        pk(
            belfry_abi::packet::Opcode::FenceSignal,
            belfry_abi::packet::FenceSignal {
                fence_va: FREE_VA + offset,
                value,
                log_entry: belfry_abi::packet::NO_LOG,
                ..Default::default()
            },
        )
    };
    let mut rig = Rig::new(DeviceConfig::from_flags(["--hang-timeout-ms", "60000"]).unwrap());
    for (handle, offset) in [(0x70, 0), (0x71, 0x20), (0x72, 0x40), (0x73, 0x60)] {
        register_at(&rig, handle, offset);
    }
    rig.submit(&signal(0x60, 1));
    rig.run();
    assert_eq!(rig.read_u64(FREE_PA + 0x60), 1, "work that ran before the loss");
    assert_eq!(lost_signals(&rig, 4).unwrap_err(), Status::BadObject, "the context is not faulted");
    // A buffer that loops on itself (its JUMP targets its own start), then two buffers behind it.
    let looping = rig.next_cmdbuf_va();
    let jump = belfry_abi::packet::Jump { va: looping, size_bytes: 16, ..Default::default() };
    rig.submit(&pk(belfry_abi::packet::Opcode::Jump, jump));
    rig.push(&[signal(0, 4), signal(0x20, 2), signal(0x100, 5)].concat());
    rig.push(&[signal(0, 9), signal(0, 3)].concat());
    std::thread::sleep(Duration::from_millis(5));
    while rig.queue_state(1).hang_rank().unwrap_or_default() < Duration::from_millis(20) {
        assert!(crate::gpu::engine::step(&rig.gpu, ENGINE), "the loop keeps its engine busy");
    }
    assert_eq!(reset(&rig, 10).guilty_context, CONTEXT.raw());
    let (out, entries) = lost_signals(&rig, 4).unwrap();
    let found: Vec<(u64, u64)> = entries.iter().map(|e| (e.handle, e.value)).collect();
    assert_eq!(found, [(0x70, 9), (0x71, 2)], "by name, each at the highest value its lost work named");
    assert_eq!((out.count, out.total), (2, 2));
    let (short, one) = lost_signals(&rig, 1).unwrap();
    assert_eq!((short.count, short.total, one.len()), (1, 2, 1), "a short block says how many there are");
    let args = mailbox::LostSignalsArgs { context: CONTEXT.raw(), capacity: 3, ..Default::default() };
    assert_eq!(rig.command_bytes(Opcode::QueryLostSignals, bytes(args)).unwrap_err().0, Status::BadArgument);
    let other = mailbox::LostSignalsArgs { context: 9, ..Default::default() };
    assert_eq!(rig.command_bytes(Opcode::QueryLostSignals, bytes(other)).unwrap_err().0, Status::BadObject);
}

fn move_monitored(rig: &Rig, handle: u64, to: mailbox::FenceLocation) -> Result<(), (Status, String)> {
    rig.command(
        Opcode::MoveMonitoredValue,
        mailbox::MoveMonitoredArgs { handle, monitored_value: to, ..Default::default() },
    )
}

/// proves: NF-14 (device side) — `MOVE_MONITORED_VALUE`: a VRAM MonitoredValue demoted to system
/// memory keeps its value, the engines' decision and the CMP's updates use the new place at
/// once, and a move whose value CurrentValue already passed interrupts.
#[test]
fn a_moved_monitored_value_keeps_its_value_and_engines_compare_against_the_new_place() {
    let mut rig = Rig::new(DeviceConfig::default());
    let vram = mailbox::FenceLocation { space: mailbox::LOCATION_VRAM, address: 0x40, ..Default::default() };
    let system =
        mailbox::FenceLocation { space: mailbox::LOCATION_SYSTEM_VA, address: FREE_VA + 8, ..Default::default() };
    let args = mailbox::RegisterFenceArgs {
        handle: 5,
        kind: FenceKind::Default as u32,
        current_value: mailbox::FenceLocation { address: FREE_VA, ..system },
        monitored_value: vram,
        ..Default::default()
    };
    rig.ok(Opcode::RegisterFence, args);
    rig.write(FREE_PA, &10u64.to_le_bytes());
    rig.command_bytes(Opcode::UpdateMonitoredValues, values(&[(5, 20)])).unwrap();
    move_monitored(&rig, 5, system).unwrap();
    assert_eq!(rig.read_u64(FREE_PA + 8), 20, "the value is copied to the new place");
    assert!(rig.records().is_empty(), "CurrentValue below: no record");

    // The CPU lowers the system copy (nothing but the new place says 5 now): an engine's signal
    // past it interrupts, so the engine compares against the new place, not VRAM (still 20).
    rig.write(FREE_PA + 8, &5u64.to_le_bytes());
    let signal = pk(
        packet::Opcode::FenceSignal,
        packet::FenceSignal { fence_va: FREE_VA, value: 11, log_entry: packet::NO_LOG, ..Default::default() },
    );
    rig.submit(&signal);
    rig.run();
    let r = rig.records();
    assert_eq!((r.len(), r[0].fence, r[0].value), (1, 5, 11), "the signal compared with the new place");

    // An update lands in the new place; a move whose value CurrentValue already passed interrupts.
    rig.command_bytes(Opcode::UpdateMonitoredValues, values(&[(5, 7)])).unwrap();
    assert_eq!(rig.read_u64(FREE_PA + 8), 7);
    let before = rig.records().len();
    move_monitored(&rig, 5, mailbox::FenceLocation { address: 0x80, ..vram }).unwrap();
    let r = rig.records();
    assert_eq!((r.len(), r[before].fence, r[before].value), (before + 1, 5, 11), "catch-up record after the move");

    assert_eq!(move_monitored(&rig, 9, system).unwrap_err().0, Status::BadObject, "no such fence");
    let current = mailbox::FenceLocation { address: FREE_VA, ..system };
    assert_eq!(move_monitored(&rig, 5, current).unwrap_err().0, Status::BadArgument, "onto CurrentValue");
    let far = mailbox::FenceLocation { address: 1 << 40, ..vram };
    assert_eq!(move_monitored(&rig, 5, far).unwrap_err().0, Status::BadArgument, "outside VRAM");
    rig.ok(Opcode::UnregisterFence, mailbox::FenceHandleArgs { handle: 5, ..Default::default() });
    register(&rig, 6, FenceKind::Monitored).unwrap();
    assert_eq!(move_monitored(&rig, 6, vram).unwrap_err().0, Status::BadArgument, "a monitored fence has none");
}
