//! A [`Job`]: what an engine needs to run a slice of one queue without holding the object
//! lock, and [`Step`], the outcome of executing one packet.

use belfry_abi::engine::FaultReason;
use belfry_abi::ids::{ContextId, EngineId, QueueId};
use belfry_abi::mmu::GuestPa;

use super::objects::{Objects, Queue};
use super::slots::Slots;
use super::state::{Cursor, Wait};
use crate::mmu::MmuError;

/// A snapshot of a queue taken when an engine picks it, published back when the slice ends.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    /// The queue.
    pub queue: QueueId,
    /// User-mode submission queue.
    pub user_mode: bool,
    /// Its context.
    pub context: ContextId,
    /// Its engine.
    pub engine: EngineId,
    /// Root of the context's address space.
    pub root: GuestPa,
    /// Root of the system address space (fence logs), if created.
    pub system_root: Option<GuestPa>,
    /// Ring GPU VA.
    pub ring_va: u64,
    /// Ring entries.
    pub ring_entries: u32,
    /// Ring-control GPU VA.
    pub ring_control_va: u64,
    /// The device's read index.
    pub read_index: u32,
    /// Position in the current command buffer.
    pub cursor: Option<Cursor>,
    /// The wait the queue resumes from (its `observed` time is kept).
    pub wait: Option<Wait>,
    /// System-address-space VAs of the wait and signal logs.
    pub logs: [Option<u64>; 2],
    /// Signal-log entries written since the last native-fence record.
    pub unreported_signals: u32,
    /// Reset generation when picked.
    pub generation: u64,
    /// The last buffer that ended was a split part with more to come.
    pub split_open: bool,
    /// The current buffer's `BIND_SLOT` bindings.
    pub slots: Slots,
}

impl Job {
    /// The job for queue `id` (`q`), before the queue's state gives its cursor and wait; `None`
    /// if its address space is gone.
    pub fn new(o: &Objects, id: QueueId, q: &Queue) -> Option<Job> {
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
            cursor: None,
            wait: None,
            logs: q.logs,
            unreported_signals: q.unreported_signals,
            generation: o.generation,
            split_open: q.split_open,
            slots: q.slots,
        })
    }
}

/// The outcome of one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Continue at `.0`; `.1` replaces the buffer end (jump).
    Next(u64, Option<u64>),
    /// Parked in this fence wait.
    Blocked(Wait),
    /// A guest error at this address.
    Fault(FaultReason, u64),
}

impl From<MmuError> for Step {
    fn from(e: MmuError) -> Self {
        Step::Fault(e.fault.into(), e.va)
    }
}
