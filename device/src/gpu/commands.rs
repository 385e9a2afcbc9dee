//! Mailbox commands that program the GPU: object lifetimes, fences, doorbells, power, logs.
//!
//! Every argument is validated before anything changes (ids, ranges, alignment, references);
//! a bad command completes with a status and leaves the GPU as it was.

use std::sync::atomic::{fence, Ordering};

use belfry_abi::engine::{EngineState, QueueState, ENGINE_COUNT, PRIORITY_MAX};
use belfry_abi::fence::{self as abi_fence, FenceKind, LogKind};
use belfry_abi::irq;
use belfry_abi::mailbox::*;
use belfry_abi::mmu::{self, GpuVa, GuestPa};
use belfry_abi::ring;
use vm_memory::{Bytes, GuestAddress, GuestMemory};

use super::{records, AddressSpace, Context, Health, Queue};
use crate::config::{DoorbellModel, Fault};
use crate::device::Device;
use crate::mmu::{GpuMemory, Phys};
use crate::trace::Event;
use crate::wire::Wire;

/// A failed command: its status and why.
pub type Failure = (Status, String);
type Res<T = ()> = Result<T, Failure>;

fn bad_object(why: String) -> Failure {
    (Status::BadObject, why)
}
fn bad_arg(why: String) -> Failure {
    (Status::BadArgument, why)
}

fn read<T: Copy + Default, M: GuestMemory>(mem: &M, at: GuestAddress) -> Res<T>
where
    Wire<T>: vm_memory::ByteValued,
{
    mem.read_obj::<Wire<T>>(at).map(|w| w.0).map_err(|e| (Status::BadAddress, format!("arguments unreadable: {e}")))
}

/// Executes `opcode` with its argument block at `at`.
pub fn execute<M: GuestMemory>(device: &Device, mem: &M, opcode: Opcode, at: GuestAddress, length: u32) -> Res {
    match opcode {
        Opcode::SelfTest => Err(bad_arg("SELF_TEST is executed by the mailbox itself".into())),
        Opcode::CreateAddressSpace => create_address_space(device, read(mem, at)?),
        Opcode::DestroyAddressSpace => destroy_address_space(device, read::<ObjectArgs, _>(mem, at)?.id),
        Opcode::CreateContext => create_context(device, read(mem, at)?),
        Opcode::DestroyContext => destroy_context(device, read::<ObjectArgs, _>(mem, at)?.id),
        Opcode::CreateQueue => create_queue(device, read(mem, at)?),
        Opcode::DestroyQueue => destroy_queue(device, read::<ObjectArgs, _>(mem, at)?.id),
        Opcode::RegisterFence => register_fence(device, mem, read(mem, at)?),
        Opcode::UnregisterFence => unregister_fence(device, read::<FenceHandleArgs, _>(mem, at)?.handle),
        Opcode::UpdateMonitoredValues => {
            let entries = fence_values(mem, at, length)?;
            update_monitored(device, mem, &entries)
        }
        Opcode::UpdateCurrentValues => {
            let entries = fence_values(mem, at, length)?;
            update_current(device, mem, &entries)
        }
        Opcode::ConnectDoorbell => connect_doorbell(device, read(mem, at)?),
        Opcode::DisconnectDoorbell => disconnect_doorbell(device, read::<DoorbellArgs, _>(mem, at)?.queue),
        Opcode::SuspendContext => set_suspended(device, read::<ObjectArgs, _>(mem, at)?.id, true),
        Opcode::ResumeContext => set_suspended(device, read::<ObjectArgs, _>(mem, at)?.id, false),
        Opcode::SetLogBuffer => set_log_buffer(device, mem, read(mem, at)?),
        Opcode::FlushLogs => flush_logs(device, read::<ObjectArgs, _>(mem, at)?.id),
        Opcode::SetEnginePower => set_engine_power(device, read(mem, at)?),
        Opcode::SetDevicePower => set_device_power(device, read(mem, at)?),
        Opcode::KickQueue => kick_queue(device, read::<ObjectArgs, _>(mem, at)?.id),
        Opcode::SetInterruptRing => set_interrupt_ring(device, mem, read(mem, at)?),
        Opcode::QueryQueue => query_queue(device, mem, at, read(mem, at)?),
    }
}

fn create_address_space(device: &Device, a: CreateAddressSpaceArgs) -> Res {
    if a.id >= MAX_ADDRESS_SPACES || a.reserved != 0 {
        return Err(bad_arg(format!("address space id {}", a.id)));
    }
    if !a.root_pa.is_multiple_of(mmu::PAGE_SIZE)
        || !vm_memory::GuestMemoryBackend::address_in_range(&*device.ram.memory(), GuestAddress(a.root_pa))
    {
        return Err((Status::BadAddress, format!("root table {:#x} is unaligned or outside guest memory", a.root_pa)));
    }
    let mut o = device.gpu.lock();
    if o.spaces.contains_key(&a.id) {
        return Err(bad_object(format!("address space {} exists", a.id)));
    }
    o.spaces.insert(a.id, AddressSpace { root: GuestPa(a.root_pa) });
    Ok(())
}

fn destroy_address_space(device: &Device, id: u32) -> Res {
    let mut o = device.gpu.lock();
    if o.contexts.values().any(|c| c.space == id) {
        return Err(bad_object(format!("address space {id} is used by a context")));
    }
    o.spaces.remove(&id).map(|_| ()).ok_or_else(|| bad_object(format!("no address space {id}")))
}

fn create_context(device: &Device, a: CreateContextArgs) -> Res {
    if a.id >= MAX_CONTEXTS {
        return Err(bad_arg(format!("context id {}", a.id)));
    }
    let mut o = device.gpu.lock();
    if o.contexts.contains_key(&a.id) {
        return Err(bad_object(format!("context {} exists", a.id)));
    }
    if a.address_space == 0 || !o.spaces.contains_key(&a.address_space) {
        return Err(bad_object(format!("address space {} is not a process address space", a.address_space)));
    }
    o.contexts.insert(a.id, Context { space: a.address_space, suspended: false, fault: None });
    Ok(())
}

fn destroy_context(device: &Device, id: u32) -> Res {
    let mut o = device.gpu.lock();
    if o.queues.values().any(|q| q.context == id) {
        return Err(bad_object(format!("context {id} still has queues")));
    }
    o.contexts.remove(&id).map(|_| ()).ok_or_else(|| bad_object(format!("no context {id}")))
}

fn create_queue(device: &Device, a: CreateQueueArgs) -> Res {
    if a.id >= MAX_QUEUES || a.engine >= ENGINE_COUNT || a.priority > PRIORITY_MAX {
        return Err(bad_arg(format!("queue {} engine {} priority {}", a.id, a.engine, a.priority)));
    }
    if a.flags & !QUEUE_FLAG_USER_MODE_SUBMISSION != 0 || !ring::is_valid_size(a.ring_entries) {
        return Err(bad_arg(format!("flags {:#x}, ring entries {}", a.flags, a.ring_entries)));
    }
    if !a.ring_va.is_multiple_of(16) || !a.ring_control_va.is_multiple_of(128) {
        return Err(bad_arg(format!("ring {:#x} or ring control {:#x} misaligned", a.ring_va, a.ring_control_va)));
    }
    let mut o = device.gpu.lock();
    if o.queues.contains_key(&a.id) {
        return Err(bad_object(format!("queue {} exists", a.id)));
    }
    if !o.contexts.contains_key(&a.context) {
        return Err(bad_object(format!("no context {}", a.context)));
    }
    o.queues.insert(
        a.id,
        Queue {
            context: a.context,
            engine: a.engine,
            priority: a.priority,
            user_mode: a.flags & QUEUE_FLAG_USER_MODE_SUBMISSION != 0,
            ring_va: a.ring_va,
            ring_entries: a.ring_entries,
            ring_control_va: a.ring_control_va,
            doorbell: None,
            read_index: 0,
            cursor: None,
            wait: None,
            logs: [None, None],
            kicked: false,
            unreported_signals: 0,
            health: Health::Ok,
        },
    );
    o.scheduler.add(a.id, a.engine, a.priority);
    Ok(())
}

fn destroy_queue(device: &Device, id: u32) -> Res {
    let mut o = device.gpu.lock();
    let q = o.queues.remove(&id).ok_or_else(|| bad_object(format!("no queue {id}")))?;
    o.scheduler.remove(id);
    if let Some(d) = q.doorbell {
        o.doorbells[d as usize].retain(|&x| x != id);
    }
    // Completes only once no engine is executing it (slices are short).
    while o.engines.iter().any(|e| e.current == Some(id)) {
        o = device.gpu.changed.wait(o).unwrap_or_else(|e| e.into_inner());
    }
    Ok(())
}

/// Resolves a fence location given at registration to a physical place.
fn resolve<M: GuestMemory>(device: &Device, mem: &M, loc: FenceLocation, system: Option<GuestPa>) -> Res<Phys> {
    if !loc.address.is_multiple_of(8) || loc.reserved != 0 {
        return Err(bad_arg(format!("fence location {:#x} is not 8-byte aligned", loc.address)));
    }
    match loc.space {
        LOCATION_VRAM if loc.address + 8 <= device.vram.size() => Ok(Phys::Vram(loc.address)),
        LOCATION_SYSTEM_VA => {
            let root = system.ok_or_else(|| bad_object("no system address space (id 0)".into()))?;
            GpuMemory::new(mem, &device.vram)
                .translate(root, GpuVa(loc.address), true)
                .map_err(|e| (Status::BadAddress, format!("system VA {:#x}: {:?}", loc.address, e.fault)))
        }
        _ => Err(bad_arg(format!("fence location space {} / {:#x}", loc.space, loc.address))),
    }
}

fn register_fence<M: GuestMemory>(device: &Device, mem: &M, a: RegisterFenceArgs) -> Res {
    let kind = FenceKind::try_from(a.kind).map_err(|k| bad_arg(format!("fence kind {k}")))?;
    if a.handle == 0 || a.reserved != 0 {
        return Err(bad_arg("fence handle 0 is reserved".into()));
    }
    if kind != FenceKind::Monitored && device.config.no_64bit_atomics {
        return Err(bad_arg("native fences need 64-bit atomics, which this device lacks".into()));
    }
    let system = device.gpu.lock().system_root();
    let current = resolve(device, mem, a.current_value, system)?;
    let monitored = match kind {
        FenceKind::Monitored => current,
        _ => resolve(device, mem, a.monitored_value, system)?,
    };
    if kind != FenceKind::Monitored && monitored == current {
        return Err(bad_arg("CurrentValue and MonitoredValue must be separate".into()));
    }
    let mut o = device.gpu.lock();
    if o.fences.len() as u32 >= MAX_FENCES {
        return Err((Status::NoSpace, "fence table full".into()));
    }
    if o.fences.contains_key(&a.handle) || o.fence_at.contains_key(&current) {
        return Err(bad_object(format!("fence {:#x} or its CurrentValue location is registered", a.handle)));
    }
    o.fence_at.insert(current, a.handle);
    o.fences.insert(a.handle, super::Fence { kind, current, monitored });
    drop(o);
    device.tracer.emit(Event::FenceRegistered {
        handle: a.handle,
        kind: format!("{kind:?}"),
        current: format!("{current:?}"),
        monitored: format!("{monitored:?}"),
    });
    Ok(())
}

fn unregister_fence(device: &Device, handle: u64) -> Res {
    let mut o = device.gpu.lock();
    let f = o.fences.remove(&handle).ok_or_else(|| bad_object(format!("no fence {handle:#x}")))?;
    o.fence_at.remove(&f.current);
    Ok(())
}

fn fence_values<M: GuestMemory>(mem: &M, at: GuestAddress, length: u32) -> Res<Vec<FenceValue>> {
    let head: FenceValuesArgs = read(mem, at)?;
    let expected = Opcode::UpdateMonitoredValues.block_len() + head.count * std::mem::size_of::<FenceValue>() as u32;
    if head.count > FENCE_BATCH_MAX || expected != length || head.reserved != 0 {
        return Err((Status::BadLength, format!("count {} does not match length {length}", head.count)));
    }
    let first = at.0 + std::mem::size_of::<FenceValuesArgs>() as u64;
    (0..u64::from(head.count)).map(|i| read(mem, GuestAddress(first + i * 16))).collect()
}

fn lookup(device: &Device, handle: u64) -> Res<super::Fence> {
    device.gpu.lock().fences.get(&handle).copied().ok_or_else(|| bad_object(format!("no fence {handle:#x}")))
}

/// Sets MonitoredValues in order: (1) write, (2) barrier, (3) read CurrentValue, interrupt if
/// CurrentValue > MonitoredValue — so a signal racing the update is never missed.
///
/// Test-only injections: `SlowMonitoredUpdates` holds the command before applying it (the CMP
/// thread sleeps; engines keep running), `NoCatchUpRecord` drops the record of step (3) and
/// `SpuriousFenceRecords` posts one when none is due.
fn update_monitored<M: GuestMemory>(device: &Device, mem: &M, entries: &[FenceValue]) -> Res {
    let fences: Vec<_> = entries.iter().map(|e| lookup(device, e.handle)).collect::<Res<_>>()?;
    let gpu = GpuMemory::new(mem, &device.vram);
    let skip_barrier = device.config.has_fault(Fault::SkipMonitoredBarrier);
    if device.config.has_fault(Fault::SlowMonitoredUpdates) {
        std::thread::sleep(std::time::Duration::from_millis(belfry_abi::regs::SLOW_MONITORED_UPDATE_MS));
    }
    for (e, f) in entries.iter().zip(fences) {
        if f.kind == FenceKind::Monitored {
            return Err(bad_arg(format!("fence {:#x} is a monitored fence: it has no MonitoredValue", e.handle)));
        }
        let current = if skip_barrier {
            // Test-only: the order the barrier forbids — read, then (after a widened window) write.
            let c = gpu.load_u64(f.current, Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_millis(20));
            gpu.store_u64(f.monitored, e.value, Ordering::Relaxed);
            c
        } else {
            gpu.store_u64(f.monitored, e.value, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            gpu.load_u64(f.current, Ordering::SeqCst)
        };
        let current = current.ok_or_else(|| (Status::BadAddress, format!("fence {:#x} unreachable", e.handle)))?;
        let interrupt = abi_fence::needs_interrupt(current, e.value);
        device.tracer.emit(Event::FenceDecision {
            source: "monitored_update",
            handle: e.handle,
            current,
            monitored: e.value,
            interrupt,
        });
        let post = if interrupt {
            !device.config.has_fault(Fault::NoCatchUpRecord)
        } else {
            device.config.has_fault(Fault::SpuriousFenceRecords)
        };
        if post {
            let r = records::native_fence(e.handle, current, irq::NONE, irq::NONE, device.config.interrupt_form);
            records::post(device, r, irq::cause::NATIVE_FENCE);
        }
    }
    Ok(())
}

fn update_current<M: GuestMemory>(device: &Device, mem: &M, entries: &[FenceValue]) -> Res {
    let fences: Vec<_> = entries.iter().map(|e| lookup(device, e.handle)).collect::<Res<_>>()?;
    let gpu = GpuMemory::new(mem, &device.vram);
    for (e, f) in entries.iter().zip(fences) {
        gpu.store_u64(f.current, e.value, Ordering::SeqCst)
            .ok_or_else(|| (Status::BadAddress, format!("fence {:#x} unreachable", e.handle)))?;
    }
    device.gpu.notify();
    Ok(())
}

fn connect_doorbell(device: &Device, a: DoorbellArgs) -> Res {
    let mut o = device.gpu.lock();
    if a.doorbell as usize >= o.doorbells.len() {
        return Err(bad_arg(format!("doorbell {} out of range", a.doorbell)));
    }
    let global = device.config.doorbell_model == DoorbellModel::Global;
    if global && a.doorbell != 0 {
        return Err(bad_arg("the global doorbell model has only doorbell 0".into()));
    }
    let q = o.queues.get(&a.queue).ok_or_else(|| bad_object(format!("no queue {}", a.queue)))?;
    if !q.user_mode {
        return Err(bad_arg(format!("queue {} is a kernel-mode queue", a.queue)));
    }
    if q.doorbell.is_some() {
        return Err(bad_object(format!("queue {} already has a doorbell", a.queue)));
    }
    if !global && !o.doorbells[a.doorbell as usize].is_empty() {
        return Err(bad_object(format!("doorbell {} is connected to another queue", a.doorbell)));
    }
    o.doorbells[a.doorbell as usize].push(a.queue);
    if let Some(q) = o.queues.get_mut(&a.queue) {
        q.doorbell = Some(a.doorbell);
        q.kicked = true; // work written while disconnected runs now
    }
    drop(o);
    device.gpu.notify();
    Ok(())
}

fn disconnect_doorbell(device: &Device, queue: u32) -> Res {
    let mut o = device.gpu.lock();
    let q = o.queues.get_mut(&queue).ok_or_else(|| bad_object(format!("no queue {queue}")))?;
    let d = q.doorbell.take().ok_or_else(|| bad_object(format!("queue {queue} has no doorbell")))?;
    o.doorbells[d as usize].retain(|&x| x != queue);
    Ok(())
}

/// A doorbell rang: mark the queues it serves (dedicated: one; global: every connected queue,
/// the value being only a hint) so their engines re-read the write index.
pub fn doorbell_rung(device: &Device, index: u32) {
    let mut o = device.gpu.lock();
    let queues = o.doorbells.get(index as usize).cloned().unwrap_or_default();
    for id in &queues {
        if let Some(q) = o.queues.get_mut(id) {
            q.kicked = true;
        }
    }
    drop(o);
    if queues.is_empty() {
        log::debug!("{}: doorbell {index} rung with no queue connected", device.config.name);
    }
    device.gpu.notify();
}

fn set_suspended(device: &Device, id: u32, suspended: bool) -> Res {
    let mut o = device.gpu.lock();
    let ctx = o.contexts.get_mut(&id).ok_or_else(|| bad_object(format!("no context {id}")))?;
    ctx.suspended = suspended;
    let queues: Vec<u32> = o.queues.iter().filter(|(_, q)| q.context == id).map(|(i, _)| *i).collect();
    for qid in queues {
        if suspended {
            o.scheduler.remove(qid);
        } else if let Some(q) = o.queues.get_mut(&qid) {
            q.kicked = true;
            let (engine, priority) = (q.engine, q.priority);
            o.scheduler.add(qid, engine, priority);
        }
    }
    if suspended {
        // Preempt: the suspend completes once no engine runs the context's queues.
        while o.engines.iter().any(|e| e.current.is_some_and(|q| o.queues.get(&q).is_some_and(|q| q.context == id))) {
            o = device.gpu.changed.wait(o).unwrap_or_else(|e| e.into_inner());
        }
    }
    drop(o);
    device.gpu.notify();
    Ok(())
}

fn set_log_buffer<M: GuestMemory>(device: &Device, mem: &M, a: SetLogBufferArgs) -> Res {
    let kind = LogKind::try_from(a.kind).map_err(|k| bad_arg(format!("log kind {k}")))?;
    if !a.va.is_multiple_of(mmu::PAGE_SIZE) {
        return Err(bad_arg(format!("log buffer {:#x} is not page aligned", a.va)));
    }
    let system = device.gpu.lock().system_root();
    if a.va != 0 {
        let root = system.ok_or_else(|| bad_object("no system address space (id 0)".into()))?;
        let header =
            abi_fence::LogHeader { entry_count: abi_fence::LOG_ENTRIES, kind: kind as u32, ..Default::default() };
        GpuMemory::new(mem, &device.vram)
            .write(root, a.va, vm_memory::ByteValued::as_slice(&Wire(header)))
            .map_err(|e| (Status::BadAddress, format!("log buffer {:#x}: {:?}", e.va, e.fault)))?;
    }
    let mut o = device.gpu.lock();
    let q = o.queues.get_mut(&a.queue).ok_or_else(|| bad_object(format!("no queue {}", a.queue)))?;
    q.logs[kind as usize] = (a.va != 0).then_some(a.va);
    Ok(())
}

fn flush_logs(device: &Device, queue: u32) -> Res {
    let o = device.gpu.lock();
    if !o.queues.contains_key(&queue) {
        return Err(bad_object(format!("no queue {queue}")));
    }
    drop(o);
    // Entries are written before their index with release order; this barrier makes every
    // entry written so far visible to a reader that then acquires.
    fence(Ordering::SeqCst);
    Ok(())
}

fn set_engine_power(device: &Device, a: PowerArgs) -> Res {
    let state = match a.state {
        0 => EngineState::Active,
        3 => EngineState::F1,
        s => return Err(bad_arg(format!("engine power state {s}"))),
    };
    let mut o = device.gpu.lock();
    let e = o.engines.get_mut(a.target as usize).ok_or_else(|| bad_arg(format!("engine {}", a.target)))?;
    e.state = state;
    e.last_active = std::time::Instant::now();
    drop(o);
    device.tracer.emit(Event::EngineState { engine: a.target, state: state.name() });
    device.gpu.notify();
    Ok(())
}

fn set_device_power(device: &Device, a: PowerArgs) -> Res {
    let d3 = match a.state {
        0 => false,
        3 => true,
        s => return Err(bad_arg(format!("device power state {s}"))),
    };
    device.gpu.lock().d3 = d3;
    device.regs.set_power_state(if d3 { 3 } else { 0 });
    device.tracer.emit(Event::PowerState { state: if d3 { 3 } else { 0 } });
    device.gpu.notify();
    Ok(())
}

fn kick_queue(device: &Device, id: u32) -> Res {
    let mut o = device.gpu.lock();
    let q = o.queues.get_mut(&id).ok_or_else(|| bad_object(format!("no queue {id}")))?;
    if q.user_mode {
        return Err(bad_arg(format!("queue {id} takes work only through its ring and doorbell")));
    }
    q.kicked = true;
    drop(o);
    device.gpu.notify();
    Ok(())
}

fn set_interrupt_ring<M: GuestMemory>(device: &Device, mem: &M, a: SetInterruptRingArgs) -> Res {
    let bytes = irq::RECORDS_OFFSET + u64::from(a.entries) * std::mem::size_of::<irq::InterruptRecord>() as u64;
    if !a.entries.is_power_of_two() || !(2..=4096).contains(&a.entries) || !a.base_pa.is_multiple_of(mmu::PAGE_SIZE) {
        return Err(bad_arg(format!("interrupt ring {:#x} with {} entries", a.base_pa, a.entries)));
    }
    if !mem.check_range(GuestAddress(a.base_pa), bytes as usize, vm_memory::Permissions::Write) {
        return Err((Status::BadAddress, format!("interrupt ring {:#x}+{bytes:#x} outside guest memory", a.base_pa)));
    }
    let _ = mem.write_obj(Wire(irq::InterruptRingHeader::default()), GuestAddress(a.base_pa));
    device.gpu.records.lock().unwrap_or_else(|e| e.into_inner()).set(a.base_pa, a.entries);
    Ok(())
}

fn query_queue<M: GuestMemory>(device: &Device, mem: &M, at: GuestAddress, mut a: QueryQueueArgs) -> Res {
    let o = device.gpu.lock();
    let q = o.queues.get(&a.id).ok_or_else(|| bad_object(format!("no queue {}", a.id)))?;
    let ctx = o.contexts.get(&q.context);
    let fault = ctx.and_then(|c| c.fault);
    a.state = if fault.is_some() {
        QueueState::Faulted
    } else if q.health == Health::Hung {
        QueueState::Hung
    } else if ctx.is_some_and(|c| c.suspended) {
        QueueState::Suspended
    } else if q.wait.is_some() {
        QueueState::Waiting
    } else {
        QueueState::Running
    } as u32;
    a.read_index = q.read_index;
    a.fault_reason = fault.map_or(0, |f| f.reason as u32);
    a.fault_address = fault.map_or(0, |f| f.address);
    a.doorbell = q.doorbell.unwrap_or(irq::NONE);
    drop(o);
    mem.write_obj(Wire(a), at).map_err(|e| (Status::BadAddress, format!("results unwritable: {e}")))
}
