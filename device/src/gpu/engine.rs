//! Engine executors: one thread per engine runs the queues its runlist schedules, fetching ring
//! entries and command buffers by DMA through the GPU MMU and executing packets.
//!
//! A slice runs at most [`SLICE_PACKETS`] packets of one queue, then the engine picks again,
//! so equal-priority queues interleave and a looping queue cannot starve the others. A
//! `FENCE_WAIT` that is not yet satisfied parks the queue (it yields the engine) until a fence
//! changes; parked waits are re-checked at least every [`WAIT_POLL`] as well, which covers
//! CurrentValues the CPU writes directly. A guest error faults the queue's context: a status
//! the driver can query, a `ContextFault` record with the `FAULT` interrupt, a trace record —
//! and nothing else stops.

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use belfry_abi::engine::{EngineState, FaultReason};
use belfry_abi::fence::{self as abi_fence, FenceKind, LogKind, LogOperation};
use belfry_abi::irq::{self, InterruptRecord, RecordKind};
use belfry_abi::mmu::{GpuVa, GuestPa};
use belfry_abi::packet::{self, Opcode};
use belfry_abi::ring::{self, RingEntry};
use vm_memory::GuestMemory;

use super::{records, Cursor, Fault, Health, Wait};
use crate::device::Device;
use crate::mmu::{GpuMemory, MmuError, Phys};
use crate::trace::Event;
use crate::wire::Wire;

/// Packets per slice.
pub const SLICE_PACKETS: usize = 64;
/// How often parked fence waits are re-checked without a wake-up.
pub const WAIT_POLL: Duration = Duration::from_millis(1);

/// The engine threads of a device.
pub struct Engines {
    device: Arc<Device>,
    threads: Vec<JoinHandle<()>>,
}

impl Engines {
    /// Starts one executor thread per engine.
    pub fn start(device: Arc<Device>) -> std::io::Result<Self> {
        let mut threads = Vec::new();
        for engine in 0..belfry_abi::engine::ENGINE_COUNT {
            let dev = device.clone();
            let name = format!("{}-{}", device.config.name, belfry_abi::engine::engine_name(engine));
            threads.push(std::thread::Builder::new().name(name).spawn(move || run(&dev, engine))?);
        }
        Ok(Engines { device, threads })
    }

    /// Stops the threads and waits for them.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.device.gpu.kill();
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

/// How a slice ended.
#[derive(Debug)]
enum SliceEnd {
    /// Budget used; more may remain.
    Yield,
    /// The ring is empty.
    Empty,
    /// Parked in a fence wait.
    Blocked(Wait),
    /// A guest error.
    Fault(FaultReason, u64),
    /// Over the hang timeout.
    Hung,
}

/// What an engine needs to run a queue without holding the lock.
#[derive(Clone, Copy, Debug)]
struct Job {
    queue: u32,
    user_mode: bool,
    context: u32,
    engine: u32,
    root: GuestPa,
    system_root: Option<GuestPa>,
    ring_va: u64,
    ring_entries: u32,
    ring_control_va: u64,
    read_index: u32,
    cursor: Option<Cursor>,
    wait: Option<Wait>,
    logs: [Option<u64>; 2],
    unreported_signals: u32,
    generation: u64,
}

fn run(device: &Device, engine: u32) {
    let gpu = &device.gpu;
    let mut objects = gpu.lock();
    loop {
        if objects.kill {
            return;
        }
        let o = &mut *objects;
        let pick = if o.d3 || o.engines[engine as usize].state != EngineState::Active {
            None
        } else {
            let guard = device.ram.memory();
            let mem = GpuMemory::new(&*guard, &device.vram);
            let ready: Vec<u32> = o.scheduler.runlist(engine).filter(|&id| is_ready(o, &mem, id)).collect();
            o.scheduler.next(engine, |id| ready.contains(&id))
        };
        let Some(id) = pick else {
            let parked = o.scheduler.runlist(engine).any(|q| o.queues.get(&q).is_some_and(|q| q.wait.is_some()));
            let timeout = if parked { WAIT_POLL } else { Duration::from_millis(50) };
            objects = gpu.changed.wait_timeout(objects, timeout).unwrap_or_else(|e| e.into_inner()).0;
            continue;
        };
        let Some(job) = make_job(o, id) else {
            continue;
        };
        if let Some(q) = o.queues.get_mut(&id) {
            q.kicked = false;
        }
        o.engines[engine as usize].current = Some(id);
        drop(objects);

        let (end, job) = run_slice(device, job);

        objects = gpu.lock();
        let o = &mut *objects;
        o.engines[engine as usize].current = None;
        o.engines[engine as usize].last_active = Instant::now();
        o.engines[engine as usize].idle_reported = false;
        if o.generation == job.generation {
            apply(device, o, job, end);
        }
        gpu.notify();
    }
}

/// Whether queue `id` has something to do now: schedulable, and either mid-buffer, kicked,
/// or parked on a wait that is now satisfied.
fn is_ready<M: GuestMemory>(o: &super::Objects, mem: &GpuMemory<'_, M>, id: u32) -> bool {
    let Some(q) = o.queues.get(&id) else { return false };
    if !o.schedulable(id) {
        return false;
    }
    match q.wait {
        Some(w) => o.queue_root(q).is_some_and(|root| fence_reached(mem, root, w.fence_va, w.value)),
        None => q.cursor.is_some() || q.kicked,
    }
}

fn make_job(o: &super::Objects, id: u32) -> Option<Job> {
    let q = o.queues.get(&id)?;
    Some(Job {
        queue: id,
        user_mode: q.user_mode,
        context: q.context,
        engine: q.engine,
        root: o.queue_root(q)?,
        system_root: o.system_root(),
        ring_va: q.ring_va,
        ring_entries: q.ring_entries,
        ring_control_va: q.ring_control_va,
        read_index: q.read_index,
        cursor: q.cursor,
        wait: q.wait,
        logs: q.logs,
        unreported_signals: q.unreported_signals,
        generation: o.generation,
    })
}

/// Publishes a slice's outcome to the queue and reports faults and hangs.
fn apply(device: &Device, o: &mut super::Objects, job: Job, end: SliceEnd) {
    let Some(q) = o.queues.get_mut(&job.queue) else { return };
    q.read_index = job.read_index;
    q.cursor = job.cursor;
    q.unreported_signals = job.unreported_signals;
    q.wait = None;
    match end {
        SliceEnd::Yield => q.kicked = true,
        SliceEnd::Empty => {}
        SliceEnd::Blocked(w) => q.wait = Some(w),
        SliceEnd::Hung => {
            q.health = Health::Hung;
            let engine = q.engine;
            log::warn!("{}: queue {} hung on engine {engine}", device.config.name, job.queue);
            device.tracer.emit(Event::QueueState { queue: job.queue, state: "hung", detail: None });
            records::post(
                device,
                InterruptRecord {
                    kind: RecordKind::EngineState as u32,
                    engine,
                    queue: job.queue,
                    context: job.context,
                    detail: EngineState::Hung as u32,
                    ..Default::default()
                },
                irq::cause::ENGINE_STATE,
            );
        }
        SliceEnd::Fault(reason, address) => {
            if let Some(ctx) = o.contexts.get_mut(&job.context) {
                if ctx.fault.is_none() {
                    ctx.fault = Some(Fault { reason, address, queue: job.queue });
                }
            }
            log::warn!(
                "{}: context {} faulted on queue {}: {} at {address:#x}",
                device.config.name,
                job.context,
                job.queue,
                reason.name()
            );
            device.tracer.emit(Event::Fault { context: job.context, queue: job.queue, reason: reason.name(), address });
            records::post(
                device,
                InterruptRecord {
                    kind: RecordKind::ContextFault as u32,
                    engine: job.engine,
                    queue: job.queue,
                    context: job.context,
                    address,
                    detail: reason as u32,
                    ..Default::default()
                },
                irq::cause::FAULT,
            );
        }
    }
}

fn fault(e: MmuError) -> SliceEnd {
    SliceEnd::Fault(e.fault.into(), e.va)
}

/// Whether the CurrentValue at `fence_va` has reached `value` (a fault reads as "not yet";
/// the packet re-executes and faults properly).
fn fence_reached<M: GuestMemory>(mem: &GpuMemory<'_, M>, root: GuestPa, fence_va: u64, value: u64) -> bool {
    mem.translate(root, GpuVa(fence_va), false)
        .ok()
        .and_then(|p| mem.load_u64(p, Ordering::Acquire))
        .is_some_and(|cur| abi_fence::is_signaled(cur, value))
}

fn run_slice(device: &Device, mut job: Job) -> (SliceEnd, Job) {
    let guard = device.ram.memory();
    let mem = GpuMemory::new(&*guard, &device.vram);
    let hang_timeout = Duration::from_millis(device.config.hang_timeout_ms);
    for _ in 0..SLICE_PACKETS {
        let Some(mut cursor) = job.cursor else {
            match fetch(&mem, &mut job) {
                Ok(true) => continue,
                Ok(false) => return (SliceEnd::Empty, job),
                Err(end) => return (end, job),
            }
        };
        if cursor.va >= cursor.end {
            // Command buffer done: advance and publish the read index.
            job.cursor = None;
            job.read_index = job.read_index.wrapping_add(1);
            let at = job.ring_control_va + ring::READ_INDEX_OFFSET;
            if let Err(e) = mem.write(job.root, at, &job.read_index.to_le_bytes()) {
                return (fault(e), job);
            }
            fence(Ordering::Release);
            continue;
        }
        let started = Instant::now();
        let step = execute_packet(device, &mem, &mut job, &mut cursor);
        cursor.busy += started.elapsed();
        match step {
            Step::Next(next) => {
                cursor.va = next.0;
                if let Some(end) = next.1 {
                    cursor.end = end;
                }
                job.cursor = Some(cursor);
                job.wait = None;
            }
            Step::Blocked(w) => {
                job.cursor = Some(cursor);
                return (SliceEnd::Blocked(w), job);
            }
            Step::Fault(reason, va) => {
                job.cursor = Some(cursor);
                return (SliceEnd::Fault(reason, va), job);
            }
        }
        if cursor.busy > hang_timeout {
            return (SliceEnd::Hung, job);
        }
    }
    (SliceEnd::Yield, job)
}

/// Reads the next ring entry if there is one; `Ok(true)` when a buffer was started.
fn fetch<M: GuestMemory>(mem: &GpuMemory<'_, M>, job: &mut Job) -> Result<bool, SliceEnd> {
    let mut w = [0u8; 4];
    mem.read(job.root, job.ring_control_va + ring::WRITE_INDEX_OFFSET, &mut w).map_err(fault)?;
    fence(Ordering::Acquire);
    let write_index = u32::from_le_bytes(w);
    if !ring::is_consistent(write_index, job.read_index, job.ring_entries) {
        return Err(SliceEnd::Fault(FaultReason::BadRing, job.ring_control_va));
    }
    if ring::pending(write_index, job.read_index) == 0 {
        return Ok(false);
    }
    let slot = u64::from(ring::slot(job.read_index, job.ring_entries));
    let at = job.ring_va + slot * std::mem::size_of::<RingEntry>() as u64;
    let mut e = Wire(RingEntry::default());
    mem.read(job.root, at, vm_memory::ByteValued::as_mut_slice(&mut e)).map_err(fault)?;
    let entry = e.0;
    if entry.size_bytes % 4 != 0
        || entry.size_bytes > ring::CMDBUF_MAX_BYTES
        || entry.cmdbuf_va % 4 != 0
        || entry.flags != 0
    {
        return Err(SliceEnd::Fault(FaultReason::BadRing, at));
    }
    let end =
        entry.cmdbuf_va.checked_add(u64::from(entry.size_bytes)).ok_or(SliceEnd::Fault(FaultReason::BadRing, at))?;
    job.cursor = Some(Cursor { va: entry.cmdbuf_va, end, busy: Duration::ZERO });
    Ok(true)
}

enum Step {
    /// Continue at `.0`; `.1` replaces the buffer end (jump).
    Next((u64, Option<u64>)),
    Blocked(Wait),
    Fault(FaultReason, u64),
}

macro_rules! read_packet {
    ($mem:expr, $job:expr, $va:expr, $t:ty) => {{
        let mut p = Wire(<$t>::default());
        match $mem.read($job.root, $va, vm_memory::ByteValued::as_mut_slice(&mut p)) {
            Ok(()) => p.0,
            Err(e) => return Step::Fault(e.fault.into(), e.va),
        }
    }};
}

fn execute_packet<M: GuestMemory>(device: &Device, mem: &GpuMemory<'_, M>, job: &mut Job, cursor: &mut Cursor) -> Step {
    let va = cursor.va;
    let mut h = [0u8; 4];
    if let Err(e) = mem.read(job.root, va, &mut h) {
        return Step::Fault(e.fault.into(), e.va);
    }
    let header = u32::from_le_bytes(h);
    let bad = Step::Fault(FaultReason::BadPacket, va);
    let Ok(op) = Opcode::try_from(packet::header_opcode(header)) else { return bad };
    let dwords = packet::header_dwords(header);
    if packet::header_reserved(header) != 0 || dwords == 0 || op.dwords().is_some_and(|d| d != dwords) {
        return bad;
    }
    let next = va + u64::from(dwords) * 4;
    if next > cursor.end {
        return bad;
    }
    if op.writes_fence() && device.config.engines_without_fence_writes.contains(&job.engine) {
        return Step::Fault(FaultReason::EngineCannotWriteFence, va);
    }
    if device.tracer.enabled() {
        device.tracer.emit(Event::Packet { queue: job.queue, engine: job.engine, opcode: op.name(), va });
    }
    let result = match op {
        Opcode::Nop => Ok(()),
        Opcode::WriteData32 => {
            let p = read_packet!(mem, job, va, packet::WriteData32);
            aligned(p.va, 4).and_then(|_| mem.write(job.root, p.va, &p.value.to_le_bytes()).map_err(mmu_step))
        }
        Opcode::WriteData64 => {
            let p = read_packet!(mem, job, va, packet::WriteData64);
            if p.reserved != 0 {
                return bad;
            }
            aligned(p.va, 8).and_then(|_| store64(mem, job.root, p.va, p.value))
        }
        Opcode::WriteTimestamp => {
            let p = read_packet!(mem, job, va, packet::WriteTimestamp);
            aligned(p.va, 8).and_then(|_| store64(mem, job.root, p.va, device.regs.timestamp()))
        }
        Opcode::FenceSignal => {
            let p = read_packet!(mem, job, va, packet::FenceSignal);
            aligned(p.fence_va, 8).and_then(|_| signal(device, mem, &mut *job, p))
        }
        Opcode::FenceWait => {
            let p = read_packet!(mem, job, va, packet::FenceWait);
            if let Err(s) = aligned(p.fence_va, 8) {
                return s;
            }
            return wait(device, mem, job, p, next);
        }
        Opcode::MonitoredFenceSignal => {
            let p = read_packet!(mem, job, va, packet::MonitoredFenceSignal);
            if p.reserved != 0 {
                return bad;
            }
            aligned(p.fence_va, 8).and_then(|_| monitored_signal(device, mem, job, p))
        }
        Opcode::Notify => {
            let p = read_packet!(mem, job, va, packet::Notify);
            records::post(
                device,
                InterruptRecord {
                    kind: RecordKind::Notify as u32,
                    engine: job.engine,
                    queue: job.queue,
                    context: job.context,
                    value: p.token,
                    ..Default::default()
                },
                irq::cause::MONITORED_FENCE,
            );
            Ok(())
        }
        Opcode::Copy => {
            let p = read_packet!(mem, job, va, packet::Copy);
            if p.size > packet::TRANSFER_MAX_BYTES || overlaps(p.src_va, p.dst_va, u64::from(p.size)) {
                return bad;
            }
            let mut buf = vec![0u8; p.size as usize];
            mem.read(job.root, p.src_va, &mut buf).and_then(|_| mem.write(job.root, p.dst_va, &buf)).map_err(mmu_step)
        }
        Opcode::Fill => {
            let p = read_packet!(mem, job, va, packet::Fill);
            if p.size > packet::TRANSFER_MAX_BYTES || p.size % 4 != 0 || p.reserved != 0 {
                return bad;
            }
            let buf: Vec<u8> = p.value.to_le_bytes().iter().copied().cycle().take(p.size as usize).collect();
            mem.write(job.root, p.dst_va, &buf).map_err(mmu_step)
        }
        Opcode::Compute => {
            let p = read_packet!(mem, job, va, packet::Compute);
            let Ok(cop) = packet::ComputeOp::try_from(p.op) else { return bad };
            if p.count > packet::COMPUTE_MAX_ELEMENTS {
                return bad;
            }
            compute(mem, job.root, cop, &p).map_err(mmu_step)
        }
        Opcode::Jump => {
            let p = read_packet!(mem, job, va, packet::Jump);
            if p.size_bytes % 4 != 0 || p.size_bytes > ring::CMDBUF_MAX_BYTES || p.va % 4 != 0 {
                return bad;
            }
            let Some(end) = p.va.checked_add(u64::from(p.size_bytes)) else { return bad };
            return Step::Next((p.va, Some(end)));
        }
    };
    match result {
        Ok(()) => Step::Next((next, None)),
        Err(s) => s,
    }
}

fn mmu_step(e: MmuError) -> Step {
    Step::Fault(e.fault.into(), e.va)
}

fn aligned(va: u64, to: u64) -> Result<(), Step> {
    if va.is_multiple_of(to) {
        Ok(())
    } else {
        Err(Step::Fault(FaultReason::BadPacket, va))
    }
}

fn overlaps(a: u64, b: u64, len: u64) -> bool {
    len > 0 && a < b.saturating_add(len) && b < a.saturating_add(len)
}

fn store64<M: GuestMemory>(mem: &GpuMemory<'_, M>, root: GuestPa, va: u64, value: u64) -> Result<(), Step> {
    let phys = mem.translate(root, GpuVa(va), true).map_err(mmu_step)?;
    mem.store_u64(phys, value, Ordering::SeqCst).ok_or(Step::Fault(FaultReason::MmuUnreachable, va))
}

fn compute<M: GuestMemory>(
    mem: &GpuMemory<'_, M>,
    root: GuestPa,
    op: packet::ComputeOp,
    p: &packet::Compute,
) -> crate::mmu::Result<()> {
    let bytes = p.count as usize * 4;
    let (mut a, mut b) = (vec![0u8; bytes], vec![0u8; bytes]);
    mem.read(root, p.a_va, &mut a)?;
    mem.read(root, p.b_va, &mut b)?;
    let out: Vec<u8> = a
        .chunks_exact(4)
        .zip(b.chunks_exact(4))
        .flat_map(|(x, y)| {
            let x = u32::from_le_bytes(x.try_into().unwrap_or_default());
            let y = u32::from_le_bytes(y.try_into().unwrap_or_default());
            apply_compute(op, x, y, p.scalar).to_le_bytes()
        })
        .collect();
    mem.write(root, p.dst_va, &out)
}

/// One element of a `COMPUTE` packet.
pub fn apply_compute(op: packet::ComputeOp, a: u32, b: u32, scalar: u32) -> u32 {
    match op {
        packet::ComputeOp::AddU32 => a.wrapping_add(b),
        packet::ComputeOp::MulU32 => a.wrapping_mul(b),
        packet::ComputeOp::SaxpyF32 => (f32::from_bits(scalar) * f32::from_bits(a) + f32::from_bits(b)).to_bits(),
    }
}

/// Looks up the registered fence whose CurrentValue is at `phys`.
fn registered(device: &Device, phys: Phys) -> Option<(u64, super::Fence)> {
    let o = device.gpu.lock();
    let handle = *o.fence_at.get(&phys)?;
    Some((handle, *o.fences.get(&handle)?))
}

/// Writes a fence-log entry and advances the header (step 2 and 3 of the signal order).
fn log_entry<M: GuestMemory>(
    device: &Device,
    mem: &GpuMemory<'_, M>,
    job: &Job,
    kind: LogKind,
    index: u32,
    entry: abi_fence::LogEntry,
) {
    let (Some(base), Some(sys)) = (job.logs[kind as usize], job.system_root) else { return };
    if index == packet::NO_LOG {
        return;
    }
    let at = base + abi_fence::log_entry_offset(index);
    let written = mem.write(sys, at, vm_memory::ByteValued::as_slice(&Wire(entry)));
    let next = index.wrapping_add(1);
    let header = [next % abi_fence::LOG_ENTRIES, next / abi_fence::LOG_ENTRIES];
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&header[0].to_le_bytes());
    bytes[4..].copy_from_slice(&header[1].to_le_bytes());
    fence(Ordering::Release);
    if written.and_then(|_| mem.write(sys, base, &bytes)).is_err() {
        log::warn!(
            "{}: queue {} fence log at {base:#x} is not mapped in the system address space",
            device.config.name,
            job.queue
        );
    }
}

fn signal<M: GuestMemory>(
    device: &Device,
    mem: &GpuMemory<'_, M>,
    job: &mut Job,
    p: packet::FenceSignal,
) -> Result<(), Step> {
    let phys = mem.translate(job.root, GpuVa(p.fence_va), true).map_err(mmu_step)?;
    // (1) the new CurrentValue, 64-bit atomic.
    mem.store_u64(phys, p.value, Ordering::SeqCst).ok_or(Step::Fault(FaultReason::MmuUnreachable, p.fence_va))?;
    let fence_info = registered(device, phys);
    if let Some((handle, f)) = fence_info.filter(|(_, f)| f.kind != FenceKind::Monitored) {
        // (2) log entry, (3) index.
        let now = device.regs.timestamp();
        let entry = abi_fence::LogEntry {
            fence_handle: p.log_handle,
            value: p.value,
            end_gpu_timestamp: now,
            operation: LogOperation::SignalExecuted as u32,
            ..Default::default()
        };
        log_entry(device, mem, job, LogKind::Signals, p.log_entry, entry);
        if p.log_entry != packet::NO_LOG && job.logs[LogKind::Signals as usize].is_some() {
            job.unreported_signals = job.unreported_signals.saturating_add(1);
        }
        // (4) barrier, (5) the interrupt decision against the registered MonitoredValue.
        fence(Ordering::SeqCst);
        let monitored = mem.load_u64(f.monitored, Ordering::SeqCst).unwrap_or(abi_fence::MONITORED_VALUE_NONE);
        let interrupt = abi_fence::needs_interrupt(p.value, monitored);
        device.tracer.emit(Event::FenceDecision { source: "signal", handle, current: p.value, monitored, interrupt });
        if interrupt {
            let mut r = records::native_fence(handle, p.value, job.engine, job.queue, device.config.interrupt_form);
            // Per-queue form: the driver reads this queue's signal log. If more entries were
            // written since the last record than the log holds, it wrapped over entries the
            // driver never saw: the device cannot tell, so it asks for a scan of everything.
            if device.config.interrupt_form == crate::config::InterruptForm::PerQueue
                && job.unreported_signals > abi_fence::LOG_ENTRIES
            {
                r.queue = irq::NONE;
                r.detail = irq::DETAIL_EVALUATE_LEGACY;
            }
            job.unreported_signals = 0;
            records::post(device, r, irq::cause::NATIVE_FENCE);
        }
    }
    device.gpu.notify();
    Ok(())
}

fn wait<M: GuestMemory>(device: &Device, mem: &GpuMemory<'_, M>, job: &Job, p: packet::FenceWait, next: u64) -> Step {
    let phys = match mem.translate(job.root, GpuVa(p.fence_va), false) {
        Ok(phys) => phys,
        Err(e) => return mmu_step(e),
    };
    let Some(current) = mem.load_u64(phys, Ordering::Acquire) else {
        return Step::Fault(FaultReason::MmuUnreachable, p.fence_va);
    };
    let observed = job.wait.filter(|w| w.fence_va == p.fence_va && w.value == p.value).map(|w| w.observed);
    let now = device.regs.timestamp();
    if !abi_fence::is_signaled(current, p.value) {
        return Step::Blocked(Wait { fence_va: p.fence_va, value: p.value, observed: observed.unwrap_or(now) });
    }
    let entry = abi_fence::LogEntry {
        fence_handle: p.log_handle,
        value: p.value,
        observed_gpu_timestamp: observed.unwrap_or(now),
        end_gpu_timestamp: now,
        operation: LogOperation::WaitUnblocked as u32,
        ..Default::default()
    };
    log_entry(device, mem, job, LogKind::Waits, p.log_entry, entry);
    Step::Next((next, None))
}

fn monitored_signal<M: GuestMemory>(
    device: &Device,
    mem: &GpuMemory<'_, M>,
    job: &Job,
    p: packet::MonitoredFenceSignal,
) -> Result<(), Step> {
    let phys = mem.translate(job.root, GpuVa(p.fence_va), true).map_err(mmu_step)?;
    // NF-21: only kernel-mode queues use monitored fences (the driver holds their GPU waits).
    if job.user_mode {
        return Err(Step::Fault(FaultReason::MonitoredFenceOnUserModeQueue, p.fence_va));
    }
    let stored = if device.config.no_64bit_atomics {
        mem.store_u32(phys, p.value as u32, Ordering::SeqCst)
    } else {
        mem.store_u64(phys, p.value, Ordering::SeqCst)
    };
    stored.ok_or(Step::Fault(FaultReason::MmuUnreachable, p.fence_va))?;
    let handle = registered(device, phys).map_or(0, |(h, _)| h);
    records::post(
        device,
        InterruptRecord {
            kind: RecordKind::MonitoredFenceSignaled as u32,
            engine: job.engine,
            queue: job.queue,
            context: job.context,
            fence: handle,
            value: p.value,
            address: p.fence_va,
            ..Default::default()
        },
        irq::cause::MONITORED_FENCE,
    );
    device.gpu.notify();
    Ok(())
}
