//! Interrupt records: written to the ring the driver set with `SET_INTERRUPT_RING` before the
//! vector is raised, so the handler reads causes from memory. A full ring is never overwritten:
//! the record is dropped and counted, and the next record written is a scan-all
//! native-fence record (NULL fence, evaluate legacy), which tells the driver to re-examine every
//! wait — so no wake-up is lost. Drops are logged at most once a second (a guest that never
//! reads its ring would otherwise fill the log), with the count since the last line.
//!
//! What the device owes (the scan-all record, each queue's latched NOTIFY token) goes out at the
//! first of: the next record write with room, or the driver's next `INT_CLEAR` write
//! ([`flush`]), which it makes after advancing the ring's read index — as an NVMe controller
//! posts a held completion once the host's head doorbell frees a slot. So a storm that ends with
//! the ring full owes nothing past the driver's drain of it.

use std::sync::atomic::{fence, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use belfry_abi::ids::{EngineId, FenceHandle, QueueId};
use belfry_abi::irq::{self, InterruptRecord, RecordKind};
use belfry_abi::packet;
use vm_memory::{Bytes, GuestAddress, GuestMemory};

use super::ports::Ports;
use crate::config::InterruptForm;
use crate::trace::{Delivery, Event};
use crate::wire::Wire;

/// The ring's location and the device's write state.
#[derive(Debug, Default)]
pub struct RecordRing {
    base: Option<u64>,
    entries: u32,
    write_index: u32,
    overflowed: bool,
    /// Per queue, the newest NOTIFY record dropped on a full ring and not yet written: posted
    /// (after the scan-all record) at the next write with room, like a latched interrupt
    /// status, so a software signal waiting on its token never waits on a lost record.
    latched_notify: std::collections::BTreeMap<u32, InterruptRecord>,
    seq: u32,
    /// Drops not yet logged, and when the last log line was written.
    unlogged: u32,
    logged_at: Option<Instant>,
}

/// The shortest time between two "interrupt ring full" log lines.
const DROP_LOG_INTERVAL: Duration = Duration::from_secs(1);

impl RecordRing {
    /// Points the ring at `base` (guest physical) with `entries` slots; zeroes its header.
    pub fn set(&mut self, base: u64, entries: u32) {
        *self = RecordRing {
            base: Some(base),
            entries,
            write_index: 0,
            overflowed: false,
            seq: self.seq,
            ..Self::default()
        };
    }

    /// Whether the device owes the driver records: a scan-all record after a drop, or a
    /// latched NOTIFY token.
    pub fn owes(&self) -> bool {
        self.base.is_some() && (self.overflowed || !self.latched_notify.is_empty())
    }

    /// Writes `record` to the ring in `mem` (a scan-all record first if an earlier one was
    /// dropped); returns the record as last written (with its sequence number), or `record`
    /// unchanged when there is no ring or it is full.
    pub fn write<M: GuestMemory>(&mut self, mem: &M, record: InterruptRecord, device: &str) -> InterruptRecord {
        self.put(mem, Some(record), device).last().copied().unwrap_or(record)
    }

    /// The driver acknowledged interrupts (`INT_CLEAR`), having advanced its read index first:
    /// writes what the device owes (the scan-all record, then the latched NOTIFY tokens) as far
    /// as the ring now has room, and returns the records written (none when nothing is owed or
    /// the ring is still full). One read of the read index; nothing is dropped or counted, what
    /// does not fit stays owed.
    pub fn flush<M: GuestMemory>(&mut self, mem: &M, device: &str) -> Vec<InterruptRecord> {
        if !self.owes() {
            return Vec::new();
        }
        self.put(mem, None, device)
    }

    /// Writes the owed records, then `record` if given, while the ring has room; returns the
    /// records written. A `record` that finds no room is dropped and counted (the scan-all
    /// record becomes owed); owed records that find none stay owed.
    fn put<M: GuestMemory>(&mut self, mem: &M, record: Option<InterruptRecord>, device: &str) -> Vec<InterruptRecord> {
        let Some(base) = self.base else { return Vec::new() };
        let read = match mem.load::<u32>(GuestAddress(base + irq::READ_INDEX_OFFSET), Ordering::Acquire) {
            Ok(read) => read,
            // A flush waits for a readable index (bus mastering on, the ring mapped).
            Err(_) if record.is_none() => return Vec::new(),
            Err(_) => 0,
        };
        let mut to_write = Vec::with_capacity(2);
        if self.overflowed {
            to_write.push(scan_all());
        }
        if let Some(r) = record.filter(is_notify) {
            // The new record is that queue's newest token: it supersedes a latched one.
            self.latched_notify.remove(&r.queue);
        }
        to_write.extend(std::mem::take(&mut self.latched_notify).into_values());
        to_write.extend(record);
        let mut written = Vec::with_capacity(to_write.len());
        let mut blocked = false;
        for mut r in to_write {
            if blocked || !irq::has_room(self.write_index, read, self.entries) {
                if is_notify(&r) {
                    self.latched_notify.insert(r.queue, r);
                }
                if !blocked {
                    blocked = true;
                    if record.is_some() {
                        self.drop_record(mem, base, device);
                    }
                }
                continue;
            }
            if r.fence == 0 && r.kind == RecordKind::NativeFenceSignaled as u32 && r.queue == irq::NONE {
                self.overflowed = false;
            }
            r.seq = self.seq;
            self.seq = self.seq.wrapping_add(1);
            let at = base + irq::record_offset(self.write_index, self.entries);
            let _ = mem.write_obj(Wire(r), GuestAddress(at));
            self.write_index = self.write_index.wrapping_add(1);
            fence(Ordering::Release);
            let _ = mem.store(self.write_index, GuestAddress(base + irq::WRITE_INDEX_OFFSET), Ordering::Release);
            written.push(r);
        }
        written
    }

    /// A new record found the ring full: counted in the ring header (the scan-all record owed)
    /// and logged at most once per [`DROP_LOG_INTERVAL`].
    fn drop_record<M: GuestMemory>(&mut self, mem: &M, base: u64, device: &str) {
        self.overflowed = true;
        let at = GuestAddress(base + irq::OVERFLOWS_OFFSET);
        let n: u32 = mem.load(at, Ordering::Acquire).unwrap_or(0);
        let _ = mem.store(n.wrapping_add(1), at, Ordering::Release);
        self.unlogged = self.unlogged.saturating_add(1);
        if self.logged_at.is_none_or(|t| t.elapsed() >= DROP_LOG_INTERVAL) {
            log::warn!(
                "{device}: interrupt ring full: {} record(s) dropped since the last such line ({} in all), scan-all pending",
                self.unlogged,
                n.wrapping_add(1)
            );
            self.unlogged = 0;
            self.logged_at = Some(Instant::now());
        }
    }
}

/// Whether `r` is a NOTIFY record.
fn is_notify(r: &InterruptRecord) -> bool {
    r.kind == RecordKind::Notify as u32
}

/// The scan-all record: NULL fence, no engine or queue, evaluate every wait (legacy included).
fn scan_all() -> InterruptRecord {
    InterruptRecord {
        kind: RecordKind::NativeFenceSignaled as u32,
        engine: irq::NONE,
        queue: irq::NONE,
        context: irq::NONE,
        detail: irq::DETAIL_EVALUATE_LEGACY,
        ..Default::default()
    }
}

/// A record naming a native fence and where it was signaled (`None`: by the CMP); a per-queue
/// record names no log entry (`packet::NO_LOG` in `address`) until its signal's is set.
pub fn native_fence(
    handle: FenceHandle,
    value: u64,
    at: Option<(EngineId, QueueId)>,
    form: InterruptForm,
) -> InterruptRecord {
    let mut r = InterruptRecord {
        kind: RecordKind::NativeFenceSignaled as u32,
        engine: at.map_or(irq::NONE, |(e, _)| e.raw()),
        queue: irq::NONE,
        context: irq::NONE,
        value,
        ..Default::default()
    };
    match form {
        InterruptForm::Exact => r.fence = handle.raw(),
        InterruptForm::ScanAll => r.detail = irq::DETAIL_EVALUATE_LEGACY,
        InterruptForm::PerQueue => {
            r.queue = at.map_or(irq::NONE, |(_, q)| q.raw());
            r.detail = irq::DETAIL_PER_QUEUE;
            // No log entry known to be this signal's; the engine names its own (`fences::signal`).
            r.address = u64::from(packet::NO_LOG);
        }
        // The engine builds the array (`fences::signal`); a signal it cannot attribute to a
        // logged entry (the CMP's, say) gets the scan-all record.
        InterruptForm::QueueArray => r.detail = irq::DETAIL_EVALUATE_LEGACY,
    }
    r
}

/// The queue-array form's record for a signal of `engine`: the queues of `named` (taken: every
/// queue whose signal log got entries since the last record, the signalling one among them)
/// when they fit one record and the signal's own entry is in its log (`logged`); otherwise the
/// scan-all record, which has the driver rescan every log and every wait.
pub fn queue_array(engine: EngineId, named: &mut std::collections::BTreeSet<u32>, logged: bool) -> InterruptRecord {
    let queues: Vec<u32> = std::mem::take(named).into_iter().collect();
    let record = if logged { irq::queue_array_record(engine.raw(), &queues) } else { None };
    record.unwrap_or_else(|| InterruptRecord { engine: engine.raw(), ..scan_all() })
}

/// Locks the record ring. Its holder reads guest memory under it (the driver's read index), a
/// read the input log orders: recording, each acquisition appends a ticket while the lock is
/// held; replaying, the lock is taken at that ticket's turn — so no thread holds it, waiting
/// for its read's turn, while the thread the log has take it next is kept out.
pub fn lock<'a>(ports: &Ports, ring: &'a Mutex<RecordRing>) -> MutexGuard<'a, RecordRing> {
    ports.recording.around(crate::record::ticket, || ring.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Writes `record` to `ring` (if set) and raises `cause`. With the test-only
/// `NoFenceInterrupts` fault, fence-signaled records are dropped and traced as suppressed.
pub fn post(ports: &Ports, ring: &Mutex<RecordRing>, record: InterruptRecord, cause: u32) {
    let fence_causes = irq::cause::NATIVE_FENCE | irq::cause::MONITORED_FENCE;
    if cause & fence_causes != 0 && ports.config.inject.drops_fence_interrupts() {
        let vector = irq::vector_for(cause, ports.config.gpu.msix_vectors);
        ports.tracer.emit(Event::Interrupt { vector, cause, delivery: Delivery::Suppressed });
        return;
    }
    let record = {
        let mut ring = lock(ports, ring);
        ring.write(&ports.ram.memory(), record, &ports.config.name)
    };
    trace(ports, &record);
    ports.interrupts.raise(cause, None, &ports.tracer);
}

/// Traces `r` as written to the interrupt ring.
fn trace(ports: &Ports, r: &InterruptRecord) {
    ports.tracer.emit(Event::Record {
        kind: r.kind,
        engine: r.engine,
        queue: r.queue,
        context: r.context,
        fence: r.fence,
        value: r.value,
        address: r.address,
        detail: r.detail,
    });
}

/// The driver acknowledged interrupts (`INT_CLEAR`) after advancing its read index: the records
/// the device owes (see [`RecordRing::flush`]) are written now, each traced, and their vector
/// raised (moderated like any record cause). Nothing happens when nothing is owed or the ring
/// is still full; the next acknowledgement or record write tries again. With the test-only
/// `NoFenceInterrupts` fault nothing is flushed (its fence records never come).
pub fn flush(ports: &Ports, ring: &Mutex<RecordRing>) {
    if ports.config.inject.drops_fence_interrupts() {
        return;
    }
    let written = {
        let mut ring = lock(ports, ring);
        ring.flush(&ports.ram.memory(), &ports.config.name)
    };
    let mut cause = 0;
    for r in &written {
        trace(ports, r);
        cause |= if is_notify(r) { irq::cause::MONITORED_FENCE } else { irq::cause::NATIVE_FENCE };
    }
    if cause != 0 {
        ports.interrupts.raise(cause, None, &ports.tracer);
    }
}
