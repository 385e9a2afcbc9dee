//! The records of a trace file: [`Record`] (time, device, [`Event`]), every kind of [`Event`]
//! the device writes (the events of its threads, and the tracer's own `header`,
//! `limit_reached` and `dropped`), with each kind's [`TraceLevel`].
//!
//! Compatibility (`docs/TRACE.md`): a new format only adds kinds and fields; every field added
//! after version 1 has a default here, and a kind this version does not know reads as
//! [`Event::Unknown`], so a reader takes every version up to its own and skips what a later one
//! adds.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::words::{
    BufferPhase, ConnectionState, Delivery, DmaOp, FenceSource, MailboxPhase, Passed, ResetSource, ScheduleWhy,
};

/// Version of the trace file format, in the header record. Version 1 files (no header) are
/// still read.
pub const FORMAT_VERSION: u32 = 2;

/// A name from one of the abi's or the device's tables (an opcode, a register, a state): the
/// device writes its `&'static str`, a reader gets its own copy.
pub type Name = Cow<'static, str>;

/// How much a trace file records: each level includes the ones before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceLevel {
    /// The control plane: connections, resets, DMA and interrupt setup, mailbox commands with
    /// their argument blocks, interrupts and their records, fence decisions, faults, queue,
    /// engine and power states.
    Control,
    /// Also each submission's path in: doorbells, doorbell wake-ups, register accesses and
    /// vfio-user messages.
    Commands,
    /// Also every packet an engine executes (the bulk of a busy trace).
    #[default]
    Packets,
}

impl TraceLevel {
    /// Every level, lowest first.
    pub const ALL: [TraceLevel; 3] = [TraceLevel::Control, TraceLevel::Commands, TraceLevel::Packets];

    /// The level's word.
    pub fn name(self) -> &'static str {
        match self {
            TraceLevel::Control => "control",
            TraceLevel::Commands => "commands",
            TraceLevel::Packets => "packets",
        }
    }
}

impl std::fmt::Display for TraceLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for TraceLevel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TraceLevel::ALL
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| format!("unknown trace level {s:?} (control, commands or packets)"))
    }
}

/// One line of a trace file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Nanoseconds since the device's tracer started.
    pub t_ns: u64,
    /// Device name.
    #[serde(default)]
    pub dev: String,
    /// What happened.
    #[serde(flatten)]
    pub event: Event,
}

/// Host clocks at a trace's time zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeaderClock {
    /// `CLOCK_MONOTONIC` in nanoseconds (the same on every device of one host: it aligns them).
    #[serde(default)]
    pub monotonic_ns: u64,
    /// Wall-clock time in nanoseconds since the Unix epoch.
    #[serde(default)]
    pub unix_ns: u64,
}

/// The header record, the first of a file (format version 2 on).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Always `belfry-trace`.
    #[serde(default)]
    pub format: String,
    /// Format version ([`FORMAT_VERSION`] when written).
    #[serde(default)]
    pub version: u32,
    /// What wrote the file (`belfry-device <version>`).
    #[serde(default)]
    pub producer: String,
    /// `[major, minor]` of the abi the device implements.
    #[serde(default)]
    pub abi_version: [u32; 2],
    /// The level the file records.
    #[serde(default)]
    pub level: TraceLevel,
    /// Size limit of the file's event records in bytes (0: none).
    #[serde(default)]
    pub limit_bytes: u64,
    /// Host clocks at `t_ns` = 0.
    #[serde(default)]
    pub clock: HeaderClock,
    /// The device's configuration, one key per device flag (its `DeviceConfig`, serialized;
    /// shown, not interpreted).
    #[serde(default)]
    pub device: serde_json::Value,
}

/// One level of an MMU fault's page walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalkStep {
    /// Table level (3 is the root, 0 the leaf).
    pub level: u32,
    /// Guest physical address of the entry.
    pub at: u64,
    /// Its value (`None`: the table was not in guest memory).
    pub entry: Option<u64>,
}

/// One traced event, written with an `event` tag in snake case. `docs/TRACE.md` describes each
/// kind; `examples.rs` holds one of each, every field set, for the round-trip and
/// documentation tests (a new kind goes there too).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The first record: format, producer, level, limit, clocks and configuration.
    Header(Header),
    /// The GPU timestamp (`TIMESTAMP_LO/HI`, `WRITE_TIMESTAMP`) read at this record's `t_ns`:
    /// the anchor that puts GPU times (the module's fence timeline) on the trace clock.
    Clock {
        /// GPU timestamp in nanoseconds.
        gpu_ns: u64,
    },
    /// The size limit closed the file to events here.
    LimitReached {
        /// The limit.
        #[serde(default)]
        limit_bytes: u64,
    },
    /// Events counted instead of written.
    Dropped {
        /// `limit` (the size limit) or `writer_behind` (the writer's queue was full); empty in
        /// files of devices before the reason was written (the limit).
        #[serde(default)]
        reason: Name,
        /// Events counted.
        #[serde(default)]
        records: u64,
        /// Time of the first one.
        #[serde(default)]
        first_t_ns: u64,
        /// Counts by kind.
        #[serde(default)]
        by_event: BTreeMap<Name, u64>,
    },
    /// A client connected or disconnected.
    Connection {
        /// Connected or disconnected.
        state: ConnectionState,
    },
    /// A vfio-user message was handled.
    Message {
        /// Message id.
        id: u16,
        /// Command name, or `UNKNOWN(n)`.
        command: Name,
        /// Message size from the header.
        #[serde(default)]
        size: u32,
        /// File descriptors received with it.
        #[serde(default)]
        fds: usize,
        /// errno of the error reply, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        errno: Option<i32>,
        /// Why it failed, if it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The client asked for no reply (posted write).
        #[serde(default)]
        posted: bool,
    },
    /// A register was read.
    RegRead {
        /// Region name (`config`, `bar0`, …).
        region: Name,
        /// Byte offset in the region.
        offset: u64,
        /// Access size.
        #[serde(default)]
        size: usize,
        /// Register name, when the offset is a declared register.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<Name>,
        /// Value read.
        value: u64,
    },
    /// A register was written.
    RegWrite {
        /// Region name.
        region: Name,
        /// Byte offset in the region.
        offset: u64,
        /// Access size.
        #[serde(default)]
        size: usize,
        /// Register name, when the offset is a declared register.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<Name>,
        /// Value written.
        value: u64,
        /// Decoded fields of the written value (`name=value`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        fields: Vec<String>,
    },
    /// A doorbell was rung.
    Doorbell {
        /// Doorbell index.
        index: u32,
        /// Value written.
        value: u64,
    },
    /// The command processor woke for rung doorbells.
    DoorbellWake {
        /// Doorbells found rung, with their latest values.
        rung: Vec<(u32, u64)>,
    },
    /// A mailbox command was submitted, completed or dropped.
    Mailbox {
        /// Which.
        phase: MailboxPhase,
        /// Opcode name, once known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        opcode: Option<Name>,
        /// Sequence number.
        seq: u32,
        /// Guest physical address of the argument block.
        #[serde(default)]
        address: u64,
        /// Completion status name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<Name>,
        /// Detail of a failure.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// A mailbox command's argument block as it was after the command ran (results included),
    /// written just before its `complete` record.
    MailboxBlock {
        /// Sequence number.
        seq: u32,
        /// The block's bytes (header included, at most `BLOCK_MAX_LEN`), lowercase hex.
        bytes: String,
    },
    /// An interrupt was raised, or held.
    Interrupt {
        /// MSI-X vector (or 0 for INTx).
        vector: u16,
        /// Cause bits (`irq::cause`).
        cause: u32,
        /// How it went out, or why not.
        delivery: Delivery,
    },
    /// A DMA region was mapped or unmapped.
    Dma {
        /// Which.
        op: DmaOp,
        /// Guest address.
        address: u64,
        /// Size.
        size: u64,
    },
    /// Interrupt eventfds were configured.
    SetIrqs {
        /// IRQ index name.
        index: Name,
        /// First vector.
        start: u32,
        /// Number of vectors.
        count: u32,
        /// Action and data type.
        #[serde(default)]
        action: String,
    },
    /// The device was reset.
    Reset {
        /// What reset it.
        source: ResetSource,
    },
    /// An engine executed a packet.
    Packet {
        /// Queue.
        queue: u32,
        /// Engine.
        engine: u32,
        /// Opcode name.
        opcode: Name,
        /// GPU VA of the packet.
        va: u64,
        /// The packet's bytes (at most 64), lowercase hex; `belfry-trace` decodes them with
        /// the abi's packet structs.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        bytes: String,
    },
    /// An engine fetched a ring entry and started its command buffer, or reached the end of it.
    CommandBuffer {
        /// Begin or end.
        phase: BufferPhase,
        /// Queue.
        queue: u32,
        /// Engine.
        engine: u32,
        /// The ring index of the entry (the device's read index before it advances).
        ring_index: u32,
        /// GPU VA of the buffer (`begin`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        va: Option<u64>,
        /// Size of the buffer in bytes (`begin`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<u32>,
    },
    /// The scheduler picked a queue for an engine's next slice.
    Schedule {
        /// Engine.
        engine: u32,
        /// Queue picked.
        queue: u32,
        /// Why this one.
        why: ScheduleWhy,
        /// Other queues of the runlist that had work and did not run, with why.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        others: Vec<(u32, Passed)>,
    },
    /// A native-fence interrupt decision.
    FenceDecision {
        /// What signalled.
        source: FenceSource,
        /// Fence handle.
        handle: u64,
        /// CurrentValue used.
        current: u64,
        /// MonitoredValue used.
        monitored: u64,
        /// Whether the CPU was interrupted.
        interrupt: bool,
        /// Queue whose `FENCE_SIGNAL` it was (engine signals).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queue: Option<u32>,
        /// Engine that executed it (engine signals).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        engine: Option<u32>,
    },
    /// A fence was registered, with where its values live.
    FenceRegistered {
        /// Handle.
        handle: u64,
        /// Kind.
        kind: String,
        /// CurrentValue placement (guest RAM or VRAM).
        #[serde(default)]
        current: String,
        /// MonitoredValue placement.
        #[serde(default)]
        monitored: String,
    },
    /// `MOVE_MONITORED_VALUE`: a registered fence's MonitoredValue moved (NF-14: demoted from
    /// VRAM to system memory), with the catch-up decision made after the move.
    FenceMonitoredMoved {
        /// Handle.
        handle: u64,
        /// The old place.
        from: String,
        /// The new place.
        to: String,
        /// CurrentValue read after the move.
        current: u64,
        /// MonitoredValue moved (unchanged).
        monitored: u64,
        /// Whether the CPU was interrupted.
        interrupt: bool,
    },
    /// `MOVE_FENCE_STORAGE`: a registered INTRA_GPU fence's CurrentValue and MonitoredValue
    /// moved (NF-18: demoted from VRAM to system memory), the registration re-keyed by the new
    /// CurrentValue place, with the catch-up decision made after the move.
    FenceStorageMoved {
        /// Handle.
        handle: u64,
        /// The old CurrentValue place.
        from: String,
        /// The new CurrentValue place.
        to: String,
        /// The new MonitoredValue place.
        monitored_to: String,
        /// CurrentValue read at the new place after the move.
        current: u64,
        /// MonitoredValue moved (unchanged).
        monitored: u64,
        /// Whether the CPU was interrupted.
        interrupt: bool,
    },
    /// `QUERY_LOST_SIGNALS` answered: the fences a faulted context's unexecuted work was going
    /// to signal.
    LostSignals {
        /// Context.
        context: u32,
        /// Fences found.
        fences: u32,
    },
    /// A GPU signal that would have moved a registered fence's CurrentValue backwards, refused
    /// (the fence kept its value).
    FenceBackwards {
        /// Fence handle.
        handle: u64,
        /// CurrentValue before.
        from: u64,
        /// The value the signal named.
        to: u64,
        /// Queue whose packet it was.
        queue: u32,
        /// Engine that executed it.
        engine: u32,
        /// Such signals on this device so far, this one included.
        count: u64,
    },
    /// A context faulted.
    Fault {
        /// Context.
        context: u32,
        /// Queue.
        queue: u32,
        /// Reason name (`engine::FaultReason`).
        reason: Name,
        /// Faulting GPU VA.
        address: u64,
        /// For MMU faults, the page walk of `address` (root level first) as far as it got.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        walk: Vec<WalkStep>,
    },
    /// A queue changed state.
    QueueState {
        /// Queue.
        queue: u32,
        /// New state.
        state: Name,
        /// Detail.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// An engine changed power state (or asked to).
    EngineState {
        /// Engine.
        engine: u32,
        /// State name.
        state: Name,
    },
    /// An interrupt record was written.
    Record {
        /// `irq::RecordKind`.
        kind: u32,
        /// Engine.
        engine: u32,
        /// Queue.
        queue: u32,
        /// Context.
        context: u32,
        /// Fence handle.
        fence: u64,
        /// Value.
        value: u64,
        /// Address.
        address: u64,
        /// Detail.
        detail: u32,
    },
    /// The PCI power state changed.
    PowerState {
        /// New state (0 = D0, 3 = D3hot).
        state: u8,
    },
    /// A kind this version does not know (a later format's); never written.
    #[serde(other)]
    Unknown,
}

/// Every kind a record can have, as written (for `--kind`, its help and the documentation
/// check); `unknown` is never written and not listed.
pub const KINDS: &[&str] = &[
    "header",
    "clock",
    "limit_reached",
    "dropped",
    "connection",
    "message",
    "reg_read",
    "reg_write",
    "doorbell",
    "doorbell_wake",
    "mailbox",
    "mailbox_block",
    "interrupt",
    "dma",
    "set_irqs",
    "reset",
    "packet",
    "command_buffer",
    "schedule",
    "fence_decision",
    "fence_registered",
    "fence_monitored_moved",
    "fence_storage_moved",
    "lost_signals",
    "fence_backwards",
    "fault",
    "queue_state",
    "engine_state",
    "record",
    "power_state",
];

impl Event {
    /// The level from which this event is recorded (the tracer's own records: every level).
    pub fn level(&self) -> TraceLevel {
        match self {
            Event::Packet { .. } => TraceLevel::Packets,
            Event::CommandBuffer { .. }
            | Event::Schedule { .. }
            | Event::Message { .. }
            | Event::RegRead { .. }
            | Event::RegWrite { .. }
            | Event::Doorbell { .. }
            | Event::DoorbellWake { .. } => TraceLevel::Commands,
            _ => TraceLevel::Control,
        }
    }

    /// The `event` tag it is written with.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Header(_) => "header",
            Event::Clock { .. } => "clock",
            Event::LimitReached { .. } => "limit_reached",
            Event::Dropped { .. } => "dropped",
            Event::Connection { .. } => "connection",
            Event::Message { .. } => "message",
            Event::RegRead { .. } => "reg_read",
            Event::RegWrite { .. } => "reg_write",
            Event::Doorbell { .. } => "doorbell",
            Event::DoorbellWake { .. } => "doorbell_wake",
            Event::Mailbox { .. } => "mailbox",
            Event::MailboxBlock { .. } => "mailbox_block",
            Event::Interrupt { .. } => "interrupt",
            Event::Dma { .. } => "dma",
            Event::SetIrqs { .. } => "set_irqs",
            Event::Reset { .. } => "reset",
            Event::Packet { .. } => "packet",
            Event::CommandBuffer { .. } => "command_buffer",
            Event::Schedule { .. } => "schedule",
            Event::FenceDecision { .. } => "fence_decision",
            Event::FenceRegistered { .. } => "fence_registered",
            Event::FenceMonitoredMoved { .. } => "fence_monitored_moved",
            Event::FenceStorageMoved { .. } => "fence_storage_moved",
            Event::LostSignals { .. } => "lost_signals",
            Event::FenceBackwards { .. } => "fence_backwards",
            Event::Fault { .. } => "fault",
            Event::QueueState { .. } => "queue_state",
            Event::EngineState { .. } => "engine_state",
            Event::Record { .. } => "record",
            Event::PowerState { .. } => "power_state",
            Event::Unknown => "unknown",
        }
    }
}
