//! Interrupt records: written in order with sequence numbers before the interrupt; a full ring
//! drops and counts records and owes a scan-all record, written first once there is room.

use belfry_abi::ids::FenceHandle;
use belfry_abi::irq::{self, InterruptRecord, RecordKind};

use super::*;
use crate::config::InterruptForm;
use crate::gpu::records::native_fence;

fn notify(value: u64) -> InterruptRecord {
    InterruptRecord { kind: RecordKind::Notify as u32, value, ..Default::default() }
}

/// A rig whose interrupt ring has 4 entries.
fn small_ring(config: DeviceConfig) -> Rig {
    let rig = Rig::bare(config);
    let args = mailbox::SetInterruptRingArgs { base_pa: IRQ_RING, entries: 4, ..Default::default() };
    rig.ok(Opcode::SetInterruptRing, args);
    rig
}

fn record(rig: &Rig, index: u32) -> InterruptRecord {
    let at = IRQ_RING + irq::record_offset(index, 4);
    rig.gpu.ports.ram.memory().read_obj::<Wire<InterruptRecord>>(GuestAddress(at)).unwrap().0
}

#[test]
fn records_are_written_in_order_before_the_interrupt() {
    let rig = small_ring(DeviceConfig::default());
    rig.gpu.post(notify(1), irq::cause::MONITORED_FENCE);
    rig.gpu.post(notify(2), irq::cause::MONITORED_FENCE);
    assert_eq!(rig.read_u32(IRQ_RING + irq::WRITE_INDEX_OFFSET), 2);
    assert_eq!((record(&rig, 0).value, record(&rig, 0).seq), (1, 0));
    assert_eq!((record(&rig, 1).value, record(&rig, 1).seq), (2, 1));
    assert_eq!(rig.sink.causes(), vec![irq::cause::MONITORED_FENCE; 2]);
}

#[test]
fn a_full_ring_drops_and_counts_then_writes_a_scan_all_record_first() {
    let rig = small_ring(DeviceConfig::default());
    for v in 0..6 {
        rig.gpu.post(notify(v), irq::cause::MONITORED_FENCE);
    }
    assert_eq!(rig.read_u32(IRQ_RING + irq::WRITE_INDEX_OFFSET), 4, "never overwritten");
    assert_eq!(rig.read_u32(IRQ_RING + irq::OVERFLOWS_OFFSET), 2);
    assert_eq!(rig.sink.causes().len(), 6, "every cause is still raised");
    // The driver reads two records; the next post writes the scan-all record, then its own.
    rig.write(IRQ_RING + irq::READ_INDEX_OFFSET, &2u32.to_le_bytes());
    rig.gpu.post(notify(9), irq::cause::MONITORED_FENCE);
    let scan = record(&rig, 4);
    assert_eq!(
        (scan.kind, scan.fence, scan.queue, scan.detail),
        (RecordKind::NativeFenceSignaled as u32, 0, irq::NONE, irq::DETAIL_EVALUATE_LEGACY)
    );
    assert_eq!((record(&rig, 5).value, record(&rig, 5).seq), (9, 5));
    // Once written, the scan-all record is not owed again.
    rig.write(IRQ_RING + irq::READ_INDEX_OFFSET, &6u32.to_le_bytes());
    rig.gpu.post(notify(10), irq::cause::MONITORED_FENCE);
    assert_eq!((record(&rig, 6).kind, record(&rig, 6).value), (RecordKind::Notify as u32, 10));
}

#[test]
fn an_overflow_with_no_room_for_the_scan_all_record_keeps_owing_it() {
    let rig = small_ring(DeviceConfig::default());
    for v in 0..5 {
        rig.gpu.post(notify(v), irq::cause::MONITORED_FENCE);
    }
    rig.write(IRQ_RING + irq::READ_INDEX_OFFSET, &1u32.to_le_bytes());
    rig.gpu.post(notify(7), irq::cause::MONITORED_FENCE);
    assert_eq!(record(&rig, 4).detail, irq::DETAIL_EVALUATE_LEGACY, "the scan-all record took the one free slot");
    assert_eq!(rig.read_u32(IRQ_RING + irq::OVERFLOWS_OFFSET), 2, "the record itself was dropped");
}

#[test]
fn fence_records_are_suppressed_with_no_fence_interrupts() {
    let rig = small_ring(DeviceConfig::from_flags(["--inject", "no-fence-interrupts"]).unwrap());
    rig.gpu.post(notify(1), irq::cause::MONITORED_FENCE);
    rig.gpu.post(InterruptRecord { kind: RecordKind::ContextFault as u32, ..Default::default() }, irq::cause::FAULT);
    assert_eq!(rig.read_u32(IRQ_RING + irq::WRITE_INDEX_OFFSET), 1);
    assert_eq!(record(&rig, 0).kind, RecordKind::ContextFault as u32);
    assert_eq!(rig.sink.causes(), vec![irq::cause::FAULT]);
}

#[test]
fn native_fence_records_take_the_configured_form() {
    let at = Some((ENGINE, QueueId::new(3)));
    let exact = native_fence(FenceHandle::new(0x55), 7, at, InterruptForm::Exact);
    assert_eq!((exact.fence, exact.queue, exact.engine, exact.value), (0x55, irq::NONE, ENGINE.raw(), 7));
    let scan = native_fence(FenceHandle::new(0x55), 7, at, InterruptForm::ScanAll);
    assert_eq!((scan.fence, scan.detail), (0, irq::DETAIL_EVALUATE_LEGACY));
    let per_queue = native_fence(FenceHandle::new(0x55), 7, at, InterruptForm::PerQueue);
    assert_eq!((per_queue.fence, per_queue.queue, per_queue.detail), (0, 3, irq::DETAIL_PER_QUEUE));
    assert_eq!(per_queue.address, u64::from(belfry_abi::packet::NO_LOG), "no log entry named yet");
    let by_cmp = native_fence(FenceHandle::new(0x55), 7, None, InterruptForm::PerQueue);
    assert_eq!((by_cmp.engine, by_cmp.queue), (irq::NONE, irq::NONE));
}

#[test]
fn a_dropped_notify_token_is_latched_per_queue_and_posted_once_the_ring_has_room() {
    let rig = small_ring(DeviceConfig::default());
    // Queue 2's NOTIFY (token 50) and then 51 are dropped on the full ring.
    fill_then_post(&rig, &[(2, 50), (2, 51)]);
    assert_eq!(rig.read_u32(IRQ_RING + irq::OVERFLOWS_OFFSET), 2);
    // The ring drains; the next raise (another queue's) writes scan-all, queue 2's newest token, its own.
    rig.write(IRQ_RING + irq::READ_INDEX_OFFSET, &4u32.to_le_bytes());
    rig.gpu.post(on_queue(1, 9), irq::cause::MONITORED_FENCE);
    assert_eq!(record(&rig, 4).detail, irq::DETAIL_EVALUATE_LEGACY);
    let latched = record(&rig, 5);
    assert_eq!(
        (latched.kind, latched.queue, latched.value),
        (RecordKind::Notify as u32, 2, 51),
        "the newest dropped token is delivered"
    );
    assert_eq!((record(&rig, 6).queue, record(&rig, 6).value), (1, 9));
    // Delivered once: the next post writes only its own record.
    rig.gpu.post(on_queue(1, 10), irq::cause::MONITORED_FENCE);
    assert_eq!(rig.read_u32(IRQ_RING + irq::WRITE_INDEX_OFFSET), 8);
}

/// Issue 11: a storm that ends with the ring full owes the scan-all record and the latched
/// token; once the driver drains (read index advanced) and acknowledges (`INT_CLEAR`), they are
/// written and their vector raised, with no further record from any queue.
#[test]
fn the_driver_s_acknowledgement_after_its_drain_delivers_what_the_device_owes() {
    let rig = small_ring(DeviceConfig::default());
    // The storm's tail: queue 2's NOTIFYs (the last with token 51) find the ring full.
    fill_then_post(&rig, &[(2, 50), (2, 51)]);
    assert!(rig.gpu.records.lock().unwrap().owes());
    // An acknowledgement before the drain finds no room: nothing written, nothing raised.
    let raised = rig.sink.causes().len();
    rig.gpu.interrupts_acknowledged();
    assert_eq!(rig.read_u32(IRQ_RING + irq::WRITE_INDEX_OFFSET), 4);
    assert_eq!(rig.sink.causes().len(), raised);
    // The driver drains the ring and acknowledges; no queue posts anything.
    rig.write(IRQ_RING + irq::READ_INDEX_OFFSET, &4u32.to_le_bytes());
    rig.gpu.interrupts_acknowledged();
    assert_eq!(rig.read_u32(IRQ_RING + irq::WRITE_INDEX_OFFSET), 6, "the owed records were written");
    let scan = record(&rig, 4);
    assert_eq!(
        (scan.kind, scan.fence, scan.detail),
        (RecordKind::NativeFenceSignaled as u32, 0, irq::DETAIL_EVALUATE_LEGACY)
    );
    let latched = record(&rig, 5);
    assert_eq!((latched.kind, latched.queue, latched.value, latched.seq), (RecordKind::Notify as u32, 2, 51, 5));
    assert_eq!(
        rig.sink.causes()[raised..],
        [irq::cause::NATIVE_FENCE | irq::cause::MONITORED_FENCE],
        "one interrupt announces them"
    );
    // Delivered once: the next acknowledgement owes nothing and raises nothing.
    assert!(!rig.gpu.records.lock().unwrap().owes());
    rig.write(IRQ_RING + irq::READ_INDEX_OFFSET, &6u32.to_le_bytes());
    rig.gpu.interrupts_acknowledged();
    assert_eq!(rig.read_u32(IRQ_RING + irq::WRITE_INDEX_OFFSET), 6);
    assert_eq!(rig.sink.causes().len(), raised + 1);
}

/// Owed records that do not all fit stay owed (none dropped or counted again) and go out at
/// the next acknowledgement with room; nothing is written in D3hot, and the return to D0
/// delivers what is owed.
#[test]
fn owed_records_that_do_not_fit_wait_for_the_next_acknowledgement_and_none_is_written_in_d3() {
    let rig = small_ring(DeviceConfig::default());
    fill_then_post(&rig, &[(2, 12), (3, 13), (4, 14)]);
    assert_eq!(rig.read_u32(IRQ_RING + irq::OVERFLOWS_OFFSET), 3);
    // Two slots free: the scan-all record and queue 2's token; queues 3 and 4 stay latched.
    rig.write(IRQ_RING + irq::READ_INDEX_OFFSET, &2u32.to_le_bytes());
    rig.gpu.interrupts_acknowledged();
    assert_eq!(rig.read_u32(IRQ_RING + irq::WRITE_INDEX_OFFSET), 6);
    assert_eq!((record(&rig, 4).detail, record(&rig, 5).queue), (irq::DETAIL_EVALUATE_LEGACY, 2));
    assert_eq!(rig.read_u32(IRQ_RING + irq::OVERFLOWS_OFFSET), 3, "no drop is counted by a flush");
    rig.gpu.set_d3(true);
    rig.write(IRQ_RING + irq::READ_INDEX_OFFSET, &6u32.to_le_bytes());
    rig.gpu.interrupts_acknowledged();
    assert_eq!(rig.read_u32(IRQ_RING + irq::WRITE_INDEX_OFFSET), 6, "nothing written in D3hot");
    rig.gpu.set_d3(false);
    assert_eq!(rig.read_u32(IRQ_RING + irq::WRITE_INDEX_OFFSET), 8, "the return to D0 delivers");
    assert_eq!((record(&rig, 6).queue, record(&rig, 6).value), (3, 13));
    assert_eq!((record(&rig, 7).queue, record(&rig, 7).value), (4, 14));
    assert!(!rig.gpu.records.lock().unwrap().owes());
}

/// Fills the 4-record ring with queue 1's NOTIFYs (tokens 0..4), then posts a NOTIFY for each
/// `(queue, token)` of `tail`, which the full ring drops.
fn fill_then_post(rig: &Rig, tail: &[(u32, u64)]) {
    for v in 0..4 {
        rig.gpu.post(on_queue(1, v), irq::cause::MONITORED_FENCE);
    }
    for &(queue, token) in tail {
        rig.gpu.post(on_queue(queue, token), irq::cause::MONITORED_FENCE);
    }
}

/// A NOTIFY record of `queue` with `token`.
fn on_queue(queue: u32, token: u64) -> InterruptRecord {
    InterruptRecord { queue, ..notify(token) }
}
