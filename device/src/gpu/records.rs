//! Interrupt records: written to the ring the driver set with `SET_INTERRUPT_RING` before the
//! vector is raised, so the handler reads causes from memory. A full ring is never overwritten:
//! the record is dropped and counted, and the next record written is a scan-all
//! native-fence record (NULL fence, evaluate legacy), which tells the driver to re-examine every
//! wait — so no wake-up is lost.

use std::sync::atomic::{fence, Ordering};

use belfry_abi::irq::{self, InterruptRecord, RecordKind};
use vm_memory::{Bytes, GuestAddress};

use crate::device::Device;
use crate::trace::Event;

/// The ring's location and the device's write state.
#[derive(Debug, Default)]
pub struct RecordRing {
    base: Option<u64>,
    entries: u32,
    write_index: u32,
    overflowed: bool,
    seq: u32,
}

impl RecordRing {
    /// Points the ring at `base` (guest physical) with `entries` slots; zeroes its header.
    pub fn set(&mut self, base: u64, entries: u32) {
        *self = RecordRing { base: Some(base), entries, write_index: 0, overflowed: false, seq: self.seq };
    }
}

/// A record naming a native fence and where it was signaled.
pub fn native_fence(
    handle: u64,
    value: u64,
    engine: u32,
    queue: u32,
    form: crate::config::InterruptForm,
) -> InterruptRecord {
    use crate::config::InterruptForm;
    let mut r = InterruptRecord {
        kind: RecordKind::NativeFenceSignaled as u32,
        engine,
        queue: irq::NONE,
        context: irq::NONE,
        value,
        ..Default::default()
    };
    match form {
        InterruptForm::Exact => r.fence = handle,
        InterruptForm::ScanAll => r.detail = irq::DETAIL_EVALUATE_LEGACY,
        InterruptForm::PerQueue => {
            r.queue = queue;
            r.detail = irq::DETAIL_PER_QUEUE;
        }
    }
    r
}

/// Writes `record` to the ring (if set) and raises `cause`. With the test-only
/// `NoFenceInterrupts` fault, fence-signaled records are dropped and traced as suppressed.
pub fn post(device: &Device, mut record: InterruptRecord, cause: u32) {
    let fence_causes = irq::cause::NATIVE_FENCE | irq::cause::MONITORED_FENCE;
    if cause & fence_causes != 0 && device.config.has_fault(crate::config::Fault::NoFenceInterrupts) {
        let vector = irq::vector_for(cause, device.config.msix_vectors);
        device.tracer.emit(Event::Interrupt { vector, cause, delivery: "suppressed" });
        return;
    }
    {
        let mut ring = device.gpu.records.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(base) = ring.base {
            let mem = device.ram.memory();
            let read: u32 = mem.load(GuestAddress(base + irq::READ_INDEX_OFFSET), Ordering::Acquire).unwrap_or(0);
            let mut to_write = Vec::with_capacity(2);
            if ring.overflowed {
                to_write.push(InterruptRecord {
                    kind: RecordKind::NativeFenceSignaled as u32,
                    engine: irq::NONE,
                    queue: irq::NONE,
                    context: irq::NONE,
                    detail: irq::DETAIL_EVALUATE_LEGACY,
                    ..Default::default()
                });
            }
            to_write.push(record);
            for mut r in to_write {
                if ring.write_index.wrapping_sub(read) >= ring.entries {
                    ring.overflowed = true;
                    let at = GuestAddress(base + irq::OVERFLOWS_OFFSET);
                    let n: u32 = mem.load(at, Ordering::Acquire).unwrap_or(0);
                    let _ = mem.store(n.wrapping_add(1), at, Ordering::Release);
                    log::warn!("{}: interrupt ring full: record dropped, scan-all pending", device.config.name);
                    break;
                }
                if r.fence == 0 && r.kind == RecordKind::NativeFenceSignaled as u32 && r.queue == irq::NONE {
                    ring.overflowed = false;
                }
                r.seq = ring.seq;
                ring.seq = ring.seq.wrapping_add(1);
                let slot = u64::from(ring.write_index & (ring.entries - 1));
                let at = base + irq::RECORDS_OFFSET + slot * std::mem::size_of::<InterruptRecord>() as u64;
                let _ = mem.write_obj(crate::wire::Wire(r), GuestAddress(at));
                ring.write_index = ring.write_index.wrapping_add(1);
                fence(Ordering::Release);
                let _ = mem.store(ring.write_index, GuestAddress(base + irq::WRITE_INDEX_OFFSET), Ordering::Release);
                record = r;
            }
        }
    }
    device.tracer.emit(Event::Record {
        kind: record.kind,
        engine: record.engine,
        queue: record.queue,
        context: record.context,
        fence: record.fence,
        value: record.value,
        address: record.address,
        detail: record.detail,
    });
    device.interrupts.raise(cause, None, &device.tracer);
}
