//! The GPU behind the command processor: address spaces, contexts, hardware queues, registered
//! fences, doorbell bindings, engine state and the interrupt-record ring, shared by the CMP
//! thread (mailbox commands, timers) and the engine executor threads.
//!
//! Implementation note: one mutex guards the object tables ([`Objects`]); engines hold it only
//! to pick work and to publish results, never while they touch guest memory. A queue being
//! executed is marked on its engine (`EngineStatus::current`), and commands that tear a queue
//! down wait (on [`Gpu::changed`]) until no engine runs it. Fence-value interrupt decisions are
//! made outside the lock with `SeqCst` fences on both sides (engine: store CurrentValue, log,
//! barrier, load MonitoredValue; CMP: store MonitoredValue, barrier, load CurrentValue), so no
//! ordering of a signal and a MonitoredValue update loses the interrupt.

pub mod commands;
pub mod engine;
pub mod records;
pub mod scheduler;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use belfry_abi::engine::{EngineState, FaultReason, ENGINE_COUNT};
use belfry_abi::mmu::GuestPa;

use crate::mmu::Phys;
use records::RecordRing;
use scheduler::Scheduler;

/// A GPU address space.
#[derive(Debug)]
pub struct AddressSpace {
    /// Root page table.
    pub root: GuestPa,
}

/// A context's fault, kept until the context is destroyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Why.
    pub reason: FaultReason,
    /// Faulting GPU VA (or 0).
    pub address: u64,
    /// Queue that faulted.
    pub queue: u32,
}

/// A hardware context.
#[derive(Debug)]
pub struct Context {
    /// Its address space.
    pub space: u32,
    /// Off the runlists.
    pub suspended: bool,
    /// Set once a queue of it faults: every queue of the context stops.
    pub fault: Option<Fault>,
}

/// Where an engine is inside a queue's current command buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    /// Next packet.
    pub va: u64,
    /// End of the buffer.
    pub end: u64,
    /// Executing time spent in this submission so far (fence waits excluded).
    pub busy: Duration,
}

/// A `FENCE_WAIT` a queue is blocked in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    /// GPU VA of the CurrentValue.
    pub fence_va: u64,
    /// Value awaited.
    pub value: u64,
    /// GPU time the engine first saw the wait.
    pub observed: u64,
}

/// Queue health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Can run.
    Ok,
    /// Stopped by the hang watchdog.
    Hung,
}

/// A hardware queue.
#[derive(Debug)]
pub struct Queue {
    /// Owning context.
    pub context: u32,
    /// Engine.
    pub engine: u32,
    /// Priority.
    pub priority: u32,
    /// User-mode submission (doorbell) queue.
    pub user_mode: bool,
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
    /// Mid-buffer position.
    pub cursor: Option<Cursor>,
    /// Blocked wait.
    pub wait: Option<Wait>,
    /// System-address-space VAs of the wait and signal logs.
    pub logs: [Option<u64>; 2],
    /// A doorbell or kick announced work the engine has not looked at yet.
    pub kicked: bool,
    /// Signal-log entries written since this queue's last native-fence record.
    pub unreported_signals: u32,
    /// Health.
    pub health: Health,
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
}

/// Per-engine state.
#[derive(Debug)]
pub struct EngineStatus {
    /// Power/health state.
    pub state: EngineState,
    /// Queue being executed right now.
    pub current: Option<u32>,
    /// Last time it executed anything.
    pub last_active: Instant,
    /// A TransitionToF1 request was raised for the current idle period.
    pub idle_reported: bool,
}

/// Every object of the GPU.
#[derive(Debug)]
pub struct Objects {
    /// Address spaces.
    pub spaces: HashMap<u32, AddressSpace>,
    /// Contexts.
    pub contexts: HashMap<u32, Context>,
    /// Queues.
    pub queues: BTreeMap<u32, Queue>,
    /// Fences by global handle.
    pub fences: HashMap<u64, Fence>,
    /// Fence handles by CurrentValue location.
    pub fence_at: HashMap<Phys, u64>,
    /// Physical doorbell → queues connected to it (one in the dedicated model).
    pub doorbells: Vec<Vec<u32>>,
    /// Engines.
    pub engines: Vec<EngineStatus>,
    /// Runlists.
    pub scheduler: Scheduler,
    /// Device power: true in D3.
    pub d3: bool,
    /// Reset generation: engines drop results computed across a reset.
    pub generation: u64,
    /// Shutting down.
    pub kill: bool,
}

impl Objects {
    fn new(doorbells: u32) -> Self {
        Objects {
            spaces: HashMap::new(),
            contexts: HashMap::new(),
            queues: BTreeMap::new(),
            fences: HashMap::new(),
            fence_at: HashMap::new(),
            doorbells: vec![Vec::new(); doorbells as usize],
            engines: (0..ENGINE_COUNT)
                .map(|_| EngineStatus {
                    state: EngineState::Active,
                    current: None,
                    last_active: Instant::now(),
                    idle_reported: true,
                })
                .collect(),
            scheduler: Scheduler::default(),
            d3: false,
            generation: 0,
            kill: false,
        }
    }

    /// Root page table of `queue`'s context, if the chain is intact.
    pub fn queue_root(&self, queue: &Queue) -> Option<GuestPa> {
        let ctx = self.contexts.get(&queue.context)?;
        Some(self.spaces.get(&ctx.space)?.root)
    }

    /// Root of the system address space (id 0).
    pub fn system_root(&self) -> Option<GuestPa> {
        self.spaces.get(&0).map(|s| s.root)
    }

    /// Whether `id` could run now, ignoring whether its ring has work.
    pub fn schedulable(&self, id: u32) -> bool {
        let Some(q) = self.queues.get(&id) else { return false };
        let Some(ctx) = self.contexts.get(&q.context) else { return false };
        !self.d3
            && q.health == Health::Ok
            && !ctx.suspended
            && ctx.fault.is_none()
            && self.engines.get(q.engine as usize).is_some_and(|e| e.state == EngineState::Active)
    }
}

/// The GPU state of one device.
pub struct Gpu {
    objects: Mutex<Objects>,
    /// Signalled whenever something may have become runnable or a queue stopped executing.
    pub changed: Condvar,
    /// The interrupt-record ring.
    pub records: Mutex<RecordRing>,
}

impl Gpu {
    /// Empty GPU with `doorbells` physical doorbells.
    pub fn new(doorbells: u32) -> Self {
        Gpu { objects: Mutex::new(Objects::new(doorbells)), changed: Condvar::new(), records: Mutex::default() }
    }

    /// Locks the object tables (a poisoned lock is recovered: the tables stay consistent
    /// because every update is a few field stores).
    pub fn lock(&self) -> MutexGuard<'_, Objects> {
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes engines and waiters.
    pub fn notify(&self) {
        self.changed.notify_all();
    }

    /// Power-on state: every object gone; engines drop what they were doing.
    pub fn reset(&self, doorbells: u32) {
        let mut o = self.lock();
        let generation = o.generation + 1;
        let currents: Vec<Option<u32>> = o.engines.iter().map(|e| e.current).collect();
        *o = Objects::new(doorbells);
        o.generation = generation;
        for (e, c) in o.engines.iter_mut().zip(currents) {
            e.current = c;
        }
        drop(o);
        *self.records.lock().unwrap_or_else(|e| e.into_inner()) = RecordRing::default();
        self.notify();
    }

    /// Stops the engine threads.
    pub fn kill(&self) {
        self.lock().kill = true;
        self.notify();
    }
}
