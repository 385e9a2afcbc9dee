//! Fence operations of the engines: `FENCE_SIGNAL` in the documented order (CurrentValue,
//! log entry, log index, barrier, interrupt decision against the registered MonitoredValue),
//! `FENCE_WAIT` (park or log the unblock), `MONITORED_FENCE_SIGNAL`, and the fence-log writes.
//!
//! Verbose fence logging (LOG-20): a `FENCE_WAIT` whose header carries
//! `packet::FENCE_WAIT_LOG_BEGIN` owns two wait-log entries; when the engine first meets it
//! (its first execution, satisfied or not) the device writes `WAIT_BEGIN` at `log_entry` if the
//! driver has `LOG_VERBOSE` on, an empty entry if it is off, and later `WAIT_UNBLOCKED` at
//! `log_entry + 1`. Without the flag nothing changes, whatever the switch says.
//!
//! Fence values only move forward (WDDM's monitored fences are monotonic): a signal packet
//! naming a registered fence with a value below its CurrentValue (read just before; a CPU
//! signal landing between the read and the store is not seen) is refused — the value stays,
//! nothing is logged or interrupted, the packet completes — counted in
//! [`Gpu::fences_backwards`] and traced as `fence_backwards`. A signal at an address where no
//! fence is registered is a plain memory write, as before.
//!
//! The interrupt decision is made outside the object lock with `SeqCst` fences on both sides
//! (engine: store CurrentValue, log, barrier, load MonitoredValue; CMP: store MonitoredValue,
//! barrier, load CurrentValue), so no ordering of a signal and a MonitoredValue update loses
//! the interrupt.

use std::sync::atomic::{fence, Ordering};

use belfry_abi::engine::FaultReason;
use belfry_abi::fence::{self as abi_fence, FenceKind, LogKind, LogOperation};
use belfry_abi::ids::FenceHandle;
use belfry_abi::irq::{self, InterruptRecord, RecordKind};
use belfry_abi::mmu::{GpuVa, GuestPa};
use belfry_abi::packet;
use vm_memory::GuestMemory;

use super::job::{Job, Step};
use super::objects::Fence;
use super::peer;
use super::records;
use super::shared::Gpu;
use super::state::Wait;
use crate::config::InterruptForm;
use crate::mmu::{GpuMemory, Phys};
use crate::trace::{Event, FenceSource};
use crate::wire::Wire;

/// Whether the CurrentValue at `fence_va` has reached `value` (a fault reads as "not yet";
/// the packet re-executes and faults properly).
pub fn reached<M: GuestMemory>(mem: &GpuMemory<'_, M>, root: GuestPa, fence_va: u64, value: u64) -> bool {
    mem.translate(root, GpuVa(fence_va), false)
        .ok()
        .and_then(|p| mem.load_u64(p, Ordering::Acquire))
        .is_some_and(|cur| abi_fence::is_signaled(cur, value))
}

/// The registered fence whose CurrentValue is at `phys`.
fn registered(gpu: &Gpu, phys: Phys) -> Option<(FenceHandle, Fence)> {
    let o = gpu.lock();
    let handle = *o.fence_at.get(&phys)?;
    Some((handle, *o.fences.get(&handle)?))
}

/// Writes a fence-log entry and advances the log header (steps 2 and 3 of the signal order).
fn log_entry<M: GuestMemory>(
    gpu: &Gpu,
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
            "{}: {} fence log at {base:#x} is not mapped in the system address space",
            gpu.ports.config.name,
            job.queue
        );
    }
}

/// `FENCE_SIGNAL`.
pub fn signal<M: GuestMemory>(
    gpu: &Gpu,
    mem: &GpuMemory<'_, M>,
    job: &mut Job,
    p: &packet::FenceSignal,
) -> Result<(), Step> {
    let phys = mem.translate(job.root, GpuVa(p.fence_va), true)?;
    if let Some((handle, _)) = registered(gpu, phys) {
        let before = mem.load_u64(phys, Ordering::SeqCst);
        if let Some(before) = before.filter(|&b| !abi_fence::is_signaled(p.value, b)) {
            backwards(gpu, job, handle, before, p.value);
            return Ok(());
        }
    }
    // (1) the new CurrentValue, 64-bit atomic.
    mem.store_u64(phys, p.value, Ordering::SeqCst)
        .ok_or_else(|| Step::Fault(mem.write_fault(phys, 8).into(), p.fence_va))?;
    if registered(gpu, phys).is_some_and(|(_, f)| f.cross_adapter) {
        // Peer signals (XAD-15): the other devices learn of it from their peer-signal pages.
        peer::announce(gpu, mem.guest(), phys, p.value);
    }
    if let Some((handle, f)) = registered(gpu, phys).filter(|(_, f)| f.kind != FenceKind::Monitored) {
        // (2) log entry, (3) index.
        let entry = abi_fence::LogEntry {
            fence_handle: p.log_handle,
            value: p.value,
            end_gpu_timestamp: gpu.ports.regs.timestamp(),
            operation: LogOperation::SignalExecuted as u32,
            ..Default::default()
        };
        log_entry(gpu, mem, job, LogKind::Signals, p.log_entry, entry);
        let logged = p.log_entry != packet::NO_LOG && job.logs[LogKind::Signals as usize].is_some();
        let form = gpu.ports.config.gpu.interrupt_form;
        if logged {
            job.unreported_signals = job.unreported_signals.saturating_add(1);
            if form == InterruptForm::QueueArray {
                gpu.queues_to_name.lock().unwrap_or_else(|e| e.into_inner()).insert(job.queue.raw());
            }
        }
        // (4) barrier, (5) the interrupt decision against the registered MonitoredValue.
        fence(Ordering::SeqCst);
        let monitored = mem.load_u64(f.monitored, Ordering::SeqCst).unwrap_or(abi_fence::MONITORED_VALUE_NONE);
        let interrupt = abi_fence::needs_interrupt(p.value, monitored);
        gpu.ports.tracer.emit(Event::FenceDecision {
            source: FenceSource::Signal,
            handle: handle.raw(),
            current: p.value,
            monitored,
            interrupt,
            queue: Some(job.queue.raw()),
            engine: Some(job.engine.raw()),
        });
        if interrupt {
            let mut r = records::native_fence(handle, p.value, Some((job.engine, job.queue)), form);
            if form == InterruptForm::PerQueue {
                // Per-queue form: the driver reads this queue's signal log; the record names the
                // entry of this very signal, or none when the log does not record this fence's
                // signal (not logged, no signal log, or logged under another handle) — another
                // entry with the same value must not pass for it.
                let own = p.log_entry != packet::NO_LOG
                    && job.logs[LogKind::Signals as usize].is_some()
                    && p.log_handle == handle.raw();
                r.address = u64::from(if own { p.log_entry } else { packet::NO_LOG });
                // If more entries were written since the last record than the log holds, it
                // wrapped over entries the driver never saw: the device cannot tell, so it asks
                // for a scan of everything.
                if job.unreported_signals > abi_fence::LOG_ENTRIES {
                    r.queue = irq::NONE;
                    r.detail = irq::DETAIL_EVALUATE_LEGACY;
                }
            }
            if form == InterruptForm::QueueArray {
                // Queue-array form: every queue with new signal-log entries, coalesced into one
                // record — when this signal's own entry is among them (logged under this
                // fence's handle); the driver reads those logs alone. A log that wrapped is the
                // driver's to notice (its cached position), not the device's.
                let own = logged && p.log_handle == handle.raw();
                let mut named = gpu.queues_to_name.lock().unwrap_or_else(|e| e.into_inner());
                r = records::queue_array(job.engine, &mut named, own);
            }
            job.unreported_signals = 0;
            gpu.post(r, irq::cause::NATIVE_FENCE);
        }
    }
    gpu.notify();
    Ok(())
}

/// `FENCE_WAIT`: continue at `next` (logging the unblock) once the fence is reached, park
/// otherwise.
pub fn wait<M: GuestMemory>(gpu: &Gpu, mem: &GpuMemory<'_, M>, job: &Job, p: &packet::FenceWait, next: u64) -> Step {
    let phys = match mem.translate(job.root, GpuVa(p.fence_va), false) {
        Ok(phys) => phys,
        Err(e) => return e.into(),
    };
    let Some(current) = mem.load_u64(phys, Ordering::Acquire) else {
        return Step::Fault(FaultReason::MmuUnreachable, p.fence_va);
    };
    let observed = job.wait.filter(|w| w.fence_va == p.fence_va && w.value == p.value).map(|w| w.observed);
    let now = gpu.ports.regs.timestamp();
    let begin = p.header & packet::FENCE_WAIT_LOG_BEGIN != 0 && p.log_entry != packet::NO_LOG;
    if begin && observed.is_none() {
        log_entry(gpu, mem, job, LogKind::Waits, p.log_entry, wait_begin(gpu, p, now));
    }
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
    let index = if begin { p.log_entry.wrapping_add(1) } else { p.log_entry };
    log_entry(gpu, mem, job, LogKind::Waits, index, entry);
    Step::Next(next, None)
}

/// The entry of a wait's reserved `WAIT_BEGIN` slot at GPU time `now`: `WAIT_BEGIN` while the
/// driver has `LOG_VERBOSE` on, else empty ([`abi_fence::LOG_OPERATION_NONE`]).
fn wait_begin(gpu: &Gpu, p: &packet::FenceWait, now: u64) -> abi_fence::LogEntry {
    if !gpu.ports.regs.log_verbose() {
        return abi_fence::LogEntry::default();
    }
    abi_fence::LogEntry {
        fence_handle: p.log_handle,
        value: p.value,
        observed_gpu_timestamp: now,
        end_gpu_timestamp: now,
        operation: LogOperation::WaitBegin as u32,
        ..Default::default()
    }
}

/// `MONITORED_FENCE_SIGNAL`: store, then always a monitored-fence record.
pub fn monitored_signal<M: GuestMemory>(
    gpu: &Gpu,
    mem: &GpuMemory<'_, M>,
    job: &Job,
    p: &packet::MonitoredFenceSignal,
) -> Result<(), Step> {
    let phys = mem.translate(job.root, GpuVa(p.fence_va), true)?;
    // NF-21: only kernel-mode queues use monitored fences (the driver holds their GPU waits).
    if job.user_mode {
        return Err(Step::Fault(FaultReason::MonitoredFenceOnUserModeQueue, p.fence_va));
    }
    let narrow = gpu.ports.config.gpu.no_64bit_atomics;
    if let Some((handle, _)) = registered(gpu, phys) {
        let before = mem.load_u64(phys, Ordering::SeqCst);
        // CAST: the 32-bit mode compares the low halves, truncation intended.
        #[allow(clippy::cast_possible_truncation)]
        let lower = |b: u64| {
            if narrow {
                !abi_fence::is_signaled32(p.value as u32, b as u32)
            } else {
                !abi_fence::is_signaled(p.value, b)
            }
        };
        if let Some(before) = before.filter(|&b| lower(b)) {
            backwards(gpu, job, handle, before, p.value);
            return Ok(());
        }
    }
    let stored = if narrow {
        // A device without 64-bit atomics stores the low half (documented on the packet).
        mem.store_u32(phys, (p.value & 0xffff_ffff) as u32, Ordering::SeqCst)
    } else {
        mem.store_u64(phys, p.value, Ordering::SeqCst)
    };
    stored.ok_or_else(|| Step::Fault(mem.write_fault(phys, if narrow { 4 } else { 8 }).into(), p.fence_va))?;
    let handle = registered(gpu, phys).map_or(0, |(h, _)| h.raw());
    gpu.post(
        InterruptRecord {
            kind: RecordKind::MonitoredFenceSignaled as u32,
            engine: job.engine.raw(),
            queue: job.queue.raw(),
            context: job.context.raw(),
            fence: handle,
            value: p.value,
            address: p.fence_va,
            ..Default::default()
        },
        irq::cause::MONITORED_FENCE,
    );
    gpu.notify();
    Ok(())
}

/// A signal of registered fence `handle` from `before` down to `to`: refused, counted and
/// traced (the caller leaves the value as it is).
fn backwards(gpu: &Gpu, job: &Job, handle: FenceHandle, before: u64, to: u64) {
    let count = gpu.fences_backwards.fetch_add(1, Ordering::Relaxed) + 1;
    log::info!(
        "{}: {} on {}: GPU signal of fence {handle} from {before} down to {to} refused ({count} so far)",
        gpu.ports.config.name,
        job.queue,
        job.engine
    );
    gpu.ports.tracer.emit(Event::FenceBackwards {
        handle: handle.raw(),
        from: before,
        to,
        queue: job.queue.raw(),
        engine: job.engine.raw(),
        count,
    });
}
