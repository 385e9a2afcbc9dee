//! `MOVE_FENCE_STORAGE` (NF-18, device side): an INTRA_GPU fence's CurrentValue and
//! MonitoredValue moved from VRAM to system memory, the registration re-keyed by the new
//! CurrentValue place, and every malformed command refused with a status.

use std::sync::atomic::Ordering;

use belfry_abi::fence::FenceKind;
use belfry_abi::mailbox::{self, Opcode, Status};

use super::*;

/// The INTRA_GPU fence's VRAM page (CurrentValue at 0, MonitoredValue at 2048).
const VRAM_PAGE: u64 = 0x1000;
/// Where the context sees the fence's CurrentValue.
const FENCE_VA: u64 = EXTRA_VA;
/// The system page the storage moves to: its system VA and guest physical address.
const SYSTEM_VA: u64 = FREE_VA + 0x1000;
/// See [`SYSTEM_VA`].
const SYSTEM_PA: u64 = FREE_PA + 0x1000;
/// MonitoredValue's offset in either page.
const MONITORED: u64 = 2048;

fn vram(address: u64) -> mailbox::FenceLocation {
    mailbox::FenceLocation { space: mailbox::LOCATION_VRAM, address, ..Default::default() }
}

fn system(address: u64) -> mailbox::FenceLocation {
    mailbox::FenceLocation { space: mailbox::LOCATION_SYSTEM_VA, address, ..Default::default() }
}

fn move_storage(
    rig: &Rig,
    handle: u64,
    current: mailbox::FenceLocation,
    monitored: mailbox::FenceLocation,
) -> Result<(), (Status, String)> {
    let args = mailbox::MoveFenceStorageArgs {
        handle,
        current_value: current,
        monitored_value: monitored,
        ..Default::default()
    };
    rig.command(Opcode::MoveFenceStorage, args)
}

fn register(
    rig: &Rig,
    handle: u64,
    kind: FenceKind,
    current: mailbox::FenceLocation,
    monitored: mailbox::FenceLocation,
) {
    let args = mailbox::RegisterFenceArgs {
        handle,
        kind: kind as u32,
        current_value: current,
        monitored_value: monitored,
        ..Default::default()
    };
    rig.ok(Opcode::RegisterFence, args);
}

fn set_monitored(rig: &Rig, handle: u64, value: u64) {
    let mut block = bytes(mailbox::FenceValuesArgs { count: 1, ..Default::default() });
    block.extend(bytes(mailbox::FenceValue { handle, value }));
    rig.command_bytes(Opcode::UpdateMonitoredValues, block).unwrap();
}

fn signal(value: u64) -> Vec<u8> {
    pk(
        packet::Opcode::FenceSignal,
        packet::FenceSignal { fence_va: FENCE_VA, value, log_entry: packet::NO_LOG, ..Default::default() },
    )
}

fn vram_u64(rig: &Rig, offset: u64) -> u64 {
    rig.gpu.ports.vram.load_u64(offset, Ordering::SeqCst).unwrap()
}

/// An INTRA_GPU fence in VRAM at [`VRAM_PAGE`], mapped at [`FENCE_VA`] of the rig's context,
/// signaled to 5 by the GPU, MonitoredValue 9.
fn intra_gpu_fence_at_five(rig: &mut Rig) {
    register(rig, 7, FenceKind::IntraGpu, vram(VRAM_PAGE), vram(VRAM_PAGE + MONITORED));
    rig.map_process_vram(FENCE_VA, VRAM_PAGE);
    set_monitored(rig, 7, 9);
    rig.submit(&signal(5));
    rig.run();
    assert_eq!(vram_u64(rig, VRAM_PAGE), 5, "the GPU signal landed in VRAM");
}

/// proves: NF-18 (device side) — `MOVE_FENCE_STORAGE`: an INTRA_GPU fence moved from VRAM to a
/// system page keeps both values; once its context's entry points at the new page, a GPU
/// signal there is the fence's (its interrupt decision is made, the old VRAM place is left
/// alone), the old place can hold another fence, and a move whose MonitoredValue CurrentValue
/// already passed interrupts.
#[test]
fn moved_intra_gpu_storage_keeps_its_values_and_the_registration_follows_it() {
    let mut rig = Rig::new(DeviceConfig::default());
    assert!(rig.gpu.ports.regs.caps().fence_storage_move(), "CAPS.fence_storage_move");
    intra_gpu_fence_at_five(&mut rig);
    rig.ok(Opcode::SuspendContext, mailbox::ObjectArgs { id: CONTEXT.raw(), ..Default::default() });
    move_storage(&rig, 7, system(SYSTEM_VA), system(SYSTEM_VA + MONITORED)).unwrap();
    assert_eq!(rig.read_u64(SYSTEM_PA), 5, "CurrentValue copied");
    assert_eq!(rig.read_u64(SYSTEM_PA + MONITORED), 9, "MonitoredValue copied");
    assert!(rig.records().is_empty(), "CurrentValue 5 ≤ MonitoredValue 9: no record");
    rig.map_process(FENCE_VA, SYSTEM_PA);
    rig.ok(Opcode::ResumeContext, mailbox::ObjectArgs { id: CONTEXT.raw(), ..Default::default() });

    rig.submit(&signal(10));
    rig.run();
    assert_eq!(rig.read_u64(SYSTEM_PA), 10, "the signal lands in the new place");
    assert_eq!(vram_u64(&rig, VRAM_PAGE), 5, "the old place is left alone");
    let r = rig.records();
    assert_eq!((r.len(), r[0].fence, r[0].value), (1, 7, 10), "the new place is the fence's: 10 > 9 interrupts");
    rig.submit(&signal(8));
    rig.run();
    assert_eq!(rig.read_u64(SYSTEM_PA), 10, "a signal below CurrentValue at the new place is refused");

    register(&rig, 8, FenceKind::IntraGpu, vram(VRAM_PAGE), vram(VRAM_PAGE + MONITORED));
    rig.ok(Opcode::UnregisterFence, mailbox::FenceHandleArgs { handle: 8, ..Default::default() });

    // The CPU lowers MonitoredValue behind the device's back: the move back reads 10 > 3.
    rig.write(SYSTEM_PA + MONITORED, &3u64.to_le_bytes());
    let before = rig.records().len();
    move_storage(&rig, 7, vram(VRAM_PAGE), vram(VRAM_PAGE + MONITORED)).unwrap();
    assert_eq!((vram_u64(&rig, VRAM_PAGE), vram_u64(&rig, VRAM_PAGE + MONITORED)), (10, 3));
    let r = rig.records();
    assert_eq!((r.len(), r[before].fence, r[before].value), (before + 1, 7, 10), "catch-up record after the move");
}

/// proves: NF-18 (device side) — a `MOVE_FENCE_STORAGE` with garbage arguments completes with a
/// status and changes nothing: no such fence, a fence that is not INTRA_GPU, both values at one
/// place, onto another fence's CurrentValue, unaligned, outside VRAM, unmapped, an unknown
/// space, reserved bits, a short block; and a sweep of arbitrary blocks never panics.
#[test]
fn move_fence_storage_refuses_garbage_and_changes_nothing() {
    let mut rig = Rig::new(DeviceConfig::default());
    intra_gpu_fence_at_five(&mut rig);
    register(&rig, 8, FenceKind::Default, system(FREE_VA), system(FREE_VA + 8));
    let (to, to_m) = (system(SYSTEM_VA), system(SYSTEM_VA + MONITORED));
    let refused = |handle, current, monitored| move_storage(&rig, handle, current, monitored).unwrap_err().0;
    assert_eq!(refused(9, to, to_m), Status::BadObject, "no such fence");
    assert_eq!(refused(8, to, to_m), Status::BadArgument, "a DEFAULT fence's storage does not move");
    assert_eq!(refused(7, to, to), Status::BadArgument, "both values at one place");
    assert_eq!(refused(7, system(FREE_VA), to_m), Status::BadObject, "onto another fence's CurrentValue");
    assert_eq!(refused(7, system(SYSTEM_VA + 4), to_m), Status::BadArgument, "unaligned");
    assert_eq!(refused(7, vram(1 << 40), to_m), Status::BadArgument, "outside VRAM");
    assert_eq!(refused(7, to, vram(u64::MAX - 3)), Status::BadArgument, "outside VRAM, at the end of the range");
    assert_eq!(refused(7, system(EXTRA_VA + 0x10_0000), to_m), Status::BadAddress, "unmapped");
    let unknown = mailbox::FenceLocation { space: 9, ..to };
    assert_eq!(refused(7, unknown, to_m), Status::BadArgument, "unknown space");
    let reserved = mailbox::FenceLocation { reserved: 1, ..to };
    assert_eq!(refused(7, reserved, to_m), Status::BadArgument, "reserved bits");
    let mut short = bytes(mailbox::MoveFenceStorageArgs { handle: 7, ..Default::default() });
    short.truncate(40);
    assert!(rig.command_bytes(Opcode::MoveFenceStorage, short).is_err(), "a short block");
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..2000 {
        let pick = |r: u64, real: u64| if r & 1 == 0 { real } else { r };
        let loc = |r: u64, s: u64| mailbox::FenceLocation {
            // CAST: the low bits pick a space around the valid two.
            space: (s % 3) as u32,
            reserved: u32::from(s & 0x100 != 0),
            address: pick(r, SYSTEM_VA + (r & 0xff8)),
        };
        let (a, b, c, d) = (next(), next(), next(), next());
        let args = mailbox::MoveFenceStorageArgs {
            handle: if a & 0x10 == 0 { 7 } else { a },
            current_value: loc(b, a >> 8),
            monitored_value: loc(c, d),
            ..Default::default()
        };
        let _ = rig.command(Opcode::MoveFenceStorage, args);
        let _ = rig.command(
            Opcode::MoveFenceStorage,
            mailbox::MoveFenceStorageArgs {
                handle: 7,
                current_value: vram(VRAM_PAGE),
                monitored_value: vram(VRAM_PAGE + MONITORED),
                ..Default::default()
            },
        );
    }
    rig.submit(&signal(6));
    rig.run();
    assert_eq!(vram_u64(&rig, VRAM_PAGE), 6, "the fence works after the sweep");
}
