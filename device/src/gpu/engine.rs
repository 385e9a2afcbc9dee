//! Engine executors: one thread per engine runs the queues its runlist schedules, fetching ring
//! entries and command buffers by DMA through the GPU MMU and handing each packet to
//! [`packets`](super::packets).
//!
//! A slice runs at most [`SLICE_PACKETS`] packets of one queue, then the engine picks again,
//! so equal-priority queues interleave and a looping queue cannot starve the others. A
//! `FENCE_WAIT` that is not yet satisfied parks the queue (it yields the engine) until a fence
//! changes; parked waits are re-checked at least every [`WAIT_POLL`] as well, which covers
//! CurrentValues the CPU writes directly — except waits on cross-adapter fences
//! (`REGISTER_CROSS_ADAPTER`), which are re-read only at a pick after the GPU's epoch moved (a
//! fence changed through this device, or the driver's `NOTIFY_FENCE_CHANGED`) or after a peer
//! signal named the fence ([`peer`](super::peer), XAD-15): another adapter's write is seen only
//! once the driver or that adapter says so (XAD-07, XAD-09). A guest error faults the queue's context: a status
//! the driver can query, a `ContextFault` record with the `FAULT` interrupt, a trace record —
//! and nothing else stops.
//!
//! Engines hold the object lock only to pick work and to publish results, never while they
//! touch guest memory; the queue being executed is marked on its engine
//! (`EngineStatus::current`) so commands that tear it down can wait for the slice to end, and
//! so no engine runs two slices at once: an engine with a slice running picks nothing.
//!
//! A trapped doorbell's write is received by a socket thread, which kicks the doorbell's
//! queues; when a kicked queue's engine runs nothing, that thread runs the first slice itself,
//! at most [`INLINE_PACKETS`] packets ([`run_if_idle`]), and the engine's thread takes the
//! queue on from there. A GPU's engine starts on the doorbell write; here, waking the engine's
//! thread instead put a second thread's wake-up on the host core the device threads share
//! between every doorbell and its first packet (about half the user-mode submission's
//! latency, docs/BENCHMARKS.md).

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use belfry_abi::engine::{EngineState, FaultReason, ENGINE_COUNT};
use belfry_abi::ids::{EngineId, QueueId};
use belfry_abi::irq::{self, InterruptRecord, RecordKind};
use belfry_abi::mmu::{GpuVa, GuestPa};
use belfry_abi::ring::{self, RingEntry};
use vm_memory::GuestMemory;

use super::fences;
use super::job::{Job, Step};
use super::objects::{Fence, Objects};
use super::packets;
use super::shared::Gpu;
use super::split;
use super::state::{ContextState, Cursor, Fault, SliceEnd};
use crate::mmu::{GpuMemory, MmuError, WalkStep};
use crate::trace::{BufferPhase, Event, Passed, ScheduleWhy, TraceLevel};
use crate::wire::Wire;

/// Packets per slice.
pub const SLICE_PACKETS: usize = 64;
/// Packets (and ring entries fetched) of a slice run on the socket thread that received its
/// doorbell ([`run_if_idle`]): enough for a submission's buffer, few enough that the thread is
/// soon back to the client's next message. Such a slice also ends before a packet that moves
/// bulk data ([`packets::is_bulk`]), which the engine's own thread runs.
pub const INLINE_PACKETS: usize = 16;

/// How much of a queue's work one slice may run.
#[derive(Clone, Copy)]
struct SliceLimit {
    /// Packets (and ring entries fetched).
    packets: usize,
    /// Whether it may run packets that move bulk data.
    bulk: bool,
}

/// An engine thread's slice.
const ENGINE_SLICE: SliceLimit = SliceLimit { packets: SLICE_PACKETS, bulk: true };
/// A slice on the socket thread that received the doorbell.
const INLINE_SLICE: SliceLimit = SliceLimit { packets: INLINE_PACKETS, bulk: false };
/// How often parked fence waits are re-checked without a wake-up.
pub const WAIT_POLL: Duration = Duration::from_millis(1);
/// How long an engine with nothing parked sleeps without a wake-up.
const IDLE_POLL: Duration = Duration::from_millis(50);
// CAST: a ring entry is 16 bytes.
const RING_ENTRY_BYTES: u64 = std::mem::size_of::<RingEntry>() as u64;

/// The engine threads of a device.
pub struct Engines {
    gpu: Arc<Gpu>,
    threads: Vec<JoinHandle<()>>,
}

impl Engines {
    /// Starts one executor thread per engine.
    pub fn start(gpu: Arc<Gpu>) -> std::io::Result<Self> {
        let mut threads = Vec::new();
        for engine in 0..ENGINE_COUNT {
            let g = gpu.clone();
            let name = format!("{}-{}", gpu.ports.config.name, belfry_abi::engine::engine_name(engine));
            threads.push(std::thread::Builder::new().name(name).spawn(move || run(&g, EngineId::new(engine)))?);
        }
        Ok(Engines { gpu, threads })
    }

    /// Stops the threads and waits for them.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.gpu.kill();
        // The peer-signal consumer may sleep on its page's claim word: woken, it sees the kill.
        super::peer::wake_consumer(&self.gpu);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Engines {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn run(gpu: &Gpu, engine: EngineId) {
    let mut objects = gpu.lock();
    let mut woke = false;
    loop {
        if objects.kill {
            return;
        }
        // Test-only (`SLOW_ENGINE_PICKUP_TOKEN`): a late look for work after each wake-up.
        if std::mem::take(&mut woke) && objects.slow_engine_pickup {
            drop(objects);
            std::thread::sleep(Duration::from_millis(belfry_abi::regs::SLOW_ENGINE_PICKUP_MS));
            objects = gpu.lock();
            continue;
        }
        let o = &mut *objects;
        let Some(job) = pick(gpu, o, engine) else {
            let parked =
                o.scheduler.runlist(engine).any(|q| o.queues.get(&q).is_some_and(|q| q.state.wait().is_some()));
            let timeout = if parked { WAIT_POLL } else { IDLE_POLL };
            objects = gpu.wait_engine(engine, objects, timeout);
            woke = true;
            continue;
        };
        drop(objects);
        run_job(gpu, engine, job, ENGINE_SLICE);
        objects = gpu.lock();
    }
}

/// Runs one slice of at most [`INLINE_PACKETS`] of `engine`'s work, none moving bulk data, on
/// the calling thread (a trapped doorbell's socket thread) when the engine runs nothing and a
/// queue of its runlist is ready; false otherwise (and under the test-only late pickup, whose
/// premise is the engine's own thread). The engine's thread is woken when the slice is
/// published and goes on from there.
pub(super) fn run_if_idle(gpu: &Gpu, engine: EngineId) -> bool {
    let job = {
        let mut o = gpu.lock();
        if o.slow_engine_pickup {
            return false;
        }
        pick(gpu, &mut o, engine)
    };
    job.map(|job| run_job(gpu, engine, job, INLINE_SLICE)).is_some()
}

/// Runs a slice of the picked `job` within `limit` and publishes its outcome (unless a reset
/// intervened).
fn run_job(gpu: &Gpu, engine: EngineId, job: Job, limit: SliceLimit) {
    let (end, job) = run_slice(gpu, job, limit);
    let walk = match end {
        SliceEnd::Fault(reason, address) if is_mmu(reason) && gpu.ports.tracer.wants(TraceLevel::Control) => {
            let guard = gpu.ports.ram.memory();
            GpuMemory::new(&guard, &gpu.ports.vram).walk(job.root, GpuVa(address))
        }
        _ => Vec::new(),
    };
    let mut objects = gpu.lock();
    let o = &mut *objects;
    if let Some(e) = o.engine_mut(engine) {
        e.current = None;
        e.last_active = Instant::now();
        e.idle_reported = false;
    }
    let record = if o.generation == job.generation { publish(gpu, o, job, end, walk) } else { None };
    drop(objects);
    // Interrupts are raised outside the object lock: an eventfd write never holds up a pick.
    if let Some((record, cause)) = record {
        gpu.post(record, cause);
    }
    gpu.notify();
}

/// One pick and slice of `engine` on the calling thread; false when nothing was ready.
#[cfg(test)]
pub(super) fn step(gpu: &Gpu, engine: EngineId) -> bool {
    let job = pick(gpu, &mut gpu.lock(), engine);
    job.map(|job| run_job(gpu, engine, job, ENGINE_SLICE)).is_some()
}

/// Picks the queue `engine` runs next, marks it running on the engine and returns its job.
fn pick(gpu: &Gpu, o: &mut Objects, engine: EngineId) -> Option<Job> {
    if o.d3
        || !gpu.ports.ram.bus_master()
        || o.engine(engine).is_none_or(|e| e.state != EngineState::Active || e.resetting || e.current.is_some())
    {
        return None;
    }
    let epoch = o.epoch;
    let fresh = o.engine_mut(engine).is_some_and(|e| std::mem::replace(&mut e.seen_epoch, epoch) != epoch);
    let peer_seq = o.peer_seq;
    let peer_seen = o.engine_mut(engine).map_or(peer_seq, |e| std::mem::replace(&mut e.seen_peer, peer_seq));
    let id = {
        let guard = gpu.ports.ram.memory();
        let mem = GpuMemory::new(&guard, &gpu.ports.vram);
        let hold = split::hold(o, engine, gpu.ports.config.gpu.no_context_save);
        let ready: Vec<_> = o
            .scheduler
            .runlist(engine)
            .filter(|&id| hold.allows(o, id) && is_ready(o, &mem, id, fresh, peer_seen))
            .collect();
        let id = o.scheduler.next(engine, |id| ready.contains(&id))?;
        if gpu.ports.tracer.wants(TraceLevel::Commands) {
            gpu.ports.tracer.emit(schedule_event(o, engine, id, &ready));
        }
        id
    };
    let job = o.queues.get(&id).and_then(|q| Job::new(o, id, q))?;
    let (cursor, wait) = o.queues.get_mut(&id)?.state.pick()?;
    o.engine_mut(engine)?.current = Some(id);
    Some(Job { cursor, wait, ..job })
}

/// The trace record of `engine`'s pick of `id` among the `ready` queues: why it won, and why
/// the other queues of the runlist that have work did not run.
fn schedule_event(o: &Objects, engine: EngineId, id: QueueId, ready: &[QueueId]) -> Event {
    let priority = |q| o.scheduler.priority(q).unwrap_or(0);
    let why = if ready.len() <= 1 {
        ScheduleWhy::OnlyReady
    } else if ready.iter().all(|&q| q == id || priority(q) < priority(id)) {
        ScheduleWhy::Priority
    } else {
        ScheduleWhy::RoundRobin
    };
    let others = o
        .scheduler
        .runlist(engine)
        .filter(|&q| q != id)
        .filter_map(|q| {
            let queue = o.queues.get(&q)?;
            let context = o.contexts.get(&queue.context).map(|c| c.state);
            let reason = if ready.contains(&q) {
                Passed::Lost
            } else if queue.state.is_hung() {
                Passed::Hung
            } else if !queue.state.has_work() {
                return None;
            } else {
                match context {
                    Some(ContextState::Suspended) => Passed::Suspended,
                    Some(ContextState::Faulted(_)) => Passed::Faulted,
                    _ if queue.state.wait().is_some() => Passed::Waiting,
                    _ => return None,
                }
            };
            Some((q.raw(), reason))
        })
        .collect();
    Event::Schedule { engine: engine.raw(), queue: id.raw(), why, others }
}

/// Whether queue `id` has something to do now: schedulable, and ready or parked on a wait that
/// is now satisfied. A wait on a cross-adapter fence is re-read only when `fresh` (the GPU's
/// epoch moved since the engine's last pick) or when a peer signal named the fence after the
/// engine's last pick (its `peer_named` above `peer_seen`), never on a poll.
fn is_ready<M: GuestMemory>(o: &Objects, mem: &GpuMemory<'_, M>, id: QueueId, fresh: bool, peer_seen: u64) -> bool {
    let Some(q) = o.queues.get(&id) else { return false };
    o.schedulable(id)
        && q.state.is_ready(|w| {
            o.queue_root(q).is_some_and(|root| {
                let reread = match cross_adapter_fence(o, mem, root, w.fence_va) {
                    Some(f) => fresh || f.peer_named > peer_seen,
                    None => true,
                };
                reread && fences::reached(mem, root, w.fence_va, w.value)
            })
        })
}

/// The fence at `fence_va` of the address space at `root`, if it is registered cross-adapter.
fn cross_adapter_fence<'o, M: GuestMemory>(
    o: &'o Objects,
    mem: &GpuMemory<'_, M>,
    root: GuestPa,
    fence_va: u64,
) -> Option<&'o Fence> {
    mem.translate(root, GpuVa(fence_va), false)
        .ok()
        .and_then(|p| o.fence_at.get(&p))
        .and_then(|h| o.fences.get(h))
        .filter(|f| f.cross_adapter)
}

/// Whether `reason` is a failed translation (its fault record gets the page walk).
fn is_mmu(reason: FaultReason) -> bool {
    matches!(
        reason,
        FaultReason::MmuNonCanonical
            | FaultReason::MmuNotPresent
            | FaultReason::MmuReadOnly
            | FaultReason::MmuReserved
            | FaultReason::MmuUnreachable
    )
}

/// Publishes a slice's outcome to the queue and reports faults and hangs (with `walk`, the
/// page walk of an MMU fault's address, in its trace record); returns the interrupt record to
/// post (once the object lock is released) and its cause.
fn publish(gpu: &Gpu, o: &mut Objects, job: Job, end: SliceEnd, walk: Vec<WalkStep>) -> Option<(InterruptRecord, u32)> {
    if let Some(e) = o.engine_mut(job.engine) {
        split::after_slice(e, job.queue, job.cursor.as_ref(), job.split_open, gpu.ports.config.gpu.no_context_save);
    }
    let q = o.queues.get_mut(&job.queue)?;
    q.read_index = job.read_index;
    q.unreported_signals = job.unreported_signals;
    q.split_open = job.split_open;
    q.slots = job.slots;
    if end == SliceEnd::Hung {
        q.dropped = job.cursor;
    }
    q.state.finish(end, job.cursor);
    let name = &gpu.ports.config.name;
    match end {
        SliceEnd::Yield | SliceEnd::Empty | SliceEnd::Blocked(..) => None,
        SliceEnd::Hung => {
            // Guest work, not the device, misbehaved: the driver learns it from the record, so
            // this is information (a suite faults work on purpose), not a device warning.
            log::info!("{name}: guest work hung: {} on {} (engine-state record sent)", job.queue, job.engine);
            gpu.ports.tracer.emit(Event::QueueState { queue: job.queue.raw(), state: "hung".into(), detail: None });
            Some((
                InterruptRecord {
                    kind: RecordKind::EngineState as u32,
                    engine: job.engine.raw(),
                    queue: job.queue.raw(),
                    context: job.context.raw(),
                    detail: EngineState::Hung as u32,
                    ..Default::default()
                },
                irq::cause::ENGINE_STATE,
            ))
        }
        SliceEnd::Fault(reason, address) => {
            if let Some(ctx) = o.contexts.get_mut(&job.context) {
                ctx.state.fault(Fault { reason, address, queue: job.queue });
            }
            log::info!(
                "{name}: guest work faulted: {} on {}: {} at {address:#x} (fault record sent)",
                job.context,
                job.queue,
                reason.name()
            );
            gpu.ports.tracer.emit(Event::Fault {
                context: job.context.raw(),
                queue: job.queue.raw(),
                reason: reason.name().into(),
                address,
                walk,
            });
            Some((
                InterruptRecord {
                    kind: RecordKind::ContextFault as u32,
                    engine: job.engine.raw(),
                    queue: job.queue.raw(),
                    context: job.context.raw(),
                    address,
                    detail: reason as u32,
                    ..Default::default()
                },
                irq::cause::FAULT,
            ))
        }
    }
}

fn mmu_fault(e: MmuError) -> SliceEnd {
    SliceEnd::Fault(e.fault.into(), e.va)
}

/// Runs up to `limit.packets` packets of `job` (ring entries fetched count as packets; without
/// `limit.bulk`, up to the first that moves bulk data); returns how the slice ended and the job
/// as it stands (cursor, read index, unreported signals) for [`publish`].
fn run_slice(gpu: &Gpu, mut job: Job, limit: SliceLimit) -> (SliceEnd, Job) {
    let guard = gpu.ports.ram.memory();
    // Bus mastering went off between the pick and this snapshot: no access at all, and the
    // work stays where it is until it is on again (not a fault of the guest's work).
    if !guard.enabled() {
        return (SliceEnd::Yield, job);
    }
    let mem = GpuMemory::new(&guard, &gpu.ports.vram);
    let hang_timeout = Duration::from_millis(gpu.ports.config.gpu.hang_timeout_ms);
    // When the current buffer's time in this slice began. Its busy time is added where the
    // slice leaves it (blocked, or at the slice's end, where the hang check runs) as one clock
    // input (`elapsed_since`): a replay takes the recorded hang decision, however fast it runs.
    let mut mark = Instant::now();
    for _ in 0..limit.packets {
        let Some(mut cursor) = job.cursor else {
            match fetch(&mem, &mut job) {
                Ok(true) => {
                    mark = Instant::now();
                    if let Some(c) = job.cursor.filter(|_| gpu.ports.tracer.wants(TraceLevel::Commands)) {
                        gpu.ports.tracer.emit(Event::CommandBuffer {
                            phase: BufferPhase::Begin,
                            queue: job.queue.raw(),
                            engine: job.engine.raw(),
                            ring_index: job.read_index,
                            va: Some(c.va),
                            size: u32::try_from(c.end - c.va).ok(),
                        });
                    }
                    continue;
                }
                Ok(false) => return (SliceEnd::Empty, job),
                Err(end) => return (end, job),
            }
        };
        if cursor.va >= cursor.end {
            // Command buffer done: advance and publish the read index.
            gpu.ports.tracer.emit(Event::CommandBuffer {
                phase: BufferPhase::End,
                queue: job.queue.raw(),
                engine: job.engine.raw(),
                ring_index: job.read_index,
                va: None,
                size: None,
            });
            job.cursor = None;
            job.split_open = cursor.continues;
            job.read_index = job.read_index.wrapping_add(1);
            let Some(at) = job.ring_control_va.checked_add(ring::READ_INDEX_OFFSET) else {
                return (SliceEnd::Fault(FaultReason::BadRing, job.ring_control_va), job);
            };
            if let Err(e) = mem.write(job.root, at, &job.read_index.to_le_bytes()) {
                return (mmu_fault(e), job);
            }
            fence(Ordering::Release);
            continue;
        }
        if !limit.bulk && packets::is_bulk(&mem, &job, &cursor) {
            break;
        }
        let step = packets::execute(gpu, &mem, &mut job, &cursor);
        job.cursor = Some(cursor);
        match step {
            Step::Next(next, end) => {
                cursor.va = next;
                if let Some(end) = end {
                    cursor.end = end;
                }
                job.cursor = Some(cursor);
                job.wait = None;
            }
            Step::Blocked(w) => {
                cursor.busy += gpu.ports.regs.elapsed_since(mark);
                return (SliceEnd::Blocked(cursor, w), job);
            }
            Step::Fault(reason, va) => return (SliceEnd::Fault(reason, va), job),
        }
    }
    if let Some(cursor) = job.cursor.as_mut() {
        cursor.busy += gpu.ports.regs.elapsed_since(mark);
        if cursor.busy > hang_timeout {
            return (SliceEnd::Hung, job);
        }
    }
    (SliceEnd::Yield, job)
}

/// Reads the next ring entry if there is one; `Ok(true)` when a buffer was started.
fn fetch<M: GuestMemory>(mem: &GpuMemory<'_, M>, job: &mut Job) -> Result<bool, SliceEnd> {
    let mut w = [0u8; 4];
    let bad_control = SliceEnd::Fault(FaultReason::BadRing, job.ring_control_va);
    let at = job.ring_control_va.checked_add(ring::WRITE_INDEX_OFFSET).ok_or(bad_control)?;
    mem.read(job.root, at, &mut w).map_err(mmu_fault)?;
    fence(Ordering::Acquire);
    let write_index = u32::from_le_bytes(w);
    if !ring::is_consistent(write_index, job.read_index, job.ring_entries) {
        return Err(SliceEnd::Fault(FaultReason::BadRing, job.ring_control_va));
    }
    if ring::pending(write_index, job.read_index) == 0 {
        return Ok(false);
    }
    let slot = u64::from(ring::slot(job.read_index, job.ring_entries));
    let at = slot
        .checked_mul(RING_ENTRY_BYTES)
        .and_then(|offset| job.ring_va.checked_add(offset))
        .ok_or(SliceEnd::Fault(FaultReason::BadRing, job.ring_va))?;
    let mut e = Wire(RingEntry::default());
    mem.read(job.root, at, vm_memory::ByteValued::as_mut_slice(&mut e)).map_err(mmu_fault)?;
    let entry = e.0;
    let allowed_flags = if job.user_mode { 0 } else { ring::RING_FLAGS_KERNEL };
    if entry.size_bytes % 4 != 0
        || entry.size_bytes > ring::CMDBUF_MAX_BYTES
        || entry.cmdbuf_va % 4 != 0
        || entry.flags & !allowed_flags != 0
    {
        return Err(SliceEnd::Fault(FaultReason::BadRing, at));
    }
    let end =
        entry.cmdbuf_va.checked_add(u64::from(entry.size_bytes)).ok_or(SliceEnd::Fault(FaultReason::BadRing, at))?;
    job.cursor = Some(Cursor {
        va: entry.cmdbuf_va,
        end,
        busy: Duration::ZERO,
        continues: entry.flags & ring::RING_FLAG_SPLIT_CONTINUES != 0,
    });
    job.slots = split::Slots::default();
    Ok(true)
}
