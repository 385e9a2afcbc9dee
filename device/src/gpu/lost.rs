//! `QUERY_LOST_SIGNALS`: the registered fences a faulted context's unexecuted work was going
//! to signal. A context's work stops for good when it faults (a packet fault, a hang or
//! `RESET_ENGINE`); what it dropped is read back from where it still lies — the rest of each
//! queue's current (or dropped) command buffer, following its `JUMP`s, then every ring entry
//! the device has not read — and each `FENCE_SIGNAL` / `MONITORED_FENCE_SIGNAL` found is
//! resolved to the fence registered at its CurrentValue. A signal whose fence is not
//! registered, or whose address does not translate, names no fence and is left out.

use std::collections::{BTreeMap, HashSet};

use belfry_abi::ids::{ContextId, FenceHandle};
use belfry_abi::mmu::{GpuVa, GuestPa};
use belfry_abi::packet::{self, Opcode};
use belfry_abi::ring::{self, RingEntry};
use vm_memory::GuestMemory;

use super::shared::Gpu;
use super::state::Cursor;
use crate::mmu::{GpuMemory, Phys};
use crate::wire::Wire;

// CAST: a ring entry is 16 bytes.
const RING_ENTRY_BYTES: u64 = std::mem::size_of::<RingEntry>() as u64;

/// The most packets one query reads across a context's queues (a looping buffer, or a ring
/// full of large buffers, cannot keep the command processor longer than this).
pub const SCAN_PACKETS_MAX: usize = 1 << 16;

/// Where a queue's unexecuted work lies.
struct Pending {
    cursor: Option<Cursor>,
    ring_va: u64,
    ring_entries: u32,
    ring_control_va: u64,
    read_index: u32,
}

/// Why a query is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No such context.
    NoContext,
    /// The context's work still runs (not faulted).
    NotFaulted,
}

/// The fences `context`'s unexecuted work signals, each with the highest value it names,
/// ordered by handle.
pub fn lost_signals<M: GuestMemory>(
    gpu: &Gpu,
    mem: &M,
    context: ContextId,
) -> Result<Vec<(FenceHandle, u64)>, Refusal> {
    let (root, queues) = {
        let o = gpu.lock();
        let ctx = o.contexts.get(&context).ok_or(Refusal::NoContext)?;
        if ctx.state.fault_info().is_none() {
            return Err(Refusal::NotFaulted);
        }
        let root = o.spaces.get(&ctx.space).ok_or(Refusal::NoContext)?.root;
        let queues: Vec<Pending> = o
            .queues
            .values()
            .filter(|q| q.context == context)
            .map(|q| Pending {
                cursor: q.state.cursor().or(q.dropped),
                ring_va: q.ring_va,
                ring_entries: q.ring_entries,
                ring_control_va: q.ring_control_va,
                read_index: q.read_index,
            })
            .collect();
        (root, queues)
    };
    let gm = GpuMemory::new(mem, &gpu.ports.vram);
    let mut signals = Vec::new();
    let mut budget = SCAN_PACKETS_MAX;
    for q in &queues {
        if let Some(c) = q.cursor {
            scan_buffer(&gm, root, c.va, c.end, &mut budget, &mut signals);
        }
        for (va, end) in ring_buffers(&gm, root, q) {
            scan_buffer(&gm, root, va, end, &mut budget, &mut signals);
        }
    }
    let o = gpu.lock();
    let mut highest: BTreeMap<FenceHandle, u64> = BTreeMap::new();
    for (phys, value) in signals {
        if let Some(&handle) = o.fence_at.get(&phys) {
            let v = highest.entry(handle).or_insert(value);
            *v = (*v).max(value);
        }
    }
    Ok(highest.into_iter().collect())
}

/// The command buffers of the ring entries the device has not read yet (none if the ring
/// control is unreadable or inconsistent; an entry the engine would refuse ends the list).
fn ring_buffers<M: GuestMemory>(mem: &GpuMemory<'_, M>, root: GuestPa, q: &Pending) -> Vec<(u64, u64)> {
    let mut w = [0u8; 4];
    let Some(at) = q.ring_control_va.checked_add(ring::WRITE_INDEX_OFFSET) else { return Vec::new() };
    if mem.read(root, at, &mut w).is_err() {
        return Vec::new();
    }
    let write_index = u32::from_le_bytes(w);
    if !ring::is_consistent(write_index, q.read_index, q.ring_entries) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for i in 0..ring::pending(write_index, q.read_index) {
        let slot = u64::from(ring::slot(q.read_index.wrapping_add(i), q.ring_entries));
        let Some(at) = slot.checked_mul(RING_ENTRY_BYTES).and_then(|o| q.ring_va.checked_add(o)) else { break };
        let mut e = Wire(RingEntry::default());
        if mem.read(root, at, vm_memory::ByteValued::as_mut_slice(&mut e)).is_err() {
            break;
        }
        let entry = e.0;
        let end = entry.cmdbuf_va.checked_add(u64::from(entry.size_bytes));
        match end {
            Some(end) if entry.size_bytes <= ring::CMDBUF_MAX_BYTES && entry.cmdbuf_va % 4 == 0 => {
                out.push((entry.cmdbuf_va, end));
            }
            _ => break,
        }
    }
    out
}

/// Reads the packets from `va` to `end` (following `JUMP`s, each target once) until a packet
/// the engine would fault on or the `budget` runs out; pushes each fence signal's CurrentValue
/// location and value.
fn scan_buffer<M: GuestMemory>(
    mem: &GpuMemory<'_, M>,
    root: GuestPa,
    mut va: u64,
    mut end: u64,
    budget: &mut usize,
    out: &mut Vec<(Phys, u64)>,
) {
    let mut jumped = HashSet::new();
    while va < end && *budget > 0 {
        *budget -= 1;
        let mut h = [0u8; 4];
        if mem.read(root, va, &mut h).is_err() {
            return;
        }
        let Ok((op, dwords)) = packet::check_header(u32::from_le_bytes(h)) else { return };
        let Some(next) = va.checked_add(u64::from(dwords) * 4).filter(|&n| n <= end) else { return };
        let target = match op {
            Opcode::FenceSignal => read::<packet::FenceSignal, M>(mem, root, va).map(|p| (p.fence_va, p.value)),
            Opcode::MonitoredFenceSignal => {
                read::<packet::MonitoredFenceSignal, M>(mem, root, va).map(|p| (p.fence_va, p.value))
            }
            Opcode::Jump => {
                let Some(p) = read::<packet::Jump, M>(mem, root, va) else { return };
                let Some(to) = p.va.checked_add(u64::from(p.size_bytes)) else { return };
                if !jumped.insert((p.va, to)) {
                    return;
                }
                (va, end) = (p.va, to);
                continue;
            }
            _ => None,
        };
        if let Some((fence_va, value)) = target {
            if let Ok(phys) = mem.translate(root, GpuVa(fence_va), false) {
                out.push((phys, value));
            }
        }
        va = next;
    }
}

/// Packet `T` at `va`, if readable.
fn read<T: Copy + Default, M: GuestMemory>(mem: &GpuMemory<'_, M>, root: GuestPa, va: u64) -> Option<T>
where
    Wire<T>: vm_memory::ByteValued,
{
    let mut p = Wire(T::default());
    mem.read(root, va, vm_memory::ByteValued::as_mut_slice(&mut p)).ok()?;
    Some(p.0)
}
