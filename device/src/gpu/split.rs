//! DMA-buffer splitting on the device side: the `BIND_SLOT` resource table of a command buffer,
//! `SLOT_COPY` through it, and the engine hold of a device without context save.
//!
//! **Bindings** are state of one command buffer ([`Slots`], kept with its queue): every
//! buffer starts with all slots unbound, like a GPU whose state a paging buffer run in between
//! may have disturbed, so each part of a split DMA buffer must bind again what it uses after its
//! split point (SPLIT-05).
//!
//! **The hold** (`--no-context-save`, `CAPS.no_context_save`): such a device cannot save a
//! context in the middle of a command buffer, so once an engine starts a buffer it runs nothing
//! else until the buffer ends, and after a part that carries `RING_FLAG_SPLIT_CONTINUES` it runs
//! nothing but that queue's next part — and paging queues (`QUEUE_FLAG_PAGING`), whose buffers
//! must run between parts (SPLIT-03, SPLIT-04). A hold ends when its queue ends a buffer without
//! the flag, or can no longer run (its context faulted or suspended, the queue hung or
//! destroyed): a driver that never sends the last part starves only its own engine until then.
//! A device with context save (the default) keeps no hold: other contexts may run between parts.

use belfry_abi::engine::FaultReason;
use belfry_abi::ids::{EngineId, QueueId};
use belfry_abi::mmu::GuestPa;
use belfry_abi::packet;
use vm_memory::GuestMemory;

use super::job::Step;
use super::objects::{EngineStatus, Objects};
pub use super::slots::{Binding, Slots};
use super::state::{Cursor, QueueState};
use crate::mmu::GpuMemory;

/// `BIND_SLOT`: binds (or unbinds) a slot of the buffer's table; a slot at or above the device's
/// `slots` (`SPLIT_INFO.slots`) faults.
pub fn bind(table: &mut Slots, slots: u32, p: &packet::BindSlot, va: u64) -> Result<(), Step> {
    let bad = Step::Fault(FaultReason::BadPacket, va);
    if p.slot >= slots {
        return Err(bad);
    }
    table.set(p.slot, Binding { va: p.va, size: p.size }).ok_or(bad)?;
    Ok(())
}

/// `SLOT_COPY`: copies through the buffer's bindings; an unbound slot or a range past its
/// binding faults with `BAD_PACKET` at the packet.
pub fn slot_copy<M: GuestMemory>(
    mem: &GpuMemory<'_, M>,
    root: GuestPa,
    table: &Slots,
    p: &packet::SlotCopy,
    va: u64,
) -> Result<(), Step> {
    let bad = Step::Fault(FaultReason::BadPacket, va);
    let size = u64::from(p.size);
    let range = |slot: u32, offset: u64| -> Result<u64, Step> {
        let b = table.get(slot).ok_or(bad)?;
        let end = offset.checked_add(size).ok_or(bad)?;
        if end > b.size {
            return Err(bad);
        }
        b.va.checked_add(offset).ok_or(bad)
    };
    let (src, dst) = (range(p.src_slot, p.src_offset)?, range(p.dst_slot, p.dst_offset)?);
    let mut buf = vec![0u8; usize::try_from(size).map_err(|_| bad)?];
    mem.read(root, src, &mut buf)?;
    mem.write(root, dst, &buf)?;
    Ok(())
}

/// What an engine of a device without context save may pick now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Any queue.
    Free,
    /// Only this queue: it is in the middle of a command buffer.
    Only(QueueId),
    /// This queue (its next split part) or a paging queue.
    Parts(QueueId),
}

impl Hold {
    /// Whether queue `id` may be picked under this hold.
    pub fn allows(self, o: &Objects, id: QueueId) -> bool {
        match self {
            Hold::Free => true,
            Hold::Only(q) => q == id,
            Hold::Parts(q) => q == id || o.queues.get(&id).is_some_and(|x| x.paging),
        }
    }
}

/// The hold on `engine` (always [`Hold::Free`] on a device with context save): a queue in the
/// middle of a buffer first (a paging queue's too), then a split buffer between its parts.
pub fn hold(o: &Objects, engine: EngineId, no_context_save: bool) -> Hold {
    let Some(e) = o.engine(engine).filter(|_| no_context_save) else { return Hold::Free };
    let live = |id: QueueId| o.queues.get(&id).filter(|q| o.schedulable(id) && !q.state.is_hung());
    if let Some(id) = e.held.filter(|&id| {
        live(id).is_some_and(|q| matches!(q.state, QueueState::Ready { cursor: Some(_) } | QueueState::Waiting { .. }))
    }) {
        return Hold::Only(id);
    }
    match e.split_held {
        Some(id) if live(id).is_some_and(|q| q.split_open) => Hold::Parts(id),
        _ => Hold::Free,
    }
}

/// Records on `e` what a slice of `queue` left behind, on a device without context save: the
/// engine stays with the queue while `cursor` is inside a buffer, and with its split buffer
/// while `split_open`; a slice of another queue (a paging buffer) leaves a split hold as it is.
pub fn after_slice(
    e: &mut EngineStatus,
    queue: QueueId,
    cursor: Option<&Cursor>,
    split_open: bool,
    no_context_save: bool,
) {
    if !no_context_save {
        return;
    }
    if cursor.is_some() {
        e.held = Some(queue);
    } else if e.held == Some(queue) {
        e.held = None;
    }
    if split_open {
        e.split_held = Some(queue);
    } else if e.split_held == Some(queue) {
        e.split_held = None;
    }
}
