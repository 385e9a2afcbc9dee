//! Packet execution: one packet of a command buffer, checked by the abi's rules
//! ([`packet::check_header`] and each packet's `validate`) and then executed through the GPU
//! MMU. Every packet the abi refuses faults the context with `BAD_PACKET` (at the misaligned
//! address for an alignment error, at the packet otherwise); fence packets go to
//! [`fences`](super::fences).

use std::sync::atomic::Ordering;

use belfry_abi::engine::FaultReason;
use belfry_abi::irq::{self, InterruptRecord, RecordKind};
use belfry_abi::mmu::{GpuVa, GuestPa};
use belfry_abi::packet::{self, ComputeOp, Opcode, PacketError};
use vm_memory::GuestMemory;

use super::fences;
use super::job::{Job, Step};
use super::shared::Gpu;
use super::split;
use super::state::Cursor;
use crate::inject::NotifyFault;
use crate::mmu::GpuMemory;
use crate::trace::{hex, Event, TraceLevel, PACKET_BYTES_MAX};
use crate::wire::Wire;

/// Reads packet `$t` at `$va`, or returns the MMU fault.
macro_rules! read_packet {
    ($mem:expr, $job:expr, $va:expr, $t:ty) => {{
        let mut p = Wire(<$t>::default());
        if let Err(e) = $mem.read($job.root, $va, vm_memory::ByteValued::as_mut_slice(&mut p)) {
            return e.into();
        }
        p.0
    }};
}

/// A packet refused by the abi's rules faults with `BAD_PACKET` at `target` for an alignment
/// error (the address that is misaligned), at the packet `va` for every other error.
fn refused(error: PacketError, va: u64, target: u64) -> Step {
    let at = if error == PacketError::Misaligned { target } else { va };
    Step::Fault(FaultReason::BadPacket, at)
}

/// Checks a packet's fields; returns its fault from the enclosing function.
macro_rules! check {
    ($packet:expr, $va:expr, $target:expr) => {
        if let Err(e) = $packet.validate() {
            return refused(e, $va, $target);
        }
    };
}

/// Whether the packet at `cursor` moves bulk data (`COPY`, `FILL`, `COMPUTE`, `SLOT_COPY`: up to
/// `TRANSFER_MAX_BYTES` each); false when its header cannot be read (its execution faults).
pub fn is_bulk<M: GuestMemory>(mem: &GpuMemory<'_, M>, job: &Job, cursor: &Cursor) -> bool {
    let mut h = [0u8; 4];
    mem.read(job.root, cursor.va, &mut h).is_ok()
        && packet::check_header(u32::from_le_bytes(h))
            .is_ok_and(|(op, _)| matches!(op, Opcode::Copy | Opcode::Fill | Opcode::Compute | Opcode::SlotCopy))
}

/// Executes the packet at `cursor` of `job`.
pub fn execute<M: GuestMemory>(gpu: &Gpu, mem: &GpuMemory<'_, M>, job: &mut Job, cursor: &Cursor) -> Step {
    let va = cursor.va;
    let mut h = [0u8; 4];
    if let Err(e) = mem.read(job.root, va, &mut h) {
        return e.into();
    }
    let bad = Step::Fault(FaultReason::BadPacket, va);
    let Ok((op, dwords)) = packet::check_header(u32::from_le_bytes(h)) else { return bad };
    let Some(next) = va.checked_add(u64::from(dwords) * 4).filter(|&next| next <= cursor.end) else { return bad };
    if op.writes_fence() && gpu.ports.config.gpu.engines_without_fence_writes.contains(&job.engine.raw()) {
        return Step::Fault(FaultReason::EngineCannotWriteFence, va);
    }
    let tracer = &gpu.ports.tracer;
    if tracer.wants(TraceLevel::Packets) {
        // CAST: a packet is at most 65535 dwords; only its first bytes are recorded.
        #[allow(clippy::cast_possible_truncation)]
        let mut raw = vec![0u8; (next - va).min(PACKET_BYTES_MAX as u64) as usize];
        let bytes = mem.read(job.root, va, &mut raw).map(|()| hex(&raw)).unwrap_or_default();
        tracer.emit(Event::Packet {
            queue: job.queue.raw(),
            engine: job.engine.raw(),
            opcode: op.name().into(),
            va,
            bytes,
        });
    }
    let result = match op {
        Opcode::Nop => Ok(()),
        Opcode::WriteData32 => {
            let p = read_packet!(mem, job, va, packet::WriteData32);
            check!(p, va, p.va);
            mem.write(job.root, p.va, &p.value.to_le_bytes()).map_err(Step::from)
        }
        Opcode::WriteData64 => {
            let p = read_packet!(mem, job, va, packet::WriteData64);
            check!(p, va, p.va);
            store64(mem, job.root, p.va, p.value)
        }
        Opcode::WriteTimestamp => {
            let p = read_packet!(mem, job, va, packet::WriteTimestamp);
            check!(p, va, p.va);
            store64(mem, job.root, p.va, gpu.ports.regs.timestamp())
        }
        Opcode::FenceSignal => {
            let p = read_packet!(mem, job, va, packet::FenceSignal);
            check!(p, va, p.fence_va);
            fences::signal(gpu, mem, job, &p)
        }
        Opcode::FenceWait => {
            let p = read_packet!(mem, job, va, packet::FenceWait);
            check!(p, va, p.fence_va);
            return fences::wait(gpu, mem, job, &p, next);
        }
        Opcode::MonitoredFenceSignal => {
            let p = read_packet!(mem, job, va, packet::MonitoredFenceSignal);
            check!(p, va, p.fence_va);
            fences::monitored_signal(gpu, mem, job, &p)
        }
        Opcode::Notify => {
            let p = read_packet!(mem, job, va, packet::Notify);
            check!(p, va, va);
            match gpu.ports.config.inject.on_notify(p.token) {
                None => {}
                Some(NotifyFault::EnginePanic) => {
                    panic!(
                        "injected fault engine-panic: {} on {} executed NOTIFY {:#x}",
                        job.queue, job.engine, p.token
                    )
                }
                Some(NotifyFault::MailboxStall) => {
                    log::warn!("{}: injected fault mailbox-stall: the mailbox stops answering", gpu.ports.config.name);
                    gpu.lock().mailbox_stalled = true;
                }
                Some(NotifyFault::StaleSequence) => {
                    log::warn!(
                        "{}: injected fault mailbox-stall: the next command is answered with the previous sequence number",
                        gpu.ports.config.name
                    );
                    gpu.lock().mailbox_stale_seq = true;
                }
                Some(NotifyFault::CommandRingFault) => {
                    log::warn!(
                        "{}: injected fault mailbox-stall: the next command-ring entry is a ring fault",
                        gpu.ports.config.name
                    );
                    gpu.lock().cmd_ring_fault = true;
                }
                Some(NotifyFault::SlowEnginePickup(slow)) => {
                    log::warn!(
                        "{}: injected fault mailbox-stall: the engines' pick-up after a wake-up is {}",
                        gpu.ports.config.name,
                        if slow { "slow" } else { "back to normal" }
                    );
                    gpu.lock().slow_engine_pickup = slow;
                }
                Some(NotifyFault::HoldMonitoredUpdate) => {
                    log::warn!(
                        "{}: injected fault slow-monitored-updates: the next MonitoredValue update is held",
                        gpu.ports.config.name
                    );
                    gpu.lock().hold_monitored_update = true;
                }
            }
            gpu.post(
                InterruptRecord {
                    kind: RecordKind::Notify as u32,
                    engine: job.engine.raw(),
                    queue: job.queue.raw(),
                    context: job.context.raw(),
                    value: p.token,
                    ..Default::default()
                },
                irq::cause::MONITORED_FENCE,
            );
            Ok(())
        }
        Opcode::Copy => {
            let p = read_packet!(mem, job, va, packet::Copy);
            check!(p, va, va);
            copy(mem, job.root, &p)
        }
        Opcode::Fill => {
            let p = read_packet!(mem, job, va, packet::Fill);
            check!(p, va, va);
            let Ok(size) = usize::try_from(p.size) else { return bad };
            let buf: Vec<u8> = p.value.to_le_bytes().iter().copied().cycle().take(size).collect();
            mem.write(job.root, p.dst_va, &buf).map_err(Step::from)
        }
        Opcode::Compute => {
            let p = read_packet!(mem, job, va, packet::Compute);
            check!(p, va, va);
            let Some(op) = ComputeOp::from_raw(p.op) else { return bad };
            compute(mem, job.root, op, &p)
        }
        Opcode::Jump => {
            let p = read_packet!(mem, job, va, packet::Jump);
            check!(p, va, va);
            let Some(end) = p.va.checked_add(u64::from(p.size_bytes)) else { return bad };
            return Step::Next(p.va, Some(end));
        }
        Opcode::BindSlot => {
            let p = read_packet!(mem, job, va, packet::BindSlot);
            check!(p, va, va);
            split::bind(&mut job.slots, gpu.ports.config.gpu.bind_slots, &p, va)
        }
        Opcode::SlotCopy => {
            let p = read_packet!(mem, job, va, packet::SlotCopy);
            check!(p, va, va);
            split::slot_copy(mem, job.root, &job.slots, &p, va)
        }
    };
    match result {
        Ok(()) => Step::Next(next, None),
        Err(s) => s,
    }
}

/// A 64-bit single-copy-atomic store at `va`.
fn store64<M: GuestMemory>(mem: &GpuMemory<'_, M>, root: GuestPa, va: u64, value: u64) -> Result<(), Step> {
    let phys = mem.translate(root, GpuVa(va), true)?;
    mem.store_u64(phys, value, Ordering::SeqCst).ok_or_else(|| Step::Fault(mem.write_fault(phys, 8).into(), va))
}

fn copy<M: GuestMemory>(mem: &GpuMemory<'_, M>, root: GuestPa, p: &packet::Copy) -> Result<(), Step> {
    let size = usize::try_from(p.size).map_err(|_| Step::Fault(FaultReason::BadPacket, p.src_va))?;
    let mut buf = vec![0u8; size];
    mem.read(root, p.src_va, &mut buf)?;
    mem.write(root, p.dst_va, &buf)?;
    Ok(())
}

fn compute<M: GuestMemory>(
    mem: &GpuMemory<'_, M>,
    root: GuestPa,
    op: ComputeOp,
    p: &packet::Compute,
) -> Result<(), Step> {
    let bytes = usize::try_from(p.count)
        .ok()
        .and_then(|count| count.checked_mul(4))
        .ok_or(Step::Fault(FaultReason::BadPacket, p.a_va))?;
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
    mem.write(root, p.dst_va, &out)?;
    Ok(())
}

/// One element of a `COMPUTE` packet.
pub fn apply_compute(op: ComputeOp, a: u32, b: u32, scalar: u32) -> u32 {
    match op {
        ComputeOp::AddU32 => a.wrapping_add(b),
        ComputeOp::MulU32 => a.wrapping_mul(b),
        ComputeOp::SaxpyF32 => (f32::from_bits(scalar) * f32::from_bits(a) + f32::from_bits(b)).to_bits(),
    }
}
