//! Cross-adapter fences on the device side: a wait on a fence registered
//! `REGISTER_CROSS_ADAPTER` is re-read only after the GPU's epoch moved — so another adapter's
//! write is seen through the notification-only `NOTIFY_FENCE_CHANGED` (XAD-07, XAD-09), which
//! writes nothing — and a device started with `--no-native-fences` says so and refuses native
//! fences and user-mode queues.

use belfry_abi::fence::FenceKind;
use belfry_abi::packet::{self, Opcode as P};
use belfry_abi::regs::{CAPS, ENGINE_INFO};

use super::*;

/// Registers fence `handle` of `kind` with CurrentValue at `FREE_VA` (MonitoredValue, held at
/// 0 as the module does for cross-adapter fences, at `FREE_VA + 8`).
fn register(rig: &Rig, handle: u64, kind: FenceKind, flags: u32) -> Result<(), (Status, String)> {
    rig.write(FREE_PA + 8, &0u64.to_le_bytes());
    let loc = |address| mailbox::FenceLocation { space: mailbox::LOCATION_SYSTEM_VA, address, ..Default::default() };
    rig.command(
        Opcode::RegisterFence,
        mailbox::RegisterFenceArgs {
            handle,
            kind: kind as u32,
            flags,
            current_value: loc(FREE_VA),
            monitored_value: loc(FREE_VA + 8),
            ..Default::default()
        },
    )
}

/// A `FENCE_WAIT` for 3 on the fence at `FREE_VA`, then a marker write at `FREE_VA + 16`.
fn wait_then_mark(rig: &mut Rig) {
    let mut buf = pk(
        P::FenceWait,
        packet::FenceWait { fence_va: FREE_VA, value: 3, log_entry: packet::NO_LOG, ..Default::default() },
    );
    buf.extend(pk(P::WriteData32, packet::WriteData32 { va: FREE_VA + 16, value: 1, ..Default::default() }));
    rig.submit(&buf);
    rig.run();
    assert!(matches!(rig.queue_state(1), QueueState::Waiting { .. }), "{:?}", rig.queue_state(1));
}

fn notify(handle: u64) -> mailbox::FenceHandleArgs {
    mailbox::FenceHandleArgs { handle, ..Default::default() }
}

/// proves: XAD-07, XAD-09 — another adapter's write to a cross-adapter fence's shared
/// CurrentValue releases a waiting hardware queue only once the driver's notification-only
/// update arrives, and that update writes nothing.
#[test]
fn a_cross_adapter_wait_is_released_by_the_notification_and_nothing_else() {
    let mut rig = Rig::new(DeviceConfig::default());
    register(&rig, 0x51, FenceKind::Default, mailbox::REGISTER_CROSS_ADAPTER).unwrap();
    wait_then_mark(&mut rig);
    // The other adapter's GPU writes the shared page: this device is not told.
    rig.write(FREE_PA, &3u64.to_le_bytes());
    assert_eq!(rig.run(), 0, "a poll does not re-read a cross-adapter fence");
    assert_eq!(rig.run(), 0);
    assert!(matches!(rig.queue_state(1), QueueState::Waiting { .. }));
    rig.ok(Opcode::NotifyFenceChanged, notify(0x51));
    rig.run();
    assert_eq!(rig.read_u32(FREE_PA + 16), 1, "released by the notification");
    assert_eq!(rig.queue_state(1), QueueState::Idle);
    assert_eq!(rig.read_u64(FREE_PA), 3, "the notification wrote nothing");
    assert_eq!(rig.read_u64(FREE_PA + 8), 0, "nor MonitoredValue");
    assert!(rig.records().is_empty(), "nor interrupted");
}

/// One notification names one fence but re-reads every queue parked on a cross-adapter fence:
/// the module sends a device one `NOTIFY_FENCE_CHANGED` per propagation pass, naming one of
/// the fences that moved in it, and the waits on the others must be released by it too.
#[test]
fn a_notification_naming_another_cross_adapter_fence_releases_the_wait_too() {
    let mut rig = Rig::new(DeviceConfig::default());
    register(&rig, 0x51, FenceKind::Default, mailbox::REGISTER_CROSS_ADAPTER).unwrap();
    let loc = |address| mailbox::FenceLocation { space: mailbox::LOCATION_SYSTEM_VA, address, ..Default::default() };
    rig.ok(
        Opcode::RegisterFence,
        mailbox::RegisterFenceArgs {
            handle: 0x54,
            kind: FenceKind::Default as u32,
            flags: mailbox::REGISTER_CROSS_ADAPTER,
            current_value: loc(FREE_VA + 32),
            monitored_value: loc(FREE_VA + 40),
            ..Default::default()
        },
    );
    wait_then_mark(&mut rig);
    rig.write(FREE_PA, &3u64.to_le_bytes());
    rig.write(FREE_PA + 32, &1u64.to_le_bytes());
    assert_eq!(rig.run(), 0);
    assert!(matches!(rig.queue_state(1), QueueState::Waiting { .. }));
    rig.ok(Opcode::NotifyFenceChanged, notify(0x54));
    rig.run();
    assert_eq!(rig.read_u32(FREE_PA + 16), 1, "released by a notification naming the other fence");
    assert_eq!(rig.queue_state(1), QueueState::Idle);
}

/// The control of the test above: the same wait on a fence registered without the flag is
/// released by the engine's poll (a CPU store the device is not told about).
#[test]
fn a_wait_on_an_ordinary_fence_is_still_released_by_the_poll() {
    let mut rig = Rig::new(DeviceConfig::default());
    register(&rig, 0x52, FenceKind::Default, 0).unwrap();
    wait_then_mark(&mut rig);
    rig.write(FREE_PA, &3u64.to_le_bytes());
    rig.run();
    assert_eq!(rig.read_u32(FREE_PA + 16), 1);
}

#[test]
fn notify_fence_changed_is_validated_and_flags_are_checked() {
    let rig = Rig::new(DeviceConfig::default());
    assert_eq!(rig.fails(Opcode::NotifyFenceChanged, notify(0x99)), Status::BadObject, "unknown fence");
    assert_eq!(register(&rig, 0x53, FenceKind::Default, 0x2).unwrap_err().0, Status::BadArgument, "unknown flag");
    assert_eq!(
        register(&rig, 0x53, FenceKind::IntraGpu, mailbox::REGISTER_CROSS_ADAPTER).unwrap_err().0,
        Status::BadArgument,
        "INTRA_GPU is never cross-adapter"
    );
    register(&rig, 0x53, FenceKind::Monitored, mailbox::REGISTER_CROSS_ADAPTER).unwrap();
    rig.ok(Opcode::NotifyFenceChanged, notify(0x53));
}

#[test]
fn a_device_without_native_fences_says_so_and_refuses_them() {
    let rig = Rig::new(DeviceConfig::from_flags(["--no-native-fences"]).unwrap());
    let read = |rig: &Rig, offset| rig.gpu.ports.regs.read(offset, &rig.gpu.ports.interrupts);
    let caps = CAPS(read(&rig, CAPS::OFFSET));
    assert!(!caps.native_fence() && !caps.intra_gpu_fence() && !caps.optimized_default_fence());
    assert!(!caps.user_mode_submission() && !caps.cross_adapter_fence() && caps.monitored_fence());
    assert!(!caps.no_64bit_atomics(), "64-bit monitored fences");
    assert_eq!(ENGINE_INFO(read(&rig, ENGINE_INFO::OFFSET)).user_mode_submission_mask(), 0);
    let native = Rig::bare(DeviceConfig::default());
    let default = CAPS(read(&native, CAPS::OFFSET));
    assert!(default.native_fence() && default.cross_adapter_fence() && default.user_mode_submission());

    assert_eq!(register(&rig, 0x54, FenceKind::Default, 0).unwrap_err().0, Status::BadArgument);
    assert_eq!(register(&rig, 0x54, FenceKind::IntraGpu, 0).unwrap_err().0, Status::BadArgument);
    register(&rig, 0x54, FenceKind::Monitored, mailbox::REGISTER_CROSS_ADAPTER).unwrap();
    let user = mailbox::CreateQueueArgs {
        id: 2,
        context: 1,
        ring_entries: 16,
        ring_va: FREE_VA + 0x1000,
        ring_control_va: FREE_VA + 0x2000,
        flags: mailbox::QUEUE_FLAG_USER_MODE_SUBMISSION,
        ..Default::default()
    };
    assert_eq!(rig.fails(Opcode::CreateQueue, user), Status::BadArgument, "kernel-mode queues only");
    rig.ok(Opcode::CreateQueue, mailbox::CreateQueueArgs { flags: 0, ..user });
}
