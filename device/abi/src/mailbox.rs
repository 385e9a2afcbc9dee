//! The CMP mailbox: commands the driver hands to the command processor.
//!
//! Protocol: the driver writes an argument block (a [`MailboxHeader`] followed by the command's
//! payload) into guest memory, writes its address to `MB_ARG_LO`/`MB_ARG_HI`, then writes a
//! sequence number to `MB_SUBMIT`. The command processor (never the vfio-user socket thread)
//! reads the block, executes it, writes results into the payload, then writes the header's
//! `status` (release order: payload first), updates `MB_STATUS` and raises the
//! `irq::cause::MAILBOX` interrupt. The interrupt handler reads the status from the block in
//! memory, never from a register. One command is in flight at a time; a submit while busy is
//! dropped (and traced) without touching `MB_STATUS`; [`Status::Busy`] is reserved for that.

use core::mem::size_of;

/// Alignment required of an argument block's guest physical address.
pub const BLOCK_ALIGN: u64 = 8;
/// Largest argument block, header included.
pub const BLOCK_MAX_LEN: u32 = 4096;

/// The one list of the structs an argument block is made of: calls `$m! { MailboxHeader,
/// SelfTestArgs, ... }` with the header, every command's fixed block and the entries that follow
/// a variable one. A side that marks or reads blocks in guest memory (the device's `ByteValued`
/// marks, the module's `FromBytes`/`AsBytes`, the trace decoder's plain reads) writes its impl once
/// over this list instead of keeping a list of its own.
#[macro_export]
macro_rules! for_each_mailbox_block {
    ($m:ident) => {
        $m! { MailboxHeader, SelfTestArgs, ObjectArgs, CreateAddressSpaceArgs, CreateContextArgs, CreateQueueArgs, RegisterFenceArgs, FenceHandleArgs, FenceValuesArgs, FenceValue, DoorbellArgs, SetLogBufferArgs, PowerArgs, SetInterruptRingArgs, QueryQueueArgs, ResetEngineArgs, LostSignalsArgs, MoveMonitoredArgs, PeerSignalsArgs, MoveFenceStorageArgs }
    };
}

/// Header of every argument block.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MailboxHeader {
    /// Command ([`Opcode`]).
    pub opcode: u32,
    /// Length of the block in bytes, header included.
    pub length: u32,
    /// Sequence number; the device copies the `MB_SUBMIT` value here on completion.
    pub seq: u32,
    /// Written by the device last: a [`Status`] value; [`Status::Pending`] until then.
    pub status: u32,
}
const _: () = assert!(size_of::<MailboxHeader>() == 16);

crate::wire_enum! {
    /// Mailbox commands.
    pub enum Opcode {
        /// Raise a chosen MSI-X vector and answer a cookie ([`SelfTestArgs`]).
        SelfTest = 1 => "SELF_TEST",
        /// [`CreateAddressSpaceArgs`]: id 0 is the CMP's system address space.
        CreateAddressSpace = 2 => "CREATE_ADDRESS_SPACE",
        /// [`ObjectArgs`].
        DestroyAddressSpace = 3 => "DESTROY_ADDRESS_SPACE",
        /// [`CreateContextArgs`].
        CreateContext = 4 => "CREATE_CONTEXT",
        /// [`ObjectArgs`]: its queues must be destroyed first.
        DestroyContext = 5 => "DESTROY_CONTEXT",
        /// [`CreateQueueArgs`].
        CreateQueue = 6 => "CREATE_QUEUE",
        /// [`ObjectArgs`]: completes once no engine executes the queue.
        DestroyQueue = 7 => "DESTROY_QUEUE",
        /// [`RegisterFenceArgs`].
        RegisterFence = 8 => "REGISTER_FENCE",
        /// [`FenceHandleArgs`].
        UnregisterFence = 9 => "UNREGISTER_FENCE",
        /// [`FenceValuesArgs`]: set MonitoredValues (write, barrier, read CurrentValue, interrupt
        /// if above), in order.
        UpdateMonitoredValues = 10 => "UPDATE_MONITORED_VALUES",
        /// [`FenceValuesArgs`]: CPU signals: store CurrentValues and release GPU waiters.
        UpdateCurrentValues = 11 => "UPDATE_CURRENT_VALUES",
        /// [`DoorbellArgs`]: connect a physical doorbell to a queue.
        ConnectDoorbell = 12 => "CONNECT_DOORBELL",
        /// [`DoorbellArgs`] (`doorbell` ignored): disconnect the queue's doorbell.
        DisconnectDoorbell = 13 => "DISCONNECT_DOORBELL",
        /// [`ObjectArgs`]: take the context's queues off the runlists.
        SuspendContext = 14 => "SUSPEND_CONTEXT",
        /// [`ObjectArgs`]: put them back; work written meanwhile runs.
        ResumeContext = 15 => "RESUME_CONTEXT",
        /// [`SetLogBufferArgs`].
        SetLogBuffer = 16 => "SET_LOG_BUFFER",
        /// [`ObjectArgs`] (a queue): barrier so every log entry written so far is visible.
        FlushLogs = 17 => "FLUSH_LOGS",
        /// [`PowerArgs`] with `target` = engine: state F0 (0) or F1 (3).
        SetEnginePower = 18 => "SET_ENGINE_POWER",
        /// [`PowerArgs`] (`target` ignored): D0 (0) or D3hot (3).
        SetDevicePower = 19 => "SET_DEVICE_POWER",
        /// [`ObjectArgs`] (a queue): its write index moved (kernel-mode submission).
        KickQueue = 20 => "KICK_QUEUE",
        /// [`SetInterruptRingArgs`].
        SetInterruptRing = 21 => "SET_INTERRUPT_RING",
        /// [`QueryQueueArgs`].
        QueryQueue = 22 => "QUERY_QUEUE",
        /// [`ResetEngineArgs`]: timeout recovery of one engine (ENG-06). The guilty queue (the
        /// one the watchdog stopped, else the one with the longest-running unfinished command
        /// buffer, if at least `min_busy_ms`) has its work dropped and its context faulted with
        /// `FaultReason::EngineReset`; every other queue keeps its work and runs again; the
        /// engine is Active afterwards.
        ResetEngine = 24 => "RESET_ENGINE",
        /// [`FenceHandleArgs`]: "the CurrentValue of this fence changed" — notification only
        /// (XAD-07): the device writes nothing and re-evaluates the hardware queues waiting on
        /// any cross-adapter fence (the fence named and every other), releasing those now
        /// satisfied. The driver sends it when another adapter (or the CPU) changed a
        /// cross-adapter fence's shared CurrentValue; one, naming any of them, covers every
        /// cross-adapter fence that changed before it was sent.
        NotifyFenceChanged = 23 => "NOTIFY_FENCE_CHANGED",
        /// [`LostSignalsArgs`]: which registered fences the unexecuted work of a faulted
        /// context was going to signal (the rest of each queue's current command buffer, the
        /// buffer a hang or `RESET_ENGINE` dropped, and every ring entry not yet read), each
        /// with the highest value that work named. The driver ends the CPU waits those
        /// signals would have satisfied; a fence no lost work names is not reported.
        QueryLostSignals = 25 => "QUERY_LOST_SIGNALS",
        /// [`MoveMonitoredArgs`]: moves a registered native fence's MonitoredValue to a new
        /// place (NF-14: a VRAM MonitoredValue demoted to system memory under local-memory
        /// pressure). Under the fence table's lock the device copies the value from the old
        /// place to the new one and points the registration there; then, after a barrier, it
        /// reads CurrentValue and posts a native-fence record if CurrentValue > MonitoredValue,
        /// so a signal whose decision read the old place is never lost. The old place is free
        /// for the driver once the command completed.
        MoveMonitoredValue = 26 => "MOVE_MONITORED_VALUE",
        /// [`PeerSignalsArgs`] (`CAPS.peer_signals`, XAD-15): this device's peer-signal page and
        /// the other peer-capable devices' pages (`super::peer`). Replaces what was set before;
        /// `own_page` 0 turns peer signals off.
        SetPeerSignals = 27 => "SET_PEER_SIGNALS",
        /// [`MoveFenceStorageArgs`] (`CAPS.fence_storage_move`): moves a registered INTRA_GPU
        /// fence's storage, CurrentValue and MonitoredValue, to new places (NF-18: demoted from
        /// VRAM to system memory under local-memory pressure). Under the fence table's lock the
        /// device copies both values and re-keys the registration by the new CurrentValue
        /// place; then, after a barrier, it reads CurrentValue there and posts a native-fence
        /// record if CurrentValue > MonitoredValue. The driver first quiesces every context
        /// whose address space maps the old CurrentValue (`SUSPEND_CONTEXT`) and points their
        /// page-table entries at the new place before resuming them: the device has no TLB, so
        /// no engine holds a translation of the old place once its contexts are suspended, and
        /// the old places are free for the driver once the command completed.
        MoveFenceStorage = 28 => "MOVE_FENCE_STORAGE",
    }
}

impl Opcode {
    /// Size of this command's fixed argument block (variable commands: without entries).
    pub const fn block_len(self) -> u32 {
        (match self {
            Opcode::SelfTest => size_of::<SelfTestArgs>(),
            Opcode::CreateAddressSpace => size_of::<CreateAddressSpaceArgs>(),
            Opcode::CreateContext => size_of::<CreateContextArgs>(),
            Opcode::CreateQueue => size_of::<CreateQueueArgs>(),
            Opcode::RegisterFence => size_of::<RegisterFenceArgs>(),
            Opcode::UnregisterFence | Opcode::NotifyFenceChanged => size_of::<FenceHandleArgs>(),
            Opcode::UpdateMonitoredValues | Opcode::UpdateCurrentValues => size_of::<FenceValuesArgs>(),
            Opcode::ConnectDoorbell | Opcode::DisconnectDoorbell => size_of::<DoorbellArgs>(),
            Opcode::SetLogBuffer => size_of::<SetLogBufferArgs>(),
            Opcode::SetEnginePower | Opcode::SetDevicePower => size_of::<PowerArgs>(),
            Opcode::SetInterruptRing => size_of::<SetInterruptRingArgs>(),
            Opcode::QueryQueue => size_of::<QueryQueueArgs>(),
            Opcode::ResetEngine => size_of::<ResetEngineArgs>(),
            Opcode::QueryLostSignals => size_of::<LostSignalsArgs>(),
            Opcode::MoveMonitoredValue => size_of::<MoveMonitoredArgs>(),
            Opcode::SetPeerSignals => size_of::<PeerSignalsArgs>(),
            Opcode::MoveFenceStorage => size_of::<MoveFenceStorageArgs>(),
            Opcode::DestroyAddressSpace
            | Opcode::DestroyContext
            | Opcode::DestroyQueue
            | Opcode::SuspendContext
            | Opcode::ResumeContext
            | Opcode::FlushLogs
            | Opcode::KickQueue => size_of::<ObjectArgs>(),
        }) as u32
    }

    /// Whether `length` (from the header) is valid for this command: the fixed size, or for
    /// the fence-value batches and `QUERY_LOST_SIGNALS` the fixed size plus whole entries (checked by the device
    /// against `count`).
    pub const fn is_valid_len(self, length: u32) -> bool {
        match self {
            Opcode::UpdateMonitoredValues | Opcode::UpdateCurrentValues | Opcode::QueryLostSignals => {
                length >= self.block_len()
                    && length <= BLOCK_MAX_LEN
                    && (length - self.block_len()) % size_of::<FenceValue>() as u32 == 0
            }
            _ => length == self.block_len(),
        }
    }
}

crate::wire_enum! {
    /// Completion status of a mailbox command.
    pub enum Status {
        /// Not completed yet.
        Pending = 0 => "PENDING",
        /// Completed successfully.
        Ok = 1 => "OK",
        /// Unknown opcode.
        BadOpcode = 2 => "BAD_OPCODE",
        /// The header's length does not match the opcode or exceeds [`BLOCK_MAX_LEN`].
        BadLength = 3 => "BAD_LENGTH",
        /// The block's address is unaligned or not in guest memory.
        BadAddress = 4 => "BAD_ADDRESS",
        /// A payload field is out of range.
        BadArgument = 5 => "BAD_ARGUMENT",
        /// A command was already in flight.
        Busy = 6 => "BUSY",
        /// The device is disabled (`CONTROL.enable` is clear).
        Disabled = 7 => "DISABLED",
        /// An object id is unknown, already in use, or still referenced.
        BadObject = 8 => "BAD_OBJECT",
        /// A limit (objects, doorbells) is reached.
        NoSpace = 9 => "NO_SPACE",
    }
}

/// `SELF_TEST`: the device writes [`self_test_response`] of `cookie` to `response`, then raises
/// MSI-X vector `vector` (instead of the mailbox vector) with the `MAILBOX` cause.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SelfTestArgs {
    /// Header; `opcode` = [`Opcode::SelfTest`].
    pub header: MailboxHeader,
    /// MSI-X vector to raise; must be below `MSIX_INFO.vectors`.
    pub vector: u32,
    /// Any value chosen by the driver.
    pub cookie: u32,
    /// Written by the device: [`self_test_response`]`(cookie)`.
    pub response: u32,
    /// Reserved, zero.
    pub reserved: u32,
}
const _: () = assert!(size_of::<SelfTestArgs>() == 32);

/// The answer a healthy device gives to a self-test cookie.
pub const fn self_test_response(cookie: u32) -> u32 {
    cookie.rotate_left(8) ^ 0xBE11_BE11
}

/// Arguments naming one object (address space, context or queue) by id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectArgs {
    /// Header.
    pub header: MailboxHeader,
    /// Object id.
    pub id: u32,
    /// Reserved, zero.
    pub reserved: u32,
}
const _: () = assert!(size_of::<ObjectArgs>() == 24);

/// `CREATE_ADDRESS_SPACE`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateAddressSpaceArgs {
    /// Header.
    pub header: MailboxHeader,
    /// Id chosen by the driver (< [`MAX_ADDRESS_SPACES`]); 0 is the system address space.
    pub id: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Guest physical address of the root (level-3) page table, page aligned.
    pub root_pa: u64,
}
const _: () = assert!(size_of::<CreateAddressSpaceArgs>() == 32);

/// `CREATE_CONTEXT`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateContextArgs {
    /// Header.
    pub header: MailboxHeader,
    /// Id chosen by the driver (< [`MAX_CONTEXTS`]).
    pub id: u32,
    /// Its address space (not the system one).
    pub address_space: u32,
}
const _: () = assert!(size_of::<CreateContextArgs>() == 24);

/// `CREATE_QUEUE` flag: user-mode submission (doorbell) queue; without it, kernel-mode
/// (`KICK_QUEUE`).
pub const QUEUE_FLAG_USER_MODE_SUBMISSION: u32 = 1 << 0;
/// [`CreateQueueArgs::flags`]: the driver's paging queue (kernel-mode only). On a device without
/// context save it may run between the parts of another queue's split DMA buffer (SPLIT-04),
/// which no other queue may.
pub const QUEUE_FLAG_PAGING: u32 = 1 << 1;

/// `CREATE_QUEUE`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateQueueArgs {
    /// Header.
    pub header: MailboxHeader,
    /// Id chosen by the driver (< [`MAX_QUEUES`]).
    pub id: u32,
    /// Owning context.
    pub context: u32,
    /// Engine index.
    pub engine: u32,
    /// Priority, 0..=`engine::PRIORITY_MAX`.
    pub priority: u32,
    /// `QUEUE_FLAG_*`.
    pub flags: u32,
    /// Ring entries (power of two, see `ring::is_valid_size`).
    pub ring_entries: u32,
    /// GPU VA of the ring in the context's address space.
    pub ring_va: u64,
    /// GPU VA of the ring-control page in the context's address space.
    pub ring_control_va: u64,
}
const _: () = assert!(size_of::<CreateQueueArgs>() == 56);

/// Where a fence value lives.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FenceLocation {
    /// [`LOCATION_SYSTEM_VA`] or [`LOCATION_VRAM`].
    pub space: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// A GPU VA in the system address space, or a VRAM offset (8-byte aligned).
    pub address: u64,
}
const _: () = assert!(size_of::<FenceLocation>() == 16);

/// [`FenceLocation::space`]: a VA in the system (CMP) address space.
pub const LOCATION_SYSTEM_VA: u32 = 0;
/// [`FenceLocation::space`]: an offset in device memory.
pub const LOCATION_VRAM: u32 = 1;

/// `REGISTER_FENCE`: the device finds a fence by where its CurrentValue lives; a packet names
/// that place by a VA in its own address space, and the MonitoredValue comes only from here.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegisterFenceArgs {
    /// Header.
    pub header: MailboxHeader,
    /// Global handle (non-zero), reported in interrupt records.
    pub handle: u64,
    /// `fence::FenceKind`.
    pub kind: u32,
    /// `REGISTER_*` flags ([`REGISTER_CROSS_ADAPTER`]); other bits zero.
    pub flags: u32,
    /// CurrentValue.
    pub current_value: FenceLocation,
    /// MonitoredValue (ignored for monitored fences).
    pub monitored_value: FenceLocation,
}
const _: () = assert!(size_of::<RegisterFenceArgs>() == 64);

/// `REGISTER_FENCE` flag: a cross-adapter fence (XAD-03). Its CurrentValue may change
/// without this device writing it (another adapter shares the page), so a hardware queue
/// waiting on it is re-evaluated only when this device changes a fence or the driver sends
/// [`Opcode::NotifyFenceChanged`] — never by the device polling the page.
pub const REGISTER_CROSS_ADAPTER: u32 = 1 << 0;

/// `MOVE_MONITORED_VALUE`: fence `handle`'s MonitoredValue moves to `monitored_value`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MoveMonitoredArgs {
    /// Header.
    pub header: MailboxHeader,
    /// Global handle of a registered native fence.
    pub handle: u64,
    /// The new place, as at registration.
    pub monitored_value: FenceLocation,
}
const _: () = assert!(size_of::<MoveMonitoredArgs>() == 40);

/// `MOVE_FENCE_STORAGE`: INTRA_GPU fence `handle`'s CurrentValue and MonitoredValue move to
/// `current_value` and `monitored_value`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MoveFenceStorageArgs {
    /// Header.
    pub header: MailboxHeader,
    /// Global handle of a registered INTRA_GPU fence.
    pub handle: u64,
    /// The new CurrentValue place, as at registration.
    pub current_value: FenceLocation,
    /// The new MonitoredValue place, as at registration.
    pub monitored_value: FenceLocation,
}
const _: () = assert!(size_of::<MoveFenceStorageArgs>() == 56);

/// `UNREGISTER_FENCE` / `NOTIFY_FENCE_CHANGED`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FenceHandleArgs {
    /// Header.
    pub header: MailboxHeader,
    /// Global handle.
    pub handle: u64,
}
const _: () = assert!(size_of::<FenceHandleArgs>() == 24);

/// One entry of a fence-value batch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FenceValue {
    /// Global handle.
    pub handle: u64,
    /// Value.
    pub value: u64,
}
const _: () = assert!(size_of::<FenceValue>() == 16);

/// `UPDATE_MONITORED_VALUES` / `UPDATE_CURRENT_VALUES`: followed by `count` [`FenceValue`]s.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FenceValuesArgs {
    /// Header; `length` = size of this struct + `count` × 16.
    pub header: MailboxHeader,
    /// Entries that follow.
    pub count: u32,
    /// Reserved, zero.
    pub reserved: u32,
}
const _: () = assert!(size_of::<FenceValuesArgs>() == 24);

/// Most entries in one fence-value batch.
pub const FENCE_BATCH_MAX: u32 = (BLOCK_MAX_LEN - size_of::<FenceValuesArgs>() as u32) / size_of::<FenceValue>() as u32;

/// `CONNECT_DOORBELL` / `DISCONNECT_DOORBELL`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DoorbellArgs {
    /// Header.
    pub header: MailboxHeader,
    /// Queue (user-mode submission).
    pub queue: u32,
    /// Physical doorbell index (the global doorbell model always uses 0).
    pub doorbell: u32,
}
const _: () = assert!(size_of::<DoorbellArgs>() == 24);

/// `SET_LOG_BUFFER`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetLogBufferArgs {
    /// Header.
    pub header: MailboxHeader,
    /// Queue.
    pub queue: u32,
    /// `fence::LogKind`.
    pub kind: u32,
    /// GPU VA of the 4 KiB buffer in the system address space (page aligned); 0 removes it.
    pub va: u64,
}
const _: () = assert!(size_of::<SetLogBufferArgs>() == 32);

/// `SET_ENGINE_POWER` / `SET_DEVICE_POWER`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowerArgs {
    /// Header.
    pub header: MailboxHeader,
    /// Engine index (engine power) or ignored.
    pub target: u32,
    /// 0 = F0/D0, 3 = F1/D3hot.
    pub state: u32,
}
const _: () = assert!(size_of::<PowerArgs>() == 24);

/// `SET_INTERRUPT_RING`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetInterruptRingArgs {
    /// Header.
    pub header: MailboxHeader,
    /// Guest physical address of the ring header (page aligned); records follow it.
    pub base_pa: u64,
    /// Record slots (power of two, 2..=4096).
    pub entries: u32,
    /// Reserved, zero.
    pub reserved: u32,
}
const _: () = assert!(size_of::<SetInterruptRingArgs>() == 32);

/// `QUERY_QUEUE`: the device fills everything after `id`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueryQueueArgs {
    /// Header.
    pub header: MailboxHeader,
    /// Queue id.
    pub id: u32,
    /// `engine::QueueState`.
    pub state: u32,
    /// Read index.
    pub read_index: u32,
    /// `engine::FaultReason` of its context's fault, or 0.
    pub fault_reason: u32,
    /// Faulting GPU VA, or 0.
    pub fault_address: u64,
    /// Doorbell index, or `irq::NONE`.
    pub doorbell: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(size_of::<QueryQueueArgs>() == 48);

/// `RESET_ENGINE`: the driver names the engine; the device fills the guilty queue and context
/// (`irq::NONE` for both when no queue had unfinished work: nothing was dropped).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResetEngineArgs {
    /// Header.
    pub header: MailboxHeader,
    /// Engine index.
    pub engine: u32,
    /// A queue is guilty only if the watchdog stopped it or its unfinished command buffer has
    /// executed at least this long (so a queue that merely waited its turn is never blamed).
    pub min_busy_ms: u32,
    /// out: the queue whose work was dropped, or `irq::NONE`.
    pub guilty_queue: u32,
    /// out: its context, now faulted (`FaultReason::EngineReset`), or `irq::NONE`.
    pub guilty_context: u32,
}
const _: () = assert!(size_of::<ResetEngineArgs>() == 32);

/// `QUERY_LOST_SIGNALS`: the driver names a faulted context and leaves room for `capacity`
/// [`FenceValue`]s after this struct (`length` = size of this struct + `capacity` × 16); the
/// device writes `count` of them (global handle, the highest value the context's unexecuted
/// signal packets named for that fence), one per fence, and `total`, the number it found
/// (more than `count` when the room was short). `BAD_OBJECT` for a context that does not
/// exist or is not faulted.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LostSignalsArgs {
    /// Header.
    pub header: MailboxHeader,
    /// The faulted context.
    pub context: u32,
    /// Entries the block has room for.
    pub capacity: u32,
    /// out: entries written.
    pub count: u32,
    /// out: fences found.
    pub total: u32,
}
const _: () = assert!(size_of::<LostSignalsArgs>() == 32);

/// Most entries one `QUERY_LOST_SIGNALS` block has room for.
pub const LOST_SIGNALS_MAX: u32 =
    (BLOCK_MAX_LEN - size_of::<LostSignalsArgs>() as u32) / size_of::<FenceValue>() as u32;

/// Most peer pages `SET_PEER_SIGNALS` names.
pub const MAX_PEER_PAGES: usize = 7;

/// `SET_PEER_SIGNALS`: peer-signal pages (guest physical, page aligned, in guest RAM).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerSignalsArgs {
    /// Header.
    pub header: MailboxHeader,
    /// This device's own page, which it consumes; 0: peer signals off.
    pub own_page: u64,
    /// Entries of `peers` in use.
    pub peer_count: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// The other peer-capable devices' pages, which this device's signals of cross-adapter
    /// fences produce into.
    pub peers: [u64; MAX_PEER_PAGES],
}
const _: () = assert!(size_of::<PeerSignalsArgs>() == 88);

/// Most address spaces.
pub const MAX_ADDRESS_SPACES: u32 = 256;
/// Most contexts.
pub const MAX_CONTEXTS: u32 = 256;
/// Most hardware queues.
pub const MAX_QUEUES: u32 = 1024;
/// Most registered fences.
pub const MAX_FENCES: u32 = 1 << 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_and_statuses_round_trip() {
        assert_eq!(Opcode::try_from(Opcode::SelfTest as u32), Ok(Opcode::SelfTest));
        assert_eq!(Opcode::try_from(0).map_err(|e| e.raw), Err(0));
        for raw in 0..10 {
            assert_eq!(Status::try_from(raw).map(|s| s as u32), Ok(raw));
        }
        assert_eq!(Status::try_from(10).map_err(|e| e.raw), Err(10));
        for raw in 1..=27 {
            assert_eq!(Opcode::try_from(raw).map(|op| op as u32), Ok(raw));
        }
        for &op in Opcode::ALL {
            assert_eq!(Opcode::try_from(op as u32), Ok(op));
            assert!(op.block_len() as usize >= size_of::<MailboxHeader>());
            assert!(op.block_len() % 8 == 0, "{}", op.name());
        }
    }

    #[test]
    fn the_block_list_holds_every_commands_block() {
        macro_rules! sizes {
            ($($name:ident),*) => {
                [$(size_of::<$name>()),*]
            };
        }
        let sizes = for_each_mailbox_block!(sizes);
        for &op in Opcode::ALL {
            assert!(sizes.contains(&(op.block_len() as usize)), "{}: no block of its size is listed", op.name());
        }
    }

    #[test]
    fn self_test_response_is_not_the_cookie() {
        for cookie in [0, 1, 0xBE11_BE11, u32::MAX] {
            assert_ne!(self_test_response(cookie), cookie);
        }
    }
}
