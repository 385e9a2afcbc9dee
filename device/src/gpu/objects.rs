//! The GPU's object tables: address spaces, contexts, hardware queues, registered fences,
//! doorbell bindings, engine status and the runlists, guarded together by one mutex in
//! [`Gpu`](super::shared::Gpu).

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use belfry_abi::engine::{EngineState, ENGINE_COUNT};
use belfry_abi::ids::{AddressSpaceId, ContextId, EngineId, FenceHandle, QueueId};
use belfry_abi::mmu::GuestPa;

use super::scheduler::Scheduler;
use super::state::{ContextState, QueueState};
use crate::mmu::Phys;

/// The system address space: where fence logs and system-VA fences live.
pub const SYSTEM_SPACE: AddressSpaceId = AddressSpaceId::new(0);

/// A GPU address space.
#[derive(Debug)]
pub struct AddressSpace {
    /// Root page table.
    pub root: GuestPa,
}

/// A hardware context.
#[derive(Debug)]
pub struct Context {
    /// Its address space.
    pub space: AddressSpaceId,
    /// Whether its queues may run.
    pub state: ContextState,
}

/// A hardware queue.
#[derive(Debug)]
pub struct Queue {
    /// Owning context.
    pub context: ContextId,
    /// Engine.
    pub engine: EngineId,
    /// Priority.
    pub priority: u32,
    /// User-mode submission (doorbell) queue.
    pub user_mode: bool,
    /// The driver's paging queue (`QUEUE_FLAG_PAGING`).
    pub paging: bool,
    /// The last command buffer that ended was a split part with more parts to come
    /// (`RING_FLAG_SPLIT_CONTINUES`).
    pub split_open: bool,
    /// The current buffer's `BIND_SLOT` bindings.
    pub slots: super::slots::Slots,
    /// Ring GPU VA.
    pub ring_va: u64,
    /// Ring entries.
    pub ring_entries: u32,
    /// Ring-control GPU VA.
    pub ring_control_va: u64,
    /// Connected physical doorbell.
    pub doorbell: Option<u32>,
    /// The device's read index.
    pub read_index: u32,
    /// System-address-space VAs of the wait and signal logs.
    pub logs: [Option<u64>; 2],
    /// Signal-log entries written since this queue's last native-fence record.
    pub unreported_signals: u32,
    /// Where it is in its life.
    pub state: QueueState,
    /// The rest of the command buffer a hang or `RESET_ENGINE` dropped (the state forgets it),
    /// for `QUERY_LOST_SIGNALS`.
    pub dropped: Option<super::state::Cursor>,
}

/// A registered fence.
#[derive(Clone, Copy, Debug)]
pub struct Fence {
    /// Kind.
    pub kind: belfry_abi::fence::FenceKind,
    /// Where CurrentValue lives.
    pub current: Phys,
    /// Where MonitoredValue lives (unused for monitored fences).
    pub monitored: Phys,
    /// Registered with `REGISTER_CROSS_ADAPTER`: another adapter may change CurrentValue, so
    /// parked waits on it are re-read only on a change through this device or a notification.
    pub cross_adapter: bool,
    /// The [`Objects::peer_seq`] at which a peer signal last named this fence (0: never): a
    /// pick whose engine has not seen that sequence re-reads the waits on it.
    pub peer_named: u64,
}

/// Per-engine state.
#[derive(Debug)]
pub struct EngineStatus {
    /// Power/health state.
    pub state: EngineState,
    /// Queue being executed right now.
    pub current: Option<QueueId>,
    /// Last time it executed anything.
    pub last_active: Instant,
    /// A TransitionToF1 request was raised for the current idle period.
    pub idle_reported: bool,
    /// `RESET_ENGINE` is waiting for the running slice to end: no new slice starts.
    pub resetting: bool,
    /// The [`Objects::epoch`] of its last pick: a pick at a later
    /// epoch re-reads waits on cross-adapter fences, a pick at the same one (a poll) does not.
    pub seen_epoch: u64,
    /// The [`Objects::peer_seq`] of its last pick: a pick re-reads the waits on the
    /// cross-adapter fences a peer signal named since.
    pub seen_peer: u64,
    /// The queue this engine is held for on a device without context save (`split::hold`).
    pub held: Option<QueueId>,
    /// The queue whose split DMA buffer this engine is held for between parts.
    pub split_held: Option<QueueId>,
}

/// The peer-signal pages of a device (`SET_PEER_SIGNALS`, guest physical addresses).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerPages {
    /// The page this device consumes; `None`: peer signals off.
    pub own: Option<u64>,
    /// The other devices' pages, produced into by this device's signals of cross-adapter
    /// fences.
    pub peers: Vec<u64>,
}

/// Every object of the GPU.
#[derive(Debug)]
pub struct Objects {
    /// Address spaces.
    pub spaces: HashMap<AddressSpaceId, AddressSpace>,
    /// Contexts.
    pub contexts: HashMap<ContextId, Context>,
    /// Queues.
    pub queues: BTreeMap<QueueId, Queue>,
    /// Fences by global handle.
    pub fences: HashMap<FenceHandle, Fence>,
    /// Fence handles by CurrentValue location.
    pub fence_at: HashMap<Phys, FenceHandle>,
    /// Physical doorbell → queues connected to it (one in the dedicated model).
    pub doorbells: Vec<Vec<QueueId>>,
    /// Engines, indexed by engine id.
    pub engines: Vec<EngineStatus>,
    /// Runlists.
    pub scheduler: Scheduler,
    /// Device power: true in D3.
    pub d3: bool,
    /// Reset generation: engines drop results computed across a reset.
    pub generation: u64,
    /// Moved by every [`Gpu::notify`](super::shared::Gpu::notify) (a fence changed through
    /// this device, a `NOTIFY_FENCE_CHANGED`, a doorbell, a slice's end): engines re-read
    /// waits on cross-adapter fences only when it moved since their last pick.
    pub epoch: u64,
    /// Shutting down.
    pub kill: bool,
    /// Bumped for every peer signal consumed that names a cross-adapter fence registered here.
    pub peer_seq: u64,
    /// `KICK_QUEUE` commands run since power-on (refused ones too): an engine's F1 request
    /// carries it, so the driver can tell a request older than its last kick.
    pub kicks: u64,
    /// Test-only (`--inject mailbox-stall`): the mailbox stopped answering until a reset.
    pub mailbox_stalled: bool,
    /// Test-only (`--inject mailbox-stall`, `MAILBOX_STALE_SEQ_TOKEN`): the next mailbox command
    /// is answered, unrun, with the previous sequence number.
    pub mailbox_stale_seq: bool,
    /// Test-only (`--inject mailbox-stall`, `CMD_RING_FAULT_TOKEN`): the next command-ring
    /// entry read is a ring fault.
    pub cmd_ring_fault: bool,
    /// Test-only (`--inject mailbox-stall`, `SLOW_ENGINE_PICKUP_TOKEN`): every engine waits
    /// `regs::SLOW_ENGINE_PICKUP_MS` after each wake-up before it looks for work.
    pub slow_engine_pickup: bool,
    /// Test-only (`--inject slow-monitored-updates`, `HOLD_MONITORED_UPDATE_TOKEN`): the next
    /// MonitoredValue update is held until its fences were signalled.
    pub hold_monitored_update: bool,
}

impl Objects {
    /// Power-on state with `doorbells` physical doorbells.
    pub fn new(doorbells: u32) -> Self {
        Objects {
            spaces: HashMap::new(),
            contexts: HashMap::new(),
            queues: BTreeMap::new(),
            fences: HashMap::new(),
            fence_at: HashMap::new(),
            doorbells: (0..doorbells).map(|_| Vec::new()).collect(),
            engines: (0..ENGINE_COUNT)
                .map(|_| EngineStatus {
                    seen_epoch: u64::MAX,
                    seen_peer: 0,
                    state: EngineState::Active,
                    current: None,
                    last_active: Instant::now(),
                    idle_reported: true,
                    resetting: false,
                    held: None,
                    split_held: None,
                })
                .collect(),
            scheduler: Scheduler::default(),
            d3: false,
            generation: 0,
            epoch: 0,
            kill: false,
            peer_seq: 0,
            kicks: 0,
            mailbox_stalled: false,
            mailbox_stale_seq: false,
            cmd_ring_fault: false,
            slow_engine_pickup: false,
            hold_monitored_update: false,
        }
    }

    /// Engine `id`'s status.
    pub fn engine(&self, id: EngineId) -> Option<&EngineStatus> {
        self.engines.get(usize::try_from(id.raw()).ok()?)
    }

    /// Engine `id`'s status, to change it.
    pub fn engine_mut(&mut self, id: EngineId) -> Option<&mut EngineStatus> {
        self.engines.get_mut(usize::try_from(id.raw()).ok()?)
    }

    /// The queues connected to physical doorbell `index`, to change them.
    pub fn doorbell_mut(&mut self, index: u32) -> Option<&mut Vec<QueueId>> {
        self.doorbells.get_mut(usize::try_from(index).ok()?)
    }

    /// Root page table of `queue`'s context, if the chain is intact.
    pub fn queue_root(&self, queue: &Queue) -> Option<GuestPa> {
        let ctx = self.contexts.get(&queue.context)?;
        Some(self.spaces.get(&ctx.space)?.root)
    }

    /// Root of the system address space.
    pub fn system_root(&self) -> Option<GuestPa> {
        self.spaces.get(&SYSTEM_SPACE).map(|s| s.root)
    }

    /// Whether `id` could run now, ignoring whether it has work (its state says that): the
    /// device is powered, its context active and its engine active.
    pub fn schedulable(&self, id: QueueId) -> bool {
        let Some(q) = self.queues.get(&id) else { return false };
        let Some(ctx) = self.contexts.get(&q.context) else { return false };
        !self.d3
            && ctx.state.runs()
            && self.engine(q.engine).is_some_and(|e| e.state == EngineState::Active && !e.resetting)
    }

    /// Whether an engine is executing `id` right now.
    pub fn is_running(&self, id: QueueId) -> bool {
        self.engines.iter().any(|e| e.current == Some(id))
    }
}
