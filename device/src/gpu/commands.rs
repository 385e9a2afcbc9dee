//! Mailbox commands that program the GPU: object lifetimes, fences, doorbells, power, logs.
//!
//! Every argument is validated before anything changes (ids, ranges, alignment, references);
//! a bad command completes with a status and leaves the GPU as it was.

use std::sync::atomic::{fence, Ordering};

use belfry_abi::engine::{EngineState, FaultReason, ENGINE_COUNT, PRIORITY_MAX};
use belfry_abi::fence::{self as abi_fence, FenceKind, LogKind};
use belfry_abi::ids::{AddressSpaceId, ContextId, EngineId, FenceHandle, QueueId};
use belfry_abi::irq;
use belfry_abi::mailbox::*;
use belfry_abi::mmu::{self, GpuVa, GuestPa};
use belfry_abi::ring;
use vm_memory::{Address, Bytes, GuestAddress, GuestMemory, Permissions};

use super::lost;
use super::objects::{AddressSpace, Context, Fence, Queue, SYSTEM_SPACE};
use super::records;
use super::shared::Gpu;
use super::state::{self, ContextState, QueueState};
use crate::config::DoorbellModel;
use crate::mmu::{GpuMemory, Phys};
use crate::trace::{Event, FenceSource};
use crate::wire::Wire;

// CAST: an interrupt record is 48 bytes.
const RECORD_BYTES: u64 = std::mem::size_of::<irq::InterruptRecord>() as u64;

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
pub fn execute<M: GuestMemory>(gpu: &Gpu, mem: &M, opcode: Opcode, at: GuestAddress, length: u32) -> Res {
    match opcode {
        Opcode::SelfTest => Err(bad_arg("SELF_TEST is executed by the mailbox itself".into())),
        Opcode::CreateAddressSpace => create_address_space(gpu, read(mem, at)?),
        Opcode::DestroyAddressSpace => destroy_address_space(gpu, read::<ObjectArgs, _>(mem, at)?.id.into()),
        Opcode::CreateContext => create_context(gpu, read(mem, at)?),
        Opcode::DestroyContext => destroy_context(gpu, read::<ObjectArgs, _>(mem, at)?.id.into()),
        Opcode::CreateQueue => create_queue(gpu, read(mem, at)?),
        Opcode::DestroyQueue => destroy_queue(gpu, read::<ObjectArgs, _>(mem, at)?.id.into()),
        Opcode::RegisterFence => register_fence(gpu, mem, read(mem, at)?),
        Opcode::UnregisterFence => unregister_fence(gpu, read::<FenceHandleArgs, _>(mem, at)?.handle.into()),
        Opcode::UpdateMonitoredValues => {
            let entries = fence_values(mem, at, length)?;
            update_monitored(gpu, mem, &entries)
        }
        Opcode::UpdateCurrentValues => {
            let entries = fence_values(mem, at, length)?;
            update_current(gpu, mem, &entries)
        }
        Opcode::ConnectDoorbell => connect_doorbell(gpu, read(mem, at)?),
        Opcode::DisconnectDoorbell => disconnect_doorbell(gpu, read::<DoorbellArgs, _>(mem, at)?.queue.into()),
        Opcode::SuspendContext => set_suspended(gpu, read::<ObjectArgs, _>(mem, at)?.id.into(), true),
        Opcode::ResumeContext => set_suspended(gpu, read::<ObjectArgs, _>(mem, at)?.id.into(), false),
        Opcode::SetLogBuffer => set_log_buffer(gpu, mem, read(mem, at)?),
        Opcode::FlushLogs => flush_logs(gpu, read::<ObjectArgs, _>(mem, at)?.id.into()),
        Opcode::SetEnginePower => set_engine_power(gpu, read(mem, at)?),
        Opcode::SetDevicePower => set_device_power(gpu, read(mem, at)?),
        Opcode::KickQueue => kick_queue(gpu, read::<ObjectArgs, _>(mem, at)?.id.into()),
        Opcode::SetInterruptRing => set_interrupt_ring(gpu, mem, read(mem, at)?),
        Opcode::QueryQueue => query_queue(gpu, mem, at, read(mem, at)?),
        Opcode::ResetEngine => reset_engine(gpu, mem, at, read(mem, at)?),
        Opcode::NotifyFenceChanged => notify_fence_changed(gpu, mem, read::<FenceHandleArgs, _>(mem, at)?.handle),
        Opcode::SetPeerSignals => super::peer::set_pages(gpu, mem, read(mem, at)?),
        Opcode::QueryLostSignals => query_lost_signals(gpu, mem, at, length, read(mem, at)?),
        Opcode::MoveMonitoredValue => move_monitored(gpu, mem, read(mem, at)?),
        Opcode::MoveFenceStorage => move_storage(gpu, mem, read(mem, at)?),
    }
}

/// A page, as a length.
// CAST: 4096 bytes.
#[allow(clippy::cast_possible_truncation)]
const PAGE_BYTES: usize = mmu::PAGE_SIZE as usize;

fn create_address_space(gpu: &Gpu, a: CreateAddressSpaceArgs) -> Res {
    if a.id >= MAX_ADDRESS_SPACES || a.reserved != 0 {
        return Err(bad_arg(format!("address space id {}", a.id)));
    }
    if !a.root_pa.is_multiple_of(mmu::PAGE_SIZE)
        || !gpu.ports.ram.memory().check_range(GuestAddress(a.root_pa), PAGE_BYTES, Permissions::Read)
    {
        return Err((Status::BadAddress, format!("root table {:#x} is unaligned or outside guest memory", a.root_pa)));
    }
    let id = AddressSpaceId::new(a.id);
    let mut o = gpu.lock();
    if o.spaces.contains_key(&id) {
        return Err(bad_object(format!("{id} exists")));
    }
    o.spaces.insert(id, AddressSpace { root: GuestPa(a.root_pa) });
    Ok(())
}

fn destroy_address_space(gpu: &Gpu, id: AddressSpaceId) -> Res {
    let mut o = gpu.lock();
    if o.contexts.values().any(|c| c.space == id) {
        return Err(bad_object(format!("{id} is used by a context")));
    }
    o.spaces.remove(&id).map(|_| ()).ok_or_else(|| bad_object(format!("no {id}")))
}

fn create_context(gpu: &Gpu, a: CreateContextArgs) -> Res {
    if a.id >= MAX_CONTEXTS {
        return Err(bad_arg(format!("context id {}", a.id)));
    }
    let (id, space) = (ContextId::new(a.id), AddressSpaceId::new(a.address_space));
    let mut o = gpu.lock();
    if o.contexts.contains_key(&id) {
        return Err(bad_object(format!("{id} exists")));
    }
    if space == SYSTEM_SPACE || !o.spaces.contains_key(&space) {
        return Err(bad_object(format!("{space} is not a process address space")));
    }
    o.contexts.insert(id, Context { space, state: ContextState::Active });
    Ok(())
}

fn destroy_context(gpu: &Gpu, id: ContextId) -> Res {
    let mut o = gpu.lock();
    if o.queues.values().any(|q| q.context == id) {
        return Err(bad_object(format!("{id} still has queues")));
    }
    o.contexts.remove(&id).map(|_| ()).ok_or_else(|| bad_object(format!("no {id}")))
}

fn create_queue(gpu: &Gpu, a: CreateQueueArgs) -> Res {
    if a.id >= MAX_QUEUES || a.engine >= ENGINE_COUNT || a.priority > PRIORITY_MAX {
        return Err(bad_arg(format!("queue {} engine {} priority {}", a.id, a.engine, a.priority)));
    }
    if a.flags & QUEUE_FLAG_USER_MODE_SUBMISSION != 0 && gpu.ports.config.gpu.no_native_fences {
        return Err(bad_arg("a device without native fences has kernel-mode queues only".into()));
    }
    let user_mode = a.flags & QUEUE_FLAG_USER_MODE_SUBMISSION != 0;
    let paging = a.flags & QUEUE_FLAG_PAGING != 0;
    if a.flags & !(QUEUE_FLAG_USER_MODE_SUBMISSION | QUEUE_FLAG_PAGING) != 0
        || (user_mode && paging)
        || !ring::is_valid_size(a.ring_entries)
    {
        return Err(bad_arg(format!("flags {:#x}, ring entries {}", a.flags, a.ring_entries)));
    }
    if !a.ring_va.is_multiple_of(16) || !a.ring_control_va.is_multiple_of(128) {
        return Err(bad_arg(format!("ring {:#x} or ring control {:#x} misaligned", a.ring_va, a.ring_control_va)));
    }
    let (id, context, engine) = (QueueId::new(a.id), ContextId::new(a.context), EngineId::new(a.engine));
    let mut o = gpu.lock();
    if o.queues.contains_key(&id) {
        return Err(bad_object(format!("{id} exists")));
    }
    if !o.contexts.contains_key(&context) {
        return Err(bad_object(format!("no {context}")));
    }
    o.queues.insert(
        id,
        Queue {
            context,
            engine,
            priority: a.priority,
            user_mode,
            paging,
            split_open: false,
            slots: Default::default(),
            ring_va: a.ring_va,
            ring_entries: a.ring_entries,
            ring_control_va: a.ring_control_va,
            doorbell: None,
            read_index: 0,
            logs: [None, None],
            unreported_signals: 0,
            dropped: None,
            state: QueueState::Idle,
        },
    );
    o.scheduler.add(id, engine, a.priority);
    Ok(())
}

fn destroy_queue(gpu: &Gpu, id: QueueId) -> Res {
    let mut o = gpu.lock();
    let q = o.queues.remove(&id).ok_or_else(|| bad_object(format!("no {id}")))?;
    o.scheduler.remove(id);
    if let Some(connected) = q.doorbell.and_then(|d| o.doorbell_mut(d)) {
        connected.retain(|&x| x != id);
    }
    // Completes only once no engine is executing it (slices are short).
    while o.is_running(id) {
        o = gpu.wait(o);
    }
    Ok(())
}

/// Resolves a fence location given at registration to a physical place.
fn resolve<M: GuestMemory>(gpu: &Gpu, mem: &M, loc: FenceLocation, system: Option<GuestPa>) -> Res<Phys> {
    if !loc.address.is_multiple_of(8) || loc.reserved != 0 {
        return Err(bad_arg(format!("fence location {:#x} is not 8-byte aligned", loc.address)));
    }
    match loc.space {
        LOCATION_VRAM if loc.address.checked_add(8).is_some_and(|end| end <= gpu.ports.vram.size()) => {
            Ok(Phys::Vram(loc.address))
        }
        LOCATION_SYSTEM_VA => {
            let root = system.ok_or_else(|| bad_object("no system address space (id 0)".into()))?;
            GpuMemory::new(mem, &gpu.ports.vram)
                .translate(root, GpuVa(loc.address), true)
                .map_err(|e| (Status::BadAddress, format!("system VA {:#x}: {:?}", loc.address, e.fault)))
        }
        _ => Err(bad_arg(format!("fence location space {} / {:#x}", loc.space, loc.address))),
    }
}

fn register_fence<M: GuestMemory>(gpu: &Gpu, mem: &M, a: RegisterFenceArgs) -> Res {
    let kind = FenceKind::try_from(a.kind).map_err(|e| bad_arg(format!("fence kind {}", e.raw)))?;
    let handle = FenceHandle::new(a.handle);
    if a.handle == 0 || a.flags & !REGISTER_CROSS_ADAPTER != 0 {
        return Err(bad_arg(format!("fence handle {:#x}, flags {:#x}", a.handle, a.flags)));
    }
    if kind != FenceKind::Monitored && gpu.ports.config.gpu.no_64bit_atomics {
        return Err(bad_arg("native fences need 64-bit atomics, which this device lacks".into()));
    }
    if kind != FenceKind::Monitored && gpu.ports.config.gpu.no_native_fences {
        return Err(bad_arg("this device has no native fences (--no-native-fences)".into()));
    }
    let cross_adapter = a.flags & REGISTER_CROSS_ADAPTER != 0;
    if cross_adapter && kind == FenceKind::IntraGpu {
        return Err(bad_arg("an INTRA_GPU fence cannot be cross-adapter (XAD-02)".into()));
    }
    let system = gpu.lock().system_root();
    let current = resolve(gpu, mem, a.current_value, system)?;
    let monitored = match kind {
        FenceKind::Monitored => current,
        _ => resolve(gpu, mem, a.monitored_value, system)?,
    };
    if kind != FenceKind::Monitored && monitored == current {
        return Err(bad_arg("CurrentValue and MonitoredValue must be separate".into()));
    }
    if !gpu.ports.regs.os_supports(kind, matches!(monitored, Phys::Vram(_))) {
        let what = if kind == FenceKind::IntraGpu { "INTRA_GPU" } else { "optimized DEFAULT" };
        return Err(bad_arg(format!("the OS reported no support for {what} fences (OS_CAPS, CAP-04)")));
    }
    let mut o = gpu.lock();
    if u32::try_from(o.fences.len()).is_ok_and(|n| n >= MAX_FENCES) {
        return Err((Status::NoSpace, "fence table full".into()));
    }
    if o.fences.contains_key(&handle) || o.fence_at.contains_key(&current) {
        return Err(bad_object(format!("fence {:#x} or its CurrentValue location is registered", a.handle)));
    }
    o.fence_at.insert(current, handle);
    o.fences.insert(handle, Fence { kind, current, monitored, cross_adapter, peer_named: 0 });
    drop(o);
    gpu.ports.tracer.emit(Event::FenceRegistered {
        handle: a.handle,
        kind: format!("{kind:?}"),
        current: format!("{current:?}"),
        monitored: format!("{monitored:?}"),
    });
    Ok(())
}

/// `MOVE_MONITORED_VALUE` (NF-14): under the fence table's lock, copies the MonitoredValue to
/// its new place and points the registration there (only the CMP writes MonitoredValue, so no
/// update is lost); then barrier, CurrentValue, and a record if CurrentValue > MonitoredValue.
/// An engine that took the registration before the lock stored its CurrentValue before it, so
/// that read sees the store and a decision made against the old place is never the only one.
fn move_monitored<M: GuestMemory>(gpu: &Gpu, mem: &M, a: MoveMonitoredArgs) -> Res {
    let handle = FenceHandle::new(a.handle);
    let system = gpu.lock().system_root();
    let to = resolve(gpu, mem, a.monitored_value, system)?;
    let gmem = GpuMemory::new(mem, &gpu.ports.vram);
    let mut o = gpu.lock();
    let f = o.fences.get_mut(&handle).ok_or_else(|| bad_object(format!("no fence {:#x}", a.handle)))?;
    if f.kind == FenceKind::Monitored {
        return Err(bad_arg(format!("fence {:#x} is a monitored fence: it has no MonitoredValue", a.handle)));
    }
    if to == f.current {
        return Err(bad_arg("CurrentValue and MonitoredValue must be separate".into()));
    }
    if !gpu.ports.regs.os_supports(f.kind, matches!(to, Phys::Vram(_))) {
        return Err(bad_arg("the OS reported no support for optimized DEFAULT fences (OS_CAPS, CAP-04)".into()));
    }
    let value = gmem
        .load_u64(f.monitored, Ordering::SeqCst)
        .ok_or_else(|| (Status::BadAddress, format!("fence {:#x} unreachable", a.handle)))?;
    gmem.store_u64(to, value, Ordering::SeqCst)
        .ok_or_else(|| (Status::BadAddress, format!("new MonitoredValue of fence {:#x} unreachable", a.handle)))?;
    let (from, current_at) = (f.monitored, f.current);
    f.monitored = to;
    drop(o);
    fence(Ordering::SeqCst);
    let current = gmem
        .load_u64(current_at, Ordering::SeqCst)
        .ok_or_else(|| (Status::BadAddress, format!("fence {:#x} unreachable", a.handle)))?;
    let interrupt = abi_fence::needs_interrupt(current, value);
    log::debug!("{}: fence {:#x} MonitoredValue moved from {from:?} to {to:?}", gpu.ports.config.name, a.handle);
    gpu.ports.tracer.emit(Event::FenceMonitoredMoved {
        handle: a.handle,
        from: format!("{from:?}"),
        to: format!("{to:?}"),
        current,
        monitored: value,
        interrupt,
    });
    if interrupt {
        let r = records::native_fence(handle, current, None, gpu.ports.config.gpu.interrupt_form);
        gpu.post(r, irq::cause::NATIVE_FENCE);
    }
    Ok(())
}

/// `MOVE_FENCE_STORAGE` (NF-18): under the fence table's lock, copies an INTRA_GPU fence's
/// CurrentValue and MonitoredValue to their new places and re-keys the registration by the new
/// CurrentValue place; then barrier, CurrentValue, and a record if CurrentValue >
/// MonitoredValue. Engines write CurrentValue through a context's page tables, not under the
/// lock: the driver has every context that maps the old place suspended (no engine runs their
/// queues, and there is no TLB, so no translation of the old place outlives the suspension) and
/// retargets their entries before it resumes them. The CMP finds the fence only through the
/// registration, under the lock, so it sees the old places or the new ones, never a mix.
fn move_storage<M: GuestMemory>(gpu: &Gpu, mem: &M, a: MoveFenceStorageArgs) -> Res {
    let handle = FenceHandle::new(a.handle);
    let system = gpu.lock().system_root();
    let to_current = resolve(gpu, mem, a.current_value, system)?;
    let to_monitored = resolve(gpu, mem, a.monitored_value, system)?;
    if to_current == to_monitored {
        return Err(bad_arg("CurrentValue and MonitoredValue must be separate".into()));
    }
    let gmem = GpuMemory::new(mem, &gpu.ports.vram);
    let mut o = gpu.lock();
    let f = *o.fences.get(&handle).ok_or_else(|| bad_object(format!("no fence {:#x}", a.handle)))?;
    if f.kind != FenceKind::IntraGpu {
        return Err(bad_arg(format!("fence {:#x} is not an INTRA_GPU fence: its storage does not move", a.handle)));
    }
    if o.fence_at.get(&to_current).is_some_and(|&h| h != handle) {
        return Err(bad_object(format!("another fence's CurrentValue is registered at {to_current:?}")));
    }
    let unreachable = |what: &str| (Status::BadAddress, format!("{what} of fence {:#x} unreachable", a.handle));
    let current = gmem.load_u64(f.current, Ordering::SeqCst).ok_or_else(|| unreachable("CurrentValue"))?;
    let monitored = gmem.load_u64(f.monitored, Ordering::SeqCst).ok_or_else(|| unreachable("MonitoredValue"))?;
    gmem.store_u64(to_current, current, Ordering::SeqCst).ok_or_else(|| unreachable("the new CurrentValue"))?;
    gmem.store_u64(to_monitored, monitored, Ordering::SeqCst).ok_or_else(|| unreachable("the new MonitoredValue"))?;
    o.fence_at.remove(&f.current);
    o.fence_at.insert(to_current, handle);
    if let Some(moved) = o.fences.get_mut(&handle) {
        moved.current = to_current;
        moved.monitored = to_monitored;
    }
    drop(o);
    fence(Ordering::SeqCst);
    let now = gmem.load_u64(to_current, Ordering::SeqCst).ok_or_else(|| unreachable("the new CurrentValue"))?;
    let interrupt = abi_fence::needs_interrupt(now, monitored);
    log::debug!(
        "{}: fence {:#x} storage moved from {:?} to {to_current:?} (MonitoredValue to {to_monitored:?})",
        gpu.ports.config.name,
        a.handle,
        f.current
    );
    gpu.ports.tracer.emit(Event::FenceStorageMoved {
        handle: a.handle,
        from: format!("{:?}", f.current),
        to: format!("{to_current:?}"),
        monitored_to: format!("{to_monitored:?}"),
        current: now,
        monitored,
        interrupt,
    });
    if interrupt {
        let r = records::native_fence(handle, now, None, gpu.ports.config.gpu.interrupt_form);
        gpu.post(r, irq::cause::NATIVE_FENCE);
    }
    gpu.notify();
    Ok(())
}

fn unregister_fence(gpu: &Gpu, handle: FenceHandle) -> Res {
    let mut o = gpu.lock();
    let f = o.fences.remove(&handle).ok_or_else(|| bad_object(format!("no fence {:#x}", handle.raw())))?;
    o.fence_at.remove(&f.current);
    Ok(())
}

fn fence_values<M: GuestMemory>(mem: &M, at: GuestAddress, length: u32) -> Res<Vec<FenceValue>> {
    let head: FenceValuesArgs = read(mem, at)?;
    let expected = u32::try_from(std::mem::size_of::<FenceValue>())
        .ok()
        .and_then(|entry| head.count.checked_mul(entry))
        .and_then(|entries| entries.checked_add(Opcode::UpdateMonitoredValues.block_len()));
    if head.count > FENCE_BATCH_MAX || expected != Some(length) || head.reserved != 0 {
        return Err((Status::BadLength, format!("count {} does not match length {length}", head.count)));
    }
    // CAST: the argument block's header is 24 bytes.
    let first = at.0.checked_add(std::mem::size_of::<FenceValuesArgs>() as u64);
    let entry = |i: u64| first.and_then(|f| f.checked_add(i.checked_mul(16)?)).map(GuestAddress);
    (0..u64::from(head.count))
        .map(|i| entry(i).ok_or_else(|| (Status::BadAddress, format!("fence value {i} wraps the address range"))))
        .map(|at| read(mem, at?))
        .collect()
}

fn lookup(gpu: &Gpu, handle: u64) -> Res<Fence> {
    let found = gpu.lock().fences.get(&FenceHandle::new(handle)).copied();
    found.ok_or_else(|| bad_object(format!("no fence {handle:#x}")))
}

/// Sets MonitoredValues in order: (1) write, (2) barrier, (3) read CurrentValue, interrupt if
/// CurrentValue > MonitoredValue — so a signal racing the update is never missed.
///
/// Test-only injections: `SlowMonitoredUpdates` holds an armed command before applying it
/// ([`hold_until_signalled`]; the CMP thread sleeps, engines keep running), `NoCatchUpRecord` drops the record of step (3) and
/// `SpuriousFenceRecords` posts one when none is due.
fn update_monitored<M: GuestMemory>(gpu: &Gpu, mem: &M, entries: &[FenceValue]) -> Res {
    let fences: Vec<_> = entries.iter().map(|e| lookup(gpu, e.handle)).collect::<Res<_>>()?;
    let gmem = GpuMemory::new(mem, &gpu.ports.vram);
    let inject = &gpu.ports.config.inject;
    let skip_barrier = inject.skips_monitored_barrier();
    if let Some(most) = inject.monitored_update_delay() {
        if std::mem::take(&mut gpu.lock().hold_monitored_update) {
            hold_until_signalled(&gmem, &fences, most);
        }
    }
    for (e, f) in entries.iter().zip(fences) {
        if f.kind == FenceKind::Monitored {
            return Err(bad_arg(format!("fence {:#x} is a monitored fence: it has no MonitoredValue", e.handle)));
        }
        let current = if skip_barrier {
            // Test-only: the order the barrier forbids — read, then (after a widened window) write.
            let c = gmem.load_u64(f.current, Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_millis(20));
            gmem.store_u64(f.monitored, e.value, Ordering::Relaxed);
            c
        } else {
            gmem.store_u64(f.monitored, e.value, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            gmem.load_u64(f.current, Ordering::SeqCst)
        };
        let current = current.ok_or_else(|| (Status::BadAddress, format!("fence {:#x} unreachable", e.handle)))?;
        let interrupt = abi_fence::needs_interrupt(current, e.value);
        gpu.ports.tracer.emit(Event::FenceDecision {
            source: FenceSource::MonitoredUpdate,
            handle: e.handle,
            current,
            monitored: e.value,
            interrupt,
            queue: None,
            engine: None,
        });
        if inject.posts_monitored_record(interrupt) {
            let r =
                records::native_fence(FenceHandle::new(e.handle), current, None, gpu.ports.config.gpu.interrupt_form);
            gpu.post(r, irq::cause::NATIVE_FENCE);
        }
    }
    Ok(())
}

/// Test-only (`SlowMonitoredUpdates`, armed by `HOLD_MONITORED_UPDATE_TOKEN`): returns once the
/// CurrentValue of every fence of `fences` differs from what it was on arrival (a signal landed
/// while the update was held), or after `most`.
fn hold_until_signalled<M: GuestMemory>(gmem: &GpuMemory<'_, M>, fences: &[Fence], most: std::time::Duration) {
    let current = |f: &Fence| gmem.load_u64(f.current, Ordering::SeqCst);
    let found: Vec<_> = fences.iter().map(current).collect();
    let end = std::time::Instant::now() + most;
    while std::time::Instant::now() < end && fences.iter().zip(&found).any(|(f, was)| current(f) == *was) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn update_current<M: GuestMemory>(gpu: &Gpu, mem: &M, entries: &[FenceValue]) -> Res {
    let fences: Vec<_> = entries.iter().map(|e| lookup(gpu, e.handle)).collect::<Res<_>>()?;
    let gmem = GpuMemory::new(mem, &gpu.ports.vram);
    for (e, f) in entries.iter().zip(fences) {
        gmem.store_u64(f.current, e.value, Ordering::SeqCst)
            .ok_or_else(|| (Status::BadAddress, format!("fence {:#x} unreachable", e.handle)))?;
    }
    gpu.notify();
    Ok(())
}

/// `NOTIFY_FENCE_CHANGED` (XAD-07, XAD-09): another adapter or the CPU changed the fence's
/// CurrentValue. Nothing is written; the engines re-evaluate the queues parked on fences (a
/// parked wait on a cross-adapter fence is otherwise never re-read, see `engine::is_ready`).
fn notify_fence_changed<M: GuestMemory>(gpu: &Gpu, mem: &M, handle: u64) -> Res {
    let f = lookup(gpu, handle)?;
    let gmem = GpuMemory::new(mem, &gpu.ports.vram);
    let current = gmem.load_u64(f.current, Ordering::SeqCst).unwrap_or(0);
    let monitored =
        if f.kind == FenceKind::Monitored { 0 } else { gmem.load_u64(f.monitored, Ordering::SeqCst).unwrap_or(0) };
    gpu.ports.tracer.emit(Event::FenceDecision {
        source: FenceSource::Notify,
        handle,
        current,
        monitored,
        interrupt: false,
        queue: None,
        engine: None,
    });
    gpu.notify();
    Ok(())
}

fn connect_doorbell(gpu: &Gpu, a: DoorbellArgs) -> Res {
    let id = QueueId::new(a.queue);
    let mut o = gpu.lock();
    let Some(connected) = o.doorbell_mut(a.doorbell).map(|c| !c.is_empty()) else {
        return Err(bad_arg(format!("doorbell {} out of range", a.doorbell)));
    };
    let global = gpu.ports.config.gpu.doorbell_model == DoorbellModel::Global;
    if global && a.doorbell != 0 {
        return Err(bad_arg("the global doorbell model has only doorbell 0".into()));
    }
    let q = o.queues.get(&id).ok_or_else(|| bad_object(format!("no {id}")))?;
    if !q.user_mode {
        return Err(bad_arg(format!("{id} is a kernel-mode queue")));
    }
    if q.doorbell.is_some() {
        return Err(bad_object(format!("{id} already has a doorbell")));
    }
    if !global && connected {
        return Err(bad_object(format!("doorbell {} is connected to another queue", a.doorbell)));
    }
    // A shared doorbell starts from zero, so the new queue's first ring is a change whatever
    // the previous queue wrote last (the kick below covers what was written before).
    gpu.ports.doorbells.connected(a.doorbell);
    if let Some(queues) = o.doorbell_mut(a.doorbell) {
        queues.push(id);
    }
    if let Some(q) = o.queues.get_mut(&id) {
        q.doorbell = Some(a.doorbell);
        q.state.kick(); // work written while disconnected runs now
    }
    drop(o);
    gpu.notify();
    Ok(())
}

fn disconnect_doorbell(gpu: &Gpu, queue: QueueId) -> Res {
    let mut o = gpu.lock();
    let q = o.queues.get_mut(&queue).ok_or_else(|| bad_object(format!("no {queue}")))?;
    let d = q.doorbell.take().ok_or_else(|| bad_object(format!("{queue} has no doorbell")))?;
    if let Some(queues) = o.doorbell_mut(d) {
        queues.retain(|&x| x != queue);
    }
    Ok(())
}

/// A doorbell rang: mark the queues it serves (dedicated: one; global: every connected queue,
/// the value being only a hint) so their engines re-read the write index.
pub fn doorbell_rung(gpu: &Gpu, index: u32) {
    kick_doorbell(gpu, index);
    gpu.notify();
}

/// Kicks the queues connected to doorbell `index` and returns their engines, waking nothing.
pub fn kick_doorbell(gpu: &Gpu, index: u32) -> Vec<EngineId> {
    let mut o = gpu.lock();
    let queues = o.doorbell_mut(index).map(|q| q.clone()).unwrap_or_default();
    let mut engines = Vec::new();
    for id in &queues {
        if let Some(q) = o.queues.get_mut(id) {
            q.state.kick();
            if !engines.contains(&q.engine) {
                engines.push(q.engine);
            }
        }
    }
    drop(o);
    if queues.is_empty() {
        log::debug!("{}: doorbell {index} rung with no queue connected", gpu.ports.config.name);
    }
    engines
}

fn set_suspended(gpu: &Gpu, id: ContextId, suspended: bool) -> Res {
    let mut o = gpu.lock();
    let ctx = o.contexts.get_mut(&id).ok_or_else(|| bad_object(format!("no {id}")))?;
    if suspended {
        ctx.state.suspend();
    } else {
        ctx.state.resume();
    }
    let queues: Vec<QueueId> = o.queues.iter().filter(|(_, q)| q.context == id).map(|(i, _)| *i).collect();
    for qid in queues {
        if suspended {
            o.scheduler.remove(qid);
        } else if let Some(q) = o.queues.get_mut(&qid) {
            q.state.kick();
            let (engine, priority) = (q.engine, q.priority);
            o.scheduler.add(qid, engine, priority);
        }
    }
    if suspended {
        // Preempt: the suspend completes once no engine runs the context's queues.
        while o.engines.iter().any(|e| e.current.is_some_and(|q| o.queues.get(&q).is_some_and(|q| q.context == id))) {
            o = gpu.wait(o);
        }
    }
    drop(o);
    gpu.notify();
    Ok(())
}

fn set_log_buffer<M: GuestMemory>(gpu: &Gpu, mem: &M, a: SetLogBufferArgs) -> Res {
    let kind = LogKind::try_from(a.kind).map_err(|e| bad_arg(format!("log kind {}", e.raw)))?;
    if !a.va.is_multiple_of(mmu::PAGE_SIZE) {
        return Err(bad_arg(format!("log buffer {:#x} is not page aligned", a.va)));
    }
    let system = gpu.lock().system_root();
    if a.va != 0 {
        let root = system.ok_or_else(|| bad_object("no system address space (id 0)".into()))?;
        let header =
            abi_fence::LogHeader { entry_count: abi_fence::LOG_ENTRIES, kind: kind as u32, ..Default::default() };
        GpuMemory::new(mem, &gpu.ports.vram)
            .write(root, a.va, vm_memory::ByteValued::as_slice(&Wire(header)))
            .map_err(|e| (Status::BadAddress, format!("log buffer {:#x}: {:?}", e.va, e.fault)))?;
    }
    let mut o = gpu.lock();
    let id = QueueId::new(a.queue);
    let q = o.queues.get_mut(&id).ok_or_else(|| bad_object(format!("no {id}")))?;
    q.logs[kind as usize] = (a.va != 0).then_some(a.va);
    Ok(())
}

fn flush_logs(gpu: &Gpu, queue: QueueId) -> Res {
    let o = gpu.lock();
    if !o.queues.contains_key(&queue) {
        return Err(bad_object(format!("no {queue}")));
    }
    drop(o);
    // Entries are written before their index with release order; this barrier makes every
    // entry written so far visible to a reader that then acquires.
    fence(Ordering::SeqCst);
    Ok(())
}

fn set_engine_power(gpu: &Gpu, a: PowerArgs) -> Res {
    let state = match a.state {
        0 => EngineState::Active,
        3 => EngineState::F1,
        s => return Err(bad_arg(format!("engine power state {s}"))),
    };
    let mut o = gpu.lock();
    let e = o.engine_mut(EngineId::new(a.target)).ok_or_else(|| bad_arg(format!("engine {}", a.target)))?;
    e.state = state;
    e.last_active = std::time::Instant::now();
    drop(o);
    gpu.ports.tracer.emit(Event::EngineState { engine: a.target, state: state.name().into() });
    gpu.notify();
    Ok(())
}

fn set_device_power(gpu: &Gpu, a: PowerArgs) -> Res {
    let d3 = match a.state {
        0 => false,
        3 => true,
        s => return Err(bad_arg(format!("device power state {s}"))),
    };
    gpu.set_d3(d3);
    gpu.ports.regs.set_power_state(if d3 { 3 } else { 0 });
    gpu.ports.tracer.emit(Event::PowerState { state: if d3 { 3 } else { 0 } });
    Ok(())
}

fn kick_queue(gpu: &Gpu, id: QueueId) -> Res {
    let mut o = gpu.lock();
    o.kicks = o.kicks.wrapping_add(1);
    let q = o.queues.get_mut(&id).ok_or_else(|| bad_object(format!("no {id}")))?;
    if q.user_mode {
        return Err(bad_arg(format!("{id} takes work only through its ring and doorbell")));
    }
    q.state.kick();
    drop(o);
    gpu.notify();
    Ok(())
}

fn set_interrupt_ring<M: GuestMemory>(gpu: &Gpu, mem: &M, a: SetInterruptRingArgs) -> Res {
    if !a.entries.is_power_of_two() || !(2..=4096).contains(&a.entries) || !a.base_pa.is_multiple_of(mmu::PAGE_SIZE) {
        return Err(bad_arg(format!("interrupt ring {:#x} with {} entries", a.base_pa, a.entries)));
    }
    let bytes = irq::RECORDS_OFFSET + u64::from(a.entries) * RECORD_BYTES;
    let fits =
        usize::try_from(bytes).is_ok_and(|len| mem.check_range(GuestAddress(a.base_pa), len, Permissions::Write));
    if !fits {
        return Err((Status::BadAddress, format!("interrupt ring {:#x}+{bytes:#x} outside guest memory", a.base_pa)));
    }
    let _ = mem.write_obj(Wire(irq::InterruptRingHeader::default()), GuestAddress(a.base_pa));
    records::lock(&gpu.ports, &gpu.records).set(a.base_pa, a.entries);
    Ok(())
}

fn query_queue<M: GuestMemory>(gpu: &Gpu, mem: &M, at: GuestAddress, mut a: QueryQueueArgs) -> Res {
    let id = QueueId::new(a.id);
    let o = gpu.lock();
    let q = o.queues.get(&id).ok_or_else(|| bad_object(format!("no {id}")))?;
    let ctx = o.contexts.get(&q.context).map(|c| c.state);
    let fault = ctx.and_then(|c| c.fault_info());
    a.state = state::reported(&q.state, ctx) as u32;
    a.read_index = q.read_index;
    a.fault_reason = fault.map_or(0, |f| f.reason as u32);
    a.fault_address = fault.map_or(0, |f| f.address);
    a.doorbell = q.doorbell.unwrap_or(irq::NONE);
    drop(o);
    mem.write_obj(Wire(a), at).map_err(|e| (Status::BadAddress, format!("results unwritable: {e}")))
}

/// `RESET_ENGINE` (ENG-06): holds the engine (no new slice starts), waits for the running slice
/// to end, picks the guilty queue ([`QueueState::hang_rank`]: the one the watchdog stopped, else
/// the longest-busy unfinished command buffer, if busy at least `min_busy_ms`), drops its work and faults its context
/// ([`FaultReason::EngineReset`]), then lets the engine run the others again — their work,
/// parked waits and positions untouched. Writes the guilty queue and context back
/// (`irq::NONE` when no queue had unfinished work).
fn reset_engine<M: GuestMemory>(gpu: &Gpu, mem: &M, at: GuestAddress, mut a: ResetEngineArgs) -> Res {
    if a.engine >= ENGINE_COUNT {
        return Err(bad_arg(format!("engine {}", a.engine)));
    }
    let min_busy = std::time::Duration::from_millis(u64::from(a.min_busy_ms));
    let engine = EngineId::new(a.engine);
    let mut o = gpu.lock();
    if let Some(e) = o.engine_mut(engine) {
        e.resetting = true;
    }
    while o.engine(engine).is_some_and(|e| e.current.is_some()) {
        o = gpu.wait(o);
    }
    let guilty = o
        .queues
        .iter()
        .filter(|(_, q)| q.engine == engine)
        .filter_map(|(id, q)| Some((q.state.hang_rank()?, *id)))
        .filter(|(rank, _)| *rank >= min_busy)
        .max()
        .map(|(_, id)| id);
    let mut blamed = None;
    if let Some(q) = guilty.and_then(|id| o.queues.get_mut(&id)) {
        q.dropped = q.state.cursor().or(q.dropped);
        q.state.drop_work();
        blamed = Some(q.context);
    }
    if let (Some(queue), Some(context)) = (guilty, blamed) {
        if let Some(ctx) = o.contexts.get_mut(&context) {
            ctx.state.fault(state::Fault { reason: FaultReason::EngineReset, address: 0, queue });
        }
    }
    if let Some(e) = o.engine_mut(engine) {
        e.resetting = false;
        e.last_active = std::time::Instant::now();
    }
    drop(o);
    gpu.notify();
    a.guilty_queue = guilty.map_or(irq::NONE, QueueId::raw);
    a.guilty_context = blamed.map_or(irq::NONE, ContextId::raw);
    let level = if guilty.is_some() { log::Level::Warn } else { log::Level::Debug };
    log::log!(
        level,
        "{}: engine {} reset: queue {:#x} of context {:#x} dropped",
        gpu.ports.config.name,
        a.engine,
        a.guilty_queue,
        a.guilty_context
    );
    gpu.ports.tracer.emit(Event::EngineState { engine: a.engine, state: "RESET".into() });
    if let Some(queue) = guilty {
        let detail = Some(format!("context {}: work dropped by RESET_ENGINE", a.guilty_context));
        gpu.ports.tracer.emit(Event::QueueState { queue: queue.raw(), state: "reset".into(), detail });
    }
    mem.write_obj(Wire(a), at).map_err(|e| (Status::BadAddress, format!("results unwritable: {e}")))
}

/// `QUERY_LOST_SIGNALS`: the fences a faulted context's unexecuted work was going to signal
/// ([`lost::lost_signals`]), as many as the block has room for, and how many there are.
fn query_lost_signals<M: GuestMemory>(
    gpu: &Gpu,
    mem: &M,
    at: GuestAddress,
    length: u32,
    mut a: LostSignalsArgs,
) -> Res {
    // CAST: an entry is 16 bytes.
    #[allow(clippy::cast_possible_truncation)]
    let entry = std::mem::size_of::<FenceValue>() as u32;
    let room = (length - Opcode::QueryLostSignals.block_len()) / entry;
    if a.capacity != room {
        return Err(bad_arg(format!("capacity {} but room for {room} entries", a.capacity)));
    }
    let context = ContextId::new(a.context);
    let found = lost::lost_signals(gpu, mem, context).map_err(|r| match r {
        lost::Refusal::NoContext => bad_object(format!("no {context}")),
        lost::Refusal::NotFaulted => bad_object(format!("{context} is not faulted")),
    })?;
    let entries: Vec<u8> = found
        .iter()
        .take(room as usize)
        .flat_map(|(handle, value)| {
            let e = Wire(FenceValue { handle: handle.raw(), value: *value });
            vm_memory::ByteValued::as_slice(&e).to_vec()
        })
        .collect();
    a.total = u32::try_from(found.len()).unwrap_or(u32::MAX);
    a.count = a.total.min(room);
    let first = at
        .checked_add(u64::from(Opcode::QueryLostSignals.block_len()))
        .ok_or_else(|| (Status::BadAddress, "entries beyond the address range".to_string()))?;
    mem.write_slice(&entries, first).map_err(|e| (Status::BadAddress, format!("entries unwritable: {e}")))?;
    gpu.ports.tracer.emit(Event::LostSignals { context: a.context, fences: a.total });
    mem.write_obj(Wire(a), at).map_err(|e| (Status::BadAddress, format!("results unwritable: {e}")))
}
